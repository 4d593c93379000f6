//! The client builder and its validation.
//!
//! Every setting has its default in [`defaults`] and is checked once, in [`Builder::build`], so a
//! bad value (often read from a file or the environment) is reported with a message that
//! names it and says what to change, before any lock is attempted.
//!
//! Owns every setting, its default and its validation. Layer: below the master connection,
//! the round and every facade (docs/design.md §10); it must not use them.

use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use tokio::time::Instant;

use crate::deadline;
use crate::error::human;
#[cfg(feature = "mutants")]
use crate::mutants::{Mutant, Planted};

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
/// larger one is refused with [`ConfigError::TooLarge`] (or, per call,
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

    /// The largest PEM file read for a TLS setting ([`Builder::tls_ca_file`] and the
    /// others), in bytes: 4 MiB, far above any CA bundle. A larger file, or a device that
    /// never ends such as `/dev/zero`, is refused instead of read into memory.
    ///
    /// [`Builder::tls_ca_file`]: crate::Builder::tls_ca_file
    pub const MAX_PEM_FILE_LEN: u64 = 4 * 1024 * 1024;

    /// The most readers one read-write lock admits at once on a master: 64. A reader
    /// beyond them waits as it would for a writer. The writer's script visits every
    /// reader of the lock, so the bound keeps it short (docs/design.md §16).
    pub const MAX_READERS: usize = crate::scripts::MAX_READERS;
}

pub(crate) use limits::{
    MAX_CONNECT_TIMEOUT, MAX_LABEL_LEN, MAX_MAX_HOLD, MAX_NODE_TIMEOUT, MAX_RESOURCE_LEN,
    MAX_RESOURCES, MAX_TTL, MAX_WAIT_TIMEOUT,
};

/// A duration given either as a [`Duration`] or as a human-readable string such as
/// `"10s"`, `"250ms"` or `"1m 30s"` (parsed with [`humantime`]).
///
/// Every duration setter takes one: [`Builder`]'s and
/// [`AcquireOptions`](crate::AcquireOptions)'s alike. Strings are parsed by the setter and
/// a bad one is reported where the setting is checked: by [`Builder::build`] as
/// [`ConfigError::InvalidDuration`], and by the acquire call that uses the options as
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

/// A configuration value that cannot work, found by [`Builder::build`]: one problem as
/// its own variant, or every problem found as [`Several`](ConfigError::Several).
/// [`primary`](ConfigError::primary) and [`problems`](ConfigError::problems) read both
/// alike.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No master was given.
    #[error(
        "no masters configured: add at least one with `master(url)` or `masters([..])` (3 or 5 independent masters are typical)"
    )]
    NoMasters,
    /// A master URL could not be parsed.
    #[error("master URL {url:?} cannot be used: {reason}")]
    InvalidUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same master appears twice; it would count twice toward the quorum.
    #[error(
        "master {url:?} is listed twice (also as {other:?}): each master must be an independent server, or it would vote twice"
    )]
    DuplicateMaster {
        /// The second occurrence, password redacted.
        url: String,
        /// The first occurrence, password redacted.
        other: String,
    },
    /// A duration setting could not be parsed.
    #[error(
        "{setting} {input:?} is not a duration ({reason}): write it like \"10s\", \"250ms\" or \"1m 30s\""
    )]
    InvalidDuration {
        /// Which setting.
        setting: &'static str,
        /// What was given.
        input: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The TTL leaves no validity once drift and one node timeout are taken off.
    #[error(
        "ttl {} is too short: it must exceed the drift allowance ({}) plus the node timeout ({}) plus the larger of min_validity and the safety margin ({}); raise ttl or lower {knob}",
        human(*.ttl),
        human(*.drift),
        human(*.node_timeout),
        human(*.least_validity)
    )]
    TtlTooShort {
        /// The setting that takes the largest share besides the TTL: `node_timeout`,
        /// `safety_margin`, `min_validity` or `drift_factor`.
        knob: &'static str,
        /// The TTL given.
        ttl: Duration,
        /// The drift allowance (`ttl * drift_factor + 2 ms`).
        drift: Duration,
        /// The node timeout.
        node_timeout: Duration,
        /// The least validity a new lease must have: `min_validity` or the safety margin.
        least_validity: Duration,
    },
    /// A setting that must be positive is zero.
    #[error("{setting} is zero: {}", zero_advice(.setting))]
    Zero {
        /// Which setting.
        setting: &'static str,
    },
    /// The drift factor is negative, not finite, or not below 1.
    #[error(
        "drift_factor {0} is out of range: use a value from 0 up to (not including) 1, typically 0.01"
    )]
    DriftFactor(f64),
    /// The test-only client clock rate is out of range (feature `mutants`).
    #[cfg(feature = "mutants")]
    #[error("client_clock_rate {0} is out of range: use a value above 0.1 and at most 10")]
    ClockRate(f64),
    /// A retry pause, jitter or wait budget too large to be added to the clock.
    #[error("{setting} {} is too large: it overflows the clock; use a realistic duration", human(*.value))]
    DurationOverflow {
        /// Which setting (or sum of settings).
        setting: &'static str,
        /// The value.
        value: Duration,
    },
    /// A TTL above `ttl_max`, the bound restart quarantine relies on. `ttl_max` defaults
    /// to the client's TTL, so a longer per-call TTL needs [`Builder::ttl_max`].
    #[error(
        "ttl {} exceeds ttl_max {}: restart quarantine keeps a restarted master out for ttl_max, so no lock may live longer; ttl_max defaults to the client's ttl: raise it with Builder::ttl_max to the longest TTL any call uses, or lower ttl",
        human(*.ttl),
        human(*.ttl_max)
    )]
    TtlAboveTtlMax {
        /// The TTL.
        ttl: Duration,
        /// The bound.
        ttl_max: Duration,
    },
    /// A duration above its documented maximum (see [`MAX_TTL`] and the other `MAX_*`
    /// constants).
    #[error("{setting} {} is above its maximum of {} ({limit}): {advice}",
        human(*.value),
        human(*.max)
    )]
    TooLarge {
        /// Which setting.
        setting: &'static str,
        /// The value given.
        value: Duration,
        /// The maximum.
        max: Duration,
        /// The constant that holds the maximum, such as `MAX_TTL`.
        limit: &'static str,
        /// What to do instead.
        advice: &'static str,
    },
    /// The key prefix starts with `redquorum:`, the names of the records this crate keeps
    /// on the masters (data epoch, fence counters, owner and cluster records).
    #[error(
        "key_prefix {prefix:?} starts with \"redquorum:\", where the lock's own records live: choose another prefix, such as \"locks:\""
    )]
    ReservedKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// The waiter TTL cannot work: a refresh every third of it must be able to finish
    /// within one node timeout, and no registration may outlive the lock's TTL.
    #[error("waiter_ttl {} is out of range: it must exceed three node timeouts ({}) and be at most the ttl ({}); {advice}",
        human(*.waiter_ttl),
        human(*.node_timeout * 3),
        human(*.ttl)
    )]
    WaiterTtl {
        /// The waiter TTL given.
        waiter_ttl: Duration,
        /// The node timeout.
        node_timeout: Duration,
        /// The lock's TTL.
        ttl: Duration,
        /// What to change.
        advice: &'static str,
    },
    /// The owner label is longer than [`MAX_LABEL_LEN`].
    #[error(
        "label is {len} bytes long, above MAX_LABEL_LEN ({}): use a shorter label",
        MAX_LABEL_LEN
    )]
    LabelTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Fencing asked for without restart quarantine.
    #[error(
        "fencing tokens need restart quarantine (a master that lost its counters must not vote until they are seeded again): turn quarantine back on"
    )]
    FencingNeedsQuarantine,
    /// A TLS setting cannot be used: its file cannot be read, its PEM holds no certificate
    /// or key, TLS settings were given for masters that do not use TLS, or this build
    /// lacks the `tls` feature.
    #[error("{setting}: {reason}")]
    Tls {
        /// Which setting, such as `tls_ca_file`.
        setting: &'static str,
        /// What is wrong with it and what to change.
        reason: String,
    },
    /// The exponential backoff's maximum is below the base delay.
    #[error("backoff max {} is below retry_delay {}: raise the maximum or lower the delay",
        human(*.max),
        human(*.delay)
    )]
    BackoffMax {
        /// The maximum given.
        max: Duration,
        /// The base delay.
        delay: Duration,
    },
    /// The watchdog's interval is not below the TTL: a lease would expire before the
    /// interval ends, so the interval could never be kept.
    #[error(
        "extend_interval {} is not below the ttl {}: a lease would expire before the watchdog extended it at that interval (it extends just before the lease's safety point instead, whatever the interval); lower extend_interval (it defaults to a third of the ttl) or raise ttl",
        human(*.interval),
        human(*.ttl)
    )]
    ExtendInterval {
        /// The interval given.
        interval: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// Several settings cannot work: each of them, as one of the other variants, in the
    /// order the settings are checked (never nested). A build with one problem reports
    /// that problem's own variant instead; [`problems`](ConfigError::problems) and
    /// [`primary`](ConfigError::primary) work the same for both.
    #[error("{} settings cannot work: {}", .0.len(), several(.0))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// The first problem found, in the order the settings are checked: this error, or the
    /// first of [`Several`](ConfigError::Several). Match on it to handle one kind of
    /// problem whatever else is wrong.
    ///
    /// ```
    /// use redquorum::{ConfigError, Redlock};
    ///
    /// let err = Redlock::builder().ttl("0s").build().unwrap_err();
    /// assert_eq!(err.primary(), &ConfigError::NoMasters);
    /// assert_eq!(err.problems().len(), 2);
    /// ```
    pub fn primary(&self) -> &ConfigError {
        match self {
            ConfigError::Several(problems) => problems.first().unwrap_or(self),
            other => other,
        }
    }

    /// Every problem found, in the order the settings are checked: this error alone, or
    /// each of [`Several`](ConfigError::Several).
    pub fn problems(&self) -> &[ConfigError] {
        match self {
            ConfigError::Several(problems) => problems,
            other => std::slice::from_ref(other),
        }
    }
}

/// The problems of [`ConfigError::Several`], numbered, on one line.
fn several(problems: &[ConfigError]) -> String {
    problems
        .iter()
        .enumerate()
        .map(|(i, problem)| format!("({}) {problem}", i + 1))
        .collect::<Vec<_>>()
        .join("; ")
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
    /// The test seams: a planted bug and the client clock's rate (feature `mutants`).
    #[cfg(feature = "mutants")]
    pub(crate) planted: Planted,
}

impl Config {
    /// Checks that `ttl` leaves validity after drift, one node timeout and the least
    /// validity a lease must have.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<(), ConfigError> {
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

    /// The deadline of a lease of `ttl` whose round started at `t0`, as this client's clock
    /// sees it (docs/design.md §3, I3).
    pub(crate) fn lease_deadline(&self, t0: Instant, ttl: Duration) -> Option<Instant> {
        let drift = deadline::drift(ttl, self.drift_factor);
        let dl = deadline::deadline(t0, ttl, drift)?;
        #[cfg(feature = "mutants")]
        if self.planted.clock_rate != 1.0 {
            // A clock running at `rate` reaches the end of the validity after
            // validity / rate of real time.
            return t0.checked_add((dl - t0).div_f64(self.planted.clock_rate));
        }
        Some(dl)
    }

    /// Checks a per-call TTL against `ttl_max`.
    pub(crate) fn check_ttl_max(&self, ttl: Duration) -> Result<(), ConfigError> {
        if ttl > self.ttl_max {
            return Err(ConfigError::TtlAboveTtlMax {
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

/// The least validity a lease of `ttl` must have, and the setting it comes from: the
/// larger of `min_validity` and the safety margin (explicit, or a share of the TTL).
fn least_validity(
    min_validity: Duration,
    safety_margin: Option<Duration>,
    ttl: Duration,
) -> (Duration, &'static str) {
    let margin = safety_margin.unwrap_or_else(|| ttl.mul_f64(defaults::SAFETY_MARGIN_FRACTION));
    if min_validity > margin {
        (min_validity, "min_validity")
    } else {
        (margin, "safety_margin")
    }
}

/// Checks `ttl` as given (before it is cut to whole milliseconds): not zero, at most
/// [`MAX_TTL`], and in whole milliseconds (`PX`) above the drift allowance, one node
/// timeout and the least validity a lease must have.
fn check_ttl(
    ttl: Duration,
    drift_factor: f64,
    node_timeout: Duration,
    (least_validity, least_from): (Duration, &'static str),
) -> Result<(), ConfigError> {
    if ttl.is_zero() {
        return Err(ConfigError::Zero { setting: "ttl" });
    }
    at_most("ttl", ttl, MAX_TTL)?;
    let drift = deadline::drift(ttl, drift_factor);
    let needed = drift
        .saturating_add(node_timeout)
        .saturating_add(least_validity);
    // The masters keep whole milliseconds: a TTL below one is no TTL at all.
    if deadline::whole_millis(ttl) <= needed {
        // Name the setting that takes the largest share, so the advice points at it.
        let knob = [
            (node_timeout, "node_timeout"),
            (least_validity, least_from),
            (drift, "drift_factor"),
        ]
        .into_iter()
        .max_by_key(|(share, _)| *share)
        .map_or("node_timeout", |(_, knob)| knob);
        return Err(ConfigError::TtlTooShort {
            knob,
            ttl,
            drift,
            node_timeout,
            least_validity,
        });
    }
    Ok(())
}

/// The problems [`Builder::build`] found, in the order the settings are checked.
#[derive(Debug, Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    fn push(&mut self, problem: ConfigError) {
        match problem {
            ConfigError::Several(problems) => self.0.extend(problems),
            problem => self.0.push(problem),
        }
    }

    /// Notes the problem of `checked`, if any.
    fn check(&mut self, checked: Result<(), ConfigError>) {
        self.keep(checked);
    }

    /// The value of `checked`, or `None` with its problem noted.
    fn keep<T>(&mut self, checked: Result<T, ConfigError>) -> Option<T> {
        checked.map_err(|problem| self.push(problem)).ok()
    }

    /// An optional duration setting: `Some(None)` when not given, `None` when given and
    /// it did not parse (its problem noted).
    fn optional(
        &mut self,
        setting: &'static str,
        value: Option<DurationSetting>,
    ) -> Option<Option<Duration>> {
        match value {
            Some(value) => self.keep(duration(setting, value)).map(Some),
            None => Some(None),
        }
    }

    /// The error that reports every problem: the one itself, or [`ConfigError::Several`].
    fn finish(mut self) -> Result<(), ConfigError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(ConfigError::Several(self.0)),
        }
    }
}

/// What to do about a zero `setting`.
fn zero_advice(setting: &str) -> &'static str {
    match setting {
        "ttl" => "a lock must live for some time (e.g. \"10s\")",
        "node_timeout" => "every master needs some time to answer (e.g. \"50ms\")",
        "connect_timeout" => "connecting to a master needs some time (e.g. \"1s\")",
        "retry_attempts" => "acquire needs at least one attempt",
        _ => "give it a positive duration",
    }
}

/// Rejects `value` above `max` (one of the `MAX_*` constants) for `setting`.
pub(crate) fn at_most(
    setting: &'static str,
    value: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if value <= max {
        return Ok(());
    }
    let (limit, advice) = match setting {
        "ttl" | "ttl_max" | "extend_interval" | "waiter_ttl" => (
            "MAX_TTL",
            "use a shorter lock and extend it while it is held (watchdog)",
        ),
        "node_timeout" => (
            "MAX_NODE_TIMEOUT",
            "a master that answers so slowly is better counted as failed",
        ),
        "connect_timeout" => ("MAX_CONNECT_TIMEOUT", "use a realistic duration"),
        "wait_timeout" => (
            "MAX_WAIT_TIMEOUT",
            "wait in a loop of your own if you must wait longer",
        ),
        "max_hold" => (
            "MAX_MAX_HOLD",
            "leave max_hold unset for no bound on holding",
        ),
        _ => ("a MAX_* constant", "use a realistic duration"),
    };
    Err(ConfigError::TooLarge {
        setting,
        value,
        max,
        limit,
        advice,
    })
}

/// A duration as given to a setter: parsed, or the input and the parser's complaint.
pub(crate) type DurationSetting = Result<Duration, (String, String)>;

/// Builds a [`Redlock`](crate::Redlock) client; get one from
/// [`Redlock::builder`](crate::Redlock::builder).
///
/// Setters consume and return the builder. Nothing is checked or connected until
/// [`build`](Builder::build), which validates every setting at once.
///
/// # Default
/// - masters: none (at least one is required)
/// - `ttl`: [`defaults::TTL`] (10 s)
/// - `drift_factor`: [`defaults::DRIFT_FACTOR`] (0.01)
/// - `node_timeout`: [`defaults::NODE_TIMEOUT`] (50 ms)
/// - `connect_timeout`: [`defaults::CONNECT_TIMEOUT`] (1 s)
/// - `wait_timeout`: twice `ttl_max` (20 s with the defaults): acquire waits that long
/// - `retry_attempts`: no bound on the count (the wait budget bounds the time)
/// - `retry_delay`: [`defaults::RETRY_DELAY`] (100 ms), `retry_jitter`: the retry delay
///   ([`defaults::RETRY_JITTER`] with the default delay), `backoff`: [`Backoff::Fixed`]
/// - `min_validity`: zero
/// - `key_prefix`: empty, so keys are the resource names themselves and interoperate with
///   other Redlock clients
/// - `notifications`: on (waiters are woken by release notices)
/// - `wait_for_own_leases`: off (acquiring a resource this client holds fails at once
///   with [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld))
/// - `watchdog`: off; `extend_interval`: a third of the TTL; `max_hold`: none;
///   `safety_margin`: 5 % of the TTL
/// - `quarantine`: on, with `ttl_max` equal to the TTL
/// - `fencing`: off
/// - `handoff`: on ([`defaults::HANDOFF`]); `waiter_ttl`: a tenth of the TTL, between four
///   node timeouts and 1 s, at most half the TTL, always above three node timeouts
/// - `trace_resource_names`: off (spans and events show a hash of each resource name)
/// - TLS (`rediss://` masters, feature `tls`): the system's trusted roots, no client
///   certificate
///
/// # Limits
/// Durations beyond these are refused by [`build`](Builder::build) with
/// [`ConfigError::TooLarge`], and per call with
/// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions):
/// - `ttl`, `ttl_max`, `extend_interval`: [`MAX_TTL`] (24 h)
/// - `node_timeout`: [`MAX_NODE_TIMEOUT`] (1 min); `connect_timeout`:
///   [`MAX_CONNECT_TIMEOUT`] (1 min)
/// - `wait_timeout`: [`MAX_WAIT_TIMEOUT`] (24 h); `max_hold`: [`MAX_MAX_HOLD`] (7 days)
///
/// # Example
/// ```
/// use redquorum::{Backoff, Redlock};
/// use std::time::Duration;
///
/// let client = Redlock::builder()
///     .masters(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .ttl("30s")
///     .node_timeout(Duration::from_millis(20))
///     .backoff(Backoff::Exponential { max: Duration::from_secs(1) })
///     .key_prefix("locks:")
///     .build()?;
/// assert_eq!(client.quorum(), 2);
/// # Ok::<(), redquorum::ConfigError>(())
/// ```
#[must_use = "a builder does nothing until `build()` is called"]
pub struct Builder {
    masters: Vec<String>,
    ttl: DurationSetting,
    drift_factor: f64,
    node_timeout: DurationSetting,
    connect_timeout: DurationSetting,
    retry_attempts: Option<u32>,
    retry_delay: DurationSetting,
    retry_jitter: Option<DurationSetting>,
    backoff: Backoff,
    wait_timeout: Option<DurationSetting>,
    min_validity: DurationSetting,
    key_prefix: String,
    notifications: bool,
    wait_for_own_leases: bool,
    watchdog: bool,
    extend_interval: Option<DurationSetting>,
    max_hold: Option<DurationSetting>,
    safety_margin: Option<DurationSetting>,
    quarantine: bool,
    ttl_max: Option<DurationSetting>,
    fencing: bool,
    handoff: bool,
    waiter_ttl: Option<DurationSetting>,
    label: String,
    trace_resource_names: bool,
    tls: TlsSettings,
    #[cfg(feature = "mutants")]
    planted: Planted,
}

impl fmt::Debug for Builder {
    // Hand-written: master URLs are shown with their passwords redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Builder {
            masters,
            ttl,
            drift_factor,
            node_timeout,
            connect_timeout,
            retry_attempts,
            retry_delay,
            retry_jitter,
            backoff,
            wait_timeout,
            min_validity,
            key_prefix,
            notifications,
            wait_for_own_leases,
            watchdog,
            extend_interval,
            max_hold,
            safety_margin,
            quarantine,
            ttl_max,
            fencing,
            handoff,
            waiter_ttl,
            label,
            trace_resource_names,
            tls,
            #[cfg(feature = "mutants")]
                planted: _,
        } = self;
        let masters: Vec<String> = masters.iter().map(|url| redact(url)).collect();
        f.debug_struct("Builder")
            .field("masters", &masters)
            .field("ttl", ttl)
            .field("drift_factor", drift_factor)
            .field("node_timeout", node_timeout)
            .field("connect_timeout", connect_timeout)
            .field("retry_attempts", retry_attempts)
            .field("retry_delay", retry_delay)
            .field("retry_jitter", retry_jitter)
            .field("backoff", backoff)
            .field("wait_timeout", wait_timeout)
            .field("min_validity", min_validity)
            .field("key_prefix", key_prefix)
            .field("notifications", notifications)
            .field("wait_for_own_leases", wait_for_own_leases)
            .field("watchdog", watchdog)
            .field("extend_interval", extend_interval)
            .field("max_hold", max_hold)
            .field("safety_margin", safety_margin)
            .field("quarantine", quarantine)
            .field("ttl_max", ttl_max)
            .field("fencing", fencing)
            .field("handoff", handoff)
            .field("waiter_ttl", waiter_ttl)
            .field("label", label)
            .field("trace_resource_names", trace_resource_names)
            .field("tls", tls)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            masters: Vec::new(),
            ttl: Ok(defaults::TTL),
            drift_factor: defaults::DRIFT_FACTOR,
            node_timeout: Ok(defaults::NODE_TIMEOUT),
            connect_timeout: Ok(defaults::CONNECT_TIMEOUT),
            retry_attempts: None,
            retry_delay: Ok(defaults::RETRY_DELAY),
            retry_jitter: None,
            backoff: Backoff::Fixed,
            wait_timeout: None,
            min_validity: Ok(Duration::ZERO),
            key_prefix: String::new(),
            notifications: true,
            wait_for_own_leases: false,
            watchdog: false,
            extend_interval: None,
            max_hold: None,
            safety_margin: None,
            quarantine: true,
            ttl_max: None,
            fencing: false,
            handoff: defaults::HANDOFF,
            waiter_ttl: None,
            label: String::new(),
            trace_resource_names: false,
            tls: TlsSettings::default(),
            #[cfg(feature = "mutants")]
            planted: Planted::default(),
        }
    }
}

impl Builder {
    /// A builder with every default; same as [`Redlock::builder`](crate::Redlock::builder).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one master by URL: `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` (TLS, with the `tls` feature; see [`tls_ca_pem`](Builder::tls_ca_pem))
    /// or `redis+unix:///path/to/socket[?user=…&pass=…]`. A `rediss://…#insecure` URL, which
    /// turns certificate checks off, is refused. A `rediss://` URL may name its master's
    /// own PEM files, `?tls_ca_file=PATH` and `&tls_cert_file=PATH&tls_key_file=PATH`, which
    /// take the place of the builder's CA or client certificate for that master.
    ///
    /// Masters must be independent servers (not replicas of each other). Defaults to none.
    /// How many: see [`masters`](Builder::masters).
    pub fn master(mut self, url: impl AsRef<str>) -> Self {
        self.masters.push(url.as_ref().to_owned());
        self
    }

    /// Adds several masters by URL; see [`master`](Builder::master). Defaults to none.
    ///
    /// A lock needs a quorum of `N / 2 + 1` masters, so `N - quorum` of them may fail: 3
    /// masters tolerate one failure, 5 tolerate two. Two masters tolerate none (a quorum
    /// of 2 of 2: one master down stops every lock, twice as likely as with one master);
    /// [`build`](Builder::build) accepts them with a `tracing` warning, and
    /// [`Redlock::check_masters`](crate::Redlock::check_masters) notes it. An even count
    /// tolerates no more failures than one master fewer.
    pub fn masters<I>(mut self, urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.masters
            .extend(urls.into_iter().map(|u| u.as_ref().to_owned()));
        self
    }

    /// How long a lock lives on the masters unless extended. Defaults to 10 s.
    ///
    /// Must exceed the drift allowance plus the node timeout plus the larger of
    /// `min_validity` and the safety margin, and be at most [`MAX_TTL`] (24 h). Also sets
    /// `ttl_max` unless that is set: per-call TTLs longer than this need
    /// [`ttl_max`](Builder::ttl_max).
    pub fn ttl(mut self, ttl: impl IntoDuration) -> Self {
        self.ttl = ttl.into_duration();
        self
    }

    /// The clock-drift allowance as a fraction of the TTL; the validity of a lease is
    /// shortened by `ttl * drift_factor + 2 ms`. Defaults to 0.01.
    pub fn drift_factor(mut self, drift_factor: f64) -> Self {
        self.drift_factor = drift_factor;
        self
    }

    /// How long one master may take to answer one request before it counts as failed.
    /// Keep it far below the TTL (the Redlock reference suggests 5–50 ms for 10 s).
    /// Defaults to 50 ms; at most [`MAX_NODE_TIMEOUT`] (1 min).
    pub fn node_timeout(mut self, node_timeout: impl IntoDuration) -> Self {
        self.node_timeout = node_timeout.into_duration();
        self
    }

    /// How long opening a connection to a master may take. Defaults to 1 s; at most
    /// [`MAX_CONNECT_TIMEOUT`] (1 min).
    ///
    /// Connections are opened on first use and re-opened in the background when they
    /// break; a master that is down answers "failed" at once meanwhile.
    pub fn connect_timeout(mut self, connect_timeout: impl IntoDuration) -> Self {
        self.connect_timeout = connect_timeout.into_duration();
        self
    }

    /// How many acquire attempts [`Redlock::acquire`](crate::Redlock::acquire) makes at most,
    /// not counting those woken by an event: the holder's release notice or expiry, or masters
    /// leaving restart quarantine (those come from the masters, not from impatience, and the
    /// wait budget bounds them). `1` makes a single attempt. Defaults to no bound on the count:
    /// the wait budget ([`wait_timeout`](Builder::wait_timeout)) bounds the time.
    pub fn retry_attempts(mut self, attempts: u32) -> Self {
        self.retry_attempts = Some(attempts);
        self
    }

    /// The pause between acquire attempts, before jitter. Defaults to 100 ms.
    pub fn retry_delay(mut self, delay: impl IntoDuration) -> Self {
        self.retry_delay = delay.into_duration();
        self
    }

    /// The upper bound of the uniform random jitter added to every pause, so that
    /// contenders that failed together do not retry together. Defaults to the retry delay
    /// (so `retry_delay("10ms")` pauses 10–20 ms).
    pub fn retry_jitter(mut self, jitter: impl IntoDuration) -> Self {
        self.retry_jitter = Some(jitter.into_duration());
        self
    }

    /// How the pause grows between attempts. Defaults to [`Backoff::Fixed`].
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The most time [`Redlock::acquire`](crate::Redlock::acquire) spends trying, over all
    /// attempts, every wait and every round included. Defaults to twice `ttl_max` (20 s with
    /// the defaults): long enough for any holder's lock to expire and for new masters to leave
    /// restart quarantine. At most [`MAX_WAIT_TIMEOUT`] (24 h).
    pub fn wait_timeout(mut self, wait: impl IntoDuration) -> Self {
        self.wait_timeout = Some(wait.into_duration());
        self
    }

    /// The least validity a newly acquired lease must have; a quorum that answers so late
    /// that less remains counts as a failed attempt. Defaults to zero.
    pub fn min_validity(mut self, min_validity: impl IntoDuration) -> Self {
        self.min_validity = min_validity.into_duration();
        self
    }

    /// A prefix put before every resource name to form the key. Defaults to empty, which
    /// keeps keys compatible with other Redlock clients locking the same names.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// What this client's locks say about their holder, beside its host, process id and a
    /// client id: shown by [`Redlock::inspect`](crate::Redlock::inspect) to whoever asks
    /// who holds a lock (such as `"billing-worker"`). Defaults to empty; at most
    /// [`MAX_LABEL_LEN`](limits::MAX_LABEL_LEN) bytes; per call with
    /// [`AcquireOptions::label`](crate::AcquireOptions::label). Not a secret: anyone who
    /// can read the masters sees it.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Whether the `tracing` spans and events of this client show resource names. Defaults
    /// to off: each name is shown as `#` and 16 hex digits, a hash of the name keyed with a
    /// random key drawn once per process, so that the events of one lock can be told apart
    /// and followed within one process, but the name cannot be read back nor guessed
    /// from it, and the same name hashes differently in another process or after a
    /// restart. Turn it on where names are not sensitive, to see them. Metrics never
    /// carry a resource name either way (docs/observability.md in the repository).
    pub fn trace_resource_names(mut self, on: bool) -> Self {
        self.trace_resource_names = on;
        self
    }

    /// The certificate authority, as PEM (one or more certificates), that the certificates
    /// of the `rediss://` masters must chain to. It replaces the system's trusted roots for
    /// them: only this CA is trusted. Defaults to the system's trusted roots. Needs the
    /// `tls` feature and at least one `rediss://` master, or [`build`](Builder::build)
    /// fails with [`ConfigError::Tls`]; so does a PEM without a certificate.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca_pem = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let client = redquorum::Redlock::builder()
    ///     .masters(["rediss://redis-a:6380", "rediss://redis-b:6380", "rediss://redis-c:6380"])
    ///     .tls_ca_pem(ca_pem)
    ///     .build()?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// As [`tls_ca_pem`](Builder::tls_ca_pem), read from a PEM file when the client is
    /// built. Defaults to the system's trusted roots. A file that cannot be read fails
    /// [`build`](Builder::build) with [`ConfigError::Tls`].
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(Pem::File(path.into()));
        self
    }

    /// A client certificate (PEM, the chain) and its private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1), presented to `rediss://` masters that ask for one (`tls-auth-clients`).
    /// Defaults to none. Needs the `tls` feature. The key is never shown by `Debug`.
    pub fn tls_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((Pem::Bytes(cert.into()), Pem::Bytes(key.into())));
        self
    }

    /// As [`tls_client_cert_pem`](Builder::tls_client_cert_pem), read from PEM files when
    /// the client is built. Defaults to none.
    pub fn tls_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client = Some((Pem::File(cert.into()), Pem::File(key.into())));
        self
    }

    /// Whether waiting acquires subscribe to release notices and retry as soon as the
    /// holder releases, instead of only after their pause. Defaults to on; without pub/sub
    /// on a master, waiters fall back to their timers.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Whether an acquire of a resource that this client (or a clone of it) already holds
    /// waits for that lease like any other contender, instead of failing at once with
    /// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld). Defaults to off.
    ///
    /// Turn it on for an application whose tasks share one client and must queue behind
    /// each other for the same resource. It gives up the immediate error that catches
    /// re-entry by mistake: a task that acquires a resource it already holds then waits
    /// for its own lease to run out, and behind a watchdog (which keeps the lease) until
    /// its wait budget runs out, ending with
    /// [`ErrorKind::WaitTimeout`](crate::ErrorKind::WaitTimeout).
    /// Re-entry proper is [`Lease::reenter`](crate::Lease::reenter) either way. Upgrading
    /// a read lock to a write lock stays refused (two upgraders would deadlock).
    pub fn wait_for_own_leases(mut self, on: bool) -> Self {
        self.wait_for_own_leases = on;
        self
    }

    /// Whether every lease gets a watchdog that extends it while it is held (see
    /// [`Lease`](crate::Lease)). Defaults to off;
    /// [`Redlock::with_lock`](crate::Redlock::with_lock) always uses one.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// The watchdog's pause between extensions. Defaults to a third of the TTL; at most
    /// [`MAX_TTL`], and below the TTL, or [`build`](Builder::build) fails with
    /// [`ConfigError::ExtendInterval`] (a lease would expire first). An acquisition with
    /// the watchdog whose own TTL ([`AcquireOptions::ttl`](crate::AcquireOptions::ttl)) is
    /// not above it fails with [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions).
    /// Whatever the interval, the watchdog starts each extension early enough to finish
    /// before the lease's safety point.
    pub fn extend_interval(mut self, interval: impl IntoDuration) -> Self {
        self.extend_interval = Some(interval.into_duration());
        self
    }

    /// The most time a watchdog keeps one lease alive; it then stops extending and the
    /// lease counts as lost, so a stuck but alive holder cannot keep a lock forever.
    /// Defaults to none; at most [`MAX_MAX_HOLD`] (7 days).
    pub fn max_hold(mut self, max_hold: impl IntoDuration) -> Self {
        self.max_hold = Some(max_hold.into_duration());
        self
    }

    /// How long before its deadline a lease counts as lost, so that work aborted at that
    /// moment stops while the lock is still held. Defaults to 5 % of the TTL. Together
    /// with the drift allowance and the node timeout it must stay below the TTL; a margin
    /// too large for the TTL is reported as [`ConfigError::TtlTooShort`] naming
    /// `safety_margin`.
    pub fn safety_margin(mut self, margin: impl IntoDuration) -> Self {
        self.safety_margin = Some(margin.into_duration());
        self
    }

    /// Restart quarantine: a master that may have lost its lock keys (restarted without
    /// persistence, restored from an old snapshot, flushed) does not vote until every lock
    /// it may have forgotten has expired — `ttl_max` plus the drift allowance. Defaults to
    /// on. Turn it off only when every master is durable (`appendfsync always`) or for
    /// throwaway test servers: a fresh server also abstains for `ttl_max`.
    pub fn quarantine(mut self, on: bool) -> Self {
        self.quarantine = on;
        self
    }

    /// The longest TTL any client uses on these masters, for locks and extensions alike;
    /// restart quarantine keeps a master out for this long. Defaults to the TTL, so a
    /// per-call [`AcquireOptions::ttl`](crate::AcquireOptions::ttl) or extension longer
    /// than the client's TTL is refused unless this is raised. At most [`MAX_TTL`].
    pub fn ttl_max(mut self, ttl_max: impl IntoDuration) -> Self {
        self.ttl_max = Some(ttl_max.into_duration());
        self
    }

    /// Whether every acquisition gets a fencing token ([`FencingToken`](crate::FencingToken)),
    /// at the cost of one more round trip. Defaults to off; per call with
    /// [`AcquireOptions::fencing`](crate::AcquireOptions::fencing). Needs quarantine.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Whether a waiting acquire of one resource queues behind the holder and is handed
    /// the lock by its release, instead of being woken with every other waiter to race
    /// for it. Defaults to on. A queued waiter registers on every master; the release
    /// script hands the key to the live head of the queue and notifies that waiter
    /// alone, which confirms with an ordinary quorum round of its own (docs/design.md
    /// §17). Turn it off to keep today's wake-everyone behaviour, for instance on masters
    /// shared with other Redlock clients. [`try_acquire`](crate::Redlock::try_acquire)
    /// never queues; `acquire_many`, semaphores and read-write locks wake every waiter
    /// either way.
    pub fn handoff(mut self, on: bool) -> Self {
        self.handoff = on;
        self
    }

    /// The liveness TTL of a queued waiter's registration, and the expiry of a key handed
    /// to it: a waiter that stops refreshing (every third of it) drops out of the queue
    /// within this time, and a handed key it never confirms frees within it. Defaults to
    /// a tenth of the TTL, kept between four node timeouts and 1 s, and never above half
    /// the TTL — but always above three node timeouts: when half the TTL is not, the
    /// default is one millisecond more than three node timeouts (so a `ttl` of 200 ms
    /// with a `node_timeout` of 50 ms waits with 151 ms). Must exceed three node
    /// timeouts and be at most the TTL.
    ///
    /// A TTL of at most three node timeouts leaves no waiter TTL that satisfies the rule
    /// (a refresh may then take longer than a third of it): the default is the TTL
    /// itself, and a slow master may let a waiter's registration lapse there between
    /// refreshes, so the waiter loses its place in that master's queue until its next
    /// refresh. That costs order, never exclusion; raise `ttl` above three node timeouts,
    /// or lower `node_timeout`, to avoid it. Given explicitly, such a value is refused.
    pub fn waiter_ttl(mut self, waiter_ttl: impl IntoDuration) -> Self {
        self.waiter_ttl = Some(waiter_ttl.into_duration());
        self
    }

    /// Makes this client's clock run at `rate` times real time (0.98: 2 % slow), to show
    /// what the drift allowance covers and what it does not. Defaults to 1. Only with the
    /// `mutants` feature; never use it outside such tests.
    #[cfg(feature = "mutants")]
    pub fn client_clock_rate(mut self, rate: f64) -> Self {
        self.planted.clock_rate = rate;
        self
    }

    /// Plants a deliberate bug in this client, for proving that a test suite catches it.
    /// Defaults to none. Only with the `mutants` feature; never use it outside such tests.
    #[cfg(feature = "mutants")]
    pub fn mutant(mut self, mutant: Mutant) -> Self {
        self.planted.mutant = Some(mutant);
        self
    }

    pub(crate) fn into_config(self) -> Result<Config, ConfigError> {
        let Builder {
            masters,
            ttl,
            drift_factor,
            node_timeout,
            connect_timeout,
            retry_attempts,
            retry_delay,
            retry_jitter,
            backoff,
            wait_timeout,
            min_validity,
            key_prefix,
            notifications,
            wait_for_own_leases,
            watchdog,
            extend_interval,
            max_hold,
            safety_margin,
            quarantine,
            ttl_max,
            fencing,
            handoff,
            waiter_ttl,
            label,
            trace_resource_names,
            tls,
            #[cfg(feature = "mutants")]
            planted,
        } = self;

        // Every setting is checked, and every problem reported at once; a check that
        // needs a setting that did not parse is left out rather than run on a guess.
        let mut problems = Problems::default();
        problems.check(check_key_prefix(&key_prefix));
        if label.len() > MAX_LABEL_LEN {
            problems.push(ConfigError::LabelTooLong { len: label.len() });
        }

        let masters = parse_masters(&masters, &tls, &mut problems);
        let ttl = problems.keep(duration("ttl", ttl));
        let node_timeout = problems.keep(duration("node_timeout", node_timeout));
        let connect_timeout = problems.keep(duration("connect_timeout", connect_timeout));
        let retry_delay = problems.keep(duration("retry_delay", retry_delay));
        // Jitter follows the delay unless set.
        let retry_jitter = match retry_jitter {
            Some(jitter) => problems.keep(duration("retry_jitter", jitter)),
            None => retry_delay,
        };
        let min_validity = problems.keep(duration("min_validity", min_validity));
        let wait_timeout = problems.optional("wait_timeout", wait_timeout);
        let extend_interval = problems.optional("extend_interval", extend_interval);
        let max_hold = problems.optional("max_hold", max_hold);
        let safety_margin = problems.optional("safety_margin", safety_margin);
        // `None`: given, and did not parse; it defaults to the TTL.
        let ttl_max = match ttl_max {
            Some(d) => problems.keep(duration("ttl_max", d)).map(Some),
            None => Some(None),
        };
        if let Some(Some(max)) = ttl_max {
            problems.check(at_most("ttl_max", max, MAX_TTL));
            // Compared as the masters keep them, in whole milliseconds.
            let max = deadline::whole_millis(max);
            if let Some(ttl) = ttl.map(deadline::whole_millis)
                && ttl > max
            {
                problems.push(ConfigError::TtlAboveTtlMax { ttl, ttl_max: max });
            }
        }
        if fencing && !quarantine {
            problems.push(ConfigError::FencingNeedsQuarantine);
        }
        #[cfg(feature = "mutants")]
        if !(planted.clock_rate.is_finite()
            && planted.clock_rate > 0.1
            && planted.clock_rate <= 10.0)
        {
            problems.push(ConfigError::ClockRate(planted.clock_rate));
        }
        for (setting, value) in [("extend_interval", extend_interval), ("max_hold", max_hold)] {
            if value.flatten().is_some_and(|d| d.is_zero()) {
                problems.push(ConfigError::Zero { setting });
            }
        }

        let drift_ok = drift_factor.is_finite() && (0.0..1.0).contains(&drift_factor);
        if !drift_ok {
            problems.push(ConfigError::DriftFactor(drift_factor));
        }
        for (setting, value) in [
            ("node_timeout", node_timeout),
            ("connect_timeout", connect_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                problems.push(ConfigError::Zero { setting });
            }
        }
        if let Some(node_timeout) = node_timeout {
            problems.check(at_most("node_timeout", node_timeout, MAX_NODE_TIMEOUT));
        }
        if let Some(connect_timeout) = connect_timeout {
            problems.check(at_most(
                "connect_timeout",
                connect_timeout,
                MAX_CONNECT_TIMEOUT,
            ));
        }
        for (setting, value, max) in [
            ("wait_timeout", wait_timeout, MAX_WAIT_TIMEOUT),
            ("max_hold", max_hold, MAX_MAX_HOLD),
            ("extend_interval", extend_interval, MAX_TTL),
        ] {
            if let Some(Some(d)) = value {
                problems.check(at_most(setting, d, max));
            }
        }
        if let (Some(ttl), Some(node_timeout), Some(min_validity), Some(safety_margin), true) =
            (ttl, node_timeout, min_validity, safety_margin, drift_ok)
        {
            problems.check(check_ttl(
                ttl,
                drift_factor,
                node_timeout,
                least_validity(min_validity, safety_margin, ttl),
            ));
        } else if let Some(ttl) = ttl {
            // What can be said of the TTL alone.
            if ttl.is_zero() {
                problems.push(ConfigError::Zero { setting: "ttl" });
            }
            problems.check(at_most("ttl", ttl, MAX_TTL));
        }
        // The watchdog extends a lease before its safety point whatever the interval: one
        // not below the TTL could never be kept.
        if let (Some(ttl), Some(Some(interval))) = (ttl, extend_interval)
            && !interval.is_zero()
            && !ttl.is_zero()
            && interval >= ttl
        {
            problems.push(ConfigError::ExtendInterval { interval, ttl });
        }
        let attempts = match retry_attempts.map(NonZeroU32::new) {
            Some(None) => {
                problems.push(ConfigError::Zero {
                    setting: "retry_attempts",
                });
                None
            }
            Some(attempts) => attempts,
            None => None,
        };
        if let (Some(retry_delay), Some(retry_jitter)) = (retry_delay, retry_jitter) {
            let largest_pause = match backoff {
                Backoff::Fixed => retry_delay,
                Backoff::Exponential { max } => {
                    if max < retry_delay {
                        problems.push(ConfigError::BackoffMax {
                            max,
                            delay: retry_delay,
                        });
                    }
                    max.max(retry_delay)
                }
            };
            problems.check(fits_clock(
                "retry_delay + retry_jitter",
                largest_pause.checked_add(retry_jitter),
            ));
        }
        let waiter_ttl = match (waiter_ttl, ttl, node_timeout) {
            (Some(given), ttl, node_timeout) => {
                match (
                    problems.keep(duration("waiter_ttl", given)),
                    ttl,
                    node_timeout,
                ) {
                    (Some(given), Some(ttl), Some(node_timeout)) => problems.keep(
                        check_waiter_ttl(deadline::whole_millis(given), ttl, node_timeout),
                    ),
                    _ => None,
                }
            }
            (None, Some(ttl), Some(node_timeout)) => Some(default_waiter_ttl(
                deadline::whole_millis(ttl),
                node_timeout,
            )),
            (None, _, _) => None,
        };
        problems.finish()?;

        // Every value parsed and passed its checks: the defaults below are never used.
        let ttl = deadline::whole_millis(ttl.unwrap_or(defaults::TTL));
        let ttl_max = ttl_max.flatten().map_or(ttl, deadline::whole_millis);
        if masters.len() == 2 {
            tracing::warn!(
                masters = ?masters.iter().map(|m| &*m.name).collect::<Vec<_>>(),
                "two masters: a quorum of 2 of 2 tolerates no failure, so one master down \
                 stops every lock; use 3 or 5 independent masters"
            );
        }
        let node_timeout = node_timeout.unwrap_or(defaults::NODE_TIMEOUT);
        let connect_timeout = connect_timeout.unwrap_or(defaults::CONNECT_TIMEOUT);
        let retry_delay = retry_delay.unwrap_or(defaults::RETRY_DELAY);
        let retry_jitter = retry_jitter.unwrap_or(defaults::RETRY_JITTER);
        let min_validity = min_validity.unwrap_or_default();
        let wait_timeout = wait_timeout.flatten();
        let extend_interval = extend_interval.flatten();
        let max_hold = max_hold.flatten();
        let safety_margin = safety_margin.flatten();
        let waiter_ttl = waiter_ttl.unwrap_or_else(|| default_waiter_ttl(ttl, node_timeout));

        Ok(Config {
            masters,
            ttl,
            drift_factor,
            node_timeout,
            connect_timeout,
            retry: RetryPolicy {
                attempts,
                delay: retry_delay,
                jitter: retry_jitter,
                backoff,
            },
            wait_timeout,
            min_validity,
            key_prefix,
            notifications,
            wait_for_own_leases,
            watchdog,
            extend_interval,
            max_hold,
            safety_margin,
            quarantine,
            ttl_max,
            fencing,
            handoff,
            waiter_ttl,
            label,
            trace_resource_names,
            #[cfg(feature = "mutants")]
            planted,
        })
    }
}

/// The default waiter TTL for a lock of `ttl`: a tenth of it, kept between four node
/// timeouts and [`defaults::WAITER_TTL_CAP`], never above half the TTL, in whole
/// milliseconds (at least one); raised to one millisecond above three node timeouts
/// when half the TTL is not more, so that it is one [`check_waiter_ttl`] accepts whenever
/// one exists. A TTL of at most three node timeouts leaves none: the default is then the
/// TTL itself, the longest a registration may live.
fn default_waiter_ttl(ttl: Duration, node_timeout: Duration) -> Duration {
    let wanted = ttl
        .mul_f64(defaults::WAITER_TTL_FRACTION)
        .max(node_timeout.saturating_mul(4))
        .min(defaults::WAITER_TTL_CAP)
        .min(ttl / 2);
    let wanted = deadline::whole_millis(wanted).max(Duration::from_millis(1));
    let least = deadline::whole_millis(node_timeout.saturating_mul(3))
        .saturating_add(Duration::from_millis(1));
    wanted.max(least).min(ttl)
}

/// Checks a waiter TTL given to [`Builder::waiter_ttl`].
fn check_waiter_ttl(
    waiter_ttl: Duration,
    ttl: Duration,
    node_timeout: Duration,
) -> Result<Duration, ConfigError> {
    if waiter_ttl.is_zero() {
        return Err(ConfigError::Zero {
            setting: "waiter_ttl",
        });
    }
    at_most("waiter_ttl", waiter_ttl, MAX_TTL)?;
    let advice = if waiter_ttl > ttl {
        "lower waiter_ttl or raise ttl"
    } else if waiter_ttl <= node_timeout.saturating_mul(3) {
        "raise waiter_ttl or lower node_timeout"
    } else {
        return Ok(waiter_ttl);
    };
    Err(ConfigError::WaiterTtl {
        waiter_ttl,
        node_timeout,
        ttl,
        advice,
    })
}

/// Refuses a prefix under which lock keys could collide with the crate's own records.
fn check_key_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.starts_with(crate::scripts::RECORD_NAMESPACE) {
        return Err(ConfigError::ReservedKeyPrefix {
            prefix: prefix.to_owned(),
        });
    }
    Ok(())
}

/// The parsed duration of `setting`, or the error naming it.
pub(crate) fn duration(
    setting: &'static str,
    value: DurationSetting,
) -> Result<Duration, ConfigError> {
    value.map_err(|(input, reason)| ConfigError::InvalidDuration {
        setting,
        input,
        reason,
    })
}

/// Rejects durations that cannot be added to the clock (a year is the practical bound).
fn fits_clock(setting: &'static str, value: Option<Duration>) -> Result<(), ConfigError> {
    const LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);
    match value {
        Some(d) if d <= LIMIT && Instant::now().checked_add(d).is_some() => Ok(()),
        Some(d) => Err(ConfigError::DurationOverflow { setting, value: d }),
        None => Err(ConfigError::DurationOverflow {
            setting,
            value: Duration::MAX,
        }),
    }
}

/// The masters of `urls`, each checked; every problem goes to `problems`, and the masters
/// that have one are left out.
fn parse_masters(urls: &[String], tls: &TlsSettings, problems: &mut Problems) -> Vec<MasterSpec> {
    if urls.is_empty() {
        problems.push(ConfigError::NoMasters);
    }
    // `None`: the TLS settings are refused already; nothing more is said of them.
    let loaded = problems.keep(tls.load());
    let certificates = loaded.as_ref().and_then(Option::as_ref);
    let mut specs: Vec<MasterSpec> = Vec::with_capacity(urls.len());
    for url in urls {
        if let Some(spec) = problems.keep(parse_master(url, tls, certificates, &specs)) {
            specs.push(spec);
        }
    }
    // Judged only when every master was understood: a refused one may be the TLS one.
    if loaded.is_some()
        && tls.is_set()
        && !urls.is_empty()
        && specs.len() == urls.len()
        && !specs.iter().any(|s| is_tls(&s.info))
    {
        problems.push(ConfigError::Tls {
            setting: tls.setting(),
            reason: "given, but no master uses TLS: write the masters' URLs as \
                     rediss://host:port, or remove the TLS settings"
                .to_owned(),
        });
    }
    specs
}

/// One master of `url`, checked against the masters before it (`specs`).
fn parse_master(
    url: &str,
    tls: &TlsSettings,
    certificates: Option<&Certificates>,
    specs: &[MasterSpec],
) -> Result<MasterSpec, ConfigError> {
    let name = redact(url);
    check_tls_url(url, &name)?;
    let info = url
        .into_connection_info()
        .map_err(|e| ConfigError::InvalidUrl {
            url: name.clone(),
            reason: url_problem(url, &e),
        })?;
    // The parser forgives what the check above reads literally (a space before the
    // scheme, a tab inside it): the parsed address is what counts.
    if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
        return Err(insecure_url(&name));
    }
    if !info.addr().is_supported() {
        return Err(ConfigError::InvalidUrl {
            url: name,
            reason: "this address is not supported on this platform; use redis://".to_owned(),
        });
    }
    if let Some(other) = specs.iter().find(|s| same_server(&s.info, &info)) {
        return Err(ConfigError::DuplicateMaster {
            url: name,
            other: other.name.to_string(),
        });
    }
    // Files named in the URL take the place of the builder's settings for this master.
    let own = url_tls(url, &name, &info)?;
    let own_certificates = match &own {
        Some(own) => own.or(tls).load().map_err(|e| ConfigError::InvalidUrl {
            url: name.clone(),
            reason: e.to_string(),
        })?,
        None => None,
    };
    let client = open_client(&info, own_certificates.as_ref().or(certificates)).map_err(|e| {
        ConfigError::InvalidUrl {
            url: name.clone(),
            reason: redact_message(&e.to_string(), url),
        }
    })?;
    Ok(MasterSpec {
        info,
        name: name.into(),
        client,
    })
}

/// What the redis client's refusal of `url` means, and what a valid URL looks like: the
/// client's own words do not say which part is wrong.
fn url_problem(url: &str, refused: &redis::RedisError) -> String {
    const VALID: &str = "write it as redis://host:port (with a user, password and database: \
                         redis://user:password@host:port/0), rediss://host:port for TLS \
                         (feature `tls`), or redis+unix:///path/to/socket";
    let wrong = match url::Url::parse(url.trim()) {
        Err(url::ParseError::RelativeUrlWithoutBase) => "it has no scheme".to_owned(),
        Err(url::ParseError::InvalidPort) => "its port is not a number up to 65535".to_owned(),
        Err(url::ParseError::EmptyHost) => "it names no host".to_owned(),
        Err(e) => format!("its host is not a valid name or IP address ({e})"),
        Ok(parsed) => {
            let scheme = parsed.scheme();
            let tcp = matches!(scheme, "redis" | "rediss" | "valkey" | "valkeys");
            let unix = matches!(scheme, "redis+unix" | "unix" | "valkey+unix");
            if !tcp && !unix {
                match url.contains("://") {
                    true => format!("its scheme {scheme}:// is not a Redis scheme"),
                    false => "it has no scheme".to_owned(),
                }
            } else if tcp && parsed.host_str().is_none_or(str::is_empty) {
                "it names no host".to_owned()
            } else if tcp
                && parsed
                    .host_str()
                    .is_some_and(|h| matches!(h, "0.0.0.0" | "[::]"))
            {
                "0.0.0.0 and :: are no address to connect to: name the master's host".to_owned()
            } else if tcp && !parsed.path().trim_matches('/').is_empty() {
                format!(
                    "its path {:?} is not a database number (such as /0)",
                    parsed.path()
                )
            } else if unix && parsed.path().is_empty() {
                "it names no socket: give the socket's absolute path".to_owned()
            } else {
                let said = redact_message(&refused.to_string(), url);
                let said = said.replace(" - InvalidClientConfig", "");
                format!("the redis client refuses it ({said})")
            }
        }
    };
    format!("{wrong}; {VALID}")
}

/// The URL parameters that name TLS files for one master.
const URL_TLS_PARAMS: [&str; 3] = ["tls_ca_file", "tls_cert_file", "tls_key_file"];

/// The TLS files a master's URL names (`?tls_ca_file=…&tls_cert_file=…&tls_key_file=…`),
/// if any: they take the place of the builder's CA or client certificate for that master.
fn url_tls(
    url: &str,
    name: &str,
    info: &ConnectionInfo,
) -> Result<Option<TlsSettings>, ConfigError> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(None);
    };
    let mut files: [Option<PathBuf>; 3] = [None, None, None];
    for (key, value) in parsed.query_pairs() {
        if let Some(i) = URL_TLS_PARAMS.iter().position(|p| *p == key) {
            files[i] = Some(PathBuf::from(value.into_owned()));
        }
    }
    let invalid = |reason: &str| ConfigError::InvalidUrl {
        url: name.to_owned(),
        reason: reason.to_owned(),
    };
    let [ca, cert, key] = files;
    if ca.is_none() && cert.is_none() && key.is_none() {
        return Ok(None);
    }
    if !is_tls(info) {
        return Err(invalid(
            "tls_ca_file, tls_cert_file and tls_key_file apply to TLS masters only: write the \
             URL as rediss://, or remove them",
        ));
    }
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((Pem::File(cert), Pem::File(key))),
        (None, None) => None,
        _ => {
            return Err(invalid(
                "tls_cert_file and tls_key_file go together: give both (the client certificate \
                 and its private key), or neither",
            ));
        }
    };
    Ok(Some(TlsSettings {
        ca: ca.map(Pem::File),
        client,
    }))
}

/// Whether a master is reached over TLS.
fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Refuses a TLS URL this build cannot honour, or one that turns certificate checks off,
/// before the redis client parses it (its own message would not say what to change).
fn check_tls_url(url: &str, name: &str) -> Result<(), ConfigError> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !matches!(scheme.to_ascii_lowercase().as_str(), "rediss" | "valkeys") {
        return Ok(());
    }
    if !cfg!(feature = "tls") {
        return Err(ConfigError::InvalidUrl {
            url: name.to_owned(),
            reason: "TLS (rediss://) needs redquorum's `tls` feature: enable it \
                     (features = [\"tls\"] in Cargo.toml), or use redis://"
                .to_owned(),
        });
    }
    // docs/design.md §13: a master whose certificate is not checked can be impersonated by
    // anyone on the path, who can then grant the lock to two clients at once.
    if url.contains('#') {
        return Err(insecure_url(name));
    }
    Ok(())
}

/// The refusal of a `rediss://` URL with a fragment, such as `#insecure`.
fn insecure_url(name: &str) -> ConfigError {
    ConfigError::InvalidUrl {
        url: name.to_owned(),
        reason: "a URL fragment (such as #insecure) is not supported: #insecure would turn off \
                 the check of the master's certificate, so anyone on the network path could \
                 answer as the master and grant the lock twice; remove it, and give the \
                 masters' CA with Builder::tls_ca_pem or Builder::tls_ca_file"
            .to_owned(),
    }
}

/// PEM text given to the builder: bytes, or a file read by [`Builder::build`].
#[derive(Clone)]
enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    /// The PEM text, read from its file if it is one.
    #[cfg(feature = "tls")]
    fn read(&self, setting: &'static str) -> Result<Vec<u8>, ConfigError> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => {
                use std::io::Read as _;

                let shown = path.display().to_string();
                let mut pem = Vec::new();
                // One byte more than the limit tells a file at the limit from a longer one.
                std::fs::File::open(path)
                    .and_then(|file| {
                        file.take(limits::MAX_PEM_FILE_LEN.saturating_add(1))
                            .read_to_end(&mut pem)
                    })
                    .map_err(|e| ConfigError::Tls {
                        setting,
                        reason: format!(
                            "cannot read {shown:?} ({e}): give the path of a readable PEM file"
                        ),
                    })?;
                if u64::try_from(pem.len()).map_or(true, |len| len > limits::MAX_PEM_FILE_LEN) {
                    return Err(ConfigError::Tls {
                        setting,
                        reason: format!(
                            "{shown:?} is larger than {} bytes, more than any PEM file: give \
                             the path of the PEM file itself",
                            limits::MAX_PEM_FILE_LEN
                        ),
                    });
                }
                Ok(pem)
            }
        }
    }

    /// How `Debug` shows it: a file's path, or the size of PEM bytes, and for a private
    /// key given as bytes nothing but that it is set.
    fn shown(&self, secret: bool) -> String {
        match self {
            Pem::File(path) => format!("file {:?}", path.display().to_string()),
            Pem::Bytes(_) if secret => "***".to_owned(),
            Pem::Bytes(bytes) => format!("{} bytes of PEM", bytes.len()),
        }
    }
}

/// The TLS settings of a builder: the CA the masters' certificates must chain to, and a
/// client certificate with its key.
#[derive(Clone, Default)]
struct TlsSettings {
    ca: Option<Pem>,
    /// The certificate chain and the private key.
    client: Option<(Pem, Pem)>,
}

impl fmt::Debug for TlsSettings {
    // Hand-written: a private key given as bytes is never shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { ca, client } = self;
        f.debug_struct("TlsSettings")
            .field("ca", &ca.as_ref().map(|p| p.shown(false)))
            .field(
                "client_cert",
                &client.as_ref().map(|(cert, _)| cert.shown(false)),
            )
            .field(
                "client_key",
                &client.as_ref().map(|(_, key)| key.shown(true)),
            )
            .finish()
    }
}

impl TlsSettings {
    /// These settings, each completed by `other`'s where unset.
    fn or(&self, other: &TlsSettings) -> TlsSettings {
        TlsSettings {
            ca: self.ca.clone().or_else(|| other.ca.clone()),
            client: self.client.clone().or_else(|| other.client.clone()),
        }
    }

    fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// The setting to name when the TLS settings as a whole are refused.
    fn setting(&self) -> &'static str {
        match (&self.ca, &self.client) {
            (Some(Pem::File(_)), _) => "tls_ca_file",
            (Some(Pem::Bytes(_)), _) => "tls_ca_pem",
            (None, Some((Pem::File(_), _))) => "tls_client_cert_files",
            (None, _) => "tls_client_cert_pem",
        }
    }

    /// Reads and checks the settings: `None` when none is set.
    #[cfg(feature = "tls")]
    fn load(&self) -> Result<Option<redis::TlsCertificates>, ConfigError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        if !self.is_set() {
            return Ok(None);
        }
        let certificates = |setting: &'static str, pem: &[u8], what: &str| {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConfigError::Tls {
                    setting,
                    reason: format!("its PEM cannot be read ({e}): give {what} in PEM form"),
                })?;
            if certificates.is_empty() {
                return Err(ConfigError::Tls {
                    setting,
                    reason: format!(
                        "its PEM holds no certificate (no \"BEGIN CERTIFICATE\" block): give \
                         {what} in PEM form"
                    ),
                });
            }
            Ok(certificates)
        };
        let root_cert = match &self.ca {
            Some(ca) => {
                let setting = if matches!(ca, Pem::File(_)) {
                    "tls_ca_file"
                } else {
                    "tls_ca_pem"
                };
                let pem = ca.read(setting)?;
                // Each must be a certificate the masters' certificates can chain to: the redis
                // client would refuse it without saying which setting to fix.
                let mut roots = rustls::RootCertStore::empty();
                for certificate in certificates(setting, &pem, "the CA certificate of the masters")?
                {
                    roots.add(certificate).map_err(|e| ConfigError::Tls {
                        setting,
                        reason: format!(
                            "a certificate in it cannot be used as a CA ({e}): give the CA \
                             certificate of the masters in PEM form"
                        ),
                    })?;
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert, key)) => {
                let setting = if matches!(cert, Pem::File(_)) {
                    "tls_client_cert_files"
                } else {
                    "tls_client_cert_pem"
                };
                let client_cert = cert.read(setting)?;
                let chain = certificates(setting, &client_cert, "the client certificate")?;
                let client_key = key.read(setting)?;
                // The key's bytes and the parser's words about them stay out of the message.
                let Ok(parsed_key) = PrivateKeyDer::from_pem_slice(&client_key) else {
                    return Err(ConfigError::Tls {
                        setting,
                        reason: "the private key holds no PEM key (PKCS#8, PKCS#1 or SEC1): \
                                 give the client certificate's key in PEM form"
                            .to_owned(),
                    });
                };
                // A key of another certificate would fail every handshake, each time as a
                // fault the redis client does not name: refuse it now.
                check_client_key(setting, chain, parsed_key)?;
                Some(redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// Without the `tls` feature, any TLS setting is refused.
    #[cfg(not(feature = "tls"))]
    fn load(&self) -> Result<Option<std::convert::Infallible>, ConfigError> {
        if self.is_set() {
            return Err(ConfigError::Tls {
                setting: self.setting(),
                reason: "TLS needs redquorum's `tls` feature: enable it (features = [\"tls\"] \
                         in Cargo.toml)"
                    .to_owned(),
            });
        }
        Ok(None)
    }
}

/// Refuses a client key that the crypto provider cannot use or that does not belong to the
/// first certificate of `chain`. The message never shows the key.
#[cfg(feature = "tls")]
fn check_client_key(
    setting: &'static str,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<(), ConfigError> {
    use rustls::crypto::CryptoProvider;

    install_crypto_provider();
    let ring;
    let provider = match CryptoProvider::get_default() {
        Some(provider) => &**provider,
        None => {
            ring = rustls::crypto::ring::default_provider();
            &ring
        }
    };
    rustls::sign::CertifiedKey::from_der(chain, key, provider)
        .map(|_| ())
        .map_err(|e| ConfigError::Tls {
            setting,
            reason: match e {
                rustls::Error::InconsistentKeys(_) => "the private key does not belong to the \
                                                       client certificate: give the key made \
                                                       with that certificate"
                    .to_owned(),
                _ => format!(
                    "the client certificate or its key cannot be used ({e}): give a \
                     certificate in PEM form and its private key (RSA, ECDSA or Ed25519)"
                ),
            },
        })
}

/// The certificates [`TlsSettings::load`] reads.
#[cfg(feature = "tls")]
type Certificates = redis::TlsCertificates;
/// No certificates without the `tls` feature.
#[cfg(not(feature = "tls"))]
type Certificates = std::convert::Infallible;

/// The redis client of one master: with the builder's certificates for a TLS master.
#[cfg(feature = "tls")]
fn open_client(
    info: &ConnectionInfo,
    certificates: Option<&redis::TlsCertificates>,
) -> redis::RedisResult<Client> {
    if !is_tls(info) {
        return Client::open(info.clone());
    }
    install_crypto_provider();
    match certificates {
        Some(certificates) => Client::build_with_tls(info.clone(), certificates.clone()),
        None => Client::open(info.clone()),
    }
}

/// The redis client of one master (no TLS in this build).
#[cfg(not(feature = "tls"))]
fn open_client(
    info: &ConnectionInfo,
    certificates: Option<&std::convert::Infallible>,
) -> redis::RedisResult<Client> {
    let _ = certificates;
    Client::open(info.clone())
}

/// Makes ring the process's rustls crypto provider unless one is installed already. The
/// redis client builds its TLS settings with the process's provider, and finds none (and
/// panics) when several providers are compiled in and none was chosen.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one meanwhile: then that one stays, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether two master addresses name the same server: the same port, and the same IP
/// address (however spelled), the same host name, or `localhost` and a loopback address it
/// may resolve to (`127.0.0.1` or `::1`). `127.0.0.1` and `::1` are different sockets, so
/// two servers.
fn same_server(a: &ConnectionInfo, b: &ConnectionInfo) -> bool {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[derive(PartialEq)]
    enum Host {
        Ip(IpAddr),
        Localhost,
        Name(String),
    }
    fn host(h: &str) -> Host {
        let h = h.trim_matches(['[', ']']).to_ascii_lowercase();
        match h.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip.to_canonical()),
            Err(_) if h == "localhost" => Host::Localhost,
            Err(_) => Host::Name(h),
        }
    }
    fn norm(addr: &ConnectionAddr) -> Option<(Host, u16)> {
        match addr {
            ConnectionAddr::Tcp(h, p) => Some((host(h), *p)),
            ConnectionAddr::TcpTls { host: h, port, .. } => Some((host(h), *port)),
            _ => None,
        }
    }
    let localhost = |ip: &IpAddr| {
        *ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || *ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
    };
    match (norm(a.addr()), norm(b.addr())) {
        (Some((x, p)), Some((y, q))) if p == q => match (&x, &y) {
            (Host::Localhost, Host::Ip(ip)) | (Host::Ip(ip), Host::Localhost) => localhost(ip),
            _ => x == y,
        },
        (Some(_), Some(_)) => false,
        _ => a.addr() == b.addr(),
    }
}

/// The URL with any password replaced by `***`, for errors, `Debug` and tracing.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        // Nothing secret: shown as written, not as the parser would rewrite it.
        Ok(parsed)
            if parsed.password().is_none()
                && !parsed
                    .query_pairs()
                    .any(|(k, _)| k == "pass" || k == "password") =>
        {
            url.to_owned()
        }
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            let has_secret = parsed
                .query_pairs()
                .any(|(k, _)| k == "pass" || k == "password");
            if has_secret {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if k == "pass" || k == "password" {
                            "***".to_owned()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string().replace("%2A%2A%2A", "***")
        }
        // Unparsable: hide everything between the scheme and an `@` but a user name
        // before a `:`, if any.
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(at)) if at > s + 3 => {
                let user = url
                    .get(s + 3..at)
                    .and_then(|info| info.split_once(':'))
                    .map_or(String::new(), |(user, _)| format!("{user}:"));
                format!("{}{user}***{}", &url[..s + 3], &url[at..])
            }
            _ => url.to_owned(),
        },
    }
}

/// An error message from the URL parser, with the raw URL (and its password) removed.
fn redact_message(message: &str, url: &str) -> String {
    message.replace(url, &redact(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("redis://user:secret@127.0.0.1:7001/0"),
            "redis://user:***@127.0.0.1:7001/0"
        );
        assert_eq!(redact("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
        let unix = redact("redis+unix:///tmp/r.sock?user=u&pass=secret");
        assert!(!unix.contains("secret"), "{unix}");
        assert_eq!(redact("redis://:sec ret@host:1"), "redis://:***@host:1");
    }

    #[test]
    fn rediss_urls_build_only_with_the_tls_feature() {
        let built = Builder::new()
            .master("rediss://127.0.0.1:7001")
            .into_config();
        if cfg!(feature = "tls") {
            let config = built.unwrap();
            assert!(is_tls(&config.masters[0].info));
        } else {
            let err = built.unwrap_err();
            assert!(matches!(err, ConfigError::InvalidUrl { .. }), "{err}");
            assert!(err.to_string().contains("`tls` feature"), "{err}");
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_settings_need_the_tls_feature() {
        let err = Builder::new()
            .master("redis://127.0.0.1:7001")
            .tls_ca_file("/etc/ssl/ca.pem")
            .into_config()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Tls {
                    setting: "tls_ca_file",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("`tls` feature"), "{err}");
    }

    #[test]
    fn debug_never_shows_a_client_key() {
        let builder = Builder::new()
            .master("rediss://127.0.0.1:7001")
            .tls_ca_pem("CA-PEM-TEXT")
            .tls_client_cert_pem("CERT-PEM-TEXT", "KEY-PEM-SECRET");
        let shown = format!("{builder:?} {builder:#?}");
        assert!(!shown.contains("KEY-PEM-SECRET"), "{shown}");
        assert!(shown.contains("client_key: Some(\"***\")"), "{shown}");
        let files = Builder::new().tls_client_cert_files("/c.pem", "/k.pem");
        assert!(format!("{files:?}").contains("/k.pem"));
    }

    #[test]
    fn exponential_backoff_doubles_up_to_max() {
        let policy = RetryPolicy {
            attempts: None,
            delay: Duration::from_millis(10),
            jitter: Duration::ZERO,
            backoff: Backoff::Exponential {
                max: Duration::from_millis(70),
            },
        };
        let delays: Vec<u128> = (1..=6).map(|a| policy.base_delay(a).as_millis()).collect();
        assert_eq!(delays, [10, 20, 40, 70, 70, 70]);
        assert_eq!(policy.base_delay(u32::MAX), Duration::from_millis(70));
    }

    #[test]
    fn jitter_follows_the_retry_delay_unless_set() {
        let config = |b: Builder| b.master("redis://127.0.0.1:7001").into_config().unwrap();
        let follows = config(Builder::new().retry_delay("10ms"));
        assert_eq!(follows.retry.jitter, Duration::from_millis(10));
        let set = config(Builder::new().retry_delay("10ms").retry_jitter("0ms"));
        assert_eq!(set.retry.jitter, Duration::ZERO);
        let default = config(Builder::new());
        assert_eq!(default.retry.jitter, defaults::RETRY_JITTER);
        assert_eq!(default.retry.delay, defaults::RETRY_DELAY);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let policy = RetryPolicy {
            attempts: None,
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            backoff: Backoff::Fixed,
        };
        for _ in 0..1000 {
            let d = policy.delay(1);
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
        }
    }
}
