//! The order in which one master's requests leave (docs/design.md §2).
//!
//! A round that decides early leaves its requests to slow masters running, and a clean-up
//! sent after the decision (a release, a `Dequeue`) must reach each of those masters
//! after the request it cleans up after. One ordered connection keeps that order only
//! for requests already written to it: a request still waiting for the master's first
//! connection, or polled for the first time after a later call, could leave second. So
//! every call takes a place in its master's order when it is made, synchronously, and
//! writes its first request only once every earlier call has written its own, or ended
//! without writing.
//!
//! A call waits for its turn at most `limit` (the longest an earlier call may take before
//! it writes: a connect and a round trip); past that it goes anyway, so that an earlier
//! call whose future nobody polls any more cannot hold the master up for good.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// One master's order of calls.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// The place the next call takes.
    next: AtomicU64,
    /// Every place below it has written its request or ended (mirrors `passed.upto`,
    /// read without the lock).
    upto: AtomicU64,
    passed: Mutex<Passed>,
    turn: Notify,
}

#[derive(Debug, Default)]
struct Passed {
    upto: u64,
    /// Places above `upto` that passed out of turn (ended while waiting, or went on after
    /// the limit).
    early: BTreeSet<u64>,
}

impl Order {
    /// A place for a call made now.
    pub(super) fn take(self: &Arc<Self>) -> Place {
        Place {
            order: Arc::clone(self),
            at: self.next.fetch_add(1, Ordering::Relaxed),
            passed: false,
        }
    }

    fn pass(&self, at: u64) {
        let mut passed = self.passed.lock().unwrap_or_else(PoisonError::into_inner);
        if at != passed.upto {
            passed.early.insert(at);
            return;
        }
        let mut upto = at + 1;
        while passed.early.remove(&upto) {
            upto += 1;
        }
        passed.upto = upto;
        self.upto.store(upto, Ordering::Release);
        drop(passed);
        self.turn.notify_waiters();
    }

    fn is_turn(&self, at: u64) -> bool {
        self.upto.load(Ordering::Acquire) >= at
    }
}

/// A call's place in its master's order; passed when the call has written its first
/// request, or when it is dropped.
#[derive(Debug)]
pub(super) struct Place {
    order: Arc<Order>,
    at: u64,
    passed: bool,
}

impl Place {
    /// Waits until every earlier call has written its request or ended, at most `limit`.
    ///
    /// # Cancel safety
    /// Dropping the future keeps the place; dropping the place passes it.
    pub(super) async fn turn(&self, limit: Duration) {
        if self.order.is_turn(self.at) {
            return;
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.order.turn.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a pass between the two still wakes us.
            notified.as_mut().enable();
            if self.order.is_turn(self.at) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::debug!(
                    place = self.at,
                    "an earlier request to this master is still unsent after {limit:?}: \
                     sending without waiting for it"
                );
                return;
            }
        }
    }

    /// The call wrote its request (or ends without one): later calls may write theirs.
    pub(super) fn pass(&mut self) {
        if !self.passed {
            self.passed = true;
            self.order.pass(self.at);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.pass();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_write_in_the_order_they_were_made() {
        let order = Arc::new(Order::default());
        let mut first = order.take();
        let second = order.take();
        let third = order.take();
        // The second waits for the first, whatever the order of polls.
        let waiting = tokio::spawn(async move {
            second.turn(Duration::from_secs(10)).await;
            second
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // The third ends without writing: it passes out of turn, and later calls do not
        // wait for it.
        drop(third);
        first.pass();
        let mut second = waiting.await.unwrap();
        second.pass();
        let fourth = order.take();
        let start = tokio::time::Instant::now();
        fourth.turn(Duration::from_secs(10)).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_never_passed_holds_later_calls_at_most_the_limit() {
        let order = Arc::new(Order::default());
        let stuck = order.take();
        let later = order.take();
        let start = tokio::time::Instant::now();
        later.turn(Duration::from_millis(300)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        // Passed out of turn, then the stuck one ends: both are behind the next call.
        drop(later);
        assert!(!order.is_turn(2));
        drop(stuck);
        assert!(order.is_turn(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_unpolled_call_passes_its_place() {
        let order = Arc::new(Order::default());
        let unpolled = order.take();
        let later = order.take();
        drop(unpolled);
        let start = tokio::time::Instant::now();
        later.turn(Duration::from_secs(10)).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
