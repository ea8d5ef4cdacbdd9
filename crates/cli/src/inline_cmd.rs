//! `mgrp inline`: a one-off look at inline measurement (ImTCP) of this host's own TCP flows.
//! The flows opted in are routed through the inline engine for `--duration`; their segments are
//! released as measurement streams and their ACKs read as echoes. No probe bytes are sent.

use crate::say;
use anyhow::{bail, Context, Result};
use clap::Args;
use mgrp_engine::inline::diag::Diag;
use mgrp_engine::inline::{FlowStatus, InlineConfig, InlineDriverCounters, InlineEngine};
use mgrp_shim::route::OptIn;
use mgrp_testbed::units::fmt_rate;
use serde::Serialize;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct InlineArgs {
    /// Which flows: to:PREFIX, tcp:PORT (destination port) or mark:N (SO_MARK); repeatable.
    #[arg(long = "opt-in", value_parser = |s: &str| OptIn::parse(s).map_err(|e| e.to_string()))]
    opt_in: Vec<OptIn>,
    /// One existing connection, LOCAL:PORT-REMOTE:PORT (as `ss -tn` shows it): checked to exist,
    /// opted in by its destination port, and the only one reported.
    #[arg(long)]
    flow: Option<String>,
    /// How long to measure.
    #[arg(long, default_value = "10s", value_parser = crate::testbed_cmd::duration)]
    duration: Duration,
    /// The sender's access rate: the top of the first search range.
    #[arg(long, default_value = "1gbit", value_parser = crate::testbed_cmd::rate)]
    access: u64,
    /// TUN device the flows are routed through.
    #[arg(long, default_value = "mgrp2")]
    dev: String,
    /// One JSON document: every flow with its estimates and counters.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    duration_s: f64,
    flows: Vec<FlowStatus>,
    driver: InlineDriverCounters,
}

fn parse_flow(s: &str) -> Result<(SocketAddrV4, SocketAddrV4)> {
    let (l, r) = s
        .split_once('-')
        .context("--flow: expected LOCAL:PORT-REMOTE:PORT, e.g. 10.0.0.1:40000-10.0.0.2:5001")?;
    let p = |x: &str| {
        x.trim()
            .parse::<SocketAddrV4>()
            .with_context(|| format!("--flow: {x:?} is not an IPv4 address:port"))
    };
    Ok((p(l)?, p(r)?))
}

pub fn run(a: InlineArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("mgrp inline needs root (a TUN device and policy routing, a raw socket, a capture)");
    }
    let mut opt_in = a.opt_in.clone();
    let flow = a.flow.as_deref().map(parse_flow).transpose()?;
    if let Some((local, remote)) = flow {
        let found = Diag::open()
            .context("sock_diag")?
            .lookup(local, remote)
            .context("sock_diag")?;
        if found.is_none() {
            bail!("no TCP connection {local} -> {remote} on this host (`ss -tn` lists them)");
        }
        if !opt_in.contains(&OptIn::TcpPort(remote.port())) {
            opt_in.push(OptIn::TcpPort(remote.port()));
        }
    }
    if opt_in.is_empty() {
        bail!("nothing to measure: give --opt-in (to:PREFIX, tcp:PORT, mark:N) or --flow");
    }
    crate::signals::catch_signals();
    let mut cfg = InlineConfig::new(opt_in, a.access as f64);
    cfg.dev = a.dev.clone();
    let engine = InlineEngine::start(&cfg)?;
    let t0 = Instant::now();
    let keep = |f: &FlowStatus| flow.is_none_or(|(l, r)| f.flow.local == l && f.flow.remote == r);
    let mut next = Duration::from_secs(1);
    while t0.elapsed() < a.duration && !crate::signals::interrupted() {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(why) = engine.failure() {
            bail!("inline engine stopped: {why}");
        }
        if t0.elapsed() >= next {
            next += Duration::from_secs(1);
            for f in engine.flows().iter().filter(|f| keep(f)) {
                let c = &f.counters;
                eprintln!(
                    "{:>5.1} s  {} -> {}  A {}  cwnd {} srtt {:.1} ms  streams {} measurements {}",
                    t0.elapsed().as_secs_f64(),
                    f.flow.local,
                    f.flow.remote,
                    f.estimate
                        .as_ref()
                        .map_or("-".into(), |e| fmt_rate(e.value_bps)),
                    f.cwnd,
                    f.srtt_us as f64 / 1e3,
                    c.streams_sent,
                    c.measurements
                );
            }
        }
    }
    let flows: Vec<FlowStatus> = engine.flows().into_iter().filter(|f| keep(f)).collect();
    let driver = engine.counters();
    drop(engine);
    let rep = Report {
        duration_s: t0.elapsed().as_secs_f64(),
        flows,
        driver,
    };
    if a.json {
        say!("{}", serde_json::to_string_pretty(&rep)?);
        return Ok(());
    }
    if rep.flows.is_empty() {
        say!(
            "no opted-in TCP flow sent anything in {:.1} s",
            rep.duration_s
        );
    }
    for f in &rep.flows {
        let c = &f.counters;
        say!("{} -> {}", f.flow.local, f.flow.remote);
        match &f.estimate {
            Some(e) => say!(
                "  available bandwidth {} (range {} .. {}), {} measurements",
                fmt_rate(e.value_bps),
                fmt_rate(e.low_bps),
                fmt_rate(e.high_bps),
                c.measurements
            ),
            None => say!("  no estimate"),
        }
        say!(
            "  kernel: cwnd {} srtt {:.1} ms rttvar {:.1} ms delivery rate {} retransmits {}",
            f.cwnd,
            f.srtt_us as f64 / 1e3,
            f.rttvar_us as f64 / 1e3,
            fmt_rate(f.delivery_rate_bps),
            f.total_retrans
        );
        say!(
            "  segments {} held {} streams {} (lost {}, timed out {})",
            c.segments,
            c.held,
            c.streams_sent,
            c.streams_lost,
            c.streams_timed_out
        );
        say!(
            "  cannot measure: cwnd < N {} segments, app-limited {} holds, loss {} streams",
            c.cwnd_below_n,
            c.app_limited,
            c.streams_lost
        );
    }
    Ok(())
}
