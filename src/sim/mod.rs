//! Deterministic simulation of the quorum logic against in-memory master models.
//!
//! The code under test is the library itself: real [`Redlock`](crate::Redlock) clients,
//! built by the real [`Builder`](crate::Builder), acquire, extend and release through the
//! real quorum rounds, fencing write-back and restart quarantine
//! ([`Guarded`](crate::guard::Guarded), applied by `Redlock::with_masters`). Only the
//! masters are replaced, behind the crate-private [`Master`](crate::master::Master) seam,
//! by models that run on tokio's paused clock, so a schedule of several virtual seconds
//! takes milliseconds of real time.
//!
//! # What is modelled
//! - **Masters** (`server.rs`): the keyspace, each op executed atomically with the
//!   semantics of `SET NX PX` and of `src/scripts/*.lua` (epoch record, fence counters,
//!   compare-and-`PEXPIRE` that never sets a missing key, strict or max-write write-back,
//!   compare-and-delete, the cluster record: the caller's fingerprint compared by the
//!   preamble of every lock script, `init_cluster`'s survey and stamp); expiry on the
//!   master's own wall clock; processes with an incarnation, a start time (uptime) and a
//!   durability setting.
//! - **Hand-off queues** (`server.rs`, docs/design.md §17), exactly as the scripts define
//!   them: each lock key's queue (a sorted set, ordered by score, then by member bytes),
//!   the waiters' liveness keys expiring on the master's own clock, the fair lock's
//!   ticket counter; `release.lua`'s hand-off to the live head (`live_head` prunes the
//!   dead members it meets, at most 256, then knows no head: a fair grant is refused and
//!   nothing is handed on), `acquire_queued.lua`
//!   (granted where the key is free or handed to the caller's waiter id, a fair acquire
//!   only behind no other live waiter, `PX ttl` never keeping a handed key's expiry; the
//!   served waiter leaves the queue), `enqueue.lua` (the strict ticket write-back, a
//!   refresh that never lowers the counter, the queue's expiry raised to twice the waiter
//!   TTL, the self-hand of a free key to a live head) and `dequeue.lua` (leaving, and
//!   handing on a key handed to the leaver), with the three planted script bugs. A crash
//!   without data or a flush loses queues, liveness keys and ticket counters like any
//!   key; a journal outside the data keeps what the checkers need (each waiter's score
//!   and what became of its registration, each queued grant with the waiters the master
//!   knew then).
//! - **Network** (`net.rs`): one connection per client and master with in-order delivery,
//!   seeded per-message delays, slow messages that arrive after the caller gave up (and
//!   are still executed), lost requests (not executed) and lost replies (executed); a
//!   crashed master refuses connections and resets open ones; a client reconnects on its
//!   next call and, with quarantine on, reads the master's vitals then, as `RedisMaster`
//!   does. Each connection judges what it reads of the cluster record through the
//!   client's real view (`cluster::View`), as `RedisMaster` does around the scripts.
//!   Scripted scenarios can hold one link's requests at a gate and release them in order
//!   later.
//! - **Faults** (`world.rs`): crashes with restarts that keep the data (durable masters)
//!   or lose it (the others), `SIGSTOP`/`SIGCONT`, `FLUSHALL`, forward clock jumps on a
//!   master; holders that pause inside the critical section past their deadline; rolling
//!   restarts, every master in turn, while the clients keep working; an operator's
//!   force-unlock of a resource (its key deleted on every running master, whatever it
//!   holds, and its fence counter raised).
//! - **Clients** configured otherwise than their cluster (other master lists, counts,
//!   `ttl_max` or drift), over one cluster that `init_cluster` bootstrapped first. In
//!   every profile the clients wait with hand-off on (the library's default), unless the
//!   profile turns it off; the hand-off profiles (`tests/handoff.rs`) make queued waiters
//!   of most calls (`acquire_with` with a wait budget), fair ones among them, some giving
//!   up on a short budget and some dropped mid-wait, beside `try_acquire`s that never
//!   queue.
//! - **Storage**: a fenced register per resource, which refuses tokens older than the
//!   newest it has seen (`fenced_set`'s rule), read and written by every critical section.
//!
//! # What is checked
//! See `check.rs`: no two leases valid at once on a resource (validity ends at the
//! deadline, moved by extensions, or at release — a paused holder's overrun is outside
//! it); fencing tokens unique, ordered in real time and increasing across successive
//! holders; no lost update at the fenced storage.
//!
//!
//! In the hand-off profiles, two more checkers (`check.rs`) read the queued calls, their
//! waiter ids and registrations (when the answers that completed a quorum of
//! registrations reached the client; for a fair call, the quorum-th "written" answer of
//! its last round of strict writes, which issued its ticket), and the masters' journals:
//! - *FIFO among live fair waiters*: if fair call A's ticket was issued before fair call
//!   B began, and A was still waiting when B was granted (its call running, not granted
//!   yet), B was not granted first. Two excuses, each counted by reason in the printout:
//!   on every master that granted B, A's registration was not live then, each for a fault
//!   of that master's: it lost its data; A's liveness key had outlived the waiter TTL
//!   since the master last wrote it (the master's journal keeps when, on its own clock:
//!   the refreshes came late or were lost); or, never registered there or gone otherwise
//!   (left after a grant of its own there — a confirm that failed elsewhere), a call of A
//!   to that master was lost, late or failed (the send log keeps each waiter's troubled
//!   calls). Or A was live on some granting master, B's ticket was below A's wherever it
//!   was, and a master lost its data (the ticket counters) between A's start and B's
//!   grant. A registration refreshed in time by a master that keeps its data is never
//!   missing, so among calm masters no excuse at all is allowed. Each run prints how many
//!   pairs of fair calls the checker judged (A issued before B began, and B granted while
//!   A waited or after A's grant), and a fair profile fails when none were.
//! - *Liveness*: a registered waiter whose call still runs one TTL + one waiter TTL + one
//!   refresh period (+ two node timeouts for the rounds) after the lock became free (no
//!   valid lease, from its registration or the end of the leases before) sees a lease
//!   granted by then, unless a fault (a nemesis action, a lost or late message) fell from
//!   two TTLs before the lock became free to the bound: those stretches are counted as
//!   skipped, the others as judged.
//!
//! The suites (`tests.rs`) run families of schedules (*profiles*) that must stay clean,
//! and profiles with a protection switched off, or a planted bug (`--cfg redquorum_mutants`), in
//! which the checkers must find a violation. Three exceptions (`check::Exception`) are
//! allowed, each only by the profiles whose faults break the assumption behind it, each as
//! narrow as the fault that explains it, and every run prints how many violations each
//! excused:
//! - *clock jump*: an overlap is excused when a master's clock jumped forward after the
//!   earlier of the two leases' attempts began (whichever sent its first request first)
//!   and before the overlap began (the lock assumes clocks run at one rate). Each lease's
//!   keys are written from its attempt's start on, and the fault may have touched the
//!   keys of either: the window does not wait for the attempt of the lease acquired first
//!   (a slow attempt of the later one can count a key written before that). A queued
//!   waiter's attempt is its confirm, with a value of its own: its wait before it opens
//!   no window. Only the clock-jump profile allows it.
//! - *unseen loss*: a fencing violation between an earlier lease L1 and a later L2 (a
//!   repeated or smaller token, or the lost update between their writes) is excused when
//!   a durable master lost its data after L1's attempt began and before L2 was acquired,
//!   and L2's client first connected to that master after the loss (and by L2's
//!   acquisition). Such a client cannot tell the wiped master from one that never held a
//!   counter: outside fencing's guarantee, as `src/fencing.rs` documents. Only the
//!   protected profiles, which flush durable masters, allow it; in the profiles without
//!   flushes no durable master loses data at all (checked on every schedule). Overlaps are
//!   never excused by it.
//! - *force-unlock*: an overlap on a resource that an operator force-unlocked after the
//!   earlier of the two attempts began (as above) and before the overlap began (handing
//!   the lock on is
//!   what a force-unlock does). Only the force-unlock profiles allow it; it never excuses
//!   a fencing violation.
//!
//! Faults elsewhere in the schedule excuse nothing: the planted bugs' tests
//! `overlaps_no_clock_jump_touched_are_not_excused`,
//! `one_round_tokens_are_not_excused_as_unseen_losses` and
//! `overlaps_no_force_unlock_touched_are_not_excused` find violations that only the
//! narrowing exposes. A loss the client saw excuses nothing either: fencing counts only
//! durable masters that the client never saw lose data; see also
//! `a_master_that_can_lose_its_counters_never_carries_a_token`.
//!
//! The lock's assumptions hold in every schedule except where a profile breaks one on
//! purpose: clocks run at one rate (tokio's; server clocks move only by an explicit jump),
//! a holder's validity ends at its deadline, and masters keep keys until expiry unless
//! they crash without data or are flushed — which restart quarantine must cover.
//!
//! The cancellation matrix (`cancel.rs`) drops every public async call after each of its
//! polls, on masters whose messages each take a seeded delay, and checks that no lease
//! promises more than a quorum of masters holds, that a call that returned no lease
//! leaves no key once the client's background work is done, and that released keys stay
//! gone. It catches the two cancellation mutants.
//!
//! # What is not modelled
//! - Release and hand-off notices (pub/sub): clients use
//!   [`Notifier::disabled`](crate::wait::Notifier) and `notifications(false)`, so waiters
//!   that are not queued retry on their timers, and a queued waiter learns that it was
//!   handed the lock from its registration's refresh answers (every third of the waiter
//!   TTL): hand-offs here are slower than with notices, never faster.
//! - The kind checks and owner records of the acquire scripts (no other kind of key is
//!   ever written under a lock's name here).
//! - The watchdog and `with_lock` in the random schedules: clients extend explicitly.
//!   Both call the same extension code; the cancellation matrix runs them in its cases.
//! - Retry jitter: set to zero; the settings draw it from the thread's RNG, outside the
//!   seeded source (below).
//! - Client clock drift (all clients share one clock, so `drift_factor` is never needed),
//!   eviction policies, `NOSCRIPT`, restores from stale snapshots, and `RedisMaster`'s
//!   background reconnection with backoff (a client reconnects inline on its next call).
//!
//! # Determinism and replay
//! A schedule is a function of its seed: every random choice comes from a `StdRng` seeded
//! from it, one stream per component (schedule, each client, each link, and the library),
//! and each schedule runs on a fresh current-thread runtime with a paused clock, so no task
//! or timer leaks between schedules. The library draws its lock values, waiter ids and
//! random pauses (a queued waiter's after a failed confirm, a fair call's after a ticket
//! conflict, the spread of waiters woken together) through one crate-private source
//! (`core::with_rng`); for the crate's own tests a seeded generator can stand in for it on
//! one thread (`core::seeded`), and each schedule installs one seeded from its seed for
//! its run. Every task of the schedule runs on that thread, in an order fixed by the
//! paused clock, so the library draws the same values again: waiters with equal scores are
//! ordered by the same ids, and confirms are timed alike. The trace names lock values and
//! waiter ids by order of appearance.
//!
//! Tokio itself draws from an RNG whose seed cannot be fixed without `tokio_unstable`, in
//! two places that matter here: `tokio::select!` without `biased` picks at random among
//! branches ready in the same poll, and a `watch` channel wakes its waiters in a random
//! order. The model never parks on a `watch` (a stopped master releases its waiting
//! requests from a FIFO); the library's unbiased `select!`s on the paths driven here (a
//! retry's wait and the queued wait: a notice, a timer, a lease of the same client taking
//! the key) have two branches ready in one poll, without notices, only when a lease of
//! the same client takes the key at the instant the timer fires. A replay so
//! repeats the schedule exactly; `same_seed_same_history` checks that for waiters without
//! hand-off, with it and fair ones, comparing two traced runs of each of a few seeds line
//! by line (every op each master executed, with its virtual time). A scenario that adds
//! the watchdog would lose that exactness after a tie between its branches.
//!
//! Each HOLD test runs fixed seeds and, beyond them, seeds from a base that changes every
//! run and is printed (`REDQUORUM_SIM_BASE_SEED` sets it); see `tests.rs`. A failing
//! schedule prints its seed, its parameters, the violation, the leases involved, the events
//! around them, and the one-line command that runs it alone:
//! `REDQUORUM_SIM_SEED=<seed> cargo nextest run --all-features --locked -E
//! 'test(=sim::tests::<test>)'`. Add `REDQUORUM_SIM_TRACE=1` to see every op each master
//! executed, and run more schedules than the default with `REDQUORUM_SIM_SCHEDULES=<count>`.

mod check;
mod net;
mod server;
mod world;

#[cfg(test)]
mod cancel;
#[cfg(test)]
mod tests;
