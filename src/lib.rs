//! poolwright: reconcile node pools from a directory of desired-state YAML.
//!
//! The binary is a thin clap front end over this library; see `DESIGN.md` in the
//! project's shared folder for the map of modules.

pub mod cli;
pub mod spec;
