//! The live feed behind the web page and `/v1/events/stream`: every rollout
//! event numbered (`seq`), each pool's recent events kept in a bounded ring
//! (the page's timeline and capacity chart are drawn from them), and one
//! broadcast of what changed (rollout events, pool status, config status) to
//! the Server-Sent Events subscribers.
//!
//! A slow subscriber never slows the daemon: the broadcast is bounded and a
//! subscriber that falls behind is cut off (its browser reconnects and reloads
//! the view, so it misses nothing it shows).

use crate::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;
use tokio::sync::{broadcast, watch};

use crate::daemon::views::board::Board;
use crate::model::Event;
use crate::model::{NodeState, ObservedPool, TemplateHash};

/// Events kept per pool: a 1,000-node roll makes about six per node, and the
/// page draws the most recent nodes, so a few thousand cover what it shows.
const EVENTS_PER_POOL: usize = 4096;

/// Messages a subscriber may fall behind by before it is cut off.
const BACKLOG: usize = 4096;

/// Live streams open at once, at most; more are answered 503.
pub const MAX_STREAMS: usize = 64;
/// Live streams one peer (a local user, a remote address) may hold: a page
/// in a few tabs, never every place.
pub const MAX_STREAMS_PER_PEER: usize = 8;

/// Held by an open stream; frees its place when the stream ends.
pub struct StreamSlot(Arc<Feed>, String);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
        let mut peers = self.0.peers.locked();
        if let Some(n) = peers.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.1);
            }
        }
    }
}

/// Why a stream has no place.
#[derive(Debug, PartialEq, Eq)]
pub enum NoPlace {
    /// Every place is taken.
    Full,
    /// This peer holds its share already.
    PeerFull,
}

/// One event with its place in the feed.
#[derive(Clone, Debug, Serialize)]
pub struct Stamped {
    /// Increases with every event this daemon emits (from 1).
    pub seq: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// A node as the page draws it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageNode {
    pub id: String,
    /// `pending`, `healthy`, `unhealthy` or `terminating`.
    pub state: &'static str,
    /// On the pool's desired template.
    pub updated: bool,
    pub cordoned: bool,
    pub launched_at: jiff::Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<jiff::Timestamp>,
}

/// One message of the stream: its SSE event name, the pool it concerns (for
/// `?pool=` filtering) and its JSON, serialized once for every subscriber.
#[derive(Clone, Debug)]
pub struct Message {
    pub name: &'static str,
    pub pool: Option<String>,
    pub data: Arc<str>,
}

pub struct Feed {
    seq: AtomicU64,
    recent: Mutex<HashMap<String, VecDeque<Stamped>>>,
    /// Each pool's nodes as last observed (the page's timeline shows the
    /// nodes that had no event lately too).
    nodes: Mutex<HashMap<String, (Arc<ObservedPool>, TemplateHash)>>,
    tx: broadcast::Sender<Message>,
    /// Set when the daemon stops: every stream ends cleanly (a browser sees
    /// the end of the response, not a cut connection, and reconnects).
    closed: watch::Sender<bool>,
    /// Live streams open now.
    streams: AtomicUsize,
    /// Live streams open now, by peer (`peer_id::identity`).
    peers: Mutex<HashMap<String, usize>>,
    /// What was last published of the board (pool JSON by name, config JSON,
    /// the board's version), so only changes go out.
    published: Mutex<Published>,
}

#[derive(Default)]
struct Published {
    version: u64,
    pools: HashMap<String, Arc<str>>,
    config: Option<Arc<str>>,
}

impl Default for Feed {
    fn default() -> Self {
        Feed::new()
    }
}

impl Feed {
    pub fn new() -> Feed {
        Feed {
            seq: AtomicU64::new(0),
            recent: Mutex::new(HashMap::new()),
            nodes: Mutex::new(HashMap::new()),
            tx: broadcast::channel(BACKLOG).0,
            closed: watch::channel(false).0,
            streams: AtomicUsize::new(0),
            peers: Mutex::new(HashMap::new()),
            published: Mutex::new(Published::default()),
        }
    }

    /// Number an event, keep it in its pool's ring and send it to subscribers.
    pub fn record(&self, event: &Event) {
        // Numbered, kept and sent under one lock, so the stream carries
        // events in `seq` order whichever thread emits them.
        let mut recent = self.recent.locked();
        let stamped = Stamped {
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            event: event.clone(),
        };
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Message {
                name: "rollout",
                pool: Some(event.pool.clone()),
                data: json_of(&stamped).into(),
            });
        }
        let ring = recent.entry(event.pool.clone()).or_default();
        if ring.len() == EVENTS_PER_POOL {
            ring.pop_front();
        }
        ring.push_back(stamped);
    }

    /// A pool's `limit` most recent events, oldest first.
    pub fn recent(&self, pool: &str, limit: usize) -> Vec<Stamped> {
        self.recent
            .locked()
            .get(pool)
            .map(|r| {
                r.iter()
                    .skip(r.len().saturating_sub(limit))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A place for one more live stream, if fewer than [`MAX_STREAMS`] are
    /// open (each holds a connection and a subscription).
    pub fn stream_slot(self: &Arc<Self>, peer: &str) -> Result<StreamSlot, NoPlace> {
        let mut peers = self.peers.locked();
        let held = peers.get(peer).copied().unwrap_or(0);
        if held >= MAX_STREAMS_PER_PEER {
            return Err(NoPlace::PeerFull);
        }
        let n = self.streams.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_STREAMS {
            self.streams.fetch_sub(1, Ordering::SeqCst);
            return Err(NoPlace::Full);
        }
        peers.insert(peer.to_string(), held + 1);
        Ok(StreamSlot(self.clone(), peer.to_string()))
    }

    /// What an observation of `pool` found (`target`: its desired template).
    pub fn observed(&self, pool: Arc<ObservedPool>, target: TemplateHash) {
        self.nodes
            .locked()
            .insert(pool.name.clone(), (pool, target));
    }

    /// A pool as last observed, with its desired template then.
    pub fn last_observed(&self, pool: &str) -> Option<(Arc<ObservedPool>, TemplateHash)> {
        self.nodes.locked().get(pool).cloned()
    }

    /// A pool's nodes as last observed, as the page draws them.
    pub fn nodes(&self, pool: &str) -> Vec<PageNode> {
        let Some((pool, target)) = self.last_observed(pool) else {
            return Vec::new();
        };
        pool.nodes
            .iter()
            .map(|n| PageNode {
                id: n.id.to_string(),
                state: match n.state {
                    NodeState::Pending => "pending",
                    NodeState::Healthy => "healthy",
                    NodeState::Unhealthy => "unhealthy",
                    NodeState::Terminating => "terminating",
                },
                updated: n.template == target,
                cordoned: n.cordoned,
                launched_at: n.launched_at,
                healthy_since: n.healthy_since,
            })
            .collect()
    }

    /// Forget a pool that is no longer known.
    pub fn forget(&self, pool: &str) {
        self.recent.locked().remove(pool);
        self.nodes.locked().remove(pool);
    }

    /// The messages from now on, and the signal that the feed closed.
    pub fn subscribe(&self) -> (broadcast::Receiver<Message>, watch::Receiver<bool>) {
        (self.tx.subscribe(), self.closed.subscribe())
    }

    /// End every stream (the daemon is stopping).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Send what changed on the board since the last call (pool statuses,
    /// the config status). Nothing is done while nobody listens, or when the
    /// board has not changed.
    pub fn publish_board(&self, board: &Board) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let version = board.version();
        let mut published = self.published.locked();
        if published.version == version && version != 0 {
            return;
        }
        let doc = board.snapshot();
        published.version = version;
        let mut seen = HashMap::with_capacity(doc.pools.len());
        for pool in &doc.pools {
            let json: Arc<str> = json_of(pool).into();
            if published.pools.get(&pool.name) != Some(&json) {
                let _ = self.tx.send(Message {
                    name: "pool",
                    pool: Some(pool.name.clone()),
                    data: json.clone(),
                });
            }
            seen.insert(pool.name.clone(), json);
        }
        published.pools = seen;
        let config: Arc<str> = json_of(&doc.config).into();
        if published.config.as_ref() != Some(&config) {
            let _ = self.tx.send(Message {
                name: "config",
                pool: None,
                data: config.clone(),
            });
            published.config = Some(config);
        }
    }
}

/// A message's JSON, redacted: the stream is served like every other answer.
fn json_of<T: Serialize>(value: &T) -> String {
    serde_json::to_string(&crate::secrets::redacted_value(value)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    fn event(pool: &str) -> Event {
        Event::new(
            jiff::Timestamp::UNIX_EPOCH,
            pool,
            EventKind::NodeHealthy,
            "healthy",
        )
        .node(Some("n1".into()))
    }

    #[test]
    fn events_are_numbered_in_order_and_kept_per_pool_within_bounds() {
        let feed = Feed::new();
        for _ in 0..EVENTS_PER_POOL + 10 {
            feed.record(&event("web"));
        }
        feed.record(&event("db"));
        let web = feed.recent("web", usize::MAX);
        assert_eq!(feed.recent("web", 3).len(), 3);
        assert_eq!(feed.recent("web", 3)[2].seq, web[web.len() - 1].seq);
        assert_eq!(web.len(), EVENTS_PER_POOL);
        assert_eq!(web[0].seq, 11, "the oldest ten were dropped");
        assert!(web.windows(2).all(|w| w[0].seq < w[1].seq));
        assert_eq!(feed.recent("db", 10)[0].seq, EVENTS_PER_POOL as u64 + 11);
        let json = serde_json::to_value(&web[0]).unwrap();
        assert_eq!(json["seq"], 11);
        assert_eq!(json["pool"], "web");
        assert_eq!(json["event"], "node_healthy");
    }

    #[test]
    fn streams_are_capped_per_peer_and_in_all_and_their_places_freed() {
        let feed = Arc::new(Feed::new());
        let mine: Vec<_> = (0..MAX_STREAMS_PER_PEER)
            .map(|_| feed.stream_slot("uid:1000").unwrap())
            .collect();
        // One local user cannot take the others' places.
        assert_eq!(feed.stream_slot("uid:1000").err(), Some(NoPlace::PeerFull));
        let others: Vec<_> = (0..MAX_STREAMS - MAX_STREAMS_PER_PEER)
            .map(|i| feed.stream_slot(&format!("uid:{i}")).unwrap())
            .collect();
        assert_eq!(feed.stream_slot("uid:2000").err(), Some(NoPlace::Full));
        drop(mine);
        assert!(feed.stream_slot("uid:1000").is_ok());
        drop(others);
        assert!(
            feed.peers.lock().unwrap().len() <= 1,
            "freed places are forgotten"
        );
    }

    #[tokio::test]
    async fn subscribers_get_rollout_events_and_only_changed_pools() {
        let feed = Feed::new();
        let board = Board::new(crate::daemon::views::board::tests::daemon_info());
        board.pool("web", "sim", |p| p.message = "one".into());
        let (mut rx, _closed) = feed.subscribe();
        feed.publish_board(&board);
        let first = rx.recv().await.unwrap();
        assert_eq!((first.name, first.pool.as_deref()), ("pool", Some("web")));
        assert_eq!(rx.recv().await.unwrap().name, "config");
        // Unchanged: nothing more.
        feed.publish_board(&board);
        feed.record(&event("web"));
        let m = rx.recv().await.unwrap();
        assert_eq!(m.name, "rollout");
        assert!(m.data.contains("\"seq\":1"));
        board.pool("web", "sim", |p| p.message = "two".into());
        feed.publish_board(&board);
        let m = rx.recv().await.unwrap();
        assert_eq!(m.name, "pool");
        assert!(m.data.contains("two"));
        assert!(rx.try_recv().is_err(), "the config did not change");
    }
}
