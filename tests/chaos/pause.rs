//! S3 (a minority stalls: SIGSTOP, DEBUG SLEEP, CLIENT PAUSE) and S4 (SIGSTOP a majority).

use redquorum::{Retry, Waiting};
use std::time::Duration;

use futures::future::try_join_all;
use redquorum::Mutant;
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::now_ns;

/// S3: random minorities stall for TTL/4, TTL or 5·TTL, by signal or by their own
/// commands. Acquisition must never wait on them. A short run makes its first stall the
/// 5·TTL one (then shorter ones); a soak draws all three at random.
pub async fn s3(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S3",
        "stall a minority: STOP, DEBUG SLEEP, CLIENT PAUSE",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let end = Instant::now() + phase();
    let mut stalls = [0u32; 3];
    let mut longest = 0;
    for round in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(50), Duration::from_millis(200)),
        )
        .await;
        let k = 1 + env.rng.below((n - (n / 2 + 1)) as u64) as usize;
        let victims = env.rng.pick(n, k);
        let d = if soak() {
            [TTL / 4, TTL, TTL * 5][env.rng.below(3) as usize]
        } else if round == 0 {
            TTL * 5
        } else {
            [TTL / 4, TTL][env.rng.below(2) as usize]
        };
        if d == TTL * 5 {
            longest += 1;
        }
        let kind = env.rng.below(3) as usize;
        stalls[kind] += 1;
        match kind {
            0 => {
                for &i in &victims {
                    env.cluster.server_mut(i).pause().unwrap();
                }
                sleep(d).await;
                for &i in &victims {
                    env.cluster.server_mut(i).resume().unwrap();
                }
            }
            1 => {
                let servers = &env.cluster;
                try_join_all(victims.iter().map(|&i| servers.server(i).debug_sleep(d)))
                    .await
                    .unwrap();
            }
            _ => {
                for &i in &victims {
                    env.cluster.server(i).client_pause(d).await.unwrap();
                }
                sleep(d).await;
            }
        }
    }
    env.note(format!(
        "stalls: {} SIGSTOP, {} DEBUG SLEEP, {} CLIENT PAUSE, {longest} of them 5·TTL",
        stalls[0], stalls[1], stalls[2]
    ));
    env.mark_heal();
    sleep(Duration::from_millis(1500)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1000)),
            // The wait budget (2 s) plus one node timeout and scheduling slack: an acquire
            // that waited on a stalled master would take the whole stall.
            acquire_bound: Some(Duration::from_millis(2600)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_stall_minority_n3() {
    s3(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_stall_minority_n5() {
    s3(5, None, Expect::Hold).await.check();
}

/// How long S4 keeps the majority stopped.
const S4_STOP: Duration = Duration::from_millis(2500);
/// The attempts each S4 acquire may make: its attempts, not its wait budget, end it.
const S4_ATTEMPTS: u32 = 4;
/// The workers' wait budget in S4: far above what their attempts can take, so an acquire
/// that ends at the budget waited on stopped masters instead of timing them out.
const S4_WAIT: Duration = Duration::from_millis(2500);
const _: () = assert!(S4_WAIT.as_millis() >= 8 * attempts_time(S4_ATTEMPTS).as_millis());

/// S4: a majority is stopped for 2.5 s. Clients make at most [`S4_ATTEMPTS`] attempts
/// (no release notices and no queue, so none is free) within a budget of 2.5 s. No acquisition may
/// succeed meanwhile; each must fail after its attempts, every one cut at a node timeout
/// (an acquire that waited on a stopped master would sit until the resume or its
/// budget); and the lock is available again within a TTL of the resume.
pub async fn s4(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S4", "SIGSTOP a majority for 2.5 s", expect, n);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let round = measure_round(&build(client_over(urls.clone()), None), &env.prefix).await;
    env.note(format!(
        "acquire bound from {S4_ATTEMPTS} attempts and a measured round of {:.1} ms",
        round.as_secs_f64() * 1e3
    ));
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        // Timed retries, not the queue: the bound counts retry pauses and rounds. A queued
        // waiter's attempts are its refreshes; the H scenarios and tests/handoff.rs bound
        // those.
        let client = client_over(urls.clone())
            .retry(Retry::new().attempts(S4_ATTEMPTS).wait(S4_WAIT))
            .waiting(Waiting::new().notifications(false).handoff(false));
        build(client, mutant)
    });
    sleep(
        env.rng
            .between(Duration::from_millis(200), Duration::from_millis(500)),
    )
    .await;
    let victims = env.rng.pick(n, n / 2 + 1);
    for &i in &victims {
        env.cluster.server_mut(i).pause().unwrap();
    }
    let stopped_ns = now_ns();
    sleep(S4_STOP).await;
    // Only an acquire call that started after the stop surely had no quorum to win.
    let granted = successes_started_between(&env, stopped_ns, now_ns());
    if granted > 0 {
        env.violation(format!(
            "{granted} acquisitions started and succeeded with a majority stopped"
        ));
    }
    for &i in &victims {
        env.cluster.server_mut(i).resume().unwrap();
    }
    env.note(format!("stopped {victims:?}"));
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1000)),
            acquire_bound: Some(attempts_bound(S4_ATTEMPTS, round)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_stop_majority_n3() {
    s4(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_stop_majority_n5() {
    s4(5, None, Expect::Hold).await.check();
}
