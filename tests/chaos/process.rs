//! Client processes (`redquorum-chaos-client`), frozen and thawed by PID, killed by PID
//! when dropped.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::event::Op;
use crate::history::{History, parse_line};

/// The client program: the `redquorum-chaos-client` example, which cargo builds with the
/// tests, next to this test binary's folder (`target/<profile>/examples/`).
fn client_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the test binary sits in target/<profile>/deps");
    let client = profile_dir.join("examples").join(format!(
        "redquorum-chaos-client{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        client.is_file(),
        "{} is missing: build the examples with the tests (cargo nextest run --all-features)",
        client.display()
    );
    client
}

/// One running client process; its events go into a [`History`].
pub struct ClientProcess {
    child: Child,
    pid: i32,
    reader: Option<JoinHandle<()>>,
    history: History,
    name: String,
}

impl ClientProcess {
    /// Starts the client binary with `args`; its JSON lines are appended to `history`.
    pub fn spawn(name: &str, args: &[String], history: &History) -> ClientProcess {
        let mut child = Command::new(client_binary())
            .arg("--client")
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let stdout = child.stdout.take().unwrap();
        let sink = history.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match parse_line(&line) {
                    Ok(event) => sink.push(event),
                    Err(e) => eprintln!("[chaos] unparsable client line: {e}"),
                }
            }
        });
        ClientProcess {
            child,
            pid,
            reader: Some(reader),
            history: history.clone(),
            name: name.to_owned(),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Freezes it (`SIGSTOP`).
    pub fn pause(&self) {
        kill(Pid::from_raw(self.pid), Signal::SIGSTOP).unwrap();
    }

    /// Thaws it (`SIGCONT`).
    pub fn resume(&self) {
        kill(Pid::from_raw(self.pid), Signal::SIGCONT).unwrap();
    }

    /// Kills it (`SIGKILL`), records `killed` for it in its history (every call and
    /// section it had open ends there) and reaps it.
    pub async fn kill(&mut self, resource: &str) {
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).unwrap();
        self.history.mark(&self.name, 0, resource, Op::Killed, "");
        let _ = timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// Waits until it recorded `op` (any acquisition), for at most `limit`.
    pub async fn wait_for(&self, op: Op, limit: Duration) {
        let history = self.history.clone();
        let name = self.name.clone();
        crate::support::wait_until(limit, &format!("{name} records {op:?}"), move || {
            let found = history
                .snapshot()
                .iter()
                .any(|e| e.client == name && e.op == op);
            async move { found }
        })
        .await;
    }

    /// Waits for it to exit by itself, for at most `limit`, and for its output to be read;
    /// returns whether it exited successfully.
    pub async fn wait(mut self, limit: Duration) -> bool {
        let status = timeout(limit, self.child.wait()).await;
        if let Some(reader) = self.reader.take() {
            let _ = timeout(Duration::from_secs(2), reader).await;
        }
        matches!(status, Ok(Ok(s)) if s.success())
    }
}

impl Drop for ClientProcess {
    fn drop(&mut self) {
        // Still ours (unreaped): the PID cannot have been recycled. SIGKILL also ends a
        // stopped process.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}
