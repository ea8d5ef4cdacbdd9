//! `mgrp query create|list|show|delete`: client-created queries through the local agent's
//! `/v1/queries` (the agent runs them, within their budgets, and keeps them across restarts).
//! This file parses, asks and prints; the work is in `mgrp_service::queries`.

use crate::mpat_cmd::{call, Agent};
use crate::say;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum QueryCmd {
    /// Ask the agent to measure a peer: once (default), periodically, or notify on a condition.
    Create(CreateArgs),
    /// Every query with its status, last error and newest result.
    List(ListArgs),
    /// One query's status.
    Show(IdArgs),
    /// Stop and forget a query.
    Delete(IdArgs),
}

#[derive(Args)]
pub struct CreateArgs {
    /// The peer's agent: IP or IP:PORT.
    peer: String,
    /// once, periodic or event.
    #[arg(long, default_value = "once")]
    mode: String,
    /// auto, slops, slops-slow, chirp, sweep, capacity, loss_episodes.
    #[arg(long)]
    method: Option<String>,
    /// avail_bw (default), capacity, rtt, loss, jitter, episode_frequency, episode_duration.
    #[arg(long)]
    metric: Option<String>,
    /// Period of periodic and event queries (1s to 24h).
    #[arg(long)]
    every: Option<String>,
    /// Probe bytes a minute (e.g. 2mb); default: one estimate's cost, x2.
    #[arg(long)]
    budget: Option<String>,
    /// Event query: notify when the metric falls below this (e.g. 10mbit).
    #[arg(long)]
    below: Option<String>,
    /// Event query: notify when the metric exceeds this (e.g. 5ms for jitter).
    #[arg(long)]
    exceeds: Option<String>,
    /// A once query: wait (at most this long) for its result and print it.
    #[arg(long, value_name = "DURATION")]
    wait: Option<String>,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    agent: Agent,
}

#[derive(Args)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    agent: Agent,
}

#[derive(Args)]
pub struct IdArgs {
    id: String,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    agent: Agent,
}

fn line(q: &Value) -> String {
    let result = match q["result"]["value"].as_f64() {
        Some(v) => format!(
            "{v:.6e} ({})",
            q["result"]["method"].as_str().unwrap_or("?")
        ),
        None => "-".into(),
    };
    let err = q["last_error"]
        .as_str()
        .map(|e| format!("  error: {e}"))
        .unwrap_or_default();
    format!(
        "{:<18} {:<8} {:<22} {:<8} {:<10} {:<17} {result}{err}",
        q["id"].as_str().unwrap_or("?"),
        q["mode"].as_str().unwrap_or("?"),
        q["peer"].as_str().unwrap_or("?"),
        q["method"].as_str().unwrap_or("?"),
        q["metric"].as_str().unwrap_or("?"),
        q["status"].as_str().unwrap_or("?"),
    )
}

const HEADER: &str = "id                 mode     peer                   method   metric     status            result";

fn id_path(id: &str) -> Result<String> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        bail!("{id:?} is not a query id (see `mgrp query list`)");
    }
    Ok(format!("/v1/queries/{id}"))
}

pub fn run(c: QueryCmd) -> Result<()> {
    match c {
        QueryCmd::Create(a) => {
            let mut body = serde_json::json!({ "peer": a.peer, "mode": a.mode });
            for (k, v) in [
                ("method", &a.method),
                ("metric", &a.metric),
                ("every", &a.every),
                ("budget", &a.budget),
                ("below", &a.below),
                ("exceeds", &a.exceeds),
            ] {
                if let Some(v) = v {
                    body[k] = Value::String(v.clone());
                }
            }
            let mut v = call(&a.agent, "POST", "/v1/queries", Some(body))?;
            let id = v["id"].as_str().unwrap_or_default().to_string();
            if let Some(w) = &a.wait {
                let limit = mgrp_testbed::units::parse_duration(w)
                    .map_err(|e| anyhow::anyhow!("--wait: {e}"))?;
                let t0 = Instant::now();
                eprintln!("mgrp query: {id} created; waiting for its result (at most {w})");
                while !matches!(
                    v["status"].as_str(),
                    Some("done" | "failing" | "budget_exhausted")
                ) && t0.elapsed() < limit
                {
                    std::thread::sleep(Duration::from_millis(500));
                    v = call(&a.agent, "GET", &id_path(&id)?, None)?;
                }
            }
            if a.json {
                say!("{v}");
            } else {
                say!("created {id}");
                say!("{HEADER}");
                say!("{}", line(&v));
            }
        }
        QueryCmd::List(a) => {
            let v = call(&a.agent, "GET", "/v1/queries", None)?;
            if a.json {
                say!("{v}");
            } else {
                say!("{HEADER}");
                for q in v.as_array().into_iter().flatten() {
                    say!("{}", line(q));
                }
            }
        }
        QueryCmd::Show(a) => {
            let v = call(&a.agent, "GET", &id_path(&a.id)?, None)?;
            if a.json {
                say!("{v}");
            } else {
                say!("{HEADER}");
                say!("{}", line(&v));
                if let Some(e) = v["last_event"].as_object() {
                    say!(
                        "last event: {} {} (value {})",
                        e.get("condition").and_then(|c| c.as_str()).unwrap_or("?"),
                        e.get("threshold")
                            .map(|t| t.to_string())
                            .unwrap_or_default(),
                        e.get("value").map(|t| t.to_string()).unwrap_or_default()
                    );
                }
            }
        }
        QueryCmd::Delete(a) => {
            let v = call(&a.agent, "DELETE", &id_path(&a.id)?, None)?;
            if a.json {
                say!("{v}");
            } else {
                say!("deleted {}", a.id);
            }
        }
    }
    Ok(())
}
