//! The source of every script as a master runs it: its own file behind the parts it
//! shares with others, joined at compile time, and written once. The tests and the
//! benches include this file too (`#[path]`), so that their raw calls run exactly the
//! library's scripts, with the same hashes.

/// A lock script's source: the preamble every lock script starts with (`epoch.lua`, the
/// data epoch read from the cluster record, which holds it, and started where missing
/// with the id `ARGV[1]`; then `cluster.lua`, the record's check against the fingerprint
/// `ARGV[2]`), then the parts named, in order: the functions a script shares with others
/// (`queue.lua`'s, `holder.lua`'s, `value.lua`'s), and last the script's own file. Each
/// script's own `KEYS` and `ARGV` come after the preamble's.
macro_rules! lock_script {
    ($($part:literal),+) => {
        concat!(
            include_str!("epoch.lua"),
            include_str!("cluster.lua"),
            $(include_str!($part)),+
        )
    };
}

/// `SET NX PX` reading the data epoch and the fence counter.
pub(crate) const ACQUIRE_LUA: &str = lock_script!("holder.lua", "acquire.lua");
/// Acquire as a queued waiter (confirming a hand-off) or a fair contender.
pub(crate) const ACQUIRE_QUEUED_LUA: &str =
    lock_script!("queue.lua", "holder.lua", "acquire_queued.lua");
/// Compare-and-PEXPIRE, never setting a missing key again.
pub(crate) const EXTEND_LUA: &str = lock_script!("value.lua", "extend.lua");
/// Compare-and-delete plus hand-off to the next live waiter, or the release notice.
pub(crate) const RELEASE_LUA: &str = concat!(
    include_str!("queue.lua"),
    include_str!("value.lua"),
    include_str!("release.lua")
);

/// Several locks at once, all or none.
pub(crate) const ACQUIRE_MANY_LUA: &str = lock_script!("holder.lua", "acquire_many.lua");
/// Compare-and-PEXPIRE of every key of a lease over several keys, all or none.
pub(crate) const EXTEND_MANY_LUA: &str = lock_script!("value.lua", "extend_many.lua");
/// Compare-and-delete of every key of a lease over several keys, each with its hand-off or
/// release notice.
pub(crate) const RELEASE_MANY_LUA: &str = concat!(
    include_str!("queue.lua"),
    include_str!("value.lua"),
    include_str!("release_many.lua")
);

/// Registers or refreshes a waiter in a lock's queue.
pub(crate) const ENQUEUE_LUA: &str = lock_script!("queue.lua", "enqueue.lua");
/// Removes a waiter from a lock's queue, passing on a key handed to it.
pub(crate) const DEQUEUE_LUA: &str = concat!(
    include_str!("queue.lua"),
    include_str!("value.lua"),
    include_str!("dequeue.lua")
);

/// Acquires a read-write lock in one mode.
pub(crate) const RW_ACQUIRE_LUA: &str = lock_script!("rw_acquire.lua");
/// Extends a read lease, keeping the reader index alive.
pub(crate) const RW_EXTEND_READ_LUA: &str = lock_script!("value.lua", "rw_extend_read.lua");
/// Turns a write lease into a read lease.
pub(crate) const RW_DOWNGRADE_LUA: &str = lock_script!("value.lua", "rw_downgrade.lua");

/// Takes permits of a semaphore, all or none, after checking its stored limit.
pub(crate) const SEMAPHORE_LUA: &str = lock_script!("semaphore.lua");
/// The planted `SemaphoreCountPerMaster`: each master counts the permits it holds (sent
/// only with `--cfg redquorum_mutants`; the tests check its preamble with the others').
#[cfg_attr(not(redquorum_mutants), allow(dead_code))]
pub(crate) const SEMAPHORE_COUNT_LUA: &str = lock_script!("semaphore_count.lua");

/// The fencing write-back.
pub(crate) const FENCE_LUA: &str = concat!(include_str!("value.lua"), include_str!("fence.lua"));
/// The storage-side fencing check.
pub(crate) const FENCED_SET_LUA: &str = include_str!("fenced_set.lua");

/// Reads (or starts) the data epoch, run with `EVAL` while connecting: `epoch.lua`, the
/// preamble's first part, then the server's time, from which the epoch's age is read
/// (`KEYS[1]` the cluster record, which holds the data epoch, `ARGV[1]` an id for a new
/// epoch). Returns `{epoch record, server time us}`.
pub(crate) const EPOCH_SOURCE: &str = concat!(
    include_str!("epoch.lua"),
    "local t = redis.call('TIME')\n",
    "return {epoch, t[1] .. string.format('%06d', t[2])}\n"
);
/// Writes the cluster record unless one exists.
pub(crate) const STAMP_LUA: &str = include_str!("stamp.lua");
/// Reads one lock for inspection, changing nothing.
pub(crate) const INSPECT_LUA: &str = include_str!("inspect.lua");
/// Deletes whatever holds a lock and raises its fence counter.
pub(crate) const FORCE_UNLOCK_LUA: &str =
    concat!(include_str!("queue.lua"), include_str!("force_unlock.lua"));
