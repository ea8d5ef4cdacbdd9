//! `mgrp estimate PEER`: capacity and available bandwidth of the path to a peer agent.

use crate::say;
use anyhow::{bail, Result};
use clap::Args;
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::{run_estimator, Progress};
use mgrp_estimate::methods::Method;
use mgrp_estimate::{Estimate, Estimator};
use mgrp_service::track::PacedTracker;
use mgrp_testbed::units::fmt_rate;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct EstimateArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    /// The method (default auto; with --continuous the default is tracking, see --ceiling).
    #[arg(long, value_parser = crate::methods::parser())]
    method: Option<Method>,
    /// Give up (reporting what is known) after this long; with --continuous, run this long.
    #[arg(long, default_value = "60s", value_parser = crate::testbed_cmd::duration)]
    duration: Duration,
    /// Estimate again and again until --duration ends or Ctrl-C, one line (or JSON object)
    /// per estimate; the capacity is measured once.
    #[arg(long)]
    continuous: bool,
    /// With --continuous and no --method: track the estimate (one full search, then short
    /// checks that it still holds), keeping the probe load at most this share of capacity
    /// (2% or 0.02; docs/tracking.md).
    #[arg(long, default_value = "2%")]
    ceiling: String,
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
    /// Trains sent, and those the host stole CPU from while they were out (sent again: on a
    /// VM whose hypervisor steals, estimates take longer and this says why).
    trains: u32,
    stolen_trains: u32,
}

fn show(e: &Estimate) -> String {
    format!(
        "{} [{} .. {}]",
        fmt_rate(e.value_bps),
        fmt_rate(e.low_bps),
        fmt_rate(e.high_bps)
    )
}

/// One estimate of a continuous run, as a JSON line.
#[derive(Serialize)]
struct Line<'a> {
    round: u32,
    t_s: f64,
    estimate: &'a Estimate,
    /// Tracking: the probe frames of the minute before, as a share of C (what the ceiling
    /// bounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    minute_load_share: Option<f64>,
}

pub fn run(a: EstimateArgs) -> Result<()> {
    let peer = parse_peer(&a.peer)?;
    let ceiling = mgrp_service::config::parse_share(&a.ceiling)
        .map_err(|e| anyhow::anyhow!("--ceiling: {e}"))?;
    let tracking = a.continuous && a.method.is_none();
    let method = a.method.unwrap_or(Method::Auto);
    let max = if a.continuous { 24 * 3600 } else { 3600 };
    if a.duration.is_zero() || a.duration > Duration::from_secs(max) {
        bail!(
            "--duration must be between 1ms and {}",
            if a.continuous { "24h" } else { "1h" }
        );
    }
    if let Some(c) = a.capacity {
        if !(1_000..=400_000_000_000).contains(&c) {
            bail!("--capacity must be between 1kbit and 400gbit");
        }
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
    let stop = crate::signals::interrupted;
    // Trains sent and stolen from, over every round.
    let (trains, stolen) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let (trains_ref, stolen_ref) = (&trains, &stolen);
    // A progress line (stderr) whenever the estimate moves.
    let progress = |phase: &'static str| {
        let mut last: Option<(f64, f64)> = None;
        move |p: &Progress| {
            trains_ref.set(trains_ref.get() + 1);
            stolen_ref.set(stolen_ref.get() + p.stolen as u32);
            let now = p.estimate.as_ref().map(|e| (e.low_bps, e.high_bps));
            if now == last {
                return;
            }
            last = now;
            let est = p
                .estimate
                .as_ref()
                .map(|e| format!("{} {}", show(e), e.quality.method))
                .unwrap_or_else(|| "-".into());
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
        trains: 0,
        stolen_trains: 0,
    };
    let mut capacity = a.capacity.map(|c| c as f64);
    if tracking {
        return track(&mut session, capacity, ceiling, deadline, a.json, t0);
    }
    // The method `capacity` with the capacity given has nothing left to measure.
    let skip = method == Method::Capacity && capacity.is_some();
    let mut round = 0u32;
    loop {
        if skip {
            break;
        }
        round += 1;
        // The first round of a method that needs the capacity measures it first.
        let mut est = method.build(capacity)?;
        // Progress lines follow the method's estimate (none during a capacity step).
        let e = run_estimator(
            &mut session,
            &mut est,
            deadline,
            stop,
            progress("available"),
        )?;
        if let Some(c) = est.capacity() {
            capacity = Some(c.value_bps);
            report.capacity = Some(c);
        }
        if method.needs_capacity() && capacity.is_none() {
            if stop() {
                bail!("interrupted before the capacity was known");
            }
            bail!("no capacity estimate: no probe train came back from {peer}");
        }
        if method == Method::Capacity {
            break;
        }
        if a.continuous {
            // Only whole estimates: one cut short by the deadline is not reported.
            if let Some(e) = e.as_ref().filter(|e| e.final_) {
                say_round(a.json, round, t0.elapsed().as_secs_f64(), e, None)?;
            }
        }
        if e.is_some() {
            report.available = e;
        }
        if !a.continuous || stop() || Instant::now() >= deadline {
            break;
        }
        if report.available.is_none() && capacity.is_none() {
            bail!("no estimate: no probe train came back from {peer}");
        }
    }
    report.elapsed_s = t0.elapsed().as_secs_f64();
    report.interrupted = stop();
    report.trains = trains.get();
    report.stolen_trains = stolen.get();
    if report.stolen_trains > 0 {
        eprintln!(
            "note: the host stole CPU while {} of {} trains were out (/proc/stat steal); they \
             were sent again, which is why this took longer",
            report.stolen_trains, report.trains
        );
    }
    if a.continuous {
        return Ok(());
    }
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
        say!("available  {}", summary(e));
    } else if method != Method::Capacity {
        say!("available  no estimate within {:?}", a.duration);
    }
    Ok(())
}

/// `--continuous` without a method: one tracker paced as the service paces it (the probe load
/// over any trailing minute at most `ceiling` × C), each round's estimate printed with that
/// minute's load.
fn track(
    session: &mut Session,
    capacity: Option<f64>,
    ceiling: f64,
    deadline: Instant,
    json: bool,
    t0: Instant,
) -> Result<()> {
    let stop = crate::signals::interrupted;
    let mut pt =
        PacedTracker::new(capacity, ceiling, mgrp_clock::now_ns()).map_err(anyhow::Error::msg)?;
    let mut round = 0u32;
    while !stop() && Instant::now() < deadline {
        // The ceiling's pause, in short slices so Ctrl-C and the deadline are seen.
        let left = pt.next_round_at().saturating_sub(mgrp_clock::now_ns());
        if left > 0 {
            std::thread::sleep(Duration::from_nanos(left).min(Duration::from_millis(50)));
            continue;
        }
        let Some(r) = pt.run_round(session, deadline, stop)? else {
            continue;
        };
        round += 1;
        match r.estimate.as_ref().filter(|e| e.final_) {
            Some(e) => {
                let load = pt.minute_load_share(r.end_ns);
                say_round(json, round, t0.elapsed().as_secs_f64(), e, load)?;
            }
            None if pt.tracker().held().is_none() && !stop() && Instant::now() < deadline => {
                bail!("no estimate: no probe train came back from the peer")
            }
            None => {}
        }
    }
    let s = pt.tracker().stats();
    eprintln!(
        "tracking: {} rounds, {} changes found, {:.1} kB of probes",
        s.rounds,
        s.changes,
        s.probe_bytes as f64 / 1e3
    );
    Ok(())
}

/// One estimate of a continuous run: a JSON line or a line for people; `load`: the probe load
/// of the minute before it as a share of C (tracking).
fn say_round(
    json: bool,
    round: u32,
    t_s: f64,
    estimate: &Estimate,
    load: Option<f64>,
) -> Result<()> {
    if json {
        say!(
            "{}",
            serde_json::to_string(&Line {
                round,
                t_s,
                estimate,
                minute_load_share: load,
            })?
        );
    } else {
        say!(
            "{t_s:>8.2} s  round {round:>4}  available {}{}",
            summary(estimate),
            load.map_or(String::new(), |l| format!(
                "  load {:.2}% of C over the last minute",
                l * 100.0
            ))
        );
    }
    Ok(())
}

fn summary(e: &Estimate) -> String {
    format!(
        "{}  ({}, {} trains, {:.1} kB, {:.2} s, confidence {:.2}{}{})",
        show(e),
        e.quality.method,
        e.quality.trains,
        e.quality.probe_bytes as f64 / 1e3,
        e.quality.elapsed_s,
        e.quality.confidence,
        e.quality
            .timescale_ms
            .map_or(String::new(), |ms| format!(", over {ms:.0} ms")),
        if e.final_ { "" } else { ", not converged" }
    )
}
