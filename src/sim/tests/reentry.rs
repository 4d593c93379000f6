//! Re-entry in the simulation (docs/design.md §14): holders re-enter their lease inside
//! the critical section, after their work or after a pause past their deadline, and rely
//! on what the re-entry says. Re-entry asks no master, so exclusion holds as it does
//! without it; re-entry by a per-master counter (`Mutant::ReentryCounter`) revives leases
//! whose keys expired, and the overlap checker finds it.

use super::*;

/// Every protection on, among the hostile faults; half the critical sections re-enter,
/// and holders pause past their deadline more often, so that many re-entries come after
/// the lease ran out.
const REENTRY: Profile = Profile {
    name: "re-entry inside critical sections",
    masters: &[3, 5],
    faults: Faults {
        reentry: 0.5,
        client_pause: 0.3,
        ..HOSTILE
    },
    ..PROTECTED
};

/// Overlaps are never excused; fencing violations only as in the protected profile (a
/// flushed durable master the later client had not seen, `Exception::UnseenLoss`).
#[test]
fn reentry_holds() {
    let share = Share {
        fixed: 30,
        rotating: 30,
    };
    let held = hold(test_path!(), &REENTRY, share, &[Exception::UnseenLoss]);
    if held.full {
        let stats = held.fixed;
        assert!(stats.reentries > stats.schedules, "{stats}");
        assert!(stats.reentries_after_pause > 0, "{stats}");
        assert!(
            stats.held_keys_lost > 0 && stats.client_pauses > 0,
            "{stats}"
        );
    }
}

/// Plain Redlock on durable masters that crash and stop often, without quarantine or
/// fencing: exclusion holds without any exception, so every overlap is a bug. A master
/// that was down while a contender acquired comes back without the paused holder's
/// expired key: the place where a counter round finds a key to set.
const REENTRY_PLAIN: Profile = Profile {
    name: "re-entry on plain Redlock, durable masters",
    masters: &[3, 5],
    quarantine: false,
    fencing: false,
    mutant: None,
    faults: Faults {
        crashes: 6,
        drop_p: 0.3,
        reentry: 0.5,
        client_pause: 0.5,
        ..DURABLE
    },
    cluster: None,
    many: false,
    waiting: Waiting::Default,
};

#[test]
fn reentry_on_plain_redlock_holds() {
    let share = Share {
        fixed: 40,
        rotating: 20,
    };
    let held = hold(test_path!(), &REENTRY_PLAIN, share, &[]);
    if held.full {
        let stats = held.fixed;
        assert!(stats.reentries_after_pause > stats.schedules, "{stats}");
        assert!(stats.crashes > 0, "{stats}");
    }
}

/// Re-entry as a per-master counter round: a master where the key is missing (it was down
/// while a contender acquired, and the paused holder's key expired there) sets it again,
/// one success is enough, and the holder's expired lease is valid again while the
/// contender holds a quorum.
// Checks I7 (no more validity than the masters hold).
#[cfg(redquorum_mutants)]
#[test]
fn reentry_counter_is_caught() {
    let profile = Profile {
        name: "re-entry by a per-master counter",
        mutant: Some(Mutant::ReentryCounter),
        ..REENTRY_PLAIN
    };
    detect(
        test_path!(),
        &profile,
        200,
        violation(&profile, |_, v| v.is_overlap()),
    );
}
