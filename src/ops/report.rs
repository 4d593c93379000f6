//! The report of [`Redlock::check_masters`](crate::Redlock::check_masters): per master,
//! what was read off it and what was found, each finding a sentence saying what to change.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{MasterError, OneLine, human};
use crate::quarantine::Standing;

/// What [`Redlock::check_masters`](crate::Redlock::check_masters) found: one
/// [`MasterHealth`] per master, in the configured order.
///
/// [`is_healthy`](Self::is_healthy) is true when no master has a problem; notes (things
/// worth knowing that need no change) do not count. `Display` prints a readable list,
/// one master after the other, each problem and note a sentence saying what to change.
/// Addresses are shown with their passwords replaced by `***`, in `Debug` output too.
#[derive(Debug, Clone)]
pub struct HealthReport {
    pub(super) masters: Vec<MasterHealth>,
    pub(super) quorum: usize,
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

pub(super) fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// One master's health, as part of a [`HealthReport`]: what was read off it
/// ([`facts`](Self::facts)), what was found ([`findings`](Self::findings)), and the few
/// answers judged from them: whether it answered, whether it has a problem, whether this
/// client counts its votes.
///
/// # Example
/// ```no_run
/// # async fn run(client: redquorum::Redlock) {
/// let report = client.check_masters().await;
/// for master in report.masters() {
///     let facts = master.facts();
///     println!(
///         "{}: Redis {}, durable: {}, votes: {}",
///         master.master(),
///         facts.version.as_deref().unwrap_or("unknown"),
///         facts.is_durable(),
///         master.votes(),
///     );
///     for problem in master.problems() {
///         println!("   {problem}");
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MasterHealth {
    pub(super) name: Arc<str>,
    pub(super) error: Option<MasterError>,
    pub(super) facts: Facts,
    pub(super) quarantine: QuarantineState,
    /// It never votes for this client, whatever its quarantine: its cluster record
    /// disagrees, or this client reaches it twice (docs/design.md §11).
    pub(super) refused: bool,
    pub(super) findings: Vec<Finding>,
}

impl MasterHealth {
    /// A master named `name` of which nothing is known yet.
    pub(super) fn new(name: Arc<str>, quarantine: QuarantineState) -> Self {
        MasterHealth {
            name,
            error: None,
            facts: Facts::unknown(),
            quarantine,
            refused: false,
            findings: Vec::new(),
        }
    }

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

    /// What was read off the master: version, role, persistence, eviction settings, round
    /// trip, clocks, cluster record. Every fact is `None` when the master did not answer.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// Whether this client counts the master's votes now (restart quarantine), as far as
    /// it knows from its lock connections; the probe does not change it.
    pub fn quarantine(&self) -> QuarantineState {
        self.quarantine
    }

    /// Whether the master can vote for this client now: it answered, it is a member of
    /// this client's cluster (its cluster record agrees, and no other address of this
    /// client reaches the same server), and this client counts its votes
    /// ([`QuarantineState::Counted`], or restart quarantine is
    /// [`Off`](QuarantineState::Off)). A healthy report can have masters that do not vote
    /// yet (new masters abstain for `ttl_max`).
    pub fn votes(&self) -> bool {
        self.is_reachable()
            && !self.refused
            && matches!(
                self.quarantine,
                QuarantineState::Counted | QuarantineState::Off
            )
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

    pub(super) fn push(&mut self, check: Check, severity: Severity, message: String) {
        self.findings.push(Finding {
            check,
            severity,
            message,
        });
    }
}

/// What [`Redlock::check_masters`](crate::Redlock::check_masters) read off one master, as
/// read: plain data, no judgement (that is the [`Finding`]s').
///
/// A fact is `None` when the master did not answer, or when this client's user may not
/// read it (ACLs, a renamed `CONFIG`): then a note says so. New facts may be added: the
/// struct is read, never built, outside this crate, and a pattern on it needs `..`.
///
/// # Example
/// ```no_run
/// # async fn run(client: redquorum::Redlock) {
/// let report = client.check_masters().await;
/// for master in report.masters() {
///     let facts = master.facts();
///     if let (Some(policy), Some(0)) = (&facts.maxmemory_policy, facts.maxmemory) {
///         println!("{}: no memory limit ({policy})", master.master());
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Facts {
    /// The server's version (`redis_version` of `INFO server`), such as `"7.0.15"`.
    pub version: Option<String>,
    /// The server process's id (`run_id` of `INFO server`): it changes with every restart.
    pub run_id: Option<String>,
    /// How long the server process has run (`uptime_in_seconds`).
    pub uptime: Option<Duration>,
    /// Whether the server is a master or a replica (`role` of `INFO replication`).
    pub role: Option<Role>,
    /// `appendonly`: whether the server writes an append-only file (from `CONFIG GET`, or
    /// `aof_enabled` of `INFO persistence` for a user who may not run `CONFIG`).
    pub appendonly: Option<bool>,
    /// `appendfsync`: `"always"`, `"everysec"` or `"no"`; `None` when `CONFIG GET` is
    /// renamed away or forbidden for this client's user.
    pub appendfsync: Option<String>,
    /// `maxmemory` in bytes (0: no limit).
    pub maxmemory: Option<u64>,
    /// `maxmemory-policy`, such as `"noeviction"`.
    pub maxmemory_policy: Option<String>,
    /// The round trip of the probe's one pipeline, on this client's monotonic clock.
    pub round_trip: Option<Duration>,
    /// How far the master's clock (`TIME`) is from the median of the other masters'
    /// clocks; `None` when it or every other master's clock is unknown. Each clock is
    /// read against this client's wall clock at the midpoint of its round trip, so the
    /// figure is uncertain by up to half of each round trip involved.
    pub clock_offset: Option<ClockOffset>,
    /// How far the master's clock is from this client's wall clock, read at the midpoint
    /// of the round trip (uncertain by up to half of it).
    pub client_clock_offset: Option<ClockOffset>,
    /// The master's cluster record, when it has one.
    pub cluster_record: Option<ClusterRecord>,
}

impl Facts {
    /// Nothing known.
    pub(super) fn unknown() -> Self {
        Facts {
            version: None,
            run_id: None,
            uptime: None,
            role: None,
            appendonly: None,
            appendfsync: None,
            maxmemory: None,
            maxmemory_policy: None,
            round_trip: None,
            clock_offset: None,
            client_clock_offset: None,
            cluster_record: None,
        }
    }

    /// Whether the master is durable, as restart quarantine and fencing take it:
    /// `appendonly yes` with `appendfsync always`. `false` when either is unknown.
    pub fn is_durable(&self) -> bool {
        self.appendonly == Some(true) && self.appendfsync.as_deref() == Some("always")
    }
}

impl fmt::Display for MasterHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.facts;
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
                    facts.version.clone().unwrap_or_else(unknown),
                    facts.role.map_or("role unknown", Role::as_str),
                    facts.round_trip.map_or_else(unknown, human),
                )?;
                match facts.clock_offset {
                    Some(offset) => writeln!(f, ", clock {offset} the others")?,
                    None => writeln!(f)?,
                }
                let yes_no = |b: bool| if b { "yes" } else { "no" };
                writeln!(
                    f,
                    "   appendonly {}, appendfsync {}; maxmemory {}, {}",
                    facts.appendonly.map_or("unknown", yes_no),
                    facts.appendfsync.as_deref().unwrap_or("unknown"),
                    facts.maxmemory.map_or_else(unknown, |m| if m == 0 {
                        "none".to_owned()
                    } else {
                        m.to_string()
                    }),
                    facts
                        .maxmemory_policy
                        .as_deref()
                        .unwrap_or("policy unknown"),
                )?;
                let votes = Votes(self);
                match &facts.cluster_record {
                    Some(record) => writeln!(f, "   votes: {votes}; cluster record: {record}")?,
                    None => writeln!(f, "   votes: {votes}; no cluster record")?,
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

/// A reachable master's "votes:" line: its quarantine state, unless it never votes for
/// this client at all (its finding says why).
struct Votes<'a>(&'a MasterHealth);

impl fmt::Display for Votes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.refused {
            true => f.write_str("no: it does not vote for this client (see the problem below)"),
            false => self.0.quarantine.fmt(f),
        }
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
    pub(super) fn from_standing(standing: Option<Standing>, now: Instant) -> Self {
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
    pub(super) micros: i64,
}

impl ClockOffset {
    pub(super) fn from_micros(micros: i128) -> Self {
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
    pub(super) fields: BTreeMap<String, String>,
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
        // Any client that can write to the master can write its record: shown escaped.
        let field = |name| OneLine(self.get(name).unwrap_or("?"));
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
    pub(super) check: Check,
    pub(super) severity: Severity,
    pub(super) message: String,
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
