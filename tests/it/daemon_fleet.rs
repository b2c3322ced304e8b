//! The daemon's unit of work is the pool: converging a fleet plans each pool a
//! bounded number of times (not once per pool per round of the whole fleet),
//! and an edit to one pool's document re-plans that pool, not the fleet.
//!
//! The measured case behind it: 500 pools converged in 3.9 s and 2,500 in
//! 138 s, because every finished pool started a round that loaded, described
//! and planned every pool. Counting plans makes the regression visible at a
//! size a test can afford, without timing anything.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::daemon::Daemon;
use crate::support::git_servers::git;

const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 3, speed: 1000}\n";
const POOLS: usize = 300;
const FILES: usize = 3;

fn pool_doc(n: usize, size: u32) -> String {
    format!(
        "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{n:04}}}\nspec:\n  providerRef: sim\n  size: {size}\n  template: {{image: img-1}}\n"
    )
}

/// Every pool of a fleet of `pools`, FILES files, with `resized` at size 4.
fn write_pools(config: &Path, pools: usize, resized: &[usize]) {
    for f in 0..FILES {
        let text: String = (f..pools)
            .step_by(FILES)
            .map(|n| pool_doc(n, if resized.contains(&n) { 4 } else { 3 }))
            .collect();
        let tmp = config.join(format!(".pools-{f}.yaml.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, config.join(format!("pools-{f}.yaml"))).unwrap();
    }
}

fn write_fleet(config: &Path, resized: Option<usize>) {
    write_pools(config, POOLS, resized.as_slice());
}

fn converged(size_of: impl Fn(&str) -> u64) -> impl Fn(&Value) -> bool {
    converged_n(POOLS, size_of)
}

fn converged_n(n: usize, size_of: impl Fn(&str) -> u64) -> impl Fn(&Value) -> bool {
    move |s: &Value| {
        s["pools"].as_array().is_some_and(|pools| {
            pools.len() == n
                && pools.iter().all(|p| {
                    p["state"] == "in-sync"
                        && p["rollout"]["available"] == size_of(p["name"].as_str().unwrap())
                })
        })
    }
}

fn pools_planned(s: &Value) -> u64 {
    s["reconcile"]["poolsPlanned"].as_u64().unwrap()
}

#[test]
fn converging_a_fleet_and_editing_one_pool_plan_per_pool_not_per_fleet() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("providers.yaml"), PROVIDER).unwrap();
    write_fleet(&config, None);
    let d = Daemon::start(tmp.path(), &[]);

    let s = d.wait_for(
        "every pool created with 3 healthy nodes",
        Duration::from_secs(120),
        converged(|_| 3),
    );
    // Each pool: planned when loaded, when its worker ends, and a look or two
    // while its nodes boot. A round of the whole fleet per finished pool made
    // this hundreds per pool.
    let planned = pools_planned(&s);
    assert!(
        planned <= 8 * POOLS as u64,
        "converging {POOLS} pools planned {planned} pools ({:.1} per pool): the work is not per pool",
        planned as f64 / POOLS as f64
    );

    // One pool's document changes in a file of 100: that pool is planned
    // again, the other 299 are not.
    std::thread::sleep(Duration::from_secs(1));
    let before = pools_planned(&d.status());
    write_fleet(&config, Some(7));
    let s = d.wait_for(
        "pool-0007 resized to 4",
        Duration::from_secs(60),
        converged(|name| if name == "pool-0007" { 4 } else { 3 }),
    );
    let after = pools_planned(&s);
    assert!(
        after - before <= 8,
        "an edit to one pool planned {} pools",
        after - before
    );
}

/// In git mode, a commit that touches 3 pools (in two files) makes 3 pools'
/// worth of work, not a round of the fleet.
#[test]
fn a_commit_touching_three_pools_plans_three_pools() {
    const N: usize = 60;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("providers.yaml"), PROVIDER).unwrap();
    write_pools(&config, N, &[]);
    git(tmp.path(), &["init", "-q", "-b", "main"]);
    git(tmp.path(), &["add", "."]);
    git(tmp.path(), &["commit", "-q", "-m", "fleet"]);
    let d = Daemon::start(tmp.path(), &["--git-committed-only"]);
    d.wait_for(
        "the fleet in sync",
        Duration::from_secs(60),
        converged_n(N, |_| 3),
    );
    std::thread::sleep(Duration::from_secs(1));
    let before = pools_planned(&d.status());
    let resized = [4, 5, 7];
    write_pools(&config, N, &resized);
    git(tmp.path(), &["commit", "-q", "-am", "resize three"]);
    let s = d.wait_for(
        "the three pools resized",
        Duration::from_secs(60),
        converged_n(N, |name| {
            let n: usize = name.trim_start_matches("pool-").parse().unwrap();
            if resized.contains(&n) { 4 } else { 3 }
        }),
    );
    let planned = pools_planned(&s) - before;
    assert!(
        (3..=3 * 8).contains(&planned),
        "a commit touching 3 of {N} pools planned {planned} pools"
    );
    // Every pool carries the new commit, planned again or not.
    let commit = s["config"]["revision"]["commit"].as_str().unwrap();
    let short = format!("main@{}", &commit[..7]);
    for p in s["pools"].as_array().unwrap() {
        assert_eq!(p["revision"], short.as_str(), "{}", p["name"]);
    }
}
