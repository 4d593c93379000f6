//! The client handle, [`Redlock`]: built from a validated configuration
//! ([`Builder::build`](crate::Builder::build)), sharing one core (`core::Inner`: masters, quorum, notices,
//! background work) among its clones, and what concerns the client as a whole: its
//! masters, its quorum, and `shutdown`.
//!
//! What a client locks is its facades' to say, each in its own module and none using
//! another: the mutex (`lock`), several resources (`many`), the semaphore
//! (`semaphore`), the read-write lock (`rwlock`); the operators' calls (`ops`: inspect,
//! the force-unlocks, `init_cluster`, `check_masters`) stand beside them. Layer: below
//! the facades, above the acquire engine (docs/design.md §10).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::cluster::{Owner, View};
use crate::config::{Builder, Config, Problem};
use crate::core::{Inner, random_client_id, terms};
use crate::error::{Error, ErrorKind, MasterErrorKind};
use crate::guard::Guarded;
use crate::handed::HandedOn;
use crate::held::Held;
use crate::master::{Master, Op, Outgoing, RedisMaster, Reply};
use crate::quorum;
use crate::telemetry;
use crate::wait::Notifier;

/// A Redlock client over a fixed set of independent Redis masters.
///
/// Cheap to clone (an `Arc` inside); clones share connections. Build one with
/// [`Redlock::builder`].
///
/// # Example
/// ```no_run
/// use redquorum::Redlock;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Redlock::builder()
///     .masters(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .ttl("10s")
///     .build()?;
///
/// let lease = client.acquire("orders:42").await?;
/// // ... the critical section, finished well within lease.remaining() ...
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.masters.iter().map(|m| &**m.name()).collect();
        f.debug_struct("Redlock")
            .field("masters", &names)
            .field("quorum", &self.inner.quorum())
            .field("ttl", &self.inner.config.ttl)
            .field("node_timeout", &self.inner.config.node_timeout)
            .field("key_prefix", &self.inner.config.key_prefix)
            .field("handoff", &self.inner.config.handoff)
            .field("waiter_ttl", &self.inner.config.waiter_ttl)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Validates every setting and builds the client. No connection is opened here:
    /// masters are connected on first use.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), naming the setting
    /// that cannot work ([`Error::setting`](crate::Error::setting)) and saying what to
    /// change; when several cannot work, the message lists each and
    /// [`Error::problems`](crate::Error::problems) gives each as an error of its own: no
    /// masters, an unparsable or duplicate master URL or one on port 0, a duration that
    /// does not parse, a zero TTL or node timeout, a TTL not larger than the drift
    /// allowance plus the node timeout plus the safety margin (in whole milliseconds, as
    /// the masters keep it), a TTL above `ttl_max`, a duration above its documented maximum
    /// (see "Limits" above), a drift factor out of range, zero attempts, pauses that
    /// overflow, an `extend_interval` not below the TTL, a `waiter_ttl` that is zero, not
    /// above three node timeouts or above the TTL, a key prefix longer than
    /// [`MAX_KEY_PREFIX_LEN`](crate::limits::MAX_KEY_PREFIX_LEN) or starting with
    /// `redquorum:`, or a label longer than [`MAX_LABEL_LEN`](crate::limits::MAX_LABEL_LEN)
    /// or holding a control character, a Unicode line separator or a direction override.
    /// Two masters are accepted, with a warning (see
    /// [`Builder::masters`](crate::Builder::masters)).
    pub fn build(self) -> Result<Redlock, crate::Error> {
        telemetry::describe();
        self.into_config()
            .and_then(Redlock::from_config)
            .map_err(Problem::into_error)
    }
}

/// The test seams (`--cfg redquorum_mutants`): a bug planted in a built client, or its clock
/// made to run at another rate, kept in the registry of `mutants.rs` under the client's id.
/// Never use them outside tests that prove a checker.
#[cfg(redquorum_mutants)]
impl Redlock {
    /// Plants a deliberate bug in this client and its clones, for proving that a test
    /// suite catches it, in place of any planted before. Other clients of the process,
    /// built before or after, are not touched. Plant it before the client's first call.
    pub fn plant(&self, mutant: crate::mutants::Mutant) {
        crate::mutants::plant(&self.inner.owner.client, mutant);
    }

    /// Makes this client's clock run at `rate` times real time (0.98: 2 % slow), to show
    /// what the drift allowance covers and what it does not (reported as
    /// `client_clock_rate`). Defaults to 1; above 0.1 and at most 10.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`] naming `client_clock_rate` for a rate out of range; the
    /// clock is left as it was.
    #[doc(hidden)]
    pub fn plant_clock_rate(&self, rate: f64) -> Result<(), Error> {
        if !(rate.is_finite() && rate > 0.1 && rate <= 10.0) {
            return Err(Problem::ClockRate(rate).into_error());
        }
        crate::mutants::plant_clock_rate(&self.inner.owner.client, rate);
        Ok(())
    }
}

impl Redlock {
    /// A builder with every default; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn from_config(config: Config) -> Result<Self, Problem> {
        let mut masters: Vec<Arc<dyn Master>> = Vec::with_capacity(config.masters.len());
        let view = Self::view_of(&config);
        for (index, spec) in config.masters.iter().enumerate() {
            let master = RedisMaster::new(spec, (index, &view), &config).map_err(|e| {
                Problem::InvalidUrl {
                    url: spec.name.to_string(),
                    reason: e.to_string(),
                }
            })?;
            masters.push(Arc::new(master));
        }
        let notifier = if config.notifications {
            Notifier::new(
                &config.masters,
                quorum::quorum(masters.len()),
                config.node_timeout,
                config.connect_timeout,
            )
        } else {
            Notifier::disabled()
        };
        Ok(Self::with_masters(config, &view, masters, notifier))
    }

    /// The view of its cluster a client of `config` starts with; its id is the client's.
    pub(crate) fn view_of(config: &Config) -> Arc<View> {
        // Drawn from the library's random source: the simulation draws the same id, and
        // with it the same lock values, again from a schedule's seed.
        Arc::new(View::of_client(
            random_client_id().into(),
            terms(config),
            config.masters.iter().map(|m| m.name.clone()).collect(),
        ))
    }

    /// A client over any masters (real or simulated) that see its cluster through `view`,
    /// whose id it takes as its own; with quarantine on, each master is put under restart
    /// quarantine here.
    pub(crate) fn with_masters(
        config: Config,
        view: &View,
        masters: Vec<Arc<dyn Master>>,
        notifier: Notifier,
    ) -> Self {
        let masters = if config.quarantine {
            let window = config.quarantine_window();
            masters
                .into_iter()
                .enumerate()
                .map(|(index, master)| {
                    Arc::new(Guarded::new(master, index, window)) as Arc<dyn Master>
                })
                .collect()
        } else {
            masters
        };
        let owner = Arc::new(Owner::of_client(Arc::clone(view.client()), &config.label));
        let held = Arc::new(Held::new(config.wait_for_own_leases));
        Self {
            inner: Arc::new(Inner {
                held,
                handed_on: HandedOn::default(),
                config,
                masters,
                owner,
                notifier: Arc::new(notifier),
                background: TaskTracker::new(),
            }),
        }
    }

    /// Waits until every release this client and its leases started in the background
    /// has finished: leases dropped without [`Lease::release`](crate::Lease::release), the masters a release
    /// returned without, attempts that failed or were cancelled. Call it before the
    /// process exits, so that no lock it held stays on the masters until its TTL.
    ///
    /// A background release may first wait for an extension of its lease that is in
    /// flight (one round), then runs its own round; each round is bounded by twice the
    /// connect timeout plus the node timeout (a request's turn behind earlier requests to
    /// its master, then its connect and its answer), so this call waits at most twice
    /// that. Returns how
    /// many were still running when that bound ran out (zero when all finished). The
    /// client stays usable afterwards.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) {
    /// // ... at the end of main ...
    /// let unfinished = client.shutdown().await;
    /// assert_eq!(unfinished, 0, "some locks are left to expire with their TTL");
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the releases go on in the background.
    pub async fn shutdown(&self) -> usize {
        let background = &self.inner.background;
        if tokio::runtime::Handle::try_current().is_err() {
            // Nothing can wait without a runtime; report what is still running elsewhere.
            return background.len();
        }
        // An extension in flight (one round), then the release round itself.
        let bound = self.inner.config.call_bound().saturating_mul(2);
        background.close();
        let _ = tokio::time::timeout(bound, background.wait()).await;
        let unfinished = background.len();
        background.reopen();
        unfinished
    }

    /// How many masters must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// The masters' addresses, passwords redacted, in the configured order. (What each
    /// master *did* is in the reports of a lease, an error or a release: `masters()`.)
    pub fn master_addresses(&self) -> Vec<String> {
        self.inner
            .masters
            .iter()
            .map(|m| m.name().to_string())
            .collect()
    }

    /// The default TTL of this client's locks.
    pub fn ttl(&self) -> Duration {
        self.inner.config.ttl
    }

    /// Before an operator's write that ignores values (a force-unlock): reads every
    /// master's cluster record (`Op::Survey`) and judges them from scratch, as a new client
    /// would (docs/design.md §11). A master of another cluster or configuration, one
    /// server listed twice, two servers with one member id, or a master without a record
    /// in an initialised cluster makes the call fail with `ClusterMismatch` before
    /// anything is written: such a master's keys are another cluster's, and its answer
    /// must not count. Masters that do not answer are left to the call itself.
    /// With `strangers_allowed` (a re-admission), a master without a record is left to
    /// the caller.
    pub(crate) async fn check_agreement(
        &self,
        subject: &str,
        strangers_allowed: bool,
    ) -> Result<(), Error> {
        let inner = &self.inner;
        let answers = futures::future::join_all(
            inner
                .masters
                .iter()
                .map(|m| m.call(Outgoing::new(Op::Survey))),
        )
        .await;
        let names: Vec<Arc<str>> = inner.masters.iter().map(|m| Arc::clone(m.name())).collect();
        let view = View::new(inner.terms(), names.clone());
        let mut without = Vec::new();
        for (index, answer) in answers.iter().enumerate() {
            if let Ok(Reply::Survey { run_id, record, .. }) = answer {
                view.connected(index, Some(run_id), record.as_deref());
                if record.is_none() {
                    without.push(index);
                }
            }
        }
        let mut refused = Vec::new();
        // Judged once every master was seen: a twin met first is refused only once the
        // second was judged.
        for (index, name) in names.iter().enumerate() {
            let stranger = without.contains(&index) && view.adopted().is_some();
            match view.refused(index) {
                Some(e) if e.kind() == MasterErrorKind::ClusterMismatch => {
                    refused.push(format!("{name}: {e}"));
                }
                Some(_) | None if stranger && strangers_allowed => {}
                Some(e) => refused.push(format!("{name}: {e}")),
                None if stranger => refused.push(format!(
                    "{name}: it has no cluster record although its cluster is initialised: \
                     it lost its data, or it is not a member"
                )),
                None => {}
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(
            Error::new(ErrorKind::ClusterMismatch, subject).with_detail(format!(
                "{}; nothing was changed: list the cluster's own masters",
                refused.join("; ")
            )),
        )
    }
}
