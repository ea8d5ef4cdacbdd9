//! `mgrp bench loss`: badabing's loss episodes, through the Probe API as a third-party prober
//! runs it, against the episodes in the path's drop log ([`crate::loss_truth`]), with a plain
//! periodic ping of the same probe load as the baseline.
//!
//! Scenarios: `onoff` — on/off UDP cross traffic whose peaks overflow a small bottleneck
//! buffer; `bursty` — the testbed's Gilbert–Elliott loss line on the measured path, stepped by a
//! steady carrier flow snd → rcv so its bad states are stretches of time.

use crate::loss_truth::{self, DropEntry, TruthEpisodes};
use crate::rig;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::loss::{run_badabing, via_api};
use mgrp_estimate::badabing::{Badabing, BadabingParams, LossEpisodes};
use mgrp_estimate::{wire_bits, TrainSpec};
use mgrp_testbed::generator::{CrossTraffic, Endpoints, GenOptions};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::truth::CounterSet;
use mgrp_testbed::{Buffer, CrossPattern, DelayMode, LossModel, Role, Testbed, TestbedConfig};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The drop log keeps at most this many entries (over two hours of 1 ms reads with drops).
const MAX_LOG: usize = 8_000_000;
/// How often the drop counters are read.
const READ_EVERY: Duration = Duration::from_millis(1);
/// The carrier's port (below the generators' 5200).
const CARRIER_PORT: u16 = 5197;

#[derive(Debug, Clone)]
pub struct LossConfig {
    /// `onoff`, `bursty`.
    pub scenarios: Vec<String>,
    pub capacity_mbit: f64,
    /// Bottleneck buffer, packets.
    pub buffer_packets: u32,
    /// `onoff`'s cross traffic (a `--cross` pattern).
    pub onoff: String,
    /// `bursty`'s loss model (a `--loss` spec) and its carrier (a UDP pattern).
    pub ge: String,
    pub carrier: String,
    /// Seconds badabing runs per repetition (the ping baseline runs as long again).
    pub secs: f64,
    pub reps: u32,
    pub slot_ms: f64,
    pub p: f64,
}

impl LossConfig {
    pub fn new(quick: bool) -> LossConfig {
        LossConfig {
            scenarios: vec!["onoff".into(), "bursty".into()],
            capacity_mbit: 100.0,
            buffer_packets: 30,
            onoff: "onoff:30mbit,on=50ms,off=200ms,dist=exp,seed=3".into(),
            ge: "ge:p=0.5%,r=5%".into(),
            carrier: "cbr:10mbit".into(),
            secs: if quick { 20.0 } else { 60.0 },
            reps: if quick { 1 } else { 3 },
            slot_ms: 10.0,
            p: 0.3,
        }
    }

    pub fn check(&self) -> Result<()> {
        ensure(
            (10.0..=1000.0).contains(&self.capacity_mbit),
            "capacity must be 10..=1000 Mbit/s",
        )?;
        ensure(
            (2..=10_000).contains(&self.buffer_packets),
            "buffer must be 2..=10000 packets",
        )?;
        ensure(
            (2.0..=3600.0).contains(&self.secs) && (1..=100).contains(&self.reps),
            "--secs must be 2..=3600 and --reps 1..=100",
        )?;
        ensure(
            self.scenarios.iter().all(|s| s == "onoff" || s == "bursty"),
            "scenarios: onoff, bursty",
        )?;
        self.params(0)
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(())
    }

    fn params(&self, seed: u64) -> BadabingParams {
        let slot_ns = (self.slot_ms * 1e6) as u64;
        BadabingParams {
            slot_ns,
            p: self.p,
            // Batches of ~2 s: a report's round trip in between is little dead time.
            batch_slots: (2_000_000_000 / slot_ns.max(1)).clamp(2, 3000) as u32,
            slots: (self.secs * 1e9 / slot_ns.max(1) as f64) as u64,
            seed,
            ..BadabingParams::default()
        }
    }
}

/// The baseline: one probe every `period`, the same load as badabing.
#[derive(Debug, Clone, Serialize)]
pub struct Ping {
    pub period_ms: f64,
    pub sent: u64,
    pub lost: u64,
    pub loss_rate: f64,
    /// Runs of consecutive lost pings read as episodes: their mean length (s).
    pub run_mean_s: Option<f64>,
    pub load_bps: f64,
    pub truth: TruthEpisodes,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub rep: u32,
    pub capacity_bps: f64,
    pub badabing: LossEpisodes,
    pub load_bps: f64,
    pub load_share: f64,
    pub truth: TruthEpisodes,
    /// badabing / truth − 1.
    pub frequency_err: f64,
    pub duration_err: Option<f64>,
    pub ping: Ping,
}

/// Reads the drop counters every [`READ_EVERY`] until stopped; keeps the reads that saw drops.
fn drop_log(tb: &Testbed, stop: &AtomicBool) -> Result<Vec<DropEntry>> {
    let mut counters = CounterSet::open(tb)?;
    let read = |c: &mut CounterSet| -> Result<(u64, u64, u64)> {
        let lost = tb.loss_stats().map_or(0, |s| s.lost);
        let q = c.bottleneck()?.drops as u64;
        Ok((mgrp_testbed::clock::now_ns(), q, lost))
    };
    let (mut t_prev, mut q_prev, mut l_prev) = read(&mut counters)?;
    let mut log = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(READ_EVERY);
        let (t, q, l) = read(&mut counters)?;
        let (dq, dl) = (q.saturating_sub(q_prev), l.saturating_sub(l_prev));
        if dq + dl > 0 && log.len() < MAX_LOG {
            log.push(DropEntry {
                from_ns: t_prev,
                to_ns: t,
                drops: dq + dl,
                line: dl,
            });
        }
        (t_prev, q_prev, l_prev) = (t, q, l);
    }
    Ok(log)
}

/// An agent in snd serving the Probe API at `socket`.
fn agent_at_snd(tb: &Testbed, key: &Key, socket: PathBuf) -> Result<Agent> {
    let listen = SocketAddr::new(Role::Snd.addr().parse().expect("valid address"), rig::PORT);
    let k = key.clone();
    let agent = spawn_in(&tb.ns(Role::Snd), "api-agent", move || {
        let mut c = AgentConfig::new(listen, k);
        c.api_socket = Some(socket);
        Agent::start(c).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
    })?
    .join()
    .map_err(|_| Error::Worker("agent thread panicked".into()))??;
    Ok(agent)
}

/// Periodic pings through the API for `secs`, in trains of ~2 s.
fn ping(api: &Path, peer: &str, period_ns: u64, secs: f64) -> Result<(u64, u64, Vec<u64>)> {
    let mut send = via_api(api, peer);
    let per_train = (2_000_000_000 / period_ns).max(1) as usize;
    let mut left = (secs * 1e9 / period_ns as f64) as usize;
    let (mut sent, mut lost, mut runs, mut run) = (0u64, 0u64, Vec::new(), 0u64);
    while left > 0 {
        let n = left.min(per_train);
        left -= n;
        let r = send(&TrainSpec::uniform(n, 600, period_ns))?;
        if r.stats.report_missing {
            continue;
        }
        for p in r.probes.iter().filter(|p| p.sent_ns.is_some()) {
            sent += 1;
            if p.rx_ns.is_none() {
                lost += 1;
                run += 1;
            } else if run > 0 {
                runs.push(run);
                run = 0;
            }
        }
        // A run does not continue across the gap between trains.
        if run > 0 {
            runs.push(run);
            run = 0;
        }
    }
    Ok((sent, lost, runs))
}

fn scenario_testbed(cfg: &LossConfig, name: &str) -> Result<TestbedConfig> {
    let loss = match name {
        "bursty" => Some(LossModel::parse(&cfg.ge).map_err(|e| Error::Config(e.to_string()))?),
        _ => None,
    };
    Ok(TestbedConfig {
        capacity_bps: (cfg.capacity_mbit * 1e6) as u64,
        buffer: Buffer::Packets(cfg.buffer_packets),
        loss,
        ..Default::default()
    })
}

fn traffic(cfg: &LossConfig, tb: &Testbed, name: &str) -> Result<CrossTraffic> {
    let parse = |s: &str| CrossPattern::parse(s).map_err(|e| Error::Config(e.to_string()));
    let opts = GenOptions::default();
    Ok(match name {
        "onoff" => CrossTraffic::start(tb, &parse(&cfg.onoff)?, 5200, &opts)?,
        _ => {
            // The carrier crosses the loss line with the probes (snd → rcv).
            let ends = Endpoints {
                src_ns: tb.ns(Role::Snd),
                dst_ns: tb.ns(Role::Rcv),
                dst: format!("{}:{CARRIER_PORT}", Role::Rcv.addr())
                    .parse()
                    .expect("valid address"),
            };
            CrossTraffic::start_between(&ends, &parse(&cfg.carrier)?, &opts)?
        }
    })
}

fn rel_err(est: f64, truth: f64) -> f64 {
    est / truth - 1.0
}

pub fn run(cfg: &LossConfig, hooks: Hooks) -> Result<Vec<Row>> {
    cfg.check()?;
    let mut rows = Vec::new();
    let peer = rig::rcv_addr().to_string();
    for name in &cfg.scenarios {
        let tb = Testbed::up(scenario_testbed(cfg, name)?, DelayMode::Thread)?;
        let c = tb.capacity().bps();
        let key = Key::random();
        let (_rcv, _) = rig::agent_at_rcv(&tb, &key)?;
        let api = std::env::temp_dir().join(format!("mgrp-loss-{}.sock", std::process::id()));
        let _snd = agent_at_snd(&tb, &key, api.clone())?;
        let gen = traffic(cfg, &tb, name)?;
        // The traffic's own start behind us.
        std::thread::sleep(Duration::from_millis(500));
        for rep in 0..cfg.reps {
            if hooks.stopped() {
                return Err(Error::Interrupted);
            }
            hooks.say(&format!("\r{name} rep {}/{}      ", rep + 1, cfg.reps));
            let params = cfg.params(rep as u64 + 1);
            let slot_ns = params.slot_ns;
            let stop = AtomicBool::new(false);
            let (bada, pinged, log) = std::thread::scope(|s| {
                let logger = s.spawn(|| drop_log(&tb, &stop));
                let work = || -> Result<_> {
                    let mut b =
                        Badabing::new(params.clone()).map_err(|e| Error::Config(e.to_string()))?;
                    let t0 = mgrp_testbed::clock::now_ns();
                    let deadline = Instant::now() + Duration::from_secs_f64(cfg.secs * 2.0 + 30.0);
                    let report = run_badabing(
                        &mut b,
                        via_api(&api, &peer),
                        deadline,
                        || hooks.stopped(),
                        |_| {},
                    )?
                    .ok_or_else(|| Error::Worker("badabing read no experiment".into()))?;
                    let t1 = mgrp_testbed::clock::now_ns();
                    // The ping sends as many probe frames per second as badabing did.
                    let period = (1e9 / (params.load_bps() / wire_bits(600))) as u64;
                    let p = ping(&api, &peer, period, cfg.secs)?;
                    let t2 = mgrp_testbed::clock::now_ns();
                    Ok(((report, t0, t1), (p, period, t1, t2)))
                };
                let out = work();
                stop.store(true, Ordering::Relaxed);
                let log = logger
                    .join()
                    .map_err(|_| Error::Worker("drop logger panicked".into()))?;
                let (b, p) = out?;
                Ok::<_, Error>((b, p, log?))
            })?;
            let ((report, t0, t1), ((sent, lost, runs), period, p0, p1)) = (bada, pinged);
            let truth = loss_truth::episodes(&log, t0, t1, slot_ns);
            let window_s = (t1 - t0) as f64 / 1e9;
            let load_bps = report.probes_sent as f64 * wire_bits(600) / window_s;
            let ping_truth = loss_truth::episodes(&log, p0, p1, slot_ns);
            let period_s = period as f64 / 1e9;
            rows.push(Row {
                scenario: name.clone(),
                rep,
                capacity_bps: c,
                frequency_err: rel_err(report.frequency, truth.frequency),
                duration_err: report
                    .mean_duration_s
                    .zip(truth.mean_duration_s)
                    .map(|(e, t)| rel_err(e, t)),
                load_share: load_bps / c,
                load_bps,
                truth,
                badabing: report,
                ping: Ping {
                    period_ms: period_s * 1e3,
                    sent,
                    lost,
                    loss_rate: lost as f64 / sent.max(1) as f64,
                    run_mean_s: (!runs.is_empty())
                        .then(|| runs.iter().sum::<u64>() as f64 / runs.len() as f64 * period_s),
                    load_bps: sent as f64 * wire_bits(600) / ((p1 - p0) as f64 / 1e9),
                    truth: ping_truth,
                },
            });
        }
        gen.stop()?;
        let _ = std::fs::remove_file(&api);
    }
    hooks.say(&format!("\r{:40}\r", ""));
    Ok(rows)
}
