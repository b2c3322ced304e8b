//! The reference plug-in (`examples/plugins/ec2-instances`) as a real
//! process for tests: started against moto on a fixed free port with its own
//! SQLite state, so it can be killed (`kill -9`) and started again in place,
//! as a plug-in restart mid-rollout would be. If it cannot start, the test
//! fails with its log; nothing is skipped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreter: `$POOLWRIGHT_PYTHON` (scripts/test.sh sets it), else python3.
pub fn python() -> String {
    std::env::var("POOLWRIGHT_PYTHON").unwrap_or_else(|_| "python3".into())
}

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plugins/ec2-instances/plugin.py")
}

pub struct Plugin {
    pub url: String,
    pub port: u16,
    pub state: PathBuf,
    log: PathBuf,
    moto: String,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Plugin {
    /// Start the plug-in on a free port against moto at `moto_url`, keeping
    /// its SQLite state and log in `dir`.
    pub fn start(moto_url: &str, dir: &Path, extra: &[&str]) -> Plugin {
        Plugin::start_with_env(moto_url, dir, extra, &[])
    }

    /// With extra environment (the plug-in's test hooks).
    pub fn start_with_env(
        moto_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Plugin {
        let port = super::moto::free_port();
        let mut p = Plugin {
            url: format!("http://127.0.0.1:{port}"),
            port,
            state: dir.join("ec2-instances.sqlite"),
            log: dir.join("plugin.log"),
            moto: moto_url.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(python());
        cmd.arg(script())
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .arg("--state")
            .arg(&self.state)
            .args([
                "--endpoint-url",
                &self.moto,
                "--region",
                super::moto::REGION,
            ])
            .args(["--poll-interval", "1"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in super::moto::ENV {
            cmd.env(k, v);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start the reference plug-in with {}: {e}", python())
        });
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!(
                    "the reference plug-in exited ({status}) before serving:\n{}",
                    self.log_text()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the reference plug-in did not listen on {} within 30 s:\n{}",
                self.url,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no clean shutdown, whatever was in flight.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and state.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill();
    }
}
