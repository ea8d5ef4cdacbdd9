//! `mgrp probe PEER`: the seed's pktrain — trains of N probes of L bytes, gap G, every T.

use crate::say;
use anyhow::{bail, Result};
use clap::Args;
use mgrp_engine::api::{parse_peer, ApiRequest};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::train::{TrainResult, TrainSpec};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ProbeArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    /// Probes per train.
    #[arg(long, short = 'n', default_value_t = 100)]
    count: usize,
    /// Probe size in bytes (UDP payload, MGRP header included; 32..=1472).
    #[arg(long, short = 'l', default_value_t = 1000)]
    size: u16,
    /// Gap between probes.
    #[arg(long, short = 'g', default_value = "100us", value_parser = crate::testbed_cmd::duration)]
    gap: Duration,
    /// Time from one train's start to the next.
    #[arg(long, default_value = "100ms", value_parser = crate::testbed_cmd::duration)]
    every: Duration,
    /// How long to keep sending trains.
    #[arg(long, default_value = "1s", value_parser = crate::testbed_cmd::duration)]
    duration: Duration,
    /// Stop after this many trains (overrides --duration).
    #[arg(long)]
    trains: Option<u32>,
    /// Key file (hex) for a direct session; otherwise MGRP_KEY. Not needed with --api.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Send through a local agent's Probe API socket instead of a session of our own.
    #[arg(long)]
    api: Option<PathBuf>,
    /// One JSON object per train.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ProbeArgs) -> Result<()> {
    let peer = parse_peer(&a.peer)?;
    let spec = TrainSpec::uniform(a.count, a.size, a.gap.as_nanos() as u64);
    spec.validate()?;
    if a.every.is_zero() || a.duration > Duration::from_secs(24 * 3600) {
        bail!("--every must be > 0 and --duration at most 24h");
    }
    crate::signals::catch_signals();
    let mut session = match &a.api {
        Some(_) => None,
        None => {
            let key = Key::load(a.key_file.as_deref())?;
            Some(Session::connect(
                peer,
                &key,
                Arc::new(Pacer::spawn()?),
                Duration::from_secs(3),
            )?)
        }
    };
    let max_trains = a.trains.unwrap_or(u32::MAX);
    let end = Instant::now() + a.duration;
    if !a.json {
        say!(
            "probing {peer}: {} × {} B, gap {} us ({:.2} Mbit/s in-train), every {} ms",
            a.count,
            a.size,
            a.gap.as_nanos() as f64 / 1e3,
            a.size as f64 * 8.0 / a.gap.as_secs_f64().max(1e-9) / 1e6,
            a.every.as_millis()
        );
        say!(
            "{:>5} {:>5} {:>5} {:>5} {:>12} {:>11} {:>17} {:>17} {:>7}",
            "train",
            "sent",
            "recv",
            "lost",
            "dispersion",
            "rx Mbit/s",
            "gap err med/p99",
            "rx gap med/p99",
            "flag"
        );
    }
    let mut n = 0u32;
    let mut next = Instant::now();
    while n < max_trains
        && (a.trains.is_some() || Instant::now() < end)
        && !crate::signals::interrupted()
    {
        let r = match &mut session {
            Some(s) => s.send_train(&spec)?,
            None => mgrp_engine::api::request(
                a.api.as_deref().expect("api mode"),
                &ApiRequest {
                    peer: peer.to_string(),
                    train: Some(spec.clone()),
                    count: None,
                    size: None,
                    gap_ns: None,
                },
                Duration::from_nanos(spec.planned_ns()) + Duration::from_secs(10),
            )?,
        };
        n += 1;
        print_train(&r, a.json);
        next += a.every;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok(())
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

fn print_train(r: &TrainResult, json: bool) {
    if json {
        say!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    let s = &r.stats;
    let pair = |q: Option<mgrp_engine::train::Quantiles>| match q {
        Some(q) => format!("{}/{}", us(q.median), us(q.p99)),
        None => "-".into(),
    };
    say!(
        "{:>5} {:>5} {:>5} {:>5} {:>10}us {:>11} {:>17} {:>17} {:>7}",
        r.train,
        s.sent,
        s.received,
        s.lost,
        r.dispersion_ns()
            .map(|d| us(d as f64))
            .unwrap_or_else(|| "-".into()),
        r.rx_rate_bps()
            .map(|b| format!("{:.3}", b / 1e6))
            .unwrap_or_else(|| "-".into()),
        pair(s.gap_error),
        pair(s.rx_gap_error),
        if s.report_missing {
            "NOREPORT"
        } else if s.flagged {
            "FLAGGED"
        } else {
            "ok"
        }
    );
}
