//! The read-write lock in the simulation (docs/design.md §16): readers and writers on
//! masters that crash (keeping their data), stop and continue, over a network that
//! delays and loses messages, with holders that pause past their deadline. Checked: I17, no
//! write lease valid at once with any other lease of the lock (readers may overlap);
//! fencing tokens, one counter for both modes, unique and increasing in real time. And a
//! starvation profile: a writer behind a stream of overlapping readers gets in within a
//! bound, which the planted `ReaderIgnoresIntent` breaks; a schedule in which no reader
//! held the lock as the writer came fails, since it proves nothing (a fault planted in the
//! masters' model, every reader refused, shows it).

use rand::RngExt;
use tokio::time::Instant;

use super::*;

use crate::lease::LeaseMode;
use crate::{AcquireOptions, Redlock};

/// One lease of the lock, as the clients saw it.
#[derive(Debug, Clone)]
struct RwRecord {
    lease: LeaseRecord,
    write: bool,
    /// The lease this one was downgraded from (same token), if any.
    from: Option<usize>,
}

/// The first pair of leases valid at once of which one is a write lease, if any; then a
/// token that repeats or does not increase in real time, if any.
// Checks I17 (no write lease beside any other lease) and I12 across both modes.
fn rw_violation(records: &[RwRecord]) -> Option<String> {
    for (i, a) in records.iter().enumerate() {
        for b in &records[i + 1..] {
            if !(a.write || b.write) {
                continue;
            }
            for (af, at) in a.lease.validity() {
                for (bf, bt) in b.lease.validity() {
                    if af < bt && bf < at {
                        return Some(format!(
                            "overlap of {} lease {} and {} lease {} during [{:?}, {:?})",
                            if a.write { "write" } else { "read" },
                            a.lease.id,
                            if b.write { "write" } else { "read" },
                            b.lease.id,
                            af.max(bf),
                            at.min(bt)
                        ));
                    }
                }
            }
        }
    }
    for a in records {
        for b in records {
            let (Some(ta), Some(tb)) = (a.lease.token, b.lease.token) else {
                continue;
            };
            if a.lease.id == b.lease.id || b.from == Some(a.lease.id) || a.from == Some(b.lease.id)
            {
                continue;
            }
            if ta == tb {
                return Some(format!(
                    "leases {} and {} share token {ta}",
                    a.lease.id, b.lease.id
                ));
            }
            // Downgraded leases keep their write lease's token and times.
            if a.from.is_none()
                && b.from.is_none()
                && a.lease.acquired < b.lease.attempt_start
                && tb < ta
            {
                return Some(format!(
                    "lease {} (token {tb}) began after lease {} (token {ta}) was acquired",
                    b.lease.id, a.lease.id
                ));
            }
        }
    }
    None
}

/// The masters' faults and the network of one schedule.
#[derive(Debug, Clone, Copy)]
struct RwFaults {
    /// Crashes (data kept) and stops of one master of a minority at a time.
    outages: u32,
    net: NetParams,
    /// The chance that a holder pauses past its deadline before releasing.
    client_pause: f64,
}

const RW_FAULTS: RwFaults = RwFaults {
    outages: 4,
    net: NetParams {
        delay: (MS, Duration::from_millis(4)),
        slow_p: 0.05,
        slow_max: Duration::from_millis(400),
        drop_p: 0.05,
    },
    client_pause: 0.1,
};

fn rw_spec(ttl: Duration, net: NetParams, mutant: Option<Mutant>) -> ClientSpec {
    ClientSpec {
        ttl,
        node_timeout: 50 * MS,
        attempts: 1_000,
        retry_delay: 20 * MS,
        quarantine: true,
        fencing: true,
        mutant,
        net,
    }
}

/// Bootstraps the cluster record, so that brand-new masters vote at once.
async fn bootstrap(servers: &[Arc<SimServer>], spec: &ClientSpec) {
    let sends = Arc::new(SendLog::default());
    let calm = ClientSpec { net: CALM, ..*spec };
    let (admin, _) = world::build_client(&calm, servers, |_| StdRng::seed_from_u64(0), &sends);
    let init = admin.init_cluster().await.unwrap();
    assert_eq!(init.outcome, crate::InitOutcome::Bootstrapped, "{init}");
}

/// One schedule of mixed readers and writers among faults; returns the leases. With
/// `planted`, the masters' model grants readers past the writer key.
fn rw_schedule(seed: u64, faults: RwFaults, planted: bool) -> (usize, Vec<RwRecord>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = if rng.random_bool(0.5) { 3 } else { 5 };
    let clients = rng.random_range(3..=5usize);
    let ttl = Duration::from_millis(rng.random_range(300..=600));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The library's draws, from the seed too (see "Determinism and replay" in `mod.rs`).
    let _seeded = crate::core::seeded::install(splitmix(seed));
    let records = runtime.block_on(async move {
        let clock = Clock::start();
        let servers: Vec<Arc<SimServer>> = (0..n)
            .map(|m| Arc::new(SimServer::new(m, true, clock)))
            .collect();
        if planted {
            for server in &servers {
                server.plant_reader_ignores_writer();
            }
        }
        let spec = rw_spec(ttl, faults.net, None);
        bootstrap(&servers, &spec).await;
        let sends = Arc::new(SendLog::default());
        let book = Arc::new(std::sync::Mutex::new(Vec::<RwRecord>::new()));
        let horizon = ttl * 12;
        let mut tasks = Vec::new();
        for c in 0..clients {
            let mut link_seed = StdRng::seed_from_u64(seed ^ ((c as u64 + 1) << 32));
            let (client, _) = world::build_client(
                &spec,
                &servers,
                |_| StdRng::seed_from_u64(link_seed.random()),
                &sends,
            );
            let rng = StdRng::seed_from_u64(rng.random());
            tasks.push(tokio::spawn(rw_client(
                client,
                c,
                rng,
                Arc::clone(&book),
                (clock, horizon, ttl),
                faults.client_pause,
            )));
        }
        let mut fault_rng = StdRng::seed_from_u64(rng.random());
        let outage_servers = servers.clone();
        let outages = tokio::spawn(async move {
            let minority = (n - 1) / 2;
            for _ in 0..faults.outages {
                tokio::time::sleep(ttl.mul_f64(fault_rng.random_range(0.5..2.0))).await;
                let down: Vec<usize> = (0..minority)
                    .map(|_| fault_rng.random_range(0..n))
                    .collect();
                let crash = fault_rng.random_bool(0.5);
                for &m in &down {
                    if crash {
                        outage_servers[m].crash();
                    } else {
                        outage_servers[m].pause(true);
                    }
                }
                tokio::time::sleep(ttl.mul_f64(fault_rng.random_range(0.2..1.5))).await;
                for &m in &down {
                    outage_servers[m].restart();
                    outage_servers[m].pause(false);
                }
            }
        });
        for task in tasks {
            task.await.unwrap();
        }
        outages.await.unwrap();
        book.lock().unwrap().clone()
    });
    (n, records)
}

/// One client: acquire a read or write lease, hold it (extending it, downgrading a write
/// lease sometimes, pausing past the deadline sometimes), release; until the horizon.
async fn rw_client(
    client: Redlock,
    c: usize,
    mut rng: StdRng,
    book: Arc<std::sync::Mutex<Vec<RwRecord>>>,
    (clock, horizon, ttl): (Clock, Duration, Duration),
    client_pause: f64,
) {
    let lock = client.rwlock("r");
    let at = |i: tokio::time::Instant| clock.at(i);
    let add = |record: RwRecord| {
        let mut book = book.lock().unwrap();
        let id = book.len();
        let mut record = record;
        record.lease.id = id;
        book.push(record);
        id
    };
    let set_released = |id: usize, when: Duration| {
        book.lock().unwrap()[id].lease.released = Some(when);
    };
    while clock.at(tokio::time::Instant::now()) < horizon {
        tokio::time::sleep(ttl.mul_f64(rng.random_range(0.0..0.4))).await;
        let write = rng.random_bool(0.4);
        let options = AcquireOptions::new().wait_timeout(ttl * 3);
        let started = tokio::time::Instant::now();
        let acquired = if write {
            lock.write_with(&options).await
        } else {
            lock.read_with(&options).await
        };
        let Ok(first) = acquired else {
            continue;
        };
        assert_eq!(
            first.mode(),
            if write {
                LeaseMode::Write
            } else {
                LeaseMode::Read
            }
        );
        let record = |lease: &crate::Lease, from: Option<usize>, attempt, write| RwRecord {
            lease: LeaseRecord::new(
                0,
                c,
                0,
                (at(attempt), at(tokio::time::Instant::now())),
                at(lease.deadline()),
                lease.fencing_token().map(|t| t.get()),
            ),
            write,
            from,
        };
        let mut id = add(record(&first, None, started, write));
        let mut held = Some(first);
        for _ in 0..rng.random_range(0..3u32) {
            tokio::time::sleep(ttl.mul_f64(rng.random_range(0.05..0.4))).await;
            let Some(mut lease) = held.take() else { break };
            if lease.mode() == LeaseMode::Write && rng.random_bool(0.3) {
                set_released(id, at(tokio::time::Instant::now()));
                let called = tokio::time::Instant::now();
                if lease.downgrade().await.is_ok() {
                    id = add(record(&lease, Some(id), called, false));
                    held = Some(lease);
                }
                continue;
            }
            match lease.extend().await {
                Ok(report) => {
                    let now = at(tokio::time::Instant::now());
                    book.lock().unwrap()[id]
                        .lease
                        .deadlines
                        .push((now, at(report.deadline())));
                    held = Some(lease);
                }
                Err(_) => held = Some(lease),
            }
        }
        if let Some(lease) = held {
            if rng.random_bool(client_pause) {
                tokio::time::sleep(ttl * 2).await;
            }
            set_released(id, at(tokio::time::Instant::now()));
            let _ = lease.release().await;
        }
    }
}

/// Runs the mixed schedules; any violation fails with its seed.
fn rw_hold(test: &str, share: Share, faults: RwFaults) {
    let (seeds, _) = hold_seeds(test, share);
    let (mut leases, mut reads, mut writes, mut downgrades, mut overlapping) = (0, 0, 0, 0, 0);
    for seed in seeds.iter().copied() {
        let (n, records) = rw_schedule(seed, faults, false);
        if let Some(v) = rw_violation(&records) {
            panic!("{test}: N={n}: {v}\n{records:#?}\n{}", replay(test, seed));
        }
        leases += records.len();
        reads += records.iter().filter(|r| !r.write).count();
        writes += records.iter().filter(|r| r.write).count();
        downgrades += records.iter().filter(|r| r.from.is_some()).count();
        overlapping += records
            .iter()
            .enumerate()
            .filter(|(i, a)| {
                !a.write
                    && records[i + 1..].iter().any(|b| {
                        !b.write
                            && a.lease.validity().iter().any(|&(af, at)| {
                                b.lease
                                    .validity()
                                    .iter()
                                    .any(|&(bf, bt)| af < bt && bf < at)
                            })
                    })
            })
            .count();
    }
    eprintln!(
        "{test}: {} schedules, {leases} leases ({reads} read, {writes} write, {downgrades} \
         downgraded, {overlapping} reads overlapping another)",
        seeds.len()
    );
    // The dangerous situations are reached: readers overlap, writers and downgrades occur.
    assert!(
        writes > 0 && downgrades > 0 && overlapping > 0,
        "{test}: too calm"
    );
}

/// Mixed readers and writers, extending and downgrading, while a minority of masters
/// crashes (keeping its data) or stops, messages are slow or lost, and holders pause past
/// their deadline.
// Checks I17 (no write lease beside any other lease).
#[test]
fn rwlock_among_faults_holds() {
    rw_hold(
        test_path!(),
        Share {
            fixed: 12,
            rotating: 8,
        },
        RW_FAULTS,
    );
}

/// The checker fires: two leases marked as writers that overlap are reported, and so is
/// a token that does not increase.
#[test]
fn the_rw_checker_finds_a_writer_overlapping_a_reader() {
    let lease = |id, from_ms: u64, to_ms: u64, token| {
        let mut l = LeaseRecord::new(
            id,
            id,
            0,
            (
                Duration::from_millis(from_ms),
                Duration::from_millis(from_ms),
            ),
            Duration::from_millis(to_ms),
            Some(token),
        );
        l.released = Some(Duration::from_millis(to_ms));
        l
    };
    let read = |id, f, t, tok| RwRecord {
        lease: lease(id, f, t, tok),
        write: false,
        from: None,
    };
    let write = |id, f, t, tok| RwRecord {
        lease: lease(id, f, t, tok),
        write: true,
        from: None,
    };
    assert_eq!(rw_violation(&[read(0, 0, 10, 1), read(1, 5, 15, 2)]), None);
    assert!(rw_violation(&[read(0, 0, 10, 1), write(1, 5, 15, 2)]).is_some());
    assert!(rw_violation(&[write(0, 0, 10, 1), write(1, 10, 15, 1)]).is_some());
    assert!(rw_violation(&[write(0, 0, 10, 2), read(1, 11, 15, 1)]).is_some());
}

/// The exclusion checker catches readers granted past the writer key (a fault planted in
/// the masters' model): within a few schedules, a read lease valid while a write lease is.
// Checks I17 (no write lease beside any other lease).
#[test]
fn readers_ignoring_the_writer_key_are_caught_by_the_exclusion_checker() {
    let test = test_path!();
    for seed in detect_seeds(10) {
        let (_, records) = rw_schedule(seed, RW_FAULTS, true);
        if let Some(v) = rw_violation(&records) {
            assert!(v.starts_with("overlap"), "{v}");
            eprintln!("{test}: found at seed {seed}: {v}");
            return;
        }
    }
    panic!("{test}: the exclusion checker found nothing");
}

/// What the writer behind a stream of readers saw.
#[derive(Debug, Clone, Copy)]
struct BehindReaders {
    /// How long the writer waited, if it got in.
    waited: Option<Duration>,
    /// Read leases granted during the stream.
    readers: usize,
    /// Read leases valid when the writer began its call: the readers it was behind.
    ahead: usize,
}

/// A writer behind a stream of overlapping readers (a new one every `hold / 3`, each
/// holding `hold`, for `stream`): how long it waited, whether it got in, and how many
/// readers were granted, before it among them. With `readers_refused`, the masters' model
/// refuses every reader (a planted fault).
async fn writer_behind_readers(
    mutant: Option<Mutant>,
    seed: u64,
    readers_refused: bool,
) -> BehindReaders {
    let mut rng = StdRng::seed_from_u64(seed);
    let ttl = Duration::from_millis(600);
    let hold = Duration::from_millis(rng.random_range(100..=200));
    let stream = ttl * 8;
    let clock = Clock::start();
    let servers: Vec<Arc<SimServer>> = (0..3)
        .map(|m| Arc::new(SimServer::new(m, true, clock)))
        .collect();
    if readers_refused {
        for server in &servers {
            server.plant_readers_refused();
        }
    }
    let net = NetParams {
        delay: (MS, 3 * MS),
        ..CALM
    };
    let spec = rw_spec(ttl, net, mutant);
    bootstrap(&servers, &spec).await;
    let sends = Arc::new(SendLog::default());
    let mut links = StdRng::seed_from_u64(rng.random());
    let mut client = || {
        world::build_client(
            &spec,
            &servers,
            |_| StdRng::seed_from_u64(links.random()),
            &sends,
        )
        .0
    };
    // Each read lease's validity: from its acquisition to its release (or deadline).
    let held = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let reader = client();
    let readers = tokio::spawn({
        let held = Arc::clone(&held);
        async move {
            let lock = reader.rwlock("r");
            let end = Instant::now() + stream;
            let mut tasks = Vec::new();
            while Instant::now() < end {
                let lock = lock.clone();
                let held = Arc::clone(&held);
                tasks.push(tokio::spawn(async move {
                    let options = AcquireOptions::new().wait_timeout(ttl * 2);
                    if let Ok(lease) = lock.read_with(&options).await {
                        let from = Instant::now();
                        tokio::time::sleep(hold).await;
                        let to = Instant::now().min(lease.deadline());
                        held.lock().unwrap().push((from, to));
                        let _ = lease.release().await;
                    }
                }));
                tokio::time::sleep(hold / 3).await;
            }
            for task in tasks {
                let _ = task.await;
            }
        }
    });
    tokio::time::sleep(hold).await;
    let writer = client();
    let started = Instant::now();
    let options = AcquireOptions::new().wait_timeout(stream + ttl * 2);
    let got = writer.rwlock("r").write_with(&options).await;
    let waited = started.elapsed();
    readers.await.unwrap();
    let held = held.lock().unwrap().clone();
    BehindReaders {
        waited: got.ok().map(|lease| {
            drop(lease);
            waited
        }),
        readers: held.len(),
        ahead: held
            .iter()
            .filter(|&&(from, to)| from <= started && started < to)
            .count(),
    }
}

/// The bound a writer waits within behind readers: the longest hold of the readers it
/// found (under a TTL), plus the intent's refresh (a third of the TTL) and a few rounds.
const STARVATION_BOUND: Duration = Duration::from_millis(1_000);

/// Whether the writer of the schedule of `seed` starved: `Ok(Some(why))` when it waited
/// beyond the bound or never got in, `Ok(None)` when it got in within it; `Err(why)` when
/// no reader held the lock as the writer came, so that the schedule proves nothing about
/// starvation, whatever the writer did.
fn starved(
    mutant: Option<Mutant>,
    seed: u64,
    readers_refused: bool,
) -> Result<Option<String>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let _seeded = crate::core::seeded::install(splitmix(seed));
    let seen = runtime.block_on(writer_behind_readers(mutant, seed, readers_refused));
    if seen.ahead == 0 {
        return Err(format!(
            "no reader held the lock when the writer came ({} read leases in the stream): \
             the writer was behind nobody",
            seen.readers
        ));
    }
    Ok(match seen.waited {
        Some(waited) if waited <= STARVATION_BOUND => None,
        Some(waited) => Some(format!(
            "the writer waited {waited:?} behind {} readers, beyond {STARVATION_BOUND:?}",
            seen.ahead
        )),
        None => Some(format!(
            "the writer never got in behind {} readers",
            seen.ahead
        )),
    })
}

/// Writers are not starved: behind a stream of overlapping readers, a writer gets in
/// within the bound. Readers must have held the lock as the writer came, or the schedule
/// fails: a writer that found the lock free proves nothing.
#[test]
fn a_writer_behind_a_stream_of_readers_gets_in_within_its_bound() {
    let test = test_path!();
    let (seeds, _) = hold_seeds(
        test,
        Share {
            fixed: 4,
            rotating: 2,
        },
    );
    for seed in seeds {
        match starved(None, seed, false) {
            Ok(None) => {}
            Ok(Some(why)) | Err(why) => panic!("{test}: {why}\n{}", replay(test, seed)),
        }
    }
}

/// The starvation check proves something only with readers ahead of the writer: with every
/// reader refused (a fault planted in the masters' model), the writer gets in at once,
/// and the check must fail the schedule instead of passing it.
#[test]
fn a_writer_with_no_reader_ahead_proves_nothing() {
    let verdict = starved(None, 0, true);
    assert!(
        verdict
            .as_ref()
            .is_err_and(|why| why.contains("no reader held the lock")),
        "the starvation check judged a writer that no reader was ahead of: {verdict:?}"
    );
}

/// Readers granted past a writer's intent (the planted `ReaderIgnoresIntent`): the stream
/// keeps the writer out beyond its bound. The starvation checker catches it; the
/// exclusion checker cannot, since the intent is about starvation, not exclusion.
#[cfg(redquorum_mutants)]
#[test]
fn reader_ignoring_intent_is_caught() {
    let test = test_path!();
    for seed in detect_seeds(4) {
        // Only a writer that was behind readers shows starvation.
        if let Ok(Some(why)) = starved(Some(Mutant::ReaderIgnoresIntent), seed, false) {
            eprintln!(
                "{test}: found at seed {seed}: {why}\n{}",
                replay(test, seed)
            );
            return;
        }
    }
    panic!("{test}: the starvation checker found nothing");
}
