//! Pure checkers over a recorded history: no I/O, no clock. Times are offsets from the
//! schedule's origin.
//!
//! 1. **Mutual exclusion** (docs/design.md I4). A lease is *valid* from the moment
//!    `acquire` returned it until the first of: its deadline (moved by each successful
//!    extension, from the moment the extension returned), and the moment `release` was
//!    called. Two leases on one resource must never be valid at the same instant. A
//!    holder that pauses past its deadline is not valid during the overrun, so the
//!    overrun is no violation: that is the lock's stated assumption, and fencing's job.
//! 2. **Fencing tokens** (I12), per resource: unique; ordered in real time (if X was
//!    acquired before Y's successful attempt sent its first request, X's token is
//!    smaller); and increasing across successive holders (if X's validity ended before
//!    Y's began, X's token is smaller).
//! 3. **Fenced storage.** Every critical section reads a register with its token and
//!    writes back the value plus one; the register refuses tokens older than the newest
//!    it has seen. An accepted write whose read is not the register's current value lost
//!    an update.
//!
//! [`Exception`] names the violations a schedule may show because it broke an assumption
//! on purpose, each as narrow as the fault that explains it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::server::{Known, Pruned, QueuedGrant, Registration};

/// One successful acquisition and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseRecord {
    pub(super) id: usize,
    pub(super) client: usize,
    pub(super) resource: usize,
    /// When the successful attempt sent its first request.
    pub(super) attempt_start: Duration,
    /// When `acquire` returned the lease.
    pub(super) acquired: Duration,
    pub(super) token: Option<u64>,
    /// `(from, deadline)`: the deadline in force from `from` on. The first entry is
    /// `(acquired, deadline at acquisition)`, then one per successful extension.
    pub(super) deadlines: Vec<(Duration, Duration)>,
    /// When `release` was called, if it was.
    pub(super) released: Option<Duration>,
}

impl LeaseRecord {
    pub(super) fn new(
        id: usize,
        client: usize,
        resource: usize,
        (attempt_start, acquired): (Duration, Duration),
        deadline: Duration,
        token: Option<u64>,
    ) -> Self {
        Self {
            id,
            client,
            resource,
            attempt_start,
            acquired,
            token,
            deadlines: vec![(acquired, deadline)],
            released: None,
        }
    }

    /// When the lease was valid: disjoint half-open intervals, in order.
    pub(super) fn validity(&self) -> Vec<(Duration, Duration)> {
        let mut out: Vec<(Duration, Duration)> = Vec::new();
        for (i, &(from, deadline)) in self.deadlines.iter().enumerate() {
            let mut end = deadline;
            if let Some(&(next, _)) = self.deadlines.get(i + 1) {
                end = end.min(next);
            }
            if let Some(released) = self.released {
                end = end.min(released);
            }
            if from >= end {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 == from => last.1 = end,
                _ => out.push((from, end)),
            }
        }
        out
    }

    /// The deadline in force when the lease was last valid (for reports).
    pub(super) fn last_deadline(&self) -> Duration {
        self.deadlines.last().map_or(self.acquired, |&(_, d)| d)
    }
}

/// An accepted write to the fenced register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FencedWrite {
    pub(super) lease: usize,
    pub(super) resource: usize,
    pub(super) token: u64,
    pub(super) at: Duration,
    /// The value the critical section read (it writes this plus one).
    pub(super) read: u64,
    /// The register's value just before the write.
    pub(super) before: u64,
}

/// A broken property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Violation {
    /// Two leases on one resource valid at once, during `[from, to)`.
    Overlap {
        resource: usize,
        first: usize,
        second: usize,
        from: Duration,
        to: Duration,
    },
    /// Two leases on one resource with the same token.
    DuplicateToken {
        resource: usize,
        token: u64,
        first: usize,
        second: usize,
    },
    /// `earlier` was acquired before `later`'s attempt began, yet its token is not smaller.
    TokenOrder {
        resource: usize,
        earlier: usize,
        later: usize,
        tokens: (u64, u64),
    },
    /// `earlier`'s validity ended before `later`'s began, yet its token is not smaller.
    Succession {
        resource: usize,
        earlier: usize,
        later: usize,
        tokens: (u64, u64),
    },
    /// An accepted write, at `at`, that overwrote an update it had not read: the one
    /// `overwrote` wrote. The register accepts a write only with a token no older than
    /// any it has seen, so that update carried the same token.
    LostUpdate {
        resource: usize,
        lease: usize,
        token: u64,
        at: Duration,
        read: u64,
        before: u64,
        overwrote: Option<usize>,
    },
}

impl Violation {
    /// The leases involved.
    pub(super) fn leases(&self) -> Vec<usize> {
        match *self {
            Violation::Overlap { first, second, .. }
            | Violation::DuplicateToken { first, second, .. } => vec![first, second],
            Violation::TokenOrder { earlier, later, .. }
            | Violation::Succession { earlier, later, .. } => vec![earlier, later],
            Violation::LostUpdate {
                lease, overwrote, ..
            } => std::iter::once(lease).chain(overwrote).collect(),
        }
    }

    /// Whether it breaks mutual exclusion (as opposed to the fencing properties).
    pub(super) fn is_overlap(&self) -> bool {
        matches!(self, Violation::Overlap { .. })
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}ms", d.as_secs_f64() * 1000.0)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Violation::Overlap {
                resource,
                first,
                second,
                from,
                to,
            } => write!(
                f,
                "mutual exclusion: r{resource} leases #{first} and #{second} both valid during [{}, {})",
                ms(from),
                ms(to)
            ),
            Violation::DuplicateToken {
                resource,
                token,
                first,
                second,
            } => write!(
                f,
                "fencing: r{resource} leases #{first} and #{second} both got token {token}"
            ),
            Violation::TokenOrder {
                resource,
                earlier,
                later,
                tokens,
            } => write!(
                f,
                "fencing: r{resource} lease #{earlier} (token {}) was acquired before lease #{later} (token {}) began, but its token is not smaller",
                tokens.0, tokens.1
            ),
            Violation::Succession {
                resource,
                earlier,
                later,
                tokens,
            } => write!(
                f,
                "fencing: r{resource} lease #{earlier} (token {}) held the lock before lease #{later} (token {}), but its token is not smaller",
                tokens.0, tokens.1
            ),
            Violation::LostUpdate {
                resource,
                lease,
                token,
                at,
                read,
                before,
                overwrote,
            } => {
                let by = overwrote.map_or(String::new(), |id| format!(" (lease #{id}'s)"));
                write!(
                    f,
                    "fenced storage: r{resource} lease #{lease} (token {token}) read {read} but overwrote {before}{by} at {}: an update was lost",
                    ms(at)
                )
            }
        }
    }
}

/// The first instant both interval lists cover, and until when.
fn overlap(a: &[(Duration, Duration)], b: &[(Duration, Duration)]) -> Option<(Duration, Duration)> {
    a.iter()
        .flat_map(|x| b.iter().map(move |y| (x, y)))
        .filter(|(x, y)| x.0 < y.1 && y.0 < x.1)
        .map(|(x, y)| (x.0.max(y.0), x.1.min(y.1)))
        .min()
}

/// Every violation in the history.
// Checks I4 (mutual exclusion) and I12 (fencing tokens unique and ordered), per resource.
pub(super) fn check(leases: &[LeaseRecord], writes: &[FencedWrite]) -> Vec<Violation> {
    let validity: Vec<Vec<(Duration, Duration)>> = leases.iter().map(|l| l.validity()).collect();
    let mut out = Vec::new();
    for (i, a) in leases.iter().enumerate() {
        for (j, b) in leases.iter().enumerate().skip(i + 1) {
            if a.resource != b.resource {
                continue;
            }
            if let Some((from, to)) = overlap(&validity[i], &validity[j]) {
                out.push(Violation::Overlap {
                    resource: a.resource,
                    first: a.id,
                    second: b.id,
                    from,
                    to,
                });
            }
            let (Some(ta), Some(tb)) = (a.token, b.token) else {
                continue;
            };
            if ta == tb {
                out.push(Violation::DuplicateToken {
                    resource: a.resource,
                    token: ta,
                    first: a.id,
                    second: b.id,
                });
                continue;
            }
            for ((x, vx, tx), (y, vy, ty)) in [
                ((a, &validity[i], ta), (b, &validity[j], tb)),
                ((b, &validity[j], tb), (a, &validity[i], ta)),
            ] {
                if tx < ty {
                    continue;
                }
                let tokens = (tx, ty);
                if x.acquired < y.attempt_start {
                    out.push(Violation::TokenOrder {
                        resource: x.resource,
                        earlier: x.id,
                        later: y.id,
                        tokens,
                    });
                } else if let (Some(x_end), Some(y_start)) = (vx.last(), vy.first())
                    && x_end.1 <= y_start.0
                {
                    out.push(Violation::Succession {
                        resource: x.resource,
                        earlier: x.id,
                        later: y.id,
                        tokens,
                    });
                }
            }
        }
    }
    // The writes are in the order the register applied them: the previous write to a
    // resource wrote the value the next one found.
    let mut last: HashMap<usize, usize> = HashMap::new();
    for w in writes {
        let overwrote = last.insert(w.resource, w.lease);
        if w.read != w.before {
            out.push(Violation::LostUpdate {
                resource: w.resource,
                lease: w.lease,
                token: w.token,
                at: w.at,
                read: w.read,
                before: w.before,
                overwrote,
            });
        }
    }
    out
}

/// A master that lost its data (`FLUSHALL`, or a restart without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DataLoss {
    pub(super) master: usize,
    /// Whether the master is durable (`appendfsync always`): only durable masters count
    /// for fencing, so only their losses can touch a token.
    pub(super) durable: bool,
    pub(super) at: Duration,
    /// The master's how-manyth loss this is (from 1).
    pub(super) nth: u64,
}

/// A client's first connection to a master whose answer reached the client: it learned the
/// master's data epoch then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Contact {
    /// When the master served it.
    pub(super) at: Duration,
    /// How many times the master had lost its data by then: the connection came after
    /// the master's `n`th loss when this is at least `n`, even at the same instant.
    pub(super) data_losses: u64,
}

/// The faults of a schedule that break an assumption of the lock, and what the clients
/// knew of the masters, for the exceptions below.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Breaches {
    /// When a master's wall clock jumped forward.
    pub(super) clock_jumps: Vec<Duration>,
    /// When an operator force-unlocked a resource, and which.
    pub(super) force_unlocks: Vec<(Duration, usize)>,
    /// Every data loss, in order.
    pub(super) data_losses: Vec<DataLoss>,
    /// `first_contact[client][master]`: the client's first connection to the master;
    /// `None` if it never connected.
    pub(super) first_contact: Vec<Vec<Option<Contact>>>,
}

impl Breaches {
    /// `client`'s first connection to `master`, if it made one.
    fn first_contact(&self, client: usize, master: usize) -> Option<Contact> {
        self.first_contact
            .get(client)?
            .get(master)
            .copied()
            .flatten()
    }
}

/// Why a violation is outside what the lock promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exception {
    /// An overlap such that a master's clock jumped forward after the earlier of the two
    /// leases' attempts began (whichever sent its first request first) and before the
    /// overlap began: a lock key may have expired early (the lock's assumption is that
    /// server clocks run at one rate). Either lease's keys count from its attempt's start,
    /// so the window opens with the first of the two attempts, whichever lease was
    /// acquired first; a fault before both attempts touched neither's keys.
    ClockJump,
    /// A fencing violation (duplicate token, token order, succession, or a lost update
    /// between the two leases' writes) between an earlier lease L1 and a later lease L2
    /// such that a durable master lost its data after L1's attempt began and before L2 was
    /// acquired, and L2's client first connected to that master after the loss (and by
    /// L2's acquisition: a master it first met later had no part in L2's token). That
    /// client cannot tell the wiped master from one that never held a counter, trusts it,
    /// and may issue a token again: outside fencing's guarantee as `src/fencing.rs`
    /// documents it (such a master must not rejoin until its counters are restored).
    /// Overlaps are never excused by it.
    UnseenLoss,
    /// An overlap on a resource that an operator force-unlocked after the earlier of the
    /// two leases' attempts began (as for [`Exception::ClockJump`]) and before the overlap
    /// began: deleting a live lease's keys hands the lock to the next client by design
    /// (fencing keeps the storage safe). Fencing violations are never excused by it.
    ForceUnlock,
}

impl Exception {
    /// Whether this exception explains `v` in a history of `leases` (indexed by id) with
    /// the faults in `breaches`.
    pub(super) fn excuses(
        self,
        leases: &[LeaseRecord],
        breaches: &Breaches,
        v: &Violation,
    ) -> bool {
        self.explain(leases, breaches, v).is_some()
    }

    /// The fault by which this exception explains `v`, described; `None` if it does not.
    pub(super) fn explain(
        self,
        leases: &[LeaseRecord],
        breaches: &Breaches,
        v: &Violation,
    ) -> Option<String> {
        let lease = |id: usize| leases.iter().find(|l| l.id == id);
        match (self, *v) {
            (
                Exception::ClockJump,
                Violation::Overlap {
                    first,
                    second,
                    from,
                    ..
                },
            ) => {
                // From the first request of the earlier of the two attempts to the overlap.
                let start = lease(first)?
                    .attempt_start
                    .min(lease(second)?.attempt_start);
                let at = breaches
                    .clock_jumps
                    .iter()
                    .find(|&&at| start <= at && at <= from)?;
                Some(format!(
                    "a clock jumped forward at {}, after the first of lease #{first}'s and \
                     #{second}'s attempts began ({}) and before the overlap ({})",
                    ms(*at),
                    ms(start),
                    ms(from)
                ))
            }
            (Exception::ClockJump, _) => None,
            (
                Exception::ForceUnlock,
                Violation::Overlap {
                    resource,
                    first,
                    second,
                    from,
                    ..
                },
            ) => {
                let start = lease(first)?
                    .attempt_start
                    .min(lease(second)?.attempt_start);
                let (at, _) = breaches
                    .force_unlocks
                    .iter()
                    .find(|&&(at, r)| r == resource && start <= at && at <= from)?;
                Some(format!(
                    "r{resource} was force-unlocked at {}, after the first of lease \
                     #{first}'s and #{second}'s attempts began ({}) and before the overlap \
                     ({})",
                    ms(*at),
                    ms(start),
                    ms(from)
                ))
            }
            (Exception::ForceUnlock, _) => None,
            (Exception::UnseenLoss, Violation::Overlap { .. }) => None,
            (
                Exception::UnseenLoss,
                Violation::LostUpdate {
                    overwrote: None, ..
                },
            ) => None,
            (
                Exception::UnseenLoss,
                Violation::DuplicateToken { first, second, .. }
                | Violation::TokenOrder {
                    earlier: first,
                    later: second,
                    ..
                }
                | Violation::Succession {
                    earlier: first,
                    later: second,
                    ..
                }
                | Violation::LostUpdate {
                    lease: first,
                    overwrote: Some(second),
                    ..
                },
            ) => {
                let (a, b) = (lease(first)?, lease(second)?);
                let (l1, l2) = if (a.acquired, a.id) <= (b.acquired, b.id) {
                    (a, b)
                } else {
                    (b, a)
                };
                breaches.data_losses.iter().find_map(|loss| {
                    let contact = breaches.first_contact(l2.client, loss.master)?;
                    (loss.durable
                        && l1.attempt_start <= loss.at
                        && loss.at <= l2.acquired
                        && contact.data_losses >= loss.nth
                        && contact.at <= l2.acquired)
                        .then(|| {
                            format!(
                                "durable m{} lost its data at {}, after lease #{}'s attempt \
                                 began ({}); c{}, which took lease #{} at {}, first connected \
                                 to it at {}, after the loss",
                                loss.master,
                                ms(loss.at),
                                l1.id,
                                ms(l1.attempt_start),
                                l2.client,
                                l2.id,
                                ms(l2.acquired),
                                ms(contact.at)
                            )
                        })
                })
            }
        }
    }
}

/// One waiting acquire call of the single-key mutex with hand-off or fairness (a queued
/// waiter), and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WaitRecord {
    /// The call's number in the schedule.
    pub(super) id: usize,
    pub(super) client: usize,
    pub(super) resource: usize,
    pub(super) fair: bool,
    /// When the call began.
    pub(super) start: Duration,
    /// When it returned, or was dropped (or the horizon).
    pub(super) end: Duration,
    /// The lease it returned: its id and value.
    pub(super) lease: Option<(usize, Arc<str>)>,
    /// Its waiter id, once it sent a registration.
    pub(super) waiter: Option<Arc<str>>,
    /// When it was registered: the reply that completed a quorum of registrations
    /// reached it (fair: of strict writes of one ticket, which issued the ticket).
    pub(super) registered: Option<Duration>,
}

/// A broken property of the queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum QueueViolation {
    /// Fair call `earlier`'s ticket was issued before fair call `later` began, `earlier`
    /// was still waiting (live) when `later` was granted lease `lease`, yet `later` went
    /// first.
    Fifo {
        resource: usize,
        earlier: usize,
        later: usize,
        lease: usize,
        /// `earlier`'s registration on each master that granted `later`.
        seen: String,
    },
    /// Call `call` waited, registered and live, while the lock was free from `free_from`
    /// to `until` (the bound) with no fault anywhere, and nobody was granted it.
    Stall {
        resource: usize,
        call: usize,
        free_from: Duration,
        until: Duration,
    },
}

impl fmt::Display for QueueViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueViolation::Fifo {
                resource,
                earlier,
                later,
                lease,
                seen,
            } => write!(
                f,
                "FIFO: r{resource} call #{earlier} had its ticket before call #{later} began \
                 and was still waiting, yet #{later} got lease #{lease} first ({seen})"
            ),
            QueueViolation::Stall {
                resource,
                call,
                free_from,
                until,
            } => write!(
                f,
                "liveness: r{resource} was free from {} and call #{call} waited, registered, \
                 until {} without a grant to anyone and without a fault",
                ms(*free_from),
                ms(*until)
            ),
        }
    }
}

/// Why a FIFO violation is outside what the fair lock promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum FifoExcuse {
    /// On every master that granted the later call, the earlier call's registration was
    /// not live at that moment, for this reason (the first such master's): its liveness
    /// key had expired (refreshes lost or late), it had left after a grant of its own
    /// there (a confirm that failed elsewhere), or the master had lost its data (`None`:
    /// it never registered there). Only where a fault explains it on each of those
    /// masters: the master lost its data; its liveness key had outlived the waiter TTL
    /// since the master last wrote it, *and* a call of the waiter to that master was
    /// lost, late or failed, or the master was stopped, down or its clock jumped, from one
    /// refresh period and one node timeout before the key's end to the grant (a refresh
    /// that should have renewed it failed: a client that merely refreshes too late is
    /// not excused); or, never registered or gone otherwise, a call of the waiter to that
    /// master was troubled, or the master out, from the call's start (or a node timeout
    /// before the registration was last written there) to the grant. A registration
    /// refreshed in time by a master that keeps its data is never missing.
    NotLive(Option<Registration>),
    /// A master that granted the later call lost its data (with the ticket counters) after
    /// the earlier call began and before the later one was granted, and the later call's
    /// ticket was below the earlier one's wherever the earlier one was live: tickets may
    /// repeat or go back when counters are lost (fairness, not safety, depends on them).
    CountersLost,
}

impl fmt::Display for FifoExcuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FifoExcuse::NotLive(None) => write!(f, "never registered on the granting masters"),
            FifoExcuse::NotLive(Some(r)) => {
                write!(f, "registration not live on the granting masters ({r:?})")
            }
            FifoExcuse::CountersLost => write!(f, "a master lost its ticket counters"),
        }
    }
}

/// What the FIFO checker found, and how many pairs of calls it judged.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct FifoCheck {
    /// Each violation, with the excuse that explains it, if one does.
    pub(super) found: Vec<(QueueViolation, Option<FifoExcuse>)>,
    /// Pairs (A, B) of fair calls on one resource such that A's ticket was issued before B
    /// began and B was granted while A was waiting or after A was granted: those whose
    /// order the check judged (the others, where A gave up first, promise nothing).
    pub(super) judged: u64,
}

/// The faults besides data losses that may explain a registration that was not live
/// (see [`FifoExcuse::NotLive`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Trouble<'a> {
    /// Each waiter's troubled calls (lost, late, failed): its id, the master, when sent.
    pub(super) calls: &'a [(Arc<str>, usize, Duration)],
    /// When each master was out (stopped, down, its clock jumped): master, from, to.
    pub(super) outages: &'a [(usize, Duration, Duration)],
    /// The clients' node timeout: how long a refresh's round may take on top of its
    /// period.
    pub(super) node_timeout: Duration,
}

/// A registration found not live at `at` (`at_us` on the master's clock): last written
/// at `written_us` there, for `waiter_ttl_us`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lapse<'a> {
    pub(super) waiter: &'a str,
    pub(super) master: usize,
    pub(super) written_us: u64,
    pub(super) waiter_ttl_us: u64,
    pub(super) at: Duration,
    pub(super) at_us: u64,
}

impl Trouble<'_> {
    /// Why the registration `lapse` describes expired, when a fault explains it: its
    /// liveness key outlived the waiter TTL (its end is by `at`), and a refresh that
    /// should have renewed it met a fault on that master (a call of the waiter troubled,
    /// or the master out, from one refresh period and one node timeout before the key's
    /// end to `at`); or a call of the waiter to any master was troubled in the round that
    /// last wrote the key (sent up to a node timeout before the write), which holds up
    /// that round. A client that merely refreshes too late is not excused, nor one that
    /// lets its registration lapse while it pauses after a failed confirm (it refreshes
    /// during the pause).
    pub(super) fn lapsed(&self, lapse: &Lapse<'_>) -> Option<&'static str> {
        let until_us = lapse.written_us.saturating_add(lapse.waiter_ttl_us);
        if until_us > lapse.at_us {
            return None;
        }
        // A time on the master's clock, in the schedule's (its clock moves as the
        // schedule's but for a jump, itself an outage).
        let at = |us: u64| {
            lapse
                .at
                .saturating_sub(Duration::from_micros(lapse.at_us.saturating_sub(us)))
        };
        let (until, written) = (at(until_us), at(lapse.written_us));
        let refresh = Duration::from_micros(lapse.waiter_ttl_us / 3);
        let from = until.saturating_sub(refresh + self.node_timeout);
        if self.between(lapse.waiter, lapse.master, from, lapse.at) {
            return Some("not refreshed within the waiter TTL, a refresh troubled");
        }
        // A round waits for its slowest master (up to a node timeout, and a connect
        // timeout when connecting), and the next refresh is sent when the round ended if
        // that is past its period: a call of the waiter troubled on any master in the
        // round that last wrote the key (sent up to a node timeout before the write)
        // postpones it.
        let since = written.saturating_sub(self.node_timeout);
        if self
            .calls
            .iter()
            .any(|(w, _, sent)| &**w == lapse.waiter && since <= *sent && *sent <= written)
        {
            return Some("not refreshed within the waiter TTL, a round held up");
        }
        None
    }

    /// Whether a call of `waiter` to `master` was troubled, or `master` was out, from
    /// `from` to `to`.
    fn between(&self, waiter: &str, master: usize, from: Duration, to: Duration) -> bool {
        self.calls
            .iter()
            .any(|(w, m, at)| &**w == waiter && *m == master && from <= *at && *at <= to)
            || self
                .outages
                .iter()
                .any(|&(m, start, end)| m == master && start <= to && from <= end)
    }
}

/// FIFO among live fair waiters: if fair call A's ticket was issued before fair call B
/// began, and A was still waiting when B was granted (A's call still running and not
/// granted yet), B was not granted first. Each violation found comes with the excuse
/// that explains it, if one does (see [`FifoExcuse`]), else `None`. `grants` are the
/// masters' grants of queued acquires, each with the waiters the master knew then;
/// `trouble`, each waiter's troubled calls and the masters' outages, which with the data
/// `losses` and the masters' own record of when they last wrote a registration are the
/// only evidence that excuses a registration that was not live.
// Checks I19 (fair waiters are granted in ticket order).
pub(super) fn fifo(
    waits: &[WaitRecord],
    leases: &[LeaseRecord],
    grants: &[QueuedGrant],
    losses: &[DataLoss],
    trouble: &Trouble<'_>,
) -> FifoCheck {
    let acquired = |id: usize| leases.iter().find(|l| l.id == id).map(|l| l.acquired);
    let mut out = Vec::new();
    let mut judged = 0;
    for a in waits.iter().filter(|a| a.fair) {
        let (Some(issued), Some(wa)) = (a.registered, a.waiter.as_ref()) else {
            continue;
        };
        for b in waits
            .iter()
            .filter(|b| b.fair && b.id != a.id && b.resource == a.resource)
        {
            let Some((lease, value)) = &b.lease else {
                continue;
            };
            let Some(granted) = acquired(*lease) else {
                continue;
            };
            // A issued before B began, still waiting (not granted yet) when B was granted.
            let a_granted = a.lease.as_ref().and_then(|(l, _)| acquired(*l));
            if issued >= b.start {
                continue;
            }
            if a_granted.is_some_and(|t| t <= granted) {
                // In order.
                judged += 1;
                continue;
            }
            if a.end <= granted {
                continue;
            }
            judged += 1;
            // The grants that counted: made by the time B had its lease (a slow request can
            // be granted later, after the round was decided without it).
            let on: Vec<&QueuedGrant> = grants
                .iter()
                .filter(|g| g.value == *value && g.at <= granted)
                .collect();
            let states: Vec<(&QueuedGrant, Option<&Known>)> = on
                .iter()
                .map(|g| (*g, g.waiters.iter().find(|k| k.waiter == *wa)))
                .collect();
            let b_score = b.waiter.as_ref().and_then(|wb| {
                on.iter()
                    .flat_map(|g| g.waiters.iter())
                    .find(|k| k.waiter == *wb)
                    .map(|k| k.score)
            });
            // Why A's registration was not live on the master of grant `g`, when a fault
            // explains it: the master lost its data; its liveness key outlived the waiter
            // TTL it asked for since it was last written there, and a refresh that should
            // have renewed it met a fault there (a call of it troubled, or the master out,
            // from one refresh period and one node timeout before the key's end to the
            // grant); or, never registered there, or left (its own confirm granted there,
            // or a dequeue), a call of it to that master was troubled, or the master out,
            // since the call began (and since a node timeout before the registration was
            // last written there).
            let fault = |g: &QueuedGrant, k: Option<&Known>| -> Option<&'static str> {
                let lost = losses
                    .iter()
                    .any(|l| l.master == g.master && a.start <= l.at && l.at <= g.at);
                // A time on the master's clock, in the schedule's (its clock moves as the
                // schedule's but for a jump, itself an outage).
                let at = |us: u64| {
                    g.at.saturating_sub(Duration::from_micros(g.at_us.saturating_sub(us)))
                };
                let nt = trouble.node_timeout;
                match k {
                    Some(k) if k.registration == Registration::Live => None,
                    Some(k) if k.registration == Registration::Lost => Some("its data lost"),
                    _ if lost => Some("its data lost"),
                    Some(k) if k.registration == Registration::Expired => {
                        let lapse = Lapse {
                            waiter: wa,
                            master: g.master,
                            written_us: k.written_us,
                            waiter_ttl_us: k.waiter_ttl_us,
                            at: g.at,
                            at_us: g.at_us,
                        };
                        trouble.lapsed(&lapse)
                    }
                    Some(k) => {
                        let from = a.start.max(at(k.written_us).saturating_sub(nt));
                        trouble
                            .between(wa, g.master, from, g.at)
                            .then_some("a call of it lost, late or failed, or the master out")
                    }
                    None => trouble
                        .between(wa, g.master, a.start, g.at)
                        .then_some("a call of it lost, late or failed, or the master out"),
                }
            };
            let seen = states
                .iter()
                .map(|(g, k)| {
                    let why = fault(g, *k).unwrap_or("no fault explains it");
                    match k {
                        Some(k) if k.registration == Registration::Live => {
                            format!("m{}: Live with score {}", g.master, k.score)
                        }
                        Some(k) => format!(
                            "m{}: {:?} with score {} ({why})",
                            g.master, k.registration, k.score
                        ),
                        None => format!("m{}: never registered ({why})", g.master),
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            let seen = format!("{seen}; the later call's score {b_score:?}");
            // Not live on every granting master, each for a fault of its own: a
            // registration refreshed in time by a master that keeps its data is never
            // missing.
            let not_live: Option<Option<Registration>> = (!states.is_empty()
                && states.iter().all(|(g, k)| {
                    k.is_none_or(|k| k.registration != Registration::Live) && fault(g, *k).is_some()
                }))
            .then(|| states.iter().find_map(|(_, k)| k.map(|k| k.registration)));
            // A was live on some granting master, and wherever it was, B's ticket was below
            // A's: a counter lost can only reorder tickets. (Live nowhere, it is a matter
            // for the excuse above, which lost counters do not widen.)
            let live = |k: &Option<&Known>| k.is_some_and(|k| k.registration == Registration::Live);
            let inverted = states.iter().any(|(_, k)| live(k))
                && states.iter().all(|(_, k)| {
                    !live(k) || k.is_some_and(|k| b_score.is_some_and(|b| b < k.score))
                });
            let excuse = not_live.map(FifoExcuse::NotLive).or_else(|| {
                (inverted
                    && losses.iter().any(|l| {
                        on.iter().any(|g| g.master == l.master)
                            && a.start <= l.at
                            && l.at <= granted
                    }))
                .then_some(FifoExcuse::CountersLost)
            });
            out.push((
                QueueViolation::Fifo {
                    resource: a.resource,
                    earlier: a.id,
                    later: b.id,
                    lease: *lease,
                    seen,
                },
                excuse,
            ));
        }
    }
    FifoCheck { found: out, judged }
}

/// The registrations pruned from a queue (their liveness key expired) while their call was
/// still running, with no fault to explain it: (call, master, when). `prunes` are the
/// masters' prunes, each with the master. A running call refreshes its registrations in
/// time: only the master's data lost since the call began, or a fault near the key's end
/// ([`Trouble::lapsed`]), explains one.
pub(super) fn pruned_while_waiting(
    waits: &[WaitRecord],
    prunes: &[(usize, Pruned)],
    losses: &[DataLoss],
    trouble: &Trouble<'_>,
) -> Vec<(usize, usize, Duration)> {
    let mut out = Vec::new();
    for (master, p) in prunes {
        let Some(w) = waits
            .iter()
            .find(|w| w.waiter.as_ref() == Some(&p.waiter) && w.start <= p.at && p.at < w.end)
        else {
            continue;
        };
        let lost = losses
            .iter()
            .any(|l| l.master == *master && w.start <= l.at && l.at <= p.at);
        let lapse = Lapse {
            waiter: &p.waiter,
            master: *master,
            written_us: p.written_us,
            waiter_ttl_us: p.waiter_ttl_us,
            at: p.at,
            at_us: p.at_us,
        };
        if !lost && trouble.lapsed(&lapse).is_none() {
            out.push((w.id, *master, p.at));
        }
    }
    out
}

/// What the liveness checker looked at.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct StallCount {
    /// Free stretches with a registered waiter judged against the bound (granted within
    /// it, or found stalled).
    pub(super) checked: u64,
    /// Stretches not checked because a fault fell near them.
    pub(super) faulted: u64,
}

/// Liveness: a registered waiter whose call is still running `bound` after the lock became
/// free (no lease valid, from its registration or the end of the leases before) sees a
/// lease granted on the resource by then, unless a fault fell from `lead` before the lock
/// became free to the bound: `faults` are the nemesis's actions (`None`: touching every
/// resource) and the lost or late messages of ops on a resource (`Some`).
pub(super) fn stalls(
    waits: &[WaitRecord],
    leases: &[LeaseRecord],
    faults: &[(Duration, Option<usize>)],
    (bound, lead): (Duration, Duration),
) -> (Vec<QueueViolation>, StallCount) {
    let mut out = Vec::new();
    let mut count = StallCount::default();
    for w in waits {
        let Some(registered) = w.registered else {
            continue;
        };
        let on: Vec<&LeaseRecord> = leases.iter().filter(|l| l.resource == w.resource).collect();
        let end_of = |l: &LeaseRecord| {
            l.validity()
                .last()
                .map_or(l.acquired, |&(_, end)| end)
                .max(l.acquired)
        };
        let mut free = registered;
        while free < w.end {
            // Past every lease acquired by then.
            loop {
                let busy = on
                    .iter()
                    .filter(|l| l.acquired <= free)
                    .map(|l| end_of(l))
                    .max()
                    .unwrap_or(free);
                if busy <= free {
                    break;
                }
                free = busy;
            }
            if free >= w.end {
                break;
            }
            let until = free + bound;
            if let Some(next) = on
                .iter()
                .map(|l| l.acquired)
                .filter(|&at| free < at && at <= until)
                .min()
            {
                count.checked += 1;
                free = next;
                continue;
            }
            if w.end <= until {
                break;
            }
            let from = free.saturating_sub(lead);
            if faults
                .iter()
                .any(|&(f, r)| from <= f && f <= until && r.is_none_or(|r| r == w.resource))
            {
                count.faulted += 1;
            } else {
                count.checked += 1;
                out.push(QueueViolation::Stall {
                    resource: w.resource,
                    call: w.id,
                    free_from: free,
                    until,
                });
            }
            break;
        }
    }
    (out, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// A lease on r0 tried from `start`, acquired at `acquired`, valid until `deadline`.
    fn lease(
        id: usize,
        start: u64,
        acquired: u64,
        deadline: u64,
        token: Option<u64>,
    ) -> LeaseRecord {
        LeaseRecord::new(id, id, 0, (t(start), t(acquired)), t(deadline), token)
    }

    fn released(mut l: LeaseRecord, at: u64) -> LeaseRecord {
        l.released = Some(t(at));
        l
    }

    #[test]
    fn successive_holders_with_rising_tokens_are_clean() {
        let h = [
            released(lease(0, 0, 10, 100, Some(1)), 50),
            released(lease(1, 40, 60, 150, Some(2)), 120),
            lease(2, 110, 150, 300, Some(3)),
        ];
        assert_eq!(check(&h, &[]), []);
    }

    #[test]
    fn validity_ends_at_release_deadline_or_extension() {
        let mut l = lease(0, 0, 10, 100, None);
        assert_eq!(l.validity(), [(t(10), t(100))]);
        // Extended at 90 until 190: continuous.
        l.deadlines.push((t(90), t(190)));
        assert_eq!(l.validity(), [(t(10), t(190))]);
        // An extension that returned after the deadline leaves a gap.
        let mut g = lease(1, 0, 10, 100, None);
        g.deadlines.push((t(120), t(200)));
        assert_eq!(g.validity(), [(t(10), t(100)), (t(120), t(200))]);
        g.released = Some(t(150));
        assert_eq!(g.validity(), [(t(10), t(100)), (t(120), t(150))]);
        // Released before the gap closed.
        g.released = Some(t(110));
        assert_eq!(g.validity(), [(t(10), t(100))]);
    }

    #[test]
    fn overlapping_validity_fires() {
        let h = [lease(0, 0, 10, 100, None), lease(1, 0, 90, 200, None)];
        assert_eq!(
            check(&h, &[]),
            [Violation::Overlap {
                resource: 0,
                first: 0,
                second: 1,
                from: t(90),
                to: t(100),
            }]
        );
    }

    #[test]
    fn touching_intervals_and_other_resources_do_not_overlap() {
        let mut other = lease(2, 0, 20, 80, None);
        other.resource = 1;
        let h = [
            lease(0, 0, 10, 100, None),
            lease(1, 0, 100, 200, None),
            other,
        ];
        assert_eq!(check(&h, &[]), []);
    }

    #[test]
    fn a_pause_past_the_deadline_is_not_an_overlap() {
        // Lease 0 is released at 400 after pausing; its deadline was 100. Lease 1 was
        // acquired at 150 once the keys expired.
        let h = [
            released(lease(0, 0, 10, 100, Some(1)), 400),
            released(lease(1, 120, 150, 250, Some(2)), 200),
        ];
        assert_eq!(check(&h, &[]), []);
    }

    #[test]
    fn an_extension_that_overlaps_fires() {
        let mut a = lease(0, 0, 10, 100, None);
        a.deadlines.push((t(95), t(195)));
        let h = [a, lease(1, 100, 150, 250, None)];
        let v = check(&h, &[]);
        assert_eq!(v.len(), 1);
        assert!(v[0].is_overlap());
        assert_eq!(v[0].leases(), [0, 1]);
    }

    #[test]
    fn duplicate_tokens_fire_once() {
        let h = [
            released(lease(0, 0, 10, 100, Some(4)), 50),
            lease(1, 60, 70, 150, Some(4)),
        ];
        assert_eq!(
            check(&h, &[]),
            [Violation::DuplicateToken {
                resource: 0,
                token: 4,
                first: 0,
                second: 1,
            }]
        );
    }

    #[test]
    fn a_token_regression_in_real_time_fires() {
        let h = [
            released(lease(0, 0, 10, 100, Some(7)), 50),
            lease(1, 60, 70, 150, Some(5)),
        ];
        assert_eq!(
            check(&h, &[]),
            [Violation::TokenOrder {
                resource: 0,
                earlier: 0,
                later: 1,
                tokens: (7, 5),
            }]
        );
    }

    #[test]
    fn a_successor_that_started_early_still_needs_the_larger_token() {
        // Lease 1's attempt began (5) before lease 0 was acquired (10), so only the
        // succession rule applies: 0 was valid until 50, 1 from 70.
        let h = [
            released(lease(0, 0, 10, 100, Some(7)), 50),
            lease(1, 5, 70, 150, Some(5)),
        ];
        assert_eq!(
            check(&h, &[]),
            [Violation::Succession {
                resource: 0,
                earlier: 0,
                later: 1,
                tokens: (7, 5),
            }]
        );
        // Concurrent attempts whose validity overlapped are ordered by neither rule.
        let h = [lease(0, 0, 10, 100, Some(7)), lease(1, 5, 70, 150, Some(5))];
        assert!(check(&h, &[]).iter().all(Violation::is_overlap));
    }

    #[test]
    fn lost_updates_fire() {
        let w = |lease, read, before| FencedWrite {
            lease,
            resource: 0,
            token: 9,
            at: t(5),
            read,
            before,
        };
        assert_eq!(check(&[], &[w(3, 4, 4)]), []);
        assert_eq!(
            check(&[], &[w(3, 4, 5)]),
            [Violation::LostUpdate {
                resource: 0,
                lease: 3,
                token: 9,
                at: t(5),
                read: 4,
                before: 5,
                overwrote: None,
            }]
        );
        // The lease whose write was lost is named.
        assert!(matches!(
            check(&[], &[w(2, 4, 4), w(3, 4, 5)])[..],
            [Violation::LostUpdate {
                lease: 3,
                overwrote: Some(2),
                ..
            }]
        ));
    }

    #[test]
    fn a_clock_jump_excuses_no_fencing_violation() {
        let h = [
            released(lease(0, 100, 110, 300, Some(5)), 200),
            lease(1, 400, 420, 700, Some(5)),
        ];
        let found = check(&h, &[]);
        assert!(!found.is_empty() && found.iter().all(|v| !v.is_overlap()));
        let jumped = Breaches {
            clock_jumps: vec![t(150)],
            ..Breaches::default()
        };
        assert!(
            found
                .iter()
                .all(|v| !Exception::ClockJump.excuses(&h, &jumped, v))
        );
    }

    #[test]
    fn a_clock_jump_excuses_only_an_overlap_it_touched() {
        // Lease 0 tried from 100 and valid [110, 300); lease 1 tried from 150, valid from
        // 250: they overlap during [250, 300).
        let h = [lease(0, 100, 110, 300, None), lease(1, 150, 250, 500, None)];
        let found = check(&h, &[]);
        assert_eq!(found.len(), 1);
        let jumps = |at: &[u64]| Breaches {
            clock_jumps: at.iter().map(|&ms| t(ms)).collect(),
            ..Breaches::default()
        };
        let excused = |b: &Breaches| Exception::ClockJump.excuses(&h, b, &found[0]);
        assert!(excused(&jumps(&[200])));
        assert!(excused(&jumps(&[100])));
        assert!(excused(&jumps(&[250])));
        // Before the earlier attempt, or after the overlap began: some other lease's
        // keys, not these.
        assert!(!excused(&jumps(&[99])));
        assert!(!excused(&jumps(&[251, 900])));
        assert!(!excused(&jumps(&[])));
    }

    #[test]
    fn a_force_unlock_excuses_only_an_overlap_on_its_resource_that_it_touched() {
        // As above: leases 0 and 1 on r0 overlap during [250, 300).
        let h = [lease(0, 100, 110, 300, None), lease(1, 150, 250, 500, None)];
        let found = check(&h, &[]);
        assert_eq!(found.len(), 1);
        let unlocks = |at: &[(u64, usize)]| Breaches {
            force_unlocks: at.iter().map(|&(ms, r)| (t(ms), r)).collect(),
            ..Breaches::default()
        };
        let excused = |b: &Breaches| Exception::ForceUnlock.excuses(&h, b, &found[0]);
        assert!(excused(&unlocks(&[(200, 0)])));
        assert!(excused(&unlocks(&[(100, 0)])));
        assert!(excused(&unlocks(&[(250, 0)])));
        // Another resource, before the earlier attempt, or after the overlap began.
        assert!(!excused(&unlocks(&[(200, 1)])));
        assert!(!excused(&unlocks(&[(99, 0)])));
        assert!(!excused(&unlocks(&[(251, 0), (900, 0)])));
        // Neither a clock jump nor a flush at that moment excuses it in its place.
        let jumped = Breaches {
            clock_jumps: vec![t(200)],
            ..Breaches::default()
        };
        assert!(!excused(&jumped));
        assert!(!Exception::ClockJump.excuses(&h, &unlocks(&[(200, 0)]), &found[0]));
        // Nor does a force-unlock excuse a fencing violation.
        let tokens = [
            released(lease(0, 100, 110, 300, Some(5)), 200),
            lease(1, 400, 420, 700, Some(5)),
        ];
        let fencing = check(&tokens, &[]);
        assert!(!fencing.is_empty() && fencing.iter().all(|v| !v.is_overlap()));
        assert!(fencing.iter().all(|v| !Exception::ForceUnlock.excuses(
            &tokens,
            &unlocks(&[(150, 0)]),
            v
        )));
    }

    #[test]
    fn a_fault_excuses_an_overlap_only_from_the_first_of_the_two_attempts() {
        // Lease 0 tried from 100 and valid [110, 300); lease 1, whose attempt began first
        // (at 20) and was slow, was acquired at 250: they overlap during [250, 300). A
        // fault before both attempts touched no key of either and excuses nothing. One
        // after lease 1's attempt began, even before lease 0's, may have removed a key
        // that lease 1 had written and counted: a force-unlock at 199 that deleted the
        // later lease's first key, granted at 140 in an attempt that began at 132, let the
        // earlier lease (attempt from 213) take a quorum beside it (seed
        // 3517220926238697642 of the force-unlock profile without fencing).
        let slow = lease(1, 20, 250, 500, None);
        for h in [
            [lease(0, 100, 110, 300, None), slow.clone()],
            [slow.clone(), lease(0, 100, 110, 300, None)],
        ] {
            let found = check(&h, &[]);
            assert_eq!(found.len(), 1, "{found:?}");
            let jumps = |at: u64| Breaches {
                clock_jumps: vec![t(at)],
                ..Breaches::default()
            };
            let unlocks = |at: u64| Breaches {
                force_unlocks: vec![(t(at), 0)],
                ..Breaches::default()
            };
            for (at, excused) in [
                (0, false),
                (19, false),
                (20, true),
                (50, true),
                (100, true),
                (250, true),
                (251, false),
            ] {
                assert_eq!(
                    Exception::ClockJump.excuses(&h, &jumps(at), &found[0]),
                    excused,
                    "a clock jump at {at}"
                );
                assert_eq!(
                    Exception::ForceUnlock.excuses(&h, &unlocks(at), &found[0]),
                    excused,
                    "a force-unlock at {at}"
                );
            }
        }
    }

    /// A first connection served at `at`, after `losses` data losses of its master.
    fn contact(at: u64, losses: u64) -> Option<Contact> {
        Some(Contact {
            at: t(at),
            data_losses: losses,
        })
    }

    /// Client 0 holds lease 0 (token 1); durable master 0 is flushed at 300 (its first
    /// loss); client 1 first connects to it as `first` says and takes lease 1 with
    /// `token`. Both clients met master 1 at the start and never met master 2.
    fn after_a_flush(first: Option<Contact>, token: u64) -> ([LeaseRecord; 2], Breaches) {
        let h = [
            released(lease(0, 100, 110, 300, Some(1)), 200),
            lease(1, 340, 360, 600, Some(token)),
        ];
        let breaches = Breaches {
            data_losses: vec![DataLoss {
                master: 0,
                durable: true,
                at: t(300),
                nth: 1,
            }],
            first_contact: vec![
                vec![contact(0, 0), contact(0, 0), None],
                vec![first, contact(0, 0), None],
            ],
            ..Breaches::default()
        };
        (h, breaches)
    }

    fn excused(h: &[LeaseRecord], b: &Breaches, found: &[Violation]) -> bool {
        !found.is_empty() && found.iter().all(|v| Exception::UnseenLoss.excuses(h, b, v))
    }

    fn none_excused(h: &[LeaseRecord], b: &Breaches, found: &[Violation]) -> bool {
        !found.iter().any(|v| Exception::UnseenLoss.excuses(h, b, v))
    }

    #[test]
    fn an_unseen_loss_excuses_a_repeated_or_smaller_token() {
        for token in [1, 0] {
            let (h, b) = after_a_flush(contact(350, 1), token);
            let found = check(&h, &[]);
            assert!(found.iter().all(|v| !v.is_overlap()), "{found:?}");
            assert!(excused(&h, &b, &found), "{found:?}");
            // The same history, but client 1 knew the master before it was flushed.
            let (_, seen) = after_a_flush(contact(50, 0), token);
            assert!(none_excused(&h, &seen, &found));
            // At the instant of the flush: the order of the two decides.
            let (_, before) = after_a_flush(contact(300, 0), token);
            assert!(none_excused(&h, &before, &found));
            let (_, after) = after_a_flush(contact(300, 1), token);
            assert!(excused(&h, &after, &found));
            // First met after lease 1 was acquired (the master had no part in its token),
            // or never.
            let (_, late) = after_a_flush(contact(361, 1), token);
            assert!(none_excused(&h, &late, &found));
            let (_, never) = after_a_flush(None, token);
            assert!(none_excused(&h, &never, &found));
        }
    }

    #[test]
    fn an_unseen_loss_excuses_the_lost_update_of_a_repeated_token() {
        let (h, b) = after_a_flush(contact(350, 1), 1);
        let write = |lease, at, read, before| FencedWrite {
            lease,
            resource: 0,
            token: 1,
            at: t(at),
            read,
            before,
        };
        // Lease 0 reads 0 and writes 1; lease 1, with the same token, reads 0 before it
        // and writes 1 after it.
        let found = check(&h, &[write(0, 150, 0, 0), write(1, 400, 0, 1)]);
        assert!(
            found.iter().any(|v| matches!(
                v,
                Violation::LostUpdate {
                    lease: 1,
                    overwrote: Some(0),
                    ..
                }
            )),
            "{found:?}"
        );
        assert!(excused(&h, &b, &found), "{found:?}");
        let (_, seen) = after_a_flush(contact(50, 0), 1);
        assert!(none_excused(&h, &seen, &found));
    }

    #[test]
    fn a_loss_outside_the_window_or_on_a_master_that_is_not_durable_excuses_nothing() {
        let (h, b) = after_a_flush(contact(350, 1), 1);
        let found = check(&h, &[]);
        // The first loss of `master`; client 1's first connection to master 0 came after
        // it, to master 1 before it, and to master 2 never.
        let with_loss = |master, durable, at| Breaches {
            data_losses: vec![DataLoss {
                master,
                durable,
                at: t(at),
                nth: 1,
            }],
            ..b.clone()
        };
        // Before lease 0's attempt began: the counter lease 0 wrote was never lost.
        assert!(!excused(&h, &with_loss(0, true, 90), &found));
        // After lease 1 was acquired (the window alone decides here).
        assert!(!excused(&h, &with_loss(0, true, 370), &found));
        // A master that is not durable (it never counts for fencing).
        assert!(!excused(&h, &with_loss(0, false, 300), &found));
        // A master that client 1 never met, or knew before the loss.
        assert!(!excused(&h, &with_loss(2, true, 300), &found));
        assert!(!excused(&h, &with_loss(1, true, 300), &found));
        assert!(excused(&h, &with_loss(0, true, 300), &found));
        assert!(!excused(&h, &Breaches::default(), &found));
    }

    #[test]
    fn an_unseen_loss_excuses_no_overlap() {
        // Lease 1 is valid from 360 while lease 0 still is (until 500): the repeated
        // token is excused, the overlap is not.
        let (_, b) = after_a_flush(contact(350, 1), 1);
        let h = [
            lease(0, 100, 110, 500, Some(1)),
            lease(1, 340, 360, 600, Some(1)),
        ];
        let found = check(&h, &[]);
        assert!(found.iter().any(Violation::is_overlap), "{found:?}");
        for v in &found {
            assert_eq!(
                Exception::UnseenLoss.excuses(&h, &b, v),
                !v.is_overlap(),
                "{v}"
            );
        }
        // Nor does the clock-jump exception excuse a fencing violation after a loss.
        assert!(
            found
                .iter()
                .filter(|v| !v.is_overlap())
                .all(|v| !Exception::ClockJump.excuses(&h, &b, v))
        );
    }

    /// A fair call on r0 by client `id`: began at `start`, registered at `registered`
    /// with waiter id `w<id>`, ended at `end`, maybe with lease `lease` (value `v<lease>`).
    fn wait(id: usize, start: u64, registered: u64, end: u64, lease: Option<usize>) -> WaitRecord {
        WaitRecord {
            id,
            client: id,
            resource: 0,
            fair: true,
            start: t(start),
            end: t(end),
            lease: lease.map(|l| (l, format!("v{l}").into())),
            waiter: Some(format!("w{id}").into()),
            registered: Some(t(registered)),
        }
    }

    /// The waiter TTL of every registration in the FIFO cases.
    const WAITER_TTL_MS: u64 = 50;

    /// Master `master` granted lease `lease` (value `v<lease>`) to waiter `by` at 90 (its
    /// own clock reads in microseconds the milliseconds of the schedule), knowing the
    /// waiters `known` as (id, score, registration, when last written there).
    fn grant(
        master: usize,
        lease: usize,
        by: &str,
        known: &[(&str, u64, Registration, u64)],
    ) -> QueuedGrant {
        QueuedGrant {
            master,
            key: "r0".into(),
            value: format!("v{lease}").into(),
            waiter: by.into(),
            fair: true,
            at: t(90),
            at_us: 90_000,
            waiters: known
                .iter()
                .map(|&(w, score, registration, written)| Known {
                    waiter: w.into(),
                    score,
                    registration,
                    written_us: written * 1000,
                    waiter_ttl_us: WAITER_TTL_MS * 1000,
                })
                .collect(),
        }
    }

    /// The node timeout of the FIFO cases.
    const NODE_TIMEOUT_MS: u64 = 10;

    /// The waiters' troubled `calls`, no master out.
    fn calls(calls: &[(Arc<str>, usize, Duration)]) -> Trouble<'_> {
        Trouble {
            calls,
            outages: &[],
            node_timeout: t(NODE_TIMEOUT_MS),
        }
    }

    /// The FIFO check of `waits`, with no troubled call of any waiter.
    fn fifo_calm(
        waits: &[WaitRecord],
        leases: &[LeaseRecord],
        grants: &[QueuedGrant],
        losses: &[DataLoss],
    ) -> Vec<(QueueViolation, Option<FifoExcuse>)> {
        fifo(waits, leases, grants, losses, &calls(&[])).found
    }

    #[test]
    fn fifo_fires_when_a_live_earlier_ticket_is_passed_and_names_the_excuse() {
        use Registration::*;
        // Call 0 registered at 20; call 1 began at 30 and got lease 0 at 100 (granted by
        // the masters at 90) while call 0 still waited (until 260, lease 1).
        let leases = [lease(0, 90, 100, 200, None), lease(1, 250, 260, 400, None)];
        let waits = [wait(0, 0, 20, 260, Some(1)), wait(1, 30, 40, 100, Some(0))];
        let live = [
            grant(0, 0, "w1", &[("w0", 5, Live, 70), ("w1", 4, Live, 70)]),
            grant(1, 0, "w1", &[("w0", 5, Live, 70), ("w1", 4, Live, 70)]),
        ];
        let checked = fifo(&waits, &leases, &live, &[], &calls(&[]));
        assert_eq!(checked.judged, 1);
        let found = checked.found;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(
            found[0],
            (
                QueueViolation::Fifo {
                    earlier: 0,
                    later: 1,
                    lease: 0,
                    ..
                },
                None
            )
        ));
        // Calls of call 0's waiter lost or late: to m1 at 50, and to m0 at 70 (a refresh
        // due before its key there, written at 30, ended at 80).
        let troubled = [(Arc::from("w0"), 1, t(50)), (Arc::from("w0"), 0, t(70))];
        let troubled = calls(&troubled);
        // Not live on one granting master only: still unexplained, trouble or not.
        let one = [
            grant(0, 0, "w1", &[("w0", 1, Expired, 30), ("w1", 4, Live, 70)]),
            grant(1, 0, "w1", &[("w0", 1, Live, 70), ("w1", 4, Live, 70)]),
        ];
        assert_eq!(fifo(&waits, &leases, &one, &[], &troubled).found[0].1, None);
        // Not live on every granting master, each for a fault: on m0 last written at 30,
        // expired by its TTL at 80, a refresh of it there troubled; on m1 never
        // registered, a call of it there troubled. Excused, with the reason.
        let lapsed = |written| {
            [
                grant(
                    0,
                    0,
                    "w1",
                    &[("w0", 1, Expired, written), ("w1", 4, Live, 70)],
                ),
                grant(1, 0, "w1", &[("w1", 4, Live, 70)]),
            ]
        };
        assert_eq!(
            fifo(&waits, &leases, &lapsed(30), &[], &troubled).found[0].1,
            Some(FifoExcuse::NotLive(Some(Expired)))
        );
        // Gone from m0 before its TTL was out (written at 60, due to live until 110): no
        // fault explains that, whatever happened elsewhere.
        let early = fifo(&waits, &leases, &lapsed(60), &[], &troubled).found;
        assert_eq!(early[0].1, None);
        assert!(
            matches!(&early[0].0, QueueViolation::Fifo { seen, .. }
                if seen.contains("m0: Expired with score 1 (no fault explains it)")),
            "{early:?}"
        );
        // Never registered on m1 with no call of it there lost or late: another waiter's
        // trouble, one on another master, or one after the grant explains nothing.
        for trouble in [
            vec![],
            vec![(Arc::from("w1"), 1, t(50))],
            vec![(Arc::from("w0"), 0, t(50))],
            vec![(Arc::from("w0"), 1, t(91))],
        ] {
            let found = fifo(&waits, &leases, &lapsed(30), &[], &calls(&trouble)).found;
            assert_eq!(found[0].1, None, "{trouble:?}");
            assert!(
                matches!(&found[0].0, QueueViolation::Fifo { seen, .. }
                    if seen.contains("m1: never registered (no fault explains it)")),
                "{found:?}"
            );
        }
        // m1's data lost within the window explains the missing registration there, and a
        // passed live ticket (the counters lost).
        let loss = DataLoss {
            master: 1,
            durable: false,
            at: t(50),
            nth: 1,
        };
        let m0_troubled = [(Arc::from("w0"), 0, t(70))];
        assert_eq!(
            fifo(&waits, &leases, &lapsed(30), &[loss], &calls(&m0_troubled)).found[0].1,
            Some(FifoExcuse::NotLive(Some(Expired)))
        );
        assert_eq!(
            fifo(&waits, &leases, &lapsed(60), &[loss], &calls(&m0_troubled)).found[0].1,
            None
        );
        let lost = [grant(
            0,
            0,
            "w1",
            &[("w0", 1, Lost, 70), ("w1", 4, Live, 70)],
        )];
        assert_eq!(
            fifo_calm(&waits, &leases, &lost, &[])[0].1,
            Some(FifoExcuse::NotLive(Some(Lost)))
        );
        assert_eq!(
            fifo_calm(&waits, &leases, &live, &[loss])[0].1,
            Some(FifoExcuse::CountersLost)
        );
        let early = DataLoss { at: t(0), ..loss };
        assert_eq!(
            fifo_calm(&waits, &leases, &live, &[early])[0].1,
            Some(FifoExcuse::CountersLost)
        );
        let upright = [grant(
            0,
            0,
            "w1",
            &[("w0", 3, Live, 70), ("w1", 4, Live, 70)],
        )];
        assert_eq!(fifo_calm(&waits, &leases, &upright, &[loss])[0].1, None);
        let late = DataLoss { at: t(101), ..loss };
        assert_eq!(fifo_calm(&waits, &leases, &live, &[late])[0].1, None);
        // A loss on a master that did not grant the later call reorders no ticket there.
        let elsewhere = DataLoss { master: 2, ..loss };
        assert_eq!(fifo_calm(&waits, &leases, &live, &[elsewhere])[0].1, None);
        // No grant recorded for the lease: nothing excuses it.
        assert_eq!(fifo(&waits, &leases, &[], &[], &troubled).found[0].1, None);
    }

    /// A registration whose liveness key outlived the waiter TTL is excused only for a
    /// fault of that master's near the key's end: a refresh lost, late or failed, or the
    /// master out, from one refresh period and one node timeout before it to the grant.
    /// A client that merely refreshes too late is not.
    #[test]
    fn fifo_excuses_an_expired_registration_only_for_a_fault_near_its_end() {
        use Registration::*;
        let leases = [lease(0, 90, 100, 200, None), lease(1, 250, 260, 400, None)];
        let waits = [wait(0, 0, 20, 260, Some(1)), wait(1, 30, 40, 100, Some(0))];
        // On m0 and m1 last written at 30: due to live until 80 (TTL 50), a refresh due
        // every 16.7: a refresh that should have renewed it was due from 63.3 on, and
        // with the node timeout (10) the window runs from 53.3 to the grant at 90.
        let expired = [
            grant(0, 0, "w1", &[("w0", 1, Expired, 30), ("w1", 4, Live, 70)]),
            grant(1, 0, "w1", &[("w0", 1, Expired, 30), ("w1", 4, Live, 70)]),
        ];
        let excuse =
            |trouble: &Trouble<'_>| fifo(&waits, &leases, &expired, &[], trouble).found[0].1;
        // No fault at all: a violation, not an excuse.
        assert_eq!(excuse(&calls(&[])), None);
        let found = fifo(&waits, &leases, &expired, &[], &calls(&[])).found;
        assert!(
            matches!(&found[0].0, QueueViolation::Fifo { seen, .. }
                if seen.contains("m0: Expired with score 1 (no fault explains it)")),
            "{found:?}"
        );
        // A troubled call to each master within the window: excused.
        let near = [(Arc::from("w0"), 0, t(54)), (Arc::from("w0"), 1, t(89))];
        assert_eq!(
            excuse(&calls(&near)),
            Some(FifoExcuse::NotLive(Some(Expired)))
        );
        // A call of the waiter troubled on any master in the round that last wrote the
        // keys (sent from a node timeout before their last write at 30, to it): the
        // round it held up postponed the next refresh. Excused.
        for sent in [20, 30] {
            assert_eq!(
                excuse(&calls(&[(Arc::from("w0"), 2, t(sent))])),
                Some(FifoExcuse::NotLive(Some(Expired))),
                "{sent}"
            );
        }
        // Before the window, after the grant, another waiter's, on another master after
        // the round, or after the keys' end on one master only: not.
        for trouble in [
            vec![(Arc::from("w0"), 0, t(19)), (Arc::from("w0"), 1, t(19))],
            vec![(Arc::from("w0"), 2, t(31))],
            vec![(Arc::from("w0"), 0, t(91)), (Arc::from("w0"), 1, t(91))],
            vec![(Arc::from("w1"), 0, t(60)), (Arc::from("w1"), 1, t(60))],
            vec![(Arc::from("w0"), 0, t(85))],
        ] {
            assert_eq!(excuse(&calls(&trouble)), None, "{trouble:?}");
        }
        // Each master out (stopped or down) over part of the window: excused; out only
        // before it: not.
        let out = |outages: &[(usize, Duration, Duration)]| {
            let trouble = Trouble {
                outages,
                ..calls(&[])
            };
            fifo(&waits, &leases, &expired, &[], &trouble).found[0].1
        };
        assert_eq!(
            out(&[(0, t(10), t(54)), (1, t(85), Duration::MAX)]),
            Some(FifoExcuse::NotLive(Some(Expired)))
        );
        assert_eq!(out(&[(0, t(10), t(53)), (1, t(10), t(53))]), None);
    }

    #[test]
    fn fifo_ignores_concurrent_tickets_given_up_calls_and_the_fair_order() {
        use Registration::*;
        let leases = [lease(0, 90, 100, 200, None), lease(1, 250, 260, 400, None)];
        let live = [grant(0, 0, "w1", &[("w0", 5, Live, 70)])];
        let judged = |waits: &[WaitRecord]| {
            let checked = fifo(waits, &leases, &live, &[], &calls(&[]));
            assert!(checked.found.is_empty(), "{checked:?}");
            checked.judged
        };
        // Call 0's ticket came after call 1 began: not judged.
        let concurrent = [wait(0, 0, 35, 260, Some(1)), wait(1, 30, 40, 100, Some(0))];
        assert_eq!(judged(&concurrent), 0);
        // Call 0 gave up at 90, before call 1's grant: not judged.
        let gave_up = [wait(0, 0, 20, 90, None), wait(1, 30, 40, 100, Some(0))];
        assert_eq!(judged(&gave_up), 0);
        // In order: call 0 first, judged.
        let in_order = [wait(0, 0, 20, 100, Some(0)), wait(1, 30, 40, 260, Some(1))];
        assert_eq!(judged(&in_order), 1);
        // Non-fair calls are not ordered.
        let mut unfair = [wait(0, 0, 20, 260, Some(1)), wait(1, 30, 40, 100, Some(0))];
        unfair[1].fair = false;
        assert_eq!(judged(&unfair), 0);
    }

    #[test]
    fn a_free_lock_with_a_registered_waiter_must_be_granted_within_the_bound() {
        let bound = (t(100), t(50));
        // Lease 0 valid until 200; call 0 registered at 150 and waited until 500.
        let leases = [released(lease(0, 0, 10, 300, None), 200)];
        let waiting = [wait(0, 100, 150, 500, None)];
        let (found, count) = stalls(&waiting, &leases, &[], bound);
        assert_eq!(
            found,
            [QueueViolation::Stall {
                resource: 0,
                call: 0,
                free_from: t(200),
                until: t(300)
            }]
        );
        assert_eq!(
            count,
            StallCount {
                checked: 1,
                faulted: 0
            }
        );
        // Granted at 290: within the bound.
        let granted = [leases[0].clone(), lease(1, 280, 290, 600, None)];
        let mut got = waiting.clone();
        got[0].lease = Some((1, "v1".into()));
        got[0].end = t(290);
        assert!(stalls(&got, &granted, &[], bound).0.is_empty());
        // Gave up before the bound.
        let mut short = waiting.clone();
        short[0].end = t(290);
        assert!(stalls(&short, &leases, &[], bound).0.is_empty());
        // A fault from `lead` before the lock was free to the bound excuses; one earlier
        // does not.
        for (at, excused) in [(150, true), (300, true), (149, false), (301, false)] {
            let (found, count) = stalls(&waiting, &leases, &[(t(at), None)], bound);
            assert_eq!(
                (found.is_empty(), count.faulted == 1),
                (excused, excused),
                "{at}"
            );
            // A message of another resource's ops is no fault here; one of this one's is.
            let (found, _) = stalls(&waiting, &leases, &[(t(at), Some(1))], bound);
            assert!(!found.is_empty(), "{at}");
            let (found, count) = stalls(&waiting, &leases, &[(t(at), Some(0))], bound);
            assert_eq!(
                (found.is_empty(), count.faulted == 1),
                (excused, excused),
                "{at}"
            );
        }
    }
}
