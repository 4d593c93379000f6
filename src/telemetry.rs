//! What the client tells operators: counters and histograms through the `metrics` facade
//! (feature `metrics`), and resource names as the `tracing` spans and events show them.
//! The metrics, their labels and the spans are listed in docs/observability.md.
//!
//! Without the feature every metric function compiles to nothing, so call sites need no
//! `cfg`. With it, label values are static strings or the master's name (an `Arc<str>`
//! shared, not copied); no label ever carries a resource name or a lock value, so the
//! number of series is bounded by the number of masters.
//!
//! Layer: a leaf (docs/design.md §10); it knows the error types and nothing above them.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, LazyLock};

use tokio::time::Instant;

use crate::error::{Error, MasterOutcome, ShortName};
#[cfg(feature = "metrics")]
use crate::error::{ErrorKind, MasterErrorKind};

/// Wall time of each acquire call that returned, labelled `outcome`.
#[cfg(feature = "metrics")]
const ACQUIRE_DURATION: &str = "redquorum_acquire_duration_seconds";
/// Rounds made by each acquire call that returned after at least one round.
#[cfg(feature = "metrics")]
const ACQUIRE_ATTEMPTS: &str = "redquorum_acquire_attempts";
/// One per master answer in a round, labelled `master`, `op` and `outcome`.
#[cfg(feature = "metrics")]
const MASTER_REQUESTS: &str = "redquorum_master_requests_total";
/// Validity a lease had left when it was released.
#[cfg(feature = "metrics")]
const RELEASE_VALIDITY_LEFT: &str = "redquorum_release_validity_left_seconds";
/// How long after its planned start a watchdog extension was granted.
#[cfg(feature = "metrics")]
const EXTENSION_LAG: &str = "redquorum_extension_lag_seconds";
/// Leases lost before their release, labelled `reason`.
#[cfg(feature = "metrics")]
const LEASES_LOST: &str = "redquorum_leases_lost_total";
/// 1 while a master's last answer to an acquire, extend or fence round was an abstention,
/// 0 once it voted; by `master`.
#[cfg(feature = "metrics")]
const MASTERS_ABSTAINING: &str = "redquorum_masters_abstaining";
/// Waiters woken by a release notice whose next attempts acquired the lock.
#[cfg(feature = "metrics")]
const HANDOFFS: &str = "redquorum_handoffs_total";

/// Describes every metric to the recorder installed now: called when a client is built,
/// so a recorder installed before the first client shows each metric's help and unit.
#[inline]
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_histogram!(
            ACQUIRE_DURATION,
            Unit::Seconds,
            "Wall time of each acquire call, by outcome (acquired, or the error kind)"
        );
        describe_histogram!(
            ACQUIRE_ATTEMPTS,
            Unit::Count,
            "Quorum rounds made by each acquire call"
        );
        describe_counter!(
            MASTER_REQUESTS,
            Unit::Count,
            "Answers of each master in quorum rounds, by master, operation and outcome"
        );
        describe_histogram!(
            RELEASE_VALIDITY_LEFT,
            Unit::Seconds,
            "Validity a lease had left when it was released (0 when it had expired)"
        );
        describe_histogram!(
            EXTENSION_LAG,
            Unit::Seconds,
            "Time from a watchdog extension's planned start to its grant by a quorum"
        );
        describe_counter!(
            LEASES_LOST,
            Unit::Count,
            "Leases lost before their release, by reason"
        );
        describe_gauge!(
            MASTERS_ABSTAINING,
            Unit::Count,
            "1 while a master's last answer was an abstention (restart quarantine), 0 once it voted"
        );
        describe_counter!(
            HANDOFFS,
            Unit::Count,
            "Waiters that got the lock handed over: a queued waiter's confirm, or a release notice's next attempt"
        );
    }
}

/// When a timed call started: the clock is read only with the feature.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    #[cfg(feature = "metrics")]
    at: Instant,
}

/// Starts timing a call.
#[inline]
pub(crate) fn start() -> Started {
    Started {
        #[cfg(feature = "metrics")]
        at: Instant::now(),
    }
}

/// Records an acquire call that returned: its wall time since `started` by outcome, and
/// its rounds when it made any.
#[inline]
pub(crate) fn acquire_finished<T>(result: &Result<T, Error>, started: Started, rounds: u32) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match result {
            Ok(_) => "acquired",
            Err(e) => error_kind(e.kind()),
        };
        metrics::histogram!(ACQUIRE_DURATION, "outcome" => outcome)
            .record(started.at.elapsed().as_secs_f64());
        if rounds > 0 {
            metrics::histogram!(ACQUIRE_ATTEMPTS).record(f64::from(rounds));
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (result, started, rounds);
}

/// Records one master's answer in a round of `op`; `master` gives its name (asked only
/// with the feature).
#[inline]
pub(crate) fn master_answered<'a>(
    master: impl FnOnce() -> &'a Arc<str>,
    op: &'static str,
    outcome: &MasterOutcome,
) {
    #[cfg(feature = "metrics")]
    {
        let master = master();
        let label = master_outcome(outcome);
        metrics::counter!(
            MASTER_REQUESTS,
            "master" => Arc::clone(master),
            "op" => op,
            "outcome" => label,
        )
        .increment(1);
        // Only the rounds that restart quarantine applies to say whether a master votes.
        if !matches!(op, "acquire" | "extend" | "fence") {
            return;
        }
        let abstaining = match label {
            "abstained" => 1.0,
            "granted" | "denied" | "missing" | "fence_conflict" => 0.0,
            // A failure or no answer says nothing about the master's quarantine.
            _ => return,
        };
        metrics::gauge!(MASTERS_ABSTAINING, "master" => Arc::clone(master)).set(abstaining);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (master, op, outcome);
}

/// Records a release of a lease; `lease` says (only with the feature) until when it was
/// valid, and its safety point when nothing marked it lost before, so that a lease that
/// ran out unobserved counts as lost (`expired`) when that point has passed.
#[inline]
pub(crate) fn released(lease: impl FnOnce() -> (Instant, Option<Instant>)) {
    #[cfg(feature = "metrics")]
    {
        let (deadline, expired_unnoticed) = lease();
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        metrics::histogram!(RELEASE_VALIDITY_LEFT).record(left.as_secs_f64());
        if expired_unnoticed.is_some_and(|safety_point| now >= safety_point) {
            lease_lost("expired");
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = lease;
}

/// Records a watchdog extension granted now that was planned to start at `planned`.
#[inline]
pub(crate) fn extended(planned: Instant) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(EXTENSION_LAG).record(planned.elapsed().as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = planned;
}

/// Records a lease lost for `reason` (a `LostReason` in snake case).
#[inline]
pub(crate) fn lease_lost(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST, "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// Records a hand-off: a queued waiter whose confirm got the lock (docs/design.md §17), or
/// an acquire woken by a release notice that then got it (§6).
#[inline]
pub(crate) fn handoff() {
    #[cfg(feature = "metrics")]
    metrics::counter!(HANDOFFS).increment(1);
}

/// The `outcome` label of an acquire that failed with `kind`.
#[cfg(feature = "metrics")]
fn error_kind(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Contended => "contended",
        ErrorKind::NoQuorum => "no_quorum",
        ErrorKind::ValidityExhausted => "validity_exhausted",
        ErrorKind::WaitTimeout => "wait_timeout",
        ErrorKind::LeaseLost => "lease_lost",
        ErrorKind::InvalidOptions => "invalid_options",
        ErrorKind::InvalidConfig => "invalid_config",
        ErrorKind::FencingFailed => "fencing_failed",
        ErrorKind::Auth => "auth",
        ErrorKind::InvalidResource => "invalid_resource",
        ErrorKind::NoRuntime => "no_runtime",
        ErrorKind::NotEnoughVoters => "not_enough_voters",
        ErrorKind::Misconfigured => "misconfigured",
        ErrorKind::ClusterMismatch => "cluster_mismatch",
        ErrorKind::WrongKind => "wrong_kind",
        ErrorKind::LimitMismatch => "limit_mismatch",
        ErrorKind::ClusterNotEmpty => "cluster_not_empty",
        ErrorKind::Tls => "tls",
        ErrorKind::AlreadyHeld => "already_held",
    }
}

/// The `outcome` label of one master's answer: what it said, or why it said nothing.
#[cfg(feature = "metrics")]
fn master_outcome(outcome: &MasterOutcome) -> &'static str {
    match outcome {
        MasterOutcome::Granted => "granted",
        MasterOutcome::HeldByOther => "denied",
        MasterOutcome::Missing => "missing",
        MasterOutcome::FenceConflict { .. } => "fence_conflict",
        MasterOutcome::Abstained { .. } => "abstained",
        MasterOutcome::Pending => "pending",
        MasterOutcome::Failed(e) => match e.kind() {
            MasterErrorKind::Down => "down",
            MasterErrorKind::Refused => "refused",
            MasterErrorKind::Timeout => "timeout",
            MasterErrorKind::Io => "io",
            MasterErrorKind::Auth => "auth",
            MasterErrorKind::Script => "script",
            MasterErrorKind::Protocol => "protocol",
            MasterErrorKind::Other => "other",
            MasterErrorKind::Abstained => "abstained",
            MasterErrorKind::Misconfigured => "misconfigured",
            MasterErrorKind::ClusterMismatch => "cluster_mismatch",
            MasterErrorKind::WrongKind => "wrong_kind",
            MasterErrorKind::LimitMismatch => "limit_mismatch",
            MasterErrorKind::Tls => "tls",
        },
    }
}

/// The key of the resource names' hash: drawn once per process, so that one name hashes
/// alike in all of a process's events and differently in any other process.
static NAME_KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A resource name as spans and events show it: itself, or `#` and a keyed hash of it
/// (64-bit SipHash under [`NAME_KEY`]) when names are kept out of traces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traced<'a> {
    name: &'a str,
    shown: bool,
}

/// `name` as traces show it: itself when `shown`, else its keyed hash.
pub(crate) fn resource(name: &str, shown: bool) -> Traced<'_> {
    Traced { name, shown }
}

impl fmt::Display for Traced<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shown {
            true => f.write_str(self.name),
            false => write!(f, "#{:016x}", NAME_KEY.hash_one(self.name)),
        }
    }
}

/// An error as traces show it: its `Display`, with its resource name in place of the
/// name when names are kept out of traces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TracedError<'a> {
    error: &'a Error,
    shown: bool,
}

/// `error` as traces show it; see [`resource`].
pub(crate) fn error(error: &Error, shown: bool) -> TracedError<'_> {
    TracedError { error, shown }
}

impl fmt::Display for TracedError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shown {
            return fmt::Display::fmt(self.error, f);
        }
        // `Error`'s Display names the resource only as `ShortName` writes it.
        let text = self.error.to_string();
        let name = ShortName(self.error.resource()).to_string();
        let hashed = format!("\"{}\"", resource(self.error.resource(), false));
        f.write_str(&text.replace(&name, &hashed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_hidden_name_is_a_stable_keyed_hash() {
        let shown = resource("orders:42", true).to_string();
        assert_eq!(shown, "orders:42");
        let hidden = resource("orders:42", false).to_string();
        assert!(hidden.starts_with('#') && hidden.len() == 17, "{hidden}");
        assert!(!hidden.contains("orders"));
        assert_eq!(hidden, resource("orders:42", false).to_string());
        assert_ne!(hidden, resource("orders:43", false).to_string());
    }

    #[test]
    fn a_hidden_error_keeps_its_message_without_the_name() {
        for name in ["orders:42", &"x".repeat(500)] {
            let err = Error::new(ErrorKind::Contended, name).with_detail("the detail");
            let text = error(&err, false).to_string();
            assert!(!text.contains(&name[..9]), "{text}");
            assert!(text.contains(&resource(name, false).to_string()), "{text}");
            assert!(
                text.contains("is held by another client: the detail"),
                "{text}"
            );
            assert_eq!(error(&err, true).to_string(), err.to_string());
        }
    }
}
