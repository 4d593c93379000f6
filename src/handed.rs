//! The locks this client just handed on (docs/design.md §17, "Queueing at once"): a
//! release that handed a lock to the next waiter notes the name with the ticket counters
//! its masters answered, and this client's next acquire of the name, soon after, queues at
//! once with a ticket above them instead of first being refused. A contended loop (release,
//! acquire again) so saves a round per turn; nothing is noted for a lock released without
//! waiters, whose next acquire stays one plain round.
//!
//! A note is only a shortcut: the queued acquire grants as any queued acquire does, and a
//! stale note costs at most a registration round.
//!
//! Layer: a leaf (docs/design.md §10).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long a note is good for: long enough for a loop that acquires again at once, short
/// enough that the queue it describes has likely not drained since.
pub(crate) const FRESH: Duration = Duration::from_millis(100);

/// At most this many names are noted at once: stale notes make room for a new one, and a
/// new note is not kept while all of them are fresh.
const CAPACITY: usize = 256;

/// One handed-on lock: the ticket counters its release read, and when.
#[derive(Debug)]
struct Note {
    tickets: Vec<u64>,
    at: Instant,
}

/// The locks this client handed on within [`FRESH`], by key.
#[derive(Debug, Default)]
pub(crate) struct HandedOn {
    notes: Mutex<HashMap<Arc<str>, Note>>,
    /// Whether any note may be kept: an acquire of a client that never handed a lock on
    /// takes no lock.
    any: AtomicBool,
}

impl HandedOn {
    /// Notes that the release of `key` at `now` handed it on, its masters answering the
    /// ticket counters `tickets`.
    pub(crate) fn note(&self, key: &Arc<str>, tickets: Vec<u64>, now: Instant) {
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        if notes.len() >= CAPACITY && !notes.contains_key(key) {
            notes.retain(|_, n| now.saturating_duration_since(n.at) < FRESH);
            if notes.len() >= CAPACITY {
                return;
            }
        }
        notes.insert(Arc::clone(key), Note { tickets, at: now });
        self.any.store(true, Ordering::Release);
    }

    /// Takes the note on `key`, if one was made within [`FRESH`] of `now`: the ticket
    /// counters its release read.
    pub(crate) fn take(&self, key: &str, now: Instant) -> Option<Vec<u64>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        let note = notes.remove(key);
        if notes.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        note.filter(|n| now.saturating_duration_since(n.at) < FRESH)
            .map(|n| n.tickets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_note_is_taken_once_while_fresh() {
        let handed = HandedOn::default();
        let key: Arc<str> = "k".into();
        assert_eq!(handed.take("k", Instant::now()), None);
        handed.note(&key, vec![3, 4, 4], Instant::now());
        assert_eq!(handed.take("other", Instant::now()), None);
        assert_eq!(handed.take("k", Instant::now()), Some(vec![3, 4, 4]));
        assert_eq!(handed.take("k", Instant::now()), None, "taken once");
        handed.note(&key, vec![5], Instant::now());
        tokio::time::advance(FRESH).await;
        assert_eq!(handed.take("k", Instant::now()), None, "stale");
    }

    #[tokio::test(start_paused = true)]
    async fn notes_stay_bounded() {
        let handed = HandedOn::default();
        for i in 0..CAPACITY + 10 {
            handed.note(&format!("k{i}").into(), vec![1], Instant::now());
        }
        assert_eq!(handed.notes.lock().unwrap().len(), CAPACITY);
        // Once the old notes are stale, a new one replaces them.
        tokio::time::advance(FRESH).await;
        handed.note(&"new".into(), vec![2], Instant::now());
        assert_eq!(handed.notes.lock().unwrap().len(), 1);
        assert_eq!(handed.take("new", Instant::now()), Some(vec![2]));
    }
}
