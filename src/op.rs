//! The lock protocol's requests and answers: what a round sends to every master ([`Op`])
//! and what one master answers ([`Reply`]), with their small types. Pure data, no I/O:
//! the master (`master/`) sends an op through its script's codec (`scripts/`), and the
//! simulation's model (`sim/server.rs`) answers it in memory.
//!
//! Layer: a leaf (docs/design.md §10).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Owner, Record};

/// One request of the lock protocol, as sent to every master of a round.
#[derive(Debug)]
pub(crate) enum Op {
    /// `SET key value NX PX ttl` inside `acquire.lua`, which also checks the cluster
    /// record, writes the owner record, and reads the data epoch (restart quarantine), the
    /// fence counter (fencing) and, when refused, the holder's `PTTL` and the ticket
    /// counter of the lock's queue (a queued waiter's place, docs/design.md §17).
    AcquireChecked {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        fence: FenceRead,
        owner: Arc<Owner>,
    },
    /// Acquires a single-key lock as a queued waiter or a fair contender
    /// (`acquire_queued.lua`, docs/design.md §17): the preamble and answer of
    /// [`Op::AcquireChecked`], but `value` is set (with `PX ttl`, never keeping a handed
    /// key's expiry) where the key is free or holds `waiter` (handed to it), and with
    /// `fair` only where no other live waiter is ahead in the queue. Where granted,
    /// `waiter` leaves the queue. With `fair`, the answer carries the ticket counter
    /// ([`Reply::Checked::ticket`]); a refusal because a live waiter is ahead has no
    /// holder TTL.
    AcquireQueued {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        fence: FenceRead,
        owner: Arc<Owner>,
        /// The waiter id of the call (never a lease value); empty for a fair first
        /// attempt, which is not queued yet.
        waiter: Arc<str>,
        fair: bool,
    },
    /// Registers `waiter` in the queue of `key` with `score`, or refreshes its
    /// registration (`enqueue.lua`, docs/design.md §17): with `strict` (a fair
    /// registration's ticket write-back), only where the ticket counter is below `score`,
    /// then raised to it; otherwise always, a `fair` one raising the counter to at least
    /// `score`. Sets the waiter's liveness key (`"<waiter_ttl ms> <channel>"`, expiring
    /// after `waiter_ttl`), keeps the queue at least `2 x waiter_ttl`, and gives a key that
    /// is free or handed to a queued waiter to the live head: to the waiter when it heads
    /// (the holder expired, or the key was handed out of turn), and when it does not, a
    /// key handed out of turn (to this waiter or another behind the head) on to the head,
    /// told on its channel; a free key is left to the head's own registration.
    /// With the data epoch and cluster-record checks of [`Op::AcquireChecked`]. Answered
    /// [`Reply::Enqueued`]; never a lock vote.
    Enqueue {
        key: Arc<str>,
        waiter: Arc<str>,
        score: u64,
        strict: bool,
        fair: bool,
        waiter_ttl: Duration,
        /// The client's hand-off channel.
        channel: Arc<str>,
    },
    /// Removes `waiter` from the queue of `key` and deletes its liveness key; where the
    /// key was handed to it, deletes the key and hands the lock on as [`Op::Release`] does
    /// (`dequeue.lua`). `channel` is the lock's release channel. Answered
    /// [`Reply::Granted`] where a handed key was passed on, else [`Reply::Missing`]. Like
    /// a release, it reaches every master whatever its standing.
    Dequeue {
        key: Arc<str>,
        waiter: Arc<str>,
        channel: Arc<str>,
    },
    /// Takes `wanted` slots of a semaphore, all or none, after checking its stored limit
    /// (`semaphore.lua`, docs/design.md §15); also reads the data epoch, the cluster
    /// record, the fence counters of the slots (with `fence`) and which slots are free.
    AcquirePermits(Box<PermitsOp>),
    /// Several locks at once, all or none (`acquire_many.lua`): every key set as by `SET
    /// key value NX PX ttl` with its owner record where all of them are free, none where
    /// any is held; with the same epoch, cluster record and kind checks as
    /// [`Op::AcquireChecked`], each key's fence counter read (fencing) and each held key's
    /// `PTTL`. `keys` are sorted.
    AcquireMany {
        keys: Vec<Arc<str>>,
        value: Arc<str>,
        ttl: Duration,
        /// Read the fence counters ([`FenceRead::Read`]) or not.
        fence: FenceRead,
        owner: Arc<Owner>,
    },
    /// Compare-and-`PEXPIRE` (never setting a missing key again), see `extend.lua`; with
    /// `epoch`, also reads the data epoch.
    Extend {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        epoch: bool,
    },
    /// Acquires a read-write lock in `mode` (`rw_acquire.lua`), checking the cluster
    /// record and reading the data epoch, the lock's fence counter and, when refused, how
    /// long the holders that refused it live (docs/design.md §16). `key` is the writer key.
    RwAcquire {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        fence: FenceRead,
        owner: Arc<Owner>,
        mode: RwMode,
    },
    /// Extends a read lease: compare-and-`PEXPIRE` of the reader key `key`, as `Extend`
    /// does (answered as it is), keeping the lock `lock`'s reader index, owner record
    /// and readers' mark alive at least as long where it extended (`rw_extend_read.lua`,
    /// docs/design.md §16).
    ExtendRead {
        key: Arc<str>,
        lock: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        epoch: bool,
    },
    /// Turns the write lease holding `value` under `key` into its reader key with the
    /// writer key's remaining expiry, and publishes the release notice (`rw_downgrade.lua`).
    RwDowngrade { key: Arc<str>, value: Arc<str> },
    /// Compare-and-`PEXPIRE` of every key of a lease over several keys, all or none (see
    /// `extend_many.lua`): granted only where every key holds `value`; a master where any
    /// key is missing or held by another value extends none of them. With `epoch`, also
    /// reads the data epoch. Answered as [`Op::Extend`] is.
    ExtendMany {
        keys: Vec<Arc<str>>,
        value: Arc<str>,
        ttl: Duration,
        epoch: bool,
    },
    /// Fencing write-back: raise the counter to `token` where the lock is ours and the
    /// counter is below it, see `fence.lua`. `key` holds the value (a read lease's reader
    /// key); `counter` is the lock's fence counter.
    Fence {
        counter: Arc<str>,
        key: Arc<str>,
        value: Arc<str>,
        token: u64,
    },
    /// Compare-and-delete, then hand-off to the live head of the key's waiter queue
    /// (setting the key to the waiter's id with the waiter's TTL, and notifying it alone)
    /// or, with no live waiter, the release notice on `channel`; see `release.lua`.
    ///
    /// `plain`: `value` is a plain lock's lease value, which has no owner record and is
    /// never a waiter's id, so the script skips both (`false` for every other value: a
    /// writer's, a permit's, a clean-up's, an operator's).
    Release {
        key: Arc<str>,
        value: Arc<str>,
        channel: Arc<str>,
        plain: bool,
    },
    /// Compare-and-delete of every key of a lease over several keys, each key's release
    /// notice on its channel (`channels`, in the order of `keys`), see `release_many.lua`.
    /// Answered [`Reply::Granted`] where a key was deleted, else [`Reply::HeldByOther`]
    /// where one holds another value, else [`Reply::Missing`].
    ReleaseMany {
        keys: Vec<Arc<str>>,
        value: Arc<str>,
        channels: Vec<Arc<str>>,
    },
    /// Sets `key` to `value` with `ttl` where it is missing or holds `value`: the round of
    /// the planted bug `Mutant::ReentryCounter` (`--cfg redquorum_mutants`), which alone sends it,
    /// through the planted `extend.lua` that sets a missing key again; answered as
    /// [`Op::Extend`] is. The product never sets a missing key again.
    #[cfg(redquorum_mutants)]
    ExtendRecreating {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        epoch: bool,
    },
    /// Reads what bootstrapping a cluster must know of a master: its `run_id`, its cluster
    /// record and its data epoch (started if missing).
    Survey,
    /// One `SCAN` step from `cursor` for a key under the prefix other than the records;
    /// with `rw`, for a read-write lock's reader key, reader index or writer intent of a
    /// lock under the prefix (`redquorum:rw:<prefix>...`, docs/design.md §16), which a
    /// non-empty prefix's scan does not reach.
    Scan { cursor: u64, rw: bool },
    /// Writes the cluster record unless one exists, see `stamp.lua`; with `bootstrap`
    /// (the `run_id` and epoch id a survey read on this master), as the bootstrap of that
    /// process, refused if its epoch changed since.
    Stamp {
        record: Box<Record>,
        bootstrap: Option<(String, String)>,
    },
    /// Claims the cluster's bootstrap for `token` (`SET NX PX`), so that two
    /// `init_cluster` calls cannot interleave their writes.
    Claim { token: Arc<str>, ttl: Duration },
    /// Gives up a claim held by `token` (compare-and-delete).
    Unclaim { token: Arc<str> },
    /// Reads one lock, changing nothing (`inspect.lua`): the key's type, value and `PTTL`,
    /// its owner record and fence counter.
    Inspect { key: Arc<str> },
    /// Deletes whatever holds the lock (and its owner record), raises its fence counter and
    /// publishes the release notice on `channel` (`force_unlock.lua`).
    ForceUnlock { key: Arc<str>, channel: Arc<str> },
}

impl Op {
    /// The release of `value` under `key`, with its notice on `channel`; `plain` for a
    /// plain lock's lease value ([`Op::Release`]).
    pub(crate) fn release(key: &Arc<str>, value: &Arc<str>, channel: &Arc<str>, plain: bool) -> Op {
        Op::Release {
            key: Arc::clone(key),
            value: Arc::clone(value),
            channel: Arc::clone(channel),
            plain,
        }
    }

    /// The release of `value` under every key of `keys` (key, channel): the single-key
    /// release ([`Op::release`], `plain` for a plain lock's lease value) for one key,
    /// [`Op::ReleaseMany`] for several.
    pub(crate) fn release_keys(keys: &[(Arc<str>, Arc<str>)], value: &Arc<str>, plain: bool) -> Op {
        match keys {
            [(key, channel)] => Op::release(key, value, channel, plain),
            keys => Op::ReleaseMany {
                keys: keys.iter().map(|(k, _)| Arc::clone(k)).collect(),
                value: Arc::clone(value),
                channels: keys.iter().map(|(_, c)| Arc::clone(c)).collect(),
            },
        }
    }

    /// The holder record a grant of this op sees to (its tag) and the lock's TTL, for the
    /// ops whose script can be told to leave a record known to outlive the lock alone
    /// (`holder.lua`): a single-key lock's acquire, and its confirmation from the queue.
    pub(crate) fn holder(&self) -> Option<(&Arc<str>, Duration)> {
        match self {
            Op::AcquireChecked { owner, ttl, .. } | Op::AcquireQueued { owner, ttl, .. } => {
                Some((&owner.tag, *ttl))
            }
            _ => None,
        }
    }

    /// Whether this op releases a lock: it succeeds wherever the key is no longer ours.
    pub(crate) fn is_release(&self) -> bool {
        matches!(self, Op::Release { .. } | Op::ReleaseMany { .. })
    }

    /// Whether every answer to this op counts, whatever the master's standing (quarantine,
    /// cluster record): a release must reach every master that may hold the key, the
    /// cluster's administration reads and writes records, not locks, and an operator's
    /// inspection and force-unlock must reach every master that may hold the lock.
    pub(crate) fn is_unguarded(&self) -> bool {
        self.is_release()
            || matches!(
                self,
                Op::Survey
                    | Op::Scan { .. }
                    | Op::Stamp { .. }
                    | Op::Claim { .. }
                    | Op::Unclaim { .. }
                    | Op::Inspect { .. }
                    | Op::ForceUnlock { .. }
                    | Op::Dequeue { .. }
            )
    }

    /// The operation's name in traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::AcquireChecked { .. } | Op::AcquireMany { .. } | Op::AcquireQueued { .. } => {
                "acquire"
            }
            Op::Enqueue { .. } => "enqueue",
            Op::Dequeue { .. } => "dequeue",
            Op::AcquirePermits(_) => "acquire_permits",
            Op::RwAcquire {
                mode: RwMode::Read, ..
            } => "acquire_read",
            Op::RwAcquire { .. } => "acquire_write",
            Op::RwDowngrade { .. } => "downgrade",
            Op::Fence { .. } => "fence",
            Op::Extend { .. } | Op::ExtendMany { .. } | Op::ExtendRead { .. } => "extend",
            Op::Release { .. } | Op::ReleaseMany { .. } => "release",
            #[cfg(redquorum_mutants)]
            Op::ExtendRecreating { .. } => "extend",
            Op::Survey => "survey",
            Op::Scan { .. } => "scan",
            Op::Stamp { .. } => "stamp",
            Op::Claim { .. } => "claim",
            Op::Unclaim { .. } => "unclaim",
            Op::Inspect { .. } => "inspect",
            Op::ForceUnlock { .. } => "force_unlock",
        }
    }
}

/// The request of [`Op::AcquirePermits`].
#[derive(Debug)]
pub(crate) struct PermitsOp {
    /// The semaphore's limit record.
    pub(crate) limit_key: Arc<str>,
    /// Every slot key, `0 .. limit`.
    pub(crate) slots: Arc<[Arc<str>]>,
    /// The slot keys' common beginning (slot `i` is it followed by `i`).
    pub(crate) base: Arc<str>,
    /// The slots to take, distinct and below the limit.
    pub(crate) wanted: Vec<u32>,
    /// Store the limit in place of another instead of taking slots: granted where no
    /// permit is live (docs/design.md §15).
    pub(crate) replace: bool,
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    /// Read the wanted slots' fence counters.
    pub(crate) fence: bool,
    pub(crate) owner: Arc<Owner>,
}

impl PermitsOp {
    /// The semaphore's limit, the number of slots.
    pub(crate) fn limit(&self) -> usize {
        self.slots.len()
    }
}

/// The mode of a read-write lock acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RwMode {
    /// A reader: granted with no writer key and no live writer intent.
    Read,
    /// A writer: granted with no writer key and no live reader; while readers are there,
    /// it sets `intent` (one id per acquire call) for `intent_ttl`.
    Write {
        intent: Arc<str>,
        intent_ttl: Duration,
    },
}

/// What `AcquireChecked` reads of the fence counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceRead {
    /// Nothing.
    Skip,
    /// Its value.
    Read,
}

/// What a master said about its data epoch: the record (`"<id>:<created us>"`), read
/// without the server's time. How old an epoch is can only be read at connect (vitals):
/// an epoch first met in a reply counts as new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EpochReport {
    pub(crate) record: Option<String>,
}

/// A master's answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Done as asked: set, extended (or set again), or deleted.
    Granted,
    /// The answer to `Release`: deleted, and the lock handed to the live head of its
    /// waiter queue; `ticket` is the queue's ticket counter then (docs/design.md §17).
    HandedOn { ticket: u64 },
    /// The key holds another value.
    HeldByOther,
    /// The key does not exist.
    Missing,
    /// The key does not exist (the answer to `Extend` with `epoch`).
    Gone { epoch: EpochReport },
    /// The answer to `AcquireChecked`, `AcquireQueued` or `Extend` with `epoch`.
    Checked {
        /// Set (acquire) or extended (extend).
        granted: bool,
        epoch: EpochReport,
        /// The fence counter, when read and present.
        fence: Option<u64>,
        /// When refused: how long the holder's key lives (none when the key is free but
        /// a live waiter is ahead of a fair acquire).
        holder_ttl: Option<Duration>,
        /// The queue's ticket counter (0 when missing), read by a fair `AcquireQueued`
        /// and by a refused `AcquireChecked`; `None` otherwise.
        ticket: Option<u64>,
    },
    /// The answer to `Enqueue`.
    Enqueued {
        /// Registered (or refreshed); `false`: a strict registration found the ticket
        /// counter at or above its score, and wrote nothing.
        written: bool,
        /// The ticket counter: after the write (fair), or the one in conflict (strict).
        counter: Option<u64>,
        /// The key holds the waiter's id on this master (handed to it, by a release or
        /// by this registration because the key was free and the waiter the live head):
        /// a hint to confirm, never a vote.
        handed: bool,
        epoch: EpochReport,
    },
    /// The answer to `AcquirePermits`.
    Permits {
        /// Every wanted slot was set.
        granted: bool,
        epoch: EpochReport,
        /// The wanted slots' fence counters, in the order asked, when read.
        fences: Vec<Option<u64>>,
        /// When refused: after how long enough slots are free on this master, if they are
        /// held (not when other free slots suffice).
        wait: Option<Duration>,
        /// The slots free on this master when it answered (before granting).
        free: Vec<u32>,
    },
    /// The answer to `AcquireMany`.
    CheckedMany {
        /// Every key set (none where this is `false`).
        granted: bool,
        epoch: EpochReport,
        /// Each key's fence counter, when read and present, in the order of the keys.
        fences: Vec<Option<u64>>,
        /// Each key: whether another value held it.
        held: Vec<bool>,
        /// When refused: how long the longest-held of the held keys lives.
        holder_ttl: Option<Duration>,
    },
    /// The answer to `Fence`.
    Fenced {
        outcome: FenceOutcome,
        /// The counter before the write-back (or the one that conflicted).
        before: Option<u64>,
        epoch: EpochReport,
    },
    /// The answer to `Survey`.
    Survey {
        run_id: String,
        record: Option<Box<Record>>,
        /// The data epoch's id.
        epoch: String,
    },
    /// The answer to `Scan`: the next cursor (0 when done) and a key under the prefix that
    /// is not a record, if this step found one.
    Scanned { next: u64, found: Option<String> },
    /// The answer to `Stamp`: what it did, and the fingerprint the master now has.
    Stamped {
        outcome: StampOutcome,
        fingerprint: String,
    },
    /// The answer to `Inspect`.
    Inspected(Box<Inspected>),
    /// The answer to `ForceUnlock`: the value deleted (`None`: nothing held the lock), and
    /// the fence counter after the raise.
    ForceUnlocked {
        removed: Option<String>,
        counter: u64,
    },
}

/// What a `Stamp` did on one master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StampOutcome {
    /// The record was written.
    Written,
    /// A record was there already (its fingerprint is answered).
    Exists,
    /// A bootstrap found another data epoch than its survey: the data was lost since.
    EpochChanged,
}

/// What one master holds for a lock, read at once (`inspect.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    /// The lock key's type (`TYPE`): `none`, `string`, or another kind's.
    pub(crate) kind: String,
    /// Its value, when a string.
    pub(crate) value: Option<String>,
    /// Its `PTTL`: -2 missing, -1 no expiry.
    pub(crate) pttl_ms: i64,
    /// The owner record's fields (empty without one).
    pub(crate) owner: BTreeMap<String, String>,
    /// The fence counter, if any.
    pub(crate) fence: Option<u64>,
    /// The master's wall clock, in ms since the Unix epoch.
    pub(crate) now_ms: u64,
    /// The value is a member of the lock's waiter queue: the key is handed to that
    /// waiter, which has not confirmed it yet (docs/design.md §17).
    pub(crate) queued: bool,
}

/// What a fencing write-back did on one master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceOutcome {
    /// The counter was raised to the token.
    Written,
    /// The counter was already at or above the token.
    Conflict,
    /// The lock does not hold our value there.
    NotOurs,
}

impl Reply {
    /// The epoch this reply read, if any.
    pub(crate) fn epoch(&self) -> Option<&EpochReport> {
        match self {
            Reply::Checked { epoch, .. }
            | Reply::Permits { epoch, .. }
            | Reply::CheckedMany { epoch, .. }
            | Reply::Fenced { epoch, .. }
            | Reply::Enqueued { epoch, .. }
            | Reply::Gone { epoch } => Some(epoch),
            _ => None,
        }
    }
}
