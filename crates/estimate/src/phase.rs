//! Phase readings for `track` (issue 13, tracking5): short trains that say what the cross
//! traffic was *while they crossed*, for paths whose A swings faster than hold checks can
//! follow (on/off bursts of ~0.5 s). A 1 s time-weighted mean of such readings follows the
//! share of the second the bursts were on, which a held value cannot.
//!
//! A reading is one train of `probes` probes sent back to back at C (known from acquisition):
//! direct probing. A FIFO bottleneck fed at R_in ≥ A serves the train at
//! R_out = C · R_in / (R_in + X), so the cross rate met is X = R_in (C / R_out − 1) and
//! A = C − X. Input and output gaps are least-squares slopes over the probes (send stamps
//! and receive stamps against the probe index), which spreads receive-stamp jitter (tens of
//! µs on the testbed) over the whole train rather than its two ends. The probe size makes the
//! train last at least `span_ns` at C: 200 B at 20 Mbit/s (1.8 ms), ~1 kB at 100 Mbit/s, so
//! that 50 µs of stamp jitter is a few % of the train, and the train meets a few cross packets.

use crate::{wire_bits, TrainResult, TrainSpec};
use std::collections::VecDeque;

/// How readings are taken and combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadingShape {
    /// Probes per reading train.
    pub probes: usize,
    /// Least duration of the train at C (ns): sets the probe size.
    pub span_ns: f64,
}

/// The reading train at capacity `c_bps`.
pub fn reading_train(shape: ReadingShape, c_bps: f64) -> TrainSpec {
    let n = shape.probes.max(2);
    let frame_bytes = c_bps * shape.span_ns / 1e9 / 8.0 / (n - 1) as f64;
    let size = (frame_bytes - crate::WIRE_OVERHEAD as f64)
        .round()
        .clamp(200.0, 1472.0) as u16;
    TrainSpec::constant_rate(n, size, c_bps)
}

/// Least-squares slope of `y` against `x` (`None`: all `x` alike).
pub fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    let (mx, my) = pts
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in pts {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    (sxx > 0.0).then(|| sxy / sxx)
}

/// A (bit/s) during the train, from its input and output gaps; `None` when fewer than half
/// its probes came back (a reading from a few probes is mostly jitter).
pub fn read_avail(obs: &TrainResult, c_bps: f64) -> Option<f64> {
    let sent: Vec<(f64, f64)> = obs
        .probes
        .iter()
        .filter_map(|p| Some((p.index as f64, p.sent_ns? as f64)))
        .collect();
    let rx: Vec<(f64, f64)> = obs
        .probes
        .iter()
        .filter_map(|p| Some((p.index as f64, p.rx_ns?.0 as f64)))
        .collect();
    if rx.len() < 3 || 2 * rx.len() < obs.probes.len() {
        return None;
    }
    let frame_bits = wire_bits(obs.probes.first()?.size);
    let (g_in, g_out) = (slope(&sent)?, slope(&rx)?);
    if !(g_in > 0.0 && g_out > 0.0) {
        return None;
    }
    // X = R_in (C / R_out − 1), R = frame bits / gap.
    let r_in = frame_bits / g_in * 1e9;
    let x = r_in * (c_bps * g_out / frame_bits / 1e9 - 1.0);
    Some((c_bps - x).clamp(0.0, c_bps))
}

/// Readings (time ns, A bit/s), oldest first, kept for `keep_ns` and at most `cap` of them.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    pts: VecDeque<(u64, f64)>,
}

impl Readings {
    pub fn push(&mut self, t_ns: u64, a_bps: f64, keep_ns: u64, cap: usize) {
        self.pts.push_back((t_ns, a_bps));
        while self.pts.len() > cap
            || self
                .pts
                .front()
                .is_some_and(|(t, _)| t_ns.saturating_sub(*t) > keep_ns)
        {
            self.pts.pop_front();
        }
    }

    /// Readings taken at or after `from_ns`.
    pub fn count_since(&self, from_ns: u64) -> usize {
        self.pts.iter().filter(|(t, _)| *t >= from_ns).count()
    }

    pub fn clear(&mut self) {
        self.pts.clear();
    }

    pub fn len(&self) -> usize {
        self.pts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pts.is_empty()
    }

    /// Time-weighted mean of A over [to − window, to): each reading stands for the time from
    /// half way since the one before to half way to the next (the last, up to `to`; the
    /// first, from itself back to `prior`'s end when there is a `prior`). The part of the
    /// window before the first reading is `prior`'s value (A as known before the readings
    /// began) when given, else the first reading's.
    pub fn mean_with(&self, to_ns: u64, window_ns: u64, prior: Option<f64>) -> Option<f64> {
        let from = to_ns.saturating_sub(window_ns) as f64;
        let to = to_ns as f64;
        let pts: Vec<(f64, f64)> = self.pts.iter().map(|(t, a)| (*t as f64, *a)).collect();
        let (mut sum, mut w) = (0.0, 0.0);
        for (i, (t, a)) in pts.iter().enumerate() {
            let lo = if i == 0 && prior.is_none() {
                f64::NEG_INFINITY
            } else if i == 0 {
                *t
            } else {
                (pts[i - 1].0 + t) / 2.0
            };
            let hi = pts.get(i + 1).map_or(f64::INFINITY, |n| (t + n.0) / 2.0);
            let span = hi.min(to) - lo.max(from);
            if span > 0.0 {
                sum += a * span;
                w += span;
            }
        }
        if let (Some(p), Some((t0, _))) = (prior, pts.first()) {
            let span = t0.min(to) - from;
            if span > 0.0 {
                sum += p * span;
                w += span;
            }
        }
        (w > 0.0).then(|| sum / w)
    }

    /// [`Readings::mean_with`] without a prior.
    pub fn mean(&self, to_ns: u64, window_ns: u64) -> Option<f64> {
        self.mean_with(to_ns, window_ns, None)
    }

    /// The last `n` readings' values, oldest first (`None`: fewer than `n`).
    fn last(&self, n: usize) -> Option<Vec<f64>> {
        let skip = self.pts.len().checked_sub(n)?;
        Some(self.pts.iter().skip(skip).map(|(_, a)| *a).collect())
    }

    /// Median of the absolute differences between successive readings, over the last `n`
    /// (`None`: fewer than `n`, or than 3). Readings on a path whose A swings in bursts
    /// longer than the reading interval mostly repeat the one before (the median difference
    /// is the reading's own noise, a few % of C); on a path whose cross traffic comes in
    /// packets too few per train (Poisson), each reading is a fresh draw of that noise.
    pub fn step_median(&self, n: usize) -> Option<f64> {
        let x = self.last(n.max(3))?;
        let mut d: Vec<f64> = x.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        d.sort_by(f64::total_cmp);
        Some(d[d.len() / 2])
    }

    /// Whether the last `n` readings come in runs of one level (`None`: fewer than `n`, or
    /// than 4, or all on one side): a Wald–Wolfowitz runs test on the readings split into
    /// two levels where that splits them best (1-D 2-means). The z score of the number of
    /// runs against what independent readings would give: on/off bursts longer than the
    /// reading interval make few long runs (testbed, 40 readings: z −2.7 … −5.1, median
    /// −3.4 to −4.1), while readings that are fresh draws of their noise (Poisson cross
    /// traffic) give z ~ N(0, 1) whatever the noise's shape. The step median cannot tell a
    /// burst's own reading noise (a few % of C at 60% cross load) from that.
    pub fn runs_z(&self, n: usize) -> Option<f64> {
        if n < 4 {
            return None;
        }
        let x = self.last(n)?;
        let mut sorted = x.clone();
        sorted.sort_by(f64::total_cmp);
        // The split that leaves the least squared deviation within the two levels
        // (prefix sums: O(n) after sorting).
        let (mut sum, mut sq) = (0.0, 0.0);
        let (total, total_sq): (f64, f64) = (x.iter().sum(), x.iter().map(|v| v * v).sum());
        let mut best: Option<(f64, f64)> = None;
        for i in 1..n {
            sum += sorted[i - 1];
            sq += sorted[i - 1] * sorted[i - 1];
            let (k, rest) = (i as f64, (n - i) as f64);
            let within = (sq - sum * sum / k) + ((total_sq - sq) - (total - sum).powi(2) / rest);
            if sorted[i] > sorted[i - 1] && best.is_none_or(|(b, _)| within < b) {
                best = Some((within, (sorted[i - 1] + sorted[i]) / 2.0));
            }
        }
        let (_, split) = best?;
        let high: Vec<bool> = x.iter().map(|v| *v > split).collect();
        let n1 = high.iter().filter(|h| **h).count() as f64;
        let (n2, nf) = (n as f64 - n1, n as f64);
        let runs = 1.0 + high.windows(2).filter(|w| w[0] != w[1]).count() as f64;
        let expected = 2.0 * n1 * n2 / nf + 1.0;
        let var = 2.0 * n1 * n2 * (2.0 * n1 * n2 - nf) / (nf * nf * (nf - 1.0));
        (var > 0.0).then(|| (runs - expected) / var.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::FluidPath;
    use mgrp_traffic::CrossPattern;

    fn read_on(c: f64, cross: Option<&str>, at_ns: u64) -> f64 {
        let cross = cross.map(|s| CrossPattern::parse(s).unwrap());
        let mut p = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross).unwrap();
        p.idle_until(at_ns);
        let shape = ReadingShape {
            probes: 20,
            span_ns: 1.5e6,
        };
        let obs = p.send_train(at_ns, &reading_train(shape, c));
        read_avail(&obs, c).unwrap()
    }

    /// An idle path reads C; CBR cross traffic reads C − X within what one cross packet in a
    /// ~2 ms train can shift (measured over 20 start times: mean within 3% of C).
    #[test]
    fn readings_see_the_cross_rate_during_the_train() {
        for c in [20e6, 100e6] {
            assert!((read_on(c, None, 1_000_000_000) - c).abs() < 1e-6 * c);
            let x = 0.6 * c;
            let cross = format!("cbr:{}kbit,size=1000", (x / 1e3) as u64);
            let reads: Vec<f64> = (0..20)
                .map(|k| read_on(c, Some(&cross), 1_000_000_000 + k * 7_300_000))
                .collect();
            let mean = reads.iter().sum::<f64>() / reads.len() as f64;
            eprintln!(
                "{c:e}: reads {:?}",
                reads
                    .iter()
                    .map(|r| (r / c * 100.0).round())
                    .collect::<Vec<_>>()
            );
            assert!((mean - (c - x)).abs() < 0.03 * c, "{c:e}: mean {mean}");
        }
    }

    /// The probe size makes the train last about `span_ns` at C.
    #[test]
    fn reading_trains_span_the_asked_time() {
        let shape = ReadingShape {
            probes: 20,
            span_ns: 1.5e6,
        };
        assert_eq!(reading_train(shape, 20e6).probes[0].size, 200);
        let t = reading_train(shape, 100e6);
        let span = *t.offsets().last().unwrap() as f64;
        assert!((span - 1.5e6).abs() < 0.05e6, "{span}");
    }

    /// Runs of equal readings with rare jumps step little at the median; noise steps much.
    #[test]
    fn step_median_tells_runs_from_noise() {
        let mut runs = Readings::default();
        let mut alt = Readings::default();
        for t in 0..40u64 {
            runs.push(t, if (t / 5) % 2 == 0 { 1.0 } else { 0.0 }, 1000, 100);
            alt.push(t, (t % 2) as f64, 1000, 100);
        }
        assert_eq!(runs.step_median(40), Some(0.0));
        assert_eq!(alt.step_median(12), Some(1.0));
        assert!(runs.step_median(41).is_none());
    }

    /// Runs of one level read as persistent, alternation as the opposite, and a fixed
    /// pseudo-random sequence near 0; too few or one-level readings say nothing.
    #[test]
    fn runs_z_tells_bursts_from_fresh_draws() {
        let fill = |f: &dyn Fn(u64) -> f64| {
            let mut r = Readings::default();
            for t in 0..40u64 {
                r.push(t, f(t), 1000, 100);
            }
            r
        };
        // Bursts of 8 readings at 0.4 or 1.0 with reading noise of ±0.05.
        let bursts = fill(&|t| {
            let level = if (t / 8) % 2 == 0 { 0.4 } else { 1.0 };
            level + 0.05 * ((t * 7919 % 11) as f64 / 10.0 - 0.5)
        });
        let z = bursts.runs_z(40).unwrap();
        assert!(z < -4.0, "bursts: {z}");
        let alt = fill(&|t| (t % 2) as f64);
        assert!(alt.runs_z(40).unwrap() > 4.0);
        // xorshift draws: independent readings.
        let mut x = 88172645463325252u64;
        let mut draws = Readings::default();
        for t in 0..40u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            draws.push(t, (x >> 11) as f64 / (1u64 << 53) as f64, 1000, 100);
        }
        let z = draws.runs_z(40).unwrap();
        assert!(z.abs() < 2.0, "draws: {z}");
        assert!(bursts.runs_z(41).is_none());
        assert!(fill(&|_| 0.5).runs_z(40).is_none());
    }

    /// The time-weighted mean weighs each reading by the time it stands for.
    #[test]
    fn mean_is_time_weighted() {
        let mut r = Readings::default();
        for (t, a) in [(0, 10.0), (100, 10.0), (200, 20.0), (1000, 20.0)] {
            r.push(t, a, 10_000, 100);
        }
        // 10 from -inf to 150, 20 from 150 on: over [0, 1000) 150 × 10 + 850 × 20.
        let m = r.mean(1000, 1000).unwrap();
        assert!((m - (1500.0 + 17000.0) / 1000.0).abs() < 1e-9, "{m}");
        assert!(Readings::default().mean(1000, 1000).is_none());
        // With a prior of 0 before the first reading (at 1000): over [500, 1500) half is 0,
        // the first reading stands from itself on.
        let mut p = Readings::default();
        for (t, a) in [(1000, 10.0), (1100, 10.0), (1200, 20.0)] {
            p.push(t, a, 10_000, 100);
        }
        let m = p.mean_with(1500, 1000, Some(0.0)).unwrap();
        assert!(
            (m - (150.0 * 10.0 + 350.0 * 20.0) / 1000.0).abs() < 1e-9,
            "{m}"
        );
        // Bounded: the oldest go.
        for t in 0..1000 {
            r.push(2000 + t, 1.0, 10_000, 100);
        }
        assert_eq!(r.len(), 100);
    }
}

#[cfg(test)]
mod study {
    use super::*;
    use crate::fluid::FluidPath;
    use mgrp_traffic::CrossPattern;

    #[test]
    #[ignore]
    fn study_readings() {
        let c: f64 = std::env::var("C").map_or(20e6, |v| v.parse().unwrap());
        let cross = std::env::var("CROSS").unwrap_or("poisson:10mbit,size=1000,seed=1".into());
        let mut p = FluidPath::new(
            c,
            100.0 * 1514.0,
            10_000_000,
            Some(CrossPattern::parse(&cross).unwrap()),
        )
        .unwrap();
        let shape = ReadingShape {
            probes: 20,
            span_ns: 1.5e6,
        };
        let mut out = Vec::new();
        for k in 0..60u64 {
            let at = 1_000_000_000 + k * 100_000_000;
            p.idle_until(at);
            let obs = p.send_train(at, &reading_train(shape, c));
            let a = read_avail(&obs, c).unwrap();
            let truth = p.avail_bps(at, at + 1_800_000);
            out.push(format!("{:.0}/{:.0}", a / 1e6, truth / 1e6));
        }
        eprintln!("{}", out.join(" "));
    }
}
