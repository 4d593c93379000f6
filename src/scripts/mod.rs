//! The Lua scripts, loaded once and run with `EVALSHA` (falling back to loading the script
//! when a master answers `NOSCRIPT`, as a restarted master does).

use std::sync::LazyLock;

use redis::Script;

/// Compare-and-delete plus release notice; see `release.lua`.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
const RELEASE_LUA: &str = include_str!("release.lua");

/// Compare-and-PEXPIRE, re-setting a missing key; see `extend.lua`.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
const EXTEND_LUA: &str = include_str!("extend.lua");

/// `SET NX PX` reading the data epoch and the fence counter; see `acquire.lua`.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
const ACQUIRE_LUA: &str = include_str!("acquire.lua");

/// Reads (or starts) the data epoch, run with `EVAL` while connecting; see `epoch.lua`.
pub(crate) const EPOCH_SOURCE: &str = include_str!("epoch.lua");

/// Fencing write-back; see `fence.lua`.
pub(crate) static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_LUA));
const FENCE_LUA: &str = include_str!("fence.lua");

/// Storage-side fencing check; see `fenced_set.lua`.
pub(crate) static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_SET_LUA));
const FENCED_SET_LUA: &str = include_str!("fenced_set.lua");

/// The scripts a lock master runs, to load on every (re)connect: a master without them
/// answers `NOSCRIPT`, and the fallback (load, then run again) takes two more round trips
/// and lets commands sent later on the connection run first.
pub(crate) const MASTER_SCRIPTS: [&str; 5] = [
    RELEASE_LUA,
    EXTEND_LUA,
    ACQUIRE_LUA,
    EPOCH_SOURCE,
    FENCE_LUA,
];

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
