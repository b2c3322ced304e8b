//! A real headless browser for tests: Debian's `chromium` driven through
//! `chromedriver` over the W3C WebDriver protocol (plain JSON over HTTP, so
//! no client crate is needed). The README's test command installs both; a
//! test that cannot start them fails with the reason.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

fn find(names: &[&str]) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p.display().to_string());
            }
        }
    }
    None
}

impl Browser {
    /// Start chromedriver and one headless Chromium session.
    pub fn start() -> Browser {
        let driver_bin = find(&["chromedriver"]).unwrap_or_else(|| {
            panic!("chromedriver is not installed: apt-get install chromium chromium-driver (scripts/test.sh does)")
        });
        let chromium = find(&["chromium", "chromium-browser", "google-chrome"]).unwrap_or_else(|| {
            panic!("chromium is not installed: apt-get install chromium chromium-driver (scripts/test.sh does)")
        });
        let port = super::moto::free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {driver_bin}: {e}"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            let ready = rt.block_on(async {
                let r = http.get(format!("{base}/status")).send().await.ok()?;
                r.json::<Value>().await.ok()
            });
            if ready.is_some_and(|v| v["value"]["ready"] == true) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver on port {port} did not become ready within 30s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,1000",
                             "--no-first-run", "--disable-extensions"]
                },
                "goog:loggingPrefs": {"browser": "ALL"}
            }}
        });
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            rt,
            http,
        };
        let v = b.call("POST", "/session", caps);
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromium did not start a session: {v}"))
            .to_string();
        b
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{}", self.base, path);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let v: Value = self
            .rt
            .block_on(async { req.send().await?.json().await })
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        if let Some(err) = v["value"]["error"].as_str() {
            panic!(
                "WebDriver {method} {path}: {err}: {}",
                v["value"]["message"]
            );
        }
        v["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: Value) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", json!({ "url": url }));
    }

    /// Run `script` (a function body; `arguments` as given) in the page.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Evaluate `script` until it returns something truthy; panics with `what`.
    pub fn wait_for(&self, what: &str, limit: Duration, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let v = self.eval(script, json!([]));
            let truthy = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                started.elapsed() < limit,
                "the page never showed {what} within {limit:?}; it shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The page's visible text.
    pub fn text(&self) -> String {
        self.eval(
            "return document.body ? document.body.innerText : ''",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self, path: &std::path::Path) {
        let b64 = self.session_call("GET", "/screenshot", Value::Null);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("a screenshot"))
            .expect("a base64 PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, bytes).unwrap();
    }

    pub fn set_window(&self, width: u32, height: u32) {
        self.session_call(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        );
    }

    /// The browser console since the last call (level, message).
    pub fn console(&self) -> Vec<(String, String)> {
        let v = self.session_call("POST", "/se/log", json!({ "type": "browser" }));
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or_default().to_string(),
                            e["message"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let url = format!("{}/session/{}", self.base, self.session);
            let _ = self
                .rt
                .block_on(async { self.http.delete(url).send().await });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
