//! `provider type: aws` against a real AWS API (moto), driven as a user drives
//! it: `poolwright plan` / `apply` processes, credentials from the environment,
//! the endpoint in the Provider document. Invariants are checked from the event
//! log and the final state is read back from moto.

mod support;

use support::fault_proxy;
use support::moto;

use std::process::{Command, Output};
use std::sync::Arc;

use fault_proxy::{FaultProxy, Faults};
use moto::{Aws, MotoGuard, moto};
use poolwright::clock::SystemClock;
use poolwright::model::OpKey;
use poolwright::model::PoolSpec;
use poolwright::provider::Provider;
use poolwright::provider::aws::Aws as AwsProvider;
use serde_json::Value;

struct World {
    _moto: MotoGuard,
    aws: Aws,
    dir: tempfile::TempDir,
}

impl World {
    /// moto reset, a launch template `web-lt` with versions 1 and 2, and a
    /// Provider document pointing at `endpoint` (moto, or a proxy before it).
    fn new() -> World {
        let moto = moto();
        let aws = Aws::new(&moto.url);
        aws.seed_launch_template("web-lt", 2);
        let w = World {
            aws,
            dir: tempfile::tempdir().unwrap(),
            _moto: moto,
        };
        let url = w._moto.url.clone();
        w.provider(&url);
        w
    }

    fn provider(&self, endpoint: &str) {
        self.provider_with(endpoint, 8);
    }

    fn provider_with(&self, endpoint: &str, attempts: u32) {
        self.write(
            "config/provider.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: aws}}\nspec:\n  type: aws\n  region: {}\n  endpointUrl: {endpoint}\n  maxAttempts: {attempts}\n  operationTimeout: 60s\n  pollInterval: 100ms\n",
                moto::REGION
            ),
        );
    }

    /// The `web` pool: `size` nodes on launch template version `version`.
    fn pool(&self, size: u32, version: u32, surge: u32, unavailable: u32, extra: &str) {
        self.write(
            "config/web.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: aws\n  size: {size}\n  template:\n    tags: {{team: web}}\n    aws:\n      launchTemplate: {{name: web-lt, version: \"{version}\"}}\n  aws: {{groupName: web-asg, availabilityZones: [{}]}}\n  rollout:\n    maxSurge: {surge}\n    maxUnavailable: {unavailable}\n    health: {{minReady: 0s, startupTimeout: 2m}}\n{extra}",
                moto::ZONE
            ),
        );
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolwright"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("POOLWRIGHT_STATE_DIR", self.dir.path().join("state"))
            .env("NO_COLOR", "1")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_REGION");
        for (k, v) in moto::ENV {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn apply(&self, extra: &[&str]) -> String {
        let mut args = vec![
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ];
        args.extend_from_slice(extra);
        let o = self.run(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(0), "apply failed:\n{text}");
        text
    }

    fn plan(&self, extra: &[&str]) -> (Option<i32>, String) {
        let mut args = vec!["plan", "config", "--detailed-exitcode"];
        args.extend_from_slice(extra);
        let o = self.run(&args);
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

    fn count(&self, event: &str) -> usize {
        self.events().iter().filter(|e| e["event"] == event).count()
    }

    fn group(&self) -> moto::GroupState {
        self.aws
            .group("web-asg")
            .expect("group web-asg exists in moto")
    }
}

/// Every observation the executor reported stayed within the budget.
fn assert_budget(events: &[Value], size: u64, surge: u64, unavailable: u64) {
    let mut seen = 0;
    for e in events.iter().filter(|e| e["pool"] == "web") {
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
    assert!(
        seen > 3,
        "the rollout reported too few observations ({seen})"
    );
}

/// Each instance's template tag: all on one template, and not `old`.
fn assert_all_on_new_template(w: &World, old: &[Option<String>]) -> Vec<Option<String>> {
    let g = w.group();
    let tags = w.aws.instance_templates(&g.instances);
    assert!(
        tags.iter().all(|t| t.is_some()),
        "untagged instance: {tags:?}"
    );
    assert!(
        tags.windows(2).all(|p| p[0] == p[1]),
        "mixed templates: {tags:?}"
    );
    assert!(
        tags.iter().all(|t| !old.contains(t)),
        "an instance is still on the old template: {tags:?}"
    );
    tags
}

#[test]
fn create_scale_up_and_down_then_nothing_to_do() {
    let w = World::new();
    w.pool(3, 1, 1, 0, "");
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("Plan: 1 to add"), "{text}");
    w.apply(&[]);

    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (3, 3), "{g:?}");
    assert!(
        g.tags
            .contains(&("poolwright.io/managed-by".into(), "poolwright".into()))
    );
    assert!(
        g.tags
            .contains(&("poolwright.io/pool".into(), "web".into()))
    );
    assert!(g.tags.contains(&("team".into(), "web".into())));
    assert_eq!(
        g.unprotected, 0,
        "every instance is protected from scale-in"
    );
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(0), "a fresh group is no drift:\n{text}");

    w.pool(5, 1, 1, 0, "");
    w.apply(&[]);
    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (5, 5), "{g:?}");

    // Shrinking goes through the executor: poolwright picks and terminates.
    w.pool(2, 1, 1, 1, "");
    w.apply(&[]);
    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (2, 2), "{g:?}");
    assert_eq!(w.count("terminate_requested"), 3);
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(0), "{text}");
}

fn roll(surge: u32, unavailable: u32) {
    let w = World::new();
    w.pool(6, 1, surge, unavailable, "");
    w.apply(&[]);
    let before = w.aws.instance_templates(&w.group().instances);
    assert_eq!(before.len(), 6);

    w.pool(6, 2, surge, unavailable, "");
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("6 nodes"), "{text}");
    w.apply(&[]);

    assert_budget(&w.events(), 6, surge as u64, unavailable as u64);
    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (6, 6), "{g:?}");
    assert_eq!(g.launch_template_version.as_deref(), Some("2"));
    assert_all_on_new_template(&w, &before);
    assert_eq!(
        w.count("terminate_requested"),
        6,
        "each old node terminated once"
    );
    assert_eq!(w.count("rollout_completed"), 1);
    // The surge room is given back once the rollout ends.
    assert_eq!((g.min, g.max), (0, 6), "{g:?}");
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn template_change_rolls_six_nodes_with_surge_2() {
    roll(2, 0);
}

#[test]
fn template_change_rolls_six_nodes_with_unavailable_2() {
    roll(0, 2);
}

#[test]
fn desired_capacity_changed_behind_our_back_is_reported_and_fixed() {
    let w = World::new();
    w.pool(4, 1, 1, 1, "");
    w.apply(&[]);
    w.aws.set_desired("web-asg", 7);
    assert_eq!(w.group().instances.len(), 7);

    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("size"), "{text}");
    assert!(text.contains("7 -> 4") || text.contains("7 → 4"), "{text}");
    w.apply(&[]);
    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (4, 4), "{g:?}");
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn a_missing_file_deletes_nothing_and_foreign_groups_are_left_alone() {
    let w = World::new();
    w.pool(2, 1, 1, 0, "");
    w.apply(&[]);
    std::fs::remove_file(w.dir.path().join("config/web.yaml")).unwrap();

    // Without --prune: left alone, and apply does not touch it.
    let (_, text) = w.plan(&[]);
    assert!(text.contains("pruning is disabled"), "{text}");
    w.apply(&[]);
    assert_eq!(w.group().instances.len(), 2);

    // A group poolwright did not create, named like a pool without adopt: reported, untouched.
    w.aws.create_foreign_group("legacy", "web-lt", 2);
    w.write(
        "config/legacy.yaml",
        &format!(
            "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: legacy}}\nspec:\n  providerRef: aws\n  size: 3\n  template:\n    aws:\n      launchTemplate: {{name: web-lt, version: \"1\"}}\n  aws: {{availabilityZones: [{}]}}\n",
            moto::ZONE
        ),
    );
    let (_, text) = w.plan(&[]);
    assert!(text.contains("adopt"), "{text}");
    w.apply(&[]);
    let legacy = w.aws.group("legacy").unwrap();
    assert_eq!(legacy.instances.len(), 2, "a foreign group is not resized");
    assert!(
        !legacy
            .tags
            .iter()
            .any(|(k, _)| k.starts_with("poolwright.io/"))
    );

    // Explicit adoption tags it and protects its instances; then it is managed.
    let text = std::fs::read_to_string(w.dir.path().join("config/legacy.yaml")).unwrap();
    w.write("config/legacy.yaml", &format!("{text}  adopt: true\n"));
    w.apply(&[]);
    let legacy = w.aws.group("legacy").unwrap();
    assert!(
        legacy
            .tags
            .contains(&("poolwright.io/managed-by".into(), "poolwright".into()))
    );
    assert_eq!(legacy.unprotected, 0, "{legacy:?}");
    assert_eq!(legacy.instances.len(), 3, "{legacy:?}");

    // With --prune, the managed pool whose file is gone is deleted.
    w.apply(&["--prune"]);
    assert!(w.aws.group("web-asg").is_none(), "pruned");
    assert!(w.aws.group("legacy").is_some());
}

#[test]
fn throttling_and_lost_answers_are_retried_without_breaking_the_budget() {
    let w = World::new();
    let proxy = FaultProxy::start(
        &w._moto.url,
        Faults {
            throttle_every: 11,
            lose_answer_every: 13,
        },
    );
    w.provider(&proxy.url);
    w.pool(6, 1, 2, 0, "");
    w.apply(&[]);
    assert_eq!(w.group().instances.len(), 6);
    let before = w.aws.instance_templates(&w.group().instances);

    w.pool(6, 2, 2, 0, "");
    w.apply(&[]);
    assert_budget(&w.events(), 6, 2, 0);
    let g = w.group();
    assert_eq!((g.desired, g.instances.len()), (6, 6), "{g:?}");
    assert_all_on_new_template(&w, &before);
    assert_eq!(w.count("terminate_requested"), 6);
    use std::sync::atomic::Ordering::SeqCst;
    let (throttled, lost) = (
        proxy.counters.throttled.load(SeqCst),
        proxy.counters.lost.load(SeqCst),
    );
    assert!(
        throttled >= 5 && lost >= 3,
        "faults injected: {throttled} throttled, {lost} lost"
    );
}

#[test]
fn an_unreachable_endpoint_names_the_call_and_the_answer() {
    let w = World::new();
    w.provider_with(&format!("http://127.0.0.1:{}", moto::free_port()), 1);
    w.pool(2, 1, 1, 0, "");
    let (code, text) = w.plan(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("DescribeAutoScalingGroups"), "{text}");
    assert!(text.contains("could not reach the endpoint"), "{text}");
}

/// Observation batches: many pools cost a few calls, not one per pool.
#[test]
fn a_resync_of_120_pools_takes_a_handful_of_calls() {
    let w = World::new();
    let provider = AwsProvider::with_sdk_config(
        "aws",
        &Default::default(),
        moto::sdk_config(&w._moto.url),
        Arc::new(SystemClock),
    );
    let names: Vec<String> = (0..120).map(|i| format!("pool-{i:03}")).collect();
    let specs: Vec<PoolSpec> = names
        .iter()
        .map(|n| {
            let mut spec: PoolSpec = serde_json::from_value(serde_json::json!({
                "name": n, "size": 1,
                "template": {"launchTemplate": {"name": "web-lt", "version": "1"}},
                "placement": {"availabilityZones": [moto::ZONE]}
            }))
            .unwrap();
            spec.size = 1;
            spec
        })
        .collect();
    provider.bind_pools(&specs);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for s in &specs {
            provider
                .create_pool(s, &OpKey::derive(&["test"]))
                .await
                .unwrap();
        }
        provider.calls().reset();
        let pools = provider.describe_pools(&names).await.unwrap();
        assert_eq!(pools.len(), 120);
        assert!(pools.iter().all(|p| p.nodes.len() == 1));
    });
    let calls = provider.calls().snapshot();
    // 3 DescribeAutoScalingGroups (50 names each) + 1 DescribeInstances.
    assert_eq!(
        calls.get("Auto Scaling.DescribeAutoScalingGroups"),
        Some(&3),
        "{calls:?}"
    );
    assert_eq!(calls.get("EC2.DescribeInstances"), Some(&1), "{calls:?}");
    assert_eq!(provider.calls().total(), 4, "{calls:?}");
}

/// Images that follow a channel on AWS, with a real `poolwright run`: each
/// image an SSM parameter names gets one launch template version made from
/// the pool's (found again, never made twice), and rolls the group within its
/// budget; an image younger than `minReleaseAge` is held and said so; a
/// recall rolls the group back to the previous image's version; the versions
/// poolwright made are cleaned up, the newest 3 kept.
#[test]
fn an_ssm_parameter_rolls_the_group_through_versions_poolwright_makes_and_a_recall_rolls_it_back() {
    let w = World::new();
    let amis = w.aws.images();
    let param = "/test/eks/1.31/image_id";
    w.aws.put_parameter(param, &amis[0]);
    let channel = |age: &str| {
        format!(
            "apiVersion: poolwright/v1\nkind: ImageChannel\nmetadata: {{name: eks}}\nspec:\n  source: {{aws: {{provider: aws, ssmParameter: {param}}}}}\n  minReleaseAge: {age}\n  interval: 10s\n"
        )
    };
    w.write("config/channel.yaml", &channel("0s"));
    w.write(
        "config/web.yaml",
        &format!(
            "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: aws\n  size: 3\n  template:\n    image: {{channel: eks}}\n    aws:\n      launchTemplate: {{name: web-lt, version: \"1\"}}\n  aws: {{groupName: web-asg, availabilityZones: [{}]}}\n  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    health: {{minReady: 0s, startupTimeout: 2m}}\n",
            moto::ZONE
        ),
    );
    let d = support::daemon::Daemon::start_with_env(w.dir.path(), &[], moto::ENV);
    let in_sync = |what: &str, version: &str| {
        d.wait_for(what, std::time::Duration::from_secs(90), |s| {
            s["pools"][0]["state"] == "in-sync"
                && w.group().launch_template_version.as_deref() == Some(version)
        });
    };
    in_sync("web created on the version made for the first image", "3");
    let made = w.aws.lt_versions("web-lt");
    assert_eq!(made.len(), 3, "one version made: {made:?}");
    assert_eq!(made[2].2, amis[0], "with the parameter's image: {made:?}");
    assert!(made[2].1.starts_with("poolwright pool=web "), "{made:?}");

    // A source that fails keeps the image in force and says why: an SSM
    // value that is not an AMI id, then an AMI that does not exist.
    for (value, why) in [
        ("not-an-ami", "which is not an AMI id"),
        ("ami-0123456789abcdef0", "does not exist"),
    ] {
        w.aws.put_parameter(param, value);
        d.wait_for(
            "the source fails, said in status",
            std::time::Duration::from_secs(30),
            |s| {
                s["images"][0]["error"]
                    .as_str()
                    .is_some_and(|e| e.contains(why))
            },
        );
        assert!(
            d.events()
                .iter()
                .any(|e| e["event"] == "image_source_failed"
                    && e["message"].as_str().unwrap().contains(why)),
            "an event says why"
        );
        assert_eq!(w.group().launch_template_version.as_deref(), Some("3"));
        assert_eq!(w.aws.lt_versions("web-lt").len(), 3, "no version made");
    }

    // Four more images, one after another: a version each, a roll each.
    for (i, ami) in amis[1..5].iter().enumerate() {
        let before = w.aws.instance_templates(&w.group().instances);
        w.aws.put_parameter(param, ami);
        in_sync(&format!("web rolled to {ami}"), &(4 + i).to_string());
        assert_all_on_new_template(&w, &before);
    }
    let versions: Vec<i64> = w.aws.lt_versions("web-lt").iter().map(|v| v.0).collect();
    assert_eq!(
        versions,
        vec![1, 2, 4, 5, 6, 7],
        "the oldest version made (3) was cleaned up, the newest 3 besides the one in use kept; the file's own versions untouched"
    );

    // An image younger than minReleaseAge is held, and the plan says until when.
    w.write("config/channel.yaml", &channel("1h"));
    let young = w.aws.register_image("eks-node-young");
    w.aws.put_parameter(param, &young);
    d.wait_for(
        "the young image is seen",
        std::time::Duration::from_secs(60),
        |_| {
            let (_, body) = d.get("/v1/images");
            let v: Value = serde_json::from_str(&body).unwrap();
            v["channels"][0]["record"]["newest"]["image"] == young.as_str()
        },
    );
    let (code, text) = w.plan(&["--state-dir", "state"]);
    assert_eq!(code, Some(0), "held: nothing to roll\n{text}");
    assert!(
        text.contains(&format!("{young} is not eligible until")),
        "{text}"
    );
    assert_eq!(w.group().launch_template_version.as_deref(), Some("7"));

    // A recall of the image in force: back to the previous one, whose
    // version is found again (none is made).
    let o = w.run(&[
        "image",
        "recall",
        &amis[4],
        "--reason",
        "kernel bug",
        "--state-dir",
        "state",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    in_sync("web rolled back to the previous image", "6");
    let versions = w.aws.lt_versions("web-lt");
    assert_eq!(
        versions.last().unwrap().0,
        7,
        "no version made: {versions:?}"
    );
    assert_budget(&d.events(), 3, 1, 0);
    let (_, body) = d.get("/v1/images");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["channels"][0]["record"]["inForce"]["image"],
        amis[3].as_str()
    );
    assert!(v["recalled"][&amis[4]].is_object(), "{v:#}");
}
