//! Estimators as sans-IO state machines: they ask for trains ([`Estimator::poll_train`]), are
//! fed what happened to them ([`Estimator::handle_train`]), and say what they know
//! ([`Estimator::estimate`]). Time comes in as an argument; nothing here reads a clock or
//! touches a socket, so every estimator runs unchanged against the [`fluid`] model in tests and
//! against the probe engine on a network.
//!
//! Rates are in bits per second of Ethernet frames (UDP payload + [`WIRE_OVERHEAD`]), the unit
//! the testbed's shaper and ground truth use.

pub mod auto;
pub mod budget;
pub mod capacity;
pub mod chirp;
pub mod fluid;
pub mod methods;
pub mod riders;
pub mod slops;
pub mod stats;
pub mod sweep;
pub mod trend;
pub mod wren;

use serde::Serialize;

/// Bytes a probe occupies on an Ethernet link beyond its UDP payload: UDP 8 + IPv4 20 + Ethernet 14.
pub const WIRE_OVERHEAD: u64 = 42;

/// Bits on the wire of a probe of `size` payload bytes.
pub fn wire_bits(size: u16) -> f64 {
    (size as u64 + WIRE_OVERHEAD) as f64 * 8.0
}

/// One probe an estimator asks for: UDP payload size and gap since the previous probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbeReq {
    pub size: u16,
    pub gap_ns: u64,
}

/// A train an estimator asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrainReq {
    pub probes: Vec<ProbeReq>,
}

impl TrainReq {
    /// `count` probes of `size` bytes at a constant rate `rate_bps` (wire bits).
    pub fn constant_rate(count: usize, size: u16, rate_bps: f64) -> TrainReq {
        let gap = (wire_bits(size) / rate_bps * 1e9).round() as u64;
        TrainReq {
            probes: (0..count)
                .map(|i| ProbeReq {
                    size,
                    gap_ns: if i == 0 { 0 } else { gap },
                })
                .collect(),
        }
    }

    /// Offsets of each probe's departure from the first's.
    pub fn offsets(&self) -> Vec<u64> {
        offsets(self.probes.iter().map(|p| p.gap_ns))
    }

    pub fn bytes(&self) -> u64 {
        self.probes.iter().map(|p| p.size as u64).sum()
    }
}

/// What happened to one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbeObs {
    pub size: u16,
    /// Actual departure, ns after the train's start (sender clock); `None` if not sent.
    pub sent_ns: Option<u64>,
    /// Arrival on the receiver's clock (any epoch); `None` if lost.
    pub rx_ns: Option<u64>,
}

/// What happened to a train.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrainObs {
    pub probes: Vec<ProbeObs>,
    /// The engine flagged the train's pacing as outside tolerance.
    pub flagged: bool,
    /// Rider bytes this train carried that would have crossed the path during it anyway (seed
    /// 000 §4.5.2): the host's own load moved into the probes. 0 without riders.
    pub competing_bytes: u64,
}

impl TrainObs {
    /// Relative one-way delays (receive − send, ns, arbitrary offset) of the received probes,
    /// with their indices.
    pub fn owds(&self) -> Vec<(usize, f64)> {
        self.probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.rx_ns? as f64 - p.sent_ns? as f64)))
            .collect()
    }

    pub fn lost(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.sent_ns.is_some() && p.rx_ns.is_none())
            .count()
    }
}

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
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainReq>;
    /// The outcome of the train last handed out by `poll_train`.
    fn handle_train(&mut self, now_ns: u64, obs: &TrainObs);
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
            fn poll_train(&mut self, now_ns: u64) -> Option<TrainReq> {
                (**self).poll_train(now_ns)
            }
            fn handle_train(&mut self, now_ns: u64, obs: &TrainObs) {
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

/// Departure offsets from the first probe, given each probe's gap since the previous one (the
/// first probe's gap is ignored).
pub fn offsets(gaps: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut t = 0;
    gaps.enumerate()
        .map(|(i, g)| {
            if i > 0 {
                t += g;
            }
            t
        })
        .collect()
}
