//! The record of emergency overrides of disruption policies
//! (`apply --override-disruption-policy --reason ...`): one JSON line each in
//! `STATE/overrides.jsonl`, shown by the daemon's status.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRecord {
    pub at: jiff::Timestamp,
    pub pool: String,
    /// The operator's reason, as given.
    pub reason: String,
    /// Who (the login name, through sudo too).
    pub by: String,
    /// What the policy said at the time.
    pub policy: String,
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("overrides.jsonl")
}

/// The person behind the command, for the record.
pub fn operator() -> String {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

pub fn append(state_dir: &Path, record: &OverrideRecord) -> anyhow::Result<()> {
    let p = path(state_dir);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", p.display()))?;
    let mut line = serde_json::to_vec(record)?;
    line.push(b'\n');
    f.write_all(&line)?;
    f.sync_all()?;
    Ok(())
}

/// The `n` most recent overrides, oldest first (unreadable lines are skipped).
pub fn recent(state_dir: &Path, n: usize) -> Vec<OverrideRecord> {
    let text =
        crate::files::read_regular_text(&path(state_dir), 16 * 1024 * 1024).unwrap_or_default();
    let all: Vec<OverrideRecord> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    all[all.len().saturating_sub(n)..].to_vec()
}
