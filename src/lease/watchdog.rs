//! Auto-extension of a lease while its holder works (Redisson's watchdog).
//!
//! Part of the lease layer: it holds a lease only weakly and must not use the facade.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{LeaseShared, LostReason};
use crate::telemetry;

/// When and how long a lease's watchdog extends it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watchdog {
    /// The pause between extensions.
    pub(crate) interval: Duration,
    /// Stop extending, and count the lease lost, at this instant.
    pub(crate) give_up_at: Option<Instant>,
    /// How long one extension round may take (node timeout), so it is started early
    /// enough to finish before the safety point.
    pub(crate) round_time: Duration,
}

impl Watchdog {
    /// Spawns the task for `shared`, if a tokio runtime is running.
    pub(crate) fn spawn(self, shared: &Arc<LeaseShared>) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.run(Arc::downgrade(shared)));
        }
    }

    async fn run(self, lease: Weak<LeaseShared>) {
        let Some(mut state) = lease.upgrade().map(|s| s.state.subscribe()) else {
            return;
        };
        let mut last_extended = Instant::now();
        loop {
            let current = *state.borrow_and_update();
            if current.lost.is_some() {
                return;
            }
            let Some(shared) = lease.upgrade() else {
                return;
            };
            let safety_point = shared.safety_point(&current);
            drop(shared);
            // Extend every interval, but early enough to finish before the safety point.
            let latest_start = safety_point
                .checked_sub(self.round_time)
                .unwrap_or(safety_point);
            let mut next = (last_extended + self.interval).min(latest_start);
            if let Some(cap) = self.give_up_at {
                next = next.min(cap);
            }
            tokio::select! {
                changed = state.changed() => {
                    if changed.is_err() {
                        return; // the lease is gone
                    }
                    continue; // extended by the holder, or lost: look again
                }
                () = tokio::time::sleep_until(next) => {}
            }

            // Holding the lease only for this step: it must not outlive its owner.
            let Some(shared) = lease.upgrade() else {
                return;
            };
            let now = Instant::now();
            if self.give_up_at.is_some_and(|cap| now >= cap) {
                tracing::debug!(resource = %shared.traced(), "watchdog reached max_hold");
                shared.mark_lost(LostReason::MaxHold);
                return;
            }
            if now >= safety_point {
                // Starved: the runtime did not run us before the safety point.
                tracing::warn!(resource = %shared.traced(), "watchdog ran too late to extend");
                shared.mark_lost(LostReason::Expired);
                return;
            }
            match shared.extend(shared.ttl).await {
                Ok(_) => {
                    telemetry::extended(next);
                    last_extended = now;
                }
                Err(error) => {
                    let shown = shared.inner.config.trace_resource_names;
                    tracing::warn!(
                        resource = %shared.traced(),
                        error = %telemetry::error(&error, shown),
                        "watchdog could not extend"
                    );
                    // `extend` marked the lease lost (or it was released meanwhile).
                    shared.mark_lost(LostReason::ExtendFailed);
                    return;
                }
            }
        }
    }
}
