//! The command's exit codes and its one-line errors.
//!
//! Its own outcomes follow sysexits(3), so that a scheduler can tell "someone else is on
//! it" (75, try later) from "the masters are down" (69) and "fix the configuration" (78);
//! the loss of the lock, with the command stopped, has a code of its own (79) outside
//! sysexits' range. Otherwise the command's own status is passed on.

use std::io::Write;
use std::process::ExitCode;

use redquorum::{Error, ErrorKind, MasterOutcome};

/// The exit codes, as `--help` prints them (and the README lists them).
pub(crate) const EXIT_CODES: &str = "\
Exit status:
  CMD's own   run: the command's exit status; 128 + N if it died by signal N, or if
              signal N reached redquorum while it waited for the lock (CMD never ran)
  0           inspect, force-unlock, init, check: done (check: every master fit to vote)
  64          usage: an unknown flag, a missing argument, a bad KEY
  69          unavailable: no quorum of masters reachable or voting (check: a master
              unreachable, unfit or not voting)
  70          internal error
  75          not acquired: the lock is held by another (--no-wait, or --wait ran out)
  77          the masters refused this client's credentials (user, password) or a
              command or key its ACL denies
  78          configuration: no masters, a bad URL, duration or grace, settings that
              differ from the cluster's record, a TLS certificate the masters or this
              client refuse
  79          run: the lock was lost while CMD ran; CMD's group was stopped (SIGTERM,
              then SIGKILL at the lease's safety point)
  126, 127    run: CMD could not be executed, or was not found

Environment (flags override it):
  REDQUORUM_MASTERS          comma-separated master URLs (redis://[user:password@]host:port[/db])
  REDQUORUM_TTL              lock TTL, like \"10s\" (default 10s)
  REDQUORUM_TTL_MAX          the longest TTL any client of the cluster uses (default: the TTL)
  REDQUORUM_PREFIX           key prefix (default none)
  REDQUORUM_NODE_TIMEOUT     time one master may take to answer (default 50ms)
  REDQUORUM_CONNECT_TIMEOUT  time to connect to a master (default 1s)
  REDQUORUM_TLS_CA           rediss:// masters: the CA's PEM file (default: the system's roots)
  REDQUORUM_TLS_CERT, REDQUORUM_TLS_KEY   rediss:// masters: a client certificate and its key
  REDQUORUM_WAIT, REDQUORUM_GRACE, REDQUORUM_LABEL   run's --wait, --grace, --label";

/// An exit code of the command's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// EX_USAGE: the command line is wrong.
    Usage = 64,
    /// EX_UNAVAILABLE: no quorum reachable or voting.
    Unavailable = 69,
    /// EX_SOFTWARE: an internal error.
    Software = 70,
    /// EX_TEMPFAIL: the lock is held by another; try later.
    TempFail = 75,
    /// EX_NOPERM: authentication refused.
    NoPerm = 77,
    /// EX_CONFIG: the configuration cannot work.
    Config = 78,
    /// The lock was lost while the command ran, and the command was stopped.
    LockLost = 79,
    /// The command could not be executed (as env(1) and timeout(1) say).
    CannotExecute = 126,
    /// The command was not found.
    NotFound = 127,
}

impl Code {
    pub(crate) fn get(self) -> u8 {
        self as u8
    }
}

/// A failure of the command's own: its exit code and its one-line message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A configuration the library refused. Its messages redact passwords, and name
    /// settings as the library does (`ttl`, `node_timeout`: the flags `--ttl`,
    /// `--node-timeout`); the one builder method they name is given as its flag.
    pub(crate) fn config(error: &Error) -> Self {
        Self::new(Code::Config, as_flags(&error.to_string()))
    }

    /// A failed operation. Its messages redact passwords.
    pub(crate) fn of(error: &Error) -> Self {
        Self::new(code_of(error), as_flags(&error.to_string()))
    }
}

/// A library message with the builder methods it names given as this command's flags.
fn as_flags(message: &str) -> String {
    const FLAGS: &[(&str, &str)] = &[
        ("Builder::ttl_max", "--ttl-max (REDQUORUM_TTL_MAX)"),
        // A cluster record's terms: the TTL maximum defaults to --ttl, so a job that
        // shortens its TTL must give the cluster's maximum.
        (
            "ttl_max_ms \"",
            "ttl_max_ms (--ttl-max, which defaults to --ttl: give the cluster's) \"",
        ),
        ("Tls::ca_pem or Tls::ca_file", "--tls-ca (REDQUORUM_TLS_CA)"),
        (
            "Tls::client_cert_pem or Tls::client_cert_files",
            "--tls-cert and --tls-key (REDQUORUM_TLS_CERT, REDQUORUM_TLS_KEY)",
        ),
    ];
    FLAGS
        .iter()
        .fold(message.to_owned(), |text, (method, flag)| {
            text.replace(method, flag)
        })
}

/// The exit code for a failed operation.
pub(crate) fn code_of(error: &Error) -> Code {
    match error.kind() {
        ErrorKind::Contended => Code::TempFail,
        // The wait budget ran out: held by another, unless the masters' failures and
        // abstentions (restart quarantine) alone ruled out a quorum in the last attempt.
        ErrorKind::WaitTimeout if quorum_impossible(error) => Code::Unavailable,
        ErrorKind::WaitTimeout => Code::TempFail,
        ErrorKind::NoQuorum
        | ErrorKind::NotEnoughVoters
        | ErrorKind::ValidityExhausted
        | ErrorKind::FencingFailed => Code::Unavailable,
        ErrorKind::Auth => Code::NoPerm,
        ErrorKind::InvalidResource => Code::Usage,
        ErrorKind::InvalidOptions
        | ErrorKind::InvalidConfig
        | ErrorKind::Misconfigured
        | ErrorKind::ClusterMismatch
        | ErrorKind::WrongKind
        | ErrorKind::LimitMismatch
        | ErrorKind::ClusterNotEmpty
        // A certificate not trusted, for another host or expired: fix the CA or the certs.
        | ErrorKind::Tls => Code::Config,
        _ => Code::Software,
    }
}

/// Whether so many masters failed (or abstained) in the error's last round that no
/// quorum could have granted, whatever the others said.
fn quorum_impossible(error: &Error) -> bool {
    let masters = error.masters();
    if masters.is_empty() {
        return false;
    }
    let quorum = masters.len() / 2 + 1;
    let failed = masters
        .iter()
        .filter(|m| {
            matches!(
                m.outcome(),
                MasterOutcome::Failed(_) | MasterOutcome::Pending | MasterOutcome::Abstained { .. }
            )
        })
        .count();
    masters.len() - failed < quorum
}

/// Prints `failure` as one line on stderr and returns its exit code.
pub(crate) fn report(failure: &Failure) -> ExitCode {
    err(&format!("redquorum: {}", one_line(&failure.message)));
    ExitCode::from(failure.code.get())
}

/// A warning that does not change the exit status, on one line.
pub(crate) fn warn(message: &str) {
    err(&format!("redquorum: warning: {}", one_line(message)));
}

/// A note on what the command does (stopping the command, say), on one line.
pub(crate) fn note(message: &str) {
    err(&format!("redquorum: {}", one_line(message)));
}

/// Writes `text` to stdout. A closed stdout (`| head`) is no reason to fail or panic,
/// as `print!` would: the outcome is the exit status.
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Writes one line to stderr, ignoring a closed stderr (never a panic, as `eprintln!`).
fn err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A command line clap refused, or `--help`/`--version`: help goes to stdout with 0;
/// anything else is one line on stderr with 64.
pub(crate) fn usage(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Kind;
    match error.kind() {
        Kind::DisplayHelp | Kind::DisplayVersion => {
            // The help text itself; nothing to add if stdout is closed.
            let _ = error.print();
            ExitCode::SUCCESS
        }
        Kind::DisplayHelpOnMissingArgumentOrSubcommand => {
            err(
                "redquorum: a command is missing: run, inspect, force-unlock, init or check (see redquorum --help)",
            );
            ExitCode::from(Code::Usage.get())
        }
        _ => {
            // The first paragraph: the message and, for missing arguments, their names.
            let text = error.to_string();
            let first: Vec<&str> = text
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error:").trim();
            let first = if first.is_empty() {
                "invalid command line"
            } else {
                first
            };
            err(&format!("redquorum: {first} (see redquorum --help)"));
            ExitCode::from(Code::Usage.get())
        }
    }
}
