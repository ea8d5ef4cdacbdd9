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

/// Removes the test's store file (and SQLite's WAL and shared-memory files) on drop.
struct TempDb(std::path::PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        for ext in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(ext);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A map made before a restart is served at once from the store (and not re-made while it is
/// younger than `every`); `/v1/maps` lists each coordinator's newest; a reload that changes
/// or removes `[map]` restarts or stops the mapping thread and keeps the last map on show.
#[test]
fn a_stored_map_survives_restart_and_reload() {
    use mgrp_engine::auth::Key;
    use mgrp_service::config::ServiceConfig;
    use mgrp_service::Service;
    use mgrp_store::{EstimateStore, StoredMap};

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let db =
        TempDb(std::env::temp_dir().join(format!("mgrp-map-{}-{nanos}.db", std::process::id())));
    let now_ms = mgrp_map::netmap::now_ms();
    let stored = |name: &str, at_ms: u64| {
        let mut r = report();
        r.at_ms = at_ms;
        StoredMap {
            coordinator: name.into(),
            t_ns: at_ms * 1_000_000,
            json: serde_json::to_string(&r).unwrap(),
        }
    };
    {
        let mut s = Store::open(
            &db.0,
            mgrp_store::Durability::Process,
            Duration::from_secs(3600),
        )
        .unwrap();
        s.put_map(&stored("coord-a", now_ms - 60_000)).unwrap();
        s.put_map(&stored("coord-a", now_ms - 1_000)).unwrap();
        s.put_map(&stored("coord-b", now_ms - 120_000)).unwrap();
    }
    // Port 9 on loopback: nothing answers there, and the fresh map means nothing is tried.
    let config = |every: &str, map: bool| {
        let mut c = format!("store = {:?}\nhttp = \"off\"\n", db.0.display().to_string());
        if map {
            c += &format!(
                "[map]\nname = \"coord-a\"\nagents = [\"127.0.0.1:9\"]\nevery = \"{every}\"\n"
            );
        }
        ServiceConfig::parse(&c).unwrap()
    };
    let mut svc = Service::start(&config("1h", true), Key::random()).unwrap();
    let http = Http::start("127.0.0.1:0".parse().unwrap(), svc.hub()).unwrap();
    let base = format!("http://{}", http.local_addr());

    let (code, body) = get(&base, "/v1/map");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["restored"], true, "{body}");
    assert_eq!(
        body["map"]["at_ms"],
        now_ms - 1_000,
        "the newest of coord-a"
    );
    assert_eq!(body["schedule"]["name"], "coord-a");
    // Still fresh a moment later: the thread waits out `every` from the stored map's time.
    std::thread::sleep(Duration::from_millis(600));
    let (_, body) = get(&base, "/v1/map");
    assert_eq!(
        (body["running"].clone(), body["maps_done"].clone()),
        (false.into(), 0.into())
    );

    let (code, body) = get(&base, "/v1/maps");
    assert_eq!(code, 200, "{body}");
    let maps = body["maps"].as_array().unwrap();
    let seen: Vec<(&str, u64)> = maps
        .iter()
        .map(|m| {
            (
                m["coordinator"].as_str().unwrap(),
                m["map"]["at_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("coord-a", now_ms - 1_000), ("coord-b", now_ms - 120_000)]
    );
    assert!(maps[0]["map"]["graph"]["edges"].is_array());

    let rep = svc.reload(&config("2h", true)).unwrap();
    assert_eq!(rep.stopped, ["map"], "{rep:?}");
    assert_eq!(rep.started, ["map of 1 agents"], "{rep:?}");
    let (_, body) = get(&base, "/v1/map");
    assert_eq!(body["schedule"]["every_s"], 7200.0, "{body}");
    assert_eq!(body["map"]["at_ms"], now_ms - 1_000);

    let rep = svc.reload(&config("", false)).unwrap();
    assert_eq!(rep.stopped, ["map"], "{rep:?}");
    let (code, body) = get(&base, "/v1/map");
    assert_eq!(code, 200, "the last map stays on show: {body}");
    assert!(body["schedule"].is_null(), "{body}");
    drop(http);
    svc.stop();
}
