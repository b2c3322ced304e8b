//! The metrics projection: what was observed and decided, as Prometheus
//! series (nodes by state, pools by state, blocked operations, rollout
//! progress, time held by a policy).

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;

use crate::daemon::views::board::{Board, PoolState};
use crate::daemon::views::metrics::{
    BlockedLabels, Metrics, PoolLabels, PoolStateLabels, RolloutLabels, StateLabels,
};
use crate::model::{EventKind, NodeState, ObservedPool};
use crate::reconcile::EventSink;

/// A pool's nodes by state, as just observed.
pub(super) fn record_nodes(metrics: &Metrics, name: &str, pool: &ObservedPool) {
    let mut by_state: [(&str, i64); 4] = [
        ("pending", 0),
        ("healthy", 0),
        ("unhealthy", 0),
        ("terminating", 0),
    ];
    for n in &pool.nodes {
        let i = match n.state {
            NodeState::Pending => 0,
            NodeState::Healthy => 1,
            NodeState::Unhealthy => 2,
            NodeState::Terminating => 3,
        };
        by_state[i].1 += 1;
    }
    for (state, n) in by_state {
        metrics
            .nodes
            .get_or_create(&PoolStateLabels {
                pool: name.to_string(),
                state: state.to_string(),
            })
            .set(n);
    }
}

/// Which pools their disruption policy holds, since when, and which of
/// those blocks this daemon announced itself.
#[derive(Default)]
pub(super) struct Blocks {
    /// Since when each pool has been blocked by its disruption policy.
    since: HashMap<String, Timestamp>,
    /// Pools whose block this daemon announced itself (no rollout under way
    /// to announce it): only these get the daemon's `resumed_in_window`; the
    /// executor reports its own, so each reopening is told once.
    announced: HashSet<String>,
}

impl Blocks {
    /// Whether this pool's block is already known (and so announced, if it
    /// was this daemon's to announce).
    pub fn known(&self, pool: &str) -> bool {
        self.since.contains_key(pool)
    }

    /// This daemon announces the pool's block itself.
    pub fn announced(&mut self, pool: &str) {
        self.announced.insert(pool.to_string());
    }

    pub fn forget(&mut self, pool: &str) {
        self.since.remove(pool);
        self.announced.remove(pool);
    }

    /// Account the time a pool has been blocked by its policy, and whether
    /// it still is; the total seconds blocked.
    pub fn track(
        &mut self,
        metrics: &Metrics,
        events: &EventSink,
        pool: &str,
        blocked_now: bool,
        now: Timestamp,
    ) -> f64 {
        let labels = PoolLabels {
            pool: pool.to_string(),
        };
        if let Some(since) = self.since.get(pool).copied() {
            let secs = now.duration_since(since).as_secs_f64().max(0.0);
            metrics.blocked_seconds.get_or_create(&labels).inc_by(secs);
            if blocked_now {
                self.since.insert(pool.to_string(), now);
            } else {
                self.since.remove(pool);
                if !self.announced.remove(pool) {
                    return metrics.blocked_seconds.get_or_create(&labels).get();
                }
                events.emit(crate::model::Event::new(
                    now,
                    pool.to_string(),
                    EventKind::ResumedInWindow,
                    "the disruption policy allows disruptive steps again",
                ));
            }
        } else if blocked_now {
            self.since.insert(pool.to_string(), now);
        }
        metrics.blocked_seconds.get_or_create(&labels).get()
    }
}

/// The series drawn from the status board (pools by state, blocked pools,
/// rollout progress), made when metrics are scraped: their cost is one pass
/// over the board per scrape, not per pool planned.
pub fn project_board(board: &Board, metrics: &Metrics) {
    board.read(|doc| {
        metrics.pools.clear();
        for s in PoolState::ALL {
            let n = doc.pools.iter().filter(|p| p.state == s).count();
            metrics
                .pools
                .get_or_create(&StateLabels {
                    state: s.as_str().to_string(),
                })
                .set(n as i64);
        }
        metrics.blocked.clear();
        metrics.next_window_start.clear();
        metrics.rollout_nodes.clear();
        for p in &doc.pools {
            if let Some(b) = &p.blocked {
                metrics
                    .blocked
                    .get_or_create(&BlockedLabels {
                        pool: p.name.clone(),
                        reason: b.reason.clone(),
                    })
                    .set(1);
                if let Some(until) = b.until {
                    metrics
                        .next_window_start
                        .get_or_create(&PoolLabels {
                            pool: p.name.clone(),
                        })
                        .set(until.as_second());
                }
            }
            if let Some(r) = &p.rollout {
                for (kind, n) in [
                    ("desired", r.counts.desired),
                    ("total", r.counts.total),
                    ("available", r.counts.available),
                    ("updated", r.counts.updated),
                    ("outdated", r.counts.outdated),
                    ("held", r.held_nodes.len() as u32),
                ] {
                    metrics
                        .rollout_nodes
                        .get_or_create(&RolloutLabels {
                            pool: p.name.clone(),
                            nodes: kind.to_string(),
                        })
                        .set(n as i64);
                }
            }
        }
    });
}
