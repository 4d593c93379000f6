//! The errors of a fenced transaction: what went wrong ([`FenceErrorKind`]), the error
//! itself ([`FenceError`]) and how a database error is classified.

use std::error::Error as StdError;
use std::fmt;
use std::io;

use tokio_postgres::error::SqlState;

use crate::error::ShortName;
use crate::fencing::FencingToken;

use super::SESSION_ENDED;

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
    /// The lease's time ran out: the budget was zero, it passed before `COMMIT` was sent,
    /// a lock wait passed `lock_timeout` (55P03), the server ended a session idle in the
    /// transaction (25P03: the client is then closed, and a new connection is needed), or
    /// a statement was cancelled (57014). Nothing was committed. Retryable with a new
    /// lease.
    TimedOut,
    /// The connection failed or was closed before `COMMIT` was sent: nothing was
    /// committed. Retryable on a new connection (the client is then unusable).
    Connection,
    /// The connection failed while `COMMIT` was on its way: the transaction may or may not
    /// have committed. Not retryable as it stands: find out first, since a retry with the
    /// same token is granted and would write again. [`FenceError::xid`] is the
    /// transaction's id: on a new connection, `SELECT pg_xact_status($1::text::xid8)` with
    /// it as text says `committed`, `aborted` or `in progress` (the server has not yet
    /// finished with it, for instance a backend still rolling back: ask again).
    CommitUnknown,
    /// The body returned an error ([`FenceError::source`]), or it went on after a failed
    /// statement (whose error it did not return) so that the transaction was aborted, or
    /// it ended the transaction itself (`COMMIT` or `ROLLBACK`); the transaction was
    /// rolled back, or for a body that committed, what it wrote before is committed.
    /// Not retryable as far as the library can tell (a body error that carries a
    /// `tokio_postgres::Error` is classified by it instead, as above or below; errors the
    /// client raises itself, such as no row for `query_one`, stay the body's).
    Body,
    /// Another database error: the fence table is missing (run [`SCHEMA`](super::SCHEMA)), a permission,
    /// a constraint. Nothing was committed. Not retryable: the detail says what failed.
    Database,
    /// The resource name or token cannot be claimed, or the options cannot work: an empty
    /// name, one longer than [`MAX_RESOURCE_LEN`](super::MAX_RESOURCE_LEN) bytes or holding a NUL byte, a token
    /// above `i64::MAX`, a zero timeout. Nothing was sent. Not retryable.
    InvalidInput,
}

/// An error from [`claim`](super::claim) or [`fenced`](super::fenced): what went wrong ([`kind`](Self::kind)), whether
/// trying again can succeed ([`is_retryable`](Self::is_retryable)), and the database's or
/// the body's error as the [`source`](StdError::source).
pub struct FenceError {
    kind: FenceErrorKind,
    resource: Box<str>,
    token: FencingToken,
    pub(super) newest: Option<FencingToken>,
    pub(super) xid: Option<u64>,
    detail: Option<Box<str>>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl FenceError {
    pub(super) fn new(kind: FenceErrorKind, resource: &str, token: FencingToken) -> Self {
        Self {
            kind,
            resource: resource.into(),
            token,
            newest: None,
            xid: None,
            detail: None,
            source: None,
        }
    }

    pub(super) fn with_detail(mut self, detail: impl Into<Box<str>>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub(super) fn with_source(mut self, source: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        self.source = Some(source);
        self
    }

    /// A database error met outside `COMMIT`.
    pub(super) fn database(
        resource: &str,
        token: FencingToken,
        error: tokio_postgres::Error,
    ) -> Self {
        let kind = classify(&error, false);
        let e = Self::new(kind, resource, token);
        let e = if error.code() == Some(&SqlState::UNDEFINED_TABLE) {
            e.with_detail("create the fence table first (redquorum::postgres::SCHEMA)")
        } else if error.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) {
            e.with_detail(SESSION_ENDED)
        } else {
            e
        };
        e.with_source(Box::new(error))
    }

    /// The budget passed before `COMMIT` was sent.
    pub(super) fn expired(resource: &str, token: FencingToken) -> Self {
        Self::new(FenceErrorKind::TimedOut, resource, token).with_detail(
            "the budget passed before COMMIT was sent, so the transaction was abandoned and \
             rolled back",
        )
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

    /// For a [`CommitUnknown`](FenceErrorKind::CommitUnknown), the transaction's id
    /// (PostgreSQL's `xid8`, from `pg_current_xact_id()`): on a new connection,
    /// `SELECT pg_xact_status($1::text::xid8)` with it as text tells whether it committed.
    pub fn xid(&self) -> Option<u64> {
        self.xid
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
            .field("xid", &self.xid)
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
            FenceErrorKind::CommitUnknown => match self.xid {
                Some(xid) => write!(
                    f,
                    "fenced transaction {xid} for {resource}: the connection failed during \
                     COMMIT, so it may or may not have committed: before running it again, ask \
                     a new connection (SELECT pg_xact_status('{xid}'::xid8))"
                ),
                None => write!(
                    f,
                    "fenced transaction for {resource}: the connection failed during COMMIT, \
                     so it may or may not have committed: check the data before running it \
                     again"
                ),
            },
            FenceErrorKind::Body => write!(f, "fenced transaction for {resource}: its body failed"),
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

/// The kind of a database error; `during_commit` when it answered (or cut) a `COMMIT`.
pub(super) fn classify(error: &tokio_postgres::Error, during_commit: bool) -> FenceErrorKind {
    let Some(code) = error.code() else {
        return if during_commit {
            // Whatever cut the COMMIT's answer, the client cannot know how it ended.
            FenceErrorKind::CommitUnknown
        } else if connection_lost(error) {
            FenceErrorKind::Connection
        } else {
            // An error the client raised itself (no row for `query_one`, a parameter or a
            // column of the wrong type): the connection is fine, and trying again fails
            // the same way.
            FenceErrorKind::Database
        };
    };
    let fatal = error
        .as_db_error()
        .is_some_and(|db| matches!(db.severity(), "FATAL" | "PANIC"));
    if *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT {
        // Sent only by a session idle in its transaction: a COMMIT that meets it never ran.
        FenceErrorKind::TimedOut
    } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
    {
        FenceErrorKind::Conflict
    } else if during_commit && fatal {
        // The server ended the session while the commit was being decided.
        FenceErrorKind::CommitUnknown
    } else if *code == SqlState::LOCK_NOT_AVAILABLE || *code == SqlState::QUERY_CANCELED {
        FenceErrorKind::TimedOut
    } else if fatal || code.code().starts_with("08") || code.code().starts_with("57P") {
        // The session ended (shutdown, crash, lost connection) before COMMIT.
        FenceErrorKind::Connection
    } else {
        FenceErrorKind::Database
    }
}

/// Whether a database error without a SQLSTATE comes from a lost connection: the client
/// is closed, or the socket failed (an I/O error other than the bad data of a message that
/// could not be encoded or parsed).
pub(super) fn connection_lost(error: &tokio_postgres::Error) -> bool {
    error.is_closed()
        || error
            .source()
            .and_then(|source| source.downcast_ref::<io::Error>())
            .is_some_and(|io| {
                !matches!(
                    io.kind(),
                    io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData
                )
            })
}

/// The first `tokio_postgres::Error` in `error`'s source chain, itself included.
pub(super) fn postgres_error<'a>(
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
