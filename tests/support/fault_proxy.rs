//! An HTTP proxy that misbehaves like a backend on a bad day: it throttles
//! some requests before they reach the backend, and loses the answer of others
//! after the backend has acted on them (a 503 in place of the real answer), so
//! a client that retries blindly would act twice. In front of moto it answers
//! in AWS's error formats; in front of a plug-in, in problem+json.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

pub struct Faults {
    /// Every Nth request is throttled without reaching moto (0: never).
    pub throttle_every: u64,
    /// Every Nth request reaches moto, and its answer is replaced by a 503.
    pub lose_answer_every: u64,
}

#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub throttled: AtomicU64,
    pub lost: AtomicU64,
}

struct Shared {
    /// Answer as a poolwright plug-in (problem+json), not as AWS.
    plugin: bool,
    upstream: String,
    faults: Faults,
    counters: Arc<Counters>,
    client: reqwest::Client,
}

pub struct FaultProxy {
    pub url: String,
    pub counters: Arc<Counters>,
    _runtime: tokio::runtime::Runtime,
}

impl FaultProxy {
    /// In front of moto.
    pub fn start(upstream: &str, faults: Faults) -> FaultProxy {
        FaultProxy::start_as(upstream, faults, false)
    }

    /// In front of a provider plug-in.
    pub fn start_plugin(upstream: &str, faults: Faults) -> FaultProxy {
        FaultProxy::start_as(upstream, faults, true)
    }

    fn start_as(upstream: &str, faults: Faults, plugin: bool) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(Shared {
            plugin,
            upstream: upstream.to_string(),
            faults,
            counters: counters.clone(),
            client: reqwest::Client::new(),
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(forward).with_state(shared);
        runtime.spawn(async move { axum::serve(listener, app).await });
        FaultProxy {
            url,
            counters,
            _runtime: runtime,
        }
    }
}

/// The service a signed request is for (`.../us-east-1/ec2/aws4_request`).
fn service(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').nth(3))
        .unwrap_or("autoscaling")
        .to_string()
}

/// An error body in the service's own protocol, so the SDK parses its code.
fn error(service: &str, status: StatusCode, code: &str, message: &str) -> Response {
    let body = if service == "ec2" {
        format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"
        )
    } else {
        format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
    };
    (status, [("content-type", "text/xml")], body).into_response()
}

/// A plug-in's problem answer.
fn problem(status: StatusCode, kind: &str, detail: &str) -> Response {
    (
        status,
        [
            ("content-type", "application/problem+json"),
            ("retry-after", "0"),
        ],
        serde_json::json!({
            "type": format!("urn:poolwright:problem:{kind}"),
            "title": kind,
            "status": status.as_u16(),
            "detail": detail,
        })
        .to_string(),
    )
        .into_response()
}

async fn forward(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let n = s.counters.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let svc = service(req.headers());
    let every = |k: u64| k > 0 && n % k == 0;
    if every(s.faults.throttle_every) {
        s.counters.throttled.fetch_add(1, Ordering::SeqCst);
        if s.plugin {
            return problem(
                StatusCode::TOO_MANY_REQUESTS,
                "throttled",
                "Rate exceeded (fault proxy)",
            );
        }
        let code = if svc == "ec2" {
            "RequestLimitExceeded"
        } else {
            "Throttling"
        };
        return error(&svc, StatusCode::BAD_REQUEST, code, "Rate exceeded");
    }
    let (parts, body) = req.into_parts();
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut upstream = s
        .client
        .request(parts.method.clone(), format!("{}{path}", s.upstream))
        .body(body);
    for (k, v) in &parts.headers {
        if k != "host" && k != "content-length" {
            upstream = upstream.header(k, v);
        }
    }
    let answer = match upstream.send().await {
        Ok(a) => a,
        Err(e) if s.plugin => {
            return problem(StatusCode::BAD_GATEWAY, "unavailable", &e.to_string());
        }
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if every(s.faults.lose_answer_every) {
        s.counters.lost.fetch_add(1, Ordering::SeqCst);
        if s.plugin {
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the answer was lost on the way back (fault proxy)",
            );
        }
        return error(
            &svc,
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the answer was lost on the way back",
        );
    }
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut out = Response::new(Body::from(bytes));
    *out.status_mut() = status;
    for (k, v) in &headers {
        if k != "content-length" && k != "transfer-encoding" {
            out.headers_mut().insert(k, v.clone());
        }
    }
    out
}
