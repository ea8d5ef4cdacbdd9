//! What happened to a train: per probe, when it left and when (if) it arrived; per train, the
//! stats the engine and the estimators judge it by.

use crate::hop::{HopReply, HopStats};
use crate::spec::TrainSpec;
use crate::time::{MonoNs, WallNs};
use serde::{Deserialize, Serialize};

/// The old default of the p99 gap rule, kept for callers that name it; a train is judged by
/// [`SPAN_TOLERANCE`] and [`WINDOW_TOLERANCE`] unless its spec sets `tolerance_ns`.
pub const DEFAULT_TOLERANCE_NS: u64 = 5_000;

/// A train whose departures stray from the plan enough to change what an estimator concludes
/// is flagged: over the whole train by more than 2% of its planned span (a SLoPS stream near A
/// is a few percent from it), or over any window of ⌈√n⌉ gaps — the trend tests' groups — by
/// more than 10% of the window's planned span. One probe late by 50 µs in a 100 µs-gap train
/// whose next probe leaves on time moves neither (the p99 gap rule flagged 27–30 of 30 such
/// trains on a VM whose disk interrupt lands on the pacer's CPU).
pub const SPAN_TOLERANCE: f64 = 0.02;
pub const WINDOW_TOLERANCE: f64 = 0.10;

/// Relative span errors of the departures against the plan: (whole train, worst window of
/// ⌈√n⌉ gaps). `departures` are (intended, actual) offsets in ns, in probe order.
pub fn span_errors(departures: &[(u64, u64)]) -> Option<(f64, f64)> {
    let n = departures.len();
    if n < 2 {
        return None;
    }
    let rel = |a: (u64, u64), b: (u64, u64)| {
        let planned = b.0.saturating_sub(a.0) as f64;
        let actual = b.1 as f64 - a.1 as f64;
        (planned > 0.0).then(|| (actual - planned).abs() / planned)
    };
    let whole = rel(departures[0], departures[n - 1])?;
    let w = ((n - 1) as f64).sqrt().ceil().max(1.0) as usize;
    let worst = (0..n - w)
        .filter_map(|i| rel(departures[i], departures[i + w]))
        .fold(0.0, f64::max);
    Some((whole, worst))
}

/// When the pacer sent one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendRecord {
    /// Monotonic clock just before the send call; `None` if the send failed.
    pub mono_ns: Option<MonoNs>,
    /// Wall clock stamped into the probe.
    pub real_ns: WallNs,
    /// Kernel TX software timestamp, where the kernel gives one.
    pub kernel_ns: Option<WallNs>,
}

/// One probe as the receiver reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub index: u16,
    /// UDP payload bytes received.
    pub size: u16,
    /// The receiver's kernel timestamp.
    pub rx_ns: WallNs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub index: u16,
    pub size: u16,
    /// Intended and actual departure, ns after the first probe's intended departure (sender's
    /// monotonic clock).
    pub intended_ns: u64,
    pub sent_ns: Option<u64>,
    /// Receiver's kernel timestamp and size seen, if it arrived.
    pub rx_ns: Option<WallNs>,
    pub rx_size: Option<u16>,
    /// Sender's wall-clock stamp carried in the probe (compare with `rx_ns` for one-way delay
    /// when both clocks are one, as in the testbed).
    pub tx_real_ns: WallNs,
    /// Kernel TX software timestamp: the actual departure, where available.
    pub tx_kernel_ns: Option<WallNs>,
    /// The ICMP error the path sent back for this probe (TTL expiry at a router, or
    /// unreachable), if one came and was tied to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<HopReply>,
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
        let q = |p: f64| crate::stats::quantile_sorted(&v, p);
        Some(Quantiles {
            n: v.len(),
            median: q(0.5)?,
            p99: q(0.99)?,
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
    /// The caller's p99 gap tolerance (`TrainSpec::tolerance_ns`), 0 when it set none.
    pub tolerance_ns: u64,
    /// |actual − planned| / planned span of the departures (kernel TX where every probe has a
    /// stamp, else the pacer's clock): over the whole train, and the worst window of ⌈√n⌉ gaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_error: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_span_error: Option<f64>,
    /// The departures strayed from the plan beyond [`SPAN_TOLERANCE`] or [`WINDOW_TOLERANCE`]
    /// (or the caller's p99 gap tolerance), or a send failed: analyse with the actual times or
    /// discard.
    pub flagged: bool,
    /// The receiver's report never came (peer gone or too slow): every probe counts as lost.
    pub report_missing: bool,
    /// The receiver cut its report short to stay within what it received from us.
    pub report_truncated: bool,
    /// CPU time the hypervisor took from this machine while the train was out: the most any
    /// one CPU lost, ms (`/proc/stat`, 10 ms ticks); `None` where it cannot be read. Covers
    /// the receiver's stamps too where it runs on the same machine (the testbed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stolen_ms: Option<f64>,
}

/// A train during which some CPU lost at least this much to the hypervisor is flagged: a
/// stalled vCPU sends late or stamps a batch of arrivals at once (2026-11-24: receive stamps
/// 7.7 ms apart for a 9.9 ms train, SLoPS streams near A read "rising" while the host stole
/// 5% of each CPU). One tick of `/proc/stat`; a quiet VM of this kind accrues one about every
/// 20 s per CPU, so ~0.5% of 50 ms trains are flagged for nothing.
pub const STOLEN_FLAG_MS: f64 = 10.0;

impl TrainStats {
    /// The host stole enough CPU while the train was out to distrust its times.
    pub fn stolen(&self) -> bool {
        self.stolen_ms.is_some_and(|ms| ms >= STOLEN_FLAG_MS)
    }

    /// Record the steal measured around the train; a stolen train is flagged.
    pub fn set_stolen_ms(&mut self, ms: f64) {
        self.stolen_ms = Some(ms);
        self.flagged |= self.stolen();
    }
}

/// Rider accounting of one train, for the estimator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainRiderStats {
    pub chunks: u32,
    pub bytes: u64,
    /// The host's traffic that would have crossed the path during the train and did not: what
    /// it sent while the train was out, less what of it (or of older held packets) left on the
    /// path beside the train; wire bytes. Estimators subtract its rate.
    pub competing_bytes: u64,
    /// Rider bytes that entered the buffer during the train (the seed's competing rule, which
    /// misses packets held past the train's end).
    #[serde(default)]
    pub in_window_bytes: u64,
    pub empty_probes: u32,
    /// Bytes of the probes that could carry a rider and left empty: the measurement's own
    /// cost (the seed's "probe (nopbk)" bytes).
    pub empty_bytes: u64,
    /// Padding left unused in the probes that carried riders: probe bytes too.
    #[serde(default)]
    pub spare_bytes: u64,
    pub standalone_fragments: u32,
    /// Probes an elastic train left out (it ended early: no rider was waiting for them), and
    /// their bytes: probe bytes not sent at all.
    #[serde(default)]
    pub skipped_probes: u32,
    #[serde(default)]
    pub skipped_bytes: u64,
    /// How long the train waited for riders before it started, ns.
    #[serde(default)]
    pub wait_ns: u64,
    /// What the host handed to the shim for the destination while the train was out (wire
    /// bytes): `competing_bytes` is this less what crossed the path beside the train.
    #[serde(default)]
    pub arrived_bytes: u64,
    /// What of the host's traffic (this or older) crossed the path beside the train, wire bytes.
    #[serde(default)]
    pub beside_bytes: u64,
    /// The host's rate to the destination over the 200 ms before the train ended (wire
    /// bytes/s), a window the train's end does not choose (every train since round 16;
    /// elastic trains only before).
    #[serde(default)]
    pub host_bytes_per_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainResult {
    pub train: u32,
    pub peer: String,
    /// The first probe's intended departure (to look up ground truth).
    pub start_mono_ns: MonoNs,
    pub probes: Vec<ProbeResult>,
    pub stats: TrainStats,
    /// What riders the train carried, if riders are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<TrainRiderStats>,
    /// ICMP errors read for this train, present when the train had TTL-limited probes or any
    /// error came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<HopStats>,
}

impl TrainResult {
    /// Put together what was asked, what the pacer did and what the receiver reported
    /// (`None`: no report came). Arrivals of unknown, unsent or already seen probes are ignored.
    pub fn assemble(
        train: u32,
        peer: String,
        spec: &TrainSpec,
        start_mono_ns: MonoNs,
        sends: &[SendRecord],
        report: Option<(&[Arrival], bool)>,
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
                    sent_ns: s.mono_ns.map(|m| m.since(start_mono_ns)),
                    rx_ns: None,
                    rx_size: None,
                    tx_real_ns: s.real_ns,
                    tx_kernel_ns: s.kernel_ns,
                    hop: None,
                }
            })
            .collect();
        for a in report.map_or(&[][..], |(r, _)| r) {
            if let Some(p) = probes.get_mut(a.index as usize) {
                if p.sent_ns.is_some() && p.rx_ns.is_none() {
                    p.rx_ns = Some(a.rx_ns);
                    p.rx_size = Some(a.size);
                }
            }
        }
        let sent = probes.iter().filter(|p| p.sent_ns.is_some()).count();
        let received = probes.iter().filter(|p| p.rx_ns.is_some()).count();
        let (mut gap_err, mut tx_gap_err, mut rx_gap_err) = (Vec::new(), Vec::new(), Vec::new());
        let err = |a: u64, b: u64, intended: f64| (b as f64 - a as f64 - intended).abs();
        for w in probes.windows(2) {
            let intended = (w[1].intended_ns - w[0].intended_ns) as f64;
            if let (Some(a), Some(b)) = (w[0].sent_ns, w[1].sent_ns) {
                gap_err.push(err(a, b, intended));
            }
            if let (Some(a), Some(b)) = (w[0].tx_kernel_ns, w[1].tx_kernel_ns) {
                tx_gap_err.push(err(a.0, b.0, intended));
            }
            if let (Some(a), Some(b)) = (w[0].rx_ns, w[1].rx_ns) {
                rx_gap_err.push(err(a.0, b.0, intended));
            }
        }
        let gap_error = Quantiles::of(gap_err);
        let tx_gap_error = Quantiles::of(tx_gap_err);
        // Judge by the actual departures (kernel) where known, else by the pacer's clock.
        let judged = tx_gap_error.or(gap_error);
        let kernel: Option<Vec<(u64, u64)>> = probes
            .iter()
            .filter(|p| p.sent_ns.is_some())
            .map(|p| p.tx_kernel_ns.map(|t| (p.intended_ns, t.0)))
            .collect();
        let departures = kernel.unwrap_or_else(|| {
            probes
                .iter()
                .filter_map(|p| Some((p.intended_ns, p.sent_ns?)))
                .collect()
        });
        let spans = span_errors(&departures);
        let strayed =
            spans.is_some_and(|(whole, win)| whole > SPAN_TOLERANCE || win > WINDOW_TOLERANCE);
        let p99_over = spec
            .tolerance_ns
            .is_some_and(|t| judged.is_some_and(|q| q.p99 > t as f64));
        let first = probes.iter().find_map(|p| p.sent_ns);
        let last = probes.iter().rev().find_map(|p| p.sent_ns);
        TrainResult {
            train,
            peer,
            start_mono_ns,
            riders: None,
            hops: None,
            stats: TrainStats {
                sent,
                received,
                lost: sent - received,
                send_errors: probes.len() - sent,
                planned_ns: spec.planned_ns(),
                actual_ns: first.zip(last).map(|(a, b)| b - a),
                flagged: strayed || p99_over || sent < probes.len(),
                gap_error,
                tx_gap_error,
                rx_gap_error: Quantiles::of(rx_gap_err),
                tolerance_ns: spec.tolerance_ns.unwrap_or(0),
                span_error: spans.map(|s| s.0),
                window_span_error: spans.map(|s| s.1),
                report_missing: report.is_none(),
                report_truncated: report.is_some_and(|(_, t)| t),
                stolen_ms: None,
            },
            probes,
        }
    }

    /// The last `skipped` probes were left out on purpose (an elastic train ended early): they
    /// are neither send errors nor a reason to flag the train, whose probes kept their times.
    pub fn shortened(&mut self, skipped: usize) {
        let s = &mut self.stats;
        s.send_errors = s.send_errors.saturating_sub(skipped);
        let strayed = s.span_error.is_some_and(|w| w > SPAN_TOLERANCE)
            || s.window_span_error.is_some_and(|w| w > WINDOW_TOLERANCE);
        let judged = s.tx_gap_error.or(s.gap_error);
        let p99_over = s.tolerance_ns > 0 && judged.is_some_and(|q| q.p99 > s.tolerance_ns as f64);
        s.flagged = strayed || p99_over || s.send_errors > 0 || s.stolen();
    }

    /// Receive rate over the train: bits of probes 2..n over the first-to-last receive time.
    pub fn rx_rate_bps(&self) -> Option<f64> {
        let rx: Vec<&ProbeResult> = self.probes.iter().filter(|p| p.rx_ns.is_some()).collect();
        let (first, last) = (rx.first()?, rx.last()?);
        let span = last.rx_ns?.0.checked_sub(first.rx_ns?.0)?;
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
        Some(last.since(first))
    }

    /// Relative one-way delays (receive − send, ns, arbitrary offset) of the received probes,
    /// with their indices.
    pub fn owds(&self) -> Vec<(usize, f64)> {
        self.probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.rx_ns?.0 as f64 - p.sent_ns? as f64)))
            .collect()
    }

    /// Consecutive arrivals closer together than half the later probe's service time at
    /// `capacity_bps`: closer than the bottleneck can deliver them, so something after it (a
    /// receiver's CPU held off, then stamping a batch) compressed them. A stall that batched
    /// stamps leaves this mark; one that did not touch the arrivals leaves none.
    pub fn compressed_pairs(&self, capacity_bps: f64) -> usize {
        if capacity_bps.is_nan() || capacity_bps <= 0.0 {
            return 0;
        }
        let mut rx = self
            .probes
            .iter()
            .filter_map(|p| Some((p.rx_ns?.0, p.rx_size.unwrap_or(p.size))));
        let Some(mut prev) = rx.next() else {
            return 0;
        };
        rx.filter(|&(at, size)| {
            let service_ns = crate::wire_bits(size) * 1e9 / capacity_bps;
            let close = (at.saturating_sub(prev.0) as f64) < 0.5 * service_ns;
            prev = (at, size);
            close
        })
        .count()
    }

    /// Probes sent and not received.
    pub fn lost(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.sent_ns.is_some() && p.rx_ns.is_none())
            .count()
    }

    /// Rider bytes this train carried that would have crossed the path during it anyway (seed
    /// 000 §4.5.2): the host's own load moved into the probes. 0 without riders.
    pub fn competing_bytes(&self) -> u64 {
        self.riders.map_or(0, |r| r.competing_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(start: MonoNs, offsets: &[u64]) -> Vec<SendRecord> {
        offsets
            .iter()
            .map(|o| SendRecord {
                mono_ns: Some(start.add_ns(*o)),
                real_ns: WallNs(5),
                kernel_ns: None,
            })
            .collect()
    }

    fn arrival(index: u16, rx_ns: u64) -> Arrival {
        Arrival {
            index,
            size: 1000,
            rx_ns: WallNs(rx_ns),
        }
    }

    #[test]
    fn assemble_counts_losses_and_gap_errors() {
        let spec = TrainSpec::uniform(4, 1000, 100_000);
        let start = MonoNs(1_000_000);
        let sends = sends(start, &[0, 100_200, 200_000, 300_100]);
        let rx = vec![
            arrival(0, 10_000_000),
            arrival(1, 10_100_000),
            arrival(3, 10_300_500),
            arrival(3, 99), // duplicate ignored
            arrival(9, 99), // unknown index ignored
        ];
        let r = TrainResult::assemble(1, "peer".into(), &spec, start, &sends, Some((&rx, false)));
        assert_eq!((r.stats.sent, r.stats.received, r.stats.lost), (4, 3, 1));
        assert_eq!(r.lost(), 1);
        let g = r.stats.gap_error.unwrap();
        assert_eq!(g.n, 3);
        assert_eq!(g.max, 200.0);
        assert_eq!(g.median, 200.0);
        assert_eq!(r.stats.actual_ns, Some(300_100));
        assert!(!r.stats.flagged);
        assert_eq!(r.dispersion_ns(), Some(300_500));
        assert_eq!(r.probes[3].rx_ns, Some(WallNs(10_300_500)));
        let rate = r.rx_rate_bps().unwrap();
        assert!((rate - 2.0 * 8000.0 / 300_500e-9).abs() < 1.0);
        assert_eq!(r.owds()[1], (1, 10_100_000.0 - 100_200.0));
        assert_eq!(r.competing_bytes(), 0);

        let missing = TrainResult::assemble(2, "peer".into(), &spec, start, &sends, None);
        assert!(missing.stats.report_missing);
        assert_eq!(missing.stats.lost, 4);

        // One probe 20 µs late, the next on time: the rates over the train and over its
        // windows hold (10% at most), so it is not flagged — unless the caller asked for the
        // p99 gap rule.
        let late = self::sends(start, &[0, 120_000, 200_000, 300_000]);
        let r = TrainResult::assemble(3, "p".into(), &spec, start, &late, None);
        assert!(!r.stats.flagged, "{:?}", r.stats);
        assert_eq!(r.stats.window_span_error, Some(0.1));
        let strict = TrainSpec {
            tolerance_ns: Some(5_000),
            ..spec.clone()
        };
        assert!(
            TrainResult::assemble(3, "p".into(), &strict, start, &late, None)
                .stats
                .flagged
        );
        // Sent 20% slow throughout: the rate differs from the plan.
        let slow = self::sends(start, &[0, 120_000, 240_000, 360_000]);
        let r = TrainResult::assemble(3, "p".into(), &spec, start, &slow, None);
        assert!(r.stats.flagged);
        assert!((r.stats.span_error.unwrap() - 0.2).abs() < 1e-9);
        // A failed send flags the train and is not counted as sent.
        let mut failed = self::sends(start, &[0, 100_000, 200_000, 300_000]);
        failed[2].mono_ns = None;
        let r = TrainResult::assemble(4, "p".into(), &spec, start, &failed, Some((&rx, true)));
        assert_eq!((r.stats.sent, r.stats.send_errors), (3, 1));
        assert!(r.stats.flagged && r.stats.report_truncated);
    }

    /// 1000-byte probes take 422 µs each at 20 Mbit/s (1054 bytes on the wire): arrivals that
    /// far apart or more are what the bottleneck delivers; a receiver that stamps a batch after
    /// a stall puts them microseconds apart.
    #[test]
    fn arrivals_closer_than_the_bottleneck_delivers_are_counted() {
        let spec = TrainSpec::uniform(6, 1000, 500_000);
        let start = MonoNs(0);
        let sent = sends(
            start,
            &[0, 500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000],
        );
        let assemble = |rx: &[u64]| {
            let a: Vec<Arrival> = rx
                .iter()
                .enumerate()
                .map(|(i, t)| arrival(i as u16, *t))
                .collect();
            TrainResult::assemble(1, "p".into(), &spec, start, &sent, Some((&a, false)))
        };
        // Spaced by the queue (422 µs apart: back to back at the bottleneck) or by the sender.
        let paced = assemble(&[0, 500_000, 922_000, 1_344_000, 1_900_000, 2_500_000]);
        assert_eq!(paced.compressed_pairs(20e6), 0);
        // The last four stamped together after a 1.5 ms stall.
        let batched = assemble(&[0, 500_000, 2_600_000, 2_603_000, 2_605_000, 2_608_000]);
        assert_eq!(batched.compressed_pairs(20e6), 3);
        // A faster bottleneck delivers them closer: 2–3 µs apart is still too close at 1 Gbit/s
        // (8.4 µs a probe), 422 µs is not.
        assert_eq!(batched.compressed_pairs(1e9), 3);
        assert_eq!(paced.compressed_pairs(1e9), 0);
        // A lost probe between two arrivals: the pair is the ones that arrived.
        let mut lost = assemble(&[0, 500_000, 922_000, 1_344_000, 1_900_000, 2_500_000]);
        lost.probes[2].rx_ns = None;
        assert_eq!(lost.compressed_pairs(20e6), 0);
        assert_eq!(paced.compressed_pairs(0.0), 0);
        assert_eq!(paced.compressed_pairs(f64::NAN), 0);
    }

    /// The pacing bench's case: a 100 µs-gap train of 100 probes with one probe 60 µs late (an
    /// interrupt on the pacer's CPU) is not flagged; a 5-probe stall (the pacer preempted for
    /// 500 µs, then catching up) is.
    #[test]
    fn flag_means_the_rates_strayed() {
        let spec = TrainSpec::uniform(100, 1000, 100_000);
        let start = MonoNs(0);
        let mut t: Vec<u64> = (0..100).map(|i| i * 100_000).collect();
        t[40] += 60_000;
        let r = TrainResult::assemble(1, "p".into(), &spec, start, &sends(start, &t), None);
        assert!(!r.stats.flagged, "{:?}", r.stats);
        assert!(r.stats.gap_error.unwrap().max >= 60_000.0);
        for (i, x) in t.iter_mut().enumerate().skip(40).take(5) {
            *x = 4_500_000 + (i as u64 - 40) * 1_000;
        }
        let r = TrainResult::assemble(2, "p".into(), &spec, start, &sends(start, &t), None);
        assert!(r.stats.flagged, "{:?}", r.stats);
        assert_eq!(span_errors(&[(0, 0)]), None);
    }

    /// An elastic train that ended after 40 of 100 probes is neither flagged nor counted as
    /// send errors once the engine says it was shortened; a real send failure still is.
    #[test]
    fn a_shortened_train_is_not_flagged() {
        let spec = TrainSpec::uniform(100, 1000, 100_000);
        let start = MonoNs(0);
        let t: Vec<u64> = (0..100).map(|i| i * 100_000).collect();
        let mut s = sends(start, &t);
        for x in s.iter_mut().skip(40) {
            x.mono_ns = None;
        }
        let mut r = TrainResult::assemble(1, "p".into(), &spec, start, &s, None);
        assert!(r.stats.flagged && r.stats.send_errors == 60);
        r.shortened(60);
        assert!(!r.stats.flagged, "{:?}", r.stats);
        assert_eq!(r.stats.send_errors, 0);
        s[10].mono_ns = None;
        let mut r = TrainResult::assemble(2, "p".into(), &spec, start, &s, None);
        r.shortened(60);
        assert!(r.stats.flagged, "one probe in the middle failed");
    }

    #[test]
    fn hop_replies_are_optional_in_json_both_ways() {
        let spec = TrainSpec::uniform(2, 64, 1000);
        let start = MonoNs(1_000);
        let mut r =
            TrainResult::assemble(1, "p".into(), &spec, start, &sends(start, &[0, 1000]), None);
        // A result without hops writes neither field, so old readers see what they saw.
        let old = serde_json::to_string(&r).unwrap();
        assert!(!old.contains("\"hop"), "{old}");
        let back: TrainResult = serde_json::from_str(&old).unwrap();
        assert_eq!(back, r);
        r.probes[0].hop = Some(crate::HopReply {
            from: "198.18.0.1".parse().unwrap(),
            icmp_type: 11,
            icmp_code: 0,
            rx_mono_ns: MonoNs(2_000),
            rx_kernel_ns: None,
            rtt_ns: 1_000,
            clock: crate::HopClock::User,
            matched_by: crate::MatchRule::Header,
        });
        r.hops = Some(crate::HopStats {
            matched: 1,
            silent: 1,
            ..Default::default()
        });
        let new = serde_json::to_string(&r).unwrap();
        assert!(
            new.contains(r#""hop":{"from":"198.18.0.1","icmp_type":11"#),
            "{new}"
        );
        assert!(
            new.contains(r#""clock":"user","matched_by":"header""#),
            "{new}"
        );
        assert_eq!(serde_json::from_str::<TrainResult>(&new).unwrap(), r);
    }
}
