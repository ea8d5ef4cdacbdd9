//! The default schedule tracks: after one full search it keeps the estimate fresh with short
//! checks, and the probe load the bottleneck counts stays under the configured ceiling.

mod common;

use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::Role;
use mgrp_traffic::CrossPattern;
use std::time::Duration;

#[test]
fn tracks_under_the_ceiling_at_the_bottleneck() {
    let c = 20e6;
    let tb = common::testbed_at(c as u64);
    let (_agent, key) = common::agent_at_rcv(&tb);
    let secs = 30;
    let cross = CrossPattern::parse("cbr:8mbit,size=500").unwrap();
    let opts = GenOptions {
        max_duration: Duration::from_secs(secs + 10),
        ..GenOptions::default()
    };
    let _cross = CrossTraffic::start(&tb, &cross, BASE_PORT, &opts).unwrap();
    let ceiling = 0.01;
    // No method: tracking is the default; 1% of 20 Mbit/s is 1.5 MB a minute.
    let config = format!(
        "[[path]]\npeer = \"{}\"\nceiling = \"1%\"",
        Role::Rcv.addr()
    );
    let common::ServiceRun {
        recs,
        counters,
        view,
        bytes_at_bottleneck: at_bottleneck,
        truth_avail_bps,
    } = common::run_service(&tb, &key, &config, secs);
    let methods: Vec<&str> = recs.iter().map(|r| r.method.as_str()).collect();
    eprintln!(
        "{} estimates {:?}; {at_bottleneck:.0} B at the bottleneck; {counters:?}; {view:?}",
        recs.len(),
        recs.iter()
            .map(|r| (r.method.as_str(), (r.value / 1e5).round() / 10.0))
            .collect::<Vec<_>>()
    );
    // One acquiring search, then held estimates from checks.
    assert_eq!(methods.first(), Some(&"track:acquire"), "{methods:?}");
    let held = recs.iter().filter(|r| r.method != "track:acquire").count();
    assert!(held >= 5, "only {held} tracked estimates: {methods:?}");
    // The ceiling at the bottleneck's own counters: the whole run (under a minute) carried
    // at most a minute of the ceiling (the schedule counts frames, headers included) plus
    // 30 kB of session control frames, where checks every 250 ms without it would send
    // several times that. C is the measured capacity the schedule paced by.
    // The first round (the acquiring search, before C is known) cannot be held to it: when
    // it alone is larger (a long search: one CI run sent more than 1.5 MB), it is the bound
    // (its payload plus at most 21% of headers on 200-byte probes).
    let acquired = recs[0].probe_bytes as f64 * 1.21;
    let minute = (ceiling * view.capacity_bps.unwrap() / 8.0 * 60.0).max(acquired);
    assert!(
        at_bottleneck <= minute + 30_000.0,
        "{at_bottleneck} B at the bottleneck, a minute at the ceiling is {minute} B"
    );
    let share = view.probe_load_share.expect("load share known once C is");
    let c_est = view.capacity_bps.unwrap();
    assert!(
        share <= ceiling * 1.0001 || share <= acquired * 8.0 / 60.0 / c_est,
        "{view:?}"
    );
    assert_eq!(view.ceiling_share, Some(ceiling));
    // The estimates are of this path: the median within 15% of the truth the shaper counted.
    let mut v: Vec<f64> = recs.iter().map(|r| r.value).collect();
    v.sort_by(f64::total_cmp);
    let med = v[v.len() / 2];
    assert!(
        (med - truth_avail_bps).abs() <= 0.15 * truth_avail_bps,
        "median {med} vs truth {truth_avail_bps}"
    );
}
