//! The lease: proof of holding a lock until its deadline, the signal that it is lost, and
//! the watchdog that extends it (docs/design.md §4, §5). The rules are documented on
//! [`Lease`] for users.
//!
//! Layer: above the core and the round, below the acquire engine and the facades
//! (docs/design.md §10); it must not use them.

mod handle;
mod reentry;
mod rounds;
mod watchdog;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::core::Inner;
use crate::deadline;
use crate::error::{Error, ErrorKind, MasterOutcome, MasterReport, human};
use crate::fencing::FencingToken;
use crate::held::Claim;
use crate::master::{Op, Reply};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::quorum::{self, Decision};
use crate::{scripts, telemetry};

pub use reentry::Reentry;
pub(crate) use watchdog::Watchdog;

/// Why a lease is lost; see [`Lease`] for the exact moments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The safety point (`deadline - safety_margin`) passed without a successful extension.
    Expired,
    /// An extension was refused or did not reach a quorum in time.
    ExtendFailed,
    /// The watchdog reached the configured cap on total hold time.
    MaxHold,
    /// The lease was released or dropped.
    Released,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its safety point passed without a successful extension",
            LostReason::ExtendFailed => "an extension did not reach a quorum",
            LostReason::MaxHold => "it reached its maximum hold time",
            LostReason::Released => "it was released",
        })
    }
}

impl LostReason {
    /// The `reason` label of `redquorum_leases_lost_total`; `None` for a release, which is
    /// no loss.
    fn metric_label(self) -> Option<&'static str> {
        match self {
            LostReason::Expired => Some("expired"),
            LostReason::ExtendFailed => Some("extend_failed"),
            LostReason::MaxHold => Some("max_hold"),
            LostReason::Released => None,
        }
    }
}

impl fmt::Display for LeaseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseMode::Exclusive => "exclusive",
            LeaseMode::Read => "read",
            LeaseMode::Write => "write",
            LeaseMode::Permits => "permits",
        })
    }
}

/// A lease's validity as last established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub(crate) deadline: Instant,
    pub(crate) lost: Option<LostReason>,
}

/// What a lease holds: the exclusive lock of one resource, a read or a write lock, or
/// permits of a semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseMode {
    /// The exclusive lock of one resource or of several
    /// ([`Redlock::acquire`](crate::Redlock::acquire),
    /// [`Redlock::acquire_many`](crate::Redlock::acquire_many)).
    Exclusive,
    /// A read lock: shared with other readers.
    Read,
    /// A write lock: exclusive of readers and writers.
    Write,
    /// Permits of a semaphore.
    Permits,
}

/// One key a lease holds on the masters (docs/design.md §4, §14).
#[derive(Debug, Clone)]
pub(crate) struct LeaseKey {
    /// The resource's name, without the key prefix.
    pub(crate) resource: Arc<str>,
    /// The key on the masters.
    pub(crate) key: Arc<str>,
    /// Where the release of this key is announced to waiters.
    pub(crate) channel: Arc<str>,
    /// This key's fencing token, when acquired with fencing.
    pub(crate) token: Option<FencingToken>,
}

/// The name of a lease over `resources` in errors and traces: the names joined, or for a
/// long list the first three and the count.
pub(crate) fn list_name(resources: &[&str]) -> String {
    const SHORT: usize = 4;
    const LONG_NAMES: usize = 200;
    let joined_len: usize = resources.iter().map(|r| r.len() + 2).sum();
    match resources {
        few if few.len() <= SHORT && joined_len <= LONG_NAMES => few.join(", "),
        many => {
            let first: Vec<&str> = many.iter().take(3).copied().collect();
            format!("{}, … ({} in all)", first.join(", "), many.len())
        }
    }
}

/// What every handle to one lease shares.
pub(crate) struct LeaseShared {
    pub(crate) inner: Arc<Inner>,
    /// Every key the lease holds, never empty; sorted by key for several.
    pub(crate) keys: Arc<[LeaseKey]>,
    pub(crate) mode: LeaseMode,
    /// The lease's name in errors and traces: its resource, or its resources joined.
    pub(crate) name: Arc<str>,
    /// One value for every key of the lease.
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) safety_margin: Duration,
    /// The watchdog, once started: a downgraded lease starts it again.
    watchdog: std::sync::OnceLock<Watchdog>,
    pub(crate) state: watch::Sender<LeaseState>,
    /// Serialises extend and release, so that no extension reaches a master after the
    /// release did (docs/design.md §4, I8). Holds "released".
    ops: tokio::sync::Mutex<bool>,
}

/// The read-only view of a lease, plus extension: what a critical section needs.
///
/// Cheap to clone; it does not keep the lock held ([`Lease`] does). A [`Lease`] derefs to
/// its handle, and [`Redlock::with_lock`](crate::Redlock::with_lock) passes one to the
/// critical section.
#[derive(Clone)]
pub struct LeaseHandle {
    shared: Arc<LeaseShared>,
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("LeaseHandle")
            .field("resource", &self.shared.name)
            .field(
                "remaining",
                &state.deadline.saturating_duration_since(Instant::now()),
            )
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

/// Resolves when a lease is lost; from [`LeaseHandle::lost`].
#[must_use = "futures do nothing unless polled"]
pub struct Lost {
    inner: BoxFuture<'static, LostReason>,
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lost").finish_non_exhaustive()
    }
}

impl Future for Lost {
    type Output = LostReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LostReason> {
        self.inner.as_mut().poll(cx)
    }
}

/// A held lock, valid until its [`deadline`](LeaseHandle::deadline).
///
/// Release it with [`release`](Lease::release). Dropping it without releasing releases it
/// in the background when a tokio runtime is running (and otherwise lets it expire with its
/// TTL); `Drop` never blocks. It derefs to its [`LeaseHandle`] for the queries
/// (`remaining`, `is_lost`, `lost`, …) and for `extend`.
///
/// # Validity and loss
/// A lease is valid until its *deadline*, computed from the instant before the acquire
/// (or last successful extend) round sent its first request: `t0 + ttl - drift`. Every
/// master's copy of the key outlives the deadline by at least the drift allowance.
///
/// The lease is **lost** at the first of these moments, measured on the client's
/// monotonic clock (`tokio::time::Instant`):
/// - the *safety point*, `deadline - safety_margin`, passes without a successful extension
///   ([`LostReason::Expired`]);
/// - an extension is refused or does not reach a quorum ([`LostReason::ExtendFailed`]);
/// - the watchdog reaches the hold-time cap `max_hold` ([`LostReason::MaxHold`]);
/// - the lease is released or dropped ([`LostReason::Released`]).
///
/// Loss is signalled at the safety point, *before* the keys can expire on the masters, so
/// that work aborted on the signal stops while the lock is still held. [`lost`](LeaseHandle::lost)
/// resolves at that moment and [`is_lost`](LeaseHandle::is_lost) says so synchronously.
///
/// # Several keys
/// A lease over several resources ([`Redlock::acquire_many`](crate::Redlock::acquire_many))
/// is extended and released with one request per master over all its keys. An extension
/// counts on a master only if it extended **every** key there: a master where any key is
/// missing or held by another value extends none of them and counts as refusing, so the
/// lease's new deadline rests only on masters that hold all of its keys (docs/design.md
/// §14, I14). The release deletes each key that still holds the lease's value.
///
/// # Watchdog
/// With the watchdog on (`Builder::watchdog`, [`AcquireOptions::watchdog`](crate::AcquireOptions::watchdog),
/// and always in [`Redlock::with_lock`](crate::Redlock::with_lock)), a background task
/// extends the lease every `extend_interval` (a third of the TTL by default), each
/// extension a quorum round with its own deadline, scheduled early enough to finish before
/// the safety point. It holds only a weak reference: it never keeps a lease alive, and it
/// stops on release, on drop, and on loss. It never extends a lease past its deadline.
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
    handle: LeaseHandle,
    acquired: Vec<MasterReport>,
    released: bool,
    /// This lease's entry in its client's held keys (docs/design.md §14), until it is
    /// released or dropped: a loss alone leaves it, since the keys may still be held.
    claim: Option<Claim>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared().state();
        f.debug_struct("Lease")
            .field("resource", &self.shared().name)
            .field(
                "remaining",
                &state.deadline.saturating_duration_since(Instant::now()),
            )
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

impl Deref for Lease {
    type Target = LeaseHandle;

    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

/// The outcome of a successful [`LeaseHandle::extend`].
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

/// How a new lease is set up.
pub(crate) struct LeaseParams {
    /// Every key, at least one.
    pub(crate) keys: Vec<LeaseKey>,
    pub(crate) mode: LeaseMode,
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) deadline: Instant,
    pub(crate) safety_margin: Duration,
    pub(crate) acquired: Vec<MasterReport>,
}

impl Lease {
    pub(crate) fn new(inner: Arc<Inner>, params: LeaseParams) -> Self {
        let LeaseParams {
            keys,
            mode,
            value,
            ttl,
            deadline,
            safety_margin,
            acquired,
        } = params;
        let name: Arc<str> = match &*keys {
            [one] => Arc::clone(&one.resource),
            keys => list_name(&keys.iter().map(|k| &*k.resource).collect::<Vec<_>>()).into(),
        };
        let (state, _) = watch::channel(LeaseState {
            deadline,
            lost: None,
        });
        Self {
            handle: LeaseHandle {
                shared: Arc::new(LeaseShared {
                    inner,
                    keys: keys.into(),
                    mode,
                    name,
                    value,
                    ttl,
                    safety_margin,
                    watchdog: std::sync::OnceLock::new(),
                    state,
                    ops: tokio::sync::Mutex::new(false),
                }),
            },
            acquired,
            released: false,
            claim: None,
        }
    }

    /// Makes `claim` this lease's entry in its client's held keys, dropped when the lease
    /// is released or dropped.
    pub(crate) fn with_claim(mut self, claim: Claim) -> Self {
        self.claim = Some(claim);
        self
    }

    fn shared(&self) -> &Arc<LeaseShared> {
        &self.handle.shared
    }

    /// Starts the watchdog for this lease.
    pub(crate) fn start_watchdog(&self, watchdog: Watchdog) {
        if self.shared().watchdog.set(watchdog).is_ok() {
            watchdog.spawn(self.shared());
        }
    }

    /// Turns this write lease of a read-write lock into a read lease, in place, in one
    /// round (docs/design.md §16): on each master where the writer key still holds this
    /// lease's value, it becomes this lease's reader key with the writer key's remaining
    /// expiry, and waiting readers are notified. Needs a quorum. The read lease keeps the
    /// deadline, the fencing token and the watchdog (if one runs). Handles taken before
    /// ([`Lease::handle`]) report the write lease lost ([`LostReason::Released`]); take a
    /// new one to follow the read lease.
    ///
    /// There is no upgrade: a reader that wants to write releases its read lease and
    /// acquires a write lease (two readers upgrading at once would each wait for the
    /// other).
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// let config = client.rwlock("config");
    /// let mut lease = config.write().await?;
    /// // ... publish the new configuration ...
    /// lease.downgrade().await?; // readers may come in; no writer can
    /// // ... check what was published ...
    /// lease.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidOptions`] for a lease that is not a write lease (a read lease,
    ///   a mutex or semaphore lease), and [`ErrorKind::NoRuntime`] outside a tokio
    ///   runtime: nothing is sent to the masters, and the lease is left as it was, still
    ///   held. Check [`LeaseHandle::mode`] first.
    /// - [`ErrorKind::LeaseLost`] when the lease was lost or released before, or when no
    ///   quorum converted it with validity left: the lease is then lost
    ///   ([`is_lost`](LeaseHandle::is_lost)), and both its writer and reader keys are
    ///   released on every master in the background; releasing or dropping it does
    ///   nothing more.
    ///
    /// # Cancel safety
    /// The round runs in a background task from the first poll: dropping the future leaves
    /// this lease lost, and drops the read lease the round would have made, which releases
    /// it in the background (a failed downgrade releases both forms), so nothing stays held
    /// beyond its TTL.
    pub async fn downgrade(&mut self) -> Result<(), Error> {
        let shared = Arc::clone(self.shared());
        let resource = &*shared.name;
        if shared.mode != LeaseMode::Write {
            // Nothing is sent: the lease stays as it was.
            return Err(
                Error::new(ErrorKind::InvalidOptions, resource).with_detail(format!(
                    "only a write lease of a read-write lock can be downgraded, and this is \
                 a{} {} lease; nothing was sent or released, and the lease is still held \
                 (check LeaseHandle::mode first)",
                    if shared.mode == LeaseMode::Exclusive {
                        "n"
                    } else {
                        ""
                    },
                    shared.mode
                )),
            );
        }
        let no_runtime = || {
            Error::new(ErrorKind::NoRuntime, resource)
                .with_detail("downgrade must be called inside a tokio runtime")
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(no_runtime());
        }
        // From here this lease's drop must not release: the task owns both forms.
        self.released = true;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = Arc::clone(&shared);
        let spawned = shared.inner.spawn(async move {
            let _ = tx.send(task.downgrade().await);
        });
        if !spawned {
            self.released = false;
            return Err(no_runtime());
        }
        match rx.await {
            // The write lease, released already, is dropped without a release.
            Ok(Ok(read)) => {
                *self = read;
                Ok(())
            }
            Ok(Err(error)) => Err(error),
            Err(_) => {
                // The task died with the runtime before deciding: whatever it did, the
                // keys are nobody's to extend now, so the lease reports itself lost (they
                // expire with their TTL).
                shared.mark_lost(LostReason::Released);
                Err(Error::new(ErrorKind::LeaseLost, resource)
                    .with_detail("the runtime stopped before the downgrade was decided"))
            }
        }
    }

    /// A handle to this lease, for a critical section or a watcher.
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// What each master did when the lock was acquired.
    pub fn masters(&self) -> &[MasterReport] {
        &self.acquired
    }

    /// Releases the lock on every master: compare-and-delete, so a key that expired and
    /// was taken by another client is left alone. Idempotent on the masters; stops the
    /// watchdog; the lease counts as lost ([`LostReason::Released`]) from here on.
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
    /// The lease counts as released (lost, with the watchdog stopped) from the first poll.
    /// The release round runs in the caller's future; dropping the future before the round
    /// is decided leaves the round to a background task, so that every master is still
    /// asked: it only stops waiting for the report.
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) waits for that task. A future kept
    /// but no longer polled holds its round back until it is polled again or dropped, as
    /// any future does: poll it to the end or drop it.
    pub async fn release(mut self) -> Result<ReleaseReport, Error> {
        self.released = true;
        // Released from here on, for the client too: it may acquire the resource again.
        self.claim = None;
        let shared = Arc::clone(self.shared());
        let overrun = Instant::now()
            .checked_duration_since(shared.state().deadline)
            .filter(|d| !d.is_zero());
        let inner = &shared.inner;
        // The planted bug (`--cfg redquorum_mutants`): nothing is marked until the mutex is ours,
        // and the round runs in the caller's future, so dropping it may send nothing.
        #[cfg(redquorum_mutants)]
        let inline =
            match crate::mutants::planted(&inner.owner.client).is(Mutant::ReleaseMarksDoneFirst) {
                true => Some(shared.release().await),
                false => None,
            };
        #[cfg(not(redquorum_mutants))]
        let inline = None;
        let released = match inline {
            Some(released) => released,
            None => {
                if tokio::runtime::Handle::try_current().is_err() {
                    // Nothing is sent: the lease still counts as released.
                    shared.mark_released();
                    return Err(Error::new(ErrorKind::NoRuntime, &*shared.name).with_detail(
                        "release must be called inside a tokio runtime; the lock expires \
                             with its TTL",
                    ));
                }
                // The round runs in this future, with no task hop before or after it; a
                // future dropped before the round was decided leaves it to a background
                // task (this fallback before the round starts, `release`'s own guard
                // during it).
                shared.mark_released();
                let fallback = Fallback::new({
                    let shared = Arc::clone(&shared);
                    move || {
                        let _ = shared.spawn_release();
                    }
                });
                let round = shared.release().await;
                fallback.disarm();
                round
            }
        };
        let Some(round) = released else {
            return Ok(ReleaseReport {
                masters: Vec::new(),
                overrun,
            });
        };
        let masters = round.reports(&inner.masters);
        if round.decision == Decision::Reached || overrun.is_some() {
            return Ok(ReleaseReport { masters, overrun });
        }
        let n = inner.masters.len();
        let count = |pending: bool| {
            round
                .outcomes
                .iter()
                .filter(|o| match o {
                    MasterOutcome::Pending => pending,
                    MasterOutcome::Failed(_) => !pending,
                    _ => false,
                })
                .count()
        };
        // A master still pending when the failure was certain may have released: it is
        // told apart from those that failed.
        let unanswered = match count(true) {
            0 => String::new(),
            pending => format!(" ({pending} more had not answered yet)"),
        };
        Err(Error::new(ErrorKind::NoQuorum, &*shared.name)
            .with_detail(format!(
                "{} of {n} masters could not be reached{unanswered}, so the lock may stay \
                 held until its TTL runs out",
                count(false)
            ))
            .with_masters(masters))
    }
}

/// Runs its action when dropped before [`disarm`](Self::disarm): what a release future
/// leaves to a background task when it is dropped before its round is decided.
struct Fallback<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Fallback<F> {
    fn new(action: F) -> Self {
        Self(Some(action))
    }

    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for Fallback<F> {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let _ = self.shared().release_in_background();
    }
}
