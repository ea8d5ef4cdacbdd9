//! `mgrp bottleneck PEER`: which link of the path to a peer agent limits a TCP flow, and what
//! that flow gets through it (Tneck; logic in `mgrp-map`); `--pathneck` runs the pathneck-style
//! baseline instead.

use crate::say;
use anyhow::{bail, Result};
use clap::Args;
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_map::pathneck::TrainAnalysis;
use mgrp_map::{BottleneckConfig, BottleneckReport, PathneckConfig, PathneckReport, TneckConfig};
use mgrp_testbed::units::fmt_rate;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct BottleneckArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    /// Highest TTL of the traceroutes (1..=64).
    #[arg(long, short = 'm', default_value_t = 30)]
    max_hops: u32,
    /// Longest the TCP flow may run.
    #[arg(long, default_value = "15s", value_parser = crate::testbed_cmd::duration)]
    max_time: Duration,
    /// Most bytes the TCP flow may send (e.g. 50MB).
    #[arg(long, default_value = "50MB", value_parser = crate::testbed_cmd::bytes)]
    budget: u64,
    /// After the verdict, the flow runs this long more to measure its throughput (the bound).
    #[arg(long, default_value = "2s", value_parser = crate::testbed_cmd::duration)]
    measure: Duration,
    /// Congestion control of the TCP flow (default: the kernel's).
    #[arg(long)]
    cc: Option<String>,
    /// Idle traceroutes for each hop's base delay.
    #[arg(long, default_value_t = 5)]
    base_rounds: u32,
    /// Consecutive samples that must point at one link.
    #[arg(long, default_value_t = 4)]
    confirm: u32,
    /// Smallest per-link delay rise that counts.
    #[arg(long, default_value = "1ms", value_parser = crate::testbed_cmd::duration)]
    min_rise: Duration,
    /// Locate with the pathneck-style prober instead: recursive packet trains, no TCP flow
    /// (a baseline; see docs/bottleneck.md).
    #[arg(long)]
    pathneck: bool,
    /// With --pathneck: send the trains through this agent's Probe API socket, as a third-party
    /// prober does (default: an in-process session, which needs the key).
    #[arg(long)]
    api: Option<PathBuf>,
    /// With --pathneck: trains in the probing set.
    #[arg(long, default_value_t = 10)]
    trains: u32,
    /// Key file (hex); otherwise MGRP_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: BottleneckArgs) -> Result<()> {
    if a.max_hops == 0 || a.max_hops > mgrp_map::trace::MAX_TTL as u32 {
        bail!("TTL {} is out of range: hops are 1..=64", a.max_hops);
    }
    if a.budget < 100_000 {
        bail!("--budget must be at least 100kB: a TCP flow needs room to fill a queue");
    }
    if a.max_time < Duration::from_millis(500) || a.max_time > mgrp_engine::proto::MAX_LOAD {
        bail!("--max-time must be between 500ms and 120s (an agent sinks no longer)");
    }
    let cfg = BottleneckConfig {
        tneck: TneckConfig {
            base_rounds: a.base_rounds,
            confirm: a.confirm,
            min_rise_ns: a.min_rise.as_nanos() as u64,
        },
        max_hops: a.max_hops as u8,
        max_load: a.max_time,
        budget_bytes: a.budget,
        measure: a.measure,
        cc: a.cc.clone(),
        size: 64,
    };
    cfg.tneck.validate()?;
    let peer = parse_peer(&a.peer)?;
    if a.pathneck {
        return run_pathneck(&a, peer);
    }
    let key = Key::load(a.key_file.as_deref())?;
    crate::signals::catch_signals();
    let pacer = Arc::new(Pacer::spawn()?);
    let connect = || Session::connect(peer, &key, pacer.clone(), Duration::from_secs(3));
    let (mut trace, load) = (connect()?, connect()?);
    let json = a.json;
    let rep = mgrp_map::bottleneck(&mut trace, load, &cfg, crate::signals::interrupted, |s| {
        if !json {
            eprintln!(
                "sample: {}",
                s.points_at
                    .map_or("no link rose enough".into(), |l| format!("link {l}"))
            );
        }
    })?;
    if json {
        say!("{}", serde_json::to_string(&rep)?);
    } else {
        say!("{}", table(&rep).trim_end());
    }
    Ok(())
}

fn run_pathneck(a: &BottleneckArgs, peer: std::net::SocketAddr) -> Result<()> {
    let cfg = PathneckConfig {
        trains: a.trains,
        ..Default::default()
    };
    cfg.validate()?;
    crate::signals::catch_signals();
    let json = a.json;
    let progress = |t: &TrainAnalysis| {
        if !json {
            let links: Vec<String> = t.chokes.iter().map(|c| c.link.to_string()).collect();
            eprintln!(
                "train: {}",
                match (t.valid, links.is_empty()) {
                    (false, _) => "not valid (the sender's gap or every hop's is missing)".into(),
                    (true, true) => "no choke point".into(),
                    (true, false) => format!("choke points on link {}", links.join(", ")),
                }
            );
        }
    };
    let peer_s = peer.to_string();
    let every = Duration::from_millis(100);
    let rep = match &a.api {
        Some(socket) => mgrp_map::pathneck(
            mgrp_engine::loss::via_api(socket, &peer_s),
            &peer_s,
            &cfg,
            a.base_rounds,
            every,
            crate::signals::interrupted,
            progress,
        )?,
        None => {
            let key = Key::load(a.key_file.as_deref())?;
            let mut s = Session::connect(
                peer,
                &key,
                Arc::new(Pacer::spawn()?),
                Duration::from_secs(3),
            )?;
            mgrp_map::pathneck(
                mgrp_engine::loss::via_session(&mut s),
                &peer_s,
                &cfg,
                a.base_rounds,
                every,
                crate::signals::interrupted,
                progress,
            )?
        }
    };
    if json {
        say!("{}", serde_json::to_string(&rep)?);
    } else {
        say!("{}", pathneck_table(&rep).trim_end());
    }
    Ok(())
}

fn pathneck_table(r: &PathneckReport) -> String {
    let mut out = format!("path to {}:\n", r.peer);
    for h in &r.path {
        let rate = r.link_rates.iter().find(|l| l.link == h.ttl);
        out += &format!(
            "  {:>2}  {:<16} {}\n",
            h.ttl,
            h.addr.map_or("*".into(), |a| a.to_string()),
            rate.map_or(String::new(), |l| format!(
                "link {} chokes in {:.0}% of trains, conf {:.2}, gap after {:.2} ms",
                l.link,
                l.d_rate * 100.0,
                l.conf,
                l.gap_ns as f64 / 1e6
            )),
        );
    }
    match (&r.verdict, &r.why_not) {
        (Some(v), _) => {
            out += &format!(
            "bottleneck (pathneck-style): link {} {}, d_rate {:.2} over {} trains, conf {:.2}\n",
            v.link,
            link_ends(r.link_from, r.link_to),
            v.d_rate,
            v.trains,
            v.conf
        )
        }
        (None, Some(why)) => out += &format!("no bottleneck found: {why}\n"),
        (None, None) => out += "no bottleneck found\n",
    }
    out += &format!(
        "cost: {} B of TTL-limited probes, {} B of train load ({:.2}%)\n",
        r.probe_bytes,
        r.load_bytes,
        100.0 * r.probe_bytes as f64 / r.load_bytes.max(1) as f64
    );
    out
}

fn table(r: &BottleneckReport) -> String {
    let mut out = format!("path to {}:\n", r.peer);
    for h in &r.path {
        let mark = r
            .verdict
            .filter(|v| v.link == h.ttl)
            .map_or("", |_| "   <= bottleneck link ends here");
        out += &format!(
            "  {:>2}  {:<16} base {}{mark}\n",
            h.ttl,
            h.addr.map_or("*".into(), |a| a.to_string()),
            h.base_ns
                .map_or("-".into(), |b| format!("{:.3} ms", b as f64 / 1e6)),
        );
    }
    match (&r.verdict, &r.why_not) {
        (Some(v), _) => {
            out += &format!(
                "bottleneck: link {} {}, confirmed after {} samples in {:.2} s, confidence {:.2}, queueing rise {:.2} ms\n",
                v.link,
                link_ends(r.link_from, r.link_to),
                v.samples,
                r.seconds_to_verdict.unwrap_or(0.0),
                v.confidence,
                v.rise_ns as f64 / 1e6
            );
            if let Some(b) = r.bound_bps {
                out += &format!(
                    "TCP-available bandwidth (the flow's goodput): = {}\n",
                    fmt_rate(b)
                );
            }
        }
        (None, Some(why)) => out += &format!("no bottleneck found: {why}\n"),
        (None, None) => out += "no bottleneck found\n",
    }
    out += &format!(
        "cost: {} B of traceroute probes, {} B of TCP flow ({:.2}%), {} retransmits\n",
        r.probe_bytes,
        r.flow_bytes,
        100.0 * r.probe_bytes as f64 / r.flow_bytes.max(1) as f64,
        r.flow_retrans
    );
    out
}

/// "(near -> far)" of a bottleneck link: the sender itself has no hop address, a silent far hop
/// is "*".
fn link_ends(from: Option<std::net::IpAddr>, to: Option<std::net::IpAddr>) -> String {
    format!(
        "({} -> {})",
        from.map_or("this host".into(), |a| a.to_string()),
        to.map_or("*".into(), |a| a.to_string())
    )
}
