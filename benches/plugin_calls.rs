//! The HTTP plug-in provider's cost, in two figures (BENCHMARKS.md):
//!
//! 1. HTTP requests per full resync of 1, 100 and 1,000 pools, against the
//!    reference plug-in (`examples/plugins/ec2-instances`) on moto, counted by
//!    a pass-through proxy in front of it. Aim: at most pools/100 + 1 describe
//!    calls with the plug-in's batch size of 100.
//! 2. The latency poolwright adds to a call over the plug-in's own time, on
//!    loopback: a describe through the provider (key, JSON, validation, the
//!    answer's checks) against an in-process server answering a prepared body
//!    at once, compared with the bare HTTP exchange of the same bytes.
//!
//! `cargo bench --bench plugin_calls` (needs moto and python3 with boto3; see
//! scripts/test.sh).

#[path = "../tests/support/fault_proxy.rs"]
mod fault_proxy;
#[path = "../tests/support/moto.rs"]
mod moto;
#[path = "../tests/support/plugin.rs"]
mod plugin;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use poolwright::model::{NodeTemplate, OpKey, PoolSpec};
use poolwright::provider::Provider;
use poolwright::provider::http::Http;
use poolwright::provider::http::transport::Call;
use poolwright::spec::types::HttpProvider;

fn provider(url: &str) -> Http {
    Http::new("bench", &HttpProvider::at(url), std::path::Path::new(".")).unwrap()
}

fn calls_per_resync(rt: &tokio::runtime::Runtime) {
    let server = moto::moto();
    let dir = tempfile::tempdir().unwrap();
    let p = plugin::Plugin::start(&server.url, dir.path(), &[]);
    let proxy = fault_proxy::FaultProxy::start_plugin(
        &p.url,
        fault_proxy::Faults {
            throttle_every: 0,
            lose_answer_every: 0,
        },
    );
    let http = provider(&proxy.url);
    let template = NodeTemplate {
        image: Some("ami-03cf127a".into()),
        instance_type: Some("t3.micro".into()),
        ..NodeTemplate::default()
    };
    println!(
        "| pools | describe requests | other requests | pools per request | aim (pools/100 + 1) | wall time |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut created = 0;
    for n in [1usize, 100, 1000] {
        let names: Vec<String> = (0..n).map(|i| format!("pool-{i:04}")).collect();
        rt.block_on(async {
            for name in &names[created..] {
                // Empty pools: the resync's cost is in the calls, not in the nodes.
                let spec = PoolSpec {
                    name: name.clone(),
                    size: 0,
                    autoscaling: None,
                    template: template.clone(),
                    in_place: Default::default(),
                    placement: Default::default(),
                };
                http.create_pool(&spec, &OpKey::derive(&["bench", name]))
                    .await
                    .unwrap();
            }
        });
        created = n;
        let before = proxy.counters.requests.load(Ordering::SeqCst);
        let started = Instant::now();
        let pools = rt.block_on(http.describe_pools(&names)).unwrap();
        let took = started.elapsed();
        assert_eq!(pools.len(), n);
        let requests = proxy.counters.requests.load(Ordering::SeqCst) - before;
        let describes = n.div_ceil(100) as u64;
        println!(
            "| {n} | {describes} | {} | {:.0} | {} | {:.3} s |",
            requests - describes,
            n as f64 / requests as f64,
            n / 100 + 1,
            took.as_secs_f64()
        );
        assert!(
            requests as usize <= n / 100 + 1,
            "{requests} requests for {n} pools"
        );
    }
}

/// A describe answer of `pools` pools of `nodes` nodes each.
fn canned(pools: usize, nodes: usize) -> (Vec<String>, String) {
    let names: Vec<String> = (0..pools).map(|i| format!("pool-{i:04}")).collect();
    let body = serde_json::json!({
        "pools": names.iter().map(|name| serde_json::json!({
            "name": name, "size": nodes, "template": {"image": "img-1"},
            "nodes": (0..nodes).map(|j| serde_json::json!({
                "id": format!("{name}-node-{j}"), "templateHash": "d805bb993d9c9312",
                "state": "healthy", "launchedAt": "2026-12-01T00:00:00Z",
                "healthySince": "2026-12-01T00:01:00Z",
                "providerId": format!("aws:///us-east-1a/{name}-node-{j}"),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    (names, body.to_string())
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn overhead(rt: &tokio::runtime::Runtime) {
    use axum::routing::{get, post};
    println!();
    println!("| answer | bare exchange p50 | through the provider p50 | added p50 | added p99 |");
    println!("|---|---:|---:|---:|---:|");
    for (pools, nodes) in [(1usize, 10usize), (100, 10)] {
        let (names, body) = canned(pools, nodes);
        let url = rt.block_on(async {
            let caps = r#"{"protocol":"poolwright.io/plugin/v1","name":"canned","describeBatchSize":100,"templateFields":["image"]}"#;
            let app = axum::Router::new()
                .route("/v1/capabilities", get(move || async move { ([("content-type", "application/json")], caps) }))
                .route("/v1/describe", post(move || { let body = body.clone(); async move { ([("content-type", "application/json")], body) } }));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            url
        });
        let http = provider(&url);
        let request = poolwright::provider::http::wire::DescribeRequest {
            pools: names.clone(),
        };
        let (mut bare, mut full) = (Vec::new(), Vec::new());
        rt.block_on(async {
            http.describe_pools(&names).await.unwrap(); // capabilities, connection
            for _ in 0..2000 {
                let call = Call::query("Describe".into(), vec!["v1", "describe"], &request);
                let t = Instant::now();
                let a = http.transport().exchange(&call, true).await.unwrap();
                bare.push(t.elapsed());
                assert!(a.status.is_success());
                let t = Instant::now();
                let pools = http.describe_pools(&names).await.unwrap();
                full.push(t.elapsed());
                assert_eq!(pools.len(), names.len());
            }
        });
        let b50 = percentile(&mut bare, 0.5);
        let f50 = percentile(&mut full, 0.5);
        let b99 = percentile(&mut bare, 0.99);
        let f99 = percentile(&mut full, 0.99);
        println!(
            "| {pools} pool(s) × {nodes} nodes | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms |",
            b50.as_secs_f64() * 1e3,
            f50.as_secs_f64() * 1e3,
            f50.saturating_sub(b50).as_secs_f64() * 1e3,
            f99.saturating_sub(b99).as_secs_f64() * 1e3,
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|a| a == "--overhead-only") {
        overhead(&rt);
        return;
    }
    calls_per_resync(&rt);
    overhead(&rt);
}
