//! Hand-off under message orders and partial states the main hand-off tests do not reach
//! (docs/design.md §17): each test states the property it expects of the mechanism.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind, Redlock};
use redquorum_testkit::{Latency, Mode, Proxy};
use support::*;

/// A waiter over `cluster` that never polls (its retry pause is 30 s) and refreshes its
/// registration every 300 ms (waiter TTL 900 ms): only hand-offs and refreshes move it.
fn quiet(cluster: &Cluster) -> Redlock {
    client(cluster)
        .retry(Retry::new().delay("30s").jitter("1ms"))
        .waiting(Waiting::new().waiter_ttl("900ms"))
        .build()
        .unwrap()
}

/// A holder whose lease lives on a bare quorum (its request to one master was lost) and a
/// queued waiter: on the master the holder never reached, the waiter's refresh hands the
/// free key to itself, and its confirm is granted there and refused elsewhere. The
/// waiter must then wait for the holder (a notice, or a later refresh) rather than
/// confirm again and again: every failed confirm releases its value on that master,
/// which hands the key straight back to it and notifies it, and the next confirm fails
/// the same way for as long as the holder holds.
async fn minority_hand_off(fair: bool) {
    let cluster = Cluster::start(3).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(1).url(),
        proxy.url(),
    ];
    let holder = Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .ttl("10s")
        .timeouts(Timeouts::new().node("200ms"))
        .build()
        .unwrap();
    let key = unique_key("minority");
    // Master 2 unreachable for the holder: its lease is on masters 0 and 1 only.
    proxy.set_mode(Mode::Reset);
    let lease = holder.try_acquire(&key).await.unwrap();
    proxy.set_mode(Mode::Pass);
    assert_eq!(value_on(cluster.server(2), &key).await, None);

    // A waiter with a 900 ms waiter TTL (a refresh every 300 ms) and a 30 s retry pause.
    let waiter = quiet(&cluster);
    let options = AcquireOptions::new().fair(fair).wait_timeout("2s");
    let error = waiter.acquire_with(&key, &options).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WaitTimeout, "{error}");
    // In 2 s: the first attempt, about seven refreshes, and at most a confirm after each
    // of them. A confirm loop makes one every few round trips.
    assert!(
        error.attempts() <= 20,
        "{} attempts in 2 s while the lock was held: {error}",
        error.attempts()
    );
    lease.release().await.unwrap();
}

// Checks I18 (hand-off never gives two waiters a quorum).
#[tokio::test]
async fn a_waiter_handed_a_minority_does_not_confirm_in_a_loop() {
    minority_hand_off(false).await;
}

#[tokio::test]
async fn a_fair_waiter_handed_a_minority_does_not_confirm_in_a_loop() {
    minority_hand_off(true).await;
}

/// The waiter TTL a client picks by default is one it would accept if given: above three
/// node timeouts, so that a refresh every third of it finishes in time.
#[test]
fn the_default_waiter_ttl_is_one_the_builder_accepts() {
    for ttl in ["200ms", "300ms", "1s", "10s"] {
        let base = || {
            Redlock::builder()
                .master("redis://127.0.0.1:1")
                .ttl(ttl)
                .timeouts(Timeouts::new().node("50ms"))
        };
        let shown = format!("{:?}", base().build().unwrap());
        let chosen = shown
            .split("waiter_ttl: ")
            .nth(1)
            .and_then(|rest| rest.split([',', ' ', '}']).next())
            .unwrap()
            .to_owned();
        let given = base()
            .waiting(Waiting::new().waiter_ttl(chosen.as_str()))
            .build();
        assert!(
            given.is_ok(),
            "ttl {ttl}: the default waiter_ttl {chosen} is refused when given: {}",
            given.unwrap_err()
        );
    }
}

/// Whether `waiter` is a member of `key`'s queue on `server`.
async fn queued_on_one(server: &redquorum_testkit::Server, key: &str, waiter: &str) -> bool {
    let mut conn = raw(&server.url()).await;
    let score: Option<f64> = conn
        .zscore(format!("redquorum:queue:{key}"), waiter)
        .await
        .unwrap();
    score.is_some()
}

/// Two queued waiters; the holder's release reaches one master late (its path there is
/// slow). The first waiter is handed the lock by the other masters and confirms on them;
/// the late release then hands that master's key to the second waiter. The second
/// waiter must then wait for the new holder, not confirm in a loop for as long as the
/// new holder holds the lock.
#[tokio::test]
async fn a_late_release_does_not_set_the_next_waiter_confirming_in_a_loop() {
    let cluster = Cluster::start(3).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(1).url(),
        proxy.url(),
    ];
    let holder = Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .ttl("10s")
        .timeouts(Timeouts::new().node("200ms"))
        .build()
        .unwrap();
    let key = unique_key("late-release");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "the lease is on every master",
        || held_everywhere(&cluster, &key, lease.value()),
    )
    .await;
    let waiter = || {
        client(&cluster)
            .retry(Retry::new().delay("30s").jitter("1ms"))
            .waiting(Waiting::new().waiter_ttl("900ms"))
            .build()
            .unwrap()
    };
    let (first, second) = (waiter(), waiter());
    let fair = AcquireOptions::new().fair(true).wait_timeout("10s");
    let taking = tokio::spawn({
        let (first, key, fair) = (first.clone(), key.clone(), fair.clone());
        async move { first.acquire_with(&key, &fair).await }
    });
    wait_registered(&cluster, &key, 3).await;
    let waiting = spawn_acquire(
        &second,
        &key,
        AcquireOptions::new().fair(true).wait_timeout("2500ms"),
    );
    wait_until(
        Duration::from_secs(5),
        "the second waiter registered",
        || {
            let (cluster, key) = (&cluster, &key);
            async move { queued_on(cluster, key, 2).await == 3 }
        },
    )
    .await;
    // The release reaches master 2 a second late.
    proxy.set_mode(Mode::delay(Duration::from_secs(1), Duration::ZERO));
    lease.release().await.unwrap();
    let taken = taking.await.unwrap().unwrap();
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WaitTimeout, "{error}");
    // About eight refreshes in 2.5 s, and at most a confirm after each. (The confirm loop
    // makes one every few round trips from the late release on.)
    assert!(
        error.attempts() <= 25,
        "{} attempts in 2.5 s while the lock was held: {error}",
        error.attempts()
    );
    taken.release().await.unwrap();
    proxy.set_mode(Mode::Pass);
}

/// An operator who finds a lock held by a value that is in fact a waiter's id (the key was
/// handed to a waiter that died before confirming) and force-unlocks that value, as the
/// documentation of `inspect` shows: the report says the key was deleted on every master,
/// so the lock must no longer be held by that value.
#[tokio::test]
async fn force_unlocking_a_handed_key_does_not_hand_it_back() {
    let cluster = Cluster::start(3).await.unwrap();
    let operator = client(&cluster).build().unwrap();
    let key = unique_key("handed-dead");
    // A waiter at the head of the queue whose process died: its record lives 4.5 s more.
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = conn
            .zadd(format!("redquorum:queue:{key}"), "dead", 1)
            .await
            .unwrap();
        let _: () = conn
            .pset_ex(
                format!("redquorum:waiter:{key}:dead"),
                "4500 redquorum:handoff:nobody",
                4500,
            )
            .await
            .unwrap();
    }
    let lease = operator.acquire(&key).await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "the lease is on every master",
        || held_everywhere(&cluster, &key, lease.value()),
    )
    .await;
    lease.release().await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "the key handed to the dead head",
        || held_everywhere(&cluster, &key, "dead"),
    )
    .await;
    let inspection = operator.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some("dead"), "{inspection}");
    // The report tells a key handed to a queued waiter from a lease.
    assert!(inspection.handed(), "{inspection}");
    assert!(inspection.to_string().contains("handed to"), "{inspection}");
    assert!(
        inspection.masters().iter().all(|m| m.handed()),
        "{inspection}"
    );
    let report = operator.force_unlock(&key, "dead").await.unwrap();
    assert_eq!(report.deleted(), 3);
    let after = operator.inspect(&key).await.unwrap();
    assert!(!after.handed(), "{after}");
    for server in cluster.servers() {
        assert!(
            !queued_on_one(server, &key, "dead").await,
            "the force-unlocked waiter is still queued: {after}"
        );
    }
    assert_ne!(
        after.holder(),
        Some("dead"),
        "force_unlock reported the key deleted on every master, yet: {after}"
    );
}

/// Two of three masters die while a waiter is queued; the holder's release reaches the
/// survivor only, which hands the key to the waiter. No quorum can be had until a master
/// comes back: the waiter must wait (its refresh, its budget), not confirm against the
/// survivor again and again for the whole outage.
#[tokio::test]
async fn a_waiter_does_not_confirm_in_a_loop_through_an_outage() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("outage");
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = quiet(&cluster);
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("2500ms"));
    wait_registered(&cluster, &key, 3).await;
    cluster.server_mut(1).kill().unwrap();
    cluster.server_mut(2).kill().unwrap();
    let _ = lease.release().await;
    let error = waiting.await.unwrap().unwrap_err();
    assert!(error.is_retryable(), "{error}");
    // About eight refreshes in 2.5 s, and at most a confirm after each.
    assert!(
        error.attempts() <= 25,
        "{} attempts in 2.5 s with no quorum to be had: {error}",
        error.attempts()
    );
}

/// A queued waiter that runs out of budget reports as many attempts in
/// `Error::attempts` as its message says it made.
#[tokio::test]
async fn a_queued_waiter_s_error_counts_its_attempts_as_its_message_does() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("counted");
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = quiet(&cluster);
    let options = AcquireOptions::new().wait_timeout("1500ms");
    let error = waiter.acquire_with(&key, &options).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WaitTimeout, "{error}");
    let said = format!("after {} attempts", error.attempts());
    assert!(error.to_string().contains(&said), "{said}: {error}");
    lease.release().await.unwrap();
}

/// A queued waiter whose lock name comes to hold another kind of lock (the key replaced
/// by a hash on every master while it waits): its next refresh is refused as the wrong
/// kind, and the call ends with that permanent error instead of waiting out its budget.
#[tokio::test]
async fn a_queued_waiter_whose_name_turns_into_another_kind_stops_at_once() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let key = unique_key("kind");
    let lease = holder.acquire(&key).await.unwrap();
    let waiter = quiet(&cluster);
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    wait_registered(&cluster, &key, 3).await;
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = conn.del(&key).await.unwrap();
        let _: () = conn.hset(&key, "permits", 3).await.unwrap();
    }
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WrongKind, "{error}");
    assert!(!error.is_retryable(), "{error}");
    // A refresh comes every 300 ms: the first one after the change ends the call, long
    // before the 20 s budget would have (counted in attempts: the first attempt, the
    // refreshes before the change, and the one that met it).
    assert!(error.attempts() <= 20, "{error}");
    let _ = lease.release().await;
}

/// A head waiter whose confirm fails while one master holds a stale foreign key (a
/// contender that crashed after its `SET`) and another answers too late: the masters that
/// refused it never give new evidence (the stale key outlives the test; in the second
/// variant that master is killed), while the other two keep the key handed to the waiter.
/// The waiter must confirm again once a refresh finds the key handed to it on a quorum,
/// within a few refresh periods (300 ms each), not stall for its whole budget while every
/// other client is refused.
async fn a_failed_confirm_is_retried_on_a_fresh_quorum(kill_the_refuser: bool) {
    let mut cluster = Cluster::start(3).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(2)).await.unwrap();
    let holder = client(&cluster).ttl("10s").build().unwrap();
    let waiter = Redlock::builder()
        .quarantine(false)
        .masters([
            cluster.server(0).url(),
            cluster.server(1).url(),
            proxy.url(),
        ])
        .ttl("10s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("30s").jitter("1ms"))
        .waiting(Waiting::new().waiter_ttl("900ms"))
        .build()
        .unwrap();
    let key = unique_key("stalled-head");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    wait_registered(&cluster, &key, 3).await;
    // Master 1: the holder's key replaced by a stale foreign one that outlives the test.
    let mut conn = raw(&cluster.server(1).url()).await;
    let _: () = conn.pset_ex(&key, "stale-contender", 60_000).await.unwrap();
    // The waiter's requests to master 2 are late (500 ms, past its 200 ms node timeout)
    // for the confirm the release sets off; its notices come through at once.
    proxy.set_mode(Mode::Delay {
        to_server: Latency::new(Duration::from_millis(500), Duration::ZERO),
        to_client: Latency::ZERO,
    });
    let released = tokio::time::Instant::now();
    lease.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_mode(Mode::Pass);
    if kill_the_refuser {
        cluster.server_mut(1).kill().unwrap();
    }
    let taken = match tokio::time::timeout(Duration::from_secs(4), waiting).await {
        Ok(done) => done.unwrap().unwrap(),
        Err(_) => panic!("the waiter stalled although masters 0 and 2 hold its id"),
    };
    assert!(released.elapsed() < Duration::from_secs(4));
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_refused_by_a_stale_key_confirms_again_on_a_fresh_quorum() {
    a_failed_confirm_is_retried_on_a_fresh_quorum(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_refused_by_a_master_that_then_dies_confirms_again_on_a_fresh_quorum() {
    a_failed_confirm_is_retried_on_a_fresh_quorum(true).await;
}

/// A waiter's confirm is granted while one master refused it (a stale value of another
/// client's) and another hangs: the refusing master loses the waiter's registration at
/// once, not when the hung master's request times out (docs/design.md §17, "leave"). A
/// registration left there would make that master hand its key to a waiter nobody
/// confirms for, and keep fair waiters behind it refused.
#[tokio::test]
async fn a_refusing_master_drops_the_registration_without_waiting_for_a_hung_one() {
    let mut cluster = Cluster::start(5).await.unwrap();
    let key = unique_key("refuser-dequeue");
    let holder = client(&cluster)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let lease = holder.try_acquire(&key).await.unwrap();
    // The hung master's requests time out after 1.5 s; the registration lives 6 s.
    let waiter = client(&cluster)
        .ttl(Duration::from_secs(30))
        .timeouts(Timeouts::new().node(Duration::from_millis(1500)))
        .waiting(Waiting::new().waiter_ttl("6s"))
        .build()
        .unwrap();
    let waiting = spawn_acquire(&waiter, &key, AcquireOptions::new().wait_timeout("20s"));
    let id = |queue: Vec<String>| queue.into_iter().next();
    let mut refuser = raw(&cluster.server(3).url()).await;
    let queue_key = format!("redquorum:queue:{key}");
    wait_until(Duration::from_secs(5), "the waiter registered", || {
        let cluster = &cluster;
        let key = &key;
        async move {
            let mut all = true;
            for i in 0..5 {
                let mut conn = raw(&cluster.server(i).url()).await;
                let queue: Vec<String> = conn
                    .zrange(format!("redquorum:queue:{key}"), 0, -1)
                    .await
                    .unwrap();
                all &= !queue.is_empty();
            }
            all
        }
    })
    .await;
    let registered: Vec<String> = refuser.zrange(&queue_key, 0, -1).await.unwrap();
    let w = id(registered).expect("registered on master 3");
    // Master 3 holds another client's value; master 4 hangs.
    let _: () = refuser.set_ex(&key, "stale-other", 30).await.unwrap();
    cluster.server_mut(4).pause().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(3), lease.release()).await;
    let lease = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .unwrap();
    // Well within the hung master's 1.5 s timeout.
    wait_until(
        Duration::from_millis(1000),
        "the refusing master dropped the registration",
        || {
            let (server, key, w) = (cluster.server(3), &key, &w);
            async move { !queued_on_one(server, key, w).await }
        },
    )
    .await;
    cluster.server_mut(4).resume().unwrap();
    lease.release().await.unwrap();
    waiter.shutdown().await;
    holder.shutdown().await;
}
