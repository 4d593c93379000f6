//! The cluster record in the simulation: clients whose configurations differ over one
//! initialised cluster, an operator's force-unlocks, and the scripts that reach the
//! record's edge cases step by step.

use super::*;

use crate::Redlock;
use crate::sim::world::ClusterPlan;

/// A client over the servers `list` (in that order) with `spec`, further settings from
/// `adjust`; with the gates of its connections, in the order of `list`.
fn client_of(
    servers: &[Arc<SimServer>],
    list: &[usize],
    spec: &ClientSpec,
    sends: &Arc<SendLog>,
    adjust: impl FnOnce(crate::Builder) -> crate::Builder,
) -> (Redlock, Vec<Arc<Gate>>) {
    let chosen: Vec<Arc<SimServer>> = list.iter().map(|&m| Arc::clone(&servers[m])).collect();
    world::build_client_with(spec, &chosen, |_| StdRng::seed_from_u64(0), sends, adjust)
}

/// Quarantine on, no fencing, every message 1 ms, one attempt per acquire.
fn calm_spec(ttl: Duration) -> ClientSpec {
    ClientSpec {
        ttl,
        node_timeout: 50 * MS,
        attempts: 1,
        retry_delay: 100 * MS,
        quarantine: true,
        fencing: false,
        mutant: None,
        net: CALM,
    }
}

/// A cluster record written by `init_cluster` of a client over `list`.
async fn init(servers: &[Arc<SimServer>], list: &[usize], spec: &ClientSpec) {
    let sends = Arc::new(SendLog::default());
    let (admin, _) = client_of(servers, list, spec, &sends, |b| b);
    let init = admin.init_cluster().await.unwrap();
    assert_eq!(init.outcome, crate::InitOutcome::Bootstrapped, "{init}");
}

fn masters(n: usize, clock: Clock) -> Vec<Arc<SimServer>> {
    (0..n)
        .map(|m| Arc::new(SimServer::new(m, false, clock)))
        .collect()
}

/// A client whose list overlaps the cluster's but names a master without a record must
/// never count that master, even on its very first round, when it has not yet seen any
/// record: the cluster is {m0, m1, m2}; H (over the cluster) holds {m0, m2}; S lists
/// {m1, m2, m3}, with the cluster's terms. S reaches m3 first (its links to m1 and m2
/// are held at their gates): m3 has no record and S knows none yet, so m3 grants S's
/// `SET` with the empty fingerprint. Then S meets m1 and m2, adopts the record there, and
/// m1 grants too. {m1, m3} is a quorum of S's list, disjoint from H's {m0, m2}.
// Checks I2 (a round's first decision is final).
#[tokio::test(start_paused = true)]
async fn scripted_a_stranger_met_before_the_record_never_counts() {
    let ttl = Duration::from_secs(1);
    let clock = Clock::start();
    let servers = masters(4, clock);
    let spec = calm_spec(ttl);
    init(&servers, &[0, 1, 2], &spec).await;
    let sends = Arc::new(SendLog::default());
    let (h, h_gates) = client_of(&servers, &[0, 1, 2], &spec, &sends, |b| b);
    let (s, s_gates) = client_of(&servers, &[1, 2, 3], &spec, &sends, |b| b);

    h_gates[1].close();
    let first = h.acquire("r").await.unwrap();
    assert!(servers[1].holder("r").is_none());

    s_gates[0].close();
    s_gates[1].close();
    let second = tokio::spawn(async move { s.try_acquire("r").await });
    // m3 connects and answers S's SET within 4 ms; m1 and m2 are still held.
    tokio::time::sleep(5 * MS).await;
    let stranger_granted = servers[3].holder("r").is_some();
    s_gates[0].open();
    s_gates[1].open();
    let second = second.await.unwrap();
    assert!(stranger_granted, "m3 did not answer S first");
    assert!(!first.is_expired());
    match second {
        Ok(lease) => {
            let history = [
                record(0, &first, clock.origin()),
                record(1, &lease, clock.origin()),
            ];
            panic!(
                "S got the lock while H holds it, by {:?}: {:?}",
                lease.masters(),
                check::check(&history, &[])
            );
        }
        Err(e) => {
            // m3 is a stranger to S once S knows the cluster, and m2 is H's.
            assert!(
                matches!(e.kind(), ErrorKind::Contended | ErrorKind::NoQuorum),
                "{e}"
            );
        }
    }
}

/// Clients over one initialised cluster of 3 or 5 masters, with 2 more masters outside it:
/// two in five clients are configured otherwise (see `world::Differs`): a member swapped
/// for a master outside, more masters, fewer masters, a longer `ttl_max`, more drift.
/// The masters keep their data (and their records) over crashes, and none is flushed: a
/// client configured otherwise that meets only masters whose records were lost with their
/// data cannot be told from a client of an uninitialised cluster, so no record can refuse
/// it (docs/testing.md §8).
const AGREEMENT: Profile = Profile {
    name: "clients configured otherwise over one cluster",
    masters: &[3, 5],
    quarantine: true,
    fencing: true,
    mutant: None,
    faults: DURABLE,
    cluster: Some(ClusterPlan {
        extra: 2,
        mismatched: 0.4,
    }),
    many: false,
    waiting: Waiting::Default,
};

/// What the clients configured otherwise did over the fixed seeds.
#[derive(Debug, Default, Clone, Copy)]
struct Mismatched {
    /// Acquire calls of clients whose settings disagree, failed as `ClusterMismatch`.
    refused: u64,
    /// Their acquire calls that failed otherwise (their other masters never vote).
    failed_otherwise: u64,
    /// Leases held by clients that list a master outside the cluster instead of a member.
    other_member_leases: u64,
}

/// The clients whose configuration disagrees with the cluster's never hold a lease, and
/// counts what they did.
fn agreement(outcome: &Outcome, seen: &std::cell::Cell<Mismatched>) -> Result<(), String> {
    let configs = &outcome.schedule.configs;
    if let Some(lease) = outcome
        .leases
        .iter()
        .find(|l| !configs[l.client].differs.agrees())
    {
        return Err(format!(
            "c{} ({:?}) held lease #{}",
            lease.client, configs[lease.client].differs, lease.id
        ));
    }
    let mut counts = seen.get();
    for f in &outcome.failures {
        if configs[f.client].differs.agrees() {
            continue;
        }
        if f.retryable {
            counts.failed_otherwise += 1;
        } else if f.kind == ErrorKind::ClusterMismatch {
            counts.refused += 1;
        } else {
            return Err(format!("c{} failed as {:?}", f.client, f.kind));
        }
    }
    counts.other_member_leases += outcome
        .leases
        .iter()
        .filter(|l| configs[l.client].differs == world::Differs::OtherMember)
        .count() as u64;
    seen.set(counts);
    Ok(())
}

/// Clients with other master lists, counts, `ttl_max` or drift over one initialised
/// cluster, with restart quarantine and fencing: no overlap and no fencing violation
/// (nothing excused), and only the clients that agree with the record ever hold a lease;
/// those listing a master outside the cluster hold some, through the members they list.
// Checks I1 (two quorums of the same masters share a master).
#[test]
fn mismatched_configurations_never_hold_a_lease() {
    let test = test_path!();
    let seen = std::cell::Cell::new(Mismatched::default());
    let share = Share {
        fixed: 120,
        rotating: 120,
    };
    let held = hold_each(test, &AGREEMENT, share, &[], |o| agreement(o, &seen));
    let seen = seen.get();
    eprintln!("{test}: clients configured otherwise: {seen:?}");
    if held.full {
        assert!(seen.refused > 0 && seen.other_member_leases > 0, "{seen:?}");
        assert!(
            held.fixed.acquired > 2 * held.fixed.schedules,
            "{}",
            held.fixed
        );
    }
}

/// The same without restart quarantine or fencing (plain Redlock over masters that keep
/// their data, which is safe when every client agrees).
#[test]
fn mismatched_configurations_without_quarantine_never_hold_a_lease() {
    let test = test_path!();
    let profile = Profile {
        name: "clients configured otherwise over one cluster, no quarantine",
        quarantine: false,
        fencing: false,
        ..AGREEMENT
    };
    let seen = std::cell::Cell::new(Mismatched::default());
    let share = Share {
        fixed: 100,
        rotating: 100,
    };
    let held = hold_each(test, &profile, share, &[], |o| agreement(o, &seen));
    let seen = seen.get();
    eprintln!("{test}: clients configured otherwise: {seen:?}");
    if held.full {
        assert!(seen.refused > 0 && seen.other_member_leases > 0, "{seen:?}");
    }
}

/// An operator force-unlocks resources at random moments (up to three times a schedule),
/// among crashes (the masters keep their data), stops, slow and lost messages; no holder
/// pauses past its deadline, so every broken lease is the operator's doing.
const FORCE_UNLOCKS: Faults = Faults {
    force_unlocks: 3,
    client_pause: 0.0,
    ..DURABLE
};

/// With fencing, a force-unlock hands the lock to the next client while the holder still
/// works (the overlap is by design, and the only one excused), but tokens stay unique and
/// ordered and the storage refuses the old holder's late writes: no fencing violation is
/// excused.
#[test]
fn force_unlocks_break_leases_but_not_fencing() {
    let test = test_path!();
    let profile = Profile {
        name: "force-unlocks, fencing",
        masters: &[3, 5],
        faults: FORCE_UNLOCKS,
        ..PROTECTED
    };
    let share = Share {
        fixed: 150,
        rotating: 150,
    };
    let held = hold(test, &profile, share, &[Exception::ForceUnlock]);
    if held.full {
        let stats = held.fixed;
        assert!(stats.force_unlocks > 0, "{stats}");
        assert!(
            held.fixed_excused.force_unlock > 0,
            "no force-unlock broke a lease another client then took: too weak"
        );
        // Without client pauses, only force-unlocked holders write late.
        assert!(
            stats.client_pauses == 0 && stats.fenced_rejections > 0,
            "{stats}"
        );
    }
}

/// Without fencing, the overlap a force-unlock causes is all it may cause: those overlaps
/// alone are excused, and counted.
#[test]
fn force_unlocks_without_fencing_excuse_only_their_own_overlaps() {
    let test = test_path!();
    let profile = Profile {
        name: "force-unlocks, no fencing",
        masters: &[3, 5],
        fencing: false,
        faults: FORCE_UNLOCKS,
        ..PROTECTED
    };
    let share = Share {
        fixed: 100,
        rotating: 100,
    };
    let held = hold(test, &profile, share, &[Exception::ForceUnlock]);
    if held.full {
        assert!(held.fixed_excused.force_unlock > 0, "{}", held.fixed);
    }
}

/// `init_cluster` on masters in use, one of which lost its data: the holder H has masters
/// 0 and 1 (H's link to 2 is held), master 0 restarts empty, and an operator runs
/// `init_cluster`. It must refuse (master 1 holds H's key) and write nothing; then a new
/// client B finds master 0 in restart quarantine, master 1 H's, and cannot get in while H
/// holds the lock. With `mutant`, returns what the bootstrap did and the checker's
/// verdict over H's and B's leases.
async fn bootstrap_of_masters_in_use(
    mutant: Option<Mutant>,
) -> (Result<crate::ClusterInit, crate::Error>, Vec<Violation>) {
    let ttl = Duration::from_secs(2);
    let clock = Clock::start();
    let servers = masters(3, clock);
    let spec = calm_spec(ttl);
    let sends = Arc::new(SendLog::default());
    let (h, h_gates) = client_of(&servers, &[0, 1, 2], &spec, &sends, |b| b);
    h_gates[2].close();
    let first = h.acquire("r").await.unwrap();
    servers[0].crash();
    assert_eq!(servers[0].restart(), Some(false));
    tokio::time::sleep(10 * MS).await;

    let admin_spec = ClientSpec { mutant, ..spec };
    let (admin, _) = client_of(&servers, &[0, 1, 2], &admin_spec, &sends, |b| b);
    let init = admin.init_cluster().await;
    let (b, _) = client_of(&servers, &[0, 1, 2], &spec, &sends, |b| b);
    let second = b.try_acquire("r").await;
    assert!(!first.is_expired(), "H's lease must still be valid");
    let mut history = vec![record(0, &first, clock.origin())];
    if let Ok(lease) = &second {
        history.push(record(1, lease, clock.origin()));
    }
    (init, check::check(&history, &[]))
}

/// Without the planted bug: the bootstrap refuses masters that hold keys, so the master
/// that lost H's key stays in quarantine and B stays out.
#[tokio::test(start_paused = true)]
async fn scripted_bootstrap_refuses_masters_in_use() {
    let (init, found) = bootstrap_of_masters_in_use(None).await;
    let err = init.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
    assert!(found.is_empty(), "{found:?}");
}

#[cfg(redquorum_mutants)]
mod mutants {
    use super::*;

    /// A client that adopts any record: one listing a single member of the cluster (a
    /// quorum of one) is accepted, and holds the lock beside a client of the cluster
    /// holding two other members.
    // Checks I1 (two quorums of the same masters share a master).
    #[test]
    fn ignore_fingerprint_is_caught() {
        let profile = Profile {
            name: "clients that ignore the fingerprint",
            mutant: Some(Mutant::IgnoreFingerprint),
            ..AGREEMENT
        };
        detect(
            test_path!(),
            &profile,
            300,
            violation(&profile, |_, v| v.is_overlap()),
        );
    }

    /// The force-unlock exception covers only overlaps a force-unlock could have caused:
    /// with a quorum of `N / 2` among force-unlocks, the overlaps the mutant causes
    /// elsewhere still fail (excusing every overlap of a schedule with a force-unlock, or
    /// of a resource that was force-unlocked, would hide them).
    #[test]
    fn overlaps_no_force_unlock_touched_are_not_excused() {
        let profile = Profile {
            name: "half quorum among force-unlocks",
            masters: &[3, 5],
            mutant: Some(Mutant::HalfQuorum),
            faults: FORCE_UNLOCKS,
            ..PROTECTED
        };
        detect(
            test_path!(),
            &profile,
            200,
            violation(&profile, |o, v| {
                let Violation::Overlap { resource, .. } = v else {
                    return false;
                };
                o.breaches.force_unlocks.iter().any(|(_, r)| r == resource)
                    && !Exception::ForceUnlock.excuses(&o.leases, &o.breaches, v)
            }),
        );
    }

    /// A bootstrap that skips the emptiness check makes every master vote at once, master
    /// 0 among them, which lost H's key: B gets masters 0 and 2 while H holds the lock.
    // Checks I11 (a master that may have lost keys waits before it votes).
    #[tokio::test(start_paused = true)]
    async fn bootstrap_skipping_emptiness_is_caught_by_a_master_that_lost_its_keys() {
        let (init, found) =
            bootstrap_of_masters_in_use(Some(Mutant::BootstrapSkipsEmptiness)).await;
        assert_eq!(init.unwrap().outcome, crate::InitOutcome::Bootstrapped);
        assert!(
            found.len() == 1 && found[0].is_overlap(),
            "the checker must see the double grant: {found:?}"
        );
    }
}
