//! Shared helpers for the integration tests: unique keys, a raw connection, and a bounded
//! wait for conditions on real masters.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    dead_code,
    unused_imports,
    unreachable_pub
)]

use redquorum::{Retry, Timeouts};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

pub use redquorum_testkit::{Cluster, Persistence, Server, ServerOptions};

/// A key no other test uses.
pub fn unique_key(name: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "test:{name}:{}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain connection to one server, for checks and for playing another client.
pub async fn raw(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Writes an old data epoch on the server at `url`, as a master in service for a while has:
/// restart quarantine then waits only for young processes (and not at all for durable
/// ones). The epoch is the field `epoch` of the cluster record's key (no key prefix).
pub async fn seed_old_epoch(url: &str) {
    let _: () = redis::cmd("HSET")
        .arg("redquorum:cluster")
        .arg("epoch")
        .arg("seed:1000000")
        .query_async(&mut raw(url).await)
        .await
        .unwrap();
}

/// The cluster record at `key` on the server at `url`: the fields of its hash but the
/// master's data epoch, which the key holds with or without a record. Empty: no record.
pub async fn cluster_record(url: &str, key: &str) -> std::collections::HashMap<String, String> {
    let mut fields: std::collections::HashMap<String, String> =
        raw(url).await.hgetall(key).await.unwrap();
    fields.remove("epoch");
    fields
}

/// The value of `key` on the server at `url`.
pub async fn get(url: &str, key: &str) -> Option<String> {
    raw(url).await.get(key).await.unwrap()
}

/// The value of `key` on `server`, over a connection of the test's own (TLS for a
/// server started with TLS).
pub async fn value_on(server: &Server, key: &str) -> Option<String> {
    let client = server.client().unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    conn.get(key).await.unwrap()
}

/// Awaits `condition` by polling it every 5 ms for at most `limit`; panics with `what`
/// if it never holds.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + limit;
    loop {
        if condition().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "condition not reached within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether every master holds `value` under `key`. An acquire returns once a quorum
/// granted, so the rest of its writes may still be on the way.
pub async fn held_everywhere(cluster: &Cluster, key: &str, value: &str) -> bool {
    for server in cluster.servers() {
        if value_on(server, key).await.as_deref() != Some(value) {
            return false;
        }
    }
    true
}

/// Whether `key` is absent on every live (not killed, not paused) server of `cluster`.
pub async fn gone_everywhere(cluster: &Cluster, key: &str) -> bool {
    for server in cluster.servers() {
        if !server.is_running() || server.is_paused() {
            continue;
        }
        if value_on(server, key).await.is_some() {
            return false;
        }
    }
    true
}

/// `client`'s waiting acquire of `key` with `options`, in a task of its own (a waiter
/// the test then moves by releases, kills and pauses).
pub fn spawn_acquire(
    client: &redquorum::Redlock,
    key: &str,
    options: redquorum::AcquireOptions,
) -> tokio::task::JoinHandle<Result<redquorum::Lease, redquorum::Error>> {
    let (client, key) = (client.clone(), key.to_owned());
    tokio::spawn(async move { client.acquire_with(&key, &options).await })
}

/// A client over `cluster` with test-friendly timings. Restart quarantine is off: the
/// servers are brand new, and would otherwise abstain for a TTL (tests of quarantine turn
/// it back on).
pub fn client(cluster: &Cluster) -> redquorum::Builder {
    redquorum::Redlock::builder()
        .quarantine(false)
        .masters(cluster.urls())
        .ttl(Duration::from_secs(5))
        .timeouts(Timeouts::new().node(Duration::from_millis(200)))
        .retry(
            Retry::new()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(10)),
        )
}

/// Waits until `client` can lock: until brand-new masters left restart quarantine.
pub async fn settle(client: &redquorum::Redlock) {
    wait_until(Duration::from_secs(10), "masters left quarantine", || {
        let client = client.clone();
        async move {
            match client.try_acquire(&unique_key("settle")).await {
                Ok(lease) => lease.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
}

/// The members of `key`'s waiter queue on `server` (none when it is down).
pub async fn members(server: &Server, key: &str) -> Vec<String> {
    if !server.is_running() {
        return Vec::new();
    }
    let mut conn = raw(&server.url()).await;
    conn.zrange(format!("redquorum:queue:{key}"), 0, -1)
        .await
        .unwrap()
}

/// How many live masters of `cluster` have at least `n` members in `key`'s queue.
pub async fn queued_on(cluster: &Cluster, key: &str, n: usize) -> usize {
    let mut count = 0;
    for server in cluster.servers() {
        if members(server, key).await.len() >= n {
            count += 1;
        }
    }
    count
}

/// Waits (at most 2 s) until no live master of `cluster` has a waiter queued for `key`.
pub async fn wait_unqueued(cluster: &Cluster, key: &str) {
    wait_until(
        Duration::from_secs(2),
        "the waiter left the queue",
        || async move { queued_on(cluster, key, 1).await == 0 },
    )
    .await;
}

/// Waits (at most 5 s) until `masters` masters of `cluster` have a waiter queued for `key`.
pub async fn wait_registered(cluster: &Cluster, key: &str, masters: usize) {
    wait_until(
        Duration::from_secs(5),
        "the waiter registered",
        || async move { queued_on(cluster, key, 1).await == masters },
    )
    .await;
}

/// The `INFO` section `section` of the server behind `conn`.
pub async fn info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap()
}

/// The number after `field` (a line's prefix, such as `"connected_clients:"`) in the
/// `INFO` section `section` of the server behind `conn`; `None` when no line has it.
pub async fn info_number(
    conn: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Option<u64> {
    info(conn, section)
        .await
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().parse().ok())
}
