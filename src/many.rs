//! Several resources locked at once, all or none, as one lease (docs/design.md §14, I14
//! and I15): [`Redlock::acquire_many`], [`Redlock::acquire_many_with`],
//! [`Redlock::with_lock_many`].
//!
//! A facade over the acquire engine: its target is the sorted keys of every resource
//! (`Kind::Many`), which each master sets all or none. Layer: a facade, beside `lock`,
//! `semaphore` and `rwlock`, none of which it uses (docs/design.md §10).

use std::future::Future;

use crate::client::Redlock;
use crate::core::check_runtime;
use crate::engine::{self, AcquireOptions, Plan, Target};
use crate::error::Error;
use crate::lease::{Lease, LeaseHandle};

impl Redlock {
    /// Acquires the locks on every resource of `resources` at once, all or none
    /// (docs/design.md §14): one lease over all of them, valid, extended and released as
    /// the lock of one resource is.
    ///
    /// Each master runs one script over all the keys, sorted, that sets every key or none;
    /// its vote counts only if it set them all. An attempt that does not win a quorum
    /// releases whatever it set, everywhere, before waiting: no caller ever holds some of
    /// the resources while waiting for the others, so callers that list the same resources
    /// in different orders cannot deadlock. Waiting works as for
    /// [`acquire`](Redlock::acquire): woken by the release of any key that was held, or
    /// when the longest-held of them expires.
    ///
    /// The resources lock the same keys as [`acquire`](Redlock::acquire) of each one: a
    /// client holding `"x"` alone keeps out one that asks for `["x", "y"]`, and the
    /// reverse. With fencing, each resource gets its own token
    /// ([`fencing_tokens`](LeaseHandle::fencing_tokens)), from its own counter.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// // Move stock between two warehouses: both are locked, or neither.
    /// let lease = client.acquire_many(&["stock:paris", "stock:lyon"]).await?;
    /// assert_eq!(lease.resources().collect::<Vec<_>>(), ["stock:lyon", "stock:paris"]);
    /// // ... the transfer, finished well within lease.remaining() ...
    /// lease.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire); [`ErrorKind::Contended`](crate::ErrorKind::Contended) when any of the
    /// resources is held on too many masters. Before any master is asked,
    /// [`ErrorKind::InvalidResource`](crate::ErrorKind::InvalidResource) for an empty list, a resource listed twice, more
    /// than [`MAX_RESOURCES`](crate::limits::MAX_RESOURCES) resources, or a name that
    /// [`acquire`](Redlock::acquire) refuses.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire): dropping the future releases every key of
    /// the attempt in flight on every master, in the background.
    pub async fn acquire_many(&self, resources: &[&str]) -> Result<Lease, Error> {
        self.acquire_many_with(resources, &AcquireOptions::default())
            .await
    }

    /// Acquires the locks on every resource of `resources` at once with per-call options;
    /// see [`acquire_many`](Redlock::acquire_many) and
    /// [`acquire_with`](Redlock::acquire_with).
    ///
    /// # Errors
    /// As for [`acquire_many`](Redlock::acquire_many) and
    /// [`acquire_with`](Redlock::acquire_with); [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions) for
    /// [`AcquireOptions::fair`], before any master is asked: only the lock of one resource
    /// is fair.
    ///
    /// # Cancel safety
    /// As for [`acquire_many`](Redlock::acquire_many).
    pub async fn acquire_many_with(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let inner = &self.inner;
        engine::acquire(inner, || {
            let target = Target::many(&inner.config, resources)?;
            check_runtime(&target.name)?;
            let plan = Plan::new(inner, &target.name, options)?;
            plan.refuse_fair(&target.name, "acquire_many")?;
            Ok((target, plan))
        })
        .await
    }

    /// Runs `work` while holding the locks on every resource of `resources`, and releases
    /// them afterwards: [`with_lock`](Redlock::with_lock) over
    /// [`acquire_many_with`](Redlock::acquire_many_with). The watchdog extends every key
    /// while `work` runs; `work` is dropped the moment the lease is lost.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::AcquireOptions;
    ///
    /// let options = AcquireOptions::new().wait_timeout("5s");
    /// let moved = client
    ///     .with_lock_many(&["account:1", "account:2"], &options, |lease| async move {
    ///         // Debit one account, credit the other: both are ours until this returns.
    ///         lease.resources().count()
    ///     })
    ///     .await?;
    /// assert_eq!(moved, 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Whatever [`acquire_many_with`](Redlock::acquire_many_with) returns when the locks
    /// cannot be taken, and [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lease is lost while `work`
    /// runs.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases every key in the background.
    pub async fn with_lock_many<F, Fut, T>(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().watchdog(true);
        let lease = self.acquire_many_with(resources, &options).await?;
        let name = lease.name().to_owned();
        engine::hold(&self.inner, lease, &name, work).await
    }
}
