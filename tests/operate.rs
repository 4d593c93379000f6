//! Operating locks by hand, on real masters: `inspect` of held, free, split, partly
//! unreachable and foreign locks with their owner records; `force_unlock` of one value
//! (a newer holder untouched, waiters woken); `force_unlock_any` (the fence counter
//! raised, the old holder told at its next extension); bad input; futures dropped midway.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Waiting, Watchdog};
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use redis::AsyncCommands;
#[cfg(redquorum_mutants)]
use redquorum::Mutant;
use redquorum::{
    AcquireOptions, ErrorKind, Holding, LostReason, MasterErrorKind, MasterOutcome, Redlock,
    Verdict,
};
use redquorum_testkit::{Mode, Proxy};
use support::*;
use tokio::time::Instant;

/// A fenced client (restart quarantine on) over `cluster`, whose masters must be durable.
fn fenced(cluster: &Cluster) -> redquorum::Builder {
    Redlock::builder()
        .masters(cluster.urls())
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("5ms").jitter("10ms"))
        .fencing(true)
}

/// Three durable masters, bootstrapped so that they vote at once.
async fn fenced_cluster() -> Cluster {
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    fenced(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    cluster
}

/// This machine's host name, as the owner record should show it.
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
}

#[tokio::test]
async fn inspect_shows_a_held_lock_with_its_owner_and_time_left() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).label("billing").build().unwrap();
    let key = unique_key("held");
    let lease = client.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;

    let inspection = client.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some(lease.value()), "{inspection}");
    let Verdict::Held {
        owner, remaining, ..
    } = inspection.verdict()
    else {
        panic!("{inspection}");
    };
    // The quorum-th TTL less the drift allowance (5 s × 0.01 + 2 ms) and the round.
    let remaining = remaining.unwrap();
    assert!(remaining <= Duration::from_millis(4948), "{remaining:?}");
    assert!(remaining > Duration::from_secs(4), "{remaining:?}");
    let owner = owner.as_ref().unwrap();
    assert_eq!(owner.label, "billing");
    assert_eq!(owner.pid, Some(std::process::id()));
    if let Some(host) = hostname() {
        assert_eq!(owner.host, host);
    }
    assert!(!owner.client.is_empty());
    // The lock's value names its client's holder record: the same client id.
    assert!(
        lease.value().starts_with(owner.client.as_str()),
        "{} names {}",
        lease.value(),
        owner.client
    );
    // A lock keeps no record per acquisition: no time of acquisition, no token.
    assert_eq!((owner.acquired, owner.held_for), (None, None));
    assert_eq!(owner.token, None, "no fencing");
    for view in inspection.masters() {
        match view.holding() {
            Holding::Lock { value, ttl, owner } => {
                assert_eq!(value, lease.value());
                assert!(ttl.unwrap() > Duration::from_secs(4));
                assert_eq!(owner.as_ref().unwrap().label, "billing");
            }
            other => panic!("{}: {other}", view.master()),
        }
        assert_eq!(view.fence_counter(), None);
    }
    let shown = inspection.to_string();
    for part in ["billing", lease.value(), "snapshot", "quorum 2 of 3"] {
        assert!(shown.contains(part), "{part} missing from:\n{shown}");
    }
    // A label given per call wins over the client's.
    lease.release().await.unwrap();
    let lease = client
        .acquire_with(&key, &AcquireOptions::new().label("job-7"))
        .await
        .unwrap();
    match client.inspect(&key).await.unwrap().verdict() {
        Verdict::Held {
            owner: Some(owner), ..
        } => assert_eq!(owner.label, "job-7"),
        other => panic!("{other}"),
    }
    lease.release().await.unwrap();
}

#[tokio::test]
async fn inspect_shows_the_fencing_token_and_the_fence_counters() {
    let cluster = fenced_cluster().await;
    let client = fenced(&cluster).build().unwrap();
    let key = unique_key("fenced");
    let lease = client.acquire(&key).await.unwrap();
    let token = lease.fencing_token().unwrap();
    let inspection = client.inspect(&key).await.unwrap();
    match inspection.verdict() {
        Verdict::Held {
            owner: Some(owner), ..
        } => assert_eq!(
            owner.token, None,
            "a lock's token is its counter: {inspection}"
        ),
        _ => panic!("{inspection}"),
    }
    let counters: Vec<Option<u64>> = inspection
        .masters()
        .iter()
        .map(|m| m.fence_counter())
        .collect();
    assert!(
        counters.iter().filter(|c| **c == Some(token.get())).count() >= 2,
        "a quorum wrote the token back: {counters:?}"
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn inspect_tells_free_split_unknown_and_other_kinds_apart() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .timeouts(Timeouts::new().node("100ms").connect("300ms"))
        .build()
        .unwrap();
    let key = unique_key("verdicts");
    let urls = cluster.urls();

    let free = client.inspect(&key).await.unwrap();
    assert!(matches!(free.verdict(), Verdict::Free), "{free}");
    assert!(
        free.masters()
            .iter()
            .all(|m| matches!(m.holding(), Holding::Free))
    );

    // Three values, one per master: leftovers, no quorum.
    for (i, url) in urls.iter().enumerate() {
        let _: () = raw(url)
            .await
            .pset_ex(&key, format!("v{i}"), 10_000)
            .await
            .unwrap();
    }
    let split = client.inspect(&key).await.unwrap();
    assert!(matches!(split.verdict(), Verdict::Split), "{split}");

    // Another kind of lock under the name.
    for url in &urls {
        let mut conn = raw(url).await;
        let _: () = conn.del(&key).await.unwrap();
        let _: () = conn.hset(&key, "permits", 3).await.unwrap();
    }
    let other = client.inspect(&key).await.unwrap();
    assert!(
        matches!(other.verdict(), Verdict::OtherKind { kind } if kind == "hash"),
        "{other}"
    );
    for url in &urls {
        let _: () = raw(url).await.del(&key).await.unwrap();
    }

    // A held lock with one master stopped: still held, the stopped one reported, and the
    // call returns within the connect and node timeouts.
    let lease = client.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    cluster.server_mut(2).pause().unwrap();
    let started = Instant::now();
    let partial = client.inspect(&key).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(1500), "it waited");
    assert_eq!(partial.holder(), Some(lease.value()), "{partial}");
    assert!(
        matches!(partial.masters()[2].holding(), Holding::Unreachable(e) if e.kind() == MasterErrorKind::Timeout),
        "{partial}"
    );
    // With the value on one master only and one master stopped, the stopped one may
    // complete a quorum: unknown.
    for url in &urls[..2] {
        let _: () = raw(url).await.del(&key).await.unwrap();
    }
    let _: () = raw(&urls[0])
        .await
        .pset_ex(&key, lease.value(), 10_000)
        .await
        .unwrap();
    let unknown = client.inspect(&key).await.unwrap();
    assert!(matches!(unknown.verdict(), Verdict::Unknown), "{unknown}");
    cluster.server_mut(2).resume().unwrap();
    drop(lease);
}

// Checks I6 (only one's own keys are touched).
#[tokio::test]
async fn force_unlock_with_another_value_leaves_the_holder_alone() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("wrong_value");
    let lease = client.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    let report = client.force_unlock(&key, "not-its-value").await.unwrap();
    assert_eq!(report.deleted(), 0, "{report}");
    assert!(report.removed().is_empty());
    assert_eq!(report.fence_counter(), None);
    assert!(
        report
            .masters()
            .iter()
            .all(|r| matches!(r.outcome(), MasterOutcome::HeldByOther)),
        "{report}"
    );
    assert!(
        report.to_string().contains("another value, left alone"),
        "{report}"
    );
    assert!(held_everywhere(&cluster, &key, lease.value()).await);
    lease.extend().await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn force_unlock_frees_the_lock_wakes_a_waiter_and_the_holder_learns_it() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("10s").build().unwrap();
    // Without a release notice the waiter would sleep for seconds: its retry timer and
    // the holder's expiry are far off. (Queued, it would be handed the lock instead.)
    let waiter = client(&cluster)
        .ttl("10s")
        .retry(Retry::new().delay("5s").jitter("0s"))
        .waiting(Waiting::new().handoff(false))
        .build()
        .unwrap();
    let key = unique_key("right_value");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            let lease = waiter
                .acquire_with(&key, &AcquireOptions::new().wait_timeout("15s"))
                .await;
            (Instant::now(), lease)
        }
    });
    let channel = format!("redquorum:released:{key}");
    wait_until(Duration::from_secs(5), "the waiter subscribed", || {
        let (urls, channel) = (cluster.urls(), channel.clone());
        async move {
            for url in urls {
                let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut raw(&url).await)
                    .await
                    .unwrap();
                if counts.iter().all(|(_, n)| *n == 0) {
                    return false;
                }
            }
            true
        }
    })
    .await;

    let unlocked_at = Instant::now();
    let report = holder.force_unlock(&key, lease.value()).await.unwrap();
    assert_eq!(report.removed(), [lease.value()], "{report}");
    assert_eq!(report.deleted(), 3, "{report}");
    let (got_at, taken) = waiting.await.unwrap();
    let taken = taken.unwrap();
    assert!(
        got_at - unlocked_at < Duration::from_secs(2),
        "the waiter was not woken by the notice: {:?}",
        got_at - unlocked_at
    );
    // The old holder's next extension fails: its value is on no master, and an extension
    // never sets a missing key again (it finds the new holder's value, or nothing).
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert_eq!(lease.lost_reason(), Some(LostReason::ExtendFailed));
    wait_until(
        Duration::from_secs(2),
        "the waiter holds it everywhere",
        || held_everywhere(&cluster, &key, taken.value()),
    )
    .await;
    taken.release().await.unwrap();
}

#[tokio::test]
async fn force_unlock_any_raises_the_fence_and_the_holders_watchdog_signals_loss() {
    let cluster = fenced_cluster().await;
    let holder = fenced(&cluster)
        .watchdog(Watchdog::new().interval("200ms"))
        .build()
        .unwrap();
    let operator = fenced(&cluster).build().unwrap();
    let key = unique_key("any");
    let lease = holder
        .acquire_with(&key, &AcquireOptions::new().watchdog(true))
        .await
        .unwrap();
    let token = lease.fencing_token().unwrap().get();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;

    let report = operator.force_unlock_any(&key).await.unwrap();
    assert_eq!(report.removed(), [lease.value()], "{report}");
    assert_eq!(report.deleted(), 3, "{report}");
    let counter = report.fence_counter().unwrap();
    assert!(counter > token, "{report}");
    assert!(gone_everywhere(&cluster, &key).await);
    assert!(report.to_string().contains(lease.value()));

    // The holder's watchdog finds its value gone at its next extension.
    let lost = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("the watchdog never signalled the loss");
    assert_eq!(lost, LostReason::ExtendFailed);
    assert!(gone_everywhere(&cluster, &key).await, "the keys came back");
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);

    // The next holder's token is larger than the old one's, and here (every master held
    // the old token or none) larger than the raised counter too.
    let next = operator.acquire(&key).await.unwrap();
    let next_token = next.fencing_token().unwrap().get();
    assert!(next_token > token && next_token > counter, "{next_token}");
    next.release().await.unwrap();
    drop(lease);
}

/// Without `--cfg redquorum_mutants` no bug can be planted.
#[cfg(not(redquorum_mutants))]
type Mutant = std::convert::Infallible;

/// Force-unlocks a live holder (built with `mutant`, if any), which then extends before
/// anyone else comes. Returns what went wrong, if anything: the extension succeeded, the
/// keys came back, or a contender could not get in at once.
async fn holder_extends_after_a_force_unlock(mutant: Option<Mutant>) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    match mutant {
        #[cfg(redquorum_mutants)]
        Some(m) => holder.plant(m),
        _ => {}
    }
    let other = client(&cluster).build().unwrap();
    let key = unique_key("extend_after_unlock");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    other.force_unlock_any(&key).await.unwrap();
    let mut found = Vec::new();
    if lease.extend().await.is_ok() {
        found.push("the force-unlocked holder extended its lease".to_owned());
    }
    if !gone_everywhere(&cluster, &key).await {
        found.push("its keys came back".to_owned());
    }
    match other.try_acquire(&key).await {
        Ok(next) => next.release().await.map(|_| ()).unwrap(),
        Err(e) => found.push(format!("the next acquire failed: {e}")),
    }
    drop(lease);
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.join("; "))
    }
}

#[tokio::test]
async fn a_force_unlocked_holder_cannot_extend_and_the_lock_stays_free() {
    holder_extends_after_a_force_unlock(None).await.unwrap();
}

// Checks I6 (only one's own keys are touched).
#[cfg(redquorum_mutants)]
#[tokio::test]
async fn the_extend_recreates_mutant_is_caught() {
    let caught = holder_extends_after_a_force_unlock(Some(Mutant::ExtendRecreates)).await;
    let found = caught.expect_err("the planted bug went unnoticed");
    assert!(found.contains("extended its lease"), "{found}");
}

#[tokio::test]
async fn with_lock_drops_the_work_of_a_force_unlocked_holder() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .watchdog(Watchdog::new().interval("200ms"))
        .build()
        .unwrap();
    let key = unique_key("with_lock");
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let started = Instant::now();
    let work = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move {
            client
                .with_lock(&key, &AcquireOptions::new(), |_lease| async move {
                    let _ = inside_tx.send(());
                    tokio::time::sleep(Duration::from_secs(30)).await;
                })
                .await
        }
    });
    inside_rx.await.unwrap();
    client.force_unlock_any(&key).await.unwrap();
    let err = work.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn force_unlock_needs_enough_masters_and_ignores_quarantine() {
    let mut cluster = Cluster::start(3).await.unwrap();
    // Restart quarantine on, over brand-new masters: they abstain from every lock
    // operation, but a force-unlock reaches them all the same.
    let client = Redlock::builder()
        .masters(cluster.urls())
        .ttl("5s")
        .timeouts(Timeouts::new().node("100ms").connect("300ms"))
        .build()
        .unwrap();
    let key = unique_key("quarantine");
    let err = client.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    for url in cluster.urls() {
        let _: () = raw(&url)
            .await
            .pset_ex(&key, "stuck", 10_000)
            .await
            .unwrap();
    }
    let held = client.inspect(&key).await.unwrap();
    assert_eq!(held.holder(), Some("stuck"), "{held}");

    // One master stopped: two answers are enough (N - quorum + 1).
    cluster.server_mut(2).pause().unwrap();
    let report = client.force_unlock_any(&key).await.unwrap();
    assert_eq!(report.deleted(), 2, "{report}");
    assert!(matches!(
        report.masters()[2].outcome(),
        MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Timeout
    ));
    // Two stopped: not enough; retryable, and the error says where it was deleted.
    for url in &cluster.urls()[..2] {
        let _: () = raw(url).await.pset_ex(&key, "stuck", 10_000).await.unwrap();
    }
    cluster.server_mut(1).pause().unwrap();
    let err = client.force_unlock(&key, "stuck").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable());
    assert!(err.masters()[0].outcome().is_granted(), "{err}");
    cluster.server_mut(1).resume().unwrap();
    cluster.server_mut(2).resume().unwrap();
}

#[tokio::test]
async fn another_kind_of_lock_is_not_force_unlocked() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("kind");
    for url in cluster.urls() {
        let _: () = raw(&url).await.hset(&key, "permits", 3).await.unwrap();
    }
    let err = client.force_unlock_any(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable());
    for url in cluster.urls() {
        let permits: Option<u32> = raw(&url).await.hget(&key, "permits").await.unwrap();
        assert_eq!(permits, Some(3));
    }
}

#[tokio::test]
async fn bad_names_and_values_are_refused_before_any_master_is_asked() {
    // No master listens here: a call that asked one would fail otherwise.
    let client = Redlock::builder()
        .quarantine(false)
        .masters(["redis://127.0.0.1:1"])
        .build()
        .unwrap();
    let long = "r".repeat(redquorum::limits::MAX_RESOURCE_LEN + 1);
    for name in ["", "redquorum:epoch", long.as_str()] {
        let err = client.inspect(name).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        let err = client.force_unlock(name, "v").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        let err = client.force_unlock_any(name).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        assert!(!err.is_retryable());
    }
    let err = client.force_unlock("r", "").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
}

/// Polls `future` up to `polls` times, 2 ms apart, and drops it unless it completed.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> bool {
    let mut future = pin!(future);
    for _ in 0..polls {
        if futures::poll!(future.as_mut()).is_ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

#[tokio::test]
async fn futures_dropped_midway_leave_nothing_inconsistent() {
    let cluster = Cluster::start(3).await.unwrap();
    let mut proxies = Vec::new();
    for server in cluster.servers() {
        let proxy = Proxy::for_server(server).await.unwrap();
        proxy.set_mode(Mode::delay(Duration::from_millis(8), Duration::ZERO));
        proxies.push(proxy);
    }
    let client = Redlock::builder()
        .quarantine(false)
        .masters(proxies.iter().map(Proxy::url))
        .ttl("30s")
        .timeouts(Timeouts::new().node("200ms"))
        .build()
        .unwrap();
    let key = unique_key("dropped");
    let mut dropped = 0;
    for k in 1.. {
        assert!(k < 200, "force_unlock_any never completed");
        let lease = client.acquire(&key).await.unwrap();
        wait_until(Duration::from_secs(2), "held everywhere", || {
            held_everywhere(&cluster, &key, lease.value())
        })
        .await;
        // An inspection dropped midway changes nothing.
        poll_then_drop(client.inspect(&key), k).await;
        assert!(held_everywhere(&cluster, &key, lease.value()).await);
        // A force-unlock dropped midway still reaches every master.
        let completed = poll_then_drop(client.force_unlock_any(&key), k).await;
        wait_until(Duration::from_secs(3), "unlocked everywhere", || {
            gone_everywhere(&cluster, &key)
        })
        .await;
        let err = lease.extend().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "after {k} polls");
        drop(lease);
        if completed {
            break;
        }
        dropped += 1;
    }
    assert!(dropped > 0, "no force-unlock was dropped midway");
    assert_eq!(client.shutdown().await, 0, "background work left running");
}
