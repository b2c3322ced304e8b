//! `poolwright run --ha kubernetes`: several daemons, one acting on each pool.
//!
//! The leader holds a coordination.k8s.io Lease ([`lease`]); the rollout
//! journals and the inventory live in ConfigMaps beside it ([`store`]), so
//! the daemon that takes the lease over resumes where the last leader
//! stopped. With `--shards S` there is one Lease per shard instead, and every
//! daemon holds its share of them ([`shards`]): each renews a member Lease
//! ([`members`]), and every retry period takes free shards up to its share or
//! gives back those above it, a shard at a time, once no step of its pools is
//! in flight ([`election`]).
//!
//! The daemon wires these to its status, metrics and workers; nothing here
//! reaches into the daemon.

pub mod election;
pub mod lease;
pub mod members;
pub mod shards;
mod status;
pub mod store;

pub use election::{Election, Ha, HaOptions, Leading, Observer, connect, spawn};
pub use status::{HaStatus, ShardHolder, ShardsStatus};
