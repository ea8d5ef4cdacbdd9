//! `mgrp bench capacity`: configured vs measured capacity of the testbed's shaper, what a
//! saturating UDP and TCP flow get through it, and what the packet-train capacity estimator reads.

use crate::say;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::capacity::{CapacityEstimator, CapacityParams};
use mgrp_testbed::capacity;
use mgrp_testbed::{DelayMode, Shaper, Testbed, TestbedConfig};
use serde::Serialize;
use std::time::{Duration, Instant};

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

/// Port of the saturating flows (below the generators' 5200 and the flood's 5199).
const FLOW_PORT: u16 = 5198;

#[derive(Serialize)]
struct Cell {
    shaper: String,
    configured_mbit: f64,
    /// Flood measurements (the testbed's own, at `up` and once per repetition).
    measured_mbit: Vec<f64>,
    udp_flow_mbit: Vec<f64>,
    tcp_flow_mbit: Vec<f64>,
    /// Capacity estimates per train length.
    estimates: Vec<EstimateRow>,
}

#[derive(Serialize)]
struct EstimateRow {
    probes: usize,
    mbit: Vec<f64>,
}

/// One capacity estimate of 6 trains of `probes` over the session.
fn estimate_capacity(probes: usize, s: &mut Session) -> Result<f64, String> {
    let mut est = CapacityEstimator::new(CapacityParams {
        trains: 6,
        probes,
        ..CapacityParams::default()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    run_estimator(s, &mut est, deadline, || false, |_| {})
        .map_err(|e| e.to_string())
        .and_then(|o| o.map(|e| e.value_bps).ok_or_else(|| "no estimate".into()))
}

pub fn run(b: CapacityBench) -> Result<()> {
    if b.capacities.iter().any(|c| !(1.0..=1000.0).contains(c)) {
        bail!("capacities must be 1..=1000 Mbit/s");
    }
    if !(1..=100).contains(&b.reps) || !(0.5..=60.0).contains(&b.flow_secs) {
        bail!("--reps must be 1..=100 and --flow-secs 0.5..=60");
    }
    if b.probes.iter().any(|p| !(3..=100).contains(p)) {
        bail!("--probes must be 3..=100");
    }
    let mut cells = Vec::new();
    for sh in &b.shapers {
        let shaper = match sh.as_str() {
            "htb" => Shaper::Htb,
            "tbf" => Shaper::Tbf,
            other => bail!("unknown shaper {other:?}: use htb, tbf"),
        };
        for &cap in &b.capacities {
            let c = (cap * 1e6) as u64;
            let tb = Testbed::up(
                TestbedConfig {
                    capacity_bps: c,
                    shaper,
                    ..Default::default()
                },
                DelayMode::Thread,
            )?;
            let key = Key::random();
            let (_agent, _) = crate::live_estimate::agent_at_rcv(&tb, &key)?;
            let (jobs, results) = crate::live_estimate::session_worker(
                &tb,
                key,
                "bench-capacity",
                estimate_capacity,
            )?;
            let mut cell = Cell {
                shaper: sh.clone(),
                configured_mbit: cap,
                measured_mbit: tb.capacity().measured_bps.into_iter().map(mbit).collect(),
                udp_flow_mbit: vec![],
                tcp_flow_mbit: vec![],
                estimates: b
                    .probes
                    .iter()
                    .map(|&probes| EstimateRow {
                        probes,
                        mbit: vec![],
                    })
                    .collect(),
            };
            for rep in 0..b.reps {
                if crate::signals::interrupted() {
                    bail!("interrupted");
                }
                eprint!("\r{sh} {cap} Mbit/s rep {}/{}      ", rep + 1, b.reps);
                for row in cell.estimates.iter_mut() {
                    jobs.send(row.probes)
                        .map_err(|_| anyhow!("estimator worker ended"))?;
                    let r = results
                        .recv_timeout(Duration::from_secs(30))
                        .map_err(|_| anyhow!("estimator worker timed out"))?;
                    row.mbit.push(mbit(r.map_err(|e| anyhow!(e))?));
                }
                let udp = format!("cbr:{}bit", c * 5 / 4);
                cell.udp_flow_mbit.push(mbit(capacity::saturating_flow(
                    &tb,
                    &udp,
                    FLOW_PORT,
                    b.flow_secs,
                )?));
                cell.tcp_flow_mbit.push(mbit(capacity::saturating_flow(
                    &tb,
                    "tcp:4",
                    FLOW_PORT,
                    b.flow_secs,
                )?));
                let m = tb.measure_capacity()?;
                cell.measured_mbit.extend(m.measured_bps.map(mbit));
            }
            eprint!("\r{:60}\r", "");
            cells.push(cell);
        }
    }
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

fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

fn med(v: &[f64]) -> f64 {
    crate::accuracy::quantile(v.to_vec(), 0.5).unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> String {
    let lo = crate::accuracy::quantile(v.to_vec(), 0.0).unwrap_or(f64::NAN);
    let hi = crate::accuracy::quantile(v.to_vec(), 1.0).unwrap_or(f64::NAN);
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
