//! Measured capacity: the flood at `up` reads what a saturating flow really gets through the
//! shaper, which on a VM is not what the shaper was told.

mod common;
use common::*;
use mgrp_testbed::capacity;

#[test]
fn measured_capacity_is_what_a_saturating_flow_gets() {
    mgrp_testbed::stolen::unless_stolen("measured_capacity_is_what_a_saturating_flow_gets", |_| {
        for mbit in [20.0, 100.0, 200.0] {
            let tb = testbed(mbit);
            let at_up = tb.capacity();
            assert_eq!(at_up.configured_bps, mbit * 1e6);
            let m0 = at_up.measured_bps.expect("measured at up");
            // The most any CPU lost while a flow ran, as a share of its time.
            let stolen_share = |s: Option<mgrp_clock::steal::StealSnapshot>| {
                s.and_then(|s| s.elapsed()).map_or(0.0, |s| s.max_share())
            };
            let steal = mgrp_clock::steal::StealSnapshot::take();
            let udp_w = capacity::saturating_flow_window(
                &tb,
                &format!("cbr:{}mbit", mbit * 1.25),
                5198,
                2.0,
            )
            .unwrap();
            let udp = udp_w.fg_bps;
            let udp_stolen = stolen_share(steal);
            let m1 = tb.measure_capacity().unwrap().bps();
            let steal = mgrp_clock::steal::StealSnapshot::take();
            let tcp = capacity::saturating_flow(&tb, "tcp:4", 5198, 3.0).unwrap();
            let tcp_stolen = stolen_share(steal);
            let m2 = tb.measure_capacity().unwrap().bps();
            eprintln!(
                "{mbit} Mbit/s: floods {:.2} {:.2} {:.2}, UDP {:.2}, TCP {:.2} Mbit/s",
                m0 / 1e6,
                m1 / 1e6,
                m2 / 1e6,
                udp / 1e6,
                tcp / 1e6
            );
            // Each flow must lie within the range of the floods measured around it, widened by a
            // margin: the shaper's real rate moves with the machine's load, and the floods show by
            // how much. Margins from 10 runs of `mgrp bench capacity` on a quiet host (HTB and TBF,
            // docs/results/capacity.md; flow / floods 0.996-1.001 at 20, 0.984-1.023 at 100,
            // 0.989-1.008 at 200 Mbit/s) and from 6 runs of this test while the host had CPU steal
            // (2026-11-23: the 20 Mbit/s HTB drained 16.3-19.3 Mbit/s within one run; flows fell up
            // to 4.1% below the lowest flood and 2.0% above the highest; at 100 Mbit/s 1.0% below):
            // 5% at 20, 3% at 100 and 200 Mbit/s. A flood that read the configured rate where flows
            // get less (the bug this guards against) is outside that on such a host.
            // TCP: at 100 and 200 Mbit/s four flows' own CPU work (ACKs, no offloads) slows this
            // VM's shaper and they are CPU-bound (0.89-1.005): they say nothing about the link there
            // and are not held to it.
            let margin = if mbit <= 20.0 { 0.05 } else { 0.03 };
            let floods = [m0, m1, m2];
            let lo = floods.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = floods.iter().copied().fold(0.0, f64::max);
            let mut checks = Vec::new();
            // A sender starved of CPU (a CI run while two builds shared the 2 cores: 200 Mbit/s UDP
            // offered and got 186 against floods of 195-198) does not saturate the shaper, and then
            // says nothing about its rate: the check needs the offered load above the floods.
            if udp_w.offered_fg_bps >= lo * (1.0 - margin) {
                checks.push(("UDP", udp, udp_stolen));
            } else {
                eprintln!(
                "{mbit} Mbit/s: UDP sender offered only {:.2} Mbit/s (CPU-starved), not a saturating flow here",
                udp_w.offered_fg_bps / 1e6
            );
            }
            if mbit <= 20.0 {
                checks.push(("TCP", tcp, tcp_stolen));
            }
            // A flood the host stole from is run again and the least disturbed kept, a flow is
            // not: a flow during which some CPU lost a share s of the time may get that much
            // less (the lower bound is scaled by 1 − s; s is 0 on a quiet host).
            for (what, flow, s) in checks {
                assert!(
                    flow >= lo * (1.0 - margin) * (1.0 - s.min(0.9)) && flow <= hi * (1.0 + margin),
                    "{mbit} Mbit/s {what} flow {flow} outside the floods {floods:?} by more than \
                     {margin} (the host stole {:.1}% of a CPU during the flow)",
                    s * 100.0
                );
            }
        }
    })
}

/// A later reading of the link can replace `up`'s as the truth's C (`mgrp bench accuracy` takes
/// one before each cell): on an idle link A is that capacity, not `up`'s.
#[test]
fn the_truth_subtracts_from_the_capacity_it_is_given() {
    use mgrp_testbed::{LinkCapacity, TruthSampler};
    use std::time::Duration;
    let tb = testbed(20.0);
    let given = LinkCapacity {
        measured_bps: Some(12e6),
        ..tb.capacity()
    };
    let sampler = TruthSampler::start_with(&tb, Duration::from_millis(50), given).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let truth = sampler.stop().unwrap();
    assert_eq!(truth.capacity_bps, 12e6);
    let (first, last) = (truth.samples[0].t_ns, truth.samples.last().unwrap().t_ns);
    let idle = truth.window(first, last).unwrap();
    // Nothing crosses an idle link: A is all of the given capacity.
    assert!((idle.avail_bps - 12e6).abs() < 1.0, "{idle:?}");
}
