//! S1 (kill -9 a minority, left down) and S2 (kill -9 a majority).

use std::time::Duration;

use redquorum::Mutant;
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::now_ns;

/// S1: a minority is killed at a random moment of the fault phase and stays down.
pub async fn s1(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S1",
        "kill -9 a minority mid-contention, left down",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let at = env.rng.between(Duration::from_millis(200), phase() / 2);
    sleep(at).await;
    let victims = env.rng.pick(n, n - (n / 2 + 1));
    for &i in &victims {
        env.cluster.server_mut(i).kill().unwrap();
    }
    env.note(format!("killed {victims:?} after {} ms", at.as_millis()));
    // Acquisitions must go on without them: liveness is measured from the kill.
    env.mark_heal();
    sleep(phase().saturating_sub(at).max(Duration::from_millis(1500))).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1500)),
            acquire_bound: Some(Duration::from_millis(2600)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_kill_minority_n3() {
    s1(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_kill_minority_n5() {
    s1(5, None, Expect::Hold).await.check();
}

/// S2: a majority is killed; nobody may acquire until it is back (restarted empty only
/// after `ttl_max·(1+ρ) + margin`, the safe delayed restart).
pub async fn s2(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S2", "kill -9 a majority, delayed restart", expect, n);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    sleep(
        env.rng
            .between(Duration::from_millis(200), Duration::from_millis(600)),
    )
    .await;
    let victims = env.rng.pick(n, n / 2 + 1);
    for &i in &victims {
        env.cluster.server_mut(i).kill().unwrap();
    }
    let killed = Instant::now();
    let killed_ns = now_ns();
    let down_for = phase().max(TTL.mul_f64(1.01) + Duration::from_millis(300));
    sleep(down_for).await;
    // An acquire call started after the kill would need a quorum that does not exist.
    let granted = successes_started_between(&env, killed_ns, now_ns());
    if granted > 0 {
        env.violation(format!(
            "{granted} acquisitions succeeded with a majority down"
        ));
    }
    for &i in &victims {
        env.cluster.server_mut(i).restart(false).await.unwrap();
    }
    env.note(format!(
        "killed {victims:?} for {} ms",
        killed.elapsed().as_millis()
    ));
    env.mark_heal();
    // Reconnection backs off up to 1 s after a long outage.
    sleep(Duration::from_millis(3000)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(2000)),
            acquire_bound: Some(Duration::from_millis(2600)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_kill_majority_n3() {
    s2(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_kill_majority_n5() {
    s2(5, None, Expect::Hold).await.check();
}
