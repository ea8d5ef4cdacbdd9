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
        })
        .unwrap();
    let proxy = rig.proxy.clone().unwrap();
    // Wait (bounded) until the proxy holds an estimate of each path measured under the cross
    // traffic (the first ones may predate it; a path quiet for 2 s is measured again).
    let t0 = Instant::now();
    let settled = loop {
        let st = proxy.status();
        let ages: Vec<Option<f64>> = st.choice.paths.iter().map(|p| p.active_age_s).collect();
        if ages
            .iter()
            .all(|a| a.is_some_and(|a| a < t0.elapsed().as_secs_f64() - 1.0))
        {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "no estimates: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let f: Vec<f64> = settled
        .choice
        .paths
        .iter()
        .map(|p| p.figure_bps.unwrap())
        .collect();
    // A is ~4 Mbit/s on path 1 and ~20 on path 2; the test needs them clearly apart, not exact.
    assert!(f[1] > 1.5 * f[0], "estimates not apart: {settled:?}");
    let v = requests(&rig, 40);
    let ordinary: Vec<_> = v.iter().filter(|(_, c)| c == "best").collect();
    assert!(ordinary.len() >= 39, "{v:?}");
    assert!(ordinary.iter().all(|(r, _)| *r == Some(1)), "{v:?}");

    // The agent's API goes away: after agent_timeout every answer still comes, from the last
    // choice, marked agent_down; /proxy/status says why.
    rig.stop_api();
    let t1 = Instant::now();
    while proxy.status().choice.agent_up {
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "agent never counted down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = requests(&rig, 20);
    assert!(
        v.iter().all(|(r, c)| *r == Some(1) && c == "agent_down"),
        "{v:?}"
    );
    let st = proxy.status();
    assert!(!st.choice.agent_up);
    assert!(st.choice.agent_error.is_some(), "{st:?}");
    assert_eq!(st.counters.upstream_errors, 0);
}
