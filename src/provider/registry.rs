//! Building provider clients from the validated `Provider` documents.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::Provider;
use super::sim::Sim;
use crate::clock::Clock;
use crate::spec::Config;
use crate::spec::types::ProviderSpec;

/// The providers of a config, by name. A provider that cannot be built is kept
/// as an error so its pools are reported, not silently skipped.
pub struct Providers {
    pub ready: BTreeMap<String, Arc<dyn Provider>>,
    pub failed: BTreeMap<String, String>,
}

impl Providers {
    pub fn build(config: &Config, state_dir: &Path, clock: Arc<dyn Clock>) -> Providers {
        let mut ready: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for (name, entry) in &config.providers {
            match &entry.doc.spec.value {
                ProviderSpec::Sim(settings) => {
                    match Sim::open(name, settings, Some(state_dir), clock.clone()) {
                        Ok(sim) => {
                            ready.insert(name.clone(), Arc::new(sim));
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
        Providers { ready, failed }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.ready.get(name)
    }
}
