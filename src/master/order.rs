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
//! it writes: a connect and a round trip). Past that, every earlier place still unpassed
//! is given up on at once — its call, whenever it writes, no longer holds anyone back —
//! so that a call whose future nobody polls any more costs the calls behind it one limit,
//! once, and not one limit each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

/// One master's order of calls.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// The place the next call takes.
    next: AtomicU64,
    /// Every place below it has written its request, ended, or was given up on (mirrors
    /// `state.upto`, read without the lock).
    upto: AtomicU64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    upto: u64,
    /// Places above `upto` that passed out of turn (ended while waiting, or went on after
    /// the limit).
    early: BTreeSet<u64>,
    /// The calls waiting for their turn, by place: only the one at `upto` is woken.
    waiting: BTreeMap<u64, Waker>,
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

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change below leaves the state consistent: a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_turn(&self, at: u64) -> bool {
        self.upto.load(Ordering::Acquire) >= at
    }

    /// Place `at` has written its request or ended.
    fn pass(&self, at: u64) {
        let mut state = self.lock();
        if at < state.upto {
            // Given up on already.
            return;
        }
        if at > state.upto {
            state.early.insert(at);
            return;
        }
        self.advance(&mut state, at + 1);
    }

    /// Moves the turn on to `to` (then past every place that passed early) and wakes the
    /// call whose turn it is.
    fn advance(&self, state: &mut State, to: u64) {
        let mut upto = to.max(state.upto);
        state.early = state.early.split_off(&upto);
        while state.early.remove(&upto) {
            upto += 1;
        }
        state.upto = upto;
        self.upto.store(upto, Ordering::Release);
        // Waiters below the turn were given up on with it; the one at the turn may go.
        let later = state.waiting.split_off(&upto);
        let released = std::mem::replace(&mut state.waiting, later);
        for (_, waker) in released {
            waker.wake();
        }
        if let Some(waker) = state.waiting.remove(&upto) {
            waker.wake();
        }
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
    /// Waits until every earlier call has written its request or ended, at most `limit`;
    /// past it, the earlier calls that have not are given up on.
    ///
    /// # Cancel safety
    /// Dropping the future keeps the place; dropping the place passes it.
    pub(super) async fn turn(&self, limit: Duration) {
        if self.order.is_turn(self.at) {
            return;
        }
        let order = &self.order;
        let at = self.at;
        let waited = std::future::poll_fn(|cx| {
            let mut state = order.lock();
            if state.upto >= at {
                state.waiting.remove(&at);
                return Poll::Ready(());
            }
            state.waiting.insert(at, cx.waker().clone());
            Poll::Pending
        });
        if tokio::time::timeout(limit, waited).await.is_err() {
            let mut state = order.lock();
            state.waiting.remove(&at);
            if state.upto < at {
                tracing::debug!(
                    place = at,
                    behind = at - state.upto,
                    "earlier requests to this master are still unsent after {limit:?}: \
                     sending without waiting for them"
                );
                order.advance(&mut state, at);
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
    async fn a_place_never_passed_holds_later_calls_one_limit_once() {
        let order = Arc::new(Order::default());
        let stuck = order.take();
        let mut later = order.take();
        let start = tokio::time::Instant::now();
        later.turn(Duration::from_millis(300)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        later.pass();
        // The stuck place was given up on: a thousand calls behind it wait no longer.
        let start = tokio::time::Instant::now();
        for _ in 0..1000 {
            order.take().turn(Duration::from_millis(300)).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        // Its late pass changes nothing, and nothing is kept for it.
        drop(stuck);
        assert!(order.is_turn(1002));
        let state = order.lock();
        assert!(state.early.is_empty() && state.waiting.is_empty());
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

    #[tokio::test(start_paused = true)]
    async fn only_the_next_place_is_woken() {
        let order = Arc::new(Order::default());
        let mut first = order.take();
        let polls = Arc::new(AtomicU64::new(0));
        let mut waiters = Vec::new();
        for _ in 0..50 {
            let place = order.take();
            let polls = Arc::clone(&polls);
            waiters.push(tokio::spawn(async move {
                {
                    let mut turn = std::pin::pin!(place.turn(Duration::from_secs(10)));
                    std::future::poll_fn(|cx| {
                        polls.fetch_add(1, Ordering::Relaxed);
                        turn.as_mut().poll(cx)
                    })
                    .await;
                }
                place
            }));
        }
        tokio::task::yield_now().await;
        first.pass();
        for waiter in waiters {
            let mut place = waiter.await.unwrap();
            place.pass();
        }
        // Each waiter is polled about twice (once to wait, once when woken), not once per
        // pass ahead of it.
        assert!(polls.load(Ordering::Relaxed) <= 150, "{polls:?}");
    }
}
