//! `mgrp testbed run`: build (or attach to) the default testbed, run cross traffic, read the
//! ground truth in bins, optionally estimate beside it or run the service with its dashboard,
//! and tear down. What happens is told as [`Event`]s while it runs; the whole is the [`RunReport`].

use crate::dashboard_run::DashboardRun;
use crate::live_estimate::{LiveEstimates, Measured, Row};
use crate::{ensure, Hooks, Result};
use mgrp_estimate::methods::Method;
use mgrp_testbed::delayline::DelayStats;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, GenReport, BASE_PORT};
use mgrp_testbed::rtt::{measure_rtt, RttStats};
use mgrp_testbed::truth::Bin;
use mgrp_testbed::{
    CrossPattern, DelayMode, LinkCapacity, Testbed, TestbedConfig, Truth, TruthSampler,
};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MINUTE_NS: u64 = 60_000_000_000;

#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The testbed to build (ignored with `on`).
    pub testbed: TestbedConfig,
    /// Run on this existing testbed instead; it stays up.
    pub on: Option<String>,
    pub cross: Vec<CrossPattern>,
    pub duration: Duration,
    /// Ground-truth bin width in the series.
    pub bin: Duration,
    /// Row width of the live table.
    pub report_every: Duration,
    /// Spin before each UDP departure this long instead of sleeping.
    pub spin: Duration,
    /// Pings across the path to report RTT (0 = skip).
    pub pings: u32,
    /// Estimate from snd with this method, beside the truth.
    pub estimate: Option<Method>,
    /// Run the service with its dashboard and HTTP API here.
    pub dashboard: Option<SocketAddr>,
    pub dashboard_method: Method,
    /// Track the path from snd as the service does (`mgrp_service::track::PacedTracker`, 2%
    /// ceiling) and print each estimate beside the truth and the probe load of the minute
    /// before it.
    pub track: bool,
}

/// Checks shared by every kind of run (default path and topology).
pub fn check_times(duration: Duration, bin: Duration, report_every: Duration) -> Result<()> {
    ensure(
        !duration.is_zero() && duration <= Duration::from_secs(24 * 3600),
        "--duration must be between 1ms and 24h",
    )?;
    ensure(
        bin >= Duration::from_millis(10) && report_every >= bin,
        "--bin must be at least 10ms and --report-every at least --bin",
    )
}

/// What a run tells while it runs, in this order.
pub enum Event<'a> {
    /// The testbed is up (or attached).
    Up(&'a Testbed),
    Rtt(&'a RttStats),
    /// The dashboard is served at this URL.
    Dashboard(String),
    /// Cross traffic runs; rows follow.
    Started,
    /// One row of the live table: the truth over `[from_s, to_s)` of the run, and what the
    /// patterns were configured to send then (if every pattern has a rate).
    Bin {
        from_s: f64,
        to_s: f64,
        bin: &'a Bin,
        configured_bps: Option<f64>,
    },
    Estimate(&'a Row),
    /// The service's counters when it stopped.
    Service(mgrp_service::CounterSnapshot),
    /// Something went wrong on the side; the run goes on.
    Warning(String),
}

#[derive(Serialize)]
pub struct RunReport {
    pub testbed: String,
    pub config: TestbedConfig,
    /// The bottleneck's configured and measured capacity (the truth uses the measured one).
    pub capacity: LinkCapacity,
    /// With an estimate: the capacity measured again after the run. The host's CPU steal moves a
    /// flood's drain by a few percent between two measurements, so an estimate is judged against
    /// both.
    pub capacity_after: Option<LinkCapacity>,
    /// What the bottleneck drained whenever it had a backlog during the run.
    pub run_drain: Option<mgrp_testbed::capacity::Drain>,
    pub rtt: Option<RttStats>,
    pub delay_line: Option<DelayStats>,
    /// The loss line's counters: packets seen, lost, the achieved `loss_rate`.
    pub loss_line: Option<DelayStats>,
    pub cross: Vec<CrossPattern>,
    pub generators: Vec<GenReport>,
    /// Ground truth over the whole run.
    pub summary: Option<Bin>,
    pub bin_s: f64,
    /// CLOCK_MONOTONIC ns at t = 0 of the bins.
    pub origin_ns: u64,
    pub bins: Vec<Bin>,
    /// Estimates beside the ground truth of their windows (with an estimate method).
    pub estimates: Vec<Row>,
    pub interrupted: bool,
    /// CLOCK_MONOTONIC ns at t = 0 of the live table (the cross traffic's start).
    #[serde(skip)]
    pub start_ns: u64,
}

/// Estimates that came back, held until the sampler has passed the end of their window.
struct Pending {
    held: Vec<Measured>,
    capacity_bps: f64,
    start_ns: u64,
}

impl Pending {
    /// With the estimates `new`ly back, rows for those whose window `truth` covers (all of
    /// them when `finished`; an estimate whose window has no truth is left out).
    fn take(
        &mut self,
        new: impl IntoIterator<Item = Measured>,
        truth: &Truth,
        finished: bool,
    ) -> Vec<Row> {
        self.held.extend(new);
        let covered = truth.samples.last().map_or(0, |s| s.t_ns);
        let (ready, wait): (Vec<_>, Vec<_>) = self
            .held
            .drain(..)
            .partition(|m| m.end_ns <= covered || finished);
        self.held = wait;
        ready
            .iter()
            .filter_map(|m| {
                let truth_bps = if m.kind == "capacity" {
                    self.capacity_bps
                } else {
                    truth.window(m.start_ns, m.end_ns)?.avail_bps
                };
                let mut row = Row::new(m, truth_bps, self.start_ns);
                if m.kind == "tracked" {
                    // The probe load as the bottleneck counted it over the minute before this
                    // estimate (before the first minute is over: what went since the start,
                    // still over a minute): what the ceiling bounds.
                    let from = m.end_ns.saturating_sub(MINUTE_NS).max(self.start_ns);
                    let span = m.end_ns.saturating_sub(from) as f64 / MINUTE_NS as f64;
                    row.load_share = truth
                        .window(from, m.end_ns)
                        .map(|w| w.offered_fg_bps * span / self.capacity_bps);
                }
                Some(row)
            })
            .collect()
    }
}

impl RunConfig {
    pub fn check(&self) -> Result<()> {
        check_times(self.duration, self.bin, self.report_every)
    }
}

/// Run it: `on_event` hears what happens as it happens (see [`Event`]).
pub fn run(cfg: &RunConfig, hooks: Hooks, on_event: &mut dyn FnMut(Event)) -> Result<RunReport> {
    cfg.check()?;
    let tb = match &cfg.on {
        Some(name) => {
            mgrp_testbed::netns::check_privileges()?;
            Testbed::attach(name)?
        }
        None => Testbed::up(cfg.testbed.clone(), DelayMode::Thread)?,
    };
    on_event(Event::Up(&tb));
    let rtt = if cfg.pings > 0 {
        Some(measure_rtt(&tb, cfg.pings)?)
    } else {
        None
    };
    if let Some(r) = &rtt {
        on_event(Event::Rtt(r));
    }
    let patterns = &cfg.cross;
    let sampler = TruthSampler::start(&tb, cfg.bin)?;
    // Estimates are judged against this truth: a source that fell behind skips what it owes
    // rather than bursting it (`GenOptions::max_late`).
    let judged = cfg.estimate.is_some() || cfg.track || cfg.dashboard.is_some();
    let opts = GenOptions {
        spin: cfg.spin,
        max_duration: cfg.duration + Duration::from_secs(1),
        max_late: judged.then_some(mgrp_testbed::generator::DEFAULT_MAX_LATE),
        ..Default::default()
    };
    let mut gens = Vec::new();
    for (i, p) in patterns.iter().enumerate() {
        gens.push(CrossTraffic::start(&tb, p, BASE_PORT + i as u16, &opts)?);
    }
    let start = mgrp_testbed::clock::now_ns();
    let live = match cfg.estimate {
        _ if cfg.track => Some(LiveEstimates::start_tracking(
            &tb,
            Instant::now() + cfg.duration,
        )?),
        Some(method) => Some(LiveEstimates::start(
            &tb,
            method,
            Instant::now() + cfg.duration,
        )?),
        None => None,
    };
    let dash = match cfg.dashboard {
        Some(addr) => {
            let d = DashboardRun::start(&tb, addr, cfg.dashboard_method)?;
            on_event(Event::Dashboard(d.url()));
            Some(d)
        }
        None => None,
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut pending = Pending {
        held: Vec::new(),
        capacity_bps: tb.capacity().bps(),
        start_ns: start,
    };
    on_event(Event::Started);
    let step = cfg.report_every.as_nanos() as u64;
    let end = start + cfg.duration.as_nanos() as u64;
    let mut next = start + step;
    let all_rated = !patterns.is_empty() && patterns.iter().all(|p| p.mean_rate_bps().is_some());
    while next <= end && !hooks.stopped() {
        // Sleep in slices so a stop is seen; rows come once the sampler has passed their end.
        while mgrp_testbed::clock::now_ns() < next + cfg.bin.as_nanos() as u64 && !hooks.stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let truth = sampler.truth();
        if let Some(b) = truth.window(next - step, next) {
            let t = Duration::from_nanos(next - step - start);
            let configured = all_rated.then(|| patterns.iter().filter_map(|p| p.rate_at(t)).sum());
            on_event(Event::Bin {
                from_s: (next - step - start) as f64 / 1e9,
                to_s: (next - start) as f64 / 1e9,
                bin: &b,
                configured_bps: configured,
            });
        }
        if let Some(l) = &live {
            for r in pending.take(l.results.try_iter(), &truth, false) {
                on_event(Event::Estimate(&r));
                rows.push(r);
            }
        }
        if let Some(d) = &dash {
            // Ground truth in 1 s windows (or the row's, if shorter), whatever the row width.
            let sub = step.min(1_000_000_000);
            let mut t = next - step;
            while t + sub <= next {
                if let Some(b) = truth.window(t, t + sub) {
                    // Sampler times are monotonic; the store keeps wall-clock time.
                    let ago = mgrp_testbed::clock::now_ns().saturating_sub(t + sub);
                    let at = mgrp_testbed::clock::realtime_ns().saturating_sub(ago);
                    if let Err(e) = d.truth(at, sub as f64 / 1e9, b.avail_bps) {
                        on_event(Event::Warning(e.to_string()));
                    }
                }
                t += sub;
            }
        }
        next += step;
    }
    if let Some(d) = dash {
        on_event(Event::Service(d.stop()));
    }
    let interrupted = hooks.stopped();
    if let Some(l) = &live {
        l.halt();
    }
    let stop_at = mgrp_testbed::clock::now_ns().min(end);
    let mut reports = Vec::new();
    for g in gens {
        reports.push(g.stop()?);
    }
    let truth = sampler.stop()?;
    if let Some(l) = live {
        for r in pending.take(l.results.try_iter(), &truth, true) {
            on_event(Event::Estimate(&r));
            rows.push(r);
        }
        if let Err(e) = l.stop() {
            on_event(Event::Warning(format!("the estimator stopped early: {e}")));
        }
    }
    let capacity_after = match cfg.estimate.or(cfg.track.then_some(Method::Auto)) {
        Some(_) if tb.capacity().measured_bps.is_some() && !interrupted => {
            match tb.measure_capacity() {
                Ok(c) => Some(c),
                Err(e) => {
                    on_event(Event::Warning(format!(
                        "measuring capacity after the run: {e}"
                    )));
                    None
                }
            }
        }
        _ => None,
    };
    Ok(RunReport {
        testbed: tb.name().into(),
        config: tb.config().clone(),
        capacity: tb.capacity(),
        capacity_after,
        run_drain: truth.drain(),
        rtt,
        delay_line: tb.delay_stats(),
        loss_line: tb.loss_stats(),
        cross: patterns.clone(),
        generators: reports,
        summary: truth.window(start, stop_at),
        bin_s: cfg.bin.as_secs_f64(),
        origin_ns: truth.origin_ns,
        bins: truth.bins(cfg.bin),
        estimates: rows,
        interrupted,
        start_ns: start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_estimate::{Estimate, Quality};
    use mgrp_testbed::truth::Sample;

    /// 10 Mbit/s of cross traffic on a 20 Mbit/s bottleneck, sampled every 100 ms for 1 s.
    fn truth() -> Truth {
        Truth {
            capacity_bps: 20e6,
            configured_capacity_bps: 20e6,
            origin_ns: 0,
            samples: (0..=10u64)
                .map(|i| Sample {
                    t_ns: i * 100_000_000,
                    cross_bytes: i * 125_000,
                    ..Sample::default()
                })
                .collect(),
        }
    }

    fn measured(kind: &'static str, start_ms: u64, end_ms: u64, value: f64) -> Measured {
        Measured {
            kind,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            estimate: Estimate {
                value_bps: value,
                low_bps: value,
                high_bps: value,
                final_: true,
                quality: Quality {
                    method: "chirp",
                    elapsed_s: 0.1,
                    probe_bytes: 1000,
                    trains: 1,
                    confidence: 1.0,
                    timescale_ms: None,
                },
            },
        }
    }

    #[test]
    fn estimates_wait_for_the_truth_of_their_window() {
        let mut p = Pending {
            held: Vec::new(),
            capacity_bps: 19e6,
            start_ns: 200_000_000,
        };
        let mut t = truth();
        t.samples.truncate(6); // sampled up to 500 ms
        let new = [
            measured("available", 200, 400, 12e6),
            measured("available", 400, 900, 9e6),
        ];
        let rows = p.take(new, &t, false);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert!((r.truth_bps - 10e6).abs() < 1.0, "{}", r.truth_bps);
        assert!((r.rel_error - 0.2).abs() < 1e-6, "{}", r.rel_error);
        assert!((r.start_s - 0.0).abs() < 1e-9 && (r.end_s - 0.2).abs() < 1e-9);
        // The second waits, then comes once the sampler has passed its end.
        assert_eq!(p.held.len(), 1);
        let rows = p.take([], &truth(), false);
        assert_eq!(rows.len(), 1);
        assert!(p.held.is_empty());
    }

    #[test]
    fn capacity_is_held_against_the_measured_capacity_and_finishing_flushes() {
        let mut p = Pending {
            held: Vec::new(),
            capacity_bps: 19e6,
            start_ns: 0,
        };
        let mut t = truth();
        t.samples.truncate(2);
        let rows = p.take([measured("capacity", 0, 5_000, 19.5e6)], &t, true);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].truth_bps, 19e6);
        assert!(p.held.is_empty());
    }

    #[test]
    fn times_are_checked() {
        let ok = Duration::from_secs(1);
        assert!(check_times(ok, Duration::from_millis(100), ok).is_ok());
        assert!(check_times(Duration::ZERO, Duration::from_millis(100), ok).is_err());
        assert!(check_times(ok, Duration::from_millis(5), ok).is_err());
        let e = check_times(ok, ok, Duration::from_millis(500)).unwrap_err();
        assert!(e.to_string().contains("--report-every"), "{e}");
    }
}
