//! `mgrp trace PEER`: the path to a peer agent, hop by hop (logic in `mgrp-map`).

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_map::TraceConfig;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct TraceArgs {
    /// The peer agent: IP or IP:PORT (default port 7240).
    peer: String,
    /// Highest TTL probed (1..=64).
    #[arg(long, short = 'm', default_value_t = 30)]
    max_hops: u32,
    /// Rounds (parallel traceroutes); each hop's minimum over them is its base latency.
    #[arg(long, short = 'r', default_value_t = 3)]
    runs: u32,
    /// Probe size in bytes (UDP payload, MGRP header included).
    #[arg(long, default_value_t = 64)]
    size: u16,
    /// Gap between the probes of a round.
    #[arg(long, default_value = "20us", value_parser = crate::testbed_cmd::duration)]
    gap: Duration,
    /// Key file (hex); otherwise MGRP_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: TraceArgs) -> Result<()> {
    let cfg = TraceConfig::checked(a.max_hops, a.runs, a.size, a.gap.as_nanos() as u64)?;
    let peer = parse_peer(&a.peer)?;
    let key = Key::load(a.key_file.as_deref())?;
    crate::signals::catch_signals();
    let mut session = Session::connect(
        peer,
        &key,
        Arc::new(Pacer::spawn()?),
        Duration::from_secs(3),
    )?;
    let rep = mgrp_map::trace(&mut session, &cfg, crate::signals::interrupted)?;
    if a.json {
        say!("{}", serde_json::to_string(&rep)?);
    } else {
        say!("{}", rep.table().trim_end());
    }
    Ok(())
}
