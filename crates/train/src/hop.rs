//! What came back from the path for one probe: an ICMP error (time exceeded, unreachable)
//! from a router or host along the way, tied to the probe it quotes.

use crate::time::{MonoNs, WallNs};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Which clocks a hop reply's RTT was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HopClock {
    /// Kernel TX timestamp of the probe and kernel RX timestamp of the reply.
    Kernel,
    /// User-space clock readings (the pacer's just before send, the reader's when it got the
    /// reply): later than the kernel's by scheduling delays, so RTTs read a little long.
    User,
}

/// How a reply was tied to its probe (see `docs/trace.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchRule {
    /// The quote held the probe header through the train index: session, train, index.
    Header,
    /// The quote held the header's sequence number (12..18 bytes of UDP payload).
    Seq,
    /// The quote was too short to name the probe (< 12 bytes of UDP payload): the only
    /// TTL-limited probe in flight when the reply came.
    Timing,
}

/// An ICMP error the path sent back for one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopReply {
    /// The sender of the error (`SO_EE_OFFENDER`): the router whose TTL expiry it was, or the
    /// host or router that found the destination unreachable.
    pub from: IpAddr,
    /// ICMP (IPv4) or ICMPv6 type and code, as `from`'s family says: 11/0 and 3/0 are IPv4
    /// time exceeded in transit; 3/x IPv4 unreachable; ICMPv6 3/0 time exceeded, 1/x unreachable.
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// When the reply arrived, on the sender's CLOCK_MONOTONIC (from the kernel's RX stamp
    /// where there is one).
    pub rx_mono_ns: MonoNs,
    /// The kernel's RX timestamp of the reply (CLOCK_REALTIME), where the kernel gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_kernel_ns: Option<WallNs>,
    /// Reply arrival minus the probe's departure, ns.
    pub rtt_ns: u64,
    /// Which clocks `rtt_ns` came from.
    pub clock: HopClock,
    pub matched_by: MatchRule,
}

/// Per-train accounting of the ICMP errors read for a train: every one is counted somewhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopStats {
    /// Replies tied to a probe of this train (each probe keeps its first).
    pub matched: u32,
    /// Further replies for a probe that already had one.
    pub duplicates: u32,
    /// Replies quoting another train or session (late replies of an earlier train).
    pub unknown_train: u32,
    /// Short quotes that could not be tied to one probe (several in flight).
    pub ambiguous: u32,
    /// Errors that were not ICMP (local errors) or did not quote an MGRP probe.
    pub malformed: u32,
    /// TTL-limited probes that got no reply within the wait.
    pub silent: u32,
    /// The per-train bound on error-queue reads was reached (replies may be left unread).
    pub bounded: bool,
}
