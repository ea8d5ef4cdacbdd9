//! The ImTCP sub-range sweep (`../shared/notes/seed-001.md` §1): few packets, fast, continuous.
//!
//! Each measurement splits the search range (B_l, B_u) into k sub-ranges (k = 2, 3 or 4 by the
//! range's width relative to the last result) and sends, from the highest sub-range down, one
//! N-probe stream per sub-range whose instantaneous rate sweeps linearly across it. A stream
//! whose delays rise (the pathload trend test on its raw delays) went above A. The sub-range
//! between rising and flat streams holds A; within it, A is the highest sending rate that still
//! arrived at the rate it was sent. The next range is A ± max(1.96·s/√q, B_m/2) from the recent
//! results, or — when A fell outside the range — the range widened by half toward it.
//!
//! The notes' ambiguities, resolved as they recommend:
//! - terms T_0 and T_{k+1} are 0; a = k+1 when every sent stream rose, a = 0 when the first did
//!   not and none rose, otherwise the arg-max in 1..=k with ties to the larger a;
//! - unsent streams after two successive flat ones count as flat (the early stop);
//! - for a = 0, A = B_u; for a = k+1, A = B_l (the thesis text has them swapped);
//! - S in the confidence interval is the standard deviation, over a window of the last
//!   [`SweepParams::window`] results (else the interval collapses to the floor);
//! - the knee of the two-line fit: line (i) is arrival = send (slope 1), line (ii) a least-squares
//!   line; the split with the least total squared error wins, and A is line (i)'s highest
//!   sending rate (the sub-range's bottom if line (i) is empty, its top if it takes every point);
//! - the initial range comes from a back-to-back train's dispersion rate r: (r/2, r), as Cprobe.

use crate::trend::{stream_trend, Trend, TrendParams};
use crate::{wire_bits, Estimate, Estimator, ProbeSpec, Quality, TrainResult, TrainSpec};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepParams {
    /// Probes per stream (thesis default 5).
    pub n: usize,
    /// Probe size (UDP payload); 1458 makes 1500-byte IP packets, the thesis' M.
    pub size: u16,
    /// Upper clamp of the range: the sender's access link (or the path capacity, if known).
    pub access_bps: f64,
    /// Minimum range width B_m as a fraction of the last result (thesis 10%).
    pub min_width: f64,
    /// Results kept for the confidence interval.
    pub window: usize,
    /// Stop after this many measurements; `None` runs on.
    pub measurements: Option<u32>,
    pub trend: TrendParams,
}

impl SweepParams {
    pub fn new(access_bps: f64) -> Self {
        SweepParams {
            n: 5,
            size: 1458,
            access_bps,
            min_width: 0.1,
            window: 20,
            measurements: Some(10),
            trend: TrendParams::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// The Cprobe-like back-to-back train that sets the first range.
    Initial,
    /// Sending stream `i` (0-based) of the current measurement.
    Stream(usize),
}

pub struct Sweep {
    p: SweepParams,
    bl: f64,
    bu: f64,
    a_prev: f64,
    bounds: Vec<f64>,
    trends: Vec<i8>,
    /// (send rates, arrival rates) of each stream sent in this measurement.
    points: Vec<Vec<(f64, f64)>>,
    stage: Stage,
    outstanding: bool,
    hist: VecDeque<f64>,
    last: Option<(f64, f64, f64)>,
    done_measurements: u32,
    start: Option<u64>,
    now: u64,
    bytes: u64,
    trains: u32,
}

impl Sweep {
    pub fn new(p: SweepParams) -> Self {
        Sweep {
            p,
            bl: 0.0,
            bu: p.access_bps,
            a_prev: p.access_bps,
            bounds: Vec::new(),
            trends: Vec::new(),
            points: Vec::new(),
            stage: Stage::Initial,
            outstanding: false,
            hist: VecDeque::new(),
            last: None,
            done_measurements: 0,
            start: None,
            now: 0,
            bytes: 0,
            trains: 0,
        }
    }

    /// Start from a known range instead of the initial train (e.g. after another estimator).
    pub fn with_range(mut self, lo: f64, hi: f64) -> Self {
        self.bl = lo.max(0.0);
        self.bu = hi.min(self.p.access_bps).max(self.bl + 1.0);
        self.a_prev = (self.bl + self.bu) / 2.0;
        self.begin_measurement();
        self
    }

    /// Measurements completed so far.
    pub fn measurements_done(&self) -> u32 {
        self.done_measurements
    }

    /// Results found inside their search range since the range last had to move: the history
    /// the confidence interval is computed from.
    pub fn recent(&self) -> Vec<f64> {
        self.hist.iter().copied().collect()
    }

    fn begin_measurement(&mut self) {
        let r = (self.bu - self.bl) / self.a_prev.max(1.0);
        let k = if r < 0.15 {
            2
        } else if r < 0.2 {
            3
        } else {
            4
        };
        let w = (self.bu - self.bl) / k as f64;
        self.bounds = (0..=k).map(|i| self.bu - w * i as f64).collect();
        self.trends.clear();
        self.points.clear();
        self.stage = Stage::Stream(0);
    }

    fn k(&self) -> usize {
        self.bounds.len() - 1
    }

    /// Stream `i` (0-based): rates sweep from just above B_{i+1} up to B_i.
    fn stream(&self, i: usize) -> TrainSpec {
        let (hi, lo) = (self.bounds[i], self.bounds[i + 1]);
        let n = self.p.n;
        let bits = wire_bits(self.p.size);
        let probes = (0..n)
            .map(|j| {
                let gap_ns = if j == 0 {
                    0
                } else {
                    let rate = (lo + (hi - lo) * j as f64 / (n - 1) as f64).max(1.0);
                    (bits / rate * 1e9).round() as u64
                };
                ProbeSpec::new(self.p.size, gap_ns)
            })
            .collect();
        TrainSpec::new(probes)
    }

    /// Step 4: which sub-range holds A (0 = above the range, k+1 = below it).
    fn choose(&self) -> usize {
        let k = self.k();
        let t: Vec<i32> = (0..k)
            .map(|i| self.trends.get(i).copied().unwrap_or(-1) as i32)
            .collect();
        let sent = &self.trends;
        if !sent.is_empty() && sent.iter().all(|t| *t == 1) && sent.len() == k {
            return k + 1;
        }
        if t[0] == -1 && !t.contains(&1) {
            return 0;
        }
        let f = |a: usize| -> i32 { t[..a].iter().sum::<i32>() - t[a..].iter().sum::<i32>() };
        let mut best = 1;
        for a in 1..=k {
            if f(a) >= f(best) {
                best = a;
            }
        }
        best
    }

    /// Step 5: the knee of stream `a` (1-based sub-range index): split its (send, arrival) rate
    /// points into line (i), arrival = send, and line (ii), a least-squares line, where the
    /// total squared error is least; A is the highest sending rate on line (i).
    fn knee(&self, a: usize) -> f64 {
        let (top, bottom) = (self.bounds[a - 1], self.bounds[a]);
        let Some(pts) = self.points.get(a - 1).filter(|p| !p.is_empty()) else {
            return bottom;
        };
        let n = pts.len();
        let sse_identity = |p: &[(f64, f64)]| p.iter().map(|(x, y)| (y - x).powi(2)).sum::<f64>();
        let sse_fit = |p: &[(f64, f64)]| {
            if p.len() < 3 {
                return 0.0;
            }
            let m = p.len() as f64;
            let (mx, my) = (
                p.iter().map(|q| q.0).sum::<f64>() / m,
                p.iter().map(|q| q.1).sum::<f64>() / m,
            );
            let sxx: f64 = p.iter().map(|q| (q.0 - mx).powi(2)).sum();
            let sxy: f64 = p.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum();
            let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
            p.iter()
                .map(|q| (q.1 - (my + b * (q.0 - mx))).powi(2))
                .sum()
        };
        let split = (0..=n)
            .min_by(|&s1, &s2| {
                let cost = |s: usize| sse_identity(&pts[..s]) + sse_fit(&pts[s..]);
                cost(s1).total_cmp(&cost(s2))
            })
            .unwrap_or(0);
        match split {
            0 => bottom,
            s if s == n => top,
            s => pts[s - 1].0.clamp(bottom, top),
        }
    }

    fn finish_measurement(&mut self) {
        let k = self.k();
        let a = self.choose();
        let bm = self.p.min_width * self.a_prev;
        let value;
        if (1..=k).contains(&a) {
            value = self.knee(a);
            self.hist.push_back(value);
            while self.hist.len() > self.p.window {
                self.hist.pop_front();
            }
            let q = self.hist.len() as f64;
            let mean = self.hist.iter().sum::<f64>() / q;
            let sd = (self.hist.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / q).sqrt();
            let h = (1.96 * sd / q.sqrt()).max(bm / 2.0);
            self.bl = value - h;
            self.bu = value + h;
        } else {
            value = if a == 0 { self.bu } else { self.bl };
            self.hist.clear();
            let w = self.bu - self.bl;
            if a == 0 {
                self.bu += w / 2.0;
            } else {
                self.bl -= w / 2.0;
            }
        }
        self.bl = self.bl.max(0.0);
        self.bu = self.bu.min(self.p.access_bps).max(self.bl + 1.0);
        self.last = Some((value, self.bl, self.bu));
        self.a_prev = value.max(1.0);
        self.done_measurements += 1;
        self.begin_measurement();
    }
}

impl Estimator for Sweep {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        if self.is_done() || self.outstanding {
            return None;
        }
        self.start.get_or_insert(now_ns);
        let t = match self.stage {
            Stage::Initial => TrainSpec::new(
                (0..2 * self.p.n)
                    .map(|_| ProbeSpec::new(self.p.size, 0))
                    .collect(),
            ),
            Stage::Stream(i) => self.stream(i),
        };
        self.outstanding = true;
        self.bytes += t.bytes();
        self.trains += 1;
        Some(t)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        if !self.outstanding {
            return;
        }
        self.outstanding = false;
        self.now = now_ns;
        match self.stage {
            Stage::Initial => {
                let rx: Vec<u64> = obs.probes.iter().filter_map(|p| Some(p.rx_ns?.0)).collect();
                let r = match (rx.first(), rx.last()) {
                    (Some(a), Some(b)) if b > a => {
                        wire_bits(self.p.size) * (rx.len() - 1) as f64 * 1e9 / (b - a) as f64
                    }
                    _ => self.p.access_bps,
                };
                let r = r.min(self.p.access_bps);
                self.bl = r / 2.0;
                self.bu = r;
                self.a_prev = r;
                self.begin_measurement();
            }
            Stage::Stream(i) => {
                let sent = obs.probes.iter().filter(|p| p.sent_ns.is_some()).count();
                let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
                let t = match stream_trend(&owd, sent, &self.p.trend) {
                    Trend::Increasing => 1,
                    Trend::NotIncreasing => -1,
                    Trend::Unknown => 0,
                };
                let bits = wire_bits(self.p.size);
                let pts = obs
                    .probes
                    .windows(2)
                    .filter_map(|w| {
                        let send =
                            bits * 1e9 / (w[1].sent_ns? as f64 - w[0].sent_ns? as f64).max(1.0);
                        let arrive =
                            bits * 1e9 / (w[1].rx_ns?.0 as f64 - w[0].rx_ns?.0 as f64).max(1.0);
                        Some((send, arrive))
                    })
                    .collect();
                self.trends.push(t);
                self.points.push(pts);
                let early_stop = i >= 1 && self.trends[i] == -1 && self.trends[i - 1] == -1;
                if i + 1 >= self.k() || early_stop {
                    self.finish_measurement();
                } else {
                    self.stage = Stage::Stream(i + 1);
                }
            }
        }
    }

    fn estimate(&self) -> Option<Estimate> {
        let (value, low, high) = self.last?;
        Some(Estimate {
            value_bps: value,
            low_bps: low,
            high_bps: high,
            final_: self.is_done(),
            quality: Quality {
                method: "sweep",
                elapsed_s: self
                    .start
                    .map_or(0.0, |s| self.now.saturating_sub(s) as f64 / 1e9),
                probe_bytes: self.bytes,
                trains: self.trains,
                // Results kept in the window relative to the window: grows as the range settles.
                confidence: self.hist.len() as f64 / self.p.window as f64,
            },
        })
    }

    fn is_done(&self) -> bool {
        self.p
            .measurements
            .is_some_and(|m| self.done_measurements >= m)
    }

    fn next_wakeup(&self) -> Option<u64> {
        (!self.is_done() && !self.outstanding).then_some(self.now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, FluidPath};
    use mgrp_traffic::CrossPattern;

    #[test]
    fn streams_sweep_their_sub_range() {
        let s = Sweep::new(SweepParams::new(100e6)).with_range(54e6, 66e6);
        // Width 12 of A_prev 60 = 0.2 → k = 4, bounds 66/63/60/57/54 (the notes' example).
        assert_eq!(
            s.bounds
                .iter()
                .map(|b| (b / 1e6).round() as i64)
                .collect::<Vec<_>>(),
            vec![66, 63, 60, 57, 54]
        );
        let t = s.stream(0);
        let rates: Vec<f64> = t.probes[1..]
            .iter()
            .map(|p| 12_000.0 / p.gap_ns as f64 * 1e3)
            .collect();
        for (got, want) in rates.iter().zip([63.75, 64.5, 65.25, 66.0]) {
            assert!((got - want).abs() < 0.01, "{rates:?}");
        }
    }

    #[test]
    fn choice_follows_the_trends() {
        let mut s = Sweep::new(SweepParams::new(100e6)).with_range(54e6, 66e6);
        let mut pick = |t: &[i8]| {
            s.trends = t.to_vec();
            s.choose()
        };
        assert_eq!(pick(&[1, 1, -1, -1]), 2);
        assert_eq!(
            pick(&[1, 1, 1, 1]),
            5,
            "even the slowest stream rose: below the range"
        );
        assert_eq!(
            pick(&[-1, -1]),
            0,
            "early stop after two flat streams: above the range"
        );
        assert_eq!(pick(&[1, -1, -1]), 1);
        assert_eq!(pick(&[1, 0, 1, -1]), 3);
    }

    fn run(c: f64, cross: &str, seed: u64) -> (Vec<(u64, Estimate)>, FluidPath) {
        let pattern = CrossPattern::parse(&format!("{cross},seed={seed}")).unwrap();
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 5_000_000, Some(pattern)).unwrap();
        path.idle_until(1_000_000_000 + seed * 7_654_321 % 300_000_000);
        let t0 = path.now_ns();
        let mut est = Sweep::new(SweepParams {
            measurements: Some(30),
            ..SweepParams::new(c)
        });
        let out = drive(&mut est, &mut path, t0 + 60_000_000_000);
        (out, path)
    }

    #[test]
    fn converges_near_truth_with_few_bytes() {
        let mut errs = Vec::new();
        for seed in 1..=8 {
            for (c, cross) in [
                (20e6, "cbr:8mbit,size=200"),
                (100e6, "poisson:40mbit,size=500"),
            ] {
                let (out, path) = run(c, cross, seed);
                let (t, e) = out.last().unwrap().clone();
                let truth = path.avail_bps(t - 1_000_000_000, t);
                errs.push((e.value_bps - truth).abs() / truth);
                assert!(e.quality.probe_bytes < 600_000, "{e:?}");
            }
        }
        errs.sort_by(f64::total_cmp);
        assert!(errs[errs.len() / 2] < 0.10, "median error: {errs:?}");
    }

    #[test]
    fn tracks_step_changes() {
        let pattern = CrossPattern::parse("step:4,12,6mbit,every=3s,size=200").unwrap();
        let mut path = FluidPath::new(20e6, 100.0 * 1514.0, 5_000_000, Some(pattern)).unwrap();
        let mut est = Sweep::new(SweepParams {
            measurements: None,
            ..SweepParams::new(20e6)
        });
        let out = drive(&mut est, &mut path, 9_000_000_000);
        for change in [3_000_000_000u64, 6_000_000_000] {
            let new_truth = path.avail_bps(change, change + 3_000_000_000);
            let before = out
                .iter()
                .rev()
                .find(|(t, _)| *t < change)
                .unwrap()
                .1
                .value_bps;
            let after: Vec<f64> = out
                .iter()
                .filter(|(t, _)| (change + 500_000_000..change + 1_500_000_000).contains(t))
                .map(|(_, e)| e.value_bps)
                .collect();
            let after = crate::stats::median(&after);
            // Within a second of the change the estimate has closed most of the gap.
            assert!(
                (after - new_truth).abs() < 0.5 * (before - new_truth).abs(),
                "at {change}: before {before}, after {after}, truth {new_truth}"
            );
        }
    }
}
