//! Fencing checked where the data lives: the usual masters (durable, so tokens are issued)
//! plus one PostgreSQL (`testkit::Postgres`), and holders whose leases run out before
//! they write (docs/testing.md §4, the P rows).
//!
//! Every write is one fenced transaction (`redquorum::postgres::fenced`): claim, read the
//! resource's counter, write it back plus one and insert an audit row `(op_id, resource,
//! token, seq)` with `seq` the new counter value, commit. Pauses, by `SIGSTOP` of a holder
//! process (P1a, P1b) or by sleeping tasks (P2, P3), land before the claim, between the read
//! and the write, and between the write and the commit.
//!
//! The database checker reads the truth from PostgreSQL itself, exactly:
//! - no lost update: each counter equals its audit rows, whose `seq` are 1..=n;
//! - per resource, tokens ordered by commit timestamp (`track_commit_timestamp`) never
//!   decrease, and the fence row holds the largest committed token;
//! - every refusal is justified: its `newest` exceeds its token and a committed audit row
//!   carries that token;
//! - acknowledged writes are present, refused and failed ones absent (a commit whose
//!   outcome is unknown may be either).
//!
//! Each scenario must reach its interesting case (a refusal, a writer blocked behind a
//! paused holder, a transaction cut by the server's death), or it fails. P4 scripts two
//! writers through four races exactly (gates instead of sleeps); there the planted bugs
//! (a claim autocommitted before the transaction, the upsert without its `WHERE`, a read
//! and a comparison in Rust, the data written on a second connection) must each be caught,
//! while the product stays clean.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redquorum::postgres::{self, CLAIM, FenceErrorKind, FenceOptions, SCHEMA};
use redquorum::{FencingToken, Redlock};
use redquorum_testkit::{Persistence, Postgres};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep, timeout};
use tokio_postgres::{Client, GenericClient, NoTls};

use crate::event::{Event, Op};
use crate::harness::*;
use crate::history::{History, now_ns, parse_line};

/// The data of the scenarios: a counter per resource, and one audit row per committed
/// write.
const DATA: &str = "CREATE TABLE counters (resource text PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE audit (op_id text PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL,
                    seq bigint NOT NULL, writer text NOT NULL)";

/// The planted bugs, each a broken way of checking the token in SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// The claim runs on its own (autocommitted) before the writing transaction begins,
    /// so its row lock is gone before the writes.
    AutocommitClaim,
    /// The upsert without its `WHERE f.token <= EXCLUDED.token`: every claim is granted.
    NoWhere,
    /// The token is read with a plain `SELECT` and compared in Rust, then written with an
    /// unconditional upsert: a claim that waited never re-checks.
    ReadCompare,
    /// The claim is made in the transaction, but the data is read and written on a
    /// second connection, outside the claim's lock.
    SecondConnection,
}

impl Plant {
    pub const ALL: [Plant; 4] = [
        Plant::AutocommitClaim,
        Plant::NoWhere,
        Plant::ReadCompare,
        Plant::SecondConnection,
    ];
}

/// How a fenced write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Committed,
    Refused(u64),
    /// Nothing committed (the error kind).
    Failed(String),
    /// The commit may or may not have happened.
    Unknown(String),
}

/// One fenced write, as its writer saw it.
#[derive(Debug, Clone)]
pub struct PgOp {
    pub op_id: String,
    pub resource: String,
    pub token: u64,
    pub end: End,
}

/// A pause of a writer: none, a sleep, or until the script opens its gate.
#[derive(Debug, Clone, Default)]
pub enum Pause {
    #[default]
    None,
    For(Duration),
    Until(Gate),
}

/// A point where a scripted writer waits: it says it arrived, and goes on once opened.
#[derive(Debug, Clone)]
pub struct Gate {
    open: tokio::sync::watch::Receiver<bool>,
    arrived: Arc<AtomicBool>,
}

/// The script's side of a [`Gate`].
pub struct GateKey {
    open: tokio::sync::watch::Sender<bool>,
    arrived: Arc<AtomicBool>,
}

pub fn gate() -> (GateKey, Gate) {
    let (open, rx) = tokio::sync::watch::channel(false);
    let arrived = Arc::new(AtomicBool::new(false));
    (
        GateKey {
            open,
            arrived: Arc::clone(&arrived),
        },
        Gate { open: rx, arrived },
    )
}

impl GateKey {
    pub fn open(&self) {
        let _ = self.open.send(true);
    }

    pub async fn wait_arrived(&self) {
        let arrived = Arc::clone(&self.arrived);
        crate::support::wait_until(
            Duration::from_secs(20),
            "the writer reached its gate",
            || {
                let arrived = arrived.load(Ordering::SeqCst);
                async move { arrived }
            },
        )
        .await;
    }
}

impl Pause {
    async fn wait(&self) {
        match self {
            Pause::None => {}
            Pause::For(d) => sleep(*d).await,
            Pause::Until(gate) => {
                gate.arrived.store(true, Ordering::SeqCst);
                let mut open = gate.open.clone();
                // Bounded: a script that never opens its gate fails on its own waits.
                let _ = timeout(Duration::from_secs(60), open.wait_for(|o| *o)).await;
            }
        }
    }
}

/// Where a writer pauses.
#[derive(Debug, Clone, Default)]
pub struct Pauses {
    pub before_claim: Pause,
    pub read_to_write: Pause,
    pub write_to_commit: Pause,
}

/// A writer's connections: the main one, and a second for [`Plant::SecondConnection`].
pub struct Conns {
    config: String,
    main: Option<Client>,
    second: Option<Client>,
}

impl Conns {
    pub fn new(config: &str) -> Conns {
        Conns {
            config: config.to_owned(),
            main: None,
            second: None,
        }
    }

    /// Opens whichever connection is missing or closed; `false` if the server does not
    /// answer (killed, restarting).
    async fn ready(&mut self) -> bool {
        for slot in [&mut self.main, &mut self.second] {
            if slot.as_ref().is_none_or(Client::is_closed) {
                *slot = match timeout(
                    Duration::from_secs(2),
                    tokio_postgres::connect(&self.config, NoTls),
                )
                .await
                {
                    Ok(Ok((client, connection))) => {
                        tokio::spawn(connection);
                        Some(client)
                    }
                    _ => return false,
                };
            }
        }
        true
    }
}

/// A started PostgreSQL with the fence table, the data tables and a counter at 0 for each
/// resource, and a connection to read it with.
pub struct Db {
    pub server: Postgres,
    pub observer: Client,
}

impl Db {
    pub async fn start(resources: &[String]) -> Db {
        let server = Postgres::start().await.unwrap();
        let observer = connect(&server.config()).await;
        observer.batch_execute(SCHEMA).await.unwrap();
        observer.batch_execute(DATA).await.unwrap();
        for r in resources {
            observer
                .execute("INSERT INTO counters VALUES ($1, 0)", &[r])
                .await
                .unwrap();
        }
        Db { server, observer }
    }

    pub async fn reconnect(&mut self) {
        self.observer = connect(&self.server.config()).await;
    }
}

pub async fn connect(config: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The body of every write: read the counter, pause, write it back plus one and the audit
/// row, pause. On `c`: the transaction, or for the planted second connection, the other
/// connection.
async fn body<C: GenericClient + Sync>(
    c: &C,
    resource: &str,
    token: u64,
    op_id: &str,
    writer: &str,
    pauses: &Pauses,
) -> Result<(), tokio_postgres::Error> {
    let read: i64 = c
        .query_one(
            "SELECT value FROM counters WHERE resource = $1",
            &[&resource],
        )
        .await?
        .get(0);
    pauses.read_to_write.wait().await;
    c.execute(
        "UPDATE counters SET value = $2 WHERE resource = $1",
        &[&resource, &(read + 1)],
    )
    .await?;
    c.execute(
        "INSERT INTO audit (op_id, resource, token, seq, writer) VALUES ($1, $2, $3, $4, $5)",
        &[&op_id, &resource, &(token as i64), &(read + 1), &writer],
    )
    .await?;
    pauses.write_to_commit.wait().await;
    Ok(())
}

/// One fenced write by `writer` (the product's `fenced`, or a planted bug), after the
/// pause before the claim.
#[allow(clippy::too_many_arguments)]
pub async fn write(
    plant: Option<Plant>,
    conns: &mut Conns,
    resource: &str,
    token: u64,
    options: &FenceOptions,
    budget: Duration,
    pauses: &Pauses,
    op_id: &str,
    writer: &str,
) -> End {
    pauses.before_claim.wait().await;
    if !conns.ready().await {
        return End::Failed("no connection".into());
    }
    let Some(main) = conns.main.as_mut() else {
        return End::Failed("no connection".into());
    };
    let Some(plant) = plant else {
        let done = postgres::fenced(
            main,
            resource,
            FencingToken::from(token),
            options,
            async |tx| body(&*tx, resource, token, op_id, writer, pauses).await,
        )
        .await;
        return match done {
            Ok(()) => End::Committed,
            Err(e) => match (e.kind(), e.newest()) {
                (FenceErrorKind::Refused, Some(newest)) => End::Refused(newest.get()),
                (FenceErrorKind::CommitUnknown, _) => End::Unknown(format!("{:?}", e.kind())),
                (kind, _) => End::Failed(format!("{kind:?}")),
            },
        };
    };
    match planted(plant, conns, resource, token, budget, pauses, op_id, writer).await {
        Ok(end) => end,
        Err((e, at_commit)) if at_commit && e.code().is_none() => End::Unknown(e.to_string()),
        Err((e, _)) => End::Failed(
            e.code()
                .map_or_else(|| e.to_string(), |c| c.code().to_owned()),
        ),
    }
}

/// The planted bugs: each the product's transaction with one thing done wrong. Errors say
/// whether they answered the `COMMIT`.
#[allow(clippy::too_many_arguments)]
async fn planted(
    plant: Plant,
    conns: &mut Conns,
    resource: &str,
    token: u64,
    budget: Duration,
    pauses: &Pauses,
    op_id: &str,
    writer: &str,
) -> Result<End, (tokio_postgres::Error, bool)> {
    let e = |e| (e, false);
    let t = token as i64;
    let settings = format!(
        "SET LOCAL lock_timeout = {ms}; SET LOCAL idle_in_transaction_session_timeout = {ms}",
        ms = budget.as_millis().max(1)
    );
    let Conns { main, second, .. } = conns;
    let (Some(main), Some(second)) = (main.as_mut(), second.as_ref()) else {
        return Ok(End::Failed("no connection".into()));
    };
    let newest = async |c: &Client| -> Result<u64, (tokio_postgres::Error, bool)> {
        let row = c
            .query_one(
                "SELECT token FROM redquorum_fence WHERE resource = $1",
                &[&resource],
            )
            .await
            .map_err(|e| (e, false))?;
        Ok(row.get::<_, i64>(0) as u64)
    };
    if plant == Plant::AutocommitClaim {
        // The claim commits on its own; its row lock ends with it.
        if main
            .query(CLAIM, &[&resource, &t])
            .await
            .map_err(e)?
            .is_empty()
        {
            return Ok(End::Refused(newest(main).await?));
        }
    }
    let tx = main.transaction().await.map_err(e)?;
    tx.batch_execute(&settings).await.map_err(e)?;
    match plant {
        Plant::AutocommitClaim => {}
        Plant::NoWhere => {
            let unguarded = CLAIM.replace(" WHERE f.token <= EXCLUDED.token", "");
            assert_ne!(unguarded, CLAIM, "the planted claim must differ");
            tx.query(&unguarded, &[&resource, &t]).await.map_err(e)?;
        }
        Plant::ReadCompare => {
            let seen = tx
                .query_opt(
                    "SELECT token FROM redquorum_fence WHERE resource = $1",
                    &[&resource],
                )
                .await
                .map_err(e)?
                .map(|row| row.get::<_, i64>(0));
            if let Some(seen) = seen.filter(|&seen| seen > t) {
                tx.rollback().await.map_err(e)?;
                return Ok(End::Refused(seen as u64));
            }
            tx.execute(
                "INSERT INTO redquorum_fence (resource, token) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token",
                &[&resource, &t],
            )
            .await
            .map_err(e)?;
        }
        Plant::SecondConnection => {
            if tx
                .query(CLAIM, &[&resource, &t])
                .await
                .map_err(e)?
                .is_empty()
            {
                tx.rollback().await.map_err(e)?;
                return Ok(End::Refused(newest(second).await?));
            }
        }
    }
    if plant == Plant::SecondConnection {
        body(second, resource, token, op_id, writer, pauses)
            .await
            .map_err(e)?;
    } else {
        body(&tx, resource, token, op_id, writer, pauses)
            .await
            .map_err(e)?;
    }
    tx.commit().await.map_err(|e| (e, true))?;
    Ok(End::Committed)
}

/// What the database checker found.
#[derive(Debug, Default)]
pub struct DbReport {
    pub ops: u64,
    pub committed: u64,
    pub refused: u64,
    pub failed: u64,
    pub unknown: u64,
    /// Counters that disagree with their audit rows, or whose `seq` are not 1..=n.
    pub lost: u64,
    /// Committed tokens that went down in commit order, and fence rows below the largest
    /// committed token.
    pub regressions: u64,
    /// Refusals whose `newest` is not larger, or carried by no committed row.
    pub unjustified: u64,
    /// Acknowledged writes missing.
    pub acked_missing: u64,
    /// Refused or failed writes present.
    pub refused_present: u64,
    pub notes: Vec<String>,
}

impl DbReport {
    pub fn violations(&self) -> u64 {
        self.lost + self.regressions + self.unjustified + self.acked_missing + self.refused_present
    }

    pub fn summary(&self) -> String {
        format!(
            "pg ops={} committed={} refused={} failed={} unknown={} viol={{lost:{},regress:{},unjustified:{},acked_missing:{},refused_present:{}}}",
            self.ops,
            self.committed,
            self.refused,
            self.failed,
            self.unknown,
            self.lost,
            self.regressions,
            self.unjustified,
            self.acked_missing,
            self.refused_present
        )
    }
}

/// The database checker (see the module's docs), over `ops` and what PostgreSQL holds.
// Checks I13 (fenced writes commit in token order).
pub async fn check_db(observer: &Client, resources: &[String], ops: &[PgOp]) -> DbReport {
    let mut report = DbReport {
        ops: ops.len() as u64,
        ..DbReport::default()
    };
    let mut present: BTreeSet<String> = BTreeSet::new();
    let mut committed_tokens: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for resource in resources {
        let value: i64 = observer
            .query_one(
                "SELECT value FROM counters WHERE resource = $1",
                &[resource],
            )
            .await
            .unwrap()
            .get(0);
        let rows = observer
            .query(
                "SELECT op_id, token, seq FROM audit WHERE resource = $1 \
                 ORDER BY pg_xact_commit_timestamp(xmin), seq",
                &[resource],
            )
            .await
            .unwrap();
        let mut seqs: Vec<i64> = rows.iter().map(|r| r.get::<_, i64>(2)).collect();
        seqs.sort_unstable();
        let expected: Vec<i64> = (1..=rows.len() as i64).collect();
        if value != rows.len() as i64 || seqs != expected {
            report.lost += 1;
            report.notes.push(format!(
                "LOST UPDATE on {resource}: counter {value}, {} audit rows, seq {seqs:?}",
                rows.len()
            ));
        }
        let mut highest: Option<(i64, String)> = None;
        for row in &rows {
            let (op_id, token): (String, i64) = (row.get(0), row.get(1));
            if let Some((top, by)) = &highest
                && token < *top
            {
                report.regressions += 1;
                report.notes.push(format!(
                    "TOKEN REGRESSION on {resource}: {op_id} committed token {token} after {by} \
                     committed {top}"
                ));
            }
            if highest.as_ref().is_none_or(|(top, _)| token > *top) {
                highest = Some((token, op_id.clone()));
            }
            committed_tokens
                .entry(resource.clone())
                .or_default()
                .insert(token as u64);
            present.insert(op_id);
        }
        let fence: Option<i64> = observer
            .query_opt(
                "SELECT token FROM redquorum_fence WHERE resource = $1",
                &[resource],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        if let Some((top, _)) = highest
            && fence.is_none_or(|f| f < top)
        {
            report.regressions += 1;
            report.notes.push(format!(
                "FENCE BEHIND on {resource}: fence {fence:?}, committed token {top}"
            ));
        }
    }
    for op in ops {
        let here = present.contains(&op.op_id);
        match &op.end {
            End::Committed => {
                report.committed += 1;
                if !here {
                    report.acked_missing += 1;
                    report
                        .notes
                        .push(format!("ACKED MISSING: {} (token {})", op.op_id, op.token));
                }
            }
            End::Refused(newest) => {
                report.refused += 1;
                if here {
                    report.refused_present += 1;
                    report.notes.push(format!("REFUSED PRESENT: {}", op.op_id));
                }
                let carried = committed_tokens
                    .get(&op.resource)
                    .is_some_and(|t| t.contains(newest));
                if *newest <= op.token || !carried {
                    report.unjustified += 1;
                    report.notes.push(format!(
                        "UNJUSTIFIED REFUSAL: {} token {} by newest {newest} (committed: {carried})",
                        op.op_id, op.token
                    ));
                }
            }
            End::Failed(why) => {
                report.failed += 1;
                if here {
                    report.refused_present += 1;
                    report
                        .notes
                        .push(format!("FAILED PRESENT: {} ({why})", op.op_id));
                }
            }
            End::Unknown(_) => report.unknown += 1,
        }
    }
    report
}

/// Events of in-process writers, written straight into the history (the sections' ends
/// say how the transaction ended, not `done`: the checker store's counter is not theirs).
pub struct PgRec {
    history: History,
    client: String,
    resource: String,
    attempt: u64,
    value: String,
    token: Option<u64>,
}

impl PgRec {
    pub fn new(history: &History, client: &str, resource: &str) -> PgRec {
        PgRec {
            history: history.clone(),
            client: client.to_owned(),
            resource: resource.to_owned(),
            attempt: 0,
            value: String::new(),
            token: None,
        }
    }

    fn record(&self, op: Op, deadline_ns: Option<u64>, detail: &str) {
        self.history.push(Event {
            client: self.client.clone(),
            attempt: self.attempt,
            op,
            t_ns: now_ns(),
            resource: self.resource.clone(),
            value: self.value.clone(),
            token: self.token,
            deadline_ns,
            detail: detail.to_owned(),
        });
    }

    pub fn acq_start(&mut self) {
        self.attempt += 1;
        self.value.clear();
        self.token = None;
        self.record(Op::AcqStart, None, "");
    }

    pub fn acq_ok(&mut self, lease: &redquorum::Lease) {
        self.value = lease.value().to_owned();
        self.token = lease.fencing_token().map(FencingToken::get);
        let deadline = now_ns() + lease.remaining().as_nanos() as u64;
        self.record(Op::AcqOk, Some(deadline), "");
        self.record(Op::CsStart, None, "");
    }

    pub fn acq_fail(&mut self, error: &redquorum::Error) {
        self.record(Op::AcqFail, None, &format!("{:?}", error.kind()));
    }

    pub fn op_id(&self) -> String {
        format!("{}-{}", self.client, self.attempt)
    }

    /// The section's end, then the release.
    pub async fn leave(&mut self, end: &End, lease: redquorum::Lease) {
        let detail = match end {
            End::Committed => "pg committed".to_owned(),
            End::Refused(newest) => format!("pg refused {newest}"),
            End::Failed(why) => format!("pg failed {why}"),
            End::Unknown(why) => format!("pg unknown {why}"),
        };
        self.record(Op::CsEnd, None, &detail);
        let released = match lease.release().await {
            Ok(report) => format!("released:{}", report.released()),
            Err(e) => format!("{:?}", e.kind()),
        };
        self.record(Op::Rel, None, &released);
    }
}

/// A client of the scenarios: restart quarantine and fencing over durable masters.
fn fenced_client(urls: Vec<String>, ttl: Duration) -> Redlock {
    build(Guards::RSV_F.apply(client_over(urls).ttl(ttl), ttl), None)
}

/// The masters (durable, with an old data epoch, so fresh processes vote at once) and the
/// database, for `code`.
async fn setup(
    code: &'static str,
    name: &str,
    expect: Expect,
    resources: usize,
) -> (Env, Db, Vec<String>) {
    let setup = Setup::new(code, name, expect, 3).persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    seed_epochs(&env.cluster).await;
    let resources: Vec<String> = (0..resources).map(|i| env.resource(i)).collect();
    let db = Db::start(&resources).await;
    (env, db, resources)
}

/// A holder process (`redquorum-pg-holder`), its events read into a history.
struct Holder {
    child: Child,
    pid: i32,
    history: History,
    name: String,
}

impl Holder {
    fn spawn(name: &str, args: &[String], history: &History) -> Holder {
        let exe = std::env::current_exe().unwrap();
        let binary = exe
            .parent()
            .and_then(std::path::Path::parent)
            .unwrap()
            .join("examples")
            .join("redquorum-pg-holder");
        assert!(
            binary.is_file(),
            "{} is missing: build the examples with the tests (cargo nextest run --all-features)",
            binary.display()
        );
        let mut child = Command::new(binary)
            .arg("--client")
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let stdout = child.stdout.take().unwrap();
        let sink = history.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match parse_line(&line) {
                    Ok(event) => sink.push(event),
                    Err(e) => eprintln!("[chaos] unparsable holder line: {e}"),
                }
            }
        });
        Holder {
            child,
            pid,
            history: history.clone(),
            name: name.to_owned(),
        }
    }

    /// Waits until it stopped itself at its stop point and the line it wrote just before
    /// has been read from its output (a thread reads it, so the stop can be seen first);
    /// returns its database backend.
    async fn wait_stopped(&self) -> i32 {
        let pid = self.pid;
        crate::support::wait_until(
            Duration::from_secs(20),
            "the holder stopped",
            || async move {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    stat.rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
                }) && self.event(Op::CsRead).is_some()
            },
        )
        .await;
        let event = self
            .event(Op::CsRead)
            .expect("the holder names its backend");
        event
            .detail
            .strip_prefix("backend=")
            .and_then(|p| p.parse().ok())
            .unwrap()
    }

    fn event(&self, op: Op) -> Option<Event> {
        self.history
            .snapshot()
            .into_iter()
            .find(|e| e.client == self.name && e.op == op)
    }

    fn resume(&self) {
        kill(Pid::from_raw(self.pid), Signal::SIGCONT).unwrap();
    }

    /// Waits for it to exit and for its section's end; its write as a [`PgOp`].
    async fn finish(mut self, resource: &str) -> PgOp {
        let status = timeout(Duration::from_secs(20), self.child.wait()).await;
        assert!(
            matches!(status, Ok(Ok(s)) if s.success()),
            "the holder process failed: {status:?}"
        );
        let name = self.name.clone();
        let history = self.history.clone();
        crate::support::wait_until(Duration::from_secs(5), "the holder's events", || {
            let found = history
                .snapshot()
                .iter()
                .any(|e| e.client == name && e.op == Op::Rel);
            async move { found }
        })
        .await;
        let end = self.event(Op::CsEnd).unwrap();
        let ok = self.event(Op::AcqOk).unwrap();
        let detail = end.detail.strip_prefix("pg ").unwrap();
        let end = match detail.split_once(' ') {
            None if detail == "committed" => End::Committed,
            Some(("refused", n)) => End::Refused(n.parse().unwrap()),
            Some(("failed", why)) if why == "CommitUnknown" => End::Unknown(why.to_owned()),
            Some(("failed", why)) => End::Failed(why.to_owned()),
            _ => panic!("unknown holder outcome {detail}"),
        };
        PgOp {
            op_id: format!("{}-1", self.name),
            resource: resource.to_owned(),
            token: ok.token.unwrap(),
            end,
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// The TTL of the paused holders.
const HOLDER_TTL: Duration = Duration::from_millis(800);
/// The TTL of the contender that writes while a holder is paused: long enough to wait
/// behind the paused holder's row lock.
const CONTENDER_TTL: Duration = Duration::from_secs(4);

fn holder_args(
    env: &Env,
    db: &Db,
    resource: &str,
    stop_at: &str,
    idle: Option<Duration>,
) -> Vec<String> {
    let mut args = vec![
        "--masters".to_owned(),
        env.urls().join(","),
        "--resource".to_owned(),
        resource.to_owned(),
        "--pg".to_owned(),
        db.server.config(),
        "--ttl-ms".to_owned(),
        HOLDER_TTL.as_millis().to_string(),
        "--stop-at".to_owned(),
        stop_at.to_owned(),
    ];
    if let Some(idle) = idle {
        args.extend(["--idle-ms".to_owned(), idle.as_millis().to_string()]);
    }
    args
}

/// The contender's one write: acquire (once the paused holder's keys expired), then a
/// fenced write bounded by its lease.
async fn contender_write(
    client: &Redlock,
    rec: &mut PgRec,
    conns: &mut Conns,
    resource: &str,
) -> PgOp {
    rec.acq_start();
    let lease = client.acquire(resource).await.unwrap();
    rec.acq_ok(&lease);
    let token = lease.fencing_token().unwrap().get();
    let budget = lease.remaining();
    let end = write(
        None,
        conns,
        resource,
        token,
        &FenceOptions::new(budget),
        budget,
        &Pauses::default(),
        &rec.op_id(),
        "contender",
    )
    .await;
    rec.leave(&end, lease).await;
    PgOp {
        op_id: rec.op_id(),
        resource: resource.to_owned(),
        token,
        end,
    }
}

/// Ends a scenario: the database checker's findings go into the report line, then the
/// lock's checkers run; the report must be clean.
async fn finish(env: Env, db: &Db, resources: &[String], ops: &[PgOp]) -> (Outcome, DbReport) {
    let report = check_db(&db.observer, resources, ops).await;
    let mut env = env;
    env.note(report.summary());
    for note in report.notes.iter().take(3) {
        env.note(note.clone());
    }
    let outcome = env.finish(Workers::none(), Checks::SCRIPTED).await;
    (outcome, report)
}

/// P1a: a holder is frozen (`SIGSTOP`) past its TTL after acquiring, before its
/// transaction; another client acquires, claims and commits meanwhile. Thawed, the late
/// holder's claim is refused: the lock-overlap checker fires, the data loses nothing.
pub async fn p1a() -> (Outcome, DbReport) {
    let (env, db, resources) = setup(
        "P1a",
        "holder SIGSTOPped past its TTL before its claim",
        Expect::Detect(Checker::Overlap),
        1,
    )
    .await;
    let resource = resources[0].clone();
    let holder = Holder::spawn(
        "P1a-holder",
        &holder_args(&env, &db, &resource, "before-claim", None),
        &env.history,
    );
    holder.wait_stopped().await;
    let contender = fenced_client(env.urls(), CONTENDER_TTL);
    let mut rec = PgRec::new(&env.history, "P1a-contender", &resource);
    let mut conns = Conns::new(&db.server.config());
    let newer = contender_write(&contender, &mut rec, &mut conns, &resource).await;
    holder.resume();
    let late = holder.finish(&resource).await;
    let ops = [late.clone(), newer.clone()];
    let (outcome, report) = finish(env, &db, &resources, &ops).await;
    assert_eq!(newer.end, End::Committed, "{}", outcome.line);
    assert_eq!(
        late.end,
        End::Refused(newer.token),
        "the late holder must be refused: {}",
        outcome.line
    );
    (outcome, report)
}

/// P1b: a holder is frozen right after its claim, inside its transaction, past its TTL; a
/// contender acquires and its claim waits for the frozen holder's row lock (seen in
/// `pg_stat_activity`). With `resume_first`, the holder is thawed while the contender
/// waits: past its budget, it gives up before COMMIT (`TimedOut`) and its transaction
/// rolls back, then the contender's claim is granted (a newer token) and it writes.
/// Otherwise the holder's idle timeout (twice its TTL) ends
/// its session: the contender writes, and the thawed holder's write fails. Either way the
/// contender never writes before the holder's transaction ended.
pub async fn p1b(resume_first: bool) -> (Outcome, DbReport) {
    let (code, name) = if resume_first {
        ("P1b", "holder SIGSTOPped between claim and commit, thawed")
    } else {
        (
            "P1b",
            "holder SIGSTOPped between claim and commit, timed out",
        )
    };
    let (mut env, db, resources) = setup(code, name, Expect::Detect(Checker::Overlap), 1).await;
    let resource = resources[0].clone();
    let holder = Holder::spawn(
        if resume_first {
            "P1b-thawed"
        } else {
            "P1b-timedout"
        },
        &holder_args(&env, &db, &resource, "after-claim", Some(HOLDER_TTL * 2)),
        &env.history,
    );
    let holder_backend = holder.wait_stopped().await;
    let contender = fenced_client(env.urls(), CONTENDER_TTL);
    let mut rec = PgRec::new(&env.history, &format!("{code}-contender"), &resource);
    let mut conns = Conns::new(&db.server.config());
    assert!(conns.ready().await);
    let contender_backend: i32 = conns
        .main
        .as_ref()
        .unwrap()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel::<bool>();
    let observer_config = db.server.config();
    let watcher = tokio::spawn(async move {
        // Polls until the contender waits for a lock while the holder's backend lives,
        // or the contender is done; bounded.
        let observer = connect(&observer_config).await;
        for _ in 0..2000 {
            let row = observer
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 \
                                    AND wait_event_type = 'Lock'), \
                            EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $2)",
                    &[&contender_backend, &holder_backend],
                )
                .await
                .unwrap();
            if row.get::<_, bool>(0) && row.get::<_, bool>(1) {
                let _ = blocked_tx.send(true);
                return;
            }
            sleep(Duration::from_millis(5)).await;
        }
        let _ = blocked_tx.send(false);
    });
    let writing =
        tokio::spawn(
            async move { contender_write(&contender, &mut rec, &mut conns, &resource).await },
        );
    let blocked = blocked_rx.await.unwrap_or(false);
    let resource = resources[0].clone();
    if resume_first {
        holder.resume();
    }
    let newer = writing.await.unwrap();
    let holder_alive_after: bool = db
        .observer
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)",
            &[&holder_backend],
        )
        .await
        .unwrap()
        .get(0);
    if !resume_first {
        holder.resume();
    }
    let paused = holder.finish(&resource).await;
    watcher.abort();
    env.note(format!(
        "contender seen waiting for the paused holder's row lock: {blocked}"
    ));
    if !blocked {
        env.violation("the contender never waited behind the paused holder");
    }
    if !resume_first && holder_alive_after {
        env.violation("the contender wrote while the timed-out holder's session lived");
    }
    let ops = [paused.clone(), newer.clone()];
    // The order of the two commits, read from the database.
    let order: Vec<String> = db
        .observer
        .query(
            "SELECT op_id FROM audit WHERE resource = $1 ORDER BY pg_xact_commit_timestamp(xmin)",
            &[&resource],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (outcome, report) = finish(env, &db, &resources, &ops).await;
    assert!(blocked, "P1b did not reach its case: {}", outcome.line);
    assert_eq!(newer.end, End::Committed, "{}", outcome.line);
    if resume_first {
        // Thawed past its lease, the holder is cut by its budget before COMMIT: its
        // transaction rolls back, and the contender, which waited for its row lock,
        // writes alone.
        assert_eq!(
            paused.end,
            End::Failed("TimedOut".to_owned()),
            "{}",
            outcome.line
        );
        assert_eq!(
            order,
            std::slice::from_ref(&newer.op_id),
            "{}",
            outcome.line
        );
    } else {
        assert!(
            matches!(&paused.end, End::Failed(k) if k == "TimedOut" || k == "Connection"),
            "{:?}: {}",
            paused.end,
            outcome.line
        );
        assert_eq!(
            order,
            std::slice::from_ref(&newer.op_id),
            "{}",
            outcome.line
        );
    }
    (outcome, report)
}

/// Draws a write's pauses: with probability `odds` in 100 it pauses at one of the three
/// points, for 0.8 to 1.6 times `ttl` (past its lease, nearly always).
fn draw_pauses(rng: &mut Rng, odds: u64, ttl: Duration) -> Pauses {
    let mut pauses = Pauses::default();
    if rng.below(100) >= odds {
        return pauses;
    }
    let d = Pause::For(rng.between(ttl * 4 / 5, ttl * 8 / 5));
    match rng.below(3) {
        0 => pauses.before_claim = d,
        1 => pauses.read_to_write = d,
        _ => pauses.write_to_commit = d,
    }
    pauses
}

/// The chance in 100 that a write of P2 and P3 pauses.
const PAUSE_ODDS: u64 = 45;

/// One in-process contender of P2 and P3, until `stop`.
#[allow(clippy::too_many_arguments)]
async fn contender_loop(
    client: Redlock,
    mut rec: PgRec,
    config: String,
    ops: Arc<Mutex<Vec<PgOp>>>,
    stop: Arc<AtomicBool>,
    seed: u64,
    odds: u64,
) {
    let mut rng = Rng::new(seed);
    let mut conns = Conns::new(&config);
    let resource = rec.resource.clone();
    for _ in 0..10_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        rec.acq_start();
        let lease = match client.acquire(&resource).await {
            Ok(lease) => lease,
            Err(e) => {
                rec.acq_fail(&e);
                sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        rec.acq_ok(&lease);
        let token = lease.fencing_token().unwrap().get();
        let budget = lease.remaining();
        let pauses = draw_pauses(&mut rng, odds, TTL);
        let op_id = rec.op_id();
        let end = write(
            None,
            &mut conns,
            &resource,
            token,
            &FenceOptions::new(budget),
            budget,
            &pauses,
            &op_id,
            &rec.client,
        )
        .await;
        rec.leave(&end, lease).await;
        ops.lock().unwrap().push(PgOp {
            op_id,
            resource: resource.clone(),
            token,
            end,
        });
        sleep(rng.between(Duration::ZERO, Duration::from_millis(20))).await;
    }
}

/// P2 (and P3 with `kills`): four contenders over two resources with random pauses
/// (before the claim, between read and write, between write and commit) for the fault
/// phase (at least 4 s); with `kills`, PostgreSQL is killed and restarted that many times
/// meanwhile, each time with a transaction in flight.
pub async fn p2(kills: u32) -> (Outcome, DbReport) {
    let (code, name) = if kills == 0 {
        ("P2", "contenders paused around their claims")
    } else {
        ("P3", "PostgreSQL killed and restarted mid-run")
    };
    let (mut env, mut db, resources) = setup(code, name, Expect::Detect(Checker::Overlap), 2).await;
    let urls = env.urls();
    settle(&fenced_client(urls.clone(), TTL), &env.prefix).await;
    let ops = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let resource = &resources[i % resources.len()];
        let rec = PgRec::new(&env.history, &format!("{code}-w{i}"), resource);
        tasks.push(tokio::spawn(contender_loop(
            fenced_client(urls.clone(), TTL),
            rec,
            db.server.config(),
            Arc::clone(&ops),
            Arc::clone(&stop),
            env.rng.next_u64(),
            PAUSE_ODDS,
        )));
    }
    let phase = phase().max(Duration::from_secs(4));
    let end = Instant::now() + phase;
    let (mut killed, mut in_flight) = (0, 0);
    let started = Instant::now();
    for k in 0..kills {
        let at = started + phase * (k + 1) / (kills + 1);
        tokio::time::sleep_until(at.min(end)).await;
        // Only a kill with transactions in flight tests anything: wait for one (bounded).
        for _ in 0..400 {
            let busy: i64 = db
                .observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE state LIKE 'idle in transaction%' OR wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .map_or(0, |r| r.get(0));
            if busy > 0 {
                in_flight += 1;
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        db.server.kill().unwrap();
        killed += 1;
        sleep(Duration::from_millis(100)).await;
        db.server.restart().await.unwrap();
        db.reconnect().await;
    }
    tokio::time::sleep_until(end).await;
    // The soak runs on, up to four more phases, until a stale writer was refused: the case
    // the scenario exists for.
    let reached = |ops: &Mutex<Vec<PgOp>>| {
        ops.lock()
            .unwrap()
            .iter()
            .filter(|op| matches!(op.end, End::Refused(_)))
            .count()
            >= 1
    };
    let overtime = Instant::now() + phase * 4;
    while !reached(&ops) && Instant::now() < overtime {
        sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        timeout(TTL * 4 + Duration::from_secs(10), task)
            .await
            .expect("a contender did not stop")
            .expect("a contender panicked");
    }
    let ops = ops.lock().unwrap().clone();
    let cut = ops
        .iter()
        .filter(|op| {
            matches!(&op.end, End::Unknown(_))
                || matches!(&op.end, End::Failed(k) if k == "Connection" || k == "no connection")
        })
        .count();
    if kills > 0 {
        env.note(format!(
            "{killed} kill(s), {in_flight} with transactions in flight; {cut} write(s) cut \
             (by kills or idle timeouts)"
        ));
    }
    let refused = ops
        .iter()
        .filter(|op| matches!(op.end, End::Refused(_)))
        .count();
    let (outcome, report) = finish(env, &db, &resources, &ops).await;
    assert!(
        refused > 0,
        "{code} did not reach its case (no refusal): {}",
        outcome.line
    );
    assert_eq!(
        in_flight, kills,
        "P3 killed the server without a transaction in flight: {}",
        outcome.line
    );
    (outcome, report)
}

fn assert_clean(outcome: &Outcome, report: &DbReport) {
    outcome.check();
    assert_eq!(
        outcome.token_violations, 0,
        "lock tokens misbehaved: {}",
        outcome.line
    );
    assert_eq!(
        report.violations(),
        0,
        "the database lost or misordered data: {}\n{:#?}",
        outcome.line,
        report.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1a_holder_paused_before_its_claim_is_refused() {
    let (outcome, report) = p1a().await;
    assert_clean(&outcome, &report);
    assert_eq!(report.refused, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1b_holder_paused_after_its_claim_serializes_the_next_writer() {
    for resume_first in [true, false] {
        let (outcome, report) = p1b(resume_first).await;
        assert_clean(&outcome, &report);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_paused_contenders_lose_no_update() {
    let (outcome, report) = p2(0).await;
    assert_clean(&outcome, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_postgres_killed_and_restarted_keeps_tokens_in_order() {
    let (outcome, report) = p2(2).await;
    assert_clean(&outcome, &report);
}

/// The scripted interleavings of two writers X (the older token) and Y (the newer), each
/// reaching one race exactly (docs/testing.md §3: a deterministic script per case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// X claims and reads, then pauses (its idle timeout generous) past its lease; Y
    /// writes. The product: Y's claim waits for X's row lock until X writes and commits.
    PausedAfterRead,
    /// The same, X's idle timeout its lease: the server ends X's session, Y writes, and
    /// X's write fails.
    IdleAfterRead,
    /// X pauses before its claim past its lease; Y writes and commits; X claims: refused.
    StaleClaim,
    /// X pauses before its claim past its lease; Y claims and writes, then pauses before
    /// its commit; X's claim waits for Y's row lock, and is refused once Y commits.
    StaleClaimBehindWriter,
}

impl Case {
    pub const ALL: [Case; 4] = [
        Case::PausedAfterRead,
        Case::IdleAfterRead,
        Case::StaleClaim,
        Case::StaleClaimBehindWriter,
    ];
}

/// The TTL of X's lease in the scripts: short, so Y gets in soon.
const SCRIPT_TTL: Duration = Duration::from_millis(400);
/// Generous timeouts of a scripted writer that must wait behind the other.
const SCRIPT_PATIENCE: Duration = Duration::from_secs(5);

/// The backend of a writer's main connection.
async fn backend(conns: &mut Conns) -> i32 {
    assert!(conns.ready().await, "no connection to PostgreSQL");
    conns
        .main
        .as_ref()
        .unwrap()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits (bounded) until backend `pid` waits for a lock, or `done` is set; whether it was
/// seen waiting.
async fn seen_waiting(observer: &Client, pid: i32, done: &AtomicBool) -> bool {
    for _ in 0..4000 {
        let waiting: bool = observer
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 \
                                AND wait_event_type = 'Lock')",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting {
            return true;
        }
        if done.load(Ordering::SeqCst) {
            return false;
        }
        sleep(Duration::from_millis(5)).await;
    }
    false
}

/// A scripted writer: acquires, then writes with `pauses` when told to.
struct Scripted {
    client: Redlock,
    rec: PgRec,
    conns: Conns,
    lease: Option<redquorum::Lease>,
    token: u64,
    options: FenceOptions,
    budget: Duration,
}

impl Scripted {
    async fn acquire(client: Redlock, mut rec: PgRec, config: &str, patient: bool) -> Scripted {
        rec.acq_start();
        let resource = rec.resource.clone();
        let lease = client.acquire(&resource).await.unwrap();
        rec.acq_ok(&lease);
        let budget = lease.remaining();
        let options = if patient {
            FenceOptions::new(SCRIPT_PATIENCE)
        } else {
            FenceOptions::new(budget)
        };
        Scripted {
            client,
            rec,
            conns: Conns::new(config),
            token: lease.fencing_token().unwrap().get(),
            lease: Some(lease),
            options,
            budget: if patient { SCRIPT_PATIENCE } else { budget },
        }
    }

    async fn write(mut self, plant: Option<Plant>, pauses: Pauses, done: Arc<AtomicBool>) -> PgOp {
        let resource = self.rec.resource.clone();
        let op_id = self.rec.op_id();
        let writer = self.rec.client.clone();
        let end = write(
            plant,
            &mut self.conns,
            &resource,
            self.token,
            &self.options,
            self.budget,
            &pauses,
            &op_id,
            &writer,
        )
        .await;
        done.store(true, Ordering::SeqCst);
        if let Some(lease) = self.lease.take() {
            self.rec.leave(&end, lease).await;
        }
        drop(self.client);
        PgOp {
            op_id,
            resource,
            token: self.token,
            end,
        }
    }
}

/// Runs `case` on `resource` with `plant` (or the product): the two writes, and whether
/// the case's interesting interleaving was reached.
async fn run_case(
    env: &Env,
    db: &Db,
    resource: &str,
    case: Case,
    plant: Option<Plant>,
) -> (Vec<PgOp>, bool) {
    let urls = env.urls();
    let config = db.server.config();
    let tag = resource.rsplit(':').next().unwrap_or("r");
    let x_rec = PgRec::new(&env.history, &format!("P4-{tag}-x"), resource);
    let y_rec = PgRec::new(&env.history, &format!("P4-{tag}-y"), resource);
    let patient_x = case != Case::IdleAfterRead;
    let mut x = Scripted::acquire(
        fenced_client(urls.clone(), SCRIPT_TTL),
        x_rec,
        &config,
        patient_x,
    )
    .await;
    let x_backend = backend(&mut x.conns).await;
    let (x_key, x_gate) = gate();
    let x_done = Arc::new(AtomicBool::new(false));
    let y_done = Arc::new(AtomicBool::new(false));
    let y_client = fenced_client(urls, CONTENDER_TTL);
    match case {
        Case::PausedAfterRead | Case::IdleAfterRead => {
            let pauses = Pauses {
                read_to_write: Pause::Until(x_gate),
                ..Pauses::default()
            };
            let x_task = tokio::spawn(x.write(plant, pauses, Arc::clone(&x_done)));
            x_key.wait_arrived().await;
            // Y gets the lock once X's lease ran out.
            let mut y = Scripted::acquire(y_client, y_rec, &config, true).await;
            let y_backend = backend(&mut y.conns).await;
            let y_task = tokio::spawn(y.write(plant, Pauses::default(), Arc::clone(&y_done)));
            let reached = if case == Case::PausedAfterRead {
                // Interesting: Y waits for X's row lock while X is paused.
                let blocked = seen_waiting(&db.observer, y_backend, &y_done).await;
                x_key.open();
                blocked
            } else {
                // Interesting: Y writes while X is still paused (its session ended).
                let y_op = timeout(Duration::from_secs(20), y_task)
                    .await
                    .unwrap()
                    .unwrap();
                x_key.open();
                let x_op = x_task.await.unwrap();
                let reached = y_op.end == End::Committed && x_op.end != End::Committed;
                return (vec![x_op, y_op], reached);
            };
            let x_op = x_task.await.unwrap();
            let y_op = timeout(Duration::from_secs(20), y_task)
                .await
                .unwrap()
                .unwrap();
            (vec![x_op, y_op], reached)
        }
        Case::StaleClaim => {
            let y = Scripted::acquire(y_client, y_rec, &config, true).await;
            let y_op = y.write(plant, Pauses::default(), Arc::clone(&y_done)).await;
            let x_op = x.write(plant, Pauses::default(), Arc::clone(&x_done)).await;
            let reached = y_op.end == End::Committed;
            (vec![x_op, y_op], reached)
        }
        Case::StaleClaimBehindWriter => {
            let mut y = Scripted::acquire(y_client, y_rec, &config, true).await;
            let _ = backend(&mut y.conns).await;
            let (y_key, y_gate) = gate();
            let pauses = Pauses {
                write_to_commit: Pause::Until(y_gate),
                ..Pauses::default()
            };
            let y_task = tokio::spawn(y.write(plant, pauses, Arc::clone(&y_done)));
            y_key.wait_arrived().await;
            let x_task = tokio::spawn(x.write(plant, Pauses::default(), Arc::clone(&x_done)));
            // Interesting: X's claim waits for Y's row lock.
            let blocked = seen_waiting(&db.observer, x_backend, &x_done).await;
            y_key.open();
            let y_op = timeout(Duration::from_secs(20), y_task)
                .await
                .unwrap()
                .unwrap();
            let x_op = timeout(Duration::from_secs(20), x_task)
                .await
                .unwrap()
                .unwrap();
            (vec![x_op, y_op], blocked)
        }
    }
}

/// P4: every scripted case, with `plant` or the product, on its own resource of one
/// environment; the database checker's report, and the cases not reached.
pub async fn p4(plant: Option<Plant>) -> (Outcome, DbReport, Vec<Case>) {
    let name = match plant {
        None => "scripted interleavings of two writers".to_owned(),
        Some(p) => format!("scripted interleavings of two writers [planted {p:?}]"),
    };
    let (env, db, resources) = setup(
        "P4",
        &name,
        Expect::Detect(Checker::Overlap),
        Case::ALL.len(),
    )
    .await;
    let mut ops = Vec::new();
    let mut missed = Vec::new();
    for (case, resource) in Case::ALL.into_iter().zip(&resources) {
        let (case_ops, reached) = run_case(&env, &db, resource, case, plant).await;
        if !reached {
            missed.push(case);
        }
        ops.extend(case_ops);
    }
    let (outcome, report) = finish(env, &db, &resources, &ops).await;
    (outcome, report, missed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_scripted_interleavings_lose_nothing() {
    let (outcome, report, missed) = p4(None).await;
    assert!(
        missed.is_empty(),
        "cases not reached: {missed:?}: {}",
        outcome.line
    );
    assert_clean(&outcome, &report);
    assert!(report.refused >= 2, "{}", outcome.line);
}

/// Each planted bug must be caught by the database checker in the scripted cases, where
/// the product is clean (see `p4_scripted_interleavings_lose_nothing`).
// Checks I13 (fenced writes commit in token order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_sql_bugs_are_caught() {
    let mut caught = Vec::new();
    for plant in Plant::ALL {
        let (outcome, report, _) = p4(Some(plant)).await;
        assert!(
            report.violations() > 0,
            "planted {plant:?} was not caught: {}",
            outcome.line
        );
        caught.push(format!(
            "{plant:?} ({})",
            report.notes.first().cloned().unwrap_or_default()
        ));
    }
    let line = format!(
        "P4   planted SQL bugs caught: {} of {}: {}",
        caught.len(),
        Plant::ALL.len(),
        caught.join("; ")
    );
    eprintln!("[chaos] {line}");
    append_report(&line);
}
