//! `rollout status POOL --wait` with a daemon running: wait for the roll of
//! what you changed, not for whatever the journal holds now.
//!
//! Right after an edit (or a merge, in CI) the daemon may not have loaded
//! it yet: the pool's journal then shows the last roll, finished, and a wait
//! that read it would report success for a roll that has not started. As
//! `kubectl rollout status` compares generations, this compares templates:
//! it first settles which template the roll must reach (the pool's desired
//! template in the files as they are now, the one the daemon has in force
//! at `--revision`, or the hash given with `--template`), then follows the
//! pool until every node runs it (exit 0), or its rollout to it is Degraded
//! or rolled back, its change across pools halts, or the time runs out
//! (exit 1). It says what it waits for as it goes.

use std::path::Path;
use std::time::{Duration, Instant};

use super::exit;
use crate::daemon::client::Client;
use crate::daemon::views::board::{PoolState, PoolStatus, StatusDoc};
use crate::rollout::{RolloutState, Status};

/// What the roll must reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// The pool's template in the desired state as it is now.
    Now,
    /// The pool's template once the daemon has this revision in force.
    Revision(String),
    /// This template hash (`plan -o json`, `rollout.target`).
    Template(String),
}

/// How the wait ended.
struct End {
    code: u8,
    status: &'static str,
    message: String,
}

pub(super) fn wait(
    rt: &tokio::runtime::Runtime,
    daemon: &Client,
    pool: &str,
    awaited: &Awaited,
    timeout: Duration,
    output: super::Output,
) -> anyhow::Result<u8> {
    let deadline = Instant::now() + timeout;
    let mut said = String::new();
    let mut say = |line: String| {
        if output == super::Output::Text && line != said {
            eprintln!(
                "{} nodepool.{pool}: {line}",
                jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
            );
            said = line;
        }
    };
    let target = loop {
        match target_of(rt, daemon, pool, awaited)? {
            Ok(t) => break t,
            Err(waiting) => say(waiting),
        }
        if Instant::now() >= deadline {
            return Ok(finish(pool, None, timed_out(timeout), output));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    say(format!("waiting for every node to run template {target}"));
    loop {
        let p = pool_status(rt, daemon, pool)?;
        let journal: Option<RolloutState> =
            rt.block_on(daemon.get_json(&format!("/v1/pools/{pool}/rollout")))?;
        if let Some(end) = ended(&p, journal.as_ref(), &target)
            .or_else(|| halted(rt, daemon, pool, &p).transpose())
            .transpose()?
        {
            return Ok(finish(pool, Some(&target), end, output));
        }
        say(progress(&p, &target));
        if Instant::now() >= deadline {
            return Ok(finish(pool, Some(&target), timed_out(timeout), output));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn timed_out(timeout: Duration) -> End {
    End {
        code: exit::FAILED,
        status: "timeout",
        message: format!(
            "the rollout had not ended after {:#}",
            jiff::SignedDuration::try_from(timeout).unwrap_or_default()
        ),
    }
}

fn pool_status(
    rt: &tokio::runtime::Runtime,
    daemon: &Client,
    pool: &str,
) -> anyhow::Result<Option<PoolStatus>> {
    let doc: StatusDoc = rt.block_on(daemon.get_json(&format!("/v1/status?pool={pool}")))?;
    Ok(doc.pools.into_iter().find(|p| p.name == pool))
}

/// The template the roll must reach, or what that waits for.
fn target_of(
    rt: &tokio::runtime::Runtime,
    daemon: &Client,
    pool: &str,
    awaited: &Awaited,
) -> anyhow::Result<Result<String, String>> {
    match awaited {
        Awaited::Template(t) => Ok(Ok(t.clone())),
        Awaited::Revision(rev) => {
            let doc: StatusDoc =
                rt.block_on(daemon.get_json(&format!("/v1/status?pool={pool}")))?;
            let in_force = doc.config.revision.as_ref().map(|r| r.short());
            let matches = doc.config.revision.as_ref().is_some_and(|r| {
                (rev.len() >= 7 && r.commit.starts_with(rev.as_str())) || r.short() == *rev
            });
            if !matches {
                return Ok(Err(format!(
                    "waiting for the daemon to put revision {rev} in force (in force: {})",
                    in_force.as_deref().unwrap_or("none yet")
                )));
            }
            let since = doc.config.in_force_since;
            match doc.pools.into_iter().find(|p| p.name == pool) {
                Some(p) if p.planned_at >= since => match p.rollout {
                    Some(r) => Ok(Ok(r.target)),
                    None => Ok(Err("waiting for the daemon to look at the pool".into())),
                },
                Some(_) => Ok(Err(format!(
                    "waiting for the daemon to plan the pool at revision {rev}"
                ))),
                None => anyhow::bail!("the daemon has no pool {pool} at revision {rev}"),
            }
        }
        Awaited::Now => {
            let doc: StatusDoc =
                rt.block_on(daemon.get_json(&format!("/v1/status?pool={pool}")))?;
            let dir = doc.daemon.dir_resolved.as_ref().unwrap_or(&doc.daemon.dir);
            let want = desired_now(
                rt,
                daemon,
                Path::new(dir),
                doc.daemon.git_committed_only,
                pool,
            )?;
            // The daemon has it once the pool's last look was against it.
            match doc.pools.into_iter().find(|p| p.name == pool) {
                Some(p) if p.rollout.as_ref().is_some_and(|r| r.target == want) => Ok(Ok(want)),
                _ if !doc.config.valid => anyhow::bail!(
                    "the daemon refused the desired state: {}",
                    doc.config.errors.join("; ")
                ),
                _ => Ok(Err(format!(
                    "waiting for the daemon to load the desired state as it is now (template {want})"
                ))),
            }
        }
    }
}

/// The pool's desired template in `dir` as it is now (committed, for a
/// daemon that reads commits only), with the images the daemon's channels
/// have in force.
fn desired_now(
    rt: &tokio::runtime::Runtime,
    daemon: &Client,
    dir: &Path,
    committed: bool,
    pool: &str,
) -> anyhow::Result<String> {
    let loaded = if committed {
        super::snapshot::load_ref(dir, "HEAD")?.map(|(c, _)| c)
    } else {
        let report = crate::desired_dir::load_dir(dir, &crate::spec::load::Limits::default());
        for d in report.errors() {
            eprintln!("{d}");
        }
        report.config
    };
    let Some(mut config) = loaded else {
        anyhow::bail!(
            "the desired state in {} is invalid now (above), so the daemon will not load it",
            dir.display()
        );
    };
    if !config.channels.is_empty() {
        let view: serde_json::Value = rt.block_on(daemon.get_json("/v1/images"))?;
        let mut images = crate::images::Images::default();
        for c in view["channels"].as_array().into_iter().flatten() {
            if let (Some(name), Ok(rec)) = (
                c["name"].as_str(),
                serde_json::from_value::<crate::images::ChannelRecord>(c["record"].clone()),
            ) {
                images.channels.insert(name.to_string(), rec);
            }
        }
        crate::images::resolve::resolve(&mut config, &images);
    }
    let Some(entry) = config.pools.get(pool) else {
        anyhow::bail!(
            "no pool {pool} in {} (the daemon's desired state): wait with --template or --revision",
            dir.display()
        );
    };
    Ok(crate::model::PoolSpec::from_doc(&entry.doc)
        .template
        .hash()
        .to_string())
}

/// Every node on the target (0), or its rollout to it failed (1).
fn ended(
    p: &Option<PoolStatus>,
    journal: Option<&RolloutState>,
    target: &str,
) -> Option<anyhow::Result<End>> {
    let Some(p) = p else {
        return Some(Err(anyhow::anyhow!(
            "the pool is no longer in the daemon's desired state"
        )));
    };
    if let Some(j) = journal.filter(|j| j.target.to_string() == target) {
        match &j.status {
            Status::Degraded { reason } => {
                return Some(Ok(End {
                    code: exit::FAILED,
                    status: "degraded",
                    message: format!("its rollout to template {target} is Degraded: {reason}"),
                }));
            }
            Status::RolledBack { reason, .. } => {
                return Some(Ok(End {
                    code: exit::FAILED,
                    status: "rolled-back",
                    message: format!("its rollout to template {target} was rolled back: {reason}"),
                }));
            }
            _ => {}
        }
    }
    let r = p.rollout.as_ref()?;
    let done = r.target == target
        && p.state == PoolState::InSync
        && r.counts.updated >= r.counts.desired
        && r.counts.outdated == 0;
    done.then(|| {
        Ok(End {
            code: exit::OK,
            status: "completed",
            message: format!(
                "completed: {} of {} node(s) run template {target}",
                r.counts.updated, r.counts.desired
            ),
        })
    })
}

/// The change across pools governing the pool halted (it will not roll on
/// its own): 1.
fn halted(
    rt: &tokio::runtime::Runtime,
    daemon: &Client,
    pool: &str,
    p: &Option<PoolStatus>,
) -> anyhow::Result<Option<End>> {
    if p.as_ref().is_none_or(|p| p.state != PoolState::Held) {
        return Ok(None);
    }
    let all: serde_json::Value = rt.block_on(daemon.get_json("/v1/fleet"))?;
    for f in all["fleets"].as_array().into_iter().flatten() {
        let governs = f["stages"].as_array().into_iter().flatten().any(|s| {
            s["cells"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c[0] == pool)
        });
        if governs && f["change"]["status"]["state"] == "halted" {
            return Ok(Some(End {
                code: exit::FAILED,
                status: "halted",
                message: format!(
                    "its change across pools halted (fleet rollout {}): {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["change"]["status"]["reason"].as_str().unwrap_or("")
                ),
            }));
        }
    }
    Ok(None)
}

/// Where the roll stands, in a line.
fn progress(p: &Option<PoolStatus>, target: &str) -> String {
    let Some(p) = p else {
        return "not in the daemon's status".into();
    };
    let counts = p
        .rollout
        .as_ref()
        .filter(|r| r.target == target)
        .map(|r| {
            format!(
                ": {} of {} node(s) updated, {} available",
                r.counts.updated, r.counts.desired, r.counts.available
            )
        })
        .unwrap_or_default();
    format!("{}{counts} ({})", p.state.as_str(), p.message)
}

fn finish(pool: &str, target: Option<&str>, end: End, output: super::Output) -> u8 {
    match output {
        super::Output::Text => {
            if end.code == exit::OK {
                println!("nodepool.{pool}: {}", end.message);
            } else {
                println!("nodepool.{pool}: {}", end.message);
                eprintln!("error: nodepool.{pool}: {}", end.message);
            }
        }
        super::Output::Json => println!(
            "{}",
            serde_json::json!({
                "formatVersion": 1,
                "pool": pool,
                "status": end.status,
                "target": target,
                "message": end.message,
            })
        ),
    }
    end.code
}
