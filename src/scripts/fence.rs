//! The fencing scripts: `fence.lua`, the write-back of a token ([`Op::Fence`],
//! docs/design.md §8), with its codec, and `fenced_set.lua`, the storage-side check
//! (`fencing::fenced_set`).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, Request, misrouted, owner_key, parse_number, read, unexpected,
};
use crate::error::MasterError;
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, FenceOutcome, Op, Reply};

/// Fencing write-back; see `fence.lua`.
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FENCE_LUA));

/// Storage-side fencing check; see `fenced_set.lua`.
pub(crate) static FENCED_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(sources::FENCED_SET_LUA));

/// The codec of `fence.lua`.
#[derive(Debug)]
pub(super) struct Fence;

impl Codec for Fence {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        let Op::Fence {
            counter,
            key,
            value,
            token,
        } = op
        else {
            return Err(misrouted("fence", op));
        };
        let script = &*FENCE;
        #[cfg(redquorum_mutants)]
        let script = ctx.pick(
            script,
            Mutant::WritebackNoGuard,
            &super::planted::FENCE_MAX_WRITE.script,
        );
        #[cfg(not(redquorum_mutants))]
        let _ = ctx;
        Ok(Invocation::new(script)
            .key(key)
            .key(counter)
            .key(ctx.record_key)
            .key(owner_key(key))
            .arg(value)
            .arg(token)
            .done())
    }

    /// `{1 written | 0 conflict | -1 not ours, counter before or false, epoch record}`;
    /// the script reads no clock (the reply's time is 0).
    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        if !matches!(op, Op::Fence { .. }) {
            return Err(misrouted("fence", op));
        }
        let (code, before, record): (i64, Option<String>, Option<String>) = read(value)?;
        let outcome = match code {
            1 => FenceOutcome::Written,
            0 => FenceOutcome::Conflict,
            -1 => FenceOutcome::NotOurs,
            other => return Err(unexpected("fence", other)),
        };
        Ok(Reply::Fenced {
            outcome,
            before: before.map(|c| parse_number("fence", &c)).transpose()?,
            epoch: EpochReport { record },
        })
    }
}
