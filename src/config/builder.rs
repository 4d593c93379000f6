//! The builder: one setter per setting, and its validation into a [`Config`].

#![allow(clippy::wildcard_imports)]

use super::*;

/// Builds a [`Redlock`](crate::Redlock) client; get one from
/// [`Redlock::builder`](crate::Redlock::builder).
///
/// Setters consume and return the builder. Related settings come as one value each
/// ([`Timeouts`], [`Retry`], [`Watchdog`], [`Waiting`], [`Clock`], [`Tls`]); giving one sets
/// what it names and leaves the rest as it was. Nothing is checked or connected until
/// [`build`](Builder::build), which validates every setting at once. Settings are named in
/// its errors as `node_timeout`, `retry_delay` and so on; each setter says its name.
///
/// # Default
/// - masters: none (at least one is required)
/// - `ttl`: [`defaults::TTL`] (10 s); `ttl_max`: the TTL
/// - [`timeouts`](Builder::timeouts): node [`defaults::NODE_TIMEOUT`] (50 ms), connect
///   [`defaults::CONNECT_TIMEOUT`] (1 s)
/// - [`retry`](Builder::retry): no bound on the count of attempts, a pause of
///   [`defaults::RETRY_DELAY`] (100 ms) plus a jitter of up to the pause, [`Backoff::Fixed`],
///   and a wait budget of twice `ttl_max` (20 s with the defaults)
/// - [`watchdog`](Builder::watchdog): off; interval a third of the TTL; no maximum hold;
///   safety margin 5 % of the TTL
/// - [`waiting`](Builder::waiting): hand-off on ([`defaults::HANDOFF`]), a waiter TTL of a
///   tenth of the TTL (between four node timeouts and 1 s, at most half the TTL, always above
///   three node timeouts), release notices on, and a resource this client holds refused at
///   once with [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld)
/// - [`clock`](Builder::clock): drift factor [`defaults::DRIFT_FACTOR`] (0.01), no least
///   validity
/// - `fencing`: off; `quarantine`: on
/// - `key_prefix`: empty, so keys are the resource names themselves and interoperate with
///   other Redlock clients; `label`: empty
/// - `trace_resource_names`: off (spans and events show a hash of each resource name)
/// - [`tls`](Builder::tls) (`rediss://` masters, feature `tls`): the system's trusted roots,
///   no client certificate
///
/// # Limits
/// Durations beyond these are refused by [`build`](Builder::build) with
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), and per call with
/// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions):
/// - `ttl`, `ttl_max`, the watchdog's interval: [`MAX_TTL`] (24 h)
/// - node timeout: [`MAX_NODE_TIMEOUT`] (1 min); connect timeout: [`MAX_CONNECT_TIMEOUT`]
///   (1 min)
/// - wait budget: [`MAX_WAIT_TIMEOUT`] (24 h); maximum hold: [`MAX_MAX_HOLD`] (7 days)
///
/// # Example
/// ```
/// use redquorum::{Backoff, Redlock, Retry, Timeouts};
/// use std::time::Duration;
///
/// let client = Redlock::builder()
///     .masters(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .ttl("30s")
///     .timeouts(Timeouts::new().node(Duration::from_millis(20)))
///     .retry(Retry::new().backoff(Backoff::Exponential { max: Duration::from_secs(1) }))
///     .key_prefix("locks:")
///     .build()?;
/// assert_eq!(client.quorum(), 2);
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build()` is called"]
pub struct Builder {
    masters: Vec<RedactedUrl>,
    ttl: DurationSetting,
    ttl_max: Option<DurationSetting>,
    timeouts: Timeouts,
    retry: Retry,
    watchdog: Watchdog,
    waiting: Waiting,
    clock: Clock,
    fencing: bool,
    quarantine: bool,
    key_prefix: String,
    label: String,
    trace_resource_names: bool,
    tls: Tls,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            masters: Vec::new(),
            ttl: Ok(defaults::TTL),
            ttl_max: None,
            timeouts: Timeouts::new(),
            retry: Retry::new(),
            watchdog: Watchdog::new(),
            waiting: Waiting::new(),
            clock: Clock::new(),
            fencing: false,
            quarantine: true,
            key_prefix: String::new(),
            label: String::new(),
            trace_resource_names: false,
            tls: Tls::new(),
        }
    }
}

impl Builder {
    /// A builder with every default; same as [`Redlock::builder`](crate::Redlock::builder).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one master by URL: `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` (TLS, with the `tls` feature; see [`tls`](Builder::tls))
    /// or `redis+unix:///path/to/socket[?user=…&pass=…]`. A URL on port 0, where no server
    /// can be reached, is refused, and so is a `rediss://…#insecure` URL, which turns
    /// certificate checks off. A `rediss://` URL may name its master's
    /// own PEM files, `?tls_ca_file=PATH` and `&tls_cert_file=PATH&tls_key_file=PATH`, which
    /// take the place of the builder's CA or client certificate for that master.
    ///
    /// Masters must be independent servers (not replicas of each other). Defaults to none.
    /// How many: see [`masters`](Builder::masters).
    pub fn master(mut self, url: impl AsRef<str>) -> Self {
        self.masters.push(RedactedUrl::new(url.as_ref()));
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
            .extend(urls.into_iter().map(|u| RedactedUrl::new(u.as_ref())));
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

    /// The longest TTL any client uses on these masters, for locks and extensions alike;
    /// restart quarantine keeps a master out for this long. Defaults to the TTL, so a
    /// per-call [`AcquireOptions::ttl`](crate::AcquireOptions::ttl) or extension longer
    /// than the client's TTL is refused unless this is raised. At most [`MAX_TTL`].
    pub fn ttl_max(mut self, ttl_max: impl IntoDuration) -> Self {
        self.ttl_max = Some(ttl_max.into_duration());
        self
    }

    /// How long a master may take to answer one request and to accept a connection: sets
    /// the timeouts `timeouts` names, and leaves the others as they are. Defaults to 50 ms
    /// and 1 s (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts.over(self.timeouts);
        self
    }

    /// How [`Redlock::acquire`](crate::Redlock::acquire) retries, and its wait budget:
    /// sets what `retry` names, and leaves the rest as it is. Defaults to no bound on
    /// attempts, 100 ms pauses with as much jitter, a fixed backoff, and a budget of twice
    /// `ttl_max` (see [`Retry`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry.over(self.retry);
        self
    }

    /// The watchdog that extends leases while they are held, and the safety margin of
    /// every lease: sets what `watchdog` names, and leaves the rest as it is. Defaults to
    /// off (see [`Watchdog`]): no watchdog unless a lease asks for one
    /// ([`Redlock::with_lock`](crate::Redlock::with_lock) always does), an interval of a
    /// third of the TTL, no maximum hold, and a margin of 5 % of the TTL.
    pub fn watchdog(mut self, watchdog: Watchdog) -> Self {
        self.watchdog = watchdog.over(self.watchdog);
        self
    }

    /// How a waiting acquire waits: sets what `waiting` names, and leaves the rest as it
    /// is. Defaults to queued and handed the lock (see [`Waiting`]), woken by release
    /// notices, and refused at once
    /// ([`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld)) for a resource this
    /// client holds.
    pub fn waiting(mut self, waiting: Waiting) -> Self {
        self.waiting = waiting.over(self.waiting);
        self
    }

    /// What this client assumes of clocks: sets what `clock` names, and leaves the rest as
    /// it is. Defaults to a drift factor of 0.01 and no least validity (see [`Clock`]).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock.over(self.clock);
        self
    }

    /// Whether every acquisition gets a fencing token ([`FencingToken`](crate::FencingToken)),
    /// at the cost of one more round trip. Defaults to off; per call with
    /// [`AcquireOptions::fencing`](crate::AcquireOptions::fencing). Needs quarantine.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
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

    /// A prefix put before every resource name to form the key. Defaults to empty, which
    /// keeps keys compatible with other Redlock clients locking the same names.
    ///
    /// At most [`MAX_KEY_PREFIX_LEN`](limits::MAX_KEY_PREFIX_LEN) bytes (256), and it must
    /// not start with `redquorum:`, where the lock's own records live; otherwise
    /// [`build`](Builder::build) fails with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// What this client's locks say about their holder, beside its host, process id and a
    /// client id: shown by [`Redlock::inspect`](crate::Redlock::inspect) to whoever asks
    /// who holds a lock (such as `"billing-worker"`). Defaults to empty; at most
    /// [`MAX_LABEL_LEN`](limits::MAX_LABEL_LEN) bytes, without control characters
    /// ([`char::is_control`]: line breaks, tabs, escapes), Unicode line separators or
    /// direction overrides, or [`build`](Builder::build)
    /// fails with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig); per call
    /// with [`AcquireOptions::label`](crate::AcquireOptions::label). Not a secret: anyone
    /// who can read the masters sees it.
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

    /// The certificates of `rediss://` masters: sets what `tls` names, and leaves the rest
    /// as it is. Defaults to the system's trusted roots and no client certificate (see
    /// [`Tls`]). Needs the `tls` feature and at least one
    /// `rediss://` master, or [`build`](Builder::build) fails with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = tls.over(self.tls);
        self
    }

    /// Checks every setting, reporting every problem at once, and turns the builder into
    /// the client's configuration.
    pub(crate) fn into_config(self) -> Result<Config, Problem> {
        let Builder {
            masters,
            ttl,
            ttl_max,
            timeouts,
            retry,
            watchdog,
            waiting,
            clock,
            fencing,
            quarantine,
            key_prefix,
            label,
            trace_resource_names,
            tls,
        } = self;
        let Retry {
            attempts,
            delay,
            jitter,
            backoff,
            wait,
        } = retry;
        let delay = delay.unwrap_or(Ok(defaults::RETRY_DELAY));
        let backoff = backoff.unwrap_or_default();
        let Waiting {
            handoff,
            waiter_ttl,
            notifications,
            own_leases,
        } = waiting;
        let handoff = handoff.unwrap_or(defaults::HANDOFF);
        let notifications = notifications.unwrap_or(true);
        let own_leases = own_leases.unwrap_or(false);
        let Clock {
            drift_factor,
            min_validity,
        } = clock;
        let drift_factor = drift_factor.unwrap_or(defaults::DRIFT_FACTOR);
        let min_validity = min_validity.unwrap_or(Ok(Duration::ZERO));

        // Every setting is checked, and every problem reported at once; a check that
        // needs a setting that did not parse is left out rather than run on a guess.
        let mut problems = Problems::default();
        problems.check(check_key_prefix(&key_prefix));
        problems.check(check_label(&label));
        let masters = parse_masters(&masters, &tls.settings, &mut problems);
        let parsed = Parsed::new(
            &mut problems,
            (ttl, ttl_max, min_validity),
            timeouts,
            (delay, jitter, wait),
            watchdog,
        );
        parsed.check_ttl_max(&mut problems);
        if fencing && !quarantine {
            problems.push(Problem::FencingNeedsQuarantine);
        }
        let drift_ok = parsed.check_bounds(&mut problems, drift_factor);
        parsed.check_ttl(&mut problems, drift_factor, drift_ok);
        let attempts = check_attempts(&mut problems, attempts);
        parsed.check_pauses(&mut problems, backoff);
        let waiter_ttl = parsed.waiter_ttl(&mut problems, waiter_ttl);
        problems.finish()?;

        warn_of_two(&masters);
        // Every value parsed and passed its checks: the defaults below are never used.
        let ttl = deadline::whole_millis(parsed.ttl.unwrap_or(defaults::TTL));
        let node_timeout = parsed.node_timeout.unwrap_or(defaults::NODE_TIMEOUT);
        Ok(Config {
            masters,
            ttl,
            drift_factor,
            node_timeout,
            connect_timeout: parsed.connect_timeout.unwrap_or(defaults::CONNECT_TIMEOUT),
            retry: RetryPolicy {
                attempts,
                delay: parsed.retry_delay.unwrap_or(defaults::RETRY_DELAY),
                jitter: parsed.retry_jitter.unwrap_or(defaults::RETRY_JITTER),
                backoff,
            },
            wait_timeout: parsed.wait_timeout.flatten(),
            min_validity: parsed.min_validity.unwrap_or_default(),
            key_prefix,
            notifications,
            wait_for_own_leases: own_leases,
            watchdog: parsed.watchdog,
            extend_interval: parsed.extend_interval.flatten(),
            max_hold: parsed.max_hold.flatten(),
            safety_margin: parsed.safety_margin.flatten(),
            quarantine,
            ttl_max: parsed.ttl_max.flatten().map_or(ttl, deadline::whole_millis),
            fencing,
            handoff,
            waiter_ttl: waiter_ttl.unwrap_or_else(|| default_waiter_ttl(ttl, node_timeout)),
            label,
            trace_resource_names,
        })
    }
}

/// The duration settings as parsed: `None` when given and it did not parse (its problem
/// noted); for an optional one, `Some(None)` when not given.
struct Parsed {
    ttl: Option<Duration>,
    ttl_max: Option<Option<Duration>>,
    min_validity: Option<Duration>,
    node_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    retry_delay: Option<Duration>,
    retry_jitter: Option<Duration>,
    wait_timeout: Option<Option<Duration>>,
    watchdog: bool,
    extend_interval: Option<Option<Duration>>,
    max_hold: Option<Option<Duration>>,
    safety_margin: Option<Option<Duration>>,
}

/// The retry group's durations: delay, jitter and wait budget.
type RetryDurations = (
    DurationSetting,
    Option<DurationSetting>,
    Option<DurationSetting>,
);

impl Parsed {
    /// Parses every duration, in the order their problems are reported.
    fn new(
        problems: &mut Problems,
        (ttl, ttl_max, min_validity): (DurationSetting, Option<DurationSetting>, DurationSetting),
        timeouts: Timeouts,
        (delay, jitter, wait): RetryDurations,
        watchdog: Watchdog,
    ) -> Self {
        let Timeouts { node, connect } = timeouts;
        let Watchdog {
            on,
            interval,
            max_hold,
            safety_margin,
        } = watchdog;
        let node = node.unwrap_or(Ok(defaults::NODE_TIMEOUT));
        let connect = connect.unwrap_or(Ok(defaults::CONNECT_TIMEOUT));
        let ttl = problems.keep(duration("ttl", ttl));
        let node_timeout = problems.keep(duration("node_timeout", node));
        let connect_timeout = problems.keep(duration("connect_timeout", connect));
        let retry_delay = problems.keep(duration("retry_delay", delay));
        // Jitter follows the delay unless set.
        let retry_jitter = match jitter {
            Some(jitter) => problems.keep(duration("retry_jitter", jitter)),
            None => retry_delay,
        };
        let min_validity = problems.keep(duration("min_validity", min_validity));
        let wait_timeout = problems.optional("wait_timeout", wait);
        let extend_interval = problems.optional("extend_interval", interval);
        let max_hold = problems.optional("max_hold", max_hold);
        let safety_margin = problems.optional("safety_margin", safety_margin);
        // It defaults to the TTL.
        let ttl_max = problems.optional("ttl_max", ttl_max);
        Self {
            ttl,
            ttl_max,
            min_validity,
            node_timeout,
            connect_timeout,
            retry_delay,
            retry_jitter,
            wait_timeout,
            watchdog: on.unwrap_or(false),
            extend_interval,
            max_hold,
            safety_margin,
        }
    }

    /// Checks `ttl_max`: its maximum, and that the TTL is not above it.
    fn check_ttl_max(&self, problems: &mut Problems) {
        if let Some(Some(max)) = self.ttl_max {
            problems.check(at_most("ttl_max", max, MAX_TTL));
            // Compared as the masters keep them, in whole milliseconds.
            let max = deadline::whole_millis(max);
            if let Some(ttl) = self.ttl.map(deadline::whole_millis)
                && ttl > max
            {
                problems.push(Problem::TtlAboveTtlMax { ttl, ttl_max: max });
            }
        }
    }

    /// Checks each duration against zero and its maximum; says whether the drift factor
    /// is in range.
    fn check_bounds(&self, problems: &mut Problems, drift_factor: f64) -> bool {
        for (setting, value) in [
            ("extend_interval", self.extend_interval),
            ("max_hold", self.max_hold),
            ("wait_timeout", self.wait_timeout),
        ] {
            if value.flatten().is_some_and(|d| d.is_zero()) {
                problems.push(Problem::Zero { setting });
            }
        }
        let drift_ok = drift_factor.is_finite() && (0.0..1.0).contains(&drift_factor);
        if !drift_ok {
            problems.push(Problem::DriftFactor(drift_factor));
        }
        for (setting, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                problems.push(Problem::Zero { setting });
            }
        }
        for (setting, value, max) in [
            ("node_timeout", self.node_timeout, MAX_NODE_TIMEOUT),
            ("connect_timeout", self.connect_timeout, MAX_CONNECT_TIMEOUT),
        ] {
            if let Some(d) = value {
                problems.check(at_most(setting, d, max));
            }
        }
        for (setting, value, max) in [
            ("wait_timeout", self.wait_timeout, MAX_WAIT_TIMEOUT),
            ("max_hold", self.max_hold, MAX_MAX_HOLD),
            ("extend_interval", self.extend_interval, MAX_TTL),
        ] {
            if let Some(Some(d)) = value {
                problems.check(at_most(setting, d, max));
            }
        }
        drift_ok
    }

    /// Checks the TTL against what it must leave room for, and the watchdog's interval
    /// against the TTL.
    fn check_ttl(&self, problems: &mut Problems, drift_factor: f64, drift_ok: bool) {
        if let (Some(ttl), Some(node_timeout), Some(min_validity), Some(safety_margin), true) = (
            self.ttl,
            self.node_timeout,
            self.min_validity,
            self.safety_margin,
            drift_ok,
        ) {
            problems.check(check_ttl(
                ttl,
                drift_factor,
                node_timeout,
                least_validity(min_validity, safety_margin, ttl),
            ));
        } else if let Some(ttl) = self.ttl {
            // What can be said of the TTL alone.
            if ttl.is_zero() {
                problems.push(Problem::Zero { setting: "ttl" });
            }
            problems.check(at_most("ttl", ttl, MAX_TTL));
        }
        // The watchdog extends a lease before its safety point whatever the interval: one
        // not below the TTL could never be kept.
        if let (Some(ttl), Some(Some(interval))) = (self.ttl, self.extend_interval)
            && !interval.is_zero()
            && !ttl.is_zero()
            && interval >= ttl
        {
            problems.push(Problem::ExtendInterval { interval, ttl });
        }
    }

    /// Checks the backoff's maximum, and that the longest pause fits the clock.
    fn check_pauses(&self, problems: &mut Problems, backoff: Backoff) {
        let (Some(retry_delay), Some(retry_jitter)) = (self.retry_delay, self.retry_jitter) else {
            return;
        };
        let largest_pause = match backoff {
            Backoff::Fixed => retry_delay,
            Backoff::Exponential { max } => {
                if max < retry_delay {
                    problems.push(Problem::BackoffMax {
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

    /// The waiter TTL: as given and checked, or the default for the TTL; `None` when it
    /// cannot be known (a problem is noted).
    fn waiter_ttl(
        &self,
        problems: &mut Problems,
        given: Option<DurationSetting>,
    ) -> Option<Duration> {
        match given {
            Some(given) => {
                let given = problems.keep(duration("waiter_ttl", given));
                match (given, self.ttl, self.node_timeout) {
                    (Some(given), Some(ttl), Some(node_timeout)) => problems.keep(
                        check_waiter_ttl(deadline::whole_millis(given), ttl, node_timeout),
                    ),
                    _ => None,
                }
            }
            None => match (self.ttl, self.node_timeout) {
                (Some(ttl), Some(node_timeout)) => Some(default_waiter_ttl(
                    deadline::whole_millis(ttl),
                    node_timeout,
                )),
                _ => None,
            },
        }
    }
}

/// The bound on attempts, as given: `None` for no bound, and a zero noted as a problem.
fn check_attempts(problems: &mut Problems, attempts: Option<u32>) -> Option<NonZeroU32> {
    match attempts.map(NonZeroU32::new) {
        Some(None) => {
            problems.push(Problem::Zero {
                setting: "retry_attempts",
            });
            None
        }
        Some(attempts) => attempts,
        None => None,
    }
}

/// Warns of two masters: a quorum of two of two tolerates no failure.
fn warn_of_two(masters: &[MasterSpec]) {
    if masters.len() == 2 {
        tracing::warn!(
            masters = ?masters.iter().map(|m| &*m.name).collect::<Vec<_>>(),
            "two masters: a quorum of 2 of 2 tolerates no failure, so one master down \
             stops every lock; use 3 or 5 independent masters"
        );
    }
}
