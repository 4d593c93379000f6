//! The cluster record (docs/design.md §11): what every master of one cluster keeps so that
//! its clients agree on the set of masters and on the settings safety depends on, and one
//! client's view of it.
//!
//! Each master keeps a hash without TTL at `<key_prefix>redquorum:cluster` ([`record_key`]):
//! the cluster's id, this master's own id, the ids of every member, the settings that must
//! agree ([`Terms`]) and their fingerprint, a name-based id over all of them. The acquire
//! and extend scripts compare the caller's fingerprint with the record's and refuse on a
//! difference; [`View`] keeps what one client learnt from its masters' records.
//!
//! Layer: a leaf (docs/design.md §10); of the other modules it uses only `error`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use uuid::Uuid;

use crate::error::{MasterError, MasterErrorKind};

/// The version of the lock protocol (scripts and key layout) the record names.
pub(crate) const PROTOCOL_VERSION: &str = "1";

/// The namespace of fingerprints (a fixed, random UUID).
const FINGERPRINT_NAMESPACE: Uuid = Uuid::from_u128(0x5f0e_2c6b_91d4_4a7e_8b3f_c2a1_7d60_e9b4);

/// The field of the record that says whether a master kept its fence counters since the
/// cluster began (`kept`) or was re-admitted after losing its data (`lost`).
pub(crate) const COUNTERS_LOST: &str = "lost";

/// The field of the cluster record's key that holds the master's data epoch
/// (`epoch.lua`, docs/design.md §7): written by the first lock script to reach the master,
/// record or none, so that one read gives a script both the epoch and the fingerprint.
pub(crate) const EPOCH_FIELD: &str = "epoch";

/// The key of the cluster record under `prefix`, which also holds the master's data epoch
/// ([`EPOCH_FIELD`]).
pub(crate) fn record_key(prefix: &str) -> String {
    format!("{prefix}redquorum:cluster")
}

/// The settings every client of a cluster must share: a client with another value of any
/// of them could form a quorum that does not overlap another client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Terms {
    /// The number of masters.
    pub(crate) n: usize,
    /// How many of them a lock needs.
    pub(crate) quorum: usize,
    /// The longest TTL any client uses, in milliseconds (restart quarantine's window).
    pub(crate) ttl_max_ms: u64,
    /// The clock-drift factor, as Rust prints it (shortest round-trip form).
    pub(crate) drift: String,
    /// The key prefix.
    pub(crate) prefix: String,
}

impl Terms {
    /// The terms of a configuration.
    pub(crate) fn new(n: usize, quorum: usize, ttl_max_ms: u64, drift: f64, prefix: &str) -> Self {
        Self {
            n,
            quorum,
            ttl_max_ms,
            drift: format!("{drift}"),
            prefix: prefix.to_owned(),
        }
    }

    /// Each term as a record field and its value.
    fn fields(&self) -> [(&'static str, String); 5] {
        [
            ("n", self.n.to_string()),
            ("quorum", self.quorum.to_string()),
            ("ttl_max_ms", self.ttl_max_ms.to_string()),
            ("drift", self.drift.clone()),
            ("prefix", self.prefix.clone()),
        ]
    }

    /// The fingerprint of these terms for the cluster `cluster` with `members` (sorted).
    pub(crate) fn fingerprint(&self, cluster: &str, members: &[String]) -> String {
        let mut text = format!(
            "redquorum cluster\nversion={PROTOCOL_VERSION}\ncluster={cluster}\nmembers={}\n",
            members.join(",")
        );
        for (name, value) in self.fields() {
            text.push_str(&format!("{name}={value:?}\n"));
        }
        Uuid::new_v5(&FINGERPRINT_NAMESPACE, text.as_bytes()).to_string()
    }

    /// Why a client with these terms refuses `record`, if it does: a sentence naming each
    /// difference.
    pub(crate) fn disagreement(&self, record: &Record) -> Option<String> {
        if record.agrees_with(self) {
            return None;
        }
        let mut differences = self.differences(record);
        if differences.is_empty() {
            differences.push(format!(
                "fingerprint {} is not what its cluster and members give",
                record.fingerprint
            ));
        }
        Some(format!(
            "its cluster record (cluster {}) differs from this client's configuration: {}. \
             Use the cluster's settings",
            record.cluster,
            differences.join("; ")
        ))
    }

    /// What differs between these terms and a record's, one phrase per setting.
    fn differences(&self, record: &Record) -> Vec<String> {
        let mut found = Vec::new();
        if record.version != PROTOCOL_VERSION {
            found.push(format!(
                "protocol version {} where this client speaks {PROTOCOL_VERSION}",
                record.version
            ));
        }
        if record.members.len() != self.n {
            found.push(format!(
                "{} members where this client lists {} masters",
                record.members.len(),
                self.n
            ));
        }
        let theirs = record.terms.fields();
        for ((name, ours), (_, recorded)) in self.fields().iter().zip(theirs.iter()) {
            if ours != recorded {
                found.push(format!(
                    "{name} {recorded:?} where this client has {ours:?}"
                ));
            }
        }
        found
    }
}

/// A cluster record as read from one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) version: String,
    pub(crate) cluster: String,
    /// This master's id.
    pub(crate) master: String,
    /// Every member's id, sorted.
    pub(crate) members: Vec<String>,
    pub(crate) terms: Terms,
    pub(crate) fingerprint: String,
    /// The `run_id` and data epoch of the process that was bootstrapped (`init_cluster`),
    /// empty for a master re-admitted after losing its data.
    pub(crate) bootstrap_run_id: String,
    pub(crate) bootstrap_epoch: String,
    /// The master was re-admitted after losing its data: its fence counters may be behind
    /// tokens already issued.
    pub(crate) counters_lost: bool,
    /// Each member's id and the address (password redacted) it was initialised at: a
    /// master without a record is re-admitted by `init_cluster` only at its member's
    /// address. Not part of the fingerprint (clients may reach a master by other names).
    pub(crate) addresses: Vec<(String, String)>,
}

impl Record {
    /// A new record for member `master` of `cluster`.
    pub(crate) fn new(cluster: &str, master: &str, members: &[String], terms: &Terms) -> Self {
        let mut members = members.to_vec();
        members.sort();
        Self {
            version: PROTOCOL_VERSION.to_owned(),
            cluster: cluster.to_owned(),
            master: master.to_owned(),
            fingerprint: terms.fingerprint(cluster, &members),
            members,
            terms: terms.clone(),
            bootstrap_run_id: String::new(),
            bootstrap_epoch: String::new(),
            counters_lost: false,
            addresses: Vec::new(),
        }
    }

    /// The address member `id` was initialised at, if the record says.
    pub(crate) fn address_of(&self, id: &str) -> Option<&str> {
        self.addresses
            .iter()
            .find(|(member, _)| member == id)
            .map(|(_, address)| address.as_str())
    }

    /// Parses the fields of the hash (`HGETALL`); `None` for a hash that holds no field
    /// but the master's data epoch ([`EPOCH_FIELD`]), or none at all (no record).
    pub(crate) fn parse(fields: &HashMap<String, String>) -> Result<Option<Record>, String> {
        if fields.keys().all(|field| field == EPOCH_FIELD) {
            return Ok(None);
        }
        let get = |name: &str| -> Result<String, String> {
            fields
                .get(name)
                .cloned()
                .ok_or_else(|| format!("the cluster record has no field {name:?}"))
        };
        let number = |name: &str| -> Result<u64, String> {
            let text = get(name)?;
            text.parse()
                .map_err(|_| format!("the cluster record's {name} is {text:?}, not a number"))
        };
        let members: Vec<String> = get("members")?
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        let record = Record {
            version: get("version")?,
            cluster: get("cluster")?,
            master: get("master")?,
            members,
            terms: Terms {
                n: usize::try_from(number("n")?).unwrap_or(usize::MAX),
                quorum: usize::try_from(number("quorum")?).unwrap_or(usize::MAX),
                ttl_max_ms: number("ttl_max_ms")?,
                drift: get("drift")?,
                prefix: get("prefix")?,
            },
            fingerprint: get("fingerprint")?,
            bootstrap_run_id: fields.get("bootstrap_run_id").cloned().unwrap_or_default(),
            bootstrap_epoch: fields.get("bootstrap_epoch").cloned().unwrap_or_default(),
            counters_lost: fields.get("counters").map(String::as_str) == Some(COUNTERS_LOST),
            addresses: fields
                .get("addresses")
                .map(|text| {
                    text.lines()
                        .filter_map(|line| line.split_once('\t'))
                        .map(|(id, address)| (id.to_owned(), address.to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
        };
        if !record.members.contains(&record.master) {
            return Err(format!(
                "the cluster record names master {} but not among its members",
                record.master
            ));
        }
        Ok(Some(record))
    }

    /// The record's fields and values, as written (`HSET`); the bootstrap fields are
    /// written by the script, which reads the epoch.
    pub(crate) fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("version", self.version.clone()),
            ("cluster", self.cluster.clone()),
            ("master", self.master.clone()),
            ("members", self.members.join(",")),
            ("fingerprint", self.fingerprint.clone()),
            (
                "counters",
                if self.counters_lost {
                    COUNTERS_LOST
                } else {
                    "kept"
                }
                .to_owned(),
            ),
        ];
        if !self.addresses.is_empty() {
            let lines: Vec<String> = self
                .addresses
                .iter()
                .map(|(id, address)| format!("{id}\t{address}"))
                .collect();
            fields.push(("addresses", lines.join("\n")));
        }
        fields.extend(self.terms.fields());
        fields
    }

    /// Whether the record's fingerprint is what `terms` give for its cluster and members.
    fn agrees_with(&self, terms: &Terms) -> bool {
        self.members.len() == terms.n
            && self.version == PROTOCOL_VERSION
            && terms.fingerprint(&self.cluster, &self.members) == self.fingerprint
    }
}

/// Who holds a lock, as its client's holder record shows it (`Redlock::inspect`): written
/// once per client and label on each master (`holder.lua`), and named by every value the
/// client locks with, which begins with the record's tag (docs/design.md §11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The client's id, fresh for every client.
    pub(crate) client: Arc<str>,
    pub(crate) host: Arc<str>,
    pub(crate) pid: u32,
    /// What the holder chose to call itself (empty when it chose nothing).
    pub(crate) label: Arc<str>,
    /// The holder record's tag: the client's id, followed for a label chosen per call by
    /// a hash of that label, so that each label of a client has one record.
    pub(crate) tag: Arc<str>,
}

impl Owner {
    /// This process, as a new client with `label` (the crate's tests).
    #[cfg(test)]
    pub(crate) fn this_process(label: &str) -> Self {
        Self::of_client(new_id().into(), label)
    }

    /// This process, as the client whose id is `client`, with `label`.
    pub(crate) fn of_client(client: Arc<str>, label: &str) -> Self {
        Self {
            tag: Arc::clone(&client),
            client,
            host: gethostname::gethostname().to_string_lossy().into(),
            pid: std::process::id(),
            label: label.into(),
        }
    }

    /// The same client under another label, with that label's own holder record.
    pub(crate) fn labelled(&self, label: &str) -> Self {
        if *self.label == *label {
            return self.clone();
        }
        Self {
            label: label.into(),
            tag: format!("{}~{:016x}", self.client, fnv1a(label.as_bytes())).into(),
            ..self.clone()
        }
    }

    /// A lock value of this owner: its tag, a dot, and `random` (hex digits).
    pub(crate) fn value(&self, random: &str) -> String {
        format!("{}.{random}", self.tag)
    }
}

/// The 64-bit FNV-1a hash of `bytes`: a label's part of a holder record's tag, the same in
/// every process.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A new random id (cluster, master or client).
pub(crate) fn new_id() -> String {
    Uuid::new_v4().to_string()
}

/// What a client may do with a master, as its view of the cluster says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It votes (as far as the cluster is concerned).
    Member,
    /// It has no record in an initialised cluster, and this client knows it as member
    /// `id`: write the record again (marking its counters lost), then it votes after its
    /// restart quarantine.
    Readmit { record: Box<Record> },
    /// It never votes for this client, for the reason given: its record disagrees with
    /// this client's configuration, or this client reaches it twice. The client refuses
    /// every grant while this lasts.
    Mismatch(Arc<str>),
    /// It has no record in an initialised cluster and this client cannot tell which
    /// member it was (it may be one that lost its data, or a stranger): it never votes
    /// for this client until a record is written for it again.
    Stranger(Arc<str>),
}

impl Admission {
    /// The refusal, as a master's failure.
    pub(crate) fn refusal(&self) -> Option<MasterError> {
        match self {
            Admission::Member | Admission::Readmit { .. } => None,
            Admission::Mismatch(why) => Some(MasterError::new(
                MasterErrorKind::ClusterMismatch,
                why.clone(),
            )),
            Admission::Stranger(why) => Some(MasterError::new(
                MasterErrorKind::Misconfigured,
                why.clone(),
            )),
        }
    }
}

/// One client's view of its cluster: the record it adopted and what each master showed.
#[derive(Debug)]
pub(crate) struct View {
    /// The id of the client whose view this is, which its owner records carry: fresh for
    /// each view, so that a view made to judge the masters as a new client would stands
    /// for a new client.
    client: Arc<str>,
    terms: Terms,
    names: Vec<Arc<str>>,
    state: Mutex<ViewState>,
}

#[derive(Debug, Default)]
struct ViewState {
    /// The record whose cluster this client belongs to, once one was seen that agrees.
    adopted: Option<Record>,
    seen: Vec<Seen>,
}

#[derive(Debug, Default, Clone)]
struct Seen {
    run_id: Option<String>,
    /// The member id this master showed, if it showed one that agrees.
    id: Option<String>,
    /// Why it never votes, decided when it connected.
    refused: Option<Admission>,
    /// It showed no record while this client knew none, so it was admitted without one.
    blank: bool,
}

impl View {
    /// The view of a client with `terms` over masters named `names` (in configured order).
    pub(crate) fn new(terms: Terms, names: Vec<Arc<str>>) -> Self {
        Self::of_client(new_id().into(), terms, names)
    }

    /// The view of the client whose id is `client`.
    pub(crate) fn of_client(client: Arc<str>, terms: Terms, names: Vec<Arc<str>>) -> Self {
        let seen = vec![Seen::default(); names.len()];
        Self {
            client,
            terms,
            names,
            state: Mutex::new(ViewState {
                adopted: None,
                seen,
            }),
        }
    }

    /// The id of the client whose view this is.
    pub(crate) fn client(&self) -> &Arc<str> {
        &self.client
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        // Updated from complete values; a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The terms of this client.
    pub(crate) fn terms(&self) -> &Terms {
        &self.terms
    }

    /// Why this client refuses `record`, if it does: a sentence naming each difference
    /// between the record's terms and its own.
    pub(crate) fn disagreement(&self, record: &Record) -> Option<String> {
        #[cfg(redquorum_mutants)]
        if let Some(quorum) = crate::mutants::planted(&self.client).quorum(self.terms.n) {
            let terms = Terms {
                quorum,
                ..self.terms.clone()
            };
            return terms.disagreement(record);
        }
        self.terms.disagreement(record)
    }

    /// The fingerprint the scripts must find, or empty while this client knows of no
    /// record (an uninitialised cluster).
    pub(crate) fn fingerprint(&self) -> String {
        self.lock()
            .adopted
            .as_ref()
            .map(|r| r.fingerprint.clone())
            .unwrap_or_default()
    }

    /// Whether `fingerprint` is the one [`fingerprint`](Self::fingerprint) gives now.
    pub(crate) fn has_fingerprint(&self, fingerprint: &str) -> bool {
        match &self.lock().adopted {
            Some(record) => record.fingerprint == fingerprint,
            None => fingerprint.is_empty(),
        }
    }

    /// The record this client adopted, if any.
    pub(crate) fn adopted(&self) -> Option<Record> {
        self.lock().adopted.clone()
    }

    /// Takes in what master `index` showed when it (re)connected: its `run_id` (if it could
    /// be read) and its record. Says whether it may vote.
    pub(crate) fn connected(
        &self,
        index: usize,
        run_id: Option<&str>,
        record: Option<&Record>,
    ) -> Admission {
        let mut state = self.lock();
        let Some(seen) = state.seen.get(index).cloned() else {
            return Admission::Mismatch("no such master".into());
        };
        // Two addresses that reach one server would let it vote twice.
        // Two addresses that reach one server (one run_id) would let it vote twice: the
        // configuration is wrong. Two servers that carry one member id (one holds a copy of
        // the other's data) cannot be told apart: neither votes.
        let twin = state.seen.iter().enumerate().find_map(|(j, other)| {
            let same_run = run_id.is_some() && other.run_id.as_deref() == run_id;
            let same_id = record.is_some_and(|r| other.id.as_deref() == Some(r.master.as_str()));
            (j != index && (same_run || same_id)).then_some((j, same_run))
        });
        let mut now_seen = Seen {
            run_id: run_id.map(str::to_owned),
            id: seen.id.clone(),
            refused: None,
            blank: false,
        };
        let name = |j: usize| self.names.get(j).map_or("another master", |n| &**n);
        let admission = if let Some((j, true)) = twin {
            let why = |other: usize| -> Arc<str> {
                format!(
                    "it is the same server as {} (same run_id): it would vote twice; list \
                     each master once",
                    name(other)
                )
                .into()
            };
            if let Some(other) = state.seen.get_mut(j) {
                other.refused = Some(Admission::Mismatch(why(index)));
            }
            Admission::Mismatch(why(j))
        } else if let Some((j, false)) = twin {
            let why = |other: usize| -> Arc<str> {
                format!(
                    "it carries the same member id as {}, another server: one of them holds \
                     a copy of the other's data, so neither votes; empty the copy and \
                     re-admit it",
                    name(other)
                )
                .into()
            };
            if let Some(other) = state.seen.get_mut(j) {
                other.refused = Some(Admission::Stranger(why(index)));
            }
            // Both keep the id they showed, so that reading either again finds the other:
            // the refusal lasts until one of them shows another id or none.
            if let Some(record) = record {
                now_seen.id = Some(record.master.clone());
            }
            Admission::Stranger(why(j))
        } else {
            match record {
                Some(record) => self.judge_record(&mut state, record, &mut now_seen),
                None => match (&state.adopted, &seen.id) {
                    (None, _) => {
                        now_seen.blank = true;
                        Admission::Member
                    }
                    (Some(adopted), Some(id)) => {
                        let mut again = adopted.clone();
                        again.master = id.clone();
                        again.counters_lost = true;
                        again.bootstrap_run_id.clear();
                        again.bootstrap_epoch.clear();
                        Admission::Readmit {
                            record: Box::new(again),
                        }
                    }
                    (Some(_), None) => Admission::Stranger(
                        "it has no cluster record although its cluster is initialised: it \
                         lost its data, or it is not a member, and this client never saw it \
                         carry a member id. If it is a member that lost its data, run \
                         Redlock::init_cluster with the cluster's masters at the addresses \
                         they were initialised with, to re-admit it; otherwise remove it \
                         from this client's masters"
                            .into(),
                    ),
                },
            }
        };
        if admission.refusal().is_some() {
            now_seen.refused = Some(admission.clone());
        }
        if let Some(slot) = state.seen.get_mut(index) {
            *slot = now_seen;
        }
        admission
    }

    fn judge_record(&self, state: &mut ViewState, record: &Record, seen: &mut Seen) -> Admission {
        let disagreement = self.disagreement(record);
        // Planted, a record is adopted whatever its terms, and its fingerprint sent as this
        // client's own.
        #[cfg(redquorum_mutants)]
        let disagreement = disagreement.filter(|_| {
            !crate::mutants::planted(&self.client).is(crate::mutants::Mutant::IgnoreFingerprint)
        });
        if let Some(why) = disagreement {
            return Admission::Mismatch(why.into());
        }
        if let Some(adopted) = &state.adopted
            && adopted.fingerprint != record.fingerprint
        {
            return Admission::Mismatch(
                format!(
                    "it belongs to cluster {}, another cluster than this client's other \
                     masters ({}): list the masters of one cluster",
                    record.cluster, adopted.cluster
                )
                .into(),
            );
        }
        if let Some(id) = &seen.id
            && *id != record.master
        {
            return Admission::Mismatch(
                format!(
                    "its member id changed from {id} to {} while this client watched: \
                     another server answers at this address",
                    record.master
                )
                .into(),
            );
        }
        seen.id = Some(record.master.clone());
        if state.adopted.is_none() {
            state.adopted = Some(record.clone());
        }
        Admission::Member
    }

    /// Whether master `index` was admitted while this client knew no record and showed
    /// none, and this client has adopted a record since: in an initialised cluster a
    /// master without a record never votes unless this client knows which member it was,
    /// so its record is read again before it is asked to vote.
    pub(crate) fn stale(&self, index: usize) -> bool {
        let state = self.lock();
        state.adopted.is_some()
            && state
                .seen
                .get(index)
                .is_some_and(|s| s.blank && s.refused.is_none())
    }

    /// Why a grant master `index` gave may not count once its round is decided, if it may
    /// not: this client refuses the master now, or the master is [`stale`](Self::stale).
    /// A master met before the client knew its cluster grants a request sent with the
    /// empty fingerprint when it has no record; a record adopted from another master of
    /// the same round (which then grants with the cluster's fingerprint) must not make
    /// that grant count, or the quorum could join a stranger to the cluster's members.
    pub(crate) fn disowned(&self, index: usize) -> Option<MasterError> {
        self.refused(index).or_else(|| {
            self.stale(index).then(|| {
                MasterError::new(
                    MasterErrorKind::Other,
                    "it showed no cluster record when this client met it, before this \
                     client learnt that its cluster is initialised: what it granted since \
                     does not count until its record is read again",
                )
            })
        })
    }

    /// Why master `index` never votes for this client, if it does not, as decided when it
    /// last connected (or answered that its record is missing).
    pub(crate) fn refused(&self, index: usize) -> Option<MasterError> {
        let state = self.lock();
        state
            .seen
            .get(index)
            .and_then(|s| s.refused.as_ref())
            .and_then(Admission::refusal)
    }
}

impl fmt::Display for Terms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} masters, quorum {}, ttl_max {} ms, drift {}, prefix {:?}",
            self.n, self.quorum, self.ttl_max_ms, self.drift, self.prefix
        )
    }
}

#[cfg(test)]
mod tests;
