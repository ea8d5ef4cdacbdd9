//! Nanosecond timestamps that say which clock they were read from.

use serde::{Deserialize, Serialize};

/// CLOCK_MONOTONIC nanoseconds: this host's clock for deadlines and pacing. Meaningless on
/// another host.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct MonoNs(pub u64);

/// CLOCK_REALTIME nanoseconds (Unix epoch): what kernel packet timestamps and the probes'
/// sender stamps use. Comparable across hosts only as far as their clocks agree.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct WallNs(pub u64);

impl MonoNs {
    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub fn since(self, earlier: MonoNs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
    pub fn add_ns(self, ns: u64) -> MonoNs {
        MonoNs(self.0.saturating_add(ns))
    }
}

impl WallNs {
    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub fn since(self, earlier: WallNs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_json_is_a_bare_number() {
        assert_eq!(MonoNs(10).since(MonoNs(4)), 6);
        assert_eq!(MonoNs(4).since(MonoNs(10)), 0);
        assert_eq!(WallNs(4).since(WallNs(10)), 0);
        assert_eq!(MonoNs(u64::MAX).add_ns(5), MonoNs(u64::MAX));
        assert_eq!(serde_json::to_string(&WallNs(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<MonoNs>("9").unwrap(), MonoNs(9));
    }
}
