//! `mgrp bench tracking` (issue 13): the service keeping one path fresh, on the testbed, with
//! each method run continuously — `track` (the default: hold the estimate with short checks
//! under a 2% ceiling) against the classic tools' replicas run back to back (`slops-slow`,
//! `chirp`) and today's back-to-back `auto`. Figures per scenario: the probe load as a share
//! of C (counted at the bottleneck, control frames included), median and p90 error of the
//! stored estimates against the truth of the second before each, estimates per minute, and
//! for STEP cross traffic the time until the first estimate within 10% of a new level.

use crate::rig::agent_at_rcv_with;
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_service::config::ServiceConfig;
use mgrp_service::Service;
use mgrp_testbed::app::{AppFlow, AppPattern};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig, Truth, TruthSampler};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TrackingConfig {
    pub capacities_mbit: Vec<f64>,
    /// Cross traffic: step (CBR between 30% and 50% of C), stairs (the demo's six CBR levels,
    /// 10–60% of C), cbr, poisson (50% of C), onoff (30% of C on average, at 60% half the
    /// time), peaks (30% of C with peaks to 60%).
    pub kinds: Vec<String>,
    /// Methods: track, auto, chirp, slops-slow (and the other scheduled ones).
    pub methods: Vec<String>,
    /// Seconds per scenario (the issue asks 5 min).
    pub secs: f64,
    /// Run each scenario with a 4 Mbit/s application flow (TCP, snd → rcv) opted into riders
    /// instead of without one.
    pub app_flow: bool,
    /// With `app_flow`: the service's riders are elastic (`[riders] elastic = true`).
    pub elastic: bool,
    /// With `app_flow`: the agent's `[riders]` tuning (None: the agent's defaults): T, the
    /// longest a packet is held for a probe; and, elastic only, the longest a train waits for
    /// riders and the share of it that always leaves.
    pub hold: Option<Duration>,
    pub elastic_wait: Option<Duration>,
    pub elastic_share: Option<f64>,
    /// Cross sources send departures they are late for back to back (the bench's behaviour
    /// before 2026-11-28) instead of skipping those more than 1 ms late.
    pub send_late: bool,
}

/// What the riders carried over a run, and the delay holding added to the host's packets.
#[derive(Debug, Clone, Serialize)]
pub struct RiderStats {
    /// Bytes carried in probe padding.
    pub rider_bytes: u64,
    /// Bytes of probes that could carry a rider and left empty.
    pub empty_bytes: u64,
    /// Padding left unused in the probes that carried.
    pub spare_bytes: u64,
    /// Time the host's packets were held (as riders, standalone or expired), µs: median,
    /// p99, max.
    pub held_p50_us: Option<f64>,
    pub held_p99_us: Option<f64>,
    pub held_max_us: Option<u64>,
    /// Packets held at all, of those read from the TUN; of the held, those no probe took
    /// before their deadline (sent normally after T).
    pub held_packets: u64,
    pub expired_packets: u64,
    /// Of the held, those sent early because their measurement ended with no train expected.
    pub released_packets: u64,
    pub tun_packets: u64,
    /// Elastic trains that waited for riders, and their mean wait (µs).
    pub elastic_waits: u64,
    pub elastic_wait_mean_us: Option<f64>,
}

impl RiderStats {
    /// Bytes carried / (those + the bytes of probes that could carry and left empty + the
    /// padding left unused in those that carried). Until round 19 the last term was missing:
    /// with one rider a probe, probes smaller than the host's packets read 85–94% "rode"
    /// where a third of their padding went empty.
    pub fn rode_share(&self) -> Option<f64> {
        let offered = self.rider_bytes + self.empty_bytes + self.spare_bytes;
        (offered > 0).then(|| self.rider_bytes as f64 / offered as f64)
    }

    fn of(r: &mgrp_engine::riders::RiderSender) -> RiderStats {
        let k = r.counters();
        let b = r.buffer_counters().unwrap_or_default();
        RiderStats {
            rider_bytes: k.rider_bytes,
            empty_bytes: k.empty_bytes,
            spare_bytes: k.spare_bytes,
            held_p50_us: b.delay_quantile_us(0.5),
            held_p99_us: b.delay_quantile_us(0.99),
            held_max_us: b.delay.max_us(),
            held_packets: b.held,
            expired_packets: b.expired_whole,
            released_packets: b.released_whole,
            tun_packets: k.tun_packets,
            elastic_waits: k.elastic_waits,
            elastic_wait_mean_us: (k.elastic_waits > 0)
                .then(|| k.elastic_wait_us as f64 / k.elastic_waits as f64),
        }
    }
}

/// The cross traffic kinds a scenario may have.
const KINDS: [&str; 7] = ["step", "stairs", "cbr", "poisson", "onoff", "peaks", "web"];

/// Levels of the STEP kinds over a run (each gets an equal share of it); 0: not a STEP.
fn step_levels(kind: &str) -> usize {
    match kind {
        "step" => 4,
        "stairs" => STAIRS.len(),
        _ => 0,
    }
}

/// `make demo`'s STEP as shares of C (2, 6, 10, 12, 8, 4 Mbit/s of 20), full-size packets:
/// steps of A of 10–20% of C down and then up, where phase readings were seen to start.
const STAIRS: [f64; 6] = [0.1, 0.3, 0.5, 0.6, 0.4, 0.2];

/// Time from the run's start after which the added load is counted again (settled).
const SETTLE_NS: u64 = 10_000_000_000;

/// The application flow's port (opted into riders as `tcp:PORT`).
const APP_PORT: u16 = 5201;

/// Ethernet + IPv4 + TCP (timestamps) headers of one segment, and the flow's segment payload.
const TCP_HEADERS: f64 = 66.0;
const TCP_MSS: f64 = 1448.0;

impl TrackingConfig {
    pub fn check(&self) -> Result<()> {
        ensure(
            !self.capacities_mbit.is_empty()
                && self
                    .capacities_mbit
                    .iter()
                    .all(|c| (1.0..=1000.0).contains(c)),
            "capacities must be 1..=1000 Mbit/s",
        )?;
        ensure(
            (10.0..=3600.0).contains(&self.secs),
            "--duration must be 10s..=1h",
        )?;
        for k in &self.kinds {
            ensure(
                KINDS.contains(&k.as_str()),
                &format!("unknown cross traffic {k:?}: {}", KINDS.join(", ")),
            )?;
        }
        for m in &self.methods {
            ensure(
                m == mgrp_service::track::METHOD
                    || mgrp_service::config::scheduled_method(m).is_some(),
                &format!("unknown method {m:?}: track, auto, chirp, slops-slow, slops, sweep"),
            )?;
        }
        ensure(
            self.app_flow
                || !(self.elastic
                    || self.hold.is_some()
                    || self.elastic_wait.is_some()
                    || self.elastic_share.is_some()),
            "riders settings (--elastic, --hold, --elastic-wait, --elastic-share) need --app-flow",
        )?;
        // The agent's own parser judges the riders' settings, before a testbed is made.
        ServiceConfig::parse(&format!("http = \"off\"\n{}", self.riders_section()))
            .map_err(|e| Error::Config(e.to_string()))?;
        ensure(
            !self.kinds.is_empty() && !self.methods.is_empty(),
            "no scenario to run",
        )
    }

    /// The agent's `[riders]` section: the application's port opted in, with the tuning
    /// asked for (empty without an application flow).
    fn riders_section(&self) -> String {
        if !self.app_flow {
            return String::new();
        }
        let mut s = format!(
            "[riders]\nopt_in = [\"tcp:{APP_PORT}\"]\nelastic = {}\n",
            self.elastic
        );
        if let Some(h) = self.hold {
            s += &format!("hold = \"{}us\"\n", h.as_micros());
        }
        if let Some(w) = self.elastic_wait {
            s += &format!("elastic_wait = \"{}us\"\n", w.as_micros());
        }
        if let Some(x) = self.elastic_share {
            s += &format!("elastic_share = {x}\n");
        }
        s
    }
}

/// One method in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub capacity_mbit: f64,
    pub cross: String,
    pub method: String,
    pub secs: f64,
    pub estimates: usize,
    pub per_minute: f64,
    /// Frames the bottleneck counted from the sender (probes and control) / C.
    pub load_share: f64,
    pub median_err: Option<f64>,
    pub p90_err: Option<f64>,
    /// The same against what an application reading the latest estimate at any moment sees:
    /// sampled every 100 ms from the first estimate on, the value standing then against A
    /// over the second before. Per estimate, a method that publishes often while it reads
    /// well (phase readings, ~7 a second) outweighs the seconds it held a stale value: round
    /// 14's 300 s on/off runs read 3.5% / 11.7% per estimate, 14.6% / 50.6% weighted by the
    /// time each value stood.
    pub median_err_sampled: Option<f64>,
    pub p90_err_sampled: Option<f64>,
    /// STEP: seconds from each level change to the first estimate within 10% of the new
    /// level (`None` for a level never reached within it).
    pub follow_s: Vec<Option<f64>>,
    /// Mean truth over the run (bit/s).
    pub truth_bps: f64,
    /// The bottleneck's capacity as the testbed's flood measured it (the truth's C), with the
    /// share of a CPU the host stole while it did.
    pub link: mgrp_testbed::capacity::LinkCapacity,
    /// With an application flow: its rate (bit/s of TCP payload the sink read), riders on.
    pub app_bps: Option<f64>,
    /// With an application flow: what its socket says it sent, retransmissions included (a
    /// segment held for a train past the sender's patience is sent twice).
    pub app_tcp: Option<mgrp_testbed::app::AppTcp>,
    /// With an application flow: what the bottleneck counted from the sender beyond the
    /// application's own bytes (as TCP frames) / C — the probing's added load.
    pub added_load_share: Option<f64>,
    /// The same from `SETTLE_NS` into the run: the first acquisition (made before the
    /// application starts, so nothing could ride on it) left out.
    pub added_load_share_settled: Option<f64>,
    /// Riders: elastic trains.
    pub elastic: bool,
    /// With an application flow: what the riders carried and what holding cost it.
    pub riders: Option<RiderStats>,
    /// Cross departures the sources skipped for being more than 1 ms late, and the largest
    /// lateness (µs): the truth counts what was sent, the pattern's mean rate is short by these.
    pub cross_skipped_late: u64,
    pub cross_max_lag_us: f64,
    /// The sources sent late departures back to back instead (`TrackingConfig::send_late`).
    pub send_late: bool,
    /// What the bottleneck drained under a 1.25·C flood on top of the cross traffic right
    /// after the run, and the errors against the truth with that C instead of the start's.
    pub drained_bps: f64,
    pub median_err_drained: Option<f64>,
    pub p90_err_drained: Option<f64>,
    /// Every published estimate: seconds since the run's start, value, truth over the second
    /// before (A less the application's frames), bit/s.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub record: Vec<EstimateRecord>,
    /// `track`: every check and narrow re-search stream, how many probes it carried and how
    /// it read (its `t_ns` made seconds since the run's start, as `t_s`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamLine>,
    /// Every capacity the method published: (seconds since the run's start, bit/s).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity_record: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EstimateRecord {
    pub t_s: f64,
    pub value_bps: f64,
    pub truth_bps: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamLine {
    pub t_s: f64,
    #[serde(flatten)]
    pub stream: mgrp_estimate::track_trace::StreamRecord,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub secs: f64,
    pub rows: Vec<Row>,
}

fn pattern(kind: &str, c: f64, secs: f64) -> Result<CrossPattern> {
    let m = |x: f64| format!("{}kbit", (x * c / 1e3).round() as u64);
    let text = match kind {
        // Four levels over the run: a step down in A, back up, down, up.
        "step" => format!(
            "step:{},{},every={}ms,size=1000",
            m(0.3),
            m(0.5),
            (secs * 1000.0 / 4.0) as u64
        ),
        "stairs" => format!(
            "step:{},every={}ms",
            STAIRS.map(m).join(","),
            (secs * 1000.0 / STAIRS.len() as f64) as u64
        ),
        "cbr" => format!("cbr:{},size=1000", m(0.5)),
        // Bursts at 60% of C for 0.5 s (exponential on and off times), 30% on average.
        "onoff" => format!("onoff:{},on=500ms,off=500ms,dist=exp,size=1000", m(0.3)),
        // 30% of C, with a peak to 60% for a sixteenth of the run every three sixteenths.
        "peaks" => {
            let ms = |f: f64| (secs * 1000.0 * f) as u64;
            format!(
                "peaks:{}@{}ms,{}@{}ms,size=1000",
                m(0.3),
                ms(2.0 / 16.0),
                m(0.6),
                ms(1.0 / 16.0)
            )
        }
        // Web-like TCP (Poisson arrivals of Pareto-sized flows, testbed.md) offering 30% of C.
        "web" => format!("web:{}", m(0.3)),
        _ => format!("poisson:{},size=1000", m(0.5)),
    };
    CrossPattern::parse(&text).map_err(|e| Error::Config(e.to_string()))
}

pub fn run(cfg: &TrackingConfig, hooks: Hooks) -> Result<Report> {
    cfg.check()?;
    let mut rows = Vec::new();
    let total = cfg.capacities_mbit.len() * cfg.kinds.len() * cfg.methods.len();
    for &mbit in &cfg.capacities_mbit {
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: (mbit * 1e6) as u64,
                ..Default::default()
            },
            DelayMode::Thread,
        )?;
        let key = Key::random();
        let dev = cfg.app_flow.then(|| "mgrp1".to_string());
        let (_agent, peer) = agent_at_rcv_with(&tb, &key, dev)?;
        for kind in &cfg.kinds {
            for method in &cfg.methods {
                if (hooks.stop)() {
                    return Err(Error::Interrupted);
                }
                (hooks.progress)(&format!(
                    "[{}/{total}] {mbit} Mbit/s, {kind}, {method} ({} s)\n",
                    rows.len() + 1,
                    cfg.secs
                ));
                let row = scenario(&tb, &key, peer, mbit, kind, method, cfg)?;
                rows.push(row);
            }
        }
    }
    Ok(Report {
        secs: cfg.secs,
        rows,
    })
}

#[allow(clippy::too_many_arguments)]
fn scenario(
    tb: &Testbed,
    key: &Key,
    peer: std::net::SocketAddr,
    mbit: f64,
    kind: &str,
    method: &str,
    cfg: &TrackingConfig,
) -> Result<Row> {
    let secs = cfg.secs;
    let c = tb.capacity().bps();
    let cross = pattern(kind, mbit * 1e6, secs)?;
    // Sources skip departures more than 1 ms late, as when `auto` is judged: a source held
    // off the CPU otherwise sends what it owes back to back, a queue the checks read as a
    // fall of A (at 100 Mbit/s, 10-ms check streams at 0.9 A rose 1–1.6 ms in a run without).
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 10.0),
        max_late: (!cfg.send_late).then_some(mgrp_testbed::generator::DEFAULT_MAX_LATE),
        ..GenOptions::default()
    };
    let sampler = TruthSampler::start(tb, Duration::from_millis(100))?;
    let gen = CrossTraffic::start(tb, &cross, BASE_PORT, &opts)?;
    // Baselines run back to back (the least period, a budget that never binds); tracking
    // with its defaults (its 2% ceiling paces it).
    // A round may last `every` (at least 5 s): pathload's pacing needs ~20 s an estimate, so
    // slops-slow is due every 30 s (one round at a time, close to back to back).
    let extra = match method {
        m if m == mgrp_service::track::METHOD => String::new(),
        "slops-slow" => "every = \"30s\"\nbudget = \"1000mb\"\n".into(),
        _ => "every = \"100ms\"\nbudget = \"1000mb\"\n".into(),
    };
    let riders = cfg.riders_section();
    let text = format!(
        "http = \"off\"\n[[path]]\npeer = \"{peer}\"\nmethod = \"{method}\"\n{extra}{riders}"
    );
    let svc_cfg = ServiceConfig::parse(&text).map_err(|e| Error::Config(e.to_string()))?;
    let offset = mgrp_clock::realtime_ns() as i128 - mgrp_testbed::clock::now_ns() as i128;
    let t0 = mgrp_testbed::clock::now_ns();
    mgrp_estimate::track_trace::record_streams(true);
    let k = key.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(secs);
    let recs = spawn_in(&tb.ns(Role::Snd), "service", move || {
        let setup = |e: String| mgrp_testbed::Error::Setup(e);
        let svc = Service::start(&svc_cfg, k).map_err(|e| setup(e.to_string()))?;
        while std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let riders = svc.riders().map(RiderStats::of);
        let store = svc.store();
        svc.stop();
        let s = store
            .lock()
            .map_err(|_| setup("store lock poisoned".into()))?;
        let series = s.series().map_err(|e| setup(e.to_string()))?;
        let read = |metric: &str| -> Result<Vec<(u64, f64)>, mgrp_testbed::Error> {
            let mut out = Vec::new();
            if let Some((p, _)) = series.iter().find(|(_, m)| m == metric) {
                for r in s
                    .range(p, metric, 0, u64::MAX, 100_000)
                    .map_err(|e| setup(e.to_string()))?
                {
                    out.push((r.t_ns, r.value));
                }
            }
            Ok(out)
        };
        Ok((read("avail_bw")?, read("capacity")?, riders))
    })?;
    // The riders' route must exist before the application connects: its first packets then
    // take the TUN (the service starts its riders at once; a second is plenty).
    let app = if cfg.app_flow {
        std::thread::sleep(Duration::from_secs(1));
        Some(AppFlow::start(
            tb,
            Role::Snd,
            Role::Rcv,
            APP_PORT,
            // 5000-byte writes every 10 ms: 4 Mbit/s that does not adapt.
            AppPattern::parse("msgs:5000b,every=10ms").map_err(|e| Error::Config(e.to_string()))?,
            Some("cubic".into()),
            Duration::from_secs_f64(secs + 5.0),
        )?)
    } else {
        None
    };
    let (recs, capacities, riders) = recs
        .join()
        .map_err(|_| Error::Worker("service thread panicked".into()))??;
    let t1 = mgrp_testbed::clock::now_ns();
    let streams: Vec<StreamLine> = mgrp_estimate::track_trace::take_streams()
        .into_iter()
        .map(|r| StreamLine {
            t_s: (r.t_ns as f64 - t0 as f64) / 1e9,
            stream: r,
        })
        .collect();
    mgrp_estimate::track_trace::record_streams(false);
    let app = app.map(|a| a.stop()).transpose()?;
    // What the link drains now, on top of the cross traffic and after the run's own load
    // (the flood at the testbed's start read 89.9–98.9 Mbit/s on one 100 Mbit/s machine
    // within an hour, the truth's A moving with it).
    let drained_bps = crate::accuracy::drain_now(tb, c)?;
    let start_ns = gen.start_ns();
    let gen = gen.stop()?;
    let truth = sampler.stop()?;
    let to_mono = |t: u64| (t as i128 - offset).max(0) as u64;
    let window = truth
        .window(t0, t1)
        .ok_or_else(|| Error::Worker("no truth over the run".into()))?;
    let dur = (t1 - t0) as f64 / 1e9;
    // The application's rate over its life; estimates read A less it (its packets that do not
    // ride are traffic the probes meet; those that ride are taken off by the rider correction).
    // A is in frame bits as the bottleneck counts them, so the application's frames come off
    // (until round 16 its payload rate did: the truth read 0.18 Mbit/s high beside 4 Mbit/s).
    let app_bps = app
        .as_ref()
        .map(|r| r.received_bytes as f64 * 8.0 / r.duration_s.max(1e-3));
    let app_frames_bps = app_bps.map(|b| b * (1.0 + TCP_HEADERS / TCP_MSS));
    // The first acquisition runs before the application starts (its route must exist first),
    // so nothing rides on it: the settled share leaves the first seconds out.
    let added_load_share_settled = app_frames_bps.and_then(|f| {
        let w = truth.window(t0 + SETTLE_NS, t1)?;
        Some((w.offered_fg_bps - f) / c)
    });
    let less = app_frames_bps.unwrap_or(0.0);
    let record: Vec<EstimateRecord> = recs
        .iter()
        .map(|(t, v)| {
            let t = to_mono(*t);
            let w = truth.window(t.saturating_sub(1_000_000_000), t);
            EstimateRecord {
                t_s: (t as f64 - t0 as f64) / 1e9,
                value_bps: *v,
                truth_bps: w.map(|w| w.avail_bps - less),
            }
        })
        .collect();
    // The capacity the method published (it sets the tracker's ceiling), against the C the
    // testbed measured.
    let capacity_record = capacities
        .iter()
        .map(|(t, v)| ((to_mono(*t) as f64 - t0 as f64) / 1e9, *v))
        .collect();
    // Errors against each estimate's truth, and against it with C as drained after the run
    // (A + drained − C).
    let errs = |shift: f64| -> Vec<f64> {
        record
            .iter()
            .filter_map(|r| {
                let a = r.truth_bps? + shift;
                (a > 0.0).then(|| (r.value_bps - a).abs() / a)
            })
            .collect()
    };
    let (median_err, p90_err) = median_p90(errs(0.0));
    let (median_err_sampled, p90_err_sampled) = median_p90(sampled_errs(
        &truth,
        recs.iter().map(|(t, v)| (to_mono(*t), *v)).collect(),
        t1,
        less,
    ));
    let (median_err_drained, p90_err_drained) = median_p90(errs(drained_bps - c));
    let levels = step_levels(kind);
    let follow_s = if levels > 0 {
        follow(
            &truth,
            &recs,
            to_mono,
            start_ns,
            secs / levels as f64,
            t1,
            less,
        )
    } else {
        Vec::new()
    };
    Ok(Row {
        capacity_mbit: mbit,
        cross: kind.into(),
        method: method.into(),
        secs: dur,
        estimates: recs.len(),
        per_minute: recs.len() as f64 / dur * 60.0,
        load_share: window.offered_fg_bps / c,
        median_err,
        p90_err,
        median_err_sampled,
        p90_err_sampled,
        follow_s,
        truth_bps: window.avail_bps,
        link: tb.capacity(),
        app_bps,
        app_tcp: app.as_ref().map(|a| a.tcp),
        added_load_share: app_frames_bps.map(|f| (window.offered_fg_bps - f) / c),
        added_load_share_settled,
        elastic: cfg.app_flow && cfg.elastic,
        riders,
        cross_skipped_late: gen.skipped_late,
        cross_max_lag_us: gen.max_lag_us,
        send_late: cfg.send_late,
        drained_bps,
        median_err_drained,
        p90_err_drained,
        record,
        streams,
        capacity_record,
    })
}

/// How often [`sampled_errs`] reads the standing estimate.
const SAMPLE_NS: u64 = 100_000_000;

/// |value − A| / A every `SAMPLE_NS` from the first estimate to `end_ns`: the value the
/// latest estimate at or before each moment gave, A over the second before it less
/// `less_bps` (the application's own rate).
fn sampled_errs(truth: &Truth, mut pts: Vec<(u64, f64)>, end_ns: u64, less_bps: f64) -> Vec<f64> {
    pts.sort_by_key(|(t, _)| *t);
    let mut out = Vec::new();
    let Some(&(mut at, _)) = pts.first() else {
        return out;
    };
    let mut i = 0;
    while at <= end_ns {
        while i + 1 < pts.len() && pts[i + 1].0 <= at {
            i += 1;
        }
        if let Some(w) = truth.window(at.saturating_sub(1_000_000_000), at) {
            let a = w.avail_bps - less_bps;
            if a > 0.0 {
                out.push((pts[i].1 - a).abs() / a);
            }
        }
        at += SAMPLE_NS;
    }
    out
}

/// The median and 90th percentile of `v` (`None` when empty).
fn median_p90(mut v: Vec<f64>) -> (Option<f64>, Option<f64>) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * p).round() as usize]);
    (q(0.5), q(0.9))
}

/// For each level change of the STEP pattern inside the run: seconds to the first estimate
/// within 10% of the new level's truth (less `less_bps`, the application's own rate).
fn follow(
    truth: &Truth,
    recs: &[(u64, f64)],
    to_mono: impl Fn(u64) -> u64,
    start_ns: u64,
    every_s: f64,
    end_ns: u64,
    less_bps: f64,
) -> Vec<Option<f64>> {
    let every = (every_s * 1e9) as u64;
    let mut out = Vec::new();
    let mut b = start_ns + every;
    while b + every / 2 < end_ns {
        let next = (b + every).min(end_ns);
        let level = truth
            .window(b + 200_000_000, next)
            .map(|w| w.avail_bps - less_bps);
        let hit = level.and_then(|a| {
            recs.iter()
                .map(|(t, v)| (to_mono(*t), *v))
                .filter(|(t, _)| *t > b && *t < next)
                .find(|(_, v)| (v - a).abs() <= 0.10 * a)
                .map(|(t, _)| (t - b) as f64 / 1e9)
        });
        out.push(hit);
        b += every;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_testbed::truth::Sample;

    /// A steady 10 Mbit/s of cross traffic on 20 Mbit/s for 10 s (A = 10), sampled every 100 ms.
    fn steady() -> Truth {
        let samples = (0..=100u64)
            .map(|i| Sample {
                t_ns: i * 100_000_000,
                cross_bytes: i * 125_000,
                ..Default::default()
            })
            .collect();
        Truth {
            capacity_bps: 20e6,
            configured_capacity_bps: 20e6,
            origin_ns: 0,
            samples,
        }
    }

    /// The value standing at each moment counts for the time it stood: an estimate 50% off
    /// that stood 8 s and nine right ones published within its last second make a sampled
    /// median of 50%, where per estimate the median is 0.
    #[test]
    fn sampled_errors_weigh_values_by_the_time_they_stood() {
        let mut pts = vec![(1_000_000_000, 15e6)];
        pts.extend((0..9).map(|k| (9_000_000_000 + k * 100_000_000, 10e6)));
        let e = sampled_errs(&steady(), pts, 10_000_000_000, 0.0);
        assert_eq!(e.len(), 91, "samples from 1 s to 10 s");
        let (med, p90) = median_p90(e);
        assert!((med.unwrap() - 0.5).abs() < 1e-9, "{med:?}");
        assert!((p90.unwrap() - 0.5).abs() < 1e-9, "{p90:?}");
        // The application's own rate comes off A; no estimate, no samples.
        let e = sampled_errs(&steady(), vec![(2_000_000_000, 8e6)], 3_000_000_000, 2e6);
        assert!(e.iter().all(|x| x.abs() < 1e-9), "{e:?}");
        assert!(sampled_errs(&steady(), Vec::new(), 3_000_000_000, 0.0).is_empty());
    }

    fn app_flow_config() -> TrackingConfig {
        TrackingConfig {
            capacities_mbit: vec![20.0],
            kinds: vec!["step".into()],
            methods: vec!["track".into()],
            secs: 60.0,
            app_flow: true,
            elastic: false,
            hold: None,
            elastic_wait: None,
            elastic_share: None,
            send_late: false,
        }
    }

    /// The riders' tuning reaches the agent's `[riders]` section, and what the agent would
    /// refuse is refused before a testbed is made, with the agent's reason.
    #[test]
    fn riders_tuning_is_checked_by_the_agents_parser() {
        let whole = TrackingConfig {
            elastic: true,
            hold: Some(Duration::from_millis(80)),
            elastic_wait: Some(Duration::from_millis(60)),
            elastic_share: Some(1.0),
            ..app_flow_config()
        };
        whole.check().unwrap();
        let s = whole.riders_section();
        for line in [
            "elastic = true",
            "hold = \"80000us\"",
            "elastic_wait = \"60000us\"",
            "elastic_share = 1",
        ] {
            assert!(s.contains(line), "{line:?} not in {s:?}");
        }
        let refused = |c: TrackingConfig, why: &str| {
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(why), "{e:?} does not say {why:?}");
        };
        refused(
            TrackingConfig {
                hold: Some(Duration::from_secs(5)),
                ..app_flow_config()
            },
            "hold above 1s",
        );
        refused(
            TrackingConfig {
                elastic: true,
                elastic_share: Some(0.0),
                ..app_flow_config()
            },
            "min_share",
        );
        refused(
            TrackingConfig {
                elastic_wait: Some(Duration::from_millis(10)),
                ..app_flow_config()
            },
            "need elastic = true",
        );
        refused(
            TrackingConfig {
                app_flow: false,
                hold: Some(Duration::from_millis(20)),
                ..app_flow_config()
            },
            "need --app-flow",
        );
        assert_eq!(
            TrackingConfig {
                app_flow: false,
                ..app_flow_config()
            }
            .riders_section(),
            ""
        );
    }
}
