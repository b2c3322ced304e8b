//! A `poolwright run` process for tests: started in a directory with its own
//! state directory, found through `STATE/daemon.json`, read through its HTTP
//! status surface and event log, stopped by SIGTERM or killed.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Daemon {
    pub child: Child,
    pub root: PathBuf,
    /// The state directory (`root/state` unless started with another).
    pub state: PathBuf,
    log: PathBuf,
    pub url: String,
}

impl Daemon {
    /// Start `poolwright run config` in `root` and wait until it serves status.
    /// Start `poolwright run config` in `root` and wait until it serves status.
    pub fn start(root: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with_env(root, extra, &[])
    }

    pub fn start_with_env(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::start_in(root, "state", extra, env)
    }

    /// Start with the state directory `root/STATE` (its log in `root/STATE.log`),
    /// so several daemons can share one desired-state directory.
    pub fn start_in(root: &Path, state_name: &str, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let state = root.join(state_name);
        let log = if state_name == "state" {
            root.join("daemon.log")
        } else {
            root.join(format!("{state_name}.log"))
        };
        let _ = std::fs::remove_file(state.join("daemon.json"));
        let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args(["run", "config", "--state-dir", state_name])
            // Any free port, unless the test names one (to restart on it).
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .args([
                "--resync",
                "1h",
                "--retry-after",
                "1s",
                "--log-format",
                "json",
            ])
            .args(extra)
            .env_remove("POOLWRIGHT_STATE_DIR")
            .env_remove("NOTIFY_SOCKET")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting poolwright run");
        let started = Instant::now();
        let url = loop {
            if let Ok(text) = std::fs::read_to_string(state.join("daemon.json"))
                && let Ok(v) = serde_json::from_str::<Value>(&text)
            {
                break v["url"].as_str().unwrap().to_string();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the daemon did not start serving status: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Daemon {
            child,
            root: root.to_path_buf(),
            state,
            log,
            url,
        }
    }

    /// Its event log (`STATE/events.jsonl`).
    pub fn events(&self) -> Vec<Value> {
        super::jsonl::read(&self.state.join("events.jsonl"))
    }

    /// SIGKILL: no safe point, no lease release.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(&self.url, "GET", path)
    }

    pub fn status(&self) -> Value {
        let (code, body) = self.get("/v1/status");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    pub fn pool(&self, name: &str) -> Value {
        self.status()["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Wait until `cond` holds for the status, or fail with the status and the log.
    pub fn wait_for(&self, what: &str, limit: Duration, cond: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let s = self.status();
            if cond(&s) {
                return s;
            }
            assert!(
                started.elapsed() < limit,
                "timed out waiting for {what}; status: {s:#}\nlog tail: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the event log has an event matching `pred`.
    pub fn wait_for_event(&self, what: &str, pred: impl Fn(&Value) -> bool) {
        let started = Instant::now();
        while !self.events().iter().any(&pred) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `n` lines of its log that contain `needle`.
    pub fn log_matching(&self, needle: &str, n: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (code, body) = self.get("/metrics");
        assert_eq!(code, 200);
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let scrape =
            prometheus_parse::Scrape::parse(lines).expect("/metrics parses as Prometheus text");
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "the daemon did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small HTTP/1.1 client: enough for a loopback status server.
pub fn http(url: &str, method: &str, path: &str) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the status server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}
