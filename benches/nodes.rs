//! What each master costs: acquire/release latency and throughput for N = 1, 3, 5, 7, 9
//! masters, measured side by side with a raw single-master baseline in the same run.
//!
//! ```text
//! cargo bench --bench nodes                          # full run (about 1.5 min on 2 cores)
//! cargo bench --bench nodes -- --quick               # about 25 s
//! cargo bench --bench nodes -- --quick --nodes 1,3   # the CI smoke (a few seconds)
//! ```
//!
//! The harness starts its own `redis-server` masters on 127.0.0.1 through the testkit (and
//! stops them when done), then for each N:
//!
//! - **baseline**: one raw `SET key value NX PX` round trip to one master (the masters in
//!   turn), and raw `SET`+`DEL` pairs per second, with the library's client stack (the
//!   `redis` crate's multiplexed connection, configured as the library configures it);
//! - **limit**: the protocol's two rounds with raw commands: `SET NX PX` to all N masters at
//!   once timed to the quorum-th grant, then the library's release script timed to the
//!   reply at which the library's release returns; what a quorum round physically costs
//!   with this client stack on this machine;
//! - **uncontended**: acquire and release latency and pairs per second from one client on a
//!   fresh resource each time;
//! - **throughput**: many tasks sharing one client, each on its own fresh resources;
//! - **guarded**: the acquire of restart quarantine and of fencing tokens against the plain
//!   acquire, on durable masters of their own (fencing needs them);
//! - **contended**: several clients taking turns on one resource (see [`Waiting`]);
//!
//! and once, with N = 5 (or the largest selected N of at least 3), **degraded**: acquire
//! latency with one master paused (`SIGSTOP`) and with one killed, in cycles with the
//! healthy cluster. Baseline, limit and library run in interleaved blocks, so all of them see
//! the same machine load. Every figure is printed absolute and as a ratio to its baseline;
//! the table, a CSV, a JSON file, an SVG plot and the README's markdown tables
//! (`tables.md`, which `scripts/bench-readme.sh` splices into the README) land in
//! `target/redquorum-bench/`.
//!
//! Every loop is bounded both by a count and by a time budget. No timing is asserted.

// A benchmark binary prints its table on stdout; its functions report failures as errors
// from `main` instead of panicking.
#![allow(clippy::print_stdout)]

#[path = "nodes/model.rs"]
mod model;
#[path = "nodes/plot.rs"]
mod plot;
#[path = "nodes/report.rs"]
mod report;

use std::error::Error;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::testkit::{Cluster, Persistence, ServerOptions};
use redquorum::{Builder, MasterOutcome, Redlock};

use model::{Machine, Metric, Results, Row, Scenario, Target};

type BoxError = Box<dyn Error + Send + Sync>;
type Outcome<T> = Result<T, BoxError>;

/// The TTL of every key the harness sets: far longer than any measurement needs.
const TTL: Duration = Duration::from_secs(10);
/// The value of the raw baseline's keys (the library uses 32 random hex digits, too).
const RAW_VALUE: &str = "0123456789abcdef0123456789abcdef";
/// Clients taking turns on one resource in the contended scenario.
const CONTENDERS: usize = 8;
/// The critical section of the contended scenario: a timer sleep (at least 1 ms).
const CRITICAL_SECTION: Duration = Duration::from_millis(1);
/// What each contended client does between two critical sections, outside the lock.
const OUTSIDE: Duration = Duration::from_millis(1);
/// The number of masters of the degraded scenario, when selected.
const DEGRADED_N: usize = 5;
/// The node counts measured unless `--nodes` says otherwise.
const ALL_NODES: [usize; 5] = [1, 3, 5, 7, 9];
/// Interleaved measurement blocks: this many operations each.
const BLOCK: usize = 250;
/// The pause between two blocks, so that background work of one (replies from masters
/// after the quorum decided) does not land in the next.
const SETTLE: Duration = Duration::from_millis(2);

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Operations run and discarded before each measurement.
    warmup: usize,
    /// Latency samples per series.
    samples: usize,
    /// The most time one latency series may take (it stops early with fewer samples).
    series_time: Duration,
    /// The length of each throughput window.
    window: Duration,
    /// The length of each contended window.
    contended_window: Duration,
    /// Tasks in the throughput scenario.
    clients: usize,
}

impl Budget {
    const FULL: Budget = Budget {
        warmup: 300,
        samples: 10_000,
        series_time: Duration::from_secs(20),
        window: Duration::from_millis(1_500),
        contended_window: Duration::from_secs(3),
        clients: 16,
    };
    const QUICK: Budget = Budget {
        warmup: 100,
        samples: 1_500,
        series_time: Duration::from_secs(4),
        window: Duration::from_millis(400),
        contended_window: Duration::from_millis(800),
        clients: 16,
    };
}

/// How the contended scenario's clients wait for the lock; every contended row is measured
/// once per variant, side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// Woken by release notices, with the default retry pause (100 ms + up to 100 ms) as
    /// the fallback.
    Notified,
    /// The same settings with notices turned off: the default retry pause alone.
    Timer,
    /// Notices off and an aggressive retry pause (2 ms + up to 2 ms): polling.
    Polling,
}

impl Waiting {
    const ALL: [Waiting; 3] = [Waiting::Notified, Waiting::Timer, Waiting::Polling];

    fn label(self) -> &'static str {
        match self {
            Waiting::Notified => "notified",
            Waiting::Timer => "timer 100ms+0-100ms",
            Waiting::Polling => "polling 2ms+0-2ms",
        }
    }

    fn configure(self, builder: Builder) -> Builder {
        match self {
            Waiting::Notified => builder.notifications(true),
            Waiting::Timer => builder.notifications(false),
            Waiting::Polling => builder
                .notifications(false)
                .retry_delay(Duration::from_millis(2))
                .retry_jitter(Duration::from_millis(2)),
        }
    }
}

/// The tokio runtime the harness runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// Two worker threads (one per core); the measuring task is spawned onto them.
    Multi,
    /// One thread for everything.
    Current,
}

/// Command-line settings.
#[derive(Debug, Clone)]
struct Args {
    quick: bool,
    nodes: Vec<usize>,
    /// The scenarios to run: uncontended (with its baselines), throughput, contended,
    /// degraded.
    only: Vec<String>,
    flavor: Flavor,
    out: PathBuf,
}

const USAGE: &str = "usage: cargo bench --bench nodes -- [--quick] [--nodes 1,3,5,7,9] \
                     [--only uncontended,throughput,guarded,contended,degraded] \
                     [--runtime multi|current] [--out DIR]";

/// The scenarios, in the order they run.
const SCENARIOS: [&str; 5] = [
    "uncontended",
    "throughput",
    "guarded",
    "contended",
    "degraded",
];

impl Args {
    fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            quick: false,
            nodes: ALL_NODES.to_vec(),
            only: SCENARIOS.iter().map(|s| (*s).to_owned()).collect(),
            flavor: Flavor::Multi,
            out: default_out_dir(),
        };
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (arg.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                // Passed by `cargo bench` to every bench binary.
                "--bench" => {}
                "--quick" => parsed.quick = true,
                "--nodes" => {
                    let list = value("--nodes")?;
                    let mut nodes = Vec::new();
                    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
                        let n: usize = part.trim().parse().map_err(|_| {
                            format!("--nodes takes numbers like 1,3,5, not {part:?}")
                        })?;
                        if !(1..=15).contains(&n) {
                            return Err(format!("--nodes: {n} is out of range 1..=15"));
                        }
                        if !nodes.contains(&n) {
                            nodes.push(n);
                        }
                    }
                    if nodes.is_empty() {
                        return Err(format!("--nodes needs at least one number\n{USAGE}"));
                    }
                    nodes.sort_unstable();
                    parsed.nodes = nodes;
                }
                "--only" => {
                    let list = value("--only")?;
                    let mut only = Vec::new();
                    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                        if !SCENARIOS.contains(&part) {
                            return Err(format!(
                                "--only takes some of {}, not {part:?}",
                                SCENARIOS.join(",")
                            ));
                        }
                        only.push(part.to_owned());
                    }
                    parsed.only = only;
                }
                "--runtime" => {
                    parsed.flavor = match value("--runtime")?.as_str() {
                        "multi" => Flavor::Multi,
                        "current" => Flavor::Current,
                        other => return Err(format!("--runtime multi|current, not {other:?}")),
                    }
                }
                "--out" => parsed.out = PathBuf::from(value("--out")?),
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        Ok(parsed)
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only.iter().any(|s| s == scenario)
    }

    fn budget(&self) -> Budget {
        if self.quick {
            Budget::QUICK
        } else {
            Budget::FULL
        }
    }

    /// The N of the degraded scenario: 5 when selected, else the largest selected N of
    /// at least 3 (so that a restricted run still exercises it), else none.
    fn degraded_n(&self) -> Option<usize> {
        if !self.runs("degraded") {
            return None;
        }
        if self.nodes.contains(&DEGRADED_N) {
            return Some(DEGRADED_N);
        }
        self.nodes.iter().copied().filter(|&n| n >= 3).max()
    }
}

/// `target/redquorum-bench` under the target directory cargo uses.
fn default_out_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { manifest.join(t) })
        .unwrap_or_else(|| manifest.join("target"));
    target.join("redquorum-bench")
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match args.flavor {
        Flavor::Multi => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
        Flavor::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // On the multi-thread runtime the measuring task runs on a worker, like the request
    // handlers of a server, rather than on the thread that called `block_on`.
    let outcome = runtime.block_on(async move {
        match tokio::spawn(run(args)).await {
            Ok(outcome) => outcome,
            Err(e) => Err(format!("the benchmark task failed: {e}").into()),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Outcome<()> {
    let budget = args.budget();
    let started = Instant::now();
    let mut machine = Machine::probe(&args);
    let degraded_n = args.degraded_n();
    let per_n = ["uncontended", "throughput", "guarded", "contended"]
        .iter()
        .filter(|s| args.runs(s))
        .count();
    let mut progress = Progress::new(args.nodes.len() * per_n + usize::from(degraded_n.is_some()));
    let mut results = Results::default();

    for &n in &args.nodes {
        if per_n == 0 {
            break;
        }
        let cluster = Cluster::start(n).await?;
        let urls = cluster.urls();
        let raw = connect_all(&urls).await?;
        let client = plain(&urls).build()?;

        if args.runs("uncontended") {
            progress.step(&format!(
                "N={n}: baseline and uncontended, {} samples each",
                budget.samples
            ));
            uncontended(&budget, n, &raw, &client, &mut results, &progress).await?;
        }
        if args.runs("throughput") {
            progress.step(&format!(
                "N={n}: throughput, {} clients, {:?} windows",
                budget.clients, budget.window
            ));
            throughput(&budget, n, &raw[0], &client, &mut results).await?;
        }
        if args.runs("guarded") {
            progress.step(&format!(
                "N={n}: quarantine and fencing against the plain acquire, durable masters, {} samples each",
                budget.samples / 2
            ));
            guarded(&budget, n, &mut results, &progress).await?;
        }
        if args.runs("contended") {
            progress.step(&format!(
                "N={n}: contended, {CONTENDERS} clients on one resource, {:?}",
                budget.contended_window
            ));
            for waiting in Waiting::ALL {
                contended(&budget, n, &urls, waiting, &mut results).await?;
            }
        }
        drop(client);
        drop(cluster);
    }
    if let Some(n) = degraded_n {
        progress.step(&format!(
            "N={n}: degraded, one master paused or killed, in cycles"
        ));
        degraded(&budget, n, &mut results, &progress).await?;
    }
    progress.finish();

    machine.load_after = load_average();
    machine.duration_s = started.elapsed().as_secs_f64();
    let targets = targets(&results);
    let table = report::table(&machine, &results, &targets, &context(&results));
    println!("\n{table}");

    std::fs::create_dir_all(&args.out)?;
    let settings = format!(
        "{budget:?}; contended: {CONTENDERS} clients, critical section {CRITICAL_SECTION:?} \
         and {OUTSIDE:?} outside the lock (timer sleeps), waiting {}; client defaults otherwise (ttl 10s, node_timeout 50ms)",
        Waiting::ALL.map(Waiting::label).join(" / ")
    );
    let tables = report::markdown(&machine, &results, &targets, &context(&results));
    let missing = report::missing_tables(&results, &tables);
    if !missing.is_empty() {
        return Err(format!("tables.md lacks the tables of {}", missing.join(", ")).into());
    }
    let files = [
        ("nodes.txt", table.clone()),
        ("tables.md", tables),
        ("nodes.csv", report::csv(&results)),
        (
            "nodes.json",
            report::json(&machine, &settings, &results, &targets)?,
        ),
    ];
    for (name, text) in files {
        std::fs::write(args.out.join(name), text)?;
    }
    let svg = args.out.join("nodes.svg");
    plot::draw(&svg, &machine, &results).map_err(|e| format!("drawing {}: {e}", svg.display()))?;
    println!(
        "wrote nodes.txt, tables.md, nodes.csv, nodes.json and nodes.svg to {}",
        args.out.display()
    );
    Ok(())
}

/// A client on the plain Redlock path (`SET NX PX`, the release script), with restart
/// quarantine off: these masters are brand new and would abstain for one TTL. What the
/// quarantine's checked acquire and fencing tokens add is measured apart, side by side.
fn plain(urls: &[String]) -> Builder {
    Redlock::builder().masters(urls).quarantine(false)
}

/// A connection to `url` configured as the library configures its own.
async fn connect(url: &str) -> Outcome<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(None);
    let client = redis::Client::open(url)?;
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

async fn connect_all(urls: &[String]) -> Outcome<Vec<MultiplexedConnection>> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        conns.push(connect(url).await?);
    }
    Ok(conns)
}

/// Fresh key names, unique in this run.
#[derive(Debug)]
struct Keys {
    prefix: String,
    next: usize,
}

impl Keys {
    fn new(scope: &str) -> Keys {
        static RUN: AtomicUsize = AtomicUsize::new(0);
        Keys {
            prefix: format!(
                "bench:{}:{}:{scope}:",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed)
            ),
            next: 0,
        }
    }

    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("{}{}", self.prefix, self.next)
    }
}

/// `SET key RAW_VALUE NX PX ttl`.
fn set_nx(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(RAW_VALUE)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64);
    cmd
}

/// Latency samples (ns) and the time they took, of one kind of operation.
#[derive(Debug, Default)]
struct Series {
    samples: Vec<u64>,
    busy: Duration,
    errors: usize,
    first_error: Option<String>,
}

impl Series {
    fn with_capacity(n: usize) -> Series {
        Series {
            samples: Vec::with_capacity(n),
            ..Series::default()
        }
    }

    fn push(&mut self, d: Duration) {
        self.samples
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    /// Says on stderr why operations failed, if any did.
    fn warn(&self, what: &str) {
        if let Some(e) = &self.first_error {
            eprintln!(
                "  warning: {} {what} operations failed; the first: {e}",
                self.errors
            );
        }
    }
}

/// Raw `SET NX PX` round trips (and the `DEL` of each key, timed as a pair), each to one
/// master, taking the masters in turn.
///
/// In turn rather than always the first: on a small VM one master's round trip depends on
/// where the scheduler placed its process relative to the client (same CPU or another,
/// which costs a cross-CPU wake-up), and cycling gives the baseline the same mix of
/// placements that the quorum rounds see.
async fn raw_block(
    conns: &mut [MultiplexedConnection],
    keys: &mut Keys,
    count: usize,
    rtt: &mut Series,
    pairs: &mut Series,
) {
    for _ in 0..count {
        let slot = keys.next % conns.len().max(1);
        let Some(conn) = conns.get_mut(slot) else {
            return;
        };
        let key = keys.fresh();
        let set = set_nx(&key);
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        let t0 = Instant::now();
        if let Err(e) = set.query_async::<Option<String>>(conn).await {
            rtt.error(e);
            continue;
        }
        let t1 = t0.elapsed();
        if let Err(e) = del.query_async::<i64>(conn).await {
            pairs.error(e);
            continue;
        }
        let t2 = t0.elapsed();
        rtt.push(t1);
        pairs.push(t2);
        pairs.busy += t2;
    }
}

/// The library's compare-and-delete release script, for the raw fan-out.
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../src/scripts/release.lua")));

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
        let channel = format!("redquorum:released:{key}");
        let t0 = Instant::now();
        let mut pending: FuturesUnordered<_> = conns
            .iter()
            .map(|conn| {
                let mut conn = conn.clone();
                let cmd = set_nx(&key);
                async move { cmd.query_async::<Option<String>>(&mut conn).await }
            })
            .collect();
        let mut granted = 0;
        let mut failed = None;
        while granted < quorum {
            match pending.next().await {
                Some(Ok(Some(_))) => granted += 1,
                Some(Ok(None)) => failed = Some("a fresh key was already set".to_owned()),
                Some(Err(e)) => failed = Some(e.to_string()),
                None => break,
            }
        }
        let t_set = t0.elapsed();
        drop(pending);
        if granted < quorum {
            set.error(failed.unwrap_or_else(|| "no quorum".to_owned()));
            continue;
        }

        let t1 = Instant::now();
        let mut pending: FuturesUnordered<_> = conns
            .iter()
            .map(|conn| {
                let mut conn = conn.clone();
                let (key, channel) = (key.clone(), channel.clone());
                async move {
                    RELEASE
                        .key(key)
                        .arg(RAW_VALUE)
                        .arg(channel)
                        .invoke_async::<i64>(&mut conn)
                        .await
                }
            })
            .collect();
        let need = n - quorum + 1;
        let mut done = 0;
        let mut failed = None;
        while done < need {
            match pending.next().await {
                Some(Ok(_)) => done += 1,
                Some(Err(e)) => failed = Some(e.to_string()),
                None => break,
            }
        }
        let t_release = t1.elapsed();
        drop(pending);
        if done < need {
            release.error(failed.unwrap_or_else(|| "no quorum".to_owned()));
            continue;
        }
        set.push(t_set);
        release.push(t_release);
        set.busy += t_set + t_release;
    }
}

/// Acquire and release on a fresh resource each time, one after the other.
async fn lock_block(
    client: &Redlock,
    keys: &mut Keys,
    count: usize,
    acquire: &mut Series,
    release: &mut Series,
) {
    for _ in 0..count {
        let resource = keys.fresh();
        let t0 = Instant::now();
        let lease = match client.acquire(&resource).await {
            Ok(lease) => lease,
            Err(e) => {
                acquire.error(e);
                continue;
            }
        };
        let a = t0.elapsed();
        let t1 = Instant::now();
        if let Err(e) = lease.release().await {
            release.error(e);
            continue;
        }
        let r = t1.elapsed();
        acquire.push(a);
        release.push(r);
        // The pair's time, kept on the acquire series for the pairs-per-second figure.
        acquire.busy += a + r;
    }
}

/// Baseline, raw fan-out and the library, in interleaved blocks.
async fn uncontended(
    budget: &Budget,
    n: usize,
    raw: &[MultiplexedConnection],
    client: &Redlock,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let mut keys = Keys::new(&format!("u{n}"));
    let mut base_conns = raw.to_vec();
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
        let mut scratch: [Series; 6] = Default::default();
        let [a, b, c, d, e, f] = &mut scratch;
        raw_block(&mut base_conns, &mut keys, budget.warmup, a, b).await;
        fan_out_block(raw, &mut keys, budget.warmup, c, d).await;
        lock_block(client, &mut keys, budget.warmup, e, f).await;
        for (s, what) in scratch.iter().zip([
            "SET",
            "DEL",
            "fan-out SET",
            "fan-out release",
            "acquire",
            "release",
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
        for step in 0..3 {
            match (block + step) % 3 {
                0 => raw_block(&mut base_conns, &mut keys, BLOCK, &mut rtt, &mut raw_pairs).await,
                1 => fan_out_block(raw, &mut keys, BLOCK, &mut fan, &mut fan_release).await,
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
        .referring_to(&fan_release_row);
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
        fan_release_row,
        fan_pair_row,
        acq,
        rel,
        pair_row,
    ]);
    Ok(())
}

/// The acquire of restart quarantine (the checked script) and of fencing (two rounds),
/// against the plain acquire, in interleaved blocks on the same masters: masters of their
/// own, durable (`appendonly yes`, `appendfsync always`), as fencing tokens require.
async fn guarded(
    budget: &Budget,
    n: usize,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let durable = ServerOptions::new().persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(n, &durable).await?;
    let urls = &cluster.urls();
    let ttl = Duration::from_secs(1);
    let plain_client = plain(urls).ttl(ttl).build()?;
    let checked = Redlock::builder().masters(urls).ttl(ttl).build()?;
    let fenced = Redlock::builder()
        .masters(urls)
        .ttl(ttl)
        .fencing(true)
        .build()?;
    let mut keys = Keys::new(&format!("g{n}"));
    // Brand-new masters abstain for one ttl_max (1 s here): wait until they vote.
    for client in [&checked, &fenced] {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            match client.try_acquire(&keys.fresh()).await {
                Ok(lease) => {
                    lease.release().await?;
                    break;
                }
                Err(e) if Instant::now() >= give_up => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    let clients = [&plain_client, &checked, &fenced];
    let mut series: [(Series, Series); 3] = Default::default();
    {
        let mut scratch: [(Series, Series); 3] = Default::default();
        for (client, (a, r)) in clients.iter().zip(scratch.iter_mut()) {
            lock_block(client, &mut keys, budget.warmup / 2, a, r).await;
        }
    }
    let samples = budget.samples / 2;
    let blocks = samples.div_ceil(BLOCK);
    let give_up = Instant::now() + budget.series_time;
    for block in 0..blocks {
        if Instant::now() >= give_up {
            break;
        }
        for step in 0..3 {
            let i = (block + step) % 3;
            let (a, r) = &mut series[i];
            lock_block(clients[i], &mut keys, BLOCK, a, r).await;
            tokio::time::sleep(SETTLE).await;
        }
        progress.fraction((block + 1) as f64 / blocks as f64);
    }
    let [(mut plain_a, _), (mut checked_a, _), (mut fenced_a, _)] = series;
    for (s, what) in [
        (&plain_a, "plain"),
        (&checked_a, "checked"),
        (&fenced_a, "fenced"),
    ] {
        s.warn(&format!("{what} acquire"));
    }
    let base = Row::new(Scenario::Guarded, Metric::Acquire, n, "acquire, plain")
        .condition("SET NX PX")
        .latency(&mut plain_a.samples, plain_a.errors);
    let checked = Row::new(
        Scenario::Guarded,
        Metric::AcquireChecked,
        n,
        "acquire, quarantine",
    )
    .condition("checked script")
    .latency(&mut checked_a.samples, checked_a.errors)
    .against(&base);
    let fenced = Row::new(
        Scenario::Guarded,
        Metric::AcquireFenced,
        n,
        "acquire, fencing",
    )
    .condition("two rounds")
    .latency(&mut fenced_a.samples, fenced_a.errors)
    .against(&base)
    .referring_to(&checked);
    let base = base.clone().against(&base);
    results.rows.extend([base, checked, fenced]);
    Ok(())
}

/// Completed operations of a set of tasks in one window.
#[derive(Debug, Default)]
struct Tally {
    done: usize,
    errors: usize,
    first_error: Option<String>,
}

/// Runs `tasks` concurrent loops of `op` for `window`, each at most `cap` times; returns the
/// operations done and the time from the start until the last task finished.
async fn window<F, Fut>(
    tasks: usize,
    window: Duration,
    cap: usize,
    op: F,
) -> Outcome<(Tally, Duration)>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let op = op.clone();
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            for i in 0..cap {
                if Instant::now() >= end {
                    break;
                }
                match op(task, i).await {
                    Ok(()) => tally.done += 1,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for handle in handles {
        let t = handle.await?;
        total.done += t.done;
        total.errors += t.errors;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    if let Some(e) = &total.first_error {
        eprintln!(
            "  warning: {} operations failed; the first: {e}",
            total.errors
        );
    }
    Ok((total, start.elapsed()))
}

/// Many tasks: raw SET+DEL on one master, then acquire+release through one shared client.
async fn throughput(
    budget: &Budget,
    n: usize,
    raw: &MultiplexedConnection,
    client: &Redlock,
    results: &mut Results,
) -> Outcome<()> {
    // Generous: the time window ends every loop long before.
    let cap = 1_000_000;
    let prefix = Arc::<str>::from(Keys::new(&format!("t{n}")).prefix);
    let raw_op = {
        let conn = raw.clone();
        let prefix = Arc::clone(&prefix);
        move |task: usize, i: usize| {
            let mut conn = conn.clone();
            let key = format!("{prefix}raw:{task}:{i}");
            async move {
                set_nx(&key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    };
    let lock_op = {
        let client = client.clone();
        let prefix = Arc::clone(&prefix);
        move |task: usize, i: usize| {
            let client = client.clone();
            let resource = format!("{prefix}lock:{task}:{i}");
            async move {
                let lease = client.acquire(&resource).await.map_err(|e| e.to_string())?;
                lease.release().await.map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    };
    let warm = budget.window / 4;
    window(budget.clients, warm, cap, raw_op.clone()).await?;
    let (raw_tally, raw_time) = window(budget.clients, budget.window, cap, raw_op).await?;
    window(budget.clients, warm, cap, lock_op.clone()).await?;
    let (lock_tally, lock_time) = window(budget.clients, budget.window, cap, lock_op).await?;

    let clients = format!("{} clients", budget.clients);
    let base = Row::new(Scenario::Baseline, Metric::RawPairsMany, n, "SET+DEL pairs")
        .condition(clients.clone())
        .rate(raw_tally.done, raw_time, raw_tally.errors);
    let row = Row::new(
        Scenario::Throughput,
        Metric::PairsMany,
        n,
        "acquire+release pairs",
    )
    .condition(clients)
    .rate(lock_tally.done, lock_time, lock_tally.errors)
    .against(&base);
    results.rows.push(base.clone().against(&base));
    results.rows.push(row);
    Ok(())
}

/// Who holds the contended lock, as the clients themselves see it.
///
/// Hand-off: from the moment a holder starts its release to the moment another client's
/// acquire returns, i.e. how long the lock stays idle while somebody waits for it.
#[derive(Debug, Default)]
struct Turns {
    /// The holder's id + 1, 0 when free.
    holder: AtomicUsize,
    /// Acquisitions that found another holder still inside: must stay 0.
    overlaps: AtomicUsize,
    /// When the last holder started to release, and who it was.
    released_at: Mutex<Option<(Instant, usize)>>,
    hand_offs: Mutex<Vec<u64>>,
    holds: Mutex<Vec<u64>>,
}

/// `CONTENDERS` clients, each with its own connections, taking turns on one resource.
async fn contended(
    budget: &Budget,
    n: usize,
    urls: &[String],
    waiting: Waiting,
    results: &mut Results,
) -> Outcome<()> {
    let resource: Arc<str> = Keys::new(&format!("c{n}")).fresh().into();
    let turns = Arc::new(Turns::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::with_capacity(CONTENDERS);
    for _ in 0..CONTENDERS {
        let builder = plain(urls)
            .retry_attempts(10_000)
            // Bounds every wait; a client that gives up tries again while the window lasts.
            .wait_timeout(Duration::from_secs(2));
        let client = waiting.configure(builder).build()?;
        // Connect before the window opens.
        let lease = client.acquire(&format!("{resource}:warm")).await?;
        lease.release().await?;
        clients.push(client);
    }

    let window = budget.contended_window;
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(CONTENDERS);
    for (id, client) in clients.into_iter().enumerate() {
        let (turns, stop, resource) =
            (Arc::clone(&turns), Arc::clone(&stop), Arc::clone(&resource));
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // Far more turns than a window allows: the clock ends the loop.
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() >= end {
                    break;
                }
                let lease = match client.acquire(&resource).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                        continue;
                    }
                };
                let got = Instant::now();
                if turns.holder.swap(id + 1, Ordering::SeqCst) != 0 {
                    turns.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let previous = turns
                    .released_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                // A hand-off passes the lock to another client; taking it back oneself
                // after the pause outside the lock is not one.
                if let Some((released, by)) = previous
                    && by != id
                {
                    push(&turns.hand_offs, got.saturating_duration_since(released));
                }
                tokio::time::sleep(CRITICAL_SECTION).await;
                push(&turns.holds, got.elapsed());
                turns.holder.store(0, Ordering::SeqCst);
                *turns
                    .released_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), id));
                match lease.release().await {
                    Ok(_) => tally.done += 1,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                    }
                }
                // Work outside the lock, so that the releaser does not always win it back.
                tokio::time::sleep(OUTSIDE).await;
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for handle in handles {
        let t = handle.await?;
        stop.store(true, Ordering::Relaxed);
        total.done += t.done;
        total.errors += t.errors;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    let elapsed = start.elapsed();
    if let Some(e) = &total.first_error {
        eprintln!(
            "  note: {} contended acquires gave up after the 2 s wait budget or failed; the first: {e}",
            total.errors
        );
    }
    let overlaps = turns.overlaps.load(Ordering::SeqCst);
    if overlaps > 0 {
        return Err(format!("mutual exclusion violated {overlaps} times at N={n}").into());
    }

    let base = results
        .find(Scenario::Baseline, Metric::SetRoundTrip, n)
        .cloned();
    let base_pairs = results
        .find(Scenario::Baseline, Metric::RawPairs, n)
        .cloned();
    let label = format!("{CONTENDERS} clients, {}", waiting.label());
    let mut sections = Row::new(
        Scenario::Contended,
        Metric::Sections,
        n,
        "critical sections",
    )
    .condition(label.clone())
    .rate(total.done, elapsed, total.errors);
    let mut hand_offs = std::mem::take(
        &mut *turns
            .hand_offs
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let mut hand_off = Row::new(
        Scenario::Contended,
        Metric::HandOff,
        n,
        "hand-off to another client",
    )
    .condition(label.clone())
    .latency(&mut hand_offs, 0);
    let mut holds =
        std::mem::take(&mut *turns.holds.lock().unwrap_or_else(PoisonError::into_inner));
    let hold = Row::new(
        Scenario::Contended,
        Metric::Hold,
        n,
        "critical section held",
    )
    .condition(format!("sleep {CRITICAL_SECTION:?}"))
    .latency(&mut holds, 0);
    if let Some(base) = &base_pairs {
        sections = sections.against(base);
    }
    if let Some(base) = &base {
        hand_off = hand_off.against(base);
    }
    results.rows.extend([sections, hand_off, hold]);
    Ok(())
}

fn push(samples: &Mutex<Vec<u64>>, d: Duration) {
    samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
}

/// Acquire latency with one master paused and with one killed, next to the healthy cluster.
///
/// The three conditions alternate in cycles (healthy, paused, healthy, killed, then the
/// killed master is restarted empty and the client reconnects), each with a block of
/// baseline round trips, so that all of them see the same machine load.
async fn degraded(
    budget: &Budget,
    n: usize,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let mut cluster = Cluster::start(n).await?;
    let urls = cluster.urls();
    // The baseline takes the masters that stay up in turn.
    let mut base_conns = connect_all(&urls[..n - 1]).await?;
    let client = plain(&urls).build()?;
    let mut keys = Keys::new(&format!("d{n}"));
    let victim = n - 1;
    let cycles = budget.samples.div_ceil(2 * BLOCK).max(1);
    // Operations discarded after each change, while the client notices it.
    let settle = (budget.warmup / 4).max(10);

    let mut scratch = (Series::default(), Series::default());
    raw_block(
        &mut base_conns,
        &mut keys,
        budget.warmup,
        &mut scratch.0,
        &mut scratch.1,
    )
    .await;
    lock_block(
        &client,
        &mut keys,
        budget.warmup,
        &mut scratch.0,
        &mut scratch.1,
    )
    .await;

    let mut rtt = Series::default();
    let mut healthy = (Series::default(), Series::default());
    let mut paused = (Series::default(), Series::default());
    let mut killed = (Series::default(), Series::default());
    let give_up = Instant::now() + budget.series_time * 2;
    for cycle in 0..cycles {
        if Instant::now() >= give_up {
            eprintln!("  note: degraded stopped after {cycle} of {cycles} cycles (time budget)");
            break;
        }
        raw_block(
            &mut base_conns,
            &mut keys,
            BLOCK / 2,
            &mut rtt,
            &mut scratch.1,
        )
        .await;
        lock_block(
            &client,
            &mut keys,
            BLOCK / 2,
            &mut healthy.0,
            &mut healthy.1,
        )
        .await;
        tokio::time::sleep(SETTLE).await;

        cluster.server_mut(victim).pause()?;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;
        lock_block(&client, &mut keys, BLOCK, &mut paused.0, &mut paused.1).await;
        cluster.server_mut(victim).resume()?;
        // The resumed master works off the requests queued while it was stopped.
        tokio::time::sleep(Duration::from_millis(20)).await;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;

        raw_block(
            &mut base_conns,
            &mut keys,
            BLOCK / 2,
            &mut rtt,
            &mut scratch.1,
        )
        .await;
        lock_block(
            &client,
            &mut keys,
            BLOCK / 2,
            &mut healthy.0,
            &mut healthy.1,
        )
        .await;
        tokio::time::sleep(SETTLE).await;

        cluster.server_mut(victim).kill()?;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;
        lock_block(&client, &mut keys, BLOCK, &mut killed.0, &mut killed.1).await;
        cluster.server_mut(victim).restart(false).await?;
        wait_all_granted(&client, &mut keys).await?;
        progress.fraction((cycle + 1) as f64 / cycles as f64);
    }

    rtt.warn("baseline SET");
    let base = Row::new(
        Scenario::Degraded,
        Metric::SetRoundTrip,
        n,
        "SET NX PX round trip",
    )
    .condition("each live one in turn")
    .latency(&mut rtt.samples, rtt.errors);
    let mut rows = Vec::new();
    let mut healthy_row = None;
    for (condition, series) in [
        ("healthy".to_owned(), &mut healthy),
        (format!("1 of {n} paused"), &mut paused),
        (format!("1 of {n} killed"), &mut killed),
    ] {
        series.0.warn(&format!("acquire ({condition})"));
        let mut row = Row::new(Scenario::Degraded, Metric::Acquire, n, "acquire")
            .condition(condition)
            .latency(&mut series.0.samples, series.0.errors)
            .against(&base);
        match &healthy_row {
            None => healthy_row = Some(row.clone()),
            Some(h) => row = row.referring_to(h),
        }
        rows.push(row);
    }
    results.rows.push(base.clone().against(&base));
    results.rows.extend(rows);
    drop(client);
    drop(cluster);
    Ok(())
}

/// Waits (at most 5 s) until no master fails an acquire any more, i.e. the client has
/// reconnected to a restarted master.
async fn wait_all_granted(client: &Redlock, keys: &mut Keys) -> Outcome<()> {
    let give_up = Instant::now() + Duration::from_secs(5);
    for _ in 0..5_000 {
        let lease = client.acquire(&keys.fresh()).await?;
        // Masters that answer after the quorum show as pending: only a failure means the
        // restarted one is not back yet.
        let all = !lease
            .masters()
            .iter()
            .any(|m| matches!(m.outcome(), MasterOutcome::Failed(_)));
        lease.release().await?;
        if all {
            return Ok(());
        }
        if Instant::now() >= give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err("the client did not reconnect to the restarted master within 5 s".into())
}

/// The goals of the issue, as ratios of this run.
fn targets(results: &Results) -> Vec<Target> {
    let mut targets = Vec::new();
    for (n, limit) in [(5, 1.3), (9, 1.6)] {
        if let Some(v) = results
            .find(Scenario::Uncontended, Metric::Acquire, n)
            .and_then(|r| r.versus.as_ref())
            .and_then(|v| v.latency)
        {
            targets.push(Target {
                goal: format!("uncontended acquire p50 at N={n} / baseline SET NX PX p50"),
                ratio: v[0],
                limit,
                at_least: false,
            });
        }
    }
    for row in results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Degraded && r.metric == Metric::Acquire)
    {
        if let Some(h) = row.reference.as_ref().and_then(|h| h.latency) {
            targets.push(Target {
                goal: format!(
                    "acquire p99 with {} / healthy N={} p99",
                    row.condition, row.n
                ),
                ratio: h[2],
                limit: 1.5,
                at_least: false,
            });
        }
    }
    for row in results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Guarded && r.metric == Metric::AcquireFenced)
    {
        // Tokens against no tokens on the same client: fencing needs restart quarantine
        // (on by default), whose checked acquire is the one without tokens. The ratio to
        // the plain `SET NX PX` acquire (quarantine off) is in the table.
        if let Some(v) = row.reference.as_ref().and_then(|v| v.latency) {
            targets.push(Target {
                goal: format!(
                    "acquire with fencing p50 at N={} / quarantine acquire p50",
                    row.n
                ),
                ratio: v[0],
                limit: 2.2,
                at_least: false,
            });
        }
    }
    for row in results.rows.iter().filter(|r| {
        r.scenario == Scenario::Contended
            && r.metric == Metric::HandOff
            && r.condition.contains(Waiting::Notified.label())
    }) {
        let base = results
            .find(Scenario::Baseline, Metric::SetRoundTrip, row.n)
            .and_then(|b| b.latency);
        if let (Some(l), Some(b)) = (row.latency, base) {
            targets.push(Target {
                goal: format!(
                    "hand-off p50 with notifications at N={} / baseline SET NX PX p50",
                    row.n
                ),
                ratio: l.p50 / b.p50,
                limit: 3.0,
                at_least: false,
            });
        }
    }
    if let Some(rate) = results
        .find(Scenario::Uncontended, Metric::Pairs, 5)
        .and_then(|r| r.versus.as_ref())
        .and_then(|v| v.rate)
    {
        targets.push(Target {
            goal: "acquire+release pairs/s at N=5 / raw SET+DEL pairs/s, one client".to_owned(),
            ratio: rate,
            limit: 0.6,
            at_least: true,
        });
    }
    targets
}

/// Ratios that explain the targets: what the machine allows (the raw fan-out against one
/// round trip) and what the library adds to it (acquire against the raw fan-out).
fn context(results: &Results) -> Vec<(String, f64)> {
    let mut lines = Vec::new();
    for n in [5, 9] {
        let p50 = |metric| {
            results
                .find(Scenario::Uncontended, metric, n)
                .and_then(|r| r.latency)
                .map(|l| l.p50)
        };
        let base = results
            .find(Scenario::Baseline, Metric::SetRoundTrip, n)
            .and_then(|r| r.latency)
            .map(|l| l.p50);
        if let (Some(fan), Some(base)) = (p50(Metric::FanOut), base) {
            lines.push((
                format!("raw fan-out quorum-th reply p50 at N={n} / baseline p50 (the limit here)"),
                fan / base,
            ));
        }
        if let (Some(acquire), Some(fan)) = (p50(Metric::Acquire), p50(Metric::FanOut)) {
            lines.push((
                format!("acquire p50 at N={n} / raw fan-out p50 (what the library adds)"),
                acquire / fan,
            ));
        }
        let rate = |scenario, metric| results.find(scenario, metric, n).and_then(|r| r.rate);
        let raw_pairs = rate(Scenario::Baseline, Metric::RawPairs);
        let fan_pairs = rate(Scenario::Uncontended, Metric::FanOutPairs);
        let pairs = rate(Scenario::Uncontended, Metric::Pairs);
        if let (Some(fan), Some(raw)) = (fan_pairs, raw_pairs) {
            lines.push((
                format!("raw fan-out pairs/s at N={n} / raw SET+DEL pairs/s (the limit here)"),
                fan / raw,
            ));
        }
        if let (Some(pairs), Some(fan)) = (pairs, fan_pairs) {
            lines.push((
                format!("acquire+release pairs/s at N={n} / raw fan-out pairs/s"),
                pairs / fan,
            ));
        }
    }
    lines
}

/// Progress on stderr: a line per step, and a percentage within a step on a terminal.
#[derive(Debug)]
struct Progress {
    start: Instant,
    step: usize,
    total: usize,
    live: bool,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            start: Instant::now(),
            step: 0,
            total,
            live: std::io::stderr().is_terminal(),
        }
    }

    fn step(&mut self, what: &str) {
        self.step += 1;
        if self.live {
            eprint!("\r\x1b[K");
        }
        eprintln!(
            "[{:>2}/{} {:>6.1}s] {what}",
            self.step,
            self.total,
            self.start.elapsed().as_secs_f64()
        );
    }

    fn fraction(&self, done: f64) {
        if self.live {
            eprint!("\r\x1b[K        {:>3.0}%", done * 100.0);
            let _ = std::io::stderr().flush();
        }
    }

    fn finish(&self) {
        if self.live {
            eprint!("\r\x1b[K");
        }
        eprintln!("[done {:>6.1}s]", self.start.elapsed().as_secs_f64());
    }
}

impl Machine {
    /// What the run is measured on, read from the system.
    fn probe(args: &Args) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let binary = std::env::var_os("REDIS_SERVER")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        let redis = std::process::Command::new(binary)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix("v=").map(str::to_owned))
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine {
            cores,
            cpu,
            kernel,
            redis,
            runtime: match args.flavor {
                Flavor::Multi => "multi-thread (2 workers)".to_owned(),
                Flavor::Current => "current-thread".to_owned(),
            },
            mode: if args.quick { "quick" } else { "full" }.to_owned(),
            load_before: load_average(),
            load_after: String::new(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            duration_s: 0.0,
        }
    }
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
