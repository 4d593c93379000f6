//! The lease lifecycle against real masters: watchdog, lost signal, `with_lock`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Timeouts, Watchdog};
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
    let ttl = Duration::from_millis(500);
    let holder = client(&cluster)
        .ttl(ttl)
        .timeouts(Timeouts::new().node("150ms"))
        .watchdog(Watchdog::on())
        .build()
        .unwrap();
    let other = client(&cluster)
        .ttl(ttl)
        .timeouts(Timeouts::new().node("150ms"))
        .build()
        .unwrap();
    let key = unique_key("watchdog");
    let lease = holder.acquire(&key).await.unwrap();
    let first_deadline = lease.deadline();
    let until = Instant::now() + ttl * 5;
    // Another client is refused every quarter TTL until five TTLs have passed (however
    // long the probes themselves take on a loaded machine), and once more after that.
    let mut last_refusal = None;
    for _ in 0..1000 {
        let err = other.try_acquire(&key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
        last_refusal = Some(Instant::now());
        assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(
        last_refusal.is_some_and(|at| at >= until),
        "the probes stopped before five TTLs"
    );
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

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn without_extension_the_lost_signal_fires_at_the_safety_point() {
    let cluster = Cluster::start(3).await.unwrap();
    // A wide safety margin: the window in which the signal must fire.
    let client = client(&cluster)
        .ttl("1s")
        .timeouts(Timeouts::new().node("150ms"))
        .watchdog(Watchdog::new().safety_margin("400ms"))
        .build()
        .unwrap();
    let key = unique_key("lost_signal");
    let lease = client.acquire(&key).await.unwrap();
    let margin = lease.safety_margin();
    assert_eq!(margin, Duration::from_millis(400), "the configured margin");
    let safety_point = lease.deadline() - margin;
    assert!(!lease.is_lost());
    let reason = lease.lost().await;
    let fired = Instant::now();
    assert_eq!(reason, LostReason::Expired);
    // Never early (a timer); late by at most the scheduler's delay, which must stay
    // below the configured margin for the signal to come while the lock is held.
    assert!(
        fired >= safety_point,
        "fired {:?} before the safety point",
        safety_point - fired
    );
    assert!(
        fired < lease.deadline(),
        "fired {:?} after the safety point, past the {margin:?} safety margin",
        fired - safety_point
    );
    assert!(lease.is_lost());
    assert_eq!(lease.lost_reason(), Some(LostReason::Expired));
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
}

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn an_extension_moves_the_lost_signal() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("1s")
        .timeouts(Timeouts::new().node("150ms"))
        .build()
        .unwrap();
    let key = unique_key("lost_moves");
    let lease = client.acquire(&key).await.unwrap();
    let margin = lease.safety_margin();
    let first_safety_point = lease.deadline() - margin;
    let lost = lease.lost();
    let pause = Duration::from_millis(200);
    tokio::time::sleep(pause).await;
    lease
        .extend()
        .await
        .expect("extended before the first safety point");
    // The extension's round began after the pause, so its deadline is later by at least
    // that much.
    let second_safety_point = lease.deadline() - margin;
    assert!(second_safety_point >= first_safety_point + pause);
    let reason = lost.await;
    let fired = Instant::now();
    assert_eq!(reason, LostReason::Expired);
    assert!(
        fired >= second_safety_point,
        "fired {:?} before the extended safety point: the signal kept the first one",
        second_safety_point - fired
    );
    lease.release().await.unwrap();
}

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn a_paused_majority_aborts_with_lock_before_the_deadline_and_the_lock_frees_after() {
    let mut cluster = Cluster::start(3).await.unwrap();
    // The work must stop within the safety margin after its last extension's safety
    // point: a wide one, so that a loaded machine's scheduling delays fit in it.
    let margin = Duration::from_millis(400);
    let client = client(&cluster)
        .ttl("1s")
        .timeouts(Timeouts::new().node("150ms"))
        .watchdog(Watchdog::new().safety_margin(margin))
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
                    let _ = started_tx.send(lease.deadline());
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
    let first_deadline = started_rx.await.unwrap();
    // Once the watchdog has extended the lease, cut it off from a majority.
    wait_until(Duration::from_secs(5), "the watchdog extended", || {
        let moved = last_deadline
            .lock()
            .unwrap()
            .is_some_and(|d| d > first_deadline);
        async move { moved }
    })
    .await;
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
        "aborted {:?} after the deadline: more than the {margin:?} safety margin late",
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

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn max_hold_stops_the_watchdog_and_aborts_the_work() {
    let cluster = Cluster::start(3).await.unwrap();
    // A TTL far longer than max_hold and the wait below: only a release frees the keys.
    let client = client(&cluster)
        .ttl("5s")
        .timeouts(Timeouts::new().node("150ms"))
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

// Checks I8 (nothing extends a lease after its release began).
#[tokio::test]
async fn dropping_a_lease_stops_its_watchdog() {
    let cluster = Cluster::start(1).await.unwrap();
    // A TTL far longer than the waits below (only a release frees the key in time), and
    // a short watchdog interval.
    let interval = Duration::from_millis(100);
    let client = client(&cluster)
        .ttl("5s")
        .timeouts(Timeouts::new().node("50ms"))
        .watchdog(Watchdog::on().interval(interval))
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
    // Nothing extends (or sets again) the key afterwards: wait several watchdog intervals.
    tokio::time::sleep(interval * 4).await;
    assert!(gone_everywhere(&cluster, &key).await);
}
