//! One master: the only code that talks to Redis.
//!
//! # The seam
//! The quorum logic sees masters only through the crate-private [`Master`] trait: a
//! master takes one [`Op`] and answers a [`Reply`] or a [`MasterError`], within its node
//! timeout. [`RedisMaster`] implements it over a real connection; in-memory master models
//! implement it for the deterministic simulation, which therefore lives inside the crate
//! under `#[cfg(test)]`. The seam stays crate-private until users need it, so it can
//! change without breaking anyone.
//!
//! # Connection state
//! A master is connected on first use (bounded by the connect timeout). When its
//! connection breaks or is refused, it is marked *down*: calls fail at once with
//! [`MasterErrorKind::Down`] instead of waiting, and a background task reconnects with
//! capped exponential backoff. A master that merely does not answer (paused, overloaded)
//! keeps its connection; each call to it fails after the node timeout, which the quorum
//! round never waits for once a quorum has answered.
//!
//! Layer: below the round and above the settings (docs/design.md §10); it must not use the
//! round, quarantine's application (`guard.rs`), the core, leases or the facade.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};
use tokio::sync::oneshot;

use crate::backoff::Doubling;
use crate::cluster::{self, Admission, Owner, Record, View};
use crate::config::{Config, MasterSpec};
use crate::quarantine::{Epoch, Vitals, eviction_risk};

use crate::error::{MasterError, MasterErrorKind, human};
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::scripts;

/// One request of the lock protocol, as sent to every master of a round.
#[derive(Debug)]
pub(crate) enum Op {
    /// `SET key value NX PX ttl` inside `acquire.lua`, which also checks the cluster
    /// record, writes the owner record, and reads the data epoch (restart quarantine), the
    /// fence counter (fencing) and the holder's `PTTL`.
    AcquireChecked {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        fence: FenceRead,
        owner: Arc<Owner>,
    },
    /// Compare-and-`PEXPIRE` (never setting a missing key again), see `extend.lua`; with
    /// `epoch`, also reads the data epoch.
    Extend {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        epoch: bool,
    },
    /// Fencing write-back: raise the counter to `token` where the lock is ours and the
    /// counter is below it, see `fence.lua`.
    Fence {
        key: Arc<str>,
        value: Arc<str>,
        token: u64,
        /// `false` plants [`Mutant::WritebackNoGuard`]: a counter equal to the token is
        /// overwritten too.
        #[cfg(feature = "mutants")]
        strict: bool,
    },
    /// Compare-and-delete plus release notice, see `release.lua`.
    Release {
        key: Arc<str>,
        value: Arc<str>,
        channel: Arc<str>,
    },
    /// A plain `DEL key`: only [`Mutant::PlainDelRelease`] sends it.
    #[cfg(feature = "mutants")]
    ReleaseUnchecked { key: Arc<str> },
    /// Reads what bootstrapping a cluster must know of a master: its `run_id`, its cluster
    /// record, and one key under the prefix, if any (besides the records).
    Survey,
    /// Writes the cluster record unless one exists, see `stamp.lua`; with `run_id` (read
    /// by a survey on this master), as the bootstrap of that process.
    Stamp {
        record: Box<Record>,
        run_id: Option<String>,
    },
}

impl Op {
    /// The release of `value` under `key`, as configured.
    pub(crate) fn release(config: &Config, key: &Arc<str>, value: &Arc<str>) -> Op {
        #[cfg(feature = "mutants")]
        if config.planted.is(Mutant::PlainDelRelease) {
            return Op::ReleaseUnchecked {
                key: Arc::clone(key),
            };
        }
        #[cfg(not(feature = "mutants"))]
        let _ = config;
        Op::Release {
            key: Arc::clone(key),
            value: Arc::clone(value),
            channel: scripts::release_channel(key).into(),
        }
    }

    /// Whether this op releases a lock: it succeeds wherever the key is no longer ours.
    pub(crate) fn is_release(&self) -> bool {
        match self {
            Op::Release { .. } => true,
            #[cfg(feature = "mutants")]
            Op::ReleaseUnchecked { .. } => true,
            _ => false,
        }
    }

    /// Whether every answer to this op counts, whatever the master's standing (quarantine,
    /// cluster record): a release must reach every master that may hold the key, and the
    /// cluster's administration reads and writes records, not locks.
    pub(crate) fn is_unguarded(&self) -> bool {
        self.is_release() || matches!(self, Op::Survey | Op::Stamp { .. })
    }

    /// The operation's name in traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::AcquireChecked { .. } => "acquire",
            Op::Fence { .. } => "fence",
            Op::Extend { .. } => "extend",
            Op::Release { .. } => "release",
            #[cfg(feature = "mutants")]
            Op::ReleaseUnchecked { .. } => "release",
            Op::Survey => "survey",
            Op::Stamp { .. } => "stamp",
        }
    }
}

/// What `AcquireChecked` reads of the fence counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceRead {
    /// Nothing.
    Skip,
    /// Its value.
    Read,
    /// Increment it when granted ([`Mutant::OneRoundToken`]).
    #[cfg(feature = "mutants")]
    IncrementWhenGranted,
}

/// What a master said about its data epoch: the record and the server time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EpochReport {
    pub(crate) record: Option<String>,
    pub(crate) now_us: u64,
}

/// A master's answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Done as asked: set, extended (or set again), or deleted.
    Granted,
    /// The key holds another value.
    HeldByOther,
    /// The key does not exist.
    Missing,
    /// The key does not exist (the answer to `Extend` with `epoch`).
    Gone { epoch: EpochReport },
    /// The answer to `AcquireChecked` or to `Extend` with `epoch`.
    Checked {
        /// Set (acquire) or extended (extend).
        granted: bool,
        epoch: EpochReport,
        /// The fence counter, when read and present.
        fence: Option<u64>,
        /// When refused: how long the holder's key lives.
        holder_ttl: Option<Duration>,
    },
    /// The answer to `Fence`.
    Fenced {
        outcome: FenceOutcome,
        /// The counter before the write-back (or the one that conflicted).
        before: Option<u64>,
        epoch: EpochReport,
    },
    /// The answer to `Survey`.
    Survey {
        run_id: String,
        record: Option<Box<Record>>,
        /// A key under the prefix that is not a record, if the master holds one.
        holds: Option<String>,
    },
    /// The answer to `Stamp`: whether it wrote the record, and the fingerprint the master
    /// now has.
    Stamped { written: bool, fingerprint: String },
}

/// What a fencing write-back did on one master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceOutcome {
    /// The counter was raised to the token.
    Written,
    /// The counter was already at or above the token.
    Conflict,
    /// The lock does not hold our value there.
    NotOurs,
}

impl Reply {
    /// The epoch this reply read, if any.
    pub(crate) fn epoch(&self) -> Option<&EpochReport> {
        match self {
            Reply::Checked { epoch, .. } | Reply::Fenced { epoch, .. } | Reply::Gone { epoch } => {
                Some(epoch)
            }
            _ => None,
        }
    }
}

/// One master, as the quorum round sees it.
pub(crate) trait Master: Send + Sync + fmt::Debug {
    /// The master's address, password redacted.
    fn name(&self) -> &Arc<str>;

    /// Runs `op` on this master. The returned future owns everything it needs, so a
    /// round can hand it to a background task once the round is decided; it finishes
    /// within the node timeout (plus the connect timeout on first use).
    fn call(&self, op: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>>;

    /// What the latest (re)connection read of the master, numbered by connection, when
    /// the master reads vitals (restart quarantine on).
    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        None
    }

    /// Why a grant this master gave may not count once the round is decided, if it may
    /// not: the client learnt meanwhile that the master does not vote (its cluster record,
    /// docs/design.md §11; see `View::disowned`).
    fn disowned(&self) -> Option<MasterError> {
        None
    }
}

/// A real Redis master.
#[derive(Debug)]
pub(crate) struct RedisMaster {
    shared: Arc<Shared>,
}

struct Shared {
    name: Arc<str>,
    /// This master's place in the client's list, and the client's view of its cluster.
    index: usize,
    view: Arc<View>,
    record_key: Arc<str>,
    client: Client,
    node_timeout: Duration,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// Read the master's vitals on every (re)connect (restart quarantine).
    read_vitals: bool,
    vitals: Mutex<Option<(u64, Arc<Vitals>)>>,
    /// Serialises the first connection attempt, so concurrent first calls share it.
    first_connect: tokio::sync::Mutex<()>,
    /// The connection (generation) known to have the scripts loaded.
    scripts_loaded: AtomicU64,
    /// The `run_id` the latest connection read, if it could.
    run_id: Mutex<Option<String>>,
    generation: AtomicU64,
}

/// A live connection, its generation, and why its master can evict lock keys (if it can).
type Connection = (MultiplexedConnection, u64, Arc<Eviction>);

/// Why a connection's master can evict lock keys (`Some`) or that it cannot (`None`), once
/// read: at connect with quarantine on, else by the connection's first requests.
type Eviction = tokio::sync::OnceCell<Option<Arc<str>>>;

/// What a fresh connection read of its master.
struct Opened {
    conn: MultiplexedConnection,
    /// With quarantine on.
    vitals: Option<Vitals>,
    /// Whether the master can evict lock keys, when read at connect.
    evicts: Arc<Eviction>,
}

enum State {
    /// Never connected.
    Idle,
    Up {
        conn: MultiplexedConnection,
        generation: u64,
        /// Whether this connection's master can evict lock keys: then it never votes.
        evicts: Arc<Eviction>,
        /// Whether the runtime that drives the connection still runs.
        alive: Canary,
    },
    /// Broken or refused; a background task is reconnecting.
    Down {
        error: MasterError,
        /// Whether the reconnecting task still runs.
        alive: Canary,
    },
}

/// Whether a task still runs: the task holds the receiving end, so the sender sees it
/// closed once the task ended or was dropped with its runtime. A client used from a
/// second runtime, after the first one was shut down, finds its connections (driven by
/// tasks of the first) and its reconnect task dead this way, and connects again.
struct Canary(oneshot::Sender<()>);

impl Canary {
    /// A canary for the current runtime: alive while that runtime runs (and the canary
    /// exists); dead at once outside any runtime.
    fn current_runtime() -> Self {
        let (canary, watched) = Self::new();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Resolves when the canary is dropped: the task ends with it.
                let _ = watched.await;
            });
        }
        canary
    }

    /// A canary and the end a task holds for as long as it runs.
    fn new() -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Self(tx), rx)
    }

    fn is_dead(&self) -> bool {
        self.0.is_closed()
    }
}

impl fmt::Debug for Shared {
    // Hand-written: the client's connection info holds the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &*self.lock_state() {
            State::Idle => "idle",
            State::Up { .. } => "up",
            State::Down { .. } => "down",
        };
        f.debug_struct("RedisMaster")
            .field("name", &self.name)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl RedisMaster {
    /// A master that connects on first use.
    pub(crate) fn new(
        spec: &MasterSpec,
        place: (usize, &Arc<View>),
        node_timeout: Duration,
        connect_timeout: Duration,
        read_vitals: bool,
    ) -> Result<Self, redis::RedisError> {
        let client = Client::open(spec.info.clone())?;
        let (index, view) = place;
        Ok(Self {
            shared: Arc::new(Shared {
                name: spec.name.clone(),
                index,
                record_key: cluster::record_key(&view.terms().prefix).into(),
                view: Arc::clone(view),
                client,
                node_timeout,
                connect_timeout,
                state: Mutex::new(State::Idle),
                read_vitals,
                vitals: Mutex::new(None),
                first_connect: tokio::sync::Mutex::new(()),
                scripts_loaded: AtomicU64::new(0),
                run_id: Mutex::new(None),
                generation: AtomicU64::new(0),
            }),
        })
    }
}

impl Master for RedisMaster {
    fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    fn call(&self, op: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>> {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let (mut conn, generation, evicts) = shared.connection().await?;
            // A master whose cluster record disagrees, or that this client reaches twice,
            // never votes for it (docs/design.md §11); it is not even asked.
            if !op.is_unguarded()
                && let Some(refusal) = shared.view.refused(shared.index)
            {
                return Err(refusal);
            }
            // A master that can evict lock keys never votes, quarantine or not. Without
            // quarantine its settings are read by the connection's first requests: sent
            // before them on the same ordered connection (one round trip, not two), and
            // every answer waits for the settings before it counts.
            let eviction = {
                let mut conn = conn.clone();
                let shared = Arc::clone(&shared);
                async move {
                    evicts
                        .get_or_try_init(|| async move {
                            let problem = read_eviction(&mut conn).await?;
                            if let Some(problem) = &problem {
                                tracing::warn!(master = %shared.name, %problem, "master misconfigured: it will not vote");
                            }
                            Ok::<_, MasterError>(problem.map(Arc::from))
                        })
                        .await
                        .cloned()
                }
            };
            // A master without the scripts answers NOSCRIPT, and the fallback (load, run
            // again) costs two more round trips and runs after commands sent later on the
            // connection. So the first request on a connection carries the loads with it:
            // sent first on the same ordered connection, answered in the same round trip.
            // Exactly one request per connection carries them.
            let first = shared.scripts_loaded.swap(generation, Ordering::Relaxed) != generation;
            let preload = first.then(|| {
                let mut conn = conn.clone();
                async move { load_scripts(&mut conn).await }
            });
            let request = async {
                let (eviction, reply) = match preload {
                    Some(load) => {
                        let (eviction, loaded, reply) =
                            futures::future::join3(eviction, load, run(&op, &mut conn, &shared))
                                .await;
                        if loaded.is_err() {
                            // The next request tries again; NOSCRIPT falls back meanwhile.
                            let _ = shared.scripts_loaded.compare_exchange(
                                generation,
                                0,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            );
                        }
                        (eviction, reply)
                    }
                    None => futures::future::join(eviction, run(&op, &mut conn, &shared)).await,
                };
                // Releases always pass: they must reach every master that may hold the key.
                if !op.is_unguarded()
                    && let Some(problem) = eviction?
                {
                    return Err(MasterError::new(
                        MasterErrorKind::Misconfigured,
                        format!("it never votes: {problem}"),
                    ));
                }
                reply
            };
            match tokio::time::timeout(shared.node_timeout, request).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(err)) => {
                    if err.breaks_connection() {
                        shared.mark_down(generation, err.clone());
                    }
                    Err(err)
                }
                Err(_) => Err(MasterError::new(
                    MasterErrorKind::Timeout,
                    format!(
                        "no answer within the node timeout ({})",
                        human(shared.node_timeout)
                    ),
                )),
            }
        })
    }

    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        self.shared
            .vitals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn disowned(&self) -> Option<MasterError> {
        self.shared.view.disowned(self.shared.index)
    }
}

impl Shared {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a poisoned lock still holds a
        // consistent value.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live connection, or the reason there is none. Connects inline only the first
    /// time; afterwards a broken master fails fast while the background task reconnects.
    async fn connection(self: &Arc<Self>) -> Result<Connection, MasterError> {
        if let Some(ready) = self.ready() {
            return ready;
        }
        let _first = self.first_connect.lock().await;
        if let Some(ready) = self.ready() {
            return ready;
        }
        match self.open().await {
            Ok(conn) => Ok(self.set_up(conn)),
            Err(err) => {
                self.mark_down(0, err.clone());
                Err(err)
            }
        }
    }

    /// The connection when up, the failure when down, `None` when never connected.
    fn ready(&self) -> Option<Result<Connection, MasterError>> {
        match &*self.lock_state() {
            State::Idle => None,
            // The runtime that drove the connection, or the reconnecting task, is gone:
            // connect again in this one.
            State::Up { alive, .. } | State::Down { alive, .. } if alive.is_dead() => None,
            State::Up {
                conn,
                generation,
                evicts,
                ..
            } => Some(Ok((conn.clone(), *generation, evicts.clone()))),
            // A refused password stays refused: report it as such, not as an outage.
            State::Down { error, .. } if error.kind().is_permanent() => {
                Some(Err(MasterError::new(
                    error.kind(),
                    format!("{error} (reconnecting in the background)"),
                )))
            }
            State::Down { error, .. } => Some(Err(MasterError::new(
                MasterErrorKind::Down,
                format!("master is down, reconnecting in the background (last error: {error})"),
            ))),
        }
    }

    /// Connects and, with quarantine on, reads the master's vitals (eviction settings
    /// included), all within the connect timeout.
    async fn open(&self) -> Result<Opened, MasterError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Every request is bounded by our own node timeout instead.
            .set_response_timeout(None);
        let connect = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(MasterError::from_redis)?;
            let (vitals, evicts, run_id, record) = if self.read_vitals {
                let (vitals, record) = read_vitals(&mut conn, &self.record_key).await?;
                let evicts = Eviction::new_with(Some(vitals.misconfigured.clone().map(Arc::from)));
                let run_id = Some(vitals.run_id.clone());
                (Some(vitals), evicts, run_id, record)
            } else {
                let (run_id, record) = read_cluster(&mut conn, &self.record_key).await?;
                (None, Eviction::new(), run_id, record)
            };
            self.admit(&mut conn, run_id, record.as_ref()).await?;
            Ok(Opened {
                conn,
                vitals,
                evicts: Arc::new(evicts),
            })
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(result) => result,
            Err(_) => Err(MasterError::new(
                MasterErrorKind::Timeout,
                format!("could not connect within {}", human(self.connect_timeout)),
            )),
        }
    }

    /// Takes in the cluster record a connection read (docs/design.md §11), and writes it
    /// again on a member that lost it, if this client knows which member it is.
    async fn admit(
        &self,
        conn: &mut MultiplexedConnection,
        run_id: Option<String>,
        record: Option<&Record>,
    ) -> Result<(), MasterError> {
        let admission = self.view.connected(self.index, run_id.as_deref(), record);
        *self.run_id.lock().unwrap_or_else(PoisonError::into_inner) = run_id;
        match admission {
            Admission::Member => Ok(()),
            Admission::Readmit { record } => {
                tracing::warn!(
                    master = %self.name,
                    member = %record.master,
                    "master lost its cluster record (and its data): writing it again; it \
                     votes after its restart quarantine and no longer counts for fencing"
                );
                stamp(conn, &record, None).await.map(|_| ())
            }
            refused => {
                if let Some(refusal) = refused.refusal() {
                    tracing::warn!(master = %self.name, error = %refusal, "master refused: it will not vote");
                }
                Ok(())
            }
        }
    }

    /// Reads the cluster record again and decides as at a connect; returns the record.
    async fn reread(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<Option<Record>, MasterError> {
        let record = read_record(conn, &self.record_key).await?;
        let run_id = self
            .run_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.admit(conn, run_id, record.as_ref()).await?;
        Ok(record)
    }

    /// The answer to a script that found another cluster record than the one this client
    /// sent (or none): reads the record again and decides as at a connect.
    async fn record_changed(&self, conn: &mut MultiplexedConnection) -> MasterError {
        let record = match self.reread(conn).await {
            Ok(record) => record,
            Err(error) => return error,
        };
        match self.view.refused(self.index) {
            Some(refusal) => refusal,
            None if record.is_none() => MasterError::new(
                MasterErrorKind::Other,
                "it lost its cluster record (and its data): written again; it votes after \
                 its restart quarantine",
            ),
            None => MasterError::new(
                MasterErrorKind::Other,
                "its cluster record was written after this client connected: the next \
                 request carries it",
            ),
        }
    }

    fn set_up(&self, opened: Opened) -> Connection {
        let Opened {
            conn,
            vitals,
            evicts,
        } = opened;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(Some(problem)) = evicts.get() {
            tracing::warn!(master = %self.name, %problem, "master misconfigured: it will not vote");
        }
        if let Some(vitals) = vitals {
            *self.vitals.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((generation, Arc::new(vitals)));
        }
        *self.lock_state() = State::Up {
            conn: conn.clone(),
            generation,
            evicts: evicts.clone(),
            alive: Canary::current_runtime(),
        };
        tracing::debug!(master = %self.name, generation, "master connected");
        (conn, generation, evicts)
    }

    /// Marks the master down because the connection of `generation` broke (0: the first
    /// connection attempt failed), and starts reconnecting. A stale report about an older
    /// connection is ignored.
    fn mark_down(self: &Arc<Self>, generation: u64, error: MasterError) {
        {
            let mut state = self.lock_state();
            match &*state {
                State::Up { generation: g, .. } if *g == generation => {}
                State::Idle if generation == 0 => {}
                // A first connection in this runtime, after the last one's runtime ended.
                State::Up { alive, .. } | State::Down { alive, .. }
                    if generation == 0 && alive.is_dead() => {}
                _ => return,
            }
            tracing::warn!(master = %self.name, %error, "master down, reconnecting in the background");
            let (alive, running) = Canary::new();
            *state = State::Down { error, alive };
            // Without a runtime, `running` is dropped here: the next call connects itself.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(reconnect(Arc::downgrade(self), running));
            }
        }
    }
}

/// Reconnects a down master with capped exponential backoff. Ends when connected or when
/// the client holding the master is dropped; holds `_running` until then.
async fn reconnect(weak: Weak<Shared>, _running: oneshot::Receiver<()>) {
    let mut backoff = Doubling::RECONNECT;
    loop {
        tokio::time::sleep(backoff.pause()).await;
        let Some(shared) = weak.upgrade() else { return };
        match shared.open().await {
            Ok(conn) => {
                shared.set_up(conn);
                return;
            }
            Err(failed) => {
                tracing::debug!(master = %shared.name, error = %failed, "reconnect failed");
                if let State::Down { error, .. } = &mut *shared.lock_state() {
                    *error = failed;
                }
            }
        }
    }
}

/// Sends one op on `conn` and interprets the answer.
async fn run(
    op: &Op,
    conn: &mut MultiplexedConnection,
    shared: &Shared,
) -> Result<Reply, MasterError> {
    // Met before this client knew its cluster, and without a record then: read it again
    // before it votes (it may be a member, or a stranger that never votes).
    if !op.is_unguarded() && shared.view.stale(shared.index) {
        shared.reread(conn).await?;
        if let Some(refusal) = shared.view.refused(shared.index) {
            return Err(refusal);
        }
    }
    match op {
        Op::AcquireChecked {
            key,
            value,
            ttl,
            fence,
            owner,
        } => {
            let (script, mode) = match fence {
                FenceRead::Skip => (&*scripts::ACQUIRE, "0"),
                FenceRead::Read => (&*scripts::ACQUIRE, "1"),
                #[cfg(feature = "mutants")]
                FenceRead::IncrementWhenGranted => (&*scripts::ACQUIRE_ONE_ROUND_TOKEN, "1"),
            };
            type Answer = (i64, String, String, Option<String>, i64, Option<String>);
            let (code, record, now, counter, pttl, detail): Answer = script
                .key(&**key)
                .key(scripts::EPOCH_KEY)
                .key(scripts::fence_key(key))
                .key(&*shared.record_key)
                .key(scripts::owner_key(key))
                .arg(&**value)
                .arg(millis(*ttl))
                .arg(new_epoch_id())
                .arg(mode)
                .arg(shared.view.fingerprint())
                .arg(&*owner.client)
                .arg(&*owner.host)
                .arg(owner.pid)
                .arg(&*owner.label)
                .invoke_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            match code {
                1 | 0 => {}
                -2 => return Err(shared.record_changed(conn).await),
                -3 => return Err(wrong_kind(detail.as_deref())),
                other => return Err(unexpected("acquire", other)),
            }
            Ok(Reply::Checked {
                granted: code == 1,
                epoch: EpochReport {
                    record: Some(record),
                    now_us: parse_number("acquire", &now)?,
                },
                fence: counter.map(|c| parse_number("acquire", &c)).transpose()?,
                holder_ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            })
        }
        Op::Extend {
            key,
            value,
            ttl,
            epoch,
        } => {
            let (code, record, now, _): (i64, Option<String>, String, Option<String>) =
                scripts::EXTEND
                    .key(&**key)
                    .key(scripts::EPOCH_KEY)
                    .key(&*shared.record_key)
                    .key(scripts::owner_key(key))
                    .arg(&**value)
                    .arg(millis(*ttl))
                    .arg(if *epoch {
                        new_epoch_id()
                    } else {
                        String::new()
                    })
                    .arg(shared.view.fingerprint())
                    .invoke_async(conn)
                    .await
                    .map_err(MasterError::from_redis)?;
            let granted = match code {
                1 => Some(true),
                0 => None,
                -1 => Some(false),
                -2 => return Err(shared.record_changed(conn).await),
                other => return Err(unexpected("extend", other)),
            };
            let report = EpochReport {
                record,
                now_us: parse_number("extend", &now)?,
            };
            Ok(match (granted, *epoch) {
                (None, false) => Reply::Missing,
                (None, true) => Reply::Gone { epoch: report },
                (Some(true), false) => Reply::Granted,
                (Some(false), false) => Reply::HeldByOther,
                (Some(granted), true) => Reply::Checked {
                    granted,
                    epoch: report,
                    fence: None,
                    holder_ttl: None,
                },
            })
        }
        Op::Fence {
            key, value, token, ..
        } => {
            let script = &*scripts::FENCE;
            #[cfg(feature = "mutants")]
            let script = match op {
                Op::Fence { strict: false, .. } => &*scripts::FENCE_MAX_WRITE,
                _ => script,
            };
            let (code, before, record): (i64, Option<String>, Option<String>) = script
                .key(&**key)
                .key(scripts::fence_key(key))
                .key(scripts::EPOCH_KEY)
                .key(scripts::owner_key(key))
                .arg(&**value)
                .arg(*token)
                .invoke_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            let outcome = match code {
                1 => FenceOutcome::Written,
                0 => FenceOutcome::Conflict,
                -1 => FenceOutcome::NotOurs,
                other => return Err(unexpected("fence", other)),
            };
            Ok(Reply::Fenced {
                outcome,
                before: before.map(|c| parse_number("fence", &c)).transpose()?,
                epoch: EpochReport { record, now_us: 0 },
            })
        }
        Op::Release {
            key,
            value,
            channel,
        } => {
            let code: i64 = scripts::RELEASE
                .key(&**key)
                .key(scripts::owner_key(key))
                .arg(&**value)
                .arg(&**channel)
                .invoke_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            match code {
                1 => Ok(Reply::Granted),
                0 => Ok(Reply::Missing),
                -1 => Ok(Reply::HeldByOther),
                other => Err(unexpected("release", other)),
            }
        }
        #[cfg(feature = "mutants")]
        Op::ReleaseUnchecked { key } => delete(key, conn).await,
        Op::Survey => survey(conn, shared).await,
        Op::Stamp { record, run_id } => {
            let (written, fingerprint) = stamp(conn, record, run_id.as_deref()).await?;
            Ok(Reply::Stamped {
                written,
                fingerprint,
            })
        }
    }
}

/// The error of a lock script that found another kind of lock under the name.
fn wrong_kind(found: Option<&str>) -> MasterError {
    MasterError::new(
        MasterErrorKind::WrongKind,
        format!(
            "the name holds a {} here, not a lock: use another name",
            found.unwrap_or("value of another kind")
        ),
    )
}

/// Reads the cluster record (`HGETALL`).
async fn read_record(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<Option<Record>, MasterError> {
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(record_key)
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    parse_record(&fields)
}

fn parse_record(fields: &HashMap<String, String>) -> Result<Option<Record>, MasterError> {
    Record::parse(fields).map_err(|e| MasterError::new(MasterErrorKind::Protocol, e))
}

/// Reads the `run_id` (if the master lets this client read `INFO`) and the cluster record
/// of a freshly connected master, for a client without restart quarantine.
async fn read_cluster(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<(Option<String>, Option<Record>), MasterError> {
    let replies: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("HGETALL")
        .arg(record_key)
        .ignore_errors()
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let mut replies = replies.into_iter();
    let server: redis::RedisResult<redis::InfoDict> = value(next_reply(&mut replies));
    let run_id = match server {
        Ok(server) => server.get::<String>("run_id"),
        Err(err) if err.kind() == redis::ErrorKind::AuthenticationFailed => {
            return Err(MasterError::from_redis(err));
        }
        Err(_) => None,
    };
    let fields: HashMap<String, String> =
        value(next_reply(&mut replies)).map_err(MasterError::from_redis)?;
    Ok((run_id, parse_record(&fields)?))
}

/// The next reply of a pipeline, or an error if it has no more.
fn next_reply(
    replies: &mut impl Iterator<Item = redis::RedisResult<redis::Value>>,
) -> redis::RedisResult<redis::Value> {
    replies.next().unwrap_or_else(|| {
        Err(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "missing pipeline reply",
        )))
    })
}

/// Writes `record` unless the master has one (`stamp.lua`); with `run_id`, as the
/// bootstrap of that process. Returns whether it wrote, and the fingerprint it now has.
async fn stamp(
    conn: &mut MultiplexedConnection,
    record: &Record,
    run_id: Option<&str>,
) -> Result<(bool, String), MasterError> {
    let mut invocation = scripts::STAMP.key(&*record_key_of(record));
    invocation
        .key(scripts::EPOCH_KEY)
        .arg(run_id.unwrap_or(""))
        .arg(new_epoch_id());
    for (field, value) in record.fields() {
        invocation.arg(field).arg(value);
    }
    let (written, fingerprint): (i64, String) = invocation
        .invoke_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    Ok((written == 1, fingerprint))
}

/// The key of a record's cluster record (under its prefix).
fn record_key_of(record: &Record) -> String {
    cluster::record_key(&record.terms.prefix)
}

/// How many keys one `SCAN` step asks for while a survey looks for a key under the prefix.
const SURVEY_SCAN_COUNT: usize = 1000;

/// Reads what bootstrapping needs (`Op::Survey`): `run_id`, record, and whether a key
/// other than the records lies under the prefix (a bounded `SCAN`: the call's node
/// timeout cuts a survey of a huge keyspace short).
async fn survey(conn: &mut MultiplexedConnection, shared: &Shared) -> Result<Reply, MasterError> {
    let (run_id, record) = read_cluster(conn, &shared.record_key).await?;
    let run_id = run_id.ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Other,
            "cannot read INFO server (its run_id tells one server from another): allow \
             INFO to this user",
        )
    })?;
    let prefix = &shared.view.terms().prefix;
    let pattern = format!("{}*", glob_escape(prefix));
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SURVEY_SCAN_COUNT)
            .query_async(conn)
            .await
            .map_err(MasterError::from_redis)?;
        if let Some(key) = keys
            .into_iter()
            .find(|k| !scripts::is_record_key(k, prefix))
        {
            return Ok(Reply::Survey {
                run_id,
                record: record.map(Box::new),
                holds: Some(key),
            });
        }
        if next == 0 {
            return Ok(Reply::Survey {
                run_id,
                record: record.map(Box::new),
                holds: None,
            });
        }
        cursor = next;
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A plain `DEL` (the `PlainDelRelease` mutant).
#[cfg(feature = "mutants")]
async fn delete(key: &str, conn: &mut MultiplexedConnection) -> Result<Reply, MasterError> {
    let deleted: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    Ok(if deleted > 0 {
        Reply::Granted
    } else {
        Reply::Missing
    })
}

/// Loads every script a lock master runs (one pipeline).
async fn load_scripts(conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
    let mut load = redis::pipe();
    for script in scripts::master_scripts() {
        load.cmd("SCRIPT").arg("LOAD").arg(script).ignore();
    }
    load.query_async(conn).await
}

/// Reads what restart quarantine needs to know about a freshly connected master, and its
/// cluster record, in one round trip.
async fn read_vitals(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<(Vitals, Option<Record>), MasterError> {
    let replies: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("memory")
        // May be renamed away; then the master is simply not known to be durable.
        .cmd("CONFIG")
        .arg("GET")
        .arg("append*")
        .cmd("EVAL")
        .arg(scripts::EPOCH_SOURCE)
        .arg(1)
        .arg(scripts::EPOCH_KEY)
        .arg(new_epoch_id())
        .cmd("HGETALL")
        .arg(record_key)
        .ignore_errors()
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let mut replies = replies.into_iter();
    let mut next = || next_reply(&mut replies);
    let server: redis::InfoDict = value(next()).map_err(MasterError::from_redis)?;
    let memory: redis::InfoDict = value(next()).map_err(MasterError::from_redis)?;
    let config: redis::RedisResult<Vec<String>> = value(next());
    let (record, now): (String, String) = value(next()).map_err(MasterError::from_redis)?;
    let fields: HashMap<String, String> = value(next()).map_err(MasterError::from_redis)?;
    let cluster = parse_record(&fields)?;
    let run_id: String = server.get("run_id").unwrap_or_default();
    let uptime: u64 = server.get("uptime_in_seconds").unwrap_or(0);
    let policy: String = memory.get("maxmemory_policy").unwrap_or_default();
    let maxmemory: u64 = memory.get("maxmemory").unwrap_or(0);
    let durable = config.is_ok_and(|kv| {
        let get = |name: &str| {
            kv.chunks(2)
                .find(|p| p.first().map(String::as_str) == Some(name))
                .and_then(|p| p.get(1).cloned())
        };
        get("appendonly").as_deref() == Some("yes")
            && get("appendfsync").as_deref() == Some("always")
    });
    let now_us = parse_number("epoch", &now)?;
    let epoch = Epoch::parse(&record, now_us).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!(
                "the epoch record {:?} is not <id>:<microseconds>",
                scripts::EPOCH_KEY
            ),
        )
    })?;
    // Bootstrapped empty, and neither restarted nor flushed since (docs/design.md §11).
    let bootstrapped = cluster.as_ref().is_some_and(|c| {
        !c.bootstrap_run_id.is_empty()
            && c.bootstrap_run_id == run_id
            && *c.bootstrap_epoch == *epoch.id
    });
    let vitals = Vitals {
        run_id,
        uptime: Duration::from_secs(uptime),
        durable,
        epoch,
        misconfigured: eviction_risk(&policy, maxmemory),
        bootstrapped,
        counters_lost: cluster.as_ref().is_some_and(|c| c.counters_lost),
    };
    Ok((vitals, cluster))
}

/// Reads whether the master can evict lock keys (`INFO memory`), for a client without
/// restart quarantine. A master that refuses the command for want of authentication
/// fails; one whose ACLs or renamed commands hide it is taken as it is, with a note.
async fn read_eviction(conn: &mut MultiplexedConnection) -> Result<Option<String>, MasterError> {
    let info: redis::RedisResult<redis::InfoDict> =
        redis::cmd("INFO").arg("memory").query_async(conn).await;
    match info {
        Ok(memory) => {
            let policy: String = memory.get("maxmemory_policy").unwrap_or_default();
            let maxmemory: u64 = memory.get("maxmemory").unwrap_or(0);
            Ok(eviction_risk(&policy, maxmemory))
        }
        Err(err)
            if matches!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
            ) =>
        {
            tracing::debug!(error = %err, "no permission to read the eviction settings");
            Ok(None)
        }
        Err(err) => {
            let err = MasterError::from_redis(err);
            match err.kind() {
                MasterErrorKind::Auth
                | MasterErrorKind::Refused
                | MasterErrorKind::Io
                | MasterErrorKind::Timeout => Err(err),
                _ => {
                    tracing::debug!(error = %err, "cannot read the eviction settings");
                    Ok(None)
                }
            }
        }
    }
}

/// One pipeline reply, converted.
fn value<T: redis::FromRedisValue>(
    reply: redis::RedisResult<redis::Value>,
) -> redis::RedisResult<T> {
    reply.and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
}

/// A fresh id for a data epoch this client may start.
fn new_epoch_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn parse_number(script: &str, text: &str) -> Result<u64, MasterError> {
    text.parse().map_err(|_| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!("{script} script answered {text:?} where a number belongs"),
        )
    })
}

fn unexpected(script: &str, code: i64) -> MasterError {
    MasterError::new(
        MasterErrorKind::Protocol,
        format!("{script} script answered {code}, which the lock protocol does not define"),
    )
}

/// Whole milliseconds for `PX`, at least 1 (Redis rejects `PX 0`).
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
