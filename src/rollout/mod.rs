//! The shared rollout executor. Every node replacement, for every provider, goes
//! through here.

pub mod budget;

pub use budget::{Budget, Strategy};
