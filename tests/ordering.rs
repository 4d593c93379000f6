//! A clean-up reaches a master after the requests of the same call (docs/design.md §2,
//! I20): each master's requests leave in the order in which the client made them, also
//! while its first connection is still being set up. Otherwise a release or a `Dequeue`
//! can overtake the very request it cleans up after, and that master keeps a phantom lock
//! or registration for a whole TTL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, Redlock};
use redquorum_testkit::{Mode, Proxy};
use support::*;

/// Brand-new clients: one master behind a link of `3 ± 3 ms` each way, so that its first
/// connection is still being set up when the other two decide each round.
fn fresh(cluster: &Cluster, proxy: &Proxy) -> Redlock {
    Redlock::builder()
        .quarantine(false)
        .masters([
            cluster.server(0).url(),
            cluster.server(1).url(),
            proxy.url(),
        ])
        .ttl("5s")
        .timeouts(Timeouts::new().node("500ms"))
        .retry(Retry::new().delay("5ms").jitter("5ms"))
        .waiting(Waiting::new().waiter_ttl("3s"))
        .build()
        .unwrap()
}

/// Every key on `server` that names `key` (the lock key, its owner record, its queue and
/// its waiters' records).
async fn keys_naming(server: &Server, key: &str) -> Vec<String> {
    let mut conn = raw(&server.url()).await;
    let mut found: Vec<String> = conn.keys(format!("*{key}*")).await.unwrap();
    found.sort();
    found
}

/// A brand-new client acquires and releases: after its release and `shutdown`, no master
/// keeps the lock key or its owner record. The release used to race the acquire's request
/// for the slow master's first connection and, sent first, left that master holding the
/// lock for its whole TTL.
// Checks I20 (calls to one master are written in the order made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_clients_release_leaves_no_key_behind() {
    let cluster = Cluster::start(3).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    proxy.set_mode(Mode::delay(
        Duration::from_millis(3),
        Duration::from_millis(3),
    ));
    let mut left = Vec::new();
    for round in 0..60 {
        let client = fresh(&cluster, &proxy);
        let key = unique_key("fresh_release");
        let lease = client.try_acquire(&key).await.unwrap();
        lease.release().await.unwrap();
        let unfinished = client.shutdown().await;
        assert_eq!(unfinished, 0, "shutdown left clean-ups running");
        for server in cluster.servers() {
            let keys = keys_naming(server, &key).await;
            if !keys.is_empty() {
                left.push((round, server.url(), keys));
            }
        }
    }
    assert!(
        left.is_empty(),
        "keys left behind after a release: {left:?}"
    );
}

/// A fair queued waiter of a brand-new client is dropped as soon as a quorum registered it:
/// the `Dequeue` its drop sends reaches the slow master after the registration, so that no
/// master keeps the registration (it would otherwise stay for its waiter TTL, 3 s, and a
/// release there would hand the key to the dead waiter).
// Checks I20 (calls to one master are written in the order made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiter_leaves_no_registration_behind() {
    let cluster = Cluster::start(3).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let key = unique_key("dropped_waiter");
    let lease = holder.try_acquire(&key).await.unwrap();
    proxy.set_mode(Mode::delay(
        Duration::from_millis(3),
        Duration::from_millis(3),
    ));
    // Fair: the ticket's registration round is decided by a quorum, so the slow
    // master's registration is still on its way when the call is dropped.
    let options = AcquireOptions::new().fair(true).wait_timeout("20s");
    let mut left = Vec::new();
    for round in 0..60 {
        let waiter = fresh(&cluster, &proxy);
        // Boxed, so that dropping it below drops the call itself.
        let mut wait = Box::pin(waiter.acquire_with(&key, &options));
        // Poll the waiting acquire until a quorum has its registration, then drop it.
        let registered = async {
            loop {
                if queued_on(&cluster, &key, 1).await >= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            done = &mut wait => panic!("the waiter was served while the lock is held: {done:?}"),
            () = registered => {}
            () = tokio::time::sleep(Duration::from_secs(2)) => panic!("the waiter never registered"),
        }
        drop(wait);
        let unfinished = waiter.shutdown().await;
        assert_eq!(unfinished, 0, "shutdown left clean-ups running");
        // Every request of the dropped call has been answered (shutdown waits for them):
        // no master may still list the waiter.
        for server in cluster.servers() {
            let queued = members(server, &key).await;
            if !queued.is_empty() {
                left.push((round, server.url(), queued));
            }
        }
        if !left.is_empty() {
            break;
        }
    }
    lease.release().await.unwrap();
    assert!(left.is_empty(), "registrations left behind: {left:?}");
}

/// A round decided by masters that fail at once (three of five known down) returns before
/// the other two masters' calls were ever polled. The attempt's release, made after the
/// round, must still reach those two after its acquire, with restart quarantine on (its
/// guard wraps every master) as well as off: otherwise their keys stay for the whole TTL.
async fn keys_left_by_failed_attempts(quarantine: bool) -> usize {
    let mut cluster = Cluster::start(5).await.unwrap();
    let client = Redlock::builder()
        .quarantine(quarantine)
        .masters(cluster.urls())
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("5ms").jitter("5ms"))
        .build()
        .unwrap();
    // Connected everywhere, then three masters die and are found down.
    let _ = client.try_acquire(&unique_key("connect")).await;
    client.shutdown().await;
    for i in 0..3 {
        cluster.server_mut(i).kill().unwrap();
    }
    for _ in 0..3 {
        let _ = client.try_acquire(&unique_key("down")).await;
    }
    client.shutdown().await;
    let mut left = 0;
    for _ in 0..100 {
        let key = unique_key("overtaken");
        let error = client.try_acquire(&key).await.unwrap_err();
        assert!(error.is_retryable(), "{error}");
        assert_eq!(
            client.shutdown().await,
            0,
            "shutdown left clean-ups running"
        );
        for i in 3..5 {
            if value_on(cluster.server(i), &key).await.is_some() {
                left += 1;
            }
        }
    }
    left
}

// Checks I20 (calls to one master are written in the order made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_follows_an_unpolled_acquire_with_quarantine_on() {
    assert_eq!(keys_left_by_failed_attempts(true).await, 0);
}

// Checks I20 (calls to one master are written in the order made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_follows_an_unpolled_acquire_with_quarantine_off() {
    assert_eq!(keys_left_by_failed_attempts(false).await, 0);
}

/// A call future polled once while its master's first connection is being set up, then
/// kept without being polled again (an application that stopped driving it): the
/// connection is still set up, and the calls made after it wait for its turn at most once
/// (connect plus node timeout, 500 ms here), not each of them, for as long as it is kept.
// Checks I20 (calls to one master are written in the order made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_unpolled_call_holds_later_calls_up_once() {
    let cluster = Cluster::start(1).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(0)).await.unwrap();
    proxy.set_mode(Mode::delay(
        Duration::from_millis(20),
        Duration::from_millis(5),
    ));
    let client = Redlock::builder()
        .quarantine(false)
        .master(proxy.url())
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms").connect("300ms"))
        .build()
        .unwrap();
    let kept_key = unique_key("kept");
    let mut kept = Box::pin(client.try_acquire(&kept_key));
    assert!(futures::poll!(kept.as_mut()).is_pending());
    proxy.set_mode(Mode::Pass);
    let mut cycles = Vec::new();
    for _ in 0..4 {
        let started = tokio::time::Instant::now();
        let lease = client.try_acquire(&unique_key("behind")).await.unwrap();
        lease.release().await.unwrap();
        cycles.push(started.elapsed());
    }
    drop(kept);
    // The first cycle may wait one limit for the kept call; the others must not (each
    // waited one limit per call before: a second per cycle).
    assert!(
        cycles[1..].iter().all(|c| *c < Duration::from_millis(500)),
        "{cycles:?}"
    );
}
