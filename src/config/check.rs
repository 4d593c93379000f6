//! The checks of every setting, and the error that reports what cannot work.

#![allow(clippy::wildcard_imports)]

use super::*;

/// A configuration value that cannot work, found by [`Builder::build`]: one problem as
/// its own variant, or every problem found as [`Several`](Problem::Several). Users see
/// it as an [`Error`](crate::Error) of kind
/// [`InvalidConfig`](crate::ErrorKind::InvalidConfig) ([`Problem::into_error`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Problem {
    /// No master was given.
    #[error(
        "no masters configured: add at least one with `master(url)` or `masters([..])` (3 or 5 independent masters are typical)"
    )]
    NoMasters,
    /// A master URL could not be parsed.
    #[error("master URL {url:?} cannot be used: {reason}")]
    InvalidUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same master appears twice; it would count twice toward the quorum.
    #[error(
        "master {url:?} is listed twice (also as {other:?}): each master must be an independent server, or it would vote twice"
    )]
    DuplicateMaster {
        /// The second occurrence, password redacted.
        url: String,
        /// The first occurrence, password redacted.
        other: String,
    },
    /// A duration setting could not be parsed.
    #[error(
        "{setting} {input:?} is not a duration ({reason}): write it like \"10s\", \"250ms\" or \"1m 30s\""
    )]
    InvalidDuration {
        /// Which setting.
        setting: &'static str,
        /// What was given.
        input: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The TTL leaves no validity once drift and one node timeout are taken off.
    #[error(
        "ttl {} is too short: it must exceed the drift allowance ({}) plus the node timeout ({}) plus the larger of min_validity and the safety margin ({}); raise ttl or lower {knob}",
        human(*.ttl),
        human(*.drift),
        human(*.node_timeout),
        human(*.least_validity)
    )]
    TtlTooShort {
        /// The setting that takes the largest share besides the TTL: `node_timeout`,
        /// `safety_margin`, `min_validity` or `drift_factor`.
        knob: &'static str,
        /// The TTL given.
        ttl: Duration,
        /// The drift allowance (`ttl * drift_factor + 2 ms`).
        drift: Duration,
        /// The node timeout.
        node_timeout: Duration,
        /// The least validity a new lease must have: `min_validity` or the safety margin.
        least_validity: Duration,
    },
    /// A setting that must be positive is zero.
    #[error("{setting} is zero: {}", zero_advice(.setting))]
    Zero {
        /// Which setting.
        setting: &'static str,
    },
    /// The drift factor is negative, not finite, or not below 1.
    #[error(
        "drift_factor {0} is out of range: use a value from 0 up to (not including) 1, typically 0.01"
    )]
    DriftFactor(f64),
    /// The test-only client clock rate is out of range (`--cfg redquorum_mutants`).
    #[cfg(redquorum_mutants)]
    #[error("client_clock_rate {0} is out of range: use a value above 0.1 and at most 10")]
    ClockRate(f64),
    /// A retry pause, jitter or wait budget too large to be added to the clock.
    #[error("{setting} {} is too large: it overflows the clock; use a realistic duration", human(*.value))]
    DurationOverflow {
        /// Which setting (or sum of settings).
        setting: &'static str,
        /// The value.
        value: Duration,
    },
    /// A TTL above `ttl_max`, the bound restart quarantine relies on. `ttl_max` defaults
    /// to the client's TTL, so a longer per-call TTL needs [`Builder::ttl_max`].
    #[error(
        "ttl {} exceeds ttl_max {}: restart quarantine keeps a restarted master out for ttl_max, so no lock may live longer; ttl_max defaults to the client's ttl: raise it with Builder::ttl_max to the longest TTL any call uses, or lower ttl",
        human(*.ttl),
        human(*.ttl_max)
    )]
    TtlAboveTtlMax {
        /// The TTL.
        ttl: Duration,
        /// The bound.
        ttl_max: Duration,
    },
    /// A duration above its documented maximum (see [`MAX_TTL`] and the other `MAX_*`
    /// constants).
    #[error("{setting} {} is above its maximum of {} ({limit}): {advice}",
        human(*.value),
        human(*.max)
    )]
    TooLarge {
        /// Which setting.
        setting: &'static str,
        /// The value given.
        value: Duration,
        /// The maximum.
        max: Duration,
        /// The constant that holds the maximum, such as `MAX_TTL`.
        limit: &'static str,
        /// What to do instead.
        advice: &'static str,
    },
    /// The key prefix starts with `redquorum:`, the names of the records this crate keeps
    /// on the masters (data epoch, fence counters, owner and cluster records).
    #[error(
        "key_prefix {prefix:?} starts with \"redquorum:\", where the lock's own records live: choose another prefix, such as \"locks:\""
    )]
    ReservedKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// The key prefix is longer than [`MAX_KEY_PREFIX_LEN`].
    #[error(
        "key_prefix is {len} bytes long, above MAX_KEY_PREFIX_LEN ({}): use a shorter prefix, such as \"locks:\"",
        MAX_KEY_PREFIX_LEN
    )]
    KeyPrefixTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The waiter TTL cannot work: a refresh every third of it must be able to finish
    /// within one node timeout, and no registration may outlive the lock's TTL.
    #[error("waiter_ttl {} is out of range: it must exceed three node timeouts ({}) and be at most the ttl ({}); {advice}",
        human(*.waiter_ttl),
        human(*.node_timeout * 3),
        human(*.ttl)
    )]
    WaiterTtl {
        /// The waiter TTL given.
        waiter_ttl: Duration,
        /// The node timeout.
        node_timeout: Duration,
        /// The lock's TTL.
        ttl: Duration,
        /// What to change.
        advice: &'static str,
    },
    /// The owner label is longer than [`MAX_LABEL_LEN`].
    #[error(
        "label is {len} bytes long, above MAX_LABEL_LEN ({}): use a shorter label",
        MAX_LABEL_LEN
    )]
    LabelTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The owner label holds a control character ([`char::is_control`]), a Unicode line
    /// separator or a direction override: a line break, tab, escape or reordering would
    /// break or forge the lines that show it.
    #[error(
        "label has a character that breaks or reorders its line ({character:?} at byte {at}): line breaks, tabs, escapes and other control characters, Unicode line separators and direction overrides are refused, as inspect, logs and the redquorum command show labels on one line; remove it, or write a space instead"
    )]
    LabelControl {
        /// The first such character.
        character: char,
        /// Its byte offset in the label.
        at: usize,
    },
    /// Fencing asked for without restart quarantine.
    #[error(
        "fencing tokens need restart quarantine (a master that lost its counters must not vote until they are seeded again): turn quarantine back on"
    )]
    FencingNeedsQuarantine,
    /// A TLS setting cannot be used: its file cannot be read, its PEM holds no certificate
    /// or key, TLS settings were given for masters that do not use TLS, or this build
    /// lacks the `tls` feature.
    #[error("{setting}: {reason}")]
    Tls {
        /// Which setting, such as `tls_ca_file`.
        setting: &'static str,
        /// What is wrong with it and what to change.
        reason: String,
    },
    /// The exponential backoff's maximum is below the base delay.
    #[error("backoff max {} is below retry_delay {}: raise the maximum or lower the delay",
        human(*.max),
        human(*.delay)
    )]
    BackoffMax {
        /// The maximum given.
        max: Duration,
        /// The base delay.
        delay: Duration,
    },
    /// The watchdog's interval is not below the TTL: a lease would expire before the
    /// interval ends, so the interval could never be kept.
    #[error(
        "extend_interval {} is not below the ttl {}: a lease would expire before the watchdog extended it at that interval (it extends just before the lease's safety point instead, whatever the interval); lower extend_interval (it defaults to a third of the ttl) or raise ttl",
        human(*.interval),
        human(*.ttl)
    )]
    ExtendInterval {
        /// The interval given.
        interval: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// Several settings cannot work: each of them, as one of the other variants, in the
    /// order the settings are checked (never nested). A build with one problem reports
    /// that problem's own variant instead; [`problems`](Problem::problems) and
    /// [`primary`](Problem::primary) work the same for both.
    #[error("{} settings cannot work: {}", .0.len(), several(.0))]
    Several(Vec<Problem>),
}

impl Problem {
    /// The setting this problem is about, as messages name it.
    pub(crate) fn setting(&self) -> Option<&'static str> {
        Some(match self {
            Problem::NoMasters | Problem::InvalidUrl { .. } | Problem::DuplicateMaster { .. } => {
                "masters"
            }
            Problem::InvalidDuration { setting, .. }
            | Problem::Zero { setting }
            | Problem::TooLarge { setting, .. }
            | Problem::Tls { setting, .. } => setting,
            Problem::DurationOverflow { .. } => "retry_delay",
            Problem::TtlTooShort { .. } => "ttl",
            Problem::DriftFactor(_) => "drift_factor",
            #[cfg(redquorum_mutants)]
            Problem::ClockRate(_) => "client_clock_rate",
            Problem::TtlAboveTtlMax { .. } => "ttl_max",
            Problem::ReservedKeyPrefix { .. } | Problem::KeyPrefixTooLong { .. } => "key_prefix",
            Problem::WaiterTtl { .. } => "waiter_ttl",
            Problem::LabelTooLong { .. } | Problem::LabelControl { .. } => "label",
            Problem::FencingNeedsQuarantine => "fencing",
            Problem::BackoffMax { .. } => "backoff",
            Problem::ExtendInterval { .. } => "extend_interval",
            Problem::Several(problems) => return problems.first().and_then(Problem::setting),
        })
    }

    /// The error users see: [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig),
    /// naming the setting, with every problem of [`Several`](Problem::Several).
    pub(crate) fn into_error(self) -> crate::Error {
        match self {
            Problem::Several(problems) => crate::Error::invalid_configs(
                problems.into_iter().map(Problem::into_error).collect(),
            ),
            problem => crate::Error::invalid_config(problem.setting(), problem.to_string()),
        }
    }
}

/// The problems of [`Problem::Several`], numbered, on one line.
pub(super) fn several(problems: &[Problem]) -> String {
    problems
        .iter()
        .enumerate()
        .map(|(i, problem)| format!("({}) {problem}", i + 1))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The least validity a lease of `ttl` must have, and the setting it comes from: the
/// larger of `min_validity` and the safety margin (explicit, or a share of the TTL).
pub(super) fn least_validity(
    min_validity: Duration,
    safety_margin: Option<Duration>,
    ttl: Duration,
) -> (Duration, &'static str) {
    let margin = safety_margin.unwrap_or_else(|| ttl.mul_f64(defaults::SAFETY_MARGIN_FRACTION));
    if min_validity > margin {
        (min_validity, "min_validity")
    } else {
        (margin, "safety_margin")
    }
}

/// Checks `ttl` as given (before it is cut to whole milliseconds): not zero, at most
/// [`MAX_TTL`], and in whole milliseconds (`PX`) above the drift allowance, one node
/// timeout and the least validity a lease must have.
pub(super) fn check_ttl(
    ttl: Duration,
    drift_factor: f64,
    node_timeout: Duration,
    (least_validity, least_from): (Duration, &'static str),
) -> Result<(), Problem> {
    if ttl.is_zero() {
        return Err(Problem::Zero { setting: "ttl" });
    }
    at_most("ttl", ttl, MAX_TTL)?;
    let drift = deadline::drift(ttl, drift_factor);
    let needed = drift
        .saturating_add(node_timeout)
        .saturating_add(least_validity);
    // The masters keep whole milliseconds: a TTL below one is no TTL at all.
    if deadline::whole_millis(ttl) <= needed {
        // Name the setting that takes the largest share, so the advice points at it.
        let knob = [
            (node_timeout, "node_timeout"),
            (least_validity, least_from),
            (drift, "drift_factor"),
        ]
        .into_iter()
        .max_by_key(|(share, _)| *share)
        .map_or("node_timeout", |(_, knob)| knob);
        return Err(Problem::TtlTooShort {
            knob,
            ttl,
            drift,
            node_timeout,
            least_validity,
        });
    }
    Ok(())
}

/// The problems [`Builder::build`] found, in the order the settings are checked.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<Problem>);

impl Problems {
    pub(super) fn push(&mut self, problem: Problem) {
        match problem {
            Problem::Several(problems) => self.0.extend(problems),
            problem => self.0.push(problem),
        }
    }

    /// Notes the problem of `checked`, if any.
    pub(super) fn check(&mut self, checked: Result<(), Problem>) {
        self.keep(checked);
    }

    /// The value of `checked`, or `None` with its problem noted.
    pub(super) fn keep<T>(&mut self, checked: Result<T, Problem>) -> Option<T> {
        checked.map_err(|problem| self.push(problem)).ok()
    }

    /// An optional duration setting: `Some(None)` when not given, `None` when given and
    /// it did not parse (its problem noted).
    pub(super) fn optional(
        &mut self,
        setting: &'static str,
        value: Option<DurationSetting>,
    ) -> Option<Option<Duration>> {
        match value {
            Some(value) => self.keep(duration(setting, value)).map(Some),
            None => Some(None),
        }
    }

    /// The error that reports every problem: the one itself, or [`Problem::Several`].
    pub(super) fn finish(mut self) -> Result<(), Problem> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(Problem::Several(self.0)),
        }
    }
}

/// What to do about a zero `setting`.
pub(super) fn zero_advice(setting: &str) -> &'static str {
    match setting {
        "ttl" => "a lock must live for some time (e.g. \"10s\")",
        "node_timeout" => "every master needs some time to answer (e.g. \"50ms\")",
        "connect_timeout" => "connecting to a master needs some time (e.g. \"1s\")",
        "retry_attempts" => "acquire needs at least one attempt",
        "wait_timeout" => {
            "no round can finish in it: give it more time than a round to the masters, or \
             make one attempt without waiting (`Retry::attempts(1)`, or `try_acquire` for one \
             call)"
        }
        _ => "give it a positive duration",
    }
}

/// Rejects `value` above `max` (one of the `MAX_*` constants) for `setting`.
pub(crate) fn at_most(
    setting: &'static str,
    value: Duration,
    max: Duration,
) -> Result<(), Problem> {
    if value <= max {
        return Ok(());
    }
    let (limit, advice) = match setting {
        "ttl" | "ttl_max" | "extend_interval" | "waiter_ttl" => (
            "MAX_TTL",
            "use a shorter lock and extend it while it is held (watchdog)",
        ),
        "node_timeout" => (
            "MAX_NODE_TIMEOUT",
            "a master that answers so slowly is better counted as failed",
        ),
        "connect_timeout" => ("MAX_CONNECT_TIMEOUT", "use a realistic duration"),
        "wait_timeout" => (
            "MAX_WAIT_TIMEOUT",
            "wait in a loop of your own if you must wait longer",
        ),
        "max_hold" => (
            "MAX_MAX_HOLD",
            "leave max_hold unset for no bound on holding",
        ),
        _ => ("a MAX_* constant", "use a realistic duration"),
    };
    Err(Problem::TooLarge {
        setting,
        value,
        max,
        limit,
        advice,
    })
}

/// The default waiter TTL for a lock of `ttl`: a tenth of it, kept between four node
/// timeouts and [`defaults::WAITER_TTL_CAP`], never above half the TTL, in whole
/// milliseconds (at least one); raised to one millisecond above three node timeouts
/// when half the TTL is not more, so that it is one [`check_waiter_ttl`] accepts whenever
/// one exists. A TTL of at most three node timeouts leaves none: the default is then the
/// TTL itself, the longest a registration may live.
pub(super) fn default_waiter_ttl(ttl: Duration, node_timeout: Duration) -> Duration {
    let wanted = ttl
        .mul_f64(defaults::WAITER_TTL_FRACTION)
        .max(node_timeout.saturating_mul(4))
        .min(defaults::WAITER_TTL_CAP)
        .min(ttl / 2);
    let wanted = deadline::whole_millis(wanted).max(Duration::from_millis(1));
    let least = deadline::whole_millis(node_timeout.saturating_mul(3))
        .saturating_add(Duration::from_millis(1));
    wanted.max(least).min(ttl)
}

/// Checks a waiter TTL given to [`Waiting::waiter_ttl`].
pub(super) fn check_waiter_ttl(
    waiter_ttl: Duration,
    ttl: Duration,
    node_timeout: Duration,
) -> Result<Duration, Problem> {
    if waiter_ttl.is_zero() {
        return Err(Problem::Zero {
            setting: "waiter_ttl",
        });
    }
    at_most("waiter_ttl", waiter_ttl, MAX_TTL)?;
    let advice = if waiter_ttl > ttl {
        "lower waiter_ttl or raise ttl"
    } else if waiter_ttl <= node_timeout.saturating_mul(3) {
        "raise waiter_ttl or lower node_timeout"
    } else {
        return Ok(waiter_ttl);
    };
    Err(Problem::WaiterTtl {
        waiter_ttl,
        node_timeout,
        ttl,
        advice,
    })
}

/// Refuses a prefix longer than [`MAX_KEY_PREFIX_LEN`] (first, so that no message repeats
/// it), or one under which lock keys could collide with the crate's own records.
pub(super) fn check_key_prefix(prefix: &str) -> Result<(), Problem> {
    if prefix.len() > MAX_KEY_PREFIX_LEN {
        return Err(Problem::KeyPrefixTooLong { len: prefix.len() });
    }
    if prefix.starts_with(crate::scripts::RECORD_NAMESPACE) {
        return Err(Problem::ReservedKeyPrefix {
            prefix: prefix.to_owned(),
        });
    }
    Ok(())
}

/// Refuses an owner label ([`Builder::label`], or one call's) longer than
/// [`MAX_LABEL_LEN`], or holding a control character, a Unicode line separator or a
/// direction override ([`breaks_a_line`](crate::error::breaks_a_line)).
pub(crate) fn check_label(label: &str) -> Result<(), Problem> {
    if label.len() > MAX_LABEL_LEN {
        return Err(Problem::LabelTooLong { len: label.len() });
    }
    match label
        .char_indices()
        .find(|(_, c)| crate::error::breaks_a_line(*c))
    {
        Some((at, character)) => Err(Problem::LabelControl { character, at }),
        None => Ok(()),
    }
}

/// The parsed duration of `setting`, or the error naming it.
pub(crate) fn duration(setting: &'static str, value: DurationSetting) -> Result<Duration, Problem> {
    value.map_err(|(input, reason)| Problem::InvalidDuration {
        setting,
        input,
        reason,
    })
}

/// Rejects durations that cannot be added to the clock (a year is the practical bound).
pub(super) fn fits_clock(setting: &'static str, value: Option<Duration>) -> Result<(), Problem> {
    const LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);
    match value {
        Some(d) if d <= LIMIT && Instant::now().checked_add(d).is_some() => Ok(()),
        Some(d) => Err(Problem::DurationOverflow { setting, value: d }),
        None => Err(Problem::DurationOverflow {
            setting,
            value: Duration::MAX,
        }),
    }
}
