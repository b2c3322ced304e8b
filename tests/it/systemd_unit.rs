//! The shipped unit files (poolwright's, and the reference plug-in's) pass
//! `systemd-analyze verify` and keep their `systemd-analyze security` exposure
//! at or below 2.0 (the READMEs report it).
//! systemd-analyze is part of the machine's systemd package; if it is missing
//! the test fails and says so (set POOLWRIGHT_SKIP_SYSTEMD=1 to skip locally).

use std::process::Command;

fn analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("systemd-analyze could not run ({e}); install systemd, or set POOLWRIGHT_SKIP_SYSTEMD=1 to skip locally"))
}

/// The unit with ExecStart pointing at the binary under test (verify checks it exists).
fn unit() -> tempfile::TempDir {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/poolwright.service"
    ))
    .unwrap();
    assert!(text.contains("ExecStart=/usr/local/bin/poolwright run"));
    let text = text.replace(
        "/usr/local/bin/poolwright",
        env!("CARGO_BIN_EXE_poolwright"),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("poolwright.service"), text).unwrap();
    dir
}

fn skipped() -> bool {
    std::env::var_os("POOLWRIGHT_SKIP_SYSTEMD").is_some() && std::env::var_os("CI").is_none()
}

#[test]
fn the_unit_verifies() {
    if skipped() {
        return;
    }
    let dir = unit();
    let path = dir.path().join("poolwright.service");
    let out = analyze(&["verify", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    for needed in [
        "Type=notify",
        "WatchdogSec=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "StateDirectory=poolwright",
        "LimitNOFILE=",
        "User=poolwright",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "RestrictAddressFamilies=",
        "SystemCallFilter=@system-service",
        "CapabilityBoundingSet=\n",
    ] {
        assert!(text.contains(needed), "the unit lacks {needed:?}");
    }
}

/// The reference plug-in's unit, with ExecStart pointing at this machine's
/// python and the plug-in in the checkout.
fn plugin_unit() -> tempfile::TempDir {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/plugins/ec2-instances/poolwright-ec2-instances.service"
    ))
    .unwrap();
    let python = std::env::var("POOLWRIGHT_PYTHON").unwrap_or_else(|_| "python3".into());
    let which = Command::new("sh")
        .args(["-c", &format!("command -v {python}")])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&which.stdout).trim().to_string();
    assert!(!python.is_empty(), "python3 is not on PATH");
    let text = text
        .replace("/opt/poolwright-ec2-instances/venv/bin/python3", &python)
        .replace(
            "/opt/poolwright-ec2-instances/plugin.py",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/plugins/ec2-instances/plugin.py"
            ),
        );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("poolwright-ec2-instances.service"), text).unwrap();
    dir
}

#[test]
fn the_plugin_unit_verifies_and_its_exposure_is_at_most_2() {
    if skipped() {
        return;
    }
    let dir = plugin_unit();
    let path = dir.path().join("poolwright-ec2-instances.service");
    let out = analyze(&["verify", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_exposure(&path);
}

#[test]
fn the_units_exposure_is_at_most_2() {
    if skipped() {
        return;
    }
    let dir = unit();
    assert_exposure(&dir.path().join("poolwright.service"));
}

fn assert_exposure(path: &std::path::Path) {
    let out = analyze(&[
        "security",
        "--offline=true",
        "--no-pager",
        path.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| {
            panic!(
                "no exposure in: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let level: f64 = line
        .split(':')
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the level from {line:?}"));
    assert!(level <= 2.0, "exposure {level} > 2.0: {text}");
}
