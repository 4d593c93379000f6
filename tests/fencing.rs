//! Fencing tokens against real masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind, FencingToken, Redlock, fenced_set};
use support::*;
use tokio::time::Instant;

/// Durable masters (fencing counts no other kind) whose data epochs started long ago, so
/// that they vote at once.
async fn cluster(n: usize) -> Cluster {
    cluster_with(n, &ServerOptions::new().persistence(Persistence::AofAlways)).await
}

async fn cluster_with(n: usize, options: &ServerOptions) -> Cluster {
    let cluster = Cluster::start_with(n, options).await.unwrap();
    for url in cluster.urls() {
        seed_old_epoch(&url).await;
    }
    cluster
}

fn fenced(cluster: &Cluster) -> redquorum::Builder {
    client(cluster)
        .quarantine(true)
        .fencing(true)
        .ttl("1s")
        .timeouts(Timeouts::new().node("100ms"))
}

/// Masters that would lose their counters on a restart are refused for fencing at the
/// first fenced acquire, with an error that says what to change, not after a restart has
/// left too few of them to order tokens.
// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn fencing_refuses_masters_that_are_not_durable() {
    let cluster = cluster_with(3, &ServerOptions::new()).await;
    let client = fenced(&cluster).build().unwrap();
    let key = unique_key("not_durable");
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let text = err.to_string();
    assert!(text.contains("appendfsync always"), "{text}");
    // The lock itself still works without tokens, and nothing was left behind.
    let lease = client
        .acquire_with(&key, &AcquireOptions::new().fencing(false))
        .await
        .unwrap();
    lease.release().await.unwrap();
}

/// A write-back that can never reach a quorum ends at once: a master that no longer holds
/// the acquisition and one unfit for tokens (not durable) never count, and together they
/// leave too few here. It used to raise its token round after round until its validity
/// ran out (and a fair waiter stuck there stopped keeping its place in the queue).
#[tokio::test]
async fn a_write_back_that_cannot_reach_a_quorum_ends_at_once() {
    let durable = ServerOptions::new().persistence(Persistence::AofAlways);
    let servers = [
        Server::start(&durable).await.unwrap(),
        Server::start(&durable).await.unwrap(),
        Server::start(&ServerOptions::new()).await.unwrap(),
    ];
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    for url in &urls {
        seed_old_epoch(url).await;
    }
    let client = Redlock::builder()
        .masters(&urls)
        .quarantine(true)
        .fencing(true)
        .ttl("300ms")
        .timeouts(Timeouts::new().node("100ms"))
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    // The master that is not durable votes for locks once its young process has passed
    // its quarantine window (300 ms and the drift).
    let probe = unique_key("probe");
    wait_until(
        Duration::from_secs(3),
        "the master that is not durable votes",
        || async {
            let plain = AcquireOptions::new().fencing(false);
            match client.acquire_with(&probe, &plain.attempts(1)).await {
                Ok(lease) => {
                    let votes = lease.masters()[2].outcome().is_granted();
                    lease.release().await.unwrap();
                    votes
                }
                Err(_) => false,
            }
        },
    )
    .await;
    // A durable master holds another value: the lock is granted by the other durable
    // master and the one that is not durable, and only one of them can take a token.
    let key = unique_key("hopeless_write_back");
    let _: () = raw(&urls[1])
        .await
        .pset_ex(&key, "another", 10_000)
        .await
        .unwrap();
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FencingFailed, "{err}");
    assert!(
        err.to_string()
            .contains("too few durable masters still hold this acquisition"),
        "{err}"
    );
    // One round: the counter was raised once, where round after round raised it again.
    let counter = get(&urls[0], &format!("redquorum:fence:{key}")).await;
    assert_eq!(counter.as_deref(), Some("1"), "write-back rounds ran on");
}

// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn tokens_strictly_increase_across_holders_even_with_a_master_down() {
    let mut cluster = cluster(5).await;
    let client = fenced(&cluster).build().unwrap();
    settle(&client).await;
    let key = unique_key("increase");
    let mut last: Option<FencingToken> = None;
    for i in 0..30 {
        if i == 10 {
            cluster.server_mut(1).kill().unwrap();
        }
        if i == 20 {
            cluster.server_mut(3).pause().unwrap();
        }
        let lease = client.acquire(&key).await.unwrap();
        let token = lease.fencing_token().expect("fencing is on");
        if let Some(last) = last {
            assert!(token > last, "token {token} after {last}");
        }
        last = Some(token);
        lease.release().await.unwrap();
    }
    cluster.server_mut(3).resume().unwrap();
}

#[tokio::test]
async fn a_token_is_kept_across_extensions_and_absent_without_fencing() {
    let cluster = cluster(3).await;
    let client = fenced(&cluster).build().unwrap();
    settle(&client).await;
    let key = unique_key("kept");
    let lease = client.acquire(&key).await.unwrap();
    let token = lease.fencing_token().unwrap();
    lease.extend().await.unwrap();
    assert_eq!(lease.fencing_token(), Some(token));
    lease.release().await.unwrap();
    let plain = client
        .acquire_with(&key, &AcquireOptions::new().fencing(false))
        .await
        .unwrap();
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.unwrap();
}

// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_get_unique_tokens_in_critical_section_order() {
    let cluster = cluster(3).await;
    let key = unique_key("contend");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let client = fenced(&cluster)
            .retry(Retry::new().delay("5ms").jitter("10ms").wait("20s"))
            .build()
            .unwrap();
        settle(&client).await;
        let (key, order) = (key.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let lease = client.acquire(&key).await.unwrap();
                order.lock().unwrap().push(lease.fencing_token().unwrap());
                tokio::task::yield_now().await;
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    assert_eq!(order.len(), 40);
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "tokens out of critical-section order: {order:?}"
    );
}

/// A holder paused past its lease (docs/testing.md §4, S12): its late write is refused by
/// the storage, which has seen the next holder's larger token.
// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn the_storage_refuses_a_paused_holders_late_write() {
    let cluster = cluster(3).await;
    let store = Server::start(&ServerOptions::new()).await.unwrap();
    let mut data = raw(&store.url()).await;
    let a = fenced(&cluster).build().unwrap();
    let b = fenced(&cluster).build().unwrap();
    settle(&a).await;
    settle(&b).await;
    let key = unique_key("s12");
    let stale = a.acquire(&key).await.unwrap();
    let stale_token = stale.fencing_token().unwrap();
    // The "GC pause": past the lease's deadline without noticing.
    tokio::time::sleep_until(stale.deadline()).await;
    let fresh = b
        .acquire_with(
            &key,
            &AcquireOptions::new().wait_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let fresh_token = fresh.fencing_token().unwrap();
    assert!(fresh_token > stale_token);
    assert!(
        fenced_set(&mut data, "balance", "from-b", fresh_token)
            .await
            .unwrap()
    );
    assert!(
        !fenced_set(&mut data, "balance", "from-a", stale_token)
            .await
            .unwrap()
    );
    let balance: String = data.get("balance").await.unwrap();
    assert_eq!(balance, "from-b");
    fresh.release().await.unwrap();
}

/// A durable master that lost its counters (restarted empty) votes again for the lock after
/// its quarantine, but a client that saw the loss never counts its write-backs: no token
/// that could be smaller than an earlier one is issued.
// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn a_lost_counter_is_never_trusted_to_order_tokens() {
    // Durable masters, so that master 1 keeps its counter over a restart and only
    // master 0 (restarted without its data below) loses one.
    let mut cluster =
        cluster_with(3, &ServerOptions::new().persistence(Persistence::AofAlways)).await;
    let client = fenced(&cluster).ttl("500ms").build().unwrap();
    settle(&client).await;
    let key = unique_key("lost_counter");
    // The write-back reaches masters 0 and 1 only (2 holds someone else's key).
    let _: () = raw(&cluster.server(2).url())
        .await
        .pset_ex(&key, "blocker", 5000)
        .await
        .unwrap();
    let lease = client.acquire(&key).await.unwrap();
    let first = lease.fencing_token().unwrap();
    lease.release().await.unwrap();
    let _: () = raw(&cluster.server(2).url()).await.del(&key).await.unwrap();
    // Master 0 loses everything; master 1, the other holder of the counter, goes away.
    cluster.server_mut(0).restart(false).await.unwrap();
    cluster.server_mut(1).kill().unwrap();
    // Master 0 leaves quarantine after one window...
    let start = Instant::now();
    let err = loop {
        let err = client.try_acquire(&key).await.unwrap_err();
        if err.kind() == ErrorKind::FencingFailed || start.elapsed() > Duration::from_secs(5) {
            break err;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // ...and then the lock is granted by {0, 2}, but no token: this client saw master 0
    // lose its data (a new data epoch), so its write-backs no longer count, and master 2
    // alone is no quorum.
    assert_eq!(err.kind(), ErrorKind::FencingFailed, "{err}");
    assert!(err.to_string().contains("fencing token"), "{err}");
    // With master 1 back, the newest counter is visible again and tokens go on increasing.
    cluster.server_mut(1).restart(true).await.unwrap();
    let lease = client
        .acquire_with(
            &key,
            &AcquireOptions::new().wait_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(lease.fencing_token().unwrap() > first);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn fencing_needs_quarantine() {
    let err = Redlock::builder()
        .master("redis://127.0.0.1:7001")
        .quarantine(false)
        .fencing(true)
        .build()
        .unwrap_err();
    assert!(err.setting() == Some("fencing") && err.to_string().contains("quarantine"));
    assert!(err.to_string().contains("turn quarantine back on"));
    let client = Redlock::builder()
        .master("redis://127.0.0.1:7001")
        .quarantine(false)
        .build()
        .unwrap();
    let err = client
        .acquire_with("k", &AcquireOptions::new().fencing(true))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
}
