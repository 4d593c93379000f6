//! The masters' health check, [`Redlock::check_masters`](crate::Redlock::check_masters):
//! what each master is (reachable, server version, role, persistence, eviction, round
//! trip, clock, cluster record) and whether this client counts its votes, with every
//! problem stated as a sentence saying what to change.
//!
//! One concurrent round of reads: each master is probed on a connection of its own (the
//! connect timeout, then one pipeline within the node timeout; `Master::probe`), and
//! nothing is written. The judgement is pure: each master on its own (`describe`), then
//! across masters (clocks, independence, cluster ids), testable without Redis.
//!
//! Layer: beside the round (docs/design.md §10): it uses the masters and the settings,
//! never the round, the core, leases or the facade.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::deadline;
use crate::error::{MasterError, MasterErrorKind, human};
use crate::master::{Master, Probe};
use crate::quarantine::{Standing, eviction_risk};

/// The oldest server the lock runs on: Redis 5.0.0.
///
/// The scripts read `TIME` and then write (`acquire.lua`, `extend.lua`, `epoch.lua`).
/// Before 5.0 a script was replicated verbatim by default, so a write after a
/// non-deterministic command such as `TIME` fails ("Write commands not allowed after non
/// deterministic commands"); from 5.0 on its effects are replicated instead. Everything
/// else the client sends is older: `SET .. NX PX` (2.6.12), `EVALSHA` and `SCRIPT LOAD`
/// (2.6), `PEXPIRE` and `PTTL` (2.6), `PUBLISH` (2.0), `HSET` with several fields (4.0).
const MIN_VERSION: Version = Version(5, 0, 0);

/// The key of the cluster record under `prefix`.
fn record_key(prefix: &str) -> String {
    format!("{prefix}redquorum:cluster")
}

/// What [`Redlock::check_masters`](crate::Redlock::check_masters) found: one
/// [`MasterHealth`] per master, in the configured order.
///
/// [`is_healthy`](Self::is_healthy) is true when no master has a problem; notes (things
/// worth knowing that need no change) do not count. `Display` prints a readable list,
/// one master after the other, each problem and note a sentence saying what to change.
/// Addresses are shown with their passwords replaced by `***`, in `Debug` output too.
#[derive(Debug, Clone)]
pub struct HealthReport {
    masters: Vec<MasterHealth>,
    quorum: usize,
}

impl HealthReport {
    /// Every master, in the configured order.
    pub fn masters(&self) -> &[MasterHealth] {
        &self.masters
    }

    /// How many masters must agree for a lock: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many masters may fail with locks still granted: `N - quorum`. Two masters
    /// tolerate none (a quorum of 2 of 2), no more than one alone, and `Display` notes it.
    pub fn tolerates(&self) -> usize {
        self.masters.len().saturating_sub(self.quorum)
    }

    /// The note on the masters as a whole, if any: two masters tolerate no failure.
    fn fragile(&self) -> Option<String> {
        (self.masters.len() == 2).then(|| {
            format!(
                "2 masters with a quorum of {} tolerate no failure: one master down stops every \
                 lock; use 3 or 5 independent masters",
                self.quorum
            )
        })
    }

    /// Whether no master has a problem. Notes do not count.
    pub fn is_healthy(&self) -> bool {
        self.masters.iter().all(MasterHealth::is_healthy)
    }

    /// How many masters answered.
    pub fn reachable(&self) -> usize {
        self.masters.iter().filter(|m| m.is_reachable()).count()
    }

    /// Every problem, with the address of its master (password redacted).
    pub fn problems(&self) -> impl Iterator<Item = (&str, &Finding)> + '_ {
        self.masters
            .iter()
            .flat_map(|m| m.problems().map(move |f| (m.master(), f)))
    }
}

impl fmt::Display for HealthReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems = self.problems().count();
        let fragile = self.fragile();
        let notes: usize = self.masters.iter().map(|m| m.findings.len()).sum::<usize>() - problems
            + usize::from(fragile.is_some());
        writeln!(
            f,
            "{} masters, quorum {}: {} reachable, {} ({} {}, {} {})",
            self.masters.len(),
            self.quorum,
            self.reachable(),
            if problems == 0 {
                "healthy"
            } else {
                "unhealthy"
            },
            problems,
            plural(problems, "problem", "problems"),
            notes,
            plural(notes, "note", "notes"),
        )?;
        if let Some(fragile) = fragile {
            writeln!(f, "   {}: {fragile}", Severity::Note)?;
        }
        for (i, master) in self.masters.iter().enumerate() {
            write!(f, "{}. {master}", i + 1)?;
        }
        Ok(())
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// One master's health, as part of a [`HealthReport`].
///
/// The settings read from the master are `None` when it did not answer, or when this
/// client's user may not read them (ACLs, a renamed `CONFIG`): then a note says so.
#[derive(Debug, Clone)]
pub struct MasterHealth {
    name: Arc<str>,
    error: Option<MasterError>,
    version: Option<String>,
    run_id: Option<String>,
    uptime: Option<Duration>,
    role: Option<Role>,
    appendonly: Option<bool>,
    appendfsync: Option<String>,
    maxmemory: Option<u64>,
    maxmemory_policy: Option<String>,
    round_trip: Option<Duration>,
    client_offset: Option<ClockOffset>,
    clock_offset: Option<ClockOffset>,
    quarantine: QuarantineState,
    record: Option<ClusterRecord>,
    findings: Vec<Finding>,
}

impl MasterHealth {
    /// The master's address as configured, with any password replaced by `***`.
    pub fn master(&self) -> &str {
        &self.name
    }

    /// Whether the master answered.
    pub fn is_reachable(&self) -> bool {
        self.error.is_none()
    }

    /// Why the master could not be checked, when it could not.
    pub fn error(&self) -> Option<&MasterError> {
        self.error.as_ref()
    }

    /// Whether the master has no problem (notes do not count).
    pub fn is_healthy(&self) -> bool {
        !self.findings.iter().any(Finding::is_problem)
    }

    /// Everything found, problems and notes, each a sentence saying what to change.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// The problems among the [`findings`](Self::findings).
    pub fn problems(&self) -> impl Iterator<Item = &Finding> + '_ {
        self.findings.iter().filter(|f| f.is_problem())
    }

    /// The server's version (`redis_version` of `INFO server`), such as `"7.0.15"`.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The server process's id (`run_id`): it changes with every restart.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// How long the server process has run.
    pub fn uptime(&self) -> Option<Duration> {
        self.uptime
    }

    /// Whether the server is a master or a replica.
    pub fn role(&self) -> Option<Role> {
        self.role
    }

    /// `appendonly`: whether the server writes an append-only file.
    pub fn appendonly(&self) -> Option<bool> {
        self.appendonly
    }

    /// `appendfsync`: `"always"`, `"everysec"` or `"no"`; `None` when `CONFIG GET` is
    /// renamed away or forbidden for this client's user.
    pub fn appendfsync(&self) -> Option<&str> {
        self.appendfsync.as_deref()
    }

    /// Whether the master is durable, as restart quarantine and fencing take it:
    /// `appendonly yes` with `appendfsync always`. `false` when either is unknown.
    pub fn is_durable(&self) -> bool {
        self.appendonly == Some(true) && self.appendfsync.as_deref() == Some("always")
    }

    /// `maxmemory` in bytes (0: no limit).
    pub fn maxmemory(&self) -> Option<u64> {
        self.maxmemory
    }

    /// `maxmemory-policy`, such as `"noeviction"`.
    pub fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// The round trip of the probe's one pipeline, on this client's monotonic clock.
    pub fn round_trip(&self) -> Option<Duration> {
        self.round_trip
    }

    /// How far the master's clock (`TIME`) is from the median of the other masters'
    /// clocks; `None` when it or every other master's clock is unknown. Each clock is
    /// read against this client's wall clock at the midpoint of its round trip, so the
    /// figure is uncertain by up to half of each round trip involved.
    pub fn clock_offset(&self) -> Option<ClockOffset> {
        self.clock_offset
    }

    /// How far the master's clock is from this client's wall clock, read at the midpoint
    /// of the round trip (uncertain by up to half of it).
    pub fn client_clock_offset(&self) -> Option<ClockOffset> {
        self.client_offset
    }

    /// Whether this client counts the master's votes now (restart quarantine).
    pub fn quarantine(&self) -> QuarantineState {
        self.quarantine
    }

    /// The master's cluster record, when it has one.
    pub fn cluster_record(&self) -> Option<&ClusterRecord> {
        self.record.as_ref()
    }

    fn push(&mut self, check: Check, severity: Severity, message: String) {
        self.findings.push(Finding {
            check,
            severity,
            message,
        });
    }
}

impl fmt::Display for MasterHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            Some(_) => writeln!(
                f,
                "{}: unreachable\n   votes: {}",
                self.name, self.quarantine
            )?,
            None => {
                let unknown = || "unknown".to_owned();
                write!(
                    f,
                    "{}: Redis {}, {}, round trip {}",
                    self.name,
                    self.version.clone().unwrap_or_else(unknown),
                    self.role.map_or("role unknown", Role::as_str),
                    self.round_trip.map_or_else(unknown, human),
                )?;
                match self.clock_offset {
                    Some(offset) => writeln!(f, ", clock {offset} the others")?,
                    None => writeln!(f)?,
                }
                let yes_no = |b: bool| if b { "yes" } else { "no" };
                writeln!(
                    f,
                    "   appendonly {}, appendfsync {}; maxmemory {}, {}",
                    self.appendonly.map_or("unknown", yes_no),
                    self.appendfsync.as_deref().unwrap_or("unknown"),
                    self.maxmemory.map_or_else(unknown, |m| if m == 0 {
                        "none".to_owned()
                    } else {
                        m.to_string()
                    }),
                    self.maxmemory_policy.as_deref().unwrap_or("policy unknown"),
                )?;
                match &self.record {
                    Some(record) => {
                        writeln!(f, "   votes: {}; cluster record: {record}", self.quarantine)?
                    }
                    None => writeln!(f, "   votes: {}; no cluster record", self.quarantine)?,
                }
            }
        }
        for finding in &self.findings {
            writeln!(f, "   {}: {finding}", finding.severity)?;
        }
        Ok(())
    }
}

/// Whether a server is a master or a replica (`role` of `INFO replication`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// A master: it takes writes.
    Master,
    /// A replica of another server: it refuses writes, so it never votes.
    Replica,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Replica => "replica",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether this client counts a master's votes (restart quarantine, docs/design.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuarantineState {
    /// Restart quarantine is off for this client: every answer counts.
    Off,
    /// Not judged yet: this client has not connected to the master (its first request
    /// reads the master's data epoch; it abstains until then).
    Unknown,
    /// It votes.
    Counted,
    /// It abstains until the instant given: it is new to this client, or may have lost
    /// lock keys.
    Abstains {
        /// When it votes again, as far as is known now.
        until: Instant,
    },
    /// It never votes: when this client connected, its settings could evict lock keys.
    Misconfigured,
}

impl QuarantineState {
    fn from_standing(standing: Option<Standing>, now: Instant) -> Self {
        match standing {
            None => QuarantineState::Off,
            Some(Standing::Counted) => QuarantineState::Counted,
            Some(Standing::Misconfigured) => QuarantineState::Misconfigured,
            // A master whose vitals were never read abstains "until now".
            Some(Standing::Abstains(until)) if until <= now => QuarantineState::Unknown,
            Some(Standing::Abstains(until)) => QuarantineState::Abstains { until },
        }
    }
}

impl fmt::Display for QuarantineState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuarantineState::Off => f.write_str("always (restart quarantine is off)"),
            QuarantineState::Unknown => f.write_str("not judged yet (not connected)"),
            QuarantineState::Counted => f.write_str("yes"),
            QuarantineState::Abstains { until } => write!(
                f,
                "not for another {} (restart quarantine)",
                human(until.saturating_duration_since(Instant::now()))
            ),
            QuarantineState::Misconfigured => f.write_str("never (it can evict lock keys)"),
        }
    }
}

/// How far one clock is from another: ahead or behind, by how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClockOffset {
    /// Signed; positive when ahead.
    micros: i64,
}

impl ClockOffset {
    fn from_micros(micros: i128) -> Self {
        let micros = i64::try_from(micros).unwrap_or(if micros < 0 { i64::MIN } else { i64::MAX });
        Self { micros }
    }

    /// Whether the clock is ahead of the other.
    pub fn is_ahead(self) -> bool {
        self.micros > 0
    }

    /// By how much, ahead or behind.
    pub fn magnitude(self) -> Duration {
        Duration::from_micros(self.micros.unsigned_abs())
    }
}

impl fmt::Display for ClockOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.micros {
            0 => f.write_str("in step with"),
            m if m > 0 => write!(f, "{} ahead of", human(self.magnitude())),
            _ => write!(f, "{} behind", human(self.magnitude())),
        }
    }
}

/// A master's cluster record, as read: the hash at `<key_prefix>redquorum:cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRecord {
    fields: BTreeMap<String, String>,
}

impl ClusterRecord {
    /// Every field of the record, as stored.
    pub fn fields(&self) -> &BTreeMap<String, String> {
        &self.fields
    }

    /// One field of the record.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }

    /// The version of the record (`version`).
    pub fn version(&self) -> Option<&str> {
        self.get("version")
    }

    /// The id of the cluster the master belongs to (`cluster`).
    pub fn cluster(&self) -> Option<&str> {
        self.get("cluster")
    }

    /// The master's own id (`master`).
    pub fn master(&self) -> Option<&str> {
        self.get("master")
    }

    /// Whether the master kept its fence counters (`counters`: `"kept"` or `"lost"`).
    pub fn counters(&self) -> Option<&str> {
        self.get("counters")
    }
}

impl fmt::Display for ClusterRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = |name| self.get(name).unwrap_or("?");
        write!(
            f,
            "version {}, cluster {}, master {}, counters {}",
            field("version"),
            field("cluster"),
            field("master"),
            field("counters")
        )
    }
}

/// One thing the check found about a master: a problem to fix, or a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    check: Check,
    severity: Severity,
    message: String,
}

impl Finding {
    /// What was checked.
    pub fn check(&self) -> Check {
        self.check
    }

    /// Whether it is a problem or a note.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// Whether it is a problem (it makes the report unhealthy).
    pub fn is_problem(&self) -> bool {
        self.severity == Severity::Problem
    }

    /// What was found and what to change, as one sentence.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How much a [`Finding`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; nothing must change.
    Note,
    /// The master cannot do its part, or can break a promise of the lock: change what
    /// the message says.
    Problem,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Problem => "problem",
        })
    }
}

/// What a [`Finding`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Check {
    /// Whether the master answered at all.
    Reachable,
    /// The server's version: the scripts need Redis 5.0 or later.
    Version,
    /// Master or replica, standalone or cluster mode, replicas attached.
    Role,
    /// `appendonly` and `appendfsync`.
    Persistence,
    /// `maxmemory` and `maxmemory-policy`.
    Eviction,
    /// The master's clock against the others'.
    Clock,
    /// Whether this client counts its votes (restart quarantine).
    Quarantine,
    /// The cluster record.
    ClusterRecord,
    /// Two configured addresses that reach the same server.
    Independence,
}

/// What the judgement needs to know of the client.
#[derive(Debug, Clone)]
struct Context {
    quarantine: bool,
    fencing: bool,
    record_key: Arc<str>,
    /// The drift allowance of the client's TTL: a clock step within it is covered.
    drift: Duration,
    /// The bound of one master's probe, for messages.
    bound: Duration,
}

/// Checks every master concurrently; see [`Redlock::check_masters`](crate::Redlock::check_masters).
pub(crate) async fn check(
    masters: &[Arc<dyn Master>],
    config: &Config,
    quorum: usize,
) -> HealthReport {
    let bound = config.connect_timeout.saturating_add(config.node_timeout);
    let context = Context {
        quarantine: config.quarantine,
        fencing: config.fencing,
        record_key: record_key(&config.key_prefix).into(),
        drift: deadline::drift(config.ttl, config.drift_factor),
        bound,
    };
    let probes: Vec<Result<Probe, MasterError>> = if tokio::runtime::Handle::try_current().is_ok() {
        futures::future::join_all(masters.iter().map(|master| {
            let probe = master.probe(Arc::clone(&context.record_key));
            async move {
                // Each probe bounds itself the same way; this bound holds whatever
                // the master.
                match tokio::time::timeout(bound, probe).await {
                    Ok(probe) => probe,
                    Err(_) => Err(MasterError::new(
                        MasterErrorKind::Timeout,
                        format!("no answer within {}", human(bound)),
                    )),
                }
            }
        }))
        .await
    } else {
        masters
            .iter()
            .map(|_| {
                Err(MasterError::new(
                    MasterErrorKind::Other,
                    "not checked: called outside a tokio runtime",
                ))
            })
            .collect()
    };
    let now = Instant::now();
    let entries = masters
        .iter()
        .zip(probes)
        .map(|(master, probe)| Entry {
            name: Arc::clone(master.name()),
            standing: master.standing(now),
            probe,
        })
        .collect();
    assemble(entries, &context, quorum, now)
}

/// What one master answered, and how this client stands with it.
struct Entry {
    name: Arc<str>,
    standing: Option<Standing>,
    probe: Result<Probe, MasterError>,
}

/// The report from what each master answered: each judged on its own, then against the
/// others.
fn assemble(entries: Vec<Entry>, context: &Context, quorum: usize, now: Instant) -> HealthReport {
    let mut masters: Vec<MasterHealth> = entries
        .into_iter()
        .map(|entry| {
            describe(
                entry.name,
                QuarantineState::from_standing(entry.standing, now),
                entry.probe,
                context,
            )
        })
        .collect();
    let offsets: Vec<Option<i128>> = masters
        .iter()
        .map(|m| m.client_offset.map(|o| i128::from(o.micros)))
        .collect();
    let round_trips: Vec<Option<Duration>> = masters.iter().map(|m| m.round_trip).collect();
    for (i, master) in masters.iter_mut().enumerate() {
        judge_clock(master, i, &offsets, &round_trips, context.drift);
    }
    judge_independence(&mut masters);
    judge_cluster_ids(&mut masters);
    HealthReport { masters, quorum }
}

/// One master on its own.
fn describe(
    name: Arc<str>,
    quarantine: QuarantineState,
    probe: Result<Probe, MasterError>,
    context: &Context,
) -> MasterHealth {
    let mut health = MasterHealth {
        name,
        error: None,
        version: None,
        run_id: None,
        uptime: None,
        role: None,
        appendonly: None,
        appendfsync: None,
        maxmemory: None,
        maxmemory_policy: None,
        round_trip: None,
        client_offset: None,
        clock_offset: None,
        quarantine,
        record: None,
        findings: Vec::new(),
    };
    let probe = match probe {
        Ok(probe) => probe,
        Err(error) => {
            let message = unreachable(&error, context.bound);
            health.push(Check::Reachable, Severity::Problem, message);
            health.error = Some(error);
            return health;
        }
    };
    health.round_trip = Some(probe.round_trip);
    let server = probe.server.as_deref().map(parse_info);
    let replication = probe.replication.as_deref().map(parse_info);
    let persistence = probe.persistence.as_deref().map(parse_info);
    let memory = probe.memory.as_deref().map(parse_info);
    if let Ok(info) = &server {
        health.version = info.get("redis_version").cloned();
        health.run_id = info.get("run_id").cloned();
        health.uptime = info
            .get("uptime_in_seconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs);
    }
    judge_version(&mut health, &server);
    judge_role(&mut health, &server, &replication);
    judge_persistence(&mut health, &persistence, &probe.config, context);
    judge_eviction(&mut health, &memory);
    judge_quarantine(&mut health);
    match (&probe.server_time_us, probe.client_time_us) {
        (Ok(server), Some(client)) => {
            health.client_offset = Some(ClockOffset::from_micros(
                i128::from(*server) - i128::from(client),
            ));
        }
        (Err(error), _) => health.push(
            Check::Clock,
            Severity::Note,
            format!("its clock is unknown (TIME: {error}): allow TIME for this client's user"),
        ),
        (Ok(_), None) => {}
    }
    if let Some(why) = &probe.refused {
        health.push(
            Check::ClusterRecord,
            Severity::Problem,
            format!("it does not vote for this client: {why}"),
        );
    }
    match probe.record {
        Ok(fields) if fields.is_empty() => health.push(
            Check::ClusterRecord,
            Severity::Note,
            format!(
                "no cluster record at {:?}: not initialised (see Redlock::init_cluster)",
                context.record_key
            ),
        ),
        Ok(fields) => health.record = Some(ClusterRecord { fields }),
        Err(error) => health.push(
            Check::ClusterRecord,
            Severity::Note,
            format!(
                "cannot read the cluster record at {:?} ({error}): allow HGETALL on it for \
                 this client's user",
                context.record_key
            ),
        ),
    }
    health
}

/// Why a master could not be checked, and what to change.
fn unreachable(error: &MasterError, bound: Duration) -> String {
    match error.kind() {
        MasterErrorKind::Auth => format!(
            "unreachable: it refused this client ({error}): fix the user and password in its \
             URL, or its ACLs"
        ),
        // The message says what to change (the CA, the host name, the certificate).
        MasterErrorKind::Tls => format!("unreachable over TLS: {error}"),
        MasterErrorKind::Timeout => format!(
            "unreachable: no answer within {} ({error}): check that it runs, is not paused or \
             overloaded, and that the network reaches it",
            human(bound)
        ),
        MasterErrorKind::Refused | MasterErrorKind::Io | MasterErrorKind::Down => {
            format!("unreachable ({error}): start it, or fix its address in the client's URL")
        }
        _ => format!("unreachable ({error}): see the master's log and fix what it reports"),
    }
}

/// `INFO` text as fields: `name:value` lines; `#` lines are section headers.
fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

type Info<'a> = Result<BTreeMap<String, String>, &'a MasterError>;

fn judge_version(health: &mut MasterHealth, server: &Info<'_>) {
    let version = health.version.clone();
    match version.as_deref().map(|v| (v, Version::parse(v))) {
        Some((_, Some(parsed))) if parsed >= MIN_VERSION => {}
        Some((text, Some(_))) => health.push(
            Check::Version,
            Severity::Problem,
            format!(
                "Redis {text} is older than {MIN_VERSION}, which the scripts need (they write \
                 after reading TIME): upgrade it"
            ),
        ),
        Some((text, None)) => health.push(
            Check::Version,
            Severity::Note,
            format!(
                "its version {text:?} does not read as a Redis version: make sure it is \
                 compatible with Redis {MIN_VERSION} or later"
            ),
        ),
        None => {
            let why = match server {
                Err(error) => format!("INFO server: {error}"),
                Ok(_) => "INFO server has no redis_version".to_owned(),
            };
            health.push(
                Check::Version,
                Severity::Note,
                format!(
                    "its version is unknown ({why}): allow INFO for this client's user, so \
                     that the check can tell whether it runs the scripts (Redis \
                     {MIN_VERSION} or later)"
                ),
            );
        }
    }
}

fn judge_role(health: &mut MasterHealth, server: &Info<'_>, replication: &Info<'_>) {
    if let Ok(server) = server
        && server.get("redis_mode").map(String::as_str) == Some("cluster")
    {
        health.push(
            Check::Role,
            Severity::Problem,
            "it runs in cluster mode, which refuses keys of the slots it does not serve: \
             use standalone masters, each an independent server"
                .to_owned(),
        );
    }
    let info = match replication {
        Ok(info) => info,
        Err(error) => {
            health.push(
                Check::Role,
                Severity::Note,
                format!(
                    "its role is unknown (INFO replication: {error}): allow INFO for this \
                     client's user"
                ),
            );
            return;
        }
    };
    match info.get("role").map(String::as_str) {
        Some("master") => {
            health.role = Some(Role::Master);
            let replicas: u64 = info
                .get("connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if replicas > 0 {
                health.push(
                    Check::Role,
                    Severity::Note,
                    format!(
                        "it has {replicas} {}: a failover to one can lose lock keys not yet \
                         replicated, so do not fail lock masters over (restart quarantine \
                         covers restarts)",
                        plural(
                            usize::try_from(replicas).unwrap_or(usize::MAX),
                            "replica",
                            "replicas"
                        )
                    ),
                );
            }
        }
        Some("slave" | "replica") => {
            health.role = Some(Role::Replica);
            let of = match (info.get("master_host"), info.get("master_port")) {
                (Some(host), Some(port)) => format!(" of {host}:{port}"),
                _ => String::new(),
            };
            health.push(
                Check::Role,
                Severity::Problem,
                format!(
                    "it is a replica{of}, and a replica never votes (it refuses writes): \
                     point the client at masters"
                ),
            );
        }
        other => health.push(
            Check::Role,
            Severity::Note,
            format!(
                "its role is unknown (INFO replication says role {:?}): make sure it is a \
                 master",
                other.unwrap_or("")
            ),
        ),
    }
}

fn judge_persistence(
    health: &mut MasterHealth,
    persistence: &Info<'_>,
    config: &Result<BTreeMap<String, String>, MasterError>,
    context: &Context,
) {
    let from_config = config.as_ref().ok();
    health.appendonly = from_config
        .and_then(|c| c.get("appendonly"))
        .map(|v| v == "yes")
        .or_else(|| {
            // `INFO persistence` says it too, for a user who may not run CONFIG.
            let info = persistence.as_ref().ok()?;
            info.get("aof_enabled").map(|v| v == "1")
        });
    health.appendfsync = from_config.and_then(|c| c.get("appendfsync")).cloned();
    if health.is_durable() {
        if !context.quarantine {
            health.push(
                Check::Quarantine,
                Severity::Note,
                "restart quarantine is off: if this master loses its data all the same (a \
                 flush, a lost disk, a restore from an old copy), it can grant a lock that is \
                 still held; turn quarantine back on (the default)"
                    .to_owned(),
            );
        }
        return;
    }
    let settings = format!(
        "appendonly {}, appendfsync {}",
        match health.appendonly {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        },
        health.appendfsync.as_deref().unwrap_or("unknown"),
    );
    // What cannot be read is taken as not durable, as the client itself takes it.
    let unreadable = match config {
        Err(error) if health.appendonly != Some(false) => format!(
            "; CONFIG GET failed ({error}), so no client can tell that it is durable: allow \
             CONFIG GET for this client's user"
        ),
        _ => String::new(),
    };
    let set = "set appendonly yes and appendfsync always";
    if context.fencing {
        health.push(
            Check::Persistence,
            Severity::Problem,
            format!(
                "not durable ({settings}), and fencing tokens count only durable masters: \
                 {set}{unreadable}"
            ),
        );
    } else if !context.quarantine {
        health.push(
            Check::Persistence,
            Severity::Problem,
            format!(
                "not durable ({settings}) while restart quarantine is off: after a restart it \
                 can grant a lock that is still held; turn quarantine back on (the default), \
                 or {set}{unreadable}"
            ),
        );
    } else {
        health.push(
            Check::Persistence,
            Severity::Note,
            format!(
                "not durable ({settings}): a restart loses its lock keys, and restart \
                 quarantine then keeps it from voting for ttl_max; to keep it voting across \
                 restarts (and for fencing tokens), {set}{unreadable}"
            ),
        );
    }
}

fn judge_eviction(health: &mut MasterHealth, memory: &Info<'_>) {
    let info = match memory {
        Ok(info) => info,
        Err(error) => {
            health.push(
                Check::Eviction,
                Severity::Note,
                format!(
                    "its eviction settings are unknown (INFO memory: {error}): allow INFO for \
                     this client's user; a master that can evict lock keys must not vote"
                ),
            );
            return;
        }
    };
    health.maxmemory = info.get("maxmemory").and_then(|m| m.parse().ok());
    health.maxmemory_policy = info.get("maxmemory_policy").cloned();
    if let (Some(maxmemory), Some(policy)) = (health.maxmemory, &health.maxmemory_policy)
        && let Some(risk) = eviction_risk(policy, maxmemory)
    {
        health.push(
            Check::Eviction,
            Severity::Problem,
            format!("it never votes: {risk} (CONFIG SET maxmemory-policy noeviction, and in its configuration file)"),
        );
    }
}

fn judge_quarantine(health: &mut MasterHealth) {
    match health.quarantine {
        QuarantineState::Abstains { until } => {
            let left = until.saturating_duration_since(Instant::now());
            health.push(
                Check::Quarantine,
                Severity::Note,
                format!(
                    "it does not vote for another {} (restart quarantine: it is new to this \
                     client, or may have lost lock keys); nothing to change unless it \
                     restarts often",
                    human(left)
                ),
            );
        }
        QuarantineState::Misconfigured
            if !health.findings.iter().any(|f| f.check == Check::Eviction) =>
        {
            health.push(
                Check::Quarantine,
                Severity::Problem,
                "this client still takes it for able to evict lock keys, as read when it \
                 connected, so it never votes: build a new client to read its settings again"
                    .to_owned(),
            );
        }
        _ => {}
    }
}

/// A master's clock against the median of the others' (each read against this client's
/// wall clock): a difference beyond the drift allowance is a clock that is not kept in
/// step, and a step that corrects it would expire its lock keys early or late by that much.
fn judge_clock(
    health: &mut MasterHealth,
    index: usize,
    offsets: &[Option<i128>],
    round_trips: &[Option<Duration>],
    drift: Duration,
) {
    let Some(own) = offsets.get(index).copied().flatten() else {
        return;
    };
    let mut others: Vec<i128> = offsets
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != index)
        .filter_map(|(_, o)| *o)
        .collect();
    let Some(median) = median(&mut others) else {
        return;
    };
    let offset = ClockOffset::from_micros(own - median);
    health.clock_offset = Some(offset);
    // Each reading is uncertain by half its round trip.
    let own_rtt = health.round_trip.unwrap_or_default();
    let widest = round_trips
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != index)
        .filter_map(|(_, r)| *r)
        .max()
        .unwrap_or_default();
    let uncertainty = own_rtt.saturating_add(widest) / 2;
    if offset.magnitude() > drift.saturating_add(uncertainty) {
        health.push(
            Check::Clock,
            Severity::Problem,
            format!(
                "its clock is {offset} the other masters' (their median), more than the drift \
                 allowance ({}): a step that corrects it expires its lock keys that much early \
                 or late; keep the masters' clocks in step (NTP, slewing rather than stepping)",
                human(drift)
            ),
        );
    }
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &mut [i128]) -> Option<i128> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2
    })
}

/// Two configured addresses that reach one server (the same `run_id`, say over TCP and
/// over its unix socket) would let it vote twice.
fn judge_independence(masters: &mut [MasterHealth]) {
    let run_ids: Vec<Option<String>> = masters.iter().map(|m| m.run_id.clone()).collect();
    let names: Vec<Arc<str>> = masters.iter().map(|m| Arc::clone(&m.name)).collect();
    for (i, master) in masters.iter_mut().enumerate() {
        let Some(own) = run_ids[i].as_deref().filter(|r| !r.is_empty()) else {
            continue;
        };
        let same: Vec<&str> = run_ids
            .iter()
            .zip(&names)
            .enumerate()
            .filter(|(j, (r, _))| *j != i && r.as_deref() == Some(own))
            .map(|(_, (_, n))| &**n)
            .collect();
        if !same.is_empty() {
            master.push(
                Check::Independence,
                Severity::Problem,
                format!(
                    "it is the same server as {} (the same run_id), so it would vote more than \
                     once: list each master once, each an independent server",
                    same.join(", ")
                ),
            );
        }
    }
}

/// Masters whose records name different clusters were set up apart: a client over them
/// mixes two clusters.
fn judge_cluster_ids(masters: &mut [MasterHealth]) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for master in masters.iter() {
        if let Some(id) = master.record.as_ref().and_then(ClusterRecord::cluster) {
            *counts.entry(id.to_owned()).or_default() += 1;
        }
    }
    if counts.len() < 2 {
        return;
    }
    let most = counts.values().copied().max().unwrap_or(0);
    let leaders: Vec<&String> = counts
        .iter()
        .filter(|(_, c)| **c == most)
        .map(|(id, _)| id)
        .collect();
    let majority = match leaders.as_slice() {
        [one] => Some((*one).clone()),
        _ => None,
    };
    let all: Vec<String> = counts.iter().map(|(id, c)| format!("{id} ({c})")).collect();
    for master in masters.iter_mut() {
        let Some(id) = master.record.as_ref().and_then(ClusterRecord::cluster) else {
            continue;
        };
        let message = match &majority {
            Some(majority) if majority == id => continue,
            Some(majority) => format!(
                "it belongs to cluster {id}, most other masters to {majority}: point the client \
                 at the masters of one cluster"
            ),
            None => format!(
                "the masters belong to different clusters ({}): point the client at the masters \
                 of one cluster",
                all.join(", ")
            ),
        };
        master.push(Check::ClusterRecord, Severity::Problem, message);
    }
}

/// A server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl Version {
    /// Reads `"7.0.15"`, `"6.2"` or `"7.2.4-rc1"`; `None` without a leading number.
    fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next().flatten()?;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures::future::BoxFuture;

    use crate::master::{Op, Reply};

    const MS: Duration = Duration::from_millis(1);

    fn context() -> Context {
        Context {
            quarantine: true,
            fencing: false,
            record_key: "redquorum:cluster".into(),
            drift: 52 * MS,
            bound: 300 * MS,
        }
    }

    /// What a healthy, durable Redis 7.0 master answers, its clock `offset_us` ahead of
    /// the client's.
    fn probe(offset_us: i64) -> Probe {
        let client = 1_700_000_000_000_000u64;
        Probe {
            round_trip: MS,
            client_time_us: Some(client),
            server_time_us: Ok(client.saturating_add_signed(offset_us)),
            server: Ok(
                "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\
                        run_id:abc\r\nuptime_in_seconds:100\r\n"
                    .to_owned(),
            ),
            replication: Ok("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_owned()),
            persistence: Ok("# Persistence\r\naof_enabled:1\r\n".to_owned()),
            memory: Ok("# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n".to_owned()),
            config: Ok([("appendonly", "yes"), ("appendfsync", "always")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into()),
            record: Ok([("version", "1"), ("cluster", "c1"), ("master", "m1")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into()),
            refused: None,
        }
    }

    #[test]
    fn a_master_that_does_not_vote_for_this_client_is_a_problem() {
        let mut p = probe(0);
        p.refused = Some("its cluster record differs: ttl_max_ms \"5000\"".into());
        let health = one(p, &context());
        assert!(!health.is_healthy());
        let found: Vec<String> = health.problems().map(|f| f.to_string()).collect();
        assert!(found.iter().any(|f| f.contains("ttl_max_ms")), "{found:?}");
    }

    fn one(probe: Probe, context: &Context) -> MasterHealth {
        describe(
            "redis://m".into(),
            QuarantineState::Counted,
            Ok(probe),
            context,
        )
    }

    fn checks(health: &MasterHealth, severity: Severity) -> Vec<Check> {
        health
            .findings()
            .iter()
            .filter(|f| f.severity() == severity)
            .map(Finding::check)
            .collect()
    }

    fn denied(what: &str) -> MasterError {
        MasterError::new(MasterErrorKind::Auth, format!("NOPERM {what}"))
    }

    #[test]
    fn a_healthy_master_has_no_findings() {
        let health = one(probe(0), &context());
        assert!(health.findings().is_empty(), "{health}");
        assert_eq!(health.version(), Some("7.0.15"));
        assert_eq!(health.role(), Some(Role::Master));
        assert!(health.is_durable());
        assert_eq!(health.uptime(), Some(Duration::from_secs(100)));
        assert_eq!(health.maxmemory_policy(), Some("noeviction"));
        let record = health.cluster_record().unwrap();
        assert_eq!(
            (record.cluster(), record.master(), record.counters()),
            (Some("c1"), Some("m1"), None)
        );
    }

    #[test]
    fn info_text_reads_as_fields() {
        let info = parse_info("# Server\r\nredis_version:7.0.15\r\n\r\nexecutable:/a:b\r\n");
        assert_eq!(
            info.get("redis_version").map(String::as_str),
            Some("7.0.15")
        );
        assert_eq!(info.get("executable").map(String::as_str), Some("/a:b"));
        assert_eq!(info.len(), 2);
    }

    #[test]
    fn versions_older_than_five_are_a_problem() {
        assert_eq!(Version::parse("7.0.15"), Some(Version(7, 0, 15)));
        assert_eq!(Version::parse("6.2"), Some(Version(6, 2, 0)));
        assert_eq!(Version::parse("7.2.4-rc1"), Some(Version(7, 2, 4)));
        assert_eq!(Version::parse("unstable"), None);
        for (version, problem) in [("4.0.14", true), ("3.2.0", true), ("5.0.0", false)] {
            let mut p = probe(0);
            p.server = Ok(format!("redis_version:{version}\r\n"));
            let health = one(p, &context());
            assert_eq!(
                checks(&health, Severity::Problem).contains(&Check::Version),
                problem,
                "{health}"
            );
            if problem {
                let text = health.problems().next().unwrap().to_string();
                assert!(
                    text.starts_with(&format!("Redis {version} is older than 5.0.0")),
                    "{text}"
                );
                assert!(text.ends_with("upgrade it"), "{text}");
            }
        }
        let mut p = probe(0);
        p.server = Err(denied("info"));
        let health = one(p, &context());
        assert_eq!(checks(&health, Severity::Note), [Check::Version]);
        assert!(health.is_healthy());
    }

    #[test]
    fn replicas_and_cluster_nodes_are_problems() {
        let mut p = probe(0);
        p.replication = Ok("role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n".into());
        let health = one(p, &context());
        assert_eq!(health.role(), Some(Role::Replica));
        assert_eq!(checks(&health, Severity::Problem), [Check::Role]);
        let text = health.problems().next().unwrap().to_string();
        assert!(text.contains("replica of 10.0.0.1:6379"), "{text}");
        assert!(text.contains("point the client at masters"), "{text}");

        let mut p = probe(0);
        p.server = Ok("redis_version:7.0.0\r\nredis_mode:cluster\r\n".into());
        assert_eq!(
            checks(&one(p, &context()), Severity::Problem),
            [Check::Role]
        );

        let mut p = probe(0);
        p.replication = Ok("role:master\r\nconnected_slaves:2\r\n".into());
        let health = one(p, &context());
        assert!(health.is_healthy());
        assert_eq!(checks(&health, Severity::Note), [Check::Role]);
    }

    #[test]
    fn durability_matters_with_fencing_or_without_quarantine() {
        let everysec = || {
            let mut p = probe(0);
            p.config = Ok([("appendonly", "yes"), ("appendfsync", "everysec")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into());
            p
        };
        let health = one(everysec(), &context());
        assert!(!health.is_durable());
        assert_eq!(health.appendfsync(), Some("everysec"));
        assert_eq!(checks(&health, Severity::Note), [Check::Persistence]);
        assert!(health.is_healthy());

        let fencing = Context {
            fencing: true,
            ..context()
        };
        let health = one(everysec(), &fencing);
        assert_eq!(checks(&health, Severity::Problem), [Check::Persistence]);
        assert!(
            health.findings()[0]
                .message()
                .contains("appendonly yes and appendfsync always")
        );
        assert!(one(probe(0), &fencing).is_healthy());

        let off = Context {
            quarantine: false,
            ..context()
        };
        let health = one(everysec(), &off);
        assert_eq!(checks(&health, Severity::Problem), [Check::Persistence]);
        // Durable without quarantine: a note that flushes go unseen.
        let health = one(probe(0), &off);
        assert_eq!(checks(&health, Severity::Note), [Check::Quarantine]);

        // CONFIG renamed away: appendonly from INFO, appendfsync unknown, not durable.
        let mut p = probe(0);
        p.config = Err(MasterError::new(MasterErrorKind::Other, "unknown command"));
        let health = one(p, &fencing);
        assert_eq!(health.appendonly(), Some(true));
        assert_eq!(health.appendfsync(), None);
        assert!(!health.is_durable());
        let text = health.problems().next().unwrap().to_string();
        assert!(text.contains("appendfsync unknown"), "{text}");
        assert!(text.contains("allow CONFIG GET"), "{text}");
    }

    #[test]
    fn evicting_masters_are_a_problem() {
        let mut p = probe(0);
        p.memory = Ok("maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n".into());
        let health = one(p, &context());
        assert_eq!(checks(&health, Severity::Problem), [Check::Eviction]);
        assert!(
            health
                .problems()
                .next()
                .unwrap()
                .message()
                .contains("noeviction")
        );
        // A limit with noeviction, or a policy without a limit, cannot evict.
        for memory in [
            "maxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n",
            "maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n",
        ] {
            let mut p = probe(0);
            p.memory = Ok(memory.into());
            assert!(one(p, &context()).findings().is_empty());
        }
    }

    #[test]
    fn quarantine_states_are_read_from_the_standing() {
        let now = Instant::now();
        let later = now + Duration::from_secs(3);
        let state = |s| QuarantineState::from_standing(s, now);
        assert_eq!(state(None), QuarantineState::Off);
        assert_eq!(state(Some(Standing::Counted)), QuarantineState::Counted);
        assert_eq!(
            state(Some(Standing::Abstains(now))),
            QuarantineState::Unknown
        );
        assert_eq!(
            state(Some(Standing::Abstains(later))),
            QuarantineState::Abstains { until: later }
        );
        // Refused as evicting although it no longer evicts: a problem of its own.
        let health = describe(
            "m".into(),
            QuarantineState::Misconfigured,
            Ok(probe(0)),
            &context(),
        );
        assert_eq!(checks(&health, Severity::Problem), [Check::Quarantine]);
        // Abstaining is a note.
        let health = describe(
            "m".into(),
            QuarantineState::Abstains { until: later },
            Ok(probe(0)),
            &context(),
        );
        assert!(health.is_healthy());
        assert_eq!(checks(&health, Severity::Note), [Check::Quarantine]);
    }

    /// A master named `name`, a server of its own (its `run_id` is its name) unless the
    /// probe names another `run_id` than [`probe`]'s.
    fn entry(name: &str, mut probe: Result<Probe, MasterError>) -> Entry {
        if let Ok(Probe {
            server: Ok(text), ..
        }) = &mut probe
        {
            *text = text.replace("run_id:abc", &format!("run_id:{name}"));
        }
        Entry {
            name: name.into(),
            standing: Some(Standing::Counted),
            probe,
        }
    }

    #[test]
    fn a_clock_beyond_the_drift_allowance_is_a_problem() {
        // Drift 52 ms, round trips 1 ms: 30 ms apart is fine, 200 ms is not.
        let report = assemble(
            vec![
                entry("a", Ok(probe(0))),
                entry("b", Ok(probe(30_000))),
                entry("c", Ok(probe(200_000))),
                entry("d", Ok(probe(-10_000))),
            ],
            &context(),
            3,
            Instant::now(),
        );
        let [a, b, c, d] = report.masters() else {
            panic!("four masters")
        };
        // c against the median of {0, 30, -10} ms = 0 ms.
        assert_eq!(c.clock_offset().unwrap().magnitude(), 200 * MS);
        assert!(c.clock_offset().unwrap().is_ahead());
        assert_eq!(checks(c, Severity::Problem), [Check::Clock]);
        assert!(c.to_string().contains("200ms ahead of the other"), "{c}");
        // d against the median of {0, 30, 200} ms = 30 ms: 40 ms behind, within 52 ms.
        assert_eq!(d.clock_offset().unwrap().magnitude(), 40 * MS);
        assert!(!d.clock_offset().unwrap().is_ahead());
        for m in [a, b, d] {
            assert!(m.is_healthy(), "{m}");
        }
        assert_eq!(a.client_clock_offset().unwrap().magnitude(), Duration::ZERO);
        // One master alone has no other clock to compare with.
        let report = assemble(
            vec![entry("a", Ok(probe(900_000)))],
            &context(),
            1,
            Instant::now(),
        );
        assert_eq!(report.masters()[0].clock_offset(), None);
        assert!(report.is_healthy());
    }

    #[test]
    fn a_wide_round_trip_widens_the_clock_tolerance() {
        let mut slow = probe(100_000);
        slow.round_trip = 200 * MS;
        let report = assemble(
            vec![entry("a", Ok(probe(0))), entry("b", Ok(slow))],
            &context(),
            2,
            Instant::now(),
        );
        assert!(report.is_healthy(), "{report}");
    }

    #[test]
    fn one_server_listed_twice_and_mixed_clusters_are_problems() {
        let mut other = probe(0);
        other.server = Ok("redis_version:7.0.15\r\nrun_id:xyz\r\n".into());
        let mut foreign = probe(0);
        foreign.server = Ok("redis_version:7.0.15\r\nrun_id:foreign\r\n".into());
        foreign.record = Ok([("cluster", "c2")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into());
        let same = || {
            let mut p = probe(0);
            p.server = Ok("redis_version:7.0.15\r\nrun_id:same\r\n".into());
            p
        };
        let report = assemble(
            vec![
                entry("a", Ok(same())),
                entry("a-again", Ok(same())),
                entry("b", Ok(other)),
                entry("c", Ok(foreign)),
            ],
            &context(),
            3,
            Instant::now(),
        );
        let [a, again, b, c] = report.masters() else {
            panic!("four masters")
        };
        assert_eq!(checks(a, Severity::Problem), [Check::Independence]);
        assert!(a.problems().next().unwrap().message().contains("a-again"));
        assert_eq!(checks(again, Severity::Problem), [Check::Independence]);
        assert!(b.is_healthy(), "{b}");
        assert_eq!(checks(c, Severity::Problem), [Check::ClusterRecord]);
        assert!(
            c.to_string()
                .contains("cluster c2, most other masters to c1"),
            "{c}"
        );
        assert_eq!(report.problems().count(), 3);
        assert!(!report.is_healthy());
    }

    #[test]
    fn unreachable_masters_say_why_and_what_to_do() {
        let cases = [
            (MasterErrorKind::Refused, "start it"),
            (MasterErrorKind::Timeout, "no answer within 300ms"),
            (MasterErrorKind::Auth, "fix the user and password"),
            (MasterErrorKind::Tls, "unreachable over TLS: boom"),
            (MasterErrorKind::Other, "see the master's log"),
        ];
        for (kind, says) in cases {
            let health = describe(
                "m".into(),
                QuarantineState::Unknown,
                Err(MasterError::new(kind, "boom")),
                &context(),
            );
            assert!(!health.is_reachable());
            assert_eq!(health.error().unwrap().kind(), kind);
            assert_eq!(checks(&health, Severity::Problem), [Check::Reachable]);
            let text = health.problems().next().unwrap().to_string();
            assert!(text.starts_with("unreachable"), "{text}");
            assert!(text.contains(says), "{text}");
        }
    }

    #[test]
    fn missing_or_unreadable_records_are_notes() {
        let mut p = probe(0);
        p.record = Ok(BTreeMap::new());
        let health = one(p, &context());
        assert!(health.cluster_record().is_none());
        assert_eq!(checks(&health, Severity::Note), [Check::ClusterRecord]);
        assert!(health.findings()[0].message().contains("not initialised"));
        let mut p = probe(0);
        p.record = Err(MasterError::new(MasterErrorKind::Other, "WRONGTYPE"));
        assert_eq!(
            checks(&one(p, &context()), Severity::Note),
            [Check::ClusterRecord]
        );
    }

    /// A master that never answers a probe, or answers at once.
    #[derive(Debug)]
    struct Fake {
        name: Arc<str>,
        answers: bool,
    }

    impl Master for Fake {
        fn name(&self) -> &Arc<str> {
            &self.name
        }

        fn call(&self, _: Arc<Op>) -> BoxFuture<'static, Result<Reply, MasterError>> {
            Box::pin(futures::future::pending())
        }

        fn probe(&self, key: Arc<str>) -> BoxFuture<'static, Result<Probe, MasterError>> {
            assert_eq!(&*key, "locks:redquorum:cluster");
            if self.answers {
                Box::pin(async { Ok(probe(0)) })
            } else {
                Box::pin(futures::future::pending())
            }
        }

        fn standing(&self, _: Instant) -> Option<Standing> {
            Some(Standing::Counted)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_master_that_never_answers_is_cut_at_the_bound() {
        let config = crate::config::Builder::new()
            .masters(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
            .timeouts(crate::Timeouts::new().connect("300ms").node("200ms"))
            .key_prefix("locks:")
            .into_config()
            .unwrap_or_else(|e| panic!("{e}"));
        let masters: Vec<Arc<dyn Master>> = vec![
            Arc::new(Fake {
                name: "up".into(),
                answers: true,
            }),
            Arc::new(Fake {
                name: "hung".into(),
                answers: false,
            }),
        ];
        let started = Instant::now();
        let report = check(&masters, &config, 2).await;
        assert_eq!(started.elapsed(), 500 * MS);
        let [up, hung] = report.masters() else {
            panic!("two masters")
        };
        assert!(up.is_healthy(), "{up}");
        assert_eq!(up.quarantine(), QuarantineState::Counted);
        assert_eq!(hung.error().unwrap().kind(), MasterErrorKind::Timeout);
        assert_eq!(report.reachable(), 1);
        let shown = report.to_string();
        assert!(
            shown.starts_with("2 masters, quorum 2: 1 reachable, unhealthy"),
            "{shown}"
        );
        assert!(shown.contains("2. hung: unreachable"), "{shown}");
        // Two masters tolerate no failure: noted for the masters as a whole.
        assert_eq!(report.tolerates(), 0);
        assert!(
            shown.contains("note: 2 masters with a quorum of 2 tolerate no failure"),
            "{shown}"
        );
    }

    #[test]
    fn outside_a_runtime_no_master_is_checked() {
        let config = crate::config::Builder::new()
            .masters(["redis://127.0.0.1:1"])
            .into_config()
            .unwrap_or_else(|e| panic!("{e}"));
        let masters: Vec<Arc<dyn Master>> = vec![Arc::new(Fake {
            name: "m".into(),
            answers: true,
        })];
        // Nothing to wait for: one poll without a runtime finishes it.
        let mut future = std::pin::pin!(check(&masters, &config, 1));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(report) = std::future::Future::poll(future.as_mut(), &mut cx)
        else {
            panic!("pending outside a runtime")
        };
        let text = report.masters()[0].error().unwrap().to_string();
        assert!(text.contains("outside a tokio runtime"), "{text}");
    }
}
