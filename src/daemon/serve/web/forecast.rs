//! The pool page's forecast of the roll in progress or planned: the same
//! forecast as `poolwright forecast` (fewer runs), made when a page asks.
//! A page request is unauthenticated, so the work is what is bounded, not
//! only the waiting: one forecast at a time for the whole daemon, on one
//! thread, given up at its next look after `WORK`; a result (or the note
//! that the pool is too large) is kept per pool and state of the roll for a
//! minute and shared by every page asking; and after a forecast that took
//! `d` no forecast of any pool starts for `REST` times `d` (a page asking
//! meanwhile gets its pool's last one, or none), so pages cost at most a
//! sixth of a core however often, and for however many pools, they are asked
//! for. A pool too large for `WORK` gets `{"unavailable": why}` in place of
//! the forecast.

use crate::sync::Locked;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::Semaphore;

use crate::daemon::run::reconciler::Latest;
use crate::model::{ObservedPool, TemplateHash};
use crate::reconcile::forecast::{Case, Latencies, Limits, OutOfTime, forecast_within};
use crate::spec::types::ProviderSpec;
use crate::store::latency::LatencyStore;

/// Runs per page forecast (the CLI's default is 200).
pub const RUNS: u32 = 50;
/// A forecast is made again after this, or when the roll moved on.
const FRESH: Duration = Duration::from_secs(60);
/// The work of one forecast: no run starts after this, and the run under
/// way is given up at its next look (a large pool gets fewer runs, or a
/// note that it is too large to forecast here).
const WORK: Duration = Duration::from_secs(5);
/// After a forecast that took `d`, none starts for `REST * d`.
const REST: u32 = 5;

struct Cached {
    key: String,
    at: Instant,
    value: Option<serde_json::Value>,
}

pub struct PageForecasts {
    latency: LatencyStore,
    cache: Arc<Mutex<HashMap<String, Cached>>>,
    busy: Arc<Semaphore>,
    /// No forecast starts before this (the rest after the last one).
    rest_until: Arc<Mutex<Instant>>,
}

impl PageForecasts {
    pub fn new(state_root: PathBuf) -> PageForecasts {
        PageForecasts {
            latency: LatencyStore::new(&state_root),
            cache: Arc::new(Mutex::new(HashMap::new())),
            busy: Arc::new(Semaphore::new(1)),
            rest_until: Arc::new(Mutex::new(Instant::now())),
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
            let cache = self.cache.locked();
            match cache.get(pool) {
                Some(c) if c.key == key && c.at.elapsed() < FRESH => return c.value.clone(),
                Some(c) => c.value.clone(),
                None => None,
            }
        };
        // One at a time, and not while resting: a page asking then gets the
        // last one made (or none).
        if Instant::now() < *self.rest_until.locked() {
            return stale;
        }
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
        let (cache, rest_until) = (self.cache.clone(), self.rest_until.clone());
        let name = pool.to_string();
        // The job finishes (within WORK) and keeps its result whether or not
        // the page that asked is still waiting: no work is thrown away.
        let job = tokio::task::spawn_blocking(move || {
            let began = Instant::now();
            let latencies = Latencies::choose(latency.load(&name).as_ref(), sim.as_ref());
            let case = Case {
                pool: &observed,
                target: &template,
                settings: &settings,
                poll,
            };
            let limits = Limits {
                deadline: Some(began + WORK),
                threads: 1,
            };
            let value = match forecast_within(&case, &latencies, RUNS, 1, now, limits) {
                Ok(f) => serde_json::to_value(&f).ok().map(|mut v| {
                    if let (Some(tz), Some(o)) = (timezone, v.as_object_mut()) {
                        o.insert("timezone".into(), tz.into());
                    }
                    v
                }),
                Err(e) if e.is::<OutOfTime>() => Some(serde_json::json!({
                    "unavailable": format!(
                        "too large to forecast on this page ({} nodes): run `poolwright forecast --pool {name}`",
                        observed.nodes.len()
                    )
                })),
                Err(e) => {
                    tracing::warn!(pool = %name, "forecast for the status page failed: {e:#}");
                    None
                }
            };
            *rest_until.locked() = Instant::now() + began.elapsed() * REST;
            cache.locked().insert(
                name,
                Cached {
                    key,
                    at: Instant::now(),
                    value: value.clone(),
                },
            );
            drop(permit);
            value
        });
        // The work is bounded by WORK and a look; the wait, a little more.
        match tokio::time::timeout(WORK * 2, job).await {
            Ok(Ok(value)) => value,
            _ => stale,
        }
    }
}
