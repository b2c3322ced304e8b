//! A newcomer's second hour (the measured cases):
//! - `rollout status POOL --wait` right after an edit (the `--help`
//!   example, "in CI, after a merge") exited 0 in 0.04 s with `no rollout in
//!   progress`, and the daemon started the roll a second later. It now waits
//!   for the daemon to have the edit, then for every node to run it.
//! - On the installed bastion, `poolwright status` said no daemon runs
//!   unless `--state-dir /var/lib/poolwright` was typed. It now finds the
//!   packaged service's state directory.
//! - The packaged service exited at once with nothing at its config path,
//!   and `Restart=on-failure` looped it every 5 s forever. It now runs,
//!   says why nothing loads, and loads the directory once it appears.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::daemon::Daemon;

fn write(root: &Path, image: &str) {
    let text = format!(
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec: {{type: sim, seed: 3, speed: 50, failures: {{badImages: [img-bad]}}}}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {image}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{minReady: 0s, startupTimeout: 3s}}}}\n"
    );
    let tmp = root.join("config/.pools.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, root.join("config/pools.yaml")).unwrap();
}

/// Each live node's image at the simulator.
fn images(root: &Path) -> Vec<String> {
    crate::support::sim_images::read(&root.join("state/sim/sim.json"))
        .remove("web")
        .map(|(_, nodes)| nodes)
        .unwrap_or_default()
}

/// `rollout status web --wait`, started now; its exit code, output, and
/// how long it took.
fn wait(root: &Path, extra: &[&str]) -> (Option<i32>, String, String, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["rollout", "status", "web", "--wait", "--timeout", "90s"])
        .args(["--state-dir", "state"])
        .args(extra)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn a_wait_started_before_the_daemon_sees_the_edit_waits_for_its_roll_and_fails_on_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("config")).unwrap();
    write(root, "img-1");
    // The daemon loads an edit 3 s after it: the wait below starts first.
    let d = Daemon::start(root, &["--debounce", "3s"]);
    d.wait_for("web in sync on img-1", Duration::from_secs(60), |s| {
        s["pools"][0]["state"] == "in-sync" && s["pools"][0]["rollout"]["updated"] == 2
    });

    write(root, "img-2");
    let (code, out, err, took) = wait(root, &[]);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", d.log_tail());
    assert!(
        took > Duration::from_secs(3),
        "it waited for the edit's roll, not the last one: {took:?}\n{out}\n{err}"
    );
    assert!(
        out.contains("completed: 2 of 2 node(s) run template"),
        "{out}"
    );
    assert!(
        err.contains("waiting for the daemon to load the desired state as it is now"),
        "it says what it waits for: {err}"
    );
    assert!(
        err.contains("waiting for every node to run template"),
        "{err}"
    );
    assert_eq!(images(root), ["img-2", "img-2"], "it ended with the roll");

    // An image that never boots: the roll to it goes Degraded, and the wait
    // says so with 1. JSON names the template it waited for.
    write(root, "img-bad");
    let (code, out, err, _) = wait(root, &["-o", "json"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "degraded", "{v}");
    assert!(v["target"].is_string(), "{v}");

    // A template given by hash: the one in force now, so it ends at once
    // with the same verdict.
    let target = v["target"].as_str().unwrap().to_string();
    let (code, _, _, took) = wait(root, &["--template", &target]);
    assert_eq!(code, Some(1));
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A bad hash is refused before anything is asked.
    let (code, _, err, _) = wait(root, &["--template", "not-hex"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a template hash: hex digits"), "{err}");
}

/// The packaged service's state directory, found from anywhere: its
/// settings file names it (`POOLWRIGHT_SERVICE_DEFAULTS` stands in for
/// `/etc/default/poolwright`), and `status`, `rollout status` and `fleet`
/// use it when there is no `./.poolwright`, saying so.
#[test]
fn status_on_a_bastion_finds_the_service_state_directory_without_flags() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("config")).unwrap();
    write(root, "img-1");
    let service = root.join("var-lib-poolwright");
    let d = Daemon::start_in(root, "var-lib-poolwright", &[], &[]);
    d.wait_for("web in sync", Duration::from_secs(60), |s| {
        s["pools"][0]["state"] == "in-sync"
    });
    let defaults = root.join("etc-default-poolwright");
    std::fs::write(
        &defaults,
        format!(
            "# the service's settings\nPOOLWRIGHT_CONFIG=/srv/poolwright/config\nPOOLWRIGHT_STATE_DIR={}\n",
            service.display()
        ),
    )
    .unwrap();
    let home = root.join("home");
    std::fs::create_dir(&home).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(&home)
            .args(args)
            .env_remove("POOLWRIGHT_STATE_DIR")
            .env("POOLWRIGHT_SERVICE_DEFAULTS", &defaults)
            .output()
            .unwrap()
    };
    for args in [
        &["status"][..],
        &["rollout", "status", "web"][..],
        &["fleet", "status"][..],
    ] {
        let o = run(args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "poolwright {args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "using the service's state directory {}",
                service.display()
            )),
            "it says which state directory it used: {err}"
        );
    }
    assert!(String::from_utf8_lossy(&run(&["status"]).stdout).contains("web"));
    // `doctor` has nothing to say of the modes poolwright chose itself: the
    // state directory 0750, what the daemon wrote in it 0600, whatever the
    // umask it was started with.
    let o = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["doctor", "config", "--state-dir", "var-lib-poolwright"])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("var-lib-poolwright is mode 0750"), "{said}");
    assert!(!said.contains("readable by others"), "{said}");
    // A state directory here, or one given, is used as before.
    let o = run(&["status", "--state-dir", "elsewhere"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no daemon is running on state directory elsewhere"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_daemon_with_nothing_at_its_config_path_waits_for_it_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // `run config`, with no `config` yet.
    let mut d = Daemon::start(root, &[]);
    let s = d.wait_for("the reason in status", Duration::from_secs(30), |s| {
        s["config"]["valid"] == false
    });
    let errors = s["config"]["errors"].to_string();
    assert!(
        errors.contains("nothing at") && errors.contains("clone your config repository there"),
        "{errors}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "it keeps running (no restart loop): {}",
        d.log_tail()
    );
    assert!(
        d.log_tail().contains("waiting for it to appear"),
        "{}",
        d.log_tail()
    );
    // The clone arrives: it loads, and the pool is created.
    std::fs::create_dir(root.join("config")).unwrap();
    write(root, "img-1");
    d.wait_for("the pool, loaded", Duration::from_secs(60), |s| {
        s["config"]["valid"] == true && s["pools"][0]["state"] == "in-sync"
    });
}
