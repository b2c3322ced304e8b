//! Image channels in the daemon: each channel's source is asked every
//! `interval` (one ask per channel, off the loop); a newly eligible image
//! comes in force as a change of the desired state, unless a change of the
//! channel is in flight (then it waits, the newest only); a recall moves
//! channels off an image at once. The record is kept in `STATE/images.json`
//! before anything follows from it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::mpsc;

use super::Reconciler;
use crate::images::{Eligibility, Images, Note, Recall};
use crate::model::image::Release;
use crate::model::{Event, EventKind};

/// A source's answer, back on the loop.
pub struct Asked {
    channel: String,
    answer: Result<Vec<Release>, String>,
}

/// What `/v1/images` serves, rebuilt when the record or a plan changes.
pub type ImagesView = Arc<Mutex<serde_json::Value>>;

pub(super) struct Channels {
    path: PathBuf,
    pub record: Images,
    /// When each channel is next asked.
    due: BTreeMap<String, Timestamp>,
    asking: BTreeSet<String>,
    tx: mpsc::UnboundedSender<Asked>,
    rx: Option<mpsc::UnboundedReceiver<Asked>>,
    /// The id of the change the next load begins (`channel NAME@IMAGE`,
    /// `recall IMAGE`), when an image brought it.
    pub next_change: Option<String>,
    /// Each channel's images as its source last listed them (release times).
    known: BTreeMap<String, BTreeMap<String, Timestamp>>,
    /// The pools following each channel in the desired state in force
    /// (made at each load: a turn of the loop looks at channels, not pools).
    followers: BTreeMap<String, Vec<String>>,
    pub view: ImagesView,
}

impl Channels {
    pub fn open(state_root: &std::path::Path) -> anyhow::Result<Channels> {
        let path = crate::store::images::path(state_root);
        let record = crate::store::images::load(&path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Channels {
            path,
            record,
            due: BTreeMap::new(),
            asking: BTreeSet::new(),
            tx,
            rx: Some(rx),
            next_change: None,
            known: BTreeMap::new(),
            followers: BTreeMap::new(),
            view: Arc::new(Mutex::new(
                serde_json::json!({"channels": [], "recalled": {}}),
            )),
        })
    }

    pub fn take_answers(&mut self) -> mpsc::UnboundedReceiver<Asked> {
        self.rx.take().expect("the answers are taken once")
    }

    pub fn next_due(&self) -> Option<Timestamp> {
        self.due
            .iter()
            .filter(|(c, _)| !self.asking.contains(*c))
            .map(|(_, t)| *t)
            .min()
    }

    fn save(&self) -> anyhow::Result<()> {
        crate::store::images::save(&self.path, &self.record)
    }
}

impl Reconciler {
    /// The channels the desired state in force follows, each asked when
    /// due (a channel new to it at once). Returns true when a queued image
    /// came in force (the desired state is loaded again).
    pub fn images_tick(&mut self) -> bool {
        let Some(f) = &self.in_force else {
            return false;
        };
        if self.images.followers.is_empty() {
            return false;
        }
        let (config, providers) = (f.config.clone(), f.providers.clone());
        let now = self.clock.now();
        let followed: Vec<String> = self.images.followers.keys().cloned().collect();
        self.images.due.retain(|c, _| followed.contains(c));
        for name in &followed {
            let Some(doc) = config.channels.get(name).map(|e| e.doc.clone()) else {
                continue;
            };
            let due = *self.images.due.entry(name.clone()).or_insert(now);
            if due > now || self.images.asking.contains(name) {
                continue;
            }
            self.images.asking.insert(name.clone());
            let every = crate::reconcile::images::interval(&doc);
            self.images.due.insert(
                name.clone(),
                now.saturating_add(SignedDuration::try_from(every).unwrap_or_default())
                    .unwrap_or(now),
            );
            let (tx, providers, channel) =
                (self.images.tx.clone(), providers.clone(), name.clone());
            tokio::spawn(async move {
                let answer = crate::reconcile::images::ask(&providers, &channel, &doc).await;
                let _ = tx.send(Asked { channel, answer });
            });
        }
        self.images_settle(&config, now)
    }

    /// Whether a change of a FleetRollout governing a pool of `channel` is
    /// in flight.
    fn channel_in_flight(&self, channel: &str) -> bool {
        self.images
            .followers
            .get(channel)
            .is_some_and(|pools| pools.iter().any(|p| self.fleet.in_flight(p)))
    }

    /// The desired state in force changed: which pools follow which channel.
    pub(super) fn images_loaded(&mut self) {
        let mut followers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(f) = &self.in_force {
            for (pool, e) in &f.config.pools {
                if let Some(c) = e.doc.spec.template.image.as_ref().and_then(|i| i.channel()) {
                    followers
                        .entry(c.value.clone())
                        .or_default()
                        .push(pool.clone());
                }
            }
        }
        self.images.followers = followers;
        self.images_publish();
    }

    /// Queued images whose channel's change is no longer in flight come in
    /// force. True when one did.
    fn images_settle(&mut self, config: &crate::spec::Config, now: Timestamp) -> bool {
        let queued: Vec<String> = self
            .images
            .record
            .channels
            .iter()
            .filter(|(_, r)| r.queued.is_some())
            .map(|(c, _)| c.clone())
            .collect();
        if queued.is_empty() {
            return false;
        }
        let before = self.images.record.clone();
        let mut notes = Vec::new();
        for channel in queued {
            if self.channel_in_flight(&channel) {
                continue;
            }
            let Some(doc) = config.channels.get(&channel) else {
                continue;
            };
            let recalled = self.images.record.recalled.clone();
            let rules = Eligibility::of(&doc.doc.spec, &recalled);
            if let Some(rec) = self.images.record.channels.get_mut(&channel) {
                notes.extend(rec.settle(&channel, &rules, now));
            }
        }
        if notes.is_empty() || !self.images_keep(before) {
            return false;
        }
        self.images_noted(notes, now)
    }

    /// Keep the record before anything follows from it. When it cannot be
    /// written, the record goes back to `before` (nothing moved) and the
    /// next ask or settle tries again.
    fn images_keep(&mut self, before: Images) -> bool {
        match self.images.save() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(
                    "keeping the image record failed, so nothing follows from it yet: {e:#}"
                );
                self.images.record = before;
                false
            }
        }
    }

    /// A source answered (or failed). True when an image came in force.
    pub fn image_answered(&mut self, asked: Asked) -> bool {
        self.images.asking.remove(&asked.channel);
        let Some(config) = self.in_force.as_ref().map(|f| f.config.clone()) else {
            return false;
        };
        let Some(doc) = config.channels.get(&asked.channel).map(|e| e.doc.clone()) else {
            return false;
        };
        let now = self.clock.now();
        if let Ok(releases) = &asked.answer {
            self.images.known.insert(
                asked.channel.clone(),
                releases
                    .iter()
                    .map(|r| (r.image.clone(), r.released))
                    .collect(),
            );
        }
        self.metrics
            .image_source_failing
            .get_or_create(&crate::daemon::metrics::ChannelLabels {
                channel: asked.channel.clone(),
            })
            .set(i64::from(asked.answer.is_err()));
        let in_flight = self.channel_in_flight(&asked.channel);
        let before = self.images.record.clone();
        let notes = crate::reconcile::images::answered(
            &mut self.images.record,
            &asked.channel,
            &doc,
            asked.answer,
            in_flight,
            now,
        );
        // The record moved (asked at, newest seen, perhaps an image in
        // force): kept first, then told and acted on.
        let changed = self.images_keep(before) && self.images_noted(notes, now);
        self.images_publish();
        changed
    }

    /// Tell and act on what a transition did (the record is kept already).
    /// True when an image came in force (the caller loads the desired state
    /// again).
    fn images_noted(&mut self, notes: Vec<Note>, now: Timestamp) -> bool {
        let mut changed = false;
        for n in &notes {
            let kind = match n {
                Note::Eligible { change, .. } => {
                    self.images.next_change = Some(change.clone());
                    changed = true;
                    EventKind::ImageEligible
                }
                Note::RolledOff { from, .. } => {
                    self.images.next_change = Some(format!("recall {from}"));
                    changed = true;
                    EventKind::ImageRecalled
                }
                Note::Queued { .. } => EventKind::ImageQueued,
                Note::SourceFailed { .. } => EventKind::ImageSourceFailed,
                Note::SourceRecovered { .. } => EventKind::ImageSourceRecovered,
                Note::NothingToRollTo { .. } => EventKind::ImageRecalled,
            };
            let message = n.message();
            match kind {
                EventKind::ImageSourceFailed => tracing::warn!(channel = n.channel(), "{message}"),
                _ => tracing::info!(channel = n.channel(), "{message}"),
            }
            self.events.emit(Event::new(now, "", kind, message));
        }
        if !notes.is_empty() {
            self.images_publish();
        }
        changed
    }

    /// `poolwright image recall IMAGE` (or unrecall): journaled before the
    /// channels move. Returns what is said back, and whether the desired
    /// state is loaded again.
    pub fn image_control(
        &mut self,
        image: &str,
        recall: bool,
        who: &str,
        reason: &str,
    ) -> Result<(String, bool), String> {
        let now = self.clock.now();
        if image.is_empty() || image.len() > 1024 || image.chars().any(char::is_control) {
            return Err("an image id of 1 to 1024 printable characters".into());
        }
        let Some(config) = self.in_force.as_ref().map(|f| f.config.clone()) else {
            return Err("no desired state is in force yet".into());
        };
        let before = self.images.record.clone();
        if !recall {
            let Some(was) = self.images.record.unrecall(image) else {
                return Err(format!("{image} is not recalled"));
            };
            if !self.images_keep(before) {
                return Err(format!(
                    "the image record {} could not be written; nothing changed",
                    self.images.path.display()
                ));
            }
            let message = format!(
                "{image} is no longer recalled (by {who}: {reason}; it was recalled by {} at {}: {}); channels may pick it again at their next ask",
                was.by, was.at, was.reason
            );
            self.events.emit(Event::new(
                now,
                "",
                EventKind::ImageUnrecalled,
                message.clone(),
            ));
            // Asked again now, so that it counts at once.
            for due in self.images.due.values_mut() {
                *due = now;
            }
            self.images_publish();
            return Ok((message, false));
        }
        if self.images.record.recalled.contains_key(image) {
            return Err(format!("{image} is recalled already"));
        }
        let deny = crate::reconcile::images::deny_lists(&config);
        let notes = self.images.record.recall(
            image,
            Recall {
                reason: reason.to_string(),
                by: who.to_string(),
                at: now,
            },
            &|c: &str| deny.get(c).cloned(),
            now,
        );
        let literal = literal_pools(&config, image);
        let mut message = format!("{image} is recalled (by {who}: {reason})");
        for n in &notes {
            message.push_str(&format!("; {}", n.message()));
        }
        if notes.is_empty() {
            message.push_str("; no channel has it in force: none will pick it");
        }
        if !literal.is_empty() {
            message.push_str(&format!(
                "; pool(s) {} name it in their files and are not rolled: the files say that image",
                literal.join(", ")
            ));
        }
        if !self.images_keep(before) {
            return Err(format!(
                "the image record {} could not be written; nothing changed",
                self.images.path.display()
            ));
        }
        self.events.emit(Event::new(
            now,
            "",
            EventKind::ImageRecalled,
            message.clone(),
        ));
        // One event says it all (the channels moved are in its message).
        tracing::info!(image, "{message}");
        let changed = notes.iter().any(|n| matches!(n, Note::RolledOff { .. }));
        if changed {
            self.images.next_change = Some(format!("recall {image}"));
        }
        self.images_publish();
        Ok((message, changed))
    }

    /// `/v1/images`: each channel's record, its pools and how far each lags.
    pub(super) fn images_publish(&self) {
        let Some(f) = &self.in_force else {
            return;
        };
        let now = self.clock.now();
        let latest = self.views.latest();
        let latest = latest.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut channels = Vec::new();
        for (name, e) in &f.config.channels {
            let rec = self
                .images
                .record
                .channels
                .get(name)
                .cloned()
                .unwrap_or_default();
            let known = self.images.known.get(name);
            let released_of = |image: &str| -> Option<Timestamp> {
                known.and_then(|k| k.get(image).copied()).or_else(|| {
                    rec.previous
                        .iter()
                        .chain(rec.in_force.iter())
                        .find(|r| r.image == image)
                        .map(|r| r.released)
                })
            };
            let mut pools = Vec::new();
            for (pool, pe) in &f.config.pools {
                let follows = pe
                    .doc
                    .spec
                    .template
                    .image
                    .as_ref()
                    .and_then(|i| i.channel())
                    .is_some_and(|c| c.as_str() == name);
                if !follows {
                    continue;
                }
                let running = latest.as_ref().and_then(|l| l.pool(pool)).and_then(|p| {
                    p.attributes
                        .iter()
                        .find(|a| a.name == "image")
                        .and_then(|a| a.before.clone().or(a.after.clone()))
                });
                let running = running.and_then(|v| match v {
                    crate::plan::Value::Scalar(s) => Some(s),
                    _ => None,
                });
                let released = running.as_deref().and_then(released_of);
                let lag = match (&rec.in_force, released) {
                    (Some(f), Some(r)) if running.as_deref() != Some(f.image.as_str()) => {
                        f.released.duration_since(r).as_secs().max(0)
                    }
                    (Some(_), _) if running.is_some() => 0,
                    _ => 0,
                };
                self.metrics
                    .pool_image_age
                    .get_or_create(&crate::daemon::metrics::PoolLabels { pool: pool.clone() })
                    .set(lag);
                pools.push(serde_json::json!({
                    "pool": pool,
                    "image": running,
                    "released": released,
                    "ageSeconds": released.map(|r| now.duration_since(r).as_secs().max(0)),
                    "lagSeconds": lag,
                }));
            }
            channels.push(serde_json::json!({
                "name": name,
                "file": e.file,
                "interval": crate::reconcile::images::interval(&e.doc).as_secs(),
                "minReleaseAge": e.doc.spec.min_release_age.as_ref().map(|d| d.value.to_string()),
                "record": rec,
                "nextAskAt": self.images.due.get(name),
                "pools": pools,
            }));
        }
        let summary: Vec<crate::daemon::board::ImageChannelSummary> = f
            .config
            .channels
            .keys()
            .map(|name| {
                let rec = self.images.record.channels.get(name);
                crate::daemon::board::ImageChannelSummary {
                    name: name.clone(),
                    in_force: rec
                        .and_then(|r| r.in_force.as_ref())
                        .map(|r| r.image.clone()),
                    queued: rec.and_then(|r| r.queued.as_ref()).map(|r| r.image.clone()),
                    error: rec.and_then(|r| r.error.clone()),
                }
            })
            .collect();
        if self.board.read(|d| d.images != summary) {
            self.board.update(|d| d.images = summary);
        }
        let view = serde_json::json!({
            "channels": channels,
            "recalled": self.images.record.recalled,
        });
        *self.images.view.lock().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// The id of the change the next load begins, when an image brought it.
    pub(super) fn image_change_id(&mut self) -> Option<String> {
        self.images.next_change.take()
    }

    pub fn images_view(&self) -> ImagesView {
        self.images.view.clone()
    }

    pub fn image_answers(&mut self) -> mpsc::UnboundedReceiver<Asked> {
        self.images.take_answers()
    }

    pub(super) fn images_due(&self) -> Option<Timestamp> {
        self.images.next_due()
    }
}

/// Pools whose files name `image` literally (a recall reports them).
fn literal_pools(config: &crate::spec::Config, image: &str) -> Vec<String> {
    let set: HashSet<&str> = HashSet::from([image]);
    config
        .pools
        .iter()
        .filter(|(_, e)| {
            matches!(&e.doc.spec.template.image, Some(crate::spec::types::ImageRef::Id(i)) if set.contains(i.as_str()))
        })
        .map(|(p, _)| p.clone())
        .collect()
}
