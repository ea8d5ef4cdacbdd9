//! Two-sided Wren, live: the sender's own captured data segments of one flow, merged with the
//! arrival times the receiver's agent streams back, into the stream [`Wren`](crate::wren::Wren)
//! analyses — the same merge as the offline path ([`crate::wren::merge_two_sided_with`]),
//! done in rounds.
//!
//! Sans-IO: the caller hands in sent segments and arrival records as they come, and polls with
//! its `now` (the sender's capture clock). A sent segment waits [`LiveMerge::hold_ns`] for its
//! arrival record; then it and every arrival of it are merged. Output is released only up to
//! `now − hold`, in time order, so the analyser sees one time-ordered stream exactly as the
//! offline merge would give it, with one difference: the clock offset (smallest one-way delay)
//! is the smallest seen *so far*, where offline it is the smallest of the whole capture. The two
//! agree once the flow's least-queued segment has been seen (a constant offset changes neither
//! rates nor trends; it only places ACKs among data in time).

use crate::wren::{merge_two_sided_with, Segment};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

/// One arrival at the receiver: sequence number, payload bytes, receive time (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub seq: u32,
    pub len: u32,
    pub rx_ns: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MergeCounters {
    /// The flow's data segments the sender captured.
    pub sent: u64,
    /// Arrival records received from the peer.
    pub arrivals: u64,
    /// Arrivals merged with a sent segment.
    pub matched: u64,
    /// Arrivals no sent segment claimed in time (the sender's capture missed it, or it came
    /// after its segment was merged): dropped.
    pub unmatched: u64,
    /// Sent segments dropped because too many waited (the peer's records are not coming).
    pub sent_overflow: u64,
    /// Arrivals dropped because too many waited.
    pub arrival_overflow: u64,
    /// The earliest arrival time received (receiver's clock, ns): the peer's capture ran from
    /// about then.
    pub first_arrival_ns: Option<u64>,
    /// Rounds that lowered the clock offset after the first had set it (a smaller one-way
    /// delay seen later): where the live stream can differ from the offline one.
    pub offset_lowered: u64,
}

type Key = (u32, u32);

/// The live merge of one flow (`sender` → `receiver`).
pub struct LiveMerge {
    sender: SocketAddr,
    receiver: SocketAddr,
    /// How long a sent segment waits for its arrival record before it is merged.
    pub hold_ns: u64,
    /// Sent segments and arrivals each held at most this many.
    pub max_pending: usize,
    sent: VecDeque<Segment>,
    /// Arrivals by (seq, len), each with its order of arrival and when it was handed in.
    arrivals: HashMap<Key, Vec<(u64, Segment, u64)>>,
    held_arrivals: usize,
    next_arrival: u64,
    next_data: u64,
    offset: Option<i128>,
    /// Merged segments waiting for time to pass them, by (time, data before ACK, order).
    out: BTreeMap<(u64, u8, u64), Segment>,
    counters: MergeCounters,
}

impl LiveMerge {
    pub fn new(sender: SocketAddr, receiver: SocketAddr) -> LiveMerge {
        LiveMerge {
            sender,
            receiver,
            hold_ns: 2_000_000_000,
            max_pending: 200_000,
            sent: VecDeque::new(),
            arrivals: HashMap::new(),
            held_arrivals: 0,
            next_arrival: 0,
            next_data: 0,
            offset: None,
            out: BTreeMap::new(),
            counters: MergeCounters::default(),
        }
    }

    pub fn flow(&self) -> (SocketAddr, SocketAddr) {
        (self.sender, self.receiver)
    }

    pub fn counters(&self) -> MergeCounters {
        self.counters
    }

    /// A segment the sender's capture saw: kept if it is this flow's data.
    pub fn handle_sent(&mut self, s: &Segment) {
        if s.src != self.sender || s.dst != self.receiver || s.payload == 0 || s.control {
            return;
        }
        self.counters.sent += 1;
        if self.sent.len() >= self.max_pending {
            self.sent.pop_front();
            self.counters.sent_overflow += 1;
        }
        self.sent.push_back(*s);
    }

    /// Arrival records from the peer, handed in at `now_ns`.
    pub fn handle_arrivals(&mut self, now_ns: u64, records: &[Arrival]) {
        for a in records {
            self.counters.arrivals += 1;
            let first = self.counters.first_arrival_ns.get_or_insert(a.rx_ns);
            *first = (*first).min(a.rx_ns);
            if self.held_arrivals >= self.max_pending {
                self.counters.arrival_overflow += 1;
                continue;
            }
            let seg = Segment {
                ts_ns: a.rx_ns,
                src: self.sender,
                dst: self.receiver,
                seq: a.seq,
                ack: 0,
                has_ack: true,
                control: false,
                payload: a.len,
                frame_bytes: 0,
                sack: [(0, 0); 4],
                sack_len: 0,
            };
            let order = self.next_arrival;
            self.next_arrival += 1;
            self.arrivals
                .entry((a.seq, a.len))
                .or_default()
                .push((order, seg, now_ns));
            self.held_arrivals += 1;
        }
    }

    /// Merge what has waited long enough and release the merged stream up to `now − hold`,
    /// in time order. `u64::MAX` releases everything (the end of a capture).
    pub fn poll(&mut self, now_ns: u64) -> Vec<Segment> {
        let cut = now_ns.saturating_sub(self.hold_ns);
        let mut data = Vec::new();
        let mut arrived: Vec<(u64, Segment)> = Vec::new();
        while self.sent.front().is_some_and(|s| s.ts_ns <= cut) {
            let s = self.sent.pop_front().expect("checked");
            if let Some(list) = self.arrivals.remove(&(s.seq, s.payload)) {
                self.held_arrivals -= list.len();
                self.counters.matched += list.len() as u64;
                arrived.extend(list.into_iter().map(|(o, seg, _)| (o, seg)));
            }
            data.push((self.next_data, s));
            self.next_data += 1;
        }
        // Arrivals nobody claimed within twice the hold are not going to be.
        let stale = now_ns.saturating_sub(2 * self.hold_ns);
        // (Records later than the hold miss their segment: they are counted here.)
        let mut gone = 0;
        self.arrivals.retain(|_, list| {
            let before = list.len();
            list.retain(|(_, _, at)| *at >= stale || now_ns == u64::MAX);
            gone += before - list.len();
            !list.is_empty()
        });
        if now_ns == u64::MAX {
            gone += self.held_arrivals - gone;
            self.arrivals.clear();
        }
        self.held_arrivals -= gone.min(self.held_arrivals);
        self.counters.unmatched += gone as u64;
        if !data.is_empty() {
            arrived.sort_by_key(|(o, _)| *o);
            let sender: Vec<Segment> = data.iter().map(|(_, s)| *s).collect();
            let receiver: Vec<Segment> = arrived.iter().map(|(_, s)| *s).collect();
            // The offset so far: the smallest one-way delay seen (see the module's note).
            if let Some(o) = crate::wren::two_sided_offset(&sender, &receiver) {
                if self.offset.is_some_and(|prev| o < prev) {
                    self.counters.offset_lowered += 1;
                }
                self.offset = Some(self.offset.map_or(o, |prev| prev.min(o)));
            }
            let merged = merge_two_sided_with(&sender, &receiver, self.offset.unwrap_or(0));
            // The merge lists data (in send order) then ACKs (in arrival order); keep that
            // order among equal times, as the offline merge's stable sort does.
            let (mut d, mut a) = (data.iter(), arrived.iter());
            for m in merged {
                let (kind, order) = if m.payload > 0 {
                    (0, d.next().map_or(0, |x| x.0))
                } else {
                    (1, a.next().map_or(0, |x| x.0))
                };
                self.out.insert((m.ts_ns, kind, order), m);
            }
        }
        let keep = self.out.split_off(&(cut.saturating_add(1), 0, 0));
        let ready = std::mem::replace(&mut self.out, keep);
        ready.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wren::{merge_two_sided, Wren, WrenParams};

    const MSS: u32 = 1448;

    fn seg(ts_ns: u64, seq: u32) -> Segment {
        Segment {
            ts_ns,
            src: "10.0.0.1:40000".parse().unwrap(),
            dst: "10.0.2.2:5001".parse().unwrap(),
            seq,
            ack: 0,
            has_ack: true,
            control: false,
            payload: MSS,
            frame_bytes: MSS + 66,
            sack: [(0, 0); 4],
            sack_len: 0,
        }
    }

    /// A flow of bursts at rising rates through a 50 Mbit/s bottleneck (a FIFO queue), the
    /// receiver's clock 3 s ahead: the sender's segments and the receiver's arrivals.
    fn flow() -> (Vec<Segment>, Vec<Segment>) {
        let (cap, prop) = (50e6, 2_000_000u64);
        let (mut sent, mut recv) = (Vec::new(), Vec::new());
        let (mut t, mut seq, mut free_at) = (1_000_000_000u64, 1u32, 0u64);
        for burst in 0..60u64 {
            let rate = 10e6 + (burst % 10) as f64 * 8e6;
            let gap = ((MSS + 66) as f64 * 8.0 / rate * 1e9) as u64;
            // Pairs 10 µs apart (a delayed ACK's release, a pacing quantum): each pair is one
            // unit, pairs `2 gap` apart.
            for k in 0..30u64 {
                let at = t + (k / 2) * 2 * gap + (k % 2) * 10_000;
                let s = seg(at, seq);
                let serve = ((MSS + 66) as f64 * 8.0 / cap * 1e9) as u64;
                free_at = free_at.max(at + prop) + serve;
                let mut r = s;
                r.ts_ns = free_at + 3_000_000_000;
                // A receiver's capture carries its own ACK number; records do not.
                r.ack = 0;
                sent.push(s);
                recv.push(r);
                seq = seq.wrapping_add(MSS);
            }
            t += 30 * gap;
            t += 40_000_000;
        }
        (sent, recv)
    }

    fn analyse(stream: &[Segment]) -> (Vec<crate::wren::TrainReport>, Vec<f64>) {
        let mut w = Wren::new(WrenParams::default().two_sided());
        for s in stream {
            w.handle_segment(s);
        }
        let est = w.poll_estimates(u64::MAX);
        (w.take_trains(), est.iter().map(|e| e.value_bps).collect())
    }

    /// Live, in 100 ms rounds with the peer's records 150 ms behind, gives the offline merge's
    /// stream segment for segment, and so the same trains and estimates.
    #[test]
    fn live_merge_equals_offline_merge() {
        let (sent, recv) = flow();
        let offline = merge_two_sided(&sent, &recv);
        let mut live = LiveMerge::new(sent[0].src, sent[0].dst);
        let mut got = Vec::new();
        let (mut i, mut j) = (0, 0);
        let end = sent.last().unwrap().ts_ns + 5_000_000_000;
        let mut now = sent[0].ts_ns;
        while now < end {
            now += 100_000_000;
            while i < sent.len() && sent[i].ts_ns <= now {
                live.handle_sent(&sent[i]);
                i += 1;
            }
            // Records of arrivals (receiver clock) up to 150 ms before now (sender clock).
            let mut batch = Vec::new();
            while j < recv.len() && recv[j].ts_ns - 3_000_000_000 + 150_000_000 <= now {
                batch.push(Arrival {
                    seq: recv[j].seq,
                    len: recv[j].payload,
                    rx_ns: recv[j].ts_ns,
                });
                j += 1;
            }
            live.handle_arrivals(now, &batch);
            got.extend(live.poll(now));
        }
        got.extend(live.poll(u64::MAX));
        assert_eq!(got.len(), offline.len());
        assert_eq!(got, offline);
        let c = live.counters();
        assert_eq!((c.sent, c.matched, c.unmatched), (1800, 1800, 0));
        let (t_live, e_live) = analyse(&got);
        let (t_off, e_off) = analyse(&offline);
        assert!(!e_off.is_empty(), "{t_off:?}");
        assert_eq!(t_live, t_off);
        assert_eq!(e_live, e_off);
        // An idle 50 Mbit/s bottleneck: the highest lower bound is the 50 Mbit/s burst, the
        // 58 Mbit/s one queued (gap rounding to whole ns allows 0.01%).
        assert!(e_off.iter().all(|v| (*v - 50e6).abs() < 5e3), "{e_off:?}");
    }

    /// The clock offset only places ACKs among data: any offset up to the smallest one-way
    /// delay gives the same trains, verdicts and estimates (what lets the live merge, whose
    /// offset is the smallest seen so far, equal the offline one).
    #[test]
    fn two_sided_analysis_does_not_depend_on_the_offset() {
        let (sent, recv) = flow();
        let min = crate::wren::two_sided_offset(&sent, &recv).unwrap();
        let judged = |o: i128| {
            let (t, e) = analyse(&merge_two_sided_with(&sent, &recv, o));
            let t: Vec<_> = t
                .iter()
                .map(|t| (t.start_ns, t.isr_bps, t.verdict))
                .collect();
            (t, e)
        };
        let base = judged(min);
        assert!(!base.1.is_empty());
        for less in [1, 7_000, 29_000, 31_000, 2_000_000, 300_000_000] {
            assert_eq!(judged(min - less), base, "offset lower by {less} ns");
        }
    }

    #[test]
    fn other_flows_stale_and_excess_records_are_counted_not_kept() {
        let (sent, recv) = flow();
        let mut live = LiveMerge::new(sent[0].src, sent[0].dst);
        live.max_pending = 100;
        let mut other = sent[0];
        other.src = "10.0.0.9:1".parse().unwrap();
        live.handle_sent(&other);
        for s in &sent[..150] {
            live.handle_sent(s);
        }
        let c = live.counters();
        assert_eq!((c.sent, c.sent_overflow), (150, 50));
        let recs: Vec<Arrival> = recv[..150]
            .iter()
            .map(|r| Arrival {
                seq: r.seq.wrapping_add(7),
                len: r.payload,
                rx_ns: r.ts_ns,
            })
            .collect();
        live.handle_arrivals(0, &recs);
        assert_eq!(live.counters().arrival_overflow, 50);
        // Nothing matches (wrong sequence numbers): after 2 holds they are dropped.
        let _ = live.poll(10_000_000_000);
        let c = live.counters();
        assert_eq!((c.matched, c.unmatched), (0, 100));
        assert!(live.arrivals.is_empty() && live.held_arrivals == 0);
    }
}
