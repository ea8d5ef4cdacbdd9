//! Setup hooks that make mgrp's eBPF congestion controls available to the modes bench, the way
//! a user gets them: `mgrp_bg` and `mgrp_fs` through an agent (the service with a schedule to
//! the receiver's agent and a `[transfer]` section, which loads the programs and feeds the map
//! from its own estimates); `mgrp_ledbat` (needs no estimate) loaded alone.

use super::{Guard, Scenario, Setup, SetupCtx, Setups};
use mgrp_control::{Controls, Mode};
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_service::config::ServiceConfig;
use mgrp_service::Service;
use mgrp_testbed::netns::spawn_in;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The receiver's agent port in the bench's topologies.
const AGENT_PORT: u16 = 7240;
/// How long a setup waits for the service's first estimate to reach the map (`auto` on a
/// 2 Mbit/s path with 100 ms RTT needs more than 30 s).
const FIRST_ESTIMATE: Duration = Duration::from_secs(120);

/// How the agent keeps the path's estimate fresh for the bench.
#[derive(Debug, Clone)]
pub struct FeedSchedule {
    /// Estimation method and period (`[[path]]` `method`, `every`).
    pub method: String,
    pub every: Duration,
    /// `[transfer]` `max_age`: entries older than this are not acted on.
    pub max_age: Duration,
    /// `max_age` for full-speed flows: longer than the 20–30 s between the estimates `auto`
    /// finishes on the 100 Mbit/s, 200 ms path (each needs several 200 ms rounds), so that a
    /// flow never starts on a stale entry and slow-starts as Reno into a loss of a window.
    pub full_speed_max_age: Duration,
    /// `[[path]]` `budget`: probe bytes per minute.
    pub budget: &'static str,
}

impl Default for FeedSchedule {
    /// `auto` every 2 s, so that a background flow sees the foreground leave within a few
    /// seconds (its probes cost 0.5–1.3 MB an estimate: about 2–5 Mbit/s on average, which the
    /// foreground pays; the seed's inline measurement cost nothing), acted on for 10 s, within
    /// 40 MB a minute (the default budget, 2 MB, cuts them).
    fn default() -> Self {
        FeedSchedule {
            method: "auto".into(),
            every: Duration::from_secs(2),
            max_age: Duration::from_secs(10),
            full_speed_max_age: Duration::from_secs(60),
            budget: "40mb",
        }
    }
}

/// Hooks for `mgrp_bg`, `mgrp_fs` and `mgrp_ledbat`.
pub fn transfer_setups(schedule: FeedSchedule) -> Setups {
    let mut s = Setups::new();
    for mode in [Mode::Background, Mode::FullSpeed] {
        let sch = schedule.clone();
        let hook: Setup = Box::new(move |ctx: &SetupCtx| {
            if mode == Mode::FullSpeed && ctx.scenario == Scenario::Lossy {
                return load_alone(mode);
            }
            AgentFeed::start(ctx, mode, &sch).map(|g| Box::new(g) as Guard)
        });
        s.insert(mode.cc_name().to_string(), hook);
    }
    let ledbat: Setup = Box::new(|_ctx: &SetupCtx| load_alone(Mode::Ledbat));
    s.insert(Mode::Ledbat.cc_name().to_string(), ledbat);
    s
}

/// The congestion control registered without an agent: LEDBAT needs no estimate, and on the
/// lossy path full-speed runs on its own delivery rate (the agent's `auto` cannot finish under
/// 5% random loss, and its probes would take 25–65% of a 2 Mbit/s link from the flow).
fn load_alone(mode: Mode) -> Result<Guard, String> {
    Controls::load(&[mode])
        .map(|c| Box::new(c) as Guard)
        .map_err(|e| e.to_string())
}

/// An agent at the receiver and the service at the sender feeding `mode`'s map; dropping it
/// stops the service (which unregisters the congestion control) and then the agent.
struct AgentFeed {
    stop: Option<mpsc::Sender<()>>,
    service: Option<JoinHandle<Result<(), mgrp_testbed::Error>>>,
    _agent: Agent,
}

impl AgentFeed {
    fn start(ctx: &SetupCtx, mode: Mode, sch: &FeedSchedule) -> Result<AgentFeed, String> {
        let key = Key::random();
        let listen = SocketAddr::new(ctx.receiver_addr.into(), AGENT_PORT);
        let k = key.clone();
        let agent = spawn_in(&ctx.receiver_ns, "modes-agent", move || {
            Agent::start(AgentConfig::new(listen, k))
                .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "agent thread panicked".to_string())?
        .map_err(|e| format!("agent at the receiver: {e}"))?;
        let cfg = ServiceConfig::parse(&service_config(listen, mode, sch))
            .map_err(|e| format!("bench's agent configuration: {e}"))?;
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let service = spawn_in(&ctx.sender_ns, "modes-service", move || {
            let svc = match Service::start(&cfg, key) {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("agent at the sender: {e}")));
                    return Ok(());
                }
            };
            let _ = ready_tx.send(wait_first_entry(&svc));
            // Hold the service until the bench is done with this congestion control.
            let _ = stop_rx.recv();
            report(&svc.hub().transfer());
            svc.stop();
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let mut feed = AgentFeed {
            stop: Some(stop_tx),
            service: Some(service),
            _agent: agent,
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(feed),
            Ok(Err(e)) => {
                feed.halt();
                Err(e)
            }
            Err(_) => {
                feed.halt();
                Err("the sender's agent ended before it was ready".into())
            }
        }
    }

    fn halt(&mut self) {
        self.stop.take();
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AgentFeed {
    fn drop(&mut self) {
        self.halt();
    }
}

fn service_config(peer: SocketAddr, mode: Mode, sch: &FeedSchedule) -> String {
    let max_age = if mode == Mode::FullSpeed {
        sch.full_speed_max_age
    } else {
        sch.max_age
    };
    format!(
        "[[path]]\npeer = \"{peer}\"\nmethod = \"{}\"\nevery = \"{}ms\"\nbudget = \"{}\"\n\n[transfer]\nmodes = [\"{mode}\"]\nmax_age = \"{}ms\"\n",
        sch.method,
        sch.every.as_millis(),
        sch.budget,
        max_age.as_millis(),
    )
}

/// What the feed did, on stderr with the bench's progress: how many estimates reached the map,
/// the last one, and how often the program acted on it.
fn report(v: &mgrp_service::transfer::TransferView) {
    for d in &v.destinations {
        let mbit = |x: Option<f64>| x.map_or("-".to_string(), |b| format!("{:.1}", b / 1e6));
        eprintln!(
            "  feed {}: {} estimates; last A measured {} + own rate {} = written {} Mbit/s",
            d.destination,
            d.estimates,
            mbit(d.a_measured_bps),
            mbit(d.own_rate_bps),
            mbit(d.a_written_bps.map(|b| b as f64)),
        );
    }
    for s in v.stats.iter().filter(|s| s.acks > 0) {
        eprintln!(
            "  {}: {} acks, {} held at the cap ({:.1} s), {} without a fresh estimate, {} losses",
            s.congestion_control, s.acks, s.acks_limited, s.limited_s, s.acks_no_estimate, s.losses
        );
    }
}

/// Wait until the transfer modes are loaded and the first estimate is in the map, so that the
/// flow under test starts with an entry (else it would run plain Reno until the first one).
fn wait_first_entry(svc: &Service) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let v = svc.hub().transfer();
        if v.configured && !v.available && t0.elapsed() > Duration::from_secs(2) {
            return Err(v
                .reason
                .unwrap_or_else(|| "transfer modes unavailable".into()));
        }
        if v.destinations.iter().any(|d| d.a_written_bps.is_some()) {
            eprintln!(
                "  first estimate in the map after {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if t0.elapsed() > FIRST_ESTIMATE {
            return Err(format!(
                "no estimate reached the map within {FIRST_ESTIMATE:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_configuration_parses() {
        let peer: SocketAddr = "198.18.9.2:7240".parse().unwrap();
        for mode in [Mode::Background, Mode::FullSpeed] {
            let text = service_config(peer, mode, &FeedSchedule::default());
            ServiceConfig::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
        let s = transfer_setups(FeedSchedule::default());
        assert_eq!(
            s.keys().cloned().collect::<Vec<_>>(),
            ["mgrp_bg", "mgrp_fs", "mgrp_ledbat"]
        );
    }
}
