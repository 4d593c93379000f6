//! CPU cost of the library's own hot path, without any network: the quorum tally over N
//! replies, the deadline math of an acquire, and lock-value generation.
//!
//! Needs `--cfg redquorum_bench_internals`, which this repository's `.cargo/config.toml`
//! sets: `cargo bench --bench micro`. Compare runs with criterion's
//! `-- --save-baseline before` and `-- --baseline before`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use redquorum::bench_internals;
use tokio::time::Instant;

/// The node counts the node-count harness measures.
const NODES: [usize; 5] = [1, 3, 5, 7, 9];

/// One acquire round's tally: replies counted until the decision, per N. `Throughput` is the
/// number of replies the round looks at.
fn tally(c: &mut Criterion) {
    let mut group = c.benchmark_group("tally_round");
    for n in NODES {
        let q = bench_internals::quorum(n);
        // Best case: the first `q` replies grant and decide the round.
        let granted = vec![0u8; n];
        group.throughput(Throughput::Elements(q as u64));
        group.bench_with_input(BenchmarkId::new("all_granted", n), &granted, |b, votes| {
            b.iter(|| bench_internals::tally_round(black_box(n), black_box(votes)));
        });
        // Worst case: grants, denials and failures interleave so that only the last reply
        // decides.
        let mixed: Vec<u8> = (0..n).map(|i| (i % 3) as u8).collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("mixed", n), &mixed, |b, votes| {
            b.iter(|| bench_internals::tally_round(black_box(n), black_box(votes)));
        });
    }
    group.finish();
}

/// The validity computation made once per successful acquire and extend.
fn deadline(c: &mut Criterion) {
    let mut group = c.benchmark_group("deadline");
    group.throughput(Throughput::Elements(1));
    let t0 = Instant::now();
    let now = t0 + Duration::from_micros(350);
    group.bench_function("acquire_validity", |b| {
        b.iter(|| {
            bench_internals::deadline(
                black_box(t0),
                black_box(Duration::from_secs(10)),
                black_box(0.01),
                black_box(now),
                black_box(Duration::ZERO),
            )
        });
    });
    group.finish();
}

/// A fresh 128-bit lock value per acquire attempt; `Throughput` is its random bytes.
fn random_value(c: &mut Criterion) {
    let mut group = c.benchmark_group("random_value");
    group.throughput(Throughput::Bytes(16));
    group.bench_function("u128_hex", |b| b.iter(bench_internals::random_value));
    group.finish();
}

criterion_group!(micro, tally, deadline, random_value);
criterion_main!(micro);
