//! The quorum round (DESIGN.md section 2): one operation sent to every master at once,
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

mod tally;

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tracing::field::Empty;

use crate::error::{MasterError, MasterOutcome, MasterReport};
use crate::master::{Master, Op, Reply};
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
    /// How long the other holder's key lives on each master that reported it, sorted.
    pub(crate) holder_ttls: Vec<std::time::Duration>,
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
        self.holder_ttls.get(must_free).copied()
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
        (Op::Release { .. } | Op::ReleaseUnchecked { .. }, Ok(_)) => Vote::Granted,
        (_, Ok(Reply::Granted)) => Vote::Granted,
        (_, Ok(Reply::HeldByOther | Reply::HeldFor(_) | Reply::Missing)) => Vote::Denied,
    }
}

fn outcome(reply: Result<Reply, MasterError>) -> MasterOutcome {
    match reply {
        Ok(Reply::Granted) => MasterOutcome::Granted,
        Ok(Reply::HeldByOther | Reply::HeldFor(_)) => MasterOutcome::HeldByOther,
        Ok(Reply::Missing) => MasterOutcome::Missing,
        Err(e) => MasterOutcome::Failed(e),
    }
}

/// Runs `op` on every master in `masters` concurrently and decides once `need` grants are
/// certain or impossible.
///
/// # Cancel safety
/// Dropping the returned future drops the requests still in flight; requests already
/// written to a connection still run on their master. Callers that may have locked a key
/// must release it (see the acquire guard in `lock.rs`).
pub(crate) async fn run(
    masters: &[Arc<dyn Master>],
    op: Arc<Op>,
    need: usize,
    resource: &str,
) -> Round {
    let n = masters.len();
    let span = tracing::debug_span!(
        "redquorum.round",
        op = op.name(),
        resource,
        n,
        need,
        decision = Empty,
        granted = Empty,
        denied = Empty,
        failed = Empty,
        elapsed_us = Empty,
    );
    let t0 = Instant::now();
    let mut in_flight: FuturesUnordered<_> = masters
        .iter()
        .enumerate()
        .map(|(i, master)| {
            let call = master.call(Arc::clone(&op));
            async move { (i, call.await) }
        })
        .collect();

    let mut tally = Tally::new(n, need);
    let mut outcomes = vec![MasterOutcome::Pending; n];
    let mut holder_ttls = Vec::new();
    let mut decision = tally.decision();
    while decision == Decision::Pending {
        let Some((i, reply)) = in_flight.next().await else {
            // Every master answered: the tally is decided by then (see tally.rs tests).
            break;
        };
        decision = tally.record(vote(&op, &reply));
        if let Ok(Reply::HeldFor(ttl)) = reply {
            holder_ttls.push(ttl);
        }
        outcomes[i] = outcome(reply);
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

    if !in_flight.is_empty()
        && let Ok(runtime) = tokio::runtime::Handle::try_current()
    {
        let names: Vec<Arc<str>> = masters.iter().map(|m| Arc::clone(m.name())).collect();
        let op_name = op.name();
        runtime.spawn(async move {
            while let Some((i, reply)) = in_flight.next().await {
                tracing::debug!(
                    master = %names[i],
                    op = op_name,
                    "late reply after the round was decided: {}",
                    outcome(reply)
                );
            }
        });
    }

    let decision = match decision {
        Decision::Pending => Decision::Failed,
        d => d,
    };
    holder_ttls.sort_unstable();
    Round {
        decision,
        outcomes,
        t0,
        holder_ttls,
    }
}

#[cfg(test)]
mod tests;
