//! The guarded scenario: what restart quarantine's checked acquire and fencing tokens cost
//! against the plain acquire.

use std::time::{Duration, Instant};

use redquorum::Redlock;
use redquorum_testkit::{Cluster, Persistence, ServerOptions};

use super::args::Budget;
use super::harness::{BLOCK, Keys, Outcome, Progress, SETTLE, Series, lock_block, plain};
use super::model::{Metric, Results, Row, Scenario};

/// The acquire of restart quarantine (the checked script) and of fencing (two rounds),
/// against the plain acquire, in interleaved blocks on the same masters: masters of their
/// own, durable (`appendonly yes`, `appendfsync always`), as fencing tokens require.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let durable = ServerOptions::new().persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(n, &durable).await?;
    let urls = &cluster.urls();
    let ttl = Duration::from_secs(1);
    let plain_client = plain(urls).ttl(ttl).build()?;
    let checked = Redlock::builder().masters(urls).ttl(ttl).build()?;
    let fenced = Redlock::builder()
        .masters(urls)
        .ttl(ttl)
        .fencing(true)
        .build()?;
    let mut keys = Keys::new(&format!("g{n}"));
    // Brand-new masters abstain for one ttl_max (1 s here): wait until they vote.
    for client in [&checked, &fenced] {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            match client.try_acquire(&keys.fresh()).await {
                Ok(lease) => {
                    lease.release().await?;
                    break;
                }
                Err(e) if Instant::now() >= give_up => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    let clients = [&plain_client, &checked, &fenced];
    let mut series: [(Series, Series); 3] = Default::default();
    {
        let mut scratch: [(Series, Series); 3] = Default::default();
        for (client, (a, r)) in clients.iter().zip(scratch.iter_mut()) {
            lock_block(client, &mut keys, budget.warmup / 2, a, r).await;
        }
    }
    let samples = budget.samples / 2;
    let blocks = samples.div_ceil(BLOCK);
    let give_up = Instant::now() + budget.series_time;
    for block in 0..blocks {
        if Instant::now() >= give_up {
            break;
        }
        for step in 0..3 {
            let i = (block + step) % 3;
            let (a, r) = &mut series[i];
            lock_block(clients[i], &mut keys, BLOCK, a, r).await;
            tokio::time::sleep(SETTLE).await;
        }
        progress.fraction((block + 1) as f64 / blocks as f64);
    }
    let [(mut plain_a, _), (mut checked_a, _), (mut fenced_a, _)] = series;
    for (s, what) in [
        (&plain_a, "plain"),
        (&checked_a, "checked"),
        (&fenced_a, "fenced"),
    ] {
        s.warn(&format!("{what} acquire"));
    }
    let base = Row::new(Scenario::Guarded, Metric::Acquire, n, "acquire, plain")
        .condition("SET NX PX")
        .latency(&mut plain_a.samples, plain_a.errors);
    let checked = Row::new(
        Scenario::Guarded,
        Metric::AcquireChecked,
        n,
        "acquire, quarantine",
    )
    .condition("checked script")
    .latency(&mut checked_a.samples, checked_a.errors)
    .against(&base);
    let fenced = Row::new(
        Scenario::Guarded,
        Metric::AcquireFenced,
        n,
        "acquire, fencing",
    )
    .condition("two rounds")
    .latency(&mut fenced_a.samples, fenced_a.errors)
    .against(&base)
    .referring_to(&checked);
    let base = base.clone().against(&base);
    results.rows.extend([base, checked, fenced]);
    Ok(())
}
