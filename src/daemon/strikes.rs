//! Wrong control tokens, counted: past `PER_PEER` in a window from one peer,
//! or `IN_ALL` from every peer together, token checks are answered 429 until
//! the window ends, right token or not. A 32-byte token cannot be guessed
//! anyway; this keeps a guesser from costing the daemon a check per packet
//! and makes the attempt loud in the log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window strikes are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Wrong tokens one peer may send in a window.
pub const PER_PEER: u32 = 5;
/// Wrong tokens all peers together may send in a window (many addresses).
pub const IN_ALL: u32 = 50;
/// Peers remembered in a window at most; past it, only the total counts.
const PEERS: usize = 10_000;

#[derive(Debug)]
pub struct Strikes(Mutex<Window>);

#[derive(Debug)]
struct Window {
    began: Instant,
    all: u32,
    by_peer: HashMap<String, u32>,
}

impl Strikes {
    pub fn new(now: Instant) -> Strikes {
        Strikes(Mutex::new(Window {
            began: now,
            all: 0,
            by_peer: HashMap::new(),
        }))
    }

    fn window(&self, now: Instant) -> std::sync::MutexGuard<'_, Window> {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(w.began) >= WINDOW {
            *w = Window {
                began: now,
                all: 0,
                by_peer: HashMap::new(),
            };
        }
        w
    }

    /// Whether `peer` may have a token checked now; if not, how long until
    /// it may.
    pub fn allow(&self, peer: &str, now: Instant) -> Result<(), Duration> {
        let w = self.window(now);
        let mine = w.by_peer.get(peer).copied().unwrap_or(0);
        if mine >= PER_PEER || w.all >= IN_ALL {
            return Err(WINDOW.saturating_sub(now.duration_since(w.began)));
        }
        Ok(())
    }

    /// A wrong token from `peer`.
    pub fn strike(&self, peer: &str, now: Instant) {
        let mut w = self.window(now);
        w.all += 1;
        if let Some(n) = w.by_peer.get_mut(peer) {
            *n += 1;
        } else if w.by_peer.len() < PEERS {
            w.by_peer.insert(peer.to_string(), 1);
        }
        let (mine, all) = (w.by_peer.get(peer).copied().unwrap_or(0), w.all);
        if mine == PER_PEER || all == IN_ALL {
            tracing::warn!(
                peer,
                wrong_from_peer = mine,
                wrong_in_all = all,
                "wrong control tokens: token checks are refused until the minute is over"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guesser_is_held_off_for_the_rest_of_the_window_and_others_are_not() {
        let t0 = Instant::now();
        let s = Strikes::new(t0);
        for _ in 0..PER_PEER {
            assert!(s.allow("ip:198.51.100.7", t0).is_ok());
            s.strike("ip:198.51.100.7", t0);
        }
        let at = t0 + Duration::from_secs(20);
        assert_eq!(s.allow("ip:198.51.100.7", at), Err(Duration::from_secs(40)));
        assert!(
            s.allow("uid:1000", at).is_ok(),
            "another peer is not held off"
        );
        assert!(
            s.allow("ip:198.51.100.7", t0 + WINDOW).is_ok(),
            "a new window"
        );
    }

    #[test]
    fn many_addresses_together_are_held_off_too() {
        let t0 = Instant::now();
        let s = Strikes::new(t0);
        for i in 0..IN_ALL {
            s.strike(&format!("ip:203.0.113.{i}"), t0);
        }
        assert!(s.allow("ip:192.0.2.1", t0).is_err());
    }
}
