//! Restart quarantine and fence-counter trust, applied to any master (real or simulated);
//! docs/design.md §7 (I11) and §8 (I12).
//!
//! [`Guarded`] wraps a [`Master`]: it learns each (re)connection's vitals and every epoch a
//! reply reads, keeps the master's [`Quarantine`], and turns the answers of a master that
//! must not vote into abstentions. Releases always pass: they must reach every master that
//! may hold the key. The rules themselves are pure, in `quarantine.rs`.
//!
//! # Fence counters
//! A fencing write-back counts only on a master whose counters cannot have gone back:
//! one that is durable (`appendonly yes`, `appendfsync always`) and whose data this client
//! never saw lost (a new data epoch or `run_id` on it). Any two write-back quorums then
//! share such a master, whose counter only ever grew, so tokens are unique and ordered. A
//! master that fails this test still votes for the lock itself; for fencing it answers
//! [`MasterErrorKind::Misconfigured`], a permanent failure, so a client whose masters are
//! not durable learns it at its first fenced acquire instead of after a restart.
//!
//! Layer: beside the round (docs/design.md §10); it must not use the round, the core,
//! leases or the facade.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::error::{MasterError, MasterErrorKind, human};
use crate::master::{Master, Op, Outgoing, Probe, Reply};
use crate::op::EpochReport;
use crate::quarantine::{Epoch, Quarantine, Standing, Vitals};

/// A master under restart quarantine.
#[derive(Debug)]
pub(crate) struct Guarded {
    inner: Arc<dyn Master>,
    shared: Arc<GuardShared>,
}

#[derive(Debug)]
struct GuardShared {
    index: usize,
    state: Mutex<GuardState>,
}

#[derive(Debug)]
struct GuardState {
    quarantine: Quarantine,
    /// The connection whose vitals were last taken in.
    generation: u64,
    /// The latest vitals said `appendonly yes` with `appendfsync always`.
    durable: bool,
    /// This client saw the master lose its data (a new epoch or `run_id`).
    lost_data: bool,
    /// Its cluster record says it was re-admitted after losing its data.
    counters_lost: bool,
}

impl Guarded {
    pub(crate) fn new(inner: Arc<dyn Master>, index: usize, window: Duration) -> Self {
        Self {
            inner,
            shared: Arc::new(GuardShared {
                index,
                state: Mutex::new(GuardState {
                    quarantine: Quarantine::new(window),
                    generation: 0,
                    durable: false,
                    lost_data: false,
                    counters_lost: false,
                }),
            }),
        }
    }
}

impl GuardShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, GuardState> {
        // Updated field by field from complete values; a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_vitals(&self, vitals: Option<(u64, Arc<Vitals>)>, now: Instant) {
        let Some((generation, vitals)) = vitals else {
            return;
        };
        let mut state = self.lock();
        if generation > state.generation {
            state.generation = generation;
            state.durable = vitals.durable;
            // Sticky: a record that once said so may be read again by a later connection.
            state.counters_lost |= vitals.counters_lost;
            if state.quarantine.connected(&vitals, now) {
                tracing::warn!(
                    master = self.index,
                    "master lost its data (restarted without persistence, or a new epoch)"
                );
                state.lost_data = true;
            }
        }
    }

    /// Applies quarantine and trust to one answer.
    fn judge(&self, op: &Op, reply: Reply, now: Instant) -> Result<Reply, MasterError> {
        let standing = {
            let mut state = self.lock();
            // The common case, the epoch this client knows, is told without parsing it.
            let known = |r: &&EpochReport| {
                r.record
                    .as_deref()
                    .is_some_and(|r| state.quarantine.knows(r))
            };
            if let Some(report) = reply.epoch().filter(|r| !known(r)) {
                match report.record.as_deref().and_then(|r| Epoch::parse(r, None)) {
                    Some(epoch) => {
                        let first = state.generation == 0;
                        if state.quarantine.observed(&epoch, now) && !first {
                            tracing::warn!(
                                master = self.index,
                                "master lost its data (new epoch): restart quarantine"
                            );
                            state.lost_data = true;
                        }
                    }
                    // No epoch record at all: the data is gone; the next acquire starts one.
                    None if report.record.is_none() && !op.is_unguarded() => {
                        state.quarantine.observed(
                            &Epoch {
                                id: "".into(),
                                created_us: 0,
                                now_us: None,
                            },
                            now,
                        );
                        state.lost_data = true;
                    }
                    None => {}
                }
            }
            let lost = state.lost_data || state.counters_lost;
            let fence_trust = match (state.durable, lost) {
                (false, _) => Err(
                    "not durable (appendonly yes with appendfsync always): a restart would \
                     lose its fence counters, so fencing tokens do not count it",
                ),
                (true, true) => Err(
                    "it lost its data (a new data epoch while this client watched, or its \
                     cluster record says it was re-admitted after a loss): its fence \
                     counters may be behind tokens already issued, so fencing tokens do \
                     not count it",
                ),
                (true, false) => Ok(()),
            };
            (state.quarantine.standing(now), fence_trust)
        };
        let (standing, fence_trust) = standing;
        if op.is_unguarded() {
            return Ok(reply);
        }
        match standing {
            Standing::Counted => {}
            Standing::Abstains(until) => {
                return Err(MasterError::abstained(
                    until,
                    format!(
                        "restart quarantine: may have lost lock keys; votes again in {}",
                        human(until.saturating_duration_since(now))
                    ),
                ));
            }
            Standing::Misconfigured => {
                return Err(MasterError::new(
                    MasterErrorKind::Misconfigured,
                    "its maxmemory-policy can evict lock keys: configure noeviction",
                ));
            }
        }
        if let (Reply::Fenced { .. }, Err(why)) = (&reply, fence_trust) {
            return Err(MasterError::new(MasterErrorKind::Misconfigured, why));
        }
        Ok(reply)
    }
}

impl Master for Guarded {
    fn name(&self) -> &Arc<str> {
        self.inner.name()
    }

    fn call(&self, sent: Arc<Outgoing>) -> BoxFuture<'static, Result<Reply, MasterError>> {
        let inner = Arc::clone(&self.inner);
        let shared = Arc::clone(&self.shared);
        // Made now, not at the first poll: the call takes its place in the master's order
        // when it is made (docs/design.md §2, I20).
        let call = inner.call(Arc::clone(&sent));
        async move {
            let reply = call.await;
            let now = Instant::now();
            shared.take_vitals(inner.vitals(), now);
            shared.judge(sent.op(), reply?, now)
        }
        .boxed()
    }

    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        self.inner.vitals()
    }

    fn probe(&self, record_key: Arc<str>) -> BoxFuture<'static, Result<Probe, MasterError>> {
        self.inner.probe(record_key)
    }

    fn standing(&self, now: Instant) -> Option<Standing> {
        Some(self.shared.lock().quarantine.standing(now))
    }

    fn disowned(&self) -> Option<MasterError> {
        self.inner.disowned()
    }
}
