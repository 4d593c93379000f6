//! Other Redlock clients (node-redlock, redsync, pottery, …) lock with a plain
//! `SET key random NX PX ttl` on each master. Their locks exclude ours and ours exclude
//! theirs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use redquorum::ErrorKind;
use support::*;

/// Another client's acquire: a plain `SET NX PX` on every master; how many granted.
async fn foreign_acquire(cluster: &Cluster, key: &str, value: &str) -> usize {
    let mut granted = 0;
    for s in cluster.servers() {
        let mut conn = raw(&s.url()).await;
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        granted += usize::from(set.is_some());
    }
    granted
}

// Checks I4 (mutual exclusion).
#[tokio::test]
async fn a_foreign_lock_excludes_ours() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("foreign_first");
    assert_eq!(
        foreign_acquire(&cluster, &key, "their-random-value").await,
        3
    );
    let client = client(&cluster).build().unwrap();
    let err = client.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    // Our failed attempt did not touch their keys.
    for s in cluster.servers() {
        assert_eq!(
            get(&s.url(), &key).await.as_deref(),
            Some("their-random-value")
        );
    }
}

// Checks I4 (mutual exclusion).
#[tokio::test]
async fn our_lock_excludes_a_foreign_one() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("ours_first");
    let client = client(&cluster).build().unwrap();
    let lease = client.acquire(&key).await.unwrap();
    // Wait until every master has our key (a straggler may still be on its way).
    wait_until(Duration::from_secs(2), "our key on every master", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    assert_eq!(
        foreign_acquire(&cluster, &key, "their-random-value").await,
        0
    );
    lease.release().await.unwrap();
    wait_until(Duration::from_secs(2), "released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
    assert_eq!(
        foreign_acquire(&cluster, &key, "their-random-value").await,
        3
    );
}
