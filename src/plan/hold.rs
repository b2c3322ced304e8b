//! Why a pool's planned roll does not run now, as data: the planner decides
//! the [`Hold`], and this module alone turns it into words, so the plan, the
//! daemon's status, its events and metrics and the review comment all say
//! the same thing.

use serde::{Deserialize, Serialize};

use crate::model::TemplateHash;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Hold {
    /// The disruption policy holds the disruptive steps: until its next
    /// window opens when one is known, else until the policy changes.
    #[serde(rename_all = "camelCase")]
    Policy {
        /// What holds it, e.g. `disruption policy Block (applies to config)`.
        policy: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<jiff::Timestamp>,
        /// The pool's time zone, to show `until` as the operator thinks of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// `drain.preflight: refuse` found a budget that would block the drain,
    /// or could not read the cluster: the roll waits for the budget.
    Preflight { finding: String },
    /// The rollout waits for a human (`poolwright rollout resume`).
    #[serde(rename_all = "camelCase")]
    Human {
        pool: String,
        wait: HumanWait,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<jiff::Timestamp>,
    },
}

/// What a rollout that waits for a human is waiting in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum HumanWait {
    Paused {
        reason: String,
    },
    Degraded {
        reason: String,
    },
    /// Rolled back from the template the files still ask for.
    RolledBack {
        template: TemplateHash,
        reason: String,
    },
}

impl Hold {
    /// Held by a policy or the pre-flight: the roll waits, the pool's other
    /// changes proceed. (A rollout waiting for a human holds everything.)
    pub fn blocks(&self) -> bool {
        !self.for_a_human()
    }

    pub fn for_a_human(&self) -> bool {
        matches!(self, Hold::Human { .. })
    }

    pub fn is_preflight(&self) -> bool {
        matches!(self, Hold::Preflight { .. })
    }

    /// When the roll may start by itself, if that is known.
    pub fn until(&self) -> Option<jiff::Timestamp> {
        match self {
            Hold::Policy { until, .. } => *until,
            _ => None,
        }
    }

    pub fn timezone(&self) -> Option<&str> {
        match self {
            Hold::Policy { timezone, .. } => timezone.as_deref(),
            _ => None,
        }
    }

    /// The sentence with when it ends, in UTC: the daemon's status line.
    pub fn with_until(&self) -> String {
        match self.until() {
            Some(u) => format!("{self} until {u}"),
            None => self.to_string(),
        }
    }

    /// The same for an event a human reads later.
    pub fn with_next_window(&self) -> String {
        match self.until() {
            Some(u) => format!("{self}; next window opens {u}"),
            None => self.to_string(),
        }
    }

    /// How long it lasts, for the plan a reviewer reads: the opening in the
    /// pool's time zone and UTC, or what ends it.
    pub fn until_text(&self) -> String {
        match self {
            Hold::Policy {
                until: Some(t),
                timezone,
                ..
            } => format!(" until {}", format_until(*t, timezone.as_deref())),
            Hold::Policy { until: None, .. } => " until the policy changes".into(),
            Hold::Preflight { .. } => {
                " (relax the budget or move its pods; drain.preflight: warn starts the roll anyway)"
                    .into()
            }
            Hold::Human { .. } => String::new(),
        }
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::Policy { policy, .. } => write!(f, "blocked by {policy}"),
            Hold::Preflight { finding } => write!(f, "refused by drain.preflight: {finding}"),
            Hold::Human { pool, wait, since } => {
                let since_text = since.map(|t| format!(" since {t}")).unwrap_or_default();
                match wait {
                    HumanWait::Paused { reason } => write!(
                        f,
                        "its rollout is paused{since_text} ({reason}); nothing is done until \
                         `poolwright rollout resume {pool}`"
                    ),
                    HumanWait::Degraded { reason } => write!(
                        f,
                        "its rollout is Degraded{since_text}: {reason}. Nothing is done until \
                         `poolwright rollout resume {pool}` (after looking into it)"
                    ),
                    HumanWait::RolledBack { template, reason } => write!(
                        f,
                        "the rollout to template {template} was rolled back{}: {reason}. Nothing \
                         will happen: `poolwright rollout resume {pool}` allows the template to be \
                         tried again (or change the desired state)",
                        since.map(|t| format!(" at {t}")).unwrap_or_default()
                    ),
                }
            }
        }
    }
}

/// An instant in the pool's time zone (when it has one other than UTC) and
/// in UTC.
fn format_until(until: jiff::Timestamp, tz: Option<&str>) -> String {
    let utc = until.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    match tz.and_then(|t| jiff::tz::TimeZone::get(t).ok().map(|z| (t, z))) {
        Some((name, zone)) if name != "UTC" => {
            let local = until
                .to_zoned(zone)
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string();
            format!("{local} ({name}), {utc}")
        }
        _ => utc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hold_in_words() {
        let t: jiff::Timestamp = "2026-03-02T22:00:00Z".parse().unwrap();
        let policy = Hold::Policy {
            policy: "disruption policy Block".into(),
            until: Some(t),
            timezone: Some("Europe/Berlin".into()),
        };
        assert!(policy.blocks());
        assert_eq!(policy.to_string(), "blocked by disruption policy Block");
        assert_eq!(
            policy.with_until(),
            "blocked by disruption policy Block until 2026-03-02T22:00:00Z"
        );
        assert_eq!(
            policy.until_text(),
            " until 2026-03-02 23:00 CET (Europe/Berlin), 2026-03-02T22:00:00Z"
        );
        let pre = Hold::Preflight {
            finding: "PodDisruptionBudget default/web allows 0".into(),
        };
        assert!(pre.blocks() && pre.is_preflight() && pre.until().is_none());
        let human = Hold::Human {
            pool: "api".into(),
            wait: HumanWait::Paused {
                reason: "by alice".into(),
            },
            since: None,
        };
        assert!(human.for_a_human() && !human.blocks());
        assert_eq!(
            human.to_string(),
            "its rollout is paused (by alice); nothing is done until `poolwright rollout resume api`"
        );
        assert_eq!(human.until_text(), "");
    }
}
