//! Estimates taken on a running testbed, for `mgrp testbed run --estimate`: an agent in rcv, the
//! estimator in snd, each result sent back with the window it covers so the run can set it
//! beside the ground truth of the same window.

use crate::rig::{agent_at_rcv, connect};
use crate::{Error, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::daemon::Agent;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::methods::Method;
use mgrp_estimate::{Estimate, Estimator};
use mgrp_service::track::PacedTracker;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, Testbed};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// One estimate and the CLOCK_MONOTONIC window it was measured over.
pub struct Measured {
    pub kind: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub estimate: Estimate,
}

/// An estimate beside the truth of its window, as reported.
#[derive(Serialize, Clone)]
pub struct Row {
    pub kind: &'static str,
    pub method: &'static str,
    pub start_s: f64,
    pub end_s: f64,
    pub value_bps: f64,
    pub low_bps: f64,
    pub high_bps: f64,
    pub truth_bps: f64,
    pub rel_error: f64,
    pub probe_bytes: u64,
    pub trains: u32,
    pub final_: bool,
    /// Tracking: frames the bottleneck counted from snd (probes and control) in the minute
    /// before the estimate, as a share of C × 1 minute (the ceiling's bound; the API's
    /// `probe_load_share`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_share: Option<f64>,
}

impl Row {
    /// `m` against `truth_bps`, its times from `origin_ns`.
    pub fn new(m: &Measured, truth_bps: f64, origin_ns: u64) -> Row {
        let e = &m.estimate;
        Row {
            kind: m.kind,
            method: e.quality.method,
            start_s: m.start_ns.saturating_sub(origin_ns) as f64 / 1e9,
            end_s: m.end_ns.saturating_sub(origin_ns) as f64 / 1e9,
            value_bps: e.value_bps,
            low_bps: e.low_bps,
            high_bps: e.high_bps,
            truth_bps,
            rel_error: (e.value_bps - truth_bps) / truth_bps.max(1.0),
            probe_bytes: e.quality.probe_bytes,
            trains: e.quality.trains,
            final_: e.final_,
            load_share: None,
        }
    }
}

pub struct LiveEstimates {
    stop: Arc<AtomicBool>,
    pub results: Receiver<Measured>,
    thread: Option<JoinHandle<Result<(), mgrp_testbed::Error>>>,
    _agent: Agent,
}

impl LiveEstimates {
    /// Start an agent in rcv and keep estimating from snd with `method` (capacity once, then
    /// available bandwidth again and again) until `end` or `halt`.
    pub fn start(tb: &Testbed, method: Method, end: Instant) -> Result<LiveEstimates> {
        Self::spawn(tb, "estimator", move |s, halted, tx| {
            let report = |kind, start_ns, end_ns, estimate| {
                let _ = tx.send(Measured {
                    kind,
                    start_ns,
                    end_ns,
                    estimate,
                });
            };
            let mut capacity = None;
            while !halted() && Instant::now() < end {
                let t0 = mgrp_clock::now_ns();
                let mut est = method.build(capacity).map_err(|e| e.to_string())?;
                let e =
                    run_estimator(s, &mut est, end, halted, |_| {}).map_err(|e| e.to_string())?;
                let now = mgrp_clock::now_ns();
                // The method's own run starts after the capacity step (if it had one).
                let from = est.method_start_ns().unwrap_or(t0);
                if let Some(c) = est.capacity().filter(|_| capacity.is_none()) {
                    capacity = Some(c.value_bps);
                    // A capacity step ends where the method starts; `auto` measures its own
                    // within its run.
                    let until = if method.needs_capacity() { from } else { now };
                    report("capacity", t0, until.max(t0), c);
                    if method == Method::Capacity {
                        return Ok(());
                    }
                }
                match e {
                    Some(e) if e.final_ && method.estimates_available() => {
                        report("available", from, now, e)
                    }
                    // Nothing came back at all: stop rather than spin.
                    None if capacity.is_none() => return Ok(()),
                    _ => {}
                }
            }
            Ok(())
        })
    }

    /// Start an agent in rcv and track the path from snd as the service does
    /// ([`PacedTracker`]: its default 2% ceiling over any trailing minute; the acquiring search
    /// measures C) until `end` or `halt`: every round that concludes is reported as a
    /// `tracked` estimate of the second before it.
    pub fn start_tracking(tb: &Testbed, end: Instant) -> Result<LiveEstimates> {
        Self::spawn(tb, "tracker", move |s, halted, tx| {
            let ceiling = mgrp_service::config::DEFAULT_CEILING;
            let mut pt = PacedTracker::new(None, ceiling, mgrp_clock::now_ns())?;
            let mut capacity_told = false;
            while !halted() && Instant::now() < end {
                let now = mgrp_clock::now_ns();
                if now < pt.next_round_at() {
                    let wait = (pt.next_round_at() - now).min(20_000_000);
                    std::thread::sleep(std::time::Duration::from_nanos(wait));
                    continue;
                }
                let Some(r) = pt.run_round(s, end, halted).map_err(|e| e.to_string())? else {
                    continue;
                };
                let (t0, now) = (r.start_ns, r.end_ns);
                let t = pt.tracker();
                if let Some(c) = t.capacity().filter(|_| !capacity_told) {
                    capacity_told = true;
                    let _ = tx.send(Measured {
                        kind: "capacity",
                        start_ns: t0,
                        end_ns: now,
                        estimate: c,
                    });
                }
                if let Some(e) = t.held().filter(|_| t.round_concluded()) {
                    let _ = tx.send(Measured {
                        kind: "tracked",
                        start_ns: now.saturating_sub(1_000_000_000).max(t0.min(now)),
                        end_ns: now,
                        estimate: e.clone(),
                    });
                }
            }
            Ok(())
        })
    }

    /// An agent in rcv, and `body` in a thread in snd with a session to it, told whether to
    /// halt and where to send its results; its error is reported as `name`'s.
    fn spawn(
        tb: &Testbed,
        name: &'static str,
        body: impl FnOnce(&mut Session, &dyn Fn() -> bool, Sender<Measured>) -> Result<(), String>
            + Send
            + 'static,
    ) -> Result<LiveEstimates> {
        let key = Key::random();
        let (agent, listen) = agent_at_rcv(tb, &key)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, results) = channel();
        let stop2 = stop.clone();
        let thread = spawn_in(&tb.ns(Role::Snd), name, move || {
            let fail = |e: String| mgrp_testbed::Error::Setup(format!("{name}: {e}"));
            let mut s = connect(listen, &key).map_err(|e| fail(e.to_string()))?;
            let halted = || stop2.load(Ordering::Relaxed);
            body(&mut s, &halted, tx).map_err(fail)
        })?;
        Ok(LiveEstimates {
            stop,
            results,
            thread: Some(thread),
            _agent: agent,
        })
    }

    /// Ask the estimator to stop after its current train.
    pub fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stop estimating; an error the estimator hit, if any.
    pub fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Err(e))) => Err(e.into()),
            Some(Err(_)) => Err(Error::Worker("estimator thread panicked".into())),
            _ => Ok(()),
        }
    }
}

impl Drop for LiveEstimates {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
