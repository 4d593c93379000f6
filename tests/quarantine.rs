//! Restart quarantine against real masters: a master that may have lost its lock keys
//! does not vote until every lock it may have forgotten has expired.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind, MasterErrorKind, MasterOutcome, Redlock};
use support::*;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1500);

/// A client with quarantine on (the default) and `ttl_max` equal to `TTL`.
fn guarded(cluster: &Cluster) -> redquorum::Builder {
    client(cluster)
        .quarantine(true)
        .ttl(TTL)
        .timeouts(Timeouts::new().node("100ms"))
}

fn abstained(outcome: &MasterOutcome) -> bool {
    matches!(outcome, MasterOutcome::Abstained { .. })
}

/// Takes the lock on every master but `left_out`, where another client's short-lived key
/// is in the way, and waits until that key expired: the holder has a bare majority and
/// `left_out` is free.
async fn bare_majority(
    cluster: &Cluster,
    client: &Redlock,
    key: &str,
    left_out: usize,
) -> redquorum::Lease {
    let url = cluster.server(left_out).url();
    let _: () = raw(&url).await.pset_ex(key, "blocker", 300).await.unwrap();
    let lease = client.try_acquire(key).await.unwrap();
    assert!(!lease.masters()[left_out].outcome().is_granted());
    wait_until(Duration::from_secs(2), "the blocker expired", || {
        let (url, key) = (url.clone(), key.to_owned());
        async move { get(&url, &key).await.is_none() }
    })
    .await;
    lease
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test]
async fn fresh_masters_abstain_for_one_window() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = guarded(&cluster)
        .ttl("500ms")
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    let key = unique_key("fresh");
    let first_contact = Instant::now();
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    assert!(err.is_retryable(), "{err}");
    let retry_after = err.retry_after().expect("abstainers say when they vote");
    assert!(
        retry_after <= Duration::from_millis(510),
        "{retry_after:?} {err}"
    );
    let abstaining = err
        .masters()
        .iter()
        .filter(|r| abstained(r.outcome()))
        .count();
    assert!(abstaining >= 2, "{err}");
    assert!(err.to_string().contains("abstaining"), "{err}");
    settle(&client).await;
    // ttl_max (500 ms) plus 1 % plus 2 ms, from the first contact at the earliest.
    assert!(first_contact.elapsed() >= Duration::from_millis(507));
    let lease = client.acquire(&key).await.unwrap();
    // A quorum votes now (the last master may still be a moment from its window's end).
    assert!(
        lease
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2
    );
    lease.release().await.unwrap();
}

/// docs/testing.md §4, S5: the holder has a bare majority {0, 1}; master 0 restarts empty;
/// a contender then reaches {0, 2}. Without quarantine that is a second grant while the
/// first lease is valid; with it, master 0 abstains.
async fn immediate_restart(quarantine: bool) -> (bool, Duration) {
    let mut cluster = Cluster::start(3).await.unwrap();
    let holder = guarded(&cluster).quarantine(quarantine).build().unwrap();
    let contender = guarded(&cluster).quarantine(quarantine).build().unwrap();
    settle(&holder).await;
    settle(&contender).await;
    let key = unique_key("s5");
    let lease = bare_majority(&cluster, &holder, &key, 2).await;
    cluster.server_mut(0).restart(false).await.unwrap();
    let result = wait_for_reconnect(&contender, &cluster.servers()[0].url(), &key).await;
    let remaining = lease.remaining();
    let granted = match result {
        Ok(second) => {
            drop(second);
            true
        }
        Err(err) => {
            // Refused, with the restarted master abstaining. Under load another master's
            // answer may be late (pending) or itself an abstention, which makes the error
            // NotEnoughVoters instead of NoQuorum: refused all the same.
            assert!(
                matches!(err.kind(), ErrorKind::NoQuorum | ErrorKind::NotEnoughVoters),
                "{err}"
            );
            assert!(abstained(err.masters()[0].outcome()), "{err}");
            false
        }
    };
    (granted, remaining)
}

/// One acquire attempt per connection state of master 0: the first may still find the
/// old connection broken; retry until master 0 answered (granted or abstained).
///
/// An attempt whose request reached master 0 but whose answer was lost can leave its key
/// there when the cleanup's request is lost too (the key would then refuse every later
/// attempt until its TTL ends). Master 0 restarted with none of this key, so whatever it
/// holds after a lost answer is one of these attempts' own: delete it before the next.
async fn wait_for_reconnect(
    client: &Redlock,
    master0: &str,
    key: &str,
) -> Result<redquorum::Lease, redquorum::Error> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let result = client.try_acquire(key).await;
        let answered = match &result {
            Ok(lease) => lease.masters()[0].outcome().is_granted(),
            Err(err) => {
                let o = err.masters()[0].outcome();
                abstained(o) || o.is_granted()
            }
        };
        if answered || Instant::now() > give_up {
            return result;
        }
        // Release this attempt's keys, and let a failed attempt's background cleanup
        // finish, before the next attempt: they would hold the lock against it.
        if let Ok(lease) = result {
            let _ = lease.release().await;
        }
        assert_eq!(client.shutdown().await, 0, "a background release hung");
        let _: i64 = raw(master0).await.del(key).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn without_quarantine_an_immediate_restart_grants_a_held_lock_twice() {
    let (granted, remaining) = immediate_restart(false).await;
    assert!(
        granted,
        "the unsafe configuration did not reach the bad interleaving"
    );
    assert!(
        remaining > Duration::ZERO,
        "the first lease had already expired"
    );
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test]
async fn with_quarantine_an_immediate_restart_abstains() {
    let (granted, remaining) = immediate_restart(true).await;
    assert!(
        !granted,
        "a restarted master voted while the first lease was valid"
    );
    assert!(remaining > Duration::ZERO);
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test]
async fn flushall_starts_a_new_quarantine() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = guarded(&cluster).build().unwrap();
    let contender = guarded(&cluster).build().unwrap();
    settle(&holder).await;
    settle(&contender).await;
    let key = unique_key("s9");
    let lease = bare_majority(&cluster, &holder, &key, 2).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut raw(&cluster.server(0).url()).await)
        .await
        .unwrap();
    let err = contender.try_acquire(&key).await.unwrap_err();
    assert!(abstained(err.masters()[0].outcome()), "{err}");
    assert!(lease.remaining() > Duration::ZERO);
    lease.release().await.unwrap();
    // After one window master 0 votes again.
    settle(&contender).await;
}

#[tokio::test]
async fn a_durable_master_votes_right_after_a_restart() {
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let mut cluster = Cluster::start_with(3, &options).await.unwrap();
    // Epochs that started long ago (as on masters in service for a while).
    for s in cluster.servers() {
        seed_old_epoch(&s.url()).await;
    }
    let client = guarded(&cluster).ttl("30s").build().unwrap();
    let key = unique_key("durable");
    // Durable and an old epoch: no quarantine even though the processes are brand new.
    let lease = client.try_acquire(&key).await.unwrap();
    lease.release().await.unwrap();
    cluster.server_mut(0).restart(true).await.unwrap();
    let lease = wait_for_reconnect(&client, &cluster.servers()[0].url(), &key)
        .await
        .unwrap();
    assert!(
        lease.masters()[0].outcome().is_granted(),
        "{:?}",
        lease.masters()
    );
    lease.release().await.unwrap();
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test]
async fn a_master_that_can_evict_lock_keys_never_votes() {
    let mut cluster = Cluster::start(2).await.unwrap();
    let evicting = Server::start(
        &ServerOptions::new()
            .arg("--maxmemory")
            .arg("64mb")
            .arg("--maxmemory-policy")
            .arg("allkeys-lru"),
    )
    .await
    .unwrap();
    let mut urls = cluster.urls();
    urls.push(evicting.url());
    for url in &urls {
        seed_old_epoch(url).await;
    }
    let client = Redlock::builder()
        .masters(&urls)
        .ttl("1s")
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    // Old epochs, but brand-new processes without durability: wait one window first.
    settle(&client).await;
    // With one good master down, the evicting master's vote would decide: it never counts.
    cluster.server_mut(1).kill().unwrap();
    let err = client.acquire(&unique_key("evicting")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    match err.masters()[2].outcome() {
        MasterOutcome::Failed(e) => assert_eq!(e.kind(), MasterErrorKind::Misconfigured, "{e}"),
        other => panic!("the evicting master answered {other}"),
    }
    assert!(err.to_string().contains("noeviction"), "{err}");
}

/// docs/testing.md §4, S17: the holder extends while a member of its quorum restarted
/// empty; the extension counts only voting masters, and fails once too few vote.
// Checks I7 (no more validity than the masters hold).
#[tokio::test]
async fn extension_counts_only_voting_masters() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = guarded(&cluster).build().unwrap();
    settle(&client).await;
    let key = unique_key("s17");
    let lease = client.try_acquire(&key).await.unwrap();
    cluster.server_mut(0).restart(false).await.unwrap();
    wait_until(
        Duration::from_secs(3),
        "master 0 reconnected and abstains",
        || {
            let lease = &lease;
            async move {
                match lease.extend().await {
                    Ok(report) => abstained(report.masters()[0].outcome()),
                    Err(e) => panic!("the extension failed with 2 of 3 voting: {e}"),
                }
            }
        },
    )
    .await;
    cluster.server_mut(1).restart(false).await.unwrap();
    let give_up = Instant::now() + Duration::from_secs(3);
    let err = loop {
        match lease.extend().await {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < give_up, "extended with one voting master"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(lease.is_lost());
}

#[tokio::test]
async fn ttls_above_ttl_max_are_rejected() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = guarded(&cluster).ttl("1s").ttl_max("2s").build().unwrap();
    let err = client
        .acquire_with("k", &AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
    assert!(err.to_string().contains("ttl_max"), "{err}");
    let built = Redlock::builder()
        .master(cluster.server(0).url())
        .ttl("3s")
        .ttl_max("2s")
        .build();
    assert!(built.unwrap_err().to_string().contains("exceeds ttl_max"));
}
