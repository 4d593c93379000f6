//! The semaphore (docs/design.md §15): at most `limit` permits of one name held at any
//! instant, each permit an ordinary quorum mutex over one of `limit` slots.
//!
//! Taking k permits is an all-or-none acquisition of k slots chosen free: one script per
//! master (`semaphore.lua`) sets every chosen slot or none, and a master's vote counts
//! only if it set them all. The semaphore's limit is stored on the masters and compared
//! by every acquisition, so clients that disagree on it are refused instead of taking
//! slots the others do not know.
//!
//! Layer: a facade beside `lock` (docs/design.md §10); it uses `lock`, `lease`, `core`
//! and below, and nothing in the crate uses it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::future::join_all;
use rand::seq::SliceRandom;
use tokio::time::Instant;

use crate::config::limits::MAX_PERMITS;
use crate::core::{random_value, with_rng};
use crate::error::{Error, ErrorKind, MasterOutcome, human};
use crate::fencing::FencingToken;
use crate::held::HeldMode;
use crate::lease::{Lease, LeaseHandle, LeaseKey, LeaseMode, LeaseParams, Watchdog};
use crate::lock::{
    AcquireOptions, AttemptGuard, Plan, Redlock, Wake, budget_spent, check_resource, check_runtime,
    failure_kind, holder_wake, permanent_failure, refusal, refused_by_any, spread,
};
use crate::master::{Op, PermitsOp, Reply};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::quorum::{self, Decision, Round};
use crate::{deadline, scripts, telemetry};

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
    shared: Arc<Shape>,
}

/// What every clone of a semaphore handle shares: its name and keys.
struct Shape {
    name: Arc<str>,
    limit: u32,
    /// The slot keys' common beginning (slot `i` is it followed by `i`).
    base: Arc<str>,
    limit_key: Arc<str>,
    slots: Arc<[Arc<str>]>,
    /// One release channel for every slot, so that a waiter subscribes once.
    channel: Arc<str>,
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
        let base: Arc<str> = scripts::semaphore_base(&self.inner.config.key_prefix, name).into();
        let slots: Arc<[Arc<str>]> = (0..limit).map(|i| format!("{base}{i}").into()).collect();
        Ok(Semaphore {
            client: self.clone(),
            shared: Arc::new(Shape {
                name: name.into(),
                limit,
                limit_key: format!("{base}limit").into(),
                channel: scripts::release_channel(&base).into(),
                base,
                slots,
            }),
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
    /// them (unless [`Builder::wait_for_own_leases`](crate::Builder::wait_for_own_leases)). Otherwise as [`Redlock::acquire`]:
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
        let (started, mut rounds) = (telemetry::start(), 0);
        let acquired = self.acquire_rounds(permits, options, &mut rounds).await;
        telemetry::acquire_finished(&acquired, started, rounds);
        acquired
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
        let plan = self.client.plan(name, &AcquireOptions::default())?;
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
            quorum: inner.quorum,
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
        let lost = lease.lost();
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            output = work(lease.handle()) => Ok(output),
        };
        let name = &*self.shared.name;
        match outcome {
            Ok(output) => {
                if let Err(error) = lease.release().await {
                    let shown = self.client.inner.config.trace_resource_names;
                    tracing::warn!(
                        resource = %telemetry::resource(name, shown),
                        error = %telemetry::error(&error, shown),
                        "release after the critical section failed"
                    );
                }
                Ok(output)
            }
            Err(reason) => {
                let error = Error::new(ErrorKind::LeaseLost, name)
                    .with_detail(format!("the critical section was aborted: {reason}"));
                let _ = lease.release().await;
                Err(error)
            }
        }
    }

    /// The body of [`acquire_with`](Semaphore::acquire_with), counting its `rounds`; the
    /// waiting follows `Redlock::acquire_with` (docs/design.md §6).
    async fn acquire_rounds(
        &self,
        permits: u32,
        options: &AcquireOptions,
        rounds: &mut u32,
    ) -> Result<Lease, Error> {
        let shape = &self.shared;
        let name = &*shape.name;
        check_runtime(name)?;
        if permits == 0 || permits > shape.limit {
            return Err(
                Error::new(ErrorKind::InvalidOptions, name).with_detail(format!(
                    "{permits} permits asked of a semaphore whose limit is {}: ask for 1 to {}",
                    shape.limit, shape.limit
                )),
            );
        }
        // Permits only this client's own leases could free: refused before any round trip.
        let mut own = self.own_slots(permits)?;
        let plan = self.client.plan(name, options)?;
        plan.refuse_fair(name, "semaphores")?;
        let config = &self.client.inner.config;
        let k = permits as usize;
        let mut wanted = choose(&[], shape.limit as usize, k, &own);
        let mut repicks = 0u32;
        let mut waiting = None;
        let mut herd = 0u32;
        let mut spent = 0u32;
        let mut wake = Wake::Timer;
        let mut decided: Option<Error> = None;
        // Whether a master refused the permits in any attempt (docs/design.md §9).
        let mut refused = false;
        loop {
            *rounds += 1;
            let rounds = *rounds;
            if wake == Wake::Timer {
                spent += 1;
            }
            if rounds > 1 {
                // A lease of this client may have taken slots while this call waited.
                let now_own = self
                    .own_slots(permits)
                    .map_err(|e| e.with_attempts(rounds - 1))?;
                if now_own != own {
                    wanted = choose(&[], shape.limit as usize, k, &now_own);
                    own = now_own;
                }
            }
            let started = Instant::now();
            let failed = match self.attempt(&wanted, &plan).await {
                Ok(lease) => {
                    if plan.watchdog {
                        lease.start_watchdog(Watchdog {
                            interval: config.extend_interval(plan.ttl),
                            give_up_at: plan.max_hold.and_then(|m| Instant::now().checked_add(m)),
                            round_time: config.node_timeout,
                        });
                    }
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            let round = started.elapsed();
            let error = failed.error.with_attempts(rounds);
            refused |= refused_by_any(&error);
            if failed.cut {
                let last = decided.take().map_or(error, |e| e.with_attempts(rounds));
                return Err(budget_spent(last, rounds, refused));
            }
            decided = Some(error.clone());
            if !error.is_retryable() {
                return Err(error);
            }
            if Instant::now() >= plan.give_up_at {
                return Err(budget_spent(error, rounds, refused));
            }
            wanted = choose(&failed.free, shape.limit as usize, k, &own);
            // Refused for the slots it guessed while others are free on a quorum: try those
            // at once, without spending an attempt (a wrong guess is no contention), a few
            // times in a row at most.
            let quorum = self.client.inner.quorum;
            if error.kind() == ErrorKind::Contended
                && repicks < MAX_REPICKS
                && free_on_quorum(&failed.free, &wanted, quorum)
            {
                repicks += 1;
                wake = Wake::Event;
                continue;
            }
            repicks = 0;
            if spent >= plan.attempts {
                return Err(error);
            }
            // Subscribe before the next attempt (docs/design.md §6): a release after it
            // reaches us, one before it is seen by that attempt.
            if waiting.is_none() && config.notifications && error.kind() == ErrorKind::Contended {
                let subscribe = self
                    .client
                    .inner
                    .notifier
                    .subscribe(Arc::clone(&shape.channel));
                match tokio::time::timeout_at(plan.give_up_at, subscribe).await {
                    Ok(subscription) => waiting = Some(subscription),
                    Err(_) => return Err(budget_spent(error, rounds, refused)),
                }
                wake = Wake::Timer;
                continue;
            }
            let now = Instant::now();
            let mut wake_at = now + config.retry.delay(spent);
            let mut reason = Wake::Timer;
            if error.kind() == ErrorKind::NotEnoughVoters
                && let Some(after) = error.retry_after()
            {
                let voters_at = now + after + spread(round, herd);
                if voters_at >= plan.give_up_at {
                    return Err(error);
                }
                if after > std::time::Duration::from_millis(1) {
                    wake_at = voters_at;
                    reason = Wake::Event;
                }
            } else if waiting.is_some()
                && let Some(free) = failed.holder_free_at
            {
                let free = holder_wake(free, now, round, herd);
                if free < wake_at {
                    wake_at = free;
                    reason = Wake::Event;
                }
            }
            if wake_at >= plan.give_up_at && waiting.is_none() {
                return Err(budget_spent(error, rounds, refused));
            }
            let until = wake_at.min(plan.give_up_at);
            match waiting.as_mut() {
                Some(subscription) => {
                    let noticed = tokio::select! {
                        () = subscription.notified() => true,
                        () = tokio::time::sleep_until(until) => false,
                    };
                    if noticed {
                        let pause = spread(round, herd);
                        tokio::time::sleep_until((Instant::now() + pause).min(plan.give_up_at))
                            .await;
                        herd += 1;
                        wake = Wake::Event;
                    } else {
                        herd = 0;
                        wake = reason;
                    }
                }
                None => {
                    tokio::time::sleep_until(until).await;
                    wake = reason;
                }
            }
            if Instant::now() >= plan.give_up_at {
                return Err(budget_spent(error, rounds, refused));
            }
        }
    }

    /// One attempt at the `wanted` slots: the acquire round and, with fencing, a
    /// write-back per slot.
    async fn attempt(&self, wanted: &[u32], plan: &Plan) -> Result<Lease, Failed> {
        let inner = &self.client.inner;
        let config = &inner.config;
        let shape = &self.shared;
        let name: Arc<str> = Arc::clone(&shape.name);
        let value: Arc<str> = random_value().into();
        let ttl = plan.ttl;
        #[cfg_attr(not(feature = "mutants"), allow(unused_mut))]
        let mut keys: Vec<Arc<str>> = wanted
            .iter()
            .map(|w| Arc::clone(&shape.slots[*w as usize]))
            .collect();
        #[cfg(feature = "mutants")]
        let counted = config.planted.is(Mutant::SemaphoreCountPerMaster).then(|| {
            // The broken design's permits are named by their holder, not by a slot.
            keys = scripts::counted_permits(&shape.base, &value, wanted.len());
        });
        let mut guard = AttemptGuard {
            inner: Arc::clone(inner),
            keys: keys.clone(),
            channel: Some(Arc::clone(&shape.channel)),
            value: Arc::clone(&value),
            outcomes: None,
            armed: true,
        };
        let fencing = plan.fencing;
        #[cfg(feature = "mutants")]
        let fencing = fencing && counted.is_none();
        let op = Op::AcquirePermits(Box::new(PermitsOp {
            limit_key: Arc::clone(&shape.limit_key),
            slots: Arc::clone(&shape.slots),
            base: Arc::clone(&shape.base),
            wanted: wanted.to_vec(),
            replace: false,
            value: Arc::clone(&value),
            ttl,
            fence: fencing,
            owner: Arc::clone(&plan.owner),
        }));
        let bounds = inner.bounds(Some(plan.give_up_at));
        let traced = telemetry::resource(&name, config.trace_resource_names);
        let round = quorum::run(&inner.masters, Arc::new(op), inner.quorum, traced, bounds).await;
        let reports = round.reports(&inner.masters);
        let free = free_slots(&round);

        // A master whose cluster record disagrees, or that holds permits under another
        // limit: refuse whatever was granted (the guard releases it).
        if let Some((kind, detail)) = refusal(&reports) {
            guard.outcomes = Some(round.outcomes);
            let detail = match kind {
                ErrorKind::LimitMismatch => format!(
                    "{detail}; this client gives limit {}: give every client of semaphore \
                     {name:?} the stored limit, or change the stored one with \
                     `Semaphore::replace_limit` (it takes effect on each master once no \
                     permit is held there)",
                    shape.limit
                ),
                _ => detail,
            };
            return Err(Failed {
                error: Error::new(kind, &*name)
                    .with_detail(detail)
                    .with_masters(reports),
                holder_free_at: None,
                free,
                cut: false,
            });
        }

        if round.decision == Decision::Reached {
            let now = Instant::now();
            let least = config.least_validity(ttl);
            let valid = config
                .lease_deadline(round.t0, ttl)
                .filter(|dl| deadline::validity_left(*dl, now, least).is_some());
            let Some(deadline) = valid else {
                guard.outcomes = Some(round.outcomes);
                let detail = format!(
                    "the round took {} of a {} TTL (drift allowance {})",
                    human(now - round.t0),
                    human(ttl),
                    human(deadline::drift(ttl, config.drift_factor))
                );
                return Err(Failed {
                    error: Error::new(ErrorKind::ValidityExhausted, &*name)
                        .with_detail(detail)
                        .with_masters(reports),
                    holder_free_at: None,
                    free,
                    cut: false,
                });
            };
            let mut tokens = vec![None; keys.len()];
            if fencing {
                // One counter per slot: each slot's token is written back on its own, all
                // at once, within the lease's validity (docs/design.md §8).
                let firsts = (0..keys.len()).map(|j| {
                    round
                        .replies
                        .iter()
                        .flatten()
                        .filter_map(|r| match r {
                            Reply::Permits { fences, .. } => fences.get(j).copied().flatten(),
                            _ => None,
                        })
                        .max()
                        .unwrap_or(0)
                        .saturating_add(1)
                });
                let writes = keys.iter().zip(firsts).map(|(key, first)| {
                    self.client.fence(
                        (key, key),
                        &name,
                        &value,
                        first,
                        (deadline, least),
                        plan.give_up_at,
                    )
                });
                for (j, written) in join_all(writes).await.into_iter().enumerate() {
                    match written {
                        Ok(token) => tokens[j] = Some(FencingToken::new(token)),
                        Err((error, cut)) => {
                            guard.outcomes = Some(round.outcomes);
                            let error = match cut {
                                true => error.with_masters(reports),
                                false => error,
                            };
                            return Err(Failed {
                                error,
                                holder_free_at: None,
                                free,
                                cut,
                            });
                        }
                    }
                }
            }
            guard.disarm();
            let claim = inner.held.claim(&keys, HeldMode::Exclusive);
            return Ok(self
                .lease(keys, wanted, value, deadline, tokens, reports, plan)
                .with_claim(claim));
        }

        let spare = inner.masters.len() - inner.quorum;
        let (kind, detail, voters_at) = match permanent_failure(&reports, spare) {
            Some((kind, fixes)) => (kind, Some(fixes), None),
            None => {
                let (kind, voters_at) = failure_kind(&round.outcomes, inner.quorum);
                let detail = match (kind, voters_at) {
                    (_, Some(_)) => Some(
                        "too few masters vote yet: the others are in restart quarantine, \
                         because they may have lost lock keys (new masters abstain once, \
                         for ttl_max)"
                            .to_owned(),
                    ),
                    (ErrorKind::Contended, None) => Some(format!(
                        "{} of its {} permits asked, and fewer were free on a quorum of \
                         masters: wait for holders to release them",
                        wanted.len(),
                        shape.limit
                    )),
                    _ => None,
                };
                (kind, detail, voters_at)
            }
        };
        let holder_free_at = round
            .holder_free_in(inner.quorum)
            .and_then(|d| round.t0.checked_add(d));
        let cut = round.cut;
        guard.outcomes = Some(round.outcomes);
        let mut error = Error::new(kind, &*name).with_masters(reports);
        if let Some(detail) = detail {
            error = error.with_detail(detail);
        }
        if let Some(at) = voters_at {
            error = error.with_retry_at(at);
        }
        Err(Failed {
            error,
            holder_free_at,
            free,
            cut,
        })
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

/// A failed attempt, with what the next one needs.
struct Failed {
    error: Error,
    /// When enough slots free up on a quorum, if known.
    holder_free_at: Option<Instant>,
    /// Each answering master's free slots.
    free: Vec<Vec<u32>>,
    cut: bool,
}

/// The free slots each master reported in `round`.
fn free_slots(round: &Round) -> Vec<Vec<u32>> {
    round
        .replies
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Reply::Permits { free, .. } => Some(free.clone()),
            _ => None,
        })
        .collect()
}

/// The `k` slots (of `limit`) to try next: those free on the most masters of the last
/// attempt, ties broken at random so that concurrent takers spread over the slots, never
/// one of `own` (this client's leases hold them) while others remain. Never a count of
/// permits: a slot is what each master grants or refuses (docs/design.md §15).
fn choose(free: &[Vec<u32>], limit: usize, k: usize, own: &[u32]) -> Vec<u32> {
    let mut score = vec![0usize; limit];
    for slots in free {
        for slot in slots {
            if let Some(s) = score.get_mut(*slot as usize) {
                *s += 1;
            }
        }
    }
    let mut order: Vec<u32> = (0..limit).filter_map(|i| u32::try_from(i).ok()).collect();
    with_rng(|rng| order.shuffle(rng));
    // Stable: a random order among equal scores, this client's own slots last.
    order.sort_by_key(|slot| (own.contains(slot), std::cmp::Reverse(score[*slot as usize])));
    order.truncate(k);
    order.sort_unstable();
    order
}

/// The most attempts in a row that re-pick slots reported free without spending an attempt.
const MAX_REPICKS: u32 = 3;

/// Whether each of `slots` was reported free by at least `quorum` masters.
fn free_on_quorum(free: &[Vec<u32>], slots: &[u32], quorum: usize) -> bool {
    slots
        .iter()
        .all(|slot| free.iter().filter(|f| f.contains(slot)).count() >= quorum)
}

impl Semaphore {
    /// The slots this client's own leases hold (docs/design.md §14): never worth asking
    /// for. Empty with `Builder::wait_for_own_leases`, which waits for them instead.
    ///
    /// # Errors
    /// [`ErrorKind::AlreadyHeld`] when so many are this client's own that `permits` more
    /// could only come from its own leases: waiting would wait for itself.
    fn own_slots(&self, permits: u32) -> Result<Vec<u32>, Error> {
        let shape = &self.shared;
        let held = &self.client.inner.held;
        let own: Vec<u32> = (0..shape.limit)
            .filter(|i| {
                held.check(
                    &shape.name,
                    &[&shape.slots[*i as usize]],
                    HeldMode::Exclusive,
                )
                .is_err()
            })
            .collect();
        let own_count = u32::try_from(own.len()).unwrap_or(u32::MAX);
        if own_count.saturating_add(permits) > shape.limit {
            return Err(
                Error::new(ErrorKind::AlreadyHeld, &*shape.name).with_detail(format!(
                    "this client already holds {own_count} of the semaphore's {} permits, so \
                     {permits} more could only come from its own leases: release one of them \
                     first, or ask for fewer; tasks that share this client and must queue \
                     behind each other need `Builder::wait_for_own_leases(true)`",
                    shape.limit
                )),
            );
        }
        Ok(own)
    }

    /// The lease of a granted attempt: one key per slot, each named `<name>#<slot>` and
    /// announced on the semaphore's one release channel.
    #[allow(clippy::too_many_arguments)]
    fn lease(
        &self,
        keys: Vec<Arc<str>>,
        wanted: &[u32],
        value: Arc<str>,
        deadline: Instant,
        tokens: Vec<Option<FencingToken>>,
        acquired: Vec<crate::error::MasterReport>,
        plan: &Plan,
    ) -> Lease {
        let inner = &self.client.inner;
        let shape = &self.shared;
        let keys = keys
            .into_iter()
            .zip(wanted)
            .zip(tokens)
            .map(|((key, slot), token)| LeaseKey {
                resource: format!("{}#{slot}", shape.name).into(),
                key,
                channel: Arc::clone(&shape.channel),
                token,
            })
            .collect();
        Lease::new(
            Arc::clone(inner),
            LeaseParams {
                keys,
                mode: LeaseMode::Permits,
                value,
                ttl: plan.ttl,
                deadline,
                safety_margin: inner.config.safety_margin(plan.ttl),
                acquired,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{choose, free_on_quorum};

    #[test]
    fn the_next_slots_are_those_free_on_the_most_masters() {
        let free = [vec![0, 2, 3], vec![2, 3], vec![3, 1]];
        assert_eq!(choose(&free, 4, 1, &[]), [3]);
        assert_eq!(choose(&free, 4, 2, &[]), [2, 3]);
        assert_eq!(choose(&[], 4, 4, &[]), [0, 1, 2, 3]);
        // This client's own slots come last.
        assert_eq!(choose(&free, 4, 1, &[3]), [2]);
        assert_eq!(choose(&[], 3, 2, &[0]), [1, 2]);
        // Ties are broken at random: over many draws, each tied slot comes first.
        let mut seen = [false; 4];
        for _ in 0..200 {
            seen[choose(&[], 4, 1, &[])[0] as usize] = true;
        }
        assert_eq!(seen, [true; 4]);
        // Slots a master reports beyond the limit are ignored.
        assert_eq!(choose(&[vec![9]], 2, 2, &[]), [0, 1]);
    }

    #[test]
    fn slots_free_on_a_quorum_are_tried_at_once() {
        let free = [vec![0, 2], vec![2], vec![0]];
        assert!(free_on_quorum(&free, &[0, 2], 2));
        assert!(!free_on_quorum(&free, &[0, 1], 2));
        assert!(!free_on_quorum(&free, &[2], 3));
    }
}
