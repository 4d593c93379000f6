//! The health probe (`Master::probe`): one pipeline of reads on a connection of its own.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use super::Shared;
use super::vitals::value;
use crate::cluster::Record;
use crate::error::{MasterError, MasterErrorKind, human};

/// What a health probe read of one master (`Master::probe`), as the master answered it:
/// each part separately, since a user's ACLs or a renamed command can hide one part and
/// not the others. Judged by `ops/health.rs`.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// The pipeline's round trip, on the client's monotonic clock.
    pub(crate) round_trip: Duration,
    /// The client's wall clock at the midpoint of the round trip, in microseconds since
    /// the Unix epoch (`None` if it is set before it).
    pub(crate) client_time_us: Option<u64>,
    /// `TIME`, in microseconds since the Unix epoch.
    pub(crate) server_time_us: Result<u64, MasterError>,
    /// `INFO server`, `INFO replication`, `INFO persistence`, `INFO memory`: the text.
    pub(crate) server: Result<String, MasterError>,
    pub(crate) replication: Result<String, MasterError>,
    pub(crate) persistence: Result<String, MasterError>,
    pub(crate) memory: Result<String, MasterError>,
    /// `CONFIG GET append*` (the command may be renamed away or forbidden).
    pub(crate) config: Result<BTreeMap<String, String>, MasterError>,
    /// `HGETALL` of the cluster record: empty when there is none.
    pub(crate) record: Result<BTreeMap<String, String>, MasterError>,
    /// Why this client does not let the master vote, as far as the cluster record goes:
    /// a record that disagrees with the client's settings, or a refusal the client made
    /// when it connected (a twin, a stranger).
    pub(crate) refused: Option<String>,
}

impl Shared {
    /// Reads the master's health on a connection of its own, closed afterwards: the lock
    /// connection's state (down, reconnecting) and its first requests (which load the
    /// scripts and start a data epoch) must neither hide nor change what is read, and a
    /// replica or an old server, whose lock connection fails, must still be described.
    /// Connects within the connect timeout, then one pipeline within the node timeout.
    pub(super) async fn probe(&self, record_key: &str) -> Result<Probe, MasterError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let mut conn = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(conn) => conn.map_err(|e| self.connect_failed(e))?,
            Err(_) => {
                return Err(MasterError::new(
                    MasterErrorKind::Timeout,
                    format!("could not connect within {}", human(self.connect_timeout)),
                ));
            }
        };
        match tokio::time::timeout(self.node_timeout(), read_health(&mut conn, record_key)).await {
            Ok(probe) => probe.map(|mut probe| {
                let disagrees = probe.record.as_ref().ok().and_then(|fields| {
                    let fields: HashMap<String, String> =
                        fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    match Record::parse(&fields) {
                        Ok(Some(record)) => self.view.disagreement(&record),
                        Ok(None) => None,
                        Err(error) => Some(error),
                    }
                });
                probe.refused =
                    disagrees.or_else(|| self.view.refused(self.index).map(|e| e.to_string()));
                probe
            }),
            Err(_) => Err(MasterError::new(
                MasterErrorKind::Timeout,
                format!(
                    "no answer within the node timeout ({})",
                    human(self.node_timeout())
                ),
            )),
        }
    }
}

/// One pipeline of reads (nothing is written): `TIME` first, so that the server's clock
/// is read as early in the round trip as possible, then the settings and the record.
async fn read_health(
    conn: &mut MultiplexedConnection,
    record_key: &str,
) -> Result<Probe, MasterError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for section in ["server", "replication", "persistence", "memory"] {
        pipe.cmd("INFO").arg(section);
    }
    pipe.cmd("CONFIG").arg("GET").arg("append*");
    pipe.cmd("HGETALL").arg(record_key);
    pipe.ignore_errors();
    let wall = std::time::SystemTime::now();
    let sent = tokio::time::Instant::now();
    let replies: Vec<redis::RedisResult<redis::Value>> = pipe
        .query_async(conn)
        .await
        .map_err(MasterError::from_redis)?;
    let round_trip = sent.elapsed();
    let client_time_us = wall
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|since| since.saturating_add(round_trip / 2).as_micros())
        .and_then(|us| u64::try_from(us).ok());
    // A connection that may run nothing (no password given, or a wrong one that the
    // server let through unauthenticated) answers every command with the same refusal.
    if let Some(Err(first)) = replies.first()
        && replies.iter().all(Result::is_err)
    {
        return Err(MasterError::from_redis(first.clone()));
    }
    let mut replies = replies.into_iter();
    let mut next = || {
        replies.next().unwrap_or_else(|| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "missing pipeline reply",
            )))
        })
    };
    let server_time_us = value::<(u64, u64)>(next())
        .map(|(secs, micros)| secs.saturating_mul(1_000_000).saturating_add(micros))
        .map_err(MasterError::from_redis);
    let mut text = || value::<String>(next()).map_err(MasterError::from_redis);
    let (server, replication, persistence, memory) = (text(), text(), text(), text());
    let config = value(next()).map_err(MasterError::from_redis);
    let record = value(next()).map_err(MasterError::from_redis);
    Ok(Probe {
        round_trip,
        client_time_us,
        server_time_us,
        server,
        replication,
        persistence,
        memory,
        config,
        record,
        refused: None,
    })
}
