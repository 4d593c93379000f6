//! The client handle: acquire a lock on a quorum of masters.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{
    Builder, Config, ConfigError, DEFAULT_RETRY_ATTEMPTS, DurationSetting, IntoDuration,
    MAX_MAX_HOLD, MAX_RESOURCE_LEN, MAX_WAIT_TIMEOUT, at_most, duration,
};
use crate::error::{Error, ErrorKind, MasterErrorKind, MasterOutcome, MasterReport, human};
use crate::fencing::FencingToken;
use crate::guard::{EpochBoard, Guarded};
use crate::lease::{Lease, LeaseHandle, LeaseParams, Watchdog};
use crate::master::{FenceRead, Master, Op, RedisMaster};
use crate::mutants::Mutant;
use crate::quorum::{self, Decision};
use crate::wait::{Notifier, Subscription};
use crate::{deadline, scripts};

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

/// What every clone of a client and every lease share.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) masters: Vec<Arc<dyn Master>>,
    pub(crate) quorum: usize,
    pub(crate) notifier: Arc<Notifier>,
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
    /// At most [`MAX_TTL`](crate::MAX_TTL) in any case.
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
    /// [`MAX_WAIT_TIMEOUT`](crate::MAX_WAIT_TIMEOUT).
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
    /// `max_hold`. At most [`MAX_MAX_HOLD`](crate::MAX_MAX_HOLD).
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
}

/// Settings of one acquire call, resolved against the client's configuration.
struct Plan {
    ttl: Duration,
    fencing: bool,
    attempts: u32,
    give_up_at: Option<Instant>,
    watchdog: bool,
    max_hold: Option<Duration>,
}

/// A failed attempt, with what a waiter needs to know.
struct Failed {
    error: Error,
    /// When enough of the holder's keys expire for a quorum to be free, if known.
    holder_free_at: Option<Instant>,
}

impl Redlock {
    /// A builder with every default; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn from_config(config: Config) -> Result<Self, ConfigError> {
        let mut masters: Vec<Arc<dyn Master>> = Vec::with_capacity(config.masters.len());
        let node_timeout = match config.mutant {
            Some(Mutant::NoNodeTimeout) => Duration::from_secs(3600),
            _ => config.node_timeout,
        };
        for spec in &config.masters {
            let master = RedisMaster::new(
                spec,
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

    /// A client over any masters (real or simulated); with quarantine on, each is put
    /// under restart quarantine here.
    pub(crate) fn with_masters(
        config: Config,
        masters: Vec<Arc<dyn Master>>,
        notifier: Notifier,
    ) -> Self {
        let masters = if config.quarantine {
            let board = Arc::new(EpochBoard::new(masters.len(), config.quarantine_window()));
            masters
                .into_iter()
                .enumerate()
                .map(|(index, master)| {
                    Arc::new(Guarded::new(master, index, Arc::clone(&board))) as Arc<dyn Master>
                })
                .collect()
        } else {
            masters
        };
        let quorum = match config.mutant {
            Some(Mutant::HalfQuorum) => (masters.len() / 2).max(1),
            _ => quorum::quorum(masters.len()),
        };
        Self {
            inner: Arc::new(Inner {
                config,
                masters,
                quorum,
                notifier: Arc::new(notifier),
            }),
        }
    }

    /// How many masters must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The masters' addresses, passwords redacted, in the configured order.
    pub fn masters(&self) -> Vec<String> {
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
    /// # Errors
    /// After the last attempt, or when the wait budget runs out: [`ErrorKind::Contended`]
    /// (held by another client), [`ErrorKind::NoQuorum`] (masters failed),
    /// [`ErrorKind::ValidityExhausted`] (a quorum answered too late), or
    /// [`ErrorKind::WaitTimeout`]; each with every master's outcome in the last attempt.
    /// At once, without further attempts, when so many masters fail for a reason that
    /// lasts that no quorum is possible: [`ErrorKind::Auth`] (a password or ACL refused)
    /// or [`ErrorKind::Misconfigured`] (masters that can evict lock keys never vote).
    /// Before any master is asked: [`ErrorKind::InvalidResource`] for an empty name or one
    /// longer than [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes, and
    /// [`ErrorKind::NoRuntime`] when polled outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no key behind beyond its TTL: the attempt in flight is
    /// released on every master in the background, and its subscription is dropped.
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
        check_runtime(resource)?;
        check_resource(resource)?;
        let plan = self.plan(resource, options)?;
        let config = &self.inner.config;
        let key: Arc<str> = format!("{}{resource}", config.key_prefix).into();
        let resource: Arc<str> = resource.into();
        let reused: Option<Arc<str>> =
            (config.mutant == Some(Mutant::ReuseValue)).then(|| random_value().into());
        let mut waiting: Option<Subscription> = None;
        // Failed attempts in a row that a release notice had woken: every waiter of the
        // lock wakes on the same notice, and on several masters they split the votes.
        let mut herd = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let value = reused.clone().unwrap_or_else(|| random_value().into());
            let started = Instant::now();
            let failed = match self
                .attempt(&key, &resource, value, &plan, waiting.is_some())
                .await
            {
                Ok(lease) => {
                    if plan.watchdog {
                        lease.start_watchdog(Watchdog {
                            interval: config.extend_interval(plan.ttl),
                            give_up_at: plan.max_hold.and_then(|m| Instant::now().checked_add(m)),
                            round_time: config.node_timeout,
                        });
                    }
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            let round = started.elapsed();
            let error = failed.error.with_attempts(attempt);
            if attempt >= plan.attempts || !error.is_retryable() {
                return Err(error);
            }
            // Subscribe before the next attempt: a release after it reaches us, and one
            // before the subscription took effect is seen by that attempt (wait.rs).
            if waiting.is_none() && config.notifications && error.kind() == ErrorKind::Contended {
                let channel = scripts::release_channel(&key).into();
                waiting = Some(self.inner.notifier.subscribe(channel).await);
                continue;
            }
            let now = Instant::now();
            let mut wake_at = now + config.retry.delay(attempt);
            if waiting.is_some()
                && let Some(free) = failed.holder_free_at
            {
                wake_at = wake_at.min(free.max(now));
            }
            if let Some(give_up_at) = plan.give_up_at
                && wake_at >= give_up_at
                && waiting.is_none()
            {
                return Err(wait_timeout(error, attempt));
            }
            let until = plan.give_up_at.map_or(wake_at, |g| wake_at.min(g));
            tracing::trace!(%resource, attempt, "acquire attempt failed, waiting");
            match waiting.as_mut() {
                Some(subscription) => {
                    let noticed = tokio::select! {
                        () = subscription.notified() => true,
                        () = tokio::time::sleep_until(until) => false,
                    };
                    if noticed {
                        // Every waiter wakes on the same notice: spread them over a round's
                        // time (more after each loss), so the first usually wins alone.
                        let spread = round.saturating_mul(1 << herd.min(3));
                        let pause = spread.mul_f64(rand::random::<f64>());
                        let wake = plan
                            .give_up_at
                            .map_or(Instant::now() + pause, |g| (Instant::now() + pause).min(g));
                        tokio::time::sleep_until(wake).await;
                    }
                    herd = if noticed { herd + 1 } else { 0 };
                }
                None => tokio::time::sleep_until(until).await,
            }
            if plan.give_up_at.is_some_and(|g| Instant::now() >= g) {
                return Err(wait_timeout(error, attempt));
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
        let lost = lease.lost();
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            output = work(lease.handle()) => Ok(output),
        };
        match outcome {
            Ok(output) => {
                if let Err(error) = lease.release().await {
                    tracing::warn!(%resource, %error, "release after the critical section failed");
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

    fn plan(&self, resource: &str, options: &AcquireOptions) -> Result<Plan, Error> {
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
                let ttl = deadline::whole_millis(ttl);
                config.check_ttl(ttl).map_err(|e| invalid(e.to_string()))?;
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
        let wait = options_wait.or(config.wait_timeout);
        let give_up_at = match wait {
            Some(w) => Some(Instant::now().checked_add(w).ok_or_else(|| {
                invalid(format!("wait_timeout {} overflows the clock", human(w)))
            })?),
            None => None,
        };
        let attempts = match options.attempts {
            Some(0) => {
                return Err(invalid(
                    "attempts is zero: make at least one attempt".into(),
                ));
            }
            Some(a) => a,
            None => match (config.retry.attempts, give_up_at) {
                (Some(a), _) => a.get(),
                (None, Some(_)) => u32::MAX,
                (None, None) => DEFAULT_RETRY_ATTEMPTS,
            },
        };
        let max_hold = options_hold.or(config.max_hold);
        if max_hold.is_some_and(|m| m.is_zero()) {
            return Err(invalid(
                "max_hold is zero: give it a positive duration".into(),
            ));
        }
        Ok(Plan {
            ttl,
            fencing,
            attempts,
            give_up_at,
            watchdog: options.watchdog.unwrap_or(config.watchdog),
            max_hold,
        })
    }

    /// One acquire attempt: the acquire round and, with fencing, the write-back.
    async fn attempt(
        &self,
        key: &Arc<str>,
        resource: &Arc<str>,
        value: Arc<str>,
        plan: &Plan,
        holder_ttl: bool,
    ) -> Result<Lease, Failed> {
        let inner = &self.inner;
        let config = &inner.config;
        let ttl = plan.ttl;
        let mut guard = AttemptGuard {
            inner: Arc::clone(inner),
            key: Arc::clone(key),
            value: Arc::clone(&value),
            outcomes: None,
            armed: true,
        };
        let fence = match (plan.fencing, config.mutant) {
            (false, _) => FenceRead::Skip,
            (true, Some(Mutant::OneRoundToken)) => FenceRead::IncrementWhenGranted,
            (true, _) => FenceRead::Read,
        };
        let op = if config.quarantine || plan.fencing {
            Op::AcquireChecked {
                key: Arc::clone(key),
                value: Arc::clone(&value),
                ttl,
                fence,
            }
        } else {
            Op::Acquire {
                key: Arc::clone(key),
                value: Arc::clone(&value),
                ttl,
                holder_ttl,
            }
        };
        let round = quorum::run(&inner.masters, Arc::new(op), inner.quorum, resource).await;
        let reports = round.reports(&inner.masters);
        let drift = deadline::drift(ttl, config.drift_factor);

        if round.decision == Decision::Reached {
            let now = Instant::now();
            let t0 = match config.mutant {
                Some(Mutant::IgnoreElapsed) => now,
                _ => round.t0,
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
                });
            };
            let token = match fence {
                FenceRead::Skip => None,
                FenceRead::IncrementWhenGranted => Some(round.fence_counters().max().unwrap_or(0)),
                FenceRead::Read => {
                    let first = round.fence_counters().max().unwrap_or(0).saturating_add(1);
                    match self
                        .fence(key, resource, &value, first, (deadline, least))
                        .await
                    {
                        Ok(token) => Some(token),
                        Err(error) => {
                            guard.outcomes = Some(round.outcomes);
                            return Err(Failed {
                                error,
                                holder_free_at: None,
                            });
                        }
                    }
                }
            };
            guard.disarm();
            return Ok(Lease::new(
                Arc::clone(inner),
                LeaseParams {
                    key: Arc::clone(key),
                    resource: Arc::clone(resource),
                    value,
                    ttl,
                    deadline,
                    safety_margin: config.safety_margin(ttl),
                    token: token.map(FencingToken::new),
                    acquired: reports,
                },
            ));
        }

        let (kind, detail) = classify(&reports, inner.masters.len() - inner.quorum);
        let holder_free_at = round
            .holder_free_in(inner.quorum)
            .and_then(|d| round.t0.checked_add(d));
        guard.outcomes = Some(round.outcomes);
        let error = Error::new(kind, &**resource).with_masters(reports);
        Err(Failed {
            error: match detail {
                Some(detail) => error.with_detail(detail),
                None => error,
            },
            holder_free_at,
        })
    }

    /// The fencing write-back (phase 2, see `fencing.rs`): raises the counters to a token
    /// starting at `token`, above every counter a master reports in conflict, until a
    /// quorum accepted one, within the lease's validity.
    async fn fence(
        &self,
        key: &Arc<str>,
        resource: &Arc<str>,
        value: &Arc<str>,
        mut token: u64,
        (deadline, least): (Instant, Duration),
    ) -> Result<u64, Error> {
        // Each conflict raises the token past a counter that exists, so a handful of
        // rounds suffice; the bound only guards against a master answering nonsense.
        const MAX_ROUNDS: usize = 16;
        let inner = &self.inner;
        let strict = inner.config.mutant != Some(Mutant::WritebackNoGuard);
        let mut last = Vec::new();
        for _ in 0..MAX_ROUNDS {
            if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                break;
            }
            let op = Arc::new(Op::Fence {
                key: Arc::clone(key),
                value: Arc::clone(value),
                token,
                strict,
            });
            let round = quorum::run(&inner.masters, op, inner.quorum, resource).await;
            last = round.reports(&inner.masters);
            if round.decision == Decision::Reached {
                if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                    break;
                }
                return Ok(token);
            }
            match round.fence_counters().max() {
                Some(counter) if counter >= token => token = counter.saturating_add(1),
                _ => {
                    return Err(Error::new(ErrorKind::FencingFailed, &**resource)
                        .with_detail("no quorum of masters still held this acquisition")
                        .with_masters(last));
                }
            }
        }
        Err(Error::new(ErrorKind::FencingFailed, &**resource)
            .with_detail("the lease's validity ran out before a quorum confirmed a token")
            .with_masters(last))
    }
}

/// Refuses to run outside a tokio runtime, where the masters' I/O and timers cannot run.
fn check_runtime(resource: &str) -> Result<(), Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::NoRuntime, resource).with_detail(
        "redquorum must be called inside a tokio runtime (features rt, time, net, macros; \
         rt-multi-thread for #[tokio::main]) with time and I/O enabled",
    ))
}

/// Refuses resource names that are empty or longer than [`MAX_RESOURCE_LEN`].
fn check_resource(resource: &str) -> Result<(), Error> {
    let detail = if resource.is_empty() {
        "it is empty: name the resource to lock, such as \"orders:42\"".to_owned()
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

/// The kind of a failed acquire round, from every master's outcome, and for permanent
/// failures what to change; `spare` is how many masters a quorum can do without.
fn classify(reports: &[MasterReport], spare: usize) -> (ErrorKind, Option<String>) {
    let failed = |kind: MasterErrorKind| -> Vec<&str> {
        reports
            .iter()
            .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(e) if e.kind() == kind))
            .map(MasterReport::master)
            .collect()
    };
    let auth = failed(MasterErrorKind::Auth);
    let evicting = failed(MasterErrorKind::Misconfigured);
    // Failures that last until a configuration changes leave too few masters able to
    // grant, whatever the others do: retrying cannot help.
    if auth.len() + evicting.len() > spare {
        let mut fixes = Vec::new();
        if !auth.is_empty() {
            fixes.push(format!(
                "{} refused authentication: check the user and password in their URLs and \
                 the masters' ACLs",
                auth.join(", ")
            ));
        }
        if !evicting.is_empty() {
            fixes.push(format!(
                "{} can evict lock keys and never vote: configure maxmemory-policy \
                 noeviction on them",
                evicting.join(", ")
            ));
        }
        let kind = if auth.is_empty() {
            ErrorKind::Misconfigured
        } else {
            ErrorKind::Auth
        };
        return (kind, Some(fixes.join("; ")));
    }
    let denied = reports
        .iter()
        .filter(|r| matches!(r.outcome(), MasterOutcome::HeldByOther))
        .count();
    // Held by others on so many masters that no quorum was possible even if every
    // failed master had granted: contention, not an outage.
    if denied > spare {
        (ErrorKind::Contended, None)
    } else {
        (ErrorKind::NoQuorum, None)
    }
}

fn wait_timeout(error: Error, attempts: u32) -> Error {
    let detail = format!(
        "wait budget used up after {attempts} attempts (last: {})",
        kind_word(error.kind())
    );
    error.with_kind(ErrorKind::WaitTimeout).with_detail(detail)
}

fn kind_word(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Contended => "held by another client",
        ErrorKind::NoQuorum => "no quorum reachable",
        ErrorKind::ValidityExhausted => "validity used up",
        _ => "failed",
    }
}

/// A fresh 128-bit value from the thread-local CSPRNG, as 32 hex digits.
pub(crate) fn random_value() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Releases an attempt's value in the background unless the attempt became a lease:
/// on failure, and when the acquire future is dropped mid-round.
struct AttemptGuard {
    inner: Arc<Inner>,
    key: Arc<str>,
    value: Arc<str>,
    /// The round's outcomes when known: masters that refused never set our value and
    /// are skipped. `None` (cancelled mid-round): release everywhere.
    outcomes: Option<Vec<MasterOutcome>>,
    armed: bool,
}

impl AttemptGuard {
    fn disarm(mut self) {
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
        release_in_background(&self.inner, targets, &self.key, &self.value);
    }
}

/// Sends the release script to `targets` from a background task, if a runtime exists;
/// otherwise the keys expire with their TTL.
pub(crate) fn release_in_background(
    inner: &Arc<Inner>,
    targets: Vec<Arc<dyn Master>>,
    key: &Arc<str>,
    value: &Arc<str>,
) {
    if targets.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let op = Arc::new(Op::release(&inner.config, key, value));
    let need = targets.len();
    let resource = key
        .strip_prefix(inner.config.key_prefix.as_str())
        .unwrap_or(key)
        .to_owned();
    runtime.spawn(async move {
        // Wait for every target (each bounded by the node timeout) so failures are traced.
        let _ = quorum::run(&targets, op, need, &resource).await;
    });
}
