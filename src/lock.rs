//! The client handle: acquire a lock on a quorum of masters (docs/design.md §3), wait
//! for it (§6), and take a fencing token (§8).
//!
//! Owns the public facade: the only module that composes rounds, leases and waiting into
//! public operations. Layer: the top (docs/design.md §10); nothing in the crate uses it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::core::{Inner, random_value, release_in_background, with_rng};

use crate::cluster::{Owner, Terms, View};
use crate::config::{
    Builder, Config, ConfigError, DurationSetting, IntoDuration, MAX_LABEL_LEN, MAX_MAX_HOLD,
    MAX_RESOURCE_LEN, MAX_RESOURCES, MAX_WAIT_TIMEOUT, at_most, duration,
};
use crate::error::{Error, ErrorKind, MasterErrorKind, MasterOutcome, MasterReport, human};
use crate::fencing::FencingToken;
use crate::guard::Guarded;
use crate::health::{self, HealthReport};
use crate::held::{Held, HeldMode};
use crate::lease::{Lease, LeaseHandle, LeaseKey, LeaseMode, LeaseParams, Watchdog, list_name};
use crate::master::{FenceRead, Master, Op, RedisMaster, Reply, RwMode};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::quorum::{self, Bounds, Decision};
use crate::telemetry;
use crate::wait::{Notifier, Subscription};
use crate::{deadline, scripts};

mod queue;

/// A Redlock client over a fixed set of independent Redis masters.
///
/// Cheap to clone (an `Arc` inside); clones share connections. Build one with
/// [`Redlock::builder`].
///
/// # Example
/// ```no_run
/// use redquorum::Redlock;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Redlock::builder()
///     .masters(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .ttl("10s")
///     .build()?;
///
/// let lease = client.acquire("orders:42").await?;
/// // ... the critical section, finished well within lease.remaining() ...
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.masters.iter().map(|m| &**m.name()).collect();
        f.debug_struct("Redlock")
            .field("masters", &names)
            .field("quorum", &self.inner.quorum)
            .field("ttl", &self.inner.config.ttl)
            .field("node_timeout", &self.inner.config.node_timeout)
            .field("key_prefix", &self.inner.config.key_prefix)
            .field("handoff", &self.inner.config.handoff)
            .field("waiter_ttl", &self.inner.config.waiter_ttl)
            .finish_non_exhaustive()
    }
}

/// Per-call settings for [`Redlock::acquire_with`] and [`Redlock::with_lock`]; unset
/// values use the client's. Durations are given as for the [`Builder`]: a [`Duration`] or a
/// string such as `"30s"` ([`IntoDuration`]); a string that does not parse is reported by
/// the call as [`ErrorKind::InvalidOptions`].
///
/// ```
/// use redquorum::AcquireOptions;
/// use std::time::Duration;
///
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(30))
///     .wait_timeout("2s")
///     .watchdog(true)
///     .max_hold(Duration::from_secs(300));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct AcquireOptions {
    ttl: Option<DurationSetting>,
    attempts: Option<u32>,
    wait_timeout: Option<DurationSetting>,
    watchdog: Option<bool>,
    max_hold: Option<DurationSetting>,
    fencing: Option<bool>,
    label: Option<String>,
    fair: bool,
}

impl AcquireOptions {
    /// Options that use every client default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lock's TTL for this acquisition. Defaults to the client's TTL. Must exceed
    /// the drift allowance plus the node timeout plus the safety margin, and must not
    /// exceed the client's `ttl_max`, which **defaults to the client's TTL**: to take
    /// longer locks per call, raise [`Builder::ttl_max`] when building the client.
    /// At most [`MAX_TTL`](crate::limits::MAX_TTL) in any case.
    pub fn ttl(mut self, ttl: impl IntoDuration) -> Self {
        self.ttl = Some(ttl.into_duration());
        self
    }

    /// The most acquire rounds to make. Defaults to the client's `retry_attempts`.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// The most time to spend trying, over all attempts; while it lasts, a waiter is woken
    /// by the holder's release. Defaults to the client's `wait_timeout`. At most
    /// [`MAX_WAIT_TIMEOUT`](crate::limits::MAX_WAIT_TIMEOUT).
    pub fn wait_timeout(mut self, wait: impl IntoDuration) -> Self {
        self.wait_timeout = Some(wait.into_duration());
        self
    }

    /// Whether the lease gets a watchdog that extends it while held. Defaults to the
    /// client's `watchdog` setting; [`Redlock::with_lock`] always turns it on.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = Some(on);
        self
    }

    /// The most time the watchdog keeps this lease alive. Defaults to the client's
    /// `max_hold`. At most [`MAX_MAX_HOLD`](crate::limits::MAX_MAX_HOLD).
    pub fn max_hold(mut self, max_hold: impl IntoDuration) -> Self {
        self.max_hold = Some(max_hold.into_duration());
        self
    }

    /// Whether this acquisition gets a fencing token (one more round trip). Defaults to
    /// the client's `fencing` setting; needs restart quarantine.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = Some(on);
        self
    }

    /// What this lock's owner record calls its holder ([`Redlock::inspect`]). Defaults to
    /// the client's [`label`](Builder::label); at most
    /// [`MAX_LABEL_LEN`](crate::limits::MAX_LABEL_LEN) bytes.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Whether this acquisition is fair: waiters are served in the order they arrived
    /// (first in, first out), each one's place fixed by a ticket issued on a quorum of
    /// masters, and a newcomer never takes the lock ahead of a live waiter. Defaults to
    /// off: an unfair acquire takes a free lock at once, and once it waits it queues too,
    /// in about the order of arrival, by a ticket taken without the fair lock's extra
    /// write-back (docs/design.md §17). Only for the lock of one resource
    /// ([`Redlock::acquire_with`], [`Redlock::with_lock`]); `acquire_many`, semaphores and
    /// read-write locks refuse it with [`ErrorKind::InvalidOptions`]. A fair first attempt
    /// runs a script that also reads the queue, instead of the plain acquire script.
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }
}

/// Settings of one acquire call, resolved against the client's configuration.
pub(crate) struct Plan {
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
    /// Attempts that may spend the budget (see `acquire_with`).
    pub(crate) attempts: u32,
    pub(crate) give_up_at: Instant,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    /// Who the owner record names.
    pub(crate) owner: Arc<Owner>,
    /// Served in ticket order (docs/design.md §17).
    pub(crate) fair: bool,
}

impl Plan {
    /// Refuses a fair acquisition of `what` (named in the message), which only the lock
    /// of one resource supports (docs/design.md §17): before any round trip, not
    /// retryable.
    pub(crate) fn refuse_fair(&self, resource: &str, what: &str) -> Result<(), Error> {
        if !self.fair {
            return Ok(());
        }
        Err(
            Error::new(ErrorKind::InvalidOptions, resource).with_detail(format!(
                "fair(true) is not supported by {what}: only the lock of one resource \
                 (acquire_with, with_lock) is fair; drop fair(true) from the options"
            )),
        )
    }
}

/// What woke a waiting acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The retry timer: the next attempt spends the attempt budget.
    Timer,
    /// Something that happened on the masters: the next attempt is free.
    Event,
}

/// A failed attempt, with what a waiter needs to know.
struct Failed {
    error: Error,
    /// When enough of the holder's keys expire for a quorum to be free, if known; for
    /// several keys, when the longest-held of them is free.
    holder_free_at: Option<Instant>,
    /// Of several keys, which ones some master found held (empty for one key).
    held: Vec<bool>,
    /// The wait budget ended the round before the masters decided it.
    cut: bool,
    /// The fair lock's ticket counters the masters answered (a fair attempt only).
    tickets: Vec<u64>,
    /// A queued waiter's confirm keeps the release of what it was granted to its caller,
    /// which first registers the waiter again where the grant removed it (docs/design.md
    /// §17); dropped, it releases. `None`: released already.
    release: Option<AttemptGuard>,
}

impl Builder {
    /// Validates every setting and builds the client. No connection is opened here:
    /// masters are connected on first use.
    ///
    /// # Errors
    /// A [`ConfigError`] naming each setting that cannot work and what to change (one
    /// problem as its own variant, several as [`ConfigError::Several`]; see
    /// [`ConfigError::primary`] and [`ConfigError::problems`]): no masters, an unparsable
    /// or duplicate master URL, a duration that does not parse, a zero TTL or node
    /// timeout, a TTL not larger than the drift allowance plus the node timeout plus the
    /// safety margin (in whole milliseconds, as the masters keep it), a TTL above
    /// `ttl_max`, a duration above its documented maximum (see "Limits" above), a drift
    /// factor out of range, zero attempts, pauses that overflow, an `extend_interval` not
    /// below the TTL, or a `waiter_ttl` that is zero, not above three node timeouts or
    /// above the TTL. Two masters are accepted, with a warning (see
    /// [`Builder::masters`]).
    pub fn build(self) -> Result<Redlock, ConfigError> {
        telemetry::describe();
        self.into_config().and_then(Redlock::from_config)
    }
}

impl Redlock {
    /// A builder with every default; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn from_config(config: Config) -> Result<Self, ConfigError> {
        let mut masters: Vec<Arc<dyn Master>> = Vec::with_capacity(config.masters.len());
        let node_timeout = config.node_timeout;
        #[cfg(feature = "mutants")]
        let node_timeout = match config.planted.is(Mutant::NoNodeTimeout) {
            true => Duration::from_secs(3600),
            false => node_timeout,
        };
        let view = Self::view_of(&config);
        for (index, spec) in config.masters.iter().enumerate() {
            let master =
                RedisMaster::new(spec, (index, &view), &config, node_timeout).map_err(|e| {
                    ConfigError::InvalidUrl {
                        url: spec.name.to_string(),
                        reason: e.to_string(),
                    }
                })?;
            masters.push(Arc::new(master));
        }
        let notifier = if config.notifications {
            Notifier::new(
                &config.masters,
                quorum::quorum(masters.len()),
                config.node_timeout,
                config.connect_timeout,
            )
        } else {
            Notifier::disabled()
        };
        Ok(Self::with_masters(config, masters, notifier))
    }

    /// The quorum of `n` masters for `config` (a planted bug may change it).
    fn quorum_of(config: &Config, n: usize) -> usize {
        #[cfg(not(feature = "mutants"))]
        let _ = config;
        let quorum = quorum::quorum(n);
        #[cfg(feature = "mutants")]
        let quorum = match config.planted.is(Mutant::HalfQuorum) {
            true => (n / 2).max(1),
            false => quorum,
        };
        quorum
    }

    /// The settings of `config` every client of its cluster must share (docs/design.md §11).
    pub(crate) fn terms(config: &Config) -> Terms {
        let n = config.masters.len();
        Terms::new(
            n,
            Self::quorum_of(config, n),
            u64::try_from(config.ttl_max.as_millis()).unwrap_or(u64::MAX),
            config.drift_factor,
            &config.key_prefix,
        )
    }

    /// The view of its cluster a client of `config` starts with (a planted bug may make it
    /// adopt any record).
    pub(crate) fn view_of(config: &Config) -> Arc<View> {
        let view = View::new(
            Self::terms(config),
            config.masters.iter().map(|m| m.name.clone()).collect(),
        );
        #[cfg(feature = "mutants")]
        let view = match config.planted.is(Mutant::IgnoreFingerprint) {
            true => view.ignoring_terms(),
            false => view,
        };
        Arc::new(view)
    }

    /// A client over any masters (real or simulated); with quarantine on, each is put
    /// under restart quarantine here.
    pub(crate) fn with_masters(
        config: Config,
        masters: Vec<Arc<dyn Master>>,
        notifier: Notifier,
    ) -> Self {
        let masters = if config.quarantine {
            let window = config.quarantine_window();
            masters
                .into_iter()
                .enumerate()
                .map(|(index, master)| {
                    Arc::new(Guarded::new(master, index, window)) as Arc<dyn Master>
                })
                .collect()
        } else {
            masters
        };
        let quorum = Self::quorum_of(&config, masters.len());
        let owner = Arc::new(Owner::this_process(&config.label));
        let held = Arc::new(Held::new(config.wait_for_own_leases));
        Self {
            inner: Arc::new(Inner {
                held,
                config,
                masters,
                quorum,
                owner,
                notifier: Arc::new(notifier),
                background: TaskTracker::new(),
            }),
        }
    }

    /// Waits until every release this client and its leases started in the background
    /// has finished: leases dropped without [`Lease::release`], the masters a release
    /// returned without, attempts that failed or were cancelled. Call it before the
    /// process exits, so that no lock it held stays on the masters until its TTL.
    ///
    /// A background release may first wait for an extension of its lease that is in
    /// flight (one round), then runs its own round; each round is bounded by twice the
    /// connect timeout plus the node timeout (a request's turn behind earlier requests to
    /// its master, then its connect and its answer), so this call waits at most twice
    /// that. Returns how
    /// many were still running when that bound ran out (zero when all finished). The
    /// client stays usable afterwards.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) {
    /// // ... at the end of main ...
    /// let unfinished = client.shutdown().await;
    /// assert_eq!(unfinished, 0, "some locks are left to expire with their TTL");
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the releases go on in the background.
    pub async fn shutdown(&self) -> usize {
        let background = &self.inner.background;
        if tokio::runtime::Handle::try_current().is_err() {
            // Nothing can wait without a runtime; report what is still running elsewhere.
            return background.len();
        }
        // An extension in flight (one round), then the release round itself.
        let bound = self.inner.config.call_bound().saturating_mul(2);
        background.close();
        let _ = tokio::time::timeout(bound, background.wait()).await;
        let unfinished = background.len();
        background.reopen();
        unfinished
    }

    /// How many masters must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The masters' addresses, passwords redacted, in the configured order. (What each
    /// master *did* is in the reports of a lease, an error or a release: `masters()`.)
    pub fn master_addresses(&self) -> Vec<String> {
        self.inner
            .masters
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    }

    /// The default TTL of this client's locks.
    pub fn ttl(&self) -> Duration {
        self.inner.config.ttl
    }

    /// Checks every master and reports, per master in the configured order: whether it
    /// answered, its server version (the scripts need Redis 5.0 or later), its role (a
    /// replica never votes), persistence (`appendonly`, `appendfsync`), eviction settings,
    /// the round trip, its clock against the other masters', whether this client counts
    /// its votes (restart quarantine), and its cluster record. Each problem and note is a
    /// sentence saying what to change; [`HealthReport::is_healthy`] is true when no
    /// master has a problem, and `Display` prints the whole report.
    ///
    /// One concurrent round of reads: each master is probed on a short-lived connection of
    /// its own, within the connect timeout plus the node timeout, so the call returns
    /// within that bound however many masters are down or hung. It writes nothing, and it
    /// neither uses nor changes the connections, quarantine or votes of the locks.
    /// Outside a tokio runtime every master is reported as not checked.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) {
    /// let report = client.check_masters().await;
    /// if !report.is_healthy() {
    ///     eprintln!("{report}");
    /// }
    /// for (master, problem) in report.problems() {
    ///     eprintln!("{master}: {problem}");
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future closes the probes' connections; nothing is left behind.
    pub async fn check_masters(&self) -> HealthReport {
        health::check(&self.inner.masters, &self.inner.config, self.inner.quorum).await
    }

    /// Acquires the lock on `resource`, retrying per the client's retry policy.
    ///
    /// Each attempt sends `SET key value NX PX ttl` to every master at once with a fresh
    /// 128-bit random value, and succeeds when a quorum granted it with validity left
    /// (`t0 + ttl - drift` is still ahead by more than the safety margin). A failed attempt
    /// is released on every master that may have set it.
    ///
    /// While the lock is held by another client, the caller waits: subscribed to the lock's
    /// release notices (unless `notifications` is off), it tries again as soon as the
    /// holder releases, when the holder's key expires, or after `retry_delay` (growing with
    /// [`Backoff::Exponential`](crate::Backoff)) plus uniform random jitter — whichever
    /// comes first. Attempts are bounded by `retry_attempts` and by the wait budget.
    ///
    /// With [`Builder::handoff`] on (the default), the caller queues instead once an
    /// attempt found the lock held: it registers on every master, in about the order of
    /// arrival (one above the queue's ticket counter its attempt read), and the holder's release
    /// hands the lock to the first live waiter in the queue and wakes it alone; that waiter
    /// then confirms with an ordinary attempt of its own (its validity counted from that
    /// attempt) once a quorum of masters handed it the key, while the others go on
    /// waiting. A waiter refreshes its registration every third of `waiter_ttl`, which
    /// also hands it a lock whose holder vanished without releasing, once the holder's key
    /// expired. Each refresh, and each confirm that failed, spends the attempt budget as a
    /// timed retry does.
    ///
    /// # Errors
    /// After the last attempt: [`ErrorKind::Contended`] (held by another client),
    /// [`ErrorKind::NoQuorum`] (masters failed or did not answer),
    /// [`ErrorKind::NotEnoughVoters`] (masters in restart quarantine) or
    /// [`ErrorKind::ValidityExhausted`] (a quorum answered too late). When the wait budget
    /// runs out: [`ErrorKind::WaitTimeout`] if the last attempt found the lock held, and
    /// otherwise the kind of the last attempt's failure, [`ErrorKind::NoQuorum`] when
    /// the masters are down or unreachable, so that an outage never reads as contention.
    /// Each with every master's outcome in the last attempt.
    /// At once, without further attempts, when so many masters fail for a reason that
    /// lasts that no quorum is possible: [`ErrorKind::Auth`] (a password or ACL refused),
    /// [`ErrorKind::Tls`] (a TLS handshake failed: an untrusted certificate, a wrong host)
    /// or [`ErrorKind::Misconfigured`] (masters that can evict lock keys never vote).
    /// Before any master is asked: [`ErrorKind::InvalidResource`] for an empty name or one
    /// longer than [`MAX_RESOURCE_LEN`](crate::limits::MAX_RESOURCE_LEN) bytes,
    /// [`ErrorKind::NoRuntime`] when polled outside a tokio runtime, and
    /// [`ErrorKind::AlreadyHeld`] when this client (or a clone) holds `resource` with a
    /// lease it has not released or dropped: re-enter that lease with
    /// [`Lease::reenter`] instead (unless the client was built with
    /// [`Builder::wait_for_own_leases`], which waits for it like any holder). The same
    /// error ends a waiting call as soon as a lease of this client takes the resource.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no key behind beyond its TTL: the attempt in flight is
    /// released on every master in the background, and its subscription is dropped. A
    /// queued waiter's registration is removed from every master in the background too,
    /// passing on a lock handed to it meanwhile.
    pub async fn acquire(&self, resource: &str) -> Result<Lease, Error> {
        self.acquire_with(resource, &AcquireOptions::default())
            .await
    }

    /// Makes a single acquire attempt: one quorum round, no retry, no waiting.
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire), after one attempt.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire).
    pub async fn try_acquire(&self, resource: &str) -> Result<Lease, Error> {
        self.acquire_with(resource, &AcquireOptions::new().attempts(1))
            .await
    }

    /// Acquires the lock on `resource` with per-call options; see
    /// [`acquire`](Redlock::acquire).
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire); also [`ErrorKind::InvalidOptions`] when the
    /// options do not fit the client (a TTL too short for the drift allowance, node
    /// timeout and safety margin, or above `ttl_max`; zero attempts; a zero `max_hold`;
    /// a duration above its `MAX_*` limit).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire).
    pub async fn acquire_with(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        self.acquire_shaped(resource, options, Shape::Mutex).await
    }

    /// Acquires `resource` as `shape` says: the body of every acquire call.
    pub(crate) async fn acquire_shaped(
        &self,
        resource: &str,
        options: &AcquireOptions,
        shape: Shape,
    ) -> Result<Lease, Error> {
        let (started, mut rounds) = (telemetry::start(), 0);
        let acquired = self
            .acquire_rounds(resource, options, &shape, &mut rounds)
            .await;
        telemetry::acquire_finished(&acquired, started, rounds);
        acquired
    }

    /// The body of [`acquire_with`](Redlock::acquire_with), counting its `rounds`.
    async fn acquire_rounds(
        &self,
        resource: &str,
        options: &AcquireOptions,
        shape: &Shape,
        rounds: &mut u32,
    ) -> Result<Lease, Error> {
        check_runtime(resource)?;
        check_resource(&self.inner.config.key_prefix, resource)?;
        let plan = self.plan(resource, options)?;
        if let Shape::Read | Shape::Write { .. } = shape {
            plan.refuse_fair(resource, "read-write locks")?;
        }
        // A writer's intent (docs/design.md §16): one id for the whole call, refreshed by
        // each attempt while readers hold the lock.
        let shape = match shape {
            Shape::Write { .. } => Shape::Write {
                intent: random_value().into(),
                intent_ttl: plan.ttl,
            },
            other => other.clone(),
        };
        let target = Target::one(&self.inner.config, resource, shape);
        self.acquire_target(&target, &plan, rounds).await
    }

    /// The acquire loop over `target`'s keys (docs/design.md §3, §6, §14): attempts until
    /// one succeeds or the plan's budgets run out, waiting for the holders in between.
    async fn acquire_target(
        &self,
        target: &Target,
        plan: &Plan,
        rounds: &mut u32,
    ) -> Result<Lease, Error> {
        let config = &self.inner.config;
        let keys: Vec<&str> = target.keys.iter().map(|(_, key)| &**key).collect();
        // This client's own lease on a key: refused before any round trip (§14); a write
        // acquire of a lock it reads is an upgrade, refused too (§16).
        let held_mode = target.shape.held_mode();
        self.inner.held.check(&target.name, &keys, held_mode)?;
        // A writer's intent (docs/design.md §16), chosen once per call: cleared when the
        // call ends without the lock (returned or dropped) so that readers need not wait
        // for it to expire; a granted attempt clears it where its grant did not.
        let intent_guard = match (&target.shape, target.keys.first()) {
            (Shape::Write { intent, .. }, Some((_, key))) => Some(IntentGuard {
                inner: Arc::clone(&self.inner),
                key: Arc::clone(key),
                intent: Arc::clone(intent),
                armed: true,
            }),
            _ => None,
        };
        let reused: Option<Arc<str>> = None;
        #[cfg(feature = "mutants")]
        let reused = reused.or_else(|| {
            config
                .planted
                .is(Mutant::ReuseValue)
                .then(|| random_value().into())
        });
        // The release notices waited for: none until an attempt found the lock held; of
        // several keys, those of every key an attempt found held (`subscribed` names them).
        let mut waiting: Vec<Subscription> = Vec::new();
        let mut subscribed: Vec<Arc<str>> = Vec::new();
        // Failed attempts in a row that a release notice had woken: every waiter of the
        // lock wakes on the same notice, and on several masters they split the votes.
        let mut herd = 0u32;
        // Whether a release notice woke the attempt about to run (a hand-off if it acquires).
        let mut noticed = false;
        // Attempts that spend the attempt budget: all but those woken by an event (the
        // holder's release notice or expiry, masters leaving quarantine). Those come from
        // what happened on the masters, not from impatience; the time budget bounds them.
        let mut spent = 0u32;
        let mut wake = Wake::Timer;
        // The last error that the masters decided, for a budget that ends mid-round.
        let mut decided: Option<Error> = None;
        // Whether a master refused the lock in any attempt: a wait that met only failures
        // is an outage, not contention (docs/design.md §9).
        let mut refused = false;
        // A waiting acquire of one resource queues to be handed the lock, and a fair one
        // takes it only in ticket order (docs/design.md §17). Its first attempt is the
        // plain acquire unless fair: the uncontended path stays one plain round.
        let queued = matches!(target.shape, Shape::Mutex)
            && target.keys.len() == 1
            && (config.handoff || plan.fair);
        let no_waiter: Arc<str> = "".into();
        let total = rounds;
        loop {
            *total += 1;
            let rounds = *total;
            if wake == Wake::Timer {
                spent += 1;
            }
            if rounds > 1 {
                // A lease of this client took the key while this call waited: waiting on
                // would be waiting for ourselves.
                self.inner
                    .held
                    .check(&target.name, &keys, held_mode)
                    .map_err(|e| e.with_attempts(rounds - 1))?;
            }
            let value = reused.clone().unwrap_or_else(|| random_value().into());
            let started = Instant::now();
            let queue = (queued && plan.fair).then_some((&no_waiter, true));
            let failed = match self.attempt(target, value, plan, queue).await {
                Ok(lease) => {
                    if let Some(guard) = intent_guard {
                        guard.disarm();
                    }
                    if plan.watchdog {
                        lease.start_watchdog(Watchdog {
                            interval: config.extend_interval(plan.ttl),
                            give_up_at: plan.max_hold.and_then(|m| Instant::now().checked_add(m)),
                            round_time: config.node_timeout,
                        });
                    }
                    if noticed {
                        telemetry::handoff();
                    }
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            let round = started.elapsed();
            let error = failed.error.with_attempts(rounds);
            refused |= refused_by_any(&error);
            if failed.cut {
                // The budget ended this round: say what the masters said last.
                let last = decided.take().map_or(error, |e| e.with_attempts(rounds));
                return Err(budget_spent(last, rounds, refused));
            }
            decided = Some(error.clone());
            if !error.is_retryable() || spent >= plan.attempts {
                return Err(error);
            }
            if Instant::now() >= plan.give_up_at {
                return Err(budget_spent(error, rounds, refused));
            }
            // Held: queue to be handed the lock (a fair call needs a quorum's ticket
            // counters for its ticket; without them it tries again as usual).
            if queued
                && error.kind() == ErrorKind::Contended
                && (!plan.fair || failed.tickets.len() >= self.inner.quorum)
            {
                let queue = queue::Queue {
                    target,
                    plan,
                    refused: error,
                    tickets: &failed.tickets,
                    reused: reused.clone(),
                    spent,
                };
                return self.wait_queued(queue, total).await;
            }
            // Subscribe before the next attempt: a release after it reaches us, and one
            // before the subscription took effect is seen by that attempt (wait.rs). Of
            // several keys, the one that keeps us out may change from attempt to attempt:
            // each key found held for the first time is subscribed to then (§14).
            let fresh: Vec<Arc<str>> =
                match config.notifications && error.kind() == ErrorKind::Contended {
                    true => target
                        .channels(&failed.held)
                        .into_iter()
                        .filter(|channel| !subscribed.contains(channel))
                        .collect(),
                    false => Vec::new(),
                };
            if !fresh.is_empty() {
                subscribed.extend(fresh.iter().cloned());
                let subscribe = futures::future::join_all(
                    fresh
                        .into_iter()
                        .map(|channel| self.inner.notifier.subscribe(channel)),
                );
                match tokio::time::timeout_at(plan.give_up_at, subscribe).await {
                    Ok(subscriptions) => waiting.extend(subscriptions),
                    Err(_) => return Err(budget_spent(error, rounds, refused)),
                }
                wake = Wake::Timer;
                continue;
            }
            let spread = || spread(round, herd);
            let now = Instant::now();
            let mut wake_at = now + config.retry.delay(spent);
            let mut reason = Wake::Timer;
            if error.kind() == ErrorKind::NotEnoughVoters
                && let Some(after) = error.retry_after()
            {
                // Masters in restart quarantine vote again at a known time: sleep until
                // then, unless it lies beyond the budget (then say when, at once).
                let voters_at = now + after + spread();
                if voters_at >= plan.give_up_at {
                    return Err(error);
                }
                // A time already past is no event to wait for: the timer decides then.
                if after > Duration::from_millis(1) {
                    wake_at = voters_at;
                    reason = Wake::Event;
                }
            } else if !waiting.is_empty()
                && let Some(free) = failed.holder_free_at
            {
                let free = holder_wake(free, now, round, herd);
                if free < wake_at {
                    wake_at = free;
                    reason = Wake::Event;
                }
            }
            // A waiting writer refreshes its intent well before it expires: each attempt
            // sets it again where readers still hold the lock (docs/design.md §16).
            if let Shape::Write { intent_ttl, .. } = &target.shape
                && error.kind() == ErrorKind::Contended
            {
                let refresh = now + *intent_ttl / 3;
                if refresh < wake_at {
                    wake_at = refresh;
                    reason = Wake::Event;
                }
            }
            if wake_at >= plan.give_up_at && waiting.is_empty() {
                return Err(budget_spent(error, rounds, refused));
            }
            let until = wake_at.min(plan.give_up_at);
            let traced = telemetry::resource(&target.name, config.trace_resource_names);
            tracing::trace!(resource = %traced, rounds, "acquire attempt failed, waiting");
            noticed = false;
            match waiting.as_mut_slice() {
                [] => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        // Refused at the top of the loop (§14).
                        () = self.inner.held.taken(&keys) => {}
                    }
                    wake = reason;
                }
                subscriptions => {
                    noticed = tokio::select! {
                        () = notified(subscriptions) => true,
                        () = tokio::time::sleep_until(until) => false,
                        // Refused at the top of the loop (§14).
                        () = self.inner.held.taken(&keys) => false,
                    };
                    if noticed {
                        let pause = spread();
                        tokio::time::sleep_until((Instant::now() + pause).min(plan.give_up_at))
                            .await;
                        herd += 1;
                        wake = Wake::Event;
                    } else {
                        herd = 0;
                        wake = reason;
                    }
                }
            }
            if Instant::now() >= plan.give_up_at {
                return Err(budget_spent(error, rounds, refused));
            }
        }
    }

    /// Runs `work` while holding the lock on `resource`, and releases it afterwards.
    ///
    /// Acquires per `options` (waiting as [`acquire`](Redlock::acquire) does), starts the
    /// watchdog so the lease is extended while `work` runs, and races `work` with the
    /// lease's [`lost`](LeaseHandle::lost) signal: if the lease is lost — an extension
    /// failed, the safety point passed before one succeeded, or `max_hold` was reached —
    /// `work` is **dropped at that moment** (it does not go on without the lock) and the
    /// call returns [`ErrorKind::LeaseLost`]. The loss is signalled a safety margin before
    /// the deadline, so the work stops while the lock is still held.
    ///
    /// The lock is released when `work` finishes, and also when it panics or when the
    /// future returned here is dropped (released in the background then).
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::AcquireOptions;
    /// use std::time::Duration;
    ///
    /// let options = AcquireOptions::new().wait_timeout(Duration::from_secs(5));
    /// let receipt = client
    ///     .with_lock("orders:42", &options, |lease| async move {
    ///         // Charge the card. If the lock is lost meanwhile, this future is dropped.
    ///         format!("charged while holding {}", lease.resource())
    ///     })
    ///     .await?;
    /// # let _ = receipt;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Whatever [`acquire_with`](Redlock::acquire_with) returns when the lock cannot be
    /// taken, and [`ErrorKind::LeaseLost`] when it is lost while `work` runs. A failure to
    /// release after `work` finished is not an error (the lock expires with its TTL at the
    /// latest); it is logged.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().watchdog(true);
        let lease = self.acquire_with(resource, &options).await?;
        self.hold(lease, work).await
    }

    /// Runs `work` while `lease` holds (see [`with_lock`](Redlock::with_lock)), then
    /// releases it.
    async fn hold<F, Fut, T>(&self, lease: Lease, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let name = lease.name().to_owned();
        let resource = name.as_str();
        let lost = lease.lost();
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            output = work(lease.handle()) => Ok(output),
        };
        match outcome {
            Ok(output) => {
                if let Err(error) = lease.release().await {
                    let shown = self.inner.config.trace_resource_names;
                    tracing::warn!(
                        resource = %telemetry::resource(resource, shown),
                        error = %telemetry::error(&error, shown),
                        "release after the critical section failed"
                    );
                }
                Ok(output)
            }
            Err(reason) => {
                let error = Error::new(ErrorKind::LeaseLost, resource)
                    .with_detail(format!("the critical section was aborted: {reason}"));
                let _ = lease.release().await;
                Err(error)
            }
        }
    }

    /// Acquires the locks on every resource of `resources` at once, all or none
    /// (docs/design.md §14): one lease over all of them, valid, extended and released as
    /// the lock of one resource is.
    ///
    /// Each master runs one script over all the keys, sorted, that sets every key or none;
    /// its vote counts only if it set them all. An attempt that does not win a quorum
    /// releases whatever it set, everywhere, before waiting: no caller ever holds some of
    /// the resources while waiting for the others, so callers that list the same resources
    /// in different orders cannot deadlock. Waiting works as for
    /// [`acquire`](Redlock::acquire): woken by the release of any key that was held, or
    /// when the longest-held of them expires.
    ///
    /// The resources lock the same keys as [`acquire`](Redlock::acquire) of each one: a
    /// client holding `"x"` alone keeps out one that asks for `["x", "y"]`, and the
    /// reverse. With fencing, each resource gets its own token
    /// ([`fencing_tokens`](LeaseHandle::fencing_tokens)), from its own counter.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// // Move stock between two warehouses: both are locked, or neither.
    /// let lease = client.acquire_many(&["stock:paris", "stock:lyon"]).await?;
    /// assert_eq!(lease.resources().collect::<Vec<_>>(), ["stock:lyon", "stock:paris"]);
    /// // ... the transfer, finished well within lease.remaining() ...
    /// lease.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire); [`ErrorKind::Contended`] when any of the
    /// resources is held on too many masters. Before any master is asked,
    /// [`ErrorKind::InvalidResource`] for an empty list, a resource listed twice, more
    /// than [`MAX_RESOURCES`](crate::limits::MAX_RESOURCES) resources, or a name that
    /// [`acquire`](Redlock::acquire) refuses.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire): dropping the future releases every key of
    /// the attempt in flight on every master, in the background.
    pub async fn acquire_many(&self, resources: &[&str]) -> Result<Lease, Error> {
        self.acquire_many_with(resources, &AcquireOptions::default())
            .await
    }

    /// Acquires the locks on every resource of `resources` at once with per-call options;
    /// see [`acquire_many`](Redlock::acquire_many) and
    /// [`acquire_with`](Redlock::acquire_with).
    ///
    /// # Errors
    /// As for [`acquire_many`](Redlock::acquire_many) and
    /// [`acquire_with`](Redlock::acquire_with); [`ErrorKind::InvalidOptions`] for
    /// [`AcquireOptions::fair`], before any master is asked: only the lock of one resource
    /// is fair.
    ///
    /// # Cancel safety
    /// As for [`acquire_many`](Redlock::acquire_many).
    pub async fn acquire_many_with(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let (started, mut rounds) = (telemetry::start(), 0);
        let acquired = self
            .acquire_many_rounds(resources, options, &mut rounds)
            .await;
        telemetry::acquire_finished(&acquired, started, rounds);
        acquired
    }

    /// The body of [`acquire_many_with`](Redlock::acquire_many_with).
    async fn acquire_many_rounds(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
        rounds: &mut u32,
    ) -> Result<Lease, Error> {
        let target = Target::many(&self.inner.config, resources)?;
        check_runtime(&target.name)?;
        let plan = self.plan(&target.name, options)?;
        plan.refuse_fair(&target.name, "acquire_many")?;
        self.acquire_target(&target, &plan, rounds).await
    }

    /// Runs `work` while holding the locks on every resource of `resources`, and releases
    /// them afterwards: [`with_lock`](Redlock::with_lock) over
    /// [`acquire_many_with`](Redlock::acquire_many_with). The watchdog extends every key
    /// while `work` runs; `work` is dropped the moment the lease is lost.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::AcquireOptions;
    ///
    /// let options = AcquireOptions::new().wait_timeout("5s");
    /// let moved = client
    ///     .with_lock_many(&["account:1", "account:2"], &options, |lease| async move {
    ///         // Debit one account, credit the other: both are ours until this returns.
    ///         lease.resources().count()
    ///     })
    ///     .await?;
    /// assert_eq!(moved, 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Whatever [`acquire_many_with`](Redlock::acquire_many_with) returns when the locks
    /// cannot be taken, and [`ErrorKind::LeaseLost`] when the lease is lost while `work`
    /// runs.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases every key in the background.
    pub async fn with_lock_many<F, Fut, T>(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().watchdog(true);
        let lease = self.acquire_many_with(resources, &options).await?;
        self.hold(lease, work).await
    }

    pub(crate) fn plan(&self, resource: &str, options: &AcquireOptions) -> Result<Plan, Error> {
        let config = &self.inner.config;
        let invalid =
            |detail: String| Error::new(ErrorKind::InvalidOptions, resource).with_detail(detail);
        let parsed = |setting: &'static str, value: &Option<DurationSetting>| {
            value
                .clone()
                .map(|v| duration(setting, v))
                .transpose()
                .map_err(|e| invalid(e.to_string()))
        };
        let options_ttl = parsed("ttl", &options.ttl)?;
        let options_wait = parsed("wait_timeout", &options.wait_timeout)?;
        let options_hold = parsed("max_hold", &options.max_hold)?;
        let ttl = match options_ttl {
            Some(ttl) => {
                // Checked as given: cut to whole milliseconds, a sub-millisecond TTL
                // would read as zero.
                config.check_ttl(ttl).map_err(|e| invalid(e.to_string()))?;
                let ttl = deadline::whole_millis(ttl);
                config
                    .check_ttl_max(ttl)
                    .map_err(|e| invalid(e.to_string()))?;
                ttl
            }
            None => config.ttl,
        };
        let fencing = options.fencing.unwrap_or(config.fencing);
        if fencing && !config.quarantine {
            return Err(invalid(ConfigError::FencingNeedsQuarantine.to_string()));
        }
        if let Some(w) = options_wait {
            at_most("wait_timeout", w, MAX_WAIT_TIMEOUT).map_err(|e| invalid(e.to_string()))?;
        }
        if let Some(m) = options_hold {
            at_most("max_hold", m, MAX_MAX_HOLD).map_err(|e| invalid(e.to_string()))?;
        }
        // The default patience: long enough for any holder's lock to expire and for new
        // masters to leave restart quarantine, with room for the rounds around it.
        let wait = options_wait
            .or(config.wait_timeout)
            .unwrap_or_else(|| config.ttl_max.saturating_mul(2));
        let give_up_at = Instant::now()
            .checked_add(wait)
            .ok_or_else(|| invalid(format!("wait_timeout {} overflows the clock", human(wait))))?;
        let attempts = match options.attempts {
            Some(0) => {
                return Err(invalid(
                    "attempts is zero: make at least one attempt".into(),
                ));
            }
            Some(a) => a,
            None => config.retry.attempts.map_or(u32::MAX, |a| a.get()),
        };
        let max_hold = options_hold.or(config.max_hold);
        if max_hold.is_some_and(|m| m.is_zero()) {
            return Err(invalid(
                "max_hold is zero: give it a positive duration".into(),
            ));
        }
        let owner = match &options.label {
            Some(label) if label.len() > MAX_LABEL_LEN => {
                return Err(invalid(
                    ConfigError::LabelTooLong { len: label.len() }.to_string(),
                ));
            }
            Some(label) => Arc::new(self.inner.owner.labelled(label)),
            None => Arc::clone(&self.inner.owner),
        };
        let watchdog = options.watchdog.unwrap_or(config.watchdog);
        // The builder refuses an interval not below the client's TTL; a shorter TTL of
        // this call's own can make it one that could never be kept.
        if watchdog
            && let Some(interval) = config.extend_interval
            && interval >= ttl
        {
            return Err(invalid(format!(
                "this call's ttl {} is not above the client's extend_interval {}: the lease \
                 would expire before the watchdog extended it at that interval; give the \
                 call a longer ttl, or lower extend_interval",
                human(ttl),
                human(interval)
            )));
        }
        Ok(Plan {
            ttl,
            fencing,
            attempts,
            give_up_at,
            watchdog,
            max_hold,
            owner,
            fair: options.fair,
        })
    }

    /// One acquire attempt: the acquire round and, with fencing, the write-back. With
    /// `queue` (a waiter id, empty before the call queued, and whether the acquisition is
    /// fair), the lock of one resource is taken as a queued waiter or fair contender
    /// (`Op::AcquireQueued`, docs/design.md §17).
    async fn attempt(
        &self,
        target: &Target,
        value: Arc<str>,
        plan: &Plan,
        queue: Option<(&Arc<str>, bool)>,
    ) -> Result<Lease, Failed> {
        let inner = &self.inner;
        let config = &inner.config;
        let ttl = plan.ttl;
        let resource = &target.name;
        let shape = &target.shape;
        // The key that holds this attempt's value: a reader's own key, or the lock key.
        let holding: Option<Arc<str>> = match (shape, &*target.keys) {
            (Shape::Read, [(_, key)]) => Some(scripts::reader_key(key, &value).into()),
            _ => None,
        };
        let mut guard = AttemptGuard {
            inner: Arc::clone(inner),
            keys: match &holding {
                Some(reader) => vec![Arc::clone(reader)],
                None => target.keys.iter().map(|(_, key)| Arc::clone(key)).collect(),
            },
            channel: None,
            value: Arc::clone(&value),
            outcomes: None,
            armed: true,
        };
        // A queued waiter's failed confirm hands its release to the caller (see `Failed`).
        let queued = queue.is_some_and(|(waiter, _)| !waiter.is_empty());
        let keep = |guard: AttemptGuard| queued.then_some(guard);
        let fence = match plan.fencing {
            false => FenceRead::Skip,
            true => FenceRead::Read,
        };
        let op = match (shape, &*target.keys) {
            (Shape::Read | Shape::Write { .. }, [(_, key)]) => Op::RwAcquire {
                key: Arc::clone(key),
                value: Arc::clone(&value),
                ttl,
                fence,
                owner: Arc::clone(&plan.owner),
                mode: match shape {
                    Shape::Write { intent, intent_ttl } => RwMode::Write {
                        intent: Arc::clone(intent),
                        intent_ttl: *intent_ttl,
                    },
                    _ => RwMode::Read,
                },
            },
            (_, [(_, key)]) => match queue {
                Some((waiter, fair)) => Op::AcquireQueued {
                    key: Arc::clone(key),
                    value: Arc::clone(&value),
                    ttl,
                    fence,
                    owner: Arc::clone(&plan.owner),
                    waiter: Arc::clone(waiter),
                    fair,
                },
                None => Op::AcquireChecked {
                    key: Arc::clone(key),
                    value: Arc::clone(&value),
                    ttl,
                    fence,
                    owner: Arc::clone(&plan.owner),
                },
            },
            (_, keys) => Op::AcquireMany {
                keys: keys.iter().map(|(_, key)| Arc::clone(key)).collect(),
                value: Arc::clone(&value),
                ttl,
                fence: match plan.fencing {
                    false => FenceRead::Skip,
                    true => FenceRead::Read,
                },
                owner: Arc::clone(&plan.owner),
            },
        };
        // A writer learns how its stragglers answered, to clear its intent where they
        // refused (`clear_intent_after_grant`).
        let bounds = Bounds {
            late: matches!(shape, Shape::Write { .. }),
            ..inner.bounds(Some(plan.give_up_at))
        };
        let traced = telemetry::resource(resource, config.trace_resource_names);
        let round = quorum::run(&inner.masters, Arc::new(op), inner.quorum, traced, bounds).await;
        let reports = round.reports(&inner.masters);
        let drift = deadline::drift(ttl, config.drift_factor);

        // A master whose cluster record disagrees with this client, or a name that holds
        // another kind of lock: refuse whatever was granted (the guard releases it).
        if let Some((kind, detail)) = refusal(&reports) {
            guard.outcomes = Some(round.outcomes);
            return Err(Failed {
                error: Error::new(kind, &**resource)
                    .with_detail(detail)
                    .with_masters(reports),
                holder_free_at: None,
                held: Vec::new(),
                cut: false,
                tickets: Vec::new(),
                release: keep(guard),
            });
        }

        if round.decision == Decision::Reached {
            let now = Instant::now();
            let t0 = round.t0;
            #[cfg(feature = "mutants")]
            let t0 = match config.planted.is(Mutant::IgnoreElapsed) {
                true => now,
                false => t0,
            };
            let least = config.least_validity(ttl);
            let valid = config
                .lease_deadline(t0, ttl)
                .filter(|dl| deadline::validity_left(*dl, now, least).is_some());
            let Some(deadline) = valid else {
                guard.outcomes = Some(round.outcomes);
                let detail = format!(
                    "the round took {} of a {} TTL (drift allowance {})",
                    human(now - round.t0),
                    human(ttl),
                    human(drift)
                );
                return Err(Failed {
                    error: Error::new(ErrorKind::ValidityExhausted, &**resource)
                        .with_detail(detail)
                        .with_masters(reports),
                    holder_free_at: None,
                    held: Vec::new(),
                    cut: false,
                    tickets: Vec::new(),
                    release: keep(guard),
                });
            };
            let tokens = match (fence, &*target.keys) {
                (FenceRead::Skip, _) => vec![None; target.keys.len()],
                // The one-round token: the largest counter, incremented where granted.
                #[cfg(feature = "mutants")]
                (FenceRead::Read, [_]) if config.planted.is(Mutant::OneRoundToken) => {
                    vec![Some(round.fence_counters().max().unwrap_or(0))]
                }
                (_, keys) => {
                    // One counter per key, each written back on its own (docs/design.md
                    // §8, §14); the write-backs of several keys run at once.
                    let first = |i: usize| match keys {
                        [_] => round.fence_counters().max(),
                        _ => round.fence_counters_of(i).max(),
                    };
                    let write_backs = keys.iter().enumerate().map(|(i, (resource, key))| {
                        // A reader writes back through its own key; the counter is the
                        // lock's (docs/design.md §16).
                        self.fence(
                            (holding.as_ref().unwrap_or(key), key),
                            resource,
                            &value,
                            first(i).unwrap_or(0).saturating_add(1),
                            (deadline, least),
                            plan.give_up_at,
                        )
                    });
                    let mut tokens = Vec::with_capacity(keys.len());
                    for written in futures::future::join_all(write_backs).await {
                        match written {
                            Ok(token) => tokens.push(Some(token)),
                            Err((error, cut)) => {
                                guard.outcomes = Some(round.outcomes);
                                // Cut by the wait budget: what the acquire round said is
                                // the more useful report.
                                let error = match cut {
                                    true => error.with_masters(reports),
                                    false => error,
                                };
                                return Err(Failed {
                                    error,
                                    holder_free_at: None,
                                    held: Vec::new(),
                                    cut,
                                    tickets: Vec::new(),
                                    release: keep(guard),
                                });
                            }
                        }
                    }
                    tokens
                }
            };
            guard.disarm();
            if let (Shape::Write { intent, .. }, [(_, key)]) = (shape, &*target.keys) {
                clear_intent_after_grant(inner, key, intent, &round.outcomes, round.late);
            }
            let claim = inner.held.claim(
                &target
                    .keys
                    .iter()
                    .map(|(_, k)| Arc::clone(k))
                    .collect::<Vec<_>>(),
                shape.held_mode(),
            );
            let keys = target
                .keys
                .iter()
                .zip(tokens)
                .map(|((resource, key), token)| {
                    let lock = LeaseKey::new(
                        Arc::clone(resource),
                        Arc::clone(key),
                        token.map(FencingToken::new),
                    );
                    // A read lease's key is its reader key; its release notice goes on the
                    // lock's channel, where writers wait (docs/design.md §16).
                    match &holding {
                        Some(reader) => LeaseKey {
                            key: Arc::clone(reader),
                            ..lock
                        },
                        None => lock,
                    }
                })
                .collect();
            return Ok(Lease::new(
                Arc::clone(inner),
                LeaseParams {
                    keys,
                    mode: shape.mode(),
                    value,
                    ttl,
                    deadline,
                    safety_margin: config.safety_margin(ttl),
                    acquired: reports,
                },
            )
            .with_claim(claim));
        }

        let spare = inner.masters.len() - inner.quorum;
        let (kind, detail, voters_at) = match permanent_failure(&reports, spare) {
            Some((kind, fixes)) => (kind, Some(fixes), None),
            None => {
                let (kind, voters_at) = failure_kind(&round.outcomes, inner.quorum);
                let detail = voters_at.map(|_| {
                    "too few masters vote yet: the others are in restart quarantine, because \
                     they may have lost lock keys (new masters abstain once, for ttl_max)"
                        .to_owned()
                });
                (kind, detail, voters_at)
            }
        };
        let holder_free_at = round
            .holder_free_in(inner.quorum)
            .and_then(|d| round.t0.checked_add(d));
        let held = match target.keys.len() {
            1 => Vec::new(),
            n => round.held_keys(n),
        };
        guard.outcomes = Some(round.outcomes);
        let mut error = Error::new(kind, &**resource).with_masters(reports);
        if let Some(detail) = detail {
            error = error.with_detail(detail);
        }
        if let Some(at) = voters_at {
            error = error.with_retry_at(at);
        }
        let tickets = round
            .replies
            .iter()
            .flatten()
            .filter_map(|r| match r {
                Reply::Checked {
                    ticket: Some(t), ..
                } => Some(*t),
                _ => None,
            })
            .collect();
        Err(Failed {
            error,
            holder_free_at,
            held,
            cut: round.cut,
            tickets,
            release: keep(guard),
        })
    }

    /// The fencing write-back (phase 2, see `fencing.rs`): raises the counters to a token
    /// starting at `token`, above every counter a master reports in conflict, until a
    /// quorum accepted one, within the lease's validity.
    pub(crate) async fn fence(
        &self,
        (key, lock): (&Arc<str>, &Arc<str>),
        resource: &Arc<str>,
        value: &Arc<str>,
        mut token: u64,
        (deadline, least): (Instant, Duration),
        give_up_at: Instant,
    ) -> Result<u64, (Error, bool)> {
        // Each conflict raises the token past a counter that exists, and each failure
        // without one is retried after a pause; the bound only guards against a master
        // answering nonsense. The lease's validity bounds the time. The error comes with
        // whether the wait budget cut a round.
        const MAX_ROUNDS: usize = 16;
        let inner = &self.inner;
        let n = inner.masters.len();
        let mut last = Vec::new();
        for _ in 0..MAX_ROUNDS {
            if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                break;
            }
            let op = Arc::new(Op::Fence {
                counter: scripts::fence_key(lock).into(),
                key: Arc::clone(key),
                value: Arc::clone(value),
                token,
            });
            let bounds = inner.bounds(Some(deadline.min(give_up_at)));
            let started = Instant::now();
            let traced = telemetry::resource(resource, inner.config.trace_resource_names);
            let round = quorum::run(&inner.masters, op, inner.quorum, traced, bounds).await;
            if round.cut && Instant::now() >= give_up_at {
                let error = Error::new(ErrorKind::FencingFailed, &**resource)
                    .with_detail("the wait budget ran out during the fencing write-back");
                return Err((error, true));
            }
            // Keep what each master last said: a master cut off by the deadline in this
            // round may have said why it does not count in an earlier one.
            let reports = round.reports(&inner.masters);
            last = if last.is_empty() {
                reports
            } else {
                reports
                    .into_iter()
                    .zip(last)
                    .map(|(new, old)| match new.outcome() {
                        MasterOutcome::Pending => old,
                        _ => new,
                    })
                    .collect()
            };
            if round.decision == Decision::Reached {
                if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                    break;
                }
                return Ok(token);
            }
            if let Some(counter) = round.fence_counters().max().filter(|c| *c >= token) {
                token = counter.saturating_add(1);
                continue;
            }
            let count =
                |f: fn(&MasterOutcome) -> bool| round.outcomes.iter().filter(|o| f(o)).count();
            if count(|o| matches!(o, MasterOutcome::HeldByOther)) > n - inner.quorum {
                return Err((
                    Error::new(ErrorKind::FencingFailed, &**resource)
                        .with_detail("no quorum of masters still held this acquisition")
                        .with_masters(last),
                    false,
                ));
            }
            let unfit = count(
                |o| matches!(o, MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Misconfigured),
            );
            if unfit > n - inner.quorum {
                return Err((
                    Error::new(ErrorKind::Misconfigured, &**resource)
                        .with_detail(
                            "fencing tokens need durable masters (appendonly yes, appendfsync \
                             always) that never lost data, and too few are: make the masters \
                             durable, or acquire without fencing",
                        )
                        .with_masters(last),
                    false,
                ));
            }
            // Timeouts or abstentions, with no conflict: try the same token again after a
            // pause of one round (at least a millisecond), while the lease is valid.
            let pause = started.elapsed().max(Duration::from_millis(1));
            let latest = deadline
                .checked_sub(least)
                .unwrap_or(deadline)
                .min(give_up_at);
            tokio::time::sleep_until((Instant::now() + pause).min(latest)).await;
        }
        let detail = if deadline::validity_left(deadline, Instant::now(), least).is_some() {
            format!("no quorum of masters confirmed a token in {MAX_ROUNDS} write-back rounds")
        } else {
            "the lease's validity ran out before a quorum confirmed a token".to_owned()
        };
        Err((
            Error::new(ErrorKind::FencingFailed, &**resource)
                .with_detail(detail)
                .with_masters(last),
            false,
        ))
    }
}

/// Refuses to run outside a tokio runtime, where the masters' I/O and timers cannot run.
pub(crate) fn check_runtime(resource: &str) -> Result<(), Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::NoRuntime, resource).with_detail(
        "redquorum must be called inside a tokio runtime (features rt, time, net, macros; \
         rt-multi-thread for #[tokio::main]) with time and I/O enabled",
    ))
}

/// Refuses resource names that are empty, in the crate's record namespace (alone or
/// behind `prefix`, the key prefix), or longer than [`MAX_RESOURCE_LEN`].
pub(crate) fn check_resource(prefix: &str, resource: &str) -> Result<(), Error> {
    let namespace = scripts::RECORD_NAMESPACE;
    // The key is `prefix + resource`; a prefix never starts with the namespace (the
    // builder refuses it), but it may be the namespace's beginning ("redq").
    let in_records = namespace
        .strip_prefix(prefix)
        .is_some_and(|rest| resource.starts_with(rest));
    let detail = if resource.is_empty() {
        "it is empty: name the resource to lock, such as \"orders:42\"".to_owned()
    } else if resource.starts_with(namespace) {
        format!("it starts with {namespace:?}, where the lock's own records live: use another name")
    } else if in_records {
        format!(
            "its key, {prefix:?} followed by the name, starts with {namespace:?}, where the \
             lock's own records live: use another name"
        )
    } else if resource.len() > MAX_RESOURCE_LEN {
        format!(
            "it is longer than MAX_RESOURCE_LEN ({MAX_RESOURCE_LEN} bytes): use a shorter \
             name, such as a hash of this one"
        )
    } else {
        return Ok(());
    };
    Err(Error::new(ErrorKind::InvalidResource, resource).with_detail(detail))
}

impl Redlock {
    /// Before an operator's write that ignores values (a force-unlock): reads every
    /// master's cluster record (`Op::Survey`) and judges them from scratch, as a new client
    /// would (docs/design.md §11). A master of another cluster or configuration, one
    /// server listed twice, two servers with one member id, or a master without a record
    /// in an initialised cluster makes the call fail with `ClusterMismatch` before
    /// anything is written: such a master's keys are another cluster's, and its answer
    /// must not count. Masters that do not answer are left to the call itself.
    /// With `strangers_allowed` (a re-admission), a master without a record is left to
    /// the caller.
    pub(crate) async fn check_agreement(
        &self,
        subject: &str,
        strangers_allowed: bool,
    ) -> Result<(), Error> {
        let inner = &self.inner;
        let answers =
            futures::future::join_all(inner.masters.iter().map(|m| m.call(Arc::new(Op::Survey))))
                .await;
        let names: Vec<Arc<str>> = inner.masters.iter().map(|m| Arc::clone(m.name())).collect();
        let view = View::new(Self::terms(&inner.config), names.clone());
        let mut without = Vec::new();
        for (index, answer) in answers.iter().enumerate() {
            if let Ok(Reply::Survey { run_id, record, .. }) = answer {
                view.connected(index, Some(run_id), record.as_deref());
                if record.is_none() {
                    without.push(index);
                }
            }
        }
        let mut refused = Vec::new();
        // Judged once every master was seen: a twin met first is refused only once the
        // second was judged.
        for (index, name) in names.iter().enumerate() {
            let stranger = without.contains(&index) && view.adopted().is_some();
            match view.refused(index) {
                Some(e) if e.kind() == MasterErrorKind::ClusterMismatch => {
                    refused.push(format!("{name}: {e}"));
                }
                Some(_) | None if stranger && strangers_allowed => {}
                Some(e) => refused.push(format!("{name}: {e}")),
                None if stranger => refused.push(format!(
                    "{name}: it has no cluster record although its cluster is initialised: \
                     it lost its data, or it is not a member"
                )),
                None => {}
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(
            Error::new(ErrorKind::ClusterMismatch, subject).with_detail(format!(
                "{}; nothing was changed: list the cluster's own masters",
                refused.join("; ")
            )),
        )
    }
}

/// A refusal that no quorum can outvote (docs/design.md §11): a master whose cluster record
/// disagrees with this client's configuration (or that it reaches twice), or a name that
/// holds another kind of lock. Its kind and the masters' own words.
pub(crate) fn refusal(reports: &[MasterReport]) -> Option<(ErrorKind, String)> {
    for (master_kind, kind) in [
        (MasterErrorKind::ClusterMismatch, ErrorKind::ClusterMismatch),
        (MasterErrorKind::WrongKind, ErrorKind::WrongKind),
        (MasterErrorKind::LimitMismatch, ErrorKind::LimitMismatch),
    ] {
        // Each distinct reason once; the masters' reports name who said it.
        let mut found: Vec<String> = Vec::new();
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == master_kind
                && !found.iter().any(|f| *f == e.to_string())
            {
                found.push(e.to_string());
            }
        }
        if !found.is_empty() {
            return Some((kind, found.join("; ")));
        }
    }
    None
}

/// Failures that last until a configuration changes (authentication, evicting masters), if
/// they alone leave too few masters able to grant: their kind and what to change. `spare`
/// is how many masters a quorum can do without.
pub(crate) fn permanent_failure(
    reports: &[MasterReport],
    spare: usize,
) -> Option<(ErrorKind, String)> {
    let failed = |kind: MasterErrorKind| -> Vec<&str> {
        reports
            .iter()
            .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(e) if e.kind() == kind))
            .map(MasterReport::master)
            .collect()
    };
    let auth = failed(MasterErrorKind::Auth);
    let tls = failed(MasterErrorKind::Tls);
    let evicting = failed(MasterErrorKind::Misconfigured);
    // Failures that last until a configuration changes leave too few masters able to
    // grant, whatever the others do: retrying cannot help.
    if auth.len() + tls.len() + evicting.len() > spare {
        let mut fixes = Vec::new();
        // The masters that failed the TLS handshake, grouped by what to change (the CA,
        // the host name, a certificate).
        let mut handshakes: Vec<(String, Vec<&str>)> = Vec::new();
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == MasterErrorKind::Tls
            {
                let why = e.to_string();
                match handshakes.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, masters)) => masters.push(report.master()),
                    None => handshakes.push((why, vec![report.master()])),
                }
            }
        }
        for (why, masters) in handshakes {
            fixes.push(format!("{}: {why}", masters.join(", ")));
        }
        if !auth.is_empty() {
            fixes.push(format!(
                "{} refused authentication: check the user and password in their URLs and \
                 the masters' ACLs",
                auth.join(", ")
            ));
        }
        // Each unfit master with its own reason (an evicting policy, a missing cluster
        // record, a copy of another master's data) and what to change.
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == MasterErrorKind::Misconfigured
            {
                fixes.push(format!("{}: {e}", report.master()));
            }
        }
        let kind = if !tls.is_empty() {
            ErrorKind::Tls
        } else if auth.is_empty() {
            ErrorKind::Misconfigured
        } else {
            ErrorKind::Auth
        };
        return Some((kind, fixes.join("; ")));
    }
    None
}

/// A random pause that spreads the waiters woken by one event over a round's time (at
/// least a millisecond), doubling after each of up to three lost races in a row, so that
/// the first usually wins alone instead of splitting the votes.
pub(crate) fn spread(round: Duration, herd: u32) -> Duration {
    round
        .max(Duration::from_millis(1))
        .saturating_mul(1 << herd.min(3))
        .mul_f64(with_rng(|rng| rng.random::<f64>()))
}

/// When a waiter tries again after the holder's keys expire at `free`: spread out like
/// the waiters woken by a notice, since they all read the same expiry.
pub(crate) fn holder_wake(free: Instant, now: Instant, round: Duration, herd: u32) -> Instant {
    free.max(now) + spread(round, herd)
}

/// The kind of a failed acquire round and, when too few masters vote, the instant enough
/// of them vote again.
pub(crate) fn failure_kind(
    outcomes: &[MasterOutcome],
    quorum: usize,
) -> (ErrorKind, Option<Instant>) {
    let n = outcomes.len();
    let denied = outcomes
        .iter()
        .filter(|o| matches!(o, MasterOutcome::HeldByOther))
        .count();
    // Held by others on so many masters that no quorum was possible even if every
    // failed master had granted: contention, not an outage.
    if denied > n - quorum {
        return (ErrorKind::Contended, None);
    }
    let mut abstaining: Vec<Instant> = outcomes
        .iter()
        .filter_map(|o| match o {
            MasterOutcome::Abstained { until } => Some(*until),
            _ => None,
        })
        .collect();
    let voters = n - abstaining.len();
    if voters < quorum {
        // Enough of them must come back for a quorum: the (quorum - voters)-th earliest.
        abstaining.sort_unstable();
        let at = abstaining.get(quorum - voters - 1).copied();
        return (ErrorKind::NotEnoughVoters, at);
    }
    (ErrorKind::NoQuorum, None)
}

/// The error of a wait whose budget ran out (docs/design.md §9), from `error`: the last
/// failure the masters decided or, when none was, the round the budget cut. Only a
/// refusal says that the lock is held: [`ErrorKind::WaitTimeout`]. Any other failure
/// keeps its kind, an outage ([`ErrorKind::NoQuorum`]) above all, so that a wait that met
/// only failures never reads as "someone else holds it". `refused` says whether a master
/// refused the lock at any point of the wait.
pub(crate) fn budget_spent(error: Error, attempts: u32, refused: bool) -> Error {
    let attempts_made = match attempts {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    if error.kind() == ErrorKind::Contended {
        let detail = format!(
            "wait budget used up after {attempts_made} (last: {})",
            kind_word(error.kind())
        );
        return error
            .with_kind(ErrorKind::WaitTimeout)
            .with_detail(detail)
            .with_attempts(attempts);
    }
    let history = match refused {
        true => {
            "; a master refused the lock during the wait, but the last attempt failed for \
                 another reason"
        }
        false => ", and no master ever refused the lock",
    };
    let mut detail = format!("gave up waiting: wait budget used up after {attempts_made}{history}");
    if let Some(before) = error.detail() {
        detail.push_str("; ");
        detail.push_str(before);
    }
    error.with_detail(detail).with_attempts(attempts)
}

/// [`budget_spent`] for a wait that queued behind a refusal (docs/design.md §17).
pub(crate) fn wait_timeout(error: Error, attempts: u32) -> Error {
    budget_spent(error, attempts, true)
}

impl Redlock {
    /// What a queued waiter reports if its budget ends after `round`, a refresh of its
    /// registration (docs/design.md §9, §17): `held`, the refusal it queued behind, while
    /// enough masters answer the refresh for a quorum; otherwise the outage, so that a
    /// waiter whose masters went down since it queued does not report contention. A
    /// refresh that the budget cut leaves `last` as it was.
    pub(crate) fn after_refresh(
        &self,
        round: &quorum::Round,
        name: &str,
        held: &Error,
        last: Error,
    ) -> Error {
        if round.cut {
            // The budget, not the masters, ended it: it decides nothing.
            return last;
        }
        let inner = &self.inner;
        let answered = round
            .outcomes
            .iter()
            .filter(|o| {
                !matches!(
                    o,
                    MasterOutcome::Failed(_)
                        | MasterOutcome::Pending
                        | MasterOutcome::Abstained { .. }
                )
            })
            .count();
        if answered >= inner.quorum {
            return held.clone();
        }
        let reports = round.reports(&inner.masters);
        let spare = inner.masters.len() - inner.quorum;
        if let Some((kind, fixes)) = permanent_failure(&reports, spare) {
            return Error::new(kind, name)
                .with_detail(fixes)
                .with_masters(reports);
        }
        let (kind, voters_at) = failure_kind(&round.outcomes, inner.quorum);
        let error = Error::new(kind, name).with_masters(reports);
        match voters_at {
            Some(at) => error.with_retry_at(at),
            None => error,
        }
    }
}

/// Whether a master refused the lock in `error`'s round: it holds another value.
pub(crate) fn refused_by_any(error: &Error) -> bool {
    error
        .masters()
        .iter()
        .any(|r| matches!(r.outcome(), MasterOutcome::HeldByOther))
}

fn kind_word(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Contended => "held by another client",
        ErrorKind::NoQuorum => "no quorum reachable",
        ErrorKind::ValidityExhausted => "validity used up",
        ErrorKind::NotEnoughVoters => "too few masters vote yet",
        ErrorKind::FencingFailed => "no fencing token confirmed",
        _ => "failed",
    }
}

/// What one acquire call locks: one resource, or several.
struct Target {
    /// (resource, key on the masters) pairs: one, or several sorted by key.
    keys: Vec<(Arc<str>, Arc<str>)>,
    /// The name in errors and traces: the resource, or the resources joined.
    name: Arc<str>,
    /// A mutex (one key or several), or a read-write lock in one mode (one key).
    shape: Shape,
}

impl Target {
    /// The locks of every resource of `resources`, keys sorted; refuses an empty list, a
    /// resource listed twice, more than [`MAX_RESOURCES`], and any name `acquire` refuses.
    fn many(config: &Config, resources: &[&str]) -> Result<Self, Error> {
        let listed = list_name(resources);
        let invalid = |detail: String| {
            Err(Error::new(ErrorKind::InvalidResource, listed.as_str()).with_detail(detail))
        };
        if resources.is_empty() {
            return invalid(
                "the list of resources is empty: name at least one resource to lock".into(),
            );
        }
        if resources.len() > MAX_RESOURCES {
            return invalid(format!(
                "{} resources listed, more than MAX_RESOURCES ({MAX_RESOURCES}): lock fewer at \
                 once, or lock one resource that stands for the group",
                resources.len()
            ));
        }
        for resource in resources {
            check_resource(&config.key_prefix, resource)?;
        }
        let mut keys: Vec<(Arc<str>, Arc<str>)> = resources
            .iter()
            .map(|r| (Arc::from(*r), format!("{}{r}", config.key_prefix).into()))
            .collect();
        keys.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        if let Some(pair) = keys.windows(2).find(|w| w[0].1 == w[1].1) {
            let twice = &pair[0].0;
            return invalid(format!(
                "{twice:?} is listed twice: list each resource once"
            ));
        }
        let name = list_name(&keys.iter().map(|(r, _)| &**r).collect::<Vec<_>>()).into();
        Ok(Self {
            keys,
            name,
            shape: Shape::Mutex,
        })
    }

    /// The lock of `resource` alone, taken as `shape` says.
    fn one(config: &Config, resource: &str, shape: Shape) -> Self {
        let key: Arc<str> = format!("{}{resource}", config.key_prefix).into();
        let resource: Arc<str> = resource.into();
        Self {
            keys: vec![(Arc::clone(&resource), key)],
            name: resource,
            shape,
        }
    }

    /// The release channels to wait on after an attempt found the lock held: those of the
    /// keys found `held` (all of them when none is known).
    fn channels(&self, held: &[bool]) -> Vec<Arc<str>> {
        let known = held.iter().any(|h| *h);
        self.keys
            .iter()
            .enumerate()
            .filter(|(i, _)| !known || held.get(*i).copied().unwrap_or(false))
            .map(|(_, (_, key))| scripts::release_channel(key).into())
            .collect()
    }
}

/// Resolves at the next release notice of any of `subscriptions`.
async fn notified(subscriptions: &mut [Subscription]) {
    match subscriptions {
        [] => std::future::pending().await,
        [one] => one.notified().await,
        many => {
            let each = many.iter_mut().map(|s| Box::pin(s.notified()));
            let _ = futures::future::select_all(each).await;
        }
    }
}

/// What an acquire call takes: a mutex, or a read-write lock in one mode
/// (docs/design.md §16).
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    Mutex,
    Read,
    /// A writer; the intent's id and TTL are chosen per call by `acquire_rounds`.
    Write {
        intent: Arc<str>,
        intent_ttl: Duration,
    },
}

impl Shape {
    /// A writer, its intent still to be chosen.
    pub(crate) fn write() -> Self {
        Shape::Write {
            intent: "".into(),
            intent_ttl: Duration::ZERO,
        }
    }

    /// How a lease of this shape holds its lock's key in the client's registry.
    fn held_mode(&self) -> HeldMode {
        match self {
            Shape::Read => HeldMode::Shared,
            Shape::Mutex | Shape::Write { .. } => HeldMode::Exclusive,
        }
    }

    fn mode(&self) -> LeaseMode {
        match self {
            Shape::Mutex => LeaseMode::Exclusive,
            Shape::Read => LeaseMode::Read,
            Shape::Write { .. } => LeaseMode::Write,
        }
    }
}

/// Clears a writer's intent on every master in the background (compare-and-delete,
/// publishing the release notice so that readers it held back wake) when the call ends
/// without the lock: an error, the wait budget, a dropped future. A call that acquired
/// the lock disarms it: [`clear_intent_after_grant`] takes over.
struct IntentGuard {
    inner: Arc<Inner>,
    key: Arc<str>,
    intent: Arc<str>,
    armed: bool,
}

impl IntentGuard {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for IntentGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let intent: Arc<str> = scripts::intent_key(&self.key).into();
        let channel: Arc<str> = scripts::release_channel(&self.key).into();
        release_in_background(
            &self.inner,
            self.inner.masters.clone(),
            &[(intent, channel)],
            &self.intent,
        );
    }
}

/// After a writer's grant (docs/design.md §16): the masters that granted deleted the
/// call's intent; every other one may hold it, set by this attempt or an earlier one of
/// the call, and it is cleared there in the background as [`IntentGuard`] clears it. A
/// master whose answer was still pending is judged by its `late` answer: a grant there
/// deleted the intent too, and an unknown answer is cleared. A write granted by every
/// master sends nothing more.
fn clear_intent_after_grant(
    inner: &Arc<Inner>,
    key: &Arc<str>,
    intent: &Arc<str>,
    outcomes: &[MasterOutcome],
    late: Option<tokio::sync::oneshot::Receiver<Vec<(usize, MasterOutcome)>>>,
) {
    if outcomes.iter().all(MasterOutcome::is_granted) {
        return;
    }
    let mut left: Vec<bool> = outcomes.iter().map(|o| !o.is_granted()).collect();
    let keys: [(Arc<str>, Arc<str>); 1] = [(
        scripts::intent_key(key).into(),
        scripts::release_channel(key).into(),
    )];
    let clear = move |inner: &Arc<Inner>, left: &[bool], intent: &Arc<str>| {
        let targets: Vec<Arc<dyn Master>> = inner
            .masters
            .iter()
            .zip(left)
            .filter(|(_, left)| **left)
            .map(|(m, _)| Arc::clone(m))
            .collect();
        release_in_background(inner, targets, &keys, intent);
    };
    let pending = outcomes.iter().any(|o| matches!(o, MasterOutcome::Pending));
    match late {
        Some(late) if pending => {
            let (shared, intent) = (Arc::clone(inner), Arc::clone(intent));
            let spawned = inner.spawn(async move {
                // The stragglers answer within their call bound; a closed channel leaves
                // them to be cleared.
                if let Ok(answers) = late.await {
                    for (i, outcome) in answers {
                        if let Some(left) = left.get_mut(i) {
                            *left = !outcome.is_granted();
                        }
                    }
                }
                clear(&shared, &left, &intent);
            });
            if !spawned {
                tracing::debug!("no runtime to clear a writer's intent: it expires with its TTL");
            }
        }
        _ => clear(inner, &left, intent),
    }
}

/// Releases an attempt's value in the background unless the attempt became a lease:
/// on failure, and when the acquire future is dropped mid-round.
pub(crate) struct AttemptGuard {
    pub(crate) inner: Arc<Inner>,
    /// The attempt's lock keys (one, or several for `acquire_many`, or a semaphore's slots).
    pub(crate) keys: Vec<Arc<str>>,
    /// The release notice of every key (a semaphore's slots share one); `None`: each
    /// key's own channel.
    pub(crate) channel: Option<Arc<str>>,
    pub(crate) value: Arc<str>,
    /// The round's outcomes when known: masters that refused never set our value and
    /// are skipped. `None` (cancelled mid-round): release everywhere.
    pub(crate) outcomes: Option<Vec<MasterOutcome>>,
    pub(crate) armed: bool,
}

impl AttemptGuard {
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let targets: Vec<Arc<dyn Master>> = match &self.outcomes {
            Some(outcomes) => self
                .inner
                .masters
                .iter()
                .zip(outcomes)
                .filter(|(_, o)| !matches!(o, MasterOutcome::HeldByOther))
                .map(|(m, _)| Arc::clone(m))
                .collect(),
            None => self.inner.masters.clone(),
        };
        let keys: Vec<(Arc<str>, Arc<str>)> = self
            .keys
            .iter()
            .map(|k| {
                let channel = match &self.channel {
                    Some(shared) => Arc::clone(shared),
                    None => scripts::release_channel(k).into(),
                };
                (Arc::clone(k), channel)
            })
            .collect();
        release_in_background(&self.inner, targets, &keys, &self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_resource_names_a_record_alone_or_behind_the_key_prefix() {
        let refused = |prefix: &str, resource: &str| {
            check_resource(prefix, resource).is_err_and(|e| e.kind() == ErrorKind::InvalidResource)
        };
        assert!(refused("", "redquorum:epoch"));
        assert!(refused("locks:", "redquorum:epoch"));
        // The prefix begins the namespace, the name ends it: the key is a record's.
        assert!(refused("redq", "uorum:epoch"));
        assert!(refused("redquorum", ":fence:orders"));
        assert!(refused("r", "edquorum:cluster"));
        // The waiter queue, a waiter's liveness key and the ticket counter of a lock.
        for record in [
            scripts::queue_key("orders:1"),
            scripts::waiter_key("orders:1", "00ff"),
            scripts::ticket_key("orders:1"),
        ] {
            assert!(refused("", &record), "{record}");
            assert!(refused("locks:", &record), "{record}");
        }
        // Near misses are names like any other.
        assert!(!refused("redq", "uorum-epoch"));
        assert!(!refused("locks:", "uorum:epoch"));
        assert!(!refused("redquorum", "s:orders"));
        assert!(!refused("", "orders:42"));
    }

    #[test]
    fn waiters_woken_by_the_holders_expiry_do_not_all_wake_at_once() {
        let now = Instant::now();
        let free = now + Duration::from_millis(50);
        let round = Duration::from_micros(400);
        let wakes: Vec<Instant> = (0..64).map(|_| holder_wake(free, now, round, 0)).collect();
        assert!(
            wakes
                .iter()
                .all(|w| *w >= free && *w < free + Duration::from_millis(1))
        );
        let first = wakes[0];
        assert!(
            wakes.iter().any(|w| *w != first),
            "no jitter at the holder's expiry"
        );
        // After lost races the spread grows, up to eight times.
        let late = (0..64)
            .map(|_| holder_wake(free, now, round, 10))
            .max()
            .unwrap_or(free);
        assert!(late < free + Duration::from_millis(8));
    }

    #[test]
    fn too_few_voters_say_when_enough_vote_again() {
        let now = Instant::now();
        let at = |ms| MasterOutcome::Abstained {
            until: now + Duration::from_millis(ms),
        };
        let granted = MasterOutcome::Granted;
        // 5 masters, quorum 3: one votes, four abstain; two of them must come back.
        let outcomes = [granted.clone(), at(400), at(100), at(300), at(200)];
        let (kind, when) = failure_kind(&outcomes, 3);
        assert_eq!(kind, ErrorKind::NotEnoughVoters);
        assert_eq!(when, Some(now + Duration::from_millis(200)));
        // Enough vote: a failure among the voters is an outage, not quarantine.
        let outcomes = [
            granted.clone(),
            granted.clone(),
            at(100),
            MasterOutcome::Pending,
            at(5),
        ];
        assert_eq!(failure_kind(&outcomes, 3), (ErrorKind::NoQuorum, None));
        // Held elsewhere beats everything.
        let held = MasterOutcome::HeldByOther;
        let outcomes = [held.clone(), held.clone(), held, at(1), at(2)];
        assert_eq!(failure_kind(&outcomes, 3), (ErrorKind::Contended, None));
    }

    /// A durable, long-running master that grants every acquire, releases, and answers
    /// each fencing write-back from a script (the last answer repeats).
    #[derive(Debug)]
    struct Scripted {
        name: Arc<str>,
        fence: std::sync::Mutex<Vec<Result<crate::master::FenceOutcome, ()>>>,
    }

    impl Master for Scripted {
        fn name(&self) -> &Arc<str> {
            &self.name
        }

        fn call(
            &self,
            op: Arc<Op>,
        ) -> futures::future::BoxFuture<
            'static,
            Result<crate::master::Reply, crate::error::MasterError>,
        > {
            use crate::master::{EpochReport, FenceOutcome, Reply};
            let epoch = EpochReport {
                record: Some("e:1".to_owned()),
                now_us: 10_000_000_000,
            };
            let reply = match &*op {
                Op::AcquireChecked { .. } => Ok(Reply::Checked {
                    granted: true,
                    epoch,
                    fence: Some(0),
                    holder_ttl: None,
                    ticket: None,
                }),
                Op::Fence { .. } => {
                    let mut script = self.fence.lock().unwrap_or_else(|e| e.into_inner());
                    let next = if script.len() > 1 {
                        script.remove(0)
                    } else {
                        script[0]
                    };
                    match next {
                        Ok(outcome) => Ok(Reply::Fenced {
                            outcome,
                            before: (outcome == FenceOutcome::Conflict).then_some(0),
                            epoch,
                        }),
                        Err(()) => Err(crate::error::MasterError::new(
                            MasterErrorKind::Timeout,
                            "no answer within the node timeout",
                        )),
                    }
                }
                _ => Ok(Reply::Granted),
            };
            Box::pin(async move { reply })
        }

        fn vitals(&self) -> Option<(u64, Arc<crate::quarantine::Vitals>)> {
            Some((
                1,
                Arc::new(crate::quarantine::Vitals {
                    run_id: "r".to_owned(),
                    uptime: Duration::from_secs(10_000),
                    durable: true,
                    epoch: crate::quarantine::Epoch {
                        id: "e".into(),
                        created_us: 1,
                        now_us: 10_000_000_000,
                    },
                    misconfigured: None,
                    bootstrapped: false,
                    counters_lost: false,
                }),
            ))
        }
    }

    fn fenced_client(scripts: [Vec<Result<crate::master::FenceOutcome, ()>>; 3]) -> Redlock {
        let config = Builder::new()
            .masters([
                "redis://127.0.0.1:1",
                "redis://127.0.0.1:2",
                "redis://127.0.0.1:3",
            ])
            .fencing(true)
            .notifications(false)
            .into_config()
            .unwrap_or_else(|e| panic!("{e}"));
        let masters = scripts
            .into_iter()
            .enumerate()
            .map(|(i, fence)| {
                Arc::new(Scripted {
                    name: format!("m{i}").into(),
                    fence: std::sync::Mutex::new(fence),
                }) as Arc<dyn Master>
            })
            .collect();
        Redlock::with_masters(config, masters, Notifier::disabled())
    }

    /// A write-back that failed on a timeout, with no conflict and validity left, is tried
    /// again within the validity instead of failing the acquisition.
    #[tokio::test(start_paused = true)]
    async fn a_write_back_that_timed_out_without_conflict_is_retried() {
        use crate::master::FenceOutcome::{NotOurs, Written};
        let client = fenced_client([
            vec![Ok(Written)],
            vec![Err(()), Ok(Written)],
            vec![Ok(NotOurs)],
        ]);
        let lease = client
            .try_acquire("r")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lease.fencing_token().map(|t| t.get()), Some(1));
    }

    /// Held by others on too many masters, the write-back fails at once: the lock is lost.
    #[tokio::test(start_paused = true)]
    async fn a_write_back_no_quorum_still_holds_fails_at_once() {
        use crate::master::FenceOutcome::{NotOurs, Written};
        let client = fenced_client([vec![Ok(Written)], vec![Ok(NotOurs)], vec![Ok(NotOurs)]]);
        let err = match client.try_acquire("r").await {
            Ok(_) => panic!("granted without a token quorum"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), ErrorKind::FencingFailed, "{err}");
        assert!(err.to_string().contains("still held"), "{err}");
    }
}
