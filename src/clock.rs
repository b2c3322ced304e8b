//! Time as an injected dependency: decision code takes `now` as an argument and
//! the shell gets it from a [`Clock`], so tests run on a virtual clock.

use crate::sync::Locked;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;

    /// Wait for `d`: really for the wall clock, by moving time for a virtual one.
    fn sleep(&self, d: std::time::Duration) -> Sleep<'_>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep(&self, d: std::time::Duration) -> Sleep<'_> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock that moves only when told to (tests, simulations, benchmarks).
#[derive(Debug)]
pub struct ManualClock(Mutex<Timestamp>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Mutex::new(start))
    }

    pub fn set(&self, t: Timestamp) {
        *self.0.locked() = t;
    }

    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.locked();
        *t = t
            .saturating_add(by)
            .expect("a signed duration never fails to add");
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.locked()
    }

    /// Sleeping on a virtual clock moves it forward at once.
    fn sleep(&self, d: std::time::Duration) -> Sleep<'_> {
        self.advance(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX));
        Box::pin(std::future::ready(()))
    }
}
