//! The masters' health check, [`Redlock::check_masters`]: what each master is (reachable,
//! server version, role, persistence, eviction, round trip, clock, cluster record) and
//! whether this client counts its votes, with every problem stated as a sentence saying
//! what to change.
//!
//! One concurrent round of reads: each master is probed on a connection of its own (the
//! connect timeout, then one pipeline within the node timeout; `Master::probe`), and
//! nothing is written. The judgement is pure: each master on its own (`describe`), then
//! across masters (clocks, independence, cluster ids), testable without Redis. The report
//! it fills is `report.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::report::{
    Check, ClockOffset, ClusterRecord, HealthReport, MasterHealth, QuarantineState, Role, Severity,
    plural,
};
use crate::client::Redlock;
use crate::cluster;
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

impl Redlock {
    /// Checks every master and reports, per master in the configured order: whether it
    /// answered, its server version (the scripts need Redis 5.0 or later), its role (a
    /// replica never votes), persistence (`appendonly`, `appendfsync`), eviction settings,
    /// the round trip, its clock against the other masters', whether this client counts
    /// its votes (restart quarantine), and its cluster record. Each problem and note is a
    /// sentence saying what to change; [`HealthReport::is_healthy`] is true when no
    /// master has a problem, and `Display` prints the whole report. What was read off each
    /// master is plain data, [`MasterHealth::facts`].
    ///
    /// One concurrent round of reads: each master is probed on a short-lived connection of
    /// its own, within the connect timeout plus the node timeout, so the call returns
    /// within that bound however many masters are down or hung. It writes nothing, and it
    /// neither uses nor changes the connections, quarantine or votes of the locks.
    /// Outside a tokio runtime every master is reported as not checked.
    ///
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) {
    /// let report = client.check_masters().await;
    /// if !report.is_healthy() {
    ///     eprintln!("{report}");
    /// }
    /// for (master, problem) in report.problems() {
    ///     eprintln!("{master}: {problem}");
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future closes the probes' connections; nothing is left behind.
    pub async fn check_masters(&self) -> HealthReport {
        check(&self.inner.masters, &self.inner.config, self.inner.quorum()).await
    }
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
        record_key: cluster::record_key(&config.key_prefix).into(),
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
        .map(|m| m.facts.client_clock_offset.map(|o| i128::from(o.micros)))
        .collect();
    let round_trips: Vec<Option<Duration>> = masters.iter().map(|m| m.facts.round_trip).collect();
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
    let mut health = MasterHealth::new(name, quarantine);
    let probe = match probe {
        Ok(probe) => probe,
        Err(error) => {
            let message = unreachable(&error, context.bound);
            health.push(Check::Reachable, Severity::Problem, message);
            health.error = Some(error);
            return health;
        }
    };
    health.facts.round_trip = Some(probe.round_trip);
    let server = probe.server.as_deref().map(parse_info);
    let replication = probe.replication.as_deref().map(parse_info);
    let persistence = probe.persistence.as_deref().map(parse_info);
    let memory = probe.memory.as_deref().map(parse_info);
    if let Ok(info) = &server {
        health.facts.version = info.get("redis_version").cloned();
        health.facts.run_id = info.get("run_id").cloned();
        health.facts.uptime = info
            .get("uptime_in_seconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs);
    }
    judge_version(&mut health, &server);
    judge_role(&mut health, &server, &replication);
    judge_persistence(&mut health, &persistence, &probe.config, context);
    judge_eviction(&mut health, &memory);
    // A master that never votes for this client: what its quarantine says does not apply.
    health.refused = probe.refused.is_some();
    judge_quarantine(&mut health);
    match (&probe.server_time_us, probe.client_time_us) {
        (Ok(server), Some(client)) => {
            health.facts.client_clock_offset = Some(ClockOffset::from_micros(
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
    // The record's key also holds the master's data epoch, which is no field of the record.
    let record = probe.record.map(|mut fields| {
        fields.remove(cluster::EPOCH_FIELD);
        fields
    });
    match record {
        Ok(fields) if fields.is_empty() => health.push(
            Check::ClusterRecord,
            Severity::Note,
            format!(
                "no cluster record at {:?}: not initialised (see Redlock::init_cluster)",
                context.record_key
            ),
        ),
        Ok(fields) => health.facts.cluster_record = Some(ClusterRecord { fields }),
        // Not a hash: no lock script can run here (each reads the record), whatever the
        // user may do.
        Err(error) if error.is_wrong_type() => health.push(
            Check::ClusterRecord,
            Severity::Problem,
            format!(
                "{:?} holds a value of another type, not a cluster record, and every lock \
                 script reads it: delete it (it lies in redquorum's own namespace), or use \
                 another key prefix",
                context.record_key
            ),
        ),
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
    let version = health.facts.version.clone();
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
            health.facts.role = Some(Role::Master);
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
            health.facts.role = Some(Role::Replica);
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
    health.facts.appendonly = from_config
        .and_then(|c| c.get("appendonly"))
        .map(|v| v == "yes")
        .or_else(|| {
            // `INFO persistence` says it too, for a user who may not run CONFIG.
            let info = persistence.as_ref().ok()?;
            info.get("aof_enabled").map(|v| v == "1")
        });
    health.facts.appendfsync = from_config.and_then(|c| c.get("appendfsync")).cloned();
    if health.facts.is_durable() {
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
        match health.facts.appendonly {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        },
        health.facts.appendfsync.as_deref().unwrap_or("unknown"),
    );
    // What cannot be read is taken as not durable, as the client itself takes it.
    let unreadable = match config {
        Err(error) if health.facts.appendonly != Some(false) => format!(
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
    health.facts.maxmemory = info.get("maxmemory").and_then(|m| m.parse().ok());
    health.facts.maxmemory_policy = info.get("maxmemory_policy").cloned();
    if let (Some(maxmemory), Some(policy)) =
        (health.facts.maxmemory, &health.facts.maxmemory_policy)
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
        QuarantineState::Abstains { until } if !health.refused => {
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
    health.facts.clock_offset = Some(offset);
    // Each reading is uncertain by half its round trip.
    let own_rtt = health.facts.round_trip.unwrap_or_default();
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
    let run_ids: Vec<Option<String>> = masters.iter().map(|m| m.facts.run_id.clone()).collect();
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
        if let Some(id) = master
            .facts
            .cluster_record
            .as_ref()
            .and_then(ClusterRecord::cluster)
        {
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
        let Some(id) = master
            .facts
            .cluster_record
            .as_ref()
            .and_then(ClusterRecord::cluster)
        else {
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
mod tests;
