//! The rounds of a lease: extension, release and downgrade, serialised by the lease's
//! `ops` lock (docs/design.md §4, I7 and I8), and the state the handle reads.

use super::*;

impl LeaseShared {
    pub(super) fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// The deadline minus the safety margin: where the lease counts as lost.
    pub(super) fn safety_point(&self, state: &LeaseState) -> Instant {
        state
            .deadline
            .checked_sub(self.safety_margin)
            .unwrap_or(state.deadline)
    }

    pub(crate) fn mark_lost(&self, reason: LostReason) {
        self.state.send_if_modified(|s| {
            let first = s.lost.is_none();
            if first {
                s.lost = Some(reason);
                // Counted before the loss is signalled: whoever wakes on it (a critical
                // section dropped by `with_lock`) finds the count already there.
                if let Some(label) = reason.metric_label() {
                    telemetry::lease_lost(label);
                }
            }
            first
        });
    }

    /// This lease's resource name as traces show it.
    pub(crate) fn traced(&self) -> telemetry::Traced<'_> {
        telemetry::resource(&self.name, self.inner.config.trace_resource_names)
    }

    pub(super) fn lost_error(&self, reason: LostReason) -> Error {
        Error::new(ErrorKind::LeaseLost, &*self.name).with_detail(reason.to_string())
    }

    /// The first key (the only one of a single-key lease).
    pub(super) fn first(&self) -> Option<&LeaseKey> {
        self.keys.first()
    }

    /// The extension of every key to `ttl`: the single-key script for one key (exactly as
    /// a mutex always extended), the all-or-none multi-key script for several, so that a
    /// master counts only if it extended every key (docs/design.md §14, I14).
    pub(super) fn extend_op(&self, ttl: Duration) -> Op {
        let inner = &self.inner;
        match &*self.keys {
            // A read lease keeps its lock's reader index alive with its own key, so that
            // writers keep seeing it (docs/design.md §16, I17).
            [one] if self.mode == LeaseMode::Read => {
                let lock = scripts::lock_of_reader(&one.key, &self.value).unwrap_or_default();
                Op::ExtendRead {
                    key: Arc::clone(&one.key),
                    lock: lock.into(),
                    value: Arc::clone(&self.value),
                    ttl,
                    epoch: inner.config.quarantine,
                }
            }
            [one] => Op::Extend {
                key: Arc::clone(&one.key),
                value: Arc::clone(&self.value),
                ttl,
                epoch: inner.config.quarantine,
            },
            keys => Op::ExtendMany {
                keys: keys.iter().map(|k| Arc::clone(&k.key)).collect(),
                value: Arc::clone(&self.value),
                ttl,
                epoch: inner.config.quarantine,
            },
        }
    }

    /// The release of every key, each announced on its channel.
    pub(super) fn release_op(&self) -> Op {
        let keys: Vec<(Arc<str>, Arc<str>)> = self
            .keys
            .iter()
            .map(|k| (Arc::clone(&k.key), Arc::clone(&k.channel)))
            .collect();
        // A plain lock's lease value has no owner record and is no waiter's id.
        Op::release_keys(&keys, &self.value, self.mode == LeaseMode::Exclusive)
    }

    /// One extension round; see [`LeaseHandle::extend_with`].
    pub(crate) async fn extend(self: &Arc<Self>, ttl: Duration) -> Result<ExtendReport, Error> {
        let inner = &self.inner;
        let resource = &*self.name;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::new(ErrorKind::NoRuntime, resource).with_detail(
                "extend must be called inside a tokio runtime (features rt, time, net)",
            ));
        }
        // Checked as given: cut to whole milliseconds, a sub-millisecond TTL would read
        // as zero.
        let given = ttl;
        let ttl = deadline::whole_millis(ttl);
        inner
            .config
            .check_ttl(given)
            .and_then(|()| inner.config.check_ttl_max(ttl))
            .map_err(|e| {
                Error::new(ErrorKind::InvalidOptions, resource).with_detail(e.to_string())
            })?;
        // The round runs in a task of its own, which holds the lease's extend/release lock
        // until the round is decided: a caller that stops polling (or drops) this future
        // can never keep a release waiting behind it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(self);
        let spawned = inner.spawn(async move {
            let _ = tx.send(shared.extend_round(ttl).await);
        });
        if !spawned {
            return Err(Error::new(ErrorKind::NoRuntime, resource)
                .with_detail("extend must be called inside a tokio runtime"));
        }
        match rx.await {
            Ok(outcome) => outcome,
            // The runtime shut down under the round.
            Err(_) => Err(Error::new(ErrorKind::LeaseLost, resource)
                .with_detail("the runtime stopped before the extension was decided")),
        }
    }

    /// The extension round itself, under the extend/release lock.
    pub(super) async fn extend_round(&self, ttl: Duration) -> Result<ExtendReport, Error> {
        let inner = &self.inner;
        let resource = &*self.name;
        let released = self.ops.lock().await;
        if *released {
            return Err(self.lost_error(LostReason::Released));
        }
        let before = self.state();
        let now = Instant::now();
        if let Some(reason) = before.lost {
            return Err(self.lost_error(reason));
        }
        if now >= self.safety_point(&before) {
            self.mark_lost(LostReason::Expired);
            let detail = format!(
                "its safety point passed {} ago; an expired lease is never extended",
                human(now - self.safety_point(&before))
            );
            return Err(Error::new(ErrorKind::LeaseLost, resource).with_detail(detail));
        }

        // The masters that apply this extension expire at `t0 + ttl` or later. When that is
        // earlier than the current deadline, the lease must shrink before the first request
        // leaves: if the round fails or this future is dropped, those masters still expire
        // early, and the lease must not promise more than they hold.
        let t0 = Instant::now();
        let shrink = true;
        #[cfg(redquorum_mutants)]
        let shrink =
            shrink && !crate::mutants::planted(&inner.owner.client).is(Mutant::ShrinkKeepsDeadline);
        if shrink {
            let bound = inner.lease_deadline(t0, ttl).unwrap_or(t0);
            self.state.send_if_modified(|s| {
                let shrink = bound < s.deadline;
                if shrink {
                    s.deadline = bound;
                }
                shrink
            });
        }
        let op = Arc::new(self.extend_op(ttl));
        let round = quorum::run(
            &inner.masters,
            op,
            inner.quorum(),
            self.traced(),
            inner.bounds(None),
        )
        .await;
        drop(released);
        let reports = round.reports(&inner.masters);
        let now = Instant::now();
        let new_deadline = inner
            .lease_deadline(round.t0, ttl)
            .filter(|dl| deadline::validity_left(*dl, now, self.safety_margin).is_some());

        match (round.decision, new_deadline) {
            (Decision::Reached, Some(deadline)) => {
                let mut lost = None;
                self.state.send_modify(|s| {
                    // A concurrent loss wins: a lost lease stays lost.
                    match s.lost {
                        None => s.deadline = deadline,
                        Some(reason) => lost = Some(reason),
                    }
                });
                let deadline = self.state().deadline;
                if let Some(reason) = lost {
                    return Err(self.lost_error(reason).with_masters(reports));
                }
                Ok(ExtendReport {
                    deadline,
                    masters: reports,
                })
            }
            (decision, _) => {
                self.mark_lost(LostReason::ExtendFailed);
                let detail = if decision == Decision::Reached {
                    "a quorum confirmed the extension too late to leave any validity"
                } else {
                    "no quorum confirmed the extension"
                };
                Err(Error::new(ErrorKind::LeaseLost, resource)
                    .with_detail(detail)
                    .with_masters(reports))
            }
        }
    }

    /// Releases on every master, once; `None` when it was released before. Callers mark
    /// the lease lost first (synchronously), so that no extension starts meanwhile.
    ///
    /// # Cancel safety
    /// Dropped while its round is in flight, the round runs again in a background task
    /// (compare-and-delete is idempotent): a request not yet written when the future was
    /// dropped still reaches its master. Dropped before the round starts, nothing is
    /// marked released: callers that must release anyway pair it with a fallback
    /// ([`Lease::release`](super::Lease::release)).
    pub(super) async fn release(self: &Arc<Self>) -> Option<quorum::Round> {
        let mut released = self.ops.lock().await;
        if *released {
            return None;
        }
        *released = true;
        self.mark_lost(LostReason::Released);
        // Dropped during the round: it runs again in a background task.
        let resend = Fallback::new({
            let shared = Arc::clone(self);
            move || {
                let inner = Arc::clone(&shared.inner);
                let spawned = inner.spawn(async move {
                    shared.release_round().await;
                });
                if !spawned {
                    tracing::debug!(
                        "no runtime to finish a dropped release: the lock expires with its TTL"
                    );
                }
            }
        });
        let round = self.release_round().await;
        resend.disarm();
        self.note_handed_on(&round);
        Some(round)
    }

    /// Notes a lock that the release `round` handed to the next waiter on enough masters
    /// that this client's next acquire of it would be refused (`n - quorum + 1`, the
    /// masters the round waited for): that acquire queues at once (docs/design.md §17).
    fn note_handed_on(&self, round: &quorum::Round) {
        let [key] = &self.keys[..] else {
            return;
        };
        let tickets: Vec<u64> = round
            .replies
            .iter()
            .filter_map(|reply| match reply {
                Some(Reply::HandedOn { ticket }) => Some(*ticket),
                _ => None,
            })
            .collect();
        let inner = &self.inner;
        if tickets.len() > inner.masters.len() - inner.quorum() {
            inner.handed_on.note(&key.key, tickets, Instant::now());
        }
    }

    /// The release round itself: compare-and-delete on every master, decided once
    /// `n - quorum + 1` masters confirmed; the rest finish in the background, tracked for
    /// `Redlock::shutdown`.
    async fn release_round(&self) -> quorum::Round {
        let inner = &self.inner;
        let op = Arc::new(self.release_op());
        // Cleared on n - quorum + 1 masters: at most quorum - 1 can still hold our value.
        let need = inner.masters.len() - inner.quorum() + 1;
        quorum::run(&inner.masters, op, need, self.traced(), inner.bounds(None)).await
    }

    /// The downgrade round (see [`Lease::downgrade`]), under the extend/release lock; on
    /// failure both forms of the lease are released in the background.
    pub(super) async fn downgrade(self: &Arc<Self>) -> Result<Lease, Error> {
        let inner = &self.inner;
        let resource = &*self.name;
        let Some(writer) = self.first().cloned() else {
            return Err(self.lost_error(LostReason::Released));
        };
        let reader = LeaseKey {
            key: scripts::reader_key(&writer.key, &self.value).into(),
            ..writer.clone()
        };
        let release_both = || {
            let keys = [
                (Arc::clone(&writer.key), Arc::clone(&writer.channel)),
                (Arc::clone(&reader.key), Arc::clone(&reader.channel)),
            ];
            for key in keys {
                crate::core::release_in_background(
                    inner,
                    inner.masters.clone(),
                    &[key],
                    &self.value,
                );
            }
        };
        let mut released = self.ops.lock().await;
        if *released {
            return Err(self.lost_error(LostReason::Released));
        }
        *released = true;
        let before = self.state();
        if let Some(reason) = before.lost {
            drop(released);
            release_both();
            return Err(self.lost_error(reason));
        }
        if Instant::now() >= self.safety_point(&before) {
            self.mark_lost(LostReason::Expired);
            drop(released);
            release_both();
            return Err(self.lost_error(LostReason::Expired));
        }
        // No extension of the write lease runs from here: the watchdog stops.
        self.mark_lost(LostReason::Released);
        let op = Arc::new(Op::RwDowngrade {
            key: Arc::clone(&writer.key),
            value: Arc::clone(&self.value),
        });
        let round = quorum::run(
            &inner.masters,
            op,
            inner.quorum(),
            self.traced(),
            inner.bounds(Some(before.deadline)),
        )
        .await;
        drop(released);
        let reports = round.reports(&inner.masters);
        let valid = deadline::validity_left(before.deadline, Instant::now(), self.safety_margin);
        if round.decision != Decision::Reached || valid.is_none() {
            release_both();
            let detail = match round.decision {
                Decision::Reached => {
                    "a quorum converted the write lease too late to leave any validity"
                }
                _ => {
                    "no quorum converted the write lease: it is lost, and released on every master"
                }
            };
            return Err(Error::new(ErrorKind::LeaseLost, resource)
                .with_detail(detail)
                .with_masters(reports));
        }
        let lease = Lease::new(
            Arc::clone(inner),
            LeaseParams {
                keys: vec![reader],
                mode: LeaseMode::Read,
                value: Arc::clone(&self.value),
                ttl: self.ttl,
                deadline: before.deadline,
                safety_margin: self.safety_margin,
                acquired: reports,
            },
        );
        if let Some(watchdog) = self.watchdog.get() {
            lease.start_watchdog(*watchdog);
        }
        // The client now holds the lock for reading (docs/design.md §14, §16); the write
        // lease's exclusive entry goes with it.
        let claim = inner
            .held
            .claim(&[Arc::clone(&writer.key)], crate::held::HeldMode::Shared);
        Ok(lease.with_claim(claim))
    }

    /// Marks the lease released now (lost, with the watchdog stopped, and counted).
    pub(super) fn mark_released(&self) {
        telemetry::released(|| {
            let state = self.state();
            (
                state.deadline,
                state.lost.is_none().then(|| self.safety_point(&state)),
            )
        });
        self.mark_lost(LostReason::Released);
    }

    /// Marks the lease released now and runs the release round in a background task, so
    /// that it finishes even when the caller stops waiting. The receiver gets the round;
    /// `None` without a tokio runtime (the keys then expire with their TTL).
    pub(super) fn release_in_background(
        self: &Arc<Self>,
    ) -> Option<tokio::sync::oneshot::Receiver<Option<quorum::Round>>> {
        self.mark_released();
        self.spawn_release()
    }

    /// Runs the release round in a background task, unless it ran already; see
    /// [`release_in_background`](Self::release_in_background).
    pub(super) fn spawn_release(
        self: &Arc<Self>,
    ) -> Option<tokio::sync::oneshot::Receiver<Option<quorum::Round>>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(self);
        #[cfg(redquorum_mutants)]
        if crate::mutants::planted(&self.inner.owner.client).is(Mutant::NoBackgroundRelease) {
            let _ = tx.send(None);
            return Some(rx);
        }
        let spawned = self.inner.spawn(async move {
            let round = shared.release().await;
            let _ = tx.send(round);
        });
        spawned.then_some(rx)
    }
}
