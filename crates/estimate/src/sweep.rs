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
//! The notes' ambiguities, resolved (each choice and the alternatives measured: the sweep section
//! of `docs/estimators.md`):
//! - terms T_0 and T_{k+1} are 0; a = k+1 when every sent stream rose, a = 0 when the first did
//!   not and none rose, otherwise the arg-max in 1..=k with ties to the larger a;
//! - unsent streams after two successive flat ones count as flat (the early stop);
//! - for a = 0, A = B_u; for a = k+1, A = B_l (the thesis text has them swapped); the range then
//!   grows by [`SweepParams::grow`] of its width toward A (thesis ½; 1 here), at least B_m;
//! - the trend test is pathload's on the raw delays, and an increasing verdict also needs the
//!   delays to rise by [`SweepParams::rise`] packets' service time at the capacity: on 5–8 raw
//!   delays a stationary queue reads as increasing about half the time, which drags the range
//!   below A. Published values are scaled by 1 − rise/(N−1), the rate excess that floor implies;
//! - S in the confidence interval is the standard deviation, over a window of the last
//!   [`SweepParams::window`] results (else the interval collapses to the floor); B_m is 10% of
//!   A_prev, A_prev floored at 1% of the access rate (a result of ~0 must not collapse the range);
//! - the knee of the two-line fit: line (i) is arrival = send (slope 1), line (ii) a least-squares
//!   line; the split with the least total squared error wins, and A is line (i)'s highest
//!   sending rate (the sub-range's bottom if line (i) is empty, its top if it takes every point);
//! - the published value is the median of the in-range results since the range last moved
//!   ([`ValueRule`]); it follows a step once A leaves the range;
//! - the initial range comes from a back-to-back train's dispersion rate r: (r/2, r), as Cprobe.
//!
//! A driver that sends its own packets (the inline engine) uses [`Sweep::next_stream_rates`] and
//! [`Sweep::handle_stream`]: one stream out, one verdict back.

use crate::trend::{stream_trend, Trend, TrendParams};
use crate::{wire_bits, Estimate, Estimator, ProbeSpec, Quality, TrainResult, TrainSpec};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepParams {
    /// Probes per stream (thesis default 5; 8 measured better here: docs/estimators.md).
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
    /// How the published value is formed from the measurements.
    pub value: ValueRule,
    /// How A is placed inside the chosen sub-range.
    pub knee: KneeRule,
    /// How the range moves when A fell outside it.
    pub out_of_range: OutOfRange,
    /// Minimum delay rise (in packets' service time at `access_bps`) for an increasing verdict.
    pub rise: f64,
    /// The first range is (initial_low · r, r) from the first train's dispersion rate r
    /// (thesis: 1/2).
    pub initial_low: f64,
    /// An out-of-range result widens the range by this fraction of its width (thesis: 1/2).
    pub grow: f64,
}

/// The range update when A fell outside the search range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRange {
    /// The thesis: widen by half the width toward A, keep the other bound.
    Widen,
    /// Move the range past the violated bound, same width (a quarter overlapping).
    Shift,
}

/// How the published value is formed from the per-measurement results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRule {
    /// The last measurement's result (the thesis' raw output).
    Last,
    /// The thesis' plot smoothing: 0.6 · mean(previous values) + 0.4 · current.
    Smoothed,
    /// The median of the in-range results kept for the confidence interval.
    Median,
    /// The median of the last `n` results, in range or not.
    Recent(usize),
}

/// Where A lies inside the chosen sub-range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KneeRule {
    /// The two-line regression of arrival rate on send rate (thesis Step 5).
    TwoLine,
    /// The sub-range's middle.
    Middle,
}

impl SweepParams {
    pub fn new(access_bps: f64) -> Self {
        SweepParams {
            n: 8,
            size: 1458,
            access_bps,
            min_width: 0.1,
            window: 20,
            measurements: Some(10),
            trend: TrendParams::default(),
            value: ValueRule::Median,
            knee: KneeRule::TwoLine,
            out_of_range: OutOfRange::Widen,
            rise: 1.0,
            initial_low: 0.5,
            grow: 1.0,
        }
    }
}

/// One packet of a stream, as a driver saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamPacket {
    /// Its size on the wire, bits (the rates are computed from it).
    pub bits: f64,
    /// When it left; `None` if it never did.
    pub sent_ns: Option<u64>,
    /// When it (or its echo) arrived; `None` if lost.
    pub rx_ns: Option<u64>,
}

/// What one stream told the sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamOutcome {
    /// The stream's verdict: its rates went above A (increasing), stayed below, or unclear.
    pub trend: Trend,
    /// The published value (bit/s) when this stream completed a measurement.
    pub result: Option<f64>,
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
    /// Every result, newest last (bounded by [`ValueRule::Recent`]'s n).
    results: VecDeque<f64>,
    last: Option<(f64, f64, f64)>,
    done_measurements: u32,
    void_measurements: u32,
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
            results: VecDeque::new(),
            last: None,
            done_measurements: 0,
            void_measurements: 0,
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

    /// The instantaneous rates (bit/s) of stream `i` (0-based), one per gap (N − 1 of them):
    /// they sweep linearly from just above B_{i+1} up to B_i.
    fn rates(&self, i: usize) -> Vec<f64> {
        let (hi, lo) = (self.bounds[i], self.bounds[i + 1]);
        let n = self.p.n;
        (1..n)
            .map(|j| (lo + (hi - lo) * j as f64 / (n - 1) as f64).max(1.0))
            .collect()
    }

    /// The rates of the stream the sweep wants next, for a driver that sends its own packets
    /// (the inline engine releases segments of `bits` each with gaps bits / rate); `None`
    /// before the first range is known or once done.
    pub fn next_stream_rates(&self) -> Option<Vec<f64>> {
        match self.stage {
            Stage::Stream(i) if !self.is_done() => Some(self.rates(i)),
            _ => None,
        }
    }

    /// The rates of every stream still to send in the current measurement, from the next one
    /// on, with the measurement's number ([`Sweep::measurements_done`]): an inline driver sends
    /// all of a measurement's streams within one round trip and feeds their verdicts back in
    /// order; verdicts of streams left over after an early stop must then be dropped (the
    /// number has moved on). `None` before the first range is known or once done.
    pub fn measurement_plan(&self) -> Option<(u32, Vec<Vec<f64>>)> {
        match self.stage {
            Stage::Stream(i) if !self.is_done() => Some((
                self.done_measurements,
                (i..self.k()).map(|s| self.rates(s)).collect(),
            )),
            _ => None,
        }
    }

    /// Stream `i` as a probe train.
    fn stream(&self, i: usize) -> TrainSpec {
        let bits = wire_bits(self.p.size);
        let gaps = std::iter::once(0).chain(
            self.rates(i)
                .into_iter()
                .map(|r| (bits / r * 1e9).round() as u64),
        );
        TrainSpec::new(gaps.map(|g| ProbeSpec::new(self.p.size, g)).collect())
    }

    /// One stream's outcome: per packet, its wire size (bits), when it left and when it (or its
    /// echo, an ACK) came back, on any one clock per side; `None` for lost. Returns the
    /// stream's verdict and, when this stream completed a measurement, its result. Ignored
    /// (`None`) when no stream is expected.
    pub fn handle_stream(&mut self, packets: &[StreamPacket]) -> Option<StreamOutcome> {
        let Stage::Stream(i) = self.stage else {
            return None;
        };
        if self.is_done() {
            return None;
        }
        let sent = packets.iter().filter(|p| p.sent_ns.is_some()).count();
        let owd: Vec<f64> = packets
            .iter()
            .filter_map(|p| Some(p.rx_ns? as f64 - p.sent_ns? as f64))
            .collect();
        let mut trend = stream_trend(&owd, sent, &self.p.trend);
        if trend == Trend::Increasing && self.p.rise > 0.0 && owd.len() == sent {
            // A rise smaller than `rise` packets' service time at the capacity is the jitter of
            // a stationary queue, not a queue the stream built.
            let floor = self.p.rise * packets[0].bits / self.p.access_bps * 1e9;
            if owd[owd.len() - 1] - owd[0] < floor {
                trend = Trend::NotIncreasing;
            }
        }
        let pts = packets
            .windows(2)
            .filter_map(|w| {
                let ds = w[1].sent_ns? as f64 - w[0].sent_ns? as f64;
                let dr = w[1].rx_ns? as f64 - w[0].rx_ns? as f64;
                Some((w[1].bits * 1e9 / ds.max(1.0), w[1].bits * 1e9 / dr.max(1.0)))
            })
            .collect();
        self.trends.push(match trend {
            Trend::Increasing => 1,
            Trend::NotIncreasing => -1,
            Trend::Unknown => 0,
        });
        self.points.push(pts);
        let early_stop = i >= 1 && self.trends[i] == -1 && self.trends[i - 1] == -1;
        let result = if i + 1 >= self.k() || early_stop {
            self.finish_measurement()
                .then_some(self.last.map(|l| l.0))
                .flatten()
        } else {
            self.stage = Stage::Stream(i + 1);
            None
        };
        Some(StreamOutcome { trend, result })
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
        // Fewer than three points cannot place a knee (a line through two fits exactly, so
        // "all on line (ii)" always won and A read the sub-range's bottom: a downward ratchet
        // when streams come back short). The sub-range's middle is the unbiased guess.
        let Some(pts) = self.points.get(a - 1).filter(|p| p.len() >= 3) else {
            return (top + bottom) / 2.0;
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

    /// Steps 4–6; false when no stream of the measurement could tell (every verdict T = 0):
    /// then nothing was learnt, no result is made and the range stays (the seed does not say;
    /// taking the arg-max over all-zero verdicts picked a sub-range below the middle, and the
    /// range slid down ~5% per such measurement while loss spoilt every stream).
    fn finish_measurement(&mut self) -> bool {
        if self.trends.iter().all(|t| *t == 0) {
            self.void_measurements += 1;
            self.done_measurements += 1;
            self.begin_measurement();
            return false;
        }
        let k = self.k();
        let a = self.choose();
        // A_prev floored at 1% of the access rate: a result of ~0 must not collapse the range.
        let bm = self.p.min_width * self.a_prev.max(0.01 * self.p.access_bps);
        let value;
        let mut published;
        if (1..=k).contains(&a) {
            value = match self.p.knee {
                KneeRule::TwoLine => self.knee(a),
                KneeRule::Middle => (self.bounds[a - 1] + self.bounds[a]) / 2.0,
            };
            published = value;
            if self.p.value == ValueRule::Smoothed && !self.hist.is_empty() {
                let prev = self.hist.iter().sum::<f64>() / self.hist.len() as f64;
                published = 0.6 * prev + 0.4 * value;
            }
            self.hist.push_back(value);
            while self.hist.len() > self.p.window {
                self.hist.pop_front();
            }
            let q = self.hist.len() as f64;
            let mean = self.hist.iter().sum::<f64>() / q;
            let sd = (self.hist.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / q).sqrt();
            if self.p.value == ValueRule::Median {
                published = crate::stats::median(&self.hist.iter().copied().collect::<Vec<_>>());
            }
            let h = (1.96 * sd / q.sqrt()).max(bm / 2.0);
            self.bl = value - h;
            self.bu = value + h;
        } else {
            value = if a == 0 { self.bu } else { self.bl };
            published = value;
            self.hist.clear();
            let w = (self.bu - self.bl).max(bm);
            match (self.p.out_of_range, a == 0) {
                (OutOfRange::Widen, true) => self.bu += w * self.p.grow,
                (OutOfRange::Widen, false) => self.bl -= w * self.p.grow,
                // A lies beyond the violated bound: move the whole range past it, keeping a
                // quarter of the width as overlap against a wrong verdict.
                (OutOfRange::Shift, true) => {
                    self.bl = self.bu - w / 4.0;
                    self.bu = self.bl + w;
                }
                (OutOfRange::Shift, false) => {
                    self.bu = self.bl + w / 4.0;
                    self.bl = self.bu - w;
                }
            }
        }
        self.bl = self.bl.max(0.0);
        self.bu = self.bu.min(self.p.access_bps).max(self.bl + 1.0);
        if let ValueRule::Recent(n) = self.p.value {
            self.results.push_back(value);
            while self.results.len() > n.max(1) {
                self.results.pop_front();
            }
            published = crate::stats::median(&self.results.iter().copied().collect::<Vec<_>>());
        }
        // A stream is called increasing only once it built `rise` packets of queue: in the fluid
        // model that needs a mean rate of A / (1 − rise/(N−1)), so the range (in sending rates)
        // sits that much above A.
        let f = (1.0 - self.p.rise / (self.p.n - 1) as f64).max(0.1);
        self.last = Some((published * f, self.bl * f, self.bu * f));
        self.a_prev = value.max(1.0);
        self.done_measurements += 1;
        self.begin_measurement();
        true
    }

    /// Measurements in which no stream could tell (no result made).
    pub fn void_measurements(&self) -> u32 {
        self.void_measurements
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
                self.bl = r * self.p.initial_low;
                self.bu = r;
                self.a_prev = r;
                self.begin_measurement();
            }
            Stage::Stream(_) => {
                let bits = wire_bits(self.p.size);
                let packets: Vec<StreamPacket> = obs
                    .probes
                    .iter()
                    .map(|p| StreamPacket {
                        bits,
                        sent_ns: p.sent_ns,
                        rx_ns: p.rx_ns.map(|r| r.0),
                    })
                    .collect();
                self.handle_stream(&packets);
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
                timescale_ms: None,
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
        let s = Sweep::new(SweepParams {
            n: 5,
            ..SweepParams::new(100e6)
        })
        .with_range(54e6, 66e6);
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
        // The default budget: 10 measurements.
        let mut est = Sweep::new(SweepParams::new(c));
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

    /// The sweep on the fluid model against the bench's kinds (MTU-sized cross packets at half
    /// the capacity): per kind, the median |error| over 12 seeds and the signed median.
    fn fluid_errors(c: f64, cross: &str) -> (f64, f64) {
        let mut errs = Vec::new();
        for seed in 1..=12u64 {
            let pattern = CrossPattern::parse(&format!("{cross},seed={seed}")).unwrap();
            let mut path = FluidPath::new(c, 200.0 * 1514.0, 5_000_000, Some(pattern)).unwrap();
            path.idle_until(1_000_000_000 + seed * 7_654_321 % 300_000_000);
            let t0 = path.now_ns();
            let mut est = Sweep::new(SweepParams::new(c));
            let out = drive(&mut est, &mut path, t0 + 60_000_000_000);
            let (t, e) = out.last().unwrap().clone();
            let truth = path.avail_bps(t0, t);
            errs.push((e.value_bps - truth) / truth);
        }
        let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
        (crate::stats::median(&abs), crate::stats::median(&errs))
    }

    #[test]
    fn converges_on_cbr_and_poisson() {
        for (c, cross) in [
            (20e6, "cbr:10mbit"),
            (20e6, "poisson:10mbit"),
            (100e6, "cbr:50mbit"),
            (100e6, "poisson:50mbit"),
        ] {
            let (med, signed) = fluid_errors(c, cross);
            eprintln!("{cross} on {c}: median |err| {med:.3}, signed {signed:.3}");
            // Deterministic model: 8.4, 5.3, 2.0 and 12.1% today; the seed's own rules (N = 5,
            // no rise floor, last result) give 76% on both CBR cells here.
            assert!(med < 0.15, "{cross} on {c}: median error {med}");
        }
    }

    #[test]
    fn one_stream_in_one_verdict_out() {
        // The API an inline engine drives: rates out, (send, echo) times in, verdict back.
        let mut s = Sweep::new(SweepParams::new(100e6)).with_range(40e6, 60e6);
        let rates = s.next_stream_rates().unwrap();
        assert_eq!(rates.len(), 7);
        assert!(rates.windows(2).all(|w| w[1] > w[0]) && (rates[6] - 60e6).abs() < 1.0);
        let bits = 12_000.0;
        let stream = |rise_ns: &[u64]| -> Vec<StreamPacket> {
            let mut t = 0u64;
            (0..8)
                .map(|j| {
                    if j > 0 {
                        t += (bits / rates[j - 1] * 1e9) as u64;
                    }
                    StreamPacket {
                        bits,
                        sent_ns: Some(t),
                        rx_ns: Some(t + 1_000_000 + rise_ns[j]),
                    }
                })
                .collect()
        };
        // A queue of several packets (120 µs each at 100 Mbit/s) built: increasing.
        let built = s
            .handle_stream(&stream(
                &[0, 60, 150, 250, 330, 420, 500, 600].map(|x| x * 1000),
            ))
            .unwrap();
        assert_eq!(built.trend, Trend::Increasing);
        assert!(built.result.is_none(), "one stream of several");
        // Steady rise of less than one packet's service time: jitter, not a queue.
        let jitter = s
            .handle_stream(&stream(&[0, 10, 20, 30, 40, 50, 60, 70].map(|x| x * 1000)))
            .unwrap();
        assert_eq!(jitter.trend, Trend::NotIncreasing);
        // Flat: not increasing; after two flat streams the measurement ends early.
        let mut last = None;
        while last.is_none() {
            let o = s.handle_stream(&stream(&[0; 8])).unwrap();
            assert_eq!(o.trend, Trend::NotIncreasing);
            last = o.result;
        }
        assert!(s.measurements_done() == 1 && last.unwrap() < 60e6);
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
