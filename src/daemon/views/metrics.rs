//! Prometheus metrics (prometheus-client, text exposition on `/metrics`).
//! Labels never carry secrets: pool, provider and call names, states and kinds.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::provider::{CallObserver, ErrorKind};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    pub pool: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    pub pool: String,
    /// desired, total, available, updated, outdated
    pub nodes: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BlockedLabels {
    pub pool: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub provider: String,
    pub call: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallErrorLabels {
    pub provider: String,
    pub call: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardMoveLabels {
    /// take or release
    pub dir: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub forge: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetLabels {
    pub fleet: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetPoolsLabels {
    pub fleet: String,
    pub state: String,
}

fn call_histogram() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_seconds: Histogram,
    pub config_load_errors: Counter,
    pub config_valid: Gauge,
    pub leader: Gauge,
    pub shards_held: Gauge,
    pub shard_rebalances: Family<ShardMoveLabels, Counter>,
    pub shard_handover_seconds: Histogram,
    pub pools: Family<StateLabels, Gauge>,
    pub nodes: Family<PoolStateLabels, Gauge>,
    pub rollout_nodes: Family<RolloutLabels, Gauge>,
    pub blocked: Family<BlockedLabels, Gauge>,
    pub blocked_seconds: Family<PoolLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub next_window_start: Family<PoolLabels, Gauge>,
    pub overrides: Counter,
    pub provider_calls: Family<CallLabels, Counter>,
    pub provider_errors: Family<CallErrorLabels, Counter>,
    pub provider_seconds: Family<CallLabels, Histogram, fn() -> Histogram>,
    pub events: Family<EventLabels, Counter>,
    pub fleet_change_stage: Family<FleetLabels, Gauge>,
    pub fleet_pools: Family<FleetPoolsLabels, Gauge>,
    pub fleet_halted: Family<FleetLabels, Gauge>,
    pub git_fetches: Counter,
    pub git_fetch_failures: Counter,
    pub git_last_fetch: Gauge,
    pub git_commits_refused: Family<RefusedLabels, Counter>,
    pub git_webhooks: Family<WebhookLabels, Counter>,
    pub image_source_failing: Family<ChannelLabels, Gauge>,
    pub pool_image_age: Family<PoolLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("poolwright");
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_seconds: reconcile_histogram(),
            config_load_errors: Counter::default(),
            config_valid: Gauge::default(),
            leader: Gauge::default(),
            shards_held: Gauge::default(),
            shard_rebalances: Family::default(),
            // 0.25 s .. ~17 min
            shard_handover_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 13)),
            pools: Family::default(),
            nodes: Family::default(),
            rollout_nodes: Family::default(),
            blocked: Family::default(),
            blocked_seconds: Family::default(),
            next_window_start: Family::default(),
            overrides: Counter::default(),
            fleet_change_stage: Family::default(),
            fleet_pools: Family::default(),
            fleet_halted: Family::default(),
            git_fetches: Counter::default(),
            git_fetch_failures: Counter::default(),
            git_last_fetch: Gauge::default(),
            git_commits_refused: Family::default(),
            git_webhooks: Family::default(),
            image_source_failing: Family::default(),
            pool_image_age: Family::default(),
            provider_calls: Family::default(),
            provider_errors: Family::default(),
            provider_seconds: Family::new_with_constructor(call_histogram),
            events: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconciles",
            "Plans computed, by what triggered them",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time to load, observe and plan (not the steps that follow)",
            m.reconcile_seconds.clone(),
        );
        registry.register(
            "config_load_errors",
            "Loads of the desired state that failed (the last good one stayed in force)",
            m.config_load_errors.clone(),
        );
        registry.register(
            "config_valid",
            "1 when the last load of the desired state succeeded",
            m.config_valid.clone(),
        );
        registry.register(
            "leader",
            "1 while this daemon may act: always without --ha, only as the lease holder with it",
            m.leader.clone(),
        );
        registry.register(
            "shards_held",
            "Shard leases this daemon holds (--shards)",
            m.shards_held.clone(),
        );
        registry.register(
            "shard_rebalances",
            "Shard leases this daemon took or gave back, by move (take, release)",
            m.shard_rebalances.clone(),
        );
        registry.register(
            "shard_handover_seconds",
            "From a shard's previous holder's last renewal (or release) to this daemon taking it",
            m.shard_handover_seconds.clone(),
        );
        registry.register("pools", "Pools by state", m.pools.clone());
        registry.register(
            "image_source_failing",
            "1 while an image channel's source fails (the image in force stays)",
            m.image_source_failing.clone(),
        );
        registry.register(
            "pool_image_age_seconds",
            "How far a pool following an image channel lags it: the release time of the channel's image in force minus that of the image the pool's provider holds (0: in step)",
            m.pool_image_age.clone(),
        );
        registry.register(
            "fleet_change_stage",
            "The stage a FleetRollout's change is in (0-based; the number of stages once every stage passed)",
            m.fleet_change_stage.clone(),
        );
        registry.register(
            "fleet_pools",
            "A FleetRollout's governed pools by where they stand in its change",
            m.fleet_pools.clone(),
        );
        registry.register(
            "fleet_halted",
            "1 while a FleetRollout's change is halted",
            m.fleet_halted.clone(),
        );
        registry.register(
            "git_fetches",
            "Fetches of the config repo (--git-url) that reached the remote and returned its tip",
            m.git_fetches.clone(),
        );
        registry.register(
            "git_fetch_failures",
            "Fetches of the config repo that failed (the commit in force stayed)",
            m.git_fetch_failures.clone(),
        );
        registry.register(
            "git_last_fetch_timestamp_seconds",
            "When the config repo was last fetched successfully (Unix time)",
            m.git_last_fetch.clone(),
        );
        registry.register(
            "git_commits_refused",
            "Fetched branch tips that were not applied, by reason",
            m.git_commits_refused.clone(),
        );
        registry.register(
            "git_webhooks",
            "Push webhooks received, by forge and result",
            m.git_webhooks.clone(),
        );
        registry.register("nodes", "Nodes by pool and state", m.nodes.clone());
        registry.register(
            "rollout_nodes",
            "Rollout progress: nodes of each pool being rolled, by kind",
            m.rollout_nodes.clone(),
        );
        registry.register(
            "blocked_operations",
            "Pools whose due disruptive steps are held, by reason",
            m.blocked.clone(),
        );
        registry.register(
            "policy_blocked_seconds",
            "Time pools have spent blocked by their disruption policy",
            m.blocked_seconds.clone(),
        );
        registry.register(
            "next_window_start_timestamp_seconds",
            "When a blocked pool's next maintenance window opens (Unix time)",
            m.next_window_start.clone(),
        );
        registry.register(
            "disruption_overrides",
            "Emergency overrides of disruption policies",
            m.overrides.clone(),
        );
        registry.register(
            "provider_calls",
            "Provider calls made",
            m.provider_calls.clone(),
        );
        registry.register(
            "provider_call_errors",
            "Provider calls that failed, by kind of failure",
            m.provider_errors.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Provider call latency",
            m.provider_seconds.clone(),
        );
        registry.register("events", "Rollout and apply events", m.events.clone());
        Metrics { registry, ..m }
    }

    /// Drop a pool's own series: it is neither desired nor managed any more.
    pub fn forget_pool(&self, pool: &str) {
        for state in ["pending", "healthy", "unhealthy", "terminating"] {
            self.nodes.remove(&PoolStateLabels {
                pool: pool.to_string(),
                state: state.to_string(),
            });
        }
        self.blocked_seconds.remove(&PoolLabels {
            pool: pool.to_string(),
        });
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Provider calls are counted and timed through the registry's observer hook.
impl CallObserver for Metrics {
    fn call_finished(
        &self,
        provider: &str,
        call: &'static str,
        elapsed: Duration,
        error: Option<ErrorKind>,
    ) {
        let labels = CallLabels {
            provider: provider.to_string(),
            call: call.to_string(),
        };
        self.provider_calls.get_or_create(&labels).inc();
        self.provider_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(kind) = error {
            self.provider_errors
                .get_or_create(&CallErrorLabels {
                    provider: labels.provider,
                    call: labels.call,
                    kind: format!("{kind:?}").to_lowercase(),
                })
                .inc();
        }
    }
}
