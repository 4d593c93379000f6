//! The Lua scripts' reply contracts and hashes, checked on a real server. A changed hash
//! means a changed script: review the contract, then update the pinned hash.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redis::{AsyncCommands, Script};
use support::*;

const RELEASE: &str = include_str!("../src/scripts/release.lua");
const EXTEND: &str = include_str!("../src/scripts/extend.lua");
const ACQUIRE: &str = include_str!("../src/scripts/acquire.lua");
const FENCE: &str = include_str!("../src/scripts/fence.lua");
const EPOCH: &str = include_str!("../src/scripts/epoch.lua");
const FENCED_SET: &str = include_str!("../src/scripts/fenced_set.lua");

#[tokio::test]
async fn release_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(RELEASE);
    let key = unique_key("release_script");
    let channel = format!("redquorum:released:{key}");

    // Missing key: 0.
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(&channel)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 0);
    // Someone else's key: -1, untouched.
    let _: () = conn.set(&key, "theirs").await.unwrap();
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(&channel)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, -1);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("theirs"));
    // Ours: 1, deleted, and a notice is published.
    let _: () = conn.set(&key, "mine").await.unwrap();
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(&channel).await.unwrap();
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(&channel)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 1);
    assert_eq!(get(&server.url(), &key).await, None);
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        use futures::StreamExt;
        sub.on_message().next().await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(msg.get_channel_name(), channel);
    // Idempotent: again, 0.
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(&channel)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 0);
}

type Extended = (i64, Option<String>, String);

#[tokio::test]
async fn extend_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EXTEND);
    let key = unique_key("extend_script");
    let epoch = unique_key("epoch");
    let extend = |value: &'static str, ttl: u64, epoch_id: &'static str| {
        let mut call = script.key(&key);
        call.key(&epoch).arg(value).arg(ttl).arg(epoch_id);
        call
    };

    // Ours: 1 and the TTL is reset; without an epoch id the epoch is not touched.
    let _: () = conn.pset_ex(&key, "mine", 1000).await.unwrap();
    let (code, seen, now): Extended = extend("mine", 60_000, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((code, seen), (1, None));
    assert!(now.parse::<u64>().unwrap() > 1_600_000_000_000_000, "{now}");
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 50_000, "{pttl}");
    assert_eq!(get(&server.url(), &epoch).await, None);
    // Missing: set again with the TTL, 2; with an epoch id a missing epoch is started.
    let _: () = conn.del(&key).await.unwrap();
    let (code, seen, _): Extended = extend("mine", 60_000, "e1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 2);
    let seen = seen.unwrap();
    assert!(seen.starts_with("e1:"), "{seen}");
    assert_eq!(get(&server.url(), &epoch).await, Some(seen.clone()));
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("mine"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 50_000 && pttl <= 60_000, "{pttl}");
    // Someone else's: -1, untouched, TTL unchanged; an existing epoch is kept.
    let _: () = conn.pset_ex(&key, "theirs", 5000).await.unwrap();
    let (code, again, _): Extended = extend("mine", 60_000, "e2")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1);
    assert_eq!(again, Some(seen));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl <= 5000, "{pttl}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("theirs"));
}

type Acquired = (i64, String, String, Option<String>, i64);

#[tokio::test]
async fn acquire_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(ACQUIRE);
    let key = unique_key("acquire_script");
    let (epoch, fence) = (unique_key("epoch"), unique_key("fence"));
    let acquire = |value: &'static str, mode: &'static str| {
        let mut call = script.key(&key);
        call.key(&epoch)
            .key(&fence)
            .arg(value)
            .arg(10_000)
            .arg("new-epoch")
            .arg(mode);
        call
    };

    // Granted; a missing epoch is started; no fence read.
    let (ok, record, now, counter, pttl): Acquired =
        acquire("v1", "0").invoke_async(&mut conn).await.unwrap();
    assert_eq!((ok, counter, pttl), (1, None, -3));
    let (id, created) = record.rsplit_once(':').unwrap();
    assert_eq!(id, "new-epoch");
    assert_eq!(
        created, now,
        "a new epoch is created at the server time read"
    );
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v1"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 9_000, "set with PX like SET NX PX: {pttl}");
    // Refused: the holder's PTTL, the same epoch, and the fence counter when asked for.
    let _: () = conn.set(&fence, 41).await.unwrap();
    let (ok, again, later, counter, pttl): Acquired =
        acquire("v2", "1").invoke_async(&mut conn).await.unwrap();
    assert_eq!((ok, counter.as_deref()), (0, Some("41")));
    assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
    assert_eq!(again, record);
    assert!(later.parse::<u64>().unwrap() >= now.parse::<u64>().unwrap());
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("v1"));
    // No other mode exists: the planted one-round token is a variant of this script built
    // only with the `mutants` feature, never a mode of the script every master loads.
    let (_, _, _, counter, _): Acquired = acquire("v3", "2").invoke_async(&mut conn).await.unwrap();
    assert_eq!(counter, None);
    assert_eq!(conn.get::<_, String>(&fence).await.unwrap(), "41");
}

#[tokio::test]
async fn fence_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(FENCE);
    let key = unique_key("fence_script");
    let (fence, epoch) = (unique_key("fence"), unique_key("epoch"));
    let _: () = conn.set(&epoch, "e:1").await.unwrap();
    let write = |value: &'static str, token: u64| {
        let mut call = script.key(&key);
        call.key(&fence).key(&epoch).arg(value).arg(token);
        call
    };
    type Fenced = (i64, Option<String>, Option<String>);

    // Not ours: -1, counter untouched.
    let (code, before, record): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before, record.as_deref()), (-1, None, Some("e:1")));
    assert_eq!(get(&server.url(), &fence).await, None);
    // Ours, counter missing: written, before = nothing.
    let _: () = conn.set(&key, "mine").await.unwrap();
    let (code, before, _): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before), (1, None));
    assert_eq!(get(&server.url(), &fence).await.as_deref(), Some("5"));
    // Equal token: a conflict (strict increase), reporting the counter.
    let (code, before, _): Fenced = write("mine", 5).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before.as_deref()), (0, Some("5")));
    // Lower token: a conflict; higher: written.
    let (code, _, _): Fenced = write("mine", 3).invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    let (code, before, _): Fenced = write("mine", 9).invoke_async(&mut conn).await.unwrap();
    assert_eq!((code, before.as_deref()), (1, Some("5")));
    // An equal token again: still a conflict (the planted max-write is a variant built only
    // with the `mutants` feature, never a mode of this script).
    let (code, _, _): Fenced = write("mine", 9).invoke_async(&mut conn).await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(get(&server.url(), &fence).await.as_deref(), Some("9"));
}

#[tokio::test]
async fn epoch_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EPOCH);
    let epoch = unique_key("epoch");
    let (first, now): (String, String) = script
        .key(&epoch)
        .arg("a")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(first, format!("a:{now}"));
    let (second, _): (String, String) = script
        .key(&epoch)
        .arg("b")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(second, first, "an existing epoch is kept");
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let (third, _): (String, String) = script
        .key(&epoch)
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
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
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
    // A plain SET NX PX acquire, then the extend and release scripts.
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
/// loads them first: the very first release on a fresh master is one round trip.
#[tokio::test]
async fn connecting_loads_every_script() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let client = redquorum::Redlock::builder()
        .quarantine(false)
        .master(server.url())
        .build()
        .unwrap();
    // A plain SET NX PX acquire uses no script at all.
    let lease = client.acquire(&unique_key("preload")).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(Script::new(RELEASE).get_hash())
        .arg(Script::new(EXTEND).get_hash())
        .arg(Script::new(ACQUIRE).get_hash())
        .arg(Script::new(FENCE).get_hash())
        .arg(Script::new(EPOCH).get_hash())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(loaded, [true; 5]);
    lease.release().await.unwrap();
}

#[test]
fn script_hashes_are_pinned() {
    let pinned = [
        (
            "release.lua",
            RELEASE,
            "ceed032d5b43234cf7c51c1fac04a20167491845",
        ),
        (
            "extend.lua",
            EXTEND,
            "7273930ff43b38181e64cd22bf9e0b251daeb336",
        ),
        (
            "acquire.lua",
            ACQUIRE,
            "ee3ff4a1deb46526cabd8cf411d0227fddb56e48",
        ),
        (
            "fence.lua",
            FENCE,
            "384ab4b3249ec3849de661ece11a7b9572f64210",
        ),
        (
            "epoch.lua",
            EPOCH,
            "11c4fa4366dcf80f0ab0f31cd760b4b6b02bef90",
        ),
        (
            "fenced_set.lua",
            FENCED_SET,
            "ee48e1c4c7e931e8ce68c3e6c7e7f100c4bc288a",
        ),
    ];
    for (name, source, hash) in pinned {
        assert_eq!(
            Script::new(source).get_hash(),
            hash,
            "{name} changed: check its reply contract, then update this hash"
        );
    }
}
