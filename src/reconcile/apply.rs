//! Applying a plan's steps through the providers, recording the inventory as it
//! goes (intent first: a pool is in the inventory before it is created, so a
//! crash in between can never leave poolwright's own pool unmanaged).

use crate::sync::Locked;
use std::sync::Mutex;

use super::events::EventSink;
use super::executor::Executor;
use super::retry::with_retry;
use crate::clock::Clock;
use crate::model::{Counts, Event};
use crate::model::{EventKind, PoolSpec};
use crate::plan::{Plan, PoolPlan, Step};
use crate::provider::{OpKey, Provider, Providers};
use crate::rollout::{Settings, Status};
use crate::spec::Config;
use crate::store::Journal;
use crate::store::{AppliedState, Inventory, InventoryEntry, InventoryStore, Origin};
use crate::sync::Stop;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error("provider {0:?} is not available")]
    NoProvider(String),
    #[error("provider {provider}: {source}")]
    Provider {
        provider: String,
        #[source]
        source: crate::provider::ProviderError,
    },
    /// The inventory could not be saved.
    #[error("{0:#}")]
    Inventory(anyhow::Error),
    #[error(transparent)]
    Executor(#[from] super::executor::ExecutorError),
    #[error("{0}; no node was replaced")]
    Cluster(#[from] crate::kube::ConnectError),
    #[error(
        "the roll reimages nodes in place, but provider {0:?} cannot reimage nodes; no node was replaced"
    )]
    CannotReimage(String),
    #[error("pool {0} no longer exists")]
    Gone(String),
    #[error("the plan's scale-down to {0} carries no rollout settings; plan again")]
    NoSettings(u32),
    #[error("rolled back: {0}")]
    RolledBack(String),
    #[error("Degraded: {reason}. After looking into it: `poolwright rollout resume {pool}`")]
    Degraded { pool: String, reason: String },
    #[error("paused ({reason}); `poolwright rollout resume {pool}` continues it")]
    Paused { pool: String, reason: String },
}

#[derive(Debug, Default)]
pub struct ApplyOutcome {
    pub steps_done: usize,
    /// `nodepool.NAME: STEP: error`, one per pool that stopped.
    pub errors: Vec<String>,
    /// A step failed (a provider refused, the rollout went Degraded or
    /// rolled back), as opposed to stopping for a human's pause: what a
    /// change across pools counts as a failed pool.
    pub failed: bool,
}

impl ApplyOutcome {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Clone, Copy)]
pub struct ApplyContext<'a> {
    pub config: &'a Config,
    pub journal: &'a Journal,
    /// Emergency override of disruption policies (recorded by the caller).
    pub override_policy: bool,
    pub providers: &'a Providers,
    /// Shared by the pools applied in parallel; saved whole under the lock.
    pub inventory: &'a Mutex<Inventory>,
    /// Where the inventory is saved (the state directory, or the cluster).
    pub inventory_store: &'a InventoryStore,
    pub events: &'a EventSink,
    pub clock: &'a dyn Clock,
    /// Called with a one-line progress message per step (the TTY shows it).
    pub progress: &'a (dyn Fn(&str) + Sync),
    /// Checked between steps: when requested, nothing new starts.
    pub stop: &'a Stop,
}

/// What a step does, in a few words (progress lines, events, status).
pub fn describe_step(step: &Step) -> String {
    match step {
        Step::CreatePool { spec } => format!("create pool ({} nodes)", spec.size),
        Step::DeletePool => "delete pool".into(),
        Step::Forget => "forget (already gone)".into(),
        Step::Adopt => "adopt".into(),
        Step::SetBounds { to } => match to {
            Some(b) => format!("set autoscaling bounds {}..{}", b.min, b.max),
            None => "remove autoscaling bounds".into(),
        },
        Step::Scale { from, to, .. } => format!("scale {from} -> {to}"),
        Step::UpdateInPlace { .. } => "update labels/annotations/taints/tags in place".into(),
        Step::SetTemplate { to } => format!("set template {}", to.hash()),
        Step::Roll {
            outdated,
            rollback: Some(_),
            ..
        } => format!("roll {outdated} node(s) back to the template before the halted change"),
        Step::Roll { outdated, .. } => format!("roll {outdated} outdated node(s)"),
    }
}

fn event_name(step: &Step) -> EventKind {
    match step {
        Step::CreatePool { .. } => EventKind::PoolCreated,
        Step::DeletePool => EventKind::PoolDeleted,
        Step::Forget => EventKind::PoolForgotten,
        Step::Adopt => EventKind::PoolAdopted,
        Step::SetBounds { .. } => EventKind::BoundsSet,
        Step::Scale { .. } => EventKind::PoolScaled,
        Step::UpdateInPlace { .. } => EventKind::UpdatedInPlace,
        Step::SetTemplate { .. } => EventKind::TemplateSet,
        Step::Roll { .. } => EventKind::RolloutCompleted,
    }
}

/// Apply every pool's steps, pool by pool. A failing pool stops at its failing
/// step; the others carry on.
pub async fn apply_plan(plan: &Plan, ctx: &ApplyContext<'_>) -> ApplyOutcome {
    let mut outcome = ApplyOutcome::default();
    for p in plan.pools.iter().filter(|p| p.has_changes()) {
        if ctx.stop.is_requested() {
            break;
        }
        if let Err(e) = pool_steps(p, ctx, &mut outcome).await {
            outcome.errors.push(e.0);
        }
    }
    outcome
}

/// Apply one pool's steps (the daemon runs pools in parallel through this).
pub async fn apply_pool(p: &PoolPlan, ctx: &ApplyContext<'_>) -> ApplyOutcome {
    let mut outcome = ApplyOutcome::default();
    if let Err(e) = pool_steps(p, ctx, &mut outcome).await {
        outcome.errors.push(e.0);
    }
    outcome
}

/// Why a pool's steps stopped: the pool, the step and the error, as the
/// operator reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct PoolStopped(String);

impl From<String> for PoolStopped {
    fn from(why: String) -> PoolStopped {
        PoolStopped(why)
    }
}

async fn pool_steps(
    p: &PoolPlan,
    ctx: &ApplyContext<'_>,
    outcome: &mut ApplyOutcome,
) -> Result<(), PoolStopped> {
    let who = format!("nodepool.{}", p.pool);
    let provider = ctx
        .providers
        .get(&p.provider)
        .cloned()
        .ok_or_else(|| format!("{who}: {}", StepError::NoProvider(p.provider.clone())))?;
    // Counts in events are the cluster's view when the pool has one (a
    // cordoned Node is not available, whatever the provider says).
    let counting = match &p.cluster {
        Some(_)
            if p.steps
                .iter()
                .any(|s| matches!(s, Step::Roll { .. } | Step::Scale { .. })) =>
        {
            attach_cluster(p, provider.clone(), ctx)
                .await
                .map_or_else(|_| provider.clone(), |(view, _)| view)
        }
        _ => provider.clone(),
    };
    for step in &p.steps {
        if ctx.stop.is_requested() {
            break;
        }
        // With `run --ha kubernetes`, only the lease holder takes a step.
        ctx.journal
            .may_act(&p.pool)
            .map_err(|e| format!("{who}: {}: {e}", describe_step(step)))?;
        (ctx.progress)(&format!("{who}: {}...", describe_step(step)));
        let result = run_step(p, step, provider.as_ref(), ctx).await;
        let counts = counts_after(counting.as_ref(), p).await;
        match result {
            Ok(StepEnd::Waiting(event, message)) => {
                // Not done: say so (never "completed"), and leave the rest of
                // this pool's steps to the run that finishes the rollout.
                (ctx.progress)(&format!("{who}: {message}"));
                ctx.events.emit(
                    Event::new(ctx.clock.now(), p.pool.clone(), event, message).counts(counts),
                );
                break;
            }
            Ok(StepEnd::Done) => {
                outcome.steps_done += 1;
                ctx.events.emit(
                    Event::new(
                        ctx.clock.now(),
                        p.pool.clone(),
                        event_name(step),
                        describe_step(step),
                    )
                    .counts(counts),
                );
            }
            Err(message) => {
                outcome.failed |= !matches!(message, StepError::Paused { .. });
                let text = format!("{who}: {}: {message}", describe_step(step));
                ctx.events.emit(
                    Event::new(
                        ctx.clock.now(),
                        p.pool.clone(),
                        EventKind::StepFailed,
                        text.clone(),
                    )
                    .counts(counts),
                );
                record_applied(p, provider.as_ref(), ctx)
                    .await
                    .map_err(|e| format!("{who}: {e}"))?;
                return Err(PoolStopped(text));
            }
        }
    }
    record_applied(p, provider.as_ref(), ctx)
        .await
        .map_err(|e| PoolStopped(format!("{who}: {e}")))
}

async fn counts_after(provider: &dyn Provider, p: &PoolPlan) -> Option<Counts> {
    let pools = provider
        .describe_pools(std::slice::from_ref(&p.pool))
        .await
        .ok()?;
    let pool = pools.into_iter().next()?;
    let desired = p
        .rollout
        .as_ref()
        .map_or(pool.template.hash(), |r| r.to_template);
    let size = p.target_size().unwrap_or(pool.size);
    Some(Counts::of(&pool, desired, size))
}

/// Change `pool`'s inventory entry and save it (saves are ordered; each
/// writes the entry as it is when its turn comes).
async fn update_inventory(
    ctx: &ApplyContext<'_>,
    pool: &str,
    change: impl FnOnce(&mut Inventory),
) -> Result<(), StepError> {
    change(&mut ctx.inventory.locked());
    ctx.inventory_store
        .save(ctx.inventory, pool)
        .await
        .map_err(StepError::Inventory)
}

/// A key unique to this execution of a step (the time, the process, a counter).
/// The wall clock on purpose: this is uniqueness, not a decision, and a
/// simulated clock restarts at the same instant on every run.
fn step_key(pool: &str, step: &Step) -> OpKey {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = jiff::Timestamp::now().as_nanosecond().to_string();
    let pid = std::process::id().to_string();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed).to_string();
    OpKey::derive(&[pool, &describe_step(step), &nanos, &pid, &n])
}

/// How a step that did not fail ended.
enum StepEnd {
    Done,
    /// The executor stopped before converging: waiting on the disruption
    /// policy, or asked to stop. The journal carries the rollout on.
    Waiting(EventKind, String),
}

async fn run_step(
    p: &PoolPlan,
    step: &Step,
    provider: &dyn Provider,
    ctx: &ApplyContext<'_>,
) -> Result<StepEnd, StepError> {
    let pool = p.pool.as_str();
    let err = |source: crate::provider::ProviderError| StepError::Provider {
        provider: p.provider.clone(),
        source,
    };
    let done = |r: Result<(), StepError>| r.map(|()| StepEnd::Done);
    // Pool-level calls are absolute ("hold 5 nodes", "this template"): one key
    // per step, reused by its retries; a resumed apply plans again from what
    // the provider reports, so repeating such a call with a new key is harmless.
    let key = step_key(pool, step);
    let key = &key;
    match step {
        Step::CreatePool { spec } => done(
            async {
                // Intent first: ours before it exists.
                update_inventory(ctx, pool, |inv| {
                    inv.pools.insert(
                        pool.to_string(),
                        InventoryEntry {
                            provider: p.provider.clone(),
                            origin: Origin::Created,
                            prevent_destroy: p.prevent_destroy,
                            last_applied: None,
                        },
                    );
                })
                .await?;
                let spec: &PoolSpec = spec;
                if let Err(e) = with_retry(ctx.clock, || provider.create_pool(spec, key)).await {
                    update_inventory(ctx, pool, |inv| {
                        inv.pools.remove(pool);
                    })
                    .await?;
                    return Err(err(e));
                }
                Ok(())
            }
            .await,
        ),
        Step::DeletePool => done(
            async {
                with_retry(ctx.clock, || provider.delete_pool(pool, key))
                    .await
                    .map_err(err)?;
                update_inventory(ctx, pool, |inv| {
                    inv.pools.remove(pool);
                })
                .await
            }
            .await,
        ),
        Step::Forget => done(
            update_inventory(ctx, pool, |inv| {
                inv.pools.remove(pool);
            })
            .await,
        ),
        Step::Adopt => {
            with_retry(ctx.clock, || provider.adopt_pool(pool, key))
                .await
                .map_err(err)?;
            done(
                update_inventory(ctx, pool, |inv| {
                    inv.pools.insert(
                        pool.to_string(),
                        InventoryEntry {
                            provider: p.provider.clone(),
                            origin: Origin::Adopted,
                            prevent_destroy: p.prevent_destroy,
                            last_applied: None,
                        },
                    );
                })
                .await,
            )
        }
        Step::SetBounds { to } => done(
            with_retry(ctx.clock, || provider.set_bounds(pool, *to, key))
                .await
                .map_err(err),
        ),
        // Growing launches nodes on the current template: nothing disrupts.
        Step::Scale { from, to, .. } if to >= from => done(
            with_retry(ctx.clock, || provider.set_size(pool, *to, key))
                .await
                .map_err(err),
        ),
        Step::UpdateInPlace { to } => done(
            with_retry(ctx.clock, || provider.update_in_place(pool, to, key))
                .await
                .map_err(err),
        ),
        Step::SetTemplate { to } => done(
            with_retry(ctx.clock, || provider.set_template(pool, to, key))
                .await
                .map_err(err),
        ),
        Step::Roll {
            template,
            settings,
            rollback,
            ..
        } => {
            roll(
                p,
                (**template).clone(),
                (**settings).clone(),
                rollback.as_deref(),
                ctx,
            )
            .await
        }
        // Shrinking goes through the executor too: victims are drained first and
        // the budget holds. (When the pool also rolls, the roll converges on
        // the new size itself, and no Scale step is planned beside it.)
        Step::Scale { to, settings, .. } => {
            let names = [pool.to_string()];
            let current = with_retry(ctx.clock, || provider.describe_pools(&names))
                .await
                .map_err(err)?
                .into_iter()
                .next()
                .ok_or_else(|| StepError::Gone(pool.to_string()))?;
            let settings = settings
                .as_deref()
                .cloned()
                .ok_or(StepError::NoSettings(*to))?;
            roll(p, current.template, settings, None, ctx).await
        }
    }
}

fn provider_of(
    ctx: &ApplyContext<'_>,
    p: &PoolPlan,
) -> Result<std::sync::Arc<dyn Provider>, StepError> {
    ctx.providers
        .get(&p.provider)
        .cloned()
        .ok_or_else(|| StepError::NoProvider(p.provider.clone()))
}

/// Run the shared rollout executor, with the settings the plan carries, until
/// the pool converges, stops for a human, or waits on the disruption policy
/// with nothing in flight.
async fn roll(
    p: &PoolPlan,
    template: crate::model::NodeTemplate,
    settings: Settings,
    rollback: Option<&crate::plan::RollBack>,
    ctx: &ApplyContext<'_>,
) -> Result<StepEnd, StepError> {
    let (provider, drainer) = attach_cluster(p, provider_of(ctx, p)?, ctx).await?;
    if settings.reimage && !provider.capabilities().reimage {
        return Err(StepError::CannotReimage(p.provider.clone()));
    }
    let poll = provider.capabilities().poll_interval;
    let mut rollout = match rollback {
        None => {
            Executor::start(
                &p.pool,
                template,
                settings,
                provider,
                drainer,
                ctx.journal,
                ctx.events,
                ctx.clock,
            )
            .await?
        }
        Some(rb) => {
            Executor::start_rollback(
                &p.pool,
                template,
                rb,
                settings,
                provider,
                drainer,
                ctx.journal,
                ctx.events,
                ctx.clock,
            )
            .await?
        }
    };
    rollout.override_policy = ctx.override_policy;
    rollout.stop = Some(ctx.stop.clone());
    match rollout.run(poll).await? {
        Status::Completed => Ok(StepEnd::Done),
        Status::Running if ctx.stop.is_requested() => Ok(StepEnd::Waiting(
            EventKind::RolloutStopped,
            "stopped at a safe point; the journal resumes the rollout".into(),
        )),
        Status::Running => Ok(StepEnd::Waiting(
            EventKind::RolloutWaiting,
            "waiting for the disruption policy; the rollout continues on the next apply (or under `poolwright run`) when it allows".into(),
        )),
        // Rolled back because a change across pools asked: done as asked.
        Status::RolledBack { .. } if rollback.is_some() => Ok(StepEnd::Done),
        Status::RolledBack { reason, .. } => Err(StepError::RolledBack(reason)),
        Status::Degraded { reason } => Err(StepError::Degraded {
            pool: p.pool.clone(),
            reason,
        }),
        Status::Paused { reason } => Err(StepError::Paused {
            pool: p.pool.clone(),
            reason,
        }),
    }
}

/// A pool with a `clusterRef` rolls through its cluster: observations carry
/// Kubernetes Ready, and nodes are cordoned and drained through the Eviction API.
async fn attach_cluster(
    p: &PoolPlan,
    provider: std::sync::Arc<dyn Provider>,
    ctx: &ApplyContext<'_>,
) -> Result<
    (
        std::sync::Arc<dyn Provider>,
        std::sync::Arc<dyn crate::provider::Drainer>,
    ),
    StepError,
> {
    let Some(name) = &p.cluster else {
        return Ok((provider, ctx.providers.drainer(&p.provider)));
    };
    let attached =
        crate::kube::attach::connect(ctx.config, &p.provider, name.as_str(), provider).await?;
    let drainer = std::sync::Arc::new(crate::kube::KubeDrainer::new(attached.cluster().clone()));
    Ok((std::sync::Arc::new(attached), drainer))
}

/// Record what the pool now looks like as "last applied", so later plans can
/// tell drift from our own changes.
async fn record_applied(
    p: &PoolPlan,
    provider: &dyn Provider,
    ctx: &ApplyContext<'_>,
) -> Result<(), StepError> {
    let known = {
        let inv = ctx.inventory.locked();
        inv.pools.contains_key(&p.pool)
    };
    if !known {
        return Ok(()); // deleted or forgotten
    }
    let observed = with_retry(ctx.clock, || {
        provider.describe_pools(std::slice::from_ref(&p.pool))
    })
    .await
    .map_err(|source| StepError::Provider {
        provider: p.provider.clone(),
        source,
    })?;
    let Some(pool) = observed.into_iter().next() else {
        return Ok(());
    };
    update_inventory(ctx, &p.pool, |inv| {
        if let Some(entry) = inv.pools.get_mut(&p.pool) {
            entry.prevent_destroy = p.prevent_destroy;
            entry.last_applied = Some(AppliedState {
                size: pool.size,
                template: pool.template.hash(),
                in_place: pool.in_place.clone(),
                autoscaling: pool.autoscaling,
            });
        }
    })
    .await
}
