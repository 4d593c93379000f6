//! The hand-off mechanism itself, with raw commands and no library: the contended
//! scenario's second limit.
//!
//! The section-bound limit asks for one quorum round per section. Hand-off needs more: the
//! holder's release reaches the masters, each hands the key to the next waiter and
//! notifies it, and the waiter confirms with a round of its own, counted from its own
//! start (docs/design.md §17). The *raw hand-off ring* measures what that sequence costs
//! with this client stack on this machine, with the smallest scripts that do it and no
//! lock logic at all: [`CONTENDERS`] raw clients (each with its own connections and its
//! own subscriptions on every master) pass one key around a ring. Each runs the same
//! critical section as the library's clients, and the same clocks time it: sections per
//! second, and the hand-off from a holder starting its release to the next holder's
//! confirm reaching a quorum. The ring does what the mechanism needs and no more: a
//! client that released joins the waiter queue again (one round, off the hand-off's path,
//! as a waiter of the library registers), a release hands the key to the queue's head only
//! if its liveness key is there, and a confirm leaves the queue. There is no epoch,
//! cluster record or kind to check, no refresh, no ticket round, and nobody who is refused
//! first: what the library's hand-off adds to the mechanism is its figure over the
//! ring's. The same ring run with the library's own scripts ([`Mode::Scripts`]) splits
//! that figure in two: what the scripts' per-master guarantees cost the mechanism, and
//! what the library's client adds to its scripts.
//!
//! Two things differ from the library's clients on purpose. A ring client takes no pause
//! outside the lock between its sections: the pause only keeps a releaser from winning its
//! own release back, which a ring client never can, and with the fixed order it would put
//! the next client's pause inside the hand-off. And a master where a confirm arrived
//! before the holder's release (refused there) hands the key to the new holder's waiter id
//! when that release comes, and a release that comes late does the same: the release
//! script also hands on from any waiter id, which puts every master back in step at the
//! next release at no cost (the library's Dequeue and registrations do this with rounds of
//! their own).
//!
//! The holder check (`Turns::holder`) catches a bug in the ring's own counting of notices
//! (two clients confirming at once); it is no test of the masters.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::contended::{CONTENDERS, Cpu, Turns, Window, push, section};
use super::harness::{Keys, Outcome, Tally, connect_all};

/// How a ring client is handed the lock: the mechanisms, measured side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Today's mechanism (docs/design.md §17): the release hands the key to the next
    /// client's waiter id and tells it; that client confirms with a round of its own.
    Confirm,
    /// The direct grant: each waiting client has written a record on every master (the
    /// value it will hold and a stamp it numbered, read off its clock before the record
    /// left); the release sets the key to that value, with the lease's TTL, and publishes
    /// the value and the stamp. A quorum of those notices is the acquisition: no confirm
    /// round. The validity it gives counts from the stamp's send time.
    Direct,
    /// Today's mechanism with the library's own scripts, keys and arguments, as the
    /// library sends them (`release.lua`, `enqueue.lua`, `acquire_queued.lua`, and
    /// `dequeue.lua` where a confirm was not granted), driven by the same raw clients:
    /// what the per-master guarantees (the cluster record and the data epoch, kinds,
    /// tickets, the queue's expiry, liveness records) cost the mechanism, without the
    /// library's client. Each turn waits with a fresh waiter id, as each of the library's
    /// calls does, and the masters' notices name it.
    Scripts,
}

impl Mode {
    /// Every mechanism, in the order they run.
    pub(crate) const ALL: [Mode; 3] = [Mode::Confirm, Mode::Scripts, Mode::Direct];

    /// The label of the ring's rows, where the library's rows name their way of waiting.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Confirm => "raw hand-off ring",
            Mode::Direct => "raw direct-grant ring",
            Mode::Scripts => "raw ring of the library's scripts",
        }
    }
}

/// Whether rows labelled `waiting` are a ring's.
pub(crate) fn is_ring(waiting: &str) -> bool {
    Mode::ALL.iter().any(|m| m.label() == waiting)
}

/// Release and hand on: where `KEYS[1]` holds the releasing value `ARGV[1]` (or any
/// waiter id, which starts with `ARGV[5]`: a hand-off that came after its waiter's
/// confirm, or a release that came late), take the releaser's own waiter id `ARGV[2]` out
/// of the queue `KEYS[2]` (left where its confirm was refused), then set the key to the
/// queue's head, if it is live (its liveness key, `ARGV[3]` followed by its id, holds its
/// channel), with a short expiry `ARGV[4]` (ms), and publish the released value on that
/// channel. Returns 1 when handed on.
const RELEASE: &str = "\
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and not (v and string.sub(v, 1, #ARGV[5]) == ARGV[5]) then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local channel = head and redis.call('GET', ARGV[3] .. head)
if not channel then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], head, 'PX', ARGV[4])
redis.call('PUBLISH', channel, ARGV[1])
return 1";

/// Confirm: where `KEYS[1]` is free or holds the caller's waiter id `ARGV[2]`, set it to
/// the caller's value `ARGV[1]` with the lease's TTL `ARGV[3]` (ms), and take the waiter
/// out of the queue `KEYS[2]` with its liveness key (`ARGV[4]` followed by its id).
/// Returns 1 when set.
const CONFIRM: &str = "\
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('DEL', ARGV[4] .. ARGV[2])
  return 1
end
return 0";

/// Queue: the waiter `ARGV[1]` joins the queue `KEYS[1]` with the score `ARGV[2]` (a ticket
/// the ring's clients draw in turn), and its liveness key (`ARGV[3]` followed by its id)
/// names its channel `ARGV[4]` for `ARGV[5]` ms.
const QUEUE: &str = "\
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SET', ARGV[3] .. ARGV[1], ARGV[4], 'PX', ARGV[5])
return 1";

/// Direct grant: where `KEYS[1]` holds the releasing value `ARGV[1]`, set it to the value
/// the next client registered in its record `KEYS[2]` (field `v`), with the lease's TTL
/// `ARGV[3]` (ms), and publish that value and the record's stamp (field `s`) on the next
/// client's channel `ARGV[2]`. Returns 1 when granted.
const GRANT: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local rec = redis.call('HMGET', KEYS[2], 'v', 's')
if not rec[1] then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], rec[1], 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[2], rec[1] .. ' ' .. rec[2])
return 1";

/// Direct grant: a waiting client's record `KEYS[1]`, the value it will hold `ARGV[1]` and
/// its stamp `ARGV[2]`.
const REGISTER: &str = "\
redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2])
return 1";

// The library's scripts as it joins them (`src/scripts/sources.rs`): the preamble, the
// queue's functions, the holder record's and the lock key's read in front of the scripts
// that need them.
use crate::sources::{
    ACQUIRE_QUEUED_LUA as LIB_CONFIRM, DEQUEUE_LUA as LIB_DEQUEUE, ENQUEUE_LUA as LIB_ENQUEUE,
    RELEASE_LUA as LIB_RELEASE,
};

/// The drift allowance of a lease of `HELD_MS`, as the library counts it (1 % + 2 ms).
const DRIFT: Duration = Duration::from_micros(HELD_MS * 10 + 2_000);

/// The expiry of a handed key, and of a confirmed one, in ms: far longer than a window.
const HANDED_MS: u64 = 1_000;
const HELD_MS: u64 = 10_000;
/// The longest one fan-out, or one wait for a quorum of notices, may take: a ring that
/// stalls stops (counted as an error, and its rows are left without figures) rather than
/// hang the run.
const STEP_BOUND: Duration = Duration::from_secs(1);

/// One client of the ring: its connections, its notices (master index, released value),
/// and the tasks that forward them, aborted when the client is dropped.
struct Member {
    conns: Vec<MultiplexedConnection>,
    storage: MultiplexedConnection,
    notices: mpsc::UnboundedReceiver<(usize, String)>,
    forwarders: Vec<JoinHandle<()>>,
}

impl Drop for Member {
    fn drop(&mut self) {
        for task in &self.forwarders {
            task.abort();
        }
    }
}

/// Runs the ring of `mode` for `window` on `urls` (`raw`: a connection to each, for their
/// CPU figures) with sections of `hold` on `storage_url`.
pub(crate) async fn window(
    mode: Mode,
    (urls, raw): (&[String], &[MultiplexedConnection]),
    storage_url: &str,
    hold: Duration,
    window: Duration,
) -> Outcome<Window> {
    let n = urls.len();
    let key: Arc<str> = Keys::new(&format!("ring{n}")).fresh().into();
    let record: Arc<str> = format!("{key}:record").into();
    let (release, confirm, queue) = match mode {
        Mode::Confirm => (RELEASE, CONFIRM, QUEUE),
        Mode::Direct => (GRANT, REGISTER, QUEUE),
        Mode::Scripts => (LIB_RELEASE, LIB_CONFIRM, LIB_ENQUEUE),
    };
    let release_sha = redis::Script::new(release).get_hash().to_owned();
    let confirm_sha = redis::Script::new(confirm).get_hash().to_owned();
    let queue_sha = redis::Script::new(queue).get_hash().to_owned();
    let dequeue_sha = redis::Script::new(LIB_DEQUEUE).get_hash().to_owned();
    let mut members = Vec::with_capacity(CONTENDERS);
    for c in 0..CONTENDERS {
        let conns = connect_all(urls).await?;
        let (tx, notices) = mpsc::unbounded_channel();
        let mut forwarders = Vec::with_capacity(n);
        for (i, url) in urls.iter().enumerate() {
            let mut pubsub = redis::Client::open(url.as_str())?
                .get_async_pubsub()
                .await?;
            pubsub.subscribe(channel_of(mode, &key, c)).await?;
            let tx = tx.clone();
            forwarders.push(tokio::spawn(async move {
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let released: String = message.get_payload().unwrap_or_default();
                    if tx.send((i, released)).is_err() {
                        return;
                    }
                }
            }));
        }
        let storage = redis::Client::open(storage_url)?
            .get_multiplexed_async_connection()
            .await?;
        members.push(Member {
            conns,
            storage,
            notices,
            forwarders,
        });
    }
    // The scripts on every master, and the key held by client 0 to begin with; with the
    // direct grant, every other client's record of its first value.
    let first = match mode {
        Mode::Scripts => lib_id(0, 0, true),
        Mode::Confirm | Mode::Direct => value(&key, 0, 0),
    };
    let registered = Instant::now();
    for (master, conn) in members[0].conns.iter().enumerate() {
        let mut conn = conn.clone();
        if mode == Mode::Confirm {
            // Every client but the holder queued, in the ring's order.
            for c in 1..CONTENDERS {
                let _: () = redis::cmd("ZADD")
                    .arg(queue_of(&key))
                    .arg(c)
                    .arg(waiter(&key, c))
                    .query_async(&mut conn)
                    .await?;
                let _: () = redis::cmd("SET")
                    .arg(format!("{}{}", live_prefix(&key), waiter(&key, c)))
                    .arg(channel(&key, c))
                    .arg("PX")
                    .arg(HELD_MS)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        if mode == Mode::Direct {
            for c in 1..CONTENDERS {
                let _: () = redis::cmd("HSET")
                    .arg(record_of(&key, c))
                    .arg("v")
                    .arg(value(&key, c, 1))
                    .arg("s")
                    .arg(0)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        for body in [release, confirm, queue, LIB_DEQUEUE] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(body)
                .query_async(&mut conn)
                .await?;
        }
        let _: () = redis::cmd("SET")
            .arg(&*key)
            .arg(&first)
            .arg("PX")
            .arg(HELD_MS)
            .query_async(&mut conn)
            .await?;
        if mode == Mode::Scripts {
            // Every client but the holder queued, in the ring's order, by the library's
            // registration.
            for c in 1..CONTENDERS {
                let me = (&*lib_id(c, 0, false), c as u64);
                let enqueue = lib_enqueue(&queue_sha, &key, c, me).evalsha(master);
                let _: redis::Value = enqueue.query_async(&mut conn).await?;
            }
        }
    }

    let turns = Arc::new(Turns::default());
    let (stop_tx, stop) = watch::channel(false);
    let before = Cpu::before(raw).await;
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(CONTENDERS);
    for (me, member) in members.into_iter().enumerate() {
        let ctx = Client {
            mode,
            registered,
            me,
            n,
            key: Arc::clone(&key),
            record: Arc::clone(&record),
            release_sha: release_sha.clone(),
            confirm_sha: confirm_sha.clone(),
            queue_sha: queue_sha.clone(),
            dequeue_sha: dequeue_sha.clone(),
            hold,
            end,
            turns: Arc::clone(&turns),
        };
        handles.push(tokio::spawn(ctx.run(member, stop.clone())));
    }
    // Waiters stop at the end of the window even if the ring broke.
    tokio::time::sleep_until(end.into()).await;
    let _ = stop_tx.send(true);
    let mut tally = Tally::default();
    for handle in handles {
        let t = handle.await?;
        tally.done += t.done;
        tally.errors += t.errors;
        if tally.first_error.is_none() {
            tally.first_error = t.first_error;
        }
    }
    let elapsed = start.elapsed();
    let after = Cpu::after(raw).await;
    let overlaps = turns.overlaps.load(Ordering::SeqCst);
    if overlaps > 0 {
        return Err(format!("the raw hand-off ring had two holders {overlaps} times").into());
    }
    Ok(Window {
        tally,
        elapsed,
        turns,
        cpu: (before, after),
    })
}

/// The hand-off channel of ring client `c`.
fn channel(key: &str, c: usize) -> String {
    format!("{key}:ring:{c}")
}

/// The hand-off channel of ring client `c` in `mode`: with the library's scripts, shaped
/// as the library's (one per client), and this window's own.
fn channel_of(mode: Mode, key: &str, c: usize) -> String {
    match mode {
        Mode::Scripts => format!("redquorum:handoff:{key}:{}", lib_client(c)),
        Mode::Confirm | Mode::Direct => channel(key, c),
    }
}

/// With the library's scripts: the record that holds a master's data epoch and cluster
/// fingerprint, the id of a new epoch, and the keys of one lock's queue, as the library
/// names them (`src/scripts/keys.rs`).
const LIB_CLUSTER_RECORD: &str = "redquorum:cluster";
/// The id for a new data epoch that master `i` is sent: master `i`'s own, as long as the
/// library's (which draws a new one per round as well).
fn lib_epoch(i: usize) -> String {
    format!("{i:016x}")
}

/// A library script's keys and arguments, named once per round as the library names
/// them, and its `EVALSHA` for each master with that master's own id for a data epoch
/// (`ARGV[1]`, before the other arguments).
struct LibCall {
    sha: String,
    keys: Vec<String>,
    /// The arguments after the epoch id.
    args: Vec<String>,
}

impl LibCall {
    /// Adds the call's SHA, keys and arguments for the `master`-th master to `cmd`, an
    /// `EVALSHA`.
    fn fill(&self, cmd: &mut redis::Cmd, master: usize) {
        cmd.arg(&self.sha)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(lib_epoch(master))
            .arg(&self.args);
    }

    /// The `EVALSHA` for the `master`-th master, sized at once as the library's
    /// `Invocation::evalsha` builds it.
    fn evalsha(&self, master: usize) -> redis::Cmd {
        let bytes: usize = self.keys.iter().chain(&self.args).map(String::len).sum();
        let count = self.keys.len() + self.args.len() + 4;
        let mut cmd = redis::Cmd::with_capacity(count, bytes + 96);
        cmd.arg("EVALSHA");
        self.fill(&mut cmd, master);
        cmd
    }
}
fn lib_queue(key: &str) -> String {
    format!("redquorum:queue:{key}")
}
fn lib_ticket(key: &str) -> String {
    format!("redquorum:ticket:{key}")
}
fn lib_owner(key: &str) -> String {
    format!("redquorum:owner:{key}")
}
fn lib_waiter_prefix(key: &str) -> String {
    format!("redquorum:waiter:{key}:")
}

/// With the library's scripts: `enqueue.lua` (its SHA `sha`) for ring client `c`,
/// waiting as `waiter` with the ticket `score`, on lock `key`, as the library's unfair
/// registration sends it (`src/scripts/queue.rs`).
fn lib_enqueue(sha: &str, key: &str, c: usize, (waiter, score): (&str, u64)) -> LibCall {
    LibCall {
        sha: sha.to_owned(),
        keys: vec![
            LIB_CLUSTER_RECORD.to_owned(),
            key.to_owned(),
            lib_queue(key),
            lib_ticket(key),
            format!("{}{waiter}", lib_waiter_prefix(key)),
            lib_owner(key),
        ],
        args: vec![
            String::new(),
            waiter.to_owned(),
            score.to_string(),
            "0".to_owned(),
            HELD_MS.to_string(),
            channel_of(Mode::Scripts, key, c),
            "0".to_owned(),
            lib_waiter_prefix(key),
        ],
    }
}

/// With the library's scripts: client `c`'s tag, as long as the library's client id.
fn lib_client(c: usize) -> String {
    format!("ring-client-{c:024}")
}

/// With the library's scripts: client `c`'s waiter id of its `turn` (or, `lease`, the
/// value it holds then), shaped as the library's values: its tag, then 128 bits.
fn lib_id(c: usize, turn: usize, lease: bool) -> String {
    let bits = (u128::from(lease) << 127) | turn as u128;
    format!("{}.{bits:032x}", lib_client(c))
}

/// Direct grant: the record of ring client `c` (the value it will hold, and its stamp).
fn record_of(key: &str, c: usize) -> String {
    format!("{key}:rec:{c}")
}

/// The value of ring client `c`'s `turn`-th hold.
fn value(key: &str, c: usize, turn: usize) -> String {
    format!("{key}:{c}:{turn}")
}

/// The waiter id of ring client `c`.
fn waiter(key: &str, c: usize) -> String {
    format!("{}{c}", waiter_prefix(key))
}

/// The ring's waiter queue.
fn queue_of(key: &str) -> String {
    format!("{key}:queue")
}

/// What the liveness keys of the ring's waiters start with (followed by a waiter id).
fn live_prefix(key: &str) -> String {
    format!("{key}:live:")
}

/// What every ring client's waiter id starts with (no value held starts with it).
fn waiter_prefix(key: &str) -> String {
    format!("{key}:waiter:")
}

/// One ring client's settings.
struct Client {
    mode: Mode,
    /// When the first records were written (the direct grant's stamp 0).
    registered: Instant,
    me: usize,
    n: usize,
    key: Arc<str>,
    record: Arc<str>,
    release_sha: String,
    confirm_sha: String,
    queue_sha: String,
    dequeue_sha: String,
    hold: Duration,
    end: Instant,
    turns: Arc<Turns>,
}

impl Client {
    async fn run(self, mut member: Member, mut stop: watch::Receiver<bool>) -> Tally {
        let mut tally = Tally::default();
        let quorum = self.n / 2 + 1;
        let next = (self.me + 1) % CONTENDERS;
        let mut holding = self.me == 0;
        let mut current = match (self.mode, holding) {
            (Mode::Direct, false) => value(&self.key, self.me, 1),
            (Mode::Scripts, _) => lib_id(self.me, 0, true),
            _ => value(&self.key, self.me, 0),
        };
        // With the library's scripts: the waiter id this client waits as, fresh each turn.
        let mut waiting_as = lib_id(self.me, 0, false);
        // Direct grant: when each stamp this client numbered left, written once; stamp 0
        // is the record written before the window began.
        let mut stamps: HashMap<u64, Instant> = HashMap::from([(0, self.registered)]);
        // Notices by released (confirm) or granted (direct) value: masters heard from, as
        // a bit set, and (direct) the least bound on the grant's expiry each gave.
        let mut heard: HashMap<String, (u64, Vec<Instant>)> = HashMap::new();
        // Far more turns than a window allows: the clock ends the loop.
        for turn in 1..1_000_000usize {
            if !holding {
                let stalled = tokio::time::Instant::now() + STEP_BOUND;
                loop {
                    let notice = tokio::select! {
                        notice = member.notices.recv() => notice,
                        _ = stop.wait_for(|s| *s) => return tally,
                        () = tokio::time::sleep_until(stalled) => {
                            tally.errors += 1;
                            tally.first_error.get_or_insert(format!(
                                "no quorum of notices within {STEP_BOUND:?}"
                            ));
                            return tally;
                        }
                    };
                    let Some((i, payload)) = notice else {
                        return tally;
                    };
                    let (name, bound) = match self.mode {
                        // The released value: one release's notices name it alike.
                        Mode::Confirm => (payload, None),
                        // The waiter id handed the key: this turn's, or a stale notice.
                        Mode::Scripts if payload != waiting_as => continue,
                        Mode::Scripts => (payload, None),
                        // The granted value and the stamp the grant froze: the key lives
                        // at least until that stamp's send time plus the TTL less drift.
                        Mode::Direct => {
                            let (granted, stamp) =
                                payload.split_once(' ').unwrap_or((&payload, ""));
                            if granted != current {
                                continue;
                            }
                            let sent = stamp.parse::<u64>().ok().and_then(|k| stamps.get(&k));
                            let Some(sent) = sent else {
                                // A stamp never sent, or forgotten: never counted.
                                continue;
                            };
                            let ttl = Duration::from_millis(HELD_MS);
                            (granted.to_owned(), Some(*sent + ttl - DRIFT))
                        }
                    };
                    let (masters, bounds) = heard.entry(name).or_default();
                    if *masters & (1 << i) == 0 {
                        bounds.extend(bound);
                    }
                    *masters |= 1 << i;
                    if masters.count_ones() as usize >= quorum {
                        if self.mode == Mode::Direct {
                            // The deadline: the quorum-th latest bound.
                            bounds.sort_unstable_by(|a, b| b.cmp(a));
                            let deadline = bounds.get(quorum - 1).copied();
                            if deadline.is_none_or(|d| d <= Instant::now()) {
                                tally.errors += 1;
                                tally.first_error.get_or_insert(
                                    "a direct grant came with no validity left".to_owned(),
                                );
                                return tally;
                            }
                        }
                        // Late notices of this release start a new entry that never
                        // reaches a quorum; older entries go with it.
                        heard.clear();
                        break;
                    }
                }
                let confirmed = match self.mode {
                    Mode::Confirm => {
                        current = value(&self.key, self.me, turn);
                        Some(self.confirm(&member, &current, quorum).await)
                    }
                    Mode::Scripts => {
                        current = lib_id(self.me, turn, true);
                        Some(
                            self.confirm_scripts(&member, &current, &waiting_as, quorum)
                                .await,
                        )
                    }
                    Mode::Direct => None,
                };
                if let Some(Err(e)) = confirmed {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(e);
                    return tally;
                }
                let got = Instant::now();
                if self.turns.holder.swap(self.me + 1, Ordering::SeqCst) != 0 {
                    self.turns.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                if let Some((released, _)) = self
                    .turns
                    .released_at
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
                {
                    push(
                        &self.turns.hand_offs,
                        got.saturating_duration_since(released),
                    );
                }
            }
            let got = Instant::now();
            let done = section(&mut member.storage, &self.record, turn, self.hold).await;
            push(&self.turns.holds, got.elapsed());
            self.turns.holder.store(0, Ordering::SeqCst);
            if let Err(e) = done {
                tally.errors += 1;
                tally.first_error.get_or_insert(e.to_string());
                return tally;
            }
            tally.done += 1;
            if Instant::now() >= self.end {
                // Nobody releases after the end: the waiters stop at the window's end.
                return tally;
            }
            *self
                .turns
                .released_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((Instant::now(), self.me));
            if let Err(e) = self.release(&member, &current, next, quorum).await {
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
                return tally;
            }
            holding = false;
            if self.mode == Mode::Confirm {
                // Back in the queue, behind the waiters already there: off the hand-off's
                // path, as the library's waiter registers after its refused attempt.
                let ticket = CONTENDERS as u64 + self.turns.tickets.fetch_add(1, Ordering::SeqCst);
                let me = waiter(&self.key, self.me);
                let queued = fan_out(
                    &member.conns,
                    Enough::Replies(self.n),
                    Build::Once,
                    |cmd, _| {
                        cmd.arg(&self.queue_sha)
                            .arg(1)
                            .arg(queue_of(&self.key))
                            .arg(&me)
                            .arg(ticket)
                            .arg(live_prefix(&self.key))
                            .arg(channel(&self.key, self.me))
                            .arg(HELD_MS);
                    },
                )
                .await;
                if let Err(e) = queued {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(e);
                    return tally;
                }
            }
            if self.mode == Mode::Scripts {
                // Back in the queue with a fresh waiter id and a ticket behind the
                // waiters already there, by the library's registration.
                let ticket = CONTENDERS as u64 + self.turns.tickets.fetch_add(1, Ordering::SeqCst);
                waiting_as = lib_id(self.me, turn, false);
                let me = (&*waiting_as, ticket);
                let enqueue = lib_enqueue(&self.queue_sha, &self.key, self.me, me);
                let queued = fan_out(
                    &member.conns,
                    Enough::Replies(self.n),
                    Build::PerMaster,
                    |cmd, i| enqueue.fill(cmd, i),
                )
                .await;
                if let Err(e) = queued {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(e);
                    return tally;
                }
            }
            if self.mode == Mode::Direct {
                // The next value, registered with a fresh stamp while the others hold:
                // off the hand-off's path.
                current = value(&self.key, self.me, turn + 1);
                let stamp = turn as u64;
                stamps.insert(stamp, Instant::now());
                let record = record_of(&self.key, self.me);
                let registered = fan_out(
                    &member.conns,
                    Enough::Replies(self.n),
                    Build::Once,
                    |cmd, _| {
                        cmd.arg(&self.confirm_sha)
                            .arg(1)
                            .arg(&record)
                            .arg(&current)
                            .arg(stamp);
                    },
                )
                .await;
                if let Err(e) = registered {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(e);
                    return tally;
                }
            }
        }
        tally
    }

    /// Confirm: the round a handed waiter runs from its own start, at its quorum-th grant.
    async fn confirm(&self, member: &Member, current: &str, quorum: usize) -> Result<(), String> {
        let me = waiter(&self.key, self.me);
        let granted = fan_out(
            &member.conns,
            Enough::Grants(quorum),
            Build::Once,
            |cmd, _| {
                cmd.arg(&self.confirm_sha)
                    .arg(2)
                    .arg(&*self.key)
                    .arg(queue_of(&self.key))
                    .arg(current)
                    .arg(&me)
                    .arg(HELD_MS)
                    .arg(live_prefix(&self.key));
            },
        )
        .await?;
        match granted >= quorum {
            true => Ok(()),
            false => Err(format!(
                "a confirm was granted by {granted} masters, not a quorum"
            )),
        }
    }

    /// Confirm with the library's `acquire_queued.lua`, as a queued waiter's confirm sends
    /// it (no fence read, a holder record the connection knows to outlive the lock), at
    /// its quorum-th grant. As the library's call then does, the waiter leaves the queue
    /// (`dequeue.lua`) on every master that did not grant: at once where it refused, and
    /// on a master that answers later as soon as its answer is no grant.
    async fn confirm_scripts(
        &self,
        member: &Member,
        current: &str,
        waiter: &str,
        quorum: usize,
    ) -> Result<(), String> {
        // Named once; built for each master, with its own id for a data epoch, as the
        // library builds the scripts that may start one.
        let confirm = LibCall {
            sha: self.confirm_sha.clone(),
            keys: vec![
                LIB_CLUSTER_RECORD.to_owned(),
                self.key.to_string(),
                format!("redquorum:fence:{}", self.key),
                lib_owner(&self.key),
                lib_queue(&self.key),
                lib_ticket(&self.key),
                format!("redquorum:holder:{}", lib_client(self.me)),
            ],
            args: [
                "",
                current,
                &HELD_MS.to_string(),
                "0",
                "",
                "",
                "",
                "",
                waiter,
                "0",
                &lib_waiter_prefix(&self.key),
            ]
            .map(str::to_owned)
            .to_vec(),
        };
        let mut pending: FuturesUnordered<_> = member
            .conns
            .iter()
            .enumerate()
            .map(|(i, conn)| {
                let (mut conn, cmd) = (conn.clone(), confirm.evalsha(i));
                async move { (i, cmd.query_async::<redis::Value>(&mut conn).await) }
            })
            .collect();
        let mut refused = Vec::new();
        let counted = async {
            let mut granted = 0;
            while granted < quorum {
                match pending.next().await {
                    Some((_, Ok(reply))) if lib_granted(&reply) => granted += 1,
                    Some((i, Ok(_))) => refused.push(i),
                    Some((_, Err(e))) => return Err(e.to_string()),
                    None => break,
                }
            }
            Ok(granted)
        };
        let granted = match tokio::time::timeout(STEP_BOUND, counted).await {
            Ok(result) => result?,
            Err(_) => return Err(format!("no quorum of confirms within {STEP_BOUND:?}")),
        };
        if granted < quorum {
            return Err(format!(
                "a confirm was granted by {granted} masters, not a quorum"
            ));
        }
        // The same request to every master that did not grant.
        let mut leave = redis::cmd("EVALSHA");
        leave
            .arg(&self.dequeue_sha)
            .arg(3)
            .arg(&*self.key)
            .arg(lib_queue(&self.key))
            .arg(format!("{}{waiter}", lib_waiter_prefix(&self.key)))
            .arg(waiter)
            .arg(format!("redquorum:released:{}", self.key))
            .arg(lib_waiter_prefix(&self.key));
        let conns = member.conns.clone();
        tokio::spawn(async move {
            let dequeue = |i: usize| {
                let (leave, mut conn) = (&leave, conns[i].clone());
                async move {
                    let _ = leave.query_async::<redis::Value>(&mut conn).await;
                }
            };
            let work = async {
                futures::future::join_all(refused.into_iter().map(dequeue)).await;
                while let Some((i, answer)) = pending.next().await {
                    if !matches!(&answer, Ok(reply) if lib_granted(reply)) {
                        dequeue(i).await;
                    }
                }
            };
            let _ = tokio::time::timeout(STEP_BOUND, work).await;
        });
        Ok(())
    }

    /// The release, returning where the library's release returns: at the
    /// `n - quorum + 1`-th reply.
    async fn release(
        &self,
        member: &Member,
        current: &str,
        next: usize,
        quorum: usize,
    ) -> Result<usize, String> {
        let next_channel = channel(&self.key, next);
        let enough = Enough::Replies(self.n - quorum + 1);
        match self.mode {
            Mode::Confirm => {
                let me = waiter(&self.key, self.me);
                let waiters = waiter_prefix(&self.key);
                fan_out(&member.conns, enough, Build::Once, |cmd, _| {
                    cmd.arg(&self.release_sha)
                        .arg(2)
                        .arg(&*self.key)
                        .arg(queue_of(&self.key))
                        .arg(current)
                        .arg(&me)
                        .arg(live_prefix(&self.key))
                        .arg(HANDED_MS)
                        .arg(&waiters);
                })
                .await
            }
            Mode::Scripts => {
                fan_out(&member.conns, enough, Build::Once, |cmd, _| {
                    cmd.arg(&self.release_sha)
                        .arg(4)
                        .arg(&*self.key)
                        .arg(lib_queue(&self.key))
                        .arg(lib_owner(&self.key))
                        .arg(lib_ticket(&self.key))
                        .arg(current)
                        .arg(format!("redquorum:released:{}", self.key))
                        .arg(lib_waiter_prefix(&self.key))
                        .arg("1");
                })
                .await
            }
            Mode::Direct => {
                let record = record_of(&self.key, next);
                fan_out(&member.conns, enough, Build::Once, |cmd, _| {
                    cmd.arg(&self.release_sha)
                        .arg(2)
                        .arg(&*self.key)
                        .arg(&record)
                        .arg(current)
                        .arg(&next_channel)
                        .arg(HELD_MS);
                })
                .await
            }
        }
    }
}

/// Whether an answer of the library's `acquire_queued.lua` is a grant (code 1).
fn lib_granted(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(fields) if matches!(fields.first(), Some(redis::Value::Int(1))))
}

/// When a fan-out has heard enough: a release at its `n - quorum + 1`-th reply (where the
/// library's release returns), a confirm at its quorum-th grant (or every reply).
#[derive(Clone, Copy)]
enum Enough {
    Replies(usize),
    Grants(usize),
}

/// How a fan-out builds its `EVALSHA`: once for every master, as the library builds a
/// round's request, or for each master (its index given), as the library builds the
/// scripts that may start a data epoch, each master with its own id for it (`ARGV[1]`,
/// docs/design.md §2).
#[derive(Clone, Copy, PartialEq)]
enum Build {
    Once,
    PerMaster,
}

/// Sends `EVALSHA` (its arguments added by `args`, built as `build` says) to every master
/// at once and reads replies until `enough`; the requests still pending then are driven
/// to their end by a task of their own, as the library's rounds do (dropped, a request
/// not yet handed to its connection would never reach its master). Returns how many of
/// the replies read were 1.
async fn fan_out(
    conns: &[MultiplexedConnection],
    enough: Enough,
    build: Build,
    args: impl Fn(&mut redis::Cmd, usize),
) -> Result<usize, String> {
    let evalsha = |i: usize| {
        // Sized once for any of the ring's requests, as the library sizes its own.
        let mut cmd = redis::Cmd::with_capacity(32, 1024);
        cmd.arg("EVALSHA");
        args(&mut cmd, i);
        Arc::new(cmd)
    };
    let shared = (build == Build::Once).then(|| evalsha(0));
    let mut pending: FuturesUnordered<_> = conns
        .iter()
        .enumerate()
        .map(|(i, conn)| {
            let cmd = match &shared {
                Some(cmd) => Arc::clone(cmd),
                None => evalsha(i),
            };
            let mut conn = conn.clone();
            async move { cmd.query_async::<redis::Value>(&mut conn).await }
        })
        .collect();
    let counted = async {
        let (mut answered, mut ones) = (0, 0);
        while match enough {
            Enough::Replies(need) => answered < need,
            Enough::Grants(need) => ones < need,
        } {
            match pending.next().await {
                Some(Ok(reply)) => {
                    answered += 1;
                    ones += usize::from(matches!(reply, redis::Value::Int(1)));
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => break,
            }
        }
        Ok(ones)
    };
    let result = match tokio::time::timeout(STEP_BOUND, counted).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {STEP_BOUND:?}")),
    };
    if !pending.is_empty() {
        tokio::spawn(async move {
            let late = async { while pending.next().await.is_some() {} };
            let _ = tokio::time::timeout(STEP_BOUND, late).await;
        });
    }
    result
}
