//! One `redis-server` child process on `127.0.0.1`, its options, and its readiness probe.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use redis::AsyncConnectionConfig;
use tempfile::TempDir;
use tokio::time::{Instant, sleep, timeout};

use super::TestkitError;
#[cfg(feature = "tls")]
use super::TlsAuthority;

/// The environment variable naming the `redis-server` binary.
const BINARY_ENV: &str = "REDIS_SERVER";
/// The binary's name on `PATH`.
const BINARY_NAME: &str = "redis-server";
/// The server's log file, inside its directory.
const LOG_FILE: &str = "redis.log";
/// Where the server's stdout and stderr go (configuration errors are printed there, not logged).
const STDIO_FILE: &str = "redis.stdio";
/// The server's unix socket, inside its directory.
const SOCKET_FILE: &str = "redis.sock";
/// How long startup may take before it is abandoned.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// The longest a single readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Upper bound on readiness probes, on top of [`START_TIMEOUT`].
const MAX_PROBES: u32 = 2_000;
/// Upper bound on liveness checks during one probe, on top of [`PROBE_TIMEOUT`].
const MAX_PROBE_POLLS: u32 = (PROBE_TIMEOUT.as_millis() / PROBE_INTERVAL.as_millis()) as u32 + 1;
/// Startup attempts on fresh ports when the probed port was taken.
const FRESH_PORT_ATTEMPTS: u32 = 5;
/// Startup attempts on the same port for a restart (the old socket may linger).
const SAME_PORT_ATTEMPTS: u32 = 20;
/// The pause between two startup attempts on the same port.
const SAME_PORT_DELAY: Duration = Duration::from_millis(50);
/// The most bytes of each log file quoted in an error message.
const MAX_QUOTED_LOG: usize = 16 * 1024;
/// What `redis-server` logs when its port is taken.
const PORT_TAKEN: &str = "Address already in use";

/// Arguments the testkit sets itself; overriding them would break loopback-only listening,
/// readiness probing or cleanup.
const MANAGED_ARGS: &[(&str, &str)] = &[
    ("--port", "the testkit picks a free port"),
    ("--bind", "servers listen on 127.0.0.1 only"),
    ("--dir", "each server has its own temporary directory"),
    (
        "--logfile",
        "the log is kept in the server's directory for error messages",
    ),
    ("--daemonize", "the testkit must own the process to kill it"),
    ("--unixsocket", "use ServerOptions::unix_socket"),
    ("--requirepass", "use ServerOptions::password"),
    ("--appendonly", "use ServerOptions::persistence"),
    ("--appendfsync", "use ServerOptions::persistence"),
    ("--tls-port", "use ServerOptions::tls"),
    ("--tls-cert-file", "use ServerOptions::tls"),
    ("--tls-key-file", "use ServerOptions::tls"),
    ("--tls-ca-cert-file", "use ServerOptions::tls"),
    ("--tls-auth-clients", "use ServerOptions::tls_auth_clients"),
];

/// How a server persists its data, which decides what survives [`Server::restart`]`(true)`.
///
/// # Default
///
/// [`Persistence::None`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// No persistence: `--save "" --appendonly no`. A restart loses every key, unless a
    /// `dump.rdb` was written explicitly (`SAVE`) and the data is kept.
    #[default]
    None,
    /// Append-only file synced on every write: `--appendonly yes --appendfsync always`.
    /// A `kill -9` loses no acknowledged write.
    AofAlways,
    /// Append-only file synced once a second: `--appendonly yes --appendfsync everysec`.
    /// A `kill -9` may lose about the last second of writes.
    AofEverySec,
}

/// How to start a [`Server`].
///
/// # Default
///
/// - `persistence`: [`Persistence::None`]
/// - `password`: none (no `AUTH` needed)
/// - `unix_socket`: off
/// - `extra_args`: none
/// - `binary`: discovered (`REDIS_SERVER`, then `PATH`)
/// - `tls`: off (feature `tls`); `tls_auth_clients`: off
///
/// # Example
///
/// ```
/// use redquorum_testkit::{Persistence, ServerOptions};
///
/// let options = ServerOptions::new()
///     .persistence(Persistence::AofEverySec)
///     .password("s3cret")
///     .unix_socket(true)
///     .arg("--maxmemory")
///     .arg("16mb");
/// assert_eq!(options.extra_args, ["--maxmemory", "16mb"]);
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ServerOptions {
    /// How the server persists data.
    pub persistence: Persistence,
    /// The password required by `AUTH` (`--requirepass`), if any.
    pub password: Option<String>,
    /// Whether the server also listens on a unix socket in its directory.
    pub unix_socket: bool,
    /// Further `redis-server` arguments, appended last (so they override the testkit's
    /// `--save ""`, for instance). Arguments the testkit manages itself, such as `--bind`
    /// and `--port`, are refused with [`TestkitError::InvalidOption`].
    pub extra_args: Vec<String>,
    /// The `redis-server` binary to run, overriding discovery.
    pub binary: Option<PathBuf>,
    /// The certificates of a server that speaks TLS only (feature `tls`).
    #[cfg(feature = "tls")]
    pub tls: Option<std::sync::Arc<TlsAuthority>>,
    /// Whether a TLS server requires a client certificate signed by its authority
    /// (`--tls-auth-clients yes`; feature `tls`).
    #[cfg(feature = "tls")]
    pub tls_auth_clients: bool,
}

impl std::fmt::Debug for ServerOptions {
    // Hand-written: the password is shown as `***`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            persistence,
            password,
            unix_socket,
            extra_args,
            binary,
            #[cfg(feature = "tls")]
            tls,
            #[cfg(feature = "tls")]
            tls_auth_clients,
        } = self;
        let mut f = f.debug_struct("ServerOptions");
        f.field("persistence", persistence)
            .field("password", &password.as_ref().map(|_| "***"))
            .field("unix_socket", unix_socket)
            .field("extra_args", extra_args)
            .field("binary", binary);
        #[cfg(feature = "tls")]
        f.field("tls", tls)
            .field("tls_auth_clients", tls_auth_clients);
        f.finish()
    }
}

impl ServerOptions {
    /// Options with every default (see the type's docs).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets how the server persists data.
    ///
    /// Defaults to [`Persistence::None`].
    #[must_use]
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Requires `AUTH` with this password (`--requirepass`). Must not be empty.
    ///
    /// Defaults to no password. URLs from [`Server::url`] and [`Server::unix_url`] include
    /// the password, percent-encoded.
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Also listens on a unix socket in the server's directory (`--unixsocket`, mode 700).
    ///
    /// Defaults to off.
    #[must_use]
    pub fn unix_socket(mut self, on: bool) -> Self {
        self.unix_socket = on;
        self
    }

    /// Appends one `redis-server` argument, such as `"--maxmemory"` then `"1mb"`.
    ///
    /// Defaults to no extra arguments.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Runs this binary instead of discovering one.
    ///
    /// Defaults to the `REDIS_SERVER` environment variable if set, else `redis-server` on
    /// `PATH`.
    #[must_use]
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Speaks TLS only, with `authority`'s server certificate (for `127.0.0.1` and
    /// `localhost`): `--port 0 --tls-port PORT` and the certificate files. [`Server::url`]
    /// is then `rediss://127.0.0.1:PORT`, and the testkit's own connections to the server
    /// trust the authority. Feature `tls`.
    ///
    /// Defaults to off.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, authority: std::sync::Arc<TlsAuthority>) -> Self {
        self.tls = Some(authority);
        self
    }

    /// With [`tls`](Self::tls), requires clients to present a certificate signed by the
    /// authority (`--tls-auth-clients yes`); else none is asked for. Feature `tls`.
    ///
    /// Defaults to off.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls_auth_clients(mut self, on: bool) -> Self {
        self.tls_auth_clients = on;
        self
    }

    /// Refuses options the testkit cannot honour.
    fn validate(&self) -> Result<(), TestkitError> {
        if self.password.as_deref() == Some("") {
            return Err(TestkitError::InvalidOption {
                option: "password".into(),
                reason: "an empty password disables AUTH: pass a non-empty one, or none".into(),
            });
        }
        for arg in &self.extra_args {
            let name = arg.split_whitespace().next().unwrap_or_default();
            if let Some((managed, why)) = MANAGED_ARGS
                .iter()
                .find(|(managed, _)| name.eq_ignore_ascii_case(managed))
            {
                return Err(TestkitError::InvalidOption {
                    option: format!("extra argument `{managed}`"),
                    reason: format!("the testkit sets it itself ({why}): remove it"),
                });
            }
        }
        Ok(())
    }
}

/// One `redis-server` process listening on `127.0.0.1`, killed when dropped.
///
/// Its data and log live in a temporary directory ([`Server::dir`]) removed on drop.
///
/// # Example
///
/// ```no_run
/// use redquorum_testkit::{Server, ServerOptions};
///
/// # async fn demo() -> Result<(), redquorum_testkit::TestkitError> {
/// let mut server = Server::start(&ServerOptions::new()).await?;
/// assert!(server.url().starts_with("redis://127.0.0.1:"));
/// server.pause()?; // SIGSTOP: commands now hang
/// server.resume()?; // SIGCONT
/// server.kill()?; // SIGKILL: connections are refused
/// server.restart(false).await?; // same port, empty data
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Server {
    /// The options it was started with.
    options: ServerOptions,
    /// The binary it runs.
    binary: PathBuf,
    /// Its TCP port on 127.0.0.1; kept across restarts.
    port: u16,
    /// Its data directory, log and unix socket.
    dir: TempDir,
    /// The unreaped child, or `None` once killed or reaped. Only reaping through this handle
    /// frees the PID, so a signal sent while it is `Some` cannot reach a recycled PID.
    child: Mutex<Option<Child>>,
    /// Whether we stopped it with `SIGSTOP`.
    paused: bool,
}

impl Server {
    /// Starts a `redis-server` on a free port of `127.0.0.1` and waits until it answers
    /// `PING`.
    ///
    /// Must run inside a Tokio runtime with time and I/O enabled, on real (not paused) time.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::InvalidOption`] if the options set an argument the testkit manages.
    /// - [`TestkitError::NotInstalled`] if no binary is found.
    /// - [`TestkitError::Spawn`] if it cannot be executed.
    /// - [`TestkitError::Exited`] if it exits during startup (after up to five attempts on
    ///   fresh ports when the port was taken), with its log.
    /// - [`TestkitError::StartTimeout`] if it does not answer within 10 s, with its log.
    /// - [`TestkitError::Io`] if the temporary directory or port probe fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the process it started.
    pub async fn start(options: &ServerOptions) -> Result<Server, TestkitError> {
        options.validate()?;
        let binary = find_binary(options.binary.as_deref())?;
        let dir = tempfile::Builder::new()
            .prefix("redquorum-")
            .tempdir()
            .map_err(io_error(
                "create a temporary directory for redis-server (check TMPDIR)",
            ))?;
        let mut server = Server {
            options: options.clone(),
            binary,
            port: free_port()?,
            dir,
            child: Mutex::new(None),
            paused: false,
        };
        server
            .launch_with_retries(FRESH_PORT_ATTEMPTS, true)
            .await?;
        Ok(server)
    }

    /// Its TCP port on `127.0.0.1`, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, or `None` when it was killed or has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.lock_child();
        let child = slot.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            Ok(Some(_)) => {
                *slot = None;
                None
            }
            // The state is unknown; the child is still ours and unreaped, so its PID is valid.
            Err(_) => Some(child.id()),
        }
    }

    /// Its TCP URL: `redis://127.0.0.1:PORT`, or `redis://default:PASSWORD@127.0.0.1:PORT`
    /// (password percent-encoded) when a password is set; `rediss://…` when it speaks TLS
    /// (`ServerOptions::tls`).
    pub fn url(&self) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        match &self.options.password {
            Some(password) => format!(
                "{scheme}://default:{}@127.0.0.1:{}",
                percent_encode(password, COMPONENT),
                self.port
            ),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// Whether it speaks TLS only (`ServerOptions::tls`).
    #[cfg(feature = "tls")]
    pub fn is_tls(&self) -> bool {
        self.options.tls.is_some()
    }

    /// Whether it speaks TLS only: never without the `tls` feature.
    #[cfg(not(feature = "tls"))]
    pub fn is_tls(&self) -> bool {
        false
    }

    /// A redis client for its [`url`](Self::url): over TLS, trusting its authority and
    /// presenting the authority's client certificate, when it speaks TLS. For a test's own
    /// connections to the server (the testkit's fault commands and readiness probes use it).
    ///
    /// # Errors
    ///
    /// The redis client's, if the URL or the certificates cannot be used.
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(authority) = &self.options.tls {
            return authority.client(&self.url());
        }
        redis::Client::open(self.url())
    }

    /// Its unix socket URL when [`ServerOptions::unix_socket`] is on:
    /// `redis+unix:///PATH/redis.sock`, with `?pass=PASSWORD` (percent-encoded) when a
    /// password is set. Both forms are accepted by `redis::Client::open`.
    pub fn unix_url(&self) -> Option<String> {
        let path = self.socket_path()?;
        let path = percent_encode(&path.to_string_lossy(), PATH);
        Some(match &self.options.password {
            Some(password) => {
                format!(
                    "redis+unix://{path}?pass={}",
                    percent_encode(password, COMPONENT)
                )
            }
            None => format!("redis+unix://{path}"),
        })
    }

    /// Its unix socket's path when [`ServerOptions::unix_socket`] is on.
    pub fn socket_path(&self) -> Option<PathBuf> {
        self.options
            .unix_socket
            .then(|| self.dir.path().join(SOCKET_FILE))
    }

    /// Its temporary directory, holding its data files and log; removed when dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The options it was started with.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The contents of its log file, or an empty string if it cannot be read.
    ///
    /// The log accumulates over restarts.
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join(LOG_FILE))
    }

    /// Kills it with `SIGKILL` and reaps it. Does nothing if it is not running.
    ///
    /// A paused server is killed without running again first, so it cannot serve the
    /// commands queued while it was frozen.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Signal`] if the signal cannot be sent, [`TestkitError::Io`] if the
    /// process cannot be reaped.
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        let was_paused = std::mem::replace(&mut self.paused, false);
        let slot = self.child.get_mut().unwrap_or_else(PoisonError::into_inner);
        let Some(child) = slot.as_mut() else {
            return Ok(());
        };
        let pid = child.id();
        // Already exited on its own: `try_wait` has reaped it.
        if let Ok(Some(_)) = child.try_wait() {
            *slot = None;
            return Ok(());
        }
        match send(pid, Signal::SIGKILL) {
            // ESRCH: it died between `try_wait` and the signal; still ours to reap.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(errno) => return Err(signal_error(pid, Signal::SIGKILL, errno)),
        }
        if was_paused {
            // SIGKILL already ends a stopped process; SIGCONT is belt and braces, sent
            // after it so the frozen server never runs again. Errors are irrelevant here.
            let _ = send(pid, Signal::SIGCONT);
        }
        child
            .wait()
            .map_err(io_error(format!("reap redis-server pid {pid}")))?;
        *slot = None;
        Ok(())
    }

    /// Freezes it with `SIGSTOP`: connections are accepted by the kernel but nothing is
    /// answered, and keys do not expire, until [`resume`](Self::resume).
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] if it was killed or has exited,
    /// [`TestkitError::Signal`] if the signal cannot be sent.
    pub fn pause(&mut self) -> Result<(), TestkitError> {
        let pid = self.running_pid()?;
        send(pid, Signal::SIGSTOP).map_err(|errno| signal_error(pid, Signal::SIGSTOP, errno))?;
        self.paused = true;
        Ok(())
    }

    /// Unfreezes it with `SIGCONT` after [`pause`](Self::pause). Harmless if not paused.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] if it was killed or has exited,
    /// [`TestkitError::Signal`] if the signal cannot be sent.
    pub fn resume(&mut self) -> Result<(), TestkitError> {
        let pid = self.running_pid()?;
        send(pid, Signal::SIGCONT).map_err(|errno| signal_error(pid, Signal::SIGCONT, errno))?;
        self.paused = false;
        Ok(())
    }

    /// Whether it is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused && self.lock_child().is_some()
    }

    /// Whether its process is alive (a paused server is alive).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Kills it with `SIGKILL` if it is running (paused or not), then starts it again on the
    /// same port and unix socket path, and waits until it answers `PING`.
    ///
    /// With `keep_data == false` its data directory is wiped first (`dump.rdb`, the
    /// append-only files), so it comes back empty. With `keep_data == true` the files stay:
    /// with [`Persistence::AofAlways`] every acknowledged write is restored, with
    /// [`Persistence::None`] only a `dump.rdb` written by `SAVE`, if any. The log is kept.
    ///
    /// # Errors
    ///
    /// As [`kill`](Self::kill) and [`start`](Self::start) (startup is retried on the same
    /// port for up to 1 s if the port is still taken), plus [`TestkitError::Io`] if the
    /// data cannot be wiped. After an error the server is not running.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server killed, or started but perhaps not yet ready:
    /// call [`wait_ready`](Self::wait_ready) or `restart` again.
    pub async fn restart(&mut self, keep_data: bool) -> Result<(), TestkitError> {
        self.kill()?;
        if !keep_data {
            self.wipe_data()?;
        }
        if let Some(socket) = self.socket_path() {
            remove_if_present(&socket)?;
        }
        self.launch_with_retries(SAME_PORT_ATTEMPTS, false).await
    }

    /// Waits until it answers `PING` (after `AUTH` when a password is set) and reports its
    /// own PID, for at most 10 s.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::NotRunning`] if it was killed.
    /// - [`TestkitError::Paused`] if it is paused.
    /// - [`TestkitError::Exited`] if it exits meanwhile, with its log.
    /// - [`TestkitError::StartTimeout`] if it does not answer in time, with its log; the
    ///   process is left running.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_ready(&self) -> Result<(), TestkitError> {
        if self.is_paused() {
            return Err(TestkitError::Paused { port: self.port });
        }
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        for _ in 0..MAX_PROBES {
            let pid = self.check_alive()?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            if self
                .probe_while_alive(pid, remaining.min(PROBE_TIMEOUT))
                .await?
            {
                let socket_ready = self.socket_path().is_none_or(|path| path.exists());
                if socket_ready {
                    // It answered as itself; make sure it did not die right after.
                    self.check_alive()?;
                    return Ok(());
                }
            }
            sleep(PROBE_INTERVAL.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
        Err(TestkitError::StartTimeout {
            port: self.port,
            waited: started.elapsed(),
            log: self.diagnostics(),
        })
    }

    /// Runs one readiness probe for at most `budget`, checking every [`PROBE_INTERVAL`] that
    /// the process is still alive: a probe can hang on a port someone else listens on while
    /// our process has already exited.
    async fn probe_while_alive(&self, pid: u32, budget: Duration) -> Result<bool, TestkitError> {
        let deadline = Instant::now() + budget;
        let mut probe = std::pin::pin!(probe(self.client(), pid));
        for _ in 0..MAX_PROBE_POLLS {
            let step = PROBE_INTERVAL.min(deadline.saturating_duration_since(Instant::now()));
            if let Ok(answer) = timeout(step, &mut probe).await {
                return Ok(answer);
            }
            self.check_alive()?;
            if Instant::now() >= deadline {
                break;
            }
        }
        Ok(false)
    }

    /// Starts the process, retrying when its port was taken: on fresh ports for a first
    /// start, on the same port after a delay for a restart.
    async fn launch_with_retries(
        &mut self,
        attempts: u32,
        fresh_port: bool,
    ) -> Result<(), TestkitError> {
        let mut attempt = 1;
        loop {
            match self.launch().await {
                Err(failure) if failure.port_taken && attempt < attempts => {
                    attempt += 1;
                    if fresh_port {
                        self.port = free_port()?;
                    } else {
                        sleep(SAME_PORT_DELAY).await;
                    }
                }
                result => return result.map_err(|failure| failure.error),
            }
        }
    }

    /// Spawns the process once and waits until it is ready; kills it on failure.
    async fn launch(&mut self) -> Result<(), LaunchFailure> {
        let log_offset = file_len(&self.dir.path().join(LOG_FILE));
        let stdio_offset = file_len(&self.dir.path().join(STDIO_FILE));
        self.spawn().map_err(LaunchFailure::other)?;
        let Err(error) = self.wait_ready().await else {
            return Ok(());
        };
        // The server may be hung rather than gone; it must not outlive a failed start. A
        // kill failure is secondary to the startup error reported.
        let _ = self.kill();
        let port_taken = matches!(error, TestkitError::Exited { .. })
            && (read_lossy_from(&self.dir.path().join(LOG_FILE), log_offset).contains(PORT_TAKEN)
                || read_lossy_from(&self.dir.path().join(STDIO_FILE), stdio_offset)
                    .contains(PORT_TAKEN));
        Err(LaunchFailure { error, port_taken })
    }

    /// Spawns `redis-server` with the testkit's arguments.
    fn spawn(&mut self) -> Result<(), TestkitError> {
        let stdio_path = self.dir.path().join(STDIO_FILE);
        let stdout = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stdio_path)
            .map_err(io_error(format!("create {}", stdio_path.display())))?;
        let stderr = stdout
            .try_clone()
            .map_err(io_error(format!("open {} twice", stdio_path.display())))?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => TestkitError::NotInstalled {
                    tried: self.binary.display().to_string(),
                },
                _ => TestkitError::Spawn {
                    binary: self.binary.clone(),
                    source,
                },
            })?;
        *self.child.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(child);
        self.paused = false;
        Ok(())
    }

    /// The command line, without the binary.
    fn args(&self) -> Vec<OsString> {
        let dir = self.dir.path();
        let mut args: Vec<OsString> = vec!["--port".into()];
        #[cfg(feature = "tls")]
        if let Some(authority) = &self.options.tls {
            // TLS only: no plain TCP port.
            let auth_clients = if self.options.tls_auth_clients {
                "yes"
            } else {
                "no"
            };
            args.extend([
                "0".into(),
                "--tls-port".into(),
                self.port.to_string().into(),
                "--tls-cert-file".into(),
                authority.server_cert_file().into(),
                "--tls-key-file".into(),
                authority.server_key_file().into(),
                "--tls-ca-cert-file".into(),
                authority.ca_file().into(),
                "--tls-auth-clients".into(),
                auth_clients.into(),
            ]);
        }
        if !self.is_tls() {
            args.push(self.port.to_string().into());
        }
        args.extend([
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.into(),
            "--logfile".into(),
            dir.join(LOG_FILE).into(),
            "--daemonize".into(),
            "no".into(),
            "--save".into(),
            "".into(),
            "--enable-debug-command".into(),
            "local".into(),
            "--protected-mode".into(),
            "no".into(),
        ]);
        let persistence: &[&str] = match self.options.persistence {
            Persistence::None => &["--appendonly", "no"],
            Persistence::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::AofEverySec => &["--appendonly", "yes", "--appendfsync", "everysec"],
        };
        args.extend(persistence.iter().map(OsString::from));
        if let Some(password) = &self.options.password {
            args.extend(["--requirepass".into(), password.into()]);
        }
        if let Some(socket) = self.socket_path() {
            args.extend([
                "--unixsocket".into(),
                socket.into(),
                "--unixsocketperm".into(),
                "700".into(),
            ]);
        }
        args.extend(self.options.extra_args.iter().map(OsString::from));
        args
    }

    /// Removes everything in its directory except the log files.
    pub(super) fn wipe_data(&self) -> Result<(), TestkitError> {
        let dir = self.dir.path();
        let entries = fs::read_dir(dir).map_err(io_error(format!("list {}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(io_error(format!("list {}", dir.display())))?;
            if entry.file_name() == LOG_FILE || entry.file_name() == STDIO_FILE {
                continue;
            }
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => fs::remove_dir_all(&path),
                _ => fs::remove_file(&path),
            };
            removed.map_err(io_error(format!("remove {}", path.display())))?;
        }
        Ok(())
    }

    /// Its PID if its process is alive, else why not (reaping it if it exited).
    fn check_alive(&self) -> Result<u32, TestkitError> {
        let mut slot = self.lock_child();
        let Some(child) = slot.as_mut() else {
            return Err(TestkitError::NotRunning { port: self.port });
        };
        match child.try_wait() {
            Ok(None) => Ok(child.id()),
            Ok(Some(status)) => {
                *slot = None;
                drop(slot);
                Err(TestkitError::Exited {
                    port: self.port,
                    status,
                    log: self.diagnostics(),
                })
            }
            Err(source) => Err(TestkitError::Io {
                action: format!("check whether redis-server pid {} is alive", child.id()),
                source,
            }),
        }
    }

    /// Its PID if it is running, else [`TestkitError::NotRunning`].
    fn running_pid(&self) -> Result<u32, TestkitError> {
        self.pid()
            .ok_or(TestkitError::NotRunning { port: self.port })
    }

    /// The child slot; a poisoned lock still holds a valid handle.
    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tails of its log file and of its stdout/stderr, for error messages.
    fn diagnostics(&self) -> String {
        let mut text = tail(self.log());
        let stdio = read_lossy(&self.dir.path().join(STDIO_FILE));
        if !stdio.trim().is_empty() {
            let _ = write!(text, "\n--- stdout/stderr ---\n{}", tail(stdio));
        }
        text
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Runs during unwinding too: `kill` never panics, and nothing else can be done
        // with its error here.
        let _ = self.kill();
    }
}

/// A failed startup attempt, and whether it failed because its port was taken.
struct LaunchFailure {
    /// What went wrong.
    error: TestkitError,
    /// Whether another attempt (on another port, or later) may succeed.
    port_taken: bool,
}

impl LaunchFailure {
    /// A failure that retrying cannot fix.
    fn other(error: TestkitError) -> Self {
        Self {
            error,
            port_taken: false,
        }
    }
}

/// Connects to the server's URL (which authenticates when a password is set) and checks
/// that `PING` answers `PONG` and that `INFO server` reports `pid`, so the answer came from
/// our process. Any error counts as "not ready yet"; the caller bounds the time.
async fn probe(client: redis::RedisResult<redis::Client>, pid: u32) -> bool {
    let answered = async {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(PROBE_TIMEOUT))
            .set_response_timeout(Some(PROBE_TIMEOUT));
        let mut conn = client?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        redis::RedisResult::Ok((pong, info))
    };
    let Ok((pong, info)) = answered.await else {
        return false;
    };
    pong == "PONG" && info.contains(&format!("process_id:{pid}\r\n"))
}

/// The binary to run: the explicit one, else `REDIS_SERVER`, else `redis-server` on `PATH`.
fn find_binary(explicit: Option<&Path>) -> Result<PathBuf, TestkitError> {
    if let Some(path) = explicit {
        return if is_executable(path) {
            Ok(path.to_owned())
        } else {
            Err(TestkitError::NotInstalled {
                tried: format!("ServerOptions::binary {}", path.display()),
            })
        };
    }
    if let Some(value) = std::env::var_os(BINARY_ENV).filter(|value| !value.is_empty()) {
        let path = PathBuf::from(&value);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(TestkitError::NotInstalled {
                tried: format!("{BINARY_ENV}={}", path.display()),
            })
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(BINARY_NAME))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| TestkitError::NotInstalled {
            tried: format!("{BINARY_ENV} and PATH"),
        })
}

/// Whether `path` is a file with an execute bit.
fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, TestkitError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_error("bind a probe socket on 127.0.0.1"))?;
    let addr = listener
        .local_addr()
        .map_err(io_error("read the probe socket's port"))?;
    Ok(addr.port())
}

/// Sends `signal` to `pid`.
fn send(pid: u32, signal: Signal) -> Result<(), Errno> {
    let raw = i32::try_from(pid).map_err(|_| Errno::ESRCH)?;
    signal::kill(Pid::from_raw(raw), signal)
}

/// A [`TestkitError::Signal`].
fn signal_error(pid: u32, signal: Signal, errno: Errno) -> TestkitError {
    TestkitError::Signal {
        signal: signal.as_str(),
        pid,
        source: errno.into(),
    }
}

/// Wraps an I/O error with what the testkit was doing.
pub(super) fn io_error(action: impl Into<String>) -> impl FnOnce(io::Error) -> TestkitError {
    let action = action.into();
    move |source| TestkitError::Io { action, source }
}

/// Removes a file, succeeding if it does not exist.
fn remove_if_present(path: &Path) -> Result<(), TestkitError> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(io_error(format!("remove {}", path.display()))(error))
        }
        _ => Ok(()),
    }
}

/// A file's length, 0 if it cannot be read.
pub(super) fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |meta| meta.len())
}

/// A file's contents as text, empty if it cannot be read.
pub(super) fn read_lossy(path: &Path) -> String {
    fs::read(path).map_or_else(
        |_| String::new(),
        |bytes| String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// A file's contents from byte `offset` on, empty if it cannot be read.
pub(super) fn read_lossy_from(path: &Path, offset: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The last [`MAX_QUOTED_LOG`] bytes of `text`, on a character boundary.
pub(super) fn tail(text: String) -> String {
    if text.len() <= MAX_QUOTED_LOG {
        return text;
    }
    let mut start = text.len() - MAX_QUOTED_LOG;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[...]{}", &text[start..])
}

/// What a URL component must percent-encode: everything but RFC 3986 unreserved characters.
/// The one set safe in each component a testkit URL has: userinfo (where `:` and `@`
/// delimit the password), and the query, which the client decodes as a form (`+` is a
/// space there).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// What a unix socket path must percent-encode: as [`COMPONENT`], but `/` separates its
/// segments.
const PATH: &AsciiSet = &COMPONENT.remove(b'/');

/// `text` percent-encoded with `set`, UTF-8 byte by byte.
fn percent_encode(text: &str, set: &'static AsciiSet) -> String {
    utf8_percent_encode(text, set).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encodes_passwords_and_paths() {
        assert_eq!(
            percent_encode("a b@c:d/é+~", COMPONENT),
            "a%20b%40c%3Ad%2F%C3%A9%2B~"
        );
        assert_eq!(percent_encode("/tmp/x y?#", PATH), "/tmp/x%20y%3F%23");
    }

    #[test]
    fn refuses_managed_arguments() {
        let options = ServerOptions::new().arg("--BIND").arg("0.0.0.0");
        assert!(matches!(
            options.validate(),
            Err(TestkitError::InvalidOption { .. })
        ));
        assert!(ServerOptions::new().password("").validate().is_err());
        assert!(
            ServerOptions::new()
                .arg("--bind-source-addr")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn tails_long_logs_on_char_boundaries() {
        let long = "é".repeat(MAX_QUOTED_LOG);
        let quoted = tail(long);
        assert!(quoted.starts_with("[...]é"));
        assert!(quoted.len() <= MAX_QUOTED_LOG + 5);
    }
}
