//! The global scheduler, sans-IO (the seed's GS): chooses each stream's level to maximise the
//! summed utility under its bound on what the path gives the application.
//!
//! - **Floor** (its own reports): the rate the streams sustain now. The bound is never below it
//!   (the headroom applies to the ceiling only: a sustained rate is proven).
//! - **Ceiling**: a report that dropped frames (tried and failed) lowers it to the rate the
//!   streams sustained. Then:
//!   - `Mode::Passive` (the original MediaNet): the ceiling creeps up at `creep_bps_per_s`,
//!     after `creep_hold` without a failure, until an upgrade fits and is tried.
//!   - `Mode::Mgrp`: each available-bandwidth estimate of the agent sets the ceiling. An active
//!     estimate counts the streams' own traffic as load (`includes_own`), so their sustained
//!     rate is added back; an oracle's truth (C − cross traffic) does not. No creep: estimates
//!     raise the ceiling, failures lower it (seed 000 §6.1: "without active estimates there are
//!     no upgrades; without passive reports an overestimate is never corrected").
//! - **Choice**: the combination of levels with the most utility whose summed rate fits
//!   max(`headroom` × ceiling, floor); ties go to the fewest changed streams, then the higher rate. If not
//!   even every stream at low fits, every stream is low (the application's minimum).

use crate::local::Report;
use crate::workload::Level;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Passive,
    Mgrp,
}

#[derive(Debug, Clone)]
pub struct GlobalConfig {
    pub streams: usize,
    pub mode: Mode,
    /// Passive mode: how fast the ceiling rises without a failure, bit/s per second.
    pub creep_bps_per_s: f64,
    /// Passive mode: no creep for this long after a failure.
    pub creep_hold_ns: u64,
    /// Share of the bound the chosen levels may use (TCP, framing, estimate error).
    pub headroom: f64,
    /// The ceiling before any evidence.
    pub initial_ceiling_bps: f64,
}

impl GlobalConfig {
    pub fn new(mode: Mode) -> GlobalConfig {
        GlobalConfig {
            streams: 3,
            mode,
            creep_bps_per_s: 20_000.0,
            creep_hold_ns: 5_000_000_000,
            headroom: 0.9,
            // Every stream at low fits.
            initial_ceiling_bps: 3.0 * Level::Low.rate_bps() / 0.9,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GlobalCounts {
    pub reports: u64,
    pub failures: u64,
    pub estimates: u64,
    pub estimates_ignored: u64,
    /// Streams whose level changed, summed over decisions.
    pub level_switches: u64,
    pub decisions: u64,
}

pub struct Global {
    cfg: GlobalConfig,
    ceiling_bps: f64,
    latest: Vec<Option<Report>>,
    last_tick: Option<u64>,
    hold_until: u64,
    levels: Vec<Level>,
    changed: bool,
    counts: GlobalCounts,
}

/// The combination with the most utility that fits `bound_bps` (see the module's rule).
pub fn choose(current: &[Level], bound_bps: f64) -> Vec<Level> {
    let n = current.len();
    let mut best: Option<(Vec<Level>, f64, usize, f64)> = None;
    for code in 0..3usize.pow(n as u32) {
        let combo: Vec<Level> = (0..n)
            .map(|i| Level::ALL[(code / 3usize.pow(i as u32)) % 3])
            .collect();
        let rate: f64 = combo.iter().map(|l| l.rate_bps()).sum();
        if rate > bound_bps {
            continue;
        }
        let utility: f64 = combo.iter().map(|l| l.utility()).sum();
        let changes = combo.iter().zip(current).filter(|(a, b)| a != b).count();
        let better = match &best {
            None => true,
            Some((_, u, c, r)) => {
                utility > u + 1e-9
                    || ((utility - u).abs() <= 1e-9
                        && (changes < *c || (changes == *c && rate > *r)))
            }
        };
        if better {
            best = Some((combo, utility, changes, rate));
        }
    }
    best.map_or_else(|| vec![Level::Low; n], |b| b.0)
}

impl Global {
    pub fn new(cfg: GlobalConfig) -> Global {
        let n = cfg.streams;
        Global {
            ceiling_bps: cfg.initial_ceiling_bps,
            latest: vec![None; n],
            last_tick: None,
            hold_until: 0,
            levels: vec![Level::Low; n],
            changed: true,
            counts: GlobalCounts::default(),
            cfg,
        }
    }

    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    pub fn ceiling_bps(&self) -> f64 {
        self.ceiling_bps
    }

    /// What the streams sustain now (the sum of each one's latest report).
    pub fn floor_bps(&self) -> f64 {
        self.latest.iter().flatten().map(|r| r.sent_bps).sum()
    }

    pub fn counts(&self) -> &GlobalCounts {
        &self.counts
    }

    pub fn handle_report(&mut self, now: u64, r: Report) {
        let Some(slot) = self.latest.get_mut(r.stream) else {
            return;
        };
        *slot = Some(r);
        self.counts.reports += 1;
        if r.failed() {
            self.counts.failures += 1;
            self.ceiling_bps = self.ceiling_bps.min(self.floor_bps());
            self.hold_until = now + self.cfg.creep_hold_ns;
        }
        self.decide();
    }

    /// An available-bandwidth figure for the path, bit/s. `includes_own`: the figure counts
    /// the streams' own traffic as load (an active estimate), so their rate is added back.
    /// Ignored in passive mode, and when not a finite non-negative number.
    pub fn handle_estimate(&mut self, _now: u64, bps: f64, includes_own: bool) {
        if self.cfg.mode != Mode::Mgrp || !bps.is_finite() || bps < 0.0 {
            self.counts.estimates_ignored += 1;
            return;
        }
        self.counts.estimates += 1;
        let own = if includes_own { self.floor_bps() } else { 0.0 };
        self.ceiling_bps = bps + own;
        self.decide();
    }

    /// Time passes: the passive ceiling creeps.
    pub fn handle_tick(&mut self, now: u64) {
        let last = self.last_tick.replace(now).unwrap_or(now);
        if self.cfg.mode == Mode::Passive && now >= self.hold_until {
            let dt = now.saturating_sub(last.max(self.hold_until)) as f64 / 1e9;
            // No need to creep past what every stream at high needs.
            let top = self.cfg.streams as f64 * Level::High.rate_bps() / self.cfg.headroom;
            if self.ceiling_bps < top {
                self.ceiling_bps = (self.ceiling_bps + self.cfg.creep_bps_per_s * dt).min(top);
            }
        }
        self.decide();
    }

    fn decide(&mut self) {
        // The headroom guards a ceiling; what is sustained is proven and kept as it is.
        let bound = (self.ceiling_bps * self.cfg.headroom).max(self.floor_bps());
        let next = choose(&self.levels, bound);
        let changes = next
            .iter()
            .zip(&self.levels)
            .filter(|(a, b)| a != b)
            .count();
        if changes > 0 {
            self.counts.level_switches += changes as u64;
            self.counts.decisions += 1;
            self.levels = next;
            self.changed = true;
        }
    }

    /// The levels, when they changed since the last call (the first call always answers).
    pub fn poll_levels(&mut self) -> Option<Vec<Level>> {
        std::mem::take(&mut self.changed).then(|| self.levels.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn report(stream: usize, at: u64, level: Level, sent_bps: f64, dropped: u64) -> Report {
        Report {
            stream,
            at_ns: at,
            level,
            sent_bps,
            dropped,
        }
    }

    /// Reports from every stream: each sustains its level's rate without failure.
    fn keep_up(g: &mut Global, at: u64) {
        let levels = g.levels().to_vec();
        for (i, l) in levels.into_iter().enumerate() {
            g.handle_report(at, report(i, at, l, l.rate_bps(), 0));
        }
    }

    #[test]
    fn choose_maximises_utility_under_the_bound() {
        let cur = [Level::Low; 3];
        let all = |l| vec![l; 3];
        assert_eq!(choose(&cur, 3_480_000.0), all(Level::High));
        assert_eq!(choose(&cur, 100_000.0), all(Level::Low), "the minimum");
        // 2 Mbit/s: one high and two low (1.6 utility, 1,592 kbit/s) beats 2 medium + 1 low
        // (1.3) and 1 medium + 2 low (1.1).
        let two = choose(&cur, 2_000_000.0);
        assert_eq!(two.iter().filter(|&&l| l == Level::High).count(), 1);
        assert_eq!(two.iter().filter(|&&l| l == Level::Low).count(), 2);
        // Against brute force over a grid of bounds: no fitting combination has more utility.
        for k in 0..=80 {
            let bound = 500_000.0 + k as f64 * 50_000.0;
            let c = choose(&cur, bound);
            let rate: f64 = c.iter().map(|l| l.rate_bps()).sum();
            let u: f64 = c.iter().map(|l| l.utility()).sum();
            assert!(rate <= bound || c == all(Level::Low));
            for code in 0..27usize {
                let o: Vec<Level> = (0..3)
                    .map(|i| Level::ALL[(code / 3usize.pow(i)) % 3])
                    .collect();
                let orate: f64 = o.iter().map(|l| l.rate_bps()).sum();
                let ou: f64 = o.iter().map(|l| l.utility()).sum();
                assert!(
                    orate > bound || ou <= u + 1e-9,
                    "bound {bound}: {o:?} beats {c:?}"
                );
            }
        }
    }

    /// One round of reports from a fluid path that gives the streams `cap` bit/s: shared in
    /// proportion to their levels' rates, dropping frames when they need more.
    fn fluid_round(g: &mut Global, at: u64, cap: f64) {
        let levels = g.levels().to_vec();
        let total: f64 = levels.iter().map(|l| l.rate_bps()).sum();
        let share = (cap / total).min(1.0);
        for (i, l) in levels.into_iter().enumerate() {
            let dropped = u64::from(total > cap);
            g.handle_report(at, report(i, at, l, l.rate_bps() * share, dropped));
        }
    }

    #[test]
    fn on_a_scripted_bound_the_levels_follow_the_utility_maximum() {
        let mut g = Global::new(GlobalConfig::new(Mode::Mgrp));
        // (time s, what the path gives the application in Mbit/s); an oracle's estimate of it
        // (own traffic not included) and a round of the streams' reports per step.
        let script = [
            (1, 6.0),
            (20, 2.0),
            (40, 6.0),
            (60, 3.0),
            (80, 0.5),
            (100, 3.6),
        ];
        let u = |v: &[Level]| v.iter().map(|l| l.utility()).sum::<f64>();
        for (t, mbit) in script {
            g.handle_estimate(t * S, mbit * 1e6, false);
            fluid_round(&mut g, t * S, mbit * 1e6);
            let want = choose(&[Level::Low; 3], mbit * 1e6 * 0.9);
            assert!(
                (u(g.levels()) - u(&want)).abs() < 1e-9,
                "t {t}: {:?} vs {want:?}",
                g.levels()
            );
            // And it holds while the path stays (reports that keep up).
            fluid_round(&mut g, t * S + S, mbit * 1e6);
            assert!((u(g.levels()) - u(&want)).abs() < 1e-9, "t {t} + 1 s");
        }
    }

    #[test]
    fn upgrades_within_one_estimate_when_the_ceiling_rises() {
        let mut g = Global::new(GlobalConfig::new(Mode::Mgrp));
        assert_eq!(g.poll_levels(), Some(vec![Level::Low; 3]));
        keep_up(&mut g, S);
        assert_eq!(g.poll_levels(), None, "no evidence of more: no change");
        // The agent's estimate: 5 Mbit/s spare beside the streams' 648 kbit/s.
        g.handle_estimate(S + 1, 5e6, true);
        assert_eq!(g.poll_levels(), Some(vec![Level::High; 3]));
        assert!((g.ceiling_bps() - (5e6 + 648_000.0)).abs() < 1.0);
    }

    #[test]
    fn a_failure_lowers_the_ceiling_and_a_low_estimate_cannot_go_under_the_floor() {
        let mut g = Global::new(GlobalConfig::new(Mode::Mgrp));
        g.handle_estimate(0, 10e6, false);
        assert_eq!(g.levels(), &[Level::High; 3]);
        // Stream 0 sustained only 0.6 Mbit/s and dropped frames; the others kept up.
        g.handle_report(S, report(0, S, Level::High, 600_000.0, 4));
        g.handle_report(S, report(1, S, Level::High, 1_160_000.0, 0));
        g.handle_report(S, report(2, S, Level::High, 1_160_000.0, 0));
        // Ceiling 0.6 then the floor: 2.92 Mbit/s sustained → 2.63 usable: two high, one low.
        assert!(g.levels().iter().filter(|&&l| l == Level::High).count() == 2);
        // An estimate far under what the streams sustain does not take them below it.
        keep_up(&mut g, 2 * S);
        let before = g.levels().to_vec();
        g.handle_estimate(2 * S, 0.0, true);
        assert_eq!(g.levels(), &before[..]);
    }

    #[test]
    fn never_upgrades_on_passive_evidence_faster_than_the_creep_rule() {
        let cfg = GlobalConfig::new(Mode::Passive);
        let (initial, creep, headroom) =
            (cfg.initial_ceiling_bps, cfg.creep_bps_per_s, cfg.headroom);
        let mut g = Global::new(cfg);
        g.handle_estimate(0, 100e6, true);
        assert_eq!(
            g.counts().estimates_ignored,
            1,
            "passive mode takes no estimates"
        );
        let mut upgrades = Vec::new();
        let mut last = g.levels().to_vec();
        // Ten minutes of reports that always keep up, ticks every 100 ms.
        for tick in 0..6000u64 {
            let now = tick * S / 10;
            g.handle_tick(now);
            if tick % 10 == 0 {
                keep_up(&mut g, now);
            }
            if g.levels() != &last[..] {
                let rate: f64 = g.levels().iter().map(|l| l.rate_bps()).sum();
                upgrades.push((now, rate));
                last = g.levels().to_vec();
            }
        }
        assert!(upgrades.len() >= 3, "{upgrades:?}");
        for (at, rate) in &upgrades {
            // The rate chosen needed a ceiling of rate / headroom, which creep reaches no
            // sooner than this (the floor only holds what is sent, it never raises).
            let earliest = (rate / headroom - initial) / creep;
            assert!(
                *at as f64 / 1e9 + 1e-6 >= earliest,
                "upgrade to {rate} at {} s, creep allows it at {earliest} s",
                *at as f64 / 1e9
            );
        }
        assert_eq!(g.levels(), &[Level::High; 3], "it gets there in the end");
    }

    #[test]
    fn after_a_failure_the_passive_ceiling_waits_then_creeps_from_what_was_sustained() {
        let mut g = Global::new(GlobalConfig::new(Mode::Passive));
        for t in 0..200u64 {
            g.handle_tick(t * S);
            keep_up(&mut g, t * S);
        }
        assert_eq!(g.levels(), &[Level::High; 3]);
        // Congestion: every stream manages 0.5 Mbit/s and drops.
        for i in 0..3 {
            g.handle_report(200 * S, report(i, 200 * S, Level::High, 500_000.0, 10));
        }
        assert!((g.ceiling_bps() - 1.5e6).abs() < 1.0);
        let after = g.levels().to_vec();
        let rate: f64 = after.iter().map(|l| l.rate_bps()).sum();
        assert!(rate <= 1.5e6, "{after:?}");
        // Hold: no creep for 5 s.
        g.handle_tick(204 * S);
        assert!((g.ceiling_bps() - 1.5e6).abs() < 1.0);
        g.handle_tick(206 * S);
        assert!((g.ceiling_bps() - 1.52e6).abs() < 1.0);
    }
}
