//! The private core that every facade shares: one client's settings, masters, quorum size
//! and release notices ([`Inner`]), and the background work that outlives a call (releases
//! of dropped leases and failed attempts, late replies), which `Redlock::shutdown` awaits;
//! and the checks every call makes before its first round trip (a runtime to run in, a
//! resource name a lock can have).
//!
//! It owns no locking logic: rounds are run by `quorum`, leases by `lease`, the acquire
//! loop by `engine`. It may use the layers below it (settings, masters, the round,
//! notices) and must not use `lease`, the engine or any facade (docs/design.md §10, the
//! layer order).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::cluster::{Owner, Terms};
use crate::config::{Config, MAX_RESOURCE_LEN};
use crate::error::{Error, ErrorKind};
use crate::handed::HandedOn;
use crate::held::Held;
use crate::master::{Master, Op};
use crate::quorum::{self, Bounds};
use crate::wait::Notifier;
use crate::{scripts, telemetry};

/// The settings every client of `config`'s cluster must share (docs/design.md §11).
pub(crate) fn terms(config: &Config) -> Terms {
    let n = config.masters.len();
    Terms::new(
        n,
        quorum::quorum(n),
        u64::try_from(config.ttl_max.as_millis()).unwrap_or(u64::MAX),
        config.drift_factor,
        &config.key_prefix,
    )
}

/// What every clone of a client and every lease share.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) masters: Vec<Arc<dyn Master>>,
    /// Who this client's owner records name.
    pub(crate) owner: Arc<Owner>,
    pub(crate) notifier: Arc<Notifier>,
    /// The keys this client's leases hold (docs/design.md §14): checked before every
    /// acquire, claimed by every granted lease.
    pub(crate) held: Arc<Held>,
    /// The locks this client just handed on (docs/design.md §17): its next acquire of
    /// one queues at once.
    pub(crate) handed_on: HandedOn,
    /// Releases and late replies still running in the background; [`Redlock::shutdown`]
    /// waits for them.
    pub(crate) background: TaskTracker,
}

impl Inner {
    /// How many masters must agree: `N / 2 + 1` (a planted bug may change it).
    pub(crate) fn quorum(&self) -> usize {
        let n = self.masters.len();
        #[cfg(redquorum_mutants)]
        if let Some(quorum) = crate::mutants::planted(&self.owner.client).quorum(n) {
            return quorum;
        }
        quorum::quorum(n)
    }

    /// The settings every client of this client's cluster must share (docs/design.md §11).
    pub(crate) fn terms(&self) -> Terms {
        Terms {
            quorum: self.quorum(),
            ..terms(&self.config)
        }
    }

    /// The deadline of a lease of `ttl` whose round started at `t0`, as this client's clock
    /// sees it (docs/design.md §3, I3).
    pub(crate) fn lease_deadline(&self, t0: Instant, ttl: Duration) -> Option<Instant> {
        let dl = self.config.lease_deadline(t0, ttl)?;
        #[cfg(redquorum_mutants)]
        if let Some(rate) = crate::mutants::planted(&self.owner.client).clock_rate() {
            // A clock running at `rate` reaches the end of the validity after
            // validity / rate of real time.
            return t0.checked_add((dl - t0).div_f64(rate));
        }
        Some(dl)
    }

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

/// A fresh 128-bit value from the library's random source, as 32 hex digits.
pub(crate) fn random_value() -> String {
    format!("{:032x}", with_rng(|rng| rng.random::<u128>()))
}

/// A fresh client id: a random (version 4) UUID drawn from the library's random source, so
/// that the simulation draws the same ids again from a schedule's seed (and with them the
/// same lock values, which begin with the id).
pub(crate) fn random_client_id() -> String {
    let bits = with_rng(|rng| rng.random::<u128>());
    uuid::Builder::from_random_bytes(bits.to_le_bytes())
        .into_uuid()
        .to_string()
}

/// Runs `draw` on the library's random source, the thread-local CSPRNG. The client's
/// draws go through here: lock values, waiter ids, the spread of pauses, the order in
/// which a semaphore tries its slots. In the crate's own tests a generator that
/// `seeded::install` put on this thread stands in for it, so that the simulation draws
/// the same values again from a schedule's seed.
pub(crate) fn with_rng<T>(draw: impl FnOnce(&mut dyn rand::Rng) -> T) -> T {
    #[cfg(test)]
    let draw = match seeded::try_draw(draw) {
        Ok(drawn) => return drawn,
        Err(draw) => draw,
    };
    draw(&mut rand::rng())
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
    #[cfg(redquorum_mutants)]
    if crate::mutants::planted(&inner.owner.client).is(crate::mutants::Mutant::NoBackgroundRelease)
    {
        return;
    }
    let op = Arc::new(Op::release_keys(keys, value, false));
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

/// Refuses to run outside a tokio runtime, where the masters' I/O and timers cannot run.
pub(crate) fn check_runtime(resource: &str) -> Result<(), Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::NoRuntime, resource).with_detail(
        "redquorum must be called inside a tokio runtime (features rt, time, net, macros; \
         rt-multi-thread for #[tokio::main]) with time and I/O enabled",
    ))
}

/// Refuses resource names that are empty, in the crate's record namespace (alone or
/// behind `prefix`, the key prefix), or longer than `MAX_RESOURCE_LEN`.
pub(crate) fn check_resource(prefix: &str, resource: &str) -> Result<(), Error> {
    let namespace = scripts::RECORD_NAMESPACE;
    // The key is `prefix + resource`; a prefix never starts with the namespace (the
    // builder refuses it), but it may be the namespace's beginning ("redq").
    let in_records = namespace
        .strip_prefix(prefix)
        .is_some_and(|rest| resource.starts_with(rest));
    let detail = if resource.is_empty() {
        "it is empty: name the resource to lock, such as \"orders:42\"".to_owned()
    } else if resource.starts_with(namespace) {
        format!("it starts with {namespace:?}, where the lock's own records live: use another name")
    } else if in_records {
        format!(
            "its key, {prefix:?} followed by the name, starts with {namespace:?}, where the \
             lock's own records live: use another name"
        )
    } else if resource.len() > MAX_RESOURCE_LEN {
        format!(
            "it is longer than MAX_RESOURCE_LEN ({MAX_RESOURCE_LEN} bytes): use a shorter \
             name, such as a hash of this one"
        )
    } else {
        return Ok(());
    };
    Err(Error::new(ErrorKind::InvalidResource, resource).with_detail(detail))
}

/// A seeded random source for the library's draws on one thread (tests only).
#[cfg(test)]
pub(crate) mod seeded {
    use std::cell::RefCell;

    use rand::SeedableRng;
    use rand::rngs::StdRng;

    thread_local! {
        static SOURCE: RefCell<Option<StdRng>> = const { RefCell::new(None) };
    }

    /// Until the returned guard is dropped, the library draws on this thread from a
    /// generator seeded with `seed` (then from what it drew from before).
    /// Each source opens a scope of planted bugs of its own (`mutants::enter_scope`): the
    /// client ids it draws repeat with its seed, and a bug planted under one of them in
    /// another schedule must not reach this one.
    pub(crate) fn install(seed: u64) -> Installed {
        let previous = SOURCE.with_borrow_mut(|s| s.replace(StdRng::seed_from_u64(seed)));
        Installed {
            previous,
            scope: enter_scope(),
        }
    }

    /// A fresh scope of planted bugs on this thread; the one it replaces (0 without the
    /// planted bugs).
    fn enter_scope() -> u64 {
        #[cfg(redquorum_mutants)]
        return crate::mutants::enter_scope();
        #[cfg(not(redquorum_mutants))]
        0
    }

    /// Keeps a seeded source installed; see [`install`].
    #[must_use = "the seeded source is removed when this is dropped"]
    pub(crate) struct Installed {
        previous: Option<StdRng>,
        /// The scope of planted bugs this source replaced.
        scope: u64,
    }

    impl Drop for Installed {
        fn drop(&mut self) {
            #[cfg(redquorum_mutants)]
            crate::mutants::leave_scope(self.scope);
            #[cfg(not(redquorum_mutants))]
            let _ = self.scope;
            let previous = self.previous.take();
            SOURCE.with_borrow_mut(|s| *s = previous);
        }
    }

    /// `draw` run on the installed source, or given back when none is installed.
    pub(super) fn try_draw<T, F: FnOnce(&mut dyn rand::Rng) -> T>(draw: F) -> Result<T, F> {
        SOURCE.with_borrow_mut(|source| match source {
            Some(rng) => Ok(draw(rng)),
            None => Err(draw),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_resource_names_a_record_alone_or_behind_the_key_prefix() {
        let refused = |prefix: &str, resource: &str| {
            check_resource(prefix, resource).is_err_and(|e| e.kind() == ErrorKind::InvalidResource)
        };
        assert!(refused("", "redquorum:epoch"));
        assert!(refused("locks:", "redquorum:epoch"));
        // The prefix begins the namespace, the name ends it: the key is a record's.
        assert!(refused("redq", "uorum:epoch"));
        assert!(refused("redquorum", ":fence:orders"));
        assert!(refused("r", "edquorum:cluster"));
        // The waiter queue, a waiter's liveness key and the ticket counter of a lock.
        for record in [
            scripts::queue_key("orders:1"),
            scripts::waiter_key("orders:1", "00ff"),
            scripts::ticket_key("orders:1"),
        ] {
            assert!(refused("", &record), "{record}");
            assert!(refused("locks:", &record), "{record}");
        }
        // Near misses are names like any other.
        assert!(!refused("redq", "uorum-epoch"));
        assert!(!refused("locks:", "uorum:epoch"));
        assert!(!refused("redquorum", "s:orders"));
        assert!(!refused("", "orders:42"));
    }
}
