//! The order in which a rollout takes old nodes down (`rollout.order`): one
//! rule, read by the step function for the nodes it visits and by the pool
//! index for the quiet ones it keeps sorted, so the two cannot disagree.
//! Only the sequence depends on it: which nodes are taken, and how many at
//! once, is the budget's business.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::Node;
use crate::spec::types::TakeDownOrder;

/// A node's place in take-down order, compared field by field: its group
/// (the zone, under `zone`), its label's value (under `label`), its launch
/// instant (reversed under `newest`), its id (so the order never depends on
/// how the provider lists nodes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// The zone under `zone` order (empty when the node has none); `None`
    /// under the other orders.
    pub group: Option<Arc<str>>,
    pub value: Value,
    /// Nanoseconds since the epoch, negated under `newest`.
    pub launched: i128,
    pub id: Arc<str>,
}

/// A label's value as `label` order compares it: numbers as numbers and
/// before words, a node without the label last.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// Not ordered by a label.
    Unordered,
    Number(i64),
    Word(Arc<str>),
    Missing,
}

/// Where `n` goes in `order`.
pub fn place(order: &TakeDownOrder, n: &Node) -> Place {
    let launched = n.launched_at.as_nanosecond();
    let (group, value, launched) = match order {
        TakeDownOrder::Oldest => (None, Value::Unordered, launched),
        TakeDownOrder::Newest => (None, Value::Unordered, -launched),
        TakeDownOrder::Zone => (
            Some(n.zone.clone().unwrap_or_else(|| Arc::from(""))),
            Value::Unordered,
            launched,
        ),
        TakeDownOrder::Label(key) => {
            let value = match n.labels.get(key) {
                None => Value::Missing,
                Some(v) => match v.trim().parse::<i64>() {
                    Ok(i) => Value::Number(i),
                    Err(_) => Value::Word(Arc::from(v.as_str())),
                },
            };
            (None, value, launched)
        }
    };
    Place {
        group,
        value,
        launched,
        id: n.id.clone(),
    }
}

/// Under `zone` order, the zone whose old nodes may be taken down now: the
/// zone begun last (`begun`) while it has an old node left or in flight;
/// else a zone with an old node in flight (draining, terminating,
/// reimaging); else the one with the most outdated nodes not yet taken
/// (ties by name). `None` under the other orders, or when nothing is left.
pub fn current_group<'a>(
    order: &TakeDownOrder,
    begun: Option<&str>,
    in_flight: impl IntoIterator<Item = &'a Arc<str>>,
    outdated: &BTreeMap<Arc<str>, u32>,
) -> Option<Arc<str>> {
    if *order != TakeDownOrder::Zone {
        return None;
    }
    let in_flight: Vec<&Arc<str>> = in_flight.into_iter().collect();
    if let Some(b) = begun
        && (outdated.get(b).is_some_and(|n| *n > 0) || in_flight.iter().any(|g| &***g == b))
    {
        return Some(Arc::from(b));
    }
    if let Some(g) = in_flight.into_iter().min() {
        return Some(g.clone());
    }
    outdated
        .iter()
        .filter(|(_, n)| **n > 0)
        // The most nodes first; of equal counts the first name (max_by_key
        // keeps the last of equals, so names compare reversed).
        .max_by_key(|(g, n)| (**n, std::cmp::Reverse(*g)))
        .map(|(g, _)| g.clone())
}

/// The order as the plan and events name it.
pub fn describe(order: &TakeDownOrder) -> String {
    match order {
        TakeDownOrder::Oldest => "oldest first".into(),
        TakeDownOrder::Newest => "newest first".into(),
        TakeDownOrder::Zone => "one zone at a time".into(),
        TakeDownOrder::Label(key) => format!("by label {key}"),
    }
}

/// A zone as messages name it.
pub fn zone_name(group: &str) -> &str {
    if group.is_empty() { "(no zone)" } else { group }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::decide::fixtures::*;

    fn labelled(id: &str, value: Option<&str>) -> Node {
        let mut n = healthy(id, &old());
        if let Some(v) = value {
            n.labels.insert("prio".into(), v.into());
        }
        n
    }

    #[test]
    fn label_order_compares_numbers_as_numbers_and_puts_the_unlabelled_last() {
        let order = TakeDownOrder::Label("prio".into());
        let mut nodes = [
            labelled("a", None),
            labelled("b", Some("10")),
            labelled("c", Some("9")),
            labelled("d", Some("web")),
            labelled("e", Some("-1")),
        ];
        nodes.sort_by_key(|n| place(&order, n));
        let ids: Vec<&str> = nodes.iter().map(|n| &*n.id).collect();
        assert_eq!(ids, ["e", "c", "b", "d", "a"]);
    }

    #[test]
    fn the_current_zone_is_the_one_in_flight_else_the_most_outdated() {
        let counts: BTreeMap<Arc<str>, u32> = [("a", 2), ("b", 5), ("c", 5)]
            .into_iter()
            .map(|(z, n)| (Arc::from(z), n))
            .collect();
        let zone = TakeDownOrder::Zone;
        assert_eq!(
            current_group(&zone, None, [], &counts).as_deref(),
            Some("b")
        );
        let a: Arc<str> = Arc::from("a");
        assert_eq!(
            current_group(&zone, None, [&a], &counts).as_deref(),
            Some("a")
        );
        // A zone begun is finished first, even with fewer nodes left.
        assert_eq!(
            current_group(&zone, Some("a"), [], &counts).as_deref(),
            Some("a")
        );
        // Once it has nothing left, the next.
        let done: BTreeMap<Arc<str>, u32> = [("a", 0), ("c", 1)]
            .into_iter()
            .map(|(z, n)| (Arc::from(z), n))
            .collect();
        assert_eq!(
            current_group(&zone, Some("a"), [], &done).as_deref(),
            Some("c")
        );
        assert_eq!(
            current_group(&TakeDownOrder::Oldest, None, [], &counts),
            None
        );
        assert_eq!(current_group(&zone, None, [], &BTreeMap::new()), None);
    }
}
