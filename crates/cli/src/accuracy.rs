//! `mgrp bench accuracy`: every method against the bottleneck's ground truth over a grid.

use crate::bench_cmd::AccuracyBench;
use crate::methods::Method;
use crate::say;
use anyhow::{anyhow, bail, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::Estimate;
use mgrp_testbed::generator::CrossTraffic;
use mgrp_testbed::{CrossPattern, DelayMode, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::time::{Duration, Instant};

/// One estimator run, timed on CLOCK_MONOTONIC.
struct Outcome {
    estimate: Option<Estimate>,
    /// Start of the run (capacity phase included), first estimate of the method, end.
    start_ns: u64,
    method_start_ns: u64,
    first_ns: Option<u64>,
    end_ns: u64,
    bytes: u64,
}

#[derive(Serialize, Clone)]
struct Run {
    capacity_mbit: f64,
    kind: String,
    load_pct: Option<u32>,
    method: String,
    rep: u32,
    estimate_mbit: Option<f64>,
    low_mbit: Option<f64>,
    high_mbit: Option<f64>,
    truth_mbit: f64,
    /// |estimate − truth| / max(truth, 5% of C).
    rel_error: Option<f64>,
    first_s: Option<f64>,
    final_s: f64,
    probe_bytes: u64,
    converged: bool,
}

fn pattern(kind: &str, load: u32, c: f64) -> Result<Option<CrossPattern>> {
    let r = c * load as f64 / 100.0;
    let mb = |x: f64| format!("{:.3}mbit", x / 1e6);
    let spec = match kind {
        _ if load == 0 && !kind.starts_with("tcp") => return Ok(None),
        "cbr" => format!("cbr:{}", mb(r)),
        "poisson" => format!("poisson:{}", mb(r)),
        "onoff" => format!("onoff:{},on=50ms,off=50ms", mb(r)),
        // Mean `r`, stepping ±50% every second.
        "step" => format!("step:{},{},{},every=1s", mb(r), mb(1.5 * r), mb(0.5 * r)),
        "tcp1" => "tcp:1".into(),
        "tcp4" => "tcp:4".into(),
        other => bail!("unknown kind {other:?}: use cbr, poisson, onoff, step, tcp1, tcp4"),
    };
    Ok(Some(CrossPattern::parse(&spec)?))
}

/// One method run over the session, as `mgrp estimate` runs it.
fn run_method(method: &str, s: &mut Session) -> Result<Outcome, String> {
    let e = |e: mgrp_engine::Error| e.to_string();
    let start_ns = mgrp_clock::now_ns();
    let deadline = Instant::now() + Duration::from_secs(40);
    let method = Method::parse(method)?;
    // Methods that need the capacity measure it first, as `mgrp estimate` does; `auto`
    // measures its own and is timed from its start.
    let (capacity, cbytes) = if method.needs_capacity() {
        let mut cap = Method::capacity_estimator();
        let c = run_estimator(s, &mut cap, deadline, || false, |_| {})
            .map_err(e)?
            .ok_or("no capacity estimate")?;
        (Some(c.value_bps), c.quality.probe_bytes)
    } else {
        (None, 0)
    };
    let method_start_ns = mgrp_clock::now_ns();
    let mut est = method.build(capacity)?;
    let mut first_ns = None;
    let out = run_estimator(
        s,
        est.as_mut(),
        deadline,
        || false,
        |p| {
            if p.estimate.is_some() && first_ns.is_none() {
                first_ns = Some(mgrp_clock::now_ns());
            }
        },
    )
    .map_err(e)?;
    let bytes = cbytes + out.as_ref().map_or(0, |o| o.quality.probe_bytes);
    Ok(Outcome {
        estimate: out,
        start_ns,
        method_start_ns,
        first_ns,
        end_ns: mgrp_clock::now_ns(),
        bytes,
    })
}

pub fn run(b: AccuracyBench) -> Result<()> {
    for m in &b.methods {
        if Method::parse(m).map_err(anyhow::Error::msg)? == Method::Capacity {
            bail!("bench accuracy scores available bandwidth: leave `capacity` out of --methods");
        }
    }
    anyhow::ensure!(b.reps >= 1 && b.reps <= 50, "--reps must be 1..=50");
    anyhow::ensure!(
        b.capacities.iter().all(|c| (1.0..=1000.0).contains(c)),
        "capacities must be 1..=1000 Mbit/s"
    );
    anyhow::ensure!(b.loads.iter().all(|l| *l < 100), "loads must be below 100%");
    let mut runs: Vec<Run> = Vec::new();
    for &cap in &b.capacities {
        let c = cap * 1e6;
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: c as u64,
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        let key = Key::random();
        let (_agent, _) = crate::live_estimate::agent_at_rcv(&tb, &key)?;
        let (jobs, results) = crate::live_estimate::session_worker(
            &tb,
            key,
            "bench-estimator",
            |method: String, s: &mut Session| run_method(&method, s),
        )?;
        // Cells: the idle path once, UDP kinds at each non-zero load, TCP once.
        let mut cells: Vec<(String, Option<u32>)> = Vec::new();
        if b.loads.contains(&0) {
            cells.push(("idle".into(), Some(0)));
        }
        for kind in &b.kinds {
            if kind.starts_with("tcp") {
                cells.push((kind.clone(), None));
            } else {
                cells.extend(
                    b.loads
                        .iter()
                        .filter(|l| **l > 0)
                        .map(|l| (kind.clone(), Some(*l))),
                );
            }
        }
        for (kind, load) in cells {
            let p = if kind == "idle" {
                None
            } else {
                pattern(&kind, load.unwrap_or(0), c)?
            };
            let sampler = TruthSampler::start(&tb, Duration::from_millis(50))?;
            let gen = CrossTraffic::start_if(&tb, p.as_ref())?;
            // TCP needs its slow start behind it; UDP a moment to fill the queue's steady state.
            std::thread::sleep(Duration::from_millis(if kind.starts_with("tcp") {
                2000
            } else {
                500
            }));
            for rep in 0..b.reps {
                for method in &b.methods {
                    if crate::signals::interrupted() {
                        bail!("interrupted");
                    }
                    eprint!(
                        "\r{cap} Mbit/s {kind} {:>3}% {method:<10} rep {}/{}      ",
                        load.unwrap_or(0),
                        rep + 1,
                        b.reps
                    );
                    jobs.send(method.clone())
                        .map_err(|_| anyhow!("estimator worker ended"))?;
                    let o = results
                        .recv_timeout(Duration::from_secs(60))
                        .map_err(|_| anyhow!("estimator worker timed out"))?
                        .map_err(|e| anyhow!(e))?;
                    // The truth over the method's run, at least its last 500 ms (shorter windows
                    // would be interpolated between a couple of samples); wait for a sample past
                    // its end.
                    let from = o.method_start_ns.min(o.end_ns.saturating_sub(500_000_000));
                    let covered = Instant::now() + Duration::from_millis(500);
                    while sampler
                        .truth()
                        .samples
                        .last()
                        .is_none_or(|s| s.t_ns < o.end_ns)
                        && Instant::now() < covered
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let truth = sampler
                        .truth()
                        .window(from, o.end_ns)
                        .map_or(f64::NAN, |w| w.avail_bps);
                    let e = o.estimate.as_ref();
                    runs.push(Run {
                        capacity_mbit: cap,
                        kind: kind.clone(),
                        load_pct: load,
                        method: method.clone(),
                        rep,
                        estimate_mbit: e.map(|e| e.value_bps / 1e6),
                        low_mbit: e.map(|e| e.low_bps / 1e6),
                        high_mbit: e.map(|e| e.high_bps / 1e6),
                        truth_mbit: truth / 1e6,
                        rel_error: e
                            .filter(|_| truth.is_finite())
                            .map(|e| (e.value_bps - truth).abs() / truth.max(0.05 * c)),
                        first_s: o.first_ns.map(|f| (f - o.start_ns) as f64 / 1e9),
                        final_s: (o.end_ns - o.start_ns) as f64 / 1e9,
                        probe_bytes: o.bytes,
                        converged: e.is_some_and(|e| e.final_),
                    });
                }
            }
            if let Some(g) = gen {
                g.stop()?;
            }
            drop(sampler);
        }
        drop(jobs);
    }
    eprintln!();
    let json = serde_json::to_string_pretty(&runs)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    table(&runs, &b.methods);
    Ok(())
}

/// The `p` quantile (nearest rank) of `v`; NaN for none.
fn q(v: Vec<f64>, p: f64) -> f64 {
    quantile(v, p).unwrap_or(f64::NAN)
}

/// The `p` quantile (nearest rank) of `v`, if it has any values.
pub(crate) fn quantile(mut v: Vec<f64>, p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)])
}

fn table(runs: &[Run], methods: &[String]) {
    say!("Per method over the whole grid (error = |estimate − truth| / max(truth, 5% C); times from the start, capacity phase included):");
    say!("| method | runs | median err | p90 err | first (median s) | final (median s) | bytes (median kB) | bytes / slops-slow | converged |");
    say!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let same_cell = |a: &Run, b: &Run| {
        a.capacity_mbit == b.capacity_mbit && a.kind == b.kind && a.load_pct == b.load_pct
    };
    for m in methods {
        let r: Vec<&Run> = runs.iter().filter(|r| &r.method == m).collect();
        let errs: Vec<f64> = r.iter().filter_map(|r| r.rel_error).collect();
        // Bytes against the classic tool's in the same cell (its median over reps).
        let ratios: Vec<f64> = r
            .iter()
            .filter_map(|x| {
                let classic: Vec<f64> = runs
                    .iter()
                    .filter(|y| y.method == "slops-slow" && same_cell(x, y))
                    .map(|y| y.probe_bytes as f64)
                    .collect();
                (!classic.is_empty()).then(|| x.probe_bytes as f64 / q(classic, 0.5))
            })
            .collect();
        say!(
            "| {m} | {} | {:.1}% | {:.1}% | {:.2} | {:.2} | {:.0} | {} | {}/{} |",
            r.len(),
            q(errs.clone(), 0.5) * 100.0,
            q(errs, 0.9) * 100.0,
            q(r.iter().filter_map(|r| r.first_s).collect(), 0.5),
            q(r.iter().map(|r| r.final_s).collect(), 0.5),
            q(r.iter().map(|r| r.probe_bytes as f64 / 1e3).collect(), 0.5),
            if ratios.is_empty() {
                "—".to_string()
            } else {
                format!("{:.2}", q(ratios, 0.5))
            },
            r.iter().filter(|r| r.converged).count(),
            r.len()
        );
    }
    say!("\nPer cell (median over reps):");
    say!("| C | cross | load | method | estimate | truth | err | final s | kB |");
    say!("|---:|---|---:|---|---:|---:|---:|---:|---:|");
    let mut keys: Vec<(u64, String, Option<u32>, String)> = runs
        .iter()
        .map(|r| {
            (
                r.capacity_mbit as u64,
                r.kind.clone(),
                r.load_pct,
                r.method.clone(),
            )
        })
        .collect();
    keys.dedup();
    keys.sort();
    keys.dedup();
    for (c, kind, load, m) in keys {
        let r: Vec<&Run> = runs
            .iter()
            .filter(|r| {
                r.capacity_mbit as u64 == c && r.kind == kind && r.load_pct == load && r.method == m
            })
            .collect();
        say!(
            "| {c} | {kind} | {} | {m} | {:.2} | {:.2} | {:.1}% | {:.2} | {:.0} |",
            load.map(|l| format!("{l}%")).unwrap_or_else(|| "—".into()),
            q(r.iter().filter_map(|r| r.estimate_mbit).collect(), 0.5),
            q(r.iter().map(|r| r.truth_mbit).collect(), 0.5),
            q(r.iter().filter_map(|r| r.rel_error).collect(), 0.5) * 100.0,
            q(r.iter().map(|r| r.final_s).collect(), 0.5),
            q(r.iter().map(|r| r.probe_bytes as f64 / 1e3).collect(), 0.5)
        );
    }
}
