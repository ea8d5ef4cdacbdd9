//! `mgrp tcp-available PEER`: the throughput a new TCP flow gets on the path to a peer agent
//! now (TCP-available bandwidth), by running one, bounded in time and bytes. Logic in
//! `mgrp_estimate::tcp_avail` (the judge) and `mgrp_engine::run::run_tcp_avail` (the flow).

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::run_tcp_avail;
use mgrp_estimate::tcp_avail::TcpAvailParams;
use mgrp_testbed::units::fmt_rate;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct TcpAvailArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    /// Longest the flow runs. Its first 2 s are not measured; what it gets after them, up to
    /// 4 s, is the answer (it stops there once its share is steady).
    #[arg(long, default_value = "6s", value_parser = crate::testbed_cmd::duration)]
    max_time: Duration,
    /// Bytes the flow may send at most.
    #[arg(long, default_value = "64MB", value_parser = crate::testbed_cmd::bytes)]
    budget: u64,
    /// Congestion control of the flow (the host's default if not given): the share a new flow
    /// gets depends on it.
    #[arg(long)]
    cc: Option<String>,
    /// Key file (hex); otherwise MGRP_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    peer: String,
    tcp_available: Option<&'a mgrp_estimate::Estimate>,
    mean_bps: Option<f64>,
    stopped_by: &'a str,
    bytes_acked: u64,
    retransmits: u32,
    seconds: f64,
}

pub fn run(a: TcpAvailArgs) -> Result<()> {
    let peer = parse_peer(&a.peer)?;
    let d = TcpAvailParams::default();
    let max_time_ns = a.max_time.as_nanos().min(u64::MAX as u128) as u64;
    let p = TcpAvailParams {
        max_time_ns,
        // A shorter run measures what it can after the warmup.
        min_measure_ns: d
            .min_measure_ns
            .min(max_time_ns.saturating_sub(d.warmup_ns)),
        budget_bytes: a.budget,
        ..d
    };
    p.validate().map_err(anyhow::Error::msg)?;
    let key = Key::load(a.key_file.as_deref())?;
    crate::signals::catch_signals();
    let session = Session::connect(
        peer,
        &key,
        Arc::new(Pacer::spawn()?),
        Duration::from_secs(3),
    )?;
    let run = run_tcp_avail(
        session,
        &p,
        a.cc.as_deref(),
        crate::signals::interrupted,
        |e| {
            eprintln!(
                "  {:>5.2} s  {}",
                e.quality.elapsed_s,
                fmt_rate(e.value_bps)
            )
        },
    )?;
    let report = Report {
        peer: peer.to_string(),
        tcp_available: run.estimate.as_ref(),
        mean_bps: run.mean_bps,
        stopped_by: run.why,
        bytes_acked: run.load.bytes_acked,
        retransmits: run.load.retrans,
        seconds: run.load.seconds,
    };
    if a.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    match &run.estimate {
        Some(e) => say!(
            "tcp-available  {} [{} .. {}]  (median of {:.2} s of 250 ms slices, confidence {:.2}; stopped: {})",
            fmt_rate(e.value_bps),
            fmt_rate(e.low_bps),
            fmt_rate(e.high_bps),
            e.quality.elapsed_s,
            e.quality.confidence,
            run.why
        ),
        None => say!("tcp-available  no estimate (stopped: {})", run.why),
    }
    say!(
        "flow           {:.1} MB acknowledged in {:.1} s, {} retransmits",
        run.load.bytes_acked as f64 / 1e6,
        run.load.seconds,
        run.load.retrans
    );
    Ok(())
}
