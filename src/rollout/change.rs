//! What kind of change a disruptive step makes, for `disruption.appliesTo`:
//! a node image change, a Kubernetes version change, another template change
//! (config), or a repair (replacing failed nodes, a rollback).

use std::collections::BTreeSet;

use crate::model::NodeTemplate;
use crate::spec::types::ChangeClass;

/// The classes of moving nodes from `from` to `to`.
pub fn classify(from: &NodeTemplate, to: &NodeTemplate) -> Vec<ChangeClass> {
    let mut out = BTreeSet::new();
    if from.image != to.image {
        out.insert(ChangeClass::Image);
    }
    if from.kubernetes_version != to.kubernetes_version {
        out.insert(ChangeClass::KubernetesVersion);
    }
    if from.instance_type != to.instance_type
        || from.launch_template != to.launch_template
        || from.instance_types != to.instance_types
        || from.plugin != to.plugin
        || out.is_empty()
    {
        out.insert(ChangeClass::Config);
    }
    out.into_iter().collect()
}

/// The classes of both changes, in the order of `ChangeClass::ALL`.
pub fn union(a: &[ChangeClass], b: &[ChangeClass]) -> Vec<ChangeClass> {
    ChangeClass::ALL
        .into_iter()
        .filter(|c| a.contains(c) || b.contains(c))
        .collect()
}

/// What the disruption policy does to disruptive steps of `classes` at
/// `now`: the one check the planner and the rollout's gates share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyHold {
    /// The policy lets them start (its gate is open).
    Open,
    /// Its gate is closed, but not for these classes (`appliesTo` names
    /// others): they go ahead.
    NotHeld {
        reason: String,
        applies_to: Vec<ChangeClass>,
    },
    /// They wait: why, and when the gate opens (`None`: not until the
    /// policy changes).
    Held {
        reason: String,
        opens: Option<jiff::Timestamp>,
    },
}

pub fn policy_hold(
    disruption: &crate::spec::types::Disruption,
    semantics: crate::spec::types::Semantics,
    classes: &[ChangeClass],
    now: jiff::Timestamp,
) -> PolicyHold {
    match crate::policy::gate(disruption, now) {
        crate::policy::Gate::Open { .. } => PolicyHold::Open,
        crate::policy::Gate::Closed { reason, opens } => {
            let applies_to = disruption.applies_to(semantics);
            if applies(classes, &applies_to) {
                PolicyHold::Held { reason, opens }
            } else {
                PolicyHold::NotHeld { reason, applies_to }
            }
        }
    }
}

/// Whether a closed gate holds steps of `classes`: only if the policy applies
/// to one of them.
pub fn applies(classes: &[ChangeClass], held: &[ChangeClass]) -> bool {
    classes.iter().any(|c| held.contains(c))
}

/// "image change", "image and kubernetesVersion change".
pub fn describe(classes: &[ChangeClass]) -> String {
    let names: Vec<&str> = classes.iter().map(|c| c.as_str()).collect();
    format!("{} change", names.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(image: &str, k8s: &str, ty: &str) -> NodeTemplate {
        NodeTemplate {
            image: Some(image.into()),
            kubernetes_version: Some(k8s.into()),
            instance_type: Some(ty.into()),
            ..NodeTemplate::default()
        }
    }

    #[test]
    fn changes_are_classified_by_the_fields_that_change() {
        use ChangeClass::*;
        let base = t("img-1", "1.35", "m7i.large");
        assert_eq!(classify(&base, &t("img-2", "1.35", "m7i.large")), [Image]);
        assert_eq!(
            classify(&base, &t("img-1", "1.36", "m7i.large")),
            [KubernetesVersion]
        );
        assert_eq!(classify(&base, &t("img-1", "1.35", "m7i.xlarge")), [Config]);
        assert_eq!(
            classify(&base, &t("img-2", "1.36", "m7i.large")),
            [Image, KubernetesVersion]
        );
        assert_eq!(
            classify(&base, &base),
            [Config],
            "nothing recognisable: config"
        );
        assert!(applies(&[Image], &[Config, Image]));
        assert!(!applies(&[Image], &[Config]));
        assert_eq!(
            describe(&[Image, KubernetesVersion]),
            "image and kubernetesVersion change"
        );
    }
}
