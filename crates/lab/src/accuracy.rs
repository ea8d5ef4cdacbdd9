//! `mgrp bench accuracy`: every method against the bottleneck's ground truth over a grid.

use crate::rig::Worker;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::client::Session;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::methods::Method;
use mgrp_estimate::{Estimate, Estimator};
use mgrp_testbed::capacity::SHORTFALL_WARN;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::{CrossPattern, DelayMode, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The grid.
#[derive(Debug, Clone)]
pub struct AccuracyConfig {
    /// Bottleneck capacities, Mbit/s.
    pub capacities: Vec<f64>,
    /// Cross-traffic kinds: cbr, poisson, onoff (50 ms periods), onoff500, step, web (web-like
    /// TCP), tcp1, tcp4.
    pub kinds: Vec<String>,
    /// Cross load in % of capacity (UDP kinds; 0 = idle path, run once).
    pub loads: Vec<u32>,
    /// Methods that estimate available bandwidth.
    pub methods: Vec<Method>,
    pub reps: u32,
    /// Cross sources skip departures later than this (`GenOptions::max_late`); `None` sends
    /// them all.
    pub max_late: Option<Duration>,
    /// After each run, flood the bottleneck on top of the cross traffic for [`DRAIN_SECS`] and
    /// record what it drained (`Run::drain_mbit`): the link's capacity at that moment, under the
    /// host's load of the moment, where the truth's capacity is one flood at `up`.
    pub drain_after: bool,
    /// Run the UDP cross sources under `SCHED_FIFO` (`GenOptions::realtime`).
    pub realtime_cross: bool,
    /// How long the UDP cross sources spin before each departure (`GenOptions::spin`).
    pub cross_spin: Duration,
    /// Keep every run's trains in its JSON (`Run::trains`): when a run takes 40 s, where the
    /// time went.
    pub trace: bool,
}

/// How long the flood after each run lasts (its middle half is read).
pub const DRAIN_SECS: f64 = 1.0;
/// The flood's port (the cross traffic's are `BASE_PORT` and up).
const DRAIN_PORT: u16 = 5290;

/// One estimator run, timed on CLOCK_MONOTONIC.
struct Outcome {
    estimate: Option<Estimate>,
    /// Start of the run (capacity step included), start of the method, first estimate, end.
    start_ns: u64,
    method_start_ns: u64,
    first_ns: Option<u64>,
    end_ns: u64,
    bytes: u64,
    trains: Vec<TrainLine>,
}

/// One train of a run, as the driver saw it (`--trace`).
#[derive(Serialize, Clone, Debug)]
pub struct TrainLine {
    /// Since the run's start: when the train's report was in, ms.
    pub at_ms: f64,
    /// Sending it and waiting for its report, ms.
    pub took_ms: f64,
    pub probes: usize,
    pub rate_mbit: f64,
    pub lost: usize,
    pub flagged: bool,
    pub stolen: bool,
    /// Arrival pairs closer than the bottleneck delivers them (stamps batched after it).
    pub compressed: usize,
    /// The estimate after it: value, low, high (Mbit/s), and whether final.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<[f64; 3]>,
}

#[derive(Serialize, Clone)]
pub struct Run {
    pub capacity_mbit: f64,
    pub kind: String,
    pub load_pct: Option<u32>,
    pub method: String,
    pub rep: u32,
    pub estimate_mbit: Option<f64>,
    pub low_mbit: Option<f64>,
    pub high_mbit: Option<f64>,
    pub truth_mbit: f64,
    /// |estimate − truth| / max(truth, 5% of C).
    pub rel_error: Option<f64>,
    pub first_s: Option<f64>,
    pub final_s: f64,
    pub probe_bytes: u64,
    pub converged: bool,
    /// The estimate's stated confidence (0..1), and whether its [low, high] held the truth.
    pub confidence: Option<f64>,
    pub covered: Option<bool>,
    /// The time scale the estimate says it holds over, the truth over that window before its
    /// end (at least 500 ms: the sampler's 50 ms samples), and whether the range held that.
    pub timescale_ms: Option<f64>,
    pub truth_scale_mbit: Option<f64>,
    pub covered_scale: Option<bool>,
    /// |estimate − truth at the stated scale| / max(that truth, 5% of C): issue 20 judges on/off
    /// and STEP there (a STEP that turned during the run has the last level at a short scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_error_scale: Option<f64>,
    /// The host's 1-minute load average when the run ended (other work on a shared machine).
    pub load_avg: Option<f64>,
    /// The share of the run's time the hypervisor took from the CPU it took most from
    /// (`/proc/stat` steal): while a vCPU is held off the shaper drains less and stamps come in
    /// batches, and the runs of a cell read worse (docs/results/r22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_steal: Option<f64>,
    /// Which phase gave the final estimate (`auto:slops`, `auto:timeavg`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_method: Option<String>,
    /// The capacity the testbed measured just before the run's cell (the truth's C), Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_measured_mbit: Option<f64>,
    /// What the bottleneck drained in a flood on top of the cross traffic right after the run
    /// (`AccuracyConfig::drain_after`), Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_mbit: Option<f64>,
    /// The truth with that capacity: drain − the cross traffic delivered during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth_drain_mbit: Option<f64>,
    /// Elastic cross traffic (TCP, web): A over the [`UNPROBED_WINDOW`] before the run, after
    /// [`UNPROBED_WAIT`] with no probes on the path. A window-limited flow yields to probes
    /// (its rate is cwnd / RTT, and probes add to the RTT), so A over the run itself rises
    /// with what the method sends; this is C − X as the path has it without the method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth_unprobed_mbit: Option<f64>,
    /// |estimate − truth_unprobed| / max(truth_unprobed, 5% of C), and whether the range held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_error_unprobed: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_unprobed: Option<bool>,
    /// Elastic cross traffic: segments its TCP flows retransmitted during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_retransmits: Option<u64>,
    /// Every train of the run (`--trace` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trains: Vec<TrainLine>,
}

/// Elastic kinds wait this long with no probes before each run ...
pub const UNPROBED_WAIT: Duration = Duration::from_millis(1000);
/// ... and the truth without probes is A over the last this much of the wait (the half before
/// it, many RTTs, lets the flows take back what the last run's probes held).
pub const UNPROBED_WINDOW: Duration = Duration::from_millis(500);

/// Cross traffic that yields to probes: TCP flows, bulk or web-like.
pub fn elastic(kind: &str) -> bool {
    kind.starts_with("tcp") || kind == "web"
}

/// The host's 1-minute load average now.
pub fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(crate) fn pattern(kind: &str, load: u32, c: f64) -> Result<Option<CrossPattern>> {
    let r = c * load as f64 / 100.0;
    let mb = |x: f64| format!("{:.3}mbit", x / 1e6);
    let spec = match kind {
        _ if load == 0 && !kind.starts_with("tcp") => return Ok(None),
        "cbr" => format!("cbr:{}", mb(r)),
        "poisson" => format!("poisson:{}", mb(r)),
        "onoff" => format!("onoff:{},on=50ms,off=50ms", mb(r)),
        "onoff500" => format!("onoff:{},on=500ms,off=500ms", mb(r)),
        // Mean `r`, stepping ±50% every second.
        "step" => format!("step:{},{},{},every=1s", mb(r), mb(1.5 * r), mb(0.5 * r)),
        // TCP flows of heavy-tailed sizes (Pareto, mean 12 kB) arriving to offer `r`: slow
        // starts, not long-lived windows (`CrossPattern::Web`).
        "web" => format!("web:{}", mb(r)),
        "tcp1" => "tcp:1".into(),
        "tcp4" => "tcp:4".into(),
        other => {
            return Err(Error::Config(format!(
                "unknown kind {other:?}: use cbr, poisson, onoff, onoff500, step, web, tcp1, tcp4"
            )))
        }
    };
    Ok(Some(
        CrossPattern::parse(&spec).map_err(|e| Error::Config(e.to_string()))?,
    ))
}

/// One method run over the session, as `mgrp estimate` runs it: methods that need the
/// capacity measure it first; `auto` measures its own and is timed from its start.
fn run_method(method: Method, s: &mut Session) -> Result<Outcome, String> {
    let start_ns = mgrp_clock::now_ns();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut est = method.build(None).map_err(|e| e.to_string())?;
    let (mut first_ns, mut bytes, mut trains) = (None, 0, Vec::new());
    let out = run_estimator(
        s,
        &mut est,
        deadline,
        || false,
        |p| {
            bytes = p.probe_bytes;
            if p.estimate.is_some() && first_ns.is_none() {
                first_ns = Some(mgrp_clock::now_ns());
            }
            // Bounded by the run's 40 s and one train per report.
            trains.push(TrainLine {
                at_ms: p.elapsed.as_secs_f64() * 1e3,
                took_ms: p.train_time.as_secs_f64() * 1e3,
                probes: p.probes,
                rate_mbit: p.rate_bps / 1e6,
                lost: p.lost,
                flagged: p.flagged,
                stolen: p.stolen,
                compressed: p.compressed,
                estimate: p
                    .estimate
                    .as_ref()
                    .map(|e| [e.value_bps / 1e6, e.low_bps / 1e6, e.high_bps / 1e6]),
            });
        },
    )
    .map_err(|e| e.to_string())?;
    if method.needs_capacity() && est.capacity().is_none() {
        return Err("no capacity estimate".into());
    }
    Ok(Outcome {
        estimate: out,
        start_ns,
        method_start_ns: est.method_start_ns().unwrap_or(start_ns),
        first_ns,
        end_ns: mgrp_clock::now_ns(),
        bytes,
        trains,
    })
}

impl AccuracyConfig {
    pub fn check(&self) -> Result<()> {
        if self.methods.contains(&Method::Capacity) {
            return Err(Error::Config(
                "bench accuracy scores available bandwidth: leave `capacity` out of --methods"
                    .into(),
            ));
        }
        ensure(self.reps >= 1 && self.reps <= 50, "--reps must be 1..=50")?;
        ensure(
            self.capacities.iter().all(|c| (1.0..=1000.0).contains(c)),
            "capacities must be 1..=1000 Mbit/s",
        )?;
        ensure(
            self.loads.iter().all(|l| *l < 100),
            "loads must be below 100%",
        )?;
        // An unknown kind fails here, not after the testbed came up and earlier cells ran.
        for kind in &self.kinds {
            pattern(kind, 50, 20e6)?;
        }
        Ok(())
    }
}

/// Floods a cell may take to read its capacity.
const CELL_READINGS: usize = 3;

/// A cell's capacity: a flood just before it; while that reading is more than
/// [`SHORTFALL_WARN`] from `up`'s, another (at most [`CELL_READINGS`]), keeping the highest.
/// Why the highest: every misreading seen was low (a flood read 17.4 and 17.8 on a 20 Mbit/s
/// link that drained 19.9 in the floods before and after: a sender or a shaper held off for a
/// moment), and a flood cannot drain a link faster than it goes. Returns the readings too.
fn cell_capacity(tb: &Testbed) -> Result<(mgrp_testbed::LinkCapacity, Vec<f64>)> {
    let up = tb.capacity().bps();
    let mut best = tb.measure_capacity()?;
    let mut readings = vec![best.bps()];
    while (best.bps() - up).abs() > SHORTFALL_WARN * up && readings.len() < CELL_READINGS {
        let next = tb.measure_capacity()?;
        readings.push(next.bps());
        if next.bps() > best.bps() {
            best = next;
        }
    }
    Ok((best, readings))
}

/// The grid's testbed: the default one at capacity `c` (bit/s).
pub(crate) fn testbed(c: f64) -> Result<Testbed> {
    Ok(Testbed::up(
        TestbedConfig {
            capacity_bps: c as u64,
            ..Default::default()
        },
        DelayMode::Thread,
    )?)
}

/// Run the grid: one testbed per capacity, each cell's cross traffic, every method `reps` times.
pub fn run(cfg: &AccuracyConfig, hooks: Hooks) -> Result<Vec<Run>> {
    cfg.check()?;
    let mut runs: Vec<Run> = Vec::new();
    for &cap in &cfg.capacities {
        let c = cap * 1e6;
        let tb = testbed(c)?;
        let worker = Worker::start(&tb, "bench-estimator", run_method)?;
        // Cells: the idle path once, UDP kinds at each non-zero load, TCP once.
        let mut cells: Vec<(String, Option<u32>)> = Vec::new();
        if cfg.loads.contains(&0) {
            cells.push(("idle".into(), Some(0)));
        }
        for kind in &cfg.kinds {
            if kind.starts_with("tcp") {
                cells.push((kind.clone(), None));
            } else {
                cells.extend(
                    cfg.loads
                        .iter()
                        .filter(|l| **l > 0)
                        .map(|l| (kind.clone(), Some(*l))),
                );
            }
        }
        for (kind, load) in cells {
            let p = if kind == "idle" {
                None
            } else {
                pattern(&kind, load.unwrap_or(0), c)?
            };
            // The shaper's rate moves with the host (a flood at `up` read a 20 Mbit/s link at
            // 17.4 while the cells after it ran at ~20): each cell's truth subtracts from a
            // reading taken just before its cross traffic starts.
            let (cell_cap, readings) = cell_capacity(&tb)?;
            if readings.len() > 1 {
                hooks.say(&format!(
                    "\n{cap} Mbit/s {kind}: the link read {} Mbit/s, {:.2} at up; this cell's truth uses {:.2}\n",
                    readings
                        .iter()
                        .map(|r| format!("{:.2}", r / 1e6))
                        .collect::<Vec<_>>()
                        .join(", "),
                    tb.capacity().bps() / 1e6,
                    cell_cap.bps() / 1e6
                ));
            }
            let sampler = TruthSampler::start_with(&tb, Duration::from_millis(50), cell_cap)?;
            let opts = GenOptions {
                max_late: cfg.max_late,
                realtime: cfg.realtime_cross,
                spin: cfg.cross_spin,
                ..Default::default()
            };
            let gen = p
                .as_ref()
                .map(|p| CrossTraffic::start(&tb, p, BASE_PORT, &opts))
                .transpose()?;
            // TCP needs its slow start behind it; UDP a moment to fill the queue's steady state.
            std::thread::sleep(Duration::from_millis(if kind.starts_with("tcp") {
                2000
            } else {
                500
            }));
            for rep in 0..cfg.reps {
                for &method in &cfg.methods {
                    if hooks.stopped() {
                        return Err(Error::Interrupted);
                    }
                    hooks.say(&format!(
                        "\r{cap} Mbit/s {kind} {:>3}% {:<10} rep {}/{}      ",
                        load.unwrap_or(0),
                        method.name(),
                        rep + 1,
                        cfg.reps
                    ));
                    let quiet = elastic(&kind).then(|| {
                        std::thread::sleep(UNPROBED_WAIT);
                        let to = mgrp_clock::now_ns();
                        (to - UNPROBED_WINDOW.as_nanos() as u64, to)
                    });
                    let retransmits = || gen.as_ref().map_or(0, |g| g.tcp_retransmits());
                    let r0 = retransmits();
                    let steal = mgrp_clock::steal::StealSnapshot::take();
                    let o = worker
                        .ask(method, Duration::from_secs(60))?
                        .map_err(Error::Worker)?;
                    let host_steal = steal.and_then(|s| s.elapsed()).map(|s| s.max_share());
                    let cross_retransmits = quiet.map(|_| retransmits().saturating_sub(r0));
                    // The truth over the method's run, at least its last 500 ms (shorter windows
                    // would be interpolated between a couple of samples); wait for a sample past
                    // its end.
                    let from = o.method_start_ns.min(o.end_ns.saturating_sub(500_000_000));
                    let covered = Instant::now() + Duration::from_millis(500);
                    while sampler
                        .truth()
                        .samples
                        .last()
                        .is_none_or(|s| s.t_ns < o.end_ns)
                        && Instant::now() < covered
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let run_window = sampler.truth().window(from, o.end_ns);
                    let truth = run_window.as_ref().map_or(f64::NAN, |w| w.avail_bps);
                    let cross_bps = run_window.as_ref().map_or(f64::NAN, |w| w.cross_bps);
                    let e = o.estimate.as_ref();
                    let drain = if cfg.drain_after {
                        Some(drain_now(&tb, c)?)
                    } else {
                        None
                    };
                    let timescale_ms = e.and_then(|e| e.quality.timescale_ms);
                    let truth_scale = timescale_ms.and_then(|ms| {
                        let span = (ms.max(500.0) * 1e6) as u64;
                        sampler
                            .truth()
                            .window(o.end_ns.saturating_sub(span), o.end_ns)
                            .map(|w| w.avail_bps)
                            .filter(|t| t.is_finite())
                    });
                    let truth_unprobed = quiet.and_then(|(from, to)| {
                        sampler
                            .truth()
                            .window(from, to)
                            .map(|w| w.avail_bps)
                            .filter(|t| t.is_finite())
                    });
                    runs.push(Run {
                        capacity_mbit: cap,
                        kind: kind.clone(),
                        load_pct: load,
                        method: method.name().to_string(),
                        rep,
                        estimate_mbit: e.map(|e| e.value_bps / 1e6),
                        low_mbit: e.map(|e| e.low_bps / 1e6),
                        high_mbit: e.map(|e| e.high_bps / 1e6),
                        truth_mbit: truth / 1e6,
                        rel_error: e
                            .filter(|_| truth.is_finite())
                            .map(|e| (e.value_bps - truth).abs() / truth.max(0.05 * c)),
                        first_s: o.first_ns.map(|f| (f - o.start_ns) as f64 / 1e9),
                        final_s: (o.end_ns - o.start_ns) as f64 / 1e9,
                        probe_bytes: o.bytes,
                        converged: e.is_some_and(|e| e.final_),
                        confidence: e.map(|e| e.quality.confidence),
                        covered: e
                            .filter(|_| truth.is_finite())
                            .map(|e| e.low_bps <= truth && truth <= e.high_bps),
                        timescale_ms,
                        truth_scale_mbit: truth_scale.map(|t| t / 1e6),
                        covered_scale: e
                            .zip(truth_scale)
                            .map(|(e, t)| e.low_bps <= t && t <= e.high_bps),
                        rel_error_scale: e
                            .zip(truth_scale)
                            .map(|(e, t)| (e.value_bps - t).abs() / t.max(0.05 * c)),
                        load_avg: load_avg(),
                        host_steal,
                        final_method: e.map(|e| e.quality.method.to_string()),
                        capacity_measured_mbit: cell_cap.measured_bps.map(|b| b / 1e6),
                        drain_mbit: drain.map(|d| d / 1e6),
                        truth_drain_mbit: drain
                            .filter(|_| cross_bps.is_finite())
                            .map(|d| (d - cross_bps).max(0.0) / 1e6),
                        truth_unprobed_mbit: truth_unprobed.map(|t| t / 1e6),
                        rel_error_unprobed: e
                            .zip(truth_unprobed)
                            .map(|(e, t)| (e.value_bps - t).abs() / t.max(0.05 * c)),
                        covered_unprobed: e
                            .zip(truth_unprobed)
                            .map(|(e, t)| e.low_bps <= t && t <= e.high_bps),
                        cross_retransmits,
                        trains: if cfg.trace { o.trains } else { Vec::new() },
                    });
                }
            }
            if let Some(g) = gen {
                g.stop()?;
            }
            drop(sampler);
        }
    }
    hooks.say("\n");
    Ok(runs)
}

/// What the bottleneck drains now, cross traffic and all: a UDP flood at 1.25·C on top of it for
/// [`DRAIN_SECS`] (saturating whatever the cross load, as the capacity flood at `up`), everything
/// delivered past the shaper over its middle half, then a pause for the queue to empty before
/// the next run.
pub(crate) fn drain_now(tb: &Testbed, c: f64) -> Result<f64> {
    let w = mgrp_testbed::capacity::saturating_flow_window(
        tb,
        &format!("cbr:{}bit", (1.25 * c) as u64),
        DRAIN_PORT,
        DRAIN_SECS,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    Ok(w.total_bps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> AccuracyConfig {
        AccuracyConfig {
            capacities: vec![20.0],
            kinds: vec!["cbr".into()],
            loads: vec![0, 50],
            methods: vec![Method::Auto, Method::Chirp],
            reps: 1,
            max_late: None,
            drain_after: false,
            realtime_cross: false,
            cross_spin: GenOptions::default().spin,
            trace: false,
        }
    }

    #[test]
    fn the_grid_is_checked_before_anything_runs() {
        assert!(cfg().check().is_ok());
        let mut c = cfg();
        c.methods.push(Method::Capacity);
        assert!(c
            .check()
            .unwrap_err()
            .to_string()
            .contains("leave `capacity` out"));
        let mut c = cfg();
        c.reps = 0;
        assert!(c.check().is_err());
        let mut c = cfg();
        c.capacities = vec![5000.0];
        assert!(c.check().is_err());
        let mut c = cfg();
        c.loads = vec![100];
        assert!(c.check().is_err());
    }

    #[test]
    fn cells_become_patterns() {
        assert!(pattern("cbr", 0, 20e6).unwrap().is_none());
        let p = pattern("cbr", 50, 20e6).unwrap().unwrap();
        assert_eq!(p.mean_rate_bps(), Some(10e6));
        let step = pattern("step", 50, 20e6).unwrap().unwrap();
        assert!((step.mean_rate_bps().unwrap() - 10e6).abs() < 1.0);
        assert!(pattern("tcp4", 0, 20e6).unwrap().is_some());
        let slow = pattern("onoff500", 50, 20e6).unwrap().unwrap();
        assert_eq!(slow.mean_rate_bps(), Some(10e6));
        assert!(
            matches!(slow, CrossPattern::OnOff { on, off, .. } if on == off && on == Duration::from_millis(500))
        );
        assert!(matches!(pattern("zigzag", 10, 20e6), Err(Error::Config(_))));
        let web = pattern("web", 25, 100e6).unwrap().unwrap();
        assert!(matches!(web, CrossPattern::Web { .. }));
        assert_eq!(web.mean_rate_bps(), Some(25e6));
        assert!(pattern("web", 0, 20e6).unwrap().is_none());
    }

    #[test]
    fn an_unknown_kind_is_refused_before_any_run() {
        let mut c = cfg();
        c.kinds = vec!["cbr".into(), "zigzag".into()];
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("zigzag") && e.contains("web"), "{e}");
        c.kinds = vec!["web".into(), "tcp1".into()];
        assert!(c.check().is_ok());
    }
}
