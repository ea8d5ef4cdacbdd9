//! `mgrp map --agents A,B,C [--pairwise]`: Netmapper from this host to several agents (and
//! with `--pairwise` between them, each agent relaying for this host) — the paths' links,
//! which are bottlenecks ("=B") and lower bounds on the rest (">B"). Logic in `mgrp-map`.

use crate::say;
use anyhow::{bail, Result};
use clap::Args;
use mgrp_engine::api::parse_peer;
use mgrp_engine::auth::Key;
use mgrp_engine::pacer::Pacer;
use mgrp_map::netmap::{AgentsConnector, MapConfig};
use mgrp_map::{BottleneckConfig, PlannerConfig, TraceConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct MapArgs {
    /// The agents to map paths to: IP or IP:PORT (default port 7240), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    agents: Vec<String>,
    /// Highest TTL of the traceroutes (1..=64).
    #[arg(long, short = 'm', default_value_t = 30)]
    max_hops: u32,
    /// All TCP flows and probes of the map together (e.g. 500MB).
    #[arg(long, default_value = "500MB", value_parser = crate::testbed_cmd::bytes)]
    budget: u64,
    /// Longest one TCP flow may run.
    #[arg(long, default_value = "15s", value_parser = crate::testbed_cmd::duration)]
    max_time: Duration,
    /// After a verdict, the flow runs this long more to measure its throughput.
    #[arg(long, default_value = "2s", value_parser = crate::testbed_cmd::duration)]
    measure: Duration,
    /// Most TCP flows run together.
    #[arg(long, default_value_t = 8)]
    max_parallel: usize,
    /// Also map the paths between the agents: each runs its trains and flows for this host
    /// (a relay; the agents must share this host's key).
    #[arg(long)]
    pairwise: bool,
    /// Congestion control of the flows (default: the kernel's).
    #[arg(long)]
    cc: Option<String>,
    /// Key file (hex); otherwise MGRP_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The map as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: MapArgs) -> Result<()> {
    if a.max_hops == 0 || a.max_hops > mgrp_map::trace::MAX_TTL as u32 {
        bail!("TTL {} is out of range: hops are 1..=64", a.max_hops);
    }
    if a.max_time < Duration::from_millis(500) || a.max_time > mgrp_engine::proto::MAX_LOAD {
        bail!("--max-time must be between 500ms and 120s (an agent sinks no longer)");
    }
    let mut agents = Vec::new();
    for s in &a.agents {
        let p = parse_peer(s)?;
        if agents.contains(&p) {
            bail!("agent {p} is listed twice");
        }
        agents.push(p);
    }
    let (pairs, sources) = if a.pairwise {
        mgrp_map::pairwise(&agents)
    } else {
        (agents.iter().map(|p| (0, *p)).collect(), vec![None])
    };
    let cfg = MapConfig {
        pairs,
        trace: TraceConfig {
            max_hops: a.max_hops as u8,
            ..Default::default()
        },
        bottleneck: BottleneckConfig {
            max_hops: a.max_hops as u8,
            max_load: a.max_time,
            measure: a.measure,
            cc: a.cc,
            ..Default::default()
        },
        planner: PlannerConfig {
            max_parallel: a.max_parallel,
            ..Default::default()
        },
        budget_bytes: a.budget,
        warmup: Duration::from_millis(1500),
    };
    cfg.validate()?;
    let key = Key::load(a.key_file.as_deref())?;
    crate::signals::catch_signals();
    let conn = AgentsConnector {
        key,
        pacer: Arc::new(Pacer::spawn()?),
        sources,
    };
    let json = a.json;
    let rep = mgrp_map::map(&conn, &cfg, crate::signals::interrupted, |s| {
        if !json {
            eprint!("{s}");
        }
    })?;
    if json {
        say!("{}", serde_json::to_string(&rep)?);
    } else {
        say!("{}", rep.table().trim_end());
    }
    Ok(())
}
