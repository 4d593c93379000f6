//! Waiting woken by release notices, against real masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind};
use support::*;
use tokio::time::Instant;

/// A waiter whose fallback timer alone could never get the lock within its budget.
fn patient(cluster: &Cluster) -> redquorum::Builder {
    // Release notices to every waiter, as without hand-off (tests/handoff.rs tests it).
    client(cluster)
        .retry(Retry::new().delay("60s").jitter("0s").wait("20s"))
        .waiting(Waiting::new().handoff(false))
}

/// How many `SET` commands the server at `url` executed so far: with quarantine off, each
/// acquire attempt sends one to every master.
async fn set_calls(url: &str) -> u64 {
    let mut conn = raw(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_set:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// `SET` calls on each master of `cluster`.
async fn set_calls_everywhere(cluster: &Cluster) -> Vec<u64> {
    let mut calls = Vec::new();
    for url in cluster.urls() {
        calls.push(set_calls(&url).await);
    }
    calls
}

/// Waits until every master of `cluster` executed at least `more` `SET`s beyond `before`:
/// that many acquire attempts of a waiter reached every master (and were refused).
async fn wait_for_attempts(cluster: &Cluster, before: &[u64], more: u64) {
    wait_until(
        Duration::from_secs(10),
        &format!("{more} attempts reached every master"),
        || async move {
            let now = set_calls_everywhere(cluster).await;
            now.iter().zip(before).all(|(n, b)| *n >= b + more)
        },
    )
    .await;
}

/// How many subscribers `channel` has on the server at `url`.
async fn subscribers(url: &str, channel: &str) -> i64 {
    let mut conn = raw(url).await;
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    n
}

// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn a_release_wakes_the_waiter() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let waiter = patient(&cluster).build().unwrap();
    let key = unique_key("wake");
    let lease = holder.acquire(&key).await.unwrap();

    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { (waiter.acquire(&key).await, Instant::now()) }
    });
    // The waiter is subscribed once the channel has a subscriber on a quorum.
    let channel = format!("redquorum:released:{key}");
    let urls = cluster.urls();
    wait_until(Duration::from_secs(5), "the waiter subscribed", || {
        let (urls, channel) = (urls.clone(), channel.clone());
        async move {
            let mut n = 0;
            for url in &urls {
                n += subscribers(url, &channel).await;
            }
            n >= 2
        }
    })
    .await;
    let released_at = Instant::now();
    lease.release().await.unwrap();
    let (acquired, acquired_at) = waiting.await.unwrap();
    let lease = acquired.unwrap();
    // Released, then acquired, within the 20 s budget: neither the 60 s fallback timer nor
    // the 30 s TTL could have let the waiter in. Only the notice can explain it.
    assert!(
        acquired_at > released_at,
        "acquired before the holder released"
    );
    assert!(
        lease
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2
    );
    lease.release().await.unwrap();
    // The waiter unsubscribed once it had the lock.
    for url in cluster.urls() {
        wait_until(Duration::from_secs(2), "unsubscribed", || {
            let (url, channel) = (url.clone(), channel.clone());
            async move { subscribers(&url, &channel).await == 0 }
        })
        .await;
    }
}

#[tokio::test]
async fn without_notifications_the_same_waiter_times_out() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let waiter = patient(&cluster)
        .retry(Retry::new().wait("1500ms"))
        .waiting(Waiting::new().notifications(false))
        .build()
        .unwrap();
    let key = unique_key("no_notice");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "the holder's keys landed", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    let before = set_calls_everywhere(&cluster).await;
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { waiter.acquire(&key).await }
    });
    // The release comes after the waiter's first attempt was refused everywhere.
    wait_for_attempts(&cluster, &before, 1).await;
    lease.release().await.unwrap();
    let err = waiting.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
}

#[tokio::test]
async fn a_waiter_whose_budget_runs_out_gets_a_timeout_and_leaves_no_subscription() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let waiter = patient(&cluster).build().unwrap();
    let key = unique_key("budget");
    let _lease = holder.acquire(&key).await.unwrap();
    let start = Instant::now();
    let budget = Duration::from_millis(400);
    let err = waiter
        .acquire_with(&key, &AcquireOptions::new().wait_timeout(budget))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
    assert!(err.to_string().contains("gave up waiting"), "{err}");
    assert!(err.is_retryable());
    assert!(start.elapsed() >= budget);
    let channel = format!("redquorum:released:{key}");
    for url in cluster.urls() {
        wait_until(Duration::from_secs(2), "no subscription left", || {
            let (url, channel) = (url.clone(), channel.clone());
            async move { subscribers(&url, &channel).await == 0 }
        })
        .await;
    }
}

// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn an_abandoned_lock_wakes_the_waiter_when_its_keys_expire() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("abandoned");
    // Another client "crashed" holding the lock: its keys expire, nobody publishes.
    for url in cluster.urls() {
        let _: () = raw(&url).await.pset_ex(&key, "crashed", 700).await.unwrap();
    }
    let waiter = patient(&cluster).build().unwrap();
    // Acquired within the 20 s budget, so before the 60 s fallback timer could fire, and
    // with no release to publish a notice: woken by the holder's PTTL.
    let lease = waiter.acquire(&key).await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn without_pub_sub_on_the_masters_waiters_fall_back_to_their_timers() {
    let options = ServerOptions::new()
        .arg("--rename-command")
        .arg("SUBSCRIBE")
        .arg("\"\"");
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let waiter = client(&cluster)
        .retry(Retry::new().delay("50ms").jitter("20ms").wait("10s"))
        .build()
        .unwrap();
    let key = unique_key("no_pubsub");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "the holder's keys landed", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    let before = set_calls_everywhere(&cluster).await;
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { waiter.acquire(&key).await }
    });
    // Attempt 1 is refused; the subscription fails and attempt 2 follows at once; attempt
    // 3 comes from the fallback timer. Release only after that, so that the attempt that
    // wins is a timer's too: no notice can be published, and the holder's 30 s TTL
    // outlasts the waiter's 10 s budget.
    wait_for_attempts(&cluster, &before, 3).await;
    lease.release().await.unwrap();
    let lease = waiting.await.unwrap().unwrap();
    lease.release().await.unwrap();
}

// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn many_waiters_take_turns_each_woken_by_the_previous_release() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("turns");
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let first = holder.acquire(&key).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let waiter = patient(&cluster).ttl("30s").build().unwrap();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let lease = waiter.acquire(&key).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            lease.release().await.unwrap();
        }));
    }
    // Every waiter subscribed on every master (one connection each) before the release.
    let channel = format!("redquorum:released:{key}");
    for url in cluster.urls() {
        wait_until(
            Duration::from_secs(5),
            "all four waiters subscribed",
            || {
                let (url, channel) = (url.clone(), channel.clone());
                async move { subscribers(&url, &channel).await == 4 }
            },
        )
        .await;
    }
    first.release().await.unwrap();
    // With a 60 s fallback and 30 s TTLs, all four finishing proves every hand-off was
    // woken by a release notice.
    tokio::time::timeout(Duration::from_secs(15), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("waiters were not woken by releases");
}
