//! The receiver's decode rule, sans-IO: a frame counts if it arrived by its deadline (its
//! generation time plus the playout delay) and the frame it depends on was decoded. So a P
//! whose I was dropped, or arrived late, does not count, nor does anything predicted from it.
//!
//! Frames of a stream arrive in order on one TCP connection and a dependency is always an
//! earlier frame, so each frame is judged when it arrives. Per stream only the last few
//! decoded anchors are kept (bounded).

use crate::workload::{depends_on, kind_of, Kind};
use serde::Serialize;
use std::collections::VecDeque;

/// Decoded anchors remembered per stream: a dependency is at most 3 slots back.
const ANCHORS_KEPT: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Decoded,
    /// Arrived after its deadline.
    Late,
    /// Arrived in time, but the frame it depends on was not decoded.
    Broken,
    /// Not newer than the last frame of the stream (a replay or a bad sender): ignored.
    OutOfOrder,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamCounts {
    pub received: u64,
    pub decoded: u64,
    pub decoded_bytes: u64,
    pub late: u64,
    pub broken: u64,
    pub out_of_order: u64,
    /// Decoded frames by kind: I, P, B.
    pub decoded_by_kind: [u64; 3],
}

#[derive(Debug, Default)]
struct StreamState {
    last: Option<u64>,
    anchors: VecDeque<u64>,
    counts: StreamCounts,
}

pub struct Decoder {
    playout_ns: u64,
    streams: Vec<StreamState>,
}

impl Decoder {
    /// `playout_ns`: how long after its generation a frame may arrive and still be shown.
    pub fn new(streams: usize, playout_ns: u64) -> Decoder {
        Decoder {
            playout_ns,
            streams: (0..streams).map(|_| StreamState::default()).collect(),
        }
    }

    /// Frame `index` of `stream`, generated at `gen_ns`, arrived whole at `now_ns` (same clock).
    /// An unknown stream is ignored (`None`).
    pub fn handle_frame(
        &mut self,
        stream: usize,
        index: u64,
        gen_ns: u64,
        now_ns: u64,
    ) -> Option<Outcome> {
        let playout = self.playout_ns;
        let s = self.streams.get_mut(stream)?;
        if s.last.is_some_and(|l| index <= l) {
            s.counts.out_of_order += 1;
            return Some(Outcome::OutOfOrder);
        }
        s.last = Some(index);
        s.counts.received += 1;
        let kind = kind_of(index);
        let outcome = if now_ns > gen_ns.saturating_add(playout) {
            Outcome::Late
        } else if depends_on(index).is_some_and(|d| !s.anchors.contains(&d)) {
            Outcome::Broken
        } else {
            Outcome::Decoded
        };
        match outcome {
            Outcome::Decoded => {
                s.counts.decoded += 1;
                s.counts.decoded_bytes += kind.size() as u64;
                s.counts.decoded_by_kind[kind.code() as usize] += 1;
                if kind != Kind::B {
                    s.anchors.push_back(index);
                    if s.anchors.len() > ANCHORS_KEPT {
                        s.anchors.pop_front();
                    }
                }
            }
            Outcome::Late => s.counts.late += 1,
            Outcome::Broken => s.counts.broken += 1,
            Outcome::OutOfOrder => {}
        }
        Some(outcome)
    }

    pub fn counts(&self) -> Vec<StreamCounts> {
        self.streams.iter().map(|s| s.counts.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::SLOT_NS;

    const PLAYOUT: u64 = 1_000_000_000;

    fn arrive(d: &mut Decoder, index: u64, delay_ns: u64) -> Outcome {
        let gen = index * SLOT_NS;
        d.handle_frame(0, index, gen, gen + delay_ns).unwrap()
    }

    #[test]
    fn a_p_frame_whose_i_frame_was_dropped_does_not_count_nor_what_depends_on_it() {
        let mut d = Decoder::new(1, PLAYOUT);
        // GOP 0 whole and in time.
        for i in 0..15 {
            assert_eq!(arrive(&mut d, i, 50_000_000), Outcome::Decoded, "frame {i}");
        }
        // GOP 1: the I frame (15) was dropped at the sender; P 18 and B 16 arrive in time.
        assert_eq!(arrive(&mut d, 16, 50_000_000), Outcome::Broken);
        assert_eq!(arrive(&mut d, 18, 50_000_000), Outcome::Broken);
        assert_eq!(
            arrive(&mut d, 21, 50_000_000),
            Outcome::Broken,
            "P chained to P 18"
        );
        // The next I decodes again.
        assert_eq!(arrive(&mut d, 30, 50_000_000), Outcome::Decoded);
        assert_eq!(arrive(&mut d, 33, 50_000_000), Outcome::Decoded);
        let c = &d.counts()[0];
        assert_eq!((c.decoded, c.broken, c.late), (17, 3, 0));
        assert_eq!(c.decoded_by_kind, [2, 5, 10]);
    }

    #[test]
    fn a_late_anchor_breaks_its_dependants_and_a_late_frame_does_not_count() {
        let mut d = Decoder::new(1, PLAYOUT);
        assert_eq!(arrive(&mut d, 0, 10), Outcome::Decoded);
        assert_eq!(arrive(&mut d, 3, PLAYOUT + 1), Outcome::Late);
        assert_eq!(arrive(&mut d, 4, 10), Outcome::Broken);
        assert_eq!(arrive(&mut d, 6, 10), Outcome::Broken);
        // Exactly on the deadline still counts.
        let mut d = Decoder::new(1, PLAYOUT);
        assert_eq!(arrive(&mut d, 0, PLAYOUT), Outcome::Decoded);
    }

    #[test]
    fn replays_and_unknown_streams_are_ignored_not_counted() {
        let mut d = Decoder::new(1, PLAYOUT);
        assert_eq!(arrive(&mut d, 0, 10), Outcome::Decoded);
        assert_eq!(arrive(&mut d, 0, 10), Outcome::OutOfOrder);
        assert_eq!(d.handle_frame(5, 1, 0, 0), None);
        assert_eq!(d.counts()[0].decoded, 1);
    }
}
