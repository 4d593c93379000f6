//! What one acquire call locks, and how each of its attempts asks for it: one target type
//! for every lock kind (docs/design.md §3, §14, §16). The engine's steps are the same for
//! all of them; the target says which op a round sends, which keys hold the attempt's
//! value, what a refused round showed of the holders, and what a granted one becomes.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, MAX_RESOURCES};
use crate::core::check_resource;
use crate::engine::Plan;
use crate::error::{Error, ErrorKind};
use crate::fencing::FencingToken;
use crate::held::{Claim, Held, HeldMode};
use crate::lease::{LeaseKey, LeaseMode, list_name};
use crate::master::{FenceRead, Op, PermitsOp, Reply, RwMode};
#[cfg(redquorum_mutants)]
use crate::mutants::{Mutant, planted};
use crate::quorum::Round;
use crate::scripts;

use super::slots::Slots;

/// What one acquire call locks.
pub(crate) struct Target {
    /// The name in errors and traces: the resource, or the resources joined.
    pub(crate) name: Arc<str>,
    /// (resource, key on the masters) pairs: one, or several sorted by key.
    keys: Vec<(Arc<str>, Arc<str>)>,
    pub(crate) kind: Kind,
}

/// The kind of lock a target takes.
pub(crate) enum Kind {
    /// The lock of one resource; a waiting call queues for it (docs/design.md §17).
    Mutex,
    /// The locks of several resources, all or none (docs/design.md §14, I14).
    Many,
    /// A read-write lock's read mode (docs/design.md §16).
    Read,
    /// A read-write lock's write mode, with the call's intent.
    Write(Intent),
    /// A semaphore's permits, each a slot chosen free (docs/design.md §15).
    Slots(Slots),
}

/// A waiting writer's intent (docs/design.md §16): one id for the whole call, refreshed by
/// each attempt while readers hold the lock.
pub(crate) struct Intent {
    pub(crate) id: Arc<str>,
    pub(crate) ttl: Duration,
}

/// What one attempt sends, and the keys it sets.
pub(crate) struct Ask {
    pub(crate) op: Arc<Op>,
    /// Each key the attempt sets, in the lease's order.
    pub(crate) keys: Vec<AskKey>,
    /// The one release channel of every key (a semaphore's slots share one); `None`: each
    /// key's own.
    pub(crate) channel: Option<Arc<str>>,
    /// How the granted lease gets its fencing tokens.
    pub(crate) tokens: Tokens,
}

/// One key an attempt sets.
pub(crate) struct AskKey {
    /// The resource it locks, as the lease names it.
    pub(crate) resource: Arc<str>,
    /// The lock's key: its fence counter, its release channel, this client's claim on it.
    pub(crate) lock: Arc<str>,
    /// The key that holds the attempt's value: a reader's own key, or the lock's.
    pub(crate) holds: Arc<str>,
}

/// How a granted attempt gets its fencing tokens (docs/design.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tokens {
    /// None asked for.
    Skip,
    /// The write-back, one per key, from the counters the round read.
    WriteBack,
    /// The planted one-round token ([`Mutant::OneRoundToken`]): the largest counter the
    /// granting masters incremented.
    #[cfg(redquorum_mutants)]
    OneRound,
}

/// What a round that did not grant showed, for the next step of the call.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Of several keys, which ones some master found held (empty for one key).
    pub(crate) held: Vec<bool>,
    /// The fair lock's ticket counters the masters answered (docs/design.md §17).
    pub(crate) tickets: Vec<u64>,
    /// A semaphore's free slots, as each answering master reported them.
    pub(crate) free: Vec<Vec<u32>>,
}

impl Target {
    /// The lock of `resource` alone, of `kind`.
    pub(crate) fn one(config: &Config, resource: &str, kind: Kind) -> Self {
        let key: Arc<str> = format!("{}{resource}", config.key_prefix).into();
        let resource: Arc<str> = resource.into();
        Self {
            keys: vec![(Arc::clone(&resource), key)],
            name: resource,
            kind,
        }
    }

    /// The locks of every resource of `resources`, keys sorted; refuses an empty list, a
    /// resource listed twice, more than [`MAX_RESOURCES`], and any name `acquire` refuses.
    /// One resource is the lock of that one.
    pub(crate) fn many(config: &Config, resources: &[&str]) -> Result<Self, Error> {
        let listed = list_name(resources);
        let invalid = |detail: String| {
            Err(Error::new(ErrorKind::InvalidResource, listed.as_str()).with_detail(detail))
        };
        if resources.is_empty() {
            return invalid(
                "the list of resources is empty: name at least one resource to lock".into(),
            );
        }
        if resources.len() > MAX_RESOURCES {
            return invalid(format!(
                "{} resources listed, more than MAX_RESOURCES ({MAX_RESOURCES}): lock fewer at \
                 once, or lock one resource that stands for the group",
                resources.len()
            ));
        }
        for resource in resources {
            check_resource(&config.key_prefix, resource)?;
        }
        let mut keys: Vec<(Arc<str>, Arc<str>)> = resources
            .iter()
            .map(|r| (Arc::from(*r), format!("{}{r}", config.key_prefix).into()))
            .collect();
        keys.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        if let Some(pair) = keys.windows(2).find(|w| w[0].1 == w[1].1) {
            let twice = &pair[0].0;
            return invalid(format!(
                "{twice:?} is listed twice: list each resource once"
            ));
        }
        let name = list_name(&keys.iter().map(|(r, _)| &**r).collect::<Vec<_>>()).into();
        let kind = match keys.len() {
            1 => Kind::Mutex,
            _ => Kind::Many,
        };
        Ok(Self { keys, name, kind })
    }

    /// A semaphore's permits: the slots of each attempt are chosen as it goes.
    pub(crate) fn slots(slots: Slots) -> Self {
        Self {
            name: Arc::clone(&slots.set.name),
            keys: Vec::new(),
            kind: Kind::Slots(slots),
        }
    }

    /// How a lease of this target holds its lock keys in the client's registry.
    fn held_mode(&self) -> HeldMode {
        match self.kind {
            Kind::Read => HeldMode::Shared,
            Kind::Mutex | Kind::Many | Kind::Write(_) | Kind::Slots(_) => HeldMode::Exclusive,
        }
    }

    /// The mode of a lease of this target.
    pub(crate) fn mode(&self) -> LeaseMode {
        match self.kind {
            Kind::Mutex | Kind::Many => LeaseMode::Exclusive,
            Kind::Read => LeaseMode::Read,
            Kind::Write(_) => LeaseMode::Write,
            Kind::Slots(_) => LeaseMode::Permits,
        }
    }

    /// The lock keys this client's own leases must not hold exclusively while the call
    /// waits ([`Held::taken`]); none for a semaphore, whose slots its own leases may hold
    /// while others are free.
    pub(crate) fn lock_keys(&self) -> Vec<&str> {
        self.keys.iter().map(|(_, key)| &**key).collect()
    }

    /// The first lock key: the one key of a mutex or a read-write lock.
    pub(crate) fn first_key(&self) -> Option<&Arc<str>> {
        self.keys.first().map(|(_, key)| key)
    }

    /// Refuses the call when this client's own leases hold what it asks for (docs/design.md
    /// §14): before any round trip, and again whenever it is about to try once more.
    ///
    /// # Errors
    /// [`ErrorKind::AlreadyHeld`], from [`Held::check`]; for a semaphore, when its own
    /// leases hold so many slots that the permits could only come from them.
    pub(crate) fn check_held(&mut self, held: &Held) -> Result<(), Error> {
        match &mut self.kind {
            Kind::Slots(slots) => slots.check_held(held),
            _ => held.check(&self.name, &self.lock_keys(), self.held_mode()),
        }
    }

    /// After a failed round: whether to try again at once, without spending an attempt
    /// or waiting. Only a semaphore does, when the round showed other slots free on a
    /// quorum than the ones it guessed ([`Slots::retry_at_once`]).
    pub(crate) fn retry_at_once(&mut self, seen: &Seen, kind: ErrorKind, quorum: usize) -> bool {
        match &mut self.kind {
            Kind::Slots(slots) => {
                slots.retry_at_once(&seen.free, kind == ErrorKind::Contended, quorum)
            }
            _ => false,
        }
    }

    /// Whether a call that acquired after a release notice woke it counts as a hand-off
    /// (docs/observability.md): a lock's yes, a semaphore's permits no.
    pub(crate) fn hands_off(&self) -> bool {
        !matches!(self.kind, Kind::Slots(_))
    }

    /// Whether a waiting call queues to be handed the lock (docs/design.md §17): only the
    /// lock of one resource, with hand-off on or fair.
    pub(crate) fn queues(&self, handoff: bool, fair: bool) -> bool {
        matches!(self.kind, Kind::Mutex) && (handoff || fair)
    }

    /// What one attempt with `value` sends. With `queue` (a waiter id, empty before the
    /// call queued, and whether the acquisition is fair), the lock of one resource is
    /// taken as a queued waiter or fair contender (`Op::AcquireQueued`, docs/design.md
    /// §17).
    pub(crate) fn ask(
        &self,
        value: &Arc<str>,
        plan: &Plan,
        queue: Option<(&Arc<str>, bool)>,
    ) -> Ask {
        let fence = match plan.fencing {
            false => FenceRead::Skip,
            true => FenceRead::Read,
        };
        if let Kind::Slots(slots) = &self.kind {
            return self.ask_slots(slots, value, plan);
        }
        // Several keys are asked for all at once, by the multi-key script.
        let [(resource, key)] = &*self.keys else {
            return self.ask_many(value, plan);
        };
        let (op, holds) = match &self.kind {
            Kind::Read | Kind::Write(_) => {
                let holds: Arc<str> = match self.kind {
                    Kind::Read => scripts::reader_key(key, value).into(),
                    _ => Arc::clone(key),
                };
                let op = Op::RwAcquire {
                    key: Arc::clone(key),
                    value: Arc::clone(value),
                    ttl: plan.ttl,
                    fence,
                    owner: Arc::clone(&plan.owner),
                    mode: match &self.kind {
                        Kind::Write(intent) => RwMode::Write {
                            intent: Arc::clone(&intent.id),
                            intent_ttl: intent.ttl,
                        },
                        _ => RwMode::Read,
                    },
                };
                (op, holds)
            }
            _ => {
                let op = match queue {
                    Some((waiter, fair)) => Op::AcquireQueued {
                        key: Arc::clone(key),
                        value: Arc::clone(value),
                        ttl: plan.ttl,
                        fence,
                        owner: Arc::clone(&plan.owner),
                        waiter: Arc::clone(waiter),
                        fair,
                    },
                    None => Op::AcquireChecked {
                        key: Arc::clone(key),
                        value: Arc::clone(value),
                        ttl: plan.ttl,
                        fence,
                        owner: Arc::clone(&plan.owner),
                    },
                };
                (op, Arc::clone(key))
            }
        };
        let keys = vec![AskKey {
            resource: Arc::clone(resource),
            lock: Arc::clone(key),
            holds,
        }];
        let tokens = match fence {
            FenceRead::Skip => Tokens::Skip,
            // The one-round token: the master's script increments the counter it reads.
            #[cfg(redquorum_mutants)]
            FenceRead::Read if planted(&plan.owner.client).is(Mutant::OneRoundToken) => {
                Tokens::OneRound
            }
            FenceRead::Read => Tokens::WriteBack,
        };
        Ask {
            op: Arc::new(op),
            keys,
            channel: None,
            tokens,
        }
    }

    /// The attempt of several keys: one script per master sets all or none.
    fn ask_many(&self, value: &Arc<str>, plan: &Plan) -> Ask {
        let op = Op::AcquireMany {
            keys: self.keys.iter().map(|(_, key)| Arc::clone(key)).collect(),
            value: Arc::clone(value),
            ttl: plan.ttl,
            fence: match plan.fencing {
                false => FenceRead::Skip,
                true => FenceRead::Read,
            },
            owner: Arc::clone(&plan.owner),
        };
        Ask {
            op: Arc::new(op),
            keys: self
                .keys
                .iter()
                .map(|(resource, key)| AskKey {
                    resource: Arc::clone(resource),
                    lock: Arc::clone(key),
                    holds: Arc::clone(key),
                })
                .collect(),
            channel: None,
            tokens: match plan.fencing {
                false => Tokens::Skip,
                true => Tokens::WriteBack,
            },
        }
    }

    /// The attempt of a semaphore's permits: one script per master sets every wanted slot
    /// or none, after comparing the semaphore's stored limit.
    fn ask_slots(&self, slots: &Slots, value: &Arc<str>, plan: &Plan) -> Ask {
        let set = &slots.set;
        #[cfg_attr(not(redquorum_mutants), allow(unused_mut))]
        let mut keys: Vec<Arc<str>> = slots
            .wanted
            .iter()
            .map(|w| Arc::clone(&set.slots[*w as usize]))
            .collect();
        #[cfg(redquorum_mutants)]
        let counted = planted(&plan.owner.client)
            .is(Mutant::SemaphoreCountPerMaster)
            .then(|| {
                // The broken design's permits are named by their holder, not by a slot.
                keys = scripts::counted_permits(&set.base, value, slots.wanted.len());
            });
        let fencing = plan.fencing;
        #[cfg(redquorum_mutants)]
        let fencing = fencing && counted.is_none();
        let op = Op::AcquirePermits(Box::new(PermitsOp {
            limit_key: Arc::clone(&set.limit_key),
            slots: Arc::clone(&set.slots),
            base: Arc::clone(&set.base),
            wanted: slots.wanted.clone(),
            replace: false,
            value: Arc::clone(value),
            ttl: plan.ttl,
            fence: fencing,
            owner: Arc::clone(&plan.owner),
        }));
        Ask {
            op: Arc::new(op),
            keys: keys
                .into_iter()
                .zip(&slots.wanted)
                .map(|(key, slot)| AskKey {
                    resource: format!("{}#{slot}", set.name).into(),
                    lock: Arc::clone(&key),
                    holds: key,
                })
                .collect(),
            channel: Some(Arc::clone(&set.channel)),
            tokens: match fencing {
                false => Tokens::Skip,
                true => Tokens::WriteBack,
            },
        }
    }

    /// What a round that did not grant showed of the holders.
    pub(crate) fn seen(&self, round: &Round) -> Seen {
        Seen {
            held: match (&self.kind, self.keys.len()) {
                (Kind::Many, n) => round.held_keys(n),
                _ => Vec::new(),
            },
            tickets: round
                .replies
                .iter()
                .flatten()
                .filter_map(|r| match r {
                    Reply::Checked {
                        ticket: Some(t), ..
                    } => Some(*t),
                    _ => None,
                })
                .collect(),
            free: match self.kind {
                Kind::Slots(_) => round
                    .replies
                    .iter()
                    .flatten()
                    .filter_map(|r| match r {
                        Reply::Permits { free, .. } => Some(free.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            },
        }
    }

    /// The release channels to wait on after an attempt found the lock held: those of the
    /// keys `seen` held (all of them when none is known).
    pub(crate) fn channels(&self, seen: &Seen) -> Vec<Arc<str>> {
        if let Kind::Slots(slots) = &self.kind {
            return vec![Arc::clone(&slots.set.channel)];
        }
        let known = seen.held.iter().any(|h| *h);
        self.keys
            .iter()
            .enumerate()
            .filter(|(i, _)| !known || seen.held.get(*i).copied().unwrap_or(false))
            .map(|(_, (_, key))| scripts::release_channel(key).into())
            .collect()
    }

    /// The first token to write back for the `index`-th key of a granted `round`: one
    /// above every counter the granting masters read (docs/design.md §8, §14, I12).
    pub(crate) fn first_token(&self, round: &Round, index: usize) -> u64 {
        let read = match (&self.kind, self.keys.len()) {
            (Kind::Slots(_), _) => round
                .replies
                .iter()
                .flatten()
                .filter_map(|r| match r {
                    Reply::Permits { fences, .. } => fences.get(index).copied().flatten(),
                    _ => None,
                })
                .max(),
            (_, 1) => round.fence_counters().max(),
            _ => round.fence_counters_of(index).max(),
        };
        read.unwrap_or(0).saturating_add(1)
    }

    /// Per master, the counter of the lock's key that the master read with its grant of
    /// `round`, where nobody but this acquisition can raise that counter while the
    /// master holds its value (a mutex, a writer): a conflict there at a token above
    /// it can only be this acquisition's own write, whose answer was lost (docs/design.md
    /// §8). `None` where the answer did not say, and for readers, several keys and
    /// permits.
    pub(crate) fn own_floors(&self, round: &Round) -> Vec<Option<u64>> {
        let exclusive = matches!(self.kind, Kind::Mutex | Kind::Write(_)) && self.keys.len() == 1;
        round
            .replies
            .iter()
            .map(|reply| match reply {
                Some(Reply::Checked {
                    granted: true,
                    fence,
                    ..
                }) if exclusive => *fence,
                _ => None,
            })
            .collect()
    }

    /// The name of `key` in the errors of its write-back: its resource, or the
    /// semaphore's name for one of its slots.
    pub(crate) fn fence_name<'a>(&'a self, key: &'a AskKey) -> &'a Arc<str> {
        match self.kind {
            Kind::Slots(_) => &self.name,
            _ => &key.resource,
        }
    }

    /// The lease's keys for the keys `ask` set, with their tokens. A read lease's key is
    /// its reader key; its release notice goes on the lock's channel, where writers wait
    /// (docs/design.md §16).
    pub(crate) fn lease_keys(&self, ask: &Ask, tokens: Vec<Option<u64>>) -> Vec<LeaseKey> {
        ask.keys
            .iter()
            .zip(tokens)
            .map(|(key, token)| LeaseKey {
                resource: Arc::clone(&key.resource),
                key: Arc::clone(&key.holds),
                channel: match &ask.channel {
                    Some(shared) => Arc::clone(shared),
                    None => scripts::release_channel(&key.lock).into(),
                },
                token: token.map(FencingToken::new),
            })
            .collect()
    }

    /// The detail of a refusal no quorum outvotes, from the masters' own words.
    pub(crate) fn refusal_detail(&self, kind: ErrorKind, detail: String) -> String {
        match (&self.kind, kind) {
            (Kind::Slots(slots), ErrorKind::LimitMismatch) => format!(
                "{detail}; this client gives limit {}: give every client of semaphore {:?} \
                 the stored limit, or change the stored one with `Semaphore::replace_limit` \
                 (it takes effect on each master once no permit is held there)",
                slots.set.limit, self.name
            ),
            _ => detail,
        }
    }

    /// What a round refused for contention says beyond the masters' outcomes.
    pub(crate) fn contended_detail(&self) -> Option<String> {
        match &self.kind {
            Kind::Slots(slots) => Some(format!(
                "{} of its {} permits asked, and fewer were free on a quorum of masters: wait \
                 for holders to release them",
                slots.wanted.len(),
                slots.set.limit
            )),
            _ => None,
        }
    }

    /// How a lease of this target is claimed in the client's registry: its lock keys, in
    /// its mode.
    pub(crate) fn claim(&self, held: &Arc<Held>, keys: &[AskKey]) -> Claim {
        let locks: Vec<Arc<str>> = keys.iter().map(|k| Arc::clone(&k.lock)).collect();
        held.claim(&locks, self.held_mode())
    }
}
