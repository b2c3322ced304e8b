//! `poolwright run DIR`: the long-running service. Watches the desired state
//! (files, or commits with `--git-committed-only`), reconciles on every change
//! and on a periodic resync, serves status and metrics, and talks to systemd.
//!
//! Shutdown (SIGTERM/SIGINT) stops starting new steps, lets in-flight steps
//! reach a safe point within `--shutdown-grace`, and exits 0; the rollout
//! journal (written before every side effect) lets the next start resume.

pub mod access;
pub mod board;
pub mod client;
pub mod decision;
pub mod feed;
pub mod ha;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod queue;
pub mod reconciler;
pub mod resync;
pub mod source;
pub mod systemd;
pub mod watch;
pub mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use board::{Board, DaemonInfo};
use metrics::Metrics;
use reconciler::{Reconciler, Settings, Stores, Trigger};
use source::ConfigSource;

use crate::clock::{Clock, SystemClock};
use crate::reconcile::{EventSink, Stop};
use crate::store::{Inventory, InventoryStore, Journal, StateDir, StateLock, atomic_write};

pub struct Options {
    pub dir: PathBuf,
    pub state_dir: PathBuf,
    pub prune: bool,
    pub dry_run: bool,
    pub git_committed_only: bool,
    pub resync: Duration,
    pub parallelism: usize,
    pub listen: SocketAddr,
    pub events: Option<PathBuf>,
    pub shutdown_grace: Duration,
    pub debounce: Duration,
    pub retry_after: Duration,
    /// `--ha kubernetes`: act only while holding the Lease.
    pub ha: Option<ha::HaOptions>,
    pub control: ControlOptions,
    pub events_rotation: crate::files::Rotation,
}

/// Who may change state, and what the listeners may cost.
#[derive(Clone, Debug)]
pub struct ControlOptions {
    /// Group owning the control socket (name or gid); default the daemon's.
    pub socket_group: Option<String>,
    /// Allow state changes on TCP with this bearer token.
    pub token_file: Option<PathBuf>,
    /// Extra `Host` names the TCP listener answers to.
    pub allowed_hosts: Vec<String>,
    /// Open connections at most (per listener); bounded by the open-files
    /// limit less a reserve.
    pub max_connections: usize,
    /// A request's headers within this; idle connections closed after it.
    pub header_timeout: Duration,
    /// `/healthz` fails (and the systemd watchdog stops) when the reconcile
    /// loop has not turned for this long.
    pub liveness_timeout: Duration,
}

/// Written to `STATE/daemon.json` so `poolwright status` and `rollout` find
/// the running daemon's status address.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonFile {
    pub pid: u32,
    pub url: String,
    /// State changes go here (the CLI's `rollout pause|resume`).
    #[serde(default)]
    pub control_socket: Option<PathBuf>,
    pub started_at: Timestamp,
}

pub fn daemon_file(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("daemon.json")
}

pub fn run(opts: Options) -> anyhow::Result<u8> {
    let state = StateDir::new(&opts.state_dir);
    let _lock = StateLock::acquire(
        &state.root,
        &format!("poolwright run {}", opts.dir.display()),
    )?;
    let source = ConfigSource::new(opts.dir.clone(), opts.git_committed_only)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let code = rt.block_on(serve(opts, state, source));
    // A read stuck in a blocking thread must not hold the exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn serve(opts: Options, state: StateDir, source: ConfigSource) -> anyhow::Result<u8> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started_at = clock.now();
    let board = Arc::new(Board::new(DaemonInfo {
        pid: std::process::id(),
        started_at,
        dir: opts.dir.display().to_string(),
        state_dir: opts.state_dir.display().to_string(),
        mode: if opts.dry_run { "dry-run" } else { "apply" }.into(),
        git_committed_only: opts.git_committed_only,
        ready: false,
        stopping: false,
        ha: None,
    }));
    let metrics = Arc::new(Metrics::new());
    let feed = Arc::new(feed::Feed::new());
    // Each pool's latency history, for forecasts.
    let latencies = Arc::new(crate::store::latency::LatencyRecorder::new(
        crate::store::latency::LatencyStore::new(&state.root),
    ));
    let events_path = opts
        .events
        .clone()
        .unwrap_or_else(|| state.root.join("events.jsonl"));
    let events = Arc::new(
        EventSink::to_file(&events_path, opts.events_rotation)?
            .observed_by({
                let board = board.clone();
                let metrics = metrics.clone();
                let feed = feed.clone();
                move |e| {
                    board.record_event(e);
                    feed.record(e);
                    metrics
                        .events
                        .get_or_create(&metrics::EventLabels {
                            event: e.event.to_string(),
                        })
                        .inc();
                }
            })
            .observed_by({
                let latencies = latencies.clone();
                move |e| latencies.record(e)
            }),
    );

    // Where the journal and the inventory live: the state directory, or (with
    // --ha) the cluster, beside the Lease.
    let (stores, election) = match &opts.ha {
        None => {
            let inventory_store = InventoryStore::file(state.inventory());
            let inventory = inventory_store.load().await?;
            let stores = Stores {
                journal: Journal::new(state.journal_dir()),
                inventory_store: Arc::new(inventory_store),
                inventory,
                shards: None,
            };
            (stores, None)
        }
        Some(ha_opts) => {
            let ha::Ha {
                election,
                store,
                identity,
                lease,
            } = ha::connect(ha_opts, clock.clone()).await?;
            match &ha_opts.shards {
                None => tracing::info!(
                    lease = %lease,
                    identity = %identity,
                    "--ha kubernetes: acting only while holding the lease; journals and inventory in ConfigMaps beside it"
                ),
                Some(n) => tracing::info!(
                    leases = %format!("{lease}-shard-0..{}", n - 1),
                    identity = %identity,
                    "--ha kubernetes --shards {n}: acting only on the pools of the shards held; journals and inventory in ConfigMaps beside the leases"
                ),
            }
            events.stamp_with(identity, store.shards.clone());
            let stores = Stores {
                journal: Journal::Cluster(store.clone()),
                shards: Some(store.shards.clone()),
                inventory_store: Arc::new(InventoryStore::cluster(store)),
                inventory: Inventory::default(),
            };
            (stores, Some(election))
        }
    };
    let (leading_tx, mut leading_rx) = tokio::sync::watch::channel(ha::Leading::waiting());
    let elector_stop = Stop::new();
    let elector_task = election.map(|e| {
        ha::spawn(
            e,
            board.clone(),
            metrics.clone(),
            leading_tx.clone(),
            elector_stop.clone(),
        )
    });
    let ha_enabled = elector_task.is_some();
    metrics.leader.set(i64::from(!ha_enabled));

    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (observed_tx, mut observed_rx) = mpsc::unbounded_channel();
    let mut reconciler = Reconciler::new(
        Settings {
            prune: opts.prune,
            dry_run: opts.dry_run,
            parallelism: opts.parallelism,
            retry_after: opts.retry_after,
            resync: opts.resync,
        },
        source.clone(),
        state.clone(),
        clock.clone(),
        board.clone(),
        metrics.clone(),
        events.clone(),
        feed.clone(),
        done_tx,
        observed_tx,
        stores,
    )?;

    // Status and metrics on TCP; state changes on the control socket.
    let (control_tx, mut control_rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("listening on {} for status and metrics", opts.listen))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            "status and metrics listen on {local}, beyond loopback, as configured with --listen"
        );
    }
    let socket_path = listen::control_socket_path(&state.root);
    let socket = listen::bind_control_socket(&socket_path, opts.control.socket_group.as_deref())?;
    let heartbeat = Arc::new(http::Heartbeat::new(opts.control.liveness_timeout));
    heartbeat.beat();
    // Both listeners share what the open-files limit leaves after the reserve.
    let limits = listen::Limits {
        max_connections: opts
            .control
            .max_connections
            .min(listen::connection_budget() / 2)
            .max(1),
        header_timeout: opts.control.header_timeout,
    };
    let http_state = http::HttpState {
        board: board.clone(),
        metrics: metrics.clone(),
        latest_plan: reconciler.latest_plan.clone(),
        feed: feed.clone(),
        forecasts: Arc::new(web::forecast::PageForecasts::new(state.root.clone())),
        control: control_tx,
        heartbeat: heartbeat.clone(),
        tcp: None,
        body_timeout: opts.control.header_timeout,
    };
    let tcp_router = http::router(http::HttpState {
        tcp: Some(Arc::new(access::TcpRules {
            local,
            allowed_hosts: opts
                .control
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            token_file: opts.control.token_file.clone(),
            socket: socket_path.clone(),
        })),
        ..http_state.clone()
    });
    let socket_router = http::router(http_state);
    let http_stop = Stop::new();
    let server = tokio::spawn(listen::serve_tcp(
        listener,
        tcp_router,
        limits,
        http_stop.clone(),
    ));
    let socket_server = tokio::spawn(listen::serve_unix(
        socket,
        socket_router,
        limits,
        http_stop.clone(),
    ));
    let daemon_file_path = daemon_file(&state.root);
    atomic_write(
        &daemon_file_path,
        serde_json::to_string_pretty(&DaemonFile {
            pid: std::process::id(),
            url: format!("http://{local}"),
            control_socket: Some(socket_path.clone()),
            started_at,
        })?
        .as_bytes(),
    )?;
    tracing::info!(
        dir = %opts.dir.display(),
        mode = if opts.dry_run { "dry-run" } else { "apply" },
        git_committed_only = opts.git_committed_only,
        control_socket = %socket_path.display(),
        max_connections = limits.max_connections,
        "poolwright run: status and metrics on http://{local}"
    );

    // Changes to the desired state.
    let (files_tx, mut files_rx) = mpsc::unbounded_channel();
    let _watch = watch::watch(&source, opts.debounce, files_tx)?;

    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // The watchdog is pinged only while the loop turns: a stuck reload or
    // round stops the pings, and systemd restarts the service.
    let watchdog = systemd::watchdog_interval().map(|every| {
        let heartbeat = heartbeat.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if heartbeat.alive() {
                    systemd::watchdog();
                } else {
                    tracing::error!(
                        "the reconcile loop has not turned for {}s: not pinging the systemd watchdog",
                        heartbeat.age().as_secs()
                    );
                }
            }
        })
    });
    // Status changes reach the page's live stream within half a second; with
    // nobody subscribed this costs one atomic load.
    let publisher = tokio::spawn({
        let (feed, board) = (feed.clone(), board.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                feed.publish_board(&board);
            }
        }
    });
    // The loop turns at least this often, so an idle daemon stays alive.
    let mut pulse =
        tokio::time::interval((opts.control.liveness_timeout / 4).max(Duration::from_secs(1)));

    // The first load queues every pool; from then on each trigger queues the
    // pools it concerns, and each turn of the loop starts observations of
    // what is queued.
    let mut reload: Option<Trigger> = Some(Trigger::Startup);
    let mut ready = false;
    let mut status_version = u64::MAX;
    let mut status_at = tokio::time::Instant::now();
    'turns: loop {
        heartbeat.beat();
        if let Some(why) = reload.take() {
            // A signal ends even a load that hangs (its reads have deadlines).
            tokio::select! {
                () = reconciler.reload(why) => {}
                _ = term.recv() => break 'turns,
                _ = int.recv() => break 'turns,
            }
            heartbeat.beat();
        }
        if reconciler.promote_due() {
            reload = Some(Trigger::Resync);
            continue;
        }
        reconciler.dispatch();
        reconciler.publish();
        if !ready && (reconciler.first_pass_done() || !board.read(|d| d.config.valid)) {
            // Up and serving status after the first look at every pool, or
            // when the desired state is invalid (status says so; /readyz
            // stays 503 until one loads), so systemd does not restart it in a loop.
            ready = true;
            systemd::ready(&board.summary());
            status_version = board.version();
        }
        if board.read(|d| d.config.valid && !d.daemon.ready) && reconciler.first_pass_done() {
            board.update(|d| d.daemon.ready = true);
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
        let due = reconciler.next_due().map(|t| {
            let secs = t
                .duration_since(clock.now())
                .as_secs_f64()
                .clamp(0.0, 86_400.0);
            tokio::time::Instant::now() + Duration::from_secs_f64(secs)
        });
        let publish = reconciler.publish_due().map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the desired state");
                reload = Some(Trigger::Reload);
            }
            Some(o) = observed_rx.recv() => reconciler.observed(o).await,
            Some(done) = done_rx.recv() => reconciler.finished(done).await,
            Some(request) = control_rx.recv() => reconciler.control(request).await,
            Ok(()) = leading_rx.changed(), if ha_enabled => {
                let now = leading_rx.borrow_and_update().clone();
                metrics.leader.set(i64::from(now.leader()));
                if let Some(t) = reconciler.set_leading(now) {
                    reload = Some(reload.map_or(t, |r| r.merge(t)));
                }
            }
            Some(()) = files_rx.recv() => {
                if reconciler.files_changed() {
                    reload = Some(Trigger::Files);
                }
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {}
            _ = tokio::time::sleep_until(publish.unwrap_or_else(tokio::time::Instant::now)), if publish.is_some() => {}
            _ = pulse.tick() => {}
        }
        // Coalesce change notices already queued into this one load.
        while let Ok(()) = files_rx.try_recv() {
            if reconciler.files_changed() {
                reload = Some(reload.map_or(Trigger::Files, |t| t.merge(Trigger::Files)));
            }
        }
    }

    // Shutdown: nothing new starts; in-flight steps reach a safe point.
    tracing::info!(
        busy = reconciler.busy_pools(),
        "stopping: no new steps start; waiting up to {:?} for steps in flight",
        opts.shutdown_grace
    );
    systemd::stopping();
    board.update(|d| d.daemon.stopping = true);
    reconciler.stop_all();
    // Everything below, releasing the lease included, fits in the grace: the
    // process ends in time whatever is stuck.
    let drained = tokio::time::timeout(opts.shutdown_grace, async {
        while reconciler.busy_pools() > 0 {
            match done_rx.recv().await {
                Some(done) => reconciler.finished(done).await,
                None => break,
            }
        }
        // Only with nothing in flight may a standby take over at once;
        // otherwise the lease runs out first (the steps still running die
        // with this process).
        if let Some(task) = elector_task {
            elector_stop.request();
            if let Ok(mut election) = task.await
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
            "steps still in flight after {:?}; exiting anyway: their journals resume them on the next start",
            opts.shutdown_grace
        );
    }
    drop(leading_tx);
    publisher.abort();
    feed.close();
    latencies.flush();
    if let Some(w) = watchdog {
        w.abort();
    }
    http_stop.request();
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), socket_server).await;
    let _ = std::fs::remove_file(&daemon_file_path);
    let _ = std::fs::remove_file(&socket_path);
    tracing::info!("stopped");
    Ok(0)
}
