//! The contended scenario: several clients taking turns on one resource, once per way of
//! waiting for the lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redquorum::Builder;

use super::args::Budget;
use super::harness::{Keys, Outcome, Tally, plain};
use super::model::{Metric, Results, Row, Scenario};

/// Clients taking turns on one resource in the contended scenario.
pub(crate) const CONTENDERS: usize = 8;
/// The critical section of the contended scenario: a timer sleep (at least 1 ms).
pub(crate) const CRITICAL_SECTION: Duration = Duration::from_millis(1);
/// What each contended client does between two critical sections, outside the lock.
pub(crate) const OUTSIDE: Duration = Duration::from_millis(1);

/// How the contended scenario's clients wait for the lock; every contended row is measured
/// once per variant, side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Woken by release notices, with the default retry pause (100 ms + up to 100 ms) as
    /// the fallback.
    Notified,
    /// The same settings with notices turned off: the default retry pause alone.
    Timer,
    /// Notices off and an aggressive retry pause (2 ms + up to 2 ms): polling.
    Polling,
}

impl Waiting {
    pub(crate) const ALL: [Waiting; 3] = [Waiting::Notified, Waiting::Timer, Waiting::Polling];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Waiting::Notified => "notified",
            Waiting::Timer => "timer 100ms+0-100ms",
            Waiting::Polling => "polling 2ms+0-2ms",
        }
    }

    fn configure(self, builder: Builder) -> Builder {
        match self {
            Waiting::Notified => builder.notifications(true),
            Waiting::Timer => builder.notifications(false),
            Waiting::Polling => builder
                .notifications(false)
                .retry_delay(Duration::from_millis(2))
                .retry_jitter(Duration::from_millis(2)),
        }
    }
}

/// Who holds the contended lock, as the clients themselves see it.
///
/// Hand-off: from the moment a holder starts its release to the moment another client's
/// acquire returns, i.e. how long the lock stays idle while somebody waits for it.
#[derive(Debug, Default)]
struct Turns {
    /// The holder's id + 1, 0 when free.
    holder: AtomicUsize,
    /// Acquisitions that found another holder still inside: must stay 0.
    overlaps: AtomicUsize,
    /// When the last holder started to release, and who it was.
    released_at: Mutex<Option<(Instant, usize)>>,
    hand_offs: Mutex<Vec<u64>>,
    holds: Mutex<Vec<u64>>,
}

/// `CONTENDERS` clients, each with its own connections, taking turns on one resource.
pub(crate) async fn run(
    budget: &Budget,
    n: usize,
    urls: &[String],
    waiting: Waiting,
    results: &mut Results,
) -> Outcome<()> {
    let resource: Arc<str> = Keys::new(&format!("c{n}")).fresh().into();
    let turns = Arc::new(Turns::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::with_capacity(CONTENDERS);
    for _ in 0..CONTENDERS {
        let builder = plain(urls)
            .retry_attempts(10_000)
            // Bounds every wait; a client that gives up tries again while the window lasts.
            .wait_timeout(Duration::from_secs(2));
        let client = waiting.configure(builder).build()?;
        // Connect before the window opens.
        let lease = client.acquire(&format!("{resource}:warm")).await?;
        lease.release().await?;
        clients.push(client);
    }

    let window = budget.contended_window;
    let start = Instant::now();
    let end = start + window;
    let mut handles = Vec::with_capacity(CONTENDERS);
    for (id, client) in clients.into_iter().enumerate() {
        let (turns, stop, resource) =
            (Arc::clone(&turns), Arc::clone(&stop), Arc::clone(&resource));
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // Far more turns than a window allows: the clock ends the loop.
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() >= end {
                    break;
                }
                let lease = match client.acquire(&resource).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                        continue;
                    }
                };
                let got = Instant::now();
                if turns.holder.swap(id + 1, Ordering::SeqCst) != 0 {
                    turns.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let previous = turns
                    .released_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                // A hand-off passes the lock to another client; taking it back oneself
                // after the pause outside the lock is not one.
                if let Some((released, by)) = previous
                    && by != id
                {
                    push(&turns.hand_offs, got.saturating_duration_since(released));
                }
                tokio::time::sleep(CRITICAL_SECTION).await;
                push(&turns.holds, got.elapsed());
                turns.holder.store(0, Ordering::SeqCst);
                *turns
                    .released_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), id));
                match lease.release().await {
                    Ok(_) => tally.done += 1,
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e.to_string());
                    }
                }
                // Work outside the lock, so that the releaser does not always win it back.
                tokio::time::sleep(OUTSIDE).await;
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for handle in handles {
        let t = handle.await?;
        stop.store(true, Ordering::Relaxed);
        total.done += t.done;
        total.errors += t.errors;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    let elapsed = start.elapsed();
    if let Some(e) = &total.first_error {
        eprintln!(
            "  note: {} contended acquires gave up after the 2 s wait budget or failed; the first: {e}",
            total.errors
        );
    }
    let overlaps = turns.overlaps.load(Ordering::SeqCst);
    if overlaps > 0 {
        return Err(format!("mutual exclusion violated {overlaps} times at N={n}").into());
    }

    let base = results
        .find(Scenario::Baseline, Metric::SetRoundTrip, n)
        .cloned();
    let base_pairs = results
        .find(Scenario::Baseline, Metric::RawPairs, n)
        .cloned();
    let label = format!("{CONTENDERS} clients, {}", waiting.label());
    let mut sections = Row::new(
        Scenario::Contended,
        Metric::Sections,
        n,
        "critical sections",
    )
    .condition(label.clone())
    .rate(total.done, elapsed, total.errors);
    let mut hand_offs = std::mem::take(
        &mut *turns
            .hand_offs
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let mut hand_off = Row::new(
        Scenario::Contended,
        Metric::HandOff,
        n,
        "hand-off to another client",
    )
    .condition(label.clone())
    .latency(&mut hand_offs, 0);
    let mut holds =
        std::mem::take(&mut *turns.holds.lock().unwrap_or_else(PoisonError::into_inner));
    let hold = Row::new(
        Scenario::Contended,
        Metric::Hold,
        n,
        "critical section held",
    )
    .condition(format!("sleep {CRITICAL_SECTION:?}"))
    .latency(&mut holds, 0);
    if let Some(base) = &base_pairs {
        sections = sections.against(base);
    }
    if let Some(base) = &base {
        hand_off = hand_off.against(base);
    }
    results.rows.extend([sections, hand_off, hold]);
    Ok(())
}

fn push(samples: &Mutex<Vec<u64>>, d: Duration) {
    samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
}
