//! The agent's estimation service: keeps configured paths fresh on a schedule, within a
//! probe-byte budget per minute, and writes every estimate with its quality tuple to the store.
//!
//! One module per job: [`schedule`] (sans-IO: when a path is due, what its byte budget
//! allows, backoff) and its thread in `driver`; [`budget`] (the default budget); [`hub`] (the
//! store, publish/subscribe, what runs); [`path`] (a running schedule's state); [`archive`]
//! (the queue to a central archive); [`record`] (estimates into store records); [`service`]
//! (start, stop, reload); [`http`], [`metrics`], [`passive`], [`watch`], [`config`].

pub mod archive;
pub mod budget;
pub mod config;
mod driver;
pub mod http;
pub mod hub;
pub mod metrics;
pub mod passive;
pub mod path;
pub mod record;
pub mod schedule;
pub mod service;
pub mod watch;

pub use archive::Archive;
pub use hub::{counter_pairs, AgentCounters, Hub};
pub use path::{CounterSnapshot, PathState, ScheduleView};
pub use service::{open_store, ReloadReport, Service};

use mgrp_estimate::{Estimate, Estimator, TrainResult, TrainSpec};
use mgrp_store::EstimateStore;
use std::sync::{Arc, Mutex};

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
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

/// An estimator that refuses any train its remaining byte allowance cannot pay for, and is
/// done from then on: the budget holds train by train, not just between measurements.
pub struct Budgeted<'a> {
    inner: &'a mut dyn Estimator,
    remaining: u64,
    exhausted: bool,
    /// Probes sent and lost in the trains it passed on (the measurement's probe loss).
    pub probes_sent: u64,
    pub probes_lost: u64,
}

impl<'a> Budgeted<'a> {
    pub fn new(inner: &'a mut dyn Estimator, allowance: u64) -> Self {
        Budgeted {
            inner,
            remaining: allowance,
            exhausted: false,
            probes_sent: 0,
            probes_lost: 0,
        }
    }

    pub fn exhausted(&self) -> bool {
        self.exhausted
    }
}

impl Estimator for Budgeted<'_> {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
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
    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        self.probes_sent += obs.probes.iter().filter(|p| p.sent_ns.is_some()).count() as u64;
        self.probes_lost += obs.lost() as u64;
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

/// A shared store of estimates (any backend).
pub type SharedStore = Arc<Mutex<Box<dyn EstimateStore>>>;
