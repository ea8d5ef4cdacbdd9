//! `mgrp bench proxy`: the server-choosing proxy of `examples/proxy` (seed 004 §7.3) on a tree:
//! src (clients, proxy, agent with its estimation service) — r — rx1 and rx2 (a replica and an
//! agent each), r→rx1 and r→rx2 shaped to C. Cross traffic from x1 and x2 (their own hosts on r,
//! so the truth can tell it from src's traffic): ~25% of C on r→rx1 throughout, ~76% on r→rx2
//! until the change, then none. Clients upload objects through the proxy; a latency prober
//! asks for a small object through the proxy and then directly from the replica it went to.
//! Figures: the share of requests that went to the replica best by ground truth at that moment,
//! the time from the change to the switch, and the proxy's added median latency.

use crate::rig::setup;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_estimate::stats::quantile;
use mgrp_proxy::choice::ChoiceConfig;
use mgrp_proxy::server::{HDR_CHOICE, HDR_REPLICA};
use mgrp_proxy::{Proxy, ProxyConfig, Replica};
use mgrp_service::config::{PassiveSource, PathSchedule, ServiceConfig};
use mgrp_service::http::Http;
use mgrp_service::Service;
use mgrp_testbed::clock::now_ns;
use mgrp_testbed::generator::GenOptions;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::topo::truth::TopoTruth;
use mgrp_testbed::topo::{TopoTestbed, TopoTruthSampler};
use mgrp_testbed::DelayMode;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPLICA_PORT: u16 = 8080;
const AGENT_PORT: u16 = 7240;
const PROXY: &str = "127.0.0.1:8080";
const API: &str = "127.0.0.1:7241";

#[derive(Debug, Clone, Serialize)]
pub struct ProxyBenchConfig {
    /// C of r→rx1 and r→rx2, Mbit/s.
    pub capacity_mbit: f64,
    /// Cross traffic on path 1 throughout, per cent of C.
    pub cross1_pct: f64,
    /// Cross traffic on path 2 until the change, per cent of C (none after).
    pub cross2_pct: f64,
    /// Seconds from the start of the cross traffic to the change (the seed: 70).
    pub change_s: f64,
    /// Seconds of the whole run from the start of the cross traffic.
    pub duration_s: f64,
    /// Clients start this long after the cross traffic (the first estimates come in).
    pub warmup_s: f64,
    pub clients: usize,
    /// Bytes each upload carries.
    pub object_bytes: usize,
    /// A client's pause between uploads.
    pub think_ms: u64,
    /// The latency prober's period (a pair: through the proxy, then direct).
    pub latency_every_ms: u64,
    /// The agent's method for its active measurements.
    pub method: String,
    /// One request in N diverted.
    pub divert_every: u64,
    pub repeat: usize,
}

impl ProxyBenchConfig {
    /// The seed's scenario at half its time scale: the change at 35 s of 70.
    pub fn standard() -> Self {
        ProxyBenchConfig {
            capacity_mbit: 20.0,
            cross1_pct: 25.0,
            cross2_pct: 76.0,
            change_s: 35.0,
            duration_s: 70.0,
            warmup_s: 5.0,
            clients: 2,
            object_bytes: 64 * 1024,
            think_ms: 200,
            latency_every_ms: 100,
            method: "auto".into(),
            divert_every: 128,
            repeat: 1,
        }
    }

    /// The change at 20 s of 40.
    pub fn quick() -> Self {
        ProxyBenchConfig {
            change_s: 20.0,
            duration_s: 40.0,
            ..Self::standard()
        }
    }

    pub fn check(&self) -> Result<()> {
        ensure(
            self.capacity_mbit > 0.0 && self.capacity_mbit <= 1000.0,
            "capacity: 0 < C ≤ 1000 Mbit/s",
        )?;
        ensure(
            (0.0..100.0).contains(&self.cross1_pct) && (0.0..100.0).contains(&self.cross2_pct),
            "cross traffic: 0 ≤ pct < 100",
        )?;
        ensure(
            self.warmup_s >= 0.0
                && self.warmup_s < self.change_s
                && self.change_s + 5.0 <= self.duration_s,
            "times: warmup < change and change + 5 s ≤ duration",
        )?;
        ensure(self.clients >= 1 && self.clients <= 32, "clients: 1..=32")?;
        ensure(
            self.object_bytes >= 1 && self.object_bytes <= 8 << 20,
            "object: 1 B..8 MiB",
        )?;
        ensure(self.repeat >= 1, "repeat at least once")?;
        ensure(self.divert_every >= 2, "divert_every at least 2")
    }

    fn topology(&self) -> String {
        let c = self.capacity_mbit;
        let x1 = c * self.cross1_pct / 100.0;
        let x2 = c * self.cross2_pct / 100.0;
        // `peaks` holds each level for its own time; the tail level outlasts the run.
        let tail = self.duration_s - self.change_s + 30.0;
        format!(
            r#"description = "mgrp bench proxy: src — r — rx1, rx2 (C each), cross from x1 and x2"
[[node]]
name = "src"
kind = "host"
[[node]]
name = "r"
kind = "router"
[[node]]
name = "rx1"
kind = "host"
[[node]]
name = "rx2"
kind = "host"
[[node]]
name = "x1"
kind = "host"
[[node]]
name = "x2"
kind = "host"
[[link]]
a = "src"
b = "r"
[[link]]
a = "x1"
b = "r"
[[link]]
a = "x2"
b = "r"
[[link]]
a = "r"
b = "rx1"
capacity = "{c}mbit"
dir = "a->b"
delay = "5ms"
[[link]]
a = "r"
b = "rx2"
capacity = "{c}mbit"
dir = "a->b"
delay = "5ms"
[[flow]]
from = "x1"
to = "rx1"
pattern = "cbr:{x1}mbit"
[[flow]]
from = "x2"
to = "rx2"
pattern = "peaks:{x2}mbit@{change}s,1kbit@{tail}s"
[measure]
from = "src"
to = "rx1"
"#,
            change = self.change_s,
        )
    }
}

/// One request as a client saw it.
#[derive(Debug, Clone, Copy)]
struct Req {
    /// Seconds since the cross traffic started.
    t_s: f64,
    replica: Option<usize>,
    divert: bool,
    agent_down: bool,
    ok: bool,
}

/// What the proxy believed at a second of the run: its figures, passive and active estimates.
type Belief = (f64, [Option<f64>; 2], [Option<f64>; 2], [Option<f64>; 2]);

/// One second of the run: truth, where requests went, what the proxy believed.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    pub t_s: f64,
    pub truth_mbit: [f64; 2],
    pub requests: [usize; 2],
    pub figure_mbit: [Option<f64>; 2],
    pub passive_mbit: [Option<f64>; 2],
    pub active_mbit: [Option<f64>; 2],
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub run: usize,
    pub capacity_measured_mbit: [f64; 2],
    pub requests: usize,
    pub failed: usize,
    /// Requests the proxy answered with "agent_down" (the agent unreachable).
    pub agent_down: usize,
    pub diverted: usize,
    /// Share of answered requests that went to the replica with the higher A (truth over the
    /// second around the request).
    pub to_best: f64,
    /// The same over ordinary (not diverted) requests.
    pub to_best_ordinary: f64,
    /// When the truth's best path changed (first 0.5 s bin after which path 2 stays ahead).
    pub change_truth_s: Option<f64>,
    /// From that change to the first ordinary request to replica 2.
    pub switch_s: Option<f64>,
    /// After that, how many times ordinary requests went back to replica 1 (flapping).
    pub flips_back: usize,
    pub latency_pairs: usize,
    pub direct_median_ms: Option<f64>,
    pub proxy_median_ms: Option<f64>,
    /// median(proxy) − median(direct).
    pub added_median_ms: Option<f64>,
    /// Median of each pair's (proxy − direct).
    pub added_paired_median_ms: Option<f64>,
    pub probes_asked: u64,
    /// Active measurements the agent ran, and their probe bytes (both paths).
    pub measurements: u64,
    pub probe_bytes: u64,
    /// The agent's passive source (Wren on src's traffic to the replicas): its counters.
    pub passive: serde_json::Value,
    pub timeline: Vec<Second>,
}

#[derive(Debug, Serialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

fn spread(v: impl Iterator<Item = Option<f64>>) -> Option<Spread> {
    let v: Vec<f64> = v.flatten().collect();
    if v.is_empty() {
        return None;
    }
    Some(Spread {
        n: v.len(),
        median: quantile(&v, 0.5)?,
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub to_best: Option<Spread>,
    pub switch_s: Option<Spread>,
    pub added_median_ms: Option<Spread>,
    pub added_paired_median_ms: Option<Spread>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub config: ProxyBenchConfig,
    pub runs: Vec<RunRow>,
    pub summary: Summary,
    /// Targets: ≥ 95% to the best, switch within 5 s, ≤ 1 ms added median latency.
    pub targets: Targets,
}

#[derive(Debug, Serialize)]
pub struct Targets {
    pub to_best_min: f64,
    pub switch_max_s: f64,
    pub added_max_ms: f64,
}

pub fn run(cfg: &ProxyBenchConfig, hooks: Hooks) -> Result<Report> {
    cfg.check()?;
    let mut runs = Vec::new();
    for i in 0..cfg.repeat {
        if hooks.stopped() {
            break;
        }
        hooks.say(&format!("run {}/{}\n", i + 1, cfg.repeat));
        runs.push(one_run(cfg, i, hooks)?);
    }
    let summary = Summary {
        to_best: spread(runs.iter().map(|r| Some(r.to_best))),
        switch_s: spread(runs.iter().map(|r| r.switch_s)),
        added_median_ms: spread(runs.iter().map(|r| r.added_median_ms)),
        added_paired_median_ms: spread(runs.iter().map(|r| r.added_paired_median_ms)),
    };
    Ok(Report {
        config: cfg.clone(),
        runs,
        summary,
        targets: Targets {
            to_best_min: 0.95,
            switch_max_s: 5.0,
            added_max_ms: 1.0,
        },
    })
}

/// Count src's traffic to and from rx2 as foreground too (the testbed counts one measured
/// pair, src↔rx1): its copies go to the same counter device at rx2's end of r→rx2.
fn count_src_rx2_as_foreground(tb: &TopoTestbed, src: SocketAddr, rx2: SocketAddr) -> Result<()> {
    let ns = tb.ns_of("rx2")?;
    let counter = mgrp_testbed::topo::build::fg_counter_dev("r");
    for (a, b) in [(src.ip(), rx2.ip()), (rx2.ip(), src.ip())] {
        let out = std::process::Command::new("tc")
            .args([
                "-n", &ns, "filter", "add", "dev", "r", "ingress", "prio", "10",
            ])
            .args(["protocol", "ip", "u32", "match", "ip", "src"])
            .arg(format!("{a}/32"))
            .args(["match", "ip", "dst"])
            .arg(format!("{b}/32"))
            .args(["action", "mirred", "egress", "mirror", "dev", &counter])
            .output()?;
        ensure(
            out.status.success(),
            &format!(
                "tc filter for the foreground counter: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
    }
    Ok(())
}

fn http_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into()
}

fn header_usize(r: &ureq::http::Response<ureq::Body>, name: &str) -> Option<usize> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// The scenario's pieces, up: the tree (without its cross traffic), an agent and a replica in
/// rx1 and rx2, the estimation service (both paths scheduled, Wren on src's traffic to the
/// replicas) with its HTTP API on src's loopback, and the proxy beside it. Dropping it stops
/// them all and removes the testbed.
pub struct ProxyRig {
    pub proxy: Option<Arc<Proxy>>,
    http: Option<Http>,
    service: Option<Service>,
    _origins: Vec<mgrp_proxy::origin::Origin>,
    _agents: Vec<Agent>,
    /// The replicas' HTTP addresses (rx1, rx2).
    pub replicas: Vec<SocketAddr>,
    src_ns: String,
    // Last: the namespaces go after everything in them has stopped.
    pub tb: TopoTestbed,
}

impl ProxyRig {
    pub fn start(
        cfg: &ProxyBenchConfig,
        measure_capacity: bool,
        choice: ChoiceConfig,
    ) -> Result<ProxyRig> {
        let tb = TopoTestbed::up(
            &cfg.topology(),
            crate::topo_run::options(None, "proxy-bench", measure_capacity, DelayMode::Thread),
        )
        .map_err(|e| Error::Config(format!("proxy bench topology: {e}")))?;
        let t = tb.topology();
        let idx = |n: &str| {
            t.index(n)
                .ok_or_else(|| Error::Config(format!("no node {n}")))
        };
        let (src, rx) = (idx("src")?, [idx("rx1")?, idx("rx2")?]);
        let src_addr = SocketAddr::new(t.host_addr(src).into(), 0);
        let replicas: Vec<SocketAddr> = rx
            .iter()
            .map(|&n| SocketAddr::new(t.host_addr(n).into(), REPLICA_PORT))
            .collect();
        count_src_rx2_as_foreground(&tb, src_addr, replicas[1])?;

        let key = Key::random();
        let mut agents: Vec<Agent> = Vec::new();
        let mut origins = Vec::new();
        for (i, &n) in rx.iter().enumerate() {
            let listen = SocketAddr::new(t.host_addr(n).into(), AGENT_PORT);
            let k = key.clone();
            agents.push(setup(&tb.ns(n), "agent", move || {
                Agent::start(AgentConfig::new(listen, k)).map_err(|e| e.to_string())
            })?);
            let at = replicas[i];
            origins.push(setup(&tb.ns(n), "origin", move || {
                mgrp_proxy::origin::Origin::start(at).map_err(|e| e.to_string())
            })?);
        }
        let svc_cfg = ServiceConfig {
            paths: rx
                .iter()
                .map(|&n| PathSchedule {
                    peer: SocketAddr::new(t.host_addr(n).into(), AGENT_PORT),
                    method: cfg.method.clone(),
                    // Rare on its own: the proxy asks when a path goes quiet.
                    every: Duration::from_secs(60),
                    budget: Some(60_000_000),
                    ceiling: None,
                })
                .collect(),
            passive: vec![PassiveSource {
                iface: t.dev(t.links_of(src)[0], src).to_string(),
                flow: Some(format!("port {REPLICA_PORT}")),
                window: Duration::from_secs(1),
                peer: None,
            }],
            ..ServiceConfig::default()
        };
        let src_ns = tb.ns(src);
        let api: SocketAddr = API.parse().map_err(|_| Error::Config("api".into()))?;
        let (service, http) = setup(&src_ns, "service", move || {
            let s = Service::start(&svc_cfg, key).map_err(|e| e.to_string())?;
            let h = Http::start(api, s.hub()).map_err(|e| e.to_string())?;
            Ok((s, h))
        })?;
        let mut pcfg = ProxyConfig::new(
            PROXY.parse().map_err(|_| Error::Config("proxy".into()))?,
            replicas.iter().copied().map(Replica::new).collect(),
            api,
        );
        pcfg.choice = choice;
        pcfg.choice.divert_every = cfg.divert_every;
        pcfg.log = false;
        let proxy = setup(&src_ns, "proxy", move || {
            Proxy::start(pcfg).map_err(|e| e.to_string())
        })?;
        Ok(ProxyRig {
            proxy: Some(Arc::new(proxy)),
            http: Some(http),
            service: Some(service),
            _origins: origins,
            _agents: agents,
            replicas,
            src_ns,
            tb,
        })
    }

    /// The namespace of src (clients, proxy, the agent's API).
    pub fn src_ns(&self) -> &str {
        &self.src_ns
    }

    /// The proxy's address (in src).
    pub fn proxy_addr() -> &'static str {
        PROXY
    }

    /// Take the agent's HTTP API down: the proxy can no longer reach its estimates.
    pub fn stop_api(&mut self) {
        self.http.take();
    }

    /// The schedules' measurements and probe bytes, and the passive source's counters.
    fn service_figures(&self) -> (u64, u64, serde_json::Value) {
        let Some(s) = &self.service else {
            return (0, 0, serde_json::Value::Null);
        };
        let hub = s.hub();
        let (m, b) = hub.paths().iter().fold((0, 0), |(m, b), p| {
            let c = p.counters();
            (m + c.measurements, b + c.probe_bytes)
        });
        (
            m,
            b,
            serde_json::to_value(hub.passive()).unwrap_or_default(),
        )
    }
}

impl Drop for ProxyRig {
    fn drop(&mut self) {
        self.proxy.take();
        self.http.take();
        if let Some(s) = self.service.take() {
            s.stop();
        }
    }
}

fn one_run(cfg: &ProxyBenchConfig, run: usize, hooks: Hooks) -> Result<RunRow> {
    let rig = ProxyRig::start(cfg, true, ChoiceConfig::default())?;
    let tb = &rig.tb;
    let replica_addrs = rig.replicas.clone();
    let proxy = rig
        .proxy
        .clone()
        .ok_or_else(|| Error::Worker("no proxy".into()))?;
    let sampler = TopoTruthSampler::start(tb, Duration::from_millis(100))?;
    let caps: Vec<f64> = sampler
        .truth()
        .links
        .iter()
        .map(|l| l.capacity_bps)
        .collect();
    let t0 = now_ns();
    let flows = tb.start_flows(&GenOptions {
        spin: Duration::from_micros(50),
        max_duration: Duration::from_secs_f64(cfg.duration_s + 2.0),
        ..Default::default()
    })?;
    let since = move || now_ns().saturating_sub(t0) as f64 / 1e9;
    let end_s = cfg.duration_s;
    hooks.say(&format!(
        "  cross traffic on; clients from {:.0} s, the change at {:.0} s, end at {:.0} s\n",
        cfg.warmup_s, cfg.change_s, end_s
    ));
    while since() < cfg.warmup_s && !hooks.stopped() {
        std::thread::sleep(Duration::from_millis(50));
    }

    let reqs: Arc<Mutex<Vec<Req>>> = Arc::default();
    let pairs: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for c in 0..cfg.clients {
        let (reqs, stop) = (reqs.clone(), stop.clone());
        let (size, think) = (cfg.object_bytes, Duration::from_millis(cfg.think_ms));
        workers.push(spawn_in(rig.src_ns(), &format!("client{c}"), move || {
            let agent = http_agent(Duration::from_secs(30));
            let body = vec![b'o'; size];
            let url = format!("http://{PROXY}/upload");
            while !stop.load(Ordering::Relaxed) && since() < end_s {
                let t_s = since();
                let r = agent.put(&url).send(&body[..]);
                let req = match r {
                    Ok(mut resp) => {
                        let replica = header_usize(&resp, HDR_REPLICA);
                        let choice = resp
                            .headers()
                            .get(HDR_CHOICE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let ok =
                            resp.status().is_success() && resp.body_mut().read_to_vec().is_ok();
                        Req {
                            t_s,
                            replica,
                            divert: choice == "divert",
                            agent_down: choice == "agent_down",
                            ok,
                        }
                    }
                    Err(_) => Req {
                        t_s,
                        replica: None,
                        divert: false,
                        agent_down: false,
                        ok: false,
                    },
                };
                reqs.lock().unwrap_or_else(|e| e.into_inner()).push(req);
                std::thread::sleep(think);
            }
            Ok(())
        })?);
    }
    {
        let (pairs, stop, reqs) = (pairs.clone(), stop.clone(), reqs.clone());
        let every = Duration::from_millis(cfg.latency_every_ms);
        let replicas = replica_addrs.clone();
        workers.push(spawn_in(rig.src_ns(), "latency", move || {
            let via = http_agent(Duration::from_secs(10));
            let direct = http_agent(Duration::from_secs(10));
            // Connections opened once and kept: both sides keep-alive.
            while !stop.load(Ordering::Relaxed) && since() < end_s {
                std::thread::sleep(every);
                let t_s = since();
                let a = Instant::now();
                let Ok(mut r) = via.get(&format!("http://{PROXY}/obj?size=100")).call() else {
                    continue;
                };
                let got = r.body_mut().read_to_vec().is_ok() && r.status().is_success();
                let lp = a.elapsed().as_secs_f64();
                let replica = header_usize(&r, HDR_REPLICA);
                let choice = r
                    .headers()
                    .get(HDR_CHOICE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                reqs.lock().unwrap_or_else(|e| e.into_inner()).push(Req {
                    t_s,
                    replica,
                    divert: choice == "divert",
                    agent_down: choice == "agent_down",
                    ok: got,
                });
                if let (true, Some(i)) = (got, replica) {
                    let b = Instant::now();
                    let url = format!("http://{}/obj?size=100", replicas[i.min(1)]);
                    if let Ok(mut d) = direct.get(&url).call() {
                        if d.body_mut().read_to_vec().is_ok() && d.status().is_success() {
                            let ld = b.elapsed().as_secs_f64();
                            pairs
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((lp, ld));
                        }
                    }
                }
            }
            Ok(())
        })?);
    }

    // Once a second: what the proxy believes, for the timeline.
    let mut beliefs: Vec<Belief> = Vec::new();
    let mut next = cfg.warmup_s.ceil();
    while since() < end_s && !hooks.stopped() {
        if since() >= next {
            let st = proxy.status();
            let f = |g: &dyn Fn(&mgrp_proxy::choice::PathStatus) -> Option<f64>| {
                [g(&st.choice.paths[0]), g(&st.choice.paths[1])]
            };
            beliefs.push((
                next,
                f(&|p| p.figure_bps),
                f(&|p| p.passive_bps),
                f(&|p| p.active_bps),
            ));
            hooks.say(&format!(
                "\r  {next:>4.0} s  figures (Mbit/s) {}  current {:?}  agent {}   ",
                st.choice
                    .paths
                    .iter()
                    .map(|p| p
                        .figure_bps
                        .map_or("-".into(), |v| format!("{:.1}", v / 1e6)))
                    .collect::<Vec<_>>()
                    .join(" / "),
                st.choice.current.map(|c| c + 1),
                if st.choice.agent_up { "up" } else { "down" }
            ));
            next += 1.0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    hooks.say("\n");
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join()
            .map_err(|_| Error::Worker("client thread panicked".into()))??;
    }
    let probes_asked = proxy.status().counters.probes_asked;
    let (measurements, probe_bytes, passive) = rig.service_figures();
    for f in flows {
        f.stop()?;
    }
    let truth = sampler.stop()?;
    drop(proxy);
    drop(rig);

    let reqs = reqs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let pairs = pairs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let rel = |t_s: f64| t0 + (t_s * 1e9) as u64;
    Ok(analyse(
        cfg,
        run,
        [caps[0] / 1e6, caps.get(1).copied().unwrap_or(0.0) / 1e6],
        &truth,
        &rel,
        &reqs,
        &pairs,
        &beliefs,
        [probes_asked, measurements, probe_bytes],
        passive,
    ))
}

/// A of both paths over the second around `t_s` (run time), Mbit/s.
fn truth_at(truth: &TopoTruth, rel: &dyn Fn(f64) -> u64, a_s: f64, b_s: f64) -> Option<[f64; 2]> {
    let w = truth.window(rel(a_s), rel(b_s))?;
    // Links in the topology's order of shaped directions: r→rx1, then r→rx2.
    let a = |label: &str| {
        w.links
            .iter()
            .find(|l| l.label.ends_with(label))
            .map(|l| l.avail_bps / 1e6)
    };
    Some([a("rx1")?, a("rx2")?])
}

#[allow(clippy::too_many_arguments)]
fn analyse(
    cfg: &ProxyBenchConfig,
    run: usize,
    caps: [f64; 2],
    truth: &TopoTruth,
    rel: &dyn Fn(f64) -> u64,
    reqs: &[Req],
    pairs: &[(f64, f64)],
    beliefs: &[Belief],
    [probes_asked, measurements, probe_bytes]: [u64; 3],
    passive: serde_json::Value,
) -> RunRow {
    let best_at = |t: f64| {
        truth_at(truth, rel, (t - 0.5).max(0.0), t + 0.5).map(|a| if a[1] > a[0] { 1 } else { 0 })
    };
    let answered: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.ok && r.replica.is_some())
        .collect();
    let hits = |v: &[&Req]| {
        let n = v.len().max(1) as f64;
        v.iter()
            .filter(|r| best_at(r.t_s).is_some_and(|b| Some(b) == r.replica))
            .count() as f64
            / n
    };
    let ordinary: Vec<&Req> = answered.iter().copied().filter(|r| !r.divert).collect();
    // The truth's change: the first 0.5 s bin after which path 2 stays ahead.
    let mut change_truth_s = None;
    let mut t = cfg.warmup_s;
    while t + 0.5 <= cfg.duration_s {
        match truth_at(truth, rel, t, t + 0.5) {
            Some(a) if a[1] > a[0] => {
                change_truth_s.get_or_insert(t);
            }
            _ => change_truth_s = None,
        }
        t += 0.5;
    }
    // The first ordinary request to replica 2 after the change; then how often ordinary
    // requests went back to replica 1 (each return counted once).
    let switch_s = change_truth_s.and_then(|c| {
        ordinary
            .iter()
            .find(|r| r.t_s >= c && r.replica == Some(1))
            .map(|r| r.t_s - c)
    });
    let flips_back = change_truth_s.map_or(0, |c| {
        let after: Vec<Option<usize>> = ordinary
            .iter()
            .filter(|r| r.t_s >= c + switch_s.unwrap_or(f64::INFINITY))
            .map(|r| r.replica)
            .collect();
        after
            .windows(2)
            .filter(|w| w[0] == Some(1) && w[1] == Some(0))
            .count()
    });
    let lp: Vec<f64> = pairs.iter().map(|p| p.0 * 1e3).collect();
    let ld: Vec<f64> = pairs.iter().map(|p| p.1 * 1e3).collect();
    let diff: Vec<f64> = pairs.iter().map(|p| (p.0 - p.1) * 1e3).collect();
    let (mp, md) = (quantile(&lp, 0.5), quantile(&ld, 0.5));
    let timeline = beliefs
        .iter()
        .map(|(t, fig, pas, act)| {
            let mut n = [0usize; 2];
            for r in answered.iter().filter(|r| r.t_s >= t - 1.0 && r.t_s < *t) {
                if let Some(i) = r.replica.filter(|i| *i < 2) {
                    n[i] += 1;
                }
            }
            let m = |v: [Option<f64>; 2]| v.map(|x| x.map(|b| b / 1e6));
            Second {
                t_s: *t,
                truth_mbit: truth_at(truth, rel, t - 1.0, *t).unwrap_or([f64::NAN; 2]),
                requests: n,
                figure_mbit: m(*fig),
                passive_mbit: m(*pas),
                active_mbit: m(*act),
            }
        })
        .collect();
    RunRow {
        run,
        capacity_measured_mbit: caps,
        requests: reqs.len(),
        failed: reqs.len() - answered.len(),
        agent_down: reqs.iter().filter(|r| r.agent_down).count(),
        diverted: answered.iter().filter(|r| r.divert).count(),
        to_best: hits(&answered),
        to_best_ordinary: hits(&ordinary),
        change_truth_s,
        switch_s,
        flips_back,
        latency_pairs: pairs.len(),
        direct_median_ms: md,
        proxy_median_ms: mp,
        added_median_ms: mp.zip(md).map(|(p, d)| p - d),
        added_paired_median_ms: quantile(&diff, 0.5),
        probes_asked,
        measurements,
        probe_bytes,
        passive,
        timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_parses_as_a_topology_and_checks() {
        for c in [ProxyBenchConfig::standard(), ProxyBenchConfig::quick()] {
            c.check().unwrap();
            let t = mgrp_testbed::topo::Topology::parse(&c.topology()).unwrap();
            assert_eq!(t.shaped_dirs().len(), 2);
            assert_eq!(t.flows.len(), 2);
        }
        let mut bad = ProxyBenchConfig::quick();
        bad.change_s = bad.duration_s;
        assert!(bad.check().is_err());
    }
}
