//! `POST /v1/hooks/git`: a forge's push webhook makes the daemon fetch the
//! config repo at once. The request is authenticated by its signature (the
//! secret of `--webhook-secret-file`, read again on every webhook so it can
//! be rotated), not by where it comes from: the route is exempt from the
//! TCP listener's `Host` rule, so a reverse proxy can pass the forge's
//! requests on as they are. A webhook never carries configuration; it only
//! says "fetch now", and a burst of them makes one fetch.

use std::path::Path;

use crate::daemon::serve::shared::HttpState;
use crate::daemon::source::fetcher::Poke;
use crate::daemon::views::metrics::WebhookLabels;
use crate::git::hook::{self, Hook};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The route.
pub const PATH: &str = "/v1/hooks/git";

/// The largest webhook body taken. A push of many commits is well under it
/// (GitHub lists at most 20 commits in a push event).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// The secret, checked: a regular file, at most 4 KiB, at least 32 bytes
/// once trimmed.
pub fn read_webhook_secret(path: &Path) -> anyhow::Result<String> {
    crate::daemon::serve::access::read_secret("--webhook-secret-file", path)
}

fn answer(status: StatusCode, message: impl Into<String>) -> Response {
    (status, format!("{}\n", message.into())).into_response()
}

pub async fn git_hook(State(s): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    let count = |forge: &str, result: &str| {
        s.metrics
            .git_webhooks
            .get_or_create(&WebhookLabels {
                forge: forge.into(),
                result: result.into(),
            })
            .inc();
    };
    let Some(target) = s.hooks.clone() else {
        return answer(
            StatusCode::NOT_FOUND,
            "this daemon fetches no config repo (run --git-url)",
        );
    };
    let Some(secret_file) = &target.secret_file else {
        return answer(
            StatusCode::NOT_FOUND,
            "webhooks are off: run with --webhook-secret-file",
        );
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > BODY_LIMIT as u64) {
        count("unknown", "too-large");
        return answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a webhook body is at most {BODY_LIMIT} bytes"),
        );
    }
    let body =
        match tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, BODY_LIMIT)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(_)) => {
                count("unknown", "too-large");
                return answer(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a webhook body is at most {BODY_LIMIT} bytes"),
                );
            }
            Err(_) => {
                return answer(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {}s",
                        s.body_timeout.as_secs()
                    ),
                );
            }
        };
    let secret = {
        let path = secret_file.clone();
        match tokio::task::spawn_blocking(move || read_webhook_secret(&path)).await {
            Ok(Ok(secret)) => secret,
            Ok(Err(e)) => {
                tracing::error!("a webhook could not be checked: {e:#}");
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the daemon cannot read its webhook secret; see its log",
                );
            }
            Err(_) => {
                return answer(StatusCode::SERVICE_UNAVAILABLE, "reading the secret failed");
            }
        }
    };
    let verified = hook::verify(
        |name| headers.get(name).and_then(|v| v.to_str().ok()),
        &body,
        secret.as_bytes(),
    );
    match verified {
        Err(refused) => {
            count("unknown", "refused");
            tracing::warn!("a webhook was refused: {refused}");
            answer(
                StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::BAD_REQUEST),
                refused.to_string(),
            )
        }
        Ok(Hook::Other { forge, event }) => {
            count(forge.as_str(), "ignored");
            answer(
                StatusCode::OK,
                format!("ignored: a {event:?} event (only pushes make a fetch)"),
            )
        }
        Ok(Hook::Push {
            forge,
            git_ref,
            after,
        }) => {
            let watched = format!("refs/heads/{}", target.branch);
            let previewed = target
                .preview_refs
                .iter()
                .any(|p| crate::git::mirror::ref_matches(p, &git_ref));
            if previewed && git_ref != watched {
                count(forge.as_str(), "fetch");
                // The preview's tip is not the branch's: always a fetch.
                let _ = target.pokes.try_send(Poke { after: None });
                return answer(
                    StatusCode::ACCEPTED,
                    format!("fetching {git_ref} to preview it"),
                );
            }
            if git_ref != watched {
                count(forge.as_str(), "ignored");
                return answer(
                    StatusCode::ACCEPTED,
                    format!("ignored: a push to {git_ref}; this daemon applies {watched}"),
                );
            }
            count(forge.as_str(), "fetch");
            // A full queue already holds a fetch to come: this push is in it.
            let _ = target.pokes.try_send(Poke { after: Some(after) });
            answer(StatusCode::ACCEPTED, format!("fetching {watched}"))
        }
    }
}
