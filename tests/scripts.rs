//! The Lua scripts' reply contracts and hashes, checked on a real server. A changed hash
//! means a changed script: review the contract, then update the pinned hash.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redis::{AsyncCommands, Script};
use support::*;

const RELEASE: &str = include_str!("../src/scripts/release.lua");
const EXTEND: &str = include_str!("../src/scripts/extend.lua");

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

#[tokio::test]
async fn extend_contract() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let mut conn = raw(&server.url()).await;
    let script = Script::new(EXTEND);
    let key = unique_key("extend_script");

    // Ours: 1 and the TTL is reset.
    let _: () = conn.pset_ex(&key, "mine", 1000).await.unwrap();
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(60_000)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 1);
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 50_000, "{pttl}");
    // Missing: set again with the TTL, 2.
    let _: () = conn.del(&key).await.unwrap();
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(60_000)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, 2);
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("mine"));
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 50_000 && pttl <= 60_000, "{pttl}");
    // Someone else's: -1, untouched, TTL unchanged.
    let _: () = conn.pset_ex(&key, "theirs", 5000).await.unwrap();
    let r: i64 = script
        .key(&key)
        .arg("mine")
        .arg(60_000)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, -1);
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl <= 5000, "{pttl}");
    assert_eq!(get(&server.url(), &key).await.as_deref(), Some("theirs"));
}

#[tokio::test]
async fn a_restarted_master_reloads_scripts_on_noscript() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    let client = redquorum::Redlock::builder().master(&url).build().unwrap();
    let key = unique_key("noscript");
    client.acquire(&key).await.unwrap().release().await.unwrap();
    server.restart(false).await.unwrap();
    // The restarted server has no scripts cached: EVALSHA answers NOSCRIPT and the client
    // loads the script. The first call may find the old connection broken.
    wait_until(
        std::time::Duration::from_secs(5),
        "acquire and release after restart",
        || {
            let (client, key) = (client.clone(), key.clone());
            async move {
                match client.acquire(&key).await {
                    Ok(lease) => lease
                        .release()
                        .await
                        .map(|r| r.released() == 1)
                        .unwrap_or(false),
                    Err(_) => false,
                }
            }
        },
    )
    .await;
}

#[test]
fn script_hashes_are_pinned() {
    assert_eq!(
        Script::new(RELEASE).get_hash(),
        "ceed032d5b43234cf7c51c1fac04a20167491845",
        "release.lua changed: check its reply contract, then update this hash"
    );
    assert_eq!(
        Script::new(EXTEND).get_hash(),
        "25ae1e6a6d5002359169177dccfcb67a565d7611",
        "extend.lua changed: check its reply contract, then update this hash"
    );
}
