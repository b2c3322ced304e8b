//! What the election says of itself: the role of this daemon, and (sharded)
//! who holds which shard. The daemon shows it in its status.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaStatus {
    /// `NAMESPACE/NAME` of the coordination.k8s.io Lease.
    pub lease: String,
    pub identity: String,
    /// Only the leader acts; a standby plans and reports.
    pub leader: bool,
    /// The lease holder as last read (this daemon, another, or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// One sentence: leader since when, or who leads and when this one may take over.
    pub role: String,
    /// With `--shards`: who holds which shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardsStatus {
    pub count: u32,
    /// How a pool's shard is found: `fnv1a64(pool name) mod count`.
    pub hash: String,
    /// The shards this daemon holds (acts on).
    pub held: Vec<u32>,
    /// The live daemons (member leases renewed), this one included.
    pub members: Vec<String>,
    /// Each shard's lease and holder as last read.
    pub shards: Vec<ShardHolder>,
    /// Why this daemon takes no shard (daemons disagree on --shards), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardHolder {
    pub shard: u32,
    pub lease: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Being handed over: no new step starts; released once none is in flight.
    #[serde(default)]
    pub releasing: bool,
}
