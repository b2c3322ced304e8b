//! Push webhooks from the forges (GitHub, Gitea and Forgejo, GitLab): is the
//! request signed with our secret, and is it a push to the watched branch?
//! A webhook never carries configuration; a valid push only says "fetch
//! now". Pure: the caller reads the secret and the body.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Which forge sent it, by its signature header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forge {
    GitHub,
    Gitea,
    GitLab,
}

impl Forge {
    pub fn as_str(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::Gitea => "gitea",
            Forge::GitLab => "gitlab",
        }
    }
}

/// A verified webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hook {
    /// A push: the ref and its new tip (all zeros when the ref was deleted).
    Push {
        forge: Forge,
        git_ref: String,
        after: String,
    },
    /// Anything else the forge sends (a ping when the hook is created, a tag,
    /// an issue): answered and ignored.
    Other { forge: Forge, event: String },
}

/// Why a webhook was refused; the HTTP status it gets.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "no signature: send X-Hub-Signature-256 (GitHub), X-Gitea-Signature (Gitea, Forgejo) or X-Gitlab-Token (GitLab)"
    )]
    Unsigned,
    #[error("the signature does not match the body with this daemon's secret")]
    BadSignature,
    #[error("the body is not a push event in JSON: {0}")]
    Malformed(String),
}

impl Refused {
    pub fn status(&self) -> u16 {
        match self {
            Refused::Unsigned | Refused::BadSignature => 401,
            Refused::Malformed(_) => 400,
        }
    }
}

/// Check a webhook. `header` gives a request header's value by its name
/// (case-insensitive).
pub fn verify<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
    secret: &[u8],
) -> Result<Hook, Refused> {
    let forge = if let Some(sig) = header("x-hub-signature-256") {
        // GitHub; Gitea and Forgejo send it too.
        let hex = sig.strip_prefix("sha256=").ok_or(Refused::BadSignature)?;
        check_hmac(hex, body, secret)?;
        if header("x-gitea-event").is_some() || header("x-forgejo-event").is_some() {
            Forge::Gitea
        } else {
            Forge::GitHub
        }
    } else if let Some(hex) = header("x-gitea-signature").or_else(|| header("x-forgejo-signature"))
    {
        check_hmac(hex, body, secret)?;
        Forge::Gitea
    } else if let Some(token) = header("x-gitlab-token") {
        // GitLab sends the secret itself, over TLS.
        if !bool::from(token.as_bytes().ct_eq(secret)) {
            return Err(Refused::BadSignature);
        }
        Forge::GitLab
    } else {
        return Err(Refused::Unsigned);
    };
    let event = match forge {
        Forge::GitHub => header("x-github-event"),
        Forge::Gitea => header("x-gitea-event")
            .or_else(|| header("x-forgejo-event"))
            .or_else(|| header("x-github-event")),
        Forge::GitLab => header("x-gitlab-event"),
    }
    .unwrap_or_default()
    .to_string();
    let is_push = match forge {
        Forge::GitHub | Forge::Gitea => event == "push",
        Forge::GitLab => event == "Push Hook",
    };
    if !is_push {
        return Ok(Hook::Other { forge, event });
    }
    #[derive(serde::Deserialize)]
    struct Push {
        #[serde(rename = "ref")]
        git_ref: String,
        after: String,
    }
    let push: Push = serde_json::from_slice(body).map_err(|e| Refused::Malformed(e.to_string()))?;
    if push.git_ref.len() > 1024 || push.after.len() > 128 {
        return Err(Refused::Malformed("ref or commit too long".into()));
    }
    Ok(Hook::Push {
        forge,
        git_ref: push.git_ref,
        after: push.after,
    })
}

/// Compare an HMAC-SHA256 in hex with the body's, in constant time.
fn check_hmac(hex: &str, body: &[u8], secret: &[u8]) -> Result<(), Refused> {
    let given = decode_hex(hex.trim()).ok_or(Refused::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| Refused::BadSignature)?;
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| Refused::BadSignature)
}

/// The HMAC-SHA256 of `body` in hex, as a forge signs it.
pub fn sign(body: &[u8], secret: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const BODY: &[u8] =
        br#"{"ref":"refs/heads/main","after":"1111111111111111111111111111111111111111"}"#;

    fn with<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    #[test]
    fn each_forge_signature_is_checked() {
        let sig = format!("sha256={}", sign(BODY, SECRET));
        let push = Hook::Push {
            forge: Forge::GitHub,
            git_ref: "refs/heads/main".into(),
            after: "1".repeat(40),
        };
        let github = [
            ("X-GitHub-Event", "push"),
            ("X-Hub-Signature-256", sig.as_str()),
        ];
        assert_eq!(verify(with(&github), BODY, SECRET), Ok(push.clone()));
        let hex = sign(BODY, SECRET);
        let gitea = [
            ("X-Gitea-Event", "push"),
            ("X-Gitea-Signature", hex.as_str()),
        ];
        assert!(matches!(
            verify(with(&gitea), BODY, SECRET),
            Ok(Hook::Push {
                forge: Forge::Gitea,
                ..
            })
        ));
        let secret = std::str::from_utf8(SECRET).unwrap();
        let gitlab = [("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", secret)];
        assert!(matches!(
            verify(with(&gitlab), BODY, SECRET),
            Ok(Hook::Push {
                forge: Forge::GitLab,
                ..
            })
        ));

        // Refusals: wrong secret, a changed body, no signature, a wrong token.
        assert_eq!(
            verify(with(&github), BODY, b"another secret of enough bytes!!"),
            Err(Refused::BadSignature)
        );
        assert_eq!(
            verify(with(&github), br#"{"ref":"refs/heads/x"}"#, SECRET),
            Err(Refused::BadSignature)
        );
        assert_eq!(
            verify(with(&[("X-GitHub-Event", "push")]), BODY, SECRET),
            Err(Refused::Unsigned)
        );
        let wrong = [("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", "nope")];
        assert_eq!(
            verify(with(&wrong), BODY, SECRET),
            Err(Refused::BadSignature)
        );
        let not_hex = [("X-Hub-Signature-256", "sha256=zz")];
        assert_eq!(
            verify(with(&not_hex), BODY, SECRET),
            Err(Refused::BadSignature)
        );

        // A ping is answered, not acted on.
        let ping_body = br#"{"zen":"Keep it logically awesome."}"#;
        let ping_sig = format!("sha256={}", sign(ping_body, SECRET));
        let ping = [
            ("X-GitHub-Event", "ping"),
            ("X-Hub-Signature-256", ping_sig.as_str()),
        ];
        assert_eq!(
            verify(with(&ping), ping_body, SECRET),
            Ok(Hook::Other {
                forge: Forge::GitHub,
                event: "ping".into()
            })
        );
    }
}
