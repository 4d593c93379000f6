//! The client handle: acquire a lock on a quorum of masters.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Builder, Config, ConfigError};
use crate::deadline;
use crate::error::{Error, ErrorKind, MasterOutcome, human};
use crate::lease::Lease;
use crate::master::{Master, Op, RedisMaster};
use crate::mutants::Mutant;
use crate::quorum::{self, Decision};

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

/// Per-call settings for [`Redlock::acquire_with`]; unset values use the client's.
///
/// ```
/// use redquorum::AcquireOptions;
/// use std::time::Duration;
///
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(30))
///     .attempts(3)
///     .wait_timeout(Duration::from_secs(2));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct AcquireOptions {
    ttl: Option<Duration>,
    attempts: Option<u32>,
    wait_timeout: Option<Duration>,
}

impl AcquireOptions {
    /// Options that use every client default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lock's TTL for this acquisition. Defaults to the client's TTL. Must exceed
    /// the drift allowance plus the node timeout.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The most acquire rounds to make. Defaults to the client's `retry_attempts`.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// The most time to spend trying, over all attempts. Defaults to the client's
    /// `wait_timeout`.
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait_timeout = Some(wait);
        self
    }
}

/// Settings of one acquire call, resolved against the client's configuration.
struct Plan {
    ttl: Duration,
    attempts: NonZeroU32,
    give_up_at: Option<Instant>,
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
            let master =
                RedisMaster::new(spec, node_timeout, config.connect_timeout).map_err(|e| {
                    ConfigError::InvalidUrl {
                        url: spec.name.to_string(),
                        reason: e.to_string(),
                    }
                })?;
            masters.push(Arc::new(master));
        }
        Ok(Self::with_masters(config, masters))
    }

    /// A client over any masters (real or simulated).
    pub(crate) fn with_masters(config: Config, masters: Vec<Arc<dyn Master>>) -> Self {
        let quorum = match config.mutant {
            Some(Mutant::HalfQuorum) => (masters.len() / 2).max(1),
            _ => quorum::quorum(masters.len()),
        };
        Self {
            inner: Arc::new(Inner {
                config,
                masters,
                quorum,
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
    /// (`t0 + ttl - drift` is still ahead). A failed attempt is released on every master
    /// that may have set it, then the next waits `retry_delay` (growing with
    /// [`Backoff::Exponential`](crate::Backoff)) plus uniform random jitter.
    ///
    /// # Errors
    /// After the last attempt, or when the wait budget runs out: [`ErrorKind::Contended`]
    /// (held by another client), [`ErrorKind::NoQuorum`] (masters failed),
    /// [`ErrorKind::ValidityExhausted`] (a quorum answered too late), or
    /// [`ErrorKind::WaitTimeout`]; each with every master's outcome in the last attempt.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no key behind beyond its TTL: the attempt in flight is
    /// released on every master in the background.
    pub async fn acquire(&self, resource: &str) -> Result<Lease, Error> {
        self.acquire_with(resource, &AcquireOptions::default())
            .await
    }

    /// Makes a single acquire attempt: one quorum round, no retry.
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

    /// Acquires the lock on `resource` with per-call options.
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire); also [`ErrorKind::InvalidOptions`] when the
    /// options do not fit the client (a TTL too short for the drift allowance and node
    /// timeout, zero attempts).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire).
    pub async fn acquire_with(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let plan = self.plan(resource, options)?;
        let key: Arc<str> = format!("{}{resource}", self.inner.config.key_prefix).into();
        let resource: Arc<str> = resource.into();
        let reused: Option<Arc<str>> =
            (self.inner.config.mutant == Some(Mutant::ReuseValue)).then(|| random_value().into());
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let value = reused.clone().unwrap_or_else(|| random_value().into());
            let err = match self.attempt(&key, &resource, value, plan.ttl).await {
                Ok(lease) => return Ok(lease),
                Err(err) => err.with_attempts(attempt),
            };
            if attempt >= plan.attempts.get() {
                return Err(err);
            }
            let pause = self.inner.config.retry.delay(attempt);
            if let Some(give_up_at) = plan.give_up_at
                && Instant::now() + pause >= give_up_at
            {
                let detail = format!(
                    "wait budget used up after {attempt} attempts (last: {})",
                    kind_word(err.kind())
                );
                return Err(err.with_kind(ErrorKind::WaitTimeout).with_detail(detail));
            }
            tracing::trace!(%resource, attempt, ?pause, "acquire attempt failed, retrying");
            tokio::time::sleep(pause).await;
        }
    }

    fn plan(&self, resource: &str, options: &AcquireOptions) -> Result<Plan, Error> {
        let config = &self.inner.config;
        let invalid =
            |detail: String| Error::new(ErrorKind::InvalidOptions, resource).with_detail(detail);
        let ttl = match options.ttl {
            Some(ttl) => {
                let ttl = deadline::whole_millis(ttl);
                config.check_ttl(ttl).map_err(|e| invalid(e.to_string()))?;
                ttl
            }
            None => config.ttl,
        };
        let attempts = match options.attempts {
            Some(a) => NonZeroU32::new(a)
                .ok_or_else(|| invalid("attempts is zero: make at least one attempt".into()))?,
            None => config.retry.attempts,
        };
        let wait = options.wait_timeout.or(config.wait_timeout);
        let give_up_at = match wait {
            Some(w) => Some(Instant::now().checked_add(w).ok_or_else(|| {
                invalid(format!("wait_timeout {} overflows the clock", human(w)))
            })?),
            None => None,
        };
        Ok(Plan {
            ttl,
            attempts,
            give_up_at,
        })
    }

    /// One acquire round.
    async fn attempt(
        &self,
        key: &Arc<str>,
        resource: &Arc<str>,
        value: Arc<str>,
        ttl: Duration,
    ) -> Result<Lease, Error> {
        let inner = &self.inner;
        let mut guard = AttemptGuard {
            inner: Arc::clone(inner),
            key: Arc::clone(key),
            value: Arc::clone(&value),
            outcomes: None,
            armed: true,
        };
        let op = Arc::new(Op::Acquire {
            key: Arc::clone(key),
            value: Arc::clone(&value),
            ttl,
        });
        let round = quorum::run(&inner.masters, op, inner.quorum, resource).await;
        let reports = round.reports(&inner.masters);
        let drift = deadline::drift(ttl, inner.config.drift_factor);

        match round.decision {
            Decision::Reached => {
                let now = Instant::now();
                let t0 = match inner.config.mutant {
                    Some(Mutant::IgnoreElapsed) => now,
                    _ => round.t0,
                };
                let valid = deadline::deadline(t0, ttl, drift).and_then(|dl| {
                    deadline::validity_left(dl, now, inner.config.min_validity).map(|_| dl)
                });
                match valid {
                    Some(deadline) => {
                        guard.disarm();
                        Ok(Lease::new(
                            Arc::clone(inner),
                            Arc::clone(key),
                            Arc::clone(resource),
                            value,
                            ttl,
                            deadline,
                            reports,
                        ))
                    }
                    None => {
                        guard.outcomes = Some(round.outcomes);
                        let detail = format!(
                            "the round took {} of a {} TTL (drift allowance {})",
                            human(now - round.t0),
                            human(ttl),
                            human(drift)
                        );
                        Err(Error::new(ErrorKind::ValidityExhausted, &**resource)
                            .with_detail(detail)
                            .with_masters(reports))
                    }
                }
            }
            _ => {
                let denied = round
                    .outcomes
                    .iter()
                    .filter(|o| matches!(o, MasterOutcome::HeldByOther))
                    .count();
                // Held by others on so many masters that no quorum was possible even if
                // every failed master had granted: contention, not an outage.
                let kind = if denied > inner.masters.len() - inner.quorum {
                    ErrorKind::Contended
                } else {
                    ErrorKind::NoQuorum
                };
                guard.outcomes = Some(round.outcomes);
                Err(Error::new(kind, &**resource).with_masters(reports))
            }
        }
    }
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
