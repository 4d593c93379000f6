//! Re-entry (docs/design.md §14): S26, clients that re-enter their lease inside the
//! critical section while a minority of masters is killed, stopped and restarted; S26f, a
//! client process frozen past its TTL inside a re-entered section (known unsafe for any
//! lease lock; with fencing the storage is safe); S26r, a holder that stalls past its TTL
//! outside its section while a minority master is down and comes back, then re-enters and
//! goes on only if the re-entry says the lease is valid.

use redquorum::Retry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::{ErrorKind, Mutant, Redlock};
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::Recorder;

/// One re-entering client: acquire, then inside the section re-enter twice (as nested
/// helpers would), work and write under the innermost guard while it says the lease is
/// valid, leave the re-entries, release. Now and then, an acquire of the held resource by
/// the same client must fail at once with `AlreadyHeld`.
async fn reentering(
    client: Redlock,
    mut rec: Recorder,
    store_url: String,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut store = crate::support::raw(&store_url).await;
    let resource = rec.resource().to_owned();
    let key = counter_key(&resource);
    let ms = Duration::from_millis;
    // Bounded in count as well as by the stop flag.
    for _ in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        rec.acq_start();
        let lease = match client.acquire(&resource).await {
            Ok(lease) => lease,
            Err(e) => {
                rec.acq_fail(&e);
                sleep(rng.between(Duration::ZERO, ms(20))).await;
                continue;
            }
        };
        rec.acq_ok(&lease);
        rec.cs_start();
        let v: Option<u64> = store.get(&key).await.unwrap();
        let child = lease.reenter();
        sleep(rng.between(Duration::ZERO, ms(5))).await;
        let grandchild = child.reenter();
        if rng.below(4) == 0 {
            let started = Instant::now();
            let error = client.try_acquire(&resource).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::AlreadyHeld, "{error}");
            assert!(started.elapsed() < ms(20), "{:?}", started.elapsed());
        }
        sleep(rng.between(Duration::ZERO, ms(10))).await;
        // A careful holder stops touching the resource when its validity runs out.
        let wrote = grandchild.remaining() > ms(5);
        if wrote {
            let _: () = store.set(&key, v.unwrap_or(0) + 1).await.unwrap();
        }
        grandchild.release();
        child.release();
        rec.cs_end(wrote);
        release(&mut rec, lease).await;
        sleep(rng.between(Duration::ZERO, ms(20))).await;
    }
}

/// S26: four re-entering clients and three plain ones contend on one resource while a
/// minority is killed and restarted with its data (`appendfsync always`) or stopped and
/// continued, one fault at a time.
pub async fn s26(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S26",
        "re-entry inside sections; a minority killed, stopped, restarted",
        expect,
        n,
    )
    .persistence(redquorum_testkit::Persistence::AofAlways);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let plain = env.spawn_workers(3, 1, Work::default(), |_| {
        build(client_over(urls.clone()), mutant)
    });
    let resource = env.resource(0);
    let mut tasks = plain.tasks;
    for i in 0..4 {
        let client = build(client_over(urls.clone()), mutant);
        let rec = env.history.recorder(format!("S26-re{i}"), &resource);
        let seed = env.rng.next_u64();
        tasks.push(tokio::spawn(reentering(
            client,
            rec,
            env.store.url(),
            Arc::clone(&plain.stop),
            seed,
        )));
    }
    let workers = Workers::from_parts(plain.stop, tasks);
    let end = Instant::now() + phase();
    let minority = n - (n / 2 + 1);
    let mut faults = [0u32; 2];
    for round in 0..100 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(100), Duration::from_millis(300)),
        )
        .await;
        let k = 1 + env.rng.below(minority as u64) as usize;
        let victims = env.rng.pick(n, k);
        let down = env.rng.between(TTL / 4, TTL);
        if round % 2 == 0 {
            faults[0] += 1;
            for &i in &victims {
                env.cluster.server_mut(i).kill().unwrap();
            }
            sleep(down).await;
            for &i in &victims {
                env.cluster.server_mut(i).restart(true).await.unwrap();
            }
        } else {
            faults[1] += 1;
            for &i in &victims {
                env.cluster.server_mut(i).pause().unwrap();
            }
            sleep(down).await;
            for &i in &victims {
                env.cluster.server_mut(i).resume().unwrap();
            }
        }
    }
    env.note(format!(
        "{} kill-restarts, {} stops of a minority",
        faults[0], faults[1]
    ));
    env.mark_heal();
    sleep(Duration::from_millis(1500)).await;
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
async fn s26_reentry_under_minority_faults_n3() {
    s26(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26f_frozen_inside_a_reentered_section_n3() {
    // Re-entry does not make a lease lock safe against a frozen holder (checker 1 fires)...
    crate::clients::frozen_inside(
        "S26f",
        3,
        Expect::Detect(Checker::Overlap),
        Guards::BR,
        true,
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26f_frozen_inside_a_reentered_section_fenced_n3() {
    // ...and the re-entry guard carries the lease's token, so fencing refuses its late write.
    crate::clients::frozen_inside("S26f", 3, Expect::Fenced, Guards::RSV_F, true)
        .await
        .check();
}

/// S26r (N = 3, baseline Redlock): holder H takes the lock and leaves a first section,
/// holding its lease; master 2 is killed; H stalls (no watchdog) until well past its TTL;
/// contender C acquires through masters 0 and 1 and stays inside; master 2 restarts empty
/// and H's connection to it is back; H re-enters and, if the re-entry says the lease is
/// valid, enters a second section. Re-entry asks no master, so H's expired lease stays
/// lost and H only releases: HOLD. A re-entry that sets a missing key again and counts
/// one master (`Mutant::ReentryCounter`) revives H on master 2 while C holds the others.
pub async fn s26r(mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S26r",
        "a holder stalled past its TTL re-enters after a minority restart",
        expect,
        3,
    );
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let resource = env.resource(0);
    let mut store = env.store().await;
    let ttl = Duration::from_millis(600);
    let holder = build(client_over(urls.clone()).ttl(ttl), mutant);
    let contender = build(
        client_over(urls.clone())
            .ttl(ttl)
            .retry(Retry::new().wait(Duration::from_secs(3))),
        mutant,
    );
    warm(&holder, &env.prefix).await;
    warm(&contender, &env.prefix).await;

    let rec = env.history.recorder("S26r-H", &resource);
    let Ok(first) = enter(&holder, rec, &mut store).await else {
        panic!("S26r: the holder could not acquire");
    };
    // The first section ends; the lease is kept (not released).
    let mut first = first.write(&mut store).await;
    first.rec.cs_end(true);
    let Held { lease, .. } = first;
    // Re-entry inside the held lease, as a nested helper would: nothing to see.
    lease.reenter().release();

    env.cluster.server_mut(2).kill().unwrap();
    // The stall: past the lease's deadline and its keys' TTL on every master.
    sleep(ttl + ttl / 2).await;
    assert!(lease.is_lost(), "S26r: the stalled lease is not lost");

    let rec = env.history.recorder("S26r-C", &resource);
    let inside = match enter(&contender, rec, &mut store).await {
        Ok(inside) => inside,
        Err((_, e)) => panic!("S26r: the contender could not acquire: {e}"),
    };
    env.note(format!(
        "contender in with masters {:?}",
        granted(inside.lease.masters())
    ));
    env.cluster.server_mut(2).restart(false).await.unwrap();
    // The holder's client talks to master 2 again (its connection is re-established in
    // the background): a throwaway lock granted there says so.
    let probe = format!("{}probe", env.prefix);
    crate::support::wait_until(Duration::from_secs(5), "master 2 is back", || {
        let (holder, probe) = (holder.clone(), probe.clone());
        async move {
            match holder.try_acquire(&probe).await {
                Ok(lease) => {
                    let back = lease.masters()[2].outcome().is_granted();
                    lease.release().await.is_ok() && back
                }
                Err(_) => false,
            }
        }
    })
    .await;

    // Re-enter, give a round trip's worth of time to anything the re-entry sent, and go
    // on only if the re-entry says the lease is valid.
    let child = lease.reenter();
    sleep(Duration::from_millis(100)).await;
    if child.is_expired() {
        env.note(format!(
            "the re-entry says the lease is lost ({:?}): the holder only releases",
            child.lost_reason()
        ));
        child.release();
        let _ = lease.release().await;
    } else {
        env.note("the re-entry says the lease is valid: the holder goes on");
        child.release();
        let mut rec = env.history.recorder("S26r-H-reentered", &resource);
        rec.acq_start();
        rec.acq_ok(&lease);
        let second = Held::inside(rec, lease, &mut store).await;
        sleep(Duration::from_millis(20)).await;
        second.leave(&mut store).await;
    }
    sleep(Duration::from_millis(20)).await;
    inside.leave(&mut store).await;
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26r_stalled_holder_reenters_after_a_minority_restart() {
    s26r(None, Expect::Hold).await.check();
}
