//! The names of the keys and channels the scripts use: lock keys' companions (fence
//! counters, owner records, waiter queues, a read-write lock's readers and intent), this
//! crate's records, and which keys are records rather than locks in use.

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

/// The holder records' common beginning under key prefix `prefix`: a record's key is this
/// followed by its tag.
pub(crate) fn holder_prefix(prefix: &str) -> String {
    format!("{prefix}{RECORD_NAMESPACE}holder:")
}

/// The holder record that lock value `value` names (`holder.lua`): who its client is,
/// written once per client and label, not per lock. A value is `<tag>.<hex>`: its tag is
/// what comes before the last dot, or the whole value when it has none (as `inspect.lua`
/// reads it).
pub(crate) fn holder_key(prefix: &str, value: &str) -> String {
    let tag = value.rsplit_once('.').map_or(value, |(tag, _)| tag);
    format!("{}{tag}", holder_prefix(prefix))
}

/// The owner record of a lock key, which the other kinds of lock keep beside it with its
/// expiry (a read-write lock, a semaphore's permit): it marks the name as theirs.
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

/// What a read-write lock's key holds while readers may hold the lock: the readers' mark,
/// which expires no sooner than any reader (docs/design.md §16). A name held by readers
/// thus has a key, which a mutex's `SET NX` refuses. No lease value or waiter id is it.
pub(crate) const READERS_MARK: &str = "redquorum:readers";

/// The key of one reader of a read-write lock, holding `value`, with its own expiry.
pub(crate) fn reader_key(key: &str, value: &str) -> String {
    format!("{}{value}", reader_prefix(key))
}

/// The writer-intent key of a read-write lock: while it lives, no new reader is granted.
pub(crate) fn intent_key(key: &str) -> String {
    format!("{RW_NAMESPACE}{key}:intent")
}

/// The beginning of every key of semaphore `name` behind the key `prefix`: slot `i` is
/// it followed by `i`, the limit record it followed by `limit` (docs/design.md §15). It
/// lies in the records' namespace, which no lock name reaches.
pub(crate) fn semaphore_base(prefix: &str, name: &str) -> String {
    format!("{prefix}{RECORD_NAMESPACE}sem:{name}:")
}

/// The names under which this crate keeps its own records (epoch, fence counters, owner
/// records, the cluster record): lock keys must not start with it.
pub(crate) const RECORD_NAMESPACE: &str = "redquorum:";

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
mod tests {
    use super::*;

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
            assert!(is_record_key(&format!("{prefix}redquorum:cluster"), prefix));
            assert!(!is_record_key(&format!("{prefix}orders:1"), prefix));
        }
        assert!(is_record_key("redquorum:sem::1", ""));
    }

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
            assert!(is_record_key("redquorum:cluster", prefix));
        }
    }
}
