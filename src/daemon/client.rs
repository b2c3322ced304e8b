//! How the CLI reaches a running daemon: its address is in `STATE/daemon.json`.

use std::path::Path;
use std::time::Duration;

use super::{DaemonFile, daemon_file};

pub struct Client {
    pub url: String,
    http: reqwest::Client,
}

impl Client {
    /// The daemon running on `state_dir`, if one answers.
    pub async fn find(state_dir: &Path) -> Option<Client> {
        let text = std::fs::read_to_string(daemon_file(state_dir)).ok()?;
        let file: DaemonFile = serde_json::from_str(&text).ok()?;
        let client = Client::at(&file.url);
        client
            .http
            .get(format!("{}/healthz", client.url))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())?;
        Some(client)
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
            .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            anyhow::bail!("GET {url}: {}", resp.status());
        }
        resp.json()
            .await
            .map_err(|e| anyhow::anyhow!("GET {url}: reading the answer: {e}"))
    }

    /// POST; `Ok(Ok(text))` on success, `Ok(Err(text))` when the daemon refused.
    pub async fn post(&self, path: &str) -> anyhow::Result<Result<String, String>> {
        let url = format!("{}{path}", self.url);
        let resp = self
            .http
            .post(&url)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("POST {url}: {e}"))?;
        let ok = resp.status().is_success();
        let text = resp.text().await.unwrap_or_default().trim_end().to_string();
        Ok(if ok { Ok(text) } else { Err(text) })
    }
}
