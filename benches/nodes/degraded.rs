//! The degraded scenario: acquire latency with one master paused and with one killed,
//! next to the healthy cluster.

use std::time::{Duration, Instant};

use redquorum::{MasterOutcome, Redlock};
use redquorum_testkit::Cluster;

use super::args::Budget;
use super::harness::{
    BLOCK, Keys, Outcome, Progress, SETTLE, Series, connect_all, lock_block, plain, raw_block,
};
use super::model::{Metric, Results, Row, Scenario};

/// Acquire latency with one master paused and with one killed, next to the healthy cluster.
///
/// The three conditions alternate in cycles (healthy, paused, healthy, killed, then the
/// killed master is restarted empty and the client reconnects), each with a block of
/// baseline round trips, so that all of them see the same machine load.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let mut cluster = Cluster::start(n).await?;
    let urls = cluster.urls();
    // The baseline takes the masters that stay up in turn.
    let mut base_conns = connect_all(&urls[..n - 1]).await?;
    let client = plain(&urls).build()?;
    let mut keys = Keys::new(&format!("d{n}"));
    let victim = n - 1;
    let cycles = budget.samples.div_ceil(2 * BLOCK).max(1);
    // Operations discarded after each change, while the client notices it.
    let settle = (budget.warmup / 4).max(10);

    let mut scratch = (Series::default(), Series::default());
    raw_block(
        &mut base_conns,
        &mut keys,
        budget.warmup,
        &mut scratch.0,
        &mut scratch.1,
    )
    .await;
    lock_block(
        &client,
        &mut keys,
        budget.warmup,
        &mut scratch.0,
        &mut scratch.1,
    )
    .await;

    let mut rtt = Series::default();
    let mut healthy = (Series::default(), Series::default());
    let mut paused = (Series::default(), Series::default());
    let mut killed = (Series::default(), Series::default());
    let give_up = Instant::now() + budget.series_time * 2;
    for cycle in 0..cycles {
        if Instant::now() >= give_up {
            eprintln!("  note: degraded stopped after {cycle} of {cycles} cycles (time budget)");
            break;
        }
        raw_block(
            &mut base_conns,
            &mut keys,
            BLOCK / 2,
            &mut rtt,
            &mut scratch.1,
        )
        .await;
        lock_block(
            &client,
            &mut keys,
            BLOCK / 2,
            &mut healthy.0,
            &mut healthy.1,
        )
        .await;
        tokio::time::sleep(SETTLE).await;

        cluster.server_mut(victim).pause()?;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;
        lock_block(&client, &mut keys, BLOCK, &mut paused.0, &mut paused.1).await;
        cluster.server_mut(victim).resume()?;
        // The resumed master works off the requests queued while it was stopped.
        tokio::time::sleep(Duration::from_millis(20)).await;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;

        raw_block(
            &mut base_conns,
            &mut keys,
            BLOCK / 2,
            &mut rtt,
            &mut scratch.1,
        )
        .await;
        lock_block(
            &client,
            &mut keys,
            BLOCK / 2,
            &mut healthy.0,
            &mut healthy.1,
        )
        .await;
        tokio::time::sleep(SETTLE).await;

        cluster.server_mut(victim).kill()?;
        lock_block(&client, &mut keys, settle, &mut scratch.0, &mut scratch.1).await;
        lock_block(&client, &mut keys, BLOCK, &mut killed.0, &mut killed.1).await;
        cluster.server_mut(victim).restart(false).await?;
        wait_all_granted(&client, &mut keys).await?;
        progress.fraction((cycle + 1) as f64 / cycles as f64);
    }

    rtt.warn("baseline SET");
    let base = Row::new(
        Scenario::Degraded,
        Metric::SetRoundTrip,
        n,
        "SET NX PX round trip",
    )
    .condition("each live one in turn")
    .latency(&mut rtt.samples, rtt.errors);
    let mut rows = Vec::new();
    let mut healthy_row = None;
    for (condition, series) in [
        ("healthy".to_owned(), &mut healthy),
        (format!("1 of {n} paused"), &mut paused),
        (format!("1 of {n} killed"), &mut killed),
    ] {
        series.0.warn(&format!("acquire ({condition})"));
        let mut row = Row::new(Scenario::Degraded, Metric::Acquire, n, "acquire")
            .condition(condition)
            .latency(&mut series.0.samples, series.0.errors)
            .against(&base);
        match &healthy_row {
            None => healthy_row = Some(row.clone()),
            Some(h) => row = row.referring_to(h),
        }
        rows.push(row);
    }
    results.rows.push(base.clone().against(&base));
    results.rows.extend(rows);
    drop(client);
    drop(cluster);
    Ok(())
}

/// Waits (at most 5 s) until no master fails an acquire any more, i.e. the client has
/// reconnected to a restarted master.
async fn wait_all_granted(client: &Redlock, keys: &mut Keys) -> Outcome<()> {
    let give_up = Instant::now() + Duration::from_secs(5);
    for _ in 0..5_000 {
        let lease = client.acquire(&keys.fresh()).await?;
        // Masters that answer after the quorum show as pending: only a failure means the
        // restarted one is not back yet.
        let all = !lease
            .masters()
            .iter()
            .any(|m| matches!(m.outcome(), MasterOutcome::Failed(_)));
        lease.release().await?;
        if all {
            return Ok(());
        }
        if Instant::now() >= give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err("the client did not reconnect to the restarted master within 5 s".into())
}
