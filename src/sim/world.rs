//! The schedule driver: draws a schedule from a seed, runs real clients and a nemesis
//! against simulated masters on a paused clock, and records the history.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::ops::AddAssign;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::check::{
    self, Breaches, Contact, DataLoss, FencedWrite, FifoExcuse, LeaseRecord, QueueViolation,
    StallCount, Violation, WaitRecord,
};
use super::net::{ConnParams, EnqueueSeen, Gate, NetParams, Registering, SendLog, SimMaster};
use super::server::{Clock, ScriptBugs, SimServer, Trace};
use crate::config::Builder;
use crate::error::ErrorKind;
use crate::lease::Lease;
use crate::master::Master;
use crate::mutants::Mutant;
use crate::wait::Notifier;
use crate::{AcquireOptions, Redlock};

/// The most virtual time one schedule may take; its clients finish long before.
pub(super) const HORIZON: Duration = Duration::from_secs(600);

/// Set to anything to log every op of every master into the events (for replays).
pub(super) const TRACE_ENV: &str = "REDQUORUM_SIM_TRACE";

/// Every client's connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);

/// The per-master timeout of the `NoNodeTimeout` mutant (as in `Redlock::from_config`).
const NO_NODE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Faults are placed within this many TTLs from the origin, where the clients work.
const FAULT_SPAN_TTLS: f64 = 8.0;

/// What a family of schedules exercises.
#[derive(Debug, Clone, Copy)]
pub(super) struct Profile {
    pub(super) name: &'static str,
    /// The master counts to choose from.
    pub(super) masters: &'static [usize],
    pub(super) quarantine: bool,
    pub(super) fencing: bool,
    /// A planted bug in every client (`--cfg redquorum_mutants`).
    pub(super) mutant: Option<Mutant>,
    pub(super) faults: Faults,
    /// An initialised cluster among more masters, and clients configured otherwise; `None`:
    /// every client lists every master, and no record is written.
    pub(super) cluster: Option<ClusterPlan>,
    /// Clients that lock several resources at once (`acquire_many`) among clients that
    /// lock one: each cycle locks `{r0}`, `{r1}`, `{r0, r1}` or `{r1, r0}`, over two
    /// resources.
    pub(super) many: bool,
    /// How the clients wait for a held lock.
    pub(super) waiting: Waiting,
}

/// How a profile's clients wait for a held lock of one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Waiting {
    /// `acquire` with the library's defaults (hand-off on), a quarter `try_acquire`.
    Default,
    /// As `Default`, with hand-off off (`Waiting::handoff(false)`): today's herd.
    Herd,
    /// Queued waiters (`acquire_with`, hand-off on), checked for FIFO and liveness.
    Queued(Queued),
}

/// The waiters of a [`Waiting::Queued`] profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Queued {
    /// The chance that a call is fair (`AcquireOptions::fair(true)`).
    pub(super) fair: f64,
    /// The chance that a call is a `try_acquire`, which never queues.
    pub(super) try_only: f64,
    /// The chance that a call's wait budget is short (a fraction of the TTL): it gives up.
    pub(super) give_up: f64,
    /// The chance that a call's future is dropped mid-wait.
    pub(super) dropped: f64,
    /// The chance that a call's client is killed mid-wait (`kill -9`): its connections are
    /// cut, its background work never arrives, and it calls no more.
    pub(super) killed: f64,
    /// A long wait budget, in TTLs.
    pub(super) budget: f64,
    /// A fault planted in the masters' model (not in the product): registrations lapse
    /// between refreshes with no fault anywhere (the server's `Plants::waiters_lapse`).
    pub(super) lapse: bool,
}

/// A cluster record written by `init_cluster` before the clients start, on the first
/// `masters` (as the profile draws them) of more masters, and clients whose configurations
/// differ from the cluster's.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClusterPlan {
    /// Masters beyond the cluster's, which no record names.
    pub(super) extra: usize,
    /// The chance that a client is configured otherwise than the cluster (see [`Differs`]).
    pub(super) mismatched: f64,
}

/// How a client's configuration differs from its cluster's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Differs {
    /// It lists the cluster's masters (in an order of its own) with its settings.
    Nothing,
    /// It lists as many masters, with the cluster's settings, but one of them is outside
    /// the cluster instead of a member: it agrees with the records it finds, and the
    /// master outside is a stranger to it.
    OtherMember,
    /// It lists the cluster's masters and the masters outside: another count and quorum.
    MoreMasters,
    /// It lists some of the cluster's masters only: another count and quorum.
    FewerMasters,
    /// Another `ttl_max` (twice the TTL).
    LongerTtlMax,
    /// Another drift factor (0.02).
    MoreDrift,
}

impl Differs {
    /// Whether a client configured so agrees with the cluster's record: the others must
    /// never hold a lease.
    pub(super) fn agrees(self) -> bool {
        matches!(self, Differs::Nothing | Differs::OtherMember)
    }
}

/// One client's configuration: the masters it lists, in its order, and how it differs from
/// its cluster's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientConfig {
    pub(super) masters: Vec<usize>,
    pub(super) differs: Differs,
}

/// How hostile a family of schedules is; each schedule draws its own values up to these.
#[derive(Debug, Clone, Copy)]
pub(super) struct Faults {
    /// Most crash-restart episodes.
    pub(super) crashes: u32,
    /// A crash's downtime, as fractions of the TTL.
    pub(super) down: (f64, f64),
    /// The chance that a master is durable (`appendfsync always`): its restarts keep the
    /// data; the others restart empty.
    pub(super) durable: f64,
    /// Most stop-continue episodes (`SIGSTOP`), each up to 1.5 TTL.
    pub(super) pauses: u32,
    /// Most `FLUSHALL`s.
    pub(super) flushes: u32,
    /// Most forward jumps of a master's wall clock (by a quarter to a whole TTL); these
    /// break the lock's clock assumption.
    pub(super) clock_jumps: u32,
    /// Most chance of a lost message, and of a slow one.
    pub(super) drop_p: f64,
    pub(super) slow_p: f64,
    /// The chance that a holder pauses past its deadline inside a critical section.
    pub(super) client_pause: f64,
    /// The chance that a holder re-enters its lease inside the critical section (after its
    /// work or its pause past the deadline) and relies on what the re-entry says of the
    /// lease (docs/design.md §14).
    pub(super) reentry: f64,
    /// Most force-unlocks: an operator deletes a resource's lock key on every running
    /// master, whatever it holds, and raises its fence counter (`force_unlock_any`).
    pub(super) force_unlocks: u32,
    /// Rolling restarts instead of the episodes above: every master in turn crashes and
    /// restarts, and the clients keep working until a while after the last restart.
    pub(super) rolling: Option<Rolling>,
}

/// Rolling restarts: masters `0, 1, …, N-1` crash and restart one after the other, `rounds`
/// times over, never two down at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rolling {
    pub(super) rounds: u32,
    /// A master's downtime, and the time from its restart to the next master's crash, as
    /// fractions of the TTL.
    pub(super) down: (f64, f64),
    pub(super) gap: (f64, f64),
    /// How many masters keep their data over a restart (chosen at random).
    pub(super) durable: Durable,
}

/// Which masters of a rolling restart keep their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durable {
    All,
    /// One fewer than a quorum.
    BelowQuorum,
}

/// One client's habits.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClientPlan {
    pub(super) cycles: u32,
    pub(super) attempts: u32,
    pub(super) retry_delay: Duration,
}

/// A nemesis action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    Crash(usize),
    Restart(usize),
    Stop(usize),
    Continue(usize),
    Flush(usize),
    ClockJump(usize, Duration),
    /// A force-unlock of resource `r{0}` on every running master.
    ForceUnlock(usize),
}

/// Everything a seed decides before the clients start.
#[derive(Debug, Clone)]
pub(super) struct Schedule {
    pub(super) seed: u64,
    pub(super) masters: usize,
    pub(super) clients: usize,
    pub(super) resources: usize,
    pub(super) ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) net: NetParams,
    pub(super) durable: Vec<bool>,
    pub(super) plans: Vec<ClientPlan>,
    pub(super) faults: Vec<(Duration, Fault)>,
    /// With a cluster plan: how many of the masters are the cluster's (the first ones).
    pub(super) cluster: Option<usize>,
    /// Each client's configuration.
    pub(super) configs: Vec<ClientConfig>,
}

/// The random streams of a schedule, kept apart so that one component's draws do not
/// shift another's.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Schedule,
    Client(usize),
    Link(usize, usize),
    /// The library's own draws (lock values, waiter ids, pauses), through
    /// `core::with_rng`.
    Library,
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rng(seed: u64, stream: Stream) -> StdRng {
    let tag = match stream {
        Stream::Schedule => 1,
        Stream::Client(c) => (2 << 32) | c as u64,
        Stream::Link(c, m) => (3 << 32) | ((c as u64) << 16) | m as u64,
        Stream::Library => 4 << 32,
    };
    StdRng::seed_from_u64(splitmix(seed) ^ splitmix(tag))
}

fn ms(d: Duration) -> String {
    format!("{:.3}ms", d.as_secs_f64() * 1000.0)
}

impl Schedule {
    /// The schedule of `seed` in `profile`.
    pub(super) fn draw(profile: &Profile, seed: u64) -> Self {
        let f = profile.faults;
        let mut rng = rng(seed, Stream::Schedule);
        let members = profile.masters[rng.random_range(0..profile.masters.len())];
        let masters = members + profile.cluster.map_or(0, |c| c.extra);
        let clients = rng.random_range(2..=5);
        let resources = rng.random_range(1..=2);
        // Several resources at once need two of them (drawn all the same, so that the
        // other draws stay as in the profiles without).
        let resources = if profile.many { 2 } else { resources };
        let ttl = Duration::from_millis(rng.random_range(300..=1000));
        let node_timeout = Duration::from_millis(rng.random_range(20..=50));
        let slow_max = if rng.random_bool(0.2) {
            ttl.mul_f64(1.5)
        } else {
            node_timeout * 3
        };
        let net = NetParams {
            delay: (
                Duration::from_micros(100),
                Duration::from_micros(rng.random_range(500..=5000)),
            ),
            slow_p: rng.random_range(0.0..=f.slow_p),
            slow_max,
            drop_p: rng.random_range(0.0..=f.drop_p),
        };
        let mut durable: Vec<bool> = (0..masters).map(|_| rng.random_bool(f.durable)).collect();
        let plans = (0..clients)
            .map(|_| ClientPlan {
                cycles: rng.random_range(3..=6),
                attempts: rng.random_range(2..=5),
                retry_delay: ttl.mul_f64(rng.random_range(0.05..=0.3)),
            })
            .collect();
        let faults = match f.rolling {
            None => draw_faults(&mut rng, &f, (masters, resources), ttl),
            Some(rolling) => {
                durable = match rolling.durable {
                    Durable::All => vec![true; masters],
                    Durable::BelowQuorum => {
                        let mut order: Vec<usize> = (0..masters).collect();
                        order.shuffle(&mut rng);
                        let mut durable = vec![false; masters];
                        for m in order.into_iter().take(masters / 2) {
                            durable[m] = true;
                        }
                        durable
                    }
                };
                rolling_faults(&mut rng, &rolling, masters, ttl)
            }
        };
        // Drawn last, so that the schedules of the profiles without a cluster stay as
        // they were.
        let configs = match profile.cluster {
            None => vec![
                ClientConfig {
                    masters: (0..masters).collect(),
                    differs: Differs::Nothing,
                };
                clients
            ],
            Some(plan) => (0..clients)
                .map(|_| draw_config(&mut rng, &plan, members))
                .collect(),
        };
        Self {
            seed,
            masters,
            clients,
            resources,
            ttl,
            node_timeout,
            net,
            durable,
            plans,
            faults,
            cluster: profile.cluster.map(|_| members),
            configs,
        }
    }
}

/// A client's configuration over a cluster of `members` masters followed by
/// `plan.extra` more.
fn draw_config(rng: &mut StdRng, plan: &ClusterPlan, members: usize) -> ClientConfig {
    let mut cluster: Vec<usize> = (0..members).collect();
    cluster.shuffle(rng);
    let outside: Vec<usize> = (members..members + plan.extra).collect();
    if !rng.random_bool(plan.mismatched) {
        return ClientConfig {
            masters: cluster,
            differs: Differs::Nothing,
        };
    }
    let differs = match rng.random_range(0..5) {
        0 if !outside.is_empty() => Differs::OtherMember,
        0 | 1 if !outside.is_empty() => Differs::MoreMasters,
        0..=2 => Differs::FewerMasters,
        3 => Differs::LongerTtlMax,
        _ => Differs::MoreDrift,
    };
    let masters = match differs {
        Differs::OtherMember => {
            let mut list = cluster;
            list[0] = outside[rng.random_range(0..outside.len())];
            list.shuffle(rng);
            list
        }
        Differs::MoreMasters => {
            let mut list: Vec<usize> = cluster.into_iter().chain(outside).collect();
            list.shuffle(rng);
            list
        }
        Differs::FewerMasters => {
            let keep = rng.random_range(1..members.max(2));
            cluster.into_iter().take(keep).collect()
        }
        _ => cluster,
    };
    ClientConfig { masters, differs }
}

/// Fault episodes that never overlap on one master, flattened into timed actions.
fn draw_faults(
    rng: &mut StdRng,
    f: &Faults,
    (masters, resources): (usize, usize),
    ttl: Duration,
) -> Vec<(Duration, Fault)> {
    let span = ttl.mul_f64(FAULT_SPAN_TTLS);
    let mut busy: Vec<Vec<(Duration, Duration)>> = vec![Vec::new(); masters];
    let mut actions = Vec::new();
    let mut episode = |rng: &mut StdRng, length: Duration, make: &dyn Fn(usize) -> Vec<Fault>| {
        let m = rng.random_range(0..masters);
        let start = span.mul_f64(rng.random_range(0.0..=1.0));
        let end = start + length;
        if busy[m].iter().any(|&(s, e)| start <= e && s <= end) {
            return;
        }
        busy[m].push((start, end));
        let mut steps = make(m).into_iter();
        if let Some(first) = steps.next() {
            actions.push((start, first));
        }
        actions.extend(steps.map(|s| (end, s)));
    };
    for _ in 0..rng.random_range(0..=f.crashes) {
        let down = ttl.mul_f64(rng.random_range(f.down.0..=f.down.1));
        episode(rng, down, &|m| vec![Fault::Crash(m), Fault::Restart(m)]);
    }
    for _ in 0..rng.random_range(0..=f.pauses) {
        let stopped = ttl.mul_f64(rng.random_range(0.02..=1.5));
        episode(rng, stopped, &|m| vec![Fault::Stop(m), Fault::Continue(m)]);
    }
    for _ in 0..rng.random_range(0..=f.flushes) {
        episode(rng, Duration::ZERO, &|m| vec![Fault::Flush(m)]);
    }
    for _ in 0..rng.random_range(0..=f.clock_jumps) {
        let jump = ttl.mul_f64(rng.random_range(0.25..=1.0));
        episode(rng, Duration::ZERO, &|m| vec![Fault::ClockJump(m, jump)]);
    }
    // Drawn only when asked for, so that the other profiles' schedules stay as they were.
    if f.force_unlocks > 0 {
        for _ in 0..rng.random_range(1..=f.force_unlocks) {
            let at = span.mul_f64(rng.random_range(0.0..=1.0));
            actions.push((at, Fault::ForceUnlock(rng.random_range(0..resources))));
        }
    }
    actions.sort_by_key(|&(at, _)| at);
    actions
}

/// Every master in turn crashes and restarts, `rounds` times over, from two TTLs in.
fn rolling_faults(
    rng: &mut StdRng,
    rolling: &Rolling,
    masters: usize,
    ttl: Duration,
) -> Vec<(Duration, Fault)> {
    let mut at = ttl * 2;
    let mut actions = Vec::new();
    for _ in 0..rolling.rounds {
        for m in 0..masters {
            actions.push((at, Fault::Crash(m)));
            at += ttl.mul_f64(rng.random_range(rolling.down.0..=rolling.down.1));
            actions.push((at, Fault::Restart(m)));
            at += ttl.mul_f64(rng.random_range(rolling.gap.0..=rolling.gap.1));
        }
    }
    actions
}

impl Schedule {
    /// Until when the clients of a rolling restart keep working: as long after the last
    /// restart as the shortest time between a restart and the next crash. Zero for the
    /// other schedules, whose clients run their cycles.
    pub(super) fn busy_until(&self, profile: &Profile) -> Duration {
        match (profile.faults.rolling, self.faults.last()) {
            (Some(rolling), Some((at, _))) => *at + self.ttl.mul_f64(rolling.gap.0),
            _ => Duration::ZERO,
        }
    }

    /// When each master restarted, in order.
    pub(super) fn restarts(&self) -> Vec<Duration> {
        self.faults
            .iter()
            .filter(|(_, f)| matches!(f, Fault::Restart(_)))
            .map(|(at, _)| *at)
            .collect()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let durable: Vec<String> = (0..self.masters)
            .filter(|m| self.durable[*m])
            .map(|m| format!("m{m}"))
            .collect();
        writeln!(
            f,
            "seed {}: {} masters (durable: {}), {} clients, {} resources, ttl {}, node timeout {}",
            self.seed,
            self.masters,
            if durable.is_empty() {
                "none".to_owned()
            } else {
                durable.join(" ")
            },
            self.clients,
            self.resources,
            ms(self.ttl),
            ms(self.node_timeout),
        )?;
        writeln!(
            f,
            "  network: {}..{}, slow {:.1}% up to {}, lost {:.1}%",
            ms(self.net.delay.0),
            ms(self.net.delay.1),
            self.net.slow_p * 100.0,
            ms(self.net.slow_max),
            self.net.drop_p * 100.0
        )?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(at, fault)| format!("{} {fault:?}", ms(*at)))
            .collect();
        write!(f, "  faults: {}", faults.join(", "))?;
        if let Some(members) = self.cluster {
            let clients: Vec<String> = self
                .configs
                .iter()
                .enumerate()
                .map(|(c, config)| format!("c{c} {:?} {:?}", config.masters, config.differs))
                .collect();
            write!(
                f,
                "\n  cluster: m0..m{}; clients: {}",
                members.saturating_sub(1),
                clients.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Counters over one or many schedules.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Stats {
    pub(super) schedules: u64,
    pub(super) acquired: u64,
    pub(super) failed: u64,
    pub(super) extended: u64,
    pub(super) extend_failed: u64,
    pub(super) client_pauses: u64,
    /// Re-entries inside critical sections, and those made after a pause past the deadline.
    pub(super) reentries: u64,
    pub(super) reentries_after_pause: u64,
    pub(super) crashes: u64,
    pub(super) empty_restarts: u64,
    pub(super) flushes: u64,
    pub(super) clock_jumps: u64,
    /// Force-unlocks that deleted a key of a then-valid lease on some master.
    pub(super) force_unlocks: u64,
    /// Lock keys of then-valid leases that a master lost (crash without data, flush):
    /// the situation restart quarantine exists for.
    pub(super) held_keys_lost: u64,
    pub(super) fenced_writes: u64,
    pub(super) fenced_rejections: u64,
    /// Schedules whose clients had not finished by the horizon.
    pub(super) unfinished: u64,
    pub(super) virtual_time: Duration,
    /// Queued waiting calls (`Waiting::Queued`), fair ones, those that gave up on a short
    /// budget, and those dropped mid-wait.
    pub(super) queued_calls: u64,
    pub(super) fair_calls: u64,
    pub(super) gave_up: u64,
    pub(super) dropped: u64,
    pub(super) killed: u64,
    /// Leases granted to a waiter that confirmed a hand-off (its waiter id held the key
    /// on a granting master), and dead waiters pruned from queues.
    pub(super) handed_leases: u64,
    pub(super) pruned: u64,
    /// Pairs of fair calls whose order the FIFO checker judged, and its violations
    /// excused (each reason counted on its own in the test's printout); free stretches the
    /// liveness checker judged, or skipped near a fault.
    pub(super) fifo_judged: u64,
    pub(super) fifo_excused: u64,
    pub(super) stall_checked: u64,
    pub(super) stall_faulted: u64,
}

impl AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.schedules += o.schedules;
        self.acquired += o.acquired;
        self.failed += o.failed;
        self.extended += o.extended;
        self.extend_failed += o.extend_failed;
        self.client_pauses += o.client_pauses;
        self.reentries += o.reentries;
        self.reentries_after_pause += o.reentries_after_pause;
        self.crashes += o.crashes;
        self.empty_restarts += o.empty_restarts;
        self.flushes += o.flushes;
        self.clock_jumps += o.clock_jumps;
        self.force_unlocks += o.force_unlocks;
        self.held_keys_lost += o.held_keys_lost;
        self.fenced_writes += o.fenced_writes;
        self.fenced_rejections += o.fenced_rejections;
        self.unfinished += o.unfinished;
        self.virtual_time += o.virtual_time;
        self.queued_calls += o.queued_calls;
        self.fair_calls += o.fair_calls;
        self.gave_up += o.gave_up;
        self.dropped += o.dropped;
        self.killed += o.killed;
        self.handed_leases += o.handed_leases;
        self.pruned += o.pruned;
        self.fifo_judged += o.fifo_judged;
        self.fifo_excused += o.fifo_excused;
        self.stall_checked += o.stall_checked;
        self.stall_faulted += o.stall_faulted;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} schedules, {:.0}s virtual: {} leases ({} acquires failed), {} extensions ({} failed), \
             {} client pauses past the deadline; {} crashes ({} restarted empty), {} flushes, \
             {} clock jumps, {} force-unlocks of valid leases, {} keys of valid leases lost; \
             {} fenced writes ({} stale ones refused); {} unfinished; {} re-entries ({} after \
             a pause)",
            self.schedules,
            self.virtual_time.as_secs_f64(),
            self.acquired,
            self.failed,
            self.extended,
            self.extend_failed,
            self.client_pauses,
            self.crashes,
            self.empty_restarts,
            self.flushes,
            self.clock_jumps,
            self.force_unlocks,
            self.held_keys_lost,
            self.fenced_writes,
            self.fenced_rejections,
            self.unfinished,
            self.reentries,
            self.reentries_after_pause,
        )?;
        if self.queued_calls > 0 {
            write!(
                f,
                "; {} queued calls ({} fair, {} gave up, {} dropped, {} killed), {} leases by hand-off, \
                 {} dead waiters pruned, FIFO: {} pairs of fair calls judged ({} violations \
                 excused), liveness: {} free stretches judged ({} skipped near a fault)",
                self.queued_calls,
                self.fair_calls,
                self.gave_up,
                self.dropped,
                self.killed,
                self.handed_leases,
                self.pruned,
                self.fifo_judged,
                self.fifo_excused,
                self.stall_checked,
                self.stall_faulted,
            )?;
        }
        Ok(())
    }
}

/// An acquire call that returned an error.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    /// The client that called.
    pub(super) client: usize,
    /// When the call returned.
    pub(super) at: Duration,
    pub(super) kind: ErrorKind,
    pub(super) retryable: bool,
}

/// The fenced register of one resource (the storage fencing protects).
#[derive(Debug, Default, Clone, Copy)]
struct Register {
    value: u64,
    newest: u64,
}

/// Everything recorded during one schedule.
#[derive(Debug, Default)]
struct Book {
    leases: Vec<LeaseRecord>,
    by_value: HashMap<Arc<str>, usize>,
    failures: Vec<Failure>,
    writes: Vec<FencedWrite>,
    registers: Vec<Register>,
    events: Vec<(Duration, String)>,
    stats: Stats,
    /// Clock jumps and data losses, for the checkers' exceptions (the clients' first
    /// contacts are added at the end).
    breaches: Breaches,
    /// Queued waiting calls, their waiter ids and registrations filled in at the end.
    waits: Vec<WaitRecord>,
}

/// What clients and the nemesis share during one schedule.
#[derive(Debug)]
struct World {
    clock: Clock,
    ttl: Duration,
    resources: usize,
    client_pause: f64,
    reentry: f64,
    /// The clients go on past their cycles until then (rolling restarts).
    busy_until: Duration,
    /// Clients lock several resources at once in some cycles (`Profile::many`).
    many: bool,
    waiting: Waiting,
    servers: Vec<Arc<SimServer>>,
    sends: Arc<SendLog>,
    /// Masters log their ops here; lease events then name their values as the log does.
    trace: Option<Arc<Trace>>,
    book: Mutex<Book>,
}

impl World {
    fn book(&self) -> MutexGuard<'_, Book> {
        // Every update is complete under the lock.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Duration {
        self.clock.at(Instant::now())
    }

    fn event(&self, text: String) {
        let at = self.now();
        self.book().events.push((at, text));
    }

    /// Records a new lease; returns its id.
    fn acquired(&self, client: usize, resource: usize, lease: &Lease) -> usize {
        let at = self.now();
        let start = self
            .sends
            .first_send(lease.value())
            .map_or(at, |i| self.clock.at(i));
        let deadline = self.clock.at(lease.deadline());
        let token = token_of(lease, resource);
        let mut book = self.book();
        let id = book.leases.len();
        book.leases.push(LeaseRecord::new(
            id,
            client,
            resource,
            (start, at),
            deadline,
            token,
        ));
        book.by_value.insert(lease.value().into(), id);
        book.stats.acquired += 1;
        let token = token.map_or(String::new(), |t| format!(" with token {t}"));
        let value = match &self.trace {
            Some(trace) => format!(" value {}", trace.name(lease.value())),
            None => String::new(),
        };
        book.events.push((
            at,
            format!(
                "c{client} acquired r{resource} as lease #{id}{token}{value} (attempt from {}), valid until {}",
                ms(start),
                ms(deadline)
            ),
        ));
        id
    }

    /// Client `c`'s latest waiting call returned lease `id` with `value`.
    fn granted_call(&self, c: usize, id: Option<usize>, value: &str) {
        let mut book = self.book();
        let Some(id) = id else {
            return;
        };
        let now = self.clock.at(Instant::now());
        if let Some(w) = book.waits.iter_mut().rev().find(|w| w.client == c)
            && w.lease.is_none()
            && w.end == now
        {
            w.lease = Some((id, value.into()));
        }
    }

    fn extended(&self, id: usize, deadline: Instant) {
        let at = self.now();
        let deadline = self.clock.at(deadline);
        let mut book = self.book();
        if let Some(lease) = book.leases.get_mut(id) {
            lease.deadlines.push((at, deadline));
        }
        book.stats.extended += 1;
        book.events
            .push((at, format!("lease #{id} extended until {}", ms(deadline))));
    }

    fn released(&self, id: usize) {
        let at = self.now();
        let mut book = self.book();
        if let Some(lease) = book.leases.get_mut(id) {
            lease.released = Some(at);
        }
        book.events.push((at, format!("lease #{id} released")));
    }

    /// Reads the register of `resource` with `token`; `None` when refused.
    fn fenced_read(&self, resource: usize, token: u64) -> Option<u64> {
        let mut book = self.book();
        let register = book.registers.get_mut(resource)?;
        if token < register.newest {
            book.stats.fenced_rejections += 1;
            return None;
        }
        register.newest = token;
        Some(register.value)
    }

    /// Writes `read + 1` to the register of `resource` with `token`, unless refused.
    fn fenced_write(&self, lease: usize, resource: usize, token: u64, read: u64) {
        let at = self.now();
        let mut book = self.book();
        let Some(register) = book.registers.get_mut(resource) else {
            return;
        };
        if token < register.newest {
            book.stats.fenced_rejections += 1;
            book.events.push((
                at,
                format!("lease #{lease} write with token {token} refused by the storage"),
            ));
            return;
        }
        let before = register.value;
        register.newest = token;
        register.value = read + 1;
        book.writes.push(FencedWrite {
            lease,
            resource,
            token,
            at,
            read,
            before,
        });
        book.stats.fenced_writes += 1;
    }

    /// `server` lost its data now.
    fn lost_data(&self, server: &SimServer) {
        let at = self.now();
        self.book().breaches.data_losses.push(DataLoss {
            master: server.index(),
            durable: server.durable(),
            at,
            nth: server.data_losses(),
        });
    }

    /// An operator's force-unlock of resource `resource` on every running master: the
    /// leases it breaks are recorded for the checker's exception.
    fn force_unlock(&self, resource: usize) {
        let key = format!("r{resource}");
        let mut reached = Vec::new();
        let mut deleted: Vec<(Arc<str>, Arc<str>)> = Vec::new();
        for server in &self.servers {
            if let Some(held) = server.force_unlock(&key) {
                reached.push(format!("m{}", server.index()));
                deleted.extend(held.map(|v| (Arc::from(key.as_str()), v)));
            }
        }
        deleted.sort();
        deleted.dedup();
        let broken = self.count_valid(&deleted);
        let at = self.now();
        let mut book = self.book();
        book.stats.force_unlocks += broken.min(1);
        book.breaches.force_unlocks.push((at, resource));
        drop(book);
        self.event(format!(
            "operator force-unlocked r{resource} on {} ({broken} valid lease(s) broken)",
            reached.join(" ")
        ));
    }

    /// Counts the lock keys in `held` that belong to leases valid now.
    fn count_valid(&self, held: &[(Arc<str>, Arc<str>)]) -> u64 {
        let at = self.now();
        let book = self.book();
        held.iter()
            .filter_map(|(_, value)| book.by_value.get(value))
            .filter_map(|id| book.leases.get(*id))
            .filter(|l| l.validity().iter().any(|&(s, e)| s <= at && at < e))
            .count() as u64
    }
}

/// One schedule's result.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) schedule: Schedule,
    pub(super) leases: Vec<LeaseRecord>,
    /// Every acquire call that failed.
    pub(super) failures: Vec<Failure>,
    pub(super) events: Vec<(Duration, String)>,
    pub(super) stats: Stats,
    pub(super) violations: Vec<Violation>,
    /// The clock jumps and data losses of the schedule, and when each client first
    /// connected to each master.
    pub(super) breaches: Breaches,
    /// The queued waiting calls (`Waiting::Queued`).
    pub(super) waits: Vec<WaitRecord>,
    /// What the FIFO and liveness checkers found, each FIFO violation with its excuse if
    /// one explains it (a stall never has one).
    pub(super) queue_violations: Vec<(QueueViolation, Option<FifoExcuse>)>,
    /// The registrations pruned from a queue while their call still ran, with no fault to
    /// explain it (see `check::pruned_while_waiting`): (call, master, when).
    pub(super) pruned_waiting: Vec<(usize, usize, Duration)>,
}

impl Outcome {
    /// The schedule, the violations, the leases involved and the events around them.
    pub(super) fn report(&self, profile: &Profile, shown: &[&Violation]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "profile {}: {}", profile.name, self.schedule);
        for v in shown {
            let _ = writeln!(out, "VIOLATION {v}");
        }
        let mut involved: Vec<usize> = shown.iter().flat_map(|v| v.leases()).collect();
        involved.sort_unstable();
        involved.dedup();
        let mut from = Duration::MAX;
        let mut to = Duration::ZERO;
        for lease in involved.iter().filter_map(|id| self.leases.get(*id)) {
            let _ = writeln!(
                out,
                "  lease #{} c{} r{}: attempt {}, acquired {}, token {:?}, deadlines {:?}, released {:?}, valid {:?}",
                lease.id,
                lease.client,
                lease.resource,
                ms(lease.attempt_start),
                ms(lease.acquired),
                lease.token,
                lease
                    .deadlines
                    .iter()
                    .map(|&(a, d)| format!("from {} until {}", ms(a), ms(d)))
                    .collect::<Vec<_>>(),
                lease.released.map(ms),
                lease
                    .validity()
                    .iter()
                    .map(|&(s, e)| format!("[{}, {})", ms(s), ms(e)))
                    .collect::<Vec<_>>(),
            );
            from = from.min(lease.attempt_start);
            to = to.max(
                lease
                    .released
                    .unwrap_or(lease.last_deadline())
                    .max(lease.last_deadline()),
            );
        }
        let from = from.saturating_sub(self.schedule.ttl);
        let to = to.saturating_add(self.schedule.ttl / 4);
        self.write_events(&mut out, (from, to), 80);
        out
    }

    /// The events from `from` to `to`, at most `max_lines` of them unless a trace is asked
    /// for on purpose (then all of them).
    fn write_events(&self, out: &mut String, (from, to): (Duration, Duration), max_lines: usize) {
        let max_lines = if std::env::var_os(TRACE_ENV).is_some() {
            usize::MAX
        } else {
            max_lines
        };
        let window: Vec<&(Duration, String)> = self
            .events
            .iter()
            .filter(|(at, _)| from <= *at && *at <= to)
            .collect();
        let _ = writeln!(
            out,
            "  events from {} to {} ({} of {}):",
            ms(from),
            ms(to),
            window.len().min(max_lines),
            window.len()
        );
        for (at, text) in window.iter().take(max_lines) {
            let _ = writeln!(out, "    {:>12} {text}", ms(*at));
        }
    }
}

impl Outcome {
    /// The schedule, a violation of the queues, the calls and leases involved, and the
    /// events around them.
    pub(super) fn queue_report(&self, profile: &Profile, v: &QueueViolation) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "profile {}: {}", profile.name, self.schedule);
        let _ = writeln!(out, "VIOLATION {v}");
        let (calls, around): (Vec<usize>, (Duration, Duration)) = match v {
            QueueViolation::Fifo { earlier, later, .. } => {
                (vec![*earlier, *later], (Duration::MAX, Duration::ZERO))
            }
            QueueViolation::Stall {
                call,
                free_from,
                until,
                ..
            } => (vec![*call], (*free_from, *until)),
        };
        let (mut from, mut to) = around;
        for w in calls.iter().filter_map(|id| self.waits.get(*id)) {
            let _ = writeln!(out, "  call {w:?}");
            from = from.min(w.start);
            to = to.max(w.end);
        }
        let from = from.saturating_sub(self.schedule.ttl);
        self.write_events(&mut out, (from, to), 120);
        out
    }
}

/// Runs the schedule of `seed` in `profile` on a fresh paused-clock runtime and checks it;
/// the masters log their ops into the events when `REDQUORUM_SIM_TRACE` is set.
pub(super) fn run(profile: &Profile, seed: u64) -> Outcome {
    run_traced(profile, seed, std::env::var_os(TRACE_ENV).is_some())
}

/// [`run`], with the masters' ops in the events when `trace` is set.
pub(super) fn run_traced(profile: &Profile, seed: u64, trace: bool) -> Outcome {
    let schedule = Schedule::draw(profile, seed);
    // A runtime per schedule: nothing leaks from one schedule into the next, and dropping
    // it ends every task still running (stragglers, background releases).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // Every task runs on this thread: the library's draws come from the schedule's seed.
    let seeded = crate::core::seeded::install(rng(seed, Stream::Library).random());
    let (book, queues) = runtime.block_on(drive(profile, &schedule, trace));
    drop(runtime);
    drop(seeded);
    let violations = check::check(&book.leases, &book.writes);
    let mut stats = book.stats;
    stats.schedules = 1;
    let mut queue_violations = Vec::new();
    let mut pruned_waiting = Vec::new();
    if let Waiting::Queued(_) = profile.waiting {
        let outages = outages(&schedule.faults);
        let trouble = check::Trouble {
            calls: &queues.trouble,
            outages: &outages,
            node_timeout: schedule.node_timeout,
        };
        let fifo = check::fifo(
            &book.waits,
            &book.leases,
            &queues.grants,
            &book.breaches.data_losses,
            &trouble,
        );
        queue_violations = fifo.found;
        stats.fifo_judged = fifo.judged;
        stats.fifo_excused = queue_violations.iter().filter(|v| v.1.is_some()).count() as u64;
        let (stalls, count) = check::stalls(
            &book.waits,
            &book.leases,
            &queues.faults,
            (queues.bound, schedule.ttl * 2),
        );
        let StallCount { checked, faulted } = count;
        stats.stall_checked = checked;
        stats.stall_faulted = faulted;
        queue_violations.extend(stalls.into_iter().map(|v| (v, None)));
        stats.handed_leases = book
            .leases
            .iter()
            .filter(|l| queues.handed.contains(&l.id))
            .count() as u64;
        stats.pruned = queues.pruned;
        pruned_waiting = check::pruned_while_waiting(
            &book.waits,
            &queues.prunes,
            &book.breaches.data_losses,
            &trouble,
        );
    }
    Outcome {
        schedule,
        leases: book.leases,
        failures: book.failures,
        events: book.events,
        stats,
        violations,
        breaches: book.breaches,
        waits: book.waits,
        queue_violations,
        pruned_waiting,
    }
}

/// When each master was out, from `faults`: stopped until it continued, down until it
/// restarted (or for good), or its clock jumped (an instant): (master, from, to).
fn outages(faults: &[(Duration, Fault)]) -> Vec<(usize, Duration, Duration)> {
    let mut out = Vec::new();
    for (i, &(at, fault)) in faults.iter().enumerate() {
        let back = |m: usize, ends: fn(Fault) -> bool| {
            faults[i..]
                .iter()
                .find(|&&(_, f)| ends(f) && fault_master(f) == Some(m))
                .map_or(Duration::MAX, |&(end, _)| end)
        };
        match fault {
            Fault::Crash(m) => out.push((m, at, back(m, |f| matches!(f, Fault::Restart(_))))),
            Fault::Stop(m) => out.push((m, at, back(m, |f| matches!(f, Fault::Continue(_))))),
            Fault::ClockJump(m, _) => out.push((m, at, at)),
            _ => {}
        }
    }
    out
}

/// What the masters and the network recorded of the queues, for their checkers.
#[derive(Debug, Default)]
struct QueueHistory {
    grants: Vec<super::server::QueuedGrant>,
    pruned: u64,
    /// Each dead waiter pruned from a queue, and the master that pruned it.
    prunes: Vec<(usize, super::server::Pruned)>,
    /// The leases granted by a confirm of a hand-off on some master.
    handed: Vec<usize>,
    /// When a fault struck, and the resource it touched (`None`: any): the nemesis's
    /// actions, lost or slow messages.
    faults: Vec<(Duration, Option<usize>)>,
    /// The liveness checker's bound.
    bound: Duration,
    /// Each waiter's troubled calls (lost, late, failed): its id, the master, and when
    /// sent.
    trouble: Vec<(Arc<str>, usize, Duration)>,
}

/// The waiter TTL of a client with the schedule's settings (the library's default).
fn waiter_ttl(schedule: &Schedule) -> Duration {
    Builder::new()
        .masters((0..schedule.masters).map(|m| format!("redis://127.0.0.1:{}", 7001 + m)))
        .ttl(schedule.ttl)
        .timeouts(crate::Timeouts::new().node(schedule.node_timeout))
        .into_config()
        .map_or(schedule.ttl / 10, |c| c.waiter_ttl)
}

/// Fills in each waiting call's waiter id and registration time from what its client
/// heard of its registrations (`seen`, in order): the waiter id of the client's
/// registrations during the call, and when the answers completed a quorum of
/// registrations (fair: of the strict writes of one round, which issued its ticket).
fn registrations(
    waits: &mut [WaitRecord],
    (sent, seen): (&[Registering], &[EnqueueSeen]),
    clock: &Clock,
    quorum: usize,
) {
    for w in waits.iter_mut() {
        // The first registration the call sent names its waiter id (answers to an earlier
        // call's registrations may still arrive, in the background of its rounds).
        let during = |(client, _, at, _): &&Registering| {
            let at = clock.at(*at);
            *client == w.client && w.start <= at && at <= w.end
        };
        w.waiter = sent
            .iter()
            .find(during)
            .map(|(_, waiter, _, _)| Arc::clone(waiter));
        let Some(waiter) = w.waiter.clone() else {
            continue;
        };
        // The client stops writing its ticket back once a round issued it: only its last
        // strict round can have (an earlier one that a quorum answered "written" fell
        // short in the client's count, by an abstaining master).
        let last_strict = sent
            .iter()
            .filter(during)
            .filter(|(_, x, _, strict)| *strict && *x == waiter)
            .map(|(_, _, at, _)| *at)
            .max();
        let mine: Vec<&EnqueueSeen> = seen
            .iter()
            .filter(|e| e.client == w.client && e.waiter == waiter)
            .filter(|e| {
                let at = clock.at(e.at);
                w.start <= at && at <= w.end
            })
            .collect();
        // A fair call's ticket is issued by its last round of strict writes, if a quorum
        // took it (a round that fell short is written again, and conflicts with itself);
        // a registration, by answers from a quorum in any rounds.
        let mut masters: HashMap<(u64, Option<Instant>), Vec<usize>> = HashMap::new();
        for e in mine {
            if !e.written || (w.fair && (!e.strict || Some(e.sent) != last_strict)) {
                continue;
            }
            let key = if w.fair {
                (e.score, Some(e.sent))
            } else {
                (0, None)
            };
            let list = masters.entry(key).or_default();
            if !list.contains(&e.master) {
                list.push(e.master);
            }
            if list.len() == quorum {
                let at = clock.at(e.at);
                w.registered = Some(w.registered.map_or(at, |r: Duration| r.min(at)));
            }
        }
    }
}

/// A simulated master per schedule master, and the clients over them.
async fn drive(profile: &Profile, schedule: &Schedule, trace: bool) -> (Book, QueueHistory) {
    let clock = Clock::start();
    let trace = trace.then(|| Arc::new(Trace::new(clock)));
    let servers: Vec<Arc<SimServer>> = (0..schedule.masters)
        .map(|m| {
            let server = SimServer::new(m, schedule.durable[m], clock);
            Arc::new(match &trace {
                Some(trace) => server.traced(Arc::clone(trace)),
                None => server,
            })
        })
        .collect();
    let world = Arc::new(World {
        clock,
        ttl: schedule.ttl,
        resources: schedule.resources,
        client_pause: profile.faults.client_pause,
        reentry: profile.faults.reentry,
        busy_until: schedule.busy_until(profile),
        many: profile.many,
        waiting: profile.waiting,
        servers,
        sends: Arc::new(SendLog::default()),
        trace: trace.clone(),
        book: Mutex::new(Book {
            registers: vec![Register::default(); schedule.resources],
            ..Book::default()
        }),
    });
    if let Waiting::Queued(Queued { lapse: true, .. }) = profile.waiting {
        for server in &world.servers {
            server.plant_waiters_lapse();
        }
    }
    if let Some(members) = schedule.cluster {
        bootstrap(profile, schedule, &world.servers[..members]).await;
    }
    let mut clients = Vec::with_capacity(schedule.clients);
    for (c, plan) in schedule.plans.iter().enumerate() {
        // Queued waiters wait as long as their call's budget says.
        let attempts = match profile.waiting {
            Waiting::Queued(_) => 1_000,
            _ => plan.attempts,
        };
        let spec = ClientSpec {
            ttl: schedule.ttl,
            node_timeout: schedule.node_timeout,
            attempts,
            retry_delay: plan.retry_delay,
            quarantine: profile.quarantine,
            fencing: profile.fencing,
            mutant: profile.mutant,
            net: schedule.net,
        };
        let config = &schedule.configs[c];
        let listed: Vec<Arc<SimServer>> = config
            .masters
            .iter()
            .map(|&m| Arc::clone(&world.servers[m]))
            .collect();
        let links = |i: usize| rng(schedule.seed, Stream::Link(c, config.masters[i]));
        let ttl = schedule.ttl;
        let herd = profile.waiting == Waiting::Herd;
        let adjust = |builder: Builder| {
            let builder = if herd {
                builder.waiting(crate::Waiting::new().handoff(false))
            } else {
                builder
            };
            match config.differs {
                Differs::LongerTtlMax => builder.ttl_max(ttl * 2),
                Differs::MoreDrift => builder.clock(crate::Clock::new().drift_factor(0.02)),
                _ => builder,
            }
        };
        let (lock, gates) = build_client_with(&spec, &listed, links, &world.sends, adjust);
        // The send log numbers the clients in the order they are built: as here.
        assert_eq!(world.sends.first_contacts().len(), c + 1);
        let task = client_task(
            Arc::clone(&world),
            (lock, gates),
            c,
            *plan,
            rng(schedule.seed, Stream::Client(c)),
        );
        clients.push(tokio::spawn(task));
    }
    let nemesis = tokio::spawn(nemesis(Arc::clone(&world), schedule.faults.clone()));
    let all = futures::future::join_all(clients);
    let finished = match tokio::time::timeout(HORIZON, all).await {
        Ok(joined) => {
            for result in joined {
                if let Err(e) = result {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
            true
        }
        Err(_) => false,
    };
    nemesis.abort();
    let end = world.now();
    let contacts = world.sends.first_contacts();
    let mut book = std::mem::take(&mut *world.book());
    book.breaches.first_contact = contacts
        .iter()
        .map(|c| {
            c.iter()
                .map(|served| {
                    served.map(|s| Contact {
                        at: clock.at(s.at),
                        data_losses: s.data_losses,
                    })
                })
                .collect()
        })
        .collect();
    if let Some(trace) = trace {
        // Stable: at one instant, the recorded events stay before the ops.
        book.events.extend(trace.take());
        book.events.sort_by_key(|(at, _)| *at);
    }
    book.stats.virtual_time = end;
    if !finished {
        book.stats.unfinished = 1;
    }
    let mut queues = QueueHistory::default();
    if let Waiting::Queued(_) = profile.waiting {
        for server in &world.servers {
            let (grants, prunes) = server.journal();
            queues.grants.extend(grants);
            queues.pruned += prunes.len() as u64;
            let m = server.index();
            queues.prunes.extend(prunes.into_iter().map(|p| (m, p)));
        }
        for g in queues.grants.iter().filter(|g| !g.waiter.is_empty()) {
            if let Some(id) = book.by_value.get(&g.value)
                && !queues.handed.contains(id)
            {
                queues.handed.push(*id);
            }
        }
        queues.faults = schedule.faults.iter().map(|(at, _)| (*at, None)).collect();
        queues
            .faults
            .extend(world.sends.anomalies().iter().map(|(at, key)| {
                let resource = key
                    .as_deref()
                    .and_then(|k| k.strip_prefix('r')?.parse().ok());
                (clock.at(*at), resource)
            }));
        for (waiter, master, at, _confirm) in world.sends.waiter_trouble() {
            let at = clock.at(at);
            queues.trouble.push((waiter, master, at));
        }
        let wt = waiter_ttl(schedule);
        queues.bound = schedule.ttl + wt + wt / 3 + schedule.node_timeout * 2;
        let quorum = schedule.masters / 2 + 1;
        let (sent, seen) = (world.sends.registering(), world.sends.enqueued());
        registrations(&mut book.waits, (&sent, &seen), &clock, quorum);
    }
    (book, queues)
}

/// Writes the cluster record on `members` with `init_cluster`, before anything else runs,
/// as an operator does on new masters: a client with the cluster's configuration over a
/// network that loses nothing.
async fn bootstrap(profile: &Profile, schedule: &Schedule, members: &[Arc<SimServer>]) {
    let spec = ClientSpec {
        ttl: schedule.ttl,
        node_timeout: schedule.node_timeout,
        attempts: 1,
        retry_delay: schedule.ttl,
        quarantine: profile.quarantine,
        fencing: profile.fencing,
        mutant: None,
        net: NetParams {
            slow_p: 0.0,
            drop_p: 0.0,
            ..schedule.net
        },
    };
    let links = |m| rng(schedule.seed, Stream::Link(usize::MAX, m));
    let (admin, _) = build_client(&spec, members, links, &Arc::new(SendLog::default()));
    match admin.init_cluster().await {
        Ok(init) if init.outcome == crate::InitOutcome::Bootstrapped => {}
        other => panic!("the cluster was not bootstrapped: {other:?}\n{schedule}"),
    }
}

/// How one client is configured.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClientSpec {
    pub(super) ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) attempts: u32,
    pub(super) retry_delay: Duration,
    pub(super) quarantine: bool,
    pub(super) fencing: bool,
    pub(super) mutant: Option<Mutant>,
    pub(super) net: NetParams,
}

/// A real client over `servers`, configured by the real builder; `link` seeds the
/// connection to each master. Also returns the gate of each connection (open).
pub(super) fn build_client(
    spec: &ClientSpec,
    servers: &[Arc<SimServer>],
    link: impl FnMut(usize) -> StdRng,
    sends: &Arc<SendLog>,
) -> (Redlock, Vec<Arc<Gate>>) {
    build_client_with(spec, servers, link, sends, |b| b)
}

/// [`build_client`], with further settings that `adjust` makes on the builder.
pub(super) fn build_client_with(
    spec: &ClientSpec,
    servers: &[Arc<SimServer>],
    mut link: impl FnMut(usize) -> StdRng,
    sends: &Arc<SendLog>,
    adjust: impl FnOnce(Builder) -> Builder,
) -> (Redlock, Vec<Arc<Gate>>) {
    // Loopback addresses that are never contacted: the builder only validates them.
    let urls = (0..servers.len()).map(|m| format!("redis://127.0.0.1:{}", 7001 + m));
    let builder = Builder::new()
        .masters(urls)
        .ttl(spec.ttl)
        .timeouts(
            crate::Timeouts::new()
                .node(spec.node_timeout)
                .connect(CONNECT_TIMEOUT),
        )
        .retry(
            crate::Retry::new()
                .attempts(spec.attempts)
                .delay(spec.retry_delay)
                // The library's jitter draws from the thread's RNG; the schedule must not.
                .jitter(Duration::ZERO),
        )
        .waiting(crate::Waiting::new().notifications(false))
        .quarantine(spec.quarantine)
        .fencing(spec.fencing);
    let config = adjust(builder)
        .into_config()
        .expect("the simulation's settings are valid");
    // The client's id is its view's: the bug is planted under it before anything runs.
    let view = Redlock::view_of(&config);
    #[cfg(redquorum_mutants)]
    if let Some(mutant) = spec.mutant {
        crate::mutants::plant(view.client(), mutant);
    }
    #[cfg(not(redquorum_mutants))]
    assert!(
        spec.mutant.is_none(),
        "planting a mutant needs `--cfg redquorum_mutants`"
    );
    // Each connection enforces the per-master timeout, as `RedisMaster` does with the one
    // `Redlock::from_config` gives it: an hour for the mutant without one.
    let node_timeout = match spec.mutant {
        Some(Mutant::NoNodeTimeout) => NO_NODE_TIMEOUT,
        _ => spec.node_timeout,
    };
    #[cfg(redquorum_mutants)]
    let bugs = ScriptBugs::of(&crate::mutants::planted(view.client()));
    #[cfg(not(redquorum_mutants))]
    let bugs = ScriptBugs::default();
    let params = ConnParams {
        net: spec.net,
        node_timeout,
        connect_timeout: CONNECT_TIMEOUT,
        read_vitals: spec.quarantine,
        bugs,
    };
    let gates: Vec<Arc<Gate>> = servers.iter().map(|_| Arc::default()).collect();
    // The send log keeps first contacts by the masters' own numbers, which a client over
    // some of them does not list in order.
    let numbered = servers.iter().map(|s| s.index() + 1).max().unwrap_or(0);
    let client = sends.add_client(numbered);
    let masters: Vec<Arc<dyn Master>> = servers
        .iter()
        .zip(&gates)
        .enumerate()
        .map(|(m, (server, gate))| {
            Arc::new(SimMaster::new(
                (client, Arc::clone(server)),
                (m, Arc::clone(&view)),
                params,
                link(m),
                Arc::clone(sends),
                Arc::clone(gate),
            )) as Arc<dyn Master>
        })
        .collect();
    let client = Redlock::with_masters(config, &view, masters, Notifier::disabled());
    (client, gates)
}

/// One client: acquire, a critical section, release; `plan.cycles` times.
async fn client_task(
    world: Arc<World>,
    (lock, gates): (Redlock, Vec<Arc<Gate>>),
    c: usize,
    plan: ClientPlan,
    mut rng: StdRng,
) {
    let ttl = world.ttl;
    let mut cycle = 0;
    while cycle < plan.cycles || world.now() < world.busy_until {
        cycle += 1;
        tokio::time::sleep(ttl.mul_f64(rng.random_range(0.0..=0.5))).await;
        // With several resources at once: {r0}, {r1}, {r0, r1} or {r1, r0}.
        let listed: Vec<usize> = match world.many {
            false => vec![rng.random_range(0..world.resources)],
            true => match rng.random_range(0..4) {
                0 => vec![0],
                1 => vec![1],
                2 => vec![0, 1],
                _ => vec![1, 0],
            },
        };
        let names: Vec<String> = listed.iter().map(|r| format!("r{r}")).collect();
        let name = names.join(",");
        let acquired = match (names.as_slice(), world.waiting) {
            ([one], Waiting::Queued(q)) if !rng.random_bool(q.try_only) => {
                match queued_call(&world, (&lock, &gates), c, (listed[0], one), q, &mut rng).await {
                    Ended::Returned(acquired) => acquired,
                    Ended::Dropped => continue,
                    Ended::Killed => return,
                }
            }
            ([one], _) if rng.random_bool(0.25) => lock.try_acquire(one).await,
            ([one], _) => lock.acquire(one).await,
            (many, _) => {
                let many: Vec<&str> = many.iter().map(String::as_str).collect();
                lock.acquire_many(&many).await
            }
        };
        let lease = match acquired {
            Ok(lease) => lease,
            Err(e) => {
                let failure = Failure {
                    client: c,
                    at: world.now(),
                    kind: e.kind(),
                    retryable: e.is_retryable(),
                };
                let mut book = world.book();
                book.stats.failed += 1;
                book.failures.push(failure);
                drop(book);
                world.event(format!("c{c} could not acquire {name}: {:?}", e.kind()));
                continue;
            }
        };
        // One record per resource the lease holds: the checkers judge each resource alone.
        let mut held: Vec<(usize, usize)> = Vec::with_capacity(listed.len());
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        for resource in sorted {
            held.push((world.acquired(c, resource, &lease), resource));
        }
        if let Waiting::Queued(_) = world.waiting {
            world.granted_call(c, held.first().map(|(id, _)| *id), lease.value());
        }
        critical_section(&world, &mut rng, c, &held, &lease).await;
        for (id, _) in &held {
            world.released(*id);
        }
        let _ = lease.release().await;
    }
}

/// How a queued call ended.
enum Ended {
    Returned(Result<Lease, crate::Error>),
    /// Its future was dropped mid-wait.
    Dropped,
    /// Its client was killed mid-wait: it sends nothing more.
    Killed,
}

/// One queued waiting call of client `c` for resource `resource` (named `name`): fair or
/// not, with a long or a short wait budget, maybe dropped mid-wait, or its client killed
/// mid-wait (every connection of the client cut at the masters' end: nothing it sends
/// from then on arrives, its background dequeue included). Recorded as a [`WaitRecord`].
async fn queued_call(
    world: &World,
    (lock, gates): (&Redlock, &[Arc<Gate>]),
    c: usize,
    (resource, name): (usize, &str),
    q: Queued,
    rng: &mut StdRng,
) -> Ended {
    let fair = rng.random_bool(q.fair);
    let short = rng.random_bool(q.give_up);
    let budget = if short {
        world.ttl.mul_f64(rng.random_range(0.1..=1.0))
    } else {
        world.ttl.mul_f64(q.budget)
    };
    let killed = rng.random_bool(q.killed);
    let drop_after = (killed || rng.random_bool(q.dropped))
        .then(|| world.ttl.mul_f64(rng.random_range(0.05..=2.0)));
    let options = AcquireOptions::new().fair(fair).wait_timeout(budget);
    let start = world.now();
    let id = {
        let mut book = world.book();
        let id = book.waits.len();
        book.waits.push(WaitRecord {
            id,
            client: c,
            resource,
            fair,
            start,
            end: start,
            lease: None,
            waiter: None,
            registered: None,
        });
        book.stats.queued_calls += 1;
        book.stats.fair_calls += u64::from(fair);
        id
    };
    let mut call = Box::pin(lock.acquire_with(name, &options));
    let out = match drop_after {
        Some(after) => tokio::select! {
            biased;
            out = &mut call => Some(out),
            () = tokio::time::sleep(after) => None,
        },
        None => Some((&mut call).await),
    };
    // Killed before its call returned: cut first, so that nothing the drop sends arrives.
    let killed = killed && out.is_none();
    if killed {
        for gate in gates {
            gate.close();
        }
    }
    drop(call);
    let end = world.now();
    let mut book = world.book();
    if let Some(w) = book.waits.get_mut(id) {
        w.end = end;
    }
    match &out {
        None if killed => book.stats.killed += 1,
        None => book.stats.dropped += 1,
        // Its budget ran out: held (`WaitTimeout`) or, under faults, the kind of the
        // masters' last failure (docs/design.md §9).
        Some(Err(e)) if e.is_retryable() && short => book.stats.gave_up += 1,
        _ => {}
    }
    drop(book);
    let fair = if fair { "fair " } else { "" };
    match out {
        Some(out) => Ended::Returned(out),
        None if killed => {
            world.event(format!(
                "c{c} killed while in its {fair}wait for {name} (call #{id})"
            ));
            Ended::Killed
        }
        None => {
            world.event(format!(
                "c{c} dropped its {fair}wait for {name} (call #{id})"
            ));
            Ended::Dropped
        }
    }
}

/// Reads the fenced register, works (or pauses past the deadline), maybe extends, and
/// writes the register back.
async fn critical_section(
    world: &World,
    rng: &mut StdRng,
    c: usize,
    held: &[(usize, usize)],
    lease: &Lease,
) {
    let id = held.first().map_or(0, |(id, _)| *id);
    let ids = held
        .iter()
        .map(|(id, _)| format!("#{id}"))
        .collect::<Vec<_>>()
        .join(", ");
    // Each resource's register, read and written with that resource's token.
    let reads: Vec<(usize, usize, Option<u64>, Option<u64>)> = held
        .iter()
        .map(|&(id, resource)| {
            let token = token_of(lease, resource);
            let read = token.and_then(|t| world.fenced_read(resource, t));
            (id, resource, token, read)
        })
        .collect();
    let paused = rng.random_bool(world.client_pause);
    if paused {
        let overrun = world.ttl.mul_f64(rng.random_range(0.01..=1.0));
        world.book().stats.client_pauses += 1;
        world.event(format!(
            "c{c} pauses inside lease {ids} until {} past its deadline",
            ms(overrun)
        ));
        tokio::time::sleep(lease.remaining() + overrun).await;
    } else {
        tokio::time::sleep(lease.remaining().mul_f64(rng.random_range(0.0..=0.6))).await;
        if rng.random_bool(0.3) {
            match lease.extend().await {
                Ok(report) => {
                    for (id, _) in held {
                        world.extended(*id, report.deadline());
                    }
                }
                Err(e) => {
                    world.book().stats.extend_failed += 1;
                    world.event(format!("lease #{id} not extended: {:?}", e.kind()));
                }
            }
            tokio::time::sleep(lease.remaining().mul_f64(rng.random_range(0.0..=0.6))).await;
        }
    }
    if world.reentry > 0.0 && rng.random_bool(world.reentry) {
        reenter(world, rng, c, held, lease, paused).await;
    }
    for (id, resource, token, read) in reads {
        if let (Some(token), Some(read)) = (token, read) {
            world.fenced_write(id, resource, token, read);
        }
    }
}

/// Re-enters `lease` inside its critical section, works a little under the re-entry, and
/// if the re-entry says the lease is still valid, works on under it for a while: a
/// deadline it moved is the validity the holder then relies on. Re-entry never asks a
/// master, so without a planted bug it moves nothing.
async fn reenter(
    world: &World,
    rng: &mut StdRng,
    c: usize,
    held: &[(usize, usize)],
    lease: &Lease,
    paused: bool,
) {
    let before = lease.deadline();
    let child = lease.reenter();
    {
        let mut book = world.book();
        book.stats.reentries += 1;
        if paused {
            book.stats.reentries_after_pause += 1;
        }
    }
    let id = held.first().map_or(0, |(id, _)| *id);
    world.event(format!("c{c} re-enters lease #{id}"));
    tokio::time::sleep(world.ttl / 10).await;
    if child.is_lost() {
        return;
    }
    if child.deadline() > before {
        for (id, _) in held {
            world.extended(*id, child.deadline());
        }
    }
    tokio::time::sleep(child.remaining().mul_f64(rng.random_range(0.0..=0.6))).await;
    child.release();
}

/// The fencing token `lease` holds for resource `r{resource}`.
fn token_of(lease: &Lease, resource: usize) -> Option<u64> {
    let name = format!("r{resource}");
    match lease.resources().len() {
        1 => lease.fencing_token(),
        _ => lease
            .fencing_tokens()
            .find(|(r, _)| *r == name)
            .map(|(_, t)| t),
    }
    .map(|t| t.get())
}

/// Applies the schedule's faults at their times.
async fn nemesis(world: Arc<World>, faults: Vec<(Duration, Fault)>) {
    for (at, fault) in faults {
        tokio::time::sleep_until(world.clock.origin() + at).await;
        let Some(server) = world.servers.get(fault_master(fault).unwrap_or(0)) else {
            continue;
        };
        let m = server.index();
        match fault {
            Fault::Crash(_) => {
                let held = server.crash();
                let lost = if server.durable() {
                    0
                } else {
                    world.count_valid(&held)
                };
                world.book().stats.crashes += 1;
                world.book().stats.held_keys_lost += lost;
                world.event(format!(
                    "m{m} crashed with {} live lock keys ({lost} of valid leases, lost)",
                    held.len()
                ));
            }
            Fault::Restart(_) => match server.restart() {
                Some(true) => world.event(format!("m{m} restarted with its data")),
                Some(false) => {
                    world.lost_data(server);
                    world.book().stats.empty_restarts += 1;
                    world.event(format!("m{m} restarted empty"));
                }
                None => {}
            },
            Fault::Stop(_) => {
                if server.pause(true) {
                    world.event(format!("m{m} stopped"));
                }
            }
            Fault::Continue(_) => {
                if server.pause(false) {
                    world.event(format!("m{m} continued"));
                }
            }
            Fault::Flush(_) => {
                let Some(held) = server.flush() else {
                    continue;
                };
                let lost = world.count_valid(&held);
                world.lost_data(server);
                world.book().stats.flushes += 1;
                world.book().stats.held_keys_lost += lost;
                world.event(format!(
                    "m{m} flushed ({} live lock keys, {lost} of valid leases)",
                    held.len()
                ));
            }
            Fault::ForceUnlock(resource) => world.force_unlock(resource),
            Fault::ClockJump(_, by) => {
                server.jump_clock(i64::try_from(by.as_micros()).unwrap_or(i64::MAX));
                let at = world.now();
                let mut book = world.book();
                book.stats.clock_jumps += 1;
                book.breaches.clock_jumps.push(at);
                drop(book);
                world.event(format!("m{m} clock jumped forward by {}", ms(by)));
            }
        }
    }
}

/// The master a fault hits; `None` for one that hits every master.
fn fault_master(fault: Fault) -> Option<usize> {
    match fault {
        Fault::Crash(m)
        | Fault::Restart(m)
        | Fault::Stop(m)
        | Fault::Continue(m)
        | Fault::Flush(m)
        | Fault::ClockJump(m, _) => Some(m),
        Fault::ForceUnlock(_) => None,
    }
}
