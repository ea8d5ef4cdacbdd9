//! The agent's estimation service: keeps configured paths fresh on a schedule, within a
//! probe-byte budget per minute, and writes every estimate with its quality tuple to the store.
//!
//! One module per job: [`schedule`] (sans-IO: when a path is due, what its byte budget
//! allows, backoff) and its thread in `driver`; [`budget`] (the default budget); [`hub`] (the
//! store, publish/subscribe, what runs); [`path`] (a running schedule's state); [`archive`]
//! (the queue to a central archive); [`record`] (estimates into store records); [`service`]
//! (start, stop, reload); [`transfer`] (the eBPF transfer modes fed from the estimates);
//! [`http`], [`metrics`], [`passive`], [`watch`], [`config`].

pub mod archive;
pub mod budget;
pub mod config;
pub mod cover;
mod driver;
pub mod http;
pub mod hub;
pub mod inline;
pub mod loss;
pub mod metrics;
pub mod mpat;
pub mod netmap;
pub mod passive;
pub mod path;
pub mod queries;
pub mod record;
pub mod schedule;
pub mod service;
pub mod track;
pub mod transfer;
pub mod watch;
pub mod wren2;

pub use archive::Archive;
pub use driver::ROUND_DEADLINE;
pub use hub::{counter_pairs, AgentCounters, Hub};
pub use path::{CounterSnapshot, PathState, ScheduleView};
pub use service::{open_store, ReloadReport, Service};

use mgrp_store::EstimateStore;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] mgrp_store::Error),
    #[error(transparent)]
    Engine(#[from] mgrp_engine::Error),
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    #[error("transfer modes: {0}")]
    Transfer(String),
}

/// A shared store of estimates (any backend).
pub type SharedStore = Arc<Mutex<Box<dyn EstimateStore>>>;
