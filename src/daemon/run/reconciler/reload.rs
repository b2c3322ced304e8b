//! Loading the desired state: the last one that loads cleanly stays in
//! force; a broken one is reported (every error as FILE:LINE:COL) and
//! changes nothing. Providers whose settings did not change are kept, with
//! their in-flight state. Only the pools whose documents changed (or whose
//! provider's or cluster's did) are queued: an edit to one pool of 10,000
//! plans one pool.

use crate::sync::Locked;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::daemon::run::queue::Trigger;
use crate::daemon::run::reconciler::{InForce, Reconciler};
use crate::plan::render::Revision;
use crate::provider::{CallObserver, Providers};
use crate::spec::Config;
use crate::spec::Limits;
use crate::spec::validate::Entry;

/// The longest a load of the desired state may take.
const LOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

impl Reconciler {
    /// From a remote config repo, a commit that loaded cleanly is in force:
    /// kept for a restart, told in status and by a `commit_applied` event.
    /// One that did not load changes nothing (the previous one stays).
    fn confirm_commit(&mut self, revision: Option<&Revision>, now: jiff::Timestamp) {
        let (crate::daemon::source::ConfigSource::Remote(remote), Some(revision)) =
            (&self.source, revision)
        else {
            return;
        };
        match remote.confirm(&revision.commit) {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(commit = %revision.commit, "{} is in force", revision.short());
                self.events.emit(crate::model::Event::new(
                    now,
                    String::new(),
                    crate::model::EventKind::CommitApplied,
                    format!(
                        "{} ({}) is in force",
                        revision.short(),
                        revision.subject_line()
                    ),
                ));
                self.board.update(|d| {
                    if let Some(g) = &mut d.git {
                        g.in_force = Some(revision.clone());
                    }
                });
            }
            Err(e) => tracing::error!(
                commit = %revision.commit,
                "keeping the commit in force for a restart: {e}; it is in force until then"
            ),
        }
    }

    /// Load the desired state again and queue the pools it changed (every
    /// pool when `why` asks for it: SIGHUP, a new leader, the first load).
    pub async fn reload(&mut self, why: Trigger) {
        let source = self.source.clone();
        let cache = self.parse_cache.clone();
        let loading = tokio::task::spawn_blocking(move || {
            let head = source.head();
            let mut cache = cache.locked();
            (source.load(&Limits::default(), &mut cache), head)
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
        let Some(mut config) = loaded.report.config else {
            let mut errors: Vec<String> = loaded.report.errors().map(|d| d.to_string()).collect();
            // A service installed before its config repository was cloned:
            // what to do, not only what failed.
            let dir = self.source.dir();
            if !matches!(self.source, crate::daemon::source::ConfigSource::Remote(_))
                && !dir.exists()
            {
                errors = vec![format!(
                    "nothing at {}: clone your config repository there, or point POOLWRIGHT_CONFIG in /etc/default/poolwright at it (then `sudo systemctl restart poolwright`); the daemon loads it once it appears",
                    dir.display()
                )];
            }
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
        // Each channel's image in force, written into its pools (under
        // `--ha`, the record the daemons share is read first).
        self.images_first_read().await;
        crate::images::resolve::resolve(&mut config, &self.images.record);
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
        // The pools whose desired state changed: an observation of them in
        // flight is not planned from (it may be of another provider), and
        // they are queued (every pool is, for a reload that asks for it).
        let edited = self
            .in_force
            .as_ref()
            .map(|f| changed_pools(&f.config, &config));
        let to_plan = match (&edited, why) {
            (Some(e), Trigger::Files | Trigger::Resync) => Some(e.clone()),
            _ => None,
        };
        let first_load = self.in_force.is_none();
        let short = revision.as_ref().map(Revision::short);
        // Kept for a restart before status names it.
        self.confirm_commit(revision.as_ref(), now);
        self.board.update(|d| {
            if changed {
                // An unchanged pool's plan is the same under the new revision.
                for p in &mut d.pools {
                    p.revision = short.clone();
                }
            }
            d.config.valid = true;
            d.config.errors.clear();
            d.config.last_load_at = Some(now);
            d.config.rejected_revision = None;
            if changed {
                d.config.revision = revision.clone();
                d.config.in_force_since = Some(now);
            }
        });
        // The pools of the desired state in force before, and now: one that
        // left the files is planned too (left alone, or deleted with --prune).
        self.in_force = Some(InForce {
            config: Arc::new(config),
            providers,
            revision,
        });
        if changed && let (Some(previews), Some(f)) = (&self.previews, &self.in_force) {
            previews
                .base
                .send_replace(Some(Arc::new(crate::daemon::source::previews::Base {
                    config: f.config.clone(),
                    providers: f.providers.clone(),
                    revision: f.revision.clone(),
                    images: Arc::new(self.images.record.clone()),
                })));
        }
        for pool in edited.iter().flatten() {
            self.schedule.touched(pool);
        }
        if changed {
            // The fleet's plan names the revision and the providers' settings.
            self.views.changed();
            // The FleetRollouts follow the new desired state: a change
            // across pools begins when governed pools want new templates.
            self.fleet_loaded().await;
        }
        if changed {
            self.images_loaded();
        }
        let overrides = crate::store::overrides::recent(&self.state.root, 20);
        self.board.update(|d| d.overrides = overrides);
        if first_load {
            let pools = self.known_pools().into_iter().collect();
            self.schedule.first_load(pools);
        }
        if changed {
            // Off the loop, and after the changed pools were planned: a trim
            // holds the allocator's locks while it walks the heap.
            tokio::spawn(async {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                let _ = tokio::task::spawn_blocking(release_freed_memory).await;
            });
        }
        match to_plan {
            None => self.enqueue_all(why),
            Some(pools) => {
                tracing::debug!(pools = pools.len(), "pools whose desired state changed");
                for pool in pools {
                    // Its provider may have changed: queue it under its own.
                    self.schedule.unqueue(&pool);
                    self.enqueue(&pool, why);
                }
            }
        }
    }
}

/// A load builds the whole desired state on a blocking thread, in that
/// thread's malloc arena; the one it replaces is freed on another. glibc keeps
/// freed arena memory mapped, so without this a large fleet's RSS creeps up
/// with every edit. One trim per changed load, off the loop and a little later.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The pools whose desired state differs between two loads: a pool added,
/// removed or edited, and every pool of a provider or cluster whose
/// document changed. Where a document sits (its file, its line) does not count.
fn changed_pools(old: &Config, new: &Config) -> BTreeSet<String> {
    let mut pools = changed_docs(&old.pools, &new.pools);
    // A FleetRollout edited (or its stages moved): the pools it governs, in
    // either load, are planned under their new stage.
    let fleets = changed_docs(&old.fleets, &new.fleets);
    if !fleets.is_empty() || old.staging != new.staging {
        for config in [old, new] {
            for (pool, (fleet, _)) in &config.staging.of_pool {
                let other = if std::ptr::eq(config, old) { new } else { old };
                if fleets.contains(fleet)
                    || other.staging.of_pool.get(pool) != config.staging.of_pool.get(pool)
                {
                    pools.insert(pool.clone());
                }
            }
        }
    }
    let providers = changed_docs(&old.providers, &new.providers);
    let clusters = changed_docs(&old.clusters, &new.clusters);
    if providers.is_empty() && clusters.is_empty() {
        return pools;
    }
    for config in [old, new] {
        for (name, e) in &config.pools {
            let spec = &e.doc.spec;
            if providers.contains(&spec.provider_ref.value)
                || spec
                    .cluster_ref
                    .as_ref()
                    .is_some_and(|c| clusters.contains(&c.value))
            {
                pools.insert(name.clone());
            }
        }
    }
    pools
}

fn changed_docs<T: PartialEq>(
    old: &BTreeMap<String, Entry<T>>,
    new: &BTreeMap<String, Entry<T>>,
) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = old
        .iter()
        .filter(|(name, e)| new.get(*name).is_none_or(|n| n.doc != e.doc))
        .map(|(name, _)| name.clone())
        .collect();
    out.extend(new.keys().filter(|k| !old.contains_key(*k)).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired_dir::load_dir;
    use crate::spec::Limits;

    fn load(files: &[(&str, &str)]) -> Config {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        load_dir(dir.path(), &Limits::default())
            .config
            .expect("valid")
    }

    const SIM: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 1}\n";
    const SIM2: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim2}\nspec: {type: sim, seed: 2}\n";

    fn pool(name: &str, provider: &str, size: u32) -> String {
        format!(
            "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: {provider}\n  size: {size}\n  template: {{image: img-1}}\n"
        )
    }

    #[test]
    fn only_the_edited_pools_changed() {
        let a = [
            pool("a", "sim", 3),
            pool("b", "sim", 3),
            pool("c", "sim2", 3),
        ]
        .concat();
        let old = load(&[("p.yaml", SIM), ("q.yaml", SIM2), ("pools.yaml", &a)]);
        // b resized, a moved down a line (a comment above it): only b.
        let b = [
            "# moved\n".to_string(),
            pool("a", "sim", 3),
            pool("b", "sim", 4),
            pool("c", "sim2", 3),
        ]
        .concat();
        let new = load(&[("p.yaml", SIM), ("q.yaml", SIM2), ("pools.yaml", &b)]);
        assert_eq!(changed_pools(&old, &new), BTreeSet::from(["b".to_string()]));
        // c removed, d added.
        let c = [
            pool("a", "sim", 3),
            pool("b", "sim", 3),
            pool("d", "sim", 3),
        ]
        .concat();
        let new = load(&[("p.yaml", SIM), ("q.yaml", SIM2), ("pools.yaml", &c)]);
        assert_eq!(
            changed_pools(&old, &new),
            BTreeSet::from(["c".to_string(), "d".to_string()])
        );
        // A provider's settings changed: every pool of it.
        let sim = SIM.replace("seed: 1", "seed: 9");
        let new = load(&[("p.yaml", &sim), ("q.yaml", SIM2), ("pools.yaml", &a)]);
        assert_eq!(
            changed_pools(&old, &new),
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
        assert!(changed_pools(&old, &old).is_empty());
    }
}
