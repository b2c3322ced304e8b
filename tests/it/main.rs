//! The integration tests that need no external component, in one binary (one
//! link, one set of helpers): documents and loading, plans, the CLI, the
//! simulator, the rollout executor on a virtual clock and its properties, the
//! daemon and crash-resume through the real binary, systemd units, and the
//! layering of the code itself. The suites against real components (moto, the
//! reference plug-in, a Kubernetes control plane) are binaries of their own.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod conventions;
mod crash_resume;
mod daemon;
mod daemon_fleet;
mod disruption_override;
mod docs;
mod fleet_roll_back;
mod fleet_rollouts;
mod forecast;
mod forecast_honesty;
mod git_remote;
mod hardening;
mod image_channels;
mod invalid_corpus;
mod layering;
mod loader_never_panics;
mod loading;
mod look_cost;
mod plan_apply_cli;
mod plan_properties;
mod plan_snapshots;
mod policy_properties;
mod policy_windows;
mod rollout_behaviour;
mod rollout_examples;
mod rollout_properties;
mod second_hour;
mod simulator;
mod systemd_unit;
mod yaml_suite;
