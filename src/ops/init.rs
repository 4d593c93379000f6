//! Operating a cluster (docs/design.md §11): its bootstrap ([`Redlock::init_cluster`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use crate::client::Redlock;
use crate::cluster::{self, Admission, Record, View};
use crate::engine::permanent_failure;
use crate::error::{Error, ErrorKind, MasterError, MasterErrorKind, MasterOutcome, MasterReport};
use crate::master::{Master, Op, Outgoing, Reply, StampOutcome};
#[cfg(redquorum_mutants)]
use crate::mutants::Mutant;

/// What [`Redlock::init_cluster`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitOutcome {
    /// The masters were brand-new: each now carries the cluster record and votes at once.
    Bootstrapped,
    /// Every master already carried this configuration's record: nothing was written.
    AlreadyInitialised,
    /// The cluster was initialised, and the masters listed (redacted addresses) had lost
    /// their record with their data: each was given its member id back; it votes after its
    /// restart quarantine and no longer counts for fencing tokens.
    Readmitted(Vec<String>),
}

/// The cluster a [`Redlock::init_cluster`] call left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterInit {
    /// The cluster's id (a UUID).
    pub cluster_id: String,
    /// Each master's address (password redacted) and member id, in configured order.
    pub members: Vec<(String, String)>,
    /// What was done.
    pub outcome: InitOutcome,
}

impl fmt::Display for ClusterInit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done = match &self.outcome {
            InitOutcome::Bootstrapped => "bootstrapped".to_owned(),
            InitOutcome::AlreadyInitialised => "already initialised".to_owned(),
            InitOutcome::Readmitted(masters) => format!("re-admitted {}", masters.join(", ")),
        };
        write!(f, "cluster {} {done}:", self.cluster_id)?;
        for (master, id) in &self.members {
            write!(f, " {master} = {id};")?;
        }
        Ok(())
    }
}

/// What a survey read of one master.
struct Surveyed {
    run_id: String,
    record: Option<Record>,
    epoch: String,
}

/// How long `init_cluster` may spend scanning the masters for keys under the prefix. A
/// keyspace too large to scan in this time is reported, never bootstrapped.
const SCAN_BUDGET: Duration = Duration::from_secs(10);

/// How long a claim outlives the longest the call may take (the scan budget, and a few
/// connects and requests), should its caller die mid-way.
const CLAIM_MARGIN: Duration = Duration::from_secs(30);

impl Redlock {
    /// Writes the cluster record on every master of a **brand-new** cluster, so that they
    /// vote at once instead of abstaining for `ttl_max` (docs/design.md §11), and so that
    /// every client whose configuration differs is refused from its first call.
    ///
    /// **An operator's step, once, when the masters are new** (like `redis-cli --cluster
    /// create`): calling it asserts that these masters never held a lock that may still be
    /// valid. Never call it from application start-up code. Masters that all restarted
    /// empty look exactly like new ones (no record, no keys), and bootstrapping them would
    /// let them vote at once while a lease granted before the loss is still valid; without
    /// the call they abstain for `ttl_max`, which covers that.
    ///
    /// It refuses, writing nothing, unless every master answers, no two addresses reach
    /// one server, and either no master has a record and none holds a key under the key
    /// prefix (other than this crate's records), or every record agrees with this client's
    /// settings. It is idempotent for the same configuration. A master's data lost during
    /// the call (its data epoch changed) is never bootstrapped. Each call claims every
    /// master before it reads them, so concurrent calls cannot mix their records. On an initialised cluster, a
    /// master without a record (it lost its data) at the address its member was
    /// initialised with gets that member's id back: it votes after its restart quarantine
    /// and no longer counts for fencing tokens.
    ///
    /// # Errors
    /// - [`ErrorKind::NoQuorum`] (retryable) when a master did not answer (every master
    ///   must), another `init_cluster` holds the masters' claim, or a master's data changed
    ///   during the call.
    /// - [`ErrorKind::ClusterMismatch`] when a master carries the record of another
    ///   configuration or cluster, two addresses reach one server, two servers carry one
    ///   member id, or a master without a record is not at a missing member's address.
    /// - [`ErrorKind::ClusterNotEmpty`] when a master of an uninitialised cluster holds a
    ///   key under the prefix, or holds too many keys to check within 10 s.
    /// - [`ErrorKind::Tls`], [`ErrorKind::Auth`] and [`ErrorKind::Misconfigured`] (not
    ///   retryable) when a master cannot be used until a setting changes: its TLS
    ///   handshake failed, it refused this client's credentials or a command this call
    ///   needs (its ACL), or it does not let this
    ///   client read `INFO` (its `run_id` tells one server from another), or another of the
    ///   reasons that make a master unfit to hold locks.
    /// - [`ErrorKind::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the record written on some masters only (calling it
    /// again completes it: those masters then count as re-admitted), and a claim that
    /// expires by itself (30 s after the longest the call could have taken).
    ///
    /// # Example
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // Once, by an operator, right after creating the masters:
    /// let client = redquorum::Redlock::builder()
    ///     .masters(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     .build()?;
    /// let cluster = client.init_cluster().await?;
    /// println!("{cluster}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn init_cluster(&self) -> Result<ClusterInit, Error> {
        let inner = &self.inner;
        let subject = cluster::record_key(&inner.config.key_prefix);
        crate::core::check_runtime(&subject)?;
        let names: Vec<Arc<str>> = inner.masters.iter().map(|m| Arc::clone(m.name())).collect();
        // What can be refused at once (a master down, another configuration's record, one
        // server listed twice) is refused before anything is written, even a claim.
        let probe = ask_all(&inner.masters, |_| Op::Survey).await;
        let down: Vec<String> = names
            .iter()
            .zip(&probe)
            .filter_map(|(name, answer)| answer.as_ref().err().map(|e| format!("{name}: {e}")))
            .collect();
        if !down.is_empty() {
            return Err(unanswered(&subject, &names, &probe, &down));
        }
        self.check_agreement(&subject, true).await?;
        // Then claim every master, and read them again under the claim: a survey taken
        // before it could be outdated by another call's writes.
        let cluster_id = cluster::new_id();
        let token: Arc<str> = cluster_id.as_str().into();
        let config = &inner.config;
        let ttl = CLAIM_MARGIN
            .saturating_add(SCAN_BUDGET)
            .saturating_add(config.connect_timeout.saturating_mul(2))
            .saturating_add(config.node_timeout.saturating_mul(4));
        let claimed = ask_all(&inner.masters, |_| Op::Claim {
            token: Arc::clone(&token),
            ttl,
        })
        .await;
        let result = match claimed.iter().all(|c| matches!(c, Ok(Reply::Granted))) {
            true => self.init_claimed(&cluster_id).await,
            false => {
                let problems: Vec<String> = names
                    .iter()
                    .zip(&claimed)
                    .filter_map(|(name, c)| match c {
                        Ok(Reply::Granted) => None,
                        Ok(_) => Some(format!("{name}: another init_cluster holds it")),
                        Err(e) => Some(format!("{name}: {e}")),
                    })
                    .collect();
                let reports = reports_of(&names, &claimed);
                let held = reports
                    .iter()
                    .any(|r| matches!(r.outcome(), MasterOutcome::HeldByOther));
                let on_outage = match held {
                    true => "nothing was written: try again once the other call finished",
                    false => "nothing was written: try again once the masters named are reachable",
                };
                Err(failed_everywhere(
                    &subject,
                    reports,
                    ("could not claim every master", &problems),
                    Leaves {
                        once_fixed: "nothing was written",
                        on_outage,
                    },
                ))
            }
        };
        ask_all(&inner.masters, |_| Op::Unclaim {
            token: Arc::clone(&token),
        })
        .await;
        result
    }

    /// `init_cluster` once every master is claimed; `cluster_id` is the id a bootstrap
    /// gives the cluster.
    async fn init_claimed(&self, cluster_id: &str) -> Result<ClusterInit, Error> {
        let inner = &self.inner;
        let subject = cluster::record_key(&inner.config.key_prefix);
        let names: Vec<Arc<str>> = inner.masters.iter().map(|m| Arc::clone(m.name())).collect();
        let fail = |kind: ErrorKind, detail: String| {
            Error::new(kind, subject.as_str()).with_detail(detail)
        };

        // 1. Survey every master; all must answer.
        let surveyed = survey_all(&inner.masters, &names, &subject).await?;

        // 2. Judge what they carry as a client would, from scratch.
        let terms = inner.terms();
        let view = View::new(terms.clone(), names.clone());
        for (index, s) in surveyed.iter().enumerate() {
            match view.connected(index, Some(&s.run_id), s.record.as_ref()) {
                Admission::Mismatch(why) => {
                    return Err(fail(
                        ErrorKind::ClusterMismatch,
                        format!("{}: {why}; nothing was written", names[index]),
                    ));
                }
                Admission::Stranger(why) if s.record.is_some() => {
                    return Err(fail(
                        ErrorKind::ClusterMismatch,
                        format!("{}: {why}; nothing was written", names[index]),
                    ));
                }
                _ => {}
            }
        }
        let Some(adopted) = view.adopted() else {
            return self
                .bootstrap_claimed(&names, &surveyed, &terms, cluster_id)
                .await;
        };
        let members = |given: &[(usize, String)]| -> Vec<(String, String)> {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let id = surveyed[i]
                        .record
                        .as_ref()
                        .map(|r| r.master.clone())
                        .or_else(|| {
                            given
                                .iter()
                                .find(|(j, _)| *j == i)
                                .map(|(_, id)| id.clone())
                        })
                        .unwrap_or_default();
                    (name.to_string(), id)
                })
                .collect()
        };
        let strangers: Vec<usize> = (0..names.len())
            .filter(|&i| surveyed[i].record.is_none())
            .collect();
        if strangers.is_empty() {
            return Ok(ClusterInit {
                cluster_id: adopted.cluster.clone(),
                members: members(&[]),
                outcome: InitOutcome::AlreadyInitialised,
            });
        }

        // 3. Re-admission: a master without a record gets back the id of a member no
        //    master carries, only at the address that member was initialised at.
        let given = readmitted(&adopted, &names, &surveyed, &strangers)
            .map_err(|why| fail(ErrorKind::ClusterMismatch, why))?;
        let ops: Vec<Option<Op>> = (0..names.len())
            .map(|i| {
                given.iter().find(|(j, _)| *j == i).map(|(_, id)| {
                    let mut record = adopted.clone();
                    record.master = id.clone();
                    record.counters_lost = true;
                    record.bootstrap_run_id.clear();
                    record.bootstrap_epoch.clear();
                    Op::Stamp {
                        record: Box::new(record),
                        bootstrap: None,
                    }
                })
            })
            .collect();
        self.write_all(ops, &adopted.fingerprint).await?;
        Ok(ClusterInit {
            cluster_id: adopted.cluster.clone(),
            members: members(&given),
            outcome: InitOutcome::Readmitted(
                strangers.iter().map(|&i| names[i].to_string()).collect(),
            ),
        })
    }

    /// Bootstraps brand-new masters, all claimed: checks that none holds a key under the
    /// prefix, and writes each one's record naming the process and data epoch surveyed.
    async fn bootstrap_claimed(
        &self,
        names: &[Arc<str>],
        surveyed: &[Surveyed],
        terms: &cluster::Terms,
        cluster_id: &str,
    ) -> Result<ClusterInit, Error> {
        let subject = cluster::record_key(&self.inner.config.key_prefix);
        let check_empty = true;
        #[cfg(redquorum_mutants)]
        let check_empty = check_empty
            && !crate::mutants::planted(&self.inner.owner.client)
                .is(Mutant::BootstrapSkipsEmptiness);
        if check_empty {
            let holding = scan_all(&self.inner.masters).await;
            let problems: Vec<String> = names
                .iter()
                .zip(&holding)
                .filter_map(|(name, h)| match h {
                    Holding::Nothing => None,
                    Holding::Key(key) => Some(format!("{name} holds {key:?}")),
                    Holding::OutOfTime => Some(format!(
                        "{name}: too many keys to check within the {} budget",
                        crate::error::human(SCAN_BUDGET)
                    )),
                    Holding::Unknown(why) => Some(format!("{name}: {why}")),
                    Holding::Failed(e) => Some(format!("{name}: {e}")),
                })
                .collect();
            if !problems.is_empty() {
                let reports: Vec<MasterReport> = names
                    .iter()
                    .zip(&holding)
                    .map(|(name, h)| {
                        let outcome = match h {
                            Holding::Nothing => MasterOutcome::Granted,
                            Holding::Key(_) => MasterOutcome::HeldByOther,
                            Holding::OutOfTime | Holding::Unknown(_) => MasterOutcome::Pending,
                            Holding::Failed(e) => MasterOutcome::Failed(e.clone()),
                        };
                        MasterReport::new(Arc::clone(name), outcome)
                    })
                    .collect();
                // A setting to change first; then keys found (or too many to check), which
                // no retry changes; only then an outage.
                let found = holding
                    .iter()
                    .any(|h| matches!(h, Holding::Key(_) | Holding::OutOfTime));
                if !found || permanent_failure(&reports, 0).is_some() {
                    return Err(failed_everywhere(
                        &subject,
                        reports,
                        (
                            "could not scan every master for keys under the prefix",
                            &problems,
                        ),
                        Leaves {
                            once_fixed: "nothing was written",
                            on_outage: "nothing was written: try again",
                        },
                    ));
                }
                return Err(
                    Error::new(ErrorKind::ClusterNotEmpty, subject).with_detail(format!(
                        "{}: init_cluster bootstraps only brand-new masters, since a master \
                         that holds keys may be one that lost others; let those locks \
                         expire, or use a dedicated key prefix. Nothing was written",
                        problems.join("; ")
                    )),
                );
            }
        }
        let ids: Vec<String> = names.iter().map(|_| cluster::new_id()).collect();
        let addresses: Vec<(String, String)> = ids
            .iter()
            .cloned()
            .zip(names.iter().map(|n| n.to_string()))
            .collect();
        let ops: Vec<Option<Op>> = ids
            .iter()
            .zip(surveyed)
            .map(|(id, s)| {
                let mut record = Record::new(cluster_id, id, &ids, terms);
                record.addresses = addresses.clone();
                Some(Op::Stamp {
                    record: Box::new(record),
                    bootstrap: Some((s.run_id.clone(), s.epoch.clone())),
                })
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        let fingerprint = terms.fingerprint(cluster_id, &sorted);
        self.write_all(ops, &fingerprint).await?;
        Ok(ClusterInit {
            cluster_id: cluster_id.to_owned(),
            members: names.iter().map(|n| n.to_string()).zip(ids).collect(),
            outcome: InitOutcome::Bootstrapped,
        })
    }

    /// Writes records with `ops` (one per master, `None` to skip: it holds the record
    /// already); every write must land and leave `fingerprint` on its master.
    async fn write_all(&self, ops: Vec<Option<Op>>, fingerprint: &str) -> Result<(), Error> {
        let subject = cluster::record_key(&self.inner.config.key_prefix);
        let masters = &self.inner.masters;
        let written = join_all(masters.iter().zip(ops).map(|(m, op)| async move {
            match op {
                Some(op) => Some(m.call(Outgoing::new(op)).await),
                None => None,
            }
        }))
        .await;
        let mut problems = Vec::new();
        let mut reports = Vec::new();
        for (master, answer) in masters.iter().zip(written) {
            let name = master.name();
            let outcome = match answer {
                None => MasterOutcome::Granted,
                Some(Ok(Reply::Stamped {
                    outcome: StampOutcome::Written | StampOutcome::Exists,
                    fingerprint: found,
                })) if found == fingerprint => MasterOutcome::Granted,
                Some(Ok(Reply::Stamped {
                    outcome: StampOutcome::EpochChanged,
                    ..
                })) => MasterOutcome::Failed(MasterError::new(
                    MasterErrorKind::Other,
                    "its data changed during the call, flushed or restarted: not bootstrapped",
                )),
                Some(Ok(_)) => {
                    problems.push(format!(
                        "{name}: another cluster record was written there meanwhile"
                    ));
                    MasterOutcome::HeldByOther
                }
                Some(Err(e)) => MasterOutcome::Failed(e),
            };
            if let MasterOutcome::Failed(e) = &outcome {
                problems.push(format!("{name}: {e}"));
            }
            reports.push(MasterReport::new(Arc::clone(name), outcome));
        }
        if problems.is_empty() {
            return Ok(());
        }
        // The others hold the record now: a later call completes it, and re-admits these
        // masters (they vote after their restart quarantine).
        let leaves = "the masters not named here hold the record now: call init_cluster \
                      again to complete it, once any setting named is fixed; it re-admits \
                      the masters named here, which vote after their restart quarantine";
        Err(failed_everywhere(
            &subject,
            reports,
            (
                "the cluster record could not be written everywhere",
                &problems,
            ),
            Leaves {
                once_fixed: leaves,
                on_outage: leaves,
            },
        ))
    }
}

/// What a scan found on one master.
enum Holding {
    Nothing,
    Key(String),
    /// Too many keys to check within the budget.
    OutOfTime,
    Unknown(String),
    /// The master failed a step of the scan.
    Failed(MasterError),
}

/// Scans every master at once for a key under the prefix, each step within the node
/// timeout and all within [`SCAN_BUDGET`].
/// Then, on a master where that found nothing, scans for a read-write lock's reader keys,
/// reader index and writer intents of locks under the prefix (docs/design.md §16): a
/// writer's intent, or a reader whose mark an operator deleted, may outlive every key
/// under the prefix.
async fn scan_all(masters: &[Arc<dyn Master>]) -> Vec<Holding> {
    let deadline = tokio::time::Instant::now() + SCAN_BUDGET;
    join_all(masters.iter().map(|m| async move {
        match scan_one(m, false, deadline).await {
            Holding::Nothing => scan_one(m, true, deadline).await,
            found => found,
        }
    }))
    .await
}

/// One scan of one master (see [`scan_all`]), within `deadline`.
async fn scan_one(m: &Arc<dyn Master>, rw: bool, deadline: tokio::time::Instant) -> Holding {
    {
        let mut cursor = 0;
        // Bounded by the budget; the count bounds it too, whatever the master answers.
        for _ in 0..1_000_000u32 {
            let step =
                tokio::time::timeout_at(deadline, m.call(Outgoing::new(Op::Scan { cursor, rw })));
            match step.await {
                Err(_) => return Holding::OutOfTime,
                Ok(Ok(Reply::Scanned {
                    found: Some(key), ..
                })) => return Holding::Key(key),
                Ok(Ok(Reply::Scanned { next: 0, .. })) => return Holding::Nothing,
                Ok(Ok(Reply::Scanned { next, .. })) => cursor = next,
                Ok(Ok(_)) => return Holding::Unknown("answered something else".into()),
                Ok(Err(e)) => return Holding::Failed(e),
            }
        }
        Holding::Unknown("the scan did not end".into())
    }
}

/// Asks every master at once, each within its own node timeout.
async fn ask_all(
    masters: &[Arc<dyn Master>],
    op: impl Fn(usize) -> Op,
) -> Vec<Result<Reply, MasterError>> {
    join_all(
        masters
            .iter()
            .enumerate()
            .map(|(i, m)| m.call(Outgoing::new(op(i)))),
    )
    .await
}

/// Per-master reports of administration answers: a claim another call holds is held by
/// another; any other answer is done as asked.
fn reports_of(names: &[Arc<str>], answers: &[Result<Reply, MasterError>]) -> Vec<MasterReport> {
    names
        .iter()
        .zip(answers)
        .map(|(name, answer)| {
            let outcome = match answer {
                Ok(Reply::HeldByOther) => MasterOutcome::HeldByOther,
                Ok(_) => MasterOutcome::Granted,
                Err(e) => MasterOutcome::Failed(e.clone()),
            };
            MasterReport::new(Arc::clone(name), outcome)
        })
        .collect()
}

/// The failure of an `init_cluster` that some masters did not answer as it needs
/// (`problems`, each naming its master): nothing was written.
fn unanswered(
    subject: &str,
    names: &[Arc<str>],
    answers: &[Result<Reply, MasterError>],
    problems: &[String],
) -> Error {
    failed_everywhere(
        subject,
        reports_of(names, answers),
        ("init_cluster needs every master to answer", problems),
        Leaves {
            once_fixed: "nothing was written",
            on_outage: "nothing was written",
        },
    )
}

/// What a failed step of `init_cluster` leaves, said after it: where a setting must
/// change first, and where trying again can help.
struct Leaves<'a> {
    once_fixed: &'a str,
    on_outage: &'a str,
}

/// The failure of a step of `init_cluster` that every master must take: `step` and what
/// went wrong on each master (`problems`, each beginning with its master's name), then
/// what the failure `leaves`. It needs every master, so one whose failure lasts until a
/// setting changes (a TLS handshake, refused credentials, an unfit master) makes it fail
/// as that, not retryable, with what to change for each, as a lock does
/// (`engine::permanent_failure`), and the other masters' problems beside; only an outage
/// is `NoQuorum`, retryable.
fn failed_everywhere(
    subject: &str,
    reports: Vec<MasterReport>,
    (step, problems): (&str, &[String]),
    leaves: Leaves<'_>,
) -> Error {
    let error = match permanent_failure(&reports, 0) {
        Some((kind, fixes)) => {
            // The fixes name their masters: the problems of the others follow them.
            let fixed: Vec<&str> = reports
                .iter()
                .filter(|r| {
                    matches!(r.outcome(), MasterOutcome::Failed(e) if matches!(
                        e.kind(),
                        MasterErrorKind::Auth | MasterErrorKind::Tls | MasterErrorKind::Misconfigured
                    ))
                })
                .map(MasterReport::master)
                .collect();
            let others: Vec<&str> = problems
                .iter()
                .filter(|p| {
                    !fixed.iter().any(|m| {
                        p.strip_prefix(m)
                            .is_some_and(|rest| rest.starts_with([':', ' ']))
                    })
                })
                .map(String::as_str)
                .collect();
            let also = match others.is_empty() {
                true => String::new(),
                false => format!("; besides, {}", others.join("; ")),
            };
            Error::new(kind, subject)
                .with_detail(format!("{step}: {fixes}{also}; {}", leaves.once_fixed))
        }
        None => Error::new(ErrorKind::NoQuorum, subject).with_detail(format!(
            "{step} ({}); {}",
            problems.join("; "),
            leaves.on_outage
        )),
    };
    error.with_masters(reports)
}

/// Surveys every master for `init_cluster`: all must answer, else nothing is written and
/// the error says which did not (a TLS or configuration problem before an outage).
async fn survey_all(
    masters: &[Arc<dyn Master>],
    names: &[Arc<str>],
    subject: &str,
) -> Result<Vec<Surveyed>, Error> {
    let answers = ask_all(masters, |_| Op::Survey).await;
    let mut surveyed = Vec::with_capacity(answers.len());
    let mut problems = Vec::new();
    for (answer, name) in answers.iter().zip(names) {
        match answer {
            Ok(Reply::Survey {
                run_id,
                record,
                epoch,
            }) => surveyed.push(Surveyed {
                run_id: run_id.clone(),
                record: record.as_deref().cloned(),
                epoch: epoch.clone(),
            }),
            Ok(_) => problems.push(format!("{name}: answered something else")),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    if problems.is_empty() {
        return Ok(surveyed);
    }
    Err(unanswered(subject, names, &answers, &problems))
}

/// The member ids given back to the masters `strangers` (surveyed without a record) on
/// re-admission: each gets the id of a member no master carries, only at the address that
/// member was initialised at (a master elsewhere may be a stranger, and giving it a live
/// member's id would let two servers vote as one). `Err` says which master has no such
/// member.
fn readmitted(
    adopted: &Record,
    names: &[Arc<str>],
    surveyed: &[Surveyed],
    strangers: &[usize],
) -> Result<Vec<(usize, String)>, String> {
    let carried: Vec<&str> = surveyed
        .iter()
        .filter_map(|s| s.record.as_ref().map(|r| r.master.as_str()))
        .collect();
    let mut given: Vec<(usize, String)> = Vec::new();
    for &i in strangers {
        let id = adopted.members.iter().find(|m| {
            !carried.contains(&m.as_str())
                && adopted.address_of(m) == Some(&*names[i])
                && !given.iter().any(|(_, g)| g == *m)
        });
        match id {
            Some(id) => given.push((i, id.clone())),
            None => {
                return Err(format!(
                    "{} has no cluster record, and no member that lost its record was \
                     initialised at that address: it is not one of this cluster's masters \
                     as they were initialised; nothing was written",
                    names[i]
                ));
            }
        }
    }
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(master: &str, outcome: MasterOutcome) -> MasterReport {
        MasterReport::new(master.into(), outcome)
    }

    fn failed(kind: MasterErrorKind, why: &str) -> MasterOutcome {
        MasterOutcome::Failed(MasterError::new(kind, why))
    }

    const LEAVES: Leaves<'static> = Leaves {
        once_fixed: "nothing was written",
        on_outage: "nothing was written: try again",
    };

    /// A setting to change on one master (here its certificate) fails the step as that,
    /// not retryable; the other masters' problems follow the fix, and no master is named
    /// twice in the whole message.
    #[test]
    fn a_failure_for_good_names_each_master_once_with_the_others_beside() {
        let tls = failed(
            MasterErrorKind::Tls,
            "the certificate is not trusted: set tls_ca",
        );
        let problems = [
            "rediss://m1: the certificate is not trusted: set tls_ca".to_owned(),
            "rediss://m2: another init_cluster holds it".to_owned(),
        ];
        let error = failed_everywhere(
            "redquorum:cluster",
            vec![
                report("rediss://m1", tls),
                report("rediss://m2", MasterOutcome::HeldByOther),
                report("rediss://m3", MasterOutcome::Granted),
            ],
            ("could not claim every master", &problems),
            LEAVES,
        );
        assert_eq!(error.kind(), ErrorKind::Tls);
        assert!(!error.is_retryable());
        let shown = error.to_string();
        for master in ["rediss://m1", "rediss://m2"] {
            assert_eq!(shown.matches(master).count(), 1, "{master}: {shown}");
        }
        assert!(
            shown.contains("besides, rediss://m2: another init_cluster"),
            "{shown}"
        );
        assert!(shown.contains("; nothing was written ("), "{shown}");
        assert!(
            shown.contains("1 of 3 masters granted, 1 held by another, 1 failed"),
            "{shown}"
        );
    }

    /// Only an outage is retryable: every master's problem in the list, named once.
    #[test]
    fn an_outage_is_retryable_and_names_each_master_once() {
        let problems = ["redis://m1: connection refused".to_owned()];
        let error = failed_everywhere(
            "redquorum:cluster",
            vec![
                report(
                    "redis://m1",
                    failed(MasterErrorKind::Refused, "connection refused"),
                ),
                report("redis://m2", MasterOutcome::Granted),
            ],
            (
                "could not scan every master for keys under the prefix",
                &problems,
            ),
            LEAVES,
        );
        assert_eq!(error.kind(), ErrorKind::NoQuorum);
        assert!(error.is_retryable());
        let shown = error.to_string();
        assert_eq!(shown.matches("redis://m1").count(), 1, "{shown}");
        assert!(shown.contains("try again"), "{shown}");
    }
}
