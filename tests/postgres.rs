//! The storage-side fencing check in PostgreSQL (`redquorum::postgres`, feature
//! `postgres`), against a real server started by the testkit (`testkit::Postgres`):
//! granted, refused and equal-token claims; a claim blocked behind a holder and refused
//! once it commits; SQLSTATE 40001 under `REPEATABLE READ`; the idle timeout ending a
//! paused holder's transaction; `lock_timeout`; the budget's bound on the client; a body
//! that swallows a failed statement or ends the transaction; errors the client raises
//! itself; a `COMMIT` of unknown outcome and its transaction id; bad input; dropped
//! futures; and the testkit's own control of the server (owned by PID, paused, killed,
//! restarted, shut down without leaking shared memory or `initdb`).
//!
//! Each test starts its own server (about 0.7 s: `initdb` and start).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use redquorum::FencingToken;
use redquorum::postgres::{self, CLAIM, Claim, FenceErrorKind, FenceOptions, SCHEMA};
use redquorum_testkit::Postgres;
use tokio_postgres::{Client, IsolationLevel, NoTls};

/// The data the fenced transactions of these tests write: a counter per resource.
const DATA: &str = "CREATE TABLE counters (resource text PRIMARY KEY, value bigint NOT NULL)";

fn token(t: u64) -> FencingToken {
    FencingToken::from(t)
}

/// A connection to `db`, its connection task spawned.
async fn connect(db: &Postgres) -> Client {
    let (client, connection) = tokio_postgres::connect(&db.config(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A fresh server with the fence table and the counters table.
async fn start() -> (Postgres, Client) {
    let db = Postgres::start().await.unwrap();
    let client = connect(&db).await;
    client.batch_execute(SCHEMA).await.unwrap();
    client.batch_execute(DATA).await.unwrap();
    (db, client)
}

/// The fence row's token for `resource`, if any.
async fn fence_of(client: &Client, resource: &str) -> Option<i64> {
    client
        .query_opt(
            "SELECT token FROM redquorum_fence WHERE resource = $1",
            &[&resource],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

async fn counter(client: &Client, resource: &str) -> Option<i64> {
    client
        .query_opt(
            "SELECT value FROM counters WHERE resource = $1",
            &[&resource],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

/// One fenced increment of `resource`'s counter; the counter's new value.
async fn increment(
    client: &mut Client,
    resource: &str,
    t: u64,
    options: &FenceOptions,
) -> Result<i64, postgres::FenceError> {
    postgres::fenced(client, resource, token(t), options, async |tx| {
        let row = tx
            .query_one(
                "INSERT INTO counters AS c (resource, value) VALUES ($1, 1) \
                 ON CONFLICT (resource) DO UPDATE SET value = c.value + 1 RETURNING value",
                &[&resource],
            )
            .await?;
        Ok::<i64, tokio_postgres::Error>(row.get(0))
    })
    .await
}

fn generous() -> FenceOptions {
    FenceOptions::new(Duration::from_secs(30))
}

/// The backend of `client`.
async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Whether backend `pid` waits for a lock (seen from another connection).
async fn waits_for_lock(observer: &Client, pid: i32) -> bool {
    observer
        .query_opt(
            "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
            &[&pid],
        )
        .await
        .unwrap()
        .is_some()
}

/// Whether backend `pid` still exists.
async fn backend_alive(observer: &Client, pid: i32) -> bool {
    observer
        .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn the_first_claim_of_a_resource_is_granted_and_recorded() {
    let (_db, mut client) = start().await;
    assert_eq!(fence_of(&client, "orders:1").await, None);
    let value = increment(&mut client, "orders:1", 3, &generous())
        .await
        .unwrap();
    assert_eq!(value, 1);
    assert_eq!(fence_of(&client, "orders:1").await, Some(3));
    // Another resource has a fence of its own.
    increment(&mut client, "orders:2", 1, &generous())
        .await
        .unwrap();
    assert_eq!(fence_of(&client, "orders:2").await, Some(1));
    assert_eq!(fence_of(&client, "orders:1").await, Some(3));
}

// Checks I13 (fenced writes commit in token order).
#[tokio::test]
async fn newer_and_equal_tokens_are_granted_older_ones_refused() {
    let (_db, mut client) = start().await;
    let r = "orders:7";
    increment(&mut client, r, 5, &generous()).await.unwrap();
    // The same holder writes again in another transaction: equal tokens are granted.
    assert_eq!(increment(&mut client, r, 5, &generous()).await.unwrap(), 2);
    assert_eq!(increment(&mut client, r, 9, &generous()).await.unwrap(), 3);
    let refused = increment(&mut client, r, 8, &generous()).await.unwrap_err();
    assert_eq!(refused.kind(), FenceErrorKind::Refused, "{refused}");
    assert_eq!(refused.newest(), Some(token(9)));
    assert!(!refused.is_retryable());
    assert!(
        refused.to_string().contains("token 9 has claimed"),
        "{refused}"
    );
    // Nothing of the refused transaction was written, and the fence kept its token.
    assert_eq!(counter(&client, r).await, Some(3));
    assert_eq!(fence_of(&client, r).await, Some(9));

    // `claim` on a transaction of the caller's own says the same.
    let tx = client.transaction().await.unwrap();
    assert_eq!(
        postgres::claim(&tx, r, token(2)).await.unwrap(),
        Claim::Refused { newest: token(9) }
    );
    tx.rollback().await.unwrap();
    let tx = client.transaction().await.unwrap();
    assert_eq!(
        postgres::claim(&tx, r, token(9)).await.unwrap(),
        Claim::Granted
    );
    assert_eq!(
        postgres::claim(&tx, r, token(10)).await.unwrap(),
        Claim::Granted
    );
    tx.commit().await.unwrap();
    assert_eq!(fence_of(&client, r).await, Some(10));
}

#[tokio::test]
async fn the_claim_sql_works_from_any_driver() {
    // The public SQL, as another driver would send it: psql's protocol, literal values.
    let (_db, client) = start().await;
    let literal = CLAIM.replace("$1", "'jobs:1'").replace("$2", "4");
    let granted = client.simple_query(&literal).await.unwrap();
    let rows = granted
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 1, "granted: one row back");
    let stale = CLAIM.replace("$1", "'jobs:1'").replace("$2", "3");
    let refused = client.simple_query(&stale).await.unwrap();
    let rows = refused
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 0, "refused: zero rows");
    // SCHEMA may run again at every start.
    client.batch_execute(SCHEMA).await.unwrap();
    assert_eq!(fence_of(&client, "jobs:1").await, Some(4));
}

/// Holder A claims token 7 and stays in its transaction; B's claim of 6 waits for A's
/// row lock (seen in pg_stat_activity), and once A commits, B re-reads the row and is
/// refused: zero rows under READ COMMITTED.
// Checks I13 (fenced writes commit in token order).
#[tokio::test]
async fn a_claim_blocked_behind_a_holder_is_refused_once_it_commits() {
    let (db, mut a) = start().await;
    let mut b = connect(&db).await;
    let observer = connect(&db).await;
    let b_pid = backend_pid(&b).await;
    let r = "accounts:1";
    let tx_a = a.transaction().await.unwrap();
    assert_eq!(
        postgres::claim(&tx_a, r, token(7)).await.unwrap(),
        Claim::Granted
    );
    let waiting = tokio::spawn(async move { increment(&mut b, r, 6, &generous()).await });
    support::wait_until(Duration::from_secs(10), "B waits for A's row lock", || {
        waits_for_lock(&observer, b_pid)
    })
    .await;
    assert!(!waiting.is_finished(), "B must wait while A holds the row");
    tx_a.execute("INSERT INTO counters VALUES ($1, 100)", &[&r])
        .await
        .unwrap();
    tx_a.commit().await.unwrap();
    let refused = waiting.await.unwrap().unwrap_err();
    assert_eq!(refused.kind(), FenceErrorKind::Refused, "{refused}");
    assert_eq!(refused.newest(), Some(token(7)));
    assert_eq!(counter(&observer, r).await, Some(100), "only A wrote");
    assert_eq!(fence_of(&observer, r).await, Some(7));
}

/// The same under REPEATABLE READ: the blocked claim cannot re-read the row in its
/// snapshot and fails with SQLSTATE 40001, which is retryable and neither a refusal nor a
/// success; run again, it is refused. A newer token blocked the same way is a conflict
/// too, and granted when run again.
// Checks I13 (fenced writes commit in token order).
#[tokio::test]
async fn a_blocked_claim_under_repeatable_read_is_a_retryable_conflict() {
    let (db, mut a) = start().await;
    let observer = connect(&db).await;
    let r = "accounts:2";
    let rr = generous().isolation(IsolationLevel::RepeatableRead);
    // (the holder's token, the contender's, whether the contender's second run is granted)
    for (holder, contender, newer) in [(7, 6, false), (8, 9, true)] {
        let mut b = connect(&db).await;
        let b_pid = backend_pid(&b).await;
        let tx_a = a.transaction().await.unwrap();
        assert_eq!(
            postgres::claim(&tx_a, r, token(holder)).await.unwrap(),
            Claim::Granted
        );
        let options = rr.clone();
        let waiting = tokio::spawn(async move {
            let first = increment(&mut b, r, contender, &options).await;
            let again = increment(&mut b, r, contender, &options).await;
            (first, again)
        });
        support::wait_until(Duration::from_secs(10), "B waits for A's row lock", || {
            waits_for_lock(&observer, b_pid)
        })
        .await;
        tx_a.commit().await.unwrap();
        let (first, again) = waiting.await.unwrap();
        let conflict = first.unwrap_err();
        assert_eq!(conflict.kind(), FenceErrorKind::Conflict, "{conflict}");
        assert_eq!(conflict.code(), Some("40001"));
        assert!(conflict.is_retryable());
        assert_eq!(conflict.newest(), None);
        if newer {
            assert!(again.is_ok(), "{again:?}");
        } else {
            let refused = again.unwrap_err();
            assert_eq!(refused.kind(), FenceErrorKind::Refused, "{refused}");
            assert_eq!(refused.newest(), Some(token(holder)));
        }
    }
    assert_eq!(fence_of(&observer, r).await, Some(9));
    assert_eq!(
        counter(&observer, r).await,
        Some(1),
        "one increment committed"
    );
}

/// A holder paused between its claim and its commit (it sleeps, idle in the
/// transaction) past its budget: the server ends its session, the fence row's lock goes
/// with it, a newer writer waiting for the row is granted while the holder still sleeps,
/// and the holder's write is gone.
#[tokio::test]
async fn the_idle_timeout_ends_a_paused_holders_transaction() {
    let (db, mut holder) = start().await;
    let mut next = connect(&db).await;
    let observer = connect(&db).await;
    let holder_pid = backend_pid(&holder).await;
    let r = "accounts:3";
    // The holder sleeps far longer than its budget and than the test's waits below.
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel::<()>();
    let (wake_tx, wake_rx) = tokio::sync::oneshot::channel::<()>();
    let holding = tokio::spawn(async move {
        // The server's idle timeout, well inside the client's own bound on the budget.
        let budget = generous().idle_timeout(Duration::from_millis(400));
        postgres::fenced(&mut holder, r, token(4), &budget, async |tx| {
            tx.execute("INSERT INTO counters VALUES ($1, 40)", &[&r])
                .await?;
            paused_tx.send(()).unwrap();
            // Paused until the test wakes it, long after its idle timeout.
            let _ = wake_rx.await;
            tx.execute("UPDATE counters SET value = 41 WHERE resource = $1", &[&r])
                .await?;
            Ok::<(), tokio_postgres::Error>(())
        })
        .await
    });
    paused_rx.await.unwrap();
    // The newer writer waits for the row, then gets it when the session ends: well
    // within its own 20 s budget, and before the holder is woken.
    let value = increment(&mut next, r, 5, &FenceOptions::new(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(value, 1, "the holder's uncommitted insert was rolled back");
    assert!(
        !backend_alive(&observer, holder_pid).await,
        "its session ended"
    );
    wake_tx.send(()).unwrap();
    let ended = holding.await.unwrap().unwrap_err();
    assert!(
        matches!(
            ended.kind(),
            FenceErrorKind::TimedOut | FenceErrorKind::Connection
        ),
        "{ended:?}"
    );
    assert!(ended.is_retryable());
    if ended.kind() == FenceErrorKind::TimedOut {
        // 25P03: the server closed the session, and the error says what to do.
        assert!(ended.to_string().contains("new connection"), "{ended}");
    }
    assert_eq!(counter(&observer, r).await, Some(1));
    assert_eq!(fence_of(&observer, r).await, Some(5));
}

/// A body that idles past the budget after its last statement: the server ends the
/// session before `COMMIT` is sent, so nothing was committed, and the error says so
/// (a lost connection, retryable), not "unknown outcome".
#[tokio::test]
async fn a_session_ended_before_commit_is_known_not_committed() {
    let (db, mut holder) = start().await;
    let observer = connect(&db).await;
    let holder_pid = backend_pid(&holder).await;
    let r = "accounts:8";
    let ended = postgres::fenced(
        &mut holder,
        r,
        token(2),
        &generous().idle_timeout(Duration::from_millis(200)),
        async |tx| {
            tx.execute("INSERT INTO counters VALUES ($1, 1)", &[&r])
                .await?;
            // Idle in the transaction until the server has ended the session.
            support::wait_until(Duration::from_secs(10), "the session ended", || {
                let observer = &observer;
                async move { !backend_alive(observer, holder_pid).await }
            })
            .await;
            Ok::<(), tokio_postgres::Error>(())
        },
    )
    .await
    .unwrap_err();
    assert_eq!(ended.kind(), FenceErrorKind::Connection, "{ended}");
    assert!(ended.is_retryable());
    assert_eq!(counter(&observer, r).await, None);
}

/// A writer waits for the fence row at most its `lock_timeout`: behind a holder that
/// keeps its transaction open (not idle long enough to be ended), it fails as TimedOut,
/// 55P03, retryable, and the holder's claim stands.
#[tokio::test]
async fn lock_timeout_bounds_the_wait_for_the_fence_row() {
    let (db, mut holder) = start().await;
    let mut waiter = connect(&db).await;
    let r = "accounts:4";
    let tx = holder.transaction().await.unwrap();
    assert_eq!(
        postgres::claim(&tx, r, token(3)).await.unwrap(),
        Claim::Granted
    );
    let options =
        FenceOptions::new(Duration::from_secs(60)).lock_timeout(Duration::from_millis(300));
    let waited = increment(&mut waiter, r, 4, &options).await.unwrap_err();
    assert_eq!(waited.kind(), FenceErrorKind::TimedOut, "{waited}");
    assert_eq!(waited.code(), Some("55P03"));
    assert!(waited.is_retryable());
    // The waiter's connection is still usable, and the holder still holds the row.
    tx.execute("INSERT INTO counters VALUES ($1, 7)", &[&r])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(increment(&mut waiter, r, 4, &generous()).await.unwrap(), 8);
}

// Checks I13 (fenced writes commit in token order).
#[tokio::test]
async fn a_failing_body_rolls_everything_back() {
    let (_db, mut client) = start().await;
    let r = "accounts:5";
    let failed = postgres::fenced(&mut client, r, token(2), &generous(), async |tx| {
        tx.execute("INSERT INTO counters VALUES ($1, 1)", &[&r])
            .await?;
        Err::<(), Box<dyn std::error::Error + Send + Sync>>("the card was declined".into())
    })
    .await
    .unwrap_err();
    assert_eq!(failed.kind(), FenceErrorKind::Body);
    assert!(!failed.is_retryable());
    assert_eq!(
        std::error::Error::source(&failed).map(ToString::to_string),
        Some("the card was declined".to_owned())
    );
    assert_eq!(counter(&client, r).await, None);
    assert_eq!(
        fence_of(&client, r).await,
        None,
        "the claim is rolled back too"
    );
    // A database error in the body is classified by its SQLSTATE: a constraint is not
    // retryable, and reported as the body's.
    client
        .batch_execute("INSERT INTO counters VALUES ('taken', 1)")
        .await
        .unwrap();
    let duplicate = postgres::fenced(&mut client, "taken", token(2), &generous(), async |tx| {
        tx.execute("INSERT INTO counters VALUES ('taken', 2)", &[])
            .await
    })
    .await
    .unwrap_err();
    assert_eq!(duplicate.kind(), FenceErrorKind::Body, "{duplicate}");
    assert_eq!(duplicate.code(), Some("23505"));
    assert!(!duplicate.is_retryable());
    assert!(
        duplicate.to_string().contains("duplicate key"),
        "{duplicate}"
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let (_db, mut client) = start().await;
    let long = "x".repeat(postgres::MAX_RESOURCE_LEN + 1);
    assert_eq!(
        postgres::MAX_RESOURCE_LEN,
        redquorum::limits::MAX_RESOURCE_LEN,
        "the same names as the lock's"
    );
    let cases: [(&str, u64, FenceOptions, FenceErrorKind, &str); 7] = [
        ("", 1, generous(), FenceErrorKind::InvalidInput, "empty"),
        ("a\0b", 1, generous(), FenceErrorKind::InvalidInput, "NUL"),
        (
            &long,
            1,
            generous(),
            FenceErrorKind::InvalidInput,
            "hash it",
        ),
        (
            "r",
            u64::MAX,
            generous(),
            FenceErrorKind::InvalidInput,
            "bigint",
        ),
        (
            "r",
            1,
            FenceOptions::new(Duration::ZERO),
            FenceErrorKind::TimedOut,
            "no time left",
        ),
        (
            "r",
            1,
            generous().idle_timeout(Duration::ZERO),
            FenceErrorKind::InvalidInput,
            "reads as no limit",
        ),
        // Both zero on a lease with time left: the user's settings, not the lease.
        (
            "r",
            1,
            generous()
                .lock_timeout(Duration::ZERO)
                .idle_timeout(Duration::ZERO),
            FenceErrorKind::InvalidInput,
            "reads as no limit",
        ),
    ];
    for (resource, t, options, kind, says) in cases {
        let sent = std::sync::atomic::AtomicBool::new(false);
        let e = postgres::fenced(&mut client, resource, token(t), &options, async |_tx| {
            sent.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<(), tokio_postgres::Error>(())
        })
        .await
        .unwrap_err();
        assert_eq!(e.kind(), kind, "{resource:.10?}: {e}");
        assert!(e.to_string().contains(says), "{e}");
        assert_eq!(e.is_retryable(), kind == FenceErrorKind::TimedOut, "{e}");
        assert!(!sent.load(std::sync::atomic::Ordering::SeqCst));
    }
    // No transaction was left open: the connection works, and nothing was claimed.
    let open: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(open, 0);
    let fences: i64 = client
        .query_one("SELECT count(*) FROM redquorum_fence", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(fences, 0);
    // `claim` refuses the same names on a transaction of the caller's.
    let tx = client.transaction().await.unwrap();
    let e = postgres::claim(&tx, "", token(1)).await.unwrap_err();
    assert_eq!(e.kind(), FenceErrorKind::InvalidInput);
}

#[tokio::test]
async fn a_missing_fence_table_says_to_create_it() {
    let db = Postgres::start().await.unwrap();
    let mut client = connect(&db).await;
    let e = postgres::fenced(&mut client, "r", token(1), &generous(), async |_tx| {
        Ok::<(), tokio_postgres::Error>(())
    })
    .await
    .unwrap_err();
    assert_eq!(e.kind(), FenceErrorKind::Database, "{e}");
    assert_eq!(e.code(), Some("42P01"));
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("SCHEMA"), "{e}");
    // The connection is still usable.
    client.batch_execute(SCHEMA).await.unwrap();
}

/// Polls `future` up to `polls` times, pausing a little between polls so that its
/// requests and replies move; `Some` if it completed.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    for i in 0..polls {
        if let Poll::Ready(out) = futures::poll!(future.as_mut()) {
            return Some(out);
        }
        if i + 1 < polls {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    None
}

/// The fenced transaction dropped after its k-th poll, for every k until it completes:
/// after each drop the client still works, no transaction is left open, the fence row is
/// not locked (another connection claims it at once), and the counter moved by exactly
/// the increments that completed.
#[tokio::test]
async fn a_dropped_fenced_transaction_rolls_back_and_leaves_the_client_usable() {
    let (db, mut client) = start().await;
    let other = connect(&db).await;
    let r = "accounts:6";
    let mut completed = 0;
    let mut drops = 0;
    for k in 1..=200 {
        let out = poll_then_drop(increment(&mut client, r, 10, &generous()), k).await;
        if let Some(done) = out {
            done.unwrap();
            completed += 1;
            break;
        }
        drops += 1;
        // The dropped transaction's ROLLBACK goes out before anything the client sends
        // next, so this sees no open transaction of its own.
        let open: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid() AND state LIKE 'idle in transaction%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(open, 0, "after {k} polls");
        // The row lock is gone: a claim from another connection does not wait.
        other
            .batch_execute("BEGIN; SET LOCAL lock_timeout = 5000")
            .await
            .unwrap();
        let granted = other
            .query(CLAIM, &[&r, &10_i64])
            .await
            .unwrap_or_else(|e| panic!("after {k} polls: {e:?}"));
        assert_eq!(granted.len(), 1);
        other.batch_execute("ROLLBACK").await.unwrap();
    }
    assert!(drops > 0, "the transaction never suspended");
    // A drop while COMMIT was on its way may have committed; the last run completed.
    let value = counter(&client, r).await.unwrap();
    assert!(
        value >= completed,
        "{value} increments for {completed} completed"
    );
    assert_eq!(fence_of(&client, r).await, Some(10));
    eprintln!(
        "dropped after each of {drops} polls, then completed; {} drop(s) during COMMIT committed",
        value - completed
    );
}

#[test]
fn the_fenced_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    async fn check(client: &mut Client) {
        let options = generous();
        let future = postgres::fenced(client, "r", token(1), &options, async |tx| {
            tx.execute("SELECT 1", &[]).await
        });
        assert_send(&future);
        let _ = future.await;
    }
    let _ = check;
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<postgres::FenceError>();
}

/// The testkit's server: owned by PID and run as the `postgres` user when root, loopback
/// only, `fsync=off`, `track_commit_timestamp=on`; paused, killed and restarted with its
/// committed rows; gone when dropped.
#[tokio::test]
async fn the_testkit_owns_pauses_kills_and_restarts_postgres() {
    let started = std::time::Instant::now();
    let mut db = Postgres::start().await.unwrap();
    eprintln!("initdb and start: {:?}", started.elapsed());
    let pid = db.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.ends_with("postgres"), "{exe:?}");
    let uid = |status: &str| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .to_owned()
    };
    let ours = uid(&std::fs::read_to_string("/proc/self/status").unwrap());
    if ours.split_whitespace().nth(1) == Some("0") {
        let theirs = uid(&status);
        assert!(
            !theirs.split_whitespace().skip(1).any(|u| u == "0"),
            "{theirs}"
        );
    }
    let client = connect(&db).await;
    for (setting, want) in [
        ("fsync", "off"),
        ("track_commit_timestamp", "on"),
        ("listen_addresses", "127.0.0.1"),
    ] {
        let row = client
            .query_one(&format!("SHOW {setting}"), &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), want, "{setting}");
    }
    let backend = backend_pid(&client).await;
    client.batch_execute(SCHEMA).await.unwrap();
    client
        .batch_execute("INSERT INTO redquorum_fence VALUES ('kept', 12)")
        .await
        .unwrap();

    // Paused: the backends are frozen too, so a query gets no answer.
    db.pause().unwrap();
    assert!(db.is_paused());
    let frozen = tokio::time::timeout(
        Duration::from_millis(300),
        client.query_one("SELECT 1", &[]),
    )
    .await;
    assert!(frozen.is_err(), "a paused server answered");
    db.resume().unwrap();
    client.query_one("SELECT 1", &[]).await.unwrap();

    // Killed: the postmaster and its backends are gone; the connection breaks.
    db.kill().unwrap();
    assert!(!db.is_running());
    support::wait_until(
        Duration::from_secs(5),
        "the backend is gone",
        || async move { !running(backend as u32) },
    )
    .await;
    assert!(client.query_one("SELECT 1", &[]).await.is_err());

    // Restarted on the same port: crash recovery keeps the committed row.
    let restarted = std::time::Instant::now();
    db.restart().await.unwrap();
    eprintln!("restart after a kill: {:?}", restarted.elapsed());
    let again = connect(&db).await;
    assert_eq!(fence_of(&again, "kept").await, Some(12));
    let new_pid = db.pid().unwrap();
    drop(again);
    drop(db);
    assert!(!running(new_pid), "dropping the server ends its postmaster");
}

/// Whether process `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        !status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// A body that handles a failed statement's error itself and returns `Ok` leaves the
/// transaction aborted: PostgreSQL answers its `COMMIT` with `ROLLBACK`, without an error.
/// `fenced` must not report that as committed. Nor a body that ended the transaction
/// itself.
#[tokio::test]
async fn a_body_that_swallows_a_failed_statement_is_not_reported_committed() {
    let (_db, mut client) = start().await;
    let r = "accounts:9";
    let out = postgres::fenced(&mut client, r, token(5), &generous(), async |tx| {
        tx.execute("INSERT INTO counters VALUES ($1, 1)", &[&r])
            .await?;
        // "Insert, or carry on if it exists", with the 23505 handled in Rust.
        let duplicate = tx
            .execute("INSERT INTO counters VALUES ($1, 2)", &[&r])
            .await;
        assert_eq!(
            duplicate.unwrap_err().code(),
            Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
        );
        Ok::<&str, tokio_postgres::Error>("done")
    })
    .await;
    let aborted = out.unwrap_err();
    assert_eq!(aborted.kind(), FenceErrorKind::Body, "{aborted}");
    assert!(!aborted.is_retryable());
    assert!(
        aborted.to_string().contains("nothing committed"),
        "{aborted}"
    );
    assert_eq!(counter(&client, r).await, None);
    assert_eq!(fence_of(&client, r).await, None);

    // A body that commits or rolls back by itself: what it committed is not fenced as
    // the caller thinks, and `fenced` says so instead of reporting success.
    for end in ["COMMIT", "ROLLBACK"] {
        let out = postgres::fenced(
            &mut client,
            "accounts:10",
            token(5),
            &generous(),
            async |tx| {
                tx.batch_execute(end).await?;
                Ok::<(), tokio_postgres::Error>(())
            },
        )
        .await;
        let ended = out.unwrap_err();
        assert_eq!(ended.kind(), FenceErrorKind::Body, "{end}: {ended}");
        assert!(!ended.is_retryable());
        assert!(
            ended.to_string().contains("ended the transaction"),
            "{ended}"
        );
    }
    // The client is still usable and holds no transaction.
    increment(&mut client, r, 5, &generous()).await.unwrap();
}

/// Errors the client raises itself, without a SQLSTATE (no row for `query_one`, a wrong
/// parameter type, a wrong column type), are the body's bugs, not lost connections.
#[tokio::test]
async fn client_side_errors_in_the_body_are_not_connection_failures() {
    let (_db, mut client) = start().await;
    let r = "accounts:11";
    let none = postgres::fenced(&mut client, r, token(1), &generous(), async |tx| {
        tx.query_one("SELECT value FROM counters WHERE resource = 'none'", &[])
            .await
            .map(|row| row.get::<_, i64>(0))
    })
    .await
    .unwrap_err();
    let parameter = postgres::fenced(&mut client, r, token(1), &generous(), async |tx| {
        tx.execute("SELECT value FROM counters WHERE resource = $1", &[&5_i32])
            .await
    })
    .await
    .unwrap_err();
    let column = postgres::fenced(&mut client, r, token(1), &generous(), async |tx| {
        let row = tx.query_one("SELECT 1::int4", &[]).await?;
        row.try_get::<_, String>(0)
    })
    .await
    .unwrap_err();
    for e in [none, parameter, column] {
        assert_eq!(e.kind(), FenceErrorKind::Body, "{e}");
        assert!(!e.is_retryable(), "{e}");
        assert_eq!(e.code(), None);
    }
    assert!(!client.is_closed());
    assert_eq!(increment(&mut client, r, 1, &generous()).await.unwrap(), 1);
}

/// The whole holder stalls (a blocking call on the runtime's only thread) past its budget
/// after its last statement: the server ends the session before `COMMIT` is sent, though
/// the client has not noticed yet. Nothing was committed, and the error says so: cut by
/// the client's own bound on the budget, or, with a generous budget and the server's idle
/// timeout short, by the ended session (the client then closed).
#[tokio::test]
async fn a_stalled_holder_is_told_nothing_was_committed() {
    let (db, _client) = start().await;
    let observer = connect(&db).await;
    let short = Duration::from_millis(200);
    for (i, options) in [FenceOptions::new(short), generous().idle_timeout(short)]
        .into_iter()
        .enumerate()
    {
        let mut holder = connect(&db).await;
        let r = format!("accounts:12:{i}");
        let r = r.as_str();
        let out = postgres::fenced(&mut holder, r, token(2), &options, async |tx| {
            tx.execute("INSERT INTO counters VALUES ($1, 1)", &[&r])
                .await?;
            // The runtime's only thread blocks: the connection task cannot run either.
            std::thread::sleep(Duration::from_millis(1500));
            Ok::<(), tokio_postgres::Error>(())
        })
        .await;
        let e = out.unwrap_err();
        eprintln!("{options:?}: {e}");
        assert_ne!(e.kind(), FenceErrorKind::CommitUnknown, "{e}");
        if i == 0 {
            assert_eq!(e.kind(), FenceErrorKind::TimedOut, "{e}");
        } else {
            assert!(
                matches!(
                    e.kind(),
                    FenceErrorKind::TimedOut | FenceErrorKind::Connection
                ),
                "{e}"
            );
            assert!(e.to_string().contains("new connection"), "{e}");
        }
        assert!(e.is_retryable());
        assert!(e.to_string().contains("nothing"), "{e}");
        assert_eq!(counter(&observer, r).await, None);
    }
}

/// A `COMMIT` cut by the end of its session: the outcome is unknown to the client, and the
/// error carries the transaction's id, which settles it on another connection.
#[tokio::test]
async fn a_commit_of_unknown_outcome_carries_the_transaction_id() {
    let (db, mut holder) = start().await;
    let observer = connect(&db).await;
    let holder_pid = backend_pid(&holder).await;
    // A deferred constraint trigger runs at COMMIT, and sleeps there.
    observer
        .batch_execute(
            "CREATE TABLE slow (id int);
             CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON slow DEFERRABLE INITIALLY DEFERRED
                 FOR EACH ROW EXECUTE FUNCTION slow_commit();",
        )
        .await
        .unwrap();
    let committing = tokio::spawn(async move {
        postgres::fenced(&mut holder, "slow:1", token(3), &generous(), async |tx| {
            tx.execute("INSERT INTO slow VALUES (1)", &[]).await
        })
        .await
    });
    support::wait_until(
        Duration::from_secs(10),
        "COMMIT runs the slow trigger",
        || {
            let observer = &observer;
            async move {
                observer
                    .query_opt(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'",
                        &[&holder_pid],
                    )
                    .await
                    .unwrap()
                    .is_some()
            }
        },
    )
    .await;
    observer
        .execute("SELECT pg_terminate_backend($1)", &[&holder_pid])
        .await
        .unwrap();
    let e = committing.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), FenceErrorKind::CommitUnknown, "{e}");
    assert!(!e.is_retryable());
    let xid = e.xid().expect("the transaction's id");
    assert!(e.to_string().contains(&xid.to_string()), "{e}");
    // The client sees the connection close as soon as the backend is told to end; the
    // transaction is "in progress" until that backend has rolled it back and exited.
    support::wait_until(
        Duration::from_secs(10),
        "the terminated backend has exited",
        || {
            let observer = &observer;
            async move {
                observer
                    .query_opt(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = $1",
                        &[&holder_pid],
                    )
                    .await
                    .unwrap()
                    .is_none()
            }
        },
    )
    .await;
    let status: Option<String> = observer
        .query_one("SELECT pg_xact_status($1::text::xid8)", &[&xid.to_string()])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status.as_deref(), Some("aborted"));
    assert_eq!(fence_of(&observer, "slow:1").await, None);
}

/// The server stops answering (every process frozen, as behind a partition that drops
/// packets): `fenced` gives up once the budget has passed, not whenever TCP notices, and
/// nothing was committed.
#[tokio::test]
async fn fenced_is_bounded_by_its_budget_when_the_server_stops_answering() {
    let (mut db, mut client) = start().await;
    db.pause().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        increment(
            &mut client,
            "accounts:13",
            1,
            &FenceOptions::new(Duration::from_millis(300)),
        ),
    )
    .await;
    db.resume().unwrap();
    let e = out.expect("fenced returned within 10 s").unwrap_err();
    assert_eq!(e.kind(), FenceErrorKind::TimedOut, "{e}");
    assert!(e.is_retryable());
    // The dropped transaction was rolled back; the client still works.
    let observer = connect(&db).await;
    assert_eq!(counter(&observer, "accounts:13").await, None);
    assert_eq!(
        increment(&mut client, "accounts:13", 1, &generous())
            .await
            .unwrap(),
        1
    );
}

/// A body whose every idle gap is shorter than the budget, but whose whole run is longer:
/// it is cut at the budget, before `COMMIT`, and nothing is committed.
#[tokio::test]
async fn a_body_that_outlives_the_budget_commits_nothing() {
    let (_db, mut client) = start().await;
    let r = "accounts:14";
    let out = postgres::fenced(
        &mut client,
        r,
        token(1),
        &FenceOptions::new(Duration::from_millis(600)),
        async |tx| {
            tx.execute("INSERT INTO counters VALUES ($1, 1)", &[&r])
                .await?;
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                tx.execute("SELECT 1", &[]).await?;
            }
            Ok::<(), tokio_postgres::Error>(())
        },
    )
    .await;
    let e = out.unwrap_err();
    assert_eq!(e.kind(), FenceErrorKind::TimedOut, "{e}");
    assert_eq!(counter(&client, r).await, None);
}

/// The id of a running process's shared-memory segment, from line 7 of `postmaster.pid`.
fn shmid_of(db: &Postgres) -> i64 {
    let pid_file = std::fs::read_to_string(db.dir().join("data/postmaster.pid")).unwrap();
    let line = pid_file.lines().nth(6).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether System V shared-memory segment `shmid` exists.
fn segment_exists(shmid: i64) -> bool {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(shmid.to_string().as_str()))
}

/// A server dropped, or killed and dropped, leaves no shared-memory segment behind (the
/// machine has a few thousand).
#[tokio::test]
async fn a_dropped_server_leaves_no_shared_memory_segment() {
    let db = Postgres::start().await.unwrap();
    let shmid = shmid_of(&db);
    assert!(segment_exists(shmid));
    let dropping = std::time::Instant::now();
    drop(db);
    eprintln!("dropped in {:?}", dropping.elapsed());
    assert!(!segment_exists(shmid), "segment {shmid} left by a drop");

    let mut db = Postgres::start().await.unwrap();
    let client = connect(&db).await;
    let shmid = shmid_of(&db);
    db.kill().unwrap();
    drop(client);
    drop(db);
    assert!(!segment_exists(shmid), "segment {shmid} left by a kill");
}

/// The `initdb` processes that are children of this test process.
fn our_initdbs() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(')')?;
            let parent: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            (parent == me && name == "initdb").then_some(pid)
        })
        .collect()
}

/// `Postgres::start` dropped after each of its polls while `initdb` runs: `initdb` is
/// killed and reaped by the drop, not left running on its own.
#[tokio::test]
async fn a_start_dropped_during_initdb_leaves_no_initdb_running() {
    let mut seen = 0;
    for polls in [1, 2, 5, 10, 20] {
        let mut start = Box::pin(Postgres::start());
        let mut initdbs = Vec::new();
        for _ in 0..polls {
            if futures::poll!(start.as_mut()).is_ready() {
                break;
            }
            initdbs.extend(our_initdbs());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drop(start);
        seen += initdbs.len();
        for pid in initdbs {
            assert!(
                !running(pid),
                "initdb {pid} survived the drop after {polls} polls"
            );
        }
    }
    assert!(seen > 0, "no drop happened while initdb ran");
}
