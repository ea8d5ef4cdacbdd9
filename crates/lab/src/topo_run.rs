//! `mgrp testbed run --topology`: build a topology, run its flows, read per-direction truth in
//! bins, tear down. Told as [`TopoEvent`]s while it runs; the whole is the [`TopoReport`].

use crate::testbed_run::check_times;
use crate::{Error, Hooks, Result};
use mgrp_testbed::generator::{GenOptions, GenReport};
use mgrp_testbed::topo::truth::DirInfo;
use mgrp_testbed::topo::{self, TopoBin, TopoOptions, TopoTestbed, TopoTruthSampler};
use mgrp_testbed::DelayMode;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TopoRunConfig {
    /// A topology file, or a built-in one by name.
    pub topology: String,
    pub duration: Duration,
    pub bin: Duration,
    pub report_every: Duration,
    pub spin: Duration,
    pub measure_capacity: bool,
}

pub enum TopoEvent<'a> {
    /// The topology is up.
    Up(&'a TopoTestbed),
    /// Flows run; rows for these shaped directions follow.
    Started(&'a [DirInfo]),
    /// One row of the live table: the truth over `[from_s, to_s)` of the run.
    Bin {
        from_s: f64,
        to_s: f64,
        bin: &'a TopoBin,
    },
}

#[derive(Serialize)]
pub struct TopoReport {
    pub testbed: String,
    pub topology: String,
    /// Every shaped direction: configured and measured capacity.
    pub links: Vec<DirInfo>,
    /// What each direction drained whenever it had a backlog during the run (by label).
    pub run_drain: Vec<(String, Option<mgrp_testbed::capacity::Drain>)>,
    pub flows: Vec<GenReport>,
    /// Ground truth over the whole run.
    pub summary: Option<TopoBin>,
    pub bin_s: f64,
    /// CLOCK_MONOTONIC ns at t = 0 of the bins.
    pub origin_ns: u64,
    pub bins: Vec<TopoBin>,
    pub interrupted: bool,
}

/// The options a topology testbed is built with.
pub fn options(name: Option<String>, source: &str, measure: bool, mode: DelayMode) -> TopoOptions {
    TopoOptions {
        name,
        measure_capacity: measure,
        delay_mode: mode,
        source: source.to_string(),
    }
}

pub fn run(
    cfg: &TopoRunConfig,
    hooks: Hooks,
    on_event: &mut dyn FnMut(TopoEvent),
) -> Result<TopoReport> {
    check_times(cfg.duration, cfg.bin, cfg.report_every)?;
    let topology = cfg.topology.as_str();
    let text = topo::source(topology)?;
    let tb = TopoTestbed::up(
        &text,
        options(None, topology, cfg.measure_capacity, DelayMode::Thread),
    )
    .map_err(|e| Error::Config(format!("{topology}: {e}")))?;
    on_event(TopoEvent::Up(&tb));
    let sampler = TopoTruthSampler::start(&tb, cfg.bin)?;
    let gens = tb.start_flows(&GenOptions {
        spin: cfg.spin,
        max_duration: cfg.duration + Duration::from_secs(1),
        ..Default::default()
    })?;
    let links = sampler.truth().links;
    let start = sampler.truth().origin_ns;
    on_event(TopoEvent::Started(&links));
    let step = cfg.report_every.as_nanos() as u64;
    let end = start + cfg.duration.as_nanos() as u64;
    let mut next = start + step;
    while next <= end && !hooks.stopped() {
        // Sleep in slices so a stop is seen; rows come once the sampler has passed their end.
        while mgrp_testbed::clock::now_ns() < next + cfg.bin.as_nanos() as u64 && !hooks.stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(b) = sampler.truth().window(next - step, next) {
            on_event(TopoEvent::Bin {
                from_s: (next - step - start) as f64 / 1e9,
                to_s: (next - start) as f64 / 1e9,
                bin: &b,
            });
        }
        next += step;
    }
    let interrupted = hooks.stopped();
    let mut flows = Vec::new();
    for g in gens {
        flows.push(g.stop()?);
    }
    let truth = sampler.stop()?;
    // The summary covers the rows told: the flows' run, not their wind-down.
    let summary = truth.window(start, (next - step).min(end));
    let run_drain = links
        .iter()
        .enumerate()
        .map(|(i, l)| (l.label.clone(), truth.drain(i)))
        .collect::<Vec<_>>();
    Ok(TopoReport {
        testbed: tb.name().to_string(),
        topology: topology.to_string(),
        links,
        run_drain,
        flows,
        summary,
        bin_s: cfg.bin.as_secs_f64(),
        origin_ns: truth.origin_ns,
        bins: truth.bins(cfg.bin),
        interrupted,
    })
}
