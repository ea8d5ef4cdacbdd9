//! `mgrp bench inline`: ImTCP on a kernel CUBIC flow against ground truth, inline on vs off
//! (run by `mgrp_lab::inline_bench`); here the arguments and the table.

use anyhow::Result;
use clap::Args;
use mgrp_lab::inline_bench::{Case, InlineBenchConfig, InlineBenchReport, Spread};
use std::path::PathBuf;

#[derive(Args)]
pub struct InlineBench {
    /// Steps of 10 s and an app-limited run of 15 s (default: 20 s and 30 s).
    #[arg(long)]
    quick: bool,
    /// Seconds per step of A.
    #[arg(long)]
    step: Option<f64>,
    /// Which cases, comma-separated: bulk, app-limited, web (default: all).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Run every case this many times (fresh testbeds each), for the spread.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Skip the inline-off runs of the bulk and web cases.
    #[arg(long)]
    no_off: bool,
    /// Write each inline run's stream trace (JSON lines) into this directory.
    #[arg(long)]
    trace_dir: Option<PathBuf>,
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
    if !a.cases.is_empty() {
        cfg.cases = a
            .cases
            .iter()
            .map(|c| {
                Case::parse(c).ok_or_else(|| {
                    anyhow::anyhow!("unknown case {c:?} (use bulk, app-limited or web)")
                })
            })
            .collect::<Result<_>>()?;
    }
    cfg.repeat = a.repeat;
    cfg.compare_off = !a.no_off;
    cfg.trace_dir = a.trace_dir;
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

fn spread(v: Option<Spread>, scale: f64, digits: usize, unit: &str) -> String {
    v.map_or("-".into(), |s| {
        if s.min == s.max {
            format!("{:.digits$}{unit}", s.median * scale)
        } else {
            format!(
                "{:.digits$}{unit} ({:.digits$}–{:.digits$})",
                s.median * scale,
                s.min * scale,
                s.max * scale
            )
        }
    })
}

fn table(r: &InlineBenchReport) -> String {
    let c = &r.config;
    let mut out = vec![
        format!(
            "Inline (ImTCP) on a kernel CUBIC flow: C = {} Mbit/s, RTT {} ms (delay line on the reverse path), \
             buffer {} packets, UDP cross traffic of 44/576/1500 B ({:.0}/{:.0}/{:.0}% of its bytes); \
             A steps {:?} Mbit/s, {} s each, judged from {} s after each step; web case: web-like TCP cross \
             traffic of C − {} Mbit/s for {} s. {}",
            c.capacity_mbit,
            c.rtt_ms,
            c.buffer_packets,
            c.mix[0].1 * 100.0,
            c.mix[1].1 * 100.0,
            c.mix[2].1 * 100.0,
            c.steps_mbit,
            c.step_s,
            c.settle_s,
            c.app_a_mbit,
            c.web_s,
            r.load
        ),
        String::new(),
        format!("Summary over {} repeat(s): median (min–max).", c.repeat),
        String::new(),
        "| case | inline | runs | throughput (Mbit/s) | retransmits | RTOs | per 2 RTT | median err | p90 err |".into(),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|".into(),
    ];
    for x in &r.summary {
        out.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            x.case,
            if x.inline { "on" } else { "off" },
            x.runs,
            spread(x.throughput_mbit, 1.0, 1, ""),
            spread(x.retransmits, 1.0, 0, ""),
            spread(x.rtos, 1.0, 0, ""),
            spread(x.estimates_per_2rtt, 1.0, 2, ""),
            spread(x.median_err, 100.0, 1, "%"),
            spread(x.p90_err, 100.0, 1, "%"),
        ));
    }
    out.extend([
        String::new(),
        "Every run:".into(),
        String::new(),
        "| case | run | inline | throughput (Mbit/s) | retransmits | RTOs | bottleneck (Mbit/s) | srtt (ms) | cwnd ≥ 4N | estimates | per s | per 2 RTT | median err | p90 err | delivery rate (Mbit/s) | inline median (Mbit/s) | ACK line late p99 / max (µs) |".into(),
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ]);
    for x in &r.runs {
        out.push(format!(
            "| {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
            x.case,
            x.rep + 1,
            if x.inline { "on" } else { "off" },
            x.throughput_mbit,
            x.retransmits,
            x.rtos.map_or("-".into(), |v| v.to_string()),
            x.bottleneck_mbit,
            x.srtt_ms.map_or("-".into(), |v| format!("{v:.0}")),
            x.cwnd_ge_4n
                .map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
            x.estimates,
            x.estimates_per_s,
            x.estimates_per_2rtt,
            pct(x.median_err),
            pct(x.p90_err),
            x.delivery_rate_mbit
                .map_or("-".into(), |v| format!("{v:.1}")),
            x.inline_median_mbit
                .map_or("-".into(), |v| format!("{v:.1}")),
            x.ack_line_late_us
                .map_or("-".into(), |l| format!("{:.0} / {:.0}", l[1], l[2])),
        ));
    }
    out.push(String::new());
    out.push(format!(
        "Retransmits per {} s (the flow's `tcpi_total_retrans` sampled once a second), bulk runs:",
        c.step_s
    ));
    out.push(String::new());
    out.push("| run | inline | per step |".into());
    out.push("|---:|---|---|".into());
    for x in r.runs.iter().filter(|x| x.case == "bulk") {
        out.push(format!(
            "| {} | {} | {} |",
            x.rep + 1,
            if x.inline { "on" } else { "off" },
            per_step(&x.retrans_series, c.step_s)
        ));
    }
    out.push(String::new());
    out.push("Per step (inline on):".into());
    out.push(String::new());
    out.push("| case | run | A truth (Mbit/s) | settled estimates | median err | p90 err | measurements to within 10% |".into());
    out.push("|---|---:|---:|---:|---:|---:|---:|".into());
    for x in r.runs.iter().filter(|x| x.inline) {
        for s in &x.steps {
            out.push(format!(
                "| {} | {} | {:.1} | {} | {} | {} | {} |",
                x.case,
                x.rep + 1,
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

/// A cumulative once-a-second series cut into steps of `step_s`: what each step added (a last,
/// shorter step too: the samples start 1 s in, so a run may have one fewer than its seconds).
fn per_step(series: &[u32], step_s: f64) -> String {
    let step = (step_s.round() as usize).max(1);
    let mut prev = 0;
    let parts: Vec<String> = series
        .chunks(step)
        .map(|c| {
            let v = *c.last().expect("chunks are not empty");
            let added = v.saturating_sub(prev);
            prev = v;
            added.to_string()
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::per_step;

    #[test]
    fn retransmits_cut_into_steps() {
        assert_eq!(per_step(&[1, 2, 3, 4, 5, 6], 2.0), "2, 2, 2");
        // A last step one sample short still counts.
        assert_eq!(per_step(&[0, 5, 5, 9, 12], 2.0), "5, 4, 3");
        assert_eq!(per_step(&[], 60.0), "-");
    }
}
