//! Validity and drift arithmetic (docs/design.md §3, I3). Pure: no I/O, no clock reads.
//!
//! A lease is valid until `t0 + ttl - drift`, where `t0` was read before the first request
//! of the round was sent and `drift = ttl * drift_factor + 2 ms`. Every master received its
//! `SET` after `t0`, so each master's copy of the key outlives the deadline (up to
//! clock-rate drift, which the allowance covers).
//!
//! Layer: a leaf (docs/design.md §10); it must not use any other module.

use std::time::Duration;

use tokio::time::Instant;

/// The fixed part of the drift allowance, as in the Redlock reference.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// `ttl` rounded down to whole milliseconds, the resolution of `PX`: a lease's deadline
/// must never be computed from more time than the masters were given.
pub(crate) fn whole_millis(ttl: Duration) -> Duration {
    Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}

/// The clock-drift allowance for `ttl`: `ttl * drift_factor + 2 ms`.
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.mul_f64(drift_factor).saturating_add(DRIFT_FLOOR)
}

/// The instant a lease taken in a round that started at `t0` stops being valid, or `None`
/// when the drift allowance eats the whole TTL.
pub(crate) fn deadline(t0: Instant, ttl: Duration, drift: Duration) -> Option<Instant> {
    let validity = ttl.checked_sub(drift).filter(|v| !v.is_zero())?;
    t0.checked_add(validity)
}

/// The validity left at `now`, if more than `min_validity` remains.
pub(crate) fn validity_left(
    deadline: Instant,
    now: Instant,
    min_validity: Duration,
) -> Option<Duration> {
    let left = deadline.checked_duration_since(now)?;
    (left > min_validity).then_some(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    // Checks I3 (every master's copy of the key outlives the deadline).
    #[test]
    fn drift_matches_reference() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), 102 * MS);
        assert_eq!(drift(Duration::from_secs(10), 0.0), 2 * MS);
        assert_eq!(drift(Duration::from_millis(200), 0.01), 4 * MS);
    }

    // Checks I3 (every master's copy of the key outlives the deadline).
    #[test]
    fn deadline_is_t0_plus_ttl_minus_drift() {
        let t0 = Instant::now();
        let d = deadline(t0, Duration::from_secs(10), 102 * MS).unwrap();
        assert_eq!(d - t0, Duration::from_millis(9898));
    }

    #[test]
    fn drift_eating_the_ttl_gives_no_deadline() {
        let t0 = Instant::now();
        assert_eq!(deadline(t0, 2 * MS, 2 * MS), None);
        assert_eq!(deadline(t0, MS, 2 * MS), None);
        assert!(deadline(t0, 3 * MS, 2 * MS).is_some());
    }

    #[test]
    fn validity_left_at_edges() {
        let t0 = Instant::now();
        let dl = t0 + 100 * MS;
        assert_eq!(validity_left(dl, t0, Duration::ZERO), Some(100 * MS));
        // Exactly at the deadline nothing is left.
        assert_eq!(validity_left(dl, dl, Duration::ZERO), None);
        // Past the deadline: None, never a panic.
        assert_eq!(validity_left(dl, dl + 5 * MS, Duration::ZERO), None);
        // min_validity is a strict lower bound.
        assert_eq!(validity_left(dl, t0 + 90 * MS, 10 * MS), None);
        assert_eq!(validity_left(dl, t0 + 89 * MS, 10 * MS), Some(11 * MS));
    }

    proptest! {
        #[test]
        fn validity_never_exceeds_ttl_minus_drift(
            ttl_ms in 3u64..1_000_000,
            factor in 0.0f64..0.5,
            elapsed_ms in 0u64..2_000_000,
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let dr = drift(ttl, factor);
            let t0 = Instant::now();
            if let Some(dl) = deadline(t0, ttl, dr) {
                prop_assert!(dl - t0 <= ttl - dr);
                prop_assert!(dl - t0 < ttl);
                let now = t0 + Duration::from_millis(elapsed_ms);
                match validity_left(dl, now, Duration::ZERO) {
                    Some(left) => {
                        prop_assert!(now < dl);
                        prop_assert_eq!(left + (now - t0), dl - t0);
                    }
                    None => prop_assert!(now >= dl),
                }
            } else {
                prop_assert!(dr >= ttl);
            }
        }
    }
}
