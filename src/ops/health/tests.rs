use super::*;

use futures::future::BoxFuture;

use crate::master::{Outgoing, Reply};
use crate::ops::report::{Facts, Finding};

const MS: Duration = Duration::from_millis(1);

fn context() -> Context {
    Context {
        quarantine: true,
        fencing: false,
        record_key: "redquorum:cluster".into(),
        drift: 52 * MS,
        bound: 300 * MS,
    }
}

/// What a healthy, durable Redis 7.0 master answers, its clock `offset_us` ahead of
/// the client's.
fn probe(offset_us: i64) -> Probe {
    let client = 1_700_000_000_000_000u64;
    Probe {
        round_trip: MS,
        client_time_us: Some(client),
        server_time_us: Ok(client.saturating_add_signed(offset_us)),
        server: Ok(
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\
                    run_id:abc\r\nuptime_in_seconds:100\r\n"
                .to_owned(),
        ),
        replication: Ok("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_owned()),
        persistence: Ok("# Persistence\r\naof_enabled:1\r\n".to_owned()),
        memory: Ok("# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n".to_owned()),
        config: Ok([("appendonly", "yes"), ("appendfsync", "always")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into()),
        record: Ok([("version", "1"), ("cluster", "c1"), ("master", "m1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into()),
        refused: None,
    }
}

#[test]
fn a_master_that_does_not_vote_for_this_client_is_a_problem() {
    let health = one(refused_probe(), &context());
    assert!(!health.is_healthy());
    let found: Vec<String> = health.problems().map(|f| f.to_string()).collect();
    assert!(found.iter().any(|f| f.contains("ttl_max_ms")), "{found:?}");
    // Counted by restart quarantine, and yet it never votes for this client: neither
    // `votes()` nor the report's "votes:" line may say otherwise.
    assert!(!health.votes(), "{health}");
    let text = health.to_string();
    assert!(
        text.contains("votes: no: it does not vote for this client"),
        "{text}"
    );
    assert!(!text.contains("votes: yes"), "{text}");
    // Nor does a quarantine note say when it votes again.
    let abstaining = describe(
        "redis://m".into(),
        QuarantineState::Abstains {
            until: Instant::now() + Duration::from_secs(9),
        },
        Ok(refused_probe()),
        &context(),
    );
    assert!(!abstaining.votes());
    let text = abstaining.to_string();
    assert!(!text.contains("not for another"), "{text}");
    assert!(!text.contains("does not vote for another"), "{text}");
}

fn refused_probe() -> Probe {
    let mut p = probe(0);
    p.refused = Some("its cluster record differs: ttl_max_ms \"5000\"".into());
    p
}

fn one(probe: Probe, context: &Context) -> MasterHealth {
    describe(
        "redis://m".into(),
        QuarantineState::Counted,
        Ok(probe),
        context,
    )
}

fn checks(health: &MasterHealth, severity: Severity) -> Vec<Check> {
    health
        .findings()
        .iter()
        .filter(|f| f.severity() == severity)
        .map(Finding::check)
        .collect()
}

fn denied(what: &str) -> MasterError {
    MasterError::new(MasterErrorKind::Auth, format!("NOPERM {what}"))
}

#[test]
fn a_healthy_master_has_no_findings() {
    let health = one(probe(0), &context());
    assert!(health.findings().is_empty(), "{health}");
    assert_eq!(health.facts().version.as_deref(), Some("7.0.15"));
    assert_eq!(health.facts().role, Some(Role::Master));
    assert!(health.facts().is_durable());
    assert_eq!(health.facts().uptime, Some(Duration::from_secs(100)));
    assert_eq!(
        health.facts().maxmemory_policy.as_deref(),
        Some("noeviction")
    );
    let record = health.facts().cluster_record.as_ref().unwrap();
    assert_eq!(
        (record.cluster(), record.master(), record.counters()),
        (Some("c1"), Some("m1"), None)
    );
}

#[test]
fn info_text_reads_as_fields() {
    let info = parse_info("# Server\r\nredis_version:7.0.15\r\n\r\nexecutable:/a:b\r\n");
    assert_eq!(
        info.get("redis_version").map(String::as_str),
        Some("7.0.15")
    );
    assert_eq!(info.get("executable").map(String::as_str), Some("/a:b"));
    assert_eq!(info.len(), 2);
}

#[test]
fn versions_older_than_five_are_a_problem() {
    assert_eq!(Version::parse("7.0.15"), Some(Version(7, 0, 15)));
    assert_eq!(Version::parse("6.2"), Some(Version(6, 2, 0)));
    assert_eq!(Version::parse("7.2.4-rc1"), Some(Version(7, 2, 4)));
    assert_eq!(Version::parse("unstable"), None);
    for (version, problem) in [("4.0.14", true), ("3.2.0", true), ("5.0.0", false)] {
        let mut p = probe(0);
        p.server = Ok(format!("redis_version:{version}\r\n"));
        let health = one(p, &context());
        assert_eq!(
            checks(&health, Severity::Problem).contains(&Check::Version),
            problem,
            "{health}"
        );
        if problem {
            let text = health.problems().next().unwrap().to_string();
            assert!(
                text.starts_with(&format!("Redis {version} is older than 5.0.0")),
                "{text}"
            );
            assert!(text.ends_with("upgrade it"), "{text}");
        }
    }
    let mut p = probe(0);
    p.server = Err(denied("info"));
    let health = one(p, &context());
    assert_eq!(checks(&health, Severity::Note), [Check::Version]);
    assert!(health.is_healthy());
}

#[test]
fn replicas_and_cluster_nodes_are_problems() {
    let mut p = probe(0);
    p.replication = Ok("role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n".into());
    let health = one(p, &context());
    assert_eq!(health.facts().role, Some(Role::Replica));
    assert_eq!(checks(&health, Severity::Problem), [Check::Role]);
    let text = health.problems().next().unwrap().to_string();
    assert!(text.contains("replica of 10.0.0.1:6379"), "{text}");
    assert!(text.contains("point the client at masters"), "{text}");

    let mut p = probe(0);
    p.server = Ok("redis_version:7.0.0\r\nredis_mode:cluster\r\n".into());
    assert_eq!(
        checks(&one(p, &context()), Severity::Problem),
        [Check::Role]
    );

    let mut p = probe(0);
    p.replication = Ok("role:master\r\nconnected_slaves:2\r\n".into());
    let health = one(p, &context());
    assert!(health.is_healthy());
    assert_eq!(checks(&health, Severity::Note), [Check::Role]);
}

#[test]
fn durability_matters_with_fencing_or_without_quarantine() {
    let everysec = || {
        let mut p = probe(0);
        p.config = Ok([("appendonly", "yes"), ("appendfsync", "everysec")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into());
        p
    };
    let health = one(everysec(), &context());
    assert!(!health.facts().is_durable());
    assert_eq!(health.facts().appendfsync.as_deref(), Some("everysec"));
    assert_eq!(checks(&health, Severity::Note), [Check::Persistence]);
    assert!(health.is_healthy());

    let fencing = Context {
        fencing: true,
        ..context()
    };
    let health = one(everysec(), &fencing);
    assert_eq!(checks(&health, Severity::Problem), [Check::Persistence]);
    assert!(
        health.findings()[0]
            .message()
            .contains("appendonly yes and appendfsync always")
    );
    assert!(one(probe(0), &fencing).is_healthy());

    let off = Context {
        quarantine: false,
        ..context()
    };
    let health = one(everysec(), &off);
    assert_eq!(checks(&health, Severity::Problem), [Check::Persistence]);
    // Durable without quarantine: a note that flushes go unseen.
    let health = one(probe(0), &off);
    assert_eq!(checks(&health, Severity::Note), [Check::Quarantine]);

    // CONFIG renamed away: appendonly from INFO, appendfsync unknown, not durable.
    let mut p = probe(0);
    p.config = Err(MasterError::new(MasterErrorKind::Other, "unknown command"));
    let health = one(p, &fencing);
    assert_eq!(health.facts().appendonly, Some(true));
    assert_eq!(health.facts().appendfsync.as_deref(), None);
    assert!(!health.facts().is_durable());
    let text = health.problems().next().unwrap().to_string();
    assert!(text.contains("appendfsync unknown"), "{text}");
    assert!(text.contains("allow CONFIG GET"), "{text}");
}

#[test]
fn evicting_masters_are_a_problem() {
    let mut p = probe(0);
    p.memory = Ok("maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n".into());
    let health = one(p, &context());
    assert_eq!(checks(&health, Severity::Problem), [Check::Eviction]);
    assert!(
        health
            .problems()
            .next()
            .unwrap()
            .message()
            .contains("noeviction")
    );
    // A limit with noeviction, or a policy without a limit, cannot evict.
    for memory in [
        "maxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n",
        "maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n",
    ] {
        let mut p = probe(0);
        p.memory = Ok(memory.into());
        assert!(one(p, &context()).findings().is_empty());
    }
}

#[test]
fn quarantine_states_are_read_from_the_standing() {
    let now = Instant::now();
    let later = now + Duration::from_secs(3);
    let state = |s| QuarantineState::from_standing(s, now);
    assert_eq!(state(None), QuarantineState::Off);
    assert_eq!(state(Some(Standing::Counted)), QuarantineState::Counted);
    assert_eq!(
        state(Some(Standing::Abstains(now))),
        QuarantineState::Unknown
    );
    assert_eq!(
        state(Some(Standing::Abstains(later))),
        QuarantineState::Abstains { until: later }
    );
    // Refused as evicting although it no longer evicts: a problem of its own.
    let health = describe(
        "m".into(),
        QuarantineState::Misconfigured,
        Ok(probe(0)),
        &context(),
    );
    assert_eq!(checks(&health, Severity::Problem), [Check::Quarantine]);
    // Abstaining is a note.
    let health = describe(
        "m".into(),
        QuarantineState::Abstains { until: later },
        Ok(probe(0)),
        &context(),
    );
    assert!(health.is_healthy());
    assert_eq!(checks(&health, Severity::Note), [Check::Quarantine]);
}

/// A master named `name`, a server of its own (its `run_id` is its name) unless the
/// probe names another `run_id` than [`probe`]'s.
fn entry(name: &str, mut probe: Result<Probe, MasterError>) -> Entry {
    if let Ok(Probe {
        server: Ok(text), ..
    }) = &mut probe
    {
        *text = text.replace("run_id:abc", &format!("run_id:{name}"));
    }
    Entry {
        name: name.into(),
        standing: Some(Standing::Counted),
        probe,
    }
}

#[test]
fn a_clock_beyond_the_drift_allowance_is_a_problem() {
    // Drift 52 ms, round trips 1 ms: 30 ms apart is fine, 200 ms is not.
    let report = assemble(
        vec![
            entry("a", Ok(probe(0))),
            entry("b", Ok(probe(30_000))),
            entry("c", Ok(probe(200_000))),
            entry("d", Ok(probe(-10_000))),
        ],
        &context(),
        3,
        Instant::now(),
    );
    let [a, b, c, d] = report.masters() else {
        panic!("four masters")
    };
    // c against the median of {0, 30, -10} ms = 0 ms.
    assert_eq!(c.facts().clock_offset.unwrap().magnitude(), 200 * MS);
    assert!(c.facts().clock_offset.unwrap().is_ahead());
    assert_eq!(checks(c, Severity::Problem), [Check::Clock]);
    assert!(c.to_string().contains("200ms ahead of the other"), "{c}");
    // d against the median of {0, 30, 200} ms = 30 ms: 40 ms behind, within 52 ms.
    assert_eq!(d.facts().clock_offset.unwrap().magnitude(), 40 * MS);
    assert!(!d.facts().clock_offset.unwrap().is_ahead());
    for m in [a, b, d] {
        assert!(m.is_healthy(), "{m}");
    }
    assert_eq!(
        a.facts().client_clock_offset.unwrap().magnitude(),
        Duration::ZERO
    );
    // One master alone has no other clock to compare with.
    let report = assemble(
        vec![entry("a", Ok(probe(900_000)))],
        &context(),
        1,
        Instant::now(),
    );
    assert_eq!(report.masters()[0].facts().clock_offset, None);
    assert!(report.is_healthy());
}

#[test]
fn a_wide_round_trip_widens_the_clock_tolerance() {
    let mut slow = probe(100_000);
    slow.round_trip = 200 * MS;
    let report = assemble(
        vec![entry("a", Ok(probe(0))), entry("b", Ok(slow))],
        &context(),
        2,
        Instant::now(),
    );
    assert!(report.is_healthy(), "{report}");
}

#[test]
fn one_server_listed_twice_and_mixed_clusters_are_problems() {
    let mut other = probe(0);
    other.server = Ok("redis_version:7.0.15\r\nrun_id:xyz\r\n".into());
    let mut foreign = probe(0);
    foreign.server = Ok("redis_version:7.0.15\r\nrun_id:foreign\r\n".into());
    foreign.record = Ok([("cluster", "c2")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into());
    let same = || {
        let mut p = probe(0);
        p.server = Ok("redis_version:7.0.15\r\nrun_id:same\r\n".into());
        p
    };
    let report = assemble(
        vec![
            entry("a", Ok(same())),
            entry("a-again", Ok(same())),
            entry("b", Ok(other)),
            entry("c", Ok(foreign)),
        ],
        &context(),
        3,
        Instant::now(),
    );
    let [a, again, b, c] = report.masters() else {
        panic!("four masters")
    };
    assert_eq!(checks(a, Severity::Problem), [Check::Independence]);
    assert!(a.problems().next().unwrap().message().contains("a-again"));
    assert_eq!(checks(again, Severity::Problem), [Check::Independence]);
    assert!(b.is_healthy(), "{b}");
    assert_eq!(checks(c, Severity::Problem), [Check::ClusterRecord]);
    assert!(
        c.to_string()
            .contains("cluster c2, most other masters to c1"),
        "{c}"
    );
    assert_eq!(report.problems().count(), 3);
    assert!(!report.is_healthy());
}

#[test]
fn unreachable_masters_say_why_and_what_to_do() {
    let cases = [
        (MasterErrorKind::Refused, "start it"),
        (MasterErrorKind::Timeout, "no answer within 300ms"),
        (MasterErrorKind::Auth, "fix the user and password"),
        (MasterErrorKind::Tls, "unreachable over TLS: boom"),
        (MasterErrorKind::Other, "see the master's log"),
    ];
    for (kind, says) in cases {
        let health = describe(
            "m".into(),
            QuarantineState::Unknown,
            Err(MasterError::new(kind, "boom")),
            &context(),
        );
        assert!(!health.is_reachable());
        assert_eq!(health.error().unwrap().kind(), kind);
        assert_eq!(checks(&health, Severity::Problem), [Check::Reachable]);
        let text = health.problems().next().unwrap().to_string();
        assert!(text.starts_with("unreachable"), "{text}");
        assert!(text.contains(says), "{text}");
    }
}

#[test]
fn missing_or_unreadable_records_are_notes() {
    let mut p = probe(0);
    p.record = Ok(BTreeMap::new());
    let health = one(p, &context());
    assert!(health.facts().cluster_record.is_none());
    assert_eq!(checks(&health, Severity::Note), [Check::ClusterRecord]);
    assert!(health.findings()[0].message().contains("not initialised"));
    // A key holding only the master's data epoch holds no record.
    let mut p = probe(0);
    p.record = Ok(BTreeMap::from([("epoch".to_owned(), "e1:1".to_owned())]));
    let health = one(p, &context());
    assert!(health.facts().cluster_record.is_none());
    assert!(health.findings()[0].message().contains("not initialised"));
    let mut p = probe(0);
    p.record = Err(MasterError::new(MasterErrorKind::Other, "NOPERM"));
    let health = one(p, &context());
    assert_eq!(checks(&health, Severity::Note), [Check::ClusterRecord]);
    assert!(health.findings()[0].message().contains("allow HGETALL"));
    // A message that merely names the code is no key of another type.
    let mut p = probe(0);
    p.record = Err(MasterError::new(MasterErrorKind::Other, "WRONGTYPE"));
    let health = one(p, &context());
    assert_eq!(checks(&health, Severity::Note), [Check::ClusterRecord]);
    assert!(health.findings()[0].message().contains("allow HGETALL"));
    // A key of another type stops every lock script: a problem, which says what to do.
    let mut p = probe(0);
    p.record = Err(MasterError::from_redis(redis::make_extension_error(
        "WRONGTYPE".into(),
        Some("Operation against a key holding the wrong kind of value".into()),
    )));
    let health = one(p, &context());
    assert_eq!(checks(&health, Severity::Problem), [Check::ClusterRecord]);
    assert!(health.findings()[0].message().contains("delete it"));
}

/// A master that never answers a probe, or answers at once.
#[derive(Debug)]
struct Fake {
    name: Arc<str>,
    answers: bool,
}

impl Master for Fake {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn call(&self, _: Arc<Outgoing>) -> BoxFuture<'static, Result<Reply, MasterError>> {
        Box::pin(futures::future::pending())
    }

    fn probe(&self, key: Arc<str>) -> BoxFuture<'static, Result<Probe, MasterError>> {
        assert_eq!(&*key, "locks:redquorum:cluster");
        if self.answers {
            Box::pin(async { Ok(probe(0)) })
        } else {
            Box::pin(futures::future::pending())
        }
    }

    fn standing(&self, _: Instant) -> Option<Standing> {
        Some(Standing::Counted)
    }
}

#[tokio::test(start_paused = true)]
async fn a_master_that_never_answers_is_cut_at_the_bound() {
    let config = crate::config::Builder::new()
        .masters(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
        .timeouts(crate::Timeouts::new().connect("300ms").node("200ms"))
        .key_prefix("locks:")
        .into_config()
        .unwrap_or_else(|e| panic!("{e}"));
    let masters: Vec<Arc<dyn Master>> = vec![
        Arc::new(Fake {
            name: "up".into(),
            answers: true,
        }),
        Arc::new(Fake {
            name: "hung".into(),
            answers: false,
        }),
    ];
    let started = Instant::now();
    let report = check(&masters, &config, 2).await;
    assert_eq!(started.elapsed(), 500 * MS);
    let [up, hung] = report.masters() else {
        panic!("two masters")
    };
    assert!(up.is_healthy(), "{up}");
    assert_eq!(up.quarantine(), QuarantineState::Counted);
    assert_eq!(hung.error().unwrap().kind(), MasterErrorKind::Timeout);
    assert_eq!(report.reachable(), 1);
    let shown = report.to_string();
    assert!(
        shown.starts_with("2 masters, quorum 2: 1 reachable, unhealthy"),
        "{shown}"
    );
    assert!(shown.contains("2. hung: unreachable"), "{shown}");
    // Two masters tolerate no failure: noted for the masters as a whole.
    assert_eq!(report.tolerates(), 0);
    assert!(
        shown.contains("note: 2 masters with a quorum of 2 tolerate no failure"),
        "{shown}"
    );
}

#[test]
fn outside_a_runtime_no_master_is_checked() {
    let config = crate::config::Builder::new()
        .masters(["redis://127.0.0.1:1"])
        .into_config()
        .unwrap_or_else(|e| panic!("{e}"));
    let masters: Vec<Arc<dyn Master>> = vec![Arc::new(Fake {
        name: "m".into(),
        answers: true,
    })];
    // Nothing to wait for: one poll without a runtime finishes it.
    let mut future = std::pin::pin!(check(&masters, &config, 1));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let std::task::Poll::Ready(report) = std::future::Future::poll(future.as_mut(), &mut cx) else {
        panic!("pending outside a runtime")
    };
    let text = report.masters()[0].error().unwrap().to_string();
    assert!(text.contains("outside a tokio runtime"), "{text}");
}

#[test]
fn a_master_votes_when_it_answered_and_this_client_counts_it() {
    let later = Instant::now() + Duration::from_secs(3);
    for (state, votes) in [
        (QuarantineState::Counted, true),
        (QuarantineState::Off, true),
        (QuarantineState::Unknown, false),
        (QuarantineState::Abstains { until: later }, false),
        (QuarantineState::Misconfigured, false),
    ] {
        let health = describe("m".into(), state, Ok(probe(0)), &context());
        assert_eq!(health.votes(), votes, "{state:?}: {health}");
        // Abstaining is a note, not a problem: healthy, and yet not voting.
        if state == (QuarantineState::Abstains { until: later }) {
            assert!(health.is_healthy(), "{health}");
        }
    }
    // Counted by this client, but unreachable now: it cannot vote.
    let down = describe(
        "m".into(),
        QuarantineState::Counted,
        Err(MasterError::new(MasterErrorKind::Refused, "boom")),
        &context(),
    );
    assert!(!down.votes());
    assert_eq!(down.facts(), &Facts::unknown());
}

/// A cluster record's fields, which any client that can write to the master can write,
/// are shown escaped: they cannot add a line to the report.
#[test]
fn a_record_is_shown_on_its_line() {
    let mut p = probe(0);
    p.record = Ok([
        ("version", "1"),
        ("cluster", "c1\nproblem: forged"),
        ("master", "m1"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into());
    let text = one(p, &context()).to_string();
    assert!(text.contains(r"cluster c1\nproblem: forged"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("problem: forged")),
        "{text}"
    );
}
