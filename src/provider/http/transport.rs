//! One HTTP exchange with a plug-in, done carefully: bearer token (re-read when
//! its file changes), static headers, an `Idempotency-Key` on every mutating
//! call, retries of 429 and 5xx with jittered backoff that honours
//! `Retry-After`, a cap on the size of every answer, and errors that name the
//! call, the URL path and the plug-in's own words (RFC 9457 problem details).

use crate::sync::Locked;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rand::{RngExt, SeedableRng};
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::wire::{Problem, ProblemType};
use crate::provider::{ErrorKind, OpKey, ProviderError};

/// Largest answer read from a plug-in; a larger one is an error, not a read.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Largest token file.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;
/// A `Retry-After` longer than this is capped (the executor's own loop waits longer).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Where the bearer token comes from.
pub enum Token {
    None,
    /// Read once: the environment does not change under a running process.
    Env {
        name: String,
        value: Option<String>,
    },
    /// Re-read whenever the file's modification time or length changes, so a
    /// rotated token is used without a restart.
    File {
        path: PathBuf,
        cache: Mutex<Option<(SystemTime, u64, String)>>,
    },
}

impl Token {
    pub fn env(name: &str) -> Token {
        Token::Env {
            name: name.to_string(),
            value: std::env::var(name).ok().map(|v| v.trim().to_string()),
        }
    }

    pub fn file(path: PathBuf) -> Token {
        Token::File {
            path,
            cache: Mutex::new(None),
        }
    }

    /// The token to send now.
    pub fn current(&self) -> Result<Option<String>, super::BadSettings> {
        match self {
            Token::None => Ok(None),
            Token::Env { name, value } => match value {
                Some(v) if !v.is_empty() => Ok(Some(v.clone())),
                _ => {
                    Err(format!("tokenEnv: environment variable {name} is not set or empty").into())
                }
            },
            Token::File { path, cache } => {
                let meta = std::fs::metadata(path)
                    .map_err(|e| format!("tokenFile {}: {e}", path.display()))?;
                let stamp = (
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    meta.len(),
                );
                let mut cache = cache.locked();
                if let Some((m, l, t)) = cache.as_ref()
                    && (*m, *l) == stamp
                {
                    return Ok(Some(t.clone()));
                }
                let text = crate::files::read_regular_text(path, MAX_TOKEN_BYTES)
                    .map_err(|e| format!("tokenFile {}: {e}", path.display()))?;
                let token = text.trim().to_string();
                crate::secrets::remember(&token);
                if token.is_empty() {
                    return Err(format!("tokenFile {} is empty", path.display()).into());
                }
                *cache = Some((stamp.0, stamp.1, token.clone()));
                Ok(Some(token))
            }
        }
    }
}

pub struct Transport {
    /// The plug-in's base URL (a path prefix is kept).
    pub base: Url,
    http: reqwest::Client,
    token: Token,
    headers: HeaderMap,
    max_attempts: u32,
    /// The bound on one call, its retries and their waits included.
    operation_timeout: Duration,
}

/// One request, before it is sent.
pub struct Call<'a> {
    /// For messages: `CreateNodes(web, 2)`.
    pub name: String,
    pub method: Method,
    /// Path segments after the base URL, each percent-encoded when sent.
    pub path: Vec<&'a str>,
    pub body: Option<Vec<u8>>,
    pub key: Option<&'a OpKey>,
}

impl<'a> Call<'a> {
    pub fn get(name: String, path: Vec<&'a str>) -> Call<'a> {
        Call {
            name,
            method: Method::GET,
            path,
            body: None,
            key: None,
        }
    }

    /// A POST that only reads (describe): retried freely, no key.
    pub fn query(name: String, path: Vec<&'a str>, body: &impl Serialize) -> Call<'a> {
        Call {
            name,
            method: Method::POST,
            path,
            body: Some(serde_json::to_vec(body).expect("a request serializes")),
            key: None,
        }
    }

    /// A call that changes something: it carries its idempotency key.
    pub fn mutate(
        name: String,
        method: Method,
        path: Vec<&'a str>,
        body: Option<&impl Serialize>,
        key: &'a OpKey,
    ) -> Call<'a> {
        Call {
            name,
            method,
            path,
            body: body.map(|b| serde_json::to_vec(b).expect("a request serializes")),
            key: Some(key),
        }
    }

    /// `POST /v1/pools/web/nodes`, as messages show it.
    pub fn route(&self, base: &Url) -> String {
        let mut url = base.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop_if_empty().extend(self.path.iter());
        }
        format!("{} {}", self.method, url.path())
    }
}

/// What a plug-in answered to one request.
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The problem details of an error answer, if it carries them.
    pub fn problem(&self) -> Option<Problem> {
        self.content_type
            .as_deref()
            .filter(|c| c.starts_with("application/problem+json"))
            .and_then(|_| serde_json::from_slice(&self.body).ok())
    }
}

/// What went wrong with one attempt, and whether another may help.
struct Failure {
    error: ProviderError,
    retry_after: Option<Duration>,
    retryable: bool,
}

impl Transport {
    pub fn new(
        base: Url,
        http: reqwest::Client,
        token: Token,
        headers: HeaderMap,
        max_attempts: u32,
        operation_timeout: Duration,
    ) -> Transport {
        Transport {
            base,
            http,
            token,
            headers,
            max_attempts: max_attempts.max(1),
            operation_timeout,
        }
    }

    /// Send `call`, retrying what may be retried, and read a JSON answer of type `T`.
    pub async fn send<T: DeserializeOwned>(&self, call: &Call<'_>) -> Result<T, ProviderError> {
        let bytes = self.send_raw(call).await?;
        parse(call, &self.base, &bytes)
    }

    /// Send `call` and return the answer's body (2xx only).
    async fn send_raw(&self, call: &Call<'_>) -> Result<Vec<u8>, ProviderError> {
        let mut backoff = Duration::from_millis(100);
        let mut attempt = 1;
        let deadline = tokio::time::Instant::now() + self.operation_timeout;
        loop {
            let Ok(answer) = tokio::time::timeout_at(deadline, self.once(call)).await else {
                let mut e = ProviderError::new(
                    call.name.clone(),
                    ErrorKind::Unavailable,
                    format!(
                        "{} did not finish within operationTimeout ({}s, {attempt} attempt(s))",
                        call.route(&self.base),
                        self.operation_timeout.as_secs_f64()
                    ),
                );
                e.retried = true;
                return Err(e);
            };
            match answer {
                Ok(bytes) => return Ok(bytes),
                Err(f) if f.retryable && attempt < self.max_attempts => {
                    // Full jitter under an exponential cap; a Retry-After is a floor.
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                        jiff::Timestamp::now().as_nanosecond() as u64 ^ u64::from(attempt),
                    );
                    let jittered = backoff.mul_f64(rng.random_range(0.5..1.0));
                    let wait = f.retry_after.map_or(jittered, |r| r.max(jittered));
                    // A wait that would end past the deadline is not waited:
                    // the call fails now, with the answer that made it wait.
                    if tokio::time::Instant::now() + wait >= deadline {
                        let mut e = f.error;
                        e.message = format!(
                            "{} (gave up after {attempt} attempt(s): the next would start after operationTimeout, {}s)",
                            e.message,
                            self.operation_timeout.as_secs_f64()
                        );
                        e.retried = true;
                        return Err(e);
                    }
                    tracing::debug!(
                        call = %call.name,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        "plug-in call failed, retrying: {}",
                        f.error
                    );
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    attempt += 1;
                }
                Err(mut f) => {
                    if attempt > 1 {
                        f.error.message =
                            format!("{} (gave up after {attempt} attempts)", f.error.message);
                    }
                    f.error.retried = f.retryable;
                    return Err(f.error);
                }
            }
        }
    }

    fn url(&self, call: &Call<'_>) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop_if_empty().extend(call.path.iter());
        }
        url
    }

    /// One attempt, whatever the status: what the plug-in answered. `Err` only
    /// when no answer came (or it was over the size limit).
    pub async fn exchange(
        &self,
        call: &Call<'_>,
        send_token: bool,
    ) -> Result<Answer, ProviderError> {
        let route = call.route(&self.base);
        let fail =
            |kind: ErrorKind, message: String| ProviderError::new(call.name.clone(), kind, message);
        let token = if send_token {
            self.token
                .current()
                .map_err(|e| fail(ErrorKind::Rejected, e.0))?
        } else {
            None
        };
        let mut req = self
            .http
            .request(call.method.clone(), self.url(call))
            .headers(self.headers.clone())
            .header(header::ACCEPT, "application/json, application/problem+json");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = call.key {
            req = req.header("Idempotency-Key", k.as_str());
        }
        if let Some(body) = &call.body {
            req = req
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let started = std::time::Instant::now();
        let mut resp = req.send().await.map_err(|e| {
            let what = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "could not connect"
            } else {
                "failed"
            };
            let target = if e.is_connect() {
                format!(" to {}", self.base)
            } else {
                String::new()
            };
            fail(
                ErrorKind::Unavailable,
                format!("{route}: {what}{target}: {}", root_cause(&e)),
            )
        })?;
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(fail(
                            ErrorKind::Rejected,
                            format!(
                                "{route}: the answer is larger than the limit of {MAX_BODY_BYTES} bytes; nothing was done with it"
                            ),
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(fail(
                        ErrorKind::Unavailable,
                        format!("{route}: reading the answer failed: {}", root_cause(&e)),
                    ));
                }
            }
        }
        tracing::debug!(
            call = %call.name,
            route = %route,
            status = status.as_u16(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            bytes = body.len(),
            "plug-in answered"
        );
        Ok(Answer {
            status,
            content_type,
            retry_after,
            body,
        })
    }

    async fn once(&self, call: &Call<'_>) -> Result<Vec<u8>, Failure> {
        let route = call.route(&self.base);
        let answer = self.exchange(call, true).await.map_err(|error| Failure {
            retryable: error.kind == ErrorKind::Unavailable,
            error,
            retry_after: None,
        })?;
        let Answer {
            status,
            content_type,
            retry_after,
            body: bytes,
        } = answer;
        let problem_json = content_type.as_deref().is_some_and(|v| v.contains("json"));
        if status.is_success() {
            return Ok(bytes);
        }
        let problem: Option<Problem> = if problem_json {
            serde_json::from_slice(&bytes).ok()
        } else {
            None
        };
        let typed = problem
            .as_ref()
            .and_then(|p| p.kind.as_deref())
            .and_then(ProblemType::parse);
        // A 409 with Retry-After: the same key is still being worked on (a
        // retry overtook the first attempt): wait and ask again.
        let in_progress = status == StatusCode::CONFLICT && retry_after.is_some();
        let kind = match (typed, status) {
            (_, StatusCode::NOT_IMPLEMENTED) => ErrorKind::Unsupported,
            _ if in_progress => ErrorKind::Unavailable,
            (Some(ProblemType::QuotaExceeded), _) => ErrorKind::Quota,
            (Some(ProblemType::NotFound), _) => ErrorKind::NotFound,
            (Some(ProblemType::Throttled), _) => ErrorKind::Throttled,
            (Some(ProblemType::Unavailable), _) => ErrorKind::Unavailable,
            (Some(ProblemType::Unsupported), _) => ErrorKind::Unsupported,
            (Some(ProblemType::Conflict | ProblemType::Invalid | ProblemType::Unauthorized), _) => {
                ErrorKind::Rejected
            }
            (None, StatusCode::NOT_FOUND) => ErrorKind::NotFound,
            (None, StatusCode::TOO_MANY_REQUESTS) => ErrorKind::Throttled,
            (None, s) if s.is_server_error() => ErrorKind::Unavailable,
            (None, _) => ErrorKind::Rejected,
        };
        // 429, 5xx and an in-progress 409 may pass; another 4xx will not
        // (the same request gets the same answer).
        let retryable = status == StatusCode::TOO_MANY_REQUESTS
            || in_progress
            || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED);
        let type_name = typed.map_or_else(
            || {
                status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_ascii_lowercase()
            },
            |t| t.slug().to_string(),
        );
        let detail = match &problem {
            Some(p) => p
                .detail
                .clone()
                .or_else(|| p.title.clone())
                .unwrap_or_default(),
            None => String::from_utf8_lossy(&bytes).trim().to_string(),
        };
        let detail: String = detail.chars().take(500).collect();
        Err(Failure {
            error: ProviderError::new(
                call.name.clone(),
                kind,
                format!(
                    "{route} answered {} {type_name}{}",
                    status.as_u16(),
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(": {detail}")
                    }
                ),
            ),
            retry_after,
            retryable,
        })
    }
}

/// Read an answer of type `T`; a malformed one names the call and the field.
pub fn parse<T: DeserializeOwned>(
    call: &Call<'_>,
    base: &Url,
    bytes: &[u8],
) -> Result<T, ProviderError> {
    // The plain parser is the fast path; only a failure is read again to
    // find the path of the field at fault.
    let plain = match serde_json::from_slice::<T>(bytes) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let (field, inner) = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) if e.path().to_string() != "." => {
            (format!(" at {}", e.path()), e.into_inner().to_string())
        }
        _ => (String::new(), plain.to_string()),
    };
    Err(ProviderError::new(
        call.name.clone(),
        ErrorKind::Rejected,
        format!(
            "{}: the plug-in's answer is invalid{field}: {inner}; nothing was done with it",
            call.route(base)
        ),
    ))
}

/// `Retry-After` as seconds or an HTTP date, capped.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    let d = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
            let secs = at.duration_since(jiff::Timestamp::now()).as_secs_f64();
            Duration::from_secs_f64(secs.max(0.0))
        }
    };
    Some(d.min(MAX_RETRY_AFTER))
}

/// The innermost cause of a reqwest error ("Connection refused (os error
/// 111)"): what actually happened, without the layers around it.
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(s) = cause.source() {
        cause = s;
    }
    cause.to_string()
}

/// Static headers from the provider document; names and values checked by
/// validation, checked again here.
pub fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, super::BadSettings> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("headers: {k:?} is not a valid header name"))?;
        let value = HeaderValue::from_str(v)
            .map_err(|_| format!("headers: the value of {k} is not a valid header value"))?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("86400"));
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn routes_encode_untrusted_segments() {
        let base: Url = "http://127.0.0.1:1/prefix/".parse().unwrap();
        let call = Call::get("x".into(), vec!["v1", "pools", "web", "nodes", "a/../b c"]);
        assert_eq!(
            call.route(&base),
            "GET /prefix/v1/pools/web/nodes/a%2F..%2Fb%20c"
        );
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let t = Token::file(path.clone());
        assert_eq!(t.current().unwrap().as_deref(), Some("first"));
        std::fs::write(&path, "second-token\n").unwrap();
        assert_eq!(t.current().unwrap().as_deref(), Some("second-token"));
        std::fs::write(&path, "").unwrap();
        assert!(t.current().unwrap_err().0.contains("is empty"));
    }
}

#[cfg(test)]
mod encoding {
    use super::*;

    /// What the contract says of a node id in a path: exactly these
    /// characters are percent-encoded, every other printable one is sent raw.
    #[test]
    fn a_node_id_is_percent_encoded_as_the_contract_says() {
        let base = Url::parse("http://127.0.0.1:9/").unwrap();
        let encoded: String = (b'!'..=b'~')
            .map(char::from)
            .filter(|c| *c != '/')
            .filter(|c| {
                let id = format!("n{c}n");
                let call = Call::get("x".into(), vec!["v1", "pools", "web", "nodes", &id]);
                !call.route(&base).ends_with(&format!("/nodes/{id}"))
            })
            .collect();
        assert_eq!(encoded, "\"#%<>?\\`{}");
    }
}
