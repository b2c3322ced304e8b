//! The shipped unit file passes `systemd-analyze verify` and keeps its
//! `systemd-analyze security` exposure at or below 2.0 (the README reports it).
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

#[test]
fn the_units_exposure_is_at_most_2() {
    if skipped() {
        return;
    }
    let dir = unit();
    let path = dir.path().join("poolwright.service");
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
