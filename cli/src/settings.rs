//! The settings every subcommand shares (the masters, the TTL, the prefix, timeouts),
//! from flags or the environment, and the client built from them.
//!
//! Everything about reaching the masters goes through [`Settings::builder`]: connection
//! options (such as TLS files) are added there, once, for every subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use redquorum::{Builder, Redlock, Timeouts, Tls};

use crate::exit::{Code, Failure};

/// The masters and the settings every client of a cluster shares.
#[derive(Debug, Args)]
pub(crate) struct Settings {
    /// Comma-separated master URLs: redis://[user:password@]host:port[/db]. 3 or 5
    /// independent masters (never replicas of each other).
    #[arg(
        long,
        env = "REDQUORUM_MASTERS",
        value_name = "URLS",
        global = true,
        hide_env_values = true
    )]
    masters: Option<String>,

    /// How long a lock lives on the masters unless extended, like "10s" [default: 10s].
    #[arg(
        long,
        env = "REDQUORUM_TTL",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true,
        value_parser = flag_value
    )]
    ttl: Option<String>,

    /// The longest TTL any client of these masters uses; part of the cluster's record
    /// (`redquorum init`), so every client must give the same [default: the TTL].
    #[arg(
        long,
        env = "REDQUORUM_TTL_MAX",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true,
        value_parser = flag_value
    )]
    ttl_max: Option<String>,

    /// A prefix put before every lock name to form the key; part of the cluster's record
    /// [default: none].
    #[arg(long, env = "REDQUORUM_PREFIX", value_name = "PREFIX", global = true)]
    prefix: Option<String>,

    /// How long one master may take to answer one request [default: 50ms].
    #[arg(
        long,
        env = "REDQUORUM_NODE_TIMEOUT",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true,
        value_parser = flag_value
    )]
    node_timeout: Option<String>,

    /// How long connecting to a master may take [default: 1s].
    #[arg(
        long,
        env = "REDQUORUM_CONNECT_TIMEOUT",
        value_name = "DURATION",
        global = true,
        allow_hyphen_values = true,
        value_parser = flag_value
    )]
    connect_timeout: Option<String>,

    /// For rediss:// masters: the CA (a PEM file) their certificates must chain to; it
    /// replaces the system's trusted roots [default: the system's roots]. Needs a build
    /// with the `tls` feature.
    #[arg(long, env = "REDQUORUM_TLS_CA", value_name = "FILE", global = true)]
    tls_ca: Option<PathBuf>,

    /// For rediss:// masters that ask for a client certificate: its PEM file (the chain),
    /// with --tls-key.
    #[arg(long, env = "REDQUORUM_TLS_CERT", value_name = "FILE", global = true)]
    tls_cert: Option<PathBuf>,

    /// The client certificate's private key, a PEM file, with --tls-cert.
    #[arg(long, env = "REDQUORUM_TLS_KEY", value_name = "FILE", global = true)]
    tls_key: Option<PathBuf>,
}

/// A duration flag's value as given, unless it is a flag: a value that starts with `--`,
/// or `-` and a letter, is the next flag taken for the missing duration
/// (`allow_hyphen_values`), and is refused as a usage error rather than swallowed. A
/// flag swallowed by `--wait`, which is not read under `--no-wait`, would otherwise be
/// dropped without a word: `run --no-wait --wait --masters=B KEY -- CMD` locked on the
/// environment's masters and ran CMD.
pub(crate) fn flag_value(text: &str) -> Result<String, String> {
    let mut rest = text.trim_start().chars();
    let flag = match (rest.next(), rest.next()) {
        (Some('-'), Some(next)) => next == '-' || next.is_ascii_alphabetic(),
        _ => false,
    };
    if flag {
        return Err(
            "a flag where a duration belongs: the duration is missing; write it after its flag, like \"30s\""
                .to_owned(),
        );
    }
    Ok(text.to_owned())
}

/// A duration from the command line or the environment; `None` when not given.
///
/// Every duration flag takes a value that starts with `-` (`allow_hyphen_values`), so
/// that a negative one reaches this parser, which says what to write instead, where clap
/// would read `-5s` as unknown flags (a value that is a flag is refused before, by
/// [`flag_value`]).
pub(crate) fn duration(flag: &str, text: Option<&str>) -> Result<Option<Duration>, Failure> {
    let Some(text) = text else {
        return Ok(None);
    };
    humantime::parse_duration(text.trim())
        .map(Some)
        .map_err(|e| {
            let message = negative(flag, text).unwrap_or_else(|| {
                format!("{flag} {text:?} is not a duration ({e}): write it like \"10s\", \"250ms\" or \"1m 30s\"")
            });
            Failure::new(Code::Config, message)
        })
}

/// What to write instead of `text`, given to `flag`, if it is a negative duration (which
/// humantime does not read: it has no sign).
fn negative(flag: &str, text: &str) -> Option<String> {
    let magnitude = text.trim().strip_prefix('-')?.trim_start();
    if humantime::parse_duration(magnitude).is_ok() {
        let magnitude = if magnitude.contains(char::is_whitespace) {
            format!("{magnitude:?}")
        } else {
            magnitude.to_owned()
        };
        return Some(format!(
            "{flag} {text:?}: durations cannot be negative: write {flag} {magnitude}"
        ));
    }
    let number = !magnitude.is_empty() && magnitude.bytes().all(|b| b.is_ascii_digit());
    number.then(|| {
        format!(
            "{flag} {text:?}: durations cannot be negative, and need a unit: write {flag} {magnitude}s or {flag} {magnitude}ms"
        )
    })
}

/// The validated durations of [`Settings`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The lock TTL.
    pub(crate) ttl: Duration,
    /// One master's time to answer.
    pub(crate) node_timeout: Duration,
}

impl Settings {
    /// The master URLs, from `--masters` or `REDQUORUM_MASTERS`; blanks around commas
    /// and empty entries are ignored.
    fn master_urls(&self) -> Result<Vec<String>, Failure> {
        let urls: Vec<String> = self
            .masters
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        if urls.is_empty() {
            return Err(Failure::new(
                Code::Config,
                "no masters configured: set REDQUORUM_MASTERS (or --masters) to a comma-separated list of redis:// URLs, 3 or 5 independent masters",
            ));
        }
        Ok(urls)
    }

    /// The TTL and node timeout in force.
    pub(crate) fn timing(&self) -> Result<Timing, Failure> {
        Ok(Timing {
            ttl: duration("--ttl", self.ttl.as_deref())?.unwrap_or(redquorum::defaults::TTL),
            node_timeout: duration("--node-timeout", self.node_timeout.as_deref())?
                .unwrap_or(redquorum::defaults::NODE_TIMEOUT),
        })
    }

    /// A client builder with these settings. Restart quarantine stays on, as the library
    /// defaults: masters vote at once after `redquorum init`.
    pub(crate) fn builder(&self) -> Result<Builder, Failure> {
        let timing = self.timing()?;
        let mut timeouts = Timeouts::new().node(timing.node_timeout);
        if let Some(connect) = duration("--connect-timeout", self.connect_timeout.as_deref())? {
            timeouts = timeouts.connect(connect);
        }
        let mut builder = Redlock::builder()
            .masters(self.master_urls()?)
            .ttl(timing.ttl)
            .timeouts(timeouts);
        if let Some(ttl_max) = duration("--ttl-max", self.ttl_max.as_deref())? {
            builder = builder.ttl_max(ttl_max);
        }
        if let Some(prefix) = &self.prefix {
            builder = builder.key_prefix(prefix.clone());
        }
        let mut tls = Tls::new();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_file(ca);
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => tls = tls.client_cert_files(cert, key),
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err(Failure::new(
                    Code::Config,
                    "--tls-cert and --tls-key go together: give both (REDQUORUM_TLS_CERT and REDQUORUM_TLS_KEY), or neither",
                ));
            }
        }
        Ok(builder.tls(tls))
    }

    /// The client, built from [`builder`](Settings::builder).
    pub(crate) fn client(&self) -> Result<Redlock, Failure> {
        self.builder()?.build().map_err(|e| Failure::config(&e))
    }
}
