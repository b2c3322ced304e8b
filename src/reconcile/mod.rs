//! The imperative shell around the pure core: observe the providers, apply a
//! plan's steps as written, run the rollout executor (which performs what
//! `rollout::decide` returns, journal first), record the inventory, emit
//! events. See docs/ARCHITECTURE.md.

pub mod apply;
pub mod control;
pub mod events;
pub mod executor;
pub mod fleet;
pub mod forecast;
pub mod gates;
pub mod images;
pub mod observe;
pub mod retry;

pub use apply::{ApplyContext, ApplyOutcome, apply_plan, apply_pool};
pub use events::EventSink;
pub use executor::{Executor, ExecutorError, Tick};
pub use observe::observe;
