//! Retrying transient provider errors (throttling, 5xx) with capped exponential
//! backoff. Quota, rejection and not-found are returned at once, and so is an
//! error the backend already retried by its own policy.

use std::future::Future;
use std::time::Duration;

use crate::clock::Clock;
use crate::provider::{ProviderError, Result};

const ATTEMPTS: u32 = 6;

/// Call, and call again after a backoff (on `clock`, so a virtual clock moves
/// instead of the test waiting) while the error is worth retrying.
pub async fn with_retry<T, F, Fut>(clock: &dyn Clock, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(50);
    let mut last: Option<ProviderError> = None;
    for _ in 0..ATTEMPTS {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.should_retry() => {
                last = Some(e);
                clock.sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
    let mut e = last.expect("at least one attempt failed");
    e.message = format!("{} (gave up after {ATTEMPTS} attempts)", e.message);
    Err(e)
}
