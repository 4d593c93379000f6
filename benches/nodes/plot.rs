//! The SVG plot: latency and throughput against N with the baselines as lines, and the
//! degraded cluster next to the healthy one. SVG backend only: text is emitted as SVG
//! `<text>` and laid out with plotters' built-in estimate, so no font library is needed.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use super::model::{Machine, Metric, Results, Scenario};

type Series = Vec<(f64, f64)>;

const FONT: &str = "sans-serif";
const GREY: RGBColor = RGBColor(120, 120, 120);
const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE: RGBColor = RGBColor(230, 120, 20);
const RED_: RGBColor = RGBColor(200, 40, 40);
const GREEN_: RGBColor = RGBColor(44, 150, 44);
const PURPLE: RGBColor = RGBColor(130, 80, 180);

/// Draws the plot of `results` to `path`.
pub(crate) fn draw(
    path: &Path,
    machine: &Machine,
    results: &Results,
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (1500, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(56);
    title.draw_text(
        "redquorum: what each master costs (Redlock over N independent redis-server masters)",
        &(FONT, 20).into_text_style(&title),
        (12, 8),
    )?;
    title.draw_text(
        &format!(
            "measured on {}; load average {} before, {} after (1/5/15 min)",
            machine.summary(),
            machine.load_before,
            machine.load_after
        ),
        &(FONT, 13).into_text_style(&title).color(&GREY),
        (12, 34),
    )?;
    let (body, footer) = rest.split_vertically(520);
    footer.draw_text(
        "dashed: baselines measured in the same run with the same client (redis crate, multiplexed connection). \
         Figures and ratios: README, target/redquorum-bench/nodes.csv",
        &(FONT, 12).into_text_style(&footer).color(&GREY),
        (12, 4),
    )?;
    let panels = body.split_evenly((1, 3));
    latency(&panels[0], results)?;
    throughput(&panels[1], results)?;
    degraded(&panels[2], results)?;
    root.present()?;
    Ok(())
}

/// The largest y value of some series, or `fallback`.
fn top(series: &[&Series], fallback: f64) -> f64 {
    series
        .iter()
        .flat_map(|s| s.iter().map(|p| p.1))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        .unwrap_or(fallback)
}

fn bottom(series: &[&Series], fallback: f64) -> f64 {
    series
        .iter()
        .flat_map(|s| s.iter().map(|p| p.1))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        .unwrap_or(fallback)
}

/// Acquire latency percentiles and the physical limit against N.
fn latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    r: &Results,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let pick = |i: usize| {
        move |row: &super::model::Row| row.latency.map(|l| [l.p50, l.p90, l.p99, l.max][i])
    };
    let p50 = r.series(Scenario::Uncontended, Metric::Acquire, pick(0));
    let p90 = r.series(Scenario::Uncontended, Metric::Acquire, pick(1));
    let p99 = r.series(Scenario::Uncontended, Metric::Acquire, pick(2));
    let fan = r.series(Scenario::Uncontended, Metric::FanOut, pick(0));
    let base50 = r.series(Scenario::Baseline, Metric::SetRoundTrip, pick(0));
    let base99 = r.series(Scenario::Baseline, Metric::SetRoundTrip, pick(2));
    // Log scale: a noisy p99 must not flatten the p50 lines. Headroom above the data for
    // the legend.
    let all = [&p50, &p90, &p99, &fan, &base50, &base99];
    let ymax = top(&all, 100.0) * 12.0;
    let ymin = (bottom(&all, 10.0) / 1.5).max(1.0);

    let mut chart = ChartBuilder::on(area)
        .caption(
            "uncontended acquire latency, one client (log scale)",
            (FONT, 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5f64..9.5f64, (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("masters N")
        .y_desc("microseconds")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .max_light_lines(0)
        .draw()?;

    line(&mut chart, &p99, RED_, "acquire p99")?;
    line(&mut chart, &p90, ORANGE, "acquire p90")?;
    line(&mut chart, &p50, BLUE_, "acquire p50")?;
    line(&mut chart, &fan, GREEN_, "limit: raw SET NX PX fan-out p50")?;
    dashed(&mut chart, &base99, GREY, "baseline SET NX PX p99")?;
    dashed(&mut chart, &base50, BLACK, "baseline SET NX PX p50")?;
    legend(&mut chart)?;
    Ok(())
}

/// Pairs and critical sections per second against N, log scale.
fn throughput<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    r: &Results,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let rate = |row: &super::model::Row| row.rate;
    let one = r.series(Scenario::Uncontended, Metric::Pairs, rate);
    let many = r.series(Scenario::Throughput, Metric::PairsMany, rate);
    // Critical sections of the contended clients with hand-off (the default), 1 ms hold.
    let default = super::contended::condition(
        super::contended::HOLDS[0],
        super::contended::Waiting::HandOff,
    );
    let sections = r.series(Scenario::Contended, Metric::Sections, |row| {
        row.condition
            .ends_with(&default)
            .then_some(row.rate)
            .flatten()
    });
    let raw_one = r.series(Scenario::Baseline, Metric::RawPairs, rate);
    let raw_many = r.series(Scenario::Baseline, Metric::RawPairsMany, rate);
    let fan_pairs = r.series(Scenario::Uncontended, Metric::FanOutPairs, rate);
    let all = [&one, &many, &sections, &raw_one, &raw_many, &fan_pairs];
    let ymax = top(&all, 1e4) * 20.0;
    let ymin = (bottom(&all, 10.0) / 3.0).max(1.0);

    let mut chart = ChartBuilder::on(area)
        .caption("operations per second (log scale)", (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5f64..9.5f64, (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("masters N")
        .y_desc("per second")
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .max_light_lines(0)
        .draw()?;

    line(
        &mut chart,
        &many,
        GREEN_,
        "acquire+release pairs, many clients",
    )?;
    line(
        &mut chart,
        &fan_pairs,
        ORANGE,
        "limit: raw fan-out pairs, one client",
    )?;
    line(&mut chart, &one, BLUE_, "acquire+release pairs, one client")?;
    line(
        &mut chart,
        &sections,
        PURPLE,
        "contended critical sections (hand-off, 1 ms hold)",
    )?;
    dashed(
        &mut chart,
        &raw_many,
        GREY,
        "baseline SET+DEL, many clients",
    )?;
    dashed(&mut chart, &raw_one, BLACK, "baseline SET+DEL, one client")?;
    legend(&mut chart)?;
    Ok(())
}

/// Acquire p50/p99 with one master paused or killed, next to the healthy cluster.
fn degraded<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    r: &Results,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let rows: Vec<_> = r
        .rows
        .iter()
        .filter(|row| row.scenario == Scenario::Degraded && row.metric == Metric::Acquire)
        .collect();
    let n = rows.first().map_or(5, |row| row.n);
    let base = r
        .rows
        .iter()
        .find(|row| row.scenario == Scenario::Degraded && row.metric == Metric::SetRoundTrip)
        .and_then(|row| row.latency);
    let ymax = rows
        .iter()
        .filter_map(|row| row.latency.map(|l| l.p99))
        .fold(base.map_or(100.0, |b| b.p99), f64::max)
        * 1.45;
    let labels: Vec<String> = rows.iter().map(|row| row.condition.clone()).collect();
    let count = rows.len().max(1) as f64;

    let mut chart = ChartBuilder::on(area)
        .caption(format!("acquire with one of {n} masters down"), (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5f64..count - 0.5, 0f64..ymax)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .y_desc("microseconds")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels(rows.len().max(1) * 2 + 1)
        .x_label_formatter(&label_of)
        .disable_x_mesh()
        .max_light_lines(0)
        .draw()?;

    let bars = |pick: fn(&super::model::Pcts) -> f64, offset: f64| {
        rows.iter()
            .enumerate()
            .filter_map(move |(i, row)| row.latency.map(|l| (i as f64, pick(&l))))
            .map(move |(x, y)| (x + offset, y))
            .collect::<Vec<_>>()
    };
    let p50 = bars(|l| l.p50, -0.18);
    let p99 = bars(|l| l.p99, 0.18);
    chart
        .draw_series(
            p50.iter()
                .map(|&(x, y)| Rectangle::new([(x - 0.16, 0.0), (x + 0.16, y)], BLUE_.filled())),
        )?
        .label("acquire p50")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], BLUE_.filled()));
    chart
        .draw_series(
            p99.iter()
                .map(|&(x, y)| Rectangle::new([(x - 0.16, 0.0), (x + 0.16, y)], RED_.filled())),
        )?
        .label("acquire p99")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], RED_.filled()));
    chart.draw_series(p50.iter().chain(p99.iter()).map(|&(x, y)| {
        Text::new(
            format!("{y:.0}"),
            (x - 0.12, y + ymax * 0.03),
            (FONT, 12).into_font(),
        )
    }))?;
    if let Some(b) = base {
        let span = vec![(-0.5, b.p50), (count - 0.5, b.p50)];
        dashed(&mut chart, &span, BLACK, "baseline SET NX PX p50")?;
    }
    legend(&mut chart)?;
    Ok(())
}

type Chart<'a, DB, Y> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

/// A solid line with points, labelled.
fn line<'a, DB, Y>(
    chart: &mut Chart<'a, DB, Y>,
    s: &Series,
    color: RGBColor,
    label: &str,
) -> Result<(), Box<dyn Error>>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    if s.is_empty() {
        return Ok(());
    }
    chart
        .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    chart.draw_series(s.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    Ok(())
}

/// A dashed line, labelled: a baseline.
fn dashed<'a, DB, Y>(
    chart: &mut Chart<'a, DB, Y>,
    s: &Series,
    color: RGBColor,
    label: &str,
) -> Result<(), Box<dyn Error>>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    if s.is_empty() {
        return Ok(());
    }
    chart
        .draw_series(DashedLineSeries::new(
            s.iter().copied(),
            6,
            4,
            color.stroke_width(2),
        ))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 7, y)], color.stroke_width(2)));
    Ok(())
}

fn legend<'a, DB, Y>(chart: &mut Chart<'a, DB, Y>) -> Result<(), Box<dyn Error>>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(GREY)
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}
