//! `mgrp bench map`: Netmapper on the tree and a 4×4 topology against the testbed's measured
//! link capacities (run by `mgrp_lab::map_bench`); here the arguments and the tables.

use anyhow::Result;
use clap::Args;
use mgrp_estimate::stats::median;
use mgrp_lab::map_bench::MapRun;

#[derive(Args)]
pub struct MapBench {
    /// Topologies: tree, mesh4x4.
    #[arg(long, value_delimiter = ',', default_value = "tree,mesh4x4")]
    cases: Vec<String>,
    /// Maps per topology.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    #[arg(long)]
    json: bool,
    /// Also write `map.json` and `map.md` into this directory.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(b: MapBench) -> Result<()> {
    crate::signals::catch_signals();
    let runs = mgrp_lab::map_bench::run(&b.cases, b.reps, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&runs)?;
    crate::output::emit_bench(b.out.as_deref(), "map", &json, &table(&runs), b.json)
}

fn med(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        f64::NAN
    } else {
        median(&v)
    }
}

fn table(runs: &[MapRun]) -> String {
    let mut s = String::from(
        "Netmapper against the testbed's measured link capacities (`mgrp bench map`). Run on a \
         shared 2-core VM while other helpers built and benchmarked: throughputs are noisy; \
         each row is one whole map. Naive = one step per distinct set of paths through an edge, \
         all of them together (seed 003 §3.4.2).\n\n",
    );
    s.push_str(
        "| topology | map | paths usable | flows | naive flows | ratio (seed 0.50) | steps | naive steps | parallel max (seed 8) | naive parallel max (seed 11) | flows per step k=1,2,.. | \"=\" edges within ±15% | \">\" above truth | seconds | MB of flows |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        s.push_str(&format!(
            "| {} | {} | {}/{} | {} | {} | {:.2} | {} | {} | {} | {} | {:?} | {}/{} | {} | {:.0} | {:.1} |\n",
            r.case,
            r.rep,
            r.usable_paths,
            r.paths,
            r.flows,
            r.naive_flows,
            r.flows_ratio,
            r.steps,
            r.naive_steps,
            r.max_parallel,
            r.naive_max_parallel,
            r.parallel,
            r.exact_within_15,
            r.exact_edges,
            r.above_over_truth,
            r.seconds,
            r.flow_bytes as f64 / 1e6
        ));
    }
    let mut cases: Vec<&str> = runs.iter().map(|r| r.case.as_str()).collect();
    cases.dedup();
    s.push_str(
        "\nPer edge, over the maps (value / measured capacity of the link; \"-\" = unshaped):\n\n",
    );
    s.push_str("| topology | edge | link | bounds seen | value / truth, median (min–max) | paths | ok |\n|---|---|---|---|---|---|---|\n");
    for c in cases {
        let these: Vec<&MapRun> = runs.iter().filter(|r| r.case == c).collect();
        let mut links: Vec<String> = these
            .iter()
            .flat_map(|r| r.edges.iter().map(|e| e.link.clone()))
            .collect();
        links.sort();
        links.dedup();
        for l in links {
            let rows: Vec<_> = these
                .iter()
                .flat_map(|r| r.edges.iter().filter(|e| e.link == l))
                .collect();
            let mut bounds: Vec<&str> = rows.iter().map(|e| e.bound.as_str()).collect();
            bounds.sort();
            let kinds = format!(
                "{}× =, {}× >",
                bounds.iter().filter(|b| **b == "=").count(),
                bounds.iter().filter(|b| **b == ">").count()
            );
            let ratios: Vec<f64> = rows.iter().filter_map(|e| e.ratio).collect();
            let rtxt = if ratios.is_empty() {
                format!(
                    "- ({:.1} Mbit/s)",
                    med(rows.iter().map(|e| e.value_bps)) / 1e6
                )
            } else {
                format!(
                    "{:.2} ({:.2}–{:.2})",
                    med(ratios.iter().copied()),
                    ratios.iter().cloned().fold(f64::INFINITY, f64::min),
                    ratios.iter().cloned().fold(0.0, f64::max)
                )
            };
            s.push_str(&format!(
                "| {c} | {} | {l} | {kinds} | {rtxt} | {} | {}/{} |\n",
                rows[0].edge,
                rows[0].paths,
                rows.iter().filter(|e| e.ok).count(),
                rows.len()
            ));
        }
    }
    s
}
