//! The `redquorum` command as a real process against real masters (docs/testing.md §9):
//! mutual exclusion of two `run` loops, `--no-wait`, a force-unlock stopping a running
//! command before its keys could expire, masters lost mid-run (SIGKILL before the keys
//! expire), a signal forwarded to a stopped command, a terminal stop (Ctrl-Z) not
//! stopping run, no extension in time (SIGKILL by the safety point), far masters not
//! getting a healthy command stopped, SIGINT forwarded and the lock released, the
//! child's environment and exit status, leftovers of the command's group, `inspect`
//! (table and JSON), `force-unlock --value`, `init`, `check`, and bad input and
//! unavailable masters with their exit codes.
//!
//! Child commands are `sh -c` scripts that write timestamps (Unix epoch milliseconds,
//! `date +%s%3N`) to files; every loop in them ends by itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/support/mod.rs"]
mod support;

use redquorum::Timeouts;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redquorum::{Holding, Redlock, Verdict};
use redquorum_testkit::{Mode, Proxy};
use support::*;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

/// The lock TTL every test's masters are initialised with (and the command uses): short,
/// so that a lost lock is noticed within a second (the watchdog extends every third).
const TTL: Duration = Duration::from_secs(3);

/// The most any one command may take here before the test gives up on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// Unix epoch milliseconds now, on the clock `date +%s%3N` reads.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique_key(name).replace(':', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The timestamp on the line of `log` that starts with `word`.
fn stamp(log: &Path, word: &str) -> Option<u64> {
    read(log).lines().find_map(|line| {
        let (w, ms) = line.split_once(' ')?;
        (w == word).then(|| ms.trim().parse().ok()).flatten()
    })
}

/// The command, with only the environment given here among the `REDQUORUM_*` variables.
fn redquorum(env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    for (name, _) in std::env::vars() {
        if name.starts_with("REDQUORUM_") {
            command.env_remove(name);
        }
    }
    command
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Masters on loopback, initialised (by the command) so that they vote at once.
struct Fleet {
    cluster: Cluster,
    masters: String,
}

impl Fleet {
    async fn start(options: &ServerOptions) -> Fleet {
        let cluster = Cluster::start_with(3, options).await.unwrap();
        let masters = cluster.urls().join(",");
        let fleet = Fleet { cluster, masters };
        let init = fleet.output(&["init"]).await;
        assert_eq!(init.status.code(), Some(0), "{init:?}");
        assert!(stdout(&init).contains("bootstrapped"), "{init:?}");
        fleet
    }

    async fn new() -> Fleet {
        Fleet::start(&ServerOptions::new()).await
    }

    /// The command over these masters, with the test TTL and a node timeout that suits
    /// a loaded machine.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = redquorum(&[
            ("REDQUORUM_MASTERS", &self.masters),
            ("REDQUORUM_TTL", "3s"),
            ("REDQUORUM_NODE_TIMEOUT", "200ms"),
        ]);
        command.args(args);
        command
    }

    async fn output(&self, args: &[&str]) -> Output {
        finish(self.command(args).output()).await
    }

    /// Starts `run` with a `sh -c` script; `$1` in the script is `dir`.
    fn spawn_run(&self, flags: &[&str], key: &str, script: &str, dir: &Path) -> Child {
        let mut args: Vec<&str> = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[key, "--", "sh", "-c", script, "sh", dir.to_str().unwrap()]);
        self.command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// A library client with the cluster's settings, for playing another holder and for
    /// reading the masters.
    fn client(&self) -> Redlock {
        Redlock::builder()
            .masters(self.cluster.urls())
            .ttl(TTL)
            .timeouts(Timeouts::new().node("200ms"))
            .build()
            .unwrap()
    }
}

/// Awaits a command's output within [`PATIENCE`] (it is killed on drop otherwise).
async fn finish(output: impl Future<Output = std::io::Result<Output>>) -> Output {
    tokio::time::timeout(PATIENCE, output)
        .await
        .expect("the command did not finish in time")
        .unwrap()
}

/// Waits for a spawned command to exit within [`PATIENCE`].
async fn exited(child: Child) -> Output {
    finish(child.wait_with_output()).await
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The command failed with `code` and said why on one line of stderr.
fn assert_one_line_error(output: &Output, code: i32, what: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(code), "{what}: {output:?}");
    assert_eq!(err.lines().count(), 1, "{what}: one line: {err:?}");
    assert!(err.starts_with("redquorum: "), "{what}: {err:?}");
    assert!(!err.contains("panicked"), "{what}: {err:?}");
}

/// A port on loopback that nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn help_exits_zero_and_lists_the_exit_codes() {
    let help = finish(redquorum(&[]).arg("--help").output()).await;
    assert_eq!(help.status.code(), Some(0), "{help:?}");
    let text = stdout(&help);
    for code in ["64", "69", "75", "77", "78", "79", "REDQUORUM_MASTERS"] {
        assert!(text.contains(code), "--help lacks {code}: {text}");
    }
    let run = finish(redquorum(&[]).args(["run", "--help"]).output()).await;
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(stdout(&run).contains("--no-wait"), "{run:?}");
    assert!(stdout(&run).contains("SIGKILL"), "{run:?}");
}

/// What a bad invocation is, its environment, its arguments and its exit code.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<&'a str>, i32);

#[tokio::test]
async fn bad_input_is_one_line_with_its_exit_code() {
    let dir = scratch("bad");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let down = format!(
        "redis://:sekrit@127.0.0.1:{},redis://127.0.0.1:{},redis://127.0.0.1:{}",
        closed_port(),
        closed_port(),
        closed_port()
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "unknown flag",
            vec![],
            vec!["run", "--bogus", "k", "--", "sh", "-c", &touch],
            64,
        ),
        ("no command", vec![], vec!["run", "k"], 64),
        ("no subcommand", vec![], vec![], 64),
        (
            "force-unlock without --value or --any",
            vec![],
            vec!["force-unlock", "k"],
            64,
        ),
        (
            "--wait without its value",
            vec![],
            vec!["run", "k", "--wait"],
            64,
        ),
        (
            "empty master list",
            vec![("REDQUORUM_MASTERS", " , ")],
            vec!["run", "k", "--", "sh", "-c", &touch],
            78,
        ),
        (
            "bad URL",
            vec![("REDQUORUM_MASTERS", "redis://127.0.0.1:notaport")],
            vec!["run", "k", "--", "sh", "-c", &touch],
            78,
        ),
        (
            "bad TTL",
            vec![
                ("REDQUORUM_MASTERS", "redis://127.0.0.1:7001"),
                ("REDQUORUM_TTL", "ten"),
            ],
            vec!["run", "k", "--", "sh", "-c", &touch],
            78,
        ),
        (
            "grace too long for the TTL",
            vec![
                ("REDQUORUM_MASTERS", "redis://127.0.0.1:7001"),
                ("REDQUORUM_TTL", "3s"),
            ],
            vec!["run", "--grace", "2s", "k", "--", "sh", "-c", &touch],
            78,
        ),
        (
            "a KEY that, behind the prefix, names a record",
            vec![("REDQUORUM_MASTERS", &down), ("REDQUORUM_PREFIX", "redq")],
            vec!["force-unlock", "uorum:epoch", "--any"],
            64,
        ),
        (
            "unreachable cluster",
            vec![("REDQUORUM_MASTERS", &down)],
            vec!["run", "--no-wait", "k", "--", "sh", "-c", &touch],
            69,
        ),
        (
            "unreachable cluster, waiting",
            vec![("REDQUORUM_MASTERS", &down)],
            vec!["run", "--wait", "300ms", "k", "--", "sh", "-c", &touch],
            69,
        ),
    ];
    for (what, env, args, code) in cases {
        let output = finish(redquorum(&env).args(&args).output()).await;
        assert_one_line_error(&output, code, what);
        assert!(
            !stderr(&output).contains("sekrit"),
            "{what}: a password printed: {output:?}"
        );
        assert!(!marker.exists(), "{what}: the command ran");
    }
    // A zero TTL is named as the problem, not the grace period derived from it.
    let output = finish(
        redquorum(&[("REDQUORUM_MASTERS", &down), ("REDQUORUM_TTL", "0s")])
            .args(["run", "k", "--", "sh", "-c", &touch])
            .output(),
    )
    .await;
    assert_one_line_error(&output, 78, "zero TTL");
    let err = stderr(&output);
    assert!(
        err.contains("ttl is zero") && !err.contains("grace"),
        "{err}"
    );
    assert!(!marker.exists(), "zero TTL: the command ran");
    // Flags override the environment: a good --ttl beats a bad REDQUORUM_TTL (the
    // command then fails on the unreachable masters instead).
    let output = finish(
        redquorum(&[("REDQUORUM_MASTERS", &down), ("REDQUORUM_TTL", "ten")])
            .args(["--ttl", "3s", "run", "--no-wait", "k", "--", "true"])
            .output(),
    )
    .await;
    assert_one_line_error(&output, 69, "flag over environment");
}

/// A command line with a negative duration, its environment, and what the message says
/// after "durations cannot be negative".
type Negative<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

/// A negative duration, on any duration flag or in the environment, says that durations
/// cannot be negative and what to write instead, with the exit code of a bad duration
/// (78), where clap read `-5s` as unknown flags.
#[tokio::test]
async fn a_negative_duration_says_what_to_write_instead() {
    let dir = scratch("negative");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let down = format!("redis://127.0.0.1:{}", closed_port());
    let cmd = ["k", "--", "sh", "-c", &touch];
    let run = |flags: &[&'static str]| [&["run"], flags, &cmd].concat();
    let cases: Vec<Negative<'_>> = vec![
        (
            vec!["--ttl", "-5s", "inspect", "k"],
            vec![],
            ": write --ttl 5s",
        ),
        (run(&["--ttl", "-5s"]), vec![], ": write --ttl 5s"),
        (
            vec!["--ttl-max", "-1m", "inspect", "k"],
            vec![],
            ": write --ttl-max 1m",
        ),
        (
            vec!["check", "--node-timeout", "-50ms"],
            vec![],
            ": write --node-timeout 50ms",
        ),
        (
            vec!["--connect-timeout=-1s", "init"],
            vec![],
            ": write --connect-timeout 1s",
        ),
        (run(&["--wait", "-30s"]), vec![], ": write --wait 30s"),
        (run(&["--grace", "-1s"]), vec![], ": write --grace 1s"),
        (
            vec!["inspect", "--ttl", "-1m 30s", "k"],
            vec![],
            ": write --ttl \"1m 30s\"",
        ),
        (
            vec!["--ttl", "-5", "inspect", "k"],
            vec![],
            ", and need a unit: write --ttl 5s or --ttl 5ms",
        ),
        (
            vec!["inspect", "k"],
            vec![("REDQUORUM_TTL", "-5s")],
            ": write --ttl 5s",
        ),
        (
            run(&[]),
            vec![("REDQUORUM_WAIT", " -2s")],
            ": write --wait 2s",
        ),
    ];
    for (args, mut env, says) in cases {
        let what = format!("{env:?} {}", args.join(" "));
        env.push(("REDQUORUM_MASTERS", &down));
        let output = finish(redquorum(&env).args(&args).output()).await;
        assert_one_line_error(&output, 78, &what);
        let err = stderr(&output);
        assert!(
            err.contains(&format!("durations cannot be negative{says}")),
            "{what}: {err}"
        );
        assert!(!marker.exists(), "{what}: the command ran");
    }
}

/// A duration flag given no value takes no flag after it as its value: the flag is
/// refused as a usage error (64), not swallowed. `--wait` is not read under `--no-wait`,
/// so a flag it swallowed there was dropped without a word, and CMD ran without
/// `--fencing`, or holding a lock on the environment's masters instead of `--masters`.
#[tokio::test]
async fn a_duration_flag_without_its_value_swallows_no_flag() {
    let fleet = Fleet::new().await;
    let dir = scratch("swallowed");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let other = format!("--masters=redis://127.0.0.1:{}", closed_port());
    let cmd = ["k", "--", "sh", "-c", &touch];
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "--no-wait", "--wait", "--fencing"],
        vec!["run", "--wait", "--fencing", "--no-wait"],
        vec!["run", "--no-wait", "--wait", &other],
        vec!["run", "--no-wait", "--wait", "--label"],
        vec!["run", "--no-wait", "--wait", "-h"],
        vec!["run", "--grace", "--no-wait"],
        vec!["run", "--ttl", "--no-wait"],
        vec!["--ttl-max", "--", "run"],
        vec!["run", "--node-timeout", "--no-wait"],
        vec!["run", "--connect-timeout", "--no-wait"],
    ];
    for flags in cases {
        let args = [flags.as_slice(), &cmd].concat();
        let what = args.join(" ");
        let output = fleet.output(&args).await;
        assert_one_line_error(&output, 64, &what);
        assert!(
            stderr(&output).contains("a flag where a duration belongs"),
            "{what}: {}",
            stderr(&output)
        );
        assert!(!marker.exists(), "{what}: the command ran");
    }
    // A negative duration still reaches the duration's own message.
    let output = fleet
        .output(&["run", "--wait", "-5s", "k", "--", "true"])
        .await;
    assert_one_line_error(&output, 78, "--wait -5s");
    // The flags themselves work as before.
    let output = fleet
        .output(&[
            "run",
            "--no-wait",
            "--wait",
            "1s",
            "k",
            "--",
            "sh",
            "-c",
            &touch,
        ])
        .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(marker.exists(), "{output:?}");
}

#[tokio::test]
async fn two_run_loops_on_one_key_lose_no_increment() {
    let fleet = Fleet::new().await;
    let dir = scratch("counter");
    let counter = dir.join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    let key = unique_key("counter");
    // Read, pause, write: without the lock, concurrent increments overwrite each other.
    let script = r#"n=$(cat "$1/counter"); sleep 0.01; echo $((n + 1)) > "$1/counter""#;
    let worker = |_: usize| {
        let mut commands = Vec::new();
        for _ in 0..50 {
            let mut command = fleet.command(&[
                "run",
                "--wait",
                "20s",
                &key,
                "--",
                "sh",
                "-c",
                script,
                "sh",
                dir.to_str().unwrap(),
            ]);
            command.stdout(Stdio::null()).stderr(Stdio::piped());
            commands.push(command);
        }
        async move {
            for mut command in commands {
                let output = finish(command.output()).await;
                assert_eq!(output.status.code(), Some(0), "{output:?}");
            }
        }
    };
    tokio::join!(worker(0), worker(1));
    assert_eq!(read(&counter).trim(), "100");
}

#[tokio::test]
async fn no_wait_on_a_held_key_exits_75_at_once() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("held");
    let lease = client
        .acquire_with(&key, &redquorum::AcquireOptions::new().watchdog(true))
        .await
        .unwrap();
    let dir = scratch("held");
    let marker = dir.join("ran");
    // --no-wait overrides a wait budget in the environment.
    let output = finish(
        fleet
            .command(&[
                "run",
                "--no-wait",
                &key,
                "--",
                "touch",
                marker.to_str().unwrap(),
            ])
            .env("REDQUORUM_WAIT", "20s")
            .output(),
    )
    .await;
    assert_one_line_error(&output, 75, "--no-wait on a held key");
    // One attempt, refused (Contended), not a wait budget used up (WaitTimeout).
    let err = stderr(&output);
    assert!(err.contains("is held by another client"), "{err}");
    assert!(!err.contains("gave up waiting"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");
    // So does a wait of zero: one attempt, refused, where a budget of zero is refused by
    // the library as one no round can finish in.
    let output = finish(
        fleet
            .command(&[
                "run",
                "--wait",
                "0s",
                &key,
                "--",
                "touch",
                marker.to_str().unwrap(),
            ])
            .output(),
    )
    .await;
    assert_one_line_error(&output, 75, "--wait 0s on a held key");
    let err = stderr(&output);
    assert!(err.contains("is held by another client"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");
    // One attempt, while the holder still held it: it never waited for the holder.
    assert!(!lease.is_lost());
    let inspection = client.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some(lease.value()));
    lease.release().await.unwrap();
    client.shutdown().await;
}

/// A `run` holding `key` with a script that logs `start`, traps `signal` (logging its
/// name and exiting with `code`), and otherwise waits up to 20 s for a `stop` file.
fn waiting_script(signal: &str, code: u8) -> String {
    format!(
        r#"trap 'echo {signal} $(date +%s%3N) >> "$1/log"; exit {code}' {signal}
echo start $(date +%s%3N) >> "$1/log"
i=0
while [ ! -e "$1/stop" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done"#
    )
}

#[tokio::test]
async fn force_unlock_any_stops_the_command_before_its_keys_could_expire() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("unlock");
    let dir = scratch("unlock");
    let log = dir.join("log");
    let run = fleet.spawn_run(
        &["--label", "nightly"],
        &key,
        &waiting_script("TERM", 0),
        &dir,
    );
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    let before = client.inspect(&key).await.unwrap();
    assert!(matches!(before.verdict(), Verdict::Held { .. }), "{before}");

    let unlocked_from = now_ms();
    let unlock = fleet.output(&["force-unlock", &key, "--any"]).await;
    let unlocked_at = now_ms();
    assert_eq!(unlock.status.code(), Some(0), "{unlock:?}");
    assert!(stdout(&unlock).contains("deleted"), "{unlock:?}");

    let output = exited(run).await;
    let exit_at = now_ms();
    assert_eq!(output.status.code(), Some(79), "{output:?}");
    assert!(stderr(&output).contains("lost the lock"), "{output:?}");
    let started = stamp(&log, "start").unwrap();
    let termed = stamp(&log, "TERM").expect("the command got SIGTERM");
    // In order: started, unlocked, SIGTERM, the command's exit.
    assert!(started <= unlocked_from, "{started} {unlocked_from}");
    assert!(
        unlocked_from <= termed,
        "SIGTERM before the unlock: {termed}"
    );
    assert!(termed <= exit_at);
    // The deleted keys had at most a TTL left (every extension sets a TTL); less the
    // drift allowance, that is when they could have expired at the earliest had they
    // been left: the command had its SIGTERM before that.
    let expiry = unlocked_at + TTL.as_millis() as u64 - 32;
    assert!(
        termed < expiry,
        "SIGTERM at {termed}, after the keys could have expired ({expiry})"
    );
    // Released after the command: nothing of ours is left.
    assert!(matches!(
        client.inspect(&key).await.unwrap().verdict(),
        Verdict::Free
    ));
    client.shutdown().await;
}

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn masters_lost_mid_run_get_the_command_killed_before_the_keys_expire() {
    let mut fleet = Fleet::new().await;
    let key = unique_key("paused");
    let dir = scratch("paused");
    let log = dir.join("log");
    // A command that ignores SIGTERM and writes a heartbeat every 20 ms: only SIGKILL
    // stops it, and its last heartbeat bounds when it died.
    let script = r#"trap '' TERM
echo start $(date +%s%3N) >> "$1/log"
i=0
while [ $i -lt 1000 ]; do date +%s%3N >> "$1/beat"; sleep 0.02; i=$((i + 1)); done"#;
    let run = fleet.spawn_run(&["--grace", "300ms"], &key, script, &dir);
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    // The time left on the master that stays up bounds when the keys expire: the
    // others were set by the same rounds, and extensions stop with the quorum gone.
    let live = fleet.cluster.server(2).url();
    fleet.cluster.server_mut(0).pause().unwrap();
    fleet.cluster.server_mut(1).pause().unwrap();
    let read_at = now_ms();
    let mut conn = raw(&live).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 0, "the lock is on the live master: {pttl}");
    let expires = read_at + pttl as u64;

    let output = exited(run).await;
    fleet.cluster.server_mut(0).resume().unwrap();
    fleet.cluster.server_mut(1).resume().unwrap();
    assert_eq!(output.status.code(), Some(79), "{output:?}");
    let err = stderr(&output);
    assert!(err.contains("SIGKILL"), "{err}");
    // Appended, one line a beat: a beat cut short by SIGKILL leaves no line.
    let beats = read(&dir.join("beat"));
    let last_beat: u64 = beats
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
        .expect("the command wrote heartbeats");
    // The heartbeat stopped (SIGKILL) before the keys expired, less the drift allowance.
    assert!(
        last_beat < expires - 32,
        "the command still ran at {last_beat}; the keys expire at {expires}"
    );
}

// Checks I9 (loss is signalled before the keys can expire).
#[tokio::test]
async fn no_extension_in_time_gets_the_command_killed_by_the_safety_point() {
    let fleet = Fleet::new().await;
    let key = unique_key("late");
    let dir = scratch("late");
    let log = dir.join("log");
    // Ignores SIGTERM and beats every 20 ms; notes its first safety point.
    let script = r#"trap '' TERM
echo "$REDQUORUM_DEADLINE_MS" > "$1/deadline"
echo start $(date +%s%3N) >> "$1/log"
i=0
while [ $i -lt 1000 ]; do date +%s%3N >> "$1/beat"; sleep 0.02; i=$((i + 1)); done"#;
    let grace = Duration::from_millis(1200);
    let run = fleet.spawn_run(&["--grace", "1200ms"], &key, script, &dir);
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    // `run` stopped before its first extension (due a second after the acquisition): a
    // stopped VM, a starved runtime. It wakes between `safety point - grace` and the
    // safety point, with the extension not made: SIGTERM, and SIGKILL at that point.
    let pid = Pid::from_raw(run.id().unwrap() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let safety: u64 = read(&dir.join("deadline")).trim().parse().unwrap();
    let wake = safety - grace.as_millis() as u64 / 2;
    tokio::time::sleep(Duration::from_millis(wake.saturating_sub(now_ms()))).await;
    kill(pid, Signal::SIGCONT).unwrap();

    let output = exited(run).await;
    assert_eq!(output.status.code(), Some(79), "{output:?}");
    let err = stderr(&output);
    assert!(err.contains("not extended in time"), "{err}");
    let last_beat: u64 = read(&dir.join("beat"))
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
        .expect("the command wrote heartbeats");
    // Killed by the safety point: within the safety margin (5 % of the TTL), where no
    // key could have expired yet.
    assert!(
        last_beat < safety + TTL.as_millis() as u64 / 20,
        "the command still ran at {last_beat}; its safety point was {safety}"
    );
}

#[tokio::test]
async fn a_terminal_stop_does_not_stop_run_while_the_command_runs_on() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("tstp");
    let dir = scratch("tstp");
    let log = dir.join("log");
    let script = format!(
        r#"echo "$REDQUORUM_DEADLINE_MS" > "$1/deadline"
{}"#,
        waiting_script("TERM", 0)
    );
    let run = fleet.spawn_run(&[], &key, &script, &dir);
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    let holder = client
        .inspect(&key)
        .await
        .unwrap()
        .holder()
        .unwrap()
        .to_owned();
    // Ctrl-Z in a terminal: SIGTSTP to `run`'s process group, which the command is not
    // in. Were `run` stopped, the command would run on while the lock expired.
    let pid = run.id().unwrap();
    kill(Pid::from_raw(pid as i32), Signal::SIGTSTP).unwrap();
    // Past the moment the keys could have expired without an extension (the first
    // safety point, the safety margin and the drift allowance, with room to spare).
    let safety: u64 = read(&dir.join("deadline")).trim().parse().unwrap();
    let expired = safety + TTL.as_millis() as u64 / 20 + 32 + 300;
    tokio::time::sleep(Duration::from_millis(expired.saturating_sub(now_ms()))).await;
    let stat = read(Path::new(&format!("/proc/{pid}/stat")));
    let state = stat.rsplit(')').next().unwrap_or_default().trim();
    assert!(!state.starts_with('T'), "run was stopped: {state}");
    let inspection = client.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some(holder.as_str()), "{inspection}");

    std::fs::write(dir.join("stop"), "").unwrap();
    let output = exited(run).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stamp(&log, "TERM").is_none(),
        "the command was stopped: {output:?}"
    );
    client.shutdown().await;
}

#[tokio::test]
async fn sigint_reaches_the_command_and_the_lock_is_released() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("sigint");
    let dir = scratch("sigint");
    let log = dir.join("log");
    let run = fleet.spawn_run(&[], &key, &waiting_script("INT", 7), &dir);
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    assert!(client.inspect(&key).await.unwrap().holder().is_some());

    let pid = Pid::from_raw(run.id().unwrap() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    let output = exited(run).await;
    // The command's own status: its trap ran and exited with 7.
    assert_eq!(output.status.code(), Some(7), "{output:?}");
    assert!(stamp(&log, "INT").is_some(), "the command never saw SIGINT");
    // Released before the command returned: every master is free at once.
    let inspection = client.inspect(&key).await.unwrap();
    assert!(
        matches!(inspection.verdict(), Verdict::Free),
        "{inspection}"
    );
    assert!(gone_everywhere(&fleet.cluster, &key).await);
    client.shutdown().await;
}

/// Kills a process by its PID when dropped, if it is still there.
struct KillOnDrop(Pid);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGKILL);
    }
}

#[tokio::test]
async fn a_forwarded_signal_reaches_a_stopped_command() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("stopped");
    let dir = scratch("stopped");
    let log = dir.join("log");
    // The command stops itself, as one reading the terminal from its background group
    // (SIGTTIN) is stopped: only a SIGCONT lets it act on a signal.
    let script = r#"trap 'echo INT $(date +%s%3N) >> "$1/log"; exit 7' INT
echo $$ > "$1/pid"
echo start $(date +%s%3N) >> "$1/log"
kill -STOP $$
i=0
while [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done"#;
    let run = fleet.spawn_run(&[], &key, script, &dir);
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    let command: i32 = read(&dir.join("pid")).trim().parse().unwrap();
    let _command = KillOnDrop(Pid::from_raw(command));
    wait_until(PATIENCE, "the command stopped", || async {
        let stat = read(Path::new(&format!("/proc/{command}/stat")));
        stat.rsplit(')')
            .next()
            .unwrap_or_default()
            .trim()
            .starts_with('T')
    })
    .await;

    kill(Pid::from_raw(run.id().unwrap() as i32), Signal::SIGINT).unwrap();
    let output = exited(run).await;
    assert_eq!(output.status.code(), Some(7), "{output:?}");
    assert!(stamp(&log, "INT").is_some(), "the command never saw SIGINT");
    assert!(matches!(
        client.inspect(&key).await.unwrap().verdict(),
        Verdict::Free
    ));
    client.shutdown().await;
}

#[tokio::test]
async fn the_command_gets_its_key_deadline_and_fencing_token_and_its_status_passes_on() {
    let fleet = Fleet::start(&ServerOptions::new().persistence(Persistence::AofAlways)).await;
    let key = unique_key("env");
    let dir = scratch("env");
    let out = dir.join("env");
    let script = r#"echo "$REDQUORUM_KEY ${REDQUORUM_FENCING_TOKEN:-none} $REDQUORUM_DEADLINE_MS" >> "$1/env""#;
    let dir_arg = dir.to_str().unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let before = now_ms();
        let output = fleet
            .output(&[
                "run",
                "--fencing",
                &key,
                "--",
                "sh",
                "-c",
                script,
                "sh",
                dir_arg,
            ])
            .await;
        let after = now_ms();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let text = read(&out);
        let line: Vec<&str> = text.lines().last().unwrap().split(' ').collect();
        assert_eq!(line[0], key);
        tokens.push(line[1].parse::<u64>().unwrap());
        let deadline: u64 = line[2].parse().unwrap();
        assert!(
            deadline > before && deadline <= after + TTL.as_millis() as u64,
            "deadline {deadline} not within a TTL of {before}..{after}"
        );
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    // Without --fencing there is no token.
    let output = fleet
        .output(&["run", &key, "--", "sh", "-c", script, "sh", dir_arg])
        .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(read(&out).lines().last().unwrap().contains(" none "));

    // The command's status passes on; 128 + N for death by signal N.
    let status = |script: &'static str| {
        let fleet = &fleet;
        let key = key.clone();
        async move {
            fleet
                .output(&["run", &key, "--", "sh", "-c", script])
                .await
                .status
                .code()
        }
    };
    assert_eq!(status("exit 3").await, Some(3));
    assert_eq!(status("kill -TERM $$").await, Some(128 + 15));
    let missing = fleet
        .output(&["run", &key, "--", "/nonexistent/redquorum-test-command"])
        .await;
    assert_one_line_error(&missing, 127, "command not found");
    // Each of these released the lock: it is free.
    let client = fleet.client();
    assert!(matches!(
        client.inspect(&key).await.unwrap().verdict(),
        Verdict::Free
    ));
    client.shutdown().await;
}

#[tokio::test]
async fn leftovers_in_the_commands_group_are_stopped_before_the_release() {
    let fleet = Fleet::new().await;
    let key = unique_key("leftover");
    let dir = scratch("leftover");
    // The command starts a background process and exits at once.
    let script = r#"sleep 20 & echo $! > "$1/pid""#;
    let output = fleet
        .output(&[
            "run",
            "--grace",
            "300ms",
            &key,
            "--",
            "sh",
            "-c",
            script,
            "sh",
            dir.to_str().unwrap(),
        ])
        .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stderr(&output).contains("leaving processes"), "{output:?}");
    let pid: i32 = read(&dir.join("pid")).trim().parse().unwrap();
    // Gone, or a zombie waiting for its new parent to reap it.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = state.rsplit(')').next().unwrap_or_default().trim();
    assert!(
        state.is_empty() || state.starts_with('Z'),
        "pid {pid} still runs: {state}"
    );
}

#[tokio::test]
async fn the_lock_is_held_until_a_leftover_in_the_group_exits() {
    let fleet = Fleet::new().await;
    let client = fleet.client();
    let key = unique_key("straggler");
    let dir = scratch("straggler");
    // The command leaves a background process and exits once that process has set its
    // trap. On SIGTERM the process says so and lingers until the test lets it go (2 s at
    // most; the grace is 1.5 s).
    let script = r#"(trap 'echo term > "$1/term"; i=0; while [ ! -e "$1/go" ] && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done; exit 0' TERM
echo ready > "$1/ready"
i=0
while [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done) &
i=0
while [ ! -e "$1/ready" ] && [ $i -lt 400 ]; do sleep 0.01; i=$((i + 1)); done"#;
    let run = fleet.spawn_run(&["--grace", "1500ms"], &key, script, &dir);
    wait_until(PATIENCE, "the leftover got SIGTERM", || async {
        dir.join("term").exists()
    })
    .await;
    // The command exited, but what it left still runs: the lock is still held.
    let inspection = client.inspect(&key).await.unwrap();
    assert!(
        matches!(inspection.verdict(), Verdict::Held { .. }),
        "released while the leftover ran: {inspection}"
    );
    std::fs::write(dir.join("go"), "").unwrap();
    let output = exited(run).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(matches!(
        client.inspect(&key).await.unwrap().verdict(),
        Verdict::Free
    ));
    client.shutdown().await;
}

#[tokio::test]
async fn inspect_shows_the_holder_and_a_wrong_value_is_not_force_unlocked() {
    let fleet = Fleet::new().await;
    let key = unique_key("inspect");
    let dir = scratch("inspect");
    let log = dir.join("log");
    let run = fleet.spawn_run(
        &["--label", "nightly-backup"],
        &key,
        &waiting_script("TERM", 0),
        &dir,
    );
    wait_until(PATIENCE, "the command started", || async {
        stamp(&log, "start").is_some()
    })
    .await;
    let pid = run.id().unwrap();

    let json = fleet.output(&["inspect", &key, "--json"]).await;
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["resource"], key.as_str());
    assert_eq!(json["verdict"]["state"], "held", "{json}");
    assert_eq!(
        json["verdict"]["owner"]["label"], "nightly-backup",
        "{json}"
    );
    assert_eq!(json["verdict"]["owner"]["pid"], pid, "{json}");
    let value = json["verdict"]["value"].as_str().unwrap().to_owned();
    let masters = json["masters"].as_array().unwrap();
    assert_eq!(masters.len(), 3);
    for master in masters {
        assert_eq!(master["state"], "lock", "{master}");
        assert_eq!(master["value"], value.as_str(), "{master}");
        assert!(master["ttl_ms"].as_u64().unwrap() <= TTL.as_millis() as u64);
    }

    let table = fleet.output(&["inspect", &key]).await;
    assert_eq!(table.status.code(), Some(0), "{table:?}");
    let text = stdout(&table);
    assert!(
        text.contains("MASTER") && text.contains("held by"),
        "{text}"
    );
    assert_eq!(
        text.matches(&value).count(),
        4,
        "verdict and three rows: {text}"
    );
    assert!(text.contains("nightly-backup"), "{text}");

    // Another value: nothing is deleted, the holder keeps its lock.
    let wrong = fleet
        .output(&["force-unlock", &key, "--value", "not-the-holder"])
        .await;
    assert_eq!(wrong.status.code(), Some(0), "{wrong:?}");
    assert!(stdout(&wrong).contains("nothing deleted"), "{wrong:?}");
    let client = fleet.client();
    let inspection = client.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some(value.as_str()), "{inspection}");
    for master in inspection.masters() {
        assert!(matches!(master.holding(), Holding::Lock { .. }), "{master}");
    }

    std::fs::write(dir.join("stop"), "").unwrap();
    let output = exited(run).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stamp(&log, "TERM").is_none(),
        "the holder was stopped: {output:?}"
    );
    client.shutdown().await;
}

/// What another client wrote on the masters (a lock's value, a holder record's label,
/// host and client id, another kind's name) cannot break or forge `inspect`'s lines, nor
/// send the terminal escapes: the verdict line and the table show it escaped, as does
/// `force-unlock --any`'s report of the values it deleted.
#[tokio::test]
async fn what_another_client_wrote_cannot_break_inspect_lines() {
    let fleet = Fleet::new().await;
    let key = unique_key("inspect-forged");
    let other = unique_key("inspect-forged-kind");
    let forged = "\nlock k (key k): free\u{1b}[2J\u{202e}\u{2028}\u{85}";
    let value = format!("forged.1{forged}");
    for server in fleet.cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg("redquorum:holder:forged")
            .arg(&[
                "label",
                &format!("l{forged}"),
                "host",
                &format!("h{forged}"),
            ])
            .arg(&["client", &format!("c{forged}"), "pid", "1"])
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&other)
            .arg("v")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("redquorum:owner:{other}"))
            .arg(&["kind", &format!("k{forged}")])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let shown = |output: &Output, what: &str, lines: usize| {
        assert_eq!(output.status.code(), Some(0), "{what}: {output:?}");
        let text = stdout(output);
        assert_eq!(text.lines().count(), lines, "{what}: {text:?}");
        assert!(
            !text.contains(['\u{1b}', '\u{202e}', '\u{2028}', '\u{85}']),
            "{what}: {text:?}"
        );
        assert!(!text.contains("\nlock k (key k): free"), "{what}: {text:?}");
        text
    };
    let table = fleet.output(&["inspect", &key]).await;
    let text = shown(&table, "inspect", 5);
    assert!(text.contains("held by forged.1\\nlock k"), "{text}");
    assert!(text.contains("client c\\nlock k"), "{text}");
    assert!(
        text.contains("l\\nlock k (key k): free\\u{1b}[2J"),
        "{text}"
    );
    let table = fleet.output(&["inspect", &other]).await;
    let text = shown(&table, "inspect of another kind", 5);
    assert!(text.contains("other kind: k\\nlock k"), "{text}");
    let unlock = fleet.output(&["force-unlock", &key, "--any"]).await;
    let text = shown(&unlock, "force-unlock --any", 1);
    assert!(text.contains("deleted forged.1\\nlock k"), "{text}");
}

/// A key that a release handed to a queued waiter which never confirmed it (its process
/// died): `inspect` says so, in the table and in the JSON, so that an operator does not
/// take the waiter's id for a lease value.
#[tokio::test]
async fn inspect_tells_a_key_handed_to_a_queued_waiter() {
    let fleet = Fleet::new().await;
    let key = unique_key("inspect-handed");
    // The head of the queue on every master: a waiter whose record lives 4.5 s more.
    for server in fleet.cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let _: () = redis::AsyncCommands::zadd(
            &mut conn,
            format!("redquorum:queue:{key}"),
            "dead-waiter",
            1,
        )
        .await
        .unwrap();
        let _: () = redis::AsyncCommands::pset_ex(
            &mut conn,
            format!("redquorum:waiter:{key}:dead-waiter"),
            "4500 redquorum:handoff:nobody",
            4500,
        )
        .await
        .unwrap();
    }
    let client = fleet.client();
    let lease = client.acquire(&key).await.unwrap();
    lease.release().await.unwrap();
    wait_until(PATIENCE, "the key handed to the waiter", || async {
        client.inspect(&key).await.unwrap().holder() == Some("dead-waiter")
    })
    .await;

    let json = fleet.output(&["inspect", &key, "--json"]).await;
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["verdict"]["state"], "held", "{json}");
    assert_eq!(json["verdict"]["value"], "dead-waiter", "{json}");
    assert_eq!(json["verdict"]["handed"], true, "{json}");
    let handed = json["masters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["handed"] == true)
        .count();
    assert!(handed >= 2, "{json}");

    let table = fleet.output(&["inspect", &key]).await;
    assert_eq!(table.status.code(), Some(0), "{table:?}");
    let text = stdout(&table);
    assert!(text.contains("handed to that queued waiter"), "{text}");

    // A lease is not a handed key.
    let unlocked = fleet
        .output(&["force-unlock", &key, "--value", "dead-waiter"])
        .await;
    assert_eq!(unlocked.status.code(), Some(0), "{unlocked:?}");
    let lease = client.acquire(&key).await.unwrap();
    let json = fleet.output(&["inspect", &key, "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["verdict"]["value"], lease.value(), "{json}");
    assert_eq!(json["verdict"]["handed"], false, "{json}");
    let table = fleet.output(&["inspect", &key]).await;
    assert!(!stdout(&table).contains("handed to"), "{table:?}");
    lease.release().await.unwrap();
    client.shutdown().await;
}

#[tokio::test]
async fn check_exits_zero_when_healthy_and_69_with_a_master_stopped() {
    let mut fleet = Fleet::new().await;
    let healthy = fleet.output(&["check"]).await;
    assert_eq!(healthy.status.code(), Some(0), "{healthy:?}");
    assert!(stdout(&healthy).contains("healthy"), "{healthy:?}");
    // Initialising again changes nothing.
    let again = fleet.output(&["init"]).await;
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(stdout(&again).contains("already initialised"), "{again:?}");

    fleet.cluster.server_mut(1).kill().unwrap();
    let unfit = fleet.output(&["check"]).await;
    assert_eq!(unfit.status.code(), Some(69), "{unfit:?}");
    assert!(stdout(&unfit).contains("unhealthy"), "{unfit:?}");

    // Brand-new masters that were never initialised abstain (restart quarantine).
    let fresh = Cluster::start(3).await.unwrap();
    let output = finish(
        redquorum(&[("REDQUORUM_MASTERS", &fresh.urls().join(","))])
            .arg("check")
            .output(),
    )
    .await;
    assert_eq!(output.status.code(), Some(69), "{output:?}");
    assert!(stdout(&output).contains("restart quarantine"), "{output:?}");
    // The report has nothing to change, so the reason for 69 is said on one line.
    assert!(
        stderr(&output).contains("3 of 3 masters cannot vote now"),
        "{output:?}"
    );
}

#[tokio::test]
async fn a_client_with_other_cluster_settings_is_refused_as_misconfigured() {
    let fleet = Fleet::new().await;
    let key = unique_key("mismatch");
    // The cluster was initialised with a TTL maximum of 3 s; 6 s differs.
    let output = fleet
        .output(&["--ttl-max", "6s", "run", "--no-wait", &key, "--", "true"])
        .await;
    assert_one_line_error(&output, 78, "another TTL maximum");
    // A shorter TTL alone gives a shorter maximum too: the message names the flag.
    let output = fleet
        .output(&["--ttl", "2s", "run", "--no-wait", &key, "--", "true"])
        .await;
    assert_one_line_error(&output, 78, "a shorter TTL without the cluster's maximum");
    assert!(stderr(&output).contains("--ttl-max"), "{output:?}");
}

#[tokio::test]
async fn a_wait_run_out_with_a_master_abstaining_and_one_down_is_unavailable_not_held() {
    let mut fleet = Fleet::new().await;
    // Master 0 loses its data and is re-admitted: it abstains for its restart quarantine
    // (the cluster's TTL maximum, 3 s). Master 2 is down. The one voter left grants every
    // attempt, but no quorum can: nobody holds the lock.
    let mut conn = raw(&fleet.cluster.server(0).url()).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let readmit = fleet.output(&["init"]).await;
    assert_eq!(readmit.status.code(), Some(0), "{readmit:?}");
    assert!(stdout(&readmit).contains("re-admitted"), "{readmit:?}");
    fleet.cluster.server_mut(2).kill().unwrap();
    let dir = scratch("abstaining");
    let marker = dir.join("ran");
    let key = unique_key("abstaining");
    let output = fleet
        .output(&[
            "run",
            "--wait",
            "1s",
            &key,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ])
        .await;
    assert_one_line_error(&output, 69, "one master abstaining, one down");
    let err = stderr(&output);
    assert!(err.contains("gave up waiting"), "{err}");
    assert!(err.contains("1 abstaining"), "{err}");
    assert!(err.contains("0 held by another"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");
}

#[tokio::test]
async fn far_masters_do_not_get_a_healthy_command_stopped() {
    let fleet = Fleet::new().await;
    // Every master 240 ms away (a round trip), within the 500 ms node timeout.
    let mut proxies = Vec::new();
    for server in fleet.cluster.servers() {
        let proxy = Proxy::for_server(server).await.unwrap();
        proxy.set_mode(Mode::delay(Duration::from_millis(120), Duration::ZERO));
        proxies.push(proxy);
    }
    let masters: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let dir = scratch("far");
    let log = dir.join("log");
    let key = unique_key("far");
    // A grace the TTL admits (it must be under 3 s - 32 ms - 150 ms - 1 s - 500 ms =
    // 1.318 s). The deadline counts from the start of the acquisition round, the
    // watchdog's schedule from its end: unless the command makes up for the round, the
    // first extension would come after `safety point - grace` and stop a healthy command.
    let script =
        r#"echo start $(date +%s%3N) >> "$1/log"; sleep 2.5; echo done $(date +%s%3N) >> "$1/log""#;
    let output = finish(
        redquorum(&[
            ("REDQUORUM_MASTERS", &masters.join(",")),
            ("REDQUORUM_TTL", "3s"),
            ("REDQUORUM_NODE_TIMEOUT", "500ms"),
        ])
        .args([
            "run",
            "--grace",
            "1200ms",
            &key,
            "--",
            "sh",
            "-c",
            script,
            "sh",
            dir.to_str().unwrap(),
        ])
        .output(),
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!stderr(&output).contains("stopping"), "{output:?}");
    assert!(stamp(&log, "done").is_some(), "the command was cut short");
}

/// The command over TLS-only masters, trusting their CA by `--tls-ca`/`REDQUORUM_TLS_CA`:
/// `init`, `run`, `--no-wait` on a held key, `inspect` and `check` work; a CA that did not
/// sign the masters is a configuration error (78), said on one line, and the command
/// never runs.
#[cfg(feature = "tls")]
#[tokio::test]
async fn over_tls_the_command_runs_and_a_wrong_ca_is_a_configuration_error() {
    use redquorum_testkit::TlsAuthority;

    let authority = TlsAuthority::generate().unwrap();
    let cluster = Cluster::start_with(3, &ServerOptions::new().tls(authority.clone()))
        .await
        .unwrap();
    let masters = cluster.urls().join(",");
    assert!(masters.starts_with("rediss://"), "{masters}");
    let ca = authority.ca_file();
    let ca = ca.to_str().unwrap();
    let command = |ca: &str, args: &[&str]| {
        let mut command = redquorum(&[
            ("REDQUORUM_MASTERS", &masters),
            ("REDQUORUM_TTL", "3s"),
            ("REDQUORUM_NODE_TIMEOUT", "200ms"),
        ]);
        command.args(["--tls-ca", ca]).args(args);
        command
    };

    let init = finish(command(ca, &["init"]).output()).await;
    assert_eq!(init.status.code(), Some(0), "{init:?}");
    let check = finish(command(ca, &["check"]).output()).await;
    assert_eq!(check.status.code(), Some(0), "{check:?}");

    let key = unique_key("tls");
    let dir = scratch("tls");
    let script = waiting_script("TERM", 3);
    let mut args = vec!["run", key.as_str(), "--", "sh", "-c", script.as_str(), "sh"];
    args.push(dir.to_str().unwrap());
    let holder = command(ca, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = dir.join("log");
    wait_until(PATIENCE, "the command started over TLS", || {
        let started = stamp(&log, "start").is_some();
        async move { started }
    })
    .await;

    let marker = dir.join("ran");
    let touch = [
        "run",
        "--no-wait",
        &key,
        "--",
        "touch",
        marker.to_str().unwrap(),
    ];
    let refused = finish(command(ca, &touch).output()).await;
    assert_one_line_error(&refused, 75, "--no-wait over TLS on a held key");
    let inspect = finish(command(ca, &["inspect", &key]).output()).await;
    assert_eq!(inspect.status.code(), Some(0), "{inspect:?}");
    assert!(stdout(&inspect).contains("held by"), "{inspect:?}");

    // A CA that did not sign the masters' certificates: refused as configuration, not
    // as "held by another" nor "unavailable", and the command never runs.
    let stranger = TlsAuthority::generate().unwrap();
    let stranger_ca = stranger.ca_file();
    let wrong = finish(command(stranger_ca.to_str().unwrap(), &touch).output()).await;
    assert_one_line_error(&wrong, 78, "a CA that did not sign the masters");
    let err = stderr(&wrong);
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(err.contains("--tls-ca"), "names the flag to fix: {err}");
    assert!(!marker.exists(), "the command ran without the lock");

    std::fs::write(dir.join("stop"), "").unwrap();
    let held = exited(holder).await;
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let after = finish(command(ca, &["run", "--no-wait", &key, "--", "true"]).output()).await;
    assert_eq!(after.status.code(), Some(0), "released over TLS: {after:?}");
}
