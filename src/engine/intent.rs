//! A waiting writer's intent (docs/design.md §16): set by each attempt while readers hold
//! the lock, cleared on every master when the call ends, with the lock or without it.

use std::sync::Arc;

use super::cleanup::{Late, after_grant, masters_where};
use super::target::{Kind, Target};
use crate::core::{Inner, release_in_background};
use crate::error::MasterOutcome;
use crate::scripts;

/// Clears a writer's intent on every master in the background (compare-and-delete,
/// publishing the release notice so that readers it held back wake) when the call ends
/// without the lock: an error, the wait budget, a dropped future. A call that acquired
/// the lock disarms it: [`clear_intent_after_grant`] takes over.
pub(crate) struct IntentGuard {
    inner: Arc<Inner>,
    key: Arc<str>,
    intent: Arc<str>,
    armed: bool,
}

impl IntentGuard {
    /// The guard of a writer's call on `target`; `None` for every other kind.
    pub(crate) fn of(inner: &Arc<Inner>, target: &Target) -> Option<Self> {
        match (&target.kind, target.first_key()) {
            (Kind::Write(intent), Some(key)) => Some(Self {
                inner: Arc::clone(inner),
                key: Arc::clone(key),
                intent: Arc::clone(&intent.id),
                armed: true,
            }),
            _ => None,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for IntentGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let intent: Arc<str> = scripts::intent_key(&self.key).into();
        let channel: Arc<str> = scripts::release_channel(&self.key).into();
        release_in_background(
            &self.inner,
            self.inner.masters.clone(),
            &[(intent, channel)],
            &self.intent,
        );
    }
}

/// After a writer's grant (docs/design.md §16): the masters that granted deleted the
/// call's intent; every other one may hold it, set by this attempt or an earlier one of
/// the call, and it is cleared there in the background as [`IntentGuard`] clears it
/// (`after_grant` judges a master pending at the decision by its late answer).
pub(crate) fn clear_intent_after_grant(
    inner: &Arc<Inner>,
    key: &Arc<str>,
    intent: &Arc<str>,
    outcomes: &[MasterOutcome],
    late: Option<Late>,
) {
    let keys: [(Arc<str>, Arc<str>); 1] = [(
        scripts::intent_key(key).into(),
        scripts::release_channel(key).into(),
    )];
    let intent = Arc::clone(intent);
    after_grant(inner, outcomes, late, move |inner, left| {
        release_in_background(inner, masters_where(inner, left), &keys, &intent);
    });
}
