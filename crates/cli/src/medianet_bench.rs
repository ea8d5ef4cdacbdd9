//! `mgrp bench medianet`: the MediaNet streams (`examples/medianet`) under PEAKS cross traffic
//! per configuration (run by `mgrp_lab::medianet_bench`); here the arguments and the tables.

use anyhow::{Context, Result};
use clap::Args;
use mgrp_lab::medianet_bench::{Ci, MedianetConfig, Report, CONFIGS, SEED_TABLE3};
use std::path::PathBuf;

#[derive(Args)]
pub struct MedianetBench {
    /// Runs per configuration (means with 95% CIs over them).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seconds per run; the 240 s PEAKS schedule is scaled to it.
    #[arg(long, default_value_t = 240.0)]
    duration: f64,
    /// Configurations: passive, pslow, pslow-riders, pfast, pfast-riders, auto, wren, oracle.
    #[arg(long, value_delimiter = ',')]
    configs: Option<Vec<String>>,
    /// Riders' T, ms.
    #[arg(long, default_value_t = 10)]
    hold_ms: u64,
    /// Print the JSON document instead of the tables.
    #[arg(long)]
    json: bool,
    /// Write medianet.json and medianet.md (the tables) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run nothing: pool the runs of saved reports (medianet.json files of the same scenario,
    /// e.g. configurations run side by side) and print their tables.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["runs", "duration", "configs", "hold_ms"])]
    merge: Option<Vec<PathBuf>>,
}

pub fn run(a: MedianetBench) -> Result<()> {
    if let Some(files) = &a.merge {
        let docs = files
            .iter()
            .map(|f| {
                std::fs::read_to_string(f)
                    .map(|t| (f.display().to_string(), t))
                    .with_context(|| format!("reading {}", f.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        let report = mgrp_lab::medianet_bench::merge(&docs)?;
        let json = serde_json::to_string_pretty(&report)?;
        let text = tables(&report).join("\n");
        return crate::output::emit_bench(a.out.as_deref(), "medianet", &json, &text, a.json);
    }
    let cfg = MedianetConfig {
        configs: a
            .configs
            .unwrap_or_else(|| CONFIGS.iter().map(|s| s.to_string()).collect()),
        runs: a.runs,
        duration_s: a.duration,
        hold_ms: a.hold_ms,
        ..MedianetConfig::default()
    };
    cfg.check()?;
    crate::signals::catch_signals();
    let report = mgrp_lab::medianet_bench::run(&cfg, crate::signals::hooks())?;
    let json = serde_json::to_string_pretty(&report)?;
    let text = tables(&report).join("\n");
    crate::output::emit_bench(a.out.as_deref(), "medianet", &json, &text, a.json)
}

fn ci(c: &Option<Ci>, d: usize) -> String {
    match c {
        None => "-".into(),
        Some(Ci {
            mean, half: None, ..
        }) => format!("{mean:.d$}"),
        Some(Ci {
            mean,
            half: Some(h),
            ..
        }) => format!("{mean:.d$} ± {h:.d$}"),
    }
}

fn tables(r: &Report) -> Vec<String> {
    let c = &r.config;
    let mut out = vec![
        "# mgrp bench medianet".to_string(),
        String::new(),
        format!(
            "Three MPEG-like streams (I 13,500 B @2 Hz, P 7,625 B @8 Hz, B 2,850 B @20 Hz; full 1,160 kbit/s) snd → rcv over a {} Mbit/s bottleneck, {} ms delay line on the reverse path, PEAKS UDP cross traffic `{}` ({} s per run, {} run(s) per configuration, interleaved). Riders T = {} ms, ratio {}; playout {} ms; agent schedule every {} s.",
            c.capacity_mbit, c.delay_ms, r.peaks, c.duration_s, c.runs, c.hold_ms, c.rider_ratio, c.playout_ms, c.every_s
        ),
        String::new(),
        "Mean ± 95% CI half-width (Student's t) over runs; one run: no interval.".into(),
        String::new(),
        "| config | runs | s | decoded Mbit/s | fps | bad-frame ratio | level switches | probe MB | to full after A > 3.48 (s) | rises not reached |".into(),
        "|---|---|---|---|---|---|---|---|---|---|".into(),
    ];
    for s in &r.summary {
        out.push(format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            s.config,
            s.runs,
            s.seconds,
            ci(&s.decoded_mbit, 2),
            ci(&s.fps, 1),
            ci(&s.bad_frame_ratio, 3),
            ci(&s.level_switches, 0),
            ci(&s.probe_mbyte, 1),
            ci(&s.time_to_full_s, 1),
            s.rises_not_reached
        ));
    }
    out.push(String::new());
    out.push(
        "Beside the seed's Table 3 (seed 002 §5.2; 10–32 runs of ~336 s each, Emulab, pathload):"
            .into(),
    );
    out.push(String::new());
    out.push("| seed experiment | here | seed Mbit/s | seed fps | mgrp Mbit/s | mgrp fps |".into());
    out.push("|---|---|---|---|---|---|".into());
    for (name, here, mb, fps) in SEED_TABLE3 {
        let s = r.summary.iter().find(|s| s.config == here);
        out.push(format!(
            "| {name} | {here} | {mb:.2} | {fps:.2} | {} | {} |",
            s.map_or("-".into(), |s| ci(&s.decoded_mbit, 2)),
            s.map_or("-".into(), |s| ci(&s.fps, 1)),
        ));
    }
    out.push(String::new());
    out.push("| target | met | figures |".into());
    out.push("|---|---|---|".into());
    for t in &r.targets {
        out.push(format!(
            "| {} | {} | {} |",
            t.what,
            match t.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not run",
            },
            t.detail
        ));
    }
    out.push(String::new());
    out.push("Per run: the ceiling the scheduler acted on and the truth's A (medians over the run's seconds), frames the sender dropped because it fell behind, the streams' TCP retransmits, and for riders the packets the shim held for a train, the rider chunks probes carried (whole packets or fragments) and the held packets that left at their deadline T without a probe; the host's load average at the run's end.".into());
    out.push(String::new());
    out.push("| config | run | fps | estimates | ceiling / truth Mbit/s | dropped behind | TCP retrans | riders: packets held / chunks carried / packets left at T | load |".into());
    out.push("|---|---|---|---|---|---|---|---|---|".into());
    for x in &r.runs {
        let (ceil, truth) = x.ceiling_and_truth_medians();
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        out.push(format!(
            "| {} | {} | {:.1} | {} | {} / {} | {} | {} | {} | {} |",
            x.config,
            x.run,
            x.fps,
            x.estimates,
            f(ceil),
            f(truth),
            x.dropped_behind,
            if x.tcp_retrans.is_empty() {
                "-".into()
            } else {
                x.tcp_retrans.iter().sum::<u32>().to_string()
            },
            x.riders.as_ref().map_or("-".into(), |s| format!(
                "{} / {} / {}",
                s.sent("buffer_held"),
                s.sent("buffer_riders_whole") + s.sent("buffer_riders_fragments"),
                s.sent("expired_whole")
            )),
            x.load_avg.map_or("-".into(), |l| format!("{l:.1}"))
        ));
    }
    let errs: Vec<String> = r
        .runs
        .iter()
        .filter_map(|x| {
            x.sender_error
                .as_ref()
                .map(|e| format!("{} run {}: {e}", x.config, x.run))
        })
        .collect();
    if !errs.is_empty() {
        out.push(String::new());
        out.push(format!("Sender errors: {}", errs.join("; ")));
    }
    let wren: Vec<String> = r
        .runs
        .iter()
        .filter_map(|x| {
            x.wren_trains.map(|[t, rising, lower, short]| {
                format!(
                    "run {}: {t} trains judged, {rising} rising (an upper bound only), {lower} lower bounds, {short} runs too short; {} estimates",
                    x.run, x.estimates
                )
            })
        })
        .collect();
    if !wren.is_empty() {
        out.push(String::new());
        out.push(format!(
            "Wren on the streams (estimates come only from lower-bound trains; see docs/passive.md): {}",
            wren.join("; ")
        ));
    }
    out
}
