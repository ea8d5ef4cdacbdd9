//! `mgrp bench modes`: congestion controls as transfer modes — background and full-speed —
//! against ground truth (run by `mgrp_lab::modes_bench`); here the arguments and the tables.

use anyhow::Result;
use clap::Args;
use mgrp_lab::modes_bench::{
    ModesConfig, ModesReport, PathInfo, Scenario, Spread, Status, SummaryHead,
};
use std::path::PathBuf;

#[derive(Args)]
pub struct ModesBench {
    /// Every scenario, small (about 3 minutes with the kernel's congestion controls).
    #[arg(long)]
    quick: bool,
    /// Scenarios: background, web, high-bdp, lossy.
    #[arg(long, value_delimiter = ',', value_parser = scenario)]
    scenarios: Option<Vec<Scenario>>,
    /// Congestion controls to compare in every scenario (default: reno,cubic,bbr,mgrp_ledbat,
    /// mgrp_bg as the background flow; reno,cubic,bbr,mgrp_fs as the full-speed flow).
    #[arg(long, value_delimiter = ',')]
    cc: Option<Vec<String>>,
    /// Runs per congestion control (and loss rate): medians and ranges over them.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Background: seconds before the background flow joins (default 30; quick 5).
    #[arg(long)]
    join_secs: Option<f64>,
    /// Background: seconds the background flow shares the link with the foreground.
    #[arg(long)]
    shared_secs: Option<f64>,
    /// Background: seconds the background flow runs on after the foreground stops.
    #[arg(long)]
    recovery_secs: Option<f64>,
    /// Web: seconds without the background flow, then as many with it.
    #[arg(long)]
    web_secs: Option<f64>,
    /// High-BDP: seconds per flow.
    #[arg(long)]
    high_bdp_secs: Option<f64>,
    /// Lossy: seconds per flow.
    #[arg(long)]
    lossy_secs: Option<f64>,
    /// Lossy: random loss rates, per cent.
    #[arg(long, value_delimiter = ',')]
    losses: Option<Vec<f64>>,
    /// Print the JSON document instead of the tables.
    #[arg(long)]
    json: bool,
    /// Write modes.json and modes.md (the tables) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).map_err(|e| e.to_string())
}

impl ModesBench {
    fn config(&self) -> ModesConfig {
        let mut c = if self.quick {
            ModesConfig::quick()
        } else {
            ModesConfig::standard()
        };
        if let Some(s) = &self.scenarios {
            c.scenarios = s.clone();
        }
        if let Some(cc) = &self.cc {
            c.background_ccs = cc.clone();
            c.full_speed_ccs = cc.clone();
        }
        c.repeat = self.repeat;
        let set = |slot: &mut f64, v: Option<f64>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut c.background.join_s, self.join_secs);
        set(&mut c.background.shared_s, self.shared_secs);
        set(&mut c.background.recovery_s, self.recovery_secs);
        set(&mut c.web.phase_s, self.web_secs);
        set(&mut c.high_bdp.secs, self.high_bdp_secs);
        set(&mut c.lossy.secs, self.lossy_secs);
        if let Some(l) = &self.losses {
            c.lossy.losses_pct = l.clone();
        }
        c
    }
}

pub fn run(a: ModesBench) -> Result<()> {
    let cfg = a.config();
    cfg.check()?;
    crate::signals::catch_signals();
    // The kernel's congestion controls need no setup; the BPF ones are loaded by whoever
    // registers them (rows say "not available" until then).
    // mgrp's own congestion controls come with the agent that feeds them.
    let setups = mgrp_lab::modes_bench::setups::transfer_setups(Default::default());
    let report = mgrp_lab::modes_bench::run(&cfg, &setups, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&report)?;
    let text = tables(&report).join("\n");
    crate::output::emit_bench(a.out.as_deref(), "modes", &json, &text, a.json)
}

/// `median [min..max]` over repeated runs, the value alone for one run, `-` for none.
fn spread(s: Option<Spread>, digits: usize) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{:.*}", digits, s.median),
        Some(s) => format!(
            "{:.d$} [{:.d$}..{:.d$}]",
            s.median,
            s.min,
            s.max,
            d = digits
        ),
    }
}

fn pct(s: Option<Spread>) -> String {
    spread(
        s.map(|s| Spread {
            median: s.median * 100.0,
            min: s.min * 100.0,
            max: s.max * 100.0,
            n: s.n,
        }),
        0,
    ) + if s.is_some() { "%" } else { "" }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// `ok (2/3 runs)`, or why nothing ran.
fn status(h: &SummaryHead) -> String {
    match h.status {
        Status::Ok if h.runs_ok == h.runs => "ok".into(),
        Status::Ok => format!("ok ({}/{} runs)", h.runs_ok, h.runs),
        Status::NotAvailable => format!(
            "not available: {}",
            h.reason.as_deref().unwrap_or("(no reason)")
        ),
        Status::Failed => format!("failed: {}", h.reason.as_deref().unwrap_or("(no reason)")),
    }
}

fn path_line(p: &PathInfo) -> String {
    let mut s = format!(
        "Path: {}; bottleneck {} measured {:.2} Mbit/s (configured {}), RTT {} ms, queue {}",
        p.testbed, p.bottleneck, p.measured_mbit, p.configured_mbit, p.rtt_ms, p.buffer
    );
    if let Some(l) = &p.loss {
        s.push_str(&format!(", loss {l}"));
    }
    if !p.access_measured_mbit.is_empty() {
        let a: Vec<String> = p
            .access_measured_mbit
            .iter()
            .map(|m| format!("{m:.2}"))
            .collect();
        s.push_str(&format!("; access links measured {} Mbit/s", a.join(", ")));
    }
    s
}

fn tables(r: &ModesReport) -> Vec<String> {
    let c = &r.config;
    let mut out = vec![
        "# Transfer modes (`mgrp bench modes`)".to_string(),
        String::new(),
        format!(
            "{} run(s) per congestion control; figures are medians [min..max] over runs.",
            c.repeat
        ),
    ];
    if let Some(b) = &r.background {
        out.push(String::new());
        out.push(format!(
            "## Background: 4 × {} foreground, background flow joins at {} s for {} s, then {} s alone",
            c.background.foreground, c.background.join_s, c.background.shared_s, c.background.recovery_s
        ));
        out.push(String::new());
        out.extend(b.paths.iter().map(path_line));
        out.push(String::new());
        out.push("| background CC | foreground before Mbit/s | foreground during | background | share of spare | recovery s (runs) | bg retransmits | link drained | status |".into());
        out.push("|---|---:|---:|---:|---:|---:|---:|---:|---|".into());
        for s in &b.summary {
            out.push(format!(
                "| {} | {} | {} | {} | {} | {} ({}/{}) | {} | {} | {} |",
                s.head.cc,
                spread(s.fg_before_mbit, 1),
                spread(s.fg_during_mbit, 1),
                spread(s.bg_mbit, 1),
                pct(s.spare_share),
                spread(s.recovery_s, 1),
                s.recovered,
                s.head.runs_ok,
                spread(s.bg_retrans, 0),
                spread(s.shared_drain_mbit, 1),
                status(&s.head)
            ));
        }
        out.push(String::new());
        out.push("Seed (ns-2, C = 50, foreground 40 before): Reno as background leaves the foreground 30 Mbit/s and takes 16; ImTCP-bg leaves 39 and takes ≈ 9 (0.9 × the spare 10).".into());
    }
    if let Some(w) = &r.web {
        out.push(String::new());
        out.push(format!(
            "## Web foreground: 4 × {} (per sender), {} s without the background flow, then {} s with it",
            c.web.pattern, c.web.phase_s, c.web.phase_s
        ));
        out.push(String::new());
        out.extend(w.paths.iter().map(path_line));
        out.push(String::new());
        out.push("| background CC | completion median ms, alone | with background | p90 alone | p90 with background | background Mbit/s | vs Reno | status |".into());
        out.push("|---|---:|---:|---:|---:|---:|---:|---|".into());
        for s in &w.summary {
            out.push(format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                s.head.cc,
                spread(s.alone_median_ms, 0),
                spread(s.with_bg_median_ms, 0),
                spread(s.alone_p90_ms, 0),
                spread(s.with_bg_p90_ms, 0),
                spread(s.bg_mbit, 1),
                opt(s.bg_vs_reno, 2),
                status(&s.head)
            ));
        }
        out.push(String::new());
        out.push("Seed: page download times with an ImTCP-bg flow almost unchanged; ImTCP-bg throughput ≈ 70% of Reno's.".into());
    }
    if let Some(h) = &r.high_bdp {
        out.push(String::new());
        out.push(format!(
            "## Full speed, high BDP: {} Mbit/s, RTT {} ms, queue {} BDP, {} s per flow",
            c.high_bdp.capacity_mbit, c.high_bdp.rtt_ms, c.high_bdp.buffer_bdp, c.high_bdp.secs
        ));
        out.push(String::new());
        out.extend(h.paths.iter().map(path_line));
        out.push(String::new());
        out.push("| CC | time to 90% s (runs) | utilisation | retransmits | status |".into());
        out.push("|---|---:|---:|---:|---|".into());
        for s in &h.summary {
            out.push(format!(
                "| {} | {} ({}/{}) | {} | {} | {} |",
                s.head.cc,
                spread(s.time_to_90_s, 1),
                s.reached,
                s.head.runs_ok,
                pct(s.utilisation),
                spread(s.retrans, 0),
                status(&s.head)
            ));
        }
        out.push(String::new());
        out.push("Seed (500 Mbit/s, qualitative): Reno slow to grow; ImTCP full-speed grows fast while the window is small and slows near A, best throughput of the three.".into());
    }
    if let Some(l) = &r.lossy {
        out.push(String::new());
        out.push(format!(
            "## Full speed, lossy: {} Mbit/s, RTT {} ms, random loss on the data path, {} s per flow",
            c.lossy.capacity_mbit, c.lossy.rtt_ms, c.lossy.secs
        ));
        out.push(String::new());
        out.extend(l.paths.iter().map(path_line));
        out.push(String::new());
        out.push("| loss | CC | goodput Mbit/s | vs Reno | retransmits | status |".into());
        out.push("|---:|---|---:|---:|---:|---|".into());
        for s in &l.summary {
            out.push(format!(
                "| {}% | {} | {} | {} | {} | {} |",
                opt(s.head.loss_pct, 1),
                s.head.cc,
                spread(s.goodput_mbit, 2),
                opt(s.vs_reno, 2),
                spread(s.retrans, 0),
                status(&s.head)
            ));
        }
        out.push(String::new());
        out.push("Seed (2 Mbit/s, h = 100, loss rates not given): ImTCP ahead of Reno when the loss rate is high.".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_print_compactly() {
        assert_eq!(spread(None, 1), "-");
        let one = Spread {
            median: 1.25,
            min: 1.25,
            max: 1.25,
            n: 1,
        };
        assert_eq!(spread(Some(one), 1), "1.2");
        let three = Spread {
            median: 2.0,
            min: 1.0,
            max: 3.5,
            n: 3,
        };
        assert_eq!(spread(Some(three), 1), "2.0 [1.0..3.5]");
        assert_eq!(pct(Some(Spread { median: 0.9, ..one })), "90%");
        assert_eq!(pct(None), "-");
    }
}
