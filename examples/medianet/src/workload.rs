//! The seed's workload (seed 002 §5, Table 2): a looped MPEG-like stream of I, P and B frames
//! and the three levels a stream can be sent at.
//!
//! GOP model (the seed gives only sizes and rates; chosen here): 30 frame slots a second, a GOP
//! of 15 in display order `I B B P B B P B B P B B P B B` — 1 I, 4 P, 10 B per half second,
//! which is the seed's 2 / 8 / 20 Hz. Dependencies are forward only: a P depends on the anchor
//! (I or P) three slots before it, a B on the anchor before it (no B is a reference). Frames go
//! out in display order, so a frame's dependency always travels before it on the same stream.

use serde::{Deserialize, Serialize};

/// Frame slots per second.
pub const SLOTS_PER_S: u64 = 30;
/// Frames per GOP.
pub const GOP: u64 = 15;
/// Nanoseconds between frame slots.
pub const SLOT_NS: u64 = 1_000_000_000 / SLOTS_PER_S;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Kind {
    I,
    P,
    B,
}

impl Kind {
    /// The seed's average frame size, bytes.
    pub fn size(self) -> usize {
        match self {
            Kind::I => 13_500,
            Kind::P => 7_625,
            Kind::B => 2_850,
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Kind::I => 0,
            Kind::P => 1,
            Kind::B => 2,
        }
    }

    /// Least important first: B, then P, then I (the order frames are dropped in).
    pub fn importance(self) -> u8 {
        match self {
            Kind::I => 2,
            Kind::P => 1,
            Kind::B => 0,
        }
    }
}

/// The kind of the frame in slot `index` (counted from the stream's start).
pub fn kind_of(index: u64) -> Kind {
    let s = index % GOP;
    if s == 0 {
        Kind::I
    } else if s % 3 == 0 {
        Kind::P
    } else {
        Kind::B
    }
}

/// The frame that frame `index` needs decoded first, if any.
pub fn depends_on(index: u64) -> Option<u64> {
    let s = index % GOP;
    match kind_of(index) {
        Kind::I => None,
        Kind::P => Some(index - 3),
        Kind::B => Some(index - s % 3),
    }
}

/// The level a stream is sent at: which frame kinds it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// I frames only: 216 kbit/s, 2 fps.
    Low,
    /// I and P: 704 kbit/s, 10 fps.
    Medium,
    /// Everything: 1,160 kbit/s, 30 fps.
    High,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Low, Level::Medium, Level::High];

    pub fn carries(self, k: Kind) -> bool {
        match self {
            Level::Low => k == Kind::I,
            Level::Medium => k != Kind::B,
            Level::High => true,
        }
    }

    /// Bit/s the level needs (the seed's Table 2 sums).
    pub fn rate_bps(self) -> f64 {
        match self {
            Level::Low => 216_000.0,
            Level::Medium => 704_000.0,
            Level::High => 1_160_000.0,
        }
    }

    pub fn fps(self) -> f64 {
        match self {
            Level::Low => 2.0,
            Level::Medium => 10.0,
            Level::High => 30.0,
        }
    }

    /// The seed's utilities of the delivery alternatives (seed 000 §6.1: 1.0 > 0.5 > 0.3).
    pub fn utility(self) -> f64 {
        match self {
            Level::Low => 0.3,
            Level::Medium => 0.5,
            Level::High => 1.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holds_the_seeds_frame_rates_and_levels_their_rates() {
        let count = |k: Kind| (0..SLOTS_PER_S).filter(|&i| kind_of(i) == k).count();
        assert_eq!((count(Kind::I), count(Kind::P), count(Kind::B)), (2, 8, 20));
        for l in Level::ALL {
            let bits: usize = (0..SLOTS_PER_S)
                .map(kind_of)
                .filter(|&k| l.carries(k))
                .map(|k| k.size() * 8)
                .sum();
            assert_eq!(bits as f64, l.rate_bps(), "{l:?}");
            let n = (0..SLOTS_PER_S).filter(|&i| l.carries(kind_of(i))).count();
            assert_eq!(n as f64, l.fps());
        }
    }

    #[test]
    fn dependencies_point_back_to_an_anchor_of_the_same_gop() {
        for i in 0..2 * GOP {
            if let Some(d) = depends_on(i) {
                assert!(d < i && d / GOP == i / GOP);
                assert_ne!(kind_of(d), Kind::B);
            }
        }
        assert_eq!(depends_on(15), None);
        assert_eq!(depends_on(18), Some(15));
        assert_eq!(depends_on(20), Some(18));
    }
}
