//! The contended scenario: several clients taking turns on one resource, once per way of
//! waiting for the lock and per length of the critical section, side by side.
//!
//! Each of the [`CONTENDERS`] clients has its own [`Redlock`] (its own connections) and its
//! own connection to a separate `redis-server`, the *storage*: its critical section is a
//! `GET`, a timer sleep of the hold (none for a hold of 0), and a `SET` there, so that the
//! section does real I/O as a section guarded by a lock does.
//!
//! Every window is judged against its **section-bound limit**: with the lock always
//! wanted, sections cannot follow each other faster than one per critical section plus
//! one quorum round (the grant), so the limit is `1 / (section + round)`, where the
//! section is measured here alone (the same `GET` / sleep / `SET`, without any lock; its
//! p50) and the round is the raw fan-out's quorum-th reply p50 of the same N (from the
//! uncontended scenario when it ran, measured here otherwise).

use redquorum::Retry;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::{AcquireOptions, Builder, Error, ErrorKind, MasterOutcome};
use redquorum_testkit::Cluster;

use super::args::Budget;
use super::harness::{Keys, Outcome, Series, Tally, plain, set_nx};
use super::model::{Metric, Pcts, Results, Row, Scenario};
use super::{ring, targets};

/// Clients taking turns on one resource in the contended scenario.
pub(crate) const CONTENDERS: usize = 8;
/// The timer sleeps inside the critical section, each measured in its own windows.
pub(crate) const HOLDS: [Duration; 2] = [Duration::from_millis(1), Duration::ZERO];
/// What each contended client does between two critical sections, outside the lock.
pub(crate) const OUTSIDE: Duration = Duration::from_millis(1);
/// Each waiting acquire's budget (the client's `wait_timeout`).
pub(crate) const WAIT_BUDGET: Duration = Duration::from_secs(2);
/// The window of each variant in quick mode: every variant once, briefly.
const QUICK_WINDOW: Duration = Duration::from_millis(250);
/// Samples of the section alone, and of the round trips, per measurement.
const LIMIT_SAMPLES: usize = 200;

/// How the contended scenario's clients wait for the lock; every contended row is measured
/// once per variant, side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The default: a waiter queues, and a release hands the lock to the head of the
    /// queue and wakes that waiter alone, which confirms with one round.
    HandOff,
    /// `handoff(false)`: every waiter is woken by the release notice and they race for
    /// the lock (the behaviour before hand-off).
    Herd,
    /// Hand-off with `AcquireOptions::fair(true)`: waiters served in ticket order.
    Fair,
    /// Notices and hand-off off, an aggressive retry pause (2 ms + up to 2 ms): polling.
    Polling,
}

impl Waiting {
    pub(crate) const ALL: [Waiting; 4] = [
        Waiting::HandOff,
        Waiting::Herd,
        Waiting::Fair,
        Waiting::Polling,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Waiting::HandOff => "hand-off",
            Waiting::Herd => "herd",
            Waiting::Fair => "fair",
            Waiting::Polling => "polling 2ms+0-2ms",
        }
    }

    fn configure(self, builder: Builder) -> Builder {
        match self {
            Waiting::HandOff | Waiting::Fair => {
                builder.waiting(redquorum::Waiting::new().handoff(true).notifications(true))
            }
            Waiting::Herd => {
                builder.waiting(redquorum::Waiting::new().handoff(false).notifications(true))
            }
            Waiting::Polling => builder
                .retry(
                    Retry::new()
                        .delay(Duration::from_millis(2))
                        .jitter(Duration::from_millis(2)),
                )
                .waiting(
                    redquorum::Waiting::new()
                        .handoff(false)
                        .notifications(false),
                ),
        }
    }

    fn options(self) -> AcquireOptions {
        AcquireOptions::new().fair(self == Waiting::Fair)
    }
}

/// The condition of a contended row: the hold, then the variant.
pub(crate) fn condition(hold: Duration, waiting: Waiting) -> String {
    format!("hold {} ms, {}", hold.as_millis(), waiting.label())
}

/// Who holds the contended lock, as the clients themselves see it.
///
/// Hand-off: from the moment a holder starts its release to the moment another client's
/// acquire returns, i.e. how long the lock stays idle while somebody waits for it.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// The holder's id + 1, 0 when free.
    pub(crate) holder: AtomicUsize,
    /// Acquisitions that found another holder still inside: must stay 0.
    pub(crate) overlaps: AtomicUsize,
    /// When the last holder started to release, and who it was.
    pub(crate) released_at: Mutex<Option<(Instant, usize)>>,
    pub(crate) hand_offs: Mutex<Vec<u64>>,
    pub(crate) holds: Mutex<Vec<u64>>,
    pub(crate) waits: Mutex<Vec<u64>>,
    /// The raw ring's tickets: each client's place when it joins the queue again.
    pub(crate) tickets: std::sync::atomic::AtomicU64,
}

/// What one window measured, the library's or a raw ring's.
pub(crate) struct Window {
    pub(crate) tally: Tally,
    pub(crate) elapsed: Duration,
    pub(crate) turns: Arc<Turns>,
    /// The CPU used so far when the window's clock started (its clients connected) and
    /// when it stopped: what its sections cost, without the connecting.
    pub(crate) cpu: (Cpu, Cpu),
}

/// The CPU the masters and this process have used so far ([`masters_cpu`],
/// [`process_cpu`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cpu {
    masters: Option<[f64; 3]>,
    process: Option<[f64; 2]>,
}

impl Cpu {
    /// Now, for the masters behind `raw` and this process, at a window's start: the
    /// process is read after the masters, so that the reads are not counted in the window.
    pub(crate) async fn before(raw: &[MultiplexedConnection]) -> Self {
        let masters = masters_cpu(raw).await;
        Self {
            masters,
            process: process_cpu(),
        }
    }

    /// Now, at a window's end: the process is read before the masters, for the same
    /// reason.
    pub(crate) async fn after(raw: &[MultiplexedConnection]) -> Self {
        let process = process_cpu();
        Self {
            masters: masters_cpu(raw).await,
            process,
        }
    }
}

impl Window {
    /// Sections per second.
    fn rate(&self) -> f64 {
        self.tally.done as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// How many times, in a full run at the N the targets judge, each raw ring and the
/// library's hand-off run at each hold, interleaved: one window each in turn, so that
/// the machine's drift during the run falls on all of them alike. Each row shows the
/// window of the median sections/s of its repeats.
const REPEATS: usize = 3;

/// The window of median sections/s among `runs` (the lower middle of an even count),
/// among those without errors if any has none. The give-ups of the others are added to
/// its tally (the goals count every give-up of the run), and with `count_errors` (the
/// library's windows) their errors too; a raw ring's repeat that stopped on an error is
/// only noted, as every other repeat with errors or give-ups is, on stderr as `label`'s.
fn median(mut runs: Vec<Window>, label: &str, count_errors: bool) -> Option<Window> {
    let any_clean = runs.iter().any(|r| r.tally.errors == 0);
    runs.sort_by(|a, b| {
        // Windows with errors last when any has none; then by sections/s.
        (any_clean && a.tally.errors > 0)
            .cmp(&(any_clean && b.tally.errors > 0))
            .then(a.rate().total_cmp(&b.rate()))
    });
    let clean = match any_clean {
        true => runs.iter().filter(|r| r.tally.errors == 0).count(),
        false => runs.len(),
    };
    let middle = clean.checked_sub(1)? / 2;
    let mut chosen = runs.remove(middle);
    for other in runs {
        if other.tally.errors > 0 || other.tally.gave_up > 0 {
            eprintln!(
                "  note: {label}: a repeat not shown had {} errors and {} give-ups{}",
                other.tally.errors,
                other.tally.gave_up,
                other
                    .tally
                    .first_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" (the first error: {e})")),
            );
        }
        chosen.tally.gave_up += other.tally.gave_up;
        if count_errors {
            chosen.tally.errors += other.tally.errors;
        }
    }
    Some(chosen)
}

/// What the windows of one N are judged against: the round trips and the section alone.
struct Limits {
    /// One `SET NX PX` to one master, p50 (the row, for ratios).
    rtt: Row,
    /// The raw fan-out's quorum-th reply p50, µs.
    round_us: f64,
    /// Where `round_us` comes from, in words.
    round_from: &'static str,
}

/// Every variant and hold of the contended scenario at one N, against a storage server of
/// its own (started and stopped here).
pub(crate) async fn run(
    budget: &Budget,
    quick: bool,
    n: usize,
    urls: &[String],
    raw: &[MultiplexedConnection],
    results: &mut Results,
) -> Outcome<()> {
    let storage = Cluster::start(1).await?;
    let storage_url = storage
        .urls()
        .into_iter()
        .next()
        .ok_or("no storage server")?;
    let limits = limits(n, raw, results).await?;
    let plan: Vec<(Duration, Waiting)> = match quick {
        // Every variant once with the 1 ms hold, and hand-off with none.
        true => Waiting::ALL
            .iter()
            .map(|&w| (HOLDS[0], w))
            .chain([(HOLDS[1], Waiting::HandOff)])
            .collect(),
        false => HOLDS
            .iter()
            .flat_map(|&hold| Waiting::ALL.iter().map(move |&w| (hold, w)))
            .collect(),
    };
    let window = match quick {
        true => QUICK_WINDOW,
        false => budget.contended_window,
    };
    // One limit per hold: the section alone does not depend on the variant.
    let mut limit_rows: Vec<(Duration, Row)> = Vec::new();
    for hold in HOLDS {
        if !plan.iter().any(|(h, _)| *h == hold) {
            continue;
        }
        let section_us = section_alone(&storage_url, hold).await?;
        let limit = Row {
            rate: Some(1e6 / (section_us + limits.round_us)),
            ..Row::new(
                Scenario::Contended,
                Metric::SectionLimit,
                n,
                "section-bound limit",
            )
            .condition(format!(
                "hold {} ms: 1 / (section {section_us:.0} us + round {:.0} us, {})",
                hold.as_millis(),
                limits.round_us,
                limits.round_from
            ))
        };
        limit_rows.push((hold, limit));
    }
    // Per hold, the mechanisms with raw commands and the library's hand-off, repeated and
    // interleaved where the targets judge them (`REPEATS`): today's confirm ring, which
    // the library's rows are held against, the same ring with the library's scripts, and
    // the direct-grant ring. Then the library's other ways of waiting, once each.
    let repeats = match quick || n != targets::CONTENDED_N {
        true => 1,
        false => REPEATS,
    };
    let mut library_rows = Vec::new();
    for (hold, limit) in &limit_rows {
        let hold = *hold;
        let mut ring_runs: Vec<Vec<Window>> = ring::Mode::ALL.iter().map(|_| Vec::new()).collect();
        let mut hand_off_runs = Vec::new();
        for _ in 0..repeats {
            for (mode, runs) in ring::Mode::ALL.iter().zip(ring_runs.iter_mut()) {
                let ring = ring::window(*mode, (urls, raw), &storage_url, hold, window).await?;
                cpu_per_section((n, hold, mode.label()), &ring);
                runs.push(ring);
            }
            if plan.contains(&(hold, Waiting::HandOff)) {
                let measured = library_window(
                    (n, urls, &storage_url),
                    (hold, Waiting::HandOff, window),
                    raw,
                )
                .await?;
                hand_off_runs.push(measured);
            }
        }
        let mut mechanism = None;
        for (mode, runs) in ring::Mode::ALL.iter().zip(ring_runs) {
            let Some(ring) = median(
                runs,
                &format!("N={n}, hold {} ms, {}", hold.as_millis(), mode.label()),
                false,
            ) else {
                continue;
            };
            let [sections, hand_off, held] = ring_rows(n, hold, *mode, &ring, (limit, &limits.rtt));
            if *mode == ring::Mode::Confirm {
                mechanism = Some(Mechanism {
                    sections: sections.clone(),
                    hand_off: hand_off.clone(),
                });
            }
            results.rows.extend([sections, hand_off, held]);
        }
        let Some(mechanism) = mechanism else {
            continue;
        };
        let against = (limit, &limits.rtt, &mechanism);
        let label = format!("N={n}, {}", condition(hold, Waiting::HandOff));
        if let Some(measured) = median(hand_off_runs, &label, true) {
            library_rows.extend(window_rows(n, (hold, Waiting::HandOff), &measured, against));
        }
        for (_, waiting) in plan
            .iter()
            .filter(|(h, w)| *h == hold && *w != Waiting::HandOff)
        {
            let measured =
                library_window((n, urls, &storage_url), (hold, *waiting, window), raw).await?;
            library_rows.extend(window_rows(n, (hold, *waiting), &measured, against));
        }
    }
    results.rows.extend(library_rows);
    if limits.rtt.scenario == Scenario::Contended {
        results.rows.push(limits.rtt.clone());
    }
    results
        .rows
        .extend(limit_rows.into_iter().map(|(_, row)| row));
    drop(storage);
    Ok(())
}

/// What the masters behind `raw` have done so far: seconds of CPU (`INFO cpu`, user and
/// system), and from `INFO commandstats` the microseconds spent running scripts and the
/// commands run (scripts' own commands included), or `None` when one does not say.
async fn masters_cpu(raw: &[MultiplexedConnection]) -> Option<[f64; 3]> {
    let mut total = [0.0; 3];
    for conn in raw {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut conn.clone())
            .await
            .ok()?;
        for line in info.lines() {
            if let Some(("used_cpu_sys" | "used_cpu_user", v)) = line.trim().split_once(':') {
                total[0] += v.parse::<f64>().ok()?;
            }
        }
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn.clone())
            .await
            .ok()?;
        for line in stats.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            for field in fields.split(',') {
                match field.split_once('=') {
                    Some(("calls", v)) => total[2] += v.parse::<f64>().ok()?,
                    Some(("usec", v)) if name.starts_with("eval") => {
                        total[1] += v.parse::<f64>().ok()?;
                    }
                    _ => {}
                }
            }
        }
    }
    Some(total)
}

/// Seconds of CPU this process has used (user and system, from `/proc/self/stat` in
/// clock ticks of 10 ms), or `None` off Linux.
fn process_cpu() -> Option<[f64; 2]> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses: utime and stime are
    // the 14th and 15th fields of the line, the 12th and 13th after it.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some([user / 100.0, system / 100.0])
}

/// Where a ring's or a library variant's time goes on this machine: the CPU its masters
/// and its clients spent per critical section while its clock ran (its clients'
/// connecting excluded), printed beside the tables (the machine is shared by both, so a
/// mechanism that moves work between rounds without removing it gains latency but not
/// sections per second once the cores are busy).
fn cpu_per_section((n, hold, label): (usize, Duration, &str), window: &Window) {
    let (done, elapsed) = (window.tally.done, window.elapsed);
    let (before, after) = window.cpu;
    let (masters_before, masters_after) = (before.masters, after.masters);
    let (process_before, process_after) = (before.process, after.process);
    let sections = done.max(1) as f64;
    let per = |before: Option<f64>, after: Option<f64>, scale: f64| match (before, after) {
        (Some(b), Some(a)) => format!("{:.0}", (a - b) * scale / sections),
        _ => "-".to_owned(),
    };
    let master = |i: usize| (masters_before.map(|m| m[i]), masters_after.map(|m| m[i]));
    let ((cpu_b, cpu_a), (scripts_b, scripts_a), (calls_b, calls_a)) =
        (master(0), master(1), master(2));
    let client = |i: usize| (process_before.map(|c| c[i]), process_after.map(|c| c[i]));
    let ((user_b, user_a), (system_b, system_a)) = (client(0), client(1));
    let total = |c: Option<[f64; 2]>| c.map(|c| c[0] + c[1]);
    eprintln!(
        "  cpu: N={n}, hold {} ms, {label}: {done} sections in {:.1} s; per section, masters {} us \
         ({} us in scripts, {} commands) and clients {} us ({} us user, {} us system)",
        hold.as_millis(),
        elapsed.as_secs_f64(),
        per(cpu_b, cpu_a, 1e6),
        per(scripts_b, scripts_a, 1.0),
        per(calls_b, calls_a, 1.0),
        per(total(process_before), total(process_after), 1e6),
        per(user_b, user_a, 1e6),
        per(system_b, system_a, 1e6),
    );
}

/// The round trip and the quorum round of N masters: the uncontended scenario's rows when
/// it ran in this N's section, else measured here with the same raw commands.
async fn limits(n: usize, raw: &[MultiplexedConnection], results: &Results) -> Outcome<Limits> {
    let rtt = results.find(Scenario::Baseline, Metric::SetRoundTrip, n);
    let fan = results
        .find(Scenario::Uncontended, Metric::FanOut, n)
        .and_then(|r| r.latency);
    if let (Some(rtt), Some(fan)) = (rtt, fan) {
        return Ok(Limits {
            rtt: rtt.clone(),
            round_us: fan.p50,
            round_from: "raw fan-out of the uncontended scenario",
        });
    }
    let mut keys = Keys::new(&format!("cl{n}"));
    let (mut one, mut fan) = (
        Series::with_capacity(LIMIT_SAMPLES),
        Series::with_capacity(LIMIT_SAMPLES),
    );
    let quorum = n / 2 + 1;
    for i in 0..LIMIT_SAMPLES {
        let mut conn = raw[i % raw.len()].clone();
        let t0 = Instant::now();
        let _: Option<String> = set_nx(&keys.fresh()).query_async(&mut conn).await?;
        one.push(t0.elapsed());

        let key = keys.fresh();
        let t0 = Instant::now();
        // Built once for every master, as the raw fan-out of the uncontended scenario.
        let set = Arc::new(set_nx(&key));
        let mut pending: futures::stream::FuturesUnordered<_> = raw
            .iter()
            .map(|conn| {
                let (mut conn, cmd) = (conn.clone(), Arc::clone(&set));
                async move { cmd.query_async::<Option<String>>(&mut conn).await }
            })
            .collect();
        let mut granted = 0;
        while granted < quorum {
            match futures::StreamExt::next(&mut pending).await {
                Some(Ok(Some(_))) => granted += 1,
                Some(Ok(None)) => return Err("a fresh key was already set".into()),
                Some(Err(e)) => return Err(e.into()),
                None => break,
            }
        }
        fan.push(t0.elapsed());
    }
    let rtt = Row::new(
        Scenario::Contended,
        Metric::SetRoundTrip,
        n,
        "SET NX PX round trip",
    )
    .condition("each master in turn, for the contended ratios")
    .latency(&mut one.samples, one.errors);
    let round_us = Pcts::of(&mut fan.samples)
        .map(|p| p.p50)
        .ok_or("no raw fan-out sample")?;
    Ok(Limits {
        rtt,
        round_us,
        round_from: "raw fan-out measured for the contended scenario",
    })
}

/// The critical section of `hold` without any lock, p50 in µs: what the section itself
/// costs (its two round trips to the storage server and its sleep).
async fn section_alone(storage_url: &str, hold: Duration) -> Outcome<f64> {
    let mut conn = redis::Client::open(storage_url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut samples = Vec::with_capacity(LIMIT_SAMPLES);
    for i in 0..LIMIT_SAMPLES {
        let t0 = Instant::now();
        section(&mut conn, "section-alone", i, hold).await?;
        samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    Ok(Pcts::of(&mut samples)
        .map(|p| p.p50)
        .ok_or("no section sample")?)
}

/// One critical section: read the guarded record, hold, write it back.
pub(crate) async fn section(
    conn: &mut MultiplexedConnection,
    record: &str,
    turn: usize,
    hold: Duration,
) -> redis::RedisResult<()> {
    let _: Option<String> = redis::cmd("GET").arg(record).query_async(conn).await?;
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    redis::cmd("SET")
        .arg(record)
        .arg(turn)
        .query_async::<()>(conn)
        .await
}

/// The raw hand-off ring's rows of one hold, for the library's rows to compare with.
struct Mechanism {
    sections: Row,
    hand_off: Row,
}

/// The rows of one window of the raw hand-off ring, labelled as a way of waiting: its
/// sections against the section-bound limit, its hand-off against the round trip, and
/// how long it held. A ring that stopped on an error has rows without figures, so that no
/// ratio is taken to it.
fn ring_rows(
    n: usize,
    hold: Duration,
    mode: ring::Mode,
    ring: &Window,
    (limit, rtt): (&Row, &Row),
) -> [Row; 3] {
    let label = format!("hold {} ms, {}", hold.as_millis(), mode.label());
    let broken = ring.tally.errors > 0;
    if let Some(e) = &ring.tally.first_error {
        eprintln!(
            "  note: N={n}, {label}: the ring stopped on an error, its rows are left without \
             figures: {e}"
        );
    }
    let take = |samples: &Mutex<Vec<u64>>| match broken {
        true => Vec::new(),
        false => std::mem::take(&mut *samples.lock().unwrap_or_else(PoisonError::into_inner)),
    };
    let done = if broken { 0 } else { ring.tally.done };
    [
        Row::new(
            Scenario::Contended,
            Metric::Sections,
            n,
            "critical sections",
        )
        .condition(format!("{CONTENDERS} clients, {label}"))
        .rate(done, ring.elapsed, ring.tally.errors)
        .referring_to(limit),
        Row::new(
            Scenario::Contended,
            Metric::HandOff,
            n,
            "hand-off to another client",
        )
        .condition(label.clone())
        .latency(&mut take(&ring.turns.hand_offs), 0)
        .against(rtt),
        Row::new(
            Scenario::Contended,
            Metric::Hold,
            n,
            "critical section held",
        )
        .condition(label)
        .latency(&mut take(&ring.turns.holds), 0),
    ]
}

/// One window of the library: `CONTENDERS` clients, each with its own connections, taking
/// turns on one resource for `window`; its CPU line is printed as it ends.
async fn library_window(
    (n, urls, storage_url): (usize, &[String], &str),
    (hold, waiting, window): (Duration, Waiting, Duration),
    raw: &[MultiplexedConnection],
) -> Outcome<Window> {
    let resource: Arc<str> = Keys::new(&format!("c{n}")).fresh().into();
    let record: Arc<str> = format!("{resource}:record").into();
    let turns = Arc::new(Turns::default());
    let stop = Arc::new(AtomicBool::new(false));
    let options = waiting.options();
    let mut clients = Vec::with_capacity(CONTENDERS);
    for _ in 0..CONTENDERS {
        let builder = plain(urls)
            // Bounds every wait; a client that gives up tries again while the window lasts.
            .retry(Retry::new().attempts(10_000).wait(WAIT_BUDGET));
        let client = waiting.configure(builder).build()?;
        // Connect (and subscribe) before the window opens.
        let lease = client
            .acquire_with(&format!("{resource}:warm"), &options)
            .await?;
        lease.release().await?;
        let conn = redis::Client::open(storage_url)?
            .get_multiplexed_async_connection()
            .await?;
        clients.push((client, conn));
    }

    let before = Cpu::before(raw).await;
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(CONTENDERS);
    for (id, (client, mut conn)) in clients.into_iter().enumerate() {
        let (turns, stop, resource, record, options) = (
            Arc::clone(&turns),
            Arc::clone(&stop),
            Arc::clone(&resource),
            Arc::clone(&record),
            options.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // Far more turns than a window allows: the clock ends the loop.
            for turn in 0..100_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() >= end {
                    break;
                }
                let asked = Instant::now();
                let lease = match client.acquire_with(&resource, &options).await {
                    Ok(lease) => lease,
                    Err(e) if gave_up(&e) => {
                        tally.gave_up += 1;
                        continue;
                    }
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                        continue;
                    }
                };
                let got = Instant::now();
                push(&turns.waits, got - asked);
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
                let done = section(&mut conn, &record, turn, hold).await;
                push(&turns.holds, got.elapsed());
                turns.holder.store(0, Ordering::SeqCst);
                *turns
                    .released_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), id));
                match (lease.release().await, done) {
                    (Ok(_), Ok(())) => tally.done += 1,
                    (Err(e), _) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                    }
                    (_, Err(e)) => {
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
        total.gave_up += t.gave_up;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    let elapsed = start.elapsed();
    let after = Cpu::after(raw).await;
    let label = condition(hold, waiting);
    if total.gave_up > 0 {
        eprintln!(
            "  note: N={n}, {label}: {} contended acquires gave up after the {WAIT_BUDGET:?} \
             wait budget",
            total.gave_up
        );
    }
    if let Some(e) = &total.first_error {
        eprintln!(
            "  warning: N={n}, {label}: {} operations failed; the first: {e}",
            total.errors
        );
    }
    let overlaps = turns.overlaps.load(Ordering::SeqCst);
    if overlaps > 0 {
        return Err(format!("mutual exclusion violated {overlaps} times at N={n}, {label}").into());
    }
    let measured = Window {
        tally: total,
        elapsed,
        turns,
        cpu: (before, after),
    };
    cpu_per_section((n, hold, &format!("{waiting:?}")), &measured);
    Ok(measured)
}

/// The rows of one window of the library: its sections against the raw ring's and the
/// section-bound limit, its hand-off against the round trip and the ring's, its waits,
/// and how long it held.
fn window_rows(
    n: usize,
    (hold, waiting): (Duration, Waiting),
    measured: &Window,
    (limit, rtt, mechanism): (&Row, &Row, &Mechanism),
) -> [Row; 4] {
    let label = condition(hold, waiting);
    let (total, elapsed, turns) = (&measured.tally, measured.elapsed, &measured.turns);
    let take = |samples: &Mutex<Vec<u64>>| {
        std::mem::take(&mut *samples.lock().unwrap_or_else(PoisonError::into_inner))
    };
    let sections = Row::new(
        Scenario::Contended,
        Metric::Sections,
        n,
        "critical sections",
    )
    .condition(format!("{CONTENDERS} clients, {label}"))
    .rate(total.done, elapsed, total.errors)
    .gave_up(total.gave_up)
    .against(&mechanism.sections)
    .referring_to(limit);
    let hand_off = Row::new(
        Scenario::Contended,
        Metric::HandOff,
        n,
        "hand-off to another client",
    )
    .condition(label.clone())
    .latency(&mut take(&turns.hand_offs), 0)
    .against(rtt)
    .referring_to(&mechanism.hand_off);
    let wait = Row::new(Scenario::Contended, Metric::Wait, n, "wait for the lock")
        .condition(label.clone())
        .latency(&mut take(&turns.waits), total.errors)
        .gave_up(total.gave_up)
        .against(rtt);
    let held = Row::new(
        Scenario::Contended,
        Metric::Hold,
        n,
        "critical section held",
    )
    .condition(label)
    .latency(&mut take(&turns.holds), 0);
    [sections, hand_off, wait, held]
}

/// Whether a contended acquire gave up rather than failed: its wait budget (or its
/// attempts) ran out while another client held the lock (a master said so in the last
/// round) or while the last round was still running. Masters that failed, with none
/// holding the lock, are a failure.
fn gave_up(e: &Error) -> bool {
    let outcome = |f: fn(&MasterOutcome) -> bool| e.masters().iter().any(|m| f(m.outcome()));
    matches!(e.kind(), ErrorKind::WaitTimeout | ErrorKind::Contended)
        && (outcome(|o| matches!(o, MasterOutcome::HeldByOther))
            || !outcome(|o| matches!(o, MasterOutcome::Failed(_))))
}

pub(crate) fn push(samples: &Mutex<Vec<u64>>, d: Duration) {
    samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
}
