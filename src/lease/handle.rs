//! What a critical section holds: the read-only view of a lease, its lost signal, and
//! extension (docs/design.md §4, §5).

use super::*;

impl LeaseHandle {
    /// The locked resource's name (without the key prefix); for a lease over several
    /// resources, the first of [`resources`](LeaseHandle::resources).
    pub fn resource(&self) -> &str {
        self.shared.first().map_or("", |k| &k.resource)
    }

    /// Every resource this lease holds, in the order their keys were locked (sorted for
    /// [`Redlock::acquire_many`](crate::Redlock::acquire_many)); one for a single lock.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.shared.keys.iter().map(|k| &*k.resource)
    }

    /// The key on the masters (`key_prefix` + resource); for a lease over several
    /// resources, the first one's.
    pub fn key(&self) -> &str {
        self.shared.first().map_or("", |k| &k.key)
    }

    /// The lease's name in errors and traces: its resource, or its resources joined.
    pub(crate) fn name(&self) -> &str {
        &self.shared.name
    }

    /// What this lease holds: an exclusive lock, a read or write lock, or permits.
    pub fn mode(&self) -> LeaseMode {
        self.shared.mode
    }

    /// The semaphore slots this lease holds, one per permit, in increasing order
    /// ([`Semaphore::acquire`](crate::Semaphore::acquire)); empty for any other lease.
    pub fn permits(&self) -> Vec<u32> {
        if self.shared.mode != LeaseMode::Permits {
            return Vec::new();
        }
        // A slot's key ends with its number (docs/design.md §15).
        self.shared
            .keys
            .iter()
            .filter_map(|k| k.key.rsplit(':').next()?.parse().ok())
            .collect()
    }

    /// Every key this lease holds, for the lock family's facades.
    #[allow(dead_code, reason = "for the facades of other lock types")]
    pub(crate) fn lease_keys(&self) -> &[LeaseKey] {
        &self.shared.keys
    }

    /// The random value identifying this acquisition on the masters.
    pub fn value(&self) -> &str {
        &self.shared.value
    }

    /// The TTL the lock was set (and is extended) with.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// The instant the lease stops being valid.
    pub fn deadline(&self) -> Instant {
        self.shared.state().deadline
    }

    /// The validity left now; zero once the deadline passed or the lease is lost.
    pub fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Whether the lease can no longer be relied on: its deadline passed, or it is lost
    /// ([`is_lost`](LeaseHandle::is_lost)).
    pub fn is_expired(&self) -> bool {
        self.is_lost() || Instant::now() >= self.deadline()
    }

    /// The fencing token of this acquisition, when it was acquired with fencing on: larger
    /// than the token of every earlier acquisition of the resource. Extensions keep it.
    /// For a lease over several resources, the token of the first
    /// ([`fencing_tokens`](LeaseHandle::fencing_tokens) has each one's).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.shared.first().and_then(|k| k.token)
    }

    /// Each resource's fencing token, when acquired with fencing on: one counter per
    /// resource, so each token is larger than that of every earlier acquisition of *its*
    /// resource. Empty without fencing.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, FencingToken)> + '_ {
        self.shared
            .keys
            .iter()
            .filter_map(|k| k.token.map(|t| (&*k.resource, t)))
    }

    /// How long before the deadline the lease counts as lost.
    pub fn safety_margin(&self) -> Duration {
        self.shared.safety_margin
    }

    /// Whether the lease is lost (see [`Lease`] for when exactly): cheap and synchronous,
    /// for checks inside a critical section.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease is lost, if it is.
    pub fn lost_reason(&self) -> Option<LostReason> {
        let state = self.shared.state();
        state.lost.or_else(|| {
            (Instant::now() >= self.shared.safety_point(&state)).then_some(LostReason::Expired)
        })
    }

    /// A future that resolves when the lease is lost, with the reason. Race it with the
    /// critical section (`tokio::select!`) to stop the work before the lock can expire.
    ///
    /// It follows extensions: each one moves the moment it waits for.
    ///
    /// # Cancel safety
    /// Dropping it has no effect on the lease.
    pub fn lost(&self) -> Lost {
        let mut state = self.shared.state.subscribe();
        let margin = self.shared.safety_margin;
        Lost {
            inner: async move {
                loop {
                    let current = *state.borrow_and_update();
                    if let Some(reason) = current.lost {
                        return reason;
                    }
                    let safety_point = current
                        .deadline
                        .checked_sub(margin)
                        .unwrap_or(current.deadline);
                    tokio::select! {
                        changed = state.changed() => {
                            if changed.is_err() {
                                return LostReason::Released;
                            }
                        }
                        () = tokio::time::sleep_until(safety_point) => {
                            return LostReason::Expired;
                        }
                    }
                }
            }
            .boxed(),
        }
    }

    /// Extends the lease by the TTL it was acquired with; see
    /// [`extend_with`](LeaseHandle::extend_with).
    ///
    /// # Errors
    /// As for [`extend_with`](LeaseHandle::extend_with).
    ///
    /// # Cancel safety
    /// As for [`extend_with`](LeaseHandle::extend_with).
    pub async fn extend(&self) -> Result<ExtendReport, Error> {
        self.shared.extend(self.shared.ttl).await
    }

    /// Sets the lock's remaining time on every master to `ttl`, where it still holds our
    /// value. A missing key is never set again (it expired there, the master lost it, or
    /// an operator force-unlocked the lock: [`Redlock::force_unlock_any`](crate::Redlock::force_unlock_any)),
    /// so a force-unlocked lease is lost at its next extension. Needs a quorum; the new
    /// deadline is measured from this round's own start.
    ///
    /// A lease past its safety point, lost or released is never extended: the masters are
    /// not asked.
    ///
    /// # Errors
    /// [`ErrorKind::LeaseLost`] when the lease was already lost, or when no quorum
    /// confirmed the extension in time (the lease is then lost:
    /// [`is_lost`](LeaseHandle::is_lost)); [`ErrorKind::InvalidOptions`] when `ttl` is too
    /// short for the drift allowance and node timeout.
    ///
    /// A `ttl` shorter than the time left shortens the lease: before the first request
    /// leaves, the deadline becomes the earlier of the old one and `now + ttl - drift`,
    /// whatever the round's outcome, because the masters that apply it expire early.
    ///
    /// # Cancel safety
    /// The round runs in a background task: dropping the future only stops waiting for
    /// its report, and the extension still takes effect as decided. It never leaves the
    /// lease promising more than the masters hold: a shortening takes effect before the
    /// first request is sent, and a lengthening only once a quorum confirmed it.
    pub async fn extend_with(&self, ttl: Duration) -> Result<ExtendReport, Error> {
        self.shared.extend(ttl).await
    }
}
