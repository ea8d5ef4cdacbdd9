//! The choice rule, sans-IO: estimates and the agent's health in with `now`, a replica out.
//!
//! A path's figure is its active figure, clamped by a fresh passive (Wren) one: Wren
//! bounds available bandwidth from below (`value`) and, when a train rose, from above (`high`),
//! so a passive estimate from the proxy's own connections can raise or lower the active figure
//! but an application-limited flow's low rate cannot pull a path under what was measured. A
//! passive estimate that says nothing about the path (a lower bound far under the active
//! figure, no upper bound under it) is ignored altogether, freshness included.
//! The active figure of the replica in use is the median of its readings since it was chosen
//! (the newest [`READINGS`]); another path's is its newest reading: one misreading of the path
//! in use neither holds nor breaks the choice, and a change elsewhere is acted on at the first
//! reading that sees it.
//! A path with no fresh passive estimate and an active one older than `quiet_after` has gone
//! quiet: [`Chooser::poll_probe`] asks for an active measurement of it (once per `quiet_after`,
//! the oldest-known path first). The replica in use goes quiet only after
//! `quiet_after_current`: its figure is a median that moves slowly anyway, and the agent's
//! measurements (one at a time) are better spent on the paths a change must be seen on.
//! One request in `divert_every` goes to the other replica known longest ago, so every path
//! keeps carrying a little traffic for Wren.
//!
//! An active measurement counts the proxy's own traffic on that path as cross traffic, but
//! that traffic would leave with the proxy's choice: the bytes the proxy sent to the replica
//! over the measurement's window are added back (as the service's transfer feed does for its
//! background flows), so the path carrying the load is not judged worse for carrying it.

use serde::Serialize;
use std::time::Duration;

/// Monotonic nanoseconds; the caller's clock.
pub type Nanos = u64;

#[derive(Debug, Clone)]
pub struct ChoiceConfig {
    /// A passive estimate younger than this clamps the path's figure.
    pub passive_fresh: Duration,
    /// No fresh passive estimate and the active one older than this: measure the path.
    pub quiet_after: Duration,
    /// The same for the replica in use.
    pub quiet_after_current: Duration,
    /// One request in this many goes to another replica (128: 0.78%).
    pub divert_every: u64,
    /// Leave the current replica only for one better by this fraction (hysteresis). The
    /// current replica's figure is a median of readings (see the module), so the margin only
    /// has to cover a challenger's misreading, not both sides' (it was 25% with newest
    /// readings on both sides; `mgrp bench proxy` showed the loaded path's over-reads holding
    /// the old choice for up to 12 s with it).
    pub margin: f64,
    /// A passive lower bound under this fraction of the path's active figure, with no upper
    /// bound under that figure, says nothing about the path and is ignored (`mgrp bench proxy`:
    /// the proxy's small request segments gave 0.007–0.02 Mbit/s on a path with 15 free).
    pub passive_floor: f64,
    /// The agent counts as unreachable when no poll succeeded for this long.
    pub agent_timeout: Duration,
}

impl Default for ChoiceConfig {
    fn default() -> Self {
        ChoiceConfig {
            passive_fresh: Duration::from_secs(3),
            quiet_after: Duration::from_secs(1),
            quiet_after_current: Duration::from_secs(6),
            divert_every: 128,
            margin: 0.10,
            passive_floor: 0.5,
            agent_timeout: Duration::from_secs(3),
        }
    }
}

/// Where an estimate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Wren on the proxy's own connections.
    Passive,
    /// The agent's probes.
    Active,
}

/// Why a request went where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The path with the most available bandwidth.
    Best,
    /// The few requests that keep another path fresh.
    Divert,
    /// No estimate of every path yet: round robin.
    NoEstimates,
    /// The agent is unreachable: the last choice, or round robin before any.
    AgentDown,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Best => "best",
            Reason::Divert => "divert",
            Reason::NoEstimates => "no_estimates",
            Reason::AgentDown => "agent_down",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub replica: usize,
    pub reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Est {
    at: Nanos,
    value: f64,
    /// Passive only: the upper bound, when a rising train gave one.
    high: Option<f64>,
}

/// Active readings kept per path, for the median of the replica in use.
pub const READINGS: usize = 3;

/// Bytes sent are counted in buckets of this many ns ...
const BUCKET_NS: u64 = 100_000_000;
/// ... the last this many (10 s) kept.
const BUCKETS: usize = 100;

#[derive(Debug, Clone, Default)]
struct Path {
    /// (bucket index, bytes) of what the proxy sent to this replica, oldest first.
    sent: std::collections::VecDeque<(u64, u64)>,
    active: Option<Est>,
    /// The newest active readings (at, value), oldest first, at most [`READINGS`].
    readings: std::collections::VecDeque<(Nanos, f64)>,
    passive: Option<Est>,
    probe_asked: Option<Nanos>,
    requests: u64,
    diverted: u64,
}

/// One path as [`Chooser::status`] shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PathStatus {
    pub replica: usize,
    /// The figure the choice uses, bit/s.
    pub figure_bps: Option<f64>,
    pub active_bps: Option<f64>,
    pub active_age_s: Option<f64>,
    /// What the proxy sent to this replica over the last second, bit/s.
    pub own_bps: f64,
    pub passive_bps: Option<f64>,
    pub passive_age_s: Option<f64>,
    pub quiet: bool,
    pub requests: u64,
    pub diverted: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub agent_up: bool,
    /// Why the agent is counted unreachable (the last error), when it is.
    pub agent_error: Option<String>,
    /// The replica ordinary requests go to now, and why.
    pub current: Option<usize>,
    pub mode: Reason,
    pub paths: Vec<PathStatus>,
}

pub struct Chooser {
    cfg: ChoiceConfig,
    paths: Vec<Path>,
    requests: u64,
    last_ok: Option<Nanos>,
    last_error: Option<String>,
    current: Option<usize>,
    /// Readings of the current replica from this time on make its figure.
    current_since: Nanos,
    round_robin: usize,
}

fn age_s(now: Nanos, e: &Option<Est>) -> Option<f64> {
    e.map(|e| now.saturating_sub(e.at) as f64 / 1e9)
}

impl Chooser {
    /// # Panics
    /// When `replicas` is zero (a proxy needs something to forward to; the caller checks).
    pub fn new(cfg: ChoiceConfig, replicas: usize) -> Chooser {
        assert!(replicas > 0, "a chooser needs at least one replica");
        Chooser {
            cfg,
            paths: vec![Path::default(); replicas],
            requests: 0,
            last_ok: None,
            last_error: None,
            current: None,
            current_since: 0,
            round_robin: 0,
        }
    }

    pub fn replicas(&self) -> usize {
        self.paths.len()
    }

    /// The proxy sent `bytes` toward `replica`.
    pub fn handle_sent(&mut self, now: Nanos, replica: usize, bytes: u64) {
        let Some(p) = self.paths.get_mut(replica) else {
            return;
        };
        let b = now / BUCKET_NS;
        match p.sent.back_mut() {
            Some((i, n)) if *i == b => *n += bytes,
            _ => {
                p.sent.push_back((b, bytes));
                if p.sent.len() > BUCKETS {
                    p.sent.pop_front();
                }
            }
        }
    }

    /// What the proxy sent to `replica` over `[to - window, to)`, bit/s (window ≥ 1 s), in
    /// whole buckets: the one holding `to` has only begun.
    fn own_rate(&self, replica: usize, to: Nanos, window: Duration) -> f64 {
        let w = (window.as_nanos() as u64).max(1_000_000_000);
        let (lo, hi) = (to.saturating_sub(w) / BUCKET_NS, to / BUCKET_NS);
        let bytes: u64 = self.paths[replica]
            .sent
            .iter()
            .filter(|(i, _)| (lo..hi).contains(i))
            .map(|(_, n)| n)
            .sum();
        bytes as f64 * 8.0 / (w as f64 / 1e9)
    }

    /// An available-bandwidth estimate of `replica`'s path (bit/s) over `window` ending `at`.
    /// Older than the one held: ignored. Not finite or negative: ignored (counted by the
    /// caller). An active one gets the proxy's own rate over its window added back.
    pub fn handle_estimate(
        &mut self,
        replica: usize,
        source: Source,
        at: Nanos,
        window: Duration,
        value: f64,
        high: f64,
    ) -> bool {
        if replica >= self.paths.len() || !value.is_finite() || value < 0.0 {
            return false;
        }
        let value = match source {
            Source::Active => value + self.own_rate(replica, at, window),
            Source::Passive => value,
        };
        let p = &mut self.paths[replica];
        let slot = match source {
            Source::Active => &mut p.active,
            Source::Passive => &mut p.passive,
        };
        if slot.is_some_and(|e| e.at > at) {
            return false;
        }
        // Wren's `high` equals the value when no train rose above it: a lower bound only.
        let high = (source == Source::Passive && high.is_finite() && high > value).then_some(high);
        *slot = Some(Est { at, value, high });
        if source == Source::Active {
            p.probe_asked = None;
            p.readings.push_back((at, value));
            if p.readings.len() > READINGS {
                p.readings.pop_front();
            }
        }
        true
    }

    /// A poll of the agent succeeded.
    pub fn handle_agent_ok(&mut self, now: Nanos) {
        self.last_ok = Some(now);
        self.last_error = None;
    }

    /// A poll of the agent failed (the time counts from the last success).
    pub fn handle_agent_error(&mut self, _now: Nanos, why: String) {
        self.last_error = Some(why);
    }

    pub fn agent_up(&self, now: Nanos) -> bool {
        // Before any success one failure says so; after one, failures for `agent_timeout`.
        self.last_error.is_none()
            || self
                .last_ok
                .is_some_and(|t| now.saturating_sub(t) <= self.cfg.agent_timeout.as_nanos() as u64)
    }

    fn fresh(&self, now: Nanos, e: &Option<Est>, limit: Duration) -> Option<Est> {
        e.filter(|e| now.saturating_sub(e.at) <= limit.as_nanos() as u64)
    }

    /// The active figure of path `i`: the median of its readings since it became the current
    /// replica when it is that, else its newest.
    fn active_figure(&self, i: usize) -> Option<f64> {
        let p = &self.paths[i];
        let newest = p.active.map(|e| e.value)?;
        if self.current != Some(i) {
            return Some(newest);
        }
        let mut v: Vec<f64> = p
            .readings
            .iter()
            .filter(|(at, _)| *at >= self.current_since)
            .map(|(_, v)| *v)
            .collect();
        Some(median(&mut v).unwrap_or(newest))
    }

    /// A fresh passive estimate of path `i` that says something about it: not a lower bound
    /// far under the active figure (unless its upper bound is under that figure too).
    fn passive(&self, now: Nanos, i: usize) -> Option<Est> {
        let w = self.fresh(now, &self.paths[i].passive, self.cfg.passive_fresh)?;
        match self.active_figure(i) {
            Some(a) if w.value < a * self.cfg.passive_floor && w.high.is_none_or(|h| h >= a) => {
                None
            }
            _ => Some(w),
        }
    }

    /// The figure of path `i`: the active figure clamped by a fresh passive estimate.
    fn figure(&self, now: Nanos, i: usize) -> Option<f64> {
        let p = &self.paths[i];
        match (self.active_figure(i), self.passive(now, i)) {
            (None, None) => p.passive.map(|e| e.value),
            (Some(a), None) => Some(a),
            (None, Some(w)) => Some(w.value),
            (Some(a), Some(w)) => {
                let hi = w.high.unwrap_or(f64::INFINITY);
                Some(a.max(w.value).min(hi.max(w.value)))
            }
        }
    }

    /// How long after its active estimate path `i` goes quiet.
    fn quiet_after(&self, i: usize) -> Duration {
        if self.current == Some(i) {
            self.cfg.quiet_after_current
        } else {
            self.cfg.quiet_after
        }
    }

    fn quiet(&self, now: Nanos, i: usize) -> bool {
        self.passive(now, i).is_none()
            && self
                .fresh(now, &self.paths[i].active, self.quiet_after(i))
                .is_none()
    }

    /// The replica ordinary requests go to: the best figure, staying put within `margin`.
    fn best(&self, now: Nanos) -> Option<usize> {
        let figures: Vec<Option<f64>> =
            (0..self.paths.len()).map(|i| self.figure(now, i)).collect();
        if figures.iter().any(Option::is_none) {
            return None;
        }
        let fig = |i: usize| figures[i].unwrap_or(0.0);
        let top = (0..figures.len())
            .max_by(|&a, &b| fig(a).total_cmp(&fig(b)))
            .unwrap_or(0);
        match self.current {
            Some(c) if c < figures.len() && fig(top) <= fig(c) * (1.0 + self.cfg.margin) => Some(c),
            _ => Some(top),
        }
    }

    fn next_round_robin(&mut self) -> usize {
        let r = self.round_robin % self.paths.len();
        self.round_robin = self.round_robin.wrapping_add(1);
        r
    }

    /// Where the next request goes.
    pub fn choose(&mut self, now: Nanos) -> Choice {
        self.requests += 1;
        let choice = if !self.agent_up(now) {
            let replica = match self.current {
                Some(c) => c,
                None => self.next_round_robin(),
            };
            Choice {
                replica,
                reason: Reason::AgentDown,
            }
        } else if let Some(best) = self.best(now) {
            if self.current != Some(best) {
                self.current = Some(best);
                // Its figure starts from the reading that made it the best.
                self.current_since = self.paths[best].active.map_or(0, |e| e.at);
            }
            if self.paths.len() > 1 && self.requests % self.cfg.divert_every.max(2) == 0 {
                // The other path known longest ago (never known first).
                let other = (0..self.paths.len())
                    .filter(|&i| i != best)
                    .min_by_key(|&i| {
                        let p = &self.paths[i];
                        [p.active, p.passive]
                            .iter()
                            .flatten()
                            .map(|e| e.at)
                            .max()
                            .unwrap_or(0)
                    })
                    .unwrap_or(best);
                Choice {
                    replica: other,
                    reason: Reason::Divert,
                }
            } else {
                Choice {
                    replica: best,
                    reason: Reason::Best,
                }
            }
        } else {
            Choice {
                replica: self.next_round_robin(),
                reason: Reason::NoEstimates,
            }
        };
        let p = &mut self.paths[choice.replica];
        p.requests += 1;
        if choice.reason == Reason::Divert {
            p.diverted += 1;
        }
        choice
    }

    /// A path that has gone quiet and should be measured actively now, if any (the one whose
    /// active estimate is oldest first); each is asked for at most once per its quiet interval
    /// until an active estimate arrives. Nothing while the agent is unreachable.
    pub fn poll_probe(&mut self, now: Nanos) -> Option<usize> {
        if !self.agent_up(now) {
            return None;
        }
        let i = (0..self.paths.len())
            .filter(|&i| {
                let again = self.quiet_after(i).as_nanos() as u64;
                self.quiet(now, i)
                    && self.paths[i]
                        .probe_asked
                        .is_none_or(|t| now.saturating_sub(t) >= again)
            })
            .min_by_key(|&i| self.paths[i].active.map_or(0, |e| e.at))?;
        self.paths[i].probe_asked = Some(now);
        Some(i)
    }

    pub fn status(&self, now: Nanos) -> Status {
        let up = self.agent_up(now);
        let current = if up { self.best(now) } else { self.current };
        let mode = if !up {
            Reason::AgentDown
        } else if current.is_some() {
            Reason::Best
        } else {
            Reason::NoEstimates
        };
        Status {
            agent_up: up,
            agent_error: if up { None } else { self.last_error.clone() },
            current,
            mode,
            paths: (0..self.paths.len())
                .map(|i| {
                    let p = &self.paths[i];
                    PathStatus {
                        replica: i,
                        figure_bps: self.figure(now, i),
                        active_bps: p.active.map(|e| e.value),
                        active_age_s: age_s(now, &p.active),
                        own_bps: self.own_rate(i, now, Duration::from_secs(1)),
                        passive_bps: p.passive.map(|e| e.value),
                        passive_age_s: age_s(now, &p.passive),
                        quiet: self.quiet(now, i),
                        requests: p.requests,
                        diverted: p.diverted,
                    }
                })
                .collect(),
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;
    const M: f64 = 1e6;
    const W: Duration = Duration::from_secs(1);

    fn chooser() -> Chooser {
        Chooser::new(ChoiceConfig::default(), 2)
    }

    /// Reasons and replicas of `n` requests at `now`.
    fn run(c: &mut Chooser, now: Nanos, n: usize) -> Vec<Choice> {
        (0..n).map(|_| c.choose(now)).collect()
    }

    #[test]
    fn round_robin_until_every_path_is_known() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 10.0 * M, 10.0 * M);
        let v = run(&mut c, S, 4);
        assert!(v.iter().all(|x| x.reason == Reason::NoEstimates));
        assert_eq!(
            v.iter().map(|x| x.replica).collect::<Vec<_>>(),
            [0, 1, 0, 1]
        );
    }

    #[test]
    fn the_most_available_bandwidth_wins_and_under_one_percent_is_diverted() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 5.0 * M, 5.0 * M);
        let v = run(&mut c, S, 1280);
        let diverted = v.iter().filter(|x| x.reason == Reason::Divert).count();
        assert_eq!(diverted, 10, "1 in 128");
        assert!(v
            .iter()
            .all(|x| (x.reason == Reason::Best && x.replica == 0)
                || (x.reason == Reason::Divert && x.replica == 1)));
        let st = c.status(S);
        assert_eq!(st.paths[1].diverted, 10);
        assert_eq!(st.paths[0].requests, 1270);
    }

    #[test]
    fn switches_when_the_other_path_frees_up_and_holds_within_the_margin() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 4.8 * M, 4.8 * M);
        assert_eq!(c.choose(S).replica, 0);
        // 16.4 is within 10% of 15: stay.
        c.handle_estimate(1, Source::Active, 2 * S, W, 16.4 * M, 16.4 * M);
        c.handle_agent_ok(2 * S);
        assert_eq!(c.choose(2 * S).replica, 0);
        c.handle_estimate(1, Source::Active, 3 * S, W, 16.6 * M, 16.6 * M);
        c.handle_agent_ok(3 * S);
        assert_eq!(c.choose(3 * S).replica, 1);
    }

    #[test]
    fn a_passive_lower_bound_cannot_pull_a_path_under_its_active_figure() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 10.0 * M, 10.0 * M);
        // The proxy's own flow on path 0 runs at 3 Mbit/s: a lower bound only (high == value).
        c.handle_estimate(0, Source::Passive, S, W, 3.0 * M, 3.0 * M);
        c.handle_agent_ok(S);
        assert_eq!(c.status(S).paths[0].figure_bps, Some(15.0 * M));
        assert_eq!(c.choose(S).replica, 0);
        // A rising train at 6 Mbit/s bounds it from above: path 1 is better now.
        c.handle_estimate(0, Source::Passive, 2 * S, W, 3.0 * M, 6.0 * M);
        c.handle_agent_ok(2 * S);
        assert_eq!(c.status(2 * S).paths[0].figure_bps, Some(6.0 * M));
        assert_eq!(c.choose(2 * S).replica, 1);
        // And a lower bound above the active figure raises it.
        c.handle_estimate(0, Source::Passive, 3 * S, W, 18.0 * M, 18.0 * M);
        c.handle_agent_ok(3 * S);
        assert_eq!(c.status(3 * S).paths[0].figure_bps, Some(18.0 * M));
        assert_eq!(c.choose(3 * S).replica, 0);
    }

    #[test]
    fn the_replica_in_use_is_judged_by_the_median_of_its_readings() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 5.0 * M, 5.0 * M);
        assert_eq!(c.choose(0).replica, 0);
        // One under-read of the path in use (6 for 15): the median of 15, 6 and 15 holds it
        // against a challenger at 10 (the newest reading alone would have left for 10).
        c.handle_estimate(0, Source::Active, S, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(0, Source::Active, 2 * S, W, 6.0 * M, 6.0 * M);
        c.handle_estimate(1, Source::Active, 2 * S, W, 10.0 * M, 10.0 * M);
        assert_eq!(c.status(2 * S).paths[0].figure_bps, Some(15.0 * M));
        assert_eq!(c.choose(2 * S).replica, 0);
        // One over-read (21) does not hold it against a challenger that freed up (20 > 15 ×
        // 1.1), where the newest reading alone would have stayed.
        c.handle_estimate(0, Source::Active, 3 * S, W, 21.0 * M, 21.0 * M);
        c.handle_estimate(1, Source::Active, 3 * S, W, 20.0 * M, 20.0 * M);
        assert_eq!(c.status(3 * S).paths[0].figure_bps, Some(15.0 * M));
        assert_eq!(c.choose(3 * S).replica, 1);
        // The new replica in use counts its readings from the one that made it the best (not
        // its old 5 and 10): an old-path reading of 18 does not bring the choice back, and its
        // figure is its newest-readings median from then on.
        assert_eq!(c.status(3 * S).paths[1].figure_bps, Some(20.0 * M));
        c.handle_estimate(0, Source::Active, 4 * S, W, 18.0 * M, 18.0 * M);
        assert_eq!(c.choose(4 * S).replica, 1);
        c.handle_estimate(1, Source::Active, 5 * S, W, 19.0 * M, 19.0 * M);
        assert_eq!(c.status(5 * S).paths[1].figure_bps, Some(19.5 * M));
        // Only the newest READINGS count: 19, 22, 23 (the 20 fell out).
        c.handle_estimate(1, Source::Active, 6 * S, W, 22.0 * M, 22.0 * M);
        c.handle_estimate(1, Source::Active, 7 * S, W, 23.0 * M, 23.0 * M);
        assert_eq!(c.status(7 * S).paths[1].figure_bps, Some(22.0 * M));
        assert!(c.paths[1].readings.len() <= READINGS);
    }

    #[test]
    fn a_passive_lower_bound_far_under_the_active_figure_is_ignored() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 5.0 * M, 5.0 * M);
        // The proxy's small request segments: 0.01 Mbit/s, a lower bound only. Not fresh
        // either: the path still goes quiet and is probed once its active estimate is 2 s old.
        c.handle_estimate(0, Source::Passive, 3 * S, W, 0.01 * M, 0.01 * M);
        c.handle_agent_ok(3 * S);
        assert_eq!(c.status(3 * S).paths[0].figure_bps, Some(15.0 * M));
        assert!(c.status(3 * S).paths[0].quiet);
        assert_eq!(c.poll_probe(3 * S), Some(0));
        // At half the active figure or more it counts: fresh, and the path is not quiet.
        c.handle_estimate(0, Source::Passive, 4 * S, W, 7.5 * M, 7.5 * M);
        c.handle_agent_ok(4 * S);
        assert!(!c.status(4 * S).paths[0].quiet);
        // Far under it but with an upper bound under the active figure too: it says the path
        // is worse than measured, and clamps it.
        c.handle_estimate(0, Source::Passive, 5 * S, W, 0.01 * M, 4.0 * M);
        c.handle_agent_ok(5 * S);
        assert_eq!(c.status(5 * S).paths[0].figure_bps, Some(4.0 * M));
        assert!(!c.status(5 * S).paths[0].quiet);
    }

    #[test]
    fn only_quiet_paths_are_probed_and_each_once_per_quiet_interval() {
        let mut c = Chooser::new(
            ChoiceConfig {
                quiet_after: Duration::from_secs(2),
                ..ChoiceConfig::default()
            },
            2,
        );
        c.handle_agent_ok(0);
        // Nothing known: both quiet, asked one after the other, then not again at once.
        assert_eq!(c.poll_probe(0), Some(0));
        assert_eq!(c.poll_probe(0), Some(1));
        assert_eq!(c.poll_probe(0), None);
        c.handle_estimate(0, Source::Active, S, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, S, W, 5.0 * M, 5.0 * M);
        // Path 0 carries the traffic: fresh passive estimates keep it from being probed.
        for t in 2..10 {
            c.handle_estimate(0, Source::Passive, t * S, W, 12.0 * M, 12.0 * M);
            c.handle_agent_ok(t * S);
            let asked = c.poll_probe(t * S);
            assert_ne!(asked, Some(0), "t = {t}");
            if t == 4 || t == 6 || t == 8 {
                // Path 1's active estimate turns 2 s old at t = 3.
                assert_eq!(asked, Some(1), "t = {t}");
            }
        }
    }

    #[test]
    fn the_replica_in_use_goes_quiet_later_and_the_oldest_known_path_is_probed_first() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        c.handle_estimate(1, Source::Active, S, W, 5.0 * M, 5.0 * M);
        assert_eq!(c.choose(S).replica, 0);
        // At 2.5 s both are over 1 s old; only the other path is quiet (the one in use has
        // 6 s), so it is asked for, though path 0's estimate is older.
        assert_eq!(c.poll_probe(2 * S + S / 2), Some(1));
        assert_eq!(c.poll_probe(2 * S + S / 2), None);
        assert!(!c.status(2 * S + S / 2).paths[0].quiet);
        // At 6.5 s both are quiet (path 1 asked again after 1 s): the older known goes first.
        assert_eq!(c.poll_probe(6 * S + S / 2), Some(0));
        assert_eq!(c.poll_probe(6 * S + S / 2), Some(1));
        assert_eq!(c.poll_probe(6 * S + S / 2), None);
    }

    #[test]
    fn an_unreachable_agent_keeps_the_last_choice_and_says_so() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        c.handle_estimate(0, Source::Active, 0, W, 5.0 * M, 5.0 * M);
        c.handle_estimate(1, Source::Active, 0, W, 15.0 * M, 15.0 * M);
        assert_eq!(c.choose(0).replica, 1);
        c.handle_agent_error(S, "connection refused".into());
        // Within the timeout: still up.
        assert!(c.agent_up(S));
        c.handle_agent_error(4 * S, "connection refused".into());
        assert!(!c.agent_up(4 * S));
        let v = run(&mut c, 4 * S, 300);
        assert!(v
            .iter()
            .all(|x| x.replica == 1 && x.reason == Reason::AgentDown));
        let st = c.status(4 * S);
        assert!(!st.agent_up);
        assert_eq!(st.mode, Reason::AgentDown);
        assert_eq!(st.agent_error.as_deref(), Some("connection refused"));
        assert_eq!(c.poll_probe(4 * S), None, "no probing through a dead agent");
        // Back: choices resume.
        c.handle_agent_ok(5 * S);
        assert!(c.agent_up(5 * S));
        assert_eq!(c.choose(5 * S).reason, Reason::Best);
    }

    #[test]
    fn an_agent_never_reached_means_round_robin_at_once() {
        let mut c = chooser();
        c.handle_agent_error(0, "connection refused".into());
        assert!(!c.agent_up(0));
        let v = run(&mut c, 0, 4);
        assert_eq!(
            v.iter().map(|x| x.replica).collect::<Vec<_>>(),
            [0, 1, 0, 1]
        );
        assert!(v.iter().all(|x| x.reason == Reason::AgentDown));
    }

    #[test]
    fn the_proxys_own_rate_is_added_back_to_an_active_estimate() {
        let mut c = chooser();
        c.handle_agent_ok(0);
        // 4.5 Mbit/s to replica 0 for 3 s: 56 250 bytes every 100 ms.
        for k in 0..30 {
            c.handle_sent(10 * S + k * S / 10, 0, 56_250);
        }
        // Measured over the last 2 s: 8 Mbit/s left beside the proxy's own 4.5.
        c.handle_estimate(
            0,
            Source::Active,
            13 * S,
            Duration::from_secs(2),
            8.0 * M,
            8.0 * M,
        );
        c.handle_estimate(1, Source::Active, 13 * S, W, 11.0 * M, 11.0 * M);
        let st = c.status(13 * S);
        let f = st.paths[0].figure_bps.unwrap();
        // The window [11 s, 13 s] holds the buckets from 11.0 s to 12.9 s: 20 of them.
        assert!(
            (f - (8.0 * M + 20.0 * 56_250.0 * 8.0 / 2.0)).abs() < 1.0,
            "{f}"
        );
        assert_eq!(
            c.choose(13 * S).replica,
            0,
            "12.7 beats 11: the load would leave with it"
        );
        // Passive estimates are the proxy's own flow: nothing added.
        c.handle_estimate(1, Source::Passive, 13 * S, W, 3.0 * M, 3.0 * M);
        assert_eq!(c.status(13 * S).paths[1].passive_bps, Some(3.0 * M));
        // The buckets are bounded (10 s).
        for k in 0..1000 {
            c.handle_sent(20 * S + k * S / 10, 1, 1);
        }
        assert!(c.paths[1].sent.len() <= BUCKETS);
    }

    #[test]
    fn stale_out_of_order_and_bad_estimates_are_ignored() {
        let mut c = chooser();
        assert!(c.handle_estimate(0, Source::Active, 5 * S, W, 10.0 * M, 10.0 * M));
        assert!(!c.handle_estimate(0, Source::Active, 4 * S, W, 1.0 * M, 1.0 * M));
        assert!(!c.handle_estimate(0, Source::Active, 6 * S, W, f64::NAN, 0.0));
        assert!(!c.handle_estimate(0, Source::Active, 6 * S, W, -1.0, 0.0));
        assert!(!c.handle_estimate(7, Source::Active, 6 * S, W, 1.0, 1.0));
        assert_eq!(c.status(5 * S).paths[0].figure_bps, Some(10.0 * M));
    }
}
