//! Faults injected through a server's own commands, stale snapshots, and the shared
//! monotonic clock that histories from several processes are stamped with.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tempfile::TempDir;
use tokio::time::timeout;

use super::TestkitError;
use super::server::{Server, io_error};

/// How long a fault command may take to be answered, on top of any stall it asks for.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// The snapshot file Redis writes on `SAVE` and loads at startup.
const DUMP_FILE: &str = "dump.rdb";

/// Rewrites the expiry of every key matching `ARGV[1]` by `ARGV[2]` milliseconds
/// (negative: earlier), keeping at least 1 ms; keys without an expiry are left alone.
const SHIFT_EXPIRY: &str = r"
local shifted = 0
local delta = tonumber(ARGV[2])
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
  local left = redis.call('PTTL', key)
  if left > 0 then
    local new = left + delta
    if new < 1 then new = 1 end
    redis.call('PEXPIRE', key, new)
    shifted = shifted + 1
  end
end
return shifted
";

/// A jump of a master's wall clock, as lock keys see it.
///
/// Redis stores expiry as an absolute wall-clock time, so a clock that jumps forward by Δ
/// expires every key Δ early, exactly as if every key's remaining time had shrunk by Δ;
/// a backward jump keeps every key Δ longer. [`Server::jump_clock`] applies that rewrite,
/// because a real clock jump cannot be injected into a single process on a shared machine
/// (libfaketime does not load into Debian's `redis-server`, and time namespaces do not
/// cover the wall clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockJump {
    /// The clock jumps ahead: keys expire this much earlier (at least 1 ms from now).
    Forward(Duration),
    /// The clock jumps back: keys live this much longer.
    Backward(Duration),
}

/// A copy of a server's `dump.rdb`, taken by [`Server::snapshot`], to restart it from a
/// stale state with [`Server::restart_from`]. The copy lives in its own temporary
/// directory, removed when the snapshot is dropped.
#[derive(Debug)]
pub struct Snapshot {
    dir: TempDir,
}

impl Snapshot {
    /// The snapshot file.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(DUMP_FILE)
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`.
///
/// The clock is system-wide on Linux: readings taken in different processes on the same
/// machine compare exactly, so histories written by separate client processes can be
/// merged and ordered. (`std::time::Instant` reads the same clock but cannot be
/// serialised.)
///
/// # Errors
/// [`TestkitError::Io`] if the clock cannot be read.
pub fn monotonic_ns() -> Result<u64, TestkitError> {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).map_err(|errno| TestkitError::Io {
        action: "read CLOCK_MONOTONIC".into(),
        source: errno.into(),
    })?;
    let secs = u64::try_from(now.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

impl Server {
    /// Stalls the whole server for `duration` with `DEBUG SLEEP`: it answers nothing and
    /// expires nothing meanwhile, as when it is stopped, but stays a running process.
    /// Returns when the server answers again.
    ///
    /// # Errors
    /// [`TestkitError::NotRunning`] or [`TestkitError::Paused`] if it cannot answer;
    /// [`TestkitError::Command`] if the command fails or is not answered in time.
    ///
    /// # Cancel safety
    /// Dropping the future does not shorten the stall: the server has the command.
    pub async fn debug_sleep(&self, duration: Duration) -> Result<(), TestkitError> {
        let seconds = format!("{:.3}", duration.as_secs_f64());
        let mut cmd = redis::cmd("DEBUG");
        cmd.arg("SLEEP").arg(seconds);
        self.command::<()>("DEBUG SLEEP", cmd, duration).await
    }

    /// Suspends all its clients for `duration` with `CLIENT PAUSE ms ALL`. Since Redis
    /// 3.2.10 no key expires or is evicted during the pause; keys whose time ran out
    /// meanwhile are gone right after it. Returns at once.
    ///
    /// # Errors
    /// As for [`debug_sleep`](Self::debug_sleep).
    ///
    /// # Cancel safety
    /// Cancel safe once sent; the pause then runs its course.
    pub async fn client_pause(&self, duration: Duration) -> Result<(), TestkitError> {
        let millis = u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("PAUSE").arg(millis).arg("ALL");
        self.command::<()>("CLIENT PAUSE", cmd, Duration::ZERO)
            .await
    }

    /// Deletes every key with `FLUSHALL`: key loss without a restart.
    ///
    /// # Errors
    /// As for [`debug_sleep`](Self::debug_sleep).
    ///
    /// # Cancel safety
    /// Cancel safe: the keys are deleted or not.
    pub async fn flushall(&self) -> Result<(), TestkitError> {
        self.command::<()>("FLUSHALL", redis::cmd("FLUSHALL"), Duration::ZERO)
            .await
    }

    /// Emulates a jump of this server's wall clock for every key matching `pattern` (a
    /// `KEYS` glob such as `"lock:*"`), in one atomic script; returns how many keys with an
    /// expiry were rewritten. See [`ClockJump`] for why this is faithful for lock keys.
    ///
    /// # Errors
    /// As for [`debug_sleep`](Self::debug_sleep).
    ///
    /// # Cancel safety
    /// Cancel safe: the script runs whole or not at all.
    pub async fn jump_clock(&self, pattern: &str, jump: ClockJump) -> Result<usize, TestkitError> {
        let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let delta = match jump {
            ClockJump::Forward(d) => -millis(d),
            ClockJump::Backward(d) => millis(d),
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SHIFT_EXPIRY).arg(0).arg(pattern).arg(delta);
        self.command::<usize>("clock jump script", cmd, Duration::ZERO)
            .await
    }

    /// Writes a snapshot with `SAVE` and keeps a copy of it, for
    /// [`restart_from`](Self::restart_from): the "stale restore" fault, where a master
    /// comes back with an old state (an `everysec` fsync or RDB backup that lost the last
    /// writes).
    ///
    /// # Errors
    /// As for [`debug_sleep`](Self::debug_sleep), plus [`TestkitError::Io`] if the copy
    /// fails.
    ///
    /// # Cancel safety
    /// Dropping the future may leave a `dump.rdb` in its directory, which only a
    /// `restart(true)` would load.
    pub async fn snapshot(&self) -> Result<Snapshot, TestkitError> {
        self.command::<()>("SAVE", redis::cmd("SAVE"), Duration::ZERO)
            .await?;
        let dir = tempfile::Builder::new()
            .prefix("redquorum-snapshot-")
            .tempdir()
            .map_err(io_error("create a temporary directory for a snapshot"))?;
        let snapshot = Snapshot { dir };
        copy(&self.dir().join(DUMP_FILE), &snapshot.path())?;
        Ok(snapshot)
    }

    /// Kills it with `SIGKILL`, replaces its data with `snapshot` (only: any append-only
    /// files are removed), and starts it again on the same port, waiting until it answers.
    /// Every key written after the snapshot is lost; keys in the snapshot come back with
    /// their original absolute expiry times.
    ///
    /// # Errors
    /// As for [`restart`](Self::restart), plus [`TestkitError::Io`] if the snapshot cannot
    /// be copied into place.
    ///
    /// # Cancel safety
    /// As for [`restart`](Self::restart).
    pub async fn restart_from(&mut self, snapshot: &Snapshot) -> Result<(), TestkitError> {
        self.kill()?;
        self.wipe_data()?;
        copy(&snapshot.path(), &self.dir().join(DUMP_FILE))?;
        self.restart(true).await
    }

    /// Runs one command on a fresh connection, allowing `stall` on top of the usual
    /// answer time.
    async fn command<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        cmd: redis::Cmd,
        stall: Duration,
    ) -> Result<T, TestkitError> {
        if self.is_paused() {
            return Err(TestkitError::Paused { port: self.port() });
        }
        if !self.is_running() {
            return Err(TestkitError::NotRunning { port: self.port() });
        }
        let failed = |reason: String| TestkitError::Command {
            command: what,
            port: self.port(),
            reason,
        };
        let limit = COMMAND_TIMEOUT.saturating_add(stall);
        let run = async {
            let mut conn = connect(self.client()?).await?;
            cmd.query_async::<T>(&mut conn).await
        };
        match timeout(limit, run).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(err)) => Err(failed(err.to_string())),
            Err(_) => Err(failed(format!("no answer within {limit:?}"))),
        }
    }
}

/// A connection without the client library's default response timeout: the caller bounds
/// every command itself.
async fn connect(client: redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(COMMAND_TIMEOUT))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

fn copy(from: &Path, to: &Path) -> Result<(), TestkitError> {
    fs::copy(from, to).map(|_| ()).map_err(io_error(format!(
        "copy {} to {}",
        from.display(),
        to.display()
    )))
}
