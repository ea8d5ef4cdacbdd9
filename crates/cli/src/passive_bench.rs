//! `mgrp bench passive`: Wren on the testbed's own TCP traffic against ground truth, capture
//! loss and cost, and offline analysis speed.

use crate::say;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use mgrp_capture::file::PcapFile;
use mgrp_capture::live::LiveCapture;
use mgrp_estimate::wren::{PassiveEstimate, Wren, WrenCounters, WrenParams};
use mgrp_testbed::app::{AppFlow, AppPattern};
use mgrp_testbed::generator::CrossTraffic;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct PassiveBench {
    /// Bottleneck capacities, Mbit/s.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    capacities: Vec<f64>,
    /// Monitored application traffic, `;`-separated: bulk, msgs:SIZE,every=DUR,
    /// irregular:SIZE,every=DUR.
    #[arg(
        long,
        value_delimiter = ';',
        default_value = "bulk;msgs:64kb,every=10ms;msgs:256kb,every=40ms;irregular:256kb,every=40ms"
    )]
    apps: Vec<String>,
    /// Cross traffic: none, cbr:PCT (percent of C), tcp1.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,cbr:25,cbr:50,cbr:75,tcp1"
    )]
    cross: Vec<String>,
    /// Congestion controls of the monitored flow.
    #[arg(long, value_delimiter = ',', default_value = "cubic,bbr")]
    ccs: Vec<String>,
    /// Seconds per scenario.
    #[arg(long, default_value_t = 6.0)]
    secs: f64,
    /// Round-trip delay added on the reverse path.
    #[arg(long, default_value = "10ms", value_parser = crate::testbed_cmd::duration)]
    delay: Duration,
    /// Segments in the synthetic pcap for the offline speed figure.
    #[arg(long, default_value_t = 4_000_000)]
    offline_segments: u64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize, Clone)]
struct Row {
    capacity_mbit: f64,
    app: String,
    cross: String,
    cc: String,
    truth_mbit: f64,
    app_mbit: f64,
    estimates: usize,
    estimates_per_min: f64,
    /// |estimate − truth| / truth over the windows with an estimate.
    median_err: Option<f64>,
    p90_err: Option<f64>,
    /// Median of (estimate − truth) / truth: Wren reports lower bounds, so this is usually < 0.
    median_signed: Option<f64>,
    /// Share of data segments in trains that measured something (lower bound or rising).
    usable_fraction: f64,
    capture_loss: f64,
    /// CPU time of the capture and analysis thread over wall time.
    cpu_share: f64,
    counters: WrenCounters,
}

#[derive(Serialize)]
struct Report {
    rows: Vec<Row>,
    offline_segments: u64,
    offline_segments_per_s: f64,
    offline_file_bytes: u64,
}

fn cross_pattern(spec: &str, c: f64) -> Result<Option<CrossPattern>> {
    Ok(match spec {
        "none" => None,
        "tcp1" => Some(CrossPattern::parse("tcp:1")?),
        s => match s.strip_prefix("cbr:").and_then(|p| p.parse::<f64>().ok()) {
            Some(pct) if (0.0..100.0).contains(&pct) => Some(CrossPattern::parse(&format!(
                "cbr:{:.3}mbit",
                c * pct / 100.0 / 1e6
            ))?),
            _ => bail!("cross {s:?}: use none, cbr:PCT (0..100) or tcp1"),
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
        let fail = |e: mgrp_capture::Error| mgrp_testbed::Error::Setup(e.to_string());
        let mut cap = LiveCapture::open("eth0", None, save.as_deref()).map_err(fail)?;
        let local = vec![Role::Snd.addr().parse().expect("valid")];
        let mut w = Wren::new(WrenParams {
            window_ns: window,
            ..WrenParams::default()
        })
        .with_local(local);
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let mut estimates = Vec::new();
        let mut last = Instant::now();
        while t0.elapsed().as_secs_f64() < secs {
            if let Some(s) = cap.next_segment().map_err(fail)? {
                w.handle_segment(&s);
            }
            if last.elapsed() >= Duration::from_millis(50) {
                last = Instant::now();
                w.take_trains();
                estimates.extend(w.poll_estimates(mgrp_testbed::clock::realtime_ns()));
            }
        }
        cap.flush().map_err(fail)?;
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
        .map_err(|_| anyhow!("capture thread panicked"))?
        .map_err(Into::into)
}

use crate::accuracy::quantile as q;

pub fn run(b: PassiveBench) -> Result<()> {
    anyhow::ensure!(
        (1.0..=60.0).contains(&b.secs),
        "--secs must be 1..=60 seconds"
    );
    anyhow::ensure!(
        (1_000..=100_000_000).contains(&b.offline_segments),
        "--offline-segments must be 1000..=100000000"
    );
    let apps: Vec<(String, AppPattern)> = b
        .apps
        .iter()
        .map(|a| Ok((a.clone(), AppPattern::parse(a)?)))
        .collect::<Result<_>>()?;
    let window = 1_000_000_000u64;
    let mut rows = Vec::new();
    let sample = std::env::temp_dir().join(format!("mgrp-passive-{}.pcap", std::process::id()));
    let mut saved = false;
    for &cap_mbit in &b.capacities {
        let c = cap_mbit * 1e6;
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: c as u64,
                delay: Some(b.delay),
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        for cross in &b.cross {
            let p = cross_pattern(cross, c)?;
            for (app_name, app) in &apps {
                for cc in &b.ccs {
                    if crate::signals::interrupted() {
                        bail!("interrupted");
                    }
                    eprint!("\r{cap_mbit} Mbit/s  cross {cross:<8} app {app_name:<28} {cc:<6}    ");
                    let sampler = TruthSampler::start(&tb, Duration::from_millis(100))?;
                    let gen = CrossTraffic::start_if(&tb, p.as_ref())?;
                    let flow = AppFlow::start(
                        &tb,
                        Role::Snd,
                        Role::Rcv,
                        5300,
                        app.clone(),
                        Some(cc.clone()),
                        Duration::from_secs_f64(b.secs + 30.0),
                    )?;
                    // Slow start and the cross traffic's own start behind us.
                    std::thread::sleep(Duration::from_millis(1000));
                    // Save one bulk capture as the seed of the offline speed test.
                    let save = (!saved && app_name == "bulk").then(|| sample.clone());
                    saved |= save.is_some();
                    let mono0 = mgrp_testbed::clock::now_ns();
                    let real0 = mgrp_testbed::clock::realtime_ns();
                    let got = capture_in_snd(&tb, b.secs, window, save)?;
                    let report = flow.stop()?;
                    if let Some(g) = gen {
                        g.stop()?;
                    }
                    let truth = sampler.stop()?;
                    // Capture timestamps are wall-clock; the truth counts CLOCK_MONOTONIC.
                    let to_mono = |real: u64| (real as i128 - real0 as i128 + mono0 as i128) as u64;
                    let mut errs = Vec::new();
                    let mut signed = Vec::new();
                    let mut truths = Vec::new();
                    let mut app_rates = Vec::new();
                    for e in &got.estimates {
                        let Some(w) =
                            truth.window(to_mono(e.window_start_ns), to_mono(e.window_end_ns))
                        else {
                            continue;
                        };
                        truths.push(w.avail_bps);
                        app_rates.push(w.fg_bps);
                        if w.avail_bps > 0.0 {
                            errs.push((e.value_bps - w.avail_bps).abs() / w.avail_bps);
                            signed.push((e.value_bps - w.avail_bps) / w.avail_bps);
                        }
                    }
                    let whole = truth.window(mono0, mono0 + (b.secs * 1e9) as u64);
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
                        estimates_per_min: got.estimates.len() as f64 * 60.0 / b.secs,
                        median_err: q(errs.clone(), 0.5),
                        p90_err: q(errs, 0.9),
                        median_signed: q(signed, 0.5),
                        usable_fraction: got.counters.usable_segments as f64 / data,
                        capture_loss: got.loss,
                        cpu_share: got.cpu_share,
                        counters: got.counters,
                    });
                }
            }
        }
    }
    eprintln!();
    let (n, rate, bytes) = if saved {
        offline_speed(&sample, b.offline_segments)?
    } else {
        (0, f64::NAN, 0)
    };
    let _ = std::fs::remove_file(&sample);
    let report = Report {
        rows,
        offline_segments: n,
        offline_segments_per_s: rate,
        offline_file_bytes: bytes,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &b.out {
        std::fs::write(p, &json)?;
    }
    if b.json {
        say!("{json}");
        return Ok(());
    }
    table(&report);
    Ok(())
}

fn pct(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{:.1}%", v * 100.0))
}

fn table(r: &Report) {
    say!("Wren on the monitored flow snd → rcv (estimate per 1 s window vs A = C − cross of the same window):");
    say!("| C | cross | app | cc | A (Mbit/s) | app (Mbit/s) | est/min | median err | p90 err | median signed | usable | capture loss | CPU |");
    say!("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in &r.rows {
        say!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {:.1}% | {:.3}% | {:.1}% |",
            x.capacity_mbit,
            x.cross,
            x.app,
            x.cc,
            x.truth_mbit,
            x.app_mbit,
            x.estimates_per_min,
            pct(x.median_err),
            pct(x.p90_err),
            pct(x.median_signed),
            x.usable_fraction * 100.0,
            x.capture_loss * 100.0,
            x.cpu_share * 100.0
        );
    }
    say!(
        "\nOffline analysis: {} segments ({:.1} MB pcap) at {:.2} M segments/s on one core (decode + Wren).",
        r.offline_segments,
        r.offline_file_bytes as f64 / 1e6,
        r.offline_segments_per_s / 1e6
    );
}

/// Build a large pcap by repeating a recorded one (timestamps shifted so time keeps moving
/// forward), then time reading and analysing it on this thread.
fn offline_speed(seed: &Path, target: u64) -> Result<(u64, f64, u64)> {
    let data = std::fs::read(seed)?;
    anyhow::ensure!(data.len() > 24, "the recorded capture is empty");
    let (header, body) = data.split_at(24);
    // Records of the seed: (ts_sec, ts_frac, rest) — rewritten per copy.
    let nanos = u32::from_le_bytes(header[0..4].try_into()?) == 0xa1b23c4d;
    let mut records: Vec<(u64, &[u8])> = Vec::new();
    let mut i = 0;
    while i + 16 <= body.len() {
        let sec = u32::from_le_bytes(body[i..i + 4].try_into()?) as u64;
        let frac = u32::from_le_bytes(body[i + 4..i + 8].try_into()?) as u64;
        let caplen = u32::from_le_bytes(body[i + 8..i + 12].try_into()?) as usize;
        let end = i + 16 + caplen;
        if end > body.len() {
            break;
        }
        let ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        records.push((ns, &body[i + 8..end]));
        i = end;
    }
    anyhow::ensure!(!records.is_empty(), "the recorded capture has no packets");
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
