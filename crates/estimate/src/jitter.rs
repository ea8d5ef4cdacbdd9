//! Jitter (one-way-delay variation) from the trains an estimator already sends: no probes of
//! its own. A wrapper that passes every call through and, from each train's result, folds the
//! inter-packet delay variation of consecutive received probes (RFC 3393 IPDV):
//!
//! `D(i-1, i) = (R_i − R_{i−1}) − (S_i − S_{i−1})`
//!
//! with S the actual departure (sender's clock) and R the receiver's kernel timestamp, so the
//! two hosts' clock offset cancels. A train sent faster than the available bandwidth queues
//! behind itself and adds a constant positive D to every pair (its own ramp, not the path's
//! jitter); each train's median D is therefore taken off its pairs first. The round's jitter is
//! RFC 3550's interarrival jitter over those pairs in send order (`J += (|D| − J) / 16`), its
//! range the median and 95th percentile of |D|.

use crate::{Estimate, Estimator, TrainResult, TrainSpec};

/// Pairs kept per round for the percentiles; a round has a few thousand at most.
const MAX_PAIRS: usize = 65_536;

/// The jitter of a round, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    /// RFC 3550 interarrival jitter over the round's detrended IPDV.
    pub rfc3550_s: f64,
    /// Median and 95th percentile of |detrended IPDV|.
    pub median_s: f64,
    pub p95_s: f64,
    /// Pairs of consecutive received probes it is made of.
    pub pairs: usize,
    pub trains: u32,
}

/// Folds trains into a [`Jitter`] (sans-IO; usable on its own).
#[derive(Debug, Clone, Default)]
pub struct JitterMeter {
    j: f64,
    abs: Vec<f64>,
    pairs: usize,
    trains: u32,
}

impl JitterMeter {
    pub fn handle_train(&mut self, obs: &TrainResult) {
        let d = ipdv(obs);
        if d.is_empty() {
            return;
        }
        self.trains += 1;
        let mut sorted = d.clone();
        sorted.sort_by(f64::total_cmp);
        let trend = sorted[sorted.len() / 2];
        for x in d {
            let a = (x - trend).abs();
            self.j += (a - self.j) / 16.0;
            self.pairs += 1;
            if self.abs.len() < MAX_PAIRS {
                self.abs.push(a);
            }
        }
    }

    /// The jitter so far, once a pair of probes arrived.
    pub fn jitter(&self) -> Option<Jitter> {
        if self.abs.is_empty() {
            return None;
        }
        let mut s = self.abs.clone();
        s.sort_by(f64::total_cmp);
        let q = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize];
        Some(Jitter {
            rfc3550_s: self.j,
            median_s: q(0.5),
            p95_s: q(0.95),
            pairs: self.pairs,
            trains: self.trains,
        })
    }
}

/// IPDV (s) of consecutive received probes of one train, in send order. Probes lost, not sent
/// or without a receive time break the chain (a pair spans no gap).
pub fn ipdv(obs: &TrainResult) -> Vec<f64> {
    let mut out = Vec::with_capacity(obs.probes.len().saturating_sub(1));
    let mut prev: Option<(u64, u64, u16)> = None;
    for p in &obs.probes {
        let (Some(s), Some(r)) = (p.sent_ns, p.rx_ns.map(|w| w.0)) else {
            prev = None;
            continue;
        };
        if let Some((s0, r0, _)) = prev.filter(|(_, _, i0)| p.index == i0.wrapping_add(1)) {
            let d = (i128::from(r) - i128::from(r0)) - (i128::from(s) - i128::from(s0));
            out.push(d as f64 / 1e9);
        }
        prev = Some((s, r, p.index));
    }
    out
}

/// An estimator whose trains are also read for jitter.
pub struct JitterTap<E> {
    inner: E,
    meter: JitterMeter,
}

impl<E: Estimator> JitterTap<E> {
    pub fn new(inner: E) -> Self {
        JitterTap {
            inner,
            meter: JitterMeter::default(),
        }
    }

    pub fn jitter(&self) -> Option<Jitter> {
        self.meter.jitter()
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: Estimator> Estimator for JitterTap<E> {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        self.inner.poll_train(now_ns)
    }
    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        self.meter.handle_train(obs);
        self.inner.handle_train(now_ns, obs)
    }
    fn estimate(&self) -> Option<Estimate> {
        self.inner.estimate()
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn next_wakeup(&self) -> Option<u64> {
        self.inner.next_wakeup()
    }
    fn capacity(&self) -> Option<Estimate> {
        self.inner.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::FluidPath;
    use mgrp_traffic::pattern::CrossPattern;
    use mgrp_train::{MonoNs, ProbeResult, TrainStats, WallNs};

    /// A train sent every `gap` ns whose i-th probe has one-way delay `owd(i)`; `None` = lost.
    fn train(n: usize, gap: u64, owd: impl Fn(usize) -> Option<u64>) -> TrainResult {
        let probes: Vec<ProbeResult> = (0..n)
            .map(|i| {
                let s = i as u64 * gap;
                let rx = owd(i).map(|d| WallNs(1_000_000_000_000 + s + d));
                ProbeResult {
                    index: i as u16,
                    size: 1000,
                    intended_ns: s,
                    sent_ns: Some(s),
                    rx_ns: rx,
                    rx_size: rx.map(|_| 1000),
                    tx_real_ns: WallNs(s),
                    tx_kernel_ns: None,
                    hop: None,
                }
            })
            .collect();
        TrainResult {
            train: 1,
            peer: "scripted".into(),
            start_mono_ns: MonoNs(0),
            probes,
            stats: TrainStats {
                sent: n,
                received: n,
                lost: 0,
                send_errors: 0,
                planned_ns: 0,
                actual_ns: None,
                gap_error: None,
                tx_gap_error: None,
                rx_gap_error: None,
                tolerance_ns: 0,
                span_error: None,
                window_span_error: None,
                flagged: false,
                report_missing: false,
                report_truncated: false,
                stolen_ms: None,
            },
            riders: None,
            hops: None,
        }
    }

    #[test]
    fn ipdv_of_alternating_delays() {
        // OWD 10, 12, 10, 12 ms...: every pair differs by 2 ms.
        let t = train(11, 1_000_000, |i| {
            Some(10_000_000 + (i as u64 % 2) * 2_000_000)
        });
        let d = ipdv(&t);
        assert_eq!(d.len(), 10);
        assert!(d.iter().all(|x| (x.abs() - 0.002).abs() < 1e-12), "{d:?}");
        let mut m = JitterMeter::default();
        m.handle_train(&t);
        let j = m.jitter().unwrap();
        // The median of ±2 ms is one of them: every pair is 4 ms from it or 0 from it, so the
        // detrended |D| are 0 and 4 ms, half each.
        assert_eq!(j.pairs, 10);
        assert!(j.p95_s > 0.0039 && j.p95_s < 0.0041, "{j:?}");
        assert!(j.rfc3550_s > 0.0 && j.rfc3550_s < 0.004, "{j:?}");
    }

    #[test]
    fn a_train_queueing_behind_itself_is_not_jitter() {
        // Sent at 2x the capacity: each probe waits one more gap than the last. Raw IPDV is a
        // constant 1 ms; detrended it is nothing.
        let t = train(50, 1_000_000, |i| Some(5_000_000 + i as u64 * 1_000_000));
        assert!(ipdv(&t).iter().all(|x| (x - 0.001).abs() < 1e-12));
        let mut m = JitterMeter::default();
        m.handle_train(&t);
        let j = m.jitter().unwrap();
        assert!(j.rfc3550_s.abs() < 1e-12 && j.p95_s.abs() < 1e-12, "{j:?}");
        // And on the fluid bottleneck: a train above A through CBR cross traffic.
        let mut path = FluidPath::new(
            10e6,
            100.0 * 1514.0,
            10_000_000,
            Some(CrossPattern::Cbr {
                rate_bps: 5_000_000,
                size: 1500,
            }),
        )
        .unwrap();
        let spec = TrainSpec::uniform(100, 1000, 1_000_000); // 8 Mbit/s
        let r = path.send_train(0, &spec);
        let mut m = JitterMeter::default();
        m.handle_train(&r);
        let j = m.jitter().unwrap();
        assert!(j.p95_s < 0.0015, "fluid train above A: {j:?}");
    }

    #[test]
    fn losses_break_pairs_and_nothing_arrived_is_none() {
        let t = train(10, 1_000_000, |i| (i % 3 != 1).then_some(10_000_000));
        // Pairs (2,3), (5,6), (8,9) only: the others span a lost probe.
        assert_eq!(ipdv(&t).len(), 3);
        let mut m = JitterMeter::default();
        m.handle_train(&train(5, 1_000_000, |_| None));
        assert!(m.jitter().is_none());
    }
}
