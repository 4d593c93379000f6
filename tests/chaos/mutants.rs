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
        // A failed attempt's release, delayed by the NOSCRIPT fallback on a master whose
        // script cache was flushed, deletes the winning attempt's key there (same value).
        Mutant::ReuseValue => crate::contention::s19r(Some(mutant), Expect::Detect).await,
        _ => return None,
    })
}

/// How many times each mutant's scenario runs: `REDQUORUM_CHAOS_MUTANT_RUNS`, else 1 (more
/// in a soak). Every run must catch the mutant.
fn runs() -> usize {
    std::env::var("REDQUORUM_CHAOS_MUTANT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if soak() { 5 } else { 1 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        let line = format!("MUTANT {mutant:?}: caught {caught}/{runs} by {scenario}");
        eprintln!("[chaos] {line}");
        append_report(&line);
        if caught < runs {
            survivors.push(format!("{mutant:?} ({caught}/{runs})"));
        }
    }
    assert!(
        survivors.is_empty(),
        "mutants not caught in every run: {survivors:?}"
    );
}
