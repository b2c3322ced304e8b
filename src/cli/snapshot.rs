//! What a plan is computed from: the desired state (loaded, diagnostics
//! printed), the providers built from it, the inventory, and the pools and
//! journals as observed now. `plan`, `apply` and `forecast` all start here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::Common;
use crate::clock::{Clock, SystemClock};
use crate::model::TemplateHash;
use crate::plan::render::Source;
use crate::plan::{self, Observed, Plan, PlanOptions};
use crate::provider::Providers;
use crate::reconcile::observe;
use crate::spec::{Config, Limits};
use crate::store::serves::Served;
use crate::store::{FleetJournal, Inventory, Journal, StateDir};

/// Load and validate, printing diagnostics; `None` means invalid (nothing acts).
pub(super) fn load(dir: &Path) -> Option<Config> {
    let report = crate::desired_dir::load_dir(dir, &Limits::default());
    for d in &report.diagnostics {
        eprintln!("{d}");
    }
    if report.config.is_none() {
        eprintln!(
            "{} is invalid: {} error(s); nothing was changed",
            dir.display(),
            report.errors().count()
        );
    }
    report.config
}

pub(super) fn source_of(dir: &Path) -> Source {
    Source {
        dir: dir.display().to_string(),
        revision: crate::git::rev::revision(dir),
    }
}

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Everything a plan is computed from.
pub(super) struct Snapshot {
    pub config: Config,
    pub providers: Providers,
    pub inventory: Inventory,
    pub observed: Observed,
    /// Each image channel's record as this plan resolved it (`apply`
    /// keeps it).
    pub images: crate::images::Images,
}

/// Observe the pools of `config` and read the journals. `revision` (the
/// desired state's, `branch@sha`) names the change across pools this
/// desired state would begin.
pub(super) async fn snapshot(
    mut config: Config,
    state: &StateDir,
    clock: Arc<dyn Clock>,
    revision: Option<String>,
) -> anyhow::Result<Snapshot> {
    let providers = Providers::build(&config, &state.root, clock.clone());
    let mut fleets = BTreeMap::new();
    for (name, journal) in FleetJournal::new(state.fleet_dir())
        .of(config.fleets.keys().map(String::as_str))
        .await
    {
        // A journal that cannot be read: nothing is planned from a guess.
        fleets.insert(name, journal.map_err(anyhow::Error::msg)?);
    }
    let images = resolve_images(&mut config, &providers, state, &fleets, clock.now()).await?;
    let inventory = Inventory::load(&state.inventory())?;
    let mut observed = observe(&config, &inventory, &providers, clock.as_ref()).await;
    observed.rollouts = Journal::new(state.journal_dir()).all().await?;
    let id = |targets: &BTreeMap<String, TemplateHash>| {
        crate::fleet::change::change_id(revision.as_deref(), targets)
    };
    observed.fleets = crate::fleet::view::views(&config, &fleets, &id, clock.now());
    Ok(Snapshot {
        config,
        providers,
        inventory,
        observed,
        images,
    })
}

/// Each channel the pools follow is asked once; its newest eligible image
/// is written into its pools (a source that fails keeps the image last in
/// force, said on stderr). While a change of a FleetRollout governing a
/// channel's pools is in flight (`fleets`, as journaled), a newer image is
/// queued behind it, as the daemon queues it.
async fn resolve_images(
    config: &mut Config,
    providers: &Providers,
    state: &StateDir,
    fleets: &BTreeMap<String, crate::fleet::FleetState>,
    now: jiff::Timestamp,
) -> anyhow::Result<crate::images::Images> {
    if config.channels.is_empty() {
        return Ok(crate::images::Images::default());
    }
    let record = crate::store::images::load(&crate::store::images::path(&state.root))?;
    let rules = crate::fleet::view::rules(config);
    let in_flight_fleets: Vec<&crate::fleet::rules::Rules> = rules
        .iter()
        .filter(|(name, _)| {
            fleets.get(*name).is_some_and(|s| {
                matches!(
                    s.change.status,
                    crate::fleet::change::ChangeStatus::Running
                        | crate::fleet::change::ChangeStatus::Paused { .. }
                )
            })
        })
        .map(|(_, r)| r.as_ref())
        .collect();
    let followers = crate::images::resolve::followers(config);
    let in_flight = |channel: &str| {
        followers.get(channel).is_some_and(|pools| {
            pools
                .iter()
                .any(|p| in_flight_fleets.iter().any(|r| r.stage_of(p).is_some()))
        })
    };
    let (images, notes) =
        crate::reconcile::images::ask_all(config, providers, record, &in_flight, now).await;
    for n in &notes {
        if let crate::images::Note::SourceFailed { .. } = n {
            eprintln!("warning: {}", n.message());
        }
    }
    crate::images::resolve::resolve(config, &images);
    // The providers see the pools with their images (an Auto Scaling group
    // on a version made for one is known by it).
    providers.bind(config);
    Ok(images)
}

pub(super) fn options(common: &Common, clock: &dyn Clock) -> PlanOptions {
    PlanOptions {
        prune: common.prune,
        now: clock.now(),
        override_disruption: false,
    }
}

/// A plan of the desired state in `dir` against the pools as observed now.
pub(super) struct Planned {
    pub clock: Arc<dyn Clock>,
    pub state: StateDir,
    pub snap: Snapshot,
    pub plan: Plan,
}

/// The desired state of `dir` as committed at `git_ref` (`plan --git-ref`),
/// and where it came from; diagnostics printed, `None` when invalid.
pub(super) fn load_ref(dir: &Path, git_ref: &str) -> anyhow::Result<Option<(Config, Source)>> {
    let (files, revision) = crate::git::tree::read_ref(dir, git_ref, &Limits::default())?;
    let report = crate::spec::validate::load_sources(&files, &Limits::default());
    for d in &report.diagnostics {
        eprintln!("{d}");
    }
    let source = Source {
        dir: dir.display().to_string(),
        revision: Some(revision),
    };
    match report.config {
        Some(config) => {
            trusted_backends(&config, dir, git_ref)?;
            Ok(Some((config, source)))
        }
        None => {
            eprintln!(
                "{} at {} is invalid: {} error(s)",
                dir.display(),
                git_ref,
                report.errors().count()
            );
            Ok(None)
        }
    }
}

/// A branch planned before it merges is not trusted yet: it is planned
/// with the providers and clusters of the checkout (DIR on disk) and no
/// others, so a branch cannot point a provider's token, certificate or
/// kubeconfig at a server of its own during `plan`.
fn trusted_backends(config: &Config, dir: &Path, git_ref: &str) -> anyhow::Result<()> {
    let report = crate::desired_dir::load_dir(dir, &Limits::default());
    let Some(trusted) = report.config else {
        anyhow::bail!(
            "--git-ref {git_ref}: {} on disk is invalid, and its providers and clusters are the ones a branch is planned with; fix it first",
            dir.display()
        );
    };
    let differ = config.backends_changed_from(&trusted);
    anyhow::ensure!(
        differ.is_empty(),
        "--git-ref {git_ref} changes {}: a branch is planned with the providers and clusters of {} as they are on disk (their tokens, certificates and kubeconfigs are this host's), so these must be merged first or planned where they are in force",
        differ.join(", "),
        dir.display()
    );
    Ok(())
}

/// `plan --git-url URL --git-ref REF`: REF and the applied branch fetched
/// into a temporary clone; REF's desired state, which may change no provider
/// or cluster of the branch's tip (those are what it is planned with, as the
/// daemon's previews are). Diagnostics printed; `None` when invalid.
pub(super) fn load_remote_ref(
    remote: &super::git_args::RemoteArgs,
    git_ref: &str,
) -> anyhow::Result<Option<(Config, Source)>> {
    let full = if git_ref.starts_with("refs/") {
        git_ref.to_string()
    } else {
        format!("refs/heads/{git_ref}")
    };
    anyhow::ensure!(
        !full.contains('*') && crate::git::mirror::check_ref_pattern(&full).is_ok(),
        "--git-ref {git_ref:?}: not a branch or a full ref name (pr/7, refs/merge-requests/7/head)"
    );
    let branch_ref = format!("refs/heads/{}", remote.git_branch);
    let wanted = if full == branch_ref {
        Vec::new()
    } else {
        vec![full.clone()]
    };
    let Some(opts) = remote.options(wanted) else {
        anyhow::bail!("--git-url is needed to fetch --git-ref {git_ref}");
    };
    let shown = crate::git::mirror::shown_url(&opts.url);
    if opts.url.starts_with("git://") || opts.url.starts_with("http://") {
        eprintln!(
            "warning: --git-url {shown}: this transport has no integrity (anyone on the network path can serve the providers' settings this plan runs with); use https:// or ssh"
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix("poolwright-plan-")
        .tempdir()?;
    let mirror =
        crate::git::mirror::Mirror::open(tmp.path(), opts)?.in_child(std::env::current_exe()?);
    let fetched = mirror.fetch()?;
    let tip = if full == branch_ref {
        fetched.revision.clone()
    } else {
        fetched
            .previews
            .iter()
            .find(|(name, _)| *name == full)
            .map(|(_, rev)| rev.clone())
            .ok_or_else(|| anyhow::anyhow!("{shown} has no {full}"))?
    };
    let limits = Limits::default();
    let read = |commit: &str| -> anyhow::Result<crate::spec::validate::LoadReport> {
        Ok(crate::spec::validate::load_sources(
            &mirror.read(commit, &limits)?,
            &limits,
        ))
    };
    let report = read(&tip.commit)?;
    for d in &report.diagnostics {
        eprintln!("{d}");
    }
    let Some(config) = report.config else {
        eprintln!(
            "{full} at {} is invalid: {} error(s)",
            tip.short(),
            report.errors().count()
        );
        return Ok(None);
    };
    let Some(trusted) = read(&fetched.revision.commit)?.config else {
        anyhow::bail!(
            "--git-ref {git_ref}: the tip of {} ({}) is invalid, and its providers and clusters are the ones a branch is planned with; fix it first",
            remote.git_branch,
            fetched.revision.short()
        );
    };
    let differ = config.backends_changed_from(&trusted);
    anyhow::ensure!(
        differ.is_empty(),
        "--git-ref {git_ref} changes {}: a branch is planned with the providers and clusters of {} as they are at its tip {} (their tokens, certificates and kubeconfigs are this host's), so these must be merged first",
        differ.join(", "),
        remote.git_branch,
        fetched.revision.short()
    );
    let relative = trusted.relative_backend_paths();
    anyhow::ensure!(
        relative.is_empty(),
        "{}: a fetched config's paths resolve from the working directory, which may be a checkout of the branch planned; make them absolute",
        relative.join(", ")
    );
    let source = Source {
        dir: format!("{shown} {full}"),
        revision: Some(tip),
    };
    Ok(Some((config, source)))
}

/// Load (printing diagnostics; `None` when invalid), observe and plan, as
/// `plan` and `forecast` both start.
pub(super) fn load_and_plan(dir: &Path, common: &Common) -> anyhow::Result<Option<Planned>> {
    check_state(&common.state_dir, &Served::dir(dir))?;
    let Some(config) = load(dir) else {
        return Ok(None);
    };
    plan_loaded(config, &source_of(dir), common)
}

/// A command that changes nothing (`plan`, `forecast`) stops when the state
/// directory serves another desired state, naming both.
pub(super) fn check_state(state_dir: &Path, served: &Served) -> anyhow::Result<()> {
    Ok(crate::store::serves::check(state_dir, served)?)
}

/// The state directory serves `served`, or the command stops: a state
/// directory of another desired state is refused, naming both (its
/// inventory is not this one's, and `--prune` would delete its pools). One
/// of an earlier poolwright is claimed, and that is said once.
pub(super) fn claim_state(state_dir: &Path, served: &Served) -> anyhow::Result<()> {
    use crate::store::serves::{Claim, claim, earlier_note};
    match claim(state_dir, served, jiff::Timestamp::now())? {
        Claim::Same | Claim::New => {}
        Claim::Earlier => eprintln!("note: {}", earlier_note(state_dir, served)),
    }
    Ok(())
}

/// Observe and plan a loaded desired state.
pub(super) fn plan_loaded(
    config: Config,
    source: &Source,
    common: &Common,
) -> anyhow::Result<Option<Planned>> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let state = StateDir::new(&common.state_dir);
    let revision = source.revision.as_ref().map(|r| r.short());
    let snap = runtime()?.block_on(snapshot(config, &state, clock.clone(), revision))?;
    let plan = plan::plan(
        &snap.config,
        &snap.observed,
        &snap.inventory,
        &options(common, clock.as_ref()),
    );
    Ok(Some(Planned {
        clock,
        state,
        snap,
        plan,
    }))
}
