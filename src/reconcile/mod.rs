//! The imperative shell around the pure planner: observe the providers, apply a
//! plan's steps, record the inventory, emit events.

pub mod apply;
pub mod events;
pub mod observe;
pub(crate) mod retry;
pub mod stop;

pub use apply::{ApplyContext, ApplyOutcome, apply_plan, apply_pool};
pub use events::{Counts, Event, EventSink};
pub use observe::observe;
pub use stop::Stop;
