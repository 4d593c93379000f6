//! S0 (contention without faults) and S19 (split votes and retry storms).

use redquorum::{Retry, Timeouts, Waiting};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redquorum::Mutant;
use redquorum_testkit::{Latency, Mode, Persistence, Proxy};
use tokio::time::sleep;

use crate::harness::*;

/// The scripts as the library sends them (`src/scripts/sources.rs`): `acquire.lua` behind
/// the preamble and `holder.lua`, `fence.lua` behind `value.lua`. Any other source has
/// another hash: S19r's acquisitions would meet `NOSCRIPT` too, and the step would not be
/// the one it describes.
// The suite runs two of them.
#[allow(dead_code)]
#[path = "../../src/scripts/sources.rs"]
mod sources;

use sources::{ACQUIRE_LUA, FENCE_LUA};

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
                client_over(urls.clone()).retry(
                    Retry::new()
                        .attempts(3)
                        .delay(Duration::from_millis(2))
                        .jitter(jitter),
                ),
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

/// How late master 0's replies reach Y in S19r: each of Y's failed attempts waits that long
/// for master 0's refusal, so its attempts reach the masters that far apart. Well under
/// [`SLOW_REPLY`], and far longer than the scripted step that falls between two attempts.
const PACED_REPLY: Duration = Duration::from_millis(200);

/// S19r: a retry storm with no pause between attempts, and a master whose script cache is
/// flushed (`SCRIPT FLUSH`) under open connections, behind a link that delays its replies
/// to the storming client by [`SLOW_REPLY`] (D).
///
/// The script: master 0 holds a foreign key (some other client's); Z takes masters 1 and
/// 2. Y retries back to back, without waiting for release notices. Its link to master 0
/// delays replies by [`PACED_REPLY`] (P, under D): each attempt is refused at once by
/// master 2 and after P by master 0, while master 1's answer is still on its way, so each
/// failed attempt's release goes to master 1, and Y's attempts reach the masters P apart.
/// The script steps in between two of them: once an attempt has run on masters 1 and 2
/// (their `SET` counts say so), Z leaves and, its keys gone, master 1's script cache is
/// flushed, long before that attempt fails (the report states how long the step took,
/// against P, whether another attempt arrived meanwhile, and how many releases met
/// `NOSCRIPT`). Its release, sent at `s` when master 0's refusal arrives, meets `NOSCRIPT`
/// on master 1 and is re-sent after a `SCRIPT LOAD`, two slow replies later: it runs at
/// `s + 2D`. Y's next attempt, at once (at `w`), finds masters 1 and 2 free and wins them;
/// the foreign key goes; W tries while Y is inside. With a fresh value per attempt the late
/// release cannot match Y's key, and W stays out.
///
/// With one value for every attempt the late release deletes Y's key on master 1, and W
/// gets in. With fencing, the write-back checks that key once, at `w + D` (after the
/// grant's slow reply), a whole slow reply before the late release runs: the check passes,
/// and the key goes right after it. The release of the attempt before either ran before
/// the flush (finding Z's key, or nothing of Y's) or runs late too, 2D after it was sent
/// P before `s`: after the check as well, since P is under D. Only the step's length
/// depends on the machine's speed, against P, and the report shows it; the rest follows
/// from the delays, and the slow link keeps the order of each direction. So every run
/// catches the reused value, with or without fencing.
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
            "retry storm, zero delay, a slow reply path and a paced one{}",
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
    let paced = Proxy::for_server(env.cluster.server(0)).await.unwrap();
    paced.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(PACED_REPLY, Duration::ZERO),
    });
    let mut y_urls = direct.clone();
    y_urls[0] = paced.url();
    y_urls[1] = slow.url();
    let resource = env.resource(0);
    let y = build(
        with_guards(
            client_over(y_urls)
                .ttl(ttl)
                .timeouts(
                    Timeouts::new()
                        // A late release (two slow replies) must finish within one node
                        // timeout.
                        .node(SLOW_REPLY * 3)
                        // Connecting takes a few slow round trips (with quarantine, the
                        // epoch too).
                        .connect(SLOW_REPLY * 10),
                )
                .retry(
                    Retry::new()
                        .attempts(100_000)
                        .delay(Duration::ZERO)
                        .jitter(Duration::ZERO)
                        .wait(Duration::from_secs(4)),
                )
                // Each attempt follows the failed one at once, woken by nothing else
                // (not queued to be handed the lock either).
                .waiting(Waiting::new().notifications(false).handoff(false)),
        ),
        mutant,
    );
    // Z and W use a node timeout that covers the three round trips of a script call on a
    // master without the script (see the NOSCRIPT test in `known_bugs.rs`), so their own
    // releases are not cut short on a loaded machine. W keeps trying for two slow replies:
    // without fencing, a late release lands about D after Y got in.
    let z = build(
        with_guards(
            client_over(direct.clone())
                .ttl(ttl)
                .timeouts(Timeouts::new().node(Duration::from_millis(300))),
        ),
        None,
    );
    let w = build(
        with_guards(
            client_over(direct.clone())
                .ttl(ttl)
                .timeouts(Timeouts::new().node(Duration::from_millis(300)))
                .retry(Retry::new().attempts(1000).wait(SLOW_REPLY * 2))
                // It keeps trying, as in a storm, rather than queueing.
                .waiting(Waiting::new().handoff(false)),
        ),
        None,
    );
    let mut m0 = crate::support::raw(&direct[0]).await;
    // Every client's connection to master 1 (Y's opens through the slow link) must have
    // loaded the scripts before they are flushed: a connection loads them with its first
    // request, so each client takes a lock that only masters 1 and 2 can grant (master 0
    // holds a foreign key for it). A connection opened after the flush would load the
    // scripts again, and its releases would never meet NOSCRIPT.
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
    let mut m1 = crate::support::raw(&direct[1]).await;
    let m2 = crate::support::raw(&direct[2]).await;
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
    // Z writes its counter back now and stays inside: the scripted step below only has it
    // end its section and release.
    let held_z = held_z.write(&mut store).await;
    // Y's attempts are counted where they run: each acquisition runs one `SET` on every
    // master (inside the acquire script with quarantine), and nothing else sets anything
    // on masters 1 and 2 until Y is inside (Z's release deletes, W comes later).
    let m12 = [m1.clone(), m2.clone()];
    let before = sets_run(&m12).await;
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
    // The step falls right after one of Y's attempts has run on masters 1 and 2: a poll
    // that finds both at the same count, which the last poll did not, saw it arrive after
    // that poll began. That attempt fails, and the next one arrives, P after it.
    let landed = |now: [u64; 2]| [now[0] - before[0], now[1] - before[1]];
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut last = landed(sets_run(&m12).await);
    let mut polled = tokio::time::Instant::now();
    let synced = loop {
        if tokio::time::Instant::now() >= give_up {
            break None;
        }
        sleep(Duration::from_millis(1)).await;
        let since = polled;
        polled = tokio::time::Instant::now();
        let now = landed(sets_run(&m12).await);
        if now[0] == now[1] && now != last {
            break Some((now, since));
        }
        last = now;
    };
    // The step: Z leaves (ends its section and releases), and once its keys are gone from
    // masters 1 and 2 (its release returns when two masters cleared them, the third may
    // still be on the way), master 1's script cache is flushed: Z's releases found the
    // script. Clients load their scripts when they connect, but these connections stay
    // open, so the next release sent to master 1 takes three round trips (EVALSHA,
    // NOSCRIPT, SCRIPT LOAD, EVALSHA), and later commands on the connection overtake it.
    // Acquisitions and write-backs that run scripts (with quarantine they do) keep theirs:
    // only the release is left out of the cache (in one transaction), so that acquisitions
    // keep their order and only releases run late.
    let z_value = held_z.lease.value().to_owned();
    held_z.leave(&mut store).await;
    crate::support::wait_until(Duration::from_secs(2), "Z's keys gone", || {
        let (m12, resource, z_value) = (m12.clone(), resource.clone(), &z_value);
        async move {
            for mut conn in m12 {
                let held: Option<String> = conn.get(&resource).await.unwrap();
                if held.as_deref() == Some(z_value.as_str()) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let mut flush = redis::pipe();
    flush.atomic().cmd("SCRIPT").arg("FLUSH").ignore();
    for source in [ACQUIRE_LUA, FENCE_LUA] {
        flush.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
    }
    let _: () = flush.query_async(&mut m1).await.unwrap();
    let after = landed(sets_run(&m12).await);
    match synced {
        Some((attempt, since)) => env.note(format!(
            "the step (Z left, master 1's scripts flushed) ended at most {} ms after Y's attempt \
             {} ran on masters 1 and 2 (it fails P = {} ms after that); {}",
            since.elapsed().as_millis(),
            attempt[0],
            PACED_REPLY.as_millis(),
            if after == attempt {
                "no attempt arrived meanwhile"
            } else {
                "AN ATTEMPT ARRIVED MEANWHILE"
            }
        )),
        None => env.note(format!(
            "Y's attempts never ran on masters 1 and 2 in step (counts {last:?}): the step \
             was not scripted"
        )),
    }
    let y_inside = tokio::time::timeout(Duration::from_secs(6), inside_rx)
        .await
        .unwrap()
        .unwrap_or(None);
    if let Some((granted, value)) = y_inside {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(&mut m1)
            .await
            .unwrap();
        let noscript = info
            .lines()
            .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
            .unwrap_or("0");
        env.note(format!(
            "Y granted by {granted:?}; Y's releases that met NOSCRIPT on master 1: {noscript}"
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
    drop((slow, paced));
    out
}

/// How many `SET` commands each master behind `masters` has run so far, those run inside
/// scripts included (both asked at once).
async fn sets_run(masters: &[MultiplexedConnection; 2]) -> [u64; 2] {
    async fn one(mut conn: MultiplexedConnection) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_set:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }
    let (first, second) = tokio::join!(one(masters[0].clone()), one(masters[1].clone()));
    [first, second]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19r_zero_delay_retry_storm_n3() {
    s19r(None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19r_zero_delay_retry_storm_fenced_n3() {
    s19r_with(None, Expect::Hold, Guards::RSV_F).await.check();
}
