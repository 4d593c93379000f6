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

/// S14: the holder's clock runs at `rate` times real time, so it believes its lease lasts
/// `1/rate` times longer than it does; it works until a few ms before the deadline it
/// computed (less a write's time), while a contender retries from the moment the holder got in. A clock slower
/// than the drift allowance (1 %) covers is caught by checker 1; within it, the holder
/// stops before its keys expire.
pub async fn s14(n: usize, rate: f64, expect: Expect) -> Outcome {
    let name = format!(
        "client clock at {:.1} % of real time, holder uses its validity",
        rate * 100.0
    );
    let mut env = Env::start(Setup::new("S14", name, expect, n)).await;
    let urls = env.urls();
    let resource = env.resource(0);
    // Room for a late wake-up, the counter write and `cs_end` before the deadline on a
    // loaded machine (the whole test suite runs beside it in CI).
    let margin = Duration::from_millis(60);
    let holder = build(client_over(urls.clone()).client_clock_rate(rate), None);
    let contender = build(
        client_over(urls)
            .retry_delay(Duration::from_millis(5))
            .retry_jitter(Duration::from_millis(5))
            .retry_attempts(10_000)
            .wait_timeout(TTL * 3),
        None,
    );
    warm(&holder, &env.prefix).await;
    warm(&contender, &env.prefix).await;
    let mut store = env.store().await;
    let mut believed = Vec::new();
    for round in 0..3 {
        let rec = env
            .history
            .recorder(format!("S14-holder-{round}"), &resource);
        let Ok(held) = enter(&holder, rec, &mut store).await else {
            panic!("S14: the holder could not acquire a free lock");
        };
        believed.push(held.lease.remaining().as_millis());
        let rec = env
            .history
            .recorder(format!("S14-contender-{round}"), &resource);
        let store_url = env.store.url();
        let contender = contender.clone();
        let rival = tokio::spawn(async move {
            let mut store = crate::support::raw(&store_url).await;
            match enter(&contender, rec, &mut store).await {
                Ok(h) => {
                    sleep(Duration::from_millis(20)).await;
                    h.leave(&mut store).await;
                    true
                }
                Err(_) => false,
            }
        });
        sleep(held.lease.remaining().saturating_sub(margin)).await;
        // A careful holder: it writes only while its lease (as its clock sees it) lasts.
        if held.lease.remaining() > margin / 2 {
            held.leave(&mut store).await;
        } else {
            held.abandon().await;
        }
        assert!(rival.await.unwrap(), "S14: the contender never got in");
    }
    env.note(format!(
        "holder believed {believed:?} ms of validity on a {} ms TTL",
        TTL.as_millis()
    ));
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_client_clock_half_a_percent_slow_n3() {
    s14(3, 0.995, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_client_clock_twenty_percent_slow_n3() {
    s14(3, 0.8, Expect::Detect).await.check();
}
