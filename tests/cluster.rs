//! The cluster record (docs/design.md §11) on real masters: bootstrap, agreement between
//! clients, re-admission of a master that lost its data, and every refusal of
//! `init_cluster` leaving the masters untouched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Clock, Retry, Timeouts};
use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{ErrorKind, InitOutcome, MasterErrorKind, MasterOutcome, Redlock};
use redquorum_testkit::{Mode, Proxy};
use support::*;

const RECORD: &str = "redquorum:cluster";

/// A client with restart quarantine on (the default), over `urls`.
fn quarantined(urls: Vec<String>) -> redquorum::Builder {
    Redlock::builder()
        .masters(urls)
        .ttl("5s")
        .timeouts(Timeouts::new().node("200ms"))
        .retry(Retry::new().delay("5ms").jitter("10ms"))
}

#[tokio::test]
async fn a_bootstrapped_cluster_votes_at_once_and_init_is_idempotent() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = quarantined(cluster.urls()).build().unwrap();
    // Brand-new masters abstain without the record ...
    let err = client.try_acquire(&unique_key("before")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");

    let other = quarantined(cluster.urls()).build().unwrap();
    let init = other.init_cluster().await.unwrap();
    assert_eq!(init.outcome, InitOutcome::Bootstrapped, "{init}");
    assert_eq!(init.members.len(), 3);
    for (i, (_, id)) in init.members.iter().enumerate() {
        let fields = cluster_record(&cluster.server(i).url(), RECORD).await;
        assert_eq!(fields["cluster"], init.cluster_id);
        assert_eq!(&fields["master"], id);
        assert_eq!(fields["counters"], "kept");
    }
    // ... and vote at once with it: for the client that connected before the bootstrap
    // (its next request reads the record) and for one that connects afterwards.
    let lease = client.try_acquire(&unique_key("early")).await.unwrap();
    lease.release().await.unwrap();
    let fresh = quarantined(cluster.urls()).build().unwrap();
    let lease = fresh.try_acquire(&unique_key("after")).await.unwrap();
    lease.release().await.unwrap();

    let again = fresh.init_cluster().await.unwrap();
    assert_eq!(again.outcome, InitOutcome::AlreadyInitialised);
    assert_eq!(again.cluster_id, init.cluster_id);
    assert_eq!(again.members, init.members);
}

// Checks I1 (two quorums of the same masters share a master).
#[tokio::test]
async fn a_client_with_other_settings_is_refused_and_leaves_nothing() {
    let cluster = Cluster::start(3).await.unwrap();
    client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    let ours = client(&cluster).build().unwrap();
    let key = unique_key("agree");
    ours.acquire(&key).await.unwrap().release().await.unwrap();

    for (what, builder) in [
        ("ttl_max", client(&cluster).ttl_max("10s")),
        (
            "drift",
            client(&cluster).clock(Clock::new().drift_factor(0.02)),
        ),
    ] {
        let theirs = builder.build().unwrap();
        let err = theirs.acquire(&key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{what}: {err}");
        assert!(!err.is_retryable(), "{what}");
        let text = err.to_string();
        assert!(text.contains(what), "{what}: {text}");
        // Every master that answered refused (the round may end before the last).
        assert!(
            err.masters().iter().all(|r| matches!(
                r.outcome(),
                MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::ClusterMismatch
            ) || matches!(r.outcome(), MasterOutcome::Pending)),
            "{what}: {err:?}"
        );
        assert!(gone_everywhere(&cluster, &key).await, "{what}");
    }
}

// Checks I1 (two quorums of the same masters share a master).
#[tokio::test]
async fn two_addresses_of_one_server_are_refused() {
    let cluster = Cluster::start_with(2, &ServerOptions::new().unix_socket(true))
        .await
        .unwrap();
    // Over TCP and over its unix socket: one server behind two addresses.
    let urls = vec![
        cluster.server(0).url(),
        cluster.server(0).unix_url().unwrap(),
        cluster.server(1).url(),
    ];
    let twice = Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .timeouts(Timeouts::new().node("200ms"))
        .build()
        .unwrap();
    let err = twice.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
    assert!(err.to_string().contains("same server"), "{err}");
    for server in cluster.servers() {
        assert!(cluster_record(&server.url(), RECORD).await.is_empty());
    }
    let key = unique_key("twice");
    let err = twice.acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
    assert!(!err.is_retryable());
    assert!(gone_everywhere(&cluster, &key).await);
}

#[tokio::test]
async fn init_refuses_a_master_down_and_writes_nothing() {
    let mut cluster = Cluster::start(3).await.unwrap();
    cluster.server_mut(2).kill().unwrap();
    let admin = client(&cluster)
        .timeouts(Timeouts::new().connect("300ms"))
        .build()
        .unwrap();
    let err = admin.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable());
    // It says why, and which master did not answer.
    let text = err.to_string();
    assert!(text.contains("every master"), "{text}");
    let down = cluster.server(2).url();
    assert!(text.contains(&down), "{text}");
    assert!(
        err.masters().iter().any(|r| r.master() == down.as_str()
            && matches!(r.outcome(), MasterOutcome::Failed(_))),
        "{err:?}"
    );
    for i in 0..2 {
        assert!(
            cluster_record(&cluster.server(i).url(), RECORD)
                .await
                .is_empty()
        );
    }
}

// Checks I11 (a master that may have lost keys waits before it votes).
#[tokio::test]
async fn init_refuses_masters_that_hold_keys_and_writes_nothing() {
    let cluster = Cluster::start(3).await.unwrap();
    let prefix = "app:";
    let mut conn = raw(&cluster.server(1).url()).await;
    let _: () = conn.set("app:orders:7", "someone").await.unwrap();
    // A key outside the prefix is not the cluster's business.
    let _: () = conn.set("other:thing", "x").await.unwrap();
    let admin = client(&cluster).key_prefix(prefix).build().unwrap();
    let err = admin.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("app:orders:7"), "{err}");
    for server in cluster.servers() {
        assert!(
            cluster_record(&server.url(), "app:redquorum:cluster")
                .await
                .is_empty()
        );
    }
    let _: () = conn.del("app:orders:7").await.unwrap();
    let init = admin.init_cluster().await.unwrap();
    assert_eq!(init.outcome, InitOutcome::Bootstrapped);
}

#[tokio::test]
async fn init_refuses_a_cluster_initialised_otherwise_and_writes_nothing() {
    let cluster = Cluster::start(3).await.unwrap();
    client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    let before: Vec<_> =
        futures::future::join_all(cluster.servers().iter().map(|s| record_of(s.url()))).await;
    let other = client(&cluster).ttl("6s").build().unwrap();
    let err = other.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
    assert!(err.to_string().contains("ttl_max"), "{err}");
    let after: Vec<_> =
        futures::future::join_all(cluster.servers().iter().map(|s| record_of(s.url()))).await;
    assert_eq!(before, after);
}

async fn record_of(url: String) -> HashMap<String, String> {
    cluster_record(&url, RECORD).await
}

#[tokio::test]
async fn a_flushed_member_is_readmitted_by_a_client_that_knew_it() {
    let cluster = Cluster::start(3).await.unwrap();
    let admin = quarantined(cluster.urls()).build().unwrap();
    let init = admin.init_cluster().await.unwrap();
    // Master 0's re-admission (the script's refusal, the record read again, the record
    // written) runs inside one request, bounded by the node timeout: a generous one, so
    // that a loaded machine does not cut it short (a cut one is only done again at the next
    // request).
    let client = quarantined(cluster.urls())
        .timeouts(Timeouts::new().node("2s"))
        .build()
        .unwrap();
    client
        .try_acquire(&unique_key("known"))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let url = cluster.server(0).url();
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    // The next request finds the record gone: master 0 gets its id back, marked as having
    // lost its counters, and abstains (restart quarantine); the others carry the lock.
    let key = unique_key("after-flush");
    let lease = client.acquire(&key).await.unwrap();
    // The acquire returns once a quorum answered: master 0's record may still be on its way.
    wait_until(
        Duration::from_secs(5),
        "master 0's record written again",
        || {
            let url = url.clone();
            async move { !cluster_record(&url, RECORD).await.is_empty() }
        },
    )
    .await;
    let fields = cluster_record(&url, RECORD).await;
    assert_eq!(fields["master"], init.members[0].1);
    assert_eq!(fields["counters"], "lost");
    assert!(!fields.contains_key("bootstrap_run_id"));
    let lease2 = client.try_acquire(&unique_key("third")).await.unwrap();
    assert!(matches!(
        lease2.masters()[0].outcome(),
        MasterOutcome::Abstained { .. } | MasterOutcome::Failed(_) | MasterOutcome::Pending
    ));
    lease2.release().await.unwrap();
    lease.release().await.unwrap();
    // A new client that never saw master 0 accepts the rewritten record.
    let newcomer = quarantined(cluster.urls()).build().unwrap();
    newcomer
        .try_acquire(&unique_key("newcomer"))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stranger_without_a_record_never_votes_and_init_readmits_it() {
    let cluster = Cluster::start(3).await.unwrap();
    client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    let url = cluster.server(2).url();
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    // A client that never saw master 2 cannot tell it from a stranger: it never votes,
    // and the other two carry the lock.
    let newcomer = client(&cluster).build().unwrap();
    let key = unique_key("stranger");
    let lease = newcomer.acquire(&key).await.unwrap();
    // Met first, before the other two showed the record, master 2 may have set the key;
    // it never counts.
    assert!(
        !lease.masters()[2].outcome().is_granted(),
        "{:?}",
        lease.masters()
    );
    lease.release().await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "the release reached master 2",
        || {
            let (url, key) = (url.clone(), key.clone());
            async move { get(&url, &key).await.is_none() }
        },
    )
    .await;
    // The operator says it is a member: init_cluster gives it the missing id back.
    let init = newcomer.init_cluster().await.unwrap();
    assert_eq!(
        init.outcome,
        InitOutcome::Readmitted(vec![cluster.server(2).url()])
    );
    assert_eq!(cluster_record(&url, RECORD).await["counters"], "lost");
    let fresh = client(&cluster).build().unwrap();
    let lease = fresh.acquire(&key).await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "the re-admitted master votes",
        || {
            let (url, key, value) = (url.clone(), key.clone(), lease.value().to_owned());
            async move { get(&url, &key).await.as_deref() == Some(value.as_str()) }
        },
    )
    .await;
    lease.release().await.unwrap();
}

#[tokio::test]
async fn names_in_the_records_namespace_are_refused() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let err = client.acquire("redquorum:cluster").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
    assert!(!err.is_retryable());
    let err = Redlock::builder()
        .master(cluster.server(0).url())
        .key_prefix("redquorum:x:")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("redquorum:"), "{err}");
}

#[tokio::test]
async fn concurrent_inits_never_mix_their_records() {
    for round in 0..3 {
        let cluster = Cluster::start(3).await.unwrap();
        let a = client(&cluster).build().unwrap();
        let b = client(&cluster).build().unwrap();
        let (ra, rb) = tokio::join!(a.init_cluster(), b.init_cluster());
        for r in [&ra, &rb] {
            if let Err(e) = r {
                assert!(e.is_retryable(), "round {round}: {e}");
            }
        }
        let ids: Vec<Option<String>> =
            futures::future::join_all(cluster.servers().iter().map(|s| record_of(s.url())))
                .await
                .into_iter()
                .map(|r| r.get("cluster").cloned())
                .collect();
        let written: Vec<&String> = ids.iter().flatten().collect();
        assert!(
            written.windows(2).all(|w| w[0] == w[1]),
            "round {round}: records of two clusters: {ids:?}"
        );
        // Whatever happened, calling again completes one cluster.
        let done = a.init_cluster().await.unwrap();
        for id in
            futures::future::join_all(cluster.servers().iter().map(|s| record_of(s.url()))).await
        {
            assert_eq!(id["cluster"], done.cluster_id, "round {round}");
        }
    }
}

#[tokio::test]
async fn init_reports_binary_keys_and_keeps_its_word_on_them() {
    let cluster = Cluster::start(3).await.unwrap();
    let mut conn = raw(&cluster.server(2).url()).await;
    let _: () = redis::cmd("SET")
        .arg(b"\xff\xfe binary".as_slice())
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
    for server in cluster.servers() {
        assert!(cluster_record(&server.url(), RECORD).await.is_empty());
    }
}

#[tokio::test]
async fn a_refused_master_heals_on_a_live_connection_once_readmitted() {
    let cluster = Cluster::start(3).await.unwrap();
    client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    let url = cluster.server(2).url();
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    let newcomer = client(&cluster).build().unwrap();
    let key = unique_key("heal");
    newcomer
        .acquire(&key)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // The newcomer saw master 2 as a stranger; an operator re-admits it.
    client(&cluster)
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    // The newcomer's connection to master 2 stays open; its next lock counts master 2.
    wait_until(
        Duration::from_secs(3),
        "master 2 votes for the newcomer",
        || {
            let (newcomer, key, url) = (newcomer.clone(), key.clone(), url.clone());
            async move {
                let lease = newcomer.acquire(&key).await.unwrap();
                let on_master_2 = lease.masters()[2].outcome().is_granted()
                    || get(&url, &key).await.as_deref() == Some(lease.value());
                lease.release().await.unwrap();
                on_master_2
            }
        },
    )
    .await;
}

// Checks I2 (a round's first decision is final).
#[tokio::test]
async fn a_stranger_met_before_the_record_never_counts() {
    // The cluster is masters 0, 1 and 2; a second client lists 1, 2 and 3 (the cluster's
    // terms, another list). Master 3 has no record.
    let cluster = Cluster::start(4).await.unwrap();
    let urls = cluster.urls();
    let members = urls[..3].to_vec();
    let over = |urls: Vec<String>| {
        Redlock::builder()
            .quarantine(false)
            .masters(urls)
            .ttl("5s")
            .timeouts(Timeouts::new().node("200ms"))
            .retry(Retry::new().delay("5ms"))
    };
    over(members).build().unwrap().init_cluster().await.unwrap();

    // The holder takes masters 0 and 2: master 1 is cut off from it.
    let cut = Proxy::for_server(cluster.server(1)).await.unwrap();
    cut.set_mode(Mode::Blackhole);
    let holder = over(vec![urls[0].clone(), cut.url(), urls[2].clone()])
        .build()
        .unwrap();
    let key = unique_key("stranger-first");
    let lease = holder.acquire(&key).await.unwrap();
    assert_eq!(get(&urls[1], &key).await, None);

    // The other client reaches master 3 at once and masters 1 and 2 only 150 ms later
    // each way: master 3 grants its first request, sent before the client knew of any
    // record; then masters 1 and 2 show the record, and master 1 grants too. Masters 1
    // and 3 are a quorum of its list, disjoint from the holder's: master 3's grant must
    // not count.
    let slow: Vec<Proxy> =
        futures::future::join_all((1..3).map(|i| Proxy::for_server(cluster.server(i))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    for proxy in &slow {
        proxy.set_mode(Mode::delay(Duration::from_millis(150), Duration::ZERO));
    }
    let other = over(vec![slow[0].url(), slow[1].url(), urls[3].clone()])
        .timeouts(Timeouts::new().node("2s").connect("3s"))
        .build()
        .unwrap();
    let err = other.try_acquire(&key).await.unwrap_err();
    assert!(!lease.is_expired());
    assert!(
        matches!(err.kind(), ErrorKind::Contended | ErrorKind::NoQuorum),
        "{err}"
    );
    // Master 3 did set the key (and the failed attempt releases it).
    assert!(
        matches!(err.masters()[2].outcome(), MasterOutcome::Failed(_)),
        "{err:?}"
    );
    // Once it knows the cluster, the client reads master 3 again: a stranger.
    let err = other.try_acquire(&key).await.unwrap_err();
    assert!(
        matches!(
            err.masters()[2].outcome(),
            MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Misconfigured
        ),
        "{err:?}"
    );
    lease.release().await.unwrap();
    wait_until(Duration::from_secs(2), "master 3 released", || {
        let (url, key) = (urls[3].clone(), key.clone());
        async move { get(&url, &key).await.is_none() }
    })
    .await;
}

#[tokio::test]
async fn the_health_check_names_masters_that_do_not_vote_for_this_client() {
    let cluster = Cluster::start(3).await.unwrap();
    let urls = cluster.urls();
    quarantined(urls.clone())
        .build()
        .unwrap()
        .init_cluster()
        .await
        .unwrap();
    let ours = quarantined(urls.clone())
        .build()
        .unwrap()
        .check_masters()
        .await;
    assert!(ours.is_healthy(), "{ours}");
    let theirs = quarantined(urls).ttl_max("20s").build().unwrap();
    let report = theirs.check_masters().await;
    assert!(!report.is_healthy(), "{report}");
    assert!(report.to_string().contains("ttl_max_ms"), "{report}");
}

#[tokio::test]
async fn init_refuses_masters_of_two_clusters_and_writes_nothing() {
    let cluster = Cluster::start(6).await.unwrap();
    let urls = cluster.urls();
    let over = |masters: &[usize]| {
        Redlock::builder()
            .quarantine(false)
            .masters(masters.iter().map(|&i| urls[i].clone()))
            .ttl("5s")
            .timeouts(Timeouts::new().node("200ms"))
            .build()
            .unwrap()
    };
    over(&[0, 1, 2]).init_cluster().await.unwrap();
    over(&[3, 4, 5]).init_cluster().await.unwrap();
    let before: Vec<_> = futures::future::join_all(urls.iter().cloned().map(record_of)).await;
    // The same terms, but masters of both clusters.
    let err = over(&[0, 1, 5]).init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("another cluster"), "{err}");
    let after: Vec<_> = futures::future::join_all(urls.iter().cloned().map(record_of)).await;
    assert_eq!(before, after);
}
#[tokio::test]
async fn init_from_another_master_list_never_gives_a_live_members_id_to_a_stranger() {
    // Cluster {0, 1, 2} initialised; a client configured {0, 3, 4} runs init_cluster.
    let cluster = Cluster::start(5).await.unwrap();
    let urls = cluster.urls();
    let ours = vec![urls[0].clone(), urls[1].clone(), urls[2].clone()];
    let theirs = vec![urls[0].clone(), urls[3].clone(), urls[4].clone()];
    let plain = |urls: Vec<String>| {
        Redlock::builder()
            .quarantine(false)
            .masters(urls)
            .timeouts(Timeouts::new().node("200ms"))
            .build()
            .unwrap()
    };
    plain(ours.clone()).init_cluster().await.unwrap();
    let stranger = plain(theirs);
    let err = stranger.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
    assert!(!err.is_retryable());
    for url in &urls[3..] {
        assert!(
            cluster_record(url, RECORD).await.is_empty(),
            "{url} was given an id"
        );
    }
    // And that client, which has read master 0's record, never gets a lock out of the two
    // strangers and one member. (A client that has read no record yet decides its first
    // round as early as any: docs/design.md §11.)
    let key = unique_key("split");
    let held = plain(ours).acquire(&key).await.unwrap();
    let err = stranger.try_acquire(&key).await.unwrap_err();
    assert!(
        err.is_retryable() || err.kind() == ErrorKind::Misconfigured,
        "{err}"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn force_unlocks_refuse_masters_of_another_cluster_and_change_nothing() {
    let cluster = Cluster::start(6).await.unwrap();
    let urls = cluster.urls();
    let over = |masters: &[usize]| {
        Redlock::builder()
            .quarantine(false)
            .masters(masters.iter().map(|&i| urls[i].clone()))
            .ttl("5s")
            .timeouts(Timeouts::new().node("200ms"))
            .build()
            .unwrap()
    };
    over(&[0, 1, 2]).init_cluster().await.unwrap();
    over(&[3, 4, 5]).init_cluster().await.unwrap();
    let key = unique_key("their-lock");
    let theirs = over(&[3, 4, 5]).acquire(&key).await.unwrap();
    // An operator of the first cluster lists two masters of the second by mistake.
    let typo = over(&[0, 3, 4]);
    for err in [
        typo.force_unlock_any(&key).await.unwrap_err(),
        typo.force_unlock(&key, theirs.value()).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::ClusterMismatch, "{err}");
        assert!(!err.is_retryable());
    }
    for url in &urls[3..] {
        assert_eq!(
            get(url, &key).await.as_deref(),
            Some(theirs.value()),
            "{url}"
        );
    }
    theirs.release().await.unwrap();
}

/// A master whose user may not run a command a step of `init_cluster` needs (here the
/// scan for keys under the prefix) fails it as refused permissions, `Auth`, not
/// retryable, naming the master: trying again cannot help until its ACL changes.
#[tokio::test]
async fn init_refused_a_command_by_the_acl_is_auth_not_an_outage() {
    let cluster = Cluster::start(1).await.unwrap();
    let server = cluster.server(0);
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "noscan", "on", ">pw", "~*", "&*", "+@all", "-scan",
        ])
        .query_async(&mut raw(&server.url()).await)
        .await
        .unwrap();
    let url = format!("redis://noscan:pw@127.0.0.1:{}", server.port());
    let client = Redlock::builder().masters([url.as_str()]).build().unwrap();
    let err = client.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains(
            "refused this client's credentials or a command or key its ACL denies: check the user"
        ),
        "{shown}"
    );
    assert!(!shown.contains("try again"), "{shown}");
    assert!(!shown.contains("noscan:pw"), "the password shows: {shown}");
}

/// The ACL refusing a command inside a lock's script (here `SET`) is refused permissions,
/// `Auth`, not retryable: not a script's failure, which a retry could get past.
#[tokio::test]
async fn a_command_refused_inside_a_script_is_auth() {
    let cluster = Cluster::start(1).await.unwrap();
    let server = cluster.server(0);
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set"])
        .query_async(&mut raw(&server.url()).await)
        .await
        .unwrap();
    let url = format!("redis://noset:pw@127.0.0.1:{}", server.port());
    let client = Redlock::builder()
        .masters([url.as_str()])
        .quarantine(false)
        .build()
        .unwrap();
    let err = client.try_acquire(&unique_key("noset")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let failed = err.masters()[0].outcome();
    assert!(
        matches!(failed, MasterOutcome::Failed(e) if e.kind() == MasterErrorKind::Auth),
        "{err}"
    );
}

/// A master whose user may not touch a key the lock needs (here the cluster record, which
/// is outside the user's key patterns without a key prefix) fails it as refused permissions, `Auth`, and the fix
/// names a key the ACL denies, not only a command.
#[tokio::test]
async fn init_refused_a_key_by_the_acl_names_keys() {
    let cluster = Cluster::start(1).await.unwrap();
    let server = cluster.server(0);
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">pw", "~app:*", "&*", "+@all"])
        .query_async(&mut raw(&server.url()).await)
        .await
        .unwrap();
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let client = Redlock::builder().masters([url.as_str()]).build().unwrap();
    let err = client.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let shown = err.to_string();
    assert!(shown.contains("NoPerm"), "{shown}");
    assert!(
        shown.contains("refused this client's credentials or a command or key its ACL denies"),
        "{shown}"
    );
    assert!(!shown.contains("app:pw"), "the password shows: {shown}");
}
