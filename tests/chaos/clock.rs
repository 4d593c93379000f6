//! Clock scenarios: S14 (a slow client clock), S15c (forward jumps on two masters in
//! crossing order, against the fencing write-back) and S16 (a master's wall clock jumps
//! backward: its keys live longer, liveness only). (S15, one forward jump, is a
//! bare-majority script in `restart.rs`.)

use redquorum::{Retry, Timeouts};
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::{Mutant, Redlock};
use redquorum_testkit::{ClockJump, Latency, Mode, Persistence, Proxy};
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::now_ns;

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
/// `1/rate` times longer than it does. It does its work at once and then holds on: its
/// section ends at the deadline it computed, by its own clock, translated to real time
/// (recorded there however late the holder wakes up). A contender retries from the moment
/// the holder got in. A clock slower than the drift allowance (1 %) covers is caught by
/// checker 1; within it, the holder's deadline comes before its keys expire, so the
/// contender cannot get in first, whatever the machine's load.
pub async fn s14(n: usize, rate: f64, expect: Expect) -> Outcome {
    let name = format!(
        "client clock at {:.1} % of real time, holder uses its validity",
        rate * 100.0
    );
    let mut env = Env::start(Setup::new("S14", name, expect, n)).await;
    let urls = env.urls();
    let resource = env.resource(0);
    let holder = build(client_over(urls.clone()), None);
    holder.plant_clock_rate(rate).unwrap();
    let contender = build(
        client_over(urls).retry(
            Retry::new()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(5))
                .attempts(10_000)
                .wait(TTL * 3),
        ),
        None,
    );
    warm(&holder, &env.prefix).await;
    warm(&contender, &env.prefix).await;
    let mut store = env.store().await;
    let mut believed = Vec::new();
    for round in 0..3 {
        let mut rec = env
            .history
            .recorder(format!("S14-holder-{round}"), &resource);
        rec.acq_start();
        let lease = holder.acquire(&resource).await.unwrap();
        // Its deadline in real time (the lease's remaining time runs at `rate`).
        believed.push(lease.remaining().as_millis());
        let deadline_ns = rec.acq_ok_at_rate(&lease, rate);
        let held = Held::inside(rec, lease, &mut store).await;
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
        let held = held.write(&mut store).await;
        sleep(Duration::from_nanos(deadline_ns.saturating_sub(now_ns()))).await;
        held.end_at(deadline_ns).await;
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
    s14(3, 0.8, Expect::Detect(Checker::Overlap)).await.check();
}

/// S15c's timings, derived from a round (one acquire and release) measured before the
/// script, so that a loaded machine stretches the windows instead of breaking the script.
#[derive(Debug, Clone, Copy)]
struct Crossing {
    /// How late master 0's replies reach Y: the window in which Y's key there expires,
    /// after its grant and before its write-back (a poll and a clock jump): 8 rounds, at
    /// least 150 ms.
    m0_reply: Duration,
    /// How late Y's requests reach master 1: the script's whole window for X's acquisition
    /// and both clock jumps (a handful of rounds): 25 rounds, at least 500 ms and three
    /// times `m0_reply`.
    m1_request: Duration,
    /// The TTL: long enough for Y's two write-back rounds over its slow link to master 1.
    ttl: Duration,
}

impl Crossing {
    fn from_round(round: Duration) -> Crossing {
        let m0_reply = (round * 8).max(Duration::from_millis(150));
        let m1_request = (round * 25)
            .max(Duration::from_millis(500))
            .max(m0_reply * 3);
        let ttl = (m1_request * 3 + Duration::from_millis(1000)).max(Duration::from_millis(2500));
        Crossing {
            m0_reply,
            m1_request,
            ttl,
        }
    }
}

/// S15c: two clients read the same fence counters and each reaches a write-back quorum,
/// because lock keys expire early (forward clock jumps, TTL-shrink emulation) on two
/// masters in crossing order. The lock is broken on purpose; the question is whether the
/// tokens stay unique. N = 3, durable masters, restart quarantine and fencing on; Y reaches
/// master 0 through a proxy that delays replies and master 1 through one that delays
/// requests, X goes direct. Times from Y's start:
///
/// (With the shortest timings of [`Crossing`]; a slow machine stretches them.)
///
/// 1. 0: Y's `SET` takes masters 0 and 2 (no counter yet); its request to master 1 is on
///    its way until 500 ms. Master 0's grant reaches Y at 150 ms: Y has a quorum, T = 1.
/// 2. Meanwhile master 0's clock jumps, so Y's key there expires, and X takes masters 0
///    and 1 (master 2 refuses: Y's key), reads no counter and writes back T = 1 on both:
///    X holds token 1. Then master 1's clock jumps, so X's key there expires.
/// 3. 150 ms: Y's write-back of T = 1 is written on master 2 and finds no key of Y's on
///    master 0. At 500 ms Y's delayed `SET` takes master 1, and at 650 ms Y's write-back
///    meets X's counter 1 there.
///
/// The strict write-back (`c < T`) reports a conflict on master 1, so Y raises T to 2 and
/// writes it on masters 1 and 2: Y holds token 2, X's later write is refused at the
/// register, and nothing is lost (FENCED). A max-write (`c <= T`, the mutant
/// `WritebackNoGuard`) accepts T = 1 on master 1 and issues token 1 twice; both writes
/// then land at the register and one update is lost.
pub async fn s15c(mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S15c",
        format!(
            "clock jumps on two masters, crossing{}",
            Guards::RSV_F.label()
        ),
        expect,
        3,
    )
    .persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    seed_epochs(&env.cluster).await;
    let direct = env.urls();
    let probe = build(client_over(direct.clone()), None);
    warm(&probe, &env.prefix).await;
    let round = measure_round(&probe, &env.prefix).await;
    let timing = Crossing::from_round(round);
    env.note(format!(
        "measured round {:.1} ms: master 0 replies {} ms late, master 1 requests {} ms, TTL {} ms",
        round.as_secs_f64() * 1e3,
        timing.m0_reply.as_millis(),
        timing.m1_request.as_millis(),
        timing.ttl.as_millis()
    ));
    env.ttl_max = timing.ttl;
    let resource = env.resource(0);
    let pattern = format!("{}*", env.prefix);
    let via_m0 = Proxy::for_server(env.cluster.server(0)).await.unwrap();
    let via_m1 = Proxy::for_server(env.cluster.server(1)).await.unwrap();
    let client = |urls: Vec<String>, node_timeout: Duration| -> Redlock {
        build(
            Guards::RSV_F.apply(
                client_over(urls)
                    .ttl(timing.ttl)
                    .timeouts(Timeouts::new().node(node_timeout))
                    .retry(Retry::new().attempts(1)),
                timing.ttl,
            ),
            mutant,
        )
    };
    let x = client(direct.clone(), Duration::from_millis(100));
    // Y waits for master 1's late replies: its node timeout covers the request delay.
    let y = client(
        vec![via_m0.url(), via_m1.url(), direct[2].clone()],
        timing.m1_request + Duration::from_millis(300),
    );
    // Connections open, scripts loaded and masters out of quarantine before the faults.
    settle(&x, &env.prefix).await;
    settle(&y, &env.prefix).await;
    via_m0.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(timing.m0_reply, Duration::ZERO),
    });
    via_m1.set_mode(Mode::Delay {
        to_server: Latency::new(timing.m1_request, Duration::ZERO),
        to_client: Latency::ZERO,
    });

    let started = Instant::now();
    let y_task = tokio::spawn({
        let rec = env.history.recorder("S15c-Y", &resource);
        let store_url = env.store.url();
        async move {
            let mut store = crate::support::raw(&store_url).await;
            enter(&y, rec, &mut store).await.map_err(|(_, e)| e)
        }
    });
    let m0 = env.cluster.server(0).url();
    let m1 = env.cluster.server(1).url();
    // 1-2: Y's key lands on master 0; its clock jumps before Y hears the grant.
    key_appears(&m0, &resource, "Y's key on master 0").await;
    jump_until_gone(&env, 0, &pattern, &resource, timing.ttl).await;
    let mut store = env.store().await;
    let rec = env.history.recorder("S15c-X", &resource);
    let Ok(x_held) = enter(&x, rec, &mut store).await else {
        panic!("S15c: X could not take masters 0 and 1");
    };
    assert_eq!(
        granted(x_held.lease.masters()),
        [0, 1],
        "S15c: X was not granted masters 0 and 1"
    );
    jump_until_gone(&env, 1, &pattern, &resource, timing.ttl).await;
    let script_took = started.elapsed();
    assert!(
        script_took < timing.m1_request,
        "S15c: the script took {script_took:?}, so Y's request reached master 1 first"
    );
    assert_eq!(
        crate::support::get(&m1, &resource).await,
        None,
        "S15c: master 1 is not free for Y's delayed request"
    );

    // 3: Y's delayed requests reach master 1; it gets a token or fails to.
    let y_held = match y_task.await.unwrap() {
        Ok(held) => Some(held),
        Err(e) => {
            env.note(format!("Y failed: {e}"));
            None
        }
    };
    let token = |h: &Held| h.lease.fencing_token().map(|t| t.get());
    env.note(format!(
        "tokens X={:?} Y={:?}",
        token(&x_held),
        y_held.as_ref().and_then(token)
    ));
    // X writes after Y's fenced read: with distinct tokens the register refuses it.
    x_held.leave(&mut store).await;
    if let Some(h) = y_held {
        h.leave(&mut store).await;
    }
    via_m0.heal();
    via_m1.heal();
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

/// Waits until `key` exists on the master at `url`.
async fn key_appears(url: &str, key: &str, what: &str) {
    let conn = crate::support::raw(url).await;
    crate::support::wait_until(Duration::from_secs(2), what, || {
        let mut conn = conn.clone();
        async move { conn.exists::<_, bool>(key).await.unwrap() }
    })
    .await;
}

/// Jumps master `i`'s clock past every lock key's expiry and waits until `key` is gone.
async fn jump_until_gone(env: &Env, i: usize, pattern: &str, key: &str, ttl: Duration) {
    let server = env.cluster.server(i);
    let shifted = server
        .jump_clock(pattern, ClockJump::Forward(ttl))
        .await
        .unwrap();
    assert!(shifted >= 1, "S15c: no lock key on master {i} to expire");
    let url = server.url();
    crate::support::wait_until(
        Duration::from_secs(1),
        "the lock key expired after the jump",
        || {
            let url = url.clone();
            async move { crate::support::get(&url, key).await.is_none() }
        },
    )
    .await;
}

/// S15c with the real algorithm: the lease breaks, fencing holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15c_crossing_clock_jumps_fenced_n3() {
    s15c(None, Expect::Fenced).await.check();
}
