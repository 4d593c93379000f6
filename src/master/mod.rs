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
//! # Files
//! This file holds the seam and the call: its place in the master's order (`order.rs`),
//! the connection it waits for, the scripts loaded with the first request on each
//! connection, and the node timeout. Around it: the connection's lifecycle (`connection.rs`:
//! state, open, reconnect, the cluster record's admission), the request itself
//! (`request.rs`: the codec's request sent, the master's own reads), what a connection reads
//! of its master (`vitals.rs`), and the health probe (`probe.rs`). The scripts and their
//! codecs are a leaf below (`scripts/`).
//!
//! Layer: below the round and above the settings (docs/design.md §10); it must not use the
//! round, quarantine's application (`guard.rs`), the core, leases or the facade.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::Client;
use redis::aio::MultiplexedConnection;

use crate::cluster::{self, View};
use crate::config::{Config, MasterSpec};
use crate::error::{MasterError, MasterErrorKind, human};
use crate::quarantine::{Standing, Vitals};
use crate::scripts;

mod connection;
mod order;
mod probe;
mod request;
mod vitals;

use connection::{Connecting, Eviction, State};
use order::Order;
pub(crate) use probe::Probe;
use request::{Built, load_scripts, run};
use vitals::read_eviction;

#[cfg(test)]
pub(crate) use crate::op::EpochReport;
pub(crate) use crate::op::{
    FenceOutcome, FenceRead, Inspected, Op, PermitsOp, Reply, RwMode, StampOutcome,
};

/// One op as it goes out to the masters of a round (or to one master): the op, and what
/// every master's request shares, made once for all of them.
#[derive(Debug)]
pub(crate) struct Outgoing {
    op: Arc<Op>,
    /// Drawn for every round: the id a request may give a data epoch it starts (§7) is
    /// this plus the master's place, new to each master and different on each.
    round: u64,
    /// The request the op's codec built for the first master that sent it, with the
    /// cluster fingerprint it carries: the other masters send it again while the client's
    /// fingerprint is the same. Two forms: with the client's holder record seen to, and
    /// without (`[hold as usize]`, see `scripts::Context::hold`).
    built: [OnceLock<(String, Arc<Built>)>; 2],
}

impl Outgoing {
    /// `op`, about to be sent.
    pub(crate) fn new(op: impl Into<Arc<Op>>) -> Arc<Self> {
        Arc::new(Self {
            op: op.into(),
            round: rand::random(),
            built: [OnceLock::new(), OnceLock::new()],
        })
    }

    /// The op.
    pub(crate) fn op(&self) -> &Arc<Op> {
        &self.op
    }

    /// The id the request to master `index` gives a data epoch it starts.
    fn epoch_id(&self, index: usize) -> String {
        format!("{:016x}", self.round.wrapping_add(index as u64))
    }

    /// The request for a client whose view of its cluster is `view`, seeing to the holder
    /// record with `hold`: the one built for an earlier master of this round while the
    /// view's fingerprint is the one it carries, else what `build` makes of the
    /// fingerprint the view holds now.
    fn request(
        &self,
        view: &View,
        hold: bool,
        build: impl FnOnce(&str) -> Result<Built, MasterError>,
    ) -> Result<Arc<Built>, MasterError> {
        let cached = &self.built[usize::from(hold)];
        if let Some((fingerprint, built)) = cached.get()
            && view.has_fingerprint(fingerprint)
        {
            return Ok(Arc::clone(built));
        }
        let fingerprint = view.fingerprint();
        let built = Arc::new(build(&fingerprint)?);
        // Another master may have built it meanwhile: either is right.
        let _ = cached.set((fingerprint, Arc::clone(&built)));
        Ok(built)
    }
}

/// One master, as the quorum round sees it.
pub(crate) trait Master: Send + Sync + fmt::Debug {
    /// The master's address, password redacted.
    fn name(&self) -> &Arc<str>;

    /// Runs `sent`'s op on this master. The call takes its place in the master's order when it
    /// is made, not when its future is first polled (docs/design.md §2): implementations
    /// that wrap another master make the inner call at once. The returned future owns
    /// everything it needs, so a round can hand it to a background task once the round is
    /// decided; it finishes within the node timeout, plus, before its request leaves, at
    /// most the connect timeout (first use) and its turn behind earlier calls (at most a
    /// connect and a node timeout).
    fn call(&self, sent: Arc<Outgoing>) -> BoxFuture<'static, Result<Reply, MasterError>>;

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
    /// The holder records known to outlive this client's locks on this master.
    holders: Mutex<Holders>,
}

/// The holder records (by tag) that a grant on one connection saw to, and until when each
/// is known to live (`scripts::HOLDER_KNOWN` after the request was sent): a lock that
/// expires before then leaves its record alone (docs/design.md §11). Known per
/// connection: a master reached again may have lost its data, and every record is seen to
/// again there.
#[derive(Debug, Default)]
struct Holders {
    generation: u64,
    known: std::collections::HashMap<Arc<str>, tokio::time::Instant>,
}

/// The most holder records one master keeps known (a client with a label per call may
/// have many): past it, and until an entry expires, a new label's grants see to its
/// record every time.
const HOLDERS_KNOWN_MAX: usize = 64;

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
    /// A master of a client of `config` that connects on first use.
    pub(crate) fn new(
        spec: &MasterSpec,
        place: (usize, &Arc<View>),
        config: &Config,
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
                node_timeout: config.node_timeout,
                connect_timeout: config.connect_timeout,
                state: Mutex::new(State::Idle),
                read_vitals: config.quarantine,
                vitals: Mutex::new(None),
                connecting: Mutex::new(None),
                scripts_loaded: AtomicU64::new(0),
                run_id: Mutex::new(None),
                generation: AtomicU64::new(0),
                order: Arc::default(),
                holders: Mutex::default(),
            }),
        })
    }
}

impl Master for RedisMaster {
    fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    fn call(&self, sent: Arc<Outgoing>) -> BoxFuture<'static, Result<Reply, MasterError>> {
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
                .turn(shared.connect_timeout + shared.node_timeout())
                .await;
            let (mut conn, generation, evicts) = match shared.ready() {
                Some(ready) => ready?,
                None => Box::pin(shared.connection()).await?,
            };
            // A master whose cluster record disagrees, or that this client reaches twice,
            // never votes for it (docs/design.md §11), and is not asked to lock. Its record
            // is read again first (one round trip, within the node timeout): it may have
            // been re-admitted, or the configuration fixed, since.
            let op = sent.op();
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
                    run(&sent, (&mut conn, generation), &shared),
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
                shared.node_timeout(),
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
    /// variants its client sends (`--cfg redquorum_mutants`).
    fn scripts(&self) -> Vec<&'static str> {
        let scripts = scripts::master_scripts();
        #[cfg(redquorum_mutants)]
        let scripts = [
            scripts,
            scripts::planted_scripts(&crate::mutants::planted(self.view.client())),
        ]
        .concat();
        scripts
    }

    /// How long a request to this master may take: the node timeout (a planted bug may
    /// lift it to an hour).
    fn node_timeout(&self) -> Duration {
        #[cfg(redquorum_mutants)]
        if crate::mutants::planted(self.view.client()).is(crate::mutants::Mutant::NoNodeTimeout) {
            return Duration::from_secs(3600);
        }
        self.node_timeout
    }

    /// Whether the holder record `tag` is known to live until `until` on connection
    /// `generation`.
    fn holder_known(&self, generation: u64, tag: &str, until: tokio::time::Instant) -> bool {
        let holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        holders.generation == generation && holders.known.get(tag).is_some_and(|t| *t >= until)
    }

    /// A grant on connection `generation`, whose request was sent at `sent`, saw to the
    /// holder record `tag`.
    fn holder_seen_to(&self, generation: u64, tag: &Arc<str>, sent: tokio::time::Instant) {
        // Whole entries are replaced: a poisoned lock still holds a consistent map.
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        if holders.generation != generation {
            holders.known.clear();
            holders.generation = generation;
        }
        if holders.known.len() >= HOLDERS_KNOWN_MAX {
            // Room for a new tag where an old one is no longer known to live.
            holders.known.retain(|_, until| *until > sent);
        }
        if holders.known.len() < HOLDERS_KNOWN_MAX || holders.known.contains_key(tag) {
            holders
                .known
                .insert(Arc::clone(tag), sent + scripts::HOLDER_KNOWN);
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so a poisoned lock still holds a
        // consistent value.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The failure of a request that got no answer within the node timeout.
    fn timed_out(&self) -> MasterError {
        MasterError::new(
            MasterErrorKind::Timeout,
            format!(
                "no answer within the node timeout ({})",
                human(self.node_timeout())
            ),
        )
    }
}
