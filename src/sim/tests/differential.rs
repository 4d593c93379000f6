//! The simulation's master model against a real `redis-server`: a differential test
//! (docs/testing.md §8).
//!
//! Every master operation exists as a Lua script (`src/scripts/`), as its codec beside it
//! (`src/scripts/*.rs`, whose requests the master sends) and as its model
//! (`server::answer`, which the simulation's schedules run). Here random sequences of
//! operations run both through the real client path (`RedisMaster::call`, against one
//! real `redis-server` started by the testkit) and through the model, and after every
//! step the replies must agree and so must the keyspaces (the real one read whole by one
//! script, the model's `Data`). Each sequence starts on an empty master with a fresh
//! client. Half the time an argument is one the state makes interesting (a value that
//! holds one of the keys, a queued waiter or the one handed the key, a token or a score at
//! its counter), else one of a few fixed ones; the holder of a fencing write-back is drawn
//! more often.
//!
//! # Time
//! The model runs at the middle of the interval between a `TIME` read just before the call
//! and one just after it (on a second connection: the server serves the three in order);
//! the scripts answer no server time. The step's *uncertainty* is the longer part of that
//! interval on either side of the chosen instant: the script reads the clock (`PTTL`,
//! `SET .. PX`) somewhere within it. Redis counts expiry in milliseconds, the model in
//! microseconds, so near an expiry the two may disagree; hence:
//! - before an operation, the test waits until no key it reads (a key whose name holds one
//!   of the operation's lock names; a scan reads them all) expired less than [`GUARD`] ago
//!   or expires within [`GUARD`] + [`HEADROOM`];
//! - an operation that still ran within [`GUARD`] (plus the uncertainties) of such an
//!   expiry, or that timed out, ends its sequence uncompared (*cut*); fewer than half of
//!   the operations compared fails the test, which would otherwise prove little;
//! - expiry instants, and TTLs in replies, agree to within [`TOLERANCE`] plus the
//!   uncertainty of the step that set them (and, for replies, of the step itself);
//! - a key whose expiry lies within [`GUARD`] (plus those uncertainties and the reading's
//!   own duration) of the instant the real keyspace was read, on either side, is not
//!   compared at that step (counted as skipped).
//!
//! A state that lasts less than the guard and the headroom between two expiries is
//! therefore never reached by the random sequences; the scripted cases below reach two
//! such edges on purpose.
//!
//! # What is normalised, and why
//! - Epoch ids: the client draws a random id for each call. The model is given the id the
//!   real master holds after the step, so what is compared is whether and when each side
//!   starts an epoch: replies carry only the id, and the keyspaces compare the creation
//!   time to within the tolerance.
//! - A survey's `run_id`: the process's identity, which `SimServer` supplies, not the
//!   model of the data.
//! - A scan's find: whether a key was found, not which (`SCAN` follows hash order), and its
//!   cursor (one step reads the whole small keyspace).
//! - TTLs in replies (`holder_ttl`, `wait`, `pttl_ms`): to within the tolerance above.
//!
//! # What is not compared
//! Owner records and holder records (`redquorum:owner:*`, `redquorum:holder:*`, so
//! neither an inspection's owner fields; tests/scripts.rs pins them) and read-write
//! locks' reader indexes (`redquorum:rw:<lock>:readers`): the model keeps
//! neither (its reader index is the set of live reader keys), so a scan whose find is a
//! reader index the model cannot see is excused (counted). The readers' mark in a
//! read-write lock's key is modelled and compared. Kinds are not modelled either:
//! each lock name serves one kind here (mutexes `lkA` and `lkB`, the read-write lock `rwA`,
//! the semaphore `smA`), and a waiter id is never a lease value. Release and hand-off
//! notices (pub/sub) leave nothing in the keyspace. `init_cluster`'s claim (`Op::Claim`,
//! `Op::Unclaim`) is not modelled: the simulation never runs two bootstraps at once. The
//! planted scripts of `--cfg redquorum_mutants` are not run.
//!
//! # Seeds and size
//! Each run draws a seed (printed); `REDQUORUM_DIFF_SEED=<seed>` runs it again: the same
//! draws, so the same operations as long as the outcomes repeat (expiry follows the real
//! clock, and arguments drawn from the state follow the outcomes).
//! `REDQUORUM_DIFF_TRACE=1` prints every step's two replies. The test runs
//! [`DEFAULT_STEPS`] steps, two or three seconds; `REDQUORUM_DIFF_STEPS=<n>` runs more.
//! Needs Redis 7 (`PEXPIRETIME`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::aio::MultiplexedConnection;

use crate::Redlock;
use crate::cluster::{self, Owner, Record, View};
use crate::config::{Builder, Config};
use crate::error::{MasterError, MasterErrorKind};
use crate::master::{self, FenceRead, Master, Op, Outgoing, PermitsOp, RedisMaster, Reply, RwMode};
use crate::scripts;
use crate::sim::server::{self, Answer, Data, ScriptBugs};
use redquorum_testkit::{Server, ServerOptions};

const SEED_ENV: &str = "REDQUORUM_DIFF_SEED";
const STEPS_ENV: &str = "REDQUORUM_DIFF_STEPS";
const TRACE_ENV: &str = "REDQUORUM_DIFF_TRACE";
const TEST: &str = "sim::tests::differential::the_model_answers_as_the_scripts_do";

/// Steps in a default run.
const DEFAULT_STEPS: usize = 600;

/// No comparison within this much of an expiry (µs).
const GUARD: u64 = 3_000;
/// How long an operation may take (µs) without risking a cut: the wait before it keeps
/// expiries this far (plus [`GUARD`]) away.
const HEADROOM: u64 = 10_000;
/// How long after an expiry a scripted case resumes (µs): well clear of the guard and of
/// its uncertainties, well within the states those cases reach.
const PAST_AN_EXPIRY: u64 = 20_000;
/// How far expiry instants and TTLs may differ (µs): Redis's millisecond from the script's
/// start, against the model's microsecond from `TIME`.
const TOLERANCE: u64 = 2_000;

/// The lock names, one kind each.
const MUTEXES: [&str; 2] = ["lkA", "lkB"];
const RW: &str = "rwA";
const SEM: &str = "smA";
/// Lease values, waiter ids and writer intents: few, so that they meet. Values and
/// waiter ids are shaped as the library's (a client's id, a '.', 128 random bits in hex),
/// two clients' each, so that a script that tells them apart by their shape is caught.
const VALUES: [&str; 4] = [
    "4f0c2a9e-5b1d-4e7a-8c3f-1a2b3c4d5e6f.9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b",
    "4f0c2a9e-5b1d-4e7a-8c3f-1a2b3c4d5e6f.0123456789abcdef0123456789abcdef",
    "b7e1d3c5-a9f2-4b6d-8e0a-c2d4e6f8a0b1.5c4b3a29180706f5e4d3c2b1a0f9e8d7",
    "b7e1d3c5-a9f2-4b6d-8e0a-c2d4e6f8a0b1.fedcba9876543210fedcba9876543210",
];
const WAITERS: [&str; 4] = [
    "4f0c2a9e-5b1d-4e7a-8c3f-1a2b3c4d5e6f.a1b2c3d4e5f60718293a4b5c6d7e8f90",
    "4f0c2a9e-5b1d-4e7a-8c3f-1a2b3c4d5e6f.1f2e3d4c5b6a79808f7e6d5c4b3a2918",
    "b7e1d3c5-a9f2-4b6d-8e0a-c2d4e6f8a0b1.00112233445566778899aabbccddeeff",
    "b7e1d3c5-a9f2-4b6d-8e0a-c2d4e6f8a0b1.ffeeddccbbaa99887766554433221100",
];
const INTENTS: [&str; 2] = ["intA", "intB"];
/// TTLs (ms): some expire within a sequence, some outlive it.
const TTLS: [u64; 5] = [25, 60, 150, 400, 3000];
const WAITER_TTLS: [u64; 4] = [25, 50, 150, 1500];
const INTENT_TTLS: [u64; 3] = [30, 100, 400];
const PAUSES: [u64; 4] = [2, 10, 30, 80];

/// Each kind of step, with its weight in the draw.
const KINDS: [(&str, u32); 27] = [
    ("acquire", 10),
    ("acquire_queued", 8),
    ("enqueue", 14),
    ("dequeue", 4),
    ("acquire_many", 4),
    ("extend", 5),
    ("extend_many", 3),
    ("release", 6),
    ("release_many", 3),
    ("fence", 6),
    ("inspect", 3),
    ("force_unlock", 2),
    ("acquire_permits", 6),
    ("replace_limit", 1),
    ("release_permits", 3),
    ("extend_permits", 2),
    ("acquire_read", 5),
    ("acquire_write", 4),
    ("extend_read", 3),
    ("downgrade", 2),
    ("release_rw", 3),
    ("fence_rw", 3),
    ("survey", 1),
    ("scan", 1),
    ("stamp", 1),
    ("inspect_rw", 1),
    ("pause", 4),
];

#[tokio::test]
async fn the_model_answers_as_the_scripts_do() {
    let seed = env_u64(SEED_ENV).unwrap_or_else(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        u64::try_from(nanos.as_nanos() % u128::from(u64::MAX)).unwrap()
    });
    let steps = env_u64(STEPS_ENV).map_or(DEFAULT_STEPS, |n| usize::try_from(n).unwrap());
    eprintln!("{TEST}: seed {seed}, {steps} steps (run it again with {SEED_ENV}={seed})");
    let mut real = Real::start().await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stats = Stats::default();
    let mut sequence = 0;
    while stats.steps < steps {
        let len = rng.random_range(10..=60).min(steps - stats.steps);
        let mut run = Sequence::new(&mut real).await;
        let mut labels = Vec::new();
        for _ in 0..len {
            // Near the end, a kind never compared yet is drawn for sure, so that a run of
            // the default length compares every kind (the draw alone misses a rare one in
            // about one run in fifty).
            let missing: Vec<&'static str> = KINDS
                .iter()
                .map(|(kind, _)| *kind)
                .filter(|kind| !stats.by_kind.contains_key(kind))
                .collect();
            let forced = (steps - stats.steps <= 2 * missing.len())
                .then(|| missing.first().copied())
                .flatten();
            let step = run.generate(&mut rng, forced);
            labels.push(step.label.clone());
            stats.steps += 1;
            match run.step(&step, &mut stats).await {
                Ok(true) => {}
                Ok(false) => {
                    stats.cut += 1;
                    break;
                }
                Err(difference) => panic!(
                    "{TEST}: seed {seed}, sequence {sequence}, step {}: the model and the \
                     scripts disagree\n{difference}\nthe sequence, on an empty master:\n  \
                     {}\nreplay: {SEED_ENV}={seed} cargo nextest run --all-features --locked \
                     -E 'test(={TEST})'",
                    labels.len(),
                    labels.join("\n  ")
                ),
            }
        }
        sequence += 1;
    }
    eprintln!("{TEST}: {stats}");
    assert!(
        2 * stats.compared >= stats.ops,
        "only {} of {} operations were compared ({} sequences cut near an expiry or by a \
         timeout): the machine is too slow for this test to prove anything",
        stats.compared,
        stats.ops,
        stats.cut
    );
    if steps >= DEFAULT_STEPS {
        for (kind, _) in KINDS {
            assert!(
                stats.by_kind.contains_key(kind),
                "no {kind} was compared: {stats}"
            );
        }
    }
}

/// `live_head`'s budget (`queue.lua`): it prunes dead members in batches of 64 while it
/// has pruned fewer than 256, then reads whether any member is left: a queue of exactly
/// 256 dead members has no live member once pruned, and a fair first attempt takes the
/// free key (the boundary where model and script once disagreed).
#[tokio::test]
async fn a_queue_of_exactly_the_prune_budget_of_dead_waiters_has_no_live_head() {
    const BUDGET: u64 = 256;
    let mut real = Real::start().await;
    let mut run = Sequence::new(&mut real).await;
    let mut stats = Stats::default();
    let (key, owner) = (MUTEXES[0], Arc::clone(&run.owner));
    let reads = || Some(vec![key]);
    // A lease holds the key while the queue fills, so that nobody is handed it.
    let lease = Duration::from_millis(1500);
    let mut steps = vec![Step::op(
        "acquire",
        format!("acquire {key} val0 ttl {lease:?}"),
        acquire(key, "val0", lease, FenceRead::Skip, &owner),
        reads(),
    )];
    // Registered last to first, so that each registration finds a live head (the
    // earliest, still alive) and prunes nobody; the second round leaves each alive for
    // 25 ms, the queue itself for 10 s.
    for waiter_ttl in [Duration::from_secs(5), Duration::from_millis(25)] {
        for score in (1..=BUDGET).rev() {
            let waiter = format!("dead{score:03}");
            steps.push(Step {
                quick: true,
                ..Step::op(
                    "enqueue",
                    format!("enqueue {key} {waiter} score {score} waiter ttl {waiter_ttl:?}"),
                    enqueue(key, &waiter, score, true, false, waiter_ttl),
                    reads(),
                )
            });
        }
    }
    for step in &steps {
        assert_eq!(run.step(step, &mut stats).await, Ok(true), "{}", step.label);
    }
    // Until the lease and every waiter expired.
    let last = run
        .model
        .waiters
        .values()
        .chain(run.model.locks.get(key))
        .map(|e| e.expires_us)
        .max()
        .unwrap();
    let mut steps = vec![Step::pause(Duration::from_micros(
        (last + PAST_AN_EXPIRY).saturating_sub(wall_us()),
    ))];
    for value in ["val1", "val2"] {
        steps.push(Step::op(
            "acquire_queued",
            format!("acquire {key} {value} fair, a first attempt"),
            acquire_queued(key, value, lease, FenceRead::Skip, &owner, "", true),
            reads(),
        ));
    }
    for step in &steps {
        assert_eq!(run.step(step, &mut stats).await, Ok(true), "{}", step.label);
    }
    // The first was granted on the emptied queue, the second refused behind it.
    let held = run.model.locks.get(key).map(|e| e.value.to_string());
    assert_eq!(held.as_deref(), Some("val1"));
}

/// A fair confirm of a key handed to its waiter, refused because another live waiter heads
/// the queue, is refused as queued (`acquire_queued.lua`'s -2: no holder TTL), not as held.
/// The key reaches that state when the waiter's liveness key expires while the key handed
/// to it lives on (a hand-off late in the waiter's TTL), and a registration of another
/// waiter prunes it from the queue: the key, no longer a member's, is not moved.
#[tokio::test]
async fn a_fair_confirm_queued_behind_another_head_has_no_holder_ttl() {
    let mut real = Real::start().await;
    let mut run = Sequence::new(&mut real).await;
    let mut stats = Stats::default();
    let (key, owner) = (MUTEXES[0], Arc::clone(&run.owner));
    let reads = || Some(vec![key]);
    let ttl = Duration::from_secs(3);
    let waiter_ttl = Duration::from_millis(300);
    let register = |waiter: &str, score: u64, waiter_ttl: Duration| {
        Step::op(
            "enqueue",
            format!("enqueue {key} {waiter} score {score} waiter ttl {waiter_ttl:?}"),
            enqueue(key, waiter, score, true, false, waiter_ttl),
            reads(),
        )
    };
    let steps = [
        Step::op(
            "acquire",
            format!("acquire {key} val0 ttl {ttl:?}"),
            acquire(key, "val0", ttl, FenceRead::Skip, &owner),
            reads(),
        ),
        register("wtr0", 1, waiter_ttl),
        // Half the waiter's TTL on, the release hands it the key for a whole waiter TTL.
        Step::pause(waiter_ttl / 2),
        Step::op(
            "release",
            format!("release {key} val0"),
            release(&[key.into()], "val0", key, true),
            reads(),
        ),
    ];
    for step in &steps {
        assert_eq!(run.step(step, &mut stats).await, Ok(true), "{}", step.label);
    }
    let holder = |run: &Sequence<'_>| run.model.locks.get(key).map(|e| e.value.to_string());
    assert_eq!(holder(&run).as_deref(), Some("wtr0"));
    // Once wtr0's liveness key expired (the key handed to it lives on), wtr1's
    // registration prunes wtr0 and heads the queue; then wtr0 confirms.
    let dead_at = run.model.waiters[&(key.into(), "wtr0".into())].expires_us;
    let steps = [
        Step::pause(Duration::from_micros(
            (dead_at + PAST_AN_EXPIRY).saturating_sub(wall_us()),
        )),
        register("wtr1", 2, Duration::from_secs(2)),
        Step::op(
            "acquire_queued",
            format!("acquire {key} val1 as waiter wtr0, fair"),
            acquire_queued(key, "val1", ttl, FenceRead::Skip, &owner, "wtr0", true),
            reads(),
        ),
    ];
    for step in &steps {
        assert_eq!(run.step(step, &mut stats).await, Ok(true), "{}", step.label);
    }
    assert_eq!(holder(&run).as_deref(), Some("wtr0"));
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

/// The wall clock, which the local server's `TIME` reads too (µs since the Unix epoch).
fn wall_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// What a run did.
#[derive(Debug, Default)]
struct Stats {
    steps: usize,
    /// Steps that sent an operation.
    ops: usize,
    /// Operations whose replies and keyspaces were compared.
    compared: usize,
    /// Steps compared, by kind.
    by_kind: BTreeMap<&'static str, usize>,
    /// Sequences ended early (an operation ran near an expiry, or timed out).
    cut: usize,
    /// Keys compared, summed over the steps.
    compared_keys: usize,
    /// Keys left out of a comparison near their expiry.
    skipped_keys: usize,
    /// Scans whose find was a reader index the model does not keep.
    excused_scans: usize,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} steps, {} operations, {} compared ({} keys compared, {} skipped near their \
             expiry), {} sequences cut, {} scans excused; by kind: {:?}",
            self.steps,
            self.ops,
            self.compared,
            self.compared_keys,
            self.skipped_keys,
            self.cut,
            self.excused_scans,
            self.by_kind
        )
    }
}

/// A key's value, as both sides are read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Str(String),
    Hash(BTreeMap<String, String>),
    /// Members and scores, in the sorted set's order.
    Zset(Vec<(String, String)>),
    Set(BTreeSet<String>),
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    value: Value,
    /// µs since the Unix epoch (the real master's are whole milliseconds).
    expires_us: Option<u64>,
}

type Keyspace = BTreeMap<String, Item>;

/// The real master, and a connection of the test's own to it.
struct Real {
    server: Server,
    raw: MultiplexedConnection,
    run_id: String,
}

/// Reads the whole keyspace at one instant (a script: keys expire as of its start), with
/// the server's clock (`TIME`) at its start and at its end: flat, those four numbers, then
/// per live key its name, type, `PEXPIRETIME`, the number of strings that follow, and
/// those (`GET`, `HGETALL`, `ZRANGE .. WITHSCORES` or `SMEMBERS`).
const READ_KEYSPACE: &str = r"
local t = redis.call('TIME')
local out = {tostring(t[1]), tostring(t[2]), '', ''}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local at = redis.call('PEXPIRETIME', k)
  if at ~= -2 then
    local kind = redis.call('TYPE', k)['ok']
    local v = {}
    if kind == 'string' then v = {redis.call('GET', k)}
    elseif kind == 'hash' then v = redis.call('HGETALL', k)
    elseif kind == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
    elseif kind == 'set' then v = redis.call('SMEMBERS', k) end
    out[#out + 1] = k
    out[#out + 1] = kind
    out[#out + 1] = tostring(at)
    out[#out + 1] = tostring(#v)
    for _, x in ipairs(v) do out[#out + 1] = x end
  end
end
t = redis.call('TIME')
out[3], out[4] = tostring(t[1]), tostring(t[2])
return out";

impl Real {
    async fn start() -> Self {
        let server = Server::start(&ServerOptions::new()).await.unwrap();
        let mut raw = server
            .client()
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut raw)
            .await
            .unwrap();
        let run_id = info.get("run_id").unwrap();
        Self {
            server,
            raw,
            run_id,
        }
    }

    /// The server's clock (µs since the Unix epoch).
    async fn time(&mut self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut self.raw).await.unwrap();
        s * 1_000_000 + us
    }

    /// The data epoch, if any.
    async fn epoch(&mut self) -> Option<String> {
        redis::cmd("HGET")
            .arg(cluster::record_key(""))
            .arg(cluster::EPOCH_FIELD)
            .query_async(&mut self.raw)
            .await
            .unwrap()
    }

    /// The whole keyspace at one instant: that instant, how long the reading took (µs),
    /// and the keys.
    async fn keyspace(&mut self) -> (u64, u64, Keyspace) {
        let flat: Vec<String> = redis::Script::new(READ_KEYSPACE)
            .invoke_async(&mut self.raw)
            .await
            .unwrap();
        let number = |i: usize| flat[i].parse::<i64>().unwrap();
        let now_us = u64::try_from(number(0) * 1_000_000 + number(1)).unwrap();
        let end_us = u64::try_from(number(2) * 1_000_000 + number(3)).unwrap();
        let mut keys = Keyspace::new();
        let mut i = 4;
        while i < flat.len() {
            let (key, kind, at) = (&flat[i], &flat[i + 1], number(i + 2));
            let n = usize::try_from(number(i + 3)).unwrap();
            let v = &flat[i + 4..i + 4 + n];
            i += 4 + n;
            let pairs = || v.chunks(2).map(|p| (p[0].clone(), p[1].clone()));
            let value = match kind.as_str() {
                "string" => Value::Str(v[0].clone()),
                "hash" => Value::Hash(pairs().collect()),
                "zset" => Value::Zset(pairs().collect()),
                "set" => Value::Set(v.iter().cloned().collect()),
                other => Value::Other(other.to_owned()),
            };
            let expires_us = u64::try_from(at).ok().map(|ms| ms * 1000);
            keys.insert(key.clone(), Item { value, expires_us });
        }
        (now_us, end_us.saturating_sub(now_us), keys)
    }
}

/// One step: an operation (or a pause), how it is shown, and which keys it reads.
struct Step {
    kind: &'static str,
    label: String,
    op: Option<Arc<Op>>,
    pause: Duration,
    /// The lock names whose keys the operation reads; `None`: every key.
    reads: Option<Vec<&'static str>>,
    /// Only the replies are compared: no wait clear of expiries, no check that the step
    /// ran clear of them, no keyspace (for the bulk of a scripted case, whose outcome
    /// depends on no key near its expiry).
    quick: bool,
}

impl Step {
    fn op(kind: &'static str, label: String, op: Op, reads: Option<Vec<&'static str>>) -> Self {
        Self {
            kind,
            label,
            op: Some(Arc::new(op)),
            pause: Duration::ZERO,
            reads,
            quick: false,
        }
    }

    fn pause(pause: Duration) -> Self {
        Self {
            kind: "pause",
            label: format!("pause {pause:?}"),
            op: None,
            pause,
            reads: None,
            quick: false,
        }
    }
}

/// One sequence: an empty master, a fresh client to it, and an empty model.
struct Sequence<'a> {
    real: &'a mut Real,
    config: Config,
    view: Arc<View>,
    master: RedisMaster,
    model: Data,
    owner: Arc<Owner>,
    /// Per key, the uncertainty (µs) of the step that last changed it, or, where that
    /// step kept the key's expiry (or its epoch), the largest of the steps since one set
    /// it.
    slack: HashMap<String, u64>,
    /// The real master's epoch id after the last step.
    epoch_id: Option<String>,
}

impl<'a> Sequence<'a> {
    async fn new(real: &'a mut Real) -> Self {
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut real.raw)
            .await
            .unwrap();
        let timeout = Duration::from_secs(5);
        // No vitals read at connect (they would start an epoch the model does not see).
        let config = Builder::new()
            .master(real.server.url())
            .quarantine(false)
            .timeouts(crate::Timeouts::new().connect(timeout).node(timeout))
            .into_config()
            .unwrap();
        let view = Redlock::view_of(&config);
        let master = RedisMaster::new(&config.masters[0], (0, &view), &config).unwrap();
        Self {
            real,
            config,
            view,
            master,
            model: Data::default(),
            owner: Arc::new(Owner::this_process("differential")),
            slack: HashMap::new(),
            epoch_id: None,
        }
    }

    /// Draws the next step, of kind `forced` if given.
    fn generate(&self, rng: &mut StdRng, forced: Option<&'static str>) -> Step {
        let total: u32 = KINDS.iter().map(|(_, w)| w).sum();
        let mut draw = rng.random_range(0..total);
        let kind = KINDS
            .iter()
            .find(|(_, w)| {
                let here = draw < *w;
                draw = draw.saturating_sub(*w);
                here
            })
            .map_or("pause", |(k, _)| k);
        let kind = forced.unwrap_or(kind);
        let key = pick(rng, &MUTEXES);
        let names: Vec<&'static str> = match kind {
            "acquire_many" | "extend_many" | "release_many" => MUTEXES.to_vec(),
            "acquire_permits" | "replace_limit" | "release_permits" | "extend_permits" => {
                vec![SEM]
            }
            "acquire_read" | "acquire_write" | "extend_read" | "downgrade" | "release_rw"
            | "fence_rw" | "inspect_rw" => vec![RW],
            "survey" | "stamp" => Vec::new(),
            _ => vec![key],
        };
        // Half the time an argument the state makes interesting: a value that holds one
        // of the keys, a queued waiter, a token or a score at the counter.
        let value = self.hint(rng, self.holders(&names), &VALUES);
        let ttl = ms(rng, &TTLS);
        let fence = if rng.random_bool(0.5) {
            FenceRead::Read
        } else {
            FenceRead::Skip
        };
        let epoch = rng.random_bool(0.5);
        let owner = &self.owner;
        let both: Vec<Arc<str>> = MUTEXES.iter().map(|k| Arc::from(*k)).collect();
        let base = scripts::semaphore_base("", SEM);
        let slot = |i: usize| -> Arc<str> { format!("{base}{i}").into() };
        let (label, op) = match kind {
            "acquire" => (
                format!("acquire {key} {value} ttl {ttl:?} fence {fence:?}"),
                acquire(key, value, ttl, fence, owner),
            ),
            "acquire_queued" => {
                let fair = rng.random_bool(0.5);
                let waiter = if fair && rng.random_bool(0.3) {
                    ""
                } else {
                    self.hint(rng, self.waiters(key), &WAITERS)
                };
                (
                    format!(
                        "acquire {key} {value} as waiter {waiter:?} fair {fair} ttl {ttl:?} \
                         fence {fence:?}"
                    ),
                    acquire_queued(key, value, ttl, fence, owner, waiter, fair),
                )
            }
            "enqueue" => {
                let waiter = self.hint(rng, self.waiters(key), &WAITERS);
                let ticket = self.model.tickets.get(key).copied().unwrap_or(0);
                let score = if rng.random_bool(0.5) {
                    ticket + rng.random_range(0..=2)
                } else {
                    rng.random_range(1..=8)
                }
                .max(1);
                let fair = rng.random_bool(0.5);
                let strict = fair && rng.random_bool(0.6);
                let waiter_ttl = ms(rng, &WAITER_TTLS);
                (
                    format!(
                        "enqueue {key} {waiter} score {score} fair {fair} strict {strict} \
                         waiter ttl {waiter_ttl:?}"
                    ),
                    enqueue(key, waiter, score, fair, strict, waiter_ttl),
                )
            }
            "dequeue" => {
                let waiter = self.hint(rng, self.waiters(key), &WAITERS);
                (
                    format!("dequeue {key} {waiter}"),
                    Op::Dequeue {
                        key: key.into(),
                        waiter: waiter.into(),
                        channel: scripts::release_channel(key).into(),
                    },
                )
            }
            "acquire_many" => (
                format!("acquire {MUTEXES:?} {value} ttl {ttl:?} fence {fence:?}"),
                Op::AcquireMany {
                    keys: both,
                    value: value.into(),
                    ttl,
                    fence,
                    owner: Arc::clone(owner),
                },
            ),
            "extend" => (
                format!("extend {key} {value} ttl {ttl:?} epoch {epoch}"),
                extend(&[key.into()], value, ttl, epoch),
            ),
            "extend_many" => (
                format!("extend {MUTEXES:?} {value} ttl {ttl:?} epoch {epoch}"),
                extend(&both, value, ttl, epoch),
            ),
            "release" => {
                // A waiter's id released: an operator's force-unlock of a handed key.
                // A lease's value is released as a plain lock's lease releases it, or
                // as an operator's force-unlock does (every step).
                let (value, plain) = if rng.random_bool(0.2) {
                    (self.hint(rng, self.waiters(key), &WAITERS), false)
                } else {
                    (value, rng.random_bool(0.5))
                };
                (
                    format!(
                        "release {key} {value}{}",
                        if plain { " (plain)" } else { "" }
                    ),
                    release(&[key.into()], value, key, plain),
                )
            }
            "release_many" => (
                format!("release {MUTEXES:?} {value}"),
                release(&both, value, "", false),
            ),
            "fence" => {
                // Mostly the holder: only it reaches the counter.
                let value = self.hint_often(rng, self.holders(&names), value);
                let token = self.token(rng, key);
                (
                    format!("fence {key} {value} token {token}"),
                    fence_op(key, key, value, token),
                )
            }
            "inspect" => (format!("inspect {key}"), Op::Inspect { key: key.into() }),
            "inspect_rw" => (format!("inspect {RW}"), Op::Inspect { key: RW.into() }),
            "force_unlock" => (
                format!("force-unlock {key}"),
                Op::ForceUnlock {
                    key: key.into(),
                    channel: scripts::release_channel(key).into(),
                },
            ),
            "acquire_permits" | "replace_limit" => {
                let limit = if rng.random_bool(0.85) { 3 } else { 2 };
                let replace = kind == "replace_limit";
                let mut wanted: Vec<u32> = Vec::new();
                let count = if replace { 0 } else { rng.random_range(1..=2) };
                while wanted.len() < count {
                    let s = rng.random_range(0..limit);
                    if !wanted.contains(&s) {
                        wanted.push(s);
                    }
                }
                let fence = rng.random_bool(0.5);
                (
                    format!(
                        "{} {SEM} limit {limit} slots {wanted:?} {value} ttl {ttl:?} fence \
                         {fence}",
                        if replace {
                            "replace the limit of"
                        } else {
                            "acquire"
                        }
                    ),
                    Op::AcquirePermits(Box::new(PermitsOp {
                        limit_key: format!("{base}limit").into(),
                        slots: (0..limit as usize).map(slot).collect(),
                        base: base.clone().into(),
                        wanted,
                        replace,
                        value: value.into(),
                        ttl,
                        fence,
                        owner: Arc::clone(owner),
                    })),
                )
            }
            "release_permits" | "extend_permits" => {
                let keys: Vec<Arc<str>> = match rng.random_range(0..4) {
                    0 => vec![slot(0), slot(2)],
                    i => vec![slot(i - 1)],
                };
                if kind == "release_permits" {
                    (
                        format!("release {keys:?} {value}"),
                        release(&keys, value, "", false),
                    )
                } else {
                    (
                        format!("extend {keys:?} {value} ttl {ttl:?} epoch {epoch}"),
                        extend(&keys, value, ttl, epoch),
                    )
                }
            }
            "acquire_read" | "acquire_write" => {
                let mode = if kind == "acquire_read" {
                    RwMode::Read
                } else {
                    RwMode::Write {
                        intent: pick(rng, &INTENTS).into(),
                        intent_ttl: ms(rng, &INTENT_TTLS),
                    }
                };
                (
                    format!("acquire {RW} {value} {mode:?} ttl {ttl:?} fence {fence:?}"),
                    Op::RwAcquire {
                        key: RW.into(),
                        value: value.into(),
                        ttl,
                        fence,
                        owner: Arc::clone(owner),
                        mode,
                    },
                )
            }
            "extend_read" => (
                format!("extend the read lease of {RW} {value} ttl {ttl:?} epoch {epoch}"),
                Op::ExtendRead {
                    key: scripts::reader_key(RW, value).into(),
                    lock: RW.into(),
                    value: value.into(),
                    ttl,
                    epoch,
                },
            ),
            "downgrade" => (
                format!("downgrade {RW} {value}"),
                Op::RwDowngrade {
                    key: RW.into(),
                    value: value.into(),
                },
            ),
            "release_rw" | "fence_rw" => {
                let value = self.hint_often(rng, self.holders(&names), value);
                let (key, lease): (Arc<str>, &str) = if rng.random_bool(0.5) {
                    (RW.into(), "write")
                } else {
                    (scripts::reader_key(RW, value).into(), "read")
                };
                if kind == "release_rw" {
                    (
                        format!("release the {lease} lease of {RW} {value}"),
                        release(&[key], value, RW, false),
                    )
                } else {
                    let token = self.token(rng, RW);
                    (
                        format!("fence the {lease} lease of {RW} {value} token {token}"),
                        fence_op(RW, &key, value, token),
                    )
                }
            }
            "survey" => ("survey".to_owned(), Op::Survey),
            "scan" => (
                "scan".to_owned(),
                Op::Scan {
                    cursor: 0,
                    rw: false,
                },
            ),
            "stamp" => {
                let cluster = format!("cluster{}", rng.random_range(0..3));
                let member = format!("member{}", rng.random_range(0..3));
                let record = Record::new(
                    &cluster,
                    &member,
                    std::slice::from_ref(&member),
                    &crate::core::terms(&self.config),
                );
                let bootstrap = match rng.random_range(0..3) {
                    0 => None,
                    1 => Some((
                        self.real.run_id.clone(),
                        self.epoch_id.clone().unwrap_or_default(),
                    )),
                    _ => Some((self.real.run_id.clone(), "an-older-epoch".to_owned())),
                };
                (
                    format!("stamp {cluster}/{member} bootstrap {bootstrap:?}"),
                    Op::Stamp {
                        record: Box::new(record),
                        bootstrap,
                    },
                )
            }
            _ => return Step::pause(ms(rng, &PAUSES)),
        };
        // A scan reads every key.
        let reads = (kind != "scan").then_some(names);
        Step::op(kind, label, op, reads)
    }

    /// Half the time one of `hints` (if any), else one of `pool`.
    fn hint(
        &self,
        rng: &mut StdRng,
        hints: Vec<&'static str>,
        pool: &[&'static str],
    ) -> &'static str {
        if !hints.is_empty() && rng.random_bool(0.5) {
            pick(rng, &hints)
        } else {
            pick(rng, pool)
        }
    }

    /// Four times in five one of `hints` (if any), else `otherwise`.
    fn hint_often(
        &self,
        rng: &mut StdRng,
        hints: Vec<&'static str>,
        otherwise: &'static str,
    ) -> &'static str {
        if !hints.is_empty() && rng.random_bool(0.8) {
            pick(rng, &hints)
        } else {
            otherwise
        }
    }

    /// The lease values (of [`VALUES`]: a waiter id is never one) the model's keys named
    /// after `names` hold, live or not.
    fn holders(&self, names: &[&str]) -> Vec<&'static str> {
        let held: BTreeSet<&str> = self
            .model
            .locks
            .iter()
            .filter(|(k, _)| names.iter().any(|n| k.contains(n)))
            .map(|(_, e)| &*e.value)
            .collect();
        VALUES
            .iter()
            .copied()
            .filter(|v| held.contains(v))
            .collect()
    }

    /// The waiters the model's queue of `key` holds, and the one handed the key.
    fn waiters(&self, key: &str) -> Vec<&'static str> {
        let mut known: BTreeSet<&str> = self
            .model
            .queues
            .get(key)
            .map(|q| q.scores.keys().map(|w| &**w).collect())
            .unwrap_or_default();
        known.extend(self.model.locks.get(key).map(|e| &*e.value));
        WAITERS
            .iter()
            .copied()
            .filter(|w| known.contains(w))
            .collect()
    }

    /// A fencing token for `lock`: half the time at its counter or one above.
    fn token(&self, rng: &mut StdRng, lock: &str) -> u64 {
        let counter = self.model.fences.get(&scripts::fence_key(lock)).copied();
        match counter {
            Some(c) if rng.random_bool(0.5) => c + rng.random_range(0..=1),
            _ => rng.random_range(1..=6),
        }
    }

    /// Runs one step on both sides and compares them: `Ok(false)` when the step could not
    /// be compared (it ran near an expiry, or timed out), which ends the sequence.
    async fn step(&mut self, step: &Step, stats: &mut Stats) -> Result<bool, String> {
        let Some(op) = &step.op else {
            tokio::time::sleep(step.pause).await;
            let (at, spread, keyspace) = self.real.keyspace().await;
            self.compare_keyspaces(at, spread, &keyspace, stats)?;
            *stats.by_kind.entry(step.kind).or_default() += 1;
            return Ok(true);
        };
        stats.ops += 1;
        if !step.quick {
            self.wait_clear_of_expiries(step).await;
        }
        let before = self.real.time().await;
        let reply = self.master.call(Outgoing::new(Arc::clone(op))).await;
        let after = self.real.time().await;
        if let Err(e) = &reply
            && matches!(
                e.kind(),
                MasterErrorKind::Timeout | MasterErrorKind::Io | MasterErrorKind::Down
            )
        {
            // The script may or may not have run.
            eprintln!("{TEST}: {}: {e}; sequence cut", step.label);
            return Ok(false);
        }
        // The script reads the clock (`PTTL`, `SET .. PX`) between the two readings.
        let now_us = before.midpoint(after);
        let uncertainty = now_us
            .saturating_sub(before)
            .max(after.saturating_sub(now_us));
        if !step.quick && self.near_an_expiry(step, now_us, uncertainty) {
            return Ok(false);
        }
        let (at, spread, keyspace) = if step.quick {
            (0, 0, None)
        } else {
            let (at, spread, keyspace) = self.real.keyspace().await;
            (at, spread, Some(keyspace))
        };
        let epoch = match &keyspace {
            Some(keyspace) => match keyspace.get(&cluster::record_key("")).map(|i| &i.value) {
                Some(Value::Hash(fields)) => fields.get(cluster::EPOCH_FIELD).cloned(),
                _ => None,
            },
            None => self.real.epoch().await,
        };
        let fresh_id = epoch.as_deref().map_or_else(
            || "(no epoch on the real master)".to_owned(),
            |e| epoch_id(e).to_owned(),
        );
        // The fingerprint the client sent last: a record stamped since is adopted by the
        // first script that refuses the old one, and the request sent again.
        let caller = self.view.fingerprint();
        let was = model_keyspace(&self.model);
        let answer = server::answer(
            &mut self.model,
            op,
            &caller,
            ScriptBugs::default(),
            now_us,
            || fresh_id.clone(),
        );
        for (key, item) in model_keyspace(&self.model) {
            if was.get(&key) != Some(&item) {
                // A key changed in place that kept its expiry (a queue whose expiry is
                // only raised, the cluster record with the data epoch's creation time
                // across a stamp) keeps a time an earlier step wrote: it keeps that
                // step's uncertainty too, where larger.
                let kept = match was.get(&key) {
                    Some(before) if before.expires_us == item.expires_us => {
                        self.slack.get(&key).copied().unwrap_or(0)
                    }
                    _ => 0,
                };
                self.slack.insert(key, uncertainty.max(kept));
            }
        }
        let slack = self.slack_of(step);
        let model = model_side(&answer);
        let real = real_side(&reply);
        if std::env::var_os(TRACE_ENV).is_some() {
            eprintln!(
                "{}\n  at {now_us} µs (± {uncertainty}), TIME before {before}, after {after}\n  \
                 model: {model:?}\n  real:  {real:?}",
                step.label
            );
        }
        let (model_norm, mut real_norm) = (normalise(&model), normalise(&real));
        if let (Ok(Reply::Scanned { found: None, .. }), Ok(Reply::Scanned { found: Some(k), .. })) =
            (&model, &real)
            && is_reader_index(k)
        {
            stats.excused_scans += 1;
            real_norm = model_norm.clone();
        }
        if !model_norm.agrees(&real_norm, TOLERANCE + slack + uncertainty) {
            return Err(format!(
                "{}\n  model: {model:?}\n  real:  {real:?}\n  (server time {now_us} µs, \
                 uncertainty {uncertainty} µs)",
                step.label
            ));
        }
        self.epoch_id = epoch.as_deref().map(|e| epoch_id(e).to_owned());
        if let Some(keyspace) = keyspace {
            self.compare_keyspaces(at, spread, &keyspace, stats)
                .map_err(|e| format!("after {}:\n{e}", step.label))?;
        }
        stats.compared += 1;
        *stats.by_kind.entry(step.kind).or_default() += 1;
        Ok(true)
    }

    /// Waits until no key `step` reads expires near now or within the headroom.
    async fn wait_clear_of_expiries(&self, step: &Step) {
        for _ in 0..64 {
            let now = wall_us();
            let until = model_keyspace(&self.model)
                .into_iter()
                .filter(|(key, _)| reads(step, key))
                .filter_map(|(key, item)| {
                    let guard = GUARD + self.slack.get(&key).copied().unwrap_or(0);
                    let e = item.expires_us?;
                    (e + guard >= now && e <= now + guard + HEADROOM).then_some(e + guard)
                })
                .max();
            match until {
                Some(until) => {
                    tokio::time::sleep(Duration::from_micros(until - now + 500)).await;
                }
                None => return,
            }
        }
    }

    /// Whether a key `step` reads expires within the guard of `now_us`, on the model's
    /// side (before the step).
    fn near_an_expiry(&self, step: &Step, now_us: u64, uncertainty: u64) -> bool {
        model_keyspace(&self.model).into_iter().any(|(key, item)| {
            let guard = GUARD + uncertainty + self.slack.get(&key).copied().unwrap_or(0);
            reads(step, &key) && item.expires_us.is_some_and(|e| e.abs_diff(now_us) <= guard)
        })
    }

    /// The largest uncertainty of a key `step` reads.
    fn slack_of(&self, step: &Step) -> u64 {
        self.slack
            .iter()
            .filter(|(key, _)| reads(step, key))
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(0)
    }

    /// The real keyspace, read at `at` (in `spread` µs), against the model's at that
    /// instant.
    fn compare_keyspaces(
        &mut self,
        at: u64,
        spread: u64,
        real: &Keyspace,
        stats: &mut Stats,
    ) -> Result<(), String> {
        let model = model_keyspace(&self.model);
        let keys: BTreeSet<&String> = model.keys().chain(real.keys()).collect();
        let mut differences = Vec::new();
        for key in keys {
            if !modelled(key) {
                continue;
            }
            let slack = self.slack.get(key).copied().unwrap_or(0);
            let (m, r) = (model.get(key), real.get(key));
            let near = |i: Option<&Item>| {
                i.and_then(|i| i.expires_us)
                    .is_some_and(|e| e.abs_diff(at) <= GUARD + slack + spread)
            };
            if near(m) || near(r) {
                stats.skipped_keys += 1;
                continue;
            }
            let live =
                |i: Option<&Item>| i.filter(|i| i.expires_us.is_none_or(|e| e > at)).cloned();
            let (m, r) = (live(m), live(r));
            match (&m, &r) {
                (None, None) => {}
                (Some(m), Some(r)) if agree(key, m, r, TOLERANCE + slack) => {
                    stats.compared_keys += 1;
                }
                _ => differences.push(format!(
                    "  {key}:\n    model: {}\n    real:  {}",
                    shown(m.as_ref(), at),
                    shown(r.as_ref(), at)
                )),
            }
        }
        if differences.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the keyspaces differ (read at {at} µs):\n{}",
                differences.join("\n")
            ))
        }
    }
}

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.random_range(0..from.len())]
}

fn ms(rng: &mut StdRng, from: &[u64]) -> Duration {
    Duration::from_millis(from[rng.random_range(0..from.len())])
}

/// `acquire.lua`'s op.
fn acquire(key: &str, value: &str, ttl: Duration, fence: FenceRead, owner: &Arc<Owner>) -> Op {
    Op::AcquireChecked {
        key: key.into(),
        value: value.into(),
        ttl,
        fence,
        owner: Arc::clone(owner),
    }
}

/// `acquire_queued.lua`'s op (`waiter` empty: a fair first attempt).
fn acquire_queued(
    key: &str,
    value: &str,
    ttl: Duration,
    fence: FenceRead,
    owner: &Arc<Owner>,
    waiter: &str,
    fair: bool,
) -> Op {
    Op::AcquireQueued {
        key: key.into(),
        value: value.into(),
        ttl,
        fence,
        owner: Arc::clone(owner),
        waiter: waiter.into(),
        fair,
    }
}

/// `enqueue.lua`'s op.
fn enqueue(
    key: &str,
    waiter: &str,
    score: u64,
    fair: bool,
    strict: bool,
    waiter_ttl: Duration,
) -> Op {
    Op::Enqueue {
        key: key.into(),
        waiter: waiter.into(),
        score,
        strict,
        fair,
        waiter_ttl,
        channel: scripts::handoff_channel("differential").into(),
    }
}

/// The extension of `keys` (`extend.lua` for one, `extend_many.lua` for several).
fn extend(keys: &[Arc<str>], value: &str, ttl: Duration, epoch: bool) -> Op {
    match keys {
        [key] => Op::Extend {
            key: Arc::clone(key),
            value: value.into(),
            ttl,
            epoch,
        },
        keys => Op::ExtendMany {
            keys: keys.to_vec(),
            value: value.into(),
            ttl,
            epoch,
        },
    }
}

/// The release of `keys` (`release.lua` for one, with the notice of `lock`, or of the key
/// itself when `lock` is empty, `plain` for a plain lock's lease value; `release_many.lua`
/// for several).
fn release(keys: &[Arc<str>], value: &str, lock: &str, plain: bool) -> Op {
    match keys {
        [key] => Op::Release {
            key: Arc::clone(key),
            value: value.into(),
            channel: scripts::release_channel(if lock.is_empty() { key } else { lock }).into(),
            plain,
        },
        keys => Op::ReleaseMany {
            keys: keys.to_vec(),
            value: value.into(),
            channels: keys
                .iter()
                .map(|k| scripts::release_channel(k).into())
                .collect(),
        },
    }
}

/// The fencing write-back of `token` by `value`, which holds `key`, of lock `lock`.
fn fence_op(lock: &str, key: &str, value: &str, token: u64) -> Op {
    Op::Fence {
        counter: scripts::fence_key(lock).into(),
        key: key.into(),
        value: value.into(),
        token,
    }
}

/// Whether `step` reads `key` (a key whose name holds one of its lock names).
fn reads(step: &Step, key: &str) -> bool {
    step.reads
        .as_ref()
        .is_none_or(|names| names.iter().any(|n| key.contains(n)))
}

/// The id of an epoch record `<id>:<created µs>`.
fn epoch_id(epoch: &str) -> &str {
    epoch.rsplit_once(':').map_or(epoch, |(id, _)| id)
}

/// Whether the model keeps `key` (owner records, holder records and reader indexes it
/// does not).
fn modelled(key: &str) -> bool {
    !key.starts_with("redquorum:owner:")
        && !key.starts_with("redquorum:holder:")
        && !is_reader_index(key)
}

fn is_reader_index(key: &str) -> bool {
    key.starts_with(scripts::RW_NAMESPACE) && key.ends_with(":readers")
}

/// The model's dataset as a keyspace.
fn model_keyspace(data: &Data) -> Keyspace {
    let mut keys = Keyspace::new();
    let mut put = |key: String, value: Value, expires_us: Option<u64>| {
        keys.insert(key, Item { value, expires_us });
    };
    let string = |s: &str| Value::Str(s.to_owned());
    for (key, entry) in &data.locks {
        put(
            key.to_string(),
            string(&entry.value),
            Some(entry.expires_us),
        );
    }
    for (key, counter) in &data.fences {
        put(key.clone(), Value::Str(counter.to_string()), None);
    }
    // The record's key holds the data epoch, with or without a record.
    let mut fields = BTreeMap::new();
    if let Some(record) = &data.record {
        fields.extend(record.fields().into_iter().map(|(f, v)| (f.to_owned(), v)));
        if !record.bootstrap_run_id.is_empty() {
            fields.insert("bootstrap_run_id".into(), record.bootstrap_run_id.clone());
            fields.insert("bootstrap_epoch".into(), record.bootstrap_epoch.clone());
        }
    }
    if let Some(epoch) = &data.epoch {
        fields.insert(cluster::EPOCH_FIELD.to_owned(), epoch.clone());
    }
    if !fields.is_empty() {
        put(cluster::record_key(""), Value::Hash(fields), None);
    }
    for (key, limit) in &data.limits {
        put(key.clone(), Value::Str(limit.to_string()), None);
    }
    for (key, queue) in &data.queues {
        let mut members: Vec<(u64, &str)> = queue.scores.iter().map(|(m, s)| (*s, &**m)).collect();
        members.sort_unstable();
        if !members.is_empty() {
            let members = members
                .into_iter()
                .map(|(s, m)| (m.to_owned(), s.to_string()))
                .collect();
            put(
                scripts::queue_key(key),
                Value::Zset(members),
                queue.expires_us,
            );
        }
    }
    for ((key, waiter), entry) in &data.waiters {
        put(
            scripts::waiter_key(key, waiter),
            string(&entry.value),
            Some(entry.expires_us),
        );
    }
    for (key, counter) in &data.tickets {
        put(
            scripts::ticket_key(key),
            Value::Str(counter.to_string()),
            None,
        );
    }
    keys
}

/// Whether the model's and the real master's `key` agree: values equal (a data epoch's id,
/// and its creation time to within `tolerance`), expiries to within `tolerance` (µs).
fn agree(key: &str, m: &Item, r: &Item, tolerance: u64) -> bool {
    let expiries = match (m.expires_us, r.expires_us) {
        (None, None) => true,
        (Some(a), Some(b)) => a.abs_diff(b) <= tolerance,
        _ => false,
    };
    let values = match (&m.value, &r.value) {
        (Value::Hash(a), Value::Hash(b)) if key == cluster::record_key("") => {
            let created = |e: &str| e.rsplit_once(':').and_then(|(_, c)| c.parse::<u64>().ok());
            let epochs = match (a.get(cluster::EPOCH_FIELD), b.get(cluster::EPOCH_FIELD)) {
                (None, None) => true,
                (Some(a), Some(b)) => {
                    epoch_id(a) == epoch_id(b)
                        && matches!((created(a), created(b)), (Some(x), Some(y)) if x.abs_diff(y) <= tolerance)
                }
                _ => false,
            };
            let others = |(f, _): &(&String, &String)| *f != cluster::EPOCH_FIELD;
            epochs && a.iter().filter(others).eq(b.iter().filter(others))
        }
        (a, b) => a == b,
    };
    expiries && values
}

fn shown(item: Option<&Item>, at: u64) -> String {
    match item {
        None => "missing".to_owned(),
        Some(Item {
            value,
            expires_us: None,
        }) => format!("{value:?}, no expiry"),
        Some(Item {
            value,
            expires_us: Some(e),
        }) => format!(
            "{value:?}, expires at {e} µs ({:+} ms from the reading)",
            (i128::from(*e) - i128::from(at)) / 1000
        ),
    }
}

/// The model's answer as the client would report it.
fn model_side(answer: &Answer) -> Result<Reply, String> {
    match answer {
        Answer::Reply(reply) => Ok(reply.clone()),
        Answer::LimitDiffers { stored, ours } => Err(error_shown(&scripts::limit_mismatch(
            Some(&stored.to_string()),
            *ours,
        ))),
        Answer::RecordDiffers => Err("the script's -2: the cluster record differs".to_owned()),
        other => Err(format!("{other:?}")),
    }
}

fn real_side(reply: &Result<Reply, MasterError>) -> Result<Reply, String> {
    reply.clone().map_err(|e| error_shown(&e))
}

fn error_shown(e: &MasterError) -> String {
    format!("{:?}: {e}", e.kind())
}

/// A reply with what legitimately differs taken out (see the module's docs), and its TTLs
/// (ms), compared to within a tolerance.
#[derive(Debug, Clone)]
struct Normalised {
    text: String,
    ttls: Vec<Option<u64>>,
}

impl Normalised {
    fn agrees(&self, other: &Normalised, tolerance_us: u64) -> bool {
        let tolerance = tolerance_us.div_ceil(1000);
        self.text == other.text
            && self.ttls.len() == other.ttls.len()
            && self.ttls.iter().zip(&other.ttls).all(|pair| match pair {
                (None, None) => true,
                (Some(a), Some(b)) => a.abs_diff(*b) <= tolerance,
                _ => false,
            })
    }
}

fn normalise(reply: &Result<Reply, String>) -> Normalised {
    let mut reply = match reply {
        Ok(reply) => reply.clone(),
        Err(e) => {
            return Normalised {
                text: format!("error {e}"),
                ttls: Vec::new(),
            };
        }
    };
    let millis = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap());
    let mut ttls = Vec::new();
    let epoch = |e: &mut master::EpochReport| {
        e.record = e.record.take().map(|r| epoch_id(&r).to_owned());
    };
    match &mut reply {
        Reply::Gone { epoch: e }
        | Reply::Fenced { epoch: e, .. }
        | Reply::Enqueued { epoch: e, .. } => epoch(e),
        Reply::Checked {
            epoch: e,
            holder_ttl,
            ..
        }
        | Reply::CheckedMany {
            epoch: e,
            holder_ttl,
            ..
        } => {
            epoch(e);
            ttls.push(millis(holder_ttl.take()));
        }
        Reply::Permits { epoch: e, wait, .. } => {
            epoch(e);
            ttls.push(millis(wait.take()));
        }
        Reply::Survey { run_id, .. } => run_id.clear(),
        Reply::Scanned { next, found } => {
            *next = 0;
            *found = found.as_ref().map(|_| "a lock key".to_owned());
        }
        Reply::Inspected(i) => {
            ttls.push(u64::try_from(i.pttl_ms).ok());
            i.pttl_ms = i.pttl_ms.min(0);
            i.owner.clear();
            i.now_ms = 0;
        }
        Reply::Granted
        | Reply::HandedOn { .. }
        | Reply::HeldByOther
        | Reply::Missing
        | Reply::Stamped { .. }
        | Reply::ForceUnlocked { .. } => {}
    }
    Normalised {
        text: format!("{reply:?}"),
        ttls,
    }
}
