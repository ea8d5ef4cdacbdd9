//! The mgrp probe engine: the I/O under every estimator.
//!
//! - [`proto`]: the session protocol as sans-IO state machines (handshake, probe admission,
//!   train reports), unit-tested without root.
//! - [`daemon::Agent`]: one per host, assembled from the drivers: authenticated sessions on a
//!   TCP control port, every probe on its UDP port timestamped by the kernel and reported back
//!   to its sender; it also serves the local Probe API ([`daemon::api_server`]).
//! - [`client::Session`]: the sending side of a session to a peer agent; sends trains through
//!   the [`pacer`] and returns [`train::TrainResult`]s.
//! - [`api`]: the Probe API's requests and responses, and a client for it.

pub mod api;
pub mod auth;
pub mod client;
pub mod daemon;
mod driver;
pub mod inline;
pub mod load;
pub mod loss;
pub mod pacer;
pub mod proto;
pub mod relay;
pub mod riders;
pub mod run;
pub mod sock;
pub mod train;

pub use proto::handshake::AuthError;
pub use proto::ProtoError;

/// Default UDP probe port and TCP control port of an agent.
pub const DEFAULT_PORT: u16 = 7240;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Spec(#[from] train::SpecError),
    #[error("{0}")]
    Key(#[from] auth::KeyError),
    #[error("cannot open a session with {peer}: {cause}")]
    Auth { peer: String, cause: AuthError },
    // Not `source`: the cause is already in the message, and error chains would print it twice.
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("protocol error from {peer}: {cause}")]
    Protocol { peer: String, cause: ProtoError },
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    Api(api::ApiError),
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
