//! The semaphore against real masters (docs/design.md §15): bad input, the stored limit,
//! all-or-none slots, extension, release, fencing per slot, waiting, cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Waiting};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::limits::MAX_PERMITS;
use redquorum::{AcquireOptions, ErrorKind, LeaseMode, MasterErrorKind, MasterOutcome};
use support::*;

/// The key of slot `i` of semaphore `name` (no key prefix).
fn slot(name: &str, i: u32) -> String {
    format!("redquorum:sem:{name}:{i}")
}

#[tokio::test]
async fn bad_input_is_refused_at_once() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    for limit in [0, MAX_PERMITS + 1] {
        let err = client.semaphore("s", limit).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("1 to 64"), "{err}");
    }
    for name in ["", "redquorum:epoch"] {
        let err = client.semaphore(name, 2).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        assert!(!err.is_retryable());
    }
    let long = "x".repeat(2000);
    assert_eq!(
        client.semaphore(&long, 2).unwrap_err().kind(),
        ErrorKind::InvalidResource
    );
    let semaphore = client.semaphore(&unique_key("bad_input"), 3).unwrap();
    assert_eq!((semaphore.limit(), semaphore.name().is_empty()), (3, false));
    for permits in [0, 4] {
        let err = semaphore.acquire(permits).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("ask for 1 to 3"), "{err}");
        assert!(err.masters().is_empty(), "no master was asked: {err}");
    }
    let err = semaphore
        .acquire_with(1, &AcquireOptions::new().attempts(0))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
}

/// At most `limit` permits: the last ones wait or fail, all or none; each lease's slots
/// are set on every master, extended together, and released together.
// Checks I16 (a semaphore never admits more than its limit).
#[tokio::test]
async fn permits_are_slots_taken_all_or_none() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("slots");
    let semaphore = client.semaphore(&name, 3).unwrap();
    let two = semaphore.acquire(2).await.unwrap();
    assert_eq!(two.mode(), LeaseMode::Permits);
    let slots = two.permits();
    assert_eq!(slots.len(), 2);
    assert!(
        slots.iter().all(|s| *s < 3) && slots[0] < slots[1],
        "{slots:?}"
    );
    let resources: Vec<&str> = two.resources().collect();
    assert_eq!(
        resources,
        [
            format!("{name}#{}", slots[0]),
            format!("{name}#{}", slots[1])
        ]
    );
    for s in &slots {
        let key = slot(&name, *s);
        wait_until(Duration::from_secs(2), "slots set everywhere", || {
            held_everywhere(&cluster, &key, two.value())
        })
        .await;
    }
    // Another client cannot have two more while one is free: nothing is taken.
    let other = support::client(&cluster).build().unwrap();
    let others = other.semaphore(&name, 3).unwrap();
    let once = AcquireOptions::new().attempts(1);
    let err = others.acquire_with(2, &once).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    assert!(err.is_retryable());
    let one = others.acquire_with(1, &once).await.unwrap();
    let last = one.permits()[0];
    assert!(!slots.contains(&last));
    // The last slot is another client's: contention, not this client's own.
    assert_eq!(
        semaphore.acquire_with(1, &once).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    // Extension covers every slot of the lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = two.extend_with(Duration::from_secs(5)).await.unwrap();
    assert!(report.deadline() > tokio::time::Instant::now() + Duration::from_secs(4));
    let mut conn = raw(&cluster.urls()[0]).await;
    for s in &slots {
        let pttl: i64 = conn.pttl(slot(&name, *s)).await.unwrap();
        assert!(pttl > 4_800, "slot {s}: {pttl}");
    }
    two.release().await.unwrap();
    for s in &slots {
        let key = slot(&name, *s);
        wait_until(Duration::from_secs(2), "slots released", || {
            gone_everywhere(&cluster, &key)
        })
        .await;
    }
    let again = others.acquire_with(2, &once).await.unwrap();
    assert!(!again.permits().contains(&last));
    again.release().await.unwrap();
    one.release().await.unwrap();
    // A non-semaphore lease has no permits.
    let lock = client.acquire(&unique_key("plain")).await.unwrap();
    assert!(lock.permits().is_empty());
    lock.release().await.unwrap();
}

/// A released permit takes its slot's owner record (kind `permit`) with it, on every
/// master: one slot by the single-key release, several by the multi-key one. The records
/// would otherwise outlive the permits by their TTL (10 s here), well beyond the wait.
#[tokio::test]
async fn a_released_permit_takes_its_owner_record() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("10s").build().unwrap();
    let name = unique_key("permit_records");
    let semaphore = client.semaphore(&name, 3).unwrap();
    for permits in [1, 2] {
        let lease = semaphore.acquire(permits).await.unwrap();
        let owners: Vec<String> = lease
            .permits()
            .iter()
            .map(|s| format!("redquorum:owner:{}", slot(&name, *s)))
            .collect();
        let exists = |owners: Vec<String>| {
            let urls = cluster.urls();
            async move {
                let mut found = 0;
                for url in urls {
                    let mut conn = raw(&url).await;
                    for owner in &owners {
                        let here: bool = conn.exists(owner).await.unwrap();
                        found += usize::from(here);
                    }
                }
                found
            }
        };
        wait_until(Duration::from_secs(2), "owner records set", || {
            let owners = owners.clone();
            async move { exists(owners).await == 3 * permits as usize }
        })
        .await;
        lease.release().await.unwrap();
        wait_until(
            Duration::from_secs(2),
            "the released permits' owner records are gone from every master",
            || {
                let owners = owners.clone();
                async move { exists(owners).await == 0 }
            },
        )
        .await;
    }
}

/// A client with another limit is refused while permits are held under the stored one,
/// and holds nothing; the explicit replacement is refused too while they are held.
// Checks I16 (the semaphore's limit) and I21 (slot keys below the stored limit).
#[tokio::test]
async fn another_limit_is_refused_while_permits_are_held() {
    let cluster = Cluster::start(3).await.unwrap();
    let two = client(&cluster).build().unwrap();
    let three = client(&cluster).build().unwrap();
    let name = unique_key("limits");
    let held = two.semaphore(&name, 2).unwrap().acquire(1).await.unwrap();
    let other = three.semaphore(&name, 3).unwrap();
    let err = other.acquire(1).await.unwrap_err();
    assert_mismatch(&err, 2, 3);
    for i in 0..3 {
        if i != held.permits()[0] {
            assert!(
                gone_everywhere(&cluster, &slot(&name, i)).await,
                "slot {i} taken"
            );
        }
    }
    // The explicit change is refused on every master that holds the permit.
    let replaced = other.replace_limit().await.unwrap();
    assert_eq!(
        (
            replaced.stored_on(),
            replaced.took_quorum(),
            replaced.everywhere()
        ),
        (0, false, false),
        "{replaced:?}"
    );
    assert!(
        replaced
            .masters()
            .iter()
            .all(|r| matches!(r.outcome(), MasterOutcome::HeldByOther)),
        "{replaced:?}"
    );
    assert_eq!(stored_limits(&cluster, &name).await, ["2", "2", "2"]);
    held.release().await.unwrap();
}

/// The stored limit is sticky: an idle semaphore stored with limit 3 still refuses a client
/// with 5; `replace_limit` then stores 5, after which that client is served and the one
/// with 3 is refused.
// Checks I21 (live slot keys lie below the stored limit).
#[tokio::test]
async fn an_idle_semaphore_keeps_its_limit_until_replaced() {
    let cluster = Cluster::start(3).await.unwrap();
    let clients = client(&cluster).build().unwrap();
    let name = unique_key("sticky");
    let three = clients.semaphore(&name, 3).unwrap();
    three.acquire(2).await.unwrap().release().await.unwrap();
    assert_eq!(stored_limits(&cluster, &name).await, ["3", "3", "3"]);
    // Idle now: no permit is live anywhere, and still the client with 5 is refused.
    let five = clients.semaphore(&name, 5).unwrap();
    let err = five.acquire(1).await.unwrap_err();
    assert_mismatch(&err, 3, 5);
    assert!(err.to_string().contains("replace_limit"), "{err}");
    for i in 0..5 {
        assert!(gone_everywhere(&cluster, &slot(&name, i)).await, "slot {i}");
    }
    assert_eq!(stored_limits(&cluster, &name).await, ["3", "3", "3"]);
    // The explicit change: stored everywhere, no permit taken.
    let replaced = five.replace_limit().await.unwrap();
    assert_eq!(
        (
            replaced.limit(),
            replaced.stored_on(),
            replaced.took_quorum(),
            replaced.everywhere()
        ),
        (5, 3, true, true),
        "{replaced:?}"
    );
    assert_eq!(stored_limits(&cluster, &name).await, ["5", "5", "5"]);
    for i in 0..5 {
        assert!(gone_everywhere(&cluster, &slot(&name, i)).await, "slot {i}");
    }
    // Again: nothing to change, still reported as stored everywhere.
    assert!(five.replace_limit().await.unwrap().everywhere());
    let all = five.acquire(5).await.unwrap();
    assert_eq!(all.permits().len(), 5);
    all.release().await.unwrap();
    let err = three.acquire(1).await.unwrap_err();
    assert_mismatch(&err, 5, 3);
}

/// `err` is a LimitMismatch naming the `stored` limit and the client's `ours`.
fn assert_mismatch(err: &redquorum::Error, stored: u32, ours: u32) {
    assert_eq!(err.kind(), ErrorKind::LimitMismatch, "{err}");
    assert!(!err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains(&format!("limit stored here is {stored}"))
            && text.contains(&format!("gives limit {ours}"))
            && text.contains("replace_limit"),
        "{text}"
    );
    assert!(err.masters().iter().any(|r| matches!(
        r.outcome(),
        MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::LimitMismatch
    )));
}

/// The limit record of semaphore `name` on each master.
async fn stored_limits(cluster: &Cluster, name: &str) -> Vec<String> {
    let mut stored = Vec::new();
    for url in cluster.urls() {
        let mut conn = raw(&url).await;
        let limit: Option<String> = conn
            .get(format!("redquorum:sem:{name}:limit"))
            .await
            .unwrap();
        stored.push(limit.unwrap_or_default());
    }
    stored
}

/// A waiter is woken by a release, well before the holder's TTL.
// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn a_release_wakes_a_waiter() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("10s").build().unwrap();
    let waiter = client(&cluster)
        .ttl("10s")
        .retry(Retry::new().delay("5s").jitter("0s"))
        .build()
        .unwrap();
    let name = unique_key("wake");
    let held = holder
        .semaphore(&name, 1)
        .unwrap()
        .acquire(1)
        .await
        .unwrap();
    let semaphore = waiter.semaphore(&name, 1).unwrap();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let lease = semaphore.acquire(1).await.unwrap();
        (started.elapsed(), lease)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let (waited, lease) = waiting.await.unwrap();
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release: {waited:?}"
    );
    lease.release().await.unwrap();
}

/// With fencing, each slot has its own counter and token, growing per slot.
// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn fencing_gives_each_slot_its_token() {
    let cluster = Cluster::start_with(3, &ServerOptions::new().persistence(Persistence::AofAlways))
        .await
        .unwrap();
    let client = client(&cluster)
        .quarantine(true)
        .fencing(true)
        .ttl("2s")
        .build()
        .unwrap();
    client.init_cluster().await.unwrap();
    let name = unique_key("fenced");
    let semaphore = client.semaphore(&name, 2).unwrap();
    let first = semaphore.acquire(2).await.unwrap();
    let tokens: Vec<(String, u64)> = first
        .fencing_tokens()
        .map(|(r, t)| (r.to_owned(), t.get()))
        .collect();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    first.release().await.unwrap();
    let second = semaphore.acquire(2).await.unwrap();
    for (resource, token) in second.fencing_tokens() {
        let before = tokens.iter().find(|(r, _)| r == resource).unwrap().1;
        assert!(token.get() > before, "{resource}: {token:?} after {before}");
    }
    second.release().await.unwrap();
}

/// `with_permits` holds the permits while the work runs and releases them after.
#[tokio::test]
async fn with_permits_runs_and_releases() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("scoped");
    let semaphore = client.semaphore(&name, 2).unwrap();
    let inside = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&inside);
    let slots = semaphore
        .with_permits(2, &AcquireOptions::new(), |lease| async move {
            seen.store(lease.permits().len() as u32, Ordering::SeqCst);
            lease.permits()
        })
        .await
        .unwrap();
    assert_eq!(inside.load(Ordering::SeqCst), 2);
    for s in slots {
        let key = slot(&name, s);
        wait_until(Duration::from_secs(2), "released after the work", || {
            gone_everywhere(&cluster, &key)
        })
        .await;
    }
}

/// Dropping the acquire future after each of its first polls, while two of the three
/// masters are paused (`CLIENT PAUSE`, 300 ms) so that no quorum can answer before the
/// drop, leaves no slot behind beyond the background release: every slot key is gone
/// long before its 30 s TTL. Each future must still be pending when it is dropped, or
/// the drop tested nothing.
// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn a_dropped_acquire_leaves_no_slot() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("30s").build().unwrap();
    let name = unique_key("cancel");
    let semaphore = client.semaphore(&name, 2).unwrap();
    // Connected before the first drop: the requests of each attempt leave at once.
    semaphore.acquire(2).await.unwrap().release().await.unwrap();
    for k in 1..=12 {
        for i in 0..2 {
            cluster
                .server(i)
                .client_pause(Duration::from_millis(300))
                .await
                .unwrap();
        }
        // The future lives in this block only: it is dropped at the block's end.
        {
            let mut acquire = std::pin::pin!(semaphore.acquire(2));
            for poll in 1..=k {
                let polled = futures::poll!(acquire.as_mut());
                assert!(
                    polled.is_pending(),
                    "k={k}: the acquire completed at poll {poll} with two masters paused"
                );
                tokio::task::yield_now().await;
            }
        }
        for i in 0..2 {
            let key = slot(&name, i);
            wait_until(
                Duration::from_secs(3),
                "a cancelled attempt's slots released",
                || gone_everywhere(&cluster, &key),
            )
            .await;
        }
    }
    for i in 0..2 {
        assert!(gone_everywhere(&cluster, &slot(&name, i)).await);
    }
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

/// Scripts each master of `cluster` ran so far (`INFO commandstats`: `EVALSHA` and `EVAL`
/// calls): each attempt of a semaphore acquire runs one on every master it reaches.
async fn script_calls(cluster: &Cluster) -> Vec<u64> {
    let mut calls = Vec::new();
    for url in cluster.urls() {
        let info = info(&mut raw(&url).await, "commandstats").await;
        let counted: u64 = info
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        calls.push(counted);
    }
    calls
}

/// A client's own permits: never asked for again, and a request only its own leases could
/// satisfy is refused at once with AlreadyHeld (or waits, with `wait_for_own_leases`).
#[tokio::test]
async fn own_permits_are_skipped_and_never_waited_for() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("own");
    let semaphore = client.semaphore(&name, 3).unwrap();
    let two = semaphore.acquire(2).await.unwrap();
    // Refused at its first poll: it neither waited nor asked a master.
    let err = at_first_poll(semaphore.acquire(2)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    assert!(!err.is_retryable());
    assert!(err.masters().is_empty(), "no master was asked: {err}");
    assert!(err.to_string().contains("own_leases"), "{err}");
    // One more: the slot it does not hold, at the first attempt.
    let once = AcquireOptions::new().attempts(1);
    for _ in 0..5 {
        let one = semaphore.acquire_with(1, &once).await.unwrap();
        assert!(!two.permits().contains(&one.permits()[0]));
        one.release().await.unwrap();
    }
    two.release().await.unwrap();
    // Opted out: the client queues behind its own lease.
    let patient = support::client(&cluster)
        .waiting(Waiting::new().own_leases(true))
        .build()
        .unwrap();
    let shared = patient.semaphore(&name, 3).unwrap();
    let first = shared.acquire(3).await.unwrap();
    let before = script_calls(&cluster).await;
    let waiting = tokio::spawn(async move { shared.acquire(1).await });
    // Two attempts of the waiter reached every master and were refused: it waits rather
    // than failing for its own permits.
    wait_until(Duration::from_secs(5), "two refused attempts", || {
        let (cluster, before) = (&cluster, &before);
        async move {
            let now = script_calls(cluster).await;
            now.iter().zip(before).all(|(n, b)| *n >= b + 2)
        }
    })
    .await;
    assert!(!waiting.is_finished());
    first.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// Live permits are lock keys to `init_cluster`: masters in use by a semaphore are not
/// bootstrapped (docs/design.md §11, §15); once the permits are gone, the limit record
/// alone does not stop it.
#[tokio::test]
async fn init_cluster_refuses_masters_with_live_permits() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let held = client
        .semaphore(&unique_key("bootstrap"), 2)
        .unwrap()
        .acquire(1)
        .await
        .unwrap();
    let err = client.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
    assert!(err.to_string().contains("redquorum:sem:"), "{err}");
    held.release().await.unwrap();
    client.init_cluster().await.unwrap();
}
