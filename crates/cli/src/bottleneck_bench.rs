//! `mgrp bench bottleneck`: Tneck against a BFind-style UDP ramp on chain3 (run by
//! `mgrp_lab::bottleneck_bench`); here the arguments and the table.

use anyhow::{bail, Result};
use clap::Args;
use mgrp_estimate::stats::median;
use mgrp_lab::bottleneck_bench::{cases, BottleneckBenchConfig, Run};

#[derive(Args)]
pub struct BottleneckBench {
    /// Locators: tneck (a TCP flow), bfind (a rising UDP ramp, the link whose delay grows with
    /// it), pathneck (recursive packet trains through the Probe API); also bfind-max (the ramp
    /// judged by Tneck's rule).
    #[arg(long, value_delimiter = ',', default_value = "tneck,bfind,pathneck")]
    methods: Vec<String>,
    /// Runs per case and locator.
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Only the cases whose name contains one of these (default: all).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Delay on r3—b, ms (RTT about twice this).
    #[arg(long, default_value_t = 10.0)]
    tail_delay: f64,
    /// Congestion control of Tneck's flow and of the TCP cross flows.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// One run per case and locator.
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    json: bool,
    /// Also write `bottleneck.json` and `bottleneck.md` into this directory.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(b: BottleneckBench) -> Result<()> {
    let all = cases();
    let chosen: Vec<_> = all
        .into_iter()
        .filter(|c| b.cases.is_empty() || b.cases.iter().any(|n| c.name.contains(n.as_str())))
        .collect();
    if chosen.is_empty() {
        bail!("no case matches --cases {:?}", b.cases);
    }
    let cfg = BottleneckBenchConfig {
        cases: chosen,
        methods: b.methods,
        reps: if b.quick { 1 } else { b.reps },
        tail_ms: b.tail_delay,
        cc: b.cc,
    };
    let runs = mgrp_lab::bottleneck_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&runs)?;
    crate::output::emit_bench(b.out.as_deref(), "bottleneck", &json, &table(&runs), b.json)
}

fn med(v: impl Iterator<Item = f64>) -> String {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        "-".into()
    } else {
        format!("{:.2}", median(&v))
    }
}

/// One row per case and locator: correct verdicts, samples and seconds to the verdict, how hard
/// the load pushed then, probe bytes against the load's; then the moving case's own table.
pub fn table(runs: &[Run]) -> String {
    let mut out = String::from(
        "| case | locator | truth link | correct | correct within 4 samples | links named | samples (median) | seconds | load at verdict, Mbit/s | bound / measured narrow capacity | TTL-probe bytes, % of load (median, max) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in runs
        .iter()
        .filter(|r| r.timeline.is_empty() && r.reidentify_s.is_empty())
    {
        let k = (r.case.clone(), r.method.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    if keys.is_empty() {
        out.clear();
    }
    for (case, method) in keys {
        let rs: Vec<&Run> = runs
            .iter()
            .filter(|r| r.case == case && r.method == method)
            .collect();
        let named: Vec<String> = rs
            .iter()
            .map(|r| r.link.map_or("-".into(), |l| l.to_string()))
            .collect();
        let narrow = |r: &Run| r.measured_bps[0].min(r.measured_bps[1]);
        // Pathneck's verdict needs its whole set; what its first 4 trains said is recorded.
        let within4 = rs
            .iter()
            .filter(|r| match r.link_at_4 {
                _ if r.method == "pathneck" => r.link_at_4 == Some(r.truth_link),
                _ => r.correct && r.samples.is_some_and(|s| s <= 4),
            })
            .count();
        let pct: Vec<f64> = rs
            .iter()
            .filter(|r| r.load_bytes > 0)
            .map(|r| 100.0 * r.probe_bytes as f64 / r.load_bytes as f64)
            .collect();
        out += &format!(
            "| {case} | {method} | {} | {}/{} | {within4}/{} | {} | {} | {} | {} | {} | {} |\n",
            rs[0].truth_link,
            rs.iter().filter(|r| r.correct).count(),
            rs.len(),
            rs.len(),
            named.join(" "),
            med(rs.iter().filter_map(|r| r.samples.map(f64::from))),
            med(rs.iter().filter_map(|r| r.seconds_to_verdict)),
            med(rs
                .iter()
                .filter_map(|r| r.load_bps_at_verdict.map(|b| b / 1e6))),
            med(rs.iter().filter_map(|r| r.bound_bps.map(|b| b / narrow(r)))),
            if pct.is_empty() {
                "-".into()
            } else {
                format!(
                    "{}, {:.2}",
                    med(pct.iter().copied()),
                    pct.iter().copied().fold(0.0, f64::max)
                )
            },
        );
    }
    let moving: Vec<&Run> = runs.iter().filter(|r| !r.reidentify_s.is_empty()).collect();
    if !moving.is_empty() {
        out += "\n| case | locator | runs | first verdict right | moves followed | seconds to re-identify (median, max) | wrong verdicts (total) | verdicts per run (median) | TTL-probe bytes, % of load (median) |\n|---|---|---|---|---|---|---|---|---|\n";
        let re: Vec<f64> = moving
            .iter()
            .flat_map(|r| r.reidentify_s.iter().flatten().copied())
            .collect();
        let moves: usize = moving.iter().map(|r| r.reidentify_s.len()).sum();
        out += &format!(
            "| {} | {} | {} | {}/{} | {}/{moves} | {}, {} | {} | {} | {} |\n",
            moving[0].case,
            moving[0].method,
            moving.len(),
            moving
                .iter()
                .filter(|r| r.seconds_to_verdict.is_some())
                .count(),
            moving.len(),
            re.len(),
            med(re.iter().copied()),
            if re.is_empty() {
                "-".into()
            } else {
                format!("{:.2}", re.iter().copied().fold(0.0, f64::max))
            },
            moving.iter().map(|r| r.wrong_verdicts).sum::<u32>(),
            med(moving.iter().map(|r| r.timeline.len() as f64)),
            med(moving
                .iter()
                .filter(|r| r.load_bytes > 0)
                .map(|r| 100.0 * r.probe_bytes as f64 / r.load_bytes as f64)),
        );
    }
    out
}
