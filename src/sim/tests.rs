//! The simulation suites: profiles whose schedules must stay clean (HOLD), and profiles
//! with a protection switched off whose violations the checkers must find (DETECT).
//!
//! `REDQUORUM_SIM_SEED=<n>` runs only schedule `n` of each test; `REDQUORUM_SIM_SCHEDULES`
//! changes how many schedules a HOLD test runs, and the search budget of a DETECT test.

use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::check::{self, LeaseRecord, Violation};
use super::net::{NetParams, SendLog};
use super::server::{Clock, SimServer};
use super::world::{self, ClientSpec, Faults, Outcome, Profile, Stats};
use crate::error::{ErrorKind, MasterOutcome};

const SEED_ENV: &str = "REDQUORUM_SIM_SEED";
const COUNT_ENV: &str = "REDQUORUM_SIM_SCHEDULES";

const MS: Duration = Duration::from_millis(1);

/// Crashes with and without data, stopped masters, a flush, slow and lost messages, and
/// holders that pause past their deadline: everything the protections must absorb.
const HOSTILE: Faults = Faults {
    crashes: 4,
    down: (0.005, 1.5),
    durable: 0.3,
    pauses: 2,
    flushes: 1,
    clock_jumps: 0,
    drop_p: 0.08,
    slow_p: 0.08,
    client_pause: 0.15,
};

/// The same, on masters that never lose data (`appendfsync always`, no `FLUSHALL`): the
/// stated assumption of fencing tokens.
const DURABLE: Faults = Faults {
    durable: 1.0,
    flushes: 0,
    ..HOSTILE
};

/// Every protection on: restart quarantine and fencing tokens.
const PROTECTED: Profile = Profile {
    name: "protected",
    masters: &[3],
    quarantine: true,
    fencing: true,
    mutant: None,
    faults: HOSTILE,
};

/// Every protection on, and masters that keep their data.
const FENCING_DURABLE: Profile = Profile {
    name: "fencing on durable masters",
    masters: &[3, 5],
    faults: DURABLE,
    ..PROTECTED
};

/// Masters whose wall clock jumps forward, so their lock keys expire early: the lock's
/// clock assumption is broken on purpose; fencing must still hold.
const CLOCK_JUMPS: Profile = Profile {
    name: "server clock jumps",
    masters: &[3, 5],
    faults: Faults {
        clock_jumps: 3,
        ..DURABLE
    },
    ..PROTECTED
};

/// Quick crashes that lose the data, and nothing to keep restarted masters out.
const EMPTY_RESTARTS_NO_QUARANTINE: Profile = Profile {
    name: "empty restarts without quarantine",
    masters: &[3, 5],
    quarantine: false,
    fencing: false,
    mutant: None,
    faults: Faults {
        crashes: 6,
        down: (0.001, 0.1),
        durable: 0.0,
        flushes: 0,
        ..HOSTILE
    },
};

/// The number of schedules: `REDQUORUM_SIM_SCHEDULES`, or `default`.
fn count(default: u64) -> u64 {
    match std::env::var(COUNT_ENV) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{COUNT_ENV}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Whether only one schedule is replayed (`REDQUORUM_SIM_SEED`).
fn replaying() -> bool {
    std::env::var_os(SEED_ENV).is_some()
}

/// The seeds to run: only `REDQUORUM_SIM_SEED` when set, else `0..count(default)`.
fn seeds(default: u64) -> Vec<u64> {
    match std::env::var(SEED_ENV) {
        Ok(v) => vec![
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{SEED_ENV}={v:?} is not a number")),
        ],
        Err(_) => (0..count(default)).collect(),
    }
}

fn replay(test: &str, seed: u64) -> String {
    format!("replay: {SEED_ENV}={seed} cargo nextest run --all-features sim::tests::{test}")
}

/// Runs the schedules of `profile`; every violation that `excused` does not explain fails
/// the test with its seed. Returns the counters over all schedules and the number of
/// excused violations.
fn hold(
    test: &str,
    profile: &Profile,
    default: u64,
    excused: impl Fn(&Outcome, &Violation) -> bool,
) -> (Stats, usize) {
    let started = std::time::Instant::now();
    let mut total = Stats::default();
    let mut excused_count = 0;
    for seed in seeds(default) {
        let outcome = world::run(profile, seed);
        let (ok, bad): (Vec<&Violation>, Vec<&Violation>) = outcome
            .violations
            .iter()
            .partition(|v| excused(&outcome, v));
        assert!(
            bad.is_empty(),
            "{}{}",
            outcome.report(profile, &bad),
            replay(test, seed)
        );
        assert_eq!(
            outcome.stats.unfinished,
            0,
            "clients still running at the horizon\n{}\n{}",
            outcome.schedule,
            replay(test, seed)
        );
        if let Some(first) = ok.first() {
            eprintln!(
                "{test}: seed {seed} has {} excused violations, the first: {first}",
                ok.len()
            );
        }
        excused_count += ok.len();
        total += outcome.stats;
    }
    eprintln!(
        "{test} [{}]: {total}; {excused_count} excused violations; {:.1}s",
        profile.name,
        started.elapsed().as_secs_f64()
    );
    (total, excused_count)
}

/// Nothing is excused.
fn strict(_: &Outcome, _: &Violation) -> bool {
    false
}

/// Searches the schedules of `profile` for a violation that `wanted` accepts; fails if
/// none turns up within the budget. Returns the seed and how many schedules it took.
fn detect(
    test: &str,
    profile: &Profile,
    budget: u64,
    wanted: impl Fn(&Violation) -> bool,
) -> (u64, usize) {
    let started = std::time::Instant::now();
    for (tried, seed) in seeds(budget).into_iter().enumerate() {
        let outcome = world::run(profile, seed);
        if let Some(found) = outcome.violations.iter().find(|v| wanted(v)) {
            eprintln!(
                "{test} [{}]: found after {} schedules ({:.1}s)\n{}{}",
                profile.name,
                tried + 1,
                started.elapsed().as_secs_f64(),
                outcome.report(profile, &[found]),
                replay(test, seed)
            );
            return (seed, tried + 1);
        }
    }
    panic!(
        "{test}: the checkers found nothing in {budget} schedules of profile {}",
        profile.name
    );
}

/// Within fencing's own assumption (counters never lost), nothing is excused.
#[test]
fn fencing_on_durable_masters_holds() {
    let (stats, _) = hold(
        "fencing_on_durable_masters_holds",
        &FENCING_DURABLE,
        400,
        strict,
    );
    if !replaying() {
        assert!(stats.crashes > 0 && stats.fenced_rejections > 0, "{stats}");
    }
}

/// Restart quarantine without fencing: the acquire script reads only the epoch.
#[test]
fn quarantine_without_fencing_holds() {
    let profile = Profile {
        name: "quarantine without fencing",
        masters: &[3, 5],
        fencing: false,
        ..PROTECTED
    };
    hold("quarantine_without_fencing_holds", &profile, 300, strict);
}

/// Plain Redlock (`SET NX PX`, no quarantine) is safe when every master keeps its data.
#[test]
fn durable_masters_without_quarantine_hold() {
    let profile = Profile {
        name: "durable masters without quarantine",
        masters: &[3, 5],
        quarantine: false,
        fencing: false,
        faults: DURABLE,
        ..PROTECTED
    };
    hold(
        "durable_masters_without_quarantine_hold",
        &profile,
        300,
        strict,
    );
}

/// The storm of quick empty restarts that breaks plain Redlock, with quarantine on.
#[test]
fn empty_restarts_with_quarantine_hold() {
    let profile = Profile {
        name: "empty restarts with quarantine",
        quarantine: true,
        ..EMPTY_RESTARTS_NO_QUARANTINE
    };
    let (stats, _) = hold("empty_restarts_with_quarantine_hold", &profile, 400, strict);
    if !replaying() {
        assert!(stats.held_keys_lost > 0, "{stats}");
    }
}

/// Without quarantine, a master that restarted empty hands a held lock to a second client.
#[test]
fn empty_restarts_without_quarantine_double_grant() {
    detect(
        "empty_restarts_without_quarantine_double_grant",
        &EMPTY_RESTARTS_NO_QUARANTINE,
        count(500),
        Violation::is_overlap,
    );
}

/// A master whose clock jumps forward expires its keys early: two clients can then hold
/// valid leases at once (the lock's clock assumption is broken), but fencing tokens,
/// which use no clock, stay unique and ordered, and the fenced storage loses nothing.
#[test]
fn clock_jumps_break_exclusion_but_not_fencing() {
    let (stats, overlaps) = hold(
        "clock_jumps_break_exclusion_but_not_fencing",
        &CLOCK_JUMPS,
        300,
        |_, v| v.is_overlap(),
    );
    if !replaying() {
        assert!(stats.clock_jumps > 0, "{stats}");
        assert!(
            overlaps > 0,
            "no clock jump broke exclusion: the scenario is too weak"
        );
    }
}

/// Every message takes 1 ms and none is lost.
const CALM: NetParams = NetParams {
    delay: (MS, MS),
    slow_p: 0.0,
    slow_max: MS,
    drop_p: 0.0,
};

fn record(id: usize, lease: &crate::Lease, origin: tokio::time::Instant) -> LeaseRecord {
    let at = |i: tokio::time::Instant| i.saturating_duration_since(origin);
    LeaseRecord::new(
        id,
        id,
        0,
        (Duration::ZERO, at(tokio::time::Instant::now())),
        at(lease.deadline()),
        lease.fencing_token().map(|t| t.get()),
    )
}

/// The Redlock paper's crash scenario, step by step: A holds a bare majority {m0, m1}
/// (m2 is down); m0 restarts empty and m2 returns; B asks {m0, m1, m2}. Without
/// quarantine B gets {m0, m2} while A's lease is valid; with it, m0 and m2 abstain.
#[tokio::test(start_paused = true)]
async fn scripted_empty_restart_in_a_bare_majority() {
    for quarantine in [false, true] {
        let clock = Clock::start();
        let servers: Vec<Arc<SimServer>> = (0..3)
            .map(|m| Arc::new(SimServer::new(m, false, clock)))
            .collect();
        let sends = Arc::new(SendLog::default());
        let spec = ClientSpec {
            ttl: Duration::from_secs(1),
            node_timeout: 50 * MS,
            attempts: 1,
            retry_delay: 100 * MS,
            quarantine,
            fencing: false,
            mutant: None,
            net: CALM,
        };
        let calm = |_| StdRng::seed_from_u64(0);
        let a = world::build_client(&spec, &servers, calm, &sends);
        let b = world::build_client(&spec, &servers, calm, &sends);

        servers[2].crash();
        let first = a.acquire("r").await.unwrap();
        assert!(servers[0].holder("r").is_some() && servers[1].holder("r").is_some());
        servers[0].crash();
        assert_eq!(servers[0].restart(), Some(false));
        assert_eq!(servers[2].restart(), Some(false));

        let second = b.try_acquire("r").await;
        assert!(!first.is_expired(), "A's lease is still valid");
        if quarantine {
            let error = second.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::NoQuorum, "{error}");
            // m0 abstains and m1 refuses: the round fails without waiting for m2, and
            // no restarted master counted as a grant.
            let outcomes: Vec<&MasterOutcome> =
                error.masters().iter().map(|r| r.outcome()).collect();
            assert!(
                matches!(outcomes[0], MasterOutcome::Abstained { .. }),
                "{error}"
            );
            assert!(matches!(outcomes[1], MasterOutcome::HeldByOther), "{error}");
            assert!(
                matches!(
                    outcomes[2],
                    MasterOutcome::Abstained { .. } | MasterOutcome::Pending
                ),
                "{error}"
            );
            // Once A is done and the window has passed, the restarted masters vote again.
            first.release().await.unwrap();
            tokio::time::sleep(spec.ttl.mul_f64(1.1)).await;
            b.try_acquire("r").await.unwrap().release().await.unwrap();
        } else {
            let second = second.unwrap();
            let history = [
                record(0, &first, clock.origin()),
                record(1, &second, clock.origin()),
            ];
            let found = check::check(&history, &[]);
            assert!(
                found.len() == 1 && found[0].is_overlap(),
                "the checker must see the double grant: {found:?}"
            );
        }
    }
}
