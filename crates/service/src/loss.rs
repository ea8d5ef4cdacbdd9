//! The `loss_episodes` method: a schedule round that runs the badabing prober
//! (`mgrp_estimate::badabing`) over the path's session and stores what it found as
//! `episode_frequency` (share of time congested), `episode_duration` (s) and `loss` (probe loss).

use crate::driver::{Driver, Link};
use crate::record::{self, Series};
use crate::schedule::Schedule;
use mgrp_engine::loss::{run_badabing, via_session};
use mgrp_estimate::badabing::{Badabing, BadabingParams, LossEpisodes};
use mgrp_estimate::Quality;
use mgrp_store::Record;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The method's name in a schedule.
pub const METHOD: &str = "loss_episodes";

/// One round observes at most this long (1000 slots of 10 ms, ~300 experiments).
pub const ROUND: Duration = Duration::from_secs(10);

/// The round's parameters: [`ROUND`], shortened to fit `every` and the allowance.
pub fn params(every: Duration, allowance: u64, seed: u64) -> Option<BadabingParams> {
    let d = BadabingParams::default();
    let per_slot = per_slot_bytes(&d);
    let by_time = ROUND.min(every).as_nanos() as u64 / d.slot_ns;
    let by_bytes = (allowance as f64 / per_slot) as u64;
    let slots = by_time.min(by_bytes);
    (slots >= 2).then_some(BadabingParams { slots, seed, ..d })
}

/// Expected probe bytes (UDP payload, as budgets count them) a slot costs.
fn per_slot_bytes(p: &BadabingParams) -> f64 {
    let probed = 1.0 - (1.0 - p.p).powi(2);
    probed * p.probes as f64 * p.size as f64
}

/// What one full round is expected to cost (the default budget's basis).
pub fn expected_bytes() -> u64 {
    let d = BadabingParams::default();
    (per_slot_bytes(&d) * (ROUND.as_nanos() as u64 / d.slot_ns) as f64).ceil() as u64
}

/// The records of one round's episodes.
pub fn records(path: &str, t_ns: u64, e: &LossEpisodes) -> Vec<Record> {
    let at = |metric| Series {
        path,
        metric,
        source: "active",
        t_ns,
    };
    let boundaries = e.n01 + e.n10;
    let q = Quality {
        method: METHOD,
        elapsed_s: e.elapsed_s,
        probe_bytes: e.probe_bytes,
        trains: e.trains,
        // The duration rests on the episode boundaries seen: 10 of them give 0.5.
        confidence: boundaries as f64 / (boundaries as f64 + 10.0),
        timescale_ms: None,
    };
    // 95% ranges: F as a share of 2M slot observations, D from the boundaries' count.
    let m2 = (2 * e.experiments).max(1) as f64;
    let hw = 1.96 * (e.frequency * (1.0 - e.frequency) / m2).sqrt();
    let f = e.frequency;
    let mut out = vec![record::record(
        at("episode_frequency"),
        (f, (f - hw).max(0.0), (f + hw).min(1.0)),
        &q,
        true,
    )];
    if let Some(d) = e.mean_duration_s {
        let hw = 1.96 * d / (boundaries as f64).sqrt();
        out.push(record::record(
            at("episode_duration"),
            (d, (d - hw).max(e.slot_s), d + hw),
            &q,
            true,
        ));
    }
    let mut loss = record::record(
        at("loss"),
        (e.loss_rate, e.loss_rate, e.loss_rate),
        &q,
        true,
    );
    loss.confidence = 1.0;
    out.push(loss);
    out
}

impl Driver {
    /// One `loss_episodes` round within `allowance` probe bytes.
    pub(crate) fn loss_round(&self, sched: &mut Schedule, link: &mut Link, allowance: u64) {
        let (st, c) = (&self.st, &self.st.counters);
        let p = &st.sched;
        let seed = mgrp_clock::realtime_ns();
        let Some(params) = params(p.every, allowance, seed) else {
            c.bump(&c.skipped_for_budget, 1);
            st.budget_ran_out(&format!("{allowance} B left: not enough for a round"));
            sched.handle_measured(mgrp_clock::now_ns(), 0, true);
            return;
        };
        let Some(s) = link.session.as_mut() else {
            return;
        };
        let mut b = Badabing::new(params).expect("the defaults are valid");
        let deadline = Instant::now() + ROUND * 2 + Duration::from_secs(5);
        let result = run_badabing(
            &mut b,
            via_session(s),
            deadline,
            || st.stop.load(Ordering::Relaxed),
            |_| {},
        );
        let now = mgrp_clock::now_ns();
        let bytes = b.report().map_or(0, |r| r.probe_bytes);
        c.bump(&c.probe_bytes, bytes);
        c.bump(&c.measurements, 1);
        st.last_ns
            .store(mgrp_clock::realtime_ns(), Ordering::Relaxed);
        let report = match result {
            Ok(r) => {
                sched.handle_measured(now, bytes, false);
                r
            }
            Err(e) => {
                st.fail(&e.to_string());
                sched.handle_failed(now, bytes);
                link.session = None;
                return;
            }
        };
        let (Some(path), Some(report)) = (st.name(), report) else {
            return;
        };
        let recs = records(&path, mgrp_clock::realtime_ns(), &report);
        match self.hub.publish(&recs) {
            Ok(()) => {
                c.bump(&c.estimates_stored, recs.len() as u64);
                st.ok();
            }
            Err(e) => st.fail(&e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episodes() -> LossEpisodes {
        LossEpisodes {
            slot_s: 0.01,
            experiments: 300,
            n00: 200,
            n01: 20,
            n10: 20,
            n11: 60,
            slots_probed: 450,
            congested_by_loss: 100,
            congested_by_delay: 40,
            frequency: 0.3,
            mean_duration_slots: Some(4.0),
            mean_duration_s: Some(0.04),
            loss_rate: 0.1,
            probes_sent: 1350,
            probes_lost: 135,
            delay_threshold_ns: Some(2_000_000),
            batches_discarded: 0,
            trains: 5,
            probe_bytes: 810_000,
            elapsed_s: 10.2,
        }
    }

    #[test]
    fn a_round_gives_frequency_duration_and_loss() {
        let r = records("a->b", 7, &episodes());
        let names: Vec<&str> = r.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(names, ["episode_frequency", "episode_duration", "loss"]);
        assert_eq!(r[0].value, 0.3);
        // ± 1.96 √(0.3 · 0.7 / 600)
        assert!((r[0].high - 0.3 - 0.03667).abs() < 1e-4, "{:?}", r[0]);
        assert_eq!(r[1].value, 0.04);
        assert!(r[1].low >= 0.01 && r[1].high > 0.04);
        assert_eq!(r[2].value, 0.1);
        for x in &r {
            assert_eq!(
                (x.method.as_str(), x.probe_bytes, x.trains),
                (METHOD, 810_000, 5)
            );
            assert_eq!(
                (x.path.as_str(), x.t_ns, x.source.as_str()),
                ("a->b", 7, "active")
            );
        }
        assert_eq!(r[0].confidence, 0.8);
    }

    #[test]
    fn no_boundary_means_no_duration() {
        let e = LossEpisodes {
            n01: 0,
            n10: 0,
            mean_duration_slots: None,
            mean_duration_s: None,
            ..episodes()
        };
        let r = records("a->b", 7, &e);
        assert!(r.iter().all(|r| r.metric != "episode_duration"));
    }

    #[test]
    fn rounds_fit_the_schedule_and_the_allowance() {
        let full = params(Duration::from_secs(60), u64::MAX, 1).unwrap();
        assert_eq!(full.slots, 1000);
        assert_eq!(
            params(Duration::from_secs(2), u64::MAX, 1).unwrap().slots,
            200
        );
        // 918 B a slot (0.51 × 3 × 600): 91 800 B buy 100 slots.
        let p = params(Duration::from_secs(60), 91_800, 1).unwrap();
        assert_eq!(p.slots, 100);
        assert!(params(Duration::from_secs(60), 1000, 1).is_none());
        assert_eq!(expected_bytes(), 918_000);
    }
}
