//! Fencing checked in PostgreSQL, atomically with the writes (feature `postgres`;
//! docs/design.md §8, I13).
//!
//! A lease cannot stop a holder that pauses past its deadline (a GC pause, a stopped VM):
//! only the storage can, by refusing writes that carry an older [`FencingToken`] than one
//! it has seen. In PostgreSQL that check is one row per resource in a fence table,
//! **claimed first inside the writing transaction** with one upsert:
//!
//! ```sql
//! BEGIN;
//! INSERT INTO redquorum_fence AS f (resource, token) VALUES ($1, $2)
//!     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//!     WHERE f.token <= EXCLUDED.token
//!     RETURNING token;                 -- one row: granted; zero rows: refused, roll back
//! UPDATE accounts SET balance = balance - 10 WHERE id = 42;   -- the writes
//! COMMIT;
//! ```
//!
//! # Why it holds
//! 1. The upsert locks the resource's fence row, whether it inserts, updates or refuses
//!    (PostgreSQL locks every row an `ON CONFLICT DO UPDATE` considers), and the lock
//!    lasts until the transaction ends. Every writer of the resource claims first, so
//!    writers of one resource run one at a time, whatever tables they touch.
//! 2. A claim that waits behind another writer's lock re-reads the row once that writer
//!    commits: under `READ COMMITTED` it sees the newer token and is refused (zero rows);
//!    under `REPEATABLE READ` or `SERIALIZABLE` it fails with SQLSTATE 40001 instead
//!    ([`FenceErrorKind::Conflict`]), which is neither a grant nor a refusal. (A writer
//!    that committed a token not larger than the claim's lets the claim through under
//!    `READ COMMITTED`; one that rolled back leaves the row as it was, and the claim is
//!    judged against that, at every level.)
//! 3. A granted claim leaves the row at the claimer's token, so once a holder with token
//!    `t` committed, every later claim with a token below `t` is refused, and with it the
//!    writes of that transaction. Equal tokens are granted: one holder may write in
//!    several transactions.
//!
//! The claim must run in the transaction that writes: claimed in a transaction of its own,
//! its row lock is gone before the writes, and a newer holder can write in between. That is
//! why [`claim`] takes a [`Transaction`], never a bare client, and why [`fenced`] begins
//! the transaction itself. Reads that feed the writes belong after the claim: a value
//! read before it may be older than a newer holder's committed write.
//!
//! # What runs where
//! [`SCHEMA`] and [`CLAIM`] are plain SQL, usable from any driver. [`claim`] runs the
//! claim in a `tokio-postgres` transaction; [`fenced`] runs a whole fenced transaction on
//! the application's own client: it begins, bounds the transaction by the lease
//! (`SET LOCAL lock_timeout` and `idle_in_transaction_session_timeout` on the server, and
//! the budget on the client up to `COMMIT`), claims, runs the body, checks that the
//! transaction was not aborted by a failed statement, and commits. The library never opens
//! a connection. [`fenced`] needs PostgreSQL 13 or newer (`pg_current_xact_id`).
//!
//! Layer: a leaf (docs/design.md §10); it uses only `fencing` and the short names of
//! `error`. Its errors are in `error.rs`.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::fencing::FencingToken;

mod error;

pub use error::{FenceError, FenceErrorKind};
use error::{classify, postgres_error};

/// The fence table, one row per resource: `CREATE TABLE IF NOT EXISTS`, so it may run at
/// every start of the application (or live in its migrations).
///
/// Never delete or lower a row: a row that goes back lets an older token write again.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS redquorum_fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL CHECK (token >= 0)
)";

/// The claim, with the resource as `$1` (`text`) and the token as `$2` (`bigint`): one row
/// back means granted, zero rows refused. Run it first in the transaction that writes, and
/// roll back when it returns no row.
pub const CLAIM: &str = "INSERT INTO redquorum_fence AS f (resource, token) VALUES ($1, $2) \
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token \
RETURNING token";

/// The newest token of a resource, read after a refused claim (which locked the row).
const NEWEST: &str = "SELECT token FROM redquorum_fence WHERE resource = $1";

/// The fenced transaction's id, read with the claim (which has given it one).
const XID: &str = "SELECT pg_current_xact_id()::text";

/// The id of the transaction in progress, if any, read before `COMMIT`; fails with 25P02
/// in an aborted transaction.
const CURRENT_XID: &str = "SELECT pg_current_xact_id_if_assigned()::text";

/// The oldest PostgreSQL [`fenced`] works with (`pg_current_xact_id`).
const MIN_SERVER_VERSION: u32 = 13;

/// What a 25P03 means for the caller.
const SESSION_ENDED: &str = "the server ended the session idle in the transaction, so the \
client is closed: run it again on a new connection";

/// The longest resource name accepted, in bytes: 1024, as for the lock itself.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The longest `lock_timeout` and idle timeout PostgreSQL takes (`INT_MAX` ms); longer
/// budgets are cut to it.
const MAX_TIMEOUT_MS: u128 = i32::MAX as u128;

/// The result of a [`claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a refused claim means a newer holder has written: roll back and stop"]
pub enum Claim {
    /// The resource's fence row now holds this token, and this transaction holds its lock
    /// until it ends: write, then commit.
    Granted,
    /// A newer token has claimed the resource: this holder's lease is over. Roll back and
    /// stop; never retry with the same token.
    Refused {
        /// The token the fence row holds, larger than the one refused.
        newest: FencingToken,
    },
}

/// Settings of a [`fenced`] transaction.
///
/// # Default
/// There is none: the budget is the lease's, given to [`new`](Self::new). The isolation
/// level is the database's default (`READ COMMITTED` unless configured otherwise).
#[derive(Debug, Clone)]
pub struct FenceOptions {
    budget: Duration,
    lock_timeout: Duration,
    idle_timeout: Duration,
    isolation: Option<IsolationLevel>,
}

impl FenceOptions {
    /// Options for a holder whose lease has `budget` left (`lease.remaining()`). It bounds
    /// the transaction in three ways:
    /// - on the client, [`fenced`] gives up once `budget` has passed and `COMMIT` has not
    ///   been sent yet ([`FenceErrorKind::TimedOut`], nothing committed), whatever the
    ///   server does, even when it no longer answers;
    /// - on the server, the transaction waits at most that long for any lock
    ///   (`SET LOCAL lock_timeout`), including the fence row a paused holder may hold;
    /// - and the server ends its session if it sits idle inside the transaction that long
    ///   (`SET LOCAL idle_in_transaction_session_timeout`), so a holder paused between two
    ///   statements cannot keep the fence row locked forever.
    ///
    /// The `COMMIT` itself is not bounded (cut short, its outcome would be unknown); a
    /// server that vanishes during it is noticed by TCP: set keepalives or
    /// `tcp_user_timeout` on the client's connection.
    ///
    /// Timeouts are whole milliseconds, rounded up, at most `i32::MAX` ms. A zero budget
    /// (a lease that ran out) makes [`fenced`] fail with [`FenceErrorKind::TimedOut`]
    /// before it sends anything.
    #[must_use]
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            lock_timeout: budget,
            idle_timeout: budget,
            isolation: None,
        }
    }

    /// The longest wait for any lock, the fence row's included. Zero is refused by
    /// [`fenced`] (PostgreSQL would read it as "no limit").
    ///
    /// Defaults to the budget given to [`new`](Self::new).
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The longest the transaction may sit idle between statements before the server
    /// ends the session. Zero is refused by [`fenced`] (PostgreSQL would read it as
    /// "no limit").
    ///
    /// Defaults to the budget given to [`new`](Self::new).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The isolation level. Under `REPEATABLE READ` and `SERIALIZABLE` a claim that waited
    /// for a committing writer fails with [`FenceErrorKind::Conflict`] (SQLSTATE 40001)
    /// instead of being refused: run the transaction again, with the same token.
    ///
    /// Defaults to the database's default.
    #[must_use]
    pub fn isolation(mut self, level: IsolationLevel) -> Self {
        self.isolation = Some(level);
        self
    }
}

/// Claims `resource` for `token` in `tx` (runs [`CLAIM`]): call it first in the
/// transaction that writes, and commit only after [`Claim::Granted`].
///
/// A refused claim holds the fence row's lock too, until `tx` ends; roll back.
///
/// ```no_run
/// use redquorum::postgres::{self, Claim};
///
/// # async fn run(db: &mut tokio_postgres::Client, lease: redquorum::Lease)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// let token = lease.fencing_token().ok_or("acquire with fencing on")?;
/// let tx = db.transaction().await?;
/// match postgres::claim(&tx, "orders:42", token).await? {
///     Claim::Granted => {
///         tx.execute("UPDATE orders SET state = 'shipped' WHERE id = 42", &[]).await?;
///         tx.commit().await?;
///     }
///     Claim::Refused { newest } => {
///         // Token `newest` has claimed the order: this holder's lease is over.
///         eprintln!("refused: token {newest} wrote first");
///         tx.rollback().await?;
///     }
///     _ => tx.rollback().await?,
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`FenceErrorKind::InvalidInput`] for a name or token that cannot be claimed (nothing is
/// sent); otherwise the database's error, classified: [`FenceErrorKind::Conflict`] under
/// `REPEATABLE READ` or `SERIALIZABLE` when a concurrent writer committed first,
/// [`FenceErrorKind::TimedOut`] past `lock_timeout`, [`FenceErrorKind::Database`] when the
/// fence table is missing ([`SCHEMA`]).
///
/// # Cancel safety
/// Dropping the future leaves the claim sent or not; the transaction then holds the row's
/// lock or not, and rolling it back (dropping it) undoes either.
pub async fn claim(
    tx: &Transaction<'_>,
    resource: &str,
    token: FencingToken,
) -> Result<Claim, FenceError> {
    let raw = check_claim(resource, token)?;
    let granted = tx
        .query_typed(
            CLAIM,
            &[
                (&resource as &(dyn ToSql + Sync), Type::TEXT),
                (&raw, Type::INT8),
            ],
        )
        .await
        .map_err(|e| FenceError::database(resource, token, e))?;
    if !granted.is_empty() {
        return Ok(Claim::Granted);
    }
    // Zero rows: the row exists with a larger token, and the refused upsert locked it, so
    // this read sees the token that refused us (or a later one, under READ COMMITTED).
    let newest = tx
        .query_typed_opt(NEWEST, &[(&resource as &(dyn ToSql + Sync), Type::TEXT)])
        .await
        .map_err(|e| FenceError::database(resource, token, e))?;
    let newest: Option<i64> = match newest {
        Some(row) => row
            .try_get(0)
            .map_err(|e| FenceError::database(resource, token, e))?,
        None => None,
    };
    match newest.and_then(|n| u64::try_from(n).ok()) {
        Some(newest) => Ok(Claim::Refused {
            newest: FencingToken::from(newest),
        }),
        None => Err(
            FenceError::new(FenceErrorKind::Database, resource, token).with_detail(
                "the claim was refused but the resource's fence row is gone: fence rows must \
                 never be deleted",
            ),
        ),
    }
}

/// Runs `body` in a fenced transaction on `client`: begins (at the isolation level of
/// `options`), bounds it by the lease (`SET LOCAL lock_timeout` and
/// `idle_in_transaction_session_timeout`), claims `resource` for `token`, runs `body`,
/// checks that the transaction is still the one it began and not aborted, and commits.
/// Returns the body's value once committed.
///
/// The body gets the transaction: read and write through it, after the claim, so that the
/// reads feeding the writes are not older than a newer holder's write. Pass the lease's
/// token, the resource that token belongs to, and `FenceOptions::new(lease.remaining())`.
/// For a lease over several resources, [`fencing_token`](crate::LeaseHandle::fencing_token)
/// is the token of [`resource`](crate::LeaseHandle::resource) (the first in the lease's
/// sorted order); take each resource's own from
/// [`fencing_tokens`](crate::LeaseHandle::fencing_tokens).
///
/// **The body must return the errors of its statements** (`?`). A failed statement
/// aborts the whole transaction in PostgreSQL, and a body that goes on regardless gets
/// [`FenceErrorKind::Body`], nothing committed, rather than a success; to carry on past
/// an expected failure, run that statement in a savepoint (`tx.transaction()`). The body
/// must not end the transaction itself (`COMMIT`, `ROLLBACK`): that is reported as
/// [`FenceErrorKind::Body`] too, and what it committed stays committed.
///
/// **Time**: the whole call, up to sending `COMMIT`, is bounded by the budget of
/// `options` on the client (see [`FenceOptions::new`]); `COMMIT` itself is not. The
/// round trips: `BEGIN`; the settings, the claim and the read of the transaction's id
/// together; the body's; one check before `COMMIT`; `COMMIT`.
///
/// ```no_run
/// use redquorum::postgres::{self, FenceErrorKind, FenceOptions};
///
/// # async fn run(db: &mut tokio_postgres::Client, lease: redquorum::Lease)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// let token = lease.fencing_token().ok_or("acquire with fencing on")?;
/// let options = FenceOptions::new(lease.remaining());
/// let shipped = postgres::fenced(db, "orders:42", token, &options, async |tx| {
///     tx.execute("UPDATE orders SET state = 'shipped' WHERE id = 42", &[]).await
/// })
/// .await;
/// match shipped {
///     Ok(rows) => println!("{rows} row(s) updated"),
///     Err(e) if e.kind() == FenceErrorKind::Refused => eprintln!("too late: {e}"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// - [`FenceErrorKind::Refused`]: a newer token claimed the resource; rolled back.
/// - [`FenceErrorKind::Body`]: the body failed (its error is the source); rolled back.
///   A body error that carries a `tokio_postgres::Error` (itself, or in its source chain)
///   is classified by that error as the kinds below. Also a body that went on after a
///   failed statement (nothing committed), or that ended the transaction itself.
/// - [`FenceErrorKind::Conflict`], [`FenceErrorKind::TimedOut`],
///   [`FenceErrorKind::Connection`] (retryable), [`FenceErrorKind::CommitUnknown`],
///   [`FenceErrorKind::Database`]: see each kind.
/// - [`FenceErrorKind::InvalidInput`]: nothing was sent.
///
/// # Cancel safety
/// Dropping the future before `COMMIT` was sent rolls the transaction back (the driver
/// sends `ROLLBACK` when the transaction is dropped), and `client` stays usable; dropped
/// while `COMMIT` is on its way, the transaction may have committed. The budget's bound
/// drops the steps before `COMMIT` the same way.
pub async fn fenced<T, E, F>(
    client: &mut Client,
    resource: &str,
    token: FencingToken,
    options: &FenceOptions,
    body: F,
) -> Result<T, FenceError>
where
    F: AsyncFnOnce(&mut Transaction<'_>) -> Result<T, E>,
    E: Into<Box<dyn StdError + Send + Sync + 'static>>,
{
    check_claim(resource, token)?;
    let settings = timeouts(resource, token, options)?;
    // Before COMMIT is sent nothing is committed, so every step up to it may be abandoned
    // at the budget; COMMIT itself is never cut short (its outcome would be unknown).
    let deadline = Instant::now().checked_add(options.budget);
    let expired = || FenceError::expired(resource, token);
    let mut builder = client.build_transaction();
    if let Some(level) = options.isolation {
        builder = builder.isolation_level(level);
    }
    let mut tx = within(deadline, builder.start())
        .await
        .ok_or_else(expired)?
        .map_err(|e| FenceError::database(resource, token, e))?;
    // One round trip: the settings, the claim and the read of the transaction's id are
    // sent together (the server runs them in order, so the claim already waits under
    // `lock_timeout`).
    let (set, claimed, xid) = within(deadline, async {
        futures::join!(
            tx.batch_execute(&settings),
            claim(&tx, resource, token),
            tx.query_typed(XID, &[]),
        )
    })
    .await
    .ok_or_else(expired)?;
    set.map_err(|e| FenceError::database(resource, token, e))?;
    match claimed? {
        Claim::Granted => {}
        Claim::Refused { newest } => {
            // Dropping the transaction would roll back too; this reports nothing new.
            let _ = within(deadline, tx.rollback()).await;
            let mut error = FenceError::new(FenceErrorKind::Refused, resource, token);
            error.newest = Some(newest);
            return Err(error);
        }
    }
    let xid = read_xid(xid).map_err(|e| match e {
        Ok(e) => FenceError::database(resource, token, e),
        Err(detail) => {
            FenceError::new(FenceErrorKind::Database, resource, token).with_detail(detail)
        }
    })?;
    let value = match within(deadline, body(&mut tx)).await {
        Some(Ok(value)) => value,
        Some(Err(error)) => {
            let _ = within(deadline, tx.rollback()).await;
            return Err(body_failed(resource, token, error.into()));
        }
        // Dropping the transaction sends ROLLBACK.
        None => return Err(expired()),
    };
    still_open(&tx, xid, deadline, resource, token).await?;
    if tx.client().is_closed() {
        // The session ended before COMMIT could be sent: nothing was committed.
        let closed = tx.commit().await.err();
        let error = FenceError::new(FenceErrorKind::Connection, resource, token)
            .with_detail("the session had ended before COMMIT was sent");
        return Err(match closed {
            Some(e) => error.with_source(Box::new(e)),
            None => error,
        });
    }
    tx.commit().await.map_err(|e| {
        let kind = classify(&e, true);
        let mut error = FenceError::new(kind, resource, token);
        if kind == FenceErrorKind::CommitUnknown {
            error.xid = Some(xid);
        } else if e.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) {
            error = error.with_detail(SESSION_ENDED);
        }
        error.with_source(Box::new(e))
    })?;
    Ok(value)
}

/// The error of a body that failed: classified by the `tokio_postgres::Error` it carries, if
/// any, else [`FenceErrorKind::Body`]; the transaction was rolled back.
fn body_failed(
    resource: &str,
    token: FencingToken,
    error: Box<dyn StdError + Send + Sync + 'static>,
) -> FenceError {
    let database = postgres_error(error.as_ref());
    let kind = database.map_or(FenceErrorKind::Body, |e| match classify(e, false) {
        FenceErrorKind::Database => FenceErrorKind::Body,
        kind => kind,
    });
    let session_ended = database.and_then(tokio_postgres::Error::code)
        == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT);
    let failed = FenceError::new(kind, resource, token);
    let failed = if session_ended {
        failed.with_detail(SESSION_ENDED)
    } else if kind == FenceErrorKind::Body {
        failed.with_detail("rolled back, nothing committed")
    } else {
        failed
    };
    failed.with_source(error)
}

/// Whether the transaction `xid` the claim ran in is still open and not aborted, asked just
/// before COMMIT.
async fn still_open(
    tx: &Transaction<'_>,
    xid: u64,
    deadline: Option<Instant>,
    resource: &str,
    token: FencingToken,
) -> Result<(), FenceError> {
    // A body that went on after a failed statement leaves the transaction aborted, and
    // PostgreSQL answers COMMIT with ROLLBACK, not with an error; a body that ended the
    // transaction itself leaves none, or another. Ask before COMMIT: an aborted
    // transaction fails this with 25P02, another transaction has another id (or none).
    let current = within(deadline, tx.query_typed(CURRENT_XID, &[]))
        .await
        .ok_or_else(|| FenceError::expired(resource, token))?;
    let current = match current {
        Ok(rows) => rows
            .first()
            .and_then(|row| row.try_get::<_, Option<String>>(0).ok().flatten()),
        Err(e) if e.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) => {
            return Err(FenceError::new(FenceErrorKind::Body, resource, token)
                .with_detail(
                    "a statement failed and the body went on without returning its error, so \
                     the transaction was aborted by an earlier failed statement; nothing \
                     committed (a body must return the errors of its statements)",
                )
                .with_source(Box::new(e)));
        }
        Err(e) => return Err(FenceError::database(resource, token, e)),
    };
    if current.as_deref() != Some(xid.to_string().as_str()) {
        return Err(
            FenceError::new(FenceErrorKind::Body, resource, token).with_detail(
                "the body ended the transaction itself (COMMIT or ROLLBACK): what it \
                 committed stays committed, and what it ran after that was not fenced; a body \
                 must leave ending the transaction to fenced",
            ),
        );
    }
    Ok(())
}

/// `future`, abandoned (`None`) at `deadline`; never, without one.
async fn within<F: Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// The transaction's id from the answer to [`XID`]; `Err(Err(detail))` when it makes no
/// sense.
fn read_xid(
    answer: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
) -> Result<u64, Result<tokio_postgres::Error, String>> {
    let rows = match answer {
        Ok(rows) => rows,
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_FUNCTION) => {
            return Err(Err(format!(
                "the server has no pg_current_xact_id(): PostgreSQL {MIN_SERVER_VERSION} or \
                 newer is needed"
            )));
        }
        Err(e) => return Err(Ok(e)),
    };
    let text: Option<String> = match rows.first() {
        Some(row) => row.try_get(0).map_err(Ok)?,
        None => None,
    };
    text.as_deref().and_then(|t| t.parse().ok()).ok_or_else(|| {
        Err(format!(
            "pg_current_xact_id() answered {text:?}, not a number"
        ))
    })
}

/// The token as PostgreSQL's `bigint`, once the name and token are known to be claimable.
fn check_claim(resource: &str, token: FencingToken) -> Result<i64, FenceError> {
    let invalid = |detail: String| {
        FenceError::new(FenceErrorKind::InvalidInput, resource, token).with_detail(detail)
    };
    if resource.is_empty() {
        return Err(invalid(
            "the resource name is empty: name the resource".into(),
        ));
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(invalid(format!(
            "the resource name is {} bytes, over the limit of {MAX_RESOURCE_LEN}: hash it",
            resource.len()
        )));
    }
    if resource.contains('\0') {
        return Err(invalid(
            "the resource name holds a NUL byte, which PostgreSQL text cannot store".into(),
        ));
    }
    i64::try_from(token.get()).map_err(|_| {
        invalid(format!(
            "token {token} is above bigint's range ({}): it did not come from a lease",
            i64::MAX
        ))
    })
}

/// The `SET LOCAL` statements of `options`.
fn timeouts(
    resource: &str,
    token: FencingToken,
    options: &FenceOptions,
) -> Result<String, FenceError> {
    if options.budget.is_zero() {
        // `FenceOptions::new(lease.remaining())` of a lease that ran out.
        return Err(FenceError::new(FenceErrorKind::TimedOut, resource, token)
            .with_detail("the budget is zero: the lease has no time left"));
    }
    let millis = |what: &str, timeout: Duration| {
        if timeout.is_zero() {
            // A setting of the caller's, not the lease's time.
            return Err(
                FenceError::new(FenceErrorKind::InvalidInput, resource, token).with_detail(
                    format!(
                        "{what} is zero, which PostgreSQL reads as no limit: give a positive one"
                    ),
                ),
            );
        }
        Ok(timeout.as_nanos().div_ceil(1_000_000).min(MAX_TIMEOUT_MS))
    };
    let lock = millis("lock_timeout", options.lock_timeout)?;
    let idle = millis("the idle timeout", options.idle_timeout)?;
    Ok(format!(
        "SET LOCAL lock_timeout = {lock}; SET LOCAL idle_in_transaction_session_timeout = {idle}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_cannot_be_claimed() {
        let token = FencingToken::from(7);
        for bad in ["", "a\0b"] {
            let e = check_claim(bad, token).err().map(|e| e.kind());
            assert_eq!(e, Some(FenceErrorKind::InvalidInput), "{bad:?}");
        }
        let long = "x".repeat(MAX_RESOURCE_LEN + 1);
        let message = check_claim(&long, token).err().map(|e| e.to_string());
        // The message names the resource by its start and length, not in full.
        assert!(
            message
                .as_ref()
                .is_some_and(|m| m.len() < 300 && m.contains("1025 bytes")),
            "{message:?}"
        );
        assert!(check_claim(&long[1..], token).is_ok());
        let huge = FencingToken::from(u64::MAX);
        let e = check_claim("r", huge).err();
        assert_eq!(
            e.as_ref().map(FenceError::kind),
            Some(FenceErrorKind::InvalidInput)
        );
        assert!(!e.is_some_and(|e| e.is_retryable()));
        assert_eq!(
            check_claim("r", FencingToken::from(i64::MAX as u64)).ok(),
            Some(i64::MAX)
        );
    }

    #[test]
    fn timeouts_round_up_and_refuse_zero() {
        let token = FencingToken::from(1);
        let options = FenceOptions::new(Duration::from_micros(1500));
        let sql = timeouts("r", token, &options).ok();
        assert_eq!(
            sql.as_deref(),
            Some("SET LOCAL lock_timeout = 2; SET LOCAL idle_in_transaction_session_timeout = 2")
        );
        let expired = timeouts("r", token, &FenceOptions::new(Duration::ZERO)).err();
        assert_eq!(
            expired.as_ref().map(FenceError::kind),
            Some(FenceErrorKind::TimedOut)
        );
        let half = FenceOptions::new(Duration::from_secs(1)).lock_timeout(Duration::ZERO);
        let half = timeouts("r", token, &half).err();
        assert_eq!(half.map(|e| e.kind()), Some(FenceErrorKind::InvalidInput));
        // Both zero on a budget with time left: the caller's settings, not the lease's.
        let both = FenceOptions::new(Duration::from_secs(5))
            .lock_timeout(Duration::ZERO)
            .idle_timeout(Duration::ZERO);
        let both = timeouts("r", token, &both).err();
        assert_eq!(both.map(|e| e.kind()), Some(FenceErrorKind::InvalidInput));
        let long = FenceOptions::new(Duration::from_secs(u64::MAX));
        let sql = timeouts("r", token, &long).ok().unwrap_or_default();
        assert!(
            sql.contains(&format!("lock_timeout = {}", i32::MAX)),
            "{sql}"
        );
    }
}
