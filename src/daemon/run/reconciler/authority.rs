//! Which pools this daemon may act on: every pool without `--ha`; with it,
//! the pools of the leases it holds (`ha::Leading`, published by the
//! election), and why not for the others.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ha::Leading;
use crate::ha::shards::Shards;

pub(super) struct Authority {
    /// Under `--ha`: the leases, and which of them this daemon holds.
    shards: Option<Arc<Shards>>,
    leading: Leading,
    /// The inventory must be read again before acting: under `--ha`, another
    /// daemon may have written it (a standby, or a daemon holding some shards,
    /// re-reads it every batch; a new leader once, before its first step).
    inventory_stale: bool,
}

/// What a change of leadership means for this daemon's pools.
pub(super) struct Handover {
    /// Shards it no longer holds, or is handing over: their workers stop.
    pub stop: BTreeSet<u32>,
    /// Shards that changed hands (or holders): their pools are looked at again.
    pub moved: BTreeSet<u32>,
    /// This daemon's own role changed: what it observed before is stale.
    pub own: bool,
    pub gained: BTreeSet<u32>,
    pub lost: BTreeSet<u32>,
}

impl Authority {
    /// The inventory must be read again before this daemon acts.
    pub fn inventory_stale(&self) -> bool {
        self.inventory_stale
    }

    /// The inventory was just read: it stays fresh unless another daemon
    /// may write it (this one does not lead every pool).
    pub fn inventory_read(&mut self) {
        self.inventory_stale = !self.leads_all();
    }

    pub fn new(shards: Option<Arc<Shards>>) -> Authority {
        Authority {
            inventory_stale: shards.is_some(),
            shards,
            leading: Leading::waiting(),
        }
    }

    pub fn shards(&self) -> Option<&Arc<Shards>> {
        self.shards.as_ref()
    }

    pub fn is_sharded(&self) -> bool {
        self.shards.as_ref().is_some_and(|s| s.is_sharded())
    }

    /// A worker of `pool` started (`true`) or ended: a shard is handed over
    /// only once none of its workers runs.
    pub fn worker(&self, pool: &str, running: bool) {
        if let Some(s) = &self.shards {
            s.worker(pool, running);
        }
    }

    /// Take the election's latest word; `None` when nothing changed for
    /// this daemon's pools (no `--ha`, or no shard moved).
    pub fn set(&mut self, now: Leading) -> Option<Handover> {
        let old = std::mem::replace(&mut self.leading, now);
        let shards = self.shards.as_ref()?;
        let now = &self.leading;
        let lost: BTreeSet<u32> = old.held.difference(&now.held).copied().collect();
        let gained: BTreeSet<u32> = now.held.difference(&old.held).copied().collect();
        let stop = lost.union(&now.releasing).copied().collect();
        let moved: BTreeSet<u32> = (0..shards.count())
            .filter(|i| {
                lost.contains(i)
                    || gained.contains(i)
                    || old.holders.get(*i as usize) != now.holders.get(*i as usize)
                    || old.releasing.contains(i) != now.releasing.contains(i)
            })
            .collect();
        let own = !lost.is_empty() || !gained.is_empty() || old.releasing != now.releasing;
        if own {
            self.inventory_stale = true;
        }
        Some(Handover {
            stop,
            moved,
            own,
            gained,
            lost,
        })
    }

    pub fn note(&self) -> &str {
        &self.leading.note
    }

    /// Whether this daemon may act on `pool`: always without `--ha`; with
    /// it, while it holds the pool's lease.
    pub fn leads(&self, pool: &str) -> bool {
        match &self.shards {
            None => true,
            Some(s) => self.leading.held.contains(&s.of(pool)),
        }
    }

    /// Whether it acts on every pool (no `--ha`, or the leader lease held).
    pub fn leads_all(&self) -> bool {
        match &self.shards {
            None => true,
            Some(s) => !s.is_sharded() && self.leading.leader(),
        }
    }

    /// Whether it holds shard `shard`'s lease (sharded), or leads (not).
    pub fn leads_shard(&self, shard: u32) -> bool {
        match &self.shards {
            None => shard == 0,
            Some(_) => self.leading.held.contains(&shard),
        }
    }

    /// Whether it holds any lease (or needs none): it may write what every
    /// daemon shares.
    pub fn holds_any(&self) -> bool {
        self.shards.is_none() || self.leading.leader()
    }

    /// Why this daemon does not act on `pool`, for its message.
    pub fn standby_note(&self, pool: &str) -> String {
        let Some(shards) = self.shards.as_ref().filter(|s| s.is_sharded()) else {
            return self.leading.note.clone();
        };
        let shard = shards.of(pool);
        match self.leading.holders.get(shard as usize).cloned().flatten() {
            _ if self.leading.releasing.contains(&shard) => format!(
                "shard {shard} is being handed to another daemon: steps in flight finish, none starts"
            ),
            Some(holder) => format!(
                "shard {shard}'s leader is daemon {holder} (`poolwright status` there shows its progress)"
            ),
            None => format!(
                "shard {shard} is held by no daemon yet: {}",
                self.leading.note
            ),
        }
    }
}
