//! Deliberately broken variants of the algorithm (`--cfg redquorum_mutants`; without it this
//! module, and every branch that plants a bug, is not compiled).
//!
//! The chaos suite runs its scenarios against each of these and requires its checkers to
//! catch every one: a checker that has never caught a bug proves nothing. Never enable a
//! mutant outside such a test.
//!
//! A bug is planted in one built client ([`Redlock::plant`](crate::Redlock::plant)) and
//! kept here, in a registry of the process keyed by the client's id (the id its owner
//! records carry, fresh for every client and shared by its clones): no setting, handle or
//! codec of the product carries it. Each place a bug changes asks the registry there and
//! then ([`planted`]), so that two clients of one process, one planted and one not, stay
//! independent. An entry outlives its client: the registry grows by one entry for each
//! client planted in the process, and never shrinks.
//!
//! Layer: a leaf (docs/design.md §10).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, PoisonError, RwLock};

/// One planted bug, selected per client with `Redlock::plant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mutant {
    /// The quorum is `N / 2` (at least 1) instead of `N / 2 + 1`: two disjoint halves can
    /// both "win".
    HalfQuorum,
    /// Validity is measured from when the quorum answered instead of from before the first
    /// request was sent, so time spent waiting for replies is not deducted.
    IgnoreElapsed,
    /// Release sends a plain `DEL key`, deleting whoever's lock is there.
    PlainDelRelease,
    /// No per-master request timeout (an hour instead of the node timeout).
    NoNodeTimeout,
    /// One lock value for all the retries of an acquire call instead of a fresh one per
    /// attempt.
    ReuseValue,
    /// Fencing in one round: every granting master increments its counter and the token
    /// is the largest result, with no write-back.
    OneRoundToken,
    /// The fencing write-back accepts a counter equal to the token (a max-write) instead
    /// of requiring it to be below.
    WritebackNoGuard,
    /// An extension with a TTL shorter than the time left keeps the lease's old deadline
    /// until the round succeeds, although the masters that applied it expire early.
    ShrinkKeepsDeadline,
    /// Release marks the lease done before it has sent anything and runs the round in the
    /// caller's future with no background fallback: cancelled while an extension holds the
    /// lease, it sends nothing and the watchdog goes on extending.
    ReleaseMarksDoneFirst,
    /// Releases meant to run in the background send nothing: dropped leases, failed or
    /// cancelled attempts, and a `release()` dropped before its round leave their keys to
    /// expire.
    NoBackgroundRelease,
    /// An extension sets a missing key again with its value, as extensions once did: the
    /// force-unlocked holder's next extension re-creates its keys, undoing the unlock, and
    /// succeeds instead of telling the holder that it lost the lock.
    ExtendRecreates,
    /// The client adopts the cluster record it finds whatever its own terms say (another
    /// master list, quorum, `ttl_max`, drift or prefix) and sends the record's fingerprint
    /// as its own: a client whose quorums need not overlap the cluster's is accepted.
    IgnoreFingerprint,
    /// `Redlock::init_cluster` bootstraps masters that hold keys under the prefix: masters
    /// that lost their keys vote at once beside others still holding a live lease's keys.
    BootstrapSkipsEmptiness,
    /// A semaphore counts its permits on each master: a master grants while it holds fewer
    /// than the limit, and the client takes the permits when a majority granted. Quorums
    /// of counts do not intersect in slots: at N = 3 and limit 2, three holders can each
    /// have a majority ({a, b}, {b, c}, {c, a}) with no master above the limit.
    SemaphoreCountPerMaster,
    /// Re-entry as a per-master hold counter (Redisson's HINCRBY): `Lease::reenter` sends
    /// a round that sets the key again with the lease's value and a fresh TTL wherever it
    /// is missing or ours, counts any one master's success, and moves the lease's deadline
    /// to that round's `t0 + ttl - drift` (forgetting a loss by expiry): an extension
    /// without a quorum, which revives a lease whose keys expired.
    ReentryCounter,
    /// `Redlock::acquire_many` counts a master's vote although it granted only some of the
    /// keys: each master grants every free key on its own and says granted if it granted
    /// any, so two callers can each count a quorum on a key they share.
    ManyPartialVote,
    /// A read-write lock grants a reader while a writer's intent is live: a stream of
    /// overlapping readers keeps a waiting writer out for as long as it lasts (starvation,
    /// not a breach of exclusion; docs/design.md §16).
    ReaderIgnoresIntent,
    /// The hand-off scripts take the first member of a lock's waiter queue as its head
    /// without checking that the waiter is live, and never prune a dead one: a waiter
    /// killed at the head of the queue stays there for ever, every release hands the key
    /// to it, and nobody behind it is served (a stall, not a breach of exclusion).
    HandoffIgnoresLiveness,
    /// A waiter's confirm round keeps the short expiry of the key handed to it (`KEEPTTL`)
    /// instead of setting its own TTL, while the client counts the lease's validity from
    /// the confirm round's start as usual: the keys expire long before the lease's
    /// deadline, and another client can take the lock meanwhile (validity counted from
    /// the hand-off instead of from the lease's own round).
    ConfirmKeepsHandoffExpiry,
    /// A fair waiter is scored by its arrival on each master (the master's own ticket
    /// counter) instead of by the ticket its client had issued on a quorum: masters may
    /// then order two waiters differently, and the fair lock stops serving in ticket
    /// order.
    FairByArrival,
    /// A queued waiter's call sends no `Dequeue` when it ends (a lease, an error, its
    /// budget or its future dropped): its registration stays in the queue on every master
    /// that did not grant it until its liveness key expires (one `waiter_ttl`), and a key
    /// handed to it meanwhile is passed on only by that expiry.
    DequeueNeverSent,
}

impl Mutant {
    /// Every mutant, for suites that must run them all.
    pub const ALL: [Mutant; 21] = [
        Mutant::HalfQuorum,
        Mutant::IgnoreElapsed,
        Mutant::PlainDelRelease,
        Mutant::NoNodeTimeout,
        Mutant::ReuseValue,
        Mutant::OneRoundToken,
        Mutant::WritebackNoGuard,
        Mutant::ShrinkKeepsDeadline,
        Mutant::ReleaseMarksDoneFirst,
        Mutant::NoBackgroundRelease,
        Mutant::ExtendRecreates,
        Mutant::IgnoreFingerprint,
        Mutant::BootstrapSkipsEmptiness,
        Mutant::SemaphoreCountPerMaster,
        Mutant::ReentryCounter,
        Mutant::ManyPartialVote,
        Mutant::ReaderIgnoresIntent,
        Mutant::HandoffIgnoresLiveness,
        Mutant::ConfirmKeepsHandoffExpiry,
        Mutant::FairByArrival,
        Mutant::DequeueNeverSent,
    ];
}

/// Lists every variant of [`Mutant`] through an exhaustive match: a variant added to the
/// enum fails to build the crate's tests until it is listed here, and then fails
/// `all_holds_every_variant_once_in_order` until [`Mutant::ALL`] holds it too.
#[cfg(test)]
macro_rules! every_variant {
    ($($variant:ident),+ $(,)?) => {
        impl Mutant {
            /// Every variant, in declaration order.
            const DECLARED: &[Mutant] = &[$(Mutant::$variant),+];

            /// The variant's position in declaration order (its discriminant). The match
            /// is what makes the compiler check that `DECLARED` names every variant.
            const fn index(self) -> usize {
                match self {
                    $(Mutant::$variant)|+ => self as usize,
                }
            }
        }
    };
}

#[cfg(test)]
every_variant![
    HalfQuorum,
    IgnoreElapsed,
    PlainDelRelease,
    NoNodeTimeout,
    ReuseValue,
    OneRoundToken,
    WritebackNoGuard,
    ShrinkKeepsDeadline,
    ReleaseMarksDoneFirst,
    NoBackgroundRelease,
    ExtendRecreates,
    IgnoreFingerprint,
    BootstrapSkipsEmptiness,
    SemaphoreCountPerMaster,
    ReentryCounter,
    ManyPartialVote,
    ReaderIgnoresIntent,
    HandoffIgnoresLiveness,
    ConfirmKeepsHandoffExpiry,
    FairByArrival,
    DequeueNeverSent,
];

/// The test seams of one client: a planted bug, and how fast its clock runs against real
/// time (1: as fast).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Planted {
    pub(crate) mutant: Option<Mutant>,
    pub(crate) clock_rate: f64,
}

impl Default for Planted {
    fn default() -> Self {
        Self {
            mutant: None,
            clock_rate: 1.0,
        }
    }
}

impl Planted {
    /// Whether `mutant` is planted.
    pub(crate) fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// The rate of the client's clock against real time, where it is not 1.
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        (self.clock_rate != 1.0).then_some(self.clock_rate)
    }

    /// The quorum of `n` masters where `Mutant::HalfQuorum` is planted: `N / 2`, at least 1.
    pub(crate) fn quorum(&self, n: usize) -> Option<usize> {
        self.is(Mutant::HalfQuorum).then(|| (n / 2).max(1))
    }
}

/// The test seams of every client planted in this process, by scope and client id.
static REGISTRY: LazyLock<RwLock<HashMap<(u64, String), Planted>>> = LazyLock::new(RwLock::default);

/// Whether any client of this process was planted: until one is, no lookup takes the lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// The crate's own tests: the simulation draws client ids from a seeded source, so two
/// schedules of one seed (in one process, on any thread) draw the same ids. Each seeded
/// source opens a scope of its own on its thread (`core::seeded::install`), and a plant
/// counts only in the scope it was made in: a schedule never sees another's bug.
#[cfg(test)]
mod scopes {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};

    thread_local! {
        static SCOPE: Cell<u64> = const { Cell::new(0) };
    }

    /// The next scope's number (0 is the one outside every seeded source).
    static NEXT: AtomicU64 = AtomicU64::new(1);

    /// This thread's scope.
    pub(super) fn current() -> u64 {
        SCOPE.with(Cell::get)
    }

    /// Opens a fresh scope on this thread; returns the one it replaces.
    pub(crate) fn enter() -> u64 {
        SCOPE.with(|scope| scope.replace(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// Returns this thread to `previous`, the scope [`enter`] replaced.
    pub(crate) fn leave(previous: u64) {
        SCOPE.with(|scope| scope.set(previous));
    }
}

#[cfg(test)]
pub(crate) use scopes::{enter as enter_scope, leave as leave_scope};

/// The scope plants are made and read in: always 0 outside the crate's own tests.
fn scope() -> u64 {
    #[cfg(test)]
    return scopes::current();
    #[cfg(not(test))]
    0
}

/// Plants `mutant` in the client whose id is `client`, in place of any planted before.
pub(crate) fn plant(client: &str, mutant: Mutant) {
    update(client, |planted| planted.mutant = Some(mutant));
}

/// Makes the clock of the client whose id is `client` run at `rate` times real time.
pub(crate) fn plant_clock_rate(client: &str, rate: f64) {
    update(client, |planted| planted.clock_rate = rate);
}

fn update(client: &str, change: impl FnOnce(&mut Planted)) {
    let mut registry = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
    change(registry.entry((scope(), client.to_owned())).or_default());
    ANY.store(true, Ordering::Release);
}

/// The test seams of the client whose id is `client`: the defaults (no bug, a clock at
/// the rate of real time) unless something was planted in it.
pub(crate) fn planted(client: &str) -> Planted {
    if !ANY.load(Ordering::Acquire) {
        return Planted::default();
    }
    let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    registry
        .get(&(scope(), client.to_owned()))
        .copied()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{Mutant, Planted, plant, plant_clock_rate, planted};

    #[test]
    fn a_plant_counts_only_in_its_scope() {
        let id = "registry-test-scoped";
        let outer = super::enter_scope();
        plant(id, Mutant::HalfQuorum);
        assert!(planted(id).is(Mutant::HalfQuorum));
        // Another schedule drawing the same id sees nothing of it.
        let inner = super::enter_scope();
        assert_eq!(
            planted(id),
            Planted::default(),
            "a bug leaked across scopes"
        );
        super::leave_scope(inner);
        assert!(planted(id).is(Mutant::HalfQuorum));
        super::leave_scope(outer);
        assert_eq!(planted(id), Planted::default());
    }

    #[test]
    fn each_client_has_its_own_seams() {
        let (a, b) = ("registry-test-a", "registry-test-b");
        plant(a, Mutant::HalfQuorum);
        plant_clock_rate(a, 0.5);
        assert!(planted(a).is(Mutant::HalfQuorum));
        assert_eq!(planted(a).clock_rate, 0.5);
        assert_eq!(planted(b), Planted::default());
        plant(a, Mutant::ReuseValue);
        assert!(planted(a).is(Mutant::ReuseValue) && !planted(a).is(Mutant::HalfQuorum));
        assert_eq!(
            planted(a).clock_rate,
            0.5,
            "a bug planted later keeps the clock rate"
        );
    }

    #[test]
    fn all_holds_every_variant_once_in_order() {
        for (i, m) in Mutant::DECLARED.iter().enumerate() {
            assert_eq!(m.index(), i, "{m:?} is listed out of declaration order");
        }
        for (i, m) in Mutant::ALL.iter().enumerate() {
            assert_eq!(m.index(), i, "Mutant::ALL[{i}] is {m:?}");
        }
        assert_eq!(
            Mutant::ALL.len(),
            Mutant::DECLARED.len(),
            "Mutant::ALL lacks {:?}",
            &Mutant::DECLARED[Mutant::ALL.len().min(Mutant::DECLARED.len())..]
        );
    }
}
