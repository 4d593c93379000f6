//! `redquorum-chaos-client`: one contending client as its own process, so the chaos suite
//! can freeze a *client* with `SIGSTOP` (inside its critical section, or between sending
//! its `SET`s and reading the replies).
//!
//! It makes `--count` acquisitions of `--resource`; each critical section reads a counter
//! on the checker store (`--store`), works for `--hold-ms`, writes the counter back, and
//! releases. `--resource x,y` locks several resources at once (`acquire_many`): each
//! event is then written once per resource, and each resource's counter (and register,
//! with its own token) is read and written. Every event goes to stdout as one JSON line (see `event.rs`), flushed at once,
//! stamped with `CLOCK_MONOTONIC` so the suite can merge it with its own history.
//!
//! ```text
//! redquorum-chaos-client --client p1 --masters redis://127.0.0.1:7001,... \
//!     --store redis://127.0.0.1:7100 --resource r [--ttl-ms 1000] [--node-timeout-ms 50]
//!     [--attempts 20] [--retry-delay-ms 10] [--retry-jitter-ms 10] [--count 1]
//!     [--hold-ms 0] [--check-deadline] [--quarantine] [--fencing] [--reenter]
//!     [--fair] [--no-handoff] [--waiter-ttl-ms MS] [--wait-timeout-ms MS]
//!     [--mutant NAME]
//! ```
//!
//! `--fair` makes each acquire fair (`AcquireOptions::fair`; its `acq_start` says
//! `fair`); `--no-handoff` turns hand-off to the next waiter off; `--waiter-ttl-ms` and
//! `--wait-timeout-ms` set the waiter TTL and the wait budget (the library's defaults
//! otherwise); `--mutant` plants the `redquorum::Mutant` of that name, for the
//! suite's mutant hunts.
//!
//! `--reenter` re-enters each lease right after the reads (`Lease::reenter`) and works,
//! checks the deadline (`--check-deadline`) and writes under the re-entry guard, which is
//! left before the lease is released.
//!
//! `--quarantine` turns restart quarantine on (with `ttl_max` the TTL); `--fencing` also
//! asks for fencing tokens, and each critical section then also makes a fenced read and a
//! fenced write of the register on the checker store (`fenced.rs`).
//!
//! Only the suite runs it; it talks to the addresses it is given, which the suite keeps on
//! loopback.

#[path = "event.rs"]
mod event;
#[path = "fenced.rs"]
mod fenced;

use redquorum::{Retry, Timeouts, Waiting};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use event::{Event, Op};
use redis::AsyncCommands as _;
#[cfg(redquorum_mutants)]
use redquorum::Mutant;
use redquorum::{AcquireOptions, Redlock};
use redquorum_testkit::monotonic_ns;

/// The parsed command line. Flags are few and fixed, so they are parsed by hand rather
/// than with an argument-parsing crate (a `[[bin]]` cannot use dev-dependencies, and the
/// library should not depend on one for a test tool).
struct Args {
    client: String,
    masters: Vec<String>,
    store: String,
    resource: String,
    ttl: Duration,
    node_timeout: Duration,
    attempts: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    count: u64,
    hold: Duration,
    check_deadline: bool,
    quarantine: bool,
    fencing: bool,
    reenter: bool,
    fair: bool,
    handoff: bool,
    waiter_ttl: Option<Duration>,
    wait_timeout: Option<Duration>,
    mutant: Option<Mutant>,
}

fn parse(mut raw: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        client: "p".into(),
        masters: Vec::new(),
        store: String::new(),
        resource: String::new(),
        ttl: Duration::from_millis(1000),
        node_timeout: Duration::from_millis(50),
        attempts: 20,
        retry_delay: Duration::from_millis(10),
        retry_jitter: Duration::from_millis(10),
        count: 1,
        hold: Duration::ZERO,
        check_deadline: false,
        quarantine: false,
        fencing: false,
        reenter: false,
        fair: false,
        handoff: true,
        waiter_ttl: None,
        wait_timeout: None,
        mutant: None,
    };
    let millis = |v: &str| {
        v.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{v}: {e}"))
    };
    while let Some(flag) = raw.next() {
        match flag.as_str() {
            "--check-deadline" => {
                args.check_deadline = true;
                continue;
            }
            "--quarantine" => {
                args.quarantine = true;
                continue;
            }
            "--fencing" => {
                args.quarantine = true;
                args.fencing = true;
                continue;
            }
            "--reenter" => {
                args.reenter = true;
                continue;
            }
            "--fair" => {
                args.fair = true;
                continue;
            }
            "--no-handoff" => {
                args.handoff = false;
                continue;
            }
            _ => {}
        }
        let value = raw.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--client" => args.client = value,
            "--masters" => args.masters = value.split(',').map(str::to_owned).collect(),
            "--store" => args.store = value,
            "--resource" => args.resource = value,
            "--ttl-ms" => args.ttl = millis(&value)?,
            "--node-timeout-ms" => args.node_timeout = millis(&value)?,
            "--attempts" => args.attempts = value.parse().map_err(|e| format!("{value}: {e}"))?,
            "--retry-delay-ms" => args.retry_delay = millis(&value)?,
            "--retry-jitter-ms" => args.retry_jitter = millis(&value)?,
            "--count" => args.count = value.parse().map_err(|e| format!("{value}: {e}"))?,
            "--hold-ms" => args.hold = millis(&value)?,
            "--waiter-ttl-ms" => args.waiter_ttl = Some(millis(&value)?),
            "--wait-timeout-ms" => args.wait_timeout = Some(millis(&value)?),
            "--mutant" => args.mutant = Some(mutant_named(&value)?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.masters.is_empty() || args.store.is_empty() || args.resource.is_empty() {
        return Err("--masters, --store and --resource are required".into());
    }
    Ok(args)
}

/// Writes events as JSON lines to stdout.
struct Out {
    client: String,
    resource: String,
    attempt: u64,
    value: String,
    token: Option<u64>,
}

impl Out {
    fn emit(&self, op: Op, deadline_ns: Option<u64>, detail: &str) -> Result<(), String> {
        let event = Event {
            client: self.client.clone(),
            attempt: self.attempt,
            op,
            t_ns: monotonic_ns().map_err(|e| e.to_string())?,
            resource: self.resource.clone(),
            value: self.value.clone(),
            token: self.token,
            deadline_ns,
            detail: detail.to_owned(),
        };
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", event.to_json()).map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())
    }
}

/// Every resource's writer: the events of a lease over several resources are written once
/// per resource.
struct Outs(Vec<Out>);

impl Outs {
    fn emit(&self, op: Op, deadline_ns: Option<u64>, detail: &str) -> Result<(), String> {
        self.0
            .iter()
            .try_for_each(|out| out.emit(op, deadline_ns, detail))
    }
}

/// Without `--cfg redquorum_mutants` no bug can be planted.
#[cfg(not(redquorum_mutants))]
type Mutant = std::convert::Infallible;

/// The planted bug called `name`.
#[cfg(redquorum_mutants)]
fn mutant_named(name: &str) -> Result<Mutant, String> {
    let found = Mutant::ALL.into_iter().find(|m| format!("{m:?}") == name);
    found.ok_or_else(|| format!("no mutant is called {name}"))
}

/// Without `--cfg redquorum_mutants`, no bug can be planted: an error names the flag.
#[cfg(not(redquorum_mutants))]
fn mutant_named(name: &str) -> Result<Mutant, String> {
    Err(format!(
        "--mutant {name}: this build has no planted bugs (it needs `--cfg redquorum_mutants`)"
    ))
}

async fn run(args: Args) -> Result<(), String> {
    let mut builder = Redlock::builder().waiting(Waiting::new().handoff(args.handoff));
    if let Some(waiter_ttl) = args.waiter_ttl {
        builder = builder.waiting(Waiting::new().waiter_ttl(waiter_ttl));
    }
    if let Some(wait) = args.wait_timeout {
        builder = builder.retry(Retry::new().wait(wait));
    }
    let client = builder
        .quarantine(args.quarantine)
        .ttl_max(args.ttl)
        .fencing(args.fencing)
        .masters(&args.masters)
        .ttl(args.ttl)
        .timeouts(Timeouts::new().node(args.node_timeout))
        .retry(
            Retry::new()
                .attempts(args.attempts)
                .delay(args.retry_delay)
                .jitter(args.retry_jitter),
        )
        .build()
        .map_err(|e| e.to_string())?;
    if let Some(mutant) = args.mutant {
        #[cfg(redquorum_mutants)]
        client.plant(mutant);
        #[cfg(not(redquorum_mutants))]
        match mutant {}
    }
    let mut store = redis::Client::open(args.store.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let resources: Vec<&str> = args.resource.split(',').collect();
    let mut outs = Outs(
        resources
            .iter()
            .map(|r| Out {
                client: args.client.clone(),
                resource: (*r).to_owned(),
                attempt: 0,
                value: String::new(),
                token: None,
            })
            .collect(),
    );
    for _ in 0..args.count {
        for out in &mut outs.0 {
            out.attempt += 1;
            out.value.clear();
            out.token = None;
        }
        outs.emit(Op::AcqStart, None, if args.fair { "fair" } else { "" })?;
        let options = AcquireOptions::new().fair(args.fair);
        let acquired = match resources.as_slice() {
            [one] => client.acquire_with(one, &options).await,
            many => client.acquire_many(many).await,
        };
        let lease = match acquired {
            Ok(lease) => lease,
            Err(e) => {
                outs.emit(Op::AcqFail, None, &format!("{:?}", e.kind()))?;
                continue;
            }
        };
        for out in &mut outs.0 {
            out.value = lease.value().to_owned();
            out.token = lease
                .fencing_tokens()
                .find(|(r, _)| *r == out.resource)
                .map(|(_, t)| t.get());
        }
        let now = monotonic_ns().map_err(|e| e.to_string())?;
        outs.emit(
            Op::AcqOk,
            Some(now + lease.remaining().as_nanos() as u64),
            "",
        )?;
        outs.emit(Op::CsStart, None, "")?;
        // Each resource's counter and (with a token) fenced register.
        let mut reads = Vec::with_capacity(outs.0.len());
        for out in &outs.0 {
            let key = format!("{}:counter", out.resource);
            let v: Option<u64> = store.get(&key).await.map_err(|e| e.to_string())?;
            let fenced_read = match out.token {
                Some(token) => Some(
                    fenced::read(&mut store, &out.resource, token)
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                None => None,
            };
            reads.push((key, v, fenced_read));
        }
        let child = args.reenter.then(|| lease.reenter());
        outs.emit(Op::CsRead, None, "")?;
        tokio::time::sleep(args.hold).await;
        let expired = match &child {
            Some(child) => child.is_expired(),
            None => lease.is_expired(),
        };
        let mut details = Vec::with_capacity(outs.0.len());
        for (out, (key, v, fenced_read)) in outs.0.iter().zip(reads) {
            if args.check_deadline && expired {
                details.push(match fenced_read {
                    None => "abandoned",
                    Some(Some(_)) => "abandoned fenced",
                    Some(None) => "abandoned fenced-refused",
                });
                continue;
            }
            let () = store
                .set(&key, v.unwrap_or(0) + 1)
                .await
                .map_err(|e| e.to_string())?;
            details.push(match (fenced_read, out.token) {
                (Some(Some(read)), Some(token)) => {
                    let applied = fenced::write(&mut store, &out.resource, token, read + 1)
                        .await
                        .map_err(|e| e.to_string())?;
                    if applied {
                        "done fenced"
                    } else {
                        "done fenced-refused"
                    }
                }
                (Some(_), _) => "done fenced-refused",
                (None, _) => "done",
            });
        }
        for (out, detail) in outs.0.iter().zip(details) {
            out.emit(Op::CsEnd, None, detail)?;
        }
        if let Some(child) = child {
            child.release();
        }
        let detail = match lease.release().await {
            Ok(report) => format!("released:{}", report.released()),
            Err(e) => format!("{:?}", e.kind()),
        };
        outs.emit(Op::Rel, None, &detail)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("redquorum-chaos-client: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redquorum-chaos-client: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redquorum-chaos-client: {e}");
            ExitCode::FAILURE
        }
    }
}
