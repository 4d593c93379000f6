//! S0 (contention without faults) and S19 (split votes and retry storms).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::Mutant;
use redquorum::testkit::{Latency, Mode, Persistence, Proxy};
use tokio::time::sleep;

use crate::harness::*;

const ACQUIRE_LUA: &str = include_str!("../../src/scripts/acquire.lua");
const FENCE_LUA: &str = include_str!("../../src/scripts/fence.lua");

/// S0: 8 clients on 2 resources, no faults.
pub async fn s0(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let mut env = Env::start(Setup::new("S0", "contention, no faults", expect, n)).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    env.mark_heal();
    sleep(phase()).await;
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
async fn s0_contention_n3() {
    s0(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s0_contention_n5() {
    s0(5, None, Expect::Hold).await.check();
}

/// S19: C > N clients start every round at the same instant (a barrier) and race for one
/// resource with a few quick retries; winners do their section and release. Once with no
/// retry jitter, once with the default jitter; the share of rounds nobody won (livelock)
/// is reported for both.
pub async fn s19(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S19",
        "split votes: simultaneous starts, jitter 0 / default",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    let clients = n + 2;
    let urls = env.urls();
    let resource = env.resource(0);
    let store_url = env.store.url();
    let mut livelock = Vec::new();
    for jitter in [Duration::ZERO, Duration::from_millis(20)] {
        let barrier = Arc::new(tokio::sync::Barrier::new(clients));
        let rounds = (phase().as_millis() / 100).clamp(10, 600) as usize;
        let won = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..clients {
            let client = build(
                client_over(urls.clone())
                    .retry_attempts(3)
                    .retry_delay(Duration::from_millis(2))
                    .retry_jitter(jitter),
                mutant,
            );
            warm(&client, &env.prefix).await;
            let mut rec = env
                .history
                .recorder(format!("S19-j{}-c{i}", jitter.as_millis()), &resource);
            let (barrier, won, store_url) =
                (Arc::clone(&barrier), Arc::clone(&won), store_url.clone());
            let mut rng = Rng::new(env.rng.next_u64());
            tasks.push(tokio::spawn(async move {
                let mut store = crate::support::raw(&store_url).await;
                let mut wins = vec![false; rounds];
                for win in wins.iter_mut() {
                    barrier.wait().await;
                    rec.acq_start();
                    match client.acquire(rec.resource()).await {
                        Ok(lease) => {
                            rec.acq_ok(&lease);
                            *win = true;
                            let cs = Cs::Short(Duration::from_millis(10));
                            critical_section(&mut rec, &lease, &mut store, cs, &mut rng).await;
                            release(&mut rec, lease).await;
                        }
                        Err(e) => rec.acq_fail(&e),
                    }
                    barrier.wait().await;
                }
                won.fetch_add(wins.iter().filter(|w| **w).count(), Ordering::SeqCst);
                wins
            }));
        }
        let mut any = vec![false; rounds];
        for t in tasks {
            for (r, w) in t.await.unwrap().into_iter().enumerate() {
                any[r] |= w;
            }
        }
        let empty = any.iter().filter(|w| !**w).count();
        livelock.push((jitter, empty, rounds, won.load(Ordering::SeqCst)));
    }
    for (jitter, empty, rounds, won) in &livelock {
        env.note(format!(
            "jitter {} ms: {empty}/{rounds} rounds nobody won, {won} wins",
            jitter.as_millis()
        ));
    }
    // With jitter, contenders that collided must make progress.
    if livelock
        .iter()
        .any(|(j, _, _, won)| !j.is_zero() && *won == 0)
    {
        env.violation("no progress with jitter");
    }
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_split_votes_n3() {
    s19(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_split_votes_n4() {
    s19(4, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_split_votes_n5() {
    s19(5, None, Expect::Hold).await.check();
}

/// How late master 1's replies reach Y in S19r.
const SLOW_REPLY: Duration = Duration::from_millis(400);

/// S19r: a retry storm with no pause between attempts, against a master whose script cache
/// was just flushed (`SCRIPT FLUSH`) behind a link that delays its replies by
/// [`SLOW_REPLY`] (D).
///
/// The script: master 1's scripts are flushed (no lock is held); master 0 holds a foreign
/// key (some other client's); Z takes masters 1 and 2. Y retries back to back: each attempt
/// is refused at once by masters 0 and 2 while master 1's answer is still on its way, so
/// each failed attempt's release goes to master 1. Those releases meet `NOSCRIPT` there and
/// are re-sent after a `SCRIPT LOAD`, two slow replies later: a release sent at `s` runs on
/// master 1 at `s + 2D`. Z leaves as soon as the first of them met `NOSCRIPT` (at `s0`),
/// and Y's next attempt (at `w`) wins masters 1 and 2; the foreign key goes; W tries while
/// Y is inside. With a fresh value per attempt the late releases cannot match Y's key, and
/// W stays out.
///
/// With one value for every attempt the late releases delete Y's key on master 1. With
/// fencing, the write-back checks that key once, at `w + D` (after the grant's slow
/// reply): every late release was sent in `[s0, w)` and runs at `s + 2D`, after the check
/// as long as `w − s0 < D` (the report states how soon Z left, against D). The check then
/// passes, and the key goes right after it. That fails only when Z's release reaches
/// master 2 before master 1 and one of Y's attempts falls in between: it is granted
/// master 2, waits D for master 1's refusal, and its successor's `w` comes too late.
pub async fn s19r(mutant: Option<Mutant>, expect: Expect) -> Outcome {
    s19r_with(mutant, expect, Guards::BR).await
}

/// S19r with `guards`. With fencing, the masters are durable and every acquisition's
/// write-back checks that the lock still holds its value: a value shared by all of Y's
/// attempts passes that check for whichever attempt set the key, so it must still be
/// caught there (docs/testing.md §5).
pub async fn s19r_with(mutant: Option<Mutant>, expect: Expect, guards: Guards) -> Outcome {
    let setup = Setup::new(
        "S19r",
        format!(
            "retry storm, zero delay, one slow reply path{}",
            guards.label()
        ),
        expect,
        3,
    )
    .persistence(if guards.fencing {
        Persistence::AofAlways
    } else {
        Persistence::None
    });
    let mut env = Env::start(setup).await;
    let ttl = Duration::from_millis(3000);
    env.ttl_max = ttl;
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
    }
    let with_guards = |builder| guards.apply(builder, ttl);
    let direct = env.urls();
    let slow = Proxy::for_server(env.cluster.server(1)).await.unwrap();
    slow.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(SLOW_REPLY, Duration::ZERO),
    });
    let mut y_urls = direct.clone();
    y_urls[1] = slow.url();
    let resource = env.resource(0);
    let y = build(
        with_guards(
            client_over(y_urls)
                .ttl(ttl)
                // A late release (two slow replies) must finish within one node timeout.
                .node_timeout(SLOW_REPLY * 3)
                // Connecting takes a few slow round trips (with quarantine, the epoch too).
                .connect_timeout(SLOW_REPLY * 10)
                .retry_attempts(100_000)
                .retry_delay(Duration::ZERO)
                .retry_jitter(Duration::ZERO)
                .wait_timeout(Duration::from_secs(4)),
        ),
        mutant,
    );
    // Z and W use a node timeout that covers the three round trips of a script call on a
    // master without the script (see the NOSCRIPT test in `known_bugs.rs`), so their own
    // releases are not cut short on a loaded machine. W keeps trying for longer than one
    // slow reply: without fencing, a late release may land up to D after Y got in.
    let z = build(
        with_guards(
            client_over(direct.clone())
                .ttl(ttl)
                .node_timeout(Duration::from_millis(300)),
        ),
        None,
    );
    let w = build(
        with_guards(
            client_over(direct.clone())
                .ttl(ttl)
                .node_timeout(Duration::from_millis(300))
                .retry_attempts(1000)
                .wait_timeout(SLOW_REPLY + Duration::from_millis(300)),
        ),
        None,
    );
    let mut m0 = crate::support::raw(&direct[0]).await;
    // Every client's connection to master 1 (Y's opens through the slow link) must have
    // loaded the scripts before they are flushed: a connection loads them with its first
    // request, so each client takes a lock that only masters 1 and 2 can grant (master 0
    // holds a foreign key for it). Flushing earlier would let Y's connection load the
    // scripts afterwards, and its releases would never meet NOSCRIPT.
    let through_m1 = format!("{}through-m1", env.prefix);
    let _: () = m0.set(&through_m1, "foreign").await.unwrap();
    for c in [&y, &z, &w] {
        if guards.quarantine {
            settle(c, &env.prefix).await;
        }
        c.acquire(&through_m1)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let _: () = m0.del(&through_m1).await.unwrap();
    let m1_url = direct[1].clone();
    // Master 1's script cache is flushed a moment before (with no lock held). Clients load
    // their scripts when they connect, but these connections stay open, so the next
    // releases sent to it take three round trips (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA),
    // and later commands on the connection overtake them.
    let mut m1 = crate::support::raw(&direct[1]).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut m1)
        .await
        .unwrap();
    // Acquisitions and write-backs run scripts too: only the release is left out of the
    // cache, so that acquisitions keep their order and only releases run late.
    for source in [ACQUIRE_LUA, FENCE_LUA] {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query_async(&mut m1)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg(&resource)
        .arg("foreign")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut m0)
        .await
        .unwrap();
    let mut store = env.store().await;
    let held_z = match enter(&z, env.history.recorder("S19r-Z", &resource), &mut store).await {
        Ok(held) => held,
        Err((_, e)) => panic!("S19r: Z could not take masters 1 and 2: {e}"),
    };
    let (y_rec, y_store_url) = (env.history.recorder("S19r-Y", &resource), env.store.url());
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
    let y_task = tokio::spawn(async move {
        let mut store = crate::support::raw(&y_store_url).await;
        match enter(&y, y_rec, &mut store).await {
            Ok(held) => {
                let granted = granted(held.lease.masters());
                let _ = inside_tx.send(Some((granted, held.lease.value().to_owned())));
                let _ = leave_rx.await;
                held.leave(&mut store).await;
            }
            Err(_) => {
                let _ = inside_tx.send(None);
            }
        }
    });
    // Z leaves as soon as Y's first release has met NOSCRIPT on master 1: the releases Y
    // sends in the next D (before that reply brings Y to load the script) all run late.
    let stats = crate::support::raw(&m1_url).await;
    crate::support::wait_until(Duration::from_secs(5), "Y's release meets NOSCRIPT", || {
        let mut stats = stats.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("errorstats")
                .query_async(&mut stats)
                .await
                .unwrap();
            info.contains("errorstat_NOSCRIPT")
        }
    })
    .await;
    let noscript_seen = tokio::time::Instant::now();
    held_z.leave(&mut store).await;
    let z_left = noscript_seen.elapsed();
    let y_inside = tokio::time::timeout(Duration::from_secs(6), inside_rx)
        .await
        .unwrap()
        .unwrap_or(None);
    if let Some((granted, value)) = y_inside {
        env.note(format!(
            "Y granted by {granted:?}; Z left {} ms after the first NOSCRIPT was seen (the late \
             releases follow the write-back if that is well under D = {} ms)",
            z_left.as_millis(),
            SLOW_REPLY.as_millis()
        ));
        // The foreign holder goes away; W tries while Y is inside.
        let _: () = redis::cmd("DEL")
            .arg(&resource)
            .query_async(&mut m0)
            .await
            .unwrap();
        match enter(&w, env.history.recorder("S19r-W", &resource), &mut store).await {
            Ok(held_w) => {
                held_w.leave(&mut store).await;
            }
            Err((_, e)) => env.note(format!("W kept out: {:?}", e.kind())),
        }
        let on_m1: Option<String> = redis::cmd("GET")
            .arg(&resource)
            .query_async(&mut m1)
            .await
            .unwrap();
        env.note(format!(
            "Y's key on master 1 after W's try: {}",
            if on_m1.as_deref() == Some(value.as_str()) {
                "present"
            } else {
                "GONE"
            }
        ));
    } else {
        env.note("Y never got in");
    }
    let _ = leave_tx.send(());
    y_task.await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&resource)
        .query_async(&mut m0)
        .await
        .unwrap();
    let out = env.finish(Workers::none(), Checks::SCRIPTED).await;
    drop(slow);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19r_zero_delay_retry_storm_n3() {
    s19r(None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19r_zero_delay_retry_storm_fenced_n3() {
    s19r_with(None, Expect::Hold, Guards::RSV_F).await.check();
}
