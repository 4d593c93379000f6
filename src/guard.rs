//! Restart quarantine and fence-counter trust, applied to any master (real or simulated).
//!
//! [`Guarded`] wraps a [`Master`]: it learns each (re)connection's vitals and every epoch a
//! reply reads, keeps the master's [`Quarantine`], and turns the answers of a master that
//! must not vote into abstentions. Releases always pass: they must reach every master that
//! may hold the key. The rules themselves are pure, in `quarantine.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::error::{MasterError, MasterErrorKind, human};
use crate::master::{FenceOutcome, Master, Op, Reply};
use crate::quarantine::{Epoch, Quarantine, Standing, Vitals, lossy};

/// The data epochs of all masters of one client, for telling which ones lost data that
/// the others kept.
#[derive(Debug)]
pub(crate) struct EpochBoard {
    created_us: Vec<AtomicU64>,
    window: Duration,
}

impl EpochBoard {
    pub(crate) fn new(masters: usize, window: Duration) -> Self {
        Self {
            created_us: (0..masters).map(|_| AtomicU64::new(u64::MAX)).collect(),
            window,
        }
    }

    fn record(&self, index: usize, created_us: u64) {
        if let Some(slot) = self.created_us.get(index) {
            slot.store(created_us, Ordering::Relaxed);
        }
    }

    /// Whether master `index` lost data the others kept (see `quarantine::lossy`).
    fn lossy(&self, index: usize) -> bool {
        let known: Vec<Option<u64>> = self
            .created_us
            .iter()
            .map(|c| Some(c.load(Ordering::Relaxed)).filter(|c| *c != u64::MAX))
            .collect();
        lossy(&known, self.window)
            .get(index)
            .copied()
            .unwrap_or(false)
    }
}

/// A master under restart quarantine.
#[derive(Debug)]
pub(crate) struct Guarded {
    inner: Arc<dyn Master>,
    shared: Arc<GuardShared>,
}

#[derive(Debug)]
struct GuardShared {
    index: usize,
    board: Arc<EpochBoard>,
    state: Mutex<GuardState>,
}

#[derive(Debug)]
struct GuardState {
    quarantine: Quarantine,
    /// The connection whose vitals were last taken in.
    generation: u64,
    run_id: Option<String>,
}

impl Guarded {
    pub(crate) fn new(inner: Arc<dyn Master>, index: usize, board: Arc<EpochBoard>) -> Self {
        let window = board.window;
        Self {
            inner,
            shared: Arc::new(GuardShared {
                index,
                board,
                state: Mutex::new(GuardState {
                    quarantine: Quarantine::new(window),
                    generation: 0,
                    run_id: None,
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
            if state.run_id.as_ref().is_some_and(|r| *r != vitals.run_id) {
                tracing::warn!(master = self.index, "master restarted (new run_id)");
            }
            state.run_id = Some(vitals.run_id.clone());
            state.generation = generation;
            state.quarantine.connected(&vitals, now);
            self.board.record(self.index, vitals.epoch.created_us);
        }
    }

    /// Applies quarantine and trust to one answer.
    fn judge(&self, op: &Op, reply: Reply, now: Instant) -> Result<Reply, MasterError> {
        let standing = {
            let mut state = self.lock();
            if let Some(report) = reply.epoch() {
                match report
                    .record
                    .as_deref()
                    .and_then(|r| Epoch::parse(r, report.now_us))
                {
                    Some(epoch) => {
                        if state.quarantine.observed(&epoch, now) {
                            tracing::warn!(
                                master = self.index,
                                "master lost its data (new epoch): restart quarantine"
                            );
                        }
                        self.board.record(self.index, epoch.created_us);
                    }
                    // No epoch record at all: the data is gone; the next acquire starts one.
                    None if report.record.is_none() && !op.is_release() => {
                        state.quarantine.observed(
                            &Epoch {
                                id: "".into(),
                                created_us: report.now_us,
                                now_us: report.now_us,
                            },
                            now,
                        );
                    }
                    None => {}
                }
            }
            state.quarantine.standing(now)
        };
        if op.is_release() {
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
        // A master that lost data the others kept may hold a counter below a token already
        // issued — lost, or seeded later from a read that missed the newest one. Its
        // write-backs seed it but never count: tokens are ordered by the masters that kept
        // their counters. It still votes for the lock itself.
        if let Reply::Fenced {
            outcome: FenceOutcome::Written,
            ..
        } = reply
            && self.board.lossy(self.index)
        {
            return Err(MasterError::abstained(
                now,
                "it lost data the other masters kept: its fence counter does not count",
            ));
        }
        Ok(reply)
    }
}

impl Master for Guarded {
    fn name(&self) -> &Arc<str> {
        self.inner.name()
    }

    fn call(&self, op: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>> {
        let inner = Arc::clone(&self.inner);
        let shared = Arc::clone(&self.shared);
        async move {
            let reply = inner.call(Arc::clone(&op)).await;
            let now = Instant::now();
            shared.take_vitals(inner.vitals(), now);
            shared.judge(&op, reply?, now)
        }
        .boxed()
    }

    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        self.inner.vitals()
    }
}
