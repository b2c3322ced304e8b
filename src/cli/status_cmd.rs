//! `poolwright status`: the running daemon's `/v1/status` as a table.

use std::path::Path;

use super::{Output, exit};
use crate::daemon::client::Client;
use crate::daemon::views::board::StatusDoc;

pub(super) fn status(state_dir: &Path, url: Option<&str>, output: Output) -> anyhow::Result<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = match url {
        Some(u) => Client::at(u),
        None => match rt.block_on(Client::find(state_dir)) {
            Some(c) => c,
            None => anyhow::bail!(
                "no daemon is running on state directory {} (start one with `poolwright run DIR`, or pass --url)",
                state_dir.display()
            ),
        },
    };
    let doc: StatusDoc = rt.block_on(client.get_json("/v1/status"))?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&doc)?),
        Output::Text => print!("{}", render(&doc)),
    }
    Ok(if doc.config.valid {
        exit::OK
    } else {
        exit::FAILED
    })
}

/// Who holds which shard, grouped by daemon: a pool of a shard held
/// elsewhere is acted on (and its progress best shown) by that daemon.
fn render_shards(s: &crate::ha::ShardsStatus, me: &str) -> String {
    let mut by: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for h in &s.shards {
        let who = match &h.holder {
            Some(w) if w == me => format!("{w} (this daemon)"),
            Some(w) => w.clone(),
            None => "nobody".into(),
        };
        by.entry(who).or_default().push(format!(
            "{}{}",
            h.shard,
            if h.releasing { " (handing over)" } else { "" }
        ));
    }
    let mut out = format!(
        "shards: {} ({}), {} live daemon(s): {}\n",
        s.count,
        s.hash,
        s.members.len(),
        s.members.join(", ")
    );
    for (who, shards) in by {
        out.push_str(&format!("  {who}: {}\n", shards.join(", ")));
    }
    if let Some(e) = &s.error {
        out.push_str(&format!("  not taking shards: {e}\n"));
    }
    out
}

/// The config repo: what is in force, the last fetch, what was refused.
fn render_git(g: &crate::daemon::views::board::GitStatus) -> String {
    let short = |r: &crate::plan::render::Revision| format!("{} {:?}", r.short(), r.subject_line());
    let mut out = format!(
        "config repo {} branch {}{}: ",
        g.url,
        g.branch,
        if g.path.is_empty() {
            String::new()
        } else {
            format!(" path {}", g.path)
        }
    );
    match &g.in_force {
        Some(r) => out.push_str(&format!("{} in force\n", short(r))),
        None => out.push_str("nothing in force yet (no commit fetched)\n"),
    }
    if let Some(format) = &g.verify {
        out.push_str(&format!(
            "  only tips signed by a trusted key are applied (--git-verify {format})\n"
        ));
    }
    match (&g.error, g.last_fetch_at) {
        (Some(e), last) => out.push_str(&format!(
            "  FETCH FAILING ({} in a row): {e}\n  last good fetch: {}; next try {}\n",
            g.failures,
            last.map(|t| t.to_string())
                .unwrap_or_else(|| "never".into()),
            g.next_fetch_at
                .map(|t| t.to_string())
                .unwrap_or_else(|| "soon".into()),
        )),
        (None, Some(at)) => out.push_str(&format!(
            "  fetched at {at}{}{}\n",
            g.fetched
                .as_ref()
                .filter(|f| g.in_force.as_ref().is_none_or(|i| i.commit != f.commit))
                .map(|f| format!(": tip {}", short(f)))
                .unwrap_or_default(),
            g.next_fetch_at
                .map(|t| format!("; next fetch {t}"))
                .unwrap_or_default()
        )),
        (None, None) => out.push_str("  first fetch under way\n"),
    }
    if let Some(r) = &g.refused {
        out.push_str(&format!(
            "  REFUSED {}: {}\n",
            &r.commit[..r.commit.len().min(7)],
            r.reason
        ));
    }
    out
}

/// The status as an operator reads it: a header, then one row per pool.
pub fn render(doc: &StatusDoc) -> String {
    let mut out = String::new();
    let d = &doc.daemon;
    out.push_str(&format!(
        "poolwright run {} (pid {}, {}{}), up since {}\n",
        d.dir,
        d.pid,
        d.mode,
        if d.git_committed_only {
            ", committed only"
        } else {
            ""
        },
        d.started_at
    ));
    if let Some(h) = &d.ha {
        out.push_str(&format!(
            "lease {} as {}: {}\n",
            h.lease, h.identity, h.role
        ));
        if let Some(s) = &h.shards {
            out.push_str(&render_shards(s, &h.identity));
        }
    }
    let c = &doc.config;
    let revision = c
        .revision
        .as_ref()
        .map(|r| format!("{} {:?}", r.short(), r.subject_line()))
        .unwrap_or_else(|| "(not a git work tree)".into());
    if c.valid {
        out.push_str(&format!("desired state: {revision}\n"));
    } else {
        out.push_str(&format!(
            "desired state: INVALID, {} error(s); still in force: {revision}\n",
            c.errors.len()
        ));
        for e in &c.errors {
            out.push_str(&format!("  {e}\n"));
        }
    }
    if let Some(g) = &doc.git {
        out.push_str(&render_git(g));
    }
    let r = &doc.reconcile;
    out.push_str(&format!(
        "reconciles: {} ({} pool plans){}{}\n",
        r.count,
        r.pools_planned,
        r.last_finished_at
            .map(|t| format!(", last at {t}"))
            .unwrap_or_default(),
        r.next_resync_at
            .map(|t| format!(", every pool looked at again by {t}"))
            .unwrap_or_default()
    ));
    out.push_str(&format!(
        "queue: {} pool(s) waiting, {} due later",
        r.queued, r.scheduled
    ));
    for o in &r.observing {
        out.push_str(&format!(
            "; asking {} about {} pool(s) since {}",
            o.provider, o.pools, o.since
        ));
    }
    out.push('\n');
    for f in &doc.fleets {
        out.push_str(&format!(
            "fleet rollout {}: change {} {}, stage {} ({} of {}): {}/{} pools done, {} rolling, {} failed{}\n",
            f.name,
            f.change.as_deref().unwrap_or("(none)"),
            f.status.to_uppercase(),
            f.stage.as_deref().unwrap_or("-"),
            f.stage_number.min(f.stages),
            f.stages,
            f.done,
            f.pools,
            f.rolling,
            f.failed,
            f.message
                .as_ref()
                .map(|m| format!("; {m}"))
                .unwrap_or_default()
        ));
    }
    out.push('\n');
    if let Some(e) = &r.error {
        out.push_str(&format!("LAST ROUND FAILED: {e}\n\n"));
    }
    let rows: Vec<[String; 5]> = doc
        .pools
        .iter()
        .map(|p| {
            let progress = p
                .rollout
                .as_ref()
                .map(|r| format!("{}, {} available", r.counts.progress(), r.counts.available))
                .unwrap_or_else(|| "-".into());
            // What the roll waits for, and until when, leads the message.
            let mut message = match p.rollout.as_ref().and_then(|r| r.phase.as_ref()) {
                Some(ph) if p.state.as_str() != "in-sync" => {
                    let until = ph.until.map(|u| format!(" until {u}")).unwrap_or_default();
                    format!("{}{until}; {}", ph.text, p.message)
                }
                _ => p.message.clone(),
            };
            if let Some(e) = &p.last_error {
                message.push_str(&format!("; last error at {}: {}", e.at, e.message));
            }
            [
                p.name.clone(),
                p.state.as_str().to_string(),
                progress,
                p.revision.clone().unwrap_or_else(|| "-".into()),
                message,
            ]
        })
        .collect();
    let header = ["POOL", "STATE", "PROGRESS", "REVISION", "MESSAGE"].map(String::from);
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter().zip(row.iter()) {
            out.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(&row[4]);
        out.push('\n');
    }
    // Who refuses a drain now (the pods and their budgets), and which old
    // nodes do-not-disrupt holds, by node.
    let mut named = false;
    for p in &doc.pools {
        let Some(r) = &p.rollout else { continue };
        for (node, why) in &r.blocked_drains {
            out.push_str(&format!(
                "\nDRAIN BLOCKED nodepool.{} node {node}: {why}",
                p.name
            ));
            named = true;
        }
        for (node, why) in &r.held_nodes {
            out.push_str(&format!("\nHELD nodepool.{} node {node}: {why}", p.name));
            named = true;
        }
    }
    if named {
        out.push('\n');
    }
    for o in &doc.overrides {
        out.push_str(&format!(
            "\nOVERRIDE nodepool.{}: {} by {} at {}: {:?}\n",
            o.pool, o.policy, o.by, o.at, o.reason
        ));
    }
    out
}
