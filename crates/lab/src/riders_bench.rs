//! `mgrp bench riders`: the seed's microbenchmark (seed 000 §5.1) on the testbed. A 10 Mbit/s
//! bottleneck with about 40 ms of RTT, a 4 Mbit/s TCP source (rate-limited writes) opted in to
//! riders, STEP (1,3,5,6,4,2 Mbit/s), steady CBR or web-like TCP cross traffic, probing with
//! SLoPS (pSLOW, pFAST), one-shot `auto` back to back, or the seed's fixed trains pk1/pk2/pk3 —
//! riders off and on.

use crate::rig::agent_at_rcv_with;
use crate::{Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
pub use mgrp_engine::riders::ElasticConfig;
use mgrp_engine::riders::{RiderConfig, RiderSender};
use mgrp_engine::run::run_estimator;
use mgrp_engine::train::TrainSpec;
use mgrp_estimate::auto::{Auto, AutoParams};
use mgrp_estimate::riders::RiderAware;
use mgrp_estimate::slops::{Pace, Slops, SlopsParams};
use mgrp_estimate::stats::quantile;
use mgrp_estimate::Estimator;
use mgrp_shim::route::OptIn;
use mgrp_testbed::app::{AppFlow, AppPattern};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SOURCE_PORT: u16 = 5300;
const SOURCE_BPS: f64 = 4e6;
/// The source's rate on the bottleneck (full-size segments: 1448 bytes of payload in 1514 on
/// the wire), the unit of the truth's counters and of the estimates; the truth uses the rate
/// the source achieved over each measurement, this where none was sampled.
const SOURCE_WIRE_BPS: f64 = SOURCE_BPS * 1514.0 / 1448.0;

#[derive(Debug, Clone)]
pub struct RidersConfig {
    /// Probing: pslow, pfast (SLoPS measurements back to back), auto (one-shot `auto`
    /// estimates back to back), pk1, pk2, pk3 (fixed trains).
    pub probes: Vec<String>,
    /// Cross traffic: step (UDP 1,3,5,6,4,2 Mbit/s), web (TCP flows of random-size messages
    /// at random times) and/or cbr:N (steady UDP at N Mbit/s, 0 < N < 6: a truth that does not
    /// move under a measurement, so the estimates can be judged without riders too).
    pub cross: Vec<String>,
    /// Seconds per STEP level (the seed used 45; 6 levels per run), and the run length for web.
    pub step_secs: f64,
    /// Payload buffer timeout T.
    pub hold: Duration,
    /// Share of each train, from its start, that may carry riders.
    pub ratio: f64,
    /// Give up a SLoPS measurement after this long (the seed's 60 s timeout).
    pub timeout: Duration,
    /// Also run riders on with elastic trains (seed 000 §8.3) configured so.
    pub elastic: Option<ElasticConfig>,
    /// Runs of each configuration.
    pub runs: usize,
}

#[derive(Serialize, Clone, Default)]
pub struct Row {
    pub cross: String,
    pub probe: String,
    pub riders: bool,
    /// Riders on with elastic trains.
    pub elastic: bool,
    /// Which run of the configuration (from 1).
    pub run: usize,
    pub secs: f64,
    /// Bytes of probes that carried no rider (the seed's "probe (nopbk)"): with riders off, every
    /// probe byte.
    pub probe_only_bytes: u64,
    /// Probe bytes not filled by rider data (empty probes, plus headers and padding left over
    /// in probes that carried a rider).
    pub overhead_bytes: u64,
    pub probe_bytes: u64,
    pub rider_bytes: u64,
    /// Rider bytes over the probes' padding (probe bytes minus headers).
    pub padding_filled: f64,
    pub standalone_fragments: u64,
    pub source_median_mbit: f64,
    /// Share of 1 s bins in which the source delivered less than 95% of its 4 Mbit/s.
    pub source_below_pct: f64,
    pub cross_mbit: f64,
    pub measurements: usize,
    pub completed: usize,
    pub completion_median_s: Option<f64>,
    /// |estimate − truth| / truth, medians over completed SLoPS measurements.
    pub err_adjusted: Option<f64>,
    pub err_unadjusted: Option<f64>,
    /// Median delay riders and held packets spent in the payload buffer, µs.
    pub buffer_delay_p50_us: Option<f64>,
    pub buffer_delay_p99_us: Option<f64>,
    /// Probes elastic trains left out, and their bytes (never sent; not in `probe_bytes`).
    pub skipped_probes: u64,
    pub skipped_bytes: u64,
    /// Time elastic trains waited for riders, in all.
    pub wait_ms: f64,
    /// Per completed measurement: |estimate − truth| / truth, adjusted and not (to pool runs).
    pub errs_adjusted: Vec<f64>,
    pub errs_unadjusted: Vec<f64>,
    /// Per completed measurement: (adjusted, unadjusted, truth) in Mbit/s, to see which way
    /// the errors go.
    pub readings_mbit: Vec<(Option<f64>, Option<f64>, f64)>,
}

/// The seed's pktrain configurations (seed 002 Table 1): size, probes, gap, train gap.
fn pk(name: &str) -> Option<(u16, usize, u64, Duration)> {
    match name {
        "pk1" => Some((300, 10, 200_000, Duration::from_millis(20))),
        "pk2" => Some((500, 20, 1_000_000, Duration::from_millis(20))),
        "pk3" => Some((300, 10, 0, Duration::from_millis(10))),
        _ => None,
    }
}

struct Measured {
    start_ns: u64,
    end_ns: u64,
    adjusted: Option<f64>,
    unadjusted: Option<f64>,
    done: bool,
}

struct ProbeOutcome {
    probe_bytes: u64,
    empty_bytes: u64,
    rider_bytes: u64,
    padding_bytes: u64,
    standalone: u64,
    skipped: (u64, u64),
    wait_us: u64,
    measurements: Vec<Measured>,
    delay_us: (Option<f64>, Option<f64>),
}

/// Probe from snd until `stop`: SLoPS measurements back to back, or fixed trains.
fn probe_loop(
    probe: &str,
    peer: SocketAddr,
    key: &Key,
    riders: Option<Arc<RiderSender>>,
    stop: &AtomicBool,
    timeout: Duration,
) -> Result<ProbeOutcome> {
    let pacer = Arc::new(Pacer::spawn()?);
    let mark = riders.as_ref().map(|_| mgrp_shim::BYPASS_MARK);
    let mut s = Session::connect_marked(peer, key, pacer, Duration::from_secs(3), mark)?;
    if let Some(r) = &riders {
        s = s.with_riders(r.clone());
    }
    let mut out = ProbeOutcome {
        probe_bytes: 0,
        empty_bytes: 0,
        rider_bytes: 0,
        padding_bytes: 0,
        standalone: 0,
        skipped: (0, 0),
        wait_us: 0,
        measurements: Vec::new(),
        delay_us: (None, None),
    };
    let header = mgrp_wire::probe::HEADER_LEN as u64;
    if let Some((size, count, gap, train_gap)) = pk(probe) {
        let mut spec = TrainSpec::uniform(count, size, gap);
        for p in &mut spec.probes {
            p.may_carry = true;
        }
        while !stop.load(Ordering::Relaxed) {
            s.send_train(&spec)?;
            out.probe_bytes += spec.bytes();
            out.padding_bytes += spec
                .probes
                .iter()
                .map(|p| p.size as u64 - header)
                .sum::<u64>();
            s.expect_next_train(mgrp_clock::now_ns() + train_gap.as_nanos() as u64);
            std::thread::sleep(train_gap);
        }
    } else {
        let pace = match probe {
            "pslow" => Some(Pace::Slow),
            "pfast" => Some(Pace::Fast),
            "auto" => None,
            other => {
                return Err(Error::Config(format!(
                    "unknown probing {other:?}: pslow, pfast, auto, pk1, pk2, pk3"
                )))
            }
        };
        while !stop.load(Ordering::Relaxed) {
            let m = match pace {
                Some(pace) => measure(
                    &mut s,
                    RiderAware::new(Slops::new(SlopsParams::for_capacity(10e6, pace))),
                    &mut out,
                    stop,
                    timeout,
                )?,
                // One-shot `auto` as `mgrp estimate` runs it (capacity measured each time).
                None => measure(
                    &mut s,
                    RiderAware::new(Auto::new(AutoParams::default())),
                    &mut out,
                    stop,
                    timeout,
                )?,
            };
            out.measurements.push(m);
        }
    }
    out.empty_bytes = out.probe_bytes;
    if let Some(r) = &riders {
        let c = r.counters();
        out.empty_bytes = c.empty_bytes;
        out.rider_bytes = c.rider_bytes;
        out.standalone = c.standalone_fragments;
        // Probes an elastic train left out were asked for, not sent.
        out.skipped = (c.elastic_skipped, c.elastic_skipped_bytes);
        out.wait_us = c.elastic_wait_us;
        out.probe_bytes = out.probe_bytes.saturating_sub(c.elastic_skipped_bytes);
        out.padding_bytes = out.padding_bytes.saturating_sub(
            c.elastic_skipped_bytes
                .saturating_sub(c.elastic_skipped * header),
        );
        if let Some(b) = r.buffer_counters() {
            out.delay_us = (b.delay_quantile_us(0.5), b.delay_quantile_us(0.99));
        }
    }
    Ok(out)
}

/// One measurement to its end (or `stop`, or `timeout`); its probe bytes and padding are added
/// to `out`.
fn measure<E: Estimator>(
    s: &mut Session,
    mut est: RiderAware<E>,
    out: &mut ProbeOutcome,
    stop: &AtomicBool,
    timeout: Duration,
) -> Result<Measured> {
    let start_ns = mgrp_clock::now_ns();
    let mut counted = Counted {
        inner: &mut est,
        bytes: 0,
        padding: 0,
        riders: 0,
    };
    let last = run_estimator(
        s,
        &mut counted,
        Instant::now() + timeout,
        || stop.load(Ordering::Relaxed),
        |_| {},
    );
    out.probe_bytes += counted.bytes;
    out.padding_bytes += counted.padding;
    last?;
    Ok(Measured {
        start_ns,
        end_ns: mgrp_clock::now_ns(),
        adjusted: est.estimate().map(|e| e.value_bps),
        unadjusted: est.uncorrected().map(|e| e.value_bps),
        done: est.is_done(),
    })
}

/// Counts the probe bytes and padding of the trains an estimator sends.
struct Counted<'a, E: Estimator> {
    inner: &'a mut E,
    bytes: u64,
    padding: u64,
    riders: u64,
}

impl<E: Estimator> Estimator for Counted<'_, E> {
    fn poll_train(&mut self, now_ns: u64) -> Option<mgrp_estimate::TrainSpec> {
        let t = self.inner.poll_train(now_ns)?;
        self.bytes += t.bytes();
        self.padding += t
            .probes
            .iter()
            .map(|p| (p.size as u64).saturating_sub(mgrp_wire::probe::HEADER_LEN as u64))
            .sum::<u64>();
        Some(t)
    }
    fn handle_train(&mut self, now_ns: u64, obs: &mgrp_estimate::TrainResult) {
        self.riders += obs.competing_bytes();
        self.inner.handle_train(now_ns, obs)
    }
    fn estimate(&self) -> Option<mgrp_estimate::Estimate> {
        self.inner.estimate()
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn next_wakeup(&self) -> Option<u64> {
        self.inner.next_wakeup()
    }
}

/// Riders off, on, or on with elastic trains.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Off,
    On,
    Elastic,
}

fn run_one(
    a: &RidersConfig,
    cross: &str,
    probe: &str,
    mode: Mode,
    run: usize,
    hooks: Hooks,
) -> Result<Row> {
    let riders_on = mode != Mode::Off;
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: 10_000_000,
            delay: Some(Duration::from_millis(40)),
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    let key = Key::random();
    let (agent, listen) = agent_at_rcv_with(&tb, &key, riders_on.then(|| "mgrp1".to_string()))?;
    // Riders first: the source's connection then takes the TUN route from its first packet.
    let sender = if riders_on {
        let cfg = RiderConfig {
            opt_in: vec![OptIn::TcpPort(SOURCE_PORT)],
            hold: a.hold,
            ratio: a.ratio,
            elastic: if mode == Mode::Elastic {
                a.elastic
            } else {
                None
            },
            ..RiderConfig::default()
        };
        let k = key.clone();
        Some(Arc::new(
            spawn_in(&tb.ns(Role::Snd), "riders", move || {
                RiderSender::start(&cfg, k).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
            })?
            .join()
            .map_err(|_| Error::Worker("riders thread panicked".into()))??,
        ))
    } else {
        None
    };
    let secs = a.step_secs * 6.0;
    let source = AppFlow::start(
        &tb,
        Role::Snd,
        Role::Rcv,
        SOURCE_PORT,
        // 5000-byte writes every 10 ms: 4 Mbit/s that does not adapt.
        AppPattern::parse("msgs:5000b,every=10ms").map_err(cfg_err)?,
        Some("cubic".into()),
        Duration::from_secs_f64(secs + 30.0),
    )?;
    std::thread::sleep(Duration::from_secs(1));
    let sampler = TruthSampler::start(&tb, Duration::from_millis(100))?;
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 5.0),
        ..GenOptions::default()
    };
    let mut udp_cross = Vec::new();
    let mut web = Vec::new();
    match cross {
        "step" => {
            let p = CrossPattern::parse(&format!(
                "step:1,3,5,6,4,2mbit,every={}ms",
                (a.step_secs * 1000.0) as u64
            ))
            .map_err(cfg_err)?;
            udp_cross.push(CrossTraffic::start(&tb, &p, BASE_PORT, &opts)?);
        }
        "web" => {
            // Two TCP flows of random-size messages (mean 36 kB) at random times, about
            // 3.8 Mbit/s offered: with the 4 Mbit/s source the path is mostly but not always busy.
            for i in 0..2u16 {
                web.push(AppFlow::start(
                    &tb,
                    Role::Xsnd,
                    Role::Xrcv,
                    BASE_PORT + 100 + i,
                    AppPattern::parse(&format!("irregular:32kb,every=150ms,seed={}", i + 1))
                        .map_err(cfg_err)?,
                    Some("cubic".into()),
                    Duration::from_secs_f64(secs + 5.0),
                )?);
            }
        }
        other => {
            let mbit = steady_cbr(other)?;
            let p = CrossPattern::parse(&format!("cbr:{}kbit", (mbit * 1e3).round() as u64))
                .map_err(cfg_err)?;
            udp_cross.push(CrossTraffic::start(&tb, &p, BASE_PORT, &opts)?);
        }
    }
    let t0 = mgrp_testbed::clock::now_ns();
    let stop = Arc::new(AtomicBool::new(false));
    let (st, k, p, rs, timeout) = (
        stop.clone(),
        key.clone(),
        probe.to_string(),
        sender.clone(),
        a.timeout,
    );
    let prober = spawn_in(&tb.ns(Role::Snd), "prober", move || {
        probe_loop(&p, listen, &k, rs, &st, timeout)
            .map_err(|e| mgrp_testbed::Error::Setup(format!("{e:#}")))
    })?;
    // Source throughput in 1 s bins at the receiver, and its delivered bytes every 100 ms
    // (for the truth over each measurement).
    let mut bins = Vec::new();
    let mut delivered: Vec<(u64, u64)> =
        vec![(mgrp_testbed::clock::now_ns(), source.received_bytes())];
    let mut last = source.received_bytes();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tick = 0u32;
    while Instant::now() < end && !hooks.stopped() {
        std::thread::sleep(Duration::from_millis(100));
        let now = source.received_bytes();
        delivered.push((mgrp_testbed::clock::now_ns(), now));
        tick += 1;
        if tick % 10 == 0 {
            bins.push((now - last) as f64 * 8.0);
            last = now;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let outcome = prober
        .join()
        .map_err(|_| Error::Worker("prober panicked".into()))?
        .map_err(|e| Error::Worker(e.to_string()))?;
    let t1 = mgrp_testbed::clock::now_ns();
    for g in udp_cross {
        g.stop()?;
    }
    for w in web {
        w.stop()?;
    }
    source.stop()?;
    let truth = sampler.stop()?;
    drop(sender);
    drop(agent);
    let whole = truth
        .window(t0, t1)
        .ok_or_else(|| Error::Worker("no ground truth".into()))?;
    let mut errs_adj = Vec::new();
    let mut errs_raw = Vec::new();
    let mut readings = Vec::new();
    let mut durations = Vec::new();
    for m in outcome.measurements.iter().filter(|m| m.done) {
        durations.push((m.end_ns - m.start_ns) as f64 / 1e9);
        // Truth: what the path had left beside cross traffic and the source.
        if let Some(w) = truth.window(m.start_ns, m.end_ns) {
            // The source's own rate over the measurement, as delivered (it falls behind when
            // streams fill the queue, and catches up later).
            let source = delivered_rate(&delivered, m.start_ns, m.end_ns)
                .map_or(SOURCE_WIRE_BPS, |r| r * 1514.0 / 1448.0);
            let t = (w.avail_bps - source).max(0.05 * 10e6);
            if std::env::var_os("MGRP_DEBUG").is_some() {
                hooks.say(&format!(
                    "measurement {:.1}s: adjusted {:?} unadjusted {:?} truth {t:.0} (A {:.0}, cross {:.0}, fg {:.0})\n",
                    (m.end_ns - m.start_ns) as f64 / 1e9,
                    m.adjusted,
                    m.unadjusted,
                    w.avail_bps,
                    w.cross_bps,
                    w.offered_fg_bps
                ));
            }
            readings.push((
                m.adjusted.map(|v| v / 1e6),
                m.unadjusted.map(|v| v / 1e6),
                t / 1e6,
            ));
            if let Some(v) = m.adjusted {
                errs_adj.push((v - t).abs() / t);
            }
            if let Some(v) = m.unadjusted {
                errs_raw.push((v - t).abs() / t);
            }
        }
    }
    let below = bins.iter().filter(|b| **b < 0.95 * SOURCE_BPS).count();
    Ok(Row {
        cross: cross.into(),
        probe: probe.into(),
        riders: riders_on,
        elastic: mode == Mode::Elastic,
        run,
        secs,
        probe_only_bytes: outcome.empty_bytes,
        overhead_bytes: outcome.probe_bytes.saturating_sub(outcome.rider_bytes),
        probe_bytes: outcome.probe_bytes,
        rider_bytes: outcome.rider_bytes,
        padding_filled: outcome.rider_bytes as f64 / outcome.padding_bytes.max(1) as f64,
        standalone_fragments: outcome.standalone,
        source_median_mbit: quantile(&bins, 0.5).unwrap_or(0.0) / 1e6,
        source_below_pct: 100.0 * below as f64 / bins.len().max(1) as f64,
        cross_mbit: whole.cross_bps / 1e6,
        measurements: outcome.measurements.len(),
        completed: durations.len(),
        completion_median_s: quantile(&durations, 0.5),
        err_adjusted: quantile(&errs_adj, 0.5),
        err_unadjusted: quantile(&errs_raw, 0.5),
        buffer_delay_p50_us: outcome.delay_us.0,
        buffer_delay_p99_us: outcome.delay_us.1,
        skipped_probes: outcome.skipped.0,
        skipped_bytes: outcome.skipped.1,
        wait_ms: outcome.wait_us as f64 / 1e3,
        errs_adjusted: errs_adj,
        errs_unadjusted: errs_raw,
        readings_mbit: readings,
    })
}

impl RidersConfig {
    pub fn check(&self) -> Result<()> {
        crate::ensure(
            (1.0..=600.0).contains(&self.step_secs),
            "--step-secs must be 1..=600",
        )?;
        crate::ensure((0.0..=1.0).contains(&self.ratio), "--ratio must be 0..=1")?;
        crate::ensure((1..=50).contains(&self.runs), "--runs must be 1..=50")?;
        for p in &self.probes {
            crate::ensure(
                ["pslow", "pfast", "auto"].contains(&p.as_str()) || pk(p).is_some(),
                &format!("unknown probing {p:?}: pslow, pfast, auto, pk1, pk2, pk3"),
            )?;
        }
        for c in &self.cross {
            if c != "step" && c != "web" {
                steady_cbr(c)?;
            }
        }
        if let Some(e) = &self.elastic {
            e.validate().map_err(Error::Config)?;
        }
        Ok(())
    }
}

/// Every cross × probe pair, riders off, on (and elastic), `runs` times, runs interleaved;
/// stops (with the rows so far) when told to.
pub fn run(a: &RidersConfig, hooks: Hooks) -> Result<Vec<Row>> {
    a.check()?;
    let mut rows = Vec::new();
    let modes: &[Mode] = if a.elastic.is_some() {
        &[Mode::Off, Mode::On, Mode::Elastic]
    } else {
        &[Mode::Off, Mode::On]
    };
    let total = a.cross.len() * a.probes.len() * modes.len() * a.runs;
    for run in 1..=a.runs {
        for cross in &a.cross {
            for probe in &a.probes {
                for &mode in modes {
                    if hooks.stopped() {
                        return Ok(rows);
                    }
                    hooks.say(&format!(
                        "[{}/{total}] run {run}: {cross} × {probe}, riders {} ({:.0} s)\n",
                        rows.len() + 1,
                        match mode {
                            Mode::Off => "off",
                            Mode::On => "on",
                            Mode::Elastic => "on, elastic",
                        },
                        a.step_secs * 6.0
                    ));
                    rows.push(run_one(a, cross, probe, mode, run, hooks)?);
                }
            }
        }
    }
    Ok(rows)
}

/// The rate of a `cbr:N` cross traffic (Mbit/s). With the 4 Mbit/s source on the 10 Mbit/s
/// path, N ≥ 6 leaves no room to measure.
fn steady_cbr(name: &str) -> Result<f64> {
    let bad = || {
        Error::Config(format!(
            "unknown cross traffic {name:?}: step, web or cbr:N (N Mbit/s, 0 < N < 6)"
        ))
    };
    let n: f64 = name
        .strip_prefix("cbr:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(bad)?;
    if n > 0.0 && n < 6.0 {
        Ok(n)
    } else {
        Err(bad())
    }
}

/// Bits per second delivered between the samples nearest `from_ns` and `to_ns`.
fn delivered_rate(samples: &[(u64, u64)], from_ns: u64, to_ns: u64) -> Option<f64> {
    let near = |t: u64| samples.iter().min_by_key(|s| s.0.abs_diff(t)).copied();
    let (a, b) = (near(from_ns)?, near(to_ns)?);
    (b.0 > a.0).then(|| b.1.saturating_sub(a.1) as f64 * 8e9 / (b.0 - a.0) as f64)
}

fn cfg_err(e: impl std::fmt::Display) -> Error {
    Error::Config(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_cross_traffic_is_parsed_and_bounded() {
        let mut a = RidersConfig {
            probes: vec!["auto".into(), "pk2".into()],
            cross: vec!["cbr:3".into(), "step".into()],
            step_secs: 8.0,
            hold: Duration::from_millis(10),
            ratio: 1.0,
            timeout: Duration::from_secs(60),
            elastic: None,
            runs: 1,
        };
        a.check().unwrap();
        a.probes.push("pathload".into());
        assert!(a
            .check()
            .unwrap_err()
            .to_string()
            .contains("unknown probing"));
        assert_eq!(steady_cbr("cbr:3").unwrap(), 3.0);
        assert_eq!(steady_cbr("cbr:0.5").unwrap(), 0.5);
        for bad in [
            "cbr:0",
            "cbr:6",
            "cbr:-1",
            "cbr:x",
            "cbr",
            "poisson:3",
            "cbr:nan",
        ] {
            let e = steady_cbr(bad).unwrap_err().to_string();
            assert!(e.contains("cbr:N"), "{bad}: {e}");
        }
    }
}
