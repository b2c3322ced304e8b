//! The loop: each turn takes any reload first, then queues what is due,
//! starts observations, assembles the views, tells systemd, and sleeps until
//! something happens (a signal, an observation or a worker coming back, a
//! control request, a change of leadership, a change of the desired state,
//! something due). It returns on SIGTERM or SIGINT.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::daemon::run::queue::Trigger;
use crate::daemon::run::systemd;
use crate::daemon::wiring::Daemon;

pub(in crate::daemon) async fn run(d: &mut Daemon, liveness: Duration) -> anyhow::Result<()> {
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let ha_enabled = d.election.is_some();
    // The loop turns at least this often, so an idle daemon stays alive.
    let mut pulse = tokio::time::interval((liveness / 4).max(Duration::from_secs(1)));
    // The first load queues every pool; from then on each trigger queues the
    // pools it concerns, and each turn starts observations of what is queued.
    let mut reload: Option<Trigger> = Some(Trigger::Startup);
    let mut ready = false;
    let mut status_version = u64::MAX;
    let mut status_at = tokio::time::Instant::now();
    loop {
        d.heartbeat.beat();
        if let Some(why) = reload.take() {
            // A signal ends even a load that hangs (its reads have deadlines).
            tokio::select! {
                () = d.reconciler.reload(why) => {}
                _ = term.recv() => return Ok(()),
                _ = int.recv() => return Ok(()),
            }
            d.heartbeat.beat();
        }
        if d.reconciler.promote_due() {
            reload = Some(Trigger::Resync);
            continue;
        }
        d.reconciler.fleet_tick().await;
        if d.reconciler.images_tick().await {
            // A queued image came in force as its channel's change ended.
            reload = Some(Trigger::Files);
            continue;
        }
        d.reconciler.dispatch();
        d.reconciler.publish();
        let board = &d.board;
        if !ready && (d.reconciler.first_pass_done() || !board.read(|s| s.config.valid)) {
            // Up and serving status after the first look at every pool, or
            // when the desired state is invalid (status says so; /readyz
            // stays 503 until one loads), so systemd does not restart it in a loop.
            ready = true;
            systemd::ready(&board.summary());
            status_version = board.version();
        }
        if board.read(|s| s.config.valid && !s.daemon.ready) && d.reconciler.first_pass_done() {
            board.update(|s| s.daemon.ready = true);
        }
        // The STATUS= line follows the board, at most once a second.
        if ready
            && board.version() != status_version
            && status_at.elapsed() >= Duration::from_secs(1)
        {
            status_version = board.version();
            status_at = tokio::time::Instant::now();
            systemd::status(&board.summary());
        }
        // Sleep until something is due (a pool's look, a resync slice), the
        // views are due to be assembled, or a trigger comes.
        let due = d.reconciler.next_due().map(|t| {
            let secs = t
                .duration_since(d.clock.now())
                .as_secs_f64()
                .clamp(0.0, 86_400.0);
            tokio::time::Instant::now() + Duration::from_secs_f64(secs)
        });
        let publish = d
            .reconciler
            .publish_due()
            .map(tokio::time::Instant::from_std);
        let inbox = &mut d.inbox;
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the desired state");
                reload = Some(Trigger::Reload);
            }
            Some(o) = inbox.observed.recv() => d.reconciler.observed(o).await,
            Some(done) = inbox.done.recv() => d.reconciler.finished(done).await,
            Some(request) = inbox.control.recv() => d.reconciler.control(request).await,
            Some(read) = inbox.gates.recv() => d.reconciler.gate_read(read).await,
            Some(e) = inbox.pool_events.recv() => d.reconciler.pool_event(e).await,
            Some(a) = inbox.images.recv() => {
                if d.reconciler.image_answered(a).await {
                    reload = Some(reload.map_or(Trigger::Files, |t| t.merge(Trigger::Files)));
                }
            }
            Ok(()) = inbox.leading.changed(), if ha_enabled => {
                let now = inbox.leading.borrow_and_update().clone();
                d.metrics.leader.set(i64::from(now.leader()));
                if let Some(t) = d.reconciler.set_leading(now) {
                    reload = Some(reload.map_or(t, |r| r.merge(t)));
                }
            }
            Some(()) = inbox.files.recv() => {
                if d.reconciler.files_changed() {
                    reload = Some(Trigger::Files);
                }
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {}
            _ = tokio::time::sleep_until(publish.unwrap_or_else(tokio::time::Instant::now)), if publish.is_some() => {}
            _ = pulse.tick() => {}
        }
        // Coalesce change notices already queued into this one load.
        while let Ok(()) = d.inbox.files.try_recv() {
            if d.reconciler.files_changed() {
                reload = Some(reload.map_or(Trigger::Files, |t| t.merge(Trigger::Files)));
            }
        }
    }
}
