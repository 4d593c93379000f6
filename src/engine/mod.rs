//! The acquire engine (docs/design.md §3, §6, §17): what every lock kind's acquire call
//! shares beneath its facade.

pub(crate) mod failure;
mod plan;

pub use plan::AcquireOptions;
pub(crate) use plan::Plan;
