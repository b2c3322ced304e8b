//! Image channels in the daemon: each channel's source is asked every
//! `interval` (one ask per channel, off the loop, by one daemon under
//! `--ha`); a newly eligible image comes in force as a change of the desired
//! state, unless a change of the channel is in flight (then it waits, the
//! newest only); a recall moves channels off an image at once. The record is
//! kept (`STATE/images.json`, or the ConfigMap the daemons share) before
//! anything follows from it; under `--ha` every daemon reads it again each
//! retry period and follows what another daemon did.

use crate::sync::Locked;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::mpsc;

use crate::daemon::run::reconciler::Reconciler;
use crate::images::{Eligibility, Images, Note, Recall};
use crate::model::image::Release;
use crate::model::{Event, EventKind};
use crate::store::images::ImageStore;

/// A source's answer, back on the loop.
pub struct Asked {
    channel: String,
    answer: Result<Vec<Release>, String>,
}

/// What `/v1/images` serves, rebuilt when the record or a plan changes.
pub type ImagesView = Arc<Mutex<serde_json::Value>>;

pub(super) struct Channels {
    store: ImageStore,
    pub record: Images,
    /// Whether `record` was read from a shared store yet (it is at the
    /// first load, before any pool is resolved).
    read: bool,
    /// Under `--ha`: how often the shared record is read again, and when next.
    refresh_every: Duration,
    refresh_at: Option<Timestamp>,
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
    /// The record kept in `store` (a shared one is read at the first load).
    pub fn open(
        store: ImageStore,
        state_root: &std::path::Path,
        refresh_every: Duration,
    ) -> anyhow::Result<Channels> {
        let record = match &store {
            ImageStore::Shared(_) => Images::default(),
            ImageStore::File(p) => crate::store::images::load(p)?,
            ImageStore::Memory => {
                crate::store::images::load(&crate::store::images::path(state_root))?
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Channels {
            read: !store.is_shared(),
            store,
            record,
            refresh_every,
            refresh_at: None,
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

    fn take_answers(&mut self) -> mpsc::UnboundedReceiver<Asked> {
        self.rx.take().expect("the answers are taken once")
    }

    pub fn next_due(&self) -> Option<Timestamp> {
        self.due
            .iter()
            .filter(|(c, _)| !self.asking.contains(*c))
            .map(|(_, t)| *t)
            .chain(self.refresh_at)
            .min()
    }
}

/// What another daemon's change of the shared record means here: the id
/// of the change it began (when a channel's image in force moved), and
/// whether an image was unrecalled (the sources are asked again at once).
fn followed_change(held: &Images, now: &Images) -> (Option<String>, bool) {
    let moved = now.channels.iter().find_map(|(name, rec)| {
        let before = held.channels.get(name).and_then(|r| r.in_force.as_ref());
        let after = rec.in_force.as_ref()?;
        (before.map(|b| &b.image) != Some(&after.image)).then(|| {
            rec.change
                .clone()
                .unwrap_or_else(|| crate::images::record::change_id(name, &after.image))
        })
    });
    let unrecalled = held.recalled.keys().any(|i| !now.recalled.contains_key(i));
    (moved, unrecalled)
}

impl Reconciler {
    /// The channels the desired state in force follows, each asked when
    /// due (a channel new to it at once), by this daemon if it is the one
    /// that asks; under `--ha`, the shared record read again when due.
    /// Returns true when an image came in force (the desired state is
    /// loaded again).
    pub async fn images_tick(&mut self) -> bool {
        let Some(f) = &self.in_force else {
            return false;
        };
        if self.images.followers.is_empty() {
            return false;
        }
        let (config, providers) = (f.config.clone(), f.providers.clone());
        let now = self.clock.now();
        let mut changed = false;
        if self.images.store.is_shared() && self.images.refresh_at.is_none_or(|t| t <= now) {
            changed |= self.images_read().await;
        }
        if !self.asks_sources() {
            self.images.due.clear();
            return changed;
        }
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
        changed | self.images_settle(&config, now).await
    }

    /// Whether this daemon asks the sources and settles queued images: the
    /// only daemon, or under `--ha` the one that reads the gates too (so
    /// each source is asked once per interval, not once per daemon).
    fn asks_sources(&self) -> bool {
        !self.images.store.is_shared() || self.reads_gates()
    }

    /// Read the shared record again (at the first load, then each retry
    /// period): what another daemon did (an image in force, a recall) is
    /// followed here. True when a channel's image in force moved.
    pub(super) async fn images_read(&mut self) -> bool {
        let now = self.clock.now();
        self.images.refresh_at = now
            .saturating_add(SignedDuration::try_from(self.images.refresh_every).unwrap_or_default())
            .ok();
        let record = match self.images.store.load(&self.state.root).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "reading the image record {} failed; the images in force stay: {e:#}",
                    self.images.store.describe()
                );
                return false;
            }
        };
        self.images.read = true;
        if record == self.images.record {
            return false;
        }
        let (moved, unrecalled) = followed_change(&self.images.record, &record);
        self.images.record = record;
        if unrecalled {
            for due in self.images.due.values_mut() {
                *due = now;
            }
        }
        if let Some(change) = &moved {
            tracing::info!(
                "the image record changed ({change}): the desired state is loaded again"
            );
            self.images.next_change = moved;
        }
        self.images_publish();
        self.images.next_change.is_some()
    }

    /// Before the first load under `--ha`: the record the daemons share.
    pub(super) async fn images_first_read(&mut self) {
        if !self.images.read {
            self.images_read().await;
            // Its own images in force are no change of this daemon's.
            self.images.next_change = None;
        }
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
        self.images.followers = self
            .in_force
            .as_ref()
            .map(|f| crate::images::resolve::followers(&f.config))
            .unwrap_or_default();
        self.images_publish();
    }

    /// Queued images whose channel's change is no longer in flight come in
    /// force. True when one did.
    async fn images_settle(&mut self, config: &crate::spec::Config, now: Timestamp) -> bool {
        let settled: Vec<String> = self
            .images
            .record
            .channels
            .iter()
            .filter(|(c, r)| {
                r.queued.is_some() && config.channels.contains_key(*c) && !self.channel_in_flight(c)
            })
            .map(|(c, _)| c.clone())
            .collect();
        if settled.is_empty() {
            return false;
        }
        let notes = self
            .images_change(|record| {
                let recalled = record.recalled.clone();
                let mut notes = Vec::new();
                for channel in &settled {
                    let (Some(doc), Some(rec)) = (
                        config.channels.get(channel),
                        record.channels.get_mut(channel),
                    ) else {
                        continue;
                    };
                    let rules = Eligibility::of(&doc.doc.spec, &recalled);
                    notes.extend(rec.settle(channel, &rules, now));
                }
                notes
            })
            .await;
        match notes {
            Ok(notes) => self.images_noted(notes, now),
            Err(_) => false,
        }
    }

    /// Change the record and keep it before anything follows from it:
    /// `change` is applied to the record as kept (under `--ha`, as the
    /// other daemons left it), and what it returns is what follows. When
    /// the record cannot be kept, nothing follows (the next ask or settle
    /// tries again) and the reason is returned.
    async fn images_change<T: Send>(
        &mut self,
        mut change: impl FnMut(&mut Images) -> T + Send,
    ) -> Result<T, String> {
        let mut out = None;
        let held = self.images.record.clone();
        let kept = self
            .images
            .store
            .update(&held, &mut |record| out = Some(change(record)))
            .await;
        let why = match (kept, out) {
            (Ok(record), Some(out)) => {
                self.images.record = record;
                return Ok(out);
            }
            (Ok(_), None) => "nothing was read".to_string(),
            (Err(e), _) => e.to_string(),
        };
        tracing::error!(
            "keeping the image record {} failed, so nothing follows from it yet: {why}",
            self.images.store.describe()
        );
        Err(format!(
            "the image record {} could not be written ({why}); nothing changed",
            self.images.store.describe()
        ))
    }

    /// A source answered (or failed). True when an image came in force.
    pub async fn image_answered(&mut self, asked: Asked) -> bool {
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
            .get_or_create(&crate::daemon::views::metrics::ChannelLabels {
                channel: asked.channel.clone(),
            })
            .set(i64::from(asked.answer.is_err()));
        let in_flight = self.channel_in_flight(&asked.channel);
        // The record moves (asked at, newest seen, perhaps an image in
        // force): kept first, then told and acted on.
        let notes = self
            .images_change(|record| {
                crate::reconcile::images::answered(
                    record,
                    &asked.channel,
                    &doc,
                    asked.answer.clone(),
                    in_flight,
                    now,
                )
            })
            .await;
        let changed = match notes {
            Ok(notes) => self.images_noted(notes, now),
            Err(_) => false,
        };
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
    /// channels move (under `--ha`, in the record every daemon follows).
    /// Returns what is said back, and whether the desired state is loaded
    /// again.
    pub async fn image_control(
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
        if !recall {
            return self.image_unrecall(image, who, reason, now).await;
        }
        let deny = crate::reconcile::images::deny_lists(&config);
        // None: recalled already (perhaps by another daemon).
        let notes = self
            .images_change(|record| {
                if record.recalled.contains_key(image) {
                    return None;
                }
                let by = Recall {
                    reason: reason.to_string(),
                    by: who.to_string(),
                    at: now,
                };
                Some(record.recall(image, by, &|c: &str| deny.get(c).cloned(), now))
            })
            .await?;
        let Some(notes) = notes else {
            return Err(format!("{image} is recalled already"));
        };
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

    async fn image_unrecall(
        &mut self,
        image: &str,
        who: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<(String, bool), String> {
        let Some(was) = self.images_change(|record| record.unrecall(image)).await? else {
            return Err(format!("{image} is not recalled"));
        };
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
        Ok((message, false))
    }

    /// `/v1/images`: each channel's record, its pools and how far each
    /// lags; and the short list `/v1/status` carries.
    pub(super) fn images_publish(&self) {
        let Some(f) = &self.in_force else {
            return;
        };
        let now = self.clock.now();
        let latest = self.views.latest();
        let latest = latest.locked().clone();
        let channels: Vec<serde_json::Value> = f
            .config
            .channels
            .iter()
            .map(|(name, e)| self.channel_view(name, e, &f.config, latest.as_deref(), now))
            .collect();
        self.images_board(&f.config);
        let view = serde_json::json!({
            "channels": channels,
            "recalled": self.images.record.recalled,
            // Under `--ha` one daemon asks the sources; the others follow
            // the record it keeps.
            "asksSources": self.asks_sources(),
        });
        *self.images.view.locked() = view;
    }

    /// One channel in `/v1/images`: its record, and each pool following it
    /// with the image it runs, its nodes' images, and how far it lags.
    fn channel_view(
        &self,
        name: &str,
        e: &crate::spec::validate::Entry<crate::spec::types::ImageChannelDoc>,
        config: &crate::spec::Config,
        latest: Option<&crate::daemon::run::reconciler::Latest>,
        now: Timestamp,
    ) -> serde_json::Value {
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
        for (pool, pe) in &config.pools {
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
                _ => 0,
            };
            self.metrics
                .pool_image_age
                .get_or_create(&crate::daemon::views::metrics::PoolLabels { pool: pool.clone() })
                .set(lag);
            let nodes = self.feed.last_observed(pool).map(|(observed, _)| {
                node_images(&observed, &pe.doc, &rec)
                    .into_iter()
                    .map(|(id, image)| {
                        let released = image.as_deref().and_then(released_of);
                        serde_json::json!({
                            "id": id,
                            "image": image,
                            "released": released,
                            "ageSeconds": released.map(|r| now.duration_since(r).as_secs().max(0)),
                        })
                    })
                    .collect::<Vec<_>>()
            });
            pools.push(serde_json::json!({
                "pool": pool,
                "image": running,
                "released": released,
                "ageSeconds": released.map(|r| now.duration_since(r).as_secs().max(0)),
                "lagSeconds": lag,
                "nodes": nodes.unwrap_or_default(),
            }));
        }
        serde_json::json!({
            "name": name,
            "file": e.file,
            "interval": crate::reconcile::images::interval(&e.doc).as_secs(),
            "minReleaseAge": e.doc.spec.min_release_age.as_ref().map(|d| d.value.to_string()),
            "record": rec,
            "nextAskAt": self.images.due.get(name),
            "pools": pools,
        })
    }

    /// The channels in short, for `/v1/status` (the board changes only when
    /// they did).
    fn images_board(&self, config: &crate::spec::Config) {
        let summary: Vec<crate::daemon::views::board::ImageChannelSummary> = config
            .channels
            .keys()
            .map(|name| {
                let rec = self.images.record.channels.get(name);
                crate::daemon::views::board::ImageChannelSummary {
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

/// Each live node of a channel's pool with the image it runs, when known:
/// a node launched from the pool's template as observed runs that
/// template's image; one launched from the pool's template with another of
/// the channel's images (in force, before, queued, newest) runs that image.
/// The other templates are made only when a node is on none seen yet (in
/// a pool at rest, none is).
fn node_images(
    observed: &crate::model::ObservedPool,
    doc: &crate::spec::types::NodePoolDoc,
    rec: &crate::images::ChannelRecord,
) -> Vec<(String, Option<String>)> {
    let mut by_hash = BTreeMap::new();
    if let Some(image) = &observed.template.image {
        by_hash.insert(observed.template.hash(), image.clone());
    }
    if observed
        .live_nodes()
        .any(|n| !by_hash.contains_key(&n.template))
    {
        let base = crate::model::PoolSpec::from_doc(doc).template;
        let candidates = rec
            .in_force
            .iter()
            .chain(&rec.previous)
            .chain(&rec.queued)
            .chain(&rec.newest);
        for r in candidates {
            let t = crate::model::NodeTemplate {
                image: Some(r.image.clone()),
                ..base.clone()
            };
            by_hash.entry(t.hash()).or_insert_with(|| r.image.clone());
        }
    }
    observed
        .live_nodes()
        .map(|n| (n.id.to_string(), by_hash.get(&n.template).cloned()))
        .collect()
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
