//! Forecasts are honest: on the simulator, the duration of a real `apply`
//! (the same planner, the same executor, the simulator's own draws) falls
//! inside the forecast's p10–p90 band as often as an 80% band should (over
//! 50 seeded trials across a mix of budgets; BENCHMARKS.md has the measured
//! coverage), without bias, and the forecast's lowest availability and most
//! nodes are what the real run's events show.

use jiff::SignedDuration;
use poolwright::clock::Clock;
use poolwright::model::ObservedPool;
use poolwright::reconcile::EventSink;
use poolwright::reconcile::forecast::{Case, Latencies, forecast};

use crate::support::world::{World, pool};

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

    let start = w.clock.now();
    let (f, _) = w.forecast_first_roll(None, 200, 1000 + k);

    // The real apply, as `poolwright apply` runs it (the same plan: nothing
    // changed since it was made).
    let events = EventSink::in_memory();
    let outcome = w.apply_with_events(&events);
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

/// `poolwright forecast` as a user runs it.
fn cli(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(args)
        .current_dir(dir)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_forecast_command_sweeps_tries_budgets_and_draws() {
    let d = tempfile::tempdir().unwrap();
    let write = |rel: &str, body: &str| {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    write("config/providers.yaml", crate::support::world::PROVIDER);
    write("config/web.yaml", &pool("web", 4, "img-1", ""));
    let o = cli(d.path(), &["forecast", "config"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("No roll planned"), "{}", text(&o));
    // A pool not in the desired state is an error, not "nothing to forecast".
    let o = cli(d.path(), &["forecast", "config", "--pool", "wbe"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("--pool \"wbe\": no pool of that name") && text(&o).contains("web"),
        "{}",
        text(&o)
    );
    let o = cli(d.path(), &["apply", "config", "--auto-approve"]);
    assert!(o.status.success(), "{}", text(&o));
    std::thread::sleep(std::time::Duration::from_secs(2));
    write("config/web.yaml", &pool("web", 4, "img-2", ""));

    let o = cli(d.path(), &["forecast", "config", "--runs", "20"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for part in [
        "nodepool.web: surge 1, unavailable 0",
        "duration",
        "finishes",
        "surge cost",
        "20 runs, seed 1",
        "the simulator's declared distributions",
    ] {
        assert!(t.contains(part), "missing {part:?}:\n{t}");
    }
    // The same seed, the same forecast. The finish times are wall-clock
    // times to the second (now + the duration): two runs a second apart
    // differ there, and only there.
    let timeless = |t: &str| -> String {
        t.lines()
            .filter(|l| !l.trim_start().starts_with("finishes"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        timeless(&t),
        timeless(&text(&cli(
            d.path(),
            &["forecast", "config", "--runs", "20"]
        )))
    );

    let svg = d.path().join("capacity.svg");
    let o = cli(
        d.path(),
        &[
            "forecast",
            "config",
            "--runs",
            "10",
            "--sweep",
            "--svg",
            svg.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["forecasts"][0];
    assert_eq!(f["pool"], "web");
    assert_eq!(
        (f["surge"].as_u64(), f["maxTotalBound"].as_u64()),
        (Some(1), Some(5))
    );
    assert!(
        f["maxTotal"].as_u64().unwrap() <= 5 && f["minAvailable"].as_u64().unwrap() >= 4,
        "{f}"
    );
    let labels: Vec<&str> = v["sweeps"]["web"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    // Own (1/0) is GKE's default, so that row appears once.
    assert_eq!(
        labels,
        [
            "own",
            "GKE no extra cost",
            "GKE fast",
            "double surge",
            "one more unavailable"
        ]
    );
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawing.starts_with("<svg") && drawing.contains("nodepool.web"),
        "{}",
        &drawing[..200.min(drawing.len())]
    );

    // A what-if, and what is refused.
    let o = cli(
        d.path(),
        &[
            "forecast",
            "config",
            "--runs",
            "5",
            "--set",
            "web.rollout.maxSurge=3",
            "-o",
            "json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["forecasts"][0]["surge"], 3);
    for (bad, says) in [
        ("web.rollout.drain=1", "cannot be set"),
        ("nope.rollout.maxSurge=1", "no pool named \"nope\""),
        ("web.rollout.maxSurge=-1", "must be 0 to 100000"),
        ("web.rollout.maxSurge=0", "cannot both be 0"),
        (
            "web.rollout.maxSurge",
            "expected POOL.rollout.maxSurge=VALUE",
        ),
    ] {
        let o = cli(
            d.path(),
            &["forecast", "config", "--runs", "5", "--set", bad],
        );
        assert_eq!(o.status.code(), Some(1), "{bad}: {}", text(&o));
        assert!(text(&o).contains(says), "{bad}: {}", text(&o));
    }
    let o = cli(d.path(), &["plan", "config", "--forecast"]);
    assert!(
        text(&o).contains("Forecast (200 seeded runs") && text(&o).contains("duration"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_roll_held_by_a_window_finishes_after_it_opens() {
    use poolwright::spec::located::At;
    use poolwright::spec::types::{Disruption, DisruptionPolicy, Window};
    use poolwright::spec::values::{Duration, TimeOfDay, Weekday};
    let start: jiff::Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
    let old = crate::support::rollout_sim::template("img-1");
    let observed = ObservedPool {
        name: "web".into(),
        size: 3,
        autoscaling: None,
        template: old.clone(),
        in_place: Default::default(),
        nodes: (0..3)
            .map(|i| poolwright::model::Node {
                id: format!("web-{i:05}").into(),
                template: old.hash(),
                state: poolwright::model::NodeState::Healthy,
                launched_at: start,
                healthy_since: Some(start),
                cordoned: false,
                provider_id: None,
                zone: None,
                labels: Default::default(),
            })
            .collect(),
    };
    let mut settings = crate::support::rollout_sim::settings(3, 1, 0);
    settings.disruption = Disruption {
        policy: Some(At::bare(DisruptionPolicy::AllowDuringMaintenanceWindow)),
        windows: vec![At::bare(Window {
            days: At::bare(vec![Weekday::Sat]),
            start: Some(At::bare(TimeOfDay::parse("02:00").unwrap())),
            cron: None,
            duration: At::bare(Duration::secs(4 * 3600)),
            timezone: At::bare("Europe/Berlin".into()),
        })],
        ..Disruption::default()
    };
    let target = crate::support::rollout_sim::template("img-2");
    let f = forecast(
        &Case {
            pool: &observed,
            target: &target,
            settings: &settings,
            poll: std::time::Duration::from_secs(1),
        },
        &Latencies::choose(None, Some(&crate::support::rollout_sim::sim_settings())),
        20,
        1,
        start,
    )
    .unwrap();
    // Saturday 5 December 02:00 in Berlin is 01:00 UTC.
    let opens: jiff::Timestamp = "2026-12-05T01:00:00Z".parse().unwrap();
    assert_eq!(f.held_until, Some(opens));
    assert!(
        f.finish.p50 > opens && f.finish.p90 < "2026-12-05T05:00:00Z".parse().unwrap(),
        "{:?}",
        f.finish
    );
    assert_eq!((f.min_available, f.max_total), (3, 4));
    assert_eq!(f.deadline_risk, 0.0);
}
