//! The terminal table, the CSV and the JSON of a run.

use std::fmt::Write as _;

use serde::Serialize;

use super::model::{Machine, Metric, Results, Row, Scenario, Target, Versus};
use super::ring;

/// A figure with a sensible number of digits, or `-`.
fn num(v: Option<f64>) -> String {
    match v {
        None => "-".to_owned(),
        Some(v) if !v.is_finite() => "-".to_owned(),
        Some(v) if v >= 10_000.0 => format!("{v:.0}"),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A ratio as `1.23x`, or empty.
fn times(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.2}x"),
        _ => String::new(),
    }
}

fn ratio(v: Option<&Versus>, pick: impl Fn(&Versus) -> Option<f64>) -> Option<f64> {
    v.and_then(pick)
}

/// The table printed at the end of a run.
pub(crate) fn table(
    machine: &Machine,
    results: &Results,
    targets: &[Target],
    context: &[(String, f64)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "redquorum node-count benchmark: {}", machine.summary());
    let _ = writeln!(
        out,
        "ratios (x) are to the baseline measured in the same N section of this run: latency to one raw\n\
         SET NX PX round trip to one master (the masters in turn), rates to raw SET+DEL pairs/s with the same\n\
         number of clients. x ref (p50, or rate) and x ref p99: acquire, release and pairs to the\n\
         raw fan-out of the same commands (the physical limit of the quorum rounds with this\n\
         client stack on this machine), the acquire script's raw fan-out to the raw SET fan-out,\n\
         degraded rows to the healthy cluster. Contended: critical sections x rate to the raw\n\
         hand-off ring and x ref to the section-bound limit; hand-off x p50/x p99 to the round\n\
         trip and x ref to the ring's hand-off."
    );
    let _ = writeln!(
        out,
        "\n{:>2}  {:<11} {:<27} {:<26} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "N",
        "scenario",
        "metric",
        "condition",
        "count",
        "p50 us",
        "p90 us",
        "p99 us",
        "max us",
        "per s",
        "x p50",
        "x p99",
        "x rate",
        "x ref",
        "x ref p99"
    );
    let mut last_n = None;
    for row in &results.rows {
        if last_n.is_some() && last_n != Some((row.n, row.scenario == Scenario::Degraded)) {
            out.push('\n');
        }
        last_n = Some((row.n, row.scenario == Scenario::Degraded));
        let l = row.latency;
        let v = row.versus.as_ref();
        let _ = writeln!(
            out,
            "{:>2}  {:<11} {:<27} {:<26} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9}",
            row.n,
            row.scenario.name(),
            row.label,
            row.condition,
            row.samples,
            num(l.map(|l| l.p50)),
            num(l.map(|l| l.p90)),
            num(l.map(|l| l.p99)),
            num(l.map(|l| l.max)),
            num(row.rate),
            times(ratio(v, |v| v.latency.map(|r| r[0]))),
            times(ratio(v, |v| v.latency.map(|r| r[2]))),
            times(ratio(v, |v| v.rate)),
            times(ratio(row.reference.as_ref(), |v| v
                .latency
                .map(|r| r[0])
                .or(v.rate))),
            times(ratio(row.reference.as_ref(), |v| v.latency.map(|r| r[2]))),
        );
        if row.errors > 0 {
            let _ = writeln!(
                out,
                "    ({} operations failed and are not counted)",
                row.errors
            );
        }
        if row.gave_up > 0 {
            let _ = writeln!(
                out,
                "    ({} acquires gave up after the wait budget and are not counted)",
                row.gave_up
            );
        }
    }
    if !targets.is_empty() {
        let _ = writeln!(out, "\ntargets (ratios measured in this run):");
        for t in targets {
            let _ = writeln!(
                out,
                "  {:<72} {:>6.2}x  {} {:.2}x  {}",
                t.goal,
                t.ratio,
                if t.at_least { ">=" } else { "<=" },
                t.limit,
                t.verdict()
            );
        }
    }
    if !context.is_empty() {
        let _ = writeln!(out, "for context:");
        for (what, ratio) in context {
            let _ = writeln!(out, "  {what:<72} {ratio:>6.2}x");
        }
    }
    let _ = writeln!(
        out,
        "load average before/after: {} / {}; {:.0} s",
        machine.load_before, machine.load_after, machine.duration_s
    );
    out
}

/// Quotes a CSV field when needed.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn csv_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => String::new(),
    }
}

/// One line per row, every figure absolute and as ratios.
pub(crate) fn csv(results: &Results) -> String {
    let mut out = String::from(
        "n,scenario,metric,condition,samples,errors,gave_up,p50_us,p90_us,p99_us,max_us,per_s,\
         baseline,x_p50,x_p90,x_p99,x_max,x_rate,reference,xref_p50,xref_p99\n",
    );
    for row in &results.rows {
        let l = row.latency;
        let v = row.versus.as_ref();
        let h = row.reference.as_ref();
        let fields = [
            row.n.to_string(),
            row.scenario.name().to_owned(),
            csv_field(&row.label),
            csv_field(&row.condition),
            row.samples.to_string(),
            row.errors.to_string(),
            row.gave_up.to_string(),
            csv_num(l.map(|l| l.p50)),
            csv_num(l.map(|l| l.p90)),
            csv_num(l.map(|l| l.p99)),
            csv_num(l.map(|l| l.max)),
            csv_num(row.rate),
            csv_field(v.map_or("", |v| v.label.as_str())),
            csv_num(ratio(v, |v| v.latency.map(|r| r[0]))),
            csv_num(ratio(v, |v| v.latency.map(|r| r[1]))),
            csv_num(ratio(v, |v| v.latency.map(|r| r[2]))),
            csv_num(ratio(v, |v| v.latency.map(|r| r[3]))),
            csv_num(ratio(v, |v| v.rate)),
            csv_field(h.map_or("", |v| v.label.as_str())),
            csv_num(ratio(h, |v| v.latency.map(|r| r[0]))),
            csv_num(ratio(h, |v| v.latency.map(|r| r[2]))),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// A JSON figure: three decimals, `null` when not finite.
fn figure(v: f64) -> Option<f64> {
    v.is_finite().then(|| (v * 1_000.0).round() / 1_000.0)
}

/// The whole run in `nodes.json`: machine, settings, rows and targets.
#[derive(Serialize)]
struct RunJson<'a> {
    machine: MachineJson<'a>,
    settings: &'a str,
    rows: Vec<RowJson<'a>>,
    targets: Vec<TargetJson<'a>>,
}

#[derive(Serialize)]
struct MachineJson<'a> {
    cores: usize,
    cpu: &'a str,
    kernel: &'a str,
    redis_server: &'a str,
    runtime: &'a str,
    mode: &'a str,
    load_before: &'a str,
    load_after: &'a str,
    started_unix: u64,
    duration_s: Option<f64>,
}

#[derive(Serialize)]
struct RowJson<'a> {
    n: usize,
    scenario: &'static str,
    /// The row's label.
    metric: &'a str,
    condition: &'a str,
    samples: usize,
    errors: usize,
    gave_up: usize,
    latency_us: Option<LatencyJson>,
    per_s: Option<f64>,
    versus_baseline: Option<VersusJson<'a>>,
    versus_reference: Option<VersusJson<'a>>,
}

/// Percentiles in microseconds, or, in [`VersusJson`], their ratios.
#[derive(Serialize)]
struct LatencyJson {
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
}

impl LatencyJson {
    fn new([p50, p90, p99, max]: [f64; 4]) -> LatencyJson {
        LatencyJson {
            p50: figure(p50),
            p90: figure(p90),
            p99: figure(p99),
            max: figure(max),
        }
    }
}

#[derive(Serialize)]
struct VersusJson<'a> {
    label: &'a str,
    #[serde(flatten)]
    latency: LatencyJson,
    rate: Option<f64>,
}

impl<'a> VersusJson<'a> {
    fn new(v: &'a Versus) -> VersusJson<'a> {
        VersusJson {
            label: &v.label,
            latency: LatencyJson::new(v.latency.unwrap_or([f64::NAN; 4])),
            rate: v.rate.and_then(figure),
        }
    }
}

#[derive(Serialize)]
struct TargetJson<'a> {
    goal: &'a str,
    ratio: Option<f64>,
    limit: Option<f64>,
    at_least: bool,
    met: bool,
    mechanism: Option<f64>,
    below_mechanism: bool,
}

/// The whole run: machine, rows and targets.
pub(crate) fn json(
    machine: &Machine,
    settings: &str,
    results: &Results,
    targets: &[Target],
) -> serde_json::Result<String> {
    let run = RunJson {
        machine: MachineJson {
            cores: machine.cores,
            cpu: &machine.cpu,
            kernel: &machine.kernel,
            redis_server: &machine.redis,
            runtime: &machine.runtime,
            mode: &machine.mode,
            load_before: &machine.load_before,
            load_after: &machine.load_after,
            started_unix: machine.started_unix,
            duration_s: figure(machine.duration_s),
        },
        settings,
        rows: results
            .rows
            .iter()
            .map(|row| RowJson {
                n: row.n,
                scenario: row.scenario.name(),
                metric: &row.label,
                condition: &row.condition,
                samples: row.samples,
                errors: row.errors,
                gave_up: row.gave_up,
                latency_us: row
                    .latency
                    .map(|l| LatencyJson::new([l.p50, l.p90, l.p99, l.max])),
                per_s: row.rate.and_then(figure),
                versus_baseline: row.versus.as_ref().map(VersusJson::new),
                versus_reference: row.reference.as_ref().map(VersusJson::new),
            })
            .collect(),
        targets: targets
            .iter()
            .map(|t| TargetJson {
                goal: &t.goal,
                ratio: figure(t.ratio),
                limit: figure(t.limit),
                at_least: t.at_least,
                met: t.met(),
                mechanism: t.mechanism.and_then(figure),
                below_mechanism: t.below_mechanism(),
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&run)?;
    text.push('\n');
    Ok(text)
}

/// A figure for the markdown tables: like [`num`], with thin spaces between thousands.
fn md(v: Option<f64>) -> String {
    let plain = num(v);
    match v {
        Some(v) if v.is_finite() && v >= 1_000.0 => {
            let digits = format!("{v:.0}");
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    out.push(' ');
                }
                out.push(c);
            }
            out
        }
        _ => plain,
    }
}

/// A ratio for the markdown tables: `1.23×`, or `-`.
fn mx(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.2}×"),
        _ => "-".to_owned(),
    }
}

/// `p50 / p99` of a row, or `-`.
fn p50_p99(row: Option<&Row>) -> String {
    match row.and_then(|r| r.latency) {
        Some(l) => format!("{} / {}", md(Some(l.p50)), md(Some(l.p99))),
        None => "-".to_owned(),
    }
}

/// The markdown tables of a run, exactly as `docs/benchmarks.md` shows them between its
/// `bench-tables` markers (`scripts/bench-readme.sh` puts them there): the machine and
/// the run, then one table per scenario, the goals, and the ratios that explain them.
pub(crate) fn markdown(
    machine: &Machine,
    results: &Results,
    targets: &[Target],
    context: &[(String, f64)],
) -> String {
    let mut out = String::new();
    let mut ns: Vec<usize> = results.rows.iter().map(|r| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    let find = |scenario, metric, n| results.find(scenario, metric, n);
    let per_n = |scenario, metric| ns.iter().any(|&n| find(scenario, metric, n).is_some());
    let _ = writeln!(
        out,
        "Measured on {} (kernel {}), `cargo bench --bench nodes` in {:.0} s. Load average \
         (1/5/15 min) {} before and {} after. Absolute times move with the load from run to \
         run; ratios within a run move much less.",
        machine.summary(),
        machine.kernel,
        machine.duration_s,
        machine.load_before,
        machine.load_after,
    );

    if per_n(Scenario::Uncontended, Metric::Acquire) {
        let _ = writeln!(
            out,
            "\n### Latency (one client, a fresh resource each time)\n\n\
             | N (quorum) | SET NX PX round trip p50 / p99 µs | raw fan-out SET p50 µs, the limit (÷ round trip) | raw fan-out acquire script p50 µs (÷ limit) | acquire p50 / p90 / p99 µs | acquire p50 ÷ round trip | acquire p50 ÷ limit | acquire p50 ÷ its script's fan-out | release p50 µs |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for &n in &ns {
            let Some(acq) = find(Scenario::Uncontended, Metric::Acquire, n) else {
                continue;
            };
            let fan = find(Scenario::Uncontended, Metric::FanOut, n);
            let script = find(Scenario::Uncontended, Metric::FanOutAcquireScript, n)
                .and_then(|r| r.latency)
                .map(|l| l.p50);
            let l = acq.latency;
            let _ = writeln!(
                out,
                "| {n} ({}) | {} | {} ({}) | {} ({}) | {} / {} / {} | **{}** | {} | {} | {} |",
                n / 2 + 1,
                p50_p99(find(Scenario::Baseline, Metric::SetRoundTrip, n)),
                md(fan.and_then(|r| r.latency).map(|l| l.p50)),
                mx(fan.and_then(|r| r.versus.as_ref()?.latency).map(|r| r[0])),
                md(script),
                mx(script
                    .zip(fan.and_then(|r| r.latency))
                    .map(|(s, f)| s / f.p50)),
                md(l.map(|l| l.p50)),
                md(l.map(|l| l.p90)),
                md(l.map(|l| l.p99)),
                mx(acq.versus.as_ref().and_then(|v| v.latency).map(|r| r[0])),
                mx(acq.reference.as_ref().and_then(|v| v.latency).map(|r| r[0])),
                mx(l.zip(script).map(|(l, s)| l.p50 / s)),
                md(find(Scenario::Uncontended, Metric::Release, n)
                    .and_then(|r| r.latency)
                    .map(|l| l.p50)),
            );
        }
    }

    if per_n(Scenario::Uncontended, Metric::Pairs) || per_n(Scenario::Throughput, Metric::PairsMany)
    {
        let many = results
            .rows
            .iter()
            .find(|r| r.scenario == Scenario::Throughput)
            .map_or_else(|| "many".to_owned(), |r| r.condition.clone());
        let _ = writeln!(
            out,
            "\n### Pairs per second\n\n\
             | N | raw SET+DEL pairs/s, 1 client | raw fan-out pairs/s (limit) | acquire+release pairs/s, 1 client | ÷ raw SET+DEL | {many}: raw SET+DEL pairs/s | {many}: acquire+release pairs/s | ÷ raw |\n\
             |---|---|---|---|---|---|---|---|"
        );
        for &n in &ns {
            let rate = |scenario, metric| find(scenario, metric, n).and_then(|r| r.rate);
            let versus =
                |scenario, metric| find(scenario, metric, n).and_then(|r| r.versus.as_ref()?.rate);
            if rate(Scenario::Uncontended, Metric::Pairs).is_none()
                && rate(Scenario::Throughput, Metric::PairsMany).is_none()
            {
                continue;
            }
            let _ = writeln!(
                out,
                "| {n} | {} | {} ({}) | {} | **{}** | {} | {} | {} |",
                md(rate(Scenario::Baseline, Metric::RawPairs)),
                md(rate(Scenario::Uncontended, Metric::FanOutPairs)),
                mx(versus(Scenario::Uncontended, Metric::FanOutPairs)),
                md(rate(Scenario::Uncontended, Metric::Pairs)),
                mx(versus(Scenario::Uncontended, Metric::Pairs)),
                md(rate(Scenario::Baseline, Metric::RawPairsMany)),
                md(rate(Scenario::Throughput, Metric::PairsMany)),
                mx(versus(Scenario::Throughput, Metric::PairsMany)),
            );
        }
    }

    if per_n(Scenario::Guarded, Metric::AcquireFenced) {
        let _ = writeln!(
            out,
            "\n### Quarantine and fencing: acquire p50 / p99 µs\n\n\
             | N | quarantine off | restart quarantine (checked script) | p50 ÷ plain | with a fencing token (two rounds) | p50 ÷ plain | p50 ÷ quarantine |\n\
             |---|---|---|---|---|---|---|"
        );
        for &n in &ns {
            let Some(fenced) = find(Scenario::Guarded, Metric::AcquireFenced, n) else {
                continue;
            };
            let checked = find(Scenario::Guarded, Metric::AcquireChecked, n);
            let p50 = |v: Option<&Versus>| v.and_then(|v| v.latency).map(|r| r[0]);
            let _ = writeln!(
                out,
                "| {n} | {} | {} | {} | {} | {} | **{}** |",
                p50_p99(find(Scenario::Guarded, Metric::Acquire, n)),
                p50_p99(checked),
                mx(p50(checked.and_then(|r| r.versus.as_ref()))),
                p50_p99(Some(fenced)),
                mx(p50(fenced.versus.as_ref())),
                mx(p50(fenced.reference.as_ref())),
            );
        }
    }

    let family: Vec<&Row> = results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Family && r.metric == Metric::Acquire)
        .collect();
    if !family.is_empty() {
        let _ = writeln!(
            out,
            "\n### The lock family: p50 / p99 µs, a fresh set of resources each time\n\n\
             | N | lock | acquire | p50 ÷ mutex | release | p50 ÷ mutex |\n\
             |---|---|---|---|---|---|"
        );
        for acquire in family {
            let release = results.rows.iter().find(|r| {
                r.scenario == Scenario::Family
                    && r.metric == Metric::Release
                    && r.n == acquire.n
                    && r.condition == acquire.condition
            });
            let p50 = |r: Option<&Row>| {
                r.and_then(|r| r.versus.as_ref())
                    .and_then(|v| v.latency)
                    .map(|l| l[0])
            };
            let what = acquire.label.trim_end_matches(" acquire");
            let _ = writeln!(
                out,
                "| {} | {what} ({}) | {} | {} | {} | {} |",
                acquire.n,
                acquire.condition,
                p50_p99(Some(acquire)),
                mx(p50(Some(acquire))),
                p50_p99(release),
                mx(p50(release)),
            );
        }
    }

    let contended: Vec<&Row> = results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Contended && r.metric == Metric::Sections)
        .collect();
    if let Some(first) = contended.first() {
        let clients = first
            .condition
            .split(',')
            .next()
            .unwrap_or_default()
            .to_owned();
        let _ = writeln!(
            out,
            "\n### Contended: {clients} on one resource\n\n\
             Each critical section is a `GET`, a sleep of the hold and a `SET` on a storage \
             server; the limit is one section (measured alone) plus one quorum round (the raw \
             fan-out) per section. The *raw hand-off ring* is the hand-off mechanism with raw \
             commands and no library (release and hand on to the queue's live head, notices, a confirm round, a registration per section): the \
             library's variants are also shown over it.\n\n\
             | N | hold | waiting | sections/s | limit/s | ÷ limit | ÷ ring | hand-off p50 / p99 µs | hand-off p50 / p99 ÷ round trip p50 | hand-off p50 ÷ ring | wait p50 µs | give-ups |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for sections in contended {
            // The rest of the variant's rows: same N, same condition after the clients.
            let label = sections
                .condition
                .split_once(", ")
                .map_or(sections.condition.as_str(), |(_, l)| l);
            let of = |metric| {
                results.rows.iter().find(|r| {
                    r.scenario == Scenario::Contended
                        && r.metric == metric
                        && r.n == sections.n
                        && r.condition == label
                })
            };
            let (hold, waiting) = label.split_once(", ").unwrap_or((label, ""));
            let hold = hold.trim_start_matches("hold ");
            let hand_off = of(Metric::HandOff);
            // Both percentiles over the round trip's p50 (the versus ratios are
            // percentile to percentile).
            let ratios = hand_off
                .and_then(|r| Some((r.latency?, r.versus.as_ref()?.latency?)))
                .map(|(l, r)| format!("{} / {}", mx(Some(r[0])), mx(Some(r[0] * l.p99 / l.p50))))
                .unwrap_or_else(|| "-".to_owned());
            let limit = results
                .rows
                .iter()
                .find(|r| {
                    r.scenario == Scenario::Contended
                        && r.metric == Metric::SectionLimit
                        && r.n == sections.n
                        && r.condition.starts_with(&format!("hold {hold}:"))
                })
                .and_then(|r| r.rate);
            let _ = writeln!(
                out,
                "| {} | {hold} | {waiting} | {} | {} | {} | {} | {} | {ratios} | {} | {} | {} |",
                sections.n,
                md(sections.rate),
                md(limit),
                mx(sections.reference.as_ref().and_then(|v| v.rate)),
                mx(sections.versus.as_ref().and_then(|v| v.rate)),
                p50_p99(hand_off),
                mx(hand_off
                    .and_then(|r| r.reference.as_ref()?.latency)
                    .map(|r| r[0])),
                md(of(Metric::Wait).and_then(|r| r.latency).map(|l| l.p50)),
                // The ring never gives up (its errors are a broken ring).
                match ring::is_ring(waiting) {
                    true => "-".to_owned(),
                    false => sections.gave_up.to_string(),
                },
            );
        }
    }

    let degraded: Vec<&Row> = results
        .rows
        .iter()
        .filter(|r| r.scenario == Scenario::Degraded && r.metric == Metric::Acquire)
        .collect();
    if let Some(first) = degraded.first() {
        let n = first.n;
        let _ = writeln!(
            out,
            "\n### One master of {n} down\n\n\
             | one of {n} masters | acquire p50 / p99 µs | p50 ÷ round trip | p99 ÷ healthy p99 |\n\
             |---|---|---|---|"
        );
        for row in degraded {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                row.condition,
                p50_p99(Some(row)),
                mx(row.versus.as_ref().and_then(|v| v.latency).map(|r| r[0])),
                match row.reference.as_ref().and_then(|v| v.latency) {
                    Some(r) => mx(Some(r[2])),
                    None => "(reference)".to_owned(),
                },
            );
        }
    }

    if !targets.is_empty() {
        let _ = writeln!(
            out,
            "\n### The goals\n\n| goal | this run | bound | |\n|---|---|---|---|"
        );
        for t in targets {
            let _ = writeln!(
                out,
                "| {} | {} | {} {} | {} |",
                t.goal,
                mx(Some(t.ratio)),
                if t.at_least { "≥" } else { "≤" },
                mx(Some(t.limit)),
                match t.met() {
                    true => t.verdict(),
                    false => format!("**{}**", t.verdict()),
                },
            );
        }
    }
    if !context.is_empty() {
        let _ = writeln!(
            out,
            "\n### What the machine allows, and what the library adds\n\n| ratio | this run |\n|---|---|"
        );
        for (what, ratio) in context {
            let _ = writeln!(out, "| {what} | {} |", mx(Some(*ratio)));
        }
    }
    out
}

/// The scenarios of `results` whose table [`markdown`] left out of `tables`: a run must
/// not refresh the docs without them.
pub(crate) fn missing_tables(results: &Results, tables: &str) -> Vec<&'static str> {
    // Baselines appear in the tables of the scenarios they belong to.
    let heading = |scenario| match scenario {
        Scenario::Baseline => None,
        Scenario::Uncontended => Some("\n### Latency "),
        Scenario::Throughput => Some("\n### Pairs per second"),
        Scenario::Guarded => Some("\n### Quarantine and fencing"),
        Scenario::Contended => Some("\n### Contended"),
        Scenario::Degraded => Some("\n### One master of "),
        Scenario::Family => Some("\n### The lock family"),
    };
    let mut missing: Vec<&'static str> = results
        .rows
        .iter()
        .map(|r| r.scenario)
        .filter(|s| heading(*s).is_some_and(|h| !tables.contains(h)))
        .map(Scenario::name)
        .collect();
    missing.dedup();
    missing
}
