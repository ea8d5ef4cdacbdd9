//! What is asked for: a train of probes, each with its size, gap, TTL and rider permission.

use serde::{Deserialize, Serialize};

/// Bytes a probe occupies on an Ethernet link beyond its UDP payload: UDP 8 + IPv4 20 + Ethernet 14.
pub const WIRE_OVERHEAD: u64 = 42;
/// Smallest probe: the MGRP probe header (`mgrp_wire::probe::HEADER_LEN`; the engine asserts
/// they agree).
pub const MIN_PROBE_SIZE: u16 = 32;
/// Largest probe: a UDP payload that fits a 1500-byte MTU without IP fragmentation (which
/// would break per-probe timing).
pub const MAX_PROBE_SIZE: u16 = 1472;
/// Most probes in one train.
pub const MAX_TRAIN_LEN: usize = 10_000;
/// Longest gap between two probes.
pub const MAX_GAP_NS: u64 = 10_000_000_000;
/// Longest planned train.
pub const MAX_TRAIN_NS: u64 = 60_000_000_000;

/// Bits on the wire of a probe of `size` payload bytes.
pub fn wire_bits(size: u16) -> f64 {
    (size as u64 + WIRE_OVERHEAD) as f64 * 8.0
}

/// One probe: its size (UDP payload bytes, MGRP header included), the gap since the previous
/// probe (ignored for the first), an optional IP TTL, and whether its padding may carry a rider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub size: u16,
    pub gap_ns: u64,
    #[serde(default)]
    pub ttl: Option<u8>,
    #[serde(default)]
    pub may_carry: bool,
}

impl ProbeSpec {
    /// A probe an estimator asks for: default TTL, and its padding may carry a rider (the
    /// engine's rider ratio limits riders to a prefix of the train).
    pub fn new(size: u16, gap_ns: u64) -> ProbeSpec {
        ProbeSpec {
            size,
            gap_ns,
            ttl: None,
            may_carry: true,
        }
    }
}

/// A train: probes in departure order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainSpec {
    pub probes: Vec<ProbeSpec>,
    /// Flag the train if its p99 sender gap error exceeds this (default 5 us).
    #[serde(default)]
    pub tolerance_ns: Option<u64>,
    /// The TTL at which probes reach the peer agent, when the sender knows it (a traceroute
    /// found it): probes with a lower TTL expire on the way, so the peer is told not to wait
    /// for them and reports as soon as the rest are in (a parallel traceroute every RTT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach_ttl: Option<u8>,
}

/// Why a train cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("a train has 1..={MAX_TRAIN_LEN} probes, not {0}")]
    Length(usize),
    #[error("probe {index}: size {size} is outside {MIN_PROBE_SIZE}..={MAX_PROBE_SIZE} bytes (UDP payload, MGRP header included)")]
    Size { index: usize, size: u16 },
    #[error("probe {index}: gap {gap_ns} ns is longer than 10 s")]
    Gap { index: usize, gap_ns: u64 },
    #[error("probe {index}: TTL 0 would never leave the host")]
    Ttl { index: usize },
    #[error("train lasts {} s; the limit is 60 s", *.planned_ns as f64 / 1e9)]
    Duration { planned_ns: u64 },
}

impl TrainSpec {
    /// Probes as given, default tolerance.
    pub fn new(probes: Vec<ProbeSpec>) -> TrainSpec {
        TrainSpec {
            probes,
            tolerance_ns: None,
            reach_ttl: None,
        }
    }

    /// Whether probe `p` can reach the peer (no TTL, or one at least [`TrainSpec::reach_ttl`]).
    pub fn may_arrive(&self, p: &ProbeSpec) -> bool {
        match (p.ttl, self.reach_ttl) {
            (Some(t), Some(r)) => t >= r,
            _ => true,
        }
    }

    /// `count` probes of `size` bytes, `gap_ns` apart, none carrying riders (a train spelled
    /// by a person: the Probe API's `count`/`size`/`gap_ns`, `mgrp probe`).
    pub fn uniform(count: usize, size: u16, gap_ns: u64) -> TrainSpec {
        TrainSpec::new(
            (0..count)
                .map(|i| ProbeSpec {
                    may_carry: false,
                    ..ProbeSpec::new(size, if i == 0 { 0 } else { gap_ns })
                })
                .collect(),
        )
    }

    /// `count` probes of `size` bytes at a constant rate `rate_bps` (wire bits), as an
    /// estimator asks for them.
    pub fn constant_rate(count: usize, size: u16, rate_bps: f64) -> TrainSpec {
        let gap = (wire_bits(size) / rate_bps * 1e9).round() as u64;
        TrainSpec::new(
            (0..count)
                .map(|i| ProbeSpec::new(size, if i == 0 { 0 } else { gap }))
                .collect(),
        )
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.probes.is_empty() || self.probes.len() > MAX_TRAIN_LEN {
            return Err(SpecError::Length(self.probes.len()));
        }
        for (index, p) in self.probes.iter().enumerate() {
            if !(MIN_PROBE_SIZE..=MAX_PROBE_SIZE).contains(&p.size) {
                return Err(SpecError::Size {
                    index,
                    size: p.size,
                });
            }
            if p.gap_ns > MAX_GAP_NS {
                return Err(SpecError::Gap {
                    index,
                    gap_ns: p.gap_ns,
                });
            }
            if p.ttl == Some(0) {
                return Err(SpecError::Ttl { index });
            }
        }
        let planned_ns = self.planned_ns();
        if planned_ns > MAX_TRAIN_NS {
            return Err(SpecError::Duration { planned_ns });
        }
        Ok(())
    }

    /// Offset of each probe's intended departure from the first's.
    pub fn offsets(&self) -> Vec<u64> {
        offsets(self.probes.iter().map(|p| p.gap_ns))
    }

    /// Intended time from the first probe to the last.
    pub fn planned_ns(&self) -> u64 {
        self.probes.iter().skip(1).map(|p| p.gap_ns).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.probes.iter().map(|p| p.size as u64).sum()
    }

    /// The planned mean rate on the wire from the first departure to the last (bit/s): every
    /// probe after the first, over the planned span; 0 for a single probe.
    pub fn mean_rate_bps(&self) -> f64 {
        let ns = self.planned_ns();
        if ns == 0 {
            return 0.0;
        }
        let bits: f64 = self.probes.iter().skip(1).map(|p| wire_bits(p.size)).sum();
        bits / ns as f64 * 1e9
    }
}

/// Departure offsets from the first probe, given each probe's gap since the previous one (the
/// first probe's gap is ignored).
pub fn offsets(gaps: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut t = 0u64;
    gaps.enumerate()
        .map(|(i, g)| {
            if i > 0 {
                t = t.saturating_add(g);
            }
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(TrainSpec::uniform(100, 1000, 100_000).validate().is_ok());
        assert_eq!(
            TrainSpec::uniform(0, 1000, 1).validate(),
            Err(SpecError::Length(0))
        );
        assert_eq!(
            TrainSpec::uniform(10, 20, 1).validate(),
            Err(SpecError::Size { index: 0, size: 20 })
        );
        assert!(TrainSpec::uniform(10, 1473, 1).validate().is_err());
        assert!(TrainSpec::uniform(10_001, 100, 1).validate().is_err());
        assert!(matches!(
            TrainSpec::uniform(100, 100, 1_000_000_000).validate(),
            Err(SpecError::Duration { .. })
        ));
        let mut t = TrainSpec::uniform(2, 100, 11_000_000_000);
        assert_eq!(
            t.validate(),
            Err(SpecError::Gap {
                index: 1,
                gap_ns: 11_000_000_000
            })
        );
        t.probes[1].gap_ns = 1;
        t.probes[0].ttl = Some(0);
        assert_eq!(t.validate(), Err(SpecError::Ttl { index: 0 }));
        let t = TrainSpec::uniform(4, 100, 10);
        assert_eq!(t.offsets(), vec![0, 10, 20, 30]);
        assert_eq!(t.planned_ns(), 30);
        assert_eq!(t.bytes(), 400);
        // Three 142-byte frames on the wire in 30 ns; one probe has no rate.
        assert!((t.mean_rate_bps() - 3.0 * wire_bits(100) / 30e-9).abs() < 1e-3);
        assert_eq!(TrainSpec::uniform(1, 100, 10).mean_rate_bps(), 0.0);
    }

    #[test]
    fn estimator_trains_may_carry_riders_spelled_ones_do_not() {
        assert!(TrainSpec::uniform(3, 100, 10)
            .probes
            .iter()
            .all(|p| !p.may_carry));
        let t = TrainSpec::constant_rate(3, 1208, 10e6);
        assert!(t.probes.iter().all(|p| p.may_carry && p.ttl.is_none()));
        // 1250 bytes on the wire at 10 Mbit/s: 1 ms apart.
        assert_eq!(t.offsets(), vec![0, 1_000_000, 2_000_000]);
    }

    #[test]
    fn json_reads_old_and_minimal_fields() {
        let t: TrainSpec =
            serde_json::from_str(r#"{"probes":[{"size":100,"gap_ns":0},{"size":200,"gap_ns":5,"ttl":3,"may_carry":true}]}"#)
                .unwrap();
        assert_eq!(
            t.probes[0],
            ProbeSpec {
                size: 100,
                gap_ns: 0,
                ttl: None,
                may_carry: false
            }
        );
        assert_eq!(t.probes[1].ttl, Some(3));
        assert_eq!(t.tolerance_ns, None);
    }
}
