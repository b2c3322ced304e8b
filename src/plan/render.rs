//! Rendering a plan: Terraform-style text for people reviewing a change, and a
//! versioned JSON document for machines.

use std::fmt::Write;

use serde::Serialize;

use super::{AttrChange, FORMAT_VERSION, Headline, Plan, PoolPlan, Summary, Value};

/// Where the desired state came from (shown in every plan).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    pub dir: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// Branch name, or `HEAD` when detached.
    pub branch: String,
    pub commit: String,
    pub subject: String,
    pub dirty: bool,
}

impl Revision {
    /// The commit subject as shown in status, plans and events: its first
    /// 72 characters (git's own convention for a subject), then "…".
    pub fn subject_line(&self) -> String {
        const MAX: usize = 72;
        let line = self.subject.lines().next().unwrap_or("");
        match line.char_indices().nth(MAX) {
            Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
            None => line.to_string(),
        }
    }

    pub fn short(&self) -> String {
        let sha: String = self.commit.chars().take(7).collect();
        format!(
            "{}@{sha}{}",
            self.branch,
            if self.dirty { " (dirty)" } else { "" }
        )
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    fn green(self, t: &str) -> String {
        self.paint("32", t)
    }
    fn red(self, t: &str) -> String {
        self.paint("31", t)
    }
    fn yellow(self, t: &str) -> String {
        self.paint("33", t)
    }
    fn bold(self, t: &str) -> String {
        self.paint("1", t)
    }
}

fn quote(v: &str) -> String {
    format!("{v:?}")
}

fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::Scalar(s) => quote(s),
        Value::List(l) => format!(
            "[{}]",
            l.iter().map(|x| quote(x)).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{} = {}", quote(k), quote(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn symbol(style: Style, h: Headline) -> String {
    match h {
        Headline::Create => style.green("  +"),
        Headline::Delete => style.red("  -"),
        Headline::Update => style.yellow("  ~"),
        Headline::RollCreateFirst => format!("{}{}", style.green("+"), style.red("/-")),
        Headline::RollTerminateFirst => format!("{}{}", style.red("-/"), style.green("+")),
        _ => "   ".into(),
    }
}

fn headline_text(p: &PoolPlan) -> String {
    let who = format!("nodepool.{}", p.pool);
    match p.headline {
        Headline::Create => format!("# {who} will be created"),
        Headline::Delete => format!("# {who} will be destroyed ({})", p.reason),
        Headline::Update => format!("# {who} will be updated in place"),
        Headline::RollCreateFirst | Headline::RollTerminateFirst => {
            let n = p.rollout.as_ref().map_or(0, |r| r.outdated);
            if p.blocked().is_some() {
                format!(
                    "# {who} has {n} node(s) to roll, but the roll is blocked: {}",
                    p.reason
                )
            } else {
                format!("# {who} will roll {n} node(s): {}", p.reason)
            }
        }
        Headline::NoOp => format!("# {who}: {}", p.reason),
        Headline::LeftAlone => format!("# {who}: {}", p.reason),
        Headline::Error => format!("# {who}: error: {}", p.reason),
    }
}

fn render_map_change(
    out: &mut String,
    style: Style,
    indent: &str,
    name: &str,
    before: &Value,
    after: &Value,
) {
    let (Value::Map(b), Value::Map(a)) = (before, after) else {
        let _ = writeln!(
            out,
            "{indent}{} {name} = {} -> {}",
            style.yellow("~"),
            show(before),
            show(after)
        );
        return;
    };
    let _ = writeln!(out, "{indent}{} {name} = {{", style.yellow("~"));
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let width = keys.iter().map(|k| quote(k).len()).max().unwrap_or(0);
    for k in keys {
        let qk = format!("{:width$}", quote(k));
        match (b.get(k), a.get(k)) {
            (None, Some(v)) => {
                let _ = writeln!(out, "{indent}    {} {qk} = {}", style.green("+"), quote(v));
            }
            (Some(v), None) => {
                let _ = writeln!(
                    out,
                    "{indent}    {} {qk} = {} -> null",
                    style.red("-"),
                    quote(v)
                );
            }
            (Some(x), Some(y)) if x != y => {
                let _ = writeln!(
                    out,
                    "{indent}    {} {qk} = {} -> {}",
                    style.yellow("~"),
                    quote(x),
                    quote(y)
                );
            }
            _ => {}
        }
    }
    let _ = writeln!(out, "{indent}  }}");
}

/// ` (channel eks-131, released ..., 6d old)` for a value the files do not hold.
fn from(a: &AttrChange) -> String {
    a.source
        .as_ref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

fn render_attributes(out: &mut String, style: Style, attrs: &[AttrChange]) {
    let indent = "      ";
    let shown: Vec<&AttrChange> = attrs.iter().filter(|a| a.is_changed()).collect();
    let width = shown.iter().map(|a| a.name.len()).max().unwrap_or(0);
    for a in &shown {
        let name = format!("{:width$}", a.name);
        match (&a.before, &a.after) {
            (None, Some(v)) => {
                let _ = writeln!(
                    out,
                    "{indent}{} {name} = {}{}",
                    style.green("+"),
                    show(v),
                    from(a)
                );
            }
            (Some(v), None) => {
                let _ = writeln!(
                    out,
                    "{indent}{} {name} = {} -> null",
                    style.red("-"),
                    show(v)
                );
            }
            (Some(b), Some(v)) if matches!(b, Value::Map(_)) => {
                render_map_change(out, style, indent, &name, b, v);
            }
            (Some(b), Some(v)) => {
                let forces = if a.forces_replacement {
                    format!(" {}", style.red("# forces replacement"))
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "{indent}{} {name} = {} -> {}{}{forces}",
                    style.yellow("~"),
                    show(b),
                    show(v),
                    from(a)
                );
            }
            (None, None) => {}
        }
    }
    let hidden = attrs.len() - shown.len();
    if hidden > 0 {
        let _ = writeln!(
            out,
            "{indent}  # ({hidden} unchanged attribute{} hidden)",
            if hidden == 1 { "" } else { "s" }
        );
    }
}

/// The text a reviewer reads.
pub fn render_text(plan: &Plan, source: &Source, style: Style) -> String {
    let mut out = String::new();
    let rev = source
        .revision
        .as_ref()
        .map(|r| format!(" at {}", r.short()))
        .unwrap_or_default();
    let _ = writeln!(out, "Desired state: {}{rev}", source.dir);
    if let Some(r) = &source.revision {
        let _ = writeln!(out, "Commit: {}", r.subject_line());
    }
    let _ = writeln!(out);

    let drifted: Vec<&PoolPlan> = plan.pools.iter().filter(|p| !p.drift.is_empty()).collect();
    if !drifted.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            style.bold("Note: objects have changed outside of poolwright")
        );
        for p in drifted {
            for d in &p.drift {
                let fate = if d.reverted {
                    "the plan reverts it"
                } else {
                    "left as is: lifecycle.ignoreChanges"
                };
                let _ = writeln!(
                    out,
                    "  # nodepool.{}: {} changed outside poolwright: {} -> {} ({fate})",
                    p.pool, d.attribute, d.last_applied, d.observed
                );
            }
        }
        let _ = writeln!(out);
    }

    let acting: Vec<&PoolPlan> = plan
        .pools
        .iter()
        .filter(|p| {
            p.has_changes()
                || p.blocked().is_some()
                || held(p)
                || matches!(p.headline, Headline::LeftAlone | Headline::Error)
        })
        .collect();
    if acting
        .iter()
        .any(|p| p.has_changes() || p.blocked().is_some() || held(p))
    {
        let _ = writeln!(out, "poolwright will perform the following actions:\n");
    }
    for p in &acting {
        let _ = writeln!(out, "  {}", style.bold(&headline_text(p)));
        if matches!(
            p.headline,
            Headline::LeftAlone | Headline::Error | Headline::NoOp
        ) && p.blocked().is_none()
            && !held(p)
        {
            let _ = writeln!(out);
            continue;
        }
        let _ = writeln!(
            out,
            "{} nodepool {:?} {{",
            symbol(style, p.headline),
            p.pool
        );
        render_attributes(&mut out, style, &p.attributes);
        let _ = writeln!(out, "    }}");
        if let Some(r) = &p.rollout {
            let mut how = match (r.reimage, r.waves) {
                (true, _) => ", reimaged in place",
                (false, true) => ", in waves",
                (false, false) => "",
            }
            .to_string();
            if r.order != crate::spec::types::TakeDownOrder::Oldest {
                how.push_str(&format!(", {}", crate::rollout::order::describe(&r.order)));
            }
            // The change's classes are what `disruption.appliesTo` holds.
            let classes = if r.classes.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = r.classes.iter().map(|c| c.as_str()).collect();
                format!(", {} change", names.join(" + "))
            };
            let _ = writeln!(
                out,
                "    rollout ({} semantics{classes}): {}{how}, surge {}, unavailable {}, bounds [{}, {}], {} node(s) in ~{} wave(s)",
                r.semantics.as_str(),
                r.strategy.as_str(),
                r.budget.surge,
                r.budget.unavailable,
                r.bounds.0,
                r.bounds.1,
                r.outdated,
                r.estimated_waves
            );
        }
        for n in &p.notes {
            let _ = writeln!(out, "    note: {n}");
        }
        match &p.preflight {
            Some(super::Preflight::Checked { blocking }) => {
                for f in blocking {
                    let _ = writeln!(out, "    {}", style.yellow(&describe_finding(f)));
                }
            }
            Some(super::Preflight::Unreachable { cluster, error }) => {
                let _ = writeln!(
                    out,
                    "    {}",
                    style.yellow(&format!(
                        "PDB pre-flight: cluster {cluster} could not be read ({error}); nothing is claimed either way"
                    ))
                );
            }
            None => {}
        }
        if let Some(o) = &p.policy_overridden {
            let _ = writeln!(
                out,
                "    {}",
                style.yellow(&format!(
                    "EMERGENCY OVERRIDE: {o}; disruptive steps start now"
                ))
            );
        }
        if let Some(f) = &p.fleet {
            let _ = writeln!(
                out,
                "    fleet rollout {}: stage {} ({} of {}), change {}",
                f.name, f.stage, f.stage_number, f.stages, f.change
            );
            if let Some(h) = &f.held {
                let _ = writeln!(
                    out,
                    "    {}",
                    style.yellow(&format!(
                        "held: {h}; the roll waits, the other changes proceed"
                    ))
                );
            }
            if f.rollback {
                let text = match p.rollout {
                    Some(_) => "rolls back: the change halted with onHalt: rollback",
                    None => {
                        "back on the template it had before the change (halted, onHalt: rollback)"
                    }
                };
                let _ = writeln!(out, "    {}", style.red(text));
            }
        }
        if let Some(b) = p.blocked() {
            let _ = writeln!(
                out,
                "    {}",
                style.yellow(&format!(
                    "{b}{}; the roll (and its template change) waits, the other changes proceed",
                    b.until_text()
                ))
            );
        }
        let _ = writeln!(out);
    }

    for f in &plan.fleets {
        render_fleet(&mut out, style, f);
    }
    for n in &plan.images {
        let _ = writeln!(out, "{}\n", style.yellow(n));
    }
    let s = plan.summary();
    if s.errors > 0 {
        let _ = writeln!(
            out,
            "{}",
            style.red(&format!(
                "Plan incomplete: {} pool(s) could not be planned (see the errors above). {}",
                s.errors,
                footer(&s)
            ))
        );
    } else if !plan.differs() {
        let _ = writeln!(out, "No changes. The pools match the desired state.");
    } else {
        let _ = writeln!(out, "{}", style.bold(&footer(&s)));
    }
    out
}

fn held(p: &PoolPlan) -> bool {
    p.fleet.as_ref().is_some_and(|f| f.held.is_some())
}

fn duration(secs: u64) -> String {
    jiff::SignedDuration::from_secs(secs as i64)
        .to_string()
        .to_ascii_lowercase()
        .trim_start_matches("pt")
        .to_string()
}

/// A FleetRollout's stage plan: which pools roll in which stage, with what
/// soak and which gates, and where its change stands.
fn render_fleet(out: &mut String, style: Style, f: &super::fleet::FleetPlan) {
    let state = if f.new {
        "begins when this plan is applied".to_string()
    } else {
        match &f.reason {
            Some(r) => format!("{}: {r}", f.status),
            None => f.status.clone(),
        }
    };
    let _ = writeln!(
        out,
        "{}",
        style.bold(&format!(
            "Fleet rollout {}: change {} ({state})",
            f.name, f.change
        ))
    );
    for (i, s) in f.stages.iter().enumerate() {
        let soak = if s.soak_seconds > 0 {
            format!(", soak {}", duration(s.soak_seconds))
        } else {
            String::new()
        };
        let first = if s.first.is_empty() {
            String::new()
        } else {
            format!(
                " [{}{}]",
                s.first.join(", "),
                if s.pools > s.first.len() { ", ..." } else { "" }
            )
        };
        let _ = writeln!(
            out,
            "  {}. stage {}: {} pool(s){first}, {} to roll{soak}: {}",
            i + 1,
            s.name,
            s.pools,
            s.rolling,
            s.state
        );
    }
    let mut rules = vec![format!(
        "halt after {} failed pool(s) ({})",
        f.failed_pools,
        match f.on_halt {
            crate::spec::types::OnHalt::Hold => "hold",
            crate::spec::types::OnHalt::Rollback => "roll back",
        }
    )];
    if let Some(m) = f.max_concurrent_pools {
        rules.insert(0, format!("at most {m} pool(s) at once"));
    }
    let _ = writeln!(out, "  {}", rules.join("; "));
    for g in &f.gates {
        let _ = writeln!(out, "  gate {g}");
    }
    let _ = writeln!(out);
}

pub fn footer(s: &Summary) -> String {
    let mut text = format!(
        "Plan: {} to add, {} to change, {} to destroy, {} to roll ({} node{}).",
        s.add,
        s.change,
        s.destroy,
        s.roll,
        s.roll_nodes,
        if s.roll_nodes == 1 { "" } else { "s" }
    );
    if s.blocked > 0 {
        let _ = write!(text, " {} pool(s) blocked by disruption policy.", s.blocked);
    }
    if s.refused > 0 {
        let _ = write!(
            text,
            " {} pool(s) refused by the PDB pre-flight (drain.preflight: refuse).",
            s.refused
        );
    }
    if s.waiting > 0 {
        let _ = write!(
            text,
            " {} pool(s) waiting for `poolwright rollout resume`.",
            s.waiting
        );
    }
    if s.held > 0 {
        let _ = write!(text, " {} pool(s) held by a fleet rollout.", s.held);
    }
    text
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonPlan<'a> {
    format_version: u32,
    source: &'a Source,
    summary: Summary,
    pools: Vec<JsonPool<'a>>,
    #[serde(skip_serializing_if = "<[super::fleet::FleetPlan]>::is_empty")]
    fleets: &'a [super::fleet::FleetPlan],
}

/// A held roll in the JSON form: the sentence, and when the hold ends.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonBlocked {
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<jiff::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonPool<'a> {
    name: &'a str,
    provider: &'a str,
    /// Terraform's vocabulary: ["no-op"], ["create"], ["delete"], ["update"],
    /// ["create", "delete"] (create-before-destroy), ["delete", "create"].
    actions: Vec<&'static str>,
    reason: &'a str,
    before: serde_json::Map<String, serde_json::Value>,
    after: serde_json::Map<String, serde_json::Value>,
    rollout: &'a Option<super::RolloutPlan>,
    blocked: Option<JsonBlocked>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    notes: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    error: bool,
    drift: &'a [super::Drift],
    steps: &'a [super::Step],
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: &'a Option<super::fleet::PoolFleet>,
    /// The PDB pre-flight of a roll of a pool with a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    preflight: &'a Option<super::Preflight>,
}

/// The versioned JSON form of a plan.
pub fn render_json(plan: &Plan, source: &Source) -> serde_json::Value {
    let pools = plan
        .pools
        .iter()
        .map(|p| {
            let actions = match p.headline {
                Headline::Create => vec!["create"],
                Headline::Delete => vec!["delete"],
                Headline::Update => vec!["update"],
                Headline::RollCreateFirst => vec!["create", "delete"],
                Headline::RollTerminateFirst => vec!["delete", "create"],
                Headline::NoOp | Headline::LeftAlone | Headline::Error => vec!["no-op"],
            };
            let side = |f: fn(&AttrChange) -> &Option<Value>| {
                p.attributes
                    .iter()
                    .filter_map(|a| {
                        Some((a.name.clone(), serde_json::to_value(f(a).as_ref()?).ok()?))
                    })
                    .collect()
            };
            JsonPool {
                name: &p.pool,
                provider: &p.provider,
                actions,
                reason: &p.reason,
                before: side(|a| &a.before),
                after: side(|a| &a.after),
                rollout: &p.rollout,
                blocked: p.blocked().map(|h| JsonBlocked {
                    reason: h.to_string(),
                    until: h.until(),
                    timezone: h.timezone().map(str::to_string),
                }),
                waiting: p.waiting().map(|h| h.to_string()),
                notes: &p.notes,
                error: p.headline == Headline::Error,
                drift: &p.drift,
                steps: &p.steps,
                preflight: &p.preflight,
                fleet: &p.fleet,
            }
        })
        .collect();
    serde_json::to_value(JsonPlan {
        format_version: FORMAT_VERSION,
        source,
        summary: plan.summary(),
        pools,
        fleets: &plan.fleets,
    })
    .expect("a plan serializes")
}

/// One blocking budget as the plan says it: "PDB default/web allows 0
/// disruptions (6 healthy, minAvailable 6): draining node X will block;
/// drain.onTimeout fail → Degraded after 10m".
pub fn describe_finding(f: &super::PdbFinding) -> String {
    let nodes = match f.nodes.len() {
        0 => String::new(),
        1 => format!("node {}", f.nodes[0]),
        n if n <= 3 => format!("nodes {}", f.nodes.join(", ")),
        n => format!("nodes {} and {} more", f.nodes[..3].join(", "), n - 3),
    };
    format!(
        "PDB {} allows {} disruptions ({} healthy, {}): draining {nodes} will block; {}",
        f.block.pdb, f.block.allowed, f.block.healthy, f.block.rule, f.consequence
    )
}

#[cfg(test)]
mod tests {
    use super::Revision;

    #[test]
    fn a_long_subject_is_cut_at_72_characters() {
        let r = |subject: &str| Revision {
            branch: "main".into(),
            commit: "c48ba28".repeat(5),
            subject: subject.into(),
            dirty: false,
        };
        let long = "é".repeat(250);
        let shown = r(&long).subject_line();
        assert_eq!(shown.chars().count(), 73, "72 and the ellipsis");
        assert!(shown.ends_with('…'));
        assert_eq!(
            r("Bump the base image").subject_line(),
            "Bump the base image"
        );
        assert_eq!(r("first line\n\nbody").subject_line(), "first line");
    }
}
