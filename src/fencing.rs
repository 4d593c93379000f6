//! Fencing tokens (docs/design.md §8, I12).
//!
//! A lease can only promise exclusion while its holder stops at the deadline; a process
//! pause or a slow network can carry a write past it. A fencing token lets the *storage*
//! refuse such a late write: every acquisition gets a number larger than every earlier
//! acquisition's, and the storage applies a write only if its token is not older than the
//! newest it has seen.
//!
//! # How tokens are issued
//! Each master keeps a counter per resource (`redquorum:fence:<key>`, no TTL).
//! 1. The acquire round also reads the counter wherever it answers; `T = max + 1`.
//! 2. A write-back round, sent to every master, raises the counter to `T` only where the
//!    lock still holds this acquisition's value **and** the counter is below `T`. With a
//!    quorum of such writes the lease carries `T`; on conflicts `T` rises past the highest
//!    counter reported and the write-back repeats, while the lease's validity lasts.
//!
//! Both rounds spend the validity of the same lease: the deadline is still measured from
//! before the first acquire request. The cost is one extra round trip, paid only by
//! acquisitions that ask for a token.
//!
//! # Why tokens are unique and ordered
//! Two successful write-backs reach quorums that share a master. Each raised that master's
//! counter strictly, and counters never decrease, so the later one wrote a larger token:
//! tokens are unique, and a holder that finished before another began has the smaller one.
//! The argument uses neither the lock's exclusion nor any clock — tokens stay right
//! exactly when the lock's timing assumptions fail, which is their purpose. The strict
//! `c < T` test matters (a plain max-write lets two clients install the same `T`), and so
//! does the ownership test (a client that lost the lock between the rounds must not fence
//! out the rightful holder), which needs a fresh value per attempt.
//!
//! # Assumptions
//! Counters never decrease: only masters with `appendonly yes` and `appendfsync always`
//! (read when connecting) count in a write-back, and of those only the ones this client
//! never saw lose data (a new data epoch: `FLUSHALL`, a disk lost). Any two write-back
//! quorums then share a master whose counter only grew. A master that is not durable still
//! votes for the lock itself, but fencing refuses it at the first fenced acquire
//! ([`ErrorKind::Misconfigured`](crate::ErrorKind::Misconfigured) when too few masters
//! are fit, so that a rolling restart cannot leave a cluster that issued tokens unable to
//! issue more). Also assumed: `maxmemory-policy noeviction` and a fixed set of masters.
//! Fencing needs restart quarantine. Tokens stay below 2^53.
//!
//! A client sees a master lose data only if it knew the master before: a client that
//! first connects after a durable master was flushed or restored from an old copy cannot
//! tell it from a master that never held a counter. Such a master must not rejoin until
//! its counters are restored (or every counter it may have held is raised past the
//! others').
//!
//! Owns the token type and the storage-side check; the write-back rounds are the acquire
//! engine's (`engine/fence.rs`). Layer: a leaf (docs/design.md §10).

use std::fmt;

use redis::aio::ConnectionLike;

use crate::scripts;

/// A fencing token: larger for every later acquisition of the same resource.
///
/// Pass it with every write the critical section makes, and have the storage reject
/// writes whose token is older than the newest it has seen (see [`fenced_set`], or in SQL
/// `UPDATE … SET …, fence = $token WHERE id = $id AND fence <= $token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    pub(crate) fn new(token: u64) -> Self {
        Self(token)
    }

    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// A token read back from storage (tokens are plain numbers; only a lease issues new ones).
impl From<u64> for FencingToken {
    fn from(token: u64) -> Self {
        Self(token)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The storage-side check for a Redis-backed resource: sets `key` to `value` only if
/// `token` is not older than the newest token seen for `key` (kept in `<key>:fence`), in
/// one Lua script. Returns whether the write was applied.
///
/// This runs on the server that holds *your data*, not on the lock masters.
///
/// ```no_run
/// # async fn run(lease: redquorum::Lease, mut conn: redis::aio::MultiplexedConnection)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// let token = lease.fencing_token().expect("acquired with fencing on");
/// if !redquorum::fenced_set(&mut conn, "balance:42", "100", token).await? {
///     // A newer holder has written since: this holder's lease had run out.
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// The Redis error when the script cannot run.
///
/// # Cancel safety
/// Dropping the future may or may not leave the write applied, as with any Redis command.
pub async fn fenced_set<C>(
    conn: &mut C,
    key: &str,
    value: &str,
    token: FencingToken,
) -> redis::RedisResult<bool>
where
    C: ConnectionLike + Send,
{
    let applied: i64 = scripts::FENCED_SET
        .key(key)
        .key(format!("{key}:fence"))
        .arg(value)
        .arg(token.get())
        .invoke_async(conn)
        .await?;
    Ok(applied == 1)
}
