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

/// The kind of a [`MasterError`].
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
    /// The master's configuration can lose lock keys (an evicting `maxmemory-policy`), so
    /// it never votes.
    Misconfigured,
    /// The master's cluster record does not agree with this client's configuration (other
    /// masters, quorum, `ttl_max`, drift factor or key prefix), or this client reaches it
    /// twice, or it lost its record in an initialised cluster and this client cannot tell
    /// which member it was: it never votes for this client.
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
    /// [`Misconfigured`](Self::Misconfigured), [`ClusterMismatch`](Self::ClusterMismatch)
    /// and [`WrongKind`](Self::WrongKind) are permanent.
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

/// The TLS failure inside `err`, if it is one: what went wrong and what to change.
///
/// The rustls error travels inside the I/O error of the handshake (or, for settings the
/// redis client refuses, as its own source). A rustls error is a fault of certificates or
/// settings, not of the network: it does not heal by retrying.
#[cfg(feature = "tls")]
fn tls_failure(err: &redis::RedisError) -> Option<String> {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};

    let mut cause: Option<&(dyn StdError + 'static)> = StdError::source(err);
    let mut found = None;
    while let Some(mut e) = cause {
        // The redis client keeps its causes behind an `Arc`, whose `source` would skip
        // the error the `io::Error` wraps: look inside it.
        if let Some(inner) = e.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
            e = &**inner;
        }
        if let Some(tls) = e.downcast_ref::<Tls>() {
            found = Some(tls);
            break;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<Tls>())
        {
            found = Some(tls);
            break;
        }
        if e.downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
            .is_some()
        {
            return Some(format!(
                "TLS: the host in the URL is not a valid DNS name or IP address ({err}): \
                 fix the master's URL"
            ));
        }
        cause = e.source();
    }
    let tls = found?;
    let advice = match tls {
        Tls::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
            "the master's certificate is not signed by a trusted CA: give the CA that signed \
             it with Tls::ca_pem or Tls::ca_file (or install it in the \
             system's trust store)"
        }
        Tls::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            "the master's certificate is not issued for the host in its URL: connect by a name \
             or address the certificate lists, or get a certificate that names this host"
        }
        Tls::InvalidCertificate(
            Cert::Expired | Cert::ExpiredContext { .. } | Cert::NotValidYet,
        )
        | Tls::InvalidCertificate(Cert::NotValidYetContext { .. }) => {
            "the master's certificate is outside its validity period: renew it (or fix the \
             clock)"
        }
        Tls::InvalidCertificate(_) | Tls::NoCertificatesPresented => {
            "the master's certificate cannot be used: check its certificate and the CA given \
             to the builder"
        }
        Tls::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::AccessDenied,
        ) => {
            "the master refused this client's certificate (or wants one): give a client \
             certificate its tls-ca-cert-file trusts with Tls::client_cert_pem or \
             Tls::client_cert_files"
        }
        Tls::InvalidMessage(_) | Tls::InappropriateMessage { .. } => {
            "the peer does not answer in TLS on this port: use redis:// for a port without \
             TLS, or the master's tls-port"
        }
        _ => "check the master's TLS settings and the certificates given to the builder",
    };
    Some(format!("TLS handshake failed ({tls}): {advice}"))
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
    /// The lock was granted, but no quorum confirmed a fencing token within its validity;
    /// the lock was released again.
    FencingFailed,
    /// So many masters refused authentication (wrong user or password in the URL, or
    /// missing ACL permissions) that no quorum is possible. Not retryable: fix the URLs or
    /// the masters' ACLs.
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
    /// So many masters are unfit for what was asked that no quorum is possible, and that
    /// will not change by itself: an evicting `maxmemory-policy` (which can lose lock keys),
    /// or, for fencing tokens, masters that are not durable. Not retryable: the masters'
    /// reports say which, and what to change.
    Misconfigured,
    /// A master's cluster record does not agree with this client's configuration: the
    /// masters, the quorum, `ttl_max`, the drift factor or the key prefix differ from those
    /// the cluster was initialised with ([`Redlock::init_cluster`](crate::Redlock::init_cluster)),
    /// or one server is listed twice. Every grant of the attempt was released. Not
    /// retryable: the masters' reports name each master and the difference.
    ClusterMismatch,
    /// The name holds another kind of lock (a semaphore, a read-write lock) than the one
    /// asked for. Not retryable: use another name, or the kind that holds it.
    WrongKind,
    /// A master stores another limit for the semaphore than this client's
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
    /// So many masters failed the TLS handshake that no quorum is possible: a certificate
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

    /// The detail after the kind's words in the message, if any.
    pub(crate) fn detail(&self) -> Option<&str> {
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

    /// Each master's outcome in the last round (empty when no round was run).
    pub fn masters(&self) -> &[MasterReport] {
        &self.masters
    }

    /// How many acquire attempts were made (0 for extend and release).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether a later attempt can succeed: the lock was busy, masters were unreachable
    /// or still in restart quarantine, or time ran out. A lost lease, invalid options or
    /// resource names, a missing runtime, and masters that refuse authentication, fail
    /// the TLS handshake or are misconfigured are not retryable: something must change
    /// first.
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
            ErrorKind::Auth => write!(f, "masters refused authentication for {r}")?,
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
            if self.attempts > 1 {
                write!(f, "; {} attempts", self.attempts)?;
            }
            f.write_str(")")?;
            let failed: Vec<String> = self
                .masters
                .iter()
                .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(_)))
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

/// How many bytes of a long resource name messages show.
const SHOWN_NAME_BYTES: usize = 64;

/// A resource name as messages show it: quoted, and when long, its first
/// [`SHOWN_NAME_BYTES`] (cut on a character boundary) and its length.
pub(crate) struct ShortName<'a>(pub(crate) &'a str);

impl fmt::Display for ShortName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0;
        if name.len() <= SHOWN_NAME_BYTES {
            return write!(f, "{name:?}");
        }
        let mut end = SHOWN_NAME_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let shown = format!("{}…", name.get(..end).unwrap_or_default());
        write!(f, "{shown:?} ({} bytes)", name.len())
    }
}

/// Durations in errors and reports, printed the way people write them (`1.5s`, `250ms`).
pub(crate) fn human(d: Duration) -> String {
    let rounded = if d >= Duration::from_secs(1) {
        Duration::from_millis(d.as_millis() as u64)
    } else {
        Duration::from_micros(d.as_micros() as u64)
    };
    humantime::format_duration(rounded).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_shortened_on_a_character_boundary() {
        assert_eq!(ShortName("orders:42").to_string(), "\"orders:42\"");
        let long = format!("{}é{}", "a".repeat(63), "b".repeat(1000));
        let shown = ShortName(&long).to_string();
        assert_eq!(shown, format!("\"{}…\" (1065 bytes)", "a".repeat(63)));
        let error = Error::new(ErrorKind::InvalidResource, long.as_str());
        assert!(error.to_string().len() < 200, "{error}");
        assert!(format!("{error:?}").len() < 200, "{error:?}");
    }

    /// Bytes that are no Redis reply say that the peer does not speak the protocol, on
    /// one line; a reply of an unexpected type (the same kind of redis error) keeps its
    /// own words.
    #[test]
    fn only_bytes_that_are_no_reply_read_as_another_protocol() {
        let garbage = redis::parse_redis_value(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
        let error = MasterError::from_redis(garbage);
        assert_eq!(error.kind(), MasterErrorKind::Protocol, "{error}");
        assert!(
            error
                .to_string()
                .contains("does not speak the Redis protocol"),
            "{error}"
        );
        assert!(!error.to_string().contains('\n'), "{error:?}");
        let typed =
            redis::from_redis_value::<i64>(redis::Value::SimpleString("x".into())).unwrap_err();
        let error = MasterError::from_redis(redis::RedisError::from(typed));
        assert_eq!(error.kind(), MasterErrorKind::Protocol, "{error}");
        assert!(!error.to_string().contains("Redis protocol"), "{error}");
    }

    /// Each handshake failure the testkit cannot stage (an expired certificate, one not
    /// valid yet) is classified like those it can: permanent, saying what to change; a
    /// network fault is not.
    #[cfg(feature = "tls")]
    #[test]
    fn tls_failures_are_permanent_and_say_what_to_change() {
        use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};

        let cases = [
            (
                Tls::InvalidCertificate(Cert::UnknownIssuer),
                "not signed by a trusted CA",
            ),
            (
                Tls::InvalidCertificate(Cert::NotValidForName),
                "not issued for the host",
            ),
            (
                Tls::InvalidCertificate(Cert::Expired),
                "outside its validity period",
            ),
            (
                Tls::InvalidCertificate(Cert::NotValidYet),
                "outside its validity period",
            ),
            (
                Tls::AlertReceived(Alert::CertificateRequired),
                "Tls::client_cert",
            ),
            (Tls::AlertReceived(Alert::UnknownCA), "Tls::client_cert"),
            (
                Tls::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
                "does not answer in TLS",
            ),
        ];
        for (tls, says) in cases {
            let shown = tls.to_string();
            let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
            let error = MasterError::from_redis(redis::RedisError::from(io));
            assert_eq!(error.kind(), MasterErrorKind::Tls, "{shown}: {error}");
            assert!(error.kind().is_permanent(), "{error}");
            assert!(error.to_string().contains(says), "{shown}: {error}");
        }
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let error = MasterError::from_redis(redis::RedisError::from(reset));
        assert_eq!(error.kind(), MasterErrorKind::Io, "{error}");
        assert!(!error.kind().is_permanent());
    }
}
