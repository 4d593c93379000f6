//! The calls a user makes, against real masters: extension and release under
//! cancellation, waiting within its budget, fresh masters, shutdown. Each test pins a way
//! in which a lease could promise more than the masters hold, a lock could stay held, or
//! a wait could give up or overrun; the planted bugs of the lease paths are caught here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
#[cfg(redquorum_mutants)]
use redquorum::Mutant;
use redquorum::{AcquireOptions, Builder, ErrorKind, Redlock};
use redquorum_testkit::{Latency, Mode, Proxy};
use support::*;
use tokio::time::Instant;

/// Without `--cfg redquorum_mutants` no bug can be planted.
#[cfg(not(redquorum_mutants))]
type Mutant = std::convert::Infallible;

/// The client `builder` builds, with `mutant` planted, if any.
fn planted(builder: Builder, mutant: Option<Mutant>) -> Redlock {
    let client = builder.build().unwrap();
    match mutant {
        #[cfg(redquorum_mutants)]
        Some(m) => client.plant(m),
        _ => {}
    }
    client
}

/// Suspends every client of `server` for `duration` (`CLIENT PAUSE`): requests queue up
/// and run afterwards, and no key expires meanwhile. Returns at once.
async fn stall(server: &Server, duration: Duration) {
    server.client_pause(duration).await.unwrap();
}

/// Extends a lease with a TTL far shorter than its time left; the masters apply it at once,
/// their replies are slow (a proxy holds them back), and the holder's thread then stalls
/// (a pause of the process, as in a GC) before the round can be decided. Another client
/// takes the lock during the stall. Returns a description of the violation if the first
/// lease, looked at right after the stall, still promised time. With `drop_future` the
/// caller drops its extension future right after the first poll.
async fn shortened_extension(mutant: Option<Mutant>, drop_future: bool) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    let mut proxies = Vec::new();
    for server in cluster.servers() {
        proxies.push(Proxy::for_server(server).await.unwrap());
    }
    let builder = Redlock::builder()
        .quarantine(false)
        .masters(proxies.iter().map(Proxy::url))
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms"));
    let holder = planted(builder, mutant);
    let key = unique_key("shorten");
    let lease = holder.acquire(&key).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;

    let short = Duration::from_millis(300);
    for proxy in &proxies {
        proxy.set_mode(Mode::Delay {
            to_server: Latency::ZERO,
            to_client: Latency::new(Duration::from_secs(2), Duration::ZERO),
        });
    }
    let sent = Instant::now();
    let mut extension = Box::pin(lease.extend_with(short));
    assert!(futures::poll!(extension.as_mut()).is_pending());
    if drop_future {
        drop(extension);
    } else {
        std::mem::forget(extension); // neither polled nor dropped during the stall
    }
    // The round's task sends its requests; wait until every master applied them (their
    // replies are held back, so the round stays undecided).
    let value = lease.value().to_owned();
    wait_until(
        Duration::from_secs(2),
        "the short TTL applied everywhere",
        || {
            let (cluster, key, value) = (&cluster, key.clone(), value.clone());
            async move {
                for server in cluster.servers() {
                    let mut conn = raw(&server.url()).await;
                    let (v, pttl): (Option<String>, i64) = redis::pipe()
                        .get(&key)
                        .pttl(&key)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if v.as_deref() == Some(&value) && pttl > short.as_millis() as i64 {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;

    // The stall: this runtime's thread waits, so not even the node timeout can decide the
    // round, while another client (its own thread and runtime) waits for the keys to expire
    // and takes the lock.
    let urls = cluster.urls();
    let other = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let other = Redlock::builder()
                .quarantine(false)
                .masters(urls)
                .build()
                .unwrap();
            let lease = other
                .acquire_with(&key, &AcquireOptions::new().wait_timeout("2s"))
                .await
                .unwrap();
            let value = lease.value().to_owned();
            let _ = lease.release().await;
            value
        })
    })
    .join()
    .unwrap();
    assert!(!other.is_empty());
    let (remaining, expired) = (lease.remaining(), lease.is_expired());
    let verdict = if remaining > Duration::ZERO || !expired {
        Err(format!(
            "another client held the lock while the first lease reported {remaining:?} \
             remaining (expired: {expired})"
        ))
    } else {
        // A lease never promises more than `t0 + ttl - drift` of the shortening round.
        assert!(
            lease.deadline() <= sent + short,
            "{:?}",
            lease.deadline() - sent
        );
        Ok(())
    };
    drop(lease);
    for proxy in &proxies {
        proxy.heal();
    }
    verdict
}

// Checks I7 (no more validity than the masters hold).
#[tokio::test]
async fn a_cancelled_shortening_extension_never_leaves_the_lease_promising_more() {
    shortened_extension(None, true).await.unwrap();
}

// Checks I7 (no more validity than the masters hold).
#[tokio::test]
async fn a_stalled_shortening_extension_never_leaves_the_lease_promising_more() {
    shortened_extension(None, false).await.unwrap();
}

// Checks I7 (no more validity than the masters hold).
#[cfg(redquorum_mutants)]
#[tokio::test]
async fn the_shrink_keeps_deadline_mutant_is_caught() {
    let caught = shortened_extension(Some(Mutant::ShrinkKeepsDeadline), true).await;
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

/// Polls `release()` once while an extension holds the lease, then drops it. Returns the
/// violation if the lock stays held (the watchdog keeps extending) or the lease looks
/// alive.
async fn cancelled_release(mutant: Option<Mutant>) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    // A node timeout far above the stall, so that the extension in flight succeeds even on
    // a loaded machine (a failed one would stop the watchdog by itself), and a TTL far
    // above the wait below, so that only a release can free the lock in time.
    let builder = client(&cluster)
        .timeouts(Timeouts::new().node("400ms"))
        .ttl("10s");
    let holder = planted(builder, mutant);
    let other = client(&cluster).ttl("10s").build().unwrap();
    let key = unique_key("cancelled_release");
    let lease = holder
        .acquire_with(&key, &AcquireOptions::new().watchdog(true))
        .await
        .unwrap();
    let handle = lease.handle();

    // An extension in flight: two masters stall, so it holds the lease for a while.
    stall(cluster.server(0), Duration::from_millis(100)).await;
    stall(cluster.server(1), Duration::from_millis(100)).await;
    let mut extension = pin!(handle.extend());
    assert!(futures::poll!(extension.as_mut()).is_pending());
    // The extension's round runs in a task of its own: let it start and take the lease.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    {
        let mut release = pin!(lease.release());
        assert!(futures::poll!(release.as_mut()).is_pending());
    } // dropped after its first poll
    let _ = extension.await;

    // Within two seconds (a fifth of the TTL) the lock must be free.
    let freed = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if let Ok(lease) = other.try_acquire(&key).await {
                return lease;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let verdict = match (&freed, handle.is_lost()) {
        (Ok(_), true) => Ok(()),
        (freed, lost) => Err(format!(
            "after a cancelled release: other client got the lock: {}, lease lost: {lost}",
            freed.is_ok()
        )),
    };
    if let Ok(taken) = freed {
        taken.release().await.unwrap();
    }
    verdict
}

// Checks I8 (nothing extends a lease after its release began).
#[tokio::test]
async fn a_release_cancelled_behind_an_extension_still_releases() {
    cancelled_release(None).await.unwrap();
}

// Checks I8 (nothing extends a lease after its release began).
#[cfg(redquorum_mutants)]
#[tokio::test]
async fn the_release_marks_done_first_mutant_is_caught() {
    let caught = cancelled_release(Some(Mutant::ReleaseMarksDoneFirst)).await;
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

/// What runs in the background releases: a dropped lease, `release()`, and an acquire
/// cancelled mid-round each leave no key behind, long before the keys' TTL could have
/// removed them. Returns the first key left behind.
async fn background_releases(mutant: Option<Mutant>) -> Result<(), String> {
    let cluster = Cluster::start(3).await.unwrap();
    let client = planted(client(&cluster).ttl("30s"), mutant);
    let bound = Duration::from_secs(2); // the TTL is fifteen times longer
    let gone = |key: String| {
        let cluster = &cluster;
        async move {
            let deadline = Instant::now() + bound;
            while Instant::now() < deadline {
                if gone_everywhere(cluster, &key).await {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(format!("{key} was left on the masters"))
        }
    };

    let dropped = unique_key("bg_dropped");
    drop(client.acquire(&dropped).await.unwrap());
    gone(dropped).await?;

    let released = unique_key("bg_released");
    client
        .acquire(&released)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    gone(released).await?;

    // Two masters stall; the acquire is dropped after its requests left.
    let cancelled = unique_key("bg_cancelled");
    stall(cluster.server(0), Duration::from_millis(200)).await;
    stall(cluster.server(1), Duration::from_millis(200)).await;
    let out = tokio::time::timeout(Duration::from_millis(30), client.acquire(&cancelled)).await;
    assert!(out.is_err(), "the acquire finished despite the stall");
    gone(cancelled).await
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn background_releases_leave_nothing_behind() {
    background_releases(None).await.unwrap();
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[cfg(redquorum_mutants)]
#[tokio::test]
async fn the_no_background_release_mutant_is_caught() {
    let caught = background_releases(Some(Mutant::NoBackgroundRelease)).await;
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

/// Eight clients on five masters contend for one resource with the default patience: a
/// waiter woken by a release notice or the holder's expiry spends no attempt, so no one
/// gives up while the budget lasts, however often it loses the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_waiters_with_a_budget_never_give_up() {
    const CLIENTS: usize = 8;
    const SECTIONS: usize = 8;
    let cluster = Cluster::start(5).await.unwrap();
    let key = unique_key("no_give_up");
    let counter = unique_key("no_give_up_counter");
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        // The defaults but for quarantine (brand-new masters) and a short TTL; with the
        // default attempt count of old, notices spent it within milliseconds.
        let client = Redlock::builder()
            .quarantine(false)
            .masters(cluster.urls())
            .ttl("2s")
            .retry(Retry::new().attempts(10))
            .build()
            .unwrap();
        let url = cluster.server(0).url();
        let (key, counter, done) = (key.clone(), counter.clone(), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut conn = raw(&url).await;
            for _ in 0..SECTIONS {
                let lease = client.acquire(&key).await?;
                let v: i64 = conn.get(&counter).await.unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = conn.set(&counter, v + 1).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                lease.release().await?;
            }
            Ok::<(), redquorum::Error>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let total: i64 = raw(&cluster.server(0).url())
        .await
        .get(&counter)
        .await
        .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), CLIENTS * SECTIONS);
    assert_eq!(total as usize, CLIENTS * SECTIONS, "a section overlapped");
}

/// A wait budget bounds every await of an acquire. Here one master holds another
/// client's key, one grants, and the connection to the third hangs (the server is
/// stopped), so the round cannot be decided before that connection times out.
#[tokio::test]
async fn a_wait_budget_bounds_a_round_behind_a_hanging_connect() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let key = unique_key("budget");
    let _: () = raw(&cluster.server(0).url())
        .await
        .pset_ex(&key, "someone else", 10_000)
        .await
        .unwrap();
    cluster.server_mut(2).pause().unwrap();

    let connect_timeout = Duration::from_secs(3);
    let waiter = client(&cluster)
        .timeouts(Timeouts::new().connect(connect_timeout))
        .build()
        .unwrap();
    let budget = Duration::from_millis(150);
    let started = Instant::now();
    let err = waiter
        .acquire_with(&key, &AcquireOptions::new().wait_timeout(budget))
        .await
        .unwrap_err();
    let took = started.elapsed();
    // The round the budget cut is the only one: one refusal does not rule out a quorum,
    // the silent master does (docs/design.md §9).
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.to_string().contains("wait budget used up"), "{err}");
    // The bound is the budget; the slack only absorbs scheduling on a loaded machine and
    // stays far below the connect timeout that the round would otherwise wait for.
    assert!(
        took < budget + connect_timeout / 6,
        "a {budget:?} budget took {took:?} (connect timeout {connect_timeout:?})"
    );
    // The master that granted is released in the background.
    let url = cluster.server(1).url();
    wait_until(Duration::from_secs(2), "the granted key released", || {
        let (url, key) = (url.clone(), key.clone());
        async move { get(&url, &key).await.is_none() }
    })
    .await;
    cluster.server_mut(2).resume().unwrap();
}

/// Brand-new masters abstain once (restart quarantine, for `ttl_max`): the error says so
/// and when they vote, and a waiting acquire sleeps until then without spending attempts.
#[tokio::test]
async fn fresh_masters_say_when_they_vote_and_a_waiter_gets_the_lock_then() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster)
        .quarantine(true)
        .ttl("600ms")
        .retry(Retry::new().attempts(2))
        .build()
        .unwrap();
    let key = unique_key("fresh");
    let first_contact = Instant::now();
    let err = client.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    assert!(err.is_retryable());
    let after = err.retry_after().unwrap();
    assert!(
        after > Duration::ZERO && after <= Duration::from_millis(700),
        "{after:?}"
    );
    assert!(err.to_string().contains("restart quarantine"), "{err}");

    // Two attempts allowed; the wake-up when the masters vote again costs none.
    let lease = client.acquire(&key).await.unwrap();
    assert!(first_contact.elapsed() >= Duration::from_millis(600));
    lease.release().await.unwrap();
}

/// A waiting acquire whose masters vote only after its budget says so at once.
#[tokio::test]
async fn not_enough_voters_beyond_the_budget_is_said_at_once() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).quarantine(true).ttl("5s").build().unwrap();
    let started = Instant::now();
    let err = client
        .acquire_with(
            &unique_key("beyond"),
            &AcquireOptions::new().wait_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    assert!(err.retry_after().unwrap() > Duration::from_secs(1), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "it waited in vain"
    );
}

/// `shutdown` waits for the releases running in the background: a lease dropped right
/// before it, and the masters a release returned without.
#[tokio::test]
async fn shutdown_finishes_background_releases() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();

    let dropped = unique_key("dropped");
    drop(client.acquire(&dropped).await.unwrap());
    let slow = unique_key("slow");
    let lease = client.acquire(&slow).await.unwrap();
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &slow, lease.value())
    })
    .await;
    // One master stalls: release returns once two confirmed, the third goes on.
    stall(cluster.server(2), Duration::from_millis(150)).await;
    lease.release().await.unwrap();

    assert_eq!(client.shutdown().await, 0, "releases still running");
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        for key in [&dropped, &slow] {
            let v: Option<String> = conn.get(key).await.unwrap();
            assert_eq!(v, None, "{key} left on {}", server.url());
        }
    }
}
