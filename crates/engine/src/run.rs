//! Drive a sans-IO estimator with real trains over a session: the thin I/O layer under
//! `mgrp estimate`.

use crate::client::Session;
use crate::Error;
use mgrp_estimate::{Estimate, Estimator};
use std::time::{Duration, Instant};

/// What the driver reports after each train.
#[derive(Debug, Clone)]
pub struct Progress {
    pub trains: u32,
    pub probe_bytes: u64,
    pub elapsed: Duration,
    pub estimate: Option<Estimate>,
    pub flagged: bool,
    /// The host stole CPU while this train was out (SLoPS sends such a stream again when the
    /// stall batched its stamps: `compressed` below).
    pub stolen: bool,
    /// This train: probes, its planned rate (bit/s on the wire, 0 for a single probe), probes
    /// lost, and how long sending it and waiting for its report took.
    pub probes: usize,
    pub rate_bps: f64,
    pub lost: usize,
    pub train_time: Duration,
    /// Arrivals closer than the bottleneck (the estimator's capacity, once it has one) can
    /// deliver them ([`mgrp_estimate::TrainResult::compressed_pairs`]).
    pub compressed: usize,
}

/// Run `est` until it is done, `deadline` passes or `stop()` says so, calling `progress` after
/// every train. Returns the last estimate.
pub fn run_estimator(
    session: &mut Session,
    est: &mut dyn Estimator,
    deadline: Instant,
    mut stop: impl FnMut() -> bool,
    mut progress: impl FnMut(&Progress),
) -> Result<Option<Estimate>, Error> {
    let t0 = Instant::now();
    let (mut trains, mut bytes) = (0u32, 0u64);
    while !est.is_done() && Instant::now() < deadline && !stop() {
        let now = mgrp_clock::now_ns();
        match est.poll_train(now) {
            Some(req) => {
                let sent_at = Instant::now();
                let r = session.send_train(&req)?;
                let train_time = sent_at.elapsed();
                trains += 1;
                // What left: probes an elastic train left out were never sent (a schedule
                // that paid for them paced elastic rounds ~3× slower than their bytes).
                let skipped = r.riders.map_or(0, |x| x.skipped_bytes);
                bytes += req.bytes().saturating_sub(skipped);
                let compressed = est
                    .capacity()
                    .map_or(0, |c| r.compressed_pairs(c.value_bps));
                let now = mgrp_clock::now_ns();
                est.handle_train(now, &r);
                if !est.is_done() {
                    // Riders wait for the next train rather than leave just before it.
                    session.expect_next_train(est.next_wakeup().unwrap_or(now).max(now));
                }
                progress(&Progress {
                    trains,
                    probe_bytes: bytes,
                    elapsed: t0.elapsed(),
                    estimate: est.estimate(),
                    flagged: r.stats.flagged,
                    stolen: r.stats.stolen(),
                    probes: req.probes.len(),
                    rate_bps: req.mean_rate_bps(),
                    lost: r.lost(),
                    train_time,
                    compressed,
                });
            }
            None => {
                // Sleep until the estimator's next wakeup (in short slices, to see `stop`).
                let wake = est.next_wakeup().unwrap_or(now + 10_000_000);
                let wait = wake.saturating_sub(now).clamp(100_000, 20_000_000);
                std::thread::sleep(Duration::from_nanos(wait));
            }
        }
    }
    // Riders held for a next train that will not come leave now, not after T.
    session.release_riders();
    Ok(est.estimate())
}

/// What a TCP-available run measured.
#[derive(Debug, Clone)]
pub struct TcpAvailRun {
    pub estimate: Option<Estimate>,
    /// Why it stopped: `stable`, `max time`, `budget`, `flow ended`, `stopped`.
    pub why: &'static str,
    /// Goodput over the whole measured part, bits/s.
    pub mean_bps: Option<f64>,
    pub load: crate::load::LoadReport,
}

/// Measure TCP-available bandwidth: turn `session` into a bulk TCP flow to the peer agent (on
/// congestion control `cc`, the host's default if `None`) and let the sans-IO judge
/// ([`mgrp_estimate::tcp_avail`]) say when it has seen enough. Samples `TCP_INFO` between
/// slices (sleeping is fine here: a flow, not a train); `progress` sees each running estimate.
pub fn run_tcp_avail(
    session: Session,
    p: &mgrp_estimate::tcp_avail::TcpAvailParams,
    cc: Option<&str>,
    mut stop: impl FnMut() -> bool,
    mut progress: impl FnMut(&Estimate),
) -> Result<TcpAvailRun, Error> {
    use mgrp_estimate::tcp_avail::{FlowSample, TcpAvail};
    p.validate().map_err(Error::BadInput)?;
    let mut judge = TcpAvail::new(*p);
    // A little past the judge's own limit, so the judge (not the flow's timer) ends it.
    let max = Duration::from_nanos(p.max_time_ns) + Duration::from_secs(1);
    let flow = session.into_load(max, p.budget_bytes, cc)?;
    // The flow's clock starts within microseconds of this one; the judge's times are the flow's.
    let t0 = Instant::now();
    let mut why = None;
    while judge.done().is_none() {
        if stop() {
            why = Some("stopped");
            break;
        }
        match flow.sample() {
            Ok(s) => {
                let seen = judge.estimate(s.bytes_acked).map(|e| e.value_bps);
                judge.handle_sample(FlowSample {
                    now_ns: (s.t_s * 1e9) as u64,
                    bytes_acked: s.bytes_acked,
                    slow_start: s.slow_start,
                });
                if let Some(e) = judge.estimate(s.bytes_acked) {
                    if seen != Some(e.value_bps) {
                        progress(&e);
                    }
                }
                if flow.finished() {
                    judge.handle_end();
                }
            }
            Err(_) => judge.handle_end(),
        }
        let last_ns = judge.next_sample_at().unwrap_or(0);
        let now_ns = t0.elapsed().as_nanos() as u64;
        std::thread::sleep(Duration::from_nanos(
            last_ns.saturating_sub(now_ns).clamp(1_000_000, 100_000_000),
        ));
    }
    let mean_bps = judge.mean_bps();
    let load = flow.stop();
    Ok(TcpAvailRun {
        estimate: judge.estimate(load.bytes_acked),
        why: why.or(judge.done()).unwrap_or("stopped"),
        mean_bps,
        load,
    })
}
