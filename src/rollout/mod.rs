//! The rollout core: PURE decision code. Budget resolution, the journal's
//! content (`RolloutState`), and the step function [`decide`] that turns a
//! snapshot (journal state, observed nodes, drain progress, the disruption
//! gate, the outcomes of the last actions, now) into the next actions. Nothing
//! here does I/O or reads a clock: the shell (`reconcile::executor`) performs
//! the actions, journals them first, and feeds their outcomes back. See
//! docs/ARCHITECTURE.md.

pub mod budget;
pub mod change;
pub mod control;
pub mod decide;
pub mod index;
pub mod order;
pub mod phase;
pub mod state;

pub use budget::{Budget, Strategy};
pub use decide::{Action, DrainProgress, Inputs, Outcome, absorb, begin, begin_rollback, decide};
pub use index::PoolIndex;
pub use state::{Mark, RolloutState, Settings, Status};
