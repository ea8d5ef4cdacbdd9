//! `auto`, the default method: something useful at once, the accurate answer soon after, with
//! few bytes.
//!
//! 1. **Capacity** from a few short back-to-back trains (skipped when the caller knows C).
//! 2. **Chirps**: a handful of pathChirp trains give a rough A within a few round trips; it is
//!    reported at once, marked not final.
//! 3. **Lean SLoPS**: pathload's binary search with its trend tests, but with fleets of 4
//!    streams (3 must agree) of 50 probes, pFAST pacing, starting at the chirps' estimate instead
//!    of C/2 so a good rough estimate saves fleets. A stream lasts as long as the search needs:
//!    a rate a quarter of the current range above A must build at least two MTU service times
//!    (and 200 µs) of queue, so fleets far from A are short and cheap. The range is reported
//!    after every fleet; the final estimate is its middle once it is narrower than 3% of C.
//!
//! Why this split: chirps cost one train per estimate but read high wherever short bursts pass
//! a shaper faster than C, while SLoPS's constant-rate streams are accurate but cost a fleet per
//! halving. The rough answer only has to be good enough to start the search near A.

use crate::capacity::{CapacityEstimator, CapacityParams};
use crate::chirp::{Chirp, ChirpParams};
use crate::queue::QueueParams;
use crate::slops::{MedianGate, Pace, Slops, SlopsParams};
use crate::timeavg::{TimeAvg, TimeAvgParams};
use crate::trend::TrendParams;
use crate::{wire_bits, Estimate, Estimator, Quality, TrainResult, TrainSpec};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoParams {
    /// Known capacity: skip step 1.
    pub capacity_bps: Option<f64>,
    pub capacity: CapacityParams,
    pub chirps: u32,
    /// SLoPS streams per fleet and probes per stream.
    pub fleet: usize,
    pub stream_len: usize,
    /// [`SlopsParams::min_stream_len`]: on paths of at least `large_probes_from_bps`, the
    /// search's streams are sent in the largest probes that leave at least this many (`None`:
    /// always `stream_len` probes, as small as the rate allows at the least gap).
    pub min_stream_len: Option<usize>,
    /// Why only fast paths (measured on the testbed, docs/results/accuracy-probe-size.md): at
    /// 100 Mbit/s small probes 100 µs apart read A low (108 interleaved runs per arm: CBR
    /// median error 10.6% → 8.5%, Poisson 15.9% → 14.8%, ranges held 80 → 93 and 88 → 94); at 20
    /// Mbit/s, where a host hiccup of a few hundred µs is well under the detectable queue (two
    /// MTU service times, 1.2 ms), fewer probes only cost CBR accuracy (25% load: 1.6% → 7.9%).
    pub large_probes_from_bps: f64,
    /// Final range width, as a fraction of C.
    pub resolution: f64,
    /// See [`SlopsParams::detect_ns`]: at least this long (ns) ...
    pub detect_ns: f64,
    /// ... and at least this many MTU (1514-byte frame) service times at C: one cross-traffic
    /// packet adds that much delay at once, so a trend must be larger than a few of them.
    pub detect_mtus: f64,
    pub min_gap_ns: u64,
    /// Fraction of a fleet that decides.
    pub fraction: f64,
    /// Re-test the converged bracket one resolution outside each bound before calling it final
    /// ([`SlopsParams::verify_bps`]).
    pub verify: bool,
    /// Spread each fleet's streams over at least this long (ns), so the value is A averaged at
    /// this time scale, not one phase of faster variation ([`SlopsParams::spread_ns`]); 0 =
    /// back to back.
    pub timescale_ns: u64,
    /// Range, value and confidence from all the evidence, calibrated on the fluid model
    /// ([`crate::calib`]); `false` = pathload's bracket.
    pub calibrated: bool,
    /// Count streams that met a standing or overflowing queue as "increasing"
    /// ([`crate::queue`]), against the lowest delay of every train of the run.
    pub queue: bool,
    /// When the search's own evidence says A alternates at its scale (fleets that contradict
    /// each other whatever A is, or streams that met a link saturated by other traffic where
    /// the search found room), measure the time average over this long instead
    /// ([`crate::timeavg`]); 0 = never.
    pub timeavg_span_ns: u64,
    /// Streams of the time average (one per rate stratum of C / streams).
    pub timeavg_streams: usize,
    /// The time average's [`TimeAvgParams::budget_ns`] (0: none). 4 s: on/off and STEP time
    /// averages on the testbed take 1.5–3 s; on a link 4 TCP flows hold full at 20 Mbit/s one
    /// took 15–18 s.
    pub timeavg_budget_ns: u64,
    /// The time average's [`TimeAvgParams::gap_share`] (`None`: equal weights, calib4).
    pub timeavg_gap_share: Option<f64>,
    /// The time average's [`TimeAvgParams::plateau_rises`] (`true`: calib6).
    pub timeavg_plateau: bool,
    /// The time average's [`TimeAvgParams::flat_slack`]. ½: a stream sized to build the
    /// detect delay (2 MTU times) at δ above A builds the trend test's least rise (1 MTU
    /// time) at δ/2. On the testbed's quiet runs (round 22's files) ½ read 20 Mbit/s time
    /// averages at 11.6% median error against 15.6% for ¾, 100 Mbit/s at 4.9% against 6.3%;
    /// the fluid model's calibration had ¾ (`docs/results/r23/README.md`).
    pub timeavg_flat_slack: f64,
    /// A search stream reads "increasing" only if its delays rose by at least this share of
    /// the queue its sizing excess would build (the detect delay above,
    /// [`TrendParams::min_rise_ns`]); 0: the trend tests' shape alone (pathload). Measured and
    /// rejected in calib8 (estimators.md): at 1 the search reads CBR 5–16% high.
    pub rise_floor: f64,
    /// [`SlopsParams::share_trim`]; 0 (calib8 measured 0.15 and 0.25: on/off 50 ms worse).
    pub share_trim: f64,
    /// The search's trend thresholds (pathload 1.3.2's by default; `min_rise_ns` is set from
    /// `rise_floor`). calib8 measured the paper's: on/off and 100 Mbit/s Poisson 25% better,
    /// Poisson at 50–75% load worse.
    pub trend: TrendParams,
    /// The search counts a stream without a trend verdict that watched a queue drain as below
    /// A ([`SlopsParams::drained_below`]; `false`: calib7).
    pub drained_below: bool,
    /// Take the time average also when at least 2 fleets split evenly at rates a factor 2 or
    /// more apart ([`crate::timeavg::split_fleets`]; `false`: calib7).
    pub split_alternates: bool,
    /// The search states the median of A over its streams where [`MedianGate`] allows
    /// (`None`: the mean, r14).
    pub median: Option<MedianGate>,
}

impl Default for AutoParams {
    fn default() -> Self {
        AutoParams {
            capacity_bps: None,
            capacity: CapacityParams {
                trains: 6,
                probes: 6,
                ..CapacityParams::default()
            },
            chirps: 3,
            fleet: 4,
            stream_len: 50,
            min_stream_len: Some(30),
            large_probes_from_bps: 50e6,
            resolution: 0.03,
            detect_ns: 200_000.0,
            detect_mtus: 2.0,
            min_gap_ns: 100_000,
            fraction: 0.7,
            verify: true,
            timescale_ns: 100_000_000,
            calibrated: true,
            queue: true,
            timeavg_span_ns: 1_000_000_000,
            timeavg_streams: 40,
            timeavg_budget_ns: 4_000_000_000,
            timeavg_gap_share: Some(0.5),
            timeavg_plateau: false,
            timeavg_flat_slack: 0.5,
            rise_floor: 0.0,
            share_trim: 0.0,
            trend: TrendParams::default(),
            drained_below: true,
            split_alternates: true,
            median: Some(MedianGate { band: 0.2 }),
        }
    }
}

enum Phase {
    Capacity(CapacityEstimator),
    Chirp(Chirp),
    Slops(Box<Slops>),
    TimeAvg(Box<TimeAvg>),
}

pub struct Auto {
    p: AutoParams,
    phase: Phase,
    capacity: Option<Estimate>,
    rough: Option<Estimate>,
    /// Bytes and trains of the phases already finished.
    done_bytes: u64,
    done_trains: u32,
    start: Option<u64>,
    last: u64,
    /// Per train of the earlier phases, its lowest delay comparable across trains and that
    /// probe's size (the capacity is not known yet): the empty-queue floor the search judges
    /// standing queues against. At most [`MAX_FLOORS`].
    floors: Vec<(f64, u16)>,
    /// The finished search, once the time average has taken over.
    searched: Option<Box<Slops>>,
}

/// Trains before the search whose floor is kept (capacity and chirp phases send about ten).
const MAX_FLOORS: usize = 64;

impl Auto {
    pub fn new(p: AutoParams) -> Self {
        let mut a = Auto {
            p,
            phase: Phase::Capacity(CapacityEstimator::new(p.capacity)),
            capacity: None,
            rough: None,
            done_bytes: 0,
            done_trains: 0,
            start: None,
            last: 0,
            floors: Vec::new(),
            searched: None,
        };
        if let Some(c) = p.capacity_bps {
            a.start_chirps(c);
        }
        a
    }

    /// The chirps' rough estimate, once there is one.
    pub fn rough(&self) -> Option<Estimate> {
        self.rough.clone()
    }

    /// What the SLoPS phase saw, once it has started.
    pub fn evidence(&self) -> Option<crate::slops::Evidence> {
        self.search().map(|s| s.evidence())
    }

    /// The SLoPS search, running or finished.
    fn search(&self) -> Option<&Slops> {
        match &self.phase {
            Phase::Slops(s) => Some(s),
            _ => self.searched.as_deref(),
        }
    }

    /// The time-average phase, when the search said A alternates.
    pub fn timeavg(&self) -> Option<&TimeAvg> {
        match &self.phase {
            Phase::TimeAvg(t) => Some(t),
            _ => None,
        }
    }

    /// The search's own value (the time average may replace it).
    pub fn search_value(&self) -> Option<f64> {
        self.search()
            .and_then(|s| s.estimate())
            .map(|e| e.value_bps)
    }

    /// The rates of the search's streams that met a saturated link.
    pub fn saturated_rates(&self) -> &[f64] {
        self.search().map_or(&[], |s| s.saturated_rates())
    }

    /// The SLoPS phase's fleets' streams.
    pub fn votes(&self) -> &[crate::slops::Vote] {
        self.search().map_or(&[], |s| s.votes())
    }

    /// The SLoPS phase's fleets: rate and verdict.
    pub fn history(&self) -> &[(f64, crate::slops::FleetVerdict)] {
        self.search().map_or(&[], |s| s.history())
    }

    /// The finished search's evidence says A alternates at its scale: whole fleets on the wrong
    /// side of every single value (at least 3 streams and a fifth of those with a verdict), or
    /// streams that met a link saturated by other traffic (a standing queue at their start, or
    /// most of them lost: at least 2 and 10% of the streams with a verdict) while the search
    /// still found room (its value above 10% of C) or half of its streams met it (calib6: with
    /// the agent's prompt reports of lossy trains a search at 100 Mbit/s on/off 500 ms 50% can
    /// walk down inside one on phase to A ≈ 0, where the 300 ms linger used to carry it across
    /// phases; with this, on the fluid model's 24 defined cells × 200 seeds, ranges held 4187 →
    /// 4248 and > 50% off 126 → 65, on the testbed-like model with the new wait 4114 → 4141
    /// and 260 → 230; CBR and Poisson unchanged). A steady A leaves neither: a stream just
    /// above it builds its queue from empty. (One saturated stream is not enough: Poisson cross
    /// traffic at 75% load leaves a queue of 8 MTU frames now and then; with one, 31 of 40
    /// fluid runs at 20 Mbit/s went to the time average. With 2 and no share, 20 Mbit/s
    /// Poisson at 75% paid +50% bytes and +0.8 s at the median; with 15%, 10 more of 2400
    /// fluid runs in the defined cells were off by > 50%. A re-test that contradicted the
    /// bracket is not enough either: calib3 started the time average on it, and 5–12% of
    /// CBR/Poisson runs paid 1–3 s and ~1 MB for it; without it the fluid grid's defined cells
    /// hold 852 ranges of 960 instead of 882, with CBR/Poisson costs at main's.)
    ///
    /// Or streams that met a saturated link while at least 3 others found room (not
    /// increasing), whatever the search's value: A was not pinned at 0, it came and went. On
    /// the testbed at 100 Mbit/s (`auto_study`, 52 runs of on/off at 50 ms, 50 and 75% load),
    /// 5 searches ended at 0.4–22% of C, 56–92% off; 4 of them had 2–16 saturated streams
    /// (15–48% of those with a verdict: not "most") and 3–9 flat ones. A link that TCP holds
    /// full seldom shows room: at 20 Mbit/s with 4 TCP flows 8 searches had 0–2 flat streams,
    /// and the time average costs 15–18 s there (each lossy stream waits for the stragglers of
    /// a 150 ms queue). At 100 Mbit/s 4 TCP flows leave room now and then (0–6 flat streams;
    /// 6 of 8 runs took the time average, 2.2–3.3 s).
    ///
    /// Or fleets split evenly at rates far apart, 3 of them a factor 2 or 2 a factor 3
    /// ([`crate::timeavg::split_fleets`], onoff8): half the time below the lowest, half above
    /// the highest. On/off at 50 ms and 50% load splits fleets at every rate the search tries (A is 0
    /// or C), yet its streams rarely meet a saturated link (the on phase offers exactly C) and
    /// whole fleets seldom stand on the wrong side of every value. Testbed-like model, 200
    /// seeds: those cells held 206 → 332 of 400 with the drained-stream rule; Poisson runs
    /// that take the time average by it (39 more of 1200) cost time, not coverage (held 1165 →
    /// 1164; 100 Mbit/s at 75%: 14 more of 200, p90 final 1.05 → 1.50 s).
    fn alternates(&self, s: &Slops, c: f64) -> bool {
        let (wrong, total) = crate::timeavg::contradicting_streams(s.votes(), c);
        let ev = s.evidence();
        let room = s.estimate().is_some_and(|e| e.value_bps > 0.1 * c);
        let saturated = ev.saturated >= 2 && ev.saturated as f64 >= 0.1 * ev.voted as f64;
        let most = ev.saturated as f64 >= 0.5 * ev.voted as f64;
        let room_too = s.votes().iter().map(|v| v.not_increasing).sum::<u32>() >= 3;
        let (splits, apart) = crate::timeavg::split_fleets(s.votes());
        // Three even splits a factor 2 apart, or two a factor 3 apart (two a factor 2 apart
        // sent 4–6 of 400 Poisson runs at 25/50% load to the time average on the model
        // without host features, against at most 2 now).
        let split = self.p.split_alternates
            && ((splits >= 3 && apart >= 2.0) || (splits >= 2 && apart >= 3.0));
        (wrong >= 3 && wrong as f64 >= 0.2 * total as f64)
            || (saturated && (room || most || room_too))
            || split
    }

    /// Leave the finished search for the time average.
    fn start_timeavg(&mut self, c: f64) {
        let Phase::Slops(s) = &self.phase else {
            return;
        };
        let detect = self
            .p
            .detect_ns
            .max(self.p.detect_mtus * 1514.0 * 8.0 / c * 1e9);
        let t = TimeAvg::new(TimeAvgParams {
            span_ns: self.p.timeavg_span_ns,
            streams: self.p.timeavg_streams,
            queue: self.p.queue.then(|| QueueParams {
                floor_ns: s.queue_floor(),
                ..QueueParams::for_capacity(c)
            }),
            // Streams sized to detect C/10 rather than C/16: shorter, so the time average's own
            // load (40 streams in its second) fills an on phase's queue less. On the fluid model
            // (`auto::tests::onoff_in_a_full_queue_is_not_read_as_room`, `calib::tests::onoff_
            // at_50ms_...`): at C/16 20 Mbit/s on/off 50 ms at 50% read 0.257 median at the
            // stated scale, at C/10 0.162, with no estimate off by > 50% either way; at C/8 ten
            // of 20 runs at 75% load were (the streams too short to rise in the off phase's
            // backlog).
            delta_frac: 0.1,
            gap_share: self.p.timeavg_gap_share,
            plateau_rises: self.p.timeavg_plateau,
            flat_slack: self.p.timeavg_flat_slack,
            budget_ns: (self.p.timeavg_budget_ns > 0).then_some(self.p.timeavg_budget_ns),
            ..TimeAvgParams::for_capacity(c, detect, self.last ^ (c as u64))
        });
        let Phase::Slops(s) = std::mem::replace(&mut self.phase, Phase::TimeAvg(Box::new(t)))
        else {
            unreachable!()
        };
        if let Some(e) = s.estimate() {
            self.done_bytes += e.quality.probe_bytes;
            self.done_trains += e.quality.trains;
        }
        self.searched = Some(s);
    }

    /// The final estimate's confidence: the measured share of ranges that held the truth
    /// among fluid-model runs whose evidence scored the same ([`crate::calib`]).
    fn calibrated_confidence(&self, s: &Slops, e: &Estimate) -> f64 {
        let c = self.capacity_bps().unwrap_or(e.high_bps).max(1.0);
        let rough = self.rough.as_ref().map(|r| r.value_bps);
        crate::calib::confidence(crate::calib::raw_score(
            &s.evidence(),
            rough,
            e.value_bps,
            c,
        ))
    }

    fn capacity_bps(&self) -> Option<f64> {
        self.p
            .capacity_bps
            .or(self.capacity.as_ref().map(|e| e.value_bps))
    }

    fn start_chirps(&mut self, c: f64) {
        self.phase = Phase::Chirp(Chirp::new(ChirpParams {
            chirps: Some(self.p.chirps),
            smooth: self.p.chirps as usize,
            interval_ns: 0,
            ..ChirpParams::for_capacity(c)
        }));
    }

    fn start_slops(&mut self, c: f64) {
        let start = self.rough.as_ref().map(|e| e.value_bps);
        let w = self.p.resolution * c;
        let detect = self
            .p
            .detect_ns
            .max(self.p.detect_mtus * 1514.0 * 8.0 / c * 1e9);
        self.phase = Phase::Slops(Box::new(Slops::new(SlopsParams {
            fleet: self.p.fleet,
            stream_len: self.p.stream_len,
            min_stream_len: self
                .p
                .min_stream_len
                .filter(|_| c >= self.p.large_probes_from_bps),
            resolution_bps: w,
            grey_bps: w,
            start_bps: start,
            detect_ns: Some(detect),
            trend: TrendParams {
                min_rise_ns: self.p.rise_floor * detect,
                ..self.p.trend
            },
            min_gap_ns: self.p.min_gap_ns,
            fraction: self.p.fraction,
            verify_bps: self.p.verify.then_some(w),
            check_fleet: self.p.fleet,
            verify_always: false,
            spread_ns: (self.p.timescale_ns > 0).then_some(self.p.timescale_ns),
            calibrated: self.p.calibrated,
            share_trim: self.p.share_trim,
            queue: self.p.queue.then(|| QueueParams {
                floor_ns: self
                    .floors
                    .iter()
                    .map(|(d, size)| d - wire_bits(*size) * 1e9 / c.max(1.0))
                    .reduce(f64::min),
                ..QueueParams::for_capacity(c)
            }),
            drained_below: self.p.drained_below,
            median: self.p.median,
            ..SlopsParams::for_capacity(c, Pace::Fast)
        })));
    }

    fn current(&mut self) -> &mut dyn Estimator {
        match &mut self.phase {
            Phase::Capacity(e) => e,
            Phase::Chirp(e) => e,
            Phase::Slops(e) => e,
            Phase::TimeAvg(e) => e,
        }
    }

    /// Move to the next phase when the current one has finished.
    fn advance(&mut self) {
        let (done, est) = {
            let cur = self.current();
            (cur.is_done(), cur.estimate())
        };
        if !done {
            return;
        }
        if let Phase::Slops(s) = &self.phase {
            // The last phase unless A alternates: its bytes are counted by `estimate()` as the
            // phase's own.
            if let Some(c) = self.capacity_bps().filter(|_| self.p.timeavg_span_ns > 0) {
                if self.alternates(s, c) {
                    self.start_timeavg(c);
                }
            }
            return;
        }
        if matches!(self.phase, Phase::TimeAvg(_)) {
            return;
        }
        if let Some(e) = &est {
            self.done_bytes += e.quality.probe_bytes;
            self.done_trains += e.quality.trains;
        }
        match self.phase {
            Phase::Capacity(_) => {
                self.capacity = est;
                if let Some(c) = self.capacity_bps() {
                    self.start_chirps(c);
                }
            }
            Phase::Chirp(_) => {
                self.rough = est;
                if let Some(c) = self.capacity_bps() {
                    self.start_slops(c);
                }
            }
            Phase::Slops(_) | Phase::TimeAvg(_) => {}
        }
    }

    fn wrap(&self, e: Estimate, method: &'static str, final_: bool) -> Estimate {
        // `e` counts only its own phase.
        let (b, t) = (e.quality.probe_bytes, e.quality.trains);
        Estimate {
            final_,
            quality: Quality {
                method,
                elapsed_s: self
                    .start
                    .map_or(0.0, |s| self.last.saturating_sub(s) as f64 / 1e9),
                probe_bytes: self.done_bytes + b,
                trains: self.done_trains + t,
                ..e.quality
            },
            ..e
        }
    }
}

impl Estimator for Auto {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        self.start.get_or_insert(now_ns);
        self.current().poll_train(now_ns)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        self.last = now_ns;
        let early = matches!(self.phase, Phase::Capacity(_) | Phase::Chirp(_));
        if early && self.floors.len() < MAX_FLOORS {
            let lowest = obs
                .probes
                .iter()
                .filter_map(|p| Some((p.rx_ns?.0 as f64 - p.tx_real_ns.0 as f64, p.size)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            self.floors.extend(lowest);
        }
        self.current().handle_train(now_ns, obs);
        self.advance();
    }

    fn estimate(&self) -> Option<Estimate> {
        match &self.phase {
            Phase::Capacity(_) => None,
            Phase::TimeAvg(t) => {
                let fin = t.is_done();
                let e = match t.estimate().filter(|_| fin) {
                    Some(mut e) => {
                        e.quality.confidence = crate::calib::TIMEAVG_HELD;
                        e
                    }
                    // Until the time average is in, the search's answer, not final.
                    None => {
                        let mut e = self.searched.as_ref()?.estimate()?;
                        // Its bytes are counted in the finished phases already.
                        e.quality.probe_bytes = 0;
                        e.quality.trains = 0;
                        e
                    }
                };
                Some(self.wrap(e, if fin { "auto:timeavg" } else { "auto:slops" }, fin))
            }
            Phase::Chirp(c) => c.estimate().map(|e| self.wrap(e, "auto:chirp", false)),
            Phase::Slops(s) => match s.estimate() {
                Some(mut e) => {
                    let fin = e.final_;
                    if fin && self.p.calibrated {
                        e.quality.confidence = self.calibrated_confidence(s, &e);
                    }
                    Some(self.wrap(e, "auto:slops", fin))
                }
                None => self.rough.clone().map(|mut r| {
                    r.quality.elapsed_s = self
                        .start
                        .map_or(0.0, |s| self.last.saturating_sub(s) as f64 / 1e9);
                    r.quality.probe_bytes = self.done_bytes;
                    r.quality.trains = self.done_trains;
                    r.quality.method = "auto:chirp";
                    r.final_ = false;
                    r
                }),
            },
        }
    }

    fn is_done(&self) -> bool {
        match &self.phase {
            Phase::Slops(s) => s.is_done(),
            Phase::TimeAvg(t) => t.is_done(),
            // A phase that finished without an estimate (nothing came back) ends the run.
            Phase::Capacity(c) => c.is_done(),
            Phase::Chirp(c) => c.is_done(),
        }
    }

    /// The capacity it measured (`None` when it was given one).
    fn capacity(&self) -> Option<Estimate> {
        self.capacity.clone()
    }

    fn next_wakeup(&self) -> Option<u64> {
        match &self.phase {
            Phase::Capacity(e) => e.next_wakeup(),
            Phase::Chirp(e) => e.next_wakeup(),
            Phase::Slops(e) => e.next_wakeup(),
            Phase::TimeAvg(e) => e.next_wakeup(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, drive_with, FluidPath};
    use mgrp_traffic::CrossPattern;

    fn path(c: f64, cross: Option<&str>, seed: u64) -> FluidPath {
        let cross = cross.map(|s| CrossPattern::parse(&format!("{s},seed={seed}")).unwrap());
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross).unwrap();
        path.idle_until(500_000_000 + seed * 7_654_321 % 300_000_000);
        path
    }

    /// Estimates with their time since the start, and the truth over the run.
    fn run(path: &mut FluidPath, p: AutoParams) -> (Vec<(f64, Estimate)>, f64) {
        let t0 = path.now_ns();
        let mut est = Auto::new(p);
        let out = drive(&mut est, path, t0 + 60_000_000_000);
        assert!(est.is_done());
        let out = out
            .into_iter()
            .map(|(t, e)| ((t - t0) as f64 / 1e9, e))
            .collect();
        (out, path.avail_bps(t0, path.now_ns()))
    }

    fn err(e: &Estimate, truth: f64, c: f64) -> f64 {
        (e.value_bps - truth).abs() / truth.max(0.05 * c)
    }

    /// The targets, on cross traffic that is smooth at the scale of a stream: median
    /// error ≤ 5%, a first estimate within 1 s and the final within 3 s (path time, RTT 20 ms).
    #[test]
    fn meets_its_targets_on_smooth_cross_traffic() {
        let (mut errs, mut first, mut last) = (Vec::new(), 0.0_f64, 0.0_f64);
        let mut timeavg = 0;
        for seed in 1..=5 {
            for (c, cross) in [
                (20e6, None),
                (20e6, Some("cbr:10mbit,size=500")),
                (20e6, Some("poisson:5mbit,size=300")),
                (100e6, Some("cbr:25mbit,size=500")),
                (100e6, Some("poisson:50mbit,size=1000")),
            ] {
                let mut p = path(c, cross, seed);
                let (out, truth) = run(&mut p, AutoParams::default());
                let (t, e) = out.last().unwrap();
                assert!(e.final_, "{e:?}");
                if e.quality.method != "auto:slops" {
                    eprintln!("{c} {cross:?} s{seed}: {e:?} truth {truth}");
                    timeavg += 1;
                }
                // Every earlier estimate is marked as not final, and the rough one comes first.
                assert!(out[..out.len() - 1].iter().all(|(_, e)| !e.final_));
                assert_eq!(out[0].1.quality.method, "auto:chirp");
                errs.push(err(e, truth, c));
                first = first.max(out[0].0);
                last = last.max(*t);
            }
        }
        // The search ends every run but one: with the larger probes of ≥ 50 Mbit/s paths
        // (`min_stream_len`), Poisson at 50 Mbit/s seed 5 took the time average (37.0 against
        // 50.3 Mbit/s, its range held); with 50 small probes a stream, none did.
        assert!(timeavg <= 1, "{timeavg} runs took the time average");
        errs.sort_by(f64::total_cmp);
        let med = errs[errs.len() / 2];
        assert!(med <= 0.05, "median {med}: {errs:?}");
        assert!(
            first <= 1.0 && last <= 3.0,
            "first {first} s, final {last} s"
        );
    }

    /// The final estimate's bytes and trains are exactly what was sent, over all phases.
    #[test]
    fn bytes_and_trains_are_counted_once() {
        let mut path = path(20e6, Some("cbr:5mbit,size=500"), 3);
        let mut a = Auto::new(AutoParams::default());
        let (mut bytes, mut trains) = (0u64, 0u32);
        let mut now = path.now_ns();
        while !a.is_done() {
            match a.poll_train(now) {
                Some(t) => {
                    bytes += t.bytes();
                    trains += 1;
                    let obs = path.send_train(now, &t);
                    now = path.now_ns() + 30_000_000;
                    path.idle_until(now);
                    a.handle_train(now, &obs);
                }
                None => {
                    now = a.next_wakeup().unwrap_or(now).max(now + 1_000_000);
                    path.idle_until(now);
                }
            }
        }
        let e = a.estimate().unwrap();
        assert!(e.final_);
        assert_eq!((e.quality.probe_bytes, e.quality.trains), (bytes, trains));
    }

    /// The search reports how much its streams' delays wander against the rise they were
    /// sized for: little under CBR of small packets, more under Poisson at 75% (fluid model,
    /// seed 1; the testbed's figures are in [`crate::slops::Evidence::noise`]).
    #[test]
    fn the_search_reports_its_streams_noise() {
        let noise = |cross: &str| {
            let mut p = path(20e6, Some(cross), 1);
            let mut a = Auto::new(AutoParams::default());
            drive(&mut a, &mut p, 60_000_000_000);
            a.evidence().unwrap().noise
        };
        let (cbr, poisson) = (
            noise("cbr:10mbit,size=500"),
            noise("poisson:15mbit,size=1000"),
        );
        assert!(cbr.is_finite() && poisson.is_finite());
        assert!(cbr < 0.3, "CBR {cbr}");
        assert!(poisson > cbr, "Poisson {poisson} against CBR {cbr}");
    }

    /// Bytes and trains add up over the phases; a known capacity skips the capacity phase.
    #[test]
    fn accounting_across_phases() {
        let mut p = path(20e6, Some("cbr:5mbit,size=500"), 1);
        let (out, _) = run(&mut p, AutoParams::default());
        let e = &out.last().unwrap().1;
        let mut p2 = path(20e6, Some("cbr:5mbit,size=500"), 1);
        let mut a = Auto::new(AutoParams::default());
        drive(&mut a, &mut p2, 60_000_000_000);
        let cap = a.capacity().unwrap();
        let rough = a.rough().unwrap();
        assert!((cap.value_bps / 20e6 - 1.0).abs() < 0.01);
        assert!(e.quality.probe_bytes > cap.quality.probe_bytes + rough.quality.probe_bytes);
        assert!(e.quality.trains > cap.quality.trains + rough.quality.trains);
        let mut p3 = path(20e6, Some("cbr:5mbit,size=500"), 1);
        let (known, _) = run(
            &mut p3,
            AutoParams {
                capacity_bps: Some(20e6),
                ..AutoParams::default()
            },
        );
        let k = &known.last().unwrap().1;
        assert!(k.quality.probe_bytes < e.quality.probe_bytes);
    }

    /// A receiver that stalls now and then: with probability `q` a SLoPS stream (≥ 20 probes)
    /// arrives with a spurious ramp of `ramp_ns` over its length, so its delays look increasing
    /// wherever it was sent (what a preempted receiver or a lost-probe burst does on a host).
    fn stalls(seed: u64, q: f64, ramp_ns: u64) -> impl FnMut(&TrainSpec, &mut TrainResult) {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        move |t, r| {
            if t.probes.len() < 20 {
                return;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (x >> 11) as f64 / (1u64 << 53) as f64 >= q {
                return;
            }
            let n = r.probes.len().max(2) as u64 - 1;
            for (i, p) in r.probes.iter_mut().enumerate() {
                if let Some(rx) = &mut p.rx_ns {
                    rx.0 += ramp_ns * i as u64 / n;
                }
            }
        }
    }

    /// Final estimates of `auto` over seeds on a path with stalls: (relative errors, share of
    /// ranges holding the truth, mean confidence of the runs whose range missed, of those that
    /// held, bytes).
    fn stalled_runs(verify: bool, q: f64, cells: &[(f64, &str)]) -> (Vec<f64>, f64, f64, f64, f64) {
        let (mut errs, mut held, mut conf_miss, mut conf_held, mut bytes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0.0);
        for seed in 1..=40 {
            for &(c, cross) in cells {
                let mut p = path(c, Some(cross), seed);
                let t0 = p.now_ns();
                let mut est = Auto::new(AutoParams {
                    verify,
                    ..AutoParams::default()
                });
                let out = drive_with(
                    &mut est,
                    &mut p,
                    t0 + 60_000_000_000,
                    stalls(seed, q, 2_000_000),
                );
                let truth = p.avail_bps(t0, p.now_ns());
                let e = &out.last().unwrap().1;
                errs.push(err(e, truth, c));
                let ok = e.low_bps <= truth && truth <= e.high_bps;
                held.push(ok);
                if ok {
                    conf_held.push(e.quality.confidence)
                } else {
                    conf_miss.push(e.quality.confidence)
                }
                bytes += e.quality.probe_bytes as f64;
            }
        }
        errs.sort_by(f64::total_cmp);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let cover = held.iter().filter(|h| **h).count() as f64 / held.len() as f64;
        (
            errs,
            cover,
            mean(&conf_miss),
            mean(&conf_held),
            bytes / held.len() as f64,
        )
    }

    #[test]
    #[ignore]
    fn study_stalls() {
        let cells = [
            (20e6, "cbr:10mbit,size=500"),
            (100e6, "poisson:50mbit,size=1000"),
            (20e6, "poisson:5mbit,size=300"),
            (100e6, "cbr:25mbit,size=500"),
        ];
        for q in [0.0, 0.2] {
            for cell in cells {
                for verify in [false, true] {
                    eprint!("{cell:?} ");
                    let (e, cover, cm, ch, b) = stalled_runs(verify, q, &[cell]);
                    let n = e.len();
                    eprintln!(
                    "q {q} verify {verify}: median {:.3} p90 {:.3} max {:.3} >25% {} >50% {} cover {:.2} conf miss {:.2} held {:.2} bytes {:.0}",
                    e[n / 2], e[n * 9 / 10], e[n - 1],
                    e.iter().filter(|x| **x > 0.25).count(),
                    e.iter().filter(|x| **x > 0.5).count(),
                    cover, cm, ch, b
                );
                }
            }
        }
    }

    /// The failure of issue 20, reproduced: the first two fleets of the search, sent below A,
    /// arrive looking increasing (a host that stalls), and pathload's search walks down and
    /// never comes back. Re-testing the bracket catches both misjudged fleets, reopens the search
    /// and ends near A, with a confidence that says the evidence disagreed.
    #[test]
    fn a_search_walked_down_by_misjudged_fleets_is_retested() {
        let run = |verify: bool| {
            let mut p = path(20e6, Some("cbr:10mbit,size=500"), 2);
            let t0 = p.now_ns();
            let mut est = Auto::new(AutoParams {
                verify,
                ..AutoParams::default()
            });
            let mut streams = 0;
            let out = drive_with(&mut est, &mut p, t0 + 60_000_000_000, |t, r| {
                if t.probes.len() >= 20 {
                    streams += 1;
                    if streams <= 8 {
                        let n = r.probes.len() as u64 - 1;
                        for (i, pr) in r.probes.iter_mut().enumerate() {
                            if let Some(rx) = &mut pr.rx_ns {
                                rx.0 += 2_000_000 * i as u64 / n;
                            }
                        }
                    }
                }
            });
            let truth = p.avail_bps(t0, p.now_ns());
            (out.last().unwrap().1.clone(), truth)
        };
        let (walked, truth) = run(false);
        assert!(err(&walked, truth, 20e6) > 0.5, "{walked:?} truth {truth}");
        let (checked, truth) = run(true);
        assert!(
            err(&checked, truth, 20e6) < 0.05,
            "{checked:?} truth {truth}"
        );
        assert!(checked.final_);
        assert!(checked.low_bps <= truth && truth <= checked.high_bps);
        let (quiet, _) = stalled_runs_one(2);
        // Calibrated, the confidence is the share of such runs whose range held the truth: lower
        // for the contradicted search (0.74 against 0.90 measured), though the fluid model's
        // re-tests usually recover (its range held here).
        assert!(
            checked.quality.confidence < quiet.quality.confidence,
            "contradicted {} vs quiet {}",
            checked.quality.confidence,
            quiet.quality.confidence
        );
    }

    fn stalled_runs_one(seed: u64) -> (Estimate, f64) {
        let mut p = path(20e6, Some("cbr:10mbit,size=500"), seed);
        let (out, truth) = run(&mut p, AutoParams::default());
        (out.last().unwrap().1.clone(), truth)
    }

    /// Issue 20's coverage target on the fluid model: over 40 seeds of four cells (CBR and
    /// Poisson at 20 and 100 Mbit/s), the stated range holds the truth in ≥ 90% of runs
    /// (measured 0.94: 1.00, 0.78, 0.97, 1.00; with pathload's bare bracket 0.81); and confidence means
    /// something: the runs whose range missed had a lower mean confidence than those that held.
    #[test]
    fn ranges_hold_the_truth_and_confidence_separates() {
        let cells = [
            (20e6, "cbr:10mbit,size=500"),
            (100e6, "poisson:50mbit,size=1000"),
            (20e6, "poisson:5mbit,size=300"),
            (100e6, "cbr:25mbit,size=500"),
        ];
        let (errs, cover, conf_miss, conf_held, _) = stalled_runs(true, 0.0, &cells);
        assert!(cover >= 0.9, "coverage {cover}");
        assert!(conf_miss < conf_held, "missed {conf_miss} held {conf_held}");
        assert!(errs.last().unwrap() < &0.5, "a wild miss: {errs:?}");
    }

    /// One run of `auto` on the fluid model under on/off cross traffic (`on_ms` on, as long
    /// off, `load`% of C on average, MTU packets): the final estimate and the truth over the
    /// run as the bottleneck served it, C − the cross traffic delivered (offered less what the
    /// full queue dropped: at 75% load the on phase offers 1.5·C, and what is dropped was
    /// never available to anyone).
    fn onoff_run(c: f64, on_ms: u32, load: u32, seed: u64, p: AutoParams) -> (Estimate, f64) {
        let x = c * load as f64 / 100.0 / 1e6;
        let spec = format!("onoff:{x:.3}mbit,on={on_ms}ms,off={on_ms}ms,seed={seed}");
        let cross = CrossPattern::parse(&spec).unwrap();
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(cross)).unwrap();
        path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
        let (t0, dropped0) = (path.now_ns(), path.dropped_cross);
        let mut a = Auto::new(p);
        let out = drive(&mut a, &mut path, t0 + 60_000_000_000);
        let end = path.now_ns();
        let dropped_bits = (path.dropped_cross - dropped0) as f64 * 1514.0 * 8.0;
        let truth = path.avail_bps(t0, end) + dropped_bits * 1e9 / (end - t0) as f64;
        (out.last().unwrap().1.clone(), truth.min(c))
    }

    /// (estimates off by more than 50%, ranges that held the truth) over `seeds` seeds of a
    /// cell.
    fn onoff_cell(c: f64, on_ms: u32, load: u32, seeds: u64, p: AutoParams) -> (usize, usize) {
        let (mut wild, mut held) = (0, 0);
        for seed in 1..=seeds {
            let (e, truth) = onoff_run(c, on_ms, load, seed, p);
            wild += (err(&e, truth, c) > 0.5) as usize;
            held += (e.low_bps <= truth && truth <= e.high_bps) as usize;
        }
        (wild, held)
    }

    /// Issue 20's on/off miss, reproduced and fixed: under on/off cross traffic at 50 ms and
    /// 500 ms periods and 50% and 75% load (20 and 100 Mbit/s, 20 seeds each, 160 runs), the
    /// search alone (main before this change: no standing-queue evidence, no time average)
    /// left 43 estimates off by more than 50% and 73 ranges that held the truth; now 14 and
    /// 141 (per cell: 20 Mbit/s on/off 500 ms at 75% 11 → 0 off, 2 → 16 held; 100 Mbit/s
    /// on/off 50 ms at 75% 9 → 0, 5 → 20; worse at 20 Mbit/s on/off 50 ms 75%, 2 → 12 off:
    /// there the on phase's queue falls at its end and the draining rule, which keeps the
    /// search's own backlog from passing for a saturated link, no longer counts it; 0 and
    /// 146 without that rule, which misread CBR/Poisson on the testbed). In the on phase the drop-tail queue is full and its delay flat, so a stream
    /// sent then does not rise; with fleets spread over 100 ms a 500 ms phase fills whole
    /// fleets. Now such streams count as "above A", and a search that met a saturated link
    /// where it also found room measures the time average over 1 s. The model is
    /// deterministic for a seed: the counts are exact, and the assertions say "fewer misses
    /// and more ranges held than before", with the measured margins far from the line.
    #[test]
    fn onoff_in_a_full_queue_is_not_read_as_room() {
        let before = AutoParams {
            queue: false,
            timeavg_span_ns: 0,
            ..AutoParams::default()
        };
        let (mut tot_b, mut tot_a) = ((0, 0), (0, 0));
        for c in [20e6, 100e6] {
            for on_ms in [50, 500] {
                for load in [50, 75] {
                    let b = onoff_cell(c, on_ms, load, 20, before);
                    let a = onoff_cell(c, on_ms, load, 20, AutoParams::default());
                    eprintln!(
                        "{c} on/off {on_ms} ms {load}%: > 50% off {} -> {}, held {} -> {}",
                        b.0, a.0, b.1, a.1
                    );
                    tot_b = (tot_b.0 + b.0, tot_b.1 + b.1);
                    tot_a = (tot_a.0 + a.0, tot_a.1 + a.1);
                }
            }
        }
        eprintln!(
            "all: > 50% off {} -> {}, held {} -> {}",
            tot_b.0, tot_a.0, tot_b.1, tot_a.1
        );
        assert!(tot_a.0 < tot_b.0, "misses {tot_b:?} -> {tot_a:?}");
        assert!(tot_a.1 > tot_b.1, "held {tot_b:?} -> {tot_a:?}");
    }

    /// Cost kept at main's level (issue 20, item 2): the time average runs only when the
    /// search's own evidence says A alternates, so on CBR it never runs, and on Poisson at 25
    /// and 50% load at most in 1 of 100 runs (measured over seeds 1..=100: CBR 0 of 600, Poisson
    /// 25/50% 1 of 400). Poisson at 75% at 20 Mbit/s is where the queue stands long enough now
    /// and then to read as saturated (22% of runs there, not asserted).
    #[test]
    fn smooth_cross_traffic_keeps_the_search() {
        use crate::calib::study::one;
        let mut ta = (0, 0);
        let mut fast = 0;
        for c in [20e6, 100e6] {
            for (kind, loads) in [("cbr", &[25, 50, 75][..]), ("poisson", &[25, 50][..])] {
                for &load in loads {
                    for seed in 1..=100 {
                        let o = one(c, kind, load, seed, AutoParams::default()).unwrap();
                        if o.timeavg() {
                            if kind == "cbr" {
                                ta.0 += 1;
                            } else {
                                ta.1 += 1;
                                fast += usize::from(c > 50e6);
                            }
                        }
                    }
                }
            }
        }
        eprintln!(
            "time average: CBR {} of 600, Poisson 25/50% {} of 400 ({fast} at 100 Mbit/s)",
            ta.0, ta.1
        );
        assert_eq!(ta.0, 0, "CBR runs that took the time average");
        assert!(
            ta.1 - fast <= 4,
            "20 Mbit/s Poisson runs that took the time average: {}",
            ta.1 - fast
        );
        // At 100 Mbit/s the search's streams are 30 larger probes, not 50 small ones
        // (`AutoParams::min_stream_len`): their noisier trend verdicts split fleets, and 12 of
        // 200 runs take the time average (1 s and ~1 MB more; with small probes 1 of all 400
        // runs did). The price of what the testbed measured at 100 Mbit/s (108 interleaved runs
        // per arm): ranges held 93 and 94 instead of 80 and 88 on CBR and Poisson, +1% / +11%
        // bytes (docs/results/accuracy-probe-size.md).
        assert!(
            fast <= 12,
            "100 Mbit/s Poisson runs that took the time average: {fast}"
        );
    }

    /// Run again after the cross traffic changes: the next estimate follows the new truth.
    #[test]
    fn tracks_a_step_change() {
        let mut p = FluidPath::new(
            20e6,
            100.0 * 1514.0,
            10_000_000,
            Some(CrossPattern::parse("step:4mbit,14mbit,every=4s,size=500").unwrap()),
        )
        .unwrap();
        p.idle_until(500_000_000);
        let (before, _) = run(&mut p, AutoParams::default());
        p.idle_until(4_500_000_000);
        let (after, _) = run(&mut p, AutoParams::default());
        let b = before.last().unwrap().1.value_bps;
        let a = after.last().unwrap().1.value_bps;
        assert!((b / 16e6 - 1.0).abs() < 0.05, "before the step: {b}");
        assert!((a / 6e6 - 1.0).abs() < 0.10, "after the step: {a}");
    }
}
