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
//!   fresh resource each time, and the raw fan-out of the library's own acquire script (the
//!   `SET NX PX` with the checks around it: what the script costs, on the masters and on
//!   the wire);
//! - **throughput**: many tasks sharing one client, each on its own fresh resources;
//! - **guarded**: the acquire of restart quarantine and of fencing tokens against the plain
//!   acquire, on durable masters of their own (fencing needs them);
//! - **contended**: 8 clients taking turns on one resource, each critical section a `GET`,
//!   a sleep of 1 ms or none, and a `SET` on a storage server of its own; waiting by
//!   hand-off (the default), as a herd (`handoff(false)`), fair, and polling (see
//!   [`Waiting`]); sections per second against the section-bound limit
//!   `1 / (section alone + raw fan-out round)`, hand-off and wait latency, and give-ups;
//!   beside them, the **raw hand-off ring** (`ring.rs`): the hand-off mechanism with raw
//!   commands and the smallest scripts, no library, the next waiter always ready, the same
//!   sections and clocks;
//! - at N = 5, the **semaphore**'s acquire and release of 1 and 2 permits beside the
//!   lock's (`semaphore.rs`, printed after the table);
//! - at N = 5, with uncontended: the **read-write lock**'s read and write acquire and
//!   release beside the mutex's, printed and written to `rwlock.txt`;
//! - at N = 5, with uncontended: **re-entry** (`Lease::reenter`, no round trip) beside
//!   acquire, printed and written to `reenter.txt`;
//!
//! and once, with N = 5 (or the largest selected N of at least 3), **degraded**: acquire
//! latency with one master paused (`SIGSTOP`) and with one killed, in cycles with the
//! healthy cluster; and **family**: acquire and release latency of each type of the lock
//! family (`acquire_many` of 2 and of 8 resources) against the mutex, in interleaved
//! blocks. Baseline, limit and library run in interleaved blocks, so all of them see
//! the same machine load. Every figure is printed absolute and as a ratio to its baseline;
//! the table, a CSV, a JSON file, an SVG plot and the markdown tables (`tables.md`, which
//! `scripts/bench-readme.sh` splices into `docs/benchmarks.md`, and its latency table into
//! the README) land in `target/redquorum-bench/`.
//!
//! Every loop is bounded both by a count and by a time budget. No timing is asserted, but
//! a run fails (after writing its files) when a measured row had more than 1 % of its
//! operations fail, naming each such row: its figures would describe a broken run.
//! Contended acquires that give up when their wait budget runs out are counted apart
//! (`gave up`), not as failures.
//!
//! This file parses the flags and runs the scenarios; under `nodes/`, `args.rs` holds the
//! flags and the budget, one module per scenario measures it (`uncontended.rs`,
//! `throughput.rs`, `guarded.rs`, `contended.rs` with `ring.rs`, `degraded.rs`,
//! `family.rs`) with the helpers they share in `harness.rs`, `targets.rs` judges the run, `model.rs` holds its figures, and
//! `report.rs` and `plot.rs` write them out.

// A benchmark binary prints its table on stdout; its functions report failures as errors
// from `main` instead of panicking.
#![allow(clippy::print_stdout)]

#[path = "nodes/args.rs"]
mod args;
#[path = "nodes/contended.rs"]
mod contended;
#[path = "nodes/degraded.rs"]
mod degraded;
#[path = "nodes/family.rs"]
mod family;
#[path = "nodes/guarded.rs"]
mod guarded;
#[path = "nodes/harness.rs"]
mod harness;
#[path = "nodes/model.rs"]
mod model;
#[path = "nodes/plot.rs"]
mod plot;
#[path = "nodes/reenter.rs"]
mod reenter;
#[path = "nodes/report.rs"]
mod report;
#[path = "nodes/ring.rs"]
mod ring;
#[path = "nodes/rwlock.rs"]
mod rwlock;
#[path = "nodes/semaphore.rs"]
mod semaphore;
/// The library's scripts as it joins them, for the raw fan-outs and rings that run them.
// The benches run only some of them.
#[allow(dead_code)]
#[path = "../src/scripts/sources.rs"]
mod sources;
#[path = "nodes/targets.rs"]
mod targets;
#[path = "nodes/throughput.rs"]
mod throughput;
#[path = "nodes/uncontended.rs"]
mod uncontended;

use std::process::ExitCode;
use std::time::Instant;

use redquorum_testkit::Cluster;

use args::{Args, Flavor};
use contended::{CONTENDERS, HOLDS, OUTSIDE, WAIT_BUDGET, Waiting};
use harness::{Outcome, Progress, connect_all, load_average, plain};
use model::{Machine, Results};

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
    let family_n = args.family_n();
    let mut progress = Progress::new(
        args.nodes.len() * per_n
            + usize::from(degraded_n.is_some())
            + usize::from(family_n.is_some()),
    );
    // The read-write lock beside the mutex, at N = 5 (docs/design.md §16).
    let mut rw: Vec<String> = Vec::new();
    let mut results = Results::default();
    let mut family = String::new();
    // Re-entry beside acquire, at N = 5 (docs/design.md §14).
    let mut reentry: Vec<String> = Vec::new();

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
            uncontended::run(&budget, n, &raw, &client, &mut results, &progress).await?;
            if n == 5 {
                family.push_str(&semaphore::run(&client, n, budget.samples).await?);
                let line = rwlock::run(&budget, n, &client).await?;
                println!("{line}");
                rw.push(line);
                let line = reenter::run(&budget, n, &client).await?;
                println!("{line}");
                reentry.push(line);
            }
        }
        if args.runs("throughput") {
            progress.step(&format!(
                "N={n}: throughput, {} clients, {:?} windows",
                budget.clients, budget.window
            ));
            throughput::run(&budget, n, &raw[0], &client, &mut results).await?;
        }
        if args.runs("guarded") {
            progress.step(&format!(
                "N={n}: quarantine and fencing against the plain acquire, durable masters, {} samples each",
                budget.samples / 2
            ));
            guarded::run(&budget, n, &mut results, &progress).await?;
        }
        if args.runs("contended") {
            progress.step(&format!(
                "N={n}: contended, {CONTENDERS} clients on one resource, holds {:?}, {}",
                HOLDS,
                Waiting::ALL.map(Waiting::label).join(" / ")
            ));
            contended::run(&budget, args.quick, n, &urls, &raw, &mut results).await?;
        }
        drop(client);
        drop(cluster);
    }
    if let Some(n) = degraded_n {
        progress.step(&format!(
            "N={n}: degraded, one master paused or killed, in cycles"
        ));
        degraded::run(&budget, n, &mut results, &progress).await?;
    }
    if let Some(n) = family_n {
        progress.step(&format!(
            "N={n}: the lock family against the mutex, {} samples each",
            budget.samples / 2
        ));
        family::run(&budget, n, &mut results, &progress).await?;
    }
    progress.finish();

    machine.load_after = load_average();
    machine.duration_s = started.elapsed().as_secs_f64();
    let context = targets::context(&results);
    let targets = targets::of(&results);
    let table = report::table(&machine, &results, &targets, &context);
    println!("\n{table}");
    if !family.is_empty() {
        println!("{family}");
        std::fs::create_dir_all(&args.out)?;
        std::fs::write(args.out.join("semaphore.txt"), &family)?;
    }

    std::fs::create_dir_all(&args.out)?;
    let settings = format!(
        "{budget:?}; contended: {CONTENDERS} clients, critical section GET / sleep {HOLDS:?} / SET \
         on a storage server and {OUTSIDE:?} outside the lock, waiting {}, wait budget \
         {WAIT_BUDGET:?}; client defaults otherwise (ttl 10s, node_timeout 50ms)",
        Waiting::ALL.map(Waiting::label).join(" / ")
    );
    let tables = report::markdown(&machine, &results, &targets, &context);
    let missing = report::missing_tables(&results, &tables);
    if !missing.is_empty() {
        return Err(format!("tables.md lacks the tables of {}", missing.join(", ")).into());
    }
    let files = [
        ("nodes.txt", table.clone()),
        ("tables.md", tables),
        ("nodes.csv", report::csv(&results)),
        ("rwlock.txt", rw.join("\n")),
        ("reenter.txt", reentry.join("\n")),
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
        "wrote nodes.txt, tables.md, nodes.csv, reenter.txt, rwlock.txt, nodes.json and nodes.svg to {}",
        args.out.display()
    );
    // Written out first, so that the failing rows can be read beside the others.
    let failing = results.failing();
    if !failing.is_empty() {
        return Err(format!(
            "{} measured rows had more than {} % of their operations fail (contended acquires \
             that gave up are not failures):\n  {}",
            failing.len(),
            model::MAX_ERROR_SHARE * 100.0,
            failing.join("\n  ")
        )
        .into());
    }
    Ok(())
}
