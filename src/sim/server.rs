//! The master model: one Redis master's process and keyspace.
//!
//! Every request is executed atomically, with the semantics of `SET NX PX` and of the Lua
//! scripts in `src/scripts/` (each op below names the script it stands for). Expiry is
//! measured on the server's own wall clock, as Redis does: virtual time plus a per-server
//! offset that a clock-jump fault can move.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cluster::Record;
#[cfg(redquorum_mutants)]
use crate::mutants::{Mutant, Planted};
use crate::op::{EpochReport, FenceOutcome, FenceRead, Inspected, Op, Reply, RwMode, StampOutcome};
use crate::quarantine::{Epoch, Vitals};
use crate::scripts;

/// The simulated wall clock at the origin of every schedule, in microseconds.
const WALL_ORIGIN_US: u64 = 1_700_000_000_000_000;

/// How long every master has been up, with its data epoch, when a schedule starts: a
/// long-running deployment, so that no master starts in quarantine.
const UP_BEFORE_ORIGIN: Duration = Duration::from_secs(3600);

/// The most state changes a request waits through on a paused master before it gives up.
/// The nemesis makes far fewer; the bound only keeps the wait loop finite.
const MAX_WAKEUPS: usize = 10_000;

/// Virtual time, shared by every master of a schedule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub(super) fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    pub(super) fn origin(&self) -> Instant {
        self.origin
    }

    /// The time since the origin.
    pub(super) fn at(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.origin)
    }

    /// The wall clock at `now` of a server whose clock is off by `offset_us`.
    fn wall_us(&self, now: Instant, offset_us: i64) -> u64 {
        let since = u64::try_from(self.at(now).as_micros()).unwrap_or(u64::MAX);
        WALL_ORIGIN_US
            .saturating_add(since)
            .saturating_add_signed(offset_us)
    }
}

/// Whether a master's process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Up,
    /// Stopped (`SIGSTOP`): connections stay open, requests wait.
    Paused,
    /// Crashed: connections are refused or reset.
    Down,
}

/// What a connection asks of a master.
#[derive(Debug)]
pub(super) enum Request {
    /// A new connection; with `vitals`, it reads what restart quarantine needs (`INFO` and
    /// `epoch.lua`), as `RedisMaster` does on every (re)connect with quarantine on. Every
    /// connection reads the `run_id` and the cluster record.
    Connect { vitals: bool },
    /// One op of the lock protocol, with the caller's cluster fingerprint (empty while it
    /// knows no record), which the preamble of every lock script compares with the
    /// record's, and the planted script bugs of the caller's client.
    Op(Arc<Op>, Arc<str>, ScriptBugs),
    /// `HGETALL` of the cluster record, after a script found another fingerprint.
    ReadRecord,
}

/// A master's answer to a [`Request`].
#[derive(Debug)]
pub(super) enum Answer {
    Connected {
        vitals: Option<Vitals>,
        run_id: String,
        record: Option<Box<Record>>,
    },
    Reply(Reply),
    /// A lock script's preamble found a cluster fingerprint other than the caller's (its
    /// code -2).
    RecordDiffers,
    /// `semaphore.lua` found permits live under another limit (its code -4).
    LimitDiffers {
        stored: usize,
        ours: usize,
    },
    /// The cluster record, if any.
    Record(Option<Box<Record>>),
}

/// Why a request got no answer: the process it was sent to is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reset;

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) value: Arc<str>,
    pub(super) expires_us: u64,
}

/// A master's dataset.
#[derive(Debug, Clone, Default)]
pub(super) struct Data {
    pub(super) locks: BTreeMap<Arc<str>, Entry>,
    /// Fence counters, by their key (`redquorum:fence:<key>`); never expire.
    pub(super) fences: BTreeMap<String, u64>,
    /// The data epoch record, `<id>:<created us>`.
    pub(super) epoch: Option<String>,
    /// The cluster record (`redquorum:cluster`, no TTL), as `stamp.lua` wrote it.
    pub(super) record: Option<Record>,
    /// Semaphores' limit records (no TTL), by key.
    pub(super) limits: BTreeMap<String, usize>,
    /// Faults planted in the model, kept over data losses.
    plants: Plants,
    /// Hand-off queues (`redquorum:queue:<key>`, sorted sets), by lock key.
    pub(super) queues: BTreeMap<Arc<str>, Queue>,
    /// Waiters' liveness keys (`redquorum:waiter:<key>:<waiter>`), by lock key and waiter
    /// id: the value `"<waiter_ttl ms> <channel>"` and its expiry.
    pub(super) waiters: BTreeMap<(Arc<str>, Arc<str>), Entry>,
    /// Ticket counters of fair locks (`redquorum:ticket:<key>`), by lock key; no TTL.
    pub(super) tickets: BTreeMap<Arc<str>, u64>,
    /// What the checkers read of the queues (not data: a data loss keeps it).
    journal: Journal,
}

/// Faults planted in the model (not in the product), each to show that a checker catches
/// what it breaks.
#[derive(Debug, Clone, Copy, Default)]
struct Plants {
    /// `rw_acquire.lua` grants a reader whatever the writer key holds: the read-write
    /// checker must catch a reader overlapping a writer.
    reader_ignores_writer: bool,
    /// `rw_acquire.lua` refuses every reader, as if a writer held the lock: a writer then
    /// never waits behind readers, and the starvation check must say that it proved
    /// nothing.
    readers_refused: bool,
    /// `enqueue.lua` gives a waiter's liveness key a quarter of the waiter TTL, so that a
    /// registration lapses before every refresh with no fault anywhere: the FIFO checker
    /// must not excuse what that lets pass.
    waiters_lapse: bool,
}

/// A sorted set: members ordered by score, equal scores by member bytes, as Redis orders
/// them; with the key's expiry, if any.
#[derive(Debug, Clone, Default)]
pub(super) struct Queue {
    ordered: std::collections::BTreeSet<(u64, Arc<str>)>,
    pub(super) scores: HashMap<Arc<str>, u64>,
    pub(super) expires_us: Option<u64>,
}

impl Queue {
    /// `ZADD queue score member` (a member's score is replaced).
    fn add(&mut self, member: &Arc<str>, score: u64) {
        if let Some(old) = self.scores.insert(Arc::clone(member), score) {
            self.ordered.remove(&(old, Arc::clone(member)));
        }
        self.ordered.insert((score, Arc::clone(member)));
    }

    /// `ZREM queue member`; whether it was there.
    fn remove(&mut self, member: &str) -> bool {
        match self.scores.remove(member) {
            Some(score) => self.ordered.remove(&(score, Arc::from(member))),
            None => false,
        }
    }

    /// `ZRANGE queue 0 0`.
    fn first(&self) -> Option<Arc<str>> {
        self.ordered.first().map(|(_, m)| Arc::clone(m))
    }
}

/// What became of a waiter's registration on one master, as the checkers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Registration {
    /// Registered, its liveness key live.
    Live,
    /// Its liveness key expired (pruned from the queue, or not yet).
    Expired,
    /// It left the queue when an acquire of its own was granted here.
    Served,
    /// Its call sent `dequeue.lua` here.
    Dequeued,
    /// The master lost its data since the registration.
    Lost,
}

/// A waiter as one master knew it when it granted a queued acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Known {
    pub(super) waiter: Arc<str>,
    pub(super) score: u64,
    pub(super) registration: Registration,
    /// When its registration was last written here (its liveness key set), on the
    /// master's own clock, and the waiter TTL it asked for: the key lives until their sum
    /// unless the master loses it.
    pub(super) written_us: u64,
    pub(super) waiter_ttl_us: u64,
}

/// A grant of `AcquireQueued` on one master, with every waiter the master had registered
/// for the key by then (of this incarnation of its data or not) and what became of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct QueuedGrant {
    pub(super) master: usize,
    pub(super) key: Arc<str>,
    pub(super) value: Arc<str>,
    /// The waiter id the acquire carried (empty: a first attempt).
    pub(super) waiter: Arc<str>,
    pub(super) fair: bool,
    pub(super) waiters: Vec<Known>,
    /// When the master granted it (from the schedule's origin), and on its own clock.
    pub(super) at: Duration,
    pub(super) at_us: u64,
}

/// What one master's journal keeps of a waiter's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Journaled {
    score: u64,
    registration: Registration,
    /// When its liveness key was last set, on the master's clock, and for how long the
    /// waiter asked (the planted lapse shortens the key, not this).
    written_us: u64,
    waiter_ttl_us: u64,
}

/// The queues' history on one master, for the FIFO checker; never lost with the data.
#[derive(Debug, Clone, Default)]
struct Journal {
    /// By lock key and waiter id: what became of its registration.
    waiters: BTreeMap<(Arc<str>, Arc<str>), Journaled>,
    grants: Vec<QueuedGrant>,
    /// How many times a dead member was pruned from a queue.
    pruned: u64,
    /// Each dead member pruned from a queue.
    prunes: Vec<Pruned>,
}

/// A dead member pruned from a queue on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pruned {
    pub(super) waiter: Arc<str>,
    /// When (from the schedule's origin; set once the op that pruned it ran), and on the
    /// master's clock.
    pub(super) at: Duration,
    pub(super) at_us: u64,
    /// When its liveness key was last set here, on the master's clock, and the waiter TTL
    /// it asked for.
    pub(super) written_us: u64,
    pub(super) waiter_ttl_us: u64,
}

impl Journal {
    fn mark(&mut self, key: &Arc<str>, waiter: &Arc<str>, registration: Registration) {
        if let Some(entry) = self.waiters.get_mut(&(Arc::clone(key), Arc::clone(waiter))) {
            entry.registration = registration;
        }
    }
}

impl Data {
    /// The value of a live lock key; an expired one is deleted (lazy expiry). A key counts
    /// as expired from its expiry instant on, a little earlier than Redis (which keeps it
    /// for that millisecond): the model never lets a key live longer than a real master.
    fn live(&mut self, key: &str, now_us: u64) -> Option<Arc<str>> {
        let entry = self.locks.get(key)?;
        if entry.expires_us <= now_us {
            self.locks.remove(key);
            return None;
        }
        Some(Arc::clone(&entry.value))
    }

    fn set(&mut self, key: &Arc<str>, value: &Arc<str>, ttl: Duration, now_us: u64) {
        let expires_us = now_us.saturating_add(millis(ttl).saturating_mul(1000));
        self.locks.insert(
            Arc::clone(key),
            Entry {
                value: Arc::clone(value),
                expires_us,
            },
        );
    }

    /// A read-write lock's key keeps the readers' mark at least `ttl` more (`rw_acquire.lua`
    /// and `rw_extend_read.lua` on a reader's grant or extension): set where the key is
    /// missing or the mark expires sooner; a writer's value is left alone.
    fn mark_readers(&mut self, key: &Arc<str>, ttl: Duration, now_us: u64) {
        let mark = match self.live(key, now_us) {
            None => true,
            Some(v) => &*v == scripts::READERS_MARK,
        };
        if mark && self.pttl(key, now_us).is_none_or(|p| p < ttl) {
            self.set(key, &Arc::from(scripts::READERS_MARK), ttl, now_us);
        }
    }

    /// `SET key value NX PX ttl`.
    fn set_nx(&mut self, key: &Arc<str>, value: &Arc<str>, ttl: Duration, now_us: u64) -> bool {
        if self.live(key, now_us).is_some() {
            return false;
        }
        self.set(key, value, ttl, now_us);
        true
    }

    /// `PTTL key` of a live key, in whole milliseconds.
    fn pttl(&mut self, key: &str, now_us: u64) -> Option<Duration> {
        self.live(key, now_us)?;
        let entry = self.locks.get(key)?;
        Some(Duration::from_millis(
            entry.expires_us.saturating_sub(now_us) / 1000,
        ))
    }

    /// The epoch record, created with `id` when missing (`epoch.lua`: read at connect, and
    /// the preamble of every lock script).
    fn epoch_or_create(&mut self, id: impl FnOnce() -> String, now_us: u64) -> String {
        self.epoch
            .get_or_insert_with(|| format!("{}:{now_us}", id()))
            .clone()
    }

    /// Loses the dataset (a restart without data, `FLUSHALL`), keeping the journal.
    fn lose(&mut self) {
        let mut journal = std::mem::take(&mut self.journal);
        for entry in journal.waiters.values_mut() {
            entry.registration = Registration::Lost;
        }
        *self = Data {
            journal,
            plants: self.plants,
            ..Data::default()
        };
    }

    /// The queue of `key`, if live (lazy expiry, as for lock keys).
    fn queue(&mut self, key: &str, now_us: u64) -> Option<&mut Queue> {
        let expired = self
            .queues
            .get(key)
            .is_some_and(|q| q.expires_us.is_some_and(|e| e <= now_us) || q.ordered.is_empty());
        if expired {
            self.queues.remove(key);
        }
        self.queues.get_mut(key)
    }

    /// The liveness key of `waiter`, if live: its value.
    fn waiter(&mut self, key: &Arc<str>, waiter: &Arc<str>, now_us: u64) -> Option<Arc<str>> {
        let id = (Arc::clone(key), Arc::clone(waiter));
        let entry = self.waiters.get(&id)?;
        if entry.expires_us <= now_us {
            self.waiters.remove(&id);
            return None;
        }
        Some(Arc::clone(&entry.value))
    }

    /// `ZREM queue waiter` and `DEL waiter(waiter)`, noted in the journal as `why`.
    fn leave(&mut self, key: &Arc<str>, waiter: &Arc<str>, why: Registration, now_us: u64) {
        if let Some(queue) = self.queue(key, now_us) {
            queue.remove(waiter);
        }
        self.waiters.remove(&(Arc::clone(key), Arc::clone(waiter)));
        self.queue(key, now_us);
        self.journal.mark(key, waiter, why);
    }

    /// `queue.lua`'s `live_head(Q)`: the first member whose liveness key lives, pruning
    /// the dead ones met before it, at most [`PRUNE`] of them (then the head is unknown).
    /// With `ignore_liveness` (`Mutant::HandoffIgnoresLiveness`), the first member, dead or
    /// alive.
    fn live_head(&mut self, key: &Arc<str>, now_us: u64, ignore_liveness: bool) -> Head {
        for _ in 0..PRUNE {
            let Some(first) = self.queue(key, now_us).and_then(|q| q.first()) else {
                return Head::None;
            };
            if ignore_liveness || self.waiter(key, &first, now_us).is_some() {
                return Head::Live(first);
            }
            let (written_us, waiter_ttl_us) = self
                .journal
                .waiters
                .get(&(Arc::clone(key), Arc::clone(&first)))
                .map_or((0, 0), |j| (j.written_us, j.waiter_ttl_us));
            self.leave(key, &first, Registration::Expired, now_us);
            self.journal.pruned += 1;
            self.journal.prunes.push(Pruned {
                waiter: first,
                at: Duration::ZERO,
                at_us: now_us,
                written_us,
                waiter_ttl_us,
            });
        }
        // A queue left empty by exactly `PRUNE` removals has no live member (the script
        // checks `ZCARD` once its budget is spent).
        match self.queue(key, now_us).and_then(|q| q.first()) {
            None => Head::None,
            Some(_) => Head::Unknown,
        }
    }

    /// `queue.lua`'s `hand_on` once the key is free: to the live head, if any, with the
    /// `PX` its liveness key names (the release notice otherwise; no notice has a
    /// subscriber here). Returns the waiter handed to.
    fn hand_off(&mut self, key: &Arc<str>, now_us: u64, ignore_liveness: bool) -> Option<Arc<str>> {
        let Head::Live(head) = self.live_head(key, now_us, ignore_liveness) else {
            return None;
        };
        // `"<ttl ms> <channel>"`; a dead head (only the planted bug hands to one) has no
        // liveness key, and the key stays free.
        let ttl_ms = self
            .waiter(key, &head, now_us)
            .and_then(|v| v.split_once(' ').and_then(|(ms, _)| ms.parse::<u64>().ok()))?;
        self.set(key, &head, Duration::from_millis(ttl_ms), now_us);
        Some(head)
    }

    /// `release.lua` on a single key: compare-and-delete, then the hand-off (answered with
    /// the ticket counter when the key was handed on).
    fn release_handing_off(
        &mut self,
        key: &Arc<str>,
        value: &str,
        plain: bool,
        now_us: u64,
        ignore_liveness: bool,
    ) -> Reply {
        match self.live(key, now_us) {
            Some(current) if *current == *value => {
                self.locks.remove(&**key);
                // A waiter's id released (an operator's force-unlock of a handed key)
                // leaves the queue first; a plain lock's lease value is never a member,
                // and its release skips the step.
                if !plain {
                    self.leave(key, &current, Registration::Dequeued, now_us);
                }
                match self.hand_off(key, now_us, ignore_liveness) {
                    Some(_) => Reply::HandedOn {
                        ticket: self.tickets.get(&**key).copied().unwrap_or(0),
                    },
                    None => Reply::Granted,
                }
            }
            Some(_) => Reply::HeldByOther,
            None => Reply::Missing,
        }
    }

    /// The body of `AcquireQueued` (after the preamble): `value` is set where the key is
    /// free or handed to `waiter` (and, when `fair`, no other live waiter heads the
    /// queue). Returns whether it was granted and, when refused, the holder's `PTTL` in ms
    /// (-2: free or handed to `waiter`, but queued behind another waiter, live or beyond
    /// the prune budget). With `keep_ttl`
    /// (`Mutant::ConfirmKeepsHandoffExpiry`), a key handed to `waiter` keeps its expiry.
    fn acquire_queued(&mut self, q: &QueuedAcquire<'_>, now_us: u64) -> (bool, Option<i64>) {
        let key = q.key;
        let current = self.live(key, now_us);
        let handed = !q.waiter.is_empty() && current.as_deref() == Some(&**q.waiter);
        if current.is_some() && !handed {
            return (false, Some(self.pttl_ms(key, now_us)));
        }
        if q.fair {
            // A head the prune budget did not reach may be an earlier live waiter.
            let first = match self.live_head(key, now_us, q.ignore_liveness) {
                Head::Live(head) => head == *q.waiter,
                Head::None => true,
                Head::Unknown => false,
            };
            // Queued behind another waiter: -2, even where the key is handed to this one.
            if !first {
                return (false, Some(-2));
            }
        }
        let snapshot = self.known(key, now_us);
        if handed && q.keep_ttl {
            let expires_us = self.locks.get(&**key).map_or(now_us, |e| e.expires_us);
            self.locks.insert(
                Arc::clone(key),
                Entry {
                    value: Arc::clone(q.value),
                    expires_us,
                },
            );
        } else {
            self.set(key, q.value, q.ttl, now_us);
        }
        if !q.waiter.is_empty() {
            self.leave(key, q.waiter, Registration::Served, now_us);
        }
        self.journal.grants.push(QueuedGrant {
            master: usize::MAX,
            key: Arc::clone(key),
            value: Arc::clone(q.value),
            waiter: Arc::clone(q.waiter),
            fair: q.fair,
            waiters: snapshot,
            at: Duration::ZERO,
            at_us: now_us,
        });
        (true, None)
    }

    /// Every waiter ever registered for `key` here, with what became of it.
    fn known(&mut self, key: &Arc<str>, now_us: u64) -> Vec<Known> {
        let ids: Vec<(Arc<str>, Journaled)> = self
            .journal
            .waiters
            .range((Arc::clone(key), Arc::from(""))..)
            .take_while(|((k, _), _)| k == key)
            .map(|((_, w), entry)| (Arc::clone(w), *entry))
            .collect();
        ids.into_iter()
            .map(|(waiter, entry)| {
                let registration = match entry.registration {
                    Registration::Live if self.waiter(key, &waiter, now_us).is_none() => {
                        Registration::Expired
                    }
                    other => other,
                };
                Known {
                    waiter,
                    score: entry.score,
                    registration,
                    written_us: entry.written_us,
                    waiter_ttl_us: entry.waiter_ttl_us,
                }
            })
            .collect()
    }

    /// `enqueue.lua` (after the preamble): registers or refreshes `waiter`; with `strict`,
    /// only above the ticket counter (else the conflicting counter is answered). Returns
    /// the outcome: written or the conflict, handed, and the key's `PTTL` in ms (-2 free).
    fn enqueue(&mut self, e: &Enqueued<'_>, now_us: u64) -> EnqueueOutcome {
        let key = e.key;
        let (mut score, mut strict) = (e.score, e.strict);
        if e.fair && e.by_arrival {
            // `Mutant::FairByArrival`: a member keeps its score; a new one is scored by
            // its arrival here (`INCR` of the ticket counter), not by its ticket.
            let known = self
                .queue(key, now_us)
                .and_then(|q| q.scores.get(e.waiter).copied());
            score = match known {
                Some(score) => score,
                None => {
                    let c = self.tickets.entry(Arc::clone(key)).or_insert(0);
                    *c += 1;
                    *c
                }
            };
            strict = false;
        }
        let counter = self.tickets.get(&**key).copied().unwrap_or(0);
        // A round resent with the same ticket finds its own earlier write: written.
        let mine = self
            .queue(key, now_us)
            .and_then(|q| q.scores.get(e.waiter).copied())
            == Some(score);
        let written = if strict && mine {
            Some(counter)
        } else if strict {
            if counter >= score {
                return EnqueueOutcome {
                    conflict: Some(counter),
                    counter: Some(counter),
                    handed: false,
                };
            }
            self.tickets.insert(Arc::clone(key), score);
            Some(score)
        } else {
            // Fair or not, a score is a ticket: the counter is raised to it, never lowered.
            let c = counter.max(score);
            self.tickets.insert(Arc::clone(key), c);
            Some(c)
        };
        let ttl_ms = millis(e.waiter_ttl);
        let queue = self.queue(key, now_us).is_none().then(Queue::default);
        if let Some(queue) = queue {
            self.queues.insert(Arc::clone(key), queue);
        }
        let expires_us = now_us.saturating_add(ttl_ms.saturating_mul(2000));
        let mut refresh = false;
        if let Some(queue) = self.queues.get_mut(&**key) {
            refresh = queue.scores.contains_key(e.waiter);
            queue.add(e.waiter, score);
            // `PEXPIRE` to at least twice the waiter TTL: raised, never lowered (a key
            // without a TTL gets one).
            queue.expires_us = Some(queue.expires_us.map_or(expires_us, |x| x.max(expires_us)));
        }
        self.waiters.insert(
            (Arc::clone(key), Arc::clone(e.waiter)),
            Entry {
                value: format!("{ttl_ms} {}", e.channel).into(),
                expires_us: now_us.saturating_add(match self.plants.waiters_lapse {
                    false => ttl_ms.saturating_mul(1000),
                    true => ttl_ms.saturating_mul(250),
                }),
            },
        );
        self.journal.waiters.insert(
            (Arc::clone(key), Arc::clone(e.waiter)),
            Journaled {
                score,
                registration: Registration::Live,
                written_us: now_us,
                waiter_ttl_us: ttl_ms.saturating_mul(1000),
            },
        );
        let current = self.live(key, now_us);
        // A key free or handed to a queued waiter (this one or another: `ZSCORE queue
        // current`) belongs to the live head: to this waiter when it heads; otherwise a key
        // handed out of turn (to this waiter or another behind the head) goes on to the
        // head, and a free key is left to it. A lease value is never a member. Every
        // refresh looks for the head, pruning the dead before it (within the budget); a
        // first registration only where the key may move. A waiter pruned so keeps the
        // key handed to it.
        let other = current.as_ref().filter(|c| ***c != **e.waiter).cloned();
        let member = |d: &mut Self, c: &Arc<str>| {
            d.queue(key, now_us)
                .is_some_and(|q| q.scores.contains_key(c))
        };
        let takeable = other.as_ref().is_none_or(|c| member(self, c));
        let head = match refresh || takeable {
            true => match self.live_head(key, now_us, e.ignore_liveness) {
                Head::Live(head) => Some(head),
                Head::None | Head::Unknown => None,
            },
            false => None,
        };
        let head = head.filter(|_| takeable && other.as_ref().is_none_or(|c| member(self, c)));
        let handed = match head {
            Some(head) if head == *e.waiter => {
                if current.as_deref() != Some(&**e.waiter) {
                    // The self-hand: the holder expired or crashed, or a release handed
                    // the key to a waiter behind this one before this one registered.
                    self.set(key, e.waiter, e.waiter_ttl, now_us);
                }
                true
            }
            Some(head) => {
                if current.as_ref().is_some_and(|c| *c != head) {
                    // Handed out of turn: on to the head, with the `PX` its liveness key
                    // names (none for a dead head, which only the planted bug meets).
                    let ttl_ms = self
                        .waiter(key, &head, now_us)
                        .and_then(|v| v.split_once(' ').and_then(|(ms, _)| ms.parse::<u64>().ok()));
                    if let Some(ttl_ms) = ttl_ms {
                        self.set(key, &head, Duration::from_millis(ttl_ms), now_us);
                    }
                }
                false
            }
            None => false,
        };
        EnqueueOutcome {
            conflict: None,
            counter: written,
            handed,
        }
    }

    /// `dequeue.lua`: `waiter` leaves the queue; a key handed to it is handed on.
    /// Returns whether a key handed to `waiter` was passed on.
    fn dequeue(
        &mut self,
        key: &Arc<str>,
        waiter: &Arc<str>,
        now_us: u64,
        ignore_liveness: bool,
    ) -> bool {
        self.leave(key, waiter, Registration::Dequeued, now_us);
        if self.live(key, now_us).as_deref() != Some(&**waiter) {
            return false;
        }
        self.locks.remove(&**key);
        self.hand_off(key, now_us, ignore_liveness);
        true
    }

    /// `PTTL key` in ms: -2 when missing.
    fn pttl_ms(&mut self, key: &str, now_us: u64) -> i64 {
        self.pttl(key, now_us)
            .map_or(-2, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// The most dead members one run of `live_head` prunes (`queue.lua`'s `PRUNE`).
const PRUNE: usize = 256;

/// What `live_head` found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Head {
    /// The first member whose liveness key lives.
    Live(Arc<str>),
    /// No live member: the queue is empty once the dead are pruned.
    None,
    /// The prune budget ran out before a live member was found.
    Unknown,
}

impl Head {
    /// The live head's id, if one was found.
    fn as_deref(&self) -> Option<&str> {
        match self {
            Head::Live(head) => Some(head),
            Head::None | Head::Unknown => None,
        }
    }
}

/// The arguments of `AcquireQueued` that its body reads.
#[derive(Debug)]
struct QueuedAcquire<'a> {
    key: &'a Arc<str>,
    value: &'a Arc<str>,
    ttl: Duration,
    /// Empty on a first attempt.
    waiter: &'a Arc<str>,
    fair: bool,
    ignore_liveness: bool,
    keep_ttl: bool,
}

/// The arguments of `Enqueue`.
#[derive(Debug)]
struct Enqueued<'a> {
    key: &'a Arc<str>,
    waiter: &'a Arc<str>,
    score: u64,
    strict: bool,
    waiter_ttl: Duration,
    channel: &'a str,
    fair: bool,
    ignore_liveness: bool,
    /// `Mutant::FairByArrival`.
    by_arrival: bool,
}

/// What `enqueue.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EnqueueOutcome {
    /// A strict write refused: the counter that conflicted.
    conflict: Option<u64>,
    /// The ticket counter after the write (fair), or the one in conflict (strict).
    counter: Option<u64>,
    handed: bool,
}

/// Whole milliseconds for `PX`, at least 1, as the scripts' codecs send them.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[derive(Debug)]
struct State {
    status: Status,
    /// Bumped on every restart; a connection belongs to one incarnation.
    incarnation: u64,
    /// When the process started, on its wall clock.
    started_us: u64,
    clock_offset_us: i64,
    data: Data,
    /// For fresh epoch ids.
    epochs_started: u64,
    /// How many times the master lost its data (flushes, restarts without it).
    data_losses: u64,
    /// Requests held by a stopped process, in arrival order.
    waiting: Vec<oneshot::Sender<()>>,
}

/// A log of every op the masters executed, for replays (`REDQUORUM_SIM_TRACE`) and for
/// comparing two runs of one seed.
///
/// Lock values and waiter ids are 128 random bits (drawn by the library, from the
/// schedule's seed here), so the log names each by the order in which it first appeared
/// (`v0`, `v1`, …): short to read, and the same in two runs of one schedule.
#[derive(Debug)]
pub(super) struct Trace {
    clock: Clock,
    lines: Mutex<Vec<(Duration, String)>>,
    names: Mutex<HashMap<Arc<str>, usize>>,
}

impl Trace {
    pub(super) fn new(clock: Clock) -> Self {
        Self {
            clock,
            lines: Mutex::new(Vec::new()),
            names: Mutex::new(HashMap::new()),
        }
    }

    /// The name of a lock value in this log.
    pub(super) fn name(&self, value: &str) -> String {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let next = names.len();
        let n = *names.entry(value.into()).or_insert(next);
        format!("v{n}")
    }

    fn push(&self, line: String) {
        let at = self.clock.at(Instant::now());
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((at, line));
    }

    /// The lines logged so far.
    pub(super) fn take(&self) -> Vec<(Duration, String)> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// One simulated master, shared by every client's connection to it.
#[derive(Debug)]
pub(super) struct SimServer {
    index: usize,
    /// `appendonly yes` + `appendfsync always`: a restart keeps the data.
    durable: bool,
    clock: Clock,
    state: Mutex<State>,
    trace: Option<Arc<Trace>>,
}

impl SimServer {
    /// A master that has been up, with its data epoch, for an hour before the origin.
    pub(super) fn new(index: usize, durable: bool, clock: Clock) -> Self {
        let now_us = clock.wall_us(clock.origin(), 0);
        let up_us = u64::try_from(UP_BEFORE_ORIGIN.as_micros()).unwrap_or(0);
        let started_us = now_us.saturating_sub(up_us);
        let data = Data {
            epoch: Some(format!("m{index}-boot:{started_us}")),
            ..Data::default()
        };
        Self {
            index,
            durable,
            clock,
            state: Mutex::new(State {
                status: Status::Up,
                incarnation: 1,
                started_us,
                clock_offset_us: 0,
                data,
                epochs_started: 0,
                data_losses: 0,
                waiting: Vec::new(),
            }),
            trace: None,
        }
    }

    /// Logs every op this master executes to `trace`.
    pub(super) fn traced(mut self, trace: Arc<Trace>) -> Self {
        self.trace = Some(trace);
        self
    }

    pub(super) fn index(&self) -> usize {
        self.index
    }

    pub(super) fn durable(&self) -> bool {
        self.durable
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is made whole under the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the requests held while the process was stopped, in their arrival order (a
    /// `watch` or `Notify` would wake them in an order the seed does not fix).
    fn wake(state: &mut State) {
        for waiter in state.waiting.drain(..) {
            let _ = waiter.send(());
        }
    }

    /// The process's status and incarnation.
    pub(super) fn status(&self) -> (Status, u64) {
        let state = self.lock();
        (state.status, state.incarnation)
    }

    /// How many times the master has lost its data so far (flushes, restarts without it).
    pub(super) fn data_losses(&self) -> u64 {
        self.lock().data_losses
    }

    /// Kills the process (`SIGKILL`). Returns the live lock keys it held, as
    /// `(key, value)`, for the record. Does nothing when it is down already.
    pub(super) fn crash(&self) -> Vec<(Arc<str>, Arc<str>)> {
        let mut state = self.lock();
        if state.status == Status::Down {
            return Vec::new();
        }
        state.status = Status::Down;
        Self::wake(&mut state);
        live_locks(&mut state, &self.clock)
    }

    /// Starts a crashed process again: with its data when the master is durable, empty
    /// otherwise. Returns whether the data was kept; `None` when it was not down.
    pub(super) fn restart(&self) -> Option<bool> {
        {
            let mut state = self.lock();
            if state.status != Status::Down {
                return None;
            }
            state.status = Status::Up;
            state.incarnation += 1;
            state.started_us = self.clock.wall_us(Instant::now(), state.clock_offset_us);
            if !self.durable {
                state.data.lose();
                state.data_losses += 1;
            }
        }
        Some(self.durable)
    }

    /// Stops (`true`, `SIGSTOP`) or continues (`false`, `SIGCONT`) a running process.
    /// Returns whether anything changed.
    pub(super) fn pause(&self, stop: bool) -> bool {
        let mut state = self.lock();
        state.status = match (state.status, stop) {
            (Status::Up, true) => Status::Paused,
            (Status::Paused, false) => Status::Up,
            _ => return false,
        };
        Self::wake(&mut state);
        true
    }

    /// `FLUSHALL` on a running process: the data is gone, the process stays. Returns the
    /// live lock keys lost; `None` when the process is not running.
    pub(super) fn flush(&self) -> Option<Vec<(Arc<str>, Arc<str>)>> {
        let mut state = self.lock();
        if state.status != Status::Up {
            return None;
        }
        let held = live_locks(&mut state, &self.clock);
        state.data.lose();
        state.data_losses += 1;
        Some(held)
    }

    /// An operator's force-unlock of the lock key `key` on this master: deletes the key
    /// whatever value it holds and raises its fence counter by one (`INCR`), so that the
    /// next token issued here is above every one issued before. Returns whether it ran
    /// (only on a running process: the operator's call fails on a stopped or crashed one)
    /// and the live value it deleted, if any. Only mutex scenarios call it: the readers'
    /// mark of a read-write lock, which `force_unlock.lua` leaves alone, is not modelled.
    pub(super) fn force_unlock(&self, key: &str) -> Option<Option<Arc<str>>> {
        let mut state = self.lock();
        if state.status != Status::Up {
            return None;
        }
        let now_us = self.clock.wall_us(Instant::now(), state.clock_offset_us);
        let held = state.data.live(key, now_us);
        state.data.locks.remove(key);
        *state
            .data
            .fences
            .entry(scripts::fence_key(key))
            .or_insert(0) += 1;
        if let Some(trace) = &self.trace {
            let held = held
                .as_deref()
                .map_or("nothing".to_owned(), |v| trace.name(v));
            trace.push(format!("m{}: force-unlock {key} (held {held})", self.index));
        }
        Some(held)
    }

    /// The grants of queued acquires this master made so far, and the dead waiters it
    /// pruned from its queues (each waiter id, and when).
    pub(super) fn journal(&self) -> (Vec<QueuedGrant>, Vec<Pruned>) {
        let state = self.lock();
        let grants = state
            .data
            .journal
            .grants
            .iter()
            .map(|g| QueuedGrant {
                master: self.index,
                ..g.clone()
            })
            .collect();
        (grants, state.data.journal.prunes.clone())
    }

    /// Plants the model's fault [`Plants::reader_ignores_writer`].
    pub(super) fn plant_reader_ignores_writer(&self) {
        self.lock().data.plants.reader_ignores_writer = true;
    }

    /// Plants the model's fault [`Plants::readers_refused`].
    pub(super) fn plant_readers_refused(&self) {
        self.lock().data.plants.readers_refused = true;
    }

    /// Plants the model's fault [`Plants::waiters_lapse`].
    pub(super) fn plant_waiters_lapse(&self) {
        self.lock().data.plants.waiters_lapse = true;
    }

    /// Moves the server's wall clock by `delta_us` (forward when positive): lock keys then
    /// expire that much earlier or later, as on a real master.
    pub(super) fn jump_clock(&self, delta_us: i64) {
        let mut state = self.lock();
        state.clock_offset_us = state.clock_offset_us.saturating_add(delta_us);
    }

    /// The value of the lock key `key`, if live (for scripted scenarios).
    pub(super) fn holder(&self, key: &str) -> Option<Arc<str>> {
        let mut state = self.lock();
        let now_us = self.clock.wall_us(Instant::now(), state.clock_offset_us);
        state.data.live(key, now_us)
    }

    /// The value of the lock key `key` and the instant it expires, if live (for scripted
    /// scenarios). The instant is on the shared virtual clock: the server's wall-clock
    /// expiry, less its clock offset.
    pub(super) fn entry(&self, key: &str) -> Option<(Arc<str>, Instant)> {
        let mut state = self.lock();
        let offset = state.clock_offset_us;
        let now_us = self.clock.wall_us(Instant::now(), offset);
        let value = state.data.live(key, now_us)?;
        let expires_us = state.data.locks.get(key)?.expires_us;
        let since_origin = expires_us
            .saturating_add_signed(offset.saturating_neg())
            .saturating_sub(WALL_ORIGIN_US);
        Some((
            value,
            self.clock.origin() + Duration::from_micros(since_origin),
        ))
    }

    /// The fence counter of the lock key `key` (for scripted scenarios).
    pub(super) fn fence_counter(&self, key: &str) -> Option<u64> {
        self.lock()
            .data
            .fences
            .get(&scripts::fence_key(key))
            .copied()
    }

    /// Serves one request that arrived now on a connection to `incarnation` (`None`: a new
    /// connection). A paused master holds it until it continues; a crashed or restarted
    /// one resets it. Returns the incarnation that answered.
    pub(super) async fn serve(
        &self,
        incarnation: Option<u64>,
        request: &Request,
    ) -> Result<(u64, Answer), Reset> {
        for _ in 0..MAX_WAKEUPS {
            let woken = {
                let mut state = self.lock();
                match state.status {
                    Status::Down => return Err(Reset),
                    Status::Paused => {
                        let (tx, rx) = oneshot::channel();
                        state.waiting.push(tx);
                        rx
                    }
                    Status::Up => {
                        if incarnation.is_some_and(|i| i != state.incarnation) {
                            return Err(Reset);
                        }
                        let granted = state.data.journal.grants.len();
                        let pruned = state.data.journal.prunes.len();
                        let answer = self.execute(&mut state, request);
                        let at = self.clock.at(Instant::now());
                        for g in state.data.journal.grants.iter_mut().skip(granted) {
                            g.at = at;
                        }
                        for p in state.data.journal.prunes.iter_mut().skip(pruned) {
                            p.at = at;
                        }
                        if let Some(trace) = &self.trace {
                            trace.push(format!(
                                "m{}: {} -> {}",
                                self.index,
                                describe(request, trace),
                                outcome(&answer)
                            ));
                        }
                        return Ok((state.incarnation, answer));
                    }
                }
            };
            if woken.await.is_err() {
                return Err(Reset);
            }
        }
        Err(Reset)
    }

    fn execute(&self, state: &mut State, request: &Request) -> Answer {
        let now_us = self.clock.wall_us(Instant::now(), state.clock_offset_us);
        let index = self.index;
        let incarnation = state.incarnation;
        let run_id = format!("m{index}-run{incarnation}");
        let started = &mut state.epochs_started;
        let mut fresh_id = || {
            *started += 1;
            format!("m{index}-i{incarnation}-e{started}")
        };
        let data = &mut state.data;
        match request {
            Request::Connect { vitals } => {
                let vitals = vitals.then(|| {
                    let record = data.epoch_or_create(&mut fresh_id, now_us);
                    let uptime_s = now_us.saturating_sub(state.started_us) / 1_000_000;
                    // The record is always ours and well formed; a parse failure would show
                    // as a master that never leaves quarantine.
                    let epoch = Epoch::parse(&record, Some(now_us)).unwrap_or(Epoch {
                        id: record.clone().into(),
                        created_us: now_us,
                        now_us: Some(now_us),
                    });
                    let cluster = data.record.as_ref();
                    // As `read_vitals`: bootstrapped empty, neither restarted nor flushed since.
                    let bootstrapped = cluster.is_some_and(|c| {
                        !c.bootstrap_run_id.is_empty()
                            && c.bootstrap_run_id == run_id
                            && *c.bootstrap_epoch == *epoch.id
                    });
                    Vitals {
                        run_id: run_id.clone(),
                        uptime: Duration::from_secs(uptime_s),
                        durable: self.durable,
                        epoch,
                        misconfigured: None,
                        bootstrapped,
                        counters_lost: cluster.is_some_and(|c| c.counters_lost),
                    }
                });
                Answer::Connected {
                    vitals,
                    run_id,
                    record: data.record.clone().map(Box::new),
                }
            }
            Request::ReadRecord => Answer::Record(data.record.clone().map(Box::new)),
            Request::Op(op, caller, bugs) => {
                match answer(data, op, caller, *bugs, now_us, fresh_id) {
                    // `INFO server` gives a survey the process's run_id.
                    Answer::Reply(Reply::Survey { record, epoch, .. }) => {
                        Answer::Reply(Reply::Survey {
                            run_id,
                            record,
                            epoch,
                        })
                    }
                    answer => answer,
                }
            }
        }
    }
}

/// A master's answer to `op` from a caller whose cluster fingerprint is `caller` and whose
/// client plants `bugs`, on `data` at server time `now_us`: the semaphore's check of its
/// stored limit, then the script ([`apply_as`]). A survey's `run_id` is left empty: it is
/// the process's, not the data's. The differential test (`tests/differential.rs`) runs
/// this against the scripts.
pub(super) fn answer(
    data: &mut Data,
    op: &Op,
    caller: &str,
    bugs: ScriptBugs,
    now_us: u64,
    mut fresh_id: impl FnMut() -> String,
) -> Answer {
    if let Some((stored, ours)) = limit_differs(data, op, caller, bugs) {
        data.epoch_or_create(&mut fresh_id, now_us);
        return Answer::LimitDiffers { stored, ours };
    }
    match apply_as(data, op, caller, bugs, now_us, fresh_id) {
        Some(reply) => Answer::Reply(reply),
        None => Answer::RecordDiffers,
    }
}

fn describe(request: &Request, trace: &Trace) -> String {
    let (op, bugs) = match request {
        Request::Connect { vitals } => return format!("connect (vitals: {vitals})"),
        Request::ReadRecord => return "read the cluster record".to_owned(),
        Request::Op(op, _, bugs) => (op, bugs),
    };
    let short = |value: &str| trace.name(value);
    match &**op {
        Op::AcquireChecked {
            key, value, fence, ..
        } => format!(
            "acquire {key} {} ({fence:?}){}",
            short(value),
            bugs.name(
                bugs.one_round_token && *fence == FenceRead::Read,
                "one-round token"
            )
        ),
        Op::AcquirePermits(p) if p.replace => {
            format!("replace the limit of {} with {}", p.base, p.limit())
        }
        Op::AcquirePermits(p) => format!(
            "acquire permits {:?} of {} {}{}",
            p.wanted,
            p.base,
            short(&p.value),
            bugs.name(bugs.counted, "counted per master")
        ),
        Op::Extend { key, value, .. } => {
            format!(
                "extend {key} {}{}",
                short(value),
                bugs.name(bugs.recreate, "re-creating")
            )
        }
        #[cfg(redquorum_mutants)]
        Op::ExtendRecreating { key, value, .. } => {
            format!("extend {key} {} (re-creating)", short(value))
        }
        Op::AcquireMany {
            keys, value, fence, ..
        } => format!(
            "acquire {} {} ({fence:?}){}",
            keys.join(","),
            short(value),
            bugs.name(bugs.partial, "partial vote")
        ),
        Op::Fence {
            key, value, token, ..
        } => format!(
            "fence {key} {} T={token}{}",
            short(value),
            bugs.name(bugs.max_write, "max-write")
        ),
        Op::RwAcquire {
            key, value, mode, ..
        } => match mode {
            RwMode::Read => format!("acquire-read {key} {}", short(value)),
            RwMode::Write { .. } => format!("acquire-write {key} {}", short(value)),
        },
        Op::RwDowngrade { key, value } => format!("downgrade {key} {}", short(value)),
        Op::ExtendRead { key, value, .. } => format!("extend {key} {}", short(value)),
        Op::Release { key, .. } if bugs.plain_del => format!("DEL {key}"),
        Op::Release { key, value, .. } => {
            format!("release {key} {}{}", short(value), bugs.hand_off_names())
        }
        Op::ExtendMany { keys, value, .. } => {
            format!("extend {} {}", keys.join(","), short(value))
        }
        Op::ReleaseMany { keys, value, .. } => {
            format!("release {} {}", keys.join(","), short(value))
        }
        Op::Survey | Op::Scan { .. } | Op::Stamp { .. } | Op::Claim { .. } | Op::Unclaim { .. } => {
            op.name().to_owned()
        }
        Op::Inspect { key } => format!("inspect {key}"),
        Op::ForceUnlock { key, .. } => format!("force-unlock {key}"),
        Op::AcquireQueued {
            key,
            value,
            waiter,
            fair,
            ..
        } => format!(
            "acquire {key} {} as {}{}{}",
            short(value),
            if waiter.is_empty() {
                "a first attempt".to_owned()
            } else {
                format!("waiter {}", short(waiter))
            },
            if *fair { " (fair)" } else { "" },
            bugs.hand_off_names()
        ),
        Op::Enqueue {
            key,
            waiter,
            score,
            strict,
            ..
        } => format!(
            "enqueue {key} {} S={score}{}{}",
            short(waiter),
            if *strict { " (strict)" } else { "" },
            bugs.hand_off_names()
        ),
        Op::Dequeue { key, waiter, .. } => {
            format!("dequeue {key} {}{}", short(waiter), bugs.hand_off_names())
        }
    }
}

fn outcome(answer: &Answer) -> String {
    match answer {
        Answer::Connected { vitals: None, .. } => "connected".to_owned(),
        Answer::Connected {
            vitals: Some(v), ..
        } => format!(
            "connected, uptime {}s, epoch age {}ms{}",
            v.uptime.as_secs(),
            v.epoch.age().unwrap_or_default().as_millis(),
            if v.bootstrapped { ", bootstrapped" } else { "" }
        ),
        Answer::RecordDiffers => "the cluster record differs".to_owned(),
        Answer::LimitDiffers { stored, ours } => {
            format!("the stored limit is {stored}, not {ours}")
        }
        Answer::Reply(Reply::Permits { granted, free, .. }) => {
            format!("granted={granted} free={free:?}")
        }
        Answer::Record(record) => format!(
            "cluster record {:?}",
            record.as_ref().map(|r| &r.fingerprint)
        ),
        Answer::Reply(Reply::Checked { granted, fence, .. }) => {
            format!("granted={granted} counter={fence:?}")
        }
        Answer::Reply(Reply::Fenced {
            outcome, before, ..
        }) => format!("{outcome:?} (counter was {before:?})"),
        Answer::Reply(reply) => format!("{reply:?}"),
    }
}

/// The live lock keys of a dataset.
fn live_locks(state: &mut State, clock: &Clock) -> Vec<(Arc<str>, Arc<str>)> {
    let now_us = clock.wall_us(Instant::now(), state.clock_offset_us);
    state
        .data
        .locks
        .iter()
        .filter(|(_, e)| e.expires_us > now_us)
        .map(|(k, e)| (Arc::clone(k), Arc::clone(&e.value)))
        .collect()
}

/// Executes one op on `data` at server time `now_us` for a caller whose cluster fingerprint
/// is `caller`, exactly as the master would: `None` where the script's preamble answers
/// that the record's fingerprint differs (-2). The preamble, the same in every lock script
/// (`epoch.lua`, then `cluster.lua`), reads the data epoch (starting one when it is
/// missing, unless the op asks not to read it) before it compares.
fn apply_as(
    data: &mut Data,
    op: &Op,
    caller: &str,
    bugs: ScriptBugs,
    now_us: u64,
    mut fresh_id: impl FnMut() -> String,
) -> Option<Reply> {
    let reads_epoch = match op {
        Op::AcquireChecked { .. }
        | Op::AcquireQueued { .. }
        | Op::Enqueue { .. }
        | Op::AcquirePermits(_)
        | Op::AcquireMany { .. }
        | Op::RwAcquire { .. }
        | Op::RwDowngrade { .. } => Some(true),
        Op::Extend { epoch, .. } | Op::ExtendMany { epoch, .. } | Op::ExtendRead { epoch, .. } => {
            Some(*epoch)
        }
        #[cfg(redquorum_mutants)]
        Op::ExtendRecreating { epoch, .. } => Some(*epoch),
        _ => None,
    };
    if let Some(reads_epoch) = reads_epoch {
        if reads_epoch {
            data.epoch_or_create(&mut fresh_id, now_us);
        }
        let recorded = data.record.as_ref().map_or("", |r| r.fingerprint.as_str());
        if recorded != caller {
            return None;
        }
    }
    Some(apply(data, op, bugs, now_us, fresh_id))
}

/// `semaphore.lua`'s check of the stored limit when taking slots, for a caller whose
/// fingerprint agrees with the record: the stored limit and the caller's when they differ
/// (live permits or not: the record is sticky). A missing record takes the caller's limit.
/// Replacing the limit is `apply`'s (docs/design.md §15).
fn limit_differs(
    data: &mut Data,
    op: &Op,
    caller: &str,
    bugs: ScriptBugs,
) -> Option<(usize, usize)> {
    let Op::AcquirePermits(p) = op else {
        return None;
    };
    if p.replace
        || bugs.counted
        || data.record.as_ref().map_or("", |r| r.fingerprint.as_str()) != caller
    {
        return None;
    }
    let ours = p.limit();
    match data.limits.get(&*p.limit_key).copied() {
        Some(stored) if stored == ours => None,
        Some(stored) => Some((stored, ours)),
        None => {
            data.limits.insert(p.limit_key.to_string(), ours);
            None
        }
    }
}

/// The planted script bugs of a client (`--cfg redquorum_mutants`; none without it), as the model
/// runs them: the variants that the scripts' codecs (`src/scripts/`) pick from the
/// client's planted bug, which its simulated masters are given when they are built
/// ([`ScriptBugs::of`]) and send with every op.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ScriptBugs {
    /// `Mutant::OneRoundToken`: `acquire.lua` increments the fence counter it reads
    /// where it grants.
    one_round_token: bool,
    /// `Mutant::PlainDelRelease`: a single-key release is a plain `DEL`.
    plain_del: bool,
    /// `Mutant::ExtendRecreates`: `extend.lua` sets a missing key again.
    recreate: bool,
    /// `Mutant::ManyPartialVote`: `acquire_many.lua` grants each free key and says
    /// granted if it granted any.
    partial: bool,
    /// `Mutant::ReaderIgnoresIntent`: `rw_acquire.lua` grants readers past a live intent.
    ignore_intent: bool,
    /// `Mutant::WritebackNoGuard`: `fence.lua` accepts a counter equal to the token.
    max_write: bool,
    /// `Mutant::SemaphoreCountPerMaster`: a master counts the permits it holds.
    counted: bool,
    /// `Mutant::HandoffIgnoresLiveness`: the queue's first member is its head, live or not.
    ignore_liveness: bool,
    /// `Mutant::ConfirmKeepsHandoffExpiry`: a confirm keeps the handed key's expiry.
    keep_ttl: bool,
    /// `Mutant::FairByArrival`: a fair waiter is scored by its arrival on the master.
    by_arrival: bool,
}

impl ScriptBugs {
    /// The script bugs of a client that plants `planted`.
    #[cfg(redquorum_mutants)]
    pub(super) fn of(planted: &Planted) -> Self {
        let is = |mutant| planted.is(mutant);
        Self {
            one_round_token: is(Mutant::OneRoundToken),
            plain_del: is(Mutant::PlainDelRelease),
            recreate: is(Mutant::ExtendRecreates),
            partial: is(Mutant::ManyPartialVote),
            ignore_intent: is(Mutant::ReaderIgnoresIntent),
            max_write: is(Mutant::WritebackNoGuard),
            counted: is(Mutant::SemaphoreCountPerMaster),
            ignore_liveness: is(Mutant::HandoffIgnoresLiveness),
            keep_ttl: is(Mutant::ConfirmKeepsHandoffExpiry),
            by_arrival: is(Mutant::FairByArrival),
        }
    }

    /// `" (name)"` where `on`, for traces.
    fn name(&self, on: bool, name: &str) -> String {
        if on {
            format!(" ({name})")
        } else {
            String::new()
        }
    }

    /// The planted bugs of the hand-off scripts, for traces.
    fn hand_off_names(&self) -> String {
        [
            (self.ignore_liveness, " (ignoring liveness)"),
            (self.keep_ttl, " (keeping the handed expiry)"),
            (self.by_arrival, " (scored by arrival)"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect()
    }
}

/// Executes one op on `data` at server time `now_us`, exactly as the master would, for a
/// caller whose fingerprint agrees with the cluster record (see [`apply_as`]).
fn apply(
    data: &mut Data,
    op: &Op,
    bugs: ScriptBugs,
    now_us: u64,
    fresh_id: impl FnOnce() -> String,
) -> Reply {
    match op {
        // acquire.lua, past its comparison of fingerprints (`apply_as`)
        Op::AcquireChecked {
            key,
            value,
            ttl,
            fence,
            ..
        } => {
            let record = data.epoch_or_create(fresh_id, now_us);
            let granted = data.set_nx(key, value, *ttl, now_us);
            let fence_key = scripts::fence_key(key);
            let counter = match fence {
                FenceRead::Skip => None,
                // The one-round token: incremented where granted.
                FenceRead::Read if bugs.one_round_token && granted => {
                    let c = data.fences.entry(fence_key).or_insert(0);
                    *c += 1;
                    Some(*c)
                }
                FenceRead::Read => data.fences.get(&fence_key).copied(),
            };
            let holder_ttl = if granted {
                None
            } else {
                data.pttl(key, now_us)
            };
            // Only a refusal reads the queue's ticket counter (0 when missing).
            let ticket = (!granted).then(|| data.tickets.get(&**key).copied().unwrap_or(0));
            Reply::Checked {
                granted,
                epoch: EpochReport {
                    record: Some(record),
                },
                fence: counter,
                holder_ttl,
                ticket,
            }
        }
        // semaphore.lua, past its comparisons of fingerprints (`apply_as`) and of the
        // stored limit (`limit_differs`)
        Op::AcquirePermits(p) => {
            let record = data.epoch_or_create(fresh_id, now_us);
            let epoch = EpochReport {
                record: Some(record),
            };
            if p.replace {
                // Stores the limit where no permit is live under the stored one (the
                // 'limit' call); takes nothing.
                let ours = p.limit();
                let granted = match data.limits.get(&*p.limit_key).copied() {
                    Some(stored) if stored != ours => (0..stored.min(64))
                        .all(|i| data.live(&format!("{}{i}", p.base), now_us).is_none()),
                    _ => true,
                };
                if granted {
                    data.limits.insert(p.limit_key.to_string(), ours);
                }
                return Reply::Permits {
                    granted,
                    epoch,
                    fences: Vec::new(),
                    wait: None,
                    free: Vec::new(),
                };
            }
            // The per-master count: the keys of the planted design, by holder.
            #[cfg(redquorum_mutants)]
            if bugs.counted {
                let keys = scripts::counted_permits(&p.base, &p.value, p.wanted.len());
                let pattern = format!("{}c:", p.base);
                let live: Vec<Arc<str>> = data
                    .locks
                    .keys()
                    .filter(|k| k.starts_with(&pattern))
                    .cloned()
                    .collect();
                let held = live
                    .iter()
                    .filter(|k| data.live(k, now_us).is_some())
                    .count();
                let granted = held + keys.len() <= p.limit();
                if granted {
                    for key in &keys {
                        data.set(key, &p.value, p.ttl, now_us);
                    }
                }
                return Reply::Permits {
                    granted,
                    epoch,
                    fences: Vec::new(),
                    wait: None,
                    free: Vec::new(),
                };
            }
            let mut free = Vec::new();
            let mut held = Vec::new();
            for (i, slot) in p.slots.iter().enumerate() {
                match data.pttl(slot, now_us) {
                    None => free.extend(u32::try_from(i).ok()),
                    Some(pttl) => held.push(pttl),
                }
            }
            let taken = p.wanted.iter().any(|w| !free.contains(w));
            if taken {
                held.sort_unstable();
                let wait = p
                    .wanted
                    .len()
                    .checked_sub(free.len())
                    .filter(|short| *short > 0)
                    .and_then(|short| held.get(short - 1).copied());
                return Reply::Permits {
                    granted: false,
                    epoch,
                    fences: Vec::new(),
                    wait,
                    free,
                };
            }
            let mut fences = Vec::new();
            for w in &p.wanted {
                let slot = &p.slots[*w as usize];
                data.set(slot, &p.value, p.ttl, now_us);
                if p.fence {
                    fences.push(data.fences.get(&scripts::fence_key(slot)).copied());
                }
            }
            Reply::Permits {
                granted: true,
                epoch,
                fences,
                wait: None,
                free,
            }
        }
        // extend.lua, past its comparison of fingerprints (`apply_as`); its planted variant
        // (`Op::ExtendRecreating` and `Mutant::ExtendRecreates`) sets a missing key again,
        // which the real script never does.
        #[cfg(redquorum_mutants)]
        Op::ExtendRecreating {
            key,
            value,
            ttl,
            epoch,
        } => extend(data, (key, value, *ttl, *epoch), true, now_us, fresh_id),
        Op::Extend {
            key,
            value,
            ttl,
            epoch,
        } => extend(
            data,
            (key, value, *ttl, *epoch),
            bugs.recreate,
            now_us,
            fresh_id,
        ),
        // acquire_many.lua, past its comparison of fingerprints (`apply_as`): every key or
        // none (the planted partial vote grants each free key and says granted if any was);
        // the model keeps no owner records, so its kind check is not modelled (see
        // rw_acquire.lua below)
        Op::AcquireMany {
            keys,
            value,
            ttl,
            fence,
            ..
        } => {
            let partial = bugs.partial;
            let record = data.epoch_or_create(fresh_id, now_us);
            let mut fences = Vec::with_capacity(keys.len());
            let mut held = Vec::with_capacity(keys.len());
            let mut holder_ttl: Option<Duration> = None;
            for key in keys {
                fences.push(match fence {
                    FenceRead::Skip => None,
                    _ => data.fences.get(&scripts::fence_key(key)).copied(),
                });
                let ttl = data.pttl(key, now_us);
                held.push(ttl.is_some());
                if let Some(ttl) = ttl {
                    holder_ttl = Some(holder_ttl.map_or(ttl, |l| l.max(ttl)));
                }
            }
            let all = !held.iter().any(|h| *h);
            let mut granted = false;
            for (key, held) in keys.iter().zip(&held) {
                if !held && (all || partial) {
                    data.set(key, value, *ttl, now_us);
                    granted = true;
                }
            }
            Reply::CheckedMany {
                granted,
                epoch: EpochReport {
                    record: Some(record),
                },
                fences,
                held,
                holder_ttl: if granted { None } else { holder_ttl },
            }
        }
        // extend_many.lua, past its comparison of fingerprints (`apply_as`): every key or
        // none
        Op::ExtendMany {
            keys,
            value,
            ttl,
            epoch,
        } => {
            let record_read = *epoch;
            let record = epoch.then(|| data.epoch_or_create(fresh_id, now_us));
            let mut missing = false;
            let mut held = false;
            for key in keys {
                match data.live(key, now_us) {
                    Some(current) if current == *value => {}
                    Some(_) => held = true,
                    None => missing = true,
                }
            }
            let granted = if held {
                Some(false)
            } else if missing {
                None
            } else {
                for key in keys {
                    data.set(key, value, *ttl, now_us);
                }
                Some(true)
            };
            extended(granted, record_read, EpochReport { record })
        }
        // release_many.lua (the release notices have no subscriber in the simulation)
        // release_many.lua: each key of ours deleted and handed to its queue's live head.
        Op::ReleaseMany { keys, value, .. } => {
            let (mut deleted, mut held) = (0, 0);
            for key in keys {
                match data.live(key, now_us) {
                    Some(current) if current == *value => {
                        data.locks.remove(&**key);
                        data.hand_off(key, now_us, false);
                        deleted += 1;
                    }
                    Some(_) => held += 1,
                    None => {}
                }
            }
            if deleted > 0 {
                Reply::Granted
            } else if held > 0 {
                Reply::HeldByOther
            } else {
                Reply::Missing
            }
        }
        // fence.lua (which does not read TIME: the reply's clock is 0, as its codec reads it)
        // rw_acquire.lua, past its comparison of fingerprints (`apply_as`); the model keeps
        // no owner records, so the kind checks are not modelled, and its reader index is
        // the set of live reader keys (the script's index, pruned as it reads it).
        Op::RwAcquire {
            key,
            value,
            ttl,
            fence,
            mode,
            ..
        } => {
            let ignore_intent = bugs.ignore_intent;
            let record = data.epoch_or_create(fresh_id, now_us);
            let prefix = scripts::reader_prefix(key);
            let readers: Vec<Arc<str>> = data
                .locks
                .range::<str, _>((
                    std::ops::Bound::Included(prefix.as_str()),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, _)| Arc::clone(k))
                .collect();
            let mut lives = Vec::new();
            for reader in &readers {
                if let Some(p) = data.pttl(reader, now_us) {
                    lives.push(p);
                }
            }
            // The key holds the writer's value, or the readers' mark.
            let writer = data
                .live(key, now_us)
                .filter(|v| &**v != scripts::READERS_MARK)
                .and_then(|_| data.pttl(key, now_us));
            let intent_key: Arc<str> = scripts::intent_key(key).into();
            let intent = data.pttl(&intent_key, now_us).filter(|p| !p.is_zero());
            let (granted, holder_ttl) = match mode {
                RwMode::Read => {
                    if data.plants.readers_refused {
                        (false, Some(*ttl))
                    } else if writer.is_some() && !data.plants.reader_ignores_writer {
                        (false, writer)
                    } else if intent.is_some() && !ignore_intent {
                        (false, intent)
                    } else if lives.len() >= crate::config::limits::MAX_READERS {
                        (false, lives.iter().min().copied())
                    } else {
                        let reader: Arc<str> = scripts::reader_key(key, value).into();
                        data.set(&reader, value, *ttl, now_us);
                        data.mark_readers(key, *ttl, now_us);
                        (true, None)
                    }
                }
                RwMode::Write {
                    intent: id,
                    intent_ttl,
                } => {
                    if writer.is_some() {
                        (false, writer)
                    } else if !lives.is_empty() {
                        data.set(&intent_key, id, *intent_ttl, now_us);
                        (false, lives.iter().max().copied())
                    } else {
                        data.set(key, value, *ttl, now_us);
                        if data.live(&intent_key, now_us).as_deref() == Some(&**id) {
                            data.locks.remove(&*intent_key);
                        }
                        (true, None)
                    }
                }
            };
            let counter = match fence {
                FenceRead::Skip => None,
                _ => data.fences.get(&scripts::fence_key(key)).copied(),
            };
            Reply::Checked {
                granted,
                epoch: EpochReport {
                    record: Some(record),
                },
                fence: counter,
                holder_ttl,
                ticket: None,
            }
        }
        // rw_extend_read.lua: extend.lua on the reader key, refused where the lock key holds
        // a value (a writer's); the model's reader index is the set of live reader keys,
        // kept alive with them, and the readers' mark is kept alive as long. The script
        // also keeps the owner record (kind 'rwlock') alive as long as the reader key; the
        // model keeps no owner records (kinds are not modelled, see rw_acquire.lua above).
        Op::ExtendRead {
            key,
            lock,
            value,
            ttl,
            epoch,
        } => {
            let ours = data.live(key, now_us).is_some_and(|v| v == *value);
            let written = data
                .live(lock, now_us)
                .is_some_and(|v| &*v != scripts::READERS_MARK);
            if ours && written {
                let record = epoch.then(|| data.epoch_or_create(fresh_id, now_us));
                return extended(Some(false), *epoch, EpochReport { record });
            }
            let reply = extend(data, (key, value, *ttl, *epoch), false, now_us, fresh_id);
            if ours {
                data.mark_readers(lock, *ttl, now_us);
            }
            reply
        }
        // rw_downgrade.lua, past its comparison of fingerprints (`apply_as`)
        Op::RwDowngrade { key, value } => {
            let record = data.epoch_or_create(fresh_id, now_us);
            let epoch = EpochReport {
                record: Some(record),
            };
            match data.live(key, now_us) {
                None => Reply::Gone { epoch },
                Some(current) if current != *value => Reply::Checked {
                    granted: false,
                    epoch,
                    fence: None,
                    holder_ttl: None,
                    ticket: None,
                },
                Some(_) => {
                    let expires_us = data.locks.get(&**key).map_or(now_us, |e| e.expires_us);
                    let reader: Arc<str> = scripts::reader_key(key, value).into();
                    // The writer's value gives way to the readers' mark, with its expiry.
                    data.locks.insert(
                        Arc::clone(key),
                        Entry {
                            value: Arc::from(scripts::READERS_MARK),
                            expires_us,
                        },
                    );
                    data.locks.insert(
                        reader,
                        Entry {
                            value: Arc::clone(value),
                            expires_us,
                        },
                    );
                    Reply::Checked {
                        granted: true,
                        epoch,
                        fence: None,
                        holder_ttl: None,
                        ticket: None,
                    }
                }
            }
        }
        Op::Fence {
            counter,
            key,
            value,
            token,
            ..
        } => {
            // The max-write mutant also accepts a counter equal to the token.
            let equal_ok = bugs.max_write;
            let epoch = EpochReport {
                record: data.epoch.clone(),
            };
            if data.live(key, now_us).as_deref() != Some(&**value) {
                return Reply::Fenced {
                    outcome: FenceOutcome::NotOurs,
                    before: None,
                    epoch,
                };
            }
            let fence_key = counter.to_string();
            let before = data.fences.get(&fence_key).copied();
            let c = before.unwrap_or(0);
            if c < *token || (equal_ok && c == *token) {
                data.fences.insert(fence_key, *token);
                Reply::Fenced {
                    outcome: FenceOutcome::Written,
                    before,
                    epoch,
                }
            } else {
                Reply::Fenced {
                    outcome: FenceOutcome::Conflict,
                    before,
                    epoch,
                }
            }
        }
        // release.lua: compare-and-delete, then the hand-off to the queue's live head
        // (the notices have no subscriber in the simulation)
        // The plain `DEL` of `Mutant::PlainDelRelease`.
        Op::Release { key, .. } if bugs.plain_del => {
            if data.live(key, now_us).is_some() {
                data.locks.remove(&**key);
                Reply::Granted
            } else {
                Reply::Missing
            }
        }
        Op::Release {
            key, value, plain, ..
        } => data.release_handing_off(key, value, *plain, now_us, bugs.ignore_liveness),
        // `HGETALL` of the record and a `SCAN` for a live lock key (fence counters, the
        // epoch and the record are the crate's records, not keys); `SimServer::execute`
        // adds the run_id of `INFO server`.
        Op::Survey => Reply::Survey {
            run_id: String::new(),
            record: data.record.clone().map(Box::new),
            epoch: {
                let epoch = data.epoch_or_create(fresh_id, now_us);
                epoch
                    .rsplit_once(':')
                    .map_or(epoch.as_str(), |(id, _)| id)
                    .to_owned()
            },
        },
        // One `SCAN` finds a live lock key (fence counters, the epoch and the record are the
        // crate's records, not keys).
        Op::Scan { .. } => Reply::Scanned {
            next: 0,
            found: data
                .locks
                .iter()
                .find(|(_, e)| e.expires_us > now_us)
                .map(|(k, _)| k.to_string()),
        },
        // stamp.lua
        Op::Stamp { record, bootstrap } => {
            if let Some(existing) = &data.record {
                return Reply::Stamped {
                    outcome: StampOutcome::Exists,
                    fingerprint: existing.fingerprint.clone(),
                };
            }
            let mut written = (**record).clone();
            written.bootstrap_run_id.clear();
            written.bootstrap_epoch.clear();
            if let Some((run_id, surveyed)) = bootstrap.as_ref().filter(|(r, _)| !r.is_empty()) {
                let current = data
                    .epoch
                    .as_deref()
                    .and_then(|e| e.rsplit_once(':'))
                    .map(|(id, _)| id.to_owned());
                if current.as_deref() != Some(surveyed.as_str()) {
                    return Reply::Stamped {
                        outcome: StampOutcome::EpochChanged,
                        fingerprint: String::new(),
                    };
                }
                written.bootstrap_run_id = run_id.clone();
                written.bootstrap_epoch = surveyed.clone();
            }
            let fingerprint = written.fingerprint.clone();
            data.record = Some(written);
            Reply::Stamped {
                outcome: StampOutcome::Written,
                fingerprint,
            }
        }
        Op::Claim { .. } | Op::Unclaim { .. } => Reply::Granted,
        // inspect.lua: the model keeps no owner records (the simulation's clients make no
        // inspection of them) and no keys of other types.
        Op::Inspect { key } => {
            let value = data.live(key, now_us);
            let queued = value.as_ref().is_some_and(|v| {
                data.queue(key, now_us)
                    .is_some_and(|q| q.scores.contains_key(&**v))
            });
            let pttl_ms = match data.pttl(key, now_us) {
                Some(ttl) => i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
                None => -2,
            };
            Reply::Inspected(Box::new(Inspected {
                kind: if value.is_some() { "string" } else { "none" }.to_owned(),
                value: value.map(|v| v.to_string()),
                pttl_ms,
                owner: BTreeMap::new(),
                fence: data.fences.get(&scripts::fence_key(key)).copied(),
                now_ms: now_us / 1000,
                queued,
            }))
        }
        // force_unlock.lua: whatever holds the key is deleted and the counter raised; a
        // waiter's id leaves the queue, and the key goes to the live head (the release
        // notice has no subscriber here).
        // force_unlock.lua on a mutex's key (the model keeps no kinds: the readers' mark,
        // which the script leaves alone as another kind's, is never force-unlocked here)
        Op::ForceUnlock { key, .. } => {
            let current = data.live(key, now_us);
            let removed = current.as_ref().map(|v| v.to_string());
            data.locks.remove(&**key);
            if let Some(current) = current {
                data.leave(key, &current, Registration::Dequeued, now_us);
                data.hand_off(key, now_us, false);
            }
            let counter = data.fences.entry(scripts::fence_key(key)).or_insert(0);
            *counter += 1;
            Reply::ForceUnlocked {
                removed,
                counter: *counter,
            }
        }
        // acquire_queued.lua, past its comparison of fingerprints (`apply_as`); the model
        // keeps no owner records (see rw_acquire.lua above)
        Op::AcquireQueued {
            key,
            value,
            ttl,
            fence,
            waiter,
            fair,
            ..
        } => {
            let record = data.epoch_or_create(fresh_id, now_us);
            let q = QueuedAcquire {
                key,
                value,
                ttl: *ttl,
                waiter,
                fair: *fair,
                ignore_liveness: bugs.ignore_liveness,
                keep_ttl: bugs.keep_ttl,
            };
            let (granted, pttl_ms) = data.acquire_queued(&q, now_us);
            Reply::Checked {
                granted,
                epoch: EpochReport {
                    record: Some(record),
                },
                fence: match fence {
                    FenceRead::Skip => None,
                    _ => data.fences.get(&scripts::fence_key(key)).copied(),
                },
                holder_ttl: pttl_ms
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis),
                ticket: fair.then(|| data.tickets.get(&**key).copied().unwrap_or(0)),
            }
        }
        // enqueue.lua, past its comparison of fingerprints (`apply_as`); the model keeps no
        // owner records, so its kind check is not modelled (see rw_acquire.lua above)
        Op::Enqueue {
            key,
            waiter,
            score,
            strict,
            fair,
            waiter_ttl,
            channel,
            ..
        } => {
            let record = data.epoch_or_create(fresh_id, now_us);
            let e = Enqueued {
                key,
                waiter,
                score: *score,
                strict: *strict,
                waiter_ttl: *waiter_ttl,
                channel,
                fair: *fair,
                ignore_liveness: bugs.ignore_liveness,
                by_arrival: bugs.by_arrival,
            };
            let outcome = data.enqueue(&e, now_us);
            Reply::Enqueued {
                written: outcome.conflict.is_none(),
                counter: outcome.counter,
                handed: outcome.handed,
                epoch: EpochReport {
                    record: Some(record),
                },
            }
        }
        // dequeue.lua
        Op::Dequeue { key, waiter, .. } => {
            if data.dequeue(key, waiter, now_us, bugs.ignore_liveness) {
                Reply::Granted
            } else {
                Reply::Missing
            }
        }
    }
}

/// `extend.lua` on one key, past its comparison of fingerprints (`apply_as`): with
/// `recreate`, its planted variant, which sets a missing key again.
fn extend(
    data: &mut Data,
    (key, value, ttl, epoch): (&Arc<str>, &Arc<str>, Duration, bool),
    recreate: bool,
    now_us: u64,
    fresh_id: impl FnOnce() -> String,
) -> Reply {
    let record = epoch.then(|| data.epoch_or_create(fresh_id, now_us));
    // A missing key is never set again (it may have been force-unlocked).
    let granted = match data.live(key, now_us) {
        Some(current) if current == *value => {
            data.set(key, value, ttl, now_us);
            Some(true)
        }
        Some(_) => Some(false),
        None if recreate => {
            data.set(key, value, ttl, now_us);
            Some(true)
        }
        None => None,
    };
    extended(granted, epoch, EpochReport { record })
}

/// The reply to an extension, as its codec reads it (`scripts/lock.rs`): `granted` is `Some(true)`
/// extended, `Some(false)` held by another value, `None` missing; with `epoch_read`, the
/// reply carries the epoch.
fn extended(granted: Option<bool>, epoch_read: bool, epoch: EpochReport) -> Reply {
    match (granted, epoch_read) {
        (None, false) => Reply::Missing,
        (None, true) => Reply::Gone { epoch },
        (Some(true), false) => Reply::Granted,
        (Some(false), false) => Reply::HeldByOther,
        (Some(granted), true) => Reply::Checked {
            granted,
            epoch,
            fence: None,
            holder_ttl: None,
            ticket: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const T0: u64 = 1_000_000;
    /// The fingerprint of a caller that knows no cluster record.
    const NO_RECORD: &str = "";

    fn id() -> String {
        "fresh".to_owned()
    }

    /// [`super::apply`] for a client that plants no bug.
    fn apply(d: &mut Data, op: &Op, now_us: u64, fresh_id: impl FnOnce() -> String) -> Reply {
        super::apply(d, op, ScriptBugs::default(), now_us, fresh_id)
    }

    /// The script bugs of a client that plants `mutant`.
    #[cfg(redquorum_mutants)]
    fn planted(mutant: Mutant) -> ScriptBugs {
        ScriptBugs::of(&Planted {
            mutant: Some(mutant),
            ..Planted::default()
        })
    }

    fn acquire(value: &str, fence: FenceRead) -> Op {
        Op::AcquireChecked {
            key: "k".into(),
            value: value.into(),
            ttl: 100 * MS,
            fence,
            owner: Arc::new(crate::cluster::Owner::this_process("")),
        }
    }

    fn fence(value: &str, token: u64) -> Op {
        Op::Fence {
            counter: scripts::fence_key("k").into(),
            key: "k".into(),
            value: value.into(),
            token,
        }
    }

    #[test]
    fn set_nx_px_expires_on_the_millisecond() {
        let mut d = Data::default();
        let granted = |reply: Reply| matches!(reply, Reply::Checked { granted: true, .. });
        assert!(granted(apply(
            &mut d,
            &acquire("a", FenceRead::Skip),
            T0,
            id
        )));
        let other = acquire("b", FenceRead::Skip);
        match apply(&mut d, &other, T0 + 40_000, id) {
            Reply::Checked {
                granted: false,
                holder_ttl,
                ..
            } => assert_eq!(holder_ttl, Some(60 * MS)),
            reply => panic!("{reply:?}"),
        }
        assert!(granted(apply(&mut d, &other, T0 + 100_000, id)));
    }

    #[test]
    fn acquire_script_creates_the_epoch_and_reads_the_counter() {
        let mut d = Data::default();
        let Reply::Checked {
            granted,
            epoch,
            fence,
            holder_ttl,
            ..
        } = apply(&mut d, &acquire("a", FenceRead::Read), T0, id)
        else {
            panic!("not a checked reply");
        };
        assert!(granted);
        assert_eq!(epoch.record.as_deref(), Some("fresh:1000000"));
        assert_eq!((fence, holder_ttl), (None, None));
        d.fences.insert(scripts::fence_key("k"), 7);
        let Reply::Checked {
            granted,
            epoch,
            fence,
            holder_ttl,
            ..
        } = apply(&mut d, &acquire("b", FenceRead::Read), T0 + 10_000, || {
            "unused".to_owned()
        })
        else {
            panic!("not a checked reply");
        };
        assert!(!granted);
        assert_eq!(epoch.record.as_deref(), Some("fresh:1000000"));
        assert_eq!((fence, holder_ttl), (Some(7), Some(90 * MS)));
    }

    #[cfg(redquorum_mutants)]
    #[test]
    fn one_round_token_increments_only_where_granted() {
        let mut d = Data::default();
        let bugs = planted(Mutant::OneRoundToken);
        let first = super::apply(&mut d, &acquire("a", FenceRead::Read), bugs, T0, id);
        assert!(matches!(first, Reply::Checked { fence: Some(1), .. }));
        let refused = super::apply(&mut d, &acquire("b", FenceRead::Read), bugs, T0, id);
        assert!(matches!(
            refused,
            Reply::Checked {
                granted: false,
                fence: Some(1),
                ..
            }
        ));
    }

    #[test]
    fn extend_resets_ours_never_sets_missing_and_leaves_others() {
        let mut d = Data::default();
        let ext = |v: &str| Op::Extend {
            key: "k".into(),
            value: v.into(),
            ttl: 100 * MS,
            epoch: false,
        };
        // A missing key stays missing: it may have been force-unlocked.
        assert_eq!(apply(&mut d, &ext("a"), T0, id), Reply::Missing);
        assert_eq!(d.live("k", T0), None);
        apply(&mut d, &acquire("a", FenceRead::Skip), T0, id);
        assert_eq!(apply(&mut d, &ext("a"), T0 + 90_000, id), Reply::Granted);
        assert_eq!(d.pttl("k", T0 + 90_000), Some(100 * MS));
        assert_eq!(
            apply(&mut d, &ext("b"), T0 + 90_000, id),
            Reply::HeldByOther
        );
        let with_epoch = |v: &str| Op::Extend {
            key: "k".into(),
            value: v.into(),
            ttl: 100 * MS,
            epoch: true,
        };
        assert!(matches!(
            apply(&mut d, &with_epoch("a"), T0 + 90_000, id),
            Reply::Checked {
                granted: true,
                epoch: EpochReport {
                    record: Some(_),
                    ..
                },
                ..
            }
        ));
        assert!(matches!(
            apply(&mut d, &with_epoch("a"), T0 + 500_000, id),
            Reply::Gone {
                epoch: EpochReport {
                    record: Some(_),
                    ..
                },
            }
        ));
    }

    #[test]
    fn fence_is_strict_checks_ownership_and_reports_the_counter() {
        let mut d = Data::default();
        apply(&mut d, &acquire("a", FenceRead::Read), T0, id);
        let written = |r: Reply| match r {
            Reply::Fenced {
                outcome, before, ..
            } => (outcome, before),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            written(apply(&mut d, &fence("b", 5), T0, id)),
            (FenceOutcome::NotOurs, None)
        );
        assert_eq!(
            written(apply(&mut d, &fence("a", 5), T0, id)),
            (FenceOutcome::Written, None)
        );
        assert_eq!(
            written(apply(&mut d, &fence("a", 5), T0, id)),
            (FenceOutcome::Conflict, Some(5))
        );
        // The max-write mutant accepts an equal counter.
        #[cfg(redquorum_mutants)]
        {
            let max_write = planted(Mutant::WritebackNoGuard);
            assert_eq!(
                written(super::apply(&mut d, &fence("a", 5), max_write, T0, id)),
                (FenceOutcome::Written, Some(5))
            );
            assert_eq!(
                written(super::apply(&mut d, &fence("a", 4), max_write, T0, id)),
                (FenceOutcome::Conflict, Some(5))
            );
        }
    }

    #[test]
    fn release_deletes_only_our_value() {
        let mut d = Data::default();
        apply(&mut d, &acquire("a", FenceRead::Skip), T0, id);
        let rel = |v: &str| Op::Release {
            key: "k".into(),
            value: v.into(),
            channel: "c".into(),
            plain: false,
        };
        assert_eq!(apply(&mut d, &rel("b"), T0, id), Reply::HeldByOther);
        assert_eq!(apply(&mut d, &rel("a"), T0, id), Reply::Granted);
        assert_eq!(apply(&mut d, &rel("a"), T0, id), Reply::Missing);
        #[cfg(redquorum_mutants)]
        {
            // `Mutant::PlainDelRelease`: any value's key is deleted.
            apply(&mut d, &acquire("a", FenceRead::Skip), T0, id);
            let del = planted(Mutant::PlainDelRelease);
            assert_eq!(super::apply(&mut d, &rel("b"), del, T0, id), Reply::Granted);
            assert_eq!(super::apply(&mut d, &rel("b"), del, T0, id), Reply::Missing);
        }
    }

    #[test]
    fn extend_many_extends_every_key_or_none_and_release_many_deletes_ours() {
        let mut d = Data::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        d.set(&a, &"v".into(), 100 * MS, T0);
        d.set(&b, &"w".into(), 100 * MS, T0);
        let ext = Op::ExtendMany {
            keys: vec![Arc::clone(&a), Arc::clone(&b)],
            value: "v".into(),
            ttl: 500 * MS,
            epoch: false,
        };
        // `b` is another value's: nothing is extended, `a` expires as it would have.
        assert_eq!(apply(&mut d, &ext, T0, id), Reply::HeldByOther);
        assert_eq!(d.pttl(&a, T0), Some(100 * MS));
        d.locks.remove(&*b);
        assert_eq!(apply(&mut d, &ext, T0, id), Reply::Missing);
        assert_eq!(d.pttl(&a, T0), Some(100 * MS));
        assert_eq!(d.live(&b, T0), None, "a missing key is never set again");
        d.set(&b, &"v".into(), 100 * MS, T0);
        assert_eq!(apply(&mut d, &ext, T0, id), Reply::Granted);
        assert_eq!(d.pttl(&a, T0), Some(500 * MS));
        assert_eq!(d.pttl(&b, T0), Some(500 * MS));
        let rel = |v: &str| Op::ReleaseMany {
            keys: vec![Arc::clone(&a), Arc::clone(&b)],
            value: v.into(),
            channels: vec!["ca".into(), "cb".into()],
        };
        d.set(&b, &"w".into(), 100 * MS, T0);
        assert_eq!(apply(&mut d, &rel("x"), T0, id), Reply::HeldByOther);
        assert_eq!(apply(&mut d, &rel("v"), T0, id), Reply::Granted);
        assert_eq!(d.live(&a, T0), None);
        assert_eq!(d.live(&b, T0).as_deref(), Some("w"));
        d.locks.remove(&*b);
        assert_eq!(apply(&mut d, &rel("v"), T0, id), Reply::Missing);
    }

    #[test]
    fn inspect_reads_and_force_unlock_deletes_any_value_and_raises_the_counter() {
        let mut d = Data::default();
        let inspect = Op::Inspect { key: "k".into() };
        let force = Op::ForceUnlock {
            key: "k".into(),
            channel: "c".into(),
        };
        let read = |d: &mut Data, at: u64| match apply(d, &inspect, at, id) {
            Reply::Inspected(i) => *i,
            other => panic!("{other:?}"),
        };
        let free = read(&mut d, T0);
        assert_eq!(
            (free.kind.as_str(), free.value, free.pttl_ms),
            ("none", None, -2)
        );
        assert_eq!((free.fence, free.now_ms), (None, T0 / 1000));
        apply(&mut d, &acquire("a", FenceRead::Skip), T0, id);
        let held = read(&mut d, T0 + 40_000);
        assert_eq!(
            (held.kind.as_str(), held.value.as_deref(), held.pttl_ms),
            ("string", Some("a"), 60)
        );
        assert_eq!(
            apply(&mut d, &force, T0 + 40_000, id),
            Reply::ForceUnlocked {
                removed: Some("a".into()),
                counter: 1
            }
        );
        assert_eq!(d.live("k", T0 + 40_000), None);
        assert_eq!(
            apply(&mut d, &force, T0 + 40_000, id),
            Reply::ForceUnlocked {
                removed: None,
                counter: 2
            }
        );
        assert_eq!(read(&mut d, T0 + 40_000).fence, Some(2));
    }

    #[cfg(redquorum_mutants)]
    #[test]
    fn the_recreating_extension_sets_a_missing_key_again() {
        let mut d = Data::default();
        let ext = Op::Extend {
            key: "k".into(),
            value: "a".into(),
            ttl: 100 * MS,
            epoch: false,
        };
        let bugs = planted(Mutant::ExtendRecreates);
        assert_eq!(super::apply(&mut d, &ext, bugs, T0, id), Reply::Granted);
        assert_eq!(d.live("k", T0).as_deref(), Some("a"));
        // The counted re-entry's round (`Mutant::ReentryCounter`) does the same.
        let mut d = Data::default();
        let ext = Op::ExtendRecreating {
            key: "k".into(),
            value: "a".into(),
            ttl: 100 * MS,
            epoch: false,
        };
        assert_eq!(apply(&mut d, &ext, T0, id), Reply::Granted);
        assert_eq!(d.live("k", T0).as_deref(), Some("a"));
    }

    fn key() -> Arc<str> {
        "k".into()
    }

    /// An `Enqueue` of `waiter` with `score`, a 30 ms waiter TTL, on `k`.
    fn enq<'a>(key: &'a Arc<str>, waiter: &'a Arc<str>, score: u64, strict: bool) -> Enqueued<'a> {
        Enqueued {
            key,
            waiter,
            score,
            strict,
            waiter_ttl: 30 * MS,
            channel: "redquorum:handoff:c",
            fair: strict,
            ignore_liveness: false,
            by_arrival: false,
        }
    }

    fn queued<'a>(
        key: &'a Arc<str>,
        value: &'a Arc<str>,
        waiter: &'a Arc<str>,
        fair: bool,
    ) -> QueuedAcquire<'a> {
        QueuedAcquire {
            key,
            value,
            ttl: 100 * MS,
            waiter,
            fair,
            ignore_liveness: false,
            keep_ttl: false,
        }
    }

    #[test]
    fn strict_registration_refuses_a_ticket_at_or_below_the_counter_and_refresh_never_lowers_it() {
        let mut d = Data::default();
        let (k, a, b): (Arc<str>, Arc<str>, Arc<str>) = (key(), "A".into(), "B".into());
        let written = d.enqueue(&enq(&k, &a, 1, true), T0);
        assert_eq!(
            (written.conflict, written.handed),
            (None, true),
            "free: self-handed"
        );
        assert_eq!(d.live(&k, T0).as_deref(), Some("A"));
        assert_eq!(d.pttl_ms(&k, T0), 30);
        assert_eq!(d.enqueue(&enq(&k, &b, 1, true), T0).conflict, Some(1));
        assert!(d.enqueue(&enq(&k, &b, 2, true), T0).conflict.is_none());
        // A fair refresh (not strict) of an older ticket keeps the counter.
        let refresh = Enqueued {
            strict: false,
            ..enq(&k, &a, 1, true)
        };
        assert!(!refresh.strict && refresh.fair);
        d.enqueue(&refresh, T0 + 10_000);
        assert_eq!(d.tickets.get(&*k), Some(&2));
        // Same score every time: A stays ahead of B.
        assert_eq!(d.live_head(&k, T0 + 10_000, false).as_deref(), Some("A"));
        // The queue lives at least twice the waiter TTL from the latest refresh.
        assert_eq!(
            d.queues.get(&*k).and_then(|q| q.expires_us),
            Some(T0 + 70_000)
        );
    }

    #[test]
    fn live_head_prunes_dead_waiters_and_the_release_hands_to_the_live_one() {
        let mut d = Data::default();
        let (k, a, b, v): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
            (key(), "A".into(), "B".into(), "v".into());
        apply(&mut d, &acquire("v", FenceRead::Skip), T0, id);
        d.enqueue(&enq(&k, &a, 1, true), T0);
        d.enqueue(&enq(&k, &b, 2, true), T0 + 20_000);
        // A's liveness key expires at T0 + 30 ms; B's lives until T0 + 50 ms.
        let at = T0 + 35_000;
        // Handed on: answered with the ticket counter (B's score, 2).
        assert_eq!(
            d.release_handing_off(&k, &v, false, at, false),
            Reply::HandedOn { ticket: 2 }
        );
        assert_eq!(d.live(&k, at).as_deref(), Some("B"));
        assert_eq!(d.pttl_ms(&k, at), 30, "the PX the liveness key names");
        assert_eq!(d.journal.pruned, 1);
        assert_eq!(
            d.journal
                .waiters
                .get(&(k.clone(), a.clone()))
                .map(|e| e.registration),
            Some(Registration::Expired)
        );
        // B confirms: granted, served, out of the queue.
        let w = "w".into();
        assert_eq!(
            d.acquire_queued(&queued(&k, &w, &b, true), at),
            (true, None)
        );
        assert_eq!(d.pttl_ms(&k, at), 100, "PX ttl, not the handed expiry");
        assert!(d.queue(&k, at).is_none(), "the last member left");
        let grant = d.journal.grants.last().cloned().unwrap();
        assert_eq!(&*grant.waiter, "B");
        assert_eq!(
            grant
                .waiters
                .iter()
                .map(|k| (&*k.waiter, k.registration))
                .collect::<Vec<_>>(),
            [("A", Registration::Expired), ("B", Registration::Live)]
        );
    }

    #[test]
    fn without_a_live_head_the_release_frees_the_key_and_the_bound_gives_up() {
        let mut d = Data::default();
        let (k, v): (Arc<str>, Arc<str>) = (key(), "v".into());
        apply(&mut d, &acquire("v", FenceRead::Skip), T0, id);
        for i in 0..300u64 {
            d.enqueue(&enq(&k, &format!("w{i:03}").into(), i + 1, true), T0);
        }
        // All dead: 256 pruned, 44 left for the next call, which finds none live.
        let at = T0 + 31_000;
        assert_eq!(
            d.release_handing_off(&k, &v, false, at, false),
            Reply::Granted
        );
        assert_eq!(d.live(&k, at), None);
        assert_eq!(d.journal.pruned, 256);
        assert_eq!(d.queue(&k, at).map(|q| q.ordered.len()), Some(44));
        assert_eq!(d.live_head(&k, at, false), Head::None);
        assert!(d.queue(&k, at).is_none());
    }

    #[test]
    fn fair_acquires_wait_behind_a_live_head_and_first_attempts_take_a_free_key() {
        let mut d = Data::default();
        let (k, a, b, none): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
            (key(), "A".into(), "B".into(), "".into());
        let (v, w): (Arc<str>, Arc<str>) = ("v".into(), "w".into());
        d.enqueue(&enq(&k, &a, 1, true), T0);
        d.locks.clear();
        // Free, but A heads: a fair first attempt and B are refused ("queued"), a non-fair
        // one is not.
        assert_eq!(
            d.acquire_queued(&queued(&k, &v, &none, true), T0),
            (false, Some(-2))
        );
        d.enqueue(&enq(&k, &b, 2, true), T0);
        assert_eq!(
            d.acquire_queued(&queued(&k, &w, &b, true), T0),
            (false, Some(-2))
        );
        assert_eq!(
            d.acquire_queued(&queued(&k, &v, &none, false), T0),
            (true, None)
        );
        assert_eq!(
            d.acquire_queued(&queued(&k, &w, &a, true), T0),
            (false, Some(100))
        );
    }

    #[test]
    fn a_head_past_the_prune_budget_refuses_fair_grants_until_refreshes_prune_on() {
        let mut d = Data::default();
        let (k, live, v, none): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
            (key(), "live".into(), "v".into(), "".into());
        // 600 registrations that die (30 ms waiter TTL), then one that stays live.
        for i in 0..600u64 {
            d.enqueue(&enq(&k, &format!("dead{i:03}").into(), i + 1, true), T0);
        }
        d.locks.clear();
        let at = T0 + 40_000;
        d.enqueue(&enq(&k, &live, 1_000, true), at);
        // That registration pruned 256; the head is still unknown.
        assert_eq!(d.journal.pruned, 256);
        assert_eq!(d.live(&k, at), None);
        // A fair first attempt is refused while the head is unknown (it prunes 256 more).
        assert_eq!(
            d.acquire_queued(&queued(&k, &v, &none, true), at),
            (false, Some(-2))
        );
        assert_eq!(d.journal.pruned, 512);
        // The live waiter's refresh prunes the rest, heads, and takes the free key.
        assert!(d.enqueue(&enq(&k, &live, 1_000, true), at).handed);
        assert_eq!(d.journal.pruned, 600);
        assert_eq!(d.live(&k, at).as_deref(), Some("live"));
    }

    #[test]
    fn live_head_at_its_prune_budget_matches_the_script() {
        // As `tests/scripts.rs::live_head_at_its_prune_budget`: 256 dead, none live; 257,
        // unknown.
        for (dead, expected) in [(256u64, Head::None), (257, Head::Unknown)] {
            let mut d = Data::default();
            let k = key();
            for i in 0..dead {
                d.enqueue(&enq(&k, &format!("dead{i:03}").into(), i + 1, false), T0);
            }
            d.locks.clear();
            assert_eq!(d.live_head(&k, T0 + 40_000, false), expected, "{dead} dead");
        }
    }

    #[test]
    fn dequeue_hands_a_key_handed_to_the_leaver_on() {
        let mut d = Data::default();
        let (k, a, b): (Arc<str>, Arc<str>, Arc<str>) = (key(), "A".into(), "B".into());
        d.enqueue(&enq(&k, &a, 1, true), T0);
        d.enqueue(&enq(&k, &b, 2, true), T0);
        assert_eq!(d.live(&k, T0).as_deref(), Some("A"));
        d.dequeue(&k, &a, T0, false);
        assert_eq!(d.live(&k, T0).as_deref(), Some("B"));
        assert_eq!(
            d.journal
                .waiters
                .get(&(k.clone(), a))
                .map(|e| e.registration),
            Some(Registration::Dequeued)
        );
        // A crash without data loses queues, liveness keys and counters.
        d.lose();
        assert!(d.queues.is_empty() && d.waiters.is_empty() && d.tickets.is_empty());
        assert_eq!(
            d.journal.waiters.get(&(k, b)).map(|e| e.registration),
            Some(Registration::Lost)
        );
    }

    #[test]
    fn the_planted_bugs_of_the_scripts() {
        let (k, a, b): (Arc<str>, Arc<str>, Arc<str>) = (key(), "A".into(), "B".into());
        let (v, w): (Arc<str>, Arc<str>) = ("v".into(), "w".into());
        // HandoffIgnoresLiveness: a dead head stays for ever and nobody is handed the key.
        let mut d = Data::default();
        apply(&mut d, &acquire("v", FenceRead::Skip), T0, id);
        fn dead(e: Enqueued<'_>) -> Enqueued<'_> {
            Enqueued {
                ignore_liveness: true,
                ..e
            }
        }
        d.enqueue(&dead(enq(&k, &a, 1, true)), T0);
        d.enqueue(&dead(enq(&k, &b, 2, true)), T0 + 25_000);
        let at = T0 + 40_000;
        assert_eq!(
            d.release_handing_off(&k, &v, false, at, true),
            Reply::Granted
        );
        assert_eq!(d.live(&k, at), None);
        let refresh = d.enqueue(&dead(enq(&k, &b, 2, false)), at);
        assert!(!refresh.handed, "B never heads");
        assert_eq!(d.live_head(&k, at, true).as_deref(), Some("A"));
        // ConfirmKeepsHandoffExpiry: the handed key keeps its 30 ms.
        let mut d = Data::default();
        d.enqueue(&enq(&k, &a, 1, true), T0);
        let keep = QueuedAcquire {
            keep_ttl: true,
            ..queued(&k, &w, &a, true)
        };
        assert_eq!(d.acquire_queued(&keep, T0 + 10_000), (true, None));
        assert_eq!(d.pttl_ms(&k, T0 + 10_000), 20);
        // FairByArrival: each registration and refresh is scored by arrival here.
        let mut d = Data::default();
        fn arrival(e: Enqueued<'_>) -> Enqueued<'_> {
            Enqueued {
                by_arrival: true,
                ..e
            }
        }
        d.enqueue(&arrival(enq(&k, &a, 7, true)), T0);
        d.enqueue(&arrival(enq(&k, &b, 8, true)), T0);
        d.enqueue(&arrival(enq(&k, &a, 7, false)), T0);
        assert_eq!(d.live_head(&k, T0, false).as_deref(), Some("B"));
    }

    #[tokio::test(start_paused = true)]
    async fn restarts_keep_data_only_when_durable_and_reset_old_connections() {
        let clock = Clock::start();
        for durable in [false, true] {
            let server = SimServer::new(0, durable, clock);
            let op = Request::Op(
                Arc::new(acquire("a", FenceRead::Read)),
                NO_RECORD.into(),
                ScriptBugs::default(),
            );
            let (first, _) = server.serve(None, &op).await.unwrap();
            assert_eq!(server.crash().len(), 1);
            assert_eq!(server.serve(Some(first), &op).await.unwrap_err(), Reset);
            assert_eq!(server.restart(), Some(durable));
            assert_eq!(server.serve(Some(first), &op).await.unwrap_err(), Reset);
            assert_eq!(server.holder("k").is_some(), durable);
            let (second, answer) = server
                .serve(None, &Request::Connect { vitals: true })
                .await
                .unwrap();
            assert_eq!(second, first + 1);
            let Answer::Connected {
                vitals: Some(vitals),
                ..
            } = answer
            else {
                panic!("no vitals");
            };
            assert_eq!(vitals.uptime, Duration::ZERO);
            // An empty master starts a new epoch; a durable one kept its hour-old one.
            assert_eq!(
                vitals
                    .epoch
                    .age()
                    .is_some_and(|age| age >= UP_BEFORE_ORIGIN),
                durable
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_master_serves_late_and_expires_keys_meanwhile() {
        let server = Arc::new(SimServer::new(0, false, Clock::start()));
        let op = Request::Op(
            Arc::new(acquire("a", FenceRead::Skip)),
            NO_RECORD.into(),
            ScriptBugs::default(),
        );
        server.serve(None, &op).await.unwrap();
        assert!(server.pause(true));
        let waiting = {
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                let op = Request::Op(
                    Arc::new(acquire("b", FenceRead::Skip)),
                    NO_RECORD.into(),
                    ScriptBugs::default(),
                );
                let answer = server.serve(None, &op).await;
                (Instant::now(), answer)
            })
        };
        tokio::time::sleep(500 * MS).await;
        let resumed_at = Instant::now();
        assert!(server.pause(false));
        let (served_at, answer) = waiting.await.unwrap();
        assert_eq!(served_at, resumed_at);
        // "a" (100 ms) expired while the process was stopped, so "b" got the key.
        assert!(matches!(
            answer,
            Ok((_, Answer::Reply(Reply::Checked { granted: true, .. })))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn entry_reports_the_value_and_its_expiry_on_the_virtual_clock() {
        let clock = Clock::start();
        let server = SimServer::new(0, false, clock);
        tokio::time::sleep(7 * MS).await;
        let op = Request::Op(
            Arc::new(acquire("a", FenceRead::Skip)),
            NO_RECORD.into(),
            ScriptBugs::default(),
        );
        server.serve(None, &op).await.unwrap();
        let (value, expires) = server.entry("k").unwrap();
        assert_eq!(&*value, "a");
        assert_eq!(expires, clock.origin() + 107 * MS);
        server.jump_clock(30_000);
        assert_eq!(server.entry("k").unwrap().1, clock.origin() + 77 * MS);
        tokio::time::sleep(70 * MS).await;
        assert!(server.entry("k").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_jump_expires_keys_early() {
        let server = SimServer::new(0, false, Clock::start());
        let op = Request::Op(
            Arc::new(acquire("a", FenceRead::Skip)),
            NO_RECORD.into(),
            ScriptBugs::default(),
        );
        server.serve(None, &op).await.unwrap();
        assert!(server.holder("k").is_some());
        server.jump_clock(100_000);
        assert!(server.holder("k").is_none());
    }
}
