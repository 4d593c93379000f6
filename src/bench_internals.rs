//! Crate-private hot-path functions, exposed for `benches/micro.rs` only.
//!
//! Enabled by `--cfg redquorum_bench_internals`, which is internal and unstable: these thin
//! wrappers exist so that the CPU cost of the library's own work (without any network) can
//! be measured, and may change or disappear in any release. Do not use them in applications.
//!
//! Layer: beside `lib.rs` (docs/design.md §10); nothing in the product uses it.

use std::time::Duration;

use tokio::time::Instant;

use crate::deadline as math;
use crate::quorum::{Decision, Tally, Vote, quorum as majority};

/// The majority of `n` masters: `n / 2 + 1`.
pub fn quorum(n: usize) -> usize {
    majority(n)
}

/// Tallies the replies of one acquire round over `n` masters in arrival order and returns
/// whether it reached a quorum, stopping at the first decisive reply as the round does.
///
/// Each vote is `0` (granted), `1` (denied) or anything else (failed). Replies beyond the
/// decision are not looked at; a round whose `votes` run out undecided counts as failed.
pub fn tally_round(n: usize, votes: &[u8]) -> bool {
    let mut tally = Tally::new(n, majority(n));
    let mut decision = tally.decision();
    for vote in votes.iter().take(n) {
        if decision != Decision::Pending {
            break;
        }
        decision = tally.record(match vote {
            0 => Vote::Granted,
            1 => Vote::Denied,
            _ => Vote::Failed,
        });
    }
    decision == Decision::Reached
}

/// The validity a lease acquired in a round that started at `t0` has left at `now`, as the
/// acquire path computes it: `ttl` rounded down to whole milliseconds, the drift allowance
/// `ttl * drift_factor + 2 ms`, the deadline `t0 + ttl - drift`, and what remains of it
/// beyond `min_validity`. `None` when nothing (or too little) is left.
pub fn deadline(
    t0: Instant,
    ttl: Duration,
    drift_factor: f64,
    now: Instant,
    min_validity: Duration,
) -> Option<Duration> {
    let ttl = math::whole_millis(ttl);
    let drift = math::drift(ttl, drift_factor);
    let deadline = math::deadline(t0, ttl, drift)?;
    math::validity_left(deadline, now, min_validity)
}

/// A fresh lock value: 128 random bits from the thread-local CSPRNG as 32 hex digits, the
/// same function every acquire attempt calls.
pub fn random_value() -> String {
    crate::core::random_value()
}
