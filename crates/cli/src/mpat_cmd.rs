//! `mgrp mpat create|weight|delete|status|run`: MPAT aggregates through the local agent's
//! `/v1/mpat` (the agent holds `mgrp_mpat` and its maps, so aggregates outlive this command;
//! a CLI that loaded them itself would unregister them as it exits). `run` puts a command's
//! TCP sockets on `mgrp_mpat` (the transfer modes' cgroup sockops program): those matching a
//! member rule join its aggregate. The work is in `mgrp_service::mpat`; this file parses, asks
//! and prints.

use crate::say;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Subcommand)]
pub enum MpatCmd {
    /// Create an aggregate: `mgrp mpat create video --member 198.18.3.2:5001=5 --member :22=1`.
    Create(CreateArgs),
    /// Change members' weights live: `mgrp mpat weight video --member 198.18.3.2:5001=2`.
    Weight(CreateArgs),
    /// Delete an aggregate (its open flows fall back to Reno).
    Delete(NameArgs),
    /// Aggregates, members, weights and rates, and shared-bottleneck warnings.
    Status(StatusArgs),
    /// Run a command with its TCP sockets on mgrp_mpat: those matching a member join.
    Run(RunArgs),
}

#[derive(Args)]
pub struct Agent {
    /// The agent's HTTP API (IP:PORT or URL).
    #[arg(long, default_value = "127.0.0.1:7241")]
    agent: String,
    /// File with the API token (agents off localhost).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct CreateArgs {
    name: String,
    /// DST:PORT=W, DST=W or :PORT=W (IPv6 as [ADDR]:PORT=W); repeatable.
    #[arg(long = "member", required = true, value_parser = member)]
    members: Vec<serde_json::Value>,
    #[command(flatten)]
    agent: Agent,
}

#[derive(Args)]
pub struct NameArgs {
    name: String,
    #[command(flatten)]
    agent: Agent,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    agent: Agent,
}

#[derive(Args)]
pub struct RunArgs {
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// `DST:PORT=W`, `DST=W`, `:PORT=W` → `{"dst", "port", "weight"}`. The weight is passed on as
/// a number so that the agent's own checks (whole, 1..=10^6) give the message.
pub fn member(s: &str) -> Result<serde_json::Value, String> {
    let (rule, w) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected DST:PORT=WEIGHT, DST=WEIGHT or :PORT=WEIGHT"))?;
    let weight: f64 = w
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: weight {w:?} is not a number"))?;
    let (dst, port): (Option<IpAddr>, Option<u16>) = if let Some(p) = rule.strip_prefix(':') {
        let port = p.parse().map_err(|_| format!("{s:?}: bad port {p:?}"))?;
        (None, Some(port))
    } else if let Ok(ip) = rule.trim_matches(['[', ']']).parse::<IpAddr>() {
        (Some(ip), None)
    } else {
        let sa: SocketAddr = rule
            .parse()
            .map_err(|_| format!("{s:?}: {rule:?} is not DST, DST:PORT or :PORT"))?;
        (Some(sa.ip()), Some(sa.port()))
    };
    Ok(serde_json::json!({ "dst": dst, "port": port, "weight": weight }))
}

/// One request to the agent; its JSON answer, or its `error` as ours.
pub(crate) fn call(
    a: &Agent,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value> {
    let base = if a.agent.starts_with("http://") || a.agent.starts_with("https://") {
        a.agent.trim_end_matches('/').to_string()
    } else {
        format!("http://{}", a.agent)
    };
    let url = format!("{base}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let token = match &a.token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("{}", f.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let auth = token.map(|t| format!("Bearer {t}"));
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let sent = match method {
        "GET" | "DELETE" => {
            let mut r = if method == "GET" {
                agent.get(&url)
            } else {
                agent.delete(&url)
            };
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            r.call()
        }
        _ => {
            let mut r = if method == "POST" {
                agent.post(&url)
            } else {
                agent.put(&url)
            };
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            r.content_type("application/json").send(&body)
        }
    };
    let mut resp = sent.with_context(|| format!("{method} {url} (is the agent running?)"))?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string()?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{method} {url}: not JSON"))?;
    if !(200..300).contains(&status) {
        bail!(
            "{method} {url}: {status} {}",
            v["error"].as_str().unwrap_or(&text)
        );
    }
    Ok(v)
}

pub fn mpat(c: MpatCmd) -> Result<ExitCode> {
    match c {
        MpatCmd::Create(a) => {
            let body = serde_json::json!({ "name": a.name, "members": a.members });
            let v = call(&a.agent, "POST", "/v1/mpat", Some(body))?;
            say!("created aggregate {}", a.name);
            for w in v["warnings"].as_array().into_iter().flatten() {
                eprintln!("warning: {}", w.as_str().unwrap_or_default());
            }
        }
        MpatCmd::Weight(a) => {
            let body = serde_json::json!({ "members": a.members });
            call(
                &a.agent,
                "PUT",
                &format!("/v1/mpat/{}", path_seg(&a.name)),
                Some(body),
            )?;
            say!("reweighted {}", a.name);
        }
        MpatCmd::Delete(a) => {
            call(
                &a.agent,
                "DELETE",
                &format!("/v1/mpat/{}", path_seg(&a.name)),
                None,
            )?;
            say!("deleted {}", a.name);
        }
        MpatCmd::Status(a) => {
            let v = call(&a.agent, "GET", "/v1/mpat", None)?;
            if a.json {
                say!("{v}");
            } else {
                print_status(&v);
            }
        }
        MpatCmd::Run(a) => return run(a),
    }
    Ok(ExitCode::SUCCESS)
}

/// Names are checked by the agent; keep anything else from changing the path.
fn path_seg(name: &str) -> String {
    percent_encode(name)
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn rate(v: &serde_json::Value) -> String {
    v.as_f64()
        .map_or("-".into(), |r| format!("{:.2} Mbit/s", r / 1e6))
}

fn print_status(v: &serde_json::Value) {
    if v["configured"] != true {
        say!("MPAT is not configured in this agent (add [mpat] to its configuration)");
        return;
    }
    if v["available"] != true {
        say!(
            "MPAT unavailable: {}",
            v["unavailable_reason"].as_str().unwrap_or("?")
        );
        return;
    }
    let aggs = v["aggregates"].as_array().cloned().unwrap_or_default();
    if aggs.is_empty() {
        say!("no aggregates");
    }
    for a in &aggs {
        let k = &a["kernel"];
        say!(
            "{} (id {}): {}, {} windows open, C = {:.1} packets, {} halvings, {} refused",
            a["name"].as_str().unwrap_or("?"),
            a["id"],
            rate(&a["rate_bps"]),
            k["windows"],
            k["cwnd_pkts"].as_f64().unwrap_or(0.0),
            k["halvings"],
            k["refused"]
        );
        for m in a["members"].as_array().into_iter().flatten() {
            let dst = m["dst"].as_str().unwrap_or("*");
            let port = m["port"].as_u64().map_or("*".into(), |p| p.to_string());
            say!(
                "  {dst}:{port}  weight {} ({:.1} %)  {}  flows {}",
                m["weight"],
                m["share"].as_f64().unwrap_or(0.0) * 100.0,
                rate(&m["rate_bps"]),
                m["flows"]
            );
        }
        for w in a["warnings"].as_array().into_iter().flatten() {
            say!("  warning: {}", w.as_str().unwrap_or_default());
        }
    }
}

/// As `mgrp run --mode M`, on `mgrp_mpat` (registered by the agent's `[mpat]`).
fn run(a: RunArgs) -> Result<ExitCode> {
    let cg = mgrp_control::CgroupRun::new(mgrp_control::mpat_kernel::MPAT_CC)
        .map_err(|e| anyhow!("{e} (is an agent with [mpat] running?)"))?;
    crate::control_cmd::run_in(&cg, &a.cmd)
}

#[cfg(test)]
mod tests {
    use super::member;

    #[test]
    fn member_forms_and_refusals() {
        let m = member("198.18.3.2:5001=5").unwrap();
        assert_eq!(
            (m["dst"].as_str(), m["port"].as_u64(), m["weight"].as_f64()),
            (Some("198.18.3.2"), Some(5001), Some(5.0))
        );
        let m = member("198.18.3.2=2").unwrap();
        assert!(m["port"].is_null());
        let m = member(":22=1").unwrap();
        assert!(m["dst"].is_null() && m["port"] == 22);
        let m = member("[fd00::2]:80=3").unwrap();
        assert_eq!(m["dst"], "fd00::2");
        assert_eq!(member("fd00::2=3").unwrap()["dst"], "fd00::2");
        // Zero and negatives are passed on: the agent refuses them with its message.
        assert_eq!(member(":1=0").unwrap()["weight"], 0.0);
        for bad in ["198.18.3.2:5001", ":x=1", "nowhere=1", ":1=heavy"] {
            assert!(member(bad).is_err(), "{bad}");
        }
    }
}
