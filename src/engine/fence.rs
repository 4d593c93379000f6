//! The fencing write-back of a granted acquire (docs/design.md §8, I12): phase 2 of a
//! fencing token, one per key, within the lease's validity.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::Inner;
use crate::deadline;
use crate::error::{Error, ErrorKind, MasterErrorKind, MasterOutcome};
use crate::master::{FenceOutcome, Op, Reply};
use crate::quorum::{self, Decision};
use crate::{scripts, telemetry};

/// The fencing write-back (phase 2, see `fencing.rs`): raises the counters to a token
/// starting at `token`, above every counter a master reports in conflict, until a
/// quorum holds one from this write-back, within the lease's validity. `floors` are the
/// counters the granting masters read with the grant, where nobody else can raise them
/// meanwhile (`Target::own_floors`).
pub(crate) async fn write_back(
    inner: &Inner,
    (key, lock): (&Arc<str>, &Arc<str>),
    resource: &Arc<str>,
    value: &Arc<str>,
    (mut token, floors): (u64, &[Option<u64>]),
    (deadline, least): (Instant, Duration),
    give_up_at: Instant,
) -> Result<u64, (Error, bool)> {
    // Each conflict raises the token past a counter that exists, and each failure
    // without one is retried after a pause; the bound only guards against a master
    // answering nonsense. The lease's validity bounds the time. The error comes with
    // whether the wait budget cut a round.
    const MAX_ROUNDS: usize = 16;
    let n = inner.masters.len();
    let mut last = Vec::new();
    // Per master, the token it accepted from this write-back, if it said so.
    let mut wrote: Vec<Option<u64>> = vec![None; n];
    for _ in 0..MAX_ROUNDS {
        if deadline::validity_left(deadline, Instant::now(), least).is_none() {
            break;
        }
        let op = Arc::new(Op::Fence {
            counter: scripts::fence_key(lock).into(),
            key: Arc::clone(key),
            value: Arc::clone(value),
            token,
        });
        let bounds = inner.bounds(Some(deadline.min(give_up_at)));
        let started = Instant::now();
        let traced = telemetry::resource(resource, inner.config.trace_resource_names);
        let round = quorum::run(&inner.masters, op, inner.quorum(), traced, bounds).await;
        if round.cut && Instant::now() >= give_up_at {
            let error = Error::new(ErrorKind::FencingFailed, &**resource)
                .with_detail("the wait budget ran out during the fencing write-back");
            return Err((error, true));
        }
        // Keep what each master last said: a master cut off by the deadline in this
        // round may have said why it does not count in an earlier one.
        let reports = round.reports(&inner.masters);
        last = if last.is_empty() {
            reports
        } else {
            reports
                .into_iter()
                .zip(last)
                .map(|(new, old)| match new.outcome() {
                    MasterOutcome::Pending => old,
                    _ => new,
                })
                .collect()
        };
        let counts = |i: usize| inner.masters.get(i).is_some_and(|m| m.disowned().is_none());
        let held = Held::tally(&round.replies, token, floors, &mut wrote, counts);
        if round.decision == Decision::Reached || held.ours >= inner.quorum() {
            if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                break;
            }
            return Ok(token);
        }
        if let Some(counter) = held.foreign.filter(|c| *c >= token) {
            token = counter.saturating_add(1);
            continue;
        }
        if let Some(error) = beyond_reach(inner, &round.outcomes, resource) {
            return Err((error.with_masters(last), false));
        }
        // Timeouts or abstentions, with no conflict: try the same token again after a
        // pause of one round (at least a millisecond), while the lease is valid.
        let pause = started.elapsed().max(Duration::from_millis(1));
        let latest = deadline
            .checked_sub(least)
            .unwrap_or(deadline)
            .min(give_up_at);
        tokio::time::sleep_until((Instant::now() + pause).min(latest)).await;
    }
    let detail = if deadline::validity_left(deadline, Instant::now(), least).is_some() {
        format!("no quorum of masters confirmed a token in {MAX_ROUNDS} write-back rounds")
    } else {
        "the lease's validity ran out before a quorum confirmed a token".to_owned()
    };
    Err((
        Error::new(ErrorKind::FencingFailed, &**resource)
            .with_detail(detail)
            .with_masters(last),
        false,
    ))
}

/// Why no later write-back round can reach a quorum, from a round's `outcomes`: too many
/// masters no longer hold this acquisition, or are unfit for tokens (not durable, or
/// misconfigured otherwise: each master's error says how), or both together, since
/// neither kind can ever count. `None` while a round may still help.
fn beyond_reach(inner: &Inner, outcomes: &[MasterOutcome], resource: &str) -> Option<Error> {
    let spare = inner.masters.len() - inner.quorum();
    let count = |f: fn(&MasterOutcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let held_elsewhere = count(|o| matches!(o, MasterOutcome::HeldByOther));
    if held_elsewhere > spare {
        return Some(
            Error::new(ErrorKind::FencingFailed, resource)
                .with_detail("no quorum of masters still held this acquisition"),
        );
    }
    let unfit = count(
        |o| matches!(o, MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Misconfigured),
    );
    if unfit > spare {
        return Some(Error::new(ErrorKind::Misconfigured, resource).with_detail(
            "too few masters are fit to confirm a fencing token, each for the reason given \
             with it: tokens need durable masters (appendonly yes, appendfsync always) that \
             never lost data; fix those masters, or acquire without fencing",
        ));
    }
    (held_elsewhere + unfit > spare).then(|| {
        Error::new(ErrorKind::FencingFailed, resource)
            .with_detail("too few durable masters still hold this acquisition to confirm a token")
    })
}

/// What one write-back round showed of the masters holding its token.
struct Held {
    /// The masters that hold the token from this write-back and count.
    ours: usize,
    /// The highest counter in conflict that is not this write-back's own.
    foreign: Option<u64>,
}

impl Held {
    /// Tallies `round`, the write-back of `token`: a master holds the token if it wrote
    /// it now, or if it answers a conflict at exactly `token` that can only be this
    /// write-back's own earlier write, whose answer was lost or late (docs/design.md §8):
    /// it accepted `token` in an earlier round (`wrote`, kept up to date here), or its
    /// counter was below `token` when it granted this acquisition and nobody else could
    /// raise it since (`floors`). Either way the master raised its counter to `token`
    /// strictly, while it held this acquisition's value, so no other lease can hold
    /// `token` on it (I12). Only the masters `counts` accepts count (a master whose grant
    /// no longer counts does not).
    fn tally(
        replies: &[Option<Reply>],
        token: u64,
        floors: &[Option<u64>],
        wrote: &mut [Option<u64>],
        counts: impl Fn(usize) -> bool,
    ) -> Held {
        let mut held = Held {
            ours: 0,
            foreign: None,
        };
        for (i, reply) in replies.iter().enumerate() {
            let Some(Reply::Fenced {
                outcome, before, ..
            }) = reply
            else {
                continue;
            };
            let counts = counts(i);
            match outcome {
                FenceOutcome::Written => {
                    if let Some(wrote) = wrote.get_mut(i) {
                        *wrote = Some(token);
                    }
                    held.ours += usize::from(counts);
                }
                FenceOutcome::Conflict => {
                    let counter = before.unwrap_or(0);
                    let own = counter == token
                        && (wrote.get(i).copied().flatten() == Some(token)
                            || floors.get(i).copied().flatten().is_some_and(|f| f < token));
                    match own {
                        true => held.ours += usize::from(counts),
                        false => held.foreign = held.foreign.max(Some(counter)),
                    }
                }
                FenceOutcome::NotOurs => {}
            }
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::EpochReport;

    fn fenced(outcome: FenceOutcome, before: Option<u64>) -> Option<Reply> {
        Some(Reply::Fenced {
            outcome,
            before,
            epoch: EpochReport { record: None },
        })
    }

    #[test]
    fn a_conflict_at_the_token_is_ours_only_where_nobody_else_could_have_written_it() {
        use FenceOutcome::{Conflict, NotOurs, Written};
        let token = 7;
        // m0 wrote now; m1 conflicts at the token and read 6 with its grant; m2 conflicts
        // at the token but its counter at the grant is unknown; m3 conflicts at the
        // token, read 7 with its grant (another lease's token); m4 is not ours.
        let replies = [
            fenced(Written, Some(6)),
            fenced(Conflict, Some(7)),
            fenced(Conflict, Some(7)),
            fenced(Conflict, Some(7)),
            fenced(NotOurs, None),
        ];
        let floors = [Some(6), Some(6), None, Some(7), None];
        let mut wrote = vec![None; 5];
        let held = Held::tally(&replies, token, &floors, &mut wrote, |_| true);
        assert_eq!(held.ours, 2, "m0 wrote, m1's conflict is its own write");
        assert_eq!(
            held.foreign,
            Some(7),
            "m2 and m3 may hold another lease's 7"
        );
        assert_eq!(wrote, [Some(7), None, None, None, None]);

        // The next round of the same token: m0's conflict at 7 is the write it answered.
        let again = [
            fenced(Conflict, Some(7)),
            None,
            fenced(Conflict, Some(8)),
            None,
            None,
        ];
        let held = Held::tally(&again, token, &floors, &mut wrote, |_| true);
        assert_eq!((held.ours, held.foreign), (1, Some(8)));

        // A counter above the token is never ours, whatever the floor; nor is a master
        // whose grant no longer counts.
        let above = [
            fenced(Conflict, Some(9)),
            fenced(Conflict, Some(7)),
            None,
            None,
            None,
        ];
        let held = Held::tally(&above, token, &floors, &mut wrote, |i| i != 1);
        assert_eq!((held.ours, held.foreign), (0, Some(9)));
    }
}
