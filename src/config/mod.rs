//! The client builder and its validation.
//!
//! Every setting has its default in [`defaults`] and is checked once, in [`Builder::build`], so a
//! bad value (often read from a file or the environment) is reported with a message that
//! names it and says what to change, before any lock is attempted.
//!
//! Owns every setting, its default and its validation. Layer: below the master connection,
//! the round and every facade (docs/design.md §10); it must not use them.

mod builder;
mod check;
mod groups;
#[cfg(test)]
mod tests;
mod tls;
mod url;

pub use builder::Builder;
pub(crate) use check::Problem;
use check::*;
pub(crate) use check::{at_most, check_label, duration};
pub use groups::{Clock, Retry, Timeouts, Tls, Waiting, Watchdog};
use tls::*;
pub use url::RedactedUrl;
use url::*;

use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use tokio::time::Instant;

use crate::deadline;
use crate::error::human;

/// The default of every setting that has one; see [`Builder`] for what each means.
pub mod defaults {
    use std::time::Duration;

    /// Lock time-to-live: 10 s.
    pub const TTL: Duration = Duration::from_secs(10);
    /// Clock-drift factor: 1 % of the TTL (plus 2 ms), as in the Redlock reference.
    pub const DRIFT_FACTOR: f64 = 0.01;
    /// Time a single master may take to answer one request: 50 ms.
    pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Time allowed for opening a connection to a master: 1 s.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Pause between acquire attempts, before jitter: 100 ms.
    pub const RETRY_DELAY: Duration = Duration::from_millis(100);
    /// Upper bound of the uniform random jitter added to each pause with the default
    /// retry delay: 100 ms. The jitter follows the retry delay unless set.
    pub const RETRY_JITTER: Duration = Duration::from_millis(100);
    /// Safety margin as a fraction of the TTL: a lease counts as lost 5 % of its TTL
    /// before its deadline, so that work aborted then stops while the lock is still held.
    pub const SAFETY_MARGIN_FRACTION: f64 = 0.05;
    /// Watchdog interval as a fraction of the TTL: a third, as in Redisson.
    pub const EXTEND_INTERVAL_FRACTION: f64 = 1.0 / 3.0;
    /// Hand-off to the next waiter: on.
    pub const HANDOFF: bool = true;
    /// A waiter's liveness TTL as a fraction of the lock's TTL: a tenth, kept between four
    /// node timeouts and [`WAITER_TTL_CAP`] (1 s), and never above half the TTL.
    pub const WAITER_TTL_FRACTION: f64 = 0.1;
    /// The largest default waiter TTL: 1 s.
    pub const WAITER_TTL_CAP: Duration = Duration::from_secs(1);
}

/// The largest value each duration setting accepts, and the longest resource name. A
/// larger one is refused with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) (or, per call,
/// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions)).
pub mod limits {
    use std::time::Duration;

    /// The longest `ttl` and `ttl_max` a client accepts, and the longest TTL of one
    /// acquisition ([`AcquireOptions::ttl`](crate::AcquireOptions::ttl)) or extension: 24 h.
    /// Longer locks outlive the process that took them by too much when it dies, and restart
    /// quarantine keeps a restarted master out for `ttl_max`.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
    /// The longest `node_timeout` a client accepts: 1 min. A master that takes longer to
    /// answer one request is better counted as failed.
    pub const MAX_NODE_TIMEOUT: Duration = Duration::from_secs(60);
    /// The longest `connect_timeout` a client accepts: 1 min.
    pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
    /// The longest `wait_timeout` a client or one acquisition accepts: 24 h.
    pub const MAX_WAIT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
    /// The longest `max_hold` a client or one acquisition accepts: 7 days.
    pub const MAX_MAX_HOLD: Duration = Duration::from_secs(7 * 24 * 3600);

    /// The longest resource name accepted, in bytes: 1024. Longer names are refused with
    /// [`ErrorKind::InvalidResource`](crate::ErrorKind::InvalidResource); hash them first.
    pub const MAX_RESOURCE_LEN: usize = 1024;
    /// The longest key prefix accepted ([`Builder::key_prefix`](crate::Builder::key_prefix)),
    /// in bytes: 256. The prefix goes before every resource name, so a key is at most
    /// 1280 bytes with [`MAX_RESOURCE_LEN`]; a prefix names a namespace, such as `"locks:"`,
    /// and a longer one is refused with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub const MAX_KEY_PREFIX_LEN: usize = 256;

    /// The largest limit of a semaphore ([`Redlock::semaphore`](crate::Redlock::semaphore)),
    /// and so the most permits one acquisition takes: 64. Every acquisition reads each of
    /// the semaphore's slots on every master, so the cost grows with the limit; for more
    /// concurrent holders, split the work over several semaphores.
    pub const MAX_PERMITS: u32 = 64;
    /// The most resources one [`Redlock::acquire_many`](crate::Redlock::acquire_many) locks
    /// at once: 64. Every key is one more `SET` in one script on every master, which blocks
    /// the master while it runs; a longer list is refused with
    /// [`ErrorKind::InvalidResource`](crate::ErrorKind::InvalidResource).
    pub const MAX_RESOURCES: usize = 64;

    /// The longest owner label accepted ([`Builder::label`](crate::Builder::label)), in
    /// bytes: 256.
    pub const MAX_LABEL_LEN: usize = 256;

    /// The largest PEM file read for a TLS setting ([`Tls::ca_file`] and the
    /// others), in bytes: 4 MiB, far above any CA bundle. A larger file, or a device that
    /// never ends such as `/dev/zero`, is refused instead of read into memory.
    ///
    /// [`Tls::ca_file`]: crate::Tls::ca_file
    pub const MAX_PEM_FILE_LEN: u64 = 4 * 1024 * 1024;

    /// The most readers one read-write lock admits at once on a master: 64. A reader
    /// beyond them waits as it would for a writer. The writer's script visits every
    /// reader of the lock, so the bound keeps it short (docs/design.md §16).
    pub const MAX_READERS: usize = crate::scripts::MAX_READERS;
}

pub(crate) use limits::{
    MAX_CONNECT_TIMEOUT, MAX_KEY_PREFIX_LEN, MAX_LABEL_LEN, MAX_MAX_HOLD, MAX_NODE_TIMEOUT,
    MAX_RESOURCE_LEN, MAX_RESOURCES, MAX_TTL, MAX_WAIT_TIMEOUT,
};

/// A duration given either as a [`Duration`] or as a human-readable string such as
/// `"10s"`, `"250ms"` or `"1m 30s"` (parsed with [`humantime`]).
///
/// Every duration setter takes one: [`Builder`]'s and
/// [`AcquireOptions`](crate::AcquireOptions)'s alike. Strings are parsed by the setter and
/// a bad one is reported where the setting is checked: by [`Builder::build`] as
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), and by the acquire call that uses the options as
/// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions).
pub trait IntoDuration: sealed::Sealed {
    #[doc(hidden)]
    fn into_duration(self) -> Result<Duration, (String, String)>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::time::Duration {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Result<Duration, (String, String)> {
        Ok(self)
    }
}

impl IntoDuration for &str {
    fn into_duration(self) -> Result<Duration, (String, String)> {
        humantime::parse_duration(self.trim()).map_err(|e| (self.to_owned(), e.to_string()))
    }
}

impl IntoDuration for String {
    fn into_duration(self) -> Result<Duration, (String, String)> {
        self.as_str().into_duration()
    }
}

impl IntoDuration for &String {
    fn into_duration(self) -> Result<Duration, (String, String)> {
        self.as_str().into_duration()
    }
}

/// How the pause between acquire attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backoff {
    /// The same pause every time (plus jitter).
    #[default]
    Fixed,
    /// The pause doubles after each failed attempt, up to `max` (plus jitter), so that a
    /// crowd of waiters does not storm the masters.
    Exponential {
        /// The largest pause before jitter.
        max: Duration,
    },
}

/// One validated master: how to connect, and how to name it in reports.
#[derive(Debug, Clone)]
pub(crate) struct MasterSpec {
    pub(crate) info: ConnectionInfo,
    pub(crate) name: Arc<str>,
    /// The redis client every connection to this master is opened with: TLS, with the
    /// builder's CA and client certificate, for a `rediss://` master. Every connection
    /// (lock, release notices, health probes, administration) comes from it, so none can
    /// bypass TLS.
    pub(crate) client: Client,
}

/// The retry policy of [`Redlock::acquire`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// As set; `None` puts no bound on the count: the wait budget bounds the time.
    pub(crate) attempts: Option<NonZeroU32>,
    pub(crate) delay: Duration,
    pub(crate) jitter: Duration,
    pub(crate) backoff: Backoff,
}

impl RetryPolicy {
    /// The pause after failed attempt number `attempt` (1-based), before jitter.
    pub(crate) fn base_delay(&self, attempt: u32) -> Duration {
        match self.backoff {
            Backoff::Fixed => self.delay,
            Backoff::Exponential { max } => {
                crate::backoff::doubled(self.delay, max, attempt.saturating_sub(1))
            }
        }
    }

    /// The pause after failed attempt number `attempt`, with uniform random jitter.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let jitter = if self.jitter.is_zero() {
            Duration::ZERO
        } else {
            self.jitter.mul_f64(rand::random::<f64>())
        };
        self.base_delay(attempt).saturating_add(jitter)
    }
}

/// The validated settings of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) masters: Vec<MasterSpec>,
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) min_validity: Duration,
    pub(crate) key_prefix: String,
    pub(crate) notifications: bool,
    /// Whether an acquire of a resource this client holds waits (queues behind its own
    /// lease) instead of failing at once with `AlreadyHeld` (docs/design.md §14).
    pub(crate) wait_for_own_leases: bool,
    pub(crate) watchdog: bool,
    pub(crate) extend_interval: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) quarantine: bool,
    /// Every TTL and extension is at most this long; restart quarantine waits this long.
    pub(crate) ttl_max: Duration,
    pub(crate) fencing: bool,
    /// Whether a waiting acquire of a single-key lock queues and is handed the lock by
    /// the holder's release (docs/design.md §17).
    pub(crate) handoff: bool,
    /// The liveness TTL of a waiter's registration and the expiry of a handed key.
    pub(crate) waiter_ttl: Duration,
    /// What this client's owner records call it (`Redlock::inspect`).
    pub(crate) label: String,
    /// Whether spans and events show resource names, or a keyed hash of them.
    pub(crate) trace_resource_names: bool,
}

impl Config {
    /// Checks that `ttl` leaves validity after drift, one node timeout and the least
    /// validity a lease must have.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<(), Problem> {
        check_ttl(
            ttl,
            self.drift_factor,
            self.node_timeout,
            self.least_validity_of(ttl),
        )
    }

    /// The least validity a lease of `ttl` must have, and the setting it comes from.
    fn least_validity_of(&self, ttl: Duration) -> (Duration, &'static str) {
        least_validity(self.min_validity, self.safety_margin, ttl)
    }

    /// How long before its deadline a lease of `ttl` counts as lost.
    pub(crate) fn safety_margin(&self, ttl: Duration) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| ttl.mul_f64(defaults::SAFETY_MARGIN_FRACTION))
    }

    /// The validity a new lease of `ttl` must have left: more than this, or it is useless.
    pub(crate) fn least_validity(&self, ttl: Duration) -> Duration {
        self.min_validity.max(self.safety_margin(ttl))
    }

    /// How long a master that may have lost its keys abstains (docs/design.md §7, I11).
    pub(crate) fn quarantine_window(&self) -> Duration {
        crate::quarantine::window(self.ttl_max, self.drift_factor, crate::quarantine::MARGIN)
    }

    /// The deadline of a lease of `ttl` whose round started at `t0`: `t0 + ttl - drift`
    /// (docs/design.md §3, I3). The client's own clock has the last word
    /// (`Inner::lease_deadline`).
    pub(crate) fn lease_deadline(&self, t0: Instant, ttl: Duration) -> Option<Instant> {
        let drift = deadline::drift(ttl, self.drift_factor);
        deadline::deadline(t0, ttl, drift)
    }

    /// Checks a per-call TTL against `ttl_max`.
    pub(crate) fn check_ttl_max(&self, ttl: Duration) -> Result<(), Problem> {
        if ttl > self.ttl_max {
            return Err(Problem::TtlAboveTtlMax {
                ttl,
                ttl_max: self.ttl_max,
            });
        }
        Ok(())
    }

    /// The longest a call to one master can take (docs/design.md §2, I20): its turn behind
    /// the earlier calls to that master (at most a connect and a node timeout), its own
    /// first connection, and its request.
    pub(crate) fn call_bound(&self) -> Duration {
        self.connect_timeout
            .saturating_add(self.node_timeout)
            .saturating_mul(2)
    }

    /// The watchdog's pause between extensions of a lease of `ttl`.
    pub(crate) fn extend_interval(&self, ttl: Duration) -> Duration {
        self.extend_interval
            .unwrap_or_else(|| ttl.mul_f64(defaults::EXTEND_INTERVAL_FRACTION))
    }
}

/// A duration as given to a setter: parsed, or the input and the parser's complaint.
pub(crate) type DurationSetting = Result<Duration, (String, String)>;
