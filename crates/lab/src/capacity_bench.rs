//! `mgrp bench capacity`: configured vs measured capacity of the testbed's shaper, what a
//! saturating UDP and TCP flow get through it, and what the packet-train capacity estimator reads.

use crate::rig::Worker;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::client::Session;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::capacity::{CapacityEstimator, CapacityParams};
use mgrp_testbed::capacity;
use mgrp_testbed::{DelayMode, Shaper, Testbed, TestbedConfig};
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CapacityConfig {
    /// Configured capacities, Mbit/s.
    pub capacities: Vec<f64>,
    /// Shapers: htb, tbf.
    pub shapers: Vec<String>,
    /// Probes per train of the capacity estimator.
    pub probes: Vec<usize>,
    /// Repetitions per cell (each: a flood, a UDP flow, a TCP flow, one estimate per train length).
    pub reps: u32,
    /// Seconds each saturating flow runs (the first and last quarter are not counted).
    pub flow_secs: f64,
}

/// Port of the saturating flows (below the generators' 5200 and the flood's 5199).
const FLOW_PORT: u16 = 5198;

#[derive(Serialize)]
pub struct Cell {
    pub shaper: String,
    pub configured_mbit: f64,
    /// Flood measurements (the testbed's own, at `up` and once per repetition).
    pub measured_mbit: Vec<f64>,
    pub udp_flow_mbit: Vec<f64>,
    pub tcp_flow_mbit: Vec<f64>,
    /// Capacity estimates per train length.
    pub estimates: Vec<EstimateRow>,
}

#[derive(Serialize)]
pub struct EstimateRow {
    pub probes: usize,
    pub mbit: Vec<f64>,
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

fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

impl CapacityConfig {
    pub fn check(&self) -> Result<()> {
        ensure(
            self.capacities.iter().all(|c| (1.0..=1000.0).contains(c)),
            "capacities must be 1..=1000 Mbit/s",
        )?;
        ensure(
            (1..=100).contains(&self.reps) && (0.5..=60.0).contains(&self.flow_secs),
            "--reps must be 1..=100 and --flow-secs 0.5..=60",
        )?;
        ensure(
            self.probes.iter().all(|p| (3..=100).contains(p)),
            "--probes must be 3..=100",
        )
    }
}

pub fn run(cfg: &CapacityConfig, hooks: Hooks) -> Result<Vec<Cell>> {
    cfg.check()?;
    let mut cells = Vec::new();
    for sh in &cfg.shapers {
        let shaper = match sh.as_str() {
            "htb" => Shaper::Htb,
            "tbf" => Shaper::Tbf,
            other => {
                return Err(Error::Config(format!(
                    "unknown shaper {other:?}: use htb, tbf"
                )))
            }
        };
        for &cap in &cfg.capacities {
            let c = (cap * 1e6) as u64;
            let tb = Testbed::up(
                TestbedConfig {
                    capacity_bps: c,
                    shaper,
                    ..Default::default()
                },
                DelayMode::Thread,
            )?;
            let worker = Worker::start(&tb, "bench-capacity", estimate_capacity)?;
            let mut cell = Cell {
                shaper: sh.clone(),
                configured_mbit: cap,
                measured_mbit: tb.capacity().measured_bps.into_iter().map(mbit).collect(),
                udp_flow_mbit: vec![],
                tcp_flow_mbit: vec![],
                estimates: cfg
                    .probes
                    .iter()
                    .map(|&probes| EstimateRow {
                        probes,
                        mbit: vec![],
                    })
                    .collect(),
            };
            for rep in 0..cfg.reps {
                if hooks.stopped() {
                    return Err(Error::Interrupted);
                }
                hooks.say(&format!(
                    "\r{sh} {cap} Mbit/s rep {}/{}      ",
                    rep + 1,
                    cfg.reps
                ));
                for row in cell.estimates.iter_mut() {
                    let r = worker.ask(row.probes, Duration::from_secs(30))?;
                    row.mbit.push(mbit(r.map_err(Error::Worker)?));
                }
                let udp = format!("cbr:{}bit", c * 5 / 4);
                cell.udp_flow_mbit.push(mbit(capacity::saturating_flow(
                    &tb,
                    &udp,
                    FLOW_PORT,
                    cfg.flow_secs,
                )?));
                cell.tcp_flow_mbit.push(mbit(capacity::saturating_flow(
                    &tb,
                    "tcp:4",
                    FLOW_PORT,
                    cfg.flow_secs,
                )?));
                let m = tb.measure_capacity()?;
                cell.measured_mbit.extend(m.measured_bps.map(mbit));
            }
            hooks.say(&format!("\r{:60}\r", ""));
            cells.push(cell);
        }
    }
    Ok(cells)
}
