//! `mgrp testbed up|run|status` for testbeds built from a topology file (`--topology`).

use crate::say;
use crate::testbed_cmd::describe_capacity;
use anyhow::{bail, Context, Result};
use mgrp_testbed::generator::{GenOptions, GenReport};
use mgrp_testbed::topo::truth::DirInfo;
use mgrp_testbed::topo::{self, NodeKind, TopoBin, TopoOptions, TopoTestbed, TopoTruthSampler};
use mgrp_testbed::topology::{existing_namespaces, State};
use mgrp_testbed::units::fmt_rate;
use mgrp_testbed::{Buffer, DelayMode, Shaper};
use serde::Serialize;
use std::time::Duration;

/// What `testbed run --topology` takes from the command line.
pub struct RunOpts {
    pub duration: Duration,
    pub bin: Duration,
    pub report_every: Duration,
    pub spin: Duration,
    pub json: bool,
    pub out: Option<std::path::PathBuf>,
    pub measure_capacity: bool,
}

/// Whether testbed `name` was built from a topology file.
pub fn is_topology(name: &str) -> bool {
    State::load(name).is_some_and(|s| s.topology.is_some())
}

fn describe(tb: &TopoTestbed) -> String {
    let t = tb.topology();
    let mut s = format!(
        "topology {} — testbed {}, namespaces mgrp-{}-{{{}}}\n",
        tb.source(),
        tb.name(),
        tb.name(),
        t.nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    );
    s.push_str("  links (each its own /24; a = .1, b = .2):\n");
    for (i, l) in t.links.iter().enumerate() {
        let kind = |n: usize| match t.nodes[n].kind {
            NodeKind::Host => "",
            NodeKind::Router => " (router)",
        };
        let shaping = match &l.shaping {
            None => "unshaped".to_string(),
            Some(sh) => format!(
                "{} {}{}, buffer {}, burst {} B",
                match sh.shaper {
                    Shaper::Htb => "htb",
                    Shaper::Tbf => "tbf",
                },
                fmt_rate(sh.capacity_bps as f64),
                match (sh.a_to_b, sh.b_to_a) {
                    (true, true) => "",
                    (true, false) => " a→b only",
                    _ => " b→a only",
                },
                match sh.buffer {
                    Buffer::Packets(n) => format!("{n} packets"),
                    Buffer::Bytes(b) => format!("{b} B"),
                    Buffer::Time(d) => format!(
                        "{} ms = {} B",
                        d.as_secs_f64() * 1e3,
                        sh.buffer.bytes(sh.capacity_bps)
                    ),
                },
                sh.burst_bytes
            ),
        };
        let delay = l
            .delay
            .map(|d| {
                format!(
                    ", delay {} ms on {}'s egress",
                    d.as_secs_f64() * 1e3,
                    t.nodes[t.delay_end(i)].name
                )
            })
            .unwrap_or_default();
        s.push_str(&format!(
            "    #{:<2} {}{} {} — {}{} {}  {}{}\n",
            i + 1,
            t.nodes[l.a].name,
            kind(l.a),
            t.addr(i, l.a),
            t.nodes[l.b].name,
            kind(l.b),
            t.addr(i, l.b),
            shaping,
            delay
        ));
    }
    s.push_str("  shaped directions:\n");
    for c in tb.capacities() {
        s.push_str(&format!(
            "    {:<14} {}\n",
            c.label,
            describe_capacity(&c.capacity)
        ));
    }
    for f in &t.flows {
        s.push_str(&format!(
            "  flow: {} → {} {}\n",
            t.nodes[f.from].name, t.nodes[f.to].name, f.pattern
        ));
    }
    if let Some((a, b)) = t.measure {
        s.push_str(&format!(
            "  measured pair: {} {} → {} {}\n",
            t.nodes[a].name,
            t.host_addr(a),
            t.nodes[b].name,
            t.host_addr(b)
        ));
    }
    s.push_str(&format!(
        "  routers' ICMP rate limit: {}",
        match t.icmp {
            topo::IcmpRateLimit::Off => "off (every TTL expiry answered)",
            topo::IcmpRateLimit::Kernel => "kernel defaults",
        }
    ));
    s
}

fn options(name: Option<String>, source: &str, measure: bool, mode: DelayMode) -> TopoOptions {
    TopoOptions {
        name,
        measure_capacity: measure,
        delay_mode: mode,
        source: source.to_string(),
    }
}

/// `testbed up --topology`: build it and leave it standing.
pub fn up(name: &str, topology: &str, json: bool, measure: bool) -> Result<()> {
    let exe =
        std::env::current_exe().context("cannot find the mgrp executable to run the delay line")?;
    let mode = DelayMode::Process {
        program: exe,
        args: vec!["testbed".into(), "delayline".into()],
    };
    let text = topo::source(topology)?;
    let tb = TopoTestbed::up(&text, options(Some(name.into()), topology, measure, mode))
        .map_err(|e| anyhow::anyhow!("{topology}: {e}"))?;
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": tb.name(), "topology": tb.topology(), "capacities": tb.capacities(),
                "delay_pids": tb.delay_pids(), "namespaces": existing_namespaces(tb.name()),
            }))?
        );
    } else {
        say!("{}", describe(&tb));
        say!("up; remove with: mgrp testbed down {}", tb.name());
    }
    tb.persist()?;
    Ok(())
}

/// `testbed status NAME` for a topology testbed.
pub fn status(name: &str, json: bool) -> Result<()> {
    mgrp_testbed::netns::check_privileges()?;
    let tb = TopoTestbed::attach(name)?;
    let ns = existing_namespaces(name);
    let mut counters = mgrp_testbed::topo::truth::TopoCounters::open(&tb)?;
    let now = counters.sample()?;
    let links = mgrp_testbed::topo::truth::dir_infos(&tb);
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": name, "source": tb.source(), "topology": tb.topology(),
                "capacities": tb.capacities(), "namespaces": ns,
                "links": links, "counters": now,
            }))?
        );
    } else {
        say!("{}", describe(&tb));
        say!(
            "  namespaces present: {}/{}",
            ns.len(),
            tb.topology().nodes.len()
        );
        for (l, c) in links.iter().zip(&now.dirs) {
            say!(
                "  {:<14} shaper sent {} B / {} pkts, dropped {}, backlog {} B; foreground {} B",
                l.label,
                c.sent_bytes,
                c.sent_packets,
                c.drops,
                c.backlog_bytes,
                c.fg_bytes
            );
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct RunReport {
    testbed: String,
    topology: String,
    /// Every shaped direction: configured and measured capacity.
    links: Vec<DirInfo>,
    /// What each direction drained whenever it had a backlog during the run (by label).
    run_drain: Vec<(String, Option<mgrp_testbed::capacity::Drain>)>,
    flows: Vec<GenReport>,
    /// Ground truth over the whole run.
    summary: Option<TopoBin>,
    bin_s: f64,
    /// CLOCK_MONOTONIC ns at t = 0 of the bins.
    origin_ns: u64,
    bins: Vec<TopoBin>,
    interrupted: bool,
}

/// `testbed run --topology`: build it, run its flows, print per-link truth, tear down.
pub fn run(topology: &str, o: RunOpts) -> Result<()> {
    if o.duration.is_zero() || o.duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be between 1ms and 24h");
    }
    if o.bin < Duration::from_millis(10) || o.report_every < o.bin {
        bail!("--bin must be at least 10ms and --report-every at least --bin");
    }
    crate::signals::catch_signals();
    let human = !o.json;
    let text = topo::source(topology)?;
    let tb = TopoTestbed::up(
        &text,
        options(None, topology, o.measure_capacity, DelayMode::Thread),
    )
    .map_err(|e| anyhow::anyhow!("{topology}: {e}"))?;
    if human {
        say!("{}", describe(&tb));
    }
    let sampler = TopoTruthSampler::start(&tb, o.bin)?;
    let gens = tb.start_flows(&GenOptions {
        spin: o.spin,
        max_duration: o.duration + Duration::from_secs(1),
    })?;
    let links = sampler.truth().links;
    let start = sampler.truth().origin_ns;
    if human {
        say!("\n  per shaped direction: cross / A in Mbit/s (A = measured C − cross that left its shaper)");
        let mut head = format!("{:>11}", "t (s)");
        for l in &links {
            head.push_str(&format!(" {:>15}", l.label));
        }
        say!("{head}");
    }
    let step = o.report_every.as_nanos() as u64;
    let end = start + o.duration.as_nanos() as u64;
    let mut next = start + step;
    while next <= end && !crate::signals::interrupted() {
        // Sleep in slices so Ctrl-C is seen; rows print once the sampler has passed their end.
        while mgrp_testbed::clock::now_ns() < next + o.bin.as_nanos() as u64
            && !crate::signals::interrupted()
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let (true, Some(b)) = (human, sampler.truth().window(next - step, next)) {
            let mut row = format!(
                "{:>5.1}-{:<5.1}",
                (next - step - start) as f64 / 1e9,
                (next - start) as f64 / 1e9
            );
            for l in &b.links {
                let cell = format!("{:.2}/{:.2}", l.cross_bps / 1e6, l.avail_bps / 1e6);
                row.push_str(&format!(" {cell:>15}"));
            }
            say!("{row}");
        }
        next += step;
    }
    let interrupted = crate::signals::interrupted();
    let mut flows = Vec::new();
    for g in gens {
        flows.push(g.stop()?);
    }
    let truth = sampler.stop()?;
    // The summary covers the rows printed: the flows' run, not their wind-down.
    let summary = truth.window(start, (next - step).min(end));
    let run_drain = links
        .iter()
        .enumerate()
        .map(|(i, l)| (l.label.clone(), truth.drain(i)))
        .collect::<Vec<_>>();
    if human {
        say!("\n  summary over the run:");
        say!(
            "  {:<14} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>7}",
            "direction",
            "config Mb/s",
            "meas. Mb/s",
            "drain Mb/s",
            "cross",
            "fg",
            "A",
            "drops"
        );
        if let Some(s) = &summary {
            for ((l, info), (_, drain)) in s.links.iter().zip(&links).zip(&run_drain) {
                say!(
                    "  {:<14} {:>11.3} {:>11} {:>11} {:>10.3} {:>10.3} {:>10.3} {:>7.0}",
                    l.label,
                    info.configured_bps / 1e6,
                    if info.measured {
                        format!("{:.3}", info.capacity_bps / 1e6)
                    } else {
                        "-".into()
                    },
                    drain.map_or("-".into(), |d| format!("{:.3}", d.bps / 1e6)),
                    l.cross_bps / 1e6,
                    l.fg_bps / 1e6,
                    l.avail_bps / 1e6,
                    l.drops
                );
            }
        }
        say!("  (drain: what the direction sent while backlogged during the run, if it ever was)");
    }
    let report = RunReport {
        testbed: tb.name().to_string(),
        topology: topology.to_string(),
        links,
        run_drain,
        flows,
        summary,
        bin_s: o.bin.as_secs_f64(),
        origin_ns: truth.origin_ns,
        bins: truth.bins(o.bin),
        interrupted,
    };
    let doc = serde_json::to_string_pretty(&report)?;
    if o.json {
        say!("{doc}");
    }
    if let Some(p) = &o.out {
        std::fs::write(p, &doc).with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}
