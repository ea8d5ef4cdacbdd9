//! Estimates taken on a running testbed, for `mgrp testbed run --estimate`: an agent in rcv, the
//! estimator in snd, each result sent back with the window it covers so the run can print it
//! beside the ground truth of the same window.

use crate::methods::Method;
use anyhow::{anyhow, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::Estimate;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, Testbed};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
}

/// An agent at the receiving end of `tb` (rcv, port 7240) holding `key`, and its address.
pub fn agent_at_rcv(tb: &Testbed, key: &Key) -> Result<(Agent, SocketAddr)> {
    let listen: SocketAddr = format!("{}:7240", Role::Rcv.addr()).parse()?;
    let k = key.clone();
    let agent = spawn_in(&tb.ns(Role::Rcv), "agent", move || {
        Agent::start(AgentConfig::new(listen, k))
            .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
    })?
    .join()
    .map_err(|_| anyhow!("agent thread panicked"))??;
    Ok((agent, listen))
}

/// A worker in snd with one session to the agent at rcv (see [`agent_at_rcv`]): each job sent
/// to it is answered with `f(job, session)`, in order, until the job channel closes.
pub fn session_worker<J, R>(
    tb: &Testbed,
    key: Key,
    name: &str,
    mut f: impl FnMut(J, &mut Session) -> R + Send + 'static,
) -> Result<(Sender<J>, Receiver<R>)>
where
    J: Send + 'static,
    R: Send + 'static,
{
    let (jobs_tx, jobs) = channel::<J>();
    let (tx, results) = channel();
    let listen: SocketAddr = format!("{}:7240", Role::Rcv.addr()).parse()?;
    spawn_in(&tb.ns(Role::Snd), name, move || {
        let pacer =
            Arc::new(Pacer::spawn().map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?);
        let mut s = Session::connect(listen, &key, pacer, Duration::from_secs(3))
            .map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?;
        for job in jobs {
            if tx.send(f(job, &mut s)).is_err() {
                break;
            }
        }
        Ok(())
    })?;
    Ok((jobs_tx, results))
}

pub struct LiveEstimates {
    stop: Arc<AtomicBool>,
    pub results: Receiver<Measured>,
    thread: Option<JoinHandle<Result<(), mgrp_testbed::Error>>>,
    _agent: Agent,
}

impl LiveEstimates {
    /// Start an agent in rcv and keep estimating from snd with `method` (capacity once, then
    /// available bandwidth again and again) until `end` or `stop`.
    pub fn start(tb: &Testbed, method: Method, end: Instant) -> Result<LiveEstimates> {
        let key = Key::random();
        let (agent, listen) = agent_at_rcv(tb, &key)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, results) = channel();
        let stop2 = stop.clone();
        let thread = spawn_in(&tb.ns(Role::Snd), "estimator", move || {
            let fail =
                |e: mgrp_engine::Error| mgrp_testbed::Error::Setup(format!("estimator: {e}"));
            let pacer = Arc::new(Pacer::spawn().map_err(fail)?);
            let mut s =
                Session::connect(listen, &key, pacer, Duration::from_secs(3)).map_err(fail)?;
            let halted = || stop2.load(Ordering::Relaxed);
            let mut capacity = None;
            let report = |kind, start_ns, estimate| {
                let _ = tx.send(Measured {
                    kind,
                    start_ns,
                    end_ns: mgrp_clock::now_ns(),
                    estimate,
                });
            };
            if method.needs_capacity() || method == Method::Capacity {
                let t0 = mgrp_clock::now_ns();
                let mut cap = Method::capacity_estimator();
                let Some(c) = run_estimator(&mut s, &mut cap, end, halted, |_| {}).map_err(fail)?
                else {
                    return Ok(());
                };
                capacity = Some(c.value_bps);
                report("capacity", t0, c);
                if method == Method::Capacity {
                    return Ok(());
                }
            }
            while !halted() && Instant::now() < end {
                let t0 = mgrp_clock::now_ns();
                let mut est = method.build(capacity).map_err(mgrp_testbed::Error::Setup)?;
                let e = run_estimator(&mut s, est.as_mut(), end, halted, |_| {}).map_err(fail)?;
                if let Some(c) = est.capacity().filter(|_| capacity.is_none()) {
                    capacity = Some(c.value_bps);
                    let from = t0;
                    report("capacity", from, c);
                }
                match e {
                    Some(e) if e.final_ => report("available", t0, e),
                    // Nothing came back at all: stop rather than spin.
                    None if capacity.is_none() => return Ok(()),
                    _ => {}
                }
            }
            Ok(())
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
            Some(Err(_)) => Err(anyhow!("estimator thread panicked")),
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
