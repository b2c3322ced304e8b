//! The fleet-wide views, assembled from each pool's latest plan (never a plan
//! of all pools made for them): `/v1/plan`, the web page's plan text and
//! forecasts, and the plan a dry-run logs. Assembled at most every
//! `PUBLISH_EVERY` while pools change, and not at all while none does.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::daemon::run::reconciler::{InForce, Latest, LatestPlan};
use crate::plan::render::{Source, Style, render_text};
use crate::plan::{Plan, PoolPlan};

/// How often, at most, the fleet-wide views are assembled while pools change.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);

pub(super) struct Views {
    /// Each pool's latest plan: the fleet's plan is assembled from these.
    plans: BTreeMap<String, Arc<PoolPlan>>,
    /// The plans changed since they were last assembled.
    dirty: bool,
    last_published: Option<Instant>,
    last_logged_plan: Option<String>,
    /// The latest plan, for `/v1/plan` and the web page.
    latest: LatestPlan,
}

impl Views {
    /// The latest plan, for `/v1/plan` and the web page.
    pub fn latest(&self) -> LatestPlan {
        self.latest.clone()
    }

    pub fn new() -> Views {
        Views {
            plans: BTreeMap::new(),
            dirty: false,
            last_published: None,
            last_logged_plan: None,
            latest: Arc::new(Mutex::new(None)),
        }
    }

    /// A pool's new plan (kept only if it differs from the last).
    pub fn record(&mut self, pool: &str, plan: &PoolPlan) {
        if self.plans.get(pool).is_none_or(|old| **old != *plan) {
            self.plans.insert(pool.to_string(), Arc::new(plan.clone()));
            self.dirty = true;
        }
    }

    /// A pool no longer planned.
    pub fn remove(&mut self, pool: &str) {
        if self.plans.remove(pool).is_some() {
            self.dirty = true;
        }
    }

    /// Something every view shows changed (the revision, the providers).
    pub fn changed(&mut self) {
        self.dirty = true;
    }

    /// Every pool planned so far.
    pub fn pools(&self) -> impl Iterator<Item = &String> {
        self.plans.keys()
    }

    /// When the views should next be assembled; `None` while nothing changed.
    /// At once when nothing else is queued or being observed (`idle`: the
    /// plan of a quiet fleet is current), else at most every `PUBLISH_EVERY`.
    pub fn due(&self, idle: bool) -> Option<Instant> {
        if !self.dirty {
            return None;
        }
        Some(match self.last_published {
            Some(t) if !idle => t + PUBLISH_EVERY,
            _ => Instant::now(),
        })
    }

    /// Assemble the views if something changed and the last assembly is old
    /// enough. A dry-run logs the plan when it changed.
    pub fn publish(
        &mut self,
        idle: bool,
        dir: &std::path::Path,
        in_force: &InForce,
        dry_run: bool,
    ) -> bool {
        let Some(due) = self.due(idle) else {
            return false;
        };
        if Instant::now() < due {
            return false;
        }
        self.dirty = false;
        self.last_published = Some(Instant::now());
        let pools: Vec<_> = self.plans.values().cloned().collect();
        let source = Source {
            dir: dir.display().to_string(),
            revision: in_force.revision.clone(),
        };
        let polls = in_force
            .config
            .providers
            .keys()
            .filter_map(|n| {
                Some((
                    n.clone(),
                    in_force.providers.get(n)?.capabilities().poll_interval,
                ))
            })
            .collect();
        if dry_run && pools.iter().any(|p| p.has_changes()) {
            let plan = Plan {
                pools: pools.iter().map(|p| PoolPlan::clone(p)).collect(),
                fleets: Vec::new(),
                images: Vec::new(),
            };
            let text = render_text(&plan, &source, Style { color: false });
            if self.last_logged_plan.as_deref() != Some(text.as_str()) {
                tracing::info!(dry_run = true, "would apply:\n{text}");
                self.last_logged_plan = Some(text);
            }
        }
        let latest = Latest {
            pools,
            source,
            config: in_force.config.clone(),
            polls,
            fleets: Vec::new(),
            json: OnceLock::new(),
        };
        *self.latest.locked() = Some(Arc::new(latest));
        true
    }
}
