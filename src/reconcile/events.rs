//! Structured events: one JSON object per line (`--events FILE`), for every step.

use crate::sync::Locked;
use crate::sync::RwLocked;
use std::sync::Mutex;

use crate::model::events::{Actor, Event};

/// Where events go: a JSONL file (flushed per line, so a crash loses nothing
/// already reported) and/or memory (tests).
type Observer = Box<dyn Fn(&Event) + Send + Sync>;
type Stamp = Box<dyn Fn(&str) -> Actor + Send + Sync>;

#[derive(Default)]
pub struct EventSink {
    file: Option<Mutex<crate::files::AppendLog>>,
    memory: Option<Mutex<Vec<Event>>>,
    observers: Vec<Observer>,
    revision: std::sync::RwLock<Option<String>>,
    /// Who acted on a pool (`run --ha`: this daemon and its term of the pool's lease).
    actor: std::sync::OnceLock<Stamp>,
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
        *self.revision.write_locked() = revision;
    }

    /// Stamp every later event with the actor `stamp` names for its pool
    /// (this daemon's identity, and the epoch of the lease that lets it act
    /// on the pool).
    pub fn stamp_with(&self, stamp: impl Fn(&str) -> Actor + Send + Sync + 'static) {
        let _ = self.actor.set(Box::new(stamp));
    }

    pub fn emit(&self, mut event: Event) {
        // Events are served (status, pages, streams) and written: never a secret.
        if let std::borrow::Cow::Owned(m) = crate::secrets::redact(&event.message) {
            event.message = m;
        }
        if event.by.is_none()
            && let Some(stamp) = self.actor.get()
        {
            event.by = Some(stamp(&event.pool));
        }
        if event.revision.is_none() {
            event.revision = self.revision.read_locked().clone();
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
            let mut f = f.locked();
            // Events are a record, not a control path: a full disk must not stop a rollout.
            let _ = f.append(&line);
        }
        if let Some(m) = &self.memory {
            m.locked().push(event);
        }
    }

    pub fn take(&self) -> Vec<Event> {
        self.memory
            .as_ref()
            .map(|m| std::mem::take(&mut *m.locked()))
            .unwrap_or_default()
    }
}
