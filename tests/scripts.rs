//! The Lua scripts' reply contracts and hashes, checked on a real server. A changed hash
//! means a changed script: review the contract, then update the pinned hash.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};
use support::*;

/// The scripts as the library joins them: one list, for the library, these tests and the
/// benches.
#[path = "../src/scripts/sources.rs"]
mod sources;

use sources::{
    ACQUIRE_LUA as ACQUIRE, ACQUIRE_MANY_LUA as ACQUIRE_MANY, ACQUIRE_QUEUED_LUA as ACQUIRE_QUEUED,
    DEQUEUE_LUA as DEQUEUE, ENQUEUE_LUA as ENQUEUE, EPOCH_SOURCE as EPOCH, EXTEND_LUA as EXTEND,
    EXTEND_MANY_LUA as EXTEND_MANY, FENCE_LUA as FENCE, FENCED_SET_LUA as FENCED_SET,
    FORCE_UNLOCK_LUA as FORCE_UNLOCK, INSPECT_LUA as INSPECT, RELEASE_LUA as RELEASE,
    RELEASE_MANY_LUA as RELEASE_MANY, RW_ACQUIRE_LUA as RW_ACQUIRE,
    RW_DOWNGRADE_LUA as RW_DOWNGRADE, RW_EXTEND_READ_LUA as RW_EXTEND_READ,
    SEMAPHORE_COUNT_LUA as SEMAPHORE_COUNT, SEMAPHORE_LUA as SEMAPHORE, STAMP_LUA as STAMP,
};

/// `script`, a lock script, with the preamble's keys and arguments, the same slots in
/// every lock script: `KEYS[1]` the cluster record, which holds the data epoch, `ARGV[1]`
/// an id for a new epoch ('' not to read the epoch), `ARGV[2]` the caller's cluster
/// fingerprint ('' when it knows no record). The script's own keys and arguments follow.
fn preamble<'a>(
    script: &'a Script,
    record: &str,
    epoch_id: &str,
    fingerprint: &str,
) -> redis::ScriptInvocation<'a> {
    let mut call = script.key(record);
    call.arg(epoch_id).arg(fingerprint);
    call
}

/// The preamble's refusal of a caller whose cluster fingerprint is not the record's:
/// `{-2, epoch record or false, the record's fingerprint or false}`.
type Refused = (i64, Option<String>, Option<String>);

/// The data epoch that the preamble keeps in the cluster record's key `record`.
async fn epoch_in(conn: &mut redis::aio::MultiplexedConnection, record: &str) -> Option<String> {
    conn.hget(record, "epoch").await.unwrap()
}

/// The server's time in microseconds (`TIME`).
async fn server_time_us(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

/// How many times the server ran `TIME`, scripts' calls included (`INFO commandstats`).
async fn time_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    info(conn, "commandstats")
        .await
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_time:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// The holder record of tag `tag` under the empty key prefix (`redquorum:holder:<tag>`),
/// where a client whose lock values begin with `<tag>.` keeps who it is (`holder.lua`).
fn holder_of(tag: &str) -> String {
    format!("redquorum:holder:{tag}")
}

/// The holder record at `record`: its fields and its `PTTL`.
async fn holder_state(
    conn: &mut redis::aio::MultiplexedConnection,
    record: &str,
) -> (std::collections::HashMap<String, String>, i64) {
    (
        conn.hgetall(record).await.unwrap(),
        conn.pttl(record).await.unwrap(),
    )
}

/// Asserts that `record` is a holder record as a grant writes it (`holder.lua`): exactly
/// the fields client, host, pid and label with the values `who`, for an hour (the lock's
/// TTL being shorter). `what` names the step.
async fn assert_holder_written(
    conn: &mut redis::aio::MultiplexedConnection,
    record: &str,
    who: [&str; 4],
    what: &str,
) {
    let (fields, pttl) = holder_state(conn, record).await;
    let expected: std::collections::HashMap<String, String> = ["client", "host", "pid", "label"]
        .into_iter()
        .zip(who)
        .map(|(field, value)| (field.to_owned(), value.to_owned()))
        .collect();
    assert_eq!(fields, expected, "{what}: the holder record's fields");
    assert!(
        (3_500_000..=3_600_000).contains(&pttl),
        "{what}: the holder record is kept for an hour: {pttl}"
    );
}

/// Every lock script starts with the same preamble, in the same slots (`epoch.lua`, then
/// `cluster.lua`): a caller whose cluster fingerprint is not the record's, or that knows a
/// record the master lacks, is refused before the script reads any key or argument of its
/// own, always with the same answer, and nothing is written but the epoch (where asked).
#[tokio::test]
async fn every_lock_script_starts_with_the_preamble() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let record = "redquorum:cluster";
    for (name, source) in [
        ("acquire.lua", ACQUIRE),
        ("acquire_queued.lua", ACQUIRE_QUEUED),
        ("acquire_many.lua", ACQUIRE_MANY),
        ("enqueue.lua", ENQUEUE),
        ("extend.lua", EXTEND),
        ("extend_many.lua", EXTEND_MANY),
        ("rw_acquire.lua", RW_ACQUIRE),
        ("rw_extend_read.lua", RW_EXTEND_READ),
        ("rw_downgrade.lua", RW_DOWNGRADE),
        ("semaphore.lua", SEMAPHORE),
        ("semaphore_count.lua", SEMAPHORE_COUNT),
    ] {
        let script = Script::new(source);
        let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        let _: () = conn.hset(record, "fingerprint", "f1").await.unwrap();
        let (code, seen, found): Refused = preamble(&script, record, "e1", "f2")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((code, found.as_deref()), (-2, Some("f1")), "{name}");
        let created = seen.as_deref().and_then(|s| s.strip_prefix("e1:"));
        assert!(
            created.is_some_and(|c| c.parse::<u64>().is_ok()),
            "{name}: the epoch is read first: {seen:?}"
        );
        let written: Vec<String> = conn.keys("*").await.unwrap();
        assert_eq!(written, [record], "{name}");
        let fields: Vec<String> = conn.hkeys(record).await.unwrap();
        assert_eq!(
            fields.len(),
            2,
            "{name}: only the epoch is written: {fields:?}"
        );
        let kept: Option<String> = conn.hget(record, "epoch").await.unwrap();
        assert_eq!(kept, seen, "{name}");
        // No epoch id: the epoch is not read. No record here, but the caller knows one.
        let () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        let (code, seen, found): Refused = preamble(&script, record, "", "f1")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((code, seen, found), (-2, None, None), "{name}");
        let written: Vec<String> = conn.keys("*").await.unwrap();
        assert!(written.is_empty(), "{name}: {written:?}");
    }
}

/// `release.lua`: compare-and-delete. A lock without a waiter queue (the common case) is
/// deleted and its release notice published, with the key as payload; a lock with a queue
/// is handed on (`release_hand_off_contract`), or, with no live waiter left in it, freed
/// and announced the same way. Nothing else is written: the holder record is per client.
#[tokio::test]
async fn release_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(RELEASE);
    let key = unique_key("release_script");
    let channel = format!("redquorum:released:{key}");
    let queue = format!("redquorum:queue:{key}");
    let waiters = format!("redquorum:waiter:{key}:");
    let owner = format!("redquorum:owner:{key}");
    let release = || {
        let mut call = script.key(&key);
        call.key(&queue)
            .key(&owner)
            .key(format!("redquorum:ticket:{key}"))
            .arg("mine")
            .arg(&channel)
            .arg(&waiters);
        call
    };
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(&channel).await.unwrap();
    let mut notices = sub.on_message();
    let mut notice = async || {
        let msg = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            futures::StreamExt::next(&mut notices),
        )
        .await
        .unwrap()
        .unwrap();
        (
            msg.get_channel_name().to_owned(),
            msg.get_payload::<String>().unwrap(),
        )
    };

    // Missing key: 0.
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 0);
    // Someone else's key: -1, untouched.
    let _: () = conn.set(&key, "theirs").await.unwrap();
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, -1);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("theirs"));
    // Ours, no queue: 1, deleted, and the notice is published with the key; no queue is
    // made, and nothing else is left behind.
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let _: () = conn.pset_ex(&key, "mine", 10_000).await.unwrap();
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    assert_eq!(get(&server.url(), &key).await, None);
    assert_eq!(notice().await, (channel.clone(), key.clone()));
    let left: Vec<String> = conn.keys("*").await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    // Idempotent: again, 0.
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 0);
    // A writer's or a permit's owner record naming the value goes with the key (the mark
    // of its kind); one naming another value stays; one of another type fails nothing.
    for (record, gone) in [("mine", true), ("another", false)] {
        let _: () = conn.pset_ex(&key, "mine", 10_000).await.unwrap();
        let _: () = conn
            .hset_multiple(&owner, &[("kind", "rwlock"), ("value", record)])
            .await
            .unwrap();
        let r: i64 = release().invoke_async(&mut conn).await.unwrap();
        assert_eq!(r, 1);
        let _ = notice().await;
        let exists: bool = conn.exists(&owner).await.unwrap();
        assert_eq!(exists, !gone, "an owner record naming {record:?}");
        let _: () = conn.del(&owner).await.unwrap();
    }
    let _: () = conn.pset_ex(&key, "mine", 10_000).await.unwrap();
    let _: () = conn.set(&owner, "not a hash").await.unwrap();
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    let _ = notice().await;
    assert_eq!(
        get(&server.url(), &owner).await.as_deref(),
        Some("not a hash")
    );
    let _: () = conn.del(&owner).await.unwrap();
    // Every lease value is '<tag>.<hex>', a writer's and a permit's too (the acquire
    // draws them all so): a record naming such a value goes with its key as well.
    let value = "client-tag.0123456789abcdef";
    let _: () = conn.pset_ex(&key, value, 10_000).await.unwrap();
    let _: () = conn
        .hset_multiple(&owner, &[("kind", "rwlock"), ("value", value)])
        .await
        .unwrap();
    let mut call = script.key(&key);
    call.key(&queue)
        .key(&owner)
        .key(format!("redquorum:ticket:{key}"))
        .arg(value)
        .arg(&channel)
        .arg(&waiters);
    let r: i64 = call.invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    let _ = notice().await;
    let exists: bool = conn.exists(&owner).await.unwrap();
    assert!(
        !exists,
        "a writer's owner record naming {value:?} outlived its key"
    );
    // Ours, with a queue whose only waiter is dead: pruned, the key freed and announced as
    // without a queue.
    let _: () = conn.pset_ex(&key, "mine", 10_000).await.unwrap();
    let _: () = conn.zadd(&queue, "dead", 1).await.unwrap();
    let r: i64 = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    assert_eq!(get(&server.url(), &key).await, None);
    let queued: bool = conn.exists(&queue).await.unwrap();
    assert!(!queued, "the dead waiter is pruned");
    assert_eq!(notice().await, (channel.clone(), key.clone()));
}

/// Resets the command statistics of the server behind `conn` (`CONFIG RESETSTAT`).
async fn reset_command_stats(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
}

/// The calls each command had on the server behind `conn` since its statistics were reset,
/// leaving out the scripting and statistics commands themselves.
async fn commands_called(conn: &mut MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, stats) = line.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "evalsha" | "eval" | "script|load" | "info" | "config|resetstat"
            )
        })
        .collect()
}

/// A server with `release.lua` loaded, and a lock key of its own with its queue.
struct Releasing {
    server: Server,
    script: Script,
    key: String,
    queue: String,
}

impl Releasing {
    /// A new server, with a key named after `name`, and a connection to it.
    async fn start(name: &str) -> (Self, MultiplexedConnection) {
        let server = Server::start(&ServerOptions::new()).await.unwrap();
        let mut conn = raw(&server.url()).await;
        let key = unique_key(name);
        let fixture = Self {
            server,
            script: Script::new(RELEASE),
            queue: format!("redquorum:queue:{key}"),
            key,
        };
        let _: () = fixture
            .call("1")
            .load_async(&mut conn)
            .await
            .map(|_| ())
            .unwrap();
        (fixture, conn)
    }

    /// `release.lua` of the value "mine" under the key, as a lease releases it, `plain`
    /// its last argument.
    fn call(&self, plain: &str) -> redis::ScriptInvocation<'_> {
        let key = &self.key;
        let mut call = self.script.key(key);
        call.key(&self.queue)
            .key(format!("redquorum:owner:{key}"))
            .key(format!("redquorum:ticket:{key}"))
            .arg("mine")
            .arg(format!("redquorum:released:{key}"))
            .arg(format!("redquorum:waiter:{key}:"))
            .arg(plain);
        call
    }

    /// The key held by "mine", with a live waiter `w1` heading its queue.
    async fn hold_with_a_live_waiter(&self, conn: &mut MultiplexedConnection) {
        let key = &self.key;
        let _: () = conn.pset_ex(key, "mine", 10_000).await.unwrap();
        let _: () = conn.zadd(&self.queue, "w1", 1).await.unwrap();
        let _: () = conn
            .pset_ex(
                format!("redquorum:waiter:{key}:w1"),
                "5000 redquorum:handoff:c1",
                5000,
            )
            .await
            .unwrap();
    }
}

/// Sets the `maxmemory` of the server behind `conn` (1 puts it over at once; 0 lifts it).
async fn set_maxmemory(conn: &mut MultiplexedConnection, bytes: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(conn)
        .await
        .unwrap();
}

/// A plain lock's lease (`ARGV[4]` '1') is released by what its mechanism needs and no
/// more: compare-and-delete, the queue's `EXISTS` and the notice without a queue; with one,
/// the hand-off, but neither the owner record (a lock keeps none) nor the removal of a
/// waiter's id (a lease value is none). The same release without the flag (an operator's
/// force-unlock of a value it read) reads the owner record.
#[tokio::test]
async fn a_plain_locks_release_runs_only_its_mechanism() {
    let (fixture, mut conn) = Releasing::start("plain_release").await;
    let (server, key, queue) = (&fixture.server, &fixture.key, &fixture.queue);
    let release = |plain: &str| fixture.call(plain);
    let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    };

    let _: () = conn.pset_ex(key, "mine", 10_000).await.unwrap();
    reset_command_stats(&mut conn).await;
    let r: i64 = release("1").invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    assert_eq!(
        commands_called(&mut conn).await,
        counts(&[("get", 1), ("del", 1), ("exists", 1), ("publish", 1)])
    );

    // With a live waiter queued: handed on, and still no owner record read nor waiter
    // removed for the released value.
    fixture.hold_with_a_live_waiter(&mut conn).await;
    reset_command_stats(&mut conn).await;
    let (code, _ticket): (i64, String) = release("1").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    assert_eq!(
        commands_called(&mut conn).await,
        counts(&[
            // The key, the liveness record of the head, the ticket counter.
            ("get", 3),
            ("del", 1),
            // The queue.
            ("exists", 1),
            ("zrange", 1),
            ("set", 1),
            ("publish", 1),
        ])
    );
    assert_eq!(get(&server.url(), key).await.as_deref(), Some("w1"));

    // Without the flag the owner record is read.
    let _: () = conn.del(&[key, queue]).await.unwrap();
    let _: () = conn.pset_ex(key, "mine", 10_000).await.unwrap();
    reset_command_stats(&mut conn).await;
    let r: i64 = release("0").invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    assert_eq!(commands_called(&mut conn).await.get("type"), Some(&1));
}

/// On a master over `maxmemory` (`noeviction`, as the library requires), a release still
/// frees the key and hands it on, plain or not: its first write, the `DEL`, lets the
/// hand-off's `SET` run (Redis refuses a command that needs memory, such as `SET`, only
/// to a script that has not written yet; `DEL` needs none).
#[tokio::test]
async fn a_release_hands_on_over_maxmemory() {
    let (fixture, mut conn) = Releasing::start("release_oom").await;
    let (server, key) = (&fixture.server, &fixture.key);
    fixture.hold_with_a_live_waiter(&mut conn).await;
    set_maxmemory(&mut conn, 1).await;
    let refused: redis::RedisResult<()> = conn.set(unique_key("oom"), "x").await;
    assert!(refused.is_err(), "the master is not over maxmemory");
    for plain in ["1", "0"] {
        let (code, _ticket): (i64, String) =
            fixture.call(plain).invoke_async(&mut conn).await.unwrap();
        assert_eq!(code, 1, "plain {plain}");
        set_maxmemory(&mut conn, 0).await;
        assert_eq!(get(&server.url(), key).await.as_deref(), Some("w1"));
        let _: () = conn.set(key, "mine").await.unwrap();
        set_maxmemory(&mut conn, 1).await;
    }
    set_maxmemory(&mut conn, 0).await;
}

type Extended = (i64, Option<String>, Option<String>);

#[tokio::test]
async fn extend_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EXTEND);
    let key = unique_key("extend_script");
    let (record, holder) = (unique_key("cluster"), holder_of(&unique_key("tag")));
    let owner = format!("redquorum:owner:{key}");
    let extend = |value: &'static str, ttl: u64, epoch_id: &'static str, fingerprint: &str| {
        let mut call = preamble(&script, &record, epoch_id, fingerprint);
        call.key(&key).key(&holder).key(&owner).arg(value).arg(ttl);
        call
    };

    // Ours: 1 and the TTL is reset; the holder record, which would expire sooner, is kept
    // alive as long; without an epoch id the epoch is not touched.
    let _: () = conn.pset_ex(&key, "mine", 1000).await.unwrap();
    let _: () = conn.hset(&holder, "client", "c1").await.unwrap();
    let _: () = conn.pexpire(&holder, 30_000).await.unwrap();
    let (code, seen, _): Extended = extend("mine", 60_000, "", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, seen), (1, None));
    for k in [&key, &holder] {
        let pttl: i64 = conn.pttl(k).await.unwrap();
        assert!(pttl > 50_000 && pttl <= 60_000, "{k}: {pttl}");
    }
    assert_eq!(epoch_in(&mut conn, &record).await, None);
    // A holder record that outlives the new TTL is left as it is, never shortened.
    let _: () = conn.pexpire(&holder, 3_600_000).await.unwrap();
    let (code, ..): Extended = extend("mine", 60_000, "", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let pttl: i64 = conn.pttl(&holder).await.unwrap();
    assert!(pttl > 3_500_000, "{pttl}");
    // A missing holder record is not created: only a grant writes one. The lock is
    // extended all the same.
    let _: () = conn.del(&holder).await.unwrap();
    let _: () = conn.pexpire(&key, 1000).await.unwrap();
    let (code, ..): Extended = extend("mine", 60_000, "", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "extend wrote a holder record");
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 50_000, "{pttl}");
    // From here the holder record expires before the TTL asked for: only an extension
    // raises it, no refusal.
    let _: () = conn.hset(&holder, "client", "c1").await.unwrap();
    let _: () = conn.pexpire(&holder, 30_000).await.unwrap();
    // Missing: 0, and it stays missing (it may have been force-unlocked); with an epoch id
    // a missing epoch is started.
    let _: () = conn.del(&key).await.unwrap();
    let (code, seen, _): Extended = extend("mine", 60_000, "e1", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 0);
    let seen = seen.unwrap();
    assert!(seen.starts_with("e1:"), "{seen}");
    assert_eq!(epoch_in(&mut conn, &record).await, Some(seen.clone()));
    assert_eq!(get(&server.url(), &key).await, None);
    // Someone else's: -1, untouched, TTL unchanged; an existing epoch is kept.
    let _: () = conn.pset_ex(&key, "theirs", 5000).await.unwrap();
    let (code, again, _): Extended = extend("mine", 60_000, "e2", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1);
    assert_eq!(again, Some(seen));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl <= 5000, "{pttl}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("theirs"));
    let pttl: i64 = conn.pttl(&holder).await.unwrap();
    assert!(
        (0..=30_000).contains(&pttl),
        "a refused extension keeps no holder record alive: {pttl}"
    );
    // A cluster record whose fingerprint differs from the caller's: -2 with the record's
    // fingerprint, and nothing extended; an agreeing caller extends.
    let _: () = conn.pset_ex(&key, "mine", 1000).await.unwrap();
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    for caller in ["", "f2"] {
        let (code, _, found): Extended = extend("mine", 60_000, "", caller)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            (code, found.as_deref()),
            (-2, Some("f1")),
            "caller {caller:?}"
        );
        let pttl: i64 = conn.pttl(&key).await.unwrap();
        assert!(pttl <= 1000, "{pttl}");
        let pttl: i64 = conn.pttl(&holder).await.unwrap();
        assert!((0..=30_000).contains(&pttl), "{pttl}");
    }
    let (code, _, _): Extended = extend("mine", 60_000, "", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    // A caller that knows a record the master lacks (it lost its data): -2, no record.
    let _: () = conn.del(&record).await.unwrap();
    let (code, _, found): Extended = extend("mine", 60_000, "", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, found), (-2, None));
    // The owner record of another kind (a writer's, a permit's) that names our value lives
    // as long as the key: it marks the name as that kind's (docs/design.md §16). One that
    // names another value, or a key of another type there, is left alone.
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    let _: () = conn.pset_ex(&key, "mine", 1000).await.unwrap();
    let _: () = conn
        .hset_multiple(&owner, &[("kind", "rwlock"), ("value", "mine")])
        .await
        .unwrap();
    let _: () = conn.pexpire(&owner, 1000).await.unwrap();
    let (code, ..): Extended = extend("mine", 60_000, "", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let pttl: i64 = conn.pttl(&owner).await.unwrap();
    assert!(
        pttl > 50_000 && pttl <= 60_000,
        "the owner record expires before the key it marks: {pttl}"
    );
    let _: () = conn.hset(&owner, "value", "another").await.unwrap();
    let _: () = conn.pexpire(&owner, 1000).await.unwrap();
    let (code, ..): Extended = extend("mine", 60_000, "", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let pttl: i64 = conn.pttl(&owner).await.unwrap();
    assert!((0..=1000).contains(&pttl), "another value's record: {pttl}");
    let _: () = conn.del(&owner).await.unwrap();
    let _: () = conn.pset_ex(&owner, "not a hash", 1000).await.unwrap();
    let (code, ..): Extended = extend("mine", 60_000, "", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1, "a key of another type there fails nothing");
    let pttl: i64 = conn.pttl(&owner).await.unwrap();
    assert!((0..=1000).contains(&pttl), "a key of another type: {pttl}");
}

/// The extension of several keys is all or none: one key missing or held by another value
/// and no key is extended, so a master that holds only some of a lease's keys never counts.
#[tokio::test]
async fn extend_many_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EXTEND_MANY);
    let keys = [unique_key("many_a"), unique_key("many_b")];
    let holder = holder_of(&unique_key("tag"));
    let record = unique_key("cluster");
    let extend = |epoch_id: &'static str, fingerprint: &str| {
        let mut call = preamble(&script, &record, epoch_id, fingerprint);
        call.key(&holder);
        for key in &keys {
            call.key(key).key(format!("redquorum:owner:{key}"));
        }
        call.arg("mine").arg(60_000);
        call
    };
    let short_ttls = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let keys = keys.clone();
        async move {
            let mut all = Vec::new();
            for k in &keys {
                let pttl: i64 = conn.pttl(k).await.unwrap();
                all.push(pttl <= 1000);
            }
            all
        }
    };

    // Every key ours: 1, every TTL reset, and the holder record, which would expire sooner,
    // kept alive as long.
    for key in &keys {
        let _: () = conn.pset_ex(key, "mine", 1000).await.unwrap();
    }
    let _: () = conn.hset(&holder, "client", "c1").await.unwrap();
    let _: () = conn.pexpire(&holder, 30_000).await.unwrap();
    let (code, seen, _): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, seen), (1, None));
    for k in keys.iter().chain([&holder]) {
        let pttl: i64 = conn.pttl(k).await.unwrap();
        assert!(pttl > 50_000 && pttl <= 60_000, "{k}: {pttl}");
    }
    // A permit's owner record naming the value is extended with its key; one naming
    // another value, or of another type, is left as it is.
    let owners: Vec<String> = keys
        .iter()
        .map(|k| format!("redquorum:owner:{k}"))
        .collect();
    let _: () = conn
        .hset_multiple(&owners[0], &[("kind", "permit"), ("value", "mine")])
        .await
        .unwrap();
    let _: () = conn
        .hset_multiple(&owners[1], &[("kind", "permit"), ("value", "another")])
        .await
        .unwrap();
    for owner in &owners {
        let _: () = conn.pexpire(owner, 1000).await.unwrap();
    }
    let (code, ..): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let ours: i64 = conn.pttl(&owners[0]).await.unwrap();
    let theirs: i64 = conn.pttl(&owners[1]).await.unwrap();
    assert!(ours > 50_000 && theirs <= 1000, "{ours} {theirs}");
    let _: () = conn.del(&owners[1]).await.unwrap();
    let _: () = conn.set(&owners[1], "not a hash").await.unwrap();
    let (code, ..): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let _: () = conn.del(&owners).await.unwrap();
    // A holder record that outlives the TTL is never shortened; a missing one is not
    // created.
    let _: () = conn.pexpire(&holder, 3_600_000).await.unwrap();
    let (code, ..): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let pttl: i64 = conn.pttl(&holder).await.unwrap();
    assert!(pttl > 3_500_000, "{pttl}");
    let _: () = conn.del(&holder).await.unwrap();
    let (code, ..): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "extend_many wrote a holder record");
    // From here the holder record expires before the TTL asked for: a refused extension
    // leaves it so.
    let _: () = conn.hset(&holder, "client", "c1").await.unwrap();
    let _: () = conn.pexpire(&holder, 30_000).await.unwrap();
    let holder_kept = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let holder = holder.clone();
        async move {
            let pttl: i64 = conn.pttl(&holder).await.unwrap();
            (0..=30_000).contains(&pttl)
        }
    };
    // One key held by another value: -1, and the key that is ours is not extended.
    let _: () = conn.pset_ex(&keys[0], "mine", 1000).await.unwrap();
    let _: () = conn.pset_ex(&keys[1], "theirs", 1000).await.unwrap();
    let (code, seen, _): Extended = extend("e1", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, -1);
    assert!(seen.unwrap().starts_with("e1:"));
    assert_eq!(short_ttls(&mut conn).await, [true, true]);
    assert!(
        holder_kept(&mut conn).await,
        "a refusal raised the holder record"
    );
    assert_eq!(
        get(&server.url(), &keys[1]).await.as_deref(),
        Some("theirs")
    );
    // One key missing: 0, nothing extended, the missing key not set again.
    let _: () = conn.del(&keys[1]).await.unwrap();
    let (code, _, _): Extended = extend("", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(get(&server.url(), &keys[1]).await, None);
    let pttl: i64 = conn.pttl(&keys[0]).await.unwrap();
    assert!(pttl <= 1000, "{pttl}");
    assert!(
        holder_kept(&mut conn).await,
        "a refusal raised the holder record"
    );
    // A cluster record that disagrees: -2 with its fingerprint, nothing extended.
    let _: () = conn.pset_ex(&keys[1], "mine", 1000).await.unwrap();
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    let (code, _, found): Extended = extend("", "f2").invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, found.as_deref()), (-2, Some("f1")));
    assert_eq!(short_ttls(&mut conn).await, [true, true]);
    assert!(
        holder_kept(&mut conn).await,
        "a refusal raised the holder record"
    );
    let (code, _, _): Extended = extend("", "f1").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
}

/// The release of several keys deletes each one that is ours and announces each on its
/// own channel (or hands it to its queue's live head); others' keys are left alone.
#[tokio::test]
async fn release_many_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(RELEASE_MANY);
    let keys = [
        unique_key("rel_a"),
        unique_key("rel_b"),
        unique_key("rel_c"),
    ];
    let channels: Vec<String> = keys
        .iter()
        .map(|k| format!("redquorum:released:{k}"))
        .collect();
    let queues: Vec<String> = keys
        .iter()
        .map(|k| format!("redquorum:queue:{k}"))
        .collect();
    let prefixes: Vec<String> = keys
        .iter()
        .map(|k| format!("redquorum:waiter:{k}:"))
        .collect();
    let release = || {
        let mut call = script.prepare_invoke();
        for (key, queue) in keys.iter().zip(&queues) {
            call.key(key)
                .key(queue)
                .key(format!("redquorum:owner:{key}"));
        }
        call.arg("mine");
        for (channel, prefix) in channels.iter().zip(&prefixes) {
            call.arg(channel).arg(prefix);
        }
        call
    };
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    for channel in &channels {
        sub.subscribe(channel).await.unwrap();
    }
    // a and c ours, b someone else's.
    for i in [0, 2] {
        let _: () = conn.pset_ex(&keys[i], "mine", 10_000).await.unwrap();
    }
    let _: () = conn.pset_ex(&keys[1], "theirs", 10_000).await.unwrap();
    let counts: (i64, i64, i64) = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(counts, (2, 0, 1));
    for i in [0, 2] {
        assert_eq!(get(&server.url(), &keys[i]).await, None);
    }
    let left: Vec<String> = conn.keys("*").await.unwrap();
    assert_eq!(left, [keys[1].clone()], "nothing but b's key is left");
    assert_eq!(
        get(&server.url(), &keys[1]).await.as_deref(),
        Some("theirs")
    );
    let mut heard = Vec::new();
    {
        use futures::StreamExt;
        let mut messages = sub.on_message();
        for _ in 0..2 {
            let msg = tokio::time::timeout(std::time::Duration::from_secs(2), messages.next())
                .await
                .unwrap()
                .unwrap();
            heard.push((
                msg.get_channel_name().to_owned(),
                msg.get_payload::<String>().unwrap(),
            ));
        }
    }
    heard.sort();
    assert_eq!(
        heard,
        [
            (channels[0].clone(), keys[0].clone()),
            (channels[2].clone(), keys[2].clone())
        ]
    );
    // Again: nothing of ours left.
    let counts: (i64, i64, i64) = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(counts, (0, 2, 1));

    // A key with a live queued waiter is handed to it, as by `release.lua`: set to its id
    // with its waiter TTL and told on its own channel; the dead member before it is
    // pruned. A key without a queue still gets its release notice.
    let handoff = "redquorum:handoff:client-w";
    sub.subscribe(handoff).await.unwrap();
    for i in [0, 2] {
        let _: () = conn.pset_ex(&keys[i], "mine", 10_000).await.unwrap();
    }
    let _: () = conn
        .zadd_multiple(&queues[0], &[(1, "dead"), (2, "w")])
        .await
        .unwrap();
    let _: () = conn
        .pset_ex(format!("{}w", prefixes[0]), format!("900 {handoff}"), 900)
        .await
        .unwrap();
    let counts: (i64, i64, i64) = release().invoke_async(&mut conn).await.unwrap();
    assert_eq!(counts, (2, 0, 1));
    assert_eq!(get(&server.url(), &keys[0]).await.as_deref(), Some("w"));
    let pttl: i64 = conn.pttl(&keys[0]).await.unwrap();
    assert!((1..=900).contains(&pttl), "the waiter's own TTL: {pttl}");
    let members: Vec<String> = conn.zrange(&queues[0], 0, -1).await.unwrap();
    assert_eq!(members, ["w"], "the dead member is pruned, the head stays");
    assert_eq!(get(&server.url(), &keys[2]).await, None);
    let mut heard = Vec::new();
    {
        use futures::StreamExt;
        let mut messages = sub.on_message();
        for _ in 0..2 {
            let msg = tokio::time::timeout(std::time::Duration::from_secs(2), messages.next())
                .await
                .unwrap()
                .unwrap();
            heard.push((
                msg.get_channel_name().to_owned(),
                msg.get_payload::<String>().unwrap(),
            ));
        }
    }
    heard.sort();
    let mut expected = vec![
        (handoff.to_owned(), "w".to_owned()),
        (channels[2].clone(), keys[2].clone()),
    ];
    expected.sort();
    assert_eq!(heard, expected);
}

type Acquired = (
    i64,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);
/// `acquire.lua`'s answer in its long form: a grant answers short, `{1, epoch record}`
/// (`{1, epoch record, fence counter}` with the fence read), without what only a refusal
/// fills (the holder's `PTTL`, another kind, the ticket counter).
fn long_form(mut answer: Vec<redis::Value>) -> Acquired {
    if answer.len() < 6 {
        assert!(
            matches!(answer.len(), 2 | 3) && answer[0] == redis::Value::Int(1),
            "only a grant answers short: {answer:?}"
        );
        answer.resize(3, redis::Value::Nil);
        answer.extend([redis::Value::Int(-3), redis::Value::Nil, redis::Value::Nil]);
    }
    redis::from_redis_value(redis::Value::Array(answer)).unwrap()
}
type AcquiredMany = (i64, String, Vec<Option<String>>, Vec<i64>, Option<String>);

/// Several locks at once: every key set, or none where any is held, each held key's
/// `PTTL` and each counter reported; the same checks as `acquire.lua`. A grant writes no
/// owner record: it keeps the client's holder record alive, once, as `acquire.lua` does.
#[tokio::test]
async fn acquire_many_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(ACQUIRE_MANY);
    let keys = [unique_key("am_a"), unique_key("am_b")];
    let fences = [unique_key("fence_a"), unique_key("fence_b")];
    let owners = keys.clone().map(|k| format!("redquorum:owner:{k}"));
    let holder = holder_of(&unique_key("tag"));
    let record = unique_key("cluster");
    let acquire = |value: &'static str, fingerprint: &str| {
        let mut call = preamble(&script, &record, "e1", fingerprint);
        call.key(&holder);
        for i in 0..2 {
            call.key(&keys[i]).key(&fences[i]).key(&owners[i]);
        }
        call.arg(value)
            .arg(10_000)
            .arg("1")
            .arg("client")
            .arg("host")
            .arg(7)
            .arg("label");
        call
    };
    let who = ["client", "host", "7", "label"];
    let _: () = conn.set(&fences[1], "41").await.unwrap();
    // Both free: 1, both set, the counters read; no owner record, the holder record
    // written.
    let (code, seen, counters, pttls, _): AcquiredMany =
        acquire("mine", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    assert!(seen.starts_with("e1:"), "{seen}");
    assert_eq!(counters, [None, Some("41".to_owned())]);
    assert_eq!(pttls, [-3, -3]);
    for (key, owner) in keys.iter().zip(&owners) {
        assert_eq!(get(&server.url(), key).await.as_deref(), Some("mine"));
        let pttl: i64 = conn.pttl(key).await.unwrap();
        assert!(pttl > 9_000 && pttl <= 10_000, "set with PX: {pttl}");
        let exists: bool = conn.exists(owner).await.unwrap();
        assert!(!exists, "a grant wrote an owner record");
    }
    assert_holder_written(&mut conn, &holder, who, "a grant").await;
    // Granted again while the holder record outlives the lock: the record is not written.
    let _: () = conn.del(&keys).await.unwrap();
    let _: () = conn.hset(&holder, "host", "changed").await.unwrap();
    let (code, ..): AcquiredMany = acquire("mine", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let host: Option<String> = conn.hget(&holder, "host").await.unwrap();
    assert_eq!(host.as_deref(), Some("changed"), "a fresh record is kept");
    // Granted while the record would expire before the lock: written again.
    let _: () = conn.del(&keys).await.unwrap();
    let _: () = conn.pexpire(&holder, 5_000).await.unwrap();
    let (code, ..): AcquiredMany = acquire("mine", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    assert_holder_written(&mut conn, &holder, who, "a grant past the record").await;
    // No refusal below writes a holder record.
    let _: () = conn.del(&holder).await.unwrap();
    // One held by another value: 0, the other not set, the held one's PTTL reported.
    let _: () = conn.del(&keys[0]).await.unwrap();
    let (code, _, _, pttls, _): AcquiredMany =
        acquire("other", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(pttls[0], -3);
    assert!(pttls[1] > 5_000, "{pttls:?}");
    assert_eq!(get(&server.url(), &keys[0]).await, None);
    // Another kind of lock under a name: -3 with its kind, nothing set.
    let _: () = conn.hset(&owners[1], "kind", "semaphore").await.unwrap();
    let (code, _, _, at, detail): AcquiredMany =
        acquire("other", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, detail.as_deref()), (-3, Some("semaphore")));
    assert_eq!(at, [2], "the position of the name of another kind");
    let _: () = conn.del(&keys[1]).await.unwrap();
    let _: () = conn.hset(&keys[1], "f", "v").await.unwrap();
    let (code, _, _, at, detail): AcquiredMany =
        acquire("other", "").invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, detail.as_deref()), (-3, Some("hash")));
    assert_eq!(at, [2], "the position of the name of another kind");
    assert_eq!(get(&server.url(), &keys[0]).await, None);
    // A cluster record that disagrees: -2 with its fingerprint, nothing set.
    let _: () = conn.del(&keys[1]).await.unwrap();
    let _: () = conn.del(&owners[1]).await.unwrap();
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    let (code, _, found): Refused = acquire("other", "f2")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, found.as_deref()), (-2, Some("f1")));
    assert_eq!(get(&server.url(), &keys[0]).await, None);
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "a refusal wrote the holder record");
    let (code, _, _, _, _): AcquiredMany = acquire("other", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    assert_holder_written(&mut conn, &holder, who, "a grant after refusals").await;
}

/// `acquire.lua`: `SET NX PX` reading the epoch, and the fence counter where asked; a
/// refusal reads the holder's `PTTL` and the queue's ticket counter. A grant writes no
/// owner record: it keeps the client's holder record alive at least as long as the lock,
/// and writes it only where it would expire sooner. Another kind of lock under the name
/// is told on the refusal path: -3 with its kind.
#[tokio::test]
async fn acquire_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(ACQUIRE);
    let key = unique_key("acquire_script");
    let (fence, record) = (unique_key("fence"), unique_key("cluster"));
    let owner = format!("redquorum:owner:{key}");
    let holder = holder_of(&unique_key("tag"));
    let ticket = format!("redquorum:ticket:{key}");
    // The holder's fields (client id, host, pid, label) last: empty where the client knows
    // its holder record outlives the lock.
    let acquire_as =
        |value: &'static str, ttl: u64, mode: &'static str, fingerprint: &str, who: [&str; 4]| {
            let mut call = preamble(&script, &record, "new-epoch", fingerprint);
            call.key(&key)
                .key(&fence)
                .key(&owner)
                .key(&ticket)
                .key(&holder)
                .arg(value)
                .arg(ttl)
                .arg(mode)
                .arg(&who[..]);
            call
        };
    let acquire_for = |value: &'static str, ttl: u64, mode: &'static str, fingerprint: &str| {
        acquire_as(
            value,
            ttl,
            mode,
            fingerprint,
            ["client-1", "host-1", "4242", "worker"],
        )
    };
    let acquire = |value: &'static str, mode: &'static str, fingerprint: &'static str| {
        acquire_for(value, 10_000, mode, fingerprint)
    };
    let who = ["client-1", "host-1", "4242", "worker"];

    // Granted; a missing epoch is started; no fence read; no owner record, the holder
    // record written for an hour.
    // A ticket counter exists: a grant does not read it.
    let _: () = conn.set(&ticket, 6).await.unwrap();
    let before = server_time_us(&mut conn).await;
    let (ok, epoch_record, counter, pttl, detail, tickets): Acquired = long_form(
        acquire("v1", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    let after = server_time_us(&mut conn).await;
    assert_eq!(
        (ok, counter, pttl, detail, tickets),
        (1, None, -3, None, None)
    );
    let (id, created) = epoch_record.rsplit_once(':').unwrap();
    assert_eq!(id, "new-epoch");
    let created: u64 = created.parse().unwrap();
    assert!(
        (before..=after).contains(&created),
        "a new epoch is created at the server's time: {before} <= {created} <= {after}"
    );
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v1"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 9_000, "set with PX like SET NX PX: {pttl}");
    let exists: bool = conn.exists(&owner).await.unwrap();
    assert!(!exists, "a grant wrote an owner record");
    assert_holder_written(&mut conn, &holder, who, "a grant").await;
    // Refused: the holder's PTTL, the same epoch, and the fence counter when asked for;
    // no holder record written, even one that would expire before the lock.
    let _: () = conn.set(&fence, 41).await.unwrap();
    let _: () = conn.pexpire(&holder, 5_000).await.unwrap();
    // Only a new epoch reads the server's time: a script that finds one does not.
    let times = time_calls(&mut conn).await;
    let (ok, again, counter, pttl, _, tickets): Acquired = long_form(
        acquire("v2", "1", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(
        time_calls(&mut conn).await,
        times,
        "TIME read without a new epoch"
    );
    assert_eq!((ok, counter.as_deref()), (0, Some("41")));
    // A refusal reads the queue's ticket counter (a waiter's place is one above it), 0
    // when it is missing.
    assert_eq!(tickets.as_deref(), Some("6"));
    assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
    assert_eq!(again, epoch_record);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v1"));
    let held: i64 = conn.pttl(&holder).await.unwrap();
    assert!(
        (0..=5_000).contains(&held),
        "a refusal wrote the holder record: {held}"
    );
    // No other mode exists: the planted one-round token is a variant of this script built
    // only with `--cfg redquorum_mutants`, never a mode of the script every master loads.
    let _: () = conn.del(&ticket).await.unwrap();
    let (_, _, counter, _, _, tickets): Acquired = long_form(
        acquire("v3", "2", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!((counter, tickets.as_deref()), (None, Some("0")));
    assert_eq!(conn.get::<_, String>(&fence).await.unwrap(), "41");

    // A grant while the holder record outlives the lock does not write it (a field
    // changed here is kept); one while it would expire sooner writes it again.
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.pexpire(&holder, 3_600_000).await.unwrap();
    let _: () = conn.hset(&holder, "host", "changed").await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v3", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    let host: Option<String> = conn.hget(&holder, "host").await.unwrap();
    assert_eq!(host.as_deref(), Some("changed"), "a fresh record is kept");
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.pexpire(&holder, 5_000).await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v3", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    assert_holder_written(&mut conn, &holder, who, "a grant past the record").await;
    // Asked to see to it, a grant keeps the record at least half an hour: one with 20
    // minutes left, which outlives the lock, is written again.
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.pexpire(&holder, 1_200_000).await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v3", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    assert_holder_written(&mut conn, &holder, who, "a grant within half an hour").await;
    // Not asked (an empty client id: the client knows the record outlives the lock), a
    // grant leaves the record alone, present or not, and costs no command for it.
    for present in [true, false] {
        let _: () = conn.del(&key).await.unwrap();
        if !present {
            let _: () = conn.del(&holder).await.unwrap();
        } else {
            let _: () = conn.pexpire(&holder, 5_000).await.unwrap();
        }
        reset_command_stats(&mut conn).await;
        let (ok, ..): Acquired = long_form(
            acquire_as("v3", 10_000, "0", "", ["", "", "", ""])
                .invoke_async(&mut conn)
                .await
                .unwrap(),
        );
        assert_eq!(ok, 1);
        let called = commands_called(&mut conn).await;
        assert!(!called.contains_key("pttl"), "{called:?}");
        let held: i64 = conn.pttl(&holder).await.unwrap();
        match present {
            true => assert!((0..=5_000).contains(&held), "rewritten: {held}"),
            false => assert_eq!(held, -2, "written"),
        }
    }
    // A lock longer than an hour: its holder record is kept as long as the lock.
    let _: () = conn.del(&key).await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire_for("v3", 7_200_000, "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    let held: i64 = conn.pttl(&holder).await.unwrap();
    assert!(
        (7_100_000..=7_200_000).contains(&held),
        "the holder record outlives the lock: {held}"
    );

    // A cluster record that disagrees with the caller: -2 with its fingerprint, nothing
    // set; a caller that knows a record the master lacks: -2 without one.
    let _: () = conn.del(&[&key, &holder]).await.unwrap();
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    let (ok, _, found): Refused = acquire("v4", "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((ok, found.as_deref()), (-2, Some("f1")));
    assert_eq!(get(&server.url(), &key).await, None);
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "a refused caller wrote a holder record");
    let (ok, _, _, _, _, _): Acquired = long_form(
        acquire("v4", "0", "f1")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    let _: () = conn.del(&[&key, &holder]).await.unwrap();
    let _: () = conn.del(&record).await.unwrap();
    let (ok, _, found): Refused = acquire("v5", "0", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((ok, found), (-2, None));
    assert_eq!(get(&server.url(), &key).await, None);

    // Another kind of lock under the name: -3 with its kind, untouched, no holder record
    // written. A key of another type is told by the refused `SET NX`.
    let _: () = conn.hset(&key, "permits", 3).await.unwrap();
    let (ok, _, _, _, kind, _): Acquired = long_form(
        acquire("v6", "1", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!((ok, kind.as_deref()), (-3, Some("hash")));
    let permits: Option<String> = conn.hget(&key, "permits").await.unwrap();
    assert_eq!(permits.as_deref(), Some("3"));
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.zadd(&key, "m", 1).await.unwrap();
    let (ok, _, _, _, kind, _): Acquired = long_form(
        acquire("v6", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!((ok, kind.as_deref()), (-3, Some("zset")));
    let members: Vec<String> = conn.zrange(&key, 0, -1).await.unwrap();
    assert_eq!(members, ["m"]);
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.set(&key, "x").await.unwrap();
    let _: () = conn.hset(&owner, "kind", "semaphore").await.unwrap();
    let (ok, _, _, _, kind, _): Acquired = long_form(
        acquire("v7", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!((ok, kind.as_deref()), (-3, Some("semaphore")));
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "a refusal wrote a holder record");
    // An owner record of kind 'lock' (an earlier version's, beside its lock key) marks no
    // other kind: the name is granted, and the record left as it is.
    let _: () = conn.del(&[&key, &owner]).await.unwrap();
    let _: () = conn
        .hset_multiple(&owner, &[("kind", "lock"), ("value", "old")])
        .await
        .unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v8", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    let left: Option<String> = conn.hget(&owner, "value").await.unwrap();
    assert_eq!(left.as_deref(), Some("old"));
    // A key of another type at the holder record's key can never fail a grant (the lock
    // key already set), and is left as it is: under another key prefix it may be a lock.
    let _: () = conn.del(&[&key, &owner]).await.unwrap();
    let _: () = conn.pset_ex(&holder, "not a hash", 5000).await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v9", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    assert_eq!(
        get(&server.url(), &holder).await.as_deref(),
        Some("not a hash")
    );
    let pttl: i64 = conn.pttl(&holder).await.unwrap();
    assert!((0..=5000).contains(&pttl), "{pttl}");
    // Once it is gone, the next grant writes the record.
    let _: () = conn.del(&[&key, &holder]).await.unwrap();
    let (ok, ..): Acquired = long_form(
        acquire("v10", "0", "")
            .invoke_async(&mut conn)
            .await
            .unwrap(),
    );
    assert_eq!(ok, 1);
    assert_holder_written(&mut conn, &holder, who, "after it").await;
    // A grant answers short, as the mechanism does: the epoch, and the fence counter only
    // where it was asked for.
    let _: () = conn.del(&key).await.unwrap();
    let answer: Vec<redis::Value> = acquire("v11", "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(answer.len(), 2, "{answer:?}");
    let _: () = conn.del(&key).await.unwrap();
    let (ok, _, counter): (i64, String, Option<String>) = acquire("v12", "1", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((ok, counter.as_deref()), (1, Some("41")));
}

/// The readers' mark (docs/design.md §16): a reader's grant puts it in the lock key,
/// expiring no sooner than the reader, so that a mutex's `SET NX` refuses the name; a
/// writer's grant replaces a mark that no live reader stands behind; a read extension keeps
/// it alive as long, and counts for nothing (-1) where the key holds a writer's value; a
/// downgrade replaces the writer's value with it, with the writer's `PTTL`.
#[tokio::test]
async fn readers_mark_contract() {
    const MARK: &str = "redquorum:readers";
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let (acquire, extend, downgrade) = (
        Script::new(RW_ACQUIRE),
        Script::new(RW_EXTEND_READ),
        Script::new(RW_DOWNGRADE),
    );
    let key = unique_key("marked");
    let record = unique_key("cluster");
    let (owner, index) = (
        format!("redquorum:owner:{key}"),
        format!("redquorum:rw:{key}:readers"),
    );
    let reader = |value: &str| format!("redquorum:rw:{key}:reader:{value}");
    type RwAnswer = (i64, String, Option<String>, i64, Option<String>);
    let rw = |value: &str, ttl: u64, mode: &str| {
        let mut call = preamble(&acquire, &record, "e1", "");
        call.key(&key)
            .key(format!("redquorum:fence:{key}"))
            .key(&owner)
            .key(&index)
            .key(format!("redquorum:rw:{key}:intent"))
            .key(format!("redquorum:rw:{key}:reader:"))
            .arg(value)
            .arg(ttl)
            .arg("0")
            .arg("client")
            .arg("host")
            .arg(1)
            .arg("")
            .arg(mode)
            .arg("intent-1")
            .arg(1000)
            .arg(64)
            .arg(MARK);
        call
    };
    let extend_read = |value: &str, ttl: u64| {
        let mut call = preamble(&extend, &record, "", "");
        call.key(reader(value))
            .key(&index)
            .key(&owner)
            .key(&key)
            .arg(value)
            .arg(ttl)
            .arg(MARK);
        call
    };
    let mark_pttl = async |conn: &mut redis::aio::MultiplexedConnection| {
        let value: Option<String> = conn.get(&key).await.unwrap();
        assert_eq!(value.as_deref(), Some(MARK));
        conn.pttl::<_, i64>(&key).await.unwrap()
    };

    // A reader marks the key for its TTL; a shorter reader leaves the mark as it is.
    let (code, ..): RwAnswer = rw("r1", 5_000, "r").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let pttl = mark_pttl(&mut conn).await;
    assert!((4_000..=5_000).contains(&pttl), "{pttl}");
    let (code, ..): RwAnswer = rw("r2", 2_000, "r").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    assert!(mark_pttl(&mut conn).await > 4_000);
    // A writer is refused while readers live.
    let (code, ..): RwAnswer = rw("w1", 5_000, "w").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0, "a writer waits for the readers");
    // An extension keeps the mark alive as long as the reader.
    let (code, ..): (i64, Option<String>, Option<String>) = extend_read("r2", 8_000)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let pttl = mark_pttl(&mut conn).await;
    assert!((7_000..=8_000).contains(&pttl), "{pttl}");
    // The readers gone (as they expire), the mark gives way to a writer.
    let _: () = conn.del(&[reader("r1"), reader("r2")]).await.unwrap();
    let (code, ..): RwAnswer = rw("w1", 5_000, "w").invoke_async(&mut conn).await.unwrap();
    assert_eq!(
        code, 1,
        "the writer replaces a mark no live reader stands behind"
    );
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("w1"));
    // The owner record, kept for the readers' 8 s, now lives as long as the writer: one
    // that dies leaves no kind behind its key.
    let pttl: i64 = conn.pttl(&owner).await.unwrap();
    assert!((4_000..=5_000).contains(&pttl), "{pttl}");
    // A reader key beside a writer's value (exclusion already broken on this master, as
    // after a partial loss) is not extended: this master counts for nothing.
    let _: () = conn.pset_ex(reader("r3"), "r3", 5_000).await.unwrap();
    let (code, ..): (i64, Option<String>, Option<String>) = extend_read("r3", 9_000)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("w1"));
    let pttl: i64 = conn.pttl(reader("r3")).await.unwrap();
    assert!(pttl <= 5_000, "{pttl}");
    let _: () = conn.del(reader("r3")).await.unwrap();
    // A downgrade turns the writer's value into the mark, with the writer's PTTL.
    let (code, ..): (i64, String, Option<String>) = preamble(&downgrade, &record, "e1", "")
        .key(&key)
        .key(&owner)
        .key(&index)
        .key(reader("w1"))
        .arg("w1")
        .arg(format!("redquorum:released:{key}"))
        .arg(MARK)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 1);
    let (mark, held): (i64, i64) = (
        mark_pttl(&mut conn).await,
        conn.pttl(reader("w1")).await.unwrap(),
    );
    assert!(
        held > 4_000 && mark.abs_diff(held) <= 5,
        "mark {mark} ms, reader {held} ms"
    );
}

/// A read-write lock held by a reader keeps the readers' mark in its lock key, beside its
/// owner record (kind `rwlock`), the reader's key and the index, as `rw_acquire.lua` leaves
/// them. Every script that takes the name as a mutex (`acquire.lua`, `acquire_queued.lua`,
/// `acquire_many.lua`, `enqueue.lua`) answers -3 with that kind and changes nothing.
#[tokio::test]
async fn a_name_held_by_a_reader_is_another_kind_to_every_mutex_script() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let keys = QueueKeys::new("read_held");
    let key = keys.key.clone();
    let record = keys.record.clone();
    let owner = format!("redquorum:owner:{key}");
    let fence = format!("redquorum:fence:{key}");
    let index = format!("redquorum:rw:{key}:readers");
    let reader = format!("redquorum:rw:{key}:reader:r1");
    let holder = holder_of(&unique_key("tag"));
    let rw = Script::new(RW_ACQUIRE);
    let (code, ..): (i64, String, Option<String>, i64, Option<String>) =
        preamble(&rw, &record, "e1", "")
            .key(&key)
            .key(&fence)
            .key(&owner)
            .key(&index)
            .key(format!("redquorum:rw:{key}:intent"))
            .key(format!("redquorum:rw:{key}:reader:"))
            .arg("r1")
            .arg(10_000)
            .arg("0")
            .arg("client")
            .arg("host")
            .arg(1)
            .arg("")
            .arg("r")
            .arg("")
            .arg(0)
            .arg(64)
            .arg("redquorum:readers")
            .invoke_async(&mut conn)
            .await
            .unwrap();
    assert_eq!(code, 1, "the reader is granted");
    // A waiter of a mutex queued on the name before it became a read-write lock.
    let _: () = conn.zadd(&keys.queue, "w1", 1).await.unwrap();
    let _: () = conn
        .pset_ex(
            format!("{}w1", keys.waiters),
            "800 redquorum:handoff:c",
            5000,
        )
        .await
        .unwrap();
    type State = (
        std::collections::HashMap<String, String>,
        Option<String>,
        Vec<String>,
        Option<String>,
        Vec<String>,
        bool,
    );
    let state = |mut conn: redis::aio::MultiplexedConnection| {
        let (key, owner, index, reader, queue, holder) = (
            key.clone(),
            owner.clone(),
            index.clone(),
            reader.clone(),
            keys.queue.clone(),
            holder.clone(),
        );
        async move {
            let state: State = (
                conn.hgetall(&owner).await.unwrap(),
                conn.get(&reader).await.unwrap(),
                conn.smembers(&index).await.unwrap(),
                conn.get(&key).await.unwrap(),
                conn.zrange(&queue, 0, -1).await.unwrap(),
                conn.exists(&holder).await.unwrap(),
            );
            state
        }
    };
    let before = state(conn.clone()).await;
    assert_eq!(
        before,
        (
            [("kind".to_owned(), "rwlock".to_owned())].into(),
            Some("r1".to_owned()),
            vec!["r1".to_owned()],
            Some("redquorum:readers".to_owned()),
            vec!["w1".to_owned()],
            false,
        )
    );

    let scripts = MutexScripts::new();
    let other = unique_key("read_held_other");
    for (name, call, detail) in scripts.calls(&keys, &holder, &other) {
        let reply = refused_as(&mut conn, (name, call, detail), "rwlock").await;
        assert_eq!(state(conn.clone()).await, before, "{name}");
        if name == "acquire_many.lua" {
            assert_eq!(reply[3], redis::Value::Array(vec![redis::Value::Int(1)]));
            assert_eq!(get(&server.url(), &other).await, None, "{name}");
        }
    }
}

/// A lock's name whose key has another type (a hash: another kind of lock under another
/// key prefix, or anything else) is another kind to every script that takes the name as a
/// mutex: they answer -3 with the key's type, and write nothing. `SET NX` refuses such a
/// key, and `acquire_queued.lua` and `enqueue.lua` read its type only when their `GET`
/// fails on it.
#[tokio::test]
async fn a_name_of_another_type_is_another_kind_to_every_mutex_script() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let keys = QueueKeys::new("other_type");
    let holder = holder_of(&unique_key("tag"));
    let other = unique_key("other_type_other");
    let _: () = conn.hset(&keys.key, "field", "value").await.unwrap();
    let _: () = conn.zadd(&keys.queue, "w1", 1).await.unwrap();
    let scripts = MutexScripts::new();
    for (name, call, detail) in scripts.calls(&keys, &holder, &other) {
        refused_as(&mut conn, (name, call, detail), "hash").await;
        let mut written: Vec<String> = conn.keys("*").await.unwrap();
        written.sort();
        let mut expected = vec![keys.key.clone(), keys.queue.clone(), keys.record.clone()];
        expected.sort();
        assert_eq!(written, expected, "{name} wrote");
        let queue: Vec<String> = conn.zrange(&keys.queue, 0, -1).await.unwrap();
        assert_eq!(queue, ["w1"], "{name}");
    }
}

/// A key of another type under the name (another application's, or one a user wrote)
/// holds no holder's value: every script that compares the lock key with a holder's value
/// reads it as another value (`value.lua`), answers so, and leaves it (and everything
/// else) alone, where `GET` would fail the script with Redis's `WRONGTYPE` text.
#[tokio::test]
async fn a_name_of_another_type_is_another_value_to_every_holders_script() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let keys = QueueKeys::new("other_type_held");
    let _: () = conn.hset(&keys.key, "field", "value").await.unwrap();
    let _: () = conn.zadd(&keys.queue, "w1", 1).await.unwrap();
    // A reader's own key, for `rw_extend_read.lua`: ours, beside a hash under the name.
    let reader = format!("redquorum:reader:{}:mine", keys.key);
    let _: () = conn.pset_ex(&reader, "mine", 10_000).await.unwrap();
    let scripts = HolderScripts::new();
    for (name, call, answer) in scripts.calls(&keys, &reader) {
        let mut before: Vec<String> = conn.keys("*").await.unwrap();
        before.sort();
        let reply: redis::Value = call.invoke_async(&mut conn).await.unwrap();
        assert_eq!(answer.of(&reply), answer.another(), "{name}: {reply:?}");
        let kind: String = redis::cmd("TYPE")
            .arg(&keys.key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let field: Option<String> = conn.hget(&keys.key, "field").await.unwrap();
        assert_eq!(
            (kind.as_str(), field.as_deref()),
            ("hash", Some("value")),
            "{name}"
        );
        let mut after: Vec<String> = conn.keys("*").await.unwrap();
        after.retain(|k| *k != keys.record || before.contains(k));
        after.sort();
        assert_eq!(after, before, "{name} wrote");
        let queue: Vec<String> = conn.zrange(&keys.queue, 0, -1).await.unwrap();
        assert_eq!(queue, ["w1"], "{name}");
    }
}

/// The scripts that compare the lock key with a holder's value, with where each says
/// "another value".
struct HolderScripts {
    release: Script,
    release_many: Script,
    extend: Script,
    extend_many: Script,
    dequeue: Script,
    fence: Script,
    downgrade: Script,
    extend_read: Script,
}

/// Where a script's answer says whether the key held another value, and what says so.
#[derive(Clone, Copy)]
enum Another {
    /// The answer is this integer.
    Int(i64),
    /// The answer's element at this place is this integer.
    At(usize, i64),
}

impl Another {
    /// What `reply` says at this place.
    fn of(self, reply: &redis::Value) -> i64 {
        match (self, reply) {
            (Another::Int(_), v) => int(v),
            (Another::At(at, _), redis::Value::Array(items)) => int(&items[at]),
            (_, other) => panic!("not an array: {other:?}"),
        }
    }

    /// What says "another value".
    fn another(self) -> i64 {
        match self {
            Another::Int(code) | Another::At(_, code) => code,
        }
    }
}

impl HolderScripts {
    fn new() -> Self {
        Self {
            release: Script::new(RELEASE),
            release_many: Script::new(RELEASE_MANY),
            extend: Script::new(EXTEND),
            extend_many: Script::new(EXTEND_MANY),
            dequeue: Script::new(DEQUEUE),
            fence: Script::new(FENCE),
            downgrade: Script::new(RW_DOWNGRADE),
            extend_read: Script::new(RW_EXTEND_READ),
        }
    }

    /// Each script's call on `keys.key` with the value "mine" (the waiter "mine" for
    /// `dequeue.lua`; `reader` the reader's own key for `rw_extend_read.lua`), and where
    /// its answer says "another value".
    fn calls<'a>(
        &'a self,
        keys: &QueueKeys,
        reader: &str,
    ) -> Vec<(&'static str, redis::ScriptInvocation<'a>, Another)> {
        let key = &keys.key;
        let (fence, owner, channel) = (
            format!("redquorum:fence:{key}"),
            format!("redquorum:owner:{key}"),
            format!("redquorum:released:{key}"),
        );
        let holder = holder_of("other-type-tag");
        let readers = format!("redquorum:readers:{key}");
        let mut release = self.release.key(key);
        release
            .key(&keys.queue)
            .key(&owner)
            .key(&keys.ticket)
            .arg("mine")
            .arg(&channel)
            .arg(&keys.waiters)
            .arg("1");
        let mut release_many = self.release_many.key(key);
        release_many
            .key(&keys.queue)
            .key(&owner)
            .arg("mine")
            .arg(&channel)
            .arg(&keys.waiters);
        let mut extend = preamble(&self.extend, &keys.record, "e1", "");
        extend
            .key(key)
            .key(&holder)
            .key(&owner)
            .arg("mine")
            .arg(10_000);
        let mut extend_many = preamble(&self.extend_many, &keys.record, "e1", "");
        extend_many
            .key(&holder)
            .key(key)
            .key(&owner)
            .arg("mine")
            .arg(10_000);
        let mut dequeue = self.dequeue.key(key);
        dequeue
            .key(&keys.queue)
            .key(format!("{}mine", keys.waiters))
            .arg("mine")
            .arg(&channel)
            .arg(&keys.waiters);
        let mut fence_call = self.fence.key(key);
        fence_call
            .key(&fence)
            .key(&keys.record)
            .key(&owner)
            .arg("mine")
            .arg(7);
        let mut downgrade = preamble(&self.downgrade, &keys.record, "e1", "");
        downgrade
            .key(key)
            .key(&owner)
            .key(&readers)
            .key(reader)
            .arg("mine")
            .arg(&channel)
            .arg("readers-mark");
        let mut extend_read = preamble(&self.extend_read, &keys.record, "e1", "");
        extend_read
            .key(reader)
            .key(&readers)
            .key(&owner)
            .key(key)
            .arg("mine")
            .arg(10_000)
            .arg("readers-mark");
        vec![
            ("release.lua", release, Another::Int(-1)),
            ("release_many.lua", release_many, Another::At(2, 1)),
            ("extend.lua", extend, Another::At(0, -1)),
            ("extend_many.lua", extend_many, Another::At(0, -1)),
            ("dequeue.lua", dequeue, Another::Int(0)),
            ("fence.lua", fence_call, Another::At(0, -1)),
            ("rw_downgrade.lua", downgrade, Another::At(0, -1)),
            ("rw_extend_read.lua", extend_read, Another::At(0, -1)),
        ]
    }
}

/// A `GET` of the lock key that fails for another reason than the key's type (here the
/// user may not run `GET` on it) is that failure, never another kind: `acquire_queued.lua`
/// and `enqueue.lua` read the key's type only after a `WRONGTYPE`; nor another value: the
/// scripts that compare the key with a holder's value (`value.lua`) fail with it too.
#[tokio::test]
async fn a_get_failing_for_another_reason_is_an_error_not_another_kind() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut admin = raw(&server.url()).await;
    // Every command but `GET`.
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "noget", "on", ">pw", "~*", "&*", "+@all", "-get"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut conn = raw(&format!("redis://noget:pw@127.0.0.1:{}", server.port())).await;
    let keys = QueueKeys::new("get_refused");
    let holder = holder_of(&unique_key("tag"));
    let other = unique_key("get_refused_other");
    let scripts = MutexScripts::new();
    let reader = format!("redquorum:reader:{}:mine", keys.key);
    let () = redis::cmd("SET")
        .arg(&reader)
        .arg("mine")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mutex = scripts.calls(&keys, &holder, &other).into_iter();
    let mutex = mutex
        .filter(|(name, ..)| matches!(*name, "acquire_queued.lua" | "enqueue.lua"))
        .map(|(name, call, _)| (name, call));
    let holders = HolderScripts::new();
    let held = holders.calls(&keys, &reader).into_iter();
    for (name, call) in mutex.chain(held.map(|(name, call, _)| (name, call))) {
        let answer: redis::RedisResult<redis::Value> = call.invoke_async(&mut conn).await;
        let err = match answer {
            Ok(reply) => panic!("{name}: answered {reply:?}, not the refused GET"),
            Err(err) => err,
        };
        assert!(
            err.to_string()
                .contains("The user executing the script can't"),
            "{name}: {err}"
        );
    }
}

/// The scripts that take a name as a mutex, each with the place of its detail (the kind
/// that holds the name) in its answer.
struct MutexScripts {
    acquire: Script,
    queued: Script,
    many: Script,
    enqueue: Script,
}

impl MutexScripts {
    fn new() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            queued: Script::new(ACQUIRE_QUEUED),
            many: Script::new(ACQUIRE_MANY),
            enqueue: Script::new(ENQUEUE),
        }
    }

    /// Each script's call taking `keys.key` (with `other`, for `acquire_many.lua`), and
    /// where its answer's detail is.
    fn calls<'a>(
        &'a self,
        keys: &QueueKeys,
        holder: &str,
        other: &str,
    ) -> Vec<(&'static str, redis::ScriptInvocation<'a>, usize)> {
        let key = &keys.key;
        let (fence, owner) = (
            format!("redquorum:fence:{key}"),
            format!("redquorum:owner:{key}"),
        );
        let who = |call: &mut redis::ScriptInvocation<'a>| {
            call.arg(10_000)
                .arg("0")
                .arg("client")
                .arg("host")
                .arg(1)
                .arg("");
        };
        let mut acquire = preamble(&self.acquire, &keys.record, "e1", "");
        acquire
            .key(key)
            .key(&fence)
            .key(&owner)
            .key(&keys.ticket)
            .key(holder)
            .arg("m1");
        who(&mut acquire);
        let mut queued = preamble(&self.queued, &keys.record, "e1", "");
        queued
            .key(key)
            .key(&fence)
            .key(&owner)
            .key(&keys.queue)
            .key(&keys.ticket)
            .key(holder)
            .arg("m2");
        who(&mut queued);
        queued.arg("w1").arg("1").arg(&keys.waiters);
        let mut many = preamble(&self.many, &keys.record, "e1", "");
        many.key(holder)
            .key(key)
            .key(&fence)
            .key(&owner)
            .key(other)
            .key(format!("redquorum:fence:{other}"))
            .key(format!("redquorum:owner:{other}"))
            .arg("m3");
        who(&mut many);
        let enqueue = keys.enqueue(
            &self.enqueue,
            "w1",
            1,
            (false, false),
            "redquorum:handoff:c",
            "",
        );
        vec![
            ("acquire.lua", acquire, 4),
            ("acquire_queued.lua", queued, 4),
            ("acquire_many.lua", many, 4),
            ("enqueue.lua", enqueue, 4),
        ]
    }
}

/// Runs one of [`MutexScripts::calls`] and checks that it answered -3 with `kind` (the
/// kind that holds the name); returns the answer.
async fn refused_as(
    conn: &mut redis::aio::MultiplexedConnection,
    (name, call, detail): (&str, redis::ScriptInvocation<'_>, usize),
    kind: &str,
) -> Vec<redis::Value> {
    let reply: Vec<redis::Value> = call.invoke_async(conn).await.unwrap();
    assert_eq!(
        (int(&reply[0]), text_at(&reply, detail)),
        (-3, Some(kind.to_owned())),
        "{name}: {reply:?}"
    );
    reply
}

/// The integer `v` of a script's answer.
fn int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The text at `at` in a script's answer, if it is text.
fn text_at(reply: &[redis::Value], at: usize) -> Option<String> {
    match reply.get(at) {
        Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

type Permits = (
    i64,
    String,
    Option<Vec<String>>,
    i64,
    Vec<u32>,
    Option<String>,
);

/// `semaphore.lua`: all the wanted slots or none, the free slots and when enough free up,
/// the stored limit (written when missing, refused whenever another is given, rewritten by
/// a 'limit' call only while no permit is live), fence counters per slot, and the cluster
/// fingerprint.
#[tokio::test]
async fn semaphore_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(SEMAPHORE);
    let base = format!("redquorum:sem:{}:", unique_key("semaphore_script"));
    let record = unique_key("cluster");
    let limit_key = format!("{base}limit");
    let slot = |i: u32| format!("{base}{i}");
    let call = |mode: &str, value: &str, limit: u32, wanted: &[u32], fence: &str, fp: &str| {
        let mut call = preamble(&script, &record, "new-epoch", fp);
        call.key(&limit_key);
        for i in 0..limit {
            call.key(slot(i));
        }
        call.arg(value)
            .arg(10_000)
            .arg(fence)
            .arg("client-1")
            .arg("host-1")
            .arg(4242)
            .arg("worker")
            .arg(limit)
            .arg(&base)
            .arg(mode);
        for w in wanted {
            call.arg(*w);
        }
        call
    };
    let take = |value: &str, limit: u32, wanted: &[u32], fence: &str, fp: &str| {
        call("take", value, limit, wanted, fence, fp)
    };
    let replace = |limit: u32| call("limit", "-", limit, &[], "0", "");

    // Granted: the slot set like SET NX PX with its owner record; the limit stored.
    let (code, epoch_record, fences, wait, free, detail): Permits = take("v1", 2, &[0], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (code, fences, wait, free, detail),
        (1, None, -3, vec![0, 1], None)
    );
    assert!(epoch_record.starts_with("new-epoch:"));
    assert_eq!(get(&server.url(), &slot(0)).await.as_deref(), Some("v1"));
    let pttl: i64 = conn.pttl(slot(0)).await.unwrap();
    assert!(pttl > 9_000, "{pttl}");
    let stored: String = conn.get(&limit_key).await.unwrap();
    assert_eq!(stored, "2");
    let limit_ttl: i64 = conn.pttl(&limit_key).await.unwrap();
    assert_eq!(limit_ttl, -1, "the limit record has no TTL");
    let owner = format!("redquorum:owner:{}", slot(0));
    let who: std::collections::HashMap<String, String> = conn.hgetall(&owner).await.unwrap();
    assert_eq!(who.get("kind").map(String::as_str), Some("permit"));
    assert_eq!(who.get("value").map(String::as_str), Some("v1"));
    // A held slot: refused, nothing set; another slot is free here, so no wait.
    let (code, _, _, wait, free, _): Permits = take("v2", 2, &[0], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, wait, free), (0, -3, vec![1]));
    // Two wanted, one free: refused, and the wait is the held slot's PTTL; all or none.
    let (code, _, _, wait, free, _): Permits = take("v2", 2, &[0, 1], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, free), (0, vec![1]));
    assert!(wait > 9_000 && wait <= 10_000, "{wait}");
    assert_eq!(get(&server.url(), &slot(1)).await, None);
    // With fencing: the wanted slots' counters, in order ('' for none).
    let _: () = conn
        .set(format!("redquorum:fence:{}", slot(1)), 41)
        .await
        .unwrap();
    let (code, _, fences, _, _, _): Permits = take("v3", 2, &[1], "1", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, fences), (1, Some(vec!["41".to_owned()])));
    // Another limit while permits are live: -4 with the stored limit, nothing touched.
    let (code, _, _, _, _, detail): Permits = take("v4", 3, &[2], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, detail.as_deref()), (-4, Some("2")));
    assert_eq!(get(&server.url(), &slot(2)).await, None);
    assert_eq!(conn.get::<_, String>(&limit_key).await.unwrap(), "2");
    // Replacing the limit while a permit is live: refused (0, the stored limit), kept.
    let (code, _, _, _, _, detail): Permits = replace(3).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, detail.as_deref()), (0, Some("2")));
    assert_eq!(conn.get::<_, String>(&limit_key).await.unwrap(), "2");
    // No permit live any more: another limit is still refused (the record is sticky)...
    let _: () = conn.del(&[slot(0), slot(1)]).await.unwrap();
    let (code, _, _, _, _, detail): Permits = take("v5", 3, &[2], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, detail.as_deref()), (-4, Some("2")));
    assert_eq!(get(&server.url(), &slot(2)).await, None);
    assert_eq!(conn.get::<_, String>(&limit_key).await.unwrap(), "2");
    // ... until a 'limit' call replaces it, which takes no slot.
    let (code, _, _, _, _, detail): Permits = replace(3).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, detail), (1, None));
    assert_eq!(conn.get::<_, String>(&limit_key).await.unwrap(), "3");
    for i in 0..3 {
        assert_eq!(get(&server.url(), &slot(i)).await, None);
    }
    let (code, _, _, _, free, _): Permits = take("v5", 3, &[2], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, free), (1, vec![0, 1, 2]));
    // A cluster record that disagrees: -2 with its fingerprint, nothing set.
    let _: () = conn.hset(&record, "fingerprint", "f1").await.unwrap();
    let (code, _, found): Refused = take("v6", 3, &[0], "0", "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, found.as_deref()), (-2, Some("f1")));
    assert_eq!(get(&server.url(), &slot(0)).await, None);
}

type Inspected = (
    String,
    Option<String>,
    i64,
    std::collections::HashMap<String, String>,
    Option<String>,
    String,
    i64,
    std::collections::HashMap<String, String>,
);

/// The holder records' common beginning that `inspect_contract` passes: under key prefix
/// `app:`, so that a script that ignored it would find no record.
const HOLDERS: &str = "app:redquorum:holder:";

/// Runs `inspect.lua` with `EVAL_RO`, which the server refuses for a script that writes.
async fn inspect_ro(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: [&str; 4],
) -> redis::RedisResult<Inspected> {
    redis::cmd("EVAL_RO")
        .arg(INSPECT)
        .arg(4)
        .arg(&keys[..])
        .arg(HOLDERS)
        .query_async(conn)
        .await
}

#[tokio::test]
async fn inspect_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let key = unique_key("inspect_script");
    let (owner, fence) = (unique_key("owner"), unique_key("fence"));
    let queue = format!("redquorum:queue:{key}");
    let keys = [key.as_str(), owner.as_str(), fence.as_str(), queue.as_str()];

    // The server refuses a read-only call of a script that writes: the check can fail.
    let writes = redis::cmd("EVAL_RO")
        .arg("return redis.call('SET', KEYS[1], 'x')")
        .arg(1)
        .arg(&key)
        .query_async::<()>(&mut conn)
        .await;
    assert!(writes.is_err(), "EVAL_RO ran a write");

    // Missing: type none, no value, PTTL -2, no record, no counter, the server's time, no
    // holder.
    let (kind, value, pttl, record, counter, now, _, holder) =
        inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!((kind.as_str(), value, pttl), ("none", None, -2));
    assert!(record.is_empty());
    assert_eq!(counter, None);
    assert!(holder.is_empty());
    let now: u64 = now.parse().unwrap();
    assert!(now > 1_600_000_000_000, "milliseconds: {now}");

    // A lock with an owner record (the other kinds keep one) and a fence counter, read as
    // they are and left so; a value without a dot is its own tag, here of no record.
    let _: () = conn.pset_ex(&key, "v1", 10_000).await.unwrap();
    let _: () = conn
        .hset_multiple(&owner, &[("kind", "lock"), ("value", "v1"), ("label", "l")])
        .await
        .unwrap();
    let _: () = conn.pexpire(&owner, 10_000).await.unwrap();
    let _: () = conn.set(&fence, 5).await.unwrap();
    let (kind, value, pttl, record, counter, _, queued, holder) =
        inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!((kind.as_str(), value.as_deref()), ("string", Some("v1")));
    assert_eq!(queued, 0, "a lease value is no queue member");
    assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
    assert_eq!(record.get("label").map(String::as_str), Some("l"));
    assert_eq!(record.get("value").map(String::as_str), Some("v1"));
    assert_eq!(counter.as_deref(), Some("5"));
    assert!(holder.is_empty(), "{holder:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v1"));
    let owner_pttl: i64 = conn.pttl(&owner).await.unwrap();
    assert!(owner_pttl > 9_000, "{owner_pttl}");

    // A value '<tag>.<hex>' names its client's holder record: its fields, read as they
    // are and left so.
    let tag = unique_key("tag");
    let who = [
        ("client", "c1"),
        ("host", "h1"),
        ("pid", "42"),
        ("label", "worker"),
    ];
    let _: () = conn
        .hset_multiple(format!("{HOLDERS}{tag}"), &who)
        .await
        .unwrap();
    let _: () = conn
        .pexpire(format!("{HOLDERS}{tag}"), 3_600_000)
        .await
        .unwrap();
    let _: () = conn.del(&owner).await.unwrap();
    let _: () = conn
        .pset_ex(&key, format!("{tag}.abcdef"), 10_000)
        .await
        .unwrap();
    let (_, value, _, record, _, _, _, holder) = inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!(value, Some(format!("{tag}.abcdef")));
    assert!(
        record.is_empty(),
        "a lock keeps no owner record: {record:?}"
    );
    let expected: std::collections::HashMap<String, String> = who
        .iter()
        .map(|(field, value)| (field.to_string(), value.to_string()))
        .collect();
    assert_eq!(holder, expected);
    let held: i64 = conn.pttl(format!("{HOLDERS}{tag}")).await.unwrap();
    assert!(held > 3_500_000, "{held}");
    // The tag is what comes before the last dot, whatever follows it (as the client's
    // `holder_key` reads it).
    let _: () = conn
        .pset_ex(&key, format!("{tag}.xyz"), 10_000)
        .await
        .unwrap();
    let (_, _, _, _, _, _, _, holder) = inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!(holder, expected);
    // A tag without a record and a record of another type name no holder: none shown.
    let (missing, other) = (unique_key("tag"), unique_key("tag"));
    let _: () = conn
        .set(format!("{HOLDERS}{other}"), "not a hash")
        .await
        .unwrap();
    for value in [format!("{missing}.abcdef"), format!("{other}.abcdef")] {
        let _: () = conn.pset_ex(&key, &value, 10_000).await.unwrap();
        let (_, seen, _, _, _, _, _, holder) = inspect_ro(&mut conn, keys).await.unwrap();
        assert_eq!(seen.as_deref(), Some(value.as_str()));
        assert!(holder.is_empty(), "{value}: {holder:?}");
    }

    // No expiry: PTTL -1. Another type under the name: its type, no value; a record or a
    // counter of another type is not read.
    let _: () = conn.set(&key, "v2").await.unwrap();
    let (_, _, pttl, _, _, _, _, _) = inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!(pttl, -1);
    // A value that is a member of the waiter queue: the key is handed to that waiter.
    let _: () = conn.zadd(&queue, "v2", 1).await.unwrap();
    let (_, value, _, _, _, _, queued, _) = inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!((value.as_deref(), queued), (Some("v2"), 1));
    let _: () = conn.del(&queue).await.unwrap();
    let _: () = conn.del(&[&key, &owner, &fence]).await.unwrap();
    let _: () = conn.hset(&key, "permits", 3).await.unwrap();
    let _: () = conn.set(&owner, "not a hash").await.unwrap();
    let _: () = conn.hset(&fence, "not", "a counter").await.unwrap();
    let (kind, value, _, record, counter, _, _, holder) =
        inspect_ro(&mut conn, keys).await.unwrap();
    assert_eq!((kind.as_str(), value, counter), ("hash", None, None));
    assert!(record.is_empty());
    assert!(holder.is_empty());
}

type ForceUnlocked = (i64, Option<String>, Option<u64>);

#[tokio::test]
async fn force_unlock_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(FORCE_UNLOCK);
    let key = unique_key("force_unlock_script");
    let (owner, fence) = (unique_key("owner"), unique_key("fence"));
    let channel = format!("redquorum:released:{key}");
    let (queue, prefix) = (
        format!("redquorum:queue:{key}"),
        format!("redquorum:waiter:{key}:"),
    );
    let force = || {
        let mut call = script.key(&key);
        call.key(&owner)
            .key(&fence)
            .key(&queue)
            .arg(&channel)
            .arg(&prefix)
            .arg("redquorum:readers");
        call
    };
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(&channel).await.unwrap();

    // Missing: 0, and the counter is raised (created at 1) all the same.
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (0, None, Some(1)));
    // Whatever value holds it: 1 with that value; the lock's owner record goes with it,
    // the counter rises by one, and a notice is published.
    let _: () = conn.pset_ex(&key, "theirs", 10_000).await.unwrap();
    let _: () = conn
        .hset_multiple(&owner, &[("kind", "lock"), ("value", "theirs")])
        .await
        .unwrap();
    let _: () = conn.set(&fence, 41).await.unwrap();
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (1, Some("theirs".to_owned()), Some(42)));
    assert_eq!(get(&server.url(), &key).await, None);
    let exists: bool = conn.exists(&owner).await.unwrap();
    assert!(!exists, "the owner record goes with the lock");
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        use futures::StreamExt;
        sub.on_message().next().await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(msg.get_channel_name(), channel);
    assert_eq!(msg.get_payload::<String>().unwrap(), key);

    // Another kind of lock: -3 with its kind; the name, its record and the counter are
    // left alone.
    let _: () = conn.set(&key, "x").await.unwrap();
    let _: () = conn.hset(&owner, "kind", "semaphore").await.unwrap();
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (-3, Some("semaphore".to_owned()), None));
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("x"));
    let _: () = conn.del(&[&key, &owner]).await.unwrap();
    let _: () = conn.hset(&key, "permits", 3).await.unwrap();
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (-3, Some("hash".to_owned()), None));
    let permits: Option<String> = conn.hget(&key, "permits").await.unwrap();
    assert_eq!(permits.as_deref(), Some("3"));
    assert_eq!(conn.get::<_, u64>(&fence).await.unwrap(), 42);

    // A lock with live queued waiters goes to the head, told on its channel, as a release
    // would hand it.
    let _: () = conn.del(&key).await.unwrap();
    let handoff = "redquorum:handoff:client-h";
    sub.subscribe(handoff).await.unwrap();
    let _: () = conn.pset_ex(&key, "theirs", 10_000).await.unwrap();
    let _: () = conn
        .zadd_multiple(&queue, &[(1, "h"), (2, "x")])
        .await
        .unwrap();
    for waiter in ["h", "x"] {
        let _: () = conn
            .pset_ex(format!("{prefix}{waiter}"), format!("900 {handoff}"), 900)
            .await
            .unwrap();
    }
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (1, Some("theirs".to_owned()), Some(43)));
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("h"));
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        use futures::StreamExt;
        sub.on_message().next().await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (msg.get_channel_name(), msg.get_payload::<String>().unwrap()),
        (handoff, "h".to_owned())
    );
    // Force-unlocking the key handed to h takes h out of the queue (its liveness key
    // too), and the key goes on to x, never straight back to h.
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (1, Some("h".to_owned()), Some(44)));
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("x"));
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(members, ["x"]);
    let live: bool = conn.exists(format!("{prefix}h")).await.unwrap();
    assert!(!live, "the unlocked waiter's liveness key is gone");
    // On a master over `maxmemory`, a held lock is still deleted, its counter raised and
    // the key handed on: the `DEL` comes first, and lets the script's later writes run.
    set_maxmemory(&mut conn, 1).await;
    let refused: redis::RedisResult<()> = conn.set(unique_key("oom"), "x").await;
    assert!(refused.is_err(), "the master is not over maxmemory");
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (1, Some("x".to_owned()), Some(45)));
    set_maxmemory(&mut conn, 0).await;
    // The readers' mark of a read-write lock is another kind's, even without its owner
    // record: left alone, and so is the counter.
    let _: () = conn.del(&owner).await.unwrap();
    let _: () = conn.pset_ex(&key, "redquorum:readers", 5000).await.unwrap();
    let r: ForceUnlocked = force().invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, (-3, Some("rwlock".to_owned()), None));
    assert_eq!(
        get(&server.url(), &key).await.as_deref(),
        Some("redquorum:readers")
    );
    assert_eq!(get(&server.url(), &fence).await.as_deref(), Some("45"));
}

#[tokio::test]
async fn stamp_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(STAMP);
    let record = unique_key("cluster");
    let stamp = |run_id: &'static str, epoch_id: &'static str, fingerprint: &'static str| {
        let mut call = script.key(&record);
        call.arg(run_id)
            .arg(epoch_id)
            .arg("fingerprint")
            .arg(fingerprint)
            .arg("master")
            .arg("m1");
        call
    };
    // A bootstrap whose epoch is not the surveyed one (missing, or another): -1, nothing
    // written.
    let (code, _): (i64, String) = stamp("run-1", "e1", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1);
    // The data epoch lives in the record's key: a hash holding only that is no record.
    let _: () = conn.hset(&record, "epoch", "e0:123").await.unwrap();
    let (code, _): (i64, String) = stamp("run-1", "e1", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1);
    let fields: Vec<String> = conn.hkeys(&record).await.unwrap();
    assert_eq!(fields, ["epoch"]);
    // The surveyed epoch: written, with the bootstrap fields naming the run_id and epoch.
    let _: () = conn.hset(&record, "epoch", "e1:123").await.unwrap();
    let (code, fingerprint): (i64, String) = stamp("run-1", "e1", "f1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, fingerprint.as_str()), (1, "f1"));
    let fields: std::collections::HashMap<String, String> = conn.hgetall(&record).await.unwrap();
    assert_eq!(fields["bootstrap_run_id"], "run-1");
    assert_eq!(fields["bootstrap_epoch"], "e1");
    assert_eq!(fields["master"], "m1");
    assert_eq!(fields["epoch"], "e1:123", "the epoch is kept");
    // An existing record is never overwritten: 0 with its fingerprint.
    let (code, fingerprint): (i64, String) = stamp("run-2", "e1", "f2")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, fingerprint.as_str()), (0, "f1"));
    // Without a run_id (re-admission): no epoch check, no bootstrap fields.
    let _: () = conn.del(&record).await.unwrap();
    let (code, _): (i64, String) = stamp("", "", "f3").invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 1);
    let fields: std::collections::HashMap<String, String> = conn.hgetall(&record).await.unwrap();
    assert!(!fields.contains_key("bootstrap_run_id"), "{fields:?}");
    // A hash with other fields but no fingerprint is not written over: 0, no fingerprint.
    let _: () = conn.del(&record).await.unwrap();
    let _: () = conn.hset(&record, "master", "m0").await.unwrap();
    let (code, fingerprint): (i64, String) =
        stamp("", "", "f4").invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, fingerprint.as_str()), (0, ""));
    let fields: Vec<String> = conn.hkeys(&record).await.unwrap();
    assert_eq!(fields, ["master"]);
}

#[tokio::test]
async fn fence_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(FENCE);
    let key = unique_key("fence_script");
    let (fence, record, owner) = (
        unique_key("fence"),
        unique_key("cluster"),
        unique_key("owner"),
    );
    let _: () = conn.hset(&record, "epoch", "e:1").await.unwrap();
    let write = |value: &'static str, token: u64| {
        let mut call = script.key(&key);
        call.key(&fence)
            .key(&record)
            .key(&owner)
            .arg(value)
            .arg(token);
        call
    };
    type Fenced = (i64, Option<String>, Option<String>);

    // Not ours: -1, counter untouched.
    let (code, before, record): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before, record.as_deref()), (-1, None, Some("e:1")));
    assert_eq!(get(&server.url(), &fence).await, None);
    // Ours, counter missing: written, before = nothing; the owner record shows the token.
    let _: () = conn.set(&key, "mine").await.unwrap();
    let _: () = conn.hset(&owner, "value", "mine").await.unwrap();
    let (code, before, _): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before), (1, None));
    assert_eq!(get(&server.url(), &fence).await.as_deref(), Some("5"));
    let shown: Option<String> = conn.hget(&owner, "token").await.unwrap();
    assert_eq!(shown.as_deref(), Some("5"));
    // Equal token: a conflict (strict increase), reporting the counter.
    let (code, before, _): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before.as_deref()), (0, Some("5")));
    // Lower token: a conflict; higher: written.
    let (code, _, _): Fenced = write("mine", 3).invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    let (code, before, _): Fenced = write("mine", 9).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before.as_deref()), (1, Some("5")));
    // An equal token again: still a conflict (the planted max-write is a variant built only
    // with `--cfg redquorum_mutants`, never a mode of this script).
    let (code, _, _): Fenced = write("mine", 9).invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(get(&server.url(), &fence).await.as_deref(), Some("9"));
}

#[tokio::test]
async fn epoch_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EPOCH);
    let record = unique_key("cluster");
    let (first, now): (String, String) = script
        .key(&record)
        .arg("a")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let created = first.strip_prefix("a:").map(|c| c.parse::<u64>().unwrap());
    let now: u64 = now.parse().unwrap();
    assert!(
        created.is_some_and(|c| c <= now),
        "a new epoch, created before the time read: {first} at {now}"
    );
    let (second, _): (String, String) = script
        .key(&record)
        .arg("b")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(second, first, "an existing epoch is kept");
    assert_eq!(epoch_in(&mut conn, &record).await, Some(first));
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let (third, _): (String, String) = script
        .key(&record)
        .arg("c")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert!(
        third.starts_with("c:"),
        "lost data starts a new epoch: {third}"
    );
}

#[tokio::test]
async fn fenced_set_rejects_older_tokens() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let key = unique_key("fenced_set");
    // Tokens come from leases; here the storage side is tested alone.
    let token = redquorum::FencingToken::from;
    assert!(
        redquorum::fenced_set(&mut conn, &key, "a", token(5))
            .await
            .unwrap()
    );
    assert!(
        redquorum::fenced_set(&mut conn, &key, "b", token(5))
            .await
            .unwrap()
    );
    assert!(
        !redquorum::fenced_set(&mut conn, &key, "stale", token(4))
            .await
            .unwrap()
    );
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("b"));
    assert!(
        redquorum::fenced_set(&mut conn, &key, "c", token(7))
            .await
            .unwrap()
    );
    assert!(
        !redquorum::fenced_set(&mut conn, &key, "stale", token(6))
            .await
            .unwrap()
    );
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("c"));
}

/// How many connections the server behind `conn` has accepted so far (`INFO stats`).
async fn connections_received(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    info_number(conn, "stats", "total_connections_received:")
        .await
        .expect("INFO stats reports total_connections_received")
}

/// Whether each of `sources` is in the server's script cache.
async fn cached(conn: &mut redis::aio::MultiplexedConnection, sources: &[&str]) -> Vec<bool> {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("EXISTS");
    for source in sources {
        cmd.arg(Script::new(source).get_hash());
    }
    cmd.query_async(conn).await.unwrap()
}

/// `SCRIPT FLUSH` under an open connection: the client's next `EVALSHA` of each script
/// answers `NOSCRIPT`, and the client loads the script and runs it on the same connection
/// (no reconnect, which would load every script first).
#[tokio::test]
async fn a_flushed_script_cache_is_reloaded_on_noscript() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let client = redquorum::Redlock::builder()
        .quarantine(false)
        .master(server.url())
        .build()
        .unwrap();
    let key = unique_key("noscript");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect
    let mut conn = raw(&server.url()).await;
    let connections = connections_received(&mut conn).await;

    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(cached(&mut conn, &[EXTEND, RELEASE]).await, [false, false]);
    // The acquire script, then the extend and release scripts.
    let lease = client.acquire(&key).await.unwrap();
    lease.extend().await.unwrap();
    assert_eq!(cached(&mut conn, &[EXTEND, RELEASE]).await, [true, false]);
    let report = lease.release().await.unwrap();
    assert_eq!(report.released(), 1, "{:?}", report.masters());
    assert_eq!(cached(&mut conn, &[EXTEND, RELEASE]).await, [true, true]);
    assert_eq!(get(&server.url(), &key).await, None);
    // `get` opened one connection of its own; the client opened none.
    assert_eq!(connections_received(&mut conn).await, connections + 1);
}

/// A master without the scripts answers NOSCRIPT, and the fallback (load, run again) lets
/// commands sent later on the connection overtake the script call. So every (re)connect
/// loads them first: the very first release on a fresh master is one round trip. Every
/// script is found under the hash of the source this file tests (the library's own list,
/// `sources.rs`); the pinned hashes (`script_hashes_are_pinned`) guard the joins.
#[tokio::test]
async fn connecting_loads_every_script() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let client = redquorum::Redlock::builder()
        .quarantine(false)
        .master(server.url())
        .build()
        .unwrap();
    let lease = client.acquire(&unique_key("preload")).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(Script::new(RELEASE).get_hash())
        .arg(Script::new(EXTEND).get_hash())
        .arg(Script::new(ACQUIRE).get_hash())
        .arg(Script::new(FENCE).get_hash())
        .arg(Script::new(EPOCH).get_hash())
        .arg(Script::new(STAMP).get_hash())
        .arg(Script::new(INSPECT).get_hash())
        .arg(Script::new(FORCE_UNLOCK).get_hash())
        .arg(Script::new(EXTEND_MANY).get_hash())
        .arg(Script::new(RELEASE_MANY).get_hash())
        .arg(Script::new(ACQUIRE_MANY).get_hash())
        .arg(Script::new(SEMAPHORE).get_hash())
        .arg(Script::new(RW_ACQUIRE).get_hash())
        .arg(Script::new(RW_DOWNGRADE).get_hash())
        .arg(Script::new(RW_EXTEND_READ).get_hash())
        .arg(Script::new(ACQUIRE_QUEUED).get_hash())
        .arg(Script::new(ENQUEUE).get_hash())
        .arg(Script::new(DEQUEUE).get_hash())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(loaded, [true; 18]);
    lease.release().await.unwrap();
}

#[test]
fn script_hashes_are_pinned() {
    let pinned = [
        (
            "release.lua",
            RELEASE,
            "74d8a0211b6e90585cd785928e4c9ed7ce7986b7",
        ),
        (
            "extend.lua",
            EXTEND,
            "b5084f9e76047997063e82514e273926d8603208",
        ),
        (
            "acquire.lua",
            ACQUIRE,
            "7a2528f51b3918b102448db246c5c736178342da",
        ),
        (
            "fence.lua",
            FENCE,
            "2e2c7b6e1e96e4141d1a613a1f90dab4d9b9b4fc",
        ),
        (
            "epoch.lua",
            EPOCH,
            "ddab24e81beba4c4b1e7902908eb5df001a575e1",
        ),
        (
            "fenced_set.lua",
            FENCED_SET,
            "ee48e1c4c7e931e8ce68c3e6c7e7f100c4bc288a",
        ),
        (
            "stamp.lua",
            STAMP,
            "5ca83553af381090e1f8d4042e9b20eda5b7d41e",
        ),
        (
            "inspect.lua",
            INSPECT,
            "150cc2619186a20277852469ac1d3f6eb7aac759",
        ),
        (
            "semaphore.lua",
            SEMAPHORE,
            "edfb0134b97eb0e5cada88bf57171b0c7ba953fb",
        ),
        (
            "force_unlock.lua",
            FORCE_UNLOCK,
            "dbfc98582da501a7d640fa4d15e564ac58c84f75",
        ),
        (
            "extend_many.lua",
            EXTEND_MANY,
            "30beeb594d49ba396830468ae869152fc88f0c74",
        ),
        (
            "release_many.lua",
            RELEASE_MANY,
            "0e040c4fe124ce3612ec7adf73568b02d97296d4",
        ),
        (
            "acquire_many.lua",
            ACQUIRE_MANY,
            "2e5b857b415ede7a8f44d3a3181871d07181ec11",
        ),
        (
            "rw_acquire.lua",
            RW_ACQUIRE,
            "610dba4cbf800dca9d81618fee25a34e8e607045",
        ),
        (
            "rw_downgrade.lua",
            RW_DOWNGRADE,
            "a3e5c5f2adc30fbfd2c44804ab09db0a9796abb4",
        ),
        (
            "rw_extend_read.lua",
            RW_EXTEND_READ,
            "41ee951a89aef98d9a15717e356fcbdec0387090",
        ),
        (
            "acquire_queued.lua",
            ACQUIRE_QUEUED,
            "f6ac5e112145db829368a2e8a263b8ccee4743ef",
        ),
        (
            "enqueue.lua",
            ENQUEUE,
            "0b9b4358edae9f2611a6b79873c1fbe6f8a8e035",
        ),
        (
            "dequeue.lua",
            DEQUEUE,
            "3a78aeebae4a982ae35b7b336ec4d3d78e2c9df8",
        ),
    ];
    let changed: Vec<String> = pinned
        .iter()
        .filter(|(_, source, hash)| Script::new(source).get_hash() != *hash)
        .map(|(name, source, _)| format!("{name}: {}", Script::new(source).get_hash()))
        .collect();
    assert!(
        changed.is_empty(),
        "changed: check their reply contracts, then update these hashes: {changed:#?}"
    );
}

/// `release.lua` hands the lock to the live head of its queue: the dead waiters before it
/// are pruned, the key holds the head's id with the head's own TTL, and the head alone is
/// notified, on its channel, with its id.
#[tokio::test]
async fn release_hand_off_contract() {
    use futures::StreamExt;
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let key = unique_key("handoff_script");
    let queue = format!("redquorum:queue:{key}");
    let waiters = format!("redquorum:waiter:{key}:");
    let channel = format!("redquorum:handoff:{}", unique_key("client"));
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(&channel).await.unwrap();
    let _: () = conn.zadd(&queue, "dead", 1).await.unwrap();
    let _: () = conn.zadd(&queue, "live", 2).await.unwrap();
    let _: () = conn
        .pset_ex(format!("{waiters}live"), format!("700 {channel}"), 5000)
        .await
        .unwrap();
    let _: () = conn.set(&key, "mine").await.unwrap();
    let _: () = conn
        .set(format!("redquorum:ticket:{key}"), 7)
        .await
        .unwrap();
    // Handed on: 1 with the queue's ticket counter, which the releasing client's next
    // acquire queues above.
    let r: (i64, String) = Script::new(RELEASE)
        .key(&key)
        .key(&queue)
        .key(format!("redquorum:owner:{key}"))
        .key(format!("redquorum:ticket:{key}"))
        .arg("mine")
        .arg(format!("redquorum:released:{key}"))
        .arg(&waiters)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, (1, "7".to_owned()));
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("live"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0 && pttl <= 700, "{pttl}");
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(
        members,
        ["live"],
        "the dead head is pruned, the live one stays"
    );
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), sub.on_message().next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(msg.get_channel_name(), channel);
    assert_eq!(msg.get_payload::<String>().unwrap(), "live");

    // Releasing the waiter id itself (an operator's force-unlock of the handed key) takes
    // the waiter out of the queue and deletes its record: the key is not handed back.
    let r: i64 = Script::new(RELEASE)
        .key(&key)
        .key(&queue)
        .key(format!("redquorum:owner:{key}"))
        .key(format!("redquorum:ticket:{key}"))
        .arg("live")
        .arg(format!("redquorum:released:{key}"))
        .arg(&waiters)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 1);
    assert_eq!(get(&server.url(), &key).await, None);
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert!(members.is_empty(), "{members:?}");
    assert_eq!(get(&server.url(), &format!("{waiters}live")).await, None);
}

type Enqueued = (i64, String, Option<String>, i64, Option<String>);

/// The keys of one lock's queue for `enqueue.lua` (and the lock's owner record), and its
/// invocation: a waiter registering with `score` (`strict`: a fair ticket's write-back), its
/// hand-off `channel` and waiter TTL 800 ms, from a caller whose cluster fingerprint is
/// `fingerprint`.
struct QueueKeys {
    key: String,
    record: String,
    queue: String,
    ticket: String,
    waiters: String,
}

impl QueueKeys {
    fn new(name: &str) -> QueueKeys {
        let key = unique_key(name);
        QueueKeys {
            record: unique_key("cluster"),
            queue: format!("redquorum:queue:{key}"),
            ticket: format!("redquorum:ticket:{key}"),
            waiters: format!("redquorum:waiter:{key}:"),
            key,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue<'a>(
        &self,
        script: &'a Script,
        waiter: &str,
        score: u64,
        (strict, fair): (bool, bool),
        channel: &str,
        fingerprint: &str,
    ) -> redis::ScriptInvocation<'a> {
        let mut call = preamble(script, &self.record, "e1", fingerprint);
        call.key(&self.key)
            .key(&self.queue)
            .key(&self.ticket)
            .key(format!("{}{waiter}", self.waiters))
            .key(format!("redquorum:owner:{}", self.key))
            .arg(waiter)
            .arg(score)
            .arg(if strict { "1" } else { "0" })
            .arg(800)
            .arg(channel)
            .arg(if fair { "1" } else { "0" })
            .arg(&self.waiters);
        call
    }
}

/// `enqueue.lua`: registers (idempotently, same score), keeps the waiter's liveness key
/// and the queue alive, writes a fair ticket back strictly (nothing written at or below
/// the counter), never lowers the counter on a refresh, hands the live head a key that is
/// free or handed to a waiter behind it (never a lease), and refuses a caller of another
/// cluster.
#[tokio::test]
async fn enqueue_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let keys = QueueKeys::new("enqueue_script");
    let (key, queue, ticket, waiters) = (
        keys.key.clone(),
        keys.queue.clone(),
        keys.ticket.clone(),
        keys.waiters.clone(),
    );
    let script = Script::new(ENQUEUE);
    let enqueue = |waiter: &str, score: u64, strict: bool, fair: bool, fingerprint: &str| {
        keys.enqueue(
            &script,
            waiter,
            score,
            (strict, fair),
            "redquorum:handoff:c",
            fingerprint,
        )
    };
    let _: () = conn.set(&key, "holder").await.unwrap();

    // Unfair, the lock held: registered, not handed; its score, a ticket, raises the
    // missing counter to it.
    let r: Enqueued = enqueue("w1", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref(), r.3), (1, Some("7"), 0), "{r:?}");
    assert!(r.1.starts_with("e1:"), "a new epoch is started: {r:?}");
    let score: f64 = conn.zscore(&queue, "w1").await.unwrap();
    assert_eq!(score, 7.0);
    assert_eq!(conn.get::<_, String>(&ticket).await.unwrap(), "7");
    assert_eq!(
        get(&server.url(), &format!("{waiters}w1")).await.as_deref(),
        Some("800 redquorum:handoff:c")
    );
    let live: i64 = conn.pttl(format!("{waiters}w1")).await.unwrap();
    let kept: i64 = conn.pttl(&queue).await.unwrap();
    assert!(
        live > 0 && live <= 800 && kept > 800 && kept <= 1600,
        "{live} {kept}"
    );
    // Again: the same member, the same score.
    let _: Enqueued = enqueue("w1", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let n: usize = conn.zcard(&queue).await.unwrap();
    assert_eq!(n, 1);

    // Fair, strict: a ticket at or below the counter is refused and writes nothing.
    let _: () = conn.set(&ticket, 5).await.unwrap();
    let r: Enqueued = enqueue("f1", 5, true, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (0, Some("5")), "{r:?}");
    let absent: Option<f64> = conn.zscore(&queue, "f1").await.unwrap();
    assert_eq!(absent, None);
    let r: Enqueued = enqueue("f1", 6, true, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (1, Some("6")), "{r:?}");
    // The same strict round sent again finds its own write: written, not a conflict with
    // itself (which would cost the waiter its place). Another waiter's equal ticket is
    // still refused.
    let r: Enqueued = enqueue("f1", 6, true, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (1, Some("6")), "{r:?}");
    let r: Enqueued = enqueue("f2", 6, true, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (0, Some("6")), "{r:?}");
    // A refresh below the counter, fair or not, keeps the counter.
    let _: () = conn.set(&ticket, 9).await.unwrap();
    let r: Enqueued = enqueue("f1", 6, false, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (1, Some("9")), "{r:?}");
    let r: Enqueued = enqueue("w1", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.2.as_deref()), (1, Some("9")), "{r:?}");
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(
        members,
        ["f1", "w1"],
        "fair and unfair waiters share one order, by ticket"
    );
    // Equal tickets: ordered by member, the same on every master.
    let _: Enqueued = enqueue("w0", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(members, ["f1", "w0", "w1"]);
    let _: () = conn.zrem(&queue, "w0").await.unwrap();
    let _: () = conn.del(format!("{waiters}w0")).await.unwrap();

    // The holder gone: the live head is handed the key by its own registration.
    let _: () = conn.del(&key).await.unwrap();
    let r: Enqueued = enqueue("w1", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 0), "w1 is not the head: {r:?}");
    let r: Enqueued = enqueue("f1", 6, false, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 1), "{r:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("f1"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0 && pttl <= 800, "{pttl}");

    // The key handed to a waiter queued behind the head (a release ran before the head
    // registered here): the head's registration takes it; another waiter's registration
    // passes it on to the head (shown further down). A lease value is never taken.
    let _: () = conn.pset_ex(&key, "w1", 5_000).await.unwrap();
    let r: Enqueued = enqueue("f1", 6, false, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 1), "{r:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("f1"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        pttl > 0 && pttl <= 800,
        "the waiter TTL, not the old 5 s: {pttl}"
    );
    let _: () = conn.pset_ex(&key, "a-lease-value", 5_000).await.unwrap();
    let r: Enqueued = enqueue("f1", 6, false, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r.3, 0, "a lease is never taken: {r:?}");
    assert_eq!(
        get(&server.url(), &key).await.as_deref(),
        Some("a-lease-value")
    );

    // The key handed to w1 out of turn (f1 is ahead of it): w1's own refresh passes it on
    // to the head, which is told on its channel, and w1 is not handed it.
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe("redquorum:handoff:c").await.unwrap();
    let _: () = conn.pset_ex(&key, "w1", 5_000).await.unwrap();
    let r: Enqueued = enqueue("w1", 7, false, false, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 0), "{r:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("f1"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0 && pttl <= 800, "the head's waiter TTL: {pttl}");
    let msg = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        futures::StreamExt::next(&mut sub.on_message()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "f1");
    // The head's own refresh keeps it: handed.
    let r: Enqueued = enqueue("f1", 6, false, true, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 1), "{r:?}");
    let _: () = conn.set(&key, "f1").await.unwrap();

    // Another cluster's caller: -2, nothing written.
    let r: Refused = enqueue("w9", 1, false, false, "other")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r.0, -2);
    let absent: Option<f64> = conn.zscore(&queue, "w9").await.unwrap();
    assert_eq!(absent, None);
}

/// `dequeue.lua`: removes the waiter and its liveness key; a key handed to it is passed
/// to the next live waiter (or freed), and only then: 1, else 0.
#[tokio::test]
async fn dequeue_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let key = unique_key("dequeue_script");
    let queue = format!("redquorum:queue:{key}");
    let waiters = format!("redquorum:waiter:{key}:");
    let script = Script::new(DEQUEUE);
    let dequeue = |waiter: &str| {
        let mut call = script.key(&key);
        call.key(&queue)
            .key(format!("{waiters}{waiter}"))
            .arg(waiter)
            .arg(format!("redquorum:released:{key}"))
            .arg(&waiters);
        call
    };
    for (waiter, score) in [("a", 1), ("b", 2)] {
        let _: () = conn.zadd(&queue, waiter, score).await.unwrap();
        let _: () = conn
            .pset_ex(
                format!("{waiters}{waiter}"),
                "600 redquorum:handoff:c",
                5000,
            )
            .await
            .unwrap();
    }
    // Handed to a: passed on to b.
    let _: () = conn.pset_ex(&key, "a", 600).await.unwrap();
    let r: i64 = dequeue("a").invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 1);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("b"));
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(members, ["b"]);
    assert_eq!(get(&server.url(), &format!("{waiters}a")).await, None);
    // A lease holds the key: b leaves, the key stays.
    let _: () = conn.set(&key, "lease").await.unwrap();
    let r: i64 = dequeue("b").invoke_async(&mut conn).await.unwrap();
    assert_eq!(r, 0);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("lease"));
    let exists: bool = conn.exists(&queue).await.unwrap();
    assert!(!exists);
}

type AcquiredQueued = (
    i64,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);

/// `acquire_queued.lua`: grants where the key is free or handed to the waiter, with the
/// lease's own TTL, and takes the waiter out of the queue; a fair acquire is refused
/// behind another live waiter (pttl -2) and reads the ticket counter. A grant writes no
/// owner record: it keeps the client's holder record alive as `acquire.lua` does.
#[tokio::test]
async fn acquire_queued_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let key = unique_key("acquire_queued_script");
    let (fence, record) = (unique_key("fence"), unique_key("cluster"));
    let owner = format!("redquorum:owner:{key}");
    let holder = holder_of(&unique_key("tag"));
    let (queue, ticket) = (
        format!("redquorum:queue:{key}"),
        format!("redquorum:ticket:{key}"),
    );
    let waiters = format!("redquorum:waiter:{key}:");
    let script = Script::new(ACQUIRE_QUEUED);
    let acquire = |value: &str, waiter: &str, fair: bool| {
        let mut call = preamble(&script, &record, "e1", "");
        call.key(&key)
            .key(&fence)
            .key(&owner)
            .key(&queue)
            .key(&ticket)
            .key(&holder)
            .arg(value)
            .arg(30_000)
            .arg("0")
            .arg("client")
            .arg("host")
            .arg(1)
            .arg("worker")
            .arg(waiter)
            .arg(if fair { "1" } else { "0" })
            .arg(&waiters);
        call
    };
    for (waiter, score) in [("a", 1), ("b", 2)] {
        let _: () = conn.zadd(&queue, waiter, score).await.unwrap();
        let _: () = conn
            .pset_ex(
                format!("{waiters}{waiter}"),
                "600 redquorum:handoff:c",
                5000,
            )
            .await
            .unwrap();
    }
    let _: () = conn.set(&ticket, 2).await.unwrap();
    // Fair, not queued, behind live waiters: refused, "queued" (-2), the counter read.
    let r: AcquiredQueued = acquire("v0", "", true)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3, r.5.as_deref()), (0, -2, Some("2")), "{r:?}");
    // Fair, b behind a: refused.
    let r: AcquiredQueued = acquire("v1", "b", true)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (0, -2), "{r:?}");
    let exists: bool = conn.exists(&holder).await.unwrap();
    assert!(!exists, "a refusal wrote the holder record");
    // Handed to a: granted with the lease's TTL, a leaves the queue.
    let _: () = conn.pset_ex(&key, "a", 600).await.unwrap();
    let r: AcquiredQueued = acquire("v2", "a", true)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3, r.5.as_deref()), (1, -3, Some("2")), "{r:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v2"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        pttl > 29_000,
        "the lease's own TTL, not the hand-off's: {pttl}"
    );
    let members: Vec<String> = conn.zrange(&queue, 0, -1).await.unwrap();
    assert_eq!(members, ["b"]);
    assert_eq!(get(&server.url(), &format!("{waiters}a")).await, None);
    let exists: bool = conn.exists(&owner).await.unwrap();
    assert!(!exists, "a grant wrote an owner record");
    let who = ["client", "host", "1", "worker"];
    assert_holder_written(&mut conn, &holder, who, "a grant").await;
    // Held by a lease: refused with its TTL, whoever asks; unfair reads no counter.
    let r: AcquiredQueued = acquire("v3", "b", false)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.5.as_deref()), (0, None), "{r:?}");
    assert!(r.3 > 29_000, "{r:?}");
    // Free, b the live head: granted to b; the holder record, which outlives the lock,
    // is not written (a field changed here is kept).
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.hset(&holder, "host", "changed").await.unwrap();
    let r: AcquiredQueued = acquire("v4", "b", true)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r.0, 1, "{r:?}");
    let exists: bool = conn.exists(&queue).await.unwrap();
    assert!(!exists, "the last waiter left the queue");
    let host: Option<String> = conn.hget(&holder, "host").await.unwrap();
    assert_eq!(host.as_deref(), Some("changed"), "a fresh record is kept");
    // A grant while the holder record would expire before the lock writes it again.
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.pexpire(&holder, 5_000).await.unwrap();
    let r: AcquiredQueued = acquire("v5", "", false)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r.0, 1, "{r:?}");
    assert_holder_written(&mut conn, &holder, who, "a grant past the record").await;
    let exists: bool = conn.exists(&owner).await.unwrap();
    assert!(!exists, "a grant wrote an owner record");
}

/// `enqueue.lua`'s hand-on: a free key is left to the head's own registration; a key
/// handed to another waiter behind the head is passed on to the head, which is told; a
/// key the head has already is neither rewritten nor announced again by other waiters'
/// refreshes (no notice per refresh); and a live waiter whose id an operator force-unlocked
/// takes the key back at its next refresh, being still the head (docs/design.md §17).
#[tokio::test]
async fn enqueue_gives_a_handed_key_to_the_head_and_only_once() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let keys = QueueKeys::new("enqueue_hand_on");
    let (key, queue, waiters) = (keys.key.clone(), keys.queue.clone(), keys.waiters.clone());
    let script = Script::new(ENQUEUE);
    let enqueue = |waiter: &str, score: u64, channel: &str| {
        keys.enqueue(&script, waiter, score, (false, false), channel, "")
    };
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe("ch:h").await.unwrap();
    let mut messages = sub.on_message();
    let _: () = conn.set(&key, "lease").await.unwrap();
    let _: Enqueued = enqueue("h", 1, "ch:h")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let _: Enqueued = enqueue("x", 2, "ch:x")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let _: Enqueued = enqueue("c", 3, "ch:c")
        .invoke_async(&mut conn)
        .await
        .unwrap();

    // (a) A free key, the caller not the head: left alone (the design says so).
    let _: () = conn.del(&key).await.unwrap();
    let _: Enqueued = enqueue("c", 3, "ch:c")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        get(&server.url(), &key).await,
        None,
        "a free key is left to the head"
    );

    // (b) The key handed to another waiter x behind the head h, the caller c neither:
    // passed on to h, who is told.
    let _: () = conn.pset_ex(&key, "x", 5_000).await.unwrap();
    let _: Enqueued = enqueue("c", 3, "ch:c")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("h"));
    let msg = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        futures::StreamExt::next(&mut messages),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "h");

    // (c) The key already with the head: a non-head refresh neither rewrites it nor
    // tells the head again (no notice per refresh).
    let _: () = conn.pset_ex(&key, "h", 5_000).await.unwrap();
    let _: Enqueued = enqueue("c", 3, "ch:c")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let _: Enqueued = enqueue("x", 2, "ch:x")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 800, "the head's key is not rewritten: {pttl}");
    let more = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        futures::StreamExt::next(&mut messages),
    )
    .await;
    assert!(more.is_err(), "no notice when the head has the key already");

    // (d) force_unlock(resource, h) (release.lua with the waiter id h): the key goes to x
    // and h leaves the queue; h, still live, registers again at its next refresh and,
    // heading the queue, takes the key back. A force-unlock of a waiter id helps against a
    // waiter that is dead or gone, not against a live one.
    let release = Script::new(RELEASE);
    let (r, _ticket): (i64, String) = release
        .key(&key)
        .key(&queue)
        .key(format!("redquorum:owner:{key}"))
        .key(format!("redquorum:ticket:{key}"))
        .arg("h")
        .arg(format!("redquorum:released:{key}"))
        .arg(&waiters)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 1, "deleted and handed on");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("x"));
    let r: Enqueued = enqueue("h", 1, "ch:h")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((r.0, r.3), (1, 1), "{r:?}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("h"));
}

/// `live_head` at its prune budget (256 dead members a run): a queue of exactly 256 dead
/// members has no live member once pruned, and a fair first attempt takes the free key;
/// with 257, one is left unread, the head is unknown, and the fair attempt is refused
/// (free, but queued: -2). The simulation's model answers the same.
#[tokio::test]
async fn live_head_at_its_prune_budget() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(ACQUIRE_QUEUED);
    for (dead, granted) in [(256u64, 1i64), (257, 0)] {
        let key = unique_key("prune_budget");
        let queue = format!("redquorum:queue:{key}");
        let members: Vec<(u64, String)> =
            (0..dead).map(|i| (i + 1, format!("dead{i:03}"))).collect();
        let _: () = conn.zadd_multiple(&queue, &members).await.unwrap();
        let record = unique_key("cluster");
        let reply: Vec<redis::Value> = preamble(&script, &record, "e1", "")
            .key(&key)
            .key(unique_key("fence"))
            .key(unique_key("owner"))
            .key(&queue)
            .key(unique_key("ticket"))
            .key(holder_of(&unique_key("tag")))
            .arg("v")
            .arg(30_000)
            .arg("0")
            .arg("client")
            .arg("host")
            .arg(1)
            .arg("")
            .arg("")
            .arg("1")
            .arg(format!("redquorum:waiter:{key}:"))
            .invoke_async(&mut conn)
            .await
            .unwrap();
        let left: u64 = conn.zcard(&queue).await.unwrap();
        assert_eq!(
            (int(&reply[0]), left),
            (granted, dead - 256),
            "{dead} dead members: {reply:?}"
        );
        if granted == 0 {
            assert_eq!(int(&reply[3]), -2, "free but queued behind an unknown head");
        }
    }
}
