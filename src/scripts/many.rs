//! The scripts of a lease over several keys and their codec: `acquire_many.lua`
//! ([`Op::AcquireMany`]), `extend_many.lua` ([`Op::ExtendMany`]) and `release_many.lua`
//! ([`Op::ReleaseMany`]), each all or none on a master (docs/design.md §14).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, Request, fence_key, holder_key, millis, misrouted, owner_key,
    parse_number, queue_key, read, unexpected, waiter_prefix, wrong_kind,
};
use crate::error::{MasterError, MasterErrorKind};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, Op, Reply};

/// Several locks at once, all or none; see `acquire_many.lua`.
static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(sources::ACQUIRE_MANY_LUA));

/// Compare-and-PEXPIRE of every key of a lease over several keys, all or none; see
/// `extend_many.lua`.
static EXTEND_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(sources::EXTEND_MANY_LUA));

/// Compare-and-delete of every key of a lease over several keys, each with its hand-off or
/// release notice; see `release_many.lua`.
static RELEASE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RELEASE_MANY_LUA));

/// The codec of the scripts of a lease over several keys.
#[derive(Debug)]
pub(super) struct Many;

impl Codec for Many {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        Ok(match op {
            Op::AcquireMany {
                keys,
                value,
                ttl,
                fence,
                owner,
            } => {
                let script = &*ACQUIRE_MANY;
                #[cfg(redquorum_mutants)]
                let script = ctx.pick(
                    script,
                    Mutant::ManyPartialVote,
                    &super::planted::ACQUIRE_MANY_PARTIAL.script,
                );
                let mut call = Invocation::with_preamble(script, ctx, true)
                    .key(holder_key(ctx.prefix(), value));
                for key in keys {
                    call = call.key(key).key(fence_key(key)).key(owner_key(key));
                }
                call.grant_args(value, *ttl, *fence, Some(owner)).done()
            }
            Op::ExtendMany {
                keys,
                value,
                ttl,
                epoch,
            } => extend_many(ctx, keys, value, *ttl, *epoch),
            Op::ReleaseMany {
                keys,
                value,
                channels,
            } => {
                let mut call = Invocation::new(&RELEASE_MANY);
                for key in keys {
                    call = call.key(key).key(queue_key(key)).key(owner_key(key));
                }
                call = call.arg(value);
                for (key, channel) in keys.iter().zip(channels) {
                    call = call.arg(channel).arg(waiter_prefix(key));
                }
                call.done()
            }
            other => return Err(misrouted("many", other)),
        })
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::AcquireMany { keys, .. } => acquired_many(keys, value),
            Op::ExtendMany { epoch, .. } => super::lock::extended("extend", value, *epoch),
            Op::ReleaseMany { .. } => {
                let (deleted, _missing, held): (i64, i64, i64) = read(value)?;
                Ok(if deleted > 0 {
                    Reply::Granted
                } else if held > 0 {
                    Reply::HeldByOther
                } else {
                    Reply::Missing
                })
            }
            other => Err(misrouted("many", other)),
        }
    }
}

/// `extend_many.lua` for [`Op::ExtendMany`].
fn extend_many(
    ctx: &Context<'_>,
    keys: &[Arc<str>],
    value: &str,
    ttl: Duration,
    epoch: bool,
) -> Request {
    let mut call =
        Invocation::with_preamble(&EXTEND_MANY, ctx, epoch).key(holder_key(ctx.prefix(), value));
    for key in keys {
        call = call.key(key).key(owner_key(key));
    }
    call.arg(value).arg(millis(ttl)).done()
}

/// The reply of `acquire_many.lua` for `keys`: code, epoch record, each
/// key's fence counter, each key's holder's `PTTL` (-3 free; with code -3, the position of
/// the key of another kind), detail.
fn acquired_many(keys: &[Arc<str>], value: Value) -> Result<Reply, MasterError> {
    type Answer = (i64, String, Vec<Option<String>>, Vec<i64>, Option<String>);
    let (code, record, counters, pttls, detail): Answer = read(value)?;
    match code {
        1 | 0 => {}
        -3 => {
            // Which of the keys holds another kind: the script's fourth element.
            let at = pttls
                .first()
                .and_then(|i| usize::try_from(*i).ok())
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| keys.get(i));
            return Err(match at {
                Some(key) => wrong_kind_at(key, detail.as_deref()),
                None => wrong_kind(detail.as_deref()),
            });
        }
        other => return Err(unexpected("acquire_many", other)),
    }
    if counters.len() != keys.len() || pttls.len() != keys.len() {
        return Err(MasterError::new(
            MasterErrorKind::Protocol,
            format!(
                "acquire_many answered for {} keys of {}",
                pttls.len(),
                keys.len()
            ),
        ));
    }
    let fences = counters
        .iter()
        .map(|c| {
            c.as_deref()
                .map(|c| parse_number("acquire_many", c))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let held: Vec<bool> = pttls.iter().map(|p| *p != -3).collect();
    // The longest-held key frees last; a held key without expiry frees never.
    let holder_ttl = pttls
        .iter()
        .filter(|p| **p != -3)
        .map(|p| u64::try_from(*p).ok().map(Duration::from_millis))
        .try_fold(None, |longest: Option<Duration>, ttl| {
            ttl.map(|t| Some(longest.map_or(t, |l| l.max(t))))
        })
        .flatten();
    Ok(Reply::CheckedMany {
        granted: code == 1,
        epoch: EpochReport {
            record: Some(record),
        },
        fences,
        held,
        holder_ttl: holder_ttl.filter(|_| code != 1),
    })
}

/// [`wrong_kind`] for one key of several: names the key, so that the caller of a long
/// list knows which name to change.
fn wrong_kind_at(key: &str, found: Option<&str>) -> MasterError {
    MasterError::new(
        MasterErrorKind::WrongKind,
        format!(
            "the name {key:?} holds a {} here, not a lock: use another name",
            super::kind_shown(found)
        ),
    )
}
