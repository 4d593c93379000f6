//! What the scenarios share: connections, key names, latency series, the measuring blocks
//! of raw round trips and of lock pairs, progress on stderr, and the machine's description.

use std::error::Error;
use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::{Builder, Redlock};

use super::args::{Args, Flavor};
use super::model::Machine;

pub(crate) type BoxError = Box<dyn Error + Send + Sync>;
pub(crate) type Outcome<T> = Result<T, BoxError>;

/// The TTL of every key the harness sets: far longer than any measurement needs.
const TTL: Duration = Duration::from_secs(10);
/// [`TTL`] in milliseconds, as the raw scripts are sent it.
pub(crate) const TTL_MS: &str = "10000";
const _: () = assert!(
    TTL.as_millis() == decimal(TTL_MS),
    "TTL_MS must be TTL in milliseconds"
);

/// The value of the decimal digits `s`, at compile time.
const fn decimal(s: &str) -> u128 {
    let (digits, mut i, mut value) = (s.as_bytes(), 0, 0);
    while i < digits.len() {
        assert!(digits[i].is_ascii_digit(), "not a decimal number");
        value = value * 10 + (digits[i] - b'0') as u128;
        i += 1;
    }
    value
}
/// The value of the raw baseline's keys (the library uses 32 random hex digits, too).
pub(crate) const RAW_VALUE: &str = "0123456789abcdef0123456789abcdef";
/// Interleaved measurement blocks: this many operations each.
pub(crate) const BLOCK: usize = 250;
/// The pause between two blocks, so that background work of one (replies from masters
/// after the quorum decided) does not land in the next.
pub(crate) const SETTLE: Duration = Duration::from_millis(2);

/// A client with restart quarantine off: these masters are brand new and would abstain
/// for one TTL. Its acquire runs the same acquire script (`SET NX PX` with the checks
/// around it); what the quarantine's handling of data epochs and fencing tokens add is
/// measured apart, side by side.
pub(crate) fn plain(urls: &[String]) -> Builder {
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

pub(crate) async fn connect_all(urls: &[String]) -> Outcome<Vec<MultiplexedConnection>> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        conns.push(connect(url).await?);
    }
    Ok(conns)
}

/// Fresh key names, unique in this run.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) prefix: String,
    next: usize,
}

impl Keys {
    pub(crate) fn new(scope: &str) -> Keys {
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

    pub(crate) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("{}{}", self.prefix, self.next)
    }
}

/// `SET key RAW_VALUE NX PX ttl`.
pub(crate) fn set_nx(key: &str) -> redis::Cmd {
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
pub(crate) struct Series {
    pub(crate) samples: Vec<u64>,
    pub(crate) busy: Duration,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
}

impl Series {
    pub(crate) fn with_capacity(n: usize) -> Series {
        Series {
            samples: Vec::with_capacity(n),
            ..Series::default()
        }
    }

    pub(crate) fn push(&mut self, d: Duration) {
        self.samples
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub(crate) fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    /// Says on stderr why operations failed, if any did.
    pub(crate) fn warn(&self, what: &str) {
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
pub(crate) async fn raw_block(
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

/// Acquire and release on a fresh resource each time, one after the other.
pub(crate) async fn lock_block(
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

/// Completed operations of a set of tasks in one window.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) done: usize,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
    /// Contended acquires that gave up (the wait budget ran out): not errors.
    pub(crate) gave_up: usize,
}

/// Progress on stderr: a line per step, and a percentage within a step on a terminal.
#[derive(Debug)]
pub(crate) struct Progress {
    start: Instant,
    pub(crate) step: usize,
    total: usize,
    live: bool,
}

impl Progress {
    pub(crate) fn new(total: usize) -> Progress {
        Progress {
            start: Instant::now(),
            step: 0,
            total,
            live: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn step(&mut self, what: &str) {
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

    pub(crate) fn fraction(&self, done: f64) {
        if self.live {
            eprint!("\r\x1b[K        {:>3.0}%", done * 100.0);
            let _ = std::io::stderr().flush();
        }
    }

    pub(crate) fn finish(&self) {
        if self.live {
            eprint!("\r\x1b[K");
        }
        eprintln!("[done {:>6.1}s]", self.start.elapsed().as_secs_f64());
    }
}

impl Machine {
    /// What the run is measured on, read from the system.
    pub(crate) fn probe(args: &Args) -> Machine {
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
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
