//! The operators' calls, beside the locks: [`Redlock::inspect`] reads what every master
//! holds for a lock, [`Redlock::force_unlock`] and [`Redlock::force_unlock_any`] free one
//! that is stuck, [`Redlock::init_cluster`] bootstraps new masters (docs/design.md §11),
//! and [`Redlock::check_masters`] reports on each master.
//!
//! Layer: the facades' row (docs/design.md §10). It uses the client handle, the core and
//! the masters; nothing but the crate root's re-exports uses it: no lock, no facade, and
//! never the acquire engine.

use std::sync::Arc;

use futures::future::join_all;

#[cfg(doc)]
use crate::client::Redlock;
use crate::core::Inner;
use crate::error::{MasterError, MasterErrorKind, human};
use crate::master::{Op, Outgoing, Reply};

mod health;
mod init;
mod inspect;
mod report;
mod unlock;

pub use init::{ClusterInit, InitOutcome};
pub use inspect::{Holding, Inspection, MasterView, OwnerInfo, Verdict};
pub use report::{
    Check, ClockOffset, ClusterRecord, Facts, Finding, HealthReport, MasterHealth, QuarantineState,
    Role, Severity,
};
pub use unlock::UnlockReport;

/// Asks every master at once, each within the connect timeout plus the node timeout (a
/// master's own bound; this one only makes sure no answer is waited for longer).
async fn ask_all(inner: &Inner, op: &Arc<Op>) -> Vec<Result<Reply, MasterError>> {
    let config = &inner.config;
    let bound = config.call_bound();
    let sent = Outgoing::new(Arc::clone(op));
    join_all(inner.masters.iter().map(|m| {
        let call = m.call(Arc::clone(&sent));
        async move {
            match tokio::time::timeout(bound, call).await {
                Ok(answer) => answer,
                Err(_) => Err(MasterError::new(
                    MasterErrorKind::Timeout,
                    format!(
                        "no answer within {} (twice the connect and node timeouts: the \
                         turn behind earlier requests, then the connect and the request)",
                        human(bound)
                    ),
                )),
            }
        }
    }))
    .await
}
