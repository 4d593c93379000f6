//! The public surface under misuse: every bad input gets an error of the right kind, says
//! whether retrying can help, and names what to change. Never a panic, never a hang.
//!
//! One table, one row per misuse. Rows that need masters run against real servers started
//! with the misconfiguration under test (a password the client does not know, an evicting
//! `maxmemory-policy`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::future::Future;
use std::time::Duration;

use redquorum::{ConfigError, Error, Redlock};
use support::*;

/// What a misuse produced: the kind (an [`ErrorKind`](redquorum::ErrorKind) or a
/// `ConfigError` variant, by name), whether it is retryable, and the message.
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

impl From<ConfigError> for Got {
    fn from(e: ConfigError) -> Self {
        let debug = format!("{e:?}");
        let name: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
        Got {
            kind: format!("ConfigError::{name}"),
            retryable: false,
            message: e.to_string(),
        }
    }
}

/// Masters started for the rows that need them.
struct Masters {
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
        .node_timeout("200ms")
        .connect_timeout("500ms")
        .retry_delay("10ms")
        .retry_jitter("5ms")
}

/// `url` with its password replaced by `password` (or removed when `None`).
fn with_password(url: &str, password: Option<&str>) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_password(password).unwrap();
    parsed.to_string()
}

/// Runs an acquire inside a runtime, bounded so that a hang fails the row.
fn acquire_in(
    rt: &tokio::runtime::Runtime,
    fut: impl Future<Output = Result<redquorum::Lease, Error>>,
) -> Got {
    rt.block_on(async {
        match tokio::time::timeout(Duration::from_secs(20), fut).await {
            Ok(Ok(_lease)) => Got {
                kind: "accepted".into(),
                retryable: false,
                message: String::new(),
            },
            Ok(Err(e)) => Got::from(e),
            Err(_) => panic!("the call hung for 20 s"),
        }
    })
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
                let urls = m
                    .auth
                    .urls()
                    .iter()
                    .map(|u| with_password(u, Some("wrong")))
                    .collect();
                let client = client_of(urls, false).build().unwrap();
                acquire_in(rt, client.acquire("misuse:auth"))
            },
        ),
        row(
            "10: no password for masters that require one (NOAUTH)",
            "Auth",
            false,
            "check the user and password",
            |rt, m| {
                let urls = m
                    .auth
                    .urls()
                    .iter()
                    .map(|u| with_password(u, None))
                    .collect();
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
                let urls = m
                    .auth
                    .urls()
                    .iter()
                    .map(|u| with_password(u, Some("wrong")))
                    .collect();
                let client = client_of(urls, true).wait_timeout("3s").build().unwrap();
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
        Masters { auth, evicting }
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
            !got.message.contains("right-password"),
            "{}: the message leaks the password: {}",
            row.misuse,
            got.message
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
