//! `mgrp bench ...`: measurements that print figures (JSON and a table), not pass/fail tests.

use crate::say;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use mgrp_estimate::stats::median;
use mgrp_lab::pacing_bench::PacingConfig;
use mgrp_lab::testbed_bench::TestbedBenchConfig;

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
    /// Congestion controls as transfer modes: background (foreground left, spare taken, recovery,
    /// web completion times) and full speed (high-BDP ramp, lossy goodput) against ground truth.
    Modes(crate::modes_bench::ModesBench),
    /// MPAT (weighted shares of one host's flows) and mulTCP in the kernel against CUBIC flows.
    Mpat(crate::mpat_bench::MpatBench),
    /// Locating the bottleneck link: Tneck (a TCP flow) against a BFind-style UDP ramp on chain3.
    Bottleneck(crate::bottleneck_bench::BottleneckBench),
    /// The server-choosing proxy (examples/proxy): requests to the best replica, switch time,
    /// added latency, on a two-replica tree against ground truth.
    Proxy(crate::proxy_bench::ProxyBench),
    /// Loss episodes (badabing through the Probe API) against the drop log, with a periodic
    /// ping as the baseline.
    Loss(crate::loss_bench::LossBench),
    /// Inline measurement (ImTCP) on a kernel CUBIC flow vs ground truth, inline on vs off.
    Inline(crate::inline_bench::InlineBench),
    /// Netmapper: a map of many paths' links with bottlenecks, against the testbed's truth.
    Map(crate::map_bench::MapBench),
    /// Two-sided Wren live (the peer agent's arrival records) against one-sided and offline
    /// two-sided, on chain3 with cross traffic on every link.
    Wren2(crate::wren2_bench::Wren2Bench),
    /// Continuous tracking (the default schedule) against back-to-back baselines: probe load,
    /// error, estimates per minute, time to follow a step.
    Tracking(crate::tracking_bench::TrackingBench),
    /// MediaNet (examples/medianet): three adaptive streams under PEAKS cross traffic, passive vs mgrp estimates vs oracle.
    Medianet(crate::medianet_bench::MedianetBench),
    /// TCP-available bandwidth (`mgrp tcp-available`) against real TCP flows in the same conditions.
    TcpAvailable(crate::tcp_avail_bench::TcpAvailBench),
}

#[derive(Args)]
pub struct AccuracyBench {
    /// Bottleneck capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "20,100")]
    pub capacities: Vec<f64>,
    /// Cross-traffic kinds: cbr, poisson, onoff (50 ms periods), onoff500, step, web (web-like
    /// TCP at the load), tcp1, tcp4.
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
    /// UDP cross sources skip departures more than 1 ms late instead of sending them back to
    /// back (as `testbed run --estimate` does); off by default so grids stay comparable with
    /// the results kept so far.
    #[arg(long)]
    pub skip_late: bool,
    /// After each run, flood the bottleneck on top of the cross traffic for 1 s and report the
    /// error against the truth with that drain as the capacity too (is a bias the estimator's
    /// or the flood-at-start truth's?).
    #[arg(long)]
    pub drain_after: bool,
    /// Run the UDP cross sources under SCHED_FIFO (priority 20) instead of the normal scheduler
    /// (off by default: at 100 Mbit/s they made `auto` worse, docs/estimators.md).
    #[arg(long)]
    pub realtime_cross: bool,
    /// How long each UDP cross source spins before a departure instead of sleeping (0 = sleep
    /// to the departure; a spinning source takes CPU time from the path's packet processing).
    #[arg(long, default_value = "50us", value_parser = crate::testbed_cmd::duration)]
    pub cross_spin: std::time::Duration,
    /// Keep every run's trains in the JSON (when each report came in, how long it took, rate,
    /// probes lost, the estimate after it): where a slow run spent its time.
    #[arg(long)]
    pub trace: bool,
    #[arg(long)]
    pub json: bool,
    /// Write the runs' JSON to this file.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Write NAME.json (the runs) and NAME.md (the tables) into this directory.
    #[arg(long)]
    pub results: Option<std::path::PathBuf>,
    #[arg(long, default_value = "accuracy")]
    pub name: String,
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
        BenchCmd::Modes(b) => crate::modes_bench::run(b),
        BenchCmd::Mpat(b) => crate::mpat_bench::run(b),
        BenchCmd::Bottleneck(b) => crate::bottleneck_bench::run(b),
        BenchCmd::Proxy(b) => crate::proxy_bench::run(b),
        BenchCmd::Loss(b) => crate::loss_bench::run(b),
        BenchCmd::Inline(b) => crate::inline_bench::run(b),
        BenchCmd::Map(b) => crate::map_bench::run(b),
        BenchCmd::Wren2(b) => crate::wren2_bench::run(b),
        BenchCmd::Tracking(b) => crate::tracking_bench::run(b),
        BenchCmd::Medianet(b) => crate::medianet_bench::run(b),
        BenchCmd::TcpAvailable(b) => crate::tcp_avail_bench::run(b),
    }
}

fn testbed_bench(b: TestbedBench) -> Result<()> {
    let cfg = TestbedBenchConfig {
        reps: b.reps,
        secs: b.secs,
        pings: b.pings,
    };
    let report = mgrp_lab::testbed_bench::run(&cfg, crate::signals::hooks())?;
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
        say!(
            "| {} | {} | {} | {:.3} | {:.2}% | {:.2}% | {} | {:.0} | {:.0} |",
            r.pattern,
            r.capacity_mbit,
            r.configured_mbit
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "—".into()),
            median(&r.measured_mbit),
            r.median_abs_err * 100.0,
            r.max_abs_err * 100.0,
            r.median_abs_err_vs_schedule
                .map(|e| format!("{:.2}%", e * 100.0))
                .unwrap_or_else(|| "—".into()),
            median(&r.max_lag_us),
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

fn pacing_bench(b: PacingBench) -> Result<()> {
    let cfg = PacingConfig {
        trains: b.trains,
        count: b.count,
        size: b.size,
        gaps_us: b.gaps_us.clone(),
        capacity: b.capacity,
    };
    let rows = mgrp_lab::pacing_bench::run(&cfg, crate::signals::hooks())?;
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
    say!("| gap µs | sender median | sender p99 | sender max | kernel TX median | kernel TX p99 | receiver median | receiver p99 | receiver max | flagged trains | of them stolen | lost | rx rate / intended Mbit/s |");
    say!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |q: Option<mgrp_engine::train::Quantiles>| {
        q.map(|q| (q.median, q.p99, q.max))
            .unwrap_or((f64::NAN, f64::NAN, f64::NAN))
    };
    for r in &rows {
        let (sm, sp, sx) = f(r.sender_err_us);
        let (rm, rp, rx) = f(r.receiver_err_us);
        let (km, kp, _) = f(r.kernel_tx_err_us);
        say!(
            "| {} | {:.3} | {:.2} | {:.1} | {:.3} | {:.2} | {:.3} | {:.2} | {:.1} | {}/{} | {} | {} | {:.1} / {:.1} |",
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
            r.stolen_trains,
            r.lost,
            r.rx_rate_mbit_median,
            r.intended_mbit
        );
    }
    Ok(())
}
