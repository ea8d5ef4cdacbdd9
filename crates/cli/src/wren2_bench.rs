//! `mgrp bench wren2`: two-sided Wren live (the peer agent's arrival records) against one-sided
//! Wren and the offline two-sided analysis of the same run's captures, on chain3 with both
//! links equally tight and cross traffic on each (run by `mgrp_lab::wren2_bench`); here the
//! arguments and the table.

use anyhow::Result;
use clap::Args;
use mgrp_lab::wren2_bench::{Report, Wren2Config};
use std::path::PathBuf;

#[derive(Args)]
pub struct Wren2Bench {
    /// Capacity of both shaped links of chain3, Mbit/s.
    #[arg(long, default_value_t = 50.0)]
    capacity: f64,
    /// Cross traffic on each shaped link, percent of C.
    #[arg(long, value_delimiter = ',', default_value = "0,10,20,30")]
    cross: Vec<f64>,
    /// The monitored flow's cap, percent of C (the seed: 75).
    #[arg(long, default_value_t = 75.0)]
    app: f64,
    /// Seconds of monitored flow per scenario.
    #[arg(long, default_value_t = 20.0)]
    secs: f64,
    /// One-way delay added on the last link, ms.
    #[arg(long, default_value_t = 5.0)]
    tail_ms: f64,
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    #[arg(long)]
    json: bool,
    /// Write wren2.json and wren2.md (the table) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: Wren2Bench) -> Result<()> {
    let cfg = Wren2Config {
        capacity_mbit: a.capacity,
        cross_pcts: a.cross,
        app_pct: a.app,
        secs: a.secs,
        tail_ms: a.tail_ms,
        repeat: a.repeat,
    };
    cfg.check()?;
    crate::signals::catch_signals();
    let report = mgrp_lab::wren2_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&report)?;
    let text = table(&report);
    crate::output::emit_bench(a.out.as_deref(), "wren2", &json, &text, a.json)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

fn signed(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:+.1}%", v * 100.0))
}

fn mbit(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn table(r: &Report) -> String {
    let mut out = vec![
        format!(
            "Two-sided Wren live on chain3 (both router links {} Mbit/s, cross traffic on each), \
             the monitored flow a → b capped at {}% of C, {} s per run; error = median over 1 s \
             windows of |estimate − A| / A, A = the tighter link's C − cross in that window",
            r.capacity_mbit, r.app_pct, r.secs
        ),
        String::new(),
        "| cross (% of C) | A (Mbit/s) | one-sided err | live two-sided err (min–max over runs) | offline two-sided err | live = offline (windows) |".into(),
        "|---:|---:|---:|---:|---:|---:|".into(),
    ];
    for s in &r.summary {
        out.push(format!(
            "| {} | {} | {} | {} ({}–{}) | {} | {}/{} |",
            s.cross_pct,
            mbit(s.truth_mbit),
            pct(s.one_sided_err),
            pct(s.live_err),
            pct(s.live_err_spread.0),
            pct(s.live_err_spread.1),
            pct(s.offline_err),
            s.equal_windows,
            s.compared_windows
        ));
    }
    out.push(String::new());
    out.push("Per run:".into());
    out.push(String::new());
    out.push("| cross | run | A (Mbit/s) | app (Mbit/s) | one-sided n / err | live n / err / signed | offline n / err | equal / compared (max diff) | matched / sent | peer capture dropped |".into());
    out.push("|---:|---:|---:|---:|---|---|---|---|---|---:|".into());
    for x in &r.rows {
        out.push(format!(
            "| {} | {} | {} | {:.1} | {} / {} | {} / {} / {} | {} / {} | {}/{} ({:.2e}) | {}/{} | {} |",
            x.cross_pct,
            x.run + 1,
            mbit(x.truth_mbit),
            x.app_mbit,
            x.one_sided_n,
            pct(x.one_sided_err),
            x.live_n,
            pct(x.live_err),
            signed(x.live_signed),
            x.offline_n,
            pct(x.offline_err),
            x.agreement.equal,
            x.agreement.compared,
            x.agreement.max_rel_diff,
            x.counters.merge.matched,
            x.counters.merge.sent,
            x.counters.peer_dropped + x.capture_dropped,
        ));
    }
    out.join("\n")
}
