//! Loading the desired state: the last one that loads cleanly stays in
//! force; a broken one is reported (every error as FILE:LINE:COL) and
//! changes nothing. Providers whose settings did not change are kept, with
//! their in-flight state.

use std::sync::Arc;

use super::{InForce, Reconciler};
use crate::plan::render::Revision;
use crate::provider::{CallObserver, Providers};
use crate::spec::Limits;

/// The longest a load of the desired state may take.
const LOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

impl Reconciler {
    pub(super) async fn reload(&mut self) {
        let source = self.source.clone();
        let loading = tokio::task::spawn_blocking(move || {
            let head = source.head();
            (source.load(&Limits::default()), head)
        });
        // Reads refuse anything but regular files, so a load cannot block on
        // a FIFO; the deadline covers what is left (a hung network mount).
        let loaded = match tokio::time::timeout(LOAD_DEADLINE, loading).await {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::error!("loading the desired state panicked: {e}");
                return;
            }
            Err(_) => {
                let message = format!(
                    "loading the desired state from {} took longer than {}s; keeping the desired state in force",
                    self.source.dir().display(),
                    LOAD_DEADLINE.as_secs()
                );
                tracing::error!("{message}");
                self.metrics.config_load_errors.inc();
                self.board.update(|d| {
                    d.config.valid = false;
                    d.config.errors = vec![message];
                });
                return;
            }
        };
        let (loaded, head) = loaded;
        self.head = head;
        let now = self.clock.now();
        for d in &loaded.report.diagnostics {
            // file:line:col for every problem, as `poolwright validate` prints it.
            if d.is_error() {
                tracing::error!("{d}");
            } else {
                tracing::warn!("{d}");
            }
        }
        let Some(config) = loaded.report.config else {
            let errors: Vec<String> = loaded.report.errors().map(|d| d.to_string()).collect();
            self.metrics.config_load_errors.inc();
            self.metrics.config_valid.set(0);
            tracing::error!(
                errors = errors.len(),
                "the desired state in {} is invalid; nothing changes: {}",
                self.source.dir().display(),
                if self.in_force.is_some() {
                    "the last good desired state stays in force"
                } else {
                    "no desired state is in force yet"
                }
            );
            self.board.update(|d| {
                d.config.valid = false;
                d.config.errors = errors;
                d.config.last_load_at = Some(now);
                d.config.rejected_revision = loaded.revision.clone();
            });
            return;
        };
        self.metrics.config_valid.set(1);
        let changed = self
            .in_force
            .as_ref()
            .is_none_or(|f| *f.config != config || f.revision != loaded.revision);
        let observer: Arc<dyn CallObserver> = self.metrics.clone();
        // A changed document set rebuilds the registry: providers whose
        // settings are unchanged are kept (with their in-flight state) and
        // learn their pools again, so a new or resized pool reaches them.
        let providers = match &self.in_force {
            Some(f) if *f.config == config => f.providers.clone(),
            previous => Arc::new(Providers::rebuild(
                &config,
                &self.state.root,
                self.clock.clone(),
                Some(observer),
                previous.as_ref().map(|f| f.providers.as_ref()),
            )),
        };
        for (name, e) in &providers.failed {
            tracing::error!(provider = %name, "provider unavailable: {e}");
        }
        self.events
            .set_revision(loaded.revision.as_ref().map(Revision::short));
        if changed {
            tracing::info!(
                revision = loaded
                    .revision
                    .as_ref()
                    .map(Revision::short)
                    .unwrap_or_default(),
                pools = config.pools.len(),
                "desired state loaded"
            );
        }
        let revision = loaded.revision.clone();
        self.board.update(|d| {
            d.config.valid = true;
            d.config.errors.clear();
            d.config.last_load_at = Some(now);
            d.config.rejected_revision = None;
            if changed {
                d.config.revision = revision.clone();
                d.config.in_force_since = Some(now);
            }
        });
        self.in_force = Some(InForce {
            config: Arc::new(config),
            providers,
            revision,
        });
    }
}
