//! The maps' layouts, mirrored from `src/bpf/maps.h` (`#[repr(C)]`, sizes checked in tests).

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// A destination: IPv6, or IPv4 mapped (`::ffff:a.b.c.d`), as the programs key it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathKey {
    pub addr: [u8; 16],
}

impl From<IpAddr> for PathKey {
    fn from(ip: IpAddr) -> Self {
        let v6: Ipv6Addr = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        PathKey { addr: v6.octets() }
    }
}

impl PathKey {
    pub fn ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.addr);
        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
    }
}

/// What the programs know about the path to a destination (`struct mgrp_path`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct PathEntry {
    /// A in bit/s, already corrected for the background flows' own rate.
    pub avail_bps: u64,
    /// CLOCK_MONOTONIC ns when written.
    pub updated_ns: u64,
    /// Older than this, the programs fall back to Reno.
    pub max_age_ns: u64,
    /// Background: the share g of A to use, in thousandths (seed: 900).
    pub g_milli: u32,
    /// Background: cap only when g·RTT·A/M exceeds this many packets (seed: m·N = 25).
    pub threshold_pkts: u32,
    /// Background: below the threshold, cap at max(w, floor); 0 leaves the flow uncapped (seed).
    pub floor_pkts: u32,
    /// Full-speed: the growth factor h (seed: 100).
    pub h: u32,
    /// `PATH_PROBE`: background flows lift their cap while the path shows no queue.
    pub flags: u32,
    pub reserved: u32,
}

/// `PathEntry::flags`: lift the background cap while the path shows no queue.
pub const PATH_PROBE: u32 = 1;
/// `PathEntry::flags`: full-speed connections start at V (jump start).
pub const PATH_JUMP: u32 = 2;

/// How the agent sets the modes' parameters; the defaults are the seed's, except below the
/// threshold (see [`PathParams::default`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathParams {
    pub g: f64,
    pub threshold_pkts: u32,
    pub floor_pkts: u32,
    pub h: u32,
    pub max_age: Duration,
    /// Background: while capped and the path shows no queueing delay, lift the cap by 1/16 per
    /// RTT; halve the lift at each round with a queue (not in the seed; see `rules.h`).
    pub probe: bool,
    /// Full-speed: a new connection with a fresh estimate starts at V, paced at 1.2·A, instead
    /// of slow-starting toward it (not in the seed; see `rules.h`).
    #[serde(default = "yes")]
    pub jump_start: bool,
}

fn yes() -> bool {
    true
}

impl Default for PathParams {
    /// g = 0.9 and h = 100 as in the seed. The seed leaves a background flow uncapped when
    /// g·RTT·A/M ≤ m·N = 25 packets because its own inline measurement needs that window; mgrp's
    /// estimates come from probes and passive analysis, so the default caps there too, at no
    /// less than 2 packets (`threshold_pkts = 0, floor_pkts = 2`). A stale estimate (older than
    /// 10 s) is not acted on. The cap is lifted while the path shows no queue (`probe`), so a
    /// background flow takes the room a departed foreground left before the next estimate.
    fn default() -> Self {
        PathParams {
            g: 0.9,
            threshold_pkts: 0,
            floor_pkts: 2,
            h: 100,
            max_age: Duration::from_secs(10),
            probe: true,
            jump_start: true,
        }
    }
}

impl PathParams {
    /// The seed's background rule exactly: no cap at or below m·N = 25 packets.
    pub fn seed() -> Self {
        PathParams {
            threshold_pkts: 25,
            floor_pkts: 0,
            probe: false,
            jump_start: false,
            ..Default::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.g > 0.0 && self.g <= 1.0) {
            return Err(format!("g must be in (0, 1], got {}", self.g));
        }
        if self.h == 0 || self.h > 10_000 {
            return Err(format!("h must be in 1..=10000, got {}", self.h));
        }
        if self.max_age.is_zero() {
            return Err("max_age must be positive".into());
        }
        Ok(())
    }

    /// The map entry for A (bit/s) written at `now_ns` (CLOCK_MONOTONIC).
    pub fn entry(&self, avail_bps: f64, now_ns: u64) -> PathEntry {
        PathEntry {
            avail_bps: avail_bps.max(0.0).min(u64::MAX as f64) as u64,
            updated_ns: now_ns,
            max_age_ns: self.max_age.as_nanos().min(u64::MAX as u128) as u64,
            g_milli: (self.g * 1000.0).round() as u32,
            threshold_pkts: self.threshold_pkts,
            floor_pkts: self.floor_pkts,
            h: self.h,
            flags: if self.probe { PATH_PROBE } else { 0 }
                | if self.jump_start { PATH_JUMP } else { 0 },
            reserved: 0,
        }
    }
}

/// Per-mode counters (`struct mgrp_mode_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RawModeStats {
    pub flows_opened: u64,
    pub flows_closed: u64,
    pub acked_bytes: u64,
    pub acks: u64,
    pub acks_no_estimate: u64,
    pub acks_limited: u64,
    pub limited_ns: u64,
    pub losses: u64,
}

pub(crate) fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of the #[repr(C)] plain-data structs above (no padding: checked in tests).
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

pub(crate) fn from_bytes<T: Copy + Default>(b: &[u8]) -> Option<T> {
    if b.len() != std::mem::size_of::<T>() {
        return None;
    }
    let mut v = T::default();
    // SAFETY: sizes match and T is plain data for which every bit pattern is valid.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut T).cast::<u8>(), b.len()) };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        // struct mgrp_path: 3 × u64 + 6 × u32, no padding.
        assert_eq!(std::mem::size_of::<PathEntry>(), 48);
        assert_eq!(std::mem::size_of::<PathKey>(), 16);
        assert_eq!(std::mem::size_of::<RawModeStats>(), 64);
    }

    #[test]
    fn keys_map_ipv4_into_ipv6() {
        let k = PathKey::from("198.18.3.2".parse::<IpAddr>().unwrap());
        assert_eq!(&k.addr[10..], &[0xff, 0xff, 198, 18, 3, 2]);
        assert_eq!(k.ip().to_string(), "198.18.3.2");
        let v6: IpAddr = "fd00::2".parse().unwrap();
        assert_eq!(PathKey::from(v6).ip(), v6);
    }

    #[test]
    fn entries_round_trip_and_params_are_checked() {
        let e = PathParams::default().entry(10e6, 42);
        assert_eq!(
            (e.avail_bps, e.g_milli, e.h, e.floor_pkts),
            (10_000_000, 900, 100, 2)
        );
        assert_eq!(from_bytes::<PathEntry>(as_bytes(&e)), Some(e));
        assert!(from_bytes::<PathEntry>(&[0; 3]).is_none());
        assert_eq!(PathParams::default().entry(-5.0, 0).avail_bps, 0);
        assert!(PathParams {
            g: 1.5,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(PathParams {
            h: 0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(PathParams::seed().validate().is_ok());
        assert_eq!(e.flags, PATH_PROBE | PATH_JUMP);
        assert_eq!(PathParams::seed().entry(1e6, 0).flags, 0);
    }
}
