//! The fencing write-back of a granted acquire (docs/design.md §8, I12): phase 2 of a
//! fencing token, one per key, within the lease's validity.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::Inner;
use crate::deadline;
use crate::error::{Error, ErrorKind, MasterErrorKind, MasterOutcome};
use crate::master::Op;
use crate::quorum::{self, Decision};
use crate::{scripts, telemetry};

/// The fencing write-back (phase 2, see `fencing.rs`): raises the counters to a token
/// starting at `token`, above every counter a master reports in conflict, until a
/// quorum accepted one, within the lease's validity.
pub(crate) async fn write_back(
    inner: &Inner,
    (key, lock): (&Arc<str>, &Arc<str>),
    resource: &Arc<str>,
    value: &Arc<str>,
    mut token: u64,
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
        if round.decision == Decision::Reached {
            if deadline::validity_left(deadline, Instant::now(), least).is_none() {
                break;
            }
            return Ok(token);
        }
        if let Some(counter) = round.fence_counters().max().filter(|c| *c >= token) {
            token = counter.saturating_add(1);
            continue;
        }
        let count = |f: fn(&MasterOutcome) -> bool| round.outcomes.iter().filter(|o| f(o)).count();
        if count(|o| matches!(o, MasterOutcome::HeldByOther)) > n - inner.quorum() {
            return Err((
                Error::new(ErrorKind::FencingFailed, &**resource)
                    .with_detail("no quorum of masters still held this acquisition")
                    .with_masters(last),
                false,
            ));
        }
        let unfit = count(
            |o| matches!(o, MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Misconfigured),
        );
        if unfit > n - inner.quorum() {
            return Err((
                Error::new(ErrorKind::Misconfigured, &**resource)
                    .with_detail(
                        "fencing tokens need durable masters (appendonly yes, appendfsync \
                         always) that never lost data, and too few are: make the masters \
                         durable, or acquire without fencing",
                    )
                    .with_masters(last),
                false,
            ));
        }
        // Neither a master that no longer holds this acquisition nor one unfit for tokens
        // can ever count: together they may leave too few, and no later round can help.
        let held_elsewhere = count(|o| matches!(o, MasterOutcome::HeldByOther));
        if held_elsewhere + unfit > n - inner.quorum() {
            return Err((
                Error::new(ErrorKind::FencingFailed, &**resource)
                    .with_detail(
                        "too few durable masters still hold this acquisition to confirm a \
                         token",
                    )
                    .with_masters(last),
                false,
            ));
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
