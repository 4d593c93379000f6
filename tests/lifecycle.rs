//! The lease lifecycle against real masters: watchdog, lost signal, `with_lock`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redquorum::{AcquireOptions, ErrorKind, LostReason};
use support::*;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Sets a flag when dropped: proves a critical section's future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_watchdog_keeps_a_lock_through_five_ttls() {
    let cluster = Cluster::start(3).await.unwrap();
    let ttl = Duration::from_millis(300);
    let holder = client(&cluster)
        .ttl(ttl)
        .node_timeout("50ms")
        .watchdog(true)
        .build()
        .unwrap();
    let other = client(&cluster)
        .ttl(ttl)
        .node_timeout("50ms")
        .build()
        .unwrap();
    let key = unique_key("watchdog");
    let lease = holder.acquire(&key).await.unwrap();
    let first_deadline = lease.deadline();
    let until = Instant::now() + ttl * 5;
    let mut refused = 0;
    while Instant::now() < until {
        let err = other.try_acquire(&key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
        refused += 1;
        assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(refused >= 15);
    assert!(
        lease.deadline() > first_deadline + ttl * 3,
        "never extended"
    );
    lease.release().await.unwrap();
    other
        .try_acquire(&key)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn without_extension_the_lost_signal_fires_at_the_safety_point() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("400ms")
        .node_timeout("50ms")
        .build()
        .unwrap();
    let key = unique_key("lost_signal");
    let lease = client.acquire(&key).await.unwrap();
    let safety_point = lease.deadline() - lease.safety_margin();
    assert!(!lease.is_lost());
    let reason = lease.lost().await;
    let fired = Instant::now();
    assert_eq!(reason, LostReason::Expired);
    assert!(
        fired >= safety_point && fired < lease.deadline(),
        "fired outside [safety point, deadline)"
    );
    assert!(lease.is_lost());
    assert_eq!(lease.lost_reason(), Some(LostReason::Expired));
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
}

#[tokio::test]
async fn an_extension_moves_the_lost_signal() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("400ms")
        .node_timeout("50ms")
        .build()
        .unwrap();
    let key = unique_key("lost_moves");
    let lease = client.acquire(&key).await.unwrap();
    let first_safety_point = lease.deadline() - lease.safety_margin();
    let lost = lease.lost();
    tokio::time::sleep(Duration::from_millis(200)).await;
    lease.extend().await.unwrap();
    let reason = lost.await;
    assert_eq!(reason, LostReason::Expired);
    assert!(Instant::now() > first_safety_point + Duration::from_millis(100));
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_paused_majority_aborts_with_lock_before_the_deadline_and_the_lock_frees_after() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("600ms")
        .node_timeout("50ms")
        .build()
        .unwrap();
    let key = unique_key("abort");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect all

    let dropped = Arc::new(AtomicBool::new(false));
    let last_deadline = Arc::new(Mutex::new(None::<Instant>));
    let (started_tx, started_rx) = oneshot::channel();
    let work = {
        let (client, key) = (client.clone(), key.clone());
        let (dropped, last_deadline) = (Arc::clone(&dropped), Arc::clone(&last_deadline));
        tokio::spawn(async move {
            client
                .with_lock(&key, &AcquireOptions::new(), |lease| async move {
                    let _flag = DropFlag(dropped);
                    let _ = started_tx.send(());
                    // Works "forever" (bounded), noting the lease's deadline as it moves.
                    for _ in 0..1000 {
                        *last_deadline.lock().unwrap() = Some(lease.deadline());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    "finished"
                })
                .await
        })
    };
    started_rx.await.unwrap();
    // Let the watchdog extend a few times, then cut it off from a majority.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.server_mut(0).pause().unwrap();
    cluster.server_mut(1).pause().unwrap();
    let result = work.await.unwrap();
    let aborted_at = Instant::now();
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(err.to_string().contains("aborted"), "{err}");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the critical section was not dropped"
    );
    let deadline = last_deadline.lock().unwrap().unwrap();
    assert!(
        aborted_at < deadline,
        "aborted {:?} after the deadline",
        aborted_at - deadline
    );

    cluster.server_mut(0).resume().unwrap();
    cluster.server_mut(1).resume().unwrap();
    let other = client.clone();
    let lease = other
        .acquire_with(
            &key,
            &AcquireOptions::new().wait_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn with_lock_returns_the_output_and_releases() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("with_lock_ok");
    let out = client
        .with_lock(&key, &AcquireOptions::new(), |lease| async move {
            assert!(!lease.is_lost());
            lease.resource().to_owned()
        })
        .await
        .unwrap();
    assert_eq!(out, key);
    wait_until(Duration::from_secs(2), "released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn cancelling_with_lock_releases_the_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("with_lock_cancel");
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = oneshot::channel();
    let task = {
        let (client, key, dropped) = (client.clone(), key.clone(), Arc::clone(&dropped));
        tokio::spawn(async move {
            client
                .with_lock(&key, &AcquireOptions::new(), |_lease| async move {
                    let _flag = DropFlag(dropped);
                    let _ = started_tx.send(());
                    tokio::time::sleep(Duration::from_secs(30)).await;
                })
                .await
        })
    };
    started_rx.await.unwrap();
    assert!(!gone_everywhere(&cluster, &key).await);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(dropped.load(Ordering::SeqCst));
    wait_until(Duration::from_secs(2), "released after cancel", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn a_panic_in_with_lock_releases_the_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("with_lock_panic");
    let task = {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move {
            client
                .with_lock(&key, &AcquireOptions::new(), |_lease| async move {
                    panic!("the critical section failed");
                })
                .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    wait_until(Duration::from_secs(2), "released after panic", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn max_hold_stops_the_watchdog_and_aborts_the_work() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("300ms")
        .node_timeout("50ms")
        .build()
        .unwrap();
    let key = unique_key("max_hold");
    let start = Instant::now();
    let max_hold = Duration::from_millis(700);
    let err = client
        .with_lock(
            &key,
            &AcquireOptions::new().max_hold(max_hold),
            |_lease| async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    assert!(err.to_string().contains("maximum hold time"), "{err}");
    assert!(start.elapsed() >= max_hold, "stopped before max_hold");
    wait_until(Duration::from_secs(2), "released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn dropping_a_lease_stops_its_watchdog() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster)
        .ttl("300ms")
        .node_timeout("50ms")
        .watchdog(true)
        .build()
        .unwrap();
    let key = unique_key("watchdog_drop");
    let lease = client.acquire(&key).await.unwrap();
    let handle = lease.handle();
    drop(lease);
    assert_eq!(handle.lost().await, LostReason::Released);
    wait_until(Duration::from_secs(2), "released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
    // Nothing extends (or sets again) the key afterwards.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(gone_everywhere(&cluster, &key).await);
}
