//! Trains: what an estimator asks for and what it gets back. Pure data and arithmetic.

use crate::Error;
use mgrp_wire::control::RxRecord;
use mgrp_wire::probe::HEADER_LEN;
use serde::{Deserialize, Serialize};

/// Largest probe: a UDP payload that fits a 1500-byte MTU without IP fragmentation (which
/// would break per-probe timing).
pub const MAX_PROBE_SIZE: u16 = 1472;
/// Most probes in one train.
pub const MAX_TRAIN_LEN: usize = 10_000;
/// Longest gap between two probes, and longest planned train.
pub const MAX_GAP_NS: u64 = 10_000_000_000;
pub const MAX_TRAIN_NS: u64 = 60_000_000_000;
/// Default tolerance: a train whose p99 sender gap error exceeds this is flagged.
pub const DEFAULT_TOLERANCE_NS: u64 = 5_000;

/// One probe: its size (UDP payload bytes, MGRP header included), the gap since the previous
/// probe, an optional IP TTL, and whether its padding may carry a rider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub size: u16,
    pub gap_ns: u64,
    #[serde(default)]
    pub ttl: Option<u8>,
    #[serde(default)]
    pub may_carry: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainSpec {
    pub probes: Vec<ProbeSpec>,
    /// Flag the train if its p99 sender gap error exceeds this (default 5 us).
    #[serde(default)]
    pub tolerance_ns: Option<u64>,
}

impl TrainSpec {
    /// `count` probes of `size` bytes, `gap_ns` apart.
    pub fn uniform(count: usize, size: u16, gap_ns: u64) -> TrainSpec {
        TrainSpec {
            probes: (0..count)
                .map(|i| ProbeSpec {
                    size,
                    gap_ns: if i == 0 { 0 } else { gap_ns },
                    ttl: None,
                    may_carry: false,
                })
                .collect(),
            tolerance_ns: None,
        }
    }

    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::BadInput(m));
        if self.probes.is_empty() || self.probes.len() > MAX_TRAIN_LEN {
            return bad(format!(
                "a train has 1..={MAX_TRAIN_LEN} probes, not {}",
                self.probes.len()
            ));
        }
        for (i, p) in self.probes.iter().enumerate() {
            if (p.size as usize) < HEADER_LEN || p.size > MAX_PROBE_SIZE {
                return bad(format!(
                    "probe {i}: size {} is outside {HEADER_LEN}..={MAX_PROBE_SIZE} bytes (UDP payload, MGRP header included)",
                    p.size
                ));
            }
            if p.gap_ns > MAX_GAP_NS {
                return bad(format!(
                    "probe {i}: gap {} ns is longer than 10 s",
                    p.gap_ns
                ));
            }
            if p.ttl == Some(0) {
                return bad(format!("probe {i}: TTL 0 would never leave the host"));
            }
        }
        if self.planned_ns() > MAX_TRAIN_NS {
            return bad(format!(
                "train lasts {} s; the limit is 60 s",
                self.planned_ns() as f64 / 1e9
            ));
        }
        Ok(())
    }

    /// Offset of each probe's intended departure from the first's.
    pub fn offsets(&self) -> Vec<u64> {
        mgrp_estimate::offsets(self.probes.iter().map(|p| p.gap_ns))
    }

    /// Intended time from the first probe to the last.
    pub fn planned_ns(&self) -> u64 {
        self.probes.iter().skip(1).map(|p| p.gap_ns).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.probes.iter().map(|p| p.size as u64).sum()
    }
}

/// When the pacer sent one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendRecord {
    /// CLOCK_MONOTONIC ns just before the send call; `None` if the send failed.
    pub mono_ns: Option<u64>,
    /// CLOCK_REALTIME ns stamped into the probe.
    pub real_ns: u64,
    /// Kernel TX software timestamp (CLOCK_REALTIME ns), where the kernel gives one.
    pub kernel_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub index: u16,
    pub size: u16,
    /// Intended and actual departure, ns after the first probe's intended departure.
    pub intended_ns: u64,
    pub sent_ns: Option<u64>,
    /// Receiver's kernel timestamp (CLOCK_REALTIME ns) and size seen, if it arrived.
    pub rx_ns: Option<u64>,
    pub rx_size: Option<u16>,
    /// Sender's CLOCK_REALTIME stamp carried in the probe (compare with `rx_ns` for one-way delay
    /// when both clocks are one, as in the testbed).
    pub tx_real_ns: u64,
    /// Kernel TX software timestamp (CLOCK_REALTIME ns): the actual departure, where available.
    pub tx_kernel_ns: Option<u64>,
}

/// Median, 99th percentile and maximum of a set of values (ns).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Quantiles {
    pub n: usize,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    pub fn of(mut v: Vec<f64>) -> Option<Quantiles> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
        Some(Quantiles {
            n: v.len(),
            median: q(0.5),
            p99: q(0.99),
            max: *v.last().expect("non-empty"),
        })
    }
}

/// The seed's MGRP_IOC_PROBE_RESULTS, and more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainStats {
    pub sent: usize,
    pub received: usize,
    pub lost: usize,
    pub send_errors: usize,
    /// Intended and actual time from first to last departure.
    pub planned_ns: u64,
    pub actual_ns: Option<u64>,
    /// |actual gap − intended gap| at the sender, ns, from the pacer's clock just before send.
    pub gap_error: Option<Quantiles>,
    /// The same from kernel TX timestamps (when the packet reached the device), where available.
    pub tx_gap_error: Option<Quantiles>,
    /// |receive gap − intended gap| (kernel RX timestamps), ns: pacing plus path jitter.
    pub rx_gap_error: Option<Quantiles>,
    pub tolerance_ns: u64,
    /// The sender's p99 gap error exceeded the tolerance: analyse with actual times or discard.
    pub flagged: bool,
    /// The receiver's report never came (peer gone or too slow): every probe counts as lost.
    pub report_missing: bool,
    /// The receiver cut its report short to stay within what it received from us.
    pub report_truncated: bool,
    /// Riders carried (riders arrive with a later issue; always 0 for now).
    pub rider_pkts: u64,
    pub rider_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainResult {
    pub train: u32,
    pub peer: String,
    /// CLOCK_MONOTONIC ns of the first probe's intended departure (to look up ground truth).
    pub start_mono_ns: u64,
    pub probes: Vec<ProbeResult>,
    pub stats: TrainStats,
    /// What riders the train carried, if riders are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<crate::riders::TrainRiderStats>,
}

impl TrainResult {
    /// Put together what was asked, what the pacer did and what the receiver reported.
    pub fn assemble(
        train: u32,
        peer: String,
        spec: &TrainSpec,
        start_mono_ns: u64,
        sends: &[SendRecord],
        report: Option<(&[RxRecord], bool)>,
    ) -> TrainResult {
        let offsets = spec.offsets();
        let mut probes: Vec<ProbeResult> = spec
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = sends.get(i).copied().unwrap_or_default();
                ProbeResult {
                    index: i as u16,
                    size: p.size,
                    intended_ns: offsets[i],
                    sent_ns: s.mono_ns.map(|m| m.saturating_sub(start_mono_ns)),
                    rx_ns: None,
                    rx_size: None,
                    tx_real_ns: s.real_ns,
                    tx_kernel_ns: s.kernel_ns,
                }
            })
            .collect();
        if let Some((records, _)) = report {
            for r in records {
                if let Some(p) = probes.get_mut(r.index as usize) {
                    if p.sent_ns.is_some() && p.rx_ns.is_none() {
                        p.rx_ns = Some(r.rx_ns);
                        p.rx_size = Some(r.size);
                    }
                }
            }
        }
        let sent = probes.iter().filter(|p| p.sent_ns.is_some()).count();
        let received = probes.iter().filter(|p| p.rx_ns.is_some()).count();
        let mut gap_err = Vec::new();
        let mut tx_gap_err = Vec::new();
        let mut rx_gap_err = Vec::new();
        for w in probes.windows(2) {
            let intended = (w[1].intended_ns - w[0].intended_ns) as f64;
            if let (Some(a), Some(b)) = (w[0].sent_ns, w[1].sent_ns) {
                gap_err.push((b as f64 - a as f64 - intended).abs());
            }
            if let (Some(a), Some(b)) = (w[0].tx_kernel_ns, w[1].tx_kernel_ns) {
                tx_gap_err.push((b as f64 - a as f64 - intended).abs());
            }
            if let (Some(a), Some(b)) = (w[0].rx_ns, w[1].rx_ns) {
                rx_gap_err.push((b as f64 - a as f64 - intended).abs());
            }
        }
        let gap_error = Quantiles::of(gap_err);
        let tx_gap_error = Quantiles::of(tx_gap_err);
        // Judge by the actual departures (kernel) where known, else by the pacer's clock.
        let judged = tx_gap_error.or(gap_error);
        let tolerance_ns = spec.tolerance_ns.unwrap_or(DEFAULT_TOLERANCE_NS);
        let first = probes.iter().find_map(|p| p.sent_ns);
        let last = probes.iter().rev().find_map(|p| p.sent_ns);
        TrainResult {
            train,
            peer,
            start_mono_ns,
            riders: None,
            stats: TrainStats {
                sent,
                received,
                lost: sent - received,
                send_errors: probes.len() - sent,
                planned_ns: spec.planned_ns(),
                actual_ns: first.zip(last).map(|(a, b)| b - a),
                flagged: judged.is_some_and(|q| q.p99 > tolerance_ns as f64) || sent < probes.len(),
                gap_error,
                tx_gap_error,
                rx_gap_error: Quantiles::of(rx_gap_err),
                tolerance_ns,
                report_missing: report.is_none(),
                report_truncated: report.is_some_and(|(_, t)| t),
                rider_pkts: 0,
                rider_bytes: 0,
            },
            probes,
        }
    }

    /// Receive rate over the train: bits of probes 2..n over the first-to-last receive time.
    pub fn rx_rate_bps(&self) -> Option<f64> {
        let rx: Vec<&ProbeResult> = self.probes.iter().filter(|p| p.rx_ns.is_some()).collect();
        let (first, last) = (rx.first()?, rx.last()?);
        let span = last.rx_ns?.checked_sub(first.rx_ns?)?;
        if span == 0 {
            return None;
        }
        let bits: u64 = rx[1..]
            .iter()
            .map(|p| p.rx_size.unwrap_or(p.size) as u64 * 8)
            .sum();
        Some(bits as f64 * 1e9 / span as f64)
    }

    /// First-to-last receive time (dispersion), ns.
    pub fn dispersion_ns(&self) -> Option<u64> {
        let first = self.probes.iter().find_map(|p| p.rx_ns)?;
        let last = self.probes.iter().rev().find_map(|p| p.rx_ns)?;
        Some(last.saturating_sub(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(TrainSpec::uniform(100, 1000, 100_000).validate().is_ok());
        assert!(TrainSpec::uniform(0, 1000, 1).validate().is_err());
        assert!(TrainSpec::uniform(10, 20, 1).validate().is_err());
        assert!(TrainSpec::uniform(10, 1473, 1).validate().is_err());
        assert!(TrainSpec::uniform(10_001, 100, 1).validate().is_err());
        assert!(
            TrainSpec::uniform(100, 100, 1_000_000_000)
                .validate()
                .is_err(),
            "99 s train"
        );
        let t = TrainSpec::uniform(4, 100, 10);
        assert_eq!(t.offsets(), vec![0, 10, 20, 30]);
        assert_eq!(t.planned_ns(), 30);
        assert_eq!(t.bytes(), 400);
    }

    #[test]
    fn assemble_counts_losses_and_gap_errors() {
        let spec = TrainSpec::uniform(4, 1000, 100_000);
        let start = 1_000_000;
        let sends: Vec<SendRecord> = [0u64, 100_200, 200_000, 300_100]
            .iter()
            .map(|o| SendRecord {
                mono_ns: Some(start + o),
                real_ns: 5,
                kernel_ns: None,
            })
            .collect();
        let rx = vec![
            RxRecord {
                index: 0,
                size: 1000,
                rx_ns: 10_000_000,
                sent_ns: 5,
            },
            RxRecord {
                index: 1,
                size: 1000,
                rx_ns: 10_100_000,
                sent_ns: 5,
            },
            RxRecord {
                index: 3,
                size: 1000,
                rx_ns: 10_300_500,
                sent_ns: 5,
            },
            RxRecord {
                index: 3,
                size: 1000,
                rx_ns: 99,
                sent_ns: 5,
            }, // duplicate ignored
            RxRecord {
                index: 9,
                size: 1000,
                rx_ns: 99,
                sent_ns: 5,
            }, // unknown index ignored
        ];
        let r = TrainResult::assemble(1, "peer".into(), &spec, start, &sends, Some((&rx, false)));
        assert_eq!((r.stats.sent, r.stats.received, r.stats.lost), (4, 3, 1));
        let g = r.stats.gap_error.unwrap();
        assert_eq!(g.n, 3);
        assert_eq!(g.max, 200.0);
        assert_eq!(g.median, 200.0);
        assert_eq!(r.stats.actual_ns, Some(300_100));
        assert!(!r.stats.flagged);
        assert_eq!(r.dispersion_ns(), Some(300_500));
        assert_eq!(r.probes[3].rx_ns, Some(10_300_500));
        let rate = r.rx_rate_bps().unwrap();
        assert!((rate - 2.0 * 8000.0 / 300_500e-9).abs() < 1.0);

        let missing = TrainResult::assemble(2, "peer".into(), &spec, start, &sends, None);
        assert!(missing.stats.report_missing);
        assert_eq!(missing.stats.lost, 4);

        let late: Vec<SendRecord> = [0u64, 120_000, 200_000, 300_000]
            .iter()
            .map(|o| SendRecord {
                mono_ns: Some(start + o),
                real_ns: 5,
                kernel_ns: None,
            })
            .collect();
        assert!(
            TrainResult::assemble(3, "p".into(), &spec, start, &late, None)
                .stats
                .flagged
        );
    }
}
