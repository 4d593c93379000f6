//! The single-key lock's scripts and their codec: `acquire.lua` ([`Op::AcquireChecked`]),
//! `acquire_queued.lua` ([`Op::AcquireQueued`]), `extend.lua` ([`Op::Extend`]) and
//! `release.lua` ([`Op::Release`]).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, Request, fence_key, flag, holder_key, millis, misrouted, owner_key,
    parse_number, queue_key, read, ticket_key, ttl_of, unexpected, waiter_prefix, wrong_kind,
};
use crate::cluster::Owner;
use crate::error::MasterError;
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::op::{EpochReport, FenceRead, Op, Reply};

/// `SET NX PX` reading the data epoch and the fence counter; see `acquire.lua`.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::ACQUIRE_LUA));

/// Acquire as a queued waiter (confirming a hand-off) or a fair contender; see
/// `acquire_queued.lua`.
static ACQUIRE_QUEUED: LazyLock<Script> =
    LazyLock::new(|| Script::new(sources::ACQUIRE_QUEUED_LUA));

/// Compare-and-PEXPIRE, never setting a missing key again; see `extend.lua`.
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(sources::EXTEND_LUA));

/// Compare-and-delete plus hand-off to the next live waiter, or the release notice; see
/// `release.lua`.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RELEASE_LUA));

/// The codec of the single-key lock's scripts.
#[derive(Debug)]
pub(super) struct Lock;

impl Codec for Lock {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        Ok(match op {
            Op::AcquireChecked {
                key,
                value,
                ttl,
                fence,
                owner,
            } => acquire(ctx, (key, value, *ttl, *fence, owner)),
            Op::AcquireQueued {
                key,
                value,
                ttl,
                fence,
                owner,
                waiter,
                fair,
            } => acquire_queued(ctx, (key, value, *ttl, *fence, owner), waiter, *fair),
            Op::Extend {
                key,
                value,
                ttl,
                epoch,
            } => {
                let script = &*EXTEND;
                #[cfg(redquorum_mutants)]
                let script = ctx.pick(
                    script,
                    Mutant::ExtendRecreates,
                    &super::planted::EXTEND_RECREATES.script,
                );
                extend(script, ctx, (key, value, *ttl, *epoch))
            }
            #[cfg(redquorum_mutants)]
            Op::ExtendRecreating {
                key,
                value,
                ttl,
                epoch,
            } => extend(
                &super::planted::EXTEND_RECREATES.script,
                ctx,
                (key, value, *ttl, *epoch),
            ),
            Op::Release {
                key,
                value,
                channel,
                plain,
            } => release(ctx, (key, value, channel), *plain),
            other => return Err(misrouted("lock", other)),
        })
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::AcquireChecked { .. } | Op::AcquireQueued { .. } => acquired(value),
            Op::Extend { epoch, .. } => extended("extend", value, *epoch),
            #[cfg(redquorum_mutants)]
            Op::ExtendRecreating { epoch, .. } => extended("extend", value, *epoch),
            Op::Release { .. } => released(value),
            other => Err(misrouted("lock", other)),
        }
    }
}

/// What every acquire of one key sends: key, value, TTL, fence read, owner record.
type Grant<'a> = (&'a str, &'a str, Duration, FenceRead, &'a Owner);

/// `acquire.lua` (or, planted, its one-round token) for [`Op::AcquireChecked`].
fn acquire(ctx: &Context<'_>, (key, value, ttl, fence, owner): Grant<'_>) -> Request {
    let script = &*ACQUIRE;
    #[cfg(redquorum_mutants)]
    let script = match fence {
        FenceRead::Read => ctx.pick(
            script,
            Mutant::OneRoundToken,
            &super::planted::ACQUIRE_ONE_ROUND_TOKEN.script,
        ),
        FenceRead::Skip => script,
    };
    Invocation::with_preamble(script, ctx, true)
        .key(key)
        .key(fence_key(key))
        .key(owner_key(key))
        .key(ticket_key(key))
        .key(holder_key(ctx.prefix(), value))
        .grant_args(value, ttl, fence, ctx.hold.then_some(owner))
        .done()
}

/// `acquire_queued.lua` (or a planted variant) for [`Op::AcquireQueued`].
fn acquire_queued(
    ctx: &Context<'_>,
    (key, value, ttl, fence, owner): Grant<'_>,
    waiter: &str,
    fair: bool,
) -> Request {
    let script = &*ACQUIRE_QUEUED;
    #[cfg(redquorum_mutants)]
    let script = ctx.pick(
        ctx.pick(
            script,
            Mutant::HandoffIgnoresLiveness,
            &super::planted::ACQUIRE_QUEUED_IGNORES_LIVENESS.script,
        ),
        Mutant::ConfirmKeepsHandoffExpiry,
        &super::planted::ACQUIRE_QUEUED_KEEPS_EXPIRY.script,
    );
    Invocation::with_preamble(script, ctx, true)
        .key(key)
        .key(fence_key(key))
        .key(owner_key(key))
        .key(queue_key(key))
        .key(ticket_key(key))
        .key(holder_key(ctx.prefix(), value))
        .grant_args(value, ttl, fence, ctx.hold.then_some(owner))
        .arg(waiter)
        .arg(flag(fair))
        .arg(waiter_prefix(key))
        .done()
}

/// The answer of `acquire.lua` and `acquire_queued.lua`: code, epoch record, fence
/// counter, holder's `PTTL` (or a marker), detail, ticket counter.
type Acquired = (
    i64,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);

/// The reply of `acquire.lua` or `acquire_queued.lua`. A grant of `acquire.lua` is the
/// short `{1, epoch record}`, or `{1, epoch record, fence counter}` with the fence read.
fn acquired(value: Value) -> Result<Reply, MasterError> {
    let len = match &value {
        Value::Array(items) => items.len(),
        _ => 0,
    };
    if len == 2 || len == 3 {
        let (code, record, counter) = if len == 2 {
            let (code, record): (i64, String) = read(value)?;
            (code, record, None)
        } else {
            read::<(i64, String, Option<String>)>(value)?
        };
        if code != 1 {
            return Err(unexpected("acquire", code));
        }
        return checked(code, record, counter, -3, None);
    }
    let (code, record, counter, pttl, detail, ticket): Acquired = read(value)?;
    if code == -3 {
        return Err(wrong_kind(detail.as_deref()));
    }
    checked(code, record, counter, pttl, ticket)
}

/// The [`Reply::Checked`] of a lock script that answered `code` (1 granted, 0 refused)
/// with the master's epoch record, the fence counter, the holder's `PTTL` and
/// the ticket counter.
pub(super) fn checked(
    code: i64,
    record: String,
    counter: Option<String>,
    pttl: i64,
    ticket: Option<String>,
) -> Result<Reply, MasterError> {
    if code != 1 && code != 0 {
        return Err(unexpected("acquire", code));
    }
    Ok(Reply::Checked {
        granted: code == 1,
        epoch: EpochReport {
            record: Some(record),
        },
        fence: counter.map(|c| parse_number("acquire", &c)).transpose()?,
        holder_ttl: ttl_of(pttl),
        ticket: ticket.map(|c| parse_number("acquire", &c)).transpose()?,
    })
}

/// `extend.lua` (or `script`, its planted variant) for one key, reading the data epoch
/// with `epoch`.
fn extend(
    script: &'static Script,
    ctx: &Context<'_>,
    (key, value, ttl, epoch): (&str, &str, Duration, bool),
) -> Request {
    Invocation::with_preamble(script, ctx, epoch)
        .key(key)
        .key(holder_key(ctx.prefix(), value))
        .key(owner_key(key))
        .arg(value)
        .arg(millis(ttl))
        .done()
}

/// The reply of an extension script (`extend.lua`, `extend_many.lua`,
/// `rw_extend_read.lua`), `script` in errors: `{1 extended | 0 missing | -1 held by
/// another value, epoch or false, false}`; with `epoch`, the reply carries the epoch read.
pub(super) fn extended(script: &str, value: Value, epoch: bool) -> Result<Reply, MasterError> {
    let (code, record, _): (i64, Option<String>, Option<String>) = read(value)?;
    let granted = match code {
        1 => Some(true),
        0 => None,
        -1 => Some(false),
        other => return Err(unexpected(script, other)),
    };
    let report = EpochReport { record };
    Ok(match (granted, epoch) {
        (None, false) => Reply::Missing,
        (None, true) => Reply::Gone { epoch: report },
        (Some(true), false) => Reply::Granted,
        (Some(false), false) => Reply::HeldByOther,
        (Some(granted), true) => Reply::Checked {
            granted,
            epoch: report,
            fence: None,
            holder_ttl: None,
            ticket: None,
        },
    })
}

/// `release.lua` (or a planted variant: a plain `DEL`, or a hand-off to a dead waiter)
/// for [`Op::Release`].
fn release(ctx: &Context<'_>, (key, value, channel): (&str, &str, &str), plain: bool) -> Request {
    #[cfg(redquorum_mutants)]
    if ctx.planted().is(Mutant::PlainDelRelease) {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        return Request::Command(del);
    }
    let script = &*RELEASE;
    #[cfg(redquorum_mutants)]
    let script = ctx.pick(
        script,
        Mutant::HandoffIgnoresLiveness,
        &super::planted::RELEASE_IGNORES_LIVENESS.script,
    );
    #[cfg(not(redquorum_mutants))]
    let _ = ctx;
    release_of(script, (key, value, channel), plain)
}

/// `script` (`release.lua` or a variant) releasing `value` under `key`, with its notice on
/// `channel`; `plain` for a plain lock's lease value (no owner record, no waiter's id).
pub(super) fn release_of(
    script: &'static Script,
    (key, value, channel): (&str, &str, &str),
    plain: bool,
) -> Request {
    Invocation::new(script)
        .key(key)
        .key(queue_key(key))
        .key(owner_key(key))
        .key(ticket_key(key))
        .arg(value)
        .arg(channel)
        .arg(waiter_prefix(key))
        .arg(flag(plain))
        .done()
}

/// The reply of `release.lua`: 1 deleted, 0 missing, -1 held by another value (a plain
/// `DEL` answers 1 or 0 alike); `{1, ticket counter}` deleted and handed on.
pub(super) fn released(value: Value) -> Result<Reply, MasterError> {
    if let Value::Array(_) = value {
        let (code, ticket): (i64, String) = read(value)?;
        return match code {
            1 => Ok(Reply::HandedOn {
                ticket: parse_number("release", &ticket)?,
            }),
            other => Err(unexpected("release", other)),
        };
    }
    match read::<i64>(value)? {
        1 => Ok(Reply::Granted),
        0 => Ok(Reply::Missing),
        -1 => Ok(Reply::HeldByOther),
        other => Err(unexpected("release", other)),
    }
}
