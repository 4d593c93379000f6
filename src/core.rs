//! The private core that every facade shares: one client's settings, masters, quorum size
//! and release notices ([`Inner`]), and the background work that outlives a call (releases
//! of dropped leases and failed attempts, late replies), which `Redlock::shutdown` awaits.
//!
//! It owns no locking logic: rounds are run by `quorum`, leases by `lease`, the acquire
//! loop by `lock`. It may use the layers below it (settings, masters, the round, notices)
//! and must not use `lease` or any facade (docs/design.md §10, the layer order).

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::cluster::Owner;
use crate::config::Config;
use crate::held::Held;
use crate::master::{Master, Op};
use crate::quorum::{self, Bounds};
use crate::telemetry;
use crate::wait::Notifier;

/// What every clone of a client and every lease share.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) masters: Vec<Arc<dyn Master>>,
    pub(crate) quorum: usize,
    /// Who this client's owner records name.
    pub(crate) owner: Arc<Owner>,
    pub(crate) notifier: Arc<Notifier>,
    /// The keys this client's leases hold (docs/design.md §14): checked before every
    /// acquire, claimed by every granted lease.
    pub(crate) held: Arc<Held>,
    /// Releases and late replies still running in the background; [`Redlock::shutdown`]
    /// waits for them.
    pub(crate) background: TaskTracker,
}

impl Inner {
    /// Runs `task` in the background on the current runtime, tracked for
    /// [`Redlock::shutdown`]; `false` (and nothing runs) without a runtime.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.background.track_future(task));
                true
            }
            Err(_) => false,
        }
    }

    /// The bounds of a clean-up round run by a background task: every master's answer is
    /// awaited (each within its node timeout), and the task that collects them is tracked,
    /// so that [`Redlock::shutdown`](crate::Redlock::shutdown) waits for all of them even
    /// when the first answer already decided the round.
    pub(crate) fn cleanup_bounds(&self) -> Bounds<'_> {
        Bounds {
            until: None,
            tracker: Some(&self.background),
            every: true,
            late: false,
        }
    }

    /// The bounds of a round of this client that must be decided by `until`.
    pub(crate) fn bounds(&self, until: Option<Instant>) -> Bounds<'_> {
        Bounds {
            until,
            tracker: Some(&self.background),
            every: false,
            late: false,
        }
    }
}

/// A fresh 128-bit value from the thread-local CSPRNG, as 32 hex digits.
pub(crate) fn random_value() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Sends the release script to `targets` from a background task tracked for
/// [`Redlock::shutdown`], if a runtime exists; otherwise the keys expire with their TTL.
/// `keys` are (lock key, release channel) pairs: one key is released by the single-key
/// script, several by the multi-key one.
pub(crate) fn release_in_background(
    inner: &Arc<Inner>,
    targets: Vec<Arc<dyn Master>>,
    keys: &[(Arc<str>, Arc<str>)],
    value: &Arc<str>,
) {
    if targets.is_empty() || keys.is_empty() {
        return;
    }
    #[cfg(feature = "mutants")]
    if inner
        .config
        .planted
        .is(crate::mutants::Mutant::NoBackgroundRelease)
    {
        return;
    }
    let op = Arc::new(Op::release_keys(&inner.config, keys, value));
    let need = targets.len();
    // The resources as traces name them: a long list by its first three and its count.
    let names: Vec<&str> = keys
        .iter()
        .take(3)
        .map(|(key, _)| {
            key.strip_prefix(inner.config.key_prefix.as_str())
                .unwrap_or(key)
        })
        .collect();
    let resource = match keys.len() {
        n if n > 3 => format!("{}, … ({n} in all)", names.join(", ")),
        _ => names.join(", "),
    };
    let shown = inner.config.trace_resource_names;
    let tracked = Arc::clone(inner);
    inner.spawn(async move {
        // Wait for every target (each bounded by the node timeout) so failures are traced.
        let resource = telemetry::resource(&resource, shown);
        let _ = quorum::run(&targets, op, need, resource, tracked.cleanup_bounds()).await;
    });
}
