//! Who is alive among the sharded daemons: each renews a member Lease of its
//! own (`LEASE-member-ID`, labelled `poolwright.io/member-of=LEASE`) every
//! retry period, and lists the others'. A member is live while its lease has
//! been renewed within its duration, judged (as the election judges expiry)
//! by when this process first saw the latest renewal, so clock skew between
//! hosts does not matter. A daemon stopping deletes its own.
//!
//! Each member lease also carries the daemon's shard count: daemons that
//! disagree on `--shards` would put a pool in two shards, so none of them
//! takes a shard while they disagree.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use super::lease::{Record, Sighting, sight};
use crate::clock::Clock;

const MEMBER_OF: &str = "poolwright.io/member-of";
const SHARDS: &str = "poolwright.io/shards";

/// A live daemon, and the shard count it runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub identity: String,
    pub shards: Option<u32>,
}

pub struct Membership {
    api: Api<Lease>,
    base: String,
    name: String,
    identity: String,
    duration: std::time::Duration,
    shards: u32,
    clock: Arc<dyn Clock>,
    seen: HashMap<String, Sighting>,
}

/// A Lease name for `identity` (any text): its letters and digits, and a
/// 64-bit hash (FNV-1a) of the whole, so two identities do not share one.
fn member_lease(base: &str, identity: &str) -> String {
    let slug: String = identity
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .take(40)
        .collect();
    let slug = slug.trim_matches('-');
    let hash = super::shards::fnv1a64(identity.as_bytes());
    if slug.is_empty() {
        format!("{base}-member-{hash:016x}")
    } else {
        format!("{base}-member-{slug}-{hash:016x}")
    }
}

impl Membership {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        base: &str,
        identity: &str,
        duration: std::time::Duration,
        shards: u32,
        clock: Arc<dyn Clock>,
    ) -> Membership {
        Membership {
            api: Api::namespaced(client, namespace),
            base: base.to_string(),
            name: member_lease(base, identity),
            identity: identity.to_string(),
            duration,
            shards,
            clock,
            seen: HashMap::new(),
        }
    }

    /// Create or renew this daemon's member lease.
    pub async fn renew(&mut self) -> anyhow::Result<()> {
        let now = self.clock.now();
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| anyhow::anyhow!("Lease {}: get: {e}", self.name))?;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(MEMBER_OF.to_string(), self.base.clone())])),
                annotations: Some(BTreeMap::from([(
                    SHARDS.to_string(),
                    self.shards.to_string(),
                )])),
                resource_version: current
                    .as_ref()
                    .and_then(|l| l.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        let written = match current {
            None => self.api.create(&PostParams::default(), &lease).await,
            Some(_) => {
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        written
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("Lease {}: write: {e}", self.name))
    }

    /// The live members, this daemon included (it counts itself even when
    /// its own lease could not be written: it is running).
    pub async fn live(&mut self) -> anyhow::Result<Vec<Member>> {
        let now = self.clock.now();
        let list = self
            .api
            .list(&ListParams::default().labels(&format!("{MEMBER_OF}={}", self.base)))
            .await
            .map_err(|e| anyhow::anyhow!("listing member Leases {MEMBER_OF}={}: {e}", self.base))?;
        let mut seen = HashMap::new();
        let mut live = BTreeMap::new();
        let mut stale = Vec::new();
        for l in list.items {
            let Some(name) = l.metadata.name.clone() else {
                continue;
            };
            let spec = l.spec.clone().unwrap_or_default();
            let record = Record {
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                duration: SignedDuration::from_secs(i64::from(
                    spec.lease_duration_seconds.unwrap_or(15),
                )),
                renew_time: spec.renew_time.map(|t| t.0),
                transitions: 0,
            };
            let s = sight(self.seen.remove(&name), &record, now);
            if let Some(holder) = &record.holder
                && is_live(&s, now)
            {
                let shards = l
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(SHARDS))
                    .and_then(|v| v.parse().ok());
                live.insert(
                    holder.clone(),
                    Member {
                        identity: holder.clone(),
                        shards,
                    },
                );
            }
            // A daemon killed without a clean stop leaves its member lease
            // behind (and a restarted one has a new identity): once it has
            // been unrenewed for long, it is removed, so they do not pile up.
            if name != self.name
                && s.at
                    .saturating_add(s.record.duration * 20)
                    .is_ok_and(|end| now > end)
            {
                stale.push(name.clone());
            }
            seen.insert(name, s);
        }
        self.seen = seen;
        for name in stale {
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!("Lease {name}: removed, unrenewed for 20 lease durations"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => tracing::warn!("Lease {name}: could not remove it: {e}"),
            }
        }
        live.entry(self.identity.clone()).or_insert(Member {
            identity: self.identity.clone(),
            shards: Some(self.shards),
        });
        Ok(live.into_values().collect())
    }

    /// When the first other member's lease expires (if it stops renewing),
    /// as of the last listing.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.seen
            .values()
            .filter(|s| {
                s.record
                    .holder
                    .as_deref()
                    .is_some_and(|h| h != self.identity)
            })
            .filter_map(|s| s.at.saturating_add(s.record.duration).ok())
            .min()
    }

    /// The live sharded daemons other than this one (a daemon without
    /// `--shards` asks this: while any exist, it must not lead).
    pub async fn others(&mut self) -> anyhow::Result<Vec<Member>> {
        let me = self.identity.clone();
        Ok(self
            .live()
            .await?
            .into_iter()
            .filter(|m| m.identity != me)
            .collect())
    }

    /// Delete this daemon's member lease (on a clean stop), so the others
    /// rebalance at once rather than after its duration.
    pub async fn leave(&mut self) {
        match self.api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => tracing::warn!("Lease {}: could not delete it: {e}", self.name),
        }
    }
}

fn is_live(s: &Sighting, now: Timestamp) -> bool {
    s.at.saturating_add(s.record.duration)
        .is_ok_and(|end| now < end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lease_names_are_valid_and_distinct() {
        let a = member_lease("poolwright", "Bastion_1.example.com-4242");
        assert!(
            a.starts_with("poolwright-member-bastion-1-example-com-4242-"),
            "{a}"
        );
        assert!(
            a.len() <= 253
                && a.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(member_lease("p", "a.b"), member_lease("p", "a-b"));
        assert!(member_lease("p", "///").starts_with("p-member-"));
    }
}
