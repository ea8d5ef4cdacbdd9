//! The ground-truth reader: A = C − X below capacity, A ≈ 0 with drops above it.

mod common;
use common::*;
use mgrp_testbed::{Buffer, DelayMode, Shaper, Testbed, TestbedConfig};

#[test]
fn available_is_capacity_minus_cross() {
    let tb = testbed(20.0);
    let b = run_pattern(&tb, "cbr:5mbit", 3.0, 0.3);
    assert!(rel_err(b.avail_bps, 15e6) < 0.02, "{b:?}");
    assert!(rel_err(b.total_bps, 5e6) < 0.02, "{b:?}");
    assert_eq!(b.capacity_bps, 20e6);
}

#[test]
fn overload_gives_zero_available_and_counts_drops() {
    let tb = testbed(20.0);
    let b = run_pattern(&tb, "cbr:30mbit", 3.0, 0.5);
    // The shaper's output is the capacity (the lessons measured < 1% loss of rate at this burst).
    assert!(rel_err(b.cross_bps, 20e6) < 0.02, "{b:?}");
    assert!(b.avail_bps < 0.02 * 20e6, "{b:?}");
    // A third of what is offered has to go.
    let dropped_bps = b.drops * 1514.0 * 8.0 / (b.end_s - b.start_s);
    assert!(
        rel_err(dropped_bps, 10e6) < 0.05,
        "drops {} -> {dropped_bps} bit/s; {b:?}",
        b.drops
    );
    assert!(b.backlog_bytes > 100_000, "queue should be full: {b:?}");
}

#[test]
fn tbf_shaper_and_time_buffer() {
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: mbit(10.0),
            shaper: Shaper::Tbf,
            buffer: Buffer::Time(std::time::Duration::from_millis(20)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let b = run_pattern(&tb, "cbr:4mbit", 2.5, 0.3);
    assert!(rel_err(b.avail_bps, 6e6) < 0.03, "{b:?}");
    let over = run_pattern(&tb, "cbr:15mbit", 2.5, 0.5);
    assert!(over.avail_bps < 0.03 * 10e6 && over.drops > 0.0, "{over:?}");
    // A 20 ms buffer at 10 Mbit/s holds 25 000 B: the queue cannot exceed it.
    assert!(over.backlog_bytes <= 25_000 + 1514, "{over:?}");
}
