//! The semaphore (docs/design.md §15, I16): at most `limit` permits of one name held at
//! any instant, each permit an ordinary quorum mutex over one of `limit` slots.
//!
//! Taking k permits is an all-or-none acquisition of k slots chosen free: one script per
//! master (`semaphore.lua`) sets every chosen slot or none, and a master's vote counts
//! only if it set them all. The semaphore's limit is stored on the masters and compared
//! by every acquisition, so clients that disagree on it are refused instead of taking
//! slots the others do not know.
//!
//! A facade over the acquire engine: its target is the slots it asks for (`Kind::Slots`,
//! whose choice of slots lives with the target); `replace_limit` is its own round. Layer:
//! a facade, beside `lock`, `many` and `rwlock`, none of which it uses (docs/design.md
//! §10).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::client::Redlock;
use crate::config::limits::MAX_PERMITS;
use crate::core::{check_resource, check_runtime, random_value};
use crate::engine::{self, AcquireOptions, Plan, SlotSet, Slots, Target, refusal};
use crate::error::{Error, ErrorKind, MasterOutcome};
use crate::lease::{Lease, LeaseHandle};
use crate::master::{Op, PermitsOp};
use crate::quorum;
use crate::telemetry;

/// A counting semaphore over the client's masters: at most [`limit`](Semaphore::limit)
/// permits are held at any instant, by all clients together.
///
/// Each permit is a slot, an ordinary quorum lock with its own expiry, extension, release
/// and fencing token; taking `k` permits takes `k` free slots, all or none. The lease it
/// returns is released, extended and watched like any other [`Lease`];
/// [`LeaseHandle::permits`] names the slots it holds.
///
/// The limit is stored with the semaphore on each master, written by the first
/// acquisition that finds none there, and kept: a master refuses every client that gives
/// another limit ([`ErrorKind::LimitMismatch`]), whether permits are held or not. Give
/// every client of a semaphore the same limit; change it with
/// [`replace_limit`](Semaphore::replace_limit).
///
/// Cheap to clone; made by [`Redlock::semaphore`].
///
/// ```no_run
/// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
/// // At most 4 exports run at once, across every process using these masters.
/// let exports = client.semaphore("exports", 4)?;
/// let lease = exports.acquire(1).await?;
/// println!("holding slot {:?}", lease.permits());
/// // ... export ...
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Redlock,
    shared: Arc<SlotSet>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.shared.name)
            .field("limit", &self.shared.limit)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A semaphore named `name` that lets at most `limit` permits be held at once.
    ///
    /// Makes no round trip: the limit is compared with the one the masters store at each
    /// acquisition. The name is a namespace of its own: it does not clash with a lock or
    /// a read-write lock of the same name.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidOptions`] when `limit` is zero or above
    /// [`MAX_PERMITS`](crate::limits::MAX_PERMITS); [`ErrorKind::InvalidResource`] for a
    /// name that a lock could not have either (empty, longer than
    /// [`MAX_RESOURCE_LEN`](crate::limits::MAX_RESOURCE_LEN), or in the records'
    /// namespace `redquorum:`).
    pub fn semaphore(&self, name: &str, limit: u32) -> Result<Semaphore, Error> {
        check_resource(&self.inner.config.key_prefix, name)?;
        if limit == 0 || limit > MAX_PERMITS {
            return Err(
                Error::new(ErrorKind::InvalidOptions, name).with_detail(format!(
                    "the semaphore's limit is {limit}: give it 1 to {MAX_PERMITS} \
                     (MAX_PERMITS) permits"
                )),
            );
        }
        Ok(Semaphore {
            client: self.clone(),
            shared: Arc::new(SlotSet::new(&self.inner.config.key_prefix, name, limit)),
        })
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The most permits held at once.
    pub fn limit(&self) -> u32 {
        self.shared.limit
    }

    /// Takes `permits` permits, all or none, waiting for them as
    /// [`Redlock::acquire`] waits for a lock: until they are free, within the client's
    /// wait budget.
    ///
    /// The lease holds one slot per permit ([`LeaseHandle::permits`]); its validity,
    /// extension, release and watchdog cover all of them together, and with fencing each
    /// slot has its own token ([`LeaseHandle::fencing_tokens`]).
    ///
    /// # Errors
    /// Before any master is asked: [`ErrorKind::InvalidOptions`] when `permits` is zero
    /// or above the limit, and [`ErrorKind::NoRuntime`] outside a tokio runtime. At once:
    /// [`ErrorKind::LimitMismatch`] when a master stores another limit for this semaphore
    /// (nothing is held then; see [`replace_limit`](Semaphore::replace_limit)); [`ErrorKind::AlreadyHeld`] when this
    /// client's own leases hold so many permits that `permits` more could only come from
    /// them (unless [`Waiting::own_leases`](crate::Waiting::own_leases)). Otherwise as [`Redlock::acquire`]:
    /// [`ErrorKind::Contended`] (too few free slots), [`ErrorKind::NoQuorum`],
    /// [`ErrorKind::ValidityExhausted`], [`ErrorKind::WaitTimeout`] (the wait budget ran
    /// out while the last attempt found too few free slots; with masters down it ends as
    /// [`ErrorKind::NoQuorum`] instead) and the permanent failures, each with every
    /// master's outcome in the last attempt.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no slot held beyond its TTL: the attempt in flight is
    /// released on every master in the background, and its subscription is dropped.
    pub async fn acquire(&self, permits: u32) -> Result<Lease, Error> {
        self.acquire_with(permits, &AcquireOptions::default()).await
    }

    /// Takes `permits` permits with per-call options; see [`acquire`](Semaphore::acquire).
    ///
    /// # Errors
    /// As for [`acquire`](Semaphore::acquire); also [`ErrorKind::InvalidOptions`] when the
    /// options do not fit the client, as for [`Redlock::acquire_with`].
    ///
    /// # Cancel safety
    /// As for [`acquire`](Semaphore::acquire).
    pub async fn acquire_with(
        &self,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let set = &self.shared;
        let inner = &self.client.inner;
        engine::acquire(inner, || {
            let name = &*set.name;
            check_runtime(name)?;
            if permits == 0 || permits > set.limit {
                return Err(
                    Error::new(ErrorKind::InvalidOptions, name).with_detail(format!(
                        "{permits} permits asked of a semaphore whose limit is {}: ask for 1 \
                         to {}",
                        set.limit, set.limit
                    )),
                );
            }
            // Permits only this client's own leases could free: refused before any round
            // trip.
            let own = set.own(&inner.held, permits)?;
            let plan = Plan::new(inner, name, options)?;
            plan.refuse_fair(name, "semaphores")?;
            let slots = Slots::new(Arc::clone(set), permits, own);
            Ok((Target::slots(slots), plan))
        })
        .await
    }

    /// Stores this handle's limit on the masters in place of another one: the explicit
    /// way to change a semaphore's limit (docs/design.md §15).
    ///
    /// A master keeps the limit its semaphore was first used with, and refuses every
    /// acquisition that gives another ([`ErrorKind::LimitMismatch`]), idle or not. This
    /// rewrites that record on each master where no permit is live, and leaves it on the
    /// masters where permits are held under it (those refuse, as holders of a mutex do),
    /// so the permits held under the old limit and those taken under the new one are
    /// never valid together. Run it with the new limit once the old one's holders are
    /// gone, and again until [`LimitReplaced::everywhere`]: a master that still stores
    /// the old limit refuses every acquisition under the new one. Takes no permit.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// // The exports semaphore had limit 4; from now on it has 6.
    /// let exports = client.semaphore("exports", 6)?;
    /// let replaced = exports.replace_limit().await?;
    /// if !replaced.everywhere() {
    ///     eprintln!("limit 6 stored on {} masters only: retry once permits are released",
    ///         replaced.stored_on());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::NoRuntime`] outside a tokio runtime; [`ErrorKind::ClusterMismatch`]
    /// when a master's cluster record disagrees with the client's. A master that holds
    /// permits, fails or is in restart quarantine is not an error: it is reported in
    /// [`LimitReplaced::masters`] and not counted.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the limit stored on some masters and not others, as
    /// a partial result does; running it again completes it.
    pub async fn replace_limit(&self) -> Result<LimitReplaced, Error> {
        let shape = &self.shared;
        let name = &*shape.name;
        check_runtime(name)?;
        let inner = &self.client.inner;
        let plan = Plan::new(&self.client.inner, name, &AcquireOptions::default())?;
        let op = Op::AcquirePermits(Box::new(PermitsOp {
            limit_key: Arc::clone(&shape.limit_key),
            slots: Arc::clone(&shape.slots),
            base: Arc::clone(&shape.base),
            wanted: Vec::new(),
            replace: true,
            value: random_value().into(),
            ttl: plan.ttl,
            fence: false,
            owner: Arc::clone(&plan.owner),
        }));
        let traced = telemetry::resource(name, inner.config.trace_resource_names);
        // Every master's answer is wanted, not just a quorum's.
        let n = inner.masters.len();
        let bounds = quorum::Bounds {
            every: true,
            ..inner.bounds(None)
        };
        let round = quorum::run(&inner.masters, Arc::new(op), n, traced, bounds).await;
        let reports = round.reports(&inner.masters);
        if let Some((kind, detail)) = refusal(&reports) {
            return Err(Error::new(kind, name)
                .with_detail(detail)
                .with_masters(reports));
        }
        let stored = round
            .outcomes
            .iter()
            .filter(|o| matches!(o, MasterOutcome::Granted))
            .count();
        Ok(LimitReplaced {
            limit: shape.limit,
            stored,
            quorum: inner.quorum(),
            n,
            masters: reports,
        })
    }

    /// Runs `work` while holding `permits` permits, and releases them afterwards, as
    /// [`Redlock::with_lock`] does for a lock: the watchdog extends the lease while `work`
    /// runs, and `work` is dropped at once if the lease is lost.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::AcquireOptions;
    ///
    /// let uploads = client.semaphore("uploads", 8)?;
    /// let sent = uploads
    ///     .with_permits(2, &AcquireOptions::new(), |lease| async move {
    ///         // A large upload counts twice against the limit.
    ///         lease.permits().len()
    ///     })
    ///     .await?;
    /// # let _ = sent;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Whatever [`acquire_with`](Semaphore::acquire_with) returns when the permits cannot
    /// be taken, and [`ErrorKind::LeaseLost`] when the lease is lost while `work` runs. A
    /// failure to release after `work` finished is logged, not returned.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the permits in the background.
    pub async fn with_permits<F, Fut, T>(
        &self,
        permits: u32,
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().watchdog(true);
        let lease = self.acquire_with(permits, &options).await?;
        engine::hold(&self.client.inner, lease, &self.shared.name, work).await
    }
}

/// What [`Semaphore::replace_limit`] did: on how many masters the new limit is stored.
#[derive(Debug, Clone)]
pub struct LimitReplaced {
    limit: u32,
    stored: usize,
    quorum: usize,
    n: usize,
    masters: Vec<crate::error::MasterReport>,
}

impl LimitReplaced {
    /// The limit asked for.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// How many masters store it now (those that vote: a master in restart quarantine is
    /// not counted).
    pub fn stored_on(&self) -> usize {
        self.stored
    }

    /// Whether a quorum of masters store it: permits under it can be granted once every
    /// master that answers stores it.
    pub fn took_quorum(&self) -> bool {
        self.stored >= self.quorum
    }

    /// Whether every master stores it: no master refuses acquisitions under it any more.
    pub fn everywhere(&self) -> bool {
        self.stored == self.n
    }

    /// Each master's outcome: granted where the limit is stored, held by another where
    /// permits are live under the old limit, failed or abstaining otherwise.
    pub fn masters(&self) -> &[crate::error::MasterReport] {
        &self.masters
    }
}
