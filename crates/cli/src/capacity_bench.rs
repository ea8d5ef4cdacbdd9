//! `mgrp bench capacity`: configured vs measured capacity of the testbed's shaper, what a
//! saturating UDP and TCP flow get through it, and what the packet-train capacity estimator
//! reads (run by `mgrp_lab::capacity_bench`); here the arguments and the table.

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_estimate::stats::{median, quantile};
use mgrp_lab::capacity_bench::{CapacityConfig, Cell};

#[derive(Args)]
pub struct CapacityBench {
    /// Configured capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "20,100,200")]
    capacities: Vec<f64>,
    /// Shapers: htb, tbf.
    #[arg(long, value_delimiter = ',', default_value = "htb,tbf")]
    shapers: Vec<String>,
    /// Probes per train of the capacity estimator (6: `auto`'s capacity phase; 10: `capacity`).
    #[arg(long, value_delimiter = ',', default_value = "6,10")]
    probes: Vec<usize>,
    /// Repetitions per cell (each: a flood, a UDP flow, a TCP flow, one estimate per train length).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Seconds each saturating flow runs (the first and last quarter are not counted).
    #[arg(long, default_value_t = 2.0)]
    flow_secs: f64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(b: CapacityBench) -> Result<()> {
    let cfg = CapacityConfig {
        capacities: b.capacities,
        shapers: b.shapers,
        probes: b.probes,
        reps: b.reps,
        flow_secs: b.flow_secs,
    };
    let cells = mgrp_lab::capacity_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&cells)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    if b.json {
        say!("{json}");
    } else {
        table(&cells);
    }
    Ok(())
}

fn med(v: &[f64]) -> f64 {
    median(v)
}

fn spread(v: &[f64]) -> String {
    let lo = quantile(v, 0.0).unwrap_or(f64::NAN);
    let hi = quantile(v, 1.0).unwrap_or(f64::NAN);
    format!("{:.2} [{lo:.2}..{hi:.2}]", med(v))
}

fn table(cells: &[Cell]) {
    say!(
        "{:<5} {:>6}  {:<24} {:<24} {:<24}  {}",
        "shaper",
        "C",
        "measured (flood)",
        "UDP flow",
        "TCP flow",
        "estimate (probes: median [min..max], median/measured)"
    );
    for c in cells {
        let m = med(&c.measured_mbit);
        let est: Vec<String> = c
            .estimates
            .iter()
            .map(|e| format!("{}: {} {:.3}", e.probes, spread(&e.mbit), med(&e.mbit) / m))
            .collect();
        say!(
            "{:<5} {:>6}  {:<24} {:<24} {:<24}  {}",
            c.shaper,
            c.configured_mbit,
            spread(&c.measured_mbit),
            format!(
                "{} {:.3}",
                spread(&c.udp_flow_mbit),
                med(&c.udp_flow_mbit) / m
            ),
            format!(
                "{} {:.3}",
                spread(&c.tcp_flow_mbit),
                med(&c.tcp_flow_mbit) / m
            ),
            est.join(" | ")
        );
    }
}
