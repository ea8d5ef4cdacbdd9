//! The delay line adds the configured delay, in the direction asked for.

mod common;
use common::*;
use mgrp_testbed::rtt::measure_rtt;
use mgrp_testbed::{DelayDir, DelayMode, Testbed, TestbedConfig};
use std::time::Duration;

fn rtt_with(delay_ms: u64, dir: DelayDir) -> (f64, f64) {
    let tb = Testbed::up(
        TestbedConfig {
            delay: Some(Duration::from_millis(delay_ms)),
            delay_dir: dir,
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let r = measure_rtt(&tb, 15).unwrap();
    assert_eq!(r.lost, 0, "{r:?}");
    let stats = tb.delay_stats().unwrap();
    assert!(stats.packets >= 15, "{stats:?}");
    (r.min_ms, r.p50_ms)
}

#[test]
fn no_delay_is_fast() {
    let tb = testbed(20.0);
    let r = measure_rtt(&tb, 10).unwrap();
    assert!(r.p50_ms < 2.0, "{r:?}");
}

#[test]
fn reverse_delay_adds_once() {
    mgrp_testbed::stolen::unless_stolen("reverse_delay_adds_once", |_| {
        let (min, p50) = rtt_with(20, DelayDir::Reverse);
        assert!(min >= 20.0 && p50 < 22.0, "min {min} p50 {p50}");
    })
}

#[test]
fn forward_delay_adds_once() {
    mgrp_testbed::stolen::unless_stolen("forward_delay_adds_once", |_| {
        let (min, p50) = rtt_with(10, DelayDir::Forward);
        assert!(min >= 10.0 && p50 < 12.0, "min {min} p50 {p50}");
    })
}

#[test]
fn both_directions_add_twice() {
    mgrp_testbed::stolen::unless_stolen("both_directions_add_twice", |_| {
        let (min, p50) = rtt_with(10, DelayDir::Both);
        assert!(min >= 20.0 && p50 < 22.0, "min {min} p50 {p50}");
    })
}
