//! A semaphore's slots as an acquire target (docs/design.md §15): `limit` slots, each an
//! ordinary quorum lock; taking k permits takes k slots chosen free, all or none. Which
//! slots to ask for is chosen here, from the free slots each master reported in the last
//! round, never as a count of permits: a slot is what each master grants or refuses.

use std::sync::Arc;

use rand::seq::SliceRandom;

use crate::core::with_rng;
use crate::error::{Error, ErrorKind};
use crate::held::{Held, HeldMode};
use crate::scripts;

/// The most attempts in a row that re-pick slots reported free without spending an attempt.
const MAX_REPICKS: u32 = 3;

/// What every clone of a semaphore handle shares: its name, limit and keys.
pub(crate) struct SlotSet {
    pub(crate) name: Arc<str>,
    pub(crate) limit: u32,
    /// The slot keys' common beginning (slot `i` is it followed by `i`).
    pub(crate) base: Arc<str>,
    /// Where each master stores the semaphore's limit.
    pub(crate) limit_key: Arc<str>,
    pub(crate) slots: Arc<[Arc<str>]>,
    /// One release channel for every slot, so that a waiter subscribes once.
    pub(crate) channel: Arc<str>,
}

impl SlotSet {
    /// The slots of the semaphore `name` under the key prefix `prefix`, `limit` of them.
    pub(crate) fn new(prefix: &str, name: &str, limit: u32) -> Self {
        let base: Arc<str> = scripts::semaphore_base(prefix, name).into();
        Self {
            name: name.into(),
            limit,
            limit_key: format!("{base}limit").into(),
            slots: (0..limit).map(|i| format!("{base}{i}").into()).collect(),
            channel: scripts::release_channel(&base).into(),
            base,
        }
    }

    /// The slots this client's own leases hold (docs/design.md §14): never worth asking
    /// for. Empty with `Waiting::own_leases`, which waits for them instead.
    ///
    /// # Errors
    /// [`ErrorKind::AlreadyHeld`] when so many are this client's own that `permits` more
    /// could only come from its own leases: waiting would wait for itself.
    pub(crate) fn own(&self, held: &Held, permits: u32) -> Result<Vec<u32>, Error> {
        let own: Vec<u32> = (0..self.limit)
            .filter(|i| {
                held.check(&self.name, &[&self.slots[*i as usize]], HeldMode::Exclusive)
                    .is_err()
            })
            .collect();
        let own_count = u32::try_from(own.len()).unwrap_or(u32::MAX);
        if own_count.saturating_add(permits) > self.limit {
            return Err(
                Error::new(ErrorKind::AlreadyHeld, &*self.name).with_detail(format!(
                    "this client already holds {own_count} of the semaphore's {} permits, so \
                     {permits} more could only come from its own leases: release one of them \
                     first, or ask for fewer; tasks that share this client and must queue \
                     behind each other need `Builder::waiting(Waiting::new().own_leases(true))`",
                    self.limit
                )),
            );
        }
        Ok(own)
    }
}

/// One call's permits: how many, and which slots its next attempt asks for.
pub(crate) struct Slots {
    pub(crate) set: Arc<SlotSet>,
    permits: u32,
    /// The slots the next attempt asks for.
    pub(crate) wanted: Vec<u32>,
    /// The slots this client's own leases held when last looked at.
    own: Vec<u32>,
    /// Attempts in a row that re-picked slots without spending an attempt.
    repicks: u32,
}

impl Slots {
    /// `permits` permits of `set`, none of them one of `own` (this client's leases hold
    /// them) while others remain; the first slots are drawn at random.
    pub(crate) fn new(set: Arc<SlotSet>, permits: u32, own: Vec<u32>) -> Self {
        let wanted = choose(&[], set.limit as usize, permits as usize, &own);
        Self {
            set,
            permits,
            wanted,
            own,
            repicks: 0,
        }
    }

    /// Looks again at the slots this client's own leases hold: a lease of this client may
    /// have taken slots while the call waited; the choice starts afresh if so.
    ///
    /// # Errors
    /// As [`SlotSet::own`].
    pub(crate) fn check_held(&mut self, held: &Held) -> Result<(), Error> {
        let own = self.set.own(held, self.permits)?;
        if own != self.own {
            self.wanted = choose(&[], self.set.limit as usize, self.permits as usize, &own);
            self.own = own;
        }
        Ok(())
    }

    /// After a failed round in which each master reported its `free` slots: chooses the
    /// slots to ask for next, and says whether to ask at once, without spending an
    /// attempt. That is when the round was refused for the slots it guessed (`contended`)
    /// while others are free on a quorum: a wrong guess is no contention. A few times in
    /// a row at most.
    pub(crate) fn retry_at_once(
        &mut self,
        free: &[Vec<u32>],
        contended: bool,
        quorum: usize,
    ) -> bool {
        self.wanted = choose(
            free,
            self.set.limit as usize,
            self.permits as usize,
            &self.own,
        );
        if contended && self.repicks < MAX_REPICKS && free_on_quorum(free, &self.wanted, quorum) {
            self.repicks += 1;
            return true;
        }
        self.repicks = 0;
        false
    }
}

/// The `k` slots (of `limit`) to try next: those free on the most masters of the last
/// attempt, ties broken at random so that concurrent takers spread over the slots, never
/// one of `own` (this client's leases hold them) while others remain. Never a count of
/// permits: a slot is what each master grants or refuses (docs/design.md §15, I16).
fn choose(free: &[Vec<u32>], limit: usize, k: usize, own: &[u32]) -> Vec<u32> {
    let mut score = vec![0usize; limit];
    for slots in free {
        for slot in slots {
            if let Some(s) = score.get_mut(*slot as usize) {
                *s += 1;
            }
        }
    }
    let mut order: Vec<u32> = (0..limit).filter_map(|i| u32::try_from(i).ok()).collect();
    with_rng(|rng| order.shuffle(rng));
    // Stable: a random order among equal scores, this client's own slots last.
    order.sort_by_key(|slot| (own.contains(slot), std::cmp::Reverse(score[*slot as usize])));
    order.truncate(k);
    order.sort_unstable();
    order
}

/// Whether each of `slots` was reported free by at least `quorum` masters.
fn free_on_quorum(free: &[Vec<u32>], slots: &[u32], quorum: usize) -> bool {
    slots
        .iter()
        .all(|slot| free.iter().filter(|f| f.contains(slot)).count() >= quorum)
}

#[cfg(test)]
mod tests {
    use super::{choose, free_on_quorum};

    #[test]
    fn the_next_slots_are_those_free_on_the_most_masters() {
        let free = [vec![0, 2, 3], vec![2, 3], vec![3, 1]];
        assert_eq!(choose(&free, 4, 1, &[]), [3]);
        assert_eq!(choose(&free, 4, 2, &[]), [2, 3]);
        assert_eq!(choose(&[], 4, 4, &[]), [0, 1, 2, 3]);
        // This client's own slots come last.
        assert_eq!(choose(&free, 4, 1, &[3]), [2]);
        assert_eq!(choose(&[], 3, 2, &[0]), [1, 2]);
        // Ties are broken at random: over many draws, each tied slot comes first.
        let mut seen = [false; 4];
        for _ in 0..200 {
            seen[choose(&[], 4, 1, &[])[0] as usize] = true;
        }
        assert_eq!(seen, [true; 4]);
        // Slots a master reports beyond the limit are ignored.
        assert_eq!(choose(&[vec![9]], 2, 2, &[]), [0, 1]);
    }

    #[test]
    fn slots_free_on_a_quorum_are_tried_at_once() {
        let free = [vec![0, 2], vec![2], vec![0]];
        assert!(free_on_quorum(&free, &[0, 2], 2));
        assert!(!free_on_quorum(&free, &[0, 1], 2));
        assert!(!free_on_quorum(&free, &[2], 3));
    }
}
