//! Forecasts are honest: on the simulator, the duration of a real `apply`
//! (the same planner, the same executor, the simulator's own draws) falls
//! inside the forecast's p10–p90 band as often as an 80% band should (over
//! 50 seeded trials across a mix of budgets; BENCHMARKS.md has the measured
//! coverage), without bias, and the forecast's lowest availability and most
//! nodes are what the real run's events show.

use jiff::SignedDuration;
use poolwright::clock::Clock;
use poolwright::model::ObservedPool;
use poolwright::plan::{self, Step};
use poolwright::reconcile::forecast::{Case, Latencies, forecast};
use poolwright::reconcile::{ApplyContext, EventSink, apply_plan, observe};
use poolwright::spec::types::ProviderSpec;

use crate::support::world::{World, block_on, pool};

/// (surge, unavailable) of each trial, in turn.
const BUDGETS: [(u32, u32); 5] = [(1, 0), (2, 0), (0, 1), (2, 1), (0, 2)];

struct Trial {
    actual: f64,
    p10: f64,
    p50: f64,
    p90: f64,
    forecast_min_available: u32,
    forecast_max_total: u32,
    real_min_available: u32,
    real_max_total: u32,
}

fn trial(k: u64) -> Trial {
    let (surge, unavailable) = BUDGETS[k as usize % BUDGETS.len()];
    let w = World::new();
    w.write(
        "provider.yaml",
        &format!(
            "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec: {{type: sim, seed: {}, speed: 1}}\n",
            k
        ),
    );
    let rollout = format!(
        "  rollout: {{maxSurge: {surge}, maxUnavailable: {unavailable}, health: {{minReady: 10s}}}}\n"
    );
    w.write("web.yaml", &pool("web", 8, "img-1", &rollout));
    assert!(w.apply().is_ok());
    w.clock.advance(SignedDuration::from_mins(10));
    w.write("web.yaml", &pool("web", 8, "img-2", &rollout));

    let config = w.config();
    let providers = w.providers(&config);
    let inventory = w.inventory();
    let observed = block_on(observe(&config, &inventory, &providers, w.clock.as_ref()));
    let plan = plan::plan(&config, &observed, &inventory, &w.options());
    let (template, settings) = plan.pools[0]
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Roll {
                template, settings, ..
            } => Some((template.clone(), settings.clone())),
            _ => None,
        })
        .expect("a roll is planned");
    let sim = match &config.providers["sim"].doc.spec.value {
        ProviderSpec::Sim(s) => s.clone(),
        _ => unreachable!(),
    };
    let observed_pool: &ObservedPool = &observed.pools["web"];
    let start = w.clock.now();
    let f = forecast(
        &Case {
            pool: observed_pool,
            target: &template,
            settings: &settings,
            poll: providers.get("sim").unwrap().capabilities().poll_interval,
        },
        &Latencies::choose(None, Some(&sim)),
        200,
        1000 + k,
        start,
    )
    .unwrap();

    // The real apply, as `poolwright apply` runs it.
    let events = EventSink::in_memory();
    let inventory = std::sync::Mutex::new(inventory);
    let stop = poolwright::reconcile::Stop::new();
    let inventory_store = poolwright::store::InventoryStore::file(w.state_dir().inventory());
    let journal = poolwright::store::Journal::new(w.state_dir().journal_dir());
    let ctx = ApplyContext {
        config: &config,
        journal: &journal,
        override_policy: false,
        providers: &providers,
        inventory: &inventory,
        inventory_store: &inventory_store,
        events: &events,
        clock: w.clock.as_ref(),
        progress: &|_| {},
        stop: &stop,
    };
    let outcome = block_on(apply_plan(&plan, &ctx));
    assert!(outcome.is_ok(), "{:?}", outcome.errors);
    let actual = w.clock.now().duration_since(start).as_secs_f64();
    let counts: Vec<_> = events.take().into_iter().filter_map(|e| e.counts).collect();
    Trial {
        actual,
        p10: f.duration_seconds.p10,
        p50: f.duration_seconds.p50,
        p90: f.duration_seconds.p90,
        forecast_min_available: f.min_available,
        forecast_max_total: f.max_total,
        real_min_available: counts.iter().map(|c| c.available).min().unwrap(),
        real_max_total: counts.iter().map(|c| c.total).max().unwrap(),
    }
}

#[test]
fn real_applies_fall_inside_the_forecast_band() {
    let trials: Vec<Trial> = (0..50).map(trial).collect();
    let covered = trials
        .iter()
        .filter(|t| t.p10 <= t.actual && t.actual <= t.p90)
        .count();
    let table: Vec<String> = trials
        .iter()
        .enumerate()
        .map(|(k, t)| {
            format!(
                "trial {k:2} {:?}: actual {:7.1}s, band {:7.1}..{:7.1}; min available {} vs {}, max total {} vs {}",
                BUDGETS[k % BUDGETS.len()],
                t.actual,
                t.p10,
                t.p90,
                t.forecast_min_available,
                t.real_min_available,
                t.forecast_max_total,
                t.real_max_total
            )
        })
        .collect();
    eprintln!(
        "forecast coverage: {covered} of 50 real applies inside p10..p90\n{}",
        table.join("\n")
    );
    // A calibrated 80% band holds 40 of 50 on average, with a binomial
    // spread of about 3: 35 is two spreads below. Bias (a forecast that is
    // right on average only by being wide, or one that runs long) shows in
    // the mean deviation from the median, which must stay small beside the
    // band's width.
    assert!(
        covered >= 35,
        "only {covered} of 50 real applies fell inside the forecast's p10..p90:\n{}",
        table.join("\n")
    );
    let bias = trials
        .iter()
        .map(|t| (t.actual - t.p50) / (t.p90 - t.p10).max(1.0))
        .sum::<f64>()
        / 50.0;
    assert!(
        bias.abs() < 0.15,
        "the forecast is biased: mean (actual - p50) is {bias:.2} band widths\n{}",
        table.join("\n")
    );
    for (k, t) in trials.iter().enumerate() {
        assert_eq!(
            (t.forecast_min_available, t.forecast_max_total),
            (t.real_min_available, t.real_max_total),
            "trial {k}: the forecast's lowest availability and most nodes differ from the real run's"
        );
    }
}
