//! A master's connection: its state (idle, up, down), the first connect and the
//! reconnects in the background, and the cluster record's admission of what a connection
//! finds (docs/design.md §11).

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tokio::sync::{oneshot, watch};

use super::Shared;
use super::request::Built;
use super::vitals::{read_cluster, read_record, read_vitals};
use crate::backoff::Doubling;
use crate::cluster::{Admission, Record};
use crate::error::{MasterError, MasterErrorKind, human};
use crate::quarantine::Vitals;
use crate::scripts;

/// The outcome of a first connection in progress, once it is known.
pub(super) type Connecting = watch::Receiver<Option<Result<(), MasterError>>>;

/// A live connection, its generation, and why its master can evict lock keys (if it can).
pub(super) type Connection = (MultiplexedConnection, u64, Arc<Eviction>);

/// Why a connection's master can evict lock keys (`Some`) or that it cannot (`None`), once
/// read: at connect with quarantine on, else by the connection's first requests.
pub(super) type Eviction = tokio::sync::OnceCell<Option<Arc<str>>>;

/// What a fresh connection read of its master.
pub(super) struct Opened {
    conn: MultiplexedConnection,
    /// With quarantine on.
    vitals: Option<Vitals>,
    /// Whether the master can evict lock keys, when read at connect.
    evicts: Arc<Eviction>,
}

pub(super) enum State {
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
pub(super) struct Canary(oneshot::Sender<()>);

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

impl Shared {
    /// Reads the cluster record of a master this client refused again and decides as at a
    /// connect, within the node timeout; `Err` while it is still refused.
    pub(super) async fn recheck(&self, mut conn: MultiplexedConnection) -> Result<(), MasterError> {
        let recheck = async {
            let record = read_record(&mut conn, &self.record_key).await?;
            let run_id = self
                .run_id
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            self.admit(&mut conn, run_id, record.as_ref()).await
        };
        match tokio::time::timeout(self.node_timeout(), recheck).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(self.timed_out()),
        }
        match self.view.refused(self.index) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }

    /// The live connection, or the reason there is none. Connects inline only the first
    /// time; afterwards a broken master fails fast while the background task reconnects.
    pub(super) async fn connection(self: &Arc<Self>) -> Result<Connection, MasterError> {
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
    pub(super) fn ready(&self) -> Option<Result<Connection, MasterError>> {
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
    pub(super) async fn open(&self) -> Result<Opened, MasterError> {
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
    pub(super) fn connect_failed(&self, err: redis::RedisError) -> MasterError {
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
                let answer = Built::new(scripts::stamp(&record, None))
                    .send(conn, String::new)
                    .await?;
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
    pub(super) async fn reread(
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
    pub(super) async fn record_changed(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<(), MasterError> {
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

    pub(super) fn set_up(&self, opened: Opened) -> Connection {
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
    pub(super) fn mark_down(self: &Arc<Self>, generation: u64, error: MasterError) {
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
