//! Real `redis-server` processes on loopback, for tests, chaos runs, benches and examples.
//!
//! The crate uses nothing of `redquorum` and suits any Redis client's tests. Each
//! [`Server`] is one `redis-server` child process listening on `127.0.0.1` only (never any
//! other address), with its own temporary directory for data and its log file. A
//! [`Cluster`] is a set of independent masters, the shape a Redlock client talks to.
//!
//! What the testkit guarantees:
//!
//! 1. A started server has answered `PING` (after `AUTH` when a password is set) and has
//!    reported its own process id, so a test never talks to a stranger that happened to
//!    grab the same port.
//! 2. If the probed free port is taken between the probe and the server's `bind` (the race
//!    every "port 0 then reuse" harness has), startup is retried on a new port, at most
//!    five times.
//! 3. Every wait is bounded: startup gives up after 10 s with
//!    [`TestkitError::StartTimeout`], and every start failure carries the server's log.
//! 4. Faults are injected by PID with signals: [`Server::kill`] (`SIGKILL`),
//!    [`Server::pause`] (`SIGSTOP`) and [`Server::resume`] (`SIGCONT`).
//!    [`Server::restart`] brings a node back on the same port and unix socket, with or
//!    without its data, and [`Server::restart_from`] from a stale [`Snapshot`]. Faults
//!    through the server's own commands: [`Server::debug_sleep`] (`DEBUG SLEEP`),
//!    [`Server::client_pause`] (`CLIENT PAUSE`), [`Server::flushall`], and
//!    [`Server::jump_clock`], which emulates a wall-clock jump by shifting lock keys'
//!    expiry. A [`Proxy`] in front of a master delays, blackholes, resets or drops its
//!    traffic, switchable at runtime.
//! 5. With the `tls` feature, a server can speak TLS only (`ServerOptions::tls`,
//!    `Cluster::start_tls`), with certificates generated at test time
//!    (`TlsAuthority`); the testkit's own connections to it trust its CA.
//! 6. Dropping a [`Server`] (or a [`Cluster`]) kills and reaps its process, also while a
//!    test is panicking. A process that is killed abruptly (`SIGKILL` of the test binary)
//!    cannot run `Drop`; its servers then keep running until killed by hand.
//!
//! Use real time: the startup deadline runs on Tokio's clock, so do not start servers inside
//! `#[tokio::test(start_paused = true)]`.
//!
//! The binary is `ServerOptions::binary` if set, else the `REDIS_SERVER` environment
//! variable if set, else `redis-server` on `PATH`.
//!
//! # Example
//!
//! ```
//! use redquorum_testkit::{Cluster, Persistence, ServerOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Three independent masters, each with its own port and data directory.
//! let mut cluster = Cluster::start(3).await?;
//! assert_eq!(cluster.urls().len(), 3);
//!
//! // Freeze one master, then bring it back.
//! cluster.server_mut(0).pause()?;
//! cluster.server_mut(0).resume()?;
//!
//! // Crash another and restart it on the same port; its keys are gone.
//! cluster.server_mut(1).restart(false).await?;
//!
//! // A durable master keeps its keys across a `kill -9`.
//! let options = ServerOptions::new().persistence(Persistence::AofAlways);
//! let mut durable = redquorum_testkit::Server::start(&options).await?;
//! durable.restart(true).await?;
//! # Ok(())
//! # }
//! ```
//!
//! A crate of redquorum's workspace, beside the library (docs/design.md §10): it uses
//! nothing of the library, and the library uses it only in its tests.

mod faults;
mod postgres;
mod proxy;
mod server;
#[cfg(feature = "tls")]
mod tls;

pub use faults::{ClockJump, Snapshot, monotonic_ns};
pub use postgres::{Postgres, PostgresError};
pub use proxy::{Latency, Mode, Proxy, ProxyStats};
pub use server::{Persistence, Server, ServerOptions};
#[cfg(feature = "tls")]
pub use tls::TlsAuthority;

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// An error from starting or controlling a `redis-server` process.
///
/// Start failures ([`StartTimeout`](Self::StartTimeout), [`Exited`](Self::Exited)) carry the
/// server's log (its log file followed by anything it wrote to stdout or stderr), so a
/// failing test shows why the server did not come up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` binary was found.
    #[error(
        "redis-server not found (tried {tried}): install it with `apt-get install redis-server` \
         (as root), or set REDIS_SERVER to its path"
    )]
    NotInstalled {
        /// Where the testkit looked.
        tried: String,
    },
    /// A [`ServerOptions`] value cannot be used.
    #[error("invalid testkit option {option}: {reason}")]
    InvalidOption {
        /// The offending option or argument.
        option: String,
        /// Why it is refused and what to do instead.
        reason: String,
    },
    /// The binary exists but could not be executed.
    #[error("could not run {}: {source}: check that it is an executable redis-server", binary.display())]
    Spawn {
        /// The binary that was run.
        binary: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The server did not answer `PING` in time; it has been killed.
    #[error(
        "redis-server on 127.0.0.1:{port} did not answer PING within {waited:?}: the machine may \
         be overloaded (run fewer tests at once) or an extra argument stalled startup; its log:\n{log}"
    )]
    StartTimeout {
        /// The port it was started on.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// The server's log.
        log: String,
    },
    /// The server exited while the testkit waited for it to become ready.
    #[error(
        "redis-server on 127.0.0.1:{port} exited during startup ({status}): fix what its log \
         reports (often an extra argument it rejected); its log:\n{log}"
    )]
    Exited {
        /// The port it was started on.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The server's log.
        log: String,
    },
    /// The operation needs a running server, but it was killed or has exited.
    #[error("redis-server on 127.0.0.1:{port} is not running: call restart() first")]
    NotRunning {
        /// The server's port.
        port: u16,
    },
    /// The operation needs a server that is not paused.
    #[error("redis-server on 127.0.0.1:{port} is paused: call resume() first")]
    Paused {
        /// The server's port.
        port: u16,
    },
    /// A signal could not be delivered.
    #[error("could not send {signal} to redis-server pid {pid}: {source}")]
    Signal {
        /// The signal's name, such as `SIGSTOP`.
        signal: &'static str,
        /// The server's process id.
        pid: u32,
        /// The operating system's error.
        source: io::Error,
    },
    /// A fault command sent to a server failed or was not answered in time.
    #[error("{command} on redis-server 127.0.0.1:{port} failed: {reason}")]
    Command {
        /// The command, such as `DEBUG SLEEP`.
        command: &'static str,
        /// The server's port.
        port: u16,
        /// What went wrong.
        reason: String,
    },
    /// A file system or socket operation of the testkit itself failed.
    #[error("could not {action}: {source}")]
    Io {
        /// What the testkit was doing, such as "create a temporary directory".
        action: String,
        /// The operating system's error.
        source: io::Error,
    },
}

/// A set of independent `redis-server` masters on loopback.
///
/// Dropping the cluster kills every server in it.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> Result<(), redquorum_testkit::TestkitError> {
/// let mut cluster = redquorum_testkit::Cluster::start(5).await?;
/// cluster.server_mut(4).kill()?; // a minority is down
/// assert_eq!(cluster.urls().len(), 5);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Cluster {
    servers: Vec<Server>,
}

impl Cluster {
    /// Starts `n` masters with default options, concurrently.
    ///
    /// Returns once every master has answered `PING`. `n` may be zero.
    ///
    /// # Errors
    ///
    /// The first [`Server::start`] error; the masters already started are then killed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills every master it started.
    pub async fn start(n: usize) -> Result<Cluster, TestkitError> {
        Self::start_with(n, &ServerOptions::default()).await
    }

    /// Starts `n` masters with the given options, concurrently.
    ///
    /// Returns once every master has answered `PING`. Each master gets its own port and
    /// temporary directory.
    ///
    /// # Errors
    ///
    /// The first [`Server::start`] error; the masters already started are then killed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills every master it started.
    pub async fn start_with(n: usize, options: &ServerOptions) -> Result<Cluster, TestkitError> {
        // `try_join_all` drops the servers already started when one fails; their `Drop` kills them.
        let servers = futures::future::try_join_all((0..n).map(|_| Server::start(options))).await?;
        Ok(Cluster { servers })
    }

    /// Starts `n` masters that speak TLS only, concurrently, with certificates of a fresh
    /// [`TlsAuthority`] (shared by the masters) and no client certificate required. Their
    /// URLs are `rediss://127.0.0.1:PORT`; give the client the authority's CA
    /// ([`tls_ca_pem`](Self::tls_ca_pem) or [`tls_ca_file`](Self::tls_ca_file)). Feature
    /// `tls`.
    ///
    /// # Errors
    ///
    /// [`TlsAuthority::generate`]'s, then as [`start_with`](Self::start_with).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills every master it started.
    #[cfg(feature = "tls")]
    pub async fn start_tls(n: usize) -> Result<Cluster, TestkitError> {
        let options = ServerOptions::new().tls(TlsAuthority::generate()?);
        Self::start_with(n, &options).await
    }

    /// The certificate authority of its TLS masters, if they speak TLS (that of the first
    /// master; [`start_tls`](Self::start_tls) gives them all the same). Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&std::sync::Arc<TlsAuthority>> {
        self.servers.first()?.options().tls.as_ref()
    }

    /// The PEM of the CA its TLS masters' certificates chain to, if they speak TLS, for a
    /// client to trust. Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(&self) -> Option<&[u8]> {
        self.tls().map(|authority| authority.ca_pem())
    }

    /// The file of the CA its TLS masters' certificates chain to, if they speak TLS, for a
    /// client to trust. Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(&self) -> Option<PathBuf> {
        self.tls().map(|authority| authority.ca_file())
    }

    /// The TCP URL of every master, in order (see [`Server::url`]).
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    /// The number of masters.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether the cluster has no masters.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The master at index `i`.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn server(&self, i: usize) -> &Server {
        &self.servers[i]
    }

    /// The master at index `i`, mutably (to kill, pause or restart it).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn server_mut(&mut self, i: usize) -> &mut Server {
        &mut self.servers[i]
    }

    /// All masters, in order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// All masters, mutably, in order.
    pub fn servers_mut(&mut self) -> &mut [Server] {
        &mut self.servers
    }

    /// The masters as a vector, to own them individually.
    pub fn into_servers(self) -> Vec<Server> {
        self.servers
    }
}
