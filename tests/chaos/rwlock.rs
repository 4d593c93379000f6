//! The read-write lock under chaos (docs/design.md §16): RW1 mixed readers and writers
//! while a minority of masters is killed, stopped and restarted (HOLD); RW2 a writer
//! frozen past its TTL inside its section while a reader gets in (DETECT, and FENCED with
//! tokens: the reader's later token refuses the stale writer); RW3 a writer behind a
//! stream of overlapping readers gets in within its bound (the starvation checker), and
//! no reader is inside during its section (the overlap checker).
//!
//! Checker 1 is mode-aware: read sections may overlap each other, never a write section.

use redquorum::Retry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redquorum::{AcquireOptions, Mutant, Redlock};
use redquorum_testkit::Persistence;
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::Recorder;

/// One rw client until stopped: a read (3 in 5) or a write lease, its section, sometimes a
/// downgrade and a read section after it, release.
async fn rw_worker(
    client: Redlock,
    mut rec: Recorder,
    store_url: String,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut store = crate::support::raw(&store_url).await;
    let lock = client.rwlock(rec.resource());
    for _ in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let write = rng.below(5) < 2;
        rec.acq_start();
        let acquired = if write {
            lock.write().await
        } else {
            lock.read().await
        };
        let lease = match acquired {
            Ok(lease) => lease,
            Err(e) => {
                rec.acq_fail(&e);
                sleep(rng.between(Duration::ZERO, Duration::from_millis(20))).await;
                continue;
            }
        };
        if write {
            rec.acq_ok_mode(&lease, "write");
            critical_section(
                &mut rec,
                &lease,
                &mut store,
                Cs::Short(Duration::from_millis(10)),
                &mut rng,
            )
            .await;
            if rng.below(4) == 0 {
                let mut lease = lease;
                match lease.downgrade().await {
                    Ok(()) => {
                        rec.downgraded(&lease);
                        read_section(&mut rec, &mut store, &mut rng).await;
                        release(&mut rec, lease).await;
                    }
                    Err(e) => rec.rel(&format!("downgrade failed: {:?}", e.kind())),
                }
            } else {
                release(&mut rec, lease).await;
            }
        } else {
            rec.acq_ok_mode(&lease, "read");
            read_section(&mut rec, &mut store, &mut rng).await;
            release(&mut rec, lease).await;
        }
        sleep(rng.between(Duration::ZERO, Duration::from_millis(20))).await;
    }
}

/// A read section: a fenced read when the lease has a token (so the register knows the
/// reader's token), a short wait, no write.
async fn read_section(
    rec: &mut Recorder,
    store: &mut redis::aio::MultiplexedConnection,
    rng: &mut Rng,
) {
    rec.cs_start();
    let _ = fenced_read(rec, store).await;
    sleep(rng.between(Duration::ZERO, Duration::from_millis(15))).await;
    rec.cs_end_read();
}

/// Starts `k` rw workers on resource 0, each with its own client.
fn spawn_rw(env: &mut Env, k: usize, client: impl Fn(usize) -> Redlock) -> Workers {
    let stop = Arc::new(AtomicBool::new(false));
    let resource = env.resource(0);
    let mut tasks = Vec::new();
    for i in 0..k {
        let rec = env
            .history
            .recorder(format!("{}-rw{i}", env.setup.code), resource.clone());
        let seed = env.rng.next_u64();
        tasks.push(tokio::spawn(rw_worker(
            client(i),
            rec,
            env.store.url(),
            Arc::clone(&stop),
            seed,
        )));
    }
    Workers::from_parts(stop, tasks)
}

/// RW1: mixed readers and writers (with tokens, on durable masters under restart
/// quarantine) while one master of a minority is killed and restarted empty, then another
/// stopped and continued.
pub async fn rw1(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "RW1",
        "rwlock: kill, restart, pause a minority [RSV+F]",
        expect,
        n,
    )
    .persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    seed_epochs(&env.cluster).await;
    let urls = env.urls();
    let workers = spawn_rw(&mut env, 6, |_| {
        build(Guards::RSV_F.apply(client_over(urls.clone()), TTL), mutant)
    });
    let minority = n - (n / 2 + 1);
    let at = env.rng.between(Duration::from_millis(100), phase() / 3);
    sleep(at).await;
    let victims = env.rng.pick(n, minority);
    for &i in &victims {
        env.cluster.server_mut(i).kill().unwrap();
    }
    sleep(
        env.rng
            .between(Duration::from_millis(100), Duration::from_millis(400)),
    )
    .await;
    for &i in &victims {
        env.cluster.server_mut(i).restart(false).await.unwrap();
    }
    let paused = env.rng.pick(n, minority);
    for &i in &paused {
        env.cluster.server_mut(i).pause().unwrap();
    }
    sleep(
        env.rng
            .between(Duration::from_millis(100), Duration::from_millis(400)),
    )
    .await;
    for &i in &paused {
        env.cluster.server_mut(i).resume().unwrap();
    }
    env.note(format!(
        "killed and restarted empty {victims:?}, paused {paused:?}"
    ));
    env.mark_heal();
    sleep(phase().saturating_sub(at).max(Duration::from_millis(800))).await;
    env.finish(workers, Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw1_mixed_readers_and_writers_among_faults_n3() {
    rw1(3, None, Expect::Hold).await.check();
}

/// RW2: a writer is frozen inside its section (counter read, fenced read made) past its
/// TTL; a reader takes the lock once the writer's keys expire and reads; the writer wakes
/// and writes while the reader is still inside. Checker 1 must see it; with tokens the
/// reader's later token refuses the writer's write at the register.
pub async fn rw2(n: usize, expect: Expect, guards: Guards) -> Outcome {
    let name = format!("rwlock: writer frozen past its TTL{}", guards.label());
    let mut setup = Setup::new("RW2", name, expect, n);
    if guards.fencing {
        setup = setup.persistence(Persistence::AofAlways);
    }
    let mut env = Env::start(setup).await;
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
    }
    let resource = env.resource(0);
    let urls = env.urls();
    let ttl = Duration::from_millis(600);
    let builder = || {
        build(
            guards.apply(
                client_over(urls.clone())
                    .ttl(ttl)
                    .retry(Retry::new().wait(ttl * 3)),
                ttl,
            ),
            None,
        )
    };
    let (writer, reader) = (builder(), builder());
    let mut store = env.store().await;
    let mut rec = env.history.recorder("RW2-writer", &resource);
    rec.acq_start();
    let lease = reader_or_writer(&writer, &resource, true).await.unwrap();
    rec.acq_ok_mode(&lease, "write");
    let held = Held::inside(rec, lease, &mut store).await;
    // Frozen: the writer does nothing (no extension) while a reader waits for its keys to
    // expire and gets in.
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
    let mut rrec = env.history.recorder("RW2-reader", &resource);
    let store_url = env.store.url();
    let reading = tokio::spawn(async move {
        let mut store = crate::support::raw(&store_url).await;
        rrec.acq_start();
        match reader_or_writer(&reader, rrec.resource(), false).await {
            Ok(lease) => {
                rrec.acq_ok_mode(&lease, "read");
                rrec.cs_start();
                let _ = fenced_read(&rrec, &mut store).await;
                let _ = inside_tx.send(());
                let _ = leave_rx.await;
                rrec.cs_end_read();
                release(&mut rrec, lease).await;
                None
            }
            Err(e) => {
                rrec.acq_fail(&e);
                Some(format!("{:?}", e.kind()))
            }
        }
    });
    let entered = inside_rx.await.is_ok();
    let started = Instant::now();
    held.leave(&mut store).await;
    let _ = leave_tx.send(());
    if let Some(kind) = reading.await.unwrap() {
        env.note(format!("the reader failed: {kind}"));
    }
    env.note(format!(
        "reader inside while the writer was frozen: {entered}; the writer's write took {} ms",
        started.elapsed().as_millis()
    ));
    env.finish(Workers::none(), Checks::default()).await
}

/// A read (`write` false) or write lease of `resource`.
async fn reader_or_writer(
    client: &Redlock,
    resource: &str,
    write: bool,
) -> Result<redquorum::Lease, redquorum::Error> {
    let lock = client.rwlock(resource);
    let options = AcquireOptions::new().watchdog(false);
    if write {
        lock.write_with(&options).await
    } else {
        lock.read_with(&options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw2_writer_frozen_past_its_ttl_n3() {
    rw2(3, Expect::Detect(Checker::Overlap), Guards::BR)
        .await
        .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw2_writer_frozen_past_its_ttl_fenced_n3() {
    rw2(3, Expect::Fenced, Guards::RSV_F).await.check();
}

/// How long the writer of RW3 may wait: the hold of the readers it found, plus the
/// intent's refresh (a third of the TTL) and a few rounds.
const WRITER_BOUND: Duration = Duration::from_millis(1_000);

/// How long RW3's writer stays inside its section.
const WRITER_SECTION: Duration = Duration::from_millis(100);

/// RW3: readers keep coming (a new one every 50 ms, each holding 150 ms, so they always
/// overlap); a writer that starts among them must get in within `WRITER_BOUND`, not
/// when the stream stops, and no reader may be inside during its section (100 ms, a
/// counter read and write on the checker store). The stream lasts at least 2.5 s. A run in
/// which no reader was inside when the writer began asking proves nothing of starvation:
/// it is broken.
pub async fn rw3(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "RW3",
        "rwlock: a writer behind a stream of readers",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let resource = env.resource(0);
    let urls = env.urls();
    let hold = Duration::from_millis(150);
    let stream = phase().max(Duration::from_millis(2500));
    let clients: Vec<Redlock> = (0..3)
        .map(|_| {
            build(
                client_over(urls.clone()).retry(Retry::new().attempts(10_000).wait(stream * 2)),
                mutant,
            )
        })
        .collect();
    let writer = build(
        client_over(urls.clone()).retry(Retry::new().attempts(10_000).wait(stream * 2)),
        mutant,
    );
    for client in clients.iter().chain([&writer]) {
        warm(client, &env.prefix).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let end = Instant::now() + stream;
    let mut i = 0;
    let writer_at = Instant::now() + hold;
    let mut writing = None;
    // How many readers are inside their section now.
    let inside = Arc::new(AtomicUsize::new(0));
    while Instant::now() < end {
        let client = clients[i % clients.len()].clone();
        let mut rec = env.history.recorder(format!("RW3-r{i}"), resource.clone());
        let reading = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            rec.acq_start();
            match client.rwlock(rec.resource()).read().await {
                Ok(lease) => {
                    rec.acq_ok_mode(&lease, "read");
                    rec.cs_start();
                    reading.fetch_add(1, Ordering::SeqCst);
                    sleep(hold).await;
                    reading.fetch_sub(1, Ordering::SeqCst);
                    rec.cs_end_read();
                    release(&mut rec, lease).await;
                }
                Err(e) => rec.acq_fail(&e),
            }
        }));
        i += 1;
        if writing.is_none() && Instant::now() >= writer_at {
            // A client of its own: a client's write while it reads is an upgrade.
            let client = writer.clone();
            let mut rec = env.history.recorder("RW3-writer", resource.clone());
            let store_url = env.store.url();
            let readers = Arc::clone(&inside);
            writing = Some(tokio::spawn(async move {
                let mut store = crate::support::raw(&store_url).await;
                let started = Instant::now();
                // The readers the writer finds inside as it begins asking.
                let among = readers.load(Ordering::SeqCst);
                rec.acq_start();
                let got = client.rwlock(rec.resource()).write().await;
                let waited = started.elapsed();
                match got {
                    Ok(lease) => {
                        rec.acq_ok_mode(&lease, "write");
                        // A real section, judged against the readers' by the overlap and
                        // lost-update checkers: it lasts two reader arrivals, so a reader
                        // let in beside the writer would start inside it.
                        let held = Held::inside(rec, lease, &mut store).await;
                        sleep(WRITER_SECTION).await;
                        held.leave(&mut store).await;
                        (among, Some(waited))
                    }
                    Err(e) => {
                        rec.acq_fail(&e);
                        (among, None)
                    }
                }
            }));
        }
        sleep(hold / 3).await;
    }
    let (among, waited) = match writing {
        Some(w) => w.await.unwrap(),
        None => (0, None),
    };
    if among == 0 {
        env.broken(
            "no reader was inside when the writer began: the writer was never behind readers",
        );
    }
    match waited {
        Some(w) if w <= WRITER_BOUND => {
            env.note(format!(
                "the writer, begun with {among} readers inside, got in after {} ms among {i} \
                 readers",
                w.as_millis()
            ));
        }
        Some(w) => env.starved(format!(
            "the writer waited {} ms behind readers (bound {} ms)",
            w.as_millis(),
            WRITER_BOUND.as_millis()
        )),
        None => env.starved("the writer never got in"),
    }
    env.finish(Workers::from_parts(stop, tasks), Checks::default())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw3_a_writer_is_not_starved_by_readers_n3() {
    rw3(3, None, Expect::Hold).await.check();
}
