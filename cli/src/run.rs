//! `redquorum run`: hold a lock while a command runs, and stop the command before the
//! lock can expire if it is lost (docs/design.md §12).
//!
//! The moments, on the lease's monotonic clock:
//! - the *safety point* is the lease's deadline minus its safety margin; every successful
//!   extension moves it;
//! - at `safety point - grace` with no extension since, or at once when loss is signalled
//!   early (an extension refused), the command's process group gets SIGTERM;
//! - at the safety point (or `grace` after an early loss, if that comes first) it gets
//!   SIGKILL. The keys on the masters outlive the safety point by the safety margin plus
//!   the drift allowance, so the group is gone before another client can take the lock.
//!
//! The lock is released only after the command exited and its group is empty.

use std::ffi::OsString;
use std::io::ErrorKind as IoKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime};

use clap::Args;
use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::Pid;
use redquorum::{AcquireOptions, Lease, LeaseHandle, LostReason, Redlock, Watchdog};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::exit::{self, Code, Failure};
use crate::settings::{Settings, Timing, duration};

/// `redquorum run`'s own flags.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Wait at most this long for the lock, like "30s" ("0s": one attempt, as --no-wait)
    /// [default: twice the TTL maximum].
    #[arg(
        long,
        env = "REDQUORUM_WAIT",
        value_name = "DURATION",
        allow_hyphen_values = true,
        value_parser = crate::settings::flag_value
    )]
    wait: Option<String>,

    /// Make one attempt; exit with 75 at once if the lock is held. Overrides --wait and
    /// REDQUORUM_WAIT.
    #[arg(long)]
    no_wait: bool,

    /// Give CMD a fencing token, in REDQUORUM_FENCING_TOKEN (needs durable masters).
    #[arg(long)]
    fencing: bool,

    /// What the lock's owner record calls its holder (shown by `redquorum inspect`).
    #[arg(long, env = "REDQUORUM_LABEL", value_name = "L")]
    label: Option<String>,

    /// If the lock is being lost, the time between SIGTERM and SIGKILL for CMD's group,
    /// and for what CMD leaves running when it exits [default: a fifth of the TTL]. Must
    /// be shorter than what the TTL leaves once the extension schedule is taken off.
    #[arg(
        long,
        env = "REDQUORUM_GRACE",
        value_name = "DURATION",
        allow_hyphen_values = true,
        value_parser = crate::settings::flag_value
    )]
    grace: Option<String>,

    /// The lock's name (the key prefix is put before it).
    #[arg(value_name = "KEY")]
    key: String,

    /// The command to run, and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// The watchdog's pause between extensions: the library's default, a third of the TTL,
/// set explicitly so that the grace period can be checked against it.
fn extend_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// How long after an extension the safety point lies, at the least: the TTL less the
/// drift allowance and the safety margin (the library's defaults).
fn validity_window(ttl: Duration) -> Duration {
    let drift = ttl.mul_f64(redquorum::defaults::DRIFT_FACTOR) + Duration::from_millis(2);
    let margin = ttl.mul_f64(redquorum::defaults::SAFETY_MARGIN_FRACTION);
    ttl.saturating_sub(drift).saturating_sub(margin)
}

/// The grace period: given, or a fifth of the TTL; refused when it would reach back
/// before the next extension is due (the command would be stopped on every healthy
/// extension that takes its full time).
fn grace(given: Option<&str>, timing: Timing) -> Result<Duration, Failure> {
    let grace = duration("--grace", given)?.unwrap_or(timing.ttl / 5);
    let room = validity_window(timing.ttl)
        .saturating_sub(extend_interval(timing.ttl))
        .saturating_sub(timing.node_timeout);
    if grace >= room {
        return Err(Failure::new(
            Code::Config,
            format!(
                "grace {} does not fit ttl {}: it must be shorter than {} (the TTL less the drift allowance, the safety margin, the extension interval of a third of the TTL and the node timeout); lower --grace or raise --ttl",
                humantime::format_duration(grace),
                humantime::format_duration(timing.ttl),
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(room.as_millis()).unwrap_or(u64::MAX)
                )),
            ),
        ));
    }
    Ok(grace)
}

/// The signals forwarded to the command's group.
struct Forwarded {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Forwarded {
    fn install() -> Result<Self, Failure> {
        let mut streams = Vec::new();
        for (sig, kind) in [
            (Signal::SIGINT, SignalKind::interrupt()),
            (Signal::SIGTERM, SignalKind::terminate()),
            (Signal::SIGHUP, SignalKind::hangup()),
            (Signal::SIGQUIT, SignalKind::quit()),
        ] {
            let stream = signal(kind)
                .map_err(|e| Failure::new(Code::Software, format!("cannot handle {sig}: {e}")))?;
            streams.push((sig, stream));
        }
        Ok(Self { streams })
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        let waits = self.streams.iter_mut().map(|(sig, stream)| {
            let sig = *sig;
            Box::pin(async move {
                // A stream ends only when the runtime shuts down.
                match stream.recv().await {
                    Some(()) => sig,
                    None => std::future::pending().await,
                }
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// Holds off, for the rest of the process, the signals that would stop `redquorum`
/// itself: a terminal's Ctrl-Z (SIGTSTP) and a background read or write (SIGTTIN,
/// SIGTTOU). Stopped, it could no longer extend the lock while CMD, in a process group
/// of its own and not stopped with it, runs on: the lock would expire under a running
/// CMD. Blocked rather than handled: a blocked SIGTTOU lets the write through. Called
/// before the runtime starts, so that every thread blocks them; CMD starts with an
/// empty signal mask (the standard library resets it in the child).
pub(crate) fn hold_off_job_control() {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        set.add(sig);
    }
    if let Err(e) = set.thread_block() {
        exit::warn(&format!(
            "cannot hold off job-control stops ({e}): a stopped redquorum lets the lock expire while the command runs"
        ));
    }
}

/// The safety point of a lease: its deadline less its safety margin.
fn safety_point(lease: &LeaseHandle) -> Instant {
    let deadline = lease.deadline();
    deadline
        .checked_sub(lease.safety_margin())
        .unwrap_or(deadline)
}

/// A monotonic instant as Unix epoch milliseconds, by the wall clock now.
fn epoch_millis(at: Instant) -> u128 {
    let now = Instant::now();
    let wall = if at >= now {
        SystemTime::now() + (at - now)
    } else {
        SystemTime::now() - (now - at)
    };
    wall.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Sends `sig` to the process group `group`; a group already empty is no error. Any
/// signal but SIGKILL is followed by SIGCONT, as timeout(1) does: a stopped process (one
/// that read the terminal from its background group, or was sent SIGSTOP) acts on it
/// only once continued, and would otherwise hold the lock for as long as it stays
/// stopped.
fn signal_group(group: Pid, sig: Signal) {
    let send = |sig: Signal| match killpg(group, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => exit::warn(&format!(
            "cannot send {sig} to the command's process group: {e}"
        )),
    };
    send(sig);
    if sig != Signal::SIGKILL {
        send(Signal::SIGCONT);
    }
}

/// Whether any process is left in the group.
fn group_alive(group: Pid) -> bool {
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}

/// How the command's run ended.
enum Ended {
    /// It exited on its own (or by a forwarded signal).
    Exited(ExitStatus),
    /// The lock was lost and the group was stopped; it then exited with this status.
    Stopped,
}

/// `redquorum run`.
pub(crate) async fn run(settings: &Settings, args: RunArgs) -> Result<u8, Failure> {
    let timing = settings.timing()?;
    // The settings first: a TTL the library refuses (zero, say) is reported as such, not
    // as a grace period that does not fit it.
    let mut builder = settings.builder()?;
    let interval = extend_interval(timing.ttl);
    if !interval.is_zero() {
        builder = builder.watchdog(Watchdog::off().interval(interval));
    }
    let client = builder.build().map_err(|e| Failure::config(&e))?;
    let outcome = match grace(args.grace.as_deref(), timing) {
        Ok(grace) => hold_and_run(&client, &args, grace, timing).await,
        Err(failure) => Err(failure),
    };
    // Background releases (a dropped attempt, a lease) finish before the process exits.
    client.shutdown().await;
    outcome
}

async fn hold_and_run(
    client: &Redlock,
    args: &RunArgs,
    grace: Duration,
    timing: Timing,
) -> Result<u8, Failure> {
    // Installed before acquiring, so that a signal while waiting ends the wait rather
    // than the process (the attempt in flight is then released in the background).
    let mut signals = Forwarded::install()?;
    let mut options = AcquireOptions::new().watchdog(true).fencing(args.fencing);
    if args.no_wait {
        options = options.attempts(1);
    } else if let Some(wait) = duration("--wait", args.wait.as_deref())? {
        // `--wait 0s` asks not to wait: one attempt, as `--no-wait` (the library refuses a
        // wait budget of zero, in which no round could finish).
        options = if wait.is_zero() {
            options.attempts(1)
        } else {
            options.wait_timeout(wait)
        };
    }
    if let Some(label) = &args.label {
        options = options.label(label.clone());
    }
    let lease = tokio::select! {
        acquired = client.acquire_with(&args.key, &options) => {
            acquired.map_err(|e| Failure::of(&e))?
        }
        sig = signals.recv() => {
            return Ok(u8::try_from(128 + sig as i32).unwrap_or(Code::Software.get()));
        }
    };
    // The watchdog's schedule starts when the lease is handed over, but the deadline
    // counts from the start of the acquisition round: a slow acquisition (far masters, a
    // first connection, a fencing write-back) can push the first extension past `safety
    // point - grace`, and a healthy command would be stopped. Then extend at once, so
    // that the schedule the grace was checked against holds from here on.
    let first_extended = Instant::now() + extend_interval(timing.ttl) + timing.node_timeout;
    if first_extended + grace >= safety_point(&lease.handle())
        && let Err(e) = lease.extend().await
    {
        let _ = lease.release().await;
        return Err(Failure::new(
            Code::Unavailable,
            format!(
                "the lock on {} was lost before the command started (it could not be extended): {e}",
                args.key
            ),
        ));
    }
    let outcome = supervise(&lease, args, grace, &mut signals).await;
    // Released only now: the command and its group are gone.
    match lease.release().await {
        Ok(report) => {
            if let Some(overrun) = report.overrun() {
                exit::warn(&format!(
                    "the lease on {} was released {} past its deadline",
                    args.key,
                    humantime::format_duration(overrun)
                ));
            }
        }
        Err(e) => exit::warn(&format!("release: {e}; the lock expires with its TTL")),
    }
    match outcome? {
        Ended::Exited(status) => Ok(status_code(status)),
        Ended::Stopped => Ok(Code::LockLost.get()),
    }
}

/// The exit code that passes on the command's status.
fn status_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(Code::Software.get());
    }
    match status.signal() {
        Some(sig) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(Code::Software.get()),
        None => Code::Software.get(),
    }
}

/// Starts the command in a process group of its own, with the lock's key, deadline and
/// fencing token in its environment; returns it and its group.
fn spawn_command(
    handle: &LeaseHandle,
    args: &RunArgs,
) -> Result<(tokio::process::Child, Pid), Failure> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(Failure::new(Code::Usage, "no command given after --"));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .process_group(0)
        .env("REDQUORUM_KEY", &args.key)
        .env(
            "REDQUORUM_DEADLINE_MS",
            epoch_millis(safety_point(handle)).to_string(),
        );
    match handle.fencing_token() {
        Some(token) => {
            command.env("REDQUORUM_FENCING_TOKEN", token.get().to_string());
        }
        None => {
            command.env_remove("REDQUORUM_FENCING_TOKEN");
        }
    }
    let shown = program.to_string_lossy();
    let child = command.spawn().map_err(|e| match e.kind() {
        IoKind::NotFound => Failure::new(
            Code::NotFound,
            format!("cannot run {shown:?}: command not found"),
        ),
        // Permission denied, not an executable, and the like.
        _ => Failure::new(Code::CannotExecute, format!("cannot run {shown:?}: {e}")),
    })?;
    let Some(group) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        // Reaped already (it cannot be, before a wait): nothing of it can still run.
        return Err(Failure::new(
            Code::Software,
            "the command's process id is unknown",
        ));
    };
    Ok((child, group))
}

/// Starts the command and watches it and the lease until it exited and its group is
/// empty.
async fn supervise(
    lease: &Lease,
    args: &RunArgs,
    grace: Duration,
    signals: &mut Forwarded,
) -> Result<Ended, Failure> {
    let handle = lease.handle();
    let (mut child, group) = spawn_command(&handle, args)?;

    let mut lost = handle.lost();
    // Once stopping begins it runs to its end: SIGKILL at `kill_at`.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let safety = safety_point(&handle);
        let term_at = safety.checked_sub(grace).unwrap_or(safety);
        let stopping = kill_at.is_some();
        let kill_when = kill_at.unwrap_or(safety);
        tokio::select! {
            status = child.wait() => match status {
                Ok(status) => break status,
                Err(e) => {
                    // The command can no longer be watched: it must not run on unwatched.
                    signal_group(group, Signal::SIGKILL);
                    let _ = wait_group_empty(group, Instant::now() + Duration::from_secs(1), signals).await;
                    return Err(Failure::new(Code::Software, format!("waiting for the command: {e}; its process group was killed")));
                }
            },
            sig = signals.recv() => signal_group(group, sig),
            reason = &mut lost, if !stopping => {
                // An extension refused (a force-unlock, another holder) or no quorum:
                // the lock may be gone already. Stop now.
                let now = Instant::now();
                let at = (now + grace).min(safety_point(&handle)).max(now);
                exit::note(&format!(
                    "lost the lock on {} ({}): stopping the command (SIGTERM now, SIGKILL in {})",
                    args.key,
                    reason_text(reason),
                    humantime::format_duration(Duration::from_millis(u64::try_from((at - now).as_millis()).unwrap_or(0)))
                ));
                signal_group(group, Signal::SIGTERM);
                kill_at = Some(at);
            }
            () = tokio::time::sleep_until(term_at), if !stopping => {
                if safety_point(&handle) > safety {
                    continue; // extended meanwhile
                }
                exit::note(&format!(
                    "the lock on {} was not extended in time: stopping the command (SIGTERM now, SIGKILL at the safety point)",
                    args.key
                ));
                signal_group(group, Signal::SIGTERM);
                kill_at = Some(safety);
            }
            () = tokio::time::sleep_until(kill_when), if stopping && !killed => {
                exit::note(&format!("sending SIGKILL to the command holding {}", args.key));
                signal_group(group, Signal::SIGKILL);
                killed = true;
            }
        }
    };
    if kill_at.is_none()
        && let Some(reason) = handle.lost_reason()
    {
        // Lost as the command exited on its own: its status stands, but say so.
        exit::warn(&format!(
            "the lock on {} was lost ({}) as the command exited",
            args.key,
            reason_text(reason)
        ));
    }
    // What the command left in its group is stopped too, before the lock is released, and
    // killed by the safety point at the latest: the command may have exited just as
    // stopping was due (or the runtime ran late), with nothing fixed in `kill_at` yet.
    let limit = kill_at.unwrap_or_else(|| safety_point(&handle));
    drain_group(group, grace, limit, signals).await;
    if kill_at.is_some() {
        Ok(Ended::Stopped)
    } else {
        Ok(Ended::Exited(status))
    }
}

/// When what the command left in its group gets SIGKILL, if SIGTERM did not stop it:
/// `grace` from `now`, but never after `limit`, and at once when `limit` has passed.
fn drain_kill_at(now: Instant, grace: Duration, limit: Instant) -> Instant {
    (now + grace).min(limit).max(now)
}

/// Stops what is left in `group` after the command exited: SIGTERM, then SIGKILL after
/// `grace` or at `limit` (the SIGKILL fixed when stopping began, else the safety point),
/// whichever comes first, then waits a little for the killed processes to be reaped.
/// Bounded; forwards signals meanwhile.
async fn drain_group(group: Pid, grace: Duration, limit: Instant, signals: &mut Forwarded) {
    if !group_alive(group) {
        return;
    }
    exit::note("the command exited, leaving processes in its group: stopping them");
    signal_group(group, Signal::SIGTERM);
    let kill = drain_kill_at(Instant::now(), grace, limit);
    if !wait_group_empty(group, kill, signals).await {
        signal_group(group, Signal::SIGKILL);
        if !wait_group_empty(group, Instant::now() + Duration::from_secs(1), signals).await {
            exit::warn("processes of the command's group are still not reaped after SIGKILL");
        }
    }
}

/// Polls until `group` is empty or `until`; whether it emptied.
async fn wait_group_empty(group: Pid, until: Instant, signals: &mut Forwarded) -> bool {
    loop {
        if !group_alive(group) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        let next = (Instant::now() + Duration::from_millis(10)).min(until);
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            sig = signals.recv() => signal_group(group, sig),
        }
    }
}

fn reason_text(reason: LostReason) -> String {
    match reason {
        LostReason::ExtendFailed => "an extension was refused or reached no quorum".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_are_killed_by_the_limit_at_the_latest() {
        let now = Instant::now();
        let grace = Duration::from_millis(600);
        // Far from the limit: the whole grace period.
        let far = now + Duration::from_secs(5);
        assert_eq!(drain_kill_at(now, grace, far), now + grace);
        // The safety point (or the SIGKILL fixed before) comes first: then.
        let near = now + Duration::from_millis(100);
        assert_eq!(drain_kill_at(now, grace, near), near);
        // Already past it (the command exited as stopping was due): at once.
        let past = now.checked_sub(Duration::from_millis(50)).unwrap_or(now);
        assert_eq!(drain_kill_at(now, grace, past), now);
    }
}
