//! The semaphore in the simulation (docs/design.md §15): clients taking 1..k permits of
//! one semaphore while masters crash (with or without their data), restart and pause, and
//! holders pause past their deadline. The checker (I16): at no instant do valid leases hold
//! more permits than the limit, and leases valid at one instant all gave the same limit (a
//! client with another limit than the stored one is refused; refused clients may replace
//! the stored limit with theirs, which masters holding permits refuse); and every client
//! finishes its calls by the horizon, as in the main world (a call that never returns
//! fails the schedule). Each HOLD test runs fixed seeds and seeds from the run's base
//! seed, as every profile does (`hold_seeds`).

use super::*;

use rand::RngExt;
use tokio::time::Instant;

use crate::{AcquireOptions, Redlock};

/// A semaphore profile.
#[derive(Debug, Clone, Copy)]
struct SemProfile {
    name: &'static str,
    masters: &'static [usize],
    /// The limits clients are configured with (one drawn per client).
    limits: &'static [u32],
    mutant: Option<Mutant>,
    /// Crashes, restarts (durable or empty) and pauses of a minority of masters.
    faults: bool,
    /// The chance that a holder pauses past its deadline.
    client_pause: f64,
    clients: (usize, usize),
    /// The most permits one acquisition asks for.
    most: u32,
}

/// One lease, valid from `from` to `to`.
#[derive(Debug, Clone)]
struct Held {
    client: usize,
    limit: u32,
    permits: u32,
    from: Duration,
    to: Duration,
}

#[derive(Debug, Default)]
struct SemBook {
    held: Vec<Held>,
    failed: u64,
    mismatches: u64,
    /// Replacements of the stored limit that a quorum took.
    replaced: u64,
    events: Vec<(Duration, String)>,
}

#[derive(Debug)]
struct SemOutcome {
    seed: u64,
    masters: usize,
    book: SemBook,
    /// Clients were still running at the horizon (a call that never returns).
    unfinished: bool,
    violation: Option<String>,
}

impl SemOutcome {
    /// What fails the schedule: a violation, or clients still running at the horizon.
    fn failure(&self) -> Option<String> {
        match (&self.violation, self.unfinished) {
            (Some(v), _) => Some(v.clone()),
            (None, true) => Some(format!(
                "clients still running at the horizon ({:?})",
                world::HORIZON
            )),
            (None, false) => None,
        }
    }
}

/// The first instant at which the valid leases hold more permits than their limit, or
/// leases given different limits are valid together.
// Checks I16 (a semaphore never admits more than its limit).
fn over_admitted(held: &[Held]) -> Option<String> {
    let mut starts: Vec<&Held> = held.iter().filter(|h| h.from < h.to).collect();
    starts.sort_by_key(|h| h.from);
    for (i, h) in starts.iter().enumerate() {
        // Every lease valid at h's start: started before (or with) it, not yet ended.
        let live: Vec<&&Held> = starts[..=i].iter().filter(|o| o.to > h.from).collect();
        let permits: u32 = live.iter().map(|o| o.permits).sum();
        if let Some(other) = live.iter().find(|o| o.limit != h.limit) {
            return Some(format!(
                "at {:?}: client {}'s lease under limit {} ({:?}) is valid beside client {}'s \
                 under limit {} ({:?})",
                h.from, h.client, h.limit, h, other.client, other.limit, other
            ));
        }
        if permits > h.limit {
            return Some(format!(
                "at {:?}: {permits} permits held under limit {}: {live:#?}",
                h.from, h.limit
            ));
        }
    }
    None
}

fn run(profile: &SemProfile, seed: u64) -> SemOutcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The library's draws (lock values, the order of slots), from the seed too.
    let seeded = crate::core::seeded::install(splitmix(seed));
    let (masters, book, finished) = runtime.block_on(drive(profile, seed));
    drop(runtime);
    drop(seeded);
    let violation = over_admitted(&book.held);
    SemOutcome {
        seed,
        masters,
        book,
        unfinished: !finished,
        violation,
    }
}

/// Runs one schedule; returns the master count, what was recorded, and whether every
/// client finished by the horizon.
async fn drive(profile: &SemProfile, seed: u64) -> (usize, SemBook, bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = profile.masters[rng.random_range(0..profile.masters.len())];
    let ttl = Duration::from_millis(rng.random_range(200..=600));
    let clock = Clock::start();
    let servers: Vec<Arc<SimServer>> = (0..n)
        .map(|m| Arc::new(SimServer::new(m, rng.random_bool(0.5), clock)))
        .collect();
    let sends = Arc::new(SendLog::default());
    let book = Arc::new(std::sync::Mutex::new(SemBook::default()));
    let clients = rng.random_range(profile.clients.0..=profile.clients.1);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let spec = ClientSpec {
            ttl,
            node_timeout: 20 * MS,
            attempts: 1000,
            retry_delay: ttl / 8,
            quarantine: true,
            fencing: false,
            mutant: profile.mutant,
            net: NetParams {
                delay: (MS, 3 * MS),
                slow_p: if profile.faults { 0.03 } else { 0.0 },
                slow_max: ttl / 4,
                drop_p: if profile.faults { 0.02 } else { 0.0 },
            },
        };
        let links = |m: usize| StdRng::seed_from_u64(seed ^ ((c as u64 + 1) << 32) ^ m as u64);
        let (client, _) = world::build_client(&spec, &servers, links, &sends);
        let limit = profile.limits[rng.random_range(0..profile.limits.len())];
        let crng = StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(c as u64));
        tasks.push(tokio::spawn(semaphore_client(
            client,
            c,
            limit,
            profile.most,
            profile.client_pause,
            ttl,
            clock,
            crng,
            Arc::clone(&book),
        )));
    }
    let nemesis = profile.faults.then(|| {
        let servers = servers.clone();
        let mut nrng = StdRng::seed_from_u64(!seed);
        let book = Arc::clone(&book);
        tokio::spawn(async move {
            // A minority at a time: one master of 3, up to two of 5.
            let minority = (n - 1) / 2;
            for _ in 0..4 {
                tokio::time::sleep(ttl.mul_f64(nrng.random_range(0.2..2.0))).await;
                let chosen: Vec<usize> = (0..nrng.random_range(1..=minority))
                    .map(|_| nrng.random_range(0..n))
                    .collect();
                let crash = nrng.random_bool(0.6);
                for &m in &chosen {
                    match crash {
                        true => {
                            servers[m].crash();
                        }
                        false => {
                            servers[m].pause(true);
                        }
                    }
                }
                let at = clock.at(Instant::now());
                let what = if crash { "crash" } else { "pause" };
                lock(&book).events.push((at, format!("{what} {chosen:?}")));
                tokio::time::sleep(ttl.mul_f64(nrng.random_range(0.1..1.5))).await;
                for &m in &chosen {
                    servers[m].restart();
                    servers[m].pause(false);
                }
            }
        })
    });
    let all = futures::future::join_all(tasks);
    let finished = tokio::time::timeout(world::HORIZON, all).await;
    if let Some(nemesis) = nemesis {
        nemesis.abort();
    }
    let finished = match finished {
        Ok(joined) => {
            for result in joined {
                if let Err(e) = result {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
            true
        }
        Err(_) => {
            let at = clock.at(Instant::now());
            lock(&book)
                .events
                .push((at, "the horizon: clients still running".to_owned()));
            false
        }
    };
    let book = std::mem::take(&mut *lock(&book));
    (n, book, finished)
}

fn lock(book: &std::sync::Mutex<SemBook>) -> std::sync::MutexGuard<'_, SemBook> {
    book.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[allow(clippy::too_many_arguments)]
async fn semaphore_client(
    client: Redlock,
    c: usize,
    limit: u32,
    most: u32,
    client_pause: f64,
    ttl: Duration,
    clock: Clock,
    mut rng: StdRng,
    book: Arc<std::sync::Mutex<SemBook>>,
) {
    let semaphore = client.semaphore("s", limit).unwrap();
    let options = AcquireOptions::new().wait_timeout(ttl * 3);
    for _ in 0..6 {
        let k = rng.random_range(1..=most.min(limit));
        match semaphore.acquire_with(k, &options).await {
            Ok(lease) => {
                let from = clock.at(Instant::now());
                let deadline = clock.at(lease.deadline());
                let hold = if rng.random_bool(client_pause) {
                    // Paused past the deadline: the lease's validity ends there anyway.
                    (deadline + ttl / 2).saturating_sub(from)
                } else {
                    lease.remaining().mul_f64(rng.random_range(0.0..0.5))
                };
                tokio::time::sleep(hold).await;
                let released = clock.at(Instant::now());
                lock(&book).held.push(Held {
                    client: c,
                    limit,
                    permits: k,
                    from,
                    to: released.min(deadline),
                });
                let _ = lease.release().await;
            }
            Err(e) => {
                let mismatch = e.kind() == ErrorKind::LimitMismatch;
                {
                    let mut book = lock(&book);
                    book.failed += 1;
                    book.mismatches += u64::from(mismatch);
                }
                if mismatch {
                    assert!(!e.is_retryable(), "{e}");
                    // Half the refused clients change the semaphore's limit to theirs.
                    if rng.random_bool(0.5)
                        && let Ok(replaced) = semaphore.replace_limit().await
                    {
                        let at = clock.at(Instant::now());
                        let mut book = lock(&book);
                        book.events.push((at, format!("client {c}: {replaced:?}")));
                        book.replaced += u64::from(replaced.took_quorum());
                    }
                }
            }
        }
        tokio::time::sleep(ttl.mul_f64(rng.random_range(0.0..0.3))).await;
    }
}

/// What a run of semaphore schedules did.
#[derive(Debug, Default, Clone, Copy)]
struct SemTotals {
    runs: u64,
    held: u64,
    failed: u64,
    mismatches: u64,
    /// Replacements of the stored limit that a quorum took.
    replaced: u64,
}

impl SemTotals {
    fn add(&mut self, book: &SemBook) {
        self.runs += 1;
        self.held += book.held.len() as u64;
        self.failed += book.failed;
        self.mismatches += book.mismatches;
        self.replaced += book.replaced;
    }
}

impl std::fmt::Display for SemTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} schedules, {} leases, {} acquires failed ({} limit mismatches, {} limits \
             replaced on a quorum)",
            self.runs, self.held, self.failed, self.mismatches, self.replaced
        )
    }
}

/// Runs the schedules of `seeds` until one that `stop` accepts; counts what they did
/// (those run, that one included). Only the DETECT tests, which plant a mutant, search.
#[cfg(redquorum_mutants)]
fn search(
    profile: &SemProfile,
    seeds: impl IntoIterator<Item = u64>,
    stop: impl Fn(&SemOutcome) -> bool,
) -> (SemTotals, Option<SemOutcome>) {
    let mut totals = SemTotals::default();
    for seed in seeds {
        let outcome = run(profile, seed);
        totals.add(&outcome.book);
        if stop(&outcome) {
            return (totals, Some(outcome));
        }
    }
    (totals, None)
}

/// The schedule, what failed it and its events, with the command that replays it.
fn sem_report(test: &str, profile: &SemProfile, outcome: &SemOutcome) -> String {
    format!(
        "{test} ({}): seed {} ({} masters): {}\nevents: {:#?}\n{}",
        profile.name,
        outcome.seed,
        outcome.masters,
        outcome.failure().unwrap_or_default(),
        outcome.book.events,
        replay(test, outcome.seed)
    )
}

/// HOLD: `profile` stays within its limit, and every client finishes by the horizon, in
/// every schedule: the fixed seeds and as many from the run's base seed as `share` says
/// (see `hold_seeds`). Returns the totals over the fixed seeds, and whether every fixed
/// seed ran (only then must the dangerous situations have been reached).
fn hold_semaphore(test: &str, profile: &SemProfile, share: Share) -> (SemTotals, bool) {
    let started = std::time::Instant::now();
    let (seeds, fixed) = hold_seeds(test, share);
    let mut totals = SemTotals::default();
    let mut fixed_totals = SemTotals::default();
    for (i, seed) in seeds.iter().copied().enumerate() {
        let outcome = run(profile, seed);
        if outcome.failure().is_some() {
            panic!("{}", sem_report(test, profile, &outcome));
        }
        totals.add(&outcome.book);
        if (i as u64) < fixed {
            fixed_totals.add(&outcome.book);
        }
    }
    eprintln!(
        "{test} ({}): {totals} ({fixed} fixed seeds), {:.1}s",
        profile.name,
        started.elapsed().as_secs_f64()
    );
    (fixed_totals, fixed == share.fixed)
}

/// The schedules of each semaphore HOLD test.
const SEM_SHARE: Share = Share {
    fixed: 16,
    rotating: 32,
};

const ONE_LIMIT: SemProfile = SemProfile {
    name: "semaphore under faults",
    masters: &[3, 5],
    limits: &[3],
    mutant: None,
    faults: true,
    client_pause: 0.1,
    clients: (3, 6),
    most: 2,
};

// Checks I16 (a semaphore never admits more than its limit).
#[test]
fn semaphore_holds_its_limit_under_faults() {
    let (fixed, full) = hold_semaphore(test_path!(), &ONE_LIMIT, SEM_SHARE);
    if full {
        assert!(fixed.held > 40, "too few leases to prove anything: {fixed}");
    }
}

/// Clients that disagree on the limit (2 or 3): clients with another limit than the stored
/// one are refused, and half of them replace it with theirs (refused by masters where
/// permits are live), so leases of both limits are never valid together.
// Checks I16 (the semaphore's limit) and I21 (slot keys below the stored limit).
#[test]
fn semaphore_clients_with_different_limits_never_hold_together() {
    let profile = SemProfile {
        name: "semaphore with two limits",
        limits: &[2, 3],
        ..ONE_LIMIT
    };
    let (fixed, full) = hold_semaphore(test_path!(), &profile, SEM_SHARE);
    if full {
        assert!(fixed.held > 40, "too few leases: {fixed}");
        assert!(fixed.mismatches > 0, "no client was refused for its limit");
        assert!(fixed.replaced > 0, "no limit was replaced");
    }
}

/// The checker fires: a history with three permits held under limit 2, and one mixing
/// limits.
// Checks I16 (a semaphore never admits more than its limit).
#[test]
fn the_semaphore_checker_finds_over_admission() {
    let h = |permits, limit, from, to| Held {
        client: 0,
        limit,
        permits,
        from: from * MS,
        to: to * MS,
    };
    assert!(over_admitted(&[h(1, 2, 0, 10), h(1, 2, 5, 20), h(1, 2, 10, 30)]).is_none());
    assert!(over_admitted(&[h(1, 2, 0, 10), h(1, 2, 5, 20), h(1, 2, 9, 30)]).is_some());
    assert!(over_admitted(&[h(2, 2, 0, 10), h(1, 2, 5, 20)]).is_some());
    assert!(over_admitted(&[h(1, 2, 0, 10), h(1, 3, 5, 20)]).is_some());
}

/// DETECT: each master counting its permits over-admits without any fault (N = 3,
/// limit 2: three holders with {a, b}, {b, c}, {c, a}).
// Checks I16 (a semaphore never admits more than its limit).
#[cfg(redquorum_mutants)]
#[test]
fn semaphore_count_per_master_is_caught() {
    let profile = SemProfile {
        name: "semaphore counting per master",
        masters: &[3],
        limits: &[2],
        mutant: Some(Mutant::SemaphoreCountPerMaster),
        faults: false,
        client_pause: 0.0,
        clients: (4, 6),
        most: 1,
    };
    let test = test_path!();
    let (totals, found) = search(&profile, detect_seeds(50), |o| o.violation.is_some());
    let outcome = found
        .unwrap_or_else(|| panic!("{test}: no over-admission in {totals} of {}", profile.name));
    eprintln!(
        "{test}: caught after {} schedules: {}\n{}",
        totals.runs,
        outcome.violation.unwrap_or_default(),
        replay(test, outcome.seed)
    );
}

/// DETECT: without a per-master timeout (the mutant waits an hour), a lost message holds
/// a client's call past the horizon; a schedule that ends with clients still running
/// fails, as in the main world.
#[cfg(redquorum_mutants)]
#[test]
fn semaphore_without_node_timeout_is_caught() {
    let profile = SemProfile {
        name: "semaphore without a node timeout",
        mutant: Some(Mutant::NoNodeTimeout),
        ..ONE_LIMIT
    };
    let test = test_path!();
    let (totals, found) = search(&profile, detect_seeds(16), |o| o.unfinished);
    let outcome =
        found.unwrap_or_else(|| panic!("{test}: no schedule hung in {totals} of {}", profile.name));
    eprintln!(
        "{test}: caught after {} schedules: {}\n{}",
        totals.runs,
        outcome.failure().unwrap_or_default(),
        replay(test, outcome.seed)
    );
}
