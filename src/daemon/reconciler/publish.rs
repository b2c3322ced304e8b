//! The fleet-wide views, assembled from each pool's latest plan (never a plan
//! of the whole fleet made for them): `/v1/plan`, the web page's plan text and
//! forecasts, and the plan a dry-run logs. Assembled at most every
//! `PUBLISH_EVERY` while pools change, and not at all while none does.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::{Latest, PUBLISH_EVERY, Reconciler};
use crate::plan::render::{Source, Style, render_text};
use crate::plan::{Plan, PoolPlan};

impl Reconciler {
    /// When the views should next be assembled; `None` while nothing changed.
    /// At once when nothing else is queued or being observed (the plan of a
    /// quiet fleet is current), else at most every `PUBLISH_EVERY`.
    pub fn publish_due(&self) -> Option<Instant> {
        if !self.plans_dirty {
            return None;
        }
        let idle = self.queue.is_empty() && self.observing.is_empty();
        Some(match self.last_published {
            Some(t) if !idle => t + PUBLISH_EVERY,
            _ => Instant::now(),
        })
    }

    /// Assemble the views if something changed and the last assembly is old enough.
    pub fn publish(&mut self) {
        let Some(due) = self.publish_due() else {
            return;
        };
        if Instant::now() < due {
            return;
        }
        let Some(in_force) = &self.in_force else {
            return;
        };
        self.plans_dirty = false;
        self.last_published = Some(Instant::now());
        let pools: Vec<_> = self.plans.values().cloned().collect();
        let source = Source {
            dir: self.source.dir().display().to_string(),
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
        if self.settings.dry_run && pools.iter().any(|p| p.has_changes()) {
            let plan = Plan {
                pools: pools.iter().map(|p| PoolPlan::clone(p)).collect(),
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
            json: OnceLock::new(),
        };
        *self.latest_plan.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(latest));
    }
}
