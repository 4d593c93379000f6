//! The keys one client holds (docs/design.md §14, Re-entry): every acquire path asks
//! [`Held::check`] before its first round trip, and a granted lease keeps a [`Claim`] on
//! its keys until it is released or dropped. A client that acquires a key it already
//! holds would otherwise wait for its own lease to run out; it gets
//! [`ErrorKind::AlreadyHeld`] at once instead, naming re-entry.
//!
//! The registry is per client (shared by its clones through `core::Inner`), not per
//! process: two clients built separately do not see each other's leases.
//!
//! Layer: a leaf (docs/design.md §10).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, ErrorKind, ShortName};

/// How a lease holds a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldMode {
    /// Alone: a mutex, every key of a several-resources lease, a semaphore permit's slot
    /// key, a read-write lock held for writing.
    Exclusive,
    /// Beside other shared holders of this client: a read-write lock held for reading.
    Shared,
}

/// How one key is held by this client's leases.
#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    exclusive: usize,
    shared: usize,
}

/// The keys this client holds, with how many of its leases hold each, and how.
#[derive(Debug, Default)]
pub(crate) struct Held {
    keys: Mutex<HashMap<Arc<str>, Entry>>,
    /// `Waiting::own_leases`: only upgrades are refused.
    wait_for_own: bool,
    /// Told of every new claim, so that an acquire waiting for a key learns at once when
    /// a lease of its own client took it ([`Held::taken`]).
    claimed: tokio::sync::Notify,
}

impl Held {
    pub(crate) fn new(wait_for_own: bool) -> Self {
        Self {
            keys: Mutex::default(),
            wait_for_own,
            claimed: tokio::sync::Notify::new(),
        }
    }

    /// Resolves once a lease of this client holds one of `keys` exclusively, when that
    /// refuses an acquire of it ([`Held::check`]); never when this client waits for its own leases.
    /// A waiting acquire races its sleep with this, so that it ends with `AlreadyHeld` as
    /// soon as its own client took the key, not at its next attempt.
    pub(crate) async fn taken(&self, keys: &[&str]) {
        if self.wait_for_own {
            return std::future::pending().await;
        }
        loop {
            let notified = self.claimed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the look: a claim made after it wakes us.
            notified.as_mut().enable();
            let taken = {
                let held = self.keys();
                keys.iter()
                    .any(|key| held.get(*key).is_some_and(|e| e.exclusive > 0))
            };
            if taken {
                return;
            }
            notified.await;
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        // Nothing panics while the map is locked; a poisoned map is still consistent.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a lease of this client may be asked for on `keys` in `mode`; `resource`
    /// names the lock in the error. No master is asked: a refusal costs no round trip.
    ///
    /// # Errors
    /// [`ErrorKind::AlreadyHeld`] when one of `keys` is held exclusively by this client
    /// (unless it waits for its own leases), or is held shared and `mode` is exclusive
    /// (an upgrade: always refused).
    pub(crate) fn check(&self, resource: &str, keys: &[&str], mode: HeldMode) -> Result<(), Error> {
        let held = self.keys();
        for key in keys {
            let Some(entry) = held.get(*key) else {
                continue;
            };
            if entry.shared > 0 && entry.exclusive == 0 && mode == HeldMode::Exclusive {
                return Err(Error::new(ErrorKind::AlreadyHeld, resource).with_detail(
                    "upgrading a read lock to a write lock is refused (two upgraders would \
                     deadlock): release the read lease first",
                ));
            }
            if entry.exclusive > 0 && !self.wait_for_own {
                // The name as `Error`'s Display writes it: shortened when long, and hidden
                // with it in traces that hide resource names.
                let name = ShortName(resource);
                return Err(
                    Error::new(ErrorKind::AlreadyHeld, resource).with_detail(format!(
                        "this client already holds {name}: re-enter with `Lease::reenter` on \
                     the lease it holds, or release that lease first (a lease holds its lock \
                     until it is released or dropped, even once lost); tasks that share this \
                     client and must queue behind each other need \
                     `Builder::waiting(Waiting::new().own_leases(true))`"
                    )),
                );
            }
        }
        Ok(())
    }

    /// Records that a lease of this client holds `keys` in `mode`, until the claim drops.
    pub(crate) fn claim(self: &Arc<Self>, keys: &[Arc<str>], mode: HeldMode) -> Claim {
        let mut held = self.keys();
        for key in keys {
            let entry = held.entry(Arc::clone(key)).or_default();
            match mode {
                HeldMode::Exclusive => entry.exclusive += 1,
                HeldMode::Shared => entry.shared += 1,
            }
        }
        drop(held);
        self.claimed.notify_waiters();
        Claim {
            held: Arc::clone(self),
            keys: keys.to_vec(),
            mode,
        }
    }

    /// How many of this client's leases hold `key` (exclusive, shared).
    #[cfg(test)]
    fn count(&self, key: &str) -> (usize, usize) {
        self.keys()
            .get(key)
            .map_or((0, 0), |e| (e.exclusive, e.shared))
    }
}

/// A lease's entry in its client's [`Held`]; dropping it removes the entry.
pub(crate) struct Claim {
    held: Arc<Held>,
    keys: Vec<Arc<str>>,
    mode: HeldMode,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("keys", &self.keys.len())
            .field("mode", &self.mode)
            .finish()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = self.held.keys();
        for key in &self.keys {
            let Some(entry) = held.get_mut(key) else {
                continue;
            };
            match self.mode {
                HeldMode::Exclusive => entry.exclusive = entry.exclusive.saturating_sub(1),
                HeldMode::Shared => entry.shared = entry.shared.saturating_sub(1),
            }
            if entry.exclusive == 0 && entry.shared == 0 {
                held.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn an_exclusive_claim_refuses_every_mode_until_dropped() {
        let held = Arc::new(Held::new(false));
        let claim = held.claim(&keys(&["a", "b"]), HeldMode::Exclusive);
        for mode in [HeldMode::Exclusive, HeldMode::Shared] {
            let error = held.check("b", &["c", "b"], mode).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::AlreadyHeld);
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("Lease::reenter"), "{error}");
        }
        assert!(held.check("c", &["c"], HeldMode::Exclusive).is_ok());
        drop(claim);
        assert_eq!(held.count("a"), (0, 0));
        assert!(held.check("a", &["a", "b"], HeldMode::Exclusive).is_ok());
    }

    #[test]
    fn shared_claims_count_and_refuse_only_the_upgrade() {
        let held = Arc::new(Held::new(false));
        let first = held.claim(&keys(&["r"]), HeldMode::Shared);
        assert!(held.check("r", &["r"], HeldMode::Shared).is_ok());
        let second = held.claim(&keys(&["r"]), HeldMode::Shared);
        assert_eq!(held.count("r"), (0, 2));
        let error = held.check("r", &["r"], HeldMode::Exclusive).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AlreadyHeld);
        assert!(
            error.to_string().contains("upgrading a read lock"),
            "{error}"
        );
        drop(first);
        assert!(held.check("r", &["r"], HeldMode::Exclusive).is_err());
        drop(second);
        assert!(held.check("r", &["r"], HeldMode::Exclusive).is_ok());
    }

    #[test]
    fn waiting_for_own_leases_still_refuses_the_upgrade() {
        let held = Arc::new(Held::new(true));
        let _mutex = held.claim(&keys(&["m"]), HeldMode::Exclusive);
        assert!(held.check("m", &["m"], HeldMode::Exclusive).is_ok());
        let _read = held.claim(&keys(&["r"]), HeldMode::Shared);
        let error = held.check("r", &["r"], HeldMode::Exclusive).unwrap_err();
        assert!(error.to_string().contains("upgrading"), "{error}");
    }
}
