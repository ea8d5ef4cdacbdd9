//! Loss episodes, badabing-style (seed 000 §4.6; Sommers et al., SIGCOMM 2005), sans-IO.
//!
//! Time is cut into slots of `slot_ns`. At each slot, with probability `p`, a *basic experiment*
//! starts: two back-to-back trains of `probes` × `size` B, one in that slot and one in the next,
//! so the pair says whether congestion began, ended, lasted or was absent across a slot
//! boundary. A slot probed by two experiments (slot i+1 of one, slot i of the next) gets one
//! train, which both read. A slot is *congested* when its train lost a probe, or when a probe's
//! queueing delay (one-way delay above the smallest seen) reached `(1 − alpha)` of a full
//! queue's — a queue that full is about to drop. The full queue's delay is what the surviving
//! probes of trains that lost one waited (their queue was full), or, before enough such trains,
//! the largest queueing delay seen (the seed's rule). Small queues never count
//! (`min_queue_ns`): on a path that never queues, the largest delay is noise.
//!
//! With M experiments and n₀₁, n₁₀, n₁₁ of them seeing (free, congested), (congested, free),
//! (congested, congested):
//! - frequency F = (n₀₁ + n₁₀ + 2 n₁₁) / 2M, the share of slots congested;
//! - boundaries B = (n₀₁ + n₁₀) / 2M, episode starts (≈ ends) per slot;
//! - mean duration D = F / B slots = (n₀₁ + n₁₀ + 2 n₁₁) / (n₀₁ + n₁₀).
//!
//! Slots are planned in batches of `batch_slots`, each sent as one train whose probes sit at
//! their slots' offsets (the pacer sleeps through the gaps and spins only the last 200 µs, and
//! slot times are the pacer's, not a late driver's). Experiments never straddle two batches; the
//! dead time between batches (a report's round trip) is not observed, which does not bias F or
//! D because it does not depend on congestion.

use crate::{ProbeSpec, TrainResult, TrainSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Trains that lost a probe but not all of them, before their delays say how full a full
/// queue is.
pub const MIN_LOSSY: usize = 5;

/// Observed slots kept at most (28 h of 10 ms slots): a longer run is refused up front.
pub const MAX_SLOTS: u64 = 10_000_000;

#[derive(Debug, Clone, PartialEq)]
pub struct BadabingParams {
    /// Slot length, ns.
    pub slot_ns: u64,
    /// Probability that an experiment starts at a slot.
    pub p: f64,
    /// Probes per train, and their UDP payload size.
    pub probes: usize,
    pub size: u16,
    /// A slot is congested when a probe's queueing delay reaches (1 − alpha) of the largest.
    pub alpha: f64,
    /// Queueing delays below this never mark a slot (ns).
    pub min_queue_ns: u64,
    /// Slots planned per train.
    pub batch_slots: u32,
    /// Slots to observe in all (batches × batch_slots).
    pub slots: u64,
    /// The experiments' RNG seed: the same seed plans the same slots.
    pub seed: u64,
}

impl Default for BadabingParams {
    fn default() -> Self {
        // 10 ms slots: 0.51 of slots probed × 3 × 642 B frames ≈ 0.79 Mbit/s, under 1% of a
        // 100 Mbit/s path (the seed: ~1 Mbit/s).
        BadabingParams {
            slot_ns: 10_000_000,
            p: 0.3,
            probes: 3,
            size: 600,
            alpha: 0.1,
            min_queue_ns: 1_000_000,
            batch_slots: 200,
            slots: 3000,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("badabing: {0}")]
    Bad(&'static str),
}

impl BadabingParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        let bad = |w| Err(ParamError::Bad(w));
        if !(self.p > 0.0 && self.p <= 1.0) {
            return bad("p must be in (0, 1]");
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return bad("alpha must be in (0, 1)");
        }
        if !(1..=100).contains(&self.probes) {
            return bad("probes per train must be 1..=100");
        }
        if !(32..=1472).contains(&self.size) {
            return bad("probe size must be 32..=1472 B");
        }
        if !(100_000..=1_000_000_000).contains(&self.slot_ns) {
            return bad("slot must be 100 us ..= 1 s");
        }
        if self.batch_slots < 2 {
            return bad("a batch needs at least 2 slots");
        }
        // A batch is one train: at most 10 000 probes and 60 s.
        let probes = self.batch_slots as u64 * self.probes as u64;
        if probes > 10_000 || self.batch_slots as u64 * self.slot_ns > 50_000_000_000 {
            return bad("a batch must fit one train (10 000 probes, 50 s)");
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return bad("slots must be 1..=10 000 000");
        }
        Ok(())
    }

    /// Probe load averaged over probed time, bits per second of Ethernet frames: a slot is
    /// probed with probability 1 − (1 − p)².
    pub fn load_bps(&self) -> f64 {
        let probed = 1.0 - (1.0 - self.p).powi(2);
        probed * self.probes as f64 * crate::wire_bits(self.size) / (self.slot_ns as f64 / 1e9)
    }
}

/// What one probed slot's train saw.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SlotObs {
    pub sent: u16,
    pub lost: u16,
    /// Largest one-way delay of its probes that arrived (ns, receiver's clock − sender's).
    pub max_owd_ns: Option<i64>,
}

/// The planned batch: which slots have a train, and the experiments over them.
#[derive(Debug, Clone, Default)]
struct Batch {
    /// The batch's first slot, counted over the whole run.
    base: u64,
    /// Probed slots in order (slot index within the batch).
    slots: Vec<u32>,
    /// Experiments as indices into `slots` (first, second).
    experiments: Vec<(u32, u32)>,
}

/// Loss episodes and how they were seen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossEpisodes {
    pub slot_s: f64,
    /// Basic experiments read, and their outcomes (free/congested in slot i, i+1).
    pub experiments: u64,
    pub n00: u64,
    pub n01: u64,
    pub n10: u64,
    pub n11: u64,
    /// Slots with a train, and how many of them were congested (by loss, by delay only).
    pub slots_probed: u64,
    pub congested_by_loss: u64,
    pub congested_by_delay: u64,
    /// Share of slots congested (F).
    pub frequency: f64,
    /// Mean episode length (D), slots and seconds; `None` until a boundary has been seen.
    pub mean_duration_slots: Option<f64>,
    pub mean_duration_s: Option<f64>,
    /// Probe loss: lost / sent.
    pub loss_rate: f64,
    pub probes_sent: u64,
    pub probes_lost: u64,
    /// Queueing delay that marks a slot (ns), once queues above `min_queue_ns` were seen.
    pub delay_threshold_ns: Option<u64>,
    /// Batches discarded (the receiver's report never came) and trains sent.
    pub batches_discarded: u64,
    pub trains: u32,
    pub probe_bytes: u64,
    /// From the first train's planning to the last one's result.
    pub elapsed_s: f64,
}

/// The badabing prober: plans batches of slots, reads their trains, reports episodes.
pub struct Badabing {
    params: BadabingParams,
    rng: StdRng,
    /// Slots planned so far (batches × batch_slots).
    planned: u64,
    pending: Option<Batch>,
    /// Every probed slot's observation, and every experiment as indices into it.
    obs: Vec<SlotObs>,
    experiments: Vec<(u32, u32)>,
    discarded: u64,
    trains: u32,
    probe_bytes: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl Badabing {
    pub fn new(params: BadabingParams) -> Result<Badabing, ParamError> {
        params.validate()?;
        Ok(Badabing {
            rng: StdRng::seed_from_u64(params.seed),
            params,
            planned: 0,
            pending: None,
            obs: Vec::new(),
            experiments: Vec::new(),
            discarded: 0,
            trains: 0,
            probe_bytes: 0,
            first_ns: None,
            last_ns: 0,
        })
    }

    pub fn params(&self) -> &BadabingParams {
        &self.params
    }

    /// Plan a batch: experiments start at each slot but the last with probability p.
    fn plan(&mut self, base: u64, n: u32) -> Batch {
        let mut probed = vec![false; n as usize];
        let mut starts = Vec::new();
        for i in 0..n - 1 {
            if self.rng.random_bool(self.params.p) {
                probed[i as usize] = true;
                probed[i as usize + 1] = true;
                starts.push(i);
            }
        }
        let slots: Vec<u32> = (0..n).filter(|&i| probed[i as usize]).collect();
        let index = |s: u32| slots.binary_search(&s).expect("a started slot is probed") as u32;
        let experiments = starts.iter().map(|&i| (index(i), index(i + 1))).collect();
        Batch {
            base,
            slots,
            experiments,
        }
    }

    /// The next batch's train, or `None` when every slot has been planned or one is out.
    pub fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        while self.pending.is_none() && self.planned < self.params.slots {
            let n = (self.params.slots - self.planned).min(self.params.batch_slots as u64) as u32;
            let base = self.planned;
            self.planned += n as u64;
            if n < 2 {
                continue;
            }
            let batch = self.plan(base, n);
            if batch.slots.is_empty() {
                continue;
            }
            let spec = self.spec(&batch);
            self.first_ns.get_or_insert(now_ns);
            self.pending = Some(batch);
            return Some(spec);
        }
        None
    }

    /// The slots (counted over the whole run) that the outstanding train probes, in order:
    /// its probes in groups of `probes`, the first group leaving at the first of these slots.
    pub fn pending_slots(&self) -> Option<Vec<u64>> {
        let b = self.pending.as_ref()?;
        Some(b.slots.iter().map(|&s| b.base + s as u64).collect())
    }

    fn spec(&self, b: &Batch) -> TrainSpec {
        let (k, size) = (self.params.probes, self.params.size);
        let mut probes = Vec::with_capacity(b.slots.len() * k);
        let mut prev = b.slots[0];
        for &s in &b.slots {
            for j in 0..k {
                let gap = if j == 0 {
                    (s - prev) as u64 * self.params.slot_ns
                } else {
                    0
                };
                probes.push(ProbeSpec {
                    size,
                    gap_ns: gap,
                    ttl: None,
                    // Riders would change what the probes measure.
                    may_carry: false,
                });
            }
            prev = s;
        }
        TrainSpec::new(probes)
    }

    /// What the batch's train saw. A result that does not match the batch, or whose report
    /// never came (every probe would read as lost), is discarded and counted.
    pub fn handle_train(&mut self, now_ns: u64, r: &TrainResult) {
        let Some(batch) = self.pending.take() else {
            return;
        };
        self.trains += 1;
        self.last_ns = now_ns;
        let k = self.params.probes;
        self.probe_bytes += (batch.slots.len() * k) as u64 * self.params.size as u64;
        if r.stats.report_missing || r.probes.len() != batch.slots.len() * k {
            self.discarded += 1;
            return;
        }
        let base = self.obs.len() as u32;
        for train in r.probes.chunks(k) {
            let mut o = SlotObs::default();
            for p in train {
                let tx = p.tx_kernel_ns.unwrap_or(p.tx_real_ns).0 as i64;
                match (p.sent_ns, p.rx_ns) {
                    (Some(_), Some(rx)) => {
                        o.sent += 1;
                        let owd = rx.0 as i64 - tx;
                        o.max_owd_ns = Some(o.max_owd_ns.map_or(owd, |m| m.max(owd)));
                    }
                    (Some(_), None) => {
                        o.sent += 1;
                        o.lost += 1;
                    }
                    // Never sent (a send error): neither lost nor delayed.
                    (None, _) => {}
                }
            }
            self.obs.push(o);
        }
        self.experiments
            .extend(batch.experiments.iter().map(|&(a, b)| (base + a, base + b)));
    }

    /// Every slot is planned and read.
    pub fn is_done(&self) -> bool {
        self.pending.is_none() && self.planned >= self.params.slots
    }

    /// The smallest one-way delay and the queueing delay that marks a slot: (1 − alpha) of
    /// the full queue's delay. A train that lost a probe met a full queue, so its surviving
    /// probes' queueing delay is the full queue's: the median over such trains, once
    /// [`MIN_LOSSY`] of them arrived in part. Before that, the largest delay seen stands in
    /// (the seed's rule), though one late probe (a stalled host, seconds on a loaded VM) can set
    /// it far above any queue and silence the delay test.
    fn threshold(&self) -> Option<(i64, u64)> {
        let owds = self.obs.iter().filter_map(|o| o.max_owd_ns);
        let min = owds.clone().min()?;
        let mut lossy: Vec<i64> = self
            .obs
            .iter()
            .filter(|o| o.lost > 0)
            .filter_map(|o| o.max_owd_ns)
            .collect();
        let full = if lossy.len() >= MIN_LOSSY {
            let mid = lossy.len() / 2;
            *lossy.select_nth_unstable(mid).1
        } else {
            owds.max()?
        };
        let q = full.saturating_sub(min).max(0) as u64;
        (q >= self.params.min_queue_ns)
            .then(|| (min, ((1.0 - self.params.alpha) * q as f64).ceil() as u64))
    }

    /// Episodes so far (`None` before the first experiment was read).
    pub fn report(&self) -> Option<LossEpisodes> {
        if self.experiments.is_empty() {
            return None;
        }
        let thr = self.threshold();
        let by_delay = |o: &SlotObs| match (thr, o.max_owd_ns) {
            (Some((min, t)), Some(owd)) => (owd - min) as u64 >= t,
            _ => false,
        };
        let congested: Vec<bool> = self.obs.iter().map(|o| o.lost > 0 || by_delay(o)).collect();
        let mut n = [0u64; 4];
        for &(a, b) in &self.experiments {
            n[(congested[a as usize] as usize) << 1 | congested[b as usize] as usize] += 1;
        }
        let [n00, n01, n10, n11] = n;
        let m = self.experiments.len() as u64;
        let frequency = (n01 + n10 + 2 * n11) as f64 / (2 * m) as f64;
        let boundaries = n01 + n10;
        let mean_duration_slots =
            (boundaries > 0).then(|| (n01 + n10 + 2 * n11) as f64 / boundaries as f64);
        let slot_s = self.params.slot_ns as f64 / 1e9;
        let probes_lost: u64 = self.obs.iter().map(|o| o.lost as u64).sum();
        let probes_sent: u64 = self.obs.iter().map(|o| o.sent as u64).sum();
        Some(LossEpisodes {
            slot_s,
            experiments: m,
            n00,
            n01,
            n10,
            n11,
            slots_probed: self.obs.len() as u64,
            congested_by_loss: self.obs.iter().filter(|o| o.lost > 0).count() as u64,
            congested_by_delay: self
                .obs
                .iter()
                .filter(|o| o.lost == 0 && by_delay(o))
                .count() as u64,
            frequency,
            mean_duration_slots,
            mean_duration_s: mean_duration_slots.map(|d| d * slot_s),
            loss_rate: if probes_sent > 0 {
                probes_lost as f64 / probes_sent as f64
            } else {
                0.0
            },
            probes_sent,
            probes_lost,
            delay_threshold_ns: thr.map(|(_, t)| t),
            batches_discarded: self.discarded,
            trains: self.trains,
            probe_bytes: self.probe_bytes,
            elapsed_s: self
                .first_ns
                .map_or(0.0, |f| self.last_ns.saturating_sub(f) as f64 / 1e9),
        })
    }
}

#[cfg(test)]
mod tests;
