//! The agent's estimation service: keeps configured paths fresh on a schedule, within a
//! probe-byte budget per minute, and writes every estimate with its quality tuple to the store.

pub mod config;
pub mod http;

use config::{PathSchedule, ServiceConfig};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::{Estimate, Estimator, TrainObs, TrainReq};
use mgrp_store::{Durability, Record, Store};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Builds a method's estimator by name, given the path's capacity if known. For a method that
/// needs the capacity and has none yet, it builds the capacity estimator: that round measures C.
pub type Builder =
    Arc<dyn Fn(&str, Option<f64>) -> Result<Box<dyn Estimator + Send>, String> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] mgrp_store::Error),
    #[error(transparent)]
    Engine(#[from] mgrp_engine::Error),
}

#[derive(Default)]
struct Counters {
    measurements: AtomicU64,
    estimates_stored: AtomicU64,
    skipped_for_budget: AtomicU64,
    cut_by_budget: AtomicU64,
    errors: AtomicU64,
    probe_bytes: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CounterSnapshot {
    pub measurements: u64,
    pub estimates_stored: u64,
    /// Scheduled measurements not started: the minute's budget was spent.
    pub skipped_for_budget: u64,
    /// Measurements stopped before a train that would have exceeded the budget.
    pub cut_by_budget: u64,
    pub errors: u64,
    pub probe_bytes: u64,
}

/// An estimator that refuses any train its remaining byte allowance cannot pay for, and is
/// done from then on: the budget holds train by train, not just between measurements.
pub struct Budgeted<'a> {
    inner: &'a mut dyn Estimator,
    remaining: u64,
    exhausted: bool,
}

impl<'a> Budgeted<'a> {
    pub fn new(inner: &'a mut dyn Estimator, allowance: u64) -> Self {
        Budgeted {
            inner,
            remaining: allowance,
            exhausted: false,
        }
    }

    pub fn exhausted(&self) -> bool {
        self.exhausted
    }
}

impl Estimator for Budgeted<'_> {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainReq> {
        if self.exhausted {
            return None;
        }
        let t = self.inner.poll_train(now_ns)?;
        if t.bytes() > self.remaining {
            self.exhausted = true;
            return None;
        }
        self.remaining -= t.bytes();
        Some(t)
    }
    fn handle_train(&mut self, now_ns: u64, obs: &TrainObs) {
        self.inner.handle_train(now_ns, obs)
    }
    fn estimate(&self) -> Option<Estimate> {
        self.inner.estimate()
    }
    fn is_done(&self) -> bool {
        self.exhausted || self.inner.is_done()
    }
    fn next_wakeup(&self) -> Option<u64> {
        self.inner.next_wakeup()
    }
    fn capacity(&self) -> Option<Estimate> {
        self.inner.capacity()
    }
}

pub struct Service {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    store: Arc<Mutex<Store>>,
    counters: Arc<Counters>,
}

impl Service {
    /// Open the store and start one scheduler thread per configured path.
    pub fn start(cfg: &ServiceConfig, key: Key, build: Builder) -> Result<Service, Error> {
        let store = match &cfg.store {
            Some(p) => Store::open(p, Durability::Process, cfg.retention)?,
            None => Store::in_memory(cfg.retention)?,
        };
        let store = Arc::new(Mutex::new(store));
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let mut threads = Vec::new();
        if !cfg.paths.is_empty() {
            let pacer = Arc::new(Pacer::spawn()?);
            for p in &cfg.paths {
                let (p, key, build) = (p.clone(), key.clone(), build.clone());
                let (stop, store, counters, pacer) =
                    (stop.clone(), store.clone(), counters.clone(), pacer.clone());
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("sched-{}", p.peer))
                        .spawn(move || {
                            keep_fresh(&p, &key, &build, &pacer, &store, &counters, &stop)
                        })
                        .map_err(|e| {
                            mgrp_engine::Error::BadInput(format!("scheduler thread: {e}"))
                        })?,
                );
            }
        }
        Ok(Service {
            stop,
            threads,
            store,
            counters,
        })
    }

    pub fn store(&self) -> Arc<Mutex<Store>> {
        self.store.clone()
    }

    pub fn counters(&self) -> CounterSnapshot {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CounterSnapshot {
            measurements: g(&c.measurements),
            estimates_stored: g(&c.estimates_stored),
            skipped_for_budget: g(&c.skipped_for_budget),
            cut_by_budget: g(&c.cut_by_budget),
            errors: g(&c.errors),
            probe_bytes: g(&c.probe_bytes),
        }
    }

    /// Stop the schedulers (each after its current train) and wait for them.
    pub fn stop(mut self) -> CounterSnapshot {
        self.halt();
        self.counters()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Counters {
    /// Count an error of path `p` and say it on stderr — once, until a different one comes, so a
    /// peer that stays down does not flood the log.
    fn fail(&self, p: &PathSchedule, last: &mut String, why: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if why != last {
            eprintln!("mgrp agent: path to {} ({}): {why}", p.peer, p.method);
            *last = why.to_string();
        }
    }
}

/// Sleep until `until` in short slices, returning early if told to stop.
fn nap(until: Instant, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
    }
}

fn record(path: &str, metric: &str, source: &str, e: &Estimate) -> Record {
    Record {
        path: path.into(),
        metric: metric.into(),
        t_ns: mgrp_clock::realtime_ns(),
        value: e.value_bps,
        low: e.low_bps,
        high: e.high_bps,
        method: e.quality.method.into(),
        source: source.into(),
        probe_bytes: e.quality.probe_bytes,
        trains: e.quality.trains,
        confidence: e.quality.confidence,
        elapsed_s: e.quality.elapsed_s,
        final_: e.final_,
    }
}

fn keep_fresh(
    p: &PathSchedule,
    key: &Key,
    build: &Builder,
    pacer: &Arc<Pacer>,
    store: &Mutex<Store>,
    c: &Counters,
    stop: &AtomicBool,
) {
    let mut session: Option<Session> = None;
    let mut capacity: Option<f64> = None;
    let mut last_error = String::new();
    // Bytes sent in the trailing minute.
    let mut spent: VecDeque<(Instant, u64)> = VecDeque::new();
    let minute = Duration::from_secs(60);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        nap(next, stop);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        next = Instant::now() + p.every;
        let s = match session.as_mut() {
            Some(s) => s,
            None => match Session::connect(p.peer, key, pacer.clone(), Duration::from_secs(3)) {
                Ok(s) => session.insert(s),
                Err(e) => {
                    c.fail(p, &mut last_error, &e.to_string());
                    continue;
                }
            },
        };
        while spent.front().is_some_and(|(t, _)| t.elapsed() >= minute) {
            spent.pop_front();
        }
        let used: u64 = spent.iter().map(|(_, b)| b).sum();
        if used >= p.budget {
            c.skipped_for_budget.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let mut est = match build(&p.method, capacity) {
            Ok(e) => e,
            Err(e) => {
                c.fail(p, &mut last_error, &e);
                continue;
            }
        };
        let mut bounded = Budgeted::new(est.as_mut(), p.budget - used);
        let deadline = Instant::now() + p.every.max(Duration::from_secs(5));
        let mut bytes = 0;
        let result = run_estimator(
            s,
            &mut bounded,
            deadline,
            || stop.load(Ordering::Relaxed),
            |pr| bytes = pr.probe_bytes,
        );
        spent.push_back((Instant::now(), bytes));
        c.probe_bytes.fetch_add(bytes, Ordering::Relaxed);
        c.measurements.fetch_add(1, Ordering::Relaxed);
        if bounded.exhausted() {
            c.cut_by_budget.fetch_add(1, Ordering::Relaxed);
        }
        let cap = bounded.capacity();
        let avail = match result {
            Ok(e) => e,
            Err(e) => {
                // The session is broken: connect again next time.
                c.fail(p, &mut last_error, &e.to_string());
                session = None;
                None
            }
        };
        let path = format!(
            "{}->{}",
            session
                .as_ref()
                .and_then(|s| s.local())
                .map_or("?".to_string(), |a| a.ip().to_string()),
            p.peer.ip()
        );
        let mut recs = Vec::new();
        if let Some(cap) = cap.filter(|e| e.final_) {
            capacity = Some(cap.value_bps);
            recs.push(record(&path, "capacity", "active", &cap));
        }
        // A capacity-only round (the first one of methods that need C) is not an A estimate.
        if let Some(a) = avail.filter(|e| e.final_ && e.quality.method != "capacity") {
            recs.push(record(&path, "avail_bw", "active", &a));
        }
        if !recs.is_empty() {
            let n = recs.len() as u64;
            match store.lock().map(|mut s| s.insert(&recs)) {
                Ok(Ok(())) => {
                    c.estimates_stored.fetch_add(n, Ordering::Relaxed);
                    // Working again: the next failure is news.
                    last_error.clear();
                }
                Ok(Err(e)) => c.fail(p, &mut last_error, &e.to_string()),
                Err(_) => c.fail(p, &mut last_error, "the store's lock is poisoned"),
            }
        }
    }
}
