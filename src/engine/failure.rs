//! How a failed round is told (docs/design.md §6, §9): refusals no quorum outvotes,
//! failures that last until a configuration changes, contention, an outage or masters in
//! restart quarantine; the error of a wait whose budget ran out; and the random spread
//! that keeps the waiters one event wakes from splitting the votes.
//!
//! Pure but for the clock and the random source: no round trip, no state.

use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::core::{Inner, with_rng};
use crate::error::{Error, ErrorKind, MasterErrorKind, MasterOutcome, MasterReport};
use crate::quorum;

/// A refusal that no quorum can outvote (docs/design.md §11): a master whose cluster record
/// disagrees with this client's configuration (or that it reaches twice), or a name that
/// holds another kind of lock. Its kind and the masters' own words.
pub(crate) fn refusal(reports: &[MasterReport]) -> Option<(ErrorKind, String)> {
    for (master_kind, kind) in [
        (MasterErrorKind::ClusterMismatch, ErrorKind::ClusterMismatch),
        (MasterErrorKind::WrongKind, ErrorKind::WrongKind),
        (MasterErrorKind::LimitMismatch, ErrorKind::LimitMismatch),
    ] {
        // Each distinct reason once; the masters' reports name who said it.
        let mut found: Vec<String> = Vec::new();
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == master_kind
                && !found.iter().any(|f| *f == e.to_string())
            {
                found.push(e.to_string());
            }
        }
        if !found.is_empty() {
            return Some((kind, found.join("; ")));
        }
    }
    None
}

/// Failures that last until a configuration changes (authentication, evicting masters), if
/// they alone leave too few masters able to grant: their kind and what to change. `spare`
/// is how many masters a quorum can do without.
pub(crate) fn permanent_failure(
    reports: &[MasterReport],
    spare: usize,
) -> Option<(ErrorKind, String)> {
    let failed = |kind: MasterErrorKind| -> Vec<&str> {
        reports
            .iter()
            .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(e) if e.kind() == kind))
            .map(MasterReport::master)
            .collect()
    };
    let auth = failed(MasterErrorKind::Auth);
    let tls = failed(MasterErrorKind::Tls);
    let evicting = failed(MasterErrorKind::Misconfigured);
    // Failures that last until a configuration changes leave too few masters able to
    // grant, whatever the others do: retrying cannot help.
    if auth.len() + tls.len() + evicting.len() > spare {
        let mut fixes = Vec::new();
        // The masters that failed the TLS handshake, grouped by what to change (the CA,
        // the host name, a certificate).
        let mut handshakes: Vec<(String, Vec<&str>)> = Vec::new();
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == MasterErrorKind::Tls
            {
                let why = e.to_string();
                match handshakes.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, masters)) => masters.push(report.master()),
                    None => handshakes.push((why, vec![report.master()])),
                }
            }
        }
        for (why, masters) in handshakes {
            fixes.push(format!("{}: {why}", masters.join(", ")));
        }
        if !auth.is_empty() {
            fixes.push(format!(
                "{} refused this client's credentials or a command or key its ACL denies: check \
                 the user and password in their URLs and the masters' ACLs",
                auth.join(", ")
            ));
        }
        // Each unfit master with its own reason (an evicting policy, a missing cluster
        // record, a copy of another master's data) and what to change.
        for report in reports {
            if let MasterOutcome::Failed(e) = report.outcome()
                && e.kind() == MasterErrorKind::Misconfigured
            {
                fixes.push(format!("{}: {e}", report.master()));
            }
        }
        let kind = if !tls.is_empty() {
            ErrorKind::Tls
        } else if auth.is_empty() {
            ErrorKind::Misconfigured
        } else {
            ErrorKind::Auth
        };
        return Some((kind, fixes.join("; ")));
    }
    None
}

/// What a round that no quorum granted says, before contention is told from an outage:
/// its kind; what to change, when failures that last until a configuration changes
/// decided it ([`permanent_failure`]); and, when too few masters vote, the instant enough
/// of them vote again ([`failure_kind`]).
pub(crate) fn classify(
    reports: &[MasterReport],
    outcomes: &[MasterOutcome],
    quorum: usize,
) -> (ErrorKind, Option<String>, Option<Instant>) {
    let spare = reports.len().saturating_sub(quorum);
    match permanent_failure(reports, spare) {
        Some((kind, fixes)) => (kind, Some(fixes), None),
        None => {
            let (kind, voters_at) = failure_kind(outcomes, quorum);
            (kind, None, voters_at)
        }
    }
}

/// A random pause that spreads the waiters woken by one event over a round's time (at
/// least a millisecond), doubling after each of up to three lost races in a row, so that
/// the first usually wins alone instead of splitting the votes.
pub(crate) fn spread(round: Duration, herd: u32) -> Duration {
    round
        .max(Duration::from_millis(1))
        .saturating_mul(1 << herd.min(3))
        .mul_f64(with_rng(|rng| rng.random::<f64>()))
}

/// When a waiter tries again after the holder's keys expire at `free`: spread out like
/// the waiters woken by a notice, since they all read the same expiry.
pub(crate) fn holder_wake(free: Instant, now: Instant, round: Duration, herd: u32) -> Instant {
    free.max(now) + spread(round, herd)
}

/// The kind of a failed acquire round and, when too few masters vote, the instant enough
/// of them vote again.
pub(crate) fn failure_kind(
    outcomes: &[MasterOutcome],
    quorum: usize,
) -> (ErrorKind, Option<Instant>) {
    let n = outcomes.len();
    let denied = outcomes
        .iter()
        .filter(|o| matches!(o, MasterOutcome::HeldByOther))
        .count();
    // Held by others on so many masters that no quorum was possible even if every
    // failed master had granted: contention, not an outage.
    if denied > n - quorum {
        return (ErrorKind::Contended, None);
    }
    let mut abstaining: Vec<Instant> = outcomes
        .iter()
        .filter_map(|o| match o {
            MasterOutcome::Abstained { until } => Some(*until),
            _ => None,
        })
        .collect();
    let voters = n - abstaining.len();
    if voters < quorum {
        // Enough of them must come back for a quorum: the (quorum - voters)-th earliest.
        abstaining.sort_unstable();
        let at = abstaining.get(quorum - voters - 1).copied();
        return (ErrorKind::NotEnoughVoters, at);
    }
    (ErrorKind::NoQuorum, None)
}

/// The error of a wait whose budget ran out (docs/design.md §9), from `error`: the last
/// failure the masters decided or, when none was, the round the budget cut. Only a
/// refusal says that the lock is held: [`ErrorKind::WaitTimeout`]. Any other failure
/// keeps its kind, an outage ([`ErrorKind::NoQuorum`]) above all, so that a wait that met
/// only failures never reads as "someone else holds it". `refused` says whether a master
/// refused the lock at any point of the wait.
pub(crate) fn budget_spent(error: Error, attempts: u32, refused: bool) -> Error {
    let attempts_made = match attempts {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    if error.kind() == ErrorKind::Contended {
        let detail = format!(
            "wait budget used up after {attempts_made} (last: {})",
            kind_word(error.kind())
        );
        return error
            .with_kind(ErrorKind::WaitTimeout)
            .with_detail(detail)
            .with_attempts(attempts);
    }
    let history = match refused {
        true => {
            "; a master refused the lock during the wait, but the last attempt failed for \
                 another reason"
        }
        false => ", and no master ever refused the lock",
    };
    let mut detail = format!("gave up waiting: wait budget used up after {attempts_made}{history}");
    if let Some(before) = error.detail() {
        detail.push_str("; ");
        detail.push_str(before);
    }
    error.with_detail(detail).with_attempts(attempts)
}

/// [`budget_spent`] for a wait that queued behind a refusal (docs/design.md §17).
pub(crate) fn wait_timeout(error: Error, attempts: u32) -> Error {
    budget_spent(error, attempts, true)
}

/// What a queued waiter reports if its budget ends after `round`, a refresh of its
/// registration (docs/design.md §9, §17): `held`, the refusal it queued behind, while
/// enough masters answer the refresh for a quorum; otherwise the outage, so that a
/// waiter whose masters went down since it queued does not report contention. `None`: a
/// refresh that the budget cut leaves what it would report as it was.
pub(crate) fn after_refresh(
    inner: &Inner,
    round: &quorum::Round,
    name: &str,
    held: &Error,
) -> Option<Error> {
    if round.cut {
        // The budget, not the masters, ended it: it decides nothing.
        return None;
    }
    let answered = round
        .outcomes
        .iter()
        .filter(|o| {
            !matches!(
                o,
                MasterOutcome::Failed(_) | MasterOutcome::Pending | MasterOutcome::Abstained { .. }
            )
        })
        .count();
    if answered >= inner.quorum() {
        return Some(held.clone());
    }
    let reports = round.reports(&inner.masters);
    let (kind, fixes, voters_at) = classify(&reports, &round.outcomes, inner.quorum());
    let mut error = Error::new(kind, name).with_masters(reports);
    if let Some(fixes) = fixes {
        error = error.with_detail(fixes);
    }
    Some(match voters_at {
        Some(at) => error.with_retry_at(at),
        None => error,
    })
}

/// Whether a master refused the lock in `error`'s round: it holds another value.
pub(crate) fn refused_by_any(error: &Error) -> bool {
    error
        .masters()
        .iter()
        .any(|r| matches!(r.outcome(), MasterOutcome::HeldByOther))
}

pub(crate) fn kind_word(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Contended => "held by another client",
        ErrorKind::NoQuorum => "no quorum reachable",
        ErrorKind::ValidityExhausted => "validity used up",
        ErrorKind::NotEnoughVoters => "too few masters vote yet",
        ErrorKind::FencingFailed => "no fencing token confirmed",
        _ => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_woken_by_the_holders_expiry_do_not_all_wake_at_once() {
        let now = Instant::now();
        let free = now + Duration::from_millis(50);
        let round = Duration::from_micros(400);
        let wakes: Vec<Instant> = (0..64).map(|_| holder_wake(free, now, round, 0)).collect();
        assert!(
            wakes
                .iter()
                .all(|w| *w >= free && *w < free + Duration::from_millis(1))
        );
        let first = wakes[0];
        assert!(
            wakes.iter().any(|w| *w != first),
            "no jitter at the holder's expiry"
        );
        // After lost races the spread grows, up to eight times.
        let late = (0..64)
            .map(|_| holder_wake(free, now, round, 10))
            .max()
            .unwrap_or(free);
        assert!(late < free + Duration::from_millis(8));
    }

    #[test]
    fn too_few_voters_say_when_enough_vote_again() {
        let now = Instant::now();
        let at = |ms| MasterOutcome::Abstained {
            until: now + Duration::from_millis(ms),
        };
        let granted = MasterOutcome::Granted;
        // 5 masters, quorum 3: one votes, four abstain; two of them must come back.
        let outcomes = [granted.clone(), at(400), at(100), at(300), at(200)];
        let (kind, when) = failure_kind(&outcomes, 3);
        assert_eq!(kind, ErrorKind::NotEnoughVoters);
        assert_eq!(when, Some(now + Duration::from_millis(200)));
        // Enough vote: a failure among the voters is an outage, not quarantine.
        let outcomes = [
            granted.clone(),
            granted.clone(),
            at(100),
            MasterOutcome::Pending,
            at(5),
        ];
        assert_eq!(failure_kind(&outcomes, 3), (ErrorKind::NoQuorum, None));
        // Held elsewhere beats everything.
        let held = MasterOutcome::HeldByOther;
        let outcomes = [held.clone(), held.clone(), held, at(1), at(2)];
        assert_eq!(failure_kind(&outcomes, 3), (ErrorKind::Contended, None));
    }
}
