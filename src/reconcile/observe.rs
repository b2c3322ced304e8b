//! Observing every pool the plan needs, in as few provider calls as possible.

use std::collections::{BTreeMap, BTreeSet};

use super::retry::with_retry;
use crate::plan::Observed;
use crate::provider::Providers;
use crate::spec::Config;
use crate::store::Inventory;

/// Ask each provider about the pools in the files and in the inventory, batched.
pub async fn observe(config: &Config, inventory: &Inventory, providers: &Providers) -> Observed {
    let mut wanted: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (name, e) in &config.pools {
        wanted
            .entry(e.doc.spec.provider_ref.as_str())
            .or_default()
            .insert(name.clone());
    }
    for (name, e) in &inventory.pools {
        wanted
            .entry(e.provider.as_str())
            .or_default()
            .insert(name.clone());
    }
    let mut observed = Observed::default();
    for (provider, names) in wanted {
        if let Some(err) = providers.failed.get(provider) {
            observed
                .unreachable
                .insert(provider.to_string(), err.clone());
            continue;
        }
        let Some(p) = providers.get(provider) else {
            continue; // a provider no longer in the files: its pools are left alone
        };
        let names: Vec<String> = names.into_iter().collect();
        let batch = p.capabilities().describe_batch.max(1);
        for chunk in names.chunks(batch) {
            match with_retry(|| p.describe_pools(chunk)).await {
                Ok(pools) => {
                    for pool in pools {
                        observed.pools.insert(pool.name.clone(), pool);
                    }
                }
                Err(e) => {
                    observed
                        .unreachable
                        .insert(provider.to_string(), e.to_string());
                    break;
                }
            }
        }
    }
    observed
}
