//! Paths between agents: traceroute, the parallel traceroute that Tneck samples, and
//! Netmapper's map ([`graph`], [`planner`], [`maxflow`]: sans-IO; [`netmap`]: the runner;
//! docs/map.md).
//!
//! - [`trace`]: sans-IO. Which trains to send (TTL-limited probes over an engine session),
//!   what each round says per hop, the report over rounds, loops and silent routers.
//! - [`run`]: the thin I/O driver over [`mgrp_engine::client::Session`]: `mgrp trace` and the
//!   parallel traceroute as a library call.
//!
//! How replies are tied to probes (the engine's ICMP error queue) is in `docs/trace.md`.

pub mod bfind;
pub mod graph;
pub mod maxflow;
pub mod netmap;
pub mod pathneck;
pub mod planner;
pub mod run;
pub mod tneck;
pub mod trace;

pub use graph::{BoundKind, Graph, PathObs};
pub use netmap::{map, pairwise, AgentsConnector, Connector, MapConfig, MapReport};
pub use pathneck::{Pathneck, PathneckConfig, PathneckError, PathneckVerdict};
pub use planner::{PlanStats, PlannerConfig};
pub use run::{
    bottleneck, parallel_traceroute, pathneck, trace, BottleneckConfig, BottleneckReport, Hands,
    PathHop, PathneckReport, Prober, TrackReport, TrackedVerdict,
};
pub use tneck::{Tneck, TneckConfig, TneckError, Verdict};
pub use trace::{Answer, HopRow, Round, TraceConfig, TraceError, TraceReport, Tracer};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Trace(#[from] TraceError),
    #[error("{0}")]
    Engine(#[from] mgrp_engine::Error),
    #[error("{0}")]
    Tneck(#[from] TneckError),
    #[error("{0}")]
    Pathneck(#[from] PathneckError),
    #[error("{0}")]
    Map(String),
}
