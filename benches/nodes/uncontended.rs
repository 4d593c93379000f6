//! The uncontended scenario: one client on a fresh resource each time, with the raw
//! single-master baseline and the raw quorum fan-out (the limit) in interleaved blocks.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redquorum::Redlock;

use super::args::Budget;
use super::harness::{
    BLOCK, Keys, Outcome, Progress, RAW_VALUE, SETTLE, Series, TTL_MS, lock_block, raw_block,
    set_nx,
};
use super::model::{Metric, Results, Row, Scenario};

/// The library's compare-and-delete release script, for the raw fan-out: `release.lua`
/// with the functions it calls (`queue.lua`'s, `value.lua`'s) in front, as the library
/// joins them (`src/scripts/sources.rs`).
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(crate::sources::RELEASE_LUA));
/// The library's acquire script, for the raw fan-out of what each master runs to grant a
/// lock: the `SET NX PX` and the per-master checks around it (cluster record, data
/// epoch, kind of lock) and the client's holder record; `acquire.lua` behind the preamble
/// that every lock script starts with (`epoch.lua`, `cluster.lua`) and `holder.lua`.
static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(crate::sources::ACQUIRE_LUA));

/// The floor of a script that acquires: `SET NX PX` inside a script, and nothing else.
static SET_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new("return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")
});
/// The floor of a release: compare-and-delete, and nothing else.
static CAD_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    )
});

/// The mechanism of a guarded acquire, "one record read and one SET":
/// one `HMGET` of a master record holding the data epoch and the cluster fingerprint, the
/// fingerprint compared, then `SET NX PX`. What the per-master guarantees need at the
/// least, with no kind check and no holder record.
static GUARDED_SET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "local r = redis.call('HMGET', KEYS[1], 'epoch', 'fingerprint') \
         if (r[2] or '') ~= ARGV[3] then return {-2, r[1]} end \
         local ok = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) \
         return {ok and 1 or 0, r[1]}",
    )
});
/// The mechanism of a release that wakes waiters without polling: compare-and-delete, the
/// waiter queue's `EXISTS` and the release notice, and nothing else.
static GUARDED_RELEASE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
         redis.call('DEL', KEYS[1]) \
         if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('PUBLISH', ARGV[2], KEYS[1]) end \
         return 1",
    )
});
/// The guarded mechanisms' master record, written on every master before the run.
const GUARDED_RECORD: &str = "redquorum:bench-record";

/// `acquire.lua` of `key` with what the library sends from a client that knows no cluster
/// record, with restart quarantine off and no fencing, on a connection that knows its
/// holder record outlives the lock (the common case: the holder's fields empty). (The
/// first call on a master writes its data epoch, as the library's first acquire does.)
/// The keys are named once per round; each master is sent its own `EVALSHA`, built with its
/// own id for a data epoch (`ARGV[1]`), as the library sends every script that may start
/// one (docs/design.md §2).
fn acquire_script(key: &str) -> impl Fn(usize) -> Call {
    // The preamble's slots first (the cluster record, which holds the data epoch, the
    // epoch id, the fingerprint), then the script's own.
    let keys = [
        "redquorum:cluster".to_owned(),
        key.to_owned(),
        format!("redquorum:fence:{key}"),
        format!("redquorum:owner:{key}"),
        format!("redquorum:ticket:{key}"),
        "redquorum:holder:bench-client".to_owned(),
    ];
    move |master| {
        let epoch_id = format!("{master:016x}");
        let args = [&*epoch_id, "", RAW_VALUE, TTL_MS, "0", "", "", "", ""];
        Call::new(&ACQUIRE, &keys, &args)
    }
}

/// `release.lua` of `key` holding the raw value, as the library sends it: the lock key, its
/// waiter queue (none here: the release notice is published), its owner record (none: a
/// lock keeps none) and its ticket counter, then the value, the notice's channel, the
/// prefix of the waiters' liveness keys and the mark of a plain lock's lease value.
fn release_script(key: &str) -> Call {
    let (queue, owner) = (
        format!("redquorum:queue:{key}"),
        format!("redquorum:owner:{key}"),
    );
    let ticket = format!("redquorum:ticket:{key}");
    let (channel, waiters) = (
        format!("redquorum:released:{key}"),
        format!("redquorum:waiter:{key}:"),
    );
    Call::new(
        &RELEASE,
        &[key, &queue, &owner, &ticket],
        &[RAW_VALUE, &channel, &waiters, "1"],
    )
}

/// A raw script's `EVALSHA`, built as the library builds its requests: once per round
/// and sent to every master as it is (a script that starts no data epoch), or once per
/// master (the acquire script, see [`acquire_script`]); not rebuilt from a
/// `ScriptInvocation` on each send. A master without the script answers `NOSCRIPT`: the
/// script is loaded on that connection and the call sent again (as `invoke_async`
/// does).
#[derive(Clone)]
struct Call {
    script: &'static redis::Script,
    evalsha: Arc<redis::Cmd>,
}

impl Call {
    fn new(script: &'static redis::Script, keys: &[impl AsRef<str>], args: &[&str]) -> Self {
        let bytes: usize = keys.iter().map(|k| k.as_ref().len()).sum::<usize>()
            + args.iter().map(|a| a.len()).sum::<usize>();
        let mut evalsha = redis::Cmd::with_capacity(keys.len() + args.len() + 3, bytes + 64);
        evalsha
            .arg("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len());
        for key in keys {
            evalsha.arg(key.as_ref());
        }
        evalsha.arg(args);
        Self {
            script,
            evalsha: Arc::new(evalsha),
        }
    }

    /// The same call to every master of `conns`.
    fn to_all<T: redis::FromRedisValue>(
        &self,
        conns: &[MultiplexedConnection],
    ) -> Vec<impl Future<Output = redis::RedisResult<T>> + use<T>> {
        conns
            .iter()
            .map(|conn| self.clone().run(conn.clone()))
            .collect()
    }

    /// Runs the call on `conn`.
    async fn run<T: redis::FromRedisValue>(
        self,
        mut conn: MultiplexedConnection,
    ) -> redis::RedisResult<T> {
        match self.evalsha.query_async(&mut conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.script.load_async(&mut conn).await?;
                self.evalsha.query_async(&mut conn).await
            }
            answer => answer,
        }
    }
}

/// Awaits the calls in `pending` until `need` of them answered as `counts` accepts, then
/// drops the rest (their replies are read by each connection's driver task): `Ok` with
/// the time since `t0`, or the last refusal or error when fewer than `need` counted.
async fn until_counted<T>(
    pending: Vec<impl Future<Output = redis::RedisResult<T>>>,
    need: usize,
    t0: Instant,
    counts: impl Fn(&T) -> Result<(), String>,
) -> Result<Duration, String> {
    let mut pending: FuturesUnordered<_> = pending.into_iter().collect();
    let (mut counted, mut failed) = (0, None);
    while counted < need {
        match pending.next().await {
            Some(Ok(answer)) => match counts(&answer) {
                Ok(()) => counted += 1,
                Err(why) => failed = Some(why),
            },
            Some(Err(e)) => failed = Some(e.to_string()),
            None => break,
        }
    }
    let took = t0.elapsed();
    match counted >= need {
        true => Ok(took),
        false => Err(failed.unwrap_or_else(|| "no quorum".to_owned())),
    }
}

/// A `SET NX PX` reply (plain or from a script) that set the key.
fn set_it(answer: &Option<String>) -> Result<(), String> {
    match answer {
        Some(_) => Ok(()),
        None => Err("a fresh key was already set".to_owned()),
    }
}

/// The lock protocol's two rounds with raw commands and no lock logic at all, which is
/// what a quorum round costs with this client stack on this machine: `SET NX PX` to every
/// master at once, timed to the quorum-th grant, then the release script to every master,
/// timed to the `n - quorum + 1`-th reply (the point at which the library's release
/// returns). Replies after that are read by each connection's driver task and dropped.
async fn fan_out_block(
    conns: &[MultiplexedConnection],
    keys: &mut Keys,
    count: usize,
    set: &mut Series,
    release: &mut Series,
) {
    let n = conns.len();
    let quorum = n / 2 + 1;
    for _ in 0..count {
        let key = keys.fresh();
        let t0 = Instant::now();
        let set_cmd = Arc::new(set_nx(&key));
        let calls: Vec<_> = conns
            .iter()
            .map(|conn| {
                let (mut conn, cmd) = (conn.clone(), Arc::clone(&set_cmd));
                async move { cmd.query_async::<Option<String>>(&mut conn).await }
            })
            .collect();
        let t_set = match until_counted(calls, quorum, t0, set_it).await {
            Ok(t) => t,
            Err(e) => {
                set.error(e);
                continue;
            }
        };

        let t1 = Instant::now();
        let calls = release_script(&key).to_all::<i64>(conns);
        match until_counted(calls, n - quorum + 1, t1, |_| Ok(())).await {
            Ok(t_release) => {
                set.push(t_set);
                release.push(t_release);
                set.busy += t_set + t_release;
            }
            Err(e) => release.error(e),
        }
    }
}

/// The library's acquire script to every master at once, timed to the quorum-th grant,
/// then the release script to every master until the `n - quorum + 1`-th reply, as the
/// raw fan-out's own release (untimed): a block of its own in the rotation, so that the
/// other rows see the masters as before.
async fn script_block(
    conns: &[MultiplexedConnection],
    keys: &mut Keys,
    count: usize,
    script: &mut Series,
) {
    for _ in 0..count {
        match script_fan_out(conns, &keys.fresh()).await {
            Ok(t) => script.push(t),
            Err(e) => script.error(e),
        }
    }
}

/// The acquire script to every master at once, timed to the quorum-th grant; the replies
/// after it are read by each connection's driver task and dropped. Then the release script
/// (the key, and its queue's check) until the `n - quorum + 1`-th reply, untimed.
async fn script_fan_out(conns: &[MultiplexedConnection], key: &str) -> Result<Duration, String> {
    let n = conns.len();
    let quorum = n / 2 + 1;
    let t0 = Instant::now();
    let call = acquire_script(key);
    let mut pending: FuturesUnordered<_> = conns
        .iter()
        .enumerate()
        .map(|(master, conn)| call(master).run::<redis::Value>(conn.clone()))
        .collect();
    let mut granted = 0;
    let mut failed = None;
    while granted < quorum {
        match pending.next().await {
            Some(Ok(redis::Value::Array(answer)))
                if answer.first() == Some(&redis::Value::Int(1)) =>
            {
                granted += 1;
            }
            Some(Ok(other)) => failed = Some(format!("the acquire script refused: {other:?}")),
            Some(Err(e)) => failed = Some(e.to_string()),
            None => break,
        }
    }
    let took = t0.elapsed();
    drop(pending);
    let mut releases: FuturesUnordered<_> = release_script(key)
        .to_all::<i64>(conns)
        .into_iter()
        .collect();
    for _ in 0..n - quorum + 1 {
        if let Some(Err(e)) = releases.next().await {
            failed.get_or_insert(format!("the release after the acquire script: {e}"));
        }
    }
    match granted >= quorum {
        true => Ok(took),
        false => Err(failed.unwrap_or_else(|| "no quorum".to_owned())),
    }
}

/// A pair of raw scripts timed as an acquire and its release.
#[derive(Clone, Copy)]
enum Floor {
    /// `SET NX PX` in a script, and a bare compare-and-delete: what no script-based acquire
    /// or release can go below.
    Bare,
    /// The guarded mechanisms: one record read and `SET NX PX`; compare-and-delete with the
    /// queue's check and the notice.
    Guarded,
}

impl Floor {
    /// The acquiring script's call for `key`, whose reply's first element (or the reply
    /// itself) is the `SET`'s.
    fn set(self, key: &str) -> Call {
        match self {
            Floor::Bare => Call::new(&SET_SCRIPT, &[key], &[RAW_VALUE, TTL_MS]),
            Floor::Guarded => Call::new(
                &GUARDED_SET,
                &[GUARDED_RECORD, key],
                &[RAW_VALUE, TTL_MS, ""],
            ),
        }
    }

    /// The releasing script's call for `key`.
    fn release(self, key: &str) -> Call {
        match self {
            Floor::Bare => Call::new(&CAD_SCRIPT, &[key], &[RAW_VALUE]),
            Floor::Guarded => {
                let (queue, channel) = (
                    format!("redquorum:queue:{key}"),
                    format!("redquorum:released:{key}"),
                );
                Call::new(&GUARDED_RELEASE, &[key, &queue], &[RAW_VALUE, &channel])
            }
        }
    }
}

/// Whether an acquiring script's reply set the key: `OK`, or an array led by 1.
fn script_set(answer: &redis::Value) -> Result<(), String> {
    match answer {
        redis::Value::Okay => Ok(()),
        redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1)) => Ok(()),
        other => Err(format!("the script did not set a fresh key: {other:?}")),
    }
}

/// The raw scripts of `floor`: the acquiring one to every master at once, timed to the
/// quorum-th grant, then the releasing one to every master, timed to the
/// `n - quorum + 1`-th reply.
async fn floor_block(
    conns: &[MultiplexedConnection],
    keys: &mut Keys,
    count: usize,
    floor: Floor,
    set: &mut Series,
    cad: &mut Series,
) {
    let n = conns.len();
    let quorum = n / 2 + 1;
    for _ in 0..count {
        let key = keys.fresh();
        let t0 = Instant::now();
        let calls = floor.set(&key).to_all::<redis::Value>(conns);
        let t_set = match until_counted(calls, quorum, t0, script_set).await {
            Ok(t) => t,
            Err(e) => {
                set.error(e);
                continue;
            }
        };
        let t1 = Instant::now();
        let calls = floor.release(&key).to_all::<i64>(conns);
        match until_counted(calls, n - quorum + 1, t1, |_| Ok(())).await {
            Ok(t_cad) => {
                set.push(t_set);
                cad.push(t_cad);
            }
            Err(e) => cad.error(e),
        }
    }
}

/// Baseline, raw fan-out and the library, in interleaved blocks.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    raw: &[MultiplexedConnection],
    client: &Redlock,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let mut keys = Keys::new(&format!("u{n}"));
    let mut base_conns = raw.to_vec();
    let mut fan_script = Series::with_capacity(budget.samples);
    let mut floor_set = Series::with_capacity(budget.samples);
    let mut floor_cad = Series::with_capacity(budget.samples);
    let mut guarded_set = Series::with_capacity(budget.samples);
    let mut guarded_release = Series::with_capacity(budget.samples);
    let (mut rtt, mut raw_pairs, mut fan, mut fan_release, mut acquire, mut release) = (
        Series::with_capacity(budget.samples),
        Series::with_capacity(budget.samples),
        Series::with_capacity(budget.samples),
        Series::with_capacity(budget.samples),
        Series::with_capacity(budget.samples),
        Series::with_capacity(budget.samples),
    );

    // Warm-up: connections, the release script's first load, allocator and caches.
    {
        for conn in raw {
            let mut conn = conn.clone();
            redis::cmd("HSET")
                .arg(GUARDED_RECORD)
                .arg("epoch")
                .arg("bench-epoch:1")
                .exec_async(&mut conn)
                .await?;
        }
        let mut scratch: [Series; 11] = Default::default();
        let [a, b, c, d, e, f, g, h, i, j, k] = &mut scratch;
        raw_block(&mut base_conns, &mut keys, budget.warmup, a, b).await;
        fan_out_block(raw, &mut keys, budget.warmup, c, d).await;
        script_block(raw, &mut keys, budget.warmup, g).await;
        floor_block(raw, &mut keys, budget.warmup, Floor::Bare, h, i).await;
        floor_block(raw, &mut keys, budget.warmup, Floor::Guarded, j, k).await;
        lock_block(client, &mut keys, budget.warmup, e, f).await;
        for (s, what) in scratch.iter().zip([
            "SET",
            "DEL",
            "fan-out SET",
            "fan-out release",
            "acquire",
            "release",
            "fan-out acquire script",
            "fan-out SET script",
            "fan-out compare-and-delete",
            "fan-out guarded SET",
            "fan-out guarded release",
        ]) {
            s.warn(&format!("warm-up {what}"));
        }
    }

    let blocks = budget.samples.div_ceil(BLOCK);
    let give_up = Instant::now() + budget.series_time;
    for block in 0..blocks {
        if Instant::now() >= give_up {
            eprintln!(
                "  note: N={n} stopped after {block} of {blocks} blocks (time budget {:?})",
                budget.series_time
            );
            break;
        }
        // Rotate the order so that no kind always follows another's background work.
        for step in 0..6 {
            match (block + step) % 6 {
                0 => raw_block(&mut base_conns, &mut keys, BLOCK, &mut rtt, &mut raw_pairs).await,
                1 => fan_out_block(raw, &mut keys, BLOCK, &mut fan, &mut fan_release).await,
                2 => script_block(raw, &mut keys, BLOCK, &mut fan_script).await,
                3 => {
                    let (set, cad) = (&mut floor_set, &mut floor_cad);
                    floor_block(raw, &mut keys, BLOCK, Floor::Bare, set, cad).await;
                }
                4 => {
                    let (set, release) = (&mut guarded_set, &mut guarded_release);
                    floor_block(raw, &mut keys, BLOCK, Floor::Guarded, set, release).await;
                }
                _ => lock_block(client, &mut keys, BLOCK, &mut acquire, &mut release).await,
            }
            tokio::time::sleep(SETTLE).await;
        }
        progress.fraction((block + 1) as f64 / blocks as f64);
    }
    rtt.warn("baseline SET");
    raw_pairs.warn("baseline DEL");
    fan.warn("fan-out SET");
    fan_release.warn("fan-out release");
    fan_script.warn("fan-out acquire script");
    floor_set.warn("fan-out SET script");
    floor_cad.warn("fan-out compare-and-delete");
    guarded_set.warn("fan-out guarded SET");
    guarded_release.warn("fan-out guarded release");
    acquire.warn("acquire");
    release.warn("release");

    let q = n / 2 + 1;
    let base = Row::new(
        Scenario::Baseline,
        Metric::SetRoundTrip,
        n,
        "SET NX PX round trip",
    )
    .condition("each master in turn")
    .latency(&mut rtt.samples, rtt.errors);
    let base_pairs = Row::new(Scenario::Baseline, Metric::RawPairs, n, "SET+DEL pairs")
        .condition("1 client")
        .rate(raw_pairs.samples.len(), raw_pairs.busy, raw_pairs.errors);
    let need = n - q + 1;
    let fan_pairs = fan.samples.len();
    let fan_pair_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutPairs,
        n,
        "raw fan-out pairs",
    )
    .condition("1 client, limit")
    .rate(fan_pairs, fan.busy, fan.errors + fan_release.errors)
    .against(&base_pairs);
    let fan_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOut,
        n,
        "raw fan-out SET NX PX",
    )
    .condition(format!("{q} of {n}, limit"))
    .latency(&mut fan.samples, fan.errors)
    .against(&base);
    let fan_release_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutRelease,
        n,
        "raw fan-out release script",
    )
    .condition(format!("{need} of {n}, limit"))
    .latency(&mut fan_release.samples, fan_release.errors)
    .against(&base);
    let fan_script_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutAcquireScript,
        n,
        "raw fan-out acquire script",
    )
    .condition(format!("{q} of {n}"))
    .latency(&mut fan_script.samples, fan_script.errors)
    .against(&base)
    .referring_to(&fan_row);
    let floor_set_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutScriptFloor,
        n,
        "raw fan-out SET NX PX script",
    )
    .condition(format!("{q} of {n}, floor"))
    .latency(&mut floor_set.samples, floor_set.errors)
    .against(&base)
    .referring_to(&fan_row);
    let floor_cad_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutCad,
        n,
        "raw fan-out compare-and-delete",
    )
    .condition(format!("{need} of {n}, floor"))
    .latency(&mut floor_cad.samples, floor_cad.errors)
    .against(&base);
    let guarded_set_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutGuardedSet,
        n,
        "raw fan-out guarded SET script",
    )
    .condition(format!("{q} of {n}, mechanism"))
    .latency(&mut guarded_set.samples, guarded_set.errors)
    .against(&base)
    .referring_to(&fan_row);
    let guarded_release_row = Row::new(
        Scenario::Uncontended,
        Metric::FanOutGuardedRelease,
        n,
        "raw fan-out guarded release script",
    )
    .condition(format!("{need} of {n}, mechanism"))
    .latency(&mut guarded_release.samples, guarded_release.errors)
    .against(&base)
    .referring_to(&floor_cad_row);
    let pairs = acquire.samples.len();
    let acq = Row::new(Scenario::Uncontended, Metric::Acquire, n, "acquire")
        .condition("1 client")
        .latency(&mut acquire.samples, acquire.errors)
        .against(&base)
        .referring_to(&fan_row);
    let rel = Row::new(Scenario::Uncontended, Metric::Release, n, "release")
        .condition("1 client")
        .latency(&mut release.samples, release.errors)
        .against(&base)
        .referring_to(&floor_cad_row);
    let pair_row = Row::new(
        Scenario::Uncontended,
        Metric::Pairs,
        n,
        "acquire+release pairs",
    )
    .condition("1 client")
    .rate(pairs, acquire.busy, acquire.errors + release.errors)
    .against(&base_pairs)
    .referring_to(&fan_pair_row);
    let base_pairs = base_pairs.clone().against(&base_pairs);
    let base = base.clone().against(&base);
    results.rows.extend([
        base,
        base_pairs,
        fan_row,
        fan_script_row,
        floor_set_row,
        guarded_set_row,
        fan_release_row,
        floor_cad_row,
        guarded_release_row,
        fan_pair_row,
        acq,
        rel,
        pair_row,
    ]);
    Ok(())
}
