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
    /// The pacer: sender and receiver gap error of probe trains on an idle testbed path.
    Pacing(PacingBench),
    /// Estimators against ground truth over a grid of capacities, cross traffic and loads.
    Accuracy(AccuracyBench),
    /// Passive measurement (Wren) of the testbed's own TCP traffic against ground truth.
    Passive(crate::passive_bench::PassiveBench),
    /// Riders (MGRP piggybacking): the seed's microbenchmark, riders off vs on.
    Riders(crate::riders_bench::RidersBench),
    /// The shaper's configured vs measured capacity, saturating UDP/TCP flows through it, and
    /// the packet-train capacity estimate.
    Capacity(crate::capacity_bench::CapacityBench),
}

#[derive(Args)]
pub struct AccuracyBench {
    /// Bottleneck capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "20,100")]
    pub capacities: Vec<f64>,
    /// Cross-traffic kinds: cbr, poisson, onoff, step, tcp1, tcp4.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cbr,poisson,onoff,step,tcp1,tcp4"
    )]
    pub kinds: Vec<String>,
    /// Cross load in % of capacity (UDP kinds; 0 = idle path, run once).
    #[arg(long, value_delimiter = ',', default_value = "0,25,50,75")]
    pub loads: Vec<u32>,
    /// Methods: auto, chirp, sweep, slops, slops-slow (the classic tool, the baseline for bytes).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auto,chirp,sweep,slops,slops-slow"
    )]
    pub methods: Vec<String>,
    #[arg(long, default_value_t = 2)]
    pub reps: u32,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct PacingBench {
    /// Trains per gap setting.
    #[arg(long, default_value_t = 30)]
    trains: u32,
    /// Probes per train and probe size.
    #[arg(long, default_value_t = 100)]
    count: usize,
    #[arg(long, default_value_t = 1000)]
    size: u16,
    /// Gaps to measure, microseconds.
    #[arg(long, value_delimiter = ',', default_value = "100,50,20,12")]
    gaps_us: Vec<f64>,
    /// Bottleneck capacity of the (idle) testbed path.
    #[arg(long, default_value = "1gbit", value_parser = crate::testbed_cmd::rate)]
    capacity: u64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    out: Option<std::path::PathBuf>,
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
        BenchCmd::Pacing(b) => pacing_bench(b),
        BenchCmd::Accuracy(b) => crate::accuracy::run(b),
        BenchCmd::Passive(b) => crate::passive_bench::run(b),
        BenchCmd::Riders(b) => crate::riders_bench::run(b),
        BenchCmd::Capacity(b) => crate::capacity_bench::run(b),
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

#[derive(Serialize)]
struct PacingRow {
    gap_us: f64,
    trains: u32,
    probes: usize,
    /// |actual − intended| gap at the sender, microseconds, over all gaps of all trains.
    sender_err_us: Option<mgrp_engine::train::Quantiles>,
    /// The same from kernel TX software timestamps (the packet reaching the device).
    kernel_tx_err_us: Option<mgrp_engine::train::Quantiles>,
    /// |receive gap − intended gap| from kernel RX timestamps, microseconds.
    receiver_err_us: Option<mgrp_engine::train::Quantiles>,
    flagged_trains: u32,
    lost: usize,
    /// Receive rate over the train vs the intended in-train rate (medians).
    intended_mbit: f64,
    rx_rate_mbit_median: f64,
}

fn pacing_bench(b: PacingBench) -> Result<()> {
    use mgrp_engine::auth::Key;
    use mgrp_engine::client::Session;
    use mgrp_engine::pacer::Pacer;
    use mgrp_engine::train::{Quantiles, TrainSpec};
    use mgrp_testbed::netns::spawn_in;
    use mgrp_testbed::Role;
    anyhow::ensure!(
        b.trains >= 1 && b.trains <= 10_000,
        "--trains must be 1..=10000"
    );
    anyhow::ensure!(
        b.gaps_us.iter().all(|g| *g > 0.0 && *g <= 1e6),
        "gaps must be in (0, 1e6] us"
    );
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: b.capacity,
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    let key = Key::random();
    let (agent, listen) = crate::live_estimate::agent_at_rcv(&tb, &key)?;
    let (trains, count, size, gaps) = (b.trains, b.count, b.size, b.gaps_us.clone());
    let rows = spawn_in(&tb.ns(Role::Snd), "bench", move || {
        let run = || -> anyhow::Result<Vec<PacingRow>> {
            let mut s = Session::connect(
                listen,
                &key,
                std::sync::Arc::new(Pacer::spawn()?),
                Duration::from_secs(3),
            )?;
            let mut rows = Vec::new();
            for gap in gaps {
                let spec = TrainSpec::uniform(count, size, (gap * 1e3).round() as u64);
                let (mut tx, mut ktx, mut rx, mut rates) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let (mut flagged, mut lost) = (0, 0);
                for i in 0..trains {
                    eprint!("\rgap {gap} us: train {}/{trains}   ", i + 1);
                    let r = s.send_train(&spec)?;
                    flagged += r.stats.flagged as u32;
                    lost += r.stats.lost;
                    rates.extend(r.rx_rate_bps());
                    for w in r.probes.windows(2) {
                        let want = (w[1].intended_ns - w[0].intended_ns) as f64;
                        if let (Some(a), Some(b)) = (w[0].sent_ns, w[1].sent_ns) {
                            tx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                        if let (Some(a), Some(b)) = (
                            w[0].tx_kernel_ns.map(|t| t.0),
                            w[1].tx_kernel_ns.map(|t| t.0),
                        ) {
                            ktx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                        if let (Some(a), Some(b)) =
                            (w[0].rx_ns.map(|t| t.0), w[1].rx_ns.map(|t| t.0))
                        {
                            rx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                rows.push(PacingRow {
                    gap_us: gap,
                    trains,
                    probes: count,
                    sender_err_us: Quantiles::of(tx),
                    kernel_tx_err_us: Quantiles::of(ktx),
                    receiver_err_us: Quantiles::of(rx),
                    flagged_trains: flagged,
                    lost,
                    intended_mbit: size as f64 * 8.0 / gap,
                    rx_rate_mbit_median: median(&mut rates) / 1e6,
                });
            }
            Ok(rows)
        };
        run().map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
    })?
    .join()
    .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
    eprintln!();
    drop(agent);
    let json = serde_json::to_string_pretty(&rows)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json).with_context(|| format!("write {}", p.display()))?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    say!(
        "Pacing: {} trains × {} probes × {} B per gap, idle {} testbed path; errors in µs",
        b.trains,
        b.count,
        b.size,
        mgrp_testbed::units::fmt_rate(b.capacity as f64)
    );
    say!("| gap µs | sender median | sender p99 | sender max | kernel TX median | kernel TX p99 | receiver median | receiver p99 | receiver max | flagged trains | lost | rx rate / intended Mbit/s |");
    say!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |q: Option<mgrp_engine::train::Quantiles>| {
        q.map(|q| (q.median, q.p99, q.max))
            .unwrap_or((f64::NAN, f64::NAN, f64::NAN))
    };
    for r in &rows {
        let (sm, sp, sx) = f(r.sender_err_us);
        let (rm, rp, rx) = f(r.receiver_err_us);
        let (km, kp, _) = f(r.kernel_tx_err_us);
        say!(
            "| {} | {:.3} | {:.2} | {:.1} | {:.3} | {:.2} | {:.3} | {:.2} | {:.1} | {}/{} | {} | {:.1} / {:.1} |",
            r.gap_us,
            sm,
            sp,
            sx,
            km,
            kp,
            rm,
            rp,
            rx,
            r.flagged_trains,
            r.trains,
            r.lost,
            r.rx_rate_mbit_median,
            r.intended_mbit
        );
    }
    Ok(())
}
