//! `mgrp bench tcp-available`: `mgrp tcp-available` against real TCP flows in the same
//! conditions (run by `mgrp_lab::tcp_avail_bench`); here the arguments and the table.

use anyhow::Result;
use clap::Args;
use mgrp_lab::tcp_avail_bench::{median, Cell, TcpAvailConfig};
use std::path::PathBuf;

#[derive(Args)]
pub struct TcpAvailBench {
    /// Configured capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "20,100")]
    capacities: Vec<f64>,
    /// Cross traffic patterns, `;`-separated (the testbed's syntax).
    #[arg(
        long,
        value_delimiter = ';',
        default_value = "tcp:1,cc=cubic;tcp:4,cc=cubic"
    )]
    cross: Vec<String>,
    /// Repetitions per cell.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Real flows per repetition; their median is the truth.
    #[arg(long, default_value_t = 3)]
    real_flows: u32,
    /// Congestion control of the measuring and the real flows.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Seconds the cross traffic has the link alone before each flow.
    #[arg(long, default_value_t = 3.0)]
    settle: f64,
    #[arg(long)]
    json: bool,
    /// Write tcp-available.json and tcp-available.md (the table) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: TcpAvailBench) -> Result<()> {
    let cfg = TcpAvailConfig {
        capacities: a.capacities,
        cross: a.cross,
        reps: a.reps,
        real_flows: a.real_flows,
        cc: a.cc,
        settle_s: a.settle,
    };
    cfg.check()?;
    crate::signals::catch_signals();
    let cells = mgrp_lab::tcp_avail_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&cells)?;
    let text = table(&cfg, &cells);
    crate::output::emit_bench(a.out.as_deref(), "tcp-available", &json, &text, a.json)
}

/// The readable table.
fn table(cfg: &TcpAvailConfig, cells: &[Cell]) -> String {
    let mut out = vec![
        "# TCP-available bandwidth against real flows (`mgrp bench tcp-available`)".to_string(),
        String::new(),
        format!(
            "Per repetition: the cross traffic alone for {} s, one `mgrp tcp-available` ({}), then {} real {} flows, each after {} s of the cross traffic alone; every flow's goodput over its seconds 2–6. Truth = the real flows' median. {} repetitions per cell.",
            cfg.settle_s, cfg.cc, cfg.real_flows, cfg.cc, cfg.settle_s, cfg.reps
        ),
        String::new(),
        "| C (measured) | cross | tcp-available median Mbit/s | truth median Mbit/s | median error | p90 error | range holds truth | real flows' spread |".into(),
        "|---|---|---:|---:|---:|---:|---:|---:|".into(),
    ];
    for c in cells {
        let mut est: Vec<f64> = c.reps.iter().map(|r| r.estimate_mbit).collect();
        let mut tru: Vec<f64> = c.reps.iter().map(|r| r.truth_mbit).collect();
        out.push(format!(
            "| {:.0} ({:.1}) | {} | {:.2} | {:.2} | {:.0}% | {:.0}% | {:.0}% | {:.0}% |",
            c.configured_mbit,
            c.measured_mbit,
            c.cross,
            median(&mut est),
            median(&mut tru),
            c.median_error * 100.0,
            c.p90_error * 100.0,
            c.coverage * 100.0,
            c.real_spread * 100.0
        ));
    }
    out.push(String::new());
    out.push("Target (issue 20): TCP-available within 15% of a real flow.".into());
    out.join("\n")
}
