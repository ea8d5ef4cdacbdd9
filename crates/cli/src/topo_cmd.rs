//! `mgrp testbed up|run|status` for testbeds built from a topology file (`--topology`).

use crate::say;
use crate::testbed_cmd::describe_capacity;
use anyhow::{Context, Result};
use mgrp_lab::testbed_run::check_times;
use mgrp_lab::topo_run::{options, TopoEvent, TopoRunConfig};
use mgrp_testbed::topo::{self, NodeKind, TopoTestbed};
use mgrp_testbed::topology::{existing_namespaces, State};
use mgrp_testbed::units::fmt_rate;
use mgrp_testbed::{Buffer, DelayMode, Shaper};

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

/// `testbed run --topology`: build it, run its flows, print per-link truth, tear down.
pub fn run(cfg: &TopoRunConfig, json: bool, out: Option<&std::path::Path>) -> Result<()> {
    check_times(cfg.duration, cfg.bin, cfg.report_every)?;
    crate::signals::catch_signals();
    let human = !json;
    let mut on_event = |e: TopoEvent| match e {
        _ if !human => {}
        TopoEvent::Up(tb) => say!("{}", describe(tb)),
        TopoEvent::Started(links) => {
            say!("\n  per shaped direction: cross / A in Mbit/s (A = measured C − cross that left its shaper)");
            let mut head = format!("{:>11}", "t (s)");
            for l in links {
                head.push_str(&format!(" {:>15}", l.label));
            }
            say!("{head}");
        }
        TopoEvent::Bin { from_s, to_s, bin } => {
            let mut row = format!("{from_s:>5.1}-{to_s:<5.1}");
            for l in &bin.links {
                let cell = format!("{:.2}/{:.2}", l.cross_bps / 1e6, l.avail_bps / 1e6);
                row.push_str(&format!(" {cell:>15}"));
            }
            say!("{row}");
        }
    };
    let report = mgrp_lab::topo_run::run(cfg, crate::signals::hooks(), &mut on_event)?;
    let (summary, links, run_drain) = (&report.summary, &report.links, &report.run_drain);
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
        if let Some(s) = summary {
            for ((l, info), (_, drain)) in s.links.iter().zip(links).zip(run_drain) {
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
    let doc = serde_json::to_string_pretty(&report)?;
    if json {
        say!("{doc}");
    }
    if let Some(p) = out {
        std::fs::write(p, &doc).with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}
