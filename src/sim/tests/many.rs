//! Several resources at once (`acquire_many`, docs/design.md §14) in the simulation:
//! clients that lock `{r0, r1}` or `{r1, r0}` among clients that lock `{r0}` or `{r1}`
//! alone, under the faults of the protected profiles. Every lease over several resources
//! is recorded once per resource, so the checkers judge each resource on its own: no two
//! leases valid at once on a resource, and its fencing tokens increasing.

use super::*;

/// Every protection on, among crashes that lose data and flushes; the clients mix single
/// locks with locks of both resources, listed in either order.
const MANY: Profile = Profile {
    name: "several resources at once, protected",
    masters: &[3, 5],
    many: true,
    waiting: Waiting::Default,
    ..PROTECTED
};

/// The same on masters that keep their data: nothing is excused.
const MANY_DURABLE: Profile = Profile {
    name: "several resources at once, durable masters",
    faults: DURABLE,
    ..MANY
};

/// Overlaps never happen; only the fencing case outside fencing's guarantee (a client
/// new to a flushed durable master, see `protected_three_masters_hold`) is excused.
// Checks I14 (no two leases share a resource, whatever lists).
#[test]
fn several_resources_at_once_hold() {
    let share = Share {
        fixed: 40,
        rotating: 20,
    };
    let held = hold(test_path!(), &MANY, share, &[Exception::UnseenLoss]);
    if held.full {
        let stats = held.fixed;
        // The dangerous situations were reached: leases lost keys, holders paused past
        // their deadlines, extensions of both kinds failed and succeeded.
        assert!(stats.acquired > 3 * stats.schedules, "{stats}");
        assert!(stats.held_keys_lost > 0, "{stats}");
        assert!(
            stats.client_pauses > 0 && stats.fenced_rejections > 0,
            "{stats}"
        );
        assert!(stats.extended > 0 && stats.extend_failed > 0, "{stats}");
    }
}

/// Within fencing's own assumption (counters never lost), nothing is excused: each
/// resource's tokens increase across its holders, whether they locked it alone or with
/// the other.
// Checks I14 (no two leases share a resource, whatever lists).
#[test]
fn several_resources_on_durable_masters_hold() {
    let share = Share {
        fixed: 30,
        rotating: 10,
    };
    let held = hold(test_path!(), &MANY_DURABLE, share, &[]);
    if held.full {
        let stats = held.fixed;
        assert!(stats.crashes > 0 && stats.fenced_writes > 0, "{stats}");
    }
}

/// A master's vote counted although it granted only some of the keys
/// (`Mutant::ManyPartialVote`): two callers each count a quorum on a key they share.
/// Without fencing: a fencing write-back checks again that a quorum holds each key, and
/// fails the acquisition that the partial votes won.
// Checks I14 (no two leases share a resource, whatever lists).
#[cfg(redquorum_mutants)]
#[test]
fn many_partial_vote_is_caught() {
    let profile = Profile {
        name: "partial votes of several resources",
        mutant: Some(Mutant::ManyPartialVote),
        fencing: false,
        ..MANY_DURABLE
    };
    detect(
        test_path!(),
        &profile,
        300,
        violation(&profile, |_, v| v.is_overlap()),
    );
}
