//! Do-not-disrupt: a node an operator or a workload holds is never cordoned,
//! drained, terminated or reimaged. A node is held by a label (or, from a
//! cluster, an annotation) on itself, read here from what the provider and
//! the cluster report; or by a running pod annotated so, which only the
//! cluster can tell (the executor asks before it takes a node down, and asks
//! again about held nodes on every look, so a lifted hold is seen at once).

use std::collections::BTreeMap;

use super::Node;

/// The keys that hold a node, on the node or on a pod running on it:
/// poolwright's own and Karpenter's, so workloads written for either are
/// honoured.
pub const KEYS: [&str; 2] = [
    "poolwright.io/do-not-disrupt",
    "karpenter.sh/do-not-disrupt",
];

/// Whether a label or annotation value holds: `"true"` (any case).
pub fn holds(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("true")
}

/// Why the node itself is held, if it is: the first of [`KEYS`] it carries
/// as `"true"`.
pub fn of_node(n: &Node) -> Option<String> {
    KEYS.iter().find_map(|k| {
        n.labels
            .get(*k)
            .filter(|v| holds(v))
            .map(|_| format!("the node carries {k}: \"true\""))
    })
}

/// The held nodes as messages name them: "every node runs the desired
/// template except 1 held by do-not-disrupt: n1 (pod default/db-0 carries
/// ...); each is replaced once its hold is lifted".
pub fn describe(held: &BTreeMap<String, String>) -> String {
    let named: Vec<String> = held
        .iter()
        .take(5)
        .map(|(id, why)| format!("{id} ({why})"))
        .collect();
    let more = match held.len() {
        n if n > 5 => format!(" and {} more", n - 5),
        _ => String::new(),
    };
    format!(
        "every node runs the desired template except {} held by do-not-disrupt: {}{more}; \
         each is replaced once its hold is lifted",
        held.len(),
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeState, TemplateHash};

    #[test]
    fn either_key_holds_when_true_in_any_case() {
        let mut n = Node {
            id: "a".into(),
            template: TemplateHash(1),
            state: NodeState::Healthy,
            launched_at: jiff::Timestamp::UNIX_EPOCH,
            healthy_since: None,
            cordoned: false,
            provider_id: None,
            zone: None,
            labels: BTreeMap::new(),
        };
        assert_eq!(of_node(&n), None);
        n.labels
            .insert("karpenter.sh/do-not-disrupt".into(), "True".into());
        assert!(of_node(&n).unwrap().contains("karpenter.sh/do-not-disrupt"));
        n.labels
            .insert("karpenter.sh/do-not-disrupt".into(), "false".into());
        n.labels
            .insert("poolwright.io/do-not-disrupt".into(), "yes".into());
        assert_eq!(of_node(&n), None, "only \"true\" holds");
    }
}
