//! `mgrp bench proxy`: the server-choosing proxy (`examples/proxy`) on a two-replica tree
//! against ground truth (run by `mgrp_lab::proxy_bench`); here the arguments and the tables.

use anyhow::Result;
use clap::Args;
use mgrp_lab::proxy_bench::{ProxyBenchConfig, Report, Spread};
use std::path::PathBuf;

#[derive(Args)]
pub struct ProxyBench {
    /// The change at 20 s of 40 (default: at 35 s of 70, the seed's 70 s of 140 halved).
    #[arg(long)]
    quick: bool,
    /// Seconds from the start of the cross traffic to the change.
    #[arg(long)]
    change_secs: Option<f64>,
    /// Seconds of the whole run.
    #[arg(long)]
    duration_secs: Option<f64>,
    /// C of both replica paths, Mbit/s.
    #[arg(long)]
    capacity: Option<f64>,
    /// The agent's method for active measurements.
    #[arg(long)]
    method: Option<String>,
    /// KiB each client upload carries.
    #[arg(long)]
    object_kb: Option<usize>,
    /// A client's pause between uploads, ms.
    #[arg(long)]
    think_ms: Option<u64>,
    /// Runs: medians and ranges over them.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Print the JSON document instead of the tables.
    #[arg(long)]
    json: bool,
    /// Write proxy.json and proxy.md (the tables) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: ProxyBench) -> Result<()> {
    let mut cfg = if a.quick {
        ProxyBenchConfig::quick()
    } else {
        ProxyBenchConfig::standard()
    };
    if let Some(v) = a.change_secs {
        cfg.change_s = v;
    }
    if let Some(v) = a.duration_secs {
        cfg.duration_s = v;
    }
    if let Some(v) = a.capacity {
        cfg.capacity_mbit = v;
    }
    if let Some(m) = a.method {
        cfg.method = m;
    }
    if let Some(v) = a.object_kb {
        cfg.object_bytes = v * 1024;
    }
    if let Some(v) = a.think_ms {
        cfg.think_ms = v;
    }
    cfg.repeat = a.repeat;
    cfg.check()?;
    crate::signals::catch_signals();
    let report = mgrp_lab::proxy_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&report)?;
    let text = tables(&report).join("\n");
    crate::output::emit_bench(a.out.as_deref(), "proxy", &json, &text, a.json)
}

fn opt(x: Option<f64>, d: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.d$}"))
}

fn spread(s: &Option<Spread>, d: usize, scale: f64) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{:.d$}", s.median * scale),
        Some(s) => format!(
            "{:.d$} [{:.d$}..{:.d$}]",
            s.median * scale,
            s.min * scale,
            s.max * scale
        ),
    }
}

fn tables(r: &Report) -> Vec<String> {
    let c = &r.config;
    let mut out = vec![
        format!(
            "Proxy on a tree: two replicas behind r→rx1 and r→rx2 at {} Mbit/s; cross {}% of C on path 1 throughout, {}% on path 2 until {} s, then none; {} s in all (clients from {} s; {} clients uploading {} KiB every {} ms; latency pairs every {} ms; method {}; 1 request in {} diverted).",
            c.capacity_mbit, c.cross1_pct, c.cross2_pct, c.change_s, c.duration_s, c.warmup_s,
            c.clients, c.object_bytes / 1024, c.think_ms, c.latency_every_ms, c.method, c.divert_every
        ),
        String::new(),
        "| run | C measured (Mbit/s) | requests | failed | diverted | to best | to best (ordinary) | change (truth, s) | switch (s) | flips back | direct median (ms) | proxy median (ms) | added (ms) | added, paired (ms) | probes asked | measurements | probe MB |".into(),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ];
    for x in &r.runs {
        out.push(format!(
            "| {} | {:.2} / {:.2} | {} | {} | {} | {:.1}% | {:.1}% | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
            x.run + 1,
            x.capacity_measured_mbit[0],
            x.capacity_measured_mbit[1],
            x.requests,
            x.failed,
            x.diverted,
            x.to_best * 100.0,
            x.to_best_ordinary * 100.0,
            opt(x.change_truth_s, 1),
            opt(x.switch_s, 2),
            x.flips_back,
            opt(x.direct_median_ms, 3),
            opt(x.proxy_median_ms, 3),
            opt(x.added_median_ms, 3),
            opt(x.added_paired_median_ms, 3),
            x.probes_asked,
            x.measurements,
            x.probe_bytes as f64 / 1e6,
        ));
    }
    let s = &r.summary;
    let t = &r.targets;
    out.push(String::new());
    out.push("| figure | median [range] over runs | target |".into());
    out.push("|---|---:|---:|".into());
    out.push(format!(
        "| requests to the best replica | {}% | ≥ {:.0}% |",
        spread(&s.to_best, 1, 100.0),
        t.to_best_min * 100.0
    ));
    out.push(format!(
        "| switch after the change (s) | {} | ≤ {:.0} |",
        spread(&s.switch_s, 2, 1.0),
        t.switch_max_s
    ));
    out.push(format!(
        "| added median latency (ms) | {} | ≤ {:.0} |",
        spread(&s.added_median_ms, 3, 1.0),
        t.added_max_ms
    ));
    out.push(format!(
        "| added latency, median of pairs (ms) | {} | |",
        spread(&s.added_paired_median_ms, 3, 1.0)
    ));
    if let Some(x) = r.runs.first() {
        out.push(String::new());
        out.push("Run 1, second by second (A by truth; the proxy's figure, passive and active estimates, Mbit/s; requests answered by each replica):".to_string());
        out.push("| t (s) | A1 | A2 | figure 1 | figure 2 | passive 1 | passive 2 | active 1 | active 2 | req 1 | req 2 |".into());
        out.push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into());
        for s in &x.timeline {
            out.push(format!(
                "| {:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.t_s,
                s.truth_mbit[0],
                s.truth_mbit[1],
                opt(s.figure_mbit[0], 1),
                opt(s.figure_mbit[1], 1),
                opt(s.passive_mbit[0], 1),
                opt(s.passive_mbit[1], 1),
                opt(s.active_mbit[0], 1),
                opt(s.active_mbit[1], 1),
                s.requests[0],
                s.requests[1]
            ));
        }
    }
    out
}
