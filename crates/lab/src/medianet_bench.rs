//! `mgrp bench medianet`: the seed's MediaNet experiment (seed 002 §5, seed 000 ch. 6) on the
//! default testbed. snd streams three MPEG-like streams (`examples/medianet`) over one TCP
//! connection each to rcv across a 10 Mbit/s bottleneck (RTT 40 ms) that carries PEAKS UDP
//! cross traffic (4, 8, 4, 7, 4, 8, 4 Mbit/s). The streams' global scheduler gets its ceiling
//! from: nothing (passive, the original MediaNet: its own reports and a creeping ceiling), the
//! local agent's estimates over its HTTP API (pSLOW, pFAST, riders or not, `auto`, Wren on the
//! streams' own traffic), or the testbed's measured truth (the oracle).
//!
//! Figures per configuration: decoded Mbit/s and fps summed over the streams, the bad-frame
//! ratio (frames the levels called for that did not decode), level switches, probe bytes, and
//! the time from A rising above 3.48 Mbit/s to all streams at full; means with 95% CIs over runs.

use crate::rig::agent_at_rcv_with;
use crate::rig::setup;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_medianet::agent::{follow, keep_measuring, AgentCounts, AgentSource};
use mgrp_medianet::global::{GlobalConfig, Mode};
use mgrp_medianet::receiver::Receiver;
use mgrp_medianet::sender::{Estimate, Point, Sender, SenderConfig};
use mgrp_medianet::workload::Level;
use mgrp_medianet::Stop;
use mgrp_service::config::{PassiveSource, PathSchedule, RidersConfig, ServiceConfig};
use mgrp_service::http::Http;
use mgrp_service::Service;
use mgrp_testbed::generator::{CrossTraffic, GenOptions};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::truth::{Truth, TruthSampler};
use mgrp_testbed::CrossPattern;
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Stream i goes to rcv's port `STREAM_PORT + i`.
pub const STREAM_PORT: u16 = 5004;
const API: &str = "127.0.0.1:7241";
/// Cross traffic's port (apart from the streams').
const CROSS_PORT: u16 = 5200;
/// All three streams at full, bit/s.
pub const FULL_BPS: f64 = 3_480_000.0;

/// The configurations, in the order the table prints them.
pub const CONFIGS: [&str; 8] = [
    "passive",
    "pslow",
    "pslow-riders",
    "pfast",
    "pfast-riders",
    "auto",
    "wren",
    "oracle",
];

/// The PEAKS schedule (Mbit/s, seconds): the seed gives rates, not durations; these are chosen
/// and kept fixed. 240 s: 4 Mbit/s for 40 s at the start and the end, 30 s between the peaks,
/// peaks of 30 s.
pub const PEAKS: [(f64, f64); 7] = [
    (4.0, 40.0),
    (8.0, 30.0),
    (4.0, 30.0),
    (7.0, 30.0),
    (4.0, 30.0),
    (8.0, 30.0),
    (4.0, 50.0),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MedianetConfig {
    pub configs: Vec<String>,
    pub runs: usize,
    /// Seconds of a run; the PEAKS schedule is scaled to it (240: as written).
    pub duration_s: f64,
    pub capacity_mbit: f64,
    /// One-way delay added on the reverse path (the testbed's delay line): the RTT.
    pub delay_ms: u64,
    /// Riders' T (the seed's mgrp10).
    pub hold_ms: u64,
    /// Share of each train, from its start, that may carry riders (the seed's regulator: 50%).
    pub rider_ratio: f64,
    /// Receiver's playout delay: frames later than this after generation do not count.
    pub playout_ms: u64,
    /// Period of the agent's schedule for the active configurations; also the longest a
    /// measurement may take (the seed's pathload timed out at 60 s). The application asks for
    /// the next measurement as soon as one ends (`keep_measuring`), so they run back to back.
    pub every_s: f64,
}

impl Default for MedianetConfig {
    fn default() -> Self {
        MedianetConfig {
            configs: CONFIGS.iter().map(|s| s.to_string()).collect(),
            runs: 1,
            duration_s: 240.0,
            capacity_mbit: 10.0,
            delay_ms: 40,
            hold_ms: 10,
            rider_ratio: 0.5,
            playout_ms: 1000,
            every_s: 60.0,
        }
    }
}

impl MedianetConfig {
    pub fn check(&self) -> Result<()> {
        for c in &self.configs {
            ensure(
                CONFIGS.contains(&c.as_str()),
                &format!("unknown configuration {c:?}: {}", CONFIGS.join(", ")),
            )?;
        }
        ensure(!self.configs.is_empty(), "no configuration")?;
        ensure(self.runs >= 1 && self.runs <= 100, "runs: 1..=100")?;
        ensure(
            self.duration_s >= 20.0 && self.duration_s <= 3600.0,
            "duration: 20..=3600 s",
        )?;
        ensure(
            self.capacity_mbit > 0.0 && self.capacity_mbit <= 1000.0,
            "capacity: 0 < C ≤ 1000 Mbit/s",
        )?;
        ensure(
            self.rider_ratio > 0.0 && self.rider_ratio <= 1.0,
            "rider ratio: 0 < r ≤ 1",
        )?;
        ensure(self.every_s >= 0.1, "every: at least 0.1 s")
    }

    /// The PEAKS pattern scaled to the run.
    pub fn peaks_pattern(&self) -> String {
        let total: f64 = PEAKS.iter().map(|p| p.1).sum();
        let k = self.duration_s / total;
        let mut levels: Vec<String> = PEAKS
            .iter()
            .map(|(r, s)| format!("{r}mbit@{}ms", (s * k * 1000.0).round() as u64))
            .collect();
        // The tail outlasts the run (the generator stops at its bound).
        levels.push("4mbit@30s".into());
        format!("peaks:{}", levels.join(","))
    }
}

/// One run of one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRow {
    pub config: String,
    pub run: usize,
    pub seconds: f64,
    pub capacity_measured_mbit: f64,
    pub decoded_mbit: f64,
    pub fps: f64,
    pub intended_frames: u64,
    pub decoded_frames: u64,
    pub bad_frame_ratio: f64,
    pub level_switches: u64,
    pub probe_bytes: u64,
    pub measurements: u64,
    pub estimates: u64,
    /// Each time A rose above 3.48 Mbit/s (for ≥ 3 s): seconds until all streams were at full,
    /// `None` when they were not before A fell again.
    pub time_to_full_s: Vec<Option<f64>>,
    pub sender_error: Option<String>,
    /// The API client's counters: connects, events, estimates, skipped, errors, on-demand
    /// requests.
    pub agent_client: [u64; 6],
    /// Receiver: frames late, broken (dependency not decoded).
    pub late_frames: u64,
    pub broken_frames: u64,
    /// Sender: frames dropped behind, and past their deadline.
    pub dropped_behind: u64,
    pub dropped_late: u64,
    /// Per second: truth A (Mbit/s, C − cross), the scheduler's ceiling and levels.
    pub timeline: Vec<Second>,
    /// Wren's trains on the streams (the `wren` configuration): judged, rising (upper bounds
    /// only), lower bounds, runs too short; why it gave estimates or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wren_trains: Option<[u64; 4]>,
    /// Per stream at the end: segments its kernel TCP retransmitted and its smoothed RTT (µs).
    #[serde(default)]
    pub tcp_retrans: Vec<u32>,
    #[serde(default)]
    pub tcp_srtt_us: Vec<u32>,
    /// The riders configurations: the sending agent's rider counters (`riders_sent`, as at
    /// `/metrics`) and the receiving agent's (riders, injected, reassembly timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riders: Option<RidersSeen>,
    /// The host's 1-minute load average when the run ended (other work on a shared machine).
    #[serde(default)]
    pub load_avg: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RidersSeen {
    pub sent: std::collections::BTreeMap<String, u64>,
    pub received: std::collections::BTreeMap<String, u64>,
}

impl RidersSeen {
    pub fn sent(&self, k: &str) -> u64 {
        self.sent.get(k).copied().unwrap_or(0)
    }
}

impl RunRow {
    /// Medians over the run's seconds of the scheduler's ceiling and of the truth's A, Mbit/s:
    /// whether the estimates the streams acted on were low or high.
    pub fn ceiling_and_truth_medians(&self) -> (Option<f64>, Option<f64>) {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| v[v.len() / 2])
        };
        (
            median(self.timeline.iter().map(|s| s.ceiling_mbit).collect()),
            median(self.timeline.iter().filter_map(|s| s.truth_mbit).collect()),
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Second {
    pub t_s: f64,
    pub truth_mbit: Option<f64>,
    pub ceiling_mbit: f64,
    pub levels: Vec<Level>,
}

/// Mean with a 95% confidence interval (Student's t) over runs.
#[derive(Debug, Clone, Serialize)]
pub struct Ci {
    pub n: usize,
    pub mean: f64,
    /// Half-width; `None` with one run.
    pub half: Option<f64>,
}

/// t(0.975, n − 1) for n = 2..=30; 1.96 beyond.
fn t975(n: usize) -> f64 {
    const T: [f64; 29] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045,
    ];
    T.get(n.saturating_sub(2)).copied().unwrap_or(1.96)
}

pub fn ci(v: &[f64]) -> Option<Ci> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let half = (n > 1).then(|| {
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        t975(n) * (var / n as f64).sqrt()
    });
    Some(Ci { n, mean, half })
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub config: String,
    pub runs: usize,
    pub seconds: f64,
    pub decoded_mbit: Option<Ci>,
    pub fps: Option<Ci>,
    pub bad_frame_ratio: Option<Ci>,
    pub level_switches: Option<Ci>,
    pub probe_mbyte: Option<Ci>,
    /// Mean over the rises that reached full, and how many did not.
    pub time_to_full_s: Option<Ci>,
    pub rises_not_reached: usize,
}

/// One target and whether it was met (`None`: a configuration it needs was not run).
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub what: String,
    pub met: Option<bool>,
    pub detail: String,
}

/// The seed's Table 3 (seed 002 §5.2): Mbit/s and fps.
pub const SEED_TABLE3: [(&str, &str, f64, f64); 5] = [
    ("mgrpOFF.pOFF", "passive", 1.84, 30.11),
    ("mgrpOFF.pSLOW", "pslow", 1.96, 39.58),
    ("mgrp10.pSLOW", "pslow-riders", 2.05, 43.42),
    ("mgrpOFF.pFAST", "pfast", 1.86, 39.10),
    ("mgrp10.pFAST", "pfast-riders", 2.28, 52.08),
];

#[derive(Debug, Serialize)]
pub struct Report {
    pub config: MedianetConfig,
    pub peaks: String,
    pub runs: Vec<RunRow>,
    pub summary: Vec<Summary>,
    pub targets: Vec<Target>,
}

pub fn run(cfg: &MedianetConfig, hooks: Hooks) -> Result<Report> {
    cfg.check()?;
    let mut runs = Vec::new();
    let total = cfg.runs * cfg.configs.len();
    let mut k = 0;
    // Runs interleave the configurations, so a slow spell on the shared machine spreads.
    'outer: for r in 0..cfg.runs {
        for c in &cfg.configs {
            if hooks.stopped() {
                break 'outer;
            }
            k += 1;
            hooks.say(&format!(
                "[{k}/{total}] {c}, run {} ({:.0} s)\n",
                r + 1,
                cfg.duration_s
            ));
            runs.push(one_run(cfg, c, r, hooks)?);
        }
    }
    Ok(report(cfg.clone(), runs))
}

fn report(config: MedianetConfig, runs: Vec<RunRow>) -> Report {
    let summary = config.configs.iter().map(|c| summarise(c, &runs)).collect();
    let targets = targets(&runs);
    Report {
        peaks: config.peaks_pattern(),
        config,
        runs,
        summary,
        targets,
    }
}

/// What a saved report (`medianet.json`) holds that a merge needs.
#[derive(Deserialize)]
struct Saved {
    config: MedianetConfig,
    runs: Vec<RunRow>,
}

/// One report from the runs of several saved ones (`medianet.json` documents, e.g. the
/// configurations run by two processes side by side, or on two days): the runs are pooled per
/// configuration and the summary and targets recomputed. The runs must share the scenario
/// (capacity, RTT, duration, riders' T and ratio, playout, schedule).
pub fn merge(docs: &[(String, String)]) -> Result<Report> {
    let mut merged: Option<(MedianetConfig, String)> = None;
    let mut runs = Vec::new();
    for (name, text) in docs {
        let s: Saved = serde_json::from_str(text)
            .map_err(|e| Error::Config(format!("{name}: not a medianet report: {e}")))?;
        s.config.check()?;
        let scenario = |c: &MedianetConfig| {
            format!(
                "C {} Mbit/s, delay {} ms, {} s, T {} ms, ratio {}, playout {} ms, every {} s",
                c.capacity_mbit,
                c.delay_ms,
                c.duration_s,
                c.hold_ms,
                c.rider_ratio,
                c.playout_ms,
                c.every_s
            )
        };
        match &mut merged {
            None => merged = Some((s.config.clone(), name.clone())),
            Some((cfg, first)) => {
                ensure(
                    scenario(cfg) == scenario(&s.config),
                    &format!(
                        "{name} ran another scenario than {first}: {} vs {}",
                        scenario(&s.config),
                        scenario(cfg)
                    ),
                )?;
                for c in &s.config.configs {
                    if !cfg.configs.contains(c) {
                        cfg.configs.push(c.clone());
                    }
                }
            }
        }
        runs.extend(s.runs);
    }
    let (mut cfg, _) = merged.ok_or_else(|| Error::Config("nothing to merge".into()))?;
    // In the order the tables list them, whatever order the files came in.
    cfg.configs
        .sort_by_key(|c| CONFIGS.iter().position(|k| k == c).unwrap_or(usize::MAX));
    cfg.runs = cfg
        .configs
        .iter()
        .map(|c| runs.iter().filter(|r| &r.config == c).count())
        .max()
        .unwrap_or(0);
    Ok(report(cfg, runs))
}

fn summarise(config: &str, runs: &[RunRow]) -> Summary {
    let rs: Vec<&RunRow> = runs.iter().filter(|r| r.config == config).collect();
    let f = |g: &dyn Fn(&RunRow) -> f64| ci(&rs.iter().map(|r| g(r)).collect::<Vec<_>>());
    let reached: Vec<f64> = rs
        .iter()
        .flat_map(|r| r.time_to_full_s.iter().flatten().copied())
        .collect();
    Summary {
        config: config.to_string(),
        runs: rs.len(),
        seconds: rs.iter().map(|r| r.seconds).sum(),
        decoded_mbit: f(&|r| r.decoded_mbit),
        fps: f(&|r| r.fps),
        bad_frame_ratio: f(&|r| r.bad_frame_ratio),
        level_switches: f(&|r| r.level_switches as f64),
        probe_mbyte: f(&|r| r.probe_bytes as f64 / 1e6),
        time_to_full_s: ci(&reached),
        rises_not_reached: rs
            .iter()
            .map(|r| r.time_to_full_s.iter().filter(|t| t.is_none()).count())
            .sum(),
    }
}

/// Mean fps of a configuration over its runs.
fn mean_of(runs: &[RunRow], config: &str, g: impl Fn(&RunRow) -> f64) -> Option<f64> {
    let v: Vec<f64> = runs.iter().filter(|r| r.config == config).map(g).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn targets(runs: &[RunRow]) -> Vec<Target> {
    let fps = |c: &str| mean_of(runs, c, |r| r.fps);
    let bad = |c: &str| mean_of(runs, c, |r| r.bad_frame_ratio);
    let best = |cs: &[&'static str]| -> Option<(f64, &'static str)> {
        cs.iter().filter_map(|c| fps(c).map(|v| (v, *c))).fold(
            None,
            |a: Option<(f64, &'static str)>, b| match a {
                Some(a) if a.0 >= b.0 => Some(a),
                _ => Some(b),
            },
        )
    };
    let mut out = Vec::new();
    let (p, act, rid) = (
        fps("passive"),
        best(&["pslow", "pfast"]),
        best(&["pslow-riders", "pfast-riders"]),
    );
    out.push(Target {
        what: "ordering: passive < active < active with riders (fps, best of pSLOW/pFAST)".into(),
        met: match (p, act, rid) {
            (Some(p), Some(a), Some(r)) => Some(p < a.0 && a.0 < r.0),
            _ => None,
        },
        detail: format!(
            "passive {} < {} < {}",
            opt(p),
            act.map_or("-".into(), |a| format!("{} {:.1}", a.1, a.0)),
            rid.map_or("-".into(), |a| format!("{} {:.1}", a.1, a.0))
        ),
    });
    let (pf, pfr) = (fps("pfast"), fps("pfast-riders"));
    out.push(Target {
        what: "pFAST with riders ≥ 1.25× pFAST fps (seed 1.33×)".into(),
        met: pf.zip(pfr).map(|(a, b)| b >= 1.25 * a),
        detail: ratio(pfr, pf),
    });
    out.push(Target {
        what: "pFAST with riders ≥ 1.6× passive fps (seed 1.73×)".into(),
        met: p.zip(pfr).map(|(a, b)| b >= 1.6 * a),
        detail: ratio(pfr, p),
    });
    let mut pairs = Vec::new();
    let mut met = None;
    for (with, without) in [("pfast-riders", "pfast"), ("pslow-riders", "pslow")] {
        if let (Some(w), Some(o)) = (bad(with), bad(without)) {
            met = Some(met.unwrap_or(true) && w <= o);
            pairs.push(format!("{with} {w:.3} vs {without} {o:.3}"));
        }
    }
    out.push(Target {
        what: "bad-frame ratio with riders ≤ without".into(),
        met,
        detail: pairs.join("; "),
    });
    let b = best(&[
        "pslow",
        "pslow-riders",
        "pfast",
        "pfast-riders",
        "auto",
        "wren",
    ]);
    let o = fps("oracle");
    out.push(Target {
        what: "best mgrp configuration within 15% of the oracle's fps".into(),
        met: b.zip(o).map(|(b, o)| b.0 >= 0.85 * o),
        detail: format!(
            "{} vs oracle {}",
            b.map_or("-".into(), |b| format!("{} {:.1}", b.1, b.0)),
            opt(o)
        ),
    });
    out
}

fn opt(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{a:.1} / {b:.1} = {:.2}×", a / b),
        _ => "-".into(),
    }
}

/// The agent's side of a configuration: method, riders, Wren.
struct Probing {
    method: Option<&'static str>,
    riders: bool,
    wren: bool,
}

fn probing(config: &str) -> Probing {
    let (method, riders) = match config {
        "pslow" => (Some("slops-slow"), false),
        "pslow-riders" => (Some("slops-slow"), true),
        "pfast" => (Some("slops"), false),
        "pfast-riders" => (Some("slops"), true),
        "auto" => (Some("auto"), false),
        _ => (None, false),
    };
    Probing {
        method,
        riders,
        wren: config == "wren",
    }
}

/// Everything a run starts, stopped in order when dropped: the app, the service, the agent,
/// then the testbed.
struct Rig {
    sender: Option<Sender>,
    agent_counts: Arc<AgentCounts>,
    follow_stop: Stop,
    http: Option<Http>,
    service: Option<Service>,
    receiver: Option<Receiver>,
    agent: mgrp_engine::daemon::Agent,
    // Last: the namespaces go after everything in them has stopped.
    tb: Testbed,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.follow_stop.set();
        self.sender.take();
        self.http.take();
        if let Some(s) = self.service.take() {
            s.stop();
        }
        self.receiver.take();
    }
}

fn start_rig(cfg: &MedianetConfig, config: &str) -> Result<Rig> {
    let pr = probing(config);
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: (cfg.capacity_mbit * 1e6) as u64,
            delay: Some(Duration::from_millis(cfg.delay_ms)),
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    let key = Key::random();
    let (agent, peer) = agent_at_rcv_with(&tb, &key, pr.riders.then(|| "mgrp1".to_string()))?;
    let rcv_ip: IpAddr = peer.ip();
    let playout = Duration::from_millis(cfg.playout_ms);
    let receiver = setup(&tb.ns(Role::Rcv), "medianet-rx", move || {
        Receiver::start(rcv_ip, STREAM_PORT, 3, playout).map_err(|e| e.to_string())
    })?;
    let api: SocketAddr = API.parse().map_err(|_| Error::Config("api".into()))?;
    let snd_ns = tb.ns(Role::Snd);
    // The agent's service in snd: a schedule for the active configurations (riders opted in
    // by the streams' ports, as a `[riders]` section would), Wren on the streams for `wren`.
    let (service, http) = if pr.method.is_some() || pr.wren {
        let svc_cfg = ServiceConfig {
            paths: pr
                .method
                .map(|m| PathSchedule {
                    peer,
                    method: m.to_string(),
                    every: Duration::from_secs_f64(cfg.every_s),
                    // Generous: the method's own pacing sets the probing rate, as pathload's.
                    budget: Some(200_000_000),
                    ceiling: None,
                })
                .into_iter()
                .collect(),
            passive: if pr.wren {
                vec![PassiveSource {
                    iface: "eth0".into(),
                    flow: Some(format!("portrange {}-{}", STREAM_PORT, STREAM_PORT + 2)),
                    window: Duration::from_secs(1),
                    peer: None,
                }]
            } else {
                vec![]
            },
            riders: pr.riders.then(|| RidersConfig {
                dev: "mgrp0".into(),
                opt_in: (0..3)
                    .map(|i| mgrp_shim::route::OptIn::TcpPort(STREAM_PORT + i))
                    .collect(),
                hold: Duration::from_millis(cfg.hold_ms),
                ratio: cfg.rider_ratio,
                elastic: None,
            }),
            ..ServiceConfig::default()
        };
        let k = key.clone();
        let (s, h) = setup(&snd_ns, "service", move || {
            let s = Service::start(&svc_cfg, k).map_err(|e| e.to_string())?;
            let h = Http::start(api, s.hub()).map_err(|e| e.to_string())?;
            Ok((s, h))
        })?;
        (Some(s), Some(h))
    } else {
        (None, None)
    };
    let mode = if config == "passive" {
        Mode::Passive
    } else {
        Mode::Mgrp
    };
    let scfg = SenderConfig::new(rcv_ip, STREAM_PORT, GlobalConfig::new(mode));
    let sender = setup(&snd_ns, "medianet-tx", move || {
        Sender::start(scfg).map_err(|e| e.to_string())
    })?;
    let follow_stop = Stop::default();
    let agent_counts = Arc::new(AgentCounts::default());
    if pr.method.is_some() || pr.wren {
        let selector = if pr.wren {
            format!("path={}%2D%3E{}", Role::Snd.addr(), rcv_ip)
        } else {
            format!("peer={rcv_ip}")
        };
        let src = AgentSource {
            api,
            selector,
            token: None,
        };
        if pr.method.is_some() {
            let (src, st, ac) = (src.clone(), follow_stop.clone(), agent_counts.clone());
            drop(spawn_in(&snd_ns, "medianet-measure", move || {
                keep_measuring(src, st, ac);
                Ok(())
            })?);
        }
        let (tx, st, ac) = (
            sender.estimates(),
            follow_stop.clone(),
            agent_counts.clone(),
        );
        // Detached: it ends at the next event or keep-alive after the stop (≤ 15 s), or when
        // the agent's API goes away.
        drop(spawn_in(&snd_ns, "medianet-sse", move || {
            follow(src, tx, st, ac);
            Ok(())
        })?);
    }
    Ok(Rig {
        sender: Some(sender),
        agent_counts,
        follow_stop,
        http,
        service,
        receiver: Some(receiver),
        agent,
        tb,
    })
}

fn one_run(cfg: &MedianetConfig, config: &str, run: usize, hooks: Hooks) -> Result<RunRow> {
    let mut rig = start_rig(cfg, config)?;
    let sampler = TruthSampler::start(&rig.tb, Duration::from_millis(100))?;
    let capacity = sampler.truth().capacity_bps;
    let pattern = CrossPattern::parse(&cfg.peaks_pattern())
        .map_err(|e| Error::Config(format!("peaks: {e}")))?;
    let cross = CrossTraffic::start(
        &rig.tb,
        &pattern,
        CROSS_PORT,
        &GenOptions {
            max_duration: Duration::from_secs_f64(cfg.duration_s + 5.0),
            ..GenOptions::default()
        },
    )?;
    let t0 = mgrp_testbed::clock::now_ns();
    let real0 = mgrp_medianet::realtime_ns();
    let since = || mgrp_testbed::clock::now_ns().saturating_sub(t0) as f64 / 1e9;
    let oracle = config == "oracle";
    let tx = rig.sender.as_ref().map(|s| s.estimates());
    let mut next = 1.0;
    while since() < cfg.duration_s && !hooks.stopped() {
        if since() >= next {
            let now = mgrp_testbed::clock::now_ns();
            if oracle {
                if let (Some(w), Some(tx)) = (
                    sampler
                        .truth()
                        .window(now.saturating_sub(1_000_000_000), now),
                    &tx,
                ) {
                    tx.send(Estimate {
                        bps: w.avail_bps,
                        includes_own: false,
                    });
                }
            }
            if let Some(s) = &rig.sender {
                let st = s.status();
                hooks.say(&format!(
                    "\r  {next:>4.0} s  levels {}  ceiling {:.2} Mbit/s  estimates {}   ",
                    st.levels
                        .iter()
                        .map(|l| l.name())
                        .collect::<Vec<_>>()
                        .join("/"),
                    st.ceiling_bps / 1e6,
                    st.global.estimates
                ));
            }
            next += 1.0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    hooks.say("\n");
    let seconds = since();
    drop(tx);
    let status = rig
        .sender
        .take()
        .map(|s| s.stop())
        .ok_or_else(|| Error::Worker("no sender".into()))?;
    // Frames still in flight get their deadline's worth of time to arrive.
    std::thread::sleep(Duration::from_millis(cfg.playout_ms + 200));
    let counts = rig
        .receiver
        .as_ref()
        .map(|r| r.counts())
        .unwrap_or_default();
    let (measurements, probe_bytes) = rig.service.as_ref().map_or((0, 0), |s| {
        s.hub().paths().iter().fold((0, 0), |(m, b), p| {
            let c = p.counters();
            (m + c.measurements, b + c.probe_bytes)
        })
    });
    let wren_trains = rig.service.as_ref().and_then(|s| {
        s.hub().passive().first().map(|p| {
            let c = &p.counters;
            [
                c.trains,
                c.trains_rising,
                c.trains_lower_bound,
                c.short_runs,
            ]
        })
    });
    let riders = probing(config).riders.then(|| riders_seen(&rig));
    let ac = &rig.agent_counts;
    let agent_client = [
        &ac.connects,
        &ac.events,
        &ac.estimates,
        &ac.skipped,
        &ac.errors,
        &ac.requests,
    ]
    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
    cross.stop()?;
    let truth = sampler.stop()?;
    drop(rig);

    let decoded: u64 = counts.iter().map(|c| c.decoded).sum();
    let decoded_bytes: u64 = counts.iter().map(|c| c.decoded_bytes).sum();
    let intended: u64 = status.streams.iter().map(|c| c.intended).sum();
    // The scheduler's points are in the realtime clock, the truth in the testbed's.
    let timeline = timeline(&truth, t0, real0, &status.timeline, seconds);
    Ok(RunRow {
        config: config.to_string(),
        run,
        seconds,
        capacity_measured_mbit: capacity / 1e6,
        decoded_mbit: decoded_bytes as f64 * 8.0 / seconds / 1e6,
        fps: decoded as f64 / seconds,
        intended_frames: intended,
        decoded_frames: decoded,
        bad_frame_ratio: if intended > 0 {
            intended.saturating_sub(decoded) as f64 / intended as f64
        } else {
            0.0
        },
        level_switches: status.global.level_switches,
        probe_bytes,
        measurements,
        estimates: status.global.estimates,
        time_to_full_s: time_to_full(&timeline),
        sender_error: status.error.clone(),
        agent_client,
        late_frames: counts.iter().map(|c| c.late).sum(),
        broken_frames: counts.iter().map(|c| c.broken).sum(),
        dropped_behind: status.streams.iter().map(|c| c.dropped_behind).sum(),
        dropped_late: status.streams.iter().map(|c| c.dropped_late).sum(),
        timeline,
        wren_trains,
        tcp_retrans: status.tcp.iter().map(|t| t.retrans).collect(),
        tcp_srtt_us: status.tcp.iter().map(|t| t.srtt_us).collect(),
        riders,
        load_avg: crate::accuracy::load_avg(),
    })
}

/// Both agents' rider counters now.
fn riders_seen(rig: &Rig) -> RidersSeen {
    let mut seen = RidersSeen::default();
    if let Some(s) = &rig.service {
        for (group, v) in s.hub().counter_groups() {
            if group == "riders_sent" {
                seen.sent.extend(v);
            }
        }
    }
    if let Some((r, re)) = rig.agent.rider_counters() {
        seen.received.insert("riders".into(), r.riders);
        seen.received.insert("injected".into(), r.injected);
        seen.received.insert("bad_tag".into(), r.bad_tag);
        if let Some(re) = re {
            seen.received
                .insert("reassembly_timed_out".into(), re.timed_out);
        }
    }
    seen
}

/// Per second of the run: the truth's A over that second and the scheduler's state at its end.
fn timeline(truth: &Truth, t0: u64, real0: u64, points: &[Point], seconds: f64) -> Vec<Second> {
    let mut out = Vec::new();
    let mut t = 1.0;
    while t <= seconds {
        let end = t0 + (t * 1e9) as u64;
        let a = truth
            .window(end.saturating_sub(1_000_000_000), end)
            .map(|w| w.avail_bps / 1e6);
        // The scheduler's newest point at or before this second's end.
        let real_end = real0 + (t * 1e9) as u64;
        let p = points.iter().rev().find(|p| p.t_ns <= real_end);
        out.push(Second {
            t_s: t,
            truth_mbit: a,
            ceiling_mbit: p.map_or(0.0, |p| p.ceiling_bps / 1e6),
            levels: p.map_or_else(Vec::new, |p| p.levels.clone()),
        });
        t += 1.0;
    }
    out
}

/// Each rise of A above 3.48 Mbit/s that lasts ≥ 3 s: seconds until all streams were at full
/// within it (`None` if not before it ended).
pub fn time_to_full(tl: &[Second]) -> Vec<Option<f64>> {
    let above = |s: &Second| s.truth_mbit.is_some_and(|a| a * 1e6 > FULL_BPS);
    let full = |s: &Second| s.levels.len() == 3 && s.levels.iter().all(|l| *l == Level::High);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tl.len() {
        // A rise: below (or the start) then above.
        if above(&tl[i]) && (i == 0 || !above(&tl[i - 1])) {
            let end = (i..tl.len()).find(|&j| !above(&tl[j])).unwrap_or(tl.len());
            if end - i >= 3 {
                out.push(
                    (i..end)
                        .find(|&j| full(&tl[j]))
                        .map(|j| tl[j].t_s - tl[i].t_s + 1.0),
                );
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(t: f64, a: f64, full: bool) -> Second {
        Second {
            t_s: t,
            truth_mbit: Some(a),
            ceiling_mbit: 0.0,
            levels: vec![if full { Level::High } else { Level::Low }; 3],
        }
    }

    #[test]
    fn rises_of_a_and_the_time_to_full_are_found() {
        let tl = vec![
            sec(1.0, 6.0, false),
            sec(2.0, 6.0, true),
            sec(3.0, 6.0, true),
            sec(4.0, 2.0, false),
            sec(5.0, 6.0, false),
            sec(6.0, 6.0, false),
            sec(7.0, 6.0, false),
            sec(8.0, 2.0, false),
            sec(9.0, 6.0, false),
        ];
        // The start: full in the second second (2 s); the second rise never; the last too short.
        assert_eq!(time_to_full(&tl), vec![Some(2.0), None]);
    }

    #[test]
    fn the_peaks_schedule_scales_and_parses_and_configs_check() {
        let c = MedianetConfig::default();
        c.check().unwrap();
        assert_eq!(PEAKS.iter().map(|p| p.1).sum::<f64>(), 240.0);
        CrossPattern::parse(&c.peaks_pattern()).unwrap();
        let short = MedianetConfig {
            duration_s: 60.0,
            ..MedianetConfig::default()
        };
        assert!(short
            .peaks_pattern()
            .starts_with("peaks:4mbit@10000ms,8mbit@7500ms"));
        let bad = MedianetConfig {
            configs: vec!["pmedium".into()],
            ..MedianetConfig::default()
        };
        assert!(bad.check().is_err());
    }

    #[test]
    fn confidence_intervals_use_students_t() {
        let c = ci(&[1.0, 2.0, 3.0]).unwrap();
        assert!((c.mean - 2.0).abs() < 1e-12);
        // sd 1, n 3: 4.303 / √3.
        assert!((c.half.unwrap() - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert!(ci(&[5.0]).unwrap().half.is_none());
    }

    fn row(config: &str, run: usize, fps: f64) -> RunRow {
        RunRow {
            config: config.into(),
            run,
            seconds: 300.0,
            capacity_measured_mbit: 9.6,
            decoded_mbit: fps / 30.0,
            fps,
            intended_frames: 27_000,
            decoded_frames: (fps * 300.0) as u64,
            bad_frame_ratio: 0.05,
            level_switches: 10,
            probe_bytes: 0,
            measurements: 0,
            estimates: 0,
            time_to_full_s: vec![Some(2.0), None],
            sender_error: None,
            agent_client: [0; 6],
            late_frames: 0,
            broken_frames: 0,
            dropped_behind: 0,
            dropped_late: 0,
            timeline: vec![sec(0.0, 5.0, true)],
            wren_trains: None,
            tcp_retrans: vec![],
            tcp_srtt_us: vec![],
            riders: None,
            load_avg: None,
        }
    }

    fn saved(configs: &[&str], rows: Vec<RunRow>, cfg: MedianetConfig) -> String {
        let cfg = MedianetConfig {
            configs: configs.iter().map(|s| s.to_string()).collect(),
            ..cfg
        };
        serde_json::to_string(&report(cfg, rows)).unwrap()
    }

    #[test]
    fn saved_reports_merge_into_one_and_other_scenarios_are_refused() {
        let base = MedianetConfig {
            runs: 2,
            duration_s: 300.0,
            ..MedianetConfig::default()
        };
        let a = saved(
            &["pfast", "passive"],
            vec![
                row("pfast", 0, 40.0),
                row("passive", 0, 20.0),
                row("pfast", 1, 50.0),
            ],
            base.clone(),
        );
        let b = saved(&["oracle"], vec![row("oracle", 0, 60.0)], base.clone());
        let m = merge(&[("a".into(), a.clone()), ("b".into(), b)]).unwrap();
        // The tables' order, the runs pooled, the summary and targets recomputed.
        assert_eq!(m.config.configs, ["passive", "pfast", "oracle"]);
        assert_eq!((m.runs.len(), m.config.runs), (4, 2));
        let pfast = m.summary.iter().find(|s| s.config == "pfast").unwrap();
        assert_eq!((pfast.runs, pfast.fps.as_ref().unwrap().mean), (2, 45.0));
        assert!(m.targets.iter().any(|t| t.met.is_some()), "{:?}", m.targets);
        // Another duration is another scenario.
        let other = saved(
            &["oracle"],
            vec![row("oracle", 0, 60.0)],
            MedianetConfig {
                duration_s: 240.0,
                ..base
            },
        );
        let e = merge(&[("a".into(), a), ("c".into(), other)]).unwrap_err();
        assert!(e.to_string().contains("another scenario"), "{e}");
        let e = merge(&[("junk".into(), "{}".into())]).unwrap_err();
        assert!(e.to_string().contains("junk: not a medianet report"), "{e}");
        assert!(merge(&[]).is_err());
    }
}
