//! `mgrp bench inline`: the seed's ImTCP scenario scaled to this machine (seed 001 §5.1–5.2):
//! C = 100 Mbit/s, RTT 180 ms (the testbed's delay line on the reverse path), UDP cross traffic
//! of 40, 576 and 1500 B packets stepping A through 60, 40, 60, 20, 60 Mbit/s; the monitored
//! flow a kernel CUBIC bulk transfer, once with the inline engine on and once off in the same
//! bench; then the flow app-limited at 20 Mbit/s with A = 60, against the kernel's own
//! `tcpi_delivery_rate`; then the bulk flow against web-like TCP cross traffic (A ≈ 60), inline
//! on and off. Every case may be repeated; the summary gives medians and ranges over repeats.

use crate::{ensure, Hooks, Result};
use mgrp_engine::inline::{FlowStatus, InlineConfig, InlineEngine};
use mgrp_estimate::stats::quantile;
use mgrp_shim::route::OptIn;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Buffer, CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PORT: u16 = 6401;

/// One scenario of the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// The CUBIC bulk flow, UDP cross traffic stepping A (inline on, then off).
    Bulk,
    /// The flow app-limited at `app_mbit`, A = `app_a_mbit` (inline on).
    AppLimited,
    /// The bulk flow against web-like TCP cross traffic of C − `app_a_mbit` (inline on, off).
    Web,
}

impl Case {
    pub const ALL: [Case; 3] = [Case::Bulk, Case::AppLimited, Case::Web];

    pub fn name(self) -> &'static str {
        match self {
            Case::Bulk => "bulk",
            Case::AppLimited => "app-limited",
            Case::Web => "web",
        }
    }

    pub fn parse(s: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == s)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct InlineBenchConfig {
    pub capacity_mbit: f64,
    pub rtt_ms: u64,
    pub buffer_packets: u32,
    /// A per step, Mbit/s.
    pub steps_mbit: Vec<f64>,
    pub step_s: f64,
    /// Estimates this long after a step are judged "settled".
    pub settle_s: f64,
    /// The app-limited case: the flow's rate and A.
    pub app_mbit: f64,
    pub app_a_mbit: f64,
    pub app_s: f64,
    /// Shares of the cross traffic's bytes in 44, 576 and 1500 B packets.
    pub mix: [(u32, f64); 3],
    /// The web case's duration.
    pub web_s: f64,
    pub cases: Vec<Case>,
    /// Run the bulk and web cases with inline off too (throughput, retransmits, RTOs).
    pub compare_off: bool,
    /// Each case this many times (fresh testbeds), for the spread.
    pub repeat: usize,
    /// Write each inline run's stream trace (JSON lines) into this directory.
    #[serde(skip)]
    pub trace_dir: Option<std::path::PathBuf>,
}

impl InlineBenchConfig {
    pub fn new(quick: bool) -> Self {
        InlineBenchConfig {
            capacity_mbit: 100.0,
            rtt_ms: 180,
            buffer_packets: 1000,
            steps_mbit: vec![60.0, 40.0, 60.0, 20.0, 60.0],
            step_s: if quick { 10.0 } else { 20.0 },
            settle_s: if quick { 3.0 } else { 5.0 },
            app_mbit: 20.0,
            app_a_mbit: 60.0,
            app_s: if quick { 15.0 } else { 30.0 },
            // 44 B: the generator's smallest IP packet (the seed's 40 B cannot carry its header).
            mix: [(44, 0.05), (576, 0.25), (1500, 0.70)],
            web_s: if quick { 15.0 } else { 40.0 },
            cases: Case::ALL.to_vec(),
            compare_off: true,
            repeat: 1,
            trace_dir: None,
        }
    }

    pub fn check(&self) -> Result<()> {
        ensure(self.capacity_mbit >= 1.0, "capacity below 1 Mbit/s")?;
        ensure(
            self.steps_mbit
                .iter()
                .all(|a| *a > 0.0 && *a < self.capacity_mbit),
            "every step's A must be in (0, C)",
        )?;
        ensure(self.step_s >= 5.0, "steps of at least 5 s")?;
        ensure(self.settle_s < self.step_s, "settle shorter than a step")?;
        ensure(
            (1..=10).contains(&self.repeat),
            "repeat between 1 and 10 times",
        )?;
        ensure(!self.cases.is_empty(), "no case to run")?;
        ensure(
            self.app_s > self.settle_s && self.web_s > self.settle_s,
            "app-limited and web runs longer than the settle time",
        )?;
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub a_truth_mbit: f64,
    pub estimates: usize,
    pub median_err: Option<f64>,
    pub p90_err: Option<f64>,
    /// Measurements from the step's start to the first within 10% of its truth.
    pub to_converge: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub case: String,
    /// Which repeat (0-based).
    pub rep: usize,
    pub inline: bool,
    pub secs: f64,
    pub throughput_mbit: f64,
    pub retransmits: u32,
    /// Retransmission timeouts (`tcpi_total_rto`, Linux ≥ 6.7).
    pub rtos: Option<u32>,
    pub bottleneck_mbit: f64,
    pub estimates: usize,
    pub estimates_per_s: f64,
    /// Estimates per 2 RTT (the target: ≥ 1 while cwnd ≥ 4N), RTT = the flow's median srtt.
    pub estimates_per_2rtt: f64,
    /// The flow's srtt (ms), median of once-a-second samples: the RTT above (base 180 ms plus
    /// the queue the flow keeps).
    pub srtt_ms: Option<f64>,
    /// Share of once-a-second samples with cwnd ≥ 4N.
    pub cwnd_ge_4n: Option<f64>,
    pub median_err: Option<f64>,
    pub p90_err: Option<f64>,
    pub steps: Vec<StepRow>,
    /// Median of the kernel's delivery rate sampled once a second, Mbit/s.
    pub delivery_rate_mbit: Option<f64>,
    /// Median inline estimate in the app-limited case, Mbit/s.
    pub inline_median_mbit: Option<f64>,
    pub counters: Option<mgrp_estimate::inline::InlineCounters>,
    /// The flow's retransmissions so far (`tcpi_total_retrans`), once a second: where in the
    /// run they happen (slow start, each step, evenly).
    pub retrans_series: Vec<u32>,
    /// The reverse path's delay line (the ACKs' 180 ms): its release lateness p50, p99 and
    /// max in µs, the echoes' jitter from the testbed itself.
    pub ack_line_late_us: Option<[f64; 3]>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InlineBenchReport {
    pub config: InlineBenchConfig,
    pub runs: Vec<RunRow>,
    /// Per case and inline on/off, over the repeats.
    pub summary: Vec<SummaryRow>,
    pub load: String,
}

/// Median, min and max of one figure over the repeats.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Spread {
            median: quantile(&v, 0.5)?,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub case: String,
    pub inline: bool,
    pub runs: usize,
    pub throughput_mbit: Option<Spread>,
    pub retransmits: Option<Spread>,
    pub rtos: Option<Spread>,
    pub estimates_per_2rtt: Option<Spread>,
    pub median_err: Option<Spread>,
    pub p90_err: Option<Spread>,
}

fn summarize(runs: &[RunRow]) -> Vec<SummaryRow> {
    let mut keys: Vec<(String, bool)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.case.clone(), r.inline)) {
            keys.push((r.case.clone(), r.inline));
        }
    }
    keys.into_iter()
        .map(|(case, inline)| {
            let rs: Vec<&RunRow> = runs
                .iter()
                .filter(|r| r.case == case && r.inline == inline)
                .collect();
            let of = |f: &dyn Fn(&RunRow) -> Option<f64>| {
                Spread::of(&rs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            SummaryRow {
                runs: rs.len(),
                throughput_mbit: of(&|r| Some(r.throughput_mbit)),
                retransmits: of(&|r| Some(r.retransmits as f64)),
                rtos: of(&|r| r.rtos.map(f64::from)),
                estimates_per_2rtt: of(&|r| r.inline.then_some(r.estimates_per_2rtt)),
                median_err: of(&|r| r.median_err),
                p90_err: of(&|r| r.p90_err),
                case,
                inline,
            }
        })
        .collect()
}

/// The cross traffic of one size class: its share of `cross` at each step.
fn patterns(cfg: &InlineBenchConfig, avail: &[f64], step_s: f64) -> Result<Vec<CrossPattern>> {
    cfg.mix
        .iter()
        .map(|(size, share)| {
            let rates: Vec<String> = avail
                .iter()
                .map(|a| format!("{:.3}mbit", (cfg.capacity_mbit - a) * share))
                .collect();
            CrossPattern::parse(&format!(
                "step:{},every={}ms,size={size}",
                rates.join(","),
                (step_s * 1000.0) as u64
            ))
            .map_err(|e| crate::Error::Config(e.to_string()))
        })
        .collect()
}

/// One run: the path, the cross traffic, the flow (bulk or app-limited), inline on or off.
fn one_run(
    cfg: &InlineBenchConfig,
    case: Case,
    rep: usize,
    inline: bool,
    hooks: Hooks<'_>,
) -> Result<RunRow> {
    let (avail, app_mbit, step_s) = match case {
        Case::Bulk => (cfg.steps_mbit.clone(), None, cfg.step_s),
        Case::AppLimited => (vec![cfg.app_a_mbit], Some(cfg.app_mbit), cfg.app_s),
        Case::Web => (vec![cfg.app_a_mbit], None, cfg.web_s),
    };
    let avail = &avail[..];
    let secs = step_s * avail.len() as f64;
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: (cfg.capacity_mbit * 1e6) as u64,
            buffer: Buffer::Packets(cfg.buffer_packets),
            delay: Some(Duration::from_millis(cfg.rtt_ms)),
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    let trace = cfg
        .trace_dir
        .as_ref()
        .map(|d| d.join(format!("inline-trace-{}-{rep}.jsonl", case.name())));
    let engine = if inline {
        let access = tb.capacity().bps();
        Some(
            spawn_in(&tb.ns(Role::Snd), "inline", move || {
                let mut c = InlineConfig::new(vec![OptIn::TcpPort(PORT)], access * 1.2);
                c.trace = trace;
                InlineEngine::start(&c).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
            })?
            .join()
            .map_err(|_| crate::Error::Worker("inline start panicked".into()))??,
        )
    } else {
        None
    };
    let sampler = TruthSampler::start(&tb, Duration::from_millis(100))?;
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 30.0),
        ..Default::default()
    };
    let cross = match case {
        Case::Web => vec![CrossPattern::parse(&format!(
            "web:{:.3}mbit,seed={}",
            cfg.capacity_mbit - cfg.app_a_mbit,
            rep + 1
        ))
        .map_err(|e| crate::Error::Config(e.to_string()))?],
        _ => patterns(cfg, avail, step_s)?,
    };
    let gens = cross
        .iter()
        .enumerate()
        .map(|(i, p)| CrossTraffic::start(&tb, p, BASE_PORT + i as u16, &opts))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let start_mono = gens[0].start_ns();
    let offset = mgrp_testbed::clock::realtime_ns() - mgrp_testbed::clock::now_ns();
    let server = spawn_in(&tb.ns(Role::Rcv), "sink", || {
        let l = TcpListener::bind(("0.0.0.0", PORT))
            .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?;
        let (mut c, _) = l
            .accept()
            .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?;
        c.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        while let Ok(k) = c.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        Ok(n)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    let dur = Duration::from_secs_f64(secs);
    let client = spawn_in(&tb.ns(Role::Snd), "flow", move || {
        let mut c = TcpStream::connect((Role::Rcv.addr(), PORT))
            .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?;
        c.set_write_timeout(Some(Duration::from_secs(5))).ok();
        let chunk = vec![0x5au8; 16_384];
        let t0 = Instant::now();
        let mut written = 0u64;
        let mut rates = Vec::new();
        let mut next_sample = Duration::from_secs(1);
        while t0.elapsed() < dur {
            if let Some(m) = app_mbit {
                let due = Duration::from_secs_f64(written as f64 * 8.0 / (m * 1e6));
                if let Some(d) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(d.min(Duration::from_millis(20)));
                    continue;
                }
            }
            if c.write_all(&chunk).is_err() {
                break;
            }
            written += chunk.len() as u64;
            if t0.elapsed() >= next_sample {
                next_sample += Duration::from_secs(1);
                if let Ok(i) = mgrp_engine::sock::tcp_info(&c) {
                    rates.push((
                        i.tcpi_delivery_rate as f64 * 8.0,
                        i.tcpi_rtt as f64 / 1e3,
                        i.tcpi_snd_cwnd,
                        i.tcpi_total_retrans,
                    ));
                }
            }
        }
        let info = mgrp_engine::sock::tcp_info(&c).ok();
        let _ = c.shutdown(std::net::Shutdown::Write);
        Ok((
            info.map_or(0, |i| i.tcpi_bytes_acked),
            info.map_or(0, |i| i.tcpi_total_retrans),
            info.map(|i| u32::from(i.tcpi_total_rto)),
            t0.elapsed().as_secs_f64(),
            rates,
        ))
    })?;
    let t0 = Instant::now();
    while t0.elapsed() < dur + Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(500));
        hooks.say(&format!(
            "\r  {} #{} inline {}: {:.0}/{secs:.0} s ",
            case.name(),
            rep + 1,
            if inline { "on" } else { "off" },
            t0.elapsed().as_secs_f64().min(secs)
        ));
        if hooks.stopped() {
            break;
        }
    }
    let (acked, retrans, rtos, flow_s, rates) = client
        .join()
        .map_err(|_| crate::Error::Worker("flow panicked".into()))??;
    let _ = server.join();
    for g in gens {
        g.stop()?;
    }
    let truth = sampler.stop()?;
    // The reverse path's delay line carries the echoes: its lateness is their jitter.
    let ack_line_late_us = tb
        .delay_stats()
        .map(|d| [d.late_us_p50, d.late_us_p99, d.late_us_max]);
    let status: Option<FlowStatus> = match engine {
        Some(e) => spawn_in(&tb.ns(Role::Snd), "inline-stop", move || {
            let f = e.flows().into_iter().find(|f| f.flow.remote.port() == PORT);
            drop(e);
            Ok(f)
        })?
        .join()
        .map_err(|_| crate::Error::Worker("inline stop panicked".into()))??,
        None => None,
    };
    let start_rt = start_mono + offset;
    let history: Vec<(u64, f64)> = status
        .as_ref()
        .map(|f| f.history.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(t, _)| *t >= start_rt && *t < start_rt + (secs * 1e9) as u64)
        .collect();
    let err_of = |t: u64, v: f64| -> Option<f64> {
        let m = t - offset;
        let w = truth.window(m.saturating_sub(1_000_000_000), m)?;
        Some((v - w.avail_bps).abs() / w.avail_bps.max(1.0))
    };
    let mut all_settled = Vec::new();
    let mut steps = Vec::new();
    for (i, _) in avail.iter().enumerate() {
        let s0 = start_rt + (i as f64 * step_s * 1e9) as u64;
        let s1 = s0 + (step_s * 1e9) as u64;
        let mono0 = s0 - offset;
        let a_truth = truth
            .window(mono0 + 1_000_000_000, mono0 + (step_s * 1e9) as u64)
            .map_or(f64::NAN, |w| w.avail_bps);
        let settled: Vec<f64> = history
            .iter()
            .filter(|(t, _)| *t >= s0 + (cfg.settle_s * 1e9) as u64 && *t < s1)
            .filter_map(|(t, v)| err_of(*t, *v))
            .collect();
        all_settled.extend(settled.iter().copied());
        let to_converge = history
            .iter()
            .filter(|(t, _)| *t >= s0 && *t < s1)
            .position(|(_, v)| (v - a_truth).abs() / a_truth <= 0.10)
            .map(|p| p + 1);
        steps.push(StepRow {
            a_truth_mbit: a_truth / 1e6,
            estimates: settled.len(),
            median_err: quantile(&settled, 0.5),
            p90_err: quantile(&settled, 0.9),
            to_converge,
        });
    }
    let whole = truth.window(start_mono, start_mono + (secs * 1e9) as u64);
    let srtt_ms = quantile(&rates.iter().map(|r| r.1).collect::<Vec<_>>(), 0.5);
    let rtt_s = srtt_ms.unwrap_or(cfg.rtt_ms as f64) / 1e3;
    let n_seg = mgrp_estimate::inline::InlineParams::new(1e9).n as u32;
    let cwnd_ge_4n = (!rates.is_empty())
        .then(|| rates.iter().filter(|r| r.2 >= 4 * n_seg).count() as f64 / rates.len() as f64);
    let n = history.len();
    Ok(RunRow {
        case: case.name().into(),
        rep,
        inline,
        secs: flow_s,
        throughput_mbit: acked as f64 * 8.0 / flow_s / 1e6,
        retransmits: retrans,
        rtos,
        bottleneck_mbit: whole.map_or(f64::NAN, |w| w.total_bps / 1e6),
        estimates: n,
        estimates_per_s: n as f64 / secs,
        estimates_per_2rtt: n as f64 / (secs / (2.0 * rtt_s)),
        srtt_ms,
        cwnd_ge_4n,
        median_err: quantile(&all_settled, 0.5),
        p90_err: quantile(&all_settled, 0.9),
        steps,
        delivery_rate_mbit: quantile(&rates.iter().map(|r| r.0).collect::<Vec<_>>(), 0.5)
            .map(|r| r / 1e6),
        inline_median_mbit: quantile(&history.iter().map(|x| x.1).collect::<Vec<_>>(), 0.5)
            .map(|v| v / 1e6),
        counters: status.map(|f| f.counters),
        retrans_series: rates.iter().map(|r| r.3).collect(),
        ack_line_late_us,
    })
}

/// Per repeat, each case: inline on, then (bulk and web, with `compare_off`) inline off.
pub fn run(cfg: &InlineBenchConfig, hooks: Hooks<'_>) -> Result<InlineBenchReport> {
    cfg.check()?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut runs = Vec::new();
    for rep in 0..cfg.repeat {
        for &case in &cfg.cases {
            let off = cfg.compare_off && case != Case::AppLimited;
            for inline in [true, false].into_iter().filter(|i| *i || off) {
                runs.push(one_run(cfg, case, rep, inline, hooks)?);
                if hooks.stopped() {
                    return Err(crate::Error::Interrupted);
                }
            }
        }
    }
    hooks.say("\n");
    Ok(InlineBenchReport {
        config: cfg.clone(),
        summary: summarize(&runs),
        runs,
        load: format!("loadavg at start: {}", load.trim()),
    })
}
