//! Operating a cluster (docs/design.md §11): its bootstrap ([`Redlock::init_cluster`]).
//!
//! Layer: the top, beside the crate root (docs/design.md §10); it uses the facade, the core
//! and the masters, and nothing uses it.

use std::fmt;
use std::sync::Arc;

use futures::future::join_all;

use crate::cluster::{self, Admission, Record, View};
use crate::error::{Error, ErrorKind, MasterError, MasterOutcome, MasterReport};
use crate::lock::Redlock;
use crate::master::{Master, Op, Reply};
#[cfg(feature = "mutants")]
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
    holds: Option<String>,
}

impl Redlock {
    /// Writes the cluster record on every master of a brand-new cluster, so that they
    /// vote at once instead of abstaining for `ttl_max` (docs/design.md §11), and so that
    /// every client whose configuration differs is refused from its first call.
    ///
    /// It refuses unless every master answers, no two addresses reach one server, and no
    /// master holds a key under the key prefix (other than this crate's records): only an
    /// operator can know that the masters are new, and a master that holds keys may be one
    /// that lost some. It is idempotent for the same configuration. On an initialised
    /// cluster where some masters lost their record (and their data), it gives them their
    /// member ids back: they vote after their restart quarantine, and no longer count for
    /// fencing tokens. Nothing is written unless every check passed.
    ///
    /// # Errors
    /// - [`ErrorKind::NoQuorum`] (retryable) when a master did not answer: every master
    ///   must.
    /// - [`ErrorKind::ClusterMismatch`] when a master carries the record of another
    ///   configuration or another cluster, or two addresses reach one server.
    /// - [`ErrorKind::ClusterNotEmpty`] when a master of an uninitialised cluster holds a
    ///   key under the prefix.
    /// - [`ErrorKind::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the record written on some masters only; calling
    /// `init_cluster` again completes it (those masters then count as re-admitted).
    ///
    /// # Example
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
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
        crate::lock::check_runtime(&subject)?;
        let names: Vec<Arc<str>> = inner.masters.iter().map(|m| Arc::clone(m.name())).collect();
        let fail = |kind: ErrorKind, detail: String, reports: Vec<MasterReport>| {
            Error::new(kind, subject.as_str())
                .with_detail(detail)
                .with_masters(reports)
        };

        // 1. Survey every master; all must answer.
        let answers = ask_all(&inner.masters, |_| Op::Survey).await;
        let reports = reports_of(&names, &answers);
        let mut surveyed = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                Ok(Reply::Survey {
                    run_id,
                    record,
                    holds,
                }) => surveyed.push(Surveyed {
                    run_id,
                    record: record.map(|r| *r),
                    holds,
                }),
                _ => {
                    return Err(fail(
                        ErrorKind::NoQuorum,
                        "init_cluster needs every master to answer; nothing was written".into(),
                        reports,
                    ));
                }
            }
        }

        // 2. Judge what they carry as a client would, from scratch.
        let terms = Redlock::terms(&inner.config);
        let view = View::new(terms.clone(), names.clone());
        let mut strangers = Vec::new();
        for (index, s) in surveyed.iter().enumerate() {
            match view.connected(index, Some(&s.run_id), s.record.as_ref()) {
                Admission::Member | Admission::Readmit { .. } => {}
                Admission::Mismatch(why) => {
                    return Err(fail(
                        ErrorKind::ClusterMismatch,
                        format!("{}: {why}; nothing was written", names[index]),
                        reports,
                    ));
                }
                Admission::Stranger(_) => strangers.push(index),
            }
        }
        // A master judged before the one that showed the cluster saw none: judge again.
        for (index, s) in surveyed.iter().enumerate() {
            if s.record.is_none() && !strangers.contains(&index) && view.adopted().is_some() {
                strangers.push(index);
            }
        }
        strangers.sort_unstable();

        let Some(adopted) = view.adopted() else {
            return self.bootstrap(&names, &surveyed, &terms, reports).await;
        };
        let members = |surveyed: &[Surveyed], given: &[(usize, String)]| {
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
                .collect::<Vec<_>>()
        };
        if strangers.is_empty() {
            return Ok(ClusterInit {
                cluster_id: adopted.cluster.clone(),
                members: members(&surveyed, &[]),
                outcome: InitOutcome::AlreadyInitialised,
            });
        }

        // 3. Re-admission: the member ids no master carries go to the masters without a
        //    record, which the operator asserts are those members.
        let carried: Vec<&str> = surveyed
            .iter()
            .filter_map(|s| s.record.as_ref().map(|r| r.master.as_str()))
            .collect();
        let missing: Vec<String> = adopted
            .members
            .iter()
            .filter(|m| !carried.contains(&m.as_str()))
            .cloned()
            .collect();
        if missing.len() != strangers.len() {
            let listed: Vec<String> = strangers.iter().map(|&i| names[i].to_string()).collect();
            return Err(fail(
                ErrorKind::ClusterMismatch,
                format!(
                    "{} have no cluster record but only {} member ids are unaccounted for: \
                     list the cluster's own masters; nothing was written",
                    listed.join(", "),
                    missing.len()
                ),
                reports,
            ));
        }
        let given: Vec<(usize, String)> = strangers.iter().copied().zip(missing).collect();
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
                        run_id: None,
                    }
                })
            })
            .collect();
        self.write_all(&names, ops, &adopted.fingerprint).await?;
        Ok(ClusterInit {
            cluster_id: adopted.cluster.clone(),
            members: members(&surveyed, &given),
            outcome: InitOutcome::Readmitted(
                strangers.iter().map(|&i| names[i].to_string()).collect(),
            ),
        })
    }

    /// Bootstraps brand-new masters: each must hold no key under the prefix.
    async fn bootstrap(
        &self,
        names: &[Arc<str>],
        surveyed: &[Surveyed],
        terms: &cluster::Terms,
        reports: Vec<MasterReport>,
    ) -> Result<ClusterInit, Error> {
        let subject = cluster::record_key(&self.inner.config.key_prefix);
        let check_empty = true;
        #[cfg(feature = "mutants")]
        let check_empty = check_empty
            && !self
                .inner
                .config
                .planted
                .is(Mutant::BootstrapSkipsEmptiness);
        let holding: Vec<String> = surveyed
            .iter()
            .zip(names)
            .filter_map(|(s, name)| s.holds.as_ref().map(|key| format!("{name} holds {key:?}")))
            .collect();
        if check_empty && !holding.is_empty() {
            return Err(Error::new(ErrorKind::ClusterNotEmpty, subject.as_str())
                .with_detail(format!(
                    "{}: init_cluster bootstraps only brand-new masters, since a master that \
                     holds keys may be one that lost others; let those locks expire (or \
                     use a fresh key prefix), then call it again. Nothing was written",
                    holding.join(", ")
                ))
                .with_masters(reports));
        }
        let cluster_id = cluster::new_id();
        let ids: Vec<String> = names.iter().map(|_| cluster::new_id()).collect();
        let ops: Vec<Option<Op>> = ids
            .iter()
            .zip(surveyed)
            .map(|(id, s)| {
                Some(Op::Stamp {
                    record: Box::new(Record::new(&cluster_id, id, &ids, terms)),
                    run_id: Some(s.run_id.clone()),
                })
            })
            .collect();
        let fingerprint = terms.fingerprint(&cluster_id, &{
            let mut sorted = ids.clone();
            sorted.sort();
            sorted
        });
        self.write_all(names, ops, &fingerprint).await?;
        Ok(ClusterInit {
            cluster_id,
            members: names.iter().map(|n| n.to_string()).zip(ids).collect(),
            outcome: InitOutcome::Bootstrapped,
        })
    }

    /// Writes records with `ops` (one per master, `None` to skip); every write must land
    /// and leave `fingerprint` on its master.
    async fn write_all(
        &self,
        names: &[Arc<str>],
        ops: Vec<Option<Op>>,
        fingerprint: &str,
    ) -> Result<(), Error> {
        let subject = cluster::record_key(&self.inner.config.key_prefix);
        let masters: Vec<(Arc<dyn Master>, Arc<Op>)> = self
            .inner
            .masters
            .iter()
            .zip(ops)
            .filter_map(|(m, op)| op.map(|op| (Arc::clone(m), Arc::new(op))))
            .collect();
        let written = join_all(masters.iter().map(|(m, op)| m.call(Arc::clone(op)))).await;
        let mut problems = Vec::new();
        for ((master, _), answer) in masters.iter().zip(&written) {
            match answer {
                Ok(Reply::Stamped {
                    fingerprint: found, ..
                }) if found == fingerprint => {}
                Ok(_) => problems.push(format!(
                    "{}: another cluster record was written there meanwhile (a concurrent \
                     init_cluster?)",
                    master.name()
                )),
                Err(e) => problems.push(format!("{}: {e}", master.name())),
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let reports = names
            .iter()
            .map(|n| MasterReport::new(Arc::clone(n), MasterOutcome::Pending))
            .collect();
        Err(Error::new(ErrorKind::NoQuorum, subject.as_str())
            .with_detail(format!(
                "the cluster record could not be written everywhere ({}): call init_cluster \
                 again to complete it",
                problems.join("; ")
            ))
            .with_masters(reports))
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
            .map(|(i, m)| m.call(Arc::new(op(i)))),
    )
    .await
}

/// Per-master reports of administration answers.
fn reports_of(names: &[Arc<str>], answers: &[Result<Reply, MasterError>]) -> Vec<MasterReport> {
    names
        .iter()
        .zip(answers)
        .map(|(name, answer)| {
            let outcome = match answer {
                Ok(_) => MasterOutcome::Granted,
                Err(e) => MasterOutcome::Failed(e.clone()),
            };
            MasterReport::new(Arc::clone(name), outcome)
        })
        .collect()
}
