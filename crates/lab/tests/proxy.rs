//! The server-choosing proxy on the testbed: with the agent's estimates clearly apart (80% of C
//! cross traffic on r→rx1, next to none on r→rx2) it forwards to rx2's replica; with the agent's
//! API taken down it keeps serving on that choice and says so. Needs root (namespaces); about
//! 15 s (no capacity flood; the agent measures both paths once, then on the proxy's request).

use mgrp_lab::proxy_bench::{ProxyBenchConfig, ProxyRig};
use mgrp_proxy::choice::ChoiceConfig;
use mgrp_proxy::server::{HDR_CHOICE, HDR_REPLICA};
use mgrp_testbed::generator::GenOptions;
use mgrp_testbed::netns::spawn_in;
use std::time::{Duration, Instant};

/// (replica, choice) of `n` small requests through the proxy, from src.
fn requests(rig: &ProxyRig, n: usize) -> Vec<(Option<usize>, String)> {
    let url = format!("http://{}/obj?size=1000", ProxyRig::proxy_addr());
    spawn_in(rig.src_ns(), "client", move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .into();
        let mut out = Vec::new();
        for _ in 0..n {
            let mut r = agent.get(&url).call().expect("the proxy answers");
            assert_eq!(r.status(), 200);
            assert_eq!(r.body_mut().read_to_vec().unwrap().len(), 1000);
            let h = |k: &str| {
                r.headers()
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            out.push((
                h(HDR_REPLICA).and_then(|v| v.parse().ok()),
                h(HDR_CHOICE).unwrap_or_default(),
            ));
        }
        Ok(out)
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

#[test]
fn forwards_to_the_better_path_and_keeps_serving_without_the_agent() {
    let mut cfg = ProxyBenchConfig::quick();
    cfg.cross1_pct = 80.0;
    cfg.cross2_pct = 1.0;
    // The change (to no cross traffic on path 2) comes after the test.
    cfg.change_s = 100.0;
    cfg.duration_s = 110.0;
    let choice = ChoiceConfig {
        agent_timeout: Duration::from_secs(1),
        ..ChoiceConfig::default()
    };
    let mut rig = ProxyRig::start(&cfg, false, choice).expect("rig up (this test needs root)");
    let _flows = rig
        .tb
        .start_flows(&GenOptions {
            spin: Duration::from_micros(50),
            max_duration: Duration::from_secs(60),
            ..Default::default()
        })
        .unwrap();
    let proxy = rig.proxy.clone().unwrap();
    // Wait (bounded) until the proxy's figures of the two paths are clearly apart (measured
    // under the cross traffic: the first estimates may predate it, and `auto` misses wildly
    // now and then — in 2 of 10 runs here a first estimate read path 2 at ~4.7 Mbit/s; a path quiet
    // for 2 s is measured again). Then every ordinary request goes to the replica with the
    // higher figure, checked only when the figures before and after the requests agree.
    let flows_on = Instant::now();
    let apart = |st: &mgrp_proxy::ProxyStatus| -> Option<usize> {
        let since = flows_on.elapsed().as_secs_f64() - 0.5;
        let f: Vec<f64> = st
            .choice
            .paths
            .iter()
            .map(|p| p.figure_bps.unwrap_or(0.0))
            .collect();
        let fresh = st
            .choice
            .paths
            .iter()
            .all(|p| p.active_age_s.is_some_and(|a| a < since));
        let winner = if f[1] > 1.5 * f[0] { 1 } else { 0 };
        (fresh && (f[1] > 1.5 * f[0] || f[0] > 1.5 * f[1])).then_some(winner)
    };
    let t0 = Instant::now();
    let (winner, v) = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "estimates never clearly apart: {:?}",
            proxy.status()
        );
        std::thread::sleep(Duration::from_millis(200));
        let Some(before) = apart(&proxy.status()) else {
            continue;
        };
        let v = requests(&rig, 40);
        if apart(&proxy.status()) == Some(before) {
            break (before, v);
        }
    };
    let ordinary: Vec<_> = v.iter().filter(|(_, c)| c == "best").collect();
    assert!(ordinary.len() >= 39, "{v:?}");
    assert!(ordinary.iter().all(|(r, _)| *r == Some(winner)), "{v:?}");
    // By ground truth path 2 is the better one (A ~20 vs ~4 Mbit/s): say so when the agent's
    // estimates said otherwise (the agent's accuracy is `mgrp bench accuracy`'s business).
    if winner != 1 {
        eprintln!(
            "the agent's estimates favoured path 1: {:?}",
            proxy.status()
        );
    }

    // The agent's API goes away: after agent_timeout every answer still comes, from the last
    // choice, marked agent_down; /proxy/status says why.
    rig.stop_api();
    let t1 = Instant::now();
    let chosen = proxy.status().choice.current;
    while proxy.status().choice.agent_up {
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "agent never counted down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = requests(&rig, 20);
    assert!(
        v.iter().all(|(r, c)| *r == chosen && c == "agent_down"),
        "{v:?}"
    );
    let st = proxy.status();
    assert!(!st.choice.agent_up);
    assert!(st.choice.agent_error.is_some(), "{st:?}");
    assert_eq!(st.counters.upstream_errors, 0);
}
