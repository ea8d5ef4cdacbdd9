//! The estimation methods by name, shared by `mgrp estimate`, `mgrp testbed run --estimate`
//! and `mgrp bench accuracy`.

use clap::ValueEnum;
use mgrp_estimate::auto::{Auto, AutoParams};
use mgrp_estimate::capacity::{CapacityEstimator, CapacityParams};
use mgrp_estimate::chirp::{Chirp, ChirpParams};
use mgrp_estimate::slops::{Pace, Slops, SlopsParams};
use mgrp_estimate::sweep::{Sweep, SweepParams};
use mgrp_estimate::Estimator;

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Method {
    /// Capacity, a few chirps for a rough estimate, then a lean SLoPS search from it.
    Auto,
    /// pathload's SLoPS with the seed's fast pacing (pFAST).
    Slops,
    /// SLoPS with pathload's original pacing (pSLOW): the classic tool's behaviour.
    SlopsSlow,
    /// pathChirp: exponentially spaced chirps, 11 averaged.
    Chirp,
    /// ImTCP's sub-range sweep: 5-probe streams, 10 results.
    Sweep,
    /// Capacity only, from back-to-back packet trains (dispersion mode).
    Capacity,
}

impl Method {
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

    pub fn parse(name: &str) -> Result<Method, String> {
        <Method as ValueEnum>::from_str(name, true).map_err(|_| {
            format!("unknown method {name:?}: use auto, slops, slops-slow, chirp, sweep, capacity")
        })
    }

    /// Needs the capacity measured (or given) before it starts; `auto` measures its own.
    pub fn needs_capacity(self) -> bool {
        !matches!(self, Method::Auto | Method::Capacity)
    }

    /// The capacity estimator the methods that need one run first.
    pub fn capacity_estimator() -> CapacityEstimator {
        CapacityEstimator::new(CapacityParams {
            trains: 6,
            ..CapacityParams::default()
        })
    }

    /// The method's estimator. `capacity_bps` is required by the methods that
    /// [`needs_capacity`](Self::needs_capacity); `auto` measures it when not given.
    pub fn build(self, capacity_bps: Option<f64>) -> Result<Box<dyn Estimator + Send>, String> {
        let Some(c) = capacity_bps else {
            return match self {
                Method::Auto => Ok(Box::new(Auto::new(AutoParams::default()))),
                Method::Capacity => Ok(Box::new(Method::capacity_estimator())),
                m => Err(format!("{} needs the capacity first", m.name())),
            };
        };
        if !(c.is_finite() && c > 0.0) {
            return Err(format!("capacity must be positive, not {c}"));
        }
        let c = || c;
        Ok(match self {
            Method::Auto => Box::new(Auto::new(AutoParams {
                capacity_bps,
                ..AutoParams::default()
            })),
            Method::Slops => Box::new(Slops::new(SlopsParams::for_capacity(c(), Pace::Fast))),
            Method::SlopsSlow => Box::new(Slops::new(SlopsParams::for_capacity(c(), Pace::Slow))),
            Method::Chirp => Box::new(Chirp::new(ChirpParams::for_capacity(c()))),
            Method::Sweep => Box::new(Sweep::new(SweepParams::new(c()))),
            Method::Capacity => Box::new(Method::capacity_estimator()),
        })
    }
}
