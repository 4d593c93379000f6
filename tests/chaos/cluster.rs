//! S22–S24: the cluster record (docs/design.md §11) keeps clients agreed.
//!
//! - S22: two groups of clients list overlapping but different masters of five and contend
//!   on one resource. Without a record their quorums can be disjoint (DETECT); once a
//!   client of the first group ran `init_cluster`, the second group's master outside the
//!   cluster is a stranger to it and never votes (HOLD). With a second group under other
//!   terms (one member alone, a quorum of one) the record refuses it outright (HOLD).
//! - S23: a member of an initialised cluster is flushed while clients contend: it abstains
//!   for its restart quarantine, then re-joins with its record back (counters lost).
//! - S24: `init_cluster` on masters already in use, one of which restarted empty while a
//!   lease held keys on another: the bootstrap must refuse (the master that lost its keys
//!   stays in quarantine), or the lost keys' master votes at once and a contender gets in.

use redquorum::{Retry, Timeouts};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redquorum::{ErrorKind, InitOutcome, Mutant, Redlock};
use redquorum_testkit::{Mode, Persistence};
use tokio::time::{Instant, sleep};

use crate::event::Op;
use crate::harness::*;

/// The masters S22's first group lists, among five; the cluster when it is initialised.
const GROUP_1: &[usize] = &[0, 1, 2];
/// The second group of S22: as many masters (the same terms), two of them the first
/// group's. Without a record, {0, 1} and {2, 3} are quorums of the two lists.
const GROUP_2: &[usize] = &[1, 2, 3];
/// The second group under other terms: one member of the cluster alone, whose quorum is
/// that member.
const LONE: &[usize] = &[2];

/// The key of the cluster record (no key prefix).
const RECORD: &str = "redquorum:cluster";

/// The URLs of `masters` among `urls`.
fn pick(urls: &[String], masters: &[usize]) -> Vec<String> {
    masters.iter().map(|&i| urls[i].clone()).collect()
}

/// How S22's second group is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Second {
    /// Masters 1, 2 and 3: the cluster's terms, another list.
    OtherList,
    /// Master 2 alone: another count and quorum.
    OtherTerms,
}

/// Counts per group of S22's workers: acquisitions, and failures by kind.
#[derive(Debug, Default)]
struct Group {
    acquired: u64,
    failed: BTreeMap<String, u64>,
}

/// S22: see the module docs. `record`: a client of the first group runs `init_cluster`
/// first. `mutant` is planted in the second group's clients.
pub async fn s22(record: bool, second: Second, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let name = match (record, second) {
        (false, _) => "overlapping master lists, no cluster record",
        (true, Second::OtherList) => "overlapping master lists, cluster record",
        (true, Second::OtherTerms) => "one member alone (other terms), cluster record",
    };
    let mut env = Env::start(Setup::new("S22", name, expect, 5).proxies()).await;
    let urls = env.urls();
    let second_list = match second {
        Second::OtherList => GROUP_2,
        Second::OtherTerms => LONE,
    };
    let first = |_: usize| build(client_over(pick(&urls, GROUP_1)), None);
    let other = |_: usize| build(client_over(pick(&urls, second_list)), mutant);
    if record {
        let init = first(0).init_cluster().await.unwrap();
        assert_eq!(init.outcome, InitOutcome::Bootstrapped, "{init}");
    }

    // The script: each group's holder on a quorum of its list that the other's misses.
    let resource = env.resource(1);
    let mut store = env.store().await;
    let one = first(0);
    // Kept out, it must give up well within the first holder's lease.
    let two = build(
        client_over(pick(&urls, second_list))
            .retry(Retry::new().attempts(3).wait(Duration::from_millis(300))),
        mutant,
    );
    match second {
        Second::OtherList => {
            // Master 2 is cut off while the first holder acquires: it gets {0, 1}. Then
            // master 1 is, while the second tries: without a record it gets {2, 3}.
            env.proxies[2].set_mode(Mode::Blackhole);
            let rec = env.history.recorder("S22-holder-1", &resource);
            let Ok(h1) = enter(&one, rec, &mut store).await else {
                panic!("S22: the first group's holder could not acquire");
            };
            assert_eq!(
                granted(h1.lease.masters()),
                [0, 1],
                "S22: not the quorum scripted"
            );
            env.proxies[2].heal();
            env.proxies[1].set_mode(Mode::Blackhole);
            let rec = env.history.recorder("S22-holder-2", &resource);
            match enter(&two, rec, &mut store).await {
                Ok(h2) => {
                    env.note(format!(
                        "second holder in with masters {:?} of its list",
                        granted(h2.lease.masters())
                    ));
                    sleep(Duration::from_millis(5)).await;
                    h2.leave(&mut store).await;
                }
                Err((_, e)) => {
                    env.note(format!("second holder kept out: {:?}", e.kind()));
                    if !record {
                        env.note("the script did not reach the disjoint quorums");
                    }
                }
            }
            env.proxies[1].heal();
            h1.leave(&mut store).await;
        }
        Second::OtherTerms => {
            // The lone client takes master 2 first; the first group then gets {0, 1}.
            let rec = env.history.recorder("S22-holder-2", &resource);
            let h2 = match enter(&two, rec, &mut store).await {
                Ok(h2) => Some(h2),
                Err((_, e)) => {
                    env.note(format!("lone holder refused: {:?}", e.kind()));
                    if e.kind() != ErrorKind::ClusterMismatch || e.is_retryable() {
                        env.violation(format!(
                            "the lone client was not refused as ClusterMismatch: {e}"
                        ));
                    }
                    None
                }
            };
            let rec = env.history.recorder("S22-holder-1", &resource);
            if let Ok(h1) = enter(&one, rec, &mut store).await {
                sleep(Duration::from_millis(5)).await;
                h1.leave(&mut store).await;
            }
            if let Some(h2) = h2 {
                h2.leave(&mut store).await;
            }
        }
    }

    // Contention: four clients of each group on one resource.
    let k = 4;
    let ones = env.spawn_workers(k, 1, Work::default(), first);
    let twos = env.spawn_workers(k, 1, Work::default(), other);
    sleep(phase()).await;
    let mut tasks = ones.into_tasks();
    tasks.extend(twos.into_tasks());
    let workers = Workers::from_parts(Arc::new(AtomicBool::new(true)), tasks);

    // Per group, from the workers' names (the first group's are numbered first).
    let history = env.history.snapshot();
    let mut groups = [Group::default(), Group::default()];
    for e in history.iter().filter(|e| e.client.contains("-w")) {
        let n: usize = e.client.rsplit("-w").next().unwrap().parse().unwrap();
        let group = &mut groups[usize::from(n >= k)];
        match e.op {
            Op::AcqOk => group.acquired += 1,
            Op::AcqFail => *group.failed.entry(e.detail.clone()).or_default() += 1,
            _ => {}
        }
    }
    env.note(format!(
        "first group: {} acquired, failed {:?}; second group: {} acquired, failed {:?}",
        groups[0].acquired, groups[0].failed, groups[1].acquired, groups[1].failed
    ));
    if record && mutant.is_none() {
        // The contention meant something: both groups held the lock (through the members
        // both list), or the second was refused outright for its other terms.
        let refused = groups[1]
            .failed
            .get("ClusterMismatch")
            .copied()
            .unwrap_or(0);
        match second {
            Second::OtherList if groups[0].acquired == 0 || groups[1].acquired == 0 => {
                env.violation("a group never held the lock: the contention proves nothing")
            }
            Second::OtherTerms if groups[1].acquired > 0 || refused == 0 => env.violation(format!(
                "the lone clients were not all refused: {:?}",
                groups[1]
            )),
            _ => {}
        }
    }
    env.finish(workers, Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s22_overlapping_master_lists_without_a_record() {
    s22(
        false,
        Second::OtherList,
        None,
        Expect::Detect(Checker::Overlap),
    )
    .await
    .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s22_overlapping_master_lists_with_a_record() {
    s22(true, Second::OtherList, None, Expect::Hold)
        .await
        .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s22_a_client_under_other_terms_with_a_record() {
    s22(true, Second::OtherTerms, None, Expect::Hold)
        .await
        .check();
}

/// The fields of master `i`'s cluster record.
async fn record_of(env: &Env, i: usize) -> HashMap<String, String> {
    crate::support::cluster_record(&env.cluster.server(i).url(), RECORD).await
}

/// S23: see the module docs. Three masters bootstrapped by `init_cluster`, six clients on
/// two resources with `guards` (restart quarantine on); master 0 is flushed a third into
/// the run. A probe client that knew it (connected before the flush) tries a throwaway
/// resource every 20 ms: master 0 must not grant it within its quarantine window of the
/// flush, and must grant it again within the window plus 3 s; its record must come back
/// with its member id and `counters=lost`.
pub async fn s23(guards: Guards, expect: Expect) -> Outcome {
    let persistence = if guards.fencing {
        Persistence::AofAlways
    } else {
        Persistence::None
    };
    let name = format!(
        "FLUSHALL on a member of an initialised cluster{}",
        guards.label()
    );
    let setup = Setup::new("S23", name, expect, 3).persistence(persistence);
    let mut env = Env::start(setup).await;
    let urls = env.urls();
    let client = || build(guards.apply(client_over(urls.clone()), TTL), None);
    let init = client().init_cluster().await.unwrap();
    assert_eq!(init.outcome, InitOutcome::Bootstrapped, "{init}");
    let id = init.members[0].1.clone();
    let probe = client();
    let probe_resource = format!("{}probe", env.prefix);
    warm(&probe, &env.prefix).await;

    let workers = env.spawn_workers(6, 2, Work::default(), |_| client());
    env.mark_heal();
    sleep(phase() / 3).await;
    env.cluster.server(0).flushall().await.unwrap();
    let flushed = Instant::now();
    // Restart quarantine's window (docs/design.md §7), on the probe's clock.
    let window = TTL.mul_f64(1.01) + Duration::from_millis(2);
    let mut rejoined = None;
    let mut tries = 0u32;
    while flushed.elapsed() < window + Duration::from_secs(3) {
        tries += 1;
        match probe.try_acquire(&probe_resource).await {
            Ok(lease) => {
                let by = granted(lease.masters());
                lease.release().await.ok();
                if by.contains(&0) {
                    rejoined = Some(flushed.elapsed());
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::ClusterMismatch || !e.is_retryable() => {
                env.violation(format!("the probe was refused: {e}"));
                break;
            }
            Err(_) => {}
        }
        sleep(Duration::from_millis(20)).await;
    }
    match rejoined {
        Some(after) if after < window => env.violation(format!(
            "master 0 voted {} ms after it was flushed, within its quarantine ({} ms)",
            after.as_millis(),
            window.as_millis()
        )),
        Some(after) => env.note(format!(
            "master 0 re-joined {} ms after the flush (window {} ms, {tries} probes)",
            after.as_millis(),
            window.as_millis()
        )),
        None => env.violation(format!(
            "master 0 did not re-join within {} ms of the flush ({tries} probes)",
            (window + Duration::from_secs(3)).as_millis()
        )),
    }
    let fields = record_of(&env, 0).await;
    if fields.get("master") != Some(&id)
        || fields.get("counters").map(String::as_str) != Some("lost")
    {
        env.violation(format!(
            "master 0's record did not come back as member {id} with counters lost: {fields:?}"
        ));
    }
    sleep(phase().saturating_sub(phase() / 3 + flushed.elapsed())).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(window + TTL + Duration::from_millis(1500)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s23_a_flushed_member_rejoins_quarantine() {
    s23(Guards::RSV, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s23_a_flushed_member_rejoins_fenced() {
    s23(Guards::RSV_F, Expect::Hold).await.check();
}

/// The holder's TTL in S24: long enough for the restart, the bootstrap and the contender
/// to run inside its validity.
const HOLD_TTL: Duration = Duration::from_millis(2500);

/// S24: see the module docs. Three masters in use without a record (old data epochs, so
/// they vote), restart quarantine on. The holder is granted masters 0 and 1 (master 2
/// cut off); master 0 restarts empty; master 2 comes back; an operator's client (with
/// `mutant`) runs `init_cluster`; a new contender tries while the holder is inside.
pub async fn s24(mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S24",
        "init_cluster on masters in use, one restarted empty [RSV]",
        expect,
        3,
    )
    .proxies();
    let mut env = Env::start(setup).await;
    env.ttl_max = HOLD_TTL;
    seed_epochs(&env.cluster).await;
    let urls = env.urls();
    let with = |builder| Guards::RSV.apply(builder, HOLD_TTL);
    let holder = build(
        with(
            client_over(urls.clone())
                .ttl(HOLD_TTL)
                .timeouts(Timeouts::new().node(Duration::from_millis(100)))
                .retry(Retry::new().attempts(5)),
        ),
        None,
    );
    settle(&holder, &env.prefix).await;
    let resource = env.resource(0);
    let mut store = env.store().await;
    env.proxies[2].set_mode(Mode::Blackhole);
    let rec = env.history.recorder("S24-holder", &resource);
    let Ok(held) = enter(&holder, rec, &mut store).await else {
        panic!("S24: the holder could not acquire the bare majority");
    };
    assert_eq!(
        granted(held.lease.masters()),
        [0, 1],
        "S24: the script did not reach the bare majority"
    );
    env.cluster.server_mut(0).restart(false).await.unwrap();
    env.proxies[2].heal();

    let admin: Redlock = build(with(client_over(urls.clone())), mutant);
    match admin.init_cluster().await {
        Ok(init) => env.note(format!("init_cluster: {:?}", init.outcome)),
        Err(e) => {
            env.note(format!("init_cluster refused: {:?}", e.kind()));
            if e.kind() != ErrorKind::ClusterNotEmpty {
                env.violation(format!("init_cluster failed otherwise: {e}"));
            }
            for i in 0..3 {
                if !record_of(&env, i).await.is_empty() {
                    env.violation(format!("a refused init_cluster wrote on master {i}"));
                }
            }
        }
    }
    let contender = build(
        with(
            client_over(urls)
                .ttl(TTL)
                .retry(Retry::new().attempts(500).wait(Duration::from_millis(1200))),
        ),
        None,
    );
    let rec = env.history.recorder("S24-contender", &resource);
    match enter(&contender, rec, &mut store).await {
        Ok(c) => {
            env.note(format!(
                "contender in with masters {:?}",
                granted(c.lease.masters())
            ));
            sleep(Duration::from_millis(5)).await;
            c.leave(&mut store).await;
        }
        Err((_, e)) => {
            env.note(format!("contender kept out: {:?}", e.kind()));
            // Kept out by master 0 abstaining (it lost the holder's key), not by its
            // answer (a grant, a refusal). A last attempt that did not reach master 0 in
            // time says nothing either way: noted.
            let outcome = e.masters().first().map(|r| r.outcome().clone());
            if outcome.as_ref().is_some_and(unreached) {
                env.note(format!(
                    "master 0 not reached in the last attempt: {outcome:?}"
                ));
            } else if !matches!(outcome, Some(redquorum::MasterOutcome::Abstained { .. })) {
                env.violation(format!(
                    "master 0 did not abstain for the contender: {outcome:?}"
                ));
            }
        }
    }
    assert!(
        Instant::now() < held.lease.deadline(),
        "S24: the script outlived the holder's lease; it would overrun"
    );
    held.leave(&mut store).await;
    env.finish(Workers::none(), Checks::SCRIPTED).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s24_init_cluster_on_masters_in_use() {
    s24(None, Expect::Hold).await.check();
}
