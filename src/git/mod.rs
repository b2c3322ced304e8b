//! Git, read with gix and never by shelling out to `git`: the provenance of a
//! work tree (`rev`), the desired-state files of a committed tree (`tree`),
//! the daemon's own clone of a config repo fetched from a remote (`mirror`,
//! each fetch in a child process whose memory is capped: `child` runs it,
//! `isolated` is its side, `pack` reads what a pack declares), and
//! the push webhooks of the forges that tell it to fetch (`hook`).

pub mod child;
pub mod hook;
pub mod isolated;
pub mod mirror;
pub mod pack;
pub mod rev;
pub mod tree;
pub mod verify;
