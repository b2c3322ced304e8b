//! The fields of a node template, by the names documents and plug-ins use:
//! a plug-in says which it acts on, and a template that sets another is
//! refused (by `plan` before `apply`, and by the provider before sending).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::NodeTemplate;

/// A field of a node template (`NodeTemplate`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum TemplateField {
    Image,
    InstanceType,
    KubernetesVersion,
    LaunchTemplate,
    InstanceTypes,
    Plugin,
}

impl TemplateField {
    pub const ALL: [TemplateField; 6] = [
        TemplateField::Image,
        TemplateField::InstanceType,
        TemplateField::KubernetesVersion,
        TemplateField::LaunchTemplate,
        TemplateField::InstanceTypes,
        TemplateField::Plugin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TemplateField::Image => "image",
            TemplateField::InstanceType => "instanceType",
            TemplateField::KubernetesVersion => "kubernetesVersion",
            TemplateField::LaunchTemplate => "launchTemplate",
            TemplateField::InstanceTypes => "instanceTypes",
            TemplateField::Plugin => "plugin",
        }
    }

    /// The fields a template sets.
    pub fn set_in(t: &NodeTemplate) -> Vec<TemplateField> {
        let mut out = Vec::new();
        if t.image.is_some() {
            out.push(TemplateField::Image);
        }
        if t.instance_type.is_some() {
            out.push(TemplateField::InstanceType);
        }
        if t.kubernetes_version.is_some() {
            out.push(TemplateField::KubernetesVersion);
        }
        if t.launch_template.is_some() {
            out.push(TemplateField::LaunchTemplate);
        }
        if !t.instance_types.is_empty() {
            out.push(TemplateField::InstanceTypes);
        }
        if !t.plugin.is_empty() {
            out.push(TemplateField::Plugin);
        }
        out
    }
}

/// Why a template cannot go to a provider that acts only on `acts_on`:
/// the fields it sets that the provider would silently ignore.
pub fn refusal(who: &str, acts_on: &[TemplateField], t: &NodeTemplate) -> Option<String> {
    let missing: Vec<&str> = TemplateField::set_in(t)
        .into_iter()
        .filter(|f| !acts_on.contains(f))
        .map(TemplateField::as_str)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let known: Vec<&str> = acts_on.iter().map(|f| f.as_str()).collect();
    Some(format!(
        "{who} does not act on template field(s) {}; it acts on: {}",
        missing.join(", "),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    ))
}
