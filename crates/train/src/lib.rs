//! The one vocabulary of a probe train, shared by the estimators (`mgrp-estimate`), the probe
//! engine (`mgrp-engine`) and the Probe API's JSON:
//!
//! - [`TrainSpec`] / [`ProbeSpec`]: what is asked for, per probe its size, the gap since the
//!   previous probe, an optional IP TTL and whether its padding may carry a rider;
//! - [`TrainResult`] / [`ProbeResult`]: what happened to each probe, and the train's stats.
//!
//! Pure data and arithmetic: no clock, no socket. Times that cross crates are typed
//! ([`MonoNs`], [`WallNs`]) so a monotonic and a wall-clock reading cannot be mixed up.

mod hop;
pub mod linger;
mod result;
mod spec;
pub mod stats;
mod time;

pub use hop::{HopClock, HopReply, HopStats, MatchRule};
pub use result::{
    Arrival, ProbeResult, Quantiles, SendRecord, TrainResult, TrainRiderStats, TrainStats,
    DEFAULT_TOLERANCE_NS, STOLEN_FLAG_MS,
};
pub use spec::{
    offsets, wire_bits, ProbeSpec, SpecError, TrainSpec, MAX_GAP_NS, MAX_PROBE_SIZE, MAX_TRAIN_LEN,
    MAX_TRAIN_NS, MIN_PROBE_SIZE, WIRE_OVERHEAD,
};
pub use time::{MonoNs, WallNs};
