//! Re-entry scoped to the lease (docs/design.md §14, Re-entry): a child guard shares its
//! lease's deadline, token, loss signal and watchdog, and never talks to a master. Only
//! the outermost guard, the [`Lease`], releases the lock.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Lease, LeaseHandle, LeaseShared};

/// A re-entered lease: a child guard of a [`Lease`], from [`Lease::reenter`] or
/// [`Reentry::reenter`].
///
/// It is proof that its lease is held, exactly as long as the lease is: it shares the
/// lease's deadline, fencing token, loss signal and watchdog (nothing new runs, and no
/// master is asked anything when it is made). It derefs to the lease's [`LeaseHandle`]
/// for `remaining`, `is_lost`, `lost`, `fencing_token`, ….
///
/// Only the outermost guard, the [`Lease`], releases the lock. Dropping or
/// [`release`](Reentry::release)-ing a child releases nothing; once the lease is released,
/// dropped or lost, every child reports [`is_lost`](LeaseHandle::is_lost) with the lease's
/// [`LostReason`](crate::LostReason), however many children are still alive. A child that
/// outlives its lease therefore proves nothing: check it as you would the lease.
///
/// # Example
/// ```no_run
/// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
/// use redquorum::Reentry;
///
/// // A helper that needs the lock, called with it held: it re-enters, no round trip.
/// fn post(entry: Reentry) {
///     assert!(!entry.is_lost(), "the lock must be held here");
///     // ... work under the lock ...
///     entry.release(); // releases nothing: the caller's lease still holds the lock
/// }
///
/// let lease = client.acquire("ledger").await?;
/// post(lease.reenter());
/// // Acquiring "ledger" again here would fail at once with ErrorKind::AlreadyHeld.
/// lease.release().await?; // the outermost guard releases the lock
/// # Ok(())
/// # }
/// ```
#[must_use = "a re-entry guard proves the lease is held only while it is checked"]
#[derive(Clone)]
pub struct Reentry {
    handle: LeaseHandle,
    /// How deep: 1 for a child of the lease itself.
    depth: usize,
}

impl Reentry {
    fn child_of(shared: &Arc<LeaseShared>, depth: usize) -> Self {
        Self {
            handle: LeaseHandle {
                shared: Arc::clone(shared),
            },
            depth,
        }
    }

    /// Re-enters again: another child guard of the same lease (no round trip).
    pub fn reenter(&self) -> Reentry {
        Self::child_of(&self.handle.shared, self.depth + 1)
    }

    /// Leaves this re-entry. It contacts no master and does not release the lock, which
    /// its [`Lease`] holds until that is released or dropped; the same as dropping it,
    /// said out loud.
    pub fn release(self) {
        drop(self);
    }

    /// How deeply this guard is nested: 1 for [`Lease::reenter`], one more for each
    /// [`Reentry::reenter`] below it.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

impl Deref for Reentry {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl fmt::Debug for Reentry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.handle.shared.state();
        f.debug_struct("Reentry")
            .field("resource", &self.handle.shared.name)
            .field("depth", &self.depth)
            .field(
                "remaining",
                &state.deadline.saturating_duration_since(Instant::now()),
            )
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Re-enters this lease: a child guard that shares its deadline, fencing token, loss
    /// signal and watchdog. No master is asked anything, so it costs no round trip and
    /// cannot fail; see [`Reentry`].
    ///
    /// This is how code that already holds a lock takes it again. Acquiring the same
    /// resource with the client instead fails at once with
    /// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld): it would otherwise wait
    /// for this lease to run out. Re-entry is a property of the lease, not of the masters:
    /// they hold one key for it, whose time only the lease's extensions change
    /// (docs/design.md §14).
    ///
    /// A [`LeaseHandle`] (as [`Redlock::with_lock`](crate::Redlock::with_lock) passes to
    /// its work) cannot re-enter: it does not own the lock, and a handle already is the
    /// shared view that a child guard would be; pass it (or a clone) down instead.
    pub fn reenter(&self) -> Reentry {
        #[cfg(redquorum_mutants)]
        if crate::mutants::planted(&self.handle.shared.inner.owner.client)
            .is(crate::mutants::Mutant::ReentryCounter)
        {
            self.handle.shared.counted_reentry();
        }
        Reentry::child_of(&self.handle.shared, 1)
    }
}

#[cfg(redquorum_mutants)]
impl LeaseShared {
    /// The planted bug `Mutant::ReentryCounter`: re-entry as a per-master hold counter
    /// would do it. One round re-sets the key with our value and a fresh TTL on every
    /// master where it is missing or ours, and any one master's success counts: the
    /// lease's deadline moves to `t0 + ttl - drift` and a loss by expiry is forgotten.
    fn counted_reentry(self: &Arc<Self>) {
        use crate::master::Op;
        use crate::quorum;

        let shared = Arc::clone(self);
        let _ = self.inner.spawn(async move {
            if shared.state().lost == Some(super::LostReason::Released) {
                return;
            }
            let inner = &shared.inner;
            let t0 = tokio::time::Instant::now();
            let mut counted = false;
            for key in shared.keys.iter() {
                let op = Arc::new(Op::ExtendRecreating {
                    key: Arc::clone(&key.key),
                    value: Arc::clone(&shared.value),
                    ttl: shared.ttl,
                    epoch: inner.config.quarantine,
                });
                let round =
                    quorum::run(&inner.masters, op, 1, shared.traced(), inner.bounds(None)).await;
                counted |= round.decision == quorum::Decision::Reached;
            }
            if !counted {
                return;
            }
            let Some(deadline) = inner.lease_deadline(t0, shared.ttl) else {
                return;
            };
            shared.state.send_modify(|s| {
                if s.lost != Some(super::LostReason::Released) {
                    s.deadline = deadline;
                    s.lost = None;
                }
            });
        });
    }
}
