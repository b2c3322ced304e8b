//! API calls per full resync of the AWS provider, for 1, 100 and 1,000 pools,
//! counted by the provider's SDK interceptor against a local moto server.
//! `cargo bench --bench aws_resync_calls` (needs `moto_server`; see scripts/test.sh).
//! Figures go to BENCHMARKS.md.

#[path = "../tests/support/moto.rs"]
mod moto;

use std::sync::Arc;
use std::time::Instant;

use poolwright::clock::SystemClock;
use poolwright::model::OpKey;
use poolwright::model::PoolSpec;
use poolwright::provider::Provider;
use poolwright::provider::aws::Aws;

fn spec(name: &str) -> PoolSpec {
    serde_json::from_value(serde_json::json!({
        "name": name, "size": 1,
        "template": {"launchTemplate": {"name": "bench-lt", "version": "1"}},
        "placement": {"availabilityZones": [moto::ZONE]}
    }))
    .unwrap()
}

fn main() {
    let server = moto::moto();
    let seed = moto::Aws::new(&server.url);
    seed.seed_launch_template("bench-lt", 1);
    let provider = Aws::with_sdk_config(
        "aws",
        &Default::default(),
        moto::sdk_config(&server.url),
        Arc::new(SystemClock),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut created = 0usize;
    println!(
        "| pools | instances | DescribeAutoScalingGroups | DescribeInstances | total calls | pools per call | wall time |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for n in [1usize, 100, 1000] {
        let names: Vec<String> = (0..n).map(|i| format!("pool-{i:04}")).collect();
        let specs: Vec<PoolSpec> = names.iter().map(|n| spec(n)).collect();
        provider.bind_pools(&specs);
        rt.block_on(async {
            for s in &specs[created..] {
                provider
                    .create_pool(s, &OpKey::derive(&["test"]))
                    .await
                    .unwrap();
            }
        });
        created = n;
        provider.calls().reset();
        let started = Instant::now();
        let pools = rt.block_on(provider.describe_pools(&names)).unwrap();
        let took = started.elapsed();
        assert_eq!(pools.len(), n);
        let instances: usize = pools.iter().map(|p| p.nodes.len()).sum();
        let calls = provider.calls().snapshot();
        let asg = calls
            .get("Auto Scaling.DescribeAutoScalingGroups")
            .copied()
            .unwrap_or(0);
        let ec2 = calls.get("EC2.DescribeInstances").copied().unwrap_or(0);
        let total = provider.calls().total();
        println!(
            "| {n} | {instances} | {asg} | {ec2} | {total} | {:.1} | {:.2} s |",
            n as f64 / total as f64,
            took.as_secs_f64()
        );
    }
}
