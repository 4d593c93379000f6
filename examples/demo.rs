//! The library's main job on local masters it starts itself.
//!
//! Starts 5 independent `redis-server` masters on loopback, lets 4 workers take turns on one
//! resource (each critical section increments a counter that lives outside the lock, on a
//! separate server), then kills one master and pauses another mid-run and keeps going: a
//! quorum of 3 out of 5 is all the lock needs. At the end it checks that no increment was
//! lost, which is what mutual exclusion buys.
//!
//! Run it with `cargo run --example demo` (the README's first command).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use redquorum::{Retry, Timeouts};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{MasterOutcome, Redlock};
use redquorum_testkit::{Cluster, Server, ServerOptions};

const WORKERS: usize = 4;
const SECTIONS_PER_PHASE: usize = 5;
const RESOURCE: &str = "orders:42";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("starting 5 redis-server masters and 1 counter store on 127.0.0.1 ...");
    let mut cluster = Cluster::start(5).await?;
    let store = Server::start(&ServerOptions::new()).await?;
    for (i, url) in cluster.urls().iter().enumerate() {
        println!("  master {i}: {url}");
    }
    println!("  counter store: {}\n", store.url());

    // Restart quarantine: brand-new masters may have "lost" locks they never had, so they
    // do not vote until ttl_max (here the 5 s TTL) has passed.
    println!("fresh masters abstain until they are one ttl_max old (restart quarantine) ...");
    let started = std::time::Instant::now();
    let probe = client(&cluster)?;
    probe.acquire("demo:warm-up").await?.release().await?;
    println!(
        "  masters vote after {:.1} s\n",
        started.elapsed().as_secs_f64()
    );

    println!("votes: + granted, - held by another, x failed, ~ abstaining, . not needed\n");
    let healthy = Arc::new(AtomicBool::new(true));
    let done = Arc::new(AtomicUsize::new(0));
    for phase in ["all 5 masters up", "master 1 killed, master 3 paused"] {
        println!("== phase: {phase}");
        run_phase(&cluster, &store, &done).await?;
        if healthy.swap(false, Ordering::SeqCst) {
            cluster.server_mut(1).kill()?;
            cluster.server_mut(3).pause()?;
        }
    }
    cluster.server_mut(3).resume()?;

    let mut conn = redis::Client::open(store.url())?
        .get_multiplexed_async_connection()
        .await?;
    let counted: usize = conn.get("demo:counter").await?;
    let done = done.load(Ordering::SeqCst);
    println!("\ncritical sections completed: {done}; counter increments seen: {counted}");
    if counted == done {
        println!("no increment was lost: the workers never overlapped");
        Ok(())
    } else {
        Err(format!("lost {} increments", done - counted).into())
    }
}

/// A client over the demo's masters: 5 s locks, waiting up to 30 s for a turn.
fn client(cluster: &Cluster) -> Result<Redlock, redquorum::Error> {
    Redlock::builder()
        .masters(cluster.urls())
        .ttl("5s")
        .timeouts(Timeouts::new().node("50ms"))
        .retry(Retry::new().delay("5ms").jitter("20ms").wait("30s"))
        .build()
}

/// Every worker does `SECTIONS_PER_PHASE` critical sections on the shared resource.
async fn run_phase(
    cluster: &Cluster,
    store: &Server,
    done: &Arc<AtomicUsize>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let client = client(cluster)?;
        let store_url = store.url();
        let done = Arc::clone(done);
        workers.push(tokio::spawn(async move {
            let mut conn = redis::Client::open(store_url)?
                .get_multiplexed_async_connection()
                .await?;
            for _ in 0..SECTIONS_PER_PHASE {
                let lease = client.acquire(RESOURCE).await?;
                let votes: String = lease
                    .masters()
                    .iter()
                    .map(|r| match r.outcome() {
                        MasterOutcome::Granted => '+',
                        MasterOutcome::Failed(_) => 'x',
                        MasterOutcome::Pending => '.',
                        MasterOutcome::Abstained { .. } => '~',
                        _ => '-',
                    })
                    .collect();
                // The critical section: a read-modify-write that any overlap would break.
                let n: Option<usize> = conn.get("demo:counter").await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let next = n.unwrap_or(0) + 1;
                let _: () = conn.set("demo:counter", next).await?;
                println!(
                    "  worker {w} holds {RESOURCE} (masters [{votes}], {:>4} ms left): counter -> {next}",
                    lease.remaining().as_millis()
                );
                done.fetch_add(1, Ordering::SeqCst);
                lease.release().await?;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for worker in workers {
        worker.await?.map_err(|e| e.to_string())?;
    }
    Ok(())
}
