//! The status page at `/` and what it reads: the page and its two assets,
//! embedded in the binary (bastion hosts are often offline: no CDN, no
//! framework), one JSON document per pool (`/v1/pools/{pool}/page`) and the
//! live feed as Server-Sent Events (`/v1/events/stream`, also for scripts).
//!
//! Read-only: the page shows pause and resume only when the request that
//! loaded it would be allowed to make them (see [`crate::daemon::serve::access`]).

pub mod forecast;

use crate::sync::Locked;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream::{self, Stream};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use crate::daemon::serve::peer_id::Peer;
use crate::daemon::serve::shared::HttpState;
use crate::daemon::views::board::{ConfigStatus, DaemonInfo, PoolStatus, ReconcileStatus};
use crate::daemon::views::feed::{Message, PageNode, Stamped};
use crate::plan::Plan;
use crate::plan::render::{Style, render_text};
use crate::rollout::Budget;
use crate::spec::types::{Disruption, NodePoolDoc};
use crate::spec::validate::is_dns_label;

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");

/// Everything the page loads comes from this listener; nothing inline runs.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Events a page document carries (what the page keeps).
const PAGE_EVENTS: usize = 1000;

/// How far ahead the page's strip of disruption windows looks.
const WINDOW_STRIP: SignedDuration = SignedDuration::from_hours(7 * 24);

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The assets change only with the binary; a restart may bring a new one.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// One pool's page: its status, recent events (the timeline and the
/// capacity chart are drawn from them), its part of the latest plan, the
/// bounds its rollout keeps, the coming week's disruption windows.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolPage {
    pub pool: PoolStatus,
    pub events: Vec<Stamped>,
    /// The pool's nodes as last observed.
    pub nodes: Vec<PageNode>,
    /// Whether pause and resume, asked the way this page was, would be allowed.
    pub control: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounds: Option<PageBounds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<PageWindows>,
    /// The forecast of the roll planned or under way (see [`forecast`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<serde_json::Value>,
    pub daemon: DaemonInfo,
    pub config: ConfigStatus,
    pub reconcile: ReconcileStatus,
}

/// The rollout's bounds for the pool's current size.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PageBounds {
    pub size: u32,
    pub surge: u32,
    pub unavailable: u32,
    /// Fewest available nodes a rollout keeps.
    pub floor: u32,
    /// Most nodes a rollout runs at once.
    pub max_total: u32,
}

impl PageBounds {
    fn of(doc: &NodePoolDoc, size: u32) -> PageBounds {
        let b = Budget::resolve(&doc.spec.rollout, size);
        PageBounds {
            size,
            surge: b.surge,
            unavailable: b.unavailable,
            floor: size.saturating_sub(b.unavailable),
            max_total: size.saturating_add(b.surge),
        }
    }
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PageWindows {
    /// `Allow`, `Block` or `AllowDuringMaintenanceWindow`.
    pub policy: String,
    pub timezone: String,
    pub from: Timestamp,
    pub to: Timestamp,
    pub now: Timestamp,
    /// When disruptive steps may start, within `[from, to)`.
    pub open: Vec<Interval>,
}

#[derive(Serialize, Debug, PartialEq)]
struct Interval {
    pub start: Timestamp,
    pub end: Timestamp,
}

impl PageWindows {
    fn of(d: &Disruption, now: Timestamp) -> PageWindows {
        let to = now.saturating_add(WINDOW_STRIP).unwrap_or(now);
        PageWindows {
            policy: format!("{:?}", d.policy()),
            timezone: d
                .windows
                .first()
                .map(|w| w.value.timezone.value.clone())
                .unwrap_or_else(|| "UTC".into()),
            from: now,
            to,
            now,
            open: crate::policy::open_intervals(d, now, to)
                .into_iter()
                .map(|(start, end)| Interval { start, end })
                .collect(),
        }
    }
}

/// The pool's part of the plan, as `poolwright plan` prints it; none when
/// the pool is in sync.
fn plan_text(latest: &crate::daemon::run::reconciler::Latest, pool: &str) -> Option<String> {
    let p = latest.pool(pool)?;
    let held = p.fleet.as_ref().is_some_and(|f| f.held.is_some());
    if p.steps.is_empty() && p.hold.is_none() && p.drift.is_empty() && !held {
        return None;
    }
    let one = Plan {
        pools: vec![p.clone()],
        fleets: Vec::new(),
        images: Vec::new(),
    };
    Some(render_text(&one, &latest.source, Style { color: false }))
}

pub async fn pool_page(
    State(s): State<HttpState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !is_dns_label(&name, 63) {
        return (
            StatusCode::NOT_FOUND,
            "not a pool name (1 to 63 lower-case letters, digits and '-')\n",
        )
            .into_response();
    }
    let doc = s.board.snapshot();
    // Only a pool of the desired state in force (or one the daemon reports)
    // names anything here.
    let Some(pool) = doc.pools.iter().find(|p| p.name == name).cloned() else {
        return (
            StatusCode::NOT_FOUND,
            format!("no pool named {name:?} in the desired state in force\n"),
        )
            .into_response();
    };
    let latest = s.latest_plan.locked().clone();
    let now = Timestamp::now();
    let entry = latest.as_ref().and_then(|l| l.config.pools.get(&name));
    let size = pool
        .rollout
        .as_ref()
        .map(|r| r.counts.desired)
        .or_else(|| {
            entry.and_then(|e| {
                e.doc
                    .spec
                    .size
                    .as_ref()
                    .map(|s| s.value.clamp(0, u32::MAX as i64) as u32)
            })
        })
        .unwrap_or(0);
    // A browser reaches the daemon on TCP only, and its state changes need
    // the bearer token there (a proxy that adds it): the buttons show when
    // this request carried it. On the control socket every request with an
    // Origin is refused, so a browser behind it could not use them.
    let control = match (&peer, &s.tcp) {
        (Peer::Tcp { .. }, Some(rules)) => {
            rules.token_file.is_some()
                && headers.contains_key(header::AUTHORIZATION)
                && rules.check_token(&headers, &peer).is_ok()
        }
        _ => false,
    };
    let page = PoolPage {
        events: s.feed.recent(&name, PAGE_EVENTS),
        nodes: s.feed.nodes(&name),
        control,
        plan_text: latest.as_ref().and_then(|l| plan_text(l, &name)),
        bounds: entry.map(|e| PageBounds::of(&e.doc, size)),
        windows: entry.map(|e| PageWindows::of(&e.doc.spec.disruption, now)),
        forecast: match &latest {
            Some(l) => {
                s.forecasts
                    .get(l, &name, s.feed.last_observed(&name), now)
                    .await
            }
            None => None,
        },
        pool,
        daemon: doc.daemon,
        config: doc.config,
        reconcile: doc.reconcile,
    };
    let mut r = axum::Json(page).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(default)]
    pool: Option<String>,
}

/// The live feed: `rollout` (one event, with `seq`), `pool` (one pool's
/// status) and `config` messages. With `?pool=NAME`, rollout and pool
/// messages of that pool only. A subscriber that falls behind is cut off;
/// an EventSource reconnects by itself.
pub async fn events_stream(
    State(s): State<HttpState>,
    Extension(peer): Extension<Peer>,
    Query(q): Query<StreamQuery>,
) -> Response {
    if let Some(p) = &q.pool
        && !is_dns_label(p, 63)
    {
        return (
            StatusCode::BAD_REQUEST,
            "pool= must be a pool name (1 to 63 lower-case letters, digits and '-')\n",
        )
            .into_response();
    }
    let who = crate::daemon::serve::peer_id::identity(&peer);
    let slot = match s.feed.stream_slot(&who) {
        Ok(slot) => slot,
        Err(crate::daemon::views::feed::NoPlace::Full) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{} live streams are open, the most served at once; try again later\n",
                    crate::daemon::views::feed::MAX_STREAMS
                ),
            )
                .into_response();
        }
        Err(crate::daemon::views::feed::NoPlace::PeerFull) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{who} holds {} live streams, the most one peer may; close one first\n",
                    crate::daemon::views::feed::MAX_STREAMS_PER_PEER
                ),
            )
                .into_response();
        }
    };
    let rx = s.feed.subscribe();
    // Whatever changed before this subscriber came is in the document it
    // loads; send the board once so a fresh stream starts from now.
    s.feed.publish_board(&s.board);
    let mut sse = Sse::new(subscription(rx, q.pool, slot))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    // Proxies must not buffer it.
    sse.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    sse
}

fn subscription(
    (rx, closed): (
        tokio::sync::broadcast::Receiver<Message>,
        tokio::sync::watch::Receiver<bool>,
    ),
    pool: Option<String>,
    slot: crate::daemon::views::feed::StreamSlot,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let hello = SseEvent::default()
        .retry(Duration::from_secs(2))
        .comment("poolwright");
    stream::once(async move { Ok(hello) }).chain(stream::unfold(
        (rx, closed, pool, slot),
        |(mut rx, mut closed, pool, slot)| async move {
            loop {
                let m = tokio::select! {
                    m = rx.recv() => m,
                    _ = closed.wait_for(|c| *c) => return None,
                };
                match m {
                    Ok(m) => {
                        if m.name != "config" && pool.is_some() && m.pool != pool {
                            continue;
                        }
                        let e = SseEvent::default().event(m.name).data(&*m.data);
                        return Some((Ok(e), (rx, closed, pool, slot)));
                    }
                    // Fell behind: end the stream; the client reconnects and
                    // reloads what it shows.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return None,
                }
            }
        },
    ))
}
