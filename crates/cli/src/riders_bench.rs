//! `mgrp bench riders`: the seed's microbenchmark (seed 000 §5.1), riders off vs on (run by
//! `mgrp_lab::riders_bench`); here the arguments and the table.

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_lab::riders_bench::RidersConfig;
use std::time::Duration;

#[derive(Args)]
pub struct RidersBench {
    /// Probing: pslow, pfast (SLoPS measurements back to back), auto (one-shot `auto` estimates
    /// back to back), pk1, pk2, pk3 (fixed trains).
    #[arg(long, value_delimiter = ',', default_value = "pslow,pfast,pk1,pk2,pk3")]
    probes: Vec<String>,
    /// Cross traffic: step (UDP 1,3,5,6,4,2 Mbit/s), web (TCP flows of random-size messages at
    /// random times) and/or cbr:N (steady UDP at N Mbit/s, 0 < N < 6).
    #[arg(long, value_delimiter = ',', default_value = "step,web")]
    cross: Vec<String>,
    /// Seconds per STEP level (the seed used 45; 6 levels per run), and the run length for web.
    #[arg(long, default_value_t = 10.0)]
    step_secs: f64,
    /// Payload buffer timeout T.
    #[arg(long, default_value = "10ms", value_parser = crate::testbed_cmd::duration)]
    hold: Duration,
    /// Share of each train, from its start, that may carry riders.
    #[arg(long, default_value_t = 1.0)]
    ratio: f64,
    /// Give up a SLoPS measurement after this long (the seed's 60 s timeout).
    #[arg(long, default_value = "60s", value_parser = crate::testbed_cmd::duration)]
    timeout: Duration,
    /// Also run riders on with elastic trains (seed 000 §8.3): this share of each train always
    /// leaves, the rest only with riders waiting. 0 = no elastic runs.
    #[arg(long, default_value_t = 0.2)]
    elastic_share: f64,
    /// Longest an elastic train waits for riders before it starts.
    #[arg(long, default_value = "10ms", value_parser = crate::testbed_cmd::duration)]
    elastic_wait: Duration,
    /// Runs of each configuration (interleaved).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[arg(long)]
    json: bool,
    /// Write the JSON here (a file; a directory gets riders.json).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(a: RidersBench) -> Result<()> {
    let cfg = RidersConfig {
        probes: a.probes.clone(),
        cross: a.cross.clone(),
        step_secs: a.step_secs,
        hold: a.hold,
        ratio: a.ratio,
        timeout: a.timeout,
        elastic: (a.elastic_share > 0.0).then_some(mgrp_lab::riders_bench::ElasticConfig {
            min_share: a.elastic_share,
            max_wait_ns: a.elastic_wait.as_nanos() as u64,
        }),
        runs: a.runs,
    };
    cfg.check()?;
    // `--out` names the JSON file; a directory (as `bench tracking` takes) gets riders.json.
    // Checked before the runs: a bad path found after them lost their figures.
    let out = a.out.as_ref().map(|p| match p.is_dir() {
        true => p.join("riders.json"),
        false => p.clone(),
    });
    if let Some(p) = &out {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| anyhow::anyhow!("--out {}: {e}", p.display()))?;
    }
    crate::signals::catch_signals();
    let rows = mgrp_lab::riders_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "bench": "riders",
        "capacity_mbit": 10,
        "rtt_ms": 40,
        "source_mbit": 4,
        "hold_ms": a.hold.as_secs_f64() * 1e3,
        "ratio": a.ratio,
        "step_secs": a.step_secs,
        "elastic_share": a.elastic_share,
        "elastic_wait_ms": a.elastic_wait.as_secs_f64() * 1e3,
        "runs": a.runs,
        "rows": rows,
    }))?;
    if let Some(p) = &out {
        std::fs::write(p, &json).map_err(|e| anyhow::anyhow!("write {}: {e}", p.display()))?;
    }
    if a.json {
        say!("{json}");
        return Ok(());
    }
    say!("| cross | probe | riders | probe-only kB | not rider data kB | probe kB | padding filled | standalone frags | source median Mb/s | source < 3.8 Mb/s | cross Mb/s | done/runs | completion median s | err adj / unadj | buffer delay p50/p99 µs |");
    say!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    let f = |x: Option<f64>, k: f64, d: usize| x.map_or("-".into(), |v| format!("{:.*}", d, v * k));
    for r in &rows {
        say!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1}% | {} | {:.2} | {:.0}% | {:.2} | {}/{} | {} | {} / {} | {} / {} |",
            r.cross,
            r.probe,
            match (r.riders, r.elastic) {
                (false, _) => "off",
                (true, false) => "on",
                (true, true) => "elastic",
            },
            r.probe_only_bytes as f64 / 1e3,
            r.overhead_bytes as f64 / 1e3,
            r.probe_bytes as f64 / 1e3,
            100.0 * r.padding_filled,
            r.standalone_fragments,
            r.source_median_mbit,
            r.source_below_pct,
            r.cross_mbit,
            r.completed,
            r.measurements,
            f(r.completion_median_s, 1.0, 1),
            f(r.err_adjusted, 100.0, 1) + "%",
            f(r.err_unadjusted, 100.0, 1) + "%",
            f(r.buffer_delay_p50_us, 1.0, 0),
            f(r.buffer_delay_p99_us, 1.0, 0),
        );
    }
    Ok(())
}
