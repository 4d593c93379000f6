//! Extend and release against real masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::Timeouts;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{ErrorKind, MasterOutcome};
use support::*;

#[tokio::test]
async fn extend_keeps_the_lock_past_its_ttl() {
    let cluster = Cluster::start(3).await.unwrap();
    let ttl = Duration::from_millis(600);
    let holder = client(&cluster)
        .ttl(ttl)
        .timeouts(Timeouts::new().node("150ms"))
        .build()
        .unwrap();
    let other = client(&cluster)
        .ttl(ttl)
        .timeouts(Timeouts::new().node("150ms"))
        .build()
        .unwrap();
    let key = unique_key("extend");
    let lease = holder.acquire(&key).await.unwrap();
    let first_deadline = lease.deadline();

    // Extend twelve times, each a third of the TTL after the previous one: four TTLs in
    // all, however long the rounds take.
    for _ in 0..12 {
        tokio::time::sleep(ttl / 3).await;
        let report = lease.extend().await.unwrap();
        assert_eq!(report.deadline(), lease.deadline());
        assert!(
            report
                .masters()
                .iter()
                .filter(|r| r.outcome().is_granted())
                .count()
                >= 2
        );
        let err = other.try_acquire(&key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    }
    assert!(
        lease.deadline() > first_deadline + ttl * 3,
        "twelve extensions moved the deadline by less than three TTLs"
    );
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
}

#[tokio::test]
async fn extend_after_expiry_is_lost_and_never_revives_the_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .ttl("200ms")
        .timeouts(Timeouts::new().node("50ms"))
        .build()
        .unwrap();
    let key = unique_key("expired");
    let lease = client.acquire(&key).await.unwrap();
    tokio::time::sleep_until(lease.deadline()).await;
    assert!(lease.is_expired());
    assert_eq!(lease.remaining(), Duration::ZERO);
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("never extended"), "{err}");
    assert!(lease.is_lost());
    // The masters were not asked: the keys expire by themselves.
    wait_until(Duration::from_secs(2), "keys expired", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
    // A lost lease stays lost.
    assert_eq!(
        lease.extend().await.unwrap_err().kind(),
        ErrorKind::LeaseLost
    );
    let report = lease.release().await.unwrap();
    assert!(report.overrun().is_some());
}

// Checks I6 (only one's own keys are touched).
#[tokio::test]
async fn extend_fails_as_lost_when_another_client_took_over() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("1s").build().unwrap();
    let key = unique_key("taken");
    let lease = client.acquire(&key).await.unwrap();
    // Another client's keys replace ours on every master (as after an expiry).
    for s in cluster.servers() {
        let _: () = raw(&s.url()).await.set_ex(&key, "other", 30).await.unwrap();
    }
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(err.masters().iter().all(|r| !r.outcome().is_granted()));
    assert!(lease.is_lost());
    for s in cluster.servers() {
        assert_eq!(get(&s.url(), &key).await.as_deref(), Some("other"));
    }
}

// Checks I6 (only one's own keys are touched).
#[tokio::test]
async fn extend_never_sets_again_a_key_a_restarted_master_lost() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("5s").build().unwrap();
    let key = unique_key("restore");
    let lease = client.acquire(&key).await.unwrap();
    // Every master holds the key before one of them loses it.
    wait_until(Duration::from_secs(2), "the key on every master", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    cluster.server_mut(0).restart(false).await.unwrap();
    let url = cluster.server(0).url();
    assert_eq!(get(&url, &key).await, None);
    // The quorum of the other two carries the extensions; the restarted master is never
    // given the key again (a missing key may have been force-unlocked).
    for _ in 0..3 {
        lease.extend().await.unwrap();
    }
    assert_eq!(get(&url, &key).await, None);
    for i in 1..3 {
        let held = get(&cluster.server(i).url(), &key).await;
        assert_eq!(held.as_deref(), Some(lease.value()));
    }
    lease.release().await.unwrap();
}

// Checks I6 (only one's own keys are touched).
#[tokio::test]
async fn release_after_expiry_never_deletes_the_next_holders_lock() {
    let cluster = Cluster::start(3).await.unwrap();
    let a = client(&cluster)
        .ttl("200ms")
        .timeouts(Timeouts::new().node("50ms"))
        .build()
        .unwrap();
    let b = client(&cluster).ttl("10s").build().unwrap();
    let key = unique_key("overrun");
    let stale = a.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "a's keys expired", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
    let fresh = b.acquire(&key).await.unwrap();
    // The acquire returned at quorum; let its last write land so that every master
    // holds the next holder's key when the stale release arrives.
    wait_until(Duration::from_secs(2), "b's keys on every master", || {
        held_everywhere(&cluster, &key, fresh.value())
    })
    .await;

    let report = stale.release().await.unwrap();
    let overrun = report.overrun().expect("an overrun is reported");
    assert!(overrun > Duration::ZERO);
    assert_eq!(report.released(), 0);
    assert!(
        only_others(report.masters().iter().map(|r| r.outcome())),
        "{report:?}"
    );
    for s in cluster.servers() {
        assert_eq!(get(&s.url(), &key).await.as_deref(), Some(fresh.value()));
    }
    let err = a.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended);
    fresh.release().await.unwrap();
}

/// A name that another application overwrote with a key of another type holds no value
/// of ours: the release finds another value there (not a failure: nothing of ours can
/// hold a quorum), the extension finds the lease lost, and a force-unlock of our value
/// leaves it alone. None reports Redis's own `WRONGTYPE` text, or a retryable error.
#[tokio::test]
async fn a_name_overwritten_with_another_type_holds_another_value() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("overwritten");
    let overwrite = async || {
        for s in cluster.servers() {
            let mut conn = raw(&s.url()).await;
            let _: () = conn.del(&key).await.unwrap();
            let _: () = conn.hset(&key, "field", "value").await.unwrap();
        }
    };
    let lease = client.acquire(&key).await.unwrap();
    let value = lease.value().to_owned();
    // The acquire returned at quorum: its last write must land before the overwrite.
    wait_until(Duration::from_secs(2), "the lock on every master", || {
        held_everywhere(&cluster, &key, &value)
    })
    .await;
    overwrite().await;
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(
        !err.is_retryable() && !err.to_string().contains("WRONGTYPE"),
        "{err}"
    );
    assert!(err.to_string().contains("held by another"), "{err}");
    let report = lease.release().await.unwrap();
    assert_eq!(report.released(), 0);
    assert!(
        only_others(report.masters().iter().map(|r| r.outcome())),
        "{report:?}"
    );
    let report = client.force_unlock(&key, &value).await.unwrap();
    assert!(
        report
            .masters()
            .iter()
            .all(|r| matches!(r.outcome(), MasterOutcome::HeldByOther)),
        "{report:?}"
    );
    for s in cluster.servers() {
        let field: Option<String> = raw(&s.url()).await.hget(&key, "field").await.unwrap();
        assert_eq!(field.as_deref(), Some("value"));
    }
}

#[tokio::test]
async fn release_with_a_majority_down_reports_no_quorum() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("release_down");
    let lease = client.acquire(&key).await.unwrap();
    cluster.server_mut(0).kill().unwrap();
    cluster.server_mut(1).kill().unwrap();
    let err = lease.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.to_string().contains("until its TTL"), "{err}");
}

/// A master that had not answered when the release's failure was certain is not counted
/// as unreachable: it may have released.
#[tokio::test]
async fn a_failed_release_tells_unreachable_masters_from_unanswered_ones() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("release_unanswered");
    let lease = client.acquire(&key).await.unwrap();
    cluster.server_mut(1).kill().unwrap();
    cluster.server_mut(2).kill().unwrap();
    // Master 0 holds every command for a while: its answer comes after the two failures.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .query_async(&mut raw(&cluster.server(0).url()).await)
        .await
        .unwrap();
    let err = lease.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("2 of 3 masters could not be reached (1 more had not answered yet)"),
        "{shown}"
    );
    assert!(
        matches!(err.masters()[0].outcome(), MasterOutcome::Pending),
        "{shown}"
    );
    // It did release, once its pause ended.
    wait_until(Duration::from_secs(3), "released on master 0", || async {
        let held: bool = raw(&cluster.server(0).url())
            .await
            .exists(&key)
            .await
            // Paused still: not yet.
            .unwrap_or(true);
        !held
    })
    .await;
}

#[tokio::test]
async fn release_with_a_minority_down_succeeds() {
    let mut cluster = Cluster::start(5).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("release_minority");
    let lease = client.acquire(&key).await.unwrap();
    cluster.server_mut(4).kill().unwrap();
    cluster.server_mut(2).pause().unwrap();
    let report = lease.release().await.unwrap();
    assert!(report.overrun().is_none());
    assert!(report.released() >= 3);
    cluster.server_mut(2).resume().unwrap();
    wait_until(Duration::from_secs(3), "released everywhere", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

/// Whether every master answered that another value holds the key, or had not answered.
fn only_others<'a>(mut outcomes: impl Iterator<Item = &'a MasterOutcome>) -> bool {
    outcomes.all(|o| matches!(o, MasterOutcome::HeldByOther | MasterOutcome::Pending))
}
