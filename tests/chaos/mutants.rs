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
        // Masters killed and restarted under contention miss some grants, so their fence
        // counters drift apart; the max over one round's granting quorum then repeats or
        // goes below an earlier token (checker 4).
        Mutant::OneRoundToken => {
            crate::restart::s20_with(3, Some(mutant), Expect::Detect, Guards::RSV_F, true).await
        }
        _ => return None,
    })
}

/// Mutants no scenario reaches yet, each with the reason; reported, and listed here so
/// that a gap is a visible decision rather than a silent survivor. A mutant on this list
/// that a scenario catches must be taken off it (the hunt fails otherwise).
const NOT_REACHED: &[(Mutant, &str)] = &[(
    Mutant::WritebackNoGuard,
    "the write-back's ownership check already makes T unique whenever the later client's \
     phase-1 round counted a master of the earlier write-back's quorum; a duplicate needs \
     two leases holding quorums at once AND the shared master's phase-1 reply arriving \
     after the later round was decided, which no scripted fault reaches yet \
     (S20 with fencing runs it and finds no violation)",
)];

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
                    if out.caught() {
                        caught += 1;
                    }
                }
                None => break,
            }
        }
        let gap = NOT_REACHED.iter().find(|(m, _)| *m == mutant);
        let line = match gap {
            Some((_, why)) => format!("MUTANT {mutant:?}: NOT REACHED ({why})"),
            None => format!("MUTANT {mutant:?}: caught {caught}/{runs} by {scenario}"),
        };
        eprintln!("[chaos] {line}");
        append_report(&line);
        match gap {
            Some(_) if scenario != "none" => {
                survivors.push(format!("{mutant:?} is hunted now: take it off NOT_REACHED"));
            }
            Some(_) => {}
            None if caught < runs => survivors.push(format!("{mutant:?} ({caught}/{runs})")),
            None => {}
        }
    }
    assert!(
        survivors.is_empty(),
        "mutants not caught in every run: {survivors:?}"
    );
}
