//! Wrong control tokens, counted per peer: past `PER_PEER` in a window from
//! one peer, that peer's token checks are answered 429 until the window ends,
//! right token or not. Only a peer's own strikes refuse it: a limit over all
//! peers together would let anyone who reaches the listener lock every
//! operator out. A 32-byte token cannot be guessed anyway; this makes a
//! guesser slow and loud (the log names it, and says when wrong tokens come
//! from many peers at once).

use crate::sync::Locked;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window strikes are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Wrong tokens one peer may send in a window.
const PER_PEER: u32 = 5;
/// Wrong tokens from all peers together in a window past which the log
/// warns (many addresses guessing); nothing is refused for it.
const IN_ALL: u32 = 50;
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
        let mut w = self.0.locked();
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
        if mine >= PER_PEER {
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
        if mine == PER_PEER {
            tracing::warn!(
                peer,
                wrong_from_peer = mine,
                "wrong control tokens: this peer's token checks are refused until the minute is over"
            );
        }
        if all == IN_ALL {
            tracing::warn!(
                wrong_in_all = all,
                "wrong control tokens from many peers this minute: someone may be guessing"
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

    /// Many guessers together refuse nobody else: a limit over all peers
    /// would lock every operator out.
    #[test]
    fn many_guessers_together_do_not_hold_off_a_peer_that_struck_nothing() {
        let t0 = Instant::now();
        let s = Strikes::new(t0);
        for i in 0..IN_ALL * 4 {
            s.strike(&format!("ip:203.0.113.{}", i % 250), t0);
        }
        assert!(s.allow("ip:192.0.2.1", t0).is_ok());
    }
}
