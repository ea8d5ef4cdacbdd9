//! pathChirp (Ribeiro et al., PAM 2003; `../shared/notes/seed-000.md` §4.4): one train probes
//! many rates at once. A chirp's gaps shrink by the spread factor γ from probe to probe, so
//! probe k leaves at the instantaneous rate R_k = P / Δ_k, from `low_bps` up to `high_bps`.
//!
//! Per chirp, from the queuing delays q_k (relative one-way delays, minimum removed):
//! - an **excursion** starts at i where q_i < q_{i+1} and ends at the first j > i with
//!   q_j − q_i ≤ max_{i≤k≤j}(q_k − q_i) / F (decrease factor F); it counts only if it spans
//!   at least L probes (busy-period threshold). An excursion still open at the chirp's end marks
//!   l, its start; with none open, l is the last probe;
//! - per gap k: E_k = R_k if k lies in a counted excursion and q_k ≤ q_{k+1} (the queue grew,
//!   so R_k exceeded what was available), else E_k = R_l;
//! - the chirp's estimate is D = Σ E_k Δ_k / Σ Δ_k.
//!
//! The estimate is the mean of D over the last [`ChirpParams::smooth`] chirps, as pathChirp
//! averages over a time window. Defaults are pathChirp's: γ = 1.2, F = 1.5, L = 5, 1000-byte
//! probes. pathChirp is cheap but biased upward where the bottleneck serves short bursts faster
//! than C (token buckets); `mgrp bench accuracy` measures that bias rather than correcting it.

use crate::stats::median;
use crate::{wire_bits, Estimate, Estimator, ProbeSpec, Quality, TrainResult, TrainSpec};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChirpParams {
    /// Lowest and highest instantaneous rate a chirp probes (wire bits per second).
    pub low_bps: f64,
    pub high_bps: f64,
    /// γ: ratio of successive gaps.
    pub spread: f64,
    /// F: how far the queue must fall back for an excursion to end.
    pub decrease: f64,
    /// L: probes an excursion must span to count.
    pub busy: usize,
    pub size: u16,
    /// Time from one chirp's report to the next chirp.
    pub interval_ns: u64,
    /// Chirps to send; `None` runs on.
    pub chirps: Option<u32>,
    /// Chirps averaged into an estimate.
    pub smooth: usize,
}

impl ChirpParams {
    /// pathChirp's defaults over a path of capacity about `capacity_bps`: rates from C/10 to
    /// 1.2·C, 11 chirps 20 ms apart, all averaged.
    pub fn for_capacity(capacity_bps: f64) -> Self {
        ChirpParams {
            low_bps: capacity_bps / 10.0,
            high_bps: capacity_bps * 1.2,
            spread: 1.2,
            decrease: 1.5,
            busy: 5,
            size: 1000,
            interval_ns: 20_000_000,
            chirps: Some(11),
            smooth: 11,
        }
    }

    /// Probes per chirp: enough gaps to step from `low_bps` to `high_bps` by γ.
    pub fn probes(&self) -> usize {
        let steps = ((self.high_bps / self.low_bps).ln() / self.spread.ln()).ceil();
        (steps.max(1.0) as usize + 2).min(200)
    }

    /// Gaps (ns) of one chirp; `gaps[k]` precedes probe k+1.
    fn gaps(&self) -> Vec<f64> {
        let n = self.probes();
        let bits = wire_bits(self.size);
        (0..n - 1)
            .map(|k| bits / (self.low_bps * self.spread.powi(k as i32)) * 1e9)
            .collect()
    }
}

/// The chirp estimate D from one chirp's gaps (ns) and queuing delays (one per probe, `None` if
/// lost). Lost probes are bridged by dropping them and merging their gaps; `None` when fewer
/// than three probes arrived.
pub fn chirp_estimate(p: &ChirpParams, gaps: &[f64], delays: &[Option<f64>]) -> Option<f64> {
    let bits = wire_bits(p.size);
    // Received probes, each with the gap since the previous received one.
    let mut q = Vec::new();
    let mut d = Vec::new();
    let mut pending = 0.0;
    for (k, delay) in delays.iter().enumerate() {
        if k > 0 {
            pending += gaps[k - 1];
        }
        if let Some(x) = delay {
            if !q.is_empty() {
                d.push(pending);
            }
            pending = 0.0;
            q.push(*x);
        }
    }
    let n = q.len();
    if n < 3 {
        return None;
    }
    let rate = |k: usize| bits / d[k] * 1e9;
    // E_k for gaps k in 0..n-1; `None` = "use R_l".
    let mut e: Vec<Option<f64>> = vec![None; n - 1];
    let mut l = n - 2;
    let mut i = 0;
    while i < n - 1 {
        if q[i] >= q[i + 1] {
            i += 1;
            continue;
        }
        // An excursion from i: find where it ends.
        let mut peak = 0.0_f64;
        let mut end = None;
        for (j, qj) in q.iter().enumerate().skip(i + 1) {
            peak = peak.max(qj - q[i]);
            if qj - q[i] <= peak / p.decrease {
                end = Some(j);
                break;
            }
        }
        match end {
            Some(j) => {
                if j - i >= p.busy {
                    for (k, ek) in e.iter_mut().enumerate().take(j).skip(i) {
                        if q[k] <= q[k + 1] {
                            *ek = Some(rate(k));
                        }
                    }
                }
                i = j;
            }
            None => {
                // Open until the chirp's end: the queue grew for good from here on.
                l = i;
                break;
            }
        }
    }
    let rl = rate(l);
    let total: f64 = d.iter().sum();
    let weighted: f64 = e.iter().zip(&d).map(|(ek, dk)| ek.unwrap_or(rl) * dk).sum();
    Some(weighted / total)
}

pub struct Chirp {
    p: ChirpParams,
    gaps: Vec<f64>,
    recent: VecDeque<f64>,
    sent: u32,
    outstanding: bool,
    next_at: u64,
    start: Option<u64>,
    last: u64,
    bytes: u64,
}

impl Chirp {
    pub fn new(p: ChirpParams) -> Self {
        Chirp {
            gaps: p.gaps(),
            p,
            recent: VecDeque::new(),
            sent: 0,
            outstanding: false,
            next_at: 0,
            start: None,
            last: 0,
            bytes: 0,
        }
    }

    /// Per-chirp estimates in the smoothing window, oldest first.
    pub fn recent(&self) -> Vec<f64> {
        self.recent.iter().copied().collect()
    }
}

impl Estimator for Chirp {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        if self.is_done() || self.outstanding || now_ns < self.next_at {
            return None;
        }
        self.outstanding = true;
        self.start.get_or_insert(now_ns);
        let probes: Vec<ProbeSpec> = std::iter::once(0.0)
            .chain(self.gaps.iter().copied())
            .map(|g| ProbeSpec::new(self.p.size, g.round() as u64))
            .collect();
        let t = TrainSpec::new(probes);
        self.bytes += t.bytes();
        Some(t)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        if !std::mem::take(&mut self.outstanding) {
            return;
        }
        self.sent += 1;
        self.last = now_ns;
        self.next_at = now_ns + self.p.interval_ns;
        if obs.probes.len() != self.gaps.len() + 1 {
            return;
        }
        // Actual departures, not planned ones: the sender's jitter is part of the gap.
        let sent: Vec<Option<u64>> = obs.probes.iter().map(|p| p.sent_ns).collect();
        let owd: Vec<Option<f64>> = obs
            .probes
            .iter()
            .map(|p| Some(p.rx_ns?.0 as f64 - p.sent_ns? as f64))
            .collect();
        let min = owd.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        let q: Vec<Option<f64>> = owd.iter().map(|o| o.map(|x| x - min)).collect();
        let gaps: Vec<f64> = (1..obs.probes.len())
            .map(|k| match (sent[k - 1], sent[k]) {
                (Some(a), Some(b)) if b > a => (b - a) as f64,
                _ => self.gaps.get(k - 1).copied().unwrap_or(1.0),
            })
            .collect();
        if let Some(d) = chirp_estimate(&self.p, &gaps, &q) {
            self.recent.push_back(d);
            while self.recent.len() > self.p.smooth.max(1) {
                self.recent.pop_front();
            }
        }
    }

    fn estimate(&self) -> Option<Estimate> {
        if self.recent.is_empty() {
            return None;
        }
        let v: Vec<f64> = self.recent.iter().copied().collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let mut s = v.clone();
        s.sort_by(f64::total_cmp);
        let (lo, hi) = (s[0], s[s.len() - 1]);
        // Confidence: how tightly the chirps agree (1 − relative spread of their quartiles).
        let q = |f: f64| crate::stats::quantile_sorted(&s, f).unwrap_or(lo);
        let spread = (q(0.75) - q(0.25)) / median(&s).max(1.0);
        Some(Estimate {
            value_bps: mean,
            low_bps: lo,
            high_bps: hi,
            final_: self.is_done(),
            quality: Quality {
                method: "chirp",
                elapsed_s: self
                    .start
                    .map_or(0.0, |s| self.last.saturating_sub(s) as f64 / 1e9),
                probe_bytes: self.bytes,
                trains: self.sent,
                confidence: (1.0 - spread).clamp(0.0, 1.0),
                timescale_ms: None,
            },
        })
    }

    fn is_done(&self) -> bool {
        self.p.chirps.is_some_and(|n| self.sent >= n)
    }

    fn next_wakeup(&self) -> Option<u64> {
        (!self.is_done() && !self.outstanding).then_some(self.next_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, FluidPath};
    use mgrp_traffic::CrossPattern;

    #[test]
    fn chirp_shape() {
        let p = ChirpParams::for_capacity(100e6);
        let g = p.gaps();
        assert_eq!(g.len() + 1, p.probes());
        let rate = |gap: f64| wire_bits(p.size) / gap * 1e9;
        assert!((rate(g[0]) / 10e6 - 1.0).abs() < 1e-9);
        assert!(rate(*g.last().unwrap()) >= 120e6 * 0.999);
        for w in g.windows(2) {
            assert!((w[0] / w[1] - 1.2).abs() < 1e-9);
        }
    }

    /// Hand-made delay profiles: flat → every E_k is the top rate; a queue that starts growing
    /// for good at probe l → R_l everywhere outside counted excursions.
    #[test]
    fn estimate_from_delay_profiles() {
        let p = ChirpParams {
            busy: 3,
            ..ChirpParams::for_capacity(100e6)
        };
        let g = p.gaps();
        let n = g.len() + 1;
        let rate = |k: usize| wire_bits(p.size) / g[k] * 1e9;
        let flat = vec![Some(0.0); n];
        let top = rate(n - 2);
        assert!((chirp_estimate(&p, &g, &flat).unwrap() / top - 1.0).abs() < 1e-9);
        let l = n / 2;
        let ramp: Vec<Option<f64>> = (0..n)
            .map(|k| Some(if k > l { (k - l) as f64 * 1000.0 } else { 0.0 }))
            .collect();
        let d = chirp_estimate(&p, &g, &ramp).unwrap();
        assert!((d / rate(l) - 1.0).abs() < 1e-9, "{d} vs {}", rate(l));
        // Too few arrivals: no estimate.
        let mut lost = vec![None; n];
        lost[0] = Some(0.0);
        lost[3] = Some(0.0);
        assert_eq!(chirp_estimate(&p, &g, &lost), None);
    }

    /// A short excursion (fewer than L probes) is noise and changes nothing; a long one that
    /// ends pulls the estimate down to the rates where it grew.
    #[test]
    fn excursions_count_only_when_long() {
        let p = ChirpParams::for_capacity(100e6);
        let g = p.gaps();
        let n = g.len() + 1;
        let mut q = vec![Some(0.0); n];
        q[3] = Some(500.0);
        let flat = chirp_estimate(&p, &g, &vec![Some(0.0); n]).unwrap();
        assert_eq!(chirp_estimate(&p, &g, &q), Some(flat));
        for (k, x) in [(2, 100.0), (3, 200.0), (4, 300.0), (5, 400.0), (6, 500.0)] {
            q[k] = Some(x);
        }
        q[7] = Some(50.0);
        assert!(chirp_estimate(&p, &g, &q).unwrap() < flat);
    }

    fn run(c: f64, cross: Option<&str>, seed: u64) -> (f64, f64) {
        let cross = cross.map(|s| CrossPattern::parse(&format!("{s},seed={seed}")).unwrap());
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 5_000_000, cross).unwrap();
        path.idle_until(500_000_000 + seed * 7_654_321 % 300_000_000);
        let t0 = path.now_ns();
        let mut est = Chirp::new(ChirpParams::for_capacity(c));
        let out = drive(&mut est, &mut path, t0 + 60_000_000_000);
        assert!(est.is_done());
        let e = &out.last().unwrap().1;
        assert!(e.final_ && e.quality.trains == 11);
        (e.value_bps, path.avail_bps(t0, path.now_ns()))
    }

    /// On an ideal FIFO (no token-bucket bursts) the median error over seeds and cross-traffic
    /// kinds stays within one rate step of the chirp (γ − 1); single runs can be far off.
    #[test]
    fn tracks_truth_on_the_fluid_model() {
        let mut errs = Vec::new();
        for seed in 1..=8 {
            for (c, cross) in [
                (20e6, None),
                (20e6, Some("cbr:10mbit,size=500")),
                (100e6, Some("poisson:50mbit,size=1000")),
                (20e6, Some("poisson:5mbit,size=200")),
            ] {
                let (e, truth) = run(c, cross, seed);
                errs.push((e - truth).abs() / truth);
            }
        }
        errs.sort_by(f64::total_cmp);
        let med = errs[errs.len() / 2];
        let step = ChirpParams::for_capacity(20e6).spread - 1.0;
        assert!(med < step, "median {med}: {errs:?}");
    }
}
