//! What the service's testbed tests share: a testbed and an agent at rcv.
#![allow(dead_code)]

use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_service::config::ServiceConfig;
use mgrp_service::Service;
use mgrp_store::Record;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use std::time::Duration;

/// A testbed at `capacity_bps` (other settings default).
pub fn testbed_at(capacity_bps: u64) -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps,
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .expect("testbed (needs root)")
}

/// An agent at rcv (port 7240) with a fresh key: the agent (keep it alive) and its key.
pub fn agent_at_rcv(tb: &Testbed) -> (Agent, Key) {
    let key = Key::random();
    let listen: std::net::SocketAddr = format!("{}:7240", Role::Rcv.addr()).parse().unwrap();
    let k = key.clone();
    let agent = spawn_in(&tb.ns(Role::Rcv), "agent", move || {
        Ok(Agent::start(AgentConfig::new(listen, k)).unwrap())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    (agent, key)
}

/// What a service run in snd left: its stored A estimates, counters and schedule view, and the
/// truth over the run (the bytes snd offered the bottleneck, A).
pub struct ServiceRun {
    pub recs: Vec<Record>,
    pub counters: mgrp_service::CounterSnapshot,
    pub view: mgrp_service::ScheduleView,
    pub bytes_at_bottleneck: f64,
    pub truth_avail_bps: f64,
}

/// Run the service in snd for `secs` with `config` (its first schedule is the one viewed).
pub fn run_service(tb: &Testbed, key: &Key, config: &str, secs: u64) -> ServiceRun {
    let cfg = ServiceConfig::parse(config).unwrap();
    let sampler = TruthSampler::start(tb, Duration::from_millis(100)).unwrap();
    let t0 = mgrp_testbed::clock::now_ns();
    let key = key.clone();
    let (recs, counters, view) = spawn_in(&tb.ns(Role::Snd), "service", move || {
        let svc = Service::start(&cfg, key).unwrap();
        std::thread::sleep(Duration::from_secs(secs));
        let view = svc.hub().paths()[0].view();
        let store = svc.store();
        let counters = svc.stop();
        let s = store.lock().unwrap();
        let series = s.series().unwrap();
        let path = series
            .iter()
            .find(|(_, m)| m == "avail_bw")
            .map(|(p, _)| p.clone());
        let recs = match path {
            Some(p) => s.range(&p, "avail_bw", 0, u64::MAX, 10_000).unwrap(),
            None => Vec::new(),
        };
        Ok((recs, counters, view))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let truth = sampler.stop().unwrap();
    let w = truth.window(t0, mgrp_testbed::clock::now_ns()).unwrap();
    ServiceRun {
        recs,
        counters,
        view,
        bytes_at_bottleneck: w.offered_fg_bps * (w.end_s - w.start_s) / 8.0,
        truth_avail_bps: w.avail_bps,
    }
}
