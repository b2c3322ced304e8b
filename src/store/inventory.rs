//! Keeping the inventory (`model::inventory`): `STATE/inventory.json`,
//! replaced atomically, or a ConfigMap beside the Lease with `--ha`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::atomic_write;
use crate::cluster::store::ClusterStore;
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
        match crate::files::read_regular(path, 64 * 1024 * 1024) {
            Ok(bytes) => Inventory::parse(&bytes, &path.display()),
            Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Inventory::empty())
            }
            Err(e) => anyhow::bail!("reading inventory {}: {e}", path.display()),
        }
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let bytes = self.to_json()?;
        atomic_write(path, &bytes)
            .map_err(|e| anyhow::anyhow!("writing inventory {}: {e}", path.display()))
    }
}

enum Home {
    File(PathBuf),
    Cluster(Arc<ClusterStore>),
}

/// Where the inventory is kept: `STATE/inventory.json`, or (with `run --ha
/// kubernetes`) a ConfigMap beside the Lease, written only by the lease holder.
pub struct InventoryStore {
    home: Home,
    /// Saves happen one at a time, each of a copy taken once it is its turn,
    /// so a slower save never writes an older inventory over a newer one.
    order: tokio::sync::Mutex<()>,
}

impl InventoryStore {
    pub fn file(path: PathBuf) -> Self {
        InventoryStore {
            home: Home::File(path),
            order: tokio::sync::Mutex::new(()),
        }
    }

    pub fn cluster(store: Arc<ClusterStore>) -> Self {
        InventoryStore {
            home: Home::Cluster(store),
            order: tokio::sync::Mutex::new(()),
        }
    }

    pub async fn load(&self) -> anyhow::Result<Inventory> {
        match &self.home {
            Home::File(path) => Inventory::load(path),
            Home::Cluster(store) => {
                let name = store.inventory_name();
                match store.read(&name).await? {
                    Some(body) => Inventory::parse(body.as_bytes(), &store.describe(&name)),
                    None => Ok(Inventory::empty()),
                }
            }
        }
    }

    /// Save what `inventory` holds now.
    pub async fn save(&self, inventory: &Mutex<Inventory>) -> anyhow::Result<()> {
        let _turn = self.order.lock().await;
        let snapshot = inventory.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match &self.home {
            Home::File(path) => snapshot.save(path),
            Home::Cluster(store) => {
                let body = String::from_utf8(snapshot.to_json()?).expect("JSON is UTF-8");
                store.write(&store.inventory_name(), None, body).await
            }
        }
    }
}
