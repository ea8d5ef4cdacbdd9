//! Each generator hits its configured rate on an uncongested path, as measured by the
//! bottleneck's counters (not by the generator's own claim).

mod common;
use common::*;

const C: f64 = 50.0;

#[test]
fn cbr_rate() {
    let tb = testbed(C);
    let b = run_pattern(&tb, "cbr:8mbit", 3.0, 0.3);
    assert!(rel_err(b.cross_bps, 8e6) < 0.02, "cbr measured {b:?}");
    assert_eq!(b.drops, 0.0);
}

#[test]
fn cbr_small_packets_rate() {
    let tb = testbed(C);
    let b = run_pattern(&tb, "cbr:4mbit,size=200", 3.0, 0.3);
    assert!(rel_err(b.cross_bps, 4e6) < 0.02, "cbr/200 measured {b:?}");
}

#[test]
fn poisson_rate() {
    let tb = testbed(C);
    // 10 Mbit/s of 1000 B packets for 4 s is ~4900 packets: sampling noise alone is ~1.4%.
    let b = run_pattern(&tb, "poisson:10mbit,size=1000,seed=3", 4.2, 0.1);
    assert!(rel_err(b.cross_bps, 10e6) < 0.05, "poisson measured {b:?}");
}

#[test]
fn onoff_rate() {
    let tb = testbed(C);
    // Window of exactly 40 on/off cycles.
    let b = run_pattern(&tb, "onoff:6mbit,on=50ms,off=50ms", 4.2, 0.1);
    assert!(rel_err(b.cross_bps, 6e6) < 0.03, "onoff measured {b:?}");
    assert!(b.offered_cross_bps > 0.0);
}

#[test]
fn step_rates() {
    use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
    use mgrp_testbed::{CrossPattern, TruthSampler};
    use std::time::Duration;
    let tb = testbed(C);
    let p = CrossPattern::parse("step:2,9,5mbit,every=1500ms").unwrap();
    let sampler = TruthSampler::start(&tb, Duration::from_millis(100)).unwrap();
    let gen = CrossTraffic::start(&tb, &p, BASE_PORT, &GenOptions::default()).unwrap();
    let start = gen.start_ns();
    std::thread::sleep(Duration::from_millis(4600));
    gen.stop().unwrap();
    let truth = sampler.stop().unwrap();
    for (i, want) in [2e6, 9e6, 5e6].iter().enumerate() {
        let lo = start + i as u64 * 1_500_000_000 + 100_000_000;
        let b = truth.window(lo, lo + 1_300_000_000).unwrap();
        assert!(rel_err(b.cross_bps, *want) < 0.03, "step {i}: {b:?}");
    }
}

#[test]
fn tcp_bulk_fills_the_bottleneck() {
    let tb = testbed(20.0);
    let c = tb.capacity().bps();
    let b = run_pattern(&tb, "tcp:2", 3.0, 1.0);
    // Greedy TCP takes what the shaper was measured to drain: within 2% (two flows with a 100p
    // buffer keep it busy; a saturating flow got 99.5-100% of the flood's reading at 20 Mbit/s
    // in `mgrp bench capacity`, the rest is the window's edges).
    assert!(rel_err(b.cross_bps, c) < 0.02, "tcp measured {b:?} vs {c}");
    assert!(b.avail_bps < 0.02 * c, "{b:?}");
}

#[test]
fn tcp_with_named_congestion_control() {
    let tb = testbed(20.0);
    let c = tb.capacity().bps();
    let b = run_pattern(&tb, "tcp:1,cc=cubic", 2.5, 1.0);
    // One flow may still be leaving its slow start's loss recovery in the window: 5%.
    assert!(rel_err(b.cross_bps, c) < 0.05, "tcp/cubic measured {b:?}");
}

#[test]
fn unknown_congestion_control_is_a_clear_error() {
    use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
    let tb = testbed(20.0);
    let p = mgrp_testbed::CrossPattern::parse("tcp:1,cc=nosuchcc").unwrap();
    let gen = CrossTraffic::start(&tb, &p, BASE_PORT, &GenOptions::default()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let e = gen.stop().unwrap_err().to_string();
    assert!(e.contains("not available"), "{e}");
}
