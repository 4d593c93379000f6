//! What a granted call leaves on the masters that did not grant it, cleared in the
//! background: a writer's intent (docs/design.md §16) and a queued waiter's registration
//! (§17). The masters that granted cleared both in the granting script; a master whose
//! answer was still pending at the decision is judged by its late answer, so that the
//! common grant, where the stragglers grant too, sends nothing more.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::core::Inner;
use crate::error::MasterOutcome;
use crate::master::{Master, Op};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::{quorum, scripts, telemetry};

/// The stragglers' answers of a round decided before they came, each as it comes
/// (`Round::late`).
pub(super) type Late = mpsc::UnboundedReceiver<(usize, MasterOutcome)>;

/// After a grant: runs `clear` with the masters that did not grant (`true` by index):
/// at once for those whose answer said so, and for each master still pending at the
/// decision as soon as its late answer says so (`late`; an answer that never comes counts
/// as not granted), so that a hung straggler holds back no other master's clean-up.
/// Nothing when every master granted. Without a runtime to wait in, the stragglers are
/// not cleared: what `clear` would remove expires with its TTL.
pub(super) fn after_grant(
    inner: &Arc<Inner>,
    outcomes: &[MasterOutcome],
    late: Option<Late>,
    clear: impl Fn(&Arc<Inner>, &[bool]) + Send + Sync + 'static,
) {
    let pending: Vec<bool> = outcomes
        .iter()
        .map(|o| matches!(o, MasterOutcome::Pending))
        .collect();
    let late = match late {
        Some(late) if pending.contains(&true) => late,
        // Without the stragglers' answers, they are cleared with the refusers.
        _ => {
            let left: Vec<bool> = outcomes.iter().map(|o| !o.is_granted()).collect();
            if left.contains(&true) {
                clear(inner, &left);
            }
            return;
        }
    };
    let refused: Vec<bool> = outcomes
        .iter()
        .zip(&pending)
        .map(|(o, pending)| !o.is_granted() && !pending)
        .collect();
    if refused.contains(&true) {
        clear(inner, &refused);
    }
    let shared = Arc::clone(inner);
    let spawned = inner.spawn(async move {
        stragglers(late, pending, |left| clear(&shared, left)).await;
    });
    if !spawned {
        tracing::debug!(
            target: super::TRACE_TARGET,
            "no runtime to clean up after a grant: what is left expires with its TTL"
        );
    }
}

/// Calls `clear` for each straggler (`true` in `pending`) whose late answer is not a
/// grant, as it comes, and once the channel closes for those that never answered. They
/// answer within their call bound.
async fn stragglers(mut late: Late, mut pending: Vec<bool>, clear: impl Fn(&[bool])) {
    while let Some((i, outcome)) = late.recv().await {
        let Some(waiting) = pending.get_mut(i).filter(|w| **w) else {
            continue;
        };
        *waiting = false;
        if !outcome.is_granted() {
            let mut one = vec![false; pending.len()];
            one[i] = true;
            clear(&one);
        }
    }
    if pending.contains(&true) {
        clear(&pending);
    }
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
    use std::sync::Mutex;

    #[tokio::test]
    async fn each_straggler_is_cleared_as_its_answer_comes_unless_it_granted() {
        let (tx, late) = mpsc::unbounded_channel();
        let cleared = Mutex::new(Vec::new());
        // m1 grants late, m2 refuses late, m3 never answers; m0 was no straggler.
        tx.send((1, MasterOutcome::Granted)).unwrap();
        tx.send((2, MasterOutcome::HeldByOther)).unwrap();
        tx.send((0, MasterOutcome::HeldByOther)).unwrap();
        drop(tx);
        let record = |left: &[bool]| cleared.lock().unwrap().push(left.to_vec());
        stragglers(late, vec![false, true, true, true], record).await;
        assert_eq!(
            cleared.into_inner().unwrap(),
            [
                vec![false, false, true, false],
                vec![false, false, false, true]
            ],
            "m2 at its answer, m3 once the channel closed; never m0 or m1"
        );
    }
}
