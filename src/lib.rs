//! poolwright: reconcile node pools from a directory of desired-state YAML.
//!
//! The binary is a thin clap front end over this library; `docs/ARCHITECTURE.md`
//! is the map of its modules and layers.

pub mod cli;
pub mod clock;
pub mod daemon;
pub mod desired_dir;
pub mod files;
pub mod fleet;
pub mod git;
pub mod ha;
pub mod images;
pub mod kube;
pub mod model;
pub mod plan;
pub mod policy;
pub mod provider;
pub mod reconcile;
pub mod rollout;
pub mod secrets;
pub mod spec;
pub mod store;
pub mod sync;
