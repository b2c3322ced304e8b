//! A world for integration tests: desired-state files in a temporary directory,
//! the simulator persisted in a temporary state directory, and a manual clock.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use poolwright::clock::{Clock, ManualClock};
use poolwright::desired_dir::load_dir;
use poolwright::plan::render::{Source, Style, render_text};
use poolwright::plan::{self, Observed, Plan, PlanOptions};
use poolwright::provider::Providers;
use poolwright::reconcile::{ApplyContext, ApplyOutcome, EventSink, apply_plan, observe};
use poolwright::spec::{Config, Limits};
use poolwright::store::{Inventory, StateDir};

pub const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 7, speed: 100}\n";

/// A NodePool document; `extra` is appended to its spec (indented by two spaces).
pub fn pool(name: &str, size: u32, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: sim\n  size: {size}\n  template: {{image: {image}, instanceType: m7i.large}}\n{extra}"
    )
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub state: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub prune: bool,
}

impl World {
    pub fn new() -> World {
        World {
            dir: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::new("2026-12-02T12:00:00Z".parse().unwrap())),
            prune: false,
        }
    }

    pub fn write(&self, file: &str, text: &str) {
        let path = self.dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).unwrap();
    }

    pub fn state_dir(&self) -> StateDir {
        StateDir::new(self.state.path())
    }

    pub fn config(&self) -> Config {
        let report = load_dir(self.dir.path(), &Limits::default());
        match report.config {
            Some(c) => c,
            None => panic!("invalid test config: {:#?}", report.diagnostics),
        }
    }

    pub fn inventory(&self) -> Inventory {
        Inventory::load(&self.state_dir().inventory()).unwrap()
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    pub fn providers(&self, config: &Config) -> Providers {
        Providers::build(config, self.state.path(), self.clock())
    }

    pub fn observed(&self, config: &Config) -> Observed {
        let providers = self.providers(config);
        block_on(observe(
            config,
            &self.inventory(),
            &providers,
            self.clock.as_ref(),
        ))
    }

    pub fn plan(&self) -> Plan {
        let config = self.config();
        let observed = self.observed(&config);
        plan::plan(&config, &observed, &self.inventory(), &self.options())
    }

    pub fn options(&self) -> PlanOptions {
        PlanOptions {
            prune: self.prune,
            now: self.clock.now(),
            override_disruption: false,
        }
    }

    pub fn text(&self, plan: &Plan) -> String {
        render_text(
            plan,
            &Source {
                dir: "config".into(),
                revision: None,
            },
            Style { color: false },
        )
    }

    /// Everything a plan of the world now rests on, and the plan.
    fn observe_and_plan(&self) -> (Config, Providers, Inventory, Observed, Plan) {
        let config = self.config();
        let providers = self.providers(&config);
        let inventory = self.inventory();
        let observed = block_on(observe(
            &config,
            &inventory,
            &providers,
            self.clock.as_ref(),
        ));
        let plan = plan::plan(&config, &observed, &inventory, &self.options());
        (config, providers, inventory, observed, plan)
    }

    /// Plan the world now and forecast the roll of its first pool (due
    /// now, or deferred until its window opens) with `runs` runs from
    /// `seed`, drawing from `history` where it has enough samples, else
    /// from the simulator's declared distributions. Also says when a
    /// deferred roll may start.
    #[allow(dead_code)]
    pub fn forecast_first_roll(
        &self,
        history: Option<&poolwright::model::latency::PoolLatencies>,
        runs: u32,
        seed: u64,
    ) -> (
        poolwright::reconcile::forecast::Forecast,
        Option<jiff::Timestamp>,
    ) {
        use poolwright::reconcile::forecast::{Case, Latencies, forecast};
        use poolwright::spec::types::ProviderSpec;
        let (config, providers, _, observed, plan) = self.observe_and_plan();
        let first = &plan.pools[0];
        let (template, settings) = first
            .roll()
            .expect("a roll is planned, now or when its window opens");
        let ProviderSpec::Sim(sim) = &config.providers[&first.provider].doc.spec.value else {
            panic!("the world's pools are on the simulator");
        };
        let f = forecast(
            &Case {
                pool: &observed.pools[&first.pool],
                target: template,
                settings,
                poll: providers
                    .get(&first.provider)
                    .unwrap()
                    .capabilities()
                    .poll_interval,
            },
            &Latencies::choose(history, Some(sim)),
            runs,
            seed,
            self.clock.now(),
        )
        .unwrap();
        (f, first.blocked().and_then(|b| b.until()))
    }

    /// Plan and apply, as `poolwright apply --auto-approve` does.
    pub fn apply(&self) -> ApplyOutcome {
        self.apply_with_events(&EventSink::none())
    }

    /// `apply`, reporting its events to `events`.
    pub fn apply_with_events(&self, events: &EventSink) -> ApplyOutcome {
        let (config, providers, inventory, _, plan) = self.observe_and_plan();
        let inventory = std::sync::Mutex::new(inventory);
        let stop = poolwright::sync::Stop::new();
        let inventory_store = poolwright::store::InventoryStore::file(self.state_dir().inventory());
        let journal = poolwright::store::Journal::new(self.state_dir().journal_dir());
        let ctx = ApplyContext {
            config: &config,
            journal: &journal,
            override_policy: false,
            providers: &providers,
            inventory: &inventory,
            inventory_store: &inventory_store,
            events,
            clock: self.clock.as_ref(),
            progress: &|_| {},
            stop: &stop,
        };
        block_on(apply_plan(&plan, &ctx))
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}
