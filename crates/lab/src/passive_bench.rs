//! `mgrp bench passive`: Wren on the testbed's own TCP traffic against ground truth, capture
//! loss and cost, and offline analysis speed.

use crate::{ensure, Error, Hooks, Result};
use mgrp_capture::feed::feed_wren;
use mgrp_capture::file::PcapFile;
use mgrp_capture::live::LiveCapture;
use mgrp_estimate::stats::quantile;
use mgrp_estimate::wren::{PassiveEstimate, Wren, WrenCounters, WrenParams};
use mgrp_testbed::app::{AppFlow, AppPattern};
use mgrp_testbed::generator::CrossTraffic;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct PassiveConfig {
    /// Bottleneck capacities, Mbit/s.
    pub capacities: Vec<f64>,
    /// Monitored application traffic: bulk, msgs:SIZE,every=DUR, irregular:SIZE,every=DUR.
    pub apps: Vec<String>,
    /// Cross traffic: none, cbr:PCT (percent of C), tcp1.
    pub cross: Vec<String>,
    /// Congestion controls of the monitored flow.
    pub ccs: Vec<String>,
    /// Seconds per scenario.
    pub secs: f64,
    /// Round-trip delay added on the reverse path.
    pub delay: Duration,
    /// Segments in the synthetic pcap for the offline speed figure.
    pub offline_segments: u64,
}

#[derive(Serialize, Clone)]
pub struct Row {
    pub capacity_mbit: f64,
    pub app: String,
    pub cross: String,
    pub cc: String,
    pub truth_mbit: f64,
    pub app_mbit: f64,
    pub estimates: usize,
    pub estimates_per_min: f64,
    /// |estimate − truth| / truth over the windows with an estimate.
    pub median_err: Option<f64>,
    pub p90_err: Option<f64>,
    /// Median of (estimate − truth) / truth: Wren reports lower bounds, so this is usually < 0.
    pub median_signed: Option<f64>,
    /// Share of data segments in trains that measured something (lower bound or rising).
    pub usable_fraction: f64,
    pub capture_loss: f64,
    /// CPU time of the capture and analysis thread over wall time.
    pub cpu_share: f64,
    pub counters: WrenCounters,
}

#[derive(Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
    pub offline_segments: u64,
    pub offline_segments_per_s: f64,
    pub offline_file_bytes: u64,
}

fn cross_pattern(spec: &str, c: f64) -> Result<Option<CrossPattern>> {
    let parse = |s: &str| CrossPattern::parse(s).map_err(|e| Error::Config(e.to_string()));
    Ok(match spec {
        "none" => None,
        "tcp1" => Some(parse("tcp:1")?),
        s => match s.strip_prefix("cbr:").and_then(|p| p.parse::<f64>().ok()) {
            Some(pct) if (0.0..100.0).contains(&pct) => {
                Some(parse(&format!("cbr:{:.3}mbit", c * pct / 100.0 / 1e6))?)
            }
            _ => {
                return Err(Error::Config(format!(
                    "cross {s:?}: use none, cbr:PCT (0..100) or tcp1"
                )))
            }
        },
    })
}

fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

struct Captured {
    estimates: Vec<PassiveEstimate>,
    counters: WrenCounters,
    loss: f64,
    cpu_share: f64,
}

/// Capture in snd for `secs`, analysing as it goes, optionally saving the pcap.
fn capture_in_snd(tb: &Testbed, secs: f64, window: u64, save: Option<PathBuf>) -> Result<Captured> {
    let h = spawn_in(&tb.ns(Role::Snd), "passive-capture", move || {
        let fail = |e: String| mgrp_testbed::Error::Setup(e);
        let mut cap =
            LiveCapture::open("eth0", None, save.as_deref()).map_err(|e| fail(e.to_string()))?;
        let local = vec![Role::Snd
            .addr()
            .parse::<std::net::IpAddr>()
            .map_err(|e| fail(e.to_string()))?];
        let mut w = Wren::new(WrenParams {
            window_ns: window,
            ..WrenParams::default()
        })
        .with_local(local);
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let mut estimates = Vec::new();
        let every = Duration::from_millis(50);
        let done = || t0.elapsed().as_secs_f64() >= secs;
        feed_wren(&mut cap, &mut w, every, done, |w, _, poll| {
            w.take_trains();
            estimates.extend(w.poll_estimates(poll.now_ns));
            Ok::<(), String>(())
        })
        .map_err(|e| fail(e.to_string()))?;
        cap.flush().map_err(|e| fail(e.to_string()))?;
        let cpu = (thread_cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64;
        estimates.extend(w.poll_estimates(u64::MAX));
        let st = cap.stats();
        let seen = (st.received + st.dropped).max(1);
        Ok(Captured {
            estimates,
            counters: w.counters(),
            loss: st.dropped as f64 / seen as f64,
            cpu_share: cpu,
        })
    })?;
    h.join()
        .map_err(|_| Error::Worker("capture thread panicked".into()))?
        .map_err(Into::into)
}

impl PassiveConfig {
    pub fn check(&self) -> Result<()> {
        ensure(
            (1.0..=60.0).contains(&self.secs),
            "--secs must be 1..=60 seconds",
        )?;
        ensure(
            (1_000..=100_000_000).contains(&self.offline_segments),
            "--offline-segments must be 1000..=100000000",
        )
    }
}

pub fn run(cfg: &PassiveConfig, hooks: Hooks) -> Result<Report> {
    cfg.check()?;
    let apps: Vec<(String, AppPattern)> = cfg
        .apps
        .iter()
        .map(|a| {
            let p = AppPattern::parse(a).map_err(|e| Error::Config(e.to_string()))?;
            Ok((a.clone(), p))
        })
        .collect::<Result<_>>()?;
    let window = 1_000_000_000u64;
    let mut rows = Vec::new();
    let sample = std::env::temp_dir().join(format!("mgrp-passive-{}.pcap", std::process::id()));
    let mut saved = false;
    for &cap_mbit in &cfg.capacities {
        let c = cap_mbit * 1e6;
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: c as u64,
                delay: Some(cfg.delay),
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        for cross in &cfg.cross {
            let p = cross_pattern(cross, c)?;
            for (app_name, app) in &apps {
                for cc in &cfg.ccs {
                    if hooks.stopped() {
                        return Err(Error::Interrupted);
                    }
                    hooks.say(&format!(
                        "\r{cap_mbit} Mbit/s  cross {cross:<8} app {app_name:<28} {cc:<6}    "
                    ));
                    let sampler = TruthSampler::start(&tb, Duration::from_millis(100))?;
                    let gen = CrossTraffic::start_if(&tb, p.as_ref())?;
                    let flow = AppFlow::start(
                        &tb,
                        Role::Snd,
                        Role::Rcv,
                        5300,
                        app.clone(),
                        Some(cc.clone()),
                        Duration::from_secs_f64(cfg.secs + 30.0),
                    )?;
                    // Slow start and the cross traffic's own start behind us.
                    std::thread::sleep(Duration::from_millis(1000));
                    // Save one bulk capture as the seed of the offline speed test.
                    let save = (!saved && app_name == "bulk").then(|| sample.clone());
                    saved |= save.is_some();
                    let mono0 = mgrp_testbed::clock::now_ns();
                    let real0 = mgrp_testbed::clock::realtime_ns();
                    let got = capture_in_snd(&tb, cfg.secs, window, save)?;
                    let report = flow.stop()?;
                    if let Some(g) = gen {
                        g.stop()?;
                    }
                    let truth = sampler.stop()?;
                    // Capture timestamps are wall-clock; the truth counts CLOCK_MONOTONIC.
                    let to_mono = |real: u64| (real as i128 - real0 as i128 + mono0 as i128) as u64;
                    let mut errs = Vec::new();
                    let mut signed = Vec::new();
                    for e in &got.estimates {
                        let Some(w) =
                            truth.window(to_mono(e.window_start_ns), to_mono(e.window_end_ns))
                        else {
                            continue;
                        };
                        if w.avail_bps > 0.0 {
                            errs.push((e.value_bps - w.avail_bps).abs() / w.avail_bps);
                            signed.push((e.value_bps - w.avail_bps) / w.avail_bps);
                        }
                    }
                    let whole = truth.window(mono0, mono0 + (cfg.secs * 1e9) as u64);
                    let data = got.counters.data_segments.max(1) as f64;
                    rows.push(Row {
                        capacity_mbit: cap_mbit,
                        app: app_name.clone(),
                        cross: cross.clone(),
                        cc: cc.clone(),
                        truth_mbit: whole.map_or(f64::NAN, |w| w.avail_bps / 1e6),
                        app_mbit: whole
                            .map_or(report.sent_bytes as f64 * 8.0 / report.duration_s, |w| {
                                w.fg_bps
                            })
                            / 1e6,
                        estimates: got.estimates.len(),
                        estimates_per_min: got.estimates.len() as f64 * 60.0 / cfg.secs,
                        median_err: quantile(&errs, 0.5),
                        p90_err: quantile(&errs, 0.9),
                        median_signed: quantile(&signed, 0.5),
                        usable_fraction: got.counters.usable_segments as f64 / data,
                        capture_loss: got.loss,
                        cpu_share: got.cpu_share,
                        counters: got.counters,
                    });
                }
            }
        }
    }
    hooks.say("\n");
    let (n, rate, bytes) = if saved {
        offline_speed(&sample, cfg.offline_segments)?
    } else {
        (0, f64::NAN, 0)
    };
    let _ = std::fs::remove_file(&sample);
    Ok(Report {
        rows,
        offline_segments: n,
        offline_segments_per_s: rate,
        offline_file_bytes: bytes,
    })
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Build a large pcap by repeating a recorded one (timestamps shifted so time keeps moving
/// forward), then time reading and analysing it on this thread.
fn offline_speed(seed: &Path, target: u64) -> Result<(u64, f64, u64)> {
    let data = std::fs::read(seed)?;
    ensure(data.len() > 24, "the recorded capture is empty")?;
    let (header, body) = data.split_at(24);
    // Records of the seed: (ts_sec, ts_frac, rest) — rewritten per copy.
    let nanos = le32(header, 0) == 0xa1b23c4d;
    let mut records: Vec<(u64, &[u8])> = Vec::new();
    let mut i = 0;
    while i + 16 <= body.len() {
        let sec = le32(body, i) as u64;
        let frac = le32(body, i + 4) as u64;
        let caplen = le32(body, i + 8) as usize;
        let end = i + 16 + caplen;
        if end > body.len() {
            break;
        }
        let ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        records.push((ns, &body[i + 8..end]));
        i = end;
    }
    ensure(!records.is_empty(), "the recorded capture has no packets")?;
    let span = records.last().map_or(0, |r| r.0) - records[0].0 + 1_000_000;
    let path = std::env::temp_dir().join(format!("mgrp-offline-{}.pcap", std::process::id()));
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut h = header.to_vec();
        h[0..4].copy_from_slice(&0xa1b23c4du32.to_le_bytes());
        out.write_all(&h)?;
        let mut n = 0u64;
        let mut copy = 0u64;
        while n < target {
            for (ts, rest) in &records {
                let t = ts + copy * span;
                out.write_all(&((t / 1_000_000_000) as u32).to_le_bytes())?;
                out.write_all(&((t % 1_000_000_000) as u32).to_le_bytes())?;
                out.write_all(rest)?;
                n += 1;
            }
            copy += 1;
        }
        out.flush()?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    let t0 = Instant::now();
    let mut f = PcapFile::open(&path)?;
    let mut w = Wren::new(WrenParams::default());
    let mut n = 0u64;
    let mut last = 0u64;
    while let Some(s) = f.next_segment()? {
        n += 1;
        w.handle_segment(&s);
        if s.ts_ns >= last + 10_000_000 {
            last = s.ts_ns;
            w.take_trains();
            let _ = w.poll_estimates(s.ts_ns);
        }
    }
    let _ = w.poll_estimates(u64::MAX);
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    Ok((n, n as f64 / secs, bytes))
}
