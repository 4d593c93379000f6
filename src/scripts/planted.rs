//! The planted bugs' scripts (`--cfg redquorum_mutants`): each is a product script with one
//! condition changed, derived here so that the product scripts carry no mutant mode. The
//! codecs pick them where the client plants the bug (`Context::pick`).

use std::sync::LazyLock;

use redis::Script;

use super::sources;
use crate::mutants::{Mutant, Planted};

/// A planted script: the script a codec sends, and its source, which a master loads with
/// the product's.
#[derive(Debug)]
pub(super) struct Variant {
    pub(super) script: Script,
    source: String,
}

impl Variant {
    /// `source` with `from` replaced by `to`; a script that no longer contains `from`
    /// gives an empty variant, which a test refuses.
    fn of(source: &str, from: &str, to: &str) -> Self {
        let source = if source.contains(from) {
            source.replacen(from, to, 1)
        } else {
            String::new()
        };
        Self {
            script: Script::new(&source),
            source,
        }
    }
}

/// `acquire.lua` whose grant increments the fence counter where it reads it: the
/// one-round token of `Mutant::OneRoundToken`.
pub(super) static ACQUIRE_ONE_ROUND_TOKEN: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::ACQUIRE_LUA,
        "    return {1, epoch, redis.call('GET', KEYS[3])}",
        "    return {1, epoch, tostring(redis.call('INCR', KEYS[3]))}",
    )
});

/// `fence.lua` accepting a counter equal to the token: the max-write of
/// `Mutant::WritebackNoGuard`.
pub(super) static FENCE_MAX_WRITE: LazyLock<Variant> =
    LazyLock::new(|| Variant::of(sources::FENCE_LUA, "if c < t then", "if c <= t then"));

/// `extend.lua` setting a missing key again with the caller's value, as extensions once
/// did: `Mutant::ExtendRecreates`, which undoes a force-unlock, and the counted re-entry
/// round of `Mutant::ReentryCounter` (`Op::ExtendRecreating`).
pub(super) static EXTEND_RECREATES: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::EXTEND_LUA,
        "  return {0, epoch, false}",
        "  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4]) return {1, epoch, false}",
    )
});

/// `acquire_many.lua` granting each free key on its own and answering granted if it
/// granted any: the partial vote of `Mutant::ManyPartialVote`.
pub(super) static ACQUIRE_MANY_PARTIAL: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::ACQUIRE_MANY_LUA,
        "  if all and pttls[i] == -3 then",
        "  if pttls[i] == -3 then",
    )
});

/// `rw_acquire.lua` granting a reader while a writer's intent is live:
/// `Mutant::ReaderIgnoresIntent`.
pub(super) static RW_ACQUIRE_IGNORES_INTENT: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::RW_ACQUIRE_LUA,
        "  elseif intent > 0 then",
        "  elseif false then",
    )
});

/// The line of `live_head` (`queue.lua`, joined in front of every script that keeps a
/// queue) that checks a waiter's liveness key, and its planted replacement: the first
/// member is the head, live or not, and nobody is pruned (`Mutant::HandoffIgnoresLiveness`).
const LIVENESS_CHECK: &str = "      if live then";
const LIVENESS_IGNORED: &str = "      if true then";

/// `source` with the liveness check of its `live_head` ignored.
fn ignoring_liveness(source: &str) -> Variant {
    Variant::of(source, LIVENESS_CHECK, LIVENESS_IGNORED)
}

/// `release.lua` handing the lock to the queue's first member, live or not.
pub(super) static RELEASE_IGNORES_LIVENESS: LazyLock<Variant> =
    LazyLock::new(|| ignoring_liveness(sources::RELEASE_LUA));

/// `dequeue.lua` handing the lock to the queue's first member, live or not.
pub(super) static DEQUEUE_IGNORES_LIVENESS: LazyLock<Variant> =
    LazyLock::new(|| ignoring_liveness(sources::DEQUEUE_LUA));

/// `enqueue.lua` taking the queue's first member as its head, live or not.
pub(super) static ENQUEUE_IGNORES_LIVENESS: LazyLock<Variant> =
    LazyLock::new(|| ignoring_liveness(sources::ENQUEUE_LUA));

/// `acquire_queued.lua` taking the queue's first member as its head, live or not.
pub(super) static ACQUIRE_QUEUED_IGNORES_LIVENESS: LazyLock<Variant> =
    LazyLock::new(|| ignoring_liveness(sources::ACQUIRE_QUEUED_LUA));

/// `acquire_queued.lua` keeping a handed key's expiry (`KEEPTTL`) when it confirms:
/// `Mutant::ConfirmKeepsHandoffExpiry`.
pub(super) static ACQUIRE_QUEUED_KEEPS_EXPIRY: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::ACQUIRE_QUEUED_LUA,
        "  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])",
        "  if current then redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL') else \
         redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4]) end",
    )
});

/// `enqueue.lua` scoring a fair waiter by its arrival on the master (the master's own
/// ticket counter, once per waiter) instead of by its client's ticket:
/// `Mutant::FairByArrival`.
pub(super) static ENQUEUE_BY_ARRIVAL: LazyLock<Variant> = LazyLock::new(|| {
    Variant::of(
        sources::ENQUEUE_LUA,
        "local score, strict = ARGV[4], ARGV[5]",
        "local score, strict = ARGV[4], ARGV[5] if ARGV[8] == '1' then score, strict = \
         redis.call('ZSCORE', KEYS[3], ARGV[3]) or tostring(redis.call('INCR', KEYS[4])), \
         '0' end",
    )
});

/// Every planted script, with the product script it changes and the bug that sends it.
fn variants() -> [(&'static Variant, &'static str, Mutant); 11] {
    [
        (
            &ACQUIRE_ONE_ROUND_TOKEN,
            sources::ACQUIRE_LUA,
            Mutant::OneRoundToken,
        ),
        (
            &FENCE_MAX_WRITE,
            sources::FENCE_LUA,
            Mutant::WritebackNoGuard,
        ),
        (
            &EXTEND_RECREATES,
            sources::EXTEND_LUA,
            Mutant::ExtendRecreates,
        ),
        (
            &ACQUIRE_MANY_PARTIAL,
            sources::ACQUIRE_MANY_LUA,
            Mutant::ManyPartialVote,
        ),
        (
            &RW_ACQUIRE_IGNORES_INTENT,
            sources::RW_ACQUIRE_LUA,
            Mutant::ReaderIgnoresIntent,
        ),
        (
            &RELEASE_IGNORES_LIVENESS,
            sources::RELEASE_LUA,
            Mutant::HandoffIgnoresLiveness,
        ),
        (
            &DEQUEUE_IGNORES_LIVENESS,
            sources::DEQUEUE_LUA,
            Mutant::HandoffIgnoresLiveness,
        ),
        (
            &ENQUEUE_IGNORES_LIVENESS,
            sources::ENQUEUE_LUA,
            Mutant::HandoffIgnoresLiveness,
        ),
        (
            &ACQUIRE_QUEUED_IGNORES_LIVENESS,
            sources::ACQUIRE_QUEUED_LUA,
            Mutant::HandoffIgnoresLiveness,
        ),
        (
            &ACQUIRE_QUEUED_KEEPS_EXPIRY,
            sources::ACQUIRE_QUEUED_LUA,
            Mutant::ConfirmKeepsHandoffExpiry,
        ),
        (
            &ENQUEUE_BY_ARRIVAL,
            sources::ENQUEUE_LUA,
            Mutant::FairByArrival,
        ),
    ]
}

/// The planted scripts that a client planting `planted` sends, which its masters load
/// with the product's: none for a client that plants no script bug.
pub(super) fn sources(planted: &Planted) -> Vec<&'static str> {
    let mut planted_sources: Vec<&'static str> = variants()
        .into_iter()
        .filter(|(_, _, mutant)| planted.is(*mutant))
        .map(|(variant, _, _)| variant.source.as_str())
        .collect();
    // The counted re-entry's round sends the recreating extension.
    if planted.is(Mutant::ReentryCounter) {
        planted_sources.push(EXTEND_RECREATES.source.as_str());
    }
    if planted.is(Mutant::SemaphoreCountPerMaster) {
        planted_sources.push(sources::SEMAPHORE_COUNT_LUA);
    }
    planted_sources
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_planted_script_differs_from_its_product_script_in_one_place() {
        for (planted, product, _) in super::variants() {
            let planted = &planted.source;
            assert!(
                !planted.is_empty(),
                "the product script changed: update the variant"
            );
            assert_ne!(planted, product);
            let differing = planted.lines().zip(product.lines()).filter(|(a, b)| a != b);
            assert_eq!(differing.count(), 1);
        }
    }
}
