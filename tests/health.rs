//! `Redlock::check_masters` against real masters: what it reports of healthy, killed,
//! hung, evicting, replicating, durable and password-protected servers, and that it
//! returns within its bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::Timeouts;
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{
    Check, ErrorKind, HealthReport, MasterErrorKind, MasterHealth, QuarantineState, Redlock, Role,
    Severity,
};
use support::*;
use tokio::time::Instant;

const CONNECT: Duration = Duration::from_millis(300);
const NODE: Duration = Duration::from_millis(200);

/// A client over `urls` with short timeouts; restart quarantine on (the default).
fn checker<I, S>(urls: I) -> redquorum::Builder
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    Redlock::builder()
        .masters(urls)
        .ttl("2s")
        .timeouts(Timeouts::new().connect(CONNECT).node(NODE))
}

/// The checks of `master`'s findings of `severity`, in order.
fn checks(master: &MasterHealth, severity: Severity) -> Vec<Check> {
    master
        .findings()
        .iter()
        .filter(|f| f.severity() == severity)
        .map(|f| f.check())
        .collect()
}

/// The message of `master`'s one finding about `check`.
fn message(master: &MasterHealth, check: Check) -> String {
    let found: Vec<_> = master
        .findings()
        .iter()
        .filter(|f| f.check() == check)
        .collect();
    assert_eq!(found.len(), 1, "one finding about {check:?}: {master}");
    found[0].message().to_owned()
}

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync<T: Send + Sync + 'static>() {}

#[tokio::test]
async fn a_healthy_cluster_is_healthy_and_each_master_described() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = checker(cluster.urls()).build().unwrap();
    assert_send(&client.check_masters());
    assert_send_sync::<HealthReport>();

    let report = client.check_masters().await;
    assert!(report.is_healthy(), "{report}");
    assert_eq!((report.reachable(), report.quorum()), (3, 2));
    let shown = report.to_string();
    assert!(
        shown.starts_with("3 masters, quorum 2: 3 reachable, healthy"),
        "{shown}"
    );
    for (master, url) in report.masters().iter().zip(cluster.urls()) {
        assert_eq!(master.master(), url);
        assert!(shown.contains(&url), "{shown}");
        assert!(
            master.is_reachable() && master.error().is_none(),
            "{master}"
        );
        let version = master.facts().version.as_deref().unwrap();
        let major: u32 = version.split('.').next().unwrap().parse().unwrap();
        assert!(major >= 5, "{version}");
        assert_eq!(master.facts().role, Some(Role::Master));
        assert_eq!(master.facts().run_id.as_deref().map(str::len), Some(40));
        assert!(master.facts().uptime.is_some());
        // The testkit's default: no persistence.
        assert_eq!(master.facts().appendonly, Some(false));
        assert!(!master.facts().is_durable());
        assert_eq!(
            (
                master.facts().maxmemory,
                master.facts().maxmemory_policy.as_deref()
            ),
            (Some(0), Some("noeviction"))
        );
        let round_trip = master.facts().round_trip.unwrap();
        assert!(round_trip < NODE, "{round_trip:?}");
        // The masters share this machine's clock: they agree within the round trips.
        let offset = master.facts().clock_offset.unwrap().magnitude();
        assert!(offset < Duration::from_millis(50), "{offset:?}");
        assert!(
            master.facts().client_clock_offset.unwrap().magnitude() < Duration::from_millis(50)
        );
        // Never connected for locks yet: the client has not judged it.
        assert_eq!(master.quarantine(), QuarantineState::Unknown);
        assert!(master.facts().cluster_record.is_none());
        assert_eq!(
            checks(master, Severity::Note),
            [Check::Persistence, Check::ClusterRecord],
            "{master}"
        );
        assert!(message(master, Check::ClusterRecord).contains("not initialised"));
    }

    // Once the client has seen them, fresh masters abstain for a window: a note.
    let err = client.try_acquire(&unique_key("health")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    let report = client.check_masters().await;
    assert!(report.is_healthy(), "{report}");
    for master in report.masters() {
        let QuarantineState::Abstains { until } = master.quarantine() else {
            panic!("a fresh master abstains: {master}")
        };
        assert!(until > Instant::now());
        assert!(message(master, Check::Quarantine).contains("restart quarantine"));
    }
}

#[tokio::test]
async fn killed_and_hung_masters_are_unreachable_and_the_call_keeps_its_bound() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let client = checker(cluster.urls()).build().unwrap();
    cluster.server_mut(1).kill().unwrap();
    cluster.server_mut(2).pause().unwrap();

    let started = Instant::now();
    let report = client.check_masters().await;
    let took = started.elapsed();
    cluster.server_mut(2).resume().unwrap();
    // Connect timeout plus node timeout, with room for a loaded machine.
    assert!(
        took < CONNECT + NODE + Duration::from_millis(300),
        "{took:?}"
    );

    let [up, killed, hung] = report.masters() else {
        panic!("three masters")
    };
    assert!(up.is_healthy() && up.is_reachable(), "{up}");
    assert!(!killed.is_reachable());
    assert_eq!(checks(killed, Severity::Problem), [Check::Reachable]);
    let text = message(killed, Check::Reachable);
    assert!(text.starts_with("unreachable"), "{text}");
    assert!(text.contains("start it"), "{text}");
    assert_eq!(hung.error().unwrap().kind(), MasterErrorKind::Timeout);
    assert!(
        message(hung, Check::Reachable).contains("not paused or overloaded"),
        "{hung}"
    );
    assert_eq!(report.reachable(), 1);
    assert!(!report.is_healthy());
    assert_eq!(report.problems().count(), 2, "{report}");
    let shown = report.to_string();
    assert!(shown.contains("2 problems"), "{shown}");
    assert!(
        shown.contains(&format!("{}: unreachable", killed.master())),
        "{shown}"
    );
}

#[tokio::test]
async fn a_master_that_can_evict_keys_is_a_problem() {
    let evicting = Server::start(
        &ServerOptions::new()
            .arg("--maxmemory")
            .arg("64mb")
            .arg("--maxmemory-policy")
            .arg("allkeys-lru"),
    )
    .await
    .unwrap();
    let cluster = Cluster::start(2).await.unwrap();
    let mut urls = cluster.urls();
    urls.insert(0, evicting.url());
    let client = checker(&urls).build().unwrap();

    let report = client.check_masters().await;
    let [bad, rest @ ..] = report.masters() else {
        panic!("three masters")
    };
    assert_eq!(bad.facts().maxmemory, Some(64 * 1024 * 1024));
    assert_eq!(bad.facts().maxmemory_policy.as_deref(), Some("allkeys-lru"));
    assert_eq!(checks(bad, Severity::Problem), [Check::Eviction]);
    let text = message(bad, Check::Eviction);
    assert!(text.contains("never votes"), "{text}");
    assert!(text.contains("noeviction"), "{text}");
    assert!(rest.iter().all(MasterHealth::is_healthy), "{report}");
    assert!(!report.is_healthy());

    // Once connected, the client refuses it for good; still one problem, not two.
    let _ = client.try_acquire(&unique_key("evict")).await;
    let report = client.check_masters().await;
    let bad = &report.masters()[0];
    assert_eq!(bad.quarantine(), QuarantineState::Misconfigured);
    assert_eq!(checks(bad, Severity::Problem), [Check::Eviction], "{bad}");
}

#[tokio::test]
async fn a_replica_is_a_problem_and_its_master_gets_a_note() {
    let cluster = Cluster::start(3).await.unwrap();
    let (primary, replica) = (cluster.server(0), cluster.server(1));
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut raw(&replica.url()).await)
        .await
        .unwrap();
    let client = checker(cluster.urls()).build().unwrap();

    let report = client.check_masters().await;
    let replica = &report.masters()[1];
    assert_eq!(replica.facts().role, Some(Role::Replica));
    assert_eq!(
        checks(replica, Severity::Problem),
        [Check::Role],
        "{replica}"
    );
    let text = message(replica, Check::Role);
    assert!(text.contains("a replica never votes"), "{text}");
    assert!(text.contains("point the client at masters"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", primary.port())),
        "{text}"
    );
    assert!(!report.is_healthy());
    assert!(report.masters()[2].is_healthy());

    // The primary learns of its replica once the replica has connected.
    wait_until(Duration::from_secs(10), "the replica connected", || {
        let client = client.clone();
        async move {
            let report = client.check_masters().await;
            let primary = &report.masters()[0];
            assert_eq!(primary.facts().role, Some(Role::Master));
            assert!(primary.is_healthy(), "{primary}");
            checks(primary, Severity::Note).contains(&Check::Role)
        }
    })
    .await;
}

#[tokio::test]
async fn persistence_is_reported_and_matters_with_fencing() {
    let mut servers = Vec::new();
    for persistence in [
        Persistence::None,
        Persistence::AofEverySec,
        Persistence::AofAlways,
    ] {
        let options = ServerOptions::new().persistence(persistence);
        servers.push(Server::start(&options).await.unwrap());
    }
    // Durable, but CONFIG renamed away: no client can tell that it is.
    let hidden = ServerOptions::new()
        .persistence(Persistence::AofAlways)
        .arg("--rename-command")
        .arg("CONFIG")
        .arg("");
    servers.push(Server::start(&hidden).await.unwrap());
    let urls: Vec<String> = servers.iter().map(Server::url).collect();

    let report = checker(&urls).build().unwrap().check_masters().await;
    assert!(report.is_healthy(), "{report}");
    let [none, everysec, always, hidden] = report.masters() else {
        panic!("four masters")
    };
    assert_eq!(
        (none.facts().appendonly, none.facts().appendfsync.as_deref()),
        (Some(false), Some("everysec"))
    );
    assert_eq!(
        (
            everysec.facts().appendonly,
            everysec.facts().appendfsync.as_deref()
        ),
        (Some(true), Some("everysec"))
    );
    assert_eq!(
        (
            always.facts().appendonly,
            always.facts().appendfsync.as_deref()
        ),
        (Some(true), Some("always"))
    );
    assert_eq!(
        (
            hidden.facts().appendonly,
            hidden.facts().appendfsync.as_deref()
        ),
        (Some(true), None)
    );
    assert_eq!(
        [none, everysec, always, hidden].map(|m| m.facts().is_durable()),
        [false, false, true, false]
    );
    for master in [none, everysec, hidden] {
        assert_eq!(
            checks(master, Severity::Note)[0],
            Check::Persistence,
            "{master}"
        );
    }
    assert_eq!(checks(always, Severity::Note), [Check::ClusterRecord]);
    assert!(message(hidden, Check::Persistence).contains("allow CONFIG GET"));

    // With fencing, only durable masters count: the others are problems.
    let fenced = checker(&urls).fencing(true).build().unwrap();
    let report = fenced.check_masters().await;
    let problems: Vec<Vec<Check>> = report
        .masters()
        .iter()
        .map(|m| checks(m, Severity::Problem))
        .collect();
    assert_eq!(
        problems,
        [
            vec![Check::Persistence],
            vec![Check::Persistence],
            vec![],
            vec![Check::Persistence]
        ],
        "{report}"
    );
    let text = message(&report.masters()[1], Check::Persistence);
    assert!(
        text.contains("fencing tokens count only durable masters"),
        "{text}"
    );
    assert!(text.contains("appendfsync always"), "{text}");

    // Without restart quarantine, a master that is not durable is a problem too.
    let unguarded = checker(&urls).quarantine(false).build().unwrap();
    let report = unguarded.check_masters().await;
    assert_eq!(report.masters()[0].quarantine(), QuarantineState::Off);
    assert_eq!(
        checks(&report.masters()[0], Severity::Problem),
        [Check::Persistence]
    );
    assert!(report.masters()[2].is_healthy());
}

#[tokio::test]
async fn passwords_never_appear_in_the_report() {
    const PASSWORD: &str = "s3cret-health-pw";
    const WRONG: &str = "wr0ng-health-pw";
    let server = Server::start(&ServerOptions::new().password(PASSWORD))
        .await
        .unwrap();
    let url = server.url();
    assert!(
        url.contains(PASSWORD),
        "the testkit's URL carries the password"
    );
    let wrong = url.replace(PASSWORD, WRONG);
    let bare = format!("redis://127.0.0.1:{}", server.port());

    let right = checker([&url]).build().unwrap().check_masters().await;
    assert!(right.is_healthy(), "{right}");
    assert!(right.masters()[0].master().contains("***"));
    for (url, says) in [(&wrong, "authentication failed"), (&bare, "NOAUTH")] {
        let report = checker([url]).build().unwrap().check_masters().await;
        let master = &report.masters()[0];
        assert_eq!(
            master.error().unwrap().kind(),
            MasterErrorKind::Auth,
            "{report}"
        );
        let text = message(master, Check::Reachable);
        assert!(text.to_lowercase().contains(&says.to_lowercase()), "{text}");
        assert!(text.contains("fix the user and password"), "{text}");
        for shown in [format!("{report}"), format!("{report:?}")] {
            assert!(
                !shown.contains(PASSWORD) && !shown.contains(WRONG),
                "{shown}"
            );
        }
    }
    for shown in [format!("{right}"), format!("{right:?}")] {
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
}

#[tokio::test]
async fn one_server_listed_under_two_addresses_is_a_problem() {
    let server = Server::start(&ServerOptions::new().unix_socket(true))
        .await
        .unwrap();
    let other = Server::start(&ServerOptions::new()).await.unwrap();
    let urls = [server.url(), server.unix_url().unwrap(), other.url()];
    let report = checker(&urls).build().unwrap().check_masters().await;
    let [tcp, unix, other] = report.masters() else {
        panic!("three masters")
    };
    assert_eq!(tcp.facts().run_id, unix.facts().run_id);
    for master in [tcp, unix] {
        assert_eq!(checks(master, Severity::Problem), [Check::Independence]);
    }
    assert!(message(tcp, Check::Independence).contains(unix.master()));
    assert!(other.is_healthy(), "{other}");
}

#[tokio::test]
async fn the_cluster_record_is_reported_as_stored() {
    let cluster = Cluster::start(3).await.unwrap();
    let key = "locks:redquorum:cluster";
    for (i, server) in cluster.servers().iter().enumerate() {
        let id = if i == 2 { "cluster-b" } else { "cluster-a" };
        let fields = [
            ("version", "1"),
            ("cluster", id),
            ("master", ["m-0", "m-1", "m-2"][i]),
            ("counters", "kept"),
        ];
        let _: () = raw(&server.url())
            .await
            .hset_multiple(key, &fields)
            .await
            .unwrap();
    }
    let client = checker(cluster.urls())
        .key_prefix("locks:")
        .build()
        .unwrap();
    let report = client.check_masters().await;
    for (i, master) in report.masters().iter().enumerate() {
        let record = master.facts().cluster_record.as_ref().unwrap();
        assert_eq!(record.version(), Some("1"));
        assert_eq!(record.master(), Some(["m-0", "m-1", "m-2"][i]));
        assert_eq!(record.counters(), Some("kept"));
        assert_eq!(record.fields().len(), 4);
    }
    let [a, b, foreign] = report.masters() else {
        panic!("three masters")
    };
    // Hand-written records without members cannot be judged: a problem on each.
    for m in [a, b] {
        assert_eq!(
            checks(m, Severity::Problem),
            [Check::ClusterRecord],
            "{report}"
        );
        assert!(m.to_string().contains("no field \"members\""), "{report}");
    }
    assert!(
        checks(foreign, Severity::Problem)
            .iter()
            .all(|c| *c == Check::ClusterRecord),
        "{report}"
    );
    assert!(
        foreign
            .to_string()
            .contains("cluster-b, most other masters to cluster-a"),
        "{report}"
    );
    assert!(report.to_string().contains("cluster cluster-a, master m-0"));

    // Under another prefix there is no record.
    let report = checker(cluster.urls())
        .build()
        .unwrap()
        .check_masters()
        .await;
    assert!(
        report
            .masters()
            .iter()
            .all(|m| m.facts().cluster_record.is_none())
    );
}

/// A value of another type at the cluster record's key, which every lock script reads (it
/// also holds the data epoch), is a problem that says what to do, not a missing permission.
#[tokio::test]
async fn a_record_key_of_another_type_is_a_problem_that_says_what_to_do() {
    let cluster = Cluster::start(3).await.unwrap();
    let _: () = raw(&cluster.server(1).url())
        .await
        .set("redquorum:cluster", "not a record")
        .await
        .unwrap();
    let report = checker(cluster.urls())
        .build()
        .unwrap()
        .check_masters()
        .await;
    let [fine, broken, _] = report.masters() else {
        panic!("three masters")
    };
    assert_eq!(
        checks(broken, Severity::Problem),
        [Check::ClusterRecord],
        "{report}"
    );
    let shown = broken.to_string();
    assert!(
        shown.contains("holds a value of another type") && shown.contains("delete it"),
        "{shown}"
    );
    assert!(checks(fine, Severity::Problem).is_empty(), "{report}");
}

/// `connected_clients` of the server at `url`, this query's own connection included.
async fn clients(url: &str) -> u64 {
    info_number(&mut raw(url).await, "clients", "connected_clients:")
        .await
        .unwrap()
}

#[tokio::test]
async fn a_check_leaves_no_connection_behind_finished_or_dropped() {
    let mut cluster = Cluster::start(2).await.unwrap();
    let url = cluster.server(0).url();
    let client = checker(cluster.urls()).build().unwrap();
    let before = clients(&url).await;
    let closed = || async { clients(&url).await == before };

    let report = client.check_masters().await;
    assert!(report.masters()[0].is_reachable(), "{report}");
    wait_until(
        Duration::from_secs(5),
        "the probe's connection closed",
        closed,
    )
    .await;

    // Dropped while the paused master keeps it waiting, after the other one answered.
    cluster.server_mut(1).pause().unwrap();
    let cut = tokio::time::timeout(CONNECT / 2, client.check_masters()).await;
    cluster.server_mut(1).resume().unwrap();
    assert!(cut.is_err(), "the check waited for the paused master");
    wait_until(
        Duration::from_secs(5),
        "the dropped probe's connection closed",
        closed,
    )
    .await;
    assert!(client.check_masters().await.reachable() == 2);
}
