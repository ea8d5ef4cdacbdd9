//! The I/O under [`crate::trace`]: send its trains over a session and fold the results.

use crate::bfind::{BFind, BFindConfig};
use crate::tneck::{Sample, Tneck, TneckConfig, Verdict};
use crate::trace::{parallel_train, Round, TraceConfig, TraceReport, Tracer};
use crate::Error;
use mgrp_engine::client::Session;
use mgrp_engine::load::LoadSample;
use mgrp_engine::relay::{RelayLoad, RelaySession};
use mgrp_train::{TrainResult, TrainSpec};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// What sends a path's trains: a session from this host, or one that another agent runs for
/// this host ([`RelaySession`]: how a coordinator maps paths between other agents).
pub trait Prober {
    fn send_train(&mut self, spec: &TrainSpec) -> Result<TrainResult, Error>;
    /// The agent the trains go to.
    fn peer(&self) -> SocketAddr;
    /// The sending host's address toward the peer.
    fn local(&self) -> Option<SocketAddr>;
    fn control_rtt(&self) -> Option<(Duration, Duration)>;
}

/// A prober that can become the path's TCP load flow (Tneck's flow).
pub trait Hands: Prober + Send {
    fn start_load(
        self: Box<Self>,
        max: Duration,
        budget: u64,
        cc: Option<&str>,
    ) -> Result<Box<dyn Load>, Error>;
}

/// A session kind that sends trains and can become a load: the same forwarding for both.
macro_rules! hands_for {
    ($t:ty) => {
        impl Prober for $t {
            fn send_train(&mut self, spec: &TrainSpec) -> Result<TrainResult, Error> {
                Ok(<$t>::send_train(self, spec)?)
            }
            fn peer(&self) -> SocketAddr {
                <$t>::peer(self)
            }
            fn local(&self) -> Option<SocketAddr> {
                <$t>::local(self)
            }
            fn control_rtt(&self) -> Option<(Duration, Duration)> {
                <$t>::control_rtt(self)
            }
        }

        impl Hands for $t {
            fn start_load(
                self: Box<Self>,
                max: Duration,
                budget: u64,
                cc: Option<&str>,
            ) -> Result<Box<dyn Load>, Error> {
                Ok(Box::new(self.into_load(max, budget, cc)?))
            }
        }

        impl From<$t> for Box<dyn Hands> {
            fn from(s: $t) -> Self {
                Box::new(s)
            }
        }
    };
}

hands_for!(Session);
hands_for!(RelaySession);

impl Load for RelayLoad {
    fn sample(&mut self) -> Result<LoadSample, Error> {
        Ok(RelayLoad::sample(self)?)
    }
    fn finished(&self) -> bool {
        RelayLoad::finished(self)
    }
    fn stop(self: Box<Self>) -> mgrp_engine::load::LoadReport {
        RelayLoad::stop(*self)
    }
}

/// Trace the path to the session's peer agent: `cfg.runs` parallel rounds, the minimum per
/// hop as base. `stop()` ends it early (the report covers the rounds done). Each round waits
/// for silent routers at most the engine's hop wait (1 s after its last probe).
pub fn trace(
    session: &mut dyn Prober,
    cfg: &TraceConfig,
    mut stop: impl FnMut() -> bool,
) -> Result<TraceReport, Error> {
    let mut t = Tracer::new(*cfg)?;
    while let Some(spec) = t.poll_train() {
        if stop() {
            break;
        }
        let r = session.send_train(&spec)?;
        t.handle_train(&spec, &r);
    }
    let mut rep = t.report(&session.peer().to_string());
    rep.control_rtt_ns = session.control_rtt().map(|(rtt, _)| rtt.as_nanos() as u64);
    Ok(rep)
}

/// The parallel traceroute Tneck samples: `rounds` rounds of TTL 1..=`hops` (one train each,
/// probes `gap_ns` apart), one every `every` at most, each handed to `on_round` as it comes
/// (return `false` to stop). The delay vector of a round is [`Round::delays`].
///
/// A round lasts at least the agent's wait for missing probes (TTL-limited probes never reach
/// it): 300 ms on agents before calib6, so rounds came about three a second; now 20 ms or more
/// (300 ms for a session's first round, which has no earlier delay to judge the queue by).
pub fn parallel_traceroute(
    session: &mut dyn Prober,
    hops: u8,
    size: u16,
    gap_ns: u64,
    rounds: u32,
    every: Duration,
    mut on_round: impl FnMut(&Round) -> bool,
) -> Result<Vec<Round>, Error> {
    let spec = parallel_train(hops, size, gap_ns)?;
    let mut out = Vec::new();
    let mut next = Instant::now();
    for _ in 0..rounds {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next = Instant::now() + every;
        let r = session.send_train(&spec)?;
        let round = Round::of(&spec, &r);
        let go_on = on_round(&round);
        out.push(round);
        if !go_on {
            break;
        }
    }
    Ok(out)
}

/// Longest a locator waits for its TCP flow to leave slow start before it samples anyway.
const SLOW_START_WAIT: Duration = Duration::from_secs(2);

/// What [`bottleneck`] is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BottleneckConfig {
    pub tneck: TneckConfig,
    /// Highest TTL of the idle traceroutes that find the path.
    pub max_hops: u8,
    /// Longest the TCP flow may run.
    pub max_load: Duration,
    /// Most bytes the TCP flow may send (the byte budget).
    pub budget_bytes: u64,
    /// After the verdict, the flow keeps running this long so its throughput (the bound) is
    /// measured over more than the few RTTs of the confirming samples.
    pub measure: Duration,
    /// Congestion control of the TCP flow (the kernel default if `None`).
    pub cc: Option<String>,
    /// Probe size of the traceroutes.
    pub size: u16,
}

impl Default for BottleneckConfig {
    fn default() -> Self {
        BottleneckConfig {
            tneck: TneckConfig::default(),
            max_hops: 30,
            max_load: Duration::from_secs(15),
            budget_bytes: 50_000_000,
            measure: Duration::from_secs(2),
            cc: None,
            size: 64,
        }
    }
}

/// One hop of the path, as the idle traceroutes found it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathHop {
    pub ttl: u8,
    pub addr: Option<IpAddr>,
    /// Base delay (minimum over the idle rounds): RTT for a router, one-way for the agent.
    pub base_ns: Option<i64>,
}

/// What `mgrp bottleneck` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BottleneckReport {
    pub peer: String,
    pub path: Vec<PathHop>,
    pub verdict: Option<Verdict>,
    /// The bottleneck link's ends: its near hop's address (`None` for the sender itself) and
    /// its far hop's.
    pub link_from: Option<IpAddr>,
    pub link_to: Option<IpAddr>,
    /// The TCP flow's throughput from the verdict to the end (`measure` later), past its slow
    /// start: the link's TCP-available bandwidth ("=B").
    pub bound_bps: Option<f64>,
    pub samples: Vec<Sample>,
    /// Bytes of the traceroute probes (idle and loaded) and of the TCP flow.
    pub probe_bytes: u64,
    pub flow_bytes: u64,
    pub flow_retrans: u32,
    /// Seconds from the flow's start to the verdict.
    pub seconds_to_verdict: Option<f64>,
    /// How hard the load pushed when the verdict came, bit/s (the kernel's delivery rate of
    /// the TCP flow; a ramp's current rate).
    pub load_bps_at_verdict: Option<f64>,
    /// Why there is no verdict, when there is none.
    pub why_not: Option<String>,
}

/// The load a bottleneck locator drives while it traceroutes: Tneck's TCP flow
/// ([`mgrp_engine::load::LoadFlow`]) or, as a baseline, a BFind-style rising UDP ramp.
pub trait Load {
    /// The load's state now; `srtt_us` paces the samples (one per RTT).
    fn sample(&mut self) -> Result<LoadSample, Error>;
    /// The load ended by itself (time or budget spent, peer gone).
    fn finished(&self) -> bool;
    /// End it: bytes delivered, retransmits, and whether it failed.
    fn stop(self: Box<Self>) -> mgrp_engine::load::LoadReport;
}

impl Load for mgrp_engine::load::LoadFlow {
    fn sample(&mut self) -> Result<LoadSample, Error> {
        Ok(mgrp_engine::load::LoadFlow::sample(self)?)
    }
    fn finished(&self) -> bool {
        mgrp_engine::load::LoadFlow::finished(self)
    }
    fn stop(self: Box<Self>) -> mgrp_engine::load::LoadReport {
        mgrp_engine::load::LoadFlow::stop(*self)
    }
}

/// Tneck between this host and the session's peer agent: idle traceroutes for the base over
/// `trace`, then a TCP flow over `load` (a second session, which becomes the flow) with one
/// parallel traceroute per RTT until a link is confirmed, the flow's time or byte budget is
/// spent, or `stop()`. `on_sample` sees each loaded sample as it comes.
pub fn bottleneck(
    trace: &mut dyn Prober,
    load: impl Into<Box<dyn Hands>>,
    cfg: &BottleneckConfig,
    stop: impl FnMut() -> bool,
    on_sample: impl FnMut(&Sample),
) -> Result<BottleneckReport, Error> {
    let (max, budget, cc) = (cfg.max_load, cfg.budget_bytes, cfg.cc.clone());
    let load: Box<dyn Hands> = load.into();
    locate(
        trace,
        move || -> Result<Box<dyn Load>, Error> { load.start_load(max, budget, cc.as_deref()) },
        cfg,
        stop,
        on_sample,
    )
}

/// Which rule turns loaded samples into a verdict.
#[derive(Debug, Clone)]
pub enum Detector {
    /// The link with the largest delay rise, confirmed over consecutive samples (Tneck).
    Tneck,
    /// The link whose delay grows with a rising load, step after step (BFind).
    BFind(BFindConfig),
}

/// [`bottleneck`] with any [`Load`], started by `start_load` once the idle rounds are done.
pub fn locate(
    trace: &mut dyn Prober,
    start_load: impl FnOnce() -> Result<Box<dyn Load>, Error>,
    cfg: &BottleneckConfig,
    stop: impl FnMut() -> bool,
    on_sample: impl FnMut(&Sample),
) -> Result<BottleneckReport, Error> {
    locate_with(trace, start_load, cfg, Detector::Tneck, stop, on_sample)
}

/// [`locate`] with the detector chosen.
pub fn locate_with(
    trace: &mut dyn Prober,
    start_load: impl FnOnce() -> Result<Box<dyn Load>, Error>,
    cfg: &BottleneckConfig,
    detector: Detector,
    mut stop: impl FnMut() -> bool,
    mut on_sample: impl FnMut(&Sample),
) -> Result<BottleneckReport, Error> {
    let mut tn = Tneck::new(cfg.tneck)?;
    let mut bf = match detector {
        Detector::Tneck => None,
        Detector::BFind(c) => Some(BFind::new(c, cfg.tneck)?),
    };
    let mut probe_bytes = 0u64;
    let mut tracer = Tracer::new(TraceConfig {
        max_hops: cfg.max_hops,
        runs: cfg.tneck.base_rounds,
        size: cfg.size,
        gap_ns: 20_000,
    })?;
    while let Some(spec) = tracer.poll_train() {
        if stop() {
            break;
        }
        let r = trace.send_train(&spec)?;
        tracer.handle_train(&spec, &r);
        probe_bytes += spec.bytes();
    }
    for r in tracer.rounds() {
        tn.handle_base(r);
        if let Some(b) = bf.as_mut() {
            b.base_detector().handle_base(r);
        }
    }
    let peer = trace.peer().to_string();
    let rep = tracer.report(&peer);
    let path: Vec<PathHop> = rep
        .hops
        .iter()
        .map(|h| PathHop {
            ttl: h.ttl,
            addr: h.addrs.first().copied(),
            base_ns: tn.base().get(h.ttl as usize - 1).copied().flatten(),
        })
        .collect();
    let mut report = BottleneckReport {
        peer,
        path,
        verdict: None,
        link_from: None,
        link_to: None,
        bound_bps: None,
        samples: Vec::new(),
        probe_bytes,
        flow_bytes: 0,
        flow_retrans: 0,
        seconds_to_verdict: None,
        load_bps_at_verdict: None,
        why_not: None,
    };
    let end = match tracer.rounds().iter().filter_map(Round::end).min() {
        Some(e) if rep.reached && tn.base_ready() => e,
        _ => {
            report.why_not = Some(format!(
                "the idle traceroutes did not reach the agent within {} hops (or no hop answered)",
                cfg.max_hops
            ));
            return Ok(report);
        }
    };
    let mut spec = crate::trace::parallel_train(end, cfg.size, 20_000)?;
    spec.reach_ttl = Some(end);
    let mut flow = start_load()?;
    let mut at_verdict: Option<LoadSample> = None;
    let mut verdict_at: Option<Instant> = None;
    let started = Instant::now();
    while !stop() && !flow.finished() {
        if verdict_at.is_some_and(|t| t.elapsed() >= cfg.measure) {
            break;
        }
        let round_start = Instant::now();
        let s = flow.sample()?;
        // While the flow is in slow start it overshoots at the first link it outgrows, not at
        // the one it will share; sampling waits for its first congestion event (at most
        // `SLOW_START_WAIT`, for a flow that never has one).
        let ramping = s.slow_start && started.elapsed() < SLOW_START_WAIT;
        if verdict_at.is_none() && !ramping {
            let r = trace.send_train(&spec)?;
            probe_bytes += spec.bytes();
            let round = Round::of(&spec, &r);
            let (v, last) = match bf.as_mut() {
                Some(b) => (
                    b.handle_sample(&round, s.delivery_rate_bps as u64)?,
                    b.samples().last(),
                ),
                None => (tn.handle_sample(&round)?, tn.samples().last()),
            };
            on_sample(last.expect("a sample was just taken"));
            if v.is_some() {
                at_verdict = flow.sample().ok();
                verdict_at = Some(Instant::now());
                report.seconds_to_verdict = Some(started.elapsed().as_secs_f64());
            }
        }
        // One sample per RTT of the flow (its srtt grows with the queue it builds).
        let rtt = Duration::from_micros(s.srtt_us.max(1_000) as u64);
        let wait = rtt.saturating_sub(round_start.elapsed());
        std::thread::sleep(wait.min(Duration::from_millis(200)));
    }
    let last = flow.sample().ok();
    let done = flow.stop();
    report.flow_bytes = done.bytes_acked;
    report.flow_retrans = done.retrans;
    report.probe_bytes = probe_bytes;
    (report.samples, report.verdict) = match &bf {
        Some(b) => (b.samples().to_vec(), b.verdict()),
        None => (tn.samples().to_vec(), tn.verdict()),
    };
    report.load_bps_at_verdict = at_verdict.map(|s| s.delivery_rate_bps);
    if let (Some(a), Some(b)) = (at_verdict, last) {
        if b.t_s > a.t_s + 0.1 {
            report.bound_bps = Some((b.bytes_acked - a.bytes_acked) as f64 * 8.0 / (b.t_s - a.t_s));
        }
    }
    match report.verdict {
        Some(v) => {
            let hop = |ttl: u8| report.path.get(ttl as usize - 1).and_then(|h| h.addr);
            report.link_from = if v.link > 1 { hop(v.link - 1) } else { None };
            report.link_to = hop(v.link);
        }
        None => {
            report.why_not = Some(if done.failed {
                "the TCP flow to the agent failed".into()
            } else {
                format!(
                    "no link was confirmed in {} samples ({} of them saw a rise of at least {:.1} ms)",
                    report.samples.len(),
                    report
                        .samples
                        .iter()
                        .filter(|s| s.rises_ns.iter().flatten().any(|r| *r >= cfg.tneck.min_rise_ns as i64))
                        .count(),
                    cfg.tneck.min_rise_ns as f64 / 1e6
                )
            })
        }
    }
    Ok(report)
}

/// What the pathneck-style locator reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathneckReport {
    pub peer: String,
    pub path: Vec<PathHop>,
    pub verdict: Option<crate::PathneckVerdict>,
    /// The verdict the first 4 trains alone would have given (Tneck's confirmation count).
    pub verdict_at_4: Option<crate::PathneckVerdict>,
    pub link_from: Option<IpAddr>,
    pub link_to: Option<IpAddr>,
    pub trains: Vec<crate::pathneck::TrainAnalysis>,
    pub link_rates: Vec<crate::pathneck::LinkRate>,
    /// Bytes of the TTL-limited probes (idle traceroutes and the trains' head and tail) and of
    /// the trains' load.
    pub probe_bytes: u64,
    pub load_bytes: u64,
    /// Seconds from the first train to the verdict.
    pub seconds_to_verdict: Option<f64>,
    pub why_not: Option<String>,
}

/// The pathneck-style locator to `peer`, sending every train with `send` (the Probe API,
/// [`mgrp_engine::loss::via_api`], or a session): `idle_rounds` parallel traceroutes find the
/// path's length, then `cfg.trains` recursive packet trains go out `every` apart.
pub fn pathneck(
    mut send: impl FnMut(&TrainSpec) -> Result<TrainResult, mgrp_engine::Error>,
    peer: &str,
    cfg: &crate::PathneckConfig,
    idle_rounds: u32,
    every: Duration,
    mut stop: impl FnMut() -> bool,
    mut on_train: impl FnMut(&crate::pathneck::TrainAnalysis),
) -> Result<PathneckReport, Error> {
    cfg.validate()?;
    let mut tracer = Tracer::new(TraceConfig {
        max_hops: 30,
        runs: idle_rounds,
        size: cfg.meas_size,
        gap_ns: 20_000,
    })?;
    let mut probe_bytes = 0u64;
    while let Some(spec) = tracer.poll_train() {
        if stop() {
            break;
        }
        let r = send(&spec)?;
        tracer.handle_train(&spec, &r);
        probe_bytes += spec.bytes();
    }
    let rep = tracer.report(peer);
    let path: Vec<PathHop> = rep
        .hops
        .iter()
        .map(|h| PathHop {
            ttl: h.ttl,
            addr: h.addrs.first().copied(),
            base_ns: h.min_ns,
        })
        .collect();
    let mut report = PathneckReport {
        peer: peer.to_string(),
        path,
        verdict: None,
        verdict_at_4: None,
        link_from: None,
        link_to: None,
        trains: Vec::new(),
        link_rates: Vec::new(),
        probe_bytes,
        load_bytes: 0,
        seconds_to_verdict: None,
        why_not: None,
    };
    let end = match tracer.rounds().iter().filter_map(Round::end).min() {
        Some(e) if rep.reached => e,
        _ => {
            report.why_not = Some("the idle traceroutes did not reach the agent".into());
            return Ok(report);
        }
    };
    let mut pn = crate::Pathneck::new(*cfg, end)?;
    let (meas, load) = crate::pathneck::train_bytes(end, cfg);
    let started = Instant::now();
    let mut next = started;
    while let Some(spec) = pn.poll_train() {
        if stop() {
            break;
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next = Instant::now() + every;
        let r = send(&spec)?;
        probe_bytes += meas;
        report.load_bytes += load;
        on_train(pn.handle_train(&r)?);
    }
    report.probe_bytes = probe_bytes;
    report.verdict = pn.verdict();
    report.verdict_at_4 = pn.verdict_after(4);
    report.link_rates = pn.link_rates(pn.trains().len());
    report.trains = pn.trains().to_vec();
    match report.verdict {
        Some(v) => {
            report.seconds_to_verdict = Some(started.elapsed().as_secs_f64());
            let hop = |ttl: u8| report.path.get(ttl as usize - 1).and_then(|h| h.addr);
            report.link_from = if v.link > 1 { hop(v.link - 1) } else { None };
            report.link_to = hop(v.link);
        }
        None => {
            report.why_not = Some(format!(
                "no link choked (conf ≥ {}) in at least {:.0}% of {} valid trains of {}",
                cfg.conf_min,
                cfg.d_rate_min * 100.0,
                pn.trains().iter().filter(|t| t.valid).count(),
                pn.trains().len()
            ))
        }
    }
    Ok(report)
}

/// One verdict of a tracking run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TrackedVerdict {
    /// Seconds since the flow started.
    pub t_s: f64,
    pub verdict: Verdict,
}

/// What [`track`] saw.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrackReport {
    pub peer: String,
    pub path: Vec<PathHop>,
    /// Every verdict, in order (the detector is rearmed after each).
    pub verdicts: Vec<TrackedVerdict>,
    pub samples: u32,
    pub probe_bytes: u64,
    pub flow_bytes: u64,
    pub why_not: Option<String>,
}

/// Tneck kept running: like [`bottleneck`], but the TCP flow lasts `cfg.max_load` and after
/// each verdict the detector is rearmed ([`Tneck::rearm`]), so a bottleneck that moves is
/// confirmed again where it went. `on_flow_start` is called when the flow starts (after the
/// idle traceroutes); `on_verdict` sees each verdict as it comes.
pub fn track(
    trace: &mut dyn Prober,
    load: impl Into<Box<dyn Hands>>,
    cfg: &BottleneckConfig,
    mut stop: impl FnMut() -> bool,
    on_flow_start: impl FnOnce(),
    mut on_verdict: impl FnMut(&TrackedVerdict),
) -> Result<TrackReport, Error> {
    let mut tn = Tneck::new(cfg.tneck)?;
    let mut tracer = Tracer::new(TraceConfig {
        max_hops: cfg.max_hops,
        runs: cfg.tneck.base_rounds,
        size: cfg.size,
        gap_ns: 20_000,
    })?;
    let mut probe_bytes = 0u64;
    while let Some(spec) = tracer.poll_train() {
        let r = trace.send_train(&spec)?;
        tracer.handle_train(&spec, &r);
        probe_bytes += spec.bytes();
    }
    for r in tracer.rounds() {
        tn.handle_base(r);
    }
    let peer = trace.peer().to_string();
    let rep = tracer.report(&peer);
    let mut report = TrackReport {
        peer,
        path: rep
            .hops
            .iter()
            .map(|h| PathHop {
                ttl: h.ttl,
                addr: h.addrs.first().copied(),
                base_ns: tn.base().get(h.ttl as usize - 1).copied().flatten(),
            })
            .collect(),
        verdicts: Vec::new(),
        samples: 0,
        probe_bytes,
        flow_bytes: 0,
        why_not: None,
    };
    let end = match tracer.rounds().iter().filter_map(Round::end).min() {
        Some(e) if rep.reached && tn.base_ready() => e,
        _ => {
            report.why_not = Some("the idle traceroutes did not reach the agent".into());
            return Ok(report);
        }
    };
    let mut spec = crate::trace::parallel_train(end, cfg.size, 20_000)?;
    spec.reach_ttl = Some(end);
    let load: Box<dyn Hands> = load.into();
    let mut flow = load.start_load(cfg.max_load, cfg.budget_bytes, cfg.cc.as_deref())?;
    let started = Instant::now();
    on_flow_start();
    while !stop() && !flow.finished() {
        let round_start = Instant::now();
        let s = flow.sample()?;
        if !(s.slow_start && started.elapsed() < SLOW_START_WAIT) {
            let r = trace.send_train(&spec)?;
            probe_bytes += spec.bytes();
            if let Some(v) = tn.handle_sample(&Round::of(&spec, &r))? {
                let tv = TrackedVerdict {
                    t_s: started.elapsed().as_secs_f64(),
                    verdict: v,
                };
                on_verdict(&tv);
                report.verdicts.push(tv);
                tn.rearm();
            }
        }
        let rtt = Duration::from_micros(s.srtt_us.max(1_000) as u64);
        let wait = rtt.saturating_sub(round_start.elapsed());
        std::thread::sleep(wait.min(Duration::from_millis(200)));
    }
    let done = flow.stop();
    report.samples = tn.samples().len() as u32;
    report.flow_bytes = done.bytes_acked;
    report.probe_bytes = probe_bytes;
    if report.verdicts.is_empty() {
        report.why_not = Some(if done.failed {
            "the TCP flow to the agent failed".into()
        } else {
            format!("no link was confirmed in {} samples", report.samples)
        });
    }
    Ok(report)
}
