//! The cancellation matrix on the simulation: every public async call (`acquire`,
//! `try_acquire`, `acquire_with` — waiting in the hand-off queue too, fair or not —
//! `with_lock`, `extend`, `extend_with`, `release`, `shutdown`) is dropped after its k-th
//! poll, for every k until it completes on its own,
//! against simulated masters whose messages each take a seeded delay of 1 to 8 ms on the
//! paused clock. A poll here is one the runtime makes because the call was woken, so each
//! k cuts the call at a different await point: between a request leaving and its reply,
//! between rounds, inside a wait. Each case runs on a fresh runtime and fresh masters.
//!
//! After each drop (and after each completion):
//! - no lease promises more than a quorum holds (docs/design.md I7): while it is not
//!   expired, its deadline is not beyond the quorum-th latest expiry of its value on the
//!   masters, both at once and once every message in flight has landed (after an
//!   extension, whose round runs in a task of its own, also every millisecond while the
//!   round may be undecided);
//! - no key outlives what the API reported (I5): once the client's background work is
//!   done (`Redlock::shutdown`) and the network is quiet, a call that returned no lease
//!   left none of its values on any master, and a released lease left nothing;
//! - no watchdog runs after release (I8): released keys stay gone over several extension
//!   intervals (an extension would set a missing key again).
//!
//! The two cancellation mutants are caught here: `ShrinkKeepsDeadline` by an `extend_with`
//! of a much shorter TTL (its round goes on in a task of its own after the call is dropped,
//! and the lease is watched every millisecond until the round is done),
//! `ReleaseMarksDoneFirst` by a release polled once while an extension holds the lease,
//! then dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::net::{NetParams, SendLog};
use super::server::{Clock, SimServer};
use super::world::{self, ClientSpec};
use crate::lease::LeaseHandle;
use crate::mutants::Mutant;
use crate::{AcquireOptions, Redlock};

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(2);
const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// The client's connect timeout in the simulation (`world::build_client`).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
const EXTEND_INTERVAL: Duration = Duration::from_millis(150);
/// The most polls tried for one call: far more than any call here needs to complete.
const MAX_POLLS: usize = 400;
/// The link seeds each matrix runs with.
const SEEDS: [u64; 3] = [0, 1, 2];

/// Every message takes 1 to 8 ms, none is slow or lost.
const NET: NetParams = NetParams {
    delay: (MS, Duration::from_millis(8)),
    slow_p: 0.0,
    slow_max: Duration::from_millis(8),
    drop_p: 0.0,
};

/// Runs `future` on a fresh current-thread runtime with a paused clock.
fn sim<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

/// Polls a future each time it is woken, at most `left` times.
struct Polls<F: Future> {
    future: Pin<Box<F>>,
    left: usize,
}

impl<F: Future> Future for Polls<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.future.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending => {
                self.left = self.left.saturating_sub(1);
                if self.left == 0 {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

/// Polls `future` whenever it is woken, and drops it after its `polls`-th poll unless it
/// completed by then.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    Polls {
        future: Box::pin(future),
        left: polls,
    }
    .await
}

/// Runs `case(k)` for k = 1, 2, … until it reports that the call completed (`Ok(true)`);
/// returns that k, or the first violation.
fn matrix(
    name: &str,
    mut case: impl FnMut(usize) -> Result<bool, String>,
) -> Result<usize, String> {
    for k in 1..=MAX_POLLS {
        if case(k).map_err(|e| format!("{name}, dropped after poll {k}: {e}"))? {
            eprintln!(
                "{name}: dropped after each of {} polls, then completed",
                k - 1
            );
            return Ok(k);
        }
    }
    Err(format!("{name}: never completed within {MAX_POLLS} polls"))
}

/// A client with fencing on or off and maybe a planted bug, over `servers`; its links are
/// seeded from `seed`. Quarantine is on, as by default.
fn client_over(
    servers: &[Arc<SimServer>],
    sends: &Arc<SendLog>,
    (fencing, mutant): (bool, Option<Mutant>),
    seed: u64,
) -> Redlock {
    let spec = ClientSpec {
        ttl: TTL,
        node_timeout: NODE_TIMEOUT,
        attempts: 1000,
        retry_delay: 20 * MS,
        quarantine: true,
        fencing,
        mutant,
        net: NET,
    };
    let links = |m: usize| StdRng::seed_from_u64(seed.wrapping_mul(16).wrapping_add(m as u64));
    let adjust = |b: crate::Builder| {
        b.ttl_max(TTL * 2)
            .watchdog(crate::Watchdog::new().interval(EXTEND_INTERVAL))
    };
    world::build_client_with(&spec, servers, links, sends, adjust).0
}

/// Three masters that keep their data, and a client over them.
struct Rig {
    servers: Vec<Arc<SimServer>>,
    sends: Arc<SendLog>,
    client: Redlock,
    fencing: bool,
    mutant: Option<Mutant>,
}

impl Rig {
    fn new(seed: u64, fencing: bool, mutant: Option<Mutant>) -> Self {
        let clock = Clock::start();
        let servers: Vec<Arc<SimServer>> = (0..3)
            .map(|m| Arc::new(SimServer::new(m, true, clock)))
            .collect();
        let sends = Arc::new(SendLog::default());
        let client = client_over(&servers, &sends, (fencing, mutant), seed);
        Self {
            servers,
            sends,
            client,
            fencing,
            mutant,
        }
    }

    /// Another client over the same masters and network, its links seeded from `seed`.
    fn other_client(&self, seed: u64) -> Redlock {
        client_over(
            &self.servers,
            &self.sends,
            (self.fencing, self.mutant),
            seed,
        )
    }

    fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// The values under `key`, one per master that holds one.
    fn values(&self, key: &str) -> Vec<Arc<str>> {
        self.servers
            .iter()
            .filter_map(|s| s.entry(key).map(|(v, _)| v))
            .collect()
    }

    /// The lease promises no more than a quorum holds: unless it is expired, its deadline
    /// is not beyond the quorum-th latest expiry of its value.
    fn backed(&self, lease: &LeaseHandle, what: &str) -> Result<(), String> {
        if lease.is_expired() {
            return Ok(());
        }
        let mut expiries: Vec<Instant> = self
            .servers
            .iter()
            .filter_map(|s| s.entry(lease.key()))
            .filter(|(v, _)| **v == *lease.value())
            .map(|(_, at)| at)
            .collect();
        expiries.sort_unstable_by(|a, b| b.cmp(a));
        let backed = expiries.get(self.quorum() - 1).copied();
        if backed.is_some_and(|at| at >= lease.deadline()) {
            return Ok(());
        }
        let now = Instant::now();
        Err(format!(
            "{what}: the lease promises {:?} more, but a quorum holds its value only for {:?} \
             ({} masters hold it)",
            lease.deadline() - now,
            backed.map(|at| at.saturating_duration_since(now)),
            expiries.len()
        ))
    }

    /// Checks [`Rig::backed`] every millisecond for as long as a round may take (connect
    /// and node timeout, and a reply's delay): between a master applying a request and its
    /// reply's arrival too.
    async fn watch(&self, lease: &LeaseHandle, what: &str) -> Result<(), String> {
        let until = Instant::now() + CONNECT_TIMEOUT + NODE_TIMEOUT + NET.delay.1 * 2;
        while Instant::now() < until {
            self.backed(lease, what)?;
            tokio::time::sleep(MS).await;
        }
        Ok(())
    }

    /// Waits until the client's background work is done and every message in flight has
    /// landed (each background round's replies can start more of either).
    async fn settle(&self) -> Result<(), String> {
        for _ in 0..MAX_POLLS {
            let unfinished = self.client.shutdown().await;
            if unfinished > 0 {
                return Err(format!("{unfinished} background tasks outlived shutdown"));
            }
            let was_idle = self.sends.idle();
            self.sends.quiet().await;
            if was_idle {
                return Ok(());
            }
        }
        Err("the background work never settled".to_owned())
    }

    /// No master holds a value under `key` but `except`.
    fn only(&self, key: &str, except: Option<&str>, what: &str) -> Result<(), String> {
        let values = self.values(key);
        match values.iter().find(|v| Some(&***v) != except) {
            None => Ok(()),
            Some(v) => Err(format!(
                "{what}: a master still holds {v} (allowed: {except:?}; all: {values:?})"
            )),
        }
    }

    /// Once settled, no master holds a value under `key` but `except`, and that stays so
    /// over several extension intervals (a watchdog running after release would set the
    /// key again).
    async fn left_only(&self, key: &str, except: Option<&str>, what: &str) -> Result<(), String> {
        self.settle().await?;
        self.only(key, except, what)?;
        tokio::time::sleep(3 * EXTEND_INTERVAL).await;
        self.only(
            key,
            except,
            &format!("{what}, later (an extension after release?)"),
        )
    }
}

/// Fails the test with the violation.
fn clean(found: Result<usize, String>) -> usize {
    found.unwrap_or_else(|violation| panic!("{violation}"))
}

/// The acquire calls on a free lock, with fencing off and on (a write-back round more):
/// dropped, a call leaves none of its values; completed, its lease is backed by a quorum
/// and its release leaves nothing.
#[test]
fn acquiring_a_free_lock() {
    for (fencing, seed, name) in [false, true]
        .into_iter()
        .flat_map(|f| SEEDS.map(|s| (f, s)))
        .flat_map(|(f, s)| ["acquire", "try_acquire", "acquire_with"].map(|n| (f, s, n)))
    {
        let what = format!("{name} (fencing {fencing}, seed {seed})");
        let completed = clean(matrix(&what, |k| {
            sim(async {
                let rig = Rig::new(seed, fencing, None);
                let client = &rig.client;
                let watchdog = AcquireOptions::new().watchdog(true);
                let call = async {
                    match name {
                        "acquire" => client.acquire("r").await,
                        "try_acquire" => client.try_acquire("r").await,
                        _ => client.acquire_with("r", &watchdog).await,
                    }
                };
                let Some(result) = poll_then_drop(call, k).await else {
                    rig.left_only("r", None, &what).await?;
                    return Ok(false);
                };
                let lease = result.map_err(|e| format!("{what} failed: {e}"))?;
                assert_eq!(lease.fencing_token().is_some(), fencing, "{what}");
                rig.backed(&lease, &what)?;
                rig.settle().await?;
                rig.backed(&lease, &what)?;
                lease.release().await.map_err(|e| e.to_string())?;
                rig.left_only("r", None, &what).await?;
                Ok(true)
            })
        }));
        // Cut at least once between a request leaving and its reply.
        assert!(completed > 2, "{what} completed after {completed} polls");
    }
}

/// An acquire that waits while another client holds the lock (a budget of 150 ms): dropped
/// or timed out, it leaves no value of its own, and the holder's lease stays backed.
#[test]
fn waiting_for_a_held_lock() {
    for seed in SEEDS {
        let what = format!("waiting acquire (seed {seed})");
        let completed = clean(matrix(&what, |k| {
            sim(async {
                let rig = Rig::new(seed, true, None);
                let holder = rig
                    .other_client(seed + 100)
                    .acquire("r")
                    .await
                    .map_err(|e| e.to_string())?;
                let budget = AcquireOptions::new().wait_timeout(150 * MS);
                let out = poll_then_drop(rig.client.acquire_with("r", &budget), k).await;
                rig.settle().await?;
                rig.only("r", Some(holder.value()), &what)?;
                rig.backed(&holder, &what)?;
                match out {
                    Some(Ok(_)) => Err(format!("{what}: acquired a held lock")),
                    Some(Err(_)) => Ok(true),
                    None => Ok(false),
                }
            })
        }));
        assert!(completed > 5, "{what} completed after {completed} polls");
    }
}

/// A queued waiter (hand-off on, fair or not, a budget of 400 ms) while another client
/// holds the lock and releases it 60 ms in, handing it to the waiter: dropped at any
/// point (registering, waiting, handed the key, confirming), it leaves neither a lease
/// value nor its waiter id under the key once its background work is done (its dequeue
/// hands on or deletes a key handed to it); completed, its lease is backed by a quorum
/// and its release leaves nothing.
#[test]
fn waiting_in_the_queue_for_a_lock_released_meanwhile() {
    for (fair, seed) in [false, true]
        .into_iter()
        .flat_map(|f| SEEDS.map(|s| (f, s)))
    {
        let what = format!("queued acquire (fair {fair}, seed {seed})");
        let completed = clean(matrix(&what, |k| {
            sim(async {
                let rig = Rig::new(seed, true, None);
                let holder = rig
                    .other_client(seed + 100)
                    .acquire("r")
                    .await
                    .map_err(|e| e.to_string())?;
                let release = tokio::spawn(async move {
                    tokio::time::sleep(60 * MS).await;
                    holder.release().await.map_err(|e| e.to_string())
                });
                let options = AcquireOptions::new().fair(fair).wait_timeout(400 * MS);
                let out = poll_then_drop(rig.client.acquire_with("r", &options), k).await;
                release
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{what}: the holder's release failed: {e}"))?;
                match out {
                    Some(Ok(lease)) => {
                        rig.backed(&lease, &what)?;
                        rig.settle().await?;
                        rig.backed(&lease, &what)?;
                        lease.release().await.map_err(|e| e.to_string())?;
                        rig.left_only("r", None, &what).await?;
                        Ok(true)
                    }
                    Some(Err(e)) => Err(format!("{what} failed: {e}")),
                    None => {
                        rig.left_only("r", None, &what).await?;
                        Ok(false)
                    }
                }
            })
        }));
        // Cut while waiting and after the hand-off, not just at the start.
        assert!(completed > 5, "{what} completed after {completed} polls");
    }
}

/// with_lock: dropped before, during or after the work, the lock is released and stays
/// released (its watchdog stops).
#[test]
fn with_lock() {
    for seed in SEEDS {
        let what = format!("with_lock (seed {seed})");
        let completed = clean(matrix(&what, |k| {
            sim(async {
                let rig = Rig::new(seed, true, None);
                let work = |lease: LeaseHandle| async move {
                    // Long enough for the watchdog to extend once.
                    tokio::time::sleep(EXTEND_INTERVAL + 20 * MS).await;
                    lease.value().to_owned()
                };
                let options = AcquireOptions::new();
                let call = rig.client.with_lock("r", &options, work);
                let out = poll_then_drop(call, k).await;
                rig.left_only("r", None, &what).await?;
                match out {
                    Some(Ok(_)) => Ok(true),
                    Some(Err(e)) => Err(format!("{what} failed: {e}")),
                    None => Ok(false),
                }
            })
        }));
        assert!(completed > 5, "{what} completed after {completed} polls");
    }
}

/// One extension, dropped after poll `k`, of a lease acquired with a full TTL: `ttl`
/// `None` extends by the lease's TTL. Whatever the drop, the lease promises no more than a
/// quorum holds, at once and once the extension's messages have landed.
fn extension_case(
    seed: u64,
    ttl: Option<Duration>,
    mutant: Option<Mutant>,
    k: usize,
) -> Result<bool, String> {
    let what = format!("extend {ttl:?} (seed {seed})");
    sim(async {
        let rig = Rig::new(seed, true, mutant);
        let lease = rig.client.acquire("r").await.map_err(|e| e.to_string())?;
        // Every master holds the key with its full TTL.
        rig.settle().await?;
        let call = async {
            match ttl {
                None => lease.extend().await,
                Some(ttl) => lease.extend_with(ttl).await,
            }
        };
        let out = poll_then_drop(call, k).await;
        // The round runs in a task of its own and goes on after a drop: watch the lease
        // every millisecond while it may be undecided, then once it is done.
        rig.watch(&lease, &what).await?;
        rig.settle().await?;
        rig.backed(&lease, &what)?;
        if let Some(result) = &out {
            result.as_ref().map_err(|e| format!("{what} failed: {e}"))?;
        }
        lease.release().await.map_err(|e| e.to_string())?;
        rig.left_only("r", None, &what).await?;
        Ok(out.is_some())
    })
}

/// extend and extend_with, longer and much shorter than the time left.
#[test]
fn extending() {
    for seed in SEEDS {
        for ttl in [None, Some(TTL * 2), Some(400 * MS)] {
            let what = format!("extend {ttl:?} (seed {seed})");
            let completed = clean(matrix(&what, |k| extension_case(seed, ttl, None, k)));
            // The round runs in a task of its own: the call is polled to start it and to
            // take its report, and is dropped once in between.
            assert!(completed >= 2, "{what} completed after {completed} polls");
        }
    }
}

/// One release of a lease whose watchdog runs, dropped after poll `k`; with `behind`, an
/// extension holds the lease when the release is first polled, and runs to its end.
/// Polled once, the lease counts as released; its keys go and stay gone.
fn release_case(seed: u64, behind: bool, mutant: Option<Mutant>, k: usize) -> Result<bool, String> {
    let what = format!("release (behind an extension: {behind}, seed {seed})");
    sim(async {
        let rig = Rig::new(seed, true, mutant);
        let watchdog = AcquireOptions::new().watchdog(true);
        let lease = rig
            .client
            .acquire_with("r", &watchdog)
            .await
            .map_err(|e| e.to_string())?;
        rig.settle().await?;
        let handle = lease.handle();
        let mut extension = Box::pin(handle.extend());
        let out = if behind {
            // The extension's round starts in a task of its own, takes the lease's
            // extend/release lock and sends its requests.
            if futures::poll!(extension.as_mut()).is_ready() {
                return Err(format!("{what}: the extension ended without a round"));
            }
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            let release = poll_then_drop(lease.release(), k);
            let (_, out) = futures::join!(extension, release);
            out
        } else {
            drop(extension);
            poll_then_drop(lease.release(), k).await
        };
        let alive = !handle.is_lost();
        let left = rig.left_only("r", None, &what).await;
        match (alive, left) {
            (false, Ok(())) => {}
            (alive, left) => {
                let mut found = left.err().unwrap_or_default();
                if alive {
                    found.push_str("; a release that was polled left the lease alive");
                }
                return Err(format!("{what}: {found}"));
            }
        }
        match out {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(format!("{what} failed: {e}")),
            None => Ok(false),
        }
    })
}

/// release, alone and behind an extension in flight.
#[test]
fn releasing() {
    for seed in SEEDS {
        for behind in [false, true] {
            let what = format!("release (behind an extension: {behind}, seed {seed})");
            let completed = clean(matrix(&what, |k| release_case(seed, behind, None, k)));
            // Alone, a release completes on its second poll (when its background round
            // has cleared enough masters); behind an extension, after that one.
            assert!(completed >= 2, "{what} completed after {completed} polls");
        }
    }
}

/// shutdown after a lease with a running watchdog was dropped: dropped or not, the
/// release it waits for finishes within its bound (connect and node timeout), and the
/// key stays gone.
#[test]
fn shutting_down() {
    for seed in SEEDS {
        let what = format!("shutdown (seed {seed})");
        let completed = clean(matrix(&what, |k| {
            sim(async {
                let rig = Rig::new(seed, true, None);
                let watchdog = AcquireOptions::new().watchdog(true);
                let lease = rig
                    .client
                    .acquire_with("r", &watchdog)
                    .await
                    .map_err(|e| e.to_string())?;
                rig.settle().await?;
                drop(lease);
                let out = poll_then_drop(rig.client.shutdown(), k).await;
                if out.is_some_and(|unfinished| unfinished > 0) {
                    return Err(format!("{what}: releases outlived shutdown"));
                }
                // Not `settle`, which would wait through a shutdown of its own.
                let bound = Instant::now() + CONNECT_TIMEOUT + NODE_TIMEOUT + NET.delay.1 * 2;
                while !rig.values("r").is_empty() && Instant::now() < bound {
                    tokio::time::sleep(MS).await;
                }
                rig.only("r", None, &what)?;
                tokio::time::sleep(3 * EXTEND_INTERVAL).await;
                rig.only("r", None, &what)?;
                Ok(out.is_some())
            })
        }));
        assert!(completed > 1, "{what} completed after {completed} polls");
    }
}

/// The planted cancellation bugs (`--cfg redquorum_mutants`), caught by the matrix.
#[cfg(redquorum_mutants)]
mod mutants {
    use super::*;

    /// An extension by a much shorter TTL that keeps the old deadline until its round
    /// succeeds: once a quorum applied it and before the replies arrive, the masters
    /// expire the key at `t0 + 400 ms` while the lease still promises its whole TTL.
    // Checks I7 (no more validity than the masters hold).
    #[test]
    fn shrink_keeps_deadline_is_caught() {
        let ttl = Some(400 * MS);
        let mutant = Some(Mutant::ShrinkKeepsDeadline);
        let found = matrix("extend_with (planted bug)", |k| {
            extension_case(0, ttl, mutant, k)
        });
        let violation = found.expect_err("the planted bug went unnoticed");
        assert!(violation.contains("promises"), "{violation}");
        // The same drop without the bug is clean.
        assert!(extension_case(0, ttl, None, 1).is_ok());
    }

    /// A release that marks nothing until the extend/release lock is free, and runs its
    /// round in the caller's future: polled once while an extension holds the lease, then
    /// dropped, it sends nothing, and the watchdog goes on extending.
    // Checks I8 (nothing extends a lease after its release began).
    #[test]
    fn release_marks_done_first_is_caught() {
        let mutant = Some(Mutant::ReleaseMarksDoneFirst);
        let found = release_case(0, true, mutant, 1);
        let violation = found.expect_err("the planted bug went unnoticed");
        assert!(violation.contains("still holds"), "{violation}");
        assert!(violation.contains("left the lease alive"), "{violation}");
        assert_eq!(release_case(0, true, None, 1), Ok(false));
    }
}
