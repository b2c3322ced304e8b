//! The status page, in a real browser (Debian's chromium through
//! chromedriver): `poolwright run` on the examples, every pool on the
//! overview, a roll started by editing a file and followed live on the pool
//! page (timeline and counts advance without a reload), the page reconnecting
//! across a daemon restart, no console errors, and 1,000 pools paginated.
//! Screenshots go to `target/web-screenshots/`.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use support::browser::Browser;
use support::daemon::Daemon;
use support::git_servers::git;

/// The README's main job: the examples, with the simulator sped up so a
/// roll takes seconds.
fn examples_in(root: &Path, speed: u32) {
    let config = root.join("config");
    std::fs::create_dir_all(config.join("pools")).unwrap();
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for f in ["providers.yaml", "policies.yaml"] {
        let text = std::fs::read_to_string(ex.join(f)).unwrap();
        std::fs::write(
            config.join(f),
            text.replace("speed: 20", &format!("speed: {speed}")),
        )
        .unwrap();
    }
    for e in std::fs::read_dir(ex.join("pools")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), config.join("pools").join(e.file_name())).unwrap();
    }
}

fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots")
}

fn no_console_errors(browser: &Browser) {
    let errors: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, _)| level == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}

fn count(browser: &Browser, name: &str) -> Option<u64> {
    browser
        .eval(
            "const e = document.querySelector('#counts [data-count=\"' + arguments[0] + '\"]'); return e ? e.textContent : null",
            json!([name]),
        )
        .as_str()
        .and_then(|s| s.parse().ok())
}

/// The lowest availability among the counts the daemon reported for `web`.
fn daemon_page_min_available(daemon: &Daemon) -> u64 {
    let (code, body) = daemon.get("/v1/pools/web/page");
    assert_eq!(code, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["counts"]["available"].as_u64())
        .min()
        .unwrap_or(0)
}

#[test]
fn the_page_shows_every_pool_and_follows_a_roll_live_across_a_restart() {
    let root = tempfile::tempdir().unwrap();
    examples_in(root.path(), 60);
    let port = support::moto::free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = Daemon::start(root.path(), &["--listen", &listen]);
    let pools = ["api", "batch", "cache", "web"];
    daemon.wait_for(
        "every pool in sync and healthy",
        Duration::from_secs(120),
        |s| {
            let p = s["pools"].as_array().unwrap();
            p.len() == pools.len()
                && p.iter().all(|p| {
                    p["state"] == "in-sync" && p["rollout"]["available"] == p["rollout"]["desired"]
                })
        },
    );

    let browser = Browser::start();
    browser.goto(&format!("{}/", daemon.url));
    browser.wait_for(
        "a row per pool",
        Duration::from_secs(20),
        "return document.querySelectorAll('#pools tbody tr').length === 4",
    );
    let text = browser.text();
    for p in pools {
        assert!(
            text.contains(p),
            "pool {p} is missing from the overview:\n{text}"
        );
    }
    browser.wait_for(
        "the live stream",
        Duration::from_secs(10),
        "return document.getElementById('live').textContent === 'live'",
    );
    browser.screenshot(&screenshots().join("overview.png"));
    no_console_errors(&browser);

    // The pool page, then a roll started by an edit, watched without a reload.
    browser.goto(&format!("{}/#/pool/web", daemon.url));
    browser.wait_for(
        "the pool page with its counts",
        Duration::from_secs(20),
        "const e = document.querySelector('#counts [data-count=\"updated\"]'); return e && e.textContent === '6'",
    );
    browser.wait_for(
        "every node of the pool in the timeline, events or not",
        Duration::from_secs(10),
        "return new Set([...document.querySelectorAll('#timeline rect.ph')].map(r => r.dataset.node)).size === 6",
    );
    let page = browser.text();
    for part in [
        "Nodes",
        "Capacity",
        "Disruption windows",
        "Plan",
        "Recent events",
    ] {
        assert!(page.contains(part), "the pool page lacks {part}:\n{page}");
    }
    assert!(
        page.contains("read-only"),
        "pause/resume must not be offered without authority:\n{page}"
    );
    browser.eval("window.__sameDocument = 42; return true", json!([]));
    let web = root.path().join("config/pools/web.yaml");
    let yaml = std::fs::read_to_string(&web).unwrap();
    std::fs::write(&web, yaml.replace("img-2026-11", "img-2026-12")).unwrap();

    browser.wait_for(
        "rollout_started in the events table",
        Duration::from_secs(30),
        "const t = document.getElementById('event-table'); return t && t.innerText.includes('rollout_started')",
    );
    browser.wait_for(
        "a launching node in the timeline",
        Duration::from_secs(30),
        "return document.querySelectorAll('#timeline rect.ph-launching').length > 0",
    );
    // The counts advance, pushed by the stream; the headline names the
    // phase, the progress line keeps the nodes in flight apart.
    let mut seen = std::collections::BTreeSet::new();
    let mut phases = std::collections::BTreeMap::new();
    let mut progress = std::collections::BTreeSet::new();
    let mut shot = false;
    let started = Instant::now();
    loop {
        let look = browser.eval(
            "const p = document.getElementById('phase'), g = document.querySelector('#pool-progress .progress-text'); \
             return [p && !p.hidden ? p.dataset.kind : null, p && !p.hidden ? p.innerText : null, \
                     p ? [...p.querySelectorAll('time')].map(t => t.dataset.zone || '') : [], g ? g.innerText : null]",
            json!([]),
        );
        if let (Some(kind), Some(text)) = (look[0].as_str(), look[1].as_str()) {
            phases
                .entry(kind.to_string())
                .or_insert_with(|| (text.to_string(), look[2].clone()));
        }
        if let Some(g) = look[3].as_str() {
            progress.insert(g.to_string());
        }
        if let Some(u) = count(&browser, "updated") {
            seen.insert(u);
            if !shot && (3..6).contains(&u) {
                browser.screenshot(&screenshots().join("pool-rollout.png"));
                shot = true;
            }
        }
        let done = browser
            .eval(
                "const t = document.getElementById('event-table'); return !!t && t.innerText.includes('rollout_completed')",
                json!([]),
            )
            .as_bool()
            .unwrap_or(false);
        if done && count(&browser, "updated") == Some(6) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the roll did not finish on the page; updated counts seen {seen:?}:\n{}\nlog: {}",
            browser.text(),
            daemon.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        seen.len() >= 3,
        "the updated count should advance through the roll, saw {seen:?}"
    );
    assert!(shot, "no moment mid-rollout was seen: {seen:?}");
    // The canary wait and the checkpoint's bake, with its end and its zone.
    assert!(
        phases.contains_key("canary"),
        "the headline never named the canary wait: {phases:?}"
    );
    let (bake, zones) = phases
        .get("bake")
        .unwrap_or_else(|| panic!("the headline never named the bake: {phases:?}"));
    assert!(bake.contains("until"), "the bake's end: {bake}");
    assert!(
        zones.as_array().is_some_and(
            |z| !z.is_empty() && z.iter().all(|z| z.as_str().is_some_and(|z| !z.is_empty()))
        ),
        "the bake's end carries its zone: {bake} {zones}"
    );
    // Progress reads done of desired, the nodes in flight apart.
    assert!(
        progress.iter().all(|p| p.contains("/6 done")),
        "progress reads done/desired: {progress:?}"
    );
    assert!(
        progress.iter().any(|p| p.contains("launching"))
            && progress.iter().any(|p| p.contains("old draining")),
        "the nodes in flight are shown apart: {progress:?}"
    );
    // The capacity chart draws only what was observed: no point below the
    // lowest availability the daemon counted, nothing before the first
    // count but the hatched "not observed".
    let chart = browser.eval(
        "const svg = document.querySelector('#capacity svg'); if (!svg) return null; \
         const pts = JSON.parse(svg.dataset.points || '[]'); \
         const path = svg.querySelector('path[data-series=available]'); \
         const u = svg.querySelector('rect[data-unknown]'); \
         return { min: Math.min(...pts.map(p => p[2])), start: path ? parseFloat(path.getAttribute('d').slice(1)) : null, \
                  unknownEnd: u ? parseFloat(u.getAttribute('x')) + parseFloat(u.getAttribute('width')) : null }",
        json!([]),
    );
    let observed_min = daemon_page_min_available(&daemon);
    assert!(
        chart["min"].as_f64() >= Some(observed_min as f64),
        "the capacity chart draws available below what was observed ({observed_min}): {chart}"
    );
    if let (Some(start), Some(end)) = (chart["start"].as_f64(), chart["unknownEnd"].as_f64()) {
        assert!(
            (start - end).abs() < 1.0,
            "the available line starts where observation does: {chart}"
        );
    }
    let bars = browser.eval(
        "return ['launching','healthy','draining','terminating'].map(p => document.querySelectorAll('#timeline rect.ph-' + p).length)",
        json!([]),
    );
    let bars: Vec<u64> = serde_json::from_value(bars).unwrap();
    assert!(
        bars.iter().all(|n| *n > 0),
        "every phase of a replacement is drawn (launching, healthy, draining, terminating): {bars:?}"
    );
    assert_eq!(
        browser.eval("return window.__sameDocument", json!([])),
        json!(42),
        "the page was reloaded"
    );

    // A restart: the page says it lost the daemon, then comes back by itself.
    assert!(daemon.terminate().success());
    browser.wait_for(
        "the page noticing the daemon is gone",
        Duration::from_secs(20),
        "return document.getElementById('live').textContent !== 'live'",
    );
    let daemon = Daemon::start(root.path(), &["--listen", &listen]);
    browser.wait_for(
        "the stream back after the restart",
        Duration::from_secs(30),
        "return document.getElementById('live').textContent === 'live'",
    );
    browser.wait_for(
        "the pool page refreshed from the new daemon",
        Duration::from_secs(20),
        "const e = document.querySelector('#counts [data-count=\"updated\"]'); return e && e.textContent === '6'",
    );
    assert_eq!(
        browser.eval("return window.__sameDocument", json!([])),
        json!(42),
        "the page was reloaded"
    );
    // The browser logs the refused connections while the daemon was down;
    // those are the network's, not the page's.
    let errors: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, m)| level == "SEVERE" && !m.contains("ERR_CONNECTION_REFUSED"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    drop(daemon);
}

#[test]
fn a_thousand_pools_are_paginated_and_filterable() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, speed: 1000}\n",
    )
    .unwrap();
    for f in 0..10 {
        let mut text = String::new();
        for i in 0..100 {
            let n = f * 100 + i;
            text.push_str(&format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{n:04}}}\nspec:\n  providerRef: sim\n  size: 1\n  template: {{image: img-1}}\n"
            ));
        }
        std::fs::write(config.join(format!("pools-{f}.yaml")), text).unwrap();
    }
    let daemon = Daemon::start(root.path(), &[]);
    daemon.wait_for("1,000 pools listed", Duration::from_secs(120), |s| {
        s["pools"].as_array().unwrap().len() == 1000
    });
    let browser = Browser::start();
    browser.goto(&format!("{}/", daemon.url));
    browser.wait_for(
        "the first page of 1,000 pools",
        Duration::from_secs(30),
        "return document.querySelectorAll('#pools tbody tr').length === 100 && document.getElementById('page-info').textContent.includes('1,000')",
    );
    let render_ms = browser.eval("return window.__renderMs", json!([]));
    eprintln!("overview of 1,000 pools: first render {render_ms} ms after the status arrived");
    // Paging and the filter work on the whole fleet.
    browser.eval(
        "document.getElementById('next').click(); return true",
        json!([]),
    );
    browser.wait_for(
        "the second page",
        Duration::from_secs(10),
        "return document.querySelector('#pools tbody tr').innerText.includes('pool-0100')",
    );
    browser.eval(
        "const f = document.getElementById('filter'); f.value = 'pool-0999'; f.dispatchEvent(new Event('input')); return true",
        json!([]),
    );
    browser.wait_for(
        "one pool after filtering",
        Duration::from_secs(10),
        "const r = document.querySelectorAll('#pools tbody tr'); return r.length === 1 && r[0].innerText.includes('pool-0999')",
    );
    no_console_errors(&browser);
}

/// A change across pools on the page: its stages as swimlanes of pool
/// cells that fill as pools roll, and a halt in red, live (no reload).
#[test]
fn the_page_shows_a_change_across_pools_and_its_halt_live() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(
        config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 4, speed: 50, failures: {badImages: [img-bad]}}\n---\napiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  stages:\n    - {name: canary, pools: 2, soak: 2s}\n    - {name: rest}\n  halt: {failedPools: 1}\n",
    )
    .unwrap();
    let pools = |image: &str| -> String {
        (0..12)
            .map(|i| format!("---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{i:02}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {image}}}\n  rollout: {{health: {{minReady: 0s, startupTimeout: 3s}}}}\n"))
            .collect()
    };
    std::fs::write(config.join("pools.yaml"), pools("img-1")).unwrap();
    let d = Daemon::start(root, &[]);
    d.wait_for("12 pools in sync", Duration::from_secs(60), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 12 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let browser = Browser::start();
    browser.set_window(1280, 1000);
    browser.goto(&d.url);
    browser.wait_for(
        "the fleet view with 12 cells",
        Duration::from_secs(20),
        "return document.querySelectorAll('#fleets .cell').length === 12",
    );
    std::fs::write(config.join("pools.yaml"), pools("img-bad")).unwrap();
    // Live: the canary stage's cells roll, then the change halts in red.
    browser.wait_for(
        "a rolling cell",
        Duration::from_secs(20),
        "return document.querySelectorAll('#fleets .cell.c-rolling').length > 0",
    );
    let halt = browser.wait_for(
        "the halt",
        Duration::from_secs(30),
        "const e = document.querySelector('#fleets .halt'); return e ? e.textContent : ''",
    );
    assert!(halt.as_str().unwrap().contains("failed"), "{halt}");
    let failed = browser.eval(
        "return [...document.querySelectorAll('#fleets .cell.c-failed')].map(e => e.getAttribute('title'))",
        json!([]),
    );
    assert!(
        !failed.as_array().unwrap().is_empty(),
        "a failed pool's cell is marked: {failed}"
    );
    let red = browser.eval(
        "return getComputedStyle(document.querySelector('#fleets .halt')).color",
        json!([]),
    );
    assert_ne!(
        red,
        json!("rgb(29, 33, 38)"),
        "the halt stands out from the text"
    );
    std::fs::create_dir_all(screenshots()).unwrap();
    browser.screenshot(&screenshots().join("fleet-halted.png"));
    no_console_errors(&browser);
}

/// `run --git-url` on the page: the config repo, the commit in force, and a
/// refused commit with its reason.
#[test]
fn the_page_names_the_config_repo_and_a_refused_commit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (remote, work) = (root.join("remote.git"), root.join("work"));
    std::fs::create_dir_all(&remote).unwrap();
    git(&remote, &["init", "-q", "--bare", "-b", "main"]);
    std::fs::create_dir_all(work.join("pools")).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    git(
        &work,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    let commit = |image: &str, subject: &str| {
        std::fs::write(
            work.join("pools/web.yaml"),
            format!("apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec: {{type: sim, seed: 1, speed: 50}}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 1\n  template: {{image: {image}}}\n"),
        )
        .unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", subject]);
        git(&work, &["push", "-q", "-f", "origin", "main"]);
    };
    commit("img-1", "the fleet");
    let url = format!("file://{}", remote.display());
    let d = Daemon::start(
        root,
        &[
            "--git-url",
            &url,
            "--git-path",
            "pools",
            "--git-interval",
            "1s",
        ],
    );
    d.wait_for("the commit in force", Duration::from_secs(30), |s| {
        s["git"]["inForce"]["subject"] == "the fleet"
    });
    // History rewritten, and web's image with it: refused, and previewed.
    std::fs::write(
        work.join("pools/web.yaml"),
        std::fs::read_to_string(work.join("pools/web.yaml"))
            .unwrap()
            .replace("img-1", "img-2"),
    )
    .unwrap();
    git(
        &work,
        &["commit", "-q", "--amend", "-am", "history rewritten"],
    );
    git(&work, &["push", "-q", "-f", "origin", "main"]);
    d.wait_for("the rewrite refused", Duration::from_secs(20), |s| {
        s["git"]["refused"].is_object()
    });
    let browser = Browser::start();
    browser.goto(&d.url);
    let text = browser.wait_for(
        "the config repo on the page",
        Duration::from_secs(20),
        "const e = document.getElementById('config-info'); return e && e.textContent.includes('refused') ? e.textContent : ''",
    );
    let text = text.as_str().unwrap();
    assert!(text.contains(&url), "{text}");
    assert!(text.contains("the fleet"), "the commit in force: {text}");
    assert!(
        text.contains("--git-allow-rewrite"),
        "why it was refused: {text}"
    );
    // The refused tip's plan, under the previews: what it would do.
    let preview = browser.wait_for(
        "the refused tip's preview",
        Duration::from_secs(20),
        "const e = document.getElementById('previews'); return e && !document.getElementById('previews-sec').hidden && e.textContent.includes('Not applied') ? e.textContent : ''",
    );
    let preview = preview.as_str().unwrap();
    assert!(preview.contains("refs/heads/main"), "{preview}");
    assert!(preview.contains("history rewritten"), "{preview}");
    assert!(preview.contains("1 to roll (1 node)"), "{preview}");
    let plan = browser.wait_for(
        "the preview's plan, opened",
        Duration::from_secs(20),
        "const d = document.querySelector('#previews details'); if (!d) return ''; if (!d.open) d.open = true; const t = d.querySelector('pre').textContent; return t.includes('nodepool.web') ? t : ''",
    );
    assert!(
        plan.as_str()
            .unwrap()
            .contains("nodepool.web will roll 1 node(s)"),
        "{plan}"
    );
    std::fs::create_dir_all(screenshots()).unwrap();
    browser.screenshot(&screenshots().join("preview-refused-tip.png"));
    no_console_errors(&browser);
}
