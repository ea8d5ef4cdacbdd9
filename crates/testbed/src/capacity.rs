//! Measured capacity: what a shaped link really drains while its queue is backlogged.
//!
//! An emulated link on a VM drains less than it was told (the shaper's timer fires late; one
//! machine drained 96.2 Mbit/s when told 100), so ground truth that trusts the configured rate
//! is off by that much. The testbed floods each shaped link once when it comes up and reads the
//! shaper's own counters: over the longest stretch in which the queue never ran empty, the bytes
//! it sent divided by the time is the rate the link really has. The same fold over a run's
//! samples ([`drain_rate`]) shows what the link drained whenever it had backlog.

use crate::counters::NetlinkStats;
use crate::generator::{CrossTraffic, Endpoints, GenOptions};
use crate::pattern::CrossPattern;
use crate::topology::{Role, Testbed};
use crate::truth::TruthSampler;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A shaper whose measured rate is further than this from its configured rate is reported.
pub const SHORTFALL_WARN: f64 = 0.02;
/// The flood offers this much more than the configured rate, so the queue never runs empty. Not
/// more: offered 1.5 × C, the flood kept the CPUs busier than the flows it stands for, and this
/// VM's shaper drains more when they are busy (2-4% above a 1.25 × C UDP flow at 100 Mbit/s).
const FLOOD_FACTOR: f64 = 1.25;
/// How long the flood runs before the counters count (the queue builds), and then how long.
const FLOOD_WARMUP: Duration = Duration::from_millis(100);
const FLOOD_MEASURE: Duration = Duration::from_millis(1200);
/// Intervals slower than this share of the median interval are left out of the flood's
/// reading: a long stall of the sender (a busy machine) can empty the queue between two
/// readings that both saw a backlog (one flood on a loaded CI run read 18.4 Mbit/s on a
/// 20 Mbit/s link that drained 20.0 before and after). Only long stalls: at 0.97 the short
/// ones every flow also meets were left out too, and the flood read ~2% above what flows get.
const STALL_SHARE: f64 = 0.9;
/// How often the shaper's counters are read during the flood. Seldom: a CPU that keeps reading
/// never idles, which makes the shaper's timer punctual and the reading optimistic (polled every
/// 2 ms the flood read 2-3% above what a UDP flow got at 100-200 Mbit/s; every 25 ms, ~1%).
const POLL: Duration = Duration::from_millis(100);
/// A flood during which some CPU lost more than this share of the time to the hypervisor is
/// run again (up to [`FLOOD_ROUNDS`] in all), each time after waiting (at most
/// [`QUIET_WAIT`]) for a [`QUIET_WINDOW`] in which no CPU lost a tick, and the least
/// disturbed reading is kept: while a vCPU is held off, the shaper's timer does not fire and
/// the flood reads the link low (one CI run read 17.0 Mbit/s on a 20 Mbit/s link while its
/// two CPUs lost 28% and 19% of the time; a tracking bench read 82.6 on 100 Mbit/s, and its
/// whole truth with it). Two floods and 1.5 s at most: every testbed floods at start, and on a
/// host that steals all the time every one of the suite's dozens of testbeds pays it.
const REFLOOD_SHARE: f64 = 0.02;
const FLOOD_ROUNDS: usize = 2;
const QUIET_WAIT: Duration = Duration::from_millis(1500);
const QUIET_WINDOW: Duration = Duration::from_millis(500);

/// The shaper's counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct QueueSample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub t_ns: u64,
    /// Bytes the shaper has sent (cumulative).
    pub sent_bytes: u64,
    /// Bytes waiting in its queue.
    pub backlog_bytes: u64,
}

/// What a link drained while backlogged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Drain {
    pub bps: f64,
    /// Total time the queue was backlogged over the intervals counted.
    pub backlogged_s: f64,
    /// Intervals counted.
    pub intervals: usize,
}

/// Consecutive samples whose two ends both saw a backlog: the queue had work throughout, as
/// far as the samples can tell.
fn busy_intervals(
    samples: &[QueueSample],
) -> impl Iterator<Item = (QueueSample, QueueSample)> + '_ {
    samples
        .windows(2)
        .filter(|w| w[0].backlog_bytes > 0 && w[1].backlog_bytes > 0 && w[1].t_ns > w[0].t_ns)
        .map(|w| (w[0], w[1]))
}

/// Bytes per ns over one interval.
fn interval_rate((a, b): &(QueueSample, QueueSample)) -> f64 {
    b.sent_bytes.saturating_sub(a.sent_bytes) as f64 / (b.t_ns - a.t_ns) as f64
}

/// Σ bytes sent / Σ time over `intervals`; `None` if there are none.
fn fold(intervals: impl Iterator<Item = (QueueSample, QueueSample)>) -> Option<Drain> {
    let (mut bytes, mut ns, mut n) = (0u64, 0u64, 0usize);
    for (a, b) in intervals {
        bytes += b.sent_bytes.saturating_sub(a.sent_bytes);
        ns += b.t_ns - a.t_ns;
        n += 1;
    }
    (n > 0).then(|| Drain {
        bps: bytes as f64 * 8e9 / ns as f64,
        backlogged_s: ns as f64 / 1e9,
        intervals: n,
    })
}

/// The drain rate over every interval whose two ends both saw a backlog: Σ bytes sent / Σ time.
/// `None` if no interval qualifies.
pub fn drain_rate(samples: &[QueueSample]) -> Option<Drain> {
    fold(busy_intervals(samples))
}

/// [`drain_rate`] without the intervals in which the queue may have run empty unseen: those
/// slower than [`STALL_SHARE`] of the median backlogged interval.
pub fn steady_drain_rate(samples: &[QueueSample]) -> Option<Drain> {
    let mut rates: Vec<f64> = busy_intervals(samples).map(|i| interval_rate(&i)).collect();
    rates.sort_by(f64::total_cmp);
    let median = *rates.get(rates.len() / 2)?;
    fold(busy_intervals(samples).filter(|i| interval_rate(i) >= STALL_SHARE * median))
}

/// A link's capacity: what it was told and what it was measured to drain.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkCapacity {
    pub configured_bps: f64,
    /// `None` when measurement was switched off; then the configured rate stands in.
    pub measured_bps: Option<f64>,
    /// How long the flood kept the queue backlogged while it was measured.
    pub backlogged_s: f64,
    /// The flood could not keep the shaper backlogged: it shapes faster than a user-space sender
    /// here, so it is not the path's bottleneck and the configured rate stands in.
    #[serde(default)]
    pub flood_too_slow: bool,
    /// The largest share of the flood's time the hypervisor took from any one CPU (0 on a quiet
    /// host, or where `/proc/stat` has no steal). A link read while its host stole reads low by
    /// up to about this share: see [`LinkCapacity::steal_corrected_bps`].
    #[serde(default)]
    pub stolen_share: f64,
}

impl LinkCapacity {
    pub fn configured(bps: f64) -> Self {
        LinkCapacity {
            configured_bps: bps,
            measured_bps: None,
            backlogged_s: 0.0,
            flood_too_slow: false,
            stolen_share: 0.0,
        }
    }

    /// The highest the link's rate can be, given the reading and the steal during it: the
    /// measured rate over the share of time the host left the CPUs running. Equal to
    /// [`LinkCapacity::bps`] on a quiet host.
    pub fn steal_corrected_bps(&self) -> f64 {
        self.bps() / (1.0 - self.stolen_share.clamp(0.0, 0.9))
    }

    /// The capacity the truth uses: measured where there is a measurement.
    pub fn bps(&self) -> f64 {
        self.measured_bps.unwrap_or(self.configured_bps)
    }

    /// (measured − configured) / configured; 0 when not measured.
    pub fn deviation(&self) -> f64 {
        self.measured_bps
            .map_or(0.0, |m| (m - self.configured_bps) / self.configured_bps)
    }

    /// Whether the shaper missed its configured rate by more than [`SHORTFALL_WARN`].
    pub fn off_target(&self) -> bool {
        self.deviation().abs() > SHORTFALL_WARN
    }
}

/// Where to read a shaper: the namespace and the device whose root qdisc it is.
#[derive(Debug, Clone)]
pub struct ShaperAt {
    pub ns: String,
    pub dev: String,
}

/// Reads one shaper's counters.
pub struct ShaperReader {
    nl: NetlinkStats,
    ifindex: u32,
}

impl ShaperReader {
    pub fn open(at: &ShaperAt) -> Result<Self, Error> {
        let mut nl = NetlinkStats::open_in(&at.ns)?;
        let ifindex = nl
            .links()?
            .into_iter()
            .find(|(n, _)| *n == at.dev)
            .map(|(_, c)| c.index)
            .ok_or_else(|| Error::Counters(format!("no link {} in {}", at.dev, at.ns)))?;
        Ok(ShaperReader { nl, ifindex })
    }

    pub fn sample(&mut self) -> Result<QueueSample, Error> {
        let t0 = crate::clock::now_ns();
        let q = self
            .nl
            .root_qdiscs()?
            .into_iter()
            .find(|q| q.ifindex == self.ifindex)
            .ok_or_else(|| Error::Counters("no root qdisc on the shaped link".into()))?;
        let t1 = crate::clock::now_ns();
        Ok(QueueSample {
            t_ns: t0 + (t1 - t0) / 2,
            sent_bytes: q.bytes,
            backlog_bytes: q.backlog as u64,
        })
    }
}

/// Flood the shaper at `at` with UDP sent along `flood` (which must cross it) at 1.25× the
/// configured rate for about a second, and measure what it drains while backlogged. A flood the
/// host stole more than [`REFLOOD_SHARE`] from is run again after a quiet moment (at most
/// [`FLOOD_ROUNDS`] in all) and the least disturbed reading kept.
pub fn measure(
    at: &ShaperAt,
    flood: &Endpoints,
    configured_bps: u64,
) -> Result<LinkCapacity, Error> {
    let mut reader = ShaperReader::open(at)?;
    let mut best: Option<LinkCapacity> = None;
    for round in 0..FLOOD_ROUNDS {
        if round > 0 {
            wait_for_quiet();
        }
        let reading = flood_once(&mut reader, flood, configured_bps)?;
        if reading.flood_too_slow {
            return Ok(reading);
        }
        let calm = reading.stolen_share <= REFLOOD_SHARE;
        if best.is_none_or(|b| reading.stolen_share < b.stolen_share) {
            best = Some(reading);
        }
        if calm {
            break;
        }
    }
    Ok(best.expect("at least one round"))
}

/// Wait (at most [`QUIET_WAIT`]) until a [`QUIET_WINDOW`] passes in which no CPU lost a tick
/// of steal; at once where steal cannot be read.
fn wait_for_quiet() {
    let give_up = std::time::Instant::now() + QUIET_WAIT;
    while std::time::Instant::now() < give_up {
        let Some(before) = mgrp_clock::steal::StealSnapshot::take() else {
            return;
        };
        std::thread::sleep(QUIET_WINDOW);
        match before.elapsed() {
            Some(s) if s.max_cpu_s() > 0.0 => continue,
            _ => return,
        }
    }
}

/// One flood and its reading.
fn flood_once(
    reader: &mut ShaperReader,
    flood: &Endpoints,
    configured_bps: u64,
) -> Result<LinkCapacity, Error> {
    let rate = (configured_bps as f64 * FLOOD_FACTOR) as u64;
    let pattern = CrossPattern::parse(&format!("cbr:{rate}bit"))?;
    let total = FLOOD_WARMUP + FLOOD_MEASURE;
    // A flood sends above C without pause, so it stays under the normal scheduler whatever the
    // default: real-time, it would hold its CPU from every other task for the whole flood.
    let opts = GenOptions {
        max_duration: total + Duration::from_millis(100),
        realtime: false,
        ..Default::default()
    };
    let gen = CrossTraffic::start_between(flood, &pattern, &opts)?;
    std::thread::sleep(FLOOD_WARMUP);
    let steal = mgrp_clock::steal::StealSnapshot::take();
    let end = crate::clock::now_ns() + FLOOD_MEASURE.as_nanos() as u64;
    let mut samples = Vec::with_capacity(512);
    while crate::clock::now_ns() < end && samples.len() < 4096 {
        samples.push(reader.sample()?);
        std::thread::sleep(POLL);
    }
    let stolen_share = steal
        .and_then(|s| s.elapsed())
        .map_or(0.0, |s| s.max_share());
    let report = gen.stop()?;
    if report.sent_packets == 0 {
        return Err(Error::Setup(format!(
            "measuring capacity: the flood sent nothing ({} send errors) toward {} in {}",
            report.send_errors, flood.dst, flood.dst_ns
        )));
    }
    let Some(drain) = steady_drain_rate(&samples) else {
        return Ok(LinkCapacity {
            flood_too_slow: true,
            ..LinkCapacity::configured(configured_bps as f64)
        });
    };
    // Let the queue drain so whatever comes next starts on an empty link.
    let deadline = crate::clock::now_ns() + 2_000_000_000;
    while reader.sample()?.backlog_bytes > 0 && crate::clock::now_ns() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(LinkCapacity {
        configured_bps: configured_bps as f64,
        measured_bps: Some(drain.bps),
        backlogged_s: drain.backlogged_s,
        flood_too_slow: false,
        stolen_share,
    })
}

/// What a saturating flow (`pattern`, e.g. `cbr:125mbit` or `tcp:4`) from snd to rcv gets through
/// the default testbed's bottleneck: the measured flow's rate past it over the middle half of a
/// run of `secs` (start-up and drain left out).
pub fn saturating_flow(tb: &Testbed, pattern: &str, port: u16, secs: f64) -> Result<f64, Error> {
    saturating_flow_window(tb, pattern, port, secs).map(|w| w.fg_bps)
}

/// [`saturating_flow`]'s ground truth over the middle half of the flow: what it got through
/// (`fg_bps`) and what its sender offered (`offered_fg_bps`, short of the shaper's rate when the
/// sender itself is starved of CPU).
pub fn saturating_flow_window(
    tb: &Testbed,
    pattern: &str,
    port: u16,
    secs: f64,
) -> Result<crate::Bin, Error> {
    let sampler = TruthSampler::start(tb, Duration::from_millis(50))?;
    let ends = Endpoints {
        src_ns: tb.ns(Role::Snd),
        dst_ns: tb.ns(Role::Rcv),
        dst: std::net::SocketAddr::new(Role::Rcv.addr().parse().expect("valid address"), port),
    };
    // Saturating: under the normal scheduler, as the capacity flood.
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 1.0),
        realtime: false,
        ..Default::default()
    };
    let gen = CrossTraffic::start_between(&ends, &CrossPattern::parse(pattern)?, &opts)?;
    let start = gen.start_ns();
    std::thread::sleep(Duration::from_secs_f64(secs));
    gen.stop()?;
    let truth = sampler.stop()?;
    let at = |f: f64| start + (secs * f * 1e9) as u64;
    truth
        .window(at(0.25), at(0.75))
        .ok_or_else(|| Error::Counters("no ground truth over the flow".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_ms: u64, sent: u64, backlog: u64) -> QueueSample {
        QueueSample {
            t_ns: t_ms * 1_000_000,
            sent_bytes: sent,
            backlog_bytes: backlog,
        }
    }

    #[test]
    fn drain_counts_only_backlogged_intervals() {
        // 10 ms at 1000 B/ms backlogged, then an idle stretch at a lower rate, then backlog again.
        let v = vec![
            s(0, 0, 5000),
            s(10, 10_000, 4000),
            s(20, 12_000, 0),
            s(30, 13_000, 0),
            s(40, 14_000, 3000),
            s(50, 24_000, 3000),
        ];
        let d = drain_rate(&v).unwrap();
        assert_eq!(d.intervals, 2);
        assert!((d.bps - 8e6).abs() < 1e-6, "{d:?}");
        assert!((d.backlogged_s - 0.02).abs() < 1e-12);
    }

    #[test]
    fn a_stalled_interval_is_left_out() {
        // 1000 B/ms, except one interval in which the sender stalled and the queue ran dry
        // between two readings that both saw a backlog; and one a little slow, which stays.
        let v = vec![
            s(0, 0, 5000),
            s(10, 10_000, 5000),
            s(20, 19_500, 5000),
            s(30, 25_500, 3000),
            s(40, 36_000, 5000),
            s(50, 46_000, 5000),
        ];
        assert!(drain_rate(&v).unwrap().bps < 7.7e6);
        let d = steady_drain_rate(&v).unwrap();
        assert!((d.bps - 8e6).abs() < 1e-6, "{d:?}");
        assert_eq!(d.intervals, 4);
        assert!(steady_drain_rate(&[s(0, 0, 0), s(10, 100, 0)]).is_none());
    }

    #[test]
    fn no_backlog_no_drain() {
        assert!(drain_rate(&[s(0, 0, 0), s(10, 100, 0)]).is_none());
        assert!(drain_rate(&[]).is_none());
    }

    #[test]
    fn deviation_and_warning() {
        let c = LinkCapacity {
            configured_bps: 100e6,
            measured_bps: Some(96.2e6),
            backlogged_s: 0.4,
            flood_too_slow: false,
            stolen_share: 0.0,
        };
        assert!((c.deviation() + 0.038).abs() < 1e-9);
        assert_eq!(
            c.steal_corrected_bps(),
            96.2e6,
            "a quiet host's reading stands"
        );
        assert!(c.off_target());
        assert_eq!(c.bps(), 96.2e6);
        let ok = LinkCapacity {
            measured_bps: Some(99e6),
            ..c
        };
        assert!(!ok.off_target());
        assert_eq!(LinkCapacity::configured(20e6).bps(), 20e6);
        let stolen = LinkCapacity {
            measured_bps: Some(15e6),
            stolen_share: 0.25,
            ..c
        };
        assert!((stolen.steal_corrected_bps() - 20e6).abs() < 1e-6);
        let absurd = LinkCapacity {
            stolen_share: 3.0,
            ..stolen
        };
        assert!(absurd.steal_corrected_bps().is_finite());
    }
}
