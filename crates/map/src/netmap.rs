//! The Netmapper runner: the I/O around [`crate::graph`] and [`crate::planner`]. Pairwise
//! traceroutes from sources to agents, then the planner's steps as real TCP flows, the
//! largest of each step under Tneck ([`crate::run::bottleneck`]) and the rest as plain
//! load flows (`Control::Load`) running alongside it, all within one byte budget.
//!
//! Where a source is is the caller's business ([`Connector`]): this host (`mgrp map`), or a
//! testbed namespace (the bench and the tests).

use crate::graph::{BoundKind, Graph, PathObs};
use crate::planner::{FlowResult, PlanStats, Planner, PlannerConfig, Step, StepLog, StepResult};
use crate::run::{bottleneck, BottleneckConfig, BottleneckReport, Hands, Load};
use crate::trace::TraceConfig;
use crate::Error;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::load::LoadSample;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::relay::RelaySession;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Opens sessions from a source to an agent.
pub trait Connector {
    /// A session from source `src` (the caller's index) to the agent at `dst`. Must give up
    /// within a few seconds when the agent does not answer.
    fn connect(&self, src: usize, dst: SocketAddr) -> Result<Box<dyn Hands>, Error>;
    /// The source's address as the graph should name it, when no session could be made.
    fn source_ip(&self, src: usize) -> Option<IpAddr>;
}

/// What to map and how hard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MapConfig {
    /// (source index, agent): the paths. Pairwise among agents is every ordered pair.
    pub pairs: Vec<(usize, SocketAddr)>,
    pub trace: TraceConfig,
    /// Each Tneck run (its `budget_bytes` is further capped by what is left of the map's).
    pub bottleneck: BottleneckConfig,
    pub planner: PlannerConfig,
    /// All TCP flows and probes of the map together, bytes.
    pub budget_bytes: u64,
    /// In a joint step the other flows start this long before the located one, so they are
    /// past slow start when it samples.
    pub warmup: Duration,
}

/// Most paths a map takes (pairs of ~24 agents); the planner's max-flows are cubic in nodes.
pub const MAX_PAIRS: usize = 600;
/// A step is not started with less than this per flow left in the budget.
pub const MIN_FLOW_BUDGET: u64 = 1_000_000;

impl MapConfig {
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Map(m));
        if self.pairs.is_empty() {
            return bad("no paths to map: give at least one agent other than the source".into());
        }
        if self.pairs.len() > MAX_PAIRS {
            return bad(format!(
                "{} paths is more than {MAX_PAIRS}",
                self.pairs.len()
            ));
        }
        self.trace.validate()?;
        self.planner.validate().map_err(Error::Map)?;
        if self.budget_bytes < MIN_FLOW_BUDGET {
            return bad(format!(
                "a budget of {} bytes is below one flow's minimum ({MIN_FLOW_BUDGET})",
                self.budget_bytes
            ));
        }
        if self.warmup > Duration::from_secs(30) {
            return bad("warmup above 30 s".into());
        }
        Ok(())
    }
}

/// The map and how it was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MapReport {
    pub graph: Graph,
    pub steps: Vec<StepLog>,
    pub stats: PlanStats,
    pub probe_bytes: u64,
    pub flow_bytes: u64,
    pub budget_bytes: u64,
    /// Why the planner did not finish (budget spent, stopped), if it did not.
    pub unfinished: Option<String>,
    pub seconds: f64,
    /// When the map was finished, ms since the Unix epoch.
    pub at_ms: u64,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Traceroute every pair: what each path looks like (an unreachable agent is a path with
/// an error, not a failure of the map).
pub fn trace_all(
    conn: &dyn Connector,
    cfg: &MapConfig,
    stop: &mut dyn FnMut() -> bool,
    progress: &mut dyn FnMut(&str),
) -> (Vec<PathObs>, u64) {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (i, &(src, dst)) in cfg.pairs.iter().enumerate() {
        let fallback = conn.source_ip(src).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut obs = PathObs {
            src: fallback,
            dst: dst.ip(),
            hops: Vec::new(),
            reached: false,
            error: None,
            base_ns: Vec::new(),
        };
        if stop() {
            obs.error = Some("stopped before tracing".into());
            out.push(obs);
            continue;
        }
        match conn.connect(src, dst).and_then(|mut s| {
            let src_ip = s.local().map(|a| a.ip());
            crate::run::trace(&mut *s, &cfg.trace, &mut *stop).map(|r| (src_ip, r))
        }) {
            Ok((src_ip, rep)) => {
                obs.src = src_ip.unwrap_or(fallback);
                bytes += rep.probe_bytes;
                obs.reached = rep.reached;
                obs.hops = rep.hops.iter().map(|h| h.addrs.first().copied()).collect();
                obs.base_ns = rep.hops.iter().map(|h| h.min_ns).collect();
                if rep.reached {
                    if let Some(last) = obs.hops.last_mut() {
                        *last = Some(dst.ip());
                    }
                }
                progress(&format!(
                    "trace {}/{}: {} → {}: {} hops{}\n",
                    i + 1,
                    cfg.pairs.len(),
                    obs.src,
                    dst,
                    obs.hops.len(),
                    if rep.reached {
                        ""
                    } else {
                        ", agent not reached"
                    }
                ));
            }
            Err(e) => {
                progress(&format!(
                    "trace {}/{}: → {dst}: {e}\n",
                    i + 1,
                    cfg.pairs.len()
                ));
                obs.error = Some(format!("cannot trace to {dst}: {e}"));
            }
        }
        out.push(obs);
    }
    (out, bytes)
}

/// Map the paths of `cfg`: traceroutes, then the planner's steps, until it is done, the
/// budget is spent or `stop()`.
pub fn map(
    conn: &dyn Connector,
    cfg: &MapConfig,
    mut stop: impl FnMut() -> bool,
    mut progress: impl FnMut(&str),
) -> Result<MapReport, Error> {
    cfg.validate()?;
    let started = Instant::now();
    let (obs, mut probe_bytes) = trace_all(conn, cfg, &mut stop, &mut progress);
    let graph = Graph::build(&obs);
    let mut planner = Planner::new(graph, cfg.planner).map_err(Error::Map)?;
    let mut flow_bytes = 0u64;
    let mut unfinished = None;
    while let Some(step) = planner.poll_step() {
        if stop() {
            unfinished = Some("stopped".into());
            break;
        }
        let left = cfg.budget_bytes.saturating_sub(flow_bytes + probe_bytes);
        let k = step.paths.len() as u64;
        if left / k < MIN_FLOW_BUDGET {
            unfinished = Some(format!(
                "byte budget spent ({} of {} bytes) before step {}",
                flow_bytes + probe_bytes,
                cfg.budget_bytes,
                step.id
            ));
            break;
        }
        progress(&describe(planner.graph(), &step));
        let res = run_step(conn, cfg, &obs, planner.graph(), &step, left / k, &mut stop);
        let (result, pb, fb) = match res {
            Ok(x) => x,
            Err(e) => (
                StepResult {
                    flows: step
                        .paths
                        .iter()
                        .map(|&path| FlowResult {
                            path,
                            throughput_bps: None,
                        })
                        .collect(),
                    bottleneck: None,
                    note: format!("failed: {e}"),
                },
                0,
                0,
            ),
        };
        probe_bytes += pb;
        flow_bytes += fb;
        progress(&format!(
            "  → {} Mbit/s in all; {}\n",
            fmt_mbit(
                result
                    .flows
                    .iter()
                    .filter_map(|f| f.throughput_bps)
                    .sum::<f64>()
                    + 0.0
            ),
            match result.bottleneck {
                Some(b) => format!("bottleneck {}", planner.graph().edge_label(b)),
                None => format!("no bottleneck named ({})", result.note),
            }
        ));
        planner.handle_step(&step, result, now_ms());
    }
    let stats = planner.stats();
    let steps = planner.log().to_vec();
    Ok(MapReport {
        graph: planner.into_graph(),
        steps,
        stats,
        probe_bytes,
        flow_bytes,
        budget_bytes: cfg.budget_bytes,
        unfinished,
        seconds: started.elapsed().as_secs_f64(),
        at_ms: now_ms(),
    })
}

fn fmt_mbit(bps: f64) -> String {
    format!("{:.1}", bps / 1e6)
}

fn describe(g: &Graph, step: &Step) -> String {
    let paths: Vec<String> = step
        .paths
        .iter()
        .map(|&p| format!("{}→{}", g.paths[p].src, g.paths[p].dst))
        .collect();
    match step.edge {
        None => format!("step {}: {} alone\n", step.id, paths[0]),
        Some(e) => format!(
            "step {}: refine {} (>{} Mbit/s, max-flow {} Mbit/s): {}\n",
            step.id,
            g.edge_label(e),
            fmt_mbit(step.before_bps.unwrap_or(0.0)),
            fmt_mbit(step.maxflow_bps.unwrap_or(0.0)),
            paths.join(" + ")
        ),
    }
}

fn dst_addr(cfg: &MapConfig, obs: &[PathObs], p: usize) -> Result<(usize, SocketAddr), Error> {
    cfg.pairs
        .get(p)
        .copied()
        .filter(|(_, d)| obs.get(p).is_some_and(|o| o.dst == d.ip()))
        .ok_or_else(|| Error::Map(format!("path {p} has no pair")))
}

/// One step: the other flows first (warmup), then Tneck on the located one; each flow's
/// throughput over the same window (the located flow's verdict to its end). Returns the
/// result and the probe and flow bytes spent.
fn run_step(
    conn: &dyn Connector,
    cfg: &MapConfig,
    obs: &[PathObs],
    g: &Graph,
    step: &Step,
    budget_each: u64,
    stop: &mut dyn FnMut() -> bool,
) -> Result<(StepResult, u64, u64), Error> {
    let mut bcfg = cfg.bottleneck.clone();
    bcfg.budget_bytes = bcfg.budget_bytes.min(budget_each);
    // Paths (by index) are the pairs (by index): the graph keeps obs order.
    let (lsrc, ldst) = dst_addr(cfg, obs, step.locate)?;
    let others: Vec<usize> = step
        .paths
        .iter()
        .copied()
        .filter(|&p| p != step.locate)
        .collect();
    let mut flows: Vec<(usize, Box<dyn Load>)> = Vec::new();
    let other_max = bcfg.max_load + cfg.warmup + Duration::from_secs(10);
    for &p in &others {
        let (s, d) = dst_addr(cfg, obs, p)?;
        let f = conn
            .connect(s, d)?
            .start_load(other_max, budget_each, bcfg.cc.as_deref())?;
        flows.push((p, f));
    }
    if !flows.is_empty() {
        std::thread::sleep(cfg.warmup);
    }
    let snap = |flows: &mut [(usize, Box<dyn Load>)]| -> Vec<Option<LoadSample>> {
        flows.iter_mut().map(|(_, f)| f.sample().ok()).collect()
    };
    let at_start = snap(&mut flows);
    let mut at_verdict = at_start.clone();
    let rep: Result<BottleneckReport, Error> = (|| {
        let mut trace = conn.connect(lsrc, ldst)?;
        let load = conn.connect(lsrc, ldst)?;
        bottleneck(&mut *trace, load, &bcfg, &mut *stop, |_| {
            at_verdict = snap(&mut flows);
        })
    })();
    let at_end = snap(&mut flows);
    let mut flow_bytes = 0;
    let mut results = Vec::new();
    for (i, (p, f)) in flows.into_iter().enumerate() {
        let done = f.stop();
        flow_bytes += done.bytes_acked;
        let from = if rep.as_ref().is_ok_and(|r| r.verdict.is_some()) {
            at_verdict[i]
        } else {
            at_start[i]
        };
        let t = match (from, at_end[i]) {
            (Some(a), Some(b)) if b.t_s > a.t_s + 0.1 => {
                Some((b.bytes_acked - a.bytes_acked) as f64 * 8.0 / (b.t_s - a.t_s))
            }
            _ => None,
        };
        results.push(FlowResult {
            path: p,
            throughput_bps: t,
        });
    }
    let rep = rep?;
    flow_bytes += rep.flow_bytes;
    // Link k of the Tneck run is edge k of the map's path, if the run saw the same hop there.
    let path = &g.paths[step.locate];
    let o = &obs[step.locate];
    let bottleneck = rep.verdict.and_then(|v| {
        let k = v.link as usize;
        let same = o.hops.get(k - 1).copied().flatten() == rep.link_to;
        path.edges.get(k - 1).copied().filter(|_| same)
    });
    let note = match (&rep.verdict, &rep.why_not) {
        (Some(v), _) if bottleneck.is_some() => format!(
            "link {}, {} samples, confidence {:.2}",
            v.link, v.samples, v.confidence
        ),
        (Some(v), _) => format!(
            "link {} ({:?}) is not where the map's trace put it: the path changed",
            v.link, rep.link_to
        ),
        (None, Some(w)) => w.clone(),
        (None, None) => "no verdict".into(),
    };
    results.insert(
        0,
        FlowResult {
            path: step.locate,
            throughput_bps: rep.bound_bps,
        },
    );
    Ok((
        StepResult {
            flows: results,
            bottleneck,
            note,
        },
        rep.probe_bytes,
        flow_bytes,
    ))
}

impl MapReport {
    /// The map for people: one line per edge, then the counts.
    pub fn table(&self) -> String {
        let g = &self.graph;
        let mut s = format!(
            "map: {} agents, {} routers, {} edges, {} of {} paths usable\n",
            g.nodes
                .iter()
                .filter(|n| n.kind == crate::graph::NodeKind::Agent)
                .count(),
            g.nodes
                .iter()
                .filter(|n| n.kind == crate::graph::NodeKind::Router)
                .count(),
            g.edges.len(),
            g.usable_paths().len(),
            g.paths.len()
        );
        s.push_str("edge                                         bound  Mbit/s  paths\n");
        for e in &g.edges {
            s.push_str(&format!(
                "{:<44} {:>5} {:>7.2} {:>6}\n",
                g.edge_label(e.id),
                e.bound.symbol(),
                e.value_bps / 1e6,
                e.paths.len()
            ));
        }
        for p in g.paths.iter().filter(|p| p.problem.is_some()) {
            s.push_str(&format!(
                "path {} → {}: {}\n",
                p.src,
                p.dst,
                p.problem.as_deref().unwrap_or("")
            ));
        }
        let st = &self.stats;
        s.push_str(&format!(
            "{} flows in {} steps (at most {} together); the naive scheme: {} flows in {} steps (at most {})\n",
            st.flows, st.steps, st.max_parallel, st.naive_flows, st.naive_steps, st.naive_max_parallel
        ));
        s.push_str(&format!(
            "{:.1} MB of TCP flows and {:.1} kB of probes in {:.0} s\n",
            self.flow_bytes as f64 / 1e6,
            self.probe_bytes as f64 / 1e3,
            self.seconds
        ));
        if let Some(u) = &self.unfinished {
            s.push_str(&format!("unfinished: {u}\n"));
        }
        let exact = g
            .edges
            .iter()
            .filter(|e| e.bound == BoundKind::Exact)
            .count();
        s.push_str(&format!("{exact} bottleneck edge(s) (\"=\")\n"));
        s
    }
}

/// Sessions from this host (a `None` source: `mgrp map`, the service) and from other agents:
/// an agent source runs them for this host as a relay ([`RelaySession`]), so one coordinator
/// maps the paths between any of the agents that share its key.
pub struct AgentsConnector {
    pub key: Key,
    pub pacer: Arc<Pacer>,
    /// Source index → the agent that sends (None: this host).
    pub sources: Vec<Option<SocketAddr>>,
}

/// Longest one relayed session lives: a Tneck run's flow plus its idle traceroutes.
const RELAY_LIFE: Duration = Duration::from_secs(180);

impl Connector for AgentsConnector {
    fn connect(&self, src: usize, dst: SocketAddr) -> Result<Box<dyn Hands>, Error> {
        let timeout = Duration::from_secs(3);
        match self.sources.get(src) {
            Some(None) => Ok(Box::new(Session::connect(
                dst,
                &self.key,
                self.pacer.clone(),
                timeout,
            )?)),
            Some(Some(via)) => Ok(Box::new(RelaySession::open(
                *via,
                dst,
                &self.key,
                self.pacer.clone(),
                timeout,
                RELAY_LIFE,
            )?)),
            None => Err(Error::Map(format!("no source {src}"))),
        }
    }
    fn source_ip(&self, src: usize) -> Option<IpAddr> {
        self.sources.get(src).copied().flatten().map(|a| a.ip())
    }
}

/// Every ordered pair among `agents`, plus this host (source 0) to each: the pairs of a
/// pairwise map, and the sources of an [`AgentsConnector`] for them.
pub fn pairwise(agents: &[SocketAddr]) -> (Vec<(usize, SocketAddr)>, Vec<Option<SocketAddr>>) {
    let mut sources = vec![None];
    sources.extend(agents.iter().copied().map(Some));
    let mut pairs: Vec<(usize, SocketAddr)> = agents.iter().map(|a| (0, *a)).collect();
    for (i, a) in agents.iter().enumerate() {
        for b in agents {
            if a != b {
                pairs.push((i + 1, *b));
            }
        }
    }
    (pairs, sources)
}
