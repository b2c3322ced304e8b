//! A real Prometheus for gate tests (Debian's `prometheus` package, which
//! `scripts/test.sh` installs), scraping a tiny exporter the test controls:
//! the test sets a metric's value, Prometheus scrapes it every second, and a
//! FleetRollout's gate queries Prometheus's HTTP API. If Prometheus cannot
//! start, the test fails with the reason; nothing is skipped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A metric the test sets, served as Prometheus text on `/metrics`.
#[derive(Clone)]
pub struct Exporter {
    pub addr: String,
    value: Arc<Mutex<f64>>,
}

impl Exporter {
    /// Serve `test_errors_per_second VALUE` on a free loopback port.
    pub fn start(initial: f64) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let value = Arc::new(Mutex::new(initial));
        let served = value.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let v = *served.lock().unwrap();
                let body =
                    format!("# TYPE test_errors_per_second gauge\ntest_errors_per_second {v}\n");
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Exporter { addr, value }
    }

    pub fn set(&self, v: f64) {
        *self.value.lock().unwrap() = v;
    }
}

pub struct Prometheus {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

/// The prometheus executable: `$POOLWRIGHT_PROMETHEUS`, else `prometheus` on PATH.
fn executable() -> PathBuf {
    std::env::var_os("POOLWRIGHT_PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("prometheus"))
}

impl Prometheus {
    /// Start Prometheus on a free port, scraping `target` every second.
    pub fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = super::moto::free_port();
        let exe = executable();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(&exe)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "Prometheus is required for the gate tests and could not start ({}: {e}); \
                     install Debian's prometheus package (scripts/test.sh does) or point \
                     POOLWRIGHT_PROMETHEUS at it",
                    exe.display()
                )
            });
        let p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        p.wait_ready();
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = get(&self.url, "/-/ready") {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "Prometheus did not become ready at {} within 60 s: {}",
                self.url,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The value of an instant query's first sample, once it has one.
    pub fn wait_for_sample(&self, query: &str, want: f64) {
        let started = Instant::now();
        loop {
            let path = format!(
                "/api/v1/query?query={}",
                url::form_urlencoded::byte_serialize(query.as_bytes()).collect::<String>()
            );
            if let Ok((200, body)) = get(&self.url, &path) {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if v["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    == Some(want)
                {
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "Prometheus did not see {query} = {want} within 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str, path: &str) -> std::io::Result<(u16, String)> {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // Prometheus answers chunked; the JSON is the chunk between the sizes.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
