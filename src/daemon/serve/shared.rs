//! What every HTTP handler shares (the routes in `http`, the page in `web`):
//! the status board, the metrics, the latest plan, the event feed, the
//! control channel into the loop, and the loop's heartbeat.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::daemon::run::reconciler::{ControlRequest, LatestPlan};
use crate::daemon::serve::access::TcpRules;
use crate::daemon::serve::web::forecast::PageForecasts;
use crate::daemon::views::board::Board;
use crate::daemon::views::feed::Feed;
use crate::daemon::views::metrics::Metrics;

#[derive(Clone)]
pub struct HttpState {
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
    pub latest_plan: LatestPlan,
    /// Numbered events and the live stream (`/v1/events/stream`, the page).
    pub feed: Arc<Feed>,
    /// The pool page's forecasts.
    pub forecasts: Arc<PageForecasts>,
    /// Each FleetRollout's change (`/v1/fleet`).
    pub fleet: crate::daemon::run::reconciler::fleet::FleetStatuses,
    pub control: mpsc::UnboundedSender<ControlRequest>,
    pub heartbeat: Arc<Heartbeat>,
    /// The TCP listener's rules; `None` on the control socket.
    pub tcp: Option<Arc<TcpRules>>,
    /// A request's body must arrive within this (`--header-timeout`): a
    /// client announcing a body and sending nothing holds no connection slot.
    pub body_timeout: Duration,
    /// Push webhooks (`run --git-url`); `None` without a remote.
    pub hooks: Option<Arc<crate::daemon::source::fetcher::HookTarget>>,
    /// Previews of branches (`run --git-url`); `None` without a remote.
    pub previews: Option<Arc<crate::daemon::source::previews::Previews>>,
    /// The rollout journals (`/v1/pools/POOL/rollout`).
    pub journal: Arc<crate::store::Journal>,
    /// Image channels (`/v1/images`).
    pub images: crate::daemon::run::reconciler::images::ImagesView,
}

/// When the reconcile loop last turned, for liveness and the systemd watchdog.
pub struct Heartbeat {
    origin: Instant,
    last_ms: AtomicU64,
    /// Longer than this without a turn is a stuck loop.
    pub bound: Duration,
}

impl Heartbeat {
    pub fn new(bound: Duration) -> Self {
        Heartbeat {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            bound,
        }
    }

    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the last turn.
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    pub fn alive(&self) -> bool {
        self.age() <= self.bound
    }
}
