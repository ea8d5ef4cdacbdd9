//! The estimation methods by name, and how each is built: the one place `mgrp estimate`, the
//! service's schedules and the benches get an estimator from.
//!
//! [`Method::build`] returns a [`MethodEstimator`]: the method itself, preceded by a capacity
//! step when the method needs the path's capacity and none is given. The capacity step is part
//! of the state machine, so a driver runs one estimator and reads both results from it.

use crate::auto::{Auto, AutoParams};
use crate::capacity::{CapacityEstimator, CapacityParams};
use crate::chirp::{Chirp, ChirpParams};
use crate::slops::{Pace, Slops, SlopsParams};
use crate::sweep::{Sweep, SweepParams};
use crate::{Estimate, Estimator, TrainResult, TrainSpec};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Method {
    Auto,
    Slops,
    SlopsSlow,
    Chirp,
    Sweep,
    Capacity,
}

/// Why a method could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MethodError {
    #[error("unknown method {0:?}: use auto, slops, slops-slow, chirp, sweep, capacity")]
    Unknown(String),
    #[error("capacity must be positive, not {0}")]
    BadCapacity(f64),
}

impl Method {
    /// Every method, in the order help texts list them.
    pub const ALL: [Method; 6] = [
        Method::Auto,
        Method::Slops,
        Method::SlopsSlow,
        Method::Chirp,
        Method::Sweep,
        Method::Capacity,
    ];

    /// The methods that estimate available bandwidth (all but `capacity`).
    pub const AVAILABLE: [Method; 5] = [
        Method::Auto,
        Method::Slops,
        Method::SlopsSlow,
        Method::Chirp,
        Method::Sweep,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Slops => "slops",
            Method::SlopsSlow => "slops-slow",
            Method::Chirp => "chirp",
            Method::Sweep => "sweep",
            Method::Capacity => "capacity",
        }
    }

    /// One line on what the method does (for help texts; no final period, as clap shows them).
    pub fn about(self) -> &'static str {
        match self {
            Method::Auto => {
                "Capacity, a few chirps for a rough estimate, then a lean SLoPS search from it"
            }
            Method::Slops => "pathload's SLoPS with the seed's fast pacing (pFAST)",
            Method::SlopsSlow => {
                "SLoPS with pathload's original pacing (pSLOW): the classic tool's behaviour"
            }
            Method::Chirp => "pathChirp: exponentially spaced chirps, 11 averaged",
            Method::Sweep => "ImTCP's sub-range sweep: 8-probe streams, median of 10 results",
            Method::Capacity => "Capacity only, from back-to-back packet trains (dispersion mode)",
        }
    }

    /// The method of this name (case-insensitive).
    pub fn from_name(name: &str) -> Result<Method, MethodError> {
        Method::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| MethodError::Unknown(name.to_string()))
    }

    /// Estimates available bandwidth (every method but `capacity`).
    pub fn estimates_available(self) -> bool {
        self != Method::Capacity
    }

    /// Needs the capacity before it starts; `auto` measures its own.
    pub fn needs_capacity(self) -> bool {
        !matches!(self, Method::Auto | Method::Capacity)
    }

    /// The capacity estimator of the capacity step (and of the method `capacity`).
    pub fn capacity_estimator() -> CapacityEstimator {
        CapacityEstimator::new(CapacityParams {
            trains: 6,
            ..CapacityParams::default()
        })
    }

    /// The method's estimator for a path of known capacity `c` (bit/s); `auto` then skips
    /// its own capacity phase.
    pub fn with_capacity(self, c: f64) -> Result<Box<dyn Estimator + Send>, MethodError> {
        if !(c.is_finite() && c > 0.0) {
            return Err(MethodError::BadCapacity(c));
        }
        Ok(match self {
            Method::Auto => Box::new(Auto::new(AutoParams {
                capacity_bps: Some(c),
                ..AutoParams::default()
            })),
            Method::Slops => Box::new(Slops::new(SlopsParams::for_capacity(c, Pace::Fast))),
            Method::SlopsSlow => Box::new(Slops::new(SlopsParams::for_capacity(c, Pace::Slow))),
            Method::Chirp => Box::new(Chirp::new(ChirpParams::for_capacity(c))),
            Method::Sweep => Box::new(Sweep::new(SweepParams::new(c))),
            Method::Capacity => Box::new(Method::capacity_estimator()),
        })
    }

    /// The method's estimator; `capacity_bps` if known. A method that needs the capacity and
    /// is not given it measures it first ([`MethodEstimator`]).
    pub fn build(self, capacity_bps: Option<f64>) -> Result<MethodEstimator, MethodError> {
        let phase = match (capacity_bps, self) {
            (Some(c), m) => Phase::Method(m.with_capacity(c)?),
            (None, Method::Auto) => Phase::Method(Box::new(Auto::new(AutoParams::default()))),
            (None, Method::Capacity) => Phase::Method(Box::new(Method::capacity_estimator())),
            (None, _) => Phase::Capacity(Method::capacity_estimator()),
        };
        Ok(MethodEstimator {
            method: self,
            phase,
            capacity: None,
            method_start_ns: None,
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = MethodError;
    fn from_str(s: &str) -> Result<Method, MethodError> {
        Method::from_name(s)
    }
}

enum Phase {
    /// Measuring the capacity the method needs.
    Capacity(CapacityEstimator),
    Method(Box<dyn Estimator + Send>),
    /// The capacity step ended without an estimate: there is nothing to run the method on.
    NoCapacity,
}

/// A method's estimator with its capacity step: capacity first (when needed and not given),
/// then the method, as one sans-IO state machine. [`estimate`](Estimator::estimate) is the
/// method's (none during the capacity step); [`capacity`](Estimator::capacity) is the measured
/// capacity (or the one the method measured itself, like `auto`).
pub struct MethodEstimator {
    method: Method,
    phase: Phase,
    capacity: Option<Estimate>,
    method_start_ns: Option<u64>,
}

impl MethodEstimator {
    pub fn method(&self) -> Method {
        self.method
    }

    /// Still measuring the capacity.
    pub fn in_capacity_step(&self) -> bool {
        matches!(self.phase, Phase::Capacity(_))
    }

    /// The capacity step ended without an estimate (no train came back): the method never ran.
    pub fn capacity_failed(&self) -> bool {
        matches!(self.phase, Phase::NoCapacity)
    }

    /// When the method itself asked for its first train (after the capacity step).
    pub fn method_start_ns(&self) -> Option<u64> {
        self.method_start_ns
    }
}

impl Estimator for MethodEstimator {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        match &mut self.phase {
            Phase::Capacity(c) => c.poll_train(now_ns),
            Phase::Method(m) => {
                self.method_start_ns.get_or_insert(now_ns);
                m.poll_train(now_ns)
            }
            Phase::NoCapacity => None,
        }
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        match &mut self.phase {
            Phase::Capacity(c) => {
                c.handle_train(now_ns, obs);
                if !c.is_done() {
                    return;
                }
                let built = c.estimate().and_then(|e| {
                    let m = self.method.with_capacity(e.value_bps).ok()?;
                    Some((e, m))
                });
                self.phase = match built {
                    Some((e, m)) => {
                        self.capacity = Some(e);
                        Phase::Method(m)
                    }
                    None => Phase::NoCapacity,
                };
            }
            Phase::Method(m) => m.handle_train(now_ns, obs),
            Phase::NoCapacity => {}
        }
    }

    fn estimate(&self) -> Option<Estimate> {
        match &self.phase {
            Phase::Method(m) => m.estimate(),
            _ => None,
        }
    }

    fn is_done(&self) -> bool {
        match &self.phase {
            Phase::Capacity(_) => false,
            Phase::Method(m) => m.is_done(),
            Phase::NoCapacity => true,
        }
    }

    fn next_wakeup(&self) -> Option<u64> {
        match &self.phase {
            Phase::Capacity(c) => c.next_wakeup(),
            Phase::Method(m) => m.next_wakeup(),
            Phase::NoCapacity => None,
        }
    }

    fn capacity(&self) -> Option<Estimate> {
        if self.capacity.is_some() {
            return self.capacity.clone();
        }
        match &self.phase {
            // The method `capacity` measures nothing else: its estimate is the capacity.
            Phase::Method(m) if self.method == Method::Capacity => m.estimate(),
            Phase::Method(m) => m.capacity(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fluid::{drive, FluidPath};

    const C: f64 = 20e6;

    fn path() -> FluidPath {
        FluidPath::new(C, 200_000.0, 5_000_000, None).unwrap()
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for m in Method::ALL {
            assert_eq!(Method::from_name(m.name()), Ok(m));
            assert_eq!(m.name().parse::<Method>(), Ok(m));
        }
        assert_eq!(Method::from_name("SLOPS-slow"), Ok(Method::SlopsSlow));
        let e = Method::from_name("magic").unwrap_err();
        assert!(e.to_string().contains("unknown method \"magic\""), "{e}");
        assert!(!Method::AVAILABLE.contains(&Method::Capacity));
        assert!(Method::AVAILABLE.iter().all(|m| m.estimates_available()));
    }

    #[test]
    fn capacity_must_be_positive() {
        for c in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Method::Chirp.build(Some(c)),
                Err(MethodError::BadCapacity(_))
            ));
        }
    }

    #[test]
    fn measures_capacity_first_then_runs_the_method() {
        let mut est = Method::Chirp.build(None).unwrap();
        assert!(est.in_capacity_step());
        let out = drive(&mut est, &mut path(), 120_000_000_000);
        assert!(est.is_done() && !est.capacity_failed());
        let c = est.capacity().expect("capacity measured");
        assert_eq!(c.quality.method, "capacity");
        assert!((c.value_bps - C).abs() < 0.1 * C, "{c:?}");
        // Nothing was reported as the method's estimate during the capacity step.
        assert!(
            out.iter().all(|(_, e)| e.quality.method == "chirp"),
            "{out:?}"
        );
        let a = est.estimate().unwrap();
        assert!(a.final_ && (a.value_bps - C).abs() < 0.25 * C, "{a:?}");
        let start = est.method_start_ns().unwrap();
        assert!(out.iter().all(|(t, _)| *t >= start));
    }

    #[test]
    fn a_given_capacity_skips_the_step() {
        let mut est = Method::Sweep.build(Some(C)).unwrap();
        assert!(!est.in_capacity_step());
        assert!(est.poll_train(7).is_some());
        assert_eq!(est.method_start_ns(), Some(7));
        // Nothing measured, nothing claimed.
        assert!(est.capacity().is_none());
    }

    #[test]
    fn capacity_method_reports_its_estimate_as_the_capacity() {
        let mut est = Method::Capacity.build(None).unwrap();
        assert!(!est.in_capacity_step());
        drive(&mut est, &mut path(), 60_000_000_000);
        assert_eq!(est.capacity(), est.estimate());
        assert!(est.capacity().is_some());
    }

    #[test]
    fn no_train_back_ends_without_running_the_method() {
        let mut est = Method::Slops.build(None).unwrap();
        // Every probe lost.
        let (mut now, mut polls) = (0, 0);
        while !est.is_done() {
            now += 1_000_000_000;
            let Some(t) = est.poll_train(now) else {
                continue;
            };
            let sent = mgrp_train::SendRecord {
                mono_ns: Some(mgrp_train::MonoNs(0)),
                ..Default::default()
            };
            let sends = vec![sent; t.probes.len()];
            let report = Some((&[][..], false));
            let obs =
                TrainResult::assemble(0, String::new(), &t, mgrp_train::MonoNs(0), &sends, report);
            est.handle_train(now, &obs);
            polls += 1;
            assert!(polls < 1000, "the capacity step never ended");
        }
        assert!(est.capacity_failed() && est.is_done());
        assert!(est.estimate().is_none() && est.capacity().is_none());
        assert!(est.method_start_ns().is_none());
    }

    #[test]
    fn auto_measures_its_own_capacity() {
        let mut est = Method::Auto.build(None).unwrap();
        assert!(!est.in_capacity_step());
        drive(&mut est, &mut path(), 120_000_000_000);
        let c = est.capacity().expect("auto's capacity");
        assert!((c.value_bps - C).abs() < 0.1 * C, "{c:?}");
    }
}
