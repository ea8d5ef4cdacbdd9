//! Helpers shared by the testbed's namespace tests.
#![allow(dead_code)]

use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::{Bin, CrossPattern, DelayMode, Testbed, TestbedConfig, TruthSampler};
use std::time::Duration;

pub fn mbit(m: f64) -> u64 {
    (m * 1e6) as u64
}

pub fn testbed(capacity_mbit: f64) -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps: mbit(capacity_mbit),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .expect("testbed up (these tests need root)")
}

/// Run `pattern` for `secs` and return the ground truth over the run, trimmed by `trim` at each
/// end so start-up and drain do not blur the rate.
pub fn run_pattern(tb: &Testbed, pattern: &str, secs: f64, trim: f64) -> Bin {
    let p = CrossPattern::parse(pattern).unwrap();
    let sampler = TruthSampler::start(tb, Duration::from_millis(100)).unwrap();
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 5.0),
        ..Default::default()
    };
    let gen = CrossTraffic::start(tb, &p, BASE_PORT, &opts).unwrap();
    let start = gen.start_ns();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let report = gen.stop().unwrap();
    assert!(report.sent_packets > 0, "{report:?}");
    let truth = sampler.stop().unwrap();
    let ns = |s: f64| start + (s * 1e9) as u64;
    truth.window(ns(trim), ns(secs - trim)).unwrap()
}

pub fn rel_err(got: f64, want: f64) -> f64 {
    (got - want).abs() / want
}

/// The lowest and highest of the capacity measured at `up` and a flood now. While the host
/// steals CPU the shaper drains a few per cent less for seconds, so a saturating run is held to
/// the range of floods around it rather than to one flood taken earlier.
pub fn flood_range(tb: &Testbed) -> (f64, f64) {
    let (up, now) = (tb.capacity().bps(), tb.measure_capacity().unwrap().bps());
    (up.min(now), up.max(now))
}

/// `got` lies within `tol` (a share) of `[lo, hi]`.
pub fn within(got: f64, (lo, hi): (f64, f64), tol: f64) -> bool {
    got >= lo * (1.0 - tol) && got <= hi * (1.0 + tol)
}
