//! S17 (extensions while masters fail) and S18 (release after expiry, once another client
//! holds the lock).

use redquorum::Retry;
use std::time::Duration;

use redquorum::Mutant;
use redquorum_testkit::Persistence;
use tokio::time::{Instant, sleep};

use crate::harness::*;

/// S17: holders work in three steps, extending after each, while random minorities are
/// stopped or killed and restarted (with `appendfsync always`, so the restart is safe
/// without quarantine). A holder whose extension fails stops; no section may outlive the
/// deadline it last established.
pub async fn s17(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S17",
        "extensions while a minority stops or restarts",
        expect,
        n,
    )
    .persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = build(client_over(urls.clone()), mutant);
        let resource = env.resource(i % 2);
        let mut rec = env.history.recorder(format!("S17-w{i}"), resource.clone());
        let store_url = env.store.url();
        let stop = std::sync::Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut store = crate::support::raw(&store_url).await;
            for _ in 0..10_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                rec.acq_start();
                let lease = match client.acquire(&resource).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        rec.acq_fail(&e);
                        continue;
                    }
                };
                rec.acq_ok(&lease);
                let mut held = Held::inside(rec, lease, &mut store).await;
                let mut ok = true;
                for _ in 0..3 {
                    sleep(TTL / 4).await;
                    match held.lease.extend().await {
                        Ok(_) => held.rec.ext_ok(&held.lease),
                        Err(e) => {
                            held.rec.ext_fail(&e);
                            ok = false;
                            break;
                        }
                    }
                }
                rec = if ok && held.lease.remaining() > Duration::from_millis(20) {
                    held.leave(&mut store).await
                } else {
                    held.abandon().await
                };
            }
        }));
    }
    let end = Instant::now() + phase();
    let mut faults = 0;
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
        if env.rng.below(2) == 0 {
            env.cluster.server_mut(i).pause().unwrap();
            sleep(env.rng.between(TTL / 4, TTL)).await;
            env.cluster.server_mut(i).resume().unwrap();
        } else {
            env.cluster.server_mut(i).restart(true).await.unwrap();
        }
        faults += 1;
    }
    env.note(format!("{faults} faults"));
    env.finish(Workers::from_parts(stop, tasks), Checks::default())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_extensions_under_faults_n3() {
    s17(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_extensions_under_faults_n5() {
    s17(5, None, Expect::Hold).await.check();
}

/// S18: A holds the lock briefly, finishes its section, but releases only after its lease
/// expired and B took the lock (B is still inside, with a minority of masters stopped);
/// then C tries. A's late release must leave B's keys alone, so C stays out.
pub async fn s18(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new("S18", "release after expiry, next holder inside", expect, n);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let resource = env.resource(0);
    let ttl = Duration::from_millis(600);
    let client = |attempts: u32, wait: Duration| {
        build(
            client_over(urls.clone())
                .ttl(ttl)
                .retry(Retry::new().attempts(attempts).wait(wait)),
            mutant,
        )
    };
    let (a, b, c) = (
        client(5, ttl),
        client(1000, ttl * 3),
        client(1000, Duration::from_millis(500)),
    );
    for x in [&a, &b, &c] {
        warm(x, &env.prefix).await;
    }
    let mut store = env.store().await;
    let Ok(held_a) = enter(&a, env.history.recorder("S18-A", &resource), &mut store).await else {
        panic!("S18: A could not acquire a free lock");
    };
    let held_a = held_a.write(&mut store).await;
    let Held {
        mut rec,
        lease: lease_a,
        wrote,
        ..
    } = held_a;
    rec.cs_end(wrote);
    // A dawdles; B gets in once A's keys expire.
    let Ok(held_b) = enter(&b, env.history.recorder("S18-B", &resource), &mut store).await else {
        panic!("S18: B could not acquire after A's lease expired");
    };
    assert!(lease_a.is_expired(), "B got in while A's lease was valid");
    // A minority is down while A's late release runs.
    let minority = env.rng.pick(n, n - (n / 2 + 1));
    for &i in &minority {
        env.cluster.server_mut(i).pause().unwrap();
    }
    release(&mut rec, lease_a).await;
    for &i in &minority {
        env.cluster.server_mut(i).resume().unwrap();
    }
    match enter(&c, env.history.recorder("S18-C", &resource), &mut store).await {
        Ok(held_c) => {
            held_c.leave(&mut store).await;
        }
        Err((_, e)) => env.note(format!("C kept out: {:?}", e.kind())),
    }
    assert!(
        held_b.lease.remaining() > Duration::ZERO,
        "S18: script too slow for B's lease"
    );
    held_b.leave(&mut store).await;
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s18_late_release_n3() {
    s18(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s18_late_release_n5() {
    s18(5, None, Expect::Hold).await.check();
}
