//! `mgrp estimate PEER`: capacity and available bandwidth of the path to a peer agent.

use crate::say;
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::{run_estimator, Progress};
use mgrp_estimate::capacity::{CapacityEstimator, CapacityParams};
use mgrp_estimate::slops::{Pace, Slops, SlopsParams};
use mgrp_estimate::sweep::{Sweep, SweepParams};
use mgrp_estimate::{Estimate, Estimator};
use mgrp_testbed::units::fmt_rate;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Method {
    /// Capacity from back-to-back packet trains (dispersion mode).
    Capacity,
    /// Available bandwidth with pathload's SLoPS, fast pacing (pFAST); capacity first.
    Slops,
    /// SLoPS with pathload's original pacing (pSLOW).
    SlopsSlow,
    /// ImTCP's sub-range sweep: 5-probe streams, a result every few round trips (10 results).
    Sweep,
}

#[derive(Args)]
pub struct EstimateArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    #[arg(long, value_enum, default_value_t = Method::Slops)]
    method: Method,
    /// Give up (reporting what is known) after this long.
    #[arg(long, default_value = "60s", value_parser = crate::testbed_cmd::duration)]
    duration: Duration,
    /// Known capacity: skip measuring it (SLoPS searches below it).
    #[arg(long, value_parser = crate::testbed_cmd::rate)]
    capacity: Option<u64>,
    /// Key file (hex); otherwise MGRP_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Print the final result as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    peer: String,
    capacity: Option<Estimate>,
    available: Option<Estimate>,
    elapsed_s: f64,
    interrupted: bool,
}

fn show(e: &Estimate) -> String {
    format!(
        "{} [{} .. {}]",
        fmt_rate(e.value_bps),
        fmt_rate(e.low_bps),
        fmt_rate(e.high_bps)
    )
}

pub fn run(a: EstimateArgs) -> Result<()> {
    let peer = parse_peer(&a.peer)?;
    if a.duration.is_zero() || a.duration > Duration::from_secs(3600) {
        bail!("--duration must be between 1ms and 1h");
    }
    let key = Key::load(a.key_file.as_deref())?;
    crate::signals::catch_signals();
    let mut session = Session::connect(
        peer,
        &key,
        Arc::new(Pacer::spawn()?),
        Duration::from_secs(3),
    )?;
    let t0 = Instant::now();
    let deadline = t0 + a.duration;
    // A line whenever the estimate moves.
    let progress = |phase: &'static str| {
        let mut last: Option<(f64, f64)> = None;
        move |p: &Progress| {
            let now = p.estimate.as_ref().map(|e| (e.low_bps, e.high_bps));
            if now == last {
                return;
            }
            last = now;
            let est = p.estimate.as_ref().map(show).unwrap_or_else(|| "-".into());
            eprintln!(
                "{phase:>9} {:>7.2} s  trains {:>4}  probes {:>8.1} kB  {}",
                p.elapsed.as_secs_f64(),
                p.trains,
                p.probe_bytes as f64 / 1e3,
                est,
            );
        }
    };
    let mut report = Report {
        peer: peer.to_string(),
        capacity: None,
        available: None,
        elapsed_s: 0.0,
        interrupted: false,
    };
    let capacity = match a.capacity {
        Some(c) => c as f64,
        None => {
            let mut est = CapacityEstimator::new(CapacityParams::default());
            let e = run_estimator(
                &mut session,
                &mut est,
                deadline,
                crate::signals::interrupted,
                progress("capacity"),
            )?;
            report.capacity = e.clone();
            match e {
                Some(e) => e.value_bps,
                None => bail!("no capacity estimate: no probe train came back from {peer}"),
            }
        }
    };
    if a.method == Method::Sweep {
        let mut est = Sweep::new(SweepParams::new(capacity));
        report.available = run_estimator(
            &mut session,
            &mut est,
            deadline,
            crate::signals::interrupted,
            progress("available"),
        )?;
    } else if a.method != Method::Capacity {
        let pace = if a.method == Method::SlopsSlow {
            Pace::Slow
        } else {
            Pace::Fast
        };
        let mut est = Slops::new(SlopsParams::for_capacity(capacity, pace));
        report.available = run_estimator(
            &mut session,
            &mut est as &mut dyn Estimator,
            deadline,
            crate::signals::interrupted,
            progress("available"),
        )?;
    }
    report.elapsed_s = t0.elapsed().as_secs_f64();
    report.interrupted = crate::signals::interrupted();
    if a.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    if let Some(c) = &report.capacity {
        say!(
            "capacity   {}  ({} trains, {:.1} kB, {:.2} s, {:.0}% of trains agree)",
            show(c),
            c.quality.trains,
            c.quality.probe_bytes as f64 / 1e3,
            c.quality.elapsed_s,
            c.quality.confidence * 100.0
        );
    }
    if let Some(e) = &report.available {
        say!(
            "available  {}  ({}, {} streams, {:.1} kB, {:.2} s{})",
            show(e),
            e.quality.method,
            e.quality.trains,
            e.quality.probe_bytes as f64 / 1e3,
            e.quality.elapsed_s,
            if e.final_ { "" } else { ", not converged" }
        );
    } else if a.method != Method::Capacity {
        say!("available  no estimate within {:?}", a.duration);
    }
    Ok(())
}
