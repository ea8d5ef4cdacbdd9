//! Pathload's trend tests on one-way delays (Jain & Dovrolis 2002; `../shared/notes/seed-000.md`
//! §4.2, `seed-001.md` §1.7): the delays of a stream are split into Γ ≈ √K groups, each reduced
//! to its median, and two statistics decide whether the delays increase.
//!
//! - PCT = Σ 1[D_k > D_{k−1}] / (Γ−1)
//! - PDT = (D_Γ − D_1) / Σ |D_k − D_{k−1}|
//!
//! Two published sets of thresholds exist. The default is the one pathload 1.3.2 actually runs
//! (its source: PCT 0.55 ± 10% → increasing above 0.605, not below 0.495; PDT 0.4 ± 10% → 0.44 /
//! 0.36). The paper's values (PCT 0.66 / 0.54, PDT 0.55 / 0.45) are [`TrendParams::paper`].
//! Streams too short for groups (fewer than 2 per group, as in the ImTCP sweep's 5-probe streams)
//! are tested on their raw delays.
//!
//! Between the thresholds a statistic is ambiguous. The stream's verdict combines them as
//! pathload does: one says increasing and the other does not contradict it → increasing; one says
//! not increasing and the other does not contradict it → not increasing; otherwise unknown.

use crate::stats::median;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Trend {
    Increasing,
    NotIncreasing,
    Unknown,
}

/// Thresholds, with pathload's published defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrendParams {
    pub pct_increasing: f64,
    pub pct_not: f64,
    pub pdt_increasing: f64,
    pub pdt_not: f64,
    /// Groups per stream; `None` = ⌊√K⌋.
    pub groups: Option<usize>,
    /// A stream that lost more than this fraction is taken as increasing (loss is congestion).
    pub loss_increasing: f64,
    /// Delays (ns) must rise at least this much from the first group's median to the last's
    /// for "increasing"; less is "not increasing". PCT and PDT read only the shape, so a rise
    /// smaller than one packet's service time (a periodic cross stream beating with the
    /// probes' period sweeps such a ramp across a stream) passes for a queue. 0: pathload.
    pub min_rise_ns: f64,
}

impl Default for TrendParams {
    /// Pathload 1.3.2's thresholds.
    fn default() -> Self {
        TrendParams {
            pct_increasing: 0.605,
            pct_not: 0.495,
            pdt_increasing: 0.44,
            pdt_not: 0.36,
            groups: None,
            loss_increasing: 0.1,
            min_rise_ns: 0.0,
        }
    }
}

impl TrendParams {
    /// The thresholds of the pathload paper (Jain & Dovrolis 2002).
    pub fn paper() -> Self {
        TrendParams {
            pct_increasing: 0.66,
            pct_not: 0.54,
            pdt_increasing: 0.55,
            pdt_not: 0.45,
            ..Default::default()
        }
    }
}

/// Medians of `groups` consecutive groups of `owd` (the last group takes the remainder).
pub fn group_medians(owd: &[f64], groups: usize) -> Vec<f64> {
    let g = groups.clamp(1, owd.len().max(1));
    let size = owd.len() / g;
    if size == 0 {
        return owd.to_vec();
    }
    (0..g)
        .map(|i| {
            let end = if i + 1 == g {
                owd.len()
            } else {
                (i + 1) * size
            };
            median(&owd[i * size..end])
        })
        .collect()
}

/// Pairwise comparison test over group medians.
pub fn pct(d: &[f64]) -> f64 {
    if d.len() < 2 {
        return f64::NAN;
    }
    d.windows(2).filter(|w| w[1] > w[0]).count() as f64 / (d.len() - 1) as f64
}

/// Pairwise difference test over group medians (0 when the medians do not move at all).
pub fn pdt(d: &[f64]) -> f64 {
    if d.len() < 2 {
        return f64::NAN;
    }
    let total: f64 = d.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    if total == 0.0 {
        return 0.0;
    }
    (d[d.len() - 1] - d[0]) / total
}

fn classify(x: f64, inc: f64, not: f64) -> Trend {
    if x.is_nan() {
        Trend::Unknown
    } else if x > inc {
        Trend::Increasing
    } else if x < not {
        Trend::NotIncreasing
    } else {
        Trend::Unknown
    }
}

/// The verdict on one stream's one-way delays, given how many of its probes were lost.
pub fn stream_trend(owd: &[f64], sent: usize, p: &TrendParams) -> Trend {
    let lost = sent.saturating_sub(owd.len());
    if sent > 0 && lost as f64 / sent as f64 > p.loss_increasing {
        return Trend::Increasing;
    }
    if owd.len() < 4 {
        return Trend::Unknown;
    }
    let d = group_medians(owd, groups(owd.len(), p));
    let a = classify(pct(&d), p.pct_increasing, p.pct_not);
    let b = classify(pdt(&d), p.pdt_increasing, p.pdt_not);
    use Trend::*;
    let verdict = match (a, b) {
        (Increasing, Increasing | Unknown) | (Unknown, Increasing) => Increasing,
        (NotIncreasing, NotIncreasing | Unknown) | (Unknown, NotIncreasing) => NotIncreasing,
        _ => Unknown,
    };
    let rise = d[d.len() - 1] - d[0];
    if p.min_rise_ns > 0.0 && verdict != NotIncreasing && rise < p.min_rise_ns {
        // Too small to be a queue built by the stream, whatever its shape.
        return NotIncreasing;
    }
    verdict
}

/// The trend tests' groups for `n` delays: the configured count, or √n (at least 2).
fn groups(n: usize, p: &TrendParams) -> usize {
    p.groups
        .unwrap_or(((n as f64).sqrt().floor() as usize).max(2))
}

/// How far a stream's delays wander from one trend group to the next: the median absolute
/// step between successive group medians (the groups [`stream_trend`] judges), in the delays'
/// unit. A queue the stream builds moves them one way; this is what they do besides.
pub fn group_jitter(owd: &[f64], p: &TrendParams) -> f64 {
    if owd.len() < 4 {
        return 0.0;
    }
    let d = group_medians(owd, groups(owd.len(), p));
    let steps: Vec<f64> = d.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    crate::stats::quantile(&steps, 0.5).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let rising: Vec<f64> = (0..10).map(|i| i as f64).collect();
        assert_eq!(pct(&rising), 1.0);
        assert_eq!(pdt(&rising), 1.0);
        let flat = vec![5.0; 10];
        assert_eq!(pct(&flat), 0.0);
        assert_eq!(pdt(&flat), 0.0);
        let zigzag = [0.0, 1.0, 0.0, 1.0, 0.0];
        assert_eq!(pct(&zigzag), 0.5);
        assert_eq!(pdt(&zigzag), 0.0);
        assert_eq!(
            group_medians(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 3),
            vec![1.5, 3.5, 6.0]
        );
    }

    /// A ramp smaller than the least rise reads as flat; a lossy stream stays increasing.
    #[test]
    fn a_rise_below_the_least_is_not_a_queue() {
        let p = TrendParams {
            min_rise_ns: 100_000.0,
            ..TrendParams::default()
        };
        // An 83 µs sawtooth ramp (a 1000-byte cross packet at 100 Mbit/s sliding past the
        // probes), then a real 1 ms queue.
        let ramp: Vec<f64> = (0..50).map(|i| 1e7 + i as f64 * 1_700.0).collect();
        let queue: Vec<f64> = (0..50).map(|i| 1e7 + i as f64 * 20_000.0).collect();
        assert_eq!(
            stream_trend(&ramp, 50, &TrendParams::default()),
            Trend::Increasing
        );
        assert_eq!(stream_trend(&ramp, 50, &p), Trend::NotIncreasing);
        assert_eq!(stream_trend(&queue, 50, &p), Trend::Increasing);
        assert_eq!(stream_trend(&ramp[..40], 50, &p), Trend::Increasing, "loss");
    }

    #[test]
    fn verdicts() {
        let p = TrendParams::default();
        let rising: Vec<f64> = (0..100)
            .map(|i| i as f64 * 10.0 + ((i * 7919) % 13) as f64)
            .collect();
        assert_eq!(stream_trend(&rising, 100, &p), Trend::Increasing);
        let noise: Vec<f64> = (0..100).map(|i| ((i * 7919) % 101) as f64).collect();
        assert_eq!(stream_trend(&noise, 100, &p), Trend::NotIncreasing);
        // Heavy loss is congestion, whatever the delays say.
        assert_eq!(stream_trend(&noise[..80], 100, &p), Trend::Increasing);
        assert_eq!(stream_trend(&[1.0, 2.0], 2, &p), Trend::Unknown);
    }

    /// A queue the stream builds moves every group the same way: the jitter is one group's
    /// step. Delays that jump about by ±1 ms around a flat line are 2 ms steps, whatever the
    /// trend says of them.
    #[test]
    fn group_jitter_is_the_step_between_groups() {
        let p = TrendParams::default();
        let ramp: Vec<f64> = (0..49).map(|i| 10.0 * i as f64).collect();
        // 49 delays, 7 groups of 7: group medians 70 apart.
        assert!((group_jitter(&ramp, &p) - 70.0).abs() < 1e-9);
        assert_eq!(group_jitter(&[5.0; 49], &p), 0.0);
        let jumpy: Vec<f64> = (0..49)
            .map(|i| if (i / 7) % 2 == 0 { 1e6 } else { -1e6 })
            .collect();
        assert!((group_jitter(&jumpy, &p) - 2e6).abs() < 1e-3);
        assert_eq!(group_jitter(&[1.0, 2.0, 3.0], &p), 0.0);
    }
}
