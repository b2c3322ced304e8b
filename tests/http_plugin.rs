//! `provider type: http` against the reference plug-in
//! (`examples/plugins/ec2-instances`, Python) managing plain EC2 instances in
//! moto, driven as a user drives it: `poolwright plugin check`, `plan`,
//! `apply` and `run` processes. Nothing stands in for the plug-in: moto's own
//! instance history judges what was launched and terminated.

mod support;

use support::daemon;
use support::fault_proxy;
use support::git_servers::git;
use support::moto;
use support::plugin;
use support::tls::{openssl, server_pki, test_ca, test_leaf};

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fault_proxy::{FaultProxy, Faults};
use moto::{Aws, MotoGuard, moto};
use plugin::Plugin;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

/// AMIs moto knows; each is one template.
const AMIS: [&str; 3] = ["ami-03cf127a", "ami-12c6146b", "ami-1812c061"];

/// A desired-state directory and poolwright's state, beside a plug-in.
struct World {
    aws: Aws,
    dir: tempfile::TempDir,
    /// The plug-in's log, for failure messages.
    plugin_log: std::path::PathBuf,
}

/// moto (reset) and the reference plug-in against it.
fn setup(plugin_args: &[&str]) -> (MotoGuard, Plugin, World) {
    let m = moto();
    let w = World::beside(&m.url, tempfile::tempdir().unwrap());
    let plugin = Plugin::start(&m.url, w.dir.path(), plugin_args);
    w.provider(&plugin.url, "");
    (m, plugin, w)
}

impl World {
    fn beside(moto_url: &str, dir: tempfile::TempDir) -> World {
        World {
            aws: Aws::new(moto_url),
            plugin_log: dir.path().join("plugin.log"),
            dir,
        }
    }

    fn plugin_log(&self) -> String {
        std::fs::read_to_string(&self.plugin_log).unwrap_or_default()
    }

    fn provider(&self, url: &str, extra: &str) {
        self.write(
            "config/provider.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: ec2}}\nspec:\n  type: http\n  url: {url}\n  pollInterval: 1s\n  timeout: 10s\n{extra}"
            ),
        );
    }

    /// The pool `name`: `size` nodes on AMI number `ami`.
    fn pool(&self, name: &str, size: u32, ami: usize, surge: u32, unavailable: u32) {
        self.write(
            &format!("config/{name}.yaml"),
            &format!(
                "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: ec2\n  size: {size}\n  template:\n    image: {}\n    instanceType: t3.micro\n    tags: {{team: {name}}}\n  rollout:\n    maxSurge: {surge}\n    maxUnavailable: {unavailable}\n    health: {{minReady: 0s, startupTimeout: 2m}}\n",
                AMIS[ami]
            ),
        );
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolwright"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("POOLWRIGHT_STATE_DIR", self.dir.path().join("state"))
            .env("NO_COLOR", "1");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn apply(&self) -> String {
        let o = self.run(&[
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            o.status.code(),
            Some(0),
            "apply failed:\n{text}\nplug-in log:\n{}",
            self.plugin_log()
        );
        text
    }

    fn plan_exit(&self) -> (Option<i32>, String) {
        let o = self.run(&["plan", "config", "--detailed-exitcode"]);
        (
            o.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    fn events(&self) -> Vec<Value> {
        support::jsonl::read(&self.dir.path().join("events.jsonl"))
    }

    /// The template hash poolwright gives AMI number `ami` (what the plug-in
    /// stamps on each instance).
    fn hash(ami: usize) -> String {
        let t = poolwright::model::NodeTemplate {
            image: Some(AMIS[ami].into()),
            instance_type: Some("t3.micro".into()),
            ..Default::default()
        };
        serde_json::to_value(t.hash())
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// What moto says of a pool: (ever launched, running on `hash`, terminated).
fn moto_view(w: &World, pool: &str, hash: &str) -> (usize, usize, Vec<String>) {
    let all = w.aws.pool_instances(pool);
    let running = all
        .iter()
        .filter(|(_, s, t)| s == "running" && t.as_deref() == Some(hash))
        .count();
    let gone = all
        .iter()
        .filter(|(_, s, _)| s == "terminated" || s == "shutting-down")
        .map(|(id, _, _)| id.clone())
        .collect();
    (all.len(), running, gone)
}

fn live_ids(w: &World, pool: &str) -> Vec<String> {
    w.aws
        .pool_instances(pool)
        .into_iter()
        .filter(|(_, s, _)| s == "running" || s == "pending")
        .map(|(id, _, _)| id)
        .collect()
}

/// Every observation the executor reported stayed within the budget.
fn assert_budget(events: &[Value], pool: &str, size: u64, surge: u64, unavailable: u64) {
    let mut seen = 0;
    for e in events.iter().filter(|e| e["pool"] == pool) {
        let Some(c) = e.get("counts") else { continue };
        seen += 1;
        let total = c["total"].as_u64().unwrap();
        let available = c["available"].as_u64().unwrap();
        assert!(
            total <= size + surge,
            "{total} nodes exceed size {size} + surge {surge}: {e}"
        );
        assert!(
            available + unavailable >= size,
            "{available} available is below {size} - {unavailable}: {e}"
        );
    }
    assert!(seen > 3, "too few observations reported ({seen})");
}

/// Each node poolwright asked to terminate, asked once.
fn assert_terminated_once(events: &[Value], pool: &str) -> Vec<String> {
    let mut ids: Vec<String> = events
        .iter()
        .filter(|e| e["pool"] == pool && e["event"] == "terminate_requested")
        .map(|e| e["node"].as_str().unwrap().to_string())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a node was terminated twice: {events:#?}");
    ids
}

#[test]
fn the_reference_plugin_passes_the_conformance_kit() {
    let m = moto();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let p = Plugin::start(
        &m.url,
        dir.path(),
        &[
            "--token-file",
            token.to_str().unwrap(),
            "--max-instances",
            "20",
        ],
    );
    let template = format!(r#"{{"image":"{}","instanceType":"t3.micro"}}"#, AMIS[0]);
    let new_template = format!(r#"{{"image":"{}","instanceType":"t3.small"}}"#, AMIS[1]);
    // An image of the channel `base`, as the plug-in publishes them: an AMI
    // of the account tagged poolwright.io/channel.
    let aws = Aws::new(&m.url);
    let ami = aws.register_image("node-base-1");
    aws.block(async {
        aws.ec2
            .create_tags()
            .resources(&ami)
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key("poolwright.io/channel")
                    .value("base")
                    .build(),
            )
            .send()
            .await
            .unwrap();
    });
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(["plugin", "check", &p.url, "--template", &template])
        .args(["--channel", "base"])
        .args([
            "--new-template",
            &new_template,
            "--timeout",
            "60s",
            "--quota-size",
            "50",
            "-o",
            "json",
        ])
        .arg("--token-file")
        .arg(&token)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let failed: Vec<&Value> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "fail")
        .collect();
    assert!(
        failed.is_empty() && out.status.code() == Some(0),
        "failed checks: {failed:#?}\nplug-in log:\n{}",
        p.log_text()
    );
    let verdict = |name: &str| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["check"] == name)
            .map(|r| r["verdict"].as_str().unwrap().to_string())
    };
    for check in [
        "capabilities",
        "create-pool",
        "grow",
        "shrink",
        "create-nodes",
        "terminate-chosen-decrement",
        "template-change",
        "idempotent-create-nodes",
        "idempotent-terminate",
        "idempotent-concurrent-duplicate",
        "idempotent-set-template",
        "idempotent-delete",
        "key-reuse-other-body",
        "problem-on-bad-request",
        "not-found-pool",
        "token-required",
        "delete",
        "delete-missing",
        "describe-batch-limit",
        "adopt",
        "create-pool-duplicate",
        "reimage-unsupported",
        "quota-exceeded",
        "channel-missing",
        "channel-images",
    ] {
        assert_eq!(verdict(check).as_deref(), Some("pass"), "{check}");
    }
    assert_eq!(
        verdict("reimage"),
        None,
        "not offered: asked for 501 instead"
    );
    assert_eq!(
        report["skipped"], 0,
        "with a token and a quota size every check runs: {report:#}"
    );
    // Everything the check created is gone again.
    let aws = Aws::new(&m.url);
    for pool in ["pwcheck-a", "pwcheck-b"] {
        assert!(
            aws.pool_instances(pool)
                .iter()
                .all(|(_, s, _)| s == "terminated" || s == "shutting-down"),
            "{pool} left instances behind"
        );
    }
    // The table for humans, and a failing exit when the plug-in is not there.
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(["plugin", "check", "http://127.0.0.1:9", "--timeout", "5s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("capabilities")
            && table.contains("FAIL")
            && table.contains("could not connect"),
        "{table}"
    );
}

#[test]
fn apply_creates_a_pool_then_rolls_it_with_surge_and_then_with_unavailable() {
    let (_m, _plugin, w) = setup(&[]);
    w.pool("web", 6, 0, 2, 0);
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("Plan: 1 to add"), "{text}");
    w.apply();
    let (ever, running, _) = moto_view(&w, "web", &World::hash(0));
    assert_eq!((ever, running), (6, 6));
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(0), "a fresh pool is no drift:\n{text}");

    // Surge 2, unavailable 0: create before terminate.
    let originals = live_ids(&w, "web");
    w.pool("web", 6, 1, 2, 0);
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("create-before-terminate, surge 2, unavailable 0"),
        "{text}"
    );
    w.apply();
    let events = w.events();
    assert_budget(&events, "web", 6, 2, 0);
    let terminated = assert_terminated_once(&events, "web");
    let mut sorted = originals.clone();
    sorted.sort();
    assert_eq!(
        terminated, sorted,
        "exactly the original nodes were terminated"
    );
    let (ever, running, gone) = moto_view(&w, "web", &World::hash(1));
    assert_eq!(ever, 12, "6 launches for 6 replacements, no doubled surge");
    assert_eq!(running, 6, "6 instances on the new template");
    for id in &originals {
        assert!(gone.contains(id), "{id} was not terminated");
    }

    // Surge 0, unavailable 2: terminate before create.
    std::fs::remove_file(w.dir.path().join("events.jsonl")).unwrap();
    let second = live_ids(&w, "web");
    w.pool("web", 6, 2, 0, 2);
    w.apply();
    let events = w.events();
    assert_budget(&events, "web", 6, 0, 2);
    let terminated = assert_terminated_once(&events, "web");
    let mut sorted = second.clone();
    sorted.sort();
    assert_eq!(terminated, sorted);
    let (ever, running, gone) = moto_view(&w, "web", &World::hash(2));
    assert_eq!((ever, running, gone.len()), (18, 6, 12));
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn throttling_lost_answers_and_a_plugin_restart_mid_rollout_act_once() {
    let (_m, mut plugin, w) = setup(&[]);
    let proxy = FaultProxy::start_plugin(
        &plugin.url,
        Faults {
            throttle_every: 7,
            lose_answer_every: 5,
        },
    );
    w.provider(&proxy.url, "  maxAttempts: 8\n");
    w.pool("web", 6, 0, 2, 0);
    w.apply();
    let originals = live_ids(&w, "web");
    assert_eq!(originals.len(), 6);

    w.pool("web", 6, 1, 2, 0);
    let mut apply = w
        .command(&[
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(w.dir.path().join("apply.log")).unwrap())
        .spawn()
        .unwrap();
    // The plug-in dies (kill -9) once the first old node is on its way out,
    // and comes back on the same port and state.
    let started = Instant::now();
    while !w
        .events()
        .iter()
        .any(|e| e["event"] == "terminate_requested")
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no termination within 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    plugin.kill();
    std::thread::sleep(Duration::from_millis(1500));
    plugin.restart();
    let status = apply.wait().unwrap();
    assert!(
        status.success(),
        "apply failed: {}\nplug-in log:\n{}",
        std::fs::read_to_string(w.dir.path().join("apply.log")).unwrap_or_default(),
        plugin.log_text()
    );
    let counters = &proxy.counters;
    assert!(
        counters.throttled.load(std::sync::atomic::Ordering::SeqCst) > 0
            && counters.lost.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the proxy did misbehave"
    );
    let (ever, running, gone) = moto_view(&w, "web", &World::hash(1));
    assert_eq!(
        ever, 12,
        "every launch happened once: 6 originals and 6 replacements (moto's history)"
    );
    assert_eq!(running, 6);
    for id in &originals {
        assert!(gone.contains(id), "{id} was not terminated");
    }
    assert_budget(&w.events(), "web", 6, 2, 0);
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn a_quota_refusal_falls_back_to_terminate_before_create() {
    // The plug-in may hold 6 instances: a surge cannot be launched.
    let (_m, _plugin, w) = setup(&["--max-instances", "6"]);
    w.pool("web", 6, 0, 2, 1);
    w.apply();
    w.pool("web", 6, 1, 2, 1);
    w.apply();
    let events = w.events();
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "surge_refused")
        .collect();
    assert!(!refused.is_empty(), "{events:#?}");
    let messages: Vec<&str> = refused
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages.iter().all(|m| m.contains("quota-exceeded")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("falling back to terminate-before-create")),
        "a refused surge of one node falls back: {messages:#?}"
    );
    assert_budget(&events, "web", 6, 0, 1);
    let (ever, running, _) = moto_view(&w, "web", &World::hash(1));
    assert_eq!((ever, running), (12, 6));
}

/// `kill -9` of `poolwright apply` at random points of a rollout, then apply
/// again: every trial converges, no launch happens twice and no node is
/// terminated twice. The plug-in takes a second over every launch (a slow
/// platform), so kills often land while a create is still being worked on
/// and not yet visible in describe: only the create's key, journaled before
/// the call and sent again on resume, keeps the next apply from launching
/// again.
#[test]
fn kill_9_of_apply_mid_rollout_converges_without_acting_twice() {
    let trials: usize = std::env::var("POOLWRIGHT_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let m = moto();
    let first = World::beside(&m.url, tempfile::tempdir().unwrap());
    let plugin = Plugin::start_with_env(
        &m.url,
        first.dir.path(),
        &[],
        &[("EC2_INSTANCES_LAUNCH_DELAY", "1")],
    );
    let aws = Aws::new(&m.url);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
    let mut kills = 0;
    for trial in 0..trials {
        let name = format!("crash-{trial}");
        // One plug-in for all trials; a directory of its own for each.
        let mut w = World::beside(&m.url, tempfile::tempdir().unwrap());
        w.plugin_log = first.plugin_log.clone();
        w.provider(&plugin.url, "");
        w.pool(&name, 3, 0, 1, 1);
        w.apply();
        w.pool(&name, 3, 1, 1, 1);
        // Kill it once or twice, at random moments of the rollout.
        for _ in 0..rng.random_range(1..=2) {
            let mut child = w
                .command(&[
                    "apply",
                    "config",
                    "--auto-approve",
                    "--events",
                    "events.jsonl",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(rng.random_range(200..4000)));
            if child.try_wait().unwrap().is_none() {
                kills += 1;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        w.apply();
        // The resumed create was the same request under the same key: the
        // plug-in never had to refuse a second launch (409, its size guard).
        let refused: Vec<Value> = w
            .events()
            .into_iter()
            .filter(|e| {
                e["event"] == "step_failed"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("conflict"))
            })
            .collect();
        assert!(
            refused.is_empty(),
            "trial {trial}: a create was sent again under a new key: {refused:#?}"
        );
        let (ever, running, gone) = moto_view(&w, &name, &World::hash(1));
        let all = aws.pool_instances(&name);
        assert_eq!(
            (ever, running, gone.len()),
            (6, 3, 3),
            "trial {trial}: 3 originals replaced once each: {all:?}\nplug-in log:\n{}",
            plugin.log_text()
        );
        let (code, text) = w.plan_exit();
        assert_eq!(code, Some(0), "trial {trial}: {text}");
    }
    assert!(
        kills >= trials / 2,
        "most trials killed apply mid-rollout ({kills} kills in {trials} trials)"
    );
}

fn hup(d: &daemon::Daemon) {
    let ok = Command::new("kill")
        .args(["-HUP", &d.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// The daemon rolls an http pool on a commit, keeps going when the plug-in is
/// down (saying so, with the call and the error), and picks up a rotated token.
#[test]
fn the_daemon_rolls_on_a_commit_and_reports_a_plugin_that_is_down() {
    let m = moto();
    let w = World::beside(&m.url, tempfile::tempdir().unwrap());
    let token = w.dir.path().join("plugin.token");
    std::fs::write(&token, "first-token\n").unwrap();
    let mut plugin = Plugin::start(
        &m.url,
        w.dir.path(),
        &["--token-file", token.to_str().unwrap()],
    );
    w.provider(&plugin.url, &format!("  tokenFile: {}\n", token.display()));
    w.pool("web", 3, 0, 1, 0);
    w.write(
        "config/sim.yaml",
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, speed: 100}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: local}\nspec:\n  providerRef: sim\n  size: 1\n  template: {image: img-1}\n",
    );
    let config = w.dir.path().join("config");
    git(&config, &["init", "-q", "-b", "main"]);
    git(&config, &["add", "."]);
    git(&config, &["commit", "-q", "-m", "web on ami 0"]);
    let d = daemon::Daemon::start(w.dir.path(), &["--git-committed-only"]);
    let in_sync = |s: &Value, pool: &str| {
        s["pools"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["name"] == pool && p["state"] == "in-sync")
        })
    };
    d.wait_for("web in sync", Duration::from_secs(60), |s| {
        in_sync(s, "web") && in_sync(s, "local")
    });
    assert_eq!(moto_view(&w, "web", &World::hash(0)).1, 3);

    // The token rotates (both sides read the same file): nothing restarts.
    std::fs::write(&token, "second-token\n").unwrap();
    w.pool("web", 3, 1, 1, 0);
    git(&config, &["commit", "-q", "-am", "web on ami 1"]);
    d.wait_for("web rolled", Duration::from_secs(90), |s| {
        in_sync(s, "web")
            && d.events()
                .iter()
                .any(|e| e["pool"] == "web" && e["event"] == "rollout_completed")
    });
    let (ever, running, _) = moto_view(&w, "web", &World::hash(1));
    assert_eq!((ever, running), (6, 3));
    assert!(
        d.events().iter().all(|e| e["revision"].as_str().is_some()),
        "every event names the commit"
    );

    // The plug-in goes down: status says which call failed and why.
    plugin.kill();
    hup(&d);
    let s = d.wait_for("web in error", Duration::from_secs(60), |s| {
        s["pools"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["name"] == "web" && p["state"] == "error")
        })
    });
    let web = s["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .unwrap()
        .clone();
    let message = web["message"].as_str().unwrap();
    assert!(
        message.contains("Capabilities failed") || message.contains("Describe(1 pools) failed"),
        "{web:#}"
    );
    assert!(message.contains("could not connect"), "{web:#}");
    // Nothing else breaks: the simulator's pool still acts on a commit.
    w.write(
        "config/sim.yaml",
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, speed: 100}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: local}\nspec:\n  providerRef: sim\n  size: 2\n  template: {image: img-1}\n",
    );
    git(&config, &["commit", "-q", "-am", "local grows"]);
    d.wait_for("local grew", Duration::from_secs(60), |s| {
        s["pools"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| {
                p["name"] == "local" && p["state"] == "in-sync" && p["rollout"]["total"] == 2
            })
        })
    });
    // Back up: the next look finds web in sync again.
    plugin.restart();
    hup(&d);
    d.wait_for("web back in sync", Duration::from_secs(60), |s| {
        in_sync(s, "web")
    });
    assert!(d.terminate().success());
}

// ------------------------------------------------- https, mutual TLS, token, headers

/// A private CA with a server certificate for 127.0.0.1 (rustls checks the
/// subjectAltName, never the CN) and a client certificate CN=poolwright, and
/// a second CA that vouches for neither.
fn test_pki(dir: &Path) {
    server_pki(dir);
    test_ca(dir, "other-ca", "unrelated test CA");
    test_leaf(
        dir,
        "client",
        "poolwright",
        "ca",
        "extendedKeyUsage = clientAuth\n",
    );
    // reqwest's Identity::from_pem takes PKCS#8 (or SEC1/PKCS#1) keys, and
    // nothing else in the file: PKCS#8 whatever genpkey's default.
    openssl(
        dir,
        &[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            "client.key",
            "-out",
            "client.pk8.pem",
        ],
    );
}

/// `tests/support/tls_plugin.py`: a plug-in behind mutual TLS that wants a
/// bearer token and logs, per request, what it carried (and each refused
/// handshake). Killed on drop.
struct TlsPlugin {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    stderr: std::path::PathBuf,
}

impl TlsPlugin {
    fn start(pki: &Path, token: &str, dir: &Path) -> TlsPlugin {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tls_plugin.py");
        let log = dir.join("tls-plugin.log");
        let stderr = dir.join("tls-plugin.stderr");
        let child = Command::new(plugin::python())
            .arg(&script)
            .arg(pki.join("server.pem"))
            .arg(pki.join("server.key"))
            .arg(pki.join("ca.pem"))
            .env("TLS_PLUGIN_TOKEN", token)
            .env("TLS_PLUGIN_LOG", &log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} with {}: {e}",
                    script.display(),
                    plugin::python()
                )
            });
        let mut p = TlsPlugin {
            child,
            port: 0,
            log,
            stderr,
        };
        // The first line names the port; read on a thread, so a plug-in that
        // hangs fails the test instead of stalling it.
        let stdout = p.child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        p.port = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "the TLS plug-in did not say `LISTENING <port>` within 30 s (it said {line:?}):\n{}",
                    std::fs::read_to_string(&p.stderr).unwrap_or_default()
                )
            });
        p
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What it logged so far, one record per request or refused handshake.
    fn records(&self) -> Vec<Value> {
        support::jsonl::read(&self.log)
    }

    /// The records after the first `from`, once one of them matches `want`
    /// (a refused handshake is logged just after the client was told).
    fn records_after(&self, from: usize, what: &str, want: impl Fn(&Value) -> bool) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let new: Vec<Value> = self.records().into_iter().skip(from).collect();
            if new.iter().any(&want) {
                return new;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the TLS plug-in logged no {what} within 10 s; its log:\n{}\nits stderr:\n{}",
                self.log_text(),
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TlsPlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The production setup of README "HTTP plug-ins" through the real binary:
/// https to a plug-in whose certificate a private CA signed (`caFile`),
/// mutual TLS (`clientCert`/`clientKey`), the bearer token from `tokenEnv`,
/// and static `headers`. Then each piece taken away or wrong, one at a time:
/// the plan fails, says why, and the plug-in saw no request it should not have.
#[test]
fn https_with_a_private_ca_client_certificates_a_token_from_the_environment_and_static_headers() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    test_pki(&pki);
    let token = "tls-plugin-token-5b1f0c";
    let server = TlsPlugin::start(&pki, token, dir.path());
    let url = format!("https://127.0.0.1:{}", server.port);
    // Paths as YAML strings (JSON quoting is YAML too), whatever the temp dir is called.
    let quoted = |file: &str| serde_json::to_string(pki.join(file).to_str().unwrap()).unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let provider = |ca: &str, client: bool| {
        let client = if client {
            format!(
                "  clientCert: {}\n  clientKey: {}\n",
                quoted("client.pem"),
                quoted("client.pk8.pem")
            )
        } else {
            String::new()
        };
        write(
            "config/provider.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: tls}}\nspec:\n  type: http\n  url: {url}\n  caFile: {}\n{client}  tokenEnv: PLUGIN_TOKEN\n  headers: {{X-Team: platform}}\n  timeout: 10s\n  maxAttempts: 1\n",
                quoted(ca)
            ),
        );
    };
    write(
        "config/web.yaml",
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  providerRef: tls\n  size: 2\n  template:\n    image: img-1\n    instanceType: small\n",
    );
    // `poolwright plan`, with PLUGIN_TOKEN set to `token` or absent.
    let plan = |token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolwright"));
        cmd.args(["plan", "config", "--state-dir"])
            .arg(dir.path().join("state"))
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .env_remove("PLUGIN_TOKEN");
        if let Some(t) = token {
            cmd.env("PLUGIN_TOKEN", t);
        }
        let o = cmd.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let is_request = |r: &Value| r["event"] == "request";
    let refused_handshake = |r: &Value| r["event"] == "handshake-failed";
    let unobserved =
        "error: nodepool.web: provider \"tls\" could not be observed: Capabilities failed: ";

    // Everything right: the plug-in is asked, and the pool will be created.
    provider("ca.pem", true);
    let (code, out, err) = plan(Some(token));
    assert_eq!(
        code,
        Some(0),
        "plan failed:\n{out}{err}\nplug-in log:\n{}",
        server.log_text()
    );
    assert!(
        out.contains("# nodepool.web will be created") && out.contains("Plan: 1 to add"),
        "{out}{err}"
    );
    let seen = server.records_after(0, "describe", |r| r["path"] == "/v1/describe");
    for call in [("GET", "/v1/capabilities"), ("POST", "/v1/describe")] {
        assert!(
            seen.iter()
                .any(|r| r["method"] == call.0 && r["path"] == call.1 && r["status"] == 200),
            "{call:?} was not answered 200: {seen:#?}"
        );
    }
    for r in &seen {
        assert!(
            is_request(r),
            "a refused handshake with the right settings: {seen:#?}"
        );
        assert_eq!(r["authorization"], true, "no bearer token: {r}");
        assert_eq!(r["xTeam"], "platform", "the static header is missing: {r}");
        assert_eq!(
            r["clientCn"], "poolwright",
            "not the client certificate: {r}"
        );
    }

    // (a) No client certificate: the plug-in refuses the handshake, so no
    // request (and no token) reaches it.
    let from = server.records().len();
    provider("ca.pem", false);
    let (code, out, err) = plan(Some(token));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(unobserved)
            && err.contains("GET /v1/capabilities")
            && err.contains("CertificateRequired"),
        "{err}"
    );
    assert!(
        !format!("{out}{err}").contains("will be created"),
        "{out}{err}"
    );
    let seen = server.records_after(from, "refused handshake", refused_handshake);
    assert!(
        !seen.iter().any(is_request),
        "a request got through: {seen:#?}"
    );

    // (b) caFile is another CA: poolwright does not trust the plug-in's
    // certificate and hangs up during the handshake.
    let from = server.records().len();
    provider("other-ca.pem", true);
    let (code, out, err) = plan(Some(token));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(unobserved)
            && err.contains(&format!("could not connect to {url}/"))
            && err.contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
    assert!(
        !format!("{out}{err}").contains("will be created"),
        "{out}{err}"
    );
    let seen = server.records_after(from, "refused handshake", refused_handshake);
    assert!(
        !seen.iter().any(is_request),
        "a request got through: {seen:#?}"
    );

    // (c) PLUGIN_TOKEN unset: refused before anything is sent.
    provider("ca.pem", true);
    let from = server.records().len();
    let (code, out, err) = plan(None);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(unobserved)
            && err.contains("tokenEnv: environment variable PLUGIN_TOKEN is not set or empty"),
        "{err}"
    );
    assert!(
        !format!("{out}{err}").contains("will be created"),
        "{out}{err}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.records().len(),
        from,
        "a connection was made without a token:\n{}",
        server.log_text()
    );

    // ... and a wrong token: the plug-in answers 401, and poolwright quotes it.
    let wrong = "not-the-token-93c4";
    let (code, out, err) = plan(Some(wrong));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(unobserved)
            && err.contains(
                "GET /v1/capabilities answered 401 unauthorized: a valid bearer token is required"
            ),
        "{err}"
    );
    assert!(
        !format!("{out}{err}").contains("will be created"),
        "{out}{err}"
    );
    assert!(
        !format!("{out}{err}").contains(wrong),
        "the token was printed: {out}{err}"
    );
    let seen = server.records_after(from, "refused request", |r| r["status"] == 401);
    assert!(
        seen.iter().all(|r| is_request(r)
            && r["status"] == 401
            && r["authorization"] == true
            && r["clientCn"] == "poolwright"),
        "{seen:#?}"
    );
    let log = server.log_text();
    assert!(
        !log.contains(token) && !log.contains(wrong),
        "the plug-in's log holds a token: {log}"
    );
}

/// A plug-in whose describe lists 2 fewer nodes than the size it reports
/// (its test hook `EC2_INSTANCES_HIDE_NODES`): `apply` must end in an
/// error that names the pool, the call and its answer within the pool's
/// startup timeout, not wait without a word for nodes that never show up.
#[test]
fn a_describe_that_contradicts_itself_is_a_located_error_not_a_silent_wait() {
    let m = moto();
    let w = World::beside(&m.url, tempfile::tempdir().unwrap());
    let plugin = Plugin::start_with_env(
        &m.url,
        w.dir.path(),
        &[],
        &[("EC2_INSTANCES_HIDE_NODES", "2")],
    );
    w.provider(&plugin.url, "");
    let pool = |ami: usize| {
        w.write(
            "config/liar.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: liar}}\nspec:\n  providerRef: ec2\n  size: 4\n  template:\n    image: {}\n    instanceType: t3.micro\n  rollout:\n    maxSurge: 1\n    health: {{minReady: 0s, startupTimeout: 15s}}\n",
                AMIS[ami]
            ),
        )
    };
    pool(0);
    w.apply();
    // A roll: the measured case created nodes, then waited until killed.
    pool(1);
    let started = Instant::now();
    let mut child = w
        .command(&[
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The startup timeout, a look or two past it, and slack for a loaded
    // machine: past that, apply is waiting without a word.
    let bound = Duration::from_secs(15 + 60);
    while child.try_wait().unwrap().is_none() && started.elapsed() < bound {
        std::thread::sleep(Duration::from_millis(200));
    }
    let silent = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let events = w.events();
    assert!(
        !silent,
        "apply still waiting after {bound:?}:\n{text}\nevents: {events:#?}\nplug-in log:\n{}",
        plugin.log_text()
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    for want in ["liar", "describe", "answered size 5 but listed 3 node(s)"] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    assert!(
        events.iter().any(|e| e["event"] == "degraded"
            && e["pool"] == "liar"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("describe"))),
        "{events:#?}"
    );
}

/// A template field the plug-in does not act on is an error in `plan`
/// (exit 1, naming the field), not "1 to add" that `apply` then refuses; and
/// once the pool exists, a change to such a field is refused the same way.
#[test]
fn plan_says_a_plugin_would_refuse_a_template_field_it_does_not_act_on() {
    let (_m, _plugin, w) = setup(&[]);
    let with_version = |ami: usize| {
        format!(
            "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: kv}}\nspec:\n  providerRef: ec2\n  size: 1\n  template:\n    image: {}\n    instanceType: t3.micro\n    kubernetesVersion: \"1.31\"\n",
            AMIS[ami]
        )
    };
    w.write("config/kv.yaml", &with_version(0));
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("provider \"ec2\" does not act on template field(s) kubernetesVersion; it acts on: image, instanceType, plugin: apply would refuse the template"),
        "{text}"
    );
    assert!(!text.contains("1 to add"), "{text}");
    // Without the field the pool is created; adding it later is refused in plan too.
    w.pool("kv", 1, 0, 1, 0);
    w.apply();
    w.write("config/kv.yaml", &with_version(1));
    let (code, text) = w.plan_exit();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("does not act on template field(s) kubernetesVersion"),
        "{text}"
    );
}
