//! The riders' I/O layer, kept thin: a TUN device ([`tun::Tun`]), the policy routing that sends
//! the host's opted-in traffic into it and takes it out again ([`route::Routing`]), a raw socket
//! that sends a held packet the normal way ([`raw::RawSender`]), and the few IPv4 header fields
//! the agent checks ([`ip::Ipv4Info`]). The decisions (hold, carry, fragment, reassemble) are in
//! the sans-IO crate `mgrp-riders`.

pub mod ip;
pub mod raw;
pub mod route;
pub mod tun;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Setup(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The firewall mark of the agent's own sockets: policy routing lets them bypass the TUN.
pub const BYPASS_MARK: u32 = 0x6d67_7270; // "mgrp"
/// The routing table that sends opted-in traffic into the TUN.
pub const TABLE: u32 = 7240;
