//! S10 (slow links), S10c (a slow client path, used up validity) and S11 (partitions).

use redquorum::{Retry, Timeouts};
use std::time::Duration;

use redquorum::Mutant;
use redquorum_testkit::{Latency, Mode, Proxy};
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::now_ns;

/// S10: one master's link is slowed by ~1 ms, then about the node timeout, then more than
/// the TTL (stale SETs arrive late); then a majority's links are slowed past the TTL, when
/// every acquisition must fail.
pub async fn s10(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S10", "slow links: one master, then a majority", expect, n).proxies();
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let step = (phase() / 4).max(Duration::from_millis(400));
    let slow = env.rng.below(n as u64) as usize;
    for delay in [
        Duration::from_millis(1),
        NODE_TIMEOUT,
        TTL + Duration::from_millis(200),
    ] {
        let jitter = delay / 4;
        env.proxies[slow].set_mode(Mode::delay(delay, jitter));
        sleep(step).await;
    }
    env.proxies[slow].heal();
    let majority = env.rng.pick(n, n / 2 + 1);
    for &i in &majority {
        env.proxies[i].set_mode(Mode::delay(TTL, Duration::from_millis(50)));
    }
    let slowed_ns = now_ns();
    sleep(step).await;
    // An acquire call started after the slowdown hears from the majority too late.
    let granted = successes_started_between(&env, slowed_ns, now_ns());
    if granted > 0 {
        env.violation(format!(
            "{granted} acquisitions succeeded over a slowed majority"
        ));
    }
    for &i in &majority {
        env.proxies[i].heal();
    }
    env.note(format!("slowed master {slow}, then {majority:?}"));
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    env.finish(
        workers,
        Checks {
            // Stale requests delayed by more than a TTL drain after the heal.
            liveness: Some(TTL * 2 + Duration::from_millis(1000)),
            acquire_bound: Some(Duration::from_millis(2600)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_slow_links_n3() {
    s10(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_slow_links_n5() {
    s10(5, None, Expect::Hold).await.check();
}

/// The reply delay on the slow client's path in S10c.
const SLOW_REPLY: Duration = Duration::from_millis(300);
/// The slow clients' node timeout (above the reply delay) and wait budget in S10c.
const SLOW_NODE_TIMEOUT: Duration = Duration::from_millis(450);
const SLOW_WAIT: Duration = Duration::from_secs(3);

/// S10c: one client reaches every master over a path whose replies take 300 ms (its
/// requests are not delayed), and it works until shortly before its deadline; four clients
/// contend over direct links. The slow client's keys were set ~300 ms before its replies
/// came: its validity must be measured from before it sent them.
pub async fn s10c(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S10c",
        "slow client path, holder uses its validity",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let ttl = Duration::from_millis(1000);
    env.ttl_max = ttl;
    let mut paths = Vec::new();
    for server in env.cluster.servers() {
        let proxy = Proxy::for_server(server).await.unwrap();
        proxy.set_mode(Mode::Delay {
            to_server: Latency::ZERO,
            to_client: Latency::new(SLOW_REPLY, Duration::from_millis(20)),
        });
        paths.push(proxy);
    }
    let slow_urls: Vec<String> = paths.iter().map(Proxy::url).collect();
    let fast_urls = env.urls();
    let round = measure_round(&build(client_over(fast_urls.clone()), None), &env.prefix).await;
    env.note(format!(
        "acquire bound from a measured round of {:.1} ms",
        round.as_secs_f64() * 1e3
    ));
    let slow_work = Work {
        cs: Cs::UseValidity {
            margin: Duration::from_millis(100),
        },
        think: Duration::from_millis(20),
    };
    let slow = env.spawn_workers(2, 1, slow_work, |_| {
        build(
            client_over(slow_urls.clone())
                .ttl(ttl)
                .timeouts(
                    Timeouts::new()
                        .node(SLOW_NODE_TIMEOUT)
                        // Connecting takes two slow round trips: the handshake, then
                        // reading the master's run_id and cluster record.
                        .connect(SLOW_REPLY * 4),
                )
                .retry(Retry::new().wait(SLOW_WAIT)),
            mutant,
        )
    });
    // The fast clients leave the lock free often enough for the slow ones to get it
    // within their wait budget: their release notices reach the slow clients 300 ms
    // late, so at a 60 ms think time both slow clients were starved in about one run of
    // ten, and the scenario then proved nothing about them.
    let fast_work = Work {
        cs: Cs::Short(Duration::from_millis(5)),
        think: Duration::from_millis(150),
    };
    let fast = env.spawn_workers(4, 1, fast_work, |_| {
        build(client_over(fast_urls.clone()).ttl(ttl), mutant)
    });
    env.mark_heal();
    sleep(phase().max(Duration::from_millis(2500))).await;
    let Workers { stop, mut tasks } = slow;
    tasks.extend(fast.into_tasks());
    let workers = Workers::from_parts(stop, tasks);
    let out = env
        .finish(
            workers,
            Checks {
                // The slow clients' wait budget and node timeout, and the measured round.
                acquire_bound: Some(acquire_bound(SLOW_WAIT, SLOW_NODE_TIMEOUT, round)),
                ..Checks::default()
            },
        )
        .await;
    drop(paths);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10c_slow_client_path_n3() {
    s10c(3, None, Expect::Hold).await.check();
}

/// S11: a random minority of masters is blackholed (requests time out instead of
/// failing) in bursts.
pub async fn s11(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S11", "blackhole a minority of masters", expect, n).proxies();
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let end = Instant::now() + phase();
    let mut bursts = 0;
    for _ in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        let k = 1 + env.rng.below((n - (n / 2 + 1)) as u64) as usize;
        let victims = env.rng.pick(n, k);
        for &i in &victims {
            env.proxies[i].set_mode(Mode::Blackhole);
        }
        sleep(env.rng.between(TTL / 4, TTL)).await;
        for &i in &victims {
            env.proxies[i].heal();
        }
        bursts += 1;
        sleep(
            env.rng
                .between(Duration::from_millis(50), Duration::from_millis(200)),
        )
        .await;
    }
    env.note(format!("{bursts} blackhole bursts"));
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
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
async fn s11_blackhole_minority_n3() {
    s11(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_blackhole_minority_n5() {
    s11(5, None, Expect::Hold).await.check();
}

/// S11b: the holder itself is cut off from every master while inside; it cannot release,
/// so the others wait for its keys to expire (the penalty is measured), and it must stop at
/// its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11b_holder_client_partitioned_n3() {
    let setup = Setup::new(
        "S11b",
        "holder client blackholed from all masters",
        Expect::Hold,
        3,
    );
    let mut env = Env::start(setup).await;
    let mut paths = Vec::new();
    for server in env.cluster.servers() {
        paths.push(Proxy::for_server(server).await.unwrap());
    }
    let holder = build(
        client_over(paths.iter().map(Proxy::url).collect()).retry(Retry::new().attempts(200)),
        None,
    );
    warm(&holder, &env.prefix).await;
    let urls = env.urls();
    let others = env.spawn_workers(4, 1, Work::default(), |_| {
        build(client_over(urls.clone()), None)
    });
    sleep(Duration::from_millis(300)).await;
    let mut store = env.store().await;
    let resource = env.resource(0);
    let rec = env.history.recorder("S11b-holder", resource);
    let Ok(mut held) = enter(&holder, rec, &mut store).await else {
        panic!("S11b: the holder could not acquire under contention");
    };
    for path in &paths {
        path.set_mode(Mode::Blackhole);
    }
    let cut_ns = now_ns();
    // A careful holder works on until shortly before its deadline, then stops without
    // writing if its validity is gone; its release cannot reach anyone.
    sleep(
        held.lease
            .remaining()
            .saturating_sub(Duration::from_millis(100)),
    )
    .await;
    if held.lease.remaining() > Duration::from_millis(20) {
        held = held.write(&mut store).await;
    }
    held.rec.cs_end(held.wrote);
    let release = tokio::time::timeout(Duration::from_secs(3), held.lease.release()).await;
    env.note(format!(
        "holder's release while cut off: {}",
        match release {
            Ok(Ok(r)) => format!("reached {}", r.released()),
            Ok(Err(e)) => format!("{:?}", e.kind()),
            Err(_) => "timed out".into(),
        }
    ));
    let next = env
        .history
        .snapshot()
        .iter()
        .filter(|e| {
            e.op == crate::event::Op::CsStart && e.t_ns > cut_ns && e.client != "S11b-holder"
        })
        .map(|e| e.t_ns)
        .min();
    sleep(Duration::from_millis(1500)).await;
    let next = next.or_else(|| {
        env.history
            .snapshot()
            .iter()
            .filter(|e| {
                e.op == crate::event::Op::CsStart && e.t_ns > cut_ns && e.client != "S11b-holder"
            })
            .map(|e| e.t_ns)
            .min()
    });
    match next {
        Some(t) => env.note(format!(
            "others waited {} ms after the holder was cut off (TTL {} ms)",
            (t - cut_ns) / 1_000_000,
            TTL.as_millis()
        )),
        None => env.violation("nobody acquired after the holder was cut off"),
    }
    for path in &paths {
        path.heal();
    }
    env.mark_heal();
    let out = env.finish(others, Checks::SCRIPTED).await;
    drop(paths);
    out.check();
}

/// S11p: clients and masters are split into two sides (masters `0..N/2` and the rest);
/// each side's clients reach only their side's masters. With N = 4 neither side has a
/// quorum; with N = 5 only the larger side has. Then the partition heals.
pub async fn s11p(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S11p",
        "clients and masters split into two sides",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let half = n / 2;
    let mut sides: Vec<Vec<Proxy>> = Vec::new();
    for side in 0..2 {
        let mut paths = Vec::new();
        for (i, server) in env.cluster.servers().iter().enumerate() {
            let proxy = Proxy::for_server(server).await.unwrap();
            if (i < half) != (side == 0) {
                proxy.set_mode(Mode::Blackhole);
            }
            paths.push(proxy);
        }
        sides.push(paths);
    }
    let urls: Vec<Vec<String>> = sides
        .iter()
        .map(|paths| paths.iter().map(Proxy::url).collect())
        .collect();
    let workers = env.spawn_workers(6, 1, Work::default(), |i| {
        build(client_over(urls[i % 2].clone()), mutant)
    });
    sleep(phase()).await;
    for paths in &sides {
        for proxy in paths {
            proxy.heal();
        }
    }
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    let out = env
        .finish(
            workers,
            Checks {
                liveness: Some(TTL + Duration::from_millis(1500)),
                acquire_bound: Some(Duration::from_millis(2600)),
                ..Checks::default()
            },
        )
        .await;
    drop(sides);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11p_two_sided_partition_n4() {
    s11p(4, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11p_two_sided_partition_n5() {
    s11p(5, None, Expect::Hold).await.check();
}
