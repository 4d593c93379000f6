//! The metrics of feature `metrics` (docs/observability.md): the example serves every
//! series as Prometheus text, scraped here over HTTP from its own process; and in-process,
//! with a recorder of this thread, each count moves as the workload says it must.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Waiting};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, LocalRecorderGuard, Metadata, Recorder, SharedString,
    Unit,
};
use metrics_util::registry::{AtomicStorage, Registry};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redquorum::{AcquireOptions, ErrorKind, Redlock};
use support::*;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Command;
use tokio::time::timeout;

/// A recorder over a registry of atomics that it never drains, read by name and labels.
#[derive(Clone)]
struct Capture(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
    }
}

fn has_labels(key: &Key, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
}

impl Capture {
    /// A fresh recorder, installed for this thread (the test's current-thread runtime runs
    /// every task of the client on it) until the guard drops.
    fn install() -> (Capture, LocalRecorderGuard<'static>) {
        let capture = Capture(Arc::new(Registry::atomic()));
        // Leaked: the guard borrows the recorder for the rest of the test's thread.
        let recorder: &'static Capture = Box::leak(Box::new(capture.clone()));
        let guard = metrics::set_default_local_recorder(recorder);
        (capture, guard)
    }

    /// The sum of the counters named `name` that carry every label of `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut total = 0;
        self.0.visit_counters(|key, c: &Arc<AtomicU64>| {
            if key.name() == name && has_labels(key, labels) {
                total += c.load(Ordering::SeqCst);
            }
        });
        total
    }

    /// Every value recorded in the histograms named `name` that carry `labels`.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut values = Vec::new();
        self.0.visit_histograms(|key, h| {
            if key.name() == name && has_labels(key, labels) {
                values.extend(h.data());
            }
        });
        values
    }

    /// Every gauge named `name`: its `master` label and value.
    fn gauges_by_master(&self, name: &str) -> Vec<(String, f64)> {
        let mut gauges = Vec::new();
        self.0.visit_gauges(|key, g: &Arc<AtomicU64>| {
            if key.name() == name {
                let master = key
                    .labels()
                    .find(|l| l.key() == "master")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default();
                gauges.push((master, f64::from_bits(g.load(Ordering::SeqCst))));
            }
        });
        gauges.sort_by(|a, b| a.0.cmp(&b.0));
        gauges
    }

    /// Every label value any series carries.
    fn label_values(&self) -> Vec<String> {
        let mut values = Vec::new();
        let mut add = |key: &Key| values.extend(key.labels().map(|l| l.value().to_owned()));
        self.0.visit_counters(|key, _| add(key));
        self.0.visit_gauges(|key, _| add(key));
        self.0.visit_histograms(|key, _| add(key));
        values
    }
}

/// Three masters that vote at once (bootstrapped), and a client over them with restart
/// quarantine on, as users run it.
/// Another client over `cluster`, with the settings of [`voting_cluster`]'s.
fn second_client(cluster: &Cluster) -> Redlock {
    client(cluster).quarantine(true).build().unwrap()
}

async fn voting_cluster() -> (Cluster, Redlock) {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).quarantine(true).build().unwrap();
    client.init_cluster().await.unwrap();
    (cluster, client)
}

#[tokio::test]
async fn a_busy_lock_counts_a_contended_acquire_and_each_masters_answer() {
    let (capture, _recorder) = Capture::install();
    let (cluster, client) = voting_cluster().await;
    let key = unique_key("busy");

    // The contender is another client: this one would be refused at once (AlreadyHeld),
    // without a round to count.
    let contender = second_client(&cluster);
    let lease = client.acquire(&key).await.unwrap();
    // The round was decided by a quorum: the last master's grant may still be on its way,
    // and a loaded master may read the contender's request first. Every master answers
    // the lease's acquire before the contender asks.
    wait_until(
        Duration::from_secs(5),
        "the lease granted on every master",
        || {
            let capture = capture.clone();
            async move {
                capture.counter(
                    "redquorum_master_requests_total",
                    &[("op", "acquire"), ("outcome", "granted")],
                ) == 3
            }
        },
    )
    .await;
    let err = contender.try_acquire(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    let left = lease.remaining();
    lease.release().await.unwrap();
    // Late answers are counted when they arrive: wait for every master's two to the
    // acquire rounds and its grant of the lease's release (failed attempts are released
    // too, and their answers may come first).
    wait_until(Duration::from_secs(5), "every answer counted", || {
        let capture = capture.clone();
        async move {
            let of = |labels: &[(&str, &str)]| {
                capture.counter("redquorum_master_requests_total", labels)
            };
            // The lease's release is granted on each master; the failed attempt's release
            // (answered too) must not stand in for one of those.
            of(&[("op", "acquire")]) == 2 * 3
                && of(&[("op", "release"), ("outcome", "granted")]) >= 3
        }
    })
    .await;

    let duration = "redquorum_acquire_duration_seconds";
    assert_eq!(
        capture
            .histogram(duration, &[("outcome", "acquired")])
            .len(),
        1
    );
    assert_eq!(
        capture
            .histogram(duration, &[("outcome", "contended")])
            .len(),
        1
    );
    assert_eq!(capture.histogram(duration, &[]).len(), 2);
    assert_eq!(
        capture.histogram("redquorum_acquire_attempts", &[]),
        vec![1.0, 1.0]
    );
    let requests = "redquorum_master_requests_total";
    for (i, master) in cluster.urls().iter().enumerate() {
        let of = |op, outcome| {
            capture.counter(
                requests,
                &[("master", master), ("op", op), ("outcome", outcome)],
            )
        };
        // Each master granted the first acquisition, refused the second, and released.
        assert_eq!(of("acquire", "granted"), 1, "master {i}");
        assert_eq!(of("acquire", "denied"), 1, "master {i}");
        assert!(of("release", "granted") >= 1, "master {i}");
    }
    // Validity left at release: positive, and no more than the lease had a moment before.
    let released = capture.histogram("redquorum_release_validity_left_seconds", &[]);
    assert_eq!(released.len(), 1);
    assert!(
        released[0] > 0.0 && released[0] <= left.as_secs_f64(),
        "{released:?} vs {left:?}"
    );
    // Voting masters do not abstain; nothing was lost or handed off.
    let abstaining = capture.gauges_by_master("redquorum_masters_abstaining");
    assert_eq!(abstaining.len(), 3, "{abstaining:?}");
    assert!(abstaining.iter().all(|(_, v)| *v == 0.0), "{abstaining:?}");
    assert_eq!(capture.counter("redquorum_leases_lost_total", &[]), 0);
    assert_eq!(capture.counter("redquorum_handoffs_total", &[]), 0);
    // No label carries the resource name.
    let values = capture.label_values();
    assert!(!values.iter().any(|v| v.contains("busy")), "{values:?}");
}

#[tokio::test]
async fn a_waiter_woken_by_the_release_notice_counts_a_handoff() {
    let (capture, _recorder) = Capture::install();
    let (cluster, holder) = voting_cluster().await;
    let key = unique_key("handoff");
    let lease = holder.acquire(&key).await.unwrap();
    // The waiter's own pause (30 s) and the holder's TTL (5 s) are far longer than the
    // wait below: only the release notice wakes it that soon.
    // Woken by the release notice, without hand-off (counted too: tests/handoff.rs).
    let waiter = client(&cluster)
        .quarantine(true)
        .retry(Retry::new().delay("30s"))
        .waiting(Waiting::new().handoff(false))
        .build()
        .unwrap();
    let waiting = {
        let key = key.clone();
        tokio::spawn(async move {
            let options = AcquireOptions::new().wait_timeout(Duration::from_secs(20));
            waiter.acquire_with(&key, &options).await
        })
    };
    // The waiter's first attempt is refused, it subscribes, and its second attempt is
    // refused too (at least two masters each, three for the first once all answered):
    // then it waits for the notice.
    wait_until(Duration::from_secs(5), "the waiter waits", || {
        let capture = capture.clone();
        async move {
            capture.counter(
                "redquorum_master_requests_total",
                &[("op", "acquire"), ("outcome", "denied")],
            ) >= 5
        }
    })
    .await;
    assert_eq!(capture.counter("redquorum_handoffs_total", &[]), 0);
    lease.release().await.unwrap();
    let taken = timeout(Duration::from_secs(4), waiting)
        .await
        .expect("the waiter acquires after the release")
        .unwrap()
        .unwrap();
    assert_eq!(capture.counter("redquorum_handoffs_total", &[]), 1);
    let rounds = capture.histogram("redquorum_acquire_attempts", &[]);
    assert!(rounds.contains(&3.0), "{rounds:?}");
    taken.release().await.unwrap();
}

#[tokio::test]
async fn a_watchdog_extension_and_a_lease_lost_at_max_hold_are_counted() {
    let (capture, _recorder) = Capture::install();
    let (_cluster, client) = voting_cluster().await;
    let key = unique_key("extended");

    // A 1 s lease extended every third of it by its watchdog, capped at 1.5 s.
    let options = AcquireOptions::new()
        .ttl("1s")
        .watchdog(true)
        .max_hold("1500ms");
    let lease = client.acquire_with(&key, &options).await.unwrap();
    wait_until(Duration::from_secs(5), "an extension", || {
        let capture = capture.clone();
        async move {
            !capture
                .histogram("redquorum_extension_lag_seconds", &[])
                .is_empty()
        }
    })
    .await;
    // From the moment the watchdog planned to extend to the grant: never negative, and
    // far below the interval between two extensions (a third of the TTL), which a lag
    // counted from the previous extension would exceed.
    let interval = 1.0 / 3.0;
    let lag = capture.histogram("redquorum_extension_lag_seconds", &[]);
    assert!(
        lag.iter().all(|l| (0.0..interval).contains(l)),
        "lags {lag:?} s, not all within [0, {interval:.3}) s"
    );
    assert!(
        capture.counter(
            "redquorum_master_requests_total",
            &[("op", "extend"), ("outcome", "granted")]
        ) >= 2
    );
    assert_eq!(capture.counter("redquorum_leases_lost_total", &[]), 0);

    let reason = timeout(Duration::from_secs(5), lease.lost()).await.unwrap();
    assert_eq!(reason, redquorum::LostReason::MaxHold);
    assert_eq!(
        capture.counter("redquorum_leases_lost_total", &[("reason", "max_hold")]),
        1
    );
    // A release after the loss is no second loss.
    lease.release().await.unwrap();
    assert_eq!(capture.counter("redquorum_leases_lost_total", &[]), 1);
}

#[tokio::test]
async fn a_lease_that_ran_out_unobserved_counts_as_expired_at_its_release() {
    let (capture, _recorder) = Capture::install();
    let (_cluster, client) = voting_cluster().await;
    let key = unique_key("expired");
    let options = AcquireOptions::new().ttl("300ms");
    let lease = client.acquire_with(&key, &options).await.unwrap();
    let deadline = lease.deadline();
    tokio::time::sleep_until(deadline).await;
    lease.release().await.unwrap();
    assert_eq!(
        capture.counter("redquorum_leases_lost_total", &[("reason", "expired")]),
        1
    );
    assert_eq!(
        capture.histogram("redquorum_release_validity_left_seconds", &[]),
        vec![0.0]
    );
}

#[tokio::test]
async fn masters_in_restart_quarantine_count_as_abstaining() {
    let (capture, _recorder) = Capture::install();
    // Brand-new masters, not bootstrapped: each abstains for ttl_max.
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).quarantine(true).build().unwrap();
    let err = client.try_acquire(&unique_key("fresh")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEnoughVoters, "{err}");
    wait_until(Duration::from_secs(5), "every master answered", || {
        let capture = capture.clone();
        async move { capture.counter("redquorum_master_requests_total", &[("op", "acquire")]) == 3 }
    })
    .await;
    assert_eq!(
        capture.counter(
            "redquorum_master_requests_total",
            &[("op", "acquire"), ("outcome", "abstained")]
        ),
        3
    );
    let mut masters = cluster.urls();
    masters.sort();
    let abstaining = capture.gauges_by_master("redquorum_masters_abstaining");
    let expected: Vec<(String, f64)> = masters.into_iter().map(|m| (m, 1.0)).collect();
    assert_eq!(abstaining, expected);
    assert_eq!(
        capture
            .histogram(
                "redquorum_acquire_duration_seconds",
                &[("outcome", "not_enough_voters")]
            )
            .len(),
        1
    );
}

/// The example program, which cargo builds with the tests next to this test binary's
/// folder (`target/<profile>/examples/`).
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the test binary sits in target/<profile>/deps");
    let example = profile_dir
        .join("examples")
        .join(format!("metrics{}", std::env::consts::EXE_SUFFIX));
    assert!(
        example.is_file(),
        "{} is missing: build the examples with the tests (cargo nextest run --all-features)",
        example.display()
    );
    example
}

/// The example's process. Dropped while it runs (a failed test), it is stopped by PID
/// with SIGTERM, so that it stops its masters, within a bounded wait; SIGKILL after that.
struct Running {
    child: tokio::process::Child,
    pid: Pid,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = kill(self.pid, Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = self.child.try_wait();
    }
}

/// One HTTP GET of `path` on `address`: the status line and the body.
async fn http_get(address: &str, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("the example answers within 10 s")
    .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Whether `body` has a sample of `name` carrying every label of `labels`.
fn has_series(body: &str, name: &str, labels: &[(&str, &str)]) -> bool {
    body.lines().any(|line| {
        let Some(rest) = line.strip_prefix(name) else {
            return false;
        };
        (rest.starts_with('{') || rest.starts_with(' '))
            && labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
    })
}

#[tokio::test]
async fn the_example_serves_every_series_as_prometheus_text() {
    let child = Command::new(example_binary())
        .args(["--port", "0", "--serve-for", "120"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    let mut running = Running { child, pid };
    let mut lines = BufReader::new(running.child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let address = timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push(line.clone());
            if let Some(url) = line.strip_prefix("metrics: http://") {
                return url.trim_end_matches("/metrics").to_owned();
            }
        }
        panic!("the example ended before serving: {printed:?}");
    })
    .await
    .expect("the example serves within 60 s");

    let (status, body) = http_get(&address, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let masters: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("redquorum_masters_abstaining{"))
        .collect();
    assert_eq!(masters.len(), 3, "{body}");
    let series: &[(&str, &[(&str, &str)])] = &[
        (
            "redquorum_acquire_duration_seconds_bucket",
            &[("outcome", "acquired"), ("le", "0.1")],
        ),
        (
            "redquorum_acquire_duration_seconds_count",
            &[("outcome", "acquired")],
        ),
        (
            "redquorum_acquire_duration_seconds_count",
            &[("outcome", "contended")],
        ),
        ("redquorum_acquire_attempts_count", &[]),
        (
            "redquorum_master_requests_total",
            &[("op", "acquire"), ("outcome", "granted")],
        ),
        (
            "redquorum_master_requests_total",
            &[("op", "acquire"), ("outcome", "denied")],
        ),
        (
            "redquorum_master_requests_total",
            &[("op", "extend"), ("outcome", "granted")],
        ),
        (
            "redquorum_master_requests_total",
            &[("op", "release"), ("outcome", "granted")],
        ),
        ("redquorum_release_validity_left_seconds_count", &[]),
        ("redquorum_extension_lag_seconds_count", &[]),
        ("redquorum_leases_lost_total", &[("reason", "max_hold")]),
        ("redquorum_masters_abstaining", &[]),
        ("redquorum_handoffs_total", &[]),
    ];
    for (name, labels) in series {
        assert!(
            has_series(&body, name, labels),
            "no {name} {labels:?} in:\n{body}"
        );
    }
    for name in [
        "redquorum_acquire_duration_seconds",
        "redquorum_acquire_attempts",
        "redquorum_master_requests_total",
        "redquorum_release_validity_left_seconds",
        "redquorum_extension_lag_seconds",
        "redquorum_leases_lost_total",
        "redquorum_masters_abstaining",
        "redquorum_handoffs_total",
    ] {
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "no help for {name}"
        );
    }
    // Every master label is a master's address, and no series names the resource.
    for line in body.lines().filter(|l| l.contains("master=\"")) {
        assert!(line.contains("master=\"redis://127.0.0.1:"), "{line}");
    }
    assert!(!body.contains("orders:42"), "{body}");

    kill(pid, Signal::SIGTERM).unwrap();
    let status = timeout(Duration::from_secs(20), running.child.wait())
        .await
        .expect("the example stops within 20 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    assert_eq!(rest, ["stopped"]);
}
