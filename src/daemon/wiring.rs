//! The composition root: everything the running daemon is made of, built
//! once at start and handed to the loop (`turns`) and then to `shutdown`.
//! Nothing here decides; it connects the parts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::daemon::run::reconciler::fleet::GateRead;
use crate::daemon::run::reconciler::{
    ControlRequest, Done, Observation, ReconcileOptions, Reconciler, Stores,
};
use crate::daemon::serve::shared::{Heartbeat, HttpState};
use crate::daemon::source::ConfigSource;
use crate::daemon::views::board::{Board, DaemonInfo};
use crate::daemon::views::feed::Feed;
use crate::daemon::views::metrics::{self, Metrics};
use crate::daemon::{
    DaemonFile, Options, daemon_file, run::ha_wiring, run::systemd, serve::access, serve::http,
    serve::listen, serve::web,
};
use crate::files::atomic_write;
use crate::ha::{Election, Leading};
use crate::reconcile::EventSink;
use crate::store::images::ImageStore;
use crate::store::latency::{LatencyRecorder, LatencyStore};
use crate::store::{FleetJournal, Inventory, InventoryStore, Journal, StateDir};
use crate::sync::Stop;

/// The running daemon.
pub(in crate::daemon) struct Daemon {
    pub clock: Arc<dyn Clock>,
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
    pub feed: Arc<Feed>,
    pub latencies: Arc<LatencyRecorder>,
    pub reconciler: Reconciler,
    pub heartbeat: Arc<Heartbeat>,
    pub inbox: Inbox,
    pub election: Option<ElectionTask>,
    pub listeners: Listeners,
    pub background: Background,
}

/// What reaches the loop from the rest of the process.
pub(in crate::daemon) struct Inbox {
    pub done: mpsc::UnboundedReceiver<Done>,
    pub observed: mpsc::UnboundedReceiver<Observation>,
    pub control: mpsc::UnboundedReceiver<ControlRequest>,
    /// One `()` per batch of changes to the desired state (files or commits).
    pub files: mpsc::UnboundedReceiver<()>,
    /// What this daemon may act on (`--ha`); fixed without it.
    pub leading: watch::Receiver<Leading>,
    /// A FleetRollout's gate, read off the loop.
    pub gates: mpsc::UnboundedReceiver<GateRead>,
    /// Pools' events a change across pools must know at once (a rollout
    /// went Degraded, or started to roll back).
    pub pool_events: mpsc::UnboundedReceiver<crate::model::Event>,
    /// Image channels' sources' answers, asked off the loop.
    pub images: mpsc::UnboundedReceiver<crate::daemon::run::reconciler::images::Asked>,
}

/// The election task (`--ha`), stopped and its leases released at shutdown.
pub(in crate::daemon) struct ElectionTask {
    pub task: JoinHandle<Election>,
    pub stop: Stop,
    /// Kept open while the daemon runs (the loop watches its receiver).
    pub _leading: watch::Sender<Leading>,
}

/// The HTTP listeners, and the files that let the CLI find them.
pub(in crate::daemon) struct Listeners {
    pub stop: Stop,
    pub tcp: JoinHandle<()>,
    pub socket: JoinHandle<()>,
    pub daemon_file: PathBuf,
    pub socket_path: PathBuf,
}

/// Tasks that run beside the loop, and the watcher of the desired state.
pub(in crate::daemon) struct Background {
    pub watchdog: Option<JoinHandle<()>>,
    pub publisher: JoinHandle<()>,
    /// `--git-url`: fetches the config repo, and plans the previews.
    pub fetcher: Option<[JoinHandle<()>; 2]>,
    pub _watch: crate::daemon::run::watch::Watch,
}

pub(in crate::daemon) async fn build(
    opts: &Options,
    state: StateDir,
    source: ConfigSource,
) -> anyhow::Result<Daemon> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started_at = clock.now();
    let board = Arc::new(Board::new(DaemonInfo {
        pid: std::process::id(),
        started_at,
        dir: source.dir().display().to_string(),
        dir_resolved: match &source {
            crate::daemon::source::ConfigSource::Remote(_) => None,
            _ => std::fs::canonicalize(source.dir())
                .ok()
                .map(|p| p.display().to_string()),
        },
        state_dir: opts.state_dir.display().to_string(),
        mode: if opts.dry_run { "dry-run" } else { "apply" }.into(),
        git_committed_only: opts.git_committed_only,
        ready: false,
        stopping: false,
        ha: None,
    }));
    let metrics = Arc::new(Metrics::new());
    let feed = Arc::new(Feed::new());
    // Each pool's latency history, for forecasts.
    let latencies = Arc::new(LatencyRecorder::new(LatencyStore::new(&state.root)));
    let (pool_events_tx, pool_events) = mpsc::unbounded_channel();
    let events = Arc::new(
        event_sink(opts, &state, &board, &metrics, &feed, &latencies)?.observed_by(move |e| {
            if matches!(
                e.event,
                crate::model::EventKind::Degraded | crate::model::EventKind::RollbackStarted
            ) {
                let _ = pool_events_tx.send(e.clone());
            }
        }),
    );
    let (stores, election) = stores(opts, &state, &events, &clock).await?;
    let (leading_tx, leading_rx) = watch::channel(Leading::waiting());
    let election = election.map(|e| {
        let stop = Stop::new();
        let reports = Arc::new(ha_wiring::Reports {
            board: board.clone(),
            metrics: metrics.clone(),
        });
        ElectionTask {
            task: crate::ha::spawn(e, reports, leading_tx.clone(), stop.clone()),
            stop,
            _leading: leading_tx,
        }
    });
    metrics.leader.set(i64::from(election.is_none()));

    let (done_tx, done) = mpsc::unbounded_channel();
    let (observed_tx, observed) = mpsc::unbounded_channel();
    let (gate_tx, gates) = mpsc::unbounded_channel();
    let mut reconciler = Reconciler::new(
        ReconcileOptions {
            prune: opts.prune,
            dry_run: opts.dry_run,
            parallelism: opts.parallelism,
            retry_after: opts.retry_after,
            resync: opts.resync,
            ha_retry: opts.ha.as_ref().map(|h| h.retry_period),
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
        gate_tx,
        stores,
    )?;
    let heartbeat = Arc::new(Heartbeat::new(opts.control.liveness_timeout));
    heartbeat.beat();
    let (control_tx, control) = mpsc::unbounded_channel();
    // Changes to the desired state: files, commits, fetched commits.
    let (files_tx, files) = mpsc::unbounded_channel();
    let (hooks, fetcher, previews) = match (&source, &opts.git) {
        (ConfigSource::Remote(remote), Some(git)) => {
            let (target, pokes) = crate::daemon::source::fetcher::HookTarget::new(
                git.webhook_secret_file.clone(),
                &git.remote.branch,
                &git.remote.preview_refs,
            );
            let (wanted_tx, wanted) =
                watch::channel(crate::daemon::source::previews::Wanted::default());
            let previews = Arc::new(crate::daemon::source::previews::Previews::new(
                git.remote.preview_refs.clone(),
            ));
            let feed = crate::daemon::source::previews::PreviewFeed {
                base: watch::Sender::new(None),
                fleets: Default::default(),
            };
            let (journal, inventory) = reconciler.feed_previews(feed.clone());
            let previewer = crate::daemon::source::previews::Previewer {
                source: remote.clone(),
                previews: previews.clone(),
                feed,
                journal,
                inventory,
                clock: clock.clone(),
                prune: opts.prune,
                refresh: git.fetch.interval.max(Duration::from_secs(60)),
            }
            .spawn(wanted);
            let fetcher = crate::daemon::source::fetcher::Fetcher {
                source: remote.clone(),
                settings: git.fetch.clone(),
                board: board.clone(),
                metrics: metrics.clone(),
                events: events.clone(),
                reload: files_tx.clone(),
                previews: wanted_tx,
            }
            .spawn(pokes);
            (Some(target), Some([fetcher, previewer]), Some(previews))
        }
        _ => (None, None, None),
    };
    let shared = HttpState {
        board: board.clone(),
        metrics: metrics.clone(),
        latest_plan: reconciler.latest_plan(),
        feed: feed.clone(),
        forecasts: Arc::new(web::forecast::PageForecasts::new(state.root.clone())),
        fleet: reconciler.fleet_view(),
        control: control_tx,
        heartbeat: heartbeat.clone(),
        tcp: None,
        body_timeout: opts.control.header_timeout,
        hooks,
        previews,
        journal: reconciler.journal(),
        images: reconciler.images_view(),
    };
    let images = reconciler.image_answers();
    let listeners = listen(opts, &state, shared, started_at).await?;

    let watcher = crate::daemon::run::watch::watch(&source, opts.debounce, files_tx)?;
    let background = Background {
        watchdog: watchdog(&heartbeat),
        publisher: publisher(&feed, &board),
        fetcher,
        _watch: watcher,
    };
    Ok(Daemon {
        clock,
        board,
        metrics,
        feed,
        latencies,
        reconciler,
        heartbeat,
        inbox: Inbox {
            done,
            observed,
            control,
            files,
            leading: leading_rx,
            gates,
            pool_events,
            images,
        },
        election,
        listeners,
        background,
    })
}

/// Events go to the events file, the status board, the page's feed, the
/// events metric and the latency history.
fn event_sink(
    opts: &Options,
    state: &StateDir,
    board: &Arc<Board>,
    metrics: &Arc<Metrics>,
    feed: &Arc<Feed>,
    latencies: &Arc<LatencyRecorder>,
) -> anyhow::Result<EventSink> {
    let path = opts
        .events
        .clone()
        .unwrap_or_else(|| state.root.join("events.jsonl"));
    Ok(EventSink::to_file(&path, opts.events_rotation)?
        .observed_by({
            let (board, metrics, feed) = (board.clone(), metrics.clone(), feed.clone());
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
        }))
}

/// Where the journal and the inventory live: the state directory, or (with
/// `--ha`) the cluster, beside the Lease; and the election that goes with it.
async fn stores(
    opts: &Options,
    state: &StateDir,
    events: &EventSink,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<(Stores, Option<Election>)> {
    let Some(ha_opts) = &opts.ha else {
        let inventory_store = InventoryStore::file(state.inventory());
        let inventory = inventory_store.load().await?;
        let stores = Stores {
            journal: Journal::new(state.journal_dir()),
            inventory_store: Arc::new(inventory_store),
            inventory,
            shards: None,
            // A dry run acts on nothing, its changes across pools included:
            // they are kept in memory, and a later real run starts afresh.
            fleet_journal: if opts.dry_run {
                FleetJournal::memory()
            } else {
                FleetJournal::new(state.fleet_dir())
            },
            images: if opts.dry_run {
                ImageStore::Memory
            } else {
                ImageStore::File(crate::store::images::path(&state.root))
            },
        };
        return Ok((stores, None));
    };
    let crate::ha::Ha {
        election,
        store,
        identity,
        lease,
    } = crate::ha::connect(ha_opts, clock.clone()).await?;
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
    let shards = store.shards.clone();
    events.stamp_with(move |pool| crate::model::Actor {
        daemon: identity.clone(),
        epoch: shards.fence(shards.of(pool)).current().map(|t| t.epoch),
    });
    let stores = Stores {
        journal: Journal::Shared(store.clone()),
        shards: Some(store.shards.clone()),
        fleet_journal: FleetJournal::Shared(store.clone()),
        images: ImageStore::Shared(store.clone()),
        inventory_store: Arc::new(InventoryStore::shared(store)),
        inventory: Inventory::default(),
    };
    Ok((stores, Some(election)))
}

/// Status and metrics on TCP; state changes on the control socket; and
/// `STATE/daemon.json`, which tells the CLI where they are.
async fn listen(
    opts: &Options,
    state: &StateDir,
    shared: HttpState,
    started_at: jiff::Timestamp,
) -> anyhow::Result<Listeners> {
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
    // Both listeners share what the open-files limit leaves after the reserve.
    let limits = listen::Limits {
        max_connections: opts
            .control
            .max_connections
            .min(listen::connection_budget() / 2)
            .max(1),
        header_timeout: opts.control.header_timeout,
    };
    let tcp_router = http::router(HttpState {
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
            strikes: Arc::new(crate::daemon::serve::strikes::Strikes::new(
                std::time::Instant::now(),
            )),
        })),
        ..shared.clone()
    });
    let socket_router = http::router(shared);
    let stop = Stop::new();
    let tcp = tokio::spawn(listen::serve_tcp(
        listener,
        tcp_router,
        limits,
        stop.clone(),
    ));
    let socket = tokio::spawn(listen::serve_unix(
        socket,
        socket_router,
        limits,
        stop.clone(),
    ));
    let daemon_file = daemon_file(&state.root);
    atomic_write(
        &daemon_file,
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
    Ok(Listeners {
        stop,
        tcp,
        socket,
        daemon_file,
        socket_path,
    })
}

/// The systemd watchdog is pinged only while the loop turns: a stuck reload
/// or round stops the pings, and systemd restarts the service.
fn watchdog(heartbeat: &Arc<Heartbeat>) -> Option<JoinHandle<()>> {
    systemd::watchdog_interval().map(|every| {
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
    })
}

/// Status changes reach the page's live stream within half a second; with
/// nobody subscribed this costs one atomic load.
fn publisher(feed: &Arc<Feed>, board: &Arc<Board>) -> JoinHandle<()> {
    let (feed, board) = (feed.clone(), board.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            feed.publish_board(&board);
        }
    })
}
