//! When each pool is looked at: the work queue (now, or due later), the
//! observations in flight (one per provider), the resync's slices, the
//! counters that tell a stale observation from a fresh one, and the first
//! pass after start that makes the daemon ready.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};

use crate::daemon::run::queue::{Trigger, WorkQueue};
use crate::daemon::run::resync;
use crate::daemon::views::board::Observing;

/// The daemon says it is ready at the latest this long after its first load.
const READY_AFTER: Duration = Duration::from_secs(30);

/// Where the resync stands: the last pool it queued, and when the next slice is due.
struct ResyncState {
    interval: Duration,
    cursor: Option<String>,
    next: Timestamp,
    /// When the current cycle started (the fleet is looked at by `started + interval`).
    started: Timestamp,
}

pub(super) struct Schedule {
    /// Pools waiting to be observed and planned, and pools due later.
    queue: WorkQueue,
    /// Providers with an observation in flight (one each): how many pools, since when.
    observing: BTreeMap<String, (usize, Timestamp)>,
    /// Counts what happened to pools (a worker started or ended, a pause): an
    /// observation begun before a pool's last change is not acted on.
    seq: u64,
    pool_seq: HashMap<String, u64>,
    /// `seq` when this daemon last took or lost a lease: observations begun
    /// before it are stale for every pool.
    role_seq: u64,
    resync: ResyncState,
    /// The pools loaded at start not yet planned once, and when that load
    /// was: the daemon says it is ready when they all were, or after
    /// `READY_AFTER` (a provider that does not answer must not keep it
    /// from starting).
    startup_pending: Option<(HashSet<String>, Instant)>,
    first_pass_done: bool,
}

/// The next resync slice, and whether a whole cycle ended with it.
pub(super) struct Slice {
    pub pools: Vec<String>,
    pub cycle_ended: Option<Timestamp>,
}

impl Schedule {
    pub fn new(now: Timestamp, resync: Duration) -> Schedule {
        Schedule {
            queue: WorkQueue::default(),
            observing: BTreeMap::new(),
            seq: 0,
            pool_seq: HashMap::new(),
            role_seq: 0,
            resync: ResyncState {
                interval: resync,
                cursor: None,
                next: now,
                started: now,
            },
            startup_pending: None,
            first_pass_done: false,
        }
    }

    /// When the resync under way will have looked at every pool.
    pub fn resync_end(&self, now: Timestamp) -> Timestamp {
        let interval = SignedDuration::try_from(self.resync.interval).unwrap_or_default();
        now.saturating_add(interval).unwrap_or(now)
    }

    pub fn add(&mut self, pool: &str, provider: &str, why: Trigger) {
        self.queue.add(pool, provider, why);
    }

    /// Look at a pool again at `at` at the latest.
    pub fn add_after(&mut self, pool: &str, at: Timestamp) {
        self.queue.add_after(pool, at);
    }

    /// Out of the queue (it is queued again under its provider, or forgotten).
    pub fn unqueue(&mut self, pool: &str) {
        self.queue.forget(pool);
    }

    /// A pool no longer known: nothing of it is kept.
    pub fn forget(&mut self, pool: &str) {
        self.looked_at(pool);
        self.queue.forget(pool);
        self.pool_seq.remove(pool);
    }

    pub fn take_due(&mut self, now: Timestamp) -> Vec<String> {
        self.queue.take_due(now)
    }

    /// The next instant something is due: a pool's look, or (with a desired
    /// state in force) a resync slice.
    pub fn next_due(&self, resyncing: bool) -> Option<Timestamp> {
        let resync = resyncing.then_some(self.resync.next);
        match (self.queue.next_due(), resync) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The resync's next slice when one is due: the names after the last
    /// slice among `files` and `inventory` (the pools of each).
    pub fn resync_slice<A, B>(
        &mut self,
        now: Timestamp,
        files: &BTreeMap<String, A>,
        inventory: &BTreeMap<String, B>,
    ) -> Option<Slice> {
        if now < self.resync.next {
            return None;
        }
        let known = resync::union_len(files, inventory);
        let (tick, per) = resync::pace(known, self.resync.interval);
        let tick = SignedDuration::try_from(tick).unwrap_or_default();
        self.resync.next = now.saturating_add(tick).unwrap_or(now);
        let (pools, _) = resync::slice(files, inventory, self.resync.cursor.as_deref(), per);
        if let Some(last) = pools.last() {
            self.resync.cursor = Some(last.clone());
        }
        // Once per interval the desired state is read again too, in case a
        // change was missed.
        let interval = SignedDuration::try_from(self.resync.interval).unwrap_or_default();
        let cycle_end = self.resync.started.saturating_add(interval).unwrap_or(now);
        let cycle_ended = (now >= cycle_end).then(|| {
            self.resync.started = now;
            now.saturating_add(interval).unwrap_or(now)
        });
        Some(Slice { pools, cycle_ended })
    }

    /// Something happened to a pool (a worker started or ended, a pause):
    /// observations begun before it are stale for this pool.
    pub fn touched(&mut self, pool: &str) {
        self.seq += 1;
        self.pool_seq.insert(pool.to_string(), self.seq);
    }

    /// This daemon took or lost a lease: every observation begun before is stale.
    pub fn role_changed(&mut self) {
        self.seq += 1;
        self.role_seq = self.seq;
    }

    /// The counter an observation starting now carries.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether an observation that began at `seq` is stale for `pool`.
    pub fn stale(&self, pool: &str, seq: u64) -> bool {
        seq < self.role_seq || self.pool_seq.get(pool).is_some_and(|s| *s > seq)
    }

    /// Providers with pools queued and no observation in flight.
    pub fn ready_providers(&self) -> Vec<String> {
        self.queue
            .providers()
            .into_iter()
            .filter(|p| !self.observing.contains_key(p))
            .collect()
    }

    /// Take up to `max` queued pools of `provider` for an observation.
    pub fn take(&mut self, provider: &str, max: usize) -> (Vec<String>, Option<Trigger>) {
        self.queue.take(provider, max)
    }

    pub fn observing(&mut self, provider: &str, pools: usize, now: Timestamp) {
        self.observing.insert(provider.to_string(), (pools, now));
    }

    pub fn observed(&mut self, provider: &str) {
        self.observing.remove(provider);
    }

    /// What status shows: (queued, scheduled later), and the observations in flight.
    pub fn view(&self) -> ((usize, usize), Vec<Observing>) {
        let observing = self
            .observing
            .iter()
            .map(|(provider, (pools, since))| Observing {
                provider: provider.clone(),
                pools: *pools,
                since: *since,
            })
            .collect();
        ((self.queue.len(), self.queue.scheduled()), observing)
    }

    /// Nothing queued and nothing being observed.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.observing.is_empty()
    }

    /// The first load: these pools are to be looked at once before the
    /// daemon says it is ready.
    pub fn first_load(&mut self, pools: HashSet<String>) {
        self.startup_pending = Some((pools, Instant::now()));
    }

    /// A pool was planned (or forgotten): it no longer holds up readiness.
    pub fn looked_at(&mut self, pool: &str) {
        if let Some((pending, _)) = &mut self.startup_pending {
            pending.remove(pool);
        }
    }

    /// Whether the first pass is done: every pool loaded at start was
    /// looked at once, or `READY_AFTER` passed (said in the log).
    pub fn check_first_pass(&mut self) -> bool {
        if !self.first_pass_done
            && let Some((pending, since)) = &self.startup_pending
        {
            if pending.is_empty() {
                self.first_pass_done = true;
            } else if since.elapsed() >= READY_AFTER {
                tracing::warn!(
                    pools = pending.len(),
                    "ready before every pool was looked at once: their providers have not answered in {}s",
                    READY_AFTER.as_secs()
                );
                self.first_pass_done = true;
            }
        }
        self.first_pass_done
    }

    pub fn first_pass_done(&self) -> bool {
        self.first_pass_done
    }
}
