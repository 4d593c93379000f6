//! Capped exponential backoff: the one pause schedule of the crate, for acquire retries
//! (`Backoff::Exponential`), a down master's reconnects and a release-notice connection's
//! reconnects. Pure: it owns no timer and touches nothing else.

use std::time::Duration;

/// `base` doubled `step` times, at most `max`.
pub(crate) fn doubled(base: Duration, max: Duration, step: u32) -> Duration {
    base.saturating_mul(1u32 << step.min(31)).min(max)
}

/// A schedule of pauses that starts at `first` and doubles after each one, up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Doubling {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Doubling {
    /// Reconnect pauses of 10 ms doubling up to 1 s: quick after a blip, gentle with a
    /// master that stays down.
    pub(crate) const RECONNECT: Doubling =
        Doubling::new(Duration::from_millis(10), Duration::from_secs(1));

    pub(crate) const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            next: first,
        }
    }

    /// The pause to take now; the one after it is twice as long (up to the cap).
    pub(crate) fn pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        pause
    }

    /// Back to the first pause (after a success).
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut d = Doubling::new(10 * MS, 70 * MS);
        let pauses: Vec<Duration> = (0..5).map(|_| d.pause()).collect();
        assert_eq!(pauses, [10 * MS, 20 * MS, 40 * MS, 70 * MS, 70 * MS]);
        d.reset();
        assert_eq!(d.pause(), 10 * MS);
        assert_eq!(doubled(10 * MS, 70 * MS, 2), 40 * MS);
        assert_eq!(doubled(10 * MS, 70 * MS, u32::MAX), 70 * MS);
        assert_eq!(doubled(Duration::MAX, Duration::MAX, 3), Duration::MAX);
    }
}
