//! `mgrp bench accuracy`: every method against the bottleneck's ground truth over a grid (run
//! by `mgrp_lab::accuracy`); here the arguments and the tables.

use crate::bench_cmd::AccuracyBench;
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
        max_late: b
            .skip_late
            .then_some(mgrp_testbed::generator::DEFAULT_MAX_LATE),
        drain_after: b.drain_after,
        realtime_cross: b.realtime_cross,
        cross_spin: b.cross_spin,
        trace: b.trace,
    };
    let runs = mgrp_lab::accuracy::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&runs)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    let names: Vec<String> = methods.iter().map(|m| m.name().to_string()).collect();
    let mut text = String::new();
    table(&mut text, &runs, &names);
    crate::output::emit_bench(b.results.as_deref(), &b.name, &json, &text, b.json)
}

/// One line of the readable report.
macro_rules! w {
    ($out:expr, $($t:tt)*) => {{
        $out.push_str(&format!($($t)*));
        $out.push('\n');
    }};
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
/// truth at the estimate's stated time scale (over the whole run where it states none); a
/// calibrated estimator's share sits at its stated value. The bands split `auto`'s calibrated
/// values (0.12, 0.71, 0.74, 0.86, 0.90: `estimate::calib::TABLE`).
fn reliability(out: &mut String, runs: &[Run], methods: &[String]) {
    const BANDS: [(f64, f64); 5] = [
        (0.0, 0.5),
        (0.5, 0.725),
        (0.725, 0.8),
        (0.8, 0.88),
        (0.88, 1.01),
    ];
    w!(out, "\nReliability (stated confidence vs the share of ranges that held the truth at the stated time scale; mean stated in brackets):");
    w!(
        out,
        "| method | < 0.5 | 0.5–0.725 | 0.725–0.8 | 0.8–0.88 | ≥ 0.88 |"
    );
    w!(out, "|---|---:|---:|---:|---:|---:|");
    for m in methods {
        let cells: Vec<String> = BANDS
            .iter()
            .map(|(lo, hi)| {
                let r: Vec<&Run> = runs
                    .iter()
                    .filter(|r| &r.method == m)
                    .filter(|r| r.confidence.is_some_and(|c| c >= *lo && c < *hi))
                    .collect();
                let stated = q(r.iter().filter_map(|r| r.confidence).collect(), 0.5);
                let held = share(r.iter().filter_map(|r| held(r)));
                if r.is_empty() {
                    held
                } else {
                    format!("{held} [{stated:.2}]")
                }
            })
            .collect();
        w!(out, "| {m} | {} |", cells.join(" | "));
    }
}

/// Host steal (a share of a CPU's time over a run) from which the header counts the run.
const STEAL_NOTE: f64 = 0.02;

/// Whether the range held the truth at the stated time scale, or over the run without one.
fn held(r: &Run) -> Option<bool> {
    r.covered_scale.or(r.covered)
}

fn table(out: &mut String, runs: &[Run], methods: &[String]) {
    let loads: Vec<f64> = runs.iter().filter_map(|r| r.load_avg).collect();
    w!(out, "{} runs; host load average (1 min) at the end of each run: median {:.1}, max {:.1} (other work shares this machine).\n", runs.len(), q(loads.clone(), 0.5), q(loads, 1.0));
    let steal: Vec<f64> = runs.iter().filter_map(|r| r.host_steal).collect();
    if !steal.is_empty() {
        let stolen = steal.iter().filter(|s| **s >= STEAL_NOTE).count();
        w!(out, "CPU time the hypervisor took during each run (the CPU it took most from): median {:.1}%, max {:.1}%; {stolen} of {} runs at {:.0}% or more, where runs read worse (docs/results/r22).\n", q(steal.clone(), 0.5) * 100.0, q(steal.clone(), 1.0) * 100.0, steal.len(), STEAL_NOTE * 100.0);
    }
    w!(out, "Per method over the whole grid (error = |estimate − truth| / max(truth, 5% C); times from the start, capacity phase included):");
    w!(out, "| method | runs | median err | p90 err | worst err | range held truth | held at stated scale | first (median s) | final (median s) | bytes (median kB) | bytes / slops-slow | converged |");
    w!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
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
        w!(
            out,
            "| {m} | {} | {:.1}% | {:.1}% | {:.1}% | {} | {} | {:.2} | {:.2} | {:.0} | {} | {}/{} |",
            r.len(),
            q(errs.clone(), 0.5) * 100.0,
            q(errs.clone(), 0.9) * 100.0,
            q(errs, 1.0) * 100.0,
            share(r.iter().filter_map(|r| r.covered)),
            share(r.iter().filter_map(|r| r.covered_scale)),
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
    reliability(out, runs, methods);
    w!(out, "\nPer cell (medians over reps; held = ranges that held the truth over the run / at the stated time scale; worst = largest error):");
    w!(out, "| C | cross | load | method | runs | estimate | truth | err | p90 err | worst | err (scale) | p90 (scale) | held (run) | held (scale) | confidence | scale ms | final s | kB |");
    w!(
        out,
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for ((c, kind, load, m), r) in cells(runs.iter()) {
        let errs: Vec<f64> = r.iter().filter_map(|r| r.rel_error).collect();
        let scaled: Vec<f64> = r.iter().filter_map(|r| r.rel_error_scale).collect();
        w!(
            out,
            "| {c} | {kind} | {} | {m} | {} | {:.2} | {:.2} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {} | {} | {:.2} | {:.0} | {:.2} | {:.0} |",
            load.map(|l| format!("{l}%")).unwrap_or_else(|| "—".into()),
            r.len(),
            q(r.iter().filter_map(|r| r.estimate_mbit).collect(), 0.5),
            q(r.iter().map(|r| r.truth_mbit).collect(), 0.5),
            q(errs.clone(), 0.5) * 100.0,
            q(errs.clone(), 0.9) * 100.0,
            q(errs, 1.0) * 100.0,
            q(scaled.clone(), 0.5) * 100.0,
            q(scaled, 0.9) * 100.0,
            share(r.iter().filter_map(|r| r.covered)),
            share(r.iter().filter_map(|r| r.covered_scale)),
            q(r.iter().filter_map(|r| r.confidence).collect(), 0.5),
            q(r.iter().filter_map(|r| r.timescale_ms).collect(), 0.5),
            q(r.iter().map(|r| r.final_s).collect(), 0.5),
            q(r.iter().map(|r| r.probe_bytes as f64 / 1e3).collect(), 0.5)
        );
    }
    drains(out, runs);
    unprobed(out, runs);
}

/// Elastic cross traffic (TCP, web): the estimate against A over the run (which the probes
/// raise: the flows yield to them) and against A with no probes on the path just before it.
fn unprobed(out: &mut String, runs: &[Run]) {
    if runs.iter().all(|r| r.truth_unprobed_mbit.is_none()) {
        return;
    }
    w!(out, "\nElastic cross traffic: A over the run (probes on the path) against A over the 500 ms before it with none (medians; held = ranges that held that truth; retransmits = the cross flows' during the run):");
    w!(out, "| C | cross | load | method | runs | estimate | truth (run) | truth (no probes) | err (run) | err (no probes) | p90 (no probes) | held (no probes) | retransmits |");
    w!(
        out,
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for ((c, kind, load, m), r) in cells(runs.iter().filter(|r| r.truth_unprobed_mbit.is_some())) {
        let errs: Vec<f64> = r.iter().filter_map(|r| r.rel_error_unprobed).collect();
        w!(
            out,
            "| {c} | {kind} | {} | {m} | {} | {:.2} | {:.2} | {:.2} | {:.1}% | {:.1}% | {:.1}% | {} | {:.0} |",
            load.map(|l| format!("{l}%")).unwrap_or_else(|| "—".into()),
            r.len(),
            q(r.iter().filter_map(|r| r.estimate_mbit).collect(), 0.5),
            q(r.iter().map(|r| r.truth_mbit).collect(), 0.5),
            q(r.iter().filter_map(|r| r.truth_unprobed_mbit).collect(), 0.5),
            q(r.iter().filter_map(|r| r.rel_error).collect(), 0.5) * 100.0,
            q(errs.clone(), 0.5) * 100.0,
            q(errs, 0.9) * 100.0,
            share(r.iter().filter_map(|r| r.covered_unprobed)),
            q(r.iter().filter_map(|r| r.cross_retransmits.map(|x| x as f64)).collect(), 0.5),
        );
    }
}

/// A grid cell: capacity (Mbit/s), cross kind, load, method.
type Cell = (u64, String, Option<u32>, String);

/// The runs grouped by cell, cells in order.
fn cells<'a>(runs: impl Iterator<Item = &'a Run>) -> Vec<(Cell, Vec<&'a Run>)> {
    let mut by: std::collections::BTreeMap<Cell, Vec<&'a Run>> = Default::default();
    for r in runs {
        let key = (
            r.capacity_mbit as u64,
            r.kind.clone(),
            r.load_pct,
            r.method.clone(),
        );
        by.entry(key).or_default().push(r);
    }
    by.into_iter().collect()
}

/// With `--drain-after`: the signed median error per cell against the truth from the flood at
/// start (the grid's truth) and against the truth from the drain measured right after each run.
fn drains(out: &mut String, runs: &[Run]) {
    if runs.iter().all(|r| r.truth_drain_mbit.is_none()) {
        return;
    }
    w!(out, "\nTruth from the flood at start vs from a 1 s flood on top of the cross traffic right after each run (signed medians: − = estimate below):");
    w!(out, "| C | cross | load | method | runs | C at start | drain after (median, min) | estimate | truth (start) | truth (drain) | signed err (start) | signed err (drain) |");
    w!(
        out,
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for ((c, kind, load, m), r) in cells(runs.iter().filter(|r| r.truth_drain_mbit.is_some())) {
        let signed = |truth: &dyn Fn(&Run) -> Option<f64>| {
            q(
                r.iter()
                    .filter_map(|r| {
                        Some((r.estimate_mbit? - truth(r)?) / truth(r)?.max(0.05 * c as f64))
                    })
                    .collect(),
                0.5,
            ) * 100.0
        };
        let drains: Vec<f64> = r.iter().filter_map(|r| r.drain_mbit).collect();
        w!(
            out,
            "| {c} | {kind} | {} | {m} | {} | {:.2} | {:.2}, {:.2} | {:.2} | {:.2} | {:.2} | {:+.1}% | {:+.1}% |",
            load.map(|l| format!("{l}%")).unwrap_or_else(|| "—".into()),
            r.len(),
            q(r.iter().filter_map(|r| r.capacity_measured_mbit).collect(), 0.5),
            q(drains.clone(), 0.5),
            q(drains, 0.0),
            q(r.iter().filter_map(|r| r.estimate_mbit).collect(), 0.5),
            q(r.iter().map(|r| r.truth_mbit).collect(), 0.5),
            q(r.iter().filter_map(|r| r.truth_drain_mbit).collect(), 0.5),
            signed(&|r| Some(r.truth_mbit).filter(|t| t.is_finite())),
            signed(&|r| r.truth_drain_mbit),
        );
    }
}
