//! The acquire engine (docs/design.md §3, §6, §17): what every lock kind's acquire call
//! shares beneath its facade.

pub(crate) mod attempt;
pub(crate) mod failure;
mod fence;
pub(crate) mod intent;
mod plan;
pub(crate) mod slots;
pub(crate) mod target;

pub use plan::AcquireOptions;
pub(crate) use plan::Plan;
