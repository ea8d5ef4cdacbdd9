//! `track`: keep a path's estimate fresh by testing whether it still holds, instead of searching
//! again from scratch (issue 13).
//!
//! 1. **Acquire**: no estimate yet, so one `auto` search (capacity, chirps, lean SLoPS), leaner
//!    than `auto`'s own: stopped at a range of `acquire_resolution` (the margin, not 3% of C).
//!    (Fleets of 3 instead of 4 were tried: on the testbed 4 of 11 acquisitions then landed
//!    10–45% low, each costing a 0.7–1 MB search.) The hold checks only need a start within about a margin of A; they nudge
//!    it the rest of the way. `auto`'s re-test of a suspicious bracket stays: an acquisition
//!    that lands far off costs a search, dearer than the re-test (seen on the testbed: 6.6
//!    for 12 Mbit/s, then a 1 MB search).
//! 2. **Hold**: checks send short constant-rate streams just below and just above where a
//!    stream starts to read rising (A + δ, δ the least rise over the stream), shaped like
//!    `auto`'s SLoPS streams (long enough that m = `margin` × C above A builds two MTU service
//!    times of queue). Expected: flat below, rising above. The stream above goes every check;
//!    the one below every `below_every`-th, or at once when the stream above rose as much as
//!    a fall of A past m would make it. A stream that says otherwise is sent again at the same
//!    rate; only `confirm` in a row are evidence of change.
//!    **Refinement**: the bracket the checks straddle starts at ± m after a search and
//!    shrinks (× `shrink`, down to `min_margin` × C) with each check whose two sides held; a
//!    stream that read both ways (contradicted, its repeat did not) moves A a quarter of the
//!    bracket its way and widens the bracket again; a side of the refined bracket contradicted
//!    in a row is tested once at ± m: drift within the margin (A re-centred inside the last
//!    bracket that held) or a change past it (re-search). The published range is A ± the
//!    current bracket. Before, A was held at the last search's value ± 5% of C.
//! 3. **Narrow re-search**: on evidence of change, single streams at rates widening
//!    geometrically from the old value on the side the evidence points to (A ∓ 2m, 4m, 8m…)
//!    until one reads the other way, then halving that bracket to `resolution` × C; then back
//!    to holding the new value. A 20–50% step costs 2–5 streams. (Before: a lean SLoPS search
//!    of fleets of 3 over the whole side, 0.4–0.8 MB at 20 Mbit/s, 8–16 s of a 2% ceiling to
//!    repay, during which the next step went unseen; still there with `narrow: false`.)
//! 4. **Phase readings** ([`crate::phase`]): when, within the last `phase_window` rounds, narrow
//!    re-searches moved A by at least `phase_jump` × C both ways, or the values A was held at
//!    span `phase_leap` × C (on/off bursts), rounds send
//!    one short train at C each instead of checks, whose output gaps give A during it (direct
//!    probing); the estimate is their time-weighted mean over the time scale (1 s). Readings
//!    stop, back to checks, once successive readings differ like noise rather than bursts
//!    (median step above `phase_noise` × C: Poisson cross traffic, where checks do better)
//!    and do not come in runs of one level (a runs test, `phase_runs_z`).
//!
//! Why this form and not BART's Kalman filter (Ekelin et al. 2006): BART's strain model needs
//! streams *above* A on every sample (it reads the slope of the strain above the knee), so it
//! keeps the path slightly overloaded; a two-sided hold check sends one stream above A and one
//! below, reuses the trend tests every other estimator here is tested with, and gives a bracket
//! with a plain meaning ("A is within ± m") rather than a filtered value whose noise model
//! has to be tuned per path. Drift within ± m goes unseen by design: m is the resolution.
//!
//! **Cost.** The work is cut into rounds: a check, or a check that found a change plus the
//! search that follows. Each round ends with a final estimate. In continuous mode the tracker
//! starts the next round on its own, after idling long enough that the round's bytes, spread
//! over round and idle time, stay within `ceiling` × C (a token rule: the load over any whole
//! number of rounds never exceeds the ceiling); the acquiring search is repaid by rounds at
//! half rate after it ([`Tracker::close_round`]). In round mode (the service) the caller starts
//! rounds ([`Tracker::begin_round`]) with a byte allowance; a train the allowance cannot pay
//! for is kept and sent first in the next round, so the state machine never loses a train.
//! Allowances and the pay-back count frames (payload + [`WIRE_OVERHEAD`] a probe), as the
//! bottleneck and the service's schedule count them; `probe_bytes` in estimates stays payload,
//! as every estimator reports it.

use crate::auto::{Auto, AutoParams};
use crate::phase::{read_avail, reading_train, ReadingShape, Readings};
use crate::slops::{Pace, Slops, SlopsParams};
use crate::track_trace;
use crate::trend::{group_medians, stream_trend, Trend, TrendParams};
use crate::{Estimate, Estimator, Quality, TrainResult, TrainSpec, WIRE_OVERHEAD};
use serde::Serialize;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrackParams {
    /// Known capacity (bit/s): the acquiring search skips its capacity step.
    pub capacity_bps: Option<f64>,
    /// Half-width of the held bracket after a search, as a fraction of C: the first checks
    /// are at A ∓ margin × C (around the rate where a stream starts to read rising), and the
    /// streams' length is set so that a stream this far above A builds a detectable queue.
    pub margin: f64,
    /// Refine the held value while checks pass (a bracket from `margin` down to `min_margin`
    /// around the rate where streams turn); `false`: checks at A ∓ margin, as before.
    pub refine: bool,
    /// Least half-width the held bracket refines to while checks keep passing (fraction of C).
    pub min_margin: f64,
    /// A check that passed shrinks the bracket by this factor (down to `min_margin`); one
    /// with an unconfirmed contradiction widens it by its inverse (up to `margin`).
    pub shrink: f64,
    /// Probes per check stream (and per search stream).
    pub stream_len: usize,
    /// A check stream builds at least this much queue (ns) when sent `margin` above A ...
    pub detect_ns: f64,
    /// ... and at least this many MTU service times at C (one cross packet adds one at once).
    pub detect_mtus: f64,
    /// A check or search stream reads "rising" only if its delays rose at least this many MTU
    /// service times at C ([`TrendParams::min_rise_ns`]).
    pub min_rise_mtus: f64,
    pub min_gap_ns: u64,
    /// Checks send their stream below A only every this many checks (1: every check); the
    /// stream above A, sent every check, also tells a fall of A past the margin by how much
    /// its queue rose, which then calls for the stream below at once.
    pub below_every: u32,
    /// Streams in a row at one check rate that must contradict the held value before it is
    /// taken as changed (the first one and its repeats).
    pub confirm: u32,
    /// Unconfirmed contradictions move the held value this fraction of the bracket's current
    /// half-width their way (towards the stream that read both ways).
    pub nudge: f64,
    /// Streams per fleet of the search after a change (when not `narrow`).
    pub search_fleet: usize,
    /// After a change, re-search narrowly around the held value (single streams widening
    /// geometrically from it, then halving the bracket) instead of a SLoPS search of the side.
    pub narrow: bool,
    /// Streams a narrow re-search may send at most before it settles for what it has.
    pub narrow_streams: u32,
    /// The search's final range width, as a fraction of C.
    pub resolution: f64,
    /// The acquiring search's final range width, as a fraction of C.
    pub acquire_resolution: f64,
    /// Share of C the probes may use, averaged over rounds (continuous mode's pacing).
    pub ceiling: f64,
    /// Least time between the end of a round and the start of the next (continuous mode).
    pub min_interval_ns: u64,
    /// Start rounds by itself (`mgrp estimate --continuous`, the fluid tests); otherwise the
    /// caller starts each ([`Tracker::begin_round`]).
    pub continuous: bool,
    /// Follow a path whose A swings within the time scale (on/off bursts) with phase
    /// readings ([`crate::phase`]) once hold checks found it changed both ways often;
    /// `false`: hold checks only, as before (the opt-out).
    pub phase: bool,
    /// Readings start when, over the last `phase_window` rounds, hold checks confirmed a
    /// change (a re-search followed) at least `phase_evidence` times below A and as many
    /// times above it.
    pub phase_window: u32,
    pub phase_evidence: u32,
    /// A narrow re-search counts as a change for that evidence only if it moved the held
    /// value at least this share of C (noise on Poisson paths starts re-searches that land
    /// near where they began; on/off bursts move A by their rate).
    pub phase_jump: f64,
    /// Probes per phase reading, and the least duration of a reading train at C (ns).
    pub phase_probes: usize,
    pub phase_span_ns: f64,
    /// The time scale readings are averaged over (ns): the estimate's, 1 s.
    pub phase_timescale_ns: u64,
    /// Readings go on at least this long (ns) and `phase_judge` readings, then until the
    /// last `phase_judge` readings look like reading noise: the median difference between
    /// successive readings is above `phase_noise` × C (bursts longer than the reading
    /// interval make runs of alike readings; cross packets too few per train make each
    /// reading a fresh draw, and hold checks are then the better estimate). Then hold checks
    /// again, and the next run of readings needs twice as many rounds since (from
    /// `phase_window`, at most 16×).
    pub phase_dwell_ns: u64,
    pub phase_judge: usize,
    pub phase_noise: f64,
    /// ... and unless those readings come in runs of one level: a runs test on them
    /// ([`Readings::runs_z`]) scoring at or below this z shows bursts (the step median alone
    /// also takes a burst's own reading noise for Poisson: on the testbed it ended runs of
    /// readings on on/off paths after 2–22 s, and the hold estimates between were 15–39% off
    /// at the median).
    /// `f64::NEG_INFINITY`: the step median alone, as before. Both judge the last
    /// `phase_judge` = 40 readings (20 before the runs test: the testbed's on/off readings of
    /// round 14 scored above −2 in 18–35% of 20-reading windows, in 0–2.5% of 40-reading ones).
    pub phase_runs_z: f64,
    /// Values the held estimate took within the last `phase_window` rounds (the acquisition's
    /// and each narrow re-search's) spanning at least this share of C start readings at once,
    /// without waiting for changes both ways. Such a leap within the time scale of checks is
    /// what on/off bursts make (0.6 C at the bench's on/off); confirming the other way costs
    /// another change, and at 20 Mbit/s a change costs ~0.5 MB, 10–20 s of a 2% ceiling (the
    /// testbed's readings then started 22–57 s in). STEP and PEAKS levels (0.1–0.3 C apart)
    /// stay below it; readings a leap started on a path that does not swing stop by the same
    /// rule as any others, and the next start waits out their cool-down. Above 1: never.
    pub phase_leap: f64,
    /// Least time between two readings (continuous mode).
    pub phase_interval_ns: u64,
    /// Judge each check and narrow stream by the probes that actually left (an elastic train
    /// ends early when no rider waits), and send them for the length recent streams kept;
    /// `false`: every stream is judged as if all its probes left (the old rule).
    pub by_length: bool,
}

impl Default for TrackParams {
    fn default() -> Self {
        TrackParams {
            capacity_bps: None,
            margin: 0.05,
            refine: true,
            min_margin: 0.015,
            shrink: 0.7,
            stream_len: 50,
            detect_ns: 500_000.0,
            detect_mtus: 2.0,
            min_rise_mtus: 1.0,
            min_gap_ns: 100_000,
            below_every: 3,
            confirm: 4,
            nudge: 0.25,
            search_fleet: 3,
            narrow: true,
            narrow_streams: 10,
            resolution: 0.03,
            acquire_resolution: 0.05,
            ceiling: 0.02,
            min_interval_ns: 100_000_000,
            continuous: true,
            phase: true,
            phase_window: 10,
            phase_evidence: 1,
            phase_jump: 0.15,
            phase_probes: 20,
            phase_span_ns: 1.5e6,
            phase_timescale_ns: 1_000_000_000,
            phase_dwell_ns: 2_000_000_000,
            phase_judge: 40,
            phase_noise: 0.09,
            phase_runs_z: -2.0,
            phase_leap: 0.4,
            phase_interval_ns: 20_000_000,
            by_length: true,
        }
    }
}

/// Why tracking parameters were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrackError {
    #[error("ceiling must be above 0% and at most 100% of capacity, not {0}")]
    Ceiling(f64),
    #[error("margin must be above 0 and below 0.5 of capacity, not {0}")]
    Margin(f64),
    #[error("confirm needs 1..=10 streams in a row, not {0}")]
    Confirm(u32),
    #[error("streams need 10..=1000 probes, not {0}")]
    StreamLen(usize),
    #[error("resolution must be above 0 and below 0.5 of capacity, not {0}")]
    Resolution(f64),
    #[error("min_margin must be above 0 and at most the margin, not {0}")]
    MinMargin(f64),
    #[error("shrink must be in (0, 1], not {0}")]
    Shrink(f64),
    #[error("below_every must be 1..=10 checks, not {0}")]
    BelowEvery(u32),
    #[error(
        "phase readings need 4..=200 probes, a positive span and noise level, 10..=1000 \
         readings judged, a runs-test threshold that is a number (not NaN), a jump in [0, 1) \
         of C, a leap of at least the jump, and evidence of 1..=window changes a side \
         (window ≤ 100 rounds)"
    )]
    PhaseShape,
    #[error("phase time scale must be 10ms..=60s and the dwell at least 2 time scales")]
    PhaseTimescale,
}

impl TrackParams {
    pub fn validate(&self) -> Result<(), TrackError> {
        if !(self.ceiling.is_finite() && self.ceiling > 0.0 && self.ceiling <= 1.0) {
            return Err(TrackError::Ceiling(self.ceiling));
        }
        if !(self.margin.is_finite() && self.margin > 0.0 && self.margin < 0.5) {
            return Err(TrackError::Margin(self.margin));
        }
        for r in [self.resolution, self.acquire_resolution] {
            if !(r.is_finite() && r > 0.0 && r < 0.5) {
                return Err(TrackError::Resolution(r));
            }
        }
        if !(self.min_margin.is_finite() && self.min_margin > 0.0 && self.min_margin <= self.margin)
        {
            return Err(TrackError::MinMargin(self.min_margin));
        }
        if !(self.shrink.is_finite() && self.shrink > 0.0 && self.shrink <= 1.0) {
            return Err(TrackError::Shrink(self.shrink));
        }
        if !(1..=10).contains(&self.below_every) {
            return Err(TrackError::BelowEvery(self.below_every));
        }
        if self.confirm == 0 || self.confirm > 10 {
            return Err(TrackError::Confirm(self.confirm));
        }
        if !(10..=1000).contains(&self.stream_len) {
            return Err(TrackError::StreamLen(self.stream_len));
        }
        if !(4..=200).contains(&self.phase_probes)
            || self.phase_evidence == 0
            || self.phase_evidence > self.phase_window
            || self.phase_window > 100
            || !(self.phase_span_ns.is_finite() && self.phase_span_ns > 0.0)
            || !(10..=1000).contains(&self.phase_judge)
            || !(self.phase_noise.is_finite() && self.phase_noise >= 0.0)
            || self.phase_runs_z.is_nan()
            || !(self.phase_jump.is_finite() && (0.0..1.0).contains(&self.phase_jump))
            || !(self.phase_leap.is_finite() && self.phase_leap >= self.phase_jump)
        {
            return Err(TrackError::PhaseShape);
        }
        if !(10_000_000..=60_000_000_000).contains(&self.phase_timescale_ns)
            || self.phase_dwell_ns < 2 * self.phase_timescale_ns
        {
            return Err(TrackError::PhaseTimescale);
        }
        Ok(())
    }
}

/// Which way a held value was contradicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The stream at A − m rose: A fell.
    Below,
    /// The stream at A + m stayed flat: A rose.
    Above,
}

/// A hold check in progress.
#[derive(Debug, Clone, Default)]
struct Check {
    /// Streams of this check still to send, in order.
    todo: Vec<Side>,
    /// The stream in flight, and its rate.
    sent: Option<Side>,
    rate: f64,
    /// Streams in a row that contradicted the held value on the side at the head of `todo`.
    streak: u32,
    /// A stream contradicted but its repeat did not: noise.
    noisy: bool,
    /// Sides that contradicted without being confirmed: the held value is nudged towards them.
    lean: Vec<Side>,
    /// Streams whose trend test could not decide.
    unknown: u32,
    /// The next stream (or the one in flight) is sent at the full margin: the refined
    /// bracket's side was contradicted in a row, and this tells drift within the margin
    /// from a change past it.
    wide: bool,
    /// The refined bracket's side was contradicted, the margin's was not: A drifted between.
    drift: Option<Side>,
    /// A stream below A was sent in this check.
    below_sent: bool,
    /// Streams above A sent again because they were cut too short to say anything.
    short: u32,
}

/// A narrow re-search after a confirmed change: single streams at rates widening
/// geometrically away from the held value (2m, 4m, 8m… from it) until one reads the other
/// way, then halving the bracket they make until it is `resolution` × C wide. A step of
/// 20–50% costs two to four streams instead of a SLoPS search over the whole side.
#[derive(Debug, Clone)]
struct Narrow {
    /// Highest rate seen flat (A above it), lowest seen rising (A below it).
    flat: Option<f64>,
    rising: Option<f64>,
    /// Distance of the next widening stream from the held value.
    reach: f64,
    /// The rate in flight.
    sent: Option<f64>,
    streams: u32,
    /// Streams whose trend test could not decide, in a row.
    unknown: u32,
    /// Streams sent again because the host stole CPU while they were out.
    stolen: u32,
}

enum Phase {
    Acquire(Box<Auto>),
    Hold(Check),
    Search(Box<Slops>),
    Narrow(Narrow),
    /// Phase readings: one reading train a round.
    Read(ReadStep),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadStep {
    Due,
    Sent,
    Back,
}

/// What the tracker has done so far, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TrackStats {
    pub rounds: u32,
    pub checks: u32,
    /// Checks that found a change (and started a search).
    pub changes: u32,
    /// Contradicting streams whose repeat did not agree.
    pub noise: u32,
    /// Checks whose refined bracket was contradicted in a row but not the margin's: the held
    /// value was re-centred between the two.
    pub drifts: u32,
    /// Streams above A whose queue rose as if A had fallen past the margin (the stream below
    /// was then sent at once).
    pub fall_hints: u32,
    /// Check streams sent again because the host stole CPU while they were out.
    pub stolen_repeats: u32,
    /// Narrow re-search streams sent again for the same reason.
    pub stolen_narrow_repeats: u32,
    /// Times hold checks gave way to phase readings, and readings taken.
    pub phase_starts: u32,
    pub readings: u32,
    pub probe_bytes: u64,
}

pub struct Tracker {
    p: TrackParams,
    phase: Phase,
    capacity: Option<Estimate>,
    /// The last concluded estimate: the value being held.
    held: Option<Estimate>,
    /// A train polled from the inner estimator that the allowance could not pay for.
    pending: Option<TrainSpec>,
    round_open: bool,
    round_start: u64,
    /// Frames (payload + headers) sent in the round: what the allowance and ceiling count.
    round_frames: u64,
    round_bytes: u64,
    round_trains: u32,
    /// The round ended with a fresh estimate (not cut before its check or search concluded).
    concluded: bool,
    /// Frames of the acquiring search not yet repaid ([`Tracker::close_round`]).
    debt: u64,
    /// Half-width (bit/s) of the held bracket the checks test: the margin after a search,
    /// refined while checks pass (`None`: the margin).
    spread: Option<f64>,
    /// Checks since the last that sent a stream below A.
    since_below: u32,
    allowance: Option<u64>,
    cut: bool,
    next_round_at: u64,
    /// State of the pseudo-random wait added before a phase reading (xorshift, fixed seed:
    /// runs stay deterministic), so readings do not lock to a periodic cross stream.
    dither: u64,
    /// Round mode: the random wait the caller should add to its own pacing before the next
    /// round ([`Tracker::round_dither_ns`]).
    round_dither_ns: u64,
    last: u64,
    stats: TrackStats,
    /// Rounds whose hold check had a stream contradict A from below / above (round numbers,
    /// the last `phase_window` rounds'): the evidence that starts phase readings.
    contra: [VecDeque<u32>; 2],
    readings: Readings,
    /// When the current run of phase readings started.
    read_since: u64,
    /// Rounds that must pass after readings stopped before they may start again, and the
    /// round they stopped at.
    read_cool: u32,
    read_left: u32,
    /// The held value when readings began: the part of the first time scale they do not
    /// cover yet (one reading would otherwise be the estimate).
    read_prior: f64,
    /// The side and held value of a change whose narrow re-search is under way.
    jump_from: Option<(Side, f64)>,
    /// Probes that left in the last check and narrow streams (elastic trains end early), and
    /// the round a stream last carried riders.
    kept: VecDeque<usize>,
    rode_at: Option<u32>,
    /// The held values of the last `phase_window` rounds' acquisition and narrow re-searches,
    /// with their round ([`TrackParams::phase_leap`]).
    levels: VecDeque<(u32, f64)>,
}

impl Tracker {
    /// The acquiring search: `auto` with pathload's bracket as its range and middle as its
    /// value. The checks that follow hold that value within the resolution; the calibrated
    /// range is wider and its mean moves the held value, which raised the probe load over the
    /// ceiling (2.35% on the steady Poisson test) and slowed the step test to 3 rounds.
    /// Its streams keep `stream_len` probes (`min_stream_len: None`): the larger probes of
    /// one-shot `auto` at ≥ 50 Mbit/s were measured on `mgrp bench accuracy`, not yet on
    /// `mgrp bench tracking`, and send a few more of the model's Poisson runs to the time
    /// average, which acquisition would pay for in bytes above the ceiling.
    fn acquire_params() -> AutoParams {
        AutoParams {
            calibrated: false,
            min_stream_len: None,
            ..AutoParams::default()
        }
    }

    pub fn new(p: TrackParams) -> Result<Tracker, TrackError> {
        p.validate()?;
        let auto = acquire(&p, p.capacity_bps);
        Ok(Tracker {
            p,
            phase: Phase::Acquire(Box::new(auto)),
            capacity: None,
            held: None,
            pending: None,
            round_open: false,
            round_start: 0,
            round_frames: 0,
            round_bytes: 0,
            round_trains: 0,
            concluded: false,
            debt: 0,
            spread: None,
            since_below: u32::MAX,
            allowance: None,
            cut: false,
            next_round_at: 0,
            dither: 0x9e37_79b9_7f4a_7c15,
            round_dither_ns: 0,
            last: 0,
            stats: TrackStats::default(),
            contra: [VecDeque::new(), VecDeque::new()],
            readings: Readings::default(),
            read_since: 0,
            read_cool: 0,
            read_left: 0,
            read_prior: 0.0,
            jump_from: None,
            kept: VecDeque::new(),
            rode_at: None,
            levels: VecDeque::new(),
        })
    }

    pub fn params(&self) -> &TrackParams {
        &self.p
    }

    pub fn stats(&self) -> TrackStats {
        self.stats
    }

    /// The value being held (the last concluded estimate).
    pub fn held(&self) -> Option<&Estimate> {
        self.held.as_ref()
    }

    /// The path capacity in use: given, or measured by the acquiring search.
    pub fn capacity_bps(&self) -> Option<f64> {
        self.p
            .capacity_bps
            .or(self.capacity.as_ref().map(|e| e.value_bps))
    }

    /// Start a round at `now_ns` that may send at most `allowance` probe bytes (`None`: no
    /// limit). Round mode's way in; a round already open is left as it is.
    pub fn begin_round(&mut self, now_ns: u64, allowance: Option<u64>) {
        if self.round_open {
            self.allowance = allowance;
            return;
        }
        self.round_open = true;
        self.round_start = now_ns;
        self.round_frames = 0;
        self.round_bytes = 0;
        self.round_trains = 0;
        self.concluded = false;
        self.allowance = allowance;
        self.cut = false;
        self.stats.rounds += 1;
        // A check cut short by the allowance goes on where it stopped (its stream is pending).
        if matches!(self.phase, Phase::Hold(_)) && self.pending.is_none() {
            self.phase = Phase::Hold(self.new_check());
        }
    }

    /// When the ceiling lets the next round start (set as each round ends).
    pub fn next_round_at(&self) -> u64 {
        self.next_round_at
    }

    /// Round mode: a random wait (ns) to add to the caller's own pacing before the next
    /// round, so that phase readings are not a fixed period apart (0 after other rounds).
    pub fn round_dither_ns(&self) -> u64 {
        self.round_dither_ns
    }

    /// The round stopped before a train its allowance could not pay for.
    pub fn round_cut(&self) -> bool {
        self.cut
    }

    /// The last round ended with a fresh estimate; `false` while one runs and after a round
    /// cut before its check or search concluded (the held value is then not news).
    pub fn round_concluded(&self) -> bool {
        !self.round_open && self.concluded
    }

    /// Frames of the train a cut round kept for the next: the allowance that round needs.
    pub fn pending_frames(&self) -> Option<u64> {
        self.pending.as_ref().map(frames)
    }

    /// Round mode: the frames of the next round when they are known ahead (a phase reading's
    /// train), so the caller's schedule can pace for that round rather than for a typical one.
    pub fn next_round_frames(&self) -> Option<u64> {
        let c = self.capacity_bps()?;
        matches!(self.phase, Phase::Read(ReadStep::Due))
            .then(|| frames(&reading_train(self.reading_shape(), c)))
    }

    /// Frames (payload + headers) the current or last round put on the path: what a
    /// schedule's budget counts (probes an elastic train left out excluded).
    pub fn round_frames(&self) -> u64 {
        self.round_frames
    }

    /// A round is under way.
    pub fn in_round(&self) -> bool {
        self.round_open
    }

    /// The bracket half-width m in bit/s.
    fn margin_bps(&self) -> f64 {
        self.p.margin * self.capacity_bps().unwrap_or(0.0)
    }

    fn new_check(&mut self) -> Check {
        self.stats.checks += 1;
        // Both sides when it is time for the stream below, or when there is no room above.
        let below = self.since_below.saturating_add(1) >= self.p.below_every
            || self.check_rate(Side::Above, false).is_none();
        self.since_below = if below { 0 } else { self.since_below + 1 };
        Check {
            todo: if below {
                vec![Side::Below, Side::Above]
            } else {
                vec![Side::Above]
            },
            ..Check::default()
        }
    }

    /// Half-width (bit/s) of the bracket the next check tests.
    fn spread_bps(&self) -> f64 {
        self.spread.unwrap_or_else(|| self.margin_bps())
    }

    /// The rate of the check stream on `side` of the held value, if it lies inside (0, C).
    /// The checks straddle A + δ, the rate from which a stream reads rising
    /// ([`Tracker::least_rise_bps`]), so that a bracket narrower than δ still reads "flat
    /// below, rising above" when A is where it is held.
    fn check_rate(&self, side: Side, wide: bool) -> Option<f64> {
        let a = self.held.as_ref()?.value_bps;
        let c = self.capacity_bps()?;
        let centre = if self.p.refine {
            a + self.least_rise_bps()
        } else {
            a
        } + self.length_offset_bps();
        let spread = if wide {
            self.margin_bps()
        } else {
            self.spread_bps()
        };
        let r = match side {
            Side::Below => centre - spread,
            Side::Above => centre + spread,
        };
        (r > 0.0 && r < c).then_some(r)
    }

    /// δ: how far above A a check stream must be sent to read rising. Its queue must rise
    /// `min_rise` between the middles of its first and last groups of probes (where the trend
    /// tests measure the rise: 0.87 of its duration T for 50 probes), i.e. r − A ≥ δ =
    /// min_rise × C / (0.87 T) (0.029 C at 20 Mbit/s, 0.014 C at 100). Without `refine`, the
    /// whole T (a centre 0.004 C too low that held values drifted off on CBR).
    fn least_rise_bps(&self) -> f64 {
        self.least_rise_over(self.p.stream_len)
    }

    /// δ for a stream of which only the first `left` probes left (an elastic train that ended
    /// early): the trend tests see the rise over their span only, so the rate must be that
    /// much further above A to read rising (10 of 50 probes: about 6.5 δ, 16: 3.5 δ).
    fn least_rise_over(&self, left: usize) -> f64 {
        let (Some(c), Some(h)) = (self.capacity_bps(), self.held.as_ref()) else {
            return 0.0;
        };
        let probe = self.stream(h.value_bps.max(1e3));
        let n = left.clamp(2, probe.probes.len().max(2));
        let t_ns = probe.offsets().get(n - 1).copied().unwrap_or(0).max(1) as f64;
        let span = if self.p.refine && n >= 4 {
            let g = ((n as f64).sqrt().floor() as usize).max(2);
            let size = n / g;
            let first = (size as f64 - 1.0) / 2.0;
            let last = ((g - 1) * size + n - 1) as f64 / 2.0;
            (last - first) / (n - 1) as f64
        } else {
            1.0
        };
        self.trend_params().min_rise_ns * c / (t_ns * span)
    }

    /// Probes recent check and narrow streams kept (their lower quartile: most streams keep
    /// at least this many); the full length when none was cut short or `by_length` is off.
    fn expected_len(&self) -> usize {
        if !self.p.by_length || self.kept.is_empty() {
            return self.p.stream_len;
        }
        let mut k: Vec<usize> = self.kept.iter().copied().collect();
        k.sort_unstable();
        k[k.len() / 4]
    }

    /// How much higher than for a whole stream checks and narrow streams are sent, so that a
    /// stream keeping the expected length tests the point a whole one would (0 when streams
    /// are not cut short).
    fn length_offset_bps(&self) -> f64 {
        self.least_rise_over(self.expected_len()) - self.least_rise_bps()
    }

    /// A check or narrow stream came back: remember how many of its probes left and whether
    /// it carried riders.
    fn note_length(&mut self, obs: &TrainResult, left: usize) {
        if obs.riders.is_some_and(|r| r.bytes > 0) {
            self.rode_at = Some(self.stats.rounds);
        }
        if self.p.by_length {
            if self.kept.len() == KEPT {
                self.kept.pop_front();
            }
            self.kept.push_back(left);
        }
    }

    /// A stream at `rate` built as `auto`'s SLoPS streams are: long enough that a rate m above
    /// A builds the detectable queue; gap ≥ `min_gap_ns`; the size makes up the rate.
    fn stream(&self, rate: f64) -> TrainSpec {
        let c = self.capacity_bps().unwrap_or(rate);
        let detect = self
            .p
            .detect_ns
            .max(self.p.detect_mtus * 1514.0 * 8.0 / c * 1e9);
        let duration_ns = detect / self.p.margin;
        let gap_ns = (duration_ns / (self.p.stream_len - 1) as f64).max(self.p.min_gap_ns as f64);
        let size = (rate * gap_ns / 8e9 - WIRE_OVERHEAD as f64)
            .round()
            .clamp(200.0, 1472.0) as u16;
        TrainSpec::constant_rate(self.p.stream_len, size, rate)
    }

    /// Trend tests that ask a rising stream for at least one MTU service time at C of rise:
    /// less can be one cross packet's phase against the probes, not a queue the rate built.
    fn trend_params(&self) -> TrendParams {
        let c = self.capacity_bps().unwrap_or(f64::INFINITY);
        TrendParams {
            min_rise_ns: self.p.min_rise_mtus * 1514.0 * 8.0 / c * 1e9,
            ..TrendParams::default()
        }
    }

    fn search(&self, side: Side) -> Slops {
        let c = self.capacity_bps().unwrap_or(0.0);
        let a = self.held.as_ref().map_or(c / 2.0, |e| e.value_bps);
        let m = self.margin_bps();
        let (lo, hi) = match side {
            Side::Below => (0.0, (a - m).max(m)),
            Side::Above => ((a + m).min(c - m), c),
        };
        let w = self.p.resolution * c;
        Slops::new(SlopsParams {
            fleet: self.p.search_fleet,
            stream_len: self.p.stream_len,
            min_rate: lo,
            max_rate: hi,
            resolution_bps: w,
            grey_bps: w,
            detect_ns: Some(
                self.p
                    .detect_ns
                    .max(self.p.detect_mtus * 1514.0 * 8.0 / c * 1e9),
            ),
            min_gap_ns: self.p.min_gap_ns,
            fraction: 0.7,
            verify_bps: None,
            max_fleets: 12,
            trend: self.trend_params(),
            ..SlopsParams::for_capacity(c, Pace::Fast)
        })
    }

    /// The next stream of the hold check, or `None` when the check is over.
    fn next_check_stream(&mut self) -> Option<TrainSpec> {
        loop {
            let Phase::Hold(c) = &self.phase else {
                return None;
            };
            if c.sent.is_some() || c.todo.is_empty() {
                return None;
            }
            let side = c.todo[0];
            let rate = self.check_rate(side, c.wide);
            let Phase::Hold(c) = &mut self.phase else {
                return None;
            };
            c.todo.remove(0);
            if let Some(r) = rate {
                c.sent = Some(side);
                c.rate = r;
                c.below_sent |= side == Side::Below;
                return Some(self.stream(r));
            }
        }
    }

    /// A check stream came back: judge it against what holding A predicts.
    fn handle_check(&mut self, obs: &TrainResult) {
        let trend_params = self.trend_params();
        let refined = self.spread_bps() < self.margin_bps() * 0.999;
        // The queue a stream above A would build if A had fallen by the margin.
        let fall_rise = match (&self.phase, &self.held, self.capacity_bps()) {
            (Phase::Hold(c), Some(h), Some(cap)) => {
                let fallen = h.value_bps - self.margin_bps();
                Some((c.rate - fallen).max(0.0) / cap)
            }
            _ => None,
        };
        let sent = obs.probes.iter().filter(|p| p.sent_ns.is_some()).count();
        // How far below the point it was sent to test a stream cut short tested: its queue
        // rose over fewer probes than planned.
        let shortfall = if self.p.by_length {
            self.least_rise_over(sent) - self.least_rise_over(self.expected_len())
        } else {
            0.0
        };
        let spread = self.spread_bps();
        self.note_length(obs, sent);
        let Phase::Hold(c) = &mut self.phase else {
            return;
        };
        let Some(side) = c.sent.take() else {
            return;
        };
        let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
        let trend = stream_trend(&owd, sent, &trend_params);
        if track_trace::enabled() {
            let kind = match (side, c.wide) {
                (Side::Above, false) => "above",
                (Side::Below, false) => "below",
                (Side::Above, true) => "above+wide",
                (Side::Below, true) => "below+wide",
            };
            let h = self.held.as_ref().map(|h| h.value_bps);
            trace_stream(self.last, kind, c.rate, obs, trend, h);
        }
        if obs.stats.stolen() && c.short < SHORT_REPEATS {
            // The host stole CPU while it was out: its stamps may be a batch, which reads as
            // any trend. Again, the streak as it was (bounded as short streams are).
            c.short += 1;
            c.todo.insert(0, side);
            self.stats.stolen_repeats += 1;
            return;
        }
        if side == Side::Above
            && trend == Trend::NotIncreasing
            && shortfall > spread / 2.0
            && c.short < SHORT_REPEATS
        {
            // Flat, but it tested a point below the held value's bracket: it says nothing
            // about A being above it. Again, the streak as it was.
            c.short += 1;
            c.todo.insert(0, side);
            return;
        }
        let contradicts = match (side, trend) {
            (_, Trend::Unknown) => {
                c.unknown += 1;
                false
            }
            (Side::Below, t) => t == Trend::Increasing,
            (Side::Above, t) => t == Trend::NotIncreasing,
        };
        if side == Side::Above && trend == Trend::Increasing && !c.below_sent {
            let lost =
                sent.saturating_sub(owd.len()) as f64 > trend_params.loss_increasing * sent as f64;
            let fell = lost
                || queue_rise(obs)
                    .zip(fall_rise)
                    .is_some_and(|((rise, span), per_ns)| rise >= per_ns * span);
            if fell {
                // It rose as if A were below A − m: ask the stream below now.
                c.todo.insert(0, Side::Below);
                self.stats.fall_hints += 1;
            }
        }
        if std::mem::take(&mut c.wide) && !contradicts {
            // The refined side was contradicted in a row, the margin's side is not: drift.
            c.drift = Some(side);
            c.streak = 0;
            self.stats.drifts += 1;
            return;
        }
        if !contradicts {
            if c.streak > 0 {
                c.noisy = true;
                c.lean.push(side);
                self.stats.noise += 1;
            }
            c.streak = 0;
            return;
        }
        c.streak += 1;
        // Against a refined bracket one stream fewer confirms: the stream at the margin that
        // follows is one more.
        let need = if refined {
            self.p.confirm.saturating_sub(1).max(1)
        } else {
            self.p.confirm
        };
        if c.streak < need {
            // Ask again at the same rate before believing it.
            c.todo.insert(0, side);
            return;
        }
        if c.streak == need && refined {
            // Confirmed against a refined bracket: one stream at the margin tells whether A
            // moved past it (a change: re-search) or only within it (drift: re-centre).
            c.wide = true;
            c.todo.insert(0, side);
            return;
        }
        // Several streams in a row say A moved past this side: search there.
        self.stats.changes += 1;
        // Evidence for phase readings: changes found on both sides within a few rounds (for
        // a narrow re-search, once it found how far A moved).
        let round = self.stats.rounds;
        if self.p.narrow {
            self.jump_from = self.held.as_ref().map(|h| (side, h.value_bps));
            let n = self.narrow(side);
            self.phase = Phase::Narrow(n);
            return;
        }
        self.note_change(side, round);
        let s = self.search(side);
        self.phase = Phase::Search(Box::new(s));
    }

    /// A narrow re-search past `side` of the held value, whose check stream there (at A ∓ m)
    /// is the first bound.
    fn narrow(&self, side: Side) -> Narrow {
        // As a whole stream would have tested it (checks are sent higher for cut streams).
        let r = self
            .check_rate(side, true)
            .map(|r| r - self.length_offset_bps());
        let (flat, rising) = match side {
            Side::Below => (None, r),
            Side::Above => (r, None),
        };
        Narrow {
            flat,
            rising,
            reach: 2.0 * self.margin_bps(),
            sent: None,
            streams: 0,
            unknown: 0,
            stolen: 0,
        }
    }

    /// The next rate of the narrow re-search, or `None` when it is over: the bracket is
    /// `resolution` wide, the widening reached the end of (0, C), or its streams are spent.
    fn narrow_rate(&self) -> Option<f64> {
        let Phase::Narrow(n) = &self.phase else {
            return None;
        };
        let c = self.capacity_bps()?;
        let a = self.held.as_ref()?.value_bps;
        let m = self.margin_bps();
        let (floor, top) = (0.5 * m, c - 0.5 * m);
        if n.sent.is_some() || n.streams >= self.p.narrow_streams {
            return None;
        }
        match (n.flat, n.rising) {
            (Some(f), Some(r)) => (r - f > self.p.resolution * c).then_some((f + r) / 2.0),
            (None, Some(r)) => {
                let next = (a - n.reach).max(floor);
                (next < r - 0.25 * m).then_some(next)
            }
            (Some(f), None) => {
                let next = (a + n.reach).min(top);
                (next > f + 0.25 * m).then_some(next)
            }
            (None, None) => None,
        }
    }

    /// Where the narrow re-search puts A: the middle of its bracket, or of what lies past its
    /// last stream when the widening reached the end of (0, C).
    ///
    /// A stream at r reads rising only once its queue rose `min_rise` over its duration T,
    /// i.e. from r = A + δ, δ = min_rise × C / T (0.025 C at 20 Mbit/s, 0.012 C at 100): the
    /// bounds are δ above A's, and are taken down by δ (without this, a held 6.8 Mbit/s for a
    /// true 6.0 on the fluid model's ±50% step at 20 Mbit/s).
    fn narrow_value(&self, n: &Narrow) -> Option<(f64, f64, f64)> {
        let c = self.capacity_bps()?;
        self.held.as_ref()?;
        let delta = self.least_rise_bps();
        let (lo, hi) = match (n.flat, n.rising) {
            (Some(f), Some(r)) => (f.min(r) - delta, f.max(r) - delta),
            (None, Some(r)) => (0.0, r - delta),
            (Some(f), None) => (f - delta, c),
            (None, None) => return None,
        };
        let (lo, hi) = (lo.max(0.0), hi.max(0.0));
        Some(((lo + hi) / 2.0, lo, hi))
    }

    /// A narrow re-search stream came back: move the bracket's bound it tested.
    fn handle_narrow(&mut self, obs: &TrainResult) {
        let trend_params = self.trend_params();
        let sent = obs.probes.iter().filter(|p| p.sent_ns.is_some()).count();
        // The rate a whole stream would have tested what this one did: lower by what
        // its cut-short length adds to δ (it was sent higher by the expected length's).
        let short = if self.p.by_length {
            self.least_rise_over(sent) - self.least_rise_bps()
        } else {
            0.0
        };
        self.note_length(obs, sent);
        let Phase::Narrow(n) = &mut self.phase else {
            return;
        };
        let Some(rate) = n.sent.take() else {
            return;
        };
        // What it tested, never below 0 (a short stream's shift can exceed its rate).
        let rate = (rate - short).max(0.0);
        if obs.stats.stolen() && n.stolen < SHORT_REPEATS {
            // The host stole CPU while it was out: its stamps may be a batch, which reads as
            // any trend. The same rate again (bounded, and each counts against the streams).
            n.stolen += 1;
            self.stats.stolen_narrow_repeats += 1;
            return;
        }
        let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
        let widening = n.flat.is_none() || n.rising.is_none();
        let trend = stream_trend(&owd, sent, &trend_params);
        if track_trace::enabled() {
            let h = self.held.as_ref().map(|h| h.value_bps);
            trace_stream(self.last, "narrow", rate, obs, trend, h);
        }
        match trend {
            Trend::Increasing => {
                n.rising = Some(n.rising.map_or(rate, |r| r.min(rate)));
                n.unknown = 0;
            }
            Trend::NotIncreasing => {
                n.flat = Some(n.flat.map_or(rate, |f| f.max(rate)));
                n.unknown = 0;
            }
            // Undecided: the same rate once more (the stream count bounds this).
            Trend::Unknown => {
                n.unknown += 1;
                return;
            }
        }
        if widening {
            n.reach *= 2.0;
        }
    }

    /// The next stream of the narrow re-search, or `None` when it is over.
    fn next_narrow_stream(&mut self) -> Option<TrainSpec> {
        let rate = self.narrow_rate()?;
        let c = self.capacity_bps()?;
        // Sent higher for the length streams keep, below C (what is left of δ's shift is
        // taken off when it comes back).
        // Never below the search's floor: bounds taken down for short streams can reach
        // below 0 (a riders9 run sent a stream at -0.11 Mbit/s).
        let floor = 0.5 * self.margin_bps();
        let sent = (rate + self.length_offset_bps())
            .min(c * 0.995)
            .max(rate)
            .max(floor);
        let t = self.stream(sent);
        let Phase::Narrow(n) = &mut self.phase else {
            return None;
        };
        n.sent = Some(sent);
        n.streams += 1;
        Some(t)
    }

    /// The current phase's estimator, when it has one.
    fn inner(&mut self) -> Option<&mut dyn Estimator> {
        match &mut self.phase {
            Phase::Acquire(a) => Some(a.as_mut()),
            Phase::Search(s) => Some(s.as_mut()),
            Phase::Hold(_) | Phase::Narrow(_) | Phase::Read(_) => None,
        }
    }

    /// The phase finished: move on, and close the round if it gave an estimate.
    fn advance(&mut self, now_ns: u64) {
        if matches!(self.phase, Phase::Read(ReadStep::Back)) {
            self.conclude_reading(now_ns);
            return;
        }
        // A narrow re-search with nothing left to send is over: where it puts A.
        let narrowed = match &self.phase {
            Phase::Narrow(n) if n.sent.is_none() && self.narrow_rate().is_none() => {
                Some(self.narrow_value(n))
            }
            _ => None,
        };
        let concluded = match &mut self.phase {
            Phase::Acquire(a) if a.is_done() => {
                if self.capacity.is_none() {
                    self.capacity = a.capacity();
                }
                let e = a.estimate().filter(|e| e.final_);
                if let Some(e) = e {
                    self.levels.push_back((self.stats.rounds, e.value_bps));
                    if track_trace::enabled() {
                        track_trace::push_acquired(now_ns, e.quality.method, e.value_bps);
                    }
                    self.held = Some(e);
                }
                true
            }
            Phase::Search(s) if s.is_done() => {
                if let Some(e) = s.estimate() {
                    self.held = Some(e);
                }
                true
            }
            Phase::Hold(c) => c.sent.is_none() && c.todo.is_empty(),
            Phase::Narrow(_) => narrowed.is_some(),
            Phase::Read(_) => false,
            _ => false,
        };
        if let (Some(Some((v, lo, hi))), Some(h)) = (narrowed, &mut self.held) {
            h.value_bps = v;
            h.low_bps = lo;
            h.high_bps = hi;
            let c = self.capacity_bps().unwrap_or(f64::INFINITY);
            if let Some((side, from)) = self.jump_from.take() {
                if (v - from).abs() >= self.p.phase_jump * c {
                    self.note_change(side, self.stats.rounds);
                }
            }
            self.levels.push_back((self.stats.rounds, v));
            while self.levels.len() > self.p.phase_window as usize + 1 {
                self.levels.pop_front();
            }
        }
        if !concluded {
            return;
        }
        let confidence = match &self.phase {
            Phase::Hold(c) => {
                let mut k: f64 = 1.0;
                if c.noisy {
                    k *= 0.5;
                }
                k * 0.8f64.powi(c.unknown as i32)
            }
            Phase::Narrow(n) => 0.8f64.powi(n.streams.saturating_sub(2) as i32).max(0.3),
            _ => self.held.as_ref().map_or(0.0, |e| e.quality.confidence),
        };
        let spread = self.spread_bps();
        let step = self.p.nudge * spread;
        let c_bps = self.capacity_bps().unwrap_or(0.0);
        let (lo_spread, hi_spread) = (self.p.min_margin * c_bps, self.p.margin * c_bps);
        if let (Phase::Hold(c), Some(h)) = (&self.phase, &mut self.held) {
            // Refine: a check that passed narrows the bracket the next one tests. A stream
            // that read both ways (contradicted, its repeat did not) puts A near its rate:
            // the held value moves that way and the bracket widens again. Over checks this
            // is a staircase around the rate where the streams turn, whose width settles
            // where the path's noise starts to flip streams.
            let next = if !self.p.refine {
                spread
            } else if let Some(side) = c.drift {
                // A lies past the refined bracket's side, within the margin, and most likely
                // within the bracket the check before held (it passed, one shrink wider):
                // hold the middle of that.
                let outer = (spread / self.p.shrink).min(hi_spread);
                h.value_bps += match side {
                    Side::Below => -(outer + spread) / 2.0,
                    Side::Above => (outer + spread) / 2.0,
                };
                (outer - spread) / 2.0
            } else if c.lean.is_empty() && c.below_sent {
                // Both sides held: the bracket narrows.
                spread * self.p.shrink
            } else if c.lean.is_empty() {
                spread
            } else {
                spread / self.p.shrink
            };
            self.spread = Some(next.clamp(lo_spread, hi_spread));
            for side in &c.lean {
                h.value_bps += match side {
                    Side::Below => -step,
                    Side::Above => step,
                };
            }
        } else {
            // A new value from a search: its bracket is the margin again, and the next check
            // tests both sides.
            self.spread = None;
            self.since_below = u32::MAX;
        }
        let method = match &self.phase {
            Phase::Acquire(_) => "track:acquire",
            Phase::Search(..) => "track:search",
            Phase::Narrow(_) => "track:narrow",
            Phase::Hold(_) => "track:hold",
            Phase::Read(_) => "track:phase",
        };
        if self.held.is_some() && self.capacity_bps().is_some() {
            let hold = if self.phase_evidence() {
                self.start_readings(now_ns);
                Phase::Read(ReadStep::Due)
            } else {
                Phase::Hold(Check::default())
            };
            self.phase = hold;
        } else {
            // Nothing came back: acquire again next round.
            self.phase = Phase::Acquire(Box::new(acquire(&self.p, self.capacity_bps())));
        }
        let m = self.spread_bps();
        let c = self.capacity_bps().unwrap_or(f64::INFINITY);
        let elapsed = now_ns.saturating_sub(self.round_start) as f64 / 1e9;
        let (bytes, trains) = (self.round_bytes, self.round_trains);
        if let Some(h) = &mut self.held {
            let searched = method != "track:hold";
            h.low_bps = if searched {
                h.low_bps.min(h.value_bps - m)
            } else {
                h.value_bps - m
            }
            .max(0.0);
            h.high_bps = if searched {
                h.high_bps.max(h.value_bps + m)
            } else {
                h.value_bps + m
            }
            .min(c);
            h.final_ = true;
            h.quality = Quality {
                method,
                elapsed_s: elapsed,
                probe_bytes: bytes,
                trains,
                confidence,
                timescale_ms: None,
            };
        }
        self.concluded = true;
        self.close_round(now_ns, method == "track:acquire");
    }

    /// Hold checks contradicted A from both sides in enough of the last rounds, or the values
    /// A was held at over those rounds span `phase_leap` × C: A swings within the time scale,
    /// faster than checks (a round every ~1–2 s at 2% of C) follow.
    fn phase_evidence(&mut self) -> bool {
        // Riders: a reading's few probes at C carry little of the host's traffic, and what
        // is held around them is load they do not meet: they read high by the host's rate
        // (4 Mbit/s beside a tracked 20 Mbit/s path: 40–80% off on the testbed).
        let riding = self
            .rode_at
            .is_some_and(|r| self.stats.rounds < r.saturating_add(self.p.phase_window));
        if !self.p.phase
            || riding
            || !matches!(self.phase, Phase::Hold(_) | Phase::Narrow(_))
            || self.stats.rounds < self.read_left.saturating_add(self.read_cool)
        {
            return false;
        }
        let from = self.stats.rounds.saturating_sub(self.p.phase_window);
        for seen in &mut self.contra {
            while seen.front().is_some_and(|r| *r <= from) {
                seen.pop_front();
            }
        }
        while self.levels.front().is_some_and(|(r, _)| *r <= from) {
            self.levels.pop_front();
        }
        let (lo, hi) = self
            .levels
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), (_, v)| {
                (lo.min(*v), hi.max(*v))
            });
        let c = self.capacity_bps().unwrap_or(f64::INFINITY);
        hi - lo >= self.p.phase_leap * c
            || self
                .contra
                .iter()
                .all(|seen| seen.len() as u32 >= self.p.phase_evidence)
    }

    /// A change of A past `side` found in `round`: evidence for phase readings, kept for the
    /// last `phase_window` rounds' worth (bounded also while readings are off).
    fn note_change(&mut self, side: Side, round: u32) {
        let seen = &mut self.contra[side as usize];
        seen.push_back(round);
        while seen.len() > self.p.phase_window as usize {
            seen.pop_front();
        }
    }

    fn start_readings(&mut self, now_ns: u64) {
        self.stats.phase_starts += 1;
        self.read_since = now_ns;
        self.read_prior = self.held.as_ref().map_or(0.0, |h| h.value_bps);
        self.readings.clear();
        self.levels.clear();
        for seen in &mut self.contra {
            seen.clear();
        }
    }

    fn reading_shape(&self) -> ReadingShape {
        ReadingShape {
            probes: self.p.phase_probes,
            span_ns: self.p.phase_span_ns,
        }
    }

    /// The reading train, when one is due.
    fn next_reading(&mut self) -> Option<TrainSpec> {
        let c = self.capacity_bps()?;
        if !matches!(self.phase, Phase::Read(ReadStep::Due)) {
            return None;
        }
        self.phase = Phase::Read(ReadStep::Sent);
        Some(reading_train(self.reading_shape(), c))
    }

    /// A reading train came back: what A was while it crossed.
    fn handle_reading(&mut self, now_ns: u64, obs: &TrainResult) {
        let read = self.capacity_bps().and_then(|c| read_avail(obs, c));
        if track_trace::enabled() {
            // The reading in `held_bps`: what A was while the train crossed.
            let c = self.capacity_bps().unwrap_or(0.0);
            trace_stream(now_ns, "reading", c, obs, Trend::Unknown, read);
        }
        if let Some(a) = read {
            // Enough for the judgement and for a time scale at the least interval.
            let per_scale = self.p.phase_timescale_ns / self.p.phase_interval_ns.max(1);
            let keep = self.p.phase_judge + per_scale as usize + 1;
            self.readings.push(now_ns, a, u64::MAX, keep.min(4096));
            self.stats.readings += 1;
        }
        self.phase = Phase::Read(ReadStep::Back);
    }

    /// A reading round is over: the estimate is the time-weighted mean of the readings over
    /// the time scale. Readings go on for the dwell, then while the means of successive time
    /// scales still differ; then hold checks again, from that mean.
    fn conclude_reading(&mut self, now_ns: u64) {
        let (Some(c), Some(h)) = (self.capacity_bps(), self.held.as_mut()) else {
            self.phase = Phase::Read(ReadStep::Due);
            self.close_round(now_ns, false);
            return;
        };
        let ts = self.p.phase_timescale_ns;
        if let Some(a) = self.readings.mean_with(now_ns, ts, Some(self.read_prior)) {
            h.value_bps = a;
        }
        let m = self.p.margin * c;
        h.low_bps = (h.value_bps - m).max(0.0);
        h.high_bps = (h.value_bps + m).min(c);
        h.final_ = true;
        h.quality = Quality {
            method: "track:phase",
            elapsed_s: now_ns.saturating_sub(self.round_start) as f64 / 1e9,
            probe_bytes: self.round_bytes,
            trains: self.round_trains,
            // Full with 5 readings in the time scale (a 1 s mean of fewer is mostly phase).
            confidence: (self.readings.count_since(now_ns.saturating_sub(ts)) as f64 / 5.0)
                .min(1.0),
            timescale_ms: Some(ts as f64 / 1e6),
        };
        self.concluded = true;
        let dwelt = now_ns.saturating_sub(self.read_since) >= self.p.phase_dwell_ns;
        let noise = readings_are_noise(&self.readings, &self.p, c);
        let window = self.p.phase_window;
        self.phase = if dwelt && noise {
            // Back to hold checks, both sides at the margin first; the next run of readings
            // waits twice as long.
            self.spread = None;
            self.since_below = u32::MAX;
            self.read_left = self.stats.rounds;
            self.read_cool = (self.read_cool * 2).clamp(window, 16 * window);
            Phase::Hold(Check::default())
        } else {
            if dwelt {
                self.read_cool = 0;
            }
            Phase::Read(ReadStep::Due)
        };
        self.close_round(now_ns, false);
    }

    /// The next draw of the readings' random wait (xorshift).
    fn next_dither(&mut self) -> u64 {
        let mut x = self.dither;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.dither = x;
        x
    }

    /// End the round. In round mode the caller's schedule paces the bytes (the service's
    /// `Schedule`: a trailing minute at most the ceiling); the next round only waits the least
    /// interval (and a reading's random wait). In continuous mode, the next may start once
    /// its frames are paid for at the ceiling. The acquiring search is paid back too, but
    /// while checks go on: it leaves a debt of its frames, and until that is repaid each round
    /// waits twice its own pay-back (half the ceiling's tokens for the round, half for the
    /// debt). Waiting it off at once would leave
    /// the path unwatched for its whole pay-back (0.4–1.4 MB: 8–29 s at 2% of 20 Mbit/s); so
    /// checks come at half rate meanwhile, and over any run longer than twice that pay-back
    /// the load is within the ceiling, the acquisition included.
    fn close_round(&mut self, now_ns: u64, acquired: bool) {
        self.round_open = false;
        self.round_dither_ns = 0;
        let idle = match self.capacity_bps() {
            // Round mode: the caller's schedule pays for the bytes (the service's minute budget
            // at the ceiling); only the least spacing and the readings' random wait are ours.
            // The caller's pacing sets a steady rhythm (a reading round's frames at 80% of the
            // ceiling: 125 ms at 20 Mbit/s), so the random wait is also handed to it to add
            // on top ([`Tracker::round_dither_ns`]); as a least spacing alone the rhythm hid
            // it, and readings beat with a CBR source (the testbed's `stairs`: readings
            // walking 13 → 20 Mbit/s on a steady 16, and the 1 s mean with them).
            Some(_) if !self.p.continuous => {
                if matches!(self.phase, Phase::Read(_)) {
                    self.round_dither_ns = self.next_dither() % self.p.phase_interval_ns.max(1);
                    self.p.phase_interval_ns + self.round_dither_ns
                } else {
                    self.p.min_interval_ns
                }
            }
            Some(_) if acquired => {
                self.debt = self.round_frames;
                self.p.min_interval_ns
            }
            Some(c) => {
                let mut pay_ns = self.round_frames as f64 * 8.0 / (self.p.ceiling * c) * 1e9;
                if self.debt > 0 {
                    pay_ns *= 2.0;
                    self.debt = self.debt.saturating_sub(self.round_frames);
                }
                let took = now_ns.saturating_sub(self.round_start) as f64;
                let least = if matches!(self.phase, Phase::Read(_)) {
                    self.p.phase_interval_ns
                } else {
                    self.p.min_interval_ns
                };
                let idle = ((pay_ns - took).max(0.0).ceil() as u64).max(least);
                if matches!(self.phase, Phase::Read(_)) {
                    // Readings a fixed period apart sample a periodic cross stream (CBR) at
                    // the same phase of its packets each time: runs of alike readings that
                    // drift with the beat, which the 1 s mean follows and the noise test
                    // takes for bursts (seen on the testbed's STEP demo: ±25% swings on a
                    // steady 4 Mbit/s). A random extra wait of up to one reading interval
                    // makes successive readings independent draws.
                    idle + self.next_dither() % self.p.phase_interval_ns.max(1)
                } else {
                    idle
                }
            }
            None => self.p.min_interval_ns,
        };
        self.next_round_at = now_ns.saturating_add(idle);
    }
}

/// The acquiring search: `auto`, leaner (see the module's notes).
fn acquire(p: &TrackParams, capacity_bps: Option<f64>) -> Auto {
    Auto::new(AutoParams {
        capacity_bps,
        resolution: p.acquire_resolution,
        ..Tracker::acquire_params()
    })
}

/// How much a stream's delays rose (ns, last group's median less the first's, as the trend
/// tests measure it) and over how long (ns between the two groups' middle send times).
/// Record a stream for the bench ([`track_trace`]).
fn trace_stream(
    t_ns: u64,
    kind: &str,
    rate_bps: f64,
    obs: &TrainResult,
    trend: Trend,
    held_bps: Option<f64>,
) {
    let riders = obs.riders.unwrap_or_default();
    track_trace::push(track_trace::StreamRecord {
        t_ns,
        kind: kind.to_string(),
        rate_bps,
        planned: obs.probes.len(),
        sent: obs.probes.iter().filter(|p| p.sent_ns.is_some()).count(),
        received: obs.probes.iter().filter(|p| p.rx_ns.is_some()).count(),
        verdict: match trend {
            Trend::Increasing => "rising",
            Trend::NotIncreasing => "flat",
            Trend::Unknown => "unknown",
        },
        held_bps,
        rider_bytes: riders.bytes,
        competing_bytes: riders.competing_bytes,
        arrived_bytes: riders.arrived_bytes,
        beside_bytes: riders.beside_bytes,
        host_bytes_per_s: riders.host_bytes_per_s,
        span_ns: {
            let sent = || obs.probes.iter().filter_map(|p| p.sent_ns);
            sent().max().unwrap_or(0) - sent().min().unwrap_or(0)
        },
        groups_us: {
            let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
            let g = ((owd.len() as f64).sqrt().floor() as usize).max(2);
            let d = group_medians(&owd, g);
            let first = d.first().copied().unwrap_or(0.0);
            d.iter().map(|x| (x - first) / 1e3).collect()
        },
    });
}

/// Check and narrow streams whose kept length sets the next streams' (8: a few rounds).
const KEPT: usize = 8;
/// A check stream cut so short that a flat reading says nothing about its side is sent again,
/// at most this many times a check.
const SHORT_REPEATS: u32 = 3;

/// Whether the last `phase_judge` readings look like fresh draws of reading noise (hold
/// checks do better then): successive readings differ by more than `phase_noise` × C at the
/// median, and they do not come in runs of one level (bursts). Too few readings yet (a dear
/// round's pay-back, lost trains): not known, so not noise.
fn readings_are_noise(r: &Readings, p: &TrackParams, c: f64) -> bool {
    let step = r.step_median(p.phase_judge);
    let bursts = r.runs_z(p.phase_judge).is_some_and(|z| z <= p.phase_runs_z);
    step.is_some_and(|s| s > p.phase_noise * c) && !bursts
}

fn queue_rise(obs: &TrainResult) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = obs
        .probes
        .iter()
        .filter_map(|p| Some((p.sent_ns? as f64, p.rx_ns?.0 as f64 - p.sent_ns? as f64)))
        .collect();
    if pts.len() < 4 {
        return None;
    }
    let g = ((pts.len() as f64).sqrt().floor() as usize).max(2);
    let owd: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let sent: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let (d, t) = (group_medians(&owd, g), group_medians(&sent, g));
    Some((d[d.len() - 1] - d[0], t[t.len() - 1] - t[0]))
}

/// Bytes a train puts on the wire: payload plus Ethernet/IP/UDP headers of each probe.
fn frames(t: &TrainSpec) -> u64 {
    t.bytes() + t.probes.len() as u64 * WIRE_OVERHEAD
}

impl Estimator for Tracker {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        if !self.round_open {
            if !self.p.continuous || now_ns < self.next_round_at {
                return None;
            }
            self.begin_round(now_ns, None);
        }
        let t = match self.pending.take() {
            Some(t) => Some(t),
            None => match self.inner() {
                Some(e) => e.poll_train(now_ns),
                None => {
                    let t = if matches!(self.phase, Phase::Narrow(_)) {
                        self.next_narrow_stream()
                    } else if matches!(self.phase, Phase::Read(_)) {
                        self.next_reading()
                    } else {
                        self.next_check_stream()
                    };
                    if t.is_none() {
                        // A check or narrow re-search with nothing to send is over.
                        self.advance(now_ns);
                    }
                    t
                }
            },
        }?;
        let f = frames(&t);
        if self.allowance.is_some_and(|a| f > a) {
            // Kept for the next round: the inner state machine already counts it as sent.
            self.pending = Some(t);
            self.cut = true;
            self.round_open = false;
            self.close_round(now_ns, false);
            return None;
        }
        if let Some(a) = &mut self.allowance {
            *a -= f;
        }
        self.round_frames += f;
        self.round_bytes += t.bytes();
        self.round_trains += 1;
        self.stats.probe_bytes += t.bytes();
        Some(t)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        self.last = now_ns;
        if let Some(r) = obs.riders.filter(|r| r.skipped_probes > 0) {
            // Probes an elastic train left out never went: they cost nothing.
            let f = r.skipped_bytes + u64::from(r.skipped_probes) * WIRE_OVERHEAD;
            self.round_frames = self.round_frames.saturating_sub(f);
            self.round_bytes = self.round_bytes.saturating_sub(r.skipped_bytes);
            self.stats.probe_bytes = self.stats.probe_bytes.saturating_sub(r.skipped_bytes);
            if let Some(a) = &mut self.allowance {
                *a += f;
            }
        }
        let narrowing = matches!(self.phase, Phase::Narrow(_));
        let reading = matches!(self.phase, Phase::Read(_));
        match self.inner() {
            Some(e) => e.handle_train(now_ns, obs),
            None if narrowing => self.handle_narrow(obs),
            None if reading => self.handle_reading(now_ns, obs),
            None => self.handle_check(obs),
        }
        if self.round_open {
            self.advance(now_ns);
        }
    }

    fn estimate(&self) -> Option<Estimate> {
        let running = match &self.phase {
            Phase::Acquire(a) if self.round_open => a.estimate(),
            Phase::Search(s) if self.round_open => s.estimate().map(|mut e| {
                e.quality.method = "track:search";
                e
            }),
            _ => None,
        };
        match running {
            Some(mut e) => {
                e.final_ = false;
                Some(e)
            }
            None => self.held.clone(),
        }
    }

    fn is_done(&self) -> bool {
        !self.p.continuous && !self.round_open
    }

    fn next_wakeup(&self) -> Option<u64> {
        if self.round_open {
            return match &self.phase {
                Phase::Acquire(a) => a.next_wakeup(),
                Phase::Search(s) => s.next_wakeup(),
                Phase::Hold(_) | Phase::Narrow(_) | Phase::Read(_) => Some(self.last),
            };
        }
        self.p.continuous.then_some(self.next_round_at)
    }

    fn capacity(&self) -> Option<Estimate> {
        self.capacity.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, FluidPath};
    use crate::{ProbeResult, TrainRiderStats};
    use mgrp_traffic::CrossPattern;

    const S: u64 = 1_000_000_000;

    fn path(c: f64, cross: &str, seed: u64) -> FluidPath {
        let cross = CrossPattern::parse(&format!("{cross},seed={seed}")).unwrap();
        // A 100-packet buffer and 10 ms each way, as the other estimators' tests use.
        FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(cross)).unwrap()
    }

    /// Held estimates (time, estimate, truth over the second before it) after `t0`.
    struct Run {
        held: Vec<(u64, Estimate, f64)>,
        stats: TrackStats,
        /// Bytes of the acquiring round (one full `auto` search).
        acquire_bytes: u64,
        /// Bytes sent after acquisition, and over how long.
        track_bytes: u64,
        track_ns: u64,
    }

    fn run(c: f64, cross: &str, seed: u64, horizon_s: u64) -> Run {
        run_with(c, cross, seed, horizon_s, TrackParams::default())
    }

    fn run_with(c: f64, cross: &str, seed: u64, horizon_s: u64, tp: TrackParams) -> Run {
        run_from(c, cross, seed, horizon_s, tp, S / 2)
    }

    /// [`run_with`], the tracker starting at `start_ns` (which moves its checks' phase
    /// against a STEP pattern's level changes).
    fn run_from(
        c: f64,
        cross: &str,
        seed: u64,
        horizon_s: u64,
        tp: TrackParams,
        start_ns: u64,
    ) -> Run {
        let mut p = path(c, cross, seed);
        if let Ok(j) = std::env::var("STUDY_JITTER_NS") {
            // What the testbed adds (studies only): stamp jitter, pfifo 100, 50 µs one way.
            p = p.with_host(crate::fluid::Host {
                rx_jitter_ns: j.parse().unwrap(),
                packet_limit: Some(100),
                prop_ns: Some(50_000),
                seed,
                ..crate::fluid::Host::default()
            });
        }
        p.idle_until(start_ns);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(c),
            ..tp
        })
        .unwrap();
        let out = drive_rounds(&mut t, &mut p, horizon_s * S);
        run_of(out, t.stats(), &p)
    }

    /// A run's held estimates against the truth of the second before each, from a driver's
    /// output (its first final estimate is the acquisition).
    fn run_of(out: Vec<(u64, Estimate)>, stats: TrackStats, p: &FluidPath) -> Run {
        let finals: Vec<(u64, Estimate)> = out.into_iter().filter(|(_, e)| e.final_).collect();
        let (t_acq, acq) = finals[0].clone();
        assert_eq!(acq.quality.method, "track:acquire");
        let held = finals
            .iter()
            .skip(1)
            .map(|(at, e)| (*at, e.clone(), p.avail_bps(at.saturating_sub(S), *at)))
            .collect();
        Run {
            held,
            stats,
            acquire_bytes: acq.quality.probe_bytes,
            track_bytes: stats.probe_bytes.saturating_sub(acq.quality.probe_bytes),
            track_ns: p.now_ns() - t_acq,
        }
    }

    /// [`drive`], but every round's final estimate is kept, even one equal to the last (a
    /// steady path held at a fixed bracket gives the same estimate round after round).
    fn drive_rounds(t: &mut Tracker, p: &mut FluidPath, horizon_ns: u64) -> Vec<(u64, Estimate)> {
        let mut rec = Rounds {
            t,
            out: Vec::new(),
            recorded: 0,
        };
        drive(&mut rec, p, horizon_ns);
        rec.out
    }

    /// A tracker that keeps each concluded round's estimate as it happens.
    struct Rounds<'a> {
        t: &'a mut Tracker,
        out: Vec<(u64, Estimate)>,
        recorded: u32,
    }

    impl Rounds<'_> {
        fn record(&mut self, now_ns: u64) {
            let round = self.t.stats().rounds;
            if self.t.round_concluded() && round != self.recorded {
                self.recorded = round;
                self.out.extend(self.t.estimate().map(|e| (now_ns, e)));
            }
        }
    }

    impl Estimator for Rounds<'_> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            let t = self.t.poll_train(now_ns);
            self.record(now_ns);
            t
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            self.t.handle_train(now_ns, obs);
            self.record(now_ns);
        }
        fn estimate(&self) -> Option<Estimate> {
            self.t.estimate()
        }
        fn is_done(&self) -> bool {
            self.t.is_done()
        }
        fn next_wakeup(&self) -> Option<u64> {
            self.t.next_wakeup()
        }
    }

    /// Trains cut short as an elastic sender cuts them beside a host's flow: of each 50-probe
    /// stream only the first 10..=21 probes leave (drawn per train; on the testbed, 20 Mbit/s
    /// with a 4 Mbit/s flow and the default `min_share` 0.2: 10–21, median 16), the rest come
    /// back unsent and counted as skipped; every stream carried riders.
    struct Cut<'a> {
        inner: Rounds<'a>,
        rng: u64,
        planned: Option<TrainSpec>,
        kept: Vec<usize>,
        /// Cut streams short (else only mark every stream as carrying riders).
        cut: bool,
    }

    impl Estimator for Cut<'_> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            let t = self.inner.poll_train(now_ns)?;
            if !self.cut || t.probes.len() != TrackParams::default().stream_len {
                self.planned = None;
                return Some(t);
            }
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let keep = 10 + (self.rng % 12) as usize;
            self.kept.push(keep);
            let cut = TrainSpec {
                probes: t.probes[..keep].to_vec(),
                ..t.clone()
            };
            self.planned = Some(t);
            Some(cut)
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            let mut obs = obs.clone();
            obs.riders = Some(TrainRiderStats {
                bytes: 1000,
                ..TrainRiderStats::default()
            });
            if let Some(t) = self.planned.take() {
                let offsets = t.offsets();
                let left = obs.probes.len();
                let mut skipped = TrainRiderStats {
                    bytes: 1000,
                    ..TrainRiderStats::default()
                };
                for (i, ps) in t.probes.iter().enumerate().skip(left) {
                    skipped.skipped_probes += 1;
                    skipped.skipped_bytes += u64::from(ps.size);
                    obs.probes.push(ProbeResult {
                        index: i as u16,
                        size: ps.size,
                        intended_ns: offsets[i],
                        sent_ns: None,
                        rx_ns: None,
                        rx_size: None,
                        tx_real_ns: mgrp_train::WallNs(0),
                        tx_kernel_ns: None,
                        hop: None,
                    });
                }
                obs.riders = Some(skipped);
            }
            self.inner.handle_train(now_ns, &obs);
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
    }

    /// [`run_from`] with every 50-probe stream cut short ([`Cut`]).
    fn run_cut(c: f64, cross: &str, seed: u64, horizon_s: u64, tp: TrackParams) -> Run {
        run_riding(c, cross, seed, horizon_s, tp, true)
    }

    /// Every stream carries riders; 50-probe streams are cut short when `cut`.
    fn run_riding(
        c: f64,
        cross: &str,
        seed: u64,
        horizon_s: u64,
        tp: TrackParams,
        cut: bool,
    ) -> Run {
        let mut p = path(c, cross, seed);
        p.idle_until(S / 2);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(c),
            ..tp
        })
        .unwrap();
        let mut cut = Cut {
            inner: Rounds {
                t: &mut t,
                out: Vec::new(),
                recorded: 0,
            },
            rng: 0x9e37_79b9_7f4a_7c15 ^ seed,
            planned: None,
            kept: Vec::new(),
            cut,
        };
        drive(&mut cut, &mut p, horizon_s * S);
        let out = std::mem::take(&mut cut.inner.out);
        run_of(out, t.stats(), &p)
    }

    /// Streams cut short (elastic riders) judged by the probes that left, sent for the length
    /// recent streams kept, against the old rule (every stream judged as if whole): pooled
    /// median / p90 error of the held estimates and the STEP level changes followed, 20 Mbit/s,
    /// 4 seeds × 80 s. Measured (printed): see the bounds below.
    #[test]
    fn cut_streams_are_judged_by_the_probes_that_left() {
        let old = TrackParams {
            by_length: false,
            ..TrackParams::default()
        };
        let seeds: u64 = if cfg!(debug_assertions) { 1 } else { 4 };
        for cross in [
            "cbr:10mbit,size=1000",
            "poisson:10mbit,size=1000",
            "step:5mbit,8mbit,every=20s,size=500",
        ] {
            let mut res = Vec::new();
            for tp in [old, TrackParams::default()] {
                let mut errs = Vec::new();
                let mut follows = Vec::new();
                let mut readings = 0;
                for seed in 1..=seeds {
                    let r = run_cut(20e6, cross, seed, 80, tp);
                    errs.extend(r.held.iter().map(|(_, e, t)| rel(e, *t, 20e6)));
                    readings += r.stats.readings;
                    if cross.starts_with("step") {
                        follows.extend(
                            follow_run(20e6, cross, 20, seed, 80, &r)
                                .into_iter()
                                .map(|f| f.map_or(f64::INFINITY, |(t, _)| t)),
                        );
                    }
                }
                errs.sort_by(f64::total_cmp);
                let n = errs.len();
                let (med, p90) = (errs[n / 2], errs[n * 9 / 10]);
                println!(
                    "{cross} by_length={}: median {:.1}% p90 {:.1}% (n {n}), readings {readings}, follow {:?}",
                    tp.by_length,
                    med * 100.0,
                    p90 * 100.0,
                    follows.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>()
                );
                res.push((med, p90, follows, readings));
            }
            let (old, new) = (&res[0], &res[1]);
            // Bounds: what was measured (4 seeds) plus ~2 points; STEP's follow times are
            // deterministic on the model (0.3–2.5 s measured; old: 4 of 12 never, others 3–17 s).
            assert!(
                new.0 < old.0,
                "{cross}: median {:.3} not below {:.3}",
                new.0,
                old.0
            );
            let (med, p90) = match cross.split(':').next() {
                Some("cbr") => (0.07, 0.12),
                Some("poisson") => (0.14, 0.28),
                _ => (0.05, 0.09),
            };
            assert!(
                new.0 <= med && new.1 <= p90,
                "{cross}: {:.3} / {:.3}",
                new.0,
                new.1
            );
            if cross.starts_with("step") {
                let slow = new.2.iter().filter(|t| **t > 2.0).count();
                assert!(new.2.iter().all(|t| *t <= 3.0), "{cross}: {:?}", new.2);
                assert!(slow * 4 <= new.2.len(), "{cross}: {slow} steps over 2 s");
            }
            assert_eq!(
                new.3, 0,
                "{cross}: phase readings started while riders rode"
            );
        }
    }

    /// A narrow re-search whose bounds were taken below 0 (short streams' shift; a testbed
    /// run sent a stream at -0.11 Mbit/s) sends at its floor, half the margin, and a stream
    /// that cannot have tested anything above 0 records 0.
    #[test]
    fn narrow_streams_never_go_below_the_floor() {
        let mut p = path(20e6, "cbr:10mbit,size=500", 1);
        p.idle_until(S / 2);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(20e6),
            ..TrackParams::default()
        })
        .unwrap();
        drive_rounds(&mut t, &mut p, 10 * S);
        assert!(t.held.is_some(), "acquired");
        t.phase = Phase::Narrow(Narrow {
            flat: Some(-2e6),
            rising: Some(1e6),
            reach: 1e6,
            sent: None,
            streams: 0,
            unknown: 0,
            stolen: 0,
        });
        let spec = t.next_narrow_stream().expect("a stream");
        let Phase::Narrow(n) = &t.phase else {
            panic!("still narrowing")
        };
        let floor = 0.5 * t.margin_bps();
        assert!(
            floor > 0.0 && n.sent == Some(floor),
            "{:?} vs {floor}",
            n.sent
        );
        assert!(spec.probes.iter().all(|p| p.size >= 200));
    }

    /// A host that stalls the receiver: every other stream comes back with delays rising
    /// 40 µs a probe (stamps batched after a stall read as a queue), marked stolen or not.
    struct Stall<'a> {
        inner: Rounds<'a>,
        n: u32,
        mark: bool,
    }

    impl Estimator for Stall<'_> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            self.inner.poll_train(now_ns)
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            self.n += 1;
            if self.n % 2 == 1 || obs.probes.len() < 20 {
                return self.inner.handle_train(now_ns, obs);
            }
            let mut obs = obs.clone();
            for (i, pr) in obs.probes.iter_mut().enumerate() {
                if let Some(rx) = &mut pr.rx_ns {
                    rx.0 += 40_000 * i as u64;
                }
            }
            if self.mark {
                obs.stats.set_stolen_ms(30.0);
            }
            self.inner.handle_train(now_ns, &obs);
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
    }

    /// Errors of a 20 Mbit/s run behind [`Stall`] (its false rises marked stolen or not):
    /// sorted, with the tracker's stats.
    fn stalled_run(cross: &str, secs: u64, mark: bool) -> (Vec<f64>, TrackStats) {
        let mut p = path(20e6, cross, 1);
        p.idle_until(S / 2);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(20e6),
            ..TrackParams::default()
        })
        .unwrap();
        let mut st = Stall {
            inner: Rounds {
                t: &mut t,
                out: Vec::new(),
                recorded: 0,
            },
            n: 0,
            mark,
        };
        drive(&mut st, &mut p, secs * S);
        let out = std::mem::take(&mut st.inner.out);
        let r = run_of(out, t.stats(), &p);
        let mut errs: Vec<f64> = r.held.iter().map(|(_, e, t)| rel(e, *t, 20e6)).collect();
        errs.sort_by(f64::total_cmp);
        let s = r.stats;
        println!(
            "{cross} marked {mark}: median {:.3} p90 {:.3} (n {}), changes {}, repeats {} + {} narrow",
            errs[errs.len() / 2],
            errs[errs.len() * 9 / 10],
            errs.len(),
            s.changes,
            s.stolen_repeats,
            s.stolen_narrow_repeats
        );
        (errs, s)
    }

    /// Streams the host stole CPU from are sent again, not judged: with every other stream
    /// reading a false rise, the tracker holds a steady CBR path as it does on a quiet host
    /// (`holds_a_steady_path...`'s bounds) when those streams are marked stolen; unmarked, the
    /// same streams drag it down. Measured (deterministic): marked 1.6% / 1.6% median / p90,
    /// 46 repeats; unmarked 10.5% / 37.7%.
    #[test]
    fn streams_the_host_stole_from_are_checked_again() {
        let res: Vec<(f64, f64, u32)> = [true, false]
            .into_iter()
            .map(|mark| {
                let (e, s) = stalled_run("cbr:10mbit,size=500", 80, mark);
                (e[e.len() / 2], e[e.len() * 9 / 10], s.stolen_repeats)
            })
            .collect();
        let (marked, unmarked) = (res[0], res[1]);
        assert!(marked.2 > 0 && unmarked.2 == 0, "{res:?}");
        assert!(marked.0 <= 0.05 && marked.1 <= 0.20, "{marked:?}");
        assert!(unmarked.1 > marked.1, "{res:?}");
    }

    /// A narrow re-search (after a step) sends a stream the host stole from again instead of
    /// judging it: with every other stream reading a false rise, the tracker lands its
    /// re-searches where a quiet host's would when those streams are marked stolen; judged,
    /// the false rises walk the bracket down (a demo on a stealing host read 2.4 Mbit/s for 9.4).
    /// Measured (deterministic): marked 0.4% median (60.8% before narrow streams were sent
    /// again), unmarked 26.0%.
    #[test]
    fn narrow_re_searches_send_stolen_streams_again() {
        let res: Vec<(f64, u32)> = [true, false]
            .into_iter()
            .map(|mark| {
                let (e, s) = stalled_run("step:4,10,6mbit,every=20s,size=500", 60, mark);
                (e[e.len() / 2], s.stolen_narrow_repeats)
            })
            .collect();
        let (marked, unmarked) = (res[0], res[1]);
        assert!(marked.1 > 0 && unmarked.1 == 0, "{res:?}");
        assert!(marked.0 <= 0.05 && unmarked.0 > 0.2, "{res:?}");
    }

    /// Phase readings stay off while the tracker's streams carry riders (a reading's few
    /// probes at C meet none of the host's traffic held around them and read high by its
    /// rate; 40–80% off on the testbed): on/off bursts that start readings without riders
    /// start none with them.
    #[test]
    fn phase_readings_stay_off_while_riders_ride() {
        let cross = "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000";
        let free = run_with(20e6, cross, 1, 80, TrackParams::default());
        let riding = run_riding(20e6, cross, 1, 80, TrackParams::default(), false);
        assert!(free.stats.readings > 0, "{:?}", free.stats);
        assert_eq!(
            (riding.stats.phase_starts, riding.stats.readings),
            (0, 0),
            "{:?}",
            riding.stats
        );
    }

    /// One run with streams cut short: the held values against the truth, and with
    /// `STREAMS=1` every stream (`CROSS=...` picks the cross traffic).
    #[test]
    #[ignore]
    fn study_cut_trace() {
        let cross = std::env::var("CROSS").unwrap_or("step:5mbit,8mbit,every=20s,size=500".into());
        track_trace::record_streams(true);
        let r = run_cut(20e6, &cross, 1, 80, TrackParams::default());
        for x in track_trace::take_streams() {
            let t = x.t_ns as f64 / 1e9;
            if std::env::var("STREAMS").is_ok() {
                println!(
                    "  {t:.3} {} {:.2} held {:.2} left {} {}",
                    x.kind,
                    x.rate_bps / 1e6,
                    x.held_bps.unwrap_or(0.0) / 1e6,
                    x.sent,
                    x.verdict
                );
            }
        }
        track_trace::record_streams(false);
        for (t, e, truth) in &r.held {
            println!(
                "{:.2} {} {:.2} truth {:.2} err {:.1}%",
                *t as f64 / 1e9,
                e.quality.method,
                e.value_bps / 1e6,
                truth / 1e6,
                rel(e, *truth, 20e6) * 100.0
            );
        }
        println!("{:?}", r.stats);
    }

    /// Payload bytes of one full `auto` search (C known) on the path.
    fn full_auto_bytes(c: f64, cross: &str, seed: u64) -> u64 {
        let mut p = path(c, cross, seed);
        p.idle_until(S / 2);
        let mut a = Auto::new(AutoParams {
            capacity_bps: Some(c),
            ..AutoParams::default()
        });
        let out = drive(&mut a, &mut p, 60 * S);
        out.last().map_or(0, |(_, e)| e.quality.probe_bytes)
    }

    fn rel(e: &Estimate, truth: f64, c: f64) -> f64 {
        (e.value_bps - truth).abs() / truth.max(0.05 * c)
    }

    /// A steady path stays held: over 3 seeds of four cells (CBR and Poisson at 20 and
    /// 100 Mbit/s), 80 s each, seeds pooled. CBR and Poisson at 20 Mbit/s meet the issue's
    /// targets (median ≤ 5%, p90 ≤ 20%; measured medians 0.001–0.02, p90 ≤ 0.05, worst 0.08)
    /// and never walk off (≤ 35%). Poisson of 1000-byte packets at half of 100 Mbit/s is the
    /// hard cell: its 5 ms check streams see queue swings as large as the margin, noise starts
    /// searches (3–7 per 80 s) and a search can land off. Over 8 seeds its median was
    /// 0.031–0.060 per seed, p90 0.076–0.181, worst 0.363 (before rising streams had to rise
    /// one MTU time and the acquisition was repaid at half rate: 0.026–0.085, 0.09–0.31,
    /// 0.68); held here to what 3 seeds measured (median 0.047, p90 0.114, worst 0.311) plus
    /// margin, so that a regression shows. A round costs at most a quarter of a full `auto`
    /// search (measured 0.09 on CBR, ≤ 0.2 on the noisy cells), the lean acquiring search less
    /// than `auto` (0.40–0.92 of it), and the load after acquisition stays within the 2%
    /// ceiling.
    #[test]
    fn holds_a_steady_path_within_resolution_at_a_fraction_of_the_bytes() {
        for (c, cross, (max_med, max_p90, max_worst)) in [
            (20e6, "cbr:10mbit,size=500", (0.05, 0.20, 0.35)),
            (20e6, "poisson:5mbit,size=300", (0.05, 0.20, 0.35)),
            (100e6, "cbr:25mbit,size=500", (0.05, 0.20, 0.35)),
            (100e6, "poisson:50mbit,size=1000", (0.07, 0.20, 0.6)),
        ] {
            let mut errs = Vec::new();
            for seed in 1..=3 {
                let r = run(c, cross, seed, 80);
                errs.extend(r.held.iter().map(|(_, e, t)| rel(e, *t, c)));
                assert!(
                    r.held.len() >= 10,
                    "{cross} s{seed}: only {} held",
                    r.held.len()
                );
                let per_round = r.track_bytes as f64 / (r.stats.rounds - 1) as f64;
                let auto = full_auto_bytes(c, cross, seed);
                assert!(
                    per_round <= 0.25 * auto as f64,
                    "{cross} s{seed}: {per_round} B a round vs {auto} B an `auto` search",
                );
                // The lean acquiring search costs less than `auto`'s own.
                assert!(
                    r.acquire_bytes < auto,
                    "{cross} s{seed}: acquired with {} B, auto {auto} B",
                    r.acquire_bytes
                );
                eprintln!(
                    "{cross} s{seed}: acquire {} B, auto {auto} B, a round {per_round:.0} B",
                    r.acquire_bytes
                );
                // The last round's pay-back falls past the horizon: ≤ 5% of the ceiling over
                // 80 s (the exact invariant is `never_exceeds_the_ceiling`'s).
                let load = r.track_bytes as f64 * 8.0 / (r.track_ns as f64 / 1e9) / c;
                assert!(load <= 0.021, "{cross} s{seed}: load {load}");
            }
            errs.sort_by(f64::total_cmp);
            let n = errs.len();
            let (med, p90) = (errs[n / 2], errs[n * 9 / 10]);
            eprintln!(
                "{c} {cross}: median {med:.3} p90 {p90:.3} max {:.3}",
                errs[n - 1]
            );
            assert!(
                med <= max_med && p90 <= max_p90,
                "{c} {cross}: median {med} p90 {p90}"
            );
            // No wild walk: noise starts searches, but none lands far off.
            assert!(
                errs[n - 1] <= max_worst,
                "{c} {cross}: worst {}",
                errs[n - 1]
            );
        }
    }

    /// After each step of a STEP pattern (every `every_s`, from t = 0): seconds and rounds until
    /// the first held estimate within 10% of the new truth (`None`: not within the step).
    fn follow(
        c: f64,
        cross: &str,
        every_s: u64,
        seed: u64,
        horizon_s: u64,
    ) -> Vec<Option<(f64, usize)>> {
        follow_run(
            c,
            cross,
            every_s,
            seed,
            horizon_s,
            &run(c, cross, seed, horizon_s),
        )
    }

    /// [`follow`] over a given run.
    fn follow_run(
        c: f64,
        cross: &str,
        every_s: u64,
        seed: u64,
        horizon_s: u64,
        r: &Run,
    ) -> Vec<Option<(f64, usize)>> {
        let mut out = Vec::new();
        let mut k = 1;
        while (k + 1) * every_s <= horizon_s {
            let (from, to) = (k * every_s * S, (k + 1) * every_s * S);
            let truth = path(c, cross, seed).avail_bps(from + S / 10, to);
            let after: Vec<&(u64, Estimate, f64)> = r
                .held
                .iter()
                .filter(|(t, _, _)| *t > from && *t < to)
                .collect();
            out.push(
                after
                    .iter()
                    .position(|(_, e, _)| rel(e, truth, c) <= 0.10)
                    .map(|i| ((after[i].0 - from) as f64 / 1e9, i + 1)),
            );
            k += 1;
        }
        out
    }

    /// A ±20–33% step in A (STEP cross traffic every 20 s) is followed to within 10% by the
    /// first or second held estimate after it. How long that takes is set by the check rate
    /// the ceiling allows (a check's frames paid back at 2% of C before the next, twice that
    /// while the acquisition is repaid) plus the narrow re-search (2–5 single streams):
    /// measured 0.37–3.2 s at 20 Mbit/s with A near 0.7 C (the 3.2 s one in two rounds, its
    /// re-search landing 11% off), 0.42–1.8 s with A near 0.5 C, 0.24–0.62 s at 100 Mbit/s;
    /// ±50% steps 0.78–2.7 s at 20 Mbit/s (2.7 s the first, while the acquisition is repaid
    /// at half rate), 0.29–0.58 s at 100. (With a SLoPS search of the whole side instead:
    /// 0.82–3.3, 0.92–2.4, 0.59–0.90 s.) The model is deterministic for STEP; the bounds leave
    /// 0.25–0.4 s (a fraction of a check interval) above what was measured.
    #[test]
    #[ignore]
    fn study_steps() {
        for (c, cross) in [
            (20e6, "step:5mbit,8mbit,every=20s,size=500"),
            (20e6, "step:12mbit,9mbit,every=20s,size=300"),
            (100e6, "step:40mbit,55mbit,every=20s,size=1000"),
            (20e6, "step:8mbit,14mbit,every=20s,size=500"),
            (100e6, "step:40mbit,70mbit,every=20s,size=1000"),
        ] {
            for seed in 1..=3 {
                let r = run(c, cross, seed, 120);
                eprintln!(
                    "{c:e} {cross} s{seed}: {:?} {:?}",
                    follow(c, cross, 20, seed, 120),
                    r.stats
                );
            }
        }
        let r = run(20e6, "step:8mbit,14mbit,every=20s,size=500", 1, 105);
        for (t, e, truth) in r.held.iter().filter(|(t, _, _)| *t > 19 * S) {
            eprintln!(
                "{:.2} {} {:.1} truth {:.1}",
                *t as f64 / 1e9,
                e.quality.method,
                e.value_bps / 1e6,
                truth / 1e6
            );
        }
        for seed in 1..=8 {
            let r = run(100e6, "poisson:50mbit,size=1000", seed, 80);
            let mut e: Vec<f64> = r.held.iter().map(|(_, e, t)| rel(e, *t, 100e6)).collect();
            e.sort_by(f64::total_cmp);
            let n = e.len();
            eprintln!(
                "s{seed}: median {:.3} p90 {:.3} max {:.3} {:?}",
                e[n / 2],
                e[n * 9 / 10],
                e[n - 1],
                r.stats
            );
        }
    }

    /// What sets the error on a steady path: the margin (the hold's ± resolution) against the
    /// check rate it costs. Prints pooled median / p90 over 3 seeds, 80 s each.
    #[test]
    #[ignore]
    fn study_margin() {
        for margin in [0.05, 0.04, 0.035, 0.025] {
            for (c, cross) in [
                (20e6, "poisson:10mbit,size=1000"),
                (20e6, "cbr:10mbit,size=1000"),
                (100e6, "poisson:50mbit,size=1000"),
            ] {
                let mut errs = Vec::new();
                let mut rounds = 0;
                for seed in 1..=3 {
                    let tp = TrackParams {
                        margin,
                        ..TrackParams::default()
                    };
                    let r = run_with(c, cross, seed, 80, tp);
                    rounds += r.stats.rounds;
                    errs.extend(r.held.iter().map(|(_, e, t)| rel(e, *t, c)));
                }
                errs.sort_by(f64::total_cmp);
                let n = errs.len();
                eprintln!(
                    "margin {margin} {c:e} {cross}: median {:.3} p90 {:.3} n {n} rounds {rounds}",
                    errs[n / 2],
                    errs[n * 9 / 10]
                );
            }
        }
    }

    /// Pooled median / p90 of the held estimates' error over `seeds`, 80 s each.
    fn pooled(
        c: f64,
        cross: &str,
        seeds: std::ops::RangeInclusive<u64>,
        tp: TrackParams,
    ) -> (f64, f64, u32) {
        let mut errs = Vec::new();
        let mut rounds = 0;
        for seed in seeds {
            let r = run_with(c, cross, seed, 80, tp);
            rounds += r.stats.rounds;
            errs.extend(r.held.iter().map(|(_, e, t)| rel(e, *t, c)));
        }
        errs.sort_by(f64::total_cmp);
        let n = errs.len();
        (errs[n / 2], errs[n * 9 / 10], rounds)
    }

    /// Refining beats holding the last search's value ± 5% of C: over 8 seeds × 80 s per cell,
    /// pooled median and p90 of the held estimates' error, the fixed margin of before
    /// (`refine: false`, both streams every check, confirm 3) against the defaults, printed.
    /// Measured (8 seeds; 16 seeds in brackets, `study_refine`), before → after:
    /// 20 Mbit/s CBR 10 Mbit/s 3.8% → 0.4% (3.8 → 0.4), Poisson 10 Mbit/s of 1000 B 7.5% →
    /// 3.9% (6.6 → 4.7; p90 17 → 15), on/off 6 Mbit/s 16.7% → 14.6% (19.8 → 16.9; p90 63%
    /// both: 0.5 s bursts no 24 ms check sees whole), 100 Mbit/s Poisson 50 Mbit/s 3.5% →
    /// 3.3% (4.1 → 3.7; p90 11 → 10). What the refinement cannot narrow is the per-stream
    /// noise: Poisson cross traffic of 1000 B at half of 20 Mbit/s varies by ±18% of its
    /// rate over a 24 ms stream, so streams near A flip; one more repeat before a change
    /// (confirm 4) is what brought the Poisson cells down, fewer false re-searches landing
    /// off. Bounds: the issue's targets where the model meets them (CBR and Poisson ≤ 5%),
    /// elsewhere no worse than before plus the spread between the 8- and 16-seed pools (~2
    /// points). On/off figures above are without phase readings; with them (the default
    /// since), both hold variants start readings there: 2.1% → 2.2%, p90 6.9% → 7.6%.
    #[test]
    fn refining_beats_a_fixed_margin_on_steady_paths() {
        let old = TrackParams {
            refine: false,
            below_every: 1,
            confirm: 3,
            ..TrackParams::default()
        };
        // A debug build (`make unit`) pools 4 seeds: the simulation is ~50× slower.
        let seeds = if cfg!(debug_assertions) { 1..=4 } else { 1..=8 };
        for (c, cross, max_med) in [
            (20e6, "cbr:10mbit,size=1000", 0.01),
            (20e6, "poisson:10mbit,size=1000", 0.05),
            (
                20e6,
                "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000",
                1.0,
            ),
            (100e6, "poisson:50mbit,size=1000", 0.05),
        ] {
            let before = pooled(c, cross, seeds.clone(), old);
            let after = pooled(c, cross, seeds.clone(), TrackParams::default());
            eprintln!(
                "{c:e} {cross}: median {:.3} → {:.3}, p90 {:.3} → {:.3}",
                before.0, after.0, before.1, after.1
            );
            assert!(
                after.0 <= max_med && after.0 <= before.0 + 0.02 && after.1 <= before.1 + 0.03,
                "{cross}: before {before:?}, after {after:?}"
            );
        }
    }

    /// The defaults with the studies' knobs from the environment: MIN_MARGIN, SHRINK, NUDGE,
    /// BELOW, CONFIRM, DETECT_MTUS, MARGIN, MIN_RISE.
    fn params_from_env() -> TrackParams {
        let var = |k: &str, d: f64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
        let d = TrackParams::default();
        TrackParams {
            min_margin: var("MIN_MARGIN", d.min_margin),
            shrink: var("SHRINK", d.shrink),
            nudge: var("NUDGE", d.nudge),
            below_every: var("BELOW", d.below_every as f64) as u32,
            confirm: var("CONFIRM", d.confirm as f64) as u32,
            detect_mtus: var("DETECT_MTUS", d.detect_mtus),
            margin: var("MARGIN", d.margin),
            min_rise_mtus: var("MIN_RISE", d.min_rise_mtus),
            ..d
        }
    }

    /// Refinement against the fixed ± margin, with parameters from the environment.
    #[test]
    #[ignore]
    fn study_refine() {
        let var = |k: &str, d: f64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
        let tp = params_from_env();
        let old = TrackParams {
            refine: false,
            below_every: 1,
            confirm: 3,
            ..TrackParams::default()
        };
        for (c, cross) in [
            (20e6, "cbr:10mbit,size=1000"),
            (20e6, "poisson:10mbit,size=1000"),
            (20e6, "poisson:5mbit,size=300"),
            (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (100e6, "cbr:50mbit,size=1000"),
            (100e6, "poisson:50mbit,size=1000"),
        ] {
            let seeds = var("SEEDS", 8.0) as u64;
            let before = pooled(c, cross, 1..=seeds, old);
            let after = pooled(c, cross, 1..=seeds, tp);
            eprintln!(
                "{c:e} {cross}: before median {:.3} p90 {:.3} rounds {}; after {:.3} {:.3} rounds {}",
                before.0, before.1, before.2, after.0, after.1, after.2
            );
        }
    }

    /// Pooled median / p90 error, the load after acquisition (share of C, worst seed) and the
    /// phase starts over `seeds`, `horizon_s` each.
    fn pooled_load(
        c: f64,
        cross: &str,
        seeds: std::ops::RangeInclusive<u64>,
        horizon_s: u64,
        tp: TrackParams,
    ) -> (f64, f64, f64, u32) {
        let (mut errs, mut load, mut starts) = (Vec::new(), 0.0f64, 0);
        for seed in seeds {
            let r = run_with(c, cross, seed, horizon_s, tp);
            errs.extend(r.held.iter().map(|(_, e, t)| rel(e, *t, c)));
            load = load.max(r.track_bytes as f64 * 8.0 / (r.track_ns as f64 / 1e9) / c);
            starts += r.stats.phase_starts;
        }
        errs.sort_by(f64::total_cmp);
        let n = errs.len();
        (errs[n / 2], errs[n * 9 / 10], load, starts)
    }

    /// What [`pooled_load`] returns: median, p90, load, phase starts.
    type Pooled = (f64, f64, f64, u32);

    /// [`pooled_load`] over 80 s per seed with hold checks only, then with the defaults
    /// (phase readings on).
    fn hold_then_readings(
        c: f64,
        cross: &str,
        seeds: std::ops::RangeInclusive<u64>,
    ) -> (Pooled, Pooled) {
        let hold = TrackParams {
            phase: false,
            ..TrackParams::default()
        };
        (
            pooled_load(c, cross, seeds.clone(), 80, hold),
            pooled_load(c, cross, seeds, 80, TrackParams::default()),
        )
    }

    /// Phase readings follow on/off bursts (the tracking bench's on/off: exponential ~0.5 s
    /// bursts at 60% of C, 30% on average) where hold checks cannot: pooled over seeds, 80 s
    /// each, error against A over the second before each estimate. Measured over 8 seeds
    /// (`study_phase`): hold checks only 14.6% / p90 50.6% at 20 Mbit/s, 18.6% / 52.9% at
    /// 100 Mbit/s (a value knowing only the mean: 20.8%); with readings 2.0% / 7.2% and
    /// 1.7% / 5.5%; over the 4 seeds here 12.5% / 51% → 2.0% / 7.6% and 18.9% / 56% →
    /// 1.6% / 5.2% (300 s runs, 4 seeds: 2.2% / 7.1% and 1.7% / 5.2%). The model is
    /// deterministic per seed; bounds: the issue's targets (median ≤ 10%, p90 ≤ 20%) and at
    /// least 4× better than hold checks alone at the median (measured 5–10×); the load after
    /// acquisition within the ceiling (measured 1.5–1.8%; the last round's pay-back falls past
    /// the horizon, hence the 5%).
    #[test]
    fn phase_readings_follow_on_off_bursts() {
        let seeds = if cfg!(debug_assertions) { 1..=2 } else { 1..=4 };
        for (c, cross) in [
            (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (100e6, "onoff:30mbit,on=500ms,off=500ms,dist=exp,size=1000"),
        ] {
            let ((h_med, h_p90, _, _), (med, p90, load, starts)) =
                hold_then_readings(c, cross, seeds.clone());
            eprintln!(
                "{c:e} {cross}: hold median {h_med:.3} p90 {h_p90:.3}; readings median \
                 {med:.3} p90 {p90:.3} load {load:.4} starts {starts}"
            );
            assert!(starts >= 1, "{cross}: readings never started");
            assert!(
                med <= 0.10 && p90 <= 0.20,
                "{cross}: median {med} p90 {p90}"
            );
            assert!(med * 4.0 <= h_med, "{cross}: {med} vs hold {h_med}");
            assert!(load <= 0.02 * 1.05, "{cross}: load {load}");
        }
    }

    /// Smaller bursts (0.2 of C, under the leap) start readings by changes both ways past
    /// `phase_jump`, and the readings pay: this is what keeps the jump at 0.15 of C. Raising it to
    /// 0.25 to keep out the noise re-searches that once started readings on the testbed's
    /// Poisson at 20 Mbit/s (docs/tracking.md, seventeenth round) was measured with
    /// `study_phase` (16 seeds × 300 s): Poisson starts 1 → 0 (20 Mbit/s) and 2 → 0 (100), no
    /// other change on the bench's cells; but these cells lost every reading (8 seeds × 300 s:
    /// 20 Mbit/s median / p90 2.0% / 6.3% → 4.9% / 13.3%, 100 Mbit/s 0.6% / 1.5% → 4.5% / 14.1%).
    /// Here, 80 s per seed (measured over seeds 1–4: hold checks 7.2% and 3.7% at the median,
    /// readings 2.5% and 0.6%, starts 3 and 4; seed 1 alone starts none at 20 Mbit/s, one at
    /// 100). Bound: readings at least halve the median of hold checks (measured 2.9× and 6×).
    #[test]
    fn bursts_under_the_leap_start_readings_by_the_jump() {
        // A debug build (`make unit`) runs the 100 Mbit/s cell on one seed: ~50× slower.
        let cells: &[(f64, &str, std::ops::RangeInclusive<u64>)] = if cfg!(debug_assertions) {
            &[(
                100e6,
                "onoff:10mbit,on=500ms,off=500ms,dist=exp,size=1000",
                1..=1,
            )]
        } else {
            &[
                (
                    20e6,
                    "onoff:2mbit,on=500ms,off=500ms,dist=exp,size=1000",
                    1..=4,
                ),
                (
                    100e6,
                    "onoff:10mbit,on=500ms,off=500ms,dist=exp,size=1000",
                    1..=4,
                ),
            ]
        };
        for (c, cross, seeds) in cells {
            let ((h_med, _, _, _), (med, p90, _, starts)) =
                hold_then_readings(*c, cross, seeds.clone());
            eprintln!("{c:e} {cross}: hold median {h_med:.3}; readings {med:.3} / {p90:.3}, starts {starts}");
            assert!(starts >= 1, "{cross}: readings never started");
            assert!(med * 2.0 <= h_med, "{cross}: {med} vs hold {h_med}");
        }
    }

    /// Round mode as the service runs it: a round starts at most every `every_ns`, and once
    /// the frames sent since the start are paid for at `pace` × ceiling × C (the schedule's
    /// pacing share); the acquisition is not paced (the service measures C in it).
    struct Paced<'a> {
        t: &'a mut Tracker,
        every_ns: u64,
        bytes_per_ns: f64,
        start: Option<u64>,
        last_start: u64,
        acquired: u64,
        spent: u64,
        out: Vec<(u64, Estimate)>,
        recorded: u32,
    }

    impl Paced<'_> {
        fn next_start(&self) -> u64 {
            let Some(t0) = self.start else {
                return 0;
            };
            let owed = self.spent.saturating_sub(self.acquired) as f64 / self.bytes_per_ns;
            (self.last_start + self.every_ns).max(t0 + owed as u64)
        }

        fn record(&mut self, now_ns: u64) {
            let round = self.t.stats().rounds;
            if self.t.round_concluded() && round != self.recorded {
                self.recorded = round;
                if self.start.is_none() {
                    // The acquisition is over: pacing starts here, its frames not owed.
                    self.start = Some(now_ns);
                    self.acquired = self.spent;
                }
                self.out.extend(self.t.estimate().map(|e| (now_ns, e)));
            }
        }
    }

    impl Estimator for Paced<'_> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            if !self.t.in_round() {
                if now_ns < self.next_start() {
                    return None;
                }
                self.t.begin_round(now_ns, None);
                self.last_start = now_ns;
            }
            let t = self.t.poll_train(now_ns);
            self.spent += t.as_ref().map_or(0, frames);
            self.record(now_ns);
            t
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            self.t.handle_train(now_ns, obs);
            self.record(now_ns);
        }
        fn estimate(&self) -> Option<Estimate> {
            self.t.estimate()
        }
        fn is_done(&self) -> bool {
            false
        }
        fn next_wakeup(&self) -> Option<u64> {
            if self.t.in_round() {
                self.t.next_wakeup()
            } else {
                Some(self.next_start())
            }
        }
    }

    /// Pooled median / p90 error and the load after acquisition (worst seed) in round mode
    /// paced as the service paces it (every `every_ns` at most, 80% of the ceiling).
    fn pooled_paced(
        c: f64,
        cross: &str,
        seeds: std::ops::RangeInclusive<u64>,
        tp: TrackParams,
        every_ns: u64,
    ) -> (f64, f64, f64) {
        let (mut errs, mut load) = (Vec::new(), 0.0f64);
        for seed in seeds {
            let mut p = path(c, cross, seed);
            p.idle_until(S / 2);
            let mut t = Tracker::new(TrackParams {
                capacity_bps: Some(c),
                continuous: false,
                ..tp
            })
            .unwrap();
            let mut paced = Paced {
                t: &mut t,
                every_ns,
                bytes_per_ns: 0.8 * tp.ceiling * c / 8.0 / 1e9,
                start: None,
                last_start: 0,
                acquired: 0,
                spent: 0,
                out: Vec::new(),
                recorded: 0,
            };
            drive(&mut paced, &mut p, 80 * S);
            let t0 = paced.start.unwrap();
            let span = (p.now_ns() - t0) as f64 / 1e9;
            load = load.max((paced.spent - paced.acquired) as f64 * 8.0 / span / c);
            errs.extend(
                paced
                    .out
                    .iter()
                    .skip(1)
                    .map(|(at, e)| rel(e, p.avail_bps(at.saturating_sub(S), *at), c)),
            );
        }
        errs.sort_by(f64::total_cmp);
        let n = errs.len();
        (errs[n / 2], errs[n * 9 / 10], load)
    }

    /// Round mode paced as the service paces it (a round at most every 100 ms, the service's
    /// default `every` for `track`, at 80% of the 2% ceiling): on/off is followed within the
    /// issue's targets. Measured over the 4 seeds here (`study_phase_paced`): hold checks only
    /// 22.0% / p90 67.3% at 20 Mbit/s, 20.2% / 50.8% at 100; with readings 4.1% / 12.7% and
    /// 2.0% / 6.5%, load 1.6–1.8% of C (8 seeds: 3.6% / 11.6%, 2.0% / 6.5%; at a round every
    /// 250 ms, the old default: 5.2% / 18.6%, 5.5% / 17.1%). Deterministic per seed; bounds:
    /// the targets.
    #[test]
    fn phase_readings_follow_on_off_at_the_service_pacing() {
        let seeds = if cfg!(debug_assertions) { 1..=2 } else { 1..=4 };
        for (c, cross) in [
            (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (100e6, "onoff:30mbit,on=500ms,off=500ms,dist=exp,size=1000"),
        ] {
            let tp = TrackParams::default();
            let (med, p90, load) = pooled_paced(c, cross, seeds.clone(), tp, 100_000_000);
            eprintln!("{c:e} {cross}: median {med:.3} p90 {p90:.3} load {load:.4}");
            assert!(
                med <= 0.10 && p90 <= 0.20,
                "{cross}: median {med} p90 {p90}"
            );
            assert!(load <= 0.02, "{cross}: load {load}");
        }
    }

    /// On/off in round mode at the service's pacing (a round at most every 100 ms — EVERY
    /// in the environment — at 80% of the ceiling).
    #[test]
    #[ignore]
    fn study_phase_paced() {
        let seeds: u64 = std::env::var("SEEDS").map_or(4, |v| v.parse().unwrap());
        for (c, cross) in [
            (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (100e6, "onoff:30mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (20e6, "poisson:10mbit,size=1000"),
            (100e6, "poisson:50mbit,size=1000"),
        ] {
            for on in [false, true] {
                let tp = TrackParams {
                    phase: on,
                    ..TrackParams::default()
                };
                let every = std::env::var("EVERY").map_or(100_000_000, |v| v.parse().unwrap());
                let (med, p90, load) = pooled_paced(c, cross, 1..=seeds, tp, every);
                eprintln!("{c:e} {cross} phase {on}: median {med:.3} p90 {p90:.3} load {load:.4}");
            }
        }
    }

    /// Readings a fixed period apart meet a periodic cross stream (CBR) at the same phase of
    /// its packets each time: a 20-probe reading at 20 Mbit/s (1.9 ms) meets 0 or 1 packet of
    /// 4 Mbit/s, and when the reading period is close to a multiple of the packet period the
    /// readings come in runs that drift with the beat. On the testbed's demo (STEP levels of
    /// CBR, readings started by the level changes) the 1 s mean swung ±25% around a steady
    /// truth with a ~3 s period: 100 ms between readings against a 2.94 ms packet period.
    /// The tracker adds a random wait of up to one reading interval before each reading, so
    /// the gaps between readings vary by much more than a packet period (here: p10–p90 of
    /// the gaps at least half the interval; without the wait they are all the pay-back).
    #[test]
    fn readings_are_not_a_fixed_period_apart() {
        let cross = "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000";
        let r = run_with(20e6, cross, 1, 80, TrackParams::default());
        eprintln!(
            "phase starts {}, estimates {}",
            r.stats.phase_starts,
            r.held.len()
        );
        let at: Vec<u64> = r
            .held
            .iter()
            .filter(|(_, e, _)| e.quality.method == "track:phase")
            .map(|(at, _, _)| *at)
            .collect();
        let mut gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() >= 50, "{} readings", at.len());
        gaps.sort();
        let q = |p: f64| gaps[((gaps.len() - 1) as f64 * p) as usize];
        let spread = q(0.9) - q(0.1);
        eprintln!("{} gaps, p10 {} p90 {} ns", gaps.len(), q(0.1), q(0.9));
        assert!(
            spread >= TrackParams::default().phase_interval_ns / 2,
            "gaps p10 {} p90 {}",
            q(0.1),
            q(0.9)
        );
    }

    /// When readings stop: on/off bursts whose on-level readings scatter by ±20% of C (what
    /// the testbed's 100 Mbit/s readings show) keep readings going, although the step median
    /// alone took them for noise; independent draws as spread (Poisson) stop them; alike
    /// readings keep them. Deterministic draws (xorshift), 40 seeds each.
    #[test]
    fn readings_stop_on_fresh_draws_not_on_noisy_bursts() {
        let p = TrackParams::default();
        let c = 100e6;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut kept, mut old_rule_stopped, mut stopped) = (0, 0, 0);
        for _ in 0..40 {
            let (mut bursts, mut draws) = (Readings::default(), Readings::default());
            let mut on = next() < 0.5;
            for t in 0..p.phase_judge as u64 {
                // Bursts of ~5 readings (0.5 s at the 100 Mbit/s reading rate).
                if next() < 0.2 {
                    on = !on;
                }
                let a = if on { 0.4 + 0.4 * (next() - 0.5) } else { 1.0 };
                bursts.push(t, a * c, 1000, 100);
                draws.push(t, (0.3 + 0.4 * next()) * c, 1000, 100);
            }
            let old = TrackParams {
                phase_runs_z: f64::NEG_INFINITY,
                ..p
            };
            old_rule_stopped += readings_are_noise(&bursts, &old, c) as u32;
            kept += !readings_are_noise(&bursts, &p, c) as u32;
            stopped += readings_are_noise(&draws, &p, c) as u32;
        }
        eprintln!("bursts kept {kept}/40 (old rule stopped {old_rule_stopped}), draws stopped {stopped}/40");
        assert!(
            old_rule_stopped >= 10,
            "the case does not show the old rule's stop"
        );
        assert!(kept >= 38, "bursts kept {kept}/40");
        assert!(stopped >= 36, "draws stopped {stopped}/40");
        let mut alike = Readings::default();
        for t in 0..p.phase_judge as u64 {
            alike.push(t, 0.5 * c + (t % 3) as f64 * 0.01 * c, 1000, 100);
        }
        assert!(!readings_are_noise(&alike, &p, c));
        assert!(!readings_are_noise(&Readings::default(), &p, c));
    }

    /// A leap of the held value by 0.4 C or more starts readings at once
    /// ([`TrackParams::phase_leap`]) rather than after changes both ways (at 20 Mbit/s each
    /// change costs 10–20 s of the ceiling). On the tracking bench's on/off at 20 Mbit/s,
    /// 8 seeds × 80 s (the model is deterministic per seed): readings started 14.5–66.4 s in
    /// (median 29.3 s), and 33.8–66.4 s (median 39.4 s) without the leap: sooner in 5 of 8
    /// seeds, never later (a leap only adds evidence). Pooled error 2.6% / 7.5% (median /
    /// p90), 2.6% / 8.2% without. Asserted: never later, sooner in at least half the seeds,
    /// the error no worse than without (within a tenth).
    #[test]
    fn a_leap_starts_readings_without_waiting_for_the_way_back() {
        let first = |r: &Run| {
            r.held
                .iter()
                .find(|(_, e, _)| e.quality.method == "track:phase")
                .map_or(f64::INFINITY, |(t, _, _)| *t as f64 / 1e9)
        };
        let cross = "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000";
        let seeds = if cfg!(debug_assertions) { 1..=2 } else { 1..=8 };
        let no_leap = TrackParams {
            phase_leap: 2.0,
            ..TrackParams::default()
        };
        let mut sooner = 0;
        for seed in seeds.clone() {
            let both = first(&run_with(20e6, cross, seed, 80, no_leap));
            let leap = first(&run_with(20e6, cross, seed, 80, TrackParams::default()));
            eprintln!("s{seed}: readings from {leap:.1} s (both ways: {both:.1} s)");
            assert!(leap <= both, "s{seed}: {leap} s, later than {both} s");
            sooner += usize::from(leap < both);
        }
        assert!(
            2 * sooner >= seeds.clone().count(),
            "sooner in {sooner} seeds"
        );
        let (m0, p0, l0, _) = pooled_load(20e6, cross, seeds.clone(), 80, no_leap);
        let (m1, p1, l1, _) = pooled_load(20e6, cross, seeds, 80, TrackParams::default());
        eprintln!("both ways {m0:.3}/{p0:.3} load {l0:.4}; leap {m1:.3}/{p1:.3} load {l1:.4}");
        assert!(
            m1 <= m0 * 1.1 && p1 <= p0 * 1.1,
            "{m1}/{p1} against {m0}/{p0}"
        );
    }

    /// On steady paths and steps, readings never start (hold checks contradicted from both
    /// sides by confirmed changes is what starts them), so the tracker is what it was: the
    /// same estimates to the bit, the same bytes.
    #[test]
    fn phase_readings_stay_off_on_steady_paths() {
        for (c, cross) in [
            (20e6, "cbr:10mbit,size=1000"),
            (20e6, "poisson:10mbit,size=1000"),
            (100e6, "poisson:50mbit,size=1000"),
            (20e6, "step:8mbit,14mbit,every=20s,size=500"),
        ] {
            // A debug build (`make unit`) runs one seed: the simulation is ~50× slower.
            for seed in 1..=(if cfg!(debug_assertions) { 1 } else { 2 }) {
                let off = run_with(
                    c,
                    cross,
                    seed,
                    80,
                    TrackParams {
                        phase: false,
                        ..TrackParams::default()
                    },
                );
                let on = run_with(c, cross, seed, 80, TrackParams::default());
                assert_eq!(on.stats.phase_starts, 0, "{cross} s{seed}");
                assert_eq!(
                    on.stats.probe_bytes, off.stats.probe_bytes,
                    "{cross} s{seed}"
                );
                let values = |r: &Run| -> Vec<(u64, u64)> {
                    r.held
                        .iter()
                        .map(|(t, e, _)| (*t, e.value_bps.to_bits()))
                        .collect()
                };
                assert_eq!(values(&on), values(&off), "{cross} s{seed}");
            }
        }
    }

    /// The tracking bench's on/off (30% of C on average: exponential ~0.5 s bursts at 60%)
    /// and the steady cells, hold checks only against phase readings (SEEDS, HORIZON).
    #[test]
    #[ignore]
    fn study_phase() {
        let var = |k: &str, d: f64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
        let seeds = var("SEEDS", 3.0) as u64;
        let horizon = var("HORIZON", 80.0) as u64;
        let d = TrackParams::default();
        let on = TrackParams {
            phase: true,
            phase_probes: var("PROBES", d.phase_probes as f64) as usize,
            phase_span_ns: var("SPAN", d.phase_span_ns),
            phase_judge: var("JUDGE", d.phase_judge as f64) as usize,
            phase_noise: var("NOISE", d.phase_noise),
            phase_runs_z: var("RUNS_Z", d.phase_runs_z),
            phase_interval_ns: var("INTERVAL", d.phase_interval_ns as f64) as u64,
            phase_evidence: var("EVIDENCE", d.phase_evidence as f64) as u32,
            phase_jump: var("JUMP", d.phase_jump),
            phase_dwell_ns: var("DWELL", d.phase_dwell_ns as f64) as u64,
            ..d
        };
        let cells = std::env::var("CELLS").unwrap_or("onoff".into());
        // EXTRA="20e6|onoff:6mbit,on=2s,off=2s;…": more cells (run whatever CELLS says).
        let extra = std::env::var("EXTRA").unwrap_or_default();
        let extra: Vec<(f64, String)> = extra
            .split(';')
            .filter_map(|x| x.split_once('|'))
            .map(|(c, x)| (c.parse().unwrap(), x.to_string()))
            .collect();
        let fixed = [
            (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (100e6, "onoff:30mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            (20e6, "cbr:10mbit,size=1000"),
            (20e6, "poisson:10mbit,size=1000"),
            (100e6, "poisson:50mbit,size=1000"),
            (20e6, "step:8mbit,14mbit,every=20s,size=500"),
            // The tracking bench's PEAKS over 300 s: 30% of C, 60% for 18.75 s every 56.25 s.
            (20e6, "peaks:6mbit@37500ms,12mbit@18750ms,size=1000"),
            (100e6, "peaks:30mbit@37500ms,60mbit@18750ms,size=1000"),
        ];
        let fixed = fixed.iter().map(|(c, x)| (*c, x.to_string()));
        for (c, cross) in fixed.chain(extra.clone()) {
            let cross = cross.as_str();
            if !cells.split(',').any(|k| cross.starts_with(k))
                && !extra.iter().any(|e| e.1 == cross)
            {
                continue;
            }
            let hold = TrackParams { phase: false, ..d };
            for (name, tp) in [("hold", hold), ("phase", on)] {
                let (med, p90, load, starts) = pooled_load(c, cross, 1..=seeds, horizon, tp);
                eprintln!(
                    "{c:e} {cross} {name}: median {med:.3} p90 {p90:.3} load {load:.4} \
                     phase starts {starts}"
                );
            }
        }
    }

    /// How often check and narrow streams read rising against how far their rate was from A
    /// over the second around them (share of C), pooled over 8 seeds × 80 s. Poisson of
    /// 1000 B at half of 20 Mbit/s (measured): 17–51% (most bins 32–40%) read rising from
    /// 10% of C below A to 1% above it, 46–53% at +2–3%, 64–81% at +4–9%. The testbed's
    /// round 14 run shows the same flat curve. A single stream is nearly a coin flip there;
    /// fitting a logistic curve over the last 64 verdicts (with or without a share that reads
    /// either way whatever the rate) and holding its middle less δ did worse than the
    /// staircase on this model (median 3.9% → 6.4% and 7.8%) and was not kept
    /// (docs/tracking.md, fifteenth round).
    #[test]
    #[ignore]
    fn study_turn_curve() {
        let cross = std::env::var("STUDY_CROSS").unwrap_or("poisson:10mbit,size=1000".into());
        let c: f64 = std::env::var("STUDY_C").map_or(20e6, |v| v.parse().unwrap());
        let tp = TrackParams::default();
        let mut bins = std::collections::BTreeMap::<i64, (u32, u32)>::new();
        for seed in 1..=8 {
            track_trace::record_streams(true);
            let _ = run_with(c, &cross, seed, 80, tp);
            let p = path(c, &cross, seed);
            for st in track_trace::take_streams() {
                if !matches!(st.kind.as_str(), "above" | "below" | "narrow")
                    || st.verdict == "unknown"
                {
                    continue;
                }
                let a = p.avail_bps(st.t_ns.saturating_sub(S / 2), st.t_ns + S / 2);
                let off = ((st.rate_bps - a) / c * 100.0).round() as i64;
                let e = bins.entry(off.clamp(-10, 10)).or_default();
                e.0 += 1;
                e.1 += (st.verdict == "rising") as u32;
            }
        }
        track_trace::record_streams(false);
        for (k, (n, r)) in bins {
            eprintln!(
                "{k:+}% of C: {r}/{n} rising ({:.0}%)",
                100.0 * r as f64 / n as f64
            );
        }
    }

    /// Trace of one run's held values (STUDY_CROSS, STUDY_C, STUDY_SEED in the environment).
    #[test]
    #[ignore]
    fn study_trace() {
        let cross = std::env::var("STUDY_CROSS").unwrap_or("cbr:10mbit,size=500".into());
        let c: f64 = std::env::var("STUDY_C").map_or(20e6, |v| v.parse().unwrap());
        let seed: u64 = std::env::var("STUDY_SEED").map_or(1, |v| v.parse().unwrap());
        let start: u64 = std::env::var("STUDY_START").map_or(S / 2, |v| v.parse().unwrap());
        let horizon: u64 = std::env::var("STUDY_HORIZON").map_or(80, |v| v.parse().unwrap());
        let tp = TrackParams {
            phase: std::env::var("PHASE").is_ok(),
            ..TrackParams::default()
        };
        let r = run_from(c, &cross, seed, horizon, tp, start);
        for (t, e, truth) in &r.held {
            eprintln!(
                "{:.2} {} {:.2} [{:.2}, {:.2}] truth {:.2} conf {:.2} B {}",
                *t as f64 / 1e9,
                e.quality.method,
                e.value_bps / 1e6,
                e.low_bps / 1e6,
                e.high_bps / 1e6,
                truth / 1e6,
                e.quality.confidence,
                e.quality.probe_bytes
            );
        }
        eprintln!("{:?}", r.stats);
    }

    #[test]
    fn follows_steps_within_a_bounded_number_of_rounds() {
        for (c, cross, within_s) in [
            (20e6, "step:5mbit,8mbit,every=20s,size=500", 3.5),
            (20e6, "step:12mbit,9mbit,every=20s,size=300", 2.0),
            (100e6, "step:40mbit,55mbit,every=20s,size=1000", 1.0),
            // ±50% steps (A 12 ↔ 6 and 60 ↔ 30 Mbit/s).
            (20e6, "step:8mbit,14mbit,every=20s,size=500", 3.0),
            (100e6, "step:40mbit,70mbit,every=20s,size=1000", 1.0),
        ] {
            for (k, f) in follow(c, cross, 20, 1, 120).into_iter().enumerate() {
                let (t, rounds) = f.unwrap_or_else(|| panic!("{cross}: step {k} never followed"));
                assert!(
                    t <= within_s && rounds <= 2,
                    "{cross}: step {k} took {t} s, {rounds} rounds"
                );
            }
        }
    }

    /// Steps at 20 Mbit/s are followed within 2 s (issue 13's target) once the acquisition is
    /// repaid: ±20–25% and ±50% steps of A every 20 s, the tracker started at 8 phases against
    /// them (0.5–3.3 s), each step's time to the first estimate within 10% of the new level.
    ///
    /// What set the time before (`refine: false`, both streams every check, confirm 3;
    /// printed as "before"): a check's two streams (~90 kB at A = 0.75 C) are paid back at 2%
    /// of C (1.8 s) before the next, twice that while the acquisition is repaid; a round that
    /// repeated streams just before a step delays the next check further (on CBR, held values
    /// a few % off: the least rise's δ was taken over the whole stream, not the span the trend
    /// tests measure). Now the stream below A goes every third check (a fall past the margin
    /// shows in the stream above's queue and calls it at once), so most checks cost half.
    /// Measured, after / before, worst of 8 phases × the 4 steps after the first: A 15 ↔ 12,
    /// 12 ↔ 9 (±20–25%) and 12 ↔ 6 Mbit/s (±50%) 2.00, 1.86, 1.58 s / 3.24, 1.79, 1.93 s
    /// (medians 1.31, 0.87, 0.79 / 0.80, 0.96, 1.08). Not met: A 16 ↔ 8 (0.8 C, checks
    /// dearer) 2.45 s / 2.50 s, and the first step, at 20 s while the acquisition is repaid at
    /// half rate: 0.5–4.1 s (before 0.4–3.3), 9.65 s at 0.8 C (a drift round just before it,
    /// paid back at half rate; before 4.2). The model is deterministic for STEP: the bounds
    /// are the target (2 s) where met, else what was measured plus ~0.4 s.
    #[test]
    fn follows_steps_at_20_mbit_within_2_s() {
        let old = TrackParams {
            refine: false,
            below_every: 1,
            confirm: 3,
            ..TrackParams::default()
        };
        let mut slow = Vec::new();
        // A debug build (`make unit`) runs 3 of the 8 phases: the simulation is ~50× slower.
        let phases: u64 = if cfg!(debug_assertions) { 3 } else { 8 };
        for (cross, after_repaid, first) in [
            // A 15 ↔ 12 (−20%, +25%) and 12 ↔ 9 Mbit/s (±25%).
            ("step:5mbit,8mbit,every=20s,size=500", 2.0, 4.5),
            ("step:8mbit,11mbit,every=20s,size=500", 2.0, 4.5),
            // ±50%: A 12 ↔ 6 and 16 ↔ 8 Mbit/s.
            ("step:8mbit,14mbit,every=20s,size=500", 2.0, 4.5),
            ("step:4mbit,12mbit,every=20s,size=1000", 2.9, 10.0),
        ] {
            for (i, tp) in [old, TrackParams::default()].into_iter().enumerate() {
                let (mut firsts, mut later) = (Vec::new(), Vec::new());
                for k in 0..phases {
                    let r = run_from(20e6, cross, 1, 120, tp, S / 2 + k * 400_000_000);
                    for (j, f) in follow_run(20e6, cross, 20, 1, 120, &r)
                        .into_iter()
                        .enumerate()
                    {
                        let t = f.map_or(f64::INFINITY, |(t, _)| t);
                        let bound = if j == 0 { first } else { after_repaid };
                        if i == 1 && t > bound {
                            slow.push(format!("{cross} phase {k}: step {j} took {t:.2} s"));
                        }
                        if j == 0 { &mut firsts } else { &mut later }.push(t);
                    }
                }
                later.sort_by(f64::total_cmp);
                firsts.sort_by(f64::total_cmp);
                let n = later.len();
                eprintln!(
                    "{cross} {}: after the acquisition median {:.2} s, p90 {:.2} s, worst {:.2} s; \
                     first step {:.2}–{:.2} s",
                    ["before", "after"][i],
                    later[n / 2],
                    later[n * 9 / 10],
                    later[n - 1],
                    firsts[0],
                    firsts[firsts.len() - 1]
                );
            }
        }
        assert!(slow.is_empty(), "{slow:#?}");
    }

    /// Check size against step-following at 20 Mbit/s (issue 13, round 21): the variant from
    /// the environment ([`params_from_env`]: `DETECT_MTUS`, `MARGIN`, `MIN_RISE`, …) against
    /// the defaults. Per arm: steps after the acquisition (8 phases × the STEP patterns) median /
    /// p90 / worst and the share followed within 2 s; pooled median / p90 error, load and
    /// phase starts on CBR, Poisson and on/off (`SEEDS` seeds × 120 s).
    #[test]
    #[ignore]
    fn study_check_size() {
        let var = |k: &str, d: f64| std::env::var(k).map_or(d, |v| v.parse().unwrap());
        let (d, tp) = (TrackParams::default(), params_from_env());
        let seeds = var("SEEDS", 8.0) as u64;
        for (name, p) in [("default", d), ("variant", tp)] {
            let mut later = Vec::new();
            for cross in [
                "step:5mbit,8mbit,every=20s,size=500",
                "step:8mbit,14mbit,every=20s,size=500",
                "step:6mbit,10mbit,every=20s,size=1000",
                "step:2mbit,6mbit,10mbit,12mbit,8mbit,4mbit,every=20s,size=1000",
            ] {
                for k in 0..8 {
                    let r = run_from(20e6, cross, 1, 140, p, S / 2 + k * 400_000_000);
                    let f = follow_run(20e6, cross, 20, 1, 140, &r);
                    later.extend(f.into_iter().skip(1).map(|f| f.map_or(99.0, |(t, _)| t)));
                }
            }
            later.sort_by(f64::total_cmp);
            let n = later.len();
            let within = later.iter().filter(|t| **t <= 2.0).count();
            eprintln!(
                "{name}: steps {n}: median {:.2} p90 {:.2} worst {:.2} within 2 s {within}",
                later[n / 2],
                later[n * 9 / 10],
                later[n - 1]
            );
            for cross in [
                "cbr:10mbit,size=1000",
                "poisson:10mbit,size=1000",
                "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000",
            ] {
                let (med, p90, load, starts) = pooled_load(20e6, cross, 1..=seeds, 120, p);
                eprintln!(
                    "{name}: {cross}: median {med:.3} p90 {p90:.3} load {load:.4} phase starts {starts}"
                );
            }
        }
    }

    /// Rounds' bytes (with their train times) as a driver would see them, at `ceiling`.
    /// Each train: its start, frames, and whether it opened a round.
    fn spends(c: f64, cross: &str, ceiling: f64, horizon_s: u64) -> Vec<(u64, u64, bool)> {
        let mut p = path(c, cross, 1);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(c),
            ceiling,
            ..TrackParams::default()
        })
        .unwrap();
        let mut marks = RoundMarks {
            t: &mut t,
            opened: Vec::new(),
        };
        let mut sent = Vec::new();
        crate::fluid::drive_with(&mut marks, &mut p, horizon_s * S, |spec, obs| {
            sent.push((obs.start_mono_ns.0, frames(spec)));
        });
        let opened = marks.opened;
        sent.into_iter()
            .zip(opened)
            .map(|((t, b), o)| (t, b, o))
            .collect()
    }

    /// A tracker whose trains are marked when they open a round.
    struct RoundMarks<'a> {
        t: &'a mut Tracker,
        opened: Vec<bool>,
    }

    impl Estimator for RoundMarks<'_> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            let before = self.t.in_round();
            let t = self.t.poll_train(now_ns);
            if t.is_some() {
                self.opened.push(!before);
            }
            t
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            self.t.handle_train(now_ns, obs);
        }
        fn estimate(&self) -> Option<Estimate> {
            self.t.estimate()
        }
        fn is_done(&self) -> bool {
            self.t.is_done()
        }
        fn next_wakeup(&self) -> Option<u64> {
            self.t.next_wakeup()
        }
    }

    /// The ceiling is never exceeded, the acquiring search included: at the start of every
    /// round (a train that opened one), the frames sent since the first train are at
    /// most ceiling × C × the time since plus what is left of the acquisition's debt (its
    /// frames less those of the rounds since; the token rule's invariant: 1 B of tolerance for
    /// float rounding only), at 1%, 2% and 5%, on a noisy path where searches happen; and the
    /// long-run load uses most of it.
    #[test]
    fn never_exceeds_the_ceiling() {
        for ceiling in [0.01, 0.02, 0.05] {
            for (c, cross) in [
                (20e6, "poisson:5mbit,size=300"),
                (100e6, "poisson:50mbit,size=1000"),
                // Steps of ±50% every 20 s: a narrow re-search each.
                (20e6, "step:8mbit,14mbit,every=20s,size=500"),
                // On/off bursts: phase readings, a round every ~0.1 s.
                (20e6, "onoff:6mbit,on=500ms,off=500ms,dist=exp,size=1000"),
            ] {
                let sent = spends(c, cross, ceiling, 150);
                let t0 = sent[0].0;
                // The acquisition: the trains before the second round opened.
                let acquired = sent.iter().skip(1).position(|s| s.2).unwrap();
                let debt: u64 = sent[..=acquired].iter().map(|s| s.1).sum();
                let (mut total, mut rounds) = (0u64, 0);
                for (t, b, opened) in &sent {
                    if *opened {
                        rounds += 1;
                        let left = debt.saturating_sub(total - debt);
                        let allowed = ceiling * c / 8.0 * (*t - t0) as f64 / 1e9 + left as f64;
                        assert!(
                            total as f64 <= allowed + 1.0,
                            "{ceiling} {cross}: {total} B > {allowed} B at {t}"
                        );
                    }
                    total += b;
                }
                let span = (sent.last().unwrap().0 - t0) as f64 / 1e9;
                let load = total as f64 * 8.0 / span / c;
                assert!(rounds >= 5, "{ceiling} {cross}: {rounds} rounds");
                assert!(
                    load <= ceiling * 1.3 && load >= ceiling * 0.5,
                    "{ceiling} {cross}: load {load}"
                );
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        for (p, msg) in [
            (
                TrackParams {
                    ceiling: 0.0,
                    ..TrackParams::default()
                },
                "ceiling",
            ),
            (
                TrackParams {
                    ceiling: -0.1,
                    ..TrackParams::default()
                },
                "ceiling",
            ),
            (
                TrackParams {
                    ceiling: 1.5,
                    ..TrackParams::default()
                },
                "ceiling",
            ),
            (
                TrackParams {
                    ceiling: f64::NAN,
                    ..TrackParams::default()
                },
                "ceiling",
            ),
            (
                TrackParams {
                    margin: 0.0,
                    ..TrackParams::default()
                },
                "margin",
            ),
            (
                TrackParams {
                    confirm: 0,
                    ..TrackParams::default()
                },
                "confirm",
            ),
            (
                TrackParams {
                    min_margin: 0.06,
                    ..TrackParams::default()
                },
                "min_margin",
            ),
            (
                TrackParams {
                    shrink: 0.0,
                    ..TrackParams::default()
                },
                "shrink",
            ),
            (
                TrackParams {
                    below_every: 0,
                    ..TrackParams::default()
                },
                "below_every",
            ),
            (
                TrackParams {
                    stream_len: 3,
                    ..TrackParams::default()
                },
                "streams",
            ),
            (
                TrackParams {
                    phase_probes: 2,
                    ..TrackParams::default()
                },
                "phase readings",
            ),
            (
                TrackParams {
                    phase_noise: f64::NAN,
                    ..TrackParams::default()
                },
                "phase readings",
            ),
            (
                TrackParams {
                    phase_leap: 0.1,
                    ..TrackParams::default()
                },
                "a leap of at least the jump",
            ),
            (
                TrackParams {
                    phase_leap: f64::NAN,
                    ..TrackParams::default()
                },
                "phase readings",
            ),
            (
                TrackParams {
                    phase_timescale_ns: 0,
                    ..TrackParams::default()
                },
                "time scale",
            ),
        ] {
            let e = Tracker::new(p).err().expect("refused").to_string();
            assert!(e.contains(msg), "{e}");
        }
        assert!(Tracker::new(TrackParams {
            ceiling: 1.0,
            ..TrackParams::default()
        })
        .is_ok());
    }

    /// Round mode (the service's): a round ends with a final estimate and `is_done`; a train the
    /// allowance cannot pay for ends the round cut and is the first one sent in the next.
    #[test]
    fn rounds_end_done_and_keep_a_train_the_allowance_refused() {
        let c = 20e6;
        let mut p = path(c, "cbr:10mbit,size=500", 1);
        let mut t = Tracker::new(TrackParams {
            capacity_bps: Some(c),
            continuous: false,
            ..TrackParams::default()
        })
        .unwrap();
        assert!(
            t.is_done() && t.poll_train(0).is_none(),
            "no round, no train"
        );
        t.begin_round(p.now_ns(), None);
        let out = drive(&mut t, &mut p, 30 * S);
        assert!(t.is_done());
        let e = out.last().unwrap().1.clone();
        assert!(e.final_ && e.quality.method == "track:acquire", "{e:?}");
        // A hold check with room for one stream only.
        let now = p.now_ns() + S;
        p.idle_until(now);
        t.begin_round(now, Some(40_000));
        let first = t.poll_train(now).expect("one stream fits");
        assert!(frames(&first) <= 40_000);
        let obs = p.send_train(now, &first);
        t.handle_train(p.now_ns() + 20_000_000, &obs);
        assert!(t.poll_train(p.now_ns() + 20_000_000).is_none());
        assert!(t.round_cut() && t.is_done());
        assert!(!t.round_concluded(), "a cut check is no fresh estimate");
        // The allowance counts frames, as the schedule and the bottleneck do: a round that
        // could pay the refused stream's payload but not its headers is cut again.
        let need = t.pending_frames().expect("the refused stream is kept");
        assert!(need > 40_000 - frames(&first));
        let now = p.now_ns() + S;
        t.begin_round(now, Some(need - 1));
        assert!(t.poll_train(now).is_none() && t.round_cut());
        // With room for it, the refused stream leads the next round, and the check concludes.
        t.begin_round(now, Some(need));
        let second = t.poll_train(now).unwrap();
        assert_eq!(frames(&second), need);
        assert!(second.bytes() + 50 * WIRE_OVERHEAD == need);
        let obs = p.send_train(now, &second);
        t.handle_train(p.now_ns() + 20_000_000, &obs);
        assert!(t.is_done() && !t.round_cut() && t.round_concluded());
        let e = t.estimate().unwrap();
        assert_eq!(e.quality.method, "track:hold");
        assert!(rel(&e, 10e6, c) <= 0.05, "{e:?}");
    }
}
