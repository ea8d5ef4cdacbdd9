//! The queries the agent runs: each a [`PathState`] driven by its own thread (the schedules'
//! driver, so the budget holds train by train), its conditions watched as estimates are
//! published, its notifications broadcast to `/v1/events?query=ID` subscribers.

use super::spec::{Mode, QuerySpec, MAX_PER_CLIENT, MAX_QUERIES, MAX_TOTAL_BUDGET};
use crate::driver::Driver;
use crate::hub::Hub;
use crate::path::{CounterSnapshot, PathState};
use crate::watch::{Kind, Watch};
use mgrp_engine::auth::Key;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::riders::RiderSender;
use mgrp_store::Record;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// Query notifications a slow subscriber may fall behind by.
const EVENT_BUFFER: usize = 256;

/// What a query's thread needs that only a running service has.
pub struct Runner {
    pub key: Key,
    pub riders: Option<Arc<RiderSender>>,
    pub hub: Weak<Hub>,
    pacer: Option<Arc<Pacer>>,
}

impl Runner {
    pub fn new(key: Key, riders: Option<Arc<RiderSender>>, hub: Weak<Hub>) -> Runner {
        Runner {
            key,
            riders,
            hub,
            pacer: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Limit(String),
    #[error("no query {0:?} (see /v1/queries)")]
    Unknown(String),
    #[error("this agent runs no queries: it has no probe engine (started without the service)")]
    NoRunner,
    #[error("cannot keep the query: {0}")]
    Store(String),
    #[error("cannot start the query's thread: {0}")]
    Thread(String),
}

/// A notification of an event-driven query: its condition started (`below`, `exceeds`) or
/// stopped (`above`, `within`) holding.
#[derive(Debug, Clone, Serialize)]
pub struct QueryEvent {
    pub kind: &'static str,
    pub query: String,
    /// `below`, `above` (back over `below`), `exceeds`, `within` (back under `exceeds`).
    pub condition: &'static str,
    /// Whether the condition holds now.
    pub holds: bool,
    pub path: String,
    pub metric: String,
    pub value: f64,
    pub threshold: Option<f64>,
    pub record: Record,
}

/// A query as `GET /v1/queries` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct QueryView {
    #[serde(flatten)]
    pub spec: QuerySpec,
    /// `running`, `done` (a once query with its result), `failing` (see `last_error`),
    /// `budget_exhausted`, `stopped` (the agent runs no queries now).
    pub status: &'static str,
    pub path: Option<String>,
    pub last_ns: Option<u64>,
    pub last_error: Option<String>,
    pub budget_exhausted: bool,
    pub counters: CounterSnapshot,
    /// Notifications sent (event queries).
    pub events: u64,
    pub last_event: Option<QueryEvent>,
    /// The newest estimate of the query's metric on its path.
    pub result: Option<Record>,
}

struct Entry {
    spec: QuerySpec,
    state: Arc<PathState>,
    thread: Option<JoinHandle<()>>,
    watch: Watch,
    events: u64,
    last_event: Option<QueryEvent>,
}

#[derive(Default)]
struct Inner {
    runner: Option<Runner>,
    entries: Vec<Entry>,
}

pub struct QueryBook {
    inner: Mutex<Inner>,
    events: tokio::sync::broadcast::Sender<Arc<QueryEvent>>,
}

impl Default for QueryBook {
    fn default() -> Self {
        QueryBook {
            inner: Mutex::default(),
            events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
        }
    }
}

fn state_for(spec: &QuerySpec) -> PathState {
    let st = PathState::new(spec.schedule(), spec.budget_bytes_per_min);
    if spec.mode == Mode::Once {
        st.once(&spec.metric)
    } else {
        st
    }
}

impl QueryBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start running queries: those kept in the store first. Returns how many were resumed.
    pub fn attach(&self, runner: Runner, hub: &Arc<Hub>) -> usize {
        let kept = hub
            .store
            .lock()
            .ok()
            .and_then(|s| {
                s.queries()
                    .map_err(|e| eprintln!("mgrp agent: queries: {e}"))
                    .ok()
            })
            .unwrap_or_default();
        let mut g = self.lock();
        g.runner = Some(runner);
        let mut n = 0;
        for (id, json) in kept {
            let spec: QuerySpec = match serde_json::from_str(&json) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!(
                        "mgrp agent: query {id} kept in the store does not read ({e}); skipped"
                    );
                    continue;
                }
            };
            if g.entries.iter().any(|e| e.spec.id == spec.id) {
                continue;
            }
            let state = Arc::new(state_for(&spec));
            match start(&mut g, &state) {
                Ok(t) => {
                    g.entries.push(Entry {
                        watch: Watch::new(spec.conditions()),
                        spec,
                        state,
                        thread: Some(t),
                        events: 0,
                        last_event: None,
                    });
                    n += 1;
                }
                Err(e) => eprintln!("mgrp agent: query {id}: {e}"),
            }
        }
        n
    }

    /// Stop every query's thread (they stay in the store and in the list, `stopped`).
    pub fn detach(&self) {
        let threads: Vec<(Arc<PathState>, JoinHandle<()>)> = {
            let mut g = self.lock();
            g.runner = None;
            g.entries
                .iter_mut()
                .filter_map(|e| Some((e.state.clone(), e.thread.take()?)))
                .collect()
        };
        for (st, _) in &threads {
            st.stop.store(true, Ordering::Relaxed);
        }
        for (_, t) in threads {
            let _ = t.join();
        }
        self.lock().entries.clear();
    }

    /// Accept a checked query: within the bounds, kept in the store, then started.
    pub fn create(&self, spec: QuerySpec, hub: &Hub) -> Result<QueryView, QueryError> {
        let mut g = self.lock();
        if g.runner.is_none() {
            return Err(QueryError::NoRunner);
        }
        if g.entries.len() >= MAX_QUERIES {
            return Err(QueryError::Limit(format!(
                "the agent holds {MAX_QUERIES} queries, its most: delete one first"
            )));
        }
        let mine = g
            .entries
            .iter()
            .filter(|e| e.spec.owner == spec.owner)
            .count();
        if mine >= MAX_PER_CLIENT {
            return Err(QueryError::Limit(format!(
                "client {} holds {MAX_PER_CLIENT} queries, the most one client may: delete one first",
                spec.owner
            )));
        }
        let total: u64 = g.entries.iter().map(|e| e.spec.budget_bytes_per_min).sum();
        if total + spec.budget_bytes_per_min > MAX_TOTAL_BUDGET {
            return Err(QueryError::Limit(format!(
                "queries already hold {total} of {MAX_TOTAL_BUDGET} B/min of probe budget; {} more does not fit",
                spec.budget_bytes_per_min
            )));
        }
        let json = serde_json::to_string(&spec).map_err(|e| QueryError::Store(e.to_string()))?;
        hub.store
            .lock()
            .map_err(|_| QueryError::Store("the store's lock is poisoned".into()))?
            .put_query(&spec.id, &json)
            .map_err(|e| QueryError::Store(e.to_string()))?;
        let state = Arc::new(state_for(&spec));
        let thread = match start(&mut g, &state) {
            Ok(t) => t,
            Err(e) => {
                if let Ok(mut s) = hub.store.lock() {
                    let _ = s.delete_query(&spec.id);
                }
                return Err(e);
            }
        };
        let e = Entry {
            watch: Watch::new(spec.conditions()),
            spec,
            state,
            thread: Some(thread),
            events: 0,
            last_event: None,
        };
        let v = view(&e, None);
        g.entries.push(e);
        Ok(v)
    }

    /// Stop and forget a query (also in the store).
    pub fn delete(&self, id: &str, hub: &Hub) -> Result<(), QueryError> {
        let e = {
            let mut g = self.lock();
            let i = g
                .entries
                .iter()
                .position(|e| e.spec.id == id)
                .ok_or_else(|| QueryError::Unknown(id.into()))?;
            g.entries.remove(i)
        };
        e.state.stop.store(true, Ordering::Relaxed);
        hub.store
            .lock()
            .map_err(|_| QueryError::Store("the store's lock is poisoned".into()))?
            .delete_query(id)
            .map_err(|e| QueryError::Store(e.to_string()))?;
        if let Some(t) = e.thread {
            // The driver stops after its current train: not on the API's thread.
            std::thread::spawn(move || t.join());
        }
        Ok(())
    }

    /// Every query, with its newest result from `hub`'s store.
    pub fn list(&self, hub: &Hub) -> Vec<QueryView> {
        let g = self.lock();
        let store = hub.store.lock().ok();
        g.entries
            .iter()
            .map(|e| {
                let result = e
                    .state
                    .name()
                    .and_then(|p| store.as_ref()?.latest(&p, &e.spec.metric).ok().flatten());
                view(e, result)
            })
            .collect()
    }

    pub fn get(&self, id: &str, hub: &Hub) -> Result<QueryView, QueryError> {
        self.list(hub)
            .into_iter()
            .find(|v| v.spec.id == id)
            .ok_or_else(|| QueryError::Unknown(id.into()))
    }

    pub fn exists(&self, id: &str) -> bool {
        self.lock().entries.iter().any(|e| e.spec.id == id)
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state of a query that `matches` (so `/v1/estimate` can name and measure its path):
    /// a running one first, as only it can measure again; else a finished once query, whose
    /// path and stored result still answer.
    pub(crate) fn find(&self, matches: impl Fn(&PathState) -> bool) -> Option<Arc<PathState>> {
        let g = self.lock();
        let running = |e: &&Entry| e.thread.as_ref().is_some_and(|t| !t.is_finished());
        let hit = |e: &&Entry| matches(&e.state);
        g.entries
            .iter()
            .filter(running)
            .find(hit)
            .or_else(|| g.entries.iter().find(hit))
            .map(|e| e.state.clone())
    }

    /// Estimates were published: event queries on their path and metric check their condition.
    pub(crate) fn observe(&self, recs: &[Record]) {
        let mut g = self.lock();
        for e in g.entries.iter_mut().filter(|e| e.spec.mode == Mode::Event) {
            let Some(path) = e.state.name() else { continue };
            for r in recs
                .iter()
                .filter(|r| r.path == path && r.metric == e.spec.metric)
            {
                for ev in e.watch.on_record(r) {
                    let (condition, holds) = match ev.kind {
                        Kind::Below => ("below", true),
                        Kind::Above => ("above", false),
                        Kind::Exceeds => ("exceeds", true),
                        Kind::Within => ("within", false),
                        _ => continue,
                    };
                    let qe = QueryEvent {
                        kind: "query",
                        query: e.spec.id.clone(),
                        condition,
                        holds,
                        path: ev.path,
                        metric: ev.metric,
                        value: ev.value,
                        threshold: ev.threshold,
                        record: ev.record,
                    };
                    e.events += 1;
                    e.last_event = Some(qe.clone());
                    // No subscriber is not an error.
                    let _ = self.events.send(Arc::new(qe));
                }
            }
        }
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<QueryEvent>> {
        self.events.subscribe()
    }
}

fn start(g: &mut Inner, state: &Arc<PathState>) -> Result<JoinHandle<()>, QueryError> {
    let r = g.runner.as_mut().ok_or(QueryError::NoRunner)?;
    let hub = r.hub.upgrade().ok_or(QueryError::NoRunner)?;
    let pacer = match &r.pacer {
        Some(p) => p.clone(),
        None => r
            .pacer
            .insert(Arc::new(
                Pacer::spawn().map_err(|e| QueryError::Thread(e.to_string()))?,
            ))
            .clone(),
    };
    let driver = Driver {
        st: state.clone(),
        key: r.key.clone(),
        pacer,
        hub,
        riders: r.riders.clone(),
    };
    std::thread::Builder::new()
        .name(format!("query-{}", state.sched.peer))
        .spawn(move || driver.run())
        .map_err(|e| QueryError::Thread(e.to_string()))
}

fn view(e: &Entry, result: Option<Record>) -> QueryView {
    let s = e.state.view();
    let running = e.thread.as_ref().is_some_and(|t| !t.is_finished());
    let status = if e.state.is_done() && result.is_some() {
        "done"
    } else if s.budget_exhausted {
        "budget_exhausted"
    } else if s.last_error.is_some() {
        "failing"
    } else if running {
        "running"
    } else if e.state.is_done() {
        "done"
    } else {
        "stopped"
    };
    QueryView {
        spec: e.spec.clone(),
        status,
        path: s.path,
        last_ns: s.last_ns,
        last_error: s.last_error,
        budget_exhausted: s.budget_exhausted,
        counters: s.counters,
        events: e.events,
        last_event: e.last_event.clone(),
        result,
    }
}
