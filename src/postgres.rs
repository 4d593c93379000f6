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
//!    ([`FenceErrorKind::Conflict`]), which is neither a grant nor a refusal.
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
//! (`SET LOCAL lock_timeout` and `idle_in_transaction_session_timeout`), claims, runs the
//! body, and commits. The library never opens a connection.
//!
//! Layer: a leaf (docs/design.md §10); it uses only `fencing`.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::error::ShortName;
use crate::fencing::FencingToken;

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
    lock_timeout: Duration,
    idle_timeout: Duration,
    isolation: Option<IsolationLevel>,
}

impl FenceOptions {
    /// Options for a holder whose lease has `budget` left (`lease.remaining()`): the
    /// transaction waits at most that long for any lock (`SET LOCAL lock_timeout`),
    /// including the fence row a paused holder may hold, and the server ends its session
    /// if it sits idle inside the transaction that long
    /// (`SET LOCAL idle_in_transaction_session_timeout`), so a holder paused between two
    /// statements cannot keep the fence row locked forever.
    ///
    /// Timeouts are whole milliseconds, rounded up, at most `i32::MAX` ms. A zero budget
    /// (a lease that ran out) makes [`fenced`] fail with [`FenceErrorKind::TimedOut`]
    /// before it sends anything.
    #[must_use]
    pub fn new(budget: Duration) -> Self {
        Self {
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

/// What went wrong in a fenced transaction (see [`FenceError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FenceErrorKind {
    /// A newer token claimed the resource ([`FenceError::newest`]): this holder's lease
    /// is over and nothing was written. Not retryable: stop.
    Refused,
    /// The transaction could not be serialized with a concurrent one (SQLSTATE 40001, a
    /// claim that waited under `REPEATABLE READ` or `SERIALIZABLE`) or was chosen as a
    /// deadlock victim (40P01): it was rolled back, neither refused nor committed.
    /// Retryable: run it again with the same token while the lease lasts.
    Conflict,
    /// The lease's time ran out: the budget was zero, a lock wait passed `lock_timeout`
    /// (55P03), the server ended a session idle in the transaction (25P03), or a statement
    /// was cancelled (57014). Nothing was committed. Retryable with a new lease.
    TimedOut,
    /// The connection failed or was closed before `COMMIT` was sent: nothing was
    /// committed. Retryable on a new connection (the client is then unusable).
    Connection,
    /// The connection failed while `COMMIT` was on its way: the transaction may or may not
    /// have committed. Not retryable as it stands: find out from the data first, since a
    /// retry with the same token is granted and would write again.
    CommitUnknown,
    /// The body returned an error ([`FenceError::source`]); the transaction was rolled
    /// back. Not retryable as far as the library can tell (a body error that carries a
    /// `tokio_postgres::Error` is classified by it instead, as above or below).
    Body,
    /// Another database error: the fence table is missing (run [`SCHEMA`]), a permission,
    /// a constraint. Nothing was committed. Not retryable: the detail says what failed.
    Database,
    /// The resource name or token cannot be claimed, or the options cannot work: an empty
    /// name, one longer than [`MAX_RESOURCE_LEN`] bytes or holding a NUL byte, a token
    /// above `i64::MAX`, a zero timeout. Nothing was sent. Not retryable.
    InvalidInput,
}

/// An error from [`claim`] or [`fenced`]: what went wrong ([`kind`](Self::kind)), whether
/// trying again can succeed ([`is_retryable`](Self::is_retryable)), and the database's or
/// the body's error as the [`source`](StdError::source).
pub struct FenceError {
    kind: FenceErrorKind,
    resource: Box<str>,
    token: FencingToken,
    newest: Option<FencingToken>,
    detail: Option<Box<str>>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl FenceError {
    fn new(kind: FenceErrorKind, resource: &str, token: FencingToken) -> Self {
        Self {
            kind,
            resource: resource.into(),
            token,
            newest: None,
            detail: None,
            source: None,
        }
    }

    fn with_detail(mut self, detail: impl Into<Box<str>>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    fn with_source(mut self, source: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        self.source = Some(source);
        self
    }

    /// A database error met outside `COMMIT`.
    fn database(resource: &str, token: FencingToken, error: tokio_postgres::Error) -> Self {
        let missing_table = error.code() == Some(&SqlState::UNDEFINED_TABLE);
        let e = Self::new(classify(&error, false), resource, token);
        let e = if missing_table {
            e.with_detail("create the fence table first (redquorum::postgres::SCHEMA)")
        } else {
            e
        };
        e.with_source(Box::new(error))
    }

    /// What went wrong.
    pub fn kind(&self) -> FenceErrorKind {
        self.kind
    }

    /// Whether running the transaction again can succeed: after a
    /// [`Conflict`](FenceErrorKind::Conflict) (with the same token), a
    /// [`TimedOut`](FenceErrorKind::TimedOut) (with a new lease) or a
    /// [`Connection`](FenceErrorKind::Connection) failure (on a new connection). A refusal,
    /// a commit of unknown outcome, a body error, another database error and invalid
    /// input are not retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            FenceErrorKind::Conflict | FenceErrorKind::TimedOut | FenceErrorKind::Connection
        )
    }

    /// For a refusal, the newest token of the resource, larger than [`token`](Self::token).
    pub fn newest(&self) -> Option<FencingToken> {
        self.newest
    }

    /// The resource that was claimed.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The token of the claim.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The SQLSTATE of the database error behind it, if any (`"40001"`, `"42P01"`, …).
    pub fn code(&self) -> Option<&str> {
        postgres_error(self.source.as_deref()?)
            .and_then(tokio_postgres::Error::code)
            .map(SqlState::code)
    }

    /// The error's source, owned: the body's error for
    /// [`Body`](FenceErrorKind::Body), else the database's, if any.
    pub fn into_source(self) -> Option<Box<dyn StdError + Send + Sync + 'static>> {
        self.source
    }
}

impl fmt::Debug for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceError")
            .field("kind", &self.kind)
            .field("resource", &format_args!("{}", ShortName(&self.resource)))
            .field("token", &self.token)
            .field("newest", &self.newest)
            .field("detail", &self.detail)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (resource, token) = (ShortName(&self.resource), self.token);
        match self.kind {
            FenceErrorKind::Refused => match self.newest {
                Some(newest) => write!(
                    f,
                    "fencing token {token} refused for {resource}: token {newest} has claimed \
                     it, so this holder's lease is over; nothing was written, stop"
                ),
                None => write!(
                    f,
                    "fencing token {token} refused for {resource}: a newer token has claimed \
                     it; nothing was written, stop"
                ),
            },
            FenceErrorKind::Conflict => write!(
                f,
                "fenced transaction for {resource} rolled back by a concurrent one \
                 (serialization failure or deadlock): run it again with token {token} while \
                 the lease lasts"
            ),
            FenceErrorKind::TimedOut => write!(
                f,
                "fenced transaction for {resource} ran out of the lease's time; nothing was \
                 committed: acquire the lock again"
            ),
            FenceErrorKind::Connection => write!(
                f,
                "fenced transaction for {resource}: the connection failed before COMMIT; \
                 nothing was committed: run it again on a new connection"
            ),
            FenceErrorKind::CommitUnknown => write!(
                f,
                "fenced transaction for {resource}: the connection failed during COMMIT, so it \
                 may or may not have committed: check the data before running it again"
            ),
            FenceErrorKind::Body => write!(
                f,
                "fenced transaction for {resource} rolled back: its body failed"
            ),
            FenceErrorKind::Database => write!(
                f,
                "fenced transaction for {resource} failed in the database; nothing was committed"
            ),
            FenceErrorKind::InvalidInput => {
                write!(f, "cannot run a fenced transaction for {resource}")
            }
        }?;
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        if let Some(source) = &self.source {
            // The database's own message (`Display` of tokio_postgres::Error is terse).
            match postgres_error(source.as_ref()).and_then(tokio_postgres::Error::as_db_error) {
                Some(db) => write!(
                    f,
                    ": {} {}: {}",
                    db.severity(),
                    db.code().code(),
                    db.message()
                )?,
                None => write!(f, ": {source}")?,
            }
        }
        Ok(())
    }
}

impl StdError for FenceError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
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
/// and commits. Returns the body's value once committed.
///
/// The body gets the transaction: read and write through it, after the claim, so that the
/// reads feeding the writes are not older than a newer holder's write. Pass the lease's
/// token and `FenceOptions::new(lease.remaining())`.
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
///   is classified by that error as the kinds below.
/// - [`FenceErrorKind::Conflict`], [`FenceErrorKind::TimedOut`],
///   [`FenceErrorKind::Connection`] (retryable), [`FenceErrorKind::CommitUnknown`],
///   [`FenceErrorKind::Database`]: see each kind.
/// - [`FenceErrorKind::InvalidInput`]: nothing was sent.
///
/// # Cancel safety
/// Dropping the future before `COMMIT` was sent rolls the transaction back (the driver
/// sends `ROLLBACK` when the transaction is dropped), and `client` stays usable; dropped
/// while `COMMIT` is on its way, the transaction may have committed.
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
    let mut builder = client.build_transaction();
    if let Some(level) = options.isolation {
        builder = builder.isolation_level(level);
    }
    let mut tx = builder
        .start()
        .await
        .map_err(|e| FenceError::database(resource, token, e))?;
    // One round trip: the settings and the claim are sent together (the server runs them
    // in order, so the claim already waits under `lock_timeout`).
    let (set, claimed) = futures::join!(tx.batch_execute(&settings), claim(&tx, resource, token));
    set.map_err(|e| FenceError::database(resource, token, e))?;
    match claimed? {
        Claim::Granted => {}
        Claim::Refused { newest } => {
            // Dropping the transaction would roll back too; this reports nothing new.
            let _ = tx.rollback().await;
            let mut error = FenceError::new(FenceErrorKind::Refused, resource, token);
            error.newest = Some(newest);
            return Err(error);
        }
    }
    let value = match body(&mut tx).await {
        Ok(value) => value,
        Err(error) => {
            let _ = tx.rollback().await;
            let error: Box<dyn StdError + Send + Sync + 'static> = error.into();
            let kind = postgres_error(error.as_ref()).map_or(FenceErrorKind::Body, |e| {
                match classify(e, false) {
                    FenceErrorKind::Database => FenceErrorKind::Body,
                    kind => kind,
                }
            });
            return Err(FenceError::new(kind, resource, token).with_source(error));
        }
    };
    if tx.client().is_closed() {
        // The session ended before COMMIT could be sent (the server's idle timeout ends
        // it so): nothing was committed.
        let closed = tx.commit().await.err();
        let error = FenceError::new(FenceErrorKind::Connection, resource, token)
            .with_detail("the session had ended before COMMIT was sent");
        return Err(match closed {
            Some(e) => error.with_source(Box::new(e)),
            None => error,
        });
    }
    tx.commit().await.map_err(|e| {
        FenceError::new(classify(&e, true), resource, token).with_source(Box::new(e))
    })?;
    Ok(value)
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
    let millis = |what: &str, timeout: Duration| {
        if timeout.is_zero() {
            let kind = if options.lock_timeout.is_zero() && options.idle_timeout.is_zero() {
                // `FenceOptions::new(lease.remaining())` of a lease that ran out.
                FenceErrorKind::TimedOut
            } else {
                FenceErrorKind::InvalidInput
            };
            let detail = if kind == FenceErrorKind::TimedOut {
                "the budget is zero: the lease has no time left".to_owned()
            } else {
                format!("{what} is zero, which PostgreSQL reads as no limit: give a positive one")
            };
            return Err(FenceError::new(kind, resource, token).with_detail(detail));
        }
        Ok(timeout.as_nanos().div_ceil(1_000_000).min(MAX_TIMEOUT_MS))
    };
    let lock = millis("lock_timeout", options.lock_timeout)?;
    let idle = millis("the idle timeout", options.idle_timeout)?;
    Ok(format!(
        "SET LOCAL lock_timeout = {lock}; SET LOCAL idle_in_transaction_session_timeout = {idle}"
    ))
}

/// The kind of a database error; `during_commit` when it answered (or cut) a `COMMIT`.
fn classify(error: &tokio_postgres::Error, during_commit: bool) -> FenceErrorKind {
    let Some(code) = error.code() else {
        // No SQLSTATE: the connection failed or was closed.
        return if during_commit {
            FenceErrorKind::CommitUnknown
        } else {
            FenceErrorKind::Connection
        };
    };
    let fatal = error
        .as_db_error()
        .is_some_and(|db| matches!(db.severity(), "FATAL" | "PANIC"));
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        FenceErrorKind::Conflict
    } else if during_commit && fatal {
        // The server ended the session while the commit was being decided.
        FenceErrorKind::CommitUnknown
    } else if *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
        || *code == SqlState::QUERY_CANCELED
    {
        FenceErrorKind::TimedOut
    } else if fatal || code.code().starts_with("08") || code.code().starts_with("57P") {
        // The session ended (shutdown, crash, lost connection) before COMMIT.
        FenceErrorKind::Connection
    } else {
        FenceErrorKind::Database
    }
}

/// The first `tokio_postgres::Error` in `error`'s source chain, itself included.
fn postgres_error<'a>(
    error: &'a (dyn StdError + Send + Sync + 'static),
) -> Option<&'a tokio_postgres::Error> {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    // Bounded: source chains are short, but a cyclic one must not hang.
    for _ in 0..32 {
        let current = next?;
        if let Some(found) = current.downcast_ref::<tokio_postgres::Error>() {
            return Some(found);
        }
        next = current.source();
    }
    None
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
        let long = FenceOptions::new(Duration::from_secs(u64::MAX));
        let sql = timeouts("r", token, &long).ok().unwrap_or_default();
        assert!(
            sql.contains(&format!("lock_timeout = {}", i32::MAX)),
            "{sql}"
        );
    }
}
