//! S16: a master's wall clock jumps backward (its keys live longer): liveness only.
//! (S15, the forward jump, is a bare-majority script in `restart.rs`.)

use std::time::Duration;

use redquorum::Mutant;
use redquorum::testkit::ClockJump;
use tokio::time::{Instant, sleep};

use crate::harness::*;

/// S16: random masters' clocks jump back by TTL/2 while clients contend.
pub async fn s16(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S16", "server clock jumps backward", expect, n);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let end = Instant::now() + phase();
    let pattern = format!("{}*", env.prefix);
    let mut shifted = 0;
    for _ in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(50), Duration::from_millis(250)),
        )
        .await;
        let i = env.rng.below(n as u64) as usize;
        shifted += env
            .cluster
            .server(i)
            .jump_clock(&pattern, ClockJump::Backward(TTL / 2))
            .await
            .unwrap();
    }
    env.note(format!("{shifted} keys lived TTL/2 longer"));
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + TTL / 2 + Duration::from_millis(1000)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_clock_jumps_backward_n3() {
    s16(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_clock_jumps_backward_n5() {
    s16(5, None, Expect::Hold).await.check();
}
