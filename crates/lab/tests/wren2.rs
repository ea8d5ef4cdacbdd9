//! Two-sided Wren live on the testbed (`chain3`, both router links at 20 Mbit/s): a real TCP
//! flow from a to b, b's agent capturing the flow's arrivals for a, both ends also written to
//! pcaps; the live `wren2` estimates must equal the offline two-sided analysis of those pcaps.
//! And what a peer refuses or counts: flows of other hosts, addresses not its own, too many
//! captures, records over the limit, no capture privileges. Needs root (namespaces, capture).

use mgrp_engine::client::{CaptureEvent, Session};
use mgrp_engine::pacer::Pacer;
use mgrp_lab::wren2_bench::Wren2Rig;
use mgrp_testbed::netns::spawn_in;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn live_two_sided_equals_offline_on_the_same_run() {
    let rig = Wren2Rig::start(20.0, 5.0, false, || Ok(())).expect("testbed");
    let dir = std::env::temp_dir().join(format!("mgrp-wren2-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sc = rig.run(20.0, 75.0, 10.0, &dir).expect("scenario");
    let a = sc.agreement();
    eprintln!(
        "one-sided {} live {} offline {} {a:?} {:?}",
        sc.one_sided.len(),
        sc.live.len(),
        sc.offline.len(),
        sc.counters
    );
    for e in &sc.live {
        eprintln!(
            "live {} {:.2} truth {:?}",
            e.window_start_ns,
            e.value_bps / 1e6,
            sc.truth.tightest(e.window_start_ns, e.window_end_ns).map(|t| t / 1e6)
        );
    }
    for e in &sc.offline {
        eprintln!("offline {} {:.2}", e.window_start_ns, e.value_bps / 1e6);
    }
    // The peer's records reached the merge, and matched what a sent.
    let c = &sc.counters;
    assert_eq!((c.requests, c.failures), (1, 0), "{c:?}");
    assert!(c.merge.matched > 1000, "{c:?}");
    // Ten seconds of flow: estimates in most windows (the first is left out of the
    // comparison: b's capture is asked for when a's first segment is seen, so it starts late).
    assert!(a.compared >= 5, "{a:?}");
    assert_eq!(a.equal, a.compared, "{a:?}");
    assert_eq!((a.only_live, a.only_offline), (0, 0), "{a:?}");
    sc.remove_pcaps();
    let _ = std::fs::remove_dir(&dir);
    let ag = rig.agent_counters().unwrap();
    assert_eq!((ag.captures, ag.captures_refused), (1, 0), "{ag:?}");
}
