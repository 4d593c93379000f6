//! The Lua scripts a master runs, and their codecs.
//!
//! Each script family has one small pure module beside its `.lua` files: keys and
//! arguments in (an [`Op`]), the request a master is sent out (a script with its keys and
//! arguments, or a plain command: [`Request`]), and the master's answer in, a typed
//! [`Reply`] or [`MasterError`] out. No I/O and no connection: the master sends what a
//! codec builds and hands its answer back, in one place whatever the operation
//! (`master/`), and the codecs are tested here without a server.
//!
//! Scripts run with `EVALSHA`; the master loads them on every (re)connect, and a master
//! that answers `NOSCRIPT` (restarted since) is sent the script and asked again. Shared Lua
//! (the preamble `epoch.lua` and `cluster.lua`, `queue.lua`'s `live_head` and `hand_on`,
//! `holder.lua`'s `hold`, `value.lua`'s `value`) is written once and joined in front of the
//! scripts that call it at compile time, which every supported Redis runs (no Redis
//! Functions). The joins are listed once, in `sources.rs`, which the tests and the
//! benches include too, so that their raw calls run exactly these sources.
//!
//! With `--cfg redquorum_mutants`, a codec picks a planted variant of its script where the
//! client plants its bug ([`Context`]); the scripts themselves carry no test-only mode.
//!
//! Layer: a leaf (docs/design.md §10).

use redis::{Script, Value};

use crate::cluster::View;
use crate::error::{MasterError, MasterErrorKind};
#[cfg(redquorum_mutants)]
use crate::mutants::{Mutant, Planted};
use crate::op::{Op, Reply};

mod admin;
mod fence;
mod keys;
mod lock;
mod many;
#[cfg(redquorum_mutants)]
mod planted;
mod queue;
mod rw;
mod semaphore;
mod sources;

pub(crate) use admin::{stamp, stamped};
pub(crate) use fence::FENCED_SET;
pub(crate) use keys::*;
pub(crate) use rw::MAX_READERS;
#[cfg(redquorum_mutants)]
pub(crate) use semaphore::counted_permits;
#[cfg(test)]
pub(crate) use semaphore::limit_mismatch;
pub(crate) use sources::EPOCH_SOURCE;

/// What a codec needs to know of the client and the master besides the op.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    /// The cluster record's key on the master (under the client's key prefix).
    pub(crate) record_key: &'a str,
    /// The client's view of its cluster: its key prefix, and its id.
    pub(crate) view: &'a View,
    /// The cluster fingerprint the client knows (empty while it knows no record).
    pub(crate) fingerprint: &'a str,
    /// An id for a data epoch that the script may start: the building master's own, which
    /// each other master replaces with its own (`Invocation::evalsha`).
    pub(crate) epoch_id: &'a str,
    /// Whether a script that grants a lock must see to the client's holder record; `false`
    /// where the master's record is known to outlive the lock ([`HOLDER_KNOWN`]): the
    /// holder's fields are sent empty, and the script leaves the record alone.
    pub(crate) hold: bool,
}

/// How long after a grant that saw to its holder record a client counts on that record
/// on that master: `holder.lua` leaves it at least half an hour, less five minutes for a
/// master's clock that runs fast.
pub(crate) const HOLDER_KNOWN: std::time::Duration = std::time::Duration::from_secs(25 * 60);

impl Context<'_> {
    /// The client's key prefix.
    fn prefix(&self) -> &str {
        &self.view.terms().prefix
    }

    /// The client's planted bug, if any (`--cfg redquorum_mutants`): a codec sends its
    /// planted variant.
    #[cfg(redquorum_mutants)]
    fn planted(&self) -> Planted {
        crate::mutants::planted(self.view.client())
    }

    /// `script`, or `variant` where the client plants `mutant`.
    #[cfg(redquorum_mutants)]
    fn pick(
        &self,
        script: &'static Script,
        mutant: Mutant,
        variant: &'static Script,
    ) -> &'static Script {
        if self.planted().is(mutant) {
            variant
        } else {
            script
        }
    }
}

/// One request to a master, as a codec builds it.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// A script with its keys and arguments.
    Script(Invocation),
    /// A plain command.
    Command(redis::Cmd),
}

impl Request {
    /// Whether `value`, this request's answer, is the refusal of a script that checks the
    /// caller's cluster fingerprint (`-2`, docs/design.md §11): the master's record is not
    /// the one the caller knows.
    pub(crate) fn record_differs(&self, value: &Value) -> bool {
        match (self, value) {
            (Request::Script(call), Value::Array(items)) if call.checks_record => {
                matches!(items.first(), Some(Value::Int(-2)))
            }
            _ => false,
        }
    }
}

/// A script with its keys (`KEYS`) and arguments (`ARGV`), in order.
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
    /// The script starts with the preamble, which refuses a caller whose cluster
    /// fingerprint is not the record's.
    checks_record: bool,
    /// `ARGV[1]` is the id for a data epoch the script may start: it differs from master
    /// to master ([`evalsha`](Self::evalsha)).
    starts_epochs: bool,
}

impl Invocation {
    /// `script`, with no keys or arguments yet.
    fn new(script: &'static Script) -> Self {
        // Sized for the lock scripts' keys and arguments: one allocation each.
        Self {
            script,
            keys: Vec::with_capacity(8),
            args: Vec::with_capacity(16),
            checks_record: false,
            starts_epochs: false,
        }
    }

    /// Whether the request carries an id for a data epoch, which each master gets its own
    /// of ([`evalsha`](Self::evalsha)).
    pub(crate) fn starts_epochs(&self) -> bool {
        self.starts_epochs
    }

    /// `EVALSHA` built straight from the keys and arguments (one copy of them, where a
    /// `ScriptInvocation` makes two more; sized at once), with `epoch_id` as the id for a
    /// data epoch where the request carries one (`ARGV[1]`, the preamble's slot).
    pub(crate) fn evalsha(&self, epoch_id: &str) -> redis::Cmd {
        let count = self.keys.len() + self.args.len();
        let bytes: usize = self.keys.iter().chain(&self.args).map(String::len).sum();
        let mut evalsha = redis::Cmd::with_capacity(count + 3, bytes + epoch_id.len() + 64);
        evalsha
            .arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys);
        match (self.starts_epochs, self.args.split_first()) {
            (true, Some((_, rest))) => evalsha.arg(epoch_id).arg(rest),
            _ => evalsha.arg(&self.args),
        };
        evalsha
    }

    /// `script`, a lock script, with the preamble's keys and arguments (the same slots in
    /// every lock script): `KEYS[1]` the cluster record (with the data epoch), `ARGV[1]` an
    /// id for a new epoch (with `epoch`; empty, the epoch is not read), `ARGV[2]` the caller's cluster fingerprint. Its answer may be the preamble's `-2`.
    fn with_preamble(script: &'static Script, ctx: &Context<'_>, epoch: bool) -> Self {
        Self {
            checks_record: true,
            starts_epochs: epoch,
            ..Self::new(script)
        }
        .key(ctx.record_key)
        .arg(if epoch { ctx.epoch_id } else { "" })
        .arg(ctx.fingerprint)
    }

    fn key(mut self, key: impl Key) -> Self {
        self.keys.push(key.into_key());
        self
    }

    fn arg(mut self, arg: impl ToString) -> Self {
        self.args.push(arg.to_string());
        self
    }

    fn done(self) -> Request {
        Request::Script(self)
    }

    /// The arguments every granting lock script takes after its keys, in this order: the
    /// lease value, its TTL in ms, whether to read the fence counter, and the owner
    /// (client id, host, process id, label) for its owner or holder record; empty without
    /// an owner, where the holder record is known to outlive the lock (`holder.lua` then
    /// leaves it alone).
    fn grant_args(
        self,
        value: &str,
        ttl: std::time::Duration,
        fence: crate::op::FenceRead,
        owner: Option<&crate::cluster::Owner>,
    ) -> Self {
        let granted = self
            .arg(value)
            .arg(millis(ttl))
            .arg(flag(fence == crate::op::FenceRead::Read));
        match owner {
            Some(owner) => granted
                .arg(&owner.client)
                .arg(&owner.host)
                .arg(owner.pid)
                .arg(&owner.label),
            None => granted.arg("").arg("").arg("").arg(""),
        }
    }
}

/// A script's key: a `String` built for it is moved in, a borrowed name copied once.
trait Key {
    fn into_key(self) -> String;
}

impl Key for String {
    fn into_key(self) -> String {
        self
    }
}

impl Key for &str {
    fn into_key(self) -> String {
        self.to_owned()
    }
}

impl Key for &String {
    fn into_key(self) -> String {
        self.clone()
    }
}

impl Key for &std::sync::Arc<str> {
    fn into_key(self) -> String {
        self.to_string()
    }
}

/// One script family's codec.
pub(crate) trait Codec: Sync {
    /// The request that carries `op` from a client in `ctx`.
    ///
    /// # Errors
    /// An op of another family (a misrouted op: a bug).
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError>;

    /// The reply to `op` that the master's answer `value` gives, once the fingerprint
    /// check passed ([`Request::record_differs`]).
    ///
    /// # Errors
    /// An answer the lock protocol does not define ([`MasterErrorKind::Protocol`]), or
    /// one that refuses the op for good (another kind of lock under the name, a
    /// semaphore's other limit).
    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError>;
}

/// The codec of `op`'s script family; `None` for the reads the master makes itself (a
/// survey's several commands, a scan whose keys it filters).
pub(crate) fn codec(op: &Op) -> Option<&'static dyn Codec> {
    Some(match op {
        Op::AcquireChecked { .. }
        | Op::AcquireQueued { .. }
        | Op::Extend { .. }
        | Op::Release { .. } => &lock::Lock,
        #[cfg(redquorum_mutants)]
        Op::ExtendRecreating { .. } => &lock::Lock,
        Op::Enqueue { .. } | Op::Dequeue { .. } => &queue::Queue,
        Op::AcquireMany { .. } | Op::ExtendMany { .. } | Op::ReleaseMany { .. } => &many::Many,
        Op::RwAcquire { .. } | Op::ExtendRead { .. } | Op::RwDowngrade { .. } => &rw::Rw,
        Op::AcquirePermits(_) => &semaphore::Semaphore,
        Op::Fence { .. } => &fence::Fence,
        Op::Stamp { .. }
        | Op::Claim { .. }
        | Op::Unclaim { .. }
        | Op::Inspect { .. }
        | Op::ForceUnlock { .. } => &admin::Admin,
        Op::Survey | Op::Scan { .. } => return None,
    })
}

/// The scripts a lock master runs, to load on every (re)connect: a master without them
/// answers `NOSCRIPT`, and the fallback (load, then run again) takes two more round trips
/// and lets commands sent later on the connection run first.
pub(crate) fn master_scripts() -> Vec<&'static str> {
    vec![
        sources::RELEASE_LUA,
        sources::EXTEND_LUA,
        sources::ACQUIRE_LUA,
        sources::SEMAPHORE_LUA,
        EPOCH_SOURCE,
        sources::FENCE_LUA,
        sources::STAMP_LUA,
        sources::INSPECT_LUA,
        sources::FORCE_UNLOCK_LUA,
        sources::RW_ACQUIRE_LUA,
        sources::RW_DOWNGRADE_LUA,
        sources::RW_EXTEND_READ_LUA,
        sources::EXTEND_MANY_LUA,
        sources::RELEASE_MANY_LUA,
        sources::ACQUIRE_MANY_LUA,
        sources::ACQUIRE_QUEUED_LUA,
        sources::ENQUEUE_LUA,
        sources::DEQUEUE_LUA,
    ]
}

/// The planted variants of the scripts that a client planting `planted` sends (feature
/// `mutants`), which its masters load with [`master_scripts`]: none for a client that
/// plants no script bug.
#[cfg(redquorum_mutants)]
pub(crate) fn planted_scripts(planted: &Planted) -> Vec<&'static str> {
    planted::sources(planted)
}

/// The misrouted op's error: `family`'s codec was given an op of another family.
fn misrouted(family: &str, op: &Op) -> MasterError {
    MasterError::new(
        MasterErrorKind::Other,
        format!(
            "the {family} scripts' codec was given a {} request",
            op.name()
        ),
    )
}

/// `value` read as `T` (a tuple of the script's answer, typically).
fn read<T: redis::FromRedisValue>(value: Value) -> Result<T, MasterError> {
    redis::from_redis_value(value).map_err(|e| MasterError::from_redis(e.into()))
}

/// A number in a script's answer, which Lua hands over as a string.
pub(crate) fn parse_number(script: &str, text: &str) -> Result<u64, MasterError> {
    text.parse().map_err(|_| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!("{script} script answered {text:?} where a number belongs"),
        )
    })
}

/// A script's code that the lock protocol does not define.
fn unexpected(script: &str, code: i64) -> MasterError {
    MasterError::new(
        MasterErrorKind::Protocol,
        format!("{script} script answered {code}, which the lock protocol does not define"),
    )
}

/// Whole milliseconds for `PX`, at least 1 (Redis rejects `PX 0`).
fn millis(ttl: std::time::Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// `'1'` or `'0'`, a script's flag.
fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// A `PTTL` (or a marker below zero) as a time to live, if it is one.
fn ttl_of(pttl: i64) -> Option<std::time::Duration> {
    u64::try_from(pttl)
        .ok()
        .map(std::time::Duration::from_millis)
}

/// The error of a lock script that found another kind of lock under the name.
fn wrong_kind(found: Option<&str>) -> MasterError {
    MasterError::new(
        MasterErrorKind::WrongKind,
        format!(
            "the name holds a {} here, not a lock: use another name",
            kind_shown(found)
        ),
    )
}

/// A kind a lock script found under a name (a Redis type, or an owner record's kind), as
/// the errors name it.
fn kind_shown(found: Option<&str>) -> &str {
    match found {
        Some("rwlock") => "read-write lock",
        Some(other) => other,
        None => "value of another kind",
    }
}

#[cfg(test)]
mod tests;
