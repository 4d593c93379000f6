//! The waiter queue's scripts and their codec: `enqueue.lua` ([`Op::Enqueue`]) and
//! `dequeue.lua` ([`Op::Dequeue`]), each with `queue.lua` (`live_head`, `hand_on`, shared
//! with the scripts that hand a lock on) joined in front (docs/design.md §17).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, Request, flag, millis, misrouted, owner_key, parse_number,
    queue_key, read, ticket_key, unexpected, waiter_key, waiter_prefix, wrong_kind,
};
use crate::error::MasterError;
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, Op, Reply};

/// Registers or refreshes a waiter in a lock's queue; see `enqueue.lua`.
static ENQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::ENQUEUE_LUA));

/// Removes a waiter from a lock's queue, passing on a key handed to it; see `dequeue.lua`.
static DEQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::DEQUEUE_LUA));

/// The codec of the waiter queue's scripts.
#[derive(Debug)]
pub(super) struct Queue;

impl Codec for Queue {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        match op {
            Op::Enqueue {
                key,
                waiter,
                score,
                strict,
                fair,
                waiter_ttl,
                channel,
            } => {
                let script = &*ENQUEUE;
                #[cfg(redquorum_mutants)]
                let script = ctx.pick(
                    ctx.pick(
                        script,
                        Mutant::HandoffIgnoresLiveness,
                        &super::planted::ENQUEUE_IGNORES_LIVENESS.script,
                    ),
                    Mutant::FairByArrival,
                    &super::planted::ENQUEUE_BY_ARRIVAL.script,
                );
                Ok(Invocation::with_preamble(script, ctx, true)
                    .key(key)
                    .key(queue_key(key))
                    .key(ticket_key(key))
                    .key(waiter_key(key, waiter))
                    .key(owner_key(key))
                    .arg(waiter)
                    .arg(score)
                    .arg(flag(*strict))
                    .arg(millis(*waiter_ttl))
                    .arg(channel)
                    .arg(flag(*fair))
                    .arg(waiter_prefix(key))
                    .done())
            }
            Op::Dequeue {
                key,
                waiter,
                channel,
            } => {
                let script = &*DEQUEUE;
                #[cfg(redquorum_mutants)]
                let script = ctx.pick(
                    script,
                    Mutant::HandoffIgnoresLiveness,
                    &super::planted::DEQUEUE_IGNORES_LIVENESS.script,
                );
                Ok(Invocation::new(script)
                    .key(key)
                    .key(queue_key(key))
                    .key(waiter_key(key, waiter))
                    .arg(waiter)
                    .arg(channel)
                    .arg(waiter_prefix(key))
                    .done())
            }
            other => Err(misrouted("queue", other)),
        }
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::Enqueue { .. } => enqueued(value),
            Op::Dequeue { .. } => match read::<i64>(value)? {
                1 => Ok(Reply::Granted),
                0 => Ok(Reply::Missing),
                other => Err(unexpected("dequeue", other)),
            },
            other => Err(misrouted("queue", other)),
        }
    }
}

/// The reply of `enqueue.lua`: code, epoch record, ticket counter, handed, detail.
fn enqueued(value: Value) -> Result<Reply, MasterError> {
    type Answer = (i64, String, Option<String>, i64, Option<String>);
    let (code, record, counter, handed, detail): Answer = read(value)?;
    match code {
        1 | 0 => {}
        -3 => return Err(wrong_kind(detail.as_deref())),
        other => return Err(unexpected("enqueue", other)),
    }
    Ok(Reply::Enqueued {
        written: code == 1,
        counter: counter.map(|c| parse_number("enqueue", &c)).transpose()?,
        handed: handed == 1,
        epoch: EpochReport {
            record: Some(record),
        },
    })
}
