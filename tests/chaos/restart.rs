//! Deterministic bare-majority scripts (S5–S9, S15) and repeated durable restarts (S20).
//!
//! The script of docs/testing.md §3: the masters outside a bare majority are clogged (their
//! proxies blackhole), so the holder is granted by exactly masters `0..Q`; then a fault hits
//! master 0 while the holder is inside its critical section; the clog is healed and a
//! contender tries to take masters `{0} ∪ Q..N`, which is a quorum. Whether the contender
//! gets in decides the scenario: a known-unsafe fault must let it in (DETECT) until a later
//! protection (restart quarantine, fencing) keeps it out, which turns the expectation to HOLD
//! in one line below.

use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::testkit::{ClockJump, Mode, Persistence};
use redquorum::{MasterOutcome, Mutant};
use tokio::time::{Instant, sleep};

use crate::event::Op;
use crate::harness::*;

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
                .node_timeout(Duration::from_millis(100))
                .retry_attempts(5),
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
                .retry_attempts(500)
                .wait_timeout(Duration::from_millis(1200)),
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
            // abstaining, not by failing to reach it.
            let outcome = e.masters().first().map(|r| r.outcome().clone());
            if guards.quarantine
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
        client_over(urls)
            .ttl(TTL)
            .retry_attempts(10_000)
            .wait_timeout(restart_after + Duration::from_secs(2)),
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
