//! `poolwright run --git-url`: the daemon fetches a config repo by itself,
//! from git's own servers on this machine (a bare repository over file://,
//! `git daemon` over git://), applies each new commit once, keeps the last
//! good commit in force through a force-push, a deleted branch and an
//! unreachable server, and fetches at once on a signed push webhook.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::daemon::Daemon;
use crate::support::git_servers;
use crate::support::git_servers::git;

const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 50\n  bootTime: {fixed: 20s}\n  healthDelay: {fixed: 5s}\n  drainTime: {fixed: 10s}\n  terminateTime: {fixed: 5s}\n";

fn pool(image: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {image}}}\n  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    health: {{minReady: 200ms}}\n"
    )
}

const SECRET: &str = "s3cr3t-for-the-webhook-0123456789abcdef";

/// A bare repository `remote.git` (the forge) and a clone `work` (a
/// developer's), with the pools under `pools/` and a README beside them.
struct Repo {
    root: PathBuf,
    remote: PathBuf,
    work: PathBuf,
}

impl Repo {
    fn new(root: &Path) -> Repo {
        let remote = root.join("remote.git");
        let work = root.join("work");
        std::fs::create_dir_all(&remote).unwrap();
        git(&remote, &["init", "-q", "--bare", "-b", "main"]);
        // The forge lets the branch be deleted (to test a deleted branch).
        git(&remote, &["config", "receive.denyDeleteCurrent", "ignore"]);
        std::fs::create_dir_all(work.join("pools")).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        git(
            &work,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        std::fs::write(work.join("README.md"), "the fleet\n").unwrap();
        std::fs::write(work.join("pools/providers.yaml"), PROVIDER).unwrap();
        let repo = Repo {
            root: root.to_path_buf(),
            remote,
            work,
        };
        repo.commit_image("img-1", "first fleet");
        repo
    }

    /// Commit `web` at `image` and push; the new commit's id.
    fn commit_image(&self, image: &str, subject: &str) -> String {
        std::fs::write(self.work.join("pools/web.yaml"), pool(image)).unwrap();
        git(&self.work, &["add", "."]);
        git(&self.work, &["commit", "-q", "-m", subject]);
        git(&self.work, &["push", "-q", "-f", "origin", "main"]);
        self.head()
    }

    fn head(&self) -> String {
        let out = Command::new("git")
            .current_dir(&self.work)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn file_url(&self) -> String {
        format!("file://{}", self.remote.display())
    }
}

fn start(root: &Path, url: &str, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--git-url",
        url,
        "--git-path",
        "pools",
        "--git-interval",
        "1s",
    ];
    args.extend_from_slice(extra);
    Daemon::start(root, &args)
}

fn in_force(s: &Value) -> &str {
    s["git"]["inForce"]["subject"].as_str().unwrap_or("")
}

/// The commit `subject` is loaded and `web` runs it: in sync, every node
/// updated and available, planned from that revision.
fn web_runs(subject: &'static str) -> impl Fn(&Value) -> bool {
    move |s: &Value| {
        let revision = &s["config"]["revision"];
        let short = format!(
            "main@{}",
            revision["commit"]
                .as_str()
                .unwrap_or("")
                .get(..7)
                .unwrap_or("")
        );
        s["config"]["valid"] == true
            && revision["subject"] == subject
            && s["pools"].as_array().is_some_and(|pools| {
                pools.iter().any(|p| {
                    p["name"] == "web"
                        && p["state"] == "in-sync"
                        && p["rollout"]["updated"] == 2
                        && p["rollout"]["available"] == 2
                        && p["revision"] == short.as_str()
                })
            })
    }
}

#[test]
fn the_daemon_fetches_each_commit_once_and_keeps_the_last_good_one_through_every_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let url = repo.file_url();
    let d = start(tmp.path(), &url, &[]);
    let s = d.wait_for(
        "the first commit fetched and applied",
        Duration::from_secs(30),
        web_runs("first fleet"),
    );
    assert_eq!(in_force(&s), "first fleet");
    assert_eq!(s["config"]["revision"]["subject"], "first fleet");
    assert_eq!(s["git"]["url"], url.as_str());
    assert_eq!(s["git"]["path"], "pools");

    // A new commit: fetched on the interval, applied once.
    repo.commit_image("img-2", "roll web to img-2");
    let s = d.wait_for(
        "the new commit rolled",
        Duration::from_secs(60),
        web_runs("roll web to img-2"),
    );
    assert_eq!(in_force(&s), "roll web to img-2");
    let applied = |d: &Daemon| {
        d.events()
            .iter()
            .filter(|e| e["event"] == "commit_applied")
            .count()
    };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(applied(&d), 2, "each commit is applied once");
    assert!(d.metric("poolwright_git_fetches_total", &[]) >= 3.0);
    assert!(d.metric("poolwright_git_last_fetch_timestamp_seconds", &[]) > 1.7e9);

    // A force-push that rewrites history: refused, the commit in force stays.
    git(&repo.work, &["reset", "-q", "--hard", "HEAD~1"]);
    let rewritten = repo.commit_image("img-rewritten", "rewritten history");
    let s = d.wait_for("the rewrite refused", Duration::from_secs(20), |s| {
        s["git"]["refused"]["commit"] == rewritten.as_str()
    });
    assert!(
        s["git"]["refused"]["reason"]
            .as_str()
            .unwrap()
            .contains("--git-allow-rewrite"),
        "{s:#}"
    );
    assert_eq!(in_force(&s), "roll web to img-2");
    assert_eq!(
        d.metric(
            "poolwright_git_commits_refused_total",
            &[("reason", "rewrite")]
        ),
        1.0
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        d.events()
            .iter()
            .filter(|e| e["event"] == "commit_refused")
            .count(),
        1,
        "the refusal is told once, not on every fetch"
    );
    let short = &rewritten[..7];
    assert!(
        !d.events()
            .iter()
            .any(|e| e["revision"].as_str().is_some_and(|r| r.ends_with(short))),
        "something acted on the rewritten commit"
    );

    // Back on the history in force, a commit is applied again.
    git(&repo.work, &["fetch", "-q", "origin"]);
    git(
        &repo.work,
        &[
            "reset",
            "-q",
            "--hard",
            s["git"]["inForce"]["commit"].as_str().unwrap(),
        ],
    );
    repo.commit_image("img-3", "roll web to img-3");
    let s = d.wait_for(
        "the next descendant rolled",
        Duration::from_secs(60),
        web_runs("roll web to img-3"),
    );
    assert!(s["git"]["refused"].is_null(), "{s:#}");

    // A commit whose desired state is invalid changes nothing, and it is
    // never what a restart applies.
    std::fs::write(
        repo.work.join("pools/web.yaml"),
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec: {size: nope}\n",
    )
    .unwrap();
    git(&repo.work, &["commit", "-q", "-am", "a broken file"]);
    git(&repo.work, &["push", "-q", "origin", "main"]);
    let s = d.wait_for(
        "the broken commit not loaded",
        Duration::from_secs(20),
        |s| s["config"]["valid"] == false && s["git"]["fetched"]["subject"] == "a broken file",
    );
    assert_eq!(in_force(&s), "roll web to img-3");
    assert_eq!(s["config"]["revision"]["subject"], "roll web to img-3");
    drop(d);
    let d = start(tmp.path(), &url, &[]);
    let s = d.wait_for(
        "the restart on the broken tip",
        Duration::from_secs(30),
        |s| s["config"]["valid"] == false && s["git"]["fetched"]["subject"] == "a broken file",
    );
    assert_eq!(in_force(&s), "roll web to img-3", "{s:#}");
    assert_eq!(s["config"]["revision"]["subject"], "roll web to img-3");
    repo.commit_image("img-3", "fix the broken file");
    d.wait_for(
        "the fixed commit in force",
        Duration::from_secs(30),
        web_runs("fix the broken file"),
    );

    // The branch deleted: the fetch fails, says why, the commit in force stays.
    let failures = d.metric("poolwright_git_fetch_failures_total", &[]);
    git(&repo.work, &["push", "-q", "origin", "--delete", "main"]);
    let s = d.wait_for(
        "the deleted branch reported",
        Duration::from_secs(20),
        |s| {
            s["git"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no branch \"main\""))
        },
    );
    assert_eq!(in_force(&s), "fix the broken file");
    assert_eq!(s["config"]["valid"], true);
    assert!(d.metric("poolwright_git_fetch_failures_total", &[]) > failures);
    d.wait_for_event("a git_fetch_failed event", |e| {
        e["event"] == "git_fetch_failed" && e["message"].as_str().unwrap().contains("no branch")
    });
    let (_, text) = status_text(&d);
    assert!(text.contains("FETCH FAILING"), "{text}");

    // The server gone altogether: the same.
    git(&repo.work, &["push", "-q", "origin", "main"]);
    d.wait_for("the branch back", Duration::from_secs(20), |s| {
        s["git"]["error"].is_null()
    });
    std::fs::rename(&repo.remote, repo.root.join("gone.git")).unwrap();
    let s = d.wait_for(
        "the unreachable remote reported",
        Duration::from_secs(20),
        |s| s["git"]["error"].is_string(),
    );
    assert_eq!(in_force(&s), "fix the broken file");
    assert!(s["git"]["failures"].as_u64().unwrap() >= 1);

    // A restart with the remote still gone applies the commit that was in
    // force, not nothing and not anything newer.
    drop(d);
    let d = start(tmp.path(), &url, &[]);
    let s = d.wait_for(
        "the commit in force loaded again",
        Duration::from_secs(30),
        web_runs("fix the broken file"),
    );
    assert_eq!(in_force(&s), "fix the broken file");
    d.wait_for(
        "the failing fetch reported after the restart",
        Duration::from_secs(20),
        |s| s["git"]["error"].is_string() && in_force(s) == "fix the broken file",
    );
}

/// The first commit, then a new one, fetched and rolled over `how`.
fn first_then_next(d: &Daemon, repo: &Repo, how: &str) {
    d.wait_for(
        &format!("the first commit over {how}"),
        Duration::from_secs(30),
        web_runs("first fleet"),
    );
    repo.commit_image("img-2", "roll web to img-2");
    d.wait_for(
        &format!("the new commit over {how}"),
        Duration::from_secs(60),
        web_runs("roll web to img-2"),
    );
}

fn status_text(d: &Daemon) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(["status", "--url", &d.url])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

#[test]
fn over_git_protocol_a_dead_or_a_stalled_server_keeps_the_commit_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let server = git_servers::git_daemon(tmp.path());
    let url = format!("git://127.0.0.1:{}/remote.git", server.port);
    let d = start(tmp.path(), &url, &["--git-fetch-timeout", "3s"]);
    first_then_next(&d, &repo, "git://");
    let port = server.port;
    drop(server);
    let s = d.wait_for("the dead server reported", Duration::from_secs(20), |s| {
        s["git"]["error"].is_string()
    });
    assert!(
        s["git"]["error"].as_str().unwrap().contains(&url),
        "the error names the remote: {s:#}"
    );
    assert_eq!(in_force(&s), "roll web to img-2");
    assert_eq!(s["config"]["valid"], true);

    // A server that takes the connection and never answers: the fetch stops
    // at --git-fetch-timeout, and the next one starts.
    let stalled = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for c in stalled.incoming().take(3) {
            open.push(c);
        }
        std::thread::sleep(Duration::from_secs(5));
    });
    let s = d.wait_for(
        "the stalled server reported",
        Duration::from_secs(30),
        |s| {
            s["git"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("took longer than 3s"))
        },
    );
    assert_eq!(in_force(&s), "roll web to img-2");
    held.join().unwrap();
}

/// The headers a forge signs a body with.
type Signer = fn(&[u8]) -> Vec<(&'static str, String)>;

/// POST a webhook: the fixture with `after` filled in, and its headers.
fn hook(d: &Daemon, host: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, String) {
    let addr = d.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = format!(
        "POST /v1/hooks/git HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

fn fixture(name: &str, after: &str, git_ref: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hooks")
        .join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .replace("AFTER", after)
        .replace("refs/heads/main", git_ref)
        .into_bytes()
}

fn github(body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", "push".into()),
        (
            "X-GitHub-Delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
        ),
        (
            "X-Hub-Signature-256",
            format!(
                "sha256={}",
                poolwright::git::hook::sign(body, secret.as_bytes())
            ),
        ),
    ]
}

/// A daemon on `repo` that fetches only when a webhook signed with
/// [`SECRET`] says so (the interval is an hour).
fn start_on_webhooks(root: &Path, repo: &Repo, extra: &[&str]) -> Daemon {
    let secret_file = root.join("webhook.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let url = repo.file_url();
    let mut args = vec![
        "--git-url",
        &url,
        "--git-path",
        "pools",
        "--git-interval",
        "1h",
        "--webhook-secret-file",
        secret_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Daemon::start(root, &args)
}

#[test]
fn a_signed_push_webhook_fetches_at_once_and_everything_else_is_answered_and_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let secret_file = tmp.path().join("webhook.secret");
    let d = start_on_webhooks(tmp.path(), &repo, &[]);
    d.wait_for(
        "the first fetch",
        Duration::from_secs(30),
        web_runs("first fleet"),
    );
    let fetches = |d: &Daemon| d.metric("poolwright_git_fetches_total", &[]);
    assert_eq!(fetches(&d), 1.0);

    // GitHub, Gitea, GitLab: each push fetches at once; the forge's Host
    // (through a reverse proxy) is taken on this route.
    let forges: [(&str, Signer); 3] = [
        ("github-push.json", |b| github(b, SECRET)),
        ("gitea-push.json", |b| {
            vec![
                ("X-Gitea-Event", "push".into()),
                (
                    "X-Gitea-Signature",
                    poolwright::git::hook::sign(b, SECRET.as_bytes()),
                ),
            ]
        }),
        ("gitlab-push.json", |_| {
            vec![
                ("X-Gitlab-Event", "Push Hook".into()),
                ("X-Gitlab-Token", SECRET.into()),
            ]
        }),
    ];
    let mut latencies = Vec::new();
    for (i, (file, headers)) in forges.iter().enumerate() {
        let image = ["img-2", "img-3", "img-4"][i];
        let after = repo.commit_image(image, &format!("roll web to {image}"));
        let body = fixture(file, &after, "refs/heads/main");
        let sent = Instant::now();
        let (code, text) = hook(&d, "pools-hook.example.com", &headers(&body), &body);
        assert_eq!(code, 202, "{file}: {text}");
        let subject = format!("roll web to {image}");
        d.wait_for("the pushed commit in force", Duration::from_secs(10), |s| {
            s["config"]["revision"]["subject"] == subject.as_str()
        });
        latencies.push(sent.elapsed());
    }
    println!("push webhook -> commit loaded: {latencies:?}");
    assert_eq!(fetches(&d), 4.0, "one fetch per push");

    // Refusals: each answered, none fetches.
    let after = repo.commit_image("img-5", "roll web to img-5");
    let body = fixture("github-push.json", &after, "refs/heads/main");
    let (code, _) = hook(
        &d,
        "127.0.0.1",
        &github(&body, "not-the-secret-not-the-secret-xx"),
        &body,
    );
    assert_eq!(code, 401, "a wrong secret");
    let unsigned = [("X-GitHub-Event", "push".to_string())];
    let (code, text) = hook(&d, "127.0.0.1", &unsigned, &body);
    assert_eq!(code, 401, "no signature: {text}");
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let (code, _) = hook(&d, "127.0.0.1", &github(&body, SECRET), &tampered);
    assert_eq!(code, 401, "a body changed after signing");
    let other = fixture("github-push.json", &after, "refs/heads/feature");
    let (code, text) = hook(&d, "127.0.0.1", &github(&other, SECRET), &other);
    assert_eq!(code, 202);
    assert!(text.contains("ignored"), "{text}");
    let ping = br#"{"zen":"Design for failure.","hook_id":1}"#;
    let mut ping_headers = github(ping, SECRET);
    ping_headers[0].1 = "ping".into();
    let (code, text) = hook(&d, "127.0.0.1", &ping_headers, ping);
    assert_eq!(code, 200, "{text}");
    let huge = vec![b' '; 2 * 1024 * 1024];
    let (code, _) = hook(&d, "127.0.0.1", &github(&huge, SECRET), &huge);
    assert_eq!(code, 413, "an oversized body");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fetches(&d), 4.0, "no refusal fetched");
    assert_eq!(
        d.metric("poolwright_git_webhooks_total", &[("result", "refused")]),
        3.0
    );

    // A flood of 1,000 signed pushes of the same commit: one fetch.
    let headers = github(&body, SECRET);
    for _ in 0..1000 {
        let (code, _) = hook(&d, "127.0.0.1", &headers, &body);
        assert_eq!(code, 202);
    }
    d.wait_for(
        "the flooded commit in force",
        Duration::from_secs(10),
        |s| s["config"]["revision"]["subject"] == "roll web to img-5",
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(fetches(&d), 5.0, "a flood of one push makes one fetch");

    // The secret is read again on every webhook: a rotated one is in force at once.
    let rotated = "rotated-secret-0123456789abcdef-0123456789";
    std::fs::write(&secret_file, rotated).unwrap();
    let (code, _) = hook(&d, "127.0.0.1", &github(&body, SECRET), &body);
    assert_eq!(code, 401, "the old secret after rotation");
    let (code, _) = hook(&d, "127.0.0.1", &github(&body, rotated), &body);
    assert_eq!(code, 202, "the new secret");
}

#[test]
fn bad_remote_settings_are_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(tmp.path())
            .args(["run", "--state-dir", "state", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap()
    };
    let short = tmp.path().join("short.secret");
    std::fs::write(&short, "abc").unwrap();
    for (args, says) in [
        (
            vec!["--git-url", "https://bot:hunter2@git.example.com/pools.git"],
            "--git-token-file",
        ),
        (
            vec!["--git-url", "ftp://git.example.com/pools.git"],
            "transports",
        ),
        (
            vec!["--git-url", "file:///nonexistent", "--git-branch", "a..b"],
            "not a branch name",
        ),
        (
            vec!["--git-url", "file:///nonexistent", "--git-path", "../etc"],
            "inside the repository",
        ),
        (
            vec![
                "--git-url",
                "file:///nonexistent",
                "--webhook-secret-file",
                short.to_str().unwrap(),
            ],
            "at least 32",
        ),
        (
            vec!["--git-url", "file:///x", "--git-committed-only"],
            "cannot be used with",
        ),
        (
            vec!["--git-url", "file:///x", "--git-verify", "gpg"],
            "--git-keyring",
        ),
        (
            vec!["--git-url", "file:///x", "--preview-refs", "pr/*"],
            "not a ref pattern",
        ),
        (
            vec![
                "--git-url",
                "file:///x",
                "--git-verify",
                "gpg",
                "--git-keyring",
                short.to_str().unwrap(),
            ],
            "not an OpenPGP keyring",
        ),
        (
            vec![
                "--git-url",
                "file:///x",
                "--git-verify",
                "ssh",
                "--git-allowed-signers",
                short.to_str().unwrap(),
            ],
            "no public key",
        ),
        (
            vec![
                "--git-url",
                "http://git.example.com/pools.git",
                "--git-token-file",
                short.to_str().unwrap(),
            ],
            "only sent over https://",
        ),
        (
            vec!["--git-url", "https://ghp_token@github.com/ops/pools.git"],
            "user name or a password",
        ),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Signed {
    ByAllowed,
    Unsigned,
    ByUnknown,
    Tampered,
}

/// The trusted key and an unknown one, in either format git signs with.
enum Keys {
    Ssh {
        allowed: PathBuf,
        unknown: PathBuf,
    },
    Gpg {
        gnupg: git_servers::Gnupg,
        allowed: String,
        unknown: String,
        keyring: PathBuf,
    },
}

impl Keys {
    /// The keys, and the daemon's flags that trust the allowed one.
    fn new(format: &str, dir: &Path) -> (Keys, Vec<String>) {
        let trust = |flag: &str, file: &Path| {
            ["--git-verify", format, flag, file.to_str().unwrap()]
                .map(String::from)
                .to_vec()
        };
        if format == "ssh" {
            let allowed = dir.join("allowed_key");
            let unknown = dir.join("unknown_key");
            let allowed_pub = git_servers::ssh_keygen(&allowed, "release@example.com");
            git_servers::ssh_keygen(&unknown, "intruder@example.com");
            let signers = dir.join("allowed_signers");
            std::fs::write(
                &signers,
                format!("# who may roll production\nrelease@example.com namespaces=\"git\" {allowed_pub}\n"),
            )
            .unwrap();
            let flags = trust("--git-allowed-signers", &signers);
            (Keys::Ssh { allowed, unknown }, flags)
        } else {
            let gnupg = git_servers::Gnupg::new(dir);
            let allowed = gnupg.key("release@example.com");
            let unknown = gnupg.key("intruder@example.com");
            // As `gpg --export` writes a key others have certified: their
            // certifications are in it, and are not what is trusted.
            gnupg.certify(&allowed, &unknown);
            let keyring = dir.join("keyring.asc");
            std::fs::write(&keyring, gnupg.export(&[&allowed])).unwrap();
            let flags = trust("--git-keyring", &keyring);
            (
                Keys::Gpg {
                    gnupg,
                    allowed,
                    unknown,
                    keyring,
                },
                flags,
            )
        }
    }

    /// Commit in `work`, signed by the allowed key or the unknown one.
    fn commit(&self, work: &Path, by_allowed: bool, subject: &str) {
        match self {
            Keys::Ssh { allowed, unknown } => {
                let key = if by_allowed { allowed } else { unknown };
                git(
                    work,
                    &[
                        "-c",
                        "gpg.format=ssh",
                        "-c",
                        &format!("user.signingkey={}", key.display()),
                        "commit",
                        "-q",
                        "-S",
                        "-m",
                        subject,
                    ],
                )
            }
            Keys::Gpg {
                gnupg,
                allowed,
                unknown,
                ..
            } => {
                let key = if by_allowed { allowed } else { unknown };
                git_servers::git_with(
                    work,
                    &[
                        "-c",
                        "gpg.format=openpgp",
                        "-c",
                        &format!("user.signingkey={key}"),
                        "commit",
                        "-q",
                        "-S",
                        "-m",
                        subject,
                    ],
                    &[("GNUPGHOME", gnupg.home.as_path())],
                )
            }
        }
    }
}

impl Repo {
    /// Commit `web` at `image`, signed as `how`, and push it; its id.
    fn commit_signed(&self, image: &str, how: Signed, keys: &Keys) -> String {
        std::fs::write(self.work.join("pools/web.yaml"), pool(image)).unwrap();
        git(&self.work, &["add", "."]);
        let subject = format!("roll web to {image}");
        match how {
            Signed::ByAllowed => keys.commit(&self.work, true, &subject),
            Signed::ByUnknown => keys.commit(&self.work, false, &subject),
            Signed::Unsigned => git(&self.work, &["commit", "-q", "-m", &subject]),
            Signed::Tampered => {
                // Signed by the allowed key, then its message changed: the
                // signature no longer covers the commit.
                keys.commit(&self.work, true, &subject);
                let raw = Command::new("git")
                    .current_dir(&self.work)
                    .args(["cat-file", "commit", "HEAD"])
                    .output()
                    .unwrap()
                    .stdout;
                let forged = String::from_utf8(raw)
                    .unwrap()
                    .replace(&subject, &format!("{subject} (forged)"));
                let path = self.root.join("forged-commit");
                std::fs::write(&path, forged).unwrap();
                let out = Command::new("git")
                    .current_dir(&self.work)
                    .args(["hash-object", "-t", "commit", "-w"])
                    .arg(&path)
                    .output()
                    .unwrap();
                let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
                git(&self.work, &["reset", "-q", "--hard", &id]);
            }
        }
        git(&self.work, &["push", "-q", "-f", "origin", "main"]);
        self.head()
    }
}

#[test]
fn only_tips_signed_by_an_allowed_ssh_key_are_applied() {
    signed_tips_only("ssh");
}

#[test]
fn only_tips_signed_by_a_gpg_key_of_the_keyring_are_applied() {
    signed_tips_only("gpg");
}

/// 21 commits signed by the allowed key, unsigned, signed by an unknown key
/// or tampered with: exactly those signed by the allowed key are applied.
fn signed_tips_only(format: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (keys, verify) = Keys::new(format, tmp.path());
    let verify: Vec<&str> = verify.iter().map(String::as_str).collect();
    let repo = Repo::new(tmp.path());
    let url = repo.file_url();
    // The repository's first commit is unsigned, and in force from a run
    // without verification: once verification is on, it is not applied.
    let unsigned = repo.head();
    let d = start(tmp.path(), &url, &[]);
    d.wait_for(
        "the unsigned commit, unverified",
        Duration::from_secs(30),
        |s| s["git"]["inForce"]["commit"] == unsigned.as_str(),
    );
    drop(d);
    let d = start(tmp.path(), &url, &verify);
    let s = d.wait_for(
        "the unsigned commit in force refused",
        Duration::from_secs(30),
        |s| s["git"]["refused"]["commit"] == unsigned.as_str(),
    );
    assert_eq!(s["config"]["valid"], false, "{s:#}");
    assert!(
        s["config"]["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("no commit accepted yet")),
        "{s:#}"
    );
    // A signed tip above it is applied (only the tip is verified: it vouches
    // for its history).
    let first = repo.commit_signed("img-0", Signed::ByAllowed, &keys);
    d.wait_for(
        "the signed first commit applied",
        Duration::from_secs(30),
        |s| s["git"]["inForce"]["commit"] == first.as_str(),
    );

    let kinds = [
        Signed::ByAllowed,
        Signed::Unsigned,
        Signed::ByUnknown,
        Signed::Tampered,
        Signed::ByAllowed,
    ];
    let mut applied = vec![first];
    let mut refused = 0;
    for i in 1..=20 {
        let how = kinds[i % kinds.len()];
        let tip = repo.commit_signed(&format!("img-{i}"), how, &keys);
        let s = d.wait_for(
            &format!("commit {i} ({how:?}) fetched"),
            Duration::from_secs(20),
            |s| {
                s["git"]["fetched"]["commit"] == tip.as_str()
                    && (s["git"]["inForce"]["commit"] == tip.as_str()
                        || s["git"]["refused"]["commit"] == tip.as_str())
            },
        );
        if how == Signed::ByAllowed {
            assert_eq!(
                s["git"]["inForce"]["commit"],
                tip.as_str(),
                "{how:?}: {s:#}"
            );
            applied.push(tip);
        } else {
            refused += 1;
            assert_eq!(
                s["git"]["inForce"]["commit"],
                applied.last().unwrap().as_str()
            );
            assert_eq!(
                s["git"]["refused"]["commit"],
                tip.as_str(),
                "{how:?}: {s:#}"
            );
            let reason = s["git"]["refused"]["reason"].as_str().unwrap();
            let says = match how {
                Signed::Unsigned => "not signed",
                Signed::ByUnknown => "not among the trusted keys",
                Signed::Tampered => "does not match the commit",
                Signed::ByAllowed => unreachable!(),
            };
            assert!(reason.contains(says), "{how:?}: {reason}");
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let events = d.events();
    let applied_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "commit_applied")
        .collect();
    assert_eq!(
        applied_events.len(),
        applied.len() + 1,
        "exactly the signed-by-allowed commits (and the unsigned one the run without verification applied)"
    );
    let refused_events = events
        .iter()
        .filter(|e| e["event"] == "commit_refused")
        .count();
    assert_eq!(
        refused_events,
        refused + 1,
        "and the commit in force at the start"
    );
    let by_reason = |r: &str| d.metric("poolwright_git_commits_refused_total", &[("reason", r)]);
    assert_eq!(
        by_reason("unsigned"),
        5.0,
        "4 tips and the commit in force at the start"
    );
    assert_eq!(by_reason("unknown-key"), 4.0);
    assert_eq!(by_reason("bad-signature"), 4.0);
    if let Keys::Gpg {
        gnupg,
        allowed,
        keyring,
        ..
    } = &keys
    {
        // A signature over a SHA-1 digest is refused: too weak.
        let sha1 = tmp.path().join("gpg-sha1");
        std::fs::write(&sha1, "#!/bin/sh\nexec gpg --digest-algo SHA1 \"$@\"\n").unwrap();
        std::fs::set_permissions(&sha1, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(repo.work.join("pools/web.yaml"), pool("img-sha1")).unwrap();
        git_servers::git_with(
            &repo.work,
            &[
                "-c",
                "gpg.format=openpgp",
                "-c",
                &format!("gpg.program={}", sha1.display()),
                "-c",
                &format!("user.signingkey={allowed}"),
                "commit",
                "-q",
                "-S",
                "-am",
                "roll web to img-sha1",
            ],
            &[("GNUPGHOME", gnupg.home.as_path())],
        );
        git(&repo.work, &["push", "-q", "-f", "origin", "main"]);
        let tip = repo.head();
        let s = d.wait_for("a SHA-1 signature refused", Duration::from_secs(20), |s| {
            s["git"]["refused"]["commit"] == tip.as_str()
        });
        let reason = s["git"]["refused"]["reason"].as_str().unwrap();
        assert!(reason.contains("too weak"), "{reason}");
        // The key's revocation exported after it into the keyring (as
        // `gpg --export KEY >> keyring` does): its next signature is refused,
        // without a restart.
        let appended = [gnupg.export(&[allowed]), gnupg.revoked(allowed)].concat();
        std::fs::write(keyring, appended).unwrap();
        let tip = repo.commit_signed("img-revoked", Signed::ByAllowed, &keys);
        let s = d.wait_for(
            "a tip signed by the revoked key refused",
            Duration::from_secs(20),
            |s| s["git"]["refused"]["commit"] == tip.as_str(),
        );
        let reason = s["git"]["refused"]["reason"].as_str().unwrap();
        assert!(reason.contains("revoked"), "{reason}");
        assert_eq!(
            s["git"]["inForce"]["commit"],
            applied.last().unwrap().as_str()
        );
        assert_eq!(by_reason("key-not-valid"), 2.0, "SHA-1, then revoked");
    }
    println!(
        "verification ({format}): {} of 21 commits applied (all signed by the allowed key), {refused} refused, 0 unsigned applied",
        applied.len()
    );
}

#[test]
fn over_ssh_with_a_deploy_key_and_strict_host_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let deploy = tmp.path().join("deploy_key");
    let deploy_pub = git_servers::ssh_keygen(&deploy, "poolwright-deploy");
    let sshd = git_servers::sshd(tmp.path(), &deploy_pub);
    let known = tmp.path().join("known_hosts");
    std::fs::write(&known, format!("{}\n", sshd.known_hosts_line)).unwrap();
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        sshd.user,
        sshd.server.port,
        repo.remote.display()
    );
    let key_arg = deploy.to_str().unwrap().to_string();
    let known_arg = known.to_str().unwrap().to_string();
    let d = start(
        tmp.path(),
        &url,
        &["--git-ssh-key", &key_arg, "--git-known-hosts", &known_arg],
    );
    first_then_next(&d, &repo, "ssh");
    drop(d);

    // A host whose key is not the one known is refused, and nothing changes.
    let other = tmp.path().join("other_host");
    let other_pub = git_servers::ssh_keygen(&other, "another-host");
    let mut words = other_pub.split_whitespace();
    std::fs::write(
        &known,
        format!(
            "[127.0.0.1]:{} {} {}\n",
            sshd.server.port,
            words.next().unwrap(),
            words.next().unwrap()
        ),
    )
    .unwrap();
    repo.commit_image("img-3", "roll web to img-3");
    let d = start(
        tmp.path(),
        &url,
        &["--git-ssh-key", &key_arg, "--git-known-hosts", &known_arg],
    );
    let s = d.wait_for(
        "the unknown host key refused",
        Duration::from_secs(30),
        |s| s["git"]["error"].is_string(),
    );
    assert_eq!(in_force(&s), "roll web to img-2", "{s:#}");
}

#[test]
fn over_https_with_a_token_read_on_every_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let server = git_servers::smart_https(tmp.path(), "t0ken-for-the-bastion");
    let token = tmp.path().join("git.token");
    std::fs::write(&token, "t0ken-for-the-bastion\n").unwrap();
    let url = format!("https://127.0.0.1:{}/git/remote.git", server.port);
    let token_arg = token.to_str().unwrap().to_string();
    let ca = tmp.path().join("lighttpd/ca.pem");
    let ca_arg = ca.to_str().unwrap().to_string();

    // Without the private CA the server is not trusted: nothing is fetched.
    let d = start(tmp.path(), &url, &["--git-token-file", &token_arg]);
    // Wait for the refusal itself: under load the first fetch can fail
    // otherwise first (the server still starting), and that says nothing.
    let s = d.wait_for(
        "the untrusted server refused for its certificate",
        Duration::from_secs(60),
        |s| {
            s["git"]["error"]
                .as_str()
                .is_some_and(|e| e.to_lowercase().contains("certificate"))
        },
    );
    assert!(s["git"]["inForce"].is_null(), "{s:#}");
    drop(d);

    let d = start(
        tmp.path(),
        &url,
        &["--git-token-file", &token_arg, "--git-ca-file", &ca_arg],
    );
    first_then_next(&d, &repo, "https");

    // A revoked token: the fetch fails with the server's answer; the commit in force stays.
    std::fs::write(&token, "revoked").unwrap();
    repo.commit_image("img-3", "roll web to img-3");
    // Under load a fetch may first fail otherwise (a slow answer): wait for
    // the refusal itself.
    let s = d.wait_for("the refused token reported", Duration::from_secs(60), |s| {
        s["git"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not accepted") || e.contains("401"))
    });
    let error = s["git"]["error"].as_str().unwrap();
    assert!(
        !error.contains("revoked"),
        "the token is never shown: {error}"
    );
    assert!(
        error.contains("not accepted") || error.contains("401"),
        "{error}"
    );
    assert_eq!(in_force(&s), "roll web to img-2", "{s:#}");
    // The token file is read again on the next fetch.
    std::fs::write(&token, "t0ken-for-the-bastion").unwrap();
    d.wait_for(
        "the commit after the token came back",
        Duration::from_secs(60),
        web_runs("roll web to img-3"),
    );
}

/// Every regular file under `dir` with its bytes, to tell that nothing was
/// written (lock files, empty and only ever locked, and sockets aside).
fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() && path.extension().is_none_or(|x| x != "lock") {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_branch_is_planned_before_it_merges_and_nothing_acts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(&repo.work)
            .args(args)
            .args(["--state-dir", "../state"])
            .output()
            .unwrap()
    };
    let applied = cli(&["apply", "pools", "--auto-approve"]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    // A pull-request branch that adds a pool and rolls another.
    git(&repo.work, &["checkout", "-q", "-b", "pr/batch"]);
    std::fs::write(repo.work.join("pools/web.yaml"), pool("img-2")).unwrap();
    std::fs::write(
        repo.work.join("pools/batch.yaml"),
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: batch}\nspec:\n  providerRef: sim\n  size: 3\n  template: {image: img-1}\n",
    )
    .unwrap();
    git(&repo.work, &["add", "."]);
    git(
        &repo.work,
        &["commit", "-q", "-m", "add batch | roll web to <img-2>"],
    );
    let branch_tip = repo.head();
    git(&repo.work, &["checkout", "-q", "main"]);

    let before = tree_bytes(&tmp.path().join("state"));
    let out = cli(&["plan", "pools", "--git-ref", "pr/batch", "-o", "markdown"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let markdown = String::from_utf8(out.stdout).unwrap();
    let after = tree_bytes(&tmp.path().join("state"));
    let changed: Vec<_> = after
        .iter()
        .filter(|f| !before.contains(f))
        .map(|(p, _)| p)
        .collect();
    assert!(
        changed.is_empty() && after.len() == before.len(),
        "planning a branch wrote to the state directory: {changed:?}"
    );
    // The work tree (main) plans no change: the branch's plan came from the branch.
    let here = cli(&["plan", "pools"]);
    assert!(String::from_utf8_lossy(&here.stdout).contains("No changes"));

    let stable = markdown
        .replace(&branch_tip[..7], "COMMIT")
        .lines()
        .map(|l| {
            if l.starts_with("Planned against the live pools at ") {
                "Planned against the live pools at TIME."
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(stable);

    // The same as text and JSON; a ref that does not exist is an error.
    let text = cli(&["plan", "pools", "--git-ref", "pr/batch"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("nodepool.batch will be created"), "{text}");
    assert!(text.contains("nodepool.web will roll 2 node(s)"), "{text}");
    // A branch that changes a provider is not planned with it: its token or
    // kubeconfig would go wherever the branch says.
    git(&repo.work, &["checkout", "-q", "-b", "pr/provider"]);
    std::fs::write(
        repo.work.join("pools/providers.yaml"),
        PROVIDER.replace("speed: 50", "speed: 51"),
    )
    .unwrap();
    git(&repo.work, &["commit", "-q", "-am", "a faster simulator"]);
    git(&repo.work, &["checkout", "-q", "main"]);
    let changed = cli(&["plan", "pools", "--git-ref", "pr/provider"]);
    assert!(!changed.status.success());
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert!(stderr.contains("changes provider sim"), "{stderr}");

    // The same provider document moved to another file: its relative paths
    // would resolve elsewhere, so it counts as changed.
    git(&repo.work, &["checkout", "-q", "-b", "pr/moved"]);
    std::fs::create_dir_all(repo.work.join("pools/elsewhere")).unwrap();
    git(
        &repo.work,
        &[
            "mv",
            "pools/providers.yaml",
            "pools/elsewhere/providers.yaml",
        ],
    );
    git(&repo.work, &["commit", "-q", "-m", "the provider moved"]);
    git(&repo.work, &["checkout", "-q", "main"]);
    let moved = cli(&["plan", "pools", "--git-ref", "pr/moved"]);
    assert!(!moved.status.success());
    let stderr = String::from_utf8_lossy(&moved.stderr);
    assert!(stderr.contains("changes provider sim"), "{stderr}");

    // The same from the remote, with no work tree: fetched into a
    // temporary clone, planned with the providers of main's tip.
    git(
        &repo.work,
        &[
            "push",
            "-q",
            "origin",
            "pr/batch",
            "pr/provider",
            "pr/moved",
        ],
    );
    let url = repo.file_url();
    let remote = |git_ref: &str, output: &str| {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(tmp.path())
            .args(["plan", "--git-url", &url, "--git-path", "pools"])
            .args(["--git-ref", git_ref, "-o", output])
            .args(["--state-dir", "state"])
            .output()
            .unwrap()
    };
    let before = tree_bytes(&tmp.path().join("state"));
    let fetched = remote("pr/batch", "markdown");
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    let fetched = String::from_utf8(fetched.stdout).unwrap();
    assert!(
        fetched.contains(&format!(
            "Desired state: {url} refs/heads/pr/batch at pr/batch@{}",
            &branch_tip[..7]
        )),
        "{fetched}"
    );
    // Where it came from, and when, aside: the same plan.
    let same = |text: &str| {
        text.lines()
            .filter(|l| {
                !l.starts_with("Planned against the live pools at ")
                    && !l.starts_with("Desired state: ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        same(&fetched),
        same(&markdown),
        "the remote branch plans as the local one"
    );
    assert_eq!(tree_bytes(&tmp.path().join("state")), before);
    let full = remote("refs/heads/pr/batch", "text");
    let full = String::from_utf8_lossy(&full.stdout);
    assert!(full.contains("nodepool.batch will be created"), "{full}");
    for (git_ref, says) in [
        ("pr/provider", "changes provider sim"),
        ("pr/moved", "changes provider sim"),
        ("pr/nosuch", "has no refs/heads/pr/nosuch"),
        ("pr/*", "not a branch or a full ref name"),
    ] {
        let out = remote(git_ref, "text");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{git_ref}");
        assert!(stderr.contains(says), "{git_ref}: {stderr}");
    }

    let missing = cli(&["plan", "pools", "--git-ref", "pr/nosuch"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no such branch, tag or commit"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// The state a preview must never touch: the inventory, the rollout
/// journals and the simulator's pools (events, logs and the clone aside).
fn live_state(state: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    tree_bytes(state)
        .into_iter()
        .filter(|(p, _)| {
            let rel = p.strip_prefix(state).unwrap().to_string_lossy().to_string();
            rel == "inventory.json" || rel.starts_with("journal") || rel.starts_with("sim")
        })
        .collect()
}

#[test]
fn the_daemon_previews_pull_request_branches_on_push_and_never_acts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let d = start_on_webhooks(
        tmp.path(),
        &repo,
        &[
            "--preview-refs",
            "refs/heads/pr/*",
            // A pull request too large to fetch must not hold up the branch.
            "--git-max-objects",
            "60",
        ],
    );
    let main_tip = repo.head();
    d.wait_for(
        "the first fetch",
        Duration::from_secs(30),
        web_runs("first fleet"),
    );
    let (code, body) = d.get("/v1/previews");
    assert_eq!(code, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["patterns"][0], "refs/heads/pr/*");
    assert_eq!(listed["previews"].as_object().map(|m| m.len()), Some(0));
    let state = tmp.path().join("state");
    let before = live_state(&state);
    assert!(
        before.iter().any(|(p, _)| p.ends_with("inventory.json")),
        "{before:?}"
    );

    // A merged branch (its tip in main's history) is not previewed.
    git(
        &repo.work,
        &["push", "-q", "origin", "main:refs/heads/pr/merged"],
    );
    // A pull-request branch that adds a pool and rolls another, announced
    // by a push webhook.
    git(&repo.work, &["checkout", "-q", "-b", "pr/7"]);
    std::fs::write(repo.work.join("pools/web.yaml"), pool("img-2")).unwrap();
    std::fs::write(
        repo.work.join("pools/batch.yaml"),
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: batch}\nspec:\n  providerRef: sim\n  size: 3\n  template: {image: img-1}\n",
    )
    .unwrap();
    git(&repo.work, &["add", "."]);
    git(&repo.work, &["commit", "-q", "-m", "add batch, roll web"]);
    git(&repo.work, &["push", "-q", "origin", "pr/7"]);
    let pr_tip = repo.head();
    let body = fixture("github-push.json", &pr_tip, "refs/heads/pr/7");
    let pushed = Instant::now();
    let (code, answer) = hook(&d, "127.0.0.1", &github(&body, SECRET), &body);
    assert_eq!(code, 202, "{answer}");
    assert!(answer.contains("to preview it"), "{answer}");
    let previewed = |git_ref: &str, commit: &str| {
        let (_, body) = d.get("/v1/previews");
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        v["previews"][git_ref]["commit"]["commit"] == commit
    };
    d.wait_for("the preview of pr/7", Duration::from_secs(20), |_| {
        previewed("refs/heads/pr/7", &pr_tip)
    });
    println!(
        "push -> webhook -> fetch -> preview planned: {:.2}s",
        pushed.elapsed().as_secs_f64()
    );
    let (_, body) = d.get("/v1/previews");
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert!(
        listed["previews"].get("refs/heads/pr/merged").is_none(),
        "a merged branch is not previewed: {listed:#}"
    );
    let (code, body) = d.get("/v1/previews/refs/heads/pr/7");
    assert_eq!(code, 200, "{body}");
    let p: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["ref"], "refs/heads/pr/7");
    assert_eq!(
        p["commit"]["commit"],
        pr_tip.as_str(),
        "the commit it planned"
    );
    assert_eq!(
        p["comparedWith"]["commit"],
        main_tip.as_str(),
        "the commit in force it was compared with"
    );
    assert_eq!(p["errors"].as_array().map(Vec::len), Some(0), "{p:#}");
    let changes: Vec<(String, String)> = p["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["pool"].as_str().unwrap().to_string(),
                c["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("batch".to_string(), "create".to_string()),
            ("web".to_string(), "roll-create-first".to_string())
        ],
        "{p:#}"
    );
    assert_eq!(p["summary"]["add"], 1);
    assert_eq!(p["summary"]["roll"], 1);
    let text = p["text"].as_str().unwrap();
    assert!(text.contains("nodepool.batch will be created"), "{text}");
    assert!(text.contains("nodepool.web will roll 2 node(s)"), "{text}");
    assert_eq!(p["plan"]["source"]["revision"]["commit"], pr_tip.as_str());
    let (code, markdown) = d.get("/v1/previews/refs/heads/pr/7?format=markdown");
    assert_eq!(code, 200);
    assert!(
        markdown.contains(&format!("with main\\@{} in force", &main_tip[..7])),
        "{markdown}"
    );
    let (code, _) = d.get("/v1/previews/refs/heads/pr/nosuch");
    assert_eq!(code, 404);

    // A branch that changes a provider is not planned: it would be planned
    // with the branch's own settings for it.
    git(&repo.work, &["checkout", "-q", "-b", "pr/8", "main"]);
    std::fs::write(
        repo.work.join("pools/providers.yaml"),
        PROVIDER.replace("speed: 50", "speed: 51"),
    )
    .unwrap();
    git(&repo.work, &["commit", "-q", "-am", "a faster simulator"]);
    git(&repo.work, &["push", "-q", "origin", "pr/8"]);
    let provider_tip = repo.head();
    let body = fixture("github-push.json", &provider_tip, "refs/heads/pr/8");
    assert_eq!(hook(&d, "127.0.0.1", &github(&body, SECRET), &body).0, 202);
    d.wait_for("the preview of pr/8", Duration::from_secs(20), |_| {
        previewed("refs/heads/pr/8", &provider_tip)
    });
    let (_, body) = d.get("/v1/previews/refs/heads/pr/8");
    let p8: Value = serde_json::from_str(&body).unwrap();
    assert!(
        p8["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("changes provider sim")),
        "{p8:#}"
    );
    assert!(p8.get("plan").is_none(), "{p8:#}");

    // Nothing acted: the pools, the inventory and the journals are as they were.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        live_state(&state),
        before,
        "a preview wrote to the live state"
    );
    let s = d.status();
    assert!(web_runs("first fleet")(&s), "{s:#}");
    assert!(
        s["pools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "batch"),
        "{s:#}"
    );

    // The watched branch rewritten: refused, and its plan still shown.
    git(&repo.work, &["checkout", "-q", "main"]);
    git(&repo.work, &["reset", "-q", "--hard", "HEAD"]);
    git(
        &repo.work,
        &["commit", "-q", "--amend", "-m", "first fleet, rewritten"],
    );
    std::fs::write(repo.work.join("pools/web.yaml"), pool("img-9")).unwrap();
    git(&repo.work, &["commit", "-q", "-am", "roll web to img-9"]);
    git(&repo.work, &["push", "-q", "-f", "origin", "main"]);
    let rewritten = repo.head();
    let body = fixture("github-push.json", &rewritten, "refs/heads/main");
    assert_eq!(hook(&d, "127.0.0.1", &github(&body, SECRET), &body).0, 202);
    d.wait_for(
        "the rewritten tip previewed",
        Duration::from_secs(20),
        |_| previewed("refs/heads/main", &rewritten),
    );
    let (_, body) = d.get("/v1/previews/refs/heads/main");
    let refused: Value = serde_json::from_str(&body).unwrap();
    assert!(
        refused["refused"]
            .as_str()
            .is_some_and(|r| r.contains("--git-allow-rewrite")),
        "{refused:#}"
    );
    assert_eq!(refused["changes"][0]["pool"], "web", "{refused:#}");
    assert_eq!(
        refused["changes"][0]["action"], "roll-create-first",
        "{refused:#}"
    );
    assert_eq!(in_force(&d.status()), "first fleet");

    // A deleted branch's preview goes at the next fetch.
    git(&repo.work, &["push", "-q", "origin", "--delete", "pr/7"]);
    let body = fixture("github-push.json", &"0".repeat(40), "refs/heads/pr/7");
    assert_eq!(hook(&d, "127.0.0.1", &github(&body, SECRET), &body).0, 202);
    d.wait_for(
        "the deleted branch's preview gone",
        Duration::from_secs(20),
        |_| {
            let (_, body) = d.get("/v1/previews");
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            v["previews"].get("refs/heads/pr/7").is_none()
                && v["previews"].get("refs/heads/pr/8").is_some()
        },
    );
    assert_eq!(
        live_state(&state),
        before,
        "a preview wrote to the live state"
    );

    // A pull request past the fetch's bounds: its fetch fails and says so,
    // the previews stay, and the branch is still fetched and applied.
    git(&repo.work, &["checkout", "-q", "-b", "pr/big", "main"]);
    for i in 0..100 {
        std::fs::write(repo.work.join(format!("blob-{i}.txt")), format!("{i}\n")).unwrap();
    }
    git(&repo.work, &["add", "."]);
    git(&repo.work, &["commit", "-q", "-m", "a hundred files"]);
    git(&repo.work, &["push", "-q", "origin", "pr/big"]);
    let big = repo.head();
    git(&repo.work, &["checkout", "-q", "main"]);
    let body = fixture("github-push.json", &big, "refs/heads/pr/big");
    assert_eq!(hook(&d, "127.0.0.1", &github(&body, SECRET), &body).0, 202);
    d.wait_for(
        "the large ref's fetch failing",
        Duration::from_secs(20),
        |_| {
            let (_, body) = d.get("/v1/previews");
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("--git-max-objects"))
                && v["previews"].get("refs/heads/pr/8").is_some()
        },
    );
    git(&repo.work, &["reset", "-q", "--hard", &main_tip]);
    let next = repo.commit_image("img-3", "roll web to img-3");
    let body = fixture("github-push.json", &next, "refs/heads/main");
    assert_eq!(hook(&d, "127.0.0.1", &github(&body, SECRET), &body).0, 202);
    d.wait_for(
        "the branch applied past the large ref",
        Duration::from_secs(30),
        |s| s["git"]["inForce"]["commit"] == next.as_str(),
    );
}

/// The daemon's peak resident memory, from its /proc status.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// The measured cases: a 1 GiB blob of zeros is about 1 MiB on the wire,
/// and took the daemon to about 1.06 GiB of memory during the fetch
/// (`--git-max-bytes` bounds the wire, not what it inflates to); and a fetch
/// refused for a bound was put in force by its retry (what it brought was
/// already in the clone). A fetch runs in a child whose memory is capped,
/// every object is bounded by `--git-max-object-size`, and nothing a refused
/// fetch brought stays.
#[test]
fn a_compression_bomb_is_refused_in_bounded_memory_and_no_retry_puts_it_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path());
    let d = start(
        tmp.path(),
        &repo.file_url(),
        &["--git-max-object-size", "1048576"],
    );
    d.wait_for(
        "the first commit fetched and applied",
        Duration::from_secs(30),
        web_runs("first fleet"),
    );
    let settled = peak_rss_kib(d.child.id());

    // Over the object bound but well within memory: refused on what was
    // fetched, and refused again by every retry.
    std::fs::write(repo.work.join("data.bin"), vec![0u8; 2 * 1024 * 1024]).unwrap();
    let large = repo.commit_image("img-2", "a 2 MiB object");
    let refused = |s: &Value| {
        s["git"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("--git-max-object-size"))
    };
    let s = d.wait_for("the large object refused", Duration::from_secs(30), refused);
    assert!(
        s["git"]["error"]
            .as_str()
            .unwrap()
            .contains("2097152 bytes"),
        "{s:#}"
    );
    d.wait_for("two retries", Duration::from_secs(30), |s| {
        s["git"]["failures"].as_u64() >= Some(3)
    });
    let s = d.wait_for("still refused", Duration::from_secs(10), refused);
    assert_eq!(in_force(&s), "first fleet", "{s:#}");
    assert!(
        !d.events().iter().any(|e| e["revision"]
            .as_str()
            .is_some_and(|r| r.ends_with(&large[..7]))),
        "something acted on the refused commit"
    );

    // The bomb: 1 GiB of zeros, about 1 MiB on the wire.
    git(&repo.work, &["reset", "-q", "--hard", "HEAD~1"]);
    let out = Command::new("sh")
        .current_dir(&repo.work)
        .args([
            "-c",
            "head -c 1073741824 /dev/zero | git hash-object -w --stdin",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let blob = String::from_utf8(out.stdout).unwrap().trim().to_string();
    git(
        &repo.work,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("100644,{blob},big.bin"),
        ],
    );
    std::fs::write(repo.work.join("pools/web.yaml"), pool("img-3")).unwrap();
    git(&repo.work, &["add", "pools/web.yaml"]);
    git(&repo.work, &["commit", "-q", "-m", "a 1 GiB bomb"]);
    git(&repo.work, &["push", "-q", "-f", "origin", "main"]);
    let bomb = repo.head();
    let s = d.wait_for("the bomb refused", Duration::from_secs(120), |s| {
        s["git"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("--git-max-memory"))
    });
    assert_eq!(in_force(&s), "first fleet", "{s:#}");
    let peak = peak_rss_kib(d.child.id());
    assert!(
        peak < settled + 100 * 1024,
        "the daemon grew from {settled} KiB to {peak} KiB while the bomb was fetched"
    );
    assert!(
        !d.events().iter().any(|e| e["revision"]
            .as_str()
            .is_some_and(|r| r.ends_with(&bomb[..7]))),
        "something acted on the bomb"
    );
}
