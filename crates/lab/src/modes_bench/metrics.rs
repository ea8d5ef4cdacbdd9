//! The bench's arithmetic, without a network: sustained thresholds (time to 90%, recovery),
//! the share of spare capacity, completion-time quantiles, and spreads over repeated runs.

use mgrp_estimate::stats::quantile;
use serde::Serialize;

/// A level must hold this long (in bins) to count as reached: one 100 ms bin at full rate can
/// be a burst of a flow that then backs off.
pub const HOLD_BINS: usize = 5;

/// Seconds from the series' start to the start of the first `hold` consecutive bins (of
/// `bin_s` seconds each) whose mean is at least `threshold`; `None` if no such run exists.
/// NaN bins (no truth for the window) never count.
pub fn first_sustained(rates: &[f64], bin_s: f64, threshold: f64, hold: usize) -> Option<f64> {
    let hold = hold.max(1);
    if rates.len() < hold {
        return None;
    }
    (0..=rates.len() - hold)
        .find(|&i| {
            let w = &rates[i..i + hold];
            w.iter().all(|r| r.is_finite()) && w.iter().sum::<f64>() / hold as f64 >= threshold
        })
        .map(|i| i as f64 * bin_s)
}

/// What the background flow took of the capacity the foreground left: bg / (C − fg_before).
/// `None` when the foreground left less than 1% of C (the share then means nothing).
pub fn spare_share(bg_bps: f64, capacity_bps: f64, fg_before_bps: f64) -> Option<f64> {
    let spare = capacity_bps - fg_before_bps;
    (spare > 0.01 * capacity_bps && bg_bps.is_finite()).then(|| bg_bps / spare)
}

/// Median and 90th percentile of completion times, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Completion {
    pub flows: usize,
    pub median_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

impl Completion {
    pub fn of(secs: &[f64]) -> Completion {
        Completion {
            flows: secs.len(),
            median_ms: quantile(secs, 0.5).map(|s| s * 1e3),
            p90_ms: quantile(secs, 0.9).map(|s| s * 1e3),
        }
    }
}

/// Median and range of one figure over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// Over the finite values given; `None` if there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        Some(Spread {
            median: quantile(&v, 0.5)?,
            min: quantile(&v, 0.0)?,
            max: quantile(&v, 1.0)?,
            n: v.len(),
        })
    }
}

/// `x / reference` when both are there and the reference is not zero.
pub fn ratio(x: Option<f64>, reference: Option<f64>) -> Option<f64> {
    match (x, reference) {
        (Some(x), Some(r)) if r.abs() > f64::EPSILON => Some(x / r),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sustained_needs_the_whole_hold() {
        // A lone burst at 0.5 s does not count; the climb that holds from 1.1 s does (bins
        // 92, 91, 95, 90, 99: mean 93.4 ≥ 90; from 1.0 s the mean is 85.6).
        let mut r = vec![10.0; 10];
        r[5] = 95.0;
        r.extend([60.0, 92.0, 91.0, 95.0, 90.0, 99.0, 100.0]);
        assert_eq!(first_sustained(&r, 0.1, 90.0, 5), Some(1.1));
        // A mean counts, not every bin: 85 and 96 average to 90.5.
        assert_eq!(first_sustained(&[85.0, 96.0], 0.1, 90.0, 2), Some(0.0));
        assert_eq!(first_sustained(&[95.0, 95.0], 0.1, 90.0, 5), None);
        assert_eq!(first_sustained(&[], 0.1, 90.0, 5), None);
        assert_eq!(first_sustained(&[95.0, f64::NAN, 95.0], 0.1, 90.0, 2), None);
        // hold 0 is taken as 1.
        assert_eq!(first_sustained(&[1.0, 91.0], 0.5, 90.0, 0), Some(0.5));
    }

    #[test]
    fn time_to_90_of_a_slow_start() {
        // Delivery doubling every 200 ms (two 100 ms bins) from 1.5625 to 50 Mbit/s on a
        // 96 Mbit/s link, then full from 1.2 s: 90% of 96 = 86.4 is first held as a mean from
        // 1.1 s (50 and four bins of 96 average 86.8).
        let c = 96.0;
        let mut r: Vec<f64> = (0..12).map(|i| 100.0 / 2f64.powi(6 - i / 2)).collect();
        r.iter_mut().for_each(|x| *x = x.min(c));
        r.extend([c; 20]);
        assert_eq!(r[11], 50.0);
        assert_eq!(first_sustained(&r, 0.1, 0.9 * c, HOLD_BINS), Some(1.1));
    }

    #[test]
    fn recovery_after_the_foreground_stops() {
        // Background at 16 of 48 Mbit/s; after the stop it grows 2 Mbit/s per 100 ms bin up to
        // the link: 43.2 (90%) is first held as a mean of 5 bins from the bin at 40 Mbit/s.
        let c = 48.0;
        let r: Vec<f64> = (0..60).map(|i| (16.0 + 2.0 * i as f64).min(c)).collect();
        let t = first_sustained(&r, 0.1, 0.9 * c, HOLD_BINS).unwrap();
        assert!((t - 1.2).abs() < 1e-9, "{t}");
        assert_eq!(r[12], 40.0);
        // Never back: no recovery.
        assert_eq!(first_sustained(&[16.0; 50], 0.1, 0.9 * c, HOLD_BINS), None);
    }

    #[test]
    fn spare_share_arithmetic() {
        // The seed's figures: C 50, foreground 40 before; ImTCP-bg took 9, Reno 16.
        assert_eq!(spare_share(9e6, 50e6, 40e6), Some(0.9));
        assert_eq!(spare_share(16e6, 50e6, 40e6), Some(1.6));
        // Measured, not configured: 48 drained, 38.4 foreground → spare 9.6.
        let s = spare_share(9.6e6, 48e6, 38.4e6).unwrap();
        assert!((s - 1.0).abs() < 1e-12);
        // No spare, or a foreground above the measured capacity: no share.
        assert_eq!(spare_share(1e6, 50e6, 50e6), None);
        assert_eq!(spare_share(1e6, 50e6, 49.9e6), None);
        assert_eq!(spare_share(1e6, 50e6, 51e6), None);
        assert_eq!(spare_share(f64::NAN, 50e6, 40e6), None);
    }

    #[test]
    fn completion_quantiles_in_ms() {
        let secs: Vec<f64> = (1..=10).map(|i| i as f64 / 100.0).collect();
        let c = Completion::of(&secs);
        assert_eq!(c.flows, 10);
        assert!((c.median_ms.unwrap() - 55.0).abs() < 1e-9);
        assert!((c.p90_ms.unwrap() - 91.0).abs() < 1e-9);
        let none = Completion::of(&[]);
        assert_eq!((none.flows, none.median_ms, none.p90_ms), (0, None, None));
    }

    #[test]
    fn spread_and_ratio() {
        let s = Spread::of([3.0, f64::NAN, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert!(Spread::of([f64::NAN]).is_none());
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
    }
}
