//! `mgrp bench inline`: ImTCP on a kernel CUBIC flow against ground truth, inline on vs off
//! (run by `mgrp_lab::inline_bench`); here the arguments and the table.

use anyhow::Result;
use clap::Args;
use mgrp_lab::inline_bench::{InlineBenchConfig, InlineBenchReport};
use std::path::PathBuf;

#[derive(Args)]
pub struct InlineBench {
    /// Steps of 10 s and an app-limited run of 15 s (default: 20 s and 30 s).
    #[arg(long)]
    quick: bool,
    /// Seconds per step of A.
    #[arg(long)]
    step: Option<f64>,
    #[arg(long)]
    json: bool,
    /// Write inline.json and inline.md (the table) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: InlineBench) -> Result<()> {
    let mut cfg = InlineBenchConfig::new(a.quick);
    if let Some(s) = a.step {
        cfg.step_s = s;
    }
    cfg.check()?;
    crate::signals::catch_signals();
    let rep = mgrp_lab::inline_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&rep)?;
    let text = table(&rep);
    crate::output::emit_bench(a.out.as_deref(), "inline", &json, &text, a.json)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

fn table(r: &InlineBenchReport) -> String {
    let c = &r.config;
    let mut out = vec![
        format!(
            "Inline (ImTCP) on a kernel CUBIC flow: C = {} Mbit/s, RTT {} ms (delay line on the reverse path), \
             buffer {} packets, UDP cross traffic of 44/576/1500 B ({:.0}/{:.0}/{:.0}% of its bytes); \
             A steps {:?} Mbit/s, {} s each, judged from {} s after each step. {}",
            c.capacity_mbit,
            c.rtt_ms,
            c.buffer_packets,
            c.mix[0].1 * 100.0,
            c.mix[1].1 * 100.0,
            c.mix[2].1 * 100.0,
            c.steps_mbit,
            c.step_s,
            c.settle_s,
            r.load
        ),
        String::new(),
        "| case | inline | throughput (Mbit/s) | retransmits | bottleneck (Mbit/s) | estimates | per s | per 2 RTT | median err | p90 err | delivery rate (Mbit/s) | inline median (Mbit/s) |".into(),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ];
    for x in &r.runs {
        out.push(format!(
            "| {} | {} | {:.1} | {} | {:.1} | {} | {:.2} | {:.2} | {} | {} | {} | {} |",
            x.case,
            if x.inline { "on" } else { "off" },
            x.throughput_mbit,
            x.retransmits,
            x.bottleneck_mbit,
            x.estimates,
            x.estimates_per_s,
            x.estimates_per_2rtt,
            pct(x.median_err),
            pct(x.p90_err),
            x.delivery_rate_mbit
                .map_or("-".into(), |v| format!("{v:.1}")),
            x.inline_median_mbit
                .map_or("-".into(), |v| format!("{v:.1}")),
        ));
    }
    out.push(String::new());
    out.push("Per step (inline on):".into());
    out.push(String::new());
    out.push("| case | A truth (Mbit/s) | settled estimates | median err | p90 err | measurements to within 10% |".into());
    out.push("|---|---:|---:|---:|---:|---:|".into());
    for x in r.runs.iter().filter(|x| x.inline) {
        for s in &x.steps {
            out.push(format!(
                "| {} | {:.1} | {} | {} | {} | {} |",
                x.case,
                s.a_truth_mbit,
                s.estimates,
                pct(s.median_err),
                pct(s.p90_err),
                s.to_converge.map_or("never".into(), |n| n.to_string())
            ));
        }
    }
    out.join("\n")
}
