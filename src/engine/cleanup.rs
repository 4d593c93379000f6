//! What a granted call leaves on the masters that did not grant it, cleared in the
//! background: a writer's intent (docs/design.md §16) and a queued waiter's registration
//! (§17). The masters that granted cleared both in the granting script; a master whose
//! answer was still pending at the decision is judged by its late answer, so that the
//! common grant, where the stragglers grant too, sends nothing more.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::core::Inner;
use crate::error::MasterOutcome;
use crate::master::{Master, Op};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::{quorum, scripts, telemetry};

/// The stragglers' answers of a round decided before they came (`Round::late`).
pub(super) type Late = oneshot::Receiver<Vec<(usize, MasterOutcome)>>;

/// After a grant: runs `clear` with the masters that did not grant (`true` by index),
/// once the answers still pending at the decision are in (`late`; an unknown answer
/// counts as not granted). Nothing when every master granted. Without a runtime to wait
/// in, nothing is cleared: what `clear` would remove expires with its TTL.
pub(super) fn after_grant(
    inner: &Arc<Inner>,
    outcomes: &[MasterOutcome],
    late: Option<Late>,
    clear: impl FnOnce(&Arc<Inner>, &[bool]) + Send + 'static,
) {
    let left: Vec<bool> = outcomes.iter().map(|o| !o.is_granted()).collect();
    if !left.contains(&true) {
        return;
    }
    let pending = outcomes.iter().any(|o| matches!(o, MasterOutcome::Pending));
    let late = match late {
        Some(late) if pending => late,
        _ => return clear(inner, &left),
    };
    let shared = Arc::clone(inner);
    let spawned = inner.spawn(async move {
        let left = judged(left, late).await;
        if left.contains(&true) {
            clear(&shared, &left);
        }
    });
    if !spawned {
        tracing::debug!(
            target: super::TRACE_TARGET,
            "no runtime to clean up after a grant: what is left expires with its TTL"
        );
    }
}

/// `left` (by master, `true` where not granted) once the stragglers' answers are in: a
/// straggler that granted is no longer left. They answer within their call bound; a
/// closed channel leaves them all.
async fn judged(mut left: Vec<bool>, late: Late) -> Vec<bool> {
    if let Ok(answers) = late.await {
        for (i, outcome) in answers {
            if let Some(left) = left.get_mut(i) {
                *left = !outcome.is_granted();
            }
        }
    }
    left
}

/// The masters marked `true` in `mask`, by index.
pub(super) fn masters_where(inner: &Inner, mask: &[bool]) -> Vec<Arc<dyn Master>> {
    inner
        .masters
        .iter()
        .zip(mask)
        .filter(|(_, marked)| **marked)
        .map(|(m, _)| Arc::clone(m))
        .collect()
}

/// Removes waiter `waiter`'s registration in the queue of `key` from `targets` in the
/// background (`Op::Dequeue`, which passes on a key handed to the waiter meanwhile).
/// Without a runtime nothing is sent: the registration expires with `waiter_ttl`.
pub(super) fn dequeue(
    inner: &Arc<Inner>,
    targets: Vec<Arc<dyn Master>>,
    key: &Arc<str>,
    waiter: &Arc<str>,
) {
    #[cfg(redquorum_mutants)]
    if crate::mutants::planted(&inner.owner.client).is(Mutant::DequeueNeverSent) {
        return;
    }
    if targets.is_empty() {
        return;
    }
    let op = Arc::new(Op::Dequeue {
        key: Arc::clone(key),
        waiter: Arc::clone(waiter),
        channel: scripts::release_channel(key).into(),
    });
    let need = targets.len();
    let resource = key
        .strip_prefix(inner.config.key_prefix.as_str())
        .unwrap_or(key)
        .to_owned();
    let shown = inner.config.trace_resource_names;
    let shared = Arc::clone(inner);
    inner.spawn(async move {
        let resource = telemetry::resource(&resource, shown);
        // A master that answers first that it had nothing to pass on decides the round;
        // the others are still awaited, by a task `Redlock::shutdown` waits for.
        let bounds = shared.cleanup_bounds();
        let _ = quorum::run(&targets, op, need, resource, bounds).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_straggler_is_left_unless_its_late_answer_granted() {
        let (tx, late) = oneshot::channel();
        tx.send(vec![
            (1, MasterOutcome::Granted),
            (2, MasterOutcome::HeldByOther),
        ])
        .unwrap();
        let left = judged(vec![false, true, true, true], late).await;
        assert_eq!(left, [false, false, true, true], "m3 never answered late");

        let (tx, late) = oneshot::channel::<Vec<(usize, MasterOutcome)>>();
        drop(tx);
        let left = judged(vec![false, true], late).await;
        assert_eq!(
            left,
            [false, true],
            "a closed channel leaves the stragglers"
        );
    }
}
