//! `redquorum-pg-holder`: one fenced holder as its own process, so the chaos suite can
//! freeze it with `SIGSTOP` at an exact point of a fenced PostgreSQL transaction
//! (`tests/chaos/postgres.rs`, scenarios P1a and P1b).
//!
//! It acquires `--resource` with fencing, computes its transaction's budget from the
//! lease at once (as a program would before a pause it cannot see coming), and runs one
//! fenced read-modify-write of the resource's counter with an audit row, through
//! `redquorum::postgres::fenced`. At `--stop-at` it stops itself (`SIGSTOP`, so the freeze
//! lands exactly there; the suite sees it stopped and sends `SIGCONT`):
//! - `before-claim`: after acquiring, before the transaction begins;
//! - `after-claim`: inside the transaction, after the claim, before the reads and writes.
//!
//! ```text
//! redquorum-pg-holder --client h --masters redis://127.0.0.1:7001,... --resource r \
//!     --pg "host=127.0.0.1 port=5432 user=postgres dbname=postgres" --ttl-ms 800 \
//!     --stop-at before-claim|after-claim [--idle-ms MS]
//! ```
//!
//! Events go to stdout as JSON lines (`event.rs`); the section's `cs_end` says how the
//! transaction ended (`pg committed`, `pg refused N`, `pg failed Kind`), and its `cs_read`
//! (written just before it stops) names its database backend (`backend=PID`). `--idle-ms`
//! replaces the idle timeout (the lease's time by default).

#[path = "event.rs"]
mod event;

use redquorum::{Retry, Timeouts};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use event::{Event, Op};
use redquorum::Redlock;
use redquorum::postgres::{self, FenceOptions};
use redquorum_testkit::monotonic_ns;

struct Args {
    client: String,
    masters: Vec<String>,
    resource: String,
    pg: String,
    ttl: Duration,
    stop_after_claim: bool,
    idle: Option<Duration>,
}

fn parse(mut raw: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        client: "h".into(),
        masters: Vec::new(),
        resource: String::new(),
        pg: String::new(),
        ttl: Duration::from_millis(800),
        stop_after_claim: false,
        idle: None,
    };
    let millis = |v: &str| {
        v.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{v}: {e}"))
    };
    while let Some(flag) = raw.next() {
        let value = raw.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--client" => args.client = value,
            "--masters" => args.masters = value.split(',').map(str::to_owned).collect(),
            "--resource" => args.resource = value,
            "--pg" => args.pg = value,
            "--ttl-ms" => args.ttl = millis(&value)?,
            "--idle-ms" => args.idle = Some(millis(&value)?),
            "--stop-at" => {
                args.stop_after_claim = match value.as_str() {
                    "before-claim" => false,
                    "after-claim" => true,
                    other => return Err(format!("--stop-at {other}: before-claim or after-claim")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.masters.is_empty() || args.resource.is_empty() || args.pg.is_empty() {
        return Err("--masters, --resource and --pg are required".into());
    }
    Ok(args)
}

struct Out {
    client: String,
    resource: String,
    value: String,
    token: Option<u64>,
}

impl Out {
    fn emit(&self, op: Op, deadline_ns: Option<u64>, detail: &str) -> Result<(), String> {
        let event = Event {
            client: self.client.clone(),
            attempt: 1,
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

/// Stops this process until the suite sends `SIGCONT`.
fn stop_here() -> Result<(), String> {
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).map_err(|e| e.to_string())
}

async fn run(args: Args) -> Result<(), String> {
    let client = Redlock::builder()
        .quarantine(true)
        .ttl_max(args.ttl)
        .fencing(true)
        .masters(&args.masters)
        .ttl(args.ttl)
        .timeouts(Timeouts::new().node(Duration::from_millis(50)))
        .retry(Retry::new().attempts(50))
        .build()
        .map_err(|e| e.to_string())?;
    let (mut db, connection) = tokio_postgres::connect(&args.pg, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let backend: i32 = db
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    let mut out = Out {
        client: args.client.clone(),
        resource: args.resource.clone(),
        value: String::new(),
        token: None,
    };
    out.emit(Op::AcqStart, None, "")?;
    let lease = match client.acquire(&args.resource).await {
        Ok(lease) => lease,
        Err(e) => return out.emit(Op::AcqFail, None, &format!("{:?}", e.kind())),
    };
    let token = lease.fencing_token().ok_or("acquired without a token")?;
    out.value = lease.value().to_owned();
    out.token = Some(token.get());
    let now = monotonic_ns().map_err(|e| e.to_string())?;
    out.emit(
        Op::AcqOk,
        Some(now + lease.remaining().as_nanos() as u64),
        "",
    )?;
    out.emit(Op::CsStart, None, "")?;
    // Computed before the pause, which the program cannot see coming.
    let mut options = FenceOptions::new(lease.remaining());
    if let Some(idle) = args.idle {
        options = options.idle_timeout(idle);
    }
    let op_id = format!("{}-1", args.client);
    let stop_point = format!("backend={backend}");
    if !args.stop_after_claim {
        out.emit(Op::CsRead, None, &stop_point)?;
        stop_here()?;
    }
    let resource = args.resource.clone();
    let stop_after_claim = args.stop_after_claim;
    let out_ref = &out;
    let result =
        postgres::fenced(&mut db, &args.resource, token, &options, async |tx| {
            if stop_after_claim {
                out_ref
                    .emit(Op::CsRead, None, &stop_point)
                    .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })?;
                stop_here()?;
            }
            let read: i64 = tx
                .query_one(
                    "SELECT value FROM counters WHERE resource = $1",
                    &[&resource],
                )
                .await?
                .get(0);
            tx.execute(
                "UPDATE counters SET value = $2 WHERE resource = $1",
                &[&resource, &(read + 1)],
            )
            .await?;
            tx.execute(
            "INSERT INTO audit (op_id, resource, token, seq, writer) VALUES ($1, $2, $3, $4, $5)",
            &[&op_id, &resource, &(token.get() as i64), &(read + 1), &args.client],
        )
        .await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        })
        .await;
    let detail = match result {
        Ok(()) => "pg committed".to_owned(),
        Err(e) => match e.newest() {
            Some(newest) => format!("pg refused {newest}"),
            None => format!("pg failed {:?}", e.kind()),
        },
    };
    out.emit(Op::CsEnd, None, &detail)?;
    let released = match lease.release().await {
        Ok(report) => format!("released:{}", report.released()),
        Err(e) => format!("{:?}", e.kind()),
    };
    out.emit(Op::Rel, None, &released)?;
    client.shutdown().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("redquorum-pg-holder: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redquorum-pg-holder: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redquorum-pg-holder: {e}");
            ExitCode::FAILURE
        }
    }
}
