//! The mutex: the lock of one resource on a quorum of masters (docs/design.md §3, I4),
//! waited for (§6, §17) and fenced (§8): [`Redlock::acquire`], [`Redlock::try_acquire`],
//! [`Redlock::acquire_with`], [`Redlock::with_lock`].
//!
//! A facade over the acquire engine: it checks what it is given, names its target (the
//! key of one resource, `Kind::Mutex`) and lets the engine take it. Layer: a facade,
//! beside `many`, `semaphore` and `rwlock`, none of which it uses (docs/design.md §10).

use std::future::Future;

use crate::client::Redlock;
use crate::core::{check_resource, check_runtime};
use crate::engine::{self, AcquireOptions, Kind, Plan, Target};
use crate::error::Error;
use crate::lease::{Lease, LeaseHandle};

impl Redlock {
    /// Acquires the lock on `resource`, retrying per the client's retry policy.
    ///
    /// Each attempt sends `SET key value NX PX ttl` to every master at once with a fresh
    /// 128-bit random value, and succeeds when a quorum granted it with validity left
    /// (`t0 + ttl - drift` is still ahead by more than the safety margin). A failed attempt
    /// is released on every master that may have set it.
    ///
    /// While the lock is held by another client, the caller waits: subscribed to the lock's
    /// release notices (unless `notifications` is off), it tries again as soon as the
    /// holder releases, when the holder's key expires, or after `retry_delay` (growing with
    /// [`Backoff::Exponential`](crate::Backoff)) plus uniform random jitter — whichever
    /// comes first. Attempts are bounded by `retry_attempts` and by the wait budget.
    ///
    /// With [`Waiting::handoff`](crate::Waiting::handoff) on (the default), the caller queues instead once an
    /// attempt found the lock held: it registers on every master, in about the order of
    /// arrival (one above the queue's ticket counter its attempt read), and the holder's release
    /// hands the lock to the first live waiter in the queue and wakes it alone; that waiter
    /// then confirms with an ordinary attempt of its own (its validity counted from that
    /// attempt) once a quorum of masters handed it the key, while the others go on
    /// waiting. A waiter refreshes its registration every third of `waiter_ttl`, which
    /// also hands it a lock whose holder vanished without releasing, once the holder's key
    /// expired. Each refresh, and each confirm that failed, spends the attempt budget as a
    /// timed retry does.
    ///
    /// # Errors
    /// After the last attempt: [`ErrorKind::Contended`](crate::ErrorKind::Contended) (held by another client),
    /// [`ErrorKind::NoQuorum`](crate::ErrorKind::NoQuorum) (masters failed or did not answer),
    /// [`ErrorKind::NotEnoughVoters`](crate::ErrorKind::NotEnoughVoters) (masters in restart quarantine) or
    /// [`ErrorKind::ValidityExhausted`](crate::ErrorKind::ValidityExhausted) (a quorum answered too late). When the wait budget
    /// runs out: [`ErrorKind::WaitTimeout`](crate::ErrorKind::WaitTimeout) if the last attempt found the lock held, and
    /// otherwise the kind of the last attempt's failure, [`ErrorKind::NoQuorum`](crate::ErrorKind::NoQuorum) when
    /// the masters are down or unreachable, so that an outage never reads as contention.
    /// Each with every master's outcome in the last attempt.
    /// At once, without further attempts, when so many masters fail for a reason that
    /// lasts that no quorum is possible: [`ErrorKind::Auth`](crate::ErrorKind::Auth) (a password or ACL refused),
    /// [`ErrorKind::Tls`](crate::ErrorKind::Tls) (a TLS handshake failed: an untrusted certificate, a wrong host)
    /// or [`ErrorKind::Misconfigured`](crate::ErrorKind::Misconfigured) (masters that can evict lock keys never vote).
    /// Before any master is asked: [`ErrorKind::InvalidResource`](crate::ErrorKind::InvalidResource) for an empty name or one
    /// longer than [`MAX_RESOURCE_LEN`](crate::limits::MAX_RESOURCE_LEN) bytes,
    /// [`ErrorKind::NoRuntime`](crate::ErrorKind::NoRuntime) when polled outside a tokio runtime, and
    /// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld) when this client (or a clone) holds `resource` with a
    /// lease it has not released or dropped: re-enter that lease with
    /// [`Lease::reenter`] instead (unless the client was built with
    /// [`Waiting::own_leases`](crate::Waiting::own_leases), which waits for it like any holder). The same
    /// error ends a waiting call as soon as a lease of this client takes the resource.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no key behind beyond its TTL: the attempt in flight is
    /// released on every master in the background, and its subscription is dropped. A
    /// queued waiter's registration is removed from every master in the background too,
    /// passing on a lock handed to it meanwhile.
    pub async fn acquire(&self, resource: &str) -> Result<Lease, Error> {
        self.acquire_with(resource, &AcquireOptions::default())
            .await
    }

    /// Makes a single acquire attempt: one quorum round, no retry, no waiting.
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire), after one attempt.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire).
    pub async fn try_acquire(&self, resource: &str) -> Result<Lease, Error> {
        self.acquire_with(resource, &AcquireOptions::new().attempts(1))
            .await
    }

    /// Acquires the lock on `resource` with per-call options; see
    /// [`acquire`](Redlock::acquire).
    ///
    /// # Errors
    /// As for [`acquire`](Redlock::acquire); also [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions) when the
    /// options do not fit the client (a TTL too short for the drift allowance, node
    /// timeout and safety margin, or above `ttl_max`; zero attempts; a zero `max_hold`;
    /// a duration above its `MAX_*` limit; a label longer than
    /// [`MAX_LABEL_LEN`](crate::limits::MAX_LABEL_LEN) or holding a control character, a
    /// Unicode line separator or a direction override).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Redlock::acquire).
    pub async fn acquire_with(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let inner = &self.inner;
        engine::acquire(inner, || {
            check_runtime(resource)?;
            check_resource(&inner.config.key_prefix, resource)?;
            let plan = Plan::new(inner, resource, options)?;
            Ok((Target::one(&inner.config, resource, Kind::Mutex), plan))
        })
        .await
    }

    /// Runs `work` while holding the lock on `resource`, and releases it afterwards.
    ///
    /// Acquires per `options` (waiting as [`acquire`](Redlock::acquire) does), starts the
    /// watchdog so the lease is extended while `work` runs, and races `work` with the
    /// lease's [`lost`](LeaseHandle::lost) signal: if the lease is lost — an extension
    /// failed, the safety point passed before one succeeded, or `max_hold` was reached —
    /// `work` is **dropped at that moment** (it does not go on without the lock) and the
    /// call returns [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost). The loss is signalled a safety margin before
    /// the deadline, so the work stops while the lock is still held.
    ///
    /// The lock is released when `work` finishes, and also when it panics or when the
    /// future returned here is dropped (released in the background then).
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::AcquireOptions;
    /// use std::time::Duration;
    ///
    /// let options = AcquireOptions::new().wait_timeout(Duration::from_secs(5));
    /// let receipt = client
    ///     .with_lock("orders:42", &options, |lease| async move {
    ///         // Charge the card. If the lock is lost meanwhile, this future is dropped.
    ///         format!("charged while holding {}", lease.resource())
    ///     })
    ///     .await?;
    /// # let _ = receipt;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Whatever [`acquire_with`](Redlock::acquire_with) returns when the lock cannot be
    /// taken, and [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when it is lost while `work` runs. A failure to
    /// release after `work` finished is not an error (the lock expires with its TTL at the
    /// latest); it is logged.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        options: &AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().watchdog(true);
        let lease = self.acquire_with(resource, &options).await?;
        engine::hold(&self.inner, lease, resource, work).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::config::Builder;
    use crate::error::{ErrorKind, MasterErrorKind};
    use crate::master::{Master, Op};
    use crate::wait::Notifier;

    /// A durable, long-running master that grants every acquire, releases, and answers
    /// each fencing write-back from a script (the last answer repeats).
    #[derive(Debug)]
    struct Scripted {
        name: Arc<str>,
        fence: std::sync::Mutex<Vec<Result<crate::master::FenceOutcome, ()>>>,
    }

    impl Master for Scripted {
        fn name(&self) -> &Arc<str> {
            &self.name
        }

        fn call(
            &self,
            sent: Arc<crate::master::Outgoing>,
        ) -> futures::future::BoxFuture<
            'static,
            Result<crate::master::Reply, crate::error::MasterError>,
        > {
            use crate::master::{EpochReport, FenceOutcome, Reply};
            let epoch = EpochReport {
                record: Some("e:1".to_owned()),
            };
            let reply = match &**sent.op() {
                Op::AcquireChecked { .. } => Ok(Reply::Checked {
                    granted: true,
                    epoch,
                    fence: Some(0),
                    holder_ttl: None,
                    ticket: None,
                }),
                Op::Fence { .. } => {
                    let mut script = self.fence.lock().unwrap_or_else(|e| e.into_inner());
                    let next = if script.len() > 1 {
                        script.remove(0)
                    } else {
                        script[0]
                    };
                    match next {
                        Ok(outcome) => Ok(Reply::Fenced {
                            outcome,
                            before: (outcome == FenceOutcome::Conflict).then_some(0),
                            epoch,
                        }),
                        Err(()) => Err(crate::error::MasterError::new(
                            MasterErrorKind::Timeout,
                            "no answer within the node timeout",
                        )),
                    }
                }
                _ => Ok(Reply::Granted),
            };
            Box::pin(async move { reply })
        }

        fn vitals(&self) -> Option<(u64, Arc<crate::quarantine::Vitals>)> {
            Some((
                1,
                Arc::new(crate::quarantine::Vitals {
                    run_id: "r".to_owned(),
                    uptime: Duration::from_secs(10_000),
                    durable: true,
                    epoch: crate::quarantine::Epoch {
                        id: "e".into(),
                        created_us: 1,
                        now_us: Some(10_000_000_000),
                    },
                    misconfigured: None,
                    bootstrapped: false,
                    counters_lost: false,
                }),
            ))
        }
    }

    fn fenced_client(scripts: [Vec<Result<crate::master::FenceOutcome, ()>>; 3]) -> Redlock {
        let config = Builder::new()
            .masters([
                "redis://127.0.0.1:1",
                "redis://127.0.0.1:2",
                "redis://127.0.0.1:3",
            ])
            .fencing(true)
            .waiting(crate::Waiting::new().notifications(false))
            .into_config()
            .unwrap_or_else(|e| panic!("{e}"));
        let masters = scripts
            .into_iter()
            .enumerate()
            .map(|(i, fence)| {
                Arc::new(Scripted {
                    name: format!("m{i}").into(),
                    fence: std::sync::Mutex::new(fence),
                }) as Arc<dyn Master>
            })
            .collect();
        let view = Redlock::view_of(&config);
        Redlock::with_masters(config, &view, masters, Notifier::disabled())
    }

    /// A write-back that failed on a timeout, with no conflict and validity left, is tried
    /// again within the validity instead of failing the acquisition.
    #[tokio::test(start_paused = true)]
    async fn a_write_back_that_timed_out_without_conflict_is_retried() {
        use crate::master::FenceOutcome::{NotOurs, Written};
        let client = fenced_client([
            vec![Ok(Written)],
            vec![Err(()), Ok(Written)],
            vec![Ok(NotOurs)],
        ]);
        let lease = client
            .try_acquire("r")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lease.fencing_token().map(|t| t.get()), Some(1));
    }

    /// Held by others on too many masters, the write-back fails at once: the lock is lost.
    #[tokio::test(start_paused = true)]
    async fn a_write_back_no_quorum_still_holds_fails_at_once() {
        use crate::master::FenceOutcome::{NotOurs, Written};
        let client = fenced_client([vec![Ok(Written)], vec![Ok(NotOurs)], vec![Ok(NotOurs)]]);
        let err = match client.try_acquire("r").await {
            Ok(_) => panic!("granted without a token quorum"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), ErrorKind::FencingFailed, "{err}");
        assert!(err.to_string().contains("still held"), "{err}");
    }
}
