//! One PostgreSQL server on `127.0.0.1`, owned by PID like the testkit's `redis-server`.
//!
//! `initdb` makes a fresh cluster in a temporary directory, then `postgres` itself is
//! started (not through `pg_ctl`, which would hand the server to a daemon): the testkit
//! owns the postmaster's PID, and finds the processes it started (its children, by
//! `/proc`), so it can freeze, kill and restart the whole server, backends included.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::{Pid, Uid, User};
use tempfile::TempDir;
use tokio::time::{Instant, sleep};

use super::server::{file_len, read_lossy, read_lossy_from, tail};

/// The environment variable naming the folder of `initdb` and `postgres`.
const BINDIR_ENV: &str = "REDQUORUM_PG_BINDIR";
/// Where Debian installs each major version's server binaries.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The unprivileged user the server runs as when the tests run as root (PostgreSQL refuses
/// to run as root).
const SERVICE_USER: &str = "postgres";
/// The database superuser `initdb` creates, whatever the operating-system user.
pub(super) const SUPERUSER: &str = "postgres";
/// The cluster's folder inside the temporary directory (the directory itself holds the logs).
const DATA: &str = "data";
/// `initdb`'s output.
const INITDB_LOG: &str = "initdb.log";
/// The server's stdout and stderr, where it logs (kept across restarts).
const SERVER_LOG: &str = "postgres.log";
/// The file in which the postmaster writes its PID, port and status.
const PID_FILE: &str = "postmaster.pid";
/// The status line of a postmaster that accepts connections.
const READY: &str = "ready";
/// The oldest major version used (`redquorum::postgres::fenced` reads
/// `pg_current_xact_id`, new in 13); older installations are passed over.
const MIN_MAJOR_VERSION: u32 = 13;
/// How long a dropped server gets to shut down on `SIGQUIT` (removing its shared memory)
/// before it is killed.
const QUIT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two checks of whether it has exited.
const EXIT_PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Where Linux lists the System V shared-memory segments.
const SYSV_SHM: &str = "/proc/sysvipc/shm";
/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a start may take before it is abandoned.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause between two readiness checks.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Upper bound on readiness checks and `initdb` polls, on top of their time limits.
const MAX_PROBES: u32 = 10_000;
/// Startup attempts on fresh ports when the probed port was taken.
const FRESH_PORT_ATTEMPTS: u32 = 5;
/// Startup attempts on the same port for a restart.
const SAME_PORT_ATTEMPTS: u32 = 20;
/// The pause between two startup attempts on the same port.
const SAME_PORT_DELAY: Duration = Duration::from_millis(50);
/// What the server logs when its port is taken.
const PORT_TAKEN: &str = "Address already in use";

/// An error from starting or controlling a PostgreSQL server of the testkit.
///
/// Start failures carry the server's log, so a failing test shows why it did not come up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// No folder holding both `initdb` and `postgres` was found.
    #[error(
        "PostgreSQL's server binaries (initdb, postgres; version 13 or newer) not found (tried \
         {tried}): install them with `apt-get install postgresql` (as root), or set \
         REDQUORUM_PG_BINDIR to their folder"
    )]
    NotInstalled {
        /// Where the testkit looked.
        tried: String,
    },
    /// Running as root, but there is no `postgres` user to run the server as.
    #[error(
        "PostgreSQL refuses to run as root, and there is no `postgres` user to run it as: \
         install Debian's postgresql package (it creates the user), or run the tests as \
         another user"
    )]
    NoServiceUser,
    /// `initdb` failed.
    #[error("initdb failed ({status}): its output:\n{log}")]
    Initdb {
        /// How it ended.
        status: String,
        /// Its output.
        log: String,
    },
    /// The server did not report itself ready in time; it has been killed.
    #[error(
        "postgres on 127.0.0.1:{port} was not ready within {waited:?}: the machine may be \
         overloaded (run fewer tests at once); its log:\n{log}"
    )]
    StartTimeout {
        /// Its port.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// Its log.
        log: String,
    },
    /// The server exited while the testkit waited for it.
    #[error("postgres on 127.0.0.1:{port} exited during startup ({status}): its log:\n{log}")]
    Exited {
        /// Its port.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// Its log.
        log: String,
    },
    /// The operation needs a running server, but it was killed or has exited.
    #[error("postgres on 127.0.0.1:{port} is not running: call restart() first")]
    NotRunning {
        /// Its port.
        port: u16,
    },
    /// The operation needs a server that is not paused.
    #[error("postgres on 127.0.0.1:{port} is paused: call resume() first")]
    Paused {
        /// Its port.
        port: u16,
    },
    /// A signal could not be delivered.
    #[error("could not send {signal} to postgres process group {pid}: {source}")]
    Signal {
        /// The signal's name, such as `SIGSTOP`.
        signal: &'static str,
        /// The postmaster's process id (the group's id).
        pid: u32,
        /// The operating system's error.
        source: io::Error,
    },
    /// A file system or process operation of the testkit itself failed.
    #[error("could not {action}: {source}")]
    Io {
        /// What the testkit was doing.
        action: String,
        /// The operating system's error.
        source: io::Error,
    },
}

/// A PostgreSQL server on `127.0.0.1`, with a fresh cluster in a temporary directory,
/// shut down (with every backend, and its shared memory removed) when dropped.
///
/// - **The binaries**: `initdb` and `postgres` from `REDQUORUM_PG_BINDIR` if set, else
///   from `pg_config --bindir`, else from the newest `/usr/lib/postgresql/*/bin` (Debian),
///   else from `PATH`; each candidate must be PostgreSQL 13 or newer
///   (`redquorum::postgres::fenced` needs `pg_current_xact_id`).
/// - **Root**: PostgreSQL refuses to run as root, so a test running as root runs `initdb`
///   and `postgres` as the `postgres` user (set in the child before `exec`: the PID the
///   testkit holds is the server's own), and that user owns the temporary directory.
/// - **Settings**: listening on `127.0.0.1` only, on a free port, with its unix socket in
///   its own directory; `fsync=off` (a killed server loses nothing the kernel has; only a
///   machine crash would) and `track_commit_timestamp=on` (`pg_xact_commit_timestamp`
///   orders committed rows); trust authentication for the superuser `postgres`,
///   database `postgres`. **For tests only**: any local user can connect to it as
///   superuser, without a password.
/// - **Faults**, by PID: [`pause`](Self::pause) and [`resume`](Self::resume)
///   (`SIGSTOP`/`SIGCONT` to the postmaster and to each process it started, since every
///   backend runs in a session of its own), [`kill`](Self::kill) (`SIGKILL` to them all:
///   a crash), [`restart`](Self::restart) (crash recovery on the same port and data).
///
/// Use real time: do not start it inside `#[tokio::test(start_paused = true)]`.
///
/// # Example
///
/// ```no_run
/// use redquorum_testkit::Postgres;
///
/// # async fn demo() -> Result<(), redquorum_testkit::PostgresError> {
/// let mut db = Postgres::start().await?;
/// let config = db.config(); // "host=127.0.0.1 port=… user=postgres dbname=postgres"
/// db.pause()?; // every backend frozen
/// db.resume()?;
/// db.restart().await?; // SIGKILL, then crash recovery: committed rows survive
/// # let _ = config;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Postgres {
    bindir: PathBuf,
    /// The user and group to run as, when running as root.
    run_as: Option<(u32, u32)>,
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    paused: bool,
}

impl Postgres {
    /// Creates a fresh cluster with `initdb` and starts `postgres` on a free port; returns
    /// once it reports itself ready to accept connections (its `postmaster.pid` says
    /// `ready`, with its own PID) and its port accepts a TCP connection.
    ///
    /// # Errors
    ///
    /// [`PostgresError::NotInstalled`], [`PostgresError::NoServiceUser`],
    /// [`PostgresError::Initdb`], a start failure with the server's log, or
    /// [`PostgresError::Io`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills (and reaps) the `initdb` or the server it started, and
    /// removes its directory.
    pub async fn start() -> Result<Postgres, PostgresError> {
        let bindir = find_bindir()?;
        let run_as = service_user()?;
        let dir = tempfile::Builder::new()
            .prefix("redquorum-pg-")
            .tempdir()
            .map_err(io_error(
                "create a temporary directory for postgres (check TMPDIR)",
            ))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(io_error(
                format!("hand {} to postgres", dir.path().display()),
            ))?;
        }
        let mut server = Postgres {
            bindir,
            run_as,
            dir,
            port: free_port()?,
            child: None,
            paused: false,
        };
        server.initdb().await?;
        server
            .launch_with_retries(FRESH_PORT_ATTEMPTS, true)
            .await?;
        Ok(server)
    }

    /// Its TCP port on `127.0.0.1`, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its postmaster's process id, or `None` when it was killed or has exited.
    pub fn pid(&mut self) -> Option<u32> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(None) | Err(_) => Some(child.id()),
            Ok(Some(_)) => {
                self.child = None;
                None
            }
        }
    }

    /// Whether its postmaster is alive (a paused server is alive).
    pub fn is_running(&mut self) -> bool {
        self.pid().is_some()
    }

    /// Whether it is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused && self.child.is_some()
    }

    /// Connection settings in libpq's key-value form, for `tokio_postgres::connect` and
    /// most drivers: `host=127.0.0.1 port=PORT user=postgres dbname=postgres`.
    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres",
            self.port
        )
    }

    /// Its URL: `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }

    /// Its temporary directory: the cluster (`data/`) and the logs; removed when dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log (its stdout and stderr, over every start), or an empty string if
    /// it cannot be read.
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join(SERVER_LOG))
    }

    /// Freezes the server with `SIGSTOP`: the postmaster first (so it starts no new
    /// process), then every process it started (the backends and helpers, each in a
    /// session of its own). The kernel still accepts connections, nothing is answered, no
    /// timeout fires, until [`resume`](Self::resume).
    ///
    /// # Errors
    ///
    /// [`PostgresError::NotRunning`], or [`PostgresError::Signal`].
    pub fn pause(&mut self) -> Result<(), PostgresError> {
        let pid = self.running_pid()?;
        send(pid, Signal::SIGSTOP)?;
        self.paused = true;
        // The stopped postmaster cannot reap its children, so their PIDs stay theirs.
        for child in children(pid) {
            ignore_gone(send(child, Signal::SIGSTOP))?;
        }
        Ok(())
    }

    /// Unfreezes it with `SIGCONT` after [`pause`](Self::pause): the postmaster's
    /// processes, then the postmaster. Harmless if not paused.
    ///
    /// # Errors
    ///
    /// [`PostgresError::NotRunning`], or [`PostgresError::Signal`].
    pub fn resume(&mut self) -> Result<(), PostgresError> {
        let pid = self.running_pid()?;
        for child in children(pid) {
            ignore_gone(send(child, Signal::SIGCONT))?;
        }
        send(pid, Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Kills the server with `SIGKILL` (a crash): the postmaster is stopped first, then
    /// every process it started is killed, then the postmaster, which is reaped, and its
    /// System V shared-memory segment, which a killed postmaster leaves, is removed (best
    /// effort). Does nothing if it is not running. Every connection to it breaks;
    /// committed transactions survive a [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// [`PostgresError::Signal`] if a signal cannot be sent, [`PostgresError::Io`] if the
    /// postmaster cannot be reaped.
    pub fn kill(&mut self) -> Result<(), PostgresError> {
        self.paused = false;
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let pid = child.id();
        if let Ok(Some(_)) = child.try_wait() {
            // The postmaster exited by itself; its processes notice and exit.
            self.child = None;
            return Ok(());
        }
        // Stopped, it cannot reap its children nor start new ones, so the list is exact
        // and their PIDs stay theirs until they are killed.
        ignore_gone(send(pid, Signal::SIGSTOP))?;
        for process in children(pid) {
            ignore_gone(send(process, Signal::SIGKILL))?;
        }
        ignore_gone(send(pid, Signal::SIGKILL))?;
        child
            .wait()
            .map_err(io_error(format!("reap postgres pid {pid}")))?;
        self.child = None;
        self.remove_shared_memory(pid);
        Ok(())
    }

    /// Removes the shared-memory segment that postmaster `pid` created, named on line 7 of
    /// its `postmaster.pid` (key and id): best effort, and only if the kernel still lists
    /// a segment of that key and id created by `pid`. A killed postmaster leaves it behind
    /// (the machine has a few thousand); a restart would reuse it, but a last kill would
    /// leak it.
    fn remove_shared_memory(&self, pid: u32) {
        let pid_file = read_lossy(&self.dir.path().join(DATA).join(PID_FILE));
        let Some((key, shmid)) = pid_file.lines().nth(6).and_then(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
        }) else {
            return;
        };
        let listed = read_lossy(Path::new(SYSV_SHM)).lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.first() == Some(&key.as_str())
                && fields.get(1) == Some(&shmid.as_str())
                && fields.get(4) == Some(&pid.to_string().as_str())
        });
        if listed {
            let _ = Command::new("ipcrm")
                .args(["-m", &shmid])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Shuts the server down with `SIGQUIT` (immediate shutdown: its backends end, and it
    /// removes its shared memory), waiting at most [`QUIT_TIMEOUT`]; kills it if it is
    /// still running then.
    fn shut_down(&mut self) -> Result<(), PostgresError> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        if self.paused {
            // A stopped postmaster would not act on SIGQUIT.
            self.resume()?;
        }
        ignore_gone(send(pid, Signal::SIGQUIT))?;
        let started = std::time::Instant::now();
        while started.elapsed() < QUIT_TIMEOUT {
            if self.pid().is_none() {
                return Ok(());
            }
            std::thread::sleep(EXIT_PROBE_INTERVAL);
        }
        self.kill()
    }

    /// Kills it (as [`kill`](Self::kill)) if it is running, then starts it again on the
    /// same port and data: it recovers from its write-ahead log, so every committed
    /// transaction is there. Returns once it is ready.
    ///
    /// # Errors
    ///
    /// As [`kill`](Self::kill) and [`start`](Self::start). After an error it is not
    /// running.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves it killed, or started but perhaps not yet ready: call
    /// `restart` again.
    pub async fn restart(&mut self) -> Result<(), PostgresError> {
        self.kill()?;
        self.launch_with_retries(SAME_PORT_ATTEMPTS, false).await
    }

    /// Runs `initdb` into `data/`, bounded in time.
    async fn initdb(&mut self) -> Result<(), PostgresError> {
        let log_path = self.dir.path().join(INITDB_LOG);
        let (stdout, stderr) = log_files(&log_path)?;
        let mut command = Command::new(self.bindir.join("initdb"));
        command
            .arg("-D")
            .arg(self.dir.path().join(DATA))
            .args([
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own process group, so that its own children can be killed with it.
            .process_group(0);
        self.drop_privileges(&mut command);
        let child = command.spawn().map_err(|source| self.spawn_error(source))?;
        // Killed and reaped, with its group, if this future is dropped before it ends.
        let mut child = KillOnDrop(child);
        let child = &mut child.0;
        let started = Instant::now();
        for _ in 0..MAX_PROBES {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(PostgresError::Initdb {
                        status: status.to_string(),
                        log: tail(read_lossy(&log_path)),
                    });
                }
                Ok(None) if started.elapsed() < INITDB_TIMEOUT => sleep(PROBE_INTERVAL).await,
                Ok(None) => break,
                Err(source) => {
                    return Err(PostgresError::Io {
                        action: "wait for initdb".into(),
                        source,
                    });
                }
            }
        }
        Err(PostgresError::Initdb {
            status: format!("still running after {INITDB_TIMEOUT:?}; killed"),
            log: tail(read_lossy(&log_path)),
        })
    }

    /// Starts the server, retrying when its port was taken: on fresh ports for a first
    /// start, on the same port after a delay for a restart.
    async fn launch_with_retries(
        &mut self,
        attempts: u32,
        fresh_port: bool,
    ) -> Result<(), PostgresError> {
        let mut attempt = 1;
        loop {
            let log_offset = file_len(&self.dir.path().join(SERVER_LOG));
            match self.launch().await {
                Err(error @ PostgresError::Exited { .. })
                    if attempt < attempts
                        && read_lossy_from(&self.dir.path().join(SERVER_LOG), log_offset)
                            .contains(PORT_TAKEN) =>
                {
                    drop(error);
                    attempt += 1;
                    if fresh_port {
                        self.port = free_port()?;
                    } else {
                        sleep(SAME_PORT_DELAY).await;
                    }
                }
                result => return result,
            }
        }
    }

    /// Spawns `postgres` once and waits until it is ready; kills it on failure.
    async fn launch(&mut self) -> Result<(), PostgresError> {
        self.spawn()?;
        let result = self.wait_ready().await;
        if result.is_err() {
            // A hung server must not outlive a failed start.
            let _ = self.kill();
        }
        result
    }

    /// Spawns the postmaster in a process group of its own.
    fn spawn(&mut self) -> Result<(), PostgresError> {
        let (stdout, stderr) = log_files(&self.dir.path().join(SERVER_LOG))?;
        let mut command = Command::new(self.bindir.join("postgres"));
        command
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        self.drop_privileges(&mut command);
        let child = command.spawn().map_err(|source| self.spawn_error(source))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// The postmaster's command line, without the binary.
    fn args(&self) -> Vec<OsString> {
        let data = self.dir.path().join(DATA);
        let mut args: Vec<OsString> = vec!["-D".into(), data.clone().into()];
        let settings = [
            format!("port={}", self.port),
            "listen_addresses=127.0.0.1".to_owned(),
            format!("unix_socket_directories={}", data.display()),
            "fsync=off".to_owned(),
            "full_page_writes=off".to_owned(),
            "track_commit_timestamp=on".to_owned(),
            "max_connections=100".to_owned(),
            "shared_buffers=16MB".to_owned(),
            "log_min_messages=warning".to_owned(),
            "log_line_prefix=%m [%p] ".to_owned(),
        ];
        for setting in settings {
            args.push("-c".into());
            args.push(setting.into());
        }
        args
    }

    /// Waits until the postmaster's PID file says `ready` with its own PID and its port
    /// accepts a connection, for at most 30 s.
    async fn wait_ready(&mut self) -> Result<(), PostgresError> {
        let started = Instant::now();
        let pid_file = self.dir.path().join(DATA).join(PID_FILE);
        for _ in 0..MAX_PROBES {
            let pid = self.check_alive()?;
            if is_ready(&read_lossy(&pid_file), pid)
                && std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok()
            {
                return Ok(());
            }
            if started.elapsed() >= START_TIMEOUT {
                break;
            }
            sleep(PROBE_INTERVAL).await;
        }
        Err(PostgresError::StartTimeout {
            port: self.port,
            waited: started.elapsed(),
            log: tail(self.log()),
        })
    }

    /// Its PID if its postmaster is alive, else why not (reaping it if it exited).
    fn check_alive(&mut self) -> Result<u32, PostgresError> {
        let port = self.port;
        let Some(child) = self.child.as_mut() else {
            return Err(PostgresError::NotRunning { port });
        };
        match child.try_wait() {
            Ok(None) => Ok(child.id()),
            Ok(Some(status)) => {
                self.child = None;
                Err(PostgresError::Exited {
                    port,
                    status,
                    log: tail(self.log()),
                })
            }
            Err(source) => Err(PostgresError::Io {
                action: format!("check whether postgres pid {} is alive", child.id()),
                source,
            }),
        }
    }

    /// Its PID if it is running, else [`PostgresError::NotRunning`].
    fn running_pid(&mut self) -> Result<u32, PostgresError> {
        let port = self.port;
        self.pid().ok_or(PostgresError::NotRunning { port })
    }

    /// Runs `command` as the service user when running as root.
    fn drop_privileges(&self, command: &mut Command) {
        if let Some((uid, gid)) = self.run_as {
            // The standard library also drops root's supplementary groups.
            command.uid(uid).gid(gid);
        }
    }

    fn spawn_error(&self, source: io::Error) -> PostgresError {
        match source.kind() {
            io::ErrorKind::NotFound => PostgresError::NotInstalled {
                tried: self.bindir.display().to_string(),
            },
            _ => PostgresError::Io {
                action: format!("run {}", self.bindir.display()),
                source,
            },
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Runs during unwinding too: neither panics.
        if self.shut_down().is_err() {
            let _ = self.kill();
        }
    }
}

/// A child process (the leader of its own process group) that is killed with its group
/// and reaped when dropped, unless it has exited: `initdb` while `start` runs.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let pid = self.0.id();
        if let Ok(raw) = i32::try_from(pid) {
            // The group first (its children), then the leader itself for good measure.
            let _ = signal::killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a `postmaster.pid` text names `pid` and says the server is ready.
fn is_ready(pid_file: &str, pid: u32) -> bool {
    let lines: Vec<&str> = pid_file.lines().collect();
    lines.first().map(|l| l.trim()) == Some(pid.to_string().as_str())
        && lines.get(7).is_some_and(|status| status.trim() == READY)
}

/// The user and group to run the server as: the service user when running as root, none
/// otherwise.
fn service_user() -> Result<Option<(u32, u32)>, PostgresError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    match User::from_name(SERVICE_USER) {
        Ok(Some(user)) => Ok(Some((user.uid.as_raw(), user.gid.as_raw()))),
        Ok(None) => Err(PostgresError::NoServiceUser),
        Err(errno) => Err(PostgresError::Io {
            action: format!("look up the user {SERVICE_USER}"),
            source: errno.into(),
        }),
    }
}

/// The folder of `initdb` and `postgres` (see [`Postgres`]).
fn find_bindir() -> Result<PathBuf, PostgresError> {
    let mut tried = Vec::new();
    if let Some(dir) = std::env::var_os(BINDIR_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(PostgresError::NotInstalled {
                tried: format!("{BINDIR_ENV}={}", dir.display()),
            })
        };
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_server(&dir) {
            return Ok(dir);
        }
        tried.push(format!("pg_config --bindir ({})", dir.display()));
    } else {
        tried.push("pg_config --bindir (no pg_config)".to_owned());
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.into_iter().rev().find(|(_, dir)| has_server(dir)) {
        return Ok(dir);
    }
    tried.push(format!("{DEBIAN_ROOT}/*/bin"));
    if let Some(dir) = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| has_server(dir))
    {
        return Ok(dir);
    }
    tried.push("PATH".to_owned());
    Err(PostgresError::NotInstalled {
        tried: tried.join(", "),
    })
}

/// Whether `dir` holds executable `initdb` and `postgres`, of version
/// [`MIN_MAJOR_VERSION`] or newer.
fn has_server(dir: &Path) -> bool {
    let executables = ["initdb", "postgres"].iter().all(|name| {
        fs::metadata(dir.join(name))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    });
    executables && server_major(dir).is_some_and(|major| major >= MIN_MAJOR_VERSION)
}

/// The major version of `dir/postgres`, from `postgres --version` (allowed as root).
fn server_major(dir: &Path) -> Option<u32> {
    let output = Command::new(dir.join("postgres"))
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())?;
    parse_major(&String::from_utf8_lossy(&output.stdout))
}

/// The major version in a `postgres --version` line such as
/// `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`: the first word that starts
/// with a digit, up to its first non-digit.
fn parse_major(version: &str) -> Option<u32> {
    let word = version
        .split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))?;
    let digits: String = word.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Sends `signal` to process `pid`.
fn send(pid: u32, signal: Signal) -> Result<(), PostgresError> {
    let error = |errno: Errno| PostgresError::Signal {
        signal: signal.as_str(),
        pid,
        source: errno.into(),
    };
    let raw = i32::try_from(pid).map_err(|_| error(Errno::ESRCH))?;
    signal::kill(Pid::from_raw(raw), signal).map_err(error)
}

/// `Ok` also when the process was already gone.
fn ignore_gone(sent: Result<(), PostgresError>) -> Result<(), PostgresError> {
    match sent {
        Err(PostgresError::Signal { source, .. })
            if source.raw_os_error() == Some(Errno::ESRCH as i32) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// The processes whose parent is `pid`, from `/proc`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let child = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            (parent_in_stat(&stat)? == pid).then_some(child)
        })
        .collect()
}

/// The parent PID in a `/proc/PID/stat` line: the second field after the command name,
/// which is in parentheses and may itself hold spaces and parentheses.
fn parent_in_stat(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The log file opened for appending, twice: for stdout and for stderr.
fn log_files(path: &Path) -> Result<(fs::File, fs::File), PostgresError> {
    let stdout = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_error(format!("create {}", path.display())))?;
    let stderr = stdout
        .try_clone()
        .map_err(io_error(format!("open {} twice", path.display())))?;
    Ok((stdout, stderr))
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, PostgresError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_error("bind a probe socket on 127.0.0.1"))?;
    let addr = listener
        .local_addr()
        .map_err(io_error("read the probe socket's port"))?;
    Ok(addr.port())
}

/// Wraps an I/O error with what the testkit was doing.
fn io_error(action: impl Into<String>) -> impl FnOnce(io::Error) -> PostgresError {
    let action = action.into();
    move |source| PostgresError::Io { action, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pid_file_status() {
        let ready = "4242\n/tmp/x/data\n1700000000\n5432\n/tmp/x/data\n127.0.0.1\n  5432001     0\nready   \n";
        assert!(is_ready(ready, 4242));
        assert!(!is_ready(ready, 4243), "another process's file");
        let starting = ready.replace("ready   ", "starting");
        assert!(!is_ready(&starting, 4242));
        assert!(!is_ready("4242\n", 4242), "a file still being written");
        assert!(!is_ready("", 4242));
    }

    #[test]
    fn reads_the_major_version() {
        let debian = "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n";
        assert_eq!(parse_major(debian), Some(15));
        assert_eq!(parse_major("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(parse_major("postgres (PostgreSQL) 17beta1"), Some(17));
        assert_eq!(parse_major("garbage"), None);
    }

    #[test]
    fn reads_the_parent_from_a_stat_line() {
        let stat = "4243 (postgres: a) b) S 4242 4243 4243 0 -1 4194560 95 0";
        assert_eq!(parent_in_stat(stat), Some(4242));
        assert_eq!(parent_in_stat("garbage"), None);
    }
}
