//! The acquire engine: the one loop under every lock kind's facade (docs/design.md §3,
//! §6, §14–§17). A call is a [`Target`] (what it locks) and a [`Plan`] (its budgets);
//! the loop makes an attempt, and until one is granted or the budgets end it waits for
//! the holders in between: subscribed to their release notices, woken by their expiry,
//! by masters leaving restart quarantine, or by its retry timer, or queued to be handed
//! the lock (`queue`). Its steps are named below; what differs between lock kinds is the
//! target's to say, never a branch of the loop.
//!
//! Layer: below the facades, above the lease and the core (docs/design.md §10).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::{Inner, random_value};
use crate::error::{Error, ErrorKind};
use crate::lease::{Lease, LeaseHandle, Watchdog};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::telemetry;
use crate::wait::Subscription;

mod attempt;
mod cleanup;
mod failure;
mod fence;
mod intent;
mod plan;
mod queue;
mod slots;
mod target;

use attempt::attempt;
use failure::{budget_spent, holder_wake, refused_by_any, spread};
pub(crate) use failure::{permanent_failure, refusal};
use intent::IntentGuard;
pub use plan::AcquireOptions;
pub(crate) use plan::Plan;
pub(crate) use slots::{SlotSet, Slots};
use target::Seen;
pub(crate) use target::{Intent, Kind, Target};

/// Runs one acquire call: `prepare` checks what the call was given and makes its target
/// and plan (before any round trip), then the call attempts and waits until it holds the
/// lock or its budgets end. Its time, outcome and attempts are recorded as metrics.
///
/// # Errors
/// What `prepare` refuses, then what the last attempt met (docs/design.md §9).
///
/// # Cancel safety
/// Dropping the future releases the attempt in flight on every master in the background,
/// drops its subscriptions, and removes a queued waiter's registration (docs/design.md
/// §3, §6, §17).
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    prepare: impl FnOnce() -> Result<(Target, Plan), Error>,
) -> Result<Lease, Error> {
    let (started, mut rounds) = (telemetry::start(), 0);
    let acquired = match prepare() {
        Ok((target, plan)) => run(inner, target, &plan, &mut rounds).await,
        Err(error) => Err(error),
    };
    telemetry::acquire_finished(&acquired, started, rounds);
    acquired
}

/// Runs `work` while `lease` holds (the scoped form of every facade: `with_lock`,
/// `with_lock_many`, `with_permits`, `with_read`, `with_write`), then releases it: `work`
/// is dropped the moment the lease is lost, and the call returns `LeaseLost`, naming
/// `name`. A release that fails after `work` finished is logged, not returned.
///
/// # Errors
/// [`ErrorKind::LeaseLost`] when the lease is lost while `work` runs.
///
/// # Cancel safety
/// Dropping the future drops `work` and releases the lease in the background.
pub(crate) async fn hold<F, Fut, T>(
    inner: &Inner,
    lease: Lease,
    name: &str,
    work: F,
) -> Result<T, Error>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = lease.lost();
    let outcome = tokio::select! {
        biased;
        reason = lost => Err(reason),
        output = work(lease.handle()) => Ok(output),
    };
    match outcome {
        Ok(output) => {
            if let Err(error) = lease.release().await {
                let shown = inner.config.trace_resource_names;
                tracing::warn!(
                    target: TRACE_TARGET,
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

/// What woke a waiting acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The retry timer: the next attempt spends the attempt budget.
    Timer,
    /// Something that happened on the masters: the next attempt is free.
    Event,
}

/// The acquire loop over `target` (docs/design.md §3, §6): attempts until one succeeds
/// or the plan's budgets run out, waiting for the holders in between; `rounds` counts the
/// attempts.
async fn run(
    inner: &Arc<Inner>,
    mut target: Target,
    plan: &Plan,
    rounds: &mut u32,
) -> Result<Lease, Error> {
    // This client's own lease on a key: refused before any round trip (§14); a write
    // acquire of a lock it reads is an upgrade, refused too (§16).
    target.check_held(&inner.held)?;
    // A writer's intent, chosen once per call: cleared when the call ends without the
    // lock (returned or dropped) so that readers need not wait for it to expire; a
    // granted attempt clears it where its grant did not.
    let intent = IntentGuard::of(inner, &target);
    let reused = reused_value(inner);
    // A waiting acquire of one resource queues to be handed the lock, and a fair one
    // takes it only in ticket order (§17). Its first attempt is the plain acquire unless
    // fair: the uncontended path stays one plain round.
    let queued = target.queues(inner.config.handoff, plan.fair);
    let no_waiter: Arc<str> = "".into();
    let mut call = Call::new(inner, plan, rounds);
    // This client just handed the lock on to a waiter (§17): a plain attempt would be
    // refused, so the call queues at once, with a ticket above the counters that release
    // read, as if that attempt had been made and refused (it counts as one). Not fair
    // calls, whose ticket is written back strictly from a refusal, nor a call with no
    // attempt or time left after one, which would not queue either.
    if queued && !plan.fair && plan.attempts > 1 && Instant::now() < plan.give_up_at {
        let noted = target
            .first_key()
            .and_then(|key| inner.handed_on.take(key, Instant::now()));
        if let Some(tickets) = noted {
            // Counted as the refused attempt it stands for, as `spent` below.
            *call.rounds += 1;
            let refused = Error::new(ErrorKind::Contended, Arc::clone(&target.name)).with_detail(
                "held by another client: this client's release handed it to the next waiter",
            );
            let queue = queue::Queue {
                target: &mut target,
                plan,
                refused,
                tickets: &tickets,
                reused: reused.clone(),
                spent: call.spent.max(1),
            };
            return queue::wait(inner, queue, call.rounds).await;
        }
    }
    loop {
        call.next_round(&mut target)?;
        let value = reused
            .clone()
            .unwrap_or_else(|| plan.owner.value(&random_value()).into());
        let started = Instant::now();
        let fair = (queued && plan.fair).then_some((&no_waiter, true));
        let failed = match attempt(inner, &target, value, plan, fair).await {
            Ok(lease) => {
                if let Some(intent) = intent {
                    intent.disarm();
                }
                if call.noticed && target.hands_off() {
                    telemetry::handoff();
                }
                return Ok(keep(lease, plan, inner));
            }
            Err(failed) => failed,
        };
        let round = started.elapsed();
        let error = call.judge(failed.error, failed.cut)?;
        if Instant::now() < plan.give_up_at
            && target.retry_at_once(&failed.seen, error.kind(), inner.quorum())
        {
            call.wake = Wake::Event;
            continue;
        }
        let error = call.go_on(error)?;
        // Held: queue to be handed the lock (a fair call needs a quorum's ticket counters
        // for its ticket; without them it tries again as usual).
        if queued
            && error.kind() == ErrorKind::Contended
            && (!plan.fair || failed.seen.tickets.len() >= inner.quorum())
        {
            let queue = queue::Queue {
                target: &mut target,
                plan,
                refused: error,
                tickets: &failed.seen.tickets,
                reused: reused.clone(),
                spent: call.spent,
            };
            return queue::wait(inner, queue, call.rounds).await;
        }
        if call.subscribe(&target, &failed.seen, &error).await? {
            continue;
        }
        call.pause(&target, failed.holder_free_at, error, round)
            .await?;
    }
}

/// The value every attempt of a call reuses under [`Mutant::ReuseValue`]; `None` in the
/// product, where each attempt draws a fresh one (docs/design.md §3, I5).
fn reused_value(inner: &Inner) -> Option<Arc<str>> {
    #[cfg(not(redquorum_mutants))]
    let _ = inner;
    #[cfg(redquorum_mutants)]
    if crate::mutants::planted(&inner.owner.client).is(Mutant::ReuseValue) {
        return Some(random_value().into());
    }
    None
}

/// A granted lease, with its watchdog started if the plan wants one.
fn keep(lease: Lease, plan: &Plan, inner: &Inner) -> Lease {
    if plan.watchdog {
        let config = &inner.config;
        lease.start_watchdog(Watchdog {
            interval: config.extend_interval(plan.ttl),
            give_up_at: plan.max_hold.and_then(|m| Instant::now().checked_add(m)),
            round_time: config.node_timeout,
        });
    }
    lease
}

/// The state of one call's wait between its attempts.
struct Call<'a> {
    inner: &'a Arc<Inner>,
    plan: &'a Plan,
    /// Attempts made so far (the caller's count, for the metrics).
    rounds: &'a mut u32,
    /// Attempts that spend the attempt budget: all but those woken by an event (the
    /// holder's release notice or expiry, masters leaving quarantine). Those come from
    /// what happened on the masters, not from impatience; the time budget bounds them.
    spent: u32,
    wake: Wake,
    /// The release notices waited for: none until an attempt found the lock held; of
    /// several keys, those of every key an attempt found held (`subscribed` names them).
    waiting: Vec<Subscription>,
    subscribed: Vec<Arc<str>>,
    /// Failed attempts in a row that a release notice had woken: every waiter of the
    /// lock wakes on the same notice, and on several masters they split the votes.
    herd: u32,
    /// Whether a release notice woke the attempt about to run (a hand-off if it acquires).
    noticed: bool,
    /// The last error that the masters decided, for a budget that ends mid-round.
    decided: Option<Error>,
    /// Whether a master refused the lock in any attempt: a wait that met only failures
    /// is an outage, not contention (docs/design.md §9).
    refused: bool,
}

impl<'a> Call<'a> {
    fn new(inner: &'a Arc<Inner>, plan: &'a Plan, rounds: &'a mut u32) -> Self {
        Self {
            inner,
            plan,
            rounds,
            spent: 0,
            wake: Wake::Timer,
            waiting: Vec::new(),
            subscribed: Vec::new(),
            herd: 0,
            noticed: false,
            decided: None,
            refused: false,
        }
    }

    /// Counts the attempt about to run and, from the second on, refuses to go on if a
    /// lease of this client took what the call waits for: waiting on would be waiting for
    /// ourselves (docs/design.md §14).
    fn next_round(&mut self, target: &mut Target) -> Result<(), Error> {
        *self.rounds += 1;
        if self.wake == Wake::Timer {
            self.spent += 1;
        }
        let rounds = *self.rounds;
        if rounds > 1 {
            target
                .check_held(&self.inner.held)
                .map_err(|e| e.with_attempts(rounds - 1))?;
        }
        Ok(())
    }

    /// The error of a failed attempt, or the end of the call: a round the budget cut ends
    /// it with what the masters said last; an error that retrying cannot help ends it as
    /// it is.
    fn judge(&mut self, error: Error, cut: bool) -> Result<Error, Error> {
        let rounds = *self.rounds;
        let error = error.with_attempts(rounds);
        self.refused |= refused_by_any(&error);
        if cut {
            // The budget ended this round: say what the masters said last; if no round was
            // decided and the acquire round itself fell short of a quorum (not a fencing
            // write-back cut after a grant), that the budget ended it (a budget shorter
            // than a round to the masters never gets an answer).
            let short = error.kind() == ErrorKind::NoQuorum
                && error
                    .masters()
                    .iter()
                    .filter(|r| r.outcome().is_granted())
                    .count()
                    < self.inner.quorum();
            let last = match self.decided.take() {
                Some(decided) => decided.with_attempts(rounds),
                None if !short => error,
                None => {
                    let first = "the budget ran out during the first round, before a quorum \
                                 of masters answered: give the call more time than a round to \
                                 the masters takes";
                    let detail = match error.detail() {
                        Some(before) => format!("{first}; {before}"),
                        None => first.to_owned(),
                    };
                    error.with_detail(detail)
                }
            };
            return Err(budget_spent(last, rounds, self.refused));
        }
        self.decided = Some(error.clone());
        if !error.is_retryable() {
            return Err(error);
        }
        Ok(error)
    }

    /// Whether the call may try again: not once its attempts are spent, nor once its wait
    /// budget is (docs/design.md §6, §9).
    fn go_on(&self, error: Error) -> Result<Error, Error> {
        if self.spent >= self.plan.attempts {
            return Err(error);
        }
        if Instant::now() >= self.plan.give_up_at {
            return Err(budget_spent(error, *self.rounds, self.refused));
        }
        Ok(error)
    }

    /// Subscribes before the next attempt to the release notices of what the failed
    /// attempt `seen` held, if it did not wait for them already: a release after it
    /// reaches us, and one before the subscription took effect is seen by that attempt
    /// (docs/design.md §6, I10). Of several keys, the one that keeps us out may change
    /// from attempt to attempt: each key found held for the first time is subscribed to
    /// then (§14). `true`: subscribed, the next attempt runs at once.
    async fn subscribe(
        &mut self,
        target: &Target,
        seen: &Seen,
        error: &Error,
    ) -> Result<bool, Error> {
        let inner = self.inner;
        if !inner.config.notifications || error.kind() != ErrorKind::Contended {
            return Ok(false);
        }
        let fresh: Vec<Arc<str>> = target
            .channels(seen)
            .into_iter()
            .filter(|channel| !self.subscribed.contains(channel))
            .collect();
        if fresh.is_empty() {
            return Ok(false);
        }
        self.subscribed.extend(fresh.iter().cloned());
        let subscribe = futures::future::join_all(
            fresh
                .into_iter()
                .map(|channel| inner.notifier.subscribe(channel)),
        );
        match tokio::time::timeout_at(self.plan.give_up_at, subscribe).await {
            Ok(subscriptions) => self.waiting.extend(subscriptions),
            Err(_) => {
                return Err(budget_spent(error.clone(), *self.rounds, self.refused));
            }
        }
        self.wake = Wake::Timer;
        Ok(true)
    }

    /// Waits for the next attempt's moment (docs/design.md §6): a release notice, the
    /// holder's expiry, masters leaving quarantine, a writer's intent to refresh, or the
    /// retry timer, whichever comes first; or ends the call when that lies beyond the
    /// budget. `round` is how long the failed attempt took, `holder_free_at` when the
    /// holder's keys expire if it said.
    async fn pause(
        &mut self,
        target: &Target,
        holder_free_at: Option<Instant>,
        error: Error,
        round: Duration,
    ) -> Result<(), Error> {
        let (plan, rounds) = (self.plan, *self.rounds);
        let (wake_at, reason) = self.next_wake(target, holder_free_at, &error, round)?;
        if wake_at >= plan.give_up_at && self.waiting.is_empty() {
            return Err(budget_spent(error, rounds, self.refused));
        }
        let until = wake_at.min(plan.give_up_at);
        let config = &self.inner.config;
        let traced = telemetry::resource(&target.name, config.trace_resource_names);
        tracing::trace!(
            target: TRACE_TARGET,
            resource = %traced,
            rounds,
            "acquire attempt failed, waiting"
        );
        self.noticed = false;
        let keys = target.lock_keys();
        let held = &self.inner.held;
        match self.waiting.as_mut_slice() {
            [] => {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    // Refused at the top of the loop (§14).
                    () = held.taken(&keys) => {}
                }
                self.wake = reason;
            }
            subscriptions => {
                self.noticed = tokio::select! {
                    () = notified(subscriptions) => true,
                    () = tokio::time::sleep_until(until) => false,
                    // Refused at the top of the loop (§14).
                    () = held.taken(&keys) => false,
                };
                if self.noticed {
                    let pause = spread(round, self.herd);
                    tokio::time::sleep_until((Instant::now() + pause).min(plan.give_up_at)).await;
                    self.herd += 1;
                    self.wake = Wake::Event;
                } else {
                    self.herd = 0;
                    self.wake = reason;
                }
            }
        }
        if Instant::now() >= plan.give_up_at {
            return Err(budget_spent(error, rounds, self.refused));
        }
        Ok(())
    }

    /// When to wake for the next attempt, and why: the retry timer, or an event on the
    /// masters, which makes that attempt free. Ends the call when masters in restart
    /// quarantine vote again only beyond the budget.
    fn next_wake(
        &self,
        target: &Target,
        holder_free_at: Option<Instant>,
        error: &Error,
        round: Duration,
    ) -> Result<(Instant, Wake), Error> {
        let (plan, herd) = (self.plan, self.herd);
        let now = Instant::now();
        let mut wake_at = now + self.inner.config.retry.delay(self.spent);
        let mut reason = Wake::Timer;
        if error.kind() == ErrorKind::NotEnoughVoters
            && let Some(after) = error.retry_after()
        {
            // Masters in restart quarantine vote again at a known time: sleep until
            // then, unless it lies beyond the budget (then say when, at once).
            let voters_at = now + after + spread(round, herd);
            if voters_at >= plan.give_up_at {
                return Err(error.clone());
            }
            // A time already past is no event to wait for: the timer decides then.
            if after > Duration::from_millis(1) {
                wake_at = voters_at;
                reason = Wake::Event;
            }
        } else if !self.waiting.is_empty()
            && let Some(free) = holder_free_at
        {
            let free = holder_wake(free, now, round, herd);
            if free < wake_at {
                wake_at = free;
                reason = Wake::Event;
            }
        }
        // A waiting writer refreshes its intent well before it expires: each attempt
        // sets it again where readers still hold the lock (docs/design.md §16).
        if let Kind::Write(intent) = &target.kind
            && error.kind() == ErrorKind::Contended
        {
            let refresh = now + intent.ttl / 3;
            if refresh < wake_at {
                wake_at = refresh;
                reason = Wake::Event;
            }
        }
        Ok((wake_at, reason))
    }
}

/// The target of the engine's trace events, as docs/observability.md lists them: the
/// module the mutex, whose calls they trace first, lives in.
const TRACE_TARGET: &str = "redquorum::lock";

/// Resolves at the next release notice of any of `subscriptions`.
async fn notified(subscriptions: &mut [Subscription]) {
    match subscriptions {
        [] => std::future::pending().await,
        [one] => one.notified().await,
        many => {
            let each = many.iter_mut().map(|s| Box::pin(s.notified()));
            let _ = futures::future::select_all(each).await;
        }
    }
}
