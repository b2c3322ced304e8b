//! Helpers every test binary shares (one convention: `mod support;` at the
//! binary's root, `use support::NAME;` or `use crate::support::NAME;`).
//! Each binary uses some of them.
#![allow(dead_code, unused_imports)]

pub mod browser;
pub mod daemon;
pub mod fault_proxy;
pub mod git_servers;
pub mod jsonl;
pub mod kube;
pub mod moto;
pub mod plugin;
pub mod prometheus;
pub mod rollout_sim;
pub mod sim_images;
pub mod tls;
pub mod world;
