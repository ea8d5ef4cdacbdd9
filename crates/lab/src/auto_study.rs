//! `auto` on the testbed, one cell at a time, with what its search saw: every fleet's rate and
//! votes, the evidence `Auto::alternates` weighs, and how the run ended. A study, run by hand
//! (root): `cargo test --release -p mgrp-lab --lib auto_study -- --ignored --nocapture`
//! (CAP Mbit/s, CELL as in `mgrp bench accuracy`'s kinds with a load, "onoff:50"; N runs;
//! STREAMS=1 prints each train's delays once the chirps are in; DETECT_NS sets
//! [`AutoParams::detect_ns`]; each run waits IDLE_MS, default 1000, first, and the TCP cross
//! flows' retransmissions per second and A are printed for that wait, the run's A as `truth`).

use crate::rig::Worker;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::auto::{Auto, AutoParams};
use mgrp_estimate::{wire_bits, Estimate, Estimator, TrainResult, TrainSpec};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::TruthSampler;
use std::time::{Duration, Instant};

/// `auto`, with every train's timing: when asked, its planned length, when answered, probes
/// sent and received, and whether the time average asked for it.
struct Logged {
    auto: Auto,
    asked: Option<(u64, u64, bool)>,
    trains: Vec<(u64, u64, u64, usize, usize, bool)>,
    streams: bool,
}

impl Estimator for Logged {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        let s = self.auto.poll_train(now_ns)?;
        let len = s.offsets().last().copied().unwrap_or(0);
        self.asked = Some((now_ns, len, self.auto.timeavg().is_some()));
        Some(s)
    }
    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        if self.streams && (self.auto.rough().is_some() || !self.auto.history().is_empty()) {
            // STREAMS=1: each train's delays (µs above its first group's median), ten groups.
            let owd: Vec<f64> = obs.owds().into_iter().map(|(_, d)| d).collect();
            let g = mgrp_estimate::trend::group_medians(&owd, 10);
            let base = g.first().copied().unwrap_or(0.0);
            let sent = obs.probes.iter().filter(|p| p.sent_ns.is_some()).count();
            let span = obs.probes.last().and_then(|p| p.sent_ns).unwrap_or(0)
                - obs.probes.first().and_then(|p| p.sent_ns).unwrap_or(0);
            let bits: f64 = obs.probes.iter().map(|p| wire_bits(p.size)).sum();
            eprintln!(
                "    train {:.1} Mbit/s {} probes {:.1} ms, {} lost, base {:.0} µs: {}",
                bits / span.max(1) as f64 * 1e3,
                sent,
                span as f64 / 1e6,
                sent - owd.len(),
                base / 1e3,
                g.iter()
                    .map(|d| format!("{:.0}", (d - base) / 1e3))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        if let Some((at, len, ta)) = self.asked.take() {
            let rx = obs.probes.iter().filter(|p| p.rx_ns.is_some()).count();
            self.trains
                .push((at, len, now_ns, obs.probes.len(), rx, ta));
        }
        self.auto.handle_train(now_ns, obs)
    }
    fn estimate(&self) -> Option<Estimate> {
        self.auto.estimate()
    }
    fn is_done(&self) -> bool {
        self.auto.is_done()
    }
    fn next_wakeup(&self) -> Option<u64> {
        self.auto.next_wakeup()
    }
    fn capacity(&self) -> Option<Estimate> {
        self.auto.capacity()
    }
}

#[test]
#[ignore]
fn auto_study() {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or(d.into());
    let cap: f64 = var("CAP", "100").parse().unwrap();
    let n: usize = var("N", "10").parse().unwrap();
    let detect_ns: f64 = var("DETECT_NS", &AutoParams::default().detect_ns.to_string())
        .parse()
        .unwrap();
    let cell = var("CELL", "onoff:50");
    let c = cap * 1e6;
    let tb = crate::accuracy::testbed(c).unwrap();
    let cm = tb.capacity().bps();
    eprintln!("C configured {cap} measured {:.2} Mbit/s", cm / 1e6);
    let worker = Worker::start(&tb, "auto-study", move |(): (), s| {
        let start = mgrp_clock::now_ns();
        let mut logged = Logged {
            auto: Auto::new(AutoParams {
                detect_ns,
                ..AutoParams::default()
            }),
            asked: None,
            trains: vec![],
            streams: std::env::var_os("STREAMS").is_some(),
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        let out = run_estimator(s, &mut logged, deadline, || false, |_| {}).unwrap();
        let est = &logged.auto;
        let mut lines = vec![];
        let mb = |x: f64| x / 1e6;
        if let Some(r) = est.rough() {
            lines.push(format!(
                "  rough {:.1} [{:.1} {:.1}]",
                mb(r.value_bps),
                mb(r.low_bps),
                mb(r.high_bps)
            ));
        }
        let fleets: Vec<String> = est
            .history()
            .iter()
            .map(|(r, v)| format!("{:.1}{}", mb(*r), &format!("{v:?}")[..1]))
            .collect();
        lines.push(format!("  fleets {}", fleets.join(" ")));
        let votes: Vec<String> = est
            .votes()
            .iter()
            .map(|v| format!("{:.1}:{}/{}", mb(v.rate), v.increasing, v.not_increasing))
            .collect();
        lines.push(format!("  votes (rate:rose/flat) {}", votes.join(" ")));
        if let Some(e) = est.evidence() {
            lines.push(format!("  evidence {e:?}"));
        }
        let cap = est.capacity().map_or(0.0, |e| e.value_bps);
        let (wrong, total) = mgrp_estimate::timeavg::contradicting_streams(est.votes(), cap);
        let (splits, apart) = mgrp_estimate::timeavg::split_fleets(est.votes());
        lines.push(format!(
            "  C {:.1}; flats {}; contradicting {wrong}/{total}; splits {splits} apart {apart:.2}; \
             saturated at {:?}; search value {:?}",
            mb(cap),
            est.votes().iter().map(|v| v.not_increasing).sum::<u32>(),
            est.saturated_rates().iter().map(|r| mb(*r)).collect::<Vec<_>>(),
            est.search_value().map(mb)
        ));
        // The time average's trains: how long each took past its planned length.
        let ta: Vec<_> = logged.trains.iter().filter(|t| t.5).collect();
        if !ta.is_empty() {
            let waits: Vec<String> = ta
                .iter()
                .map(|t| {
                    format!(
                        "{:.0}{}",
                        (t.2 - t.0).saturating_sub(t.1) as f64 / 1e6,
                        if t.4 == 0 {
                            "x"
                        } else if t.4 < t.3 {
                            "l"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            lines.push(format!(
                "  time average: {} trains in {:.2} s; ms past plan (l lossy, x all lost): {}",
                ta.len(),
                (ta.last().unwrap().2 - ta[0].0) as f64 / 1e9,
                waits.join(" ")
            ));
        }
        // The time average's readings by rate (1 flat, 0 rose): where its share curve falls.
        if let Some(t) = est.timeavg() {
            let mut s = t.samples();
            s.sort_by(|a, b| a.0.total_cmp(&b.0));
            let cells: Vec<String> = s
                .iter()
                .map(|(r, x)| match x {
                    Some(x) if *x >= 1.0 => format!("{:.1}F", mb(*r)),
                    Some(x) if *x <= 0.0 => format!("{:.1}R", mb(*r)),
                    Some(_) => format!("{:.1}?", mb(*r)),
                    None => format!("{:.1}-", mb(*r)),
                })
                .collect();
            lines.push(format!("  time average by rate: {}", cells.join(" ")));
        }
        (start, mgrp_clock::now_ns(), out, lines)
    })
    .unwrap();
    let (kind, load) = cell.split_once(':').unwrap_or((&cell, "0"));
    let load: u32 = load.parse().unwrap();
    let pat = crate::accuracy::pattern(kind, load, c).unwrap();
    let sampler = TruthSampler::start(&tb, Duration::from_millis(50)).unwrap();
    let gen = pat
        .as_ref()
        .map(|p| CrossTraffic::start(&tb, p, BASE_PORT, &GenOptions::default()).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    // The cross flows' retransmissions per second with no probes, then while `auto` runs.
    let retrans = || gen.as_ref().map_or(0, |g| g.tcp_retransmits());
    let idle = Duration::from_millis(var("IDLE_MS", "1000").parse().unwrap());
    for i in 0..n {
        let r0 = retrans();
        let idle_from = mgrp_clock::now_ns();
        std::thread::sleep(idle);
        let idle_to = mgrp_clock::now_ns();
        let r1 = retrans();
        let (start, end, out, lines) = worker.ask((), Duration::from_secs(60)).unwrap();
        let r2 = retrans();
        std::thread::sleep(Duration::from_millis(150));
        let truth = sampler
            .truth()
            .window(start.max(end.saturating_sub(500_000_000)), end)
            .map_or(f64::NAN, |w| w.avail_bps);
        let e = out.unwrap();
        eprintln!(
            "run {i}: {} {:.1} [{:.1} {:.1}] conf {:.2} truth {:.1} err {:.0}% in {:.2} s",
            e.quality.method,
            e.value_bps / 1e6,
            e.low_bps / 1e6,
            e.high_bps / 1e6,
            e.quality.confidence,
            truth / 1e6,
            100.0 * (e.value_bps - truth).abs() / truth.max(0.05 * c),
            (end - start) as f64 / 1e9
        );
        // A over the wait before the run: what the path had with no probes on it.
        let idle_truth = sampler
            .truth()
            .window(idle_from, idle_to)
            .map_or(f64::NAN, |w| w.avail_bps);
        eprintln!(
            "  truth before the run (no probes) {:.1}; cross retransmits/s: idle {:.1}, probed {:.1}",
            idle_truth / 1e6,
            r1.saturating_sub(r0) as f64 / idle.as_secs_f64().max(1e-3),
            r2.saturating_sub(r1) as f64 / ((end - start) as f64 / 1e9).max(1e-3)
        );
        for l in lines {
            eprintln!("{l}");
        }
    }
    if let Some(g) = gen {
        g.stop().unwrap();
    }
}
