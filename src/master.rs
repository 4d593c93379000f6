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

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client};

use crate::config::{Config, MasterSpec};
use crate::error::{MasterError, MasterErrorKind, human};
use crate::mutants::Mutant;
use crate::scripts;

/// One request of the lock protocol, as sent to every master of a round.
#[derive(Debug)]
pub(crate) enum Op {
    /// `SET key value NX PX ttl`; with `holder_ttl`, pipelined with `PTTL key` so that a
    /// refusal says when the holder's key expires (for waiters).
    Acquire {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
        holder_ttl: bool,
    },
    /// Compare-and-`PEXPIRE` (re-setting a missing key), see `extend.lua`.
    Extend {
        key: Arc<str>,
        value: Arc<str>,
        ttl: Duration,
    },
    /// Compare-and-delete plus release notice, see `release.lua`.
    Release {
        key: Arc<str>,
        value: Arc<str>,
        channel: Arc<str>,
    },
    /// A plain `DEL key`: only [`Mutant::PlainDelRelease`] sends it.
    ReleaseUnchecked { key: Arc<str> },
}

impl Op {
    /// The release of `value` under `key`, as configured.
    pub(crate) fn release(config: &Config, key: &Arc<str>, value: &Arc<str>) -> Op {
        if config.mutant == Some(Mutant::PlainDelRelease) {
            return Op::ReleaseUnchecked {
                key: Arc::clone(key),
            };
        }
        Op::Release {
            key: Arc::clone(key),
            value: Arc::clone(value),
            channel: scripts::release_channel(key).into(),
        }
    }

    /// The operation's name in traces.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Acquire { .. } => "acquire",
            Op::Extend { .. } => "extend",
            Op::Release { .. } | Op::ReleaseUnchecked { .. } => "release",
        }
    }
}

/// A master's answer to an [`Op`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Done as asked: set, extended (or set again), or deleted.
    Granted,
    /// The key holds another value.
    HeldByOther,
    /// The key holds another value, which expires in the given time.
    HeldFor(Duration),
    /// The key does not exist.
    Missing,
}

/// One master, as the quorum round sees it.
pub(crate) trait Master: Send + Sync + fmt::Debug {
    /// The master's address, password redacted.
    fn name(&self) -> &Arc<str>;

    /// Runs `op` on this master. The returned future owns everything it needs, so a
    /// round can hand it to a background task once the round is decided; it finishes
    /// within the node timeout (plus the connect timeout on first use).
    fn call(&self, op: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>>;
}

/// A real Redis master.
#[derive(Debug)]
pub(crate) struct RedisMaster {
    shared: Arc<Shared>,
}

struct Shared {
    name: Arc<str>,
    client: Client,
    node_timeout: Duration,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// Serialises the first connection attempt, so concurrent first calls share it.
    first_connect: tokio::sync::Mutex<()>,
    generation: AtomicU64,
}

enum State {
    /// Never connected.
    Idle,
    Up {
        conn: MultiplexedConnection,
        generation: u64,
    },
    /// Broken or refused; a background task is reconnecting.
    Down { error: MasterError },
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
        node_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, redis::RedisError> {
        let client = Client::open(spec.info.clone())?;
        Ok(Self {
            shared: Arc::new(Shared {
                name: spec.name.clone(),
                client,
                node_timeout,
                connect_timeout,
                state: Mutex::new(State::Idle),
                first_connect: tokio::sync::Mutex::new(()),
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
            let (mut conn, generation) = shared.connection().await?;
            match tokio::time::timeout(shared.node_timeout, run(&op, &mut conn)).await {
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
}

impl Shared {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a poisoned lock still holds a
        // consistent value.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live connection, or the reason there is none. Connects inline only the first
    /// time; afterwards a broken master fails fast while the background task reconnects.
    async fn connection(self: &Arc<Self>) -> Result<(MultiplexedConnection, u64), MasterError> {
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
    fn ready(&self) -> Option<Result<(MultiplexedConnection, u64), MasterError>> {
        match &*self.lock_state() {
            State::Idle => None,
            State::Up { conn, generation } => Some(Ok((conn.clone(), *generation))),
            State::Down { error } => Some(Err(MasterError::new(
                MasterErrorKind::Down,
                format!("master is down, reconnecting in the background (last error: {error})"),
            ))),
        }
    }

    async fn open(&self) -> Result<MultiplexedConnection, MasterError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Every request is bounded by our own node timeout instead.
            .set_response_timeout(None);
        match tokio::time::timeout(
            self.connect_timeout,
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(err)) => Err(MasterError::from_redis(err)),
            Err(_) => Err(MasterError::new(
                MasterErrorKind::Timeout,
                format!("could not connect within {}", human(self.connect_timeout)),
            )),
        }
    }

    fn set_up(&self, conn: MultiplexedConnection) -> (MultiplexedConnection, u64) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.lock_state() = State::Up {
            conn: conn.clone(),
            generation,
        };
        tracing::debug!(master = %self.name, generation, "master connected");
        (conn, generation)
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
                _ => return,
            }
            tracing::warn!(master = %self.name, %error, "master down, reconnecting in the background");
            *state = State::Down { error };
        }
        let weak = Arc::downgrade(self);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(reconnect(weak));
        }
    }
}

/// Reconnects a down master with capped exponential backoff. Ends when connected or when
/// the client holding the master is dropped.
async fn reconnect(weak: Weak<Shared>) {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    let mut backoff = FIRST;
    loop {
        tokio::time::sleep(backoff).await;
        let Some(shared) = weak.upgrade() else { return };
        match shared.open().await {
            Ok(conn) => {
                shared.set_up(conn);
                return;
            }
            Err(error) => {
                tracing::debug!(master = %shared.name, %error, "reconnect failed");
                *shared.lock_state() = State::Down { error };
            }
        }
        backoff = backoff.saturating_mul(2).min(MAX);
    }
}

/// Sends one op on `conn` and interprets the answer.
async fn run(op: &Op, conn: &mut MultiplexedConnection) -> Result<Reply, MasterError> {
    match op {
        Op::Acquire {
            key,
            value,
            ttl,
            holder_ttl: false,
        } => {
            let set: Option<String> = redis::cmd("SET")
                .arg(&**key)
                .arg(&**value)
                .arg("NX")
                .arg("PX")
                .arg(millis(*ttl))
                .query_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            Ok(if set.is_some() {
                Reply::Granted
            } else {
                Reply::HeldByOther
            })
        }
        Op::Acquire {
            key,
            value,
            ttl,
            holder_ttl: true,
        } => {
            let (set, pttl): (Option<String>, i64) = redis::pipe()
                .cmd("SET")
                .arg(&**key)
                .arg(&**value)
                .arg("NX")
                .arg("PX")
                .arg(millis(*ttl))
                .cmd("PTTL")
                .arg(&**key)
                .query_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            Ok(match (set, u64::try_from(pttl)) {
                (Some(_), _) => Reply::Granted,
                (None, Ok(ms)) => Reply::HeldFor(Duration::from_millis(ms)),
                // -1 (no expiry) or -2 (gone since): no useful hint.
                (None, Err(_)) => Reply::HeldByOther,
            })
        }
        Op::Extend { key, value, ttl } => {
            let code: i64 = scripts::EXTEND
                .key(&**key)
                .arg(&**value)
                .arg(millis(*ttl))
                .invoke_async(conn)
                .await
                .map_err(MasterError::from_redis)?;
            match code {
                1 | 2 => Ok(Reply::Granted),
                -1 => Ok(Reply::HeldByOther),
                other => Err(unexpected("extend", other)),
            }
        }
        Op::Release {
            key,
            value,
            channel,
        } => {
            let code: i64 = scripts::RELEASE
                .key(&**key)
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
        Op::ReleaseUnchecked { key } => delete(key, conn).await,
    }
}

/// A plain `DEL` (the `PlainDelRelease` mutant).
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
