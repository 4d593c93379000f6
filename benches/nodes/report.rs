//! The terminal table, the CSV and the JSON of a run.

use std::fmt::Write as _;

use super::model::{Machine, Results, Row, Scenario, Target, Versus};

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
         client stack on this machine), degraded rows to the healthy cluster."
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
                if t.met() { "met" } else { "MISSED" }
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
        "n,scenario,metric,condition,samples,errors,p50_us,p90_us,p99_us,max_us,per_s,\
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

/// A JSON string literal.
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or `null`.
fn jn(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "null".to_owned(),
    }
}

fn versus_json(v: Option<&Versus>) -> String {
    match v {
        None => "null".to_owned(),
        Some(v) => format!(
            "{{\"label\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{},\"rate\":{}}}",
            js(&v.label),
            jn(v.latency.map(|r| r[0])),
            jn(v.latency.map(|r| r[1])),
            jn(v.latency.map(|r| r[2])),
            jn(v.latency.map(|r| r[3])),
            jn(v.rate)
        ),
    }
}

fn row_json(row: &Row) -> String {
    let latency = match row.latency {
        None => "null".to_owned(),
        Some(l) => format!(
            "{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}}",
            jn(Some(l.p50)),
            jn(Some(l.p90)),
            jn(Some(l.p99)),
            jn(Some(l.max))
        ),
    };
    format!(
        "{{\"n\":{},\"scenario\":{},\"metric\":{},\"condition\":{},\"samples\":{},\"errors\":{},\
         \"latency_us\":{},\"per_s\":{},\"versus_baseline\":{},\"versus_reference\":{}}}",
        row.n,
        js(row.scenario.name()),
        js(&row.label),
        js(&row.condition),
        row.samples,
        row.errors,
        latency,
        jn(row.rate),
        versus_json(row.versus.as_ref()),
        versus_json(row.reference.as_ref()),
    )
}

/// The whole run: machine, rows and targets.
pub(crate) fn json(
    machine: &Machine,
    settings: &str,
    results: &Results,
    targets: &[Target],
) -> String {
    let rows: Vec<String> = results.rows.iter().map(row_json).collect();
    let targets: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "{{\"goal\":{},\"ratio\":{},\"limit\":{},\"at_least\":{},\"met\":{}}}",
                js(&t.goal),
                jn(Some(t.ratio)),
                jn(Some(t.limit)),
                t.at_least,
                t.met()
            )
        })
        .collect();
    format!(
        "{{\n\"machine\":{{\"cores\":{},\"cpu\":{},\"kernel\":{},\"redis_server\":{},\"runtime\":{},\
         \"mode\":{},\"load_before\":{},\"load_after\":{},\"started_unix\":{},\"duration_s\":{}}},\n\
         \"settings\":{},\n\"rows\":[\n{}\n],\n\"targets\":[\n{}\n]\n}}\n",
        machine.cores,
        js(&machine.cpu),
        js(&machine.kernel),
        js(&machine.redis),
        js(&machine.runtime),
        js(&machine.mode),
        js(&machine.load_before),
        js(&machine.load_after),
        machine.started_unix,
        jn(Some(machine.duration_s)),
        js(settings),
        rows.join(",\n"),
        targets.join(",\n"),
    )
}
