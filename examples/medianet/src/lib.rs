//! MediaNet-style adaptive streaming on mgrp (seed 002 §5, seed 000 ch. 6): three looped
//! MPEG-like streams over one TCP connection each; a local scheduler per stream drops the
//! least important frames when the path cannot carry them and reports what it sustained; a
//! global scheduler chooses the streams' levels from those reports and, in `mgrp` mode, from
//! the local agent's available-bandwidth estimates, read over its public HTTP API (SSE
//! `/v1/events` and `/v1/estimate`) like any application would.
//!
//! The logic is sans-IO ([`workload`], [`decode`], [`local`], [`global`]); [`sender`],
//! [`receiver`] and [`agent`] are the thin I/O around it.

pub mod agent;
pub mod decode;
pub mod global;
pub mod local;
pub mod receiver;
pub mod sender;
pub mod wire;
pub mod workload;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Nanoseconds since the Unix epoch: frames carry their generation time in it, and the
/// receiver judges deadlines with it (sender and receiver clocks assumed synchronised).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A shared stop flag.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed)
    }
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
