//! One acquire attempt (docs/design.md §3): a fresh value sent to every master in one
//! round, granted when a quorum set it with validity left, then the fencing write-back
//! (§8) and the lease. Whatever the attempt set is released again, in the background,
//! unless it became a lease (I5: [`AttemptGuard`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::cleanup::{self, masters_where};
use super::fence::write_back;
use super::intent::clear_intent_after_grant;
use super::target::{Ask, Kind, Seen, Target, Tokens};
use crate::core::{Inner, release_in_background};
use crate::deadline;
use crate::engine::Plan;
use crate::engine::failure::{classify, refusal};
use crate::error::{Error, ErrorKind, MasterOutcome, MasterReport, human};
use crate::lease::{Lease, LeaseParams};
use crate::master::Master;
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;
use crate::quorum::{self, Bounds, Decision, Round};
use crate::{scripts, telemetry};

/// A failed attempt, with what a waiter needs to know.
pub(crate) struct Failed {
    pub(crate) error: Error,
    /// When enough of the holder's keys expire for a quorum to be free, if known; for
    /// several keys, when the longest-held of them is free.
    pub(crate) holder_free_at: Option<Instant>,
    /// The wait budget ended the round before the masters decided it.
    pub(crate) cut: bool,
    /// What the round showed of the holders.
    pub(crate) seen: Seen,
    /// A queued waiter's confirm keeps the release of what it was granted to its caller,
    /// which first registers the waiter again where the grant removed it (docs/design.md
    /// §17); dropped, it releases. `None`: released already.
    pub(crate) release: Option<AttemptGuard>,
}

/// One attempt on `target` with `value`: the acquire round and, with fencing, the
/// write-back. With `queue` (a waiter id, empty before the call queued, and whether the
/// acquisition is fair), the lock of one resource is taken as a queued waiter or fair
/// contender (docs/design.md §17).
pub(crate) async fn attempt(
    inner: &Arc<Inner>,
    target: &Target,
    value: Arc<str>,
    plan: &Plan,
    queue: Option<(&Arc<str>, bool)>,
) -> Result<Lease, Failed> {
    let config = &inner.config;
    let ask = target.ask(&value, plan, queue);
    let mut guard = AttemptGuard {
        inner: Arc::clone(inner),
        keys: ask.keys.iter().map(|k| Arc::clone(&k.holds)).collect(),
        channel: ask.channel.clone(),
        value: Arc::clone(&value),
        outcomes: None,
        armed: true,
    };
    // A queued waiter's confirm: its id (empty before the call queued).
    let waiter = queue.map(|(waiter, _)| waiter).filter(|w| !w.is_empty());
    let queued = waiter.is_some();
    // A writer, and a queued waiter, learn how their stragglers answered, to clear the
    // intent or the registration where they did not grant (`cleanup::after_grant`).
    let bounds = Bounds {
        late: queued || matches!(target.kind, Kind::Write(_)),
        ..inner.bounds(Some(plan.give_up_at))
    };
    let traced = telemetry::resource(&target.name, config.trace_resource_names);
    let op = Arc::clone(&ask.op);
    let round = quorum::run(&inner.masters, op, inner.quorum(), traced, bounds).await;
    let reports = round.reports(&inner.masters);
    let seen = target.seen(&round);
    // A queued waiter's failed confirm hands its release to the caller (see `Failed`).
    let failed = |error: Error, cut: bool, seen: Seen, guard: AttemptGuard| Failed {
        error,
        holder_free_at: None,
        cut,
        seen,
        release: queued.then_some(guard),
    };

    // A master whose cluster record disagrees with this client, or a name that holds
    // another kind of lock, or a semaphore stored under another limit: refuse whatever
    // was granted (the guard releases it).
    if let Some((kind, detail)) = refusal(&reports) {
        guard.outcomes = Some(round.outcomes);
        let error = Error::new(kind, &*target.name)
            .with_detail(target.refusal_detail(kind, detail))
            .with_masters(reports);
        return Err(failed(error, false, seen, guard));
    }
    if round.decision != Decision::Reached {
        return Err(refused(inner, target, round, reports, seen, guard, queued));
    }
    let deadline = match valid_until(inner, &round, plan) {
        Ok(deadline) => deadline,
        Err(detail) => {
            guard.outcomes = Some(round.outcomes);
            let error = Error::new(ErrorKind::ValidityExhausted, &*target.name)
                .with_detail(detail)
                .with_masters(reports);
            return Err(failed(error, false, seen, guard));
        }
    };
    let tokens = match tokens(inner, target, (&ask, &value), &round, plan, deadline).await {
        Ok(tokens) => tokens,
        Err((error, cut)) => {
            guard.outcomes = Some(round.outcomes);
            // Cut by the wait budget: what the acquire round said is the more useful report.
            let error = match cut {
                true => error.with_masters(reports),
                false => error,
            };
            return Err(failed(error, cut, seen, guard));
        }
    };
    guard.disarm();
    match (&target.kind, target.first_key(), waiter) {
        (Kind::Write(intent), Some(key), _) => {
            clear_intent_after_grant(inner, key, &intent.id, &round.outcomes, round.late);
        }
        (_, Some(key), Some(waiter)) => {
            let (key, waiter) = (Arc::clone(key), Arc::clone(waiter));
            cleanup::after_grant(inner, &round.outcomes, round.late, move |inner, left| {
                cleanup::dequeue(inner, masters_where(inner, left), &key, &waiter);
            });
        }
        _ => {}
    }
    let claim = target.claim(&inner.held, &ask.keys);
    let lease = Lease::new(
        Arc::clone(inner),
        LeaseParams {
            keys: target.lease_keys(&ask, tokens),
            mode: target.mode(),
            value,
            ttl: plan.ttl,
            deadline,
            safety_margin: config.safety_margin(plan.ttl),
            acquired: reports,
        },
    );
    Ok(lease.with_claim(claim))
}

/// The deadline of a granted `round` (docs/design.md §3): `t0 + ttl − drift`, if more
/// than the least validity is left of it now; otherwise why not.
fn valid_until(inner: &Inner, round: &Round, plan: &Plan) -> Result<Instant, String> {
    let config = &inner.config;
    let (now, ttl) = (Instant::now(), plan.ttl);
    let t0 = round.t0;
    #[cfg(redquorum_mutants)]
    let t0 = match crate::mutants::planted(&inner.owner.client).is(Mutant::IgnoreElapsed) {
        true => now,
        false => t0,
    };
    let least = config.least_validity(ttl);
    let valid = inner
        .lease_deadline(t0, ttl)
        .filter(|dl| deadline::validity_left(*dl, now, least).is_some());
    valid.ok_or_else(|| {
        format!(
            "the round took {} of a {} TTL (drift allowance {})",
            human(now - round.t0),
            human(ttl),
            human(deadline::drift(ttl, config.drift_factor))
        )
    })
}

/// The fencing tokens of a granted `round`, one per key (docs/design.md §8, §14): each
/// key's counter written back on its own, all at once, within the lease's validity, until
/// one fails. The error says whether the wait budget cut a write-back.
async fn tokens(
    inner: &Inner,
    target: &Target,
    (ask, value): (&Ask, &Arc<str>),
    round: &Round,
    plan: &Plan,
    deadline: Instant,
) -> Result<Vec<Option<u64>>, (Error, bool)> {
    match ask.tokens {
        Tokens::Skip => return Ok(vec![None; ask.keys.len()]),
        #[cfg(redquorum_mutants)]
        Tokens::OneRound => return Ok(vec![Some(round.fence_counters().max().unwrap_or(0))]),
        Tokens::WriteBack => {}
    }
    let least = inner.config.least_validity(plan.ttl);
    let floors = target.own_floors(round);
    let write_backs = ask.keys.iter().enumerate().map(|(i, key)| {
        // A reader writes back through its own key; the counter is the lock's
        // (docs/design.md §16).
        write_back(
            inner,
            (&key.holds, &key.lock),
            target.fence_name(key),
            value,
            (target.first_token(round, i), &floors),
            (deadline, least),
            plan.give_up_at,
        )
    });
    // The first failure ends them all: the acquisition fails with it, and the write-backs
    // of the other keys are dropped (a counter raised meanwhile only moves forward).
    let tokens = futures::future::try_join_all(write_backs).await?;
    Ok(tokens.into_iter().map(Some).collect())
}

/// The failure of a `round` that no quorum granted: contention, an outage, masters in
/// restart quarantine, or failures that last until a configuration changes.
fn refused(
    inner: &Inner,
    target: &Target,
    round: Round,
    reports: Vec<MasterReport>,
    seen: Seen,
    mut guard: AttemptGuard,
    queued: bool,
) -> Failed {
    let (kind, fixes, voters_at) = classify(&reports, &round.outcomes, inner.quorum());
    let detail = fixes.or_else(|| match (kind, voters_at) {
        (_, Some(_)) => Some(
            "too few masters vote yet: the others are in restart quarantine, because they \
             may have lost lock keys (new masters abstain once, for ttl_max)"
                .to_owned(),
        ),
        (ErrorKind::Contended, None) => target.contended_detail(),
        _ => None,
    });
    let holder_free_at = round
        .holder_free_in(inner.quorum())
        .and_then(|d| round.t0.checked_add(d));
    let cut = round.cut;
    guard.outcomes = Some(round.outcomes);
    let mut error = Error::new(kind, &*target.name).with_masters(reports);
    if let Some(detail) = detail {
        error = error.with_detail(detail);
    }
    if let Some(at) = voters_at {
        error = error.with_retry_at(at);
    }
    Failed {
        error,
        holder_free_at,
        cut,
        seen,
        release: queued.then_some(guard),
    }
}

/// Releases an attempt's value in the background unless the attempt became a lease:
/// on failure, and when the acquire future is dropped mid-round.
pub(crate) struct AttemptGuard {
    inner: Arc<Inner>,
    /// The keys that hold the attempt's value (one, or several for `acquire_many`, or a
    /// semaphore's slots).
    keys: Vec<Arc<str>>,
    /// The release notice of every key (a semaphore's slots share one); `None`: each
    /// key's own channel.
    channel: Option<Arc<str>>,
    value: Arc<str>,
    /// The round's outcomes when known: masters that refused never set our value and
    /// are skipped. `None` (cancelled mid-round): release everywhere.
    pub(crate) outcomes: Option<Vec<MasterOutcome>>,
    armed: bool,
}

impl AttemptGuard {
    fn disarm(mut self) {
        self.armed = false;
    }

    /// The masters that may hold the attempt's value: every one but those that refused
    /// it (they never set it); every one while the round's outcomes are unknown.
    pub(crate) fn holders(&self) -> Vec<Arc<dyn Master>> {
        match &self.outcomes {
            Some(outcomes) => self
                .inner
                .masters
                .iter()
                .zip(outcomes)
                .filter(|(_, o)| !matches!(o, MasterOutcome::HeldByOther))
                .map(|(m, _)| Arc::clone(m))
                .collect(),
            None => self.inner.masters.clone(),
        }
    }
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let targets = self.holders();
        let keys: Vec<(Arc<str>, Arc<str>)> = self
            .keys
            .iter()
            .map(|k| {
                let channel = match &self.channel {
                    Some(shared) => Arc::clone(shared),
                    None => scripts::release_channel(k).into(),
                };
                (Arc::clone(k), channel)
            })
            .collect();
        release_in_background(&self.inner, targets, &keys, &self.value);
    }
}
