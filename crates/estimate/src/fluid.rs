//! A deterministic bottleneck: one FIFO queue of capacity C and a byte buffer, fed by a cross
//! traffic process (any UDP pattern of `mgrp-traffic`) and by probe trains. It turns probe send
//! times into receive times (or losses), so estimators are tested fast, without a network, over
//! many seeds, against known truth.
//!
//! Packets are served whole at C in arrival order (a store-and-forward link); a packet that
//! would overflow the buffer is dropped. Truth over a window is C minus the cross traffic offered
//! in it (exact while cross traffic alone stays below C).
//!
//! Opt-in, what the testbed does that the model does not by default ([`Host`], issue 20 calib5):
//! a drop-tail queue counted in packets (the testbed's `pfifo limit 100`), receive stamps with
//! jitter, and the agent's report rule (a train that lost a probe is reported only a linger
//! after its last arrival; the model by default reports at the last arrival): the fixed 300 ms
//! of the agent before calib6, or its wait for stragglers as long as the queue drains
//! ([`Linger::Adaptive`], `mgrp_train::linger`).

use crate::{wire_bits, TrainResult, TrainSpec};
use mgrp_traffic::pattern::{CrossPattern, Schedule, ETH_HLEN};
use mgrp_train::linger::{OwdRange, RecentBase};
use mgrp_train::{Arrival, MonoNs, SendRecord, WallNs};

pub struct FluidPath {
    capacity_bps: f64,
    buffer_bytes: f64,
    prop_ns: u64,
    pattern: Option<CrossPattern>,
    cross: Option<Schedule>,
    cross_frame_bytes: f64,
    next_cross: Option<u64>,
    /// Remaining transmission work in the queue (ns) as of `now_ns`.
    work_ns: f64,
    now_ns: u64,
    pub dropped_cross: u64,
    pub dropped_probes: u64,
    /// Trains sent so far (the next train's id).
    trains: u32,
    /// The host's traffic riding in the train being sent ([`FluidPath::send_train_riding`]).
    riding: Option<Riding>,
    host: Host,
    /// With a packet limit: when each queued packet starts its service (waiting ones only).
    waiting: std::collections::VecDeque<u64>,
    jitter: u64,
    /// The generator's stalls ([`Host::cross_stall_ns`]): the draws, and the next one's start.
    stall_rng: u64,
    next_stall_ns: u64,
    /// Departure times of the cross frames the queue took, the last [`DELIVERED_KEEP_NS`]
    /// ([`FluidPath::avail_delivered_bps`]).
    delivered: std::collections::VecDeque<u64>,
    /// The receiver's lowest one-way delays of the last trains ([`Linger::Adaptive`]).
    base: RecentBase,
    /// When the latest probe dropped in the train being sent would have arrived had the queue
    /// taken it: the latest a straggler could come ([`FluidPath::stragglers_cut`]).
    straggler_rx: Option<u64>,
    /// Trains reported with a probe missing, and those whose report came before a straggler
    /// could (had the queue held one more packet) have arrived: what a too-short wait costs.
    pub lossy_reports: u64,
    pub stragglers_cut: u64,
}

/// How far back the delivered cross frames are kept (bounds the memory of a long run).
pub const DELIVERED_KEEP_NS: u64 = 60_000_000_000;

/// What a real host and testbed add to the model; the default adds nothing (every existing
/// test and table is unchanged).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Host {
    /// Drop-tail queue of this many packets whatever their size (the testbed's `pfifo limit
    /// 100` behind HTB), instead of the byte buffer: 200-byte probes take a whole slot.
    pub packet_limit: Option<usize>,
    /// Receive stamps late by a uniform draw in [0, this) ns (stamps taken after a wakeup).
    pub rx_jitter_ns: u64,
    /// The agent's report rule (`mgrp-engine`'s receiver, `LINGER`): a train whose probes all
    /// arrived is reported at its last arrival; one that lost any is reported this long after
    /// its last arrival (or the sender's end of train, if later), also when it lost all.
    pub report_linger_ns: Option<u64>,
    /// How long that wait is: the linger itself, or the agent's wait for stragglers capped
    /// at it.
    pub linger: Linger,
    /// One-way propagation instead of the path's own: the accuracy bench's testbed has no
    /// delay line, so its round trip is a fraction of a millisecond (the model's tests use
    /// 10 ms one way), and a stream's report comes back at once.
    pub prop_ns: Option<u64>,
    /// Seed of the jitter draws.
    pub seed: u64,
    /// The cross generator stalls (a userspace sender preempted on a busy host): stalls of
    /// this long (ns) start at random, `cross_stall_every_ns` apart on average (exponential
    /// gaps); departures due during a stall leave at its end, back to back. 0: on schedule.
    pub cross_stall_ns: u64,
    pub cross_stall_every_ns: u64,
}

/// The agent's wait for the stragglers of a train that lost a probe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Linger {
    /// `report_linger_ns` whatever the train showed (the agent before calib6).
    #[default]
    Fixed,
    /// As the agent waits since calib6 (`mgrp_train::linger::wait_ns`): twice the deepest
    /// queueing delay the arrivals met + 5 ms, 20 ms at least, `report_linger_ns` at most.
    Adaptive,
}

impl Host {
    /// The testbed's `mgrp bench accuracy` path as calib5 modelled it: pfifo of 100 packets,
    /// the agent's fixed 300 ms linger; stamps are the kernel's (`SO_TIMESTAMPNS`), so no
    /// jitter by default. The agent since calib6: `Host { linger: Linger::Adaptive, ..}`.
    pub fn testbed() -> Host {
        Host {
            packet_limit: Some(100),
            rx_jitter_ns: 0,
            report_linger_ns: Some(300_000_000),
            linger: Linger::Fixed,
            prop_ns: Some(50_000),
            seed: 1,
            cross_stall_ns: 0,
            cross_stall_every_ns: 0,
        }
    }
}

/// Cross frames that ride in a train's probes instead of crossing the bottleneck: a token
/// bucket filled at the riding rate from the train's first probe, holding at most T = 10 ms of
/// it (what a payload buffer would hold).
struct Riding {
    rate_bps: f64,
    from_ns: u64,
    last_ns: u64,
    credit_bytes: f64,
    rode_bytes: f64,
}

impl FluidPath {
    /// A path of `capacity_bps`, a buffer of `buffer_bytes`, one-way propagation `prop_ns`, and
    /// cross traffic following `cross` from time 0. TCP cross traffic has no fixed schedule and
    /// is refused.
    pub fn new(
        capacity_bps: f64,
        buffer_bytes: f64,
        prop_ns: u64,
        cross: Option<CrossPattern>,
    ) -> Result<FluidPath, String> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(capacity_bps) || !positive(buffer_bytes) {
            return Err("capacity and buffer must be positive".into());
        }
        let (sched, frame) = match &cross {
            None => (None, 0.0),
            Some(p) => {
                let s = p
                    .schedule()
                    .ok_or("the fluid model has no TCP (tcp, web): use a UDP pattern")?;
                let f = (s.size() as u64 + ETH_HLEN) as f64;
                (Some(s), f)
            }
        };
        let mut path = FluidPath {
            trains: 0,
            capacity_bps,
            buffer_bytes,
            prop_ns,
            pattern: cross,
            cross: sched,
            cross_frame_bytes: frame,
            next_cross: None,
            work_ns: 0.0,
            now_ns: 0,
            dropped_cross: 0,
            dropped_probes: 0,
            riding: None,
            host: Host::default(),
            waiting: std::collections::VecDeque::new(),
            jitter: 0,
            stall_rng: 0,
            next_stall_ns: 0,
            delivered: std::collections::VecDeque::new(),
            base: RecentBase::default(),
            straggler_rx: None,
            lossy_reports: 0,
            stragglers_cut: 0,
        };
        path.next_cross = path.pull_cross();
        Ok(path)
    }

    /// The same path with a real host's features ([`Host`]).
    pub fn with_host(mut self, host: Host) -> Self {
        self.jitter = host.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        self.prop_ns = host.prop_ns.unwrap_or(self.prop_ns);
        self.host = host;
        if host.cross_stall_ns > 0 {
            self.stall_rng = host.seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
            self.next_stall_ns = self.stall_gap();
            self.next_cross = self.next_cross.map(|c| self.stalled(c));
        }
        self
    }

    pub fn host(&self) -> Host {
        self.host
    }

    /// A uniform draw in [0, rx_jitter_ns) (xorshift64*).
    fn jitter_ns(&mut self) -> u64 {
        if self.host.rx_jitter_ns == 0 {
            return 0;
        }
        self.jitter ^= self.jitter >> 12;
        self.jitter ^= self.jitter << 25;
        self.jitter ^= self.jitter >> 27;
        let u =
            (self.jitter.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        (u * self.host.rx_jitter_ns as f64) as u64
    }

    fn drain_to(&mut self, t: u64) {
        if t > self.now_ns {
            self.work_ns = (self.work_ns - (t - self.now_ns) as f64).max(0.0);
            self.now_ns = t;
        }
    }

    /// Offer a frame at `t`; its departure (end of transmission) if the buffer takes it.
    fn enqueue(&mut self, t: u64, frame_bytes: f64) -> Option<u64> {
        self.drain_to(t);
        if let Some(limit) = self.host.packet_limit {
            // Packets whose service has started have left the pfifo for the shaper.
            while self.waiting.front().is_some_and(|s| *s <= t) {
                self.waiting.pop_front();
            }
            if self.waiting.len() >= limit {
                return None;
            }
            self.waiting.push_back(t + self.work_ns.round() as u64);
        } else {
            let backlog = self.work_ns * self.capacity_bps / 8e9;
            if backlog + frame_bytes > self.buffer_bytes {
                return None;
            }
        }
        self.work_ns += frame_bytes * 8e9 / self.capacity_bps;
        Some(t + self.work_ns.round() as u64)
    }

    /// The next cross departure, as the host's generator sends it.
    fn pull_cross(&mut self) -> Option<u64> {
        let c = self.cross.as_mut().and_then(|s| s.next())?;
        Some(self.stalled(c))
    }

    /// A departure due at `c` put off to the end of the stall it falls in, if any.
    fn stalled(&mut self, c: u64) -> u64 {
        let d = self.host.cross_stall_ns;
        if d == 0 {
            return c;
        }
        loop {
            if c < self.next_stall_ns {
                return c;
            }
            let end = self.next_stall_ns + d;
            if c < end {
                return end;
            }
            self.next_stall_ns = end + self.stall_gap();
        }
    }

    /// An exponential draw of mean `cross_stall_every_ns` (xorshift64*).
    fn stall_gap(&mut self) -> u64 {
        self.stall_rng ^= self.stall_rng >> 12;
        self.stall_rng ^= self.stall_rng << 25;
        self.stall_rng ^= self.stall_rng >> 27;
        let u =
            (self.stall_rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        (-(1.0 - u).ln() * self.host.cross_stall_every_ns as f64) as u64
    }

    fn cross_until(&mut self, t: u64) {
        while let Some(c) = self.next_cross.filter(|c| *c <= t) {
            let frame = self.cross_frame_bytes;
            let rides = self.riding.as_mut().is_some_and(|r| {
                if c < r.from_ns {
                    return false;
                }
                let filled = r.rate_bps * c.saturating_sub(r.last_ns) as f64 / 8e9;
                r.credit_bytes = (r.credit_bytes + filled).min(r.rate_bps * 0.01 / 8.0 + frame);
                r.last_ns = r.last_ns.max(c);
                let ok = r.credit_bytes >= frame;
                if ok {
                    r.credit_bytes -= frame;
                    r.rode_bytes += frame;
                }
                ok
            });
            if rides {
                self.next_cross = self.pull_cross();
                continue;
            }
            match self.enqueue(c, frame) {
                Some(departure) => {
                    self.delivered.push_back(departure);
                    while self
                        .delivered
                        .front()
                        .is_some_and(|d| d + DELIVERED_KEEP_NS < departure)
                    {
                        self.delivered.pop_front();
                    }
                }
                None => self.dropped_cross += 1,
            }
            self.next_cross = self.pull_cross();
        }
    }

    /// Send `train` with its first probe at `start_ns` (not before the previous train's last
    /// probe). Receive times are on the path's own clock.
    pub fn send_train(&mut self, start_ns: u64, train: &TrainSpec) -> TrainResult {
        let start = start_ns.max(self.now_ns);
        let (mut sends, mut arrivals) = (Vec::new(), Vec::new());
        self.straggler_rx = None;
        for (i, (off, p)) in train.offsets().iter().zip(&train.probes).enumerate() {
            let t = start + off;
            self.cross_until(t);
            let frame = wire_bits(p.size) / 8.0;
            let rx = self
                .enqueue(t, frame)
                .map(|d| d + self.prop_ns)
                .map(|rx| rx + self.jitter_ns());
            match rx {
                Some(rx) => arrivals.push(Arrival {
                    index: i as u16,
                    size: p.size,
                    rx_ns: WallNs(rx),
                }),
                None => {
                    self.dropped_probes += 1;
                    // Behind the whole queue it found full, had there been room.
                    let would = t + (self.work_ns + frame * 8e9 / self.capacity_bps) as u64;
                    self.straggler_rx = self.straggler_rx.max(Some(would + self.prop_ns));
                }
            }
            // One clock for everything on the model path.
            sends.push(SendRecord {
                mono_ns: Some(MonoNs(t)),
                real_ns: WallNs(t),
                kernel_ns: None,
            });
        }
        self.trains += 1;
        TrainResult::assemble(
            self.trains,
            "fluid".into(),
            train,
            MonoNs(start),
            &sends,
            Some((&arrivals, false)),
        )
    }

    /// [`FluidPath::send_train`] with riders: cross traffic (standing for the host's own) rides
    /// in the probes at up to `riding_bps` while the train is sent, instead of crossing the
    /// bottleneck. Returns the result and the bytes that rode (the train's competing bytes).
    pub fn send_train_riding(
        &mut self,
        start_ns: u64,
        train: &TrainSpec,
        riding_bps: f64,
    ) -> (TrainResult, u64) {
        let start = start_ns.max(self.now_ns);
        self.riding = Some(Riding {
            rate_bps: riding_bps.max(0.0),
            from_ns: start,
            last_ns: start,
            credit_bytes: 0.0,
            rode_bytes: 0.0,
        });
        let r = self.send_train(start, train);
        let rode = self.riding.take().map_or(0.0, |r| r.rode_bytes);
        (r, rode as u64)
    }

    /// Let time pass to `t` (cross traffic keeps arriving).
    pub fn idle_until(&mut self, t: u64) {
        self.cross_until(t);
        self.drain_to(t);
    }

    /// The path's clock.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    pub fn capacity_bps(&self) -> f64 {
        self.capacity_bps
    }

    /// Ground truth over [from, to): C − cross traffic offered, never below 0.
    pub fn avail_bps(&self, from_ns: u64, to_ns: u64) -> f64 {
        let Some(s) = self.pattern.as_ref().and_then(|p| p.schedule()) else {
            return self.capacity_bps;
        };
        if to_ns <= from_ns {
            return f64::NAN;
        }
        let n = s
            .take_while(|t| *t < to_ns)
            .filter(|t| *t >= from_ns)
            .count();
        let cross = n as f64 * self.cross_frame_bytes * 8.0 * 1e9 / (to_ns - from_ns) as f64;
        (self.capacity_bps - cross).max(0.0)
    }
}

impl FluidPath {
    /// Truth as the testbed measures it over [from, to): C − the cross traffic that left the
    /// queue (what was dropped is not counted), never below 0. Equal to [`FluidPath::avail_bps`]
    /// while the queue drops no cross frame; above it where cross traffic alone exceeds C (on/off
    /// at 75% load: the on phase offers 1.5·C). Kept for the last 60 s of the path's clock.
    pub fn avail_delivered_bps(&self, from_ns: u64, to_ns: u64) -> f64 {
        if to_ns <= from_ns {
            return f64::NAN;
        }
        let n = self
            .delivered
            .iter()
            .filter(|d| (from_ns..to_ns).contains(*d))
            .count();
        let cross = n as f64 * self.cross_frame_bytes * 8.0 * 1e9 / (to_ns - from_ns) as f64;
        (self.capacity_bps - cross).max(0.0)
    }
}

impl FluidPath {
    /// The agent's wait past the later of TrainEnd and the last arrival for `obs`: none if
    /// every probe arrived, else `linger` or the wait for stragglers ([`Host::linger`]).
    /// Remembers the train's lowest delay, as the agent's session does, and counts a report
    /// that came before a dropped probe could have arrived.
    /// `from`: the later of TrainEnd and the last arrival, where the wait starts.
    fn straggler_wait(&mut self, obs: &TrainResult, linger: u64, from: u64) -> u64 {
        let mut owd = OwdRange::default();
        for p in &obs.probes {
            if let Some(rx) = p.rx_ns {
                owd.add(p.tx_real_ns.0, rx.0);
            }
        }
        let lost = obs.probes.iter().any(|p| p.rx_ns.is_none());
        let wait = match (lost, self.host.linger) {
            (false, _) => 0,
            (true, Linger::Fixed) => linger,
            (true, Linger::Adaptive) => mgrp_train::linger::wait_ns(&owd, self.base.base(), linger),
        };
        self.base.remember(&owd);
        if lost {
            self.lossy_reports += 1;
            if self.straggler_rx.is_some_and(|s| s > from + wait) {
                self.stragglers_cut += 1;
            }
        }
        wait
    }
}

/// Run `est` against `path` until it is done or `horizon_ns` passes. A train's outcome is handed
/// to the estimator when its report would arrive: after the last arrival plus the return
/// propagation (or, if everything was lost, after the train plus a second). Returns each new
/// estimate with the time it appeared.
pub fn drive(
    est: &mut dyn crate::Estimator,
    path: &mut FluidPath,
    horizon_ns: u64,
) -> Vec<(u64, crate::Estimate)> {
    drive_with(est, path, horizon_ns, |_, _| {})
}

/// [`drive`], with every train's result passed through `disturb` before the estimator sees it:
/// how tests add what a real host does and the model does not (a receiver that stalls, a
/// probe lost to something else than the queue).
pub fn drive_with(
    est: &mut dyn crate::Estimator,
    path: &mut FluidPath,
    horizon_ns: u64,
    mut disturb: impl FnMut(&TrainSpec, &mut TrainResult),
) -> Vec<(u64, crate::Estimate)> {
    let mut out: Vec<(u64, crate::Estimate)> = Vec::new();
    while !est.is_done() && path.now_ns() < horizon_ns {
        let now = path.now_ns();
        if let Some(train) = est.poll_train(now) {
            let mut obs = path.send_train(now, &train);
            disturb(&train, &mut obs);
            let last_sent = now + train.offsets().last().copied().unwrap_or(0);
            let last_rx = obs.probes.iter().filter_map(|p| p.rx_ns).max().map(|t| t.0);
            let known = match path.host.report_linger_ns {
                // The agent: all in → report now; any lost → a linger past the last arrival
                // or the end of train (which reaches it one propagation after the last probe).
                Some(linger) => {
                    let ended = last_sent + path.prop_ns;
                    let last = last_rx.map_or(ended, |rx| rx.max(ended));
                    let wait = path.straggler_wait(&obs, linger, last);
                    last + wait + path.prop_ns
                }
                None => last_rx
                    .map(|rx| rx + path.prop_ns)
                    .unwrap_or(last_sent + 1_000_000_000),
            };
            path.idle_until(known.max(last_sent));
            est.handle_train(path.now_ns(), &obs);
            if let Some(e) = est.estimate() {
                if out.last().is_none_or(|(_, last)| *last != e) {
                    out.push((path.now_ns(), e));
                }
            }
        } else {
            match est.next_wakeup() {
                Some(t) if t > now => path.idle_until(t.min(horizon_ns)),
                _ => path.idle_until(now + 1_000_000),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TrainSpec;

    #[test]
    fn idle_path_spaces_a_burst_at_capacity() {
        let mut p = FluidPath::new(10e6, 100_000.0, 1_000_000, None).unwrap();
        let obs = p.send_train(0, &TrainSpec::constant_rate(10, 1208, 1e12));
        let rx: Vec<u64> = obs.probes.iter().map(|o| o.rx_ns.unwrap().0).collect();
        // 1250-byte frames at 10 Mbit/s leave 1 ms apart, after 1 ms of propagation.
        assert_eq!(rx[0], 2_000_000);
        assert!(rx.windows(2).all(|w| w[1] - w[0] == 1_000_000), "{rx:?}");
    }

    #[test]
    fn slow_stream_sees_flat_delays_fast_stream_rising() {
        let cross = CrossPattern::parse("cbr:4mbit").unwrap();
        let mut p = FluidPath::new(10e6, 1e6, 0, Some(cross)).unwrap();
        let owd = |o: &TrainResult| o.owds().iter().map(|(_, d)| *d).collect::<Vec<f64>>();
        let params = crate::trend::TrendParams::default();
        let slow = p.send_train(1_000_000_000, &TrainSpec::constant_rate(100, 500, 4e6));
        let d = owd(&slow);
        assert_eq!(
            crate::trend::stream_trend(&d, 100, &params),
            crate::trend::Trend::NotIncreasing
        );
        let fast = p.send_train(2_000_000_000, &TrainSpec::constant_rate(100, 500, 9e6));
        let d = owd(&fast);
        // 3 Mbit/s above A for 55 ms: about 20 KB, 16 ms of queue.
        assert!(
            d[99] > d[0] + 10e6,
            "queue builds above A: {} -> {}",
            d[0],
            d[99]
        );
        assert_eq!(
            crate::trend::stream_trend(&d, 100, &params),
            crate::trend::Trend::Increasing
        );
        assert!((p.avail_bps(0, 10_000_000_000) - 6e6).abs() < 2e3);
    }

    #[test]
    fn overflow_drops() {
        let mut p = FluidPath::new(1e6, 3000.0, 0, None).unwrap();
        let obs = p.send_train(0, &TrainSpec::constant_rate(10, 1458, 1e12));
        assert_eq!(obs.lost(), 8);
        assert!(
            FluidPath::new(1e6, 3000.0, 0, Some(CrossPattern::parse("tcp:1").unwrap())).is_err()
        );
        assert!(FluidPath::new(
            1e6,
            3000.0,
            0,
            Some(CrossPattern::parse("web:1mbit").unwrap())
        )
        .is_err());
        // PEAKS has a schedule like STEP, so the fluid model runs it.
        let peaks = CrossPattern::parse("peaks:100kbit@1s,300@1s").unwrap();
        let p = FluidPath::new(1e6, 30000.0, 0, Some(peaks)).unwrap();
        assert!((p.avail_bps(0, 2_000_000_000) - 0.8e6).abs() < 0.02e6);
    }

    /// The testbed's pfifo counts packets: ten 200-byte probes at once into a 5-packet queue
    /// keep 6 (one in service, 5 waiting) where the model's byte buffer keeps all 10.
    #[test]
    fn a_packet_limit_counts_packets_not_bytes() {
        let burst = TrainSpec::constant_rate(10, 158, 1e12);
        let mut bytes = FluidPath::new(1e6, 1e6, 0, None).unwrap();
        assert_eq!(bytes.send_train(0, &burst).lost(), 0);
        let host = Host {
            packet_limit: Some(5),
            ..Host::default()
        };
        let mut packets = FluidPath::new(1e6, 1e6, 0, None).unwrap().with_host(host);
        assert_eq!(packets.send_train(0, &burst).lost(), 4);
        // Once the queue drained, the next burst is taken the same way.
        assert_eq!(packets.send_train(1_000_000_000, &burst).lost(), 4);
    }

    /// Receive stamps come late by at most the jitter, the same draws for the same seed.
    #[test]
    fn rx_jitter_is_bounded_and_seeded() {
        let train = TrainSpec::constant_rate(50, 200, 1e6);
        let rx = |host: Host| -> Vec<u64> {
            let mut p = FluidPath::new(10e6, 1e6, 1_000_000, None)
                .unwrap()
                .with_host(host);
            let obs = p.send_train(0, &train);
            obs.probes.iter().map(|o| o.rx_ns.unwrap().0).collect()
        };
        let host = Host {
            rx_jitter_ns: 100_000,
            seed: 7,
            ..Host::default()
        };
        let (plain, jittered) = (rx(Host::default()), rx(host));
        let late: Vec<u64> = plain.iter().zip(&jittered).map(|(a, b)| b - a).collect();
        assert!(late.iter().all(|d| *d < 100_000), "{late:?}");
        assert!(late.iter().filter(|d| **d > 0).count() > 40, "{late:?}");
        assert_eq!(jittered, rx(host));
    }

    /// One train, and when its report was handed over.
    struct OneTrain {
        train: TrainSpec,
        sent: bool,
        reported_ns: Option<u64>,
    }

    impl crate::Estimator for OneTrain {
        fn poll_train(&mut self, _now_ns: u64) -> Option<TrainSpec> {
            (!self.sent).then(|| {
                self.sent = true;
                self.train.clone()
            })
        }
        fn handle_train(&mut self, now_ns: u64, _obs: &TrainResult) {
            self.reported_ns = Some(now_ns);
        }
        fn estimate(&self) -> Option<crate::Estimate> {
            None
        }
        fn is_done(&self) -> bool {
            self.reported_ns.is_some()
        }
        fn next_wakeup(&self) -> Option<u64> {
            None
        }
    }

    /// The agent's rule: a train whose probes all arrived is reported at its last arrival (+
    /// the way back); one that lost a probe, a linger later. Without the rule (the default),
    /// a lossy train is reported at its last arrival too.
    #[test]
    fn a_lossy_train_is_reported_a_linger_late() {
        let report = |buffer: f64, host: Host| -> u64 {
            // 10 MTU probes at once at 10 Mbit/s: 1.2 ms apart on the link.
            let mut p = FluidPath::new(10e6, buffer, 50_000, None)
                .unwrap()
                .with_host(host);
            let mut e = OneTrain {
                train: TrainSpec::constant_rate(10, 1472, 1e12),
                sent: false,
                reported_ns: None,
            };
            drive(&mut e, &mut p, 10_000_000_000);
            e.reported_ns.unwrap()
        };
        let linger = Host {
            report_linger_ns: Some(300_000_000),
            ..Host::default()
        };
        // All in: last arrival 12.11 ms + 50 us, back 50 us; the same with or without the rule.
        assert_eq!(report(1e6, Host::default()), 12_212_000);
        assert_eq!(report(1e6, linger), 12_212_000);
        // A 5-frame buffer drops 5: the last arrival is the fifth, then 300 ms.
        let lossy = report(5.0 * 1514.0, Host::default());
        assert_eq!(lossy, 6_156_000);
        assert_eq!(report(5.0 * 1514.0, linger), lossy + 300_000_000);
    }

    /// The agent since calib6 waits for stragglers as long as the queue the arrivals met
    /// drains (twice it + 5 ms, 20 ms at least): 10 MTU probes at once into a 5-frame buffer
    /// met at most 4.8 ms of queue, so the floor; 60 into a 50-frame buffer met 59.3 ms, so
    /// 2 × 59.3 + 5 = 123.7 ms. A probe the queue dropped could not have come later (none cut).
    #[test]
    fn the_adaptive_linger_waits_as_long_as_the_queue_drains() {
        let run = |buffer_frames: f64, probes: usize, linger: Linger| -> (u64, FluidPath) {
            let host = Host {
                report_linger_ns: Some(300_000_000),
                linger,
                ..Host::default()
            };
            let mut p = FluidPath::new(10e6, buffer_frames * 1514.0, 50_000, None)
                .unwrap()
                .with_host(host);
            let mut e = OneTrain {
                train: TrainSpec::constant_rate(probes, 1472, 1e12),
                sent: false,
                reported_ns: None,
            };
            drive(&mut e, &mut p, 10_000_000_000);
            (e.reported_ns.unwrap(), p)
        };
        let (fixed, _) = run(5.0, 10, Linger::Fixed);
        let (short, p) = run(5.0, 10, Linger::Adaptive);
        assert_eq!(fixed - short, 300_000_000 - 20_000_000);
        assert_eq!((p.lossy_reports, p.stragglers_cut), (1, 0));
        let (fixed, _) = run(50.0, 60, Linger::Fixed);
        let (deep, p) = run(50.0, 60, Linger::Adaptive);
        let wait = 300_000_000 - (fixed - deep);
        assert!((123_000_000..124_500_000).contains(&wait), "{wait}");
        assert_eq!((p.lossy_reports, p.stragglers_cut), (1, 0));
    }

    /// Truth as the testbed measures it: C − what the queue delivered. On/off at 75% load
    /// offers 1.5·C in its on phases; over whole periods the queue delivers about C/2 (the
    /// model's 100-frame buffer holds only 12 ms at 100 Mbit/s), where C − offered is C/4.
    #[test]
    fn delivered_truth_counts_what_the_queue_kept() {
        let cross = CrossPattern::parse("onoff:75mbit,on=500ms,off=500ms").unwrap();
        let mut p = FluidPath::new(100e6, 100.0 * 1514.0, 0, Some(cross)).unwrap();
        p.idle_until(4_000_000_000);
        let (offered, delivered) = (
            p.avail_bps(1_000_000_000, 3_000_000_000),
            p.avail_delivered_bps(1_000_000_000, 3_000_000_000),
        );
        assert!((offered - 25e6).abs() < 0.5e6, "{offered}");
        // Each on phase delivers 500 ms at C, and the full queue's 12.1 ms after it: the
        // window holds two, so C − (2 × 512.1 ms × C) / 2 s = 48.8 Mbit/s.
        assert!((delivered - 48.8e6).abs() < 0.1e6, "{delivered}");
        // Below C nothing is dropped: the two agree.
        let cross = CrossPattern::parse("cbr:40mbit").unwrap();
        let mut p = FluidPath::new(100e6, 100.0 * 1514.0, 0, Some(cross)).unwrap();
        p.idle_until(2_000_000_000);
        let d = p.avail_delivered_bps(500_000_000, 1_500_000_000);
        assert!(
            (d - p.avail_bps(500_000_000, 1_500_000_000)).abs() < 0.2e6,
            "{d}"
        );
    }
}
