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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};
use tokio::sync::{oneshot, watch};

use crate::backoff::Doubling;
use crate::cluster::{self, Admission, Record, View};
use crate::config::{Config, MasterSpec};
use crate::quarantine::{Epoch, Standing, Vitals, eviction_risk};

use crate::error::{MasterError, MasterErrorKind, human};
#[cfg(feature = "mutants")]
use crate::mutants::Planted;
use crate::scripts;

mod order;

use order::Order;

#[cfg(test)]
pub(crate) use crate::op::EpochReport;
pub(crate) use crate::op::{
    FenceOutcome, FenceRead, Inspected, Op, PermitsOp, Reply, RwMode, StampOutcome,
};

/// One master, as the quorum round sees it.
pub(crate) trait Master: Send + Sync + fmt::Debug {
    /// The master's address, password redacted.
    fn name(&self) -> &Arc<str>;

    /// Runs `op` on this master. The call takes its place in the master's order when it
    /// is made, not when its future is first polled (docs/design.md §2): implementations
    /// that wrap another master make the inner call at once. The returned future owns
    /// everything it needs, so a round can hand it to a background task once the round is
    /// decided; it finishes within the node timeout, plus, before its request leaves, at
    /// most the connect timeout (first use) and its turn behind earlier calls (at most a
    /// connect and a node timeout).
    fn call(&self, op: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>>;

    /// What the latest (re)connection read of the master, numbered by connection, when
    /// the master reads vitals (restart quarantine on).
    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        None
    }

    /// Reads what `Redlock::check_masters` reports about the master ([`Probe`]), writing
    /// nothing; `record_key` is the cluster record's key. Not a lock operation: it never
    /// counts in a round, so it is no [`Op`]. Finishes within the connect timeout plus the
    /// node timeout. Masters that cannot be probed say so.
    fn probe(&self, record_key: Arc<str>) -> BoxFuture<'static, Result<Probe, MasterError>> {
        let _ = record_key;
        Box::pin(async {
            Err(MasterError::new(
                MasterErrorKind::Other,
                "this master cannot be probed",
            ))
        })
    }

    /// Whether this client counts the master's votes at `now`, as last judged; `None`
    /// without restart quarantine. Reads only: it never changes the standing.
    fn standing(&self, now: tokio::time::Instant) -> Option<Standing> {
        let _ = now;
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
    /// The first connection in progress, if any: every call that needs it waits for its
    /// outcome. It runs in a task of its own, so it ends (within the connect timeout)
    /// whether or not the call that started it is still polled.
    connecting: Mutex<Option<Connecting>>,
    /// The connection (generation) known to have the scripts loaded.
    scripts_loaded: AtomicU64,
    /// The `run_id` the latest connection read, if it could.
    run_id: Mutex<Option<String>>,
    generation: AtomicU64,
    /// The order in which calls write their requests: the order in which they were made.
    order: Arc<Order>,
    /// The client's planted bug (feature `mutants`): the scripts' codecs pick its
    /// variants.
    #[cfg(feature = "mutants")]
    planted: Planted,
}

/// The outcome of a first connection in progress, once it is known.
type Connecting = watch::Receiver<Option<Result<(), MasterError>>>;

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
    /// A master of a client of `config` that connects on first use; each request gets
    /// `node_timeout` (the configured one, unless a planted bug lifts it).
    pub(crate) fn new(
        spec: &MasterSpec,
        place: (usize, &Arc<View>),
        config: &Config,
        node_timeout: Duration,
    ) -> Result<Self, redis::RedisError> {
        let client = spec.client.clone();
        let (index, view) = place;
        Ok(Self {
            shared: Arc::new(Shared {
                name: spec.name.clone(),
                index,
                record_key: cluster::record_key(&view.terms().prefix).into(),
                view: Arc::clone(view),
                client,
                node_timeout,
                connect_timeout: config.connect_timeout,
                state: Mutex::new(State::Idle),
                read_vitals: config.quarantine,
                vitals: Mutex::new(None),
                connecting: Mutex::new(None),
                scripts_loaded: AtomicU64::new(0),
                run_id: Mutex::new(None),
                generation: AtomicU64::new(0),
                order: Arc::default(),
                #[cfg(feature = "mutants")]
                planted: config.planted,
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
        // Its place in this master's order, taken now: a clean-up made after this call
        // writes its request after this one, even while the first connection is still
        // being set up (docs/design.md §2).
        let mut place = shared.order.take();
        // The future is boxed once per master and round: what it keeps across its awaits
        // is kept small (one `run`, the rare paths boxed on their own), so that the box
        // is cheap to allocate and to fill.
        Box::pin(async move {
            place
                .turn(shared.connect_timeout + shared.node_timeout)
                .await;
            let (mut conn, generation, evicts) = match shared.ready() {
                Some(ready) => ready?,
                None => Box::pin(shared.connection()).await?,
            };
            // A master whose cluster record disagrees, or that this client reaches twice,
            // never votes for it (docs/design.md §11), and is not asked to lock. Its record
            // is read again first (one round trip, within the node timeout): it may have
            // been re-admitted, or the configuration fixed, since.
            if !op.is_unguarded() && shared.view.refused(shared.index).is_some() {
                Box::pin(shared.recheck(conn.clone())).await?;
            }
            // A master that can evict lock keys never votes, quarantine or not. Without
            // quarantine its settings are read by the connection's first requests: sent
            // before them on the same ordered connection (one round trip, not two), and
            // every answer waits for the settings before it counts.
            let known = evicts.get().cloned();
            let eviction = match known {
                Some(_) => None,
                None => Some(Box::pin(eviction_of(
                    conn.clone(),
                    Arc::clone(&shared),
                    evicts,
                ))),
            };
            // A master without the scripts answers NOSCRIPT, and the fallback (load, run
            // again) costs two more round trips and runs after commands sent later on the
            // connection. So the first request on a connection carries the loads with it:
            // sent first on the same ordered connection, answered in the same round trip.
            // Exactly one request per connection carries them.
            let first = shared.scripts_loaded.load(Ordering::Relaxed) != generation
                && shared.scripts_loaded.swap(generation, Ordering::Relaxed) != generation;
            let preload = first.then(|| {
                let mut conn = conn.clone();
                let scripts = shared.scripts();
                Box::pin(async move { load_scripts(&mut conn, scripts).await })
            });
            let request = async {
                let (eviction, loaded, reply) = futures::future::join3(
                    futures::future::OptionFuture::from(eviction),
                    futures::future::OptionFuture::from(preload),
                    run(&op, &mut conn, &shared),
                )
                .await;
                if let Some(Err(_)) = loaded {
                    // The next request tries again; NOSCRIPT falls back meanwhile.
                    let _ = shared.scripts_loaded.compare_exchange(
                        generation,
                        0,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                // Releases always pass: they must reach every master that may hold the key.
                if !op.is_unguarded() {
                    let problem = match eviction {
                        Some(read) => read?,
                        None => known.flatten(),
                    };
                    if let Some(problem) = problem {
                        return Err(MasterError::new(
                            MasterErrorKind::Misconfigured,
                            format!("it never votes: {problem}"),
                        ));
                    }
                }
                reply
            };
            // The first poll writes the request (and the loads and reads sent with it)
            // to the connection: later calls may write theirs from then on.
            // Unconstrained by tokio's cooperative budget: a first poll that the budget cut
            // short would pass the place without having written anything.
            let mut request = std::pin::pin!(tokio::task::unconstrained(tokio::time::timeout(
                shared.node_timeout,
                request
            )));
            let answered = std::future::poll_fn(|cx| {
                let polled = request.as_mut().poll(cx);
                place.pass();
                polled
            })
            .await;
            match answered {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(err)) => {
                    if err.breaks_connection() {
                        shared.mark_down(generation, err.clone());
                    }
                    Err(err)
                }
                Err(_) => Err(shared.timed_out()),
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

    fn probe(&self, record_key: Arc<str>) -> BoxFuture<'static, Result<Probe, MasterError>> {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { shared.probe(&record_key).await })
    }

    fn disowned(&self) -> Option<MasterError> {
        self.shared.view.disowned(self.shared.index)
    }
}

/// Whether the master behind `conn` can evict lock keys, read once per connection (by
/// the first request that needs it; the others wait for that read).
async fn eviction_of(
    mut conn: MultiplexedConnection,
    shared: Arc<Shared>,
    evicts: Arc<Eviction>,
) -> Result<Option<Arc<str>>, MasterError> {
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

impl Shared {
    /// The scripts this master loads on every (re)connect: the product's, and the planted
    /// variants its client sends (feature `mutants`).
    fn scripts(&self) -> Vec<&'static str> {
        #[cfg_attr(not(feature = "mutants"), allow(unused_mut))]
        let mut scripts = scripts::master_scripts();
        #[cfg(feature = "mutants")]
        scripts.extend(scripts::planted_scripts(&self.planted));
        scripts
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a poisoned lock still holds a
        // consistent value.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the cluster record of a master this client refused again and decides as at a
    /// connect, within the node timeout; `Err` while it is still refused.
    async fn recheck(&self, mut conn: MultiplexedConnection) -> Result<(), MasterError> {
        let recheck = async {
            let record = read_record(&mut conn, &self.record_key).await?;
            let run_id = self
                .run_id
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            self.admit(&mut conn, run_id, record.as_ref()).await
        };
        match tokio::time::timeout(self.node_timeout, recheck).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(self.timed_out()),
        }
        match self.view.refused(self.index) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }

    /// The failure of a request that got no answer within the node timeout.
    fn timed_out(&self) -> MasterError {
        MasterError::new(
            MasterErrorKind::Timeout,
            format!(
                "no answer within the node timeout ({})",
                human(self.node_timeout)
            ),
        )
    }

    /// The live connection, or the reason there is none. Connects inline only the first
    /// time; afterwards a broken master fails fast while the background task reconnects.
    async fn connection(self: &Arc<Self>) -> Result<Connection, MasterError> {
        if let Some(ready) = self.ready() {
            return ready;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(MasterError::new(
                MasterErrorKind::Other,
                "no tokio runtime to connect from",
            ));
        };
        let mut outcome = {
            let mut connecting = self
                .connecting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match &*connecting {
                Some(outcome) => outcome.clone(),
                None => {
                    if let Some(ready) = self.ready() {
                        return ready;
                    }
                    let (tell, outcome) = watch::channel(None);
                    *connecting = Some(outcome.clone());
                    let shared = Arc::clone(self);
                    runtime.spawn(async move {
                        // `open` is bounded by the connect timeout.
                        let opened = match shared.open().await {
                            Ok(conn) => {
                                shared.set_up(conn);
                                Ok(())
                            }
                            Err(err) => {
                                shared.mark_down(0, err.clone());
                                Err(err)
                            }
                        };
                        *shared
                            .connecting
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = None;
                        let _ = tell.send(Some(opened));
                    });
                    outcome
                }
            }
        };
        let opened = match outcome.wait_for(Option::is_some).await {
            Ok(opened) => opened.clone(),
            // The task ended without a word: its runtime shut down.
            Err(_) => None,
        };
        match opened {
            Some(Err(err)) => Err(err),
            _ => self.ready().unwrap_or_else(|| {
                Err(MasterError::new(
                    MasterErrorKind::Other,
                    "the connection was set up in a runtime that has shut down",
                ))
            }),
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
                .map_err(|e| self.connect_failed(e))?;
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

    /// A failure to connect, with a hint when the URL's scheme may not match the port: a
    /// port that only accepts TLS closes a connection that does not speak it, and a port
    /// without TLS waits for more of a handshake it reads as a command, until the timeout.
    /// Both stay retryable: a network fault looks the same. A host name that does not
    /// resolve says so instead (no hint: no port was reached), retryable as well: a
    /// resolver can fail for a while.
    fn connect_failed(&self, err: redis::RedisError) -> MasterError {
        let error = MasterError::from_redis(err);
        let (host, tls) = match self.client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, _) => (Some(host), false),
            redis::ConnectionAddr::TcpTls { host, .. } => (Some(host), true),
            _ => (None, false),
        };
        // No address was reached: neither scheme can be the cause, the name is.
        if let Some(host) = host
            && error.is_unresolved()
        {
            let message = format!(
                "could not resolve host {host:?} ({error}): check the host name in the \
                 master's URL, and that this machine's DNS resolves it"
            );
            return error.with_message(message);
        }
        match (tls, error.kind()) {
            (false, MasterErrorKind::Io) => error.with_note(
                " (if the master only accepts TLS on this port, write its URL as rediss://)",
            ),
            (true, MasterErrorKind::Timeout) => error.with_note(
                " (if the master does not speak TLS on this port, give its tls-port, or write \
                 its URL as redis://)",
            ),
            _ => error,
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
                let answer = send(conn, &scripts::stamp(&record, None)).await?;
                scripts::stamped(answer).map(|_| ())
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
    /// The record may name this process as bootstrapped: restart quarantine reads that with
    /// the other vitals, so they are read again too (one more round trip).
    async fn reread(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<Option<Record>, MasterError> {
        let record = read_record(conn, &self.record_key).await?;
        if self.read_vitals && record.is_some() {
            let (vitals, _) = read_vitals(conn, &self.record_key).await?;
            let sequence = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            *self.vitals.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((sequence, Arc::new(vitals)));
        }
        let run_id = self
            .run_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.admit(conn, run_id, record.as_ref()).await?;
        Ok(record)
    }

    /// The answer to a script that found another cluster record than the one this client
    /// sent (or none): reads the record again and decides as at a connect. `Ok` when this
    /// client adopted the record it found (written after it connected, by `init_cluster`):
    /// the request may be sent again at once, now carrying it.
    async fn record_changed(&self, conn: &mut MultiplexedConnection) -> Result<(), MasterError> {
        let record = self.reread(conn).await?;
        match self.view.refused(self.index) {
            Some(refusal) => Err(refusal),
            None if record.is_none() => Err(MasterError::new(
                MasterErrorKind::Other,
                "it lost its cluster record (and its data): written again; it votes after \
                 its restart quarantine",
            )),
            None if self.view.fingerprint().is_empty() => Err(MasterError::new(
                MasterErrorKind::Protocol,
                "its lock script refused this client's cluster fingerprint, yet its record \
                 agrees with it",
            )),
            None => Ok(()),
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

/// Sends `op` on `conn` and reads the answer: the master's own reads for a survey and a
/// scan, else the request its script family's codec builds ([`invoke`]).
async fn run(
    op: &Op,
    conn: &mut MultiplexedConnection,
    shared: &Shared,
) -> Result<Reply, MasterError> {
    // Met before this client knew its cluster, and without a record then: read it again
    // before it votes (it may be a member, or a stranger that never votes).
    if !op.is_unguarded() && shared.view.stale(shared.index) {
        Box::pin(shared.reread(conn)).await?;
        if let Some(refusal) = shared.view.refused(shared.index) {
            return Err(refusal);
        }
    }
    match op {
        Op::Survey => survey(conn, shared).await,
        Op::Scan { cursor, rw } => scan(conn, shared, *cursor, *rw).await,
        op => invoke(op, conn, shared).await,
    }
}

/// Sends the request that `op`'s codec builds around the cluster fingerprint this client
/// knows, and reads the answer. A script that finds another record than the one sent
/// (or none) refuses (`-2`): the record is read again (`record_changed`), and when this
/// client adopts it (written after it connected, by `init_cluster`), the request is sent
/// again, once, now carrying it.
async fn invoke(
    op: &Op,
    conn: &mut MultiplexedConnection,
    shared: &Shared,
) -> Result<Reply, MasterError> {
    let codec = scripts::codec(op).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Other,
            format!("no script carries a {} request", op.name()),
        )
    })?;
    let mut learnt = false;
    loop {
        let fingerprint = shared.view.fingerprint();
        let epoch_id = new_epoch_id();
        let context = scripts::Context {
            record_key: &shared.record_key,
            prefix: &shared.view.terms().prefix,
            fingerprint: &fingerprint,
            epoch_id: &epoch_id,
            #[cfg(feature = "mutants")]
            planted: shared.planted,
        };
        let request = codec.encode(op, &context)?;
        let answer = send(conn, &request).await?;
        if !request.record_differs(&answer) {
            return codec.decode(op, answer);
        }
        if learnt {
            return Err(refused_again());
        }
        Box::pin(shared.record_changed(conn)).await?;
        learnt = true;
    }
}

/// Sends `request` on `conn`: a script with `EVALSHA`, loaded and sent again if the master
/// answers `NOSCRIPT` (it restarted, or its script cache was flushed), or a command.
async fn send(
    conn: &mut MultiplexedConnection,
    request: &scripts::Request,
) -> Result<redis::Value, MasterError> {
    let answer = match request {
        scripts::Request::Script(call) => {
            let mut invocation = call.script.prepare_invoke();
            for key in &call.keys {
                invocation.key(key.as_str());
            }
            for arg in &call.args {
                invocation.arg(arg.as_str());
            }
            invocation.invoke_async(conn).await
        }
        scripts::Request::Command(command) => command.query_async(conn).await,
    };
    answer.map_err(MasterError::from_redis)
}

/// A script refused this client's fingerprint again, right after the client adopted the
/// master's record: the record changed once more in between.
fn refused_again() -> MasterError {
    MasterError::new(
        MasterErrorKind::Other,
        "its cluster record changed twice during one request: try again",
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

/// How many keys one `SCAN` step asks for while a survey looks for a key under the prefix.
const SURVEY_SCAN_COUNT: usize = 1000;

/// Reads what bootstrapping needs (`Op::Survey`): `run_id`, record and data epoch.
async fn survey(conn: &mut MultiplexedConnection, shared: &Shared) -> Result<Reply, MasterError> {
    let (run_id, record) = read_cluster(conn, &shared.record_key).await?;
    let run_id = run_id.ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Misconfigured,
            "cannot read INFO server (its run_id tells one server from another): allow \
             INFO to this user",
        )
    })?;
    let (epoch, now): (String, String) = redis::cmd("EVAL")
        .arg(scripts::EPOCH_SOURCE)
        .arg(1)
        .arg(scripts::EPOCH_KEY)
        .arg(new_epoch_id())
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let now_us = scripts::parse_number("epoch", &now)?;
    let epoch = Epoch::parse(&epoch, now_us).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!("the epoch record {epoch:?} is not <id>:<microseconds>"),
        )
    })?;
    Ok(Reply::Survey {
        run_id,
        record: record.map(Box::new),
        epoch: epoch.id.to_string(),
    })
}

/// One bounded `SCAN` step (`Op::Scan`) for a key under the prefix that is not one of
/// this crate's records; with `rw`, for a read-write lock's keys of a lock under the
/// prefix, which lie in the records' namespace (with an empty prefix, the first scan saw
/// them). Keys are read as bytes: any key may be binary.
async fn scan(
    conn: &mut MultiplexedConnection,
    shared: &Shared,
    cursor: u64,
    rw: bool,
) -> Result<Reply, MasterError> {
    let prefix = &shared.view.terms().prefix;
    if rw && prefix.is_empty() {
        return Ok(Reply::Scanned {
            next: 0,
            found: None,
        });
    }
    let pattern = if rw {
        format!("{}{}*", scripts::RW_NAMESPACE, glob_escape(prefix))
    } else {
        format!("{}*", glob_escape(prefix))
    };
    let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(&pattern)
        .arg("COUNT")
        .arg(SURVEY_SCAN_COUNT)
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let found = keys
        .iter()
        .map(|k| String::from_utf8_lossy(k))
        .find(|k| rw || !scripts::is_record_key(k, prefix))
        .map(|k| k.into_owned());
    Ok(Reply::Scanned { next, found })
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

/// Loads `scripts` (one pipeline).
async fn load_scripts(
    conn: &mut MultiplexedConnection,
    scripts: Vec<&'static str>,
) -> redis::RedisResult<()> {
    let mut load = redis::pipe();
    for script in scripts {
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
    let now_us = scripts::parse_number("epoch", &now)?;
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

/// What a health probe read of one master (`Master::probe`), as the master answered it:
/// each part separately, since a user's ACLs or a renamed command can hide one part and
/// not the others. Judged by `health.rs`.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// The pipeline's round trip, on the client's monotonic clock.
    pub(crate) round_trip: Duration,
    /// The client's wall clock at the midpoint of the round trip, in microseconds since
    /// the Unix epoch (`None` if it is set before it).
    pub(crate) client_time_us: Option<u64>,
    /// `TIME`, in microseconds since the Unix epoch.
    pub(crate) server_time_us: Result<u64, MasterError>,
    /// `INFO server`, `INFO replication`, `INFO persistence`, `INFO memory`: the text.
    pub(crate) server: Result<String, MasterError>,
    pub(crate) replication: Result<String, MasterError>,
    pub(crate) persistence: Result<String, MasterError>,
    pub(crate) memory: Result<String, MasterError>,
    /// `CONFIG GET append*` (the command may be renamed away or forbidden).
    pub(crate) config: Result<BTreeMap<String, String>, MasterError>,
    /// `HGETALL` of the cluster record: empty when there is none.
    pub(crate) record: Result<BTreeMap<String, String>, MasterError>,
    /// Why this client does not let the master vote, as far as the cluster record goes:
    /// a record that disagrees with the client's settings, or a refusal the client made
    /// when it connected (a twin, a stranger).
    pub(crate) refused: Option<String>,
}

impl Shared {
    /// Reads the master's health on a connection of its own, closed afterwards: the lock
    /// connection's state (down, reconnecting) and its first requests (which load the
    /// scripts and start a data epoch) must neither hide nor change what is read, and a
    /// replica or an old server, whose lock connection fails, must still be described.
    /// Connects within the connect timeout, then one pipeline within the node timeout.
    async fn probe(&self, record_key: &str) -> Result<Probe, MasterError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let mut conn = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(conn) => conn.map_err(|e| self.connect_failed(e))?,
            Err(_) => {
                return Err(MasterError::new(
                    MasterErrorKind::Timeout,
                    format!("could not connect within {}", human(self.connect_timeout)),
                ));
            }
        };
        match tokio::time::timeout(self.node_timeout, read_health(&mut conn, record_key)).await {
            Ok(probe) => probe.map(|mut probe| {
                let disagrees = probe.record.as_ref().ok().and_then(|fields| {
                    let fields: HashMap<String, String> =
                        fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    match Record::parse(&fields) {
                        Ok(Some(record)) => self.view.terms().disagreement(&record),
                        Ok(None) => None,
                        Err(error) => Some(error),
                    }
                });
                probe.refused =
                    disagrees.or_else(|| self.view.refused(self.index).map(|e| e.to_string()));
                probe
            }),
            Err(_) => Err(MasterError::new(
                MasterErrorKind::Timeout,
                format!(
                    "no answer within the node timeout ({})",
                    human(self.node_timeout)
                ),
            )),
        }
    }
}

/// One pipeline of reads (nothing is written): `TIME` first, so that the server's clock
/// is read as early in the round trip as possible, then the settings and the record.
async fn read_health(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<Probe, MasterError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for section in ["server", "replication", "persistence", "memory"] {
        pipe.cmd("INFO").arg(section);
    }
    pipe.cmd("CONFIG").arg("GET").arg("append*");
    pipe.cmd("HGETALL").arg(record_key);
    pipe.ignore_errors();
    let wall = std::time::SystemTime::now();
    let sent = tokio::time::Instant::now();
    let replies: Vec<redis::RedisResult<redis::Value>> = pipe
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let round_trip = sent.elapsed();
    let client_time_us = wall
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|since| since.saturating_add(round_trip / 2).as_micros())
        .and_then(|us| u64::try_from(us).ok());
    // A connection that may run nothing (no password given, or a wrong one that the
    // server let through unauthenticated) answers every command with the same refusal.
    if let Some(Err(first)) = replies.first()
        && replies.iter().all(Result::is_err)
    {
        return Err(MasterError::from_redis(first.clone()));
    }
    let mut replies = replies.into_iter();
    let mut next = || {
        replies.next().unwrap_or_else(|| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "missing pipeline reply",
            )))
        })
    };
    let server_time_us = value::<(u64, u64)>(next())
        .map(|(secs, micros)| secs.saturating_mul(1_000_000).saturating_add(micros))
        .map_err(MasterError::from_redis);
    let mut text = || value::<String>(next()).map_err(MasterError::from_redis);
    let (server, replication, persistence, memory) = (text(), text(), text(), text());
    let config = value(next()).map_err(MasterError::from_redis);
    let record = value(next()).map_err(MasterError::from_redis);
    Ok(Probe {
        round_trip,
        client_time_us,
        server_time_us,
        server,
        replication,
        persistence,
        memory,
        config,
        record,
        refused: None,
    })
}
