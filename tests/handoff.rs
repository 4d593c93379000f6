//! Hand-off to the next waiter and the fair lock, on real masters (docs/design.md §17):
//! a release hands the lock to the waiter at the head of the queue, which alone is woken;
//! `handoff(false)` leaves no queue behind; every way a waiter ends removes its
//! registration; the fair lock serves its waiters in ticket order, with masters killed
//! too; a holder that never releases and a head that dies are passed by; bad settings
//! are refused; and each planted bug of the mechanism shows on the masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod capture;
mod support;

use redquorum::{Retry, Timeouts, Waiting};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
#[cfg(redquorum_mutants)]
use redquorum::Mutant;
use redquorum::{AcquireOptions, ErrorKind, Lease, Redlock};
use redquorum_testkit::{Latency, Mode, Proxy};
use support::*;
use tokio::time::{Instant, timeout};

/// Without `--cfg redquorum_mutants` no bug can be planted.
#[cfg(not(redquorum_mutants))]
type Mutant = std::convert::Infallible;

/// The client `builder` builds, with `mutant` planted, if any.
fn with_mutant(builder: redquorum::Builder, mutant: Option<Mutant>) -> Redlock {
    let client = builder.build().unwrap();
    match mutant {
        #[cfg(redquorum_mutants)]
        Some(m) => client.plant(m),
        _ => {}
    }
    client
}

/// The queue of a lock key.
fn queue_key(key: &str) -> String {
    format!("redquorum:queue:{key}")
}

/// The prefix of the waiters' liveness keys of a lock key.
fn waiter_prefix(key: &str) -> String {
    format!("redquorum:waiter:{key}:")
}

/// The fair lock's ticket counter of a lock key.
fn ticket_key(key: &str) -> String {
    format!("redquorum:ticket:{key}")
}

/// Whether no live master holds a queue, a waiter's liveness key or a handed key (a
/// value that is a waiter's id) for `key`. `values` are the lease values `key` may hold.
async fn no_waiter_left(cluster: &Cluster, key: &str) -> bool {
    for server in cluster.servers() {
        if !server.is_running() {
            continue;
        }
        let mut conn = raw(&server.url()).await;
        let queue: bool = conn.exists(queue_key(key)).await.unwrap();
        let waiters: Vec<String> = conn.keys(format!("{}*", waiter_prefix(key))).await.unwrap();
        let held: Option<String> = conn.get(key).await.unwrap();
        if queue || !waiters.is_empty() || held.is_some() {
            return false;
        }
    }
    true
}

/// A client over `cluster` that waits long and polls never: its retry pause (30 s) and
/// its waiter TTL (4.5 s, a refresh every 1.5 s) are far longer than the bounds of the
/// tests that use it, so only a hand-off can wake it that soon.
fn patient(cluster: &Cluster) -> redquorum::Builder {
    client(cluster)
        .retry(Retry::new().delay("30s").jitter("1ms"))
        .waiting(Waiting::new().waiter_ttl("4500ms"))
}

/// A client over `cluster` with a short waiter TTL (900 ms: a refresh every 300 ms).
fn brisk(cluster: &Cluster) -> redquorum::Builder {
    client(cluster).waiting(Waiting::new().waiter_ttl("900ms"))
}

// Checks I18 (hand-off never gives two waiters a quorum).
#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiter() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let waiter = patient(&cluster).build().unwrap();
    let key = unique_key("handed");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    wait_registered(&cluster, &key, 3).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_secs(1), waiting)
        .await
        .expect("handed over well before any timer or refresh")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(1));
    // The lock holds the waiter's own value with the full TTL, not the hand-off's.
    wait_until(
        Duration::from_secs(2),
        "the lease is on every master",
        || held_everywhere(&cluster, &key, taken.value()),
    )
    .await;
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let pttl: i64 = conn.pttl(&key).await.unwrap();
        assert!(pttl > 4000, "{pttl}");
    }
    taken.release().await.unwrap();
    wait_until(Duration::from_secs(2), "nothing left", || {
        no_waiter_left(&cluster, &key)
    })
    .await;
}

/// The operations of the quorum rounds `captured` saw begin, in order.
fn rounds(captured: &capture::Captured) -> Vec<String> {
    captured
        .text()
        .lines()
        .filter(|line| line.ends_with(": new"))
        .filter_map(|line| {
            let rest = line.split("redquorum.round{").nth(1)?;
            let op = rest.split("op=").nth(1)?;
            Some(op.split([' ', '}']).next()?.trim_matches('"').to_owned())
        })
        .collect()
}

/// The rounds of `captured` that lock or queue: releases aside (a refused attempt's
/// clean-up, the other client's release).
fn locking(captured: &capture::Captured) -> Vec<String> {
    rounds(captured)
        .into_iter()
        .filter(|op| op != "release")
        .collect()
}

/// Captures the rounds this thread runs from now until the guard drops.
fn capture_rounds() -> (capture::Captured, tracing::subscriber::DefaultGuard) {
    capture::Captured::install(
        tracing::Level::DEBUG,
        tracing_subscriber::fmt::format::FmtSpan::NEW,
    )
}

/// `client` holds `key` and a waiter of `other` queues; the holder's release hands the
/// lock on; the waiter's lease is returned.
async fn hand_on(cluster: &Cluster, client: &Redlock, other: &Redlock, key: &str) -> Lease {
    let lease = client.acquire(key).await.unwrap();
    let waits = tokio::spawn({
        let (other, key) = (other.clone(), key.to_owned());
        async move { other.acquire(&key).await }
    });
    wait_registered(cluster, key, 3).await;
    lease.release().await.unwrap();
    timeout(Duration::from_secs(2), waits)
        .await
        .expect("handed over well before any refresh")
        .unwrap()
        .unwrap()
}

/// A client whose release just handed the lock to a waiter would be refused by a plain
/// attempt: its next waiting acquire of the name queues at once (its first round
/// registers it), one above the ticket counter its release read, and is handed the lock in
/// turn. A call that would not queue (one attempt) still makes its plain round; a client
/// whose release found no waiter acquires with one plain round, as ever.
#[tokio::test]
async fn a_client_that_handed_the_lock_on_queues_at_once_next_time() {
    let cluster = Cluster::start(3).await.unwrap();
    let a = patient(&cluster).build().unwrap();
    let b = patient(&cluster).build().unwrap();
    let key = unique_key("queues_at_once");
    // B queued first: its ticket is 1.
    let (captured, guard) = capture_rounds();
    let b_lease = hand_on(&cluster, &a, &b, &key).await;
    captured.clear();
    let a_waits = tokio::spawn({
        let (a, key) = (a.clone(), key.clone());
        async move { a.acquire(&key).await }
    });
    wait_registered(&cluster, &key, 3).await;
    assert_eq!(locking(&captured), ["enqueue"]);
    // Its score is one above the counter A's release read (B's ticket), on every master.
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let queued: Vec<(String, u64)> = conn
            .zrange_withscores(queue_key(&key), 0, -1)
            .await
            .unwrap();
        assert_eq!(queued.iter().map(|(_, s)| *s).collect::<Vec<_>>(), [2]);
    }
    b_lease.release().await.unwrap();
    let a_lease = timeout(Duration::from_secs(2), a_waits)
        .await
        .expect("handed over well before any refresh")
        .unwrap()
        .unwrap();
    // (A dequeue may follow, clearing the registration where the confirm was not yet
    // decided.)
    assert_eq!(locking(&captured)[..2], ["enqueue", "acquire"]);
    a_lease.release().await.unwrap();

    // A call that would not queue (one attempt) makes its plain round, and is refused.
    let b_lease = hand_on(&cluster, &a, &b, &key).await;
    captured.clear();
    let tried = a.try_acquire(&key).await.unwrap_err();
    assert_eq!(tried.kind(), ErrorKind::Contended);
    assert_eq!(locking(&captured), ["acquire"]);
    b_lease.release().await.unwrap();

    // Released with no waiter: nothing is noted, and the next acquire is one plain round.
    let alone = unique_key("queues_at_once_alone");
    a.acquire(&alone).await.unwrap().release().await.unwrap();
    captured.clear();
    let again = a.acquire(&alone).await.unwrap();
    drop(guard);
    assert_eq!(rounds(&captured), ["acquire"]);
    again.release().await.unwrap();
}

#[cfg(feature = "metrics")]
#[test]
fn a_hand_off_is_counted() {
    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString};
    use metrics::{Unit, with_local_recorder};
    use metrics_util::registry::{AtomicStorage, Registry};

    #[derive(Clone)]
    struct Capture(Arc<Registry<Key, AtomicStorage>>);
    impl Recorder for Capture {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.0
                .get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.0
                .get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            self.0
                .get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
        }
    }
    let capture = Capture(Arc::new(Registry::atomic()));
    let handoffs = |capture: &Capture| {
        let mut total = 0;
        capture.0.visit_counters(|key, counter| {
            if key.name() == "redquorum_handoffs_total" {
                total += counter.load(std::sync::atomic::Ordering::Relaxed);
            }
        });
        total
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    with_local_recorder(&capture, || {
        runtime.block_on(async {
            let cluster = Cluster::start(3).await.unwrap();
            let holder = client(&cluster).build().unwrap();
            let waiter = patient(&cluster).build().unwrap();
            let key = unique_key("counted");
            let lease = holder.acquire(&key).await.unwrap();
            let waiting = tokio::spawn({
                let (waiter, key) = (waiter.clone(), key.clone());
                async move { waiter.acquire(&key).await }
            });
            wait_registered(&cluster, &key, 3).await;
            assert_eq!(handoffs(&capture), 0);
            lease.release().await.unwrap();
            let taken = timeout(Duration::from_secs(1), waiting)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!(handoffs(&capture), 1);
            taken.release().await.unwrap();
        });
    });
}

#[tokio::test]
async fn without_handoff_no_queue_waiter_or_ticket_key_is_written() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster)
        .waiting(Waiting::new().handoff(false))
        .build()
        .unwrap();
    let waiter = client(&cluster)
        .waiting(Waiting::new().handoff(false))
        .build()
        .unwrap();
    let key = unique_key("herd");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { waiter.acquire(&key).await }
    });
    // Long enough for several attempts of the waiter (5 ms apart).
    tokio::time::sleep(Duration::from_millis(300)).await;
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_secs(4), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let found: Vec<String> = conn.keys("redquorum:*").await.unwrap();
        let queue_keys: Vec<&String> = found
            .iter()
            .filter(|k| {
                k.starts_with("redquorum:queue:")
                    || k.starts_with("redquorum:waiter:")
                    || k.starts_with("redquorum:ticket:")
            })
            .collect();
        assert!(queue_keys.is_empty(), "{queue_keys:?}");
    }
}

/// How a queued waiter's call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its wait budget runs out.
    Budget,
    /// Its future is dropped while it waits.
    Dropped,
    /// An error: its own client takes the lock while the call waits (`AlreadyHeld`).
    Error,
    /// A lease, confirmed on two masters while the third refuses it (a foreign key there),
    /// so that the third still holds the registration when the call returns.
    Lease,
}

/// A client whose waiters live long: a waiter TTL of 10 s (a refresh every 3.3 s), a TTL
/// of 20 s and a retry pause of 30 s. A registration its call leaves behind lives 10 s
/// on its own, and a key handed to it as long: far beyond [`LEFT_BOUND`]. With `mutant`
/// planted, if any.
fn long_lived(cluster: &Cluster, mutant: Option<Mutant>) -> Redlock {
    with_mutant(
        client(cluster)
            .ttl("20s")
            .retry(Retry::new().delay("30s").jitter("1ms"))
            .waiting(Waiting::new().waiter_ttl("10s")),
        mutant,
    )
}

/// How long after a waiter's call ended its registration may still be seen: a fifth of
/// the [`long_lived`] waiter TTL, so that only the call's own `Dequeue` can remove it.
const LEFT_BOUND: Duration = Duration::from_secs(2);

/// The waiter registrations of `key` on each master of `cluster`: queue members and
/// liveness keys.
async fn registrations(cluster: &Cluster, key: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut found = Vec::new();
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let waiters: Vec<String> = conn.keys(format!("{}*", waiter_prefix(key))).await.unwrap();
        found.push((members(server, key).await, waiters));
    }
    found
}

/// Waits at most [`LEFT_BOUND`] until no master of `cluster` holds a waiter registration
/// for `key`; the registrations still there otherwise.
async fn registrations_gone(cluster: &Cluster, key: &str, end: End) -> Result<(), String> {
    let give_up = Instant::now() + LEFT_BOUND;
    loop {
        let found = registrations(cluster, key).await;
        if found.iter().all(|(q, w)| q.is_empty() && w.is_empty()) {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "{end:?}: a registration is left {LEFT_BOUND:?} after the call ended \
                 (queue members, liveness keys per master): {found:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A queued waiter's call by a [`long_lived`] client with `mutant` planted, ended the way
/// `end` says while a holder keeps the lock. Returns what is wrong if a registration of
/// it is still on a master [`LEFT_BOUND`] after the call ended, or the call did not end
/// as asked.
async fn waiter_ending(end: End, mutant: Option<Mutant>) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("20s").build().unwrap();
    let waiter = long_lived(&cluster, mutant);
    let key = unique_key("ends");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "the holder's keys landed", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;
    match end {
        End::Budget => {
            let options = AcquireOptions::new().wait_timeout("1500ms");
            let mut waiting = pin!(waiter.acquire_with(&key, &options));
            tokio::select! {
                _ = &mut waiting => panic!("the call ended before it registered"),
                () = wait_registered(&cluster, &key, 3) => {}
            }
            let err = waiting.await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
        }
        End::Dropped => {
            let mut waiting = pin!(waiter.acquire(&key));
            tokio::select! {
                _ = &mut waiting => panic!("the lock is held"),
                () = wait_registered(&cluster, &key, 3) => {}
            }
        }
        End::Error => {
            let waiting = tokio::spawn({
                let (waiter, key) = (waiter.clone(), key.clone());
                async move { waiter.acquire(&key).await }
            });
            wait_registered(&cluster, &key, 3).await;
            // The holder's keys vanish without a release (no notice is published), and
            // the waiting call's own client takes the free lock long before the call's
            // next refresh (3.3 s) could: the call ends with AlreadyHeld.
            for server in cluster.servers() {
                let _: () = raw(&server.url()).await.del(&key).await.unwrap();
            }
            let own = waiter.try_acquire(&key).await.unwrap();
            let err = timeout(Duration::from_secs(2), waiting)
                .await
                .expect("the call ends when its own client takes the lock")
                .unwrap()
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
            own.release().await.unwrap();
        }
        End::Lease => {
            let waiting = tokio::spawn({
                let (waiter, key) = (waiter.clone(), key.clone());
                async move { waiter.acquire(&key).await }
            });
            wait_registered(&cluster, &key, 3).await;
            // Master 2 holds a foreign key: the release hands the lock to the waiter on
            // masters 0 and 1 only, and master 2 refuses its confirm and keeps its
            // registration, which only the call's `Dequeue` removes.
            let mut conn = raw(&cluster.server(2).url()).await;
            let _: () = conn.pset_ex(&key, "foreign", 60_000).await.unwrap();
            lease.release().await.unwrap();
            let taken = timeout(Duration::from_secs(3), waiting)
                .await
                .expect("handed over well before the waiter's refresh (3.3 s)")
                .unwrap()
                .unwrap();
            let granted: Vec<bool> = taken
                .masters()
                .iter()
                .map(|r| r.outcome().is_granted())
                .collect();
            assert_eq!(granted, [true, true, false]);
            let left = registrations_gone(&cluster, &key, end).await;
            taken.release().await.unwrap();
            return left;
        }
    }
    let left = registrations_gone(&cluster, &key, end).await;
    let _ = lease.release().await;
    left
}

/// Every way a call ends: each must remove its registration within the bound.
const EVERY_END: [End; 4] = [End::Budget, End::Dropped, End::Error, End::Lease];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_waiter_ends_removes_its_registration() {
    let mut left = Vec::new();
    for end in EVERY_END {
        if let Err(found) = waiter_ending(end, None).await {
            left.push(found);
        }
    }
    assert!(left.is_empty(), "{}", left.join("\n"));
}

/// The planted bug leaves the registration behind whichever way the call ends: each of
/// the checks above can fail.
#[cfg(redquorum_mutants)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dequeue_never_sent_mutant_is_caught() {
    for end in EVERY_END {
        let caught = waiter_ending(end, Some(Mutant::DequeueNeverSent)).await;
        assert!(caught.is_err(), "{end:?}: the planted bug went unnoticed");
    }
}

/// Runs `waiters` fair waiters of one lock, spread over eight clients, each arriving once
/// the one before it is registered on a quorum of masters (read from the masters), while
/// a holder keeps the lock; then releases it, calling `midway` once half of them were
/// served. Returns the order in which they were served.
async fn fair_run(
    cluster: &mut Cluster,
    waiters: usize,
    midway: impl FnOnce(&mut Cluster),
) -> (Vec<usize>, String) {
    let quorum = cluster.len() / 2 + 1;
    let holder = client(cluster).ttl("20s").build().unwrap();
    let clients: Vec<Redlock> = (0..8)
        .map(|_| {
            brisk(cluster)
                .ttl("20s")
                .waiting(Waiting::new().own_leases(true))
                .build()
                .unwrap()
        })
        .collect();
    let key = unique_key("fair");
    let lease = holder.acquire(&key).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let client = clients[i % clients.len()].clone();
        let (task_key, served) = (key.clone(), Arc::clone(&served));
        tasks.push(tokio::spawn(async move {
            let key = task_key;
            let options = AcquireOptions::new().fair(true).wait_timeout("30s");
            let lease = client.acquire_with(&key, &options).await?;
            served.lock().unwrap().push(i);
            lease.release().await
        }));
        wait_until(Duration::from_secs(5), "the waiter registered", || {
            let (cluster, key) = (&*cluster, &key);
            async move { queued_on(cluster, key, i + 1).await >= quorum }
        })
        .await;
    }
    lease.release().await.unwrap();
    wait_until(Duration::from_secs(10), "half of them served", || {
        let served = Arc::clone(&served);
        async move { served.lock().unwrap().len() >= waiters / 2 }
    })
    .await;
    midway(cluster);
    for task in tasks {
        timeout(Duration::from_secs(20), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    (served.lock().unwrap().clone(), key)
}

// Checks I19 (fair waiters are granted in ticket order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_serves_its_waiters_in_ticket_order() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let (order, key) = fair_run(&mut cluster, 200, |_| {}).await;
    assert_eq!(order, (0..200).collect::<Vec<_>>());
    // Tickets 1 to 200, one per waiter, issued without conflict; the counter stays.
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let counter: Option<u64> = conn.get(ticket_key(&key)).await.unwrap();
        assert_eq!(counter, Some(200));
    }
}

// Checks I19 (fair waiters are granted in ticket order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_keeps_its_order_when_a_minority_of_masters_dies() {
    let mut cluster = Cluster::start(5).await.unwrap();
    let (order, _) = fair_run(&mut cluster, 200, |cluster| {
        cluster.server_mut(1).kill().unwrap();
        cluster.server_mut(3).kill().unwrap();
    })
    .await;
    assert_eq!(order, (0..200).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfair_waiters_are_served_in_the_order_they_queued() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("arrival");
    let lease = holder.acquire(&key).await.unwrap();
    // Three unfair waiters queue one after the other, each once the one before it is
    // registered on every master; each is its own client, and only a hand-off wakes it.
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for (n, name) in ["first", "second", "third"].into_iter().enumerate() {
        let waiter = patient(&cluster).build().unwrap();
        waiting.push(tokio::spawn({
            let (key, served) = (key.clone(), Arc::clone(&served));
            async move {
                let options = AcquireOptions::new().wait_timeout("20s");
                let lease = waiter.acquire_with(&key, &options).await.unwrap();
                served.lock().unwrap().push(name);
                lease.release().await.unwrap();
            }
        }));
        wait_until(Duration::from_secs(5), "the waiter registered", || {
            let (cluster, key) = (&cluster, &key);
            async move { queued_on(cluster, key, n + 1).await == 3 }
        })
        .await;
    }
    // Every master orders them by arrival: a newcomer's ticket is above the counter its
    // refused attempt read, which the waiters before it raised.
    let order: Vec<Vec<String>> = {
        let mut order = Vec::new();
        for server in cluster.servers() {
            order.push(members(server, &key).await);
        }
        order
    };
    assert!(order.windows(2).all(|w| w[0] == w[1]), "{order:?}");
    lease.release().await.unwrap();
    for task in waiting {
        timeout(Duration::from_secs(10), task)
            .await
            .expect("each handed the lock in turn")
            .unwrap();
    }
    assert_eq!(*served.lock().unwrap(), ["first", "second", "third"]);
    wait_until(Duration::from_secs(2), "nothing left", || {
        no_waiter_left(&cluster, &key)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_while_the_registration_round_runs_is_not_lost() {
    let cluster = Cluster::start(3).await.unwrap();
    // The waiter reaches the third master through a proxy that delays what it sends by
    // 2 s: its registration round waits for that answer until the node timeout (200 ms),
    // long after the other two masters registered it, and the holder releases meanwhile.
    // A notice from the third master comes too late to matter.
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    proxy.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(Duration::from_secs(2), Duration::ZERO),
    });
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(1).url(),
        proxy.url(),
    ];
    let waiter = Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("30s").jitter("1ms"))
        .waiting(Waiting::new().waiter_ttl("4500ms"))
        .build()
        .unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("early_notice");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    wait_until(
        Duration::from_secs(5),
        "registered on the two direct masters",
        || {
            let cluster = &cluster;
            let key = &key;
            async move {
                !members(cluster.server(0), key).await.is_empty()
                    && !members(cluster.server(1), key).await.is_empty()
            }
        },
    )
    .await;
    // The two direct masters hand the key to the waiter and notify it while its
    // registration round still waits for the delayed answer.
    lease.release().await.unwrap();
    // Its refresh comes after 1.5 s and its retry pause is 30 s: only the notices it got
    // before it began to wait can wake it sooner.
    let taken = timeout(Duration::from_millis(1400), waiting)
        .await
        .expect("the notices that came during the registration round are remembered")
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
    proxy.set_mode(Mode::Pass);
}

#[tokio::test]
async fn a_holder_that_never_releases_is_passed_by_the_refresh() {
    let cluster = Cluster::start(3).await.unwrap();
    // The holder's release is never sent: its lease is forgotten, its key lives 1 s.
    let holder = client(&cluster).ttl("1s").build().unwrap();
    let key = unique_key("crashed");
    let lease = holder.acquire(&key).await.unwrap();
    std::mem::forget(lease);
    let waiter = patient(&cluster)
        .ttl("1s")
        .waiting(Waiting::new().waiter_ttl("900ms"))
        .build()
        .unwrap();
    let started = Instant::now();
    let options = AcquireOptions::new().wait_timeout("5s");
    let taken = waiter.acquire_with(&key, &options).await.unwrap();
    // The holder's key expires within 1 s; the next refresh (every 300 ms) hands it to
    // the waiter. Its retry pause is 30 s: no timer did it.
    assert!(started.elapsed() < Duration::from_millis(2500));
    taken.release().await.unwrap();
}

/// A release that ran on a master before an earlier waiter registered there hands the key
/// to a waiter behind it. When several waiters register at once (a burst of fair
/// contenders), the masters can hand the key to different waiters, none of them on a
/// quorum, and everyone would wait for the handed keys to expire (one waiter TTL). The
/// head's own registration takes such a key instead. Here a waiter queued with a far
/// larger score (as a stale or out-of-turn registration leaves one) has the key handed to
/// it on every master for 20 s; a new waiter, fair or not, queues ahead of it (the ticket
/// counters are below that score) and is served at once, well within its 2 s budget.
#[tokio::test]
async fn the_head_takes_a_key_handed_to_a_waiter_behind_it() {
    let cluster = Cluster::start(3).await.unwrap();
    for fair in [true, false] {
        let key = unique_key("handed-behind");
        for server in cluster.servers() {
            let mut conn = raw(&server.url()).await;
            let _: () = conn.zadd(queue_key(&key), "behind", 1000).await.unwrap();
            let _: () = conn
                .pset_ex(
                    format!("{}behind", waiter_prefix(&key)),
                    "20000 redquorum:handoff:nobody",
                    20_000,
                )
                .await
                .unwrap();
            let _: () = conn.pset_ex(&key, "behind", 20_000).await.unwrap();
        }
        let waiter = patient(&cluster).build().unwrap();
        let options = AcquireOptions::new().fair(fair).wait_timeout("2s");
        let lease = waiter
            .acquire_with(&key, &options)
            .await
            .unwrap_or_else(|e| panic!("fair={fair}: the key handed behind was not taken: {e}"));
        lease.release().await.unwrap();
        waiter.shutdown().await;
    }
}

/// Eight fair contenders asking at once, ten times over, on five masters. Their ticket
/// rounds conflict, and a release can run on a master before the true head registered
/// there or while a retried ticket still has an older score there: the masters then hand
/// the key to different waiters, none on a quorum. The head's registration takes such a
/// key, another waiter's passes it on to the head, and a retried ticket is written again
/// everywhere, so all eight are served at once; before, everyone stalled until a refresh
/// (every 1.5 s with this waiter TTL) or the handed keys' expiry (4.5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_fair_contenders_is_served_without_waiting_for_a_refresh() {
    let cluster = Cluster::start(5).await.unwrap();
    for burst in 0..10 {
        let mut clients = Vec::new();
        for _ in 0..8 {
            let client = patient(&cluster).build().unwrap();
            // Connected (and subscribed) before the burst.
            let warm = client.acquire(&unique_key("burst-warm")).await.unwrap();
            warm.release().await.unwrap();
            clients.push(client);
        }
        let key = unique_key("burst");
        let (go, ready) = tokio::sync::watch::channel(false);
        let tasks: Vec<_> = clients
            .into_iter()
            .map(|client| {
                let (key, mut ready) = (key.clone(), ready.clone());
                tokio::spawn(async move {
                    let _ = ready.wait_for(|go| *go).await;
                    let options = AcquireOptions::new().fair(true).wait_timeout("5s");
                    let ok = match client.acquire_with(&key, &options).await {
                        Ok(lease) => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            lease.release().await.is_ok()
                        }
                        Err(_) => false,
                    };
                    client.shutdown().await;
                    ok
                })
            })
            .collect();
        let started = Instant::now();
        go.send(true).unwrap();
        for task in tasks {
            assert!(task.await.unwrap(), "burst {burst}: an acquire failed");
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "burst {burst}: eight fair contenders took {took:?}: a stall on split hand-offs"
        );
    }
}

#[tokio::test]
async fn a_head_that_dies_is_passed_by() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("dead-head");

    // A registration written by hand at the head of the queue, never refreshed: its
    // liveness key expires after 300 ms.
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = conn.zadd(queue_key(&key), "dead", 1).await.unwrap();
        let _: () = conn
            .pset_ex(
                format!("{}dead", waiter_prefix(&key)),
                "300 redquorum:handoff:nobody",
                300,
            )
            .await
            .unwrap();
    }
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = brisk(&cluster)
        .retry(Retry::new().delay("30s"))
        .build()
        .unwrap();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { waiter.acquire(&key).await }
    });
    wait_until(Duration::from_secs(5), "the waiter registered", || {
        let (cluster, key) = (&cluster, &key);
        async move { queued_on(cluster, key, 2).await == 3 }
    })
    .await;
    // Released while the dead head may still be live: handed to it, or (once its key
    // expired) to the waiter. Either way the waiter is served within one waiter TTL
    // (900 ms) plus one refresh period (300 ms), with margin.
    let released = Instant::now();
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_secs(3), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(3));
    taken.release().await.unwrap();
}

/// A holder's key expires without a release while two fair waiters are queued; the head's
/// own refresh takes the free key (a self-hand), and the head dies before it confirms: its
/// replies are held back from the self-hand on, then its links go silent, so neither its
/// confirm nor its `Dequeue` reaches a master. The self-handed key expires with the head's
/// waiter TTL, and the next waiter's refresh takes it: it is served within one waiter TTL
/// (900 ms), one TTL (1 s) and one refresh period (300 ms) of the head's death. A
/// self-hand with no expiry would keep the lock for the dead head for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_dies_between_its_self_hand_and_its_confirm_is_passed_by() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("self-handed");
    let holder = client(&cluster).ttl("1s").build().unwrap();
    std::mem::forget(holder.acquire(&key).await.unwrap());
    let mut proxies = Vec::new();
    for server in cluster.servers() {
        proxies.push(Proxy::for_server(server).await.unwrap());
    }
    let head = Redlock::builder()
        .quarantine(false)
        .masters(proxies.iter().map(Proxy::url).collect::<Vec<_>>())
        .ttl("1s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("30s").jitter("1ms").attempts(10_000))
        .waiting(Waiting::new().waiter_ttl("900ms"))
        .build()
        .unwrap();
    let next = client(&cluster)
        .ttl("1s")
        .retry(Retry::new().delay("30s").jitter("1ms").attempts(10_000))
        .waiting(Waiting::new().waiter_ttl("900ms"))
        .build()
        .unwrap();
    let fair = AcquireOptions::new().fair(true).wait_timeout("20s");
    let dying = tokio::spawn({
        let (head, key, fair) = (head.clone(), key.clone(), fair.clone());
        async move { head.acquire_with(&key, &fair).await }
    });
    wait_registered(&cluster, &key, 3).await;
    let head_id = members(cluster.server(0), &key).await.remove(0);
    let waiting = tokio::spawn({
        let (next, key, fair) = (next.clone(), key.clone(), fair.clone());
        async move { next.acquire_with(&key, &fair).await }
    });
    wait_until(Duration::from_secs(5), "the next waiter queued", || {
        let (cluster, key) = (&cluster, &key);
        async move { queued_on(cluster, key, 2).await == 3 }
    })
    .await;
    // The head's requests still arrive, its replies no longer do: its refresh takes the
    // free key once the holder's expired, and it never learns it.
    for proxy in &proxies {
        proxy.set_mode(Mode::Delay {
            to_server: Latency::ZERO,
            to_client: Latency::new(Duration::from_secs(60), Duration::ZERO),
        });
    }
    wait_until(
        Duration::from_secs(3),
        "the head's refresh took the key",
        || held_everywhere(&cluster, &key, &head_id),
    )
    .await;
    for proxy in &proxies {
        proxy.set_mode(Mode::Blackhole);
    }
    let died = Instant::now();
    let bound = Duration::from_millis(900 + 1000 + 300);
    let served = timeout(bound, waiting).await;
    let verdict = match served {
        Ok(done) => {
            let lease = done.unwrap().unwrap();
            lease.release().await.unwrap();
            Ok(died.elapsed())
        }
        Err(_) => {
            let mut state = Vec::new();
            for server in cluster.servers() {
                let mut conn = raw(&server.url()).await;
                let held: Option<String> = conn.get(&key).await.unwrap();
                let pttl: i64 = conn.pttl(&key).await.unwrap();
                let queue: Vec<String> = conn.zrange(queue_key(&key), 0, -1).await.unwrap();
                state.push(format!("{held:?} pttl {pttl} {queue:?}"));
            }
            Err(state)
        }
    };
    dying.abort();
    let took = verdict.unwrap_or_else(|state| {
        panic!(
            "the next waiter was not served within {bound:?} of the head's death after its \
             self-hand (held, pttl, queue per master): {state:?}"
        )
    });
    assert!(took < bound, "{took:?}");
}

/// A fair waiter at the head of the queue (the first to queue), handed the lock and
/// dropped before it confirms, while a second waiter is already queued behind it on
/// every master: the head's `Dequeue` hands the key on to the second waiter, which is
/// served at once. Both waiters are [`long_lived`]: the key handed to the dropped head
/// would live 10 s, and so would its registration, and the second waiter refreshes only
/// every 3.3 s, so neither an expiry nor a refresh serves it within the 2 s bound; and as
/// it queued before the head left, it cannot find the key free on its first attempt
/// either. Returns what is wrong if the second waiter is not served within the bound.
async fn a_dropped_head_passes_the_key_on(mutant: Option<Mutant>) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("dropped-head");
    let lease = holder.acquire(&key).await.unwrap();
    let first = long_lived(&cluster, mutant);
    let second = long_lived(&cluster, mutant);
    let fair = AcquireOptions::new().fair(true);
    let mut dropped = Box::pin(first.acquire_with(&key, &fair));
    tokio::select! {
        _ = &mut dropped => panic!("the lock is held"),
        () = wait_registered(&cluster, &key, 3) => {}
    }
    let head = members(cluster.server(0), &key).await.remove(0);
    lease.release().await.unwrap();
    wait_until(Duration::from_secs(2), "the key handed to the head", || {
        held_everywhere(&cluster, &key, &head)
    })
    .await;
    // The head is not polled again: it never confirms. The second waiter queues behind
    // it on every master (queue member and liveness key) before the head is dropped.
    let waiting = tokio::spawn({
        let (second, key) = (second.clone(), key.clone());
        async move { second.acquire(&key).await }
    });
    wait_until(
        Duration::from_secs(5),
        "the second waiter queued behind the head on every master",
        || {
            let (cluster, key) = (&cluster, &key);
            async move {
                registrations(cluster, key)
                    .await
                    .iter()
                    .all(|(queue, live)| queue.len() == 2 && live.len() == 2)
            }
        },
    )
    .await;
    assert!(
        !waiting.is_finished(),
        "the second waiter was served past the head"
    );
    drop(dropped);
    let verdict = match timeout(Duration::from_secs(2), waiting).await {
        Ok(done) => {
            done.unwrap().unwrap().release().await.unwrap();
            Ok(())
        }
        Err(_) => {
            let mut state = Vec::new();
            for server in cluster.servers() {
                let mut conn = raw(&server.url()).await;
                let held: Option<String> = conn.get(&key).await.unwrap();
                let queue: Vec<String> = conn.zrange(queue_key(&key), 0, -1).await.unwrap();
                state.push(format!("{held:?} {queue:?}"));
            }
            Err(format!(
                "the second waiter, queued behind {head}, was not served within 2 s after \
                 {head} left (held, queue per master): {state:?}"
            ))
        }
    };
    second.shutdown().await;
    verdict
}

#[tokio::test]
async fn a_head_dropped_after_it_was_handed_the_lock_passes_it_on() {
    a_dropped_head_passes_the_key_on(None).await.unwrap();
}

#[cfg(redquorum_mutants)]
#[tokio::test]
async fn a_dropped_head_that_sends_no_dequeue_is_caught() {
    let caught = a_dropped_head_passes_the_key_on(Some(Mutant::DequeueNeverSent)).await;
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn fenced_waiters_handed_the_lock_get_increasing_tokens() {
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let fenced = || {
        Redlock::builder()
            .masters(cluster.urls())
            .ttl("5s")
            .timeouts(Timeouts::new().node("200ms"))
            .waiting(Waiting::new().waiter_ttl("900ms"))
            .fencing(true)
            .build()
            .unwrap()
    };
    fenced().init_cluster().await.unwrap();
    let key = unique_key("fenced");
    let holder = fenced();
    let lease = holder.acquire(&key).await.unwrap();
    let first = lease.fencing_token().unwrap();
    let mut waiting = Vec::new();
    for i in 0..3 {
        let (waiter, task_key) = (fenced(), key.clone());
        waiting.push(tokio::spawn(async move {
            let options = AcquireOptions::new().fair(true).wait_timeout("10s");
            let lease = waiter.acquire_with(&task_key, &options).await.unwrap();
            let token = lease.fencing_token().unwrap();
            lease.release().await.unwrap();
            token
        }));
        wait_until(Duration::from_secs(5), "the waiter registered", || {
            let (cluster, key) = (&cluster, &key);
            async move { queued_on(cluster, key, i + 1).await == 3 }
        })
        .await;
    }
    lease.release().await.unwrap();
    let mut tokens = vec![first];
    for task in waiting {
        tokens.push(
            timeout(Duration::from_secs(10), task)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // Served in ticket order, each confirm writing its own token back.
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[tokio::test]
async fn bad_waiter_ttls_and_fair_misuse_are_refused() {
    let base = || {
        Redlock::builder()
            .master("redis://127.0.0.1:1")
            .ttl("10s")
            .timeouts(Timeouts::new().node("50ms"))
    };
    for (given, expected) in [
        ("0s", "waiter_ttl is zero"),
        ("150ms", "waiter_ttl 150ms is out of range"),
        ("11s", "waiter_ttl 11s is out of range"),
        ("100days", "waiter_ttl"),
    ] {
        let err = base()
            .waiting(Waiting::new().waiter_ttl(given))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains(expected), "{given}: {err}");
        assert!(err.to_string().contains("waiter_ttl"), "{err}");
    }
    assert!(
        ((base()
            .waiting(Waiting::new().waiter_ttl("0s"))
            .build()
            .unwrap_err())
        .setting()
            == Some("waiter_ttl")
            && (base()
                .waiting(Waiting::new().waiter_ttl("0s"))
                .build()
                .unwrap_err())
            .to_string()
            .contains("is zero"))
    );
    assert!(
        ((base()
            .waiting(Waiting::new().waiter_ttl("100days"))
            .build()
            .unwrap_err())
        .setting()
            == Some("waiter_ttl")
            && (base()
                .waiting(Waiting::new().waiter_ttl("100days"))
                .build()
                .unwrap_err())
            .to_string()
            .contains("above its maximum"))
    );
    assert!(
        ((base()
            .waiting(Waiting::new().waiter_ttl("150ms"))
            .build()
            .unwrap_err())
        .setting()
            == Some("waiter_ttl")
            && (base()
                .waiting(Waiting::new().waiter_ttl("150ms"))
                .build()
                .unwrap_err())
            .to_string()
            .contains("out of range"))
    );
    // Just above three node timeouts, and the TTL itself, are fine.
    base()
        .waiting(Waiting::new().waiter_ttl("151ms"))
        .build()
        .unwrap();
    base()
        .waiting(Waiting::new().waiter_ttl("10s"))
        .build()
        .unwrap();
    // The default follows the TTL and the node timeout.
    let shown = format!("{:?}", base().build().unwrap());
    assert!(shown.contains("waiter_ttl: 1s"), "{shown}");
    assert!(shown.contains("handoff: true"), "{shown}");
    let shown = format!("{:?}", base().ttl("2s").build().unwrap());
    assert!(shown.contains("waiter_ttl: 200ms"), "{shown}");

    // fair(true) only for the lock of one resource: refused before any round trip (the
    // master does not exist), not retryable.
    let client = base().build().unwrap();
    let fair = AcquireOptions::new().fair(true);
    let errors = [
        client
            .acquire_many_with(&["a", "b"], &fair)
            .await
            .unwrap_err(),
        client
            .semaphore("jobs", 2)
            .unwrap()
            .acquire_with(1, &fair)
            .await
            .unwrap_err(),
        client.rwlock("cfg").read_with(&fair).await.unwrap_err(),
        client.rwlock("cfg").write_with(&fair).await.unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("fair(true)"), "{err}");
    }
}

/// The planted bugs of the mechanism, each shown on real masters; the chaos suite and the
/// simulation hunt them with their checkers.
#[cfg(redquorum_mutants)]
mod planted {
    use super::*;

    // Checks I18 (hand-off never gives two waiters a quorum).
    #[tokio::test]
    async fn a_confirm_that_keeps_the_hand_off_expiry_leaves_short_keys_behind_a_long_lease() {
        let cluster = Cluster::start(3).await.unwrap();
        let holder = client(&cluster).build().unwrap();
        let key = unique_key("keepttl");
        for (mutant, short) in [
            (None, false),
            (Some(Mutant::ConfirmKeepsHandoffExpiry), true),
        ] {
            let waiter = brisk(&cluster).build().unwrap();
            if let Some(mutant) = mutant {
                waiter.plant(mutant);
            }
            let lease = holder.acquire(&key).await.unwrap();
            let waiting = tokio::spawn({
                let (waiter, key) = (waiter.clone(), key.clone());
                async move { waiter.acquire(&key).await }
            });
            wait_registered(&cluster, &key, 3).await;
            lease.release().await.unwrap();
            let taken = timeout(Duration::from_secs(2), waiting)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            // The client counts its validity from the confirm round: about the 5 s TTL.
            assert!(taken.remaining() > Duration::from_secs(4));
            wait_until(
                Duration::from_secs(2),
                "the lease is on every master",
                || held_everywhere(&cluster, &key, taken.value()),
            )
            .await;
            for server in cluster.servers() {
                let mut conn = raw(&server.url()).await;
                let pttl: i64 = conn.pttl(&key).await.unwrap();
                // Planted: the handed key's 900 ms expiry, far below the lease's validity.
                assert_eq!(pttl <= 900, short, "{mutant:?}: {pttl} ms");
            }
            taken.release().await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_hand_off_that_ignores_liveness_stalls_behind_a_dead_head() {
        let cluster = Cluster::start(3).await.unwrap();
        let key = unique_key("liveness");
        // A dead waiter at the head of every master's queue: no liveness key, and a score
        // below any ticket a live waiter takes (1 and up).
        for server in cluster.servers() {
            let mut conn = raw(&server.url()).await;
            let _: () = conn.zadd(queue_key(&key), "dead", 0).await.unwrap();
        }
        let planted = || {
            let client = brisk(&cluster)
                .retry(Retry::new().delay("30s"))
                .build()
                .unwrap();
            client.plant(Mutant::HandoffIgnoresLiveness);
            client
        };
        let holder = planted();
        let waiter = planted();
        let lease = holder.acquire(&key).await.unwrap();
        let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("1500ms"));
        wait_until(Duration::from_secs(5), "the waiter registered", || {
            let (cluster, key) = (&cluster, &key);
            async move { queued_on(cluster, key, 2).await == 3 }
        })
        .await;
        lease.release().await.unwrap();
        // Handed to the dead head (nobody), never to the live waiter behind it: the lock
        // lies free, yet the waiter's refreshes never hand it over.
        let err = waiting.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
        for server in cluster.servers() {
            assert_eq!(
                members(server, &key).await.first().map(String::as_str),
                Some("dead")
            );
        }
        // The product's scripts prune the dead head: a waiter of its own is served.
        let lease = holder.acquire(&key).await.unwrap();
        let product = brisk(&cluster)
            .retry(Retry::new().delay("30s"))
            .build()
            .unwrap();
        let waiting = tokio::spawn({
            let (product, key) = (product.clone(), key.clone());
            async move { product.acquire(&key).await }
        });
        wait_registered(&cluster, &key, 3).await;
        lease.release().await.unwrap();
        let taken = timeout(Duration::from_secs(3), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        taken.release().await.unwrap();
    }

    // Checks I19 (fair waiters are granted in ticket order).
    #[tokio::test]
    async fn fair_by_arrival_scores_a_waiter_differently_on_each_master() {
        let cluster = Cluster::start(3).await.unwrap();
        let holder = client(&cluster).build().unwrap();
        for (mutant, agree) in [(None, true), (Some(Mutant::FairByArrival), false)] {
            let key = unique_key("arrival");
            // One master has seen more arrivals than the others.
            let mut conn = raw(&cluster.server(0).url()).await;
            let _: () = conn.set(ticket_key(&key), 50).await.unwrap();
            let waiter = brisk(&cluster).build().unwrap();
            if let Some(mutant) = mutant {
                waiter.plant(mutant);
            }
            let lease = holder.acquire(&key).await.unwrap();
            let mut waiting = pin!(async {
                let options = AcquireOptions::new().fair(true).wait_timeout("5s");
                waiter.acquire_with(&key, &options).await
            });
            let registered = async {
                wait_registered(&cluster, &key, 3).await;
            };
            tokio::select! {
                _ = &mut waiting => panic!("the lock is held"),
                () = registered => {}
            }
            let mut scores = Vec::new();
            for server in cluster.servers() {
                let mut conn = raw(&server.url()).await;
                let scored: Vec<(String, f64)> = conn
                    .zrange_withscores(queue_key(&key), 0, -1)
                    .await
                    .unwrap();
                scores.push(scored[0].1);
            }
            // The product scores by the ticket its client issued (51 everywhere); planted,
            // each master by its own count of arrivals.
            assert_eq!(scores.iter().all(|s| *s == scores[0]), agree, "{scores:?}");
            lease.release().await.unwrap();
            let taken = timeout(Duration::from_secs(3), &mut waiting)
                .await
                .unwrap()
                .unwrap();
            taken.release().await.unwrap();
        }
    }
}

/// `count` dead registrations (no liveness key) written by hand at the head of `key`'s
/// queue on every master, with scores below any ticket a client takes.
async fn dead_fleet(cluster: &Cluster, key: &str, count: usize) {
    let members: Vec<(u64, String)> = (0..count).map(|i| (0, format!("dead-{i:05}"))).collect();
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = conn.zadd_multiple(queue_key(key), &members).await.unwrap();
    }
}

/// A killed fleet of 200 waiters left dead registrations at the head of the queue: a fair
/// newcomer is still refused while a live fair waiter queued behind them waits, and the
/// release hands the lock to that waiter at once (the scripts used to give up pruning
/// after 64 members, grant the newcomer, and hand the key to no one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_fleet_at_the_head_neither_admits_a_fair_newcomer_nor_stalls_the_hand_off() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("dead-fleet");
    let lease = holder.acquire(&key).await.unwrap();
    // Live fair waiter: its first refresh is 1.5 s away (waiter TTL 4.5 s).
    let waiter = patient(&cluster).build().unwrap();
    let waiting = spawn_acquire(
        &waiter,
        &key,
        AcquireOptions::new().fair(true).wait_timeout("20s"),
    );
    wait_registered(&cluster, &key, 3).await;
    dead_fleet(&cluster, &key, 200).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_millis(1000), waiting)
        .await
        .expect("handed over at the release, not at a refresh 1.5 s later")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_millis(1000));
    // The fleet is pruned on every master the release reached.
    for server in cluster.servers() {
        let queued = members(server, &key).await;
        assert!(
            queued.iter().all(|m| !m.starts_with("dead-")),
            "dead members left: {}",
            queued.len()
        );
    }
    taken.release().await.unwrap();

    // Now a fleet too large for one script run (600 dead) before a live fair waiter,
    // with the lock free: a fair newcomer must be refused on every master.
    let key = unique_key("dead-fleet-large");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = spawn_acquire(
        &waiter,
        &key,
        AcquireOptions::new().fair(true).wait_timeout("20s"),
    );
    wait_registered(&cluster, &key, 3).await;
    dead_fleet(&cluster, &key, 600).await;
    lease.release().await.unwrap();
    // One fair attempt, which does not queue.
    let newcomer = patient(&cluster).build().unwrap();
    let fair_once = AcquireOptions::new().fair(true).attempts(1);
    let refused = newcomer.acquire_with(&key, &fair_once).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Contended, "{refused}");
    // The live waiter's refreshes prune on (256 a run) until it heads, then take the key:
    // within two refresh periods (1.5 s each) of the release, with margin below its
    // 20 s budget.
    let taken = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the live waiter is served once its refreshes pruned the fleet")
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
}

/// A killed fleet too large for one script run (600 dead) at the head of the queue while
/// a lease holds the lock: the live waiter's refreshes prune it meanwhile (256 a run,
/// every 300 ms), so the release finds the live waiter at the head and hands the lock to
/// it at once, not at the refresh after the release (docs/design.md §17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_under_a_lease_clear_a_dead_fleet_before_the_release() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster)
        .ttl(Duration::from_secs(20))
        .build()
        .unwrap();
    let key = unique_key("dead-fleet-held");
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = brisk(&cluster).build().unwrap();
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    wait_registered(&cluster, &key, 3).await;
    dead_fleet(&cluster, &key, 600).await;
    // Three refreshes prune it; the lease lives 20 s, and the release alone would prune
    // only 256.
    wait_until(
        Duration::from_secs(3),
        "the refreshes pruned the fleet",
        || {
            let (cluster, key) = (&cluster, &key);
            async move {
                for server in cluster.servers() {
                    if members(server, key)
                        .await
                        .iter()
                        .any(|m| m.starts_with("dead-"))
                    {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    lease.release().await.unwrap();
    // The release finds the live waiter at the head and hands the key on at once.
    let taken = timeout(Duration::from_millis(250), waiting)
        .await
        .expect("handed over at the release")
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
}

/// Releasing a lease over several resources, and an operator's `force_unlock_any`, hand
/// each lock to its queued waiter as a plain release does: the waiter is served at once,
/// not at its next refresh (1.5 s away).
#[tokio::test]
async fn many_key_releases_and_force_unlocks_hand_the_lock_on() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let waiter = patient(&cluster).build().unwrap();
    let (key, other) = (unique_key("many-handed"), unique_key("many-other"));
    let serve = |key: String| {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let options = AcquireOptions::new().wait_timeout("20s");
            waiter.acquire_with(&key, &options).await
        })
    };

    let lease = holder.acquire_many(&[&key, &other]).await.unwrap();
    let waiting = serve(key.clone());
    wait_registered(&cluster, &key, 3).await;
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_millis(1000), waiting)
        .await
        .expect("the many-key release handed the lock on")
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();

    let _lease = holder.acquire(&key).await.unwrap();
    let waiting = serve(key.clone());
    wait_registered(&cluster, &key, 3).await;
    holder.force_unlock_any(&key).await.unwrap();
    let taken = timeout(Duration::from_millis(1000), waiting)
        .await
        .expect("the force-unlock handed the lock on")
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
    wait_until(Duration::from_secs(2), "nothing left", || {
        no_waiter_left(&cluster, &key)
    })
    .await;
}

/// Forty fair contenders arriving at once behind a holder: their ticket rounds conflict
/// with each other, which spends rounds, never the call. Every one queues and is served in
/// turn within its budget; none gives up with `Contended` (16 did after about 80 ms, when a
/// fixed count of ticket rounds ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_forty_fair_contenders_all_queue_and_are_served() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("fair-burst-40");
    let lease = holder.acquire(&key).await.unwrap();
    let clients: Vec<Redlock> = (0..40)
        .map(|_| {
            client(&cluster)
                .waiting(Waiting::new().waiter_ttl("3s"))
                .build()
                .unwrap()
        })
        .collect();
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let contenders: Vec<_> = clients
        .iter()
        .cloned()
        .map(|c| {
            let (key, start, ended) = (key.clone(), Arc::clone(&start), Arc::clone(&ended));
            tokio::spawn(async move {
                let fair = AcquireOptions::new().fair(true).wait_timeout("60s");
                start.wait().await;
                let acquired = c.acquire_with(&key, &fair).await;
                ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let lease = acquired?;
                tokio::time::sleep(Duration::from_millis(1)).await;
                lease.release().await?;
                Ok::<_, redquorum::Error>(())
            })
        })
        .collect();
    // Let every contender take its place (or give up) before the holder lets go.
    wait_until(
        Duration::from_secs(10),
        "every contender queued or ended",
        || {
            let (cluster, key, ended) = (&cluster, &key, &ended);
            async move {
                let queued = members(cluster.server(0), key).await.len();
                queued + ended.load(std::sync::atomic::Ordering::Relaxed) >= 40
            }
        },
    )
    .await;
    lease.release().await.unwrap();
    let mut failures = Vec::new();
    for contender in contenders {
        match timeout(Duration::from_secs(30), contender).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => failures.push(format!("{:?}: {e}", e.kind())),
            Ok(Err(join)) => failures.push(format!("panicked: {join}")),
            Err(_) => failures.push("not served within 30 s".to_owned()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 40 failed: {failures:#?}",
        failures.len()
    );
}

/// EVALSHA calls `server` has answered so far.
async fn evalsha_calls(server: &Server) -> u64 {
    info(&mut raw(&server.url()).await, "commandstats")
        .await
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .map(|s| s.parse().unwrap())
        .unwrap_or(0)
}

/// A fair waiter whose ticket rounds fail on a quorum without a conflict (two of three
/// masters answer the registration with an error: its queue key holds a string there)
/// spends an attempt per round and pauses as the retry policy says: it ends once its
/// attempts are spent, saying how the masters failed, neither after its whole budget
/// nor as if the lock were merely held, and without a round every millisecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_ticket_rounds_that_fail_without_a_conflict_spend_attempts() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("30s").build().unwrap();
    let key = unique_key("ticket-failing");
    let _lease = holder.try_acquire(&key).await.unwrap();
    for i in [1, 2] {
        let mut conn = raw(&cluster.server(i).url()).await;
        let _: () = conn.set(queue_key(&key), "not a zset").await.unwrap();
    }
    let waiter = client(&cluster).build().unwrap();
    let before = evalsha_calls(cluster.server(0)).await;
    let options = AcquireOptions::new()
        .fair(true)
        .attempts(5)
        .wait_timeout("20s");
    let started = Instant::now();
    let error = waiter.acquire_with(&key, &options).await.unwrap_err();
    let calls = evalsha_calls(cluster.server(0)).await - before;
    assert_ne!(error.kind(), ErrorKind::WaitTimeout, "{error}");
    assert_ne!(error.kind(), ErrorKind::Contended, "{error}");
    assert!(
        error.to_string().contains("no fair ticket issued"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The first attempt, then at most four registration rounds, and what ends the call.
    assert!(
        calls <= 10,
        "{calls} scripts on one master for five attempts"
    );
    waiter.shutdown().await;
}
