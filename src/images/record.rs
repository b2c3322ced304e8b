//! What each channel remembers (the content of `images.json`), and how a
//! poll, the end of a change and a recall move it. Every transition returns
//! the notes the shell turns into events.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::pick::{Eligibility, Pick};
use crate::model::image::Release;

/// The format this release reads and writes.
pub const FORMAT: u32 = 1;
/// Images in force before the current one, kept per channel (a recall
/// rolls back to the newest of them that is still good).
const PREVIOUS: usize = 10;
/// Queued images superseded before they ran, named per channel.
const SKIPPED: usize = 20;

/// Every channel's record, and the recalled images (a recall is of an
/// image, whichever channels offer it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Images {
    pub format: u32,
    #[serde(default)]
    pub channels: BTreeMap<String, ChannelRecord>,
    #[serde(default)]
    pub recalled: BTreeMap<String, Recall>,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            format: FORMAT,
            channels: BTreeMap::new(),
            recalled: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recall {
    pub reason: String,
    pub by: String,
    pub at: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelRecord {
    /// The image the channel's pools run (or roll to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<Release>,
    /// Since when it has been in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// The change that brought it: `channel NAME@IMAGE`, or `recall IMAGE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// The image in force came by a recall of this image: its change rolls
    /// every pool at once (no soak, no gate), within each pool's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_of: Option<String>,
    /// Images in force before, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<Release>,
    /// The newest image the source offered (not denied or recalled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<Release>,
    /// When `newest` becomes eligible, when it is not yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_at: Option<Timestamp>,
    /// Eligible, waiting for the change in flight to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Release>,
    /// Images queued and then superseded by a newer one before they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// When the source was last asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_at: Option<Timestamp>,
    /// Why the last ask failed (the image in force stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Something a transition did that is told (an event, a log line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A new image is in force: its change begins.
    Eligible {
        channel: String,
        image: String,
        change: String,
    },
    /// Eligible while a change is in flight: it waits.
    Queued {
        channel: String,
        image: String,
        skipped: Option<String>,
    },
    SourceFailed {
        channel: String,
        message: String,
    },
    SourceRecovered {
        channel: String,
    },
    /// A recall moved the channel off the image.
    RolledOff {
        channel: String,
        from: String,
        to: String,
    },
    /// A recall found no earlier good image: the channel stays on it.
    NothingToRollTo {
        channel: String,
        image: String,
    },
}

impl Note {
    pub fn channel(&self) -> &str {
        match self {
            Note::Eligible { channel, .. }
            | Note::Queued { channel, .. }
            | Note::SourceFailed { channel, .. }
            | Note::SourceRecovered { channel }
            | Note::RolledOff { channel, .. }
            | Note::NothingToRollTo { channel, .. } => channel,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Note::Eligible { channel, image, .. } => {
                format!("channel {channel}: {image} is eligible; its pools roll to it")
            }
            Note::Queued {
                channel,
                image,
                skipped,
            } => format!(
                "channel {channel}: {image} is eligible and waits for the change in flight to end{}",
                skipped
                    .as_ref()
                    .map(|s| format!(" (it supersedes {s}, which never ran)"))
                    .unwrap_or_default()
            ),
            Note::SourceFailed { channel, message } => {
                format!("channel {channel}: its source failed: {message}; the image in force stays")
            }
            Note::SourceRecovered { channel } => {
                format!("channel {channel}: its source answers again")
            }
            Note::RolledOff { channel, from, to } => format!(
                "channel {channel}: off recalled {from}, back to {to}; its pools roll at once"
            ),
            Note::NothingToRollTo { channel, image } => format!(
                "channel {channel}: {image} is recalled but the channel has no earlier good image; its pools stay on it (name one in the files, or wait for a newer release)"
            ),
        }
    }
}

/// The id of the change a channel's new image begins.
pub fn change_id(channel: &str, image: &str) -> String {
    format!("channel {channel}@{image}")
}

impl ChannelRecord {
    fn promote(&mut self, channel: &str, r: Release, now: Timestamp) -> Note {
        if let Some(old) = self.in_force.take() {
            self.previous
                .retain(|p| p.image != old.image && p.image != r.image);
            self.previous.insert(0, old);
            self.previous.truncate(PREVIOUS);
        }
        let change = change_id(channel, &r.image);
        let note = Note::Eligible {
            channel: channel.into(),
            image: r.image.clone(),
            change: change.clone(),
        };
        self.in_force = Some(r);
        self.since = Some(now);
        self.change = Some(change);
        self.recall_of = None;
        self.queued = None;
        note
    }

    /// The source answered: the newest eligible image comes in force, or
    /// waits while a change of this channel is `in_flight`.
    pub fn observed(
        &mut self,
        channel: &str,
        pick: Pick,
        in_flight: bool,
        now: Timestamp,
    ) -> Vec<Note> {
        let mut notes = Vec::new();
        self.asked_at = Some(now);
        if self.error.take().is_some() {
            notes.push(Note::SourceRecovered {
                channel: channel.into(),
            });
        }
        self.newest = pick.newest;
        self.eligible_at = pick.eligible_at;
        let Some(e) = pick.eligible else {
            return notes;
        };
        let current = self.in_force.as_ref().map(|r| r.image.as_str());
        if current == Some(e.image.as_str()) {
            // A queued image the source no longer offers as its newest
            // (withdrawn, denied) is dropped.
            self.queued = None;
            return notes;
        }
        if in_flight && self.in_force.is_some() {
            if self.queued.as_ref().is_some_and(|q| q.image == e.image) {
                return notes;
            }
            let skipped = self.queued.take().map(|q| q.image);
            if let Some(s) = &skipped {
                self.skipped.retain(|x| x != s);
                self.skipped.insert(0, s.clone());
                self.skipped.truncate(SKIPPED);
            }
            notes.push(Note::Queued {
                channel: channel.into(),
                image: e.image.clone(),
                skipped,
            });
            self.queued = Some(e);
            return notes;
        }
        notes.push(self.promote(channel, e, now));
        notes
    }

    /// The source could not be asked, or answered nonsense: nothing
    /// changes but the error (said once until it changes).
    pub fn failed(&mut self, channel: &str, message: String, now: Timestamp) -> Vec<Note> {
        self.asked_at = Some(now);
        if self.error.as_ref() == Some(&message) {
            return Vec::new();
        }
        self.error = Some(message.clone());
        vec![Note::SourceFailed {
            channel: channel.into(),
            message,
        }]
    }

    /// The channel's change is no longer in flight: a queued image (still
    /// eligible) comes in force.
    pub fn settle(&mut self, channel: &str, rules: &Eligibility, now: Timestamp) -> Vec<Note> {
        match self.queued.take() {
            Some(q) if !rules.excluded(&q.image) && rules.eligible_at(&q) <= now => {
                vec![self.promote(channel, q, now)]
            }
            _ => Vec::new(),
        }
    }
}

impl Images {
    /// `image` is recalled: no channel picks it again, a queued one is
    /// dropped, and each channel with it in force goes back to its newest
    /// earlier image that is still good (`rules` by channel), at once.
    pub fn recall(
        &mut self,
        image: &str,
        recall: Recall,
        rules: &dyn Fn(&str) -> Option<std::collections::HashSet<String>>,
        now: Timestamp,
    ) -> Vec<Note> {
        self.recalled.insert(image.to_string(), recall);
        let mut notes = Vec::new();
        for (name, rec) in &mut self.channels {
            if rec.queued.as_ref().is_some_and(|q| q.image == image) {
                rec.queued = None;
            }
            if rec.newest.as_ref().is_some_and(|n| n.image == image) {
                rec.newest = None;
                rec.eligible_at = None;
            }
            if rec.in_force.as_ref().is_none_or(|r| r.image != image) {
                rec.previous.retain(|p| p.image != image);
                continue;
            }
            let denied = rules(name).unwrap_or_default();
            let back = rec
                .previous
                .iter()
                .position(|p| !self.recalled.contains_key(&p.image) && !denied.contains(&p.image));
            let Some(i) = back else {
                notes.push(Note::NothingToRollTo {
                    channel: name.clone(),
                    image: image.into(),
                });
                continue;
            };
            let to = rec.previous.remove(i);
            rec.previous.retain(|p| p.image != image);
            notes.push(Note::RolledOff {
                channel: name.clone(),
                from: image.into(),
                to: to.image.clone(),
            });
            rec.in_force = Some(to);
            rec.since = Some(now);
            rec.change = Some(format!("recall {image}"));
            rec.recall_of = Some(image.into());
        }
        notes
    }

    /// A recall undone: the image may be picked again (at the next ask).
    pub fn unrecall(&mut self, image: &str) -> Option<Recall> {
        self.recalled.remove(image)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

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

    fn eligible(r: &Release) -> Pick {
        Pick {
            eligible: Some(r.clone()),
            newest: Some(r.clone()),
            eligible_at: None,
        }
    }

    #[test]
    fn one_image_per_change_and_only_the_newest_waiting_one_is_kept() {
        let mut rec = ChannelRecord::default();
        let notes = rec.observed("eks", eligible(&rel("img-1", 0)), false, at(10));
        assert!(
            matches!(&notes[..], [Note::Eligible { change, .. }] if change == "channel eks@img-1")
        );
        // img-2 while the change of img-1 is in flight: queued.
        let notes = rec.observed("eks", eligible(&rel("img-2", 20)), true, at(30));
        assert!(matches!(&notes[..], [Note::Queued { skipped: None, .. }]));
        assert_eq!(rec.in_force.as_ref().unwrap().image, "img-1");
        // The same answer again says nothing.
        assert!(
            rec.observed("eks", eligible(&rel("img-2", 20)), true, at(40))
                .is_empty()
        );
        // img-3 supersedes img-2, which is named.
        let notes = rec.observed("eks", eligible(&rel("img-3", 50)), true, at(60));
        assert!(matches!(&notes[..], [Note::Queued { skipped: Some(s), .. }] if s == "img-2"));
        assert_eq!(rec.skipped, vec!["img-2".to_string()]);
        // The change ends: img-3 comes in force, img-1 is the previous.
        let rules = Eligibility {
            min_age: jiff::SignedDuration::ZERO,
            deny: HashSet::new(),
            recalled: HashSet::new(),
        };
        let notes = rec.settle("eks", &rules, at(70));
        assert!(matches!(&notes[..], [Note::Eligible { image, .. }] if image == "img-3"));
        assert_eq!(rec.previous[0].image, "img-1");
        assert!(rec.queued.is_none());
        assert!(rec.settle("eks", &rules, at(80)).is_empty());
    }

    #[test]
    fn a_failing_source_keeps_the_image_in_force_and_says_so_once() {
        let mut rec = ChannelRecord::default();
        rec.observed("eks", eligible(&rel("img-1", 0)), false, at(10));
        let n = rec.failed("eks", "throttled".into(), at(20));
        assert_eq!(n.len(), 1);
        assert!(rec.failed("eks", "throttled".into(), at(30)).is_empty());
        assert_eq!(rec.in_force.as_ref().unwrap().image, "img-1");
        let n = rec.observed("eks", eligible(&rel("img-1", 0)), false, at(40));
        assert_eq!(
            n,
            vec![Note::SourceRecovered {
                channel: "eks".into()
            }]
        );
    }

    #[test]
    fn a_recall_goes_back_to_the_newest_earlier_good_image_and_never_picks_it_again() {
        let mut images = Images::default();
        let rec = images.channels.entry("eks".into()).or_default();
        for (i, img) in ["img-1", "img-2", "img-3"].iter().enumerate() {
            rec.observed(
                "eks",
                eligible(&rel(img, i as i64)),
                false,
                at(10 * i as i64),
            );
        }
        images.recalled.insert(
            "img-2".into(),
            Recall {
                reason: "earlier".into(),
                by: "ops".into(),
                at: at(0),
            },
        );
        let recall = Recall {
            reason: "CVE".into(),
            by: "uid 1000".into(),
            at: at(100),
        };
        let notes = images.recall("img-3", recall, &|_| None, at(100));
        assert_eq!(
            notes,
            vec![Note::RolledOff {
                channel: "eks".into(),
                from: "img-3".into(),
                to: "img-1".into()
            }],
            "img-2 is recalled too: img-1 is the newest good one"
        );
        let rec = &images.channels["eks"];
        assert_eq!(rec.change.as_deref(), Some("recall img-3"));
        assert_eq!(rec.recall_of.as_deref(), Some("img-3"));
        let rules = Eligibility {
            min_age: jiff::SignedDuration::ZERO,
            deny: HashSet::new(),
            recalled: images.recalled.keys().map(String::as_str).collect(),
        };
        let p = super::super::pick(&[rel("img-3", 2), rel("img-1", 0)], &rules, at(200));
        assert_eq!(p.eligible.unwrap().image, "img-1", "never picked again");
        // Nothing earlier: said, and the channel stays.
        let mut images = Images::default();
        images.channels.entry("solo".into()).or_default().observed(
            "solo",
            eligible(&rel("img-9", 0)),
            false,
            at(0),
        );
        let r = Recall {
            reason: "x".into(),
            by: "y".into(),
            at: at(1),
        };
        let notes = images.recall("img-9", r, &|_| None, at(1));
        assert!(matches!(&notes[..], [Note::NothingToRollTo { .. }]));
        assert!(images.unrecall("img-9").is_some());
    }
}
