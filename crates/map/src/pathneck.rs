//! A pathneck-style bottleneck locator (Hu, Steenkiste et al., "Locating Internet bottlenecks",
//! SIGCOMM 2004), sans-IO: a baseline for Tneck that needs only the sender and trains.
//!
//! **Recursive packet train.** `H` small measurement probes with TTL 1..=H, then `N` large load
//! probes (default TTL: they reach the peer agent), then `H` measurement probes with TTL H..=1.
//! The router at hop k drops the head and tail probes whose TTL ends there and answers each with
//! an ICMP time exceeded; the **gap** between those two answers is the train's length as it
//! arrived at hop k. The load is sent back to back, faster than any link, so every link whose
//! available bandwidth is below the train's current rate stretches it: the gap grows at the
//! links that limit it. Hop H is the agent itself: its gap is between its kernel RX stamps of
//! the first and last probes that reach it. The sender's own gap (hop 0) is the train's send
//! duration.
//!
//! **One train.** The gap sequence g0..gH is fitted with a step function (dynamic programming,
//! least squares with a penalty per step so that steps smaller than the measurement noise,
//! [`PathneckConfig::min_step_ns`], are not fitted). A step up at hop k is a **choke point** on
//! link k (from hop k−1 to hop k) with confidence `conf = 1 − g_before/g_after`, the relative
//! drop of the train's rate there; it counts when `conf ≥ 0.1` (pathneck's threshold). A step
//! into hop k whose previous hop did not answer is not attributed (the rise could have
//! happened on either of two links): the train records it as ambiguous.
//!
//! **Probing set.** Over `trains` trains (pathneck: 10), a link's **d_rate** is the share of
//! valid trains in which it was a choke point. Links with `d_rate ≥ 0.5` are the path's choke
//! points; among them the **bottleneck** is the one with the largest gap after it (median over
//! the trains where it choked): the link where the train was slowest, pathneck's rule.
//!
//! Choices the paper leaves to the implementation, or that differ, written down:
//! - load probes are 1472-byte UDP payloads (pathneck: 500 bytes): with 60 of them the train
//!   lasts 14 ms at 50 Mbit/s, far above the ~0.1 ms jitter of ICMP answers on the testbed;
//! - a hop's arrival time is its reply's kernel RX stamp when both replies of the pair have one,
//!   else the reader's monotonic stamp; the agent's is its kernel RX stamp;
//! - the per-train verdict uses no hill/valley filter (the paper removes isolated spikes before
//!   fitting); a one-hop spike larger than the noise is a choke point here, and d_rate over the
//!   set is what filters it.

use crate::trace::MAX_TTL;
use mgrp_train::{ProbeResult, ProbeSpec, TrainResult, TrainSpec, MAX_PROBE_SIZE, MIN_PROBE_SIZE};
use serde::{Deserialize, Serialize};

/// Most trains in one probing set.
pub const MAX_TRAINS: u32 = 100;
/// Most load probes per train.
pub const MAX_LOAD: u16 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathneckConfig {
    /// Load probes per train (pathneck: 60).
    pub load_count: u16,
    /// Load probe size, UDP payload bytes.
    pub load_size: u16,
    /// Measurement (TTL-limited) probe size.
    pub meas_size: u16,
    /// Trains in the probing set (pathneck: 10).
    pub trains: u32,
    /// Smallest relative rate drop that makes a step a choke point (pathneck: 0.1).
    pub conf_min: f64,
    /// Smallest share of valid trains in which a link must choke (pathneck: 0.5).
    pub d_rate_min: f64,
    /// Gap noise floor: the step fit's penalty is this squared, so steps much smaller than it
    /// are not fitted.
    pub min_step_ns: u64,
}

impl Default for PathneckConfig {
    fn default() -> Self {
        PathneckConfig {
            load_count: 60,
            load_size: MAX_PROBE_SIZE,
            meas_size: 64,
            trains: 10,
            conf_min: 0.1,
            d_rate_min: 0.5,
            min_step_ns: 200_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathneckError {
    #[error("the path length (TTL of the agent) must be 1..={MAX_TTL}, not {0}")]
    Hops(u8),
    #[error("load probes per train must be 1..={MAX_LOAD}, not {0}")]
    LoadCount(u16),
    #[error("probe size {0} is outside {MIN_PROBE_SIZE}..={MAX_PROBE_SIZE} bytes")]
    Size(u16),
    #[error("trains per probing set must be 1..={MAX_TRAINS}, not {0}")]
    Trains(u32),
    #[error("{name} must be in 0..=1, not {value}")]
    Threshold { name: &'static str, value: f64 },
    #[error("the train result does not match the train ({0} probes expected, {1} reported)")]
    Mismatch(usize, usize),
}

impl PathneckConfig {
    pub fn validate(&self) -> Result<(), PathneckError> {
        if !(1..=MAX_LOAD).contains(&self.load_count) {
            return Err(PathneckError::LoadCount(self.load_count));
        }
        for s in [self.load_size, self.meas_size] {
            if !(MIN_PROBE_SIZE..=MAX_PROBE_SIZE).contains(&s) {
                return Err(PathneckError::Size(s));
            }
        }
        if !(1..=MAX_TRAINS).contains(&self.trains) {
            return Err(PathneckError::Trains(self.trains));
        }
        for (name, value) in [("conf_min", self.conf_min), ("d_rate_min", self.d_rate_min)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(PathneckError::Threshold { name, value });
            }
        }
        Ok(())
    }
}

/// The recursive packet train for a path whose agent answers at TTL `hops`.
pub fn recursive_train(hops: u8, cfg: &PathneckConfig) -> Result<TrainSpec, PathneckError> {
    cfg.validate()?;
    if hops == 0 || hops > MAX_TTL {
        return Err(PathneckError::Hops(hops));
    }
    let meas = |ttl: u8| ProbeSpec {
        size: cfg.meas_size,
        gap_ns: 0,
        ttl: Some(ttl),
        may_carry: false,
    };
    let load = ProbeSpec {
        size: cfg.load_size,
        gap_ns: 0,
        ttl: None,
        may_carry: false,
    };
    let mut probes: Vec<ProbeSpec> = (1..=hops).map(meas).collect();
    probes.extend(std::iter::repeat_n(load, cfg.load_count as usize));
    probes.extend((1..=hops).rev().map(meas));
    let mut spec = TrainSpec::new(probes);
    // The agent is told which probes reach it, so it reports without lingering for the rest.
    spec.reach_ttl = Some(hops);
    Ok(spec)
}

/// Bytes of the TTL-limited measurement probes of one train (what the 1% budget
/// counts), and of its load.
pub fn train_bytes(hops: u8, cfg: &PathneckConfig) -> (u64, u64) {
    (
        2 * hops as u64 * cfg.meas_size as u64,
        cfg.load_count as u64 * cfg.load_size as u64,
    )
}

/// The gap sequence of one train: `gaps_ns[0]` is the sender's, `gaps_ns[k]` hop k's.
pub fn gaps(hops: u8, load_count: u16, r: &TrainResult) -> Result<Vec<Option<i64>>, PathneckError> {
    let h = hops as usize;
    let n = 2 * h + load_count as usize;
    if r.probes.len() != n {
        return Err(PathneckError::Mismatch(n, r.probes.len()));
    }
    let head = |k: usize| &r.probes[k - 1];
    let tail = |k: usize| &r.probes[n - k];
    let mut out = Vec::with_capacity(h + 1);
    out.push(send_gap(head(1), tail(1)));
    for k in 1..=h {
        out.push(arrival_gap(head(k), tail(k)));
    }
    Ok(out)
}

fn send_gap(a: &ProbeResult, b: &ProbeResult) -> Option<i64> {
    match (a.tx_kernel_ns, b.tx_kernel_ns) {
        (Some(x), Some(y)) => Some(y.0 as i64 - x.0 as i64),
        _ => Some(b.sent_ns? as i64 - a.sent_ns? as i64),
    }
}

fn arrival_gap(a: &ProbeResult, b: &ProbeResult) -> Option<i64> {
    if let (Some(x), Some(y)) = (a.rx_ns, b.rx_ns) {
        return Some(y.0 as i64 - x.0 as i64);
    }
    let (x, y) = (a.hop?, b.hop?);
    match (x.rx_kernel_ns, y.rx_kernel_ns) {
        (Some(p), Some(q)) => Some(q.0 as i64 - p.0 as i64),
        _ => Some(y.rx_mono_ns.0 as i64 - x.rx_mono_ns.0 as i64),
    }
}

/// A step of the fitted gap sequence: from hop `from` to hop `to` (inclusive), its mean gap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub from: u8,
    pub to: u8,
    pub gap_ns: i64,
}

/// A step up: link `link` (hop link−1 → hop link) slowed the train.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Choke {
    pub link: u8,
    /// 1 − gap before / gap after: the relative drop of the train's rate.
    pub conf: f64,
    /// The gap after the step, ns.
    pub gap_ns: i64,
}

/// What one train said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainAnalysis {
    pub gaps_ns: Vec<Option<i64>>,
    /// The sender's gap and at least one hop's were known.
    pub valid: bool,
    pub steps: Vec<Step>,
    /// Steps up with `conf ≥ conf_min` on a link whose two ends answered.
    pub chokes: Vec<Choke>,
    /// Steps up with `conf ≥ conf_min` across a silent hop: not attributed.
    pub ambiguous: u32,
}

/// Fit and label one train's gap sequence.
pub fn analyze(gaps_ns: &[Option<i64>], cfg: &PathneckConfig) -> TrainAnalysis {
    let pts: Vec<(u8, i64)> = gaps_ns
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.map(|g| (i as u8, g)))
        .filter(|&(_, g)| g > 0)
        .collect();
    let valid = gaps_ns.first().copied().flatten().is_some_and(|g| g > 0) && pts.len() >= 2;
    let mut a = TrainAnalysis {
        gaps_ns: gaps_ns.to_vec(),
        valid,
        steps: Vec::new(),
        chokes: Vec::new(),
        ambiguous: 0,
    };
    if !valid {
        return a;
    }
    a.steps = fit_steps(&pts, cfg.min_step_ns as f64);
    for w in a.steps.windows(2) {
        let (before, after) = (w[0], w[1]);
        if after.gap_ns <= before.gap_ns {
            continue;
        }
        let conf = 1.0 - before.gap_ns as f64 / after.gap_ns as f64;
        if conf < cfg.conf_min {
            continue;
        }
        if after.from == before.to + 1 {
            a.chokes.push(Choke {
                link: after.from,
                conf,
                gap_ns: after.gap_ns,
            });
        } else {
            a.ambiguous += 1;
        }
    }
    a
}

/// Least-squares step function over `pts` (hop, gap) with penalty `min_step²` per step, then
/// neighbouring steps closer than `min_step` merged.
fn fit_steps(pts: &[(u8, i64)], min_step: f64) -> Vec<Step> {
    let m = pts.len();
    let x: Vec<f64> = pts.iter().map(|p| p.1 as f64).collect();
    let (mut s1, mut s2) = (vec![0.0; m + 1], vec![0.0; m + 1]);
    for i in 0..m {
        s1[i + 1] = s1[i] + x[i];
        s2[i + 1] = s2[i] + x[i] * x[i];
    }
    // SSE of x[i..j] around its mean.
    let sse = |i: usize, j: usize| {
        let n = (j - i) as f64;
        let s = s1[j] - s1[i];
        (s2[j] - s2[i] - s * s / n).max(0.0)
    };
    let penalty = min_step * min_step;
    let mut best = vec![f64::INFINITY; m + 1];
    let mut cut = vec![0usize; m + 1];
    best[0] = -penalty;
    for j in 1..=m {
        for i in 0..j {
            let c = best[i] + penalty + sse(i, j);
            if c < best[j] {
                best[j] = c;
                cut[j] = i;
            }
        }
    }
    let mut bounds = Vec::new();
    let mut j = m;
    while j > 0 {
        bounds.push((cut[j], j));
        j = cut[j];
    }
    bounds.reverse();
    // Merge neighbours whose means differ by less than the noise floor.
    let mut segs: Vec<(usize, usize)> = Vec::new();
    for (i, j) in bounds {
        let mean = |i: usize, j: usize| (s1[j] - s1[i]) / (j - i) as f64;
        match segs.last_mut() {
            Some(last) if (mean(last.0, last.1) - mean(i, j)).abs() < min_step => last.1 = j,
            _ => segs.push((i, j)),
        }
    }
    segs.into_iter()
        .map(|(i, j)| Step {
            from: pts[i].0,
            to: pts[j - 1].0,
            gap_ns: ((s1[j] - s1[i]) / (j - i) as f64).round() as i64,
        })
        .collect()
}

/// One link's record over the probing set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRate {
    pub link: u8,
    /// Share of valid trains in which it choked.
    pub d_rate: f64,
    /// Median conf and gap after it over those trains.
    pub conf: f64,
    pub gap_ns: i64,
}

/// The probing set's answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathneckVerdict {
    pub link: u8,
    /// Trains analysed (valid or not) when it was given.
    pub trains: u32,
    pub d_rate: f64,
    pub conf: f64,
    pub gap_ns: i64,
}

/// The locator's state: one train at a time, the verdict once the set is done.
#[derive(Debug, Clone)]
pub struct Pathneck {
    cfg: PathneckConfig,
    hops: u8,
    trains: Vec<TrainAnalysis>,
}

impl Pathneck {
    /// A probing set for a path whose agent answers at TTL `hops`.
    pub fn new(cfg: PathneckConfig, hops: u8) -> Result<Pathneck, PathneckError> {
        recursive_train(hops, &cfg)?;
        Ok(Pathneck {
            cfg,
            hops,
            trains: Vec::new(),
        })
    }

    /// The next train, `None` once the set is done.
    pub fn poll_train(&self) -> Option<TrainSpec> {
        if self.trains.len() >= self.cfg.trains as usize {
            return None;
        }
        recursive_train(self.hops, &self.cfg).ok()
    }

    /// Fold one train's result in; returns its analysis.
    pub fn handle_train(&mut self, r: &TrainResult) -> Result<&TrainAnalysis, PathneckError> {
        let g = gaps(self.hops, self.cfg.load_count, r)?;
        self.trains.push(analyze(&g, &self.cfg));
        Ok(self.trains.last().expect("just pushed"))
    }

    pub fn trains(&self) -> &[TrainAnalysis] {
        &self.trains
    }

    /// Each link's d_rate over the first `n` trains.
    pub fn link_rates(&self, n: usize) -> Vec<LinkRate> {
        let set = &self.trains[..n.min(self.trains.len())];
        let valid = set.iter().filter(|t| t.valid).count();
        let mut out = Vec::new();
        if valid == 0 {
            return out;
        }
        for link in 1..=self.hops {
            let chokes: Vec<&Choke> = set
                .iter()
                .filter_map(|t| t.chokes.iter().find(|c| c.link == link))
                .collect();
            if chokes.is_empty() {
                continue;
            }
            let mut confs: Vec<f64> = chokes.iter().map(|c| c.conf).collect();
            confs.sort_by(f64::total_cmp);
            let mut gaps: Vec<i64> = chokes.iter().map(|c| c.gap_ns).collect();
            gaps.sort_unstable();
            out.push(LinkRate {
                link,
                d_rate: chokes.len() as f64 / valid as f64,
                conf: confs[confs.len() / 2],
                gap_ns: gaps[gaps.len() / 2],
            });
        }
        out
    }

    /// The verdict over the first `n` trains: among links with d_rate ≥ d_rate_min, the one
    /// with the largest gap after it (a tie goes to the later link).
    pub fn verdict_after(&self, n: usize) -> Option<PathneckVerdict> {
        let n = n.min(self.trains.len());
        self.link_rates(n)
            .into_iter()
            .filter(|l| l.d_rate >= self.cfg.d_rate_min)
            .max_by_key(|l| (l.gap_ns, l.link))
            .map(|l| PathneckVerdict {
                link: l.link,
                trains: n as u32,
                d_rate: l.d_rate,
                conf: l.conf,
                gap_ns: l.gap_ns,
            })
    }

    /// The verdict over the whole set, once it is done.
    pub fn verdict(&self) -> Option<PathneckVerdict> {
        if self.trains.len() < self.cfg.trains as usize {
            return None;
        }
        self.verdict_after(self.trains.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_train::{Arrival, HopClock, HopReply, MatchRule, MonoNs, SendRecord, WallNs};

    const H: u8 = 4;

    fn cfg() -> PathneckConfig {
        PathneckConfig {
            load_count: 10,
            trains: 10,
            ..Default::default()
        }
    }

    /// A train's result: hop k (1..H−1) answers the head at `t0 + k·0.1 ms` and the tail
    /// `gaps_us[k]` later (`None`: silent); the agent (hop H) receives the head TTL-H probe and
    /// the tail TTL-H probe `gaps_us[H]` apart. The sender sends the train over `gaps_us[0]`.
    fn result(spec: &TrainSpec, gaps_us: &[Option<u64>]) -> TrainResult {
        let n = spec.probes.len();
        let h = H as usize;
        let start = MonoNs(1_000_000);
        let send_span = gaps_us[0].unwrap() * 1000;
        let sends: Vec<SendRecord> = (0..n)
            .map(|i| {
                let t = send_span * i as u64 / (n as u64 - 1);
                SendRecord {
                    mono_ns: Some(start.add_ns(t)),
                    real_ns: WallNs(5_000_000 + t),
                    kernel_ns: None,
                }
            })
            .collect();
        let agent_gap = gaps_us[h].map(|g| g * 1000);
        let arrivals: Vec<Arrival> = spec
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.ttl.is_none_or(|t| t >= H))
            .filter_map(|(i, p)| {
                let g = agent_gap?;
                // Head at 9 ms, the rest spread evenly up to the last load probe.
                let k = (i + 1 - h) as u64;
                let span = (n - 2 * h + 1) as u64;
                Some(Arrival {
                    index: i as u16,
                    size: p.size,
                    rx_ns: WallNs(9_000_000 + g * k / span),
                })
            })
            .collect();
        let mut r = TrainResult::assemble(
            1,
            "198.18.3.2:7240".into(),
            spec,
            start,
            &sends,
            Some((&arrivals, false)),
        );
        for (k, g) in gaps_us.iter().enumerate().take(h).skip(1) {
            let Some(g) = *g else { continue };
            let t_head = 2_000_000 + k as u64 * 100_000;
            for (idx, t) in [(k - 1, t_head), (n - k, t_head + g * 1000)] {
                r.probes[idx].hop = Some(HopReply {
                    from: format!("198.18.{k}.2").parse().unwrap(),
                    icmp_type: 11,
                    icmp_code: 0,
                    rx_mono_ns: MonoNs(t),
                    rx_kernel_ns: None,
                    rtt_ns: 1000,
                    clock: HopClock::User,
                    matched_by: MatchRule::Header,
                });
            }
        }
        r
    }

    fn run(p: &mut Pathneck, gaps_us: &[Option<u64>]) {
        let spec = p.poll_train().unwrap();
        let r = result(&spec, gaps_us);
        p.handle_train(&r).unwrap();
    }

    #[test]
    fn the_train_is_head_load_tail_and_bad_configs_are_refused() {
        let c = cfg();
        let s = recursive_train(H, &c).unwrap();
        assert!(s.validate().is_ok());
        let ttls: Vec<Option<u8>> = s.probes.iter().map(|p| p.ttl).collect();
        assert_eq!(&ttls[..4], &[Some(1), Some(2), Some(3), Some(4)]);
        assert!(ttls[4..14].iter().all(Option::is_none));
        assert_eq!(&ttls[14..], &[Some(4), Some(3), Some(2), Some(1)]);
        assert!(s.probes.iter().all(|p| p.gap_ns == 0 && !p.may_carry));
        assert_eq!(s.reach_ttl, Some(H));
        assert_eq!(train_bytes(H, &c), (8 * 64, 10 * 1472));
        assert_eq!(recursive_train(0, &c), Err(PathneckError::Hops(0)));
        assert_eq!(recursive_train(65, &c), Err(PathneckError::Hops(65)));
        for (bad, e) in [
            (
                PathneckConfig { load_count: 0, ..c },
                PathneckError::LoadCount(0),
            ),
            (PathneckConfig { meas_size: 8, ..c }, PathneckError::Size(8)),
            (PathneckConfig { trains: 0, ..c }, PathneckError::Trains(0)),
        ] {
            assert_eq!(Pathneck::new(bad, H).unwrap_err(), e);
        }
        assert!(matches!(
            PathneckConfig { conf_min: 1.5, ..c }.validate(),
            Err(PathneckError::Threshold { .. })
        ));
    }

    #[test]
    fn gaps_come_from_the_reply_pairs_and_the_agent() {
        let c = cfg();
        let spec = recursive_train(H, &c).unwrap();
        let r = result(
            &spec,
            &[Some(1000), Some(1000), Some(4000), None, Some(4100)],
        );
        let g = gaps(H, c.load_count, &r).unwrap();
        assert_eq!(
            g,
            vec![
                Some(1_000_000),
                Some(1_000_000),
                Some(4_000_000),
                None,
                Some(4_100_000)
            ]
        );
        // A result for another train shape is an error, not a panic.
        let short = recursive_train(2, &c).unwrap();
        let r2 = result(&short, &[Some(1000), Some(1000), Some(1000), None, None]);
        assert!(matches!(
            gaps(H, c.load_count, &r2),
            Err(PathneckError::Mismatch(18, 14))
        ));
    }

    #[test]
    fn one_step_up_is_the_choke_point_with_its_confidence() {
        let c = cfg();
        // Sender 1 ms, r1 1 ms, r2 (after link 2) 3 ms, r3 3.05 ms, agent 3 ms.
        let g = [1_000_000, 1_000_000, 3_000_000, 3_050_000, 2_980_000].map(Some);
        let a = analyze(&g, &c);
        assert!(a.valid);
        assert_eq!(a.steps.len(), 2, "{:?}", a.steps);
        assert_eq!(a.chokes.len(), 1);
        assert_eq!(a.chokes[0].link, 2);
        let conf = a.chokes[0].conf;
        assert!((conf - (1.0 - 1.0 / 3.01)).abs() < 0.01, "{conf}");
    }

    #[test]
    fn two_steps_up_give_two_choke_points_and_small_steps_none() {
        let c = cfg();
        let g = [1_000_000, 1_010_000, 2_000_000, 5_000_000, 5_000_000].map(Some);
        let links: Vec<u8> = analyze(&g, &c).chokes.iter().map(|c| c.link).collect();
        assert_eq!(links, vec![2, 3]);
        // +5% at link 3 is a fitted step (above the noise floor) but below conf 0.1.
        let g = [4_000_000, 4_000_000, 4_000_000, 4_200_000, 4_200_000].map(Some);
        let a = analyze(&g, &c);
        assert_eq!(a.steps.len(), 2);
        assert!(a.chokes.is_empty());
        // Noise below the floor is one step.
        let g = [1_000_000, 1_050_000, 980_000, 1_040_000, 1_000_000].map(Some);
        assert_eq!(analyze(&g, &c).steps.len(), 1);
    }

    #[test]
    fn a_step_across_a_silent_hop_is_not_attributed() {
        let c = cfg();
        let g = [
            Some(1_000_000),
            Some(1_000_000),
            None,
            Some(3_000_000),
            Some(3_000_000),
        ];
        let a = analyze(&g, &c);
        assert!(a.valid && a.chokes.is_empty());
        assert_eq!(a.ambiguous, 1);
        // Without the sender's gap a train says nothing.
        let g = [None, Some(1_000_000), Some(1_000_000), None, None];
        assert!(!analyze(&g, &c).valid);
    }

    #[test]
    fn the_set_names_the_link_with_the_largest_gap_among_frequent_chokes() {
        let mut p = Pathneck::new(cfg(), H).unwrap();
        let ms = |x: f64| Some((x * 1000.0) as u64);
        // Link 2 chokes in every train (1 → 2 ms); link 3 in 7 of 10 (2 → 5 ms); in 2 trains
        // a spike at r1 (link 1) that d_rate filters out.
        for i in 0..10 {
            let r1 = if i < 2 { 1.8 } else { 1.0 };
            let r3 = if i < 7 { 5.0 } else { 2.0 };
            assert!(p.verdict().is_none());
            run(&mut p, &[ms(1.0), ms(r1), ms(2.0), ms(r3), ms(r3)]);
        }
        assert!(p.poll_train().is_none());
        let rates = p.link_rates(10);
        let d = |l: u8| rates.iter().find(|r| r.link == l).map_or(0.0, |r| r.d_rate);
        assert_eq!((d(1), d(2), d(3)), (0.2, 0.8, 0.7));
        let v = p.verdict().unwrap();
        assert_eq!((v.link, v.trains), (3, 10));
        assert!((v.d_rate - 0.7).abs() < 1e-9);
        // After 4 trains the same (link 3 choked in all four).
        assert_eq!(p.verdict_after(4).unwrap().link, 3);
    }

    #[test]
    fn without_a_frequent_choke_there_is_no_verdict() {
        let mut p = Pathneck::new(cfg(), H).unwrap();
        let ms = |x: f64| Some((x * 1000.0) as u64);
        for i in 0..10 {
            let (r2, r3) = if i < 4 { (3.0, 3.0) } else { (1.0, 1.0) };
            run(&mut p, &[ms(1.0), ms(1.0), ms(r2), ms(r3), ms(r3)]);
        }
        assert!(p.verdict().is_none(), "{:?}", p.link_rates(10));
        // A silent router in every train: the link after it is never named.
        let mut p = Pathneck::new(cfg(), H).unwrap();
        for _ in 0..10 {
            run(&mut p, &[ms(1.0), ms(1.0), None, ms(3.0), ms(3.0)]);
        }
        assert!(p.verdict().is_none());
        assert!(p.trains().iter().all(|t| t.ambiguous == 1));
    }
}
