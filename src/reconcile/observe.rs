//! Observing every pool the plan needs, in as few provider calls as possible.

use std::collections::{BTreeMap, BTreeSet};

use super::retry::with_retry;
use crate::clock::Clock;
use crate::plan::Observed;
use crate::provider::Providers;
use crate::spec::Config;
use crate::store::Inventory;

/// Ask each provider about the pools in the files and in the inventory, batched.
pub async fn observe(
    config: &Config,
    inventory: &Inventory,
    providers: &Providers,
    clock: &dyn Clock,
) -> Observed {
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
        let names: Vec<String> = names.into_iter().collect();
        let part = observe_pools(config, provider, &names, providers, clock).await;
        observed.pools.extend(part.pools);
        observed.unreachable.extend(part.unreachable);
        observed.reimaging.extend(part.reimaging);
        observed.acts_on.extend(part.acts_on);
        observed.budgets.extend(part.budgets);
        observed.clusters_unread.extend(part.clusters_unread);
    }
    observed
}

/// Ask one provider about some of its pools, in batches of its describe
/// size, then see those attached to a cluster through it. The daemon
/// observes the pools that are due this way, never every pool per event.
pub async fn observe_pools(
    config: &Config,
    provider: &str,
    names: &[String],
    providers: &Providers,
    clock: &dyn Clock,
) -> Observed {
    let mut observed = Observed::default();
    if let Some(err) = providers.failed.get(provider) {
        observed
            .unreachable
            .insert(provider.to_string(), err.clone());
        return observed;
    }
    let Some(p) = providers.get(provider) else {
        return observed; // a provider no longer in the files: its pools are left alone
    };
    let batch = p.capabilities().describe_batch.max(1);
    let mut answered = true;
    for chunk in names.chunks(batch) {
        match with_retry(clock, || p.describe_pools(chunk)).await {
            Ok(pools) => {
                for pool in pools {
                    observed.pools.insert(pool.name.clone(), pool);
                }
            }
            Err(e) => {
                observed
                    .unreachable
                    .insert(provider.to_string(), e.to_string());
                answered = false;
                break;
            }
        }
    }
    // Capabilities are known once the provider answered (a plug-in says them).
    let caps = p.capabilities();
    if answered && caps.reimage {
        observed.reimaging.insert(provider.to_string());
    }
    if answered && let Some(fields) = caps.acts_on {
        observed.acts_on.insert(provider.to_string(), fields);
    }
    attach_clusters(config, providers, &mut observed).await;
    observed
}

/// Pools attached to a cluster are seen through it: Kubernetes Ready and cordon
/// state, and the simulator's booted nodes registered as Node objects. A cluster
/// that cannot be reached leaves the provider's view, with a warning (the
/// executor connects again and refuses to replace nodes without it).
async fn attach_clusters(config: &Config, providers: &Providers, observed: &mut Observed) {
    let mut by_cluster: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for name in observed.pools.keys() {
        if let Some(e) = config.pools.get(name)
            && let Some(c) = &e.doc.spec.cluster_ref
        {
            by_cluster
                .entry((c.as_str(), e.doc.spec.provider_ref.as_str()))
                .or_default()
                .push(name.clone());
        }
    }
    for ((cluster, provider), names) in by_cluster {
        let Some(p) = providers.get(provider) else {
            continue;
        };
        let unread = |observed: &mut Observed, e: String| {
            for n in &names {
                observed
                    .budgets
                    .insert(n.clone(), Err((cluster.to_string(), e.clone())));
            }
        };
        let attached =
            match crate::kube::attach::connect(config, provider, cluster, p.clone()).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("{e}; pools seen without their cluster");
                    observed
                        .clusters_unread
                        .insert(cluster.to_string(), e.to_string());
                    unread(observed, e.to_string());
                    continue;
                }
            };
        let mut pools: Vec<_> = names
            .iter()
            .filter_map(|n| observed.pools.remove(n))
            .collect();
        if let Err(e) = attached.see(&mut pools).await {
            tracing::warn!("{e}; pools seen without their cluster");
            observed
                .clusters_unread
                .insert(cluster.to_string(), e.to_string());
        }
        // The PDB pre-flight, for pools a plan may roll: nodes off the
        // files' template, or a node lifetime to keep.
        let may_roll: Vec<_> = pools
            .iter()
            .filter(|p| {
                config.pools.get(&p.name).is_some_and(|e| {
                    let want = crate::model::PoolSpec::from_doc(&e.doc).template.hash();
                    e.doc.spec.lifecycle.max_node_age.is_some()
                        || p.live_nodes().any(|n| n.template != want)
                })
            })
            .collect();
        if !may_roll.is_empty() {
            match crate::kube::budgets::blocking(attached.cluster(), &may_roll).await {
                Ok(found) => {
                    for (pool, by_node) in found {
                        observed.budgets.insert(pool, Ok(by_node));
                    }
                }
                Err(e) => unread(observed, e.to_string()),
            }
        }
        for pool in pools {
            observed.pools.insert(pool.name.clone(), pool);
        }
    }
}
