//! Which of a source's images a channel may use now.

use std::collections::{BTreeMap, HashSet};

use jiff::{SignedDuration, Timestamp};

use crate::model::image::Release;
use crate::spec::types::ImageChannelSpec;

/// What makes an image eligible: old enough, not denied, not recalled.
pub struct Eligibility<'a> {
    pub min_age: SignedDuration,
    pub deny: HashSet<&'a str>,
    /// Recalled images (a recall is of an image, whichever channel has it).
    pub recalled: HashSet<&'a str>,
}

impl<'a> Eligibility<'a> {
    pub fn of<R>(spec: &'a ImageChannelSpec, recalled: &'a BTreeMap<String, R>) -> Self {
        Eligibility {
            min_age: spec
                .min_release_age
                .as_ref()
                .and_then(|d| SignedDuration::try_from(d.value.0.as_std()).ok())
                .unwrap_or(SignedDuration::ZERO),
            deny: spec.deny.iter().map(String::as_str).collect(),
            recalled: recalled.keys().map(String::as_str).collect(),
        }
    }

    /// Never picked, whatever its age.
    pub fn excluded(&self, image: &str) -> bool {
        self.deny.contains(image) || self.recalled.contains(image)
    }

    /// When `r` becomes eligible by age.
    pub fn eligible_at(&self, r: &Release) -> Timestamp {
        r.released
            .checked_add(self.min_age)
            .unwrap_or(Timestamp::MAX)
    }
}

/// What a channel's source offers now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    /// The newest eligible image.
    pub eligible: Option<Release>,
    /// The newest image not denied or recalled, eligible or not.
    pub newest: Option<Release>,
    /// When `newest` becomes eligible, when it is not yet.
    pub eligible_at: Option<Timestamp>,
}

/// Newest first: by release time, then by id (so a tie picks the same
/// image every time).
fn newer(a: &Release, b: &Release) -> bool {
    (a.released, &a.image) > (b.released, &b.image)
}

pub fn pick(releases: &[Release], rules: &Eligibility, now: Timestamp) -> Pick {
    let mut out = Pick::default();
    for r in releases.iter().filter(|r| !rules.excluded(&r.image)) {
        if out.newest.as_ref().is_none_or(|n| newer(r, n)) {
            out.newest = Some(r.clone());
        }
        if rules.eligible_at(r) <= now && out.eligible.as_ref().is_none_or(|n| newer(r, n)) {
            out.eligible = Some(r.clone());
        }
    }
    if out.newest != out.eligible {
        out.eligible_at = out.newest.as_ref().map(|n| rules.eligible_at(n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn rel(image: &str, s: i64) -> Release {
        Release {
            image: image.into(),
            released: at(s),
        }
    }

    #[test]
    fn the_newest_old_enough_image_not_denied_or_recalled_is_picked() {
        let rules = Eligibility {
            min_age: SignedDuration::from_secs(3600),
            deny: HashSet::from(["img-2"]),
            recalled: HashSet::from(["img-3"]),
        };
        let releases = [
            rel("img-1", 0),
            rel("img-2", 100),
            rel("img-3", 200),
            rel("img-4", 5000),
        ];
        let p = pick(&releases, &rules, at(4000));
        assert_eq!(p.eligible, Some(rel("img-1", 0)), "2 denied, 3 recalled");
        assert_eq!(p.newest, Some(rel("img-4", 5000)));
        assert_eq!(p.eligible_at, Some(at(8600)), "an hour after its release");
        let p = pick(&releases, &rules, at(8600));
        assert_eq!(p.eligible, Some(rel("img-4", 5000)));
        assert_eq!(p.eligible_at, None);
        let p = pick(&[], &rules, at(0));
        assert_eq!(p, Pick::default());
    }

    #[test]
    fn a_tie_in_release_time_picks_the_same_image_whatever_the_order() {
        let rules = Eligibility {
            min_age: SignedDuration::ZERO,
            deny: HashSet::new(),
            recalled: HashSet::new(),
        };
        let a = pick(&[rel("b", 1), rel("a", 1)], &rules, at(9));
        let b = pick(&[rel("a", 1), rel("b", 1)], &rules, at(9));
        assert_eq!(a, b);
        assert_eq!(a.eligible.unwrap().image, "b");
    }
}
