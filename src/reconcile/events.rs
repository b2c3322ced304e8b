//! Structured events: one JSON object per line (`--events FILE`), for every step.

use std::sync::Mutex;

use serde::Serialize;

use crate::model::{EventKind, NodeState, ObservedPool, TemplateHash};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Counts {
    pub desired: u32,
    pub total: u32,
    pub available: u32,
    pub updated: u32,
    pub outdated: u32,
}

impl Counts {
    pub fn of(pool: &ObservedPool, desired: TemplateHash) -> Counts {
        let live: Vec<_> = pool.live_nodes().collect();
        Counts {
            desired: pool.size,
            total: live.len() as u32,
            available: live
                .iter()
                .filter(|n| n.state == NodeState::Healthy && !n.cordoned)
                .count() as u32,
            updated: live.iter().filter(|n| n.template == desired).count() as u32,
            outdated: live.iter().filter(|n| n.template != desired).count() as u32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub ts: jiff::Timestamp,
    pub pool: String,
    pub event: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    pub message: String,
    /// The desired state's git revision (`branch@sha`), stamped by the sink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Which daemon acted, under which term of the pool's lease (`run --ha`),
    /// stamped by the sink.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub by: Option<Actor>,
}

/// The daemon an event comes from and its term (the epoch of the lease of
/// the pool's shard, or of the leader lease), when it holds one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Actor {
    pub daemon: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i32>,
}

/// Where events go: a JSONL file (flushed per line, so a crash loses nothing
/// already reported) and/or memory (tests).
type Observer = Box<dyn Fn(&Event) + Send + Sync>;

#[derive(Default)]
pub struct EventSink {
    file: Option<Mutex<crate::files::AppendLog>>,
    memory: Option<Mutex<Vec<Event>>>,
    observers: Vec<Observer>,
    revision: std::sync::RwLock<Option<String>>,
    /// This daemon's identity and its leases (`run --ha`).
    actor: std::sync::OnceLock<(String, std::sync::Arc<crate::cluster::shards::Shards>)>,
}

impl EventSink {
    pub fn none() -> Self {
        EventSink::default()
    }

    /// Nothing receives what is emitted (a forecast's runs): an event need
    /// not even be built, and building one counts every node of the pool.
    pub fn is_silent(&self) -> bool {
        self.file.is_none() && self.memory.is_none() && self.observers.is_empty()
    }

    /// Append to `path`, rotated by size (`NAME.1` ... `NAME.keep`).
    pub fn to_file(
        path: &std::path::Path,
        rotation: crate::files::Rotation,
    ) -> anyhow::Result<Self> {
        let file = crate::files::AppendLog::open(path, rotation)
            .map_err(|e| anyhow::anyhow!("opening events file {}: {e}", path.display()))?;
        Ok(EventSink {
            file: Some(Mutex::new(file)),
            ..EventSink::default()
        })
    }

    pub fn in_memory() -> Self {
        EventSink {
            memory: Some(Mutex::new(Vec::new())),
            ..EventSink::default()
        }
    }

    /// Also show every event to `observer` (progress on a terminal, the
    /// latency history, the daemon's status board).
    pub fn observed_by(mut self, observer: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.observers.push(Box::new(observer));
        self
    }

    /// Stamp every later event with this revision of the desired state.
    pub fn set_revision(&self, revision: Option<String>) {
        *self.revision.write().unwrap_or_else(|p| p.into_inner()) = revision;
    }

    /// Stamp every later event with this daemon's identity and the epoch of
    /// the lease that lets it act on the event's pool.
    pub fn stamp_with(
        &self,
        identity: String,
        shards: std::sync::Arc<crate::cluster::shards::Shards>,
    ) {
        let _ = self.actor.set((identity, shards));
    }

    pub fn emit(&self, mut event: Event) {
        if event.by.is_none()
            && let Some((daemon, shards)) = self.actor.get()
        {
            event.by = Some(Actor {
                daemon: daemon.clone(),
                epoch: shards
                    .fence(shards.of(&event.pool))
                    .current()
                    .map(|t| t.epoch),
            });
        }
        if event.revision.is_none() {
            event.revision = self
                .revision
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
        }
        // Every step is also a structured log record.
        let counts = event.counts.unwrap_or_default();
        tracing::info!(
            pool = %event.pool,
            event = event.event.as_str(),
            node = event.node.as_deref().unwrap_or(""),
            desired = counts.desired,
            total = counts.total,
            available = counts.available,
            updated = counts.updated,
            outdated = counts.outdated,
            revision = event.revision.as_deref().unwrap_or(""),
            "{}",
            event.message
        );
        for o in &self.observers {
            o(&event);
        }
        if let Some(f) = &self.file {
            let mut line = serde_json::to_vec(&event).expect("an event serializes");
            line.push(b'\n');
            let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
            // Events are a record, not a control path: a full disk must not stop a rollout.
            let _ = f.append(&line);
        }
        if let Some(m) = &self.memory {
            m.lock().unwrap_or_else(|p| p.into_inner()).push(event);
        }
    }

    pub fn take(&self) -> Vec<Event> {
        self.memory
            .as_ref()
            .map(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    }
}
