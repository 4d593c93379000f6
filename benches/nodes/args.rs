//! The command line: flags, the scenarios they select, and the measurement budget.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The number of masters of the degraded scenario, when selected.
const DEGRADED_N: usize = 5;
/// The node counts measured unless `--nodes` says otherwise.
const ALL_NODES: [usize; 5] = [1, 3, 5, 7, 9];

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Operations run and discarded before each measurement.
    pub(crate) warmup: usize,
    /// Latency samples per series.
    pub(crate) samples: usize,
    /// The most time one latency series may take (it stops early with fewer samples).
    pub(crate) series_time: Duration,
    /// The length of each throughput window.
    pub(crate) window: Duration,
    /// The length of each contended window.
    pub(crate) contended_window: Duration,
    /// Tasks in the throughput scenario.
    pub(crate) clients: usize,
}

impl Budget {
    pub(crate) const FULL: Budget = Budget {
        warmup: 300,
        samples: 10_000,
        series_time: Duration::from_secs(20),
        window: Duration::from_millis(1_500),
        contended_window: Duration::from_secs(3),
        clients: 16,
    };
    pub(crate) const QUICK: Budget = Budget {
        warmup: 100,
        samples: 1_500,
        series_time: Duration::from_secs(4),
        window: Duration::from_millis(400),
        contended_window: Duration::from_millis(800),
        clients: 16,
    };
}

/// The tokio runtime the harness runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Two worker threads (one per core); the measuring task is spawned onto them.
    Multi,
    /// One thread for everything.
    Current,
}

/// Command-line settings.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) quick: bool,
    pub(crate) nodes: Vec<usize>,
    /// The scenarios to run: uncontended (with its baselines), throughput, contended,
    /// degraded.
    only: Vec<String>,
    pub(crate) flavor: Flavor,
    pub(crate) out: PathBuf,
}

const USAGE: &str = "usage: cargo bench --bench nodes -- [--quick] [--nodes 1,3,5,7,9] \
                     [--only uncontended,throughput,guarded,contended,degraded,family] \
                     [--runtime multi|current] [--out DIR]";

/// The scenarios, in the order they run.
const SCENARIOS: [&str; 6] = [
    "uncontended",
    "throughput",
    "guarded",
    "contended",
    "degraded",
    "family",
];

impl Args {
    pub(crate) fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            quick: false,
            nodes: ALL_NODES.to_vec(),
            only: SCENARIOS.iter().map(|s| (*s).to_owned()).collect(),
            flavor: Flavor::Multi,
            out: default_out_dir(),
        };
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (arg.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                // Passed by `cargo bench` to every bench binary.
                "--bench" => {}
                "--quick" => parsed.quick = true,
                "--nodes" => {
                    let list = value("--nodes")?;
                    let mut nodes = Vec::new();
                    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
                        let n: usize = part.trim().parse().map_err(|_| {
                            format!("--nodes takes numbers like 1,3,5, not {part:?}")
                        })?;
                        if !(1..=15).contains(&n) {
                            return Err(format!("--nodes: {n} is out of range 1..=15"));
                        }
                        if !nodes.contains(&n) {
                            nodes.push(n);
                        }
                    }
                    if nodes.is_empty() {
                        return Err(format!("--nodes needs at least one number\n{USAGE}"));
                    }
                    nodes.sort_unstable();
                    parsed.nodes = nodes;
                }
                "--only" => {
                    let list = value("--only")?;
                    let mut only = Vec::new();
                    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                        if !SCENARIOS.contains(&part) {
                            return Err(format!(
                                "--only takes some of {}, not {part:?}",
                                SCENARIOS.join(",")
                            ));
                        }
                        only.push(part.to_owned());
                    }
                    parsed.only = only;
                }
                "--runtime" => {
                    parsed.flavor = match value("--runtime")?.as_str() {
                        "multi" => Flavor::Multi,
                        "current" => Flavor::Current,
                        other => return Err(format!("--runtime multi|current, not {other:?}")),
                    }
                }
                "--out" => parsed.out = PathBuf::from(value("--out")?),
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        Ok(parsed)
    }

    pub(crate) fn runs(&self, scenario: &str) -> bool {
        self.only.iter().any(|s| s == scenario)
    }

    pub(crate) fn budget(&self) -> Budget {
        if self.quick {
            Budget::QUICK
        } else {
            Budget::FULL
        }
    }

    /// The N of the degraded scenario: 5 when selected, else the largest selected N of
    /// at least 3 (so that a restricted run still exercises it), else none.
    pub(crate) fn degraded_n(&self) -> Option<usize> {
        if !self.runs("degraded") {
            return None;
        }
        self.one_n()
    }

    /// Where the lock family is measured: as the degraded scenario, at N = 5 or the largest
    /// selected N of at least 3.
    pub(crate) fn family_n(&self) -> Option<usize> {
        if !self.runs("family") {
            return None;
        }
        self.one_n()
    }

    /// N = 5, or the largest selected N of at least 3.
    fn one_n(&self) -> Option<usize> {
        if self.nodes.contains(&DEGRADED_N) {
            return Some(DEGRADED_N);
        }
        self.nodes.iter().copied().filter(|&n| n >= 3).max()
    }
}

/// `target/redquorum-bench` under the target directory cargo uses.
fn default_out_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { manifest.join(t) })
        .unwrap_or_else(|| manifest.join("target"));
    target.join("redquorum-bench")
}
