//! S30: the semaphore (docs/design.md §15). Mixed clients take 1..k permits of one
//! semaphore while a minority of masters is killed, paused or restarted (HOLD: at no
//! instant do the holders' critical sections hold more permits than the limit, no slot
//! has two holders at once, and at some instant all `limit` permits are held). S30f: a permit holder frozen past its TTL (DETECT with
//! the holders checker; FENCED with per-slot tokens: its stale write is refused).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::{AcquireOptions, Mutant, Redlock};
use redquorum_testkit::Persistence;
use tokio::time::{Instant, sleep};

use crate::harness::*;
use crate::history::now_ns;

/// Leases a HOLD run must see before its verdict means anything.
const MIN_LEASES: usize = 20;

/// One lease's critical section: `permits` slots from `start_ns` to `end_ns`.
#[derive(Debug, Clone)]
pub struct Section {
    pub client: usize,
    pub slots: Vec<u32>,
    pub permits: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What the semaphore checker finds: instants with more permits held than `limit`, the
/// first described, and slots held twice at once; with the most permits held together.
#[derive(Debug, Default)]
pub struct Found {
    pub over: u64,
    pub first: Option<String>,
    pub slot_overlaps: u64,
    pub most: u32,
}

/// Sweeps `sections`: at every section start, the permits of the sections open then.
// Checks I16 (a semaphore never admits more than its limit) and I4 per slot.
pub fn check(sections: &[Section], limit: u32) -> Found {
    let mut sorted: Vec<&Section> = sections.iter().collect();
    sorted.sort_by_key(|s| s.start_ns);
    let mut found = Found::default();
    for (i, s) in sorted.iter().enumerate() {
        let open: Vec<&&Section> = sorted[..i]
            .iter()
            .filter(|o| o.end_ns > s.start_ns)
            .collect();
        let permits = s.permits + open.iter().map(|o| o.permits).sum::<u32>();
        found.most = found.most.max(permits);
        if permits > limit {
            found.over += 1;
            if found.first.is_none() {
                found.first = Some(format!(
                    "{permits} permits held under limit {limit} at once: taker {} began {s:?} \
                     inside {open:?}",
                    s.client
                ));
            }
        }
        let shared = open
            .iter()
            .filter(|o| o.slots.iter().any(|slot| s.slots.contains(slot)))
            .count();
        found.slot_overlaps += shared as u64;
    }
    found
}

/// One taker: acquires 1..=`most` permits, holds them a short while (never past its
/// lease's safety point), releases, until stopped.
#[allow(clippy::too_many_arguments)]
async fn taker(
    client: Redlock,
    c: usize,
    name: String,
    limit: u32,
    most: u32,
    stop: Arc<AtomicBool>,
    sections: Arc<Mutex<Vec<Section>>>,
    failures: Arc<Mutex<Vec<String>>>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let semaphore = client.semaphore(&name, limit).unwrap();
    let options = AcquireOptions::new().wait_timeout(Duration::from_secs(2));
    for _ in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let k = 1 + rng.below(u64::from(most)) as u32;
        match semaphore.acquire_with(k, &options).await {
            Ok(lease) => {
                let start_ns = now_ns();
                let work = rng.between(Duration::ZERO, Duration::from_millis(30));
                let work = work.min(lease.remaining().saturating_sub(lease.safety_margin()));
                sleep(work).await;
                let end_ns = now_ns();
                sections.lock().unwrap().push(Section {
                    client: c,
                    slots: lease.permits().to_vec(),
                    permits: k,
                    start_ns,
                    end_ns,
                });
                let _ = lease.release().await;
            }
            Err(e) => failures.lock().unwrap().push(format!("{:?}", e.kind())),
        }
        sleep(rng.between(Duration::ZERO, Duration::from_millis(20))).await;
    }
}

/// Waits until no slot key of semaphore `name` is left on the running masters (the limit
/// record stays: it has no TTL); returns how many were left at first.
async fn slots_left(env: &Env, name: &str) -> u64 {
    let pattern = format!("redquorum:sem:{name}:*");
    let count = || {
        let urls: Vec<String> = env
            .cluster
            .servers()
            .iter()
            .filter(|s| s.is_running() && !s.is_paused())
            .map(|s| s.url())
            .collect();
        let pattern = pattern.clone();
        async move {
            let mut total = 0u64;
            for url in urls {
                let mut conn = crate::support::raw(&url).await;
                let keys: Vec<String> = conn.keys(&pattern).await.unwrap();
                total += keys.iter().filter(|k| !k.ends_with(":limit")).count() as u64;
            }
            total
        }
    };
    let first = count().await;
    let by = Instant::now() + TTL + Duration::from_secs(2);
    let mut left = first;
    while left > 0 && Instant::now() < by {
        sleep(Duration::from_millis(20)).await;
        left = count().await;
    }
    assert_eq!(
        left, 0,
        "slot keys still on the masters a TTL after the end"
    );
    first
}

/// S30: `takers` clients with limit `limit` take 1..=`most` permits while, unless
/// `calm`, a minority of masters is killed (restarted empty later), paused, or restarted
/// at once; restart quarantine keeps restarted masters out. Holders never exceed the
/// limit (HOLD); a planted bug that does is caught by the holders checker.
pub async fn s30(
    n: usize,
    (limit, most, takers): (u32, u32, usize),
    calm: bool,
    mutant: Option<Mutant>,
    expect: Expect,
) -> Outcome {
    let what = if calm {
        "no faults"
    } else {
        "kill, pause, restart a minority"
    };
    let name = format!("semaphore L={limit}, {takers} takers of 1..{most}, {what}");
    let mut env = Env::start(Setup::new("S30", name, expect, n)).await;
    let urls = env.urls();
    seed_epochs(&env.cluster).await;
    let probe = build(Guards::RSV.apply(client_over(urls.clone()), TTL), None);
    settle(&probe, &env.prefix).await;
    let sem = format!("{}sem", env.prefix);
    let stop = Arc::new(AtomicBool::new(false));
    let sections = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..takers {
        let client = build(Guards::RSV.apply(client_over(urls.clone()), TTL), mutant);
        tasks.push(tokio::spawn(taker(
            client,
            c,
            sem.clone(),
            limit,
            most,
            Arc::clone(&stop),
            Arc::clone(&sections),
            Arc::clone(&failures),
            env.rng.next_u64(),
        )));
    }
    // A hunt runs twice as long: the over-admission it looks for needs three takers to
    // win overlapping majorities at once, which a short run sometimes never races into.
    let end = Instant::now() + phase() * if mutant.is_some() { 2 } else { 1 };
    let mut faults = [0u32; 3];
    for _ in 0..1000 {
        if Instant::now() >= end {
            break;
        }
        sleep(
            env.rng
                .between(Duration::from_millis(100), Duration::from_millis(300)),
        )
        .await;
        if calm {
            continue;
        }
        let k = 1 + env.rng.below((n - (n / 2 + 1)) as u64) as usize;
        let victims = env.rng.pick(n, k);
        let kind = env.rng.below(3) as usize;
        faults[kind] += 1;
        let down = env
            .rng
            .between(Duration::from_millis(100), Duration::from_millis(400));
        match kind {
            0 => {
                for &i in &victims {
                    env.cluster.server_mut(i).kill().unwrap();
                }
                sleep(down).await;
                for &i in &victims {
                    env.cluster.server_mut(i).restart(false).await.unwrap();
                }
            }
            1 => {
                for &i in &victims {
                    env.cluster.server_mut(i).pause().unwrap();
                }
                sleep(down).await;
                for &i in &victims {
                    env.cluster.server_mut(i).resume().unwrap();
                }
            }
            _ => {
                for &i in &victims {
                    env.cluster.server_mut(i).restart(false).await.unwrap();
                }
            }
        }
    }
    // Under a loaded machine the faults can leave too few leases to prove anything: the
    // takers run on among healthy masters (no new faults) until they have taken enough,
    // for at most a few TTLs.
    let faults_ended = Instant::now();
    let enough_by = faults_ended + TTL * 4 + Duration::from_secs(2);
    while mutant.is_none()
        && sections.lock().unwrap().len() < MIN_LEASES
        && Instant::now() < enough_by
    {
        sleep(Duration::from_millis(20)).await;
    }
    let calm_tail = faults_ended.elapsed();
    stop.store(true, Ordering::SeqCst);
    let joined = join_workers(
        Workers::from_parts(Arc::clone(&stop), tasks),
        TTL * 3 + Duration::from_secs(5),
    )
    .await;
    let sections = sections.lock().unwrap().clone();
    let found = check(&sections, limit);
    let failed = failures.lock().unwrap().len();
    env.note(format!(
        "{} leases, {failed} acquires failed, at most {} of {limit} permits held at once; \
         faults: {} kills, {} pauses, {} restarts",
        sections.len(),
        found.most,
        faults[0],
        faults[1],
        faults[2]
    ));
    if calm_tail > Duration::from_millis(100) {
        env.note(format!(
            "ran {} ms on after the faults to reach {MIN_LEASES} leases",
            calm_tail.as_millis()
        ));
    }
    if found.slot_overlaps > 0 {
        env.violation(format!("{} slots held twice at once", found.slot_overlaps));
    }
    env.over_admitted(found.over, found.first.unwrap_or_default());
    for broken in joined.broken() {
        env.broken(format!("takers: {broken}"));
    }
    if mutant.is_none() && sections.len() < MIN_LEASES {
        env.violation(format!(
            "too few leases ({}) to prove anything",
            sections.len()
        ));
    }
    // A semaphore that never lets `limit` permits be held at once is wrong too, and a run
    // whose takers never pressed against the limit proved nothing of it.
    if mutant.is_none() && found.most < limit {
        env.violation(format!(
            "the limit was never reached: at most {} of {limit} permits held at once",
            found.most
        ));
    }
    let left = slots_left(&env, &sem).await;
    if left > 0 {
        env.note(format!("{left} slot key(s) expired after the end"));
    }
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30_semaphore_faults_n3() {
    s30(3, (3, 2, 6), false, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30_semaphore_faults_n5() {
    s30(5, (3, 2, 6), false, None, Expect::Hold).await.check();
}

/// S30f: holder H takes one permit of a 2-permit semaphore and enters its critical
/// section, reading the counter (and, with fencing, the fenced register of its slot);
/// then it freezes past its TTL. Two other clients take both slots (H's expired) and
/// enter theirs; H wakes and writes. Three holders of a 2-permit semaphore: the holders
/// checker fires (DETECT). With fencing, each slot is a fenced resource and H's write
/// carries its slot's old token: the register refuses it (FENCED).
pub async fn s30f(fencing: bool, expect: Expect) -> Outcome {
    let guards = if fencing { Guards::RSV_F } else { Guards::RSV };
    let name = format!("semaphore holder frozen past its TTL{}", guards.label());
    let setup = Setup::new("S30f", name, expect, 3).persistence(if fencing {
        Persistence::AofAlways
    } else {
        Persistence::None
    });
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    seed_epochs(&env.cluster).await;
    let client = || build(guards.apply(client_over(urls.clone()), TTL), None);
    let (h, a, b) = (client(), client(), client());
    settle(&h, &env.prefix).await;
    let sem = format!("{}sem", env.prefix);
    let limit = 2;
    let mut store = env.store().await;
    let options = AcquireOptions::new().watchdog(false);

    // Each slot is a resource of the history: the overlap and fencing checkers see it.
    let slot_resources: Vec<String> = (0..limit as usize).map(|i| env.resource(i)).collect();
    let mut sections = Vec::new();
    let held = h
        .semaphore(&sem, limit)
        .unwrap()
        .acquire_with(1, &options)
        .await
        .unwrap();
    let slot = held.permits()[0] as usize;
    let mut rec = env.history.recorder("S30f-h", slot_resources[slot].clone());
    rec.acq_start();
    rec.acq_ok(&held);
    rec.cs_start();
    let h_start = now_ns();
    let counter = counter_key(rec.resource());
    let v: Option<u64> = store.get(&counter).await.unwrap();
    let fenced = fenced_read(&rec, &mut store).await;
    // Frozen: no extension, no look at the clock, past the TTL.
    sleep(TTL + TTL / 4).await;

    let mut others = Vec::new();
    for (i, c) in [&a, &b].into_iter().enumerate() {
        let lease = c
            .semaphore(&sem, limit)
            .unwrap()
            .acquire_with(1, &options)
            .await
            .unwrap();
        let s = lease.permits()[0] as usize;
        let mut r = env
            .history
            .recorder(format!("S30f-{i}"), slot_resources[s].clone());
        r.acq_start();
        r.acq_ok(&lease);
        r.cs_start();
        let start = now_ns();
        let key = counter_key(r.resource());
        let w: Option<u64> = store.get(&key).await.unwrap();
        let _: () = store.set(&key, w.unwrap_or(0) + 1).await.unwrap();
        let read = fenced_read(&r, &mut store).await;
        let refused = fenced_write(&r, &mut store, read).await;
        others.push((r, lease, start, refused, s));
    }
    // H wakes and writes, unaware.
    let _: () = store.set(&counter, v.unwrap_or(0) + 1).await.unwrap();
    let refused = fenced_write(&rec, &mut store, fenced).await;
    rec.cs_end_fenced(true, refused);
    sections.push(Section {
        client: 0,
        slots: vec![slot as u32],
        permits: 1,
        start_ns: h_start,
        end_ns: now_ns(),
    });
    let _ = held.release().await;
    for (i, (mut r, lease, start, refused, s)) in others.into_iter().enumerate() {
        r.cs_end_fenced(true, refused);
        sections.push(Section {
            client: i + 1,
            slots: vec![s as u32],
            permits: 1,
            start_ns: start,
            end_ns: now_ns(),
        });
        release(&mut r, lease).await;
    }
    let found = check(&sections, limit);
    env.over_admitted(found.over, found.first.unwrap_or_default());
    slots_left(&env, &sem).await;
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30f_frozen_permit_holder_is_detected() {
    s30f(false, Expect::Detect(Checker::Holders)).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30f_frozen_permit_holder_is_fenced() {
    s30f(true, Expect::Fenced).await.check();
}

#[test]
fn the_semaphore_checker_counts_permits_and_slots() {
    let s = |client, slots: &[u32], start_ns, end_ns| Section {
        client,
        slots: slots.to_vec(),
        permits: slots.len() as u32,
        start_ns,
        end_ns,
    };
    let calm = [s(0, &[0], 0, 10), s(1, &[1], 5, 20), s(2, &[0], 10, 30)];
    let found = check(&calm, 2);
    assert_eq!((found.over, found.slot_overlaps, found.most), (0, 0, 2));
    let over = [s(0, &[0], 0, 10), s(1, &[1], 5, 20), s(2, &[2], 9, 30)];
    assert_eq!(check(&over, 2).over, 1);
    let twice = [s(0, &[0, 1], 0, 10), s(1, &[1], 5, 20)];
    let found = check(&twice, 3);
    assert_eq!((found.over, found.slot_overlaps), (0, 1));
}
