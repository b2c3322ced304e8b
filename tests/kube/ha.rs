//! `poolwright run --ha kubernetes`: two daemons on one desired-state directory,
//! each with its own state directory, against a real AWS API (moto) for the
//! pool and a real kube-apiserver (kine) holding the Lease and the ConfigMaps.
//! Only the lease holder acts; killing it mid-rollout (SIGKILL: no safe point,
//! no release) hands the lease over once it expires, and the standby finishes
//! the rollout from the journal in the cluster without repeating a step.

use crate::support::daemon as daemon_support;
use crate::support::kube as kube_support;
use crate::support::moto;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_support::Daemon;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube_support::ControlPlane;
use poolwright::ha::lease::{IdentityGuard, LeaseSettings};
use serde_json::Value;

const LEASE_SECS: u64 = 6;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn pool(version: u32) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: aws\n  size: 4\n  template:\n    aws:\n      launchTemplate: {{name: web-lt, version: \"{version}\"}}\n  aws: {{groupName: web-asg, availabilityZones: [{}]}}\n  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    health: {{minReady: 3s, startupTimeout: 2m}}\n",
        moto::ZONE
    )
}

fn ha_args(cp: &ControlPlane, identity: &str) -> Vec<String> {
    [
        "--ha",
        "kubernetes",
        "--ha-kubeconfig",
        cp.kubeconfig.to_str().unwrap(),
        "--ha-namespace",
        "default",
        "--ha-identity",
        identity,
        "--ha-lease-duration",
        &format!("{LEASE_SECS}s"),
        "--ha-renew-deadline",
        "4s",
        "--ha-retry-period",
        "1s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start(root: &Path, cp: &ControlPlane, identity: &str) -> Daemon {
    let args = ha_args(cp, identity);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start_in(root, &format!("state-{identity}"), &args, moto::ENV)
}

fn web_state(s: &Value) -> Option<String> {
    s["pools"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "web")
        .and_then(|p| p["state"].as_str())
        .map(str::to_string)
}

fn count(events: &[Value], event: &str) -> usize {
    events.iter().filter(|e| e["event"] == event).count()
}

#[test]
fn only_the_lease_holder_acts_and_a_killed_leader_hands_over_without_repeating_a_step() {
    let cp = ControlPlane::start();
    let moto_server = moto::moto();
    let aws = moto::Aws::new(&moto_server.url);
    aws.seed_launch_template("web-lt", 2);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "config/provider.yaml",
        &format!(
            "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: aws}}\nspec:\n  type: aws\n  region: {}\n  endpointUrl: {}\n  pollInterval: 100ms\n",
            moto::REGION,
            moto_server.url
        ),
    );
    write(root, "config/web.yaml", &pool(1));

    // The first daemon takes the lease and creates the pool.
    let a = start(root, &cp, "a");
    a.wait_for("a to lead", Duration::from_secs(30), |s| {
        s["daemon"]["ha"]["leader"] == true
    });
    let b = start(root, &cp, "b");
    let s = b.wait_for(
        "b to see a holding the lease",
        Duration::from_secs(30),
        |s| s["daemon"]["ha"]["holder"] == "a",
    );
    assert_eq!(s["daemon"]["ha"]["leader"], false, "{s:#}");
    assert_eq!(s["daemon"]["ha"]["lease"], "default/poolwright", "{s:#}");
    a.wait_for("a to create web", Duration::from_secs(90), |s| {
        web_state(s).as_deref() == Some("in-sync")
    });
    let group = aws.group("web-asg").expect("a created web-asg");
    assert_eq!(group.instances.len(), 4, "{group:?}");
    let old: Vec<_> = aws.instance_templates(&group.instances);

    // The standby plans and reports, and has done nothing.
    let s = b.wait_for("b to observe web", Duration::from_secs(30), |s| {
        web_state(s).is_some()
    });
    assert!(
        b.events().is_empty(),
        "the standby acted: {:#?}",
        b.events()
    );
    let summary = daemon_support::http(&b.url, "GET", "/v1/status").1;
    assert!(summary.contains("standby"), "{s:#}");

    // A template change: a rolls; kill it (SIGKILL) after its first replacement.
    write(root, "config/web.yaml", &pool(2));
    let started = Instant::now();
    while count(&a.events(), "terminate_requested") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "a did not start replacing nodes: {}",
            a.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let a_events = {
        let killed = a.events();
        a.kill();
        killed
    };
    let killed_at = Instant::now();
    assert!(
        count(&a_events, "terminate_requested") < 4,
        "the rollout finished before the kill; nothing was handed over"
    );

    // b takes over once the lease expires, and finishes from the journal.
    let s = b.wait_for(
        "b to take the lease",
        Duration::from_secs(LEASE_SECS + 10),
        |s| s["daemon"]["ha"]["leader"] == true,
    );
    let handover = killed_at.elapsed();
    eprintln!("handover after SIGKILL: {handover:?} (lease duration {LEASE_SECS}s)");
    // Within the lease duration, plus the standby's two read periods (one to
    // see the last renewal, one to find it expired) and scheduling slack.
    assert!(
        handover <= Duration::from_secs(LEASE_SECS + 3),
        "handover took {handover:?}: {s:#}"
    );
    b.wait_for("b to finish the rollout", Duration::from_secs(120), |s| {
        web_state(s).as_deref() == Some("in-sync")
    });
    let b_events = b.events();
    assert!(
        count(&b_events, "rollout_started") >= 1,
        "b did not resume the rollout: {b_events:#?}"
    );

    // No step repeated: each old node terminated once, one launch per
    // replacement, and moto saw exactly 4 + 4 instances in all.
    let all: Vec<Value> = a_events.iter().chain(&b_events).cloned().collect();
    let mut terminated: BTreeMap<String, usize> = BTreeMap::new();
    for e in all.iter().filter(|e| e["event"] == "terminate_requested") {
        *terminated
            .entry(e["node"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(terminated.len(), 4, "{terminated:?}");
    assert!(
        terminated.values().all(|n| *n == 1),
        "a node was terminated twice: {terminated:?}"
    );
    assert!(
        terminated.keys().all(|id| group.instances.contains(id)),
        "a node that was not outdated was terminated: {terminated:?}"
    );
    assert_eq!(count(&all, "node_create_requested"), 4, "{all:#?}");
    let ever = aws.instances_tagged("poolwright.io/pool", "web");
    assert_eq!(ever.len(), 8, "moto launched {ever:?}");
    let group = aws.group("web-asg").unwrap();
    assert_eq!(group.instances.len(), 4, "{group:?}");
    let new = aws.instance_templates(&group.instances);
    assert!(
        new.iter()
            .all(|t| t.is_some() && !old.contains(t) && *t == new[0]),
        "not all on the new template: {new:?} (old {old:?})"
    );

    // The cluster: b holds the lease at epoch 1; the finished rollout's
    // journal is gone; the inventory b acted on is there.
    runtime().block_on(async {
        let client = cp.client().await;
        let lease = Api::<Lease>::namespaced(client.clone(), "default")
            .get("poolwright")
            .await
            .unwrap();
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        let maps = Api::<ConfigMap>::namespaced(client, "default")
            .list(&ListParams::default().labels("poolwright.io/lease=poolwright"))
            .await
            .unwrap();
        let names: Vec<_> = maps
            .items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        assert_eq!(names, vec!["poolwright-inventory".to_string()], "{names:?}");
        let inventory = maps.items[0].data.as_ref().unwrap()["state.json"].clone();
        assert!(inventory.contains("\"web\""), "{inventory}");
    });

    // A leader stopped with SIGTERM releases the lease: the next standby takes it
    // at once instead of waiting the lease out.
    let c = start(root, &cp, "c");
    c.wait_for(
        "c to see b holding the lease",
        Duration::from_secs(30),
        |s| s["daemon"]["ha"]["holder"] == "b",
    );
    let stopped_at = Instant::now();
    let status = b.terminate();
    assert!(status.success(), "b exited with {status}");
    c.wait_for(
        "c to take the released lease",
        Duration::from_secs(LEASE_SECS),
        |s| s["daemon"]["ha"]["leader"] == true,
    );
    let release_handover = stopped_at.elapsed();
    eprintln!("handover after SIGTERM: {release_handover:?}");
    assert!(
        release_handover < Duration::from_secs(LEASE_SECS),
        "took {release_handover:?}: the lease was not released"
    );
    // It knows web as poolwright's (the inventory in the cluster), not as foreign.
    c.wait_for("c to find web in sync", Duration::from_secs(30), |s| {
        web_state(s).as_deref() == Some("in-sync")
    });
    assert!(
        c.events().is_empty(),
        "nothing was left to do: {:#?}",
        c.events()
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A lease in `default` whose holder keeps its term long enough for the
/// in-process tests to move the lease by hand.
fn lease_settings(name: &str, identity: &str, guard: &IdentityGuard) -> LeaseSettings {
    LeaseSettings {
        namespace: "default".into(),
        name: name.into(),
        identity: identity.into(),
        guard: guard.clone(),
        duration: Duration::from_secs(60),
        renew_deadline: Duration::from_secs(40),
        retry_period: Duration::from_secs(1),
    }
}

/// The fence, in process against the real API server: a standby cannot write
/// the journal, and a leader deposed behind its back (its local term not yet
/// lapsed) cannot overwrite what its successor wrote.
#[test]
fn a_deposed_leader_cannot_overwrite_its_successors_journal() {
    use poolwright::clock::SystemClock;
    use poolwright::ha::lease::{Elector, Role};
    use poolwright::ha::shards::Shards;
    use poolwright::ha::store::ClusterStore;
    use poolwright::store::shared::{Record, SharedHome};

    const WEB: Record = Record::Journal("web");

    /// The error of a write that must be refused.
    async fn refusal(store: &ClusterStore, body: &str) -> String {
        let refused = store.write(WEB, body.into()).await;
        format!("{:#}", refused.expect_err("the write was refused"))
    }

    let cp = ControlPlane::start();
    runtime().block_on(async {
        let client = cp.client().await;
        let settings = |id: &str| lease_settings("fence", id, &Default::default());
        let mut a = Elector::new(client.clone(), settings("a"), Arc::new(SystemClock));
        let mut b = Elector::new(client.clone(), settings("b"), Arc::new(SystemClock));
        let single = |e: &Elector| Arc::new(Shards::single(e.fence.clone()));
        let store_a = ClusterStore::new(client.clone(), "default", "fence", single(&a));
        let store_b = ClusterStore::new(client.clone(), "default", "fence", single(&b));

        assert!(matches!(a.round().await, Role::Leader { epoch: 0, .. }));
        assert!(
            matches!(b.round().await, Role::Standby { holder, .. } if holder == "a"),
            "{:?}",
            b.role()
        );
        store_a.write(WEB, "{\"by\": \"a\"}".into()).await.unwrap();
        let refused = refusal(&store_b, "{\"by\": \"b\"}").await;
        assert!(
            refused.contains("does not hold the leader lease"),
            "{refused}"
        );

        // b takes over as if a had stopped renewing (a does not know yet).
        let leases = Api::<Lease>::namespaced(client.clone(), "default");
        let mut lease = leases.get("fence").await.unwrap();
        let spec = lease.spec.as_mut().unwrap();
        spec.holder_identity = Some("b".into());
        spec.lease_transitions = Some(1);
        leases
            .replace("fence", &Default::default(), &lease)
            .await
            .unwrap();
        assert!(matches!(b.round().await, Role::Leader { epoch: 1, .. }));
        store_b.write(WEB, "{\"by\": \"b\"}".into()).await.unwrap();

        // a still holds a term by its own clock, but the ConfigMap carries epoch 1.
        assert!(a.fence.current().is_some());
        let refused = refusal(&store_a, "{\"by\": \"a, late\"}").await;
        assert!(refused.contains("newer leader (epoch 1"), "{refused}");
        assert!(store_a.delete(WEB).await.is_err());
        assert_eq!(
            store_b.read(WEB).await.unwrap().as_deref(),
            Some("{\"by\": \"b\"}")
        );
        // Its next round tells a it follows b; its term is gone.
        assert!(
            matches!(a.round().await, Role::Standby { holder, .. } if holder == "b"),
            "{:?}",
            a.role()
        );
        assert!(a.fence.current().is_none());
        // b gives the lease up: a takes it at once, at epoch 2.
        b.release().await;
        assert!(matches!(a.round().await, Role::Leader { epoch: 2, .. }));
    });
}

/// Two processes given one identity would both "renew" the lease and both
/// act. Against the real API server: the first to see a renewal under its
/// identity that it did not write stops leading at once (its term revoked,
/// not left to lapse), and none of its electors takes a lease again; the
/// other keeps leading.
#[test]
fn a_second_process_with_the_same_identity_is_detected_and_one_stops_acting() {
    use poolwright::clock::SystemClock;
    use poolwright::ha::lease::{Elector, Role};

    let cp = ControlPlane::start();
    runtime().block_on(async {
        let client = cp.client().await;
        let settings = |name: &str, guard: &IdentityGuard| lease_settings(name, "twin", guard);
        let clock = || Arc::new(SystemClock);
        let (guard_a, guard_b) = (IdentityGuard::default(), IdentityGuard::default());
        let mut a = Elector::new(client.clone(), settings("twins", &guard_a), clock());
        let mut b = Elector::new(client.clone(), settings("twins", &guard_b), clock());
        assert!(matches!(a.round().await, Role::Leader { epoch: 0, .. }));
        assert!(
            matches!(a.round().await, Role::Leader { epoch: 0, .. }),
            "a renews its own"
        );
        // b starts with a's identity: the lease says it is b's, so b renews it.
        assert!(matches!(b.round().await, Role::Leader { epoch: 0, .. }));
        // a sees a renewal it did not write under its identity.
        assert!(a.fence.current().is_some(), "a's term had not lapsed yet");
        let role = a.round().await.clone();
        let Role::Candidate { error: Some(why) } = &role else {
            panic!("a did not stop: {role:?}");
        };
        assert!(
            why.contains("same identity") && why.contains("--ha-identity"),
            "{why}"
        );
        assert!(a.fence.current().is_none(), "a's term is revoked at once");
        assert_eq!(guard_a.conflict(), Some(why.as_str()));
        // It stays stopped, and so does every other elector of that daemon.
        assert!(matches!(
            a.round().await,
            Role::Candidate { error: Some(_) }
        ));
        let mut a_other = Elector::new(client.clone(), settings("other", &guard_a), clock());
        assert!(matches!(
            a_other.round().await,
            Role::Candidate { error: Some(_) }
        ));
        assert!(a_other.fence.current().is_none());
        // b goes on leading, unbothered (it wrote every renewal it sees).
        for _ in 0..3 {
            assert!(
                matches!(b.round().await, Role::Leader { epoch: 0, .. }),
                "{:?}",
                b.role()
            );
        }
        assert!(guard_b.conflict().is_none());
        // The lease was never taken by a again.
        let lease = Api::<Lease>::namespaced(client.clone(), "default")
            .get("twins")
            .await
            .unwrap();
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("twin"));
        // Nor can a stopped daemon give its twin's lease back.
        a.release().await;
        let lease = Api::<Lease>::namespaced(client.clone(), "default")
            .get("twins")
            .await
            .unwrap();
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("twin"));

        // A release on a clean stop, when a twin renewed since this process
        // last did (no round has caught it yet), gives nothing back either.
        let (guard_c, guard_d) = (IdentityGuard::default(), IdentityGuard::default());
        let mut c = Elector::new(client.clone(), settings("twins-2", &guard_c), clock());
        let mut d = Elector::new(client.clone(), settings("twins-2", &guard_d), clock());
        assert!(matches!(c.round().await, Role::Leader { epoch: 0, .. }));
        assert!(matches!(d.round().await, Role::Leader { epoch: 0, .. }));
        c.release().await;
        assert!(guard_c.conflict().is_some(), "c saw the twin's renewal");
        assert!(matches!(d.round().await, Role::Leader { epoch: 0, .. }));

        // One process giving its lease back and taking it again is no twin.
        let solo_guard = IdentityGuard::default();
        let mut solo = Elector::new(client.clone(), settings("solo", &solo_guard), clock());
        assert!(matches!(solo.round().await, Role::Leader { epoch: 0, .. }));
        solo.release().await;
        assert!(matches!(solo.round().await, Role::Leader { epoch: 1, .. }));
        assert!(matches!(solo.round().await, Role::Leader { epoch: 1, .. }));
        assert!(solo_guard.conflict().is_none());
    });
}

/// The same as a user meets it: a second daemon started with the first's
/// `--ha-identity` (a unit file copied to another host). One of the two
/// stops acting and says why in its status; the other leads.
#[test]
fn a_daemon_started_with_another_daemons_identity_is_refused_with_the_reason_in_status() {
    let cp = ControlPlane::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "config/provider.yaml",
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 3\n  speed: 20\n",
    );
    write(
        root,
        "config/web.yaml",
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  providerRef: sim\n  size: 1\n  template: {image: img-1}\n",
    );
    let sim = root.join("sim");
    let env = [("POOLWRIGHT_SIM_DIR", sim.to_str().unwrap())];
    let args = ha_args(&cp, "bastion");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = Daemon::start_in(root, "state-first", &args, &env);
    first.wait_for("the first daemon to lead", Duration::from_secs(30), |s| {
        s["daemon"]["ha"]["leader"] == true
    });
    let second = Daemon::start_in(root, "state-second", &args, &env);
    let refused = |s: &Value| {
        s["daemon"]["ha"]["leader"] == false
            && s["daemon"]["ha"]["role"]
                .as_str()
                .is_some_and(|r| r.contains("same identity"))
    };
    let started = Instant::now();
    let (stopped, leading) = loop {
        if refused(&first.status()) {
            break (&first, &second);
        }
        if refused(&second.status()) {
            break (&second, &first);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "neither daemon noticed the other: {:#}\n{:#}\nlogs:\n{}\n{}",
            first.status(),
            second.status(),
            first.log_tail(),
            second.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let role = stopped.status()["daemon"]["ha"]["role"].to_string();
    assert!(role.contains("--ha-identity"), "{role}");
    // Several lease rounds later: still exactly one leader, the same one.
    std::thread::sleep(Duration::from_secs(3));
    assert!(refused(&stopped.status()), "{:#}", stopped.status());
    leading.wait_for("the other daemon to lead", Duration::from_secs(15), |s| {
        s["daemon"]["ha"]["leader"] == true
    });
    assert!(
        stopped.log_tail().contains("same identity"),
        "{}",
        stopped.log_tail()
    );
}
