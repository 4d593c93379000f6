//! Acquire, release and mutual exclusion against real masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Waiting};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind, MasterErrorKind, MasterOutcome, Redlock};
use support::*;

/// Many clients, each with its own connections, contend for one resource; each critical
/// section does a read-modify-write of a counter on a separate server that is not a
/// master. Any overlap would lose an increment.
async fn contend(n: usize) {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 15;
    let cluster = Cluster::start(n).await.unwrap();
    let checker = Server::start(&ServerOptions::new()).await.unwrap();
    let resource = unique_key("contend");
    let counter_key = format!("{resource}:counter");
    let successes = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(&cluster)
            .retry(Retry::new().attempts(200))
            .build()
            .unwrap();
        let checker_url = checker.url();
        let (resource, counter_key) = (resource.clone(), counter_key.clone());
        let (successes, inside) = (Arc::clone(&successes), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            let mut store = raw(&checker_url).await;
            for _ in 0..ROUNDS {
                let Ok(lease) = client.acquire(&resource).await else {
                    continue;
                };
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                let v: Option<u64> = store.get(&counter_key).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = store.set(&counter_key, v.unwrap_or(0) + 1).await.unwrap();
                inside.fetch_sub(1, Ordering::SeqCst);
                successes.fetch_add(1, Ordering::SeqCst);
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let done = successes.load(Ordering::SeqCst);
    let counted: u64 = raw(&checker.url()).await.get(&counter_key).await.unwrap();
    assert!(done > 0, "no critical section completed");
    assert_eq!(
        counted, done as u64,
        "lost updates: critical sections overlapped"
    );
    // A waiter's registration leaves in the background once it is served: a key handed
    // to it meanwhile is passed on (to nobody) then.
    wait_until(Duration::from_secs(2), "the lock is free", || {
        gone_everywhere(&cluster, &resource)
    })
    .await;
}

// Checks I4 (mutual exclusion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_one_master() {
    contend(1).await;
}

// Checks I4 (mutual exclusion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_three_masters() {
    contend(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_four_masters() {
    contend(4).await;
}

// Checks I4 (mutual exclusion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_five_masters() {
    contend(5).await;
}

#[tokio::test]
async fn second_client_is_refused_while_held_and_gets_it_after_release() {
    let cluster = Cluster::start(3).await.unwrap();
    let a = client(&cluster).build().unwrap();
    let b = client(&cluster).build().unwrap();
    let key = unique_key("held");

    let lease = a.acquire(&key).await.unwrap();
    assert_eq!(lease.resource(), key);
    assert!(lease.remaining() > Duration::from_secs(4));
    let err = b.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("held by another client"), "{err}");
    assert_eq!(err.attempts(), 1);
    assert!(
        err.masters()
            .iter()
            .any(|r| matches!(r.outcome(), MasterOutcome::HeldByOther))
    );

    let report = lease.release().await.unwrap();
    assert!(report.overrun().is_none());
    assert!(report.released() >= 2, "{report:?}");
    let lease = b.try_acquire(&key).await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn retries_are_bounded_by_attempts_and_by_the_wait_budget() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("bounded");
    let _lease = holder.acquire(&key).await.unwrap();

    let waiter = client(&cluster)
        .retry(Retry::new().attempts(4))
        .build()
        .unwrap();
    let err = waiter.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended);
    assert_eq!(err.attempts(), 4);

    let err = waiter
        .acquire_with(
            &key,
            &AcquireOptions::new()
                .attempts(10_000)
                .wait_timeout(Duration::from_millis(150)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
    assert!(err.attempts() >= 1 && err.attempts() < 10_000);
    assert!(err.to_string().contains("wait budget"), "{err}");
}

/// Asserts that `err` ends a wait that no master ever refused: `NoQuorum`, retryable,
/// after several attempts, with the failure of every master that answered in `masters()`
/// (enough to rule out a quorum; the round decides without waiting for the rest, which
/// stay pending).
fn assert_outage(err: &redquorum::Error, n: usize) {
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert!(err.attempts() > 1, "the call did not wait: {err}");
    assert_eq!(err.masters().len(), n, "{err}");
    let mut failed = 0;
    for report in err.masters() {
        match report.outcome() {
            MasterOutcome::Failed(_) => failed += 1,
            MasterOutcome::Pending => {}
            other => panic!("{}: {other}: {err}", report.master()),
        }
    }
    assert!(failed > n - (n / 2 + 1), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("wait budget used up") && shown.contains("no master ever refused"),
        "{shown}"
    );
}

/// A wait that no master ever refused is an outage, not contention: with every master
/// down (killed servers, closed ports) the wait budget runs out with `NoQuorum` and each
/// master's failure, whatever the lock kind; a wait for a held lock still ends with
/// `WaitTimeout`.
#[tokio::test]
async fn a_wait_with_every_master_down_ends_in_no_quorum_not_wait_timeout() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let budget = AcquireOptions::new().wait_timeout("300ms");
    let holder = client(&cluster).build().unwrap();
    let waiter = client(&cluster).build().unwrap();
    let key = unique_key("held");
    let lease = holder.acquire(&key).await.unwrap();
    let err = waiter.acquire_with(&key, &budget).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
    assert!(err.is_retryable(), "{err}");
    lease.release().await.unwrap();

    for server in cluster.servers_mut() {
        server.kill().unwrap();
    }
    // A client that never reached them, and one whose connections broke.
    for down in [client(&cluster).build().unwrap(), waiter] {
        let err = down
            .acquire_with(&unique_key("down"), &budget)
            .await
            .unwrap_err();
        assert_outage(&err, 3);
        let semaphore = down.semaphore(&unique_key("down-sem"), 2).unwrap();
        let err = semaphore.acquire_with(1, &budget).await.unwrap_err();
        assert_outage(&err, 3);
        let rwlock = down.rwlock(&unique_key("down-rw"));
        let err = rwlock.write_with(&budget).await.unwrap_err();
        assert_outage(&err, 3);
        let many = [unique_key("down-a"), unique_key("down-b")];
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let err = down.acquire_many_with(&many, &budget).await.unwrap_err();
        assert_outage(&err, 3);
    }
}

/// A wait that found the lock held, and whose masters then all went down, ends as the
/// outage its last rounds met, not as contention: queued for a hand-off (its
/// registration's refreshes fail) or retrying on its own. The holder's lock (5 s) outlives
/// the budget (1.5 s): with the masters up, the wait would have ended in `WaitTimeout`.
#[tokio::test]
async fn a_wait_whose_masters_go_down_after_a_refusal_ends_in_no_quorum() {
    for handoff in [true, false] {
        let mut cluster = Cluster::start(3).await.unwrap();
        let holder = client(&cluster).build().unwrap();
        let waiter = client(&cluster)
            .waiting(Waiting::new().handoff(handoff))
            .build()
            .unwrap();
        let key = unique_key("held-then-down");
        let _lease = holder.acquire(&key).await.unwrap();
        let waiting = tokio::spawn({
            let (waiter, key) = (waiter.clone(), key.clone());
            async move {
                let budget = AcquireOptions::new().wait_timeout("1500ms");
                waiter.acquire_with(&key, &budget).await
            }
        });
        // Refused once: queued on every master, or subscribed to the release notices.
        if handoff {
            wait_registered(&cluster, &key, 3).await;
        } else {
            let channel = format!("redquorum:released:{key}");
            wait_until(Duration::from_secs(5), "the waiter subscribed", || {
                let (url, channel) = (cluster.server(0).url(), channel.clone());
                async move {
                    let (_, n): (String, i64) = redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg(&channel)
                        .query_async(&mut raw(&url).await)
                        .await
                        .unwrap();
                    n > 0
                }
            })
            .await;
        }
        for server in cluster.servers_mut() {
            server.kill().unwrap();
        }
        let err = waiting.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoQuorum, "handoff {handoff}: {err}");
        assert!(err.is_retryable(), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains("wait budget used up")
                && shown.contains("a master refused the lock during the wait"),
            "handoff {handoff}: {shown}"
        );
        assert!(
            err.masters()
                .iter()
                .any(|r| matches!(r.outcome(), MasterOutcome::Failed(_))),
            "{err}"
        );
    }
}

#[tokio::test]
async fn quorum_survives_a_killed_minority() {
    let mut cluster = Cluster::start(5).await.unwrap();
    cluster.server_mut(0).kill().unwrap();
    cluster.server_mut(3).kill().unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("minority_killed");
    let lease = client.acquire(&key).await.unwrap();
    let failed = lease
        .masters()
        .iter()
        .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(_)))
        .count();
    assert!(failed <= 2);
    lease.release().await.unwrap();

    // Known-down masters now fail at once, before any request is sent.
    let lease = client.acquire(&key).await.unwrap();
    for i in [0, 3] {
        match lease.masters()[i].outcome() {
            MasterOutcome::Failed(e) => {
                assert!(
                    matches!(e.kind(), MasterErrorKind::Down | MasterErrorKind::Refused),
                    "{e}"
                )
            }
            MasterOutcome::Pending => {}
            other => panic!("killed master {i} answered {other}"),
        }
    }
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_paused_minority_adds_no_latency() {
    let mut cluster = Cluster::start(3).await.unwrap();
    // A node timeout far above a loopback round trip: waiting for the paused master
    // would show as an acquire that takes the whole timeout.
    let node_timeout = Duration::from_secs(3);
    let client = client(&cluster)
        .timeouts(Timeouts::new().node(node_timeout))
        .ttl("10s")
        .build()
        .unwrap();
    let key = unique_key("paused_minority");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect all

    // Each call returns without the paused master's answer (it is still pending, not
    // timed out), so sooner than its node timeout.
    cluster.server_mut(2).pause().unwrap();
    let start = tokio::time::Instant::now();
    let lease = client.acquire(&key).await.unwrap();
    let took = start.elapsed();
    assert!(
        matches!(lease.masters()[2].outcome(), MasterOutcome::Pending),
        "{}",
        lease.masters()[2]
    );
    assert!(
        took < node_timeout,
        "acquire waited for the paused master ({took:?})"
    );
    let start = tokio::time::Instant::now();
    let report = lease.release().await.unwrap();
    let took = start.elapsed();
    assert!(
        matches!(report.masters()[2].outcome(), MasterOutcome::Pending),
        "{}",
        report.masters()[2]
    );
    assert!(
        took < node_timeout,
        "release waited for the paused master ({took:?})"
    );

    // After resuming, the queued SET and release both run on it, in order: no key stays.
    cluster.server_mut(2).resume().unwrap();
    let url = cluster.server(2).url();
    wait_until(
        Duration::from_secs(5),
        "the paused master processed its queue",
        || {
            let (url, key) = (url.clone(), key.clone());
            async move { get(&url, &key).await.is_none() }
        },
    )
    .await;
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn a_killed_majority_fails_cleanly_and_leaves_no_keys() {
    let mut cluster = Cluster::start(3).await.unwrap();
    cluster.server_mut(0).kill().unwrap();
    cluster.server_mut(1).kill().unwrap();
    let client = client(&cluster)
        .retry(Retry::new().attempts(3))
        .build()
        .unwrap();
    let key = unique_key("majority_killed");
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable());
    assert_eq!(err.attempts(), 3);
    let failed: Vec<_> = err
        .masters()
        .iter()
        .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(_)))
        .collect();
    assert!(!failed.is_empty(), "{err}");
    assert!(err.to_string().contains("no quorum"), "{err}");
    wait_until(
        Duration::from_secs(2),
        "the live master was cleaned up",
        || gone_everywhere(&cluster, &key),
    )
    .await;
}

// Checks I20 (calls to one master are written in the order made).
#[tokio::test]
async fn a_paused_majority_fails_and_its_queued_sets_are_released_after_resume() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .timeouts(Timeouts::new().node("100ms"))
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    let key = unique_key("majority_paused");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect all
    cluster.server_mut(0).pause().unwrap();
    cluster.server_mut(1).pause().unwrap();
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    cluster.server_mut(0).resume().unwrap();
    cluster.server_mut(1).resume().unwrap();
    wait_until(Duration::from_secs(5), "no key left after resume", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn a_restarted_master_is_reconnected_in_the_background() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("reconnect");
    client.acquire(&key).await.unwrap().release().await.unwrap();
    cluster.server_mut(1).kill().unwrap();
    // Notice the broken connection.
    let lease = client.acquire(&key).await.unwrap();
    lease.release().await.unwrap();
    cluster.server_mut(1).restart(false).await.unwrap();
    wait_until(Duration::from_secs(5), "master 1 grants again", || {
        let client = client.clone();
        let key = key.clone();
        async move {
            let lease = client.acquire(&key).await.unwrap();
            let back = lease.masters()[1].outcome().is_granted();
            lease.release().await.unwrap();
            back
        }
    })
    .await;
}

// Checks I3 (every master's copy of the key outlives the deadline).
#[tokio::test]
async fn validity_accounts_for_elapsed_time() {
    let mut cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster)
        .ttl("2s")
        .timeouts(Timeouts::new().node("1s"))
        .build()
        .unwrap();
    let key = unique_key("elapsed");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect
    let fresh = client.acquire(&key).await.unwrap();
    let fresh_remaining = fresh.remaining();
    fresh.release().await.unwrap();

    // Hold the master's answer back for a while.
    let delay = Duration::from_millis(300);
    cluster.server_mut(0).pause().unwrap();
    let start = tokio::time::Instant::now();
    let resume = async {
        tokio::time::sleep(delay).await;
        cluster.server_mut(0).resume().unwrap();
        tokio::time::Instant::now()
    };
    let acquire = async {
        let lease = client.acquire(&key).await;
        (lease, tokio::time::Instant::now())
    };
    let ((lease, acquired_at), resumed_at) = tokio::join!(acquire, resume);
    let lease = lease.unwrap();
    // The reply was held back: the acquire returned only after the master resumed.
    assert!(
        acquired_at >= resumed_at,
        "acquired {:?} before the master resumed",
        resumed_at - acquired_at
    );
    // deadline = t0 + ttl - drift with t0 read before the SET was sent, so the time spent
    // waiting for the reply is deducted; measured from the reply it would be 300 ms later.
    let drift = Duration::from_millis(2000 / 100 + 2);
    let validity = Duration::from_secs(2) - drift;
    assert!(
        lease.deadline() < start + delay / 2 + validity,
        "deadline not measured from before the request"
    );
    assert!(lease.remaining() < validity - delay / 2);
    assert!(lease.remaining() < fresh_remaining);
    lease.release().await.unwrap();
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn validity_used_up_by_a_slow_quorum_is_released() {
    let mut cluster = Cluster::start(1).await.unwrap();
    // Never connected yet: the first round includes connecting, bounded by the connect
    // timeout, which may exceed the TTL.
    let client = client(&cluster)
        .ttl("300ms")
        .timeouts(Timeouts::new().node("50ms").connect("3s"))
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    let key = unique_key("exhausted");
    cluster.server_mut(0).pause().unwrap();
    let resume = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        cluster.server_mut(0).resume().unwrap();
    };
    let (result, ()) = tokio::join!(client.acquire(&key), resume);
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ValidityExhausted, "{err}");
    assert!(err.to_string().contains("validity"), "{err}");
    wait_until(
        Duration::from_secs(2),
        "the late grant was released",
        || gone_everywhere(&cluster, &key),
    )
    .await;
}

#[tokio::test]
async fn dropping_a_lease_releases_it_in_the_background() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("drop");
    let lease = client.acquire(&key).await.unwrap();
    assert!(!gone_everywhere(&cluster, &key).await);
    drop(lease);
    wait_until(Duration::from_secs(2), "dropped lease released", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn cancelling_acquire_mid_round_leaves_no_key() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .timeouts(Timeouts::new().node("4s"))
        .ttl("20s")
        .build()
        .unwrap();
    let key = unique_key("cancel");
    client.acquire(&key).await.unwrap().release().await.unwrap(); // connect all
    cluster.server_mut(1).pause().unwrap();
    cluster.server_mut(2).pause().unwrap();

    let task = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move { client.acquire(&key).await }
    });
    let live = cluster.server(0).url();
    wait_until(
        Duration::from_secs(2),
        "the live master got the SET",
        || {
            let (live, key) = (live.clone(), key.clone());
            async move { get(&live, &key).await.is_some() }
        },
    )
    .await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_until(
        Duration::from_secs(2),
        "the cancelled attempt was released",
        || {
            let (live, key) = (live.clone(), key.clone());
            async move { get(&live, &key).await.is_none() }
        },
    )
    .await;
    cluster.server_mut(1).resume().unwrap();
    cluster.server_mut(2).resume().unwrap();
    wait_until(
        Duration::from_secs(5),
        "no key after the paused masters resumed",
        || gone_everywhere(&cluster, &key),
    )
    .await;
}

/// redsync's mask test on real masters: every assignment of {free, held by another,
/// paused} to 3 and 4 masters; acquisition succeeds exactly when a quorum is free, and a
/// failed attempt leaves no key of ours anywhere.
#[tokio::test]
async fn every_mask_of_free_held_and_paused_masters() {
    for n in [3usize, 4] {
        let mut cluster = Cluster::start(n).await.unwrap();
        let client = client(&cluster)
            .timeouts(Timeouts::new().node("60ms"))
            .retry(Retry::new().attempts(1))
            .build()
            .unwrap();
        client
            .acquire("warmup")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let mut conns = Vec::new();
        for s in cluster.servers() {
            conns.push(raw(&s.url()).await);
        }
        for mask in 0..3usize.pow(n as u32) {
            let key = unique_key("mask");
            let states: Vec<usize> = (0..n).map(|i| (mask / 3usize.pow(i as u32)) % 3).collect();
            for (i, state) in states.iter().enumerate() {
                if *state == 1 {
                    let _: () = conns[i].set_ex(&key, "someone-else", 30).await.unwrap();
                }
            }
            for (i, state) in states.iter().enumerate() {
                if *state == 2 {
                    cluster.server_mut(i).pause().unwrap();
                }
            }
            let free = states.iter().filter(|s| **s == 0).count();
            let result = client.acquire(&key).await;
            for (i, state) in states.iter().enumerate() {
                if *state == 2 {
                    cluster.server_mut(i).resume().unwrap();
                }
            }
            match result {
                Ok(lease) => {
                    assert!(
                        free > n / 2,
                        "n={n} states={states:?}: acquired without quorum"
                    );
                    lease.release().await.unwrap();
                }
                Err(err) => {
                    assert!(free <= n / 2, "n={n} states={states:?}: {err}");
                    let held = states.iter().filter(|s| **s == 1).count();
                    let want = if held > n - (n / 2 + 1) {
                        ErrorKind::Contended
                    } else {
                        ErrorKind::NoQuorum
                    };
                    assert_eq!(err.kind(), want, "n={n} states={states:?}: {err}");
                }
            }
            // Ours is gone everywhere; the other client's keys are untouched.
            for (i, state) in states.iter().enumerate() {
                let url = cluster.server(i).url();
                let key = key.clone();
                let want = (*state == 1).then(|| "someone-else".to_owned());
                wait_until(Duration::from_secs(3), "masters cleaned up", move || {
                    let (url, key, want) = (url.clone(), key.clone(), want.clone());
                    async move { get(&url, &key).await == want }
                })
                .await;
            }
        }
        drop(client);
        drop(cluster);
    }
}

#[tokio::test]
async fn key_prefix_is_applied() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).key_prefix("locks:").build().unwrap();
    let key = unique_key("prefix");
    let lease = client.acquire(&key).await.unwrap();
    assert_eq!(lease.key(), format!("locks:{key}"));
    assert_eq!(
        get(&cluster.server(0).url(), &format!("locks:{key}"))
            .await
            .as_deref(),
        Some(lease.value())
    );
    // "<client id>.<128 random bits as hex>": the client id names its holder record.
    let (tag, random) = lease.value().rsplit_once('.').unwrap();
    assert_eq!(tag.len(), 36, "a UUID: {tag}");
    assert_eq!(random.len(), 32, "128 random bits as hex: {random}");
    assert!(random.bytes().all(|b| b.is_ascii_hexdigit()), "{random}");
    lease.release().await.unwrap();
}

/// An uncontended acquire writes its lock key and nothing else per lock: who holds it is
/// the client's holder record, written by the first acquire and kept, and a release
/// leaves only that record, and the key of the cluster record, which holds the master's
/// data epoch (docs/design.md §7, §11).
#[tokio::test]
async fn an_acquire_writes_its_key_and_one_holder_record_per_client() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).key_prefix("locks:").build().unwrap();
    let mut conn = raw(&cluster.server(0).url()).await;
    let mut under_prefix = async || {
        let mut keys: Vec<String> = conn.keys("locks:*").await.unwrap();
        keys.sort();
        keys
    };
    let mut holder = None;
    for i in 0..5 {
        let key = unique_key(&format!("slim{i}"));
        let lease = client.acquire(&key).await.unwrap();
        let (tag, _) = lease.value().rsplit_once('.').unwrap();
        let record = format!("locks:redquorum:holder:{tag}");
        let epoch = "locks:redquorum:cluster".to_owned();
        let mut expected = vec![lease.key().to_owned(), record.clone(), epoch.clone()];
        expected.sort();
        assert_eq!(under_prefix().await, expected, "while held ({i})");
        holder.get_or_insert(record.clone());
        assert_eq!(
            holder.as_deref(),
            Some(record.as_str()),
            "one record per client"
        );
        lease.release().await.unwrap();
        let mut expected = vec![record, epoch];
        expected.sort();
        assert_eq!(under_prefix().await, expected, "after the release ({i})");
    }
    let record = holder.unwrap();
    let fields: std::collections::HashMap<String, String> = conn.hgetall(&record).await.unwrap();
    assert_eq!(fields["pid"], std::process::id().to_string());
    assert!(record.ends_with(&fields["client"]), "{record}: {fields:?}");
    let owners: Vec<String> = conn.keys("redquorum:owner:*").await.unwrap();
    assert!(owners.is_empty(), "no owner record per lock: {owners:?}");
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn every_attempt_uses_a_fresh_random_value() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let key = unique_key("fresh");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let lease = client.acquire(&key).await.unwrap();
        assert!(seen.insert(lease.value().to_owned()), "value reused");
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn passwords_and_unix_sockets() {
    let options = ServerOptions::new()
        .password("hunter2-secret")
        .unix_socket(true);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let mut urls = cluster.urls();
    urls[2] = cluster.server(2).unix_url().unwrap();
    assert!(urls[0].contains("hunter2-secret"));
    let client = Redlock::builder()
        .quarantine(false)
        .masters(&urls)
        .build()
        .unwrap();
    assert!(!format!("{client:?}").contains("hunter2-secret"));
    let key = unique_key("auth");
    let lease = client.acquire(&key).await.unwrap();
    assert!(
        lease
            .masters()
            .iter()
            .all(|r| !matches!(r.outcome(), MasterOutcome::Failed(_)))
    );
    lease.release().await.unwrap();

    // A wrong password is an auth failure, reported without the password.
    let wrong: Vec<String> = urls
        .iter()
        .map(|u| u.replace("hunter2-secret", "wrong-secret"))
        .collect();
    let client = Redlock::builder()
        .masters(&wrong)
        .retry(Retry::new().attempts(1))
        .build()
        .unwrap();
    let err = client.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("wrong-secret"), "{shown}");
    assert!(
        err.masters().iter().any(|r| matches!(
            r.outcome(),
            MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Auth
        )),
        "{err}"
    );
}

/// A grant never deletes what it finds at its holder record's key but a record: under
/// another key prefix on the same masters, that key may be another client's lock, and
/// deleting it would let a third client in beside its holder.
#[tokio::test]
async fn a_grant_never_deletes_another_prefix_lock_at_its_holder_record() {
    let cluster = Cluster::start(1).await.unwrap();
    let url = cluster.server(0).url();
    let app = client(&cluster)
        .key_prefix("app:")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let bare = client(&cluster)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut conn = raw(&url).await;
    let first = app.acquire(&unique_key("first")).await.unwrap();
    let (tag, _) = first.value().rsplit_once('.').unwrap();
    let record = format!("app:redquorum:holder:{tag}");
    first.release().await.unwrap();
    // The record expires after an hour without a grant; deleted here in its place.
    let _: () = conn.del(&record).await.unwrap();
    // Without a prefix, that key is a name like any other.
    let theirs = bare.acquire(&record).await.unwrap();
    let _second = app.acquire(&unique_key("second")).await.unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg(&record)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "string", "the lock held on {record} was replaced");
    assert_eq!(
        get(&url, &record).await.as_deref(),
        Some(theirs.value()),
        "a grant under prefix app: replaced the lock held on {record}"
    );
    let pttl: i64 = conn.pttl(&record).await.unwrap();
    assert!(pttl > 0 && pttl <= 5000, "{pttl}");
    theirs.release().await.unwrap();
}

/// How many `EVALSHA` commands the master behind `conn` ran (`INFO commandstats`).
async fn evalsha_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    info(conn, "commandstats")
        .await
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The `NOSCRIPT` error of `INFO errorstats`, 0 when none was answered yet.
async fn noscript_errors(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    info_number(conn, "errorstats", "errorstat_NOSCRIPT:count=")
        .await
        .unwrap_or(0)
}

/// Masters that forgot the scripts (`SCRIPT FLUSH`) under open connections answer the
/// next request `NOSCRIPT`, once: the client loads the script and runs it again, and the
/// acquire and the release succeed as if nothing happened.
#[tokio::test]
async fn flushed_scripts_are_loaded_again_by_the_request_that_meets_noscript() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    client
        .acquire(&unique_key("warm"))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut conns = Vec::new();
    for url in cluster.urls() {
        let mut conn = raw(&url).await;
        // The warm-up's acquire and release each return once two masters answered: the
        // third runs both before the scripts are flushed here, or it would meet NOSCRIPT.
        wait_until(
            Duration::from_secs(2),
            "the warm-up on every master",
            || {
                let mut conn = conn.clone();
                async move { evalsha_calls(&mut conn).await >= 2 }
            },
        )
        .await;
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(noscript_errors(&mut conn).await, 0);
        conns.push(conn);
    }
    let key = unique_key("flushed");
    let lease = client.acquire(&key).await.unwrap();
    assert_eq!(lease.masters().len(), 3);
    // The acquire returns once two masters granted: the third may still be loading the
    // script and running it again, well within the lock's TTL.
    for conn in &mut conns {
        let value = lease.value().to_owned();
        wait_until(Duration::from_secs(2), "the key is on every master", || {
            let (mut conn, key, value) = (conn.clone(), key.clone(), value.clone());
            async move {
                let held: Option<String> = conn.get(&key).await.unwrap();
                held.as_deref() == Some(value.as_str())
            }
        })
        .await;
        // The acquire met NOSCRIPT once and ran again: the script is cached again.
        assert_eq!(noscript_errors(conn).await, 1);
    }
    lease.release().await.unwrap();
    // The release returns once two masters answered: the third is awaited here.
    client.shutdown().await;
    for conn in &mut conns {
        assert_eq!(conn.get::<_, Option<String>>(&key).await.unwrap(), None);
        // The release met NOSCRIPT once too (its script was flushed as well).
        assert_eq!(noscript_errors(conn).await, 2);
    }
}

/// The holder record the value of `lease` names, under the empty key prefix.
fn holder_record_of(lease: &redquorum::Lease) -> String {
    let (tag, _) = lease.value().rsplit_once('.').unwrap();
    format!("redquorum:holder:{tag}")
}

/// Whether `url` holds the key `key`.
async fn holds_key(url: &str, key: &str) -> bool {
    raw(url).await.exists::<_, bool>(key).await.unwrap()
}

/// A client sees to its holder record on a master once per connection, not per lock
/// (docs/design.md §11): once a grant there wrote it, its locks leave the record alone
/// (a record deleted behind its back is not written again); reached on a new connection,
/// the master gets the record again with the next grant. Only the masters whose grant
/// the acquire counted are judged: a straggler's answer may still be on its way.
#[tokio::test]
async fn a_holder_record_is_seen_to_once_per_connection() {
    let cluster = Cluster::start(3).await.unwrap();
    let urls = cluster.urls();
    let client = client(&cluster).build().unwrap();
    let first = client.acquire(&unique_key("holder-first")).await.unwrap();
    let record = holder_record_of(&first);
    let counted: Vec<&String> = urls
        .iter()
        .zip(first.masters())
        .filter(|(_, m)| matches!(m.outcome(), MasterOutcome::Granted))
        .map(|(url, _)| url)
        .collect();
    assert!(counted.len() >= 2, "{:?}", first.masters());
    for url in &counted {
        assert!(holds_key(url, &record).await, "{url}: no holder record");
    }
    first.release().await.unwrap();

    // Deleted behind the client's back: its next locks do not write it again where the
    // client knows it wrote it. Each such master is awaited for the key: it ran the
    // acquire.
    for url in &urls {
        let _: () = raw(url).await.del(&record).await.unwrap();
    }
    let key = unique_key("holder-known");
    let known = client.acquire(&key).await.unwrap();
    for url in &counted {
        wait_until(Duration::from_secs(2), "the lock on the master", || {
            holds_key(url, &key)
        })
        .await;
        assert!(
            !holds_key(url, &record).await,
            "{url}: the record was written again"
        );
    }
    known.release().await.unwrap();

    // One of them drops the client's connections: the client connects again, and its
    // next grants there write the record again; the others still leave it alone.
    let (again, others) = counted.split_first().unwrap();
    let mut admin = raw(again).await;
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "the record written again on the master reached again",
        || {
            let (client, url, record) = (&client, again, &record);
            async move {
                if let Ok(lease) = client.acquire(&unique_key("holder-again")).await {
                    let _ = lease.release().await;
                }
                holds_key(url, record).await
            }
        },
    )
    .await;
    for url in others {
        assert!(!holds_key(url, &record).await, "{url}: written again");
    }
}
