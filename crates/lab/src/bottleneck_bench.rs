//! `mgrp bench bottleneck`: Tneck (a TCP flow, one parallel traceroute per RTT) against a
//! BFind-style rising UDP ramp, on chain3 (a — r1 ═ r2 ═ r3 — b) with the narrow link moved
//! from case to case, and the seed's case where only competing TCP flows make a link the
//! bottleneck (seed 003 §4.2: BFind's UDP pushes them away and names the other link).
//!
//! Both locators use the same detector ([`mgrp_map::Tneck`]: per-link delay rise, confirmed
//! over 4 consecutive samples); they differ only in the load. The ramp starts at 1 Mbit/s and
//! grows ×1.25 every 100 ms (BFind raises its rate in steps while it traceroutes; the seed gives
//! no step, this one reaches 50 Mbit/s in about 2 s). Truth is by construction: the link whose
//! measured capacity (or, with TCP cross traffic, whose fair share) is smallest.

use crate::{ensure, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::load::{LoadReport, LoadSample};
use mgrp_map::run::{locate, Load};
use mgrp_map::{BottleneckConfig, BottleneckReport};
use mgrp_testbed::generator::{CrossTraffic, Endpoints, GenOptions};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::topo::{self, TopoOptions, TopoTestbed};
use mgrp_testbed::CrossPattern;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One setting of chain3.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: &'static str,
    /// r1═r2 and r2═r3 capacities, Mbit/s.
    pub c12: f64,
    pub c23: f64,
    /// Greedy CUBIC flows x2s → x2r across r2═r3 only.
    pub tcp_cross: u32,
    /// The link a TCP flow from a is limited by (2 = r1→r2, 3 = r2→r3).
    pub truth_link: u8,
}

/// The cases of the issue that chain3 can hold (the narrow link at each shaped hop in turn;
/// two near-equal links; a link that is the bottleneck only through competing TCP flows).
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "narrow r1-r2",
            c12: 15.0,
            c23: 50.0,
            tcp_cross: 0,
            truth_link: 2,
        },
        Case {
            name: "narrow r2-r3",
            c12: 50.0,
            c23: 20.0,
            tcp_cross: 0,
            truth_link: 3,
        },
        Case {
            name: "near-equal (20 vs 23)",
            c12: 23.0,
            c23: 20.0,
            tcp_cross: 0,
            truth_link: 3,
        },
        // 4 CUBIC flows on r2═r3 at 45 Mbit/s: a fifth TCP flow's share is 9 < 25. (With 2,
        // the third flow's share would be 15, but two runs showed the short-RTT CUBIC flows
        // leaving it 24: r1═r2 was saturated too, a case with two bottlenecks.)
        Case {
            name: "TCP cross on r2-r3",
            c12: 25.0,
            c23: 45.0,
            tcp_cross: 4,
            truth_link: 3,
        },
    ]
}

#[derive(Debug, Clone)]
pub struct BottleneckBenchConfig {
    pub cases: Vec<Case>,
    pub methods: Vec<String>,
    pub reps: u32,
    /// Delay on r3—b, ms (the path's RTT is about twice this).
    pub tail_ms: f64,
}

impl BottleneckBenchConfig {
    pub fn check(&self) -> Result<()> {
        ensure((1..=50).contains(&self.reps), "--reps must be 1..=50")?;
        ensure(
            (0.0..=200.0).contains(&self.tail_ms),
            "--tail-delay must be 0..=200 ms",
        )?;
        ensure(
            self.methods.iter().all(|m| m == "tneck" || m == "bfind"),
            "--methods are tneck and bfind",
        )
    }
}

/// One locator run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub case: String,
    pub method: String,
    pub truth_link: u8,
    pub link: Option<u8>,
    pub correct: bool,
    pub samples: Option<u32>,
    pub seconds_to_verdict: Option<f64>,
    pub confidence: Option<f64>,
    /// Bytes of traceroute probes / bytes of the load (TCP acked or UDP received).
    pub probe_bytes: u64,
    pub load_bytes: u64,
    /// How hard the load pushed at the verdict, bit/s.
    pub load_bps_at_verdict: Option<f64>,
    pub bound_bps: Option<f64>,
    /// Measured capacities of r1→r2 and r2→r3, bit/s.
    pub measured_bps: [f64; 2],
    pub why_not: Option<String>,
}

/// A BFind-style load: UDP from a to b at a rate that rises ×1.25 every 100 ms, from 1 Mbit/s
/// to `max_bps`, for at most `max`.
struct UdpRamp {
    ends: Endpoints,
    rate_bps: f64,
    max_bps: f64,
    gen: Option<CrossTraffic>,
    step_at: Instant,
    started: Instant,
    end: Instant,
    received: u64,
    failed: bool,
}

const RAMP_STEP: Duration = Duration::from_millis(100);

impl UdpRamp {
    fn start(ends: Endpoints, max_bps: f64, max: Duration) -> Result<UdpRamp, mgrp_map::Error> {
        let now = Instant::now();
        let mut r = UdpRamp {
            ends,
            rate_bps: 1e6,
            max_bps,
            gen: None,
            step_at: now,
            started: now,
            end: now + max,
            received: 0,
            failed: false,
        };
        r.restart();
        Ok(r)
    }

    fn restart(&mut self) {
        if let Some(g) = self.gen.take() {
            match g.stop() {
                Ok(rep) => self.received += rep.received_bytes,
                Err(_) => self.failed = true,
            }
        }
        let pattern = CrossPattern::parse(&format!("cbr:{}bit", self.rate_bps.round() as u64))
            .expect("a cbr pattern");
        let opts = GenOptions {
            max_duration: self.end.saturating_duration_since(Instant::now()) + RAMP_STEP,
            ..Default::default()
        };
        match CrossTraffic::start_between(&self.ends, &pattern, &opts) {
            Ok(g) => self.gen = Some(g),
            Err(_) => self.failed = true,
        }
        self.step_at = Instant::now();
    }
}

impl Load for UdpRamp {
    fn sample(&mut self) -> Result<LoadSample, mgrp_map::Error> {
        if self.step_at.elapsed() >= RAMP_STEP && self.rate_bps < self.max_bps {
            self.rate_bps = (self.rate_bps * 1.25).min(self.max_bps);
            self.restart();
        }
        Ok(LoadSample {
            t_s: self.started.elapsed().as_secs_f64(),
            bytes_acked: self.received,
            // Samples at a steady 10 ms: the ramp has no RTT of its own.
            srtt_us: 10_000,
            rttvar_us: 0,
            cwnd: 0,
            retrans: 0,
            delivery_rate_bps: self.rate_bps,
            slow_start: false,
        })
    }
    fn finished(&self) -> bool {
        self.failed || Instant::now() >= self.end
    }
    fn stop(mut self: Box<Self>) -> LoadReport {
        self.rate_bps = self.max_bps; // no further step
        if let Some(g) = self.gen.take() {
            if let Ok(rep) = g.stop() {
                self.received += rep.received_bytes;
            }
        }
        LoadReport {
            seconds: self.started.elapsed().as_secs_f64(),
            bytes_written: self.received,
            bytes_acked: self.received,
            retrans: 0,
            failed: self.failed,
        }
    }
}

fn key() -> Key {
    Key::random()
}

/// Run every case × method × repetition; progress through `hooks`.
pub fn run(cfg: &BottleneckBenchConfig, hooks: Hooks) -> Result<Vec<Run>> {
    cfg.check()?;
    let mut out = Vec::new();
    for case in &cfg.cases {
        let tb = TopoTestbed::up(
            &topo::chain3_with(case.c12, case.c23, cfg.tail_ms),
            TopoOptions {
                name: Some(format!("bn{}", std::process::id() % 100_000)),
                ..Default::default()
            },
        )?;
        let measured = |from: &str, to: &str| {
            tb.capacities()
                .iter()
                .find(|c| c.from == from && c.to == to)
                .map_or(f64::NAN, |c| c.capacity.bps())
        };
        let measured_bps = [measured("r1", "r2"), measured("r2", "r3")];
        let t = tb.topology();
        let b = t.host_addr(t.index("b").expect("chain3 has b"));
        let listen = SocketAddr::from((b, 7240));
        let k = key();
        let k2 = k.clone();
        let _agent: Agent = spawn_in(&tb.ns_of("b")?, "agent", move || {
            Agent::start(AgentConfig::new(listen, k2))
                .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
        })?
        .join()
        .map_err(|_| crate::Error::Worker("the agent thread panicked".into()))??;
        let cross = if case.tcp_cross > 0 {
            let x2r = t.host_addr(t.index("x2r").expect("chain3 has x2r"));
            let ends = Endpoints {
                src_ns: tb.ns_of("x2s")?,
                dst_ns: tb.ns_of("x2r")?,
                dst: SocketAddr::from((x2r, 5300)),
            };
            let p = CrossPattern::parse(&format!("tcp:{}", case.tcp_cross))
                .map_err(|e| crate::Error::Config(e.to_string()))?;
            let opts = GenOptions {
                max_duration: Duration::from_secs(3600),
                ..Default::default()
            };
            let g = CrossTraffic::start_between(&ends, &p, &opts)?;
            std::thread::sleep(Duration::from_secs(2)); // past their slow start
            Some(g)
        } else {
            None
        };
        for method in &cfg.methods {
            for rep in 0..cfg.reps {
                if hooks.stopped() {
                    return Err(crate::Error::Interrupted);
                }
                (hooks.progress)(&format!(
                    "{}: {method} run {}/{}\n",
                    case.name,
                    rep + 1,
                    cfg.reps
                ));
                let a_ns = tb.ns_of("a")?;
                let (m, k3) = (method.clone(), k.clone());
                let max_bps = 1.5 * case.c12.max(case.c23) * 1e6;
                let ramp_ends = Endpoints {
                    src_ns: a_ns.clone(),
                    dst_ns: tb.ns_of("b")?,
                    dst: SocketAddr::from((b, 5400)),
                };
                let rep: BottleneckReport = spawn_in(&a_ns, "locate", move || {
                    locate_once(&m, listen, &k3, ramp_ends, max_bps)
                        .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
                })?
                .join()
                .map_err(|_| crate::Error::Worker("the locator panicked".into()))??;
                let v = rep.verdict;
                out.push(Run {
                    case: case.name.into(),
                    method: method.clone(),
                    truth_link: case.truth_link,
                    link: v.map(|v| v.link),
                    correct: v.is_some_and(|v| v.link == case.truth_link),
                    samples: v.map(|v| v.samples),
                    seconds_to_verdict: rep.seconds_to_verdict,
                    confidence: v.map(|v| v.confidence),
                    probe_bytes: rep.probe_bytes,
                    load_bytes: rep.flow_bytes,
                    load_bps_at_verdict: rep.load_bps_at_verdict,
                    bound_bps: rep.bound_bps,
                    measured_bps,
                    why_not: rep.why_not.clone(),
                });
                std::thread::sleep(Duration::from_millis(500)); // queues drain between runs
            }
        }
        if let Some(g) = cross {
            let r = g.stop()?;
            (hooks.progress)(&format!(
                "{}: the cross TCP flows got {:.1} Mbit/s over {:.0} s\n",
                case.name,
                r.received_bytes as f64 * 8.0 / r.duration_s.max(1e-9) / 1e6,
                r.duration_s
            ));
        }
    }
    Ok(out)
}

fn locate_once(
    method: &str,
    peer: SocketAddr,
    key: &Key,
    ramp: Endpoints,
    max_bps: f64,
) -> Result<BottleneckReport, mgrp_map::Error> {
    let pacer = std::sync::Arc::new(mgrp_engine::pacer::Pacer::spawn()?);
    let connect =
        || mgrp_engine::client::Session::connect(peer, key, pacer.clone(), Duration::from_secs(3));
    let cfg = BottleneckConfig {
        max_load: Duration::from_secs(10),
        measure: Duration::from_secs(1),
        ..Default::default()
    };
    let mut trace = connect()?;
    if method == "bfind" {
        let max = cfg.max_load;
        locate(
            &mut trace,
            move || -> Result<Box<dyn Load>, mgrp_map::Error> {
                Ok(Box::new(UdpRamp::start(ramp, max_bps, max)?))
            },
            &cfg,
            || false,
            |_| {},
        )
    } else {
        mgrp_map::bottleneck(&mut trace, connect()?, &cfg, || false, |_| {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_and_bad_configs_are_refused() {
        for c in cases() {
            let t = mgrp_testbed::topo::Topology::parse(&topo::chain3_with(c.c12, c.c23, 10.0))
                .unwrap();
            assert_eq!(t.shaped_dirs().len(), 4, "{}", c.name);
            assert!(c.truth_link == 2 || c.truth_link == 3);
        }
        let ok = BottleneckBenchConfig {
            cases: cases(),
            methods: vec!["tneck".into(), "bfind".into()],
            reps: 10,
            tail_ms: 10.0,
        };
        assert!(ok.check().is_ok());
        for bad in [
            BottleneckBenchConfig {
                reps: 0,
                ..ok.clone()
            },
            BottleneckBenchConfig {
                tail_ms: -1.0,
                ..ok.clone()
            },
            BottleneckBenchConfig {
                methods: vec!["pathneck".into()],
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err());
        }
    }
}
