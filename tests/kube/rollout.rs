//! A simulator pool with a cluster attached, rolled by `poolwright apply` as a
//! user runs it, against a real control plane (kine + kube-apiserver + kwok).
//! The simulator's nodes register as Node objects (kwok makes them Ready); the
//! test plays a Deployment, the scheduler and the disruption controller for a
//! PDB-protected app (placing replicas on schedulable Ready nodes, keeping the
//! budget's status), and records how many replicas were available throughout.

use crate::support::kube as kube_cp;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube_cp::ControlPlane;
use serde_json::Value;

const REPLICAS: i64 = 4;

struct World {
    cp: ControlPlane,
    dir: tempfile::TempDir,
}

impl World {
    /// A control plane, its Cluster document and the simulator (its spec
    /// extended by `sim_extra`, lines indented by two spaces), no pool yet.
    fn bare(sim_extra: &str) -> World {
        let cp = ControlPlane::start();
        let dir = tempfile::tempdir().unwrap();
        let w = World { cp, dir };
        w.write("config/cluster.yaml", &w.cp.cluster_doc("test"));
        w.write(
            "config/provider.yaml",
            &format!("apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec:\n  type: sim\n  seed: 3\n  speed: 20\n  bootTime: {{fixed: 20s}}\n  healthDelay: {{fixed: 10s}}\n{sim_extra}"),
        );
        w
    }

    fn new(drain: &str) -> World {
        let w = World::bare("");
        w.pool("img-1", drain);
        w
    }

    fn pool(&self, image: &str, drain: &str) {
        self.pool_with(image, drain, "Allow");
    }

    fn pool_with(&self, image: &str, drain: &str, policy: &str) {
        self.write(
            "config/web.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  clusterRef: test\n  size: 4\n  template: {{image: {image}, instanceType: m7i.large}}\n  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    health: {{minReady: 0s, startupTimeout: 2m}}\n    drain: {drain}\n  disruption: {{policy: {policy}}}\n"
            ),
        );
    }

    /// Create the pool, then let poolwright look at it through the cluster with
    /// disruptions blocked: its nodes register as Node objects and nothing is
    /// replaced yet. Then the app (the test's controllers) gets all replicas up.
    fn prepare(&self, drain: &str, min_available: i64) -> Running {
        let (ok, text) = self.apply();
        assert!(ok, "{text}");
        self.pool_with("img-2", drain, "Block");
        let rt = rt();
        let mut registered = 0;
        for _ in 0..40 {
            let (_, text) = self.apply();
            registered = registered_nodes(&rt, &self.cp).len();
            if registered == 4 {
                break;
            }
            assert!(text.contains("blocked by disruption policy"), "{text}");
            std::thread::sleep(Duration::from_millis(500));
        }
        assert_eq!(registered, 4, "the simulator's nodes did not register");
        let client = rt.block_on(self.cp.client());
        let stop = Arc::new(AtomicBool::new(false));
        let fewest = Arc::new(AtomicI64::new(i64::MAX));
        let controllers = rt.spawn(play_controllers(
            client,
            min_available,
            stop.clone(),
            fewest.clone(),
        ));
        let started = std::time::Instant::now();
        while fewest.load(Ordering::SeqCst) == i64::MAX {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the app never came up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        fewest.store(REPLICAS, Ordering::SeqCst);
        self.pool_with("img-2", drain, "Allow");
        Running {
            rt,
            stop,
            fewest,
            controllers,
        }
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn apply(&self) -> (bool, String) {
        let o: Output = Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .args([
                "apply",
                "config",
                "--auto-approve",
                "--events",
                "events.jsonl",
            ])
            .current_dir(self.dir.path())
            .env("POOLWRIGHT_STATE_DIR", self.dir.path().join("state"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    fn events(&self) -> Vec<Value> {
        crate::support::jsonl::read(&self.dir.path().join("events.jsonl"))
    }

    fn count(&self, event: &str) -> usize {
        self.events().iter().filter(|e| e["event"] == event).count()
    }
}

/// The test's controllers, running while a rollout happens.
struct Running {
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    fewest: Arc<AtomicI64>,
    controllers: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stop the controllers; the fewest replicas seen running meanwhile.
    fn finish(self) -> (i64, tokio::runtime::Runtime) {
        self.stop.store(true, Ordering::SeqCst);
        self.rt.block_on(self.controllers).unwrap();
        (self.fewest.load(Ordering::SeqCst), self.rt)
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The app's controllers, played by the test until `stop`: keep REPLICAS pods
/// of app=web on schedulable Ready nodes, one new pod per round (like a
/// rolling Deployment), and keep the PDB's status as the disruption
/// controller would. Records the fewest running replicas once all were up.
async fn play_controllers(
    client: kube::Client,
    min_available: i64,
    stop: Arc<AtomicBool>,
    fewest: Arc<AtomicI64>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let mut serial = 0;
    let mut all_up = false;
    while !stop.load(Ordering::SeqCst) {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        let live: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let up = list.items.iter().filter(|p| running(p)).count() as i64;
        if up >= REPLICAS {
            all_up = true;
        }
        if all_up {
            fewest.fetch_min(up, Ordering::SeqCst);
        }
        // The disruption controller (the budget's minimum may be edited).
        let current = pdbs.get("web").await.unwrap();
        let generation = current.metadata.generation.unwrap_or(1);
        let min_available = current
            .spec
            .as_ref()
            .and_then(|s| s.min_available.as_ref())
            .map_or(min_available, |m| match m {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => i64::from(*n),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => {
                    min_available
                }
            });
        let status = serde_json::json!({"status": {
            "observedGeneration": generation,
            "disruptionsAllowed": (up - min_available).max(0),
            "currentHealthy": up,
            "desiredHealthy": min_available,
            "expectedPods": REPLICAS,
        }});
        pdbs.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        // The ReplicaSet and the scheduler: one missing replica per round, on the
        // schedulable Ready node with the fewest replicas.
        if (live.len() as i64) < REPLICAS {
            let ready: Vec<String> = nodes
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|n| {
                    !n.spec
                        .as_ref()
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false)
                })
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            let load = |node: &String| {
                live.iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(node))
                    .count()
            };
            if let Some(node) = ready.iter().min_by_key(|n| load(n)) {
                serial += 1;
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("web-{serial}"), "labels": {"app": "web"}},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "web", "image": "web:1"}],
                    },
                }))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn registered_nodes(rt: &tokio::runtime::Runtime, cp: &ControlPlane) -> BTreeSet<String> {
    rt.block_on(async {
        Api::<Node>::all(cp.client().await)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect()
    })
}

#[test]
fn a_rollout_cordons_drains_and_replaces_real_nodes_within_the_pdb() {
    let w = World::new("{timeout: 2m}");
    let running = w.prepare("{timeout: 2m}", 3);
    let (ok, text) = w.apply();
    let (fewest, rt) = running.finish();
    assert!(ok, "{text}");

    assert_eq!(w.count("node_cordoned"), 4, "{text}");
    assert_eq!(w.count("node_drained"), 4);
    assert_eq!(w.count("terminate_requested"), 4);
    assert!(
        fewest >= 3,
        "the PDB's minimum of 3 was broken: {fewest} running"
    );
    // The old Node objects are gone; four new ones are registered.
    let nodes = registered_nodes(&rt, &w.cp);
    let replaced: BTreeSet<String> = w
        .events()
        .iter()
        .filter(|e| e["event"] == "terminate_requested")
        .filter_map(|e| e["node"].as_str().map(str::to_string))
        .collect();
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    assert!(nodes.is_disjoint(&replaced), "{nodes:?} vs {replaced:?}");
}

/// PDB never allows a disruption: after `drain.timeout`, onTimeout decides.
fn stuck_drain(on_timeout: &str) -> (World, bool, String, tokio::runtime::Runtime) {
    let drain = format!("{{timeout: 3s, onTimeout: {on_timeout}}}");
    let w = World::new(&drain);
    // minAvailable = all replicas: no eviction is ever allowed.
    let running = w.prepare(&drain, REPLICAS);
    let (ok, text) = w.apply();
    let (_, rt) = running.finish();
    (w, ok, text, rt)
}

/// Issue 14 1d, as measured: after a drain timed out (`onTimeout: fail`, a PDB
/// allowing nothing), the operator relaxes the PDB and runs `poolwright rollout
/// resume` then `apply`, as poolwright's message advises: the rollout must
/// finish (it used to sit at its maximum with the failed drain's mark, forever).
/// And an `apply` on the Degraded pool, before the resume, must change nothing.
#[test]
fn resuming_after_a_drain_timeout_finishes_the_rollout() {
    let drain = "{timeout: 4s, onTimeout: fail}";
    let w = World::new(drain);
    let running = w.prepare(drain, REPLICAS);
    let (ok, text) = w.apply();
    assert!(!ok && text.contains("Degraded"), "{text}");
    assert_eq!(w.count("degraded"), 1);

    // Applying again changes nothing while the rollout waits for a human.
    let before = w.events().len();
    let (ok, text) = w.apply();
    assert!(!ok, "{text}");
    assert!(text.contains("rollout resume web"), "{text}");
    let after: Vec<Value> = w.events()[before..].to_vec();
    assert!(
        after.iter().all(|e| !matches!(
            e["event"].as_str(),
            Some("pool_scaled" | "node_create_requested" | "terminate_requested" | "drain_started")
        )),
        "an apply on a Degraded pool acted: {after:#?}"
    );

    // The operator relaxes the budget, resumes, applies.
    running.rt.block_on(async {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(w.cp.client().await, "default");
        let patch = serde_json::json!({"spec": {"minAvailable": REPLICAS - 1}});
        pdbs.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    });
    let o = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(["rollout", "resume", "web"])
        .current_dir(w.dir.path())
        .env("POOLWRIGHT_STATE_DIR", w.dir.path().join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{said}");
    assert!(said.contains("tried again"), "{said}");
    let mut apply = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args([
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .current_dir(w.dir.path())
        .env("POOLWRIGHT_STATE_DIR", w.dir.path().join("state"))
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = apply.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = apply.kill();
            let tail: Vec<Value> = w.events().into_iter().rev().take(8).collect();
            panic!(
                "apply did not finish within 2 minutes after the resume; last events: {tail:#?}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (fewest, rt) = running.finish();
    assert!(status.success(), "the resumed apply failed");
    assert_eq!(w.count("rollout_completed"), 1);
    assert_eq!(w.count("terminate_requested"), 4, "every old node replaced");
    assert!(fewest >= REPLICAS - 1, "the relaxed PDB held: {fewest}");
    assert_eq!(cordoned(&rt, &w.cp), 0, "no node is left cordoned");
}

fn cordoned(rt: &tokio::runtime::Runtime, cp: &ControlPlane) -> usize {
    rt.block_on(async {
        Api::<Node>::all(cp.client().await)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            })
            .count()
    })
}

#[test]
fn drain_timeout_fail_stops_degraded_with_the_node_cordoned() {
    let (w, ok, text, rt) = stuck_drain("fail");
    assert!(!ok, "apply must fail:\n{text}");
    assert!(text.contains("Degraded"), "{text}");
    assert!(text.contains("PodDisruptionBudget default/web"), "{text}");
    // Who blocks, named: the pod and its budget, in the event and the error.
    let blocked: Vec<String> = w
        .events()
        .iter()
        .filter(|e| e["event"] == "drain_blocked")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        blocked
            .iter()
            .any(|m| m.contains("cannot evict pod default/web-")
                && m.contains("PodDisruptionBudget default/web (disruptions allowed: 0)")),
        "{blocked:#?}"
    );
    assert!(text.contains("cannot evict pod default/web-"), "{text}");
    assert_eq!(w.count("degraded"), 1);
    assert_eq!(w.count("terminate_requested"), 0, "nothing was terminated");
    assert_eq!(cordoned(&rt, &w.cp), 1, "the node stays cordoned");
}

#[test]
fn drain_timeout_force_deletes_the_pods_and_carries_on() {
    let (w, ok, text, _rt) = stuck_drain("force");
    assert!(ok, "{text}");
    assert_eq!(w.count("drain_forced"), 4, "{text}");
    assert_eq!(w.count("terminate_requested"), 4);
}

#[test]
fn drain_timeout_quarantine_leaves_the_node_cordoned_and_carries_on() {
    let (w, _ok, text, rt) = stuck_drain("quarantine");
    assert!(w.count("node_quarantined") >= 1, "{text}");
    assert_eq!(
        w.count("terminate_requested"),
        0,
        "a quarantined node is kept"
    );
    assert!(cordoned(&rt, &w.cp) >= 1);
}

/// `rollout.order: zone` with nodes in three zones, the zones as the Node
/// objects say (`topology.kubernetes.io/zone`, set here apart from the
/// provider's own zones): every zone's nodes are drained as one block, the
/// next zone's first drain after the last node of the one before drained.
#[test]
fn order_zone_finishes_each_zone_before_the_next() {
    let w = World::bare("  zones: [sim-a, sim-b]\n");
    let pool = |image: &str, policy: &str| {
        w.write(
            "config/web.yaml",
            &format!(
                "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  clusterRef: test\n  size: 6\n  template: {{image: {image}}}\n  rollout:\n    order: zone\n    maxSurge: 2\n    maxUnavailable: 0\n    health: {{minReady: 0s, startupTimeout: 2m}}\n  disruption: {{policy: {policy}}}\n"
            ),
        )
    };
    pool("img-1", "Allow");
    let (ok, text) = w.apply();
    assert!(ok, "{text}");
    pool("img-2", "Block");
    let rt = rt();
    let mut nodes = BTreeSet::new();
    for _ in 0..40 {
        w.apply();
        nodes = registered_nodes(&rt, &w.cp);
        if nodes.len() == 6 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(nodes.len(), 6, "the simulator's nodes did not register");
    // Three zones of two nodes, as the cluster labels them.
    let zones = ["east", "west", "north"];
    let zone_of: std::collections::BTreeMap<String, &str> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), zones[i % 3]))
        .collect();
    rt.block_on(async {
        let api = Api::<Node>::all(w.cp.client().await);
        for (n, z) in &zone_of {
            let patch =
                serde_json::json!({"metadata": {"labels": {"topology.kubernetes.io/zone": z}}});
            api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    });
    pool("img-2", "Allow");
    let (ok, text) = w.apply();
    assert!(ok, "{text}");
    let events = w.events();
    let drained: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "drain_started")
        .filter_map(|e| e["node"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        drained.iter().collect::<BTreeSet<_>>(),
        nodes.iter().collect::<BTreeSet<_>>(),
        "{text}"
    );
    let mut seen: Vec<&str> = Vec::new();
    for id in &drained {
        let z = zone_of[id];
        if seen.last() != Some(&z) {
            assert!(
                !seen.contains(&z),
                "zone {z} again after {seen:?}: {drained:?}"
            );
            seen.push(z);
        }
    }
    assert_eq!(seen.len(), 3, "{drained:?}");
    let at = |event: &str, id: &str| {
        events
            .iter()
            .position(|e| e["event"] == event && e["node"] == id)
            .unwrap_or_else(|| panic!("no {event} of {id}"))
    };
    for pair in drained.windows(2) {
        if zone_of[&pair[0]] != zone_of[&pair[1]] {
            assert!(
                at("node_drained", &pair[0]) < at("drain_started", &pair[1]),
                "{} of the zone before was still draining when {} began",
                pair[0],
                pair[1]
            );
        }
    }
}

/// A pod annotated `poolwright.io/do-not-disrupt: "true"` holds its node
/// through a roll: the node is never cordoned, the roll completes with the
/// hold named (the pod, in `node_held` and the completion); with the
/// annotation removed, the next apply replaces the node.
#[test]
fn a_pod_annotated_do_not_disrupt_holds_its_node_until_the_annotation_goes() {
    let w = World::new("{timeout: 2m}");
    let app = w.prepare("{timeout: 2m}", 3);
    // The node of one running replica, and that replica, annotated.
    let (pod, node) = app.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(w.cp.client().await, "default");
        let p = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|p| running(p) && p.spec.as_ref().and_then(|s| s.node_name.clone()).is_some())
            .expect("a running replica");
        let name = p.metadata.name.clone().unwrap();
        let patch = serde_json::json!({"metadata": {"annotations": {"poolwright.io/do-not-disrupt": "true"}}});
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        (name, p.spec.unwrap().node_name.unwrap())
    });
    let (ok, text) = w.apply();
    assert!(ok, "{text}");
    let events = w.events();
    let held: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "node_held")
        .collect();
    assert_eq!(held.len(), 1, "{text}");
    assert_eq!(held[0]["node"], node.as_str());
    let why = held[0]["message"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "pod default/{pod} carries poolwright.io/do-not-disrupt"
        )),
        "{why}"
    );
    let done = events.iter().find(|e| e["event"] == "completed").unwrap();
    assert!(
        done["message"]
            .as_str()
            .unwrap()
            .contains("held by do-not-disrupt"),
        "{done}\n{:#?}",
        events
            .iter()
            .map(|e| format!("{} {} {}", e["event"], e["node"], e["message"]))
            .collect::<Vec<_>>()
    );
    assert!(
        events
            .iter()
            .all(|e| e["node"] != node.as_str() || e["event"] == "node_held"),
        "the held node was touched: {events:#?}"
    );
    assert!(registered_nodes(&app.rt, &w.cp).contains(&node));
    assert_eq!(
        w.count("terminate_requested"),
        3,
        "the other three replaced"
    );

    // The workload lets go: the next look rolls the node.
    app.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(w.cp.client().await, "default");
        let patch = serde_json::json!({"metadata": {"annotations": {"poolwright.io/do-not-disrupt": null}}});
        pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    });
    let (ok, text) = w.apply();
    let (fewest, rt) = app.finish();
    assert!(ok, "{text}");
    assert_eq!(w.count("terminate_requested"), 4, "{text}");
    assert!(!registered_nodes(&rt, &w.cp).contains(&node));
    assert!(fewest >= 3, "the PDB held: {fewest}");
}

/// The PDB pre-flight: with a budget that allows nothing, `plan` names it
/// (and the nodes whose drain it blocks, and what `onTimeout` does then)
/// before anything is cordoned, as text and in the JSON plan; with
/// `drain.preflight: refuse`, apply does not start the roll: nothing is
/// cordoned.
#[test]
fn the_pdb_preflight_names_the_budget_and_refuse_cordons_nothing() {
    let drain = "{timeout: 10m, preflight: refuse}";
    let w = World::new(drain);
    let app = w.prepare(drain, REPLICAS);
    let plan = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .args(["plan", "config"])
            .args(args)
            .current_dir(w.dir.path())
            .env("POOLWRIGHT_STATE_DIR", w.dir.path().join("state"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (out, err) = plan(&[]);
    let text = out + &err;
    assert!(
        text.contains(
            "PDB default/web allows 0 disruptions (4 healthy, minAvailable 4): draining nodes "
        ) && text.contains("will block; drain.onTimeout fail → Degraded after 10m"),
        "{text}"
    );
    assert!(text.contains("refused by drain.preflight"), "{text}");
    let (out, err) = plan(&["-o", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let pool = json["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .unwrap_or_else(|| panic!("{json:#}"))
        .clone();
    let blocking = &pool["preflight"]["blocking"];
    assert_eq!(blocking[0]["pdb"], "default/web", "{pool:#}");
    assert_eq!(blocking[0]["allowed"], 0);
    assert_eq!(
        blocking[0]["nodes"].as_array().map(Vec::len),
        Some(4),
        "{pool:#}"
    );
    // Refused: nothing is cordoned, no drain starts.
    let (ok, text) = w.apply();
    let (_, rt) = app.finish();
    assert!(
        text.contains("refused by drain.preflight"),
        "ok {ok}: {text}"
    );
    assert_eq!(w.count("drain_started"), 0, "{text}");
    assert_eq!(cordoned(&rt, &w.cp), 0);
}
