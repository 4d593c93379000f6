//! Vote counting and the early decision of a quorum round (docs/design.md §2, I1 and
//! I2). Pure: no I/O, no time.
//!
//! Layer: a leaf (docs/design.md §10); it must not use the round that feeds it.

/// The majority of `n` masters: `n / 2 + 1`.
pub(crate) const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// One master's reply, as far as the decision is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// The master did what was asked.
    Granted,
    /// The master answered, refusing (the key is somebody else's, or missing).
    Denied,
    /// The master failed, timed out, or abstains.
    Failed,
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not known yet: more replies are needed.
    Pending,
    /// At least `need` masters granted.
    Reached,
    /// Too many refusals and failures for `need` grants to be possible.
    Failed,
}

/// The running count of a round over `n` masters that needs `need` grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    n: usize,
    need: usize,
    pub(crate) granted: usize,
    pub(crate) denied: usize,
    pub(crate) failed: usize,
}

impl Tally {
    /// A tally for `n` masters needing `need` grants (`need` is clamped to `n`; zero needs
    /// nothing and is decided at once).
    pub(crate) fn new(n: usize, need: usize) -> Self {
        Self {
            n,
            need: need.min(n),
            granted: 0,
            denied: 0,
            failed: 0,
        }
    }

    /// Counts one reply and returns the decision it leads to.
    pub(crate) fn record(&mut self, vote: Vote) -> Decision {
        match vote {
            Vote::Granted => self.granted += 1,
            Vote::Denied => self.denied += 1,
            Vote::Failed => self.failed += 1,
        }
        self.decision()
    }

    /// Turns one counted grant into a failure (a grant that no longer counts) and returns
    /// the decision it leads to.
    pub(crate) fn disown(&mut self) -> Decision {
        if self.granted > 0 {
            self.granted -= 1;
            self.failed += 1;
        }
        self.decision()
    }

    /// The decision so far: reached as soon as `granted >= need`, failed as soon as
    /// `denied + failed > n - need`, pending otherwise. A tie on an even `n` (2 granted and
    /// 2 denied of 4) is a failure, never a hang.
    pub(crate) fn decision(&self) -> Decision {
        if self.granted >= self.need {
            Decision::Reached
        } else if self.denied + self.failed > self.n - self.need {
            Decision::Failed
        } else {
            Decision::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(
            (1..=9).map(quorum).collect::<Vec<_>>(),
            [1, 2, 2, 3, 3, 4, 4, 5, 5]
        );
        for n in 1..200 {
            assert!(2 * quorum(n) > n, "two quorums of {n} must intersect");
            assert!(quorum(n) <= n);
        }
    }

    /// Every combination of replies for n up to 9: the decision equals the definition, is
    /// never pending once everybody answered, and no two disjoint sets can both reach it.
    #[test]
    fn exhaustive_decisions() {
        for n in 1..=9 {
            let q = quorum(n);
            for granted in 0..=n {
                for denied in 0..=(n - granted) {
                    for failed in 0..=(n - granted - denied) {
                        let t = Tally {
                            n,
                            need: q,
                            granted,
                            denied,
                            failed,
                        };
                        let expected = if granted >= q {
                            Decision::Reached
                        } else if denied + failed > n - q {
                            Decision::Failed
                        } else {
                            Decision::Pending
                        };
                        assert_eq!(t.decision(), expected, "n={n} {t:?}");
                        if granted + denied + failed == n {
                            assert_ne!(t.decision(), Decision::Pending, "n={n} {t:?}");
                        }
                        // Success and failure are exclusive.
                        assert!(!(granted >= q && denied + failed > n - q));
                    }
                }
            }
        }
    }

    #[test]
    fn even_tie_fails() {
        let mut t = Tally::new(4, quorum(4));
        for v in [Vote::Granted, Vote::Granted, Vote::Denied] {
            assert_eq!(t.record(v), Decision::Pending);
        }
        assert_eq!(t.record(Vote::Denied), Decision::Failed);
    }

    #[test]
    fn a_disowned_grant_counts_as_a_failure() {
        let mut t = Tally::new(3, quorum(3));
        t.record(Vote::Granted);
        assert_eq!(t.record(Vote::Granted), Decision::Reached);
        assert_eq!(t.disown(), Decision::Pending);
        assert_eq!((t.granted, t.failed), (1, 1));
        assert_eq!(t.record(Vote::Denied), Decision::Failed);
        assert_eq!(t.disown(), Decision::Failed);
        assert_eq!(
            Tally::new(3, 2).disown(),
            Decision::Pending,
            "nothing to disown"
        );
    }

    #[test]
    fn zero_need_is_decided_at_once() {
        assert_eq!(Tally::new(3, 0).decision(), Decision::Reached);
    }

    /// Every order of every mask of replies (redsync's mask test): the first decision taken
    /// while replies arrive one by one never changes once all replies are in.
    #[test]
    fn early_decision_is_final_for_every_mask() {
        for n in 1..=7usize {
            let q = quorum(n);
            for mask in 0..3usize.pow(n as u32) {
                let votes: Vec<Vote> = (0..n)
                    .map(|i| match (mask / 3usize.pow(i as u32)) % 3 {
                        0 => Vote::Granted,
                        1 => Vote::Denied,
                        _ => Vote::Failed,
                    })
                    .collect();
                let mut t = Tally::new(n, q);
                let mut first = Decision::Pending;
                for v in &votes {
                    let d = t.record(*v);
                    if first == Decision::Pending {
                        first = d;
                    }
                }
                let grants = votes.iter().filter(|v| **v == Vote::Granted).count();
                let want = if grants >= q {
                    Decision::Reached
                } else {
                    Decision::Failed
                };
                assert_eq!(first, want, "n={n} votes={votes:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn decision_is_monotone(n in 1usize..32, votes in proptest::collection::vec(0u8..3, 0..32)) {
            let mut t = Tally::new(n, quorum(n));
            let mut decided = None;
            for v in votes.iter().take(n) {
                let d = t.record(match v { 0 => Vote::Granted, 1 => Vote::Denied, _ => Vote::Failed });
                if let Some(prev) = decided {
                    prop_assert_eq!(d, prev, "a decision never flips");
                } else if d != Decision::Pending {
                    decided = Some(d);
                }
            }
        }
    }
}
