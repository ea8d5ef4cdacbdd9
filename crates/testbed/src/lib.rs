//! The mgrp testbed: a measurement path built from Linux network namespaces.
//!
//! ```text
//!   snd ──┐                        ┌── rcv
//!         r1 ══[tc bottleneck]══> r2
//!  xsnd ──┘                        └── xrcv
//! ```
//!
//! The bottleneck is the egress of `r1` toward `r2`, shaped by `tc` (HTB or TBF). Cross traffic
//! runs `xsnd` → `xrcv` and crosses the same queue as the measured traffic `snd` → `rcv`; because
//! the two flows leave `r2` on different links, `r2`'s per-link counters separate them, and the
//! ground truth is A = C − (cross bytes that left the bottleneck) / window. An optional delay
//! line (the project's own, through a TUN device, for kernels without `netem`) adds one-way
//! delay on the reverse path by default, so forward probe spacing stays clean. Optional loss
//! (random or Gilbert–Elliott, [`loss`]) is applied to the measured flow before the bottleneck
//! by a second TUN line in `r1`.

pub use mgrp_clock as clock;
pub use mgrp_traffic::{pattern, units};
pub mod app;
pub mod capacity;
pub mod counters;
pub mod delayline;
pub mod generator;
pub mod loss;
pub mod netns;
pub mod rtt;
pub mod stolen;
pub mod topo;
pub mod topology;
pub mod truth;

pub use capacity::LinkCapacity;
pub use loss::LossModel;
pub use pattern::CrossPattern;
pub use topology::{Buffer, DelayDir, DelayImpl, DelayMode, Role, Shaper, Testbed, TestbedConfig};
pub use truth::{Bin, Truth, TruthSampler};

/// What went wrong, phrased for the person running the testbed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Privilege(String),
    #[error("{0}")]
    MissingTool(String),
    #[error("testbed setup failed: {0}")]
    Setup(String),
    #[error("reading counters failed: {0}")]
    Counters(String),
    #[error("traffic generator failed: {0}")]
    Generator(String),
    #[error("{0}")]
    NotFound(String),
}

impl From<mgrp_traffic::Error> for Error {
    fn from(e: mgrp_traffic::Error) -> Self {
        match e {
            mgrp_traffic::Error::BadInput(m) => Error::BadInput(m),
        }
    }
}
