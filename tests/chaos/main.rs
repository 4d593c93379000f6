//! The chaos suite: real masters are killed, paused, restarted, slowed, partitioned and
//! have their clocks jumped while many clients contend; independent checkers over the
//! recorded history prove mutual exclusion (or, for the known-unsafe scenarios of
//! docs/testing.md §4, prove that they catch the violation), and planted bugs prove the
//! checkers.
//!
//! `REDQUORUM_CHAOS_SECONDS` sets each scenario's fault phase (a short run by default);
//! `REDQUORUM_CHAOS_SEED` replays a run's schedules. Each scenario prints one report line
//! and appends it to `target/redquorum-chaos/report.txt`.

// The planted bugs the suite hunts exist only with `--cfg redquorum_mutants` (set by this
// repository's .cargo/config.toml); without it there is nothing to run.
#![cfg(redquorum_mutants)]
// clippy's test allowances cover `#[test]` fns only, not the helpers;
// the modules of this one test binary share their helpers as `pub` items.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

#[path = "../support/mod.rs"]
mod support;

mod checker;
mod event;
mod fenced;
mod harness;
mod history;
mod process;

mod clients;
mod clock;
mod cluster;
mod contention;
mod crash;
mod faults;
mod handoff;
mod known_bugs;
mod many;
mod mutants;
mod network;
mod pause;
#[cfg(feature = "postgres")]
mod postgres;
mod reentry;
mod release;
mod restart;
mod rwlock;
mod semaphore;
mod unlock;
