//! The library's metrics, scraped as Prometheus text.
//!
//! Installs a Prometheus recorder for the `metrics` facade, starts 3 `redis-server`
//! masters on loopback, runs a small contended workload on them (waiters handed the lock
//! by release notices, a busy `try_acquire`, a watchdog extending a lease, a lease lost at
//! its `max_hold`), then serves the metrics over HTTP on 127.0.0.1 until it is stopped
//! (Ctrl-C or SIGTERM) or its serving time runs out. It prints the address to scrape:
//!
//! ```text
//! cargo run --example metrics --features metrics -- --port 9898 --serve-for 60
//! curl http://127.0.0.1:9898/metrics
//! ```
//!
//! `--port 0` (the default) takes any free port; `--serve-for` defaults to 60 seconds.
//! docs/observability.md lists every metric and its labels.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use redquorum::{Retry, Timeouts, Waiting};
use std::io::Write as _;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redquorum::{AcquireOptions, ErrorKind, Redlock};
use redquorum_testkit::Cluster;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{Signal, SignalKind, signal};

const RESOURCE: &str = "orders:42";
const WORKERS: usize = 3;
const SECTIONS: usize = 4;

/// The command line: where to serve, and for how long.
struct Args {
    port: u16,
    serve_for: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        port: 0,
        serve_for: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value, such as `{flag} 9898`"))
        };
        match flag.as_str() {
            "--port" => {
                let v = value()?;
                args.port = v
                    .parse()
                    .map_err(|_| format!("--port {v}: give a port number from 0 to 65535"))?;
            }
            "--serve-for" => {
                let v = value()?;
                let secs: u64 = v.parse().map_err(|_| {
                    format!("--serve-for {v}: give whole seconds, such as `--serve-for 60`")
                })?;
                args.serve_for = Duration::from_secs(secs);
            }
            other => {
                return Err(format!(
                    "unknown argument {other}: use --port N and --serve-for SECONDS"
                ));
            }
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("metrics example: {problem}");
            std::process::exit(2);
        }
    };
    // From the start, so that a stop request during the workload also stops the masters.
    let mut stop = Stop::new()?;
    // Before any client is built, so that each metric gets its help text.
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])?
        .set_buckets_for_metric(
            Matcher::Full("redquorum_acquire_attempts".into()),
            &[1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0],
        )?
        .install_recorder()?;

    println!("starting 3 redis-server masters on 127.0.0.1 ...");
    let cluster = Cluster::start(3).await?;
    let client = Redlock::builder()
        .masters(cluster.urls())
        .ttl("2s")
        .timeouts(Timeouts::new().node("100ms"))
        // Waiters wake on the holder's release notice long before this pause ends.
        .retry(Retry::new().delay("2s").jitter("20ms").wait("20s"))
        // The workers below share this client and queue for one lock: they wait for each
        // other's leases instead of failing at once with AlreadyHeld.
        .waiting(Waiting::new().own_leases(true))
        .build()?;
    // Brand-new masters: say so, so that they vote at once (no restart quarantine wait).
    client.init_cluster().await?;

    let stopped = tokio::select! {
        done = workload(&client) => {
            done?;
            false
        }
        () = stop.requested() => true,
    };
    if !stopped {
        let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
        let address = listener.local_addr()?;
        println!("metrics: http://{address}/metrics");
        std::io::stdout().flush()?;
        serve(&listener, &prometheus, args.serve_for, &mut stop).await?;
    }

    client.shutdown().await;
    drop(cluster);
    println!("stopped");
    Ok(())
}

/// A little of everything the metrics count.
async fn workload(client: &Redlock) -> Result<(), Box<dyn std::error::Error>> {
    // Workers taking turns on one lock: each waiter is handed the lock by a release notice.
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                let lease = client.acquire(RESOURCE).await?;
                tokio::time::sleep(Duration::from_millis(30)).await;
                lease.release().await?;
            }
            Ok::<_, redquorum::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }

    // A hand-off: a waiter, subscribed to the lock's release notices, is woken by the
    // holder's release and takes the lock (its own pause, 2 s, is far from over).
    let lease = client.acquire(RESOURCE).await?;
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(RESOURCE).await?.release().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    lease.release().await?;
    waiter.await??;

    // A lock that is busy: one attempt, refused.
    let lease = client.acquire(RESOURCE).await?;
    match client.try_acquire(RESOURCE).await {
        Err(e) if e.kind() == ErrorKind::Contended => {}
        other => return Err(format!("expected a busy lock, got {other:?}").into()),
    }
    lease.release().await?;

    // A watchdog extending a 1 s lease (every third of it) while the work takes longer.
    let extended = AcquireOptions::new().ttl("1s");
    client
        .with_lock(RESOURCE, &extended, |_| {
            tokio::time::sleep(Duration::from_millis(800))
        })
        .await?;

    // Work that outlives its `max_hold`: the lease is lost and the work dropped.
    let capped = AcquireOptions::new().ttl("1s").max_hold("200ms");
    match client
        .with_lock(RESOURCE, &capped, |_| {
            tokio::time::sleep(Duration::from_secs(2))
        })
        .await
    {
        Err(e) if e.kind() == ErrorKind::LeaseLost => {}
        other => return Err(format!("expected a lost lease, got {other:?}").into()),
    }
    Ok(())
}

/// SIGTERM and SIGINT (Ctrl-C), caught so that the masters are stopped before exiting.
struct Stop {
    terminate: Signal,
    interrupt: Signal,
}

impl Stop {
    fn new() -> std::io::Result<Stop> {
        Ok(Stop {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Returns once the process is told to stop.
    async fn requested(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// Answers every HTTP request with the Prometheus text until `serve_for` has passed or
/// the process is told to stop.
async fn serve(
    listener: &TcpListener,
    prometheus: &PrometheusHandle,
    serve_for: Duration,
    stop: &mut Stop,
) -> std::io::Result<()> {
    let until = tokio::time::sleep(serve_for);
    tokio::pin!(until);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let body = prometheus.render();
                tokio::spawn(async move {
                    let answer = tokio::time::timeout(Duration::from_secs(5), respond(stream, body));
                    if let Ok(Err(e)) = answer.await {
                        eprintln!("metrics example: a scrape failed: {e}");
                    }
                });
            }
            () = stop.requested() => return Ok(()),
            () = &mut until => return Ok(()),
        }
    }
}

/// Reads one request's head and answers it with `body`, whatever was asked.
async fn respond(mut stream: TcpStream, body: String) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
