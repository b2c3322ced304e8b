//! A change across pools: one reload of the desired state that rolls pools a
//! `FleetRollout` governs, staged. Pure, like `rollout::decide`: no network,
//! no disk, no clock.
//!
//! - [`change`]: what a change remembers (its journal's content): its
//!   stages, the pools it admitted and how they ended, its gates' readings,
//!   a halt or a pause.
//! - [`rules`]: the FleetRollout's settings resolved once against its stage
//!   assignment (`spec::staging`).
//! - [`decide`]: the stage and halt decision, given what is known of each
//!   pool (`PoolFact`, from its latest plan) and of each gate.
//! - [`verdict`]: what the change says of one pool's roll (go, hold and why,
//!   or roll back), and the admission that takes a concurrency slot.
//! - [`view`]: what the planner is given of each FleetRollout.
//! - [`forecast`]: a change laid out in time from each pool's forecast.
//!
//! The shell (`reconcile::fleet`) journals the change before acting, reads
//! the gates, and tells the daemon which pools to look at again.

pub mod change;
pub mod decide;
pub mod forecast;
pub mod rules;
pub mod verdict;
pub mod view;

pub use change::{
    Change, ChangeStatus, FleetState, GateOutcome, GateRecord, PoolRecord, Reading, StageRecord,
};
pub use decide::{Decision, FleetNote, PoolFact, decide_change};
pub use rules::Rules;
pub use verdict::{StageWait, Verdict, admit, verdict};
pub use view::FleetView;
