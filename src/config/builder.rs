//! The builder: one setter per setting, and its validation into a [`Config`].

#![allow(clippy::wildcard_imports)]

use super::*;

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
