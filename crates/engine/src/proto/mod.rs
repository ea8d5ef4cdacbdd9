//! The session protocol as sans-IO state machines (the `quinn-proto` shape): bytes and
//! datagrams go in with an explicit `now`, and the machines say what to send, what happened
//! and when to wake them. Nothing here owns a socket, a thread or reads a clock; the drivers
//! in [`crate::agent`] and [`crate::client`] do, and every rule is unit-tested here without root.
//!
//! - [`frames`]: control-frame reassembly, bounded to a hello before authentication.
//! - [`handshake`]: the HMAC hello exchange, both sides, and the bound on pre-auth connections.
//! - [`receiver`]: the agent's side of sessions: probe admission and train reports.
//! - [`sender`]: the client's side: train numbering, probe headers, matching reports.
//! - [`hops`]: ICMP errors (TTL expiry, unreachable) tied to the probes they quote.

pub mod frames;
pub mod handshake;
pub mod hops;
pub mod receiver;
pub mod sender;

use mgrp_wire::WireError;
use std::time::Duration;

/// After a sender says a train is done, wait at most this long past the last arrival for
/// stragglers: as long as the queue the arrivals met drains ([`mgrp_train::linger`]), this
/// long when no delay shows it (nothing arrived).
pub const LINGER: Duration = Duration::from_millis(300);
/// A connection must authenticate within this time (a hello is one small frame; a slow
/// stranger only holds a pre-auth slot this long).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest load flow (Tneck's TCP flow) an agent sinks on one connection.
pub const MAX_LOAD: Duration = Duration::from_secs(120);
/// Longest wait for a train's report the receiver honours from a sender's TrainStart.
pub const MAX_TRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest capture of a flow's arrivals (two-sided Wren) an agent runs for one request.
pub const MAX_CAPTURE: Duration = Duration::from_secs(600);
/// Longest a relay for a coordinator lasts (a map step's flows and traceroutes fit easily).
pub const MAX_RELAY: Duration = Duration::from_secs(300);
/// Most records one capture request may return.
pub const MAX_CAPTURE_RECORDS: u32 = 10_000_000;

/// Why a control connection ended badly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("malformed control message: {0}")]
    Malformed(#[from] WireError),
    #[error("unexpected {0} message")]
    Unexpected(&'static str),
    #[error("the peer closed the connection")]
    Closed,
    #[error("the peer sent error {code}: {message}")]
    PeerError { code: u16, message: String },
}

/// The name of a control message, for errors.
pub(crate) fn kind(msg: &mgrp_wire::control::Control) -> &'static str {
    use mgrp_wire::control::Control::*;
    match msg {
        ClientHello { .. } => "ClientHello",
        ServerHello { .. } => "ServerHello",
        TrainStart { .. } => "TrainStart",
        TrainEnd { .. } => "TrainEnd",
        TrainReport { .. } => "TrainReport",
        Error { .. } => "Error",
        Close => "Close",
        Load { .. } => "Load",
        CaptureStart { .. } => "CaptureStart",
        CaptureBatch { .. } => "CaptureBatch",
        CaptureEnd { .. } => "CaptureEnd",
        RelayOpen { .. } => "RelayOpen",
        RelayCall { .. } => "RelayCall",
        RelayReply { .. } => "RelayReply",
    }
}

/// Encode a control message (messages the engine builds always encode).
pub(crate) fn encode(msg: &mgrp_wire::control::Control) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.encoded_len());
    if msg.encode(&mut out).is_err() {
        // Only an over-long report fails, and reports are cut to u16::MAX records first.
        out.clear();
    }
    out
}

/// Is train `a` later than train `b`? (Train ids count up and wrap.)
pub(crate) fn later(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}
