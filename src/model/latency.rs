//! What a pool's past says about how long its steps take: a compact summary
//! per kind of step (a node from its create request to healthy, a drain, a
//! termination), kept as the moments of the logarithm of the seconds. It is
//! a fixed size whatever the history, and fits the lognormal the simulator
//! draws from (median e^mean, sigma the standard deviation).

use serde::{Deserialize, Serialize};

/// Welford's running moments of ln(seconds), and the range seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogSummary {
    pub count: u64,
    pub mean_ln: f64,
    pub m2_ln: f64,
    pub min_seconds: f64,
    pub max_seconds: f64,
}

impl LogSummary {
    pub fn add(&mut self, seconds: f64) {
        // Sub-millisecond steps (a simulator at high speed) count as 1 ms:
        // the logarithm needs a positive number.
        if !seconds.is_finite() {
            return;
        }
        let s = seconds.max(0.001);
        self.count += 1;
        let x = s.ln();
        let delta = x - self.mean_ln;
        self.mean_ln += delta / self.count as f64;
        self.m2_ln += delta * (x - self.mean_ln);
        if self.count == 1 {
            self.min_seconds = s;
            self.max_seconds = s;
        } else {
            self.min_seconds = self.min_seconds.min(s);
            self.max_seconds = self.max_seconds.max(s);
        }
    }

    pub fn median_seconds(&self) -> f64 {
        self.mean_ln.exp()
    }

    pub fn sigma(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2_ln / (self.count - 1) as f64).max(0.0).sqrt()
        }
    }
}

/// A pool's latency history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolLatencies {
    /// From the create request to healthy.
    #[serde(default)]
    pub boot: LogSummary,
    /// From cordon to drained.
    #[serde(default)]
    pub drain: LogSummary,
    /// From the terminate request to gone.
    #[serde(default)]
    pub terminate: LogSummary,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_recovers_a_lognormal_median_and_spread() {
        let mut s = LogSummary::default();
        for x in [30.0, 60.0, 120.0] {
            s.add(x);
        }
        assert_eq!(s.count, 3);
        assert!((s.median_seconds() - 60.0).abs() < 1e-9);
        assert!((s.sigma() - 2f64.ln()).abs() < 1e-9);
        assert_eq!((s.min_seconds, s.max_seconds), (30.0, 120.0));
        s.add(f64::NAN);
        assert_eq!(s.count, 3, "a non-number is not a sample");
    }
}
