//! One history event, and the JSON line it is written as.
//!
//! Shared by the chaos suite and the `redquorum-chaos-client` binary, so it depends on
//! nothing but std: the binary cannot use dev-dependencies. Times are raw
//! `CLOCK_MONOTONIC` nanoseconds, system-wide on Linux, so events written by different
//! processes compare exactly.
#![allow(dead_code, unreachable_pub)]

use std::fmt::Write as _;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// An acquire call starts (`detail`: `"fair"` for a fair call).
    AcqStart,
    /// It returned a lease (`value`, `deadline_ns` set).
    AcqOk,
    /// It returned an error (`detail`: the error kind).
    AcqFail,
    /// The critical section starts: recorded after acquire returned.
    CsStart,
    /// Inside the critical section, its reads of the checker store are done (a scenario
    /// that freezes the client there waits for this). The checkers ignore it.
    CsRead,
    /// The critical section ends: recorded before release is sent. `detail` is `"done"`
    /// when its counter write was made, `"abandoned"` when the holder stopped without
    /// writing because its lease was running out.
    CsEnd,
    /// An extension succeeded (`deadline_ns`: the new deadline).
    ExtOk,
    /// An extension failed.
    ExtFail,
    /// Release returned (`detail`: how).
    Rel,
    /// The acquire call's waiter was seen registered in the lock's queue on a quorum of
    /// masters (for a fair call: its ticket was issued). Recorded by the suite, which reads
    /// the queues, never by the client; `detail` is the waiter id.
    Queued,
    /// The suite killed the client's process (`SIGKILL`): every call and section of that
    /// client ends here (`attempt` is 0, meaning all of them).
    Killed,
}

impl Op {
    /// Every op, for parsing.
    pub const ALL: [Op; 11] = [
        Op::AcqStart,
        Op::AcqOk,
        Op::AcqFail,
        Op::CsStart,
        Op::CsRead,
        Op::CsEnd,
        Op::ExtOk,
        Op::ExtFail,
        Op::Rel,
        Op::Queued,
        Op::Killed,
    ];

    /// The name in the JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Op::AcqStart => "acq_start",
            Op::AcqOk => "acq_ok",
            Op::AcqFail => "acq_fail",
            Op::CsStart => "cs_start",
            Op::CsRead => "cs_read",
            Op::CsEnd => "cs_end",
            Op::ExtOk => "ext_ok",
            Op::ExtFail => "ext_fail",
            Op::Rel => "rel",
            Op::Queued => "queued",
            Op::Killed => "killed",
        }
    }

    /// The op with this name.
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// One event of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client, unique in the run.
    pub client: String,
    /// The client's acquire call this belongs to, counted from 1: together with `client`
    /// it names one acquisition.
    pub attempt: u64,
    /// What happened.
    pub op: Op,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub t_ns: u64,
    /// The locked resource.
    pub resource: String,
    /// The lease's random value, once known.
    pub value: String,
    /// The acquisition's fencing token, when it was acquired with fencing on.
    pub token: Option<u64>,
    /// The lease's deadline in `CLOCK_MONOTONIC` nanoseconds (acq_ok, ext_ok).
    pub deadline_ns: Option<u64>,
    /// Free text: the error kind of a failure, how a release went.
    pub detail: String,
}

impl Event {
    /// The event as one JSON object on one line.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(192);
        out.push('{');
        let _ = write!(out, "\"client\":{},", json_str(&self.client));
        let _ = write!(out, "\"attempt\":{},", self.attempt);
        let _ = write!(out, "\"op\":\"{}\",", self.op.name());
        let _ = write!(out, "\"t_ns\":{},", self.t_ns);
        let _ = write!(out, "\"resource\":{},", json_str(&self.resource));
        let _ = write!(out, "\"value\":{},", json_str(&self.value));
        let _ = write!(out, "\"token\":{},", json_opt(self.token));
        let _ = write!(out, "\"deadline_ns\":{},", json_opt(self.deadline_ns));
        let _ = write!(out, "\"detail\":{}", json_str(&self.detail));
        out.push('}');
        out
    }
}

fn json_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| v.to_string())
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
