//! The public surface under misuse: every bad input gets an error of the right kind, says
//! whether retrying can help, and names what to change. Never a panic, never a hang.
//!
//! One table, one row per misuse. Rows that need masters run against real servers started
//! with the misconfiguration under test (a password the client does not know, an evicting
//! `maxmemory-policy`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Clock, Retry, Timeouts, Tls, Waiting, Watchdog};
use std::future::Future;
use std::time::Duration;

use redquorum::{AcquireOptions, Error, Redlock};
use support::*;

/// What a misuse produced: the kind (an [`ErrorKind`](redquorum::ErrorKind), by name),
/// whether it is retryable, and the message.
#[derive(Debug)]
struct Got {
    kind: String,
    retryable: bool,
    message: String,
}

impl From<Error> for Got {
    fn from(e: Error) -> Self {
        Got {
            kind: format!("{:?}", e.kind()),
            retryable: e.is_retryable(),
            message: e.to_string(),
        }
    }
}

/// Masters started for the rows that need them.
struct Masters {
    /// One ordinary master.
    plain: Cluster,
    /// Three masters requiring a password the clients are not given.
    auth: Cluster,
    /// Three masters that may evict keys (`allkeys-lru` with a `maxmemory`).
    evicting: Cluster,
}

/// A client over `urls` with short timings; quarantine as given.
fn client_of(urls: Vec<String>, quarantine: bool) -> redquorum::Builder {
    Redlock::builder()
        .masters(urls)
        .quarantine(quarantine)
        .ttl("2s")
        .timeouts(Timeouts::new().node("200ms").connect("500ms"))
        .retry(Retry::new().delay("10ms").jitter("5ms"))
}

/// `url` with its password replaced by `password` (or removed when `None`).
fn with_password(url: &str, password: Option<&str>) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_password(password).unwrap();
    parsed.to_string()
}

/// The password-protected masters' URLs, each with the password `password(i)` gives the
/// `i`-th (`None` to leave it out, `Some(None)` for no password at all).
fn auth_urls(m: &Masters, password: impl Fn(usize) -> Option<Option<&'static str>>) -> Vec<String> {
    m.auth
        .urls()
        .iter()
        .enumerate()
        .map(|(i, u)| match password(i) {
            Some(p) => with_password(u, p),
            None => u.clone(),
        })
        .collect()
}

/// Runs an acquire (or another call) inside a runtime, bounded so that a hang fails the
/// row.
fn acquire_in<T>(rt: &tokio::runtime::Runtime, fut: impl Future<Output = Result<T, Error>>) -> Got {
    rt.block_on(async {
        match tokio::time::timeout(Duration::from_secs(20), fut).await {
            Ok(Ok(_)) => Got {
                kind: "accepted".into(),
                retryable: false,
                message: String::new(),
            },
            Ok(Err(e)) => Got::from(e),
            Err(_) => panic!("the call hung for 20 s"),
        }
    })
}

/// Builds a client; the misuse must be refused.
fn build(builder: redquorum::Builder) -> Got {
    match builder.build() {
        Ok(_) => Got {
            kind: "accepted".into(),
            retryable: false,
            message: String::new(),
        },
        Err(e) => Got::from(e),
    }
}

/// A client over masters that are never reached: the misuse is caught before.
fn offline() -> redquorum::Builder {
    Redlock::builder().masters([
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ])
}

/// Polls `fut` outside any runtime, a bounded number of times, as an executor other than
/// tokio would.
fn poll_outside_runtime<T>(fut: impl Future<Output = Result<T, Error>>) -> Got {
    assert!(tokio::runtime::Handle::try_current().is_err());
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..100 {
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(_)) => panic!("succeeded outside a runtime"),
            std::task::Poll::Ready(Err(e)) => return Got::from(e),
            std::task::Poll::Pending => std::thread::yield_now(),
        }
    }
    panic!("still pending after 100 polls outside a runtime")
}

type Run = Box<dyn Fn(&tokio::runtime::Runtime, &Masters) -> Got>;

struct Row {
    /// The issue item and the misuse.
    misuse: &'static str,
    kind: &'static str,
    retryable: bool,
    /// Must appear in the message.
    says: &'static str,
    run: Run,
}

fn row(
    misuse: &'static str,
    kind: &'static str,
    retryable: bool,
    says: &'static str,
    run: impl Fn(&tokio::runtime::Runtime, &Masters) -> Got + 'static,
) -> Row {
    Row {
        misuse,
        kind,
        retryable,
        says,
        run: Box::new(run),
    }
}

fn rows() -> Vec<Row> {
    vec![
        row(
            "10: wrong password on every master",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |_| Some(Some("wrong")));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.acquire("misuse:auth"))
            },
        ),
        row(
            "10: init_cluster with a wrong password on every master",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |_| Some(Some("wrong")));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.init_cluster())
            },
        ),
        row(
            "10: init_cluster with a wrong password on one master",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |i| (i == 0).then_some(Some("wrong")));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.init_cluster())
            },
        ),
        row(
            "10: force_unlock_any with a wrong password on every master",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |_| Some(Some("wrong")));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.force_unlock_any("misuse:unlock-auth"))
            },
        ),
        row(
            "10: force_unlock_any where one master refuses the password and another holds \
             another kind of lock under the name",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = m.auth.urls();
                // A read lease of a read-write lock on the second master alone.
                let reader = client_of(vec![urls[1].clone()], false).build().unwrap();
                let _read = rt
                    .block_on(reader.rwlock("misuse:unlock-kinds").read())
                    .unwrap();
                let urls = auth_urls(m, |i| (i == 0).then_some(Some("wrong")));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.force_unlock_any("misuse:unlock-kinds"))
            },
        ),
        row(
            "10: no password for masters that require one (NOAUTH)",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |_| Some(None));
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.acquire("misuse:noauth"))
            },
        ),
        row(
            "10: wrong password, with a wait budget",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = auth_urls(m, |_| Some(Some("wrong")));
                let client = client_of(urls, true)
                    .retry(Retry::new().wait("3s"))
                    .build()
                    .unwrap();
                acquire_in(rt, client.acquire("misuse:auth-wait"))
            },
        ),
        row(
            "10: masters that can evict keys, quarantine on",
            "Misconfigured",
            false,
            "maxmemory-policy noeviction",
            |rt, m| {
                let client = client_of(m.evicting.urls(), true).build().unwrap();
                acquire_in(rt, client.acquire("misuse:evicting"))
            },
        ),
        row(
            "15: masters that can evict keys, quarantine off",
            "Misconfigured",
            false,
            "maxmemory-policy noeviction",
            |rt, m| {
                let client = client_of(m.evicting.urls(), false).build().unwrap();
                acquire_in(rt, client.acquire("misuse:evicting-noq"))
            },
        ),
        row(
            "11: a stray key of another type where the cluster record goes",
            "Misconfigured",
            false,
            "holds a set without expiry, which redquorum never writes there",
            |rt, m| {
                let prefix = "misuse-stray-record:";
                let url = m.plain.urls()[0].clone();
                rt.block_on(async {
                    let _: () = redis::cmd("SADD")
                        .arg(format!("{prefix}redquorum:cluster"))
                        .arg("not a record")
                        .query_async(&mut raw(&url).await)
                        .await
                        .unwrap();
                });
                let client = client_of(vec![url], false)
                    .key_prefix(prefix)
                    .build()
                    .unwrap();
                acquire_in(rt, client.acquire("misuse:stray-record"))
            },
        ),
        row(
            "11: a lock taken under another key prefix where the cluster record goes",
            "NoQuorum",
            true,
            "taken by a client with another key prefix (or none); retried until it is gone",
            |rt, m| {
                let prefix = "misuse-cross-prefix:";
                let url = m.plain.urls()[0].clone();
                let other = client_of(vec![url.clone()], false).build().unwrap();
                let _held = rt.block_on(async {
                    other
                        .acquire(&format!("{prefix}redquorum:cluster"))
                        .await
                        .unwrap()
                });
                let client = client_of(vec![url], false)
                    .key_prefix(prefix)
                    .retry(Retry::new().wait("300ms"))
                    .build()
                    .unwrap();
                acquire_in(rt, client.acquire("misuse:cross-prefix"))
            },
        ),
        row(
            "12: ttl(\"100years\")",
            "InvalidConfig",
            false,
            "above its maximum of 1day (MAX_TTL)",
            |_, _| build(offline().ttl("100years")),
        ),
        row(
            "12: ttl(Duration::MAX)",
            "InvalidConfig",
            false,
            "(MAX_TTL)",
            |_, _| build(offline().ttl(Duration::MAX)),
        ),
        row(
            "12: ttl_max(Duration::MAX)",
            "InvalidConfig",
            false,
            "ttl_max",
            |_, _| build(offline().ttl_max(Duration::MAX)),
        ),
        row(
            "12: node_timeout(\"2m\")",
            "InvalidConfig",
            false,
            "(MAX_NODE_TIMEOUT)",
            |_, _| build(offline().ttl("1h").timeouts(Timeouts::new().node("2m"))),
        ),
        row(
            "12: connect_timeout(Duration::MAX)",
            "InvalidConfig",
            false,
            "(MAX_CONNECT_TIMEOUT)",
            |_, _| build(offline().timeouts(Timeouts::new().connect(Duration::MAX))),
        ),
        row(
            "12: wait_timeout(\"400days\")",
            "InvalidConfig",
            false,
            "(MAX_WAIT_TIMEOUT)",
            |_, _| build(offline().retry(Retry::new().wait("400days"))),
        ),
        row(
            "12: a zero wait budget, which no round can finish in",
            "InvalidConfig",
            false,
            "wait_timeout is zero: no round can finish in it",
            |_, _| build(offline().retry(Retry::new().wait(Duration::ZERO))),
        ),
        row(
            "12: max_hold(Duration::MAX)",
            "InvalidConfig",
            false,
            "(MAX_MAX_HOLD)",
            |_, _| build(offline().watchdog(Watchdog::new().max_hold(Duration::MAX))),
        ),
        row(
            "12: a safety_margin too large for the ttl names safety_margin",
            "InvalidConfig",
            false,
            "raise ttl or lower safety_margin",
            |_, _| {
                build(
                    offline()
                        .ttl("1s")
                        .watchdog(Watchdog::new().safety_margin("990ms")),
                )
            },
        ),
        row(
            "12: a min_validity too large for the ttl names min_validity",
            "InvalidConfig",
            false,
            "raise ttl or lower min_validity",
            |_, _| {
                build(
                    offline()
                        .ttl("1s")
                        .clock(Clock::new().min_validity("990ms")),
                )
            },
        ),
        row(
            "12: AcquireOptions::ttl(30s) on a default client",
            "InvalidOptions",
            false,
            "Builder::ttl_max",
            |rt, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new().ttl(Duration::from_secs(30));
                acquire_in(rt, client.acquire_with("misuse:ttl30", &options))
            },
        ),
        row(
            "12: AcquireOptions::ttl(Duration::MAX)",
            "InvalidOptions",
            false,
            "(MAX_TTL)",
            |rt, _| {
                let client = offline().ttl_max("24h").build().unwrap();
                let options = AcquireOptions::new().ttl(Duration::MAX);
                acquire_in(rt, client.acquire_with("misuse:ttlmax", &options))
            },
        ),
        row(
            "AcquireOptions::ttl(500us): too short, not zero",
            "InvalidOptions",
            false,
            "ttl 500us is too short",
            |rt, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new().ttl(Duration::from_micros(500));
                acquire_in(rt, client.acquire_with("misuse:ttl500us", &options))
            },
        ),
        row(
            "a watchdog call whose ttl is not above the client's extend_interval",
            "InvalidOptions",
            false,
            "ttl 3s is not above the client's extend_interval 4s",
            |rt, _| {
                let client = offline()
                    .watchdog(Watchdog::new().interval("4s"))
                    .build()
                    .unwrap();
                let options = AcquireOptions::new().ttl("3s");
                rt.block_on(async {
                    let work = client.with_lock("misuse:interval", &options, |_| async {});
                    match tokio::time::timeout(Duration::from_secs(20), work).await {
                        Ok(Ok(())) => panic!("locked with a ttl below the watchdog's interval"),
                        Ok(Err(e)) => Got::from(e),
                        Err(_) => panic!("with_lock hung"),
                    }
                })
            },
        ),
        row(
            "12: AcquireOptions::wait_timeout(Duration::MAX)",
            "InvalidOptions",
            false,
            "(MAX_WAIT_TIMEOUT)",
            |rt, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new().wait_timeout(Duration::MAX);
                acquire_in(rt, client.acquire_with("misuse:wait", &options))
            },
        ),
        row(
            "12: AcquireOptions::wait_timeout(0), with a free lock on live masters",
            "InvalidOptions",
            false,
            "without waiting (`AcquireOptions::attempts(1)`)",
            |rt, m| {
                let client = client_of(m.plain.urls(), false).build().unwrap();
                let options = AcquireOptions::new().wait_timeout(Duration::ZERO);
                acquire_in(rt, client.acquire_with("misuse:wait-zero", &options))
            },
        ),
        row(
            "12: a wait budget shorter than a round, with a free lock on live masters",
            "NoQuorum",
            true,
            "the budget ran out during the first round, before a quorum of masters answered",
            |rt, m| {
                // The round is made longer than the budget for certain: the master's
                // writes, scripts among them, are paused (a connected client first) until
                // the call has returned, then unpaused (`CLIENT PAUSE WRITE` leaves
                // `CLIENT UNPAUSE` free to run). The budget, 20 ms, is far shorter than
                // the pause's own end.
                let client = client_of(m.plain.urls(), false).build().unwrap();
                let mut admins = rt.block_on(async {
                    let warm = client.acquire("misuse:wait-short-warm").await.unwrap();
                    warm.release().await.unwrap();
                    let mut admins = Vec::new();
                    for url in m.plain.urls() {
                        let mut admin = raw(&url).await;
                        let _: () = redis::cmd("CLIENT")
                            .arg("PAUSE")
                            .arg(60_000)
                            .arg("WRITE")
                            .query_async(&mut admin)
                            .await
                            .unwrap();
                        admins.push(admin);
                    }
                    admins
                });
                let options = AcquireOptions::new().wait_timeout(Duration::from_millis(20));
                let got = acquire_in(rt, client.acquire_with("misuse:wait-short", &options));
                rt.block_on(async {
                    for admin in &mut admins {
                        let _: () = redis::cmd("CLIENT")
                            .arg("UNPAUSE")
                            .query_async(admin)
                            .await
                            .unwrap();
                    }
                });
                got
            },
        ),
        row(
            "12: AcquireOptions::max_hold(Duration::MAX)",
            "InvalidOptions",
            false,
            "(MAX_MAX_HOLD)",
            |rt, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new().max_hold(Duration::MAX);
                acquire_in(rt, client.acquire_with("misuse:hold", &options))
            },
        ),
        row(
            "12: extend_with(Duration::MAX)",
            "InvalidOptions",
            false,
            "(MAX_TTL)",
            |rt, m| {
                let client = client_of(m.plain.urls(), false)
                    .ttl_max("24h")
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let lease = client.acquire(&unique_key("misuse:extend")).await.unwrap();
                    let got = match lease.extend_with(Duration::MAX).await {
                        Ok(_) => panic!("extended by Duration::MAX"),
                        Err(e) => Got::from(e),
                    };
                    lease.release().await.unwrap();
                    got
                })
            },
        ),
        row(
            "14: acquire(\"\")",
            "InvalidResource",
            false,
            "it is empty",
            |rt, _| acquire_in(rt, offline().build().unwrap().acquire("")),
        ),
        row(
            "14: try_acquire(\"\")",
            "InvalidResource",
            false,
            "it is empty",
            |rt, _| acquire_in(rt, offline().build().unwrap().try_acquire("")),
        ),
        row(
            "14: with_lock(\"\")",
            "InvalidResource",
            false,
            "it is empty",
            |rt, _| {
                let client = offline().build().unwrap();
                rt.block_on(async {
                    let options = AcquireOptions::new();
                    let work = client.with_lock("", &options, |_| async {});
                    match tokio::time::timeout(Duration::from_secs(20), work).await {
                        Ok(Ok(())) => panic!("locked an empty name"),
                        Ok(Err(e)) => Got::from(e),
                        Err(_) => panic!("with_lock hung"),
                    }
                })
            },
        ),
        row(
            "14: a 1 MB name, shortened in the message",
            "InvalidResource",
            false,
            "\u{2026}\" (1048576 bytes): it is longer than MAX_RESOURCE_LEN (1024 bytes)",
            |rt, _| {
                let name = "n".repeat(1 << 20);
                acquire_in(
                    rt,
                    offline()
                        .build()
                        .unwrap()
                        .acquire_with(&name, &AcquireOptions::new()),
                )
            },
        ),
        row(
            "18: [::1] and 127.0.0.1 on the same port are two servers",
            "accepted",
            false,
            "",
            |_, _| {
                build(Redlock::builder().masters([
                    "redis://127.0.0.1:7001",
                    "redis://[::1]:7001",
                    "redis://127.0.0.1:7002",
                ]))
            },
        ),
        row(
            "18: one IPv6 address spelled two ways is one server",
            "InvalidConfig",
            false,
            "listed twice",
            |_, _| {
                build(
                    Redlock::builder()
                        .masters(["redis://[::1]:7001", "redis://[0:0:0:0:0:0:0:1]:7001"]),
                )
            },
        ),
        row(
            "a 100 KB key_prefix, which would make every key as long",
            "InvalidConfig",
            false,
            "key_prefix is 102400 bytes long, above MAX_KEY_PREFIX_LEN",
            |_, _| build(offline().key_prefix("p".repeat(100 * 1024))),
        ),
        row(
            "a label with a line break, which would forge a line of inspect's output",
            "InvalidConfig",
            false,
            "label has a character that breaks or reorders its line ('\\n' at byte 6): line breaks, tabs, escapes and \
             other control characters, Unicode line separators and direction overrides are \
             refused",
            |_, _| build(offline().label("worker\nholder: someone else")),
        ),
        row(
            "AcquireOptions::label with a terminal escape",
            "InvalidOptions",
            false,
            "label has a character that breaks or reorders its line ('\\u{1b}' at byte 0)",
            |rt, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new().label("\u{1b}[2J").attempts(1);
                acquire_in(rt, client.acquire_with("misuse:label", &options))
            },
        ),
        row(
            "a master on port 0, with its password hidden",
            "InvalidConfig",
            false,
            "master URL \"redis://:***@127.0.0.1:0\" cannot be used: port 0 cannot be connected \
             to: write the master's port, such as 6379",
            |_, _| {
                build(Redlock::builder().masters([
                    "redis://:right-password@127.0.0.1:0",
                    "redis://127.0.0.1:2",
                    "redis://127.0.0.1:3",
                ]))
            },
        ),
        row(
            "19: AcquireOptions durations as strings",
            "accepted",
            false,
            "",
            |rt, m| {
                let client = client_of(m.plain.urls(), false)
                    .ttl_max("5s")
                    .build()
                    .unwrap();
                let options = AcquireOptions::new()
                    .ttl("3s")
                    .wait_timeout(String::from("1s"))
                    .max_hold("1m");
                acquire_in(rt, client.acquire_with(&unique_key("strings"), &options))
            },
        ),
        row(
            "19: an AcquireOptions duration that does not parse",
            "InvalidOptions",
            false,
            "wait_timeout \"soon\" is not a duration",
            |rt, _| {
                let options = AcquireOptions::new().wait_timeout("soon");
                acquire_in(
                    rt,
                    offline()
                        .build()
                        .unwrap()
                        .acquire_with("misuse:soon", &options),
                )
            },
        ),
        row(
            "13: acquire outside a tokio runtime",
            "NoRuntime",
            false,
            "inside a tokio runtime (features rt, time, net, macros;",
            |_, _| poll_outside_runtime(offline().build().unwrap().acquire("misuse:rt")),
        ),
        row(
            "13: try_acquire outside a tokio runtime",
            "NoRuntime",
            false,
            "inside a tokio runtime",
            |_, _| poll_outside_runtime(offline().build().unwrap().try_acquire("misuse:rt")),
        ),
        row(
            "13: with_lock outside a tokio runtime",
            "NoRuntime",
            false,
            "inside a tokio runtime",
            |_, _| {
                let client = offline().build().unwrap();
                let options = AcquireOptions::new();
                poll_outside_runtime(client.with_lock("misuse:rt", &options, |_| async {}))
            },
        ),
    ]
}

#[test]
fn every_misuse_gets_a_clear_error() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let masters = rt.block_on(async {
        let auth = Cluster::start_with(3, &ServerOptions::new().password("right-password"))
            .await
            .unwrap();
        let evicting = Cluster::start_with(
            3,
            &ServerOptions::new()
                .arg("--maxmemory")
                .arg("64mb")
                .arg("--maxmemory-policy")
                .arg("allkeys-lru"),
        )
        .await
        .unwrap();
        let plain = Cluster::start(1).await.unwrap();
        Masters {
            plain,
            auth,
            evicting,
        }
    });
    let mut failures = Vec::new();
    for row in rows() {
        let got = (row.run)(&rt, &masters);
        eprintln!(
            "{}: {} (retryable: {}): {}",
            row.misuse, got.kind, got.retryable, got.message
        );
        let ok = got.kind == row.kind
            && got.retryable == row.retryable
            && got.message.contains(row.says);
        if !ok {
            failures.push(format!(
                "{}\n  expected {} (retryable: {}) saying {:?}\n  got {} (retryable: {}): {}",
                row.misuse, row.kind, row.retryable, row.says, got.kind, got.retryable, got.message
            ));
        }
        assert!(
            got.message.len() < 2000,
            "{}: a message of {} bytes",
            row.misuse,
            got.message.len()
        );
        assert!(
            !got.message.contains("right-password"),
            "{}: the message leaks the password: {}",
            row.misuse,
            got.message
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The limits are inclusive: a name of exactly `MAX_RESOURCE_LEN` bytes locks.
#[tokio::test]
async fn a_name_of_the_maximum_length_locks() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client_of(cluster.urls(), false).build().unwrap();
    let name = "é".repeat(redquorum::limits::MAX_RESOURCE_LEN / 2);
    assert_eq!(name.len(), redquorum::limits::MAX_RESOURCE_LEN);
    let lease = client.acquire(&name).await.unwrap();
    assert_eq!(lease.resource(), name);
    lease.release().await.unwrap();
}

/// How many masters of `cluster` have a release-notice subscription open.
async fn subscribed(cluster: &Cluster) -> usize {
    let mut count = 0;
    for url in cluster.urls() {
        // Release notices, or (a queued waiter's) hand-off notices.
        let mut channels: Vec<String> = Vec::new();
        for pattern in ["redquorum:released:*", "redquorum:handoff:*"] {
            let found: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(pattern)
                .query_async(&mut raw(&url).await)
                .await
                .unwrap();
            channels.extend(found);
        }
        count += usize::from(!channels.is_empty());
    }
    count
}

/// A waiter on `client` is woken by the holder's release (a hand-off notice, or a
/// release notice without hand-off): it subscribes on a quorum of
/// masters, and gets the lock although its own timers (30 s) would not fire within its
/// wait budget (10 s).
async fn woken_by_release(cluster: &Cluster, waiter: &Redlock) {
    let key = unique_key("notice");
    let holder = client_of(cluster.urls(), false).ttl("30s").build().unwrap();
    let lease = holder.acquire(&key).await.unwrap();
    let wait = {
        let waiter = waiter.clone();
        let key = key.clone();
        tokio::spawn(async move { waiter.acquire(&key).await })
    };
    wait_until(Duration::from_secs(5), "the waiter subscribed", || async {
        subscribed(cluster).await >= 2
    })
    .await;
    lease.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(15), wait)
        .await
        .expect("the waiter hung")
        .unwrap();
    got.expect("the waiter was not woken by the release")
        .release()
        .await
        .unwrap();
}

/// A waiter that only a release notice can wake in time.
fn waiter_of(cluster: &Cluster) -> Redlock {
    client_of(cluster.urls(), false)
        .ttl("30s")
        .retry(Retry::new().delay("30s").jitter("0s").wait("10s"))
        // A queued waiter's refresh (every third of it) would not fire in time either.
        .waiting(Waiting::new().waiter_ttl("30s"))
        .build()
        .unwrap()
}

#[test]
fn a_client_built_outside_a_runtime_gets_release_notices() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start(3)).unwrap();
    let waiter = waiter_of(&cluster);
    rt.block_on(woken_by_release(&cluster, &waiter));
}

#[test]
fn a_client_used_from_a_second_runtime_keeps_its_notices_and_masters() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let cluster = first.block_on(Cluster::start(3)).unwrap();
    let waiter = first.block_on(async { waiter_of(&cluster) });
    first.block_on(woken_by_release(&cluster, &waiter));
    // The first runtime goes, and with it every task it ran; the cluster's processes stay.
    let servers = cluster;
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        // The masters' connections were driven by the first runtime: the client connects
        // again instead of failing.
        let lease = tokio::time::timeout(
            Duration::from_secs(5),
            waiter.try_acquire(&unique_key("again")),
        )
        .await
        .expect("try_acquire hung")
        .expect("the client's connections died with the first runtime");
        lease.release().await.unwrap();
        woken_by_release(&servers, &waiter).await;
    });
}

/// Every public type built from a URL with a password, formatted every way it can be,
/// shows no secret: `Debug` (plain and `{:#?}`) and `Display`.
#[tokio::test]
async fn no_public_type_shows_a_password() {
    const SECRET: &str = "pa55-w0rd-s3cret";
    let mut shown: Vec<(&str, String)> = Vec::new();
    macro_rules! show {
        ($name:expr, debug $value:expr) => {
            shown.push(($name, format!("{:?}", $value)));
            shown.push(($name, format!("{:#?}", $value)));
        };
        ($name:expr, both $value:expr) => {
            show!($name, debug $value);
            shown.push(($name, format!("{}", $value)));
        };
    }

    let options = ServerOptions::new().password(SECRET);
    show!("ServerOptions", debug & options);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    show!("Cluster", debug & cluster);
    show!("Server", debug cluster.server(0));
    let urls = cluster.urls();
    assert!(
        urls[0].contains(SECRET),
        "the test needs URLs with the password"
    );
    let unix = format!("redis+unix:///tmp/none.sock?pass={SECRET}");

    let builder = client_of(urls.clone(), false).master(&unix);
    show!("Builder", debug & builder);
    let client = client_of(urls.clone(), false).build().unwrap();
    show!("Redlock", debug & client);
    shown.push((
        "Redlock::master_addresses",
        client.master_addresses().join(" "),
    ));

    let duplicate = Redlock::builder()
        .masters([&urls[0], &urls[0]])
        .build()
        .unwrap_err();
    show!("Error (configuration)", both & duplicate);

    let key = unique_key("secret");
    let lease = client.acquire(&key).await.unwrap();
    show!("Lease", debug & lease);
    show!("LeaseHandle", debug & lease.handle());
    for report in lease.masters() {
        show!("MasterReport", both report);
        show!("MasterOutcome", both report.outcome());
    }
    let extended = lease.extend().await.unwrap();
    show!("ExtendReport", debug & extended);
    let lost = lease.lost();
    show!("Lost", debug & lost);
    drop(lost);

    // Another client, refused by the masters it wants: a failed round with errors.
    let wrong: Vec<String> = urls
        .iter()
        .map(|u| u.replace(SECRET, &format!("{SECRET}-wrong")))
        .collect();
    let refused = client_of(wrong, false)
        .build()
        .unwrap()
        .acquire(&key)
        .await
        .unwrap_err();
    show!("Error", both & refused);
    for report in refused.masters() {
        show!("MasterReport", both report);
        if let redquorum::MasterOutcome::Failed(e) = report.outcome() {
            show!("MasterError", both e);
        }
    }
    let released = lease.release().await.unwrap();
    show!("ReleaseReport", debug & released);

    // A client key given as PEM bytes: shown neither by the builder nor by its refusal
    // (a certificate that is none, or a build without the `tls` feature).
    let key = format!("-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n");
    let keyed = || {
        Redlock::builder()
            .master("rediss://127.0.0.1:1")
            .tls(Tls::new().client_cert_pem("no certificate", key.as_str()))
    };
    show!("Builder with a client key", debug & keyed());
    let refused = keyed().build().unwrap_err();
    show!("Error (client key)", both & refused);

    for (name, text) in &shown {
        assert!(!text.contains(SECRET), "{name} shows the password: {text}");
    }
}

/// A master whose host name cannot be resolved says so, without the TLS hint of a
/// connection that broke (which cannot be the cause), and stays retryable: a resolver can
/// fail for a while. The wait ends as an outage.
#[tokio::test]
async fn an_unresolvable_master_says_so() {
    // A label longer than 63 bytes: the resolver refuses the name on this machine at
    // once, without asking any DNS server.
    let host = format!("{}.invalid", "m".repeat(64));
    let urls: Vec<String> = (1..=3)
        .map(|port| format!("redis://{host}:{port}"))
        .collect();
    let client = client_of(urls, false).build().unwrap();
    let options = AcquireOptions::new().wait_timeout("300ms");
    let err = client
        .acquire_with("misuse:dns", &options)
        .await
        .unwrap_err();
    eprintln!("{err}");
    assert_eq!(err.kind(), redquorum::ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable(), "{err}");
    let mut failed = 0;
    for report in err.masters() {
        if let redquorum::MasterOutcome::Failed(e) = report.outcome() {
            failed += 1;
            let said = e.to_string();
            assert!(
                said.contains(&format!("could not resolve host {host:?}")),
                "{said}"
            );
            assert!(!said.contains("rediss://"), "{said}");
            assert!(!e.kind().is_permanent(), "{said}");
        }
    }
    assert!(failed >= 2, "{err}");
}

/// A port that answers something other than Redis (here an HTTP server's refusal) is
/// reported on one line, saying that the peer does not speak the Redis protocol and to
/// check the port, instead of the parser's raw complaint.
#[tokio::test]
async fn a_port_that_does_not_speak_redis_says_so_on_one_line() {
    use tokio::io::AsyncWriteExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        for _ in 0..100 {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let _ = socket
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
                      Content-Length: 11\r\nConnection: close\r\n\r\nBad Request",
                )
                .await;
            let _ = socket.shutdown().await;
        }
    });
    let client = client_of(vec![format!("redis://127.0.0.1:{port}")], false)
        .build()
        .unwrap();
    let err = client.try_acquire("misuse:http").await.unwrap_err();
    eprintln!("{err}");
    server.abort();
    let [report] = err.masters() else {
        panic!("one master: {err}")
    };
    let redquorum::MasterOutcome::Failed(e) = report.outcome() else {
        panic!("{err}")
    };
    let said = e.to_string();
    assert!(
        said.contains("does not speak the Redis protocol") && said.contains("is the port right"),
        "{said}"
    );
    assert!(
        !said.contains('\n') && !err.to_string().contains('\n'),
        "{said:?}"
    );
    assert!(!said.contains("rediss://"), "{said}");
}
