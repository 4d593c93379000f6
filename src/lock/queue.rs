//! The queued wait of the lock of one resource: hand-off to the next waiter, and the fair
//! lock (docs/design.md §17).
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
//! registration is removed from every master in the background (`Op::Dequeue`), which
//! also passes on a key handed to it meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Plan, Redlock, Target, failure_kind, kind_word, spread, wait_timeout};
use crate::core::{Inner, random_value};
use crate::error::{Error, ErrorKind, MasterError, MasterErrorKind, MasterOutcome};
use crate::lease::{Lease, Watchdog};
use crate::master::{Master, Op, Reply};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::quorum::{self, Bounds, Decision, Round};
use crate::{scripts, telemetry};

/// A call about to queue: what its refused attempt learnt.
pub(super) struct Queue<'a> {
    pub(super) target: &'a Target,
    pub(super) plan: &'a Plan,
    /// The refusal that made it queue; reported if it never gets the lock.
    pub(super) refused: Error,
    /// The ticket counters the refused attempt read (a quorum of them when fair).
    pub(super) tickets: &'a [u64],
    /// The value every attempt reuses ([`Mutant::ReuseValue`]); `None` in the product.
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
        #[cfg(not(feature = "mutants"))]
        let _ = inner;
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

impl Redlock {
    /// Queues the call `queue` describes and waits until it is handed the lock and
    /// confirms it, or its budget ends; `total` counts its attempts.
    pub(super) async fn wait_queued(
        &self,
        queue: Queue<'_>,
        total: &mut u32,
    ) -> Result<Lease, Error> {
        let Queue {
            target,
            plan,
            refused,
            tickets,
            reused,
            mut spent,
        } = queue;
        let inner = &self.inner;
        let config = &inner.config;
        let Some((_, key)) = target.keys.first() else {
            return Err(refused);
        };
        let keys = [&**key];
        let held_mode = target.shape.held_mode();
        let waiter: Arc<str> = random_value().into();
        let channel: Arc<str> = scripts::handoff_channel(&inner.owner.client).into();
        // Known to the router before it registers anywhere, and removed from every master
        // however the call ends (a lease included: the masters that did not grant it still
        // hold the registration).
        let mut handoffs = inner.notifier.waiter(Arc::clone(&waiter));
        let mut leave = DequeueGuard {
            inner: Arc::clone(inner),
            key: Arc::clone(key),
            waiter: Arc::clone(&waiter),
            left: Vec::new(),
        };
        // Subscribed before registering: a hand-off after the registration reaches us.
        let subscribed = inner.notifier.keep_handoffs(&channel);
        if tokio::time::timeout_at(plan.give_up_at, subscribed)
            .await
            .is_err()
        {
            return Err(wait_timeout(refused, *total));
        }
        let mut registration = Registration {
            key: Arc::clone(key),
            waiter: Arc::clone(&waiter),
            channel,
            // One above every counter read; a fair call writes it back strictly below.
            score: tickets.iter().max().copied().unwrap_or(0).saturating_add(1),
            fair: plan.fair,
        };
        let traced = || telemetry::resource(&target.name, config.trace_resource_names);
        let mut evidence = Evidence::new(inner.masters.len(), config.waiter_ttl);
        if plan.fair {
            match self
                .issue_ticket(&mut registration, plan, &mut spent, traced())
                .await
            {
                Ok((round, retried)) => {
                    wrong_kind(&round, &target.name, *total)?;
                    evidence.note_round(&round, inner.quorum);
                    if retried {
                        // The rounds before the last may have left this waiter an older,
                        // smaller score on masters that refused the ticket it got at last:
                        // it would head their queues out of turn, and a release there
                        // would hand the key to it while the others hand it to the true
                        // head. Its ticket goes everywhere now, as a refresh would write
                        // it, so that the masters agree on the head (docs/design.md §17).
                        let round = self
                            .enqueue(&registration, false, plan.give_up_at, traced())
                            .await;
                        wrong_kind(&round, &target.name, *total)?;
                        evidence.note_round(&round, inner.quorum);
                    }
                }
                // The budget ran out among conflicts or a cut round: the lock was held.
                Err(None) => return Err(wait_timeout(refused, *total)),
                // The masters failed the rounds without conflicts until the attempts or
                // the budget ran out: say how they failed, not that the lock was held.
                Err(Some(round)) => {
                    wrong_kind(&round, &target.name, *total)?;
                    let (kind, _) = failure_kind(&round.outcomes, inner.quorum);
                    let error = Error::new(kind, &*target.name)
                        .with_detail(format!("no fair ticket issued: {}", kind_word(kind)))
                        .with_masters(round.reports(&inner.masters))
                        .with_attempts(*total);
                    return Err(error);
                }
            }
        } else {
            let round = self
                .enqueue(&registration, false, plan.give_up_at, traced())
                .await;
            wrong_kind(&round, &target.name, *total)?;
            evidence.note_round(&round, inner.quorum);
        }
        tracing::trace!(
            resource = %traced(),
            rounds = *total,
            %waiter,
            score = registration.score,
            handed = evidence.count(),
            "acquire attempt failed, waiting in the queue"
        );
        let refresh_every = config.waiter_ttl / 3;
        let mut next_refresh = Instant::now() + refresh_every;
        let held = refused.clone();
        let mut last = refused;
        // Confirms that failed in a row: each after the first pauses longer, so that a
        // split between two waiters cannot loop hot.
        let mut herd = 0u32;
        loop {
            evidence.note_notices(&handoffs.fresh());
            // A confirm that the refresh tick led to is that tick's attempt.
            let mut ticked = false;
            if !evidence.ready(inner.quorum) {
                if Instant::now() >= plan.give_up_at {
                    return Err(wait_timeout(last, *total));
                }
                let woken = tokio::select! {
                    () = handoffs.notified() => Woken::Notice,
                    () = tokio::time::sleep_until(next_refresh.min(plan.give_up_at)) => {
                        Woken::Tick
                    }
                    () = inner.held.taken(&keys) => Woken::Taken,
                };
                match woken {
                    Woken::Notice => {
                        tracing::trace!(resource = %traced(), %waiter, "hand-off notice");
                        continue;
                    }
                    Woken::Taken => {
                        // A lease of this client took the key while this call waited:
                        // waiting on would be waiting for ourselves (docs/design.md §14).
                        inner
                            .held
                            .check(&target.name, &keys, held_mode)
                            .map_err(|e| e.with_attempts(*total))?;
                        continue;
                    }
                    Woken::Tick => {}
                }
                if Instant::now() >= plan.give_up_at {
                    return Err(wait_timeout(last, *total));
                }
                // Also registers again on a master that lost the queue, with the same
                // score, and gives a key that is free or handed to a queued waiter to the
                // live head (docs/design.md §17). Woken
                // by its timer, it spends the attempt budget as a timed retry does.
                *total += 1;
                spent += 1;
                let round = self
                    .enqueue(&registration, false, plan.give_up_at, traced())
                    .await;
                next_refresh = Instant::now() + refresh_every;
                wrong_kind(&round, &target.name, *total)?;
                last = self.after_refresh(&round, &target.name, &held, last);
                evidence.note_round(&round, inner.quorum);
                evidence.note_notices(&handoffs.fresh());
                tracing::trace!(
                    resource = %traced(),
                    %waiter,
                    handed = evidence.count(),
                    "registration refreshed"
                );
                if !evidence.ready(inner.quorum) {
                    if spent >= plan.attempts {
                        return Err(last.with_attempts(*total));
                    }
                    continue;
                }
                ticked = true;
            }
            // A lease of this client took the key while this call waited: waiting on
            // would be waiting for ourselves.
            inner
                .held
                .check(&target.name, &keys, held_mode)
                .map_err(|e| e.with_attempts(*total))?;
            *total += 1;
            let value = reused.clone().unwrap_or_else(|| random_value().into());
            let started = Instant::now();
            match self
                .attempt(target, value, plan, Some((&waiter, plan.fair)))
                .await
            {
                Ok(lease) => {
                    // Where the confirm was granted, the script removed the registration
                    // already; a master still pending removes it when it grants, and one
                    // that refuses keeps it: only the others need the `Dequeue`.
                    leave.left = lease
                        .masters()
                        .iter()
                        .map(|r| matches!(r.outcome(), MasterOutcome::Granted))
                        .collect();
                    if plan.watchdog {
                        lease.start_watchdog(Watchdog {
                            interval: config.extend_interval(plan.ttl),
                            give_up_at: plan.max_hold.and_then(|m| Instant::now().checked_add(m)),
                            round_time: config.node_timeout,
                        });
                    }
                    telemetry::handoff();
                    return Ok(lease);
                }
                Err(failed) => {
                    tracing::trace!(
                        resource = %traced(),
                        %waiter,
                        error = %failed.error,
                        "confirm failed"
                    );
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
                        // Each master that granted the confirm hands the key back to the
                        // waiter when its value is released there (if it is still the
                        // head): notices the waiter causes itself, which say nothing of
                        // the others. They are evidence for those masters only; the next
                        // confirm still needs evidence from a quorum (see `Evidence`).
                        // Where the confirm was granted, the waiter left the queue: it
                        // registers again there (same score) before its value is
                        // released, so the release hands the key back to it if it is
                        // still the head, and no waiter behind it is served meanwhile.
                        // A master that refused it still holds the registration; the
                        // others (granted, or answer unknown) are exactly those the
                        // release goes to.
                        let masters: Vec<Arc<dyn Master>> = match &release.outcomes {
                            Some(outcomes) => inner
                                .masters
                                .iter()
                                .zip(outcomes)
                                .filter(|(_, o)| !matches!(o, MasterOutcome::HeldByOther))
                                .map(|(m, _)| Arc::clone(m))
                                .collect(),
                            None => inner.masters.clone(),
                        };
                        if !masters.is_empty() {
                            let op = Arc::new(registration.op(inner, false));
                            let bounds = Bounds {
                                until: Some(plan.give_up_at),
                                tracker: Some(&inner.background),
                                every: true,
                                late: false,
                            };
                            let need = masters.len();
                            let _ = quorum::run(&masters, op, need, traced(), bounds).await;
                        }
                        drop(release);
                    }
                    let error = failed.error.with_attempts(*total);
                    if failed.cut {
                        return Err(wait_timeout(last, *total));
                    }
                    // A failed confirm spends an attempt; one that a refresh led to
                    // belongs to that timed tick, which spent it already.
                    if !ticked {
                        spent += 1;
                    }
                    if !error.is_retryable() || spent >= plan.attempts {
                        return Err(error);
                    }
                    last = error;
                    // The evidence it acted on is used up: the next confirm waits for a
                    // quorum of new evidence, which the masters that granted this one
                    // (handing the key back on release) cannot give alone: a master that
                    // refused must hand the key over, or a refresh find it handed there.
                    evidence.forget(refused);
                    // Still registered. The first failure is most often a confirm that
                    // outran the release to some masters, whose notices follow at once:
                    // no pause. Failing again, it pauses a random spread, growing with
                    // each failure, so that a split between two waiters cannot loop hot.
                    if herd > 0 {
                        let pause = spread(started.elapsed(), herd - 1);
                        tokio::time::sleep_until((Instant::now() + pause).min(plan.give_up_at))
                            .await;
                    }
                    herd = (herd + 1).min(4);
                }
            }
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
        &self,
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
            let round = self.enqueue(registration, true, give_up_at, traced).await;
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
                    self.inner.config.retry.delay(*spent)
                }
            };
            tokio::time::sleep_until((Instant::now() + pause).min(give_up_at)).await;
        }
    }

    /// One `Enqueue` round of `registration` to every master, decided by a quorum's
    /// answers (`strict`: written) or at `until`; with every answer that came in time
    /// when not strict, for the hand-off hints.
    async fn enqueue(
        &self,
        registration: &Registration,
        strict: bool,
        until: Instant,
        traced: telemetry::Traced<'_>,
    ) -> Round {
        let inner = &self.inner;
        let op = Arc::new(registration.op(inner, strict));
        let bounds = Bounds {
            until: Some(until),
            tracker: Some(&inner.background),
            every: !strict,
            late: false,
        };
        quorum::run(&inner.masters, op, inner.quorum, traced, bounds).await
    }
}

/// Removes a waiter's registration from every master in the background when its call
/// ends, however it ends (`Op::Dequeue`, which passes on a key handed to it meanwhile).
/// Without a runtime nothing is sent: the registration expires with `waiter_ttl`.
struct DequeueGuard {
    inner: Arc<Inner>,
    key: Arc<str>,
    waiter: Arc<str>,
    /// By master: `true` where the registration is known to be gone already (the
    /// granting masters of the confirm that gave the lease), skipped.
    left: Vec<bool>,
}

impl Drop for DequeueGuard {
    fn drop(&mut self) {
        #[cfg(feature = "mutants")]
        if self.inner.config.planted.is(Mutant::DequeueNeverSent) {
            return;
        }
        let op = Arc::new(Op::Dequeue {
            key: Arc::clone(&self.key),
            waiter: Arc::clone(&self.waiter),
            channel: scripts::release_channel(&self.key).into(),
        });
        let masters: Vec<Arc<dyn Master>> = self
            .inner
            .masters
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.left.get(*i).copied().unwrap_or(false))
            .map(|(_, m)| Arc::clone(m))
            .collect();
        if masters.is_empty() {
            return;
        }
        let need = masters.len();
        let resource = self
            .key
            .strip_prefix(self.inner.config.key_prefix.as_str())
            .unwrap_or(&self.key)
            .to_owned();
        let shown = self.inner.config.trace_resource_names;
        let inner = Arc::clone(&self.inner);
        self.inner.spawn(async move {
            let resource = telemetry::resource(&resource, shown);
            // A master that answers first that it had nothing to pass on decides the
            // round; the others are still awaited, by a task `Redlock::shutdown` waits for.
            let bounds = inner.cleanup_bounds();
            let _ = quorum::run(&masters, op, need, resource, bounds).await;
        });
    }
}
