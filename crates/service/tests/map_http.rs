//! `GET /v1/map`: the schema a client reads (nodes, edges with bound kind, value, when
//! measured, evidence; paths; how the map was made), and a clear 404 without `[map]`. The
//! map is made by the planner in-process (no network: the runner has its own namespace test).

use mgrp_map::graph::{Graph, PathObs};
use mgrp_map::planner::{FlowResult, Planner, PlannerConfig, StepResult};
use mgrp_map::MapReport;
use mgrp_service::http::Http;
use mgrp_service::Hub;
use mgrp_store::Store;
use std::sync::Arc;
use std::time::Duration;

fn get(base: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut resp = agent.get(&format!("{base}{path}")).call().unwrap();
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&body).unwrap())
}

/// src → r → {a, b}: the path to a is bottlenecked on r→a; b's path is not located.
fn report() -> MapReport {
    let ip = |s: &str| s.parse().unwrap();
    let obs = |d: &str| PathObs {
        src: ip("10.0.0.1"),
        dst: ip(d),
        hops: vec![Some(ip("10.0.0.2")), Some(ip(d))],
        reached: true,
        error: None,
        base_ns: vec![Some(100_000), Some(2_000_000)],
    };
    let mut dead = obs("10.0.9.2");
    dead.error = Some("cannot trace to 10.0.9.2:7240: refused".into());
    let mut pl = Planner::new(
        Graph::build(&[obs("10.0.1.2"), obs("10.0.2.2"), dead]),
        PlannerConfig::default(),
    )
    .unwrap();
    for (t, bn) in [(9e6, Some(1)), (20e6, None)] {
        let s = pl.poll_step().unwrap();
        let r = StepResult {
            flows: vec![FlowResult {
                path: s.locate,
                throughput_bps: Some(t),
            }],
            bottleneck: bn,
            note: "4 samples".into(),
        };
        pl.handle_step(&s, r, 1_795_000_000_000);
    }
    MapReport {
        stats: pl.stats(),
        steps: pl.log().to_vec(),
        graph: pl.into_graph(),
        probe_bytes: 1000,
        flow_bytes: 2_000_000,
        budget_bytes: 200_000_000,
        unfinished: None,
        seconds: 12.0,
        at_ms: 1_795_000_001_000,
    }
}

#[test]
fn the_map_api_serves_nodes_edges_bounds_and_evidence() {
    let hub = Hub::new(
        Box::new(Store::in_memory(Duration::from_secs(3600)).unwrap()),
        None,
    );
    let http = Http::start("127.0.0.1:0".parse().unwrap(), hub.clone()).unwrap();
    let base = format!("http://{}", http.local_addr());
    let (code, body) = get(&base, "/v1/map");
    assert_eq!(code, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("[map]"), "{body}");

    hub.update_map(|m| m.map = Some(Arc::new(report())));
    let (code, body) = get(&base, "/v1/map");
    assert_eq!(code, 200, "{body}");
    let map = &body["map"];
    let nodes = map["graph"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5, "src, r, a, b, the dead agent: {body:#}");
    for n in nodes {
        assert!(n["id"].is_u64() && n["label"].is_string() && n["addrs"].is_array());
        assert!(["agent", "router", "silent"].contains(&n["kind"].as_str().unwrap()));
    }
    let edges = map["graph"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 3);
    for e in edges {
        assert!(e["from"].is_u64() && e["to"].is_u64(), "{e}");
        assert!(e["value_bps"].is_f64(), "{e}");
        assert!(e["measured_at_ms"].is_u64(), "{e}");
        assert!(e["evidence"].is_string(), "{e}");
        assert!(e["paths"].is_array(), "{e}");
    }
    let exact: Vec<&serde_json::Value> = edges.iter().filter(|e| e["bound"] == "=").collect();
    assert_eq!(exact.len(), 1, "{edges:?}");
    assert_eq!(exact[0]["value_bps"], 9e6);
    assert!(
        exact[0]["evidence"].as_str().unwrap().contains("Tneck"),
        "{}",
        exact[0]
    );
    assert!(edges
        .iter()
        .filter(|e| e["bound"] == ">")
        .all(|e| e["value_bps"].as_f64().unwrap() >= 9e6));
    let paths = map["graph"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 3);
    assert!(paths[2]["problem"].as_str().unwrap().contains("refused"));
    assert_eq!(map["stats"]["flows"], 2);
    assert!(map["at_ms"].is_u64());
    assert_eq!(body["running"], false);
}
