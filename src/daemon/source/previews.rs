//! Previews of branches before they merge (`run --git-url --preview-refs`):
//! each fetched ref that matches is planned against the live pools, and so
//! is a branch tip that was refused (a rewrite, a bad signature), so a
//! reviewer sees what it would do. Served at `/v1/previews` and on the page.
//!
//! A preview never acts: it observes the pools through the providers in
//! force, reads the journals and the inventory, plans and renders. The
//! providers and clusters are those of the commit in force; a ref that
//! changes one is not planned (a branch could otherwise point a provider's
//! token or a kubeconfig at a server of its own).

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::daemon::source::RemoteSource;
use crate::fleet::view::FleetView;
use crate::plan::render::{Revision, Source, Style, render_json, render_text};
use crate::plan::{self, Headline, Plan, PlanOptions, Summary};
use crate::provider::Providers;
use crate::spec::{Config, Limits};
use crate::store::{Inventory, Journal};

/// What previews are planned against: the desired state in force.
pub struct Base {
    pub config: Arc<Config>,
    pub providers: Arc<Providers>,
    pub revision: Option<Revision>,
    /// Each image channel's record in force: a branch's pools that follow
    /// a channel are planned with its image in force.
    pub images: Arc<crate::images::Images>,
}

/// What the fetcher found to preview at its last fetch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Wanted {
    /// The refs matching `--preview-refs`, each with its tip.
    pub refs: Vec<(String, Revision)>,
    /// Matching refs beyond the most taken.
    pub dropped: usize,
    /// Why the refs could not be fetched (the previews stay as they were).
    pub error: Option<String>,
    /// The watched branch's tip, when it was refused, and why.
    pub refused: Option<(String, Revision, String)>,
}

/// One ref's preview.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The commit planned.
    pub commit: Revision,
    /// The commit in force it was compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared_with: Option<Revision>,
    pub planned_at: Timestamp,
    /// Set for the watched branch's tip that was not applied: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The pools the ref would change, and how.
    pub changes: Vec<PoolChange>,
    /// Why the ref could not be planned (invalid documents, a changed
    /// provider, a provider that did not answer).
    pub errors: Vec<String>,
    /// The plan as `plan` prints it, and as `plan -o json` and `-o markdown` do.
    #[serde(skip)]
    pub rendered: Option<Rendered>,
}

#[derive(Clone, Debug)]
pub struct Rendered {
    pub text: String,
    pub json: serde_json::Value,
    pub markdown: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolChange {
    pub pool: String,
    pub action: Headline,
    pub reason: String,
}

/// Every preview, as last planned.
#[derive(Default)]
pub struct Previews {
    inner: Mutex<Board>,
}

#[derive(Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Board {
    pub patterns: Vec<String>,
    pub previews: BTreeMap<String, Arc<Preview>>,
    /// Matching refs not planned (beyond the most taken).
    pub dropped: usize,
    /// Why the last fetch of the refs failed (the previews shown are older).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Previews {
    pub fn new(patterns: Vec<String>) -> Previews {
        Previews {
            inner: Mutex::new(Board {
                patterns,
                ..Board::default()
            }),
        }
    }

    pub fn board(&self) -> Board {
        self.inner.locked().clone()
    }

    /// A ref's preview, by its full name (never a path: a key of the map).
    pub fn get(&self, git_ref: &str) -> Option<Arc<Preview>> {
        self.inner.locked().previews.get(git_ref).cloned()
    }

    /// The refs to show, with those already planned; the rest are put in
    /// with [`Previews::put`] as they are planned.
    fn keep(&self, refs: &[&String], dropped: usize, error: Option<String>) {
        let mut b = self.inner.locked();
        b.previews.retain(|name, _| refs.contains(&name));
        b.dropped = dropped;
        b.error = error;
    }

    fn put(&self, preview: Preview) {
        let mut b = self.inner.locked();
        b.previews
            .insert(preview.git_ref.clone(), Arc::new(preview));
    }
}

/// The reconciler's side: the desired state in force (a new one plans the
/// previews again) and the FleetRollouts' changes as last seen.
#[derive(Clone)]
pub struct PreviewFeed {
    pub base: watch::Sender<Option<Arc<Base>>>,
    pub fleets: Arc<Mutex<BTreeMap<String, FleetView>>>,
}

impl PreviewFeed {
    pub fn set_fleets(&self, fleets: &BTreeMap<String, FleetView>) {
        *self.fleets.locked() = fleets.clone();
    }
}

/// Plans the previews whenever the fetcher finds refs, or the desired state
/// in force changes.
pub struct Previewer {
    pub source: Arc<RemoteSource>,
    pub previews: Arc<Previews>,
    pub feed: PreviewFeed,
    pub journal: Arc<Journal>,
    pub inventory: Arc<Mutex<Inventory>>,
    pub clock: Arc<dyn Clock>,
    pub prune: bool,
    /// A preview whose tip and comparison did not move is planned again
    /// after this (the fetch interval, at least a minute): the live pools
    /// change under it, but each plan observes every pool it names.
    pub refresh: std::time::Duration,
}

/// The most errors a preview lists.
const MAX_ERRORS: usize = 20;

impl Previewer {
    pub fn spawn(self, mut wanted: watch::Receiver<Wanted>) -> tokio::task::JoinHandle<()> {
        let mut base = self.feed.base.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = wanted.changed() => if r.is_err() { return },
                    r = base.changed() => if r.is_err() { return },
                }
                let w = wanted.borrow_and_update().clone();
                let b = base.borrow_and_update().clone();
                self.plan_all(&w, b.as_deref()).await;
            }
        })
    }

    /// Plan what `wanted` names, each preview published as soon as it is
    /// planned. When the refs could not be fetched, the previews stay as
    /// they were, with the error.
    async fn plan_all(&self, wanted: &Wanted, base: Option<&Base>) {
        let before = self.previews.board().previews;
        if let Some(error) = &wanted.error {
            let names: Vec<&String> = before.keys().collect();
            self.previews
                .keep(&names, wanted.dropped, Some(error.clone()));
            return;
        }
        let now = self.clock.now();
        let fresh = |p: &Preview, rev: &Revision| {
            p.commit.commit == rev.commit
                && p.compared_with.as_ref().map(|r| &r.commit)
                    == base.and_then(|b| b.revision.as_ref()).map(|r| &r.commit)
                && now.duration_since(p.planned_at).unsigned_abs() < self.refresh
        };
        let refused = wanted
            .refused
            .iter()
            .map(|(name, rev, why)| (name, rev, Some(why.clone())));
        let refs = wanted.refs.iter().map(|(name, rev)| (name, rev, None));
        let all: Vec<_> = refused.chain(refs).collect();
        let names: Vec<&String> = all.iter().map(|(name, _, _)| *name).collect();
        self.previews.keep(&names, wanted.dropped, None);
        for (name, rev, why) in all {
            let mut preview = match before.get(name) {
                Some(p) if fresh(p, rev) => Preview::clone(p),
                _ => self.plan_ref(name, rev, base).await,
            };
            preview.refused = why;
            self.previews.put(preview);
        }
        tracing::debug!(previews = names.len(), "previews planned");
    }

    async fn plan_ref(&self, name: &str, rev: &Revision, base: Option<&Base>) -> Preview {
        let mut preview = Preview {
            git_ref: name.to_string(),
            commit: rev.clone(),
            compared_with: base.and_then(|b| b.revision.clone()),
            planned_at: self.clock.now(),
            refused: None,
            summary: None,
            changes: Vec::new(),
            errors: Vec::new(),
            rendered: None,
        };
        let Some(base) = base else {
            preview.errors.push(
                "nothing is in force yet: a preview is planned against the desired state in force"
                    .into(),
            );
            return preview;
        };
        let mut config = match self.load(&rev.commit).await {
            Ok(config) => config,
            Err(errors) => {
                preview.errors = errors;
                return preview;
            }
        };
        crate::images::resolve::resolve(&mut config, &base.images);
        if let Err(e) = same_backends(&config, &base.config) {
            preview.errors.push(e.to_string());
            return preview;
        }
        let plan = self.plan(&config, base).await;
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => {
                preview.errors.push(e.to_string());
                return preview;
            }
        };
        let source = Source {
            dir: name.to_string(),
            revision: Some(rev.clone()),
        };
        let against = match &base.revision {
            Some(r) => format!("the live pools, with {} in force", r.short()),
            None => "the live pools".to_string(),
        };
        preview.summary = Some(plan.summary());
        preview.changes = plan
            .pools
            .iter()
            .filter(|p| p.has_changes() || p.hold.is_some())
            .map(|p| PoolChange {
                pool: p.pool.clone(),
                action: p.headline,
                reason: p.reason.clone(),
            })
            .collect();
        preview.rendered = Some(Rendered {
            text: render_text(&plan, &source, Style { color: false }),
            json: render_json(&plan, &source),
            markdown: crate::plan::markdown::render_markdown(&plan, &source, &against),
        });
        preview
    }

    /// The desired state committed at `commit`, or its errors.
    async fn load(&self, commit: &str) -> Result<Config, Vec<String>> {
        let (source, commit) = (self.source.clone(), commit.to_string());
        let loaded = tokio::task::spawn_blocking(move || {
            let limits = Limits::default();
            let files = source.mirror.read(&commit, &limits)?;
            Ok::<_, anyhow::Error>(crate::spec::validate::load_sources(&files, &limits))
        })
        .await;
        let report = match loaded {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => return Err(vec![format!("reading the commit: {e:#}")]),
            Err(e) => return Err(vec![format!("reading the commit: {e}")]),
        };
        match report.config {
            Some(config) => Ok(config),
            None => {
                let total = report.errors().count();
                let mut errors: Vec<String> = report
                    .errors()
                    .take(MAX_ERRORS)
                    .map(|d| d.to_string())
                    .collect();
                if total > MAX_ERRORS {
                    errors.push(format!("... and {} more", total - MAX_ERRORS));
                }
                Err(errors)
            }
        }
    }

    /// Observe the pools of `config` through the providers in force, read
    /// the journals, and plan. Read-only.
    async fn plan(&self, config: &Config, base: &Base) -> anyhow::Result<Plan> {
        let inventory = self.inventory.locked().clone();
        let mut observed =
            crate::reconcile::observe(config, &inventory, &base.providers, self.clock.as_ref())
                .await;
        observed.rollouts = self
            .journal
            .all()
            .await
            .map_err(|e| anyhow::anyhow!("reading the rollout journals: {e:#}"))?;
        observed.fleets = self.feed.fleets.locked().clone();
        let opts = PlanOptions {
            prune: self.prune,
            now: self.clock.now(),
            override_disruption: false,
        };
        Ok(plan::plan(config, &observed, &inventory, &opts))
    }
}

/// A ref is planned with the providers and clusters in force, so it may not
/// change them.
fn same_backends(config: &Config, in_force: &Config) -> Result<(), ChangesBackends> {
    let differ = config.backends_changed_from(in_force);
    if differ.is_empty() {
        return Ok(());
    }
    Err(ChangesBackends(differ))
}

/// A ref that changes providers or clusters ("provider NAME (FILE)"): it is
/// not previewed until they are merged.
#[derive(Debug, thiserror::Error)]
#[error(
    "changes {}: a preview is planned with the providers and clusters in force (their tokens, certificates and kubeconfigs are the bastion's), so it is planned once they are merged",
    .0.join(", ")
)]
struct ChangesBackends(Vec<String>);
