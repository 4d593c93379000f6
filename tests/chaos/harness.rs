//! The scenario harness: masters (optionally behind fault proxies), an independent checker
//! store, contending in-process workers, phases, seeded schedules, checks and the report.

use redquorum::{Retry, Timeouts};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redquorum::{Builder, Lease, Mutant, Redlock};
use redquorum_testkit::{Cluster, Persistence, Proxy, Server, ServerOptions};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::checker;
use crate::event::Op;
use crate::history::{History, Recorder, now_ns};

/// The mutant hunt a scenario runs in: the mutant hunted, and whether it is planted in
/// this run (the hunts of wall-clock checkers also run their scenario unplanted).
#[derive(Debug, Clone, Copy)]
pub struct Hunted {
    pub mutant: Mutant,
    pub planted: bool,
}

tokio::task_local! {
    /// The mutant hunt a scenario runs in, for its phase and its report line (set by the
    /// mutant hunt).
    pub static HUNTED: Hunted;
}

/// A checker a DETECT scenario or a mutant hunt names as the one that must fire: another
/// checker firing (a slow acquire on a loaded machine, say) does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checker {
    /// Checker 1: two critical sections of one resource overlapped.
    Overlap,
    /// Checker 4: tokens repeated or went back in real-time order.
    Tokens,
    /// Checker 3: the fenced register lost an update.
    FencedStorage,
    /// An acquire call took longer than the scenario's bound.
    SlowAcquire,
    /// A semaphore's holders held more permits at one instant than its limit.
    Holders,
    /// A writer of a read-write lock did not get in within its bound behind a stream of
    /// overlapping readers.
    Starvation,
    /// A fair waiter was overtaken by one that started after its ticket was issued.
    Fifo,
    /// The lock stayed free past the hand-off bound with a live waiter queued.
    Stalled,
}

impl Checker {
    pub fn word(self) -> &'static str {
        match self {
            Checker::Overlap => "overlap",
            Checker::Tokens => "tokens",
            Checker::FencedStorage => "fenced",
            Checker::SlowAcquire => "slow_acq",
            Checker::Holders => "holders",
            Checker::Starvation => "starved",
            Checker::Fifo => "fifo",
            Checker::Stalled => "stalled",
        }
    }
}

/// What a scenario must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every checker stays clean.
    Hold,
    /// A known-unsafe interleaving: the named checker must fire, or the test is too weak
    /// or the interleaving was not reached.
    Detect(Checker),
    /// The lease is broken (checker 1 must see an overlap, or the scenario was not
    /// reached), but fencing protects the storage: the fenced register loses no update and
    /// refuses at least one stale access, and the tokens keep their properties.
    Fenced,
}

impl Expect {
    fn word(self) -> String {
        match self {
            Expect::Hold => "HOLD".into(),
            Expect::Detect(c) => format!("DETECT({})", c.word()),
            Expect::Fenced => "FENCED".into(),
        }
    }
}

/// The scenario's name and shape.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Its row in docs/testing.md §4, such as `"S5"`.
    pub code: &'static str,
    /// A short description for the report.
    pub name: String,
    pub expect: Expect,
    /// Masters.
    pub n: usize,
    pub persistence: Persistence,
    /// Put a fault proxy in front of every master; clients then go through it.
    pub proxies: bool,
}

impl Setup {
    pub fn new(code: &'static str, name: impl Into<String>, expect: Expect, n: usize) -> Self {
        Self {
            code,
            name: name.into(),
            expect,
            n,
            persistence: Persistence::None,
            proxies: false,
        }
    }

    pub fn proxies(mut self) -> Self {
        self.proxies = true;
        self
    }

    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }
}

/// The seconds of each scenario's fault phase: `REDQUORUM_CHAOS_SECONDS`, else a short run
/// (2 s; 1 s for a mutant hunt's runs, which run three times).
pub fn phase() -> Duration {
    let secs = std::env::var("REDQUORUM_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(if HUNTED.try_with(|_| ()).is_ok() {
            1.0
        } else {
            2.0
        });
    Duration::from_secs_f64(secs)
}

/// Whether this is a long soak (`REDQUORUM_CHAOS_SECONDS` set above the short default).
pub fn soak() -> bool {
    phase() > Duration::from_secs(3)
}

/// The run's base seed: `REDQUORUM_CHAOS_SEED`, else fresh.
pub fn base_seed() -> u64 {
    std::env::var("REDQUORUM_CHAOS_SEED")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            s.strip_prefix("0x")
                .map_or_else(|| s.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
        })
        .unwrap_or_else(|| now_ns() ^ u64::from(std::process::id()).rotate_left(32))
}

/// A small seeded generator (splitmix64): schedules replay from the seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_micros() as u64;
        low + Duration::from_micros(self.below(span + 1))
    }

    /// `k` distinct indices of `0..n`.
    pub fn pick(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = i + self.below((n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(k.min(n));
        all
    }
}

/// How workers use a lease.
#[derive(Debug, Clone, Copy)]
pub enum Cs {
    /// Read the counter, wait up to this long, write it back.
    Short(Duration),
    /// Read the counter, keep working until `margin` before the deadline, write it back:
    /// a holder that uses its whole validity.
    UseValidity { margin: Duration },
}

/// What the in-process workers do.
#[derive(Debug, Clone, Copy)]
pub struct Work {
    pub cs: Cs,
    /// Pause between one release and the next acquire, up to this long.
    pub think: Duration,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            cs: Cs::Short(Duration::from_millis(10)),
            think: Duration::from_millis(20),
        }
    }
}

/// Running workers.
#[derive(Debug)]
pub struct Workers {
    pub stop: Arc<AtomicBool>,
    pub tasks: Vec<JoinHandle<()>>,
}

impl Workers {
    pub fn none() -> Self {
        Workers {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
        }
    }

    /// Tells this group to stop and returns its tasks, to be joined with another group's
    /// (see [`Workers::from_parts`]).
    pub fn into_tasks(self) -> Vec<JoinHandle<()>> {
        self.stop.store(true, Ordering::SeqCst);
        self.tasks
    }

    pub fn from_parts(stop: Arc<AtomicBool>, tasks: Vec<JoinHandle<()>>) -> Self {
        Workers { stop, tasks }
    }
}

/// Extra checks a scenario asks for at the end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checks {
    /// After the heal, a critical section must start within this long, and no stretch
    /// without one may exceed it.
    pub liveness: Option<Duration>,
    /// No acquire call may take longer than this.
    pub acquire_bound: Option<Duration>,
    /// Keys may legitimately remain at the end (a scripted holder gave up its release);
    /// they must then expire within `ttl_max`.
    pub keys_may_expire: bool,
    /// Fair waiters must be served in ticket order (see [`checker::fifo`]), and a HOLD run
    /// must judge at least this many pairs of them, or it proves nothing of the order and
    /// fails as broken. (A DETECT run whose checker fired judged what it needed.)
    pub fifo: Option<u64>,
    /// The hand-off liveness bound (see [`checker::stalls`]).
    pub handoff: Option<HandoffBound>,
}

/// The hand-off liveness bound of a scenario: once the lock is free with a live waiter
/// queued, the next grant comes within `bound`; a killed holder's lock is free
/// `holder_ttl` after its death. A HOLD run must judge at least `judged` such instants,
/// or it proves nothing of the hand-off and fails as broken.
#[derive(Debug, Clone, Copy)]
pub struct HandoffBound {
    pub bound: Duration,
    pub holder_ttl: Duration,
    pub judged: u64,
}

impl Checks {
    /// For scripted scenarios: no liveness or acquire bound, and keys left behind by a
    /// holder that gave up its release may expire on their own.
    pub const SCRIPTED: Checks = Checks {
        liveness: None,
        acquire_bound: None,
        keys_may_expire: true,
        fifo: None,
        handoff: None,
    };
}

/// The indexes of the masters whose outcome in `reports` is a grant.
/// Whether `outcome` is a failure to reach the master in time (down, refused, timed out,
/// an I/O error): it says nothing of how that master would have voted. On a loaded
/// machine a short node timeout can end the last attempt this way.
pub fn unreached(outcome: &redquorum::MasterOutcome) -> bool {
    use redquorum::MasterErrorKind as K;
    matches!(
        outcome,
        redquorum::MasterOutcome::Failed(e)
            if matches!(e.kind(), K::Down | K::Refused | K::Timeout | K::Io)
    )
}

pub fn granted(reports: &[redquorum::MasterReport]) -> Vec<usize> {
    reports
        .iter()
        .enumerate()
        .filter(|(_, r)| r.outcome().is_granted())
        .map(|(i, _)| i)
        .collect()
}

/// What the checkers found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub completed: u64,
    pub acquired: u64,
    pub failures: BTreeMap<String, u64>,
    pub overlaps: u64,
    pub lost: u64,
    pub overruns: u64,
    pub liveness: u64,
    pub slow: u64,
    pub keys_left: u64,
    /// Scenario-specific violations (see [`Env::violation`]).
    pub violations_noted: u64,
    /// Instants at which a semaphore's holders held more permits than its limit (see
    /// [`Env::over_admitted`]).
    pub over_admitted: u64,
    /// Writers kept out beyond their bound (see [`Env::starved`]).
    pub starved: u64,
    /// Fair waiters overtaken (see [`checker::overtaken`]).
    pub overtaken: u64,
    /// Free locks left waiting past the hand-off bound (see [`checker::stalls`]).
    pub stalled: u64,
    /// Checker 3: writes applied at the fenced register but lost (`applied − final`).
    pub fenced_lost: u64,
    /// Checker 3: fenced reads and writes refused for a stale token.
    pub refused: u64,
    /// Fenced accesses made (reads and writes), refused or not.
    pub fenced_ops: u64,
    /// Checker 4: successful acquisitions with a token, and the violations found.
    pub tokens: u64,
    pub token_violations: u64,
    pub notes: Vec<String>,
    /// What makes the run itself untrustworthy, whatever it expects: a worker that
    /// panicked or was stuck past its bound, a history whose sections do not pair up, a
    /// liveness check without a heal.
    pub broken: Vec<String>,
    pub expect: Option<Expect>,
    pub seed: u64,
    /// The report line.
    pub line: String,
}

impl Outcome {
    pub fn violations(&self) -> u64 {
        self.lock_violations() + self.storage_violations()
    }

    /// What checkers 1, 2 and 5 and the scenario's own checks found.
    pub fn lock_violations(&self) -> u64 {
        self.overlaps
            + self.lost
            + self.overruns
            + self.liveness
            + self.slow
            + self.violations_noted
            + self.over_admitted
            + self.starved
            + self.overtaken
            + self.stalled
    }

    /// What the fencing checkers (3 and 4) found.
    pub fn storage_violations(&self) -> u64 {
        self.fenced_lost + self.token_violations
    }

    /// Whether `checker` fired.
    pub fn fired(&self, checker: Checker) -> bool {
        match checker {
            Checker::Overlap => self.overlaps > 0,
            Checker::Tokens => self.token_violations > 0,
            Checker::FencedStorage => self.fenced_lost > 0,
            Checker::SlowAcquire => self.slow > 0,
            Checker::Holders => self.over_admitted > 0,
            Checker::Starvation => self.starved > 0,
            Checker::Fifo => self.overtaken > 0,
            Checker::Stalled => self.stalled > 0,
        }
    }

    /// Whether the expectation was met (a broken run meets none).
    pub fn met(&self, expect: Expect) -> bool {
        if !self.broken.is_empty() {
            return false;
        }
        match expect {
            Expect::Hold => self.violations() == 0,
            Expect::Detect(checker) => self.fired(checker),
            Expect::Fenced => {
                self.overlaps > 0 && self.storage_violations() == 0 && self.refused > 0
            }
        }
    }

    /// Asserts the scenario's expectation.
    pub fn check(&self) {
        let seed = self.seed;
        let line = &self.line;
        assert!(
            self.broken.is_empty(),
            "{line}\nthe run itself failed: {:?}; replay with REDQUORUM_CHAOS_SEED={seed}",
            self.broken
        );
        match self.expect {
            Some(Expect::Hold) | None => assert_eq!(
                self.violations(),
                0,
                "{line}\nHOLD scenario violated; replay with REDQUORUM_CHAOS_SEED={seed}"
            ),
            Some(Expect::Detect(checker)) => assert!(
                self.fired(checker),
                "{line}\nDETECT scenario: the {} checker did not fire, so the checkers or the \
                 script are too weak; replay with REDQUORUM_CHAOS_SEED={seed}",
                checker.word()
            ),
            Some(Expect::Fenced) => {
                assert!(
                    self.overlaps > 0,
                    "{line}\nFENCED scenario: no overlap, so the lease was never broken and \
                     fencing was not tested; replay with REDQUORUM_CHAOS_SEED={seed}"
                );
                assert_eq!(
                    self.storage_violations(),
                    0,
                    "{line}\nFENCED scenario: the storage lost an update or tokens misbehaved; \
                     replay with REDQUORUM_CHAOS_SEED={seed}"
                );
                assert!(
                    self.refused > 0,
                    "{line}\nFENCED scenario: no stale access reached the register; replay \
                     with REDQUORUM_CHAOS_SEED={seed}"
                );
            }
        }
    }
}

/// One scenario's environment.
pub struct Env {
    pub setup: Setup,
    pub cluster: Cluster,
    pub proxies: Vec<Proxy>,
    pub store: Server,
    pub history: History,
    pub seed: u64,
    pub rng: Rng,
    /// Every resource of the scenario starts with this.
    pub prefix: String,
    /// The longest TTL any client of the scenario uses.
    pub ttl_max: Duration,
    heal_ns: Option<u64>,
    started: Instant,
    notes: Vec<String>,
    violations: u64,
    /// What the scenario found that makes the run untrustworthy (see [`Env::broken`]).
    broken: Vec<String>,
    over_admitted: u64,
    starved: u64,
    resources: Vec<String>,
    /// Workers spawned so far: each gets the next number, so names stay unique when a
    /// scenario spawns more than one group.
    workers: usize,
    /// Windows of master faults (`CLOCK_MONOTONIC` ns): the hand-off bound is not
    /// checked for a lock freed inside one.
    faults: Vec<(u64, u64)>,
}

/// Default timings, scaled to keep a scenario within seconds: TTL 800 ms, node timeout
/// 40 ms (TTL/20).
pub const TTL: Duration = Duration::from_millis(800);
pub const NODE_TIMEOUT: Duration = Duration::from_millis(40);
/// The pause before a retry, and the most random jitter added to it.
pub const RETRY_DELAY: Duration = Duration::from_millis(10);
pub const RETRY_JITTER: Duration = Duration::from_millis(20);

impl Env {
    pub async fn start(setup: Setup) -> Env {
        Self::start_seeded(setup, base_seed()).await
    }

    pub async fn start_seeded(setup: Setup, base: u64) -> Env {
        let mut mix = Rng::new(base);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in setup.code.bytes().chain(setup.name.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let seed = mix.next_u64() ^ h ^ setup.n as u64;
        let options = ServerOptions::new().persistence(setup.persistence);
        let cluster = Cluster::start_with(setup.n, &options).await.unwrap();
        let store = Server::start(&ServerOptions::new()).await.unwrap();
        let mut proxies = Vec::new();
        if setup.proxies {
            for server in cluster.servers() {
                proxies.push(Proxy::for_server(server).await.unwrap());
            }
        }
        let prefix = format!(
            "chaos:{}:{}:{}:",
            setup.code,
            std::process::id(),
            seed & 0xffff
        );
        eprintln!(
            "[chaos] {} {} N={} starting, REDQUORUM_CHAOS_SEED={base} (scenario seed {seed:#x})",
            setup.code, setup.name, setup.n
        );
        Env {
            setup,
            cluster,
            proxies,
            store,
            history: History::new(),
            seed: base,
            rng: Rng::new(seed),
            prefix,
            ttl_max: TTL,
            heal_ns: None,
            started: Instant::now(),
            notes: Vec::new(),
            violations: 0,
            broken: Vec::new(),
            over_admitted: 0,
            starved: 0,
            resources: Vec::new(),
            workers: 0,
            faults: Vec::new(),
        }
    }

    /// The URLs clients use: the proxies' when there are proxies.
    pub fn urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            self.cluster.urls()
        } else {
            self.proxies.iter().map(Proxy::url).collect()
        }
    }

    /// Resource `i` of this scenario.
    pub fn resource(&mut self, i: usize) -> String {
        let r = format!("{}r{i}", self.prefix);
        if !self.resources.contains(&r) {
            self.resources.push(r.clone());
        }
        r
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// A connection to the checker store.
    pub async fn store(&self) -> MultiplexedConnection {
        crate::support::raw(&self.store.url()).await
    }

    /// Records a window of master faults, from `from_ns` to now (see [`HandoffBound`]).
    pub fn fault_window(&mut self, from_ns: u64) {
        self.faults.push((from_ns, now_ns()));
    }

    /// Marks the end of the faults: liveness is measured from here.
    pub fn mark_heal(&mut self) {
        self.heal_ns = Some(now_ns());
    }

    /// Starts `k` workers spread over `resources` resources, each with its own client.
    /// Workers are named `{code}-w{n}`, numbered on from any group spawned before, since
    /// the checkers tell sections apart by client name.
    pub fn spawn_workers(
        &mut self,
        k: usize,
        resources: usize,
        work: Work,
        client: impl Fn(usize) -> Redlock,
    ) -> Workers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in 0..k {
            let resource = self.resource(i % resources.max(1));
            let name = format!("{}-w{}", self.setup.code, self.workers);
            self.workers += 1;
            let recorder = self.history.recorder(name, resource);
            let client = client(i);
            let store_url = self.store.url();
            let stop = Arc::clone(&stop);
            let seed = self.rng.next_u64();
            tasks.push(tokio::spawn(worker(
                client, recorder, store_url, work, stop, seed,
            )));
        }
        Workers { stop, tasks }
    }

    /// Stops the workers, runs every checker, reports, and asserts the expectation.
    pub async fn finish(mut self, workers: Workers, checks: Checks) -> Outcome {
        let grace = self.ttl_max * 3 + Duration::from_secs(5);
        let joined = join_workers(workers, grace).await;
        let end_ns = now_ns();
        let history = self.history.snapshot();
        let mut out = Outcome {
            acquired: history.iter().filter(|e| e.op == Op::AcqOk).count() as u64,
            failures: checker::failures(&history),
            broken: joined.broken(),
            ..Outcome::default()
        };
        out.broken.append(&mut self.broken);
        for m in checker::malformed(&history) {
            out.broken.push(format!("malformed history: {m:?}"));
        }
        let ext_ok = history.iter().filter(|e| e.op == Op::ExtOk).count();
        let ext_fail = history.iter().filter(|e| e.op == Op::ExtFail).count();
        if ext_ok + ext_fail > 0 {
            self.notes
                .push(format!("extensions: {ext_ok} ok, {ext_fail} failed"));
        }
        let overlaps = checker::overlaps(&history);
        out.overlaps = overlaps.len() as u64;
        if let Some(o) = overlaps.first() {
            out.notes.push(format!(
                "first overlap: {:?} began inside {:?} ({} ms)",
                o.later,
                o.earlier,
                if o.by_ns == u64::MAX {
                    "open".to_owned()
                } else {
                    format!("{:.1}", o.by_ns as f64 / 1e6)
                }
            ));
        }
        let overruns = checker::overruns(&history);
        out.overruns = overruns.len() as u64;
        if let Some(o) = overruns.first() {
            out.notes.push(format!(
                "first overrun: {:?} by {:.1} ms",
                o.section,
                o.by_ns as f64 / 1e6
            ));
        }
        let mut store = self.store().await;
        for resource in self.resources.clone() {
            let done = checker::completed(&history, &resource);
            let counter: Option<u64> = store.get(counter_key(&resource)).await.unwrap();
            out.completed += done;
            out.lost += checker::lost_updates(done, counter.unwrap_or(0));
        }
        for resource in self.resources.clone() {
            let [value, _, refused, applied] = crate::fenced::keys(&resource);
            let value: Option<u64> = store.get(value).await.unwrap();
            let refused: Option<u64> = store.get(refused).await.unwrap();
            let applied: Option<u64> = store.get(applied).await.unwrap();
            out.refused += refused.unwrap_or(0);
            out.fenced_lost += applied.unwrap_or(0).saturating_sub(value.unwrap_or(0));
        }
        out.fenced_ops = history
            .iter()
            .filter(|e| e.op == Op::CsEnd && e.detail.contains("fenced"))
            .count() as u64;
        let tokens = checker::tokens(&history);
        out.tokens = tokens.tokens;
        out.token_violations = tokens.violations.len() as u64;
        if let Some(v) = tokens.violations.first() {
            out.notes.push(format!("first token violation: {v:?}"));
        }
        match (checks.liveness, self.heal_ns) {
            (Some(bound), Some(heal)) => {
                // Per resource: activity on one must not hide a starved one.
                let mut worst: Option<(String, checker::Liveness)> = None;
                for resource in &self.resources {
                    let l = checker::liveness(&history, resource, heal, end_ns);
                    if l.largest_gap_ns > bound.as_nanos() as u64 || l.first_after_heal_ns.is_none()
                    {
                        out.liveness += 1;
                    }
                    if worst
                        .as_ref()
                        .is_none_or(|(_, w)| l.largest_gap_ns > w.largest_gap_ns)
                    {
                        let short = resource.strip_prefix(&self.prefix).unwrap_or(resource);
                        worst = Some((short.to_owned(), l));
                    }
                }
                if let Some((resource, l)) = worst {
                    let first = l.first_after_heal_ns.map(|t| t as f64 / 1e6);
                    out.notes.push(format!(
                        "after heal, worst of {} resource(s) ({resource}): first section in \
                         {} ms, largest gap {:.0} ms (bound {} ms), {} sections",
                        self.resources.len(),
                        first.map_or("never".into(), |t| format!("{t:.0}")),
                        l.largest_gap_ns as f64 / 1e6,
                        bound.as_millis(),
                        l.sections
                    ));
                }
            }
            (Some(_), None) => out
                .broken
                .push("a liveness bound was set but the scenario never marked its heal".into()),
            (None, _) => {}
        }
        if let Some(min) = checks.fifo {
            let queued = history.iter().filter(|e| e.op == Op::Queued).count();
            let report = checker::fifo(&history);
            out.notes.push(format!(
                "fifo: {queued} fair call(s) seen queued, {} pair(s) judged (at least {min})",
                report.judged
            ));
            if self.setup.expect == Expect::Hold && report.judged < min {
                out.broken.push(format!(
                    "the FIFO checker judged {} pair(s) of fair calls, fewer than {min}: the \
                     run proves nothing of their order",
                    report.judged
                ));
            }
            let found = report.overtaken;
            out.overtaken = found.len() as u64;
            if let Some(o) = found.first() {
                out.notes.push(format!(
                    "OVERTAKEN: {:?} (queued at +{} ms) by {:?} (started +{} ms, granted +{} ms)",
                    o.first,
                    self.since_start(o.queued_ns),
                    o.overtaker,
                    self.since_start(o.started_ns),
                    self.since_start(o.granted_ns)
                ));
            }
        }
        if let Some(h) = checks.handoff {
            let report = checker::handoffs(
                &history,
                h.holder_ttl.as_nanos() as u64,
                h.bound.as_nanos() as u64,
                &self.faults,
                end_ns,
            );
            out.notes.push(format!(
                "hand-off: freed {} time(s) with a waiter queued, next grant within {} (bound {} ms)",
                report.judged,
                match report.slowest_ns {
                    None => "-".to_owned(),
                    Some(u64::MAX) => "never".to_owned(),
                    Some(t) => format!("{} ms", t / 1_000_000),
                },
                h.bound.as_millis()
            ));
            if self.setup.expect == Expect::Hold && report.judged < h.judged {
                out.broken.push(format!(
                    "the hand-off checker judged {} free lock(s) with a waiter queued, fewer \
                     than {}: the run proves nothing of the hand-off",
                    report.judged, h.judged
                ));
            }
            let found = report.stalls;
            out.stalled = found.len() as u64;
            if let Some(s) = found.first() {
                out.notes.push(format!(
                    "STALLED: freed at +{} ms with {:?} queued; next grant {} (bound {} ms)",
                    self.since_start(s.free_ns),
                    s.waiter,
                    s.next_grant_ns.map_or("never".to_owned(), |t| format!(
                        "{} ms later",
                        (t - s.free_ns) / 1_000_000
                    )),
                    h.bound.as_millis()
                ));
            }
        }
        if let Some(bound) = checks.acquire_bound {
            let slow = checker::slow_acquires(&history, end_ns, bound.as_nanos() as u64);
            out.slow = slow.len() as u64;
            let worst = checker::acquire_latencies(&history, end_ns)
                .into_iter()
                .map(|(_, t)| t)
                .max()
                .unwrap_or(0);
            out.notes.push(format!(
                "slowest acquire {:.0} ms (bound {} ms)",
                worst as f64 / 1e6,
                bound.as_millis()
            ));
        }
        out.keys_left = self.keys_left(checks.keys_may_expire).await;
        out.notes.append(&mut self.notes);
        out.violations_noted += self.violations;
        out.over_admitted += self.over_admitted;
        out.starved += self.starved;
        out.expect = Some(self.setup.expect);
        out.seed = self.seed;
        out.line = self.line(&out);
        eprintln!("[chaos] {}", out.line);
        append_report(&out.line);
        out
    }

    /// Records what the semaphore checker found: `found` instants with more permits held
    /// than the limit, the first described by `what`.
    pub fn over_admitted(&mut self, found: u64, what: impl Into<String>) {
        if found > 0 {
            self.over_admitted += found;
            self.notes.push(format!("OVER-ADMITTED: {}", what.into()));
        }
    }

    /// Records a writer kept out beyond its bound (the starvation checker).
    pub fn starved(&mut self, what: impl Into<String>) {
        self.starved += 1;
        self.notes.push(format!("STARVED: {}", what.into()));
    }

    /// Milliseconds from the scenario's start to `t_ns`, for notes.
    fn since_start(&self, t_ns: u64) -> u64 {
        let started = now_ns().saturating_sub(self.started.elapsed().as_nanos() as u64);
        t_ns.saturating_sub(started) / 1_000_000
    }

    /// Records what makes the run itself untrustworthy (workers the scenario joined itself
    /// that panicked or were stuck): the run fails whatever it expects.
    pub fn broken(&mut self, what: impl Into<String>) {
        self.broken.push(what.into());
    }

    /// Records a scenario-specific violation (counted with the checkers').
    pub fn violation(&mut self, what: impl Into<String>) {
        self.violations += 1;
        self.notes.push(format!("VIOLATION: {}", what.into()));
    }

    /// Resumes and restarts every master, heals every proxy, then counts the scenario's
    /// keys left on the masters; they must all be gone within `ttl_max` (+ slack).
    async fn keys_left(&mut self, may_expire: bool) -> u64 {
        for proxy in &self.proxies {
            proxy.heal();
        }
        for server in self.cluster.servers_mut() {
            if server.is_paused() {
                server.resume().unwrap();
            }
        }
        let pattern = format!("{}*", self.prefix);
        let count = |cluster: &Cluster, pattern: String| {
            let urls: Vec<String> = cluster
                .servers()
                .iter()
                .filter(|s| s.is_running())
                .map(Server::url)
                .collect();
            async move {
                let mut total = 0u64;
                for url in urls {
                    let mut conn = crate::support::raw(&url).await;
                    let keys: Vec<String> = conn.keys(&pattern).await.unwrap();
                    total += keys.len() as u64;
                }
                total
            }
        };
        // Releases sent in the background may still be on their way: allow them a moment.
        let settle = Instant::now() + Duration::from_secs(2);
        let mut left = count(&self.cluster, pattern.clone()).await;
        while left > 0 && Instant::now() < settle {
            sleep(Duration::from_millis(20)).await;
            left = count(&self.cluster, pattern.clone()).await;
        }
        if left > 0 {
            let limit = self.ttl_max + Duration::from_secs(2);
            let expire_by = Instant::now() + limit;
            let mut now_left = left;
            while now_left > 0 && Instant::now() < expire_by {
                sleep(Duration::from_millis(20)).await;
                now_left = count(&self.cluster, pattern.clone()).await;
            }
            assert_eq!(
                now_left, 0,
                "{} {}: lock keys still on the masters {limit:?} after the end",
                self.setup.code, self.setup.name
            );
            self.notes.push(format!(
                "{left} key(s) outlived the run and expired within the TTL"
            ));
            if !may_expire {
                // Not a safety violation, but the report must say so.
                self.notes.push("unexpected leftover keys".into());
            }
        }
        left
    }

    fn line(&self, out: &Outcome) -> String {
        let mut failures = String::new();
        for (i, (kind, n)) in out.failures.iter().enumerate() {
            let _ = write!(failures, "{}{kind}:{n}", if i > 0 { "," } else { "" });
        }
        let verdict = match self.setup.expect {
            _ if !out.broken.is_empty() => "BROKEN",
            Expect::Hold if out.violations() == 0 => "clean",
            Expect::Hold => "VIOLATED",
            Expect::Detect(c) if out.fired(c) => "detected",
            Expect::Detect(_) => "MISSED",
            Expect::Fenced if out.met(Expect::Fenced) => "fenced",
            Expect::Fenced if out.storage_violations() > 0 => "UNFENCED",
            Expect::Fenced => "MISSED",
        };
        let name = match HUNTED.try_with(|h| *h) {
            Ok(Hunted {
                mutant,
                planted: true,
            }) => format!("{} [mutant {mutant:?}]", self.setup.name),
            Ok(Hunted {
                mutant,
                planted: false,
            }) => format!("{} [unplanted, hunt of {mutant:?}]", self.setup.name),
            Err(_) => self.setup.name.clone(),
        };
        let mut line = format!(
            "{:<4} {:<44} N={} expect={:<6} {:<8} cs={:<5} acq_ok={:<5} acq_fail={{{}}} viol={{overlap:{},lost:{},overrun:{},liveness:{},slow_acq:{}}} keys_left={} {:.1}s seed={}",
            self.setup.code,
            name,
            self.setup.n,
            self.setup.expect.word(),
            verdict,
            out.completed,
            out.acquired,
            failures,
            out.overlaps,
            out.lost,
            out.overruns,
            out.liveness,
            out.slow,
            out.keys_left,
            self.started.elapsed().as_secs_f64(),
            self.seed,
        );
        if out.over_admitted > 0 {
            let _ = write!(line, " over_admitted={}", out.over_admitted);
        }
        if out.violations_noted > 0 {
            let _ = write!(line, " other_viol={}", out.violations_noted);
        }
        if out.starved > 0 {
            let _ = write!(line, " starved={}", out.starved);
        }
        if out.overtaken > 0 {
            let _ = write!(line, " overtaken={}", out.overtaken);
        }
        if out.stalled > 0 {
            let _ = write!(line, " stalled={}", out.stalled);
        }
        if out.tokens > 0 || out.fenced_ops > 0 || out.refused > 0 {
            let _ = write!(
                line,
                " fenced={{lost:{},refused:{}}} tokens={{n:{},viol:{}}}",
                out.fenced_lost, out.refused, out.tokens, out.token_violations
            );
        }
        if !out.broken.is_empty() {
            let _ = write!(line, " BROKEN: {}", out.broken.join("; "));
        }
        if !out.notes.is_empty() {
            let _ = write!(line, " | {}", out.notes.join("; "));
        }
        line
    }
}

/// How the workers of a scenario ended.
#[derive(Debug, Default)]
pub struct Joined {
    /// Workers that did not stop within the grace period and were aborted.
    pub stuck: usize,
    /// One message per worker that panicked (inside the library or the scenario's code).
    pub panicked: Vec<String>,
}

impl Joined {
    /// What makes the run untrustworthy, as [`Outcome::broken`] lists it: every panic, and
    /// workers stuck past their bound (an acquire that never returned or a section never
    /// ended may hide what the checkers should have seen).
    pub fn broken(&self) -> Vec<String> {
        let mut broken = self.panicked.clone();
        if self.stuck > 0 {
            broken.push(format!(
                "{} worker(s) stuck past their bound and aborted",
                self.stuck
            ));
        }
        broken
    }
}

/// Tells `workers` to stop and joins them, aborting those still running after `grace`.
/// A panic is not swallowed: it is returned, and fails the scenario.
pub async fn join_workers(workers: Workers, grace: Duration) -> Joined {
    workers.stop.store(true, Ordering::SeqCst);
    let give_up = Instant::now() + grace;
    let mut joined = Joined::default();
    for task in workers.tasks {
        let left = give_up.saturating_duration_since(Instant::now());
        let abort = task.abort_handle();
        match timeout(left, task).await {
            Err(_) => {
                abort.abort();
                joined.stuck += 1;
            }
            Ok(Err(e)) if e.is_panic() => {
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".into());
                joined
                    .panicked
                    .push(format!("a worker panicked: {message}"));
            }
            Ok(Err(e)) => joined.panicked.push(format!("a worker was cancelled: {e}")),
            Ok(Ok(())) => {}
        }
    }
    joined
}

/// Appends one line to `target/redquorum-chaos/report.txt`, which `scripts/test.sh`
/// prints after the run (one `write` per line, so parallel test processes do not mix).
pub fn append_report(line: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(|p| p.join("redquorum-chaos"))
        .unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("report.txt"))
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// A client builder over `urls` with the suite's default timings: baseline Redlock, so
/// restart quarantine is off (scenarios about it turn it on).
pub fn client_over(urls: Vec<String>) -> Builder {
    Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .ttl(TTL)
        .timeouts(
            Timeouts::new()
                .node(NODE_TIMEOUT)
                .connect(Duration::from_millis(500)),
        )
        .retry(
            Retry::new()
                .attempts(50)
                .delay(RETRY_DELAY)
                .jitter(RETRY_JITTER)
                .wait(Duration::from_secs(2)),
        )
}

/// Which protections of docs/testing.md §3 a scenario's clients use beyond baseline Redlock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Guards {
    /// RSV: restart quarantine, with `ttl_max` the scenario's longest TTL.
    pub quarantine: bool,
    /// F: fencing tokens (needs quarantine).
    pub fencing: bool,
}

impl Guards {
    /// Baseline Redlock.
    pub const BR: Guards = Guards {
        quarantine: false,
        fencing: false,
    };
    /// Restart quarantine.
    pub const RSV: Guards = Guards {
        quarantine: true,
        fencing: false,
    };
    /// Restart quarantine and fencing tokens.
    pub const RSV_F: Guards = Guards {
        quarantine: true,
        fencing: true,
    };

    /// `builder` with these protections, every client agreeing on `ttl_max`.
    pub fn apply(self, builder: Builder, ttl_max: Duration) -> Builder {
        if !self.quarantine {
            return builder;
        }
        builder
            .quarantine(true)
            .ttl_max(ttl_max)
            .fencing(self.fencing)
    }

    /// The suffix of a scenario name: which protections are on.
    pub fn label(self) -> &'static str {
        match (self.quarantine, self.fencing) {
            (false, _) => "",
            (true, false) => " [RSV]",
            (true, true) => " [RSV+F]",
        }
    }
}

/// Writes an old data epoch on every master of `cluster`, as a long-running deployment has:
/// restart quarantine then waits only for young processes (and not at all for durable ones).
pub async fn seed_epochs(cluster: &Cluster) {
    for url in cluster.urls() {
        crate::support::seed_old_epoch(&url).await;
    }
}

/// Waits until `client` can take a throwaway lock: the masters it needs left quarantine.
pub async fn settle(client: &Redlock, prefix: &str) {
    let resource = format!("{prefix}settle");
    crate::support::wait_until(Duration::from_secs(10), "masters left quarantine", || {
        let (client, resource) = (client.clone(), resource.clone());
        async move {
            match client.try_acquire(&resource).await {
                Ok(lease) => lease.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
}

/// The counter of a resource on the checker store.
pub fn counter_key(resource: &str) -> String {
    format!("{resource}:counter")
}

/// One contending client: acquire, critical section on the checker store, release, until
/// stopped.
async fn worker(
    client: Redlock,
    mut rec: Recorder,
    store_url: String,
    work: Work,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut store = crate::support::raw(&store_url).await;
    let resource = rec.resource().to_owned();
    // Bounded in count as well as by the stop flag.
    for _ in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        rec.acq_start();
        match client.acquire(&resource).await {
            Ok(lease) => {
                rec.acq_ok(&lease);
                critical_section(&mut rec, &lease, &mut store, work.cs, &mut rng).await;
                release(&mut rec, lease).await;
            }
            Err(e) => rec.acq_fail(&e),
        }
        sleep(rng.between(Duration::ZERO, work.think)).await;
    }
}

/// Reads the counter, works, writes it back, unless the lease is about to run out.
pub async fn critical_section(
    rec: &mut Recorder,
    lease: &Lease,
    store: &mut MultiplexedConnection,
    cs: Cs,
    rng: &mut Rng,
) {
    rec.cs_start();
    let key = counter_key(rec.resource());
    let v: Option<u64> = store.get(&key).await.unwrap();
    let fenced = fenced_read(rec, store).await;
    let (work, margin) = match cs {
        Cs::Short(d) => (rng.between(Duration::ZERO, d), Duration::from_millis(5)),
        Cs::UseValidity { margin } => (lease.remaining().saturating_sub(margin), margin / 2),
    };
    sleep(work).await;
    // A careful holder stops touching the resource when its validity runs out.
    if lease.remaining() > margin {
        let _: () = store.set(&key, v.unwrap_or(0) + 1).await.unwrap();
        let fenced = fenced_write(rec, store, fenced).await;
        rec.cs_end_fenced(true, fenced);
    } else {
        rec.cs_end_fenced(false, fenced.map(|_| false));
    }
}

/// With a token: a fenced read of the register (`Some(None)`: refused). `None` without one.
pub async fn fenced_read(rec: &Recorder, store: &mut MultiplexedConnection) -> Option<Option<u64>> {
    let token = rec.token()?;
    Some(
        crate::fenced::read(store, rec.resource(), token)
            .await
            .unwrap(),
    )
}

/// After an accepted fenced read: a fenced write of the value read plus one. Returns
/// whether a fenced access of the section was refused (`None` without a token).
pub async fn fenced_write(
    rec: &Recorder,
    store: &mut MultiplexedConnection,
    read: Option<Option<u64>>,
) -> Option<bool> {
    match (read?, rec.token()) {
        (Some(v), Some(token)) => Some(
            !crate::fenced::write(store, rec.resource(), token, v + 1)
                .await
                .unwrap(),
        ),
        _ => Some(true),
    }
}

/// Releases and records how it went.
pub async fn release(rec: &mut Recorder, lease: Lease) {
    match lease.release().await {
        Ok(report) => rec.rel(&format!("released:{}", report.released())),
        Err(e) => rec.rel(&format!("{:?}", e.kind())),
    }
}

/// A scripted holder: acquired, inside its critical section, counter read.
pub struct Held {
    pub rec: Recorder,
    pub lease: Lease,
    value: u64,
    key: String,
    /// Whether the counter write was made.
    pub wrote: bool,
    /// With a token: the fenced read (`Some(None)`: refused).
    fenced: Option<Option<u64>>,
    /// With a token: whether a fenced access was refused.
    refused: Option<bool>,
}

/// Acquires `resource` with `client` and enters the critical section (reads the counter);
/// `None` (with `acq_fail` recorded) if it could not acquire.
pub async fn enter(
    client: &Redlock,
    mut rec: Recorder,
    store: &mut MultiplexedConnection,
) -> Result<Held, (Recorder, redquorum::Error)> {
    rec.acq_start();
    let resource = rec.resource().to_owned();
    match client.acquire(&resource).await {
        Ok(lease) => {
            rec.acq_ok(&lease);
            Ok(Held::inside(rec, lease, store).await)
        }
        Err(e) => {
            rec.acq_fail(&e);
            Err((rec, e))
        }
    }
}

impl Held {
    /// Enters the critical section with `lease`: records `cs_start`, reads the counter.
    pub async fn inside(
        mut rec: Recorder,
        lease: Lease,
        store: &mut MultiplexedConnection,
    ) -> Held {
        rec.cs_start();
        let key = counter_key(rec.resource());
        let v: Option<u64> = store.get(&key).await.unwrap();
        let fenced = fenced_read(&rec, store).await;
        Held {
            rec,
            lease,
            value: v.unwrap_or(0),
            key,
            wrote: false,
            refused: fenced.map(|r| r.is_none()),
            fenced,
        }
    }

    /// Leaves without writing (the lease is running out or was lost), then releases.
    pub async fn abandon(mut self) -> Recorder {
        self.rec.cs_end_fenced(false, self.refused);
        release(&mut self.rec, self.lease).await;
        self.rec
    }

    /// Writes the counter back, staying inside the critical section.
    pub async fn write(mut self, store: &mut MultiplexedConnection) -> Self {
        let _: () = store.set(&self.key, self.value + 1).await.unwrap();
        self.refused = fenced_write(&self.rec, store, self.fenced).await;
        self.wrote = true;
        self
    }

    /// Ends the critical section at `t_ns` (it wrote already, and only waited since; see
    /// [`Recorder::cs_end_fenced_at`]), then releases.
    pub async fn end_at(mut self, t_ns: u64) -> Recorder {
        self.rec.cs_end_fenced_at(t_ns, self.wrote, self.refused);
        release(&mut self.rec, self.lease).await;
        self.rec
    }

    /// Writes the counter back (whatever the lease says: the script decides when) and
    /// ends the critical section, then releases.
    pub async fn leave(mut self, store: &mut MultiplexedConnection) -> Recorder {
        if !self.wrote {
            let _: () = store.set(&self.key, self.value + 1).await.unwrap();
            self.refused = fenced_write(&self.rec, store, self.fenced).await;
        }
        self.rec.cs_end_fenced(true, self.refused);
        release(&mut self.rec, self.lease).await;
        self.rec
    }
}

/// Builds a client over `urls` with `mutant` planted, if any.
pub fn build(builder: Builder, mutant: Option<Mutant>) -> Redlock {
    let client = builder.build().unwrap();
    if let Some(m) = mutant {
        client.plant(m);
    }
    client
}

/// Acquires and releases a throwaway resource, so every connection is open before faults.
pub async fn warm(client: &Redlock, prefix: &str) {
    let lease = client.acquire(&format!("{prefix}warmup")).await.unwrap();
    lease.release().await.unwrap();
}

/// Acquire calls that started after `from_ns` and succeeded before `to_ns`: ordered by
/// the events, not by a grace period, so a call that won just before a fault and
/// recorded it late does not count.
pub fn successes_started_between(env: &Env, from_ns: u64, to_ns: u64) -> usize {
    let history = env.history.snapshot();
    let started: std::collections::BTreeSet<(&str, u64)> = history
        .iter()
        .filter(|e| e.op == Op::AcqStart && e.t_ns > from_ns)
        .map(|e| (e.client.as_str(), e.attempt))
        .collect();
    history
        .iter()
        .filter(|e| {
            e.op == Op::AcqOk && e.t_ns < to_ns && started.contains(&(e.client.as_str(), e.attempt))
        })
        .count()
}

/// The time of one acquire and release by `client` on a throwaway resource, before any
/// fault: the round time scenario bounds are derived from.
pub async fn measure_round(client: &Redlock, prefix: &str) -> Duration {
    let started = Instant::now();
    warm(client, prefix).await;
    started.elapsed()
}

/// The longest an acquire call may take: its wait budget, plus its last attempt (one node
/// timeout), plus scheduling slack of ten measured rounds (at least 300 ms): an acquire
/// that waited on a stalled master would take the whole stall.
pub fn acquire_bound(wait: Duration, node_timeout: Duration, round: Duration) -> Duration {
    wait + node_timeout + slack(round)
}

/// The time `attempts` attempts may spend with the suite's timings ([`client_over`]), no
/// release notices and a fixed retry delay: each lasts at most one node timeout and is
/// followed by at most one retry delay with its whole jitter.
pub const fn attempts_time(attempts: u32) -> Duration {
    let each = NODE_TIMEOUT.as_millis() + RETRY_DELAY.as_millis() + RETRY_JITTER.as_millis();
    Duration::from_millis(attempts as u64 * each as u64)
}

/// The longest an acquire call that its attempts end (not its wait budget) may take:
/// [`attempts_time`] plus the same scheduling slack as [`acquire_bound`].
pub fn attempts_bound(attempts: u32, round: Duration) -> Duration {
    attempts_time(attempts) + slack(round)
}

/// Scheduling slack of ten measured rounds, at least 300 ms.
fn slack(round: Duration) -> Duration {
    (round * 10).max(Duration::from_millis(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_worker_fails_the_scenario() {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = vec![
            tokio::spawn(async {}),
            tokio::spawn(async { panic!("inside acquire") }),
        ];
        let joined = join_workers(Workers::from_parts(stop, tasks), Duration::from_secs(5)).await;
        assert_eq!(joined.stuck, 0);
        assert_eq!(joined.panicked.len(), 1, "{:?}", joined.panicked);
        assert!(joined.panicked[0].contains("inside acquire"));

        // A HOLD run with a clean history but a panicked worker fails; so does a DETECT
        // run whose checker fired.
        for (expect, overlaps) in [(Expect::Hold, 0), (Expect::Detect(Checker::Overlap), 1)] {
            let out = Outcome {
                overlaps,
                broken: joined.broken(),
                expect: Some(expect),
                ..Outcome::default()
            };
            assert!(!out.met(expect));
            let checked = std::panic::catch_unwind(|| out.check());
            assert!(checked.is_err(), "{expect:?} passed with a panicked worker");
        }
    }

    #[tokio::test]
    async fn a_stuck_worker_is_aborted_and_fails_the_scenario() {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = vec![tokio::spawn(std::future::pending::<()>())];
        let joined =
            join_workers(Workers::from_parts(stop, tasks), Duration::from_millis(50)).await;
        assert_eq!(joined.stuck, 1);
        assert!(joined.panicked.is_empty());

        // A worker that never stopped may have hidden anything (an acquire that never
        // returned, a section never ended): a HOLD run with a clean history fails, and so
        // does a DETECT run whose checker fired.
        for (expect, overlaps) in [(Expect::Hold, 0), (Expect::Detect(Checker::Overlap), 1)] {
            let out = Outcome {
                overlaps,
                broken: joined.broken(),
                expect: Some(expect),
                ..Outcome::default()
            };
            assert!(!out.met(expect), "{expect:?} met with a stuck worker");
            let checked = std::panic::catch_unwind(|| out.check());
            assert!(checked.is_err(), "{expect:?} passed with a stuck worker");
        }
    }

    #[test]
    fn detect_and_fenced_need_the_named_checker() {
        // An overrun (a frozen holder ending late) alone is not an overlap.
        let overrun_only = Outcome {
            overruns: 1,
            refused: 1,
            ..Outcome::default()
        };
        assert!(!overrun_only.met(Expect::Detect(Checker::Overlap)));
        assert!(
            !overrun_only.met(Expect::Fenced),
            "FENCED needs the lease broken: an overlap"
        );
        let overlap = Outcome {
            overlaps: 1,
            refused: 1,
            ..Outcome::default()
        };
        assert!(overlap.met(Expect::Detect(Checker::Overlap)));
        assert!(overlap.met(Expect::Fenced));
        // A hunt that names tokens is not caught by a slow acquire.
        let slow = Outcome {
            slow: 1,
            ..Outcome::default()
        };
        assert!(!slow.met(Expect::Detect(Checker::Tokens)));
        assert!(slow.met(Expect::Detect(Checker::SlowAcquire)));
    }
}
