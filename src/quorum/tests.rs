//! The round driver against in-memory masters that answer, refuse, fail, answer slowly or
//! never (deadpool's gate idea), on a paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::error::MasterErrorKind;

const TIMEOUT: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Grant,
    Deny,
    Fail,
    /// Grants after half the node timeout.
    Slow,
    /// Never answers; the node timeout fails it.
    Never,
}

#[derive(Debug)]
struct Fake {
    name: Arc<str>,
    gate: Gate,
    finished: Arc<AtomicUsize>,
}

impl Master for Fake {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn call(
        &self,
        _op: Arc<Outgoing>,
    ) -> futures::future::BoxFuture<'static, Result<Reply, MasterError>> {
        let gate = self.gate;
        let finished = Arc::clone(&self.finished);
        async move {
            let reply = match gate {
                Gate::Grant => Ok(Reply::Granted),
                Gate::Deny => Ok(Reply::HeldByOther),
                Gate::Fail => Err(MasterError::new(MasterErrorKind::Refused, "refused")),
                Gate::Slow => {
                    tokio::time::sleep(TIMEOUT / 2).await;
                    Ok(Reply::Granted)
                }
                Gate::Never => {
                    tokio::time::sleep(TIMEOUT).await;
                    Err(MasterError::new(MasterErrorKind::Timeout, "timeout"))
                }
            };
            finished.fetch_add(1, Ordering::SeqCst);
            reply
        }
        .boxed()
    }
}

fn acquire_op() -> Arc<Op> {
    Arc::new(Op::AcquireChecked {
        key: "k".into(),
        value: "v".into(),
        ttl: Duration::from_secs(1),
        fence: crate::master::FenceRead::Skip,
        owner: Arc::new(crate::cluster::Owner::this_process("")),
    })
}

const GATES: [Gate; 5] = [Gate::Grant, Gate::Deny, Gate::Fail, Gate::Slow, Gate::Never];

/// Every combination of gates over 3 masters (5^3 = 125): the decision is right, it comes
/// as early as the gates allow, and every master's request still runs to its end.
#[tokio::test(start_paused = true)]
async fn every_gate_combination_over_three_masters() {
    for a in GATES {
        for b in GATES {
            for c in GATES {
                let gates = [a, b, c];
                let finished = Arc::new(AtomicUsize::new(0));
                let masters: Vec<Arc<dyn Master>> = gates
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        Arc::new(Fake {
                            name: format!("m{i}").into(),
                            gate: *g,
                            finished: Arc::clone(&finished),
                        }) as Arc<dyn Master>
                    })
                    .collect();
                let start = Instant::now();
                let round = run(&masters, acquire_op(), quorum(3), "r", Bounds::default()).await;
                let took = start.elapsed();

                let grants = gates
                    .iter()
                    .filter(|g| matches!(g, Gate::Grant | Gate::Slow))
                    .count();
                let want = if grants >= 2 {
                    Decision::Reached
                } else {
                    Decision::Failed
                };
                assert_eq!(round.decision, want, "{gates:?}");

                // The earliest instant the outcome is certain, given the gate latencies.
                let mut latencies: Vec<(Duration, Vote)> = gates
                    .iter()
                    .map(|g| match g {
                        Gate::Grant => (Duration::ZERO, Vote::Granted),
                        Gate::Deny => (Duration::ZERO, Vote::Denied),
                        Gate::Fail => (Duration::ZERO, Vote::Failed),
                        Gate::Slow => (TIMEOUT / 2, Vote::Granted),
                        Gate::Never => (TIMEOUT, Vote::Failed),
                    })
                    .collect();
                latencies.sort_by_key(|(d, _)| *d);
                let mut t = Tally::new(3, 2);
                let earliest = latencies
                    .iter()
                    .find(|(_, v)| t.record(*v) != Decision::Pending)
                    .map(|(d, _)| *d)
                    .unwrap();
                assert_eq!(took, earliest, "{gates:?}: decided late");

                let answered = round
                    .outcomes
                    .iter()
                    .filter(|o| !matches!(o, MasterOutcome::Pending))
                    .count();
                assert!(answered >= 1);

                // Stragglers are collected in the background until each one ends.
                tokio::time::sleep(TIMEOUT * 2).await;
                assert_eq!(finished.load(Ordering::SeqCst), 3, "{gates:?}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn release_counts_any_answer_as_cleared() {
    let finished = Arc::new(AtomicUsize::new(0));
    let masters: Vec<Arc<dyn Master>> = [Gate::Deny, Gate::Deny, Gate::Fail]
        .iter()
        .map(|g| {
            Arc::new(Fake {
                name: "m".into(),
                gate: *g,
                finished: Arc::clone(&finished),
            }) as Arc<dyn Master>
        })
        .collect();
    let op = Arc::new(Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "c".into(),
        plain: false,
    });
    let round = run(&masters, op, 2, "r", Bounds::default()).await;
    assert_eq!(round.decision, Decision::Reached);
}

#[tokio::test(start_paused = true)]
async fn four_masters_split_two_two_fails_without_waiting() {
    let finished = Arc::new(AtomicUsize::new(0));
    let masters: Vec<Arc<dyn Master>> = [Gate::Grant, Gate::Grant, Gate::Deny, Gate::Deny]
        .iter()
        .map(|g| {
            Arc::new(Fake {
                name: "m".into(),
                gate: *g,
                finished: Arc::clone(&finished),
            }) as Arc<dyn Master>
        })
        .collect();
    let start = Instant::now();
    let round = run(&masters, acquire_op(), quorum(4), "r", Bounds::default()).await;
    assert_eq!(round.decision, Decision::Failed);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A master the client learns, while the round runs, not to count (`Master::disowned`).
#[derive(Debug)]
struct Disowned(Fake);

impl Master for Disowned {
    fn name(&self) -> &Arc<str> {
        self.0.name()
    }

    fn call(
        &self,
        sent: Arc<Outgoing>,
    ) -> futures::future::BoxFuture<'static, Result<Reply, MasterError>> {
        self.0.call(sent)
    }

    fn disowned(&self) -> Option<MasterError> {
        Some(MasterError::new(MasterErrorKind::Other, "disowned"))
    }
}

/// A disowned master's grant is taken back before the round is decided: the round waits
/// for another grant instead, or fails without one; a release still counts it.
#[tokio::test(start_paused = true)]
async fn a_disowned_grant_is_taken_back_before_the_decision() {
    let finished = Arc::new(AtomicUsize::new(0));
    let fake = |gate| Fake {
        name: "m".into(),
        gate,
        finished: Arc::clone(&finished),
    };
    for (last, want) in [
        (Gate::Slow, Decision::Reached),
        (Gate::Deny, Decision::Failed),
    ] {
        let masters: Vec<Arc<dyn Master>> = vec![
            Arc::new(Disowned(fake(Gate::Grant))),
            Arc::new(fake(Gate::Grant)),
            Arc::new(fake(last)),
        ];
        let round = run(&masters, acquire_op(), quorum(3), "r", Bounds::default()).await;
        assert_eq!(round.decision, want, "{last:?}");
        assert!(
            matches!(&round.outcomes[0], MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Other),
            "{:?}",
            round.outcomes
        );
        assert!(round.replies[0].is_none());
    }
    let masters: Vec<Arc<dyn Master>> = vec![
        Arc::new(Disowned(fake(Gate::Grant))),
        Arc::new(fake(Gate::Deny)),
        Arc::new(fake(Gate::Fail)),
    ];
    let release = Arc::new(Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "c".into(),
        plain: false,
    });
    let round = run(&masters, release, 2, "r", Bounds::default()).await;
    assert_eq!(round.decision, Decision::Reached);
}
