//! `mgrp bench passive`: Wren on the testbed's own TCP traffic against ground truth, capture
//! loss and cost, and offline analysis speed (run by `mgrp_lab::passive_bench`); here the
//! arguments and the table.

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_lab::passive_bench::{PassiveConfig, Report};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct PassiveBench {
    /// Bottleneck capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    capacities: Vec<f64>,
    /// Monitored application traffic, `;`-separated: bulk, msgs:SIZE,every=DUR,
    /// irregular:SIZE,every=DUR.
    #[arg(
        long,
        value_delimiter = ';',
        default_value = "bulk;msgs:64kb,every=10ms;msgs:256kb,every=40ms;irregular:256kb,every=40ms"
    )]
    apps: Vec<String>,
    /// Cross traffic: none, cbr:PCT (percent of C), tcp1.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,cbr:25,cbr:50,cbr:75,tcp1"
    )]
    cross: Vec<String>,
    /// Congestion controls of the monitored flow.
    #[arg(long, value_delimiter = ',', default_value = "cubic,bbr")]
    ccs: Vec<String>,
    /// Seconds per scenario.
    #[arg(long, default_value_t = 6.0)]
    secs: f64,
    /// Round-trip delay added on the reverse path.
    #[arg(long, default_value = "10ms", value_parser = crate::testbed_cmd::duration)]
    delay: Duration,
    /// Segments in the synthetic pcap for the offline speed figure.
    #[arg(long, default_value_t = 4_000_000)]
    offline_segments: u64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(b: PassiveBench) -> Result<()> {
    let cfg = PassiveConfig {
        capacities: b.capacities,
        apps: b.apps,
        cross: b.cross,
        ccs: b.ccs,
        secs: b.secs,
        delay: b.delay,
        offline_segments: b.offline_segments,
    };
    let report = mgrp_lab::passive_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    table(&report);
    Ok(())
}

fn pct(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{:.1}%", v * 100.0))
}

fn table(r: &Report) {
    say!("Wren on the monitored flow snd → rcv (estimate per 1 s window vs A = C − cross of the same window):");
    say!("| C | cross | app | cc | A (Mbit/s) | app (Mbit/s) | est/min | median err | p90 err | median signed | usable | capture loss | CPU |");
    say!("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in &r.rows {
        say!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {:.1}% | {:.3}% | {:.1}% |",
            x.capacity_mbit,
            x.cross,
            x.app,
            x.cc,
            x.truth_mbit,
            x.app_mbit,
            x.estimates_per_min,
            pct(x.median_err),
            pct(x.p90_err),
            pct(x.median_signed),
            x.usable_fraction * 100.0,
            x.capture_loss * 100.0,
            x.cpu_share * 100.0
        );
    }
    say!(
        "\nOffline analysis: {} segments ({:.1} MB pcap) at {:.2} M segments/s on one core (decode + Wren).",
        r.offline_segments,
        r.offline_file_bytes as f64 / 1e6,
        r.offline_segments_per_s / 1e6
    );
}
