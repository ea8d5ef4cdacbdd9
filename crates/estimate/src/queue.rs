//! Standing-queue evidence (issue 20): a stream sent into a queue that is already full reads
//! "not increasing" by its trend, since a full drop-tail queue holds its delay flat (and drops
//! what does not fit), yet the link was busy for the whole stream, so the stream's rate plus
//! the cross traffic's was at least C: the stream was sent at or above A. This is the miss of
//! on/off cross traffic in its on phase (at 50% load it offers C, at 75% 1.5·C).
//!
//! Two pieces of evidence, judged on one-way delays that are comparable across trains
//! (receiver's stamp − sender's wall-clock stamp, less the probe's own service time at C, so
//! streams of different probe sizes share a floor), against the lowest such delay seen in the
//! same estimate (the path with an empty queue):
//!
//! - **Plateau**: every group median of the stream (the trend tests' groups) sits at least
//!   `threshold` above that floor, and the last group is not below the first by more than half
//!   of it (the queue did not drain): the link never idled during the stream.
//! - **Loss at a high queue**: at least `lossy` of the stream's probes were lost (pathload 1.3.2
//!   counts a stream losing ≥ 3% as lossy, and a fleet where half the streams are lossy as
//!   above A; a stream losing ≥ 15% aborts the fleet as above A) while the stream's highest group
//!   median stood `threshold` above the floor: the drops were the queue overflowing, not a
//!   receiver that missed a probe.
//!
//! `threshold` is the larger of a fixed floor (several MTU service times at C: what a few
//! cross packets queued at once explain) and three times the stream's own jitter (median
//! absolute step between consecutive delays): what noise explains is not a queue.

use crate::stats::median;
use crate::trend::group_medians;
use crate::{wire_bits, TrainResult};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueueParams {
    /// The bottleneck's capacity (for the probes' own service time).
    pub capacity_bps: f64,
    /// Least standing delay (ns) above the floor that counts as a queue.
    pub threshold_ns: f64,
    /// Share of a stream's probes lost that makes it lossy (pathload: 3%).
    pub lossy: f64,
    /// The floor seen before this search started (earlier phases' trains), if any.
    pub floor_ns: Option<f64>,
}

impl QueueParams {
    /// For `auto`: a queue of at least 8 MTU (1514-byte) frames at C and 2 ms. A Poisson queue
    /// at 90% utilisation holds 4.5 service times on average; a full 100-packet drop-tail
    /// buffer holds 100 (60 ms at 20 Mbit/s, 12 ms at 100 Mbit/s). The 2 ms are for a host
    /// whose receive stamps come late for a whole stream now and then (a loaded VM).
    pub fn for_capacity(capacity_bps: f64) -> Self {
        QueueParams {
            capacity_bps,
            threshold_ns: (8.0 * 1514.0 * 8.0 / capacity_bps.max(1.0) * 1e9).max(2e6),
            lossy: 0.03,
            floor_ns: None,
        }
    }
}

/// The delays of a train's received probes, comparable across trains: receive stamp − the
/// sender's wall-clock stamp − the probe's service time at C (ns). The clocks' offset is the
/// same for every train between two hosts, so it cancels against the floor.
pub fn comparable_owds(obs: &TrainResult, capacity_bps: f64) -> Vec<f64> {
    obs.probes
        .iter()
        .filter_map(|p| {
            let rx = p.rx_ns?.0 as f64;
            Some(rx - p.tx_real_ns.0 as f64 - wire_bits(p.size) * 1e9 / capacity_bps.max(1.0))
        })
        .collect()
}

/// The lowest comparable delay of a train, if any probe arrived.
pub fn train_floor(obs: &TrainResult, capacity_bps: f64) -> Option<f64> {
    comparable_owds(obs, capacity_bps)
        .into_iter()
        .reduce(f64::min)
}

/// What a stream's delays say about the queue it met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Queue {
    /// No evidence of a queue the stream could not have built itself.
    Clear,
    /// The link stayed busy through the stream at a standing delay.
    Plateau,
    /// Probes lost while the queue stood high.
    Overflow,
}

/// The running floor and the verdicts of one search.
#[derive(Debug, Clone)]
pub struct QueueJudge {
    p: QueueParams,
    floor: Option<f64>,
    /// Streams found on a plateau / overflowing.
    pub plateaus: u32,
    pub overflows: u32,
    /// Streams that met a link already saturated by other traffic: a standing queue before
    /// their first probes (the first group `threshold` above the floor), or more than half
    /// their probes lost. A stream a little above a steady A builds its queue from empty and
    /// loses nothing, so this is A near 0 at that moment: where other streams found the queue
    /// empty, A alternates at the scale of the search.
    pub saturated: u32,
    /// The last stream's lowest group median above the floor (ns; 0 without evidence).
    pub last_level_ns: f64,
    /// The last stream watched a queue drain: while it was sent the link took in less than
    /// C, so its rate was below A at that moment (onoff8).
    pub last_drained: bool,
}

impl QueueJudge {
    pub fn new(p: QueueParams) -> Self {
        QueueJudge {
            p,
            floor: p.floor_ns,
            plateaus: 0,
            overflows: 0,
            saturated: 0,
            last_level_ns: 0.0,
            last_drained: false,
        }
    }

    /// The lowest comparable delay seen so far.
    pub fn floor(&self) -> Option<f64> {
        self.floor
    }

    /// Judge one stream (its floor joins the running floor first). `sent` = probes that left.
    pub fn judge(&mut self, obs: &TrainResult, sent: usize) -> Queue {
        let owd = comparable_owds(obs, self.p.capacity_bps);
        if let Some(m) = owd.iter().copied().reduce(f64::min) {
            self.floor = Some(self.floor.map_or(m, |f| f.min(m)));
        }
        let v = self.verdict(&owd, sent);
        self.last_level_ns = self.level(&owd);
        self.last_drained = owd.len() >= 4 && {
            let g = ((owd.len() as f64).sqrt().floor() as usize).max(2);
            self.draining(&group_medians(&owd, g), &owd)
        };
        if self.saturated_at_start(&owd, sent) {
            self.saturated += 1;
        }
        match v {
            Queue::Plateau => self.plateaus += 1,
            Queue::Overflow => self.overflows += 1,
            Queue::Clear => {}
        }
        v
    }

    fn threshold(&self, owd: &[f64]) -> f64 {
        let steps: Vec<f64> = owd.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        self.p.threshold_ns.max(3.0 * median(&steps))
    }

    /// The delays fell over the stream by more than one MTU service time (or the stream's own
    /// jitter): a queue draining — most often the backlog of the search's previous stream,
    /// which a stream below A finds and watches drain. Not a saturated link.
    fn draining(&self, d: &[f64], owd: &[f64]) -> bool {
        let steps: Vec<f64> = owd.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        let mtu = 1514.0 * 8.0 / self.p.capacity_bps.max(1.0) * 1e9;
        d[0] - d[d.len() - 1] > mtu.max(median(&steps))
    }

    fn saturated_at_start(&self, owd: &[f64], sent: usize) -> bool {
        if sent >= 4 && owd.len() * 2 < sent {
            return true;
        }
        let Some(floor) = self.floor.filter(|_| owd.len() >= 4) else {
            return false;
        };
        let g = ((owd.len() as f64).sqrt().floor() as usize).max(2);
        let d = group_medians(owd, g);
        d[0] - floor >= self.threshold(owd) && !self.draining(&d, owd)
    }

    /// The lowest group median above the floor: the queue the stream stood on throughout.
    fn level(&self, owd: &[f64]) -> f64 {
        match self.floor.filter(|_| owd.len() >= 4) {
            Some(floor) => {
                let g = ((owd.len() as f64).sqrt().floor() as usize).max(2);
                let low = group_medians(owd, g)
                    .into_iter()
                    .fold(f64::INFINITY, f64::min);
                (low - floor).max(0.0)
            }
            None => 0.0,
        }
    }

    fn verdict(&self, owd: &[f64], sent: usize) -> Queue {
        let Some(floor) = self.floor else {
            return Queue::Clear;
        };
        if owd.len() < 4 {
            return Queue::Clear;
        }
        let g = ((owd.len() as f64).sqrt().floor() as usize).max(2);
        let d = group_medians(owd, g);
        let threshold = self.threshold(owd);
        let low = d.iter().copied().fold(f64::INFINITY, f64::min) - floor;
        let high = d.iter().copied().fold(f64::NEG_INFINITY, f64::max) - floor;
        if low >= threshold && !self.draining(&d, owd) {
            return Queue::Plateau;
        }
        let lost = sent.saturating_sub(owd.len());
        if sent > 0 && lost as f64 >= self.p.lossy * sent as f64 && high >= threshold {
            return Queue::Overflow;
        }
        Queue::Clear
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TrainResult, TrainSpec};
    use mgrp_train::{Arrival, MonoNs, SendRecord, WallNs};

    /// A 49-probe stream at 1 ms gaps sent from t = 0 whose probe i waits `delay(i)` ns (None:
    /// lost); 200-byte probes at 20 Mbit/s.
    fn stream(delay: impl Fn(usize) -> Option<u64>) -> TrainResult {
        let spec = TrainSpec::constant_rate(49, 200, 200.0 * 8.0 * 1000.0);
        let offs = spec.offsets();
        let sends: Vec<SendRecord> = offs
            .iter()
            .map(|o| SendRecord {
                mono_ns: Some(MonoNs(*o)),
                real_ns: WallNs(1_000_000_000 + o),
                kernel_ns: None,
            })
            .collect();
        let arrivals: Vec<Arrival> = offs
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                Some(Arrival {
                    index: i as u16,
                    size: 200,
                    rx_ns: WallNs(1_000_000_000 + o + 10_000_000 + delay(i)?),
                })
            })
            .collect();
        TrainResult::assemble(
            1,
            "t".into(),
            &spec,
            MonoNs(0),
            &sends,
            Some((&arrivals, false)),
        )
    }

    fn judge() -> QueueJudge {
        let mut j = QueueJudge::new(QueueParams::for_capacity(20e6));
        // A stream through an empty queue sets the floor.
        assert_eq!(
            j.judge(&stream(|i| Some((i % 3) as u64 * 50_000)), 49),
            Queue::Clear
        );
        j
    }

    #[test]
    fn a_flat_stream_at_a_standing_delay_is_a_plateau() {
        let mut j = judge();
        // 40 ms of queue, flat ± one MTU service time (0.6 ms at 20 Mbit/s).
        let full = stream(|i| Some(40_000_000 + (i % 2) as u64 * 600_000));
        assert_eq!(j.judge(&full, 49), Queue::Plateau);
        assert_eq!(j.saturated, 1);
        // The same level without the earlier floor proves nothing.
        let mut fresh = QueueJudge::new(QueueParams::for_capacity(20e6));
        assert_eq!(fresh.judge(&full, 49), Queue::Clear);
        // With the floor passed in from earlier trains it does.
        let mut seeded = QueueJudge::new(QueueParams {
            floor_ns: j.floor(),
            ..QueueParams::for_capacity(20e6)
        });
        assert_eq!(seeded.judge(&full, 49), Queue::Plateau);
    }

    #[test]
    fn a_draining_queue_or_noise_is_not_a_plateau() {
        let mut j = judge();
        // A queue of 40 ms draining to nothing over the stream: the link idles at its end.
        let draining = stream(|i| Some(40_000_000u64.saturating_sub(i as u64 * 1_000_000)));
        assert_eq!(j.judge(&draining, 49), Queue::Clear);
        assert!(
            j.last_drained,
            "the link took in less than C: the stream was below A"
        );
        // 2 ms above the floor: less than 8 MTU service times (4.8 ms).
        assert_eq!(j.judge(&stream(|_| Some(2_000_000)), 49), Queue::Clear);
        assert!(!j.last_drained);
        // 6 ms above, but with 3 ms of jitter between probes: noise explains it.
        let noisy = stream(|i| Some(6_000_000 + (i % 2) as u64 * 3_000_000));
        assert_eq!(j.judge(&noisy, 49), Queue::Clear);
        assert_eq!((j.plateaus, j.overflows), (0, 0));
        // The draining stream met a standing queue at its start, but a draining one (most often
        // the search's own previous stream's backlog): not a saturated link.
        assert_eq!(j.saturated, 0);
        // A stream lost whole met one.
        assert_eq!(j.judge(&stream(|_| None), 49), Queue::Clear);
        assert_eq!(j.saturated, 1);
    }

    /// The miss itself, on the fluid model: CBR cross traffic at 97% of C, the drop-tail queue
    /// filled by a burst, then a SLoPS-like stream at 5% of C (above A = 3%). The link stays
    /// saturated and the queue full and flat, so the trend test reads the stream as below A;
    /// against the floor of a stream sent earlier through the empty queue, the judge does not.
    #[test]
    fn a_stream_into_a_full_queue_is_above_a() {
        use crate::fluid::FluidPath;
        use crate::trend::{stream_trend, Trend, TrendParams};
        let c = 20e6;
        let cross = mgrp_traffic::CrossPattern::parse("cbr:19.4mbit").unwrap();
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(cross)).unwrap();
        let mut j = QueueJudge::new(QueueParams::for_capacity(c));
        // Through the empty queue (cross traffic alone never queues): the floor.
        let early = TrainSpec::constant_rate(50, 200, 0.02 * c);
        let t = 1_000_000_000;
        assert_eq!(j.judge(&path.send_train(t, &early), 50), Queue::Clear);
        // A burst of 150 MTU probes fills the 100-frame buffer.
        let burst = TrainSpec::constant_rate(150, 1472, 1e12);
        path.send_train(2_000_000_000, &burst);
        let stream = TrainSpec::constant_rate(50, 200, 0.05 * c);
        let obs = path.send_train(path.now_ns(), &stream);
        let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
        let sent = obs.stats.sent;
        assert!(obs.lost() * 10 < sent, "little loss: {}", obs.lost());
        assert_ne!(
            stream_trend(&owd, sent, &TrendParams::default()),
            Trend::Increasing,
            "the trend test alone misses it"
        );
        assert_ne!(j.judge(&obs, sent), Queue::Clear);
        assert_eq!(j.saturated, 1);
    }

    #[test]
    fn losses_at_a_high_queue_are_an_overflow() {
        let mut j = judge();
        // The queue fills over the stream and drops 3 of its probes at the top.
        let filling =
            |i: usize| (!(40..43).contains(&i)).then_some(if i < 20 { 0 } else { 30_000_000 });
        assert_eq!(j.judge(&stream(filling), 49), Queue::Overflow);
        // Two probes lost to something else, on an empty queue: not an overflow.
        let stray = |i: usize| (i != 10 && i != 30).then_some(0);
        assert_eq!(j.judge(&stream(stray), 49), Queue::Clear);
        assert_eq!(j.overflows, 1);
    }
}
