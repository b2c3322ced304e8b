//! The one redaction point: every text poolwright serves or writes where
//! others may read it (status, plans, pages, event streams, `events.jsonl`,
//! the log) passes through [`redact`] first.
//!
//! Two nets, because a secret can reach a message two ways:
//! - a secret poolwright has read (a control token, a webhook secret, a
//!   plug-in's token file, a kubeconfig's token, password or key) is
//!   remembered when it is read, and every occurrence of it is replaced;
//! - a secret it never learnt (a kubeconfig too broken to parse, an answer
//!   that echoes a header) is caught by its shape: the value after a
//!   credential key (`token:`, `password=`, `client-key-data:`...) or after
//!   `Bearer`.
//!
//! The remembered set is process-wide on purpose: the places that read
//! credentials (providers, clusters, the HTTP access rules) and the places
//! that serve text (the HTTP surface, the event sink, the log writer) share
//! nothing else, and a redaction that depends on threading a handle through
//! would be missed by the next place that serves text.

use crate::sync::RwLocked;
use std::borrow::Cow;
use std::io::Write;
use std::sync::{LazyLock, RwLock};

use regex::Regex;
use serde_json::Value;

/// What a redacted secret reads as.
const REDACTED: &str = "[redacted]";

/// Shorter values are not remembered: replacing them would mangle ordinary
/// text, and no credential this short is worth the name.
const SHORTEST: usize = 8;

/// At most this many secrets are remembered (token files are read again
/// when they change; each version is remembered).
const MOST: usize = 1024;

static KNOWN: LazyLock<RwLock<Vec<String>>> = LazyLock::new(|| RwLock::new(Vec::new()));

/// A credential key followed by its value (YAML, JSON, `key=value`, a
/// header), or `Bearer` and its token.
static SHAPED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?ix)
        (?P<key>
            \b(?:token|id-token|refresh-token|access-token|password|passwd|secret|client-secret
               |client-key-data|client-certificate-data|authorization|api-key|apikey)
            ["']?\s*[:=]\s*["']?(?:bearer\s+)?
          | \bbearer\s+
        )
        (?P<value>[^\s"',}\]\)]{4,})
        "#,
    )
    .expect("the credential pattern compiles")
});

/// Remember a secret that was read, so that it is never served.
pub fn remember(secret: &str) {
    let secret = secret.trim();
    if secret.chars().count() < SHORTEST {
        return;
    }
    let mut known = KNOWN.write_locked();
    if known.iter().any(|k| k == secret) {
        return;
    }
    if known.len() >= MOST {
        known.remove(0);
    }
    known.push(secret.to_string());
    // Longest first, so a secret that contains another is replaced whole.
    known.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// `text` with every remembered secret and every credential-shaped value
/// replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    {
        let known = KNOWN.read_locked();
        for k in known.iter() {
            if out.contains(k.as_str()) {
                out = Cow::Owned(out.replace(k.as_str(), REDACTED));
            }
        }
    }
    if SHAPED.is_match(&out) {
        let replaced = SHAPED
            .replace_all(&out, |c: &regex::Captures| {
                if &c["value"] == REDACTED {
                    c[0].to_string()
                } else {
                    format!("{}{REDACTED}", &c["key"])
                }
            })
            .into_owned();
        out = Cow::Owned(replaced);
    }
    out
}

/// Every string of a JSON value (keys too) redacted, in place.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let Some(mut v) = map.remove(&k) else {
                    continue;
                };
                redact_json(&mut v);
                map.insert(redact(&k).into_owned(), v);
            }
        }
        _ => {}
    }
}

/// `value` serialized to JSON with every string redacted.
pub fn redacted_value(value: &impl serde::Serialize) -> Value {
    let mut v = serde_json::to_value(value).unwrap_or(Value::Null);
    redact_json(&mut v);
    v
}

/// Standard error, redacted line by line: the log writer (`tracing`'s
/// formatter writes each record through a writer of its own).
#[derive(Clone, Copy, Debug, Default)]
pub struct RedactedStderr;

/// One log record, written redacted when it is complete.
pub struct RecordWriter(Vec<u8>);

impl Write for RecordWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RecordWriter {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let _ = std::io::stderr().lock().write_all(redact(&text).as_bytes());
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RecordWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RecordWriter(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_secret_is_replaced_wherever_it_appears() {
        remember("s3cr3t-remembered-value");
        let text = "upstream said: s3cr3t-remembered-value was refused (s3cr3t-remembered-value)";
        assert_eq!(
            redact(text),
            "upstream said: [redacted] was refused ([redacted])"
        );
    }

    #[test]
    fn short_values_are_not_remembered() {
        remember("abc");
        assert_eq!(redact("abc abc"), "abc abc");
    }

    #[test]
    fn credential_shaped_values_are_replaced_without_being_known() {
        for (text, want) in [
            (
                r#"  user: {token: "sk-live-unknown1"}"#,
                r#"  user: {token: "[redacted]"}"#,
            ),
            (
                "client-key-data: LS0tLS1CRUdJTi",
                "client-key-data: [redacted]",
            ),
            (
                "Authorization: Bearer abcdef123456",
                "Authorization: Bearer [redacted]",
            ),
            ("password=hunter22", "password=[redacted]"),
            (r#"{"token":"abcd1234"}"#, r#"{"token":"[redacted]"}"#),
        ] {
            assert_eq!(redact(text), want, "{text}");
        }
        // The bearer form alone.
        assert_eq!(redact("sent bearer abcdef123456"), "sent bearer [redacted]");
    }

    #[test]
    fn ordinary_text_about_tokens_is_left_alone() {
        for text in [
            "the control token file /etc/poolwright/control.token is not readable",
            "tokenFile: /etc/poolwright/plugin.token",
            "--token-file names no file",
            "5 wrong tokens from this peer",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn every_string_of_a_json_value_is_redacted() {
        remember("json-secret-value-1");
        let mut v = serde_json::json!({
            "pools": [{"message": "failed: json-secret-value-1", "n": 3}],
            "json-secret-value-1": true
        });
        redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "pools": [{"message": "failed: [redacted]", "n": 3}],
                "[redacted]": true
            })
        );
    }
}
