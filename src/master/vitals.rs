//! What a connection reads of its master: the cluster record, the `run_id`, and, with
//! restart quarantine, the vitals (uptime, durability, data epoch, eviction settings).

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::request::new_epoch_id;
use crate::cluster::Record;
use crate::error::{MasterError, MasterErrorKind};
use crate::quarantine::{Epoch, Vitals, eviction_risk};
use crate::scripts;

/// Reads the cluster record (`HGETALL`).
pub(super) async fn read_record(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<Option<Record>, MasterError> {
    let fields = redis::cmd("HGETALL")
        .arg(record_key)
        .query_async(conn)
        .await;
    let fields: HashMap<String, String> = record_read(conn, record_key, fields).await?;
    parse_record(&fields)
}

/// A read of the cluster record `record_key` (or of the data epoch it holds), as its
/// error if it failed. Where the key holds another type of value, what it holds says what
/// to do, and whether waiting helps: a value with an expiry is a lock (a client with
/// another key prefix, or none, locks a name that ends where this prefix keeps its
/// record), gone when that lock is; anything else, which nothing of redquorum's writes
/// there, stays until someone removes it.
async fn record_read<T>(
    conn: &mut MultiplexedConnection,
    record_key: &str,
    read: redis::RedisResult<T>,
) -> Result<T, MasterError> {
    let err = match read {
        Ok(read) => return Ok(read),
        Err(err) if err.code() == Some("WRONGTYPE") => err,
        Err(err) => return Err(MasterError::from_redis(err)),
    };
    let error = MasterError::from_redis(err);
    let probe: redis::RedisResult<(String, i64)> = redis::pipe()
        .cmd("TYPE")
        .arg(record_key)
        .cmd("PTTL")
        .arg(record_key)
        .query_async(conn)
        .await;
    Err(match probe {
        Ok((kind, pttl)) if pttl > 0 => error.with_message(format!(
            "the key {record_key:?}, where redquorum keeps this master's cluster record, \
             holds a {kind} that expires in {pttl} ms: a lock under that name, taken by a \
             client with another key prefix (or none); retried until it is gone. Lock no \
             name that ends in \"redquorum:cluster\""
        )),
        Ok((kind, _)) => MasterError::new(
            MasterErrorKind::Misconfigured,
            format!(
                "the key {record_key:?}, where redquorum keeps this master's cluster record, \
                 holds a {kind} without expiry, which redquorum never writes there: remove \
                 it once nothing else uses it"
            ),
        ),
        Err(_) => error,
    })
}

fn parse_record(fields: &HashMap<String, String>) -> Result<Option<Record>, MasterError> {
    Record::parse(fields).map_err(|e| MasterError::new(MasterErrorKind::Protocol, e))
}

/// Reads the `run_id` (if the master lets this client read `INFO`) and the cluster record
/// of a freshly connected master, for a client without restart quarantine.
pub(super) async fn read_cluster(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<(Option<String>, Option<Record>), MasterError> {
    let replies: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("HGETALL")
        .arg(record_key)
        .ignore_errors()
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let mut replies = replies.into_iter();
    let server: redis::RedisResult<redis::InfoDict> = value(next_reply(&mut replies));
    let run_id = match server {
        Ok(server) => server.get::<String>("run_id"),
        Err(err) if err.kind() == redis::ErrorKind::AuthenticationFailed => {
            return Err(MasterError::from_redis(err));
        }
        Err(_) => None,
    };
    let fields: HashMap<String, String> =
        record_read(conn, record_key, value(next_reply(&mut replies))).await?;
    Ok((run_id, parse_record(&fields)?))
}

/// The next reply of a pipeline, or an error if it has no more.
fn next_reply(
    replies: &mut impl Iterator<Item = redis::RedisResult<redis::Value>>,
) -> redis::RedisResult<redis::Value> {
    replies.next().unwrap_or_else(|| {
        Err(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "missing pipeline reply",
        )))
    })
}

/// Reads what restart quarantine needs to know about a freshly connected master, and its
/// cluster record, in one round trip.
pub(super) async fn read_vitals(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<(Vitals, Option<Record>), MasterError> {
    let replies: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("memory")
        // May be renamed away; then the master is simply not known to be durable.
        .cmd("CONFIG")
        .arg("GET")
        .arg("append*")
        .cmd("EVAL")
        .arg(scripts::EPOCH_SOURCE)
        .arg(1)
        .arg(record_key)
        .arg(new_epoch_id())
        .cmd("HGETALL")
        .arg(record_key)
        .ignore_errors()
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let mut replies = replies.into_iter();
    let mut next = || next_reply(&mut replies);
    let server: redis::InfoDict = value(next()).map_err(MasterError::from_redis)?;
    let memory: redis::InfoDict = value(next()).map_err(MasterError::from_redis)?;
    let config: redis::RedisResult<Vec<String>> = value(next());
    let (record, now): (String, String) = record_read(conn, record_key, value(next())).await?;
    let fields: HashMap<String, String> = record_read(conn, record_key, value(next())).await?;
    let cluster = parse_record(&fields)?;
    let run_id: String = server.get("run_id").unwrap_or_default();
    let uptime: u64 = server.get("uptime_in_seconds").unwrap_or(0);
    let policy: String = memory.get("maxmemory_policy").unwrap_or_default();
    let maxmemory: u64 = memory.get("maxmemory").unwrap_or(0);
    let durable = config.is_ok_and(|kv| {
        let get = |name: &str| {
            kv.chunks(2)
                .find(|p| p.first().map(String::as_str) == Some(name))
                .and_then(|p| p.get(1).cloned())
        };
        get("appendonly").as_deref() == Some("yes")
            && get("appendfsync").as_deref() == Some("always")
    });
    let now_us = scripts::parse_number("epoch", &now)?;
    let epoch = Epoch::parse(&record, Some(now_us)).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!("the data epoch {record:?} in {record_key:?} is not <id>:<microseconds>"),
        )
    })?;
    // Bootstrapped empty, and neither restarted nor flushed since (docs/design.md §11).
    let bootstrapped = cluster.as_ref().is_some_and(|c| {
        !c.bootstrap_run_id.is_empty()
            && c.bootstrap_run_id == run_id
            && *c.bootstrap_epoch == *epoch.id
    });
    let vitals = Vitals {
        run_id,
        uptime: Duration::from_secs(uptime),
        durable,
        epoch,
        misconfigured: eviction_risk(&policy, maxmemory),
        bootstrapped,
        counters_lost: cluster.as_ref().is_some_and(|c| c.counters_lost),
    };
    Ok((vitals, cluster))
}

/// Reads whether the master can evict lock keys (`INFO memory`), for a client without
/// restart quarantine. A master that refuses the command for want of authentication
/// fails; one whose ACLs or renamed commands hide it is taken as it is, with a note.
pub(super) async fn read_eviction(
    conn: &mut MultiplexedConnection,
) -> Result<Option<String>, MasterError> {
    let info: redis::RedisResult<redis::InfoDict> =
        redis::cmd("INFO").arg("memory").query_async(conn).await;
    match info {
        Ok(memory) => {
            let policy: String = memory.get("maxmemory_policy").unwrap_or_default();
            let maxmemory: u64 = memory.get("maxmemory").unwrap_or(0);
            Ok(eviction_risk(&policy, maxmemory))
        }
        Err(err)
            if matches!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
            ) =>
        {
            tracing::debug!(error = %err, "no permission to read the eviction settings");
            Ok(None)
        }
        Err(err) => {
            let err = MasterError::from_redis(err);
            match err.kind() {
                MasterErrorKind::Auth
                | MasterErrorKind::Refused
                | MasterErrorKind::Io
                | MasterErrorKind::Timeout => Err(err),
                _ => {
                    tracing::debug!(error = %err, "cannot read the eviction settings");
                    Ok(None)
                }
            }
        }
    }
}

/// One pipeline reply, converted.
pub(super) fn value<T: redis::FromRedisValue>(
    reply: redis::RedisResult<redis::Value>,
) -> redis::RedisResult<T> {
    reply.and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
}
