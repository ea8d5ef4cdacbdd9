//! A running schedule as others see it: its configuration, counters, name once connected, the
//! budget in force, last error, and the "measure now" and "stop" bells its driver listens to.

use crate::config::PathSchedule;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

mgrp_counters::counters! {
    /// A schedule's counters.
    pub struct Counters => CounterSnapshot {
        /// Measurements run
        measurements,
        /// Estimates stored
        estimates_stored,
        /// Probe bytes sent
        probe_bytes,
        /// Measurements not started: the minute's budget was spent
        skipped_for_budget,
        /// Measurements cut short before a train the budget could not pay for
        cut_by_budget,
        /// Errors (connect, measure, store)
        errors,
        /// Rounds that reached their deadline (15 s, or the period if longer) before the
        /// estimator concluded: nothing was stored for them
        timed_out,
        /// Rounds not run: fresh passive or inline estimates agreeing with the tracked value
        /// covered the path
        covered,
    }
}

/// What `last_error` says while the budget keeps a schedule from a fresh estimate.
pub const BUDGET_EXHAUSTED: &str = "probe byte budget exhausted";

/// The least time between two budget messages on stderr for one path.
pub const BUDGET_SAY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

pub struct PathState {
    pub sched: PathSchedule,
    pub(crate) counters: Counters,
    name: Mutex<Option<String>>,
    pub(crate) last_ns: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// The budget in force: the configured one, or the default derived for the capacity.
    budget: AtomicU64,
    budget_exhausted: AtomicBool,
    /// Budget messages on stderr: when the last was said, and the cuts not said since.
    budget_said: Mutex<(Option<std::time::Instant>, u64)>,
    /// Probe bytes of the trailing minute, and the capacity (f64 bits; 0: unknown), as of
    /// the last round: the probe load as a share of C.
    load_bytes_per_min: AtomicU64,
    capacity_bits: AtomicU64,
    /// The source whose estimates covered the path at the last due round (tracked paths).
    covered_by: Mutex<Option<&'static str>>,
    pub(crate) wake: AtomicBool,
    pub(crate) stop: AtomicBool,
    /// A once query: the metric whose estimate ends it (its driver then stops).
    pub(crate) once: Option<String>,
    /// A once query got its estimate, or gave up.
    pub(crate) done: AtomicBool,
}

/// Rounds a once query tries before it gives up (it then says why in `last_error`).
pub const ONCE_ATTEMPTS: u64 = 4;

/// A schedule's view for the API.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleView {
    pub peer: String,
    pub path: Option<String>,
    pub method: String,
    pub every_s: f64,
    /// The budget in force (derived from the method and the path's capacity unless
    /// configured).
    pub budget_bytes_per_min: u64,
    /// Whether the budget was configured (`false`: the derived default).
    pub budget_configured: bool,
    /// The last round gave no fresh estimate because the budget ran out (skipped or cut).
    pub budget_exhausted: bool,
    pub last_ns: Option<u64>,
    pub last_error: Option<String>,
    pub counters: CounterSnapshot,
    /// The path's capacity as last measured (bit/s).
    pub capacity_bps: Option<f64>,
    /// Probe bytes sent in the trailing minute, as a share of the capacity.
    pub probe_load_share: Option<f64>,
    /// The ceiling on that share, if the schedule has one.
    pub ceiling_share: Option<f64>,
    /// `passive` or `inline` while their fresh estimates, agreeing with the tracked value,
    /// stand in for active rounds (`null`: the schedule probes).
    pub covered_by: Option<&'static str>,
}

impl PathState {
    pub(crate) fn new(sched: PathSchedule, budget: u64) -> PathState {
        PathState {
            sched,
            counters: Counters::default(),
            name: Mutex::new(None),
            last_ns: AtomicU64::new(0),
            last_error: Mutex::new(None),
            budget: AtomicU64::new(budget),
            budget_exhausted: AtomicBool::new(false),
            budget_said: Mutex::new((None, 0)),
            load_bytes_per_min: AtomicU64::new(0),
            capacity_bits: AtomicU64::new(0),
            covered_by: Mutex::new(None),
            wake: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            once: None,
            done: AtomicBool::new(false),
        }
    }

    /// Stop after the first round that stores `metric` (or after [`ONCE_ATTEMPTS`] rounds).
    pub(crate) fn once(mut self, metric: &str) -> PathState {
        self.once = Some(metric.to_string());
        self
    }

    /// A once query's round ended: stored the metrics `stored`.
    pub(crate) fn round_done(&self, stored: &[&str]) {
        let Some(m) = &self.once else { return };
        let c = self.counters();
        if stored.contains(&m.as_str())
            || c.measurements + c.errors + c.skipped_for_budget >= ONCE_ATTEMPTS
        {
            self.done.store(true, Ordering::Relaxed);
        }
    }

    /// A once query finished (its driver stops).
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    /// `SRC->DST` once the first session is up.
    pub fn name(&self) -> Option<String> {
        self.name.lock().ok().and_then(|n| n.clone())
    }

    pub(crate) fn set_name(&self, name: String) {
        if let Ok(mut n) = self.name.lock() {
            *n = Some(name);
        }
    }

    /// Measure at once instead of at the next scheduled time (the budget still holds).
    pub fn measure_now(&self) {
        self.wake.store(true, Ordering::Relaxed);
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
    }

    pub(crate) fn set_budget(&self, b: u64) {
        self.budget.store(b, Ordering::Relaxed);
    }

    pub fn budget_exhausted(&self) -> bool {
        self.budget_exhausted.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    pub fn view(&self) -> ScheduleView {
        let last = self.last_ns.load(Ordering::Relaxed);
        ScheduleView {
            peer: self.sched.peer.to_string(),
            path: self.name(),
            method: self.sched.method.clone(),
            every_s: self.sched.every.as_secs_f64(),
            budget_bytes_per_min: self.budget(),
            budget_configured: self.sched.budget.is_some(),
            budget_exhausted: self.budget_exhausted(),
            last_ns: (last > 0).then_some(last),
            last_error: self.last_error(),
            counters: self.counters(),
            capacity_bps: self.capacity_bps(),
            probe_load_share: self.load_share(),
            ceiling_share: self
                .sched
                .ceiling
                .or((self.sched.method == crate::track::METHOD)
                    .then_some(crate::config::DEFAULT_CEILING)),
            covered_by: self.covered_by(),
        }
    }

    pub fn covered_by(&self) -> Option<&'static str> {
        self.covered_by.lock().ok().and_then(|c| *c)
    }

    pub(crate) fn set_covered(&self, by: Option<&'static str>) {
        if let Ok(mut c) = self.covered_by.lock() {
            *c = by;
        }
    }

    /// After a round: the trailing minute's probe bytes and the capacity.
    pub(crate) fn set_load(&self, bytes_per_min: u64, capacity_bps: Option<f64>) {
        self.load_bytes_per_min
            .store(bytes_per_min, Ordering::Relaxed);
        if let Some(c) = capacity_bps.filter(|c| c.is_finite() && *c > 0.0) {
            self.capacity_bits.store(c.to_bits(), Ordering::Relaxed);
        }
    }

    pub fn capacity_bps(&self) -> Option<f64> {
        let b = self.capacity_bits.load(Ordering::Relaxed);
        (b != 0).then(|| f64::from_bits(b))
    }

    /// Probe load of the trailing minute as a share of the capacity (`None` until C is known).
    pub fn load_share(&self) -> Option<f64> {
        let bytes = self.load_bytes_per_min.load(Ordering::Relaxed);
        self.capacity_bps().map(|c| bytes as f64 * 8.0 / 60.0 / c)
    }

    /// Count an error and say it on stderr — once, until a different one comes, so a peer that
    /// stays down does not flood the log.
    pub(crate) fn fail(&self, why: &str) {
        self.counters.bump(&self.counters.errors, 1);
        self.set_error(why);
    }

    /// The budget kept this round from a fresh estimate: say so (not counted as an error; the
    /// skip and cut counters count it).
    ///
    /// A tracked path meets its ceiling every few seconds by design, and each cut's detail
    /// differs: stderr hears of it at most once per [`BUDGET_SAY_EVERY`], with the count of the
    /// cuts in between; `last_error` (the API) always holds the latest.
    pub(crate) fn budget_ran_out(&self, detail: &str) {
        self.budget_exhausted.store(true, Ordering::Relaxed);
        let why = format!("{BUDGET_EXHAUSTED}: {detail}");
        let say = match self.budget_said.lock() {
            Ok(mut said) => {
                let now = std::time::Instant::now();
                match said.0 {
                    Some(t) if now.duration_since(t) < BUDGET_SAY_EVERY => {
                        said.1 += 1;
                        None
                    }
                    _ => {
                        let since = std::mem::take(&mut said.1);
                        said.0 = Some(now);
                        Some(if since > 0 {
                            format!("{why} ({since} more cut since the last message)")
                        } else {
                            why.clone()
                        })
                    }
                }
            }
            Err(_) => Some(why.clone()),
        };
        if let Some(text) = say {
            self.say(&text);
        }
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(why);
        }
    }

    fn set_error(&self, why: &str) {
        if let Ok(mut last) = self.last_error.lock() {
            if last.as_deref() != Some(why) {
                self.say(why);
                *last = Some(why.to_string());
            }
        }
    }

    fn say(&self, why: &str) {
        eprintln!(
            "mgrp agent: path to {} ({}): {why}",
            self.sched.peer, self.sched.method
        );
    }

    /// A round reached its deadline before its estimator concluded (counted in `timed_out`).
    pub(crate) fn timed_out(&self, deadline: std::time::Duration) {
        self.set_error(&format!(
            "a round reached its {} s deadline before its estimate was final; nothing stored \
             (a longer `every` gives rounds longer, or the host may be too busy to measure)",
            deadline.as_secs()
        ));
    }

    /// A fresh estimate stored: the next failure is news.
    pub(crate) fn ok(&self) {
        self.budget_exhausted.store(false, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn state(budget: Option<u64>) -> PathState {
        let sched = PathSchedule {
            peer: "198.18.3.2:7240".parse().unwrap(),
            method: "chirp".into(),
            every: Duration::from_secs(10),
            budget,
            ceiling: None,
        };
        PathState::new(sched, budget.unwrap_or(3_000_000))
    }

    #[test]
    fn budget_exhaustion_shows_until_an_estimate_is_stored() {
        let s = state(None);
        let v = s.view();
        assert_eq!(
            (v.budget_bytes_per_min, v.budget_configured),
            (3_000_000, false)
        );
        assert!(!v.budget_exhausted && v.last_error.is_none());
        s.budget_ran_out("cut before a 40 kB train");
        let v = s.view();
        assert!(v.budget_exhausted);
        assert!(v.last_error.unwrap().starts_with(BUDGET_EXHAUSTED));
        assert_eq!(v.counters.errors, 0, "the budget is not an error");
        s.ok();
        let v = s.view();
        assert!(!v.budget_exhausted && v.last_error.is_none());
    }

    #[test]
    fn budget_cuts_are_said_once_a_minute_and_the_api_keeps_the_latest() {
        let s = state(None);
        for i in 0..5 {
            s.budget_ran_out(&format!("cut after {i} B"));
            // A stored estimate between cuts does not make the next cut news on stderr.
            s.ok();
        }
        s.budget_ran_out("cut after 5 B");
        assert_eq!(
            s.budget_said.lock().unwrap().1,
            5,
            "the first cut said, the next five held back"
        );
        assert_eq!(
            s.last_error().as_deref(),
            Some("probe byte budget exhausted: cut after 5 B")
        );
    }

    #[test]
    fn errors_are_counted_each_time() {
        let s = state(Some(50_000));
        s.fail("refused");
        s.fail("refused");
        assert_eq!(s.counters().errors, 2);
        assert_eq!(s.last_error().as_deref(), Some("refused"));
        assert!(s.view().budget_configured);
    }
}
