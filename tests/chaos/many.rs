//! Several resources at once (`acquire_many`, docs/design.md §14): S28, mixed clients —
//! some lock `{x}`, some `{y}`, some `{x, y}`, some `{y, x}` — while a minority of masters
//! is killed and restarted, or stopped and continued; the overlap and lost-update checkers
//! run per resource. S29, a holder of `{x, y}` frozen past its TTL (S12's frozen client
//! process, holding two resources).

use redquorum::Retry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redquorum::{Lease, Mutant, Redlock};
use redquorum_testkit::Persistence;
use tokio::time::{Instant, sleep};

use crate::clients::args;
use crate::event::Op;
use crate::harness::*;
use crate::history::Recorder;
use crate::process::ClientProcess;

/// The lists S28's workers lock, by worker: `{x}`, `{y}`, `{x, y}`, `{y, x}`, in turn.
const LISTS: [&[usize]; 4] = [&[0], &[1], &[0, 1], &[1, 0]];

/// S28: eight workers over two resources, two of each list of [`LISTS`]; a minority of
/// durable masters is killed and restarted with its data, or stopped and continued, again
/// and again. Mutual exclusion must hold on each resource, whatever list locked it.
pub async fn s28(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S28",
        "several resources at once, mixed lists, minority killed or stopped",
        expect,
        n,
    )
    .persistence(Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let resources = [env.resource(0), env.resource(1)];
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let list: Vec<String> = LISTS[i % LISTS.len()]
            .iter()
            .map(|&r| resources[r].clone())
            .collect();
        let name = format!("S28-w{i}");
        let recorders = list
            .iter()
            .map(|r| env.history.recorder(name.clone(), r.clone()))
            .collect();
        let client = build(client_over(urls.clone()), mutant);
        let store = env.store().await;
        let seed = env.rng.next_u64();
        tasks.push(tokio::spawn(many_worker(
            client,
            list,
            recorders,
            store,
            Arc::clone(&stop),
            seed,
        )));
    }
    let workers = Workers::from_parts(stop, tasks);
    let end = Instant::now() + phase();
    let (mut restarts, mut stops) = (0, 0);
    for _ in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(100), Duration::from_millis(300)),
        )
        .await;
        let k = 1 + env.rng.below((n - (n / 2 + 1)) as u64) as usize;
        let victims = env.rng.pick(n, k);
        if env.rng.below(2) == 0 {
            for &i in &victims {
                env.cluster.server_mut(i).restart(true).await.unwrap();
            }
            restarts += 1;
        } else {
            for &i in &victims {
                env.cluster.server_mut(i).pause().unwrap();
            }
            sleep(env.rng.between(TTL / 4, TTL)).await;
            for &i in &victims {
                env.cluster.server_mut(i).resume().unwrap();
            }
            stops += 1;
        }
    }
    env.note(format!("{restarts} restarts, {stops} stops of a minority"));
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1500)),
            ..Checks::default()
        },
    )
    .await
}

/// One worker over `list` (one resource or several): acquire, a critical section on every
/// resource's counter and fenced register, release; until stopped. Each resource's events
/// go to its own recorder, so the checkers judge each resource on its own.
async fn many_worker(
    client: Redlock,
    list: Vec<String>,
    mut recs: Vec<Recorder>,
    mut store: MultiplexedConnection,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let names: Vec<&str> = list.iter().map(String::as_str).collect();
    for _ in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        for rec in &mut recs {
            rec.acq_start();
        }
        let acquired = match names.as_slice() {
            [one] => client.acquire(one).await,
            many => client.acquire_many(many).await,
        };
        match acquired {
            Ok(lease) => {
                for rec in &mut recs {
                    rec.acq_ok(&lease);
                }
                sections(&mut recs, &lease, &mut store, &mut rng).await;
                release_all(&mut recs, lease).await;
            }
            Err(e) => {
                for rec in &mut recs {
                    rec.acq_fail(&e);
                }
            }
        }
        sleep(rng.between(Duration::ZERO, Duration::from_millis(20))).await;
    }
}

/// The critical section of every resource of `lease`: each counter (and register) read,
/// a short wait, each written back while the lease is valid.
async fn sections(
    recs: &mut [Recorder],
    lease: &Lease,
    store: &mut MultiplexedConnection,
    rng: &mut Rng,
) {
    let mut held = Vec::with_capacity(recs.len());
    for rec in recs.iter_mut() {
        rec.cs_start();
        let key = counter_key(rec.resource());
        let v: Option<u64> = redis::AsyncCommands::get(store, &key).await.unwrap();
        let fenced = fenced_read(rec, store).await;
        held.push((key, v, fenced));
    }
    sleep(rng.between(Duration::ZERO, Duration::from_millis(10))).await;
    let margin = Duration::from_millis(5);
    for (rec, (key, v, fenced)) in recs.iter_mut().zip(held) {
        if lease.remaining() > margin {
            let _: () = redis::AsyncCommands::set(store, &key, v.unwrap_or(0) + 1)
                .await
                .unwrap();
            let refused = fenced_write(rec, store, fenced).await;
            rec.cs_end_fenced(true, refused);
        } else {
            rec.cs_end_fenced(false, fenced.map(|_| false));
        }
    }
}

/// Releases `lease` and records it for every resource.
async fn release_all(recs: &mut [Recorder], lease: Lease) {
    let detail = match lease.release().await {
        Ok(report) => format!("released:{}", report.released()),
        Err(e) => format!("{:?}", e.kind()),
    };
    for rec in recs {
        rec.rel(&detail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s28_several_resources_under_faults_n3() {
    s28(3, None, Expect::Hold).await.check();
}

/// S29: a client process holding `{x, y}` is frozen inside its critical section (after
/// reading both counters) past its TTL; a contender takes `y` alone meanwhile; the frozen
/// one wakes up and writes both. As for one resource (S12), every lease lock fails this:
/// the overlap checker must fire on `y`; with fencing, the frozen holder's write of `y`
/// must be refused by its register.
pub async fn s29(n: usize, expect: Expect, guards: Guards) -> Outcome {
    let name = format!(
        "client holding two resources SIGSTOPped past the TTL{}",
        guards.label()
    );
    let mut setup = Setup::new("S29", name, expect, n);
    if guards.fencing {
        setup = setup.persistence(Persistence::AofAlways);
    }
    let mut env = Env::start(setup).await;
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
    }
    let (x, y) = (env.resource(0), env.resource(1));
    let urls = env.urls();
    let ttl = Duration::from_millis(800);
    let mut extra = vec![
        ("--ttl-ms", ttl.as_millis().to_string()),
        ("--hold-ms", "500".into()),
    ];
    if guards.fencing {
        extra.push(("--fencing", String::new()));
    } else if guards.quarantine {
        extra.push(("--quarantine", String::new()));
    }
    let client = ClientProcess::spawn(
        "S29-proc",
        &args(&urls, &env.store.url(), &format!("{x},{y}"), &extra),
        &env.history,
    );
    client.wait_for(Op::CsRead, Duration::from_secs(10)).await;
    client.pause();
    let contender = build(
        guards.apply(
            client_over(urls)
                .ttl(ttl)
                .retry(Retry::new().attempts(500).wait(ttl * 3)),
            ttl,
        ),
        None,
    );
    let mut store = env.store().await;
    let rec = env.history.recorder("S29-contender", &y);
    match enter(&contender, rec, &mut store).await {
        Ok(h) => {
            client.resume();
            client.wait_for(Op::CsEnd, Duration::from_secs(10)).await;
            // Both of the thawed client's sections end (one event per resource).
            sleep(Duration::from_millis(100)).await;
            h.leave(&mut store).await;
        }
        Err((_, e)) => {
            client.resume();
            env.note(format!("contender failed: {:?}", e.kind()));
        }
    }
    assert!(
        client.wait(Duration::from_secs(10)).await,
        "client process failed"
    );
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s29_holder_of_two_resources_paused_n3() {
    s29(3, Expect::Detect(Checker::Overlap), Guards::BR)
        .await
        .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s29_holder_of_two_resources_paused_fenced_n3() {
    s29(3, Expect::Fenced, Guards::RSV_F).await.check();
}
