//! Cordon and drain against a real control plane (kine + kube-apiserver v1.36 +
//! kwok): evictions through the policy/v1 Eviction API, PodDisruptionBudgets,
//! DaemonSet and mirror pods left alone, Ready as the health gate.
//!
//! No controller-manager runs, so the tests write each PodDisruptionBudget's
//! status themselves (observedGeneration, disruptionsAllowed), as the disruption
//! controller would; the API server's eviction handler reads and decrements it.

use crate::support::kube as kube_cp;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_cp::ControlPlane;
use poolwright::kube::{Cluster, KubeDrainer};
use poolwright::model::DrainProgress;
use poolwright::provider::Drainer;
use poolwright::spec::types::ClusterSpec;
use poolwright::spec::{At, types::NodeMatch};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(cp: &ControlPlane) -> Cluster {
    let spec = ClusterSpec {
        kubeconfig: Some(At::bare(cp.kubeconfig.clone())),
        context: None,
        in_cluster: At::bare(false),
        node_match: NodeMatch::default(),
    };
    Cluster::connect("test", &spec, std::path::Path::new("/"))
        .await
        .unwrap()
}

async fn create_node(client: &kube::Client, id: &str) {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": id, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
        "spec": {"providerID": format!("test:///zone-a/{id}")},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

async fn create_pod(client: &kube::Client, name: &str, node: &str, app: &str, owner: Option<&str>) {
    let mut pod = serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    });
    if let Some(kind) = owner {
        pod["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": "owner",
            "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
        }]);
    }
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
}

async fn create_pdb(client: &kube::Client, app: &str, min_available: i32) {
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": app},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
}

/// Play the disruption controller: say how many disruptions the budget allows.
async fn allow(client: &kube::Client, app: &str, allowed: i32, healthy: i32) {
    let api = Api::<PodDisruptionBudget>::namespaced(client.clone(), "default");
    let generation = api.get(app).await.unwrap().metadata.generation.unwrap_or(1);
    let status = serde_json::json!({"status": {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": healthy - allowed,
        "expectedPods": healthy,
    }});
    api.patch_status(app, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn pods_on(client: &kube::Client, node: &str) -> Vec<String> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

#[test]
fn drain_waits_on_the_pdb_skips_daemonsets_and_finishes_when_it_allows() {
    let cp = ControlPlane::start();
    rt().block_on(async {
        let client = cp.client().await;
        let cluster = connect(&cp).await;
        create_node(&client, "n1").await;
        wait_until("kwok to make n1 Ready", || async {
            matches!(cluster.node_of("n1").await, Ok(Some(n)) if n.ready_since.is_some())
        })
        .await;
        create_pod(&client, "web-1", "n1", "web", Some("ReplicaSet")).await;
        create_pod(&client, "web-2", "n1", "web", Some("ReplicaSet")).await;
        create_pod(&client, "agent", "n1", "agent", Some("DaemonSet")).await;
        create_pdb(&client, "web", 2).await;
        allow(&client, "web", 0, 2).await;

        let drainer = KubeDrainer::new(cluster.clone());
        let now = Timestamp::now();
        drainer.cordon("pool", "n1").await.unwrap();
        assert!(cluster.node_of("n1").await.unwrap().unwrap().unschedulable);

        // The budget allows nothing: the drain waits and names the budget.
        match drainer.progress("pool", "n1", now, now).await {
            DrainProgress::Blocked(why) => {
                assert!(why.contains("PodDisruptionBudget default/web"), "{why}");
                assert!(why.contains("disruptions allowed: 0"), "{why}");
            }
            other => panic!("expected Blocked, got {other:?}"),
        }
        assert_eq!(pods_on(&client, "n1").await.len(), 3, "nothing was evicted");

        // One disruption allowed: one pod goes, the other waits again.
        allow(&client, "web", 1, 2).await;
        let p = drainer.progress("pool", "n1", now, now).await;
        assert!(matches!(p, DrainProgress::Blocked(_)), "{p:?}");
        wait_until("one web pod evicted", || async {
            pods_on(&client, "n1")
                .await
                .iter()
                .filter(|p| p.starts_with("web"))
                .count()
                == 1
        })
        .await;

        allow(&client, "web", 1, 2).await;
        wait_until("the drain to finish", || async {
            drainer.progress("pool", "n1", now, now).await == DrainProgress::Done
        })
        .await;
        // The DaemonSet pod stays: it would come straight back.
        assert_eq!(pods_on(&client, "n1").await, vec!["agent".to_string()]);

        drainer.uncordon("pool", "n1").await.unwrap();
        assert!(!cluster.node_of("n1").await.unwrap().unwrap().unschedulable);
    });
}

#[test]
fn force_deletes_what_the_budget_protects() {
    let cp = ControlPlane::start();
    rt().block_on(async {
        let client = cp.client().await;
        let cluster = connect(&cp).await;
        create_node(&client, "n1").await;
        create_pod(&client, "db-0", "n1", "db", Some("StatefulSet")).await;
        create_pdb(&client, "db", 1).await;
        allow(&client, "db", 0, 1).await;
        let drainer = KubeDrainer::new(cluster.clone());
        let now = Timestamp::now();
        drainer.cordon("pool", "n1").await.unwrap();
        assert!(matches!(
            drainer.progress("pool", "n1", now, now).await,
            DrainProgress::Blocked(_)
        ));
        drainer.force("pool", "n1").await.unwrap();
        wait_until("the forced drain to finish", || async {
            drainer.progress("pool", "n1", now, now).await == DrainProgress::Done
        })
        .await;
    });
}

#[test]
fn a_node_not_registered_has_nothing_to_drain() {
    let cp = ControlPlane::start();
    rt().block_on(async {
        let cluster = connect(&cp).await;
        let drainer = KubeDrainer::new(cluster);
        let now = Timestamp::now();
        drainer.cordon("pool", "i-unknown").await.unwrap();
        assert_eq!(
            drainer.progress("pool", "i-unknown", now, now).await,
            DrainProgress::Done
        );
    });
}
