//! Phase readings (`mgrp_estimate::phase`) on the testbed, against steady cross traffic whose
//! truth holds still: what a reading reads at 100 Mbit/s, and why (issue 13: readings read
//! 20–55% low there in `mgrp bench tracking`). A study, run by hand (root):
//! `cargo test --release -p mgrp-lab --lib phase_study -- --ignored --nocapture`
//! (CAP Mbit/s, CELLS "idle,cbr:30,poisson:30", N readings a cell).

use crate::rig::Worker;
use mgrp_estimate::phase::{read_avail, reading_train, slope, ReadingShape};
use mgrp_estimate::{wire_bits, TrainResult};
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT, DEFAULT_MAX_LATE};
use mgrp_testbed::{CrossPattern, DelayMode, Testbed, TestbedConfig, TruthSampler};
use std::time::Duration;

/// Input rate (from actual send times), output rate (receive stamps), both bit/s.
fn rates(r: &TrainResult) -> (f64, f64, usize) {
    let bits = wire_bits(r.probes[0].size);
    let sent: Vec<_> = r
        .probes
        .iter()
        .filter_map(|p| Some((p.index as f64, p.sent_ns? as f64)))
        .collect();
    let rx: Vec<_> = r
        .probes
        .iter()
        .filter_map(|p| Some((p.index as f64, p.rx_ns?.0 as f64)))
        .collect();
    let rate = |pts: &[(f64, f64)]| slope(pts).map_or(f64::NAN, |g| bits / g * 1e9);
    (rate(&sent), rate(&rx), rx.len())
}

#[test]
#[ignore]
fn phase_study() {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or(d.into());
    let cap: f64 = var("CAP", "100").parse().unwrap();
    let n: usize = var("N", "60").parse().unwrap();
    let probes: usize = var("PROBES", "20").parse().unwrap();
    let span: f64 = var("SPAN", "1.5e6").parse().unwrap();
    let c = cap * 1e6;
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: c as u64,
            burst_bytes: std::env::var("BURST").ok().map(|b| b.parse().unwrap()),
            shaper: if var("SHAPER", "htb") == "tbf" {
                mgrp_testbed::Shaper::Tbf
            } else {
                mgrp_testbed::Shaper::Htb
            },
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let cm = tb.capacity().bps();
    eprintln!(
        "C configured {cap} measured {:.2} Mbit/s, burst {} B",
        cm / 1e6,
        tb.config().burst()
    );
    let worker = Worker::start(&tb, "phase-study", |spec, s| s.send_train(&spec)).unwrap();
    let shape = ReadingShape {
        probes,
        span_ns: span,
    };
    for cell in var("CELLS", "idle,cbr:30,poisson:30,cbr:60").split(',') {
        let pat = cell.split_once(':').map(|(k, l)| {
            let mbit = l.parse::<f64>().unwrap() * cap / 100.0;
            CrossPattern::parse(&format!("{k}:{mbit}mbit,size=1000")).unwrap()
        });
        let sampler = TruthSampler::start(&tb, Duration::from_millis(100)).unwrap();
        let opts = GenOptions {
            max_late: Some(DEFAULT_MAX_LATE),
            ..Default::default()
        };
        let gen = pat
            .as_ref()
            .map(|p| CrossTraffic::start(&tb, p, BASE_PORT, &opts).unwrap());
        std::thread::sleep(Duration::from_millis(500));
        let t0 = mgrp_testbed::clock::now_ns();
        let (mut reads, mut ins, mut outs, mut rxs) = (vec![], vec![], vec![], vec![]);
        for _ in 0..n {
            let spec = reading_train(shape, cm);
            let r = worker.ask(spec, Duration::from_secs(5)).unwrap().unwrap();
            if let Some(a) = read_avail(&r, cm) {
                reads.push(a / 1e6);
            }
            let (i, o, k) = rates(&r);
            ins.push(i / 1e6);
            outs.push(o / 1e6);
            rxs.push(k as f64);
            std::thread::sleep(Duration::from_millis(50));
        }
        let t1 = mgrp_testbed::clock::now_ns();
        std::thread::sleep(Duration::from_millis(200));
        let w = sampler.truth().window(t0, t1).unwrap();
        if let Some(g) = gen {
            g.stop().unwrap();
        }
        let drained = crate::accuracy::drain_now(&tb, c).unwrap();
        let size = reading_train(shape, cm).probes[0].size;
        let q = |v: &Vec<f64>| {
            let mut s = v.clone();
            s.sort_by(f64::total_cmp);
            let at = |f: f64| s[((s.len() - 1) as f64 * f) as usize];
            format!("{:.1} [{:.1} {:.1}]", at(0.5), at(0.1), at(0.9))
        };
        eprintln!(
            "{cell}: probe {size} B; truth A {:.1} (cross {:.1}, C drained after {:.1}); \
             reading {} (n {}); r_in {}; r_out {}; received {}",
            w.avail_bps / 1e6,
            w.cross_bps / 1e6,
            drained / 1e6,
            q(&reads),
            reads.len(),
            q(&ins),
            q(&outs),
            q(&rxs),
        );
    }
}
