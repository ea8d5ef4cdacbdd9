//! From an estimate of a path to the entry the programs read: sans-IO, explicit `now`.
//!
//! The trap the seed avoids: a background flow's own traffic is not cross traffic. An active
//! or passive estimate of A taken while the flow runs sees the flow as load, so a flow capped at
//! g·A would see A shrink by its own rate at every estimate and walk down to zero. The feed
//! adds back what the background flows to that destination delivered over the estimate's
//! window (from the `bg_acked` map, sampled by the caller).

use crate::maps::{PathEntry, PathParams};
use std::collections::VecDeque;

/// At most this many samples of the acked-bytes counter (e.g. 10 minutes at 10 Hz).
const MAX_SAMPLES: usize = 6000;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FeedConfig {
    pub params: PathParams,
    /// Add the background flows' own rate back to A (on unless comparing with the trap).
    pub correct_own_rate: bool,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            params: PathParams::default(),
            correct_own_rate: true,
        }
    }
}

/// What the feed wrote last, for the API and the tests.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FeedDecision {
    pub measured_bps: f64,
    pub own_rate_bps: f64,
    pub entry: PathEntry,
}

/// One destination's feed.
#[derive(Debug, Clone)]
pub struct Feed {
    config: FeedConfig,
    /// (CLOCK_MONOTONIC ns, bytes acked on background flows to the destination so far).
    samples: VecDeque<(u64, u64)>,
    last: Option<FeedDecision>,
}

impl Feed {
    pub fn new(config: FeedConfig) -> Result<Feed, String> {
        config.params.validate()?;
        Ok(Feed {
            config,
            samples: VecDeque::new(),
            last: None,
        })
    }

    /// A reading of the destination's `bg_acked` counter at `now_ns`. Readings must not go
    /// back in time; one that does is dropped (returns false).
    pub fn handle_acked(&mut self, now_ns: u64, total_bytes: u64) -> bool {
        if let Some(&(t, b)) = self.samples.back() {
            if now_ns < t || total_bytes < b {
                return false;
            }
            if now_ns == t {
                return true;
            }
        }
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now_ns, total_bytes));
        true
    }

    /// The background flows' rate over [from_ns, to_ns] in bit/s, from the samples nearest to
    /// the window's edges inside it; `None` without two samples in the window.
    pub fn own_rate_bps(&self, from_ns: u64, to_ns: u64) -> Option<f64> {
        let first = self.samples.iter().find(|(t, _)| *t >= from_ns)?;
        let last = self.samples.iter().rev().find(|(t, _)| *t <= to_ns)?;
        (last.0 > first.0).then(|| (last.1 - first.1) as f64 * 8e9 / (last.0 - first.0) as f64)
    }

    /// An estimate of A (bit/s) measured over [from_ns, to_ns], arriving at `now_ns`: the entry
    /// to write. Without samples over the window the own rate is taken as 0 (no flow yet).
    pub fn handle_estimate(
        &mut self,
        now_ns: u64,
        avail_bps: f64,
        from_ns: u64,
        to_ns: u64,
    ) -> FeedDecision {
        let own = if self.config.correct_own_rate {
            self.own_rate_bps(from_ns, to_ns).unwrap_or(0.0)
        } else {
            0.0
        };
        let a = if avail_bps.is_finite() {
            avail_bps.max(0.0)
        } else {
            0.0
        };
        let d = FeedDecision {
            measured_bps: a,
            own_rate_bps: own,
            entry: self.config.params.entry(a + own, now_ns),
        };
        self.last = Some(d);
        d
    }

    pub fn last(&self) -> Option<&FeedDecision> {
        self.last.as_ref()
    }

    /// New parameters (an agent's reload), keeping the samples. The last decision's entry is
    /// made again with them — same A, same time, so it goes stale when it would have — and
    /// returned for the caller to write.
    pub fn reconfigure(&mut self, config: FeedConfig) -> Result<Option<FeedDecision>, String> {
        config.params.validate()?;
        self.config = config;
        if let Some(d) = self.last.as_mut() {
            if !config.correct_own_rate {
                d.own_rate_bps = 0.0;
            }
            d.entry = config
                .params
                .entry(d.measured_bps + d.own_rate_bps, d.entry.updated_ns);
        }
        Ok(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn own_rate_is_added_back() {
        let mut f = Feed::new(FeedConfig::default()).unwrap();
        // 9 Mbit/s of background traffic: 1.125 MB a second.
        for i in 0..=10 {
            assert!(f.handle_acked(i * S, i * 1_125_000));
        }
        let d = f.handle_estimate(10 * S, 1e6, 4 * S, 8 * S);
        assert!((d.own_rate_bps - 9e6).abs() < 1.0, "{d:?}");
        assert_eq!(d.entry.avail_bps, 10_000_000);
        assert_eq!(d.entry.updated_ns, 10 * S);
    }

    #[test]
    fn without_correction_the_flow_takes_half_of_the_spare() {
        // The trap: each estimate sees the capped flow as cross traffic. Spare 10 Mbit/s, the
        // flow takes g·A of whatever was written last. Uncorrected it swings around
        // f = 0.9·(10 − f), i.e. 4.7 Mbit/s, half of what it may take; corrected it holds 9.
        let run = |correct: bool| {
            let mut flows = Vec::new();
            let mut f = Feed::new(FeedConfig {
                correct_own_rate: correct,
                ..Default::default()
            })
            .unwrap();
            let (spare, mut written, mut bytes) = (10e6f64, 10e6f64, 0u64);
            for k in 0..20u64 {
                let flow = 0.9 * written;
                flows.push(flow);
                for i in 0..10 {
                    bytes += (flow / 8.0 / 10.0) as u64;
                    f.handle_acked(k * S + i * S / 10, bytes);
                }
                let measured = (spare - flow).max(0.0);
                written = f
                    .handle_estimate(k * S + S, measured, k * S, k * S + S)
                    .entry
                    .avail_bps as f64;
            }
            flows[10..].iter().sum::<f64>() / 10.0
        };
        assert!(run(false) < 0.6 * 9e6, "uncorrected flow {}", run(false));
        assert!(
            (run(true) - 9e6).abs() / 9e6 < 0.02,
            "corrected flow {}",
            run(true)
        );
    }

    #[test]
    fn reconfiguring_rewrites_the_last_entry_and_keeps_the_samples() {
        let mut f = Feed::new(FeedConfig::default()).unwrap();
        assert_eq!(f.reconfigure(FeedConfig::default()), Ok(None));
        for i in 0..=10 {
            f.handle_acked(i * S, i * 1_125_000);
        }
        f.handle_estimate(10 * S, 1e6, 4 * S, 8 * S);
        let mut c = FeedConfig::default();
        c.params.g = 0.5;
        let d = f.reconfigure(c).unwrap().unwrap();
        assert_eq!(
            (d.entry.g_milli, d.entry.avail_bps, d.entry.updated_ns),
            (500, 10_000_000, 10 * S)
        );
        assert_eq!(f.samples.len(), 11);
        c.correct_own_rate = false;
        let d = f.reconfigure(c).unwrap().unwrap();
        assert_eq!((d.own_rate_bps, d.entry.avail_bps), (0.0, 1_000_000));
        c.params.h = 0;
        assert!(f.reconfigure(c).is_err());
        assert_eq!(
            f.last().unwrap().entry.g_milli,
            500,
            "a refused change changes nothing"
        );
    }

    #[test]
    fn bad_readings_are_dropped_and_bounded() {
        let mut f = Feed::new(FeedConfig::default()).unwrap();
        assert!(f.handle_acked(10, 100));
        assert!(!f.handle_acked(5, 200), "time went back");
        assert!(!f.handle_acked(20, 50), "counter went back");
        for i in 0..(MAX_SAMPLES as u64 + 10) {
            f.handle_acked(100 + i, 100 + i);
        }
        assert_eq!(f.samples.len(), MAX_SAMPLES);
        let d = f.handle_estimate(0, f64::NAN, 0, 1);
        assert_eq!(d.entry.avail_bps, 0);
        assert!(Feed::new(FeedConfig {
            params: PathParams {
                g: 0.0,
                ..Default::default()
            },
            ..Default::default()
        })
        .is_err());
    }
}
