//! What the schedulers, the HTTP API and the metrics share: the store, the feed of new
//! estimates (publish/subscribe), the running schedules' and passive sources' states, the API
//! token, and other components' counters for /metrics.

use crate::archive::Archive;
use crate::config::PassiveSource;
use crate::passive::{PassiveState, PassiveView};
use crate::path::PathState;
use crate::transfer::{TransferState, TransferView};
use crate::SharedStore;
use mgrp_store::{EstimateStore, Record};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

/// Estimates published to subscribers; a subscriber that falls this far behind is told how
/// many it missed.
const EVENT_BUFFER: usize = 1024;

/// Named counters of another component, read at scrape time.
pub type AgentCounters = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// A serializable counter snapshot as (name, value) pairs (for components whose counters are
/// not declared with `mgrp_counters::counters!`, which has `pairs()`).
pub fn counter_pairs(v: &impl Serialize) -> Vec<(String, u64)> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_u64()?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Why publishing failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the store's lock is poisoned")]
    Poisoned,
    #[error(transparent)]
    Store(#[from] mgrp_store::Error),
}

pub struct Hub {
    pub(crate) store: SharedStore,
    events: tokio::sync::broadcast::Sender<Arc<Record>>,
    pub(crate) paths: RwLock<Vec<Arc<PathState>>>,
    pub(crate) passive: RwLock<Vec<(PassiveSource, Arc<PassiveState>)>>,
    token: RwLock<Option<Arc<str>>>,
    pub(crate) archive: RwLock<Option<Arc<Archive>>>,
    /// The transfer modes' feed, when `[transfer]` is configured.
    pub(crate) transfer: RwLock<Option<Arc<TransferState>>>,
    /// MPAT aggregates, when `[mpat]` is configured.
    pub(crate) mpat: RwLock<Option<Arc<crate::mpat::MpatState>>>,
    /// Netmapper's latest map, when `[map]` is configured.
    pub(crate) map: RwLock<crate::netmap::MapState>,
    /// Live subscriptions (SSE clients).
    pub subscribers: AtomicU64,
    /// Estimates that subscribers missed because they fell behind.
    pub events_lagged: AtomicU64,
    /// Counters of other components for /metrics (the probe agent, riders), by group.
    counter_groups: RwLock<Vec<(&'static str, AgentCounters)>>,
    /// Client-created queries (`/v1/queries`).
    pub queries: crate::queries::QueryBook,
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
            transfer: RwLock::new(None),
            mpat: RwLock::new(None),
            map: RwLock::new(Default::default()),
            subscribers: AtomicU64::new(0),
            events_lagged: AtomicU64::new(0),
            counter_groups: RwLock::new(Vec::new()),
            queries: Default::default(),
        })
    }

    pub fn store(&self) -> SharedStore {
        self.store.clone()
    }

    /// Store estimates (one transaction), then tell subscribers.
    pub fn publish(&self, recs: &[Record]) -> Result<(), PublishError> {
        self.store
            .lock()
            .map_err(|_| PublishError::Poisoned)?
            .insert(recs)?;
        if let Some(a) = self.archive.read().ok().and_then(|a| a.clone()) {
            a.push(recs);
        }
        for r in recs {
            // No subscriber is not an error.
            let _ = self.events.send(Arc::new(r.clone()));
        }
        self.queries.observe(recs);
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

    /// The transfer modes as the API shows them (not configured, unavailable and why, or live).
    pub fn transfer(&self) -> TransferView {
        self.transfer
            .read()
            .ok()
            .and_then(|t| t.as_ref().map(|s| s.view()))
            .unwrap_or_else(TransferView::not_configured)
    }

    /// MPAT's aggregates, when `[mpat]` is configured.
    pub fn mpat(&self) -> Option<Arc<crate::mpat::MpatState>> {
        self.mpat.read().ok().and_then(|m| m.clone())
    }

    /// Change the map state (the mapping thread, or a test standing in for it).
    pub fn update_map(&self, f: impl FnOnce(&mut crate::netmap::MapState)) {
        if let Ok(mut g) = self.map.write() {
            f(&mut g);
        }
    }

    pub fn set_mpat(&self, m: Option<Arc<crate::mpat::MpatState>>) {
        if let Ok(mut g) = self.mpat.write() {
            *g = m;
        }
    }

    pub(crate) fn set_transfer(&self, t: Option<Arc<TransferState>>) {
        if let Ok(mut g) = self.transfer.write() {
            *g = t;
        }
    }

    pub fn token(&self) -> Option<Arc<str>> {
        self.token.read().ok().and_then(|t| t.clone())
    }

    pub(crate) fn set_token(&self, t: Option<String>) {
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

    /// The schedule that measures `path` (`SRC->DST`) or `peer` (`IP` or `IP:PORT`); failing
    /// that, a running query that does.
    pub fn find_path(&self, path: Option<&str>, peer: Option<&str>) -> Option<Arc<PathState>> {
        let matches = |p: &PathState| {
            let dst = p.sched.peer.ip().to_string();
            let by_path = path.is_some_and(|want| {
                p.name().as_deref() == Some(want)
                    || want.rsplit_once("->").is_some_and(|(_, d)| d == dst)
            });
            let by_peer = peer.is_some_and(|want| {
                want == dst || want.parse::<SocketAddr>().ok() == Some(p.sched.peer)
            });
            by_path || by_peer
        };
        self.paths()
            .into_iter()
            .find(|p| matches(p))
            .or_else(|| self.queries.find(matches))
    }
}
