//! The semaphore's rows (docs/design.md §15): acquire and release p50 of `k` permits of a
//! semaphore whose slots are free, beside the plain lock's, from one client, in
//! interleaved blocks. Printed after the main table and written to `semaphore.txt`.

use std::time::Instant;

use redquorum::Redlock;

use super::harness::{BLOCK, Keys, Outcome, SETTLE, Series, lock_block};

/// The semaphore's limit in these rows: each acquisition reads every slot on every master.
const LIMIT: u32 = 4;

/// Acquire and release of `k` permits, one after the other, `count` times.
async fn permits_block(
    client: &Redlock,
    name: &str,
    k: u32,
    count: usize,
    acquire: &mut Series,
    release: &mut Series,
) -> Outcome<()> {
    let semaphore = client.semaphore(name, LIMIT)?;
    for _ in 0..count {
        let t0 = Instant::now();
        let lease = match semaphore.acquire(k).await {
            Ok(lease) => lease,
            Err(e) => {
                acquire.error(e);
                continue;
            }
        };
        let a = t0.elapsed();
        let t1 = Instant::now();
        if let Err(e) = lease.release().await {
            release.error(e);
            continue;
        }
        acquire.push(a);
        release.push(t1.elapsed());
    }
    Ok(())
}

fn p50_ms(series: &Series) -> f64 {
    let mut s = series.samples.clone();
    s.sort_unstable();
    s.get(s.len() / 2).map_or(f64::NAN, |ns| *ns as f64 / 1e6)
}

/// The rows at `n` masters: `samples` of each kind, in blocks.
pub(crate) async fn run(client: &Redlock, n: usize, samples: usize) -> Outcome<String> {
    let mut keys = Keys::new(&format!("sem{n}"));
    let mut series: Vec<(String, Series, Series)> = ["lock", "semaphore k=1", "semaphore k=2"]
        .into_iter()
        .map(|what| (what.to_owned(), Series::default(), Series::default()))
        .collect();
    let name = keys.fresh();
    let blocks = samples.div_ceil(BLOCK).max(1);
    // Warm-up: connections and the scripts' first runs.
    let (mut a, mut r) = (Series::default(), Series::default());
    lock_block(client, &mut keys, 20, &mut a, &mut r).await;
    permits_block(client, &name, 1, 20, &mut a, &mut r).await?;
    for block in 0..blocks {
        for step in 0..3 {
            let i = (block + step) % 3;
            let (_, acquire, release) = &mut series[i];
            match i {
                0 => lock_block(client, &mut keys, BLOCK, acquire, release).await,
                k => permits_block(client, &name, k as u32, BLOCK, acquire, release).await?,
            }
            tokio::time::sleep(SETTLE).await;
        }
    }
    let lock_acquire = p50_ms(&series[0].1);
    let mut out = format!(
        "semaphore (limit {LIMIT}, free slots), N={n}, p50 of {} samples each:\n",
        series[0].1.samples.len()
    );
    for (what, acquire, release) in &series {
        acquire.warn(&format!("{what} acquire"));
        release.warn(&format!("{what} release"));
        out.push_str(&format!(
            "  {what:<14} acquire {:>6.3} ms ({:>4.2}x lock)  release {:>6.3} ms\n",
            p50_ms(acquire),
            p50_ms(acquire) / lock_acquire,
            p50_ms(release)
        ));
    }
    Ok(out)
}
