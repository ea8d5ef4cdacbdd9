//! `mgrp bench accuracy`: every method against the bottleneck's ground truth over a grid (run
//! by `mgrp_lab::accuracy`); here the arguments and the tables.

use crate::bench_cmd::AccuracyBench;
use crate::say;
use anyhow::Result;
use mgrp_estimate::methods::Method;
use mgrp_estimate::stats::quantile;
use mgrp_lab::accuracy::{AccuracyConfig, Run};

pub fn run(b: AccuracyBench) -> Result<()> {
    let methods = b
        .methods
        .iter()
        .map(|m| Method::from_name(m))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = AccuracyConfig {
        capacities: b.capacities,
        kinds: b.kinds,
        loads: b.loads,
        methods: methods.clone(),
        reps: b.reps,
    };
    let runs = mgrp_lab::accuracy::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&runs)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    let names: Vec<String> = methods.iter().map(|m| m.name().to_string()).collect();
    table(&runs, &names);
    Ok(())
}

/// The median (or other quantile) of `v`; NaN for none.
fn q(v: Vec<f64>, p: f64) -> f64 {
    quantile(&v, p).unwrap_or(f64::NAN)
}

/// "k/n (p%)" of the `true`s; "—" for none.
fn share(v: impl Iterator<Item = bool>) -> String {
    let v: Vec<bool> = v.collect();
    if v.is_empty() {
        return "—".into();
    }
    let k = v.iter().filter(|b| **b).count();
    format!(
        "{k}/{} ({:.0}%)",
        v.len(),
        100.0 * k as f64 / v.len() as f64
    )
}

/// Stated confidence against what happened: per band, the share of runs whose range held the
/// truth (a calibrated estimator's share sits inside its band).
fn reliability(runs: &[Run], methods: &[String]) {
    const BANDS: [(f64, f64); 4] = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)];
    say!("\nReliability (stated confidence vs the share of ranges that held the truth):");
    say!("| method | 0–0.25 | 0.25–0.5 | 0.5–0.75 | 0.75–1 |");
    say!("|---|---:|---:|---:|---:|");
    for m in methods {
        let cells: Vec<String> = BANDS
            .iter()
            .map(|(lo, hi)| {
                share(
                    runs.iter()
                        .filter(|r| &r.method == m)
                        .filter(|r| r.confidence.is_some_and(|c| c >= *lo && c < *hi))
                        .filter_map(|r| r.covered),
                )
            })
            .collect();
        say!("| {m} | {} |", cells.join(" | "));
    }
}

fn table(runs: &[Run], methods: &[String]) {
    say!("Per method over the whole grid (error = |estimate − truth| / max(truth, 5% C); times from the start, capacity phase included):");
    say!("| method | runs | median err | p90 err | worst err | range held truth | first (median s) | final (median s) | bytes (median kB) | bytes / slops-slow | converged |");
    say!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
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
            "| {m} | {} | {:.1}% | {:.1}% | {:.1}% | {} | {:.2} | {:.2} | {:.0} | {} | {}/{} |",
            r.len(),
            q(errs.clone(), 0.5) * 100.0,
            q(errs.clone(), 0.9) * 100.0,
            q(errs, 1.0) * 100.0,
            share(r.iter().filter_map(|r| r.covered)),
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
    reliability(runs, methods);
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
