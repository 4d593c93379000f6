//! `redquorum`: run a command on exactly one machine of many, while holding a lock on a
//! set of independent Redis masters; inspect and force-unlock locks; initialise and check
//! the masters. The workspace's crate `redquorum-cli`:
//!
//! ```text
//! cargo install --path cli
//! export REDQUORUM_MASTERS=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//! redquorum run nightly-backup -- /usr/local/bin/backup.sh --full
//! ```
//!
//! `run` acquires the lock, starts the command in its own process group, keeps the lock
//! extended while the command runs, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to that
//! group, and releases the lock only after the command (and whatever it left in its
//! group) has exited. If the lock is lost, the group gets SIGTERM, then SIGKILL at the
//! lease's safety point, so that it is gone before the lock can expire on the masters
//! (docs/design.md §12).
//!
//! It uses only the library's public API.
//!
//! # Exit status
//! As `redquorum --help` prints it ([`exit::EXIT_CODES`]); the codes of the command's own
//! outcomes follow sysexits(3):
//!
//! | code | meaning |
//! |---|---|
//! | CMD's own | `run`: the command's exit status; 128 + N if it died by signal N, or if signal N reached `redquorum` while it waited for the lock (CMD never ran) |
//! | 0 | `inspect`, `force-unlock`, `init`, `check`: done (`check`: every master fit to vote) |
//! | 64 | EX_USAGE: an unknown flag, a missing argument, a bad KEY |
//! | 69 | EX_UNAVAILABLE: no quorum of masters reachable or voting; `check`: a master unfit to vote |
//! | 70 | EX_SOFTWARE: internal error |
//! | 75 | EX_TEMPFAIL: not acquired, the lock is held by another (`--no-wait`, or `--wait` ran out) |
//! | 77 | EX_NOPERM: the masters refused this client's credentials (user, password) or a command or key its ACL denies |
//! | 78 | EX_CONFIG: no masters, a bad URL, duration or grace, settings that differ from the cluster's record, a TLS certificate the masters or this client refuse |
//! | 79 | `run`: the lock was lost while the command ran, and its process group was stopped |
//! | 126, 127 | `run`: the command could not be executed, or was not found |
//!
//! Errors are one line on stderr, `redquorum: <message>`; passwords in master URLs are
//! never printed.

mod admin;
mod exit;
mod run;
mod settings;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::exit::{Code, Failure};
use crate::settings::Settings;

/// Run a command on exactly one machine of many, holding a lock on independent Redis
/// masters (Redlock); inspect, force-unlock, initialise and check.
#[derive(Debug, Parser)]
#[command(
    name = "redquorum",
    version,
    after_long_help = exit::EXIT_CODES,
    after_help = "Exit codes: redquorum --help. Flags override the REDQUORUM_* environment."
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire KEY, run CMD while holding it, release it after CMD exited
    ///
    /// CMD runs in its own process group, with stdin, stdout and stderr inherited and in
    /// its environment REDQUORUM_KEY, REDQUORUM_DEADLINE_MS (the lease's first safety
    /// point, Unix epoch milliseconds; every extension moves the real one later) and, with
    /// --fencing, REDQUORUM_FENCING_TOKEN. The lock is extended while CMD runs. SIGINT,
    /// SIGTERM, SIGHUP and SIGQUIT sent to redquorum are forwarded to CMD's group.
    ///
    /// If the lock is lost (an extension refused, say after a force-unlock, or no quorum
    /// reachable), CMD's group gets SIGTERM at once, and SIGKILL at the lease's safety
    /// point at the latest, before the lock can expire; without an extension in time it
    /// gets SIGTERM at the safety point less --grace. redquorum then exits with 79.
    ///
    /// The lock is released after CMD exited; what CMD left running in its group gets
    /// SIGTERM, then SIGKILL after --grace, first. Exits with CMD's status (128 + N if it
    /// died by signal N).
    #[command(after_long_help = exit::EXIT_CODES)]
    Run(run::RunArgs),

    /// Show what every master holds for KEY, its owner and the verdict
    #[command(after_long_help = exit::EXIT_CODES)]
    Inspect(InspectArgs),

    /// Delete KEY's lock on every master (--value V or --any)
    ///
    /// With --value, only that acquisition (compare-and-delete); with --any, whatever holds it (and its fence
    /// counter is raised). The holder is no longer excluded from here on: a `redquorum run`
    /// holding it stops its command.
    #[command(name = "force-unlock", after_long_help = exit::EXIT_CODES)]
    ForceUnlock(ForceUnlockArgs),

    /// Initialise brand-new masters, so that they vote at once
    ///
    /// Writes the cluster record on every master, so that they vote at once and every
    /// client with other settings (TTL maximum, prefix, master count) is refused. Once,
    /// when the masters are new.
    #[command(after_long_help = exit::EXIT_CODES)]
    Init,

    /// Check every master; exit with 69 when one is unfit to vote
    ///
    /// Reports whether each master is reachable, durable, safe from eviction, in step with
    /// the clock, out of restart quarantine and of this cluster; exits with 69 when a master has a problem or cannot vote.
    #[command(after_long_help = exit::EXIT_CODES)]
    Check,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// The lock's name (the key prefix is put before it).
    #[arg(value_name = "KEY")]
    key: String,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ForceUnlockArgs {
    /// The lock's name (the key prefix is put before it).
    #[arg(value_name = "KEY")]
    key: String,

    /// Delete only this acquisition's value (`redquorum inspect KEY` shows it); a newer
    /// holder is left alone.
    #[arg(
        long,
        value_name = "V",
        required_unless_present = "any",
        conflicts_with = "any"
    )]
    value: Option<String>,

    /// Delete whatever holds the lock.
    #[arg(long)]
    any: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return exit::usage(&error),
    };
    if matches!(cli.command, Command::Run(_)) {
        run::hold_off_job_control();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return exit::report(&Failure::new(
                Code::Software,
                format!("cannot start the async runtime: {error}"),
            ));
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => exit::report(&failure),
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let Cli { settings, command } = cli;
    match command {
        Command::Run(args) => run::run(&settings, args).await,
        Command::Inspect(args) => admin::inspect(&settings, &args.key, args.json).await,
        Command::ForceUnlock(args) => {
            admin::force_unlock(&settings, &args.key, args.value.as_deref()).await
        }
        Command::Init => admin::init(&settings).await,
        Command::Check => admin::check(&settings).await,
    }
}
