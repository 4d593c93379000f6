//! The settings of one acquire call (docs/design.md §3, §6): [`AcquireOptions`] as the
//! caller gives them, and the [`Plan`] they resolve to against the client's
//! configuration: TTL, wait budget, attempts, watchdog, fencing, owner, fairness.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::Owner;
use crate::config::{
    DurationSetting, IntoDuration, MAX_MAX_HOLD, MAX_WAIT_TIMEOUT, Problem, at_most, check_label,
    duration,
};
use crate::core::Inner;
use crate::deadline;
use crate::error::{Error, ErrorKind, human};

/// Per-call settings for [`Redlock::acquire_with`](crate::Redlock::acquire_with) and [`Redlock::with_lock`](crate::Redlock::with_lock); unset
/// values use the client's. Durations are given as for the [`Builder`](crate::Builder): a [`Duration`] or a
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
    /// longer locks per call, raise [`Builder::ttl_max`](crate::Builder::ttl_max) when building the client.
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
    /// [`MAX_WAIT_TIMEOUT`](crate::limits::MAX_WAIT_TIMEOUT); zero is refused, as a budget
    /// no round can finish in (for one attempt without waiting, [`attempts(1)`](Self::attempts)).
    /// It ends at the runtime timer's resolution (1 ms with tokio): a round that a quorum
    /// answers within a shorter budget may still be granted.
    pub fn wait_timeout(mut self, wait: impl IntoDuration) -> Self {
        self.wait_timeout = Some(wait.into_duration());
        self
    }

    /// Whether the lease gets a watchdog that extends it while held. Defaults to the
    /// client's `watchdog` setting; [`Redlock::with_lock`](crate::Redlock::with_lock) always turns it on.
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

    /// What [`Redlock::inspect`](crate::Redlock::inspect) calls this lock's holder.
    /// Defaults to the client's [`label`](crate::Builder::label); at most
    /// [`MAX_LABEL_LEN`](crate::limits::MAX_LABEL_LEN) bytes, without control characters
    /// ([`char::is_control`]: line breaks, tabs, escapes), Unicode line separators or
    /// direction overrides, or the call fails with
    /// [`ErrorKind::InvalidOptions`] before any master is asked. Each label a client uses
    /// keeps one small holder record on each master, for an hour after its last use:
    /// name a kind of work (`"nightly-billing"`), not each call.
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
    /// ([`Redlock::acquire_with`](crate::Redlock::acquire_with), [`Redlock::with_lock`](crate::Redlock::with_lock)); `acquire_many`, semaphores and
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
    /// The settings of one acquire call of `resource` (named in errors): `options` over
    /// the client's configuration, the wait budget fixed from now.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidOptions`] when the options do not fit the client: a duration
    /// that does not parse or is above its limit, a TTL the client could not keep, zero
    /// attempts or `max_hold`, a label too long or holding a control character, a Unicode
    /// line separator or a direction override ([`check_label`]), fencing without restart
    /// quarantine.
    pub(crate) fn new(
        inner: &Inner,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Self, Error> {
        let config = &inner.config;
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
            return Err(invalid(Problem::FencingNeedsQuarantine.to_string()));
        }
        if let Some(w) = options_wait {
            if w.is_zero() {
                return Err(invalid(
                    "wait_timeout is zero: no round can finish in it: give it more time than \
                     a round to the masters, or make one attempt without waiting \
                     (`AcquireOptions::attempts(1)`)"
                        .into(),
                ));
            }
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
            Some(label) => {
                check_label(label).map_err(|e| invalid(e.to_string()))?;
                Arc::new(inner.owner.labelled(label))
            }
            None => Arc::clone(&inner.owner),
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
        Ok(Self {
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
