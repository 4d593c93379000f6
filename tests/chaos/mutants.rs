//! Checker strength: every planted bug of `redquorum::Mutant` must be caught by a scenario
//! that holds for the real algorithm, and by the checker the hunt names (a slow acquire
//! on a loaded machine catching an ordering bug would prove nothing). A checker that has
//! never caught a bug proves nothing. A hunt whose checker judges wall-clock time (a slow
//! acquire, a starved writer, a stalled hand-off), which a loaded machine can fire without
//! any bug, also runs its scenario unplanted, and that run must be clean: the catch is the
//! difference between the two.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redquorum::Mutant;

use crate::harness::*;

/// A scenario run against a planted bug (or none, for the unplanted run), with the
/// expectation it is given.
type Scenario = fn(Option<Mutant>, Expect) -> Pin<Box<dyn Future<Output = Outcome>>>;

/// One hunt: the mutant, what the hunt adds to its name, the checker that must fire, and
/// the scenario. A hunt that is not `required` has its catch rate printed and reported
/// but does not fail the suite; `why` says why.
struct Hunt {
    mutant: Mutant,
    with: &'static str,
    checker: Checker,
    scenario: Scenario,
    required: bool,
    why: &'static str,
}

/// Which scenario must catch which mutant, with which checker.
const HUNTS: &[Hunt] = &[
    // Two sides of a partition of 4 masters each "win" with half of them.
    Hunt {
        mutant: Mutant::HalfQuorum,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::network::s11p(4, m, expect)),
        required: true,
        why: "",
    },
    // The slow path's late replies stretch the holder's validity past its keys' TTL.
    Hunt {
        mutant: Mutant::IgnoreElapsed,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::network::s10c(3, m, expect)),
        required: true,
        why: "",
    },
    // A release after expiry deletes the next holder's keys.
    Hunt {
        mutant: Mutant::PlainDelRelease,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::release::s18(3, m, expect)),
        required: true,
        why: "",
    },
    // A stopped majority holds the mutant's acquire calls until the resume or their wait
    // budget, far past what their few attempts, each cut at a node timeout, may take.
    Hunt {
        mutant: Mutant::NoNodeTimeout,
        with: "",
        checker: Checker::SlowAcquire,
        scenario: |m, expect| Box::pin(crate::pause::s4(3, m, expect)),
        required: true,
        why: "",
    },
    // A failed attempt's release, delayed by the NOSCRIPT fallback on a master whose
    // script cache was flushed, deletes the winning attempt's key there (same value).
    Hunt {
        mutant: Mutant::ReuseValue,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::contention::s19r(m, expect)),
        required: true,
        why: "",
    },
    // docs/testing.md §5, the reused value with fencing: the same, with fencing's
    // ownership check. The check runs once, in the write-back, so it does not make the
    // shared value harmless: a late release that lands after it deletes the key. S19r
    // scripts that order: Y's attempts arrive a paced reply apart, and right after one of
    // them Z leaves and master 1's scripts are flushed, so that attempt's release runs two
    // slow replies later, after the next attempt's write-back has checked the key (see
    // `contention::s19r`).
    Hunt {
        mutant: Mutant::ReuseValue,
        with: " with the ownership check",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::contention::s19r_with(m, expect, Guards::RSV_F)),
        required: true,
        why: "",
    },
    // Masters killed and restarted under contention miss some grants, so their fence
    // counters drift apart; the max over one round's granting quorum then repeats or
    // goes below an earlier token.
    Hunt {
        mutant: Mutant::OneRoundToken,
        with: "",
        checker: Checker::Tokens,
        scenario: |m, expect| Box::pin(crate::restart::s20_with(3, m, expect, Guards::RSV_F, true)),
        required: true,
        why: "",
    },
    // Lock keys expire early on two masters in crossing order, so two clients read the
    // same counters; the max-write accepts the second one's equal token, both writes land
    // at the fenced register and one update is lost there.
    Hunt {
        mutant: Mutant::WritebackNoGuard,
        with: "",
        checker: Checker::FencedStorage,
        scenario: |m, expect| Box::pin(crate::clock::s15c(m, expect)),
        required: true,
        why: "",
    },
    // The force-unlocked holder extends before anyone else comes: the extension sets its
    // keys again, undoing the unlock, so the contender that should get in at once waits
    // until the holder's lease runs out.
    Hunt {
        mutant: Mutant::ExtendRecreates,
        with: "",
        checker: Checker::SlowAcquire,
        scenario: |m, expect| Box::pin(crate::unlock::s25e(3, m, expect)),
        required: true,
        why: "",
    },
    // A second group of clients under other terms (one member of the cluster alone, a
    // quorum of one) adopts the record anyway: it holds that member while the first group
    // holds the other two.
    Hunt {
        mutant: Mutant::IgnoreFingerprint,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| {
            Box::pin(crate::cluster::s22(
                true,
                crate::cluster::Second::OtherTerms,
                m,
                expect,
            ))
        },
        required: true,
        why: "",
    },
    // A bootstrap of masters in use, one of which lost a live lease's key, makes that
    // master vote at once: a contender gets it and the master the holder did not have.
    Hunt {
        mutant: Mutant::BootstrapSkipsEmptiness,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::cluster::s24(m, expect)),
        required: true,
        why: "",
    },
    // Each master counts the permits it holds and the client takes a majority's grants:
    // at N = 3 and limit 2, takers of one permit each reach three holders ({a, b}, {b, c},
    // {c, a}) without any fault. It takes holders of a bare majority and several racers for
    // the places a release frees, so sixteen takers race, for twice the usual phase.
    Hunt {
        mutant: Mutant::SemaphoreCountPerMaster,
        with: "",
        checker: Checker::Holders,
        scenario: |m, expect| Box::pin(crate::semaphore::s30(3, (2, 1, 16), true, m, expect)),
        required: true,
        why: "",
    },
    // The holder stalled past its TTL re-enters after a minority master came back empty:
    // the counter round sets the key there, one master counts, and the expired lease is
    // valid again while the contender holds the other two.
    Hunt {
        mutant: Mutant::ReentryCounter,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::reentry::s26r(m, expect)),
        required: true,
        why: "",
    },
    // A client of `{x, y}` counts every master where `y` was free, although `x` is held
    // there by a client of `{x}`: both hold `x`.
    Hunt {
        mutant: Mutant::ManyPartialVote,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| Box::pin(crate::many::s28(3, m, expect)),
        required: true,
        why: "",
    },
    // Readers let in past a waiting writer's intent: a stream of overlapping readers keeps
    // the writer out. The intent is about starvation, not exclusion: only the starvation
    // checker can see it.
    Hunt {
        mutant: Mutant::ReaderIgnoresIntent,
        with: "",
        checker: Checker::Starvation,
        scenario: |m, expect| Box::pin(crate::rwlock::rw3(3, m, expect)),
        required: true,
        why: "",
    },
    // The head of a fair queue is killed as the holder releases: the release hands the
    // lock to the dead waiter, and with liveness ignored the dead waiter stays the head on
    // every master for ever, so nobody is served again.
    Hunt {
        mutant: Mutant::HandoffIgnoresLiveness,
        with: "",
        checker: Checker::Stalled,
        scenario: |m, expect| {
            Box::pin(crate::handoff::h1(
                true,
                Duration::from_millis(30),
                m,
                expect,
            ))
        },
        required: true,
        why: "",
    },
    // Waiters stay inside 400 ms, well within their validity: a confirm that keeps the
    // handed key's 160 ms expiry lets the next waiter self-hand the expired key and get in.
    Hunt {
        mutant: Mutant::ConfirmKeepsHandoffExpiry,
        with: "",
        checker: Checker::Overlap,
        scenario: |m, expect| {
            Box::pin(crate::handoff::h1(
                false,
                Duration::from_millis(400),
                m,
                expect,
            ))
        },
        required: true,
        why: "",
    },
    // Every master sees B's registration before A's (masters 0 and 1 restarted from
    // snapshots while A was cut off, master 2 never reached by A before): scored by
    // arrival, B heads every queue and is served before A, whose ticket was issued before
    // B started.
    Hunt {
        mutant: Mutant::FairByArrival,
        with: "",
        checker: Checker::Fifo,
        scenario: |m, expect| Box::pin(crate::handoff::h5(m, expect)),
        required: true,
        why: "",
    },
];

/// Mutants of the public surface (a lease's extend and release paths, a waiter's clean-up
/// when its call ends), caught against real masters by a named integration test, not by a
/// contention scenario: the mutant, the test file, and the test function there, which must
/// exist and plant that mutant.
const HUNTED_ELSEWHERE: &[(Mutant, &str, &str)] = &[
    (
        Mutant::ShrinkKeepsDeadline,
        "tests/surface.rs",
        "the_shrink_keeps_deadline_mutant_is_caught",
    ),
    (
        Mutant::ReleaseMarksDoneFirst,
        "tests/surface.rs",
        "the_release_marks_done_first_mutant_is_caught",
    ),
    (
        Mutant::NoBackgroundRelease,
        "tests/surface.rs",
        "the_no_background_release_mutant_is_caught",
    ),
    // Its registration left behind after each way a call ends, and a dropped head's
    // handed key not passed on, each checked well within the waiter TTL.
    (
        Mutant::DequeueNeverSent,
        "tests/handoff.rs",
        "the_dequeue_never_sent_mutant_is_caught",
    ),
    (
        Mutant::DequeueNeverSent,
        "tests/handoff.rs",
        "a_dropped_head_that_sends_no_dequeue_is_caught",
    ),
];

/// The test files `HUNTED_ELSEWHERE` may name, with their sources.
const ELSEWHERE_SOURCES: &[(&str, &str)] = &[
    ("tests/surface.rs", include_str!("../surface.rs")),
    ("tests/handoff.rs", include_str!("../handoff.rs")),
];

/// What is wrong with `hunted` (entries of `HUNTED_ELSEWHERE`), given the test files'
/// `sources`: a file that is not there, a test function that is not in its file, or one
/// that does not plant its mutant (`Mutant::<name>` in its body).
fn elsewhere_problems(hunted: &[(Mutant, &str, &str)], sources: &[(&str, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (mutant, file, test) in hunted {
        let Some((_, source)) = sources.iter().find(|(f, _)| f == file) else {
            found.push(format!("{mutant:?}: {file} is not among the hunting files"));
            continue;
        };
        let Some(at) = source.find(&format!("fn {test}(")) else {
            found.push(format!("{mutant:?}: {file} has no `fn {test}(`"));
            continue;
        };
        let body = &source[at..];
        let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
        if !body.contains(&format!("Mutant::{mutant:?}")) {
            found.push(format!(
                "{mutant:?}: `{test}` in {file} does not plant Mutant::{mutant:?}"
            ));
        }
    }
    found
}

/// How many times each hunt runs: `REDQUORUM_CHAOS_MUTANT_RUNS`, else 2 (5 in a soak).
/// Every run must catch the mutant.
fn runs() -> usize {
    std::env::var("REDQUORUM_CHAOS_MUTANT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(if soak() { 5 } else { 2 })
}

#[test]
fn every_mutant_is_hunted() {
    let unhunted: Vec<Mutant> = Mutant::ALL
        .into_iter()
        .filter(|m| !HUNTS.iter().any(|h| h.mutant == *m))
        .filter(|m| !HUNTED_ELSEWHERE.iter().any(|(e, _, _)| e == m))
        .collect();
    for m in &unhunted {
        append_report(&format!("MUTANT {m:?}: NOT HUNTED"));
    }
    assert!(unhunted.is_empty(), "no scenario hunts {unhunted:?}");
    let found = elsewhere_problems(HUNTED_ELSEWHERE, ELSEWHERE_SOURCES);
    assert!(
        found.is_empty(),
        "hunted elsewhere, but:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_hunt_elsewhere_must_name_a_test_that_plants_its_mutant() {
    let source = concat!(
        "#[tokio::test]\n",
        "async fn caught() {\n",
        "    run(Some(Mutant::ReuseValue)).await;\n",
        "}\n",
        "\n",
        "fn other() {\n",
        "    Mutant::HalfQuorum;\n",
        "}\n",
    );
    let sources = [("tests/surface.rs", source)];
    let problems =
        |entry: (Mutant, &'static str, &'static str)| elsewhere_problems(&[entry], &sources);
    assert!(problems((Mutant::ReuseValue, "tests/surface.rs", "caught")).is_empty());
    let found = problems((Mutant::ReuseValue, "tests/surface.rs", "renamed"));
    assert!(
        found.iter().any(|f| f.contains("no `fn renamed(`")),
        "{found:?}"
    );
    let found = problems((Mutant::HalfQuorum, "tests/surface.rs", "caught"));
    assert!(
        found.iter().any(|f| f.contains("does not plant")),
        "{found:?}"
    );
    let found = problems((Mutant::ReuseValue, "tests/cancel.rs", "caught"));
    assert!(found.iter().any(|f| f.contains("not among")), "{found:?}");
}

/// Whether the hunt of `checker` also runs its scenario unplanted: the checkers that
/// judge wall-clock time, which a loaded machine can fire without the mutant.
fn needs_unplanted(checker: Checker) -> bool {
    matches!(
        checker,
        Checker::SlowAcquire | Checker::Starvation | Checker::Stalled
    )
}

/// What `hunt` makes of its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    runs: usize,
    /// Planted runs that the named checker caught (the run itself sound).
    caught: usize,
    /// Unplanted runs made, and those that were clean.
    unplanted: usize,
    clean: usize,
}

impl Tally {
    /// Counts a planted run's outcome: caught when sound and `checker` fired.
    fn planted(&mut self, out: &Outcome, checker: Checker) {
        self.runs += 1;
        if out.broken.is_empty() && out.fired(checker) {
            self.caught += 1;
        }
    }

    /// Counts an unplanted run's outcome: clean when it meets HOLD (sound, no checker
    /// fired).
    fn unplanted(&mut self, out: &Outcome) {
        self.unplanted += 1;
        if out.met(Expect::Hold) {
            self.clean += 1;
        }
    }

    /// Whether the hunt caught its mutant: every planted run caught, and every unplanted
    /// run clean, so that the checker fired for the bug and not for the machine.
    fn caught_every_time(&self) -> bool {
        self.caught == self.runs && self.clean == self.unplanted
    }
}

/// Runs the hunt of `mutant` (`with` names the variant) [`runs`] times, each followed by
/// an unplanted run of the same scenario when its checker judges wall-clock time, prints
/// and reports its catch rate, and asserts that every planted run caught the mutant with
/// the named checker and every unplanted run was clean.
async fn hunt(mutant: Mutant, with: &str) {
    let h = HUNTS
        .iter()
        .find(|h| h.mutant == mutant && h.with == with)
        .unwrap();
    let mut tally = Tally {
        runs: 0,
        caught: 0,
        unplanted: 0,
        clean: 0,
    };
    let mut code = String::from("?");
    for _ in 0..runs() {
        let planted = Hunted {
            mutant: h.mutant,
            planted: true,
        };
        let scenario = (h.scenario)(Some(h.mutant), Expect::Detect(h.checker));
        let out = HUNTED.scope(planted, scenario).await;
        code = out.line.split_whitespace().next().unwrap_or("?").to_owned();
        tally.planted(&out, h.checker);
        if needs_unplanted(h.checker) {
            let unplanted = Hunted {
                planted: false,
                ..planted
            };
            let scenario = (h.scenario)(None, Expect::Hold);
            let out = HUNTED.scope(unplanted, scenario).await;
            tally.unplanted(&out);
        }
    }
    let mut line = format!(
        "MUTANT {:?}{}: caught {}/{} by {code} ({})",
        h.mutant,
        h.with,
        tally.caught,
        tally.runs,
        h.checker.word()
    );
    if tally.unplanted > 0 {
        line.push_str(&format!(
            ", unplanted clean {}/{}",
            tally.clean, tally.unplanted
        ));
    }
    if !h.required {
        let line = format!("{line} (reported only: {})", h.why);
        eprintln!("[chaos] {line}");
        append_report(&line);
        return;
    }
    eprintln!("[chaos] {line}");
    append_report(&line);
    assert!(
        tally.caught_every_time(),
        "{line}: the mutant survived some runs, or the unplanted scenario was not clean \
         (a catch that the machine alone can make proves nothing; see the scenario lines \
         above)"
    );
}

#[test]
fn a_hunt_needs_every_unplanted_run_clean() {
    let fired = Outcome {
        starved: 1,
        ..Outcome::default()
    };
    let clean = Outcome::default();
    let mut tally = Tally {
        runs: 0,
        caught: 0,
        unplanted: 0,
        clean: 0,
    };
    tally.planted(&fired, Checker::Starvation);
    tally.unplanted(&clean);
    assert!(tally.caught_every_time(), "{tally:?}");
    // The same checker firing without the mutant: the catch proves nothing.
    tally.planted(&fired, Checker::Starvation);
    tally.unplanted(&fired);
    assert!(!tally.caught_every_time(), "{tally:?}");
    // A broken unplanted run is not clean either.
    let broken = Outcome {
        broken: vec!["a worker panicked".into()],
        ..Outcome::default()
    };
    let mut tally = Tally {
        runs: 0,
        caught: 0,
        unplanted: 0,
        clean: 0,
    };
    tally.planted(&fired, Checker::Starvation);
    tally.unplanted(&broken);
    assert!(!tally.caught_every_time(), "{tally:?}");
    for checker in [Checker::SlowAcquire, Checker::Starvation, Checker::Stalled] {
        assert!(needs_unplanted(checker), "{checker:?}");
        assert!(
            HUNTS.iter().filter(|h| h.checker == checker).count() > 0,
            "no hunt by {checker:?}"
        );
    }
}

// Checks I1 (two quorums of the same masters share a master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_half_quorum() {
    hunt(Mutant::HalfQuorum, "").await;
}

// Checks I3 (every master's copy of the key outlives the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_ignore_elapsed() {
    hunt(Mutant::IgnoreElapsed, "").await;
}

// Checks I6 (only one's own keys are touched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_plain_del_release() {
    hunt(Mutant::PlainDelRelease, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_no_node_timeout() {
    hunt(Mutant::NoNodeTimeout, "").await;
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_reuse_value() {
    hunt(Mutant::ReuseValue, "").await;
}

// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_reuse_value_with_the_ownership_check() {
    hunt(Mutant::ReuseValue, " with the ownership check").await;
}

// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_one_round_token() {
    hunt(Mutant::OneRoundToken, "").await;
}

// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_writeback_no_guard() {
    hunt(Mutant::WritebackNoGuard, "").await;
}

// Checks I6 (only one's own keys are touched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_extend_recreates() {
    hunt(Mutant::ExtendRecreates, "").await;
}

// Checks I1 (two quorums of the same masters share a master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_ignore_fingerprint() {
    hunt(Mutant::IgnoreFingerprint, "").await;
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_bootstrap_skips_emptiness() {
    hunt(Mutant::BootstrapSkipsEmptiness, "").await;
}

// Checks I16 (a semaphore never admits more than its limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_semaphore_count_per_master() {
    hunt(Mutant::SemaphoreCountPerMaster, "").await;
}

// Checks I7 (no more validity than the masters hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_reentry_counter() {
    hunt(Mutant::ReentryCounter, "").await;
}

// Checks I14 (no two leases share a resource, whatever lists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_many_partial_vote() {
    hunt(Mutant::ManyPartialVote, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_reader_ignores_intent() {
    hunt(Mutant::ReaderIgnoresIntent, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_handoff_ignores_liveness() {
    hunt(Mutant::HandoffIgnoresLiveness, "").await;
}

// Checks I18 (hand-off never gives two waiters a quorum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_confirm_keeps_handoff_expiry() {
    hunt(Mutant::ConfirmKeepsHandoffExpiry, "").await;
}

// Checks I19 (fair waiters are granted in ticket order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hunt_fair_by_arrival() {
    hunt(Mutant::FairByArrival, "").await;
}
