//! Reading a FleetRollout's gates: a PromQL query against a Prometheus HTTP
//! API (`POST /api/v1/query`). Everything the server says is untrusted: a
//! deadline per query, a bounded answer, redirects only within the server's
//! own origin, no proxy from the environment. A gate that cannot be read
//! does not hold, and says why.

use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

use crate::fleet::GateOutcome;
use crate::fleet::rules::GateRules;

/// The most a Prometheus answer may weigh.
const MAX_ANSWER: usize = 1024 * 1024;
/// Redirects followed within the server's origin.
const MAX_REDIRECTS: usize = 3;

/// Reads gates; one client (one connection pool) for every gate of a daemon.
#[derive(Clone)]
pub struct GateReader {
    http: reqwest::Client,
}

impl Default for GateReader {
    fn default() -> Self {
        GateReader::new()
    }
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

impl GateReader {
    pub fn new() -> GateReader {
        let http = reqwest::Client::builder()
            .user_agent(concat!("poolwright/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let same = attempt
                    .previous()
                    .first()
                    .is_some_and(|first| same_origin(first, attempt.url()));
                if !same {
                    attempt.error("a gate's server redirected to another origin")
                } else if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error("too many redirects")
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .unwrap_or_default();
        GateReader { http }
    }

    /// Evaluate one gate now.
    pub async fn read(&self, gate: &GateRules) -> GateOutcome {
        match tokio::time::timeout(gate.timeout, self.query(gate)).await {
            Ok(outcome) => outcome,
            Err(_) => GateOutcome::Unknown {
                error: format!(
                    "no answer from {} within {}s",
                    gate.url,
                    gate.timeout.as_secs()
                ),
            },
        }
    }

    async fn query(&self, gate: &GateRules) -> GateOutcome {
        let unknown = |error: String| GateOutcome::Unknown { error };
        let url = match endpoint(&gate.url) {
            Ok(u) => u,
            Err(e) => return unknown(e.0),
        };
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("query", &gate.query)
            .finish();
        let sent = self
            .http
            .post(url.clone())
            .timeout(gate.timeout)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await;
        let mut resp = match sent {
            Ok(r) => r,
            Err(e) => return unknown(format!("POST {url}: {}", error_chain(&e))),
        };
        let status = resp.status();
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_ANSWER {
                        return unknown(format!(
                            "POST {url}: the answer is larger than {} KiB",
                            MAX_ANSWER / 1024
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return unknown(format!("POST {url}: {}", error_chain(&e))),
            }
        }
        interpret(status.as_u16(), &body)
    }
}

/// The query endpoint under the server's base URL.
fn endpoint(base: &str) -> Result<Url, crate::spec::values::InvalidValue> {
    let mut url: Url = base
        .parse()
        .map_err(|e| crate::spec::values::InvalidValue(format!("prometheus.url {base:?}: {e}")))?;
    let path = format!("{}/api/v1/query", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// What an answer of the query API means for a gate: a non-empty vector or
/// a non-zero scalar holds; an empty vector or zero is breached; anything
/// else (an error, another result type, garbage) cannot be evaluated.
fn interpret(status: u16, body: &[u8]) -> GateOutcome {
    let unknown = |error: String| GateOutcome::Unknown { error };
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(_) if !(200..300).contains(&status) => {
            return unknown(format!("HTTP {status}: {}", snippet(body)));
        }
        Err(e) => return unknown(format!("not a Prometheus answer ({e}): {}", snippet(body))),
    };
    if answer.status != "success" {
        return unknown(format!(
            "HTTP {status}, {}: {}",
            answer.error_type.as_deref().unwrap_or("error"),
            answer.error.as_deref().unwrap_or("no message")
        ));
    }
    let Some(data) = answer.data else {
        return unknown("a success without data".into());
    };
    match data.result_type.as_str() {
        "vector" => {
            let samples = data.result.as_array().map(Vec::len).unwrap_or(0);
            if samples == 0 {
                return GateOutcome::Breached {
                    value: "empty result".into(),
                };
            }
            let first = data.result[0]["value"][1].as_str().unwrap_or("?");
            GateOutcome::Holds {
                value: if samples == 1 {
                    first.to_string()
                } else {
                    format!("{samples} series, first {first}")
                },
            }
        }
        "scalar" => {
            let text = data.result[1].as_str().unwrap_or("NaN").to_string();
            match text.parse::<f64>() {
                Ok(v) if v != 0.0 && !v.is_nan() => GateOutcome::Holds { value: text },
                _ => GateOutcome::Breached { value: text },
            }
        }
        other => unknown(format!(
            "a gate's query must return an instant vector or a scalar, got a {other}"
        )),
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if one.is_empty() {
        "(empty body)".into()
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_answer_and_what_it_means() {
        let cases: &[(u16, &str, &str)] = &[
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.2"]}]}}"#,
                "holds 0.2",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                "breached empty result",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
                "holds 1",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0"]}}"#,
                "breached 0",
            ),
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#,
                "unknown HTTP 400, bad_data: parse error at char 4",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                "unknown a gate's query must return an instant vector or a scalar, got a matrix",
            ),
            (
                502,
                "<html>bad gateway</html>",
                "unknown HTTP 502: <html>bad gateway</html>",
            ),
        ];
        for (status, body, want) in cases {
            let got = match interpret(*status, body.as_bytes()) {
                GateOutcome::Holds { value } => format!("holds {value}"),
                GateOutcome::Breached { value } => format!("breached {value}"),
                GateOutcome::Unknown { error } => format!("unknown {error}"),
            };
            assert_eq!(&got, want, "{body}");
        }
    }

    #[test]
    fn the_endpoint_is_under_the_base_path() {
        assert_eq!(
            endpoint("http://127.0.0.1:9090").unwrap().as_str(),
            "http://127.0.0.1:9090/api/v1/query"
        );
        assert_eq!(
            endpoint("https://prom.example/prometheus/")
                .unwrap()
                .as_str(),
            "https://prom.example/prometheus/api/v1/query"
        );
    }
}
