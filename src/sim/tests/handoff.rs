//! Hand-off to the next waiter and the fair lock in the simulation (docs/design.md §17):
//! queued waiters (`acquire_with`, hand-off on by default), fair ones
//! (`AcquireOptions::fair(true)`), waiters that give up on a short budget and waits whose
//! futures are dropped, among the hostile faults, with every protection on. Checked:
//! the overlap and fencing checkers as everywhere, FIFO among live fair waiters, and
//! liveness (a free lock with a registered waiter is granted within one TTL, one waiter
//! TTL and one refresh period, plus two node timeouts for the rounds, where no fault fell
//! near). And the three planted bugs of the scripts, each caught by the checker it
//! breaks.

use super::*;

/// Queued waiters, none fair: a few `try_acquire`s among them, some calls give up on a
/// short budget and some are dropped mid-wait; the others wait up to eight TTLs.
const QUEUED: Queued = Queued {
    fair: 0.0,
    try_only: 0.15,
    give_up: 0.15,
    dropped: 0.1,
    killed: 0.03,
    budget: 8.0,
    lapse: false,
};

/// Hand-off among the hostile faults, every protection on.
pub(super) const HANDOFF: Profile = Profile {
    name: "hand-off",
    masters: &[3, 5],
    waiting: Waiting::Queued(QUEUED),
    ..PROTECTED
};

/// Mostly fair waiters, arriving at staggered times.
const FAIR_QUEUED: Queued = Queued {
    fair: 0.8,
    ..QUEUED
};

/// Mostly fair waiters, arriving at staggered times, among the hostile faults.
pub(super) const FAIR: Profile = Profile {
    name: "fair lock",
    waiting: Waiting::Queued(FAIR_QUEUED),
    ..HANDOFF
};

/// Overlaps and fencing as in the protected profile (the unseen-loss exception only, for
/// the flushes of durable masters); FIFO and liveness hold, their excuses counted.
fn queued_hold(test: &str, profile: &Profile, share: Share) -> Held {
    let held = hold(test, profile, share, &[Exception::UnseenLoss]);
    if held.full {
        let stats = held.fixed;
        // Waiters queued, were handed the lock, gave up and were dropped; the liveness
        // checker judged free stretches.
        assert!(stats.queued_calls > stats.schedules, "{stats}");
        assert!(stats.handed_leases > 0, "{stats}");
        assert!(stats.gave_up > 0 && stats.dropped > 0, "{stats}");
        assert!(stats.stall_checked > 0, "{stats}");
        assert!(
            stats.held_keys_lost > 0 && stats.client_pauses > 0,
            "{stats}"
        );
    }
    held
}

// Checks I18 (hand-off never gives two waiters a quorum).
#[test]
fn handoff_holds() {
    let share = Share {
        fixed: 60,
        rotating: 30,
    };
    queued_hold(test_path!(), &HANDOFF, share);
}

// Checks I18 (hand-off exclusion) and I19 (fair order).
#[test]
fn fair_holds() {
    let share = Share {
        fixed: 60,
        rotating: 30,
    };
    let held = queued_hold(test_path!(), &FAIR, share);
    if held.full {
        assert!(
            held.fixed.fair_calls > held.fixed.schedules,
            "{}",
            held.fixed
        );
    }
}

/// For [`hold_each`]: no registration of a running call was pruned from a queue without a
/// fault to explain it (a refresh lost or late on that master, the master out or its data
/// lost, the pause after a troubled confirm): a running call refreshes in time.
fn refreshed(outcome: &Outcome) -> Result<(), String> {
    match outcome.pruned_waiting.first() {
        Some((call, master, at)) => Err(format!(
            "call #{call}'s registration was pruned from m{master}'s queue at {at:?} while the \
             call still ran, with no fault to explain it ({} such prunes)",
            outcome.pruned_waiting.len()
        )),
        None => Ok(()),
    }
}

/// No fault of the masters or the network; holders still pause past their deadline.
const CALM: Faults = Faults {
    crashes: 0,
    pauses: 0,
    flushes: 0,
    drop_p: 0.0,
    slow_p: 0.0,
    ..HOSTILE
};

/// Fair waiters among calm masters and a network that loses nothing.
const FAIR_CALM: Profile = Profile {
    name: "fair lock, calm masters",
    faults: CALM,
    ..FAIR
};

/// Fair waiters among calm masters and a network that loses nothing (holders still pause
/// past their deadline, waiters still give up, are dropped or killed): registrations are
/// refreshed in time and never lost, so no FIFO violation may be excused at all (a
/// registration not live there could only be a bug), and every free stretch is judged by
/// the liveness checker.
// Checks I19 (fair waiters are granted in ticket order).
#[test]
fn fair_among_calm_masters_holds() {
    let share = Share {
        fixed: 30,
        rotating: 30,
    };
    let calm = |outcome: &Outcome| {
        if let Some((v, Some(excuse))) = outcome.queue_violations.iter().find(|v| v.1.is_some()) {
            return Err(format!(
                "a FIFO violation excused ({excuse}) among calm masters, where no registration \
                 may lapse: {v}"
            ));
        }
        // A running call refreshes its registrations in time: none lapses and is pruned.
        refreshed(outcome)
    };
    let held = hold_each(test_path!(), &FAIR_CALM, share, &[], calm);
    if held.full {
        let stats = held.fixed;
        assert!(
            stats.fair_calls > stats.schedules && stats.stall_checked > 0,
            "{stats}"
        );
    }
}

/// Registrations that lapse between refreshes with no fault (a fault planted in the
/// masters' model: liveness keys live a quarter of the waiter TTL) let later fair calls
/// pass live earlier ones; among calm masters nothing excuses that.
#[test]
fn lapsing_registrations_among_calm_masters_are_caught() {
    let profile = Profile {
        name: "fair lock, calm masters, registrations lapsing",
        waiting: Waiting::Queued(Queued {
            lapse: true,
            ..FAIR_QUEUED
        }),
        ..FAIR_CALM
    };
    detect(
        test_path!(),
        &profile,
        30,
        queue_violation(&profile, |v| matches!(v, QueueViolation::Fifo { .. })),
    );
}

/// The same among the hostile faults: a registration not live on a granting master is
/// excused only for a fault of that master's (its data lost, the liveness key outliving
/// the waiter TTL since it was last written, a call of the waiter to it lost, late or
/// failed), so the lapses the plant makes are still caught. The faults excuse most lapses,
/// so the search takes more schedules than among calm masters (46 when last counted).
#[test]
fn lapsing_registrations_among_faults_are_caught() {
    let profile = Profile {
        name: "fair lock, registrations lapsing",
        waiting: Waiting::Queued(Queued {
            lapse: true,
            ..FAIR_QUEUED
        }),
        ..FAIR
    };
    detect(
        test_path!(),
        &profile,
        120,
        queue_violation(&profile, |v| matches!(v, QueueViolation::Fifo { .. })),
    );
}

/// For [`detect`]: the first unexcused violation of the queues that `wanted` accepts.
fn queue_violation(
    profile: &Profile,
    wanted: impl Fn(&QueueViolation) -> bool,
) -> impl Fn(&Outcome) -> Option<String> {
    move |outcome| {
        let (v, _) = outcome
            .queue_violations
            .iter()
            .find(|(v, excuse)| excuse.is_none() && wanted(v))?;
        Some(outcome.queue_report(profile, v))
    }
}

/// The planted bugs of the hand-off scripts (`--cfg redquorum_mutants`).
#[cfg(redquorum_mutants)]
mod mutants {
    use super::*;

    /// Hand-off on masters that keep their data, no flushes: nothing excuses an overlap or
    /// a passed ticket there.
    const QUEUED_DURABLE: Profile = Profile {
        name: "hand-off on durable masters",
        faults: DURABLE,
        ..HANDOFF
    };

    /// The confirm keeps the handed key's short expiry (`KEEPTTL`) while the client counts
    /// its validity from its own round: the key expires long before the lease's deadline,
    /// and the next waiter overlaps it.
    // Checks I18 (hand-off never gives two waiters a quorum).
    #[test]
    fn confirm_keeping_the_handoff_expiry_is_caught() {
        let profile = Profile {
            name: "confirm keeps the hand-off expiry",
            mutant: Some(Mutant::ConfirmKeepsHandoffExpiry),
            ..QUEUED_DURABLE
        };
        detect(
            test_path!(),
            &profile,
            200,
            violation(&profile, |_, v| v.is_overlap()),
        );
    }

    /// A fair waiter scored by its arrival on each master: a registration that lapsed or
    /// left (a split confirm) comes back behind later tickets, and a later waiter is
    /// served first while the earlier one is live.
    // Checks I19 (fair waiters are granted in ticket order).
    #[test]
    fn fair_by_arrival_is_caught() {
        let profile = Profile {
            name: "fair waiters scored by arrival",
            mutant: Some(Mutant::FairByArrival),
            waiting: FAIR.waiting,
            ..QUEUED_DURABLE
        };
        detect(
            test_path!(),
            &profile,
            300,
            queue_violation(&profile, |v| matches!(v, QueueViolation::Fifo { .. })),
        );
    }

    /// Hand-off to the queue's first member, live or not: a waiter killed mid-wait heads
    /// the queue for ever, and the live waiters behind it are never handed the free lock.
    /// Among no other fault, so that the liveness checker judges every stretch.
    #[test]
    fn handoff_ignoring_liveness_is_caught() {
        let profile = Profile {
            name: "hand-off ignores liveness",
            mutant: Some(Mutant::HandoffIgnoresLiveness),
            waiting: Waiting::Queued(Queued {
                killed: 0.1,
                ..QUEUED
            }),
            faults: CALM,
            ..QUEUED_DURABLE
        };
        detect(
            test_path!(),
            &profile,
            300,
            queue_violation(&profile, |v| matches!(v, QueueViolation::Stall { .. })),
        );
    }
}
