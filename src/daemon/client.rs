//! How the CLI reaches a running daemon: its address is in `STATE/daemon.json`.

use std::path::Path;
use std::time::Duration;

use crate::daemon::{DaemonFile, daemon_file};

pub struct Client {
    pub url: String,
    http: reqwest::Client,
}

impl Client {
    /// The daemon running on `state_dir`, if one answers: on its TCP
    /// listener as `STATE/daemon.json` names it, else on its control socket
    /// (a member of `--control-group` may reach the socket without being
    /// able to read the daemon's files).
    pub async fn find(state_dir: &Path) -> Option<Client> {
        if let Some(file) = read_daemon_file(state_dir) {
            let client = Client::at(&file.url);
            if client.answers().await {
                return Some(client);
            }
        }
        Client::find_control(state_dir).await
    }

    /// The daemon's control socket on `state_dir`, if a daemon runs there and
    /// answers on it: state changes (pause, resume) go only this way, with the
    /// caller's uid as its authority. The socket is where `daemon.json` says,
    /// or `STATE/control.sock` when that file cannot be read.
    pub async fn find_control(state_dir: &Path) -> Option<Client> {
        let socket = read_daemon_file(state_dir)
            .and_then(|f| f.control_socket)
            .unwrap_or_else(|| crate::daemon::serve::listen::control_socket_path(state_dir));
        let client = Client {
            // The host is only the Host header's value: the socket decides where it goes.
            url: "http://localhost".to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(40))
                .unix_socket(socket.clone())
                .build()
                .ok()?,
        };
        client.answers().await.then_some(client)
    }

    async fn answers(&self) -> bool {
        self.http
            .get(format!("{}/healthz", self.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    pub fn at(url: &str) -> Client {
        Client {
            url: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .no_proxy()
                .build()
                .expect("a plain HTTP client builds"),
        }
    }

    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let url = format!("{}{path}", self.url);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            // The whole chain: "connection refused" is in the source, not in
            // reqwest's own line.
            .map_err(|e| anyhow::Error::new(e).context(format!("GET {url}")))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            anyhow::bail!("GET {url}: {status}: {}", text.trim_end());
        }
        resp.json()
            .await
            .map_err(|e| anyhow::anyhow!("GET {url}: reading the answer: {e}"))
    }

    /// POST a JSON body; `Ok(Ok(text))` on success, `Ok(Err(refused))` when
    /// the daemon answered with a refusal (its text says why).
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<Result<String, Refused>> {
        let url = format!("{}{path}", self.url);
        let resp = self
            .http
            .post(&url)
            .json(body)
            .send()
            .await
            .map_err(|e| anyhow::Error::new(e).context(format!("POST {url}")))?;
        let ok = resp.status().is_success();
        let text = resp.text().await.unwrap_or_default().trim_end().to_string();
        Ok(if ok { Ok(text) } else { Err(Refused(text)) })
    }
}

/// The daemon's refusal of a state change, as it worded it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// `STATE/daemon.json`, read as any other file a user can touch: regular, small.
fn read_daemon_file(state_dir: &Path) -> Option<DaemonFile> {
    let text = crate::files::read_regular_text(&daemon_file(state_dir), 64 * 1024).ok()?;
    serde_json::from_str(&text).ok()
}
