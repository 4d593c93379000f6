//! The lock family: acquire and release latency of each lock type at one N, against the
//! mutex (`acquire` of one resource) measured in the same interleaved blocks, on a fresh
//! set of resources each time. One `pub(crate)` function per lock type measures its
//! blocks; [`run`] interleaves them with the mutex's and adds their rows.

use std::time::{Duration, Instant};

use redquorum::Redlock;
use redquorum_testkit::Cluster;

use super::args::Budget;
use super::harness::{BLOCK, Keys, Outcome, Progress, SETTLE, Series, lock_block, plain};
use super::model::{Metric, Results, Row, Scenario};

/// One lock type's measured acquire and release latencies.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    acquire: Series,
    release: Series,
}

/// The sizes of `acquire_many` measured: two keys, and eight.
const MANY: [usize; 2] = [2, 8];

/// Measures every lock type of the family at `n` masters of their own, in blocks
/// interleaved with the mutex's, and adds one acquire and one release row per type.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    results: &mut Results,
    progress: &Progress,
) -> Outcome<()> {
    let cluster = Cluster::start(n).await?;
    let client = plain(&cluster.urls()).ttl(Duration::from_secs(1)).build()?;
    let mut keys = Keys::new(&format!("f{n}"));
    let mut mutex = Measured::default();
    let mut many_k: Vec<Measured> = MANY.iter().map(|_| Measured::default()).collect();
    {
        let mut scratch = Measured::default();
        lock_block(
            &client,
            &mut keys,
            budget.warmup / 2,
            &mut scratch.acquire,
            &mut scratch.release,
        )
        .await;
        for &k in &MANY {
            many(&client, &mut keys, k, budget.warmup / 4, &mut scratch).await;
        }
    }
    let samples = budget.samples / 2;
    let blocks = samples.div_ceil(BLOCK);
    let give_up = Instant::now() + budget.series_time;
    for block in 0..blocks {
        if Instant::now() >= give_up {
            break;
        }
        lock_block(
            &client,
            &mut keys,
            BLOCK,
            &mut mutex.acquire,
            &mut mutex.release,
        )
        .await;
        tokio::time::sleep(SETTLE).await;
        for (&k, measured) in MANY.iter().zip(&mut many_k) {
            many(&client, &mut keys, k, BLOCK, measured).await;
            tokio::time::sleep(SETTLE).await;
        }
        progress.fraction((block + 1) as f64 / blocks as f64);
    }
    let (acquire, release) = rows(n, "mutex", "acquire of one resource", &mut mutex, None);
    let base = (acquire.clone(), release.clone());
    results.rows.extend([acquire, release]);
    for (&k, measured) in MANY.iter().zip(&mut many_k) {
        let condition = format!("{k} keys, all or none");
        let (a, r) = rows(n, "acquire_many", &condition, measured, Some(&base));
        results.rows.extend([a, r]);
    }
    Ok(())
}

/// The acquire and release rows of one lock type, with ratios to the mutex's `base`.
fn rows(
    n: usize,
    what: &str,
    condition: &str,
    measured: &mut Measured,
    base: Option<&(Row, Row)>,
) -> (Row, Row) {
    measured
        .acquire
        .warn(&format!("{what} acquire ({condition})"));
    measured
        .release
        .warn(&format!("{what} release ({condition})"));
    let acquire = Row::new(
        Scenario::Family,
        Metric::Acquire,
        n,
        &format!("{what} acquire"),
    )
    .condition(condition)
    .latency(&mut measured.acquire.samples, measured.acquire.errors);
    let release = Row::new(
        Scenario::Family,
        Metric::Release,
        n,
        &format!("{what} release"),
    )
    .condition(condition)
    .latency(&mut measured.release.samples, measured.release.errors);
    match base {
        Some((a, r)) => (acquire.against(a), release.against(r)),
        None => {
            let (a, r) = (acquire.clone(), release.clone());
            (acquire.against(&a), release.against(&r))
        }
    }
}

/// `count` acquisitions of `k` fresh resources at once (`acquire_many`), each released
/// at once.
pub(crate) async fn many(
    client: &Redlock,
    keys: &mut Keys,
    k: usize,
    count: usize,
    measured: &mut Measured,
) {
    for _ in 0..count {
        let names: Vec<String> = (0..k).map(|_| keys.fresh()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let t0 = Instant::now();
        let lease = match client.acquire_many(&names).await {
            Ok(lease) => lease,
            Err(e) => {
                measured.acquire.error(e);
                continue;
            }
        };
        let a = t0.elapsed();
        let t1 = Instant::now();
        if let Err(e) = lease.release().await {
            measured.release.error(e);
            continue;
        }
        measured.acquire.push(a);
        measured.release.push(t1.elapsed());
    }
}
