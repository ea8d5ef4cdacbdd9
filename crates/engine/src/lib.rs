//! The mgrp probe engine: the I/O under every estimator.
//!
//! - [`agent::Agent`]: one per host. Accepts authenticated sessions on a TCP control port,
//!   timestamps every probe on its UDP port with the kernel's receive time, and reports per-probe
//!   receive times back to the sender. It also serves the local [`api`] for probers that are not
//!   built in.
//! - [`client::Session`]: the sending side of a session to a peer agent; sends trains through the
//!   [`pacer`] and returns [`train::TrainResult`]s.

pub mod agent;
pub mod api;
pub mod auth;
pub mod client;
mod ctrl;
pub mod pacer;
pub mod riders;
pub mod run;
pub mod sock;
pub mod train;

/// Default UDP probe port and TCP control port of an agent.
pub const DEFAULT_PORT: u16 = 7240;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Key(String),
    #[error("authentication with {peer} failed: {why}")]
    Auth { peer: String, why: String },
    // Not `source`: the cause is already in the message, and error chains would print it twice.
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("protocol error from {peer}: {why}")]
    Protocol { peer: String, why: String },
    #[error("{0}")]
    Timeout(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            cause: source,
        }
    }
}

/// Errors that only mean "nothing yet": a read timeout or an interrupted call.
pub(crate) fn transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), WouldBlock | TimedOut | Interrupted)
}
