//! The semaphore's script and its codec: `semaphore.lua` ([`Op::AcquirePermits`],
//! docs/design.md §15), or, planted, `semaphore_count.lua`.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, Request, flag, millis, misrouted, parse_number, read, ttl_of,
    unexpected,
};
use crate::error::{MasterError, MasterErrorKind};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, Op, PermitsOp, Reply};

/// Takes permits of a semaphore, all or none, after checking its stored limit; see
/// `semaphore.lua`.
static SEMAPHORE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SEMAPHORE_LUA));

/// The planted `SemaphoreCountPerMaster`: each master counts the permits it holds; see
/// `semaphore_count.lua`.
#[cfg(redquorum_mutants)]
static SEMAPHORE_COUNT_PER_MASTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(sources::SEMAPHORE_COUNT_LUA));

/// The codec of the semaphore's script.
#[derive(Debug)]
pub(super) struct Semaphore;

impl Codec for Semaphore {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        match op {
            #[cfg(redquorum_mutants)]
            Op::AcquirePermits(p)
                if !p.replace && ctx.planted().is(Mutant::SemaphoreCountPerMaster) =>
            {
                Ok(counted(p, ctx))
            }
            Op::AcquirePermits(p) => Ok(permits(p, ctx)),
            other => Err(misrouted("semaphore", other)),
        }
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::AcquirePermits(p) => taken(p.limit(), value),
            other => Err(misrouted("semaphore", other)),
        }
    }
}

/// `semaphore.lua` taking `p.wanted` (or, with `p.replace`, storing the limit).
fn permits(p: &PermitsOp, ctx: &Context<'_>) -> Request {
    let mut call = Invocation::with_preamble(&SEMAPHORE, ctx, true).key(&p.limit_key);
    for slot in p.slots.iter() {
        call = call.key(slot);
    }
    call = call
        .arg(&p.value)
        .arg(millis(p.ttl))
        .arg(flag(p.fence))
        .arg(&p.owner.client)
        .arg(&p.owner.host)
        .arg(p.owner.pid)
        .arg(&p.owner.label)
        .arg(p.limit())
        .arg(&p.base)
        .arg(if p.replace { "limit" } else { "take" });
    for slot in &p.wanted {
        call = call.arg(slot);
    }
    call.done()
}

/// The reply of `semaphore.lua` (and of `semaphore_count.lua`, answered alike) to a
/// semaphore of `limit`: code, epoch record, the wanted slots' fence
/// counters, the wait, the free slots, detail.
fn taken(limit: usize, value: Value) -> Result<Reply, MasterError> {
    type Answer = (
        i64,
        String,
        Option<Vec<String>>,
        i64,
        Vec<u32>,
        Option<String>,
    );
    let (code, record, fences, wait, free, detail): Answer = read(value)?;
    match code {
        1 | 0 => {}
        -4 => return Err(limit_mismatch(detail.as_deref(), limit)),
        other => return Err(unexpected("semaphore", other)),
    }
    let fences = fences
        .unwrap_or_default()
        .iter()
        .map(|c| match c.as_str() {
            "" => Ok(None),
            c => parse_number("semaphore", c).map(Some),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Permits {
        granted: code == 1,
        epoch: EpochReport {
            record: Some(record),
        },
        fences,
        wait: ttl_of(wait),
        free: free.into_iter().filter(|s| (*s as usize) < limit).collect(),
    })
}

/// The error of a master that holds permits of the semaphore under another limit.
pub(crate) fn limit_mismatch(recorded: Option<&str>, ours: usize) -> MasterError {
    MasterError::new(
        MasterErrorKind::LimitMismatch,
        format!(
            "the semaphore's limit stored here is {}, not {ours}",
            recorded.unwrap_or("another")
        ),
    )
}

/// `semaphore_count.lua`, the planted per-master count, taking `p.wanted.len()` permits
/// named by their holder ([`counted_permits`]).
#[cfg(redquorum_mutants)]
fn counted(p: &PermitsOp, ctx: &Context<'_>) -> Request {
    let mut call = Invocation::with_preamble(&SEMAPHORE_COUNT_PER_MASTER, ctx, true);
    for key in counted_permits(&p.base, &p.value, p.wanted.len()) {
        call = call.key(&key);
    }
    call.arg(&p.value)
        .arg(millis(p.ttl))
        .arg(p.limit())
        .arg(counted_pattern(&p.base))
        .done()
}

/// The permit keys that `value` takes, `count` of them, in the planted design of
/// `Mutant::SemaphoreCountPerMaster` (`--cfg redquorum_mutants`), for the semaphore whose keys
/// start with `base`: named by their holder, not by a slot (see [`counted_pattern`]).
#[cfg(redquorum_mutants)]
pub(crate) fn counted_permits(base: &str, value: &str, count: usize) -> Vec<std::sync::Arc<str>> {
    (0..count)
        .map(|j| format!("{base}c:{value}:{j}").into())
        .collect()
}

/// The `KEYS` pattern of every permit key of [`counted_permits`] of one semaphore.
#[cfg(redquorum_mutants)]
pub(crate) fn counted_pattern(base: &str) -> String {
    format!("{base}c:*")
}
