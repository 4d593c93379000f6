//! The Lua scripts, loaded once and run with `EVALSHA` (falling back to loading the script
//! when a master answers `NOSCRIPT`, as a restarted master does).
//!
//! Layer: a leaf (docs/design.md §10); the Lua sources carry no test-only mode.

use std::sync::LazyLock;

use redis::Script;

/// Compare-and-delete plus hand-off to the next live waiter, or the release notice; see
/// `release.lua`.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
const RELEASE_LUA: &str = concat!(include_str!("queue.lua"), include_str!("release.lua"));

/// Compare-and-PEXPIRE, never setting a missing key again; see `extend.lua`.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
const EXTEND_LUA: &str = include_str!("extend.lua");

/// Compare-and-PEXPIRE of every key of a lease over several keys, all or none; see
/// `extend_many.lua`.
pub(crate) static EXTEND_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_MANY_LUA));
const EXTEND_MANY_LUA: &str = include_str!("extend_many.lua");

/// Compare-and-delete of every key of a lease over several keys, each with its release
/// notice; see `release_many.lua`.
pub(crate) static RELEASE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_MANY_LUA));
const RELEASE_MANY_LUA: &str = concat!(include_str!("queue.lua"), include_str!("release_many.lua"));

/// `SET NX PX` reading the data epoch and the fence counter; see `acquire.lua`.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
const ACQUIRE_LUA: &str = include_str!("acquire.lua");

/// Acquire as a queued waiter (confirming a hand-off) or a fair contender; see
/// `acquire_queued.lua`.
pub(crate) static ACQUIRE_QUEUED: LazyLock<Script> =
    LazyLock::new(|| Script::new(ACQUIRE_QUEUED_LUA));
const ACQUIRE_QUEUED_LUA: &str = concat!(
    include_str!("queue.lua"),
    include_str!("acquire_queued.lua")
);

/// Registers or refreshes a waiter in a lock's queue; see `enqueue.lua`.
pub(crate) static ENQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(ENQUEUE_LUA));
const ENQUEUE_LUA: &str = concat!(include_str!("queue.lua"), include_str!("enqueue.lua"));

/// Removes a waiter from a lock's queue, passing on a key handed to it; see `dequeue.lua`.
pub(crate) static DEQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(DEQUEUE_LUA));
const DEQUEUE_LUA: &str = concat!(include_str!("queue.lua"), include_str!("dequeue.lua"));

/// Several locks at once, all or none; see `acquire_many.lua`.
pub(crate) static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_MANY_LUA));
const ACQUIRE_MANY_LUA: &str = include_str!("acquire_many.lua");
/// Acquires a read-write lock in one mode; see `rw_acquire.lua`.
pub(crate) static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_ACQUIRE_LUA));
const RW_ACQUIRE_LUA: &str = include_str!("rw_acquire.lua");

/// Extends a read lease, keeping the reader index alive; see `rw_extend_read.lua`.
pub(crate) static RW_EXTEND_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(RW_EXTEND_READ_LUA));
const RW_EXTEND_READ_LUA: &str = include_str!("rw_extend_read.lua");

/// Turns a write lease into a read lease; see `rw_downgrade.lua`.
pub(crate) static RW_DOWNGRADE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_DOWNGRADE_LUA));
const RW_DOWNGRADE_LUA: &str = include_str!("rw_downgrade.lua");

/// Reads (or starts) the data epoch, run with `EVAL` while connecting; see `epoch.lua`.
/// Takes permits of a semaphore, all or none, after checking its stored limit
/// (docs/design.md §15).
pub(crate) static SEMAPHORE: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_LUA));
const SEMAPHORE_LUA: &str = include_str!("semaphore.lua");

/// The planted `SemaphoreCountPerMaster`: each master counts the permits it holds.
#[cfg(feature = "mutants")]
pub(crate) static SEMAPHORE_COUNT_PER_MASTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(SEMAPHORE_COUNT_LUA));
#[cfg(feature = "mutants")]
const SEMAPHORE_COUNT_LUA: &str = include_str!("semaphore_count.lua");

pub(crate) const EPOCH_SOURCE: &str = include_str!("epoch.lua");

/// Writes the cluster record unless one exists; see `stamp.lua`.
pub(crate) static STAMP: LazyLock<Script> = LazyLock::new(|| Script::new(STAMP_LUA));
const STAMP_LUA: &str = include_str!("stamp.lua");

/// Fencing write-back; see `fence.lua`.
pub(crate) static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_LUA));
const FENCE_LUA: &str = include_str!("fence.lua");

/// Reads one lock for inspection, changing nothing; see `inspect.lua`.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT_LUA));
const INSPECT_LUA: &str = include_str!("inspect.lua");

/// Deletes whatever holds a lock and raises its fence counter; see `force_unlock.lua`.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_UNLOCK_LUA));
const FORCE_UNLOCK_LUA: &str = concat!(include_str!("queue.lua"), include_str!("force_unlock.lua"));

/// Storage-side fencing check; see `fenced_set.lua`.
pub(crate) static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_SET_LUA));
const FENCED_SET_LUA: &str = include_str!("fenced_set.lua");

/// The scripts a lock master runs, to load on every (re)connect: a master without them
/// answers `NOSCRIPT`, and the fallback (load, then run again) takes two more round trips
/// and lets commands sent later on the connection run first.
pub(crate) fn master_scripts() -> Vec<&'static str> {
    #[cfg_attr(not(feature = "mutants"), allow(unused_mut))]
    let mut scripts = vec![
        RELEASE_LUA,
        EXTEND_LUA,
        ACQUIRE_LUA,
        SEMAPHORE_LUA,
        EPOCH_SOURCE,
        FENCE_LUA,
        STAMP_LUA,
        INSPECT_LUA,
        FORCE_UNLOCK_LUA,
        RW_ACQUIRE_LUA,
        RW_DOWNGRADE_LUA,
        RW_EXTEND_READ_LUA,
        EXTEND_MANY_LUA,
        RELEASE_MANY_LUA,
        ACQUIRE_MANY_LUA,
        ACQUIRE_QUEUED_LUA,
        ENQUEUE_LUA,
        DEQUEUE_LUA,
    ];
    #[cfg(feature = "mutants")]
    scripts.extend(planted::SOURCES.iter().map(|s| s.as_str()));
    #[cfg(feature = "mutants")]
    scripts.push(SEMAPHORE_COUNT_LUA);
    scripts
}

/// The planted bugs' scripts (feature `mutants`): each is a product script with one
/// condition changed, derived here so that the product scripts carry no mutant mode.
#[cfg(feature = "mutants")]
mod planted {
    use std::sync::LazyLock;

    /// `acquire.lua` whose fence read increments the counter where the lock was granted:
    /// the one-round token of `Mutant::OneRoundToken`.
    pub(super) static ACQUIRE_ONE_ROUND_TOKEN: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::ACQUIRE_LUA,
            "  fence = redis.call('GET', KEYS[3])",
            "  if ok then fence = tostring(redis.call('INCR', KEYS[3])) end",
        )
    });

    /// `fence.lua` accepting a counter equal to the token: the max-write of
    /// `Mutant::WritebackNoGuard`.
    pub(super) static FENCE_MAX_WRITE: LazyLock<String> =
        LazyLock::new(|| changed(super::FENCE_LUA, "if c < t then", "if c <= t then"));

    /// `extend.lua` setting a missing key again with the caller's value, as extensions
    /// once did: `Mutant::ExtendRecreates`, which undoes a force-unlock.
    pub(super) static EXTEND_RECREATES: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::EXTEND_LUA,
            "  return {0, epoch, now, false}",
            "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return {1, epoch, now, false}",
        )
    });

    /// `acquire_many.lua` granting each free key on its own and answering granted if it
    /// granted any: the partial vote of `Mutant::ManyPartialVote`.
    pub(super) static ACQUIRE_MANY_PARTIAL: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::ACQUIRE_MANY_LUA,
            "  if all and pttls[i] == -3 then",
            "  if pttls[i] == -3 then",
        )
    });

    /// `rw_acquire.lua` granting a reader while a writer's intent is live:
    /// `Mutant::ReaderIgnoresIntent`.
    pub(super) static RW_ACQUIRE_IGNORES_INTENT: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::RW_ACQUIRE_LUA,
            "  elseif intent > 0 then",
            "  elseif false then",
        )
    });

    /// The line of `live_head` (`queue.lua`, joined in front of every script that keeps
    /// a queue) that checks a waiter's liveness key, and its planted replacement: the
    /// first member is the head, live or not, and nobody is pruned
    /// (`Mutant::HandoffIgnoresLiveness`).
    const LIVENESS_CHECK: &str = "      if redis.call('EXISTS', prefix .. m) == 1 then";
    const LIVENESS_IGNORED: &str = "      if true then";

    /// The liveness check of `source` ignored.
    fn ignoring_liveness(source: &str) -> String {
        changed(source, LIVENESS_CHECK, LIVENESS_IGNORED)
    }

    /// `release.lua` handing the lock to the queue's first member, live or not.
    pub(super) static RELEASE_IGNORES_LIVENESS: LazyLock<String> =
        LazyLock::new(|| ignoring_liveness(super::RELEASE_LUA));

    /// `dequeue.lua` handing the lock to the queue's first member, live or not.
    pub(super) static DEQUEUE_IGNORES_LIVENESS: LazyLock<String> =
        LazyLock::new(|| ignoring_liveness(super::DEQUEUE_LUA));

    /// `enqueue.lua` taking the queue's first member as its head, live or not.
    pub(super) static ENQUEUE_IGNORES_LIVENESS: LazyLock<String> =
        LazyLock::new(|| ignoring_liveness(super::ENQUEUE_LUA));

    /// `acquire_queued.lua` taking the queue's first member as its head, live or not.
    pub(super) static ACQUIRE_QUEUED_IGNORES_LIVENESS: LazyLock<String> =
        LazyLock::new(|| ignoring_liveness(super::ACQUIRE_QUEUED_LUA));

    /// `acquire_queued.lua` keeping a handed key's expiry (`KEEPTTL`) when it confirms:
    /// `Mutant::ConfirmKeepsHandoffExpiry`.
    pub(super) static ACQUIRE_QUEUED_KEEPS_EXPIRY: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::ACQUIRE_QUEUED_LUA,
            "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])",
            "  if current then redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') else \
             redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end",
        )
    });

    /// `enqueue.lua` scoring a fair waiter by its arrival on the master (the master's own
    /// ticket counter, once per waiter) instead of by its client's ticket:
    /// `Mutant::FairByArrival`.
    pub(super) static ENQUEUE_BY_ARRIVAL: LazyLock<String> = LazyLock::new(|| {
        changed(
            super::ENQUEUE_LUA,
            "local score, strict = ARGV[2], ARGV[3]",
            "local score, strict = ARGV[2], ARGV[3] if ARGV[6] == '1' then score, strict = \
             redis.call('ZSCORE', KEYS[4], ARGV[1]) or tostring(redis.call('INCR', KEYS[5])), \
             '0' end",
        )
    });

    pub(super) static SOURCES: LazyLock<[String; 11]> = LazyLock::new(|| {
        [
            ACQUIRE_ONE_ROUND_TOKEN.clone(),
            FENCE_MAX_WRITE.clone(),
            EXTEND_RECREATES.clone(),
            ACQUIRE_MANY_PARTIAL.clone(),
            RW_ACQUIRE_IGNORES_INTENT.clone(),
            RELEASE_IGNORES_LIVENESS.clone(),
            DEQUEUE_IGNORES_LIVENESS.clone(),
            ENQUEUE_IGNORES_LIVENESS.clone(),
            ACQUIRE_QUEUED_IGNORES_LIVENESS.clone(),
            ACQUIRE_QUEUED_KEEPS_EXPIRY.clone(),
            ENQUEUE_BY_ARRIVAL.clone(),
        ]
    });

    /// `source` with `from` replaced by `to`; a script that no longer contains `from`
    /// gives an empty variant, which a test refuses.
    fn changed(source: &str, from: &str, to: &str) -> String {
        if source.contains(from) {
            source.replacen(from, to, 1)
        } else {
            String::new()
        }
    }
}

/// [`ACQUIRE`] counting a one-round token (`Mutant::OneRoundToken`).
#[cfg(feature = "mutants")]
pub(crate) static ACQUIRE_ONE_ROUND_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ACQUIRE_ONE_ROUND_TOKEN));

/// [`FENCE`] with a max-write (`Mutant::WritebackNoGuard`).
#[cfg(feature = "mutants")]
pub(crate) static FENCE_MAX_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::FENCE_MAX_WRITE));

/// [`ACQUIRE_MANY`] with a partial vote (`Mutant::ManyPartialVote`).
#[cfg(feature = "mutants")]
pub(crate) static ACQUIRE_MANY_PARTIAL: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ACQUIRE_MANY_PARTIAL));

/// [`EXTEND`] setting a missing key again (`Mutant::ExtendRecreates`).
#[cfg(feature = "mutants")]
pub(crate) static EXTEND_RECREATES: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::EXTEND_RECREATES));

/// [`RW_ACQUIRE`] letting readers in past a writer's intent (`Mutant::ReaderIgnoresIntent`).
#[cfg(feature = "mutants")]
pub(crate) static RW_ACQUIRE_IGNORES_INTENT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::RW_ACQUIRE_IGNORES_INTENT));

/// [`RELEASE`] handing on to a dead waiter (`Mutant::HandoffIgnoresLiveness`).
#[cfg(feature = "mutants")]
pub(crate) static RELEASE_IGNORES_LIVENESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::RELEASE_IGNORES_LIVENESS));

/// [`DEQUEUE`] handing on to a dead waiter (`Mutant::HandoffIgnoresLiveness`).
#[cfg(feature = "mutants")]
pub(crate) static DEQUEUE_IGNORES_LIVENESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::DEQUEUE_IGNORES_LIVENESS));

/// [`ENQUEUE`] taking a dead waiter for the head (`Mutant::HandoffIgnoresLiveness`).
#[cfg(feature = "mutants")]
pub(crate) static ENQUEUE_IGNORES_LIVENESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ENQUEUE_IGNORES_LIVENESS));

/// [`ACQUIRE_QUEUED`] taking a dead waiter for the head (`Mutant::HandoffIgnoresLiveness`).
#[cfg(feature = "mutants")]
pub(crate) static ACQUIRE_QUEUED_IGNORES_LIVENESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ACQUIRE_QUEUED_IGNORES_LIVENESS));

/// [`ACQUIRE_QUEUED`] keeping a handed key's expiry (`Mutant::ConfirmKeepsHandoffExpiry`).
#[cfg(feature = "mutants")]
pub(crate) static ACQUIRE_QUEUED_KEEPS_EXPIRY: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ACQUIRE_QUEUED_KEEPS_EXPIRY));

/// [`ENQUEUE`] scoring fair waiters by arrival (`Mutant::FairByArrival`).
#[cfg(feature = "mutants")]
pub(crate) static ENQUEUE_BY_ARRIVAL: LazyLock<Script> =
    LazyLock::new(|| Script::new(&planted::ENQUEUE_BY_ARRIVAL));

#[cfg(all(test, feature = "mutants"))]
mod tests {
    #[test]
    fn each_planted_script_differs_from_its_product_script_in_one_place() {
        for (planted, product) in [
            (
                &*super::planted::ACQUIRE_ONE_ROUND_TOKEN,
                super::ACQUIRE_LUA,
            ),
            (&*super::planted::FENCE_MAX_WRITE, super::FENCE_LUA),
            (&*super::planted::EXTEND_RECREATES, super::EXTEND_LUA),
            (
                &*super::planted::ACQUIRE_MANY_PARTIAL,
                super::ACQUIRE_MANY_LUA,
            ),
            (
                &*super::planted::RW_ACQUIRE_IGNORES_INTENT,
                super::RW_ACQUIRE_LUA,
            ),
            (
                &*super::planted::RELEASE_IGNORES_LIVENESS,
                super::RELEASE_LUA,
            ),
            (
                &*super::planted::DEQUEUE_IGNORES_LIVENESS,
                super::DEQUEUE_LUA,
            ),
            (
                &*super::planted::ENQUEUE_IGNORES_LIVENESS,
                super::ENQUEUE_LUA,
            ),
            (
                &*super::planted::ACQUIRE_QUEUED_IGNORES_LIVENESS,
                super::ACQUIRE_QUEUED_LUA,
            ),
            (
                &*super::planted::ACQUIRE_QUEUED_KEEPS_EXPIRY,
                super::ACQUIRE_QUEUED_LUA,
            ),
            (&*super::planted::ENQUEUE_BY_ARRIVAL, super::ENQUEUE_LUA),
        ] {
            assert!(
                !planted.is_empty(),
                "the product script changed: update the variant"
            );
            assert_ne!(planted, product);
            let differing = planted.lines().zip(product.lines()).filter(|(a, b)| a != b);
            assert_eq!(differing.count(), 1);
        }
    }
}

/// The key of the data-epoch record on every master.
pub(crate) const EPOCH_KEY: &str = "redquorum:epoch";

/// The release-notice channel of a lock key.
pub(crate) fn release_channel(key: &str) -> String {
    format!("redquorum:released:{key}")
}

/// The fence counter of a lock key.
pub(crate) fn fence_key(key: &str) -> String {
    format!("redquorum:fence:{key}")
}

/// The waiter queue of a lock key: a sorted set of waiter ids by score (docs/design.md
/// §17).
pub(crate) fn queue_key(key: &str) -> String {
    format!("{RECORD_NAMESPACE}queue:{key}")
}

/// The prefix of a lock key's waiters' liveness keys: a waiter's key is this and its id.
pub(crate) fn waiter_prefix(key: &str) -> String {
    format!("{RECORD_NAMESPACE}waiter:{key}:")
}

/// The liveness key of waiter `waiter` of a lock key: `"<waiter ttl ms> <channel>"`,
/// expiring with the waiter's TTL.
pub(crate) fn waiter_key(key: &str, waiter: &str) -> String {
    format!("{}{waiter}", waiter_prefix(key))
}

/// The fair lock's ticket counter of a lock key: never decreases, no expiry.
pub(crate) fn ticket_key(key: &str) -> String {
    format!("{RECORD_NAMESPACE}ticket:{key}")
}

/// The hand-off channel of the client whose owner records name it `client`: the payload
/// of a notice is the waiter id handed the lock.
pub(crate) fn handoff_channel(client: &str) -> String {
    format!("{RECORD_NAMESPACE}handoff:{client}")
}

/// The owner record of a lock key (who holds it, since when), with the lock's expiry.
pub(crate) fn owner_key(key: &str) -> String {
    format!("redquorum:owner:{key}")
}

/// The set of a read-write lock's reader values (docs/design.md §16).
pub(crate) fn reader_index_key(key: &str) -> String {
    format!("{RW_NAMESPACE}{key}:readers")
}

/// The lock key of a read-write lock's reader key holding `value` (the inverse of
/// [`reader_key`]), if `key` is one.
pub(crate) fn lock_of_reader<'a>(key: &'a str, value: &str) -> Option<&'a str> {
    key.strip_prefix(RW_NAMESPACE)?
        .strip_suffix(value)?
        .strip_suffix(":reader:")
}

/// The prefix of a read-write lock's reader keys: a reader's key is this and its value.
pub(crate) fn reader_prefix(key: &str) -> String {
    format!("{RW_NAMESPACE}{key}:reader:")
}

/// The key of one reader of a read-write lock, holding `value`, with its own expiry.
pub(crate) fn reader_key(key: &str, value: &str) -> String {
    format!("{}{value}", reader_prefix(key))
}

/// The writer-intent key of a read-write lock: while it lives, no new reader is granted.
pub(crate) fn intent_key(key: &str) -> String {
    format!("{RW_NAMESPACE}{key}:intent")
}

/// The names under which this crate keeps its own records (epoch, fence counters, owner
/// records, the cluster record): lock keys must not start with it.
/// The beginning of every key of semaphore `name` behind the key `prefix`: slot `i` is
/// it followed by `i`, the limit record it followed by `limit` (docs/design.md §15). It
/// lies in the records' namespace, which no lock name reaches.
pub(crate) fn semaphore_base(prefix: &str, name: &str) -> String {
    format!("{prefix}{RECORD_NAMESPACE}sem:{name}:")
}

pub(crate) const RECORD_NAMESPACE: &str = "redquorum:";

/// The permit keys that `value` takes, `count` of them, in the planted design of
/// `Mutant::SemaphoreCountPerMaster` (feature `mutants`), for the semaphore whose keys
/// start with `base`: named by their holder, not by a slot (see [`counted_pattern`]).
#[cfg(feature = "mutants")]
pub(crate) fn counted_permits(base: &str, value: &str, count: usize) -> Vec<std::sync::Arc<str>> {
    (0..count)
        .map(|j| format!("{base}c:{value}:{j}").into())
        .collect()
}

/// The `KEYS` pattern of every permit key of [`counted_permits`] of one semaphore.
#[cfg(feature = "mutants")]
pub(crate) fn counted_pattern(base: &str) -> String {
    format!("{base}c:*")
}

/// Where a read-write lock keeps its reader keys, reader index and writer intent
/// (`redquorum:rw:<lock key>...`): in the records' namespace, but keys in use, not records
/// (docs/design.md §11, §16).
pub(crate) const RW_NAMESPACE: &str = "redquorum:rw:";

/// Whether `key`, found under `prefix`, is one of this crate's records rather than a lock.
/// A semaphore's slot (`redquorum:sem:<name>:<digits>`) lies in the records' namespace but
/// is a lock key: a live one is a lease in use (docs/design.md §11, §15). So are a
/// read-write lock's reader keys, reader index and writer intent (§16).
pub(crate) fn is_record_key(key: &str, prefix: &str) -> bool {
    let in_namespace = |k: &str| {
        k.starts_with(RECORD_NAMESPACE) && !is_slot_key(k) && !k.starts_with(RW_NAMESPACE)
    };
    in_namespace(key) || key.strip_prefix(prefix).is_some_and(in_namespace)
}

/// Whether `key` (without the key prefix) is a semaphore's slot: `redquorum:sem:` then a
/// name, a colon and the slot's number.
fn is_slot_key(key: &str) -> bool {
    key.strip_prefix(RECORD_NAMESPACE)
        .and_then(|rest| rest.strip_prefix("sem:"))
        .and_then(|rest| rest.rsplit_once(':'))
        .is_some_and(|(name, slot)| {
            !name.is_empty() && !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit())
        })
}

#[cfg(test)]
mod keys {
    use super::{is_record_key, semaphore_base};

    #[test]
    fn a_semaphore_slot_is_a_lock_key_and_its_limit_a_record() {
        for prefix in ["", "app:"] {
            let base = semaphore_base(prefix, "jobs:a");
            assert!(!is_record_key(&format!("{base}0"), prefix));
            assert!(!is_record_key(&format!("{base}63"), prefix));
            assert!(is_record_key(&format!("{base}limit"), prefix));
            assert!(is_record_key(
                &format!("{prefix}redquorum:owner:{base}0"),
                prefix
            ));
            assert!(is_record_key(&format!("{prefix}redquorum:epoch"), prefix));
            assert!(!is_record_key(&format!("{prefix}orders:1"), prefix));
        }
        assert!(is_record_key("redquorum:sem::1", ""));
    }
}

#[cfg(test)]
mod queue_keys {
    use super::{handoff_channel, is_record_key, queue_key, ticket_key, waiter_key};

    /// A waiter's queue membership, liveness key and the fair lock's ticket counter are
    /// bookkeeping, not locks in use: `init_cluster`'s survey does not count them (a key
    /// handed to a waiter is the lock key itself, and counts while it lives, at most one
    /// waiter TTL).
    #[test]
    fn the_queue_s_keys_are_records_not_locks_in_use() {
        for prefix in ["", "app:"] {
            let lock = format!("{prefix}orders:1");
            for key in [
                queue_key(&lock),
                waiter_key(&lock, "0123abcd"),
                ticket_key(&lock),
            ] {
                assert!(key.starts_with("redquorum:"), "{key}");
                assert!(is_record_key(&key, prefix), "{key}");
            }
            assert!(!is_record_key(&lock, prefix));
        }
        assert_eq!(handoff_channel("c1"), "redquorum:handoff:c1");
    }
}

#[cfg(test)]
mod rw_keys {
    use super::{fence_key, intent_key, is_record_key, owner_key, reader_index_key, reader_key};

    #[test]
    fn a_rwlock_s_readers_index_and_intent_are_keys_in_use_not_records() {
        for prefix in ["", "app:"] {
            let lock = format!("{prefix}config");
            for key in [
                reader_key(&lock, "v1"),
                reader_index_key(&lock),
                intent_key(&lock),
            ] {
                assert!(!is_record_key(&key, prefix), "{key}");
            }
            assert!(is_record_key(&owner_key(&lock), prefix));
            assert!(is_record_key(&fence_key(&lock), prefix));
            assert!(is_record_key("redquorum:epoch", prefix));
        }
    }
}
