//! `lifecycle.maxNodeAge`: which nodes of a pool are past it, and when the
//! next one will be. Nodes past it are replaced by an ordinary rollout (the
//! executor takes every node launched before the cutoff as old), so the
//! budget, the take-down order and the disruption policy (as a `repair`)
//! apply as to any roll.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::model::{ObservedPool, TemplateHash};
use crate::spec::values::Age;

/// Nodes that pass the limit within this much of a plan are replaced with
/// those already past it: the daemon's default resync, so nodes that age
/// out between two resyncs are rolled as one rollout, not one by one.
pub const WINDOW: SignedDuration = SignedDuration::from_secs(5 * 60);

/// The nodes of a pool due for replacement by age.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aging {
    pub age: Age,
    /// Nodes launched before this are due.
    pub cutoff: Timestamp,
    /// The nodes due, oldest first, with the instant each passed (or
    /// passes) the limit.
    pub due: Vec<(Arc<str>, Timestamp)>,
    /// The next node to come due after these, and when.
    pub next: Option<(Arc<str>, Timestamp)>,
}

/// Which of the nodes on `target` are past `age` at `now` (or within
/// [`WINDOW`] of it). Nodes on another template are replaced anyway.
pub fn due(obs: &ObservedPool, target: TemplateHash, age: Age, now: Timestamp) -> Aging {
    let life = SignedDuration::try_from(age.0.as_std()).unwrap_or(SignedDuration::MAX);
    let cutoff = now
        .saturating_add(WINDOW)
        .and_then(|t| t.saturating_sub(life))
        .unwrap_or(now);
    let passes = |launched: Timestamp| launched.saturating_add(life).unwrap_or(Timestamp::MAX);
    let mut current: Vec<(Arc<str>, Timestamp)> = obs
        .live_nodes()
        .filter(|n| n.template == target)
        .map(|n| (n.id.clone(), n.launched_at))
        .collect();
    current.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let split = current.partition_point(|(_, launched)| *launched < cutoff);
    let next = current
        .get(split)
        .map(|(id, launched)| (id.clone(), passes(*launched)));
    current.truncate(split);
    Aging {
        age,
        cutoff,
        due: current
            .into_iter()
            .map(|(id, launched)| (id, passes(launched)))
            .collect(),
        next,
    }
}

impl Aging {
    /// What the plan says of it: the nodes due (up to five by name) and the
    /// next one to come due.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.due.is_empty() {
            let named: Vec<String> = self
                .due
                .iter()
                .take(5)
                .map(|(id, at)| {
                    format!(
                        "{id} (since {})",
                        at.round(jiff::Unit::Second).unwrap_or(*at)
                    )
                })
                .collect();
            let more = match self.due.len() {
                n if n > 5 => format!(" and {} more", n - 5),
                _ => String::new(),
            };
            out.push(format!(
                "lifecycle.maxNodeAge {}: {} node(s) due, replaced as a repair: {}{more}",
                self.age,
                self.due.len(),
                named.join(", ")
            ));
        }
        if let Some((id, at)) = &self.next {
            out.push(format!(
                "lifecycle.maxNodeAge {}: next due {id} at {}",
                self.age,
                at.round(jiff::Unit::Second).unwrap_or(*at)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, NodeTemplate};
    use crate::rollout::decide::fixtures::{healthy, new, old};

    fn at(day: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + day * 86_400).unwrap()
    }

    fn pool(nodes: Vec<Node>) -> ObservedPool {
        ObservedPool {
            name: "web".into(),
            size: nodes.len() as u32,
            autoscaling: None,
            template: new(),
            in_place: Default::default(),
            nodes,
        }
    }

    fn launched(id: &str, t: &NodeTemplate, day: i64) -> Node {
        let mut n = healthy(id, t);
        n.launched_at = at(day);
        n
    }

    #[test]
    fn nodes_past_the_age_and_within_the_window_are_due_and_the_next_is_named() {
        let age = Age::parse("30d").unwrap();
        let obs = pool(vec![
            launched("a", &new(), 0),
            launched("b", &new(), 1),
            launched("c", &new(), 20),
            // Outdated by template: replaced anyway, not counted here.
            launched("d", &old(), 0),
        ]);
        let now = at(31);
        let a = due(&obs, new().hash(), age, now);
        let ids: Vec<&str> = a.due.iter().map(|(id, _)| &**id).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(a.due[0].1, at(30));
        assert_eq!(
            a.next.as_ref().map(|(id, t)| (&**id, *t)),
            Some(("c", at(50)))
        );
        // A node that passes the limit 4 minutes from now goes with them;
        // one that passes it in 6 minutes waits for the next look.
        let life = SignedDuration::from_hours(30 * 24);
        let mut soon = launched("e", &new(), 1);
        soon.launched_at = now + SignedDuration::from_mins(4) - life;
        let mut later = launched("f", &new(), 1);
        later.launched_at = now + SignedDuration::from_mins(6) - life;
        let a = due(&pool(vec![soon, later]), new().hash(), age, now);
        let ids: Vec<&str> = a.due.iter().map(|(id, _)| &**id).collect();
        assert_eq!(ids, ["e"]);
        assert_eq!(a.next.as_ref().map(|(id, _)| &**id), Some("f"));
        let text = due(&obs, new().hash(), age, now).describe().join("\n");
        assert!(
            text.contains("2 node(s) due, replaced as a repair: a (since"),
            "{text}"
        );
        assert!(text.contains("next due c at"), "{text}");
    }
}
