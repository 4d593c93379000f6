//! The read-write lock beside the mutex at N = 5: acquire and release p50 of a read lease,
//! of a write lease and of a mutex lease, each on fresh resources with one client, so
//! nothing waits (docs/design.md §16).

use std::time::Instant;

use redquorum::Redlock;

use crate::args::Budget;
use crate::harness::{Outcome, Series};
use crate::model::Pcts;

/// What one series measures.
#[derive(Clone, Copy)]
enum Kind {
    Mutex,
    Read,
    Write,
}

/// One line: the acquire and release p50 of each kind, in µs.
pub(crate) async fn run(budget: &Budget, n: usize, client: &Redlock) -> Outcome<String> {
    let samples = (budget.samples / 10).max(50);
    let mut parts = Vec::new();
    for (kind, label) in [
        (Kind::Mutex, "mutex"),
        (Kind::Read, "read"),
        (Kind::Write, "write"),
    ] {
        let mut acquire = Series::with_capacity(samples);
        let mut release = Series::with_capacity(samples);
        let until = Instant::now() + budget.series_time / 3;
        for i in 0..samples {
            if Instant::now() >= until {
                break;
            }
            let resource = format!("bench:rw:{label}:{}:{i}", std::process::id());
            let started = Instant::now();
            let acquired = match kind {
                Kind::Mutex => client.acquire(&resource).await,
                Kind::Read => client.rwlock(&resource).read().await,
                Kind::Write => client.rwlock(&resource).write().await,
            };
            let lease = match acquired {
                Ok(lease) => lease,
                Err(e) => {
                    acquire.error(e);
                    continue;
                }
            };
            acquire.push(started.elapsed());
            let started = Instant::now();
            match lease.release().await {
                Ok(_) => release.push(started.elapsed()),
                Err(e) => release.error(e),
            }
        }
        acquire.warn(label);
        release.warn(label);
        let p50 = |series: &mut Series| Pcts::of(&mut series.samples).map_or(f64::NAN, |p| p.p50);
        parts.push(format!(
            "{label} acquire p50 {:.1} µs, release p50 {:.1} µs ({} samples)",
            p50(&mut acquire),
            p50(&mut release),
            acquire.samples.len()
        ));
    }
    Ok(format!("N={n}: {}", parts.join("; ")))
}
