//! systemd notifications (sd-notify): READY, STATUS, WATCHDOG, STOPPING.
//! Outside systemd (no NOTIFY_SOCKET) every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("sd_notify: {e}");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(line: &str) {
    send(&[NotifyState::Status(line)]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// How often the reconcile loop must ping the watchdog (half its timeout), if
/// systemd asked for one.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}
