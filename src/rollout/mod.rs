//! The shared rollout executor. Every node replacement, for every provider, goes
//! through here: [`decide`] is the pure step function, [`driver`] performs its
//! actions with the journal written first.

pub mod budget;
pub mod control;
pub mod decide;
pub mod drain;
pub mod driver;
pub mod journal;
pub mod state;

pub use budget::{Budget, Strategy};
pub use decide::{Action, DrainProgress, Inputs, begin, decide};
pub use drain::{Drainer, NoDrain, SimDrainer};
pub use driver::{Rollout, Tick};
pub use journal::Journal;
pub use state::{Mark, RolloutState, Settings, Status};
