//! Keeping the inventory (`model::inventory`): `STATE/inventory.json`,
//! replaced atomically (with the changes since in `inventory.log.jsonl`
//! once it is large, see `snapshot_log`), or a ConfigMap beside the Lease
//! with `--ha`.

use crate::sync::Locked;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::shared::{Record, SharedHome};
use crate::files::snapshot_log::{self, SnapshotLog};
pub use crate::model::inventory::{AppliedState, Inventory, InventoryEntry, Origin};

const FORMAT: u32 = 1;

impl Inventory {
    fn empty() -> Inventory {
        Inventory {
            format: FORMAT,
            ..Inventory::default()
        }
    }

    fn parse(bytes: &[u8], what: &dyn std::fmt::Display) -> anyhow::Result<Inventory> {
        let inv: Inventory = serde_json::from_slice(bytes)
            .map_err(|e| anyhow::anyhow!("inventory {what} is corrupt: {e}"))?;
        anyhow::ensure!(
            inv.format == FORMAT,
            "inventory {what} has format {}, this release reads {FORMAT}",
            inv.format
        );
        Ok(inv)
    }

    fn to_json(&self) -> anyhow::Result<Vec<u8>> {
        let mut copy = self.clone();
        copy.format = FORMAT;
        Ok(serde_json::to_vec_pretty(&copy)?)
    }

    /// Read the inventory; a missing file is an empty inventory, a corrupt one an error.
    pub fn load(path: &Path) -> anyhow::Result<Inventory> {
        Ok(Inventory::load_logged(path)?.0)
    }

    /// The inventory, with where its snapshot and change log stand.
    fn load_logged(path: &Path) -> anyhow::Result<(Inventory, SnapshotLog)> {
        let read = snapshot_log::read(path, 64 * 1024 * 1024, |line| {
            serde_json::from_slice::<Change<serde::de::IgnoredAny>>(line).is_ok()
        })
        .map_err(|e| anyhow::anyhow!("inventory: {e}"))?;
        let Some(bytes) = &read.snapshot else {
            return Ok((Inventory::empty(), read.state));
        };
        let mut inv = Inventory::parse(bytes, &path.display())?;
        for record in &read.records {
            let change: Change<InventoryEntry> = serde_json::from_slice(record).map_err(|e| {
                anyhow::anyhow!("inventory change log of {} is corrupt: {e}", path.display())
            })?;
            match change.entry {
                Some(e) => inv.pools.insert(change.pool, e),
                None => inv.pools.remove(&change.pool),
            };
        }
        Ok((inv, read.state))
    }
}

/// One change in the inventory's log: a pool's entry, whole (`None`: forgotten).
#[derive(serde::Serialize, serde::Deserialize)]
struct Change<E> {
    pool: String,
    entry: Option<E>,
}

enum Home {
    File(PathBuf),
    Shared(Arc<dyn SharedHome>),
}

/// Whose turn it is to save, and (in a file) where snapshot and log stand.
#[derive(Default)]
struct Turn {
    log: Option<SnapshotLog>,
}

/// Where the inventory is kept: `STATE/inventory.json`, or (with `run --ha
/// kubernetes`) a ConfigMap beside the Lease, written only by the lease holder.
pub struct InventoryStore {
    home: Home,
    /// Saves happen one at a time, each of what the inventory holds once it
    /// is its turn, so a slower save never writes an older entry over a newer one.
    order: tokio::sync::Mutex<Turn>,
}

impl InventoryStore {
    pub fn file(path: PathBuf) -> Self {
        InventoryStore {
            home: Home::File(path),
            order: tokio::sync::Mutex::new(Turn::default()),
        }
    }

    pub fn shared(home: Arc<dyn SharedHome>) -> Self {
        InventoryStore {
            home: Home::Shared(home),
            order: tokio::sync::Mutex::new(Turn::default()),
        }
    }

    pub async fn load(&self) -> anyhow::Result<Inventory> {
        match &self.home {
            Home::File(path) => {
                let mut turn = self.order.lock().await;
                let (inv, log) = Inventory::load_logged(path)?;
                turn.log = Some(log);
                Ok(inv)
            }
            Home::Shared(store) if store.shard_count().is_some() => {
                let count = store.shard_count().unwrap_or(1);
                // One ConfigMap per shard, each holding its own pools' entries.
                // One kept by daemons without --shards (or another count) is
                // not read as if it were this layout: its pools would look
                // foreign, or be written twice. Refuse until it is migrated.
                if store.read(Record::SingleInventory).await?.is_some() {
                    anyhow::bail!(
                        "{} holds the inventory of daemons running without --shards: with --shards the inventory is one ConfigMap per shard; stop every daemon and migrate it (or use another --ha-lease) before running sharded",
                        store.describe(Record::SingleInventory)
                    );
                }
                let mut inv = Inventory::empty();
                for (shard, body) in store.inventories().await? {
                    let what = store.describe(Record::Inventory(shard));
                    let part = Inventory::parse(body.as_bytes(), &what)?;
                    for (pool, entry) in part.pools {
                        if store.shard_of(&pool) == shard {
                            inv.pools.insert(pool, entry);
                        } else {
                            anyhow::bail!(
                                "{what} holds pool {pool:?}, which is not of its shard with --shards {}: it was written with another shard count; stop every daemon and migrate the inventory before changing --shards",
                                count
                            );
                        }
                    }
                }
                Ok(inv)
            }
            Home::Shared(store) => match store.read(Record::Inventory(0)).await? {
                Some(body) => {
                    Inventory::parse(body.as_bytes(), &store.describe(Record::Inventory(0)))
                }
                None => Ok(Inventory::empty()),
            },
        }
    }

    /// Save what `inventory` holds now for `pool`, the entry just changed:
    /// in a file, one record (or the whole inventory, when it is small or
    /// its log has grown as large); in the cluster, the whole ConfigMap.
    pub async fn save(&self, inventory: &Mutex<Inventory>, pool: &str) -> anyhow::Result<()> {
        let mut turn = self.order.lock().await;
        match &self.home {
            Home::File(path) => {
                if turn.log.is_none() {
                    // Saved before it was ever loaded here: learn where the files stand.
                    turn.log = Some(Inventory::load_logged(path)?.1);
                }
                let log = turn.log.as_mut().expect("set above");
                // What to write is taken under the inventory's lock; the
                // writing (and its sync) happens after it is released.
                let (record, snapshot) = {
                    let inventory = inventory.locked();
                    let record = serde_json::to_vec(&Change {
                        pool: pool.to_string(),
                        entry: inventory.pools.get(pool),
                    })?;
                    let snapshot = if log.compacts_after(record.len()) {
                        Some(inventory.to_json()?)
                    } else {
                        None
                    };
                    (record, snapshot)
                };
                log.persist(path, &record, || snapshot.expect("taken when it compacts"))
                    .map_err(|e| anyhow::anyhow!("writing inventory {}: {e}", path.display()))
            }
            Home::Shared(store) => {
                // Sharded, only the pool's shard's part: the other shards are
                // other daemons' to write.
                let shard = store.shard_of(pool);
                let snapshot = {
                    let inventory = inventory.locked();
                    if store.shard_count().is_some() {
                        Inventory {
                            format: FORMAT,
                            pools: inventory
                                .pools
                                .iter()
                                .filter(|(p, _)| store.shard_of(p) == shard)
                                .map(|(p, e)| (p.clone(), e.clone()))
                                .collect(),
                        }
                    } else {
                        inventory.clone()
                    }
                };
                let body = String::from_utf8(snapshot.to_json()?).expect("JSON is UTF-8");
                store.write(Record::Inventory(shard), body).await
            }
        }
    }
}
