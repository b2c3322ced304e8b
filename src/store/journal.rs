//! The rollout journal, written BEFORE every side effect so a restarted process
//! (or, with `run --ha kubernetes`, the daemon that takes the lease over) knows
//! what was in flight. Two homes: one file per pool under `STATE/journal/`,
//! replaced atomically (fsync, rename); or one ConfigMap per pool beside the
//! Lease, written only by the lease holder. A third, in memory, serves
//! forecasts, which run the real executor on a copy of a pool.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::shared::{Record, SharedHome};
use crate::files::atomic_write;
use crate::rollout::RolloutState;

#[derive(Clone)]
pub enum Journal {
    Files(PathBuf),
    /// Shared with the other daemons (`run --ha`), in the cluster.
    Shared(Arc<dyn SharedHome>),
    /// Nothing leaves the process (forecasts).
    Memory(Arc<Mutex<BTreeMap<String, RolloutState>>>),
}

/// A journal is a few KiB; anything far larger is not one.
const JOURNAL_LIMIT: u64 = 64 * 1024 * 1024;

fn is_pool_name(name: &str) -> bool {
    crate::spec::validate::is_dns_label(name, 63)
}

fn parse(bytes: &[u8], what: &dyn std::fmt::Display) -> anyhow::Result<RolloutState> {
    serde_json::from_slice(bytes)
        .map_err(|e| anyhow::anyhow!("rollout journal {what} is corrupt: {e}"))
}

impl Journal {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Journal::Files(dir.into())
    }

    /// A journal in memory, holding `prior` (a rollout under way) if given.
    pub fn memory(prior: Option<RolloutState>) -> Self {
        let map = prior.map(|s| (s.pool.clone(), s)).into_iter().collect();
        Journal::Memory(Arc::new(Mutex::new(map)))
    }

    fn held(
        map: &Mutex<BTreeMap<String, RolloutState>>,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, RolloutState>> {
        map.locked()
    }

    /// A journal's file name is derived only from a valid pool name (an RFC
    /// 1123 label): a name from a URL or from a planted file can never become
    /// `../../somewhere`.
    fn path(dir: &std::path::Path, pool: &str) -> anyhow::Result<PathBuf> {
        if !is_pool_name(pool) {
            anyhow::bail!(
                "{pool:?} is not a pool name (1 to 63 lower-case letters, digits and '-')"
            );
        }
        Ok(dir.join(format!("{pool}.json")))
    }

    /// Whether this process may act on `pool` now: always with files; with
    /// the cluster, only while it holds the lease of the pool's shard (the
    /// leader lease without sharding). Asked before every side effect.
    pub fn may_act(&self, pool: &str) -> Result<(), super::shared::Fenced> {
        match self {
            Journal::Files(_) | Journal::Memory(_) => Ok(()),
            Journal::Shared(home) => home.may_act(pool),
        }
    }

    pub async fn load(&self, pool: &str) -> anyhow::Result<Option<RolloutState>> {
        match self {
            Journal::Files(dir) => {
                let path = Self::path(dir, pool)?;
                match crate::files::read_regular(&path, JOURNAL_LIMIT) {
                    Ok(bytes) => {
                        let state = parse(&bytes, &path.display())?;
                        if state.pool != pool {
                            anyhow::bail!(
                                "rollout journal {} is corrupt: it names pool {:?}",
                                path.display(),
                                state.pool
                            );
                        }
                        Ok(Some(state))
                    }
                    Err(crate::files::ReadError::Io(e))
                        if e.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Ok(None)
                    }
                    Err(e) => anyhow::bail!("reading rollout journal {}: {e}", path.display()),
                }
            }
            Journal::Shared(home) => {
                if !is_pool_name(pool) {
                    anyhow::bail!("{pool:?} is not a pool name");
                }
                let record = Record::Journal(pool);
                match home.read(record).await? {
                    Some(body) => parse(body.as_bytes(), &home.describe(record)).map(Some),
                    None => Ok(None),
                }
            }
            Journal::Memory(map) => Ok(Self::held(map).get(pool).cloned()),
        }
    }

    pub async fn save(&self, state: &RolloutState) -> anyhow::Result<()> {
        if !is_pool_name(&state.pool) {
            anyhow::bail!(
                "refusing to write a rollout journal for {:?}: not a pool name",
                state.pool
            );
        }
        if let Journal::Memory(map) = self {
            Self::held(map).insert(state.pool.clone(), state.clone());
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(state)?;
        match self {
            Journal::Files(dir) => {
                let path = Self::path(dir, &state.pool)?;
                atomic_write(&path, &bytes)
                    .map_err(|e| anyhow::anyhow!("writing rollout journal {}: {e}", path.display()))
            }
            Journal::Shared(home) => {
                let body = String::from_utf8(bytes).expect("JSON is UTF-8");
                home.write(Record::Journal(&state.pool), body)
                    .await
                    .map_err(|e| anyhow::anyhow!("rollout journal: {e:#}"))
            }
            Journal::Memory(_) => unreachable!("saved above"),
        }
    }

    pub async fn remove(&self, pool: &str) -> anyhow::Result<()> {
        match self {
            Journal::Files(dir) => match std::fs::remove_file(Self::path(dir, pool)?) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => anyhow::bail!("removing rollout journal of {pool}: {e}"),
            },
            Journal::Shared(home) => home
                .delete(Record::Journal(pool))
                .await
                .map_err(|e| anyhow::anyhow!("rollout journal: {e:#}")),
            Journal::Memory(map) => {
                Self::held(map).remove(pool);
                Ok(())
            }
        }
    }

    /// The journals of these pools, as [`Journal::all`] reports them: in
    /// files, only the journals present are read (one directory listing);
    /// in the cluster, one list call.
    pub async fn of(
        &self,
        pools: &[String],
    ) -> anyhow::Result<BTreeMap<String, Result<RolloutState, crate::model::Unreadable>>> {
        let wanted: std::collections::HashSet<&str> = pools.iter().map(String::as_str).collect();
        match self {
            Journal::Files(dir) => self.files(dir, |p| wanted.contains(p)).await,
            _ => {
                let mut all = self.all().await?;
                all.retain(|pool, _| wanted.contains(pool.as_str()));
                Ok(all)
            }
        }
    }

    /// The journal files in `dir` of the pools `keep` names. Only files
    /// named after a pool are journals; anything else (an editor's leftover,
    /// a planted file) is not read.
    async fn files(
        &self,
        dir: &Path,
        keep: impl Fn(&str) -> bool,
    ) -> anyhow::Result<BTreeMap<String, Result<RolloutState, crate::model::Unreadable>>> {
        let mut out = BTreeMap::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => anyhow::bail!("reading rollout journals in {}: {e}", dir.display()),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pool) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|p| is_pool_name(p) && keep(p))
            else {
                continue;
            };
            match self.load(pool).await {
                Ok(Some(state)) => {
                    out.insert(pool.to_string(), Ok(state));
                }
                Ok(None) => {}
                Err(e) => {
                    out.insert(
                        pool.to_string(),
                        Err(crate::model::Unreadable(format!("{e:#}"))),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Every pool's journal (a rollout in progress, stopped, or rolled back); a
    /// corrupt one is listed with its error, never dropped silently. `Err` when
    /// the journals cannot be listed at all.
    pub async fn all(
        &self,
    ) -> anyhow::Result<BTreeMap<String, Result<RolloutState, crate::model::Unreadable>>> {
        match self {
            Journal::Files(dir) => self.files(dir, |_| true).await,
            Journal::Shared(home) => Ok(home
                .journals()
                .await?
                .into_iter()
                .filter(|(pool, _)| is_pool_name(pool))
                .map(|(pool, body)| {
                    let what = home.describe(Record::Journal(&pool));
                    let state = parse(body.as_bytes(), &what)
                        .and_then(|s| {
                            if s.pool == pool {
                                Ok(s)
                            } else {
                                anyhow::bail!(
                                    "rollout journal {what} is corrupt: it names pool {:?}",
                                    s.pool
                                )
                            }
                        })
                        .map_err(|e| crate::model::Unreadable(format!("{e:#}")));
                    (pool, state)
                })
                .collect()),
            Journal::Memory(map) => Ok(Self::held(map)
                .iter()
                .map(|(k, v)| (k.clone(), Ok(v.clone())))
                .collect()),
        }
    }
}
