//! The suites against a real Kubernetes control plane (kine, kube-apiserver
//! and kwok, started per test by `support::kube`), in one binary: drains
//! through the Eviction API, `apply` rolling a pool with its nodes registered,
//! `run --ha kubernetes` handing a Lease over, and sharded daemons. They need
//! `POOLWRIGHT_TEST_BIN` (scripts/test-components.sh builds the components)
//! and fail, saying why, when a component cannot start.

#[path = "../support/mod.rs"]
mod support;

mod drain;
mod ha;
mod rollout;
mod shards;
mod shared_images;
