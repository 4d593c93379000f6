//! What the harness measured: latency percentiles, rates, ratios, targets, the machine.

use std::time::Duration;

/// Latency percentiles of one series, in microseconds (nearest rank).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pcts {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Pcts {
    /// The percentiles of `samples` (nanoseconds; sorted in place), `None` when empty.
    pub(crate) fn of(samples: &mut [u64]) -> Option<Pcts> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |p: f64| {
            let rank = (p * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1] as f64 / 1_000.0
        };
        Some(Pcts {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: at(1.0),
        })
    }

    /// Each percentile divided by the same percentile of `base`.
    fn ratio(&self, base: &Pcts) -> [f64; 4] {
        [
            self.p50 / base.p50,
            self.p90 / base.p90,
            self.p99 / base.p99,
            self.max / base.max,
        ]
    }
}

/// The scenario a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Baseline,
    Uncontended,
    Throughput,
    Contended,
    Degraded,
    /// Restart quarantine's checked acquire and fencing, against the plain acquire.
    Guarded,
    /// The lock family's types, against the mutex.
    Family,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::Uncontended => "uncontended",
            Scenario::Throughput => "throughput",
            Scenario::Contended => "contended",
            Scenario::Degraded => "degraded",
            Scenario::Guarded => "guarded",
            Scenario::Family => "family",
        }
    }
}

/// What a row measures; the plot and the targets look rows up by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metric {
    /// One `SET key value NX PX` to one master, raw client.
    SetRoundTrip,
    /// Raw `SET NX PX` + `DEL` pairs, one client, one master.
    RawPairs,
    /// Raw `SET NX PX` + `DEL` pairs, many clients, one master.
    RawPairsMany,
    /// Raw `SET NX PX` to all N masters at once, until the quorum-th reply.
    FanOut,
    /// The library's acquire script, raw, to all N masters at once, until the quorum-th
    /// grant: what each master runs for the library's acquire.
    FanOutAcquireScript,
    /// The floor of any acquire made by a script: a script that runs `SET NX PX` and
    /// nothing else, raw, to all N masters at once, until the quorum-th grant.
    FanOutScriptFloor,
    /// The mechanism of a guarded acquire: one `HMGET` of a record holding the data epoch
    /// and the cluster fingerprint, then `SET NX PX`, in a script, raw, to all N masters at
    /// once, until the quorum-th grant.
    FanOutGuardedSet,
    /// The raw release script to all N masters at once, until the `n - quorum + 1`-th reply.
    FanOutRelease,
    /// The floor of any release: a bare compare-and-delete script (`GET`, then `DEL` if it
    /// holds the value), raw, to all N masters at once, until the `n - quorum + 1`-th reply.
    FanOutCad,
    /// The mechanism of a release that wakes waiters: compare-and-delete, the queue's
    /// `EXISTS` and the notice, raw, to all N masters at once, until the `n - quorum + 1`-th
    /// reply.
    FanOutGuardedRelease,
    /// Raw fan-out `SET NX PX` + release script pairs, one client.
    FanOutPairs,
    Acquire,
    /// Acquire through restart quarantine's checked script.
    AcquireChecked,
    /// Acquire with a fencing token (acquire round plus write-back round).
    AcquireFenced,
    Release,
    /// Acquire + release pairs, one client.
    Pairs,
    /// Acquire + release pairs, many clients on many resources.
    PairsMany,
    /// Critical sections per second, one resource, several clients.
    Sections,
    /// From one holder starting its release to the next holder's acquire returning.
    HandOff,
    /// From a contended acquire's call to its return (without the give-ups).
    Wait,
    /// The most critical sections per second one resource allows: one per section plus
    /// one quorum round.
    SectionLimit,
    /// How long each critical section actually held the lock.
    Hold,
}

/// One line of the table, the CSV and the JSON.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) scenario: Scenario,
    pub(crate) metric: Metric,
    /// The number of masters.
    pub(crate) n: usize,
    /// What the row measures, in words.
    pub(crate) label: String,
    /// The condition, such as "healthy", "1 of 5 paused", "16 clients".
    pub(crate) condition: String,
    /// Latency samples, or completed operations for a rate.
    pub(crate) samples: usize,
    /// Operations that failed (and are left out of the figures).
    pub(crate) errors: usize,
    /// Contended acquires that gave up when their wait budget ran out (or their attempts
    /// did): the lock was busy, nothing failed. Left out of the figures, not errors.
    pub(crate) gave_up: usize,
    pub(crate) latency: Option<Pcts>,
    /// Operations per second.
    pub(crate) rate: Option<f64>,
    /// The baseline compared against, and the ratios.
    pub(crate) versus: Option<Versus>,
    /// A second comparison: to the raw fan-out (the physical limit of a quorum round with
    /// this client stack) for uncontended acquire and release, to the healthy cluster for
    /// degraded rows.
    pub(crate) reference: Option<Versus>,
}

/// Ratios of a row to a reference row measured in the same run.
#[derive(Debug, Clone)]
pub(crate) struct Versus {
    /// The reference, in words.
    pub(crate) label: String,
    /// p50, p90, p99 and max divided by the reference's.
    pub(crate) latency: Option<[f64; 4]>,
    /// The rate divided by the reference's rate.
    pub(crate) rate: Option<f64>,
}

impl Row {
    pub(crate) fn new(scenario: Scenario, metric: Metric, n: usize, label: &str) -> Row {
        Row {
            scenario,
            metric,
            n,
            label: label.to_owned(),
            condition: String::new(),
            samples: 0,
            errors: 0,
            gave_up: 0,
            latency: None,
            rate: None,
            versus: None,
            reference: None,
        }
    }

    pub(crate) fn condition(mut self, condition: impl Into<String>) -> Row {
        self.condition = condition.into();
        self
    }

    /// A latency row from samples in nanoseconds.
    pub(crate) fn latency(mut self, samples: &mut [u64], errors: usize) -> Row {
        self.samples = samples.len();
        self.errors = errors;
        self.latency = Pcts::of(samples);
        self
    }

    /// A rate row: `done` operations in `elapsed`.
    pub(crate) fn rate(mut self, done: usize, elapsed: Duration, errors: usize) -> Row {
        self.samples = done;
        self.errors = errors;
        let secs = elapsed.as_secs_f64();
        self.rate = (secs > 0.0 && done > 0).then(|| done as f64 / secs);
        self
    }

    /// This row with `gave_up` contended acquires that gave up (not errors).
    pub(crate) fn gave_up(mut self, gave_up: usize) -> Row {
        self.gave_up = gave_up;
        self
    }

    /// The share of this row's operations that failed, if it attempted any.
    pub(crate) fn error_share(&self) -> Option<f64> {
        let attempted = self.samples + self.errors + self.gave_up;
        (attempted > 0).then(|| self.errors as f64 / attempted as f64)
    }

    /// The row in words: N, scenario, label and condition.
    pub(crate) fn name(&self) -> String {
        let condition = match self.condition.is_empty() {
            true => String::new(),
            false => format!(" ({})", self.condition),
        };
        format!(
            "N={} {} {}{condition}",
            self.n,
            self.scenario.name(),
            self.label
        )
    }

    /// Ratios of this row to `base`.
    pub(crate) fn versus(&self, base: &Row) -> Versus {
        let name = if base.condition.is_empty() {
            base.label.clone()
        } else {
            format!("{} ({})", base.label, base.condition)
        };
        Versus {
            label: format!("{name}, N={}", base.n),
            latency: match (&self.latency, &base.latency) {
                (Some(a), Some(b)) => Some(a.ratio(b)),
                _ => None,
            },
            rate: match (self.rate, base.rate) {
                (Some(a), Some(b)) => Some(a / b),
                _ => None,
            },
        }
    }

    /// This row with ratios to `base`.
    pub(crate) fn against(mut self, base: &Row) -> Row {
        self.versus = Some(self.versus(base));
        self
    }

    /// This row with ratios to a second reference row.
    pub(crate) fn referring_to(mut self, reference: &Row) -> Row {
        self.reference = Some(self.versus(reference));
        self
    }
}

/// The rows of one run, with lookups.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
}

/// The largest share of a row's operations that may fail: beyond it the run fails, since
/// its figures describe a run that did not work.
pub(crate) const MAX_ERROR_SHARE: f64 = 0.01;

impl Results {
    /// The rows with more than [`MAX_ERROR_SHARE`] of their operations failed, each in
    /// words with its count.
    pub(crate) fn failing(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|row| {
                let share = row.error_share().filter(|s| *s > MAX_ERROR_SHARE)?;
                Some(format!(
                    "{}: {} of {} operations failed ({:.1} %)",
                    row.name(),
                    row.errors,
                    row.samples + row.errors + row.gave_up,
                    share * 100.0
                ))
            })
            .collect()
    }

    /// The row of `metric` for `n` masters in `scenario` (the first, if several).
    pub(crate) fn find(&self, scenario: Scenario, metric: Metric, n: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.scenario == scenario && r.metric == metric && r.n == n)
    }

    /// Every N with a row of `metric` in `scenario`, and the value `pick` takes from it.
    pub(crate) fn series(
        &self,
        scenario: Scenario,
        metric: Metric,
        pick: impl Fn(&Row) -> Option<f64>,
    ) -> Vec<(f64, f64)> {
        self.rows
            .iter()
            .filter(|r| r.scenario == scenario && r.metric == metric)
            .filter_map(|r| pick(r).map(|v| (r.n as f64, v)))
            .collect()
    }
}

/// A goal stated as a ratio, and whether this run met it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) goal: String,
    /// The measured ratio.
    pub(crate) ratio: f64,
    /// The bound it must stay under (or, with `at_least`, above).
    pub(crate) limit: f64,
    pub(crate) at_least: bool,
    /// The same ratio measured on the goal's raw mechanism in this run, where it has one:
    /// what the design allows at the least.
    pub(crate) mechanism: Option<f64>,
}

impl Target {
    pub(crate) fn met(&self) -> bool {
        self.within(self.ratio)
    }

    fn within(&self, ratio: f64) -> bool {
        if self.at_least {
            ratio >= self.limit
        } else {
            ratio <= self.limit
        }
    }

    /// Missed, and so is its raw mechanism: the goal lies below what the mechanism allows.
    pub(crate) fn below_mechanism(&self) -> bool {
        !self.met() && self.mechanism.is_some_and(|m| !self.within(m))
    }

    /// The verdict, in words: met, missed, or below its mechanism (with the mechanism's
    /// ratio).
    pub(crate) fn verdict(&self) -> String {
        match (self.met(), self.mechanism) {
            (true, _) => "met".to_owned(),
            (false, Some(m)) if self.below_mechanism() => {
                format!("below its mechanism ({m:.2}x)")
            }
            (false, Some(m)) => format!("MISSED (mechanism {m:.2}x)"),
            (false, None) => "MISSED".to_owned(),
        }
    }
}

/// The machine and the settings of the run, printed with every figure.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) cpu: String,
    pub(crate) kernel: String,
    pub(crate) redis: String,
    pub(crate) runtime: String,
    pub(crate) mode: String,
    pub(crate) load_before: String,
    pub(crate) load_after: String,
    pub(crate) started_unix: u64,
    pub(crate) duration_s: f64,
}

impl Machine {
    /// One line for captions.
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} cores, {}, redis-server {}, tokio {}, {} mode",
            self.cores, self.cpu, self.redis, self.runtime, self.mode
        )
    }
}
