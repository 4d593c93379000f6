//! Checkers: pure functions over a history, each exact (no false positives given the
//! recording rules) and each unit-tested on hand-made histories, including ones that must
//! fire.
//!
//! Recording rules they rely on: `cs_start` is recorded after acquire returned, `cs_end`
//! before release is sent, so a recorded overlap implies a real one; every time is
//! `CLOCK_MONOTONIC`, comparable across processes.
//!
//! Fencing tokens ride in the events' `token` field; [`tokens`] checks them (checker 4).

use std::collections::BTreeMap;

use crate::event::{Event, Op};

/// One acquisition's critical section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub client: String,
    pub attempt: u64,
    pub start: u64,
    /// `None`: never ended (the client died or was still inside when the history closed).
    pub end: Option<u64>,
    /// Whether its counter write was made.
    pub done: bool,
    /// The lease's deadline as last established before the section ended.
    pub deadline: Option<u64>,
}

impl Section {
    fn end_or_open(&self) -> u64 {
        self.end.unwrap_or(u64::MAX)
    }
}

/// A history that does not describe well-formed sections: the checkers cannot trust it,
/// so it fails a scenario whatever the scenario expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// A second `cs_start` under one client name and attempt while the first was still
    /// open (two clients recording under one name, or a recorder reused).
    DuplicateStart {
        resource: String,
        section: (String, u64),
    },
    /// A `cs_end` with no open section to end.
    OrphanEnd {
        resource: String,
        section: (String, u64),
    },
}

/// Every critical section per resource, ordered by start, and what in the history does
/// not pair up. A duplicate start keeps both sections (the first as never ended), so the
/// overlap checker still sees them.
pub fn walk(history: &[Event]) -> (BTreeMap<String, Vec<Section>>, Vec<Malformed>) {
    let mut ordered: Vec<&Event> = history.iter().collect();
    ordered.sort_by_key(|e| (e.t_ns, e.op));
    let mut open: BTreeMap<(String, String, u64), Section> = BTreeMap::new();
    let mut deadlines: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<Section>> = BTreeMap::new();
    let mut malformed = Vec::new();
    for e in ordered {
        let id = (e.client.clone(), e.attempt);
        match e.op {
            Op::AcqOk | Op::ExtOk => {
                if let Some(d) = e.deadline_ns {
                    deadlines.insert(id, d);
                }
            }
            Op::CsStart => {
                let section = Section {
                    client: e.client.clone(),
                    attempt: e.attempt,
                    start: e.t_ns,
                    end: None,
                    done: false,
                    deadline: deadlines.get(&id).copied(),
                };
                let key = (e.resource.clone(), e.client.clone(), e.attempt);
                if let Some(earlier) = open.insert(key, section) {
                    malformed.push(Malformed::DuplicateStart {
                        resource: e.resource.clone(),
                        section: id,
                    });
                    out.entry(e.resource.clone()).or_default().push(earlier);
                }
            }
            Op::CsEnd => {
                if let Some(mut s) = open.remove(&(e.resource.clone(), e.client.clone(), e.attempt))
                {
                    s.end = Some(e.t_ns);
                    s.done = e.detail.starts_with("done");
                    s.deadline = deadlines.get(&id).copied().or(s.deadline);
                    out.entry(e.resource.clone()).or_default().push(s);
                } else {
                    malformed.push(Malformed::OrphanEnd {
                        resource: e.resource.clone(),
                        section: id,
                    });
                }
            }
            Op::Killed => {
                // A dead process touches nothing after its death: its open sections end.
                let dead: Vec<_> = open
                    .keys()
                    .filter(|(_, client, _)| *client == e.client)
                    .cloned()
                    .collect();
                for key in dead {
                    if let Some(mut s) = open.remove(&key) {
                        s.end = Some(e.t_ns);
                        out.entry(key.0).or_default().push(s);
                    }
                }
            }
            _ => {}
        }
    }
    for ((resource, _, _), s) in open {
        out.entry(resource).or_default().push(s);
    }
    for list in out.values_mut() {
        list.sort_by_key(|s| (s.start, s.end_or_open()));
    }
    (out, malformed)
}

/// Every critical section per resource, ordered by start (see [`walk`]).
pub fn sections(history: &[Event]) -> BTreeMap<String, Vec<Section>> {
    walk(history).0
}

/// What in the history does not pair up (see [`Malformed`]).
pub fn malformed(history: &[Event]) -> Vec<Malformed> {
    walk(history).1
}

/// Two critical sections of one resource that overlapped in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    pub resource: String,
    /// The section that was still running.
    pub earlier: (String, u64),
    /// The section that started inside it.
    pub later: (String, u64),
    /// How long they overlapped, in ns (`u64::MAX` when the earlier never ended).
    pub by_ns: u64,
}

/// Checker 1: mutual exclusion. Per resource, sections sorted by start; a violation is a
/// section starting before the latest end seen so far. Sections of read leases of a
/// read-write lock (their `acq_ok` says `read`) may overlap each other, never another
/// section: a read section is checked against the latest end of the other sections, any
/// other section against the latest end of all.
// Checks I4 (mutual exclusion), and I17 (no write lease beside any other lease) per mode.
pub fn overlaps(history: &[Event]) -> Vec<Overlap> {
    let reads: std::collections::BTreeSet<(&str, u64)> = history
        .iter()
        .filter(|e| e.op == Op::AcqOk && e.detail.starts_with("read"))
        .map(|e| (e.client.as_str(), e.attempt))
        .collect();
    let mut found = Vec::new();
    for (resource, list) in sections(history) {
        let mut latest: Option<&Section> = None;
        let mut latest_exclusive: Option<&Section> = None;
        for s in &list {
            let read = reads.contains(&(s.client.as_str(), s.attempt));
            let against = if read { latest_exclusive } else { latest };
            if let Some(prev) = against
                && s.start < prev.end_or_open()
            {
                let end = s.end_or_open().min(prev.end_or_open());
                found.push(Overlap {
                    resource: resource.clone(),
                    earlier: (prev.client.clone(), prev.attempt),
                    later: (s.client.clone(), s.attempt),
                    by_ns: end.saturating_sub(s.start),
                });
            }
            if latest.is_none_or(|prev| s.end_or_open() > prev.end_or_open()) {
                latest = Some(s);
            }
            if !read && latest_exclusive.is_none_or(|prev| s.end_or_open() > prev.end_or_open()) {
                latest_exclusive = Some(s);
            }
        }
    }
    found
}

/// A critical section that ended after its lease's deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overrun {
    pub resource: String,
    pub section: (String, u64),
    pub by_ns: u64,
}

/// Checker: deadline overruns (`cs_end > deadline`).
pub fn overruns(history: &[Event]) -> Vec<Overrun> {
    let mut found = Vec::new();
    for (resource, list) in sections(history) {
        for s in list {
            if let (Some(end), Some(deadline)) = (s.end, s.deadline)
                && end > deadline
            {
                found.push(Overrun {
                    resource: resource.clone(),
                    section: (s.client.clone(), s.attempt),
                    by_ns: end - deadline,
                });
            }
        }
    }
    found
}

/// Critical sections of `resource` that made their counter write.
pub fn completed(history: &[Event], resource: &str) -> u64 {
    history
        .iter()
        .filter(|e| e.op == Op::CsEnd && e.resource == resource && e.detail.starts_with("done"))
        .count() as u64
}

/// Checker 2: lost updates, `completed − final counter` (never negative: a section that
/// wrote but died before recording `cs_end` only makes the counter larger).
pub fn lost_updates(completed: u64, counter: u64) -> u64 {
    completed.saturating_sub(counter)
}

/// Liveness after a heal at `heal_ns`, up to `end_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// From the heal to the first critical section, if any.
    pub first_after_heal_ns: Option<u64>,
    /// The largest stretch without a critical section starting, from the heal to the end.
    pub largest_gap_ns: u64,
    /// Critical sections started after the heal.
    pub sections: u64,
}

/// Checker 5: liveness metrics for `resource` alone (activity on one resource must not
/// hide a starved one).
pub fn liveness(history: &[Event], resource: &str, heal_ns: u64, end_ns: u64) -> Liveness {
    let mut starts: Vec<u64> = history
        .iter()
        .filter(|e| {
            e.op == Op::CsStart && e.resource == resource && e.t_ns >= heal_ns && e.t_ns <= end_ns
        })
        .map(|e| e.t_ns)
        .collect();
    starts.sort_unstable();
    let mut gap = 0;
    let mut prev = heal_ns;
    for &t in &starts {
        gap = gap.max(t - prev);
        prev = t;
    }
    gap = gap.max(end_ns.saturating_sub(prev));
    Liveness {
        first_after_heal_ns: starts.first().map(|t| t - heal_ns),
        largest_gap_ns: gap,
        sections: starts.len() as u64,
    }
}

/// One acquire call's duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latency {
    pub client: String,
    pub attempt: u64,
    /// `None`: it never returned before `end_ns`.
    pub took_ns: Option<u64>,
}

/// Acquire calls and how long each took (`acq_start` to `acq_ok`/`acq_fail`); calls that
/// never returned count as running until `end_ns`.
pub fn acquire_latencies(history: &[Event], end_ns: u64) -> Vec<(Latency, u64)> {
    let mut started: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut out = Vec::new();
    let mut ordered: Vec<&Event> = history.iter().collect();
    ordered.sort_by_key(|e| (e.t_ns, e.op));
    for e in ordered {
        let id = (e.client.clone(), e.attempt);
        match e.op {
            Op::AcqStart => {
                started.insert(id, e.t_ns);
            }
            Op::AcqOk | Op::AcqFail => {
                if let Some(t0) = started.remove(&id) {
                    let took = e.t_ns.saturating_sub(t0);
                    out.push((
                        Latency {
                            client: id.0,
                            attempt: id.1,
                            took_ns: Some(took),
                        },
                        took,
                    ));
                }
            }
            Op::Killed => {
                // A killed call never returns, and was not slow: it died.
                started.retain(|(client, _), _| *client != e.client);
            }
            _ => {}
        }
    }
    for ((client, attempt), t0) in started {
        out.push((
            Latency {
                client,
                attempt,
                took_ns: None,
            },
            end_ns.saturating_sub(t0),
        ));
    }
    out
}

/// Checker: acquire calls that took longer than `bound_ns` (or never returned).
pub fn slow_acquires(history: &[Event], end_ns: u64, bound_ns: u64) -> Vec<Latency> {
    acquire_latencies(history, end_ns)
        .into_iter()
        .filter(|(_, took)| *took > bound_ns)
        .map(|(l, _)| l)
        .collect()
}

/// Failed acquire calls by error kind.
pub fn failures(history: &[Event]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in history.iter().filter(|e| e.op == Op::AcqFail) {
        *out.entry(e.detail.clone()).or_insert(0) += 1;
    }
    out
}

/// One token property broken (checker 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenViolation {
    /// Two successful acquisitions of one resource got the same token.
    Duplicate {
        token: u64,
        a: (String, u64),
        b: (String, u64),
    },
    /// `later` began after `earlier` had its token, yet got a token not above it.
    Regression {
        earlier: (String, u64, u64),
        later: (String, u64, u64),
    },
}

/// What checker 4 found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenReport {
    /// Successful acquisitions that carried a token.
    pub tokens: u64,
    pub violations: Vec<TokenViolation>,
}

/// Checker 4: fencing tokens, per resource. Unique across successful acquisitions; in
/// real-time order (if `acq_ok(X) < acq_start(Y)` then `token_X < token_Y`).
/// Acquisitions without a token are ignored. (Whether an extension keeps the token is not
/// checked here: the lease's token is fixed when it is issued, so a history cannot show it
/// changing.)
// Checks I12 (fencing tokens are unique and ordered).
pub fn tokens(history: &[Event]) -> TokenReport {
    type Id = (String, u64);
    let mut starts: BTreeMap<Id, u64> = BTreeMap::new();
    // resource -> (acq_ok time, acq_start time, token, id)
    let mut acquired: BTreeMap<String, Vec<(u64, u64, u64, Id)>> = BTreeMap::new();
    let mut report = TokenReport::default();
    for e in history {
        if e.op == Op::AcqStart {
            starts.insert((e.client.clone(), e.attempt), e.t_ns);
        }
    }
    for e in history.iter().filter(|e| e.op == Op::AcqOk) {
        let Some(token) = e.token else { continue };
        let id = (e.client.clone(), e.attempt);
        let start = starts.get(&id).copied().unwrap_or(e.t_ns);
        acquired
            .entry(e.resource.clone())
            .or_default()
            .push((e.t_ns, start, token, id));
        report.tokens += 1;
    }
    for list in acquired.values_mut() {
        let mut seen: BTreeMap<u64, Id> = BTreeMap::new();
        for (_, _, token, id) in list.iter() {
            if let Some(first) = seen.get(token) {
                report.violations.push(TokenViolation::Duplicate {
                    token: *token,
                    a: first.clone(),
                    b: id.clone(),
                });
            } else {
                seen.insert(*token, id.clone());
            }
        }
        // Real-time order: walk the acquisitions by start, keeping the largest token of
        // those that had finished acquiring before that start.
        let mut by_ok = list.clone();
        by_ok.sort_by_key(|a| a.0);
        let mut by_start = list.clone();
        by_start.sort_by_key(|a| a.1);
        let mut best: Option<&(u64, u64, u64, Id)> = None;
        let mut i = 0;
        for y in &by_start {
            while i < by_ok.len() && by_ok[i].0 < y.1 {
                if best.is_none_or(|b| by_ok[i].2 > b.2) {
                    best = Some(&by_ok[i]);
                }
                i += 1;
            }
            if let Some(x) = best
                && x.2 >= y.2
            {
                report.violations.push(TokenViolation::Regression {
                    earlier: (x.3.0.clone(), x.3.1, x.2),
                    later: (y.3.0.clone(), y.3.1, y.2),
                });
            }
        }
    }
    report
}

/// One acquire call as the queue checkers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    id: (String, u64),
    resource: String,
    fair: bool,
    start: u64,
    /// When its waiter was seen registered on a quorum (`queued`), if it was.
    queued: Option<u64>,
    /// When it returned a lease.
    ok: Option<u64>,
    /// When it stopped waiting: returned (a lease or an error) or its process was killed.
    end: Option<u64>,
    /// When its process was killed, if it was before the call ended.
    killed: Option<u64>,
}

/// Every acquire call of the history, with its queue events.
fn calls(history: &[Event]) -> Vec<Call> {
    let mut calls: BTreeMap<(String, u64), Call> = BTreeMap::new();
    let mut ordered: Vec<&Event> = history.iter().collect();
    ordered.sort_by_key(|e| (e.t_ns, e.op));
    for e in ordered {
        let id = (e.client.clone(), e.attempt);
        match e.op {
            Op::AcqStart => {
                calls.insert(
                    id.clone(),
                    Call {
                        id,
                        resource: e.resource.clone(),
                        fair: e.detail == "fair",
                        start: e.t_ns,
                        queued: None,
                        ok: None,
                        end: None,
                        killed: None,
                    },
                );
            }
            Op::Queued => {
                if let Some(c) = calls.get_mut(&id)
                    && c.queued.is_none()
                {
                    c.queued = Some(e.t_ns);
                }
            }
            Op::AcqOk | Op::AcqFail => {
                if let Some(c) = calls.get_mut(&id)
                    && c.end.is_none()
                {
                    c.end = Some(e.t_ns);
                    if e.op == Op::AcqOk {
                        c.ok = Some(e.t_ns);
                    }
                }
            }
            Op::Killed => {
                for c in calls.values_mut().filter(|c| c.id.0 == e.client) {
                    if c.end.is_none() {
                        c.end = Some(e.t_ns);
                        c.killed = Some(e.t_ns);
                    }
                }
            }
            _ => {}
        }
    }
    calls.into_values().collect()
}

/// A fair waiter overtaken: `first` had its ticket issued before `overtaker` started and
/// was still waiting (its process alive, its call running) when `overtaker` returned
/// its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overtaken {
    pub resource: String,
    pub first: (String, u64),
    pub overtaker: (String, u64),
    /// When `first` was seen queued, `overtaker` started, and `overtaker` got its lease.
    pub queued_ns: u64,
    pub started_ns: u64,
    pub granted_ns: u64,
}

/// Checker: FIFO among live fair waiters (design.md §17). For two fair calls A and B
/// of one resource: if A was seen queued (its ticket issued) before B started, and A's
/// call was still running, its process alive, when B's `acq_ok` was recorded, B was
/// granted first: a violation. Exact given the recording rules: `queued` is recorded
/// after the registration reached a quorum, `acq_start` before anything is sent, and B's
/// grant happened before its `acq_ok`, so A was waiting at the grant.
pub fn overtaken(history: &[Event]) -> Vec<Overtaken> {
    fifo(history).overtaken
}

/// What the FIFO checker judged: the pairs of fair calls whose order it could tell, and
/// the overtaken ones among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fifo {
    /// Pairs (A, B) of fair calls of one resource with A seen queued before B started, A
    /// still waiting when B started, and B granted, where A was either granted too or
    /// still waiting at B's grant: the pairs whose order says something. (A pair whose A
    /// was served before B began, or gave up or was killed before B's grant, says
    /// nothing.)
    pub judged: u64,
    pub overtaken: Vec<Overtaken>,
}

/// [`overtaken`], with the number of pairs judged: a run that judged none proves nothing
/// of the order.
// Checks I19 (fair waiters are granted in ticket order).
pub fn fifo(history: &[Event]) -> Fifo {
    let calls = calls(history);
    let mut report = Fifo::default();
    for a in calls.iter().filter(|c| c.fair) {
        let Some(queued) = a.queued else { continue };
        for b in calls
            .iter()
            .filter(|b| b.fair && b.id != a.id && b.resource == a.resource)
        {
            let Some(granted) = b.ok else { continue };
            if queued >= b.start || a.end.is_some_and(|end| end <= b.start) {
                continue;
            }
            let waiting = a.end.is_none_or(|end| end > granted);
            if waiting || a.ok.is_some() {
                report.judged += 1;
            }
            if waiting {
                report.overtaken.push(Overtaken {
                    resource: a.resource.clone(),
                    first: a.id.clone(),
                    overtaker: b.id.clone(),
                    queued_ns: queued,
                    started_ns: b.start,
                    granted_ns: granted,
                });
            }
        }
    }
    report.overtaken.sort_by_key(|o| o.granted_ns);
    report
}

/// The lock became free with a live waiter queued, and nobody was granted it within the
/// bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub resource: String,
    /// When the lock became free: a release returned, or a killed holder's keys expired.
    pub free_ns: u64,
    /// A waiter that was queued then and stayed alive through the bound.
    pub waiter: (String, u64),
    /// The next grant after `free_ns`, if any.
    pub next_grant_ns: Option<u64>,
}

/// Checker: the hand-off liveness bound (design.md §17). The lock of a resource becomes
/// free when a release returns (`rel` saying `released:`), or `holder_ttl_ns` after the
/// process of a holder inside its section was killed (its keys expire by then). If a
/// waiter was queued then (seen on a quorum, its call running, its process alive) and its
/// process is not killed within `bound_ns`, some call must get a lease within `bound_ns`
/// of that instant. Instants inside an `excused` window (a master fault) are skipped,
/// and so are those whose bound reaches past `end_ns` (the history cannot tell).
pub fn stalls(
    history: &[Event],
    holder_ttl_ns: u64,
    bound_ns: u64,
    excused: &[(u64, u64)],
    end_ns: u64,
) -> Vec<Stall> {
    handoffs(history, holder_ttl_ns, bound_ns, excused, end_ns).stalls
}

/// What the hand-off checker judged: how often the lock was free with a live waiter
/// queued, the longest it took the next grant to come (`None` if one never came), and
/// the stalls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handoffs {
    pub judged: u64,
    pub slowest_ns: Option<u64>,
    pub stalls: Vec<Stall>,
}

/// [`stalls`], with what was judged.
pub fn handoffs(
    history: &[Event],
    holder_ttl_ns: u64,
    bound_ns: u64,
    excused: &[(u64, u64)],
    end_ns: u64,
) -> Handoffs {
    let calls = calls(history);
    let mut frees: Vec<(String, u64)> = history
        .iter()
        .filter(|e| e.op == Op::Rel && e.detail.starts_with("released:"))
        .map(|e| (e.resource.clone(), e.t_ns))
        .collect();
    // A holder killed inside its section: its keys expire within its TTL.
    for (resource, list) in sections(history) {
        for s in &list {
            let killed = history
                .iter()
                .find(|e| e.op == Op::Killed && e.client == s.client && Some(e.t_ns) == s.end);
            if let Some(k) = killed {
                frees.push((resource.clone(), k.t_ns + holder_ttl_ns));
            }
        }
    }
    frees.sort_by_key(|(_, t)| *t);
    let mut report = Handoffs::default();
    for (resource, free) in frees {
        let until = free + bound_ns;
        if excused.iter().any(|&(a, b)| free >= a && free <= b) {
            continue;
        }
        let waiter = calls.iter().find(|c| {
            c.resource == resource
                && c.queued.is_some_and(|q| q <= free)
                && c.end.is_none_or(|end| end > free)
                && c.killed.is_none_or(|k| k > until)
        });
        let Some(waiter) = waiter else { continue };
        let next = calls
            .iter()
            .filter(|c| c.resource == resource)
            .filter_map(|c| c.ok)
            .filter(|&ok| ok > free)
            .min();
        if next.is_none_or(|t| t > until) && until > end_ns {
            // No grant yet, and the bound is not over when the history ends: it cannot
            // tell.
            continue;
        }
        report.judged += 1;
        let took = next.map_or(u64::MAX, |t| t - free);
        report.slowest_ns = Some(report.slowest_ns.map_or(took, |s| s.max(took)));
        if next.is_none_or(|t| t > until) {
            report.stalls.push(Stall {
                resource,
                free_ns: free,
                waiter: waiter.id.clone(),
                next_grant_ns: next,
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ev(client: &str, attempt: u64, op: Op, t_ms: u64) -> Event {
        Event {
            client: client.into(),
            attempt,
            op,
            t_ns: t_ms * MS,
            resource: "r".into(),
            value: format!("{client}-{attempt}"),
            token: None,
            deadline_ns: None,
            detail: if op == Op::CsEnd {
                "done".into()
            } else {
                String::new()
            },
        }
    }

    fn ok(client: &str, attempt: u64, t_ms: u64, deadline_ms: u64) -> Event {
        Event {
            deadline_ns: Some(deadline_ms * MS),
            ..ev(client, attempt, Op::AcqOk, t_ms)
        }
    }

    /// A well-behaved section: acquire at `t`, inside from t+1 to t+len, deadline t+100.
    fn section(client: &str, attempt: u64, t: u64, len: u64) -> Vec<Event> {
        vec![
            ev(client, attempt, Op::AcqStart, t),
            ok(client, attempt, t, t + 100),
            ev(client, attempt, Op::CsStart, t + 1),
            ev(client, attempt, Op::CsEnd, t + len),
            ev(client, attempt, Op::Rel, t + len + 1),
        ]
    }

    #[test]
    fn disjoint_sections_are_clean() {
        let mut h = section("a", 1, 0, 10);
        h.extend(section("b", 1, 20, 10));
        h.extend(section("a", 2, 40, 10));
        assert!(overlaps(&h).is_empty());
        assert!(overruns(&h).is_empty());
        assert_eq!(completed(&h, "r"), 3);
        assert_eq!(lost_updates(3, 3), 0);
    }

    #[test]
    fn touching_sections_do_not_overlap() {
        let mut h = section("a", 1, 0, 10); // inside 1..10
        h.extend(vec![ev("b", 1, Op::CsStart, 10), ev("b", 1, Op::CsEnd, 12)]);
        assert!(overlaps(&h).is_empty());
    }

    #[test]
    fn an_overlap_fires() {
        let mut h = section("a", 1, 0, 50); // inside 1..50
        h.extend(section("b", 1, 20, 10)); // inside 21..30
        let found = overlaps(&h);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].earlier, ("a".to_owned(), 1));
        assert_eq!(found[0].later, ("b".to_owned(), 1));
        assert_eq!(found[0].by_ns, 9 * MS);
    }

    #[test]
    fn an_overlap_behind_a_short_section_fires() {
        // a is long; b is short and inside a; c starts after b but still inside a.
        let mut h = section("a", 1, 0, 90);
        h.extend(section("b", 1, 10, 5));
        h.extend(section("c", 1, 30, 5));
        assert_eq!(overlaps(&h).len(), 2);
    }

    #[test]
    fn a_section_that_never_ended_overlaps_everything_after_it() {
        let mut h = vec![ev("a", 1, Op::CsStart, 0)];
        h.extend(section("b", 1, 100, 10));
        let found = overlaps(&h);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].earlier.0, "a");
    }

    #[test]
    fn other_resources_do_not_conflict() {
        let mut h = section("a", 1, 0, 50);
        let mut other = section("b", 1, 20, 10);
        for e in &mut other {
            e.resource = "s".into();
        }
        h.extend(other);
        assert!(overlaps(&h).is_empty());
    }

    #[test]
    fn an_overrun_fires_and_an_extension_cures_it() {
        let h = vec![
            ok("a", 1, 0, 100),
            ev("a", 1, Op::CsStart, 1),
            ev("a", 1, Op::CsEnd, 120),
        ];
        let found = overruns(&h);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].by_ns, 20 * MS);

        let mut extended = h.clone();
        extended.push(Event {
            deadline_ns: Some(200 * MS),
            ..ev("a", 1, Op::ExtOk, 50)
        });
        assert!(overruns(&extended).is_empty());
    }

    #[test]
    fn lost_updates_count_missing_increments() {
        assert_eq!(lost_updates(10, 7), 3);
        assert_eq!(lost_updates(10, 11), 0);
        let mut h = section("a", 1, 0, 10);
        h.push(Event {
            detail: "abandoned".into(),
            ..ev("b", 1, Op::CsEnd, 30)
        });
        assert_eq!(completed(&h, "r"), 1, "abandoned sections made no write");
    }

    #[test]
    fn liveness_measures_the_largest_gap_after_heal() {
        let mut h = section("a", 1, 0, 5); // before the heal: ignored
        h.extend(section("b", 1, 109, 5)); // starts at 110
        h.extend(section("c", 1, 149, 5)); // starts at 150
        let l = liveness(&h, "r", 100 * MS, 400 * MS);
        assert_eq!(l.first_after_heal_ns, Some(10 * MS));
        assert_eq!(l.sections, 2);
        assert_eq!(l.largest_gap_ns, 250 * MS, "from the last start to the end");

        let none = liveness(&h, "r", 500 * MS, 600 * MS);
        assert_eq!(none.first_after_heal_ns, None);
        assert_eq!(none.largest_gap_ns, 100 * MS);
    }

    #[test]
    fn activity_on_one_resource_does_not_hide_a_starved_one() {
        // r is busy every 20 ms after the heal; s had one section and then none.
        let mut h = Vec::new();
        for (i, t) in (100..400).step_by(20).enumerate() {
            h.extend(section("a", i as u64 + 1, t, 5));
        }
        let mut s = section("b", 1, 100, 5);
        for e in &mut s {
            e.resource = "s".into();
        }
        h.extend(s);
        let busy = liveness(&h, "r", 100 * MS, 400 * MS);
        assert!(busy.largest_gap_ns <= 21 * MS, "{busy:?}");
        let starved = liveness(&h, "s", 100 * MS, 400 * MS);
        assert_eq!(starved.sections, 1);
        assert_eq!(
            starved.largest_gap_ns,
            299 * MS,
            "from its only start to the end"
        );
        let untouched = liveness(&h, "t", 100 * MS, 400 * MS);
        assert_eq!(untouched.first_after_heal_ns, None);
    }

    #[test]
    fn a_second_start_under_one_name_is_malformed_and_still_overlaps() {
        // Two clients recorded under one name and attempt: the second start must not
        // silently replace the first.
        let h = vec![
            ev("a", 1, Op::CsStart, 0),
            ev("a", 1, Op::CsStart, 10),
            ev("a", 1, Op::CsEnd, 20),
            ev("a", 1, Op::CsEnd, 30),
        ];
        let found = malformed(&h);
        assert!(
            found.contains(&Malformed::DuplicateStart {
                resource: "r".into(),
                section: ("a".into(), 1),
            }),
            "{found:?}"
        );
        assert!(
            found.contains(&Malformed::OrphanEnd {
                resource: "r".into(),
                section: ("a".into(), 1),
            }),
            "the second end has nothing left to end: {found:?}"
        );
        assert_eq!(overlaps(&h).len(), 1, "both sections are still seen");
    }

    #[test]
    fn an_end_without_a_start_is_malformed() {
        let mut h = section("a", 1, 0, 10);
        h.push(ev("b", 1, Op::CsEnd, 30));
        assert_eq!(
            malformed(&h),
            [Malformed::OrphanEnd {
                resource: "r".into(),
                section: ("b".into(), 1),
            }]
        );
        assert!(malformed(&section("a", 1, 0, 10)).is_empty());
    }

    #[test]
    fn slow_and_stuck_acquires_fire() {
        let h = vec![
            ev("a", 1, Op::AcqStart, 0),
            ev("a", 1, Op::AcqFail, 10),
            ev("b", 1, Op::AcqStart, 0),
            ok("b", 1, 900, 1000),
            ev("c", 1, Op::AcqStart, 100),
        ];
        let slow = slow_acquires(&h, 1000 * MS, 500 * MS);
        let who: Vec<&str> = slow.iter().map(|l| l.client.as_str()).collect();
        assert_eq!(who, ["b", "c"]);
        assert_eq!(slow[1].took_ns, None, "c never returned");
        assert!(slow_acquires(&h, 1000 * MS, 950 * MS).is_empty());
    }

    #[test]
    fn failures_are_counted_by_kind() {
        let h = vec![
            Event {
                detail: "Contended".into(),
                ..ev("a", 1, Op::AcqFail, 1)
            },
            Event {
                detail: "Contended".into(),
                ..ev("a", 2, Op::AcqFail, 2)
            },
            Event {
                detail: "NoQuorum".into(),
                ..ev("b", 1, Op::AcqFail, 3)
            },
        ];
        let f = failures(&h);
        assert_eq!(f.get("Contended"), Some(&2));
        assert_eq!(f.get("NoQuorum"), Some(&1));
    }

    #[test]
    fn events_round_trip_through_json() {
        let mut e = ok("cl\"i", 7, 5, 9);
        e.detail = "a\\b\nc".into();
        e.token = Some(3);
        let parsed = crate::history::parse_line(&e.to_json()).unwrap();
        assert_eq!(parsed, e);
    }
    fn tok(mut events: Vec<Event>, token: u64) -> Vec<Event> {
        for e in &mut events {
            if matches!(e.op, Op::AcqOk | Op::ExtOk) {
                e.token = Some(token);
            }
        }
        events
    }

    #[test]
    fn increasing_tokens_are_clean() {
        let mut h = tok(section("a", 1, 0, 10), 1);
        h.extend(tok(section("b", 1, 20, 10), 2));
        h.extend(tok(section("a", 2, 40, 10), 5));
        let r = tokens(&h);
        assert_eq!(r.tokens, 3);
        assert!(r.violations.is_empty(), "{r:?}");
    }

    #[test]
    fn concurrent_acquisitions_may_come_in_any_order() {
        // b was acquiring (5..12) when a got its token (10): either order is allowed.
        let mut h = tok(section("a", 1, 10, 5), 7);
        let mut b = tok(section("b", 1, 5, 30), 3);
        b[1].t_ns = 12 * MS;
        h.extend(b);
        assert!(tokens(&h).violations.is_empty());
    }

    #[test]
    fn a_duplicate_fires() {
        let mut h = tok(section("a", 1, 0, 10), 4);
        h.extend(tok(section("b", 1, 5, 10), 4));
        let r = tokens(&h);
        assert!(
            r.violations
                .iter()
                .any(|v| matches!(v, TokenViolation::Duplicate { token: 4, .. })),
            "{r:?}"
        );
    }

    #[test]
    fn a_regression_fires() {
        let mut h = tok(section("a", 1, 0, 10), 9);
        h.extend(tok(section("b", 1, 20, 10), 3));
        let r = tokens(&h);
        assert_eq!(r.violations.len(), 1, "{r:?}");
        assert!(matches!(
            &r.violations[0],
            TokenViolation::Regression { earlier, later }
                if earlier.2 == 9 && later.2 == 3
        ));
    }

    #[test]
    fn acquisitions_without_tokens_are_ignored() {
        let mut h = section("a", 1, 0, 10);
        h.extend(section("b", 1, 20, 10));
        assert_eq!(tokens(&h), TokenReport::default());
    }

    fn read_ok(client: &str, attempt: u64, t_ms: u64) -> Event {
        Event {
            detail: "read".into(),
            ..ev(client, attempt, Op::AcqOk, t_ms)
        }
    }

    #[test]
    fn read_sections_overlap_each_other_but_no_writer() {
        // Two readers overlapping: clean.
        let readers = vec![
            read_ok("a", 1, 0),
            ev("a", 1, Op::CsStart, 1),
            read_ok("b", 1, 2),
            ev("b", 1, Op::CsStart, 3),
            ev("a", 1, Op::CsEnd, 10),
            ev("b", 1, Op::CsEnd, 12),
        ];
        assert!(overlaps(&readers).is_empty());
        // A writer starting inside a reader's section: caught.
        let mut writer_inside = readers.clone();
        writer_inside.extend([ev("w", 1, Op::CsStart, 11), ev("w", 1, Op::CsEnd, 20)]);
        let found = overlaps(&writer_inside);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].later, ("w".to_owned(), 1));
        // A reader starting inside a writer's section: caught, even when another reader's
        // section that began earlier and ends later hides the writer's end.
        let reader_inside = vec![
            read_ok("a", 1, 0),
            ev("a", 1, Op::CsStart, 1),
            ev("w", 1, Op::CsStart, 2),
            ev("w", 1, Op::CsEnd, 8),
            read_ok("b", 1, 4),
            ev("b", 1, Op::CsStart, 5),
            ev("b", 1, Op::CsEnd, 6),
            ev("a", 1, Op::CsEnd, 30),
        ];
        let found = overlaps(&reader_inside);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found
                .iter()
                .any(|o| o.later == ("b".to_owned(), 1) && o.earlier == ("w".to_owned(), 1))
        );
    }

    /// A fair call of `client` starting at `start`, seen queued at `queued`.
    fn fair_waiter(client: &str, start: u64, queued: u64) -> Vec<Event> {
        vec![
            Event {
                detail: "fair".into(),
                ..ev(client, 1, Op::AcqStart, start)
            },
            Event {
                detail: format!("w-{client}"),
                ..ev(client, 1, Op::Queued, queued)
            },
        ]
    }

    /// `client`'s call returns its lease at `t`, holds it 5 ms and releases.
    fn granted(client: &str, t: u64) -> Vec<Event> {
        vec![
            ok(client, 1, t, t + 100),
            ev(client, 1, Op::CsStart, t + 1),
            ev(client, 1, Op::CsEnd, t + 5),
            Event {
                detail: "released:3".into(),
                ..ev(client, 1, Op::Rel, t + 6)
            },
        ]
    }

    fn killed(client: &str, t: u64) -> Event {
        ev(client, 0, Op::Killed, t)
    }

    #[test]
    fn fair_waiters_served_in_ticket_order_are_clean() {
        let mut h = fair_waiter("a", 0, 10);
        h.extend(fair_waiter("b", 20, 30));
        h.extend(granted("a", 100));
        h.extend(granted("b", 110));
        assert!(overtaken(&h).is_empty(), "{:?}", overtaken(&h));
        assert_eq!(fifo(&h).judged, 1);
    }

    #[test]
    fn only_pairs_whose_order_tells_something_are_judged() {
        // Overtaken: judged.
        let mut h = fair_waiter("a", 0, 10);
        h.extend(fair_waiter("b", 20, 30));
        h.extend(granted("b", 100));
        assert_eq!(fifo(&h).judged, 1);
        // a served before b started; a gave up, or was killed, before b's grant; b
        // started before a was queued; a never seen queued: none judged.
        let mut before = fair_waiter("a", 0, 10);
        before.extend(granted("a", 15));
        before.extend(fair_waiter("b", 30, 40));
        before.extend(granted("b", 100));
        let mut gave_up = fair_waiter("a", 0, 10);
        gave_up.extend(fair_waiter("b", 20, 30));
        gave_up.push(ev("a", 1, Op::AcqFail, 60));
        gave_up.extend(granted("b", 100));
        let mut dead = fair_waiter("a", 0, 10);
        dead.extend(fair_waiter("b", 20, 30));
        dead.push(killed("a", 50));
        dead.extend(granted("b", 100));
        let mut concurrent = fair_waiter("a", 0, 30);
        concurrent.extend(fair_waiter("b", 20, 40));
        concurrent.extend(granted("b", 100));
        concurrent.extend(granted("a", 110));
        let mut unseen: Vec<Event> = fair_waiter("a", 0, 10)
            .into_iter()
            .filter(|e| e.op != Op::Queued)
            .collect();
        unseen.extend(fair_waiter("b", 20, 30));
        unseen.extend(granted("a", 100));
        unseen.extend(granted("b", 110));
        for (name, h) in [
            ("served before", before),
            ("gave up", gave_up),
            ("dead", dead),
            ("concurrent", concurrent),
            ("unseen", unseen),
        ] {
            assert_eq!(fifo(&h), Fifo::default(), "{name}");
        }
    }

    #[test]
    fn an_overtaken_fair_waiter_fires() {
        let mut h = fair_waiter("a", 0, 10);
        h.extend(fair_waiter("b", 20, 30));
        h.extend(granted("b", 100));
        h.extend(granted("a", 110));
        let found = overtaken(&h);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].first, ("a".to_owned(), 1));
        assert_eq!(found[0].overtaker, ("b".to_owned(), 1));
        // A waiter still waiting when the history closed was overtaken too.
        let mut open = fair_waiter("a", 0, 10);
        open.extend(fair_waiter("b", 20, 30));
        open.extend(granted("b", 100));
        assert_eq!(overtaken(&open).len(), 1);
    }

    #[test]
    fn overtaking_a_dead_or_late_or_unfair_waiter_is_allowed() {
        // a was killed before b's grant: it was not live.
        let mut dead = fair_waiter("a", 0, 10);
        dead.extend(fair_waiter("b", 20, 30));
        dead.push(killed("a", 50));
        dead.extend(granted("b", 100));
        assert!(overtaken(&dead).is_empty());
        // a's call gave up before b's grant.
        let mut gave_up = fair_waiter("a", 0, 10);
        gave_up.extend(fair_waiter("b", 20, 30));
        gave_up.push(ev("a", 1, Op::AcqFail, 60));
        gave_up.extend(granted("b", 100));
        assert!(overtaken(&gave_up).is_empty());
        // b started before a's ticket was seen issued: concurrent, either order.
        let mut concurrent = fair_waiter("a", 0, 30);
        concurrent.extend(fair_waiter("b", 20, 40));
        concurrent.extend(granted("b", 100));
        concurrent.extend(granted("a", 110));
        assert!(overtaken(&concurrent).is_empty());
        // b is not fair: FIFO says nothing about it.
        let mut unfair = fair_waiter("a", 0, 10);
        unfair.push(ev("b", 1, Op::AcqStart, 20));
        unfair.extend(granted("b", 100));
        assert!(overtaken(&unfair).is_empty());
        // Another resource.
        let mut other = fair_waiter("a", 0, 10);
        let mut b = fair_waiter("b", 20, 30);
        b.extend(granted("b", 100));
        for e in &mut b {
            e.resource = "s".into();
        }
        other.extend(b);
        assert!(overtaken(&other).is_empty());
    }

    #[test]
    fn a_prompt_hand_off_is_no_stall() {
        // h holds 0..50 and releases at 51; a is queued at 20 and granted at 60.
        let mut h = section("h", 1, 0, 50);
        h[4].detail = "released:3".into();
        h.extend(fair_waiter("a", 10, 20));
        h.extend(granted("a", 60));
        assert!(stalls(&h, 800 * MS, 100 * MS, &[], 1000 * MS).is_empty());
        // Judged even when the history ends before the bound: the grant came.
        let report = handoffs(&h, 800 * MS, 100 * MS, &[], 70 * MS);
        assert_eq!(report.judged, 1, "{report:?}");
        assert_eq!(report.slowest_ns, Some(9 * MS));
        assert!(report.stalls.is_empty());
    }

    #[test]
    fn a_stall_after_a_release_fires() {
        // a is queued and alive, but nobody gets the lock in the 100 ms after the release.
        let mut h = section("h", 1, 0, 50);
        h[4].detail = "released:3".into();
        h.extend(fair_waiter("a", 10, 20));
        h.extend(granted("a", 200));
        let found = stalls(&h, 800 * MS, 100 * MS, &[], 1000 * MS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].free_ns, 51 * MS);
        assert_eq!(found[0].waiter, ("a".to_owned(), 1));
        assert_eq!(found[0].next_grant_ns, Some(200 * MS));
        // Never granted at all.
        let mut never = section("h", 1, 0, 50);
        never[4].detail = "released:3".into();
        never.extend(fair_waiter("a", 10, 20));
        let found = stalls(&never, 800 * MS, 100 * MS, &[], 1000 * MS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].next_grant_ns, None);
    }

    #[test]
    fn a_killed_holder_frees_the_lock_at_its_ttl() {
        // h is killed inside its section at 50; its keys expire by 850; a gets in at 900.
        let mut h = vec![
            ev("h", 1, Op::AcqStart, 0),
            ok("h", 1, 0, 800),
            ev("h", 1, Op::CsStart, 1),
            killed("h", 50),
        ];
        h.extend(fair_waiter("a", 10, 20));
        h.extend(granted("a", 900));
        assert!(stalls(&h, 800 * MS, 100 * MS, &[], 2000 * MS).is_empty());
        assert!(
            overlaps(&h).is_empty(),
            "the dead holder's section ends at its death"
        );
        // With a at 1000 instead: a stall of the killed holder's lock.
        let mut late = h[..4].to_vec();
        late.extend(fair_waiter("a", 10, 20));
        late.extend(granted("a", 1000));
        let found = stalls(&late, 800 * MS, 100 * MS, &[], 2000 * MS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].free_ns, 850 * MS);
    }

    #[test]
    fn no_stall_without_a_live_waiter_or_inside_a_fault() {
        let mut base = section("h", 1, 0, 50);
        base[4].detail = "released:3".into();
        // Nobody queued.
        assert!(stalls(&base, 800 * MS, 100 * MS, &[], 1000 * MS).is_empty());
        // The only waiter was killed within the bound.
        let mut dead = base.clone();
        dead.extend(fair_waiter("a", 10, 20));
        dead.push(killed("a", 60));
        assert!(stalls(&dead, 800 * MS, 100 * MS, &[], 1000 * MS).is_empty());
        // The release fell in a fault window.
        let mut faulted = base.clone();
        faulted.extend(fair_waiter("a", 10, 20));
        assert!(
            stalls(
                &faulted,
                800 * MS,
                100 * MS,
                &[(40 * MS, 60 * MS)],
                1000 * MS
            )
            .is_empty()
        );
        // The history ends before the bound: it cannot tell.
        assert!(stalls(&faulted, 800 * MS, 100 * MS, &[], 120 * MS).is_empty());
        assert_eq!(stalls(&faulted, 800 * MS, 100 * MS, &[], 160 * MS).len(), 1);
    }
}
