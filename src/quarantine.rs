//! Restart quarantine (DESIGN.md section 6). Pure: no I/O; times are passed in.
//!
//! A master that lost its keys — restarted without persistence, restored from a stale
//! snapshot, flushed — could hand a held lock to a second client. So a master counts toward
//! a quorum only once every lock it might have forgotten has expired:
//!
//! - its **data epoch** is at least `window` old. The epoch is a record
//!   (`redquorum:epoch`, no TTL) holding a random id and the server time it was created;
//!   whoever finds it missing creates it. Missing means the data is new or was lost, so a
//!   new epoch starts a quarantine. An epoch id that changes under a connection (FLUSHALL)
//!   starts one too.
//! - and, unless the master is durable (`appendonly yes` with `appendfsync always`), its
//!   **process** is at least `window` old (`uptime_in_seconds`, rounded down), which also
//!   covers a restart from a stale snapshot that brought an old epoch record back.
//!
//! `window = ttl_max * (1 + drift_factor) + margin`, where `ttl_max` bounds every TTL and
//! extension on these masters. Until then the master *abstains*: its reply counts as a
//! failure for the decision, never as a grant or a denial.
//!
//! For fencing, a master whose epoch is younger than another master's by more than the
//! window has lost data that the others kept: a fence counter *missing* on it may have
//! been lost, so such a reply is not trusted until a write-back seeds it again.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// A master's data epoch, as read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Epoch {
    /// The epoch's random id.
    pub(crate) id: Arc<str>,
    /// When it was created, in microseconds of the server's clock.
    pub(crate) created_us: u64,
    /// The server's clock when it was read, in microseconds.
    pub(crate) now_us: u64,
}

impl Epoch {
    /// Parses the record `"<id>:<created_us>"` read at server time `now_us`.
    pub(crate) fn parse(record: &str, now_us: u64) -> Option<Epoch> {
        let (id, created) = record.rsplit_once(':')?;
        Some(Epoch {
            id: id.into(),
            created_us: created.parse().ok()?,
            now_us,
        })
    }

    /// How old the epoch was when read (zero if the server clock went backwards).
    pub(crate) fn age(&self) -> Duration {
        Duration::from_micros(self.now_us.saturating_sub(self.created_us))
    }
}

/// What a (re)connection learned about a master.
#[derive(Debug, Clone)]
pub(crate) struct Vitals {
    pub(crate) run_id: String,
    /// `uptime_in_seconds`, rounded down by the server.
    pub(crate) uptime: Duration,
    /// `appendonly yes` and `appendfsync always`.
    pub(crate) durable: bool,
    pub(crate) epoch: Epoch,
    /// Why the master's configuration can lose lock keys, if it can.
    pub(crate) misconfigured: Option<String>,
}

/// Whether a master votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It counts.
    Counted,
    /// It abstains until the instant given.
    Abstains(Instant),
    /// Its configuration can lose lock keys: it never counts.
    Misconfigured,
}

/// One master's quarantine state, as seen by one client.
#[derive(Debug, Clone)]
pub(crate) struct Quarantine {
    window: Duration,
    epoch: Option<Arc<str>>,
    counted_after: Option<Instant>,
    misconfigured: bool,
}

impl Quarantine {
    /// A master not yet seen: it abstains until its vitals are known.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            epoch: None,
            counted_after: None,
            misconfigured: false,
        }
    }

    /// Takes in what a (re)connection read at `now`.
    pub(crate) fn connected(&mut self, vitals: &Vitals, now: Instant) {
        let mut wait = self.window.saturating_sub(vitals.epoch.age());
        if !vitals.durable {
            wait = wait.max(self.window.saturating_sub(vitals.uptime));
        }
        self.epoch = Some(Arc::clone(&vitals.epoch.id));
        self.counted_after = Some(now + wait);
        self.misconfigured = vitals.misconfigured.is_some();
    }

    /// Takes in the epoch a request read at `now`: a different epoch means the master lost
    /// its data since we connected, which starts a new quarantine from its creation.
    /// Returns whether it changed.
    pub(crate) fn observed(&mut self, epoch: &Epoch, now: Instant) -> bool {
        if self.epoch.as_deref() == Some(&*epoch.id) {
            return false;
        }
        let wait = self.window.saturating_sub(epoch.age());
        self.epoch = Some(Arc::clone(&epoch.id));
        let until = now + wait;
        self.counted_after = Some(self.counted_after.map_or(until, |c| c.max(until)));
        true
    }

    /// Whether the master votes at `now`.
    pub(crate) fn standing(&self, now: Instant) -> Standing {
        if self.misconfigured {
            return Standing::Misconfigured;
        }
        match self.counted_after {
            Some(after) if now >= after => Standing::Counted,
            Some(after) => Standing::Abstains(after),
            // Vitals unknown: abstain until they are read (at most one connect).
            None => Standing::Abstains(now),
        }
    }
}

/// Added to the quarantine window, as the drift allowance adds 2 ms to the validity.
pub(crate) const MARGIN: Duration = Duration::from_millis(2);

/// The quarantine window for `ttl_max`: `ttl_max * (1 + drift_factor) + margin`.
pub(crate) fn window(ttl_max: Duration, drift_factor: f64, margin: Duration) -> Duration {
    ttl_max
        .saturating_add(ttl_max.mul_f64(drift_factor))
        .saturating_add(margin)
}

/// Whether an eviction setting can drop lock keys.
pub(crate) fn eviction_risk(policy: &str, maxmemory: u64) -> Option<String> {
    if maxmemory == 0 || policy == "noeviction" {
        return None;
    }
    Some(format!(
        "maxmemory-policy {policy} with maxmemory {maxmemory} can evict lock keys: use noeviction"
    ))
}

/// Which masters lost data the others kept: an epoch younger than the oldest one by more
/// than `window`. `created_us` holds each master's epoch creation time, if known.
pub(crate) fn lossy(created_us: &[Option<u64>], window: Duration) -> Vec<bool> {
    let oldest = created_us.iter().flatten().min().copied();
    let slack = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    created_us
        .iter()
        .map(|c| match (c, oldest) {
            (Some(c), Some(o)) => c.saturating_sub(o) > slack,
            _ => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn vitals(uptime_s: u64, epoch_age_s: u64, durable: bool) -> Vitals {
        Vitals {
            run_id: "r".into(),
            uptime: Duration::from_secs(uptime_s),
            durable,
            epoch: Epoch {
                id: "e".into(),
                created_us: 1_000_000_000,
                now_us: 1_000_000_000 + epoch_age_s * 1_000_000,
            },
            misconfigured: None,
        }
    }

    #[test]
    fn window_adds_drift_and_margin() {
        assert_eq!(
            window(10 * S, 0.01, Duration::from_millis(100)),
            Duration::from_millis(10_200)
        );
    }

    #[test]
    fn unknown_masters_abstain() {
        let now = Instant::now();
        assert_eq!(
            Quarantine::new(10 * S).standing(now),
            Standing::Abstains(now)
        );
    }

    #[test]
    fn a_young_process_abstains_until_the_window_passed() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(3, 1000, false), now);
        assert_eq!(q.standing(now), Standing::Abstains(now + 7 * S));
        assert_eq!(q.standing(now + 7 * S), Standing::Counted);
    }

    #[test]
    fn a_durable_master_ignores_its_uptime_but_not_its_epoch() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(0, 1000, true), now);
        assert_eq!(q.standing(now), Standing::Counted);
        q.connected(&vitals(0, 4, true), now);
        assert_eq!(q.standing(now), Standing::Abstains(now + 6 * S));
    }

    #[test]
    fn an_old_master_with_an_old_epoch_counts_at_once() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(500, 500, false), now);
        assert_eq!(q.standing(now), Standing::Counted);
    }

    #[test]
    fn a_changed_epoch_starts_a_new_quarantine() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(500, 500, false), now);
        let same = vitals(500, 600, false).epoch;
        assert!(!q.observed(&same, now));
        assert_eq!(q.standing(now), Standing::Counted);
        let flushed = Epoch {
            id: "new".into(),
            created_us: 5,
            now_us: 5,
        };
        let later = now + 100 * S;
        assert!(q.observed(&flushed, later));
        assert_eq!(q.standing(later), Standing::Abstains(later + 10 * S));
        assert_eq!(q.standing(later + 10 * S), Standing::Counted);
    }

    #[test]
    fn misconfigured_masters_never_count() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        let mut v = vitals(500, 500, true);
        v.misconfigured = eviction_risk("allkeys-lru", 1 << 20);
        assert!(v.misconfigured.is_some());
        q.connected(&v, now);
        assert_eq!(q.standing(now + 1000 * S), Standing::Misconfigured);
        assert_eq!(eviction_risk("allkeys-lru", 0), None);
        assert_eq!(eviction_risk("noeviction", 1 << 20), None);
    }

    #[test]
    fn epochs_parse_and_age() {
        let e = Epoch::parse("abc:def:1000000", 3_500_000).unwrap();
        assert_eq!(&*e.id, "abc:def");
        assert_eq!(e.age(), Duration::from_micros(2_500_000));
        assert_eq!(Epoch::parse("nocolon", 1), None);
        assert_eq!(Epoch::parse("x:notanumber", 1), None);
        // A server clock that went backwards gives age zero, never a panic.
        assert_eq!(Epoch::parse("x:10", 5).unwrap().age(), Duration::ZERO);
    }

    #[test]
    fn lossy_masters_are_the_ones_much_younger_than_the_oldest() {
        let w = 10 * S;
        let s = 1_000_000u64;
        assert_eq!(
            lossy(&[Some(100 * s), Some(105 * s), Some(200 * s), None], w),
            [false, false, true, false]
        );
        assert_eq!(lossy(&[None, None], w), [false, false]);
    }
}
