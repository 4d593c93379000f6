//! Restart quarantine (docs/design.md §7, I11). Pure: no I/O; times are passed in.
//!
//! A master that lost its keys — restarted without persistence, restored from a stale
//! snapshot, flushed — could hand a held lock to a second client. So a master counts toward
//! a quorum only once every lock it might have forgotten has expired:
//!
//! - its **data epoch** is at least `window` old. The epoch is a field of the cluster
//!   record's key (`<prefix>redquorum:cluster`, field `epoch`, no TTL), a random id and
//!   the server time it was created, kept there with or without a record, so that a lock
//!   script reads both with one command; whoever finds it missing creates it. Missing means the data is new or was lost, so a
//!   new epoch starts a quarantine. An epoch id that changes under a connection (FLUSHALL)
//!   starts one too.
//! - and, unless the master is durable (`appendonly yes` with `appendfsync always`), its
//!   **process** is at least `window` old (`uptime_in_seconds`, rounded down), which also
//!   covers a restart from a stale snapshot that brought an old epoch record back.
//!
//! A process that the cluster record names as bootstrapped empty (its `run_id` and data
//! epoch, written by `init_cluster`) votes at once: it cannot have forgotten anything.
//!
//! `window = ttl_max * (1 + drift_factor) + margin`, where `ttl_max` bounds every TTL and
//! extension on these masters. Until then the master *abstains*: its reply counts as a
//! failure for the decision, never as a grant or a denial.
//!
//! Ages read off a master are measured by its wall clock, which can step forward and so
//! shorten a quarantine. What a client sees for itself is timed on its own monotonic clock
//! instead: a fresh epoch (younger than the window when first seen), an epoch that changed
//! under it, or a restart (a new `run_id`) of a master that is not durable costs a whole
//! window from the moment the client saw it. Only what happened before a client first
//! looked (an old epoch on a young process) is timed by the master's clock.
//!
//! Layer: a leaf (docs/design.md §10); it must not use any other module.

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
    /// The server's clock when it was read, in microseconds: read at connect, not by the
    /// lock scripts (whose epoch's age is then unknown).
    pub(crate) now_us: Option<u64>,
}

impl Epoch {
    /// Parses the record `"<id>:<created_us>"` read at server time `now_us`, if known.
    pub(crate) fn parse(record: &str, now_us: Option<u64>) -> Option<Epoch> {
        let (id, created) = record.rsplit_once(':')?;
        Some(Epoch {
            id: id.into(),
            created_us: created.parse().ok()?,
            now_us,
        })
    }

    /// How old the epoch was when read (zero if the server clock went backwards); `None`
    /// when read without the server's time.
    pub(crate) fn age(&self) -> Option<Duration> {
        self.now_us
            .map(|now| Duration::from_micros(now.saturating_sub(self.created_us)))
    }

    /// Whether the epoch may be younger than `window`: an epoch of unknown age may be.
    fn younger_than(&self, window: Duration) -> bool {
        self.age().is_none_or(|age| age < window)
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
    /// The cluster record names this very process and data epoch as bootstrapped empty
    /// (`init_cluster`): nothing it holds can have been forgotten, so it votes at once.
    pub(crate) bootstrapped: bool,
    /// The cluster record says the master was re-admitted after losing its data: its
    /// fence counters may be behind tokens already issued.
    pub(crate) counters_lost: bool,
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
    run_id: Option<String>,
    counted_after: Option<Instant>,
    misconfigured: bool,
}

impl Quarantine {
    /// A master not yet seen: it abstains until its vitals are known.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            epoch: None,
            run_id: None,
            counted_after: None,
            misconfigured: false,
        }
    }

    /// Takes in what a (re)connection read at `now`. Returns whether this client saw the
    /// master lose data since it last looked: a new data epoch, or a restart (a new
    /// `run_id`) of a master that is not durable.
    pub(crate) fn connected(&mut self, vitals: &Vitals, now: Instant) -> bool {
        let restarted = self.run_id.as_ref().is_some_and(|r| *r != vitals.run_id);
        let changed = self.epoch.as_ref().is_some_and(|e| *e != vitals.epoch.id);
        // A durable master keeps its keys across a restart: only its epoch matters then.
        let lost = (restarted && !vitals.durable) || changed;
        // A fresh epoch, or a loss this client saw: a whole window on this client's clock.
        // Otherwise what is left of the window by the master's own clock (its epoch's age
        // and, unless durable, its process's uptime).
        let mut wait = if lost {
            self.window
        } else if vitals.bootstrapped {
            Duration::ZERO
        } else if vitals.epoch.younger_than(self.window) {
            self.window
        } else {
            Duration::ZERO
        };
        if !vitals.durable && (lost || !vitals.bootstrapped) {
            wait = wait.max(self.window.saturating_sub(vitals.uptime));
        }
        let until = now + wait;
        self.epoch = Some(Arc::clone(&vitals.epoch.id));
        self.run_id = Some(vitals.run_id.clone());
        self.counted_after = if vitals.bootstrapped && !lost {
            // Bootstrapped empty (every master was checked to hold no key) and neither
            // restarted nor flushed since: a quarantine this client started before it saw
            // the record forgets nothing by ending now.
            Some(until)
        } else {
            Some(self.counted_after.map_or(until, |c| c.max(until)))
        };
        self.misconfigured = vitals.misconfigured.is_some();
        lost
    }

    /// Takes in the epoch a request read at `now`: a different epoch means the master lost
    /// its data since we connected, which starts a new quarantine of a whole window on this
    /// client's clock. An epoch first met here (no vitals read yet) abstains a whole window
    /// unless its age is known to exceed it. Returns whether it changed.
    pub(crate) fn observed(&mut self, epoch: &Epoch, now: Instant) -> bool {
        if self.epoch.as_deref() == Some(&*epoch.id) {
            return false;
        }
        let until = if self.epoch.is_some() || epoch.younger_than(self.window) {
            now + self.window
        } else {
            now
        };
        self.epoch = Some(Arc::clone(&epoch.id));
        self.counted_after = Some(self.counted_after.map_or(until, |c| c.max(until)));
        true
    }

    /// Whether `record` (`"<id>:<created_us>"`) is the epoch this client knows.
    pub(crate) fn knows(&self, record: &str) -> bool {
        record
            .rsplit_once(':')
            .is_some_and(|(id, _)| self.epoch.as_deref() == Some(id))
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
        "maxmemory-policy {policy} with maxmemory {maxmemory} can evict lock keys: configure maxmemory-policy noeviction"
    ))
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
                now_us: Some(1_000_000_000 + epoch_age_s * 1_000_000),
            },
            misconfigured: None,
            bootstrapped: false,
            counters_lost: false,
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
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(0, 4, true), now);
        assert_eq!(q.standing(now), Standing::Abstains(now + 10 * S));
    }

    // Checks I11 (a master that may have lost keys waits before it votes).
    #[test]
    fn a_forward_clock_step_never_shortens_a_quarantine_this_client_started() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        // Seen young (its epoch is 1 s old by its clock) ...
        q.connected(&vitals(1, 1, false), now);
        // ... then its clock steps an hour forward: the same epoch now looks old.
        let mut stepped = vitals(3601, 3601, false).epoch;
        stepped.id = "e".into();
        assert!(!q.observed(&stepped, now + S));
        assert_eq!(q.standing(now + S), Standing::Abstains(now + 10 * S));
    }

    #[test]
    fn a_restart_this_client_sees_costs_a_whole_window_whatever_its_clock_says() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        assert!(!q.connected(&vitals(500, 500, false), now));
        assert_eq!(q.standing(now), Standing::Counted);
        // Restarted empty and its clock stepped: uptime and epoch look old, but the run_id
        // is new, so this client knows the data may be gone since it last looked.
        let mut restarted = vitals(5000, 5000, false);
        restarted.run_id = "r2".into();
        let later = now + 100 * S;
        assert!(q.connected(&restarted, later));
        assert_eq!(q.standing(later), Standing::Abstains(later + 10 * S));
    }

    #[test]
    fn a_bootstrapped_process_votes_at_once_until_it_restarts() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        // Young process, young epoch, not durable: without the bootstrap, a whole window.
        let mut young = vitals(1, 1, false);
        q.connected(&young, now);
        assert_eq!(q.standing(now), Standing::Abstains(now + 10 * S));
        let mut q = Quarantine::new(10 * S);
        young.bootstrapped = true;
        assert!(!q.connected(&young, now));
        assert_eq!(q.standing(now), Standing::Counted);
        // A client that connected before the bootstrap reads the record later: its
        // quarantine ends then.
        let mut early = Quarantine::new(10 * S);
        let mut before = young.clone();
        before.bootstrapped = false;
        early.connected(&before, now);
        assert_eq!(early.standing(now + S), Standing::Abstains(now + 10 * S));
        assert!(!early.connected(&young, now + S));
        assert_eq!(early.standing(now + S), Standing::Counted);
        // Restarted empty: a new run_id, and the record no longer names this process.
        let mut restarted = vitals(0, 0, false);
        restarted.run_id = "r2".into();
        let later = now + S;
        assert!(q.connected(&restarted, later));
        assert_eq!(q.standing(later), Standing::Abstains(later + 10 * S));
    }

    #[test]
    fn an_old_master_with_an_old_epoch_counts_at_once() {
        let now = Instant::now();
        let mut q = Quarantine::new(10 * S);
        q.connected(&vitals(500, 500, false), now);
        assert_eq!(q.standing(now), Standing::Counted);
    }

    // Checks I11 (a master that may have lost keys waits before it votes).
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
            now_us: None,
        };
        let later = now + 100 * S;
        assert!(q.observed(&flushed, later));
        assert_eq!(q.standing(later), Standing::Abstains(later + 10 * S));
        assert_eq!(q.standing(later + 10 * S), Standing::Counted);
    }

    // Checks I11 (a master that may have lost keys waits before it votes).
    #[test]
    fn an_epoch_first_met_in_a_reply_abstains_a_whole_window() {
        let now = Instant::now();
        // A lock script's reply carries no server time: the epoch's age is unknown, however
        // old its creation stamp looks, so it may be younger than the window.
        let unaged = Epoch::parse("e:1", None).unwrap();
        let mut q = Quarantine::new(10 * S);
        assert!(q.observed(&unaged, now));
        assert_eq!(q.standing(now), Standing::Abstains(now + 10 * S));
        // The vitals read later know the epoch is old: the quarantine begun stands.
        assert!(!q.connected(&vitals(500, 500, false), now + S));
        assert_eq!(q.standing(now + S), Standing::Abstains(now + 10 * S));
        assert_eq!(q.standing(now + 10 * S), Standing::Counted);
        // Only a known age beyond the window votes at once.
        let mut aged = Quarantine::new(10 * S);
        assert!(aged.observed(&vitals(500, 500, false).epoch, now));
        assert_eq!(aged.standing(now), Standing::Counted);
    }

    #[test]
    fn a_known_epoch_is_told_from_its_record() {
        let mut q = Quarantine::new(10 * S);
        assert!(!q.knows("e:1"), "no epoch known yet");
        q.connected(&vitals(500, 500, false), Instant::now());
        assert!(q.knows("e:1"));
        assert!(q.knows("e:999"), "the id is what counts");
        assert!(!q.knows("f:1"));
        assert!(!q.knows("e"), "not a record");
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
        let e = Epoch::parse("abc:def:1000000", Some(3_500_000)).unwrap();
        assert_eq!(&*e.id, "abc:def");
        assert_eq!(e.age(), Some(Duration::from_micros(2_500_000)));
        assert_eq!(Epoch::parse("nocolon", Some(1)), None);
        assert_eq!(Epoch::parse("x:notanumber", Some(1)), None);
        // A server clock that went backwards gives age zero, never a panic.
        assert_eq!(
            Epoch::parse("x:10", Some(5)).unwrap().age(),
            Some(Duration::ZERO)
        );
        // Read without the server's time (a lock script's reply): its age is unknown, and
        // it may be younger than any window.
        let unaged = Epoch::parse("x:10", None).unwrap();
        assert_eq!(unaged.age(), None);
        assert!(unaged.younger_than(Duration::ZERO));
    }
}
