//! `mgrp run --mode M -- CMD` (a command's TCP sockets on a transfer mode) and `mgrp control
//! status|load`. The work is in `mgrp_control` (cgroup, sockops, loading) and the agent's
//! `/v1/transfer`; this file parses, asks and prints.

use crate::say;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use mgrp_control::{CgroupRun, Controls, Mode};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus};
use std::time::Duration;

fn mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).map_err(|e| e.to_string())
}

#[derive(Args)]
pub struct RunArgs {
    /// background (mgrp_bg), full-speed (mgrp_fs) or ledbat (mgrp_ledbat).
    #[arg(long, value_parser = mode)]
    mode: Mode,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// Why a command cannot be put on a mode, with what to do about it.
fn explain(e: mgrp_control::Error) -> anyhow::Error {
    let hint = match &e {
        mgrp_control::Error::Unsupported(why) if why.contains("cgroup v2") => {
            "\n(`ip netns exec` remounts /sys without the cgroup hierarchy: run `mgrp run` outside it and put `ip netns exec NS` in the command, or enter the namespace with `nsenter --net=/run/netns/NS`)"
        }
        _ => "",
    };
    anyhow!("{e}{hint}")
}

/// The exit code a shell would give for `status`.
fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

/// Run CMD with its TCP sockets on the mode; CMD's exit status is ours.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    let cg = CgroupRun::new(a.mode.cc_name()).map_err(explain)?;
    run_in(&cg, &a.cmd)
}

/// Run `argv` in the cgroup `cg` (its TCP sockets on the cgroup's congestion control); its exit
/// status is ours. Also `mgrp mpat run`.
pub(crate) fn run_in(cg: &CgroupRun, argv: &[OsString]) -> Result<ExitCode> {
    let cc = cg.congestion_control().to_string();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cg.prepare(&mut cmd).map_err(explain)?;
    // Ctrl-C reaches the command through the terminal; SIGTERM to us is passed on. Either
    // way we wait for it, so the cgroup is removed after it.
    crate::signals::catch_signals();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?}", argv[0]))?;
    let mut passed_on = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if crate::signals::interrupted() && !passed_on {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            passed_on = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (moved, failed) = cg.counts().map_err(explain)?;
    eprintln!(
        "mgrp run: {moved} socket{} put on {cc}{}",
        if moved == 1 { "" } else { "s" },
        if failed > 0 {
            format!(", {failed} refused it")
        } else {
            String::new()
        }
    );
    Ok(ExitCode::from(code_of(status)))
}

#[derive(Subcommand)]
pub enum ControlCmd {
    /// Which transfer modes the kernel has registered, and what the agent feeds them.
    Status(StatusArgs),
    /// Register the transfer modes without an agent (no estimates: they run as Reno) until
    /// Ctrl-C; then move their sockets to the default and unregister them.
    Load(LoadArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    /// The agent's HTTP API (IP:PORT or URL), to show its /v1/transfer.
    #[arg(long)]
    agent: Option<String>,
    /// File with the API token (agents off localhost).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct LoadArgs {
    /// Modes to register (repeatable; default all).
    #[arg(long = "mode", value_parser = mode)]
    modes: Vec<Mode>,
}

pub fn control(c: ControlCmd) -> Result<()> {
    match c {
        ControlCmd::Status(a) => status(a),
        ControlCmd::Load(a) => load(a),
    }
}

fn kernel_json() -> Result<serde_json::Value> {
    let registered = mgrp_control::registered_modes()?;
    let modes: Vec<serde_json::Value> = Mode::ALL
        .iter()
        .map(|m| {
            serde_json::json!({
                "mode": m,
                "congestion_control": m.cc_name(),
                "registered": registered.contains(m),
            })
        })
        .collect();
    Ok(serde_json::json!({
        "modes": modes,
        "available": mgrp_control::available_congestion_controls()?,
        "default": mgrp_control::default_congestion_control()?,
        "unsupported": mgrp_control::unsupported_reason(),
    }))
}

/// GET the agent's /v1/transfer.
fn agent_transfer(addr: &str, token_file: Option<&PathBuf>) -> Result<serde_json::Value> {
    let base = if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.trim_end_matches('/').to_string()
    } else {
        format!("http://{addr}")
    };
    let url = format!("{base}/v1/transfer");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut req = agent.get(&url);
    if let Some(f) = token_file {
        let t = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
        req = req.header("Authorization", &format!("Bearer {}", t.trim()));
    }
    let mut resp = req.call().with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string()?;
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("GET {url}: not JSON"))?;
    if status != 200 {
        bail!(
            "GET {url}: {status} {}",
            v["error"].as_str().unwrap_or(&body)
        );
    }
    Ok(v)
}

fn status(a: StatusArgs) -> Result<()> {
    let kernel = kernel_json()?;
    let agent = match &a.agent {
        Some(addr) => Some(agent_transfer(addr, a.token_file.as_ref())?),
        None => None,
    };
    if a.json {
        say!(
            "{}",
            serde_json::json!({ "kernel": kernel, "agent": agent })
        );
        return Ok(());
    }
    print_kernel(&kernel);
    if let Some(v) = &agent {
        print_agent(a.agent.as_deref().unwrap_or(""), v);
    }
    Ok(())
}

fn print_kernel(k: &serde_json::Value) {
    say!(
        "kernel: default congestion control {}",
        k["default"].as_str().unwrap_or("?")
    );
    for m in k["modes"].as_array().into_iter().flatten() {
        say!(
            "  {:<11} {:<12} {}",
            mode_name(&m["mode"]),
            m["congestion_control"].as_str().unwrap_or("?"),
            if m["registered"] == true {
                "registered"
            } else {
                "not registered"
            }
        );
    }
    if let Some(why) = k["unsupported"].as_str() {
        say!("  this process cannot load them: {why}");
    }
}

/// A mode as the API spells it (`full_speed`), as people do (`full-speed`).
fn mode_name(v: &serde_json::Value) -> String {
    v.as_str()
        .and_then(|s| Mode::parse(s).ok())
        .map_or_else(|| "?".into(), |m| m.to_string())
}

fn mbit(v: &serde_json::Value) -> String {
    v.as_f64()
        .map_or("—".into(), |x| format!("{:.2} Mbit/s", x / 1e6))
}

fn print_agent(addr: &str, v: &serde_json::Value) {
    if v["available"] != true {
        say!(
            "agent {addr}: transfer modes unavailable: {}",
            v["reason"].as_str().unwrap_or("?")
        );
        return;
    }
    let modes: Vec<String> = v["modes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(mode_name)
        .collect();
    say!("agent {addr}: transfer modes {}", modes.join(", "));
    say!(
        "  {:<11} {:>6} {:>7} {:>12} {:>9} {:>11} {:>7}",
        "mode",
        "active",
        "opened",
        "acked bytes",
        "limited",
        "no-estimate",
        "losses"
    );
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    for s in v["stats"].as_array().into_iter().flatten() {
        say!(
            "  {:<11} {:>6} {:>7} {:>12} {:>8.1}s {:>11} {:>7}",
            mode_name(&s["mode"]),
            n(&s["flows_active"]),
            n(&s["flows_opened"]),
            n(&s["acked_bytes"]),
            s["limited_s"].as_f64().unwrap_or(0.0),
            n(&s["acks_no_estimate"]),
            n(&s["losses"])
        );
    }
    for d in v["destinations"].as_array().into_iter().flatten() {
        say!(
            "  {} ({}): A measured {}, own rate {}, written {}, {}",
            d["destination"].as_str().unwrap_or("?"),
            d["origin"].as_str().unwrap_or("?"),
            mbit(&d["a_measured_bps"]),
            mbit(&d["own_rate_bps"]),
            mbit(&d["a_written_bps"]),
            match (d["age_s"].as_f64(), d["stale"] == true) {
                (None, _) => "no estimate yet (Reno)".to_string(),
                (Some(a), true) => format!("{a:.1} s old: stale (Reno)"),
                (Some(a), false) => format!("{a:.1} s old"),
            }
        );
    }
}

fn load(a: LoadArgs) -> Result<()> {
    crate::signals::catch_signals();
    let c = Controls::load(&a.modes)?;
    let names: Vec<&str> = c.modes().iter().map(|m| m.cc_name()).collect();
    say!(
        "registered {} (no agent: no estimates, they run as Reno); Ctrl-C to unload",
        names.join(", ")
    );
    while !crate::signals::interrupted() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let moved = c.reset_sockets().unwrap_or(0);
    drop(c);
    say!("unregistered; {moved} sockets moved to the default congestion control");
    Ok(())
}
