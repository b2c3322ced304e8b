//! Stopping: nothing new starts; steps in flight reach a safe point within
//! `--shutdown-grace`; the leases are given back only when nothing is in
//! flight; then the listeners close and the CLI's pointer files go.

use std::time::Duration;

use crate::daemon::run::systemd;
use crate::daemon::wiring::Daemon;

pub(in crate::daemon) async fn stop(d: Daemon, grace: Duration) {
    let Daemon {
        board,
        feed,
        latencies,
        mut reconciler,
        mut inbox,
        election,
        listeners,
        background,
        ..
    } = d;
    tracing::info!(
        busy = reconciler.busy_pools(),
        "stopping: no new steps start; waiting up to {grace:?} for steps in flight"
    );
    systemd::stopping();
    board.update(|s| s.daemon.stopping = true);
    reconciler.stop_all();
    // Everything below, releasing the lease included, fits in the grace: the
    // process ends in time whatever is stuck.
    let drained = tokio::time::timeout(grace, async {
        while reconciler.busy_pools() > 0 {
            match inbox.done.recv().await {
                Some(done) => reconciler.finished(done).await,
                None => break,
            }
        }
        // Only with nothing in flight may a standby take over at once;
        // otherwise the lease runs out first (the steps still running die
        // with this process).
        if let Some(e) = election {
            e.stop.request();
            if let Ok(mut election) = e.task.await
                && reconciler.busy_pools() == 0
            {
                election.release().await;
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            busy = reconciler.busy_pools(),
            "steps still in flight after {grace:?}; exiting anyway: their journals resume them on the next start"
        );
    }
    background.publisher.abort();
    for task in background.fetcher.iter().flatten() {
        task.abort();
    }
    feed.close();
    latencies.flush();
    if let Some(w) = background.watchdog {
        w.abort();
    }
    listeners.stop.request();
    let _ = tokio::time::timeout(Duration::from_secs(2), listeners.tcp).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), listeners.socket).await;
    let _ = std::fs::remove_file(&listeners.daemon_file);
    let _ = std::fs::remove_file(&listeners.socket_path);
    tracing::info!("stopped");
}
