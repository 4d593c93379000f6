//! The quorum round (docs/design.md §2): one operation sent to every master at once,
//! replies tallied as they arrive, and a decision as soon as the outcome is certain.
//!
//! ```text
//! t0 = now                               (before the first request is sent)
//! send op to all masters concurrently     (each bounded by the node timeout)
//! on each reply: granted | denied | failed
//! reached as soon as granted >= need
//! failed  as soon as denied + failed > n - need
//! ```
//!
//! Once decided, the round returns without waiting for the masters that have not
//! answered: a hung master adds no latency. Their requests keep running in a background
//! task until they answer or time out, so that a later cleanup request on the same
//! connection is queued behind them and reaches every master that may hold the key.
//!
//! Layer: above the master connection (docs/design.md §10); it must not use the core,
//! leases or the facade.

mod tally;

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::field::Empty;

use crate::error::{MasterError, MasterOutcome, MasterReport};
use crate::master::{FenceOutcome, Master, Op, Outgoing, Reply};
use crate::telemetry;
pub(crate) use tally::{Decision, Tally, Vote, quorum};

/// The result of one round.
#[derive(Debug)]
pub(crate) struct Round {
    /// [`Decision::Reached`] or [`Decision::Failed`], never pending.
    pub(crate) decision: Decision,
    /// Every master's outcome, in the order of the masters; [`MasterOutcome::Pending`]
    /// for those that had not answered when the round was decided.
    pub(crate) outcomes: Vec<MasterOutcome>,
    /// Read before the first request was sent.
    pub(crate) t0: Instant,
    /// Every master's reply when it answered one before the decision.
    pub(crate) replies: Vec<Option<Reply>>,
    /// The round was failed by its time bound (`Bounds::until`), not by the masters.
    pub(crate) cut: bool,
    /// With [`Bounds::late`]: the outcome of each master still [`MasterOutcome::Pending`]
    /// when the round was decided, by index, as soon as it answers or fails, then closed;
    /// `None` when none was pending, and without a runtime to collect them.
    pub(crate) late: Option<tokio::sync::mpsc::UnboundedReceiver<(usize, MasterOutcome)>>,
}

impl Round {
    /// When enough of the other holder's keys will have expired for a quorum to be free
    /// again, measured from `t0`; `None` without the needed reports.
    pub(crate) fn holder_free_in(&self, quorum: usize) -> Option<std::time::Duration> {
        // Masters that must free up: all but the `n - quorum` we can do without.
        let n = self.outcomes.len();
        let blocking = self
            .outcomes
            .iter()
            .filter(|o| matches!(o, MasterOutcome::HeldByOther))
            .count();
        let must_free = blocking.checked_sub(n - quorum)?.checked_sub(1)?;
        let mut ttls: Vec<std::time::Duration> = self
            .replies
            .iter()
            .flatten()
            .filter_map(|r| match r {
                Reply::Checked {
                    granted: false,
                    holder_ttl,
                    ..
                }
                | Reply::CheckedMany {
                    granted: false,
                    holder_ttl,
                    ..
                } => *holder_ttl,
                Reply::Permits {
                    granted: false,
                    wait,
                    ..
                } => *wait,
                _ => None,
            })
            .collect();
        ttls.sort_unstable();
        ttls.get(must_free).copied()
    }

    /// Every fence counter of the `index`-th key that the replies to an `AcquireMany`
    /// reported.
    pub(crate) fn fence_counters_of(&self, index: usize) -> impl Iterator<Item = u64> + '_ {
        self.replies.iter().flatten().filter_map(move |r| match r {
            Reply::CheckedMany { fences, .. } => fences.get(index).copied().flatten(),
            _ => None,
        })
    }

    /// Which keys of an `AcquireMany` some master reported held by another value.
    pub(crate) fn held_keys(&self, keys: usize) -> Vec<bool> {
        let mut any = vec![false; keys];
        for reply in self.replies.iter().flatten() {
            if let Reply::CheckedMany { held, .. } = reply {
                for (seen, held) in any.iter_mut().zip(held) {
                    *seen |= *held;
                }
            }
        }
        any
    }

    /// Every fence counter the replies reported: read in an acquire, or in conflict with
    /// a write-back.
    pub(crate) fn fence_counters(&self) -> impl Iterator<Item = u64> + '_ {
        self.replies.iter().flatten().filter_map(|r| match r {
            Reply::Checked { fence, .. } => *fence,
            Reply::Fenced {
                outcome: FenceOutcome::Conflict,
                before,
                ..
            } => *before,
            _ => None,
        })
    }
}

impl Round {
    /// The outcomes paired with the masters' names, for reports and errors.
    pub(crate) fn reports(&self, masters: &[Arc<dyn Master>]) -> Vec<MasterReport> {
        masters
            .iter()
            .zip(&self.outcomes)
            .map(|(m, o)| MasterReport::new(Arc::clone(m.name()), o.clone()))
            .collect()
    }
}

/// How a reply counts toward the decision of a round of `op`.
fn vote(op: &Op, reply: &Result<Reply, MasterError>) -> Vote {
    match (op, reply) {
        (_, Err(_)) => Vote::Failed,
        // Release succeeds wherever the key is no longer ours, whoever's it is now.
        (op, Ok(_)) if op.is_release() => Vote::Granted,
        (
            _,
            Ok(
                Reply::Granted
                | Reply::Checked { granted: true, .. }
                | Reply::Permits { granted: true, .. }
                | Reply::CheckedMany { granted: true, .. }
                | Reply::Fenced {
                    outcome: FenceOutcome::Written,
                    ..
                }
                | Reply::Enqueued { written: true, .. }
                | Reply::Survey { .. }
                | Reply::Scanned { .. }
                | Reply::Stamped { .. }
                | Reply::Inspected(_)
                | Reply::ForceUnlocked { .. },
            ),
        ) => Vote::Granted,
        (_, Ok(_)) => Vote::Denied,
    }
}

fn outcome(reply: &Result<Reply, MasterError>) -> MasterOutcome {
    match reply {
        Ok(
            Reply::Granted
            | Reply::HandedOn { .. }
            | Reply::Checked { granted: true, .. }
            | Reply::Permits { granted: true, .. }
            | Reply::CheckedMany { granted: true, .. }
            | Reply::Fenced {
                outcome: FenceOutcome::Written,
                ..
            }
            | Reply::Enqueued { written: true, .. },
        ) => MasterOutcome::Granted,
        Ok(
            Reply::HeldByOther
            | Reply::Checked { granted: false, .. }
            | Reply::Permits { granted: false, .. }
            | Reply::CheckedMany { granted: false, .. }
            | Reply::Fenced {
                outcome: FenceOutcome::NotOurs,
                ..
            }
            | Reply::Enqueued { written: false, .. },
        ) => MasterOutcome::HeldByOther,
        Ok(Reply::Fenced {
            outcome: FenceOutcome::Conflict,
            before,
            ..
        }) => MasterOutcome::FenceConflict {
            counter: before.unwrap_or(0),
        },
        Ok(Reply::Missing | Reply::Gone { .. }) => MasterOutcome::Missing,
        // Administration (records, not locks) and an operator's reads: done as asked.
        Ok(
            Reply::Survey { .. }
            | Reply::Scanned { .. }
            | Reply::Stamped { .. }
            | Reply::Inspected(_),
        ) => MasterOutcome::Granted,
        // A force-unlock: something deleted, or nothing there.
        Ok(Reply::ForceUnlocked {
            removed: Some(_), ..
        }) => MasterOutcome::Granted,
        Ok(Reply::ForceUnlocked { removed: None, .. }) => MasterOutcome::Missing,
        Err(e) => match e.abstains_until() {
            Some(until) => MasterOutcome::Abstained { until },
            None => MasterOutcome::Failed(e.clone()),
        },
    }
}

/// What bounds a round besides its masters' node timeouts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bounds<'a> {
    /// Decide by this instant at the latest: masters that have not answered by then stay
    /// [`MasterOutcome::Pending`] and the round fails unless already reached.
    pub(crate) until: Option<Instant>,
    /// Tracks the task that collects late replies, so that a shutdown can wait for it.
    pub(crate) tracker: Option<&'a TaskTracker>,
    /// Wait for every master's answer (each within its node timeout) even once decided,
    /// so that the outcomes report every master.
    pub(crate) every: bool,
    /// Report the outcomes of the masters still pending at the decision as they answer
    /// ([`Round::late`]); off for most rounds, which never ask.
    pub(crate) late: bool,
}

/// Runs `op` on every master in `masters` concurrently and decides once `need` grants are
/// certain or impossible (or at `bounds.until`). `resource` is the name as traces show
/// it (`telemetry::resource`).
///
/// # Cancel safety
/// Dropping the returned future drops the requests still in flight; requests already
/// written to a connection still run on their master. Callers that may have locked a key
/// must release it (see the acquire guard in `engine/attempt.rs`).
pub(crate) async fn run(
    masters: &[Arc<dyn Master>],
    op: Arc<Op>,
    need: usize,
    resource: impl std::fmt::Display,
    bounds: Bounds<'_>,
) -> Round {
    let n = masters.len();
    let span = tracing::debug_span!(
        "redquorum.round",
        op = op.name(),
        %resource,
        n,
        need,
        decision = Empty,
        granted = Empty,
        denied = Empty,
        failed = Empty,
        elapsed_us = Empty,
    );
    let sent = Outgoing::new(Arc::clone(&op));
    let t0 = Instant::now();
    let mut in_flight: FuturesUnordered<_> = masters
        .iter()
        .enumerate()
        .map(|(i, master)| {
            let call = master.call(Arc::clone(&sent));
            async move { (i, call.await) }
        })
        .collect();

    let mut tally = Tally::new(n, need);
    let mut outcomes = vec![MasterOutcome::Pending; n];
    let mut replies = vec![None; n];
    let mut decision = tally.decision();
    let mut cut = false;
    // One timer for the whole round, armed only when the round has a bound.
    let mut bound = std::pin::pin!(futures::future::OptionFuture::from(
        bounds.until.map(tokio::time::sleep_until)
    ));
    while decision == Decision::Pending || (bounds.every && !in_flight.is_empty()) {
        let next = if bounds.until.is_some() {
            tokio::select! {
                biased;
                next = in_flight.next() => next,
                _ = bound.as_mut() => {
                    // Out of time: the masters still pending count as failed.
                    cut = true;
                    break;
                }
            }
        } else {
            in_flight.next().await
        };
        let Some((i, reply)) = next else {
            // Every master answered: the tally is decided by then (see tally.rs tests).
            break;
        };
        decision = tally.record(vote(&op, &reply));
        outcomes[i] = outcome(&reply);
        telemetry::master_answered(|| masters[i].name(), op.name(), &outcomes[i]);
        replies[i] = reply.ok();
        if decision == Decision::Reached && !op.is_unguarded() {
            decision = disown(masters, &mut tally, &mut outcomes, &mut replies);
        }
    }

    let elapsed = t0.elapsed();
    span.record("decision", tracing::field::debug(decision));
    span.record("granted", tally.granted);
    span.record("denied", tally.denied);
    span.record("failed", tally.failed);
    span.record("elapsed_us", elapsed.as_micros() as u64);
    span.in_scope(|| {
        tracing::debug!(
            pending = in_flight.len(),
            "round decided: {decision:?} with {}/{n} granted, {} denied, {} failed in {elapsed:?}",
            tally.granted,
            tally.denied,
            tally.failed,
        );
    });

    let late = match in_flight.is_empty() {
        true => None,
        false => drain(in_flight, masters, op.name(), bounds),
    };

    let decision = match decision {
        Decision::Pending => Decision::Failed,
        d => d,
    };
    Round {
        decision,
        outcomes,
        t0,
        replies,
        cut,
        late,
    }
}

/// Reads the replies still in flight once the round is decided, in a task of its own
/// (tracked by `bounds.tracker`), so that each is traced and counted; with `bounds.late`
/// each outcome is sent on the returned receiver as it comes ([`Round::late`]). Outside a
/// runtime the replies are dropped unread.
fn drain<F>(
    mut in_flight: FuturesUnordered<F>,
    masters: &[Arc<dyn Master>],
    op_name: &'static str,
    bounds: Bounds<'_>,
) -> Option<tokio::sync::mpsc::UnboundedReceiver<(usize, MasterOutcome)>>
where
    F: std::future::Future<Output = (usize, Result<Reply, MasterError>)> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let names: Vec<Arc<str>> = masters.iter().map(|m| Arc::clone(m.name())).collect();
    let (tx, late) = match bounds.late {
        true => {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            (Some(sender), Some(receiver))
        }
        false => (None, None),
    };
    let stragglers = async move {
        while let Some((i, reply)) = in_flight.next().await {
            let outcome = outcome(&reply);
            telemetry::master_answered(|| &names[i], op_name, &outcome);
            tracing::debug!(
                master = %names[i],
                op = op_name,
                "late reply after the round was decided: {outcome}"
            );
            if let Some(tx) = &tx {
                // The caller may have stopped listening.
                let _ = tx.send((i, outcome));
            }
        }
    };
    match bounds.tracker {
        Some(tracker) => runtime.spawn(tracker.track_future(stragglers)),
        None => runtime.spawn(stragglers),
    };
    late
}

/// Takes back the grants of masters that the client learnt, while the round ran, not to
/// count (docs/design.md §11: a master met before the client knew its cluster's record);
/// returns the decision left.
fn disown(
    masters: &[Arc<dyn Master>],
    tally: &mut Tally,
    outcomes: &mut [MasterOutcome],
    replies: &mut [Option<Reply>],
) -> Decision {
    let mut decision = tally.decision();
    for (i, master) in masters.iter().enumerate() {
        if !matches!(outcomes[i], MasterOutcome::Granted) {
            continue;
        }
        if let Some(why) = master.disowned() {
            decision = tally.disown();
            outcomes[i] = MasterOutcome::Failed(why);
            replies[i] = None;
        }
    }
    decision
}

#[cfg(test)]
mod tests;
