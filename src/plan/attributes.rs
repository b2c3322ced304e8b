//! A pool as a flat list of named attributes, so plans can show before/after the
//! way Terraform does, and say which changes force node replacement.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Bounds, InPlace, NodeTemplate};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Number(u64),
    Scalar(String),
    List(Vec<String>),
    Map(BTreeMap<String, String>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttrChange {
    pub name: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// A change to this attribute replaces nodes.
    pub forces_replacement: bool,
    /// Where the value comes from, when not the files: `channel eks-131,
    /// released 2026-12-01 10:00 UTC, 6d old`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl AttrChange {
    pub fn is_changed(&self) -> bool {
        self.before != self.after
    }
}

/// The attributes of a pool, in display order, with whether each forces replacement.
pub(super) fn attributes(
    size: Option<u32>,
    bounds: Option<Bounds>,
    template: &NodeTemplate,
    in_place: &InPlace,
) -> Vec<(&'static str, Option<Value>, bool)> {
    let scalar = |s: &Option<String>| s.clone().map(Value::Scalar);
    let map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| Value::Map(m.clone()));
    let list = |l: Vec<String>| (!l.is_empty()).then_some(Value::List(l));
    vec![
        ("size", size.map(|n| Value::Number(n as u64)), false),
        (
            "autoscaling",
            bounds.map(|b| Value::Scalar(format!("{}..{}", b.min, b.max))),
            false,
        ),
        ("image", scalar(&template.image), true),
        ("instanceType", scalar(&template.instance_type), true),
        (
            "kubernetesVersion",
            scalar(&template.kubernetes_version),
            true,
        ),
        (
            "launchTemplate",
            template.launch_template.as_ref().map(|lt| {
                let id = lt.name.clone().or(lt.id.clone()).unwrap_or_default();
                Value::Scalar(format!(
                    "{id}@{}",
                    lt.version.as_deref().unwrap_or("$Default")
                ))
            }),
            true,
        ),
        ("instanceTypes", list(template.instance_types.clone()), true),
        (
            "plugin",
            (!template.plugin.is_empty()).then(|| {
                Value::Scalar(serde_json::to_string(&template.plugin).unwrap_or_default())
            }),
            true,
        ),
        ("labels", map(&in_place.labels), false),
        ("annotations", map(&in_place.annotations), false),
        (
            "taints",
            list(
                in_place
                    .taints
                    .iter()
                    .map(|t| match &t.value {
                        Some(v) => format!("{}={v}:{:?}", t.key, t.effect),
                        None => format!("{}:{:?}", t.key, t.effect),
                    })
                    .collect(),
            ),
            false,
        ),
        ("tags", map(&in_place.tags), false),
    ]
}

/// Pair up two attribute lists (either may be absent: create or delete).
pub(super) fn diff(
    before: Option<Vec<(&'static str, Option<Value>, bool)>>,
    after: Option<Vec<(&'static str, Option<Value>, bool)>>,
) -> Vec<AttrChange> {
    let len = before.as_ref().or(after.as_ref()).map_or(0, Vec::len);
    (0..len)
        .filter_map(|i| {
            let b = before.as_ref().map(|v| v[i].clone());
            let a = after.as_ref().map(|v| v[i].clone());
            let (name, forces) = a.as_ref().or(b.as_ref()).map(|(n, _, f)| (*n, *f))?;
            let before = b.and_then(|x| x.1);
            let after = a.and_then(|x| x.1);
            (before.is_some() || after.is_some()).then(|| AttrChange {
                name: name.to_string(),
                before,
                after,
                forces_replacement: forces,
                source: None,
            })
        })
        .collect()
}
