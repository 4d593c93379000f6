//! The client handle: acquire a lock on a quorum of masters (docs/design.md §3), wait
//! for it (§6), and take a fencing token (§8).
//!
//! Owns the public facade: the only module that composes rounds, leases and waiting into
//! public operations. Layer: the top (docs/design.md §10); nothing in the crate uses it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::core::{Inner, check_resource, check_runtime, random_value};
use crate::engine::{self, Intent, Kind, Target};
pub(crate) use crate::engine::{AcquireOptions, Plan};

use crate::cluster::{Owner, Terms, View};
use crate::config::{Builder, Config, ConfigError};
use crate::error::{Error, ErrorKind, MasterErrorKind};
use crate::guard::Guarded;
use crate::health::{self, HealthReport};
use crate::held::Held;
use crate::lease::{Lease, LeaseHandle};
use crate::master::{Master, Op, RedisMaster, Reply};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::quorum;
use crate::telemetry;
use crate::wait::Notifier;

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
            let master = RedisMaster::new(
                spec,
                (index, &view),
                node_timeout,
                config.connect_timeout,
                config.quarantine,
            )
            .map_err(|e| ConfigError::InvalidUrl {
                url: spec.name.to_string(),
                reason: e.to_string(),
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

    /// Acquires `resource` as `shape` says: the body of every acquire call of one
    /// resource.
    pub(crate) async fn acquire_shaped(
        &self,
        resource: &str,
        options: &AcquireOptions,
        shape: Shape,
    ) -> Result<Lease, Error> {
        let inner = &self.inner;
        engine::acquire(inner, || {
            check_runtime(resource)?;
            check_resource(&inner.config.key_prefix, resource)?;
            let plan = Plan::new(inner, resource, options)?;
            if let Shape::Read | Shape::Write = shape {
                plan.refuse_fair(resource, "read-write locks")?;
            }
            // A writer's intent (docs/design.md §16): one id for the whole call, refreshed
            // by each attempt while readers hold the lock.
            let kind = match shape {
                Shape::Mutex => Kind::Mutex,
                Shape::Read => Kind::Read,
                Shape::Write => Kind::Write(Intent {
                    id: random_value().into(),
                    ttl: plan.ttl,
                }),
            };
            Ok((Target::one(&inner.config, resource, kind), plan))
        })
        .await
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
        let inner = &self.inner;
        engine::acquire(inner, || {
            let target = Target::many(&inner.config, resources)?;
            check_runtime(&target.name)?;
            let plan = Plan::new(inner, &target.name, options)?;
            plan.refuse_fair(&target.name, "acquire_many")?;
            Ok((target, plan))
        })
        .await
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

/// What an acquire of one resource takes: a mutex, or a read-write lock in one mode
/// (docs/design.md §16).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    Mutex,
    Read,
    Write,
}

#[cfg(test)]
mod tests {
    use super::*;

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
