//! The agent's estimation service: keeps configured paths fresh on a schedule, within a
//! probe-byte budget per minute, and writes every estimate with its quality tuple to the store.

pub mod config;
pub mod http;
pub mod metrics;
pub mod passive;
pub mod watch;

use config::{PassiveSource, PathSchedule, ServiceConfig};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::budget::Budgeted;
use mgrp_estimate::{Estimate, Estimator};
use mgrp_store::{Durability, EstimateStore, Record, Store};
use passive::{PassiveState, PassiveView};
use serde::Serialize;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// A shared store of estimates (any backend).
pub type SharedStore = Arc<Mutex<Box<dyn EstimateStore>>>;

/// Estimates published to subscribers; a subscriber that falls this far behind is told how
/// many it missed.
const EVENT_BUFFER: usize = 1024;

/// What the schedulers, the HTTP API and the metrics share: the store, the feed of new
/// estimates, the schedules' states, the API token.
pub struct Hub {
    store: SharedStore,
    events: tokio::sync::broadcast::Sender<Arc<Record>>,
    paths: RwLock<Vec<Arc<PathState>>>,
    passive: RwLock<Vec<(PassiveSource, Arc<PassiveState>)>>,
    token: RwLock<Option<Arc<str>>>,
    archive: RwLock<Option<Arc<Archive>>>,
    /// Live subscriptions (SSE clients).
    pub subscribers: AtomicU64,
    /// Estimates that subscribers missed because they fell behind.
    pub events_lagged: AtomicU64,
    /// Counters of other components for /metrics (the probe agent, riders), by group.
    counter_groups: RwLock<Vec<(&'static str, AgentCounters)>>,
}

/// Named counters of another component, read at scrape time.
pub type AgentCounters = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// A serializable counter snapshot as (name, value) pairs.
pub fn counter_pairs(v: &impl Serialize) -> Vec<(String, u64)> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_u64()?)))
            .collect(),
        _ => Vec::new(),
    }
}

impl Hub {
    pub fn new(store: Box<dyn EstimateStore>, token: Option<String>) -> Arc<Hub> {
        Arc::new(Hub {
            store: Arc::new(Mutex::new(store)),
            events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
            paths: RwLock::new(Vec::new()),
            passive: RwLock::new(Vec::new()),
            token: RwLock::new(token.map(Into::into)),
            archive: RwLock::new(None),
            subscribers: AtomicU64::new(0),
            events_lagged: AtomicU64::new(0),
            counter_groups: RwLock::new(Vec::new()),
        })
    }

    pub fn store(&self) -> SharedStore {
        self.store.clone()
    }

    /// Store estimates (one transaction), then tell subscribers.
    pub fn publish(&self, recs: &[Record]) -> Result<(), String> {
        self.store
            .lock()
            .map_err(|_| "the store's lock is poisoned".to_string())?
            .insert(recs)
            .map_err(|e| e.to_string())?;
        if let Some(a) = self.archive.read().ok().and_then(|a| a.clone()) {
            a.push(recs);
        }
        for r in recs {
            // No subscriber is not an error.
            let _ = self.events.send(Arc::new(r.clone()));
        }
        Ok(())
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<Record>> {
        self.events.subscribe()
    }

    /// The schedules now running.
    pub fn paths(&self) -> Vec<Arc<PathState>> {
        self.paths.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// The passive sources now running.
    pub fn passive(&self) -> Vec<PassiveView> {
        self.passive
            .read()
            .map(|v| v.iter().map(|(src, st)| st.view(src)).collect())
            .unwrap_or_default()
    }

    pub fn token(&self) -> Option<Arc<str>> {
        self.token.read().ok().and_then(|t| t.clone())
    }

    fn set_token(&self, t: Option<String>) {
        if let Ok(mut g) = self.token.write() {
            *g = t.map(Into::into);
        }
    }

    /// Export another component's counters as `mgrp_<group>_total{counter=...}`.
    pub fn add_counters(&self, group: &'static str, f: AgentCounters) {
        if let Ok(mut g) = self.counter_groups.write() {
            g.retain(|(n, _)| *n != group);
            g.push((group, f));
        }
    }

    /// Every group's counters, read now.
    pub fn counter_groups(&self) -> Vec<(&'static str, Vec<(String, u64)>)> {
        self.counter_groups
            .read()
            .map(|g| g.iter().map(|(n, f)| (*n, f())).collect())
            .unwrap_or_default()
    }

    /// The schedule that measures `path` (`SRC->DST`) or `peer` (`IP` or `IP:PORT`).
    pub fn find_path(&self, path: Option<&str>, peer: Option<&str>) -> Option<Arc<PathState>> {
        self.paths().into_iter().find(|p| {
            let dst = p.sched.peer.ip().to_string();
            let by_path = path.is_some_and(|want| {
                p.name().as_deref() == Some(want)
                    || want.rsplit_once("->").is_some_and(|(_, d)| d == dst)
            });
            let by_peer = peer.is_some_and(|want| {
                want == dst || want.parse::<SocketAddr>().ok() == Some(p.sched.peer)
            });
            by_path || by_peer
        })
    }
}

/// A running schedule as others see it: its configuration, counters, name once connected,
/// last error, and the "measure now" bell.
pub struct PathState {
    pub sched: PathSchedule,
    counters: Counters,
    name: Mutex<Option<String>>,
    last_ns: AtomicU64,
    last_error: Mutex<Option<String>>,
    wake: AtomicBool,
    stop: AtomicBool,
}

/// A schedule's view for the API.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleView {
    pub peer: String,
    pub path: Option<String>,
    pub method: String,
    pub every_s: f64,
    pub budget_bytes_per_min: u64,
    pub last_ns: Option<u64>,
    pub last_error: Option<String>,
    pub counters: CounterSnapshot,
}

impl PathState {
    fn new(sched: PathSchedule) -> PathState {
        PathState {
            sched,
            counters: Counters::default(),
            name: Mutex::new(None),
            last_ns: AtomicU64::new(0),
            last_error: Mutex::new(None),
            wake: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    /// `SRC->DST` once the first session is up.
    pub fn name(&self) -> Option<String> {
        self.name.lock().ok().and_then(|n| n.clone())
    }

    /// Measure at once instead of at the next scheduled time (the budget still holds).
    pub fn measure_now(&self) {
        self.wake.store(true, Ordering::Relaxed);
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    pub fn view(&self) -> ScheduleView {
        let last = self.last_ns.load(Ordering::Relaxed);
        ScheduleView {
            peer: self.sched.peer.to_string(),
            path: self.name(),
            method: self.sched.method.clone(),
            every_s: self.sched.every.as_secs_f64(),
            budget_bytes_per_min: self.sched.budget,
            last_ns: (last > 0).then_some(last),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            counters: self.counters(),
        }
    }

    /// Count an error and say it on stderr — once, until a different one comes, so a peer that
    /// stays down does not flood the log.
    fn fail(&self, why: &str) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            if last.as_deref() != Some(why) {
                eprintln!(
                    "mgrp agent: path to {} ({}): {why}",
                    self.sched.peer, self.sched.method
                );
                *last = Some(why.to_string());
            }
        }
    }

    fn ok(&self) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = None;
        }
    }
}

impl Counters {
    fn snapshot(&self) -> CounterSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CounterSnapshot {
            measurements: g(&self.measurements),
            estimates_stored: g(&self.estimates_stored),
            skipped_for_budget: g(&self.skipped_for_budget),
            cut_by_budget: g(&self.cut_by_budget),
            errors: g(&self.errors),
            probe_bytes: g(&self.probe_bytes),
        }
    }
}

impl std::ops::Add for CounterSnapshot {
    type Output = CounterSnapshot;
    fn add(self, o: CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            measurements: self.measurements + o.measurements,
            estimates_stored: self.estimates_stored + o.estimates_stored,
            skipped_for_budget: self.skipped_for_budget + o.skipped_for_budget,
            cut_by_budget: self.cut_by_budget + o.cut_by_budget,
            errors: self.errors + o.errors,
            probe_bytes: self.probe_bytes + o.probe_bytes,
        }
    }
}

/// What a reload changed, and what it could not change without a restart.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ReloadReport {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub kept: usize,
    pub token_changed: bool,
    /// Settings that differ but only take effect at the next start.
    pub need_restart: Vec<String>,
}

struct Running {
    state: Arc<PathState>,
    thread: JoinHandle<()>,
}

struct RunningPassive {
    src: PassiveSource,
    state: Arc<PassiveState>,
    thread: JoinHandle<()>,
}

pub struct Service {
    hub: Arc<Hub>,
    cfg: ServiceConfig,
    key: Key,
    pacer: Option<Arc<Pacer>>,
    riders: Option<Arc<mgrp_engine::riders::RiderSender>>,
    running: Vec<Running>,
    passive: Vec<RunningPassive>,
    /// Counters of schedules stopped by reloads, so totals never go backwards.
    retired: CounterSnapshot,
}

/// Open the store a configuration names.
pub fn open_store(cfg: &ServiceConfig) -> Result<Box<dyn EstimateStore>, Error> {
    Ok(match &cfg.store {
        Some(config::StoreAt::File(p)) => {
            Box::new(Store::open(p, Durability::Process, cfg.retention)?)
        }
        Some(config::StoreAt::Postgres(url)) => {
            Box::new(mgrp_store_pg::PgStore::connect(url, cfg.retention)?)
        }
        None => Box::new(Store::in_memory(cfg.retention)?),
    })
}

/// Estimates waiting for the archive at most; beyond, they are dropped and counted (the local
/// store still has them).
const ARCHIVE_QUEUE: usize = 1024;

/// Pushes copies of estimates to a central PostgreSQL archive from its own thread, so a slow or
/// absent archive never holds up measurement.
pub struct Archive {
    tx: Option<std::sync::mpsc::SyncSender<Vec<Record>>>,
    thread: Option<JoinHandle<()>>,
    pushed: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Archive {
    /// Connect (a failure here is the operator's to fix: refuse to start) and start pushing.
    pub fn start(url: &str, retention: Duration) -> Result<Archive, Error> {
        let mut pg = mgrp_store_pg::PgStore::connect(url, retention)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Record>>(ARCHIVE_QUEUE);
        let pushed = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (p, f) = (pushed.clone(), failed.clone());
        let thread = std::thread::Builder::new()
            .name("archive".into())
            .spawn(move || {
                let mut last = String::new();
                for recs in rx {
                    match pg.insert(&recs) {
                        Ok(()) => {
                            p.fetch_add(recs.len() as u64, Ordering::Relaxed);
                            last.clear();
                        }
                        Err(e) => {
                            f.fetch_add(recs.len() as u64, Ordering::Relaxed);
                            let why = e.to_string();
                            if why != last {
                                eprintln!("mgrp agent: archive: {why}");
                                last = why;
                            }
                        }
                    }
                }
            })
            .map_err(|e| mgrp_engine::Error::BadInput(format!("archive thread: {e}")))?;
        Ok(Archive {
            tx: Some(tx),
            thread: Some(thread),
            pushed,
            dropped: Arc::new(AtomicU64::new(0)),
            failed,
        })
    }

    fn push(&self, recs: &[Record]) {
        if let Some(tx) = &self.tx {
            if tx.try_send(recs.to_vec()).is_err() {
                self.dropped.fetch_add(recs.len() as u64, Ordering::Relaxed);
            }
        }
    }

    pub fn counters(&self) -> Vec<(String, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("pushed".into(), g(&self.pushed)),
            ("dropped".into(), g(&self.dropped)),
            ("failed".into(), g(&self.failed)),
        ]
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the queue is written.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Service {
    /// Open the store and start one scheduler thread per configured path.
    pub fn start(cfg: &ServiceConfig, key: Key) -> Result<Service, Error> {
        let hub = Hub::new(open_store(cfg)?, cfg.token.clone());
        if let Some(url) = &cfg.archive {
            let a = Arc::new(Archive::start(url, cfg.retention)?);
            let c = a.clone();
            hub.add_counters("archive", Box::new(move || c.counters()));
            if let Ok(mut g) = hub.archive.write() {
                *g = Some(a);
            }
        }
        let riders = match &cfg.riders {
            Some(r) => {
                let sender = Arc::new(mgrp_engine::riders::RiderSender::start(
                    &mgrp_engine::riders::RiderConfig {
                        dev: r.dev.clone(),
                        opt_in: r.opt_in.clone(),
                        hold: r.hold,
                        ratio: r.ratio,
                    },
                    key.clone(),
                )?);
                let s = sender.clone();
                hub.add_counters(
                    "riders_sent",
                    Box::new(move || {
                        let mut v = counter_pairs(&s.counters());
                        if let Some(b) = s.buffer_counters() {
                            v.extend(
                                counter_pairs(&b)
                                    .into_iter()
                                    .map(|(k, x)| (format!("buffer_{k}"), x)),
                            );
                        }
                        v
                    }),
                );
                Some(sender)
            }
            None => None,
        };
        let mut svc = Service {
            hub,
            cfg: cfg.clone(),
            key,
            riders,
            pacer: None,
            running: Vec::new(),
            passive: Vec::new(),
            retired: CounterSnapshot::default(),
        };
        for p in &cfg.paths {
            svc.start_path(p.clone())?;
        }
        for p in &cfg.passive {
            svc.start_passive(p.clone())?;
        }
        Ok(svc)
    }

    fn start_passive(&mut self, src: PassiveSource) -> Result<(), Error> {
        let state = Arc::new(PassiveState::default());
        let (hub, st, s) = (self.hub.clone(), state.clone(), src.clone());
        let thread = std::thread::Builder::new()
            .name(format!("passive-{}", src.iface))
            .spawn(move || passive::run(&s, &st, &hub))
            .map_err(|e| mgrp_engine::Error::BadInput(format!("passive thread: {e}")))?;
        self.passive.push(RunningPassive { src, state, thread });
        self.publish_passive();
        Ok(())
    }

    fn publish_passive(&self) {
        if let Ok(mut g) = self.hub.passive.write() {
            *g = self
                .passive
                .iter()
                .map(|r| (r.src.clone(), r.state.clone()))
                .collect();
        }
    }

    fn start_path(&mut self, p: PathSchedule) -> Result<(), Error> {
        let pacer = match &self.pacer {
            Some(p) => p.clone(),
            None => self.pacer.insert(Arc::new(Pacer::spawn()?)).clone(),
        };
        let state = Arc::new(PathState::new(p.clone()));
        let (key, hub, st, riders) = (
            self.key.clone(),
            self.hub.clone(),
            state.clone(),
            self.riders.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("sched-{}", p.peer))
            .spawn(move || keep_fresh(&st, &key, &pacer, &hub, riders))
            .map_err(|e| mgrp_engine::Error::BadInput(format!("scheduler thread: {e}")))?;
        self.running.push(Running { state, thread });
        self.publish_paths();
        Ok(())
    }

    fn publish_paths(&self) {
        if let Ok(mut g) = self.hub.paths.write() {
            *g = self.running.iter().map(|r| r.state.clone()).collect();
        }
    }

    pub fn hub(&self) -> Arc<Hub> {
        self.hub.clone()
    }

    pub fn store(&self) -> SharedStore {
        self.hub.store()
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.cfg
    }

    /// Totals over all schedules, including those stopped by reloads.
    pub fn counters(&self) -> CounterSnapshot {
        self.running
            .iter()
            .fold(self.retired, |acc, r| acc + r.state.counters())
    }

    /// Apply a new configuration without a restart: schedules that changed are stopped and
    /// started anew, unchanged ones keep running (and their history of bytes spent), the token
    /// is replaced. Store, retention and the HTTP address need a restart; the report says so.
    pub fn reload(&mut self, new: &ServiceConfig) -> Result<ReloadReport, Error> {
        let mut rep = ReloadReport::default();
        if new.store != self.cfg.store {
            rep.need_restart.push("store".into());
        }
        if new.archive != self.cfg.archive {
            rep.need_restart.push("archive".into());
        }
        if new.retention != self.cfg.retention {
            rep.need_restart.push("retention".into());
        }
        if new.http != self.cfg.http {
            rep.need_restart.push("http".into());
        }
        if new.riders != self.cfg.riders {
            rep.need_restart.push("riders".into());
        }
        if new.token != self.cfg.token {
            self.hub.set_token(new.token.clone());
            rep.token_changed = true;
        }
        let (keep, stop): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| new.paths.contains(&r.state.sched));
        self.running = keep;
        self.publish_paths();
        for r in &stop {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in stop {
            let _ = r.thread.join();
            self.retired = self.retired + r.state.counters();
            rep.stopped.push(describe(&r.state.sched));
        }
        let (keep, stop): (Vec<RunningPassive>, Vec<RunningPassive>) =
            std::mem::take(&mut self.passive)
                .into_iter()
                .partition(|r| new.passive.contains(&r.src));
        self.passive = keep;
        self.publish_passive();
        for r in &stop {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in stop {
            let _ = r.thread.join();
            rep.stopped.push(format!("passive on {}", r.src.iface));
        }
        rep.kept = self.running.len() + self.passive.len();
        for p in &new.paths {
            if !self.running.iter().any(|r| r.state.sched == *p) {
                self.start_path(p.clone())?;
                rep.started.push(describe(p));
            }
        }
        for p in &new.passive {
            if !self.passive.iter().any(|r| r.src == *p) {
                self.start_passive(p.clone())?;
                rep.started.push(format!("passive on {}", p.iface));
            }
        }
        let (store, retention, http) = (self.cfg.store.clone(), self.cfg.retention, self.cfg.http);
        self.cfg = new.clone();
        // What was not applied stays as it runs.
        self.cfg.store = store;
        self.cfg.retention = retention;
        self.cfg.http = http;
        Ok(rep)
    }

    /// Stop the schedulers (each after its current train) and wait for them.
    pub fn stop(mut self) -> CounterSnapshot {
        self.halt();
        self.retired
    }

    fn halt(&mut self) {
        for r in &self.running {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in &self.passive {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in self.passive.drain(..) {
            let _ = r.thread.join();
        }
        if let Ok(mut g) = self.hub.passive.write() {
            g.clear();
        }
        for r in self.running.drain(..) {
            let _ = r.thread.join();
            self.retired = self.retired + r.state.counters();
        }
        if let Ok(mut g) = self.hub.paths.write() {
            g.clear();
        }
    }
}

fn describe(p: &PathSchedule) -> String {
    format!(
        "{} {} every {:?}, {} B/min",
        p.peer, p.method, p.every, p.budget
    )
}

impl Drop for Service {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Sleep until `until` in short slices, returning early if told to stop or to measure now.
fn nap(until: Instant, st: &PathState) {
    while !st.stop.load(Ordering::Relaxed)
        && !st.wake.swap(false, Ordering::Relaxed)
        && Instant::now() < until
    {
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
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
    st: &PathState,
    key: &Key,
    pacer: &Arc<Pacer>,
    hub: &Hub,
    riders: Option<Arc<mgrp_engine::riders::RiderSender>>,
) {
    let p = &st.sched;
    let c = &st.counters;
    let stop = &st.stop;
    let mut session: Option<Session> = None;
    let mut capacity: Option<f64> = None;
    // Bytes sent in the trailing minute.
    let mut spent: VecDeque<(Instant, u64)> = VecDeque::new();
    let minute = Duration::from_secs(60);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        nap(next, st);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        next = Instant::now() + p.every;
        let s = match session.as_mut() {
            Some(s) => s,
            None => match Session::connect_marked(
                p.peer,
                key,
                pacer.clone(),
                Duration::from_secs(3),
                // With riders on, the session's own sockets must not take the riders' route.
                riders.as_ref().map(|_| mgrp_shim::BYPASS_MARK),
            ) {
                Ok(s) => {
                    let s = match &riders {
                        Some(r) => s.with_riders(r.clone()),
                        None => s,
                    };
                    if let Ok(mut n) = st.name.lock() {
                        *n = Some(format!(
                            "{}->{}",
                            s.local().map_or("?".to_string(), |a| a.ip().to_string()),
                            p.peer.ip()
                        ));
                    }
                    session.insert(s)
                }
                Err(e) => {
                    st.fail(&e.to_string());
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
        // Rider-aware: the host's own bytes that rode in the probes are taken off the estimate.
        // A method that needs the capacity measures it first while none is known.
        let built = mgrp_estimate::methods::Method::from_name(&p.method)
            .and_then(|m| m.build(capacity))
            .map_err(|e| e.to_string());
        let mut est = match built {
            Ok(e) => mgrp_estimate::riders::RiderAware::new(e),
            Err(e) => {
                st.fail(&e);
                continue;
            }
        };
        let mut bounded = Budgeted::new(&mut est, p.budget - used);
        let deadline = Instant::now() + p.every.max(Duration::from_secs(5));
        let mut bytes = 0;
        let result = run_estimator(
            s,
            &mut bounded,
            deadline,
            || stop.load(Ordering::Relaxed),
            |pr| bytes = pr.probe_bytes,
        );
        let rtt = s.control_rtt();
        spent.push_back((Instant::now(), bytes));
        c.probe_bytes.fetch_add(bytes, Ordering::Relaxed);
        c.measurements.fetch_add(1, Ordering::Relaxed);
        st.last_ns
            .store(mgrp_clock::realtime_ns(), Ordering::Relaxed);
        if bounded.exhausted() {
            c.cut_by_budget.fetch_add(1, Ordering::Relaxed);
        }
        let cap = bounded.capacity();
        let (sent, lost) = (bounded.probes_sent, bounded.probes_lost);
        let avail = match result {
            Ok(e) => e,
            Err(e) => {
                // The session is broken: connect again next time.
                st.fail(&e.to_string());
                session = None;
                None
            }
        };
        let Some(path) = st.name() else { continue };
        let mut recs = Vec::new();
        if let Some(cap) = cap.filter(|e| e.final_) {
            capacity = Some(cap.value_bps);
            recs.push(record(&path, "capacity", "active", &cap));
        }
        // A capacity-only round (the first one of methods that need C) is not an A estimate.
        if let Some(a) = avail.filter(|e| e.final_ && e.quality.method != "capacity") {
            recs.push(record(&path, "avail_bw", "active", &a));
        }
        if let Some((srtt, var)) = rtt.filter(|_| session.is_some()) {
            recs.push(scalar(
                &path,
                "rtt",
                "tcp_info",
                srtt.as_secs_f64(),
                (
                    srtt.saturating_sub(var).as_secs_f64(),
                    (srtt + var).as_secs_f64(),
                ),
            ));
        }
        if sent > 0 {
            // Probe loss: the share of this measurement's probes that did not arrive (probe
            // streams above A may cause some of it themselves).
            let share = lost as f64 / sent as f64;
            let mut r = scalar(&path, "loss", &p.method, share, (share, share));
            r.probe_bytes = bytes;
            recs.push(r);
        }
        if !recs.is_empty() {
            let n = recs.len() as u64;
            match hub.publish(&recs) {
                Ok(()) => {
                    c.estimates_stored.fetch_add(n, Ordering::Relaxed);
                    // Working again: the next failure is news.
                    st.ok();
                }
                Err(e) => st.fail(&e),
            }
        }
    }
}

/// A measured quantity that is not an estimator's output (RTT from the kernel, probe loss).
fn scalar(path: &str, metric: &str, method: &str, value: f64, range: (f64, f64)) -> Record {
    Record {
        path: path.into(),
        metric: metric.into(),
        t_ns: mgrp_clock::realtime_ns(),
        value,
        low: range.0,
        high: range.1,
        method: method.into(),
        source: "active".into(),
        probe_bytes: 0,
        trains: 0,
        confidence: 1.0,
        elapsed_s: 0.0,
        final_: true,
    }
}
