//! The status surface (axum): `/healthz`, `/readyz`, `/metrics` (Prometheus
//! text), `/v1/status` (JSON), `/v1/plan` (the latest plan, JSON), and
//! `POST /v1/pools/{pool}/pause|resume`. Listens on loopback unless told
//! otherwise; nothing it serves carries a secret.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::{mpsc, oneshot};

use super::board::Board;
use super::metrics::Metrics;
use super::reconciler::{ControlAction, ControlRequest};

#[derive(Clone)]
pub struct HttpState {
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
    pub latest_plan: Arc<Mutex<Option<serde_json::Value>>>,
    pub control: mpsc::UnboundedSender<ControlRequest>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/plan", get(plan))
        .route("/v1/pools/{pool}/pause", post(pause))
        .route("/v1/pools/{pool}/resume", post(resume))
        .with_state(state)
}

/// Ready once a desired state is in force and the first reconcile finished.
async fn readyz(State(s): State<HttpState>) -> Response {
    let doc = s.board.snapshot();
    if doc.daemon.ready && !doc.daemon.stopping {
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
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

async fn status(State(s): State<HttpState>) -> Response {
    axum::Json(s.board.snapshot()).into_response()
}

async fn plan(State(s): State<HttpState>) -> Response {
    match s
        .latest_plan
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        Some(p) => axum::Json(p).into_response(),
        None => (StatusCode::NOT_FOUND, "no plan yet\n").into_response(),
    }
}

async fn pause(state: State<HttpState>, pool: Path<String>) -> Response {
    control(state, pool, ControlAction::Pause).await
}

async fn resume(state: State<HttpState>, pool: Path<String>) -> Response {
    control(state, pool, ControlAction::Resume).await
}

async fn control(
    State(s): State<HttpState>,
    Path(pool): Path<String>,
    action: ControlAction,
) -> Response {
    let (reply, answer) = oneshot::channel();
    let request = ControlRequest {
        pool,
        action,
        who: "a human (poolwright rollout)".into(),
        reply,
    };
    if s.control.send(request).is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping\n").into_response();
    }
    match answer.await {
        Ok(Ok(message)) => (StatusCode::OK, format!("{message}\n")).into_response(),
        Ok(Err(message)) => (StatusCode::CONFLICT, format!("{message}\n")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping\n").into_response(),
    }
}
