//! Deterministic bare-majority scripts (S5–S9, S15) and repeated durable restarts (S20).
//!
//! The script of CHAOS.md section 5: the masters outside a bare majority are clogged (their
//! proxies blackhole), so the holder is granted by exactly masters `0..Q`; then a fault hits
//! master 0 while the holder is inside its critical section; the clog is healed and a
//! contender tries to take masters `{0} ∪ Q..N`, which is a quorum. Whether the contender
//! gets in decides the scenario: a known-unsafe fault must let it in (DETECT) until a later
//! protection (restart quarantine, fencing) keeps it out, which turns the expectation to HOLD
//! in one line below.

use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::Mutant;
use redquorum::testkit::{ClockJump, Mode, Persistence};
use tokio::time::{Instant, sleep};

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

/// Runs the bare-majority script; see the module docs.
pub async fn bare_majority(
    code: &'static str,
    name: &str,
    n: usize,
    fault: Fault,
    expect: Expect,
) -> Outcome {
    let persistence = if fault == Fault::RestartAof {
        Persistence::AofAlways
    } else {
        Persistence::None
    };
    let setup = Setup::new(code, name, expect, n)
        .proxies()
        .persistence(persistence);
    let mut env = Env::start(setup).await;
    env.ttl_max = HOLD_TTL;
    let q = n / 2 + 1;
    let urls = env.urls();
    let resource = env.resource(0);
    let holder = build(
        client_over(urls.clone())
            .ttl(HOLD_TTL)
            .node_timeout(Duration::from_millis(100))
            .retry_attempts(5),
        None,
    );
    warm(&holder, &env.prefix).await;
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
    let granted: Vec<usize> = held
        .lease
        .masters()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.outcome().is_granted())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        granted,
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
    if fault == Fault::DelayedRestart {
        // A careful holder works until shortly before its deadline, then leaves.
        let lease_left = held.as_ref().unwrap().lease.remaining();
        sleep(lease_left.saturating_sub(Duration::from_millis(150))).await;
        let h = held.take().unwrap();
        assert!(
            h.lease.remaining() > Duration::ZERO,
            "{code}: holder too slow"
        );
        h.leave(&mut store).await;
        let wait = HOLD_TTL.mul_f64(1.01) + Duration::from_millis(200);
        sleep(wait.saturating_sub(crashed.elapsed())).await;
        env.cluster.server_mut(0).restart(false).await.unwrap();
        env.note(format!(
            "master 0 restarted {} ms after its crash",
            crashed.elapsed().as_millis()
        ));
    }
    // Master 0 is now empty (or not); the clogged masters come back.
    for proxy in &env.proxies[q..] {
        proxy.heal();
    }
    let contender = build(
        client_over(urls)
            .ttl(TTL)
            .retry_attempts(500)
            .wait_timeout(Duration::from_millis(1200)),
        None,
    );
    let rec = env.history.recorder(format!("{code}-contender"), &resource);
    match enter(&contender, rec, &mut store).await {
        Ok(c) => {
            sleep(Duration::from_millis(5)).await;
            c.leave(&mut store).await;
        }
        Err((_, e)) => env.note(format!("contender kept out: {:?}", e.kind())),
    }
    if let Some(h) = held.take() {
        assert!(
            h.lease.remaining() > Duration::ZERO,
            "{code}: the script outlived the holder's lease; it would overrun"
        );
        h.leave(&mut store).await;
    }
    env.finish(
        Workers::none(),
        Checks {
            keys_may_expire: true,
            ..Checks::default()
        },
    )
    .await
}

// Expected results: BR (baseline Redlock) as today. Restart quarantine turns S5 and S8
// to HOLD; fencing (checker 3) makes S9 and S15 harmless at the storage.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_immediate_restart_without_data_n3() {
    bare_majority(
        "S5",
        "immediate restart, no persistence",
        3,
        Fault::RestartEmpty,
        Expect::Detect,
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
        Expect::Detect,
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
        Expect::Detect,
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
        Expect::Detect,
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
        Expect::Detect,
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
        Expect::Detect,
    )
    .await
    .check();
}

/// S20: masters with `appendfsync always` are killed and restarted again and again
/// while clients contend; the clients reconnect each time.
pub async fn s20(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S20",
        "repeated kill -9 + restart, appendfsync always",
        expect,
        n,
    )
    .persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
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
        env.cluster.server_mut(i).restart(true).await.unwrap();
        restarts += 1;
    }
    env.note(format!("{restarts} restarts"));
    env.mark_heal();
    sleep(Duration::from_millis(2500)).await;
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
async fn s20_repeated_durable_restarts_n3() {
    s20(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_repeated_durable_restarts_n5() {
    s20(5, None, Expect::Hold).await.check();
}
