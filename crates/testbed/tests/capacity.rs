//! Measured capacity: the flood at `up` reads what a saturating flow really gets through the
//! shaper, which on a VM is not what the shaper was told.

mod common;
use common::*;
use mgrp_testbed::capacity;

#[test]
fn measured_capacity_is_what_a_saturating_flow_gets() {
    for mbit in [20.0, 100.0, 200.0] {
        let tb = testbed(mbit);
        let at_up = tb.capacity();
        assert_eq!(at_up.configured_bps, mbit * 1e6);
        let m0 = at_up.measured_bps.expect("measured at up");
        let udp =
            capacity::saturating_flow(&tb, &format!("cbr:{}mbit", mbit * 1.25), 5198, 2.0).unwrap();
        let m1 = tb.measure_capacity().unwrap().bps();
        let tcp = capacity::saturating_flow(&tb, "tcp:4", 5198, 3.0).unwrap();
        let m2 = tb.measure_capacity().unwrap().bps();
        eprintln!(
            "{mbit} Mbit/s: floods {:.2} {:.2} {:.2}, UDP {:.2}, TCP {:.2} Mbit/s",
            m0 / 1e6,
            m1 / 1e6,
            m2 / 1e6,
            udp / 1e6,
            tcp / 1e6
        );
        // UDP: within 1% (the bound) of the floods on either side of the flow, plus half
        // of what those two floods disagree by: the shaper's real rate moves with the machine's
        // load (floods seconds apart read 95.1 and 97.0 Mbit/s at 100 Mbit/s). At 100 and
        // 200 Mbit/s single flows read 0.981-1.016 of the floods around them over 12 runs of
        // `mgrp bench capacity` (medians 0.999 and 1.000): 1.5% there.
        // TCP: its own per-packet work (ACKs, no offloads here) keeps the CPUs busier, and this
        // VM's shaper drains less when they are: 4 flows got 0.97-0.995 of the flood at
        // 100 Mbit/s over 6 runs of `mgrp bench capacity` — so 2% there, and at 200 Mbit/s they
        // are CPU-bound (0.94-0.97) and say nothing about the link: not held to it.
        let udp_bound = if mbit <= 20.0 { 0.01 } else { 0.015 };
        let mut checks = vec![("UDP", udp, m0, m1, udp_bound)];
        if mbit <= 100.0 {
            checks.push(("TCP", tcp, m1, m2, 0.02));
        }
        for (what, flow, a, b, bound) in checks {
            let mid = (a + b) / 2.0;
            let tol = bound + (a - b).abs() / 2.0 / mid;
            assert!(
                rel_err(flow, mid) <= tol,
                "{mbit} Mbit/s {what} flow {flow} vs floods {a} {b} (tolerance {tol})"
            );
        }
    }
}
