//! The pool page's forecast of the roll in progress or planned: the same
//! forecast as `poolwright forecast` (fewer runs), made when a page asks,
//! at most one at a time and within a deadline, and kept for a minute per
//! pool and state of the roll, so reloading pages costs nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::Semaphore;

use crate::daemon::reconciler::Latest;
use crate::model::{ObservedPool, TemplateHash};
use crate::reconcile::forecast::{Case, Latencies, forecast_within};
use crate::spec::types::ProviderSpec;
use crate::store::latency::LatencyStore;

/// Runs per page forecast (the CLI's default is 200).
pub const RUNS: u32 = 50;
/// A forecast is made again after this, or when the roll moved on.
const FRESH: Duration = Duration::from_secs(60);
/// The page does not wait longer than this for one (runs stop starting at
/// half of it, so a large pool gets a rougher forecast rather than none).
const DEADLINE: Duration = Duration::from_secs(10);

struct Cached {
    key: String,
    at: Instant,
    value: Option<serde_json::Value>,
}

pub struct PageForecasts {
    latency: LatencyStore,
    cache: Mutex<HashMap<String, Cached>>,
    busy: Arc<Semaphore>,
}

impl PageForecasts {
    pub fn new(state_root: PathBuf) -> PageForecasts {
        PageForecasts {
            latency: LatencyStore::new(&state_root),
            cache: Mutex::new(HashMap::new()),
            busy: Arc::new(Semaphore::new(1)),
        }
    }

    /// The forecast of `pool`'s roll, if the latest plan rolls it.
    pub async fn get(
        &self,
        latest: &Latest,
        pool: &str,
        observed: Option<(Arc<ObservedPool>, TemplateHash)>,
        now: Timestamp,
    ) -> Option<serde_json::Value> {
        let p = latest.pool(pool)?;
        // The roll due now, or the one held until its window opens.
        let (template, settings) = p.roll().map(|(t, s)| (t.clone(), s.clone()))?;
        let (observed, _) = observed?;
        let target = template.hash();
        let updated = observed
            .nodes
            .iter()
            .filter(|n| n.template == target)
            .count();
        let key = format!(
            "{target}/{}/{}/{}/{}/{updated}",
            settings.size,
            settings.budget.surge,
            settings.budget.unavailable,
            observed.nodes.len()
        );
        let stale = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            match cache.get(pool) {
                Some(c) if c.key == key && c.at.elapsed() < FRESH => return c.value.clone(),
                Some(c) => c.value.clone(),
                None => None,
            }
        };
        // One at a time: a page asking while another forecast runs gets the
        // last one made (or none).
        let Ok(permit) = self.busy.clone().try_acquire_owned() else {
            return stale;
        };
        let sim = latest
            .config
            .providers
            .get(&p.provider)
            .and_then(|e| match &e.doc.spec.value {
                ProviderSpec::Sim(s) => Some(s.clone()),
                _ => None,
            });
        let poll = latest
            .polls
            .get(&p.provider)
            .copied()
            .unwrap_or(Duration::from_secs(1));
        let timezone = settings
            .disruption
            .windows
            .first()
            .map(|w| w.value.timezone.value.clone());
        let latency = self.latency.clone();
        let name = pool.to_string();
        let job = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let latencies = Latencies::choose(latency.load(&name).as_ref(), sim.as_ref());
            let case = Case {
                pool: &observed,
                target: &template,
                settings: &settings,
                poll,
            };
            forecast_within(&case, &latencies, RUNS, 1, now, Some(DEADLINE / 2))
        });
        let value = match tokio::time::timeout(DEADLINE, job).await {
            Ok(Ok(Ok(f))) => serde_json::to_value(&f).ok().map(|mut v| {
                if let (Some(tz), Some(o)) = (timezone, v.as_object_mut()) {
                    o.insert("timezone".into(), tz.into());
                }
                v
            }),
            Ok(Ok(Err(e))) => {
                tracing::warn!(pool, "forecast for the status page failed: {e:#}");
                None
            }
            // Too slow (a very large pool): the page goes without, and the
            // next ask after the deadline tries again.
            _ => stale,
        };
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(
            pool.to_string(),
            Cached {
                key,
                at: Instant::now(),
                value: value.clone(),
            },
        );
        value
    }
}
