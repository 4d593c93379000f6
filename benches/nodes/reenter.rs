//! Re-entry beside acquire: `Lease::reenter` asks no master, so it costs what taking a
//! child guard in memory costs, against the quorum round of an acquire with the same
//! client (docs/design.md §14).

use std::time::Instant;

use redquorum::Redlock;

use crate::args::Budget;
use crate::harness::{Outcome, Series};
use crate::model::Pcts;

/// Re-entries timed per held lease.
const PER_LEASE: usize = 100;

/// Acquire latency on fresh resources, and the latency of `reenter` (and leaving the child)
/// on each lease so acquired; one line saying both, in µs.
pub(crate) async fn run(budget: &Budget, n: usize, client: &Redlock) -> Outcome<String> {
    let samples = (budget.samples / 10).max(50);
    let mut acquire = Series::with_capacity(samples);
    let mut reenter = Series::with_capacity(samples * PER_LEASE);
    let until = Instant::now() + budget.series_time;
    for i in 0..samples {
        if Instant::now() >= until {
            break;
        }
        let resource = format!("bench:reenter:{}:{i}", std::process::id());
        let started = Instant::now();
        let lease = match client.acquire(&resource).await {
            Ok(lease) => lease,
            Err(e) => {
                acquire.error(e);
                continue;
            }
        };
        acquire.push(started.elapsed());
        for _ in 0..PER_LEASE {
            let started = Instant::now();
            lease.reenter().release();
            reenter.push(started.elapsed());
        }
        lease.release().await?;
    }
    acquire.warn("acquire");
    let p50 = |series: &mut Series| Pcts::of(&mut series.samples).map_or(f64::NAN, |p| p.p50);
    let (acquire_p50, reenter_p50) = (p50(&mut acquire), p50(&mut reenter));
    let ratio = acquire_p50 / reenter_p50.max(f64::MIN_POSITIVE);
    Ok(format!(
        "N={n}: reenter p50 {reenter_p50:.3} µs ({} samples, no round trip) beside acquire \
         p50 {acquire_p50:.1} µs ({} samples): acquire costs {ratio:.0}× a re-entry",
        reenter.samples.len(),
        acquire.samples.len(),
    ))
}
