//! The network between clients and masters, and one client's connection to one master.
//!
//! A [`SimMaster`] stands where a `RedisMaster` would: the client's quorum rounds call it
//! through the crate-private [`Master`] seam. Each call travels to the shared
//! [`SimServer`] with a seeded delay, is executed there atomically at its arrival, and its
//! reply travels back with another delay. Like a TCP connection, a connection delivers in
//! order: a message never overtakes an earlier one in the same direction.
//!
//! A *lost* message stands for a link that swallows it: a lost request is never executed,
//! a lost reply was executed; either way the caller fails after its timeout. A request
//! that takes longer than the timeout is still executed when it arrives, after the caller
//! gave up (the stale `SET` of a slow link).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::RngExt;
use rand::rngs::StdRng;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::server::{Answer, Request, ScriptBugs, SimServer, Status};
use crate::cluster::{Admission, Record, View};
use crate::error::{MasterError, MasterErrorKind};
use crate::master::{Master, Op, Outgoing, Reply};
use crate::quarantine::Vitals;

/// How messages travel, for every link of a schedule.
#[derive(Debug, Clone, Copy)]
pub(super) struct NetParams {
    /// A message normally takes between these.
    pub(super) delay: (Duration, Duration),
    /// The chance that a message is slow instead: it takes up to `slow_max`.
    pub(super) slow_p: f64,
    pub(super) slow_max: Duration,
    /// The chance that a message is lost.
    pub(super) drop_p: f64,
}

/// A troubled call of a waiter: its waiter id, the master's own number, when it was sent,
/// and whether it was a confirm.
pub(super) type WaiterTrouble = (Arc<str>, usize, Instant, bool);

/// The resolution of the runtime's timers: a sleep until an instant ends up to this much
/// after it.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// One message's fate.
#[derive(Debug, Clone, Copy)]
struct Leg {
    delay: Duration,
    lost: bool,
}

impl NetParams {
    /// Draws one message's fate; always the same number of draws, whatever the outcome.
    fn leg(&self, rng: &mut StdRng) -> Leg {
        let lost = rng.random_bool(self.drop_p);
        let slow = rng.random_bool(self.slow_p);
        let normal = rng.random_range(self.delay.0..=self.delay.1);
        let late = rng.random_range(self.delay.1..=self.slow_max.max(self.delay.1));
        Leg {
            delay: if slow { late } else { normal },
            lost,
        }
    }
}

/// What the clients sharing it sent: when each acquire attempt sent its first request, by
/// its unique lock value (the start of the attempt's round, for the fencing checker's
/// real-time order), when each client first connected to each master, and which messages
/// are still on their way.
#[derive(Debug, Default)]
pub(super) struct SendLog {
    first: Mutex<HashMap<Arc<str>, Instant>>,
    /// `[client][master]`: the client's first connection whose answer reached it (the
    /// client learned the master's data epoch then). Clients are numbered in the order
    /// they were added.
    contacts: Mutex<Vec<Vec<Option<Served>>>>,
    /// Each request from its sending to its reply's arrival (or its loss).
    in_flight: TaskTracker,
    /// Every answer to a registration (`Enqueue`) that reached its client.
    enqueued: Mutex<Vec<EnqueueSeen>>,
    /// Every registration sent: by which client, for which waiter id, when, and whether
    /// strict (a ticket's write-back).
    registering: Mutex<Vec<Registering>>,
    /// When a message was lost or slow, and the lock key its op is about (`None`: a
    /// connection's, or several keys'), for the liveness checker's quiet windows.
    anomalies: Mutex<Vec<(Instant, Option<Arc<str>>)>>,
    /// Every call carrying a waiter id (a registration, a refresh, a confirm) that was
    /// troubled, by that waiter id, the master's own number and when it was sent: the call
    /// failed (lost, timed out, refused, reset), or one of its messages was lost or late
    /// (slow, held behind a slow one on its connection, or held by a stopped master). The
    /// FIFO checker's evidence that a registration could be missing on that master. The
    /// flag says whether the call was a confirm (an acquire carrying the waiter id).
    waiter_trouble: Mutex<Vec<WaiterTrouble>>,
}

/// A registration sent: by which client (as numbered by [`SendLog::add_client`]), for
/// which waiter id, when, and whether strict (a ticket's write-back).
pub(super) type Registering = (usize, Arc<str>, Instant, bool);

/// An answer to a registration (`Enqueue`), as its client received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EnqueueSeen {
    /// The client, as numbered by [`SendLog::add_client`], and the master's own number.
    pub(super) client: usize,
    pub(super) master: usize,
    pub(super) waiter: Arc<str>,
    pub(super) score: u64,
    pub(super) strict: bool,
    /// Registered (a strict write refused: `false`).
    pub(super) written: bool,
    /// When the request was sent: the requests of one round leave at one instant.
    pub(super) sent: Instant,
    /// When the answer reached the client.
    pub(super) at: Instant,
}

impl SendLog {
    fn note(&self, client: usize, op: &Op) {
        if let Op::Enqueue { waiter, strict, .. } = op {
            self.registering
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((client, Arc::clone(waiter), Instant::now(), *strict));
        }
        if let Op::AcquireChecked { value, .. }
        | Op::AcquireMany { value, .. }
        | Op::AcquireQueued { value, .. } = op
        {
            self.first
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(Arc::clone(value))
                .or_insert_with(Instant::now);
        }
    }

    /// Adds a client of `masters` masters; returns its number.
    pub(super) fn add_client(&self, masters: usize) -> usize {
        let mut contacts = self.contacts.lock().unwrap_or_else(PoisonError::into_inner);
        contacts.push(vec![None; masters]);
        contacts.len() - 1
    }

    /// `client`'s connection to `master` was served as `served` says; only the first
    /// counts.
    fn connected(&self, client: usize, master: usize, served: Served) {
        let mut contacts = self.contacts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(first) = contacts.get_mut(client).and_then(|c| c.get_mut(master)) {
            first.get_or_insert(served);
        }
    }

    /// Each client's first connection to each master (see `contacts`).
    pub(super) fn first_contacts(&self) -> Vec<Vec<Option<Served>>> {
        self.contacts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether no message is on its way.
    pub(super) fn idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Returns once every message sent so far, and every one sent meanwhile, has arrived
    /// or was lost: each request was executed (or dropped) and its reply delivered. A
    /// request held by a stopped master or a closed gate holds this too.
    pub(super) async fn quiet(&self) {
        self.in_flight.close();
        self.in_flight.wait().await;
        self.in_flight.reopen();
    }

    /// `client` received `reply` from `master` to `op`: kept when it answers a
    /// registration.
    fn answered(
        &self,
        (client, master): (usize, usize),
        (op, sent): (&Op, Instant),
        reply: &Reply,
    ) {
        if let (
            Op::Enqueue {
                waiter,
                score,
                strict,
                ..
            },
            Reply::Enqueued { written, .. },
        ) = (op, reply)
        {
            self.enqueued
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(EnqueueSeen {
                    client,
                    master,
                    waiter: Arc::clone(waiter),
                    score: *score,
                    strict: *strict,
                    written: *written,
                    sent,
                    at: Instant::now(),
                });
        }
    }

    /// Every answer to a registration that reached its client, in order.
    pub(super) fn enqueued(&self) -> Vec<EnqueueSeen> {
        self.enqueued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every registration sent (client, waiter id, when, strict), in order.
    pub(super) fn registering(&self) -> Vec<Registering> {
        self.registering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every troubled call of a waiter (see `waiter_trouble`): its waiter id, the master,
    /// when it was sent, and whether it was a confirm, in order.
    pub(super) fn waiter_trouble(&self) -> Vec<WaiterTrouble> {
        self.waiter_trouble
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// When a message was lost or slow, and the lock key its op is about, in order.
    pub(super) fn anomalies(&self) -> Vec<(Instant, Option<Arc<str>>)> {
        self.anomalies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// When the first request carrying `value` was sent.
    pub(super) fn first_send(&self, value: &str) -> Option<Instant> {
        self.first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(value)
            .copied()
    }
}

/// When a master served a request, and how many times it had lost its data by then (so
/// that a request served at the instant of a loss is still ordered against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Served {
    pub(super) at: Instant,
    pub(super) data_losses: u64,
}

/// A switch at the master's end of one link, for scripted scenarios: while closed, the
/// requests that arrive wait; opening it lets them in, in their arrival order.
#[derive(Debug, Default)]
pub(super) struct Gate {
    state: Mutex<(bool, Vec<oneshot::Sender<()>>)>,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, (bool, Vec<oneshot::Sender<()>>)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds the requests that arrive from now on.
    pub(super) fn close(&self) {
        self.lock().0 = true;
    }

    /// Lets the held requests in, in their arrival order, and the next ones through.
    pub(super) fn open(&self) {
        let mut state = self.lock();
        state.0 = false;
        for waiter in state.1.drain(..) {
            let _ = waiter.send(());
        }
    }

    /// Returns once the gate lets this request through.
    async fn pass(&self) {
        let held = {
            let mut state = self.lock();
            if !state.0 {
                return;
            }
            let (tx, rx) = oneshot::channel();
            state.1.push(tx);
            rx
        };
        let _ = held.await;
    }
}

/// A client's connection state toward one master.
struct Link {
    rng: StdRng,
    /// The incarnation the connection is open to, if open.
    open: Option<u64>,
    /// Bumped on every new connection, as `RedisMaster` numbers its connections.
    generation: u64,
    vitals: Option<(u64, Arc<Vitals>)>,
    /// The `run_id` the latest connection read.
    run_id: Option<String>,
    /// When the latest request and reply on the open connection arrive (in-order
    /// delivery).
    request_fifo: Instant,
    reply_fifo: Instant,
}

/// One client's connection to one simulated master.
#[derive(Debug)]
pub(super) struct SimMaster {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    /// This connection's client, as numbered by `sends`.
    client: usize,
    /// The master's place in the client's list, and the client's view of its cluster.
    index: usize,
    view: Arc<View>,
    server: Arc<SimServer>,
    net: NetParams,
    node_timeout: Duration,
    connect_timeout: Duration,
    read_vitals: bool,
    bugs: ScriptBugs,
    sends: Arc<SendLog>,
    gate: Arc<Gate>,
    link: Mutex<Link>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMaster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How a client connects to its masters.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnParams {
    pub(super) net: NetParams,
    pub(super) node_timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// Read the master's vitals on every (re)connect (restart quarantine on).
    pub(super) read_vitals: bool,
    /// The client's planted script bugs, sent with every op.
    pub(super) bugs: ScriptBugs,
}

impl SimMaster {
    /// Client `client`'s connection to `server` (the client as numbered by
    /// [`SendLog::add_client`]), which is master `index` of the client's list, whose view
    /// of the cluster is `view`; `gate` (open unless a script closes it) sits at the
    /// master's end.
    pub(super) fn new(
        (client, server): (usize, Arc<SimServer>),
        (index, view): (usize, Arc<View>),
        params: ConnParams,
        rng: StdRng,
        sends: Arc<SendLog>,
        gate: Arc<Gate>,
    ) -> Self {
        let now = Instant::now();
        Self {
            inner: Arc::new(Inner {
                name: format!("sim://m{}", server.index()).into(),
                client,
                index,
                view,
                server,
                net: params.net,
                node_timeout: params.node_timeout,
                connect_timeout: params.connect_timeout,
                read_vitals: params.read_vitals,
                bugs: params.bugs,
                sends,
                gate,
                link: Mutex::new(Link {
                    rng,
                    open: None,
                    generation: 0,
                    vitals: None,
                    run_id: None,
                    request_fifo: now,
                    reply_fifo: now,
                }),
            }),
        }
    }
}

impl Master for SimMaster {
    fn name(&self) -> &Arc<str> {
        &self.inner.name
    }

    fn call(&self, sent: Arc<Outgoing>) -> BoxFuture<'static, Result<Reply, MasterError>> {
        let inner = Arc::clone(&self.inner);
        let op = Arc::clone(sent.op());
        Box::pin(async move { inner.exchange(op).await })
    }

    fn vitals(&self) -> Option<(u64, Arc<Vitals>)> {
        if !self.inner.read_vitals {
            return None;
        }
        self.inner.link().vitals.clone()
    }

    fn disowned(&self) -> Option<MasterError> {
        self.inner.view.disowned(self.inner.index)
    }
}

impl Inner {
    fn link(&self) -> MutexGuard<'_, Link> {
        // Updated field by field from complete values.
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One call: (re)connect when needed, then the op; bounded like `RedisMaster::call`
    /// (node timeout, plus the connect timeout when connecting).
    async fn exchange(self: Arc<Self>, op: Arc<Op>) -> Result<Reply, MasterError> {
        let sent = Instant::now();
        let trouble = Arc::new(AtomicBool::new(false));
        let result = Arc::clone(&self)
            .call_once(Arc::clone(&op), sent, Arc::clone(&trouble))
            .await;
        if let Some(waiter) = waiter_of(&op)
            && (result.is_err() || trouble.load(Ordering::Relaxed))
        {
            self.sends
                .waiter_trouble
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((
                    Arc::clone(waiter),
                    self.server.index(),
                    sent,
                    matches!(*op, Op::AcquireQueued { .. }),
                ));
        }
        result
    }

    /// [`Inner::exchange`]'s call, which sets `trouble` when one of its messages is lost or
    /// late.
    async fn call_once(
        self: Arc<Self>,
        op: Arc<Op>,
        sent: Instant,
        trouble: Arc<AtomicBool>,
    ) -> Result<Reply, MasterError> {
        self.sends.note(self.client, &op);
        let (status, incarnation) = self.server.status();
        if status == Status::Down {
            self.link().open = None;
            return Err(MasterError::new(
                MasterErrorKind::Refused,
                "connection refused (the simulated master is down)",
            ));
        }
        let open = self.link().open.filter(|i| *i == incarnation);
        let budget = match open {
            Some(_) => self.node_timeout,
            None => self.node_timeout.saturating_add(self.connect_timeout),
        };
        let conversation = self.converse(open, Arc::clone(&op), &trouble);
        match tokio::time::timeout(budget, conversation).await {
            Ok(result) => {
                if let Ok(reply) = &result {
                    self.sends
                        .answered((self.client, self.server.index()), (&op, sent), reply);
                }
                result
            }
            Err(_) => Err(MasterError::new(
                MasterErrorKind::Timeout,
                "no answer within the node timeout (simulated)",
            )),
        }
    }

    async fn converse(
        self: &Arc<Self>,
        open: Option<u64>,
        op: Arc<Op>,
        trouble: &Arc<AtomicBool>,
    ) -> Result<Reply, MasterError> {
        let incarnation = match open {
            Some(i) => i,
            None => {
                {
                    let mut link = self.link();
                    let now = Instant::now();
                    link.request_fifo = now;
                    link.reply_fifo = now;
                }
                let request = Request::Connect {
                    vitals: self.read_vitals,
                };
                let (incarnation, answer, served) = self.round_trip(None, request, trouble).await?;
                let Answer::Connected {
                    vitals,
                    run_id,
                    record,
                } = answer
                else {
                    return Err(protocol());
                };
                self.sends
                    .connected(self.client, self.server.index(), served);
                self.admit(
                    incarnation,
                    Some(run_id.clone()),
                    record.as_deref(),
                    trouble,
                )
                .await?;
                let mut link = self.link();
                link.generation += 1;
                link.open = Some(incarnation);
                if let Some(vitals) = vitals {
                    link.vitals = Some((link.generation, Arc::new(vitals)));
                }
                incarnation
            }
        };
        // As `RedisMaster::call`: a master met before the client knew its cluster, without a
        // record then, is read again before it votes; a master the view refuses is not
        // even asked; each request carries the fingerprint the view has when it is sent.
        if !op.is_unguarded() && self.view.stale(self.index) {
            self.reread(incarnation, trouble).await?;
        }
        if !op.is_unguarded()
            && let Some(refusal) = self.view.refused(self.index)
        {
            return Err(refusal);
        }
        let fingerprint: Arc<str> = self.view.fingerprint().into();
        match self
            .round_trip(
                Some(incarnation),
                Request::Op(op, fingerprint, self.bugs),
                trouble,
            )
            .await?
        {
            (_, Answer::Reply(reply), _) => Ok(reply),
            (_, Answer::RecordDiffers, _) => Err(self.record_changed(incarnation, trouble).await),
            (_, Answer::LimitDiffers { stored, ours }, _) => Err(crate::scripts::limit_mismatch(
                Some(&stored.to_string()),
                ours,
            )),
            _ => Err(protocol()),
        }
    }

    /// As `RedisMaster`'s `admit`: the view judges what a connection read (its `run_id`
    /// and cluster record); a member that lost its record gets it back, marked as having
    /// lost its counters.
    async fn admit(
        self: &Arc<Self>,
        incarnation: u64,
        run_id: Option<String>,
        record: Option<&Record>,
        trouble: &Arc<AtomicBool>,
    ) -> Result<(), MasterError> {
        let admission = self.view.connected(self.index, run_id.as_deref(), record);
        self.link().run_id = run_id;
        let Admission::Readmit { record } = admission else {
            return Ok(());
        };
        let stamp = Op::Stamp {
            record,
            bootstrap: None,
        };
        let request = Request::Op(Arc::new(stamp), "".into(), self.bugs);
        match self.round_trip(Some(incarnation), request, trouble).await? {
            (_, Answer::Reply(Reply::Stamped { .. }), _) => Ok(()),
            _ => Err(protocol()),
        }
    }

    /// As `RedisMaster`'s `reread`: reads the cluster record again and judges it as at a
    /// connect.
    async fn reread(
        self: &Arc<Self>,
        incarnation: u64,
        trouble: &Arc<AtomicBool>,
    ) -> Result<(), MasterError> {
        let record = match self
            .round_trip(Some(incarnation), Request::ReadRecord, trouble)
            .await?
        {
            (_, Answer::Record(record), _) => record,
            _ => return Err(protocol()),
        };
        let run_id = self.link().run_id.clone();
        self.admit(incarnation, run_id, record.as_deref(), trouble)
            .await
    }

    /// As `RedisMaster`'s `record_changed`, after a script found another fingerprint than
    /// the one sent: reads the record again and judges it as at a connect.
    async fn record_changed(
        self: &Arc<Self>,
        incarnation: u64,
        trouble: &Arc<AtomicBool>,
    ) -> MasterError {
        if let Err(error) = self.reread(incarnation, trouble).await {
            return error;
        }
        match self.view.refused(self.index) {
            Some(refusal) => refusal,
            None => MasterError::new(
                MasterErrorKind::Other,
                "the cluster record changed under this client (simulated)",
            ),
        }
    }

    /// Sends `request` on the connection to `incarnation` (`None`: opens one) and waits for
    /// the answer, and when the master served it; never returns when a message is lost
    /// (the caller's timeout ends it). Sets `trouble` when a message is lost or arrives
    /// late: slow, behind a slow one on the connection, or held by a stopped master.
    async fn round_trip(
        self: &Arc<Self>,
        incarnation: Option<u64>,
        request: Request,
        trouble: &Arc<AtomicBool>,
    ) -> Result<(u64, Answer, Served), MasterError> {
        let normal = self.net.delay.1;
        let (out, back, arrival) = {
            let mut link = self.link();
            let out = self.net.leg(&mut link.rng);
            let back = self.net.leg(&mut link.rng);
            if out.lost || back.lost || out.delay > normal || back.delay > normal {
                self.sends
                    .anomalies
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((Instant::now(), key_of(&request)));
            }
            let now = Instant::now();
            let arrival = (now + out.delay).max(link.request_fifo);
            if out.lost || back.lost || arrival > now + normal || back.delay > normal {
                trouble.store(true, Ordering::Relaxed);
            }
            if !out.lost {
                link.request_fifo = arrival;
            }
            (out, back, arrival)
        };
        if out.lost {
            return futures::future::pending().await;
        }
        let (tx, rx) = oneshot::channel();
        let inner = Arc::clone(self);
        // The master serves the request whether or not the caller still waits.
        let sends = Arc::clone(&self.sends);
        let late = Arc::clone(trouble);
        tokio::spawn(sends.in_flight.track_future(async move {
            tokio::time::sleep_until(arrival).await;
            inner.gate.pass().await;
            let answer = inner.server.serve(incarnation, &request).await;
            // Held at the master (stopped) or at a gate. The timer wakes on the next whole
            // millisecond after `arrival`: within it, the request was on time.
            if Instant::now() > arrival + TIMER_TICK {
                late.store(true, Ordering::Relaxed);
            }
            // Nothing else runs between the request's execution and here (one thread, no
            // await), so no loss can fall between them.
            let served = Served {
                at: Instant::now(),
                data_losses: inner.server.data_losses(),
            };
            let answer = answer.map(|(incarnation, answer)| (incarnation, answer, served));
            if back.lost {
                return;
            }
            let at = {
                let mut link = inner.link();
                let at = (Instant::now() + back.delay).max(link.reply_fifo);
                link.reply_fifo = at;
                at
            };
            if at > Instant::now() + normal {
                // Behind a slow reply on the connection.
                late.store(true, Ordering::Relaxed);
            }
            tokio::time::sleep_until(at).await;
            let _ = tx.send(answer);
        }));
        match rx.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_reset)) => {
                self.link().open = None;
                Err(MasterError::new(
                    MasterErrorKind::Io,
                    "connection reset (the simulated master crashed or restarted)",
                ))
            }
            Err(_lost) => futures::future::pending().await,
        }
    }
}

/// The waiter id an op carries: a registration or refresh (`Enqueue`), or a waiter's
/// confirm (`AcquireQueued` with its id).
fn waiter_of(op: &Op) -> Option<&Arc<str>> {
    match op {
        Op::Enqueue { waiter, .. } => Some(waiter),
        Op::AcquireQueued { waiter, .. } if !waiter.is_empty() => Some(waiter),
        _ => None,
    }
}

/// The one lock key a request's op is about, if it is about one.
fn key_of(request: &Request) -> Option<Arc<str>> {
    let Request::Op(op, _, _) = request else {
        return None;
    };
    match &**op {
        Op::AcquireChecked { key, .. }
        | Op::AcquireQueued { key, .. }
        | Op::Enqueue { key, .. }
        | Op::Dequeue { key, .. }
        | Op::Extend { key, .. }
        | Op::Release { key, .. }
        | Op::Fence { key, .. } => Some(Arc::clone(key)),
        _ => None,
    }
}

fn protocol() -> MasterError {
    MasterError::new(
        MasterErrorKind::Protocol,
        "the simulated master answered out of turn",
    )
}
