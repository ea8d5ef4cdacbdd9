//! Captured TCP segments for passive measurement (Wren): decoded from pcap/pcapng files or
//! captured live on an interface, as [`mgrp_estimate::wren::Segment`]s with nanosecond
//! timestamps. Nothing here analyses anything; `mgrp_estimate::wren` does.

pub mod decode;
pub mod feed;
pub mod file;
pub mod live;

pub use decode::{decode, Decoded, Link};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error("{0}")]
    Live(String),
    #[error("unsupported link type {0}: mgrp reads Ethernet, Linux cooked (SLL, SLL2), raw IP and BSD loopback captures")]
    LinkType(i32),
}
