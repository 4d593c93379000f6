//! The Lua scripts, loaded once and run with `EVALSHA` (falling back to loading the script
//! when a master answers `NOSCRIPT`, as a restarted master does).

use std::sync::LazyLock;

use redis::Script;

/// Compare-and-delete plus release notice; see `release.lua`.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("release.lua")));

/// Compare-and-PEXPIRE, re-setting a missing key; see `extend.lua`.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("extend.lua")));

/// The release-notice channel of a lock key.
pub(crate) fn release_channel(key: &str) -> String {
    format!("redquorum:released:{key}")
}
