//! Freeing a stuck lock by hand: [`Redlock::force_unlock`] deletes one holder's value,
//! [`Redlock::force_unlock_any`] whatever holds the lock.
//!
//! - `force_unlock(resource, value)` deletes only keys holding `value` (the release
//!   script's compare-and-delete), so a newer holder that got in meanwhile keeps its lock.
//!   `force_unlock_any(resource)` deletes whatever holds the lock and raises its fence
//!   counter: an operator's last resort.
//! - A force-unlocked holder learns it at its next extension: an extension never sets a
//!   missing key again, so it finds its value on no quorum and fails
//!   ([`LostReason::ExtendFailed`](crate::LostReason::ExtendFailed)); its watchdog
//!   signals the loss and [`Redlock::with_lock`] drops the work.
//! - **Force-unlocking a live holder breaks exclusion, by design**: until its next
//!   extension the holder still has validity by its own clock, and a new holder can get
//!   in meanwhile. Fencing tokens are what protect the data then: the new holder's token
//!   is larger than the old one's (the old one had its token before the new attempt
//!   began), so a fenced storage refuses the old holder's writes once the new holder has
//!   used its token. `force_unlock_any` also raises the fence counter on every master it
//!   reaches, so the counters move past the old holder's token
//!   ([`UnlockReport::fence_counter`] is above it) and the unlock shows in them.

use std::fmt;
use std::sync::Arc;

use super::ask_all;
use crate::client::Redlock;
use crate::core::Inner;
use crate::core::{check_resource, check_runtime};
use crate::engine::permanent_failure;
use crate::error::{
    Error, ErrorKind, MasterError, MasterErrorKind, MasterOutcome, MasterReport, OneLine, ShortName,
};
use crate::master::{Op, Reply};
use crate::scripts;
use crate::telemetry;

/// The target of the force-unlocks' warning events, as docs/observability.md lists them:
/// the module they were first traced from, so that operators' log filters keep working.
const TRACE_TARGET: &str = "redquorum::operate";

/// What [`Redlock::force_unlock`] or [`Redlock::force_unlock_any`] did on each master.
#[derive(Debug, Clone)]
pub struct UnlockReport {
    resource: String,
    masters: Vec<MasterReport>,
    removed: Vec<Option<String>>,
    fence_counter: Option<u64>,
}

impl UnlockReport {
    /// The lock's resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// What each master did: [`MasterOutcome::Granted`] where the lock was deleted,
    /// [`MasterOutcome::Missing`] where nothing held it, [`MasterOutcome::HeldByOther`]
    /// where another value holds it and was left alone (`force_unlock` only), and
    /// [`MasterOutcome::Failed`] where the master did not answer in time or holds another
    /// kind of lock ([`MasterErrorKind::WrongKind`]). Every master is waited for.
    pub fn masters(&self) -> &[MasterReport] {
        &self.masters
    }

    /// On how many masters a lock key was deleted.
    pub fn deleted(&self) -> usize {
        self.removed.iter().flatten().count()
    }

    /// The values deleted, each once, in the order of the masters.
    pub fn removed(&self) -> Vec<&str> {
        let mut values: Vec<&str> = Vec::new();
        for value in self.removed.iter().flatten() {
            if !values.contains(&value.as_str()) {
                values.push(value);
            }
        }
        values
    }

    /// After [`force_unlock_any`](Redlock::force_unlock_any): the largest fence counter
    /// among the masters that answered, after it raised each by one. When the call
    /// succeeded and the force-unlocked holder had a fencing token, this number is larger
    /// than that token: the token's write-back reached a quorum, which shares a master with
    /// the `N - quorum + 1` that answered (durable masters that never lost data, as
    /// fencing assumes). It is not a token: a later one may be smaller, if this counter
    /// stood on a minority of masters. `None` after [`force_unlock`](Redlock::force_unlock),
    /// which leaves the counters alone.
    pub fn fence_counter(&self) -> Option<u64> {
        self.fence_counter
    }
}

impl fmt::Display for UnlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let removed = self.removed();
        if removed.is_empty() {
            write!(
                f,
                "force-unlock of {}: nothing deleted",
                ShortName(&self.resource)
            )?;
        } else {
            write!(
                f,
                "force-unlock of {}: deleted {} on {} of {} masters",
                ShortName(&self.resource),
                removed
                    .iter()
                    .map(|v| OneLine(v).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.deleted(),
                self.masters.len()
            )?;
        }
        if let Some(counter) = self.fence_counter {
            write!(f, "; fence counter raised to {counter}")?;
        }
        for (report, removed) in self.masters.iter().zip(&self.removed) {
            write!(f, "; {}: ", report.master())?;
            match (report.outcome(), removed) {
                (_, Some(value)) => write!(f, "deleted {}", OneLine(value))?,
                (MasterOutcome::Missing, _) => f.write_str("nothing held it")?,
                (MasterOutcome::HeldByOther, _) => f.write_str("another value, left alone")?,
                (outcome, _) => write!(f, "{outcome}")?,
            }
        }
        Ok(())
    }
}

impl Redlock {
    /// Deletes the lock on `resource` where it holds `value` (compare-and-delete, as a
    /// release does) and publishes the release notice there, so that waiters try at once.
    /// A newer holder that got in meanwhile is untouched: its keys hold another value.
    /// Take `value` from an [`inspect`](Redlock::inspect) of the stuck lock.
    ///
    /// The holder, if it is still alive, learns it at its next extension, which fails
    /// ([`LostReason::ExtendFailed`](crate::LostReason::ExtendFailed)); until then it may
    /// still work under its lease: see [`force_unlock_any`](Redlock::force_unlock_any)
    /// on what that means for exclusion. Restart quarantine does not hold it back: every
    /// master that may hold the value is asked. Every master is waited for (each for at
    /// most the connect plus the node timeout), and the report says what each did.
    ///
    /// On a read-write lock it deletes a writer holding `value`, never a reader: a stuck
    /// reader frees its place when its own key expires (docs/design.md §16).
    ///
    /// Succeeds once `N - quorum + 1` masters answered (deleted, missing, or holding
    /// another value): at most `quorum - 1` can then still hold `value`, so no quorum
    /// does. Logged as a warning event.
    ///
    /// # Errors
    /// - [`ErrorKind::NoQuorum`] (retryable) when fewer than `N - quorum + 1` masters
    ///   answered: the lock may still be held; the error's masters say where it was
    ///   deleted. Call it again once they are reachable.
    /// - [`ErrorKind::WrongKind`] (permanent) when another kind of lock holds the name on
    ///   so many masters that the others are too few, whether they answered or not.
    /// - [`ErrorKind::Tls`], [`ErrorKind::Auth`], [`ErrorKind::Misconfigured`] (permanent)
    ///   when masters whose failure lasts until a setting changes, with those holding
    ///   another kind of lock, leave too few able to answer; the detail says what to
    ///   change on each. [`ErrorKind::ClusterMismatch`] when a master's cluster record
    ///   disagrees with this client's settings.
    /// - Before any master is asked: [`ErrorKind::InvalidResource`] for a name `acquire`
    ///   refuses, [`ErrorKind::InvalidOptions`] for an empty `value`,
    ///   [`ErrorKind::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// The deletes run in a background task: dropping the future only stops waiting for
    /// the report, and every master is still asked. [`Redlock::shutdown`] waits for it.
    ///
    /// # Example
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// let inspection = client.inspect("orders:42").await?;
    /// if let Some(value) = inspection.holder() {
    ///     let report = client.force_unlock("orders:42", value).await?;
    ///     println!("{report}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self, resource: &str, value: &str) -> Result<UnlockReport, Error> {
        check_runtime(resource)?;
        check_resource(&self.inner.config.key_prefix, resource)?;
        if value.is_empty() {
            return Err(Error::new(ErrorKind::InvalidOptions, resource)
                .with_detail("the value is empty: pass the value an inspection reported"));
        }
        // Readers keep the mark under the name while any may hold (docs/design.md §16):
        // deleting it would let a mutex in beside live readers.
        if value == scripts::READERS_MARK {
            return Err(Error::new(ErrorKind::InvalidOptions, resource).with_detail(
                "this value is the readers' mark of a read-write lock, not a holder's value: \
                 readers are never force-unlocked; their keys expire with their TTL",
            ));
        }
        let key: Arc<str> = format!("{}{resource}", self.inner.config.key_prefix).into();
        let op = Op::Release {
            channel: scripts::release_channel(&key).into(),
            key,
            value: value.into(),
            // A value an operator read may be a writer's, a permit's or a waiter's id.
            plain: false,
        };
        self.unlock(resource, op).await
    }

    /// Deletes whatever holds the lock on `resource` (and its owner record), raises its
    /// fence counter by one on every master, publishes the release notice, and logs a
    /// warning event naming the values removed. For operators, when a lock must go
    /// whoever holds it; prefer [`force_unlock`](Redlock::force_unlock) with the value an
    /// inspection showed, which cannot hit a newer holder. A name held by another kind of
    /// lock is left alone.
    ///
    /// **Unlocking a live holder breaks exclusion, by design.** The holder learns it at
    /// its next extension (which fails, since an extension never sets a missing key
    /// again; its watchdog then signals the loss and `with_lock` drops the work), but
    /// until then it still has validity by its own clock, and a new holder may get in.
    /// Fencing tokens are for that: the new holder's token is larger than the old
    /// holder's, so a fenced storage refuses the old holder's writes once the new holder
    /// has used its token. The fence counter is raised on every master reached, so the
    /// counters move past the old holder's token ([`UnlockReport::fence_counter`] is
    /// above it) and the unlock shows in them.
    ///
    /// On a read-write lock's name it deletes nothing: a writer, or the readers' mark that
    /// readers keep in the lock key, is another kind of lock ([`ErrorKind::WrongKind`]
    /// where it holds a quorum); stuck readers free their places when their own keys
    /// expire (docs/design.md §16).
    ///
    /// Succeeds once `N - quorum + 1` masters answered, as for `force_unlock`: then the
    /// deletes and the raised counters reach a master of every quorum. Restart
    /// quarantine does not hold it back. Every master is waited for (each for at most the
    /// connect plus the node timeout).
    ///
    /// # Errors
    /// As for [`force_unlock`](Redlock::force_unlock), without the value.
    ///
    /// # Cancel safety
    /// As for [`force_unlock`](Redlock::force_unlock): dropping the future only stops
    /// waiting for the report.
    ///
    /// # Example
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// let report = client.force_unlock_any("orders:42").await?;
    /// println!("{report}");
    /// if let Some(counter) = report.fence_counter() {
    ///     println!("fence counter raised to {counter}: above the old holder's token");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock_any(&self, resource: &str) -> Result<UnlockReport, Error> {
        check_runtime(resource)?;
        check_resource(&self.inner.config.key_prefix, resource)?;
        let key: Arc<str> = format!("{}{resource}", self.inner.config.key_prefix).into();
        let op = Op::ForceUnlock {
            channel: scripts::release_channel(&key).into(),
            key,
        };
        self.unlock(resource, op).await
    }

    /// Runs a force-unlock `op` on every master from a background task, and judges the
    /// report.
    async fn unlock(&self, resource: &str, op: Op) -> Result<UnlockReport, Error> {
        let inner = Arc::clone(&self.inner);
        let client = self.clone();
        let op = Arc::new(op);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let name = resource.to_owned();
        let spawned = self.inner.spawn(async move {
            // Never on masters of another cluster, twins or strangers (docs/design.md
            // §11); checked in the task too, so that a dropped future changes nothing
            // about what the unlock does.
            if let Err(refused) = client.check_agreement(&name, false).await {
                let _ = tx.send(Err(refused));
                return;
            }
            let answers = ask_all(&inner, &op).await;
            let report = UnlockReport::of(name, &inner, &op, &answers);
            let shown = inner.config.trace_resource_names;
            match &*op {
                Op::ForceUnlock { .. } => tracing::warn!(
                    target: TRACE_TARGET,
                    resource = %telemetry::resource(&report.resource, shown),
                    removed = ?report.removed(),
                    deleted = report.deleted(),
                    fence_counter = ?report.fence_counter,
                    "force-unlock: deleted whatever held the lock, and raised its fence counter"
                ),
                _ => tracing::warn!(
                    target: TRACE_TARGET,
                    resource = %telemetry::resource(&report.resource, shown),
                    removed = ?report.removed(),
                    deleted = report.deleted(),
                    "force-unlock of one holder's value"
                ),
            }
            let _ = tx.send(Ok(report));
        });
        if !spawned {
            return Err(Error::new(ErrorKind::NoRuntime, resource)
                .with_detail("force-unlock must be called inside a tokio runtime"));
        }
        let report = rx.await.map_err(|_| {
            Error::new(ErrorKind::NoRuntime, resource)
                .with_detail("the runtime stopped before the force-unlock was decided")
        })??;
        let n = self.inner.masters.len();
        let need = n - self.inner.quorum() + 1;
        let answered = report
            .masters
            .iter()
            .filter(|r| !matches!(r.outcome(), MasterOutcome::Failed(_)))
            .count();
        if answered >= need {
            return Ok(report);
        }
        let failed = |kind| {
            report
                .masters
                .iter()
                .filter(|r| matches!(r.outcome(), MasterOutcome::Failed(e) if e.kind() == kind))
                .count()
        };
        // Another kind of lock is the error only where it alone keeps too few masters
        // answering: then no retry can help. Otherwise masters were out of reach.
        let other_kind = failed(MasterErrorKind::WrongKind);
        // Failures that last until a setting changes (TLS, refused credentials, an unfit
        // master), where they keep too few masters answering together with another kind
        // of lock, which no call changes either: as for a lock.
        let spare = (n - need).saturating_sub(other_kind);
        let permanent = permanent_failure(&report.masters, spare);
        let kind = if n - other_kind < need {
            ErrorKind::WrongKind
        } else if let Some((kind, _)) = &permanent {
            *kind
        } else {
            ErrorKind::NoQuorum
        };
        let done = match report.deleted() {
            0 => "nothing was deleted".to_owned(),
            k => format!("{} was deleted on {k}", report.removed().join(", ")),
        };
        // Another kind of lock is no master out of reach: calling again changes nothing.
        let detail = if kind == ErrorKind::WrongKind {
            format!(
                "another kind of lock holds the name on {other_kind} of {n} masters, and a \
                 force-unlock deletes only a lock's key; {done}"
            )
        } else if let Some((_, fixes)) = permanent {
            let also = match other_kind {
                0 => String::new(),
                k => format!("; another kind of lock holds the name on {k} of {n} masters"),
            };
            format!("{fixes}{also}; {done}")
        } else {
            let also = if other_kind > 0 {
                format!(" (another kind of lock holds the name on {other_kind} of them)")
            } else {
                String::new()
            };
            format!(
                "{answered} of {n} masters answered and {need} must, so that no quorum can \
                 still hold the lock{also}; {done}: call it again once the others are \
                 reachable"
            )
        };
        Err(Error::new(kind, resource)
            .with_detail(detail)
            .with_masters(report.masters))
    }
}

impl UnlockReport {
    /// The report of a force-unlock from every master's answer.
    fn of(
        resource: String,
        inner: &Inner,
        op: &Op,
        answers: &[Result<Reply, MasterError>],
    ) -> Self {
        // A compare-and-delete deletes the one value it names.
        let named = match op {
            Op::Release { value, .. } => Some(value.to_string()),
            _ => None,
        };
        let mut masters = Vec::with_capacity(answers.len());
        let mut removed = Vec::with_capacity(answers.len());
        let mut fence_counter: Option<u64> = None;
        for (master, answer) in inner.masters.iter().zip(answers) {
            let (outcome, value) = match answer {
                Ok(Reply::Granted | Reply::HandedOn { .. }) => {
                    (MasterOutcome::Granted, named.clone())
                }
                Ok(Reply::Missing) => (MasterOutcome::Missing, None),
                Ok(Reply::HeldByOther) => (MasterOutcome::HeldByOther, None),
                Ok(Reply::ForceUnlocked {
                    removed: Some(value),
                    counter,
                }) => {
                    fence_counter = fence_counter.max(Some(*counter));
                    (MasterOutcome::Granted, Some(value.clone()))
                }
                Ok(Reply::ForceUnlocked {
                    removed: None,
                    counter,
                }) => {
                    fence_counter = fence_counter.max(Some(*counter));
                    (MasterOutcome::Missing, None)
                }
                Ok(other) => (
                    MasterOutcome::Failed(MasterError::new(
                        MasterErrorKind::Protocol,
                        format!("answered {other:?} to a force-unlock"),
                    )),
                    None,
                ),
                Err(error) => (MasterOutcome::Failed(error.clone()), None),
            };
            masters.push(MasterReport::new(Arc::clone(master.name()), outcome));
            removed.push(value);
        }
        UnlockReport {
            resource,
            masters,
            removed,
            fence_counter,
        }
    }
}
