//! The scripts and commands of operating a cluster, with their codec: the cluster record
//! (`stamp.lua`, [`Op::Stamp`]; docs/design.md §11), the bootstrap's claim
//! ([`Op::Claim`], [`Op::Unclaim`]), an operator's inspection (`inspect.lua`,
//! [`Op::Inspect`]) and force-unlock (`force_unlock.lua`, [`Op::ForceUnlock`]), and the
//! data epoch read at connect (`epoch.lua`).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Script, Value};

use super::sources;
use super::{
    Codec, Context, Invocation, RECORD_NAMESPACE, Request, fence_key, holder_prefix, millis,
    misrouted, owner_key, parse_number, queue_key, read, release_channel, unexpected,
    waiter_prefix, wrong_kind,
};
use crate::cluster::{self, Record};
use crate::error::MasterError;
use crate::op::{Inspected, Op, Reply, StampOutcome};

/// Writes the cluster record unless one exists; see `stamp.lua`.
static STAMP: LazyLock<Script> = LazyLock::new(|| Script::new(sources::STAMP_LUA));

/// Reads one lock for inspection, changing nothing; see `inspect.lua`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(sources::INSPECT_LUA));

/// Deletes whatever holds a lock and raises its fence counter; see `force_unlock.lua`.
static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FORCE_UNLOCK_LUA));

/// The codec of the cluster's administration.
#[derive(Debug)]
pub(super) struct Admin;

impl Codec for Admin {
    fn encode(&self, op: &Op, ctx: &Context<'_>) -> Result<Request, MasterError> {
        Ok(match op {
            Op::Stamp { record, bootstrap } => stamp(record, bootstrap.as_ref()),
            Op::Claim { token, ttl } => {
                let mut set = redis::cmd("SET");
                set.arg(claim_key(ctx.prefix()))
                    .arg(&**token)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(*ttl));
                Request::Command(set)
            }
            Op::Unclaim { token } => {
                // Compare-and-delete of the claim, as a lease's release.
                let key = claim_key(ctx.prefix());
                super::lock::release_of(
                    &super::lock::RELEASE,
                    (&key, token, &release_channel(&key)),
                    false,
                )
            }
            Op::Inspect { key } => Invocation::new(&INSPECT)
                .key(key)
                .key(owner_key(key))
                .key(fence_key(key))
                .key(queue_key(key))
                .arg(holder_prefix(ctx.prefix()))
                .done(),
            Op::ForceUnlock { key, channel } => Invocation::new(&FORCE_UNLOCK)
                .key(key)
                .key(owner_key(key))
                .key(fence_key(key))
                .key(queue_key(key))
                .arg(channel)
                .arg(waiter_prefix(key))
                .arg(super::READERS_MARK)
                .done(),
            other => return Err(misrouted("administration", other)),
        })
    }

    fn decode(&self, op: &Op, value: Value) -> Result<Reply, MasterError> {
        match op {
            Op::Stamp { .. } => {
                let (outcome, fingerprint) = stamped(value)?;
                Ok(Reply::Stamped {
                    outcome,
                    fingerprint,
                })
            }
            Op::Claim { .. } => Ok(match read::<Option<String>>(value)? {
                Some(_) => Reply::Granted,
                None => Reply::HeldByOther,
            }),
            Op::Unclaim { .. } => Ok(match read::<i64>(value)? {
                1 => Reply::Granted,
                0 => Reply::Missing,
                _ => Reply::HeldByOther,
            }),
            Op::Inspect { .. } => inspected(value),
            Op::ForceUnlock { .. } => {
                let (code, detail, counter): (i64, Option<String>, Option<u64>) = read(value)?;
                match (code, counter) {
                    (1 | 0, Some(counter)) => Ok(Reply::ForceUnlocked {
                        removed: detail,
                        counter,
                    }),
                    (-3, _) => Err(wrong_kind(detail.as_deref())),
                    (other, _) => Err(unexpected("force_unlock", other)),
                }
            }
            other => Err(misrouted("administration", other)),
        }
    }
}

/// `stamp.lua` writing `record` unless the master has one; with `bootstrap` (the
/// `run_id` and epoch id a survey read), as the bootstrap of that process.
pub(crate) fn stamp(record: &Record, bootstrap: Option<&(String, String)>) -> Request {
    let (run_id, epoch) = bootstrap.map_or(("", ""), |(r, e)| (r.as_str(), e.as_str()));
    let mut call = Invocation::new(&STAMP)
        .key(cluster::record_key(&record.terms.prefix))
        .arg(run_id)
        .arg(epoch);
    for (field, value) in record.fields() {
        call = call.arg(field).arg(value);
    }
    call.done()
}

/// What `stamp.lua` did, and the fingerprint the master now has.
///
/// # Errors
/// An answer the protocol does not define.
pub(crate) fn stamped(value: Value) -> Result<(StampOutcome, String), MasterError> {
    let (code, fingerprint): (i64, String) = read(value)?;
    let outcome = match code {
        1 => StampOutcome::Written,
        0 => StampOutcome::Exists,
        -1 => StampOutcome::EpochChanged,
        other => return Err(unexpected("stamp", other)),
    };
    Ok((outcome, fingerprint))
}

/// The reply of `inspect.lua`: type, value, `PTTL`, owner record, fence counter, server
/// time (ms), whether the value is a queued waiter's, the holder record its value names.
/// A lock keeps no owner record: who holds it is its holder record.
fn inspected(value: Value) -> Result<Reply, MasterError> {
    type Answer = (
        String,
        Option<String>,
        i64,
        HashMap<String, String>,
        Option<String>,
        String,
        i64,
        HashMap<String, String>,
    );
    let (kind, value, pttl_ms, owner, fence, now, queued, holder): Answer = read(value)?;
    // The holder record is the holder of the value that names it.
    let owner = match (&value, owner.is_empty() && !holder.is_empty()) {
        (Some(value), true) => {
            let mut holder = holder;
            holder.insert("value".to_owned(), value.clone());
            holder
        }
        _ => owner,
    };
    Ok(Reply::Inspected(Box::new(Inspected {
        kind,
        value,
        pttl_ms,
        owner: owner.into_iter().collect(),
        fence: fence.map(|c| parse_number("inspect", &c)).transpose()?,
        now_ms: parse_number("inspect", &now)?,
        queued: queued == 1,
    })))
}

/// The key of the bootstrap claim ([`Op::Claim`]) under the key prefix `prefix`.
fn claim_key(prefix: &str) -> String {
    format!("{prefix}{RECORD_NAMESPACE}init")
}
