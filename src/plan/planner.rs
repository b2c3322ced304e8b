//! The planner: a pure function of the desired state, what providers reported,
//! the inventory and an instant. No I/O, no clock.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::attributes::{attributes, diff};
use super::{
    Drift, Headline, Hold, HumanWait, PdbFinding, Plan, PoolPlan, Preflight, RolloutPlan, Step,
};
use crate::fleet::FleetView;
use crate::model::inventory::{AppliedState, Inventory, InventoryEntry};
use crate::model::{InPlace, NodeTemplate, ObservedPool, PoolSpec, TemplateHash};
use crate::rollout::change::PolicyHold;
use crate::rollout::{RolloutState, Settings, Status, Strategy, change};
use crate::spec::Config;
use crate::spec::types::{ChangeClass, IgnoredAttribute, NodePoolDoc, OnDrainTimeout, Semantics};

/// What the providers reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Pools that exist, by name.
    pub pools: BTreeMap<String, ObservedPool>,
    /// Providers that could not be asked, with the error.
    pub unreachable: BTreeMap<String, String>,
    /// Each pool's rollout journal (an earlier apply is mid-rollout, or it
    /// waits for a human), or why it cannot be read.
    pub rollouts: BTreeMap<String, Result<RolloutState, crate::model::Unreadable>>,
    /// Providers that can reimage nodes in place.
    pub reimaging: BTreeSet<String>,
    /// Providers that act only on some template fields (plug-ins say which).
    pub acts_on: BTreeMap<String, Vec<crate::model::TemplateField>>,
    /// Each FleetRollout's rules and change (from its journal).
    pub fleets: BTreeMap<String, FleetView>,
    /// For pools with a cluster: by node, the PodDisruptionBudgets that
    /// allow no disruption over pods on it; or why the cluster could not be
    /// read (its name and the error).
    pub budgets: BTreeMap<String, Result<NodeBudgets, (String, String)>>,
    /// Clusters that could not be read, with the error: their pools are seen
    /// without Ready, cordons or budgets.
    pub clusters_unread: BTreeMap<String, String>,
}

/// By provider node id, the PodDisruptionBudgets that would block its drain.
type NodeBudgets = BTreeMap<String, Vec<crate::model::PdbBlock>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Delete managed, unprotected pools that are no longer in the files.
    pub prune: bool,
    pub now: Timestamp,
    /// Emergency override of disruption policies (recorded by the caller).
    pub override_disruption: bool,
}

pub fn plan(
    config: &Config,
    observed: &Observed,
    inventory: &Inventory,
    opts: &PlanOptions,
) -> Plan {
    let mut pools: Vec<PoolPlan> = config
        .pools
        .values()
        .map(|e| {
            plan_pool(
                &e.doc,
                observed,
                inventory.pools.get(e.doc.metadata.name.as_str()),
                opts,
            )
        })
        .collect();
    for (name, entry) in &inventory.pools {
        if !config.pools.contains_key(name) {
            pools.push(plan_missing(name, entry, config, observed, opts));
        }
    }
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    let fleets = super::fleet::stage_plans(&observed.fleets, &pools);
    Plan {
        pools,
        fleets,
        images: super::channel::notes(config),
    }
}

/// One pool's plan, as [`plan`] would make it: a pool of the files, or a
/// managed pool no longer in them. `None` for a pool that is neither (it is
/// not the planner's any more). The daemon plans the pools that are due with
/// this, one at a time, and assembles the fleet's plan from the results.
pub fn plan_one(
    config: &Config,
    observed: &Observed,
    inventory: &Inventory,
    opts: &PlanOptions,
    name: &str,
) -> Option<PoolPlan> {
    match (config.pools.get(name), inventory.pools.get(name)) {
        (Some(e), entry) => Some(plan_pool(&e.doc, observed, entry, opts)),
        (None, Some(entry)) => Some(plan_missing(name, entry, config, observed, opts)),
        (None, None) => None,
    }
}

fn base(pool: &str, provider: &str, headline: Headline, reason: impl Into<String>) -> PoolPlan {
    PoolPlan {
        pool: pool.to_string(),
        provider: provider.to_string(),
        cluster: None,
        headline,
        reason: reason.into(),
        attributes: Vec::new(),
        steps: Vec::new(),
        rollout: None,
        hold: None,
        drift: Vec::new(),
        prevent_destroy: false,
        policy_overridden: None,
        notes: Vec::new(),
        fleet: None,
        preflight: None,
        deferred: None,
    }
}

/// A managed pool that is not in the files: deleted only when pruning is on,
/// its provider is still known, and it is not protected.
fn plan_missing(
    name: &str,
    entry: &InventoryEntry,
    config: &Config,
    observed: &Observed,
    opts: &PlanOptions,
) -> PoolPlan {
    let provider = entry.provider.as_str();
    let left = |reason: String| base(name, provider, Headline::LeftAlone, reason);
    if !config.providers.contains_key(provider) {
        return left(format!(
            "not in the files, and its provider {provider:?} is not either; left alone"
        ));
    }
    if let Some(err) = observed.unreachable.get(provider) {
        return base(
            name,
            provider,
            Headline::Error,
            format!("provider {provider:?} could not be observed: {err}"),
        );
    }
    let Some(obs) = observed.pools.get(name) else {
        let mut p = base(
            name,
            provider,
            Headline::NoOp,
            "no longer exists at the provider; forgotten from the inventory",
        );
        p.steps.push(Step::Forget);
        return p;
    };
    if entry.prevent_destroy {
        return left(
            "not in the files, but protected by lifecycle.preventDestroy; left alone".into(),
        );
    }
    if !opts.prune {
        return left(
            "not in the files; pruning is disabled (plan/apply --prune deletes it); left alone"
                .into(),
        );
    }
    let mut p = base(
        name,
        provider,
        Headline::Delete,
        "not in the files, and pruning is enabled",
    );
    p.attributes = diff(
        Some(attributes(
            Some(obs.size),
            obs.autoscaling,
            &obs.template,
            &obs.in_place,
        )),
        None,
    );
    p.steps.push(Step::DeletePool);
    p
}

/// The desired template and in-place attributes, with ignored attributes taken
/// from what is observed (so ignoring them never causes a change).
fn effective(
    doc: &NodePoolDoc,
    spec: &PoolSpec,
    observed: Option<&ObservedPool>,
) -> (NodeTemplate, InPlace) {
    let mut t = spec.template.clone();
    let mut ip = spec.in_place.clone();
    if let Some(o) = observed {
        for attr in &doc.spec.lifecycle.ignore_changes {
            match attr {
                IgnoredAttribute::Image => t.image = o.template.image.clone(),
                IgnoredAttribute::InstanceType => {
                    t.instance_type = o.template.instance_type.clone()
                }
                IgnoredAttribute::KubernetesVersion => {
                    t.kubernetes_version = o.template.kubernetes_version.clone()
                }
                IgnoredAttribute::Labels => ip.labels = o.in_place.labels.clone(),
                IgnoredAttribute::Annotations => ip.annotations = o.in_place.annotations.clone(),
                IgnoredAttribute::Taints => ip.taints = o.in_place.taints.clone(),
                IgnoredAttribute::Tags => ip.tags = o.in_place.tags.clone(),
                IgnoredAttribute::Size => {}
            }
        }
    }
    (t, ip)
}

/// Why `provider` would refuse `template` (it acts only on some fields).
fn refused_template(
    observed: &Observed,
    provider: &str,
    template: &NodeTemplate,
) -> Option<String> {
    let acts_on = observed.acts_on.get(provider)?;
    crate::model::template_refusal(&format!("provider {provider:?}"), acts_on, template)
}

/// The pool's plan when its provider would refuse the template: an error,
/// nothing planned, as `apply` would find it.
fn refused(p: &mut PoolPlan, why: String) {
    p.headline = Headline::Error;
    p.reason = format!(
        "{why}: apply would refuse the template. Remove the field(s), or use a provider that acts on them"
    );
    p.attributes.clear();
    p.steps.clear();
}

/// One pool's plan, in phases (as `rollout::decide` runs): what cannot be
/// planned at all, a pool that does not exist, adoption, the wanted state,
/// the journal, what is outdated, the steps, a FleetRollout's say, the PDB
/// pre-flight, the disruption policy, and the headline. Each phase either
/// adds to the plan or ends it (returning the plan as it stands).
fn plan_pool(
    doc: &NodePoolDoc,
    observed: &Observed,
    entry: Option<&InventoryEntry>,
    opts: &PlanOptions,
) -> PoolPlan {
    let cx = Pool {
        doc,
        observed,
        entry,
        opts,
        name: doc.metadata.name.as_str(),
        provider: doc.spec.provider_ref.as_str(),
        spec: PoolSpec::from_doc(doc),
    };
    if let Some(p) = cx.unplannable() {
        return p;
    }
    let mut p = base(
        cx.name,
        cx.provider,
        Headline::NoOp,
        "matches the desired state",
    );
    p.prevent_destroy = doc.spec.lifecycle.prevent_destroy;
    p.cluster = doc.spec.cluster_ref.as_ref().map(|c| c.value.clone());
    let Some(obs) = observed.pools.get(cx.name) else {
        let mut p = cx.absent(p);
        super::channel::annotate(&mut p, doc, opts.now);
        return p;
    };
    if !cx.adopt(&mut p) {
        return p;
    }
    let Some(want) = cx.wanted(&mut p, obs) else {
        return p;
    };
    // The FleetRollout governing the pool, and whether its change halted
    // with onHalt: rollback: then the pool rolls back to the template it had,
    // even from a rollout Degraded on the template the change brought.
    let view = observed
        .fleets
        .values()
        .find(|v| v.rules.stage_of(cx.name).is_some());
    let back = view.and_then(|v| super::fleet::turned_back(v, cx.name));
    let Some((journal, resuming)) = cx.journal(&mut p, obs, &want, back.is_some()) else {
        return p;
    };
    if obs.autoscaling != cx.spec.autoscaling {
        p.steps.push(Step::SetBounds {
            to: cx.spec.autoscaling,
        });
    }
    let due = match &back {
        Some(back) => {
            let due = cx.outdated(&mut p, obs, back.template.hash());
            cx.roll_back(&mut p, obs, &want, &due, back, journal);
            due
        }
        None => {
            let due = cx.outdated(&mut p, obs, want.hash);
            cx.steps(&mut p, obs, &want, &due, journal, resuming);
            due
        }
    };
    // A FleetRollout may hold the roll (a later stage, no free slot, a halt)
    // before the policy looks at what is left.
    if let Some(view) = view {
        super::fleet::govern(&mut p, view, back.is_some());
    }
    let rolled_to = back.as_ref().map_or(want.hash, |b| b.template.hash());
    preflight(&mut p, doc, observed, obs, rolled_to, due.aging.as_ref());
    cx.policy(&mut p);
    cx.headline(&mut p, obs, &want, &due, journal, resuming);
    super::channel::annotate(&mut p, doc, opts.now);
    p
}

/// What every phase of a pool's plan reads.
struct Pool<'a> {
    doc: &'a NodePoolDoc,
    observed: &'a Observed,
    entry: Option<&'a InventoryEntry>,
    opts: &'a PlanOptions,
    name: &'a str,
    provider: &'a str,
    spec: PoolSpec,
}

/// What the pool should be, against what it is.
struct Wanted {
    template: NodeTemplate,
    hash: TemplateHash,
    in_place: crate::model::InPlace,
    /// The size the pool converges on.
    target: u32,
}

/// The nodes a roll would replace.
struct Due {
    /// Old nodes on another template, less those do-not-disrupt holds.
    by_template: u32,
    /// Nodes past `lifecycle.maxNodeAge` (on the target template or not).
    aging: Option<super::lifetime::Aging>,
    aged: u32,
    /// Either.
    outdated: u32,
}

impl<'a> Pool<'a> {
    /// A pool whose provider could not be asked, or whose provider changed:
    /// nothing is planned, and the plan says why.
    fn unplannable(&self) -> Option<PoolPlan> {
        let (name, provider) = (self.name, self.provider);
        if let Some(crate::spec::types::ImageRef::Channel {
            channel,
            resolved: Some(Err(why)),
        }) = &self.doc.spec.template.image
        {
            return Some(base(
                name,
                provider,
                Headline::Error,
                format!(
                    "image channel {} has no image in force: {why}; nothing is planned for the pool until it has one",
                    channel.value
                ),
            ));
        }
        if let Some(err) = self.observed.unreachable.get(provider) {
            return Some(base(
                name,
                provider,
                Headline::Error,
                format!("provider {provider:?} could not be observed: {err}"),
            ));
        }
        if let Some(e) = self.entry
            && e.provider != provider
        {
            return Some(base(
                name,
                provider,
                Headline::LeftAlone,
                format!(
                    "providerRef changed from {:?} to {provider:?}: poolwright does not move pools between providers; \
                     create a pool with a new name instead",
                    e.provider
                ),
            ));
        }
        None
    }

    /// A pool the provider does not have: created (again).
    fn absent(&self, mut p: PoolPlan) -> PoolPlan {
        let spec = &self.spec;
        p.headline = Headline::Create;
        p.reason = match self.entry {
            Some(_) => "was deleted outside poolwright; it will be created again".into(),
            None => "does not exist yet".into(),
        };
        if let Some(e) = self.entry
            && let Some(last) = &e.last_applied
        {
            p.drift.push(Drift {
                attribute: "pool".into(),
                last_applied: format!("{} nodes", last.size),
                observed: "deleted".into(),
                reverted: true,
            });
        }
        p.attributes = diff(
            None,
            Some(attributes(
                Some(spec.size),
                spec.autoscaling,
                &spec.template,
                &spec.in_place,
            )),
        );
        if let Some(why) = refused_template(self.observed, self.provider, &spec.template) {
            refused(&mut p, why);
            return p;
        }
        p.steps.push(Step::CreatePool {
            spec: Box::new(spec.clone()),
        });
        p
    }

    /// A pool poolwright did not create is managed only with `adopt: true`;
    /// `false` when it is left alone.
    fn adopt(&self, p: &mut PoolPlan) -> bool {
        if self.entry.is_some() {
            return true;
        }
        if !self.doc.spec.adopt {
            p.headline = Headline::LeftAlone;
            p.reason = format!(
                "exists at provider {:?} but was not created by poolwright; set spec.adopt: true to manage it",
                self.provider
            );
            return false;
        }
        p.steps.push(Step::Adopt);
        true
    }

    /// The template, in-place attributes and size wanted, and their diff
    /// against the pool; `None` (the plan ends) when the provider would
    /// refuse the template.
    fn wanted(&self, p: &mut PoolPlan, obs: &crate::model::ObservedPool) -> Option<Wanted> {
        let (doc, spec) = (self.doc, &self.spec);
        let (template, in_place) = effective(doc, spec, Some(obs));
        let hash = template.hash();
        if obs.template.hash() != hash
            && let Some(why) = refused_template(self.observed, self.provider, &template)
        {
            refused(p, why);
            return None;
        }
        let target = target_size(spec, doc, obs.size);
        p.attributes = diff(
            Some(attributes(
                Some(obs.size),
                obs.autoscaling,
                &obs.template,
                &obs.in_place,
            )),
            Some(attributes(
                Some(target),
                spec.autoscaling,
                &template,
                &in_place,
            )),
        );
        Some(Wanted {
            template,
            hash,
            in_place,
            target,
        })
    }

    /// The pool's rollout journal, and whether the roll it records resumes;
    /// `None` (the plan ends) when the journal cannot be read or the rollout
    /// waits for a human. Drift is what changed since the last apply, unless
    /// a roll under way explains it.
    fn journal(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        want: &Wanted,
        turned_back: bool,
    ) -> Option<(Option<&'a RolloutState>, bool)> {
        let name = self.name;
        let journal = self.observed.rollouts.get(name);
        // A journal that cannot be read: nothing is planned for the pool (a
        // rollout might be in flight), and the plan says how to get out.
        if let Some(Err(e)) = journal {
            p.headline = Headline::Error;
            p.reason = format!(
                "{e}; nothing is done for this pool until the journal is repaired or removed. \
                 Check the pool first (`poolwright rollout status {name}` shows the journal's place); \
                 a removed journal makes the next apply start the rollout afresh from what the provider reports"
            );
            p.attributes.clear();
            return None;
        }
        let journal = journal.and_then(|j| j.as_ref().ok());
        // A rollout waiting for a human: nothing happens until `rollout resume`.
        // But a rollout Degraded on the template of a change that halted
        // with onHalt: rollback is what a bad template leaves behind: the
        // roll back supersedes it (a pause is a person's, and stays).
        if let Some(r) = journal
            && let Some(hold) = waiting_for_a_human(r, want.hash, name)
            && !(turned_back && matches!(r.status, Status::Degraded { .. }))
        {
            p.headline = Headline::LeftAlone;
            p.reason = hold.to_string();
            p.hold = Some(hold);
            return None;
        }
        let resuming = journal.is_some_and(|r| r.target == want.hash && !r.status.is_terminal());
        if let Some(last) = self.entry.and_then(|e| e.last_applied.as_ref())
            && !resuming
        {
            p.drift = drift(last, obs, self.doc, &self.spec);
        }
        if resuming {
            // The surge of the rollout under way is its own doing, not a size
            // change asked for: the roll converges on the target itself.
            p.attributes.retain(|a| a.name != "size");
        }
        Some((journal, resuming))
    }

    /// The nodes a roll would replace: on another template (less those
    /// do-not-disrupt holds, which the notes name), or past maxNodeAge.
    fn outdated(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        hash: TemplateHash,
    ) -> Due {
        // Old nodes held by do-not-disrupt (their own label or annotation, as
        // the provider and the cluster report it) are left out of the roll.
        let held: Vec<(&str, String)> = obs
            .live_nodes()
            .filter(|n| n.template != hash)
            .filter_map(|n| crate::model::hold::of_node(n).map(|why| (&*n.id, why)))
            .collect();
        if !held.is_empty() {
            let named: Vec<String> = held
                .iter()
                .take(5)
                .map(|(id, why)| format!("{id} ({why})"))
                .collect();
            p.notes.push(format!(
                "do-not-disrupt holds {} outdated node(s), left out of the roll and kept in service: {}{}",
                held.len(),
                named.join(", "),
                if held.len() > 5 { ", ..." } else { "" }
            ));
        }
        let by_template = (obs.outdated(hash) - held.len()) as u32;
        let aging = self
            .doc
            .spec
            .lifecycle
            .max_node_age
            .map(|age| super::lifetime::due(obs, hash, age, self.opts.now));
        let aged = aging.as_ref().map_or(0, |a| a.due.len() as u32);
        if let Some(a) = &aging {
            p.notes.extend(a.describe());
        }
        Due {
            by_template,
            outdated: by_template + aged,
            aging,
            aged,
        }
    }

    /// The rollout settings of a roll (or a scale-down) to `target`.
    fn settings(&self, target: u32, due: &Due) -> Box<Settings> {
        let mut set = Settings::from_doc(self.doc, target);
        set.retire_before = due
            .aging
            .as_ref()
            .filter(|a| !a.due.is_empty())
            .map(|a| a.cutoff);
        // Yandex: with no expansion, nodes are updated in place where the
        // provider can reimage.
        if set.semantics == Semantics::Yandex
            && set.budget.surge == 0
            && self.observed.reimaging.contains(self.provider)
        {
            set.reimage = true;
        }
        Box::new(set)
    }

    /// The steps: a roll when nodes are outdated (or a journaled roll
    /// resumes), else the template and size set directly; then in-place
    /// attributes.
    fn steps(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        want: &Wanted,
        due: &Due,
        journal: Option<&RolloutState>,
        resuming: bool,
    ) {
        let (template, hash, target) = (&want.template, want.hash, want.target);
        // A rollout journaled as under way with nothing outdated left (a
        // process stopped after the last replacement, before the rollout
        // noted that it ended) is resumed too: its next step finds it done
        // and says so.
        if due.outdated > 0 || resuming {
            let classes = if let Some(r) = journal.filter(|_| resuming) {
                // The journal says what kind of change the roll under way
                // makes: the template it set already would read as no change.
                r.classes.clone()
            } else if obs.template.hash() != hash {
                let mut classes = change::classify(&obs.template, template);
                // A roll superseded mid-way leaves its old nodes behind: they
                // still make the change it was making.
                if let Some(r) = journal.filter(|r| !r.status.is_terminal()) {
                    classes = change::union(&classes, &r.classes);
                }
                classes
            } else if let Some(r) = journal.filter(|r| !r.status.is_terminal()) {
                // The template is set, but the journal records a superseded
                // roll (a stop between setting it and journaling the new
                // roll): the executor begins with the superseded roll's
                // classes, and so does the plan.
                change::union(&change::classify(&obs.template, template), &r.classes)
            } else if due.by_template == 0 && due.aged > 0 {
                // Only nodes past lifecycle.maxNodeAge: replacing them is a repair.
                vec![ChangeClass::Repair]
            } else {
                ChangeClass::ALL.to_vec()
            };
            self.roll(p, obs, template, target, due, classes, None);
        } else {
            // New nodes (scale-up) must launch on the new template.
            if obs.template.hash() != hash {
                p.steps.push(Step::SetTemplate {
                    to: template.clone(),
                });
            }
            if obs.size != target {
                p.steps.push(Step::Scale {
                    from: obs.size,
                    to: target,
                    settings: (target < obs.size).then(|| self.settings(target, due)),
                });
            }
        }
        if obs.in_place != want.in_place {
            p.steps.push(Step::UpdateInPlace {
                to: want.in_place.clone(),
            });
        }
    }

    /// A halted change's roll back (`onHalt: rollback`) to the template the
    /// pool had before it, built like any roll (the same settings, in-place
    /// reimage and node-age rules), as a repair; nothing when the pool and
    /// its nodes are back already and no roll back is under way. In-place
    /// attributes still follow the files.
    fn roll_back(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        want: &Wanted,
        due: &Due,
        back: &super::fleet::TurnBack,
        journal: Option<&RolloutState>,
    ) {
        let to = back.template.hash();
        let under_way = journal.is_some_and(|r| r.target == to && !r.status.is_terminal());
        if due.outdated > 0 || obs.template.hash() != to || under_way {
            let rollback = super::RollBack {
                failed: want.hash,
                reason: back.reason.clone(),
            };
            self.roll(
                p,
                obs,
                &back.template,
                want.target,
                due,
                vec![ChangeClass::Repair],
                Some(rollback),
            );
        }
        if obs.in_place != want.in_place {
            p.steps.push(Step::UpdateInPlace {
                to: want.in_place.clone(),
            });
        }
    }

    /// The one place a roll is built: the rollout settings (with the
    /// planner's rules), the roll's plan, and its step, for a roll forward
    /// and a roll back alike. The executor sets the template and converges
    /// on the size itself.
    #[allow(clippy::too_many_arguments)]
    fn roll(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        template: &NodeTemplate,
        target: u32,
        due: &Due,
        classes: Vec<ChangeClass>,
        rollback: Option<super::RollBack>,
    ) {
        let hash = template.hash();
        let set = self.settings(target, due);
        let budget = set.budget;
        let from: Vec<TemplateHash> = obs
            .live_nodes()
            .map(|n| n.template)
            .filter(|t| *t != hash)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        p.rollout = Some(RolloutPlan {
            outdated: due.outdated,
            size: target,
            strategy: budget.strategy(),
            budget,
            bounds: budget.bounds(target),
            estimated_waves: due.outdated.div_ceil(budget.concurrency().max(1)),
            from_templates: from,
            to_template: hash,
            semantics: set.semantics,
            classes,
            reimage: set.reimage,
            waves: set.waves,
            order: set.order.clone(),
        });
        if set.semantics == Semantics::Kubernetes && budget.concurrency() > 20 {
            p.notes.push(format!(
                "maxSurge + maxUnavailable is {} here: GKE would refuse more than 20 nodes at once (rollout.semantics: gke)",
                budget.concurrency()
            ));
        }
        p.steps.push(Step::Roll {
            outdated: due.outdated,
            size: target,
            template: Box::new(template.clone()),
            settings: set,
            rollback: rollback.map(Box::new),
        });
    }

    /// Disruptive steps wait for the disruption policy, for the change
    /// classes it applies to; the others go ahead. An emergency override
    /// lets them start, and the plan says what it overrides.
    fn policy(&self, p: &mut PoolPlan) {
        let doc = self.doc;
        if !p.steps.iter().any(Step::is_disruptive) {
            return;
        }
        let classes = p
            .rollout
            .as_ref()
            .map_or(vec![ChangeClass::Config], |r| r.classes.clone());
        let semantics = doc.spec.rollout.semantics();
        let (reason, opens) =
            match change::policy_hold(&doc.spec.disruption, semantics, &classes, self.opts.now) {
                PolicyHold::Open => return,
                PolicyHold::NotHeld { reason, applies_to } => {
                    let names: Vec<&str> = applies_to.iter().map(|c| c.as_str()).collect();
                    p.notes.push(format!(
                        "{} not held: the {reason} applies to {} only",
                        change::describe(&classes),
                        names.join(", ")
                    ));
                    return;
                }
                PolicyHold::Held { reason, opens } => (reason, opens),
            };
        if self.opts.override_disruption {
            p.policy_overridden = Some(format!("{reason}, overridden"));
        } else {
            let tz = doc
                .spec
                .disruption
                .windows
                .first()
                .map(|w| w.timezone.value.clone());
            p.hold = Some(Hold::Policy {
                policy: reason,
                until: opens,
                timezone: tz,
            });
            // The template change waits with its roll: new nodes keep the
            // current template until the roll may start.
            p.deferred = p
                .steps
                .iter()
                .find(|s| matches!(s, Step::Roll { .. }))
                .cloned()
                .map(Box::new);
            p.steps.retain(|s| !s.is_disruptive());
        }
    }

    /// The headline and the reason the plan gives for the pool.
    fn headline(
        &self,
        p: &mut PoolPlan,
        obs: &crate::model::ObservedPool,
        want: &Wanted,
        due: &Due,
        journal: Option<&RolloutState>,
        resuming: bool,
    ) {
        let (doc, hash, target) = (self.doc, want.hash, want.target);
        let (by_template, aged) = (due.by_template, due.aged);
        let rolls = p.rollout.is_some();
        let updates = p.steps.iter().any(|s| !matches!(s, Step::Roll { .. }));
        p.headline = match (rolls, p.rollout.as_ref().map(|r| r.strategy)) {
            (true, Some(Strategy::TerminateBeforeCreate)) => Headline::RollTerminateFirst,
            (true, _) => Headline::RollCreateFirst,
            (false, _) if updates || !p.steps.is_empty() => Headline::Update,
            _ => Headline::NoOp,
        };
        let superseding = journal.is_some_and(|r| r.target != hash && !r.status.is_terminal());
        let rolling_back = p.fleet.as_ref().is_some_and(|f| f.rollback);
        p.reason = match (&p.rollout, updates) {
            (Some(r), _) if rolling_back => format!(
                "its FleetRollout's change halted (onHalt: rollback): {} of {} nodes go back to template {}",
                r.outdated,
                obs.live_nodes().count(),
                r.to_template
            ),
            (Some(r), _) if resuming => format!(
                "a rollout started earlier is in progress and resumes: {} of {} nodes run an outdated template (now {} nodes, converging on {})",
                r.outdated,
                obs.live_nodes().count(),
                obs.size,
                target
            ),
            (Some(r), _) if superseding => format!(
                "{} of {} nodes run an outdated template; this supersedes a rollout to an earlier template, whose steps in flight finish first",
                r.outdated,
                obs.live_nodes().count()
            ),
            (Some(r), _) if by_template == 0 && aged > 0 => format!(
                "{} of {} nodes are past lifecycle.maxNodeAge ({})",
                r.outdated,
                obs.live_nodes().count(),
                doc.spec.lifecycle.max_node_age.expect("aged")
            ),
            (Some(r), _) => format!(
                "{} of {} nodes run an outdated template",
                r.outdated,
                obs.live_nodes().count()
            ),
            (None, true) => "attributes differ from the desired state".into(),
            (None, false) => "matches the desired state".into(),
        };
    }
}

/// The PDB pre-flight of a roll of a pool with a cluster: which budgets allow
/// no disruption now over pods on the nodes the roll will drain (the old
/// ones not held, and those past `maxNodeAge`), and what `drain.onTimeout`
/// then does. With `drain.preflight: refuse`, such a roll (or one whose
/// cluster could not be read) is not started.
fn preflight(
    p: &mut PoolPlan,
    doc: &NodePoolDoc,
    observed: &Observed,
    obs: &crate::model::ObservedPool,
    hash: TemplateHash,
    aging: Option<&super::lifetime::Aging>,
) {
    let Some(cluster) = &doc.spec.cluster_ref else {
        return;
    };
    if !p.steps.iter().any(|s| matches!(s, Step::Roll { .. })) {
        return;
    }
    let due: BTreeSet<&str> = aging
        .map(|a| a.due.iter().map(|(id, _)| &**id).collect())
        .unwrap_or_default();
    let drained: Vec<&str> = obs
        .live_nodes()
        .filter(|n| {
            (n.template != hash && crate::model::hold::of_node(n).is_none()) || due.contains(&*n.id)
        })
        .map(|n| &*n.id)
        .collect();
    let drain = &doc.spec.rollout.drain;
    let consequence = match drain.on_timeout {
        OnDrainTimeout::Fail => format!("drain.onTimeout fail → Degraded after {}", drain.timeout),
        OnDrainTimeout::Force => format!(
            "drain.onTimeout force → its pods deleted after {}",
            drain.timeout
        ),
        OnDrainTimeout::Quarantine => format!(
            "drain.onTimeout quarantine → the node quarantined after {}",
            drain.timeout
        ),
    };
    let found = match observed.budgets.get(&p.pool) {
        None => Preflight::Unreachable {
            cluster: cluster.value.clone(),
            error: "the cluster was not read".into(),
        },
        Some(Err((c, e))) => Preflight::Unreachable {
            cluster: c.clone(),
            error: e.clone(),
        },
        Some(Ok(by_node)) => {
            let mut blocking: Vec<PdbFinding> = Vec::new();
            for id in &drained {
                for b in by_node.get(*id).into_iter().flatten() {
                    match blocking.iter_mut().find(|f| f.block.pdb == b.pdb) {
                        Some(f) => {
                            f.nodes.push(id.to_string());
                            f.block.pods.extend(b.pods.iter().cloned());
                        }
                        None => blocking.push(PdbFinding {
                            block: b.clone(),
                            nodes: vec![id.to_string()],
                            consequence: consequence.clone(),
                        }),
                    }
                }
            }
            Preflight::Checked { blocking }
        }
    };
    let refuse = drain.preflight == crate::spec::types::Preflight::Refuse;
    let why = match &found {
        Preflight::Checked { blocking } => blocking.first().map(super::render::describe_finding),
        Preflight::Unreachable { cluster, error } => Some(format!(
            "the PDB pre-flight could not read cluster {cluster}: {error}"
        )),
    };
    if refuse && let Some(why) = why {
        p.steps
            .retain(|s| !matches!(s, Step::Roll { .. } | Step::SetTemplate { .. }));
        p.hold = Some(Hold::Preflight { finding: why });
    }
    p.preflight = Some(found);
}

/// The size a pool converges on, given the size its provider holds: the
/// autoscaler owns the size within the bounds; `ignoreChanges: [size]`
/// leaves it as it is; else the document's size.
pub fn target_size(spec: &PoolSpec, doc: &NodePoolDoc, observed: u32) -> u32 {
    let ignores_size = doc
        .spec
        .lifecycle
        .ignore_changes
        .contains(&IgnoredAttribute::Size);
    match (spec.autoscaling, ignores_size) {
        (Some(b), _) => b.clamp(observed),
        (None, true) => observed,
        (None, false) => spec.size,
    }
}

/// Why a pool's rollout waits for a human, if it does: paused, Degraded, or
/// rolled back from the template the files still ask for.
fn waiting_for_a_human(r: &RolloutState, desired: TemplateHash, pool: &str) -> Option<Hold> {
    let wait = match &r.status {
        Status::Paused { reason } if r.target == desired => HumanWait::Paused {
            reason: reason.clone(),
        },
        Status::Degraded { reason } if r.target == desired => HumanWait::Degraded {
            reason: reason.clone(),
        },
        Status::RolledBack { failed, reason } if *failed == desired => HumanWait::RolledBack {
            template: *failed,
            reason: reason.clone(),
        },
        _ => return None,
    };
    Some(Hold::Human {
        pool: pool.to_string(),
        wait,
        since: r.status_since,
    })
}

/// What changed outside poolwright since it last applied.
fn drift(
    last: &AppliedState,
    obs: &ObservedPool,
    doc: &NodePoolDoc,
    spec: &PoolSpec,
) -> Vec<Drift> {
    let ignores = |a: IgnoredAttribute| doc.spec.lifecycle.ignore_changes.contains(&a);
    let mut out = Vec::new();
    if last.size != obs.size && spec.autoscaling.is_none() {
        out.push(Drift {
            attribute: "size".into(),
            last_applied: last.size.to_string(),
            observed: obs.size.to_string(),
            reverted: !ignores(IgnoredAttribute::Size),
        });
    }
    if last.template != obs.template.hash() {
        out.push(Drift {
            attribute: "template".into(),
            last_applied: last.template.to_string(),
            observed: obs.template.hash().to_string(),
            reverted: true,
        });
    }
    if last.in_place != obs.in_place {
        let fields = [
            (
                "labels",
                last.in_place.labels != obs.in_place.labels,
                IgnoredAttribute::Labels,
            ),
            (
                "annotations",
                last.in_place.annotations != obs.in_place.annotations,
                IgnoredAttribute::Annotations,
            ),
            (
                "taints",
                last.in_place.taints != obs.in_place.taints,
                IgnoredAttribute::Taints,
            ),
            (
                "tags",
                last.in_place.tags != obs.in_place.tags,
                IgnoredAttribute::Tags,
            ),
        ];
        for (name, changed, attr) in fields {
            if changed {
                out.push(Drift {
                    attribute: name.into(),
                    last_applied: "as last applied".into(),
                    observed: "changed".into(),
                    reverted: !ignores(attr),
                });
            }
        }
    }
    out
}
