//! Reading a lock by hand, [`Redlock::inspect`]: what every master holds for it, and
//! whether a quorum holds one value.
//!
//! An inspection is a **snapshot**: one concurrent read of every master, each read atomic
//! on its master, the masters read at slightly different moments. The lock may have
//! changed by the time the caller looks at it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::ask_all;
use crate::client::Redlock;
use crate::core::{check_resource, check_runtime};
use crate::deadline;
use crate::error::{Error, MasterError, MasterErrorKind, OneLine, ShortName, human};
use crate::fencing::FencingToken;
use crate::master::{Inspected, Op, Reply};
use crate::scripts;

/// Who holds a lock, as a master says: the holder record its value names (written once per
/// client and label, not per lock: docs/design.md §11), or an owner record of kind `lock`
/// that an earlier version wrote beside the lock's key. A name whose owner record is of
/// another kind (a read-write lock's, a semaphore's permit's) reads as
/// [`Holding::OtherKind`], with no `OwnerInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnerInfo {
    /// What the holder chose to call itself ([`Builder::label`](crate::Builder::label),
    /// [`AcquireOptions::label`](crate::AcquireOptions::label)); empty when it chose
    /// nothing.
    pub label: String,
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The holding client's id (a UUID, fresh for every client).
    pub client: String,
    /// When the lock was acquired, by the master's clock: `None` from a holder record,
    /// which is per client, not per acquisition; known only from an earlier version's
    /// owner record.
    pub acquired: Option<SystemTime>,
    /// How long it had been held when the master was read, by the master's clock; as
    /// [`acquired`](Self::acquired), `None` for a lock.
    pub held_for: Option<Duration>,
    /// The acquisition's fencing token, where an earlier version's owner record kept it
    /// (the largest any holding master shows, in a [`Verdict::Held`]); `None` from a
    /// holder record: the fence counter ([`MasterView::fence_counter`]) shows the token
    /// the latest write-back raised it to.
    pub token: Option<FencingToken>,
}

impl OwnerInfo {
    /// The owner record `fields` of the lock holding `value`, read at the master's time
    /// `now_ms`; `None` when the record is missing or belongs to another value.
    fn parse(fields: &BTreeMap<String, String>, value: &str, now_ms: u64) -> Option<OwnerInfo> {
        if fields.get("value").map(String::as_str) != Some(value) {
            return None;
        }
        let text = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let number = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok());
        let acquired_ms = number("acquired_ms");
        Some(OwnerInfo {
            label: text("label"),
            host: text("host"),
            pid: fields.get("pid").and_then(|p| p.parse().ok()),
            client: text("client"),
            acquired: acquired_ms
                .and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
            held_for: acquired_ms.map(|ms| Duration::from_millis(now_ms.saturating_sub(ms))),
            token: number("token").map(FencingToken::new),
        })
    }
}

impl fmt::Display for OwnerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.label.is_empty() {
            parts.push(format!("label {:?}", self.label));
        }
        if !self.host.is_empty() {
            parts.push(format!("host {:?}", self.host));
        }
        if let Some(pid) = self.pid {
            parts.push(format!("pid {pid}"));
        }
        if let Some(held) = self.held_for {
            parts.push(format!("acquired {} ago", human(held)));
        }
        if let Some(token) = self.token {
            parts.push(format!("fencing token {token}"));
        }
        if !self.client.is_empty() {
            parts.push(format!("client {}", OneLine(&self.client)));
        }
        f.write_str(&parts.join(", "))
    }
}

/// What one master holds under a lock's name, as [`Redlock::inspect`] read it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Holding {
    /// Nothing: the lock is free on this master.
    Free,
    /// A lock value.
    Lock {
        /// The value, which [`Redlock::force_unlock`] takes.
        value: String,
        /// How long the master keeps it; `None` when it has no expiry (set by another
        /// client without a TTL).
        ttl: Option<Duration>,
        /// Who holds it, if the master keeps a record of its holder (see [`OwnerInfo`]).
        owner: Option<OwnerInfo>,
    },
    /// Another kind of lock (or a key of another type) holds the name.
    OtherKind {
        /// That kind: the owner record's, or the key's Redis type.
        kind: String,
    },
    /// The master could not be read in time.
    Unreachable(MasterError),
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holding::Free => f.write_str("free"),
            Holding::Lock { value, ttl, owner } => {
                write!(f, "holds {}", OneLine(value))?;
                match ttl {
                    Some(ttl) => write!(f, " for {}", human(*ttl))?,
                    None => f.write_str(" without expiry")?,
                }
                match owner {
                    Some(owner) => write!(f, " ({owner})"),
                    None => f.write_str(" (no owner record)"),
                }
            }
            Holding::OtherKind { kind } => {
                write!(f, "holds another kind of lock: {}", OneLine(kind))
            }
            Holding::Unreachable(error) => write!(f, "unreachable: {error}"),
        }
    }
}

/// One master's part of an [`Inspection`].
#[derive(Debug, Clone)]
pub struct MasterView {
    master: Arc<str>,
    holding: Holding,
    fence_counter: Option<u64>,
    handed: bool,
}

impl MasterView {
    /// The master's address, password redacted.
    pub fn master(&self) -> &str {
        &self.master
    }

    /// What it holds under the lock's name.
    pub fn holding(&self) -> &Holding {
        &self.holding
    }

    /// The lock's fence counter on this master (the newest token it took part in issuing),
    /// if it has one.
    pub fn fence_counter(&self) -> Option<u64> {
        self.fence_counter
    }

    /// Whether the value it holds is a queued waiter's id rather than a lease value: a
    /// release handed the key to that waiter, which has not confirmed it yet
    /// (docs/design.md §17). [`Redlock::force_unlock`] with that value takes the waiter
    /// out of the queue too.
    pub fn handed(&self) -> bool {
        self.handed
    }

    fn ttl(&self) -> Option<Duration> {
        match &self.holding {
            Holding::Lock { ttl, .. } => *ttl,
            _ => None,
        }
    }

    fn owner(&self) -> Option<&OwnerInfo> {
        match &self.holding {
            Holding::Lock { owner, .. } => owner.as_ref(),
            _ => None,
        }
    }

    /// The view of a master that answered `answer` to an inspection.
    fn of(master: Arc<str>, answer: Result<Reply, MasterError>) -> MasterView {
        let inspected = match answer {
            Ok(Reply::Inspected(inspected)) => inspected,
            Ok(other) => {
                let error = MasterError::new(
                    MasterErrorKind::Protocol,
                    format!("answered {other:?} to an inspection"),
                );
                return MasterView {
                    master,
                    holding: Holding::Unreachable(error),
                    fence_counter: None,
                    handed: false,
                };
            }
            Err(error) => {
                return MasterView {
                    master,
                    holding: Holding::Unreachable(error),
                    fence_counter: None,
                    handed: false,
                };
            }
        };
        let holding = holding(&inspected);
        MasterView {
            master,
            handed: inspected.queued && matches!(holding, Holding::Lock { .. }),
            holding,
            fence_counter: inspected.fence,
        }
    }
}

impl fmt::Display for MasterView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.master, self.holding)?;
        if self.handed {
            f.write_str(", handed to a queued waiter (its id), not yet confirmed")?;
        }
        if let Some(counter) = self.fence_counter {
            write!(f, "; fence counter {counter}")?;
        }
        Ok(())
    }
}

/// What one master's answer says it holds, judged as `acquire.lua` judges the name.
fn holding(inspected: &Inspected) -> Holding {
    let owner_kind = inspected.owner.get("kind").map(String::as_str);
    match (inspected.kind.as_str(), &inspected.value) {
        ("none", _) => Holding::Free,
        ("string", _) if owner_kind.is_some_and(|k| k != "lock") => Holding::OtherKind {
            kind: owner_kind.unwrap_or_default().to_owned(),
        },
        // The readers' mark is a read-write lock's, with or without its owner record.
        ("string", Some(value)) if value == scripts::READERS_MARK => Holding::OtherKind {
            kind: "rwlock".to_owned(),
        },
        ("string", Some(value)) => Holding::Lock {
            value: value.clone(),
            ttl: u64::try_from(inspected.pttl_ms)
                .ok()
                .map(Duration::from_millis),
            owner: OwnerInfo::parse(&inspected.owner, value, inspected.now_ms),
        },
        ("string", None) => Holding::Free,
        (kind, _) => Holding::OtherKind {
            kind: owner_kind.unwrap_or(kind).to_owned(),
        },
    }
}

/// What an [`Inspection`] concludes about the lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of masters holds `value` with time left: the lock is held.
    Held {
        /// The holder's value, which [`Redlock::force_unlock`] takes.
        value: String,
        /// Who holds it, when a holding master keeps a record of its holder (see
        /// [`OwnerInfo`]).
        owner: Option<OwnerInfo>,
        /// How long a quorum keeps holding it at least, from when the inspection returned
        /// (unless it is released or extended meanwhile): the quorum-th largest TTL among
        /// the masters holding it, less the drift allowance of that time and the time the
        /// inspection took. `None` when that many of its keys have no expiry.
        remaining: Option<Duration>,
    },
    /// Enough masters answered to rule out a quorum holding anything, and none holds a
    /// value: the lock is free.
    Free,
    /// Masters hold values, but none is on a quorum (and none can be,
    /// counting the unreachable masters): leftovers of failed attempts, a contended
    /// moment, or a lock about to expire. Each key expires with its TTL.
    Split,
    /// Too few masters answered to tell: the unreachable ones may complete a quorum.
    Unknown,
    /// Another kind of lock holds the name (on some master; no quorum holds a lock).
    OtherKind {
        /// That kind.
        kind: String,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Held {
                value,
                owner,
                remaining,
            } => {
                write!(f, "held by {}", OneLine(value))?;
                match remaining {
                    Some(left) => write!(f, " for at least {}", human(*left))?,
                    None => f.write_str(" without expiry")?,
                }
                if let Some(owner) = owner {
                    write!(f, " ({owner})")?;
                }
                Ok(())
            }
            Verdict::Free => f.write_str("free"),
            Verdict::Split => f.write_str("not held: no value is on a quorum"),
            Verdict::Unknown => {
                f.write_str("unknown: too few masters answered to rule out a holder")
            }
            Verdict::OtherKind { kind } => {
                write!(f, "holds another kind of lock: {}", OneLine(kind))
            }
        }
    }
}

/// What every master held for one lock: a snapshot, read by [`Redlock::inspect`].
///
/// Each master was read atomically, all of them at once, at slightly different moments;
/// the lock may have changed since. [`Display`](fmt::Display) prints it for operators.
#[derive(Debug, Clone)]
pub struct Inspection {
    resource: String,
    key: String,
    quorum: usize,
    masters: Vec<MasterView>,
    verdict: Verdict,
    taken_at: Instant,
}

impl Inspection {
    /// The lock's resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The lock's key on the masters (key prefix + resource).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What each master held, in the configured order.
    pub fn masters(&self) -> &[MasterView] {
        &self.masters
    }

    /// What the snapshot says about the lock.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// The holder's value, when a quorum held one with time left.
    pub fn holder(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Held { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Whether the [`holder`](Inspection::holder) is a queued waiter's id rather than a
    /// lease value: a release handed the key to that waiter (on some master that holds
    /// it), which has not confirmed it yet (docs/design.md §17). The waiter takes the
    /// lock with a confirm of its own, or the handed key expires within its waiter TTL;
    /// [`Redlock::force_unlock`] with that value removes the waiter from the queue and
    /// passes the key on: that helps against a waiter that is dead or gone; a live one
    /// registers again at its next refresh and, still heading the queue, takes the key
    /// back.
    pub fn handed(&self) -> bool {
        self.holder().is_some_and(|value| {
            self.masters.iter().any(|m| {
                m.handed && matches!(&m.holding, Holding::Lock { value: v, .. } if v == value)
            })
        })
    }

    /// When the inspection returned: a [`Verdict::Held`]'s `remaining` counts from here.
    pub fn taken_at(&self) -> Instant {
        self.taken_at
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lock {} (key {}, quorum {} of {}): {}",
            ShortName(&self.resource),
            ShortName(&self.key),
            self.quorum,
            self.masters.len(),
            self.verdict
        )?;
        if self.handed() {
            f.write_str(" (handed to that queued waiter, not yet confirmed)")?;
        }
        writeln!(f)?;
        for master in &self.masters {
            writeln!(f, "  {master}")?;
        }
        write!(f, "(a snapshot: the lock may have changed since)")
    }
}

/// The verdict on `masters` for `quorum`: `elapsed` is the time the inspection took, and
/// each holder's time left is also cut by the drift allowance of what its keys have left
/// (`drift_factor`), the most the holder's clock can have run slow over that time.
fn verdict(masters: &[MasterView], quorum: usize, elapsed: Duration, drift_factor: f64) -> Verdict {
    let mut holders: BTreeMap<&str, Vec<&MasterView>> = BTreeMap::new();
    let mut unreachable = 0;
    let mut other_kind = None;
    for master in masters {
        match &master.holding {
            Holding::Lock { value, .. } => holders.entry(value).or_default().push(master),
            Holding::Unreachable(_) => unreachable += 1,
            Holding::OtherKind { kind } => {
                other_kind.get_or_insert_with(|| kind.clone());
            }
            Holding::Free => {}
        }
    }
    for (value, views) in &holders {
        if views.len() < quorum {
            continue;
        }
        // The quorum-th largest TTL; no expiry counts as the largest.
        let mut ttls: Vec<Option<Duration>> = views.iter().map(|v| v.ttl()).collect();
        ttls.sort_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => b.cmp(a),
        });
        // On a quorum: held, even if only for a moment more.
        let remaining = ttls.get(quorum - 1).copied().flatten().map(|ttl| {
            ttl.saturating_sub(deadline::drift(ttl, drift_factor))
                .saturating_sub(elapsed)
        });
        let mut owner = views.iter().find_map(|v| v.owner().cloned());
        if let Some(owner) = &mut owner {
            owner.token = views.iter().filter_map(|v| v.owner()?.token).max();
        }
        return Verdict::Held {
            value: (*value).to_owned(),
            owner,
            remaining,
        };
    }
    if let Some(kind) = other_kind {
        return Verdict::OtherKind { kind };
    }
    // A value (or one unseen) could be on a quorum with the unreachable masters' help.
    let largest = holders.values().map(Vec::len).max().unwrap_or(0);
    if largest + unreachable >= quorum {
        Verdict::Unknown
    } else if holders.is_empty() {
        Verdict::Free
    } else {
        Verdict::Split
    }
}

impl Redlock {
    /// Reads what every master holds for the lock on `resource`, in one concurrent round,
    /// and says whether it is held and by whom: per master the value, its remaining TTL,
    /// who holds it (label, host, process id and client id, from the holder record its
    /// value names)
    /// and the fence counter; and a [`Verdict`]. Changes nothing on the masters.
    ///
    /// The lock counts as held when a quorum of masters holds one value; its `remaining`
    /// time is the quorum-th largest TTL among them, less the drift allowance of that
    /// time (the most the holder's clock can run slow over it) and the time the
    /// inspection took, and may be zero: the holder may still be at work. Masters in restart quarantine are read as the others:
    /// their keys are real, though they may have lost some.
    ///
    /// On a read-write lock ([`Redlock::rwlock`]) it reads the lock key, which holds the
    /// writer's value or, while readers may hold, the readers' mark: either shows as
    /// another kind of lock (`rwlock`); the readers themselves are not listed
    /// (docs/design.md §16).
    ///
    /// The result is a **snapshot**: the lock may be acquired, extended or released right
    /// after. Each master is given the connect timeout plus the node timeout; one that does
    /// not answer by then is reported [`Holding::Unreachable`].
    ///
    /// # Errors
    /// Before any master is asked: [`ErrorKind::InvalidResource`] for a name `acquire`
    /// refuses, and [`ErrorKind::NoRuntime`] outside a tokio runtime. Unreachable masters
    /// are not an error: they are in the report, and the verdict says what they leave
    /// open.
    ///
    /// [`ErrorKind::InvalidResource`]: crate::ErrorKind::InvalidResource
    /// [`ErrorKind::NoRuntime`]: crate::ErrorKind::NoRuntime
    ///
    /// # Cancel safety
    /// Read-only: dropping the future changes nothing.
    ///
    /// # Example
    /// ```no_run
    /// # async fn run(client: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use redquorum::Verdict;
    ///
    /// let inspection = client.inspect("orders:42").await?;
    /// println!("{inspection}");
    /// if let Verdict::Held { value, owner, .. } = inspection.verdict() {
    ///     let who = owner.as_ref().map(|o| o.label.as_str()).unwrap_or("unknown");
    ///     println!("held by {who} with value {value}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, resource: &str) -> Result<Inspection, Error> {
        check_runtime(resource)?;
        check_resource(&self.inner.config.key_prefix, resource)?;
        let inner = &self.inner;
        let config = &inner.config;
        let key: Arc<str> = format!("{}{resource}", config.key_prefix).into();
        let op = Arc::new(Op::Inspect {
            key: Arc::clone(&key),
        });
        let started = Instant::now();
        let answers = ask_all(inner, &op).await;
        let taken_at = Instant::now();
        let masters: Vec<MasterView> = inner
            .masters
            .iter()
            .zip(answers)
            .map(|(m, answer)| MasterView::of(Arc::clone(m.name()), answer))
            .collect();
        let elapsed = taken_at.saturating_duration_since(started);
        let verdict = verdict(&masters, inner.quorum(), elapsed, config.drift_factor);
        Ok(Inspection {
            resource: resource.to_owned(),
            key: key.to_string(),
            quorum: inner.quorum(),
            masters,
            verdict,
            taken_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn view(holding: Holding) -> MasterView {
        MasterView {
            master: "m".into(),
            holding,
            fence_counter: None,
            handed: false,
        }
    }

    fn lock(value: &str, ttl_ms: Option<u64>, token: Option<u64>) -> MasterView {
        let mut fields = BTreeMap::new();
        fields.insert("value".to_owned(), value.to_owned());
        fields.insert("label".to_owned(), "billing".to_owned());
        if let Some(token) = token {
            fields.insert("token".to_owned(), token.to_string());
        }
        view(Holding::Lock {
            value: value.to_owned(),
            ttl: ttl_ms.map(Duration::from_millis),
            owner: OwnerInfo::parse(&fields, value, 0),
        })
    }

    /// What another client wrote (a value, a client id, a kind's name) cannot break or
    /// forge a report's lines, nor pass a terminal's escapes: it is shown escaped.
    #[test]
    fn what_a_master_holds_is_shown_on_one_line() {
        let forged = "x\nlock k (key k): free\u{1b}[8m\u{202e}\u{2028}";
        let mut fields = BTreeMap::new();
        fields.insert("client".to_owned(), forged.to_owned());
        let owner = OwnerInfo::parse(&fields, forged, 0);
        let holding = Holding::Lock {
            value: forged.to_owned(),
            ttl: Some(MS),
            owner: owner.clone(),
        };
        let verdict = Verdict::Held {
            value: forged.to_owned(),
            owner,
            remaining: Some(MS),
        };
        let kind = Verdict::OtherKind {
            kind: forged.to_owned(),
        };
        let other = Holding::OtherKind {
            kind: forged.to_owned(),
        };
        for shown in [
            holding.to_string(),
            verdict.to_string(),
            kind.to_string(),
            other.to_string(),
        ] {
            assert!(!shown.chars().any(crate::error::breaks_a_line), "{shown:?}");
            assert!(
                shown.contains(r"x\nlock k (key k): free\u{1b}[8m"),
                "{shown}"
            );
        }
    }

    fn down() -> MasterView {
        view(Holding::Unreachable(MasterError::new(
            MasterErrorKind::Timeout,
            "no answer",
        )))
    }

    fn free() -> MasterView {
        view(Holding::Free)
    }

    #[test]
    fn held_takes_the_quorum_th_largest_ttl_less_the_allowance() {
        let masters = [
            lock("a", Some(900), Some(7)),
            lock("a", Some(500), None),
            lock("a", Some(700), Some(6)),
            free(),
            down(),
        ];
        match verdict(&masters, 3, 100 * MS, 0.0) {
            Verdict::Held {
                value,
                owner,
                remaining,
            } => {
                assert_eq!(value, "a");
                // 500 ms, less the 100 ms the inspection took and the drift allowance of
                // those 500 ms (factor 0 here: the 2 ms of expiry's resolution).
                assert_eq!(remaining, Some(398 * MS));
                let owner = owner.unwrap();
                assert_eq!(owner.label, "billing");
                assert_eq!(owner.token, Some(FencingToken::new(7)), "the largest token");
            }
            other => panic!("{other:?}"),
        }
        // Keys without expiry count as the longest.
        let masters = [lock("a", None, None), lock("a", None, None), free()];
        assert!(matches!(
            verdict(&masters, 2, 100 * MS, 0.0),
            Verdict::Held {
                remaining: None,
                ..
            }
        ));
        // On a quorum with no time left beyond the allowance: held, for no time more (its
        // holder may still be working: never reported as free or split).
        let masters = [
            lock("a", Some(90), None),
            lock("a", Some(900), None),
            free(),
        ];
        assert!(matches!(
            verdict(&masters, 2, 100 * MS, 0.0),
            Verdict::Held { remaining: Some(left), .. } if left.is_zero()
        ));
        // The drift allowance is that of the time left, not of ttl_max: a 5 s lock read
        // by a client whose ttl_max is 10 min is held with about 5 s left.
        let masters = [
            lock("a", Some(5000), None),
            lock("a", Some(5000), None),
            free(),
        ];
        assert!(matches!(
            verdict(&masters, 2, MS, 0.01),
            Verdict::Held { remaining: Some(left), .. } if left > 4900 * MS
        ));
    }

    #[test]
    fn free_split_and_unknown_count_the_unreachable_masters() {
        // 3 masters, quorum 2.
        assert!(matches!(
            verdict(&[free(), free(), down()], 2, MS, 0.0),
            Verdict::Free
        ));
        // Two unreachable masters could hold a value between them.
        assert!(matches!(
            verdict(&[free(), down(), down()], 2, MS, 0.0),
            Verdict::Unknown
        ));
        // One value seen, and one more master could complete its quorum.
        assert!(matches!(
            verdict(&[lock("a", Some(500), None), free(), down()], 2, MS, 0.0),
            Verdict::Unknown
        ));
        // Three values, none can reach a quorum.
        let split = [
            lock("a", Some(500), None),
            lock("b", Some(500), None),
            lock("c", Some(500), None),
        ];
        assert!(matches!(verdict(&split, 2, MS, 0.0), Verdict::Split));
        assert!(matches!(
            verdict(&[lock("a", Some(500), None), free(), free()], 2, MS, 0.0),
            Verdict::Split
        ));
        // Another kind of lock, unless a quorum holds a lock.
        let other = view(Holding::OtherKind {
            kind: "semaphore".into(),
        });
        assert!(matches!(
            verdict(&[other.clone(), free(), free()], 2, MS, 0.0),
            Verdict::OtherKind { .. }
        ));
        assert!(matches!(
            verdict(
                &[
                    other,
                    lock("a", Some(500), None),
                    lock("a", Some(500), None)
                ],
                2,
                MS,
                0.0
            ),
            Verdict::Held { .. }
        ));
    }

    #[test]
    fn a_master_answer_is_judged_as_acquire_judges_the_name() {
        let inspected = |kind: &str, value: Option<&str>, owner: &[(&str, &str)]| Inspected {
            kind: kind.to_owned(),
            value: value.map(str::to_owned),
            pttl_ms: if value.is_some() { 1500 } else { -2 },
            owner: owner
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            fence: None,
            now_ms: 10_000,
            queued: false,
        };
        assert!(matches!(
            holding(&inspected("none", None, &[])),
            Holding::Free
        ));
        assert!(matches!(
            holding(&inspected("hash", None, &[])),
            Holding::OtherKind { kind } if kind == "hash"
        ));
        assert!(matches!(
            holding(&inspected("string", Some("v"), &[("kind", "semaphore")])),
            Holding::OtherKind { kind } if kind == "semaphore"
        ));
        let record = [
            ("kind", "lock"),
            ("value", "v"),
            ("host", "h"),
            ("pid", "42"),
            ("client", "c"),
            ("label", "l"),
            ("acquired_ms", "7500"),
            ("token", "9"),
        ];
        match holding(&inspected("string", Some("v"), &record)) {
            Holding::Lock { value, ttl, owner } => {
                assert_eq!(value, "v");
                assert_eq!(ttl, Some(1500 * MS));
                let owner = owner.unwrap();
                assert_eq!(
                    (owner.host.as_str(), owner.pid, owner.label.as_str()),
                    ("h", Some(42), "l")
                );
                assert_eq!(owner.client, "c");
                assert_eq!(
                    owner.acquired,
                    SystemTime::UNIX_EPOCH.checked_add(7500 * MS)
                );
                assert_eq!(owner.held_for, Some(2500 * MS));
                assert_eq!(owner.token, Some(FencingToken::new(9)));
            }
            other => panic!("{other:?}"),
        }
        // A record of another value is not this lock's owner.
        match holding(&inspected("string", Some("w"), &record)) {
            Holding::Lock { owner, .. } => assert_eq!(owner, None),
            other => panic!("{other:?}"),
        }
    }
}
