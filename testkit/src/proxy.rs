//! A TCP fault proxy in front of one master, switchable at runtime.
//!
//! Clients connect to the proxy's port on `127.0.0.1`; each accepted connection gets its
//! own connection to the target, and bytes are pumped in both directions according to the
//! current [`Mode`]. Modes can be changed at any time with [`Proxy::set_mode`]; every
//! open connection sees the change at once.
//!
//! A byte stream cannot lose bytes in the middle and stay usable (the Redis protocol would
//! pair replies with the wrong requests), so every mode that loses data also closes the
//! connection that lost it, as a real TCP connection breaks when retransmission gives up:
//! [`Mode::Drop`] resets the connection that lost a chunk at once, and a connection that
//! lost data in [`Mode::Blackhole`] is reset when the blackhole ends.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::TestkitError;
use super::server::{Server, io_error};

/// How long connecting to the target may take before the client's connection is reset.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// The pause after a failed `accept` (for instance when out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// A delay drawn uniformly from `base - jitter ..= base + jitter` (at least zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Latency {
    base: Duration,
    jitter: Duration,
}

impl Latency {
    /// No delay.
    pub const ZERO: Latency = Latency::new(Duration::ZERO, Duration::ZERO);

    /// A delay of `base ± jitter`.
    pub const fn new(base: Duration, jitter: Duration) -> Self {
        Self { base, jitter }
    }

    /// The mean delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest deviation from the mean.
    pub fn jitter(&self) -> Duration {
        self.jitter
    }

    /// One delay, with `unit` uniform in `0.0..1.0`.
    fn sample(&self, unit: f64) -> Duration {
        let low = self.base.saturating_sub(self.jitter);
        let high = self.base.saturating_add(self.jitter);
        low + (high - low).mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// What the proxy does with the traffic.
///
/// # Default
/// [`Mode::Pass`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Forwards everything at once: the healed state.
    #[default]
    Pass,
    /// Delays every chunk, each direction on its own; order is kept within a direction
    /// (a chunk never overtakes an earlier one, so jitter bunches chunks rather than
    /// reordering them). A stale request can thus reach the master long after it was sent.
    Delay {
        /// The delay of requests, from the client to the master.
        to_server: Latency,
        /// The delay of replies, from the master to the client.
        to_client: Latency,
    },
    /// Accepts connections and reads from them but forwards nothing, keeping every socket
    /// open: a partition in which requests time out rather than fail. Connections that
    /// lost data are reset when the mode changes.
    Blackhole,
    /// Resets every open connection and every new one at once: the master looks down.
    Reset,
    /// Loses each chunk with the given probability (`0.0..=1.0`), resetting the connection
    /// that lost it; other chunks pass at once. Draws are seeded (see [`Proxy::start_seeded`]).
    Drop {
        /// The probability that a chunk is lost.
        probability: f64,
    },
}

impl Mode {
    /// The same delay `base ± jitter` in both directions.
    pub const fn delay(base: Duration, jitter: Duration) -> Mode {
        let latency = Latency::new(base, jitter);
        Mode::Delay {
            to_server: latency,
            to_client: latency,
        }
    }
}

/// Counts of what a proxy did, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Chunks forwarded.
    pub forwarded: u64,
    /// Chunks lost (blackholed or dropped).
    pub lost: u64,
    /// Connections reset by the proxy.
    pub resets: u64,
}

/// A TCP proxy on `127.0.0.1` in front of one target on loopback; see the module docs.
///
/// Dropping it closes the listener and every connection through it.
///
/// # Example
/// ```no_run
/// use redquorum_testkit::{Mode, Proxy, Server, ServerOptions};
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), redquorum_testkit::TestkitError> {
/// let server = Server::start(&ServerOptions::new()).await?;
/// let proxy = Proxy::for_server(&server).await?;
/// // Give clients proxy.url() instead of server.url().
/// proxy.set_mode(Mode::delay(Duration::from_millis(75), Duration::from_millis(50)));
/// proxy.set_mode(Mode::Blackhole);
/// proxy.heal();
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    /// Whether the target speaks TLS only: the proxy forwards the TLS bytes as they are.
    tls: bool,
    control: watch::Sender<Control>,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

/// What every task of a proxy watches.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Control {
    mode: Mode,
    shutdown: bool,
}

#[derive(Debug)]
struct Shared {
    rng: Mutex<u64>,
    connections: AtomicU64,
    forwarded: AtomicU64,
    lost: AtomicU64,
    resets: AtomicU64,
}

impl Shared {
    /// A uniform draw in `0.0..1.0` (splitmix64), reproducible for a given seed.
    fn unit(&self) -> f64 {
        let mut state = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Proxy {
    /// Starts a proxy in [`Mode::Pass`] on a free port of `127.0.0.1`, forwarding to
    /// `target`, which must be a loopback address. Must run inside a Tokio runtime.
    ///
    /// # Errors
    /// [`TestkitError::InvalidOption`] if `target` is not on loopback;
    /// [`TestkitError::Io`] if the listener cannot be bound.
    pub async fn start(target: SocketAddr) -> Result<Proxy, TestkitError> {
        Self::start_seeded(target, 0).await
    }

    /// As [`start`](Self::start), seeding the draws of [`Mode::Drop`] and jitter with `seed`.
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub async fn start_seeded(target: SocketAddr, seed: u64) -> Result<Proxy, TestkitError> {
        if !target.ip().is_loopback() {
            return Err(TestkitError::InvalidOption {
                option: format!("proxy target {target}"),
                reason: "the testkit only sends traffic to loopback addresses: use 127.0.0.1"
                    .into(),
            });
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(io_error("bind a proxy listener on 127.0.0.1"))?;
        let addr = listener
            .local_addr()
            .map_err(io_error("read the proxy listener's port"))?;
        let (control, watcher) = watch::channel(Control {
            mode: Mode::Pass,
            shutdown: false,
        });
        let shared = Arc::new(Shared {
            rng: Mutex::new(seed),
            connections: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, target, watcher, Arc::clone(&shared)));
        Ok(Proxy {
            addr,
            target,
            tls: false,
            control,
            shared,
            accept,
        })
    }

    /// A proxy in front of `server`'s TCP port (its TLS port when it speaks TLS: the
    /// proxy then forwards TLS, and [`url`](Self::url) is `rediss://`; the server's
    /// certificate names `127.0.0.1`, so it is valid for the proxy's address too).
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub async fn for_server(server: &Server) -> Result<Proxy, TestkitError> {
        let mut proxy = Self::start(SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()))).await?;
        proxy.tls = server.is_tls();
        Ok(proxy)
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address traffic is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `redis://127.0.0.1:PORT` of the proxy (no password: add one if the target needs it);
    /// `rediss://` in front of a server that speaks TLS ([`for_server`](Self::for_server)).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://{}", self.addr)
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.control.borrow().mode
    }

    /// Switches the mode; open connections follow at once.
    pub fn set_mode(&self, mode: Mode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// Back to [`Mode::Pass`]; connections that lost data in a blackhole are reset.
    pub fn heal(&self) {
        self.set_mode(Mode::Pass);
    }

    /// What the proxy did so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            connections: self.shared.connections.load(Ordering::Relaxed),
            forwarded: self.shared.forwarded.load(Ordering::Relaxed),
            lost: self.shared.lost.load(Ordering::Relaxed),
            resets: self.shared.resets.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.control.send_modify(|c| c.shutdown = true);
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mut control: watch::Receiver<Control>,
    shared: Arc<Shared>,
) {
    loop {
        tokio::select! {
            changed = control.changed() => {
                if changed.is_err() || control.borrow().shutdown {
                    return;
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(connection(client, target, control.clone(), Arc::clone(&shared)));
                }
                Err(error) => {
                    tracing::debug!(%error, "proxy accept failed");
                    sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
}

/// Why a pump stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A peer closed or failed: close the other side normally.
    Closed,
    /// The proxy resets the connection.
    Reset,
}

async fn connection(
    client: TcpStream,
    target: SocketAddr,
    control: watch::Receiver<Control>,
    shared: Arc<Shared>,
) {
    let now = *control.borrow();
    if now.shutdown || now.mode == Mode::Reset {
        reset(&client, &shared);
        return;
    }
    let server = match timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(server)) => server,
        _ => {
            reset(&client, &shared);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let tainted = AtomicBool::new(false);
    let (stop, stopped) = watch::channel(false);
    let to_server = Pump {
        reader: client_read,
        writer: server_write,
        to_client: false,
        control: control.clone(),
        stop: &stop,
        stopped: stopped.clone(),
        tainted: &tainted,
        shared: &shared,
    };
    let to_client = Pump {
        reader: server_read,
        writer: client_write,
        to_client: true,
        control,
        stop: &stop,
        stopped,
        tainted: &tainted,
        shared: &shared,
    };
    tokio::join!(to_server.run(), to_client.run());
}

/// Closes `socket` with a TCP reset instead of an orderly shutdown.
fn reset(socket: &TcpStream, shared: &Shared) {
    let _ = socket.set_zero_linger();
    shared.resets.fetch_add(1, Ordering::Relaxed);
}

/// One direction of one connection.
struct Pump<'a> {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    to_client: bool,
    control: watch::Receiver<Control>,
    /// Tells the other direction to stop.
    stop: &'a watch::Sender<bool>,
    stopped: watch::Receiver<bool>,
    /// Data was lost in a blackhole: reset when it ends.
    tainted: &'a AtomicBool,
    shared: &'a Shared,
}

impl Pump<'_> {
    async fn run(mut self) {
        let end = self.pump().await;
        if end == End::Reset {
            // Both sockets of the connection: the halves of this direction hold one each.
            let _ = self.reader.as_ref().set_zero_linger();
            let _ = self.writer.as_ref().set_zero_linger();
            self.shared.resets.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self.writer.shutdown().await;
        }
        let _ = self.stop.send(true);
    }

    async fn pump(&mut self) -> End {
        let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut last_due = Instant::now();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let next_due = queue.front().map(|(due, _)| *due);
            tokio::select! {
                biased;
                _ = self.stopped.changed() => return End::Closed,
                changed = self.control.changed() => {
                    let now = *self.control.borrow_and_update();
                    if changed.is_err() || now.shutdown || now.mode == Mode::Reset {
                        return End::Reset;
                    }
                    if now.mode != Mode::Blackhole && self.tainted.load(Ordering::Relaxed) {
                        return End::Reset;
                    }
                }
                () = sleep_until(next_due.unwrap_or(last_due)), if next_due.is_some() => {
                    if let Some((_, chunk)) = queue.pop_front() {
                        if self.writer.write_all(&chunk).await.is_err() {
                            return End::Closed;
                        }
                        self.shared.forwarded.fetch_add(1, Ordering::Relaxed);
                    }
                }
                read = self.reader.read(&mut buf) => {
                    let n = match read {
                        Ok(0) | Err(_) => return self.flush(queue).await,
                        Ok(n) => n,
                    };
                    let now = Instant::now();
                    let mode = self.control.borrow().mode;
                    let delay = match mode {
                        Mode::Pass => Duration::ZERO,
                        Mode::Delay { to_server, to_client } => {
                            let latency = if self.to_client { to_client } else { to_server };
                            latency.sample(self.shared.unit())
                        }
                        Mode::Blackhole => {
                            self.tainted.store(true, Ordering::Relaxed);
                            self.shared.lost.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Mode::Reset => return End::Reset,
                        Mode::Drop { probability } => {
                            if self.shared.unit() < probability {
                                self.shared.lost.fetch_add(1, Ordering::Relaxed);
                                return End::Reset;
                            }
                            Duration::ZERO
                        }
                    };
                    // Never before an earlier chunk: order within a direction is kept.
                    let due = (now + delay).max(last_due);
                    last_due = due;
                    queue.push_back((due, buf[..n].to_vec()));
                }
            }
        }
    }

    /// Delivers what is queued, on time, after the reader reached its end.
    async fn flush(&mut self, queue: VecDeque<(Instant, Vec<u8>)>) -> End {
        for (due, chunk) in queue {
            sleep_until(due).await;
            if self.writer.write_all(&chunk).await.is_err() {
                return End::Closed;
            }
        }
        End::Closed
    }
}
