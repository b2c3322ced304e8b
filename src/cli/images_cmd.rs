//! `poolwright images`, `poolwright image recall|unrecall IMAGE` and
//! `poolwright sim release IMAGE`: image channels seen, a bad image
//! recalled, and the simulator's vendor publishing one.

use std::fmt::Write as _;
use std::path::Path;

use super::{Output, exit};
use crate::daemon::client::Client;
use crate::images::Images;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ImageAction {
    /// No channel picks it again; channels with it in force go back to
    /// their previous good image, and their pools roll at once
    Recall,
    /// Undo a recall: channels may pick it again at their next ask
    Unrecall,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// `poolwright images`: from the daemon (`/v1/images`), or with none, from
/// the state directory's record (no pools: those are observed by a daemon).
pub(super) fn images(state_dir: &Path, url: Option<&str>, output: Output) -> anyhow::Result<u8> {
    let rt = runtime()?;
    let client = match url {
        Some(u) => Some(Client::at(u)),
        None => rt.block_on(Client::find(state_dir)),
    };
    let view: serde_json::Value = match client {
        Some(c) => rt.block_on(c.get_json("/v1/images"))?,
        None => {
            let record = crate::store::images::load(&crate::store::images::path(state_dir))?;
            offline_view(&record)
        }
    };
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Output::Text => print!("{}", render(&view, jiff::Timestamp::now())),
    }
    Ok(exit::OK)
}

fn offline_view(record: &Images) -> serde_json::Value {
    let channels: Vec<serde_json::Value> = record
        .channels
        .iter()
        .map(|(name, rec)| serde_json::json!({"name": name, "record": rec, "pools": []}))
        .collect();
    serde_json::json!({"channels": channels, "recalled": record.recalled})
}

fn ts(v: &serde_json::Value) -> Option<jiff::Timestamp> {
    v.as_str()?.parse().ok()
}

fn when(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

fn release(v: &serde_json::Value, now: jiff::Timestamp) -> Option<String> {
    let image = v.get("image")?.as_str()?;
    let released = ts(v.get("released")?)?;
    Some(format!(
        "{image} (released {}, {})",
        when(released),
        crate::plan::age(released, now)
    ))
}

/// The view as a person reads it.
pub fn render(view: &serde_json::Value, now: jiff::Timestamp) -> String {
    let mut out = String::new();
    let channels = view["channels"].as_array().cloned().unwrap_or_default();
    if channels.is_empty() {
        out.push_str("No image channel in the desired state in force.\n");
    }
    for c in &channels {
        let rec = &c["record"];
        let _ = writeln!(out, "channel {}", c["name"].as_str().unwrap_or("?"));
        let shown = |k: &str| release(&rec[k], now);
        let _ = writeln!(
            out,
            "  in force: {}",
            shown("inForce").unwrap_or_else(|| "none yet".into())
        );
        if let Some(change) = rec["change"].as_str() {
            let _ = writeln!(out, "  change:   {change}");
        }
        if let Some(n) = shown("newest") {
            match ts(&rec["eligibleAt"]) {
                Some(at) => {
                    let _ = writeln!(out, "  newest:   {n}, eligible at {}", when(at));
                }
                None => {
                    let _ = writeln!(out, "  newest:   {n}");
                }
            }
        }
        if let Some(q) = shown("queued") {
            let _ = writeln!(out, "  queued:   {q}, after the change in flight");
        }
        if let Some(s) = rec["skipped"].as_array().filter(|s| !s.is_empty()) {
            let names: Vec<&str> = s.iter().filter_map(|v| v.as_str()).collect();
            let _ = writeln!(out, "  skipped:  {}", names.join(", "));
        }
        if let Some(e) = rec["error"].as_str() {
            let _ = writeln!(out, "  source:   FAILING: {e}");
        }
        if let Some(at) = ts(&rec["askedAt"]) {
            let _ = writeln!(out, "  asked:    {}", when(at));
        }
        for p in c["pools"].as_array().into_iter().flatten() {
            let lag = p["lagSeconds"].as_i64().unwrap_or(0);
            let _ = writeln!(
                out,
                "  pool {:<20} {}{}{}",
                p["pool"].as_str().unwrap_or("?"),
                p["image"].as_str().unwrap_or("(not observed)"),
                if lag > 0 {
                    format!(", {} behind the channel", crate::plan::age_span(lag))
                } else {
                    String::new()
                },
                node_ages(&p["nodes"], now)
            );
        }
    }
    if let Some(r) = view["recalled"].as_object().filter(|r| !r.is_empty()) {
        out.push_str("recalled:\n");
        for (image, why) in r {
            let _ = writeln!(
                out,
                "  {image}: {} (by {}, {})",
                why["reason"].as_str().unwrap_or(""),
                why["by"].as_str().unwrap_or("?"),
                ts(&why["at"]).map(when).unwrap_or_default()
            );
        }
    }
    out
}

/// A pool's nodes by the image each runs, with that image's age now:
/// `; nodes: 2 on img-2 (1d old), 1 on img-1 (9d old)`.
fn node_ages(nodes: &serde_json::Value, now: jiff::Timestamp) -> String {
    let mut by_image: std::collections::BTreeMap<(i64, String), usize> = Default::default();
    for n in nodes.as_array().into_iter().flatten() {
        let image = n["image"].as_str().unwrap_or("an image not seen");
        let age = ts(&n["released"]).map_or(-1, |r| now.duration_since(r).as_secs().max(0));
        *by_image.entry((age, image.to_string())).or_default() += 1;
    }
    if by_image.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by_image
        .iter()
        .map(|((age, image), n)| {
            if *age < 0 {
                format!("{n} on {image}")
            } else {
                format!("{n} on {image} ({} old)", crate::plan::age_span(*age))
            }
        })
        .collect();
    format!("; nodes: {}", parts.join(", "))
}

/// `poolwright image recall|unrecall IMAGE --reason`.
pub(super) fn image(
    action: ImageAction,
    image: &str,
    reason: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<u8> {
    let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) else {
        anyhow::bail!("say why with --reason (recorded with who asked)");
    };
    anyhow::ensure!(
        !image.is_empty() && image.len() <= 1024 && !image.chars().any(char::is_control),
        "an image id of 1 to 1024 printable characters"
    );
    let rt = runtime()?;
    let verb = match action {
        ImageAction::Recall => "recall",
        ImageAction::Unrecall => "unrecall",
    };
    if let Some(daemon) = rt.block_on(Client::find_control(state_dir)) {
        let encoded: String = url::form_urlencoded::byte_serialize(image.as_bytes()).collect();
        let path = format!("/v1/images/{encoded}/{verb}");
        let body = serde_json::json!({ "reason": reason });
        return Ok(match rt.block_on(daemon.post_json(&path, &body))? {
            Ok(message) => {
                println!("{message}");
                exit::OK
            }
            Err(message) => {
                eprintln!("{message}");
                exit::FAILED
            }
        });
    }
    // No daemon: the record is edited under the state lock; the next
    // `apply` (or the daemon) follows it.
    let _lock = crate::store::StateLock::acquire(state_dir, &format!("poolwright image {verb}"))?;
    let path = crate::store::images::path(state_dir);
    let mut record = crate::store::images::load(&path)?;
    let now = jiff::Timestamp::now();
    let who = format!("a human ({})", crate::store::overrides::operator());
    let message = match action {
        ImageAction::Recall => {
            if record.recalled.contains_key(image) {
                println!("{image} is recalled already");
                return Ok(exit::FAILED);
            }
            let recall = crate::images::Recall {
                reason: reason.to_string(),
                by: who,
                at: now,
            };
            let notes = record.recall(image, recall, &|_| None, now);
            let mut m = format!("{image} is recalled");
            for n in &notes {
                m.push_str(&format!("; {}", n.message()));
            }
            m
        }
        ImageAction::Unrecall => match record.unrecall(image) {
            Some(_) => format!("{image} is no longer recalled"),
            None => {
                println!("{image} is not recalled");
                return Ok(exit::FAILED);
            }
        },
    };
    crate::store::images::save(&path, &record)?;
    println!("{message}; the next `poolwright apply` (or the daemon) follows it");
    Ok(exit::OK)
}

/// `poolwright sim release IMAGE [--released T]`: the simulator's vendor
/// publishes an image.
pub(super) fn sim_release(
    image: &str,
    released: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<u8> {
    anyhow::ensure!(
        !image.is_empty()
            && image.len() <= 1024
            && !image.chars().any(|c| c.is_control() || c.is_whitespace()),
        "an image id of 1 to 1024 characters, without spaces"
    );
    let released = match released {
        Some(t) => t.parse::<jiff::Timestamp>().map_err(|e| {
            anyhow::anyhow!("--released {t:?}: an RFC 3339 time such as 2026-12-01T10:00:00Z: {e}")
        })?,
        None => jiff::Timestamp::now(),
    };
    let path = crate::provider::sim::catalogue::path(state_dir);
    let n = crate::provider::sim::catalogue::publish(
        &path,
        crate::model::image::Release {
            image: image.to_string(),
            released,
        },
    )?;
    println!(
        "released {image} at {} in the simulator's catalogue ({n} image(s), {})",
        when(released),
        path.display()
    );
    Ok(exit::OK)
}
