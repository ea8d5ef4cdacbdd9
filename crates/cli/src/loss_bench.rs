//! `mgrp bench loss`: badabing's loss episodes through the Probe API against the drop log's
//! episodes, and a periodic ping as the baseline (run by `mgrp_lab::loss_bench`); here the
//! arguments and the table.

use anyhow::Result;
use clap::Args;
use mgrp_estimate::stats::quantile;
use mgrp_lab::loss_bench::{LossConfig, Row};
use std::path::PathBuf;

#[derive(Args)]
pub struct LossBench {
    /// One repetition of 20 s per scenario (default: 3 of 60 s).
    #[arg(long)]
    quick: bool,
    /// Scenarios: onoff (on/off cross traffic overflowing a small buffer), bursty
    /// (Gilbert–Elliott loss line stepped by a steady carrier).
    #[arg(long, value_delimiter = ',')]
    scenarios: Option<Vec<String>>,
    /// Seconds badabing runs per repetition (the ping baseline as long again).
    #[arg(long)]
    secs: Option<f64>,
    #[arg(long)]
    reps: Option<u32>,
    /// onoff's cross traffic.
    #[arg(long)]
    onoff: Option<String>,
    /// bursty's loss model.
    #[arg(long)]
    ge: Option<String>,
    /// Bottleneck buffer, packets.
    #[arg(long)]
    buffer: Option<u32>,
    #[arg(long)]
    json: bool,
    /// Write loss.json and loss.md (the table) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: LossBench) -> Result<()> {
    let mut cfg = LossConfig::new(a.quick);
    if let Some(s) = a.scenarios {
        cfg.scenarios = s;
    }
    cfg.secs = a.secs.unwrap_or(cfg.secs);
    cfg.reps = a.reps.unwrap_or(cfg.reps);
    cfg.onoff = a.onoff.unwrap_or(cfg.onoff);
    cfg.ge = a.ge.unwrap_or(cfg.ge);
    cfg.buffer_packets = a.buffer.unwrap_or(cfg.buffer_packets);
    cfg.check()?;
    crate::signals::catch_signals();
    let rows = mgrp_lab::loss_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&rows)?;
    let text = table(&cfg, &rows);
    crate::output::emit_bench(a.out.as_deref(), "loss", &json, &text, a.json)
}

fn opt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{:.*}", digits, v * scale))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:+.1}%", v * 100.0))
}

fn table(cfg: &LossConfig, rows: &[Row]) -> String {
    let mut out = vec![
        format!(
            "Loss episodes: badabing (p = {}, {} ms slots, 2 × 3 × 600 B trains per experiment) \
             through the Probe API vs the drop log; {} s per rep; C = {} Mbit/s, buffer {} packets",
            cfg.p, cfg.slot_ms, cfg.secs, cfg.capacity_mbit, cfg.buffer_packets
        ),
        String::new(),
        "| scenario | rep | truth F | badabing F | F err | truth D (ms) | badabing D (ms) | D err | truth slots F / D (ms) | loss rate | load (% of C) | ping loss | ping run (ms) | experiments | 01+10 |".into(),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".into(),
    ];
    for r in rows {
        let b = &r.badabing;
        out.push(format!(
            "| {} | {} | {:.4} | {:.4} | {} | {} | {} | {} | {:.4} / {} | {:.4} | {:.2} | {:.4} | {} | {} | {} |",
            r.scenario,
            r.rep,
            r.truth.frequency,
            b.frequency,
            pct(Some(r.frequency_err)),
            opt(r.truth.mean_duration_s, 1e3, 1),
            opt(b.mean_duration_s, 1e3, 1),
            pct(r.duration_err),
            r.truth.slot_frequency,
            opt(r.truth.slot_mean_duration_s, 1e3, 1),
            b.loss_rate,
            r.load_share * 100.0,
            r.ping.loss_rate,
            opt(r.ping.run_mean_s, 1e3, 1),
            b.experiments,
            b.n01 + b.n10,
        ));
    }
    for s in &cfg.scenarios {
        let of = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
            rows.iter()
                .filter(|r| &r.scenario == s)
                .filter_map(f)
                .collect()
        };
        let (fe, de) = (
            of(&|r| Some(r.frequency_err.abs())),
            of(&|r| r.duration_err.map(f64::abs)),
        );
        let med = |v: &[f64]| opt(quantile(v, 0.5), 100.0, 1);
        let max = |v: &[f64]| opt(quantile(v, 1.0), 100.0, 1);
        out.push(format!(
            "\n{s}: |F err| median {}% max {}%; |D err| median {}% max {}% (target ±20%)",
            med(&fe),
            max(&fe),
            med(&de),
            max(&de)
        ));
    }
    out.join("\n")
}
