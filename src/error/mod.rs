//! Errors and per-master outcomes (docs/design.md §9).
//!
//! Every multi-master operation reports what each master did ([`MasterReport`]), so a
//! failed acquire says *why*: held by another client, masters unreachable, or validity used
//! up — never one opaque "no quorum".
//!
//! Layer: a leaf (docs/design.md §10); it must not use any other module.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use shown::{OneLine, ShortName, breaks_a_line, human};

/// What one master did in one quorum round.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum MasterOutcome {
    /// The master did what was asked: set the key (acquire), extended it (extend), or
    /// deleted it (release).
    Granted,
    /// The key holds another client's value: the lock is held by someone else there.
    HeldByOther,
    /// The key does not exist on the master (it expired, was never set, or was deleted).
    Missing,
    /// The master could not be asked or did not answer in time.
    Failed(MasterError),
    /// The master had not answered when the round was decided. Its reply is still
    /// collected in the background so that cleanup reaches it.
    Pending,
    /// The master answered but does not vote: restart quarantine keeps it out until
    /// every lock it may have forgotten has expired, at the instant given.
    Abstained {
        /// When it votes again (as far as is known now).
        until: tokio::time::Instant,
    },
    /// Fencing write-back: the master's counter was already at or above the token; the
    /// token is raised past it and the write-back repeated.
    FenceConflict {
        /// The master's counter.
        counter: u64,
    },
}

impl MasterOutcome {
    /// Whether the master did what was asked.
    pub fn is_granted(&self) -> bool {
        matches!(self, MasterOutcome::Granted)
    }
}

impl fmt::Display for MasterOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MasterOutcome::Granted => f.write_str("granted"),
            MasterOutcome::HeldByOther => f.write_str("held by another client"),
            MasterOutcome::Missing => f.write_str("key missing"),
            MasterOutcome::Failed(e) => write!(f, "failed: {e}"),
            MasterOutcome::Pending => f.write_str("no reply before the round was decided"),
            MasterOutcome::Abstained { until } => write!(
                f,
                "abstains (restart quarantine) for {}",
                human(until.saturating_duration_since(tokio::time::Instant::now()))
            ),
            MasterOutcome::FenceConflict { counter } => {
                write!(f, "fence counter already at {counter}")
            }
        }
    }
}

/// One master's outcome in a round, with the master's address (password redacted).
#[derive(Debug, Clone)]
pub struct MasterReport {
    master: Arc<str>,
    outcome: MasterOutcome,
}

impl MasterReport {
    pub(crate) fn new(master: Arc<str>, outcome: MasterOutcome) -> Self {
        Self { master, outcome }
    }

    /// The master's address as configured, with any password replaced by `***`.
    pub fn master(&self) -> &str {
        &self.master
    }

    /// What the master did.
    pub fn outcome(&self) -> &MasterOutcome {
        &self.outcome
    }
}

impl fmt::Display for MasterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.master, self.outcome)
    }
}

/// The kind of a [`MasterError`]: why one master failed.
///
/// Six names are shared with [`ErrorKind`], each meaning one cause: `Auth`, `Tls`,
/// `Misconfigured`, `ClusterMismatch`, `WrongKind` and `LimitMismatch` here say that one
/// master failed for that cause; the [`ErrorKind`] of the same name says that an operation
/// failed because of masters that failed for it (see each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MasterErrorKind {
    /// The master is known to be down (its connection broke or was refused); it is being
    /// reconnected in the background and was not asked.
    Down,
    /// The connection was refused.
    Refused,
    /// The master did not answer within the node timeout.
    Timeout,
    /// The connection failed or broke while asking.
    Io,
    /// Authentication failed (wrong user or password, or missing ACL permissions).
    Auth,
    /// A lock script failed on the master.
    Script,
    /// The master answered something the lock protocol does not expect.
    Protocol,
    /// Any other error reported by the master or the client library.
    Other,
    /// Restart quarantine: the master may have lost lock keys and does not vote yet.
    Abstained,
    /// The master is unfit to hold locks, and will be until its configuration or data is
    /// changed: its configuration can lose lock keys (an evicting `maxmemory-policy`); it
    /// is not durable where fencing tokens need it to be; or it has no cluster record in an
    /// initialised cluster (or carries another member's), so this client cannot tell which
    /// member it is. It never votes for this client.
    Misconfigured,
    /// The master's cluster record does not agree with this client's configuration (other
    /// masters, quorum, `ttl_max`, drift factor or key prefix), or this client reaches it
    /// twice: it never votes for this client.
    ClusterMismatch,
    /// The name holds another kind of lock than the one asked for.
    WrongKind,
    /// The master stores another limit for the semaphore than this client's
    /// (docs/design.md §15).
    LimitMismatch,
    /// The TLS handshake failed: the master's certificate is not trusted (signed by
    /// another CA than the one given, expired, or not issued for the host in its URL), the
    /// master refused this client's certificate or asked for one, or the peer answered
    /// something other than TLS. Permanent until a certificate or a setting is changed. A
    /// handshake that the network breaks or stalls is [`Io`](Self::Io) or
    /// [`Timeout`](Self::Timeout) instead.
    Tls,
}

impl MasterErrorKind {
    /// Whether the failure lasts until someone changes a configuration: the client's (a
    /// wrong password in the URL) or the master's (ACLs, an evicting `maxmemory-policy`).
    /// Retrying does not help; [`Auth`](Self::Auth), [`Tls`](Self::Tls),
    /// [`Misconfigured`](Self::Misconfigured), [`ClusterMismatch`](Self::ClusterMismatch),
    /// [`WrongKind`](Self::WrongKind) and [`LimitMismatch`](Self::LimitMismatch) are
    /// permanent.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            MasterErrorKind::Auth
                | MasterErrorKind::Tls
                | MasterErrorKind::Misconfigured
                | MasterErrorKind::ClusterMismatch
                | MasterErrorKind::WrongKind
                | MasterErrorKind::LimitMismatch
        )
    }
}

/// Why one master failed in a round.
#[derive(Debug, Clone)]
pub struct MasterError {
    kind: MasterErrorKind,
    message: Arc<str>,
    source: Option<Arc<redis::RedisError>>,
    until: Option<tokio::time::Instant>,
}

impl MasterError {
    pub(crate) fn new(kind: MasterErrorKind, message: impl Into<Arc<str>>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
            until: None,
        }
    }

    /// A master in restart quarantine until `until`.
    pub(crate) fn abstained(until: tokio::time::Instant, why: impl Into<Arc<str>>) -> Self {
        Self {
            until: Some(until),
            ..Self::new(MasterErrorKind::Abstained, why)
        }
    }

    /// When an abstaining master votes again.
    pub(crate) fn abstains_until(&self) -> Option<tokio::time::Instant> {
        self.until
    }

    pub(crate) fn from_redis(err: redis::RedisError) -> Self {
        use redis::ErrorKind as K;
        #[cfg(feature = "tls")]
        if let Some(tls) = tls_failure(&err) {
            return Self {
                kind: MasterErrorKind::Tls,
                message: tls.into(),
                source: Some(Arc::new(err)),
                until: None,
            };
        }
        // The decoder's complaint about bytes that are no Redis reply at all (not a reply
        // of an unexpected type): several lines that say nothing of the likely cause.
        if err.kind() == K::Parse && err.to_string().contains("Parse error at") {
            return Self {
                kind: MasterErrorKind::Protocol,
                message: "the peer does not speak the Redis protocol (is the port right?): \
                          check the host and port in the master's URL"
                    .into(),
                source: Some(Arc::new(err)),
                until: None,
            };
        }
        let kind = if err.is_connection_refusal() {
            MasterErrorKind::Refused
        } else if err.is_timeout() {
            MasterErrorKind::Timeout
        } else if err.is_io_error() || err.is_connection_dropped() {
            MasterErrorKind::Io
        } else {
            // The redis client reports `NOAUTH` and `WRONGPASS` as extension errors: known
            // by their code only.
            let auth_code = err
                .code()
                .is_some_and(|c| c.starts_with("NOAUTH") || c.starts_with("WRONGPASS"));
            match err.kind() {
                K::AuthenticationFailed => MasterErrorKind::Auth,
                _ if auth_code => MasterErrorKind::Auth,
                K::Parse | K::UnexpectedReturnType => MasterErrorKind::Protocol,
                K::Server(redis::ServerErrorKind::NoPerm) => MasterErrorKind::Auth,
                // The ACL refusing a command or a key inside a script: Redis reports it as
                // the script's error, with its own words.
                K::Server(_) if refused_by_acl(&err.to_string()) => MasterErrorKind::Auth,
                K::Server(redis::ServerErrorKind::NoScript) => MasterErrorKind::Script,
                K::Server(_) if err.to_string().contains("script") => MasterErrorKind::Script,
                _ => MasterErrorKind::Other,
            }
        };
        Self {
            kind,
            message: err.to_string().into(),
            source: Some(Arc::new(err)),
            until: None,
        }
    }

    /// The same error with `note` added to its message.
    pub(crate) fn with_note(mut self, note: &str) -> Self {
        self.message = format!("{}{note}", self.message).into();
        self
    }

    /// The same error, kind and cause, with `message` in place of its message.
    pub(crate) fn with_message(mut self, message: impl Into<Arc<str>>) -> Self {
        self.message = message.into();
        self
    }

    /// Whether the master's host name could not be resolved to an address: the
    /// resolver's answer (which the standard library words "failed to lookup address
    /// information"), or a name with no address.
    pub(crate) fn is_unresolved(&self) -> bool {
        self.source.as_deref().is_some_and(|err| {
            let text = err.to_string();
            text.contains("failed to lookup address information")
                || text.contains("No address found for host")
        })
    }

    /// What went wrong, coarsely.
    pub fn kind(&self) -> MasterErrorKind {
        self.kind
    }

    /// Whether the master refused the command because the key holds another type of
    /// value (its `WRONGTYPE` error code, not its text).
    pub(crate) fn is_wrong_type(&self) -> bool {
        self.source
            .as_deref()
            .is_some_and(|e| e.code() == Some("WRONGTYPE"))
    }

    /// Whether the connection to this master is broken, so that it should be reconnected.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(self.kind, MasterErrorKind::Refused | MasterErrorKind::Io)
    }
}

impl fmt::Display for MasterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for MasterError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another client holds the lock on enough masters that no quorum was possible.
    Contended,
    /// Too many masters failed or did not answer for a quorum to be reached: down,
    /// unreachable, unresolvable or timing out. Also how a waiting acquire ends when its
    /// wait budget runs out and its last attempt failed so, whether or not a master
    /// refused the lock earlier in the wait (the detail says which): an outage, never
    /// [`WaitTimeout`](Self::WaitTimeout). Retryable.
    NoQuorum,
    /// A quorum granted the lock, but the time it took used up the lock's validity, so it
    /// was released again.
    ValidityExhausted,
    /// The wait budget ran out while the lock was held by another client: the last
    /// attempt was refused ([`Contended`](Self::Contended)). A wait whose last attempt
    /// failed otherwise ends with that failure's kind instead ([`NoQuorum`](Self::NoQuorum)
    /// when the masters are down). Retryable.
    WaitTimeout,
    /// The lease is lost: it expired, or an extension did not reach a quorum in time.
    LeaseLost,
    /// Per-call options that do not fit the client's configuration.
    InvalidOptions,
    /// A setting given to the [`Builder`](crate::Builder) cannot work, found by
    /// [`Builder::build`](crate::Builder::build) before any lock is attempted:
    /// [`Error::setting`] names it (the first one, when several cannot work), the message
    /// says what to change, and [`Error::problems`] gives each problem as an error of its
    /// own. Not retryable: change the setting.
    InvalidConfig,
    /// The lock was granted, but no quorum confirmed a fencing token within its validity;
    /// the lock was released again.
    FencingFailed,
    /// Masters that fail for good ([`MasterErrorKind::Auth`], [`MasterErrorKind::Tls`],
    /// [`MasterErrorKind::Misconfigured`]) leave no quorum, and some of them refused
    /// authentication (wrong user or password in the URL, or missing ACL permissions,
    /// also for a command or key inside the lock's scripts) while none failed the TLS
    /// handshake; for `init_cluster` and a force-unlock, which need every master or
    /// `n - quorum + 1` of them, as soon as too few are left. Not retryable: fix the URLs
    /// or the masters' ACLs; the detail names each master and what to change.
    Auth,
    /// The resource name is empty, longer than
    /// [`MAX_RESOURCE_LEN`](crate::limits::MAX_RESOURCE_LEN) bytes, or makes a key (behind
    /// the key prefix) that begins with `redquorum:`, where the lock's own records live.
    /// Not retryable: name the resource (a long name can be hashed).
    InvalidResource,
    /// Called outside a tokio runtime. Not retryable: call it from inside one, with time
    /// and I/O enabled (tokio features `rt`, `time`, `net`, `macros`; `#[tokio::main]`).
    NoRuntime,
    /// Too few masters vote yet for a quorum: the others are in restart quarantine, because
    /// they may have lost lock keys (new masters abstain once, for `ttl_max`). Retryable:
    /// [`Error::retry_after`] says when enough of them vote again.
    NotEnoughVoters,
    /// So many masters are unfit ([`MasterErrorKind::Misconfigured`]: an evicting
    /// `maxmemory-policy`, which can lose lock keys; for fencing tokens, masters that are
    /// not durable; no cluster record this client can place) that no quorum is possible,
    /// and that will not change by itself; no master among those that fail for good
    /// refused this client's credentials or permissions ([`ErrorKind::Auth`]) or failed
    /// the TLS handshake. Not retryable: the masters' reports say which, and what to
    /// change.
    Misconfigured,
    /// A master failed with [`MasterErrorKind::ClusterMismatch`], a refusal no quorum
    /// outvotes: its cluster record does not agree with this client's configuration: the
    /// masters, the quorum, `ttl_max`, the drift factor or the key prefix differ from those
    /// the cluster was initialised with ([`Redlock::init_cluster`](crate::Redlock::init_cluster)),
    /// or one server is listed twice. Every grant of the attempt was released. Not
    /// retryable: the masters' reports name each master and the difference.
    ClusterMismatch,
    /// A master failed with [`MasterErrorKind::WrongKind`]: the name holds another kind of
    /// lock (a semaphore, a read-write lock) than the one asked for. Not retryable: use
    /// another name, or the kind that holds it.
    WrongKind,
    /// A master failed with [`MasterErrorKind::LimitMismatch`]: it stores another limit
    /// for the semaphore than this client's
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)), whether permits are held or
    /// not: clients of one semaphore disagree on its limit. The attempt's grants were
    /// released and nothing is held. Not retryable: give this client the stored limit (the
    /// detail names both), or change the stored one with
    /// [`Semaphore::replace_limit`](crate::Semaphore::replace_limit).
    LimitMismatch,
    /// [`Redlock::init_cluster`](crate::Redlock::init_cluster) found a key under the prefix
    /// on a master of an uninitialised cluster: only brand-new masters are bootstrapped.
    /// Nothing was written. Not retryable as it stands: let the locks expire or use a fresh
    /// prefix; the detail names each master and a key it holds.
    ClusterNotEmpty,
    /// Masters that fail for good ([`MasterErrorKind::Tls`], [`MasterErrorKind::Auth`],
    /// [`MasterErrorKind::Misconfigured`]) leave no quorum, and some of them failed the TLS
    /// handshake ([`MasterErrorKind::Tls`]): a certificate
    /// signed by another CA than the one given to the builder, not issued for the host in
    /// the URL, or expired; a client certificate the master refused or requires; or a peer
    /// that answered something other than TLS. Not retryable: the masters' reports name
    /// each master and what to change.
    Tls,
    /// This client already holds the resource, with a lease it has not released or
    /// dropped: acquiring it again would wait for this client's own lease to run out.
    /// Nothing was sent to any master. Not retryable: re-enter the held lease with
    /// [`Lease::reenter`](crate::Lease::reenter), or release it first (docs/design.md §14).
    /// Also a write acquire of a read-write lock this client holds for reading: upgrades
    /// are refused.
    AlreadyHeld,
}

/// An error from acquiring, extending or releasing a lock, with every master's outcome.
///
/// Match on [`Error::kind`] to decide what to do; [`Error::masters`] tells what each
/// master did in the last round, and [`Error::is_retryable`] whether trying again later can
/// succeed.
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    resource: Arc<str>,
    detail: Option<Arc<str>>,
    masters: Vec<MasterReport>,
    attempts: u32,
    retry_at: Option<tokio::time::Instant>,
    /// What an [`ErrorKind::InvalidConfig`] is about; kept behind a pointer so that the
    /// errors of every other kind stay small.
    config: Option<Arc<ConfigProblem>>,
}

/// The setting an [`ErrorKind::InvalidConfig`] is about, and each problem when several
/// settings cannot work.
#[derive(Debug)]
struct ConfigProblem {
    setting: Option<&'static str>,
    /// Each problem, each an [`ErrorKind::InvalidConfig`] error; empty for one problem.
    problems: Vec<Error>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, resource: impl Into<Arc<str>>) -> Self {
        Self {
            kind,
            resource: resource.into(),
            detail: None,
            masters: Vec::new(),
            attempts: 0,
            retry_at: None,
            config: None,
        }
    }

    /// A setting that cannot work ([`ErrorKind::InvalidConfig`]): `message` says what is
    /// wrong and what to change.
    pub(crate) fn invalid_config(setting: Option<&'static str>, message: String) -> Self {
        Self {
            config: Some(Arc::new(ConfigProblem {
                setting,
                problems: Vec::new(),
            })),
            ..Self::new(ErrorKind::InvalidConfig, "").with_detail(message)
        }
    }

    /// Several settings that cannot work, each an [`ErrorKind::InvalidConfig`] error, in
    /// the order they were checked (at least two).
    pub(crate) fn invalid_configs(problems: Vec<Error>) -> Self {
        let listed = problems
            .iter()
            .enumerate()
            .map(|(i, problem)| format!("({}) {}", i + 1, problem.detail().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("; ");
        let message = format!("{} settings cannot work: {listed}", problems.len());
        Self {
            config: Some(Arc::new(ConfigProblem {
                setting: problems.first().and_then(|p| p.setting()),
                problems,
            })),
            ..Self::new(ErrorKind::InvalidConfig, "").with_detail(message)
        }
    }

    /// Trying again before `at` cannot succeed.
    pub(crate) fn with_retry_at(mut self, at: tokio::time::Instant) -> Self {
        self.retry_at = Some(at);
        self
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<Arc<str>>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub(crate) fn with_masters(mut self, masters: Vec<MasterReport>) -> Self {
        self.masters = masters;
        self
    }

    pub(crate) fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// The detail after the kind's words in the message, if any: what went wrong and,
    /// where something must change, what to change.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The resource (lock name, without the key prefix) the operation was about.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The setting an [`ErrorKind::InvalidConfig`] error is about, as its errors name it
    /// (`ttl`, `node_timeout`, `retry_delay`, `masters`, …; each setter's documentation
    /// gives its name): the first one when several cannot work. `None` for other kinds.
    ///
    /// ```
    /// use redquorum::{ErrorKind, Redlock, Timeouts};
    ///
    /// let err = Redlock::builder()
    ///     .master("redis://127.0.0.1:7001")
    ///     .timeouts(Timeouts::new().node("0s"))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    /// assert_eq!(err.setting(), Some("node_timeout"));
    /// ```
    pub fn setting(&self) -> Option<&'static str> {
        self.config.as_ref().and_then(|c| c.setting)
    }

    /// Every problem [`Builder::build`](crate::Builder::build) found, in the order the
    /// settings are checked, each an [`ErrorKind::InvalidConfig`] error with its own
    /// [`setting`](Error::setting) and message: this error alone when there is one (and for
    /// every other kind of error), or each of several, which this error's message lists.
    ///
    /// ```
    /// use redquorum::{ErrorKind, Redlock};
    ///
    /// let err = Redlock::builder().ttl("0s").build().unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    /// let settings: Vec<_> = err.problems().iter().map(|p| p.setting()).collect();
    /// assert_eq!(settings, [Some("masters"), Some("ttl")]);
    /// ```
    pub fn problems(&self) -> &[Error] {
        match &self.config {
            Some(config) if !config.problems.is_empty() => &config.problems,
            _ => std::slice::from_ref(self),
        }
    }

    /// Each master's outcome in the last round (empty when no round was run).
    pub fn masters(&self) -> &[MasterReport] {
        &self.masters
    }

    /// How many acquire attempts were made (0 for extend and release).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether a later attempt can succeed: the lock was busy, masters were unreachable
    /// or still in restart quarantine, or time ran out. A lost lease, invalid settings,
    /// options or resource names, a missing runtime, and masters that refuse
    /// authentication, fail the TLS handshake or are misconfigured are not retryable:
    /// something must change first.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Contended
                | ErrorKind::NoQuorum
                | ErrorKind::ValidityExhausted
                | ErrorKind::WaitTimeout
                | ErrorKind::FencingFailed
                | ErrorKind::NotEnoughVoters
        )
    }

    /// How long to wait before trying again can succeed, when that is known: for
    /// [`ErrorKind::NotEnoughVoters`], until enough masters left restart quarantine.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_at
            .map(|at| at.saturating_duration_since(tokio::time::Instant::now()))
    }

    fn count(&self, f: impl Fn(&MasterOutcome) -> bool) -> usize {
        self.masters.iter().filter(|r| f(r.outcome())).count()
    }
}

impl fmt::Debug for Error {
    // Hand-written: a long resource name is shortened as in `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("resource", &format_args!("{}", ShortName(&self.resource)))
            .field("detail", &self.detail)
            .field("masters", &self.masters)
            .field("attempts", &self.attempts)
            .field("setting", &self.setting())
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = ShortName(&self.resource);
        match self.kind {
            ErrorKind::Contended => write!(f, "lock {r} is held by another client")?,
            ErrorKind::NoQuorum => write!(f, "no quorum of masters reachable for {r}")?,
            ErrorKind::FencingFailed => write!(f, "no fencing token could be issued for {r}")?,
            ErrorKind::ValidityExhausted => write!(
                f,
                "lock {r} was granted by a quorum too late: its validity was used up"
            )?,
            ErrorKind::WaitTimeout => write!(f, "gave up waiting for lock {r}")?,
            ErrorKind::LeaseLost => write!(f, "lease on {r} is lost")?,
            ErrorKind::InvalidOptions => write!(f, "invalid options for {r}")?,
            ErrorKind::InvalidConfig => f.write_str("invalid configuration")?,
            ErrorKind::Auth => write!(
                f,
                "masters refused this client's credentials or permissions for {r}"
            )?,
            ErrorKind::Tls => write!(f, "TLS to the masters failed for {r}")?,
            ErrorKind::InvalidResource => write!(f, "invalid resource name {r}")?,
            ErrorKind::NoRuntime => write!(f, "no tokio runtime to lock {r}")?,
            ErrorKind::NotEnoughVoters => write!(
                f,
                "not enough masters vote yet for {r}{}",
                self.retry_at.map_or(String::new(), |at| format!(
                    " (enough vote again in {})",
                    human(at.saturating_duration_since(tokio::time::Instant::now()))
                ))
            )?,
            ErrorKind::Misconfigured => {
                write!(f, "too many masters are unfit to hold lock {r}")?;
            }
            ErrorKind::ClusterMismatch => write!(
                f,
                "this client's configuration does not agree with its cluster's record for {r}"
            )?,
            ErrorKind::WrongKind => write!(f, "{r} holds another kind of lock")?,
            ErrorKind::LimitMismatch => {
                write!(f, "semaphore {r} has another limit")?;
            }
            ErrorKind::AlreadyHeld => write!(f, "refused to acquire lock {r}")?,
            ErrorKind::ClusterNotEmpty => {
                write!(
                    f,
                    "masters hold keys, so the cluster ({r}) cannot be bootstrapped"
                )?;
            }
        }
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        if !self.masters.is_empty() {
            write!(
                f,
                " ({} of {} masters granted, {} held by another, {} failed, {} pending",
                self.count(MasterOutcome::is_granted),
                self.masters.len(),
                self.count(|o| matches!(o, MasterOutcome::HeldByOther)),
                self.count(|o| matches!(o, MasterOutcome::Failed(_))),
                self.count(|o| matches!(o, MasterOutcome::Pending)),
            )?;
            let abstained = self.count(|o| matches!(o, MasterOutcome::Abstained { .. }));
            if abstained > 0 {
                write!(f, ", {abstained} abstaining (restart quarantine)")?;
            }
            let missing = self.count(|o| matches!(o, MasterOutcome::Missing));
            if missing > 0 {
                write!(f, ", {missing} without the key")?;
            }
            let ahead = self.count(|o| matches!(o, MasterOutcome::FenceConflict { .. }));
            if ahead > 0 {
                write!(f, ", {ahead} with a fence counter at or past the token")?;
            }
            if self.attempts > 1 {
                write!(f, "; {} attempts", self.attempts)?;
            }
            f.write_str(")")?;
            // Each failed master with its error, unless the detail already gave it as
            // "<master>: <error>", or in a group "<master>, <master>: <error>" (the unfit
            // masters of a permanent failure, the masters of one failed TLS handshake,
            // the "(<master>: <error>; ...)" of an `init_cluster` that needs them all),
            // the whole error: where the detail's text goes on, it may be another one.
            let said = |master: &str, error: &MasterError| {
                let Some(detail) = self.detail.as_deref() else {
                    return false;
                };
                let given = format!(": {error}");
                detail.match_indices(&given).any(|(at, _)| {
                    let (named, after) = (&detail[..at], &detail[at + given.len()..]);
                    let whole = after.is_empty() || after.starts_with([';', ')']);
                    let group = named.rsplit_once("; ").map_or(named, |(_, group)| group);
                    let alone = named
                        .strip_suffix(master)
                        .is_some_and(|before| before.is_empty() || before.ends_with(['(', ' ']));
                    whole && (alone || group.split(", ").any(|m| m == master))
                })
            };
            let failed: Vec<String> = self
                .masters
                .iter()
                .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(e) if !said(r.master(), e)))
                .map(ToString::to_string)
                .collect();
            if !failed.is_empty() {
                write!(f, "; {}", failed.join("; "))?;
            }
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.masters.iter().find_map(|r| match r.outcome() {
            MasterOutcome::Failed(e) => Some(e as &(dyn StdError + 'static)),
            _ => None,
        })
    }
}

/// Whether a server's error `text` is its ACL refusing a command, a key or a channel to
/// the user that runs a script. Outside a script the error code is `NOPERM`; inside one,
/// Redis 6.0 to 7.0 say "The user executing the script can't …" and Redis 7.2 on (and
/// Valkey) "ACL failure in script: …".
pub(crate) fn refused_by_acl(text: &str) -> bool {
    text.contains("The user executing the script can't") || text.contains("ACL failure in script:")
}

mod shown;
#[cfg(test)]
mod tests;
#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tls")]
use tls::tls_failure;
