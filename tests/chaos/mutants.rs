//! Checker strength: every planted bug of `redquorum::Mutant` must be caught by a scenario
//! that holds for the real algorithm. A checker that has never caught a bug proves nothing.

use redquorum::Mutant;

use crate::harness::*;

/// The scenario that must catch `mutant`, or `None` when there is none (which fails).
async fn hunt(mutant: Mutant) -> Option<Outcome> {
    Some(match mutant {
        // Two sides of a partition of 4 masters each "win" with half of them.
        Mutant::HalfQuorum => crate::network::s11p(4, Some(mutant), Expect::Detect).await,
        // The slow path's late replies stretch the holder's validity past its keys' TTL.
        Mutant::IgnoreElapsed => crate::network::s10c(3, Some(mutant), Expect::Detect).await,
        // A release after expiry deletes the next holder's keys.
        Mutant::PlainDelRelease => crate::release::s18(3, Some(mutant), Expect::Detect).await,
        // A stopped majority holds acquire calls far past their wait budget.
        Mutant::NoNodeTimeout => crate::pause::s4(3, Some(mutant), Expect::Detect).await,
        // A failed attempt's late release deletes the next attempt's key (same value).
        Mutant::ReuseValue => crate::contention::s19r(Some(mutant), Expect::Detect).await,
        _ => return None,
    })
}

/// Mutants that no realistic scenario can catch until fencing exists, and why. Each still
/// runs its best scenario (S19r) and is reported; catching one is reported too, so the
/// list can shrink, but only a mutant *not* listed here fails the test by surviving.
///
/// `ReuseValue`: a failed attempt's release can only delete a later attempt's key (same
/// value) if it reaches the master *after* that attempt's SET. Both travel on the client's
/// single connection to that master, which is FIFO, and the release is handed to the
/// runtime before the next attempt starts (the retry pause, even a zero one, yields for at
/// least one timer tick), so it is always ahead; `SET NX` itself never compares values. The
/// reuse becomes harmful with fencing's phase-2 ownership check (`GET lock == v`, DESIGN.md
/// section 5), where a stale attempt would pass for the current one.
const NEEDS_FENCING: [Mutant; 1] = [Mutant::ReuseValue];

/// How many times each mutant's scenario runs: `REDQUORUM_CHAOS_MUTANT_RUNS`, else 1 (more
/// in a soak). Every run must catch the mutant.
fn runs() -> usize {
    std::env::var("REDQUORUM_CHAOS_MUTANT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 5 } else { 1 })
}

/// Runs on a current-thread runtime, which S19r needs (see its docs); the other scenarios
/// do not depend on the runtime's flavour.
#[tokio::test]
async fn every_mutant_is_caught() {
    let mut survivors = Vec::new();
    for mutant in Mutant::ALL {
        let runs = runs();
        let mut caught = 0;
        let mut scenario = String::from("none");
        for _ in 0..runs {
            match PLANTED.scope(mutant, hunt(mutant)).await {
                Some(out) => {
                    scenario = out.line.split_whitespace().next().unwrap_or("?").to_owned();
                    if out.met(Expect::Detect) {
                        caught += 1;
                    }
                }
                None => break,
            }
        }
        let expected_survivor = NEEDS_FENCING.contains(&mutant);
        let line = format!(
            "MUTANT {mutant:?}: caught {caught}/{runs} by {scenario}{}",
            if expected_survivor {
                " (not catchable until fencing exists; see tests/chaos/mutants.rs)"
            } else {
                ""
            }
        );
        eprintln!("[chaos] {line}");
        append_report(&line);
        if caught < runs && !expected_survivor {
            survivors.push(format!("{mutant:?} ({caught}/{runs})"));
        }
    }
    assert!(
        survivors.is_empty(),
        "mutants not caught in every run: {survivors:?}"
    );
}
