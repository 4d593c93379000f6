//! The read-write lock: many readers or one writer, each mode on a quorum of masters
//! (docs/design.md §16, I17).
//!
//! A facade over the acquire engine: its targets are the lock's key in one mode
//! (`Kind::Read`, or `Kind::Write` with the call's intent). Layer: a facade, beside
//! `lock`, `many` and `semaphore`, none of which it uses (docs/design.md §10).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::client::Redlock;
use crate::core::{check_resource, check_runtime, random_value};
use crate::engine::{self, AcquireOptions, Intent, Kind, Plan, Target};
use crate::error::Error;
use crate::lease::{Lease, LeaseHandle};
use crate::telemetry;

/// A read-write lock on one name: any number of readers at once, or one writer alone.
///
/// Made by [`Redlock::rwlock`]; cheap to clone. Each mode is granted by a quorum of
/// masters, with the validity, extension, watchdog, waiting and fencing rules of the
/// mutex: a [`Lease`] of mode [`LeaseMode::Read`](crate::LeaseMode::Read) or
/// [`LeaseMode::Write`](crate::LeaseMode::Write). On each master a reader has a key of
/// its own, with its own expiry, so a reader that dies frees its place within its TTL
/// whatever the others do.
///
/// A writer that waits for readers to leave sets a short-lived *intent* that keeps new
/// readers out, so a stream of overlapping readers cannot starve it; readers that hold
/// the lock keep it until they release it. At most
/// [`MAX_READERS`](crate::limits::MAX_READERS) readers hold one lock at once; more
/// wait. A write lease can be turned into a read lease ([`Lease::downgrade`]); a read
/// lease cannot be upgraded (release it, then write).
///
/// The name is a lock name of its own kind: a mutex on the same name
/// ([`Redlock::acquire`], or the name in a [`Redlock::acquire_many`] list) is refused with
/// [`ErrorKind::WrongKind`](crate::ErrorKind::WrongKind) while readers or a writer hold it, and so is this lock on a
/// name a mutex holds.
///
/// ```no_run
/// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
/// use redquorum::AcquireOptions;
///
/// let prices = client.rwlock("prices");
/// // Many readers at once:
/// let read = prices.read().await?;
/// // ... read the prices, well within read.remaining() ...
/// read.release().await?;
///
/// // One writer, with the watchdog extending its lease while the work runs:
/// prices
///     .with_write(&AcquireOptions::new(), |lease| async move {
///         // ... rewrite the prices; lease.fencing_token() orders writes at the storage ...
///         let _ = lease;
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Redlock,
    name: Arc<str>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.client.inner.config.trace_resource_names;
        f.debug_struct("RwLock")
            .field("name", &telemetry::resource(&self.name, shown).to_string())
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A read-write lock on `name`; see [`RwLock`]. Nothing is sent to the masters, and
    /// the name is checked when the lock is first acquired (as a resource name is).
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.into(),
        }
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Acquires a read lease with the client's defaults; see [`read_with`](RwLock::read_with).
    ///
    /// # Errors
    /// As for [`read_with`](RwLock::read_with).
    ///
    /// # Cancel safety
    /// As for [`read_with`](RwLock::read_with).
    pub async fn read(&self) -> Result<Lease, Error> {
        self.read_with(&AcquireOptions::default()).await
    }

    /// Acquires a read lease: granted on each master where no writer holds the lock and
    /// no waiting writer's intent is live, by a quorum of them. Waits as
    /// [`Redlock::acquire_with`] does (woken by the writer's release notice, or when its
    /// key or intent expires).
    ///
    /// # Errors
    /// As for [`Redlock::acquire_with`], among them [`ErrorKind::WaitTimeout`](crate::ErrorKind::WaitTimeout) when a
    /// writer kept the lock past the wait budget, [`ErrorKind::WrongKind`](crate::ErrorKind::WrongKind) when the name
    /// holds a mutex, and [`ErrorKind::InvalidResource`](crate::ErrorKind::InvalidResource) for a name that cannot be a
    /// lock's.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no reader key behind beyond its TTL: the attempt in
    /// flight is released on every master in the background.
    pub async fn read_with(&self, options: &AcquireOptions) -> Result<Lease, Error> {
        self.acquire(options, |_| Kind::Read).await
    }

    /// Acquires a write lease with the client's defaults; see
    /// [`write_with`](RwLock::write_with).
    ///
    /// # Errors
    /// As for [`write_with`](RwLock::write_with).
    ///
    /// # Cancel safety
    /// As for [`write_with`](RwLock::write_with).
    pub async fn write(&self) -> Result<Lease, Error> {
        self.write_with(&AcquireOptions::default()).await
    }

    /// Acquires a write lease: granted on each master where neither a writer nor a live
    /// reader holds the lock, by a quorum of them. While readers hold it, each attempt sets
    /// the writer's intent (for one TTL), which keeps new readers out; the waiting writer
    /// tries again at least every third of its TTL, so the intent does not lapse while it
    /// waits. The intent ends with the call, on every master: once granted, the writer
    /// clears it in the background where the granting attempt did not (masters that
    /// refused it or had not answered it yet); a writer that gives up or is dropped
    /// clears it everywhere. A write granted by every master at once sends nothing more.
    ///
    /// # Errors
    /// As for [`read_with`](RwLock::read_with).
    ///
    /// # Cancel safety
    /// Dropping the future leaves no writer key behind beyond its TTL, and clears the
    /// writer's intent in the background (it expires within one TTL otherwise).
    pub async fn write_with(&self, options: &AcquireOptions) -> Result<Lease, Error> {
        // A writer's intent (docs/design.md §16): one id for the whole call, refreshed by
        // each attempt while readers hold the lock.
        let intent = |plan: &Plan| {
            Kind::Write(Intent {
                id: random_value().into(),
                ttl: plan.ttl,
            })
        };
        self.acquire(options, intent).await
    }

    /// Runs `work` holding a read lease, released afterwards; as
    /// [`Redlock::with_lock`] does for a mutex (watchdog on, `work` dropped when the lease
    /// is lost).
    ///
    /// # Errors
    /// As for [`read_with`](RwLock::read_with), and [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the
    /// lease is lost while `work` runs.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lease in the background.
    pub async fn with_read<F, Fut, T>(&self, options: &AcquireOptions, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.read_with(&options.clone().watchdog(true)).await?;
        engine::hold(&self.client.inner, lease, &self.name, work).await
    }

    /// Runs `work` holding a write lease, released afterwards; see
    /// [`with_read`](RwLock::with_read).
    ///
    /// # Errors
    /// As for [`with_read`](RwLock::with_read).
    ///
    /// # Cancel safety
    /// As for [`with_read`](RwLock::with_read).
    pub async fn with_write<F, Fut, T>(&self, options: &AcquireOptions, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.write_with(&options.clone().watchdog(true)).await?;
        engine::hold(&self.client.inner, lease, &self.name, work).await
    }

    /// Acquires the lock in the mode `kind` gives for the call's plan.
    async fn acquire(
        &self,
        options: &AcquireOptions,
        kind: impl FnOnce(&Plan) -> Kind,
    ) -> Result<Lease, Error> {
        let inner = &self.client.inner;
        let name = &*self.name;
        engine::acquire(inner, || {
            check_runtime(name)?;
            check_resource(&inner.config.key_prefix, name)?;
            let plan = Plan::new(inner, name, options)?;
            plan.refuse_fair(name, "read-write locks")?;
            let kind = kind(&plan);
            Ok((Target::one(&inner.config, name, kind), plan))
        })
        .await
    }
}
