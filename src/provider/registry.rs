//! Building provider clients from the validated `Provider` documents.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::Provider;
use super::aws::Aws;
use super::drain::{Drainer, NoDrain, SimDrainer};
use super::http::Http;
use super::instrumented::{CallObserver, Instrumented};
use super::sim::Sim;
use crate::clock::Clock;
use crate::model::PoolSpec;
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
    /// What each ready provider was built from, so a reload keeps a provider
    /// (and its in-flight state) whose settings did not change.
    specs: BTreeMap<String, ProviderSpec>,
}

impl Providers {
    pub fn build(config: &Config, state_dir: &Path, clock: Arc<dyn Clock>) -> Providers {
        Providers::rebuild(config, state_dir, clock, None, None)
    }

    /// Build the providers of `config`, reusing those of `previous` whose
    /// settings are unchanged, and timing every call through `observer`.
    pub fn rebuild(
        config: &Config,
        state_dir: &Path,
        clock: Arc<dyn Clock>,
        observer: Option<Arc<dyn CallObserver>>,
        previous: Option<&Providers>,
    ) -> Providers {
        let mut ready: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let mut drainers: BTreeMap<String, Arc<dyn Drainer>> = BTreeMap::new();
        let mut failed = BTreeMap::new();
        let mut specs = BTreeMap::new();
        for (name, entry) in &config.providers {
            let spec = &entry.doc.spec.value;
            if let Some(prev) = previous.filter(|p| p.specs.get(name) == Some(spec)) {
                ready.insert(name.clone(), prev.ready[name].clone());
                drainers.insert(name.clone(), prev.drainer(name));
                specs.insert(name.clone(), spec.clone());
                continue;
            }
            match spec {
                ProviderSpec::Sim(settings) => {
                    match Sim::open(name, settings, Some(state_dir), clock.clone()) {
                        Ok(sim) => {
                            let sim = Arc::new(sim);
                            drainers.insert(name.clone(), Arc::new(SimDrainer::new(sim.clone())));
                            let provider: Arc<dyn Provider> = match &observer {
                                Some(o) => Instrumented::wrap(sim, o.clone()),
                                None => sim,
                            };
                            ready.insert(name.clone(), provider);
                            specs.insert(name.clone(), spec.clone());
                        }
                        Err(e) => {
                            failed.insert(name.clone(), format!("{e:#}"));
                        }
                    }
                }
                ProviderSpec::Aws(settings) => {
                    let aws: Arc<dyn Provider> = Arc::new(Aws::new(name, settings, clock.clone()));
                    let provider = match &observer {
                        Some(o) => Instrumented::wrap(aws, o.clone()),
                        None => aws,
                    };
                    ready.insert(name.clone(), provider);
                    specs.insert(name.clone(), spec.clone());
                }
                ProviderSpec::Http(settings) => {
                    // Relative paths (token, CA, client certificate) start at the document's directory.
                    let base = Path::new(&entry.file)
                        .parent()
                        .unwrap_or_else(|| Path::new("."));
                    match Http::new(name, settings, base) {
                        Ok(http) => {
                            let http: Arc<dyn Provider> = Arc::new(http);
                            let provider = match &observer {
                                Some(o) => Instrumented::wrap(http, o.clone()),
                                None => http,
                            };
                            ready.insert(name.clone(), provider);
                            specs.insert(name.clone(), spec.clone());
                        }
                        Err(e) => {
                            failed.insert(
                                name.clone(),
                                format!("plug-in at {}: {e}", settings.url.value),
                            );
                        }
                    }
                }
            }
        }
        let providers = Providers {
            ready,
            drainers,
            failed,
            specs,
        };
        providers.bind(config);
        providers
    }

    /// Each provider learns which pools of the files it serves (group names,
    /// home sizes, templates), including a reused one whose pools changed;
    /// again after a channel's image is written into the pools.
    pub fn bind(&self, config: &Config) {
        for (name, provider) in &self.ready {
            let pools: Vec<PoolSpec> = config
                .pools
                .values()
                .filter(|e| e.doc.spec.provider_ref.as_str() == name)
                .map(|e| PoolSpec::from_doc(&e.doc))
                .collect();
            provider.bind_pools(&pools);
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
