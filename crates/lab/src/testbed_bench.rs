//! `mgrp bench testbed`: the testbed itself — generator rates at the bottleneck counters
//! against their configuration and schedule, and the delay line's accuracy.

use crate::{ensure, Error, Hooks, Result};
use mgrp_estimate::stats::{median, quantile};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::rtt::measure_rtt;
use mgrp_testbed::{CrossPattern, DelayDir, DelayMode, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TestbedBenchConfig {
    /// Repetitions per cell.
    pub reps: u32,
    /// Seconds per generator run.
    pub secs: f64,
    /// Pings per delay setting.
    pub pings: u32,
}

#[derive(Serialize)]
pub struct GenRow {
    pub pattern: String,
    pub capacity_mbit: f64,
    pub configured_mbit: Option<f64>,
    /// What the schedule itself asked for in the measured window (a Poisson or exponential
    /// on/off pattern's realised rate differs from its long-run mean over a short window).
    pub scheduled_mbit: Vec<f64>,
    /// Median |measured − scheduled| / scheduled: the generator's own accuracy.
    pub median_abs_err_vs_schedule: Option<f64>,
    /// Measured cross rate at r2's counters, per repetition.
    pub measured_mbit: Vec<f64>,
    /// Median and largest |measured − configured| / configured (UDP) or / capacity (TCP).
    pub median_abs_err: f64,
    pub max_abs_err: f64,
    /// Largest departure lateness of a UDP packet against its schedule, per repetition.
    pub max_lag_us: Vec<f64>,
    pub drops: Vec<f64>,
}

#[derive(Serialize)]
pub struct DelayRow {
    pub target_ms: f64,
    pub direction: String,
    pub rtt_min_ms: f64,
    pub rtt_p10_ms: f64,
    pub rtt_p50_ms: f64,
    pub rtt_p90_ms: f64,
    pub rtt_max_ms: f64,
    /// RTT p50 minus the no-delay baseline p50: what the line added.
    pub added_p50_ms: f64,
    /// p90 − p10 of the RTT.
    pub jitter_ms: f64,
    pub line_late_us_p50: f64,
    pub line_late_us_p99: f64,
    pub line_packets: u64,
    pub under_load: Option<String>,
}

#[derive(Serialize)]
pub struct Report {
    pub reps: u32,
    pub secs: f64,
    pub generators: Vec<GenRow>,
    pub baseline_rtt_p50_ms: f64,
    pub delay: Vec<DelayRow>,
}

/// Frame bits per second the pattern's schedule sends in [lo, hi) seconds after its start.
fn scheduled_bps(pattern: &CrossPattern, lo: f64, hi: f64) -> Option<f64> {
    let sched = pattern.schedule()?;
    let frame_bits = (sched.size() as u64 + mgrp_testbed::pattern::ETH_HLEN) as f64 * 8.0;
    let (lo_ns, hi_ns) = ((lo * 1e9) as u64, (hi * 1e9) as u64);
    let n = sched
        .take_while(|&t| t < hi_ns)
        .filter(|&t| t >= lo_ns)
        .count();
    Some(n as f64 * frame_bits / (hi - lo))
}

impl TestbedBenchConfig {
    pub fn check(&self) -> Result<()> {
        ensure(self.reps >= 1 && self.reps <= 100, "--reps must be 1..=100")?;
        ensure(
            self.secs >= 1.0 && self.secs <= 600.0,
            "--secs must be 1..=600",
        )?;
        ensure(
            self.pings >= 10 && self.pings <= 10_000,
            "--pings must be 10..=10000",
        )
    }
}

/// Generators against the bottleneck counters, then the delay line idle and under load.
pub fn run(b: &TestbedBenchConfig, hooks: Hooks) -> Result<Report> {
    b.check()?;
    let cells: &[(&str, f64)] = &[
        ("cbr:5mbit", 100.0),
        ("cbr:50mbit", 100.0),
        ("cbr:20mbit,size=200", 100.0),
        ("poisson:10mbit,seed=1", 100.0),
        ("onoff:10mbit,on=50ms,off=50ms", 100.0),
        ("onoff:10mbit,on=50ms,off=150ms,dist=exp", 100.0),
        ("step:5,20,10mbit,every=1s", 100.0),
        ("tcp:1", 20.0),
        ("tcp:4", 20.0),
        ("tcp:4,cc=bbr", 20.0),
    ];
    let trim = 0.25;
    let mut generators = Vec::new();
    for (spec, cap) in cells {
        let pattern = CrossPattern::parse(spec).map_err(|e| Error::Config(e.to_string()))?;
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: (*cap * 1e6) as u64,
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        let mut row = GenRow {
            pattern: spec.to_string(),
            capacity_mbit: *cap,
            configured_mbit: pattern.mean_rate_bps().map(|r| r / 1e6),
            scheduled_mbit: vec![],
            median_abs_err_vs_schedule: None,
            measured_mbit: vec![],
            median_abs_err: 0.0,
            max_abs_err: 0.0,
            max_lag_us: vec![],
            drops: vec![],
        };
        let mut errs = Vec::new();
        let mut sched_errs = Vec::new();
        for rep in 0..b.reps {
            hooks.say(&format!("\r{spec:<44} rep {}/{}", rep + 1, b.reps));
            let sampler = TruthSampler::start(&tb, Duration::from_millis(100))?;
            let opts = GenOptions {
                max_duration: Duration::from_secs_f64(b.secs + 5.0),
                ..Default::default()
            };
            let gen = CrossTraffic::start(&tb, &pattern, BASE_PORT, &opts)?;
            let start = gen.start_ns();
            std::thread::sleep(Duration::from_secs_f64(b.secs));
            let g = gen.stop()?;
            let truth = sampler.stop()?;
            // STEP, PEAKS: a whole number of cycles; TCP: skip slow start.
            let (lo, hi) = match (&pattern, pattern.cycle()) {
                (_, Some(cycle)) => {
                    let cycle = cycle.as_secs_f64();
                    (0.0, (b.secs / cycle).floor().max(1.0) * cycle)
                }
                (CrossPattern::TcpBulk { .. }, _) => (1.0, b.secs - trim),
                _ => (trim, b.secs - trim),
            };
            // Edges on samples: interpolating inside a burst would blur bursty patterns.
            let snap = |s: f64| {
                truth
                    .nearest_sample_ns(start + (s * 1e9) as u64)
                    .unwrap_or(start)
            };
            let (lo_ns, hi_ns) = (snap(lo), snap(hi));
            let w = truth
                .window(lo_ns, hi_ns)
                .ok_or_else(|| Error::Worker("no ground truth for the window".into()))?;
            let secs = |t: u64| t.saturating_sub(start) as f64 / 1e9;
            let (lo, hi) = (secs(lo_ns), secs(hi_ns));
            let reference = pattern.mean_rate_bps().unwrap_or(*cap * 1e6);
            errs.push((w.cross_bps - reference).abs() / reference);
            row.measured_mbit.push(w.cross_bps / 1e6);
            if let Some(sched) = scheduled_bps(&pattern, lo, hi) {
                row.scheduled_mbit.push(sched / 1e6);
                sched_errs.push((w.cross_bps - sched).abs() / sched);
            }
            row.max_lag_us.push(g.max_lag_us);
            row.drops.push(w.drops);
        }
        row.max_abs_err = errs.iter().cloned().fold(0.0, f64::max);
        row.median_abs_err = median(&errs);
        row.median_abs_err_vs_schedule = quantile(&sched_errs, 0.5);
        generators.push(row);
    }
    hooks.say("\n");

    // Delay line: baseline RTT, then each setting idle, then one under TCP load.
    let baseline = {
        let tb = Testbed::up(TestbedConfig::default(), DelayMode::Thread)?;
        measure_rtt(&tb, b.pings)?
    };
    let mut delay = Vec::new();
    let settings: &[(u64, DelayDir, Option<&str>)] = &[
        (5, DelayDir::Reverse, None),
        (20, DelayDir::Reverse, None),
        (40, DelayDir::Reverse, None),
        (20, DelayDir::Forward, None),
        (20, DelayDir::Both, None),
        (20, DelayDir::Reverse, Some("tcp:4")),
    ];
    for (ms, dir, load) in settings {
        hooks.say(&format!(
            "\rdelay {ms} ms {dir:?} {}            ",
            load.unwrap_or("")
        ));
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 100_000_000,
                delay: Some(Duration::from_millis(*ms)),
                delay_dir: *dir,
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        // Under load, the cross traffic's ACKs stream through the line while we ping; the pings'
        // forward path crosses the (then busy) bottleneck, so only the line's own lateness is
        // comparable across rows.
        let gen = match load {
            Some(p) => Some(CrossTraffic::start(
                &tb,
                &CrossPattern::parse(p).map_err(|e| Error::Config(e.to_string()))?,
                BASE_PORT,
                &GenOptions::default(),
            )?),
            None => None,
        };
        let r = measure_rtt(&tb, b.pings)?;
        if let Some(g) = gen {
            g.stop()?;
        }
        let s = tb.delay_stats().unwrap_or_default();
        delay.push(DelayRow {
            target_ms: *ms as f64,
            direction: format!("{dir:?}").to_lowercase(),
            rtt_min_ms: r.min_ms,
            rtt_p10_ms: r.p10_ms,
            rtt_p50_ms: r.p50_ms,
            rtt_p90_ms: r.p90_ms,
            rtt_max_ms: r.max_ms,
            added_p50_ms: r.p50_ms - baseline.p50_ms,
            jitter_ms: r.p90_ms - r.p10_ms,
            line_late_us_p50: s.late_us_p50,
            line_late_us_p99: s.late_us_p99,
            line_packets: s.packets,
            under_load: load.map(|l| format!("{l} cross traffic, 100 Mbit/s")),
        });
    }
    hooks.say("\n");
    Ok(Report {
        reps: b.reps,
        secs: b.secs,
        generators,
        baseline_rtt_p50_ms: baseline.p50_ms,
        delay,
    })
}
