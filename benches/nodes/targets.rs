//! The goals the run is judged by, and the ratios that explain them.

use super::contended::Waiting;
use super::model::{Metric, Results, Scenario, Target};

/// The goals of the issue, as ratios of this run.
pub(crate) fn of(results: &Results) -> Vec<Target> {
    let mut targets = Vec::new();
    for (n, limit) in [(5, 1.3), (9, 1.6)] {
        if let Some(v) = results
            .find(Scenario::Uncontended, Metric::Acquire, n)
            .and_then(|r| r.versus.as_ref())
            .and_then(|v| v.latency)
        {
            targets.push(Target {
                goal: format!("uncontended acquire p50 at N={n} / baseline SET NX PX p50"),
                ratio: v[0],
                limit,
                at_least: false,
            });
        }
    }
    for row in results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Degraded && r.metric == Metric::Acquire)
    {
        if let Some(h) = row.reference.as_ref().and_then(|h| h.latency) {
            targets.push(Target {
                goal: format!(
                    "acquire p99 with {} / healthy N={} p99",
                    row.condition, row.n
                ),
                ratio: h[2],
                limit: 1.5,
                at_least: false,
            });
        }
    }
    for row in results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Guarded && r.metric == Metric::AcquireFenced)
    {
        // Tokens against no tokens on the same client: fencing needs restart quarantine
        // (on by default), whose checked acquire is the one without tokens. The ratio to
        // the plain `SET NX PX` acquire (quarantine off) is in the table.
        if let Some(v) = row.reference.as_ref().and_then(|v| v.latency) {
            targets.push(Target {
                goal: format!(
                    "acquire with fencing p50 at N={} / quarantine acquire p50",
                    row.n
                ),
                ratio: v[0],
                limit: 2.2,
                at_least: false,
            });
        }
    }
    for row in results.rows.iter().filter(|r| {
        r.scenario == Scenario::Contended
            && r.metric == Metric::HandOff
            && r.condition.contains(Waiting::Notified.label())
    }) {
        let base = results
            .find(Scenario::Baseline, Metric::SetRoundTrip, row.n)
            .and_then(|b| b.latency);
        if let (Some(l), Some(b)) = (row.latency, base) {
            targets.push(Target {
                goal: format!(
                    "hand-off p50 with notifications at N={} / baseline SET NX PX p50",
                    row.n
                ),
                ratio: l.p50 / b.p50,
                limit: 3.0,
                at_least: false,
            });
        }
    }
    if let Some(rate) = results
        .find(Scenario::Uncontended, Metric::Pairs, 5)
        .and_then(|r| r.versus.as_ref())
        .and_then(|v| v.rate)
    {
        targets.push(Target {
            goal: "acquire+release pairs/s at N=5 / raw SET+DEL pairs/s, one client".to_owned(),
            ratio: rate,
            limit: 0.6,
            at_least: true,
        });
    }
    targets
}

/// Ratios that explain the targets: what the machine allows (the raw fan-out against one
/// round trip) and what the library adds to it (acquire against the raw fan-out).
pub(crate) fn context(results: &Results) -> Vec<(String, f64)> {
    let mut lines = Vec::new();
    for n in [5, 9] {
        let p50 = |metric| {
            results
                .find(Scenario::Uncontended, metric, n)
                .and_then(|r| r.latency)
                .map(|l| l.p50)
        };
        let base = results
            .find(Scenario::Baseline, Metric::SetRoundTrip, n)
            .and_then(|r| r.latency)
            .map(|l| l.p50);
        if let (Some(fan), Some(base)) = (p50(Metric::FanOut), base) {
            lines.push((
                format!("raw fan-out quorum-th reply p50 at N={n} / baseline p50 (the limit here)"),
                fan / base,
            ));
        }
        if let (Some(acquire), Some(fan)) = (p50(Metric::Acquire), p50(Metric::FanOut)) {
            lines.push((
                format!("acquire p50 at N={n} / raw fan-out p50 (what the library adds)"),
                acquire / fan,
            ));
        }
        let rate = |scenario, metric| results.find(scenario, metric, n).and_then(|r| r.rate);
        let raw_pairs = rate(Scenario::Baseline, Metric::RawPairs);
        let fan_pairs = rate(Scenario::Uncontended, Metric::FanOutPairs);
        let pairs = rate(Scenario::Uncontended, Metric::Pairs);
        if let (Some(fan), Some(raw)) = (fan_pairs, raw_pairs) {
            lines.push((
                format!("raw fan-out pairs/s at N={n} / raw SET+DEL pairs/s (the limit here)"),
                fan / raw,
            ));
        }
        if let (Some(pairs), Some(fan)) = (pairs, fan_pairs) {
            lines.push((
                format!("acquire+release pairs/s at N={n} / raw fan-out pairs/s"),
                pairs / fan,
            ));
        }
    }
    lines
}
