//! Building provider clients from the validated `Provider` documents.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::Provider;
use super::sim::Sim;
use crate::clock::Clock;
use crate::rollout::{Drainer, NoDrain, SimDrainer};
use crate::spec::Config;
use crate::spec::types::ProviderSpec;

/// The providers of a config, by name. A provider that cannot be built is kept
/// as an error so its pools are reported, not silently skipped.
pub struct Providers {
    pub ready: BTreeMap<String, Arc<dyn Provider>>,
    /// How each provider's nodes are drained (the simulator's own drainer, or
    /// nothing to drain when no cluster is attached).
    pub drainers: BTreeMap<String, Arc<dyn Drainer>>,
    pub failed: BTreeMap<String, String>,
}

impl Providers {
    pub fn build(config: &Config, state_dir: &Path, clock: Arc<dyn Clock>) -> Providers {
        let mut ready: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let mut drainers: BTreeMap<String, Arc<dyn Drainer>> = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for (name, entry) in &config.providers {
            match &entry.doc.spec.value {
                ProviderSpec::Sim(settings) => {
                    match Sim::open(name, settings, Some(state_dir), clock.clone()) {
                        Ok(sim) => {
                            let sim = Arc::new(sim);
                            drainers.insert(name.clone(), Arc::new(SimDrainer::new(sim.clone())));
                            ready.insert(name.clone(), sim);
                        }
                        Err(e) => {
                            failed.insert(name.clone(), format!("{e:#}"));
                        }
                    }
                }
                other => {
                    failed.insert(
                        name.clone(),
                        format!(
                            "provider type {} is not available in this build of poolwright yet",
                            other.type_name()
                        ),
                    );
                }
            }
        }
        Providers {
            ready,
            drainers,
            failed,
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.ready.get(name)
    }

    pub fn drainer(&self, name: &str) -> Arc<dyn Drainer> {
        self.drainers
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::new(NoDrain))
    }
}
