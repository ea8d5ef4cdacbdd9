//! The agent's I/O drivers: sockets, threads and clocks around the [`crate::proto`] machines.

pub mod capture;
pub mod conn;
pub mod control;
pub mod probe_rx;
pub mod relay;
