//! The read-write lock's scripts and their codec: `rw_acquire.lua` ([`Op::RwAcquire`]),
//! `rw_extend_read.lua` ([`Op::ExtendRead`]) and `rw_downgrade.lua` ([`Op::RwDowngrade`])
//! (docs/design.md §16).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, READERS_MARK, Request, fence_key, intent_key, millis, misrouted,
    owner_key, read, reader_index_key, reader_key, reader_prefix, release_channel, unexpected,
};
use crate::error::{MasterError, MasterErrorKind};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, Op, Reply, RwMode};

/// The most readers `rw_acquire.lua` admits on one lock at once, on a master: a reader
/// beyond them is refused as it would be by a writer. The writer's script visits every
/// reader of the lock, so the bound keeps it short (`limits::MAX_READERS`).
pub(crate) const MAX_READERS: usize = 64;

/// Acquires a read-write lock in one mode; see `rw_acquire.lua`.
static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RW_ACQUIRE_LUA));

/// Extends a read lease, keeping the reader index alive; see `rw_extend_read.lua`.
static RW_EXTEND_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(sources::RW_EXTEND_READ_LUA));

/// Turns a write lease into a read lease; see `rw_downgrade.lua`.
static RW_DOWNGRADE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RW_DOWNGRADE_LUA));

/// The codec of the read-write lock's scripts.
#[derive(Debug)]
pub(super) struct Rw;

impl Codec for Rw {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        Ok(match op {
            Op::RwAcquire {
                key,
                value,
                ttl,
                fence,
                owner,
                mode,
            } => {
                let script = &*RW_ACQUIRE;
                #[cfg(redquorum_mutants)]
                let script = ctx.pick(
                    script,
                    Mutant::ReaderIgnoresIntent,
                    &super::planted::RW_ACQUIRE_IGNORES_INTENT.script,
                );
                let (letter, intent, intent_ttl) = match mode {
                    RwMode::Read => ("r", "", 0),
                    RwMode::Write { intent, intent_ttl } => ("w", &**intent, millis(*intent_ttl)),
                };
                Invocation::with_preamble(script, ctx, true)
                    .key(key)
                    .key(fence_key(key))
                    .key(owner_key(key))
                    .key(reader_index_key(key))
                    .key(intent_key(key))
                    .key(reader_prefix(key))
                    .grant_args(value, *ttl, *fence, Some(owner))
                    .arg(letter)
                    .arg(intent)
                    .arg(intent_ttl)
                    .arg(MAX_READERS)
                    .arg(READERS_MARK)
                    .done()
            }
            Op::ExtendRead {
                key,
                lock,
                value,
                ttl,
                epoch,
            } => Invocation::with_preamble(&RW_EXTEND_READ, ctx, *epoch)
                .key(key)
                .key(reader_index_key(lock))
                .key(owner_key(lock))
                .key(lock)
                .arg(value)
                .arg(millis(*ttl))
                .arg(READERS_MARK)
                .done(),
            Op::RwDowngrade { key, value } => Invocation::with_preamble(&RW_DOWNGRADE, ctx, true)
                .key(key)
                .key(owner_key(key))
                .key(reader_index_key(key))
                .key(reader_key(key, value))
                .arg(value)
                .arg(release_channel(key))
                .arg(READERS_MARK)
                .done(),
            other => return Err(misrouted("read-write lock", other)),
        })
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::RwAcquire { .. } => rw_acquired(value),
            Op::ExtendRead { epoch, .. } => super::lock::extended("extend", value, *epoch),
            Op::RwDowngrade { .. } => downgraded(value),
            other => Err(misrouted("read-write lock", other)),
        }
    }
}

/// The reply of `rw_acquire.lua`: code, epoch record, fence counter, the
/// refusing holders' `PTTL` (or -3), detail.
fn rw_acquired(value: Value) -> Result<Reply, MasterError> {
    type Answer = (i64, String, Option<String>, i64, Option<String>);
    let (code, record, counter, pttl, detail): Answer = read(value)?;
    if code == -3 {
        return Err(wrong_kind_for_rwlock(detail.as_deref()));
    }
    super::lock::checked(code, record, counter, pttl, None)
}

/// The reply of `rw_downgrade.lua`: `{1 converted | 0 missing | -1 held by another value,
/// epoch, false}`.
fn downgraded(value: Value) -> Result<Reply, MasterError> {
    let (code, record, _): (i64, Option<String>, Option<String>) = read(value)?;
    let epoch = EpochReport { record };
    match code {
        1 | -1 => Ok(Reply::Checked {
            granted: code == 1,
            epoch,
            fence: None,
            holder_ttl: None,
            ticket: None,
        }),
        0 => Ok(Reply::Gone { epoch }),
        other => Err(unexpected("downgrade", other)),
    }
}

/// The error of `rw_acquire.lua` finding another kind of lock under the name.
fn wrong_kind_for_rwlock(found: Option<&str>) -> MasterError {
    let found = match found {
        Some("lock") => "mutex (a lock taken with acquire)",
        Some(other) => other,
        None => "value of another kind",
    };
    MasterError::new(
        MasterErrorKind::WrongKind,
        format!("the name holds a {found} here, not a read-write lock: use another name"),
    )
}
