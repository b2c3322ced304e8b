//! `plan` and `apply`: load, observe, plan, show, and (for apply) act.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::apply_report::{Outcome, Report};
use super::saved::SavedPlan;
use super::snapshot::{
    Planned, check_state, claim_state, load, load_ref, load_remote_ref, options, plan_loaded,
    runtime, snapshot, source_of,
};
use super::{Common, PlanOutput, exit};
use crate::clock::{Clock, SystemClock};
use crate::model::EventKind;
use crate::plan::markdown::render_markdown;
use crate::plan::render::{Style, render_json, render_text};
use crate::plan::{self, Plan, PlanOptions};
use crate::reconcile::{ApplyContext, EventSink, apply_plan};
use crate::store::serves::Served;
use crate::store::{Journal, StateDir, StateLock};
use crate::sync::Stop;

fn style(common: &Common) -> Style {
    let no_color = common.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    Style {
        color: !no_color && std::io::stdout().is_terminal(),
    }
}

/// Record an emergency override for every pool whose policy it overrides:
/// an event, and a line in `STATE/overrides.jsonl` (shown by `status`).
fn record_overrides(
    plan: &Plan,
    reason: &str,
    state: &StateDir,
    sink: &EventSink,
    clock: &dyn Clock,
) -> anyhow::Result<()> {
    let by = crate::store::overrides::operator();
    for p in plan.pools.iter().filter(|p| p.has_changes()) {
        let Some(policy) = &p.policy_overridden else {
            continue;
        };
        let record = crate::store::overrides::OverrideRecord {
            at: clock.now(),
            pool: p.pool.clone(),
            reason: reason.to_string(),
            by: by.clone(),
            policy: policy.clone(),
        };
        crate::store::overrides::append(&state.root, &record)?;
        sink.emit(crate::model::Event::new(
            record.at,
            p.pool.clone(),
            EventKind::DisruptionPolicyOverridden,
            format!("{policy} by {by}: {reason:?}"),
        ));
    }
    Ok(())
}

/// What `plan` plans: DIR on disk, DIR as committed at a ref of its
/// repository (`--git-ref`), or a ref of a remote (`--git-url --git-ref`).
#[derive(Clone, Copy)]
pub(super) enum Planning<'a> {
    Dir,
    Ref(&'a str),
    Remote(&'a str, &'a super::git_args::RemoteArgs),
}

impl<'a> Planning<'a> {
    pub fn new(
        git_ref: Option<&'a str>,
        remote: &'a super::git_args::RemoteArgs,
    ) -> anyhow::Result<Planning<'a>> {
        Ok(match (git_ref, remote.git_url.is_some()) {
            (None, false) => Planning::Dir,
            (Some(r), false) => Planning::Ref(r),
            (Some(r), true) => Planning::Remote(r, remote),
            (None, true) => {
                anyhow::bail!("plan --git-url needs --git-ref BRANCH: the branch to plan")
            }
        })
    }
}

pub(super) fn plan(
    dir: &Path,
    common: &Common,
    output: PlanOutput,
    what: Planning<'_>,
    flags: PlanFlags,
    out: Option<&Path>,
    forecast: bool,
) -> anyhow::Result<u8> {
    // A branch of a remote (`--git-url --git-ref`, a pull request's review)
    // is planned against the state directory as it is, whether that serves
    // the repository or a checkout of it; planning changes nothing.
    if let Planning::Dir | Planning::Ref(_) = what {
        check_state(&common.state_dir, &Served::dir(dir))?;
    }
    let loaded = match what {
        Planning::Dir => load(dir).map(|c| (c, source_of(dir))),
        Planning::Ref(r) => load_ref(dir, r)?,
        Planning::Remote(r, remote) => load_remote_ref(remote, r)?,
    };
    let Some((config, source)) = loaded else {
        return Ok(exit::FAILED);
    };
    let Some(Planned {
        clock,
        state,
        snap,
        plan,
    }) = plan_loaded(config, &source, common)?
    else {
        return Ok(exit::FAILED);
    };
    match output {
        PlanOutput::Text => print!("{}", render_text(&plan, &source, style(common))),
        PlanOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&render_json(&plan, &source))?
        ),
        PlanOutput::Markdown => print!(
            "{}",
            render_markdown(
                &plan,
                &source,
                &format!(
                    "the live pools at {}",
                    clock.now().round(jiff::Unit::Second)?
                )
            )
        ),
    }
    // Only the text is followed by more text: JSON and Markdown stay whole.
    let text = output == PlanOutput::Text;
    // The plan is saved before it is forecast: a forecast never costs it.
    let saved = match out {
        Some(path) => {
            SavedPlan::new(dir, common, &snap, &plan, source.clone(), clock.now())?.save(path)?;
            Some(path)
        }
        None => None,
    };
    if forecast && text {
        match super::forecast_cmd::after_plan(&snap, &plan, &state, clock.now()) {
            Ok(forecast) => print!("{forecast}"),
            Err(e) => eprintln!("warning: no forecast: {e:#}"),
        }
    }
    if let Some(path) = saved
        && text
    {
        println!(
            "\nSaved the plan to {}. Apply exactly it with: poolwright apply {}",
            path.display(),
            path.display()
        );
    }
    let errors = plan.summary().errors;
    let unread = unread_clusters(&snap.observed, flags.allow_unreachable);
    Ok(if errors > 0 || unread {
        for p in plan
            .pools
            .iter()
            .filter(|p| p.headline == plan::Headline::Error)
        {
            eprintln!("error: nodepool.{}: {}", p.pool, p.reason);
        }
        exit::FAILED
    } else if flags.detailed_exitcode && plan.differs() {
        exit::CHANGES
    } else {
        exit::OK
    })
}

/// `plan`'s switches of the exit status.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PlanFlags {
    /// 2 when there are changes.
    pub detailed_exitcode: bool,
    /// A cluster that could not be read is a warning, not a failure.
    pub allow_unreachable: bool,
}

/// Says which clusters could not be read; whether that fails the command
/// (a plan that cannot see Ready, cordons or budgets is not one to trust).
fn unread_clusters(observed: &plan::Observed, allowed: bool) -> bool {
    for (cluster, e) in &observed.clusters_unread {
        eprintln!(
            "{}: cluster {cluster} could not be read: {e}; its pools were planned without their \
             nodes' Ready state, cordons and disruption budgets{}",
            if allowed { "warning" } else { "error" },
            if allowed {
                ""
            } else {
                " (pass --allow-unreachable to accept that)"
            }
        );
    }
    !allowed && !observed.clusters_unread.is_empty()
}

/// Whether apply may ask, and whether it was told not to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asking {
    /// --auto-approve: never ask, apply.
    pub auto_approve: bool,
    /// --input=false: never ask, refuse where a question was needed.
    pub input: bool,
}

fn confirm(input: bool) -> anyhow::Result<bool> {
    if !input {
        anyhow::bail!(
            "refusing to apply without confirmation: --input=false forbids the question; pass --auto-approve, or apply a saved plan"
        );
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "refusing to apply without confirmation: standard input is not a terminal; pass --auto-approve"
        );
    }
    print!(
        "\nDo you want to perform these actions?\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: "
    );
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

pub(super) fn apply(
    target: &Path,
    common: &Common,
    asking: Asking,
    allow_unreachable: bool,
    events: Option<&Path>,
    override_reason: Option<String>,
    report: Report,
) -> anyhow::Result<u8> {
    let saved = SavedPlan::read_if_plan(target)?;
    let applying_saved = saved.is_some();
    let auto_approve = asking.auto_approve;
    if report.is_json() && !applying_saved && !auto_approve {
        anyhow::bail!(
            "apply -o json cannot ask for confirmation: pass --auto-approve, or apply a saved plan (plan --out FILE)"
        );
    }
    if saved.is_some() && override_reason.is_some() {
        anyhow::bail!(
            "--override-disruption-policy applies to a fresh plan: apply the directory ({}) with it, not a saved plan",
            saved.as_ref().map(|s| s.dir.clone()).unwrap_or_default()
        );
    }
    if let Some(reason) = &override_reason
        && reason.trim().is_empty()
    {
        anyhow::bail!("--reason must say why the disruption policy is overridden");
    }
    let dir = saved
        .as_ref()
        .map_or(target.to_path_buf(), |s| s.dir.clone().into());
    let common = match &saved {
        Some(s) => Common {
            state_dir: s.state_dir.clone().into(),
            prune: s.prune,
            no_color: common.no_color,
        },
        None => common.clone(),
    };
    let state = StateDir::new(&common.state_dir);
    // Held from before observing until the end, so nothing else acts in between.
    let _lock = StateLock::acquire(&state.root, "poolwright apply")?;
    claim_state(&state.root, &Served::dir(&dir))?;
    let Some(config) = load(&dir) else {
        report.outcome(
            Outcome::Error,
            0,
            &[format!(
                "{}: the desired state is invalid (the errors are above); nothing was changed",
                dir.display()
            )],
            "",
        );
        return Ok(exit::FAILED);
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let rt = runtime()?;
    let source = source_of(&dir);
    let revision = source.revision.as_ref().map(|r| r.short());
    let mut snap = rt.block_on(snapshot(config, &state, clock.clone(), revision.clone()))?;
    // A fresh plan with FleetRollouts runs their changes stage by stage; a
    // saved plan is applied as it was reviewed, and no further.
    let staged = saved.is_none() && !snap.config.fleets.is_empty();
    let plan: Plan = match saved {
        Some(s) => {
            s.check_fresh(&snap)?;
            s.plan
        }
        None => plan::plan(
            &snap.config,
            &snap.observed,
            &snap.inventory,
            &PlanOptions {
                override_disruption: override_reason.is_some(),
                ..options(&common, clock.as_ref())
            },
        ),
    };
    report.plan(&plan, &source, style(&common));
    if unread_clusters(&snap.observed, allow_unreachable) {
        anyhow::bail!("nothing was changed");
    }
    if let Some(p) = plan
        .pools
        .iter()
        .find(|p| p.headline == plan::Headline::Error)
    {
        anyhow::bail!("nodepool.{}: {}; nothing was changed", p.pool, p.reason);
    }
    // Pools whose rollout waits for a human are not acted on; apply says so
    // and fails, so that an unattended run does not look converged.
    let waiting: Vec<String> = plan
        .pools
        .iter()
        .filter_map(|p| p.waiting().map(|w| format!("nodepool.{}: {w}", p.pool)))
        .collect();
    let held = plan.summary().held > 0;
    if !(plan.has_changes() || staged && held) {
        for w in &waiting {
            eprintln!("error: {w}");
        }
        return Ok(if waiting.is_empty() {
            report.outcome(Outcome::NoChanges, 0, &[], "");
            exit::OK
        } else {
            report.outcome(Outcome::Stopped, 0, &waiting, "");
            exit::FAILED
        });
    }
    // A saved plan was the approval (as in Terraform): it applies without a
    // question; a directory's fresh plan needs one, or --auto-approve.
    if !auto_approve && !applying_saved && !confirm(asking.input)? {
        report.outcome(Outcome::Cancelled, 0, &[], "\nApply cancelled.");
        return Ok(exit::FAILED);
    }
    if !applying_saved && !snap.config.channels.is_empty() {
        // The images this apply rolls to are the channels' images in force.
        crate::store::images::save(&crate::store::images::path(&state.root), &snap.images)?;
    }
    let mut sink = match events {
        Some(path) => EventSink::to_file(path, crate::files::Rotation::default())?,
        None => EventSink::none(),
    };
    let latencies = Arc::new(crate::store::latency::LatencyRecorder::new(
        crate::store::latency::LatencyStore::new(&state.root),
    ));
    sink = sink.observed_by({
        let latencies = latencies.clone();
        move |e| latencies.record(e)
    });
    // On a terminal, a live bar per pool; in a CI log, timestamped lines and
    // a heartbeat every 30 s.
    let view = super::progress_log::View::for_stderr(!report.is_json());
    let report = report.over(view.bars());
    sink = sink.observed_by(view.observer());
    if let Some(print) = report.event_observer() {
        sink = sink.observed_by(print);
    }
    sink.set_revision(source.revision.as_ref().map(|r| r.short()));
    let progress = |line: &str| view.say(line);
    if let Some(reason) = &override_reason {
        record_overrides(&plan, reason, &state, &sink, clock.as_ref())?;
    }
    let inventory_store = crate::store::InventoryStore::file(state.inventory());
    let journal = Journal::new(state.journal_dir());
    let inventory = std::sync::Mutex::new(std::mem::take(&mut snap.inventory));
    // Ctrl-C, or the SIGTERM a CI runner or `timeout` sends, stops at the
    // next safe point; the journal resumes from there. The handlers are in
    // place before the first step, so no signal finds the default action.
    let stop = Stop::new();
    {
        use tokio::signal::unix::{SignalKind, signal};
        let _rt = rt.enter();
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let stop = stop.clone();
        let report = report.clone();
        rt.spawn(async move {
            let what = tokio::select! {
                _ = int.recv() => "Interrupted",
                _ = term.recv() => "Terminated (SIGTERM)",
            };
            report.note(&format!(
                "\n{what}: stopping at the next safe point (steps in flight finish); \
                 a second signal exits at once (the journal resumes either way)..."
            ));
            stop.request();
            // A safe point may be minutes away (a drain): a second signal
            // leaves now, as a crash would; every intent is journaled first.
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            report
                .abandoned("Second signal: exiting now; the next apply resumes from the journal.");
            std::process::exit(130);
        });
    }
    let ctx = ApplyContext {
        config: &snap.config,
        journal: &journal,
        override_policy: override_reason.is_some(),
        providers: &snap.providers,
        inventory: &inventory,
        inventory_store: &inventory_store,
        events: &sink,
        clock: clock.as_ref(),
        progress: &progress,
        stop: &stop,
    };
    if staged {
        let code = super::staged::Staged {
            rt: &rt,
            ctx: &ctx,
            state: &state,
            clock: &clock,
            opts: PlanOptions {
                override_disruption: override_reason.is_some(),
                ..options(&common, clock.as_ref())
            },
            revision,
            report: report.clone(),
            waiting: &waiting,
        }
        .drive(plan);
        view.finish();
        let code = code?;
        latencies.flush();
        for w in &waiting {
            eprintln!("error: {w}");
        }
        // The outcome line (the waiting pools in it) was the driver's.
        return Ok(if waiting.is_empty() {
            code
        } else {
            exit::FAILED
        });
    }
    let outcome = rt.block_on(apply_plan(&plan, &ctx));
    // The bars stop before the summary is printed under them.
    view.finish();
    latencies.flush();
    let errors: Vec<String> = outcome.errors.iter().chain(&waiting).cloned().collect();
    if stop.is_requested() {
        report.outcome(
            Outcome::Interrupted,
            outcome.steps_done,
            &errors,
            &format!(
                "\nApply interrupted: {} step(s) done; run it again to continue.",
                outcome.steps_done
            ),
        );
        return Ok(exit::FAILED);
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    if errors.is_empty() && outcome.is_ok() {
        report.outcome(
            Outcome::Complete,
            outcome.steps_done,
            &[],
            &format!("\nApply complete: {} step(s) done.", outcome.steps_done),
        );
        Ok(exit::OK)
    } else {
        report.outcome(
            Outcome::Stopped,
            outcome.steps_done,
            &errors,
            &format!(
                "\nApply stopped: {} step(s) done, {} pool(s) failed or waiting for a human (see the errors above).",
                outcome.steps_done,
                errors.len()
            ),
        );
        Ok(exit::FAILED)
    }
}
