//! The loop's machinery: the reconciler and its parts, the work queue and
//! the resync, each pool's decision, the watch of the desired state,
//! `--ha`'s wiring, and systemd. The loop itself (`turns`), the wiring that
//! builds everything and shutdown sit above the rooms, in `daemon`.

pub mod decision;
pub(in crate::daemon) mod ha_wiring;
pub mod queue;
pub mod reconciler;
pub mod resync;
pub mod systemd;
pub mod watch;
