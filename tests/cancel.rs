//! The cancellation matrix: every public async call, dropped after its k-th poll for
//! every k until it completes on its own, against real masters behind a delaying proxy
//! (so that each await point lasts and a drop lands between a request leaving and its
//! reply). After each drop:
//! - no lease promises more than a quorum of masters holds (docs/design.md I7): its
//!   deadline is not beyond the quorum-th latest expiry of its value;
//! - no key outlives what the API reported (I5): a call that returned no lease leaves
//!   none of its values behind, and a released lease leaves nothing;
//! - no watchdog runs after release (I8): released keys stay gone over several extension
//!   intervals (an extension would set them again);
//! - no subscription leaks: the release channel has no subscriber once nobody waits;
//! - no registration leaks: a queued waiter (hand-off, the fair lock) leaves no queue
//!   member or liveness key, and no key handed to it, once its call is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Watchdog};
use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, Lease, LeaseHandle, Redlock};
use redquorum_testkit::{Mode, Proxy};
use support::*;
use tokio::time::Instant;

/// One way of each request and of each reply through the proxies.
const DELAY: Duration = Duration::from_millis(8);
/// Between two polls.
const PACE: Duration = Duration::from_millis(3);
/// The most polls tried for one call: far more than any call here needs to complete.
const MAX_POLLS: usize = 400;
/// Far longer than every wait of the checks below, so that only a release, never expiry,
/// can make a key go in time.
const TTL: Duration = Duration::from_secs(30);
const EXTEND_INTERVAL: Duration = Duration::from_millis(150);

/// Three masters, each behind a proxy that delays both directions.
struct Rig {
    cluster: Cluster,
    _proxies: Vec<Proxy>,
    client: Redlock,
    urls: Vec<String>,
}

impl Rig {
    async fn new() -> Rig {
        let cluster = Cluster::start(3).await.unwrap();
        let mut proxies = Vec::new();
        for server in cluster.servers() {
            let proxy = Proxy::for_server(server).await.unwrap();
            proxy.set_mode(Mode::delay(DELAY, Duration::ZERO));
            proxies.push(proxy);
        }
        let client = Redlock::builder()
            .quarantine(false)
            .masters(proxies.iter().map(Proxy::url))
            .ttl(TTL)
            .ttl_max(TTL * 2)
            .timeouts(Timeouts::new().node("200ms"))
            .retry(Retry::new().delay("5ms").jitter("5ms"))
            .watchdog(
                Watchdog::new()
                    // Fixed, so that a much shorter extension still leaves a valid lease.
                    .safety_margin("50ms")
                    .interval(EXTEND_INTERVAL),
            )
            .build()
            .unwrap();
        let urls = cluster.urls();
        Rig {
            cluster,
            _proxies: proxies,
            client,
            urls,
        }
    }

    /// Long enough for every request and reply in the proxies to land, and for a round
    /// started by a dropped call in the background to finish: derived from the delays
    /// and the node timeout.
    async fn settle(&self) {
        tokio::time::sleep(4 * DELAY + Duration::from_millis(200) + 4 * PACE).await;
    }

    /// The instants at which each master's copy of `key` expires, where it holds `value`
    /// (read directly, not through the proxies). Each is computed from the moment the
    /// read was sent, so it is never later than the truth.
    async fn expiries(&self, key: &str, value: &str) -> Vec<Instant> {
        let mut out = Vec::new();
        for url in &self.urls {
            let mut conn = raw(url).await;
            let sent = Instant::now();
            let (v, pttl): (Option<String>, i64) = redis::pipe()
                .get(key)
                .pttl(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            if v.as_deref() == Some(value) && pttl > 0 {
                out.push(sent + Duration::from_millis(pttl as u64));
            }
        }
        out
    }

    /// The lease promises no more than a quorum of masters holds.
    async fn assert_backed(&self, lease: &LeaseHandle, what: &str) {
        if lease.is_expired() {
            return;
        }
        // An extension dropped by the caller still runs in its background task (see
        // `extend_with`): a shortening one lowers the deadline before its first request, a
        // lengthening one raises it after its quorum. The masters are read between two
        // reads of the deadline, and the smaller is what the lease promised throughout.
        let before = lease.deadline();
        let mut expiries = self.expiries(lease.key(), lease.value()).await;
        let deadline = before.min(lease.deadline());
        expiries.sort_unstable_by(|a, b| b.cmp(a));
        let quorum = self.urls.len() / 2 + 1;
        let backed = expiries.get(quorum - 1).copied();
        assert!(
            lease.is_expired() || backed.is_some_and(|at| at >= deadline),
            "{what}: the lease promises {:?} more but a quorum holds its value only until \
             {:?} from now ({} masters hold it)",
            deadline.saturating_duration_since(Instant::now()),
            backed.map(|at| at.saturating_duration_since(Instant::now())),
            expiries.len()
        );
    }

    /// No master holds any value under `key` but `except`.
    async fn only(&self, key: &str, except: Option<&str>) -> bool {
        for url in &self.urls {
            let v = get(url, key).await;
            if v.is_some() && v.as_deref() != except {
                return false;
            }
        }
        true
    }

    /// Within a bound, no master holds any value under `key` but `except`; then the keys
    /// stay that way over several watchdog intervals.
    async fn assert_left_only(&self, key: &str, except: Option<&str>, what: &str) {
        wait_until(Duration::from_secs(3), what, || self.only(key, except)).await;
        tokio::time::sleep(3 * EXTEND_INTERVAL).await;
        assert!(
            self.only(key, except).await,
            "{what}: a key came back (an extension after release?)"
        );
    }

    /// No master has a subscriber on the release channel of `key`.
    async fn assert_no_subscribers(&self, key: &str) {
        let channel = format!("redquorum:released:{key}");
        wait_until(Duration::from_secs(3), "subscriptions dropped", || {
            let channel = channel.clone();
            async move {
                for url in &self.urls {
                    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg(&channel)
                        .query_async(&mut raw(url).await)
                        .await
                        .unwrap();
                    if counts.iter().any(|(_, n)| *n > 0) {
                        return false;
                    }
                }
                true
            }
        })
        .await;
    }

    /// Within a bound, no master holds a queue, a waiter's liveness key, or a value under
    /// `key` but `except`.
    async fn assert_no_registration(&self, key: &str, except: Option<&str>, what: &str) {
        let state = || async {
            let mut state = Vec::new();
            for url in &self.urls {
                let mut conn = raw(url).await;
                let queue: Vec<String> = conn
                    .zrange(format!("redquorum:queue:{key}"), 0, -1)
                    .await
                    .unwrap();
                let waiters: Vec<String> = conn
                    .keys(format!("redquorum:waiter:{key}:*"))
                    .await
                    .unwrap();
                let held: Option<String> = conn.get(key).await.unwrap();
                state.push(format!("{held:?} {queue:?} {waiters:?}"));
            }
            state
        };
        let what = format!("{what}: {:?}", state().await);
        let what = what.as_str();
        wait_until(Duration::from_secs(3), what, || async {
            for url in &self.urls {
                let mut conn = raw(url).await;
                let queue: bool = conn.exists(format!("redquorum:queue:{key}")).await.unwrap();
                let waiters: Vec<String> = conn
                    .keys(format!("redquorum:waiter:{key}:*"))
                    .await
                    .unwrap();
                if queue || !waiters.is_empty() {
                    return false;
                }
            }
            self.only(key, except).await
        })
        .await;
    }

    /// A client of its own (straight to the masters) that holds `key`.
    async fn other_holder(&self, key: &str) -> (Redlock, Lease) {
        let other = client(&self.cluster).ttl(TTL).build().unwrap();
        let lease = other.acquire(key).await.unwrap();
        wait_until(Duration::from_secs(2), "held everywhere", || {
            held_everywhere(&self.cluster, key, lease.value())
        })
        .await;
        (other, lease)
    }

    async fn lease(&self, key: &str, watchdog: bool) -> Lease {
        let lease = self
            .client
            .acquire_with(key, &AcquireOptions::new().watchdog(watchdog))
            .await
            .unwrap();
        wait_until(Duration::from_secs(2), "held everywhere", || {
            held_everywhere(&self.cluster, key, lease.value())
        })
        .await;
        lease
    }
}

/// Polls `future` up to `polls` times, `PACE` apart, and drops it unless it completed.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    for i in 0..polls {
        if let Poll::Ready(out) = futures::poll!(future.as_mut()) {
            return Some(out);
        }
        if i + 1 < polls {
            tokio::time::sleep(PACE).await;
        }
    }
    None
}

/// Runs `case(k)` for k = 1, 2, … until it reports that the call completed.
async fn matrix<F, Fut>(name: &str, mut case: F) -> usize
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    for k in 1..=MAX_POLLS {
        if case(k).await {
            eprintln!(
                "{name}: dropped after each of {} polls, then completed",
                k - 1
            );
            return k;
        }
    }
    panic!("{name}: never completed within {MAX_POLLS} polls");
}

/// acquire, try_acquire and acquire_with on a free lock: a dropped call leaves nothing; a
/// completed one is backed by a quorum.
#[tokio::test]
async fn acquiring_a_free_lock() {
    let rig = Rig::new().await;
    let watchdog = AcquireOptions::new().watchdog(true);
    for name in ["acquire", "try_acquire", "acquire_with"] {
        let completed = matrix(name, |k| {
            let (rig, watchdog) = (&rig, &watchdog);
            async move {
                let key = unique_key(name);
                let client = &rig.client;
                let call = async {
                    match name {
                        "acquire" => client.acquire(&key).await,
                        "try_acquire" => client.try_acquire(&key).await,
                        _ => client.acquire_with(&key, watchdog).await,
                    }
                };
                let out = poll_then_drop(call, k).await;
                rig.settle().await;
                match out {
                    Some(result) => {
                        let lease = result.unwrap();
                        rig.assert_backed(&lease, name).await;
                        lease.release().await.unwrap();
                        rig.assert_left_only(&key, None, name).await;
                        true
                    }
                    None => {
                        rig.assert_left_only(&key, None, name).await;
                        false
                    }
                }
            }
        })
        .await;
        assert!(
            completed > 2,
            "{name} completed too early to be cut mid-round"
        );
    }
}

/// A waiting acquire (the lock is held): dropped while it waits, it leaves no value of its
/// own and no subscription.
#[tokio::test]
async fn waiting_for_a_held_lock() {
    let rig = Rig::new().await;
    let key = unique_key("waiting");
    let holder = rig.lease(&key, true).await;
    let budget = AcquireOptions::new().wait_timeout(Duration::from_millis(150));
    matrix("waiting acquire", |k| {
        let (rig, key, budget, holder) = (&rig, &key, &budget, &holder);
        async move {
            let out = poll_then_drop(rig.client.acquire_with(key, budget), k).await;
            rig.settle().await;
            assert!(
                rig.only(key, Some(holder.value())).await,
                "a waiter's key stayed"
            );
            rig.assert_no_subscribers(key).await;
            if let Some(result) = out {
                assert!(result.is_err(), "acquired a held lock");
                return true;
            }
            false
        }
    })
    .await;
    holder.release().await.unwrap();
}

/// acquire_many on free resources: a dropped call leaves no key of any resource; a
/// completed one holds every key on a quorum until its deadline.
#[tokio::test]
async fn acquiring_several_resources() {
    let rig = Rig::new().await;
    let completed = matrix("acquire_many", |k| {
        let rig = &rig;
        async move {
            let (x, y) = (unique_key("many_x"), unique_key("many_y"));
            let list = [y.as_str(), x.as_str()];
            let out = poll_then_drop(rig.client.acquire_many(&list), k).await;
            rig.settle().await;
            let done = out.is_some();
            if let Some(result) = out {
                let lease = result.unwrap();
                let quorum = rig.urls.len() / 2 + 1;
                for key in [&x, &y] {
                    let held = rig.expiries(key, lease.value()).await;
                    let backed = held.iter().filter(|at| **at >= lease.deadline()).count();
                    assert!(backed >= quorum, "{key} held by {backed} masters only");
                }
                lease.release().await.unwrap();
            }
            for key in [&x, &y] {
                rig.assert_left_only(key, None, "acquire_many").await;
            }
            done
        }
    })
    .await;
    assert!(completed > 2, "completed too early to be cut mid-round");
}

/// with_lock: dropped before, during or after the work, the lock is released and stays
/// released (its watchdog stops).
#[tokio::test]
async fn with_lock() {
    let rig = Rig::new().await;
    matrix("with_lock", |k| {
        let rig = &rig;
        async move {
            let key = unique_key("with_lock");
            let work = |lease: LeaseHandle| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                lease.value().to_owned()
            };
            let out =
                poll_then_drop(rig.client.with_lock(&key, &AcquireOptions::new(), work), k).await;
            rig.settle().await;
            rig.assert_left_only(&key, None, "with_lock").await;
            out.map(|r| r.unwrap()).is_some()
        }
    })
    .await;
}

/// extend and extend_with (longer and much shorter than the time left): whatever the
/// drop, the lease promises no more than a quorum holds.
#[tokio::test]
async fn extending() {
    let rig = Rig::new().await;
    for ttl in [None, Some(TTL * 2), Some(Duration::from_millis(400))] {
        let name = format!("extend {ttl:?}");
        let key = unique_key("extend");
        let lease = rig.lease(&key, false).await;
        matrix(&name, |k| {
            let (rig, lease, name) = (&rig, &lease, &name);
            async move {
                // Each case starts from a full TTL (a shortening one ran before).
                lease.extend().await.unwrap();
                let call = async {
                    match ttl {
                        None => lease.extend().await,
                        Some(ttl) => lease.extend_with(ttl).await,
                    }
                };
                let out = poll_then_drop(call, k).await;
                rig.assert_backed(lease, name).await;
                rig.settle().await;
                rig.assert_backed(lease, name).await;
                match out {
                    Some(result) => {
                        result.unwrap();
                        true
                    }
                    None => false,
                }
            }
        })
        .await;
        lease.release().await.unwrap();
        rig.assert_left_only(&key, None, &name).await;
    }
}

/// release of a lease whose watchdog runs: dropped after any poll, the lease counts as
/// released at once, and its keys go and stay gone.
#[tokio::test]
async fn releasing() {
    let rig = Rig::new().await;
    matrix("release", |k| {
        let rig = &rig;
        async move {
            let key = unique_key("release");
            let lease = rig.lease(&key, true).await;
            let handle = lease.handle();
            let out = poll_then_drop(lease.release(), k).await;
            assert!(
                handle.is_lost(),
                "a release that was polled left the lease alive"
            );
            rig.settle().await;
            rig.assert_left_only(&key, None, "release").await;
            out.map(|r| r.unwrap()).is_some()
        }
    })
    .await;
}

/// downgrade of a write lease whose watchdog runs: dropped after any poll, the write lease
/// counts as lost and neither its writer key nor the reader key the round would have made
/// is left behind; completed, the read lease is backed by a quorum and its release leaves
/// nothing either.
#[tokio::test]
async fn downgrading() {
    let rig = Rig::new().await;
    matrix("downgrade", |k| {
        let rig = &rig;
        async move {
            let key = unique_key("downgrade");
            let mut lease = rig
                .client
                .rwlock(&key)
                .write_with(&AcquireOptions::new().watchdog(true))
                .await
                .unwrap();
            wait_until(Duration::from_secs(2), "held everywhere", || {
                held_everywhere(&rig.cluster, &key, lease.value())
            })
            .await;
            let reader = format!("redquorum:rw:{key}:reader:{}", lease.value());
            let write = lease.handle();
            let out = poll_then_drop(lease.downgrade(), k).await;
            let completed = out.is_some();
            if let Some(result) = out {
                result.unwrap();
                assert_eq!(lease.mode(), redquorum::LeaseMode::Read);
                rig.assert_backed(&lease.handle(), "downgrade").await;
                lease.release().await.unwrap();
            } else {
                wait_until(
                    Duration::from_secs(2),
                    "a downgrade that was polled lost the write lease",
                    || async { lease.handle().is_lost() },
                )
                .await;
                drop(lease);
            }
            assert!(write.is_lost(), "the write lease is still held");
            rig.settle().await;
            // No writer's value is left; the readers' mark a downgrade leaves expires with
            // the reader it marked.
            rig.assert_left_only(&key, Some("redquorum:readers"), "downgrade: the writer key")
                .await;
            rig.assert_left_only(&reader, None, "downgrade: the reader key")
                .await;
            completed
        }
    })
    .await;
}

/// shutdown: dropped or not, the releases it waits for finish.
#[tokio::test]
async fn shutting_down() {
    let rig = Rig::new().await;
    matrix("shutdown", |k| {
        let rig = &rig;
        async move {
            let key = unique_key("shutdown");
            drop(rig.lease(&key, true).await);
            let out = poll_then_drop(rig.client.shutdown(), k).await;
            rig.assert_left_only(&key, None, "shutdown").await;
            out.is_some()
        }
    })
    .await;
}

/// A queued waiting acquire (hand-off, and the fair lock) of a lock another client holds:
/// dropped at any point — while it attempts, subscribes, registers, takes its ticket or
/// waits — it leaves no registration behind; run to its end, it times out.
#[tokio::test]
async fn waiting_in_the_queue() {
    let rig = Rig::new().await;
    for fair in [false, true] {
        let name = if fair {
            "fair waiting acquire"
        } else {
            "queued waiting acquire"
        };
        let key = unique_key("queued");
        let (_other, holder) = rig.other_holder(&key).await;
        let budget = AcquireOptions::new()
            .fair(fair)
            .wait_timeout(Duration::from_millis(100));
        matrix(name, |k| {
            let (rig, key, budget, holder) = (&rig, &key, &budget, &holder);
            async move {
                let out = poll_then_drop(rig.client.acquire_with(key, budget), k).await;
                rig.settle().await;
                rig.assert_no_registration(key, Some(holder.value()), name)
                    .await;
                if let Some(result) = out {
                    assert!(result.is_err(), "{name}: acquired a held lock");
                    return true;
                }
                false
            }
        })
        .await;
        holder.release().await.unwrap();
    }
}

/// A queued waiter handed the lock: the holder releases as soon as the waiter is
/// registered on every master, and the call is dropped at any point after — before the
/// notice, during its confirm, or not at all. Dropped, it leaves no key and no
/// registration (a key handed to it is passed on, here to nobody); completed, its lease is
/// backed by a quorum and its release leaves nothing.
#[tokio::test]
async fn handed_the_lock() {
    let rig = Rig::new().await;
    matrix("handed-over acquire", |k| {
        let rig = &rig;
        async move {
            let key = unique_key("handed");
            let (_other, holder) = rig.other_holder(&key).await;
            let mut holder = Some(holder);
            let out = {
                let mut call = pin!(rig.client.acquire(&key));
                let mut out = None;
                for i in 0..k {
                    if let Poll::Ready(result) = futures::poll!(call.as_mut()) {
                        out = Some(result);
                        break;
                    }
                    if holder.is_some()
                        && queued_everywhere(&rig.urls, &key).await
                        && let Some(lease) = holder.take()
                    {
                        lease.release().await.unwrap();
                    }
                    if i + 1 < k {
                        tokio::time::sleep(PACE).await;
                    }
                }
                out
            };
            let done = out.is_some();
            // Dropped before it queued: what it sent lands while the lock is still held.
            rig.settle().await;
            if let Some(lease) = holder.take() {
                lease.release().await.unwrap();
            }
            rig.settle().await;
            if let Some(result) = out {
                let lease = result.unwrap();
                rig.assert_backed(&lease, "handed-over acquire").await;
                lease.release().await.unwrap();
            }
            rig.assert_no_registration(&key, None, "handed-over acquire")
                .await;
            done
        }
    })
    .await;
}

/// Whether every master has a waiter in `key`'s queue.
async fn queued_everywhere(urls: &[String], key: &str) -> bool {
    for url in urls {
        let mut conn = raw(url).await;
        let n: usize = conn.zcard(format!("redquorum:queue:{key}")).await.unwrap();
        if n == 0 {
            return false;
        }
    }
    true
}
