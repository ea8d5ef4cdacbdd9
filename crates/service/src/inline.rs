//! Inline measurement (ImTCP) in the agent: the engine (`mgrp_engine::inline`) measures the
//! opted-in flows; this thread stores each new estimate twice, on the connection
//! (`LOCAL:PORT->REMOTE:PORT`) and on the path (`LOCAL->REMOTE`), with source `inline`, method
//! `imtcp` and the quality tuple (probe bytes 0: the flow's own segments are the probes). From the
//! store they reach the API, SSE and dashboard like the other sources; the engine's counters
//! (including the "cannot measure" ones) go to `/metrics` as `mgrp_inline_total{counter=...}`.

use crate::record::{from_estimate, Series};
use crate::{counter_pairs, Hub};
use mgrp_engine::inline::{FlowKey, InlineConfig, InlineEngine};
use mgrp_shim::route::OptIn;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// `[inline]` in the agent's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct InlineSettings {
    pub dev: String,
    pub opt_in: Vec<OptIn>,
    /// The sender's access rate, bit/s: the upper bound of the first search range.
    pub access_bps: f64,
}

pub struct InlineRun {
    engine: Arc<InlineEngine>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Start the engine and the thread that stores its estimates.
pub fn start(s: &InlineSettings, hub: &Arc<Hub>) -> Result<InlineRun, mgrp_engine::Error> {
    let mut cfg = InlineConfig::new(s.opt_in.clone(), s.access_bps);
    cfg.dev = s.dev.clone();
    let engine = Arc::new(InlineEngine::start(&cfg)?);
    let e = engine.clone();
    hub.add_counters(
        "inline",
        Box::new(move || {
            let mut v = counter_pairs(&e.counters());
            let mut sums: HashMap<String, u64> = HashMap::new();
            for f in e.flows() {
                for (k, x) in counter_pairs(&f.counters) {
                    *sums.entry(k).or_default() += x;
                }
            }
            let mut sums: Vec<(String, u64)> = sums.into_iter().collect();
            sums.sort();
            v.extend(sums);
            v
        }),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (e, st, h) = (engine.clone(), stop.clone(), hub.clone());
    let thread = std::thread::Builder::new()
        .name("inline-store".into())
        .spawn(move || store_loop(&e, &st, &h))
        .map_err(|e| mgrp_engine::Error::BadInput(format!("inline: spawn: {e}")))?;
    Ok(InlineRun {
        engine,
        stop,
        thread: Some(thread),
    })
}

impl InlineRun {
    pub fn engine(&self) -> &InlineEngine {
        &self.engine
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for InlineRun {
    fn drop(&mut self) {
        self.halt();
    }
}

fn store_loop(e: &InlineEngine, stop: &AtomicBool, hub: &Hub) {
    let mut published: HashMap<FlowKey, u64> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let mut recs = Vec::new();
        for f in e.flows() {
            let Some(est) = &f.estimate else {
                continue;
            };
            let last = published.entry(f.flow).or_insert(0);
            let conn = format!("{}->{}", f.flow.local, f.flow.remote);
            let path = format!("{}->{}", f.flow.local.ip(), f.flow.remote.ip());
            let since = *last;
            for (t, v) in f.history.iter().filter(|(t, _)| *t > since) {
                let mut e = est.clone();
                // The quality tuple is the latest one; the value is the estimate of its time.
                e.value_bps = *v;
                for p in [&conn, &path] {
                    recs.push(from_estimate(
                        Series {
                            path: p,
                            metric: "avail_bw",
                            source: "inline",
                            t_ns: *t,
                        },
                        &e,
                    ));
                }
                *last = *t;
            }
        }
        // Bounded: forget flows the engine forgot.
        if published.len() > 4 * mgrp_engine::inline::MAX_FLOWS {
            let live: Vec<FlowKey> = e.flows().iter().map(|f| f.flow).collect();
            published.retain(|k, _| live.contains(k));
        }
        if !recs.is_empty() {
            if let Err(err) = hub.publish(&recs) {
                eprintln!("mgrp agent: inline: {err}");
            }
        }
    }
}
