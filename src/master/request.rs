//! One request on a master's connection: the request its script family's codec builds,
//! sent with `EVALSHA` (and the script again on `NOSCRIPT`), and the changed-record path
//! around it; or the master's own reads (a survey, a scan).

use redis::aio::MultiplexedConnection;

use super::vitals::read_cluster;
use super::{Outgoing, Shared};
use crate::error::{MasterError, MasterErrorKind};
use crate::op::{Op, Reply};
use crate::quarantine::Epoch;
use crate::scripts;

/// Sends `sent`'s op on `conn` and reads the answer: the master's own reads for a survey
/// and a scan, else the request its script family's codec builds ([`invoke`]).
pub(super) async fn run(
    sent: &Outgoing,
    (conn, generation): (&mut MultiplexedConnection, u64),
    shared: &Shared,
) -> Result<Reply, MasterError> {
    let op = &**sent.op();
    // Met before this client knew its cluster, and without a record then: read it again
    // before it votes (it may be a member, or a stranger that never votes).
    if !op.is_unguarded() && shared.view.stale(shared.index) {
        Box::pin(shared.reread(conn)).await?;
        if let Some(refusal) = shared.view.refused(shared.index) {
            return Err(refusal);
        }
    }
    match op {
        Op::Survey => survey(conn, shared).await,
        Op::Scan { cursor, rw } => scan(conn, shared, *cursor, *rw).await,
        _ => invoke(sent, (conn, generation), shared).await,
    }
}

/// Sends the request that `sent`'s codec builds around the cluster fingerprint this client
/// knows (built once for every master of the round, [`Outgoing`]), and reads the answer. A
/// script that finds another record than the one sent (or none) refuses (`-2`): the record
/// is read again (`record_changed`), and when this client adopts it (written after it
/// connected, by `init_cluster`), the request is built again, now carrying it, and sent
/// again, once. A grant's holder record is seen to unless this connection knows it
/// outlives the lock (docs/design.md §11).
async fn invoke(
    sent: &Outgoing,
    (conn, generation): (&mut MultiplexedConnection, u64),
    shared: &Shared,
) -> Result<Reply, MasterError> {
    let op = &**sent.op();
    let codec = scripts::codec(op).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Other,
            format!("no script carries a {} request", op.name()),
        )
    })?;
    let holder = op.holder();
    let hold = holder.is_none_or(|(tag, ttl)| {
        !shared.holder_known(generation, tag, tokio::time::Instant::now() + ttl)
    });
    let mut learnt = false;
    loop {
        let built = sent.request(&shared.view, hold, |fingerprint| {
            let context = scripts::Context {
                record_key: &shared.record_key,
                view: &shared.view,
                fingerprint,
                epoch_id: &sent.epoch_id(shared.index),
                hold,
            };
            codec.encode(op, &context).map(Built::new)
        })?;
        let sent_at = tokio::time::Instant::now();
        let answer = built.send(conn, || sent.epoch_id(shared.index)).await?;
        if !built.request.record_differs(&answer) {
            let reply = codec.decode(op, answer)?;
            if let (true, Some((tag, _)), Reply::Checked { granted: true, .. }) =
                (hold, holder, &reply)
            {
                shared.holder_seen_to(generation, tag, sent_at);
            }
            return Ok(reply);
        }
        if learnt {
            return Err(refused_again());
        }
        Box::pin(shared.record_changed(conn)).await?;
        learnt = true;
    }
}

/// A codec's request, ready to send to every master of a round: a script's `EVALSHA` is
/// built once and sent as it is, unless the request carries an id for a data epoch, which
/// each master gets its own of (docs/design.md §2).
#[derive(Debug)]
pub(super) struct Built {
    request: scripts::Request,
    /// The `EVALSHA` every master is sent, for a script that starts no epoch.
    shared: Option<redis::Cmd>,
}

impl Built {
    pub(super) fn new(request: scripts::Request) -> Self {
        let shared = match &request {
            scripts::Request::Script(call) if !call.starts_epochs() => Some(call.evalsha("")),
            _ => None,
        };
        Self { request, shared }
    }

    /// Sends the request on `conn`, a script's with `epoch_id()` as its id for a data epoch
    /// where it carries one: with `EVALSHA`, loaded and sent again if the master answers
    /// `NOSCRIPT` (it restarted, or its script cache was flushed); or a command.
    pub(super) async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        epoch_id: impl FnOnce() -> String,
    ) -> Result<redis::Value, MasterError> {
        let answer = match &self.request {
            scripts::Request::Script(call) => {
                let own;
                let evalsha = match &self.shared {
                    Some(evalsha) => evalsha,
                    None => {
                        own = call.evalsha(&epoch_id());
                        &own
                    }
                };
                match evalsha.query_async(conn).await {
                    Err(e)
                        if e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        // The rare path (restarted or flushed since the connection loaded
                        // the scripts): load the script, then run it again.
                        match call.script.load_async(conn).await {
                            Ok(_) => evalsha.query_async(conn).await,
                            Err(e) => Err(e),
                        }
                    }
                    answer => answer,
                }
            }
            scripts::Request::Command(command) => command.query_async(conn).await,
        };
        answer.map_err(MasterError::from_redis)
    }
}

/// A script refused this client's fingerprint again, right after the client adopted the
/// master's record: the record changed once more in between.
fn refused_again() -> MasterError {
    MasterError::new(
        MasterErrorKind::Other,
        "its cluster record changed twice during one request: try again",
    )
}

/// How many keys one `SCAN` step asks for while a survey looks for a key under the prefix.
const SURVEY_SCAN_COUNT: usize = 1000;

/// Reads what bootstrapping needs (`Op::Survey`): `run_id`, record and data epoch.
async fn survey(conn: &mut MultiplexedConnection, shared: &Shared) -> Result<Reply, MasterError> {
    let (run_id, record) = read_cluster(conn, &shared.record_key).await?;
    let run_id = run_id.ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Misconfigured,
            "cannot read INFO server (its run_id tells one server from another): allow \
             INFO to this user",
        )
    })?;
    let (epoch, now): (String, String) = redis::cmd("EVAL")
        .arg(scripts::EPOCH_SOURCE)
        .arg(1)
        .arg(&*shared.record_key)
        .arg(new_epoch_id())
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let now_us = scripts::parse_number("epoch", &now)?;
    let epoch = Epoch::parse(&epoch, Some(now_us)).ok_or_else(|| {
        MasterError::new(
            MasterErrorKind::Protocol,
            format!("the epoch record {epoch:?} is not <id>:<microseconds>"),
        )
    })?;
    Ok(Reply::Survey {
        run_id,
        record: record.map(Box::new),
        epoch: epoch.id.to_string(),
    })
}

/// One bounded `SCAN` step (`Op::Scan`) for a key under the prefix that is not one of
/// this crate's records; with `rw`, for a read-write lock's keys of a lock under the
/// prefix, which lie in the records' namespace (with an empty prefix, the first scan saw
/// them). Keys are read as bytes: any key may be binary.
async fn scan(
    conn: &mut MultiplexedConnection,
    shared: &Shared,
    cursor: u64,
    rw: bool,
) -> Result<Reply, MasterError> {
    let prefix = &shared.view.terms().prefix;
    if rw && prefix.is_empty() {
        return Ok(Reply::Scanned {
            next: 0,
            found: None,
        });
    }
    let pattern = if rw {
        format!("{}{}*", scripts::RW_NAMESPACE, glob_escape(prefix))
    } else {
        format!("{}*", glob_escape(prefix))
    };
    let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(&pattern)
        .arg("COUNT")
        .arg(SURVEY_SCAN_COUNT)
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let found = keys
        .iter()
        .map(|k| String::from_utf8_lossy(k))
        .find(|k| rw || !scripts::is_record_key(k, prefix))
        .map(|k| k.into_owned());
    Ok(Reply::Scanned { next, found })
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Loads `scripts` (one pipeline).
pub(super) async fn load_scripts(
    conn: &mut MultiplexedConnection,
    scripts: Vec<&'static str>,
) -> redis::RedisResult<()> {
    let mut load = redis::pipe();
    for script in scripts {
        load.cmd("SCRIPT").arg("LOAD").arg(script).ignore();
    }
    load.query_async(conn).await
}

/// A fresh id for a data epoch this client may start.
pub(super) fn new_epoch_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}
