//! The config repo (BENCHMARKS.md): `poolwright run --git-url`.
//!
//! 1. fetch: a config repo of FILES pool files and COMMITS commits (made with
//!    `git fast-import`), fetched by the daemon's clone (`git::mirror`) from
//!    scratch, then again after one more commit; and the tree read at the tip.
//! 2. webhook: a daemon on the repo over file:// with a one-hour interval; for
//!    each of PUSHES pushes, from the signed push webhook to the pool planned
//!    from the new commit (its status names the revision).
//! 3. poll: the same without webhooks, `--git-interval 5s`: from the push to
//!    the plan.
//! 4. previews: `--preview-refs refs/heads/pr/*` on 100 and 1,000 pools; for
//!    each of PREVIEWS new branches, from its push webhook to its preview served.
//!
//! cargo bench --bench git_fetch
//!   POOLWRIGHT_BENCH_ONLY (fetch,webhook,poll,previews), _FILES (10000),
//!   _COMMITS (5000), _PUSHES (50), _POLLS (10), _PREVIEWS (20)

#[path = "common/mod.rs"]
mod common;
use common::env_or;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use poolwright::git::mirror::{FetchLimits, Mirror, RemoteOptions};
use serde_json::Value;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pool(name: &str, image: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: sim\n  size: 1\n  template: {{image: {image}}}\n"
    )
}

const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 1, speed: 1000}\n";

/// A bare repository with `files` pool files under pools/ and `commits`
/// commits: the first adds them all, each later one changes one pool.
fn make_repo(dir: &Path, files: usize, commits: usize) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "--bare", "-b", "main"]);
    let mut stream = Vec::new();
    let mut mark = 0;
    for c in 0..commits {
        writeln!(stream, "commit refs/heads/main").unwrap();
        mark += 1;
        writeln!(stream, "mark :{mark}").unwrap();
        writeln!(
            stream,
            "committer b <b@example.com> {} +0000",
            1_764_000_000 + c
        )
        .unwrap();
        let msg = format!("change {c}");
        writeln!(stream, "data {}\n{msg}", msg.len()).unwrap();
        if c > 0 {
            writeln!(stream, "from :{}", mark - 1).unwrap();
        }
        let mut inline = |path: &str, text: &str| {
            writeln!(stream, "M 100644 inline {path}").unwrap();
            writeln!(stream, "data {}\n{text}", text.len()).unwrap();
        };
        if c == 0 {
            inline("pools/provider.yaml", PROVIDER);
            for p in 0..files {
                let name = format!("pool-{p:05}");
                inline(&format!("pools/{name}.yaml"), &pool(&name, "img-0"));
            }
        } else {
            let name = format!("pool-{:05}", c % files);
            inline(
                &format!("pools/{name}.yaml"),
                &pool(&name, &format!("img-{c}")),
            );
        }
    }
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success());
}

/// One more commit on `main` of the bare repository, through a clone.
fn push_one(root: &Path, work: &Path, remote: &Path, image: &str) -> String {
    if !work.exists() {
        git(
            root,
            &[
                "clone",
                "-q",
                remote.to_str().unwrap(),
                work.to_str().unwrap(),
            ],
        );
    }
    std::fs::write(
        work.join("pools/pool-00001.yaml"),
        pool("pool-00001", image),
    )
    .unwrap();
    git(
        work,
        &[
            "commit",
            "-q",
            "-am",
            &format!("roll pool-00001 to {image}"),
        ],
    );
    git(work, &["push", "-q", "origin", "main"]);
    let out = Command::new("git")
        .current_dir(work)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn fetch(files: usize, commits: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote.git");
    let t = Instant::now();
    make_repo(&remote, files, commits);
    let made = t.elapsed();
    let state = tmp.path().join("state");
    let mirror = Mirror::open(
        &state,
        RemoteOptions {
            url: format!("file://{}", remote.display()),
            branch: "main".into(),
            path: "pools".into(),
            token_file: None,
            ca_file: None,
            ssh_key: None,
            known_hosts: None,
            limits: FetchLimits::default(),
            preview_refs: Vec::new(),
        },
    )
    .unwrap();
    let t = Instant::now();
    let first = mirror.fetch().unwrap();
    let first_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let tree = mirror
        .read(&first.revision.commit, &Default::default())
        .unwrap();
    let read_secs = t.elapsed().as_secs_f64();
    assert_eq!(tree.len(), files + 1);
    let mut incremental = Vec::new();
    for i in 0..5 {
        let tip = push_one(
            tmp.path(),
            &tmp.path().join("work"),
            &remote,
            &format!("img-new-{i}"),
        );
        let t = Instant::now();
        let next = mirror.fetch().unwrap();
        incremental.push(t.elapsed().as_secs_f64());
        assert_eq!(next.revision.commit, tip);
    }
    incremental.sort_by(f64::total_cmp);
    println!(
        "git_fetch fetch: {files} files, {commits} commits (made in {:.1}s): first fetch {first_secs:.2}s ({} objects), tree read {read_secs:.2}s; fetch after one commit: min {:.3}s median {:.3}s max {:.3}s over 5",
        made.as_secs_f64(),
        first.objects,
        incremental[0],
        incremental[2],
        incremental[4],
    );
}

struct Daemon {
    child: Child,
    url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &Path, args: &[&str]) -> Daemon {
    let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["run", "--state-dir", "state", "--listen", "127.0.0.1:0"])
        .args(["--resync", "1h", "--log-format", "json"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let url = loop {
        if let Ok(text) = std::fs::read_to_string(root.join("state/daemon.json"))
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            break v["url"].as_str().unwrap().to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Daemon { child, url }
}

fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

/// A signed GitHub push webhook for `git_ref` at `after`; answered 202.
fn push_hook(d: &Daemon, secret: &str, git_ref: &str, after: &str) {
    let body = format!(r#"{{"ref":"{git_ref}","after":"{after}"}}"#);
    let sig = poolwright::git::hook::sign(body.as_bytes(), secret.as_bytes());
    let (code, text) = request(
        &d.url,
        "POST",
        "/v1/hooks/git",
        &[
            ("X-GitHub-Event".into(), "push".into()),
            ("X-Hub-Signature-256".into(), format!("sha256={sig}")),
            ("Content-Type".into(), "application/json".into()),
        ],
        body.as_bytes(),
    );
    assert_eq!(code, 202, "{text}");
}

/// Wait until every pool is in sync (created, on its template).
fn wait_in_sync(d: &Daemon, pools: usize, limit: Duration) {
    let t = Instant::now();
    loop {
        let (_, body) = request(&d.url, "GET", "/v1/status", &[], b"");
        let s: Value = serde_json::from_str(&body).unwrap();
        let synced = s["pools"]
            .as_array()
            .map(|p| p.iter().filter(|p| p["state"] == "in-sync").count())
            .unwrap_or(0);
        if synced == pools {
            return;
        }
        assert!(t.elapsed() < limit, "{synced} of {pools} pools in sync");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `pool` was planned from `commit`.
fn planned_from(d: &Daemon, pool: &str, commit: &str) -> bool {
    let (_, body) = request(&d.url, "GET", &format!("/v1/status?pool={pool}"), &[], b"");
    let s: Value = serde_json::from_str(&body).unwrap();
    let short = format!("main@{}", &commit[..7]);
    s["pools"][0]["revision"] == short.as_str()
}

fn wait_planned(d: &Daemon, commit: &str, limit: Duration) -> Duration {
    let t = Instant::now();
    while !planned_from(d, "pool-00001", commit) {
        assert!(
            t.elapsed() < limit,
            "{commit} was not planned within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn pushes(webhook: bool, n: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let remote = root.join("remote.git");
    make_repo(&remote, 100, 2);
    let secret = "bench-secret-0123456789abcdef-0123456789";
    std::fs::write(root.join("secret"), secret).unwrap();
    let url = format!("file://{}", remote.display());
    let interval = if webhook { "1h" } else { "5s" };
    let mut args = vec![
        "--git-url",
        &url,
        "--git-path",
        "pools",
        "--git-interval",
        interval,
    ];
    if webhook {
        args.extend(["--webhook-secret-file", "secret"]);
    }
    let d = start(root, &args);
    let first = {
        let out = Command::new("git")
            .current_dir(&remote)
            .args(["rev-parse", "main"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    wait_planned(&d, &first, Duration::from_secs(60));
    let mut took = Vec::new();
    for i in 0..n {
        let tip = push_one(root, &root.join("work"), &remote, &format!("img-push-{i}"));
        let t = Instant::now();
        if webhook {
            push_hook(&d, secret, "refs/heads/main", &tip);
        }
        wait_planned(&d, &tip, Duration::from_secs(30));
        took.push(t.elapsed().as_secs_f64());
    }
    took.sort_by(f64::total_cmp);
    println!(
        "git_fetch {}: {n} pushes, push{} -> the pool planned from the new commit: p50 {:.3}s p90 {:.3}s p99 {:.3}s max {:.3}s",
        if webhook {
            "webhook"
        } else {
            "poll (--git-interval 5s)"
        },
        if webhook { " + webhook" } else { "" },
        percentile(&took, 0.5),
        percentile(&took, 0.9),
        percentile(&took, 0.99),
        took[took.len() - 1],
    );
}

/// A daemon with `--preview-refs refs/heads/pr/*` on a repo of `files`
/// pools; `n` times: a new branch pr/N that rolls one pool, pushed, and its
/// signed push webhook sent; from the webhook to `/v1/previews` naming the
/// branch's commit.
fn previews(n: usize, files: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let remote = root.join("remote.git");
    make_repo(&remote, files, 2);
    let secret = "bench-secret-0123456789abcdef-0123456789";
    std::fs::write(root.join("secret"), secret).unwrap();
    let url = format!("file://{}", remote.display());
    let d = start(
        root,
        &[
            "--git-url",
            &url,
            "--git-path",
            "pools",
            "--git-interval",
            "1h",
            "--webhook-secret-file",
            "secret",
            "--preview-refs",
            "refs/heads/pr/*",
        ],
    );
    let work = root.join("work");
    // The first push makes the clone; main's tip is planned, and every
    // pool created and in sync, before the first branch.
    let first = push_one(root, &work, &remote, "img-main");
    push_hook(&d, secret, "refs/heads/main", &first);
    wait_planned(&d, &first, Duration::from_secs(120));
    wait_in_sync(&d, files, Duration::from_secs(600));
    let mut took = Vec::new();
    for i in 0..n {
        let branch = format!("pr/{i}");
        git(&work, &["checkout", "-q", "-B", &branch, "main"]);
        std::fs::write(
            work.join("pools/pool-00002.yaml"),
            pool("pool-00002", &format!("img-pr-{i}")),
        )
        .unwrap();
        git(
            &work,
            &["commit", "-q", "-am", &format!("roll pool-00002 ({i})")],
        );
        git(&work, &["push", "-q", "origin", &branch]);
        let out = Command::new("git")
            .current_dir(&work)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        let tip = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let git_ref = format!("refs/heads/{branch}");
        let t = Instant::now();
        push_hook(&d, secret, &git_ref, &tip);
        loop {
            let (_, body) = request(&d.url, "GET", "/v1/previews", &[], b"");
            let v: Value = serde_json::from_str(&body).unwrap();
            let p = &v["previews"][git_ref.as_str()];
            if p["commit"]["commit"] == tip.as_str() {
                // The branch's one change, against pools all in sync.
                assert_eq!(p["summary"]["roll"], 1, "{p}");
                assert_eq!(p["summary"]["add"], 0, "{p}");
                assert_eq!(p["changes"][0]["pool"], "pool-00002", "{p}");
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{git_ref} was not previewed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        took.push(t.elapsed().as_secs_f64());
        git(&work, &["checkout", "-q", "main"]);
    }
    took.sort_by(f64::total_cmp);
    println!(
        "git_fetch previews: {files} pools, {n} branches, webhook -> the branch's preview served: p50 {:.3}s p90 {:.3}s p99 {:.3}s max {:.3}s",
        percentile(&took, 0.5),
        percentile(&took, 0.9),
        percentile(&took, 0.99),
        took[took.len() - 1],
    );
}

fn main() {
    let only: String = env_or(
        "POOLWRIGHT_BENCH_ONLY",
        "fetch,webhook,poll,previews".to_string(),
    );
    if only.contains("fetch") {
        fetch(
            env_or("POOLWRIGHT_BENCH_FILES", 10_000),
            env_or("POOLWRIGHT_BENCH_COMMITS", 5_000),
        );
    }
    if only.contains("webhook") {
        pushes(true, env_or("POOLWRIGHT_BENCH_PUSHES", 50));
    }
    if only.contains("poll") {
        pushes(false, env_or("POOLWRIGHT_BENCH_POLLS", 10));
    }
    if only.contains("previews") {
        for files in [100, 1_000] {
            previews(env_or("POOLWRIGHT_BENCH_PREVIEWS", 20), files);
        }
    }
}
