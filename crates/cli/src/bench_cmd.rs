//! `mgrp bench ...`: measurements that print figures (JSON and a table), not pass/fail tests.

use crate::say;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::rtt::measure_rtt;
use mgrp_testbed::{CrossPattern, DelayDir, DelayMode, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::time::Duration;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// The testbed itself: generator rate accuracy at the bottleneck counters, delay-line accuracy.
    Testbed(TestbedBench),
}

#[derive(Args)]
pub struct TestbedBench {
    /// Repetitions per cell.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Seconds per generator run.
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Pings per delay setting.
    #[arg(long, default_value_t = 200)]
    pings: u32,
    /// Print the JSON document instead of the tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Testbed(b) => testbed_bench(b),
    }
}

#[derive(Serialize)]
struct GenRow {
    pattern: String,
    capacity_mbit: f64,
    configured_mbit: Option<f64>,
    /// What the schedule itself asked for in the measured window (a Poisson or exponential
    /// on/off pattern's realised rate differs from its long-run mean over a short window).
    scheduled_mbit: Vec<f64>,
    /// Median |measured − scheduled| / scheduled: the generator's own accuracy.
    median_abs_err_vs_schedule: Option<f64>,
    /// Measured cross rate at r2's counters, per repetition.
    measured_mbit: Vec<f64>,
    /// Median and largest |measured − configured| / configured (UDP) or / capacity (TCP).
    median_abs_err: f64,
    max_abs_err: f64,
    /// Largest departure lateness of a UDP packet against its schedule, per repetition.
    max_lag_us: Vec<f64>,
    drops: Vec<f64>,
}

#[derive(Serialize)]
struct DelayRow {
    target_ms: f64,
    direction: String,
    rtt_min_ms: f64,
    rtt_p10_ms: f64,
    rtt_p50_ms: f64,
    rtt_p90_ms: f64,
    rtt_max_ms: f64,
    /// RTT p50 minus the no-delay baseline p50: what the line added.
    added_p50_ms: f64,
    /// p90 − p10 of the RTT.
    jitter_ms: f64,
    line_late_us_p50: f64,
    line_late_us_p99: f64,
    line_packets: u64,
    under_load: Option<String>,
}

#[derive(Serialize)]
struct Report {
    reps: u32,
    secs: f64,
    generators: Vec<GenRow>,
    baseline_rtt_p50_ms: f64,
    delay: Vec<DelayRow>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
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

fn testbed_bench(b: TestbedBench) -> Result<()> {
    anyhow::ensure!(b.reps >= 1 && b.reps <= 100, "--reps must be 1..=100");
    anyhow::ensure!(b.secs >= 1.0 && b.secs <= 600.0, "--secs must be 1..=600");
    anyhow::ensure!(
        b.pings >= 10 && b.pings <= 10_000,
        "--pings must be 10..=10000"
    );
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
        let pattern = CrossPattern::parse(spec)?;
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
            eprint!("\r{spec:<44} rep {}/{}", rep + 1, b.reps);
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
            // STEP: a whole number of cycles; TCP: skip slow start.
            let (lo, hi) = match &pattern {
                CrossPattern::Step {
                    rates_bps, every, ..
                } => {
                    let cycle = every.as_secs_f64() * rates_bps.len() as f64;
                    (0.0, (b.secs / cycle).floor().max(1.0) * cycle)
                }
                CrossPattern::TcpBulk { .. } => (1.0, b.secs - trim),
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
                .context("no ground truth for the window")?;
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
        row.median_abs_err = median(&mut errs);
        row.median_abs_err_vs_schedule = (!sched_errs.is_empty()).then(|| median(&mut sched_errs));
        generators.push(row);
    }
    eprintln!();

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
        eprint!("\rdelay {ms} ms {dir:?} {}            ", load.unwrap_or(""));
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
                &CrossPattern::parse(p)?,
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
    eprintln!();
    let report = Report {
        reps: b.reps,
        secs: b.secs,
        generators,
        baseline_rtt_p50_ms: baseline.p50_ms,
        delay,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json).with_context(|| format!("write {}", p.display()))?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    say!("Generator rate at the bottleneck counters ({} reps × {} s; error vs configured rate, TCP vs capacity)", b.reps, b.secs);
    say!("| pattern | C Mbit/s | configured | measured (median) | median abs err | max abs err | err vs schedule | max lag µs | drops |");
    say!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &report.generators {
        let mut m = r.measured_mbit.clone();
        let mut lag = r.max_lag_us.clone();
        say!(
            "| {} | {} | {} | {:.3} | {:.2}% | {:.2}% | {} | {:.0} | {:.0} |",
            r.pattern,
            r.capacity_mbit,
            r.configured_mbit
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "—".into()),
            median(&mut m),
            r.median_abs_err * 100.0,
            r.max_abs_err * 100.0,
            r.median_abs_err_vs_schedule
                .map(|e| format!("{:.2}%", e * 100.0))
                .unwrap_or_else(|| "—".into()),
            median(&mut lag),
            r.drops.iter().sum::<f64>()
        );
    }
    say!(
        "\nDelay line ({} pings each; baseline RTT p50 {:.3} ms without delay)",
        b.pings,
        report.baseline_rtt_p50_ms
    );
    say!("| target ms | direction | load | RTT min | p50 | p90 | added p50 | jitter p90−p10 | line late p50/p99 µs |");
    say!("|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for d in &report.delay {
        say!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {}/{} |",
            d.target_ms,
            d.direction,
            d.under_load.as_deref().unwrap_or("idle"),
            d.rtt_min_ms,
            d.rtt_p50_ms,
            d.rtt_p90_ms,
            d.added_p50_ms,
            d.jitter_ms,
            d.line_late_us_p50,
            d.line_late_us_p99
        );
    }
    Ok(())
}
