//! Deterministic bare-majority scripts (S5–S9, S15), repeated durable restarts (S20) and a
//! rolling restart under fencing (S21).
//!
//! The script of docs/testing.md §3: the masters outside a bare majority are clogged (their
//! proxies blackhole), so the holder is granted by exactly masters `0..Q`; then a fault hits
//! master 0 while the holder is inside its critical section; the clog is healed and a
//! contender tries to take masters `{0} ∪ Q..N`, which is a quorum. Whether the contender
//! gets in decides the scenario: a known-unsafe fault must let it in (DETECT) until a later
//! protection (restart quarantine, fencing) keeps it out, which turns the expectation to HOLD
//! in one line below.

use redquorum::{Retry, Timeouts};
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::{ErrorKind, MasterErrorKind, MasterOutcome, Mutant};
use redquorum_testkit::{ClockJump, Mode, Persistence};
use tokio::time::{Instant, sleep};

use crate::event::Op;
use crate::harness::*;
use crate::history::now_ns;

/// The holder's TTL in the scripts: long enough for the fault and the contender to run
/// inside the holder's validity.
const HOLD_TTL: Duration = Duration::from_millis(2500);

/// What hits master 0 while the holder is inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// S5: kill -9 and restart at once, empty.
    RestartEmpty,
    /// S6: kill -9, wait `ttl_max·(1+ρ) + margin`, restart empty.
    DelayedRestart,
    /// S7: kill -9 and restart at once with `appendfsync always`.
    RestartAof,
    /// S8: restart from a snapshot taken before the grant.
    RestartStale,
    /// S9: FLUSHALL without a restart.
    Flushall,
    /// S15: its wall clock jumps forward past the holder's expiry (TTL-shrink emulation).
    ClockForward,
}

/// How a bare-majority script runs beyond its fault.
#[derive(Debug, Clone, Copy, Default)]
pub struct Variant {
    /// The clients' protections.
    pub guards: Guards,
    /// S17: the holder extends its lease after the fault, before the clog heals.
    pub extend: bool,
    /// Planted in the holder and the contender.
    pub mutant: Option<Mutant>,
}

impl Variant {
    pub fn guards(guards: Guards) -> Variant {
        Variant {
            guards,
            ..Variant::default()
        }
    }
}

/// Runs the bare-majority script with baseline Redlock clients; see the module docs.
pub async fn bare_majority(
    code: &'static str,
    name: &str,
    n: usize,
    fault: Fault,
    expect: Expect,
) -> Outcome {
    bare_majority_with(code, name, n, fault, expect, Variant::default()).await
}

/// Runs the bare-majority script; see the module docs. With quarantine on, the masters
/// carry an old data epoch and the holder first waits until they left quarantine; with
/// fencing on, they are durable (`appendfsync always`: fence counters must not go back),
/// so they vote at once.
pub async fn bare_majority_with(
    code: &'static str,
    name: &str,
    n: usize,
    fault: Fault,
    expect: Expect,
    variant: Variant,
) -> Outcome {
    let guards = variant.guards;
    let persistence = if fault == Fault::RestartAof || guards.fencing {
        Persistence::AofAlways
    } else {
        Persistence::None
    };
    let name = format!("{name}{}", guards.label());
    let setup = Setup::new(code, name, expect, n)
        .proxies()
        .persistence(persistence);
    let mut env = Env::start(setup).await;
    env.ttl_max = HOLD_TTL;
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
    }
    let q = n / 2 + 1;
    let urls = env.urls();
    let resource = env.resource(0);
    let holder = build(
        guards.apply(
            client_over(urls.clone())
                .ttl(HOLD_TTL)
                .timeouts(Timeouts::new().node(Duration::from_millis(100)))
                .retry(Retry::new().attempts(5)),
            HOLD_TTL,
        ),
        variant.mutant,
    );
    if guards.quarantine {
        settle(&holder, &env.prefix).await;
    } else {
        warm(&holder, &env.prefix).await;
    }
    let stale = if fault == Fault::RestartStale {
        Some(env.cluster.server(0).snapshot().await.unwrap())
    } else {
        None
    };
    for proxy in &env.proxies[q..] {
        proxy.set_mode(Mode::Blackhole);
    }
    let mut store = env.store().await;
    let rec = env.history.recorder(format!("{code}-holder"), &resource);
    let Ok(held) = enter(&holder, rec, &mut store).await else {
        panic!("{code}: the holder could not acquire the bare majority");
    };
    assert_eq!(
        granted(held.lease.masters()),
        (0..q).collect::<Vec<_>>(),
        "{code}: the script did not reach the bare majority"
    );

    let crashed = Instant::now();
    match fault {
        Fault::RestartEmpty => env.cluster.server_mut(0).restart(false).await.unwrap(),
        Fault::RestartAof => env.cluster.server_mut(0).restart(true).await.unwrap(),
        Fault::RestartStale => {
            let snapshot = stale.as_ref().unwrap();
            env.cluster
                .server_mut(0)
                .restart_from(snapshot)
                .await
                .unwrap();
        }
        Fault::DelayedRestart => env.cluster.server_mut(0).kill().unwrap(),
        Fault::Flushall => env.cluster.server(0).flushall().await.unwrap(),
        Fault::ClockForward => {
            let url = env.cluster.server(0).url();
            let keys: Vec<String> = crate::support::raw(&url)
                .await
                .keys(format!("{}*", env.prefix))
                .await
                .unwrap();
            if keys.len() != 1 {
                env.note(format!("keys on master 0 before the jump: {keys:?}"));
            }
            let shifted = env
                .cluster
                .server(0)
                .jump_clock(&format!("{}*", env.prefix), ClockJump::Forward(HOLD_TTL))
                .await
                .unwrap();
            assert!(
                shifted >= 1 && keys.contains(&resource),
                "{code}: the holder's key was not on master 0: {keys:?}"
            );
        }
    }
    let mut held = Some(held);
    if variant.extend {
        // S17: the holder extends while master 0 may have forgotten its key and the clog
        // still stands. Only counted masters may make the extension: with master 0 in
        // quarantine that is fewer than a quorum, and the holder keeps its old deadline.
        let h = held.as_mut().unwrap();
        match h.lease.extend().await {
            Ok(report) => {
                h.rec.ext_ok(&h.lease);
                let granted = granted(report.masters());
                env.note(format!("extension granted by {granted:?}"));
                if guards.quarantine && granted.contains(&0) {
                    env.violation("the extension counted master 0 during its quarantine");
                }
            }
            Err(e) => {
                h.rec.ext_fail(&e);
                env.note(format!("extension refused: {:?}", e.kind()));
            }
        }
    }
    if fault == Fault::DelayedRestart {
        let h = held.take().unwrap();
        return delayed_restart(env, h, store, urls, crashed, q).await;
    }
    // Master 0 is now empty (or not); the clogged masters come back.
    for proxy in &env.proxies[q..] {
        proxy.heal();
    }
    let contender = build(
        guards.apply(
            client_over(urls)
                .ttl(TTL)
                .retry(Retry::new().attempts(500).wait(Duration::from_millis(1200))),
            HOLD_TTL,
        ),
        variant.mutant,
    );
    let rec = env.history.recorder(format!("{code}-contender"), &resource);
    match enter(&contender, rec, &mut store).await {
        Ok(c) => {
            sleep(Duration::from_millis(5)).await;
            c.leave(&mut store).await;
        }
        Err((_, e)) => {
            env.note(format!("contender kept out: {:?}", e.kind()));
            // With quarantine, the contender must have been kept out by master 0
            // abstaining, not by its answer (a grant, a refusal). A last attempt that
            // did not reach master 0 in time says nothing either way: noted.
            let outcome = e.masters().first().map(|r| r.outcome().clone());
            if outcome.as_ref().is_some_and(unreached) {
                env.note(format!(
                    "master 0 not reached in the last attempt: {outcome:?}"
                ));
            } else if guards.quarantine
                && fault != Fault::ClockForward
                && !matches!(outcome, Some(MasterOutcome::Abstained { .. }))
            {
                env.violation(format!(
                    "master 0 did not abstain for the contender: {outcome:?}"
                ));
            }
        }
    }
    if let Some(h) = held.take() {
        assert!(
            tokio::time::Instant::now() < h.lease.deadline(),
            "{code}: the script outlived the holder's lease; it would overrun"
        );
        h.leave(&mut store).await;
    }
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

/// S6, after master 0 was killed while the holder is inside with masters `0..Q`: the
/// holder's other masters are clogged and the rest healed, so a contender, trying from now
/// on, can only win with master 0, which comes back empty `ttl_max·(1+ρ) + 200 ms` after
/// its crash. The holder stays inside until shortly before its deadline, independently of
/// the restart. The contender must get in, and only after the holder's deadline (a restart
/// within the holder's lease lets it in while the holder is inside).
async fn delayed_restart(
    mut env: Env,
    held: Held,
    mut store: redis::aio::MultiplexedConnection,
    urls: Vec<String>,
    crashed: Instant,
    q: usize,
) -> Outcome {
    let resource = env.resource(0);
    for proxy in &env.proxies[1..q] {
        proxy.set_mode(Mode::Blackhole);
    }
    for proxy in &env.proxies[q..] {
        proxy.heal();
    }
    let restart_after = HOLD_TTL.mul_f64(1.01) + Duration::from_millis(200);
    let contender = build(
        client_over(urls).ttl(TTL).retry(
            Retry::new()
                .attempts(10_000)
                .wait(restart_after + Duration::from_secs(2)),
        ),
        None,
    );
    let rec = env.history.recorder("S6-contender", &resource);
    let store_url = env.store.url();
    let rival = tokio::spawn(async move {
        let mut store = crate::support::raw(&store_url).await;
        match enter(&contender, rec, &mut store).await {
            Ok(c) => {
                c.leave(&mut store).await;
                Ok(())
            }
            Err((_, e)) => Err(e),
        }
    });
    // A careful holder works until shortly before its deadline, then leaves; master 0
    // restarts on its own schedule.
    let holder = async {
        sleep(
            held.lease
                .remaining()
                .saturating_sub(Duration::from_millis(150)),
        )
        .await;
        assert!(
            held.lease.remaining() > Duration::ZERO,
            "S6: holder too slow"
        );
        held.leave(&mut store).await;
    };
    let cluster = &mut env.cluster;
    let restart = async {
        sleep(restart_after.saturating_sub(crashed.elapsed())).await;
        cluster.server_mut(0).restart(false).await.unwrap();
        crashed.elapsed()
    };
    let ((), restarted) = tokio::join!(holder, restart);
    env.note(format!(
        "master 0 restarted {} ms after its crash",
        restarted.as_millis()
    ));
    match rival.await.unwrap() {
        Ok(()) => {
            let history = env.history.snapshot();
            let at = |client: &str, op: Op| {
                history
                    .iter()
                    .find(|e| e.client == client && e.op == op)
                    .map(|e| (e.t_ns, e.deadline_ns))
            };
            let (_, deadline) = at("S6-holder", Op::AcqOk).unwrap();
            let (left, _) = at("S6-holder", Op::CsEnd).unwrap();
            let (tried, _) = at("S6-contender", Op::AcqStart).unwrap();
            let (got_in, _) = at("S6-contender", Op::AcqOk).unwrap();
            let deadline = deadline.unwrap();
            if tried >= left {
                env.violation("the contender did not try while the holder was inside");
            }
            if got_in <= deadline {
                env.violation(format!(
                    "the contender got in {} ms before the holder's deadline",
                    (deadline - got_in) / 1_000_000
                ));
            } else {
                env.note(format!(
                    "contender in {} ms after the holder's deadline",
                    (got_in - deadline) / 1_000_000
                ));
            }
        }
        Err(e) => env.violation(format!(
            "the contender never got in after the restart: {:?}",
            e.kind()
        )),
    }
    for proxy in &env.proxies {
        proxy.heal();
    }
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

// Expected results: BR (baseline Redlock) fails S5, S8, S9 and S15. Restart quarantine
// (RSV) turns S5, S8 and S9 to HOLD; it cannot see a clock jump, so S15 still breaks the
// lease, and fencing (checker 3) keeps the storage safe there.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_immediate_restart_without_data_n3() {
    bare_majority(
        "S5",
        "immediate restart, no persistence",
        3,
        Fault::RestartEmpty,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_immediate_restart_without_data_n5() {
    bare_majority(
        "S5",
        "immediate restart, no persistence",
        5,
        Fault::RestartEmpty,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_delayed_restart_n3() {
    bare_majority(
        "S6",
        "delayed restart (> TTL), no persistence",
        3,
        Fault::DelayedRestart,
        Expect::Hold,
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_restart_with_aof_always_n3() {
    bare_majority(
        "S7",
        "immediate restart, appendfsync always",
        3,
        Fault::RestartAof,
        Expect::Hold,
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_restart_with_aof_always_n5() {
    bare_majority(
        "S7",
        "immediate restart, appendfsync always",
        5,
        Fault::RestartAof,
        Expect::Hold,
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_restart_from_stale_snapshot_n3() {
    bare_majority(
        "S8",
        "restart from a stale snapshot",
        3,
        Fault::RestartStale,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_flushall_on_a_member_n3() {
    bare_majority(
        "S9",
        "FLUSHALL on a member, no restart",
        3,
        Fault::Flushall,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_clock_jump_forward_on_a_member_n3() {
    bare_majority(
        "S15",
        "server clock jumps forward past the TTL",
        3,
        Fault::ClockForward,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_clock_jump_forward_on_a_member_n5() {
    bare_majority(
        "S15",
        "server clock jumps forward past the TTL",
        5,
        Fault::ClockForward,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_immediate_restart_without_data_quarantine_n3() {
    bare_majority_with(
        "S5",
        "immediate restart, no persistence",
        3,
        Fault::RestartEmpty,
        Expect::Hold,
        Variant::guards(Guards::RSV),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_restart_from_stale_snapshot_quarantine_n3() {
    bare_majority_with(
        "S8",
        "restart from a stale snapshot",
        3,
        Fault::RestartStale,
        Expect::Hold,
        Variant::guards(Guards::RSV),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_flushall_on_a_member_quarantine_n3() {
    bare_majority_with(
        "S9",
        "FLUSHALL on a member, no restart",
        3,
        Fault::Flushall,
        Expect::Hold,
        Variant::guards(Guards::RSV),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_extension_after_a_member_restarted_quarantine_n3() {
    bare_majority_with(
        "S17",
        "extension after a member restarted empty",
        3,
        Fault::RestartEmpty,
        Expect::Hold,
        Variant {
            extend: true,
            ..Variant::guards(Guards::RSV)
        },
    )
    .await
    .check();
}

/// S15 with fencing: the clock jump still hands the lock to the contender while the holder
/// is inside (checker 1 fires), but the holder's stale write is refused at the register.
pub async fn s15_fenced(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    bare_majority_with(
        "S15",
        "server clock jumps forward past the TTL",
        n,
        Fault::ClockForward,
        expect,
        Variant {
            mutant,
            ..Variant::guards(Guards::RSV_F)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_clock_jump_forward_fenced_n3() {
    s15_fenced(3, None, Expect::Fenced).await.check();
}

/// S20: masters with `appendfsync always` are killed and restarted again and again
/// while clients contend; the clients reconnect each time.
pub async fn s20(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    s20_with(n, mutant, expect, Guards::BR, true).await
}

/// S20 with `guards`, durable masters or not. Without persistence a restarted master
/// forgets its keys (and fence counters), which only restart quarantine makes safe.
pub async fn s20_with(
    n: usize,
    mutant: Option<Mutant>,
    expect: Expect,
    guards: Guards,
    durable: bool,
) -> Outcome {
    let name = format!(
        "repeated kill -9 + restart, {}{}",
        if durable {
            "appendfsync always"
        } else {
            "no persistence"
        },
        guards.label()
    );
    let setup = Setup::new("S20", name, expect, n).persistence(if durable {
        Persistence::AofAlways
    } else {
        Persistence::None
    });
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
        let probe = build(guards.apply(client_over(urls.clone()), TTL), None);
        settle(&probe, &env.prefix).await;
    }
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(guards.apply(client_over(urls.clone()), TTL), mutant)
    });
    let end = Instant::now() + phase();
    let mut restarts = 0;
    for _ in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(100), Duration::from_millis(300)),
        )
        .await;
        let i = env.rng.below(n as u64) as usize;
        env.cluster.server_mut(i).restart(durable).await.unwrap();
        restarts += 1;
    }
    env.note(format!("{restarts} restarts"));
    env.mark_heal();
    // Without persistence, the last restarted master abstains for up to its quarantine
    // window (whole seconds of uptime, so up to 2 s here) after the heal.
    let (settle_for, bound) = if durable {
        (
            Duration::from_millis(2500),
            TTL + Duration::from_millis(1500),
        )
    } else {
        (
            Duration::from_millis(3500),
            TTL + Duration::from_millis(2500),
        )
    };
    sleep(settle_for).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(bound),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_repeated_durable_restarts_n3() {
    s20(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_repeated_durable_restarts_n5() {
    s20(5, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_repeated_restarts_without_persistence_quarantine_n3() {
    s20_with(3, None, Expect::Hold, Guards::RSV, false)
        .await
        .check();
}

/// S20 with fencing over durable masters: a long contended run while masters are killed
/// and restarted; tokens must be unique, in real-time order and stable (checker 4), and
/// the fenced register must lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_repeated_durable_restarts_fenced_n3() {
    let out = s20_with(3, None, Expect::Hold, Guards::RSV_F, true).await;
    out.check();
    assert!(
        out.tokens > 0,
        "{}\nno acquisition carried a token",
        out.line
    );
    assert_eq!(
        out.tokens, out.acquired,
        "{}\nan acquisition with fencing on had no token",
        out.line
    );
}

/// S21's contending clients (on two resources).
const S21_WORKERS: usize = 8;
/// Fenced acquisitions per phase of S21: each resource must get this many tokens.
const S21_PHASE_TOKENS: usize = 2;
/// The longest an S21 phase may take to issue them: the client's reconnect backoff at its
/// cap (1 s) for the master restarted last, a TTL for keys it restored from before its
/// kill (their holders released while it was down), and slack.
const S21_PHASE_LIMIT: Duration = Duration::from_millis(3000);

/// Fenced acquisitions of `resource` that started after `from_ns` and returned a token.
fn tokens_started_after(history: &[crate::event::Event], resource: &str, from_ns: u64) -> usize {
    let started: std::collections::BTreeSet<(&str, u64)> = history
        .iter()
        .filter(|e| e.op == Op::AcqStart && e.t_ns > from_ns && e.resource == resource)
        .map(|e| (e.client.as_str(), e.attempt))
        .collect();
    history
        .iter()
        .filter(|e| {
            e.op == Op::AcqOk
                && e.token.is_some()
                && started.contains(&(e.client.as_str(), e.attempt))
        })
        .count()
}

/// Checker of S21's liveness: awaits, for at most [`S21_PHASE_LIMIT`], until every
/// resource got [`S21_PHASE_TOKENS`] tokens from acquisitions that started after
/// `from_ns`, and (when `workers` is set) that many distinct workers got a token.
/// Records a violation naming `phase` if they never came, and returns whether they did.
async fn fenced_phase_liveness(
    env: &mut Env,
    resources: &[String],
    workers: Option<usize>,
    phase: &str,
    from_ns: u64,
) -> bool {
    let give_up = Instant::now() + S21_PHASE_LIMIT;
    loop {
        let history = env.history.snapshot();
        let counts: Vec<usize> = resources
            .iter()
            .map(|r| tokens_started_after(&history, r, from_ns))
            .collect();
        let fenced: std::collections::BTreeSet<&str> = history
            .iter()
            .filter(|e| e.op == Op::AcqOk && e.token.is_some())
            .map(|e| e.client.as_str())
            .collect();
        if counts.iter().all(|c| *c >= S21_PHASE_TOKENS)
            && workers.is_none_or(|w| fenced.len() >= w)
        {
            return true;
        }
        if Instant::now() >= give_up {
            env.violation(format!(
                "fenced_phase_liveness: {phase}: tokens per resource {counts:?}, workers \
                 with a token {}, within {} ms (need {S21_PHASE_TOKENS} each{})",
                fenced.len(),
                S21_PHASE_LIMIT.as_millis(),
                workers.map_or(String::new(), |w| format!(", {w} workers"))
            ));
            return false;
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// S21: a rolling restart of durable masters (`appendfsync always`) under fenced
/// contention: each master in turn is killed (-9) and restarted with its data, twice
/// round, and once more the first so the last one restarted is needed too. While a
/// master is down, a fenced quorum needs every other master, including the one restarted
/// just before: a client that stopped counting masters it saw restart would have none
/// left by the second kill. So every phase (while each master is down, and after it is
/// back) must issue tokens on every resource ([`fenced_phase_liveness`]), and the run
/// must stay clean, tokens and fenced register included.
pub async fn s21(n: usize, expect: Expect) -> Outcome {
    let name = format!(
        "rolling kill -9 + restart with data, twice round, appendfsync always{}",
        Guards::RSV_F.label()
    );
    let setup = Setup::new("S21", name, expect, n).persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    seed_epochs(&env.cluster).await;
    let probe = build(Guards::RSV_F.apply(client_over(urls.clone()), TTL), None);
    settle(&probe, &env.prefix).await;
    let resources = [env.resource(0), env.resource(1)];
    let workers = env.spawn_workers(S21_WORKERS, 2, Work::default(), |_| {
        build(Guards::RSV_F.apply(client_over(urls.clone()), TTL), None)
    });
    // Every worker got a token before the first kill, so its client is connected to the
    // masters: each restart is one it sees.
    let mut phases = 0;
    let mut slowest = Duration::ZERO;
    let began = Instant::now();
    let warm =
        fenced_phase_liveness(&mut env, &resources, Some(S21_WORKERS), "all masters up", 0).await;
    slowest = slowest.max(began.elapsed());
    'rolling: for k in 0..=2 * n {
        if !warm {
            break;
        }
        let i = k % n;
        for back in [false, true] {
            if back {
                env.cluster.server_mut(i).restart(true).await.unwrap();
            } else {
                env.cluster.server_mut(i).kill().unwrap();
            }
            let phase = format!(
                "master {i} {} (restart {} of {})",
                if back { "back" } else { "down" },
                k + 1,
                2 * n + 1
            );
            let began = Instant::now();
            if !fenced_phase_liveness(&mut env, &resources, None, &phase, now_ns()).await {
                break 'rolling;
            }
            slowest = slowest.max(began.elapsed());
            phases += 1;
        }
    }
    env.note(format!(
        "{} phases issued tokens, the slowest in {} ms",
        phases + usize::from(warm),
        slowest.as_millis()
    ));
    env.mark_heal();
    sleep(Duration::from_millis(1500)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1500)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_rolling_durable_restarts_fenced_n3() {
    let out = s21(3, Expect::Hold).await;
    out.check();
    assert_eq!(
        out.tokens, out.acquired,
        "{}\nan acquisition with fencing on had no token",
        out.line
    );
    let unfit = out.failures.get("Misconfigured").copied().unwrap_or(0);
    assert_eq!(
        unfit, 0,
        "{}\ndurable masters were refused for fencing",
        out.line
    );
}

/// S21's companion: the same fenced clients over masters without persistence, once they
/// left restart quarantine. The first fenced acquire fails at once (one attempt, long
/// before its budget) with `Misconfigured`, which is not retryable and names the setting
/// to change; every master says why, and no lock key is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_fenced_acquire_on_non_durable_masters_fails_at_once_n3() {
    let setup = Setup::new(
        "S21n",
        "a fenced acquire on masters without persistence",
        Expect::Hold,
        3,
    );
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    seed_epochs(&env.cluster).await;
    let client = build(Guards::RSV_F.apply(client_over(urls), TTL), None);
    // This very client must see the masters vote (a process younger than a second reads
    // as uptime 0, so another client's settling is not enough): an unfenced acquire.
    let unfenced = redquorum::AcquireOptions::new().fencing(false).attempts(1);
    let settle_key = format!("{}settle", env.prefix);
    crate::support::wait_until(
        Duration::from_secs(10),
        "masters vote for this client",
        || {
            let (client, key, options) = (client.clone(), settle_key.clone(), unfenced.clone());
            async move {
                match client.acquire_with(&key, &options).await {
                    Ok(lease) => lease.release().await.is_ok(),
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    let resource = env.resource(0);
    let started = Instant::now();
    let err = client.acquire(&resource).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.attempts(), 1, "{err}");
    assert!(
        took < Duration::from_millis(500),
        "took {took:?}, not at once (budget 2 s): {err}"
    );
    let text = err.to_string();
    assert!(text.contains("appendfsync always"), "{text}");
    // The write-back's round ends once a quorum cannot accept: the last master may still
    // be pending then, but every master that answered must say why it does not count.
    let answered: Vec<&MasterOutcome> = err
        .masters()
        .iter()
        .map(|r| r.outcome())
        .filter(|o| !matches!(o, MasterOutcome::Pending))
        .collect();
    assert!(answered.len() >= 2, "{err}");
    for outcome in answered {
        assert!(
            matches!(outcome, MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Misconfigured),
            "{err}"
        );
    }
    env.note(format!("failed in {} ms: {err}", took.as_millis()));
    let out = env
        .finish(
            Workers::none(),
            Checks {
                keys_may_expire: false,
                ..Checks::SCRIPTED
            },
        )
        .await;
    out.check();
    assert_eq!(
        out.keys_left, 0,
        "{}
the failed acquire left its keys",
        out.line
    );
}
