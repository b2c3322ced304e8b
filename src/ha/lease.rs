//! Leader election on a coordination.k8s.io Lease, for `poolwright run --ha
//! kubernetes`: only the holder acts. [`step`] is the pure rule (what to do with
//! the lease as last read, by the candidate's own clock); [`Elector`] does the
//! reads and compare-and-swap writes; [`Fence`] is what the rest of the daemon
//! asks before every side effect.
//!
//! Expiry is judged as client-go judges it: by when THIS process first saw the
//! holder's latest renewal, not by the timestamp the holder wrote, so clock
//! skew between hosts cannot make a live lease look expired. The holder stops
//! acting `renew_deadline` after its last successful renewal began, which is
//! before any other candidate may take over (`lease_duration` after it saw that
//! renewal). Every change of holder increments `leaseTransitions`: the epoch
//! that the journal's ConfigMaps carry, so a deposed leader's late write is
//! refused even if it slips past its own deadline.
//!
//! An identity must be unique: two processes with one identity would both
//! "renew" the lease and both act. Each elector remembers the renewal it
//! last wrote; a lease held under its identity with another renewal was
//! written by another process with the same identity. The daemon then stops
//! acting at once and takes no lease again until it is restarted
//! ([`IdentityGuard`]).

use crate::sync::Locked;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use serde::Serialize;

use crate::clock::Clock;
use crate::store::shared::Fenced;

/// The lease as read: who holds it, for how long, renewed when, how many
/// changes of holder it has seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `None` when released (or never held).
    pub holder: Option<String>,
    pub duration: SignedDuration,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

/// A record and when this process first saw it (by its own clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    pub record: Record,
    pub at: Timestamp,
}

/// Remember when the current record was first seen: unchanged keeps the old
/// instant (the lease is ageing), changed starts again from `now`.
pub fn sight(last: Option<Sighting>, current: &Record, now: Timestamp) -> Sighting {
    match last {
        Some(s) if s.record == *current => s,
        _ => Sighting {
            record: current.clone(),
            at: now,
        },
    }
}

/// Why a round of the election could not tell who holds the lease.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error("get: {0}")]
    Get(kube::Error),
    /// Another process wrote first.
    #[error("lost the race for the lease: {0}")]
    LostRace(String),
    /// The API server refused the write: nothing was written.
    #[error("write: {message} ({code})")]
    Refused { message: String, code: u16 },
    /// No answer: the write may have landed.
    #[error("write: {0}")]
    Write(kube::Error),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseMove {
    /// The lease is held under our identity, but renewed at `renewed`, which
    /// is not the renewal this process last wrote: another process runs with
    /// the same identity.
    Duplicate { renewed: Option<Timestamp> },
    /// No lease exists: create it, held by us, epoch 0.
    Create,
    /// We hold it: renew.
    Renew { epoch: i32 },
    /// Released, or not renewed for its duration: take it with this epoch.
    Acquire { epoch: i32 },
    /// Someone else holds it; it cannot be taken before `expires_at`.
    Follow {
        holder: String,
        expires_at: Timestamp,
    },
}

/// Whether a lease held under this process's identity, renewed at
/// `renewed`, was renewed by another process, given the renewal this process
/// last wrote (see [`step`]).
fn renewed_by_another(wrote: Option<Timestamp>, renewed: Option<Timestamp>) -> bool {
    wrote.is_some() && renewed != wrote
}

/// The election rule. `seen` must be [`sight`] of `current` (when it exists);
/// `wrote` is the renewal this process last wrote to the lease while holding
/// it, `None` when it has written none it knows of (just started, or its last
/// write's answer was lost: the lease may then hold a renewal it never saw
/// answered, which is taken as its own).
pub fn step(
    me: &str,
    current: Option<&Sighting>,
    wrote: Option<Timestamp>,
    now: Timestamp,
) -> LeaseMove {
    let Some(seen) = current else {
        return LeaseMove::Create;
    };
    let r = &seen.record;
    match r.holder.as_deref() {
        Some(h) if h == me && renewed_by_another(wrote, r.renew_time) => LeaseMove::Duplicate {
            renewed: r.renew_time,
        },
        Some(h) if h == me => LeaseMove::Renew {
            epoch: r.transitions,
        },
        None => LeaseMove::Acquire {
            epoch: r.transitions + 1,
        },
        Some(h) => {
            let expires_at = seen.at.saturating_add(r.duration).unwrap_or(seen.at);
            if now >= expires_at {
                LeaseMove::Acquire {
                    epoch: r.transitions + 1,
                }
            } else {
                LeaseMove::Follow {
                    holder: h.to_string(),
                    expires_at,
                }
            }
        }
    }
}

/// This process's current right to act, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub identity: String,
    pub epoch: i32,
    pub valid_until: Instant,
}

/// Asked before every side effect and every journal write. A term lapses by
/// itself at its deadline, even if the elector is stuck on a slow API call.
#[derive(Debug, Default)]
pub struct Fence {
    term: Mutex<Option<Term>>,
}

impl Fence {
    pub fn current(&self) -> Option<Term> {
        self.term
            .locked()
            .clone()
            .filter(|t| Instant::now() < t.valid_until)
    }

    /// `Err` names why this process may not act.
    pub fn check(&self) -> Result<Term, Fenced> {
        self.current().ok_or_else(|| {
            Fenced(
                "this daemon does not hold the leader lease (lost or not yet taken): no step is started"
                    .to_string(),
            )
        })
    }

    fn grant(&self, term: Term) {
        *self.term.locked() = Some(term);
    }

    fn revoke(&self) {
        *self.term.locked() = None;
    }
}

/// Shared by every elector of one daemon: set once another process is seen
/// renewing a lease under this daemon's identity. From then on none of them
/// leads (whichever lease showed it, the other process may hold any of them),
/// until the daemon is restarted, by then with an identity of its own.
#[derive(Clone, Debug, Default)]
pub struct IdentityGuard(Arc<std::sync::OnceLock<String>>);

impl IdentityGuard {
    /// Why this daemon takes no lease, once a duplicate was seen.
    pub fn conflict(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    fn trip(&self, why: String) {
        if self.0.set(why.clone()).is_ok() {
            tracing::error!("{why}");
        }
    }
}

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// Shared with the daemon's other electors (see [`IdentityGuard`]).
    pub guard: IdentityGuard,
    pub duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// What this daemon is in the election (shown in status).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "role")]
pub enum Role {
    /// Not yet known (first round not done, or the API cannot be reached).
    Candidate {
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Leader {
        epoch: i32,
        since: Timestamp,
    },
    Standby {
        holder: String,
        /// The earliest instant this daemon may take over if the holder stops renewing.
        expires_at: Timestamp,
    },
    /// Nobody holds it (released, or expired) and this daemon is not taking
    /// it (a shard lease that is another daemon's share).
    Free,
}

impl Role {
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader { .. })
    }

    pub fn describe(&self) -> String {
        match self {
            Role::Candidate { error: None } => "candidate: the lease has not been read yet".into(),
            Role::Candidate { error: Some(e) } => format!("candidate: {e}"),
            Role::Leader { epoch, since } => format!("leader since {since} (epoch {epoch})"),
            Role::Standby { holder, expires_at } => {
                format!(
                    "standby: {holder} holds the lease (takes over after {expires_at} if it stops renewing)"
                )
            }
            Role::Free => "free: nobody holds the lease".into(),
        }
    }

    /// Who holds the lease as this daemon last saw it (`None`: free or unknown).
    pub fn holder<'a>(&'a self, me: &'a str) -> Option<&'a str> {
        match self {
            Role::Leader { .. } => Some(me),
            Role::Standby { holder, .. } => Some(holder),
            Role::Free | Role::Candidate { .. } => None,
        }
    }
}

/// Reads and writes the Lease; one [`Elector::round`] every retry period.
pub struct Elector {
    api: Api<Lease>,
    pub settings: LeaseSettings,
    clock: Arc<dyn Clock>,
    pub fence: Arc<Fence>,
    seen: Option<Sighting>,
    /// The renewal this process last wrote (see [`step`]).
    wrote: Option<Timestamp>,
    role: Role,
    /// How long the lease went unrenewed before this daemon last took it
    /// over (from the previous holder's last renewal), once, for metrics.
    handover: Option<SignedDuration>,
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        duration: SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15))),
        renew_time: spec.renew_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

impl Elector {
    pub fn new(client: kube::Client, settings: LeaseSettings, clock: Arc<dyn Clock>) -> Elector {
        Elector::with_fence(client, settings, clock, Arc::new(Fence::default()))
    }

    /// An elector granting its terms through `fence` (a shard's).
    pub fn with_fence(
        client: kube::Client,
        settings: LeaseSettings,
        clock: Arc<dyn Clock>,
        fence: Arc<Fence>,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            clock,
            fence,
            seen: None,
            wrote: None,
            role: Role::Candidate { error: None },
            handover: None,
        }
    }

    /// The time the lease went unrenewed before this daemon's last take-over,
    /// if not yet taken.
    pub fn take_handover(&mut self) -> Option<SignedDuration> {
        self.handover.take()
    }

    pub fn role(&self) -> &Role {
        &self.role
    }

    fn lease_ref(&self) -> String {
        format!("Lease {}/{}", self.settings.namespace, self.settings.name)
    }

    fn spec(&self, epoch: i32, acquire: Option<Timestamp>, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.duration.as_secs().max(1) as i32),
            acquire_time: acquire.map(MicroTime),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(epoch),
            ..LeaseSpec::default()
        }
    }

    /// One election round: read the lease, then create, renew or take it, or
    /// follow its holder. Returns the new role.
    pub async fn round(&mut self) -> &Role {
        self.round_wanting(true).await
    }

    /// A round that takes a free (or expired) lease only when `want`: a
    /// held lease is always renewed (giving it back is [`release`](Self::release)).
    pub async fn round_wanting(&mut self, want: bool) -> &Role {
        let began = Instant::now();
        let result = self.try_round(began, want).await;
        let leading_until = self.fence.current();
        self.role = match result {
            Ok(role) => role,
            Err(e) => {
                // Cannot tell: a leader keeps acting until its deadline, no longer.
                match (&self.role, leading_until) {
                    (Role::Leader { epoch, since }, Some(_)) => {
                        tracing::warn!(
                            "{}: renewal failed, still within the renew deadline: {e}",
                            self.lease_ref()
                        );
                        Role::Leader {
                            epoch: *epoch,
                            since: *since,
                        }
                    }
                    _ => {
                        self.fence.revoke();
                        Role::Candidate {
                            error: Some(format!("{}: {e}", self.lease_ref())),
                        }
                    }
                }
            }
        };
        &self.role
    }

    /// Once the daemon's [`IdentityGuard`] has tripped: the term ends now
    /// (not at its deadline, as after a failed renewal: another process may
    /// be acting under this identity) and the role says why. Returns whether
    /// it had tripped.
    pub fn stand_down(&mut self) -> bool {
        let Some(why) = self.settings.guard.conflict() else {
            return false;
        };
        self.fence.revoke();
        self.role = Role::Candidate {
            error: Some(why.to_string()),
        };
        true
    }

    /// The lease, held under this daemon's identity, was renewed at
    /// `renewed` by another process: trip the guard and stand down.
    fn duplicate(&mut self, renewed: Option<Timestamp>) {
        self.settings.guard.trip(format!(
            "{} is held as {:?} and was renewed at {} by another process, not this one (whose last renewal was {}): two daemons run with the same identity; this one stopped acting and takes no lease until it is restarted with a unique --ha-identity",
            self.lease_ref(),
            self.settings.identity,
            renewed.map_or("an unknown time".to_string(), |t| t.to_string()),
            self.wrote.map_or("unknown".to_string(), |t| t.to_string()),
        ));
        self.stand_down();
    }

    async fn try_round(&mut self, began: Instant, want: bool) -> Result<Role, RoundError> {
        if self.stand_down() {
            return Ok(self.role.clone());
        }
        let now = self.clock.now();
        let lease = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(RoundError::Get)?;
        let seen = lease
            .as_ref()
            .map(|l| sight(self.seen.take(), &record_of(l), now));
        let previous_renewal = seen
            .as_ref()
            .filter(|s| s.record.holder.as_deref() != Some(self.settings.identity.as_str()))
            .and_then(|s| s.record.renew_time);
        self.seen = seen.clone();
        let decided = step(&self.settings.identity, seen.as_ref(), self.wrote, now);
        let (epoch, spec) = match decided {
            LeaseMove::Duplicate { renewed } => {
                self.duplicate(renewed);
                return Ok(self.role.clone());
            }
            LeaseMove::Follow { holder, expires_at } => {
                self.fence.revoke();
                return Ok(Role::Standby { holder, expires_at });
            }
            LeaseMove::Create | LeaseMove::Acquire { .. } if !want => {
                self.fence.revoke();
                return Ok(Role::Free);
            }
            LeaseMove::Create => (0, self.spec(0, Some(now), now)),
            LeaseMove::Renew { epoch } => {
                let acquired = lease
                    .as_ref()
                    .and_then(|l| l.spec.as_ref())
                    .and_then(|s| s.acquire_time.clone())
                    .map(|t| t.0);
                (epoch, self.spec(epoch, acquired, now))
            }
            LeaseMove::Acquire { epoch } => (epoch, self.spec(epoch, Some(now), now)),
        };
        let object = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                resource_version: lease
                    .as_ref()
                    .and_then(|l| l.metadata.resource_version.clone()),
                labels: lease.as_ref().and_then(|l| l.metadata.labels.clone()),
                annotations: lease.as_ref().and_then(|l| l.metadata.annotations.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        // Compare-and-swap on resourceVersion: of two candidates, one wins.
        let written = match lease {
            None => self.api.create(&PostParams::default(), &object).await,
            Some(_) => {
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &object)
                    .await
            }
        };
        match written {
            Ok(l) => {
                let record = record_of(&l);
                self.wrote = record.renew_time;
                self.seen = Some(sight(None, &record, now));
                self.fence.grant(Term {
                    identity: self.settings.identity.clone(),
                    epoch,
                    valid_until: began + self.settings.renew_deadline,
                });
                let since = match &self.role {
                    Role::Leader { since, epoch: e } if *e == epoch => *since,
                    _ => {
                        // From the previous holder's last renewal (a release
                        // writes one) to this take-over.
                        self.handover = previous_renewal.map(|t| now.duration_since(t));
                        tracing::info!(
                            "{}: this daemon is now the leader (epoch {epoch})",
                            self.lease_ref()
                        );
                        now
                    }
                };
                Ok(Role::Leader { epoch, since })
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Someone else wrote first: we do not hold it (whatever we
                // thought). Should that be our own write resent (a proxy
                // between us and the API server may resend), the renewal
                // the lease now holds is ours: it is not held against us
                // (a twin is still caught, by the other process).
                self.wrote = None;
                self.fence.revoke();
                Err(RoundError::LostRace(s.message))
            }
            Err(kube::Error::Api(s)) if s.code < 500 => {
                // Refused outright: nothing was written.
                Err(RoundError::Refused {
                    message: s.message,
                    code: s.code,
                })
            }
            Err(e) => {
                // The write may have landed without its answer reaching us:
                // what the lease holds next is not known to be another's.
                self.wrote = None;
                Err(RoundError::Write(e))
            }
        }
    }

    /// Give the lease up (on shutdown, once nothing is in flight) so a standby
    /// takes over at once instead of waiting out the lease.
    pub async fn release(&mut self) {
        // A twin's lease (see [`IdentityGuard`]) is not ours to give back.
        if self.stand_down() {
            return;
        }
        let Some(term) = self.fence.current() else {
            return;
        };
        self.fence.revoke();
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(term.identity.as_str()) {
            return;
        }
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        if renewed_by_another(self.wrote, renewed) {
            // Renewed since by a twin, not yet caught by a round.
            self.duplicate(renewed);
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("{}: released", self.lease_ref()),
            Err(e) => tracing::warn!("{}: could not release it: {e}", self.lease_ref()),
        }
        self.role = Role::Candidate { error: None };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn held(by: &str, transitions: i32, renewed: i64) -> Record {
        Record {
            holder: Some(by.into()),
            duration: SignedDuration::from_secs(15),
            renew_time: Some(at(renewed)),
            transitions,
        }
    }

    #[test]
    fn no_lease_is_created_a_held_one_followed_then_taken_after_its_duration() {
        assert_eq!(step("b", None, None, at(0)), LeaseMove::Create);
        let seen = sight(None, &held("a", 3, 0), at(1));
        assert_eq!(
            step("b", Some(&seen), None, at(10)),
            LeaseMove::Follow {
                holder: "a".into(),
                expires_at: at(16)
            }
        );
        // The same record, still unrenewed 15 s after we first saw it.
        let seen = sight(Some(seen), &held("a", 3, 0), at(16));
        assert_eq!(seen.at, at(1));
        assert_eq!(
            step("b", Some(&seen), None, at(16)),
            LeaseMove::Acquire { epoch: 4 }
        );
        // A renewal restarts the wait.
        let renewed = sight(Some(seen), &held("a", 3, 14), at(16));
        assert!(matches!(
            step("b", Some(&renewed), None, at(20)),
            LeaseMove::Follow { .. }
        ));
    }

    #[test]
    fn the_holder_renews_and_a_released_lease_is_taken_at_once() {
        let seen = sight(None, &held("a", 2, 0), at(0));
        assert_eq!(
            step("a", Some(&seen), None, at(100)),
            LeaseMove::Renew { epoch: 2 }
        );
        let released = Record {
            holder: None,
            ..held("a", 2, 0)
        };
        let seen = sight(None, &released, at(0));
        assert_eq!(
            step("b", Some(&seen), None, at(0)),
            LeaseMove::Acquire { epoch: 3 }
        );
    }

    #[test]
    fn a_lease_renewed_under_our_identity_by_another_process_is_a_duplicate() {
        let seen = sight(None, &held("a", 2, 5), at(5));
        // The renewal this process wrote: its own lease, renewed.
        assert_eq!(
            step("a", Some(&seen), Some(at(5)), at(6)),
            LeaseMove::Renew { epoch: 2 }
        );
        // Another renewal under its identity: another process wrote it.
        assert_eq!(
            step("a", Some(&seen), Some(at(4)), at(6)),
            LeaseMove::Duplicate {
                renewed: Some(at(5))
            }
        );
        // Just started, or its last write's answer was lost: taken as its own.
        assert_eq!(
            step("a", Some(&seen), None, at(6)),
            LeaseMove::Renew { epoch: 2 }
        );
        // Another identity's lease is followed, whatever this process wrote.
        assert!(matches!(
            step("b", Some(&seen), Some(at(4)), at(6)),
            LeaseMove::Follow { .. }
        ));
    }

    #[test]
    fn a_term_lapses_by_itself() {
        let fence = Fence::default();
        assert!(fence.check().is_err());
        fence.grant(Term {
            identity: "a".into(),
            epoch: 1,
            valid_until: Instant::now() + Duration::from_secs(60),
        });
        assert_eq!(fence.check().unwrap().epoch, 1);
        fence.grant(Term {
            identity: "a".into(),
            epoch: 1,
            valid_until: Instant::now(),
        });
        assert!(fence.check().is_err());
    }

    proptest! {
        /// Whatever the holder writes and whenever a candidate looks, the
        /// candidate never takes a lease held by someone else less than its
        /// duration after it first saw the holder's latest renewal, and a
        /// take-over always moves the epoch forward.
        #[test]
        fn a_live_lease_is_never_taken(
            renewals in proptest::collection::vec((0i64..30, any::<bool>()), 1..40),
        ) {
            let mut t = 0i64;
            let mut record = held("a", 5, 0);
            let mut seen: Option<Sighting> = None;
            let mut last_change = 0i64;
            for (gap, renew) in renewals {
                t += gap;
                if renew {
                    record.renew_time = Some(at(t));
                }
                let s = sight(seen.take(), &record, at(t));
                if s.at == at(t) {
                    last_change = t;
                }
                match step("b", Some(&s), None, at(t)) {
                    LeaseMove::Acquire { epoch } => {
                        prop_assert!(t - last_change >= 15);
                        prop_assert!(epoch > record.transitions);
                    }
                    LeaseMove::Follow { expires_at, .. } => {
                        prop_assert_eq!(expires_at, at(last_change + 15));
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
                seen = Some(s);
            }
        }
    }
}
