//! The daemon's HTTP surface (axum). Reads: `/healthz` (liveness: the
//! reconcile loop turns), `/readyz`, `/metrics` (Prometheus text),
//! `/v1/status` (JSON), `/v1/plan` (the latest plan, JSON), `/v1/previews`
//! (plans of branches before they merge, see [`crate::daemon::source::previews`]), and the web
//! status page (`/`, `/v1/pools/{pool}/page`, `/v1/events/stream`: see
//! [`crate::daemon::serve::web`]). State changes:
//! `POST /v1/pools/{pool}/pause|resume` with a JSON body `{"reason": "..."}`,
//! served on the control socket, and on TCP only with the bearer token (see
//! [`crate::daemon::serve::access`] for who may ask what). `POST /v1/hooks/git`: a forge's
//! push webhook (see [`crate::daemon::serve::hooks`]).

use crate::sync::Locked;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::oneshot;

use crate::daemon::run::reconciler::{
    ControlAction, ControlRefusal, ControlRequest, ControlTarget,
};
use crate::daemon::serve::access::{Denied, check_not_cross_site};
use crate::daemon::serve::peer_id::Peer;
use crate::daemon::serve::shared::HttpState;
use crate::daemon::serve::web;

/// The routes; on TCP (`state.tcp` set) every request must name this
/// listener in `Host`.
pub fn router(state: HttpState) -> Router {
    let tcp = state.tcp.clone();
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/plan", get(plan))
        .route("/", get(web::index))
        .route("/ui/app.js", get(web::app_js))
        .route("/ui/app.css", get(web::app_css))
        .route("/v1/pools/{pool}/page", get(web::pool_page))
        .route("/v1/events/stream", get(web::events_stream))
        .route("/v1/pools/{pool}/rollout", get(rollout))
        .route("/v1/pools/{pool}/pause", post(act))
        .route("/v1/pools/{pool}/resume", post(act))
        .route("/v1/fleet", get(fleets))
        .route("/v1/fleet/{fleet}", get(fleet))
        .route("/v1/fleet/{fleet}/pause", post(act))
        .route("/v1/fleet/{fleet}/resume", post(act))
        .route("/v1/images", get(images))
        .route("/v1/images/{image}/recall", post(act))
        .route("/v1/images/{image}/unrecall", post(act))
        .route("/v1/previews", get(previews))
        .route("/v1/previews/{*git_ref}", get(preview))
        .route(
            crate::daemon::serve::hooks::PATH,
            post(crate::daemon::serve::hooks::git_hook),
        )
        .with_state(state)
        // Nothing served carries a secret: every answer passes one redaction.
        .layer(axum::middleware::map_response(redacted))
        // No answer is ever to be sniffed into another type (JSON shown as HTML).
        .layer(axum::middleware::map_response(
            |mut r: Response| async move {
                r.headers_mut().insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    axum::http::HeaderValue::from_static("nosniff"),
                );
                r
            },
        ));
    match tcp {
        Some(rules) => router.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let rules = rules.clone();
                async move {
                    // A webhook is authenticated by its signature, and comes
                    // through whatever name the forge was given.
                    if req.uri().path() == crate::daemon::serve::hooks::PATH {
                        return next.run(req).await;
                    }
                    match rules
                        .check_host(req.headers())
                        .and_then(|()| rules.check_target(req.uri()))
                    {
                        Ok(()) => next.run(req).await,
                        Err(denied) => refuse(denied),
                    }
                }
            },
        )),
        None => router,
    }
}

/// The largest answer redacted whole (a pool page of 100,000 nodes is
/// about 17 MB); a larger one is refused rather than served unredacted.
const REDACTED_BODY_LIMIT: usize = 256 * 1024 * 1024;

/// An answer with every secret poolwright knows of, and every
/// credential-shaped value, redacted (`crate::secrets`): JSON string by
/// string, text as a whole. The event stream is redacted message by
/// message where it is built (`feed`), as it never ends.
async fn redacted(r: Response) -> Response {
    let kind = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    // The page's own HTML, script and style are poolwright's, not data.
    let data = ["application/json", "text/plain", "text/markdown"];
    if !data.iter().any(|d| kind.starts_with(d)) {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, REDACTED_BODY_LIMIT).await else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the answer was too large to be checked for secrets\n",
        )
            .into_response();
    };
    let out: Vec<u8> = if kind.starts_with("application/json") {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(mut v) => {
                crate::secrets::redact_json(&mut v);
                serde_json::to_vec(&v).unwrap_or_default()
            }
            Err(_) => crate::secrets::redact(&String::from_utf8_lossy(&bytes))
                .into_owned()
                .into_bytes(),
        }
    } else {
        match std::str::from_utf8(&bytes) {
            Ok(text) => match crate::secrets::redact(text) {
                std::borrow::Cow::Borrowed(_) => bytes.to_vec(),
                std::borrow::Cow::Owned(t) => t.into_bytes(),
            },
            Err(_) => bytes.to_vec(),
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

/// A refusal, as plain text never to be sniffed (the Host check runs
/// outside the layer that marks every other answer).
fn refuse(Denied(status, message): Denied) -> Response {
    (
        status,
        [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        format!("{message}\n"),
    )
        .into_response()
}

async fn healthz(State(s): State<HttpState>) -> Response {
    if s.heartbeat.alive() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stuck: the reconcile loop has not turned for {}s (bound {}s)\n",
                s.heartbeat.age().as_secs(),
                s.heartbeat.bound.as_secs()
            ),
        )
            .into_response()
    }
}

/// Ready once a desired state is in force and the first reconcile finished.
async fn readyz(State(s): State<HttpState>) -> Response {
    let doc = s.board.snapshot();
    if !s.heartbeat.alive() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the reconcile loop is stuck\n",
        )
            .into_response()
    } else if doc.daemon.ready && !doc.daemon.stopping {
        (StatusCode::OK, "ready\n").into_response()
    } else if doc.daemon.stopping {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response()
    } else {
        let why = if doc.config.valid || doc.config.last_load_at.is_none() {
            "not ready: the first reconcile has not finished\n".to_string()
        } else {
            format!(
                "not ready: no valid desired state yet ({} error(s))\n",
                doc.config.errors.len()
            )
        };
        (StatusCode::SERVICE_UNAVAILABLE, why).into_response()
    }
}

async fn metrics(State(s): State<HttpState>) -> Response {
    crate::daemon::run::reconciler::project_board(&s.board, &s.metrics);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusQuery {
    /// Only this pool's entry.
    #[serde(default)]
    pool: Option<String>,
    /// `none`: no pool entries (the totals only), for scripts watching a large fleet.
    #[serde(default)]
    pools: Option<String>,
}

/// The status; with `?pool=NAME` one pool's entry, with `?pools=none` none
/// (the totals say how many pools are in which state). A fleet of 10,000
/// pools is a large document; a script polling one pool should not pay for it.
async fn status(State(s): State<HttpState>, Query(q): Query<StatusQuery>) -> Response {
    if let Some(p) = &q.pool
        && !crate::spec::validate::is_dns_label(p, 63)
    {
        return (
            StatusCode::BAD_REQUEST,
            "pool= must be a pool name (1 to 63 lower-case letters, digits and '-')\n",
        )
            .into_response();
    }
    let none = match q.pools.as_deref() {
        None => false,
        Some("none") => true,
        Some(_) => {
            return (StatusCode::BAD_REQUEST, "pools= takes only \"none\"\n").into_response();
        }
    };
    let doc = s.board.read(|d| {
        let mut view = crate::daemon::views::board::StatusDoc {
            pools: Vec::new(),
            ..d.clone_without_pools()
        };
        view.totals = Some(crate::daemon::views::board::Totals::of(&d.pools));
        if !none {
            view.pools = match &q.pool {
                Some(name) => d
                    .pools
                    .iter()
                    .filter(|p| &p.name == name)
                    .cloned()
                    .collect(),
                None => d.pools.clone(),
            };
        }
        view
    });
    axum::Json(doc).into_response()
}

async fn plan(State(s): State<HttpState>) -> Response {
    match s.latest_plan.locked().clone() {
        Some(p) => axum::Json(p.json()).into_response(),
        None => (StatusCode::NOT_FOUND, "no plan yet\n").into_response(),
    }
}

/// A pool's rollout as its journal holds it (`poolwright rollout status`
/// through the daemon, so members of the control group need not read the
/// state directory's files). Only a pool of the desired state in force
/// names a journal.
async fn rollout(State(s): State<HttpState>, Path(pool): Path<String>) -> Response {
    let known = crate::spec::validate::is_dns_label(&pool, 63)
        && s.board.read(|doc| doc.pools.iter().any(|p| p.name == pool));
    if !known {
        let shown: String = pool.chars().take(80).collect();
        return (
            StatusCode::NOT_FOUND,
            format!("no pool named {shown:?} in the desired state in force\n"),
        )
            .into_response();
    }
    match s.journal.load(&pool).await {
        Ok(Some(r)) => axum::Json(r).into_response(),
        Ok(None) => axum::Json(serde_json::Value::Null).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Every state change (a pool's, a FleetRollout's, an image's), told
/// apart by the route it came by.
async fn act(
    state: State<HttpState>,
    peer: Extension<Peer>,
    route: MatchedPath,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some((target, action)) = control_of(route.as_str(), name) else {
        return (StatusCode::NOT_FOUND, "no such state change\n").into_response();
    };
    control(state, peer, target, headers, body, action).await
}

/// What a control route changes, and how: `/v1/pools/{pool}/pause`, ...
fn control_of(route: &str, name: String) -> Option<(ControlTarget, ControlAction)> {
    let verb = route.rsplit('/').next()?;
    let action = match verb {
        "pause" | "recall" => ControlAction::Pause,
        "resume" | "unrecall" => ControlAction::Resume,
        _ => return None,
    };
    let target = match route.split('/').nth(2)? {
        "pools" => ControlTarget::Pool(name),
        "fleet" => ControlTarget::Fleet(name),
        "images" => ControlTarget::Image {
            image: name,
            recall: verb == "recall",
        },
        _ => return None,
    };
    Some((target, action))
}

/// Every FleetRollout's change: its stages, each pool's place, its gates'
/// readings, its halt.
async fn fleets(State(s): State<HttpState>) -> Response {
    let all = s.fleet.locked().clone();
    axum::Json(serde_json::json!({ "fleets": all })).into_response()
}

/// One FleetRollout, by name (or by the id of its change).
async fn fleet(State(s): State<HttpState>, Path(name): Path<String>) -> Response {
    let all = s.fleet.locked();
    match all
        .iter()
        .find(|f| f.name == name || f.change.as_ref().is_some_and(|c| c.id == name))
    {
        Some(f) => axum::Json(f).into_response(),
        None => {
            let shown: String = name.chars().take(80).collect();
            (
                StatusCode::NOT_FOUND,
                format!("no FleetRollout or change {shown:?} in the desired state in force\n"),
            )
                .into_response()
        }
    }
}

/// Every image channel: the image in force, the newest seen and when it is
/// eligible, the queued one, the recalls, and each pool's image and lag.
async fn images(State(s): State<HttpState>) -> Response {
    let view = s.images.locked().clone();
    axum::Json(view).into_response()
}

/// Every preview of a branch, summed up (`run --git-url --preview-refs`).
async fn previews(State(s): State<HttpState>) -> Response {
    match &s.previews {
        Some(p) => axum::Json(p.board()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "this daemon fetches no config repo (run --git-url)\n",
        )
            .into_response(),
    }
}

#[derive(serde::Deserialize)]
struct PreviewQuery {
    #[serde(default)]
    format: Option<String>,
}

/// One ref's preview: JSON with the plan (`plan -o json`) and its text, or
/// only the text (`?format=text`) or the pull-request comment
/// (`?format=markdown`).
async fn preview(
    State(s): State<HttpState>,
    Path(git_ref): Path<String>,
    Query(q): Query<PreviewQuery>,
) -> Response {
    let found = s.previews.as_ref().and_then(|p| p.get(&git_ref));
    let Some(p) = found else {
        let shown: String = git_ref.chars().take(120).collect();
        return (
            StatusCode::NOT_FOUND,
            format!("no preview of {shown:?} (GET /v1/previews lists them)\n"),
        )
            .into_response();
    };
    let text =
        |body: String, kind: &'static str| ([(header::CONTENT_TYPE, kind)], body).into_response();
    let rendered = p.rendered.as_ref();
    match q.format.as_deref() {
        Some("text") => text(
            rendered
                .map(|r| r.text.clone())
                .unwrap_or_else(|| p.errors.join("\n") + "\n"),
            "text/plain; charset=utf-8",
        ),
        Some("markdown") => text(
            rendered
                .map(|r| r.markdown.clone())
                .unwrap_or_else(|| p.errors.join("\n") + "\n"),
            "text/markdown; charset=utf-8",
        ),
        None | Some("json") => {
            let mut body = serde_json::to_value(p.as_ref()).unwrap_or_default();
            if let (Some(r), Some(obj)) = (rendered, body.as_object_mut()) {
                obj.insert("plan".into(), r.json.clone());
                obj.insert("text".into(), r.text.clone().into());
            }
            axum::Json(body).into_response()
        }
        Some(_) => (
            StatusCode::BAD_REQUEST,
            "format: json (the default), text or markdown\n",
        )
            .into_response(),
    }
}

/// The body of a state change.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ControlBody {
    #[serde(default)]
    reason: Option<String>,
}

/// The longest reason kept (it goes into logs and events).
const REASON_LIMIT: usize = 1024;

/// The largest body of a state change read (a reason and braces).
const BODY_LIMIT: usize = 16 * 1024;

async fn control(
    State(s): State<HttpState>,
    Extension(peer): Extension<Peer>,
    target: ControlTarget,
    headers: HeaderMap,
    body: Body,
    action: ControlAction,
) -> Response {
    if let Err(denied) = check_not_cross_site(&headers, s.tcp.as_deref()) {
        return refuse(denied);
    }
    let token = match (&peer, &s.tcp) {
        (Peer::Tcp { .. }, Some(rules)) => match rules.check_token(&headers, &peer) {
            Ok(id) => Some(id),
            Err(denied) => return refuse(denied),
        },
        (Peer::Tcp { .. }, None) => {
            return refuse(Denied(
                StatusCode::FORBIDDEN,
                "not a control listener".into(),
            ));
        }
        (Peer::Socket { .. }, _) => None,
    };
    let body =
        match tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, BODY_LIMIT)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(_)) => {
                return refuse(Denied(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body must be at most {BODY_LIMIT} bytes"),
                ));
            }
            Err(_) => {
                return refuse(Denied(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {}s",
                        s.body_timeout.as_secs()
                    ),
                ));
            }
        };
    let body: ControlBody = if body.iter().all(u8::is_ascii_whitespace) {
        ControlBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return refuse(Denied(
                    StatusCode::BAD_REQUEST,
                    format!("the body must be {{\"reason\": \"...\"}}: {e}"),
                ));
            }
        }
    };
    let reason = body
        .reason
        .map(|r| {
            r.chars()
                .filter(|c| !c.is_control())
                .take(REASON_LIMIT)
                .collect::<String>()
        })
        .filter(|r| !r.trim().is_empty());
    // Resuming a halted change across pools overrides what halted it: it
    // needs a reason, for the log and the events.
    if matches!(target, ControlTarget::Image { .. }) && reason.is_none() {
        return refuse(Denied(
            StatusCode::BAD_REQUEST,
            "recalling an image (or undoing a recall) needs a reason: {\"reason\": \"...\"}".into(),
        ));
    }
    if matches!(target, ControlTarget::Fleet(_))
        && action == ControlAction::Resume
        && reason.is_none()
    {
        return refuse(Denied(
            StatusCode::BAD_REQUEST,
            "resuming a fleet rollout's change needs a reason: {\"reason\": \"...\"}".into(),
        ));
    }
    let who = peer.describe(token.as_deref());
    let (reply, answer) = oneshot::channel();
    let request = ControlRequest {
        target,
        action,
        who,
        reason,
        reply,
    };
    if s.control.send(request).is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping\n").into_response();
    }
    match tokio::time::timeout(Duration::from_secs(30), answer).await {
        Ok(Ok(Ok(message))) => (StatusCode::OK, format!("{message}\n")).into_response(),
        Ok(Ok(Err(ControlRefusal::Unknown(message)))) => {
            (StatusCode::NOT_FOUND, format!("{message}\n")).into_response()
        }
        Ok(Ok(Err(ControlRefusal::Refused(message)))) => {
            (StatusCode::CONFLICT, format!("{message}\n")).into_response()
        }
        Ok(Err(_)) => (StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping\n").into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the daemon did not answer within 30s (a reconcile round is still running); try again\n",
        )
            .into_response(),
    }
}
