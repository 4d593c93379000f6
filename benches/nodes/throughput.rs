//! The throughput scenario: many tasks sharing one client, each on its own fresh resources,
//! against raw `SET`+`DEL` pairs from as many tasks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::Redlock;

use super::args::Budget;
use super::harness::{Keys, Outcome, Tally, set_nx};
use super::model::{Metric, Results, Row, Scenario};

/// Runs `tasks` concurrent loops of `op` for `window`, each at most `cap` times; returns the
/// operations done and the time from the start until the last task finished.
async fn window<F, Fut>(
    tasks: usize,
    window: Duration,
    cap: usize,
    op: F,
) -> Outcome<(Tally, Duration)>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let op = op.clone();
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            for i in 0..cap {
                if Instant::now() >= end {
                    break;
                }
                match op(task, i).await {
                    Ok(()) => tally.done += 1,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for handle in handles {
        let t = handle.await?;
        total.done += t.done;
        total.errors += t.errors;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    if let Some(e) = &total.first_error {
        eprintln!(
            "  warning: {} operations failed; the first: {e}",
            total.errors
        );
    }
    Ok((total, start.elapsed()))
}

/// Many tasks: raw SET+DEL on one master, then acquire+release through one shared client.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    raw: &MultiplexedConnection,
    client: &Redlock,
    results: &mut Results,
) -> Outcome<()> {
    // Generous: the time window ends every loop long before.
    let cap = 1_000_000;
    let prefix = Arc::<str>::from(Keys::new(&format!("t{n}")).prefix);
    let raw_op = {
        let conn = raw.clone();
        let prefix = Arc::clone(&prefix);
        move |task: usize, i: usize| {
            let mut conn = conn.clone();
            let key = format!("{prefix}raw:{task}:{i}");
            async move {
                set_nx(&key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    };
    let lock_op = {
        let client = client.clone();
        let prefix = Arc::clone(&prefix);
        move |task: usize, i: usize| {
            let client = client.clone();
            let resource = format!("{prefix}lock:{task}:{i}");
            async move {
                let lease = client.acquire(&resource).await.map_err(|e| e.to_string())?;
                lease.release().await.map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    };
    let warm = budget.window / 4;
    window(budget.clients, warm, cap, raw_op.clone()).await?;
    let (raw_tally, raw_time) = window(budget.clients, budget.window, cap, raw_op).await?;
    window(budget.clients, warm, cap, lock_op.clone()).await?;
    let (lock_tally, lock_time) = window(budget.clients, budget.window, cap, lock_op).await?;

    let clients = format!("{} clients", budget.clients);
    let base = Row::new(Scenario::Baseline, Metric::RawPairsMany, n, "SET+DEL pairs")
        .condition(clients.clone())
        .rate(raw_tally.done, raw_time, raw_tally.errors);
    let row = Row::new(
        Scenario::Throughput,
        Metric::PairsMany,
        n,
        "acquire+release pairs",
    )
    .condition(clients)
    .rate(lock_tally.done, lock_time, lock_tally.errors)
    .against(&base);
    results.rows.push(base.clone().against(&base));
    results.rows.push(row);
    Ok(())
}
