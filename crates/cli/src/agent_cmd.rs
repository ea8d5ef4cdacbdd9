//! `mgrp agent`: one per host.

use crate::say;
use anyhow::Result;
use clap::Args;
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct AgentArgs {
    /// Address for the UDP probe port and the TCP control port.
    #[arg(long, default_value = "0.0.0.0:7240")]
    listen: SocketAddr,
    /// File with the pre-shared key (hex); otherwise the MGRP_KEY environment variable.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Unix socket for the Probe API.
    #[arg(long, default_value = mgrp_engine::api::DEFAULT_SOCKET)]
    api: PathBuf,
    /// Do not serve the Probe API.
    #[arg(long)]
    no_api: bool,
    /// Most concurrent sessions.
    #[arg(long, default_value_t = 64)]
    max_sessions: usize,
    /// Print counters this often when they change (0 = only at exit).
    #[arg(long, default_value = "10s", value_parser = crate::testbed_cmd::duration)]
    stats_every: Duration,
    /// Counters as JSON lines.
    #[arg(long)]
    json: bool,
    /// Accept riders (the peer's packets in probe padding) and hand them to this host's kernel
    /// through a TUN device of this name.
    #[arg(long, num_args = 0..=1, default_missing_value = "mgrp1", value_name = "DEV")]
    accept_riders: Option<String>,
    /// Service configuration (TOML): the store, and paths to keep fresh on a schedule within a
    /// byte budget. Without it the agent answers probes and schedules nothing.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Move every movable interrupt off the pacer's CPU while the agent runs (root; each is put
    /// back at exit). Off by default: interrupt affinity is the whole host's.
    #[arg(long)]
    steer_irqs: bool,
}

pub fn run(a: AgentArgs) -> Result<()> {
    let key = Key::load(a.key_file.as_deref())?;
    let key_for_service = key.clone();
    crate::signals::catch_signals();
    let cfg = AgentConfig {
        listen: a.listen,
        key,
        api_socket: (!a.no_api).then(|| a.api.clone()),
        max_sessions: a.max_sessions,
        riders_dev: a.accept_riders.clone(),
    };
    let service_cfg = match &a.config {
        Some(p) => mgrp_service::config::ServiceConfig::load(p)?,
        None => mgrp_service::config::ServiceConfig::default(),
    };
    crate::signals::catch_hangup();
    let _irqs = pacer_interrupts(a.steer_irqs, a.json);
    let agent = Agent::start(cfg)?;
    let mut service = mgrp_service::Service::start(&service_cfg, key_for_service)?;
    let read = agent.counter_reader();
    service.hub().add_counters(
        "agent",
        Box::new(move || mgrp_service::counter_pairs(&read())),
    );
    if a.accept_riders.is_some() {
        let rx = agent.rider_reader();
        service.hub().add_counters(
            "riders_received",
            Box::new(move || match rx() {
                Some((c, re)) => {
                    let mut v = mgrp_service::counter_pairs(&c);
                    if let Some(re) = re {
                        v.extend(
                            mgrp_service::counter_pairs(&re)
                                .into_iter()
                                .map(|(k, x)| (format!("reassembly_{k}"), x)),
                        );
                    }
                    v
                }
                None => Vec::new(),
            }),
        );
    }
    let http = match service_cfg.http {
        Some(addr) => {
            Some(mgrp_service::http::Http::start(addr, service.hub()).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    if !a.json {
        say!(
            "mgrp agent on {} (UDP probes, TCP control){}; Ctrl-C to stop",
            agent.local_addr(),
            if a.no_api {
                String::new()
            } else {
                format!(", Probe API at {}", a.api.display())
            }
        );
        if let Some(h) = &http {
            say!(
                "HTTP API on http://{0}/v1/paths, dashboard http://{0}/, metrics http://{0}/metrics",
                h.local_addr()
            );
        }
    }
    let mut last = agent.counters();
    let mut next = Instant::now() + a.stats_every;
    while !crate::signals::interrupted() {
        std::thread::sleep(Duration::from_millis(100));
        if crate::signals::take_hangup() {
            reload(&mut service, a.config.as_deref(), a.json);
        }
        if !a.stats_every.is_zero() && Instant::now() >= next {
            next += a.stats_every;
            let c = agent.counters();
            if c != last {
                print_counters(&c, a.json);
                last = c;
            }
        }
    }
    drop(http);
    let has_paths = !service.config().paths.is_empty();
    let s = service.stop();
    let c = agent.stop();
    print_counters(&c, a.json);
    if has_paths {
        if a.json {
            say!("{}", serde_json::to_string(&s).unwrap_or_default());
        } else {
            say!(
                "schedules: {} measurements, {} estimates stored, {} kB of probes, {} skipped and {} cut for budget, {} timed out, {} errors",
                s.measurements,
                s.estimates_stored,
                s.probe_bytes / 1000,
                s.skipped_for_budget,
                s.cut_by_budget,
                s.timed_out,
                s.errors
            );
        }
    }
    Ok(())
}

/// SIGHUP: read the configuration again and apply what can change without a restart. A file
/// that does not parse leaves everything as it runs.
fn reload(service: &mut mgrp_service::Service, path: Option<&std::path::Path>, json: bool) {
    let Some(path) = path else {
        say!("SIGHUP: no --config to reload");
        return;
    };
    let result = mgrp_service::config::ServiceConfig::load(path)
        .map_err(anyhow::Error::from)
        .and_then(|c| service.reload(&c).map_err(anyhow::Error::from));
    match result {
        Ok(r) if json => say!("{}", serde_json::json!({ "reload": r }).to_string()),
        Ok(r) => say!(
            "reloaded {}: {} schedules started, {} stopped, {} kept{}{}{}",
            path.display(),
            r.started.len(),
            r.stopped.len(),
            r.kept,
            if r.token_changed {
                ", token changed"
            } else {
                ""
            },
            r.transfer
                .map(|t| format!(", transfer modes {t}"))
                .unwrap_or_default(),
            if r.need_restart.is_empty() {
                String::new()
            } else {
                format!("; changes to {} need a restart", r.need_restart.join(", "))
            }
        ),
        Err(e) => say!(
            "reload of {} failed, nothing changed: {e:#}",
            path.display()
        ),
    }
}

fn print_counters(c: &mgrp_engine::daemon::CounterSnapshot, json: bool) {
    if json {
        say!("{}", serde_json::to_string(c).unwrap_or_default());
    } else {
        say!(
            "probes ok {} | malformed {} unknown-session {} wrong-source {} duplicate {} stale {} | sessions {} | auth failures {} replays {} | reports {} ({} cut to budget) | api {} ({} failed)",
            c.probes_ok,
            c.probes_malformed,
            c.probes_unknown_session,
            c.probes_wrong_source,
            c.probes_duplicate,
            c.probes_stale,
            c.sessions_opened,
            c.auth_failures,
            c.auth_replays,
            c.reports_sent,
            c.reports_truncated,
            c.api_requests,
            c.api_errors
        );
    }
}

/// Say at start what may interrupt the pacer, and with `--steer-irqs` move it off (the guard
/// puts it back when dropped).
fn pacer_interrupts(steer: bool, json: bool) -> Option<mgrp_clock::irq::IrqSteering> {
    use mgrp_clock::irq;
    let cpu = mgrp_clock::cpu::pacer_cpu()?;
    let root = std::path::Path::new(irq::PROC_IRQ);
    let steering = steer.then(|| irq::steer_off(root, cpu));
    let line = match &steering {
        Some(s) if s.moved().is_empty() && !s.refused.is_empty() => format!(
            "pacer on CPU {cpu}: could not move its {} interrupts (not root?): {:?}",
            s.refused.len(),
            s.refused
        ),
        Some(s) => format!(
            "pacer on CPU {cpu}: moved {} interrupts off it until exit{}",
            s.moved().len(),
            if s.refused.is_empty() {
                String::new()
            } else {
                format!(", {} refused by the kernel: {:?}", s.refused.len(), s.refused)
            }
        ),
        None => match irq::movable_onto(root, cpu) {
            v if v.is_empty() => format!("pacer on CPU {cpu}: no movable interrupt lands there"),
            v => format!(
                "pacer on CPU {cpu}: {} movable interrupts may land there (--steer-irqs moves them while the agent runs)",
                v.len()
            ),
        },
    };
    if json {
        let moved = steering.as_ref().map(|s| s.moved());
        say!(
            "{}",
            serde_json::json!({ "pacer_cpu": cpu, "irqs_moved": moved, "note": line })
        );
    } else {
        say!("{line}");
    }
    steering
}
