//! Pure mapping between Auto Scaling groups and poolwright's vocabulary: tags,
//! lifecycle states, templates. No SDK types and no I/O, so it is unit-tested.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;

use crate::model::{
    Bounds, InPlace, LaunchTemplate, Node, NodeState, NodeTemplate, ObservedPool, PoolSpec, Taint,
    TemplateHash,
};
use crate::spec::types::TaintEffect;

/// On a group: poolwright created or adopted it (never deleted without it).
pub const TAG_MANAGED_BY: &str = "poolwright.io/managed-by";
pub const MANAGED_BY: &str = "poolwright";
/// On a group and its instances: the pool's name (finds a group whose pool has
/// left the files and had an explicit group name).
pub const TAG_POOL: &str = "poolwright.io/pool";
/// On a group and, propagated at launch, on each instance: the hash of the
/// template it was launched with. moto (and AWS for `$Latest`) reports the
/// group's template for every instance, so this tag is the only exact answer.
pub const TAG_TEMPLATE: &str = "poolwright.io/template";
/// Kubernetes attributes travel as group tags propagated to instances, where
/// a node's bootstrap can read them.
const LABEL_PREFIX: &str = "poolwright.io/label:";
const ANNOTATION_PREFIX: &str = "poolwright.io/annotation:";
const TAINT_PREFIX: &str = "poolwright.io/taint:";
/// AWS limits tag values to 256 characters.
const MAX_TAG_VALUE: usize = 256;

/// A tag that is not the user's: poolwright's bookkeeping or AWS's own.
fn is_system_tag(key: &str) -> bool {
    key.starts_with("aws:") || key == TAG_MANAGED_BY || key == TAG_POOL || key == TAG_TEMPLATE
}

/// What one group reports, in plain data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupView {
    pub name: String,
    pub min: u32,
    pub max: u32,
    pub desired: u32,
    pub launch_template: Option<LaunchTemplate>,
    pub instance_types: Vec<String>,
    pub tags: BTreeMap<String, String>,
    pub instances: Vec<InstanceView>,
    /// The launch template version the group uses, when poolwright made it
    /// for a pool's `template.image` / `template.instanceType`.
    pub derived: Option<Derived>,
}

/// A launch template version poolwright made for a pool: its description
/// says whose and what (`poolwright pool=web template=00ab.. source=3
/// image=ami-0bbb type=m7i.large`), since EC2 versions carry no tags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Derived {
    pub pool: String,
    pub template: String,
    /// The version it was made from, as the pool's file says it (empty:
    /// the file names none, `$Default`).
    pub source: String,
    pub image: Option<String>,
    pub instance_type: Option<String>,
}

/// The prefix of every description poolwright writes on a version.
pub const DERIVED_PREFIX: &str = "poolwright pool=";

impl Derived {
    pub fn of(pool: &str, t: &NodeTemplate) -> Derived {
        Derived {
            pool: pool.to_string(),
            template: hash_tag(t.hash()),
            source: t
                .launch_template
                .as_ref()
                .and_then(|lt| lt.version.clone())
                .unwrap_or_default(),
            image: t.image.clone(),
            instance_type: t.instance_type.clone(),
        }
    }

    /// The version's description (at most 255 characters, EC2's limit).
    pub fn describe(&self) -> Result<String, String> {
        let mut d = format!(
            "{DERIVED_PREFIX}{} template={} source={}",
            self.pool, self.template, self.source
        );
        if let Some(i) = &self.image {
            d.push_str(&format!(" image={i}"));
        }
        if let Some(t) = &self.instance_type {
            d.push_str(&format!(" type={t}"));
        }
        let odd = [
            &self.source,
            self.image.as_deref().unwrap_or(""),
            self.instance_type.as_deref().unwrap_or(""),
        ]
        .iter()
        .any(|v| v.contains(|c: char| c.is_whitespace() || c == '='));
        if odd {
            return Err("an image id, instance type or launch template version with a space or `=` cannot be named in a launch template version's description".into());
        }
        if d.len() > 255 {
            return Err(format!(
                "the launch template version's description would be {} characters (EC2 takes 255); shorten the pool name or the image id",
                d.len()
            ));
        }
        Ok(d)
    }

    pub fn parse(description: &str) -> Option<Derived> {
        let rest = description.strip_prefix("poolwright ")?;
        let mut d = Derived::default();
        for field in rest.split(' ') {
            let (k, v) = field.split_once('=')?;
            match k {
                "pool" => d.pool = v.to_string(),
                "template" => d.template = v.to_string(),
                "source" => d.source = v.to_string(),
                "image" => d.image = Some(v.to_string()),
                "type" => d.instance_type = Some(v.to_string()),
                _ => return None,
            }
        }
        (!d.pool.is_empty() && !d.template.is_empty()).then_some(d)
    }

    /// The pool's template this version was made for, given the launch
    /// template as the group reports it (normalised to the pool's file).
    pub fn template(&self, lt: &LaunchTemplate, instance_types: &[String]) -> NodeTemplate {
        NodeTemplate {
            image: self.image.clone(),
            instance_type: self.instance_type.clone(),
            launch_template: Some(LaunchTemplate {
                version: (!self.source.is_empty()).then(|| self.source.clone()),
                ..lt.clone()
            }),
            instance_types: instance_types.to_vec(),
            ..NodeTemplate::default()
        }
    }
}

impl GroupView {
    pub fn managed(&self) -> bool {
        self.tags.get(TAG_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
    }

    /// Instances that still count (not leaving the group).
    pub fn live(&self) -> impl Iterator<Item = &InstanceView> {
        self.instances
            .iter()
            .filter(|i| lifecycle_state(&i.lifecycle, &i.health) != NodeState::Terminating)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceView {
    pub id: String,
    pub lifecycle: String,
    pub health: String,
    /// The launch template the group reports for the instance.
    pub launch_template: Option<LaunchTemplate>,
    pub protected: bool,
    /// Its availability zone (part of the Kubernetes providerID).
    pub zone: Option<String>,
}

/// What EC2 adds about an instance: when it launched, its template tag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceDetail {
    pub launched_at: Option<Timestamp>,
    pub template_tag: Option<String>,
    pub running: bool,
}

/// Auto Scaling lifecycle states to the executor's node states.
pub fn lifecycle_state(lifecycle: &str, health: &str) -> NodeState {
    match lifecycle {
        "InService" if health.eq_ignore_ascii_case("healthy") => NodeState::Healthy,
        "InService" => NodeState::Unhealthy,
        s if s.starts_with("Pending") || s.starts_with("Warmed") => NodeState::Pending,
        s if s.starts_with("Terminat") || s.starts_with("Detach") => NodeState::Terminating,
        // Standby and anything new: present but not serving.
        _ => NodeState::Unhealthy,
    }
}

/// The group's launch template in the form the pool's file uses (AWS reports
/// both name and id; `$Default` is what an omitted version means), so an
/// unchanged template is not seen as drift.
fn normalize(reported: &LaunchTemplate, desired: Option<&LaunchTemplate>) -> LaunchTemplate {
    let mut lt = reported.clone();
    if let Some(want) = desired {
        if want.name.is_some() && want.id.is_none() {
            lt.id = None;
        } else if want.id.is_some() && want.name.is_none() {
            lt.name = None;
        }
        if want.version.is_none() && lt.version.as_deref() == Some("$Default") {
            lt.version = None;
        }
    }
    lt
}

/// The version to send for a template reference (`$Default` when omitted).
pub fn version_of(lt: &LaunchTemplate) -> String {
    lt.version.clone().unwrap_or_else(|| "$Default".into())
}

/// Group tags for the pool's in-place attributes. Values AWS cannot hold are
/// an error naming the attribute.
pub fn in_place_tags(
    attrs: &InPlace,
) -> Result<BTreeMap<String, String>, crate::spec::values::InvalidValue> {
    let mut tags = BTreeMap::new();
    for (k, v) in &attrs.tags {
        tags.insert(k.clone(), v.clone());
    }
    for (k, v) in &attrs.labels {
        tags.insert(format!("{LABEL_PREFIX}{k}"), v.clone());
    }
    for (k, v) in &attrs.annotations {
        tags.insert(format!("{ANNOTATION_PREFIX}{k}"), v.clone());
    }
    for t in &attrs.taints {
        let value = format!("{}:{:?}", t.value.as_deref().unwrap_or(""), t.effect);
        tags.insert(format!("{TAINT_PREFIX}{}", t.key), value);
    }
    for (k, v) in &tags {
        if is_system_tag(k) {
            return Err(format!("tag {k:?} is reserved for poolwright and AWS").into());
        }
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(format!(
                "{k:?} is {} characters; AWS tag values hold at most {MAX_TAG_VALUE}",
                v.chars().count()
            )
            .into());
        }
        if k.chars().count() > 128 {
            return Err(format!("tag key {k:?} is longer than AWS's 128 characters").into());
        }
    }
    Ok(tags)
}

/// The in-place attributes that a group's tags say.
pub fn in_place_of(tags: &BTreeMap<String, String>) -> InPlace {
    let mut out = InPlace::default();
    for (k, v) in tags {
        if let Some(label) = k.strip_prefix(LABEL_PREFIX) {
            out.labels.insert(label.to_string(), v.clone());
        } else if let Some(annotation) = k.strip_prefix(ANNOTATION_PREFIX) {
            out.annotations.insert(annotation.to_string(), v.clone());
        } else if let Some(key) = k.strip_prefix(TAINT_PREFIX) {
            let (value, effect) = v.rsplit_once(':').unwrap_or(("", v));
            let effect = match effect {
                "NoSchedule" => TaintEffect::NoSchedule,
                "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                _ => TaintEffect::NoExecute,
            };
            out.taints.push(Taint {
                key: key.to_string(),
                value: (!value.is_empty()).then(|| value.to_string()),
                effect,
            });
        } else if !is_system_tag(k) {
            out.tags.insert(k.clone(), v.clone());
        }
    }
    out
}

fn parse_hash(tag: &str) -> Option<TemplateHash> {
    u64::from_str_radix(tag, 16).ok().map(TemplateHash)
}

pub fn hash_tag(hash: TemplateHash) -> String {
    format!("{:016x}", hash.0)
}

/// The template the group launches with, in the file's form.
fn group_template(group: &GroupView, desired: Option<&PoolSpec>) -> NodeTemplate {
    let want = desired.and_then(|d| d.template.launch_template.as_ref());
    // A version poolwright made for this pool stands for the template it
    // was made from, when its description says so consistently.
    if let (Some(d), Some(lt), Some(spec)) = (&group.derived, &group.launch_template, desired)
        && d.pool == spec.name
    {
        let t = d.template(&normalize(lt, want), &group.instance_types);
        if hash_tag(t.hash()) == d.template {
            return t;
        }
    }
    NodeTemplate {
        launch_template: group.launch_template.as_ref().map(|lt| normalize(lt, want)),
        instance_types: group.instance_types.clone(),
        ..NodeTemplate::default()
    }
}

/// Assemble one observed pool. `first_healthy` remembers when this process
/// first saw each instance healthy (AWS does not say), so `minReady` counts
/// from a moment poolwright witnessed, never from a guess.
pub fn observed_pool(
    pool: &str,
    group: &GroupView,
    details: &HashMap<String, InstanceDetail>,
    desired: Option<&PoolSpec>,
    first_healthy: &mut HashMap<String, Timestamp>,
    now: Timestamp,
) -> ObservedPool {
    let template = group_template(group, desired);
    let group_hash = template.hash();
    let nodes = group
        .instances
        .iter()
        .map(|i| {
            let detail = details.get(&i.id);
            let mut state = lifecycle_state(&i.lifecycle, &i.health);
            if state == NodeState::Healthy && detail.is_some_and(|d| !d.running) {
                state = NodeState::Unhealthy;
            }
            // Tag first; an untagged instance (adopted group) is on the group's
            // template only if the group reports the same launch template for it.
            let node_template = detail
                .and_then(|d| d.template_tag.as_deref())
                .and_then(parse_hash)
                .unwrap_or_else(|| {
                    let same = i
                        .launch_template
                        .as_ref()
                        .map(|lt| normalize(lt, template.launch_template.as_ref()))
                        == template.launch_template;
                    if same { group_hash } else { TemplateHash(0) }
                });
            let healthy_since = if state == NodeState::Healthy {
                Some(*first_healthy.entry(i.id.clone()).or_insert(now))
            } else {
                first_healthy.remove(&i.id);
                None
            };
            Node {
                id: i.id.as_str().into(),
                template: node_template,
                state,
                launched_at: detail.and_then(|d| d.launched_at).unwrap_or(now),
                healthy_since,
                cordoned: false,
                // What the AWS cloud provider sets on the Node.
                provider_id: i.zone.as_ref().map(|z| format!("aws:///{z}/{}", i.id)),
                zone: i.zone.as_deref().map(std::sync::Arc::from),
                labels: Default::default(),
            }
        })
        .collect();
    let autoscaling = match desired {
        // A fixed-size pool: the group's bounds are poolwright's working room.
        Some(spec) if spec.autoscaling.is_none() => None,
        _ => Some(Bounds {
            min: group.min,
            max: group.max,
        }),
    };
    ObservedPool {
        name: pool.to_string(),
        size: group.desired,
        autoscaling,
        template,
        in_place: in_place_of(&group.tags),
        nodes,
    }
}

/// The bounds a group should have at rest: the pool's autoscaling bounds, or
/// 0..size for a fixed pool (its size is held by poolwright, and min 0 lets a
/// rollout take a node out before its replacement exists).
pub fn home_bounds(spec: Option<&PoolSpec>, group: &GroupView) -> Bounds {
    match spec {
        Some(s) => s.autoscaling.unwrap_or(Bounds {
            min: 0,
            max: s.size,
        }),
        None => Bounds {
            min: group.min,
            max: group.max,
        },
    }
}

/// Bounds that admit `desired` while staying as close to home as possible.
pub fn bounds_for(home: Bounds, desired: u32) -> Bounds {
    Bounds {
        min: home.min.min(desired),
        max: home.max.max(desired),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(name: Option<&str>, id: Option<&str>, version: Option<&str>) -> LaunchTemplate {
        LaunchTemplate {
            name: name.map(Into::into),
            id: id.map(Into::into),
            version: version.map(Into::into),
        }
    }

    #[test]
    fn lifecycle_states_map_to_node_states() {
        assert_eq!(lifecycle_state("InService", "Healthy"), NodeState::Healthy);
        assert_eq!(
            lifecycle_state("InService", "Unhealthy"),
            NodeState::Unhealthy
        );
        assert_eq!(
            lifecycle_state("Pending:Wait", "Healthy"),
            NodeState::Pending
        );
        assert_eq!(
            lifecycle_state("Terminating:Wait", "Healthy"),
            NodeState::Terminating
        );
        assert_eq!(
            lifecycle_state("Detaching", "Healthy"),
            NodeState::Terminating
        );
        assert_eq!(lifecycle_state("Standby", "Healthy"), NodeState::Unhealthy);
    }

    #[test]
    fn the_reported_template_takes_the_files_form() {
        let reported = lt(Some("web"), Some("lt-1"), Some("$Default"));
        assert_eq!(
            normalize(&reported, Some(&lt(Some("web"), None, None))),
            lt(Some("web"), None, None)
        );
        assert_eq!(
            normalize(&reported, Some(&lt(None, Some("lt-1"), Some("$Default")))),
            lt(None, Some("lt-1"), Some("$Default"))
        );
    }

    #[test]
    fn in_place_attributes_round_trip_through_tags() {
        let attrs = InPlace {
            labels: [("node.kubernetes.io/role".to_string(), "web".to_string())].into(),
            annotations: [("team".to_string(), "a:b".to_string())].into(),
            taints: vec![
                Taint {
                    key: "dedicated".into(),
                    value: Some("web".into()),
                    effect: TaintEffect::NoSchedule,
                },
                Taint {
                    key: "spot".into(),
                    value: None,
                    effect: TaintEffect::PreferNoSchedule,
                },
            ],
            tags: [("cost-center".to_string(), "42".to_string())].into(),
        };
        let mut tags = in_place_tags(&attrs).unwrap();
        tags.insert(TAG_MANAGED_BY.into(), MANAGED_BY.into());
        tags.insert("aws:autoscaling:groupName".into(), "web".into());
        assert_eq!(in_place_of(&tags), attrs);
    }

    #[test]
    fn oversized_or_reserved_tags_are_refused() {
        let mut attrs = InPlace::default();
        attrs.annotations.insert("big".into(), "x".repeat(300));
        assert!(in_place_tags(&attrs).unwrap_err().contains("256"));
        let mut attrs = InPlace::default();
        attrs.tags.insert(TAG_TEMPLATE.into(), "x".into());
        assert!(in_place_tags(&attrs).unwrap_err().contains("reserved"));
    }

    #[test]
    fn the_tag_decides_a_nodes_template_not_the_reported_version() {
        let group = GroupView {
            name: "web".into(),
            desired: 2,
            max: 2,
            launch_template: Some(lt(Some("web"), Some("lt-1"), Some("2"))),
            instances: ["i-old", "i-new"]
                .iter()
                .map(|id| InstanceView {
                    id: id.to_string(),
                    lifecycle: "InService".into(),
                    health: "Healthy".into(),
                    // moto reports the group's current version for both.
                    launch_template: Some(lt(Some("web"), Some("lt-1"), Some("2"))),
                    protected: true,
                    zone: None,
                })
                .collect(),
            ..GroupView::default()
        };
        let mut details = HashMap::new();
        details.insert(
            "i-old".to_string(),
            InstanceDetail {
                template_tag: Some(hash_tag(TemplateHash(7))),
                running: true,
                launched_at: None,
            },
        );
        let now = Timestamp::UNIX_EPOCH;
        let obs = observed_pool("web", &group, &details, None, &mut HashMap::new(), now);
        assert_eq!(obs.nodes[0].template, TemplateHash(7));
        // Untagged and reported on the group's template: on the group's template.
        assert_eq!(obs.nodes[1].template, obs.template.hash());
        assert_eq!(obs.nodes[1].healthy_since, Some(now));
    }
}
