//! The lease: proof of holding a lock until its deadline.
//!
//! A lease is valid until [`Lease::deadline`], computed from the instant *before* the
//! acquire (or last extend) round sent its first request, minus the drift allowance. Past
//! the deadline another client may hold the lock; work that must not overlap has to stop
//! before then (or be fenced at the storage).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::deadline;
use crate::error::{Error, ErrorKind, MasterOutcome, MasterReport, human};
use crate::lock::{Inner, release_in_background};
use crate::master::Op;
use crate::quorum::{self, Decision};

/// What every handle to one lease shares.
pub(crate) struct LeaseShared {
    pub(crate) inner: Arc<Inner>,
    pub(crate) key: Arc<str>,
    pub(crate) resource: Arc<str>,
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) state: watch::Sender<LeaseState>,
}

/// A lease's validity as last established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub(crate) deadline: Instant,
    /// An extension failed: the lease is no longer known to be held.
    pub(crate) lost: bool,
}

/// A held lock, valid until its [`deadline`](Lease::deadline).
///
/// Release it with [`release`](Lease::release). Dropping it without releasing releases it
/// in the background when a tokio runtime is running (and otherwise lets it expire with its
/// TTL); `Drop` never blocks.
///
/// # Example
/// ```no_run
/// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
/// let lease = client.acquire("invoices:7").await?;
/// if lease.remaining() > std::time::Duration::from_secs(1) {
///     // ... work that finishes well within the remaining validity ...
/// }
/// let report = lease.release().await?;
/// assert!(report.overrun().is_none(), "the work outlived the lease");
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a Lease releases the lock in the background right away"]
#[clippy::has_significant_drop]
pub struct Lease {
    shared: Arc<LeaseShared>,
    acquired: Vec<MasterReport>,
    released: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = *self.shared.state.borrow();
        f.debug_struct("Lease")
            .field("resource", &self.shared.resource)
            .field(
                "remaining",
                &state.deadline.saturating_duration_since(Instant::now()),
            )
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

/// The outcome of a successful [`Lease::extend`].
#[derive(Debug, Clone)]
pub struct ExtendReport {
    deadline: Instant,
    masters: Vec<MasterReport>,
}

impl ExtendReport {
    /// The lease's new deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// What each master did with the extension.
    pub fn masters(&self) -> &[MasterReport] {
        &self.masters
    }
}

/// The outcome of [`Lease::release`].
#[derive(Debug, Clone)]
pub struct ReleaseReport {
    masters: Vec<MasterReport>,
    overrun: Option<Duration>,
}

impl ReleaseReport {
    /// What each master did: [`MasterOutcome::Granted`] where our key was deleted,
    /// [`MasterOutcome::Missing`] where it had expired, [`MasterOutcome::HeldByOther`]
    /// where another client already holds the key (left untouched).
    pub fn masters(&self) -> &[MasterReport] {
        &self.masters
    }

    /// On how many masters our key was deleted.
    pub fn released(&self) -> usize {
        self.masters
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
    }

    /// How long past its deadline the lease was released, if it was: the work ran for
    /// that long without the guarantee of holding the lock.
    pub fn overrun(&self) -> Option<Duration> {
        self.overrun
    }
}

impl Lease {
    pub(crate) fn new(
        inner: Arc<Inner>,
        key: Arc<str>,
        resource: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        deadline: Instant,
        acquired: Vec<MasterReport>,
    ) -> Self {
        let (state, _) = watch::channel(LeaseState {
            deadline,
            lost: false,
        });
        Self {
            shared: Arc::new(LeaseShared {
                inner,
                key,
                resource,
                value,
                ttl,
                state,
            }),
            acquired,
            released: false,
        }
    }

    /// The locked resource's name (without the key prefix).
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// The key on the masters (`key_prefix` + resource).
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The random value identifying this acquisition on the masters.
    pub fn value(&self) -> &str {
        &self.shared.value
    }

    /// The TTL the lock was set (and is extended) with.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// The instant the lease stops being valid.
    pub fn deadline(&self) -> Instant {
        self.shared.state.borrow().deadline
    }

    /// The validity left now; zero once expired.
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Whether an extension failed, so the lease is no longer known to be held.
    pub fn is_lost(&self) -> bool {
        self.shared.state.borrow().lost
    }

    /// What each master did when the lock was acquired.
    pub fn masters(&self) -> &[MasterReport] {
        &self.acquired
    }

    /// Extends the lease by the TTL it was acquired with; see
    /// [`extend_with`](Lease::extend_with).
    ///
    /// # Errors
    /// As for [`extend_with`](Lease::extend_with).
    ///
    /// # Cancel safety
    /// As for [`extend_with`](Lease::extend_with).
    pub async fn extend(&self) -> Result<ExtendReport, Error> {
        self.extend_with(self.shared.ttl).await
    }

    /// Sets the lock's remaining time on every master to `ttl`, where it still holds our
    /// value (or is missing, e.g. after a master restarted: it is set again, which is safe
    /// while the lease is valid because no other client can hold a quorum). Needs a
    /// quorum; the new deadline is measured from this round's own start.
    ///
    /// An expired lease is never extended: the masters are not asked.
    ///
    /// # Errors
    /// [`ErrorKind::LeaseLost`] when the lease had expired or lost before, or when no
    /// quorum confirmed the extension in time; the lease is then marked lost
    /// ([`is_lost`](Lease::is_lost)) and should be released. [`ErrorKind::InvalidOptions`]
    /// when `ttl` is too short for the drift allowance and node timeout.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the lease's deadline unchanged. Masters that had already
    /// applied the extension keep the longer TTL, which only delays other clients.
    pub async fn extend_with(&self, ttl: Duration) -> Result<ExtendReport, Error> {
        let shared = &self.shared;
        let inner = &shared.inner;
        let resource = &*shared.resource;
        let ttl = deadline::whole_millis(ttl);
        inner.config.check_ttl(ttl).map_err(|e| {
            Error::new(ErrorKind::InvalidOptions, resource).with_detail(e.to_string())
        })?;

        let before = *shared.state.borrow();
        let now = Instant::now();
        if before.lost || now >= before.deadline {
            let detail = if before.lost {
                "an earlier extension failed".to_owned()
            } else {
                format!(
                    "it expired {} ago; an expired lease is never extended",
                    human(now - before.deadline)
                )
            };
            self.mark_lost();
            return Err(Error::new(ErrorKind::LeaseLost, resource).with_detail(detail));
        }

        let op = Arc::new(Op::Extend {
            key: Arc::clone(&shared.key),
            value: Arc::clone(&shared.value),
            ttl,
        });
        let round = quorum::run(&inner.masters, op, inner.quorum, resource).await;
        let reports = round.reports(&inner.masters);
        let drift = deadline::drift(ttl, inner.config.drift_factor);
        let now = Instant::now();
        let new_deadline = deadline::deadline(round.t0, ttl, drift)
            .filter(|dl| deadline::validity_left(*dl, now, Duration::ZERO).is_some());

        match (round.decision, new_deadline) {
            (Decision::Reached, Some(deadline)) => {
                shared.state.send_modify(|s| {
                    // A concurrent failure wins: a lost lease stays lost.
                    if !s.lost {
                        s.deadline = deadline;
                    }
                });
                if self.is_lost() {
                    return Err(Error::new(ErrorKind::LeaseLost, resource)
                        .with_detail("lost while this extension was in flight")
                        .with_masters(reports));
                }
                Ok(ExtendReport {
                    deadline,
                    masters: reports,
                })
            }
            (decision, _) => {
                self.mark_lost();
                let detail = if decision == Decision::Reached {
                    "a quorum confirmed the extension too late to leave any validity"
                } else {
                    "no quorum confirmed the extension"
                };
                Err(Error::new(ErrorKind::LeaseLost, resource)
                    .with_detail(detail)
                    .with_masters(reports))
            }
        }
    }

    fn mark_lost(&self) {
        self.shared.state.send_modify(|s| s.lost = true);
    }

    /// Releases the lock on every master: compare-and-delete, so a key that expired and
    /// was taken by another client is left alone. Idempotent on the masters.
    ///
    /// Returns once enough masters confirmed that no quorum can still hold our value; the
    /// others are released in the background.
    ///
    /// # Errors
    /// [`ErrorKind::NoQuorum`] when so many masters failed that the lock may still be held
    /// on a quorum; it then expires with its TTL at the latest. Releasing a lease that
    /// already expired is not an error: the report says by how much it overran.
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the release requests already sent still run,
    /// and every key expires with its TTL at the latest.
    pub async fn release(mut self) -> Result<ReleaseReport, Error> {
        self.released = true;
        let shared = &self.shared;
        let inner = &shared.inner;
        let overrun = Instant::now()
            .checked_duration_since(self.deadline())
            .filter(|d| !d.is_zero());
        let op = Arc::new(Op::release(&inner.config, &shared.key, &shared.value));
        let n = inner.masters.len();
        // Cleared on n - quorum + 1 masters: at most quorum - 1 can still hold our value.
        let need = n - inner.quorum + 1;
        let round = quorum::run(&inner.masters, op, need, &shared.resource).await;
        self.mark_lost();
        let masters = round.reports(&inner.masters);
        if round.decision == Decision::Reached || overrun.is_some() {
            return Ok(ReleaseReport { masters, overrun });
        }
        let failed = round
            .outcomes
            .iter()
            .filter(|o| matches!(o, MasterOutcome::Failed(_) | MasterOutcome::Pending))
            .count();
        Err(Error::new(ErrorKind::NoQuorum, &*shared.resource)
            .with_detail(format!(
                "{failed} of {n} masters could not be reached, so the lock may stay held until its TTL runs out"
            ))
            .with_masters(masters))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let shared = &self.shared;
        release_in_background(
            &shared.inner,
            shared.inner.masters.clone(),
            &shared.key,
            &shared.value,
        );
    }
}
