//! `mgrp bench tcp-available`: what `mgrp tcp-available` reads against what real TCP flows get
//! in the same conditions (issue "Estimates an application can act on", item 4).
//!
//! Per cell (capacity × cross traffic) and repetition: the cross traffic alone for
//! `settle_s`, one tcp-available measurement, then `real_flows` plain bulk flows on the same
//! congestion control, each after the cross traffic had the link alone again for `settle_s`;
//! every flow's goodput over its seconds 2–6 (the quantity the judge measures). Truth = the
//! median of the real flows; their own spread is reported beside, since one flow's share over
//! seconds is itself a random quantity.

use crate::rig::{agent_at_rcv, connect, setup};
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::run::run_tcp_avail;
use mgrp_estimate::tcp_avail::TcpAvailParams;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TcpAvailConfig {
    /// Configured capacities, Mbit/s.
    pub capacities: Vec<f64>,
    /// Cross traffic patterns (the testbed's syntax, e.g. `tcp:1,cc=cubic`).
    pub cross: Vec<String>,
    pub reps: u32,
    /// Real flows per repetition (their median is the truth).
    pub real_flows: u32,
    /// Congestion control of the measuring and the real flows.
    pub cc: String,
    /// The cross traffic alone before each flow, s.
    pub settle_s: f64,
}

impl Default for TcpAvailConfig {
    fn default() -> Self {
        TcpAvailConfig {
            capacities: vec![20.0, 100.0],
            cross: vec!["tcp:1,cc=cubic".into(), "tcp:4,cc=cubic".into()],
            reps: 5,
            real_flows: 3,
            cc: "cubic".into(),
            settle_s: 3.0,
        }
    }
}

impl TcpAvailConfig {
    pub fn check(&self) -> Result<()> {
        ensure(
            !self.capacities.is_empty()
                && self.capacities.iter().all(|c| (1.0..=1000.0).contains(c)),
            "capacities must be 1..=1000 Mbit/s",
        )?;
        ensure(!self.cross.is_empty(), "no cross traffic given")?;
        for c in &self.cross {
            CrossPattern::parse(c).map_err(|e| Error::Config(format!("cross {c:?}: {e}")))?;
        }
        ensure((1..=100).contains(&self.reps), "--reps must be 1..=100")?;
        ensure(
            (1..=15).contains(&self.real_flows),
            "--real-flows must be 1..=15",
        )?;
        ensure(
            (0.0..=60.0).contains(&self.settle_s),
            "--settle must be 0..=60 s",
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Rep {
    pub estimate_mbit: f64,
    pub low_mbit: f64,
    pub high_mbit: f64,
    pub confidence: f64,
    pub stopped_by: String,
    pub seconds: f64,
    /// Each real flow's goodput over its seconds 2–6.
    pub real_mbit: Vec<f64>,
    /// Their median.
    pub truth_mbit: f64,
    /// |estimate − truth| / truth.
    pub error: f64,
    /// The stated range holds the truth.
    pub covered: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub configured_mbit: f64,
    pub measured_mbit: f64,
    pub cross: String,
    pub reps: Vec<Rep>,
    pub median_error: f64,
    pub p90_error: f64,
    pub coverage: f64,
    /// Median over repetitions of the real flows' (max − min) / median: how far one flow is
    /// from another in the same conditions.
    pub real_spread: f64,
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    mgrp_estimate::stats::quantile_sorted(v, 0.5).unwrap_or(f64::NAN)
}

fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    mgrp_estimate::stats::quantile_sorted(v, 0.9).unwrap_or(f64::NAN)
}

/// A plain bulk flow for 6 s from snd: its goodput over seconds 2–6, bit/s.
fn real_flow(tb: &Testbed, agent: SocketAddr, key: &Key, cc: &str) -> Result<f64> {
    let (key, cc) = (key.clone(), cc.to_string());
    setup(&tb.ns(Role::Snd), "real-flow", move || {
        let f = connect(agent, &key)
            .and_then(|s| s.into_load(Duration::from_secs(7), 1 << 32, Some(&cc)))
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_secs(2));
        let a = f.sample().map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_secs(4));
        let b = f.sample().map_err(|e| e.to_string())?;
        f.stop();
        Ok((b.bytes_acked - a.bytes_acked) as f64 * 8.0 / (b.t_s - a.t_s))
    })
}

fn one_rep(tb: &Testbed, agent: SocketAddr, key: &Key, cfg: &TcpAvailConfig) -> Result<Rep> {
    let settle = Duration::from_secs_f64(cfg.settle_s);
    std::thread::sleep(settle);
    let (k, cc) = (key.clone(), cfg.cc.clone());
    let run = setup(&tb.ns(Role::Snd), "tcp-avail", move || {
        let s = connect(agent, &k).map_err(|e| e.to_string())?;
        run_tcp_avail(s, &TcpAvailParams::default(), Some(&cc), || false, |_| {})
            .map_err(|e| e.to_string())
    })?;
    let e = run
        .estimate
        .ok_or_else(|| Error::Worker(format!("no tcp-available estimate ({})", run.why)))?;
    let mut real_mbit = Vec::new();
    for _ in 0..cfg.real_flows {
        std::thread::sleep(settle);
        real_mbit.push(real_flow(tb, agent, key, &cfg.cc)? / 1e6);
    }
    let truth = median(&mut real_mbit.clone());
    let v = e.value_bps / 1e6;
    Ok(Rep {
        estimate_mbit: v,
        low_mbit: e.low_bps / 1e6,
        high_mbit: e.high_bps / 1e6,
        confidence: e.quality.confidence,
        stopped_by: run.why.to_string(),
        seconds: e.quality.elapsed_s,
        truth_mbit: truth,
        error: if truth > 0.0 {
            (v - truth).abs() / truth
        } else {
            f64::NAN
        },
        covered: e.low_bps / 1e6 <= truth && truth <= e.high_bps / 1e6,
        real_mbit,
    })
}

pub fn run(cfg: &TcpAvailConfig, hooks: Hooks) -> Result<Vec<Cell>> {
    cfg.check()?;
    let mut cells = Vec::new();
    for &cap in &cfg.capacities {
        for cross in &cfg.cross {
            let tb = Testbed::up(
                TestbedConfig {
                    capacity_bps: (cap * 1e6) as u64,
                    ..Default::default()
                },
                DelayMode::Thread,
            )?;
            let measured = tb.capacity().bps() / 1e6;
            let key = Key::random();
            let (_agent, addr) = agent_at_rcv(&tb, &key)?;
            let pattern = CrossPattern::parse(cross)
                .map_err(|e| Error::Config(format!("cross {cross:?}: {e}")))?;
            let per_rep = cfg.settle_s * (1 + cfg.real_flows) as f64 + 7.0 * cfg.real_flows as f64;
            let traffic = CrossTraffic::start(
                &tb,
                &pattern,
                BASE_PORT,
                &GenOptions {
                    max_duration: Duration::from_secs_f64((per_rep + 8.0) * cfg.reps as f64 + 30.0),
                    ..GenOptions::default()
                },
            )?;
            let mut reps = Vec::new();
            for rep in 0..cfg.reps {
                if hooks.stopped() {
                    return Err(Error::Interrupted);
                }
                hooks.say(&format!(
                    "\r{cap} Mbit/s, {cross}: rep {}/{}      ",
                    rep + 1,
                    cfg.reps
                ));
                reps.push(one_rep(&tb, addr, &key, cfg)?);
            }
            traffic.stop()?;
            hooks.say(&format!("\r{:70}\r", ""));
            let mut errs: Vec<f64> = reps.iter().map(|r| r.error).collect();
            let mut spreads: Vec<f64> = reps
                .iter()
                .map(|r| {
                    let lo = r.real_mbit.iter().cloned().fold(f64::INFINITY, f64::min);
                    let hi = r.real_mbit.iter().cloned().fold(0.0, f64::max);
                    (hi - lo) / r.truth_mbit
                })
                .collect();
            cells.push(Cell {
                configured_mbit: cap,
                measured_mbit: measured,
                cross: cross.clone(),
                median_error: median(&mut errs),
                p90_error: p90(&mut errs),
                coverage: reps.iter().filter(|r| r.covered).count() as f64 / reps.len() as f64,
                real_spread: median(&mut spreads),
                reps,
            });
        }
    }
    Ok(cells)
}
