//! `mgrp bench mpat`: MPAT and mulTCP in the kernel against CUBIC (run by
//! `mgrp_lab::mpat_bench`); here the arguments, the files and the printing.

use anyhow::Result;
use clap::Args;
use mgrp_lab::mpat_bench::{MpatBenchConfig, MpatScenario};
use std::path::PathBuf;

#[derive(Args)]
pub struct MpatBench {
    /// Every scenario, short (about 3 minutes): a smoke run.
    #[arg(long)]
    quick: bool,
    /// Scenarios: weights, many, ladder, reweight, cbr.
    #[arg(long, value_delimiter = ',', value_parser = scenario)]
    scenarios: Option<Vec<MpatScenario>>,
    /// Bottleneck capacity, Mbit/s (default 90).
    #[arg(long)]
    capacity: Option<f64>,
    /// Seconds measured per run (default 40; quick 10).
    #[arg(long)]
    measure_secs: Option<f64>,
    /// Print the JSON document instead of the tables.
    #[arg(long)]
    json: bool,
    /// Write mpat.json and mpat.md (the tables) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn scenario(s: &str) -> Result<MpatScenario, String> {
    MpatScenario::parse(s).map_err(|e| e.to_string())
}

pub fn run(a: MpatBench) -> Result<()> {
    let mut cfg = if a.quick {
        MpatBenchConfig::quick()
    } else {
        MpatBenchConfig::standard()
    };
    if let Some(s) = a.scenarios {
        cfg.scenarios = s;
    }
    if let Some(c) = a.capacity {
        cfg.capacity_mbit = c;
    }
    if let Some(m) = a.measure_secs {
        cfg.measure_s = m;
    }
    cfg.check()?;
    crate::signals::catch_signals();
    let report = mgrp_lab::mpat_bench::run(&cfg, crate::signals::hooks())?;
    let json =
        serde_json::to_string_pretty(&serde_json::json!({ "config": cfg, "report": report }))?;
    let text = mgrp_lab::mpat_bench::tables(&report);
    crate::output::emit_bench(a.out.as_deref(), "mpat", &json, &text, a.json)
}
