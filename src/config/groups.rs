//! The grouped settings the [`Builder`] takes as values: [`Timeouts`], [`Retry`],
//! [`Watchdog`], [`Waiting`], [`Clock`] and [`Tls`].
//!
//! Each is a small value whose setters each name one setting; nothing is checked until
//! [`Builder::build`]. Giving a group to the builder sets the settings the value names and
//! leaves the others as they were (their defaults unless set before), so
//! `.retry(Retry::new().delay("10ms")).retry(Retry::new().attempts(3))` sets both.

#![allow(clippy::wildcard_imports)]

use super::*;

/// How long the masters may take: to answer one request, and to open a connection. Give it
/// to [`Builder::timeouts`].
///
/// # Default
/// - `node`: [`defaults::NODE_TIMEOUT`] (50 ms)
/// - `connect`: [`defaults::CONNECT_TIMEOUT`] (1 s)
///
/// ```
/// use redquorum::{Redlock, Timeouts};
///
/// let client = Redlock::builder()
///     .master("redis://127.0.0.1:7001")
///     .timeouts(Timeouts::new().node("20ms").connect("500ms"))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Timeouts {
    pub(super) node: Option<DurationSetting>,
    pub(super) connect: Option<DurationSetting>,
}

impl Timeouts {
    /// No timeout named: each keeps its default unless set.
    pub const fn new() -> Self {
        Self {
            node: None,
            connect: None,
        }
    }

    /// These timeouts, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            node: self.node.or(base.node),
            connect: self.connect.or(base.connect),
        }
    }

    /// How long one master may take to answer one request before it counts as failed
    /// (reported as `node_timeout`). Keep it far below the TTL (the Redlock reference
    /// suggests 5–50 ms for 10 s). Defaults to 50 ms; at most [`MAX_NODE_TIMEOUT`] (1 min).
    pub fn node(mut self, timeout: impl IntoDuration) -> Self {
        self.node = Some(timeout.into_duration());
        self
    }

    /// How long opening a connection to a master may take (reported as
    /// `connect_timeout`). Defaults to 1 s; at most [`MAX_CONNECT_TIMEOUT`] (1 min).
    ///
    /// Connections are opened on first use and re-opened in the background when they
    /// break; a master that is down answers "failed" at once meanwhile.
    pub fn connect(mut self, timeout: impl IntoDuration) -> Self {
        self.connect = Some(timeout.into_duration());
        self
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::new()
    }
}

/// How [`Redlock::acquire`](crate::Redlock::acquire) retries and how long it waits in
/// all. Give it to [`Builder::retry`].
///
/// # Default
/// - `attempts`: no bound on the count (the wait budget bounds the time)
/// - `delay`: [`defaults::RETRY_DELAY`] (100 ms)
/// - `jitter`: the delay ([`defaults::RETRY_JITTER`] with the default delay)
/// - `backoff`: [`Backoff::Fixed`]
/// - `wait`: twice `ttl_max` (20 s with the defaults)
///
/// ```
/// use redquorum::{Backoff, Redlock, Retry};
/// use std::time::Duration;
///
/// let client = Redlock::builder()
///     .master("redis://127.0.0.1:7001")
///     .retry(
///         Retry::new()
///             .delay("10ms")
///             .backoff(Backoff::Exponential { max: Duration::from_secs(1) })
///             .wait("30s"),
///     )
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Retry {
    pub(super) attempts: Option<u32>,
    pub(super) delay: Option<DurationSetting>,
    pub(super) jitter: Option<DurationSetting>,
    pub(super) backoff: Option<Backoff>,
    pub(super) wait: Option<DurationSetting>,
}

impl Retry {
    /// No retry setting named: each keeps its default unless set.
    pub const fn new() -> Self {
        Self {
            attempts: None,
            delay: None,
            jitter: None,
            backoff: None,
            wait: None,
        }
    }

    /// These settings, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            attempts: self.attempts.or(base.attempts),
            delay: self.delay.or(base.delay),
            jitter: self.jitter.or(base.jitter),
            backoff: self.backoff.or(base.backoff),
            wait: self.wait.or(base.wait),
        }
    }

    /// How many acquire attempts [`Redlock::acquire`](crate::Redlock::acquire) makes at
    /// most (reported as `retry_attempts`), not counting those woken by an event: the
    /// holder's release notice or expiry, or masters leaving restart quarantine (those come
    /// from the masters, not from impatience, and the wait budget bounds them). `1` makes a
    /// single attempt; `0` is refused. Defaults to no bound on the count: the wait budget
    /// ([`wait`](Retry::wait)) bounds the time.
    pub const fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// The pause between acquire attempts, before jitter (reported as `retry_delay`).
    /// Defaults to 100 ms.
    pub fn delay(mut self, delay: impl IntoDuration) -> Self {
        self.delay = Some(delay.into_duration());
        self
    }

    /// The upper bound of the uniform random jitter added to every pause, so that
    /// contenders that failed together do not retry together (reported as
    /// `retry_jitter`). Defaults to the delay (so `delay("10ms")` pauses 10–20 ms).
    pub fn jitter(mut self, jitter: impl IntoDuration) -> Self {
        self.jitter = Some(jitter.into_duration());
        self
    }

    /// How the pause grows between attempts. Defaults to [`Backoff::Fixed`].
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The wait budget: the most time [`Redlock::acquire`](crate::Redlock::acquire) spends
    /// trying, over all attempts, every wait and every round included (reported as
    /// `wait_timeout`; per call with
    /// [`AcquireOptions::wait_timeout`](crate::AcquireOptions::wait_timeout)). Defaults to
    /// twice `ttl_max` (20 s with the defaults): long enough for any holder's lock to expire
    /// and for new masters to leave restart quarantine. At most [`MAX_WAIT_TIMEOUT`] (24 h);
    /// zero is refused, as a budget no round can finish in (for one attempt without
    /// waiting, [`Redlock::try_acquire`](crate::Redlock::try_acquire)). The budget ends
    /// at the runtime timer's resolution (1 ms with tokio): a round that a quorum answers
    /// within a shorter budget may still be granted.
    pub fn wait(mut self, wait: impl IntoDuration) -> Self {
        self.wait = Some(wait.into_duration());
        self
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self::new()
    }
}

/// The watchdog that extends a lease while it is held, and when a lease counts as lost.
/// Give it to [`Builder::watchdog`].
///
/// [`Watchdog::on`] gives every lease a watchdog; [`Watchdog::off`] (the default) gives
/// none; [`Watchdog::new`] leaves that as it is. Without one, its interval and maximum
/// hold still apply to the leases that ask for one
/// ([`AcquireOptions::watchdog`](crate::AcquireOptions::watchdog),
/// [`Redlock::with_lock`](crate::Redlock::with_lock)), and its safety margin to every
/// lease.
///
/// # Default
/// - off
/// - `interval`: a third of the TTL
/// - `max_hold`: none
/// - `safety_margin`: 5 % of the TTL
///
/// ```
/// use redquorum::{Redlock, Watchdog};
///
/// let client = Redlock::builder()
///     .master("redis://127.0.0.1:7001")
///     .watchdog(Watchdog::on().interval("2s").max_hold("1h"))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Watchdog {
    pub(super) on: Option<bool>,
    pub(super) interval: Option<DurationSetting>,
    pub(super) max_hold: Option<DurationSetting>,
    pub(super) safety_margin: Option<DurationSetting>,
}

impl Watchdog {
    /// Neither on nor off named, nor any other setting: each keeps its default unless set.
    pub const fn new() -> Self {
        Self {
            on: None,
            interval: None,
            max_hold: None,
            safety_margin: None,
        }
    }

    /// A watchdog for every lease.
    pub const fn on() -> Self {
        Self {
            on: Some(true),
            interval: None,
            max_hold: None,
            safety_margin: None,
        }
    }

    /// No watchdog unless a lease asks for one; the default.
    pub const fn off() -> Self {
        Self {
            on: Some(false),
            interval: None,
            max_hold: None,
            safety_margin: None,
        }
    }

    /// These settings, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            on: self.on.or(base.on),
            interval: self.interval.or(base.interval),
            max_hold: self.max_hold.or(base.max_hold),
            safety_margin: self.safety_margin.or(base.safety_margin),
        }
    }

    /// The watchdog's pause between extensions (reported as `extend_interval`). Defaults
    /// to a third of the TTL; at most [`MAX_TTL`], and below the TTL, or
    /// [`build`](Builder::build) fails with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) (a lease would
    /// expire first). An acquisition with the watchdog whose own TTL
    /// ([`AcquireOptions::ttl`](crate::AcquireOptions::ttl)) is not above it fails with
    /// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions). Whatever the
    /// interval, the watchdog starts each extension early enough to finish before the
    /// lease's safety point.
    pub fn interval(mut self, interval: impl IntoDuration) -> Self {
        self.interval = Some(interval.into_duration());
        self
    }

    /// The most time a watchdog keeps one lease alive; it then stops extending and the
    /// lease counts as lost, so a stuck but alive holder cannot keep a lock forever.
    /// Defaults to none; at most [`MAX_MAX_HOLD`] (7 days); per call with
    /// [`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold).
    pub fn max_hold(mut self, max_hold: impl IntoDuration) -> Self {
        self.max_hold = Some(max_hold.into_duration());
        self
    }

    /// How long before its deadline a lease counts as lost, so that work aborted at that
    /// moment stops while the lock is still held; it applies to every lease, watched or
    /// not. Defaults to 5 % of the TTL. Together with the drift allowance and the node
    /// timeout it must stay below the TTL; a margin too large for the TTL is reported as
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming `safety_margin`.
    pub fn safety_margin(mut self, margin: impl IntoDuration) -> Self {
        self.safety_margin = Some(margin.into_duration());
        self
    }
}

impl Default for Watchdog {
    fn default() -> Self {
        Self::new()
    }
}

/// How a waiting acquire waits: in a queue it is handed the lock from, woken by release
/// notices, and whether it waits for this client's own leases. Give it to
/// [`Builder::waiting`].
///
/// # Default
/// - `handoff`: on ([`defaults::HANDOFF`])
/// - `waiter_ttl`: a tenth of the TTL, between four node timeouts and 1 s, at most half
///   the TTL, always above three node timeouts
/// - `notifications`: on
/// - `own_leases`: off
///
/// ```
/// use redquorum::{Redlock, Waiting};
///
/// let client = Redlock::builder()
///     .master("redis://127.0.0.1:7001")
///     .waiting(Waiting::new().handoff(false).own_leases(true))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Waiting {
    pub(super) handoff: Option<bool>,
    pub(super) waiter_ttl: Option<DurationSetting>,
    pub(super) notifications: Option<bool>,
    pub(super) own_leases: Option<bool>,
}

impl Waiting {
    /// No waiting setting named: each keeps its default unless set.
    pub const fn new() -> Self {
        Self {
            handoff: None,
            waiter_ttl: None,
            notifications: None,
            own_leases: None,
        }
    }

    /// These settings, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            handoff: self.handoff.or(base.handoff),
            waiter_ttl: self.waiter_ttl.or(base.waiter_ttl),
            notifications: self.notifications.or(base.notifications),
            own_leases: self.own_leases.or(base.own_leases),
        }
    }

    /// Whether a waiting acquire of one resource queues behind the holder and is handed
    /// the lock by its release, instead of being woken with every other waiter to race
    /// for it. Defaults to on. A queued waiter registers on every master; the release
    /// script hands the key to the live head of the queue and notifies that waiter
    /// alone, which confirms with an ordinary quorum round of its own (docs/design.md
    /// §17). Turn it off to wake every waiter instead, for instance on masters shared
    /// with other Redlock clients. [`try_acquire`](crate::Redlock::try_acquire) never
    /// queues; `acquire_many`, semaphores and read-write locks wake every waiter either
    /// way.
    pub const fn handoff(mut self, on: bool) -> Self {
        self.handoff = Some(on);
        self
    }

    /// The liveness TTL of a queued waiter's registration, and the expiry of a key handed
    /// to it: a waiter that stops refreshing (every third of it) drops out of the queue
    /// within this time, and a handed key it never confirms frees within it. Defaults to
    /// a tenth of the TTL, kept between four node timeouts and 1 s, and never above half
    /// the TTL — but always above three node timeouts: when half the TTL is not, the
    /// default is one millisecond more than three node timeouts (so a `ttl` of 200 ms
    /// with a node timeout of 50 ms waits with 151 ms). Must exceed three node timeouts
    /// and be at most the TTL.
    ///
    /// A TTL of at most three node timeouts leaves no waiter TTL that satisfies the rule
    /// (a refresh may then take longer than a third of it): the default is the TTL
    /// itself, and a slow master may let a waiter's registration lapse there between
    /// refreshes, so the waiter loses its place in that master's queue until its next
    /// refresh. That costs order, never exclusion; raise `ttl` above three node timeouts,
    /// or lower the node timeout, to avoid it. Given explicitly, such a value is refused.
    pub fn waiter_ttl(mut self, waiter_ttl: impl IntoDuration) -> Self {
        self.waiter_ttl = Some(waiter_ttl.into_duration());
        self
    }

    /// Whether waiting acquires subscribe to release notices and retry as soon as the
    /// holder releases, instead of only after their pause. Defaults to on; without pub/sub
    /// on a master, waiters fall back to their timers.
    pub const fn notifications(mut self, on: bool) -> Self {
        self.notifications = Some(on);
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
    pub const fn own_leases(mut self, on: bool) -> Self {
        self.own_leases = Some(on);
        self
    }
}

impl Default for Waiting {
    fn default() -> Self {
        Self::new()
    }
}

/// What this client assumes of clocks: how far the masters' clocks may drift from its own,
/// and the least validity a new lease must have. Give it to [`Builder::clock`].
///
/// # Default
/// - `drift_factor`: [`defaults::DRIFT_FACTOR`] (0.01)
/// - `min_validity`: zero
///
/// ```
/// use redquorum::{Clock, Redlock};
///
/// let client = Redlock::builder()
///     .master("redis://127.0.0.1:7001")
///     .clock(Clock::new().drift_factor(0.02).min_validity("1s"))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Clock {
    pub(super) drift_factor: Option<f64>,
    pub(super) min_validity: Option<DurationSetting>,
}

impl Clock {
    /// No clock setting named: each keeps its default unless set.
    pub const fn new() -> Self {
        Self {
            drift_factor: None,
            min_validity: None,
        }
    }

    /// These settings, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            drift_factor: self.drift_factor.or(base.drift_factor),
            min_validity: self.min_validity.or(base.min_validity),
        }
    }

    /// The clock-drift allowance as a fraction of the TTL; the validity of a lease is
    /// shortened by `ttl * drift_factor + 2 ms`. Defaults to 0.01; from 0 up to (not
    /// including) 1.
    pub const fn drift_factor(mut self, drift_factor: f64) -> Self {
        self.drift_factor = Some(drift_factor);
        self
    }

    /// The least validity a newly acquired lease must have; a quorum that answers so late
    /// that less remains counts as a failed attempt. Defaults to zero.
    pub fn min_validity(mut self, min_validity: impl IntoDuration) -> Self {
        self.min_validity = Some(min_validity.into_duration());
        self
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// The certificates of `rediss://` masters: the CA their certificates must chain to, and a
/// client certificate for masters that ask for one. Give it to [`Builder::tls`]. Needs the
/// `tls` feature and at least one `rediss://` master, or [`build`](Builder::build) fails
/// with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig). `Debug` never shows a private key given as bytes.
///
/// # Default
/// - CA: the system's trusted roots
/// - client certificate: none
///
/// ```no_run
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use redquorum::{Redlock, Tls};
///
/// let client = Redlock::builder()
///     .masters(["rediss://redis-a:6380", "rediss://redis-b:6380", "rediss://redis-c:6380"])
///     .tls(Tls::new().ca_file("/etc/redis/tls/ca.crt"))
///     .build()?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "settings do nothing until given to the builder"]
pub struct Tls {
    pub(super) settings: TlsSettings,
}

impl Tls {
    /// No TLS setting named: the system's trusted roots and no client certificate, unless
    /// set.
    pub const fn new() -> Self {
        Self {
            settings: TlsSettings {
                ca: None,
                client: None,
            },
        }
    }

    /// These settings, each completed by `base`'s where not named.
    pub(super) fn over(self, base: Self) -> Self {
        Self {
            settings: self.settings.or(&base.settings),
        }
    }

    /// The certificate authority, as PEM (one or more certificates), that the certificates
    /// of the `rediss://` masters must chain to (reported as `tls_ca_pem`). It replaces the
    /// system's trusted roots for them: only this CA is trusted. Defaults to the system's
    /// trusted roots. A PEM without a certificate fails [`build`](Builder::build) with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// As [`ca_pem`](Tls::ca_pem), read from a PEM file when the client is built (reported
    /// as `tls_ca_file`). Defaults to the system's trusted roots. A file that cannot be
    /// read fails [`build`](Builder::build) with [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.ca = Some(Pem::File(path.into()));
        self
    }

    /// A client certificate (PEM, the chain) and its private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1), presented to `rediss://` masters that ask for one (`tls-auth-clients`;
    /// reported as `tls_client_cert_pem`). Defaults to none.
    pub fn client_cert_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.settings.client = Some((Pem::Bytes(cert.into()), Pem::Bytes(key.into())));
        self
    }

    /// As [`client_cert_pem`](Tls::client_cert_pem), read from PEM files when the client
    /// is built (reported as `tls_client_cert_files`). Defaults to none.
    pub fn client_cert_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.settings.client = Some((Pem::File(cert.into()), Pem::File(key.into())));
        self
    }
}
