//! The queued wait of the lock of one resource: hand-off to the next waiter, and the fair
//! lock (docs/design.md §17, I18 and I19).
//!
//! A call whose attempt found the lock held registers a waiter id `W` (128 random bits,
//! one per call, never a lease value) in the lock's queue on every master, then waits for
//! a hand-off notice naming `W`, refreshing its registration every third of `waiter_ttl`.
//! Each notice (from the master whose connection delivered it) and each registration
//! answer that finds the key handed to `W` is evidence for that master, good for one
//! `waiter_ttl`; once the evidence covers a quorum of masters, the call *confirms*: one
//! ordinary attempt (`Op::AcquireQueued`) with a fresh value, from its own `t0`, which
//! grants exactly as a plain attempt does. A failed confirm spends an attempt and uses
//! its evidence up, so a key handed on a minority never sets it confirming in a loop.
//! Neither the registration nor the hand-off counts toward the lease's validity.
//!
//! A fair call first takes a ticket: one above every ticket counter a quorum answered in
//! the refused attempt, written back strictly on a quorum (like the fencing write-back);
//! its score in the queue is the ticket. An unfair call's score is a ticket too, taken
//! without the strict write-back: one above every counter its refused attempt read
//! (`acquire.lua` answers the counter when it refuses), raised on every master it
//! registers on. Waiters of both kinds are so served in about the order they queued; two
//! unfair calls that read the same counters share a score, and the order of their ids
//! (the same on every master) decides between them. Unlike a random score, this keeps a
//! waiter from being passed by every newcomer for its whole budget.
//!
//! However the call ends — a lease, an error, the budget, or its future dropped — its
//! registration is removed in the background (`Op::Dequeue`, which also passes on a key
//! handed to it meanwhile) from every master but those whose confirm granted its lease,
//! stragglers judged by their late answers (`cleanup`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{AttemptGuard, Failed, attempt};
use super::cleanup;
use super::failure::{after_refresh, failure_kind, kind_word, spread, wait_timeout};
use super::target::Target;
use super::{Plan, keep};
use crate::core::{Inner, random_value};
use crate::error::{Error, ErrorKind, MasterError, MasterErrorKind, MasterOutcome};
use crate::lease::Lease;
use crate::master::{Op, Reply};
use crate::quorum::{self, Bounds, Decision, Round};
use crate::wait::Handoffs;
use crate::{scripts, telemetry};

/// The target of the queued wait's trace events.
const TRACE_TARGET: &str = "redquorum::lock::queue";

/// A call about to queue: what its refused attempt learnt.
pub(super) struct Queue<'a> {
    pub(super) target: &'a mut Target,
    pub(super) plan: &'a Plan,
    /// The refusal that made it queue; reported if it never gets the lock.
    pub(super) refused: Error,
    /// The ticket counters the refused attempt read (a quorum of them when fair).
    pub(super) tickets: &'a [u64],
    /// The value every attempt reuses (`Mutant::ReuseValue`); `None` in the product.
    pub(super) reused: Option<Arc<str>>,
    /// The attempts that spent the attempt budget so far.
    pub(super) spent: u32,
}

/// The registration of one waiter: what every `Enqueue` of it sends.
struct Registration {
    key: Arc<str>,
    waiter: Arc<str>,
    channel: Arc<str>,
    score: u64,
    fair: bool,
}

impl Registration {
    /// The `Enqueue` of this registration; `strict` for a fair ticket's write-back.
    fn op(&self, inner: &Inner, strict: bool) -> Op {
        Op::Enqueue {
            key: Arc::clone(&self.key),
            waiter: Arc::clone(&self.waiter),
            score: self.score,
            strict,
            fair: self.fair,
            waiter_ttl: inner.config.waiter_ttl,
            channel: Arc::clone(&self.channel),
        }
    }
}

/// What woke a queued waiter.
enum Woken {
    /// A hand-off notice naming it.
    Notice,
    /// The refresh tick (or the end of the budget).
    Tick,
    /// A lease of this client took the key.
    Taken,
}

/// A queued waiter's evidence, per master, that a confirm could be granted there: a
/// hand-off notice from that master's connection, or a registration answer saying the
/// key is handed to the waiter. Each piece is good for one `waiter_ttl`, the life of a
/// handed key. A key merely free does not count, even for an unfair waiter: the live
/// head there takes it at its next refresh, and a waiter behind it must not pass it. The waiter confirms only when its evidence
/// covers a quorum (docs/design.md §17): a key handed on a minority of masters, while
/// the others hold a lease or have another head, leads to no confirm at all.
struct Evidence {
    /// Per master: until when its evidence holds.
    until: Vec<Option<Instant>>,
    waiter_ttl: Duration,
    /// After a failed confirm, the masters that refused it: the next confirm also needs
    /// new evidence from one of them, or a registration round of its own that finds the
    /// key handed to the waiter on a quorum. The others may hand the key back to the
    /// waiter when its value is released there — among them masters whose grant did not
    /// count (an abstention, a late answer, a master that may evict keys) — and those
    /// notices alone would start the same confirm again, and fail it again, in a loop. A
    /// refuser that dies or keeps a stale key never gives new evidence: the refresh's own
    /// quorum of answers ends the wait for it within one refresh period.
    awaited: Vec<usize>,
}

impl Evidence {
    fn new(masters: usize, waiter_ttl: Duration) -> Self {
        Self {
            until: vec![None; masters],
            waiter_ttl,
            awaited: Vec::new(),
        }
    }

    /// Whether a confirm may run: evidence from a quorum of masters and, after a failed
    /// confirm that masters refused, new evidence from one of those.
    fn ready(&mut self, quorum: usize) -> bool {
        if self.count() < quorum {
            return false;
        }
        let now = Instant::now();
        let heard = |m: &usize| matches!(self.until.get(*m), Some(Some(t)) if *t > now);
        if self.awaited.is_empty() || self.awaited.iter().any(heard) {
            self.awaited.clear();
            return true;
        }
        false
    }

    fn note(&mut self, master: usize) {
        if let Some(slot) = self.until.get_mut(master) {
            *slot = Some(Instant::now() + self.waiter_ttl);
        }
    }

    /// The masters that sent a hand-off notice.
    fn note_notices(&mut self, masters: &[usize]) {
        for &master in masters {
            self.note(master);
        }
    }

    /// The answers of a registration round: handed to the waiter there or not. A master
    /// that did not answer keeps what it had. A round that finds the key handed to the
    /// waiter on a quorum is evidence newer than any failed confirm: nothing more is
    /// awaited.
    fn note_round(&mut self, round: &Round, quorum: usize) {
        let seen: Vec<usize> = round
            .replies
            .iter()
            .enumerate()
            .filter(|(_, reply)| matches!(reply, Some(Reply::Enqueued { handed: true, .. })))
            .map(|(i, _)| i)
            .collect();
        for (i, reply) in round.replies.iter().enumerate() {
            if matches!(reply, Some(Reply::Enqueued { .. }))
                && let Some(slot) = self.until.get_mut(i)
            {
                *slot = None;
            }
        }
        if seen.len() >= quorum {
            self.awaited.clear();
        }
        self.note_notices(&seen);
    }

    /// How many masters' evidence still holds.
    fn count(&self) -> usize {
        let now = Instant::now();
        self.until.iter().flatten().filter(|t| **t > now).count()
    }

    /// Forgets every piece: a failed confirm used them up. `refused` names the masters
    /// that refused it, one of which must give new evidence before the next confirm.
    fn forget(&mut self, refused: Vec<usize>) {
        self.until.iter_mut().for_each(|t| *t = None);
        self.awaited = refused;
    }
}

/// A refusal no quorum outvotes in a registration round: the name holds another kind
/// of lock (docs/design.md §11).
fn refused_kind(round: &Round) -> Option<&MasterError> {
    round.outcomes.iter().find_map(|o| match o {
        MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::WrongKind => Some(e),
        _ => None,
    })
}

/// Ends the call with the permanent wrong-kind error when a master of `round` found the
/// name holding another kind of lock.
fn wrong_kind(round: &Round, resource: &str, attempts: u32) -> Result<(), Error> {
    match refused_kind(round) {
        Some(e) => Err(Error::new(ErrorKind::WrongKind, resource)
            .with_detail(e.to_string())
            .with_attempts(attempts)),
        None => Ok(()),
    }
}

/// Queues the call `queue` describes and waits until it is handed the lock and confirms
/// it, or its budget ends; `total` counts its attempts.
pub(super) async fn wait(
    inner: &Arc<Inner>,
    queue: Queue<'_>,
    total: &mut u32,
) -> Result<Lease, Error> {
    let mut waiter = Waiter::join(inner, queue, total).await?;
    loop {
        let ticked = waiter.until_ready().await?;
        if let Some(lease) = waiter.confirm(ticked).await? {
            return Ok(lease);
        }
    }
}

/// A queued call, from its registration to its end.
struct Waiter<'a> {
    inner: &'a Arc<Inner>,
    target: &'a mut Target,
    plan: &'a Plan,
    /// The target's name, for traces and errors.
    name: Arc<str>,
    /// The lock's key.
    key: Arc<str>,
    /// The waiter id: 128 random bits, one per call, never a lease value.
    id: Arc<str>,
    /// Removes the registration from every master when the call ends (dropped before
    /// `handoffs`, which the router then forgets).
    leave: DequeueGuard,
    handoffs: Handoffs,
    registration: Registration,
    evidence: Evidence,
    /// The value every attempt reuses (`Mutant::ReuseValue`); `None` in the product.
    reused: Option<Arc<str>>,
    /// The attempts that spent the attempt budget so far.
    spent: u32,
    total: &'a mut u32,
    /// The refusal the call queued behind, reported while the masters answer.
    held: Error,
    /// What the call reports if it never gets the lock.
    last: Error,
    next_refresh: Instant,
    /// A refresh made during the pause after a failed confirm found the key handed on a
    /// quorum: the next confirm's attempt is already spent.
    ticked: bool,
    /// Confirms that failed in a row: each after the first pauses longer, so that a
    /// split between two waiters cannot loop hot.
    herd: u32,
}

impl<'a> Waiter<'a> {
    /// Registers the call on every master (a fair one first takes its ticket), subscribed
    /// to its hand-off notices before.
    async fn join(
        inner: &'a Arc<Inner>,
        queue: Queue<'a>,
        total: &'a mut u32,
    ) -> Result<Waiter<'a>, Error> {
        let Queue {
            target,
            plan,
            refused,
            tickets,
            reused,
            spent,
        } = queue;
        let Some(key) = target.first_key().cloned() else {
            return Err(refused);
        };
        let id: Arc<str> = plan.owner.value(&random_value()).into();
        let channel: Arc<str> = scripts::handoff_channel(&inner.owner.client).into();
        // Known to the router before it registers anywhere, and removed from every master
        // however the call ends (a lease included: the masters that did not grant it still
        // hold the registration).
        let handoffs = inner.notifier.waiter(Arc::clone(&id));
        let leave = DequeueGuard {
            inner: Arc::clone(inner),
            key: Arc::clone(&key),
            waiter: Arc::clone(&id),
            armed: true,
        };
        // Subscribed before registering: a hand-off after the registration reaches us.
        let subscribed = inner.notifier.keep_handoffs(&channel);
        if tokio::time::timeout_at(plan.give_up_at, subscribed)
            .await
            .is_err()
        {
            return Err(wait_timeout(refused, *total));
        }
        let registration = Registration {
            key: Arc::clone(&key),
            waiter: Arc::clone(&id),
            channel,
            // One above every counter read; a fair call writes it back strictly.
            score: tickets.iter().max().copied().unwrap_or(0).saturating_add(1),
            fair: plan.fair,
        };
        let config = &inner.config;
        let mut waiter = Waiter {
            inner,
            name: Arc::clone(&target.name),
            target,
            plan,
            key,
            id,
            leave,
            handoffs,
            registration,
            evidence: Evidence::new(inner.masters.len(), config.waiter_ttl),
            reused,
            spent,
            total,
            held: refused.clone(),
            last: refused,
            next_refresh: Instant::now(),
            ticked: false,
            herd: 0,
        };
        waiter.register().await?;
        tracing::trace!(
            target: TRACE_TARGET,
            resource = %waiter.traced(),
            rounds = *waiter.total,
            waiter = %waiter.id,
            score = waiter.registration.score,
            handed = waiter.evidence.count(),
            "acquire attempt failed, waiting in the queue"
        );
        Ok(waiter)
    }

    fn traced(&self) -> telemetry::Traced<'_> {
        telemetry::resource(&self.name, self.inner.config.trace_resource_names)
    }

    /// One registration round, not strict: an unfair call's first registration, a
    /// refresh, or a fair ticket sent everywhere after conflicts; decided by a quorum or
    /// the budget.
    async fn enqueue(&self) -> Round {
        let until = self.plan.give_up_at;
        enqueue(self.inner, &self.registration, false, until, self.traced()).await
    }

    /// The first registration: a fair call's ticket (docs/design.md §17), or an unfair
    /// call's registration with the score its refused attempt read.
    async fn register(&mut self) -> Result<(), Error> {
        let (inner, plan, total) = (self.inner, self.plan, *self.total);
        // The first refresh is due a period after the registration was sent (for a fair
        // ticket, after its first round was: sooner, never later).
        let period = inner.config.waiter_ttl / 3;
        self.next_refresh = Instant::now() + period;
        if !plan.fair {
            let round = self.enqueue().await;
            wrong_kind(&round, &self.name, total)?;
            self.evidence.note_round(&round, inner.quorum());
            return Ok(());
        }
        let traced = telemetry::resource(&self.name, inner.config.trace_resource_names);
        match issue_ticket(inner, &mut self.registration, plan, &mut self.spent, traced).await {
            Ok((round, retried)) => {
                wrong_kind(&round, &self.name, total)?;
                self.evidence.note_round(&round, inner.quorum());
                if retried {
                    // The rounds before the last may have left this waiter an older,
                    // smaller score on masters that refused the ticket it got at last:
                    // it would head their queues out of turn, and a release there
                    // would hand the key to it while the others hand it to the true
                    // head. Its ticket goes everywhere now, as a refresh would write
                    // it, so that the masters agree on the head (docs/design.md §17).
                    self.next_refresh = Instant::now() + period;
                    let round = self.enqueue().await;
                    wrong_kind(&round, &self.name, total)?;
                    self.evidence.note_round(&round, inner.quorum());
                }
                Ok(())
            }
            // The budget ran out among conflicts or a cut round: the lock was held.
            Err(None) => Err(wait_timeout(self.last.clone(), total)),
            // The masters failed the rounds without conflicts until the attempts or
            // the budget ran out: say how they failed, not that the lock was held.
            Err(Some(round)) => {
                wrong_kind(&round, &self.name, total)?;
                let (kind, _) = failure_kind(&round.outcomes, inner.quorum());
                Err(Error::new(kind, &*self.name)
                    .with_detail(format!("no fair ticket issued: {}", kind_word(kind)))
                    .with_masters(round.reports(&inner.masters))
                    .with_attempts(total))
            }
        }
    }

    /// Waits until the evidence says a confirm could be granted on a quorum of masters:
    /// hand-off notices, and the answers of the registration's refresh every third of
    /// `waiter_ttl`. Returns whether the refresh tick led to it (that tick spent the
    /// attempt the confirm makes).
    async fn until_ready(&mut self) -> Result<bool, Error> {
        let (inner, plan) = (self.inner, self.plan);
        loop {
            self.evidence.note_notices(&self.handoffs.fresh());
            if self.evidence.ready(inner.quorum()) {
                return Ok(std::mem::take(&mut self.ticked));
            }
            self.ticked = false;
            if Instant::now() >= plan.give_up_at {
                return Err(wait_timeout(self.last.clone(), *self.total));
            }
            let keys = [&*self.key];
            let woken = tokio::select! {
                () = self.handoffs.notified() => Woken::Notice,
                () = tokio::time::sleep_until(self.next_refresh.min(plan.give_up_at)) => {
                    Woken::Tick
                }
                () = inner.held.taken(&keys) => Woken::Taken,
            };
            match woken {
                Woken::Notice => {
                    tracing::trace!(
                        target: TRACE_TARGET,
                        resource = %self.traced(),
                        waiter = %self.id,
                        "hand-off notice"
                    );
                    continue;
                }
                Woken::Taken => {
                    // A lease of this client took the key while this call waited:
                    // waiting on would be waiting for ourselves (docs/design.md §14).
                    self.target
                        .check_held(&inner.held)
                        .map_err(|e| e.with_attempts(*self.total))?;
                    continue;
                }
                Woken::Tick => {}
            }
            if Instant::now() >= plan.give_up_at {
                return Err(wait_timeout(self.last.clone(), *self.total));
            }
            self.refresh().await?;
            if self.evidence.ready(inner.quorum()) {
                return Ok(true);
            }
            if self.spent >= plan.attempts {
                return Err(self.last.clone().with_attempts(*self.total));
            }
        }
    }

    /// Refreshes the registration. It also registers again on a master that lost the
    /// queue, with the same score, and gives a key that is free or handed to a queued
    /// waiter to the live head (docs/design.md §17). Woken by its timer, it spends the
    /// attempt budget as a timed retry does.
    async fn refresh(&mut self) -> Result<(), Error> {
        let inner = self.inner;
        *self.total += 1;
        self.spent += 1;
        // The period counts from the request, not from the round's end: a master's
        // registration lives a waiter TTL from when it was written, and a round held up
        // by one slow master must not postpone the next refresh on the others.
        let sent = Instant::now();
        let round = self.enqueue().await;
        self.next_refresh = sent + inner.config.waiter_ttl / 3;
        wrong_kind(&round, &self.name, *self.total)?;
        if let Some(last) = after_refresh(inner, &round, &self.name, &self.held) {
            self.last = last;
        }
        self.evidence.note_round(&round, inner.quorum());
        self.evidence.note_notices(&self.handoffs.fresh());
        tracing::trace!(
            target: TRACE_TARGET,
            resource = %self.traced(),
            waiter = %self.id,
            handed = self.evidence.count(),
            "registration refreshed"
        );
        Ok(())
    }

    /// Confirms a hand-off: one ordinary attempt from the waiter's own `t0`. The lease if
    /// it is granted; `None` to wait on after a failure the call survives.
    async fn confirm(&mut self, ticked: bool) -> Result<Option<Lease>, Error> {
        let (inner, plan) = (self.inner, self.plan);
        // A lease of this client took the key while this call waited: waiting on would be
        // waiting for ourselves.
        self.target
            .check_held(&inner.held)
            .map_err(|e| e.with_attempts(*self.total))?;
        *self.total += 1;
        let value = self
            .reused
            .clone()
            .unwrap_or_else(|| plan.owner.value(&random_value()).into());
        let started = Instant::now();
        let queue = Some((&self.id, plan.fair));
        match attempt(inner, self.target, value, plan, queue).await {
            Ok(lease) => {
                // The attempt removed the registration where the confirm was not
                // granted (the granting masters' script removed it).
                self.leave.armed = false;
                telemetry::handoff();
                Ok(Some(keep(lease, plan, inner)))
            }
            Err(failed) => {
                tracing::trace!(
                target: TRACE_TARGET,
                        resource = %self.traced(),
                        waiter = %self.id,
                        error = %failed.error,
                        "confirm failed"
                    );
                self.confirm_failed(failed, ticked, started).await?;
                Ok(None)
            }
        }
    }

    /// After a failed confirm: registers again where it was granted, before its value is
    /// released there; ends the call on an error retrying cannot help, on spent attempts
    /// or on the budget; otherwise forgets the evidence it acted on and pauses.
    async fn confirm_failed(
        &mut self,
        failed: Failed,
        ticked: bool,
        started: Instant,
    ) -> Result<(), Error> {
        let plan = self.plan;
        // The masters that refused the confirm (held by another value).
        let refused: Vec<usize> = failed
            .release
            .as_ref()
            .and_then(|release| release.outcomes.as_ref())
            .map(|outcomes| {
                outcomes
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| matches!(o, MasterOutcome::HeldByOther))
                    .map(|(i, _)| i)
                    .collect()
            })
            .unwrap_or_default();
        if let Some(release) = failed.release {
            self.register_again(release).await;
        }
        let error = failed.error.with_attempts(*self.total);
        if failed.cut {
            return Err(wait_timeout(self.last.clone(), *self.total));
        }
        // A failed confirm spends an attempt; one that a refresh led to belongs to that
        // timed tick, which spent it already.
        if !ticked {
            self.spent += 1;
        }
        if !error.is_retryable() || self.spent >= plan.attempts {
            return Err(error);
        }
        self.last = error;
        // The evidence it acted on is used up: the next confirm waits for a quorum of new
        // evidence, which the masters that granted this one (handing the key back on
        // release) cannot give alone: a master that refused must hand the key over, or a
        // refresh find it handed there.
        self.evidence.forget(refused);
        // Still registered. The first failure is most often a confirm that outran the
        // release to some masters, whose notices follow at once: no pause. Failing again,
        // it pauses a random spread, growing with each failure, so that a split between
        // two waiters cannot loop hot.
        // The registration is refreshed on time during the pause, which can outlast the
        // waiter TTL: a pause must not let it lapse.
        if self.herd > 0 {
            let pause = spread(started.elapsed(), self.herd - 1);
            let until = (Instant::now() + pause).min(plan.give_up_at);
            while self.next_refresh < until {
                tokio::time::sleep_until(self.next_refresh).await;
                self.refresh().await?;
                if self.evidence.ready(self.inner.quorum()) {
                    // The refresh found the key handed on a quorum: confirm now, the
                    // attempt this refresh spent being the confirm's (see `until_ready`).
                    self.ticked = true;
                    break;
                }
                if self.spent >= plan.attempts {
                    return Err(self.last.clone().with_attempts(*self.total));
                }
            }
            if !self.ticked {
                tokio::time::sleep_until(until).await;
            }
        }
        self.herd = (self.herd + 1).min(4);
        Ok(())
    }

    /// Each master that granted a failed confirm hands the key back to the waiter when
    /// its value is released there (if it is still the head): notices the waiter causes
    /// itself, which say nothing of the others. They are evidence for those masters only;
    /// the next confirm still needs evidence from a quorum (see `Evidence`). Where the
    /// confirm was granted, the waiter left the queue: it registers again there (same
    /// score) before `release` releases its value, so the release hands the key back to
    /// it if it is still the head, and no waiter behind it is served meanwhile. A master
    /// that refused it still holds the registration; the others (granted, or answer
    /// unknown) are exactly those the release goes to.
    async fn register_again(&self, release: AttemptGuard) {
        let inner = self.inner;
        let masters = release.holders();
        if !masters.is_empty() {
            let op = Arc::new(self.registration.op(inner, false));
            let bounds = Bounds {
                until: Some(self.plan.give_up_at),
                tracker: Some(&inner.background),
                every: true,
                late: false,
            };
            let need = masters.len();
            let _ = quorum::run(&masters, op, need, self.traced(), bounds).await;
        }
        drop(release);
    }
}

/// Issues a fair call's ticket, the registration's score (one above every counter
/// its refused attempt read): written back strictly until a quorum took it, each
/// conflict raising it past the counter met. Contenders that read the same counters
/// conflict with each other, so each conflict is followed by a random pause that grows
/// with the conflicts in a row (§6's spread), which pulls a burst apart; conflicts
/// spend no attempt, and only the wait budget ends them. A round that fails without a
/// conflict (masters down, abstaining or failing) is a failed attempt like any other:
/// it spends one of the call's attempts (`spent`) and pauses as the retry policy says.
/// Returns the round that issued the ticket (its answers say where the key is handed
/// to the waiter meanwhile) and whether a conflict made it retry (earlier rounds may
/// have written a smaller score); otherwise the last round the masters failed without
/// a conflict, if any, once the attempts or the budget ran out.
async fn issue_ticket(
    inner: &Inner,
    registration: &mut Registration,
    plan: &Plan,
    spent: &mut u32,
    traced: telemetry::Traced<'_>,
) -> Result<(Round, bool), Option<Round>> {
    let give_up_at = plan.give_up_at;
    let mut failed = None;
    let mut conflicts = 0u32;
    loop {
        if Instant::now() >= give_up_at {
            return Err(failed);
        }
        let started = Instant::now();
        let round = enqueue(inner, registration, true, give_up_at, traced).await;
        if round.decision == Decision::Reached {
            return Ok((round, conflicts > 0));
        }
        if refused_kind(&round).is_some() {
            return Err(Some(round));
        }
        let conflict = round
            .replies
            .iter()
            .flatten()
            .filter_map(|r| match r {
                Reply::Enqueued {
                    written: false,
                    counter: Some(c),
                    ..
                } => Some(*c),
                _ => None,
            })
            .max()
            .filter(|c| *c >= registration.score);
        let pause = match conflict {
            Some(counter) => {
                registration.score = counter.saturating_add(1);
                failed = None;
                conflicts += 1;
                spread(started.elapsed(), conflicts - 1)
            }
            // Cut by the budget: the masters decided nothing more.
            None if round.cut => return Err(failed),
            // Timeouts, abstentions or errors, with no conflict: a failed attempt; the
            // same ticket again after the retry policy's pause.
            None => {
                *spent += 1;
                if *spent >= plan.attempts {
                    return Err(Some(round));
                }
                failed = Some(round);
                inner.config.retry.delay(*spent)
            }
        };
        tokio::time::sleep_until((Instant::now() + pause).min(give_up_at)).await;
    }
}

/// One `Enqueue` round of `registration` to every master, decided by a quorum's
/// answers (`strict`: written) or at `until`; with every answer that came in time
/// when not strict, for the hand-off hints.
async fn enqueue(
    inner: &Inner,
    registration: &Registration,
    strict: bool,
    until: Instant,
    traced: telemetry::Traced<'_>,
) -> Round {
    let op = Arc::new(registration.op(inner, strict));
    let bounds = Bounds {
        until: Some(until),
        tracker: Some(&inner.background),
        every: !strict,
        late: false,
    };
    quorum::run(&inner.masters, op, inner.quorum(), traced, bounds).await
}

/// Removes a waiter's registration from every master in the background when its call
/// ends without the lock, however it ends (`cleanup::dequeue`). The confirm that gives
/// the lease disarms it: the attempt then dequeues only where that confirm was not
/// granted (`cleanup::after_grant`).
struct DequeueGuard {
    inner: Arc<Inner>,
    key: Arc<str>,
    waiter: Arc<str>,
    armed: bool,
}

impl Drop for DequeueGuard {
    fn drop(&mut self) {
        if self.armed {
            let targets = self.inner.masters.clone();
            cleanup::dequeue(&self.inner, targets, &self.key, &self.waiter);
        }
    }
}
