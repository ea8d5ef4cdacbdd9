//! `mgrp bench pacing`: sender and receiver gap error of probe trains on an idle testbed path.

use crate::rig::{agent_at_rcv, connect};
use crate::{ensure, Error, Hooks, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::train::{Quantiles, TrainSpec};
use mgrp_estimate::stats::median;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PacingConfig {
    /// Trains per gap setting.
    pub trains: u32,
    /// Probes per train and probe size.
    pub count: usize,
    pub size: u16,
    /// Gaps to measure, microseconds.
    pub gaps_us: Vec<f64>,
    /// Bottleneck capacity of the (idle) testbed path, bit/s.
    pub capacity: u64,
}

#[derive(Serialize)]
pub struct PacingRow {
    pub gap_us: f64,
    pub trains: u32,
    pub probes: usize,
    /// |actual − intended| gap at the sender, microseconds, over all gaps of all trains.
    pub sender_err_us: Option<mgrp_engine::train::Quantiles>,
    /// The same from kernel TX software timestamps (the packet reaching the device).
    pub kernel_tx_err_us: Option<mgrp_engine::train::Quantiles>,
    /// |receive gap − intended gap| from kernel RX timestamps, microseconds.
    pub receiver_err_us: Option<mgrp_engine::train::Quantiles>,
    pub flagged_trains: u32,
    /// Trains flagged because the hypervisor stole CPU while they were out (>= 10 ms on some
    /// CPU, `stats.stolen_ms`); the rest of `flagged_trains` strayed at the sender.
    pub stolen_trains: u32,
    pub lost: usize,
    /// Receive rate over the train vs the intended in-train rate (medians).
    pub intended_mbit: f64,
    pub rx_rate_mbit_median: f64,
}

impl PacingConfig {
    pub fn check(&self) -> Result<()> {
        ensure(
            self.trains >= 1 && self.trains <= 10_000,
            "--trains must be 1..=10000",
        )?;
        ensure(
            self.gaps_us.iter().all(|g| *g > 0.0 && *g <= 1e6),
            "gaps must be in (0, 1e6] us",
        )
    }
}

/// Trains at each gap over an idle testbed path; one row per gap.
pub fn run(b: &PacingConfig, hooks: Hooks) -> Result<Vec<PacingRow>> {
    b.check()?;
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: b.capacity,
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    let key = Key::random();
    let (agent, listen) = agent_at_rcv(&tb, &key)?;
    let (trains, count, size, gaps) = (b.trains, b.count, b.size, b.gaps_us.clone());
    // The bench thread's progress comes back over a channel: the hooks stay on this thread.
    let (ptx, prx) = std::sync::mpsc::channel::<String>();
    let progress = move |s: &str| {
        let _ = ptx.send(s.to_string());
    };
    let bench = spawn_in(&tb.ns(Role::Snd), "bench", move || {
        let run = || -> Result<Vec<PacingRow>> {
            let mut s = connect(listen, &key)?;
            let mut rows = Vec::new();
            for gap in gaps {
                let spec = TrainSpec::uniform(count, size, (gap * 1e3).round() as u64);
                let (mut tx, mut ktx, mut rx, mut rates) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let (mut flagged, mut stolen, mut lost) = (0, 0, 0);
                for i in 0..trains {
                    progress(&format!("\rgap {gap} us: train {}/{trains}   ", i + 1));
                    let r = s.send_train(&spec)?;
                    flagged += r.stats.flagged as u32;
                    stolen += r.stats.stolen() as u32;
                    lost += r.stats.lost;
                    rates.extend(r.rx_rate_bps());
                    for w in r.probes.windows(2) {
                        let want = (w[1].intended_ns - w[0].intended_ns) as f64;
                        if let (Some(a), Some(b)) = (w[0].sent_ns, w[1].sent_ns) {
                            tx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                        if let (Some(a), Some(b)) = (
                            w[0].tx_kernel_ns.map(|t| t.0),
                            w[1].tx_kernel_ns.map(|t| t.0),
                        ) {
                            ktx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                        if let (Some(a), Some(b)) =
                            (w[0].rx_ns.map(|t| t.0), w[1].rx_ns.map(|t| t.0))
                        {
                            rx.push((b as f64 - a as f64 - want).abs() / 1e3);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                rows.push(PacingRow {
                    gap_us: gap,
                    trains,
                    probes: count,
                    sender_err_us: Quantiles::of(tx),
                    kernel_tx_err_us: Quantiles::of(ktx),
                    receiver_err_us: Quantiles::of(rx),
                    flagged_trains: flagged,
                    stolen_trains: stolen,
                    lost,
                    intended_mbit: size as f64 * 8.0 / gap,
                    rx_rate_mbit_median: median(&rates) / 1e6,
                });
            }
            Ok(rows)
        };
        run().map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
    })?;
    while !bench.is_finished() {
        if let Ok(line) = prx.recv_timeout(Duration::from_millis(100)) {
            hooks.say(&line);
        }
    }
    for line in prx.try_iter() {
        hooks.say(&line);
    }
    let rows = bench
        .join()
        .map_err(|_| Error::Worker("bench thread panicked".into()))??;
    hooks.say("\n");
    drop(agent);
    Ok(rows)
}
