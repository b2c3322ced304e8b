//! What concurrent parts share, below every room that uses it:
//!
//! - [`Stop`], a request to stop starting new steps: SIGTERM, a superseding
//!   desired state, a human's pause through the daemon, or a lost leader
//!   lease. Whoever acts checks it between steps (the safe points) and
//!   while waiting.
//! - [`Locked`], a mutex's lock that outlives a panic elsewhere: the data
//!   behind a std mutex here is always left whole between statements (no
//!   invariant spans a panic point), so a poisoned lock is taken as it is
//!   rather than spreading the panic to every later user.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct Stop(Arc<watch::Sender<bool>>);

impl Default for Stop {
    fn default() -> Self {
        Stop(Arc::new(watch::channel(false).0))
    }
}

impl Stop {
    pub fn new() -> Self {
        Stop::default()
    }

    /// Ask every holder to stop at its next safe point.
    pub fn request(&self) {
        self.0.send_replace(true);
    }

    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once a stop has been requested (at once if it already was).
    pub async fn requested(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// `mutex.locked()`: the guard, whether or not another holder panicked.
pub trait Locked<T> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The same for a read-write lock: `read_locked()`, `write_locked()`.
pub trait RwLocked<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_wakes_a_waiter_even_if_it_came_first() {
        let stop = Stop::new();
        assert!(!stop.is_requested());
        stop.request();
        tokio::time::timeout(std::time::Duration::from_secs(1), stop.requested())
            .await
            .expect("an earlier request is seen");
        let later = Stop::new();
        let waiter = tokio::spawn({
            let later = later.clone();
            async move { later.requested().await }
        });
        later.request();
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("a later request wakes the waiter")
            .unwrap();
    }
}
