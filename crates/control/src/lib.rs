//! mgrp's transfer modes as eBPF TCP congestion controls that act on the agent's estimates.
//!
//! - `mgrp_bg` (background): Reno whose window is capped at g·RTT·A/M, so that a bulk transfer
//!   stays under the path's available bandwidth (seed 001 §5.1).
//! - `mgrp_fs` (full-speed): Reno whose congestion avoidance grows by max(1, h(1 − cwnd/V)) per
//!   RTT toward V = A·RTT/M (seed 001 §5.2).
//! - `mgrp_ledbat`: a LEDBAT baseline (RFC 6817) to compare the background mode with.
//! - `mgrp_mpat` and `mgrp_multcp` (their own object, [`MpatControls`]): an MPAT aggregate of
//!   weighted flows (seed 003 §2) and a mulTCP baseline; [`mpat`] is the sans-IO reference and a
//!   packet-level bottleneck model it is tested on.
//!
//! [`Controls`] loads and registers them and owns the map of paths the agent fills
//! ([`Controls::set_path`]); [`Feed`] turns an estimate into a map entry, correcting for the
//! background flows' own rate; [`CgroupRun`] puts a command's sockets on a mode without changing
//! the command. The rules are pure functions in `src/bpf/rules.h`, compiled into the programs
//! and into a host library that [`rules`] tests against the seed's formulas.

mod error;
pub mod feed;
pub mod loader;
pub mod maps;
pub mod mpat;
pub mod mpat_kernel;
pub mod rules;
pub mod run;
pub use mgrp_sockopt as sockopt;

pub use error::Error;
pub use feed::{Feed, FeedConfig};
pub use loader::{
    available_congestion_controls, default_congestion_control, registered_modes, Controls, Mode,
    ModeStats,
};
pub use maps::{PathEntry, PathKey, PathParams};
pub use mpat_kernel::{AggregateStats, MemberRule, MemberStats, MpatControls};
pub use run::CgroupRun;

/// Why the transfer modes cannot be loaded here (no BPF in this build, not root, no BTF), or
/// `None` when they can be tried. Tests skip on it and say why.
pub fn unsupported_reason() -> Option<String> {
    loader::preflight().err().map(|e| e.to_string())
}
