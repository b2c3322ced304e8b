//! Who may ask the daemon for what.
//!
//! The threat model is a shared bastion host: other local users can reach a
//! loopback port, and so can any web page opened in a browser on the host
//! (cross-site requests, DNS rebinding). So:
//! - reads (status, plan, metrics) are served on TCP, but only to requests
//!   whose `Host` names this listener (the address, `localhost`, or a name
//!   given with `--allowed-host`): a rebinding page's `Host` is its own name;
//! - state changes (pause, resume) need authority: a peer on the control
//!   socket (a Unix socket in the state directory, mode 0660, its group
//!   configurable), or on TCP a bearer token from `--control-token-file`;
//! - every state change must be a JSON request that is not cross-site, which
//!   no HTML form can send and no foreign page can send without a CORS
//!   preflight, which is never granted.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::{HeaderMap, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::daemon::serve::peer_id::Peer;

/// The TCP listener's rules.
#[derive(Clone, Debug)]
pub struct TcpRules {
    /// The address actually bound (port resolved).
    pub local: SocketAddr,
    /// Extra `Host` names accepted (`--allowed-host`), lower-case, with or
    /// without a port.
    pub allowed_hosts: Vec<String>,
    /// `--control-token-file`: state changes on TCP need this bearer token.
    pub token_file: Option<PathBuf>,
    /// Where the control socket is, for refusals that point at it.
    pub socket: PathBuf,
    /// Wrong tokens, counted by peer.
    pub strikes: std::sync::Arc<crate::daemon::serve::strikes::Strikes>,
}

/// A refusal: the status and a message saying what would be accepted.
#[derive(Debug, PartialEq)]
pub struct Denied(pub StatusCode, pub String);

/// The largest token file read.
const TOKEN_LIMIT: u64 = 4096;

/// The fewest bytes a secret may have: the control token, a webhook's.
const MIN_SECRET_BYTES: usize = 32;

/// A secret read from `path` (`flag` names it): a regular file of at least
/// [`MIN_SECRET_BYTES`] once trimmed, so a guessable one is refused.
pub fn read_secret(flag: &str, path: &std::path::Path) -> anyhow::Result<String> {
    let secret = crate::files::read_regular_text(path, TOKEN_LIMIT)
        .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
    let secret = secret.trim().to_string();
    crate::secrets::remember(&secret);
    anyhow::ensure!(
        secret.len() >= MIN_SECRET_BYTES,
        "{flag} {}: the secret has {} bytes; use at least {MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)",
        path.display(),
        secret.len()
    );
    Ok(secret)
}

/// At start: a secret's file that other users can read is said out loud
/// (as ssh does for a key), since anyone who reads it holds the authority.
pub fn warn_if_readable_by_others(flag: &str, path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o004 != 0
    {
        tracing::warn!(
            "{flag} {}: the file can be read by every user of this host; `chmod o-r` it",
            path.display()
        );
    }
}

impl TcpRules {
    /// Whether the `Host` header names this listener.
    /// A request line in absolute form (`GET http://other.example/...`)
    /// names a host too: it must name this listener, as `Host` must (a
    /// server that read one and routed by the other could be steered).
    pub fn check_target(&self, uri: &axum::http::Uri) -> Result<(), Denied> {
        match uri.authority() {
            None => Ok(()),
            Some(a) if self.host_allowed(&a.as_str().to_ascii_lowercase()) => Ok(()),
            Some(_) => Err(Denied(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "the request line names another host than this listener ({}); ask for a path, or name this listener",
                    self.local
                ),
            )),
        }
    }

    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), Denied> {
        // Two Host headers: which one a proxy in front read is anyone's guess.
        if headers.get_all(header::HOST).iter().count() > 1 {
            return Err(Denied(
                StatusCode::BAD_REQUEST,
                "one Host header, not several".into(),
            ));
        }
        let Some(host) = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase)
        else {
            return Err(Denied(
                StatusCode::BAD_REQUEST,
                "a Host header naming this listener is required".into(),
            ));
        };
        if self.host_allowed(&host) {
            Ok(())
        } else {
            Err(Denied(
                StatusCode::MISDIRECTED_REQUEST,
                // The Host given is not echoed back.
                format!(
                    "the Host header does not name this listener ({}); add the name with --allowed-host if it is one of this host's",
                    self.local
                ),
            ))
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let port = self.local.port();
        let (name, host_port) = split_host(host);
        if host_port.is_some_and(|p| p != port) {
            return false;
        }
        let ip = self.local.ip();
        let literal = match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        };
        if name == literal {
            return true;
        }
        if ip.is_loopback() && (name == "localhost" || name == "127.0.0.1" || name == "[::1]") {
            return true;
        }
        self.allowed_hosts.iter().any(|a| {
            let (a_name, a_port) = split_host(a);
            a_name == name && a_port.is_none_or(|p| Some(p) == host_port || p == port)
        })
    }

    /// Whether a state change on TCP carries the bearer token; the token's
    /// short id (a digest prefix, never the token) names the caller in logs.
    pub fn check_token(&self, headers: &HeaderMap, peer: &Peer) -> Result<String, Denied> {
        let Some(file) = &self.token_file else {
            return Err(Denied(
                StatusCode::FORBIDDEN,
                format!(
                    "state changes are served on the control socket {} (poolwright rollout uses it); \
                     on TCP they need --control-token-file",
                    self.socket.display()
                ),
            ));
        };
        // Read at each request, so a rotated token takes effect without a restart.
        let token = read_secret("--control-token-file", file).map_err(|e| {
            tracing::error!("{e:#}");
            Denied(
                StatusCode::SERVICE_UNAVAILABLE,
                "the control token cannot be used (unreadable, or shorter than 32 bytes); see the daemon's log".into(),
            )
        })?;
        let token = token.as_str();
        let who = crate::daemon::serve::peer_id::identity(peer);
        let now = std::time::Instant::now();
        if let Err(wait) = self.strikes.allow(&who, now) {
            return Err(Denied(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many wrong tokens from {who}: no token is checked for {}s",
                    wait.as_secs().max(1)
                ),
            ));
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            // The scheme is case-insensitive (RFC 9110, section 11.1).
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .unwrap_or("");
        if constant_time_eq(token.as_bytes(), given.as_bytes()) {
            Ok(token_id(token))
        } else {
            self.strikes.strike(&who, now);
            Err(Denied(
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required for state changes on TCP".into(),
            ))
        }
    }
}

fn split_host(host: &str) -> (&str, Option<u16>) {
    // `[v6]:port`, `name:port`, or no port.
    if let Some(end) = host.rfind(']') {
        let (name, rest) = host.split_at(end + 1);
        return (name, rest.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match host.rsplit_once(':') {
        Some((name, port)) => match port.parse() {
            Ok(p) => (name, Some(p)),
            Err(_) => (host, None),
        },
        None => (host, None),
    }
}

/// The checks every state change passes, whatever the transport: a JSON body
/// (no HTML form can send one without a preflight) and no cross-site origin.
pub fn check_not_cross_site(headers: &HeaderMap, rules: Option<&TcpRules>) -> Result<(), Denied> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(Denied(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "state changes must be sent as Content-Type: application/json".into(),
        ));
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|h| h.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(Denied(
            StatusCode::FORBIDDEN,
            format!("cross-site request refused (Sec-Fetch-Site: {site})"),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
        let same = rules.is_some_and(|r| {
            origin
                .strip_prefix("http://")
                .is_some_and(|host| r.host_allowed(host))
        });
        if !same {
            return Err(Denied(
                StatusCode::FORBIDDEN,
                format!("cross-origin request refused (Origin: {origin})"),
            ));
        }
    }
    Ok(())
}

/// Compare without an early exit, so the time taken says nothing about how
/// much of a guess was right. Digests first, so the length leaks nothing either.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// A short, stable name for a token in logs: a digest prefix.
fn token_id(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("token sha256:{hex}")
}

impl Peer {
    /// Who asked, for the log and the event.
    pub fn describe(&self, token: Option<&str>) -> String {
        match (self, token) {
            (Peer::Socket { uid, pid }, _) => match pid {
                Some(pid) => format!("uid {uid} (pid {pid}) on the control socket"),
                None => format!("uid {uid} on the control socket"),
            },
            (Peer::Tcp { remote, .. }, Some(id)) => format!("{id} from {remote}"),
            (Peer::Tcp { remote, .. }, None) => format!("{remote}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn rules(token_file: Option<PathBuf>) -> TcpRules {
        TcpRules {
            local: "127.0.0.1:9479".parse().unwrap(),
            allowed_hosts: vec!["bastion.example".into()],
            token_file,
            socket: "/var/lib/poolwright/control.sock".into(),
            strikes: std::sync::Arc::new(crate::daemon::serve::strikes::Strikes::new(
                std::time::Instant::now(),
            )),
        }
    }

    /// A peer on another host (no loopback owner to look up).
    fn far() -> Peer {
        Peer::Tcp {
            remote: "192.0.2.1:5000".parse().unwrap(),
            owner: None,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hosts() {
        let r = rules(None);
        for ok in [
            "127.0.0.1:9479",
            "localhost:9479",
            "LOCALHOST:9479",
            "localhost",
            "bastion.example",
            "bastion.example:9479",
        ] {
            assert!(r.check_host(&headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9479",
            "127.0.0.1:80",
            "localhost.evil.example",
            "",
        ] {
            let e = r.check_host(&headers(&[("host", bad)])).unwrap_err();
            assert_eq!(e.0, StatusCode::MISDIRECTED_REQUEST, "{bad}");
        }
        assert_eq!(
            r.check_host(&HeaderMap::new()).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        let e = r
            .check_host(&headers(&[("host", "evil.example")]))
            .unwrap_err();
        assert!(!e.1.contains("evil"), "the Host is not echoed: {}", e.1);
        let mut two = headers(&[("host", "localhost:9479")]);
        two.append("host", HeaderValue::from_static("evil.example"));
        assert_eq!(r.check_host(&two).unwrap_err().0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn cross_site_and_forms_are_refused() {
        let r = rules(None);
        let json = ("content-type", "application/json");
        assert!(check_not_cross_site(&headers(&[json]), Some(&r)).is_ok());
        assert!(
            check_not_cross_site(
                &headers(&[json, ("origin", "http://localhost:9479")]),
                Some(&r)
            )
            .is_ok()
        );
        for (h, status) in [
            (
                headers(&[("content-type", "text/plain")]),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ),
            (
                headers(&[("content-type", "application/x-www-form-urlencoded")]),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ),
            (HeaderMap::new(), StatusCode::UNSUPPORTED_MEDIA_TYPE),
            (
                headers(&[json, ("origin", "http://evil.example")]),
                StatusCode::FORBIDDEN,
            ),
            (headers(&[json, ("origin", "null")]), StatusCode::FORBIDDEN),
            (
                headers(&[json, ("sec-fetch-site", "cross-site")]),
                StatusCode::FORBIDDEN,
            ),
        ] {
            assert_eq!(check_not_cross_site(&h, Some(&r)).unwrap_err().0, status);
        }
        // On the socket, any Origin at all is foreign.
        assert!(
            check_not_cross_site(&headers(&[json, ("origin", "http://localhost:9479")]), None)
                .is_err()
        );
    }

    #[test]
    fn tokens() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        // Too short to be a secret: refused, whatever is sent.
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(
            rules(Some(file.clone()))
                .check_token(&headers(&[("authorization", "Bearer s3cret")]), &far())
                .unwrap_err()
                .0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let secret = "s3cret-0123456789abcdef-0123456789";
        std::fs::write(&file, format!("{secret}\n")).unwrap();
        assert_eq!(
            rules(None)
                .check_token(&HeaderMap::new(), &far())
                .unwrap_err()
                .0,
            StatusCode::FORBIDDEN
        );
        let r = rules(Some(file.clone()));
        // The scheme in any case, as RFC 9110 says.
        for good in [
            format!("Bearer {secret}"),
            format!("bearer {secret}"),
            format!("BEARER  {secret}"),
        ] {
            assert!(
                r.check_token(&headers(&[("authorization", &good)]), &far())
                    .unwrap()
                    .starts_with("token sha256:"),
                "{good}"
            );
        }
        for bad in [
            "Bearer s3cret-0123456789abcdef-012345678".to_string(),
            format!("Bearer {secret}2"),
            format!("Basic {secret}"),
            format!("Bearer{secret}"),
            String::new(),
        ] {
            assert_eq!(
                r.check_token(&headers(&[("authorization", &bad)]), &far())
                    .unwrap_err()
                    .0,
                StatusCode::UNAUTHORIZED
            );
        }
        // Five wrong tokens from one peer: no token of its is checked for
        // the rest of the minute, the right one neither; others are.
        let good = format!("Bearer {secret}");
        let refused = r
            .check_token(&headers(&[("authorization", &good)]), &far())
            .unwrap_err();
        assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{}", refused.1);
        assert!(
            refused
                .1
                .contains("too many wrong tokens from ip:192.0.2.1")
        );
        let other = Peer::Tcp {
            remote: "192.0.2.2:5000".parse().unwrap(),
            owner: None,
        };
        assert!(
            r.check_token(&headers(&[("authorization", &good)]), &other)
                .is_ok()
        );
        // Rotation: the file is read again.
        std::fs::write(&file, "n3w-0123456789abcdef-0123456789abcdef").unwrap();
        assert!(
            r.check_token(
                &headers(&[(
                    "authorization",
                    "Bearer n3w-0123456789abcdef-0123456789abcdef"
                )]),
                &other
            )
            .is_ok()
        );
    }
}
