//! What the daemon benches share: the daemon under test, stopped on every
//! way out of a bench (a failed assertion included), a plain HTTP GET of
//! its status, and the bench's settings from the environment.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, Command};
use std::time::Duration;

/// A running `poolwright run`: SIGTERM when dropped, then SIGKILL if it
/// lingers past 10 s.
pub struct Daemon {
    pub child: Child,
    pub url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` from the daemon at `url`: the body.
pub fn http_get(url: &str, path: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// A setting from the environment (`POOLWRIGHT_BENCH_...`), or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
