//! The time-averaged available bandwidth of a path whose A alternates (issue 20, items 1–3).
//!
//! Under on/off or step cross traffic A jumps between levels (between ~0 and C for on/off at
//! half load); a SLoPS stream at rate R rises when it lands in a phase where A < R and stays flat
//! otherwise, so fleets sent at different moments contradict each other and a bisection reads
//! whichever phase its last fleets saw. What such a path offers on average is still well
//! defined: the share p(R) of instants at which A > R is the probability that a stream at R,
//! sent at a random instant, does not rise, and the time average of A over the instants sampled
//! is ∫₀^C p(R) dR (A ≥ 0, so E[A] = ∫ P(A > R) dR).
//!
//! The estimator samples that integral by stratified Monte Carlo: N strata of equal width C/N,
//! one stream per stratum at a rate drawn inside it, sent in a shuffled order with stream i no
//! sooner than i·T/(N−1) after the first, so rates and instants are both spread over the time scale
//! T. The area is (C/N) Σ x_j, x_j = 1 when stream j did not rise (½ when its trend test could
//! not tell). Its uncertainty is the stratified estimator's: strata collapsed in adjacent pairs,
//! variance Σ (y_a − y_b)² with y = (C/N)·x (the binomial uncertainty of p(R) over each pair of
//! rates; 0 where neighbours agree), plus half the excess rate δ a stream is long enough to
//! detect (a stream within δ above A can pass as flat). `timescale_ms` is the span the streams
//! covered: first sent to last report.
//!
//! This is pathload's grey region read the other way round: where pathload reports the span of
//! rates whose fleets disagree as a variation range, the shares inside that span say where in
//! it the average lies.
//!
//! From branch calib3 (issue 20, second attempt), with two changes: a stream that met a
//! standing or overflowing queue counts as risen ([`crate::queue`]: a full drop-tail queue holds
//! its delay flat, which read the area high in on phases), and no check of the search's value
//! after every search (`auto` starts the time average only when the search's own evidence says
//! A alternates).
//!
//! From calib5: the streams are weighed by the time each stands for ([`TimeAvg::weights`],
//! the trapezoid rule over the intervals between them), not equally. On the testbed a stream
//! that lost a probe is reported 300 ms late (the agent's linger), so the slots of an
//! overflowing on phase were lost and the overdue streams went back to back in the off phase:
//! equal weights read 100 Mbit/s on/off 500 ms at 75–95% of C where the average was 50%.

use crate::queue::{Queue, QueueJudge, QueueParams};
use crate::slops::{stream_mispaced, stream_stolen};
use crate::trend::{stream_trend, Trend, TrendParams};
use crate::{Estimate, Estimator, Quality, TrainResult, TrainSpec, WIRE_OVERHEAD};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeAvgParams {
    pub capacity_bps: f64,
    /// Streams, one per rate stratum.
    pub streams: usize,
    /// Spread the streams over at least this long (ns): the time scale averaged over.
    pub span_ns: u64,
    /// Probes per stream (fewer for low rates whose stream would otherwise last too long, down
    /// to `min_probes`).
    pub stream_len: usize,
    pub min_probes: usize,
    /// A stream lasts long enough that a rate `delta_frac`·C above A builds `detect_ns` of queue.
    pub detect_ns: f64,
    pub delta_frac: f64,
    pub min_gap_ns: u64,
    pub min_size: u16,
    pub max_size: u16,
    pub trend: TrendParams,
    /// Draws the rates inside their strata and the sending order (deterministic for a seed).
    pub seed: u64,
    /// Stated range half-width in standard deviations of the area.
    pub z: f64,
    /// Standing-queue evidence ([`crate::queue`]); `None`: the trend test alone.
    pub queue: Option<QueueParams>,
    /// Weigh each stream by the time it stands for ([`TimeAvg::weights`]): the gap after it
    /// times this share plus the gap before it times the rest (½: the trapezoid rule). `None`:
    /// every stream weighs the same (calib4; biased where reports come late in one phase: on
    /// the testbed a stream that lost a probe is reported 300 ms later).
    pub gap_share: Option<f64>,
    /// Count every stream that met a standing queue without losing probes (a
    /// [`Queue::Plateau`]) as risen, as an overflow is (calib3–6). `false` (calib7): not when
    /// the stream sent just before it, at a higher rate, could have left that queue
    /// ([`TimeAvg::own_backlog`]). Under heavy Poisson cross traffic such a plateau is most
    /// often the time average's own backlog draining at A − r behind a stream at a low rate r:
    /// the judge could not tell it from a saturated link and the area read low (20 Mbit/s
    /// Poisson at 75%, testbed-like model, 200 seeds: > 50% off 54 → 14, median error
    /// 0.345 → 0.185). A saturated link fills the queue far above one stream's bits.
    pub plateau_rises: bool,
    /// Send no new stream once this long (ns) has passed since the first: the time average
    /// ends with the strata it has, each one missing read from its neighbours in rate
    /// ([`TimeAvg::fill`]). Why: on a link that TCP holds full every stream loses
    /// probes and its report waits for the stragglers of a deep queue (at 20 Mbit/s with 4
    /// TCP flows, 0.4 s a stream: 40 streams took 15–18 s, past the service's 15 s round
    /// deadline). `None`: every stratum, however long it takes.
    pub budget_ns: Option<u64>,
    /// Leave a stratum unread, to be read from its neighbours in rate ([`TimeAvg::fill`]),
    /// when its stream cannot be trusted: its departures strayed from the plan, or the host
    /// stole CPU while it was out and the stall batched its receive stamps. `false`: every
    /// stream is judged as it reads (before round 23). Why: in steal episodes up to 80% of
    /// a time average's streams were stolen with batched stamps and the area read low, CBR
    /// at 75% of 20 Mbit/s 0.0–2.5 Mbit/s where A was 3.6–4.4 (`docs/results/r23/README.md`).
    pub drop_spoiled: bool,
    /// How far above A, as a share of δ, a stream passes for flat: the area is corrected down
    /// by this much of δ wherever the top strata rose ([`TimeAvg::area`]). ¾ on the fluid
    /// model; on the testbed ½ (`docs/results/r23/README.md`).
    pub flat_slack: f64,
}

impl TimeAvgParams {
    pub fn for_capacity(capacity_bps: f64, detect_ns: f64, seed: u64) -> Self {
        TimeAvgParams {
            capacity_bps,
            streams: 40,
            span_ns: 1_000_000_000,
            stream_len: 50,
            min_probes: 12,
            detect_ns,
            delta_frac: 1.0 / 16.0,
            min_gap_ns: 100_000,
            min_size: 200,
            max_size: 1472,
            // A stream δ above A builds `detect_ns` (≥ 2 MTU service times) of queue; a rise
            // smaller than one MTU service time is a periodic cross stream beating with the
            // probes, not a queue (it read CBR at half load 30% low on the fluid model).
            trend: TrendParams {
                min_rise_ns: 1514.0 * 8.0 / capacity_bps * 1e9,
                ..TrendParams::default()
            },
            seed,
            z: 2.0,
            queue: None,
            gap_share: Some(0.5),
            plateau_rises: false,
            budget_ns: None,
            drop_spoiled: true,
            flat_slack: 0.75,
        }
    }
}

/// A small deterministic generator (xorshift64*): the draws need no quality beyond being
/// unrelated to the cross traffic's phases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct TimeAvg {
    p: TimeAvgParams,
    /// (stratum, rate) in sending order.
    plan: Vec<(usize, f64)>,
    /// Per stratum: 1 = did not rise, 0 = rose, ½ = could not tell.
    shares: Vec<Option<f64>>,
    next: usize,
    outstanding: Option<usize>,
    next_at: u64,
    first_sent: Option<u64>,
    last: u64,
    bytes: u64,
    trains: u32,
    /// A check of one value ([`TimeAvg::check`]): the value and the margin.
    check: Option<(f64, f64)>,
    queue: Option<QueueJudge>,
    /// When each stream's first probe and last probe were sent (planned), in sending order.
    sent_at: Vec<(u64, u64)>,
    /// The budget ran out before every stratum was sent ([`TimeAvgParams::budget_ns`]).
    cut: bool,
    /// Streams left unread as spoiled ([`TimeAvgParams::drop_spoiled`]).
    spoiled: u32,
}

impl TimeAvg {
    pub fn new(p: TimeAvgParams) -> Self {
        let n = p.streams.max(2);
        let mut rng = Rng::new(p.seed);
        let w = p.capacity_bps / n as f64;
        let mut plan: Vec<(usize, f64)> = (0..n)
            .map(|j| (j, w * (j as f64 + 0.05 + 0.9 * rng.next_f64())))
            .collect();
        // Fisher–Yates: the order of the strata in time.
        for i in (1..n).rev() {
            let k = (rng.next_f64() * (i + 1) as f64) as usize;
            plan.swap(i, k.min(i));
        }
        TimeAvg {
            p: TimeAvgParams { streams: n, ..p },
            plan,
            shares: vec![None; n],
            next: 0,
            outstanding: None,
            next_at: 0,
            first_sent: None,
            last: 0,
            bytes: 0,
            trains: 0,
            check: None,
            queue: p.queue.map(QueueJudge::new),
            sent_at: Vec::with_capacity(n),
            cut: false,
            spoiled: 0,
        }
    }

    /// A check of a single value: `streams` streams spread over the span, alternating between
    /// `value − margin` (must stay flat) and `value + margin` (must rise), the first side drawn
    /// from the seed. [`TimeAvg::inconsistent`] then counts the streams that did not.
    pub fn check(p: TimeAvgParams, value_bps: f64, margin_bps: f64) -> Self {
        let mut t = TimeAvg::new(p);
        let c = t.p.capacity_bps;
        // A side beyond the search range cannot be tested: a value within the margin of C is
        // checked below only, one within the margin of 0 above only.
        let mut lo = value_bps - margin_bps;
        let mut hi = value_bps + margin_bps;
        if hi > 0.98 * c {
            hi = lo.max(0.02 * c);
        }
        if lo < 0.02 * c {
            lo = hi;
        }
        let flip = Rng::new(p.seed).next_f64() < 0.5;
        t.plan = (0..t.p.streams)
            .map(|i| (i, if (i % 2 == 0) ^ flip { lo } else { hi }))
            .collect();
        t.check = Some((value_bps, margin_bps));
        t
    }

    /// For a check: streams below the value that rose plus those above that stayed flat.
    pub fn inconsistent(&self) -> u32 {
        let Some((value, _)) = self.check else {
            return 0;
        };
        self.plan
            .iter()
            .filter_map(|(j, r)| self.shares[*j].map(|x| (*r, x)))
            .filter(|(r, x)| if *r < value { *x == 0.0 } else { *x == 1.0 })
            .count() as u32
    }

    fn delta(&self) -> f64 {
        self.p.delta_frac * self.p.capacity_bps
    }

    /// A stream at `rate` lasting about detect · C / δ.
    fn stream(&self, rate: f64) -> TrainSpec {
        let duration_ns = self.p.detect_ns / self.p.delta_frac;
        let len = self.p.stream_len.max(2);
        let gap_ns = (duration_ns / (len - 1) as f64).max(self.p.min_gap_ns as f64);
        let want = (rate * gap_ns / 8e9 - WIRE_OVERHEAD as f64).round();
        let size = want.clamp(self.p.min_size as f64, self.p.max_size as f64) as u16;
        // At low rates the smallest probe stretches the gap: fewer probes keep the duration.
        let actual_gap = crate::wire_bits(size) / rate.max(1.0) * 1e9;
        let probes =
            ((duration_ns / actual_gap) as usize + 1).clamp(self.p.min_probes.min(len), len);
        TrainSpec::constant_rate(probes, size, rate)
    }

    /// The planned spacing between two streams (ns).
    fn spacing_ns(&self) -> f64 {
        self.p.span_ns as f64 / (self.p.streams - 1).max(1) as f64
    }

    /// Per stratum, the share of the time average its stream stands for (they sum to 1).
    ///
    /// Equal shares assume the streams sample time evenly. They do not when a report's delay
    /// depends on the phase the stream met: on the testbed a stream that lost a probe (an
    /// overflowing queue: an on phase) is reported only 300 ms after its last arrival, the
    /// slots planned in that wait are lost, and the overdue streams then go back to back in
    /// the next phase. With [`TimeAvgParams::gap_share`] = λ each stream stands for λ of the
    /// interval after it and 1 − λ of the one before it (½: the trapezoid rule, the time
    /// integral of what the streams saw, each interval credited to the states at both ends).
    /// An interval is counted from a stream's last probe, plus the streams' mean length: a
    /// stream's own length depends on its rate (up to half a second at the lowest rates),
    /// and counting it biases the rate strata (CBR at half of 20 Mbit/s read 13% high).
    /// Strata not sent yet stand for one planned spacing.
    pub fn weights(&self) -> Vec<f64> {
        let n = self.p.streams;
        let planned = self.spacing_ns();
        let mut w = vec![planned; n];
        if let (Some(lambda), false) = (self.p.gap_share, self.sent_at.is_empty()) {
            let t = &self.sent_at;
            let mean_len = t
                .iter()
                .map(|(s, e)| e.saturating_sub(*s) as f64)
                .sum::<f64>()
                / t.len() as f64;
            let interval = |k: usize| -> f64 {
                match (t.get(k), t.get(k + 1)) {
                    (Some((_, end)), Some((next, _))) => {
                        next.saturating_sub(*end) as f64 + mean_len
                    }
                    _ => planned,
                }
            };
            for (i, (stratum, _)) in self.plan.iter().enumerate().take(t.len()) {
                let before = if i == 0 { planned } else { interval(i - 1) };
                w[*stratum] = lambda * interval(i) + (1.0 - lambda) * before;
            }
        }
        let total: f64 = w.iter().sum();
        w.iter().map(|v| v / total).collect()
    }

    /// A stratum's reading and its doubt (the variance of a 0/1 reading), once cut short: its
    /// own if read, else from its nearest read neighbours in rate (see [`TimeAvg::area`]).
    fn fill(&self, j: usize) -> (f64, f64) {
        if let Some(x) = self.shares[j] {
            return (x, 0.0);
        }
        let below = (0..j).rev().find_map(|k| self.shares[k].map(|x| (k, x)));
        let above = (j + 1..self.shares.len()).find_map(|k| self.shares[k].map(|x| (k, x)));
        let x = match (below, above) {
            (Some((a, xa)), Some((b, xb))) => xa + (xb - xa) * (j - a) as f64 / (b - a) as f64,
            // Below the lowest read: flat there means flat here too.
            (None, Some((_, 1.0))) => 1.0,
            // Above the highest read: risen there means risen here too.
            (Some((_, 0.0)), None) => 0.0,
            _ => 0.5,
        };
        (x, x * (1.0 - x))
    }

    /// The variance of the strata [`TimeAvg::fill`] read from their neighbours. A run of
    /// them between the same two read strata shares one unknown (where A's share crosses
    /// between them), so it counts as one block of its width: a uniform crossing, 1/12 of the
    /// width squared, where read strata bound it on both sides; else the run's largest doubt.
    /// `doubt`: each stratum's from [`TimeAvg::fill`] (0 where a stream read it).
    fn filled_doubt(&self, share: &[f64], doubt: &[f64]) -> f64 {
        let c = self.p.capacity_bps;
        let n = self.shares.len();
        let mut var = 0.0;
        let mut j = 0;
        while j < n {
            let (mut k, mut width, mut worst) = (j, 0.0, 0.0f64);
            while k < n && doubt[k] > 0.0 {
                width += c * share[k];
                worst = worst.max(doubt[k]);
                k += 1;
            }
            if k == j {
                j += 1;
                continue;
            }
            let bounded = j > 0 && k < n;
            var += width.powi(2) * if bounded { 1.0 / 12.0 } else { worst };
            j = k;
        }
        var
    }

    /// (low, area, high) from the streams so far; strata without a stream count as ½ with the
    /// widest uncertainty (once every stream was sent or the budget cut the time average
    /// short: as their neighbours in rate say, [`TimeAvg::fill`]).
    pub fn area(&self) -> (f64, f64, f64) {
        let c = self.p.capacity_bps;
        let w = c / self.p.streams as f64;
        let share = self.weights();
        // Once no more streams will come, a stratum without a reading (cut by the budget, or
        // its stream spoiled) is read from its neighbours in rate (P(A > R) falls with R,
        // [`TimeAvg::fill`]). Where every stratum was read this changes nothing.
        let filling = self.cut || self.next >= self.p.streams;
        let (x, doubt): (Vec<f64>, Vec<f64>) = if filling {
            (0..self.shares.len()).map(|j| self.fill(j)).unzip()
        } else {
            (
                self.shares.iter().map(|s| s.unwrap_or(0.5)).collect(),
                vec![],
            )
        };
        let area: f64 = x.iter().zip(&share).map(|(v, s)| c * s * v).sum();
        // The stratified estimator's variance, strata collapsed in adjacent pairs (each pair
        // weighs its mean share).
        let mut var = 0.0;
        for (pair, s) in x.chunks(2).zip(share.chunks(2)) {
            var += match (pair, s) {
                ([a, b], [sa, sb]) => (c * (sa + sb) / 2.0 * (a - b)).powi(2),
                (_, s) => (c * s[0] * 0.5).powi(2),
            };
        }
        var += if filling {
            self.filled_doubt(&share, &doubt)
        } else {
            self.shares
                .iter()
                .zip(&share)
                .filter(|(x, _)| x.is_none())
                .map(|(_, s)| (c * s * 0.5).powi(2))
                .sum::<f64>()
        };
        // A stream less than about `flat_slack`·δ above A passes for flat (its queue stays
        // under the trend test's threshold): the area reads high by up to that much wherever
        // some higher rate rose. Corrected by that much times the share of the top strata that
        // rose (none on an idle path); the range keeps the whole correction's width below too.
        let top = x.len().min(4);
        let rose = 1.0 - x[x.len() - top..].iter().sum::<f64>() / top as f64;
        let b = self.p.flat_slack * self.delta() * rose;
        let half = self.p.z * var.sqrt() + w / 2.0;
        (
            (area - 2.0 * b - half).max(0.0),
            // Clamped as the high end is: weights that sum to 1 within rounding put an idle
            // path's area a few ulps above C (CI once saw value > high by 4e-9 bit/s).
            (area - b).clamp(0.0, self.p.capacity_bps),
            (area + half).min(self.p.capacity_bps),
        )
    }

    /// Per stream in sending order: its rate and its reading (1 flat, 0 rose, ½ unknown).
    pub fn samples(&self) -> Vec<(f64, Option<f64>)> {
        self.plan
            .iter()
            .map(|(j, r)| (*r, self.shares[*j]))
            .collect()
    }

    /// Whether the stream sent before stream `i` (in sending order), at a higher rate, could
    /// have left a queue standing `level_ns` above the floor: at most its own bits at C
    /// (its rate times its length over C) plus the judge's threshold (what the cross traffic
    /// queues by itself now and then). A saturated link fills the queue to its limit (60 ms at
    /// 20 Mbit/s, 12 ms at 100 Mbit/s for 100 MTU frames), well above a 12 / 2.4 ms stream.
    fn own_backlog(&self, i: usize, level_ns: f64) -> bool {
        let (Some(prev), Some((start, end))) = (
            i.checked_sub(1).map(|k| self.plan[k].1),
            i.checked_sub(1).and_then(|k| self.sent_at.get(k)),
        ) else {
            return false;
        };
        let threshold = self.p.queue.map_or(0.0, |q| q.threshold_ns);
        let bits_ns = prev * end.saturating_sub(*start) as f64 / self.p.capacity_bps.max(1.0);
        prev > self.plan[i].1 && level_ns <= bits_ns + threshold
    }

    /// The time the streams span: first sent to the last report (ms).
    pub fn timescale_ms(&self) -> Option<f64> {
        self.first_sent
            .map(|f| self.last.saturating_sub(f) as f64 / 1e6)
    }

    /// Judge stream `i` (in sending order) and record its stratum's reading.
    fn read_stream(&mut self, i: usize, obs: &TrainResult) {
        let sent = obs.probes.iter().filter(|p| p.sent_ns.is_some()).count();
        let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
        let mut trend = stream_trend(&owd, sent, &self.p.trend);
        if let Some(j) = self.queue.as_mut() {
            let v = j.judge(obs, sent);
            let level = j.last_level_ns;
            let counted = match v {
                Queue::Clear => false,
                Queue::Overflow => true,
                Queue::Plateau => self.p.plateau_rises || !self.own_backlog(i, level),
            };
            if counted {
                trend = Trend::Increasing;
            }
        }
        let x = match trend {
            Trend::Increasing => 0.0,
            Trend::NotIncreasing => 1.0,
            Trend::Unknown => 0.5,
        };
        let (stratum, _) = self.plan[i];
        self.shares[stratum] = Some(x);
    }

    /// Streams left unread because their times could not be trusted
    /// ([`TimeAvgParams::drop_spoiled`]).
    pub fn spoiled(&self) -> u32 {
        self.spoiled
    }

    /// Streams answered so far, and those that did not rise.
    pub fn counts(&self) -> (usize, usize) {
        let done = self.shares.iter().flatten().count();
        let flat = self.shares.iter().flatten().filter(|x| **x == 1.0).count();
        (done, flat)
    }
}

impl Estimator for TimeAvg {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        if self.is_done() || self.outstanding.is_some() || now_ns < self.next_at {
            return None;
        }
        let first = *self.first_sent.get_or_insert(now_ns);
        let i = self.next;
        let share = self.p.span_ns * i as u64 / (self.p.streams as u64 - 1).max(1);
        if now_ns < first + share {
            self.next_at = first + share;
            return None;
        }
        if self
            .p
            .budget_ns
            .is_some_and(|b| i > 0 && now_ns >= first + b)
        {
            self.cut = true;
            return None;
        }
        let (_, rate) = self.plan[i];
        let s = self.stream(rate);
        let length = s.offsets().last().copied().unwrap_or(0);
        self.sent_at.push((now_ns, now_ns + length));
        self.outstanding = Some(i);
        self.bytes += s.bytes();
        self.trains += 1;
        Some(s)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        let Some(i) = self.outstanding.take() else {
            return;
        };
        self.last = now_ns;
        let spoiled = self.p.drop_spoiled
            && (stream_mispaced(obs) || stream_stolen(obs, self.p.capacity_bps));
        if spoiled {
            self.spoiled += 1;
        } else {
            self.read_stream(i, obs);
        }
        self.next = i + 1;
        let first = self.first_sent.unwrap_or(now_ns);
        if self.p.budget_ns.is_some_and(|b| now_ns >= first + b) && self.next < self.p.streams {
            self.cut = true;
        }
        let share = self.p.span_ns * self.next as u64 / (self.p.streams as u64 - 1).max(1);
        self.next_at = now_ns.max(first + share);
    }

    fn estimate(&self) -> Option<Estimate> {
        if self.trains == 0 {
            return None;
        }
        let (low_bps, value_bps, high_bps) = self.area();
        let (done, _) = self.counts();
        Some(Estimate {
            value_bps,
            low_bps,
            high_bps,
            final_: self.is_done(),
            quality: Quality {
                method: "timeavg",
                elapsed_s: self.timescale_ms().unwrap_or(0.0) / 1e3,
                probe_bytes: self.bytes,
                trains: self.trains,
                confidence: done as f64 / self.p.streams as f64,
                timescale_ms: self.timescale_ms(),
            },
        })
    }

    fn is_done(&self) -> bool {
        (self.next >= self.p.streams || self.cut) && self.outstanding.is_none()
    }

    fn next_wakeup(&self) -> Option<u64> {
        (!self.is_done() && self.outstanding.is_none()).then_some(self.next_at)
    }
}

/// Whether the fleets of a search contradict each other beyond what noise explains: for the
/// best single value A* (the one most streams agree with), count the streams that disagree
/// even with the slack δ their length allowed (one that rose at R shows A < R + δ, one that
/// stayed flat A > R − δ). A path with one A near which the trend test errs leaves at most a
/// stray stream; alternating A leaves whole fleets on the wrong side. Returns (streams that
/// disagree with the best A*, streams with a verdict).
pub fn contradicting_streams(votes: &[crate::slops::Vote], max_rate: f64) -> (u32, u32) {
    let total: u32 = votes.iter().map(|v| v.increasing + v.not_increasing).sum();
    let mut candidates = vec![0.0, max_rate];
    for v in votes {
        candidates.push(v.rate + v.delta);
        candidates.push(v.rate - v.delta);
        candidates.push(v.rate);
    }
    let wrong = |a: f64| -> u32 {
        votes
            .iter()
            .map(|v| {
                let rose_wrongly = if a > v.rate + v.delta {
                    v.increasing
                } else {
                    0
                };
                let flat_wrongly = if a < v.rate - v.delta {
                    v.not_increasing
                } else {
                    0
                };
                rose_wrongly + flat_wrongly
            })
            .sum()
    };
    let best = candidates
        .into_iter()
        .filter(|a| a.is_finite())
        .map(wrong)
        .min()
        .unwrap_or(0);
    (best, total)
}

/// Fleets split evenly (at least 2 streams rose and 2 did not) and how far apart their rates
/// are (highest / lowest; 0 without such a fleet). A fleet split evenly at R says A crossed R
/// while it was sent, P(A < R) ≈ ½; such fleets far apart (`Auto::alternates`: 3 a factor 2,
/// or 2 a factor 3) say A spends half its time below the lowest rate and half above the
/// highest, and little between: A alternates (onoff8). A steady A splits fleets only near
/// itself, within the trend test's slack.
pub fn split_fleets(votes: &[crate::slops::Vote]) -> (u32, f64) {
    let rates: Vec<f64> = votes
        .iter()
        .filter(|v| v.increasing >= 2 && v.not_increasing >= 2 && v.rate > 0.0)
        .map(|v| v.rate)
        .collect();
    let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rates.iter().copied().fold(0.0, f64::max);
    let ratio = if rates.is_empty() { 0.0 } else { hi / lo };
    (rates.len() as u32, ratio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, FluidPath};
    use crate::slops::Vote;
    use mgrp_traffic::CrossPattern;

    fn run(c: f64, cross: &str, seed: u64) -> (Estimate, f64) {
        let pattern = CrossPattern::parse(cross).unwrap();
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(pattern)).unwrap();
        path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
        let t0 = path.now_ns();
        let detect = (200_000.0f64).max(2.0 * 1514.0 * 8.0 / c * 1e9);
        let mut est = TimeAvg::new(TimeAvgParams::for_capacity(c, detect, seed));
        let out = drive(&mut est, &mut path, t0 + 30_000_000_000);
        let e = out.last().unwrap().1.clone();
        let end = path.now_ns();
        let scale = (e.quality.timescale_ms.unwrap() * 1e6) as u64;
        (e, path.avail_bps(end - scale, end))
    }

    /// On a constant A (CBR) the area is A within about one stratum and δ/2.
    #[test]
    fn constant_a_reads_a() {
        for seed in 1..=5 {
            let (e, truth) = run(20e6, "cbr:10mbit,size=500", seed);
            assert!(e.final_);
            assert!(e.low_bps <= truth && truth <= e.high_bps, "{e:?} {truth}");
            assert!((e.value_bps - truth).abs() < 0.1 * truth, "{e:?} {truth}");
        }
    }

    /// low ≤ value ≤ high whatever the streams read and however their times weigh them, an
    /// idle path's all-flat area included.
    #[test]
    fn the_value_lies_in_its_range() {
        for seed in 1..=200u64 {
            let mut t = TimeAvg::new(TimeAvgParams::for_capacity(20e6, 1_211_200.0, seed));
            let mut rng = Rng::new(seed);
            let mut at = 0u64;
            for i in 0..t.p.streams {
                at += 1_000_000 + (rng.next_f64() * 60e6) as u64;
                t.sent_at.push((at, at + 12_000_000));
                let (j, _) = t.plan[i];
                t.shares[j] = Some(match seed % 4 {
                    0 => 1.0,
                    1 => 0.0,
                    _ => [0.0, 0.5, 1.0][(rng.next_f64() * 3.0) as usize % 3],
                });
            }
            let (lo, v, hi) = t.area();
            assert!(
                0.0 <= lo && lo <= v && v <= hi && hi <= 20e6,
                "{seed}: {lo} {v} {hi}"
            );
        }
    }

    /// A budget shorter than the span ends the time average with the strata it read: fewer
    /// streams, final, each missing stratum read from its neighbours in rate, so CBR still
    /// reads A and the ranges still hold it.
    #[test]
    fn a_budget_ends_the_time_average_with_what_it_read() {
        let c = 20e6;
        let detect = (200_000.0f64).max(2.0 * 1514.0 * 8.0 / c * 1e9);
        let (mut held, mut errs, mut full_errs) = (0, vec![], vec![]);
        for seed in 1..=40 {
            let drive_with = |budget_ns| {
                let pattern = CrossPattern::parse("cbr:10mbit,size=500").unwrap();
                let mut path =
                    FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(pattern)).unwrap();
                path.idle_until(500_000_000);
                let t0 = path.now_ns();
                let mut est = TimeAvg::new(TimeAvgParams {
                    budget_ns,
                    ..TimeAvgParams::for_capacity(c, detect, seed)
                });
                let out = drive(&mut est, &mut path, t0 + 30_000_000_000);
                (out.last().unwrap().1.clone(), est.counts().0)
            };
            let (full, n_full) = drive_with(None);
            let (cut, n_cut) = drive_with(Some(300_000_000));
            assert_eq!(n_full, 40);
            // Streams are planned 1 s / 39 apart: at most 13 start within 300 ms, fewer where a
            // stream at a low rate runs long.
            assert!((3..=13).contains(&n_cut), "{n_cut} streams");
            assert!(cut.final_);
            // The last stream's report may come well after 300 ms (a low rate's long stream).
            let (ts_cut, ts_full) = (cut.quality.timescale_ms, full.quality.timescale_ms);
            assert!(ts_cut.unwrap() < ts_full.unwrap(), "{cut:?} {full:?}");
            held += usize::from(cut.low_bps <= 10e6 && 10e6 <= cut.high_bps);
            errs.push((cut.value_bps - 10e6).abs() / 10e6);
            full_errs.push((full.value_bps - 10e6).abs() / 10e6);
        }
        errs.sort_by(f64::total_cmp);
        full_errs.sort_by(f64::total_cmp);
        eprintln!(
            "cut: held {held}/40, median {:.3} worst {:.3}; full: median {:.3} worst {:.3}",
            errs[20], errs[39], full_errs[20], full_errs[39]
        );
        // Measured: held 40 of 40; median error 0.108, worst 0.54 from 3–13 strata of 40 (the
        // full runs: 0.028, 0.088). Fewer strata cost accuracy, not coverage.
        assert!(held >= 36, "held {held} of 40");
        assert!(errs[20] < 0.15, "{errs:?}");
    }

    /// Alternating A: on/off at 500 ms periods and 25% load (A is C/2 in the on phase, C in
    /// the off phase) reads the average over the streams' span, not a phase, and the streams
    /// span at least the stated second. 20 seeds at 20 and 100 Mbit/s: median error against
    /// the truth over the stated span measured 0.02 and 0.04 (the search alone, in
    /// `calib::study::timeavg`: 0.28 and 0.12, the phase it happened to see). At 50% load the
    /// on phase offers exactly C, the model's queue fills and holds its delay flat, and streams
    /// in it pass for flat: the area reads high (median 0.24–0.35), a known weakness.
    #[test]
    fn onoff_reads_the_time_average() {
        for c in [20e6, 100e6] {
            let mut errs = Vec::new();
            for seed in 1..=20 {
                let (e, truth) = run(
                    c,
                    &format!("onoff:{}mbit,on=500ms,off=500ms,seed={seed}", c / 4e6),
                    seed,
                );
                assert!(e.quality.timescale_ms.unwrap() >= 1000.0);
                errs.push((e.value_bps - truth).abs() / truth);
            }
            errs.sort_by(f64::total_cmp);
            eprintln!("{c}: median {:.3} max {:.3}", errs[10], errs[19]);
            assert!(errs[10] < 0.10, "{errs:?}");
        }
    }

    /// One stream as a path with a constant A would deliver it: flat delays below A, rising
    /// ones above. `stall`: the host stole CPU meanwhile and stamped the last ten arrivals
    /// together 5 ms late (rising at any rate). `stretch`: the sender left 20% late.
    fn delivered(t: &TrainSpec, rate: f64, a: f64, stall: bool, stretch: bool) -> TrainResult {
        let offsets = t.offsets();
        let k = if stretch { 1.2 } else { 1.0 };
        let sends: Vec<_> = offsets
            .iter()
            .map(|o| mgrp_train::SendRecord {
                mono_ns: Some(mgrp_train::MonoNs((*o as f64 * k) as u64)),
                ..Default::default()
            })
            .collect();
        let n = offsets.len();
        let mut rx: Vec<u64> = offsets
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let queued = if rate > a { 60_000 * i as u64 } else { 0 };
                (*o as f64 * k) as u64 + 1_000 + queued
            })
            .collect();
        if stall {
            let batch_at = rx[n - 10] + 5_000_000;
            for (j, r) in rx.iter_mut().skip(n - 10).enumerate() {
                *r = batch_at + j as u64 * 1_000;
            }
        }
        let arrivals: Vec<_> = rx
            .iter()
            .enumerate()
            .map(|(i, r)| mgrp_train::Arrival {
                index: i as u16,
                size: t.probes[i].size,
                rx_ns: mgrp_train::WallNs(*r),
            })
            .collect();
        let mut obs = TrainResult::assemble(
            0,
            "test".into(),
            t,
            mgrp_train::MonoNs(0),
            &sends,
            Some((&arrivals, false)),
        );
        obs.stats.set_stolen_ms(if stall { 20.0 } else { 0.0 });
        obs
    }

    /// Streams the host stole from (stamps batched) or the sender mis-paced are left unread
    /// and their strata read from their neighbours in rate: on a constant A = 5 of 10 Mbit/s
    /// with every other stream below A spoiled (half of them stalled, half mis-paced), the
    /// area reads what it reads with no stream spoiled. Judged as they read, the batched ones
    /// rose and the area read low (the testbed's steal episodes, round 23).
    #[test]
    fn spoiled_streams_are_read_from_their_neighbours() {
        let (c, a) = (10e6, 5e6);
        let read = |spoiling: bool, drop_spoiled: bool| {
            let mut t = TimeAvg::new(TimeAvgParams {
                drop_spoiled,
                ..TimeAvgParams::for_capacity(c, 1_211_200.0, 7)
            });
            let (mut now, mut below) = (0u64, 0);
            while !t.is_done() {
                now = now.max(t.next_wakeup().unwrap());
                let spec = t.poll_train(now).expect("a stream at its time");
                let rate = t.plan[t.next].1;
                below += usize::from(rate < a);
                let spoil = spoiling && rate < a && below % 2 == 0;
                let (stall, stretch) = (spoil && below % 4 == 0, spoil && below % 4 == 2);
                let obs = delivered(&spec, rate, a, stall, stretch);
                now += spec.offsets().last().unwrap() + 2_000_000;
                t.handle_train(now, &obs);
            }
            (t.estimate().unwrap(), t.spoiled(), t.counts().0)
        };
        let (clean, ..) = read(false, true);
        let (kept, n_kept, read_kept) = read(true, true);
        let (judged, n_judged, read_judged) = read(true, false);
        // 20 of 40 strata lie below A: 10 spoiled (5 stalled, 5 mis-paced).
        assert_eq!((n_kept, read_kept), (10, 30));
        assert_eq!((n_judged, read_judged), (0, 40));
        assert!(kept.final_ && kept.quality.confidence < judged.quality.confidence);
        // Neighbours in rate below A all read flat: the filled strata read as the clean run's.
        // (The clean run reads 5 − ¾δ for this synthetic path, whose streams rise sharply at
        // any rate above A.)
        assert!(
            (kept.value_bps - clean.value_bps).abs() < 1.0,
            "{kept:?} {clean:?}"
        );
        assert!(kept.high_bps - kept.low_bps >= clean.high_bps - clean.low_bps);
        assert!(kept.low_bps <= a && a <= kept.high_bps, "{kept:?}");
        // Judged, the stalled streams whose batch rose lose their strata (0.25 Mbit/s each):
        // measured 0.38 Mbit/s lower than with them left unread.
        assert!(
            judged.value_bps < kept.value_bps - 0.25e6,
            "{judged:?} {kept:?}"
        );
    }

    /// Streams on schedule weigh the same; a stall (a report 300 ms late) is shared by the
    /// streams on either side of it, and streams sent back to back after it weigh their short
    /// intervals. Equal weights without a gap share.
    #[test]
    fn a_stall_is_shared_by_the_streams_on_either_side() {
        let p = TimeAvgParams {
            streams: 4,
            span_ns: 300_000_000,
            ..TimeAvgParams::for_capacity(100e6, 242_000.0, 1)
        };
        let ms = 1_000_000;
        let weights = |p: TimeAvgParams, starts: [u64; 4]| -> Vec<f64> {
            let mut t = TimeAvg::new(p);
            t.sent_at = starts.iter().map(|s| (s * ms, s * ms + 2 * ms)).collect();
            // In sending order.
            t.plan.iter().map(|(j, _)| t.weights()[*j]).collect()
        };
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        let even = weights(p, [0, 100, 200, 300]);
        assert!(close(&even, &[0.25; 4]), "{even:?}");
        // Intervals (last probe to next first, + the 2 ms length): 100, 400, 2 ms, then the
        // planned 100 ms; weights ½ after + ½ before: 100, 250, 201, 51 (of 602).
        let stalled = weights(p, [0, 100, 500, 502]);
        let want: Vec<f64> = [100.0, 250.0, 201.0, 51.0]
            .iter()
            .map(|w| w / 602.0)
            .collect();
        assert!(close(&stalled, &want), "{stalled:?}");
        let equal = TimeAvgParams {
            gap_share: None,
            ..p
        };
        assert!(close(&weights(equal, [0, 100, 500, 502]), &[0.25; 4]));
    }

    #[test]
    fn contradiction_counts() {
        let v = |rate: f64, inc, not| Vote {
            rate,
            increasing: inc,
            not_increasing: not,
            delta: 3.0,
        };
        // A clean search: nothing contradicts A* between 56 and 62.5.
        let clean = [v(50.0, 0, 4), v(75.0, 4, 0), v(62.5, 4, 0), v(56.0, 0, 3)];
        assert_eq!(contradicting_streams(&clean, 100.0), (0, 15));
        // A stray stream near A is within the slack or one stream.
        let stray = [v(50.0, 0, 4), v(75.0, 4, 0), v(62.5, 3, 1), v(56.0, 1, 3)];
        assert_eq!(contradicting_streams(&stray, 100.0).0, 1);
        // A fleet rising at 20 after one flat at 60: a whole fleet is wrong whatever A is.
        let alt = [v(50.0, 0, 4), v(75.0, 4, 0), v(60.0, 0, 4), v(20.0, 4, 0)];
        assert_eq!(contradicting_streams(&alt, 100.0).0, 4);
    }

    #[test]
    fn split_fleets_and_how_far_apart() {
        let v = |rate: f64, inc, not| Vote {
            rate,
            increasing: inc,
            not_increasing: not,
            delta: 3.0,
        };
        // Near a steady A fleets split, close to each other (and 3:1 is not an even split).
        let steady = [v(50.0, 0, 4), v(62.5, 2, 2), v(56.0, 2, 2), v(59.0, 3, 1)];
        assert_eq!(split_fleets(&steady), (2, 62.5 / 56.0));
        // On/off at 50% load (A 0 or C): fleets split at every rate the search tried.
        let alt = [v(50.0, 2, 2), v(25.0, 2, 2), v(12.5, 3, 0), v(6.0, 2, 2)];
        assert_eq!(split_fleets(&alt), (3, 50.0 / 6.0));
        assert_eq!(split_fleets(&[v(50.0, 0, 4)]), (0, 0.0));
    }
}
