//! The shared history of a run: in-process clients append to it directly, client processes
//! through JSON lines on their stdout.

use std::sync::{Arc, Mutex};

use redquorum_testkit::monotonic_ns;

use crate::event::{Event, Op};

/// `CLOCK_MONOTONIC` now, in ns.
pub fn now_ns() -> u64 {
    monotonic_ns().unwrap()
}

/// Every event of a run, from every client.
#[derive(Debug, Clone, Default)]
pub struct History {
    events: Arc<Mutex<Vec<Event>>>,
}

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    /// A copy of every event so far.
    pub fn snapshot(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Records `op` for `client`'s acquire call `attempt` on `resource` now, on the
    /// suite's behalf: the suite saw its waiter queued (`Queued`), or killed its process
    /// (`Killed`, attempt 0).
    pub fn mark(&self, client: &str, attempt: u64, resource: &str, op: Op, detail: &str) {
        self.push(Event {
            client: client.to_owned(),
            attempt,
            op,
            t_ns: now_ns(),
            resource: resource.to_owned(),
            value: String::new(),
            token: None,
            deadline_ns: None,
            detail: detail.to_owned(),
        });
    }

    /// A recorder for one client.
    pub fn recorder(&self, client: impl Into<String>, resource: impl Into<String>) -> Recorder {
        Recorder {
            history: self.clone(),
            client: client.into(),
            resource: resource.into(),
            attempt: 0,
            value: String::new(),
            token: None,
        }
    }
}

/// Records the events of one in-process client.
#[derive(Debug)]
pub struct Recorder {
    history: History,
    client: String,
    resource: String,
    attempt: u64,
    value: String,
    /// The acquisition's fencing token, once acquired with one.
    token: Option<u64>,
}

impl Recorder {
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The client name the events are recorded under.
    pub fn client(&self) -> &str {
        &self.client
    }

    /// The number of the current acquisition (counted by `acq_start`).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The history recorded into.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Starts the next acquisition and records `acq_start`.
    pub fn acq_start(&mut self) {
        self.attempt += 1;
        self.value.clear();
        self.token = None;
        self.record(Op::AcqStart, None, "");
    }

    /// Starts the next acquisition, a fair one (`AcquireOptions::fair`), and records
    /// `acq_start` saying so: the FIFO checker looks at fair calls only.
    pub fn acq_start_fair(&mut self) {
        self.attempt += 1;
        self.value.clear();
        self.token = None;
        self.record(Op::AcqStart, None, "fair");
    }

    /// Records `acq_ok` for `lease`, its deadline translated to the monotonic clock.
    pub fn acq_ok(&mut self, lease: &redquorum::Lease) {
        self.value = lease.value().to_owned();
        self.token = self.token_in(lease);
        let deadline = now_ns() + lease.remaining().as_nanos() as u64;
        self.record(Op::AcqOk, Some(deadline), "");
    }

    /// [`acq_ok`](Self::acq_ok) for a client whose clock runs at `rate` times real time:
    /// its lease's remaining time, read on that clock, lasts `1/rate` times as long.
    /// Returns the deadline recorded (ns).
    pub fn acq_ok_at_rate(&mut self, lease: &redquorum::Lease, rate: f64) -> u64 {
        self.value = lease.value().to_owned();
        self.token = self.token_in(lease);
        let remaining = lease.remaining().as_nanos() as f64 / rate;
        let deadline = now_ns() + remaining as u64;
        self.record(Op::AcqOk, Some(deadline), "");
        deadline
    }

    /// This recorder's resource's token in `lease` (one of several for a lease over
    /// several resources).
    fn token_in(&self, lease: &redquorum::Lease) -> Option<u64> {
        match lease.resources().len() {
            1 => lease.fencing_token(),
            _ => lease
                .fencing_tokens()
                .find(|(r, _)| *r == self.resource)
                .map(|(_, t)| t),
        }
        .map(|t| t.get())
    }

    /// [`acq_ok`](Self::acq_ok) for a lease of a read-write lock, recording its mode
    /// (`read` or `write`): checker 1 lets read sections overlap each other.
    pub fn acq_ok_mode(&mut self, lease: &redquorum::Lease, mode: &str) {
        self.value = lease.value().to_owned();
        self.token = lease.fencing_token().map(|t| t.get());
        let deadline = now_ns() + lease.remaining().as_nanos() as u64;
        self.record(Op::AcqOk, Some(deadline), mode);
    }

    /// A write lease turned into a read lease (`Lease::downgrade`): a new acquisition of
    /// mode `read downgraded`, without a token of its own (it keeps the write lease's,
    /// which checker 4 has seen already).
    pub fn downgraded(&mut self, lease: &redquorum::Lease) {
        self.attempt += 1;
        self.value = lease.value().to_owned();
        self.token = None;
        let deadline = now_ns() + lease.remaining().as_nanos() as u64;
        self.record(Op::AcqStart, None, "");
        self.record(Op::AcqOk, Some(deadline), "read downgraded");
    }

    /// The end of a read section: it read, and wrote nothing (checker 2 counts only
    /// sections that wrote).
    pub fn cs_end_read(&mut self) {
        self.record(Op::CsEnd, None, "read");
    }

    pub fn acq_fail(&mut self, error: &redquorum::Error) {
        self.record(Op::AcqFail, None, &format!("{:?}", error.kind()));
    }

    pub fn cs_start(&mut self) {
        self.record(Op::CsStart, None, "");
    }

    /// `done`: whether the counter write was made.
    pub fn cs_end(&mut self, done: bool) {
        self.record(Op::CsEnd, None, if done { "done" } else { "abandoned" });
    }

    /// `cs_end`, also saying whether the section's fenced accesses were made and whether
    /// one was refused (`None`: no token, no fenced access).
    pub fn cs_end_fenced(&mut self, done: bool, refused: Option<bool>) {
        self.cs_end_fenced_at(now_ns(), done, refused);
    }

    /// [`cs_end_fenced`](Self::cs_end_fenced) at `t_ns`, no later than now: a holder that
    /// stopped touching the resource at `t_ns` (and only waited since) ended its section
    /// there, however late it records it.
    pub fn cs_end_fenced_at(&mut self, t_ns: u64, done: bool, refused: Option<bool>) {
        let detail = match (done, refused) {
            (true, None) => "done",
            (false, None) => "abandoned",
            (true, Some(false)) => "done fenced",
            (true, Some(true)) => "done fenced-refused",
            (false, Some(false)) => "abandoned fenced",
            (false, Some(true)) => "abandoned fenced-refused",
        };
        self.record_at(t_ns.min(now_ns()), Op::CsEnd, None, detail);
    }

    /// Records `ext_ok` with the lease's new deadline.
    pub fn ext_ok(&mut self, lease: &redquorum::Lease) {
        let deadline = now_ns() + lease.remaining().as_nanos() as u64;
        self.record(Op::ExtOk, Some(deadline), "");
    }

    /// The acquisition's fencing token, if any.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    pub fn ext_fail(&mut self, error: &redquorum::Error) {
        self.record(Op::ExtFail, None, &format!("{:?}", error.kind()));
    }

    pub fn rel(&mut self, detail: &str) {
        self.record(Op::Rel, None, detail);
    }

    fn record(&self, op: Op, deadline_ns: Option<u64>, detail: &str) {
        self.record_at(now_ns(), op, deadline_ns, detail);
    }

    fn record_at(&self, t_ns: u64, op: Op, deadline_ns: Option<u64>, detail: &str) {
        self.history.push(Event {
            client: self.client.clone(),
            attempt: self.attempt,
            op,
            t_ns,
            resource: self.resource.clone(),
            value: self.value.clone(),
            token: self.token,
            deadline_ns,
            detail: detail.to_owned(),
        });
    }
}

/// Parses one JSON line written by [`Event::to_json`].
pub fn parse_line(line: &str) -> Result<Event, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    let text = |k: &str| -> Result<String, String> {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(str::to_owned)
            .ok_or_else(|| format!("missing string {k}: {line}"))
    };
    let number = |k: &str| -> Result<u64, String> {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("missing number {k}: {line}"))
    };
    let optional = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let op = text("op")?;
    Ok(Event {
        client: text("client")?,
        attempt: number("attempt")?,
        op: Op::from_name(&op).ok_or_else(|| format!("unknown op {op}"))?,
        t_ns: number("t_ns")?,
        resource: text("resource")?,
        value: text("value")?,
        token: optional("token"),
        deadline_ns: optional("deadline_ns"),
        detail: text("detail")?,
    })
}
