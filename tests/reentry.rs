//! Re-entry and the held-key registry against real masters (docs/design.md §14): an
//! acquire of a resource the client holds fails at once without a round trip, re-entry
//! never talks to a master, and only the outermost guard releases.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Waiting};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redquorum::{AcquireOptions, ErrorKind, LostReason};
use support::*;
use tokio::time::Instant;

/// Every command of the masters that a lock operation sends (scripts, their fallbacks and
/// release-notice subscriptions), summed over `cluster`: `INFO commandstats` calls.
async fn lock_commands(cluster: &Cluster) -> u64 {
    let mut total = 0;
    for url in cluster.urls() {
        let info = info(&mut raw(&url).await, "commandstats").await;
        for line in info.lines() {
            let Some((name, stats)) = line.split_once(':') else {
                continue;
            };
            let counted = [
                "evalsha",
                "eval",
                "script",
                "set",
                "get",
                "del",
                "pexpire",
                "subscribe",
                "publish",
            ];
            if !counted.iter().any(|c| name == format!("cmdstat_{c}")) {
                continue;
            }
            let calls = stats
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap();
            total += calls;
        }
    }
    total
}

/// The output of `future` at its first poll: a call that is refused "at once" must not
/// wait for anything, not even a round trip to a master. Panics if it is still pending.
fn at_first_poll<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("still pending at its first poll: it waited"),
    }
}

#[tokio::test]
async fn acquiring_a_held_resource_fails_at_once_without_asking_a_master() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .retry(Retry::new().wait(Duration::from_secs(5)))
        .build()
        .unwrap();
    let key = unique_key("held");
    let lease = client.acquire(&key).await.unwrap();
    // A clone shares the registry.
    let clone = client.clone();
    // The acquire returned at a quorum; its request to the last master may still run, and
    // would be counted below. Wait until every master holds the key.
    wait_until(
        Duration::from_secs(2),
        "every master holds the key",
        || async {
            let mut held = 0;
            for url in cluster.urls() {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&key)
                    .query_async(&mut raw(&url).await)
                    .await
                    .unwrap_or(false);
                held += usize::from(exists);
            }
            held == 3
        },
    )
    .await;
    let before = lock_commands(&cluster).await;
    let error = at_first_poll(clone.acquire(&key)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{error}");
    assert!(!error.is_retryable(), "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "this client already holds {key:?}: re-enter with `Lease::reenter`"
        )),
        "{text}"
    );
    assert!(text.contains("own_leases"), "{text}");
    assert!(error.masters().is_empty(), "{error:?}");
    assert_eq!(
        lock_commands(&cluster).await,
        before,
        "a refused acquire sent something to the masters"
    );

    // With every master stopped, a round could not even start: still refused at the
    // first poll, with no master asked.
    for i in 0..3 {
        cluster.server_mut(i).pause().unwrap();
    }
    let options = AcquireOptions::new().wait_timeout("3s").fencing(false);
    for (call, refused) in [
        (
            "try_acquire",
            at_first_poll(client.try_acquire(&key)).map(drop),
        ),
        ("acquire", at_first_poll(client.acquire(&key)).map(drop)),
        (
            "acquire_with",
            at_first_poll(client.acquire_with(&key, &options)).map(drop),
        ),
        // with_lock takes the same path.
        (
            "with_lock",
            at_first_poll(client.with_lock(&key, &AcquireOptions::new(), |_| async {})),
        ),
    ] {
        let error = refused.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{call}: {error}");
        assert!(error.masters().is_empty(), "{call}: {error:?}");
    }
    for i in 0..3 {
        cluster.server_mut(i).resume().unwrap();
    }
    lease.release().await.unwrap();
    // Released: the client may take it again.
    client.acquire(&key).await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_long_held_name_is_shortened_in_the_refusal() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = format!("{}:{}", unique_key("long"), "ü".repeat(400));
    let lease = client.acquire(&name).await.unwrap();
    let error = client.try_acquire(&name).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{error}");
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(&name), "the whole name: {text}");
        assert!(text.len() < 700, "{} bytes: {text}", text.len());
        assert!(text.contains("Lease::reenter"), "{text}");
    }
    lease.release().await.unwrap();
}

#[tokio::test]
async fn another_client_waits_and_a_lost_lease_still_counts_as_held_until_dropped() {
    let cluster = Cluster::start(3).await.unwrap();
    let ttl = Duration::from_millis(500);
    let holder = client(&cluster).ttl(ttl).build().unwrap();
    let other = client(&cluster).ttl(ttl).build().unwrap();
    let key = unique_key("lost");
    let lease = holder.acquire(&key).await.unwrap();
    // The registry is per client: another client contends through the masters.
    let error = other.try_acquire(&key).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Contended, "{error}");

    lease.lost().await;
    assert!(lease.is_lost());
    // Lost, not released: its keys may still be on the masters, and the client is told.
    let error = holder.try_acquire(&key).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{error}");
    drop(lease);
    let lease = holder
        .acquire_with(&key, &AcquireOptions::new().wait_timeout("3s"))
        .await
        .unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn inside_with_lock_the_same_resource_is_refused_not_waited_for() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("nested");
    let inner = client.clone();
    let nested = key.clone();
    let kind = client
        .with_lock(&key, &AcquireOptions::new(), |handle| async move {
            assert!(!handle.is_lost());
            inner.acquire(&nested).await.unwrap_err().kind()
        })
        .await
        .unwrap();
    assert_eq!(kind, ErrorKind::AlreadyHeld);
}

#[tokio::test]
async fn with_the_opt_out_tasks_of_one_client_queue_behind_each_other() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .retry(Retry::new().wait(Duration::from_secs(5)))
        .waiting(Waiting::new().own_leases(true))
        .build()
        .unwrap();
    let key = unique_key("queue");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (client, key) = (client.clone(), key.clone());
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let lease = client.acquire(&key).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two tasks held the lock at once"
    );

    // The opt-out waits for its own lease: with a short budget, a timeout, not AlreadyHeld.
    let lease = client.acquire(&key).await.unwrap();
    let options = AcquireOptions::new().wait_timeout("150ms");
    let error = client.acquire_with(&key, &options).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WaitTimeout, "{error}");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn children_share_the_lease_release_nothing_and_are_lost_after_the_outermost_release() {
    // Durable masters whose data epochs started long ago vote at once, with fencing.
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    for url in cluster.urls() {
        seed_old_epoch(&url).await;
    }
    let client = client(&cluster)
        .quarantine(true)
        .fencing(true)
        .build()
        .unwrap();
    let key = unique_key("children");
    let lease = client.acquire(&key).await.unwrap();
    let value = get(&cluster.urls()[0], &key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, &value)
    })
    .await;
    let before = lock_commands(&cluster).await;
    let child = lease.reenter();
    let grandchild = child.reenter();
    assert_eq!((child.depth(), grandchild.depth()), (1, 2));
    assert_eq!(child.deadline(), lease.deadline());
    assert_eq!(grandchild.fencing_token(), lease.fencing_token());
    assert!(lease.fencing_token().is_some());
    assert_eq!(child.resource(), key);
    // Leaving and dropping children touches no master and releases nothing.
    grandchild.release();
    drop(lease.reenter());
    assert_eq!(
        lock_commands(&cluster).await,
        before,
        "re-entry asked a master"
    );
    assert!(held_everywhere(&cluster, &key, &value).await);
    assert!(!child.is_lost());

    // An extension through the lease moves every child's deadline.
    let extended = lease.extend().await.unwrap();
    assert_eq!(child.deadline(), extended.deadline());

    // The outermost release releases, with a child alive; the child reports the loss.
    let lost = child.lost();
    lease.release().await.unwrap();
    assert_eq!(child.lost_reason(), Some(LostReason::Released));
    assert!(child.is_lost() && child.is_expired());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), lost).await,
        Ok(LostReason::Released)
    );
    wait_until(Duration::from_secs(2), "released everywhere", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
    // A child's extension cannot revive it.
    assert_eq!(
        child.extend().await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    // The client may take the resource again while the old child lives on.
    let again = client.acquire(&key).await.unwrap();
    assert!(!again.is_lost() && child.is_lost());
    drop(child);
    // Dropping the outermost guard releases too, and its children see it.
    let child = again.reenter();
    drop(again);
    assert_eq!(child.lost_reason(), Some(LostReason::Released));
    wait_until(Duration::from_secs(2), "dropped lease released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn a_child_is_lost_when_its_lease_expires() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("400ms").build().unwrap();
    let key = unique_key("child_expires");
    let lease = client.acquire(&key).await.unwrap();
    let child = lease.reenter();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), child.lost()).await,
        Ok(LostReason::Expired)
    );
    assert!(lease.is_lost());
    assert_eq!(child.lost_reason(), Some(LostReason::Expired));
    let debug = format!("{child:?}");
    assert!(
        debug.contains("Reentry") && debug.contains("depth"),
        "{debug}"
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_waiting_acquire_ends_with_already_held_when_its_own_client_takes_the_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let ours = client(&cluster)
        .retry(Retry::new().wait(Duration::from_secs(5)))
        .build()
        .unwrap();
    let key = unique_key("waiting");
    let lease = holder.acquire(&key).await.unwrap();
    // Two tasks of one client wait for another client's lock.
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (ours, key) = (ours.clone(), key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let result = ours.acquire(&key).await;
                (result, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease.release().await.unwrap();
    let mut kinds = Vec::new();
    let mut leases = Vec::new();
    for waiter in waiters {
        let (result, took) = waiter.await.unwrap();
        // Far from the 5 s budget: the loser does not wait for its own client's lease.
        assert!(took < Duration::from_secs(2), "took {took:?}");
        match result {
            Ok(lease) => leases.push(lease),
            Err(e) => kinds.push(e.kind()),
        }
    }
    assert_eq!(leases.len(), 1, "{kinds:?}");
    assert_eq!(kinds, [ErrorKind::AlreadyHeld]);
    for lease in leases {
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_waiting_acquire_is_refused_as_soon_as_its_own_client_takes_the_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    // No release notices and a long fixed pause: between attempts only the registry can
    // wake the waiter.
    let ours = client(&cluster)
        .retry(
            Retry::new()
                .delay(Duration::from_secs(3))
                .jitter(Duration::ZERO)
                .wait(Duration::from_secs(8)),
        )
        .waiting(Waiting::new().notifications(false).handoff(false))
        .build()
        .unwrap();
    let key = unique_key("woken");
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = {
        let (ours, key) = (ours.clone(), key.clone());
        tokio::spawn(async move { ours.acquire(&key).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease.release().await.unwrap();
    let mine = ours.try_acquire(&key).await.unwrap();
    let took = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(6), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{error}");
    // Far less than the 3 s pause it was sleeping.
    assert!(
        took.elapsed() < Duration::from_secs(1),
        "{:?}",
        took.elapsed()
    );
    mine.release().await.unwrap();
}
