//! Ground truth from the bottleneck's counters.
//!
//! A sampler reads, every interval, the bottleneck qdisc on r1 (bytes sent, drops, backlog) and
//! r2's per-link transmit counters toward rcv and xrcv (which split what left the bottleneck into
//! measured flow and cross traffic). Rates over any window come from the cumulative counters,
//! linearly interpolated at the window's edges. All byte counts include the 14-byte Ethernet
//! header, the unit the shaper charges, so capacity and rates are directly comparable.

use crate::capacity::LinkCapacity;
use crate::counters::{LinkCounters, NetlinkStats, QdiscCounters};
use crate::topology::{Role, Testbed};
use crate::Error;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A sampler keeps at most this many samples (a day at 100 ms); older ones are dropped.
pub const MAX_SAMPLES: usize = 864_000;

/// Cumulative counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub t_ns: u64,
    /// Bytes and packets the bottleneck qdisc has sent.
    pub sent_bytes: u64,
    pub sent_packets: u64,
    pub drops: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
    /// Bytes that left r2 toward xrcv (cross traffic past the bottleneck).
    pub cross_bytes: u64,
    /// Bytes that left r2 toward rcv (the measured flow past the bottleneck).
    pub fg_bytes: u64,
    /// Bytes r1 received from xsnd (cross traffic offered to the bottleneck).
    pub offered_cross_bytes: u64,
    /// Bytes r1 received from snd (measured traffic offered to the bottleneck).
    pub offered_fg_bytes: u64,
}

/// Ground truth over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bin {
    /// Window edges, seconds since the truth's origin.
    pub start_s: f64,
    pub end_s: f64,
    /// The capacity the shaper was measured to drain (A is computed from it).
    pub capacity_bps: f64,
    /// The capacity it was told.
    pub configured_capacity_bps: f64,
    /// Cross traffic that left the bottleneck, per second of window.
    pub cross_bps: f64,
    /// Available bandwidth A = max(0, C − cross).
    pub avail_bps: f64,
    /// Measured flow that left the bottleneck.
    pub fg_bps: f64,
    /// Everything the bottleneck sent (≤ C).
    pub total_bps: f64,
    pub offered_cross_bps: f64,
    pub offered_fg_bps: f64,
    pub cross_bytes: f64,
    pub drops: f64,
    /// Queue backlog at the window's end.
    pub backlog_bytes: u64,
}

/// A series of samples and what it means.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// Measured capacity (the configured one where measurement was off).
    pub capacity_bps: f64,
    pub configured_capacity_bps: f64,
    /// CLOCK_MONOTONIC ns that `start_s`/`end_s` of bins count from.
    pub origin_ns: u64,
    pub samples: Vec<Sample>,
}

impl Truth {
    /// Counters interpolated at `t_ns` (clamped to the sampled span).
    fn at(&self, t_ns: u64) -> Option<Sample> {
        let s = &self.samples;
        let (first, last) = (s.first()?, s.last()?);
        if t_ns <= first.t_ns {
            return Some(*first);
        }
        if t_ns >= last.t_ns {
            return Some(*last);
        }
        let i = s.partition_point(|x| x.t_ns <= t_ns);
        let (a, b) = (&s[i - 1], &s[i]);
        let f = (t_ns - a.t_ns) as f64 / (b.t_ns - a.t_ns).max(1) as f64;
        let lerp = |x: u64, y: u64| (x as f64 + (y as f64 - x as f64) * f).round() as u64;
        Some(Sample {
            t_ns,
            sent_bytes: lerp(a.sent_bytes, b.sent_bytes),
            sent_packets: lerp(a.sent_packets, b.sent_packets),
            drops: lerp(a.drops, b.drops),
            backlog_bytes: b.backlog_bytes,
            backlog_packets: b.backlog_packets,
            cross_bytes: lerp(a.cross_bytes, b.cross_bytes),
            fg_bytes: lerp(a.fg_bytes, b.fg_bytes),
            offered_cross_bytes: lerp(a.offered_cross_bytes, b.offered_cross_bytes),
            offered_fg_bytes: lerp(a.offered_fg_bytes, b.offered_fg_bytes),
        })
    }

    /// The time of the sample nearest to `t_ns`. Windows whose edges are samples need no
    /// interpolation, which matters for bursty traffic (bursts are not spread evenly between
    /// samples).
    pub fn nearest_sample_ns(&self, t_ns: u64) -> Option<u64> {
        self.samples
            .iter()
            .map(|s| s.t_ns)
            .min_by_key(|t| t.abs_diff(t_ns))
    }

    /// Ground truth over [from_ns, to_ns] (CLOCK_MONOTONIC), e.g. an estimate's own window.
    /// Counters are interpolated linearly between samples at the edges.
    pub fn window(&self, from_ns: u64, to_ns: u64) -> Option<Bin> {
        let (a, b) = (self.at(from_ns)?, self.at(to_ns)?);
        let dt = b.t_ns.checked_sub(a.t_ns).filter(|d| *d > 0)? as f64 / 1e9;
        let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 * 8.0 / dt;
        let cross = rate(a.cross_bytes, b.cross_bytes);
        Some(Bin {
            start_s: a.t_ns.saturating_sub(self.origin_ns) as f64 / 1e9,
            end_s: b.t_ns.saturating_sub(self.origin_ns) as f64 / 1e9,
            capacity_bps: self.capacity_bps,
            configured_capacity_bps: self.configured_capacity_bps,
            cross_bps: cross,
            avail_bps: (self.capacity_bps - cross).max(0.0),
            fg_bps: rate(a.fg_bytes, b.fg_bytes),
            total_bps: rate(a.sent_bytes, b.sent_bytes),
            offered_cross_bps: rate(a.offered_cross_bytes, b.offered_cross_bytes),
            offered_fg_bps: rate(a.offered_fg_bytes, b.offered_fg_bytes),
            cross_bytes: b.cross_bytes.saturating_sub(a.cross_bytes) as f64,
            drops: b.drops.saturating_sub(a.drops) as f64,
            backlog_bytes: b.backlog_bytes,
        })
    }

    /// What the bottleneck drained over the sampled intervals in which it had a backlog at both
    /// ends (less long stalls): a second reading of its capacity, from the run itself — when the
    /// run kept it backlogged (see `backlogged_s`); a queue that comes and goes empties between
    /// two samples that both saw it, and then this is only its load.
    pub fn drain(&self) -> Option<crate::capacity::Drain> {
        let q: Vec<_> = self
            .samples
            .iter()
            .map(|s| crate::capacity::QueueSample {
                t_ns: s.t_ns,
                sent_bytes: s.sent_bytes,
                backlog_bytes: s.backlog_bytes,
            })
            .collect();
        crate::capacity::steady_drain_rate(&q)
    }

    /// Consecutive bins of `bin` length from the origin to the last sample.
    pub fn bins(&self, bin: Duration) -> Vec<Bin> {
        let step = bin.as_nanos().max(1) as u64;
        let Some(last) = self.samples.last() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut t = self.origin_ns;
        while t + step <= last.t_ns {
            out.extend(self.window(t, t + step));
            t += step;
        }
        out
    }
}

/// A thread that takes a sample every `interval` until stopped, keeping the last
/// [`MAX_SAMPLES`]: the ground-truth samplers of the default path and of topologies.
pub(crate) struct Periodic<S> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), Error>>>,
    samples: Arc<Mutex<Vec<S>>>,
}

impl<S: Clone + Send + 'static> Periodic<S> {
    /// `first` was taken at `first_ns`; the next samples come from `take` every `interval`.
    pub(crate) fn start(
        name: &str,
        first: S,
        first_ns: u64,
        interval: Duration,
        mut take: impl FnMut() -> Result<S, Error> + Send + 'static,
    ) -> Result<Self, Error> {
        if interval < Duration::from_millis(1) {
            return Err(Error::BadInput(
                "sampling interval must be at least 1ms".into(),
            ));
        }
        let samples = Arc::new(Mutex::new(vec![first]));
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, samples2) = (stop.clone(), samples.clone());
        let step = interval.as_nanos() as u64;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                crate::clock::tighten_timer_slack();
                crate::clock::cpu::avoid_pacer_cpu();
                let mut next = first_ns + step;
                while !stop2.load(Ordering::Relaxed) {
                    crate::clock::sleep_until(next);
                    next += step;
                    let s = take()?;
                    let mut v = samples2.lock().expect("sampler lock");
                    if v.len() >= MAX_SAMPLES {
                        v.drain(..MAX_SAMPLES / 10);
                    }
                    v.push(s);
                }
                Ok(())
            })
            .map_err(|e| Error::Counters(format!("spawn sampler: {e}")))?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
            samples,
        })
    }

    pub(crate) fn samples(&self) -> Vec<S> {
        self.samples.lock().expect("sampler lock").clone()
    }

    /// Stop sampling; the error that ended it early, if one did.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(h) => h
                .join()
                .map_err(|_| Error::Counters("sampler panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl<S> Drop for Periodic<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// Reads the counters of a testbed on a fixed period in a background thread.
pub struct TruthSampler {
    periodic: Periodic<Sample>,
    capacity: LinkCapacity,
    origin_ns: u64,
}

/// Counter readers for one testbed: r1's bottleneck and ingress links, r2's egress links.
pub struct CounterSet {
    r1: NetlinkStats,
    r2: NetlinkStats,
    bottleneck_ifindex: u32,
}

impl CounterSet {
    pub fn open(tb: &Testbed) -> Result<Self, Error> {
        let mut r1 = NetlinkStats::open_in(&tb.ns(Role::R1))?;
        let r2 = NetlinkStats::open_in(&tb.ns(Role::R2))?;
        let bottleneck_ifindex = r1
            .links()?
            .into_iter()
            .find(|(n, _)| n == Testbed::BOTTLENECK_DEV)
            .map(|(_, c)| c.index)
            .ok_or_else(|| Error::Counters("bottleneck link r2 missing in r1".into()))?;
        Ok(CounterSet {
            r1,
            r2,
            bottleneck_ifindex,
        })
    }

    /// The bottleneck's root qdisc counters.
    pub fn bottleneck(&mut self) -> Result<QdiscCounters, Error> {
        let idx = self.bottleneck_ifindex;
        self.r1
            .root_qdiscs()?
            .into_iter()
            .find(|q| q.ifindex == idx)
            .ok_or_else(|| Error::Counters("no root qdisc on the bottleneck link".into()))
    }

    /// One sample of everything.
    pub fn sample(&mut self) -> Result<Sample, Error> {
        let t0 = crate::clock::now_ns();
        let q = self.bottleneck()?;
        let r1 = self.r1.links()?;
        let r2 = self.r2.links()?;
        let t1 = crate::clock::now_ns();
        let get = |links: &[(String, LinkCounters)], name: &str| {
            links
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| *c)
                .unwrap_or_default()
        };
        Ok(Sample {
            t_ns: t0 + (t1 - t0) / 2,
            sent_bytes: q.bytes,
            sent_packets: q.packets as u64,
            drops: q.drops as u64,
            backlog_bytes: q.backlog as u64,
            backlog_packets: q.qlen as u64,
            cross_bytes: get(&r2, "xrcv").tx_bytes,
            fg_bytes: get(&r2, "rcv").tx_bytes,
            offered_cross_bytes: get(&r1, "xsnd").rx_bytes,
            offered_fg_bytes: get(&r1, "snd").rx_bytes,
        })
    }
}

impl TruthSampler {
    /// Start sampling every `interval`; the first sample is taken before this returns and is the
    /// origin of the series.
    pub fn start(tb: &Testbed, interval: Duration) -> Result<TruthSampler, Error> {
        TruthSampler::start_with(tb, interval, tb.capacity())
    }

    /// [`TruthSampler::start`] with the capacity the truth subtracts from given: a reading
    /// taken later than `up`'s ([`Testbed::measure_capacity`]), where the shaper's rate moved
    /// with the host's load.
    pub fn start_with(
        tb: &Testbed,
        interval: Duration,
        capacity: LinkCapacity,
    ) -> Result<TruthSampler, Error> {
        let mut counters = CounterSet::open(tb)?;
        let first = counters.sample()?;
        let periodic = Periodic::start("truth", first, first.t_ns, interval, move || {
            counters.sample()
        })?;
        Ok(TruthSampler {
            periodic,
            capacity,
            origin_ns: first.t_ns,
        })
    }

    /// The truth so far.
    pub fn truth(&self) -> Truth {
        Truth {
            capacity_bps: self.capacity.bps(),
            configured_capacity_bps: self.capacity.configured_bps,
            origin_ns: self.origin_ns,
            samples: self.periodic.samples(),
        }
    }

    /// Stop sampling; the final truth, or the error that ended sampling early.
    pub fn stop(mut self) -> Result<Truth, Error> {
        self.periodic.finish()?;
        Ok(self.truth())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(c: f64, cross_bps: f64, dt_ms: u64, n: u64) -> Truth {
        let samples = (0..=n)
            .map(|i| {
                let t = i * dt_ms * 1_000_000;
                let secs = t as f64 / 1e9;
                Sample {
                    t_ns: 5_000_000_000 + t,
                    cross_bytes: (cross_bps * secs / 8.0) as u64,
                    sent_bytes: (c.min(cross_bps + 1e6) * secs / 8.0) as u64,
                    drops: i * 3,
                    ..Default::default()
                }
            })
            .collect();
        Truth {
            capacity_bps: c,
            configured_capacity_bps: c,
            origin_ns: 5_000_000_000,
            samples,
        }
    }

    #[test]
    fn window_rates_and_interpolation() {
        let t = series(20e6, 5e6, 100, 50);
        let w = t.window(5_000_000_000, 10_000_000_000).unwrap();
        assert!((w.cross_bps - 5e6).abs() < 1.0, "{w:?}");
        assert!((w.avail_bps - 15e6).abs() < 1.0);
        assert_eq!(w.drops, 150.0);
        // A window between samples interpolates rather than snapping to them.
        let w = t.window(5_050_000_000, 5_250_000_000).unwrap();
        assert!((w.cross_bps - 5e6).abs() < 100.0, "{w:?}");
        assert!((w.start_s - 0.05).abs() < 1e-9 && (w.end_s - 0.25).abs() < 1e-9);
    }

    #[test]
    fn saturation_gives_zero_available() {
        let t = series(20e6, 30e6, 100, 10);
        let w = t.window(t.origin_ns, t.origin_ns + 1_000_000_000).unwrap();
        assert_eq!(w.avail_bps, 0.0);
    }

    #[test]
    fn bins_cover_the_series() {
        let t = series(20e6, 5e6, 100, 30);
        let b = t.bins(Duration::from_millis(500));
        assert_eq!(b.len(), 6);
        assert!(b.iter().all(|b| (b.cross_bps - 5e6).abs() < 100.0));
        assert!(Truth {
            capacity_bps: 1.0,
            configured_capacity_bps: 1.0,
            origin_ns: 0,
            samples: vec![]
        }
        .bins(Duration::from_secs(1))
        .is_empty());
    }
}
