//! Estimators as sans-IO state machines: they ask for trains ([`Estimator::poll_train`]), are
//! fed what happened to them ([`Estimator::handle_train`]), and say what they know
//! ([`Estimator::estimate`]). Time comes in as an argument; nothing here reads a clock or
//! touches a socket, so every estimator runs unchanged against the [`fluid`] model in tests and
//! against the probe engine on a network.
//!
//! Trains are spelled in the one vocabulary shared with the engine and the Probe API
//! ([`mgrp_train`]): estimators ask with a [`TrainSpec`] and are fed the [`TrainResult`].
//!
//! Rates are in bits per second of Ethernet frames (UDP payload + [`WIRE_OVERHEAD`]), the unit
//! the testbed's shaper and ground truth use.

pub mod auto;
pub mod badabing;
pub mod budget;
pub mod calib;
pub mod capacity;
pub mod chirp;
pub mod fluid;
pub mod inline;
pub mod jitter;
pub mod methods;
pub mod phase;
pub mod queue;
pub mod riders;
pub mod slops;
pub mod sweep;
pub mod tcp_avail;
pub mod timeavg;
pub mod track;
pub mod track_trace;
pub mod trend;
pub mod wren;
pub mod wren2;

use serde::Serialize;

/// The one quantile, shared with the train results (`mgrp_train::stats`).
pub use mgrp_train::stats;
pub use mgrp_train::{
    offsets, wire_bits, ProbeResult, ProbeSpec, TrainResult, TrainRiderStats, TrainSpec,
    WIRE_OVERHEAD,
};

/// How an estimate was obtained and how much to trust it: the quality tuple.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quality {
    pub method: &'static str,
    /// From the estimator's first train to this estimate.
    pub elapsed_s: f64,
    pub probe_bytes: u64,
    pub trains: u32,
    /// 0..1: how consistent the evidence was (method-specific, documented per estimator).
    pub confidence: f64,
    /// The time scale the value holds over (ms): the span its evidence was sampled across, so
    /// A varying faster than this is averaged and slower is not (seed 001 §3, time scales).
    /// `None` where the method does not say.
    pub timescale_ms: Option<f64>,
}

/// A value with its range and quality.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Best single value, bits per second.
    pub value_bps: f64,
    pub low_bps: f64,
    pub high_bps: f64,
    /// The estimator has converged (a final answer, not a running one).
    pub final_: bool,
    pub quality: Quality,
}

/// A sans-IO estimator.
pub trait Estimator {
    /// The next train to send at `now_ns`, or `None` if nothing is due (yet, or ever).
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec>;
    /// The outcome of the train last handed out by `poll_train`.
    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult);
    /// The current estimate, if any.
    fn estimate(&self) -> Option<Estimate>;
    /// No more trains will be asked for.
    fn is_done(&self) -> bool;
    /// When `poll_train` may next have something (ns), so a driver can sleep until then.
    fn next_wakeup(&self) -> Option<u64>;
    /// The path capacity, for estimators that measure it on the way.
    fn capacity(&self) -> Option<Estimate> {
        None
    }
}

/// An estimator behind a pointer is an estimator: a box (so wrappers compose over
/// `Box<dyn Estimator + Send>`) or a borrow (so a wrapper can run one it does not own).
macro_rules! forward_estimator {
    ($($ptr:ty),*) => {$(
        impl<E: Estimator + ?Sized> Estimator for $ptr {
            fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
                (**self).poll_train(now_ns)
            }
            fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
                (**self).handle_train(now_ns, obs)
            }
            fn estimate(&self) -> Option<Estimate> {
                (**self).estimate()
            }
            fn is_done(&self) -> bool {
                (**self).is_done()
            }
            fn next_wakeup(&self) -> Option<u64> {
                (**self).next_wakeup()
            }
            fn capacity(&self) -> Option<Estimate> {
                (**self).capacity()
            }
        }
    )*};
}

forward_estimator!(Box<E>, &mut E);
