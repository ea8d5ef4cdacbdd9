//! Inline measurement (ImTCP, `../shared/notes/seed-001.md` §2): a kernel TCP flow's own
//! segments are held briefly and released as short streams whose gaps sweep a sub-range of rates;
//! the returning ACKs are the echoes. This is the sans-IO control unit and measurement unit of the
//! thesis (its Fig. 8): it is told about segments, ACKs and the flow's cwnd/srtt/rttvar, each with
//! an explicit `now`, and says which segment to release next and when. The search itself is the
//! sub-range sweep ([`Sweep`]).
//!
//! States (the thesis' Fig. 9):
//! - **Store**: a measurement is planned and segments are held (FIFO) until N of them can form a
//!   stream; a timer of (M/A)(N−1) + 4·rttvar bounds the wait.
//! - **SendStream**: N held segments leave at the sweep's gaps; newer segments queue behind.
//! - **EmptyBuffer** (transient): the timer expired or cwnd fell below N: everything held leaves
//!   now, and the machine stores again (the measurement goes on with the next N segments).
//! - **Pass**: all streams of the measurement are out; segments leave at once until every ACK of
//!   those streams is back and one srtt has passed since the measurement began (at most one
//!   measurement per RTT).
//!
//! Choices the seed leaves open (`docs/inline.md`):
//! - all streams of a measurement are sent within one RTT, before their verdicts return
//!   ([`Sweep::measurement_plan`]); verdicts of streams sent after an early stop are dropped;
//! - the first range comes from one stream of N segments released back to back (Cprobe): its ACK
//!   dispersion rate r gives (r/2, r), and r stands in for the capacity in the sweep (its upper
//!   clamp and its rise floor of one packet's service time);
//! - an ACK is the echo of the highest segment it newly covers; segments it covers below that one
//!   have no echo of their own (delayed ACKs: every other segment), and the points of the sweep
//!   are formed between echoed segments with the bits sent in between;
//! - a stream with a retransmission or a duplicate ACK while it was outstanding, or whose ACKs do
//!   not all return within 2·srtt + 4·rttvar + 250 ms, gives the sweep an "unable to determine"
//!   (T = 0) verdict and counts as lost;
//! - A in the timer is the last estimate, before one the initial stream's rate, before that the
//!   flow's own cwnd·M/srtt; the timer is at least [`InlineParams::min_hold_ns`] and at most
//!   srtt + 4·rttvar (N segments come within a round trip when cwnd ≥ N);
//! - a stream lasts at most max(srtt/2, 5 ms): longer planned streams have all gaps shrunk alike
//!   (a wrong, low range must not hold the flow's segments towards an RTO);
//! - an echo whose ACK came more than 4× the stream's median ACK gap after the previous one is
//!   dropped: the receiver's delayed-ACK timer (or the next write of an app-limited flow), not the
//!   path, spaced it;
//! - three of the last five results at the top of the range (≥ 90% of r) redo the initial
//!   stream, whose r is then at least 1.5× the old one: the path's capacity may be above the r
//!   first read;
//! - no measurement starts within one srtt of a retransmission or duplicate ACK (loss recovery);
//! - at most max(256, 2·cwnd) segments held (up to 4096);
//! - leftovers are released at once, not re-paced (the kernel would have sent them as a burst on
//!   the ACKs that released them anyway).
//!
//! Segments are never reordered, duplicated or dropped: the queue is one FIFO, a segment leaves
//! only from its head, and every held segment has a bound on its wait (property-tested).

use crate::sweep::{StreamPacket, Sweep, SweepParams};
use crate::{Estimate, Estimator, Quality};
use serde::Serialize;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InlineParams {
    /// Segments per stream (N): 5 with an ACK per segment, about 10 with delayed ACKs (§2.7).
    pub n: usize,
    /// The sweep's parameters (its `n` is set to ours, its measurement count to unbounded).
    pub sweep: SweepParams,
    /// The hold timer is never shorter than this (reading the TUN and waking up take time).
    pub min_hold_ns: u64,
    /// At most this many segments held (or 2·cwnd, up to 16 times this); at the bound everything
    /// held is released.
    pub max_held: usize,
}

impl InlineParams {
    /// Defaults for a sender whose access link runs at `access_bps`: N = 10 (Linux receivers
    /// delay ACKs), the sweep's defaults otherwise.
    pub fn new(access_bps: f64) -> Self {
        InlineParams {
            n: 10,
            sweep: SweepParams::new(access_bps),
            min_hold_ns: 200_000,
            max_held: 256,
        }
    }
}

/// What the kernel says about the flow (sock_diag / TCP_INFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowInfo {
    /// Congestion window, segments.
    pub cwnd: u32,
    pub srtt_ns: u64,
    pub rttvar_ns: u64,
}

/// One outgoing TCP segment of the flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Sequence number of its first payload byte.
    pub seq: u32,
    /// Payload bytes (0 for a pure ACK, which is never held).
    pub len: u32,
    /// Its size on the wire, bits (the sweep's rates are in these).
    pub bits: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum State {
    Store,
    SendStream,
    Pass,
}

/// Counters, including the reasons the flow could not be measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InlineCounters {
    pub segments: u64,
    /// Segments held for a stream at least briefly.
    pub held: u64,
    /// Segments that left without being held.
    pub passed: u64,
    /// Segments passed because cwnd < N (cannot measure).
    pub cwnd_below_n: u64,
    /// Hold timer expiries with fewer than N segments held (app-limited below N in flight).
    pub app_limited: u64,
    /// Held segments released because the hold bound was reached.
    pub overflow: u64,
    pub streams_sent: u64,
    /// Streams whose ACKs came back whole and were handed to the sweep.
    pub streams_measured: u64,
    /// Streams spoilt by a retransmission or a duplicate ACK (heavy loss: cannot measure).
    pub streams_lost: u64,
    /// Streams whose ACKs did not all return in time.
    pub streams_timed_out: u64,
    /// Streams whose ACKs came back more than twice as fast as the stream left (ACK
    /// compression after the bottleneck): judged unclear (T = 0).
    pub streams_compressed: u64,
    /// Verdicts dropped because the sweep stopped the measurement early.
    pub streams_dropped: u64,
    pub retransmissions: u64,
    pub dup_acks: u64,
    pub measurements: u64,
    /// Measurements in which no stream could tell (all spoilt or unclear): no result.
    pub measurements_void: u64,
    /// Initial streams redone because results sat at the top of the range.
    pub restarts: u64,
}

/// Something the driver may log or publish.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum InlineEvent {
    /// A stream left: its measurement (None for the initial one), index, the planned rates of
    /// its gaps (bit/s) and the segments' send times.
    StreamSent {
        measurement: Option<u32>,
        index: usize,
        rates: Vec<f64>,
        sends_ns: Vec<u64>,
    },
    /// A stream's echoes were judged: its (send, echo) times and bits per point, the verdict
    /// (1 rising, −1 flat, 0 unclear or unusable) and whether loss spoilt it (for traces).
    StreamEchoed {
        measurement: Option<u32>,
        index: usize,
        points: Vec<(u64, u64, f64)>,
        trend: i8,
        spoilt: bool,
    },
    /// A measurement completed.
    Measured { at_ns: u64, value_bps: f64 },
}

/// A stream may always last this long, however short the srtt.
const MIN_STREAM_CAP_NS: u64 = 5_000_000;

/// Events kept for the driver at most (the oldest are dropped).
const MAX_EVENTS: usize = 1024;

struct Held {
    id: u64,
    /// When it may leave; `None` while it waits for a stream to form.
    due: Option<u64>,
    /// (stream uid, position) if it is part of a stream.
    stream: Option<(u64, usize)>,
}

struct StreamSeg {
    id: u64,
    seq_end: u32,
    bits: f64,
    sent: Option<u64>,
    rx: Option<u64>,
    covered: bool,
}

struct Pending {
    uid: u64,
    measurement: Option<u32>,
    index: usize,
    rates: Vec<f64>,
    segs: Vec<StreamSeg>,
    spoilt: bool,
    /// Give up waiting for its ACKs at this time (set once all its segments left).
    deadline: Option<u64>,
}

struct Plan {
    measurement: Option<u32>,
    streams: VecDeque<Vec<f64>>,
    next_index: usize,
}

pub struct InlineMachine {
    p: InlineParams,
    flow: Option<FlowInfo>,
    state: State,
    queue: VecDeque<Held>,
    /// Held segments with no due time yet (all at the tail of the queue).
    undecided: usize,
    /// seq_end and bits of the undecided segments, in order.
    undecided_meta: VecDeque<(u64, u32, f64)>,
    timer: Option<u64>,
    plan: Option<Plan>,
    pending: VecDeque<Pending>,
    next_uid: u64,
    sweep: Option<Sweep>,
    initial_rate: Option<f64>,
    last_measurement_start: Option<u64>,
    highest_seq_end: Option<u32>,
    last_ack: Option<u32>,
    seg_bits: f64,
    counters: InlineCounters,
    events: VecDeque<InlineEvent>,
    last_estimate: Option<(u64, Estimate)>,
    first_ns: Option<u64>,
    /// Of the last few results, which sat at the top of the range (≥ 90% of r).
    at_top: VecDeque<bool>,
    /// The last retransmission or duplicate ACK seen.
    last_loss_ns: Option<u64>,
}

/// a ≤ b in sequence space.
fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

impl InlineMachine {
    pub fn new(p: InlineParams) -> Self {
        InlineMachine {
            p: InlineParams { n: p.n.max(3), ..p },
            flow: None,
            state: State::Pass,
            queue: VecDeque::new(),
            undecided: 0,
            undecided_meta: VecDeque::new(),
            timer: None,
            plan: None,
            pending: VecDeque::new(),
            next_uid: 0,
            sweep: None,
            initial_rate: None,
            last_measurement_start: None,
            highest_seq_end: None,
            last_ack: None,
            seg_bits: 12_000.0,
            counters: InlineCounters::default(),
            events: VecDeque::new(),
            last_estimate: None,
            first_ns: None,
            at_top: VecDeque::new(),
            last_loss_ns: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn counters(&self) -> InlineCounters {
        self.counters
    }

    /// Segments in the machine (held or due).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The latest estimate and when it was made.
    pub fn estimate(&self) -> Option<&(u64, Estimate)> {
        self.last_estimate.as_ref()
    }

    /// The next event for the driver, oldest first.
    pub fn poll_event(&mut self) -> Option<InlineEvent> {
        self.events.pop_front()
    }

    /// The flow's cwnd/srtt/rttvar as the kernel reports them.
    pub fn handle_flow(&mut self, now: u64, info: FlowInfo) {
        self.flow = Some(info);
        self.update(now);
    }

    /// The hold timer: (M/A)(N−1) + 4·rttvar (seed §2.4), at least `min_hold_ns`.
    pub fn hold_timer_ns(&self) -> u64 {
        let f = self.flow.unwrap_or(FlowInfo {
            cwnd: 0,
            srtt_ns: 0,
            rttvar_ns: 0,
        });
        let a = self
            .last_estimate
            .as_ref()
            .map(|(_, e)| e.value_bps)
            .or(self.initial_rate)
            .unwrap_or(f.cwnd as f64 * self.seg_bits * 1e9 / f.srtt_ns.max(1) as f64)
            .max(1e3);
        let k = self.seg_bits / a * (self.p.n - 1) as f64 * 1e9;
        // At most srtt + 4·rttvar: with cwnd ≥ N, N segments come within a round trip whatever
        // A reads (an estimate near 0 would otherwise hold segments for seconds).
        let cap = f.srtt_ns + 4 * f.rttvar_ns;
        (k.min(cap as f64) as u64 + 4 * f.rttvar_ns)
            .min(cap)
            .max(self.p.min_hold_ns)
    }

    fn cwnd_ok(&self) -> bool {
        self.flow.is_some_and(|f| f.cwnd as usize >= self.p.n)
    }

    /// A segment the flow just wrote, under the driver's `id` (ids increase with arrival).
    pub fn handle_segment(&mut self, now: u64, id: u64, seg: Segment) {
        self.first_ns.get_or_insert(now);
        self.update(now);
        self.counters.segments += 1;
        let seq_end = seg.seq.wrapping_add(seg.len);
        if seg.len > 0 {
            self.seg_bits = self.seg_bits.max(seg.bits);
            match self.highest_seq_end {
                Some(h) if seq_le(seq_end, h) => {
                    // A retransmission: every stream still waiting for ACKs is spoilt.
                    self.counters.retransmissions += 1;
                    self.last_loss_ns = Some(now);
                    for p in self.pending.iter_mut() {
                        p.spoilt = true;
                    }
                }
                _ => self.highest_seq_end = Some(seq_end),
            }
        }
        let store =
            matches!(self.state, State::Store | State::SendStream) && seg.len > 0 && self.cwnd_ok();
        if !store {
            if self.flow.is_some() && !self.cwnd_ok() {
                self.counters.cwnd_below_n += 1;
            }
            self.counters.passed += 1;
            self.queue.push_back(Held {
                id,
                due: Some(now),
                stream: None,
            });
            // Nothing may overtake a held segment: release those first.
            self.flush(now);
            return;
        }
        self.counters.held += 1;
        self.queue.push_back(Held {
            id,
            due: None,
            stream: None,
        });
        self.undecided += 1;
        self.undecided_meta.push_back((id, seq_end, seg.bits));
        // The bound grows with the window (a stream forms while a window's worth arrives), up
        // to 16 times the configured one.
        let bound = self
            .flow
            .map_or(0, |f| 2 * f.cwnd as usize)
            .clamp(self.p.max_held, 16 * self.p.max_held);
        if self.undecided >= bound {
            self.counters.overflow += self.undecided as u64;
            self.flush(now);
            return;
        }
        if self.state == State::Store {
            self.timer.get_or_insert(now + self.hold_timer_ns());
            self.try_form_stream(now);
        }
    }

    /// An ACK of the flow arrived at `now` acknowledging up to `ack`.
    pub fn handle_ack(&mut self, now: u64, ack: u32) {
        self.update(now);
        let outstanding = self
            .pending
            .iter()
            .any(|p| p.segs.iter().any(|s| s.sent.is_some() && !s.covered));
        if self.last_ack == Some(ack) {
            if outstanding {
                self.counters.dup_acks += 1;
                self.last_loss_ns = Some(now);
                for p in self.pending.iter_mut() {
                    p.spoilt = true;
                }
            }
            return;
        }
        if self.last_ack.is_some_and(|l| seq_le(ack, l)) {
            return; // old ACK, reordered on the way back
        }
        self.last_ack = Some(ack);
        let mut last: Option<(usize, usize)> = None;
        for (pi, p) in self.pending.iter_mut().enumerate() {
            for (si, s) in p.segs.iter_mut().enumerate() {
                if s.sent.is_some() && !s.covered && seq_le(s.seq_end, ack) {
                    s.covered = true;
                    last = Some((pi, si));
                }
            }
        }
        if let Some((pi, si)) = last {
            self.pending[pi].segs[si].rx = Some(now);
        }
        self.feed_complete(now);
    }

    /// The actual departure time of segment `id` (optional: `poll_transmit` assumes `now`).
    pub fn handle_sent(&mut self, id: u64, sent_ns: u64) {
        for p in self.pending.iter_mut().rev() {
            if let Some(s) = p.segs.iter_mut().find(|s| s.id == id) {
                s.sent = Some(sent_ns);
                return;
            }
        }
    }

    /// The next segment to send now (the queue's head, when it is due), by the driver's id.
    pub fn poll_transmit(&mut self, now: u64) -> Option<u64> {
        self.update(now);
        let head = self.queue.front()?;
        if head.due? > now {
            return None;
        }
        let h = self.queue.pop_front()?;
        if let Some((uid, pos)) = h.stream {
            self.stream_segment_sent(now, uid, pos, h.id);
        }
        Some(h.id)
    }

    /// When the machine next needs to run: the head's due time, the hold timer, or a stream's
    /// ACK deadline.
    pub fn next_wakeup(&self) -> Option<u64> {
        let head = self.queue.front().and_then(|h| h.due);
        let deadline = self.pending.iter().filter_map(|p| p.deadline).min();
        [head, self.timer, deadline].into_iter().flatten().min()
    }

    fn stream_segment_sent(&mut self, now: u64, uid: u64, pos: usize, id: u64) {
        let Some(p) = self.pending.iter_mut().find(|p| p.uid == uid) else {
            return;
        };
        if let Some(s) = p.segs.get_mut(pos).filter(|s| s.id == id) {
            s.sent = Some(now);
        }
        if pos + 1 < p.segs.len() {
            return;
        }
        let f = self.flow.unwrap_or(FlowInfo {
            cwnd: 0,
            srtt_ns: 0,
            rttvar_ns: 0,
        });
        p.deadline = Some(now + 2 * f.srtt_ns + 4 * f.rttvar_ns + 250_000_000);
        self.counters.streams_sent += 1;
        let ev = InlineEvent::StreamSent {
            measurement: p.measurement,
            index: p.index,
            rates: p.rates.clone(),
            sends_ns: p.segs.iter().filter_map(|s| s.sent).collect(),
        };
        self.push_event(ev);
        // The stream is out: the next one of the measurement, or pass.
        let more = self.plan.as_ref().is_some_and(|pl| !pl.streams.is_empty());
        if more {
            self.state = State::Store;
            if self.undecided > 0 {
                self.timer = Some(now + self.hold_timer_ns());
            }
            self.try_form_stream(now);
        } else {
            self.plan = None;
            self.state = State::Pass;
            self.flush(now);
        }
    }

    fn push_event(&mut self, ev: InlineEvent) {
        push_bounded(&mut self.events, ev);
    }

    /// EMPTY BUFFER: every held segment leaves now, in order.
    fn flush(&mut self, now: u64) {
        for h in self.queue.iter_mut().filter(|h| h.due.is_none()) {
            h.due = Some(now);
        }
        self.undecided = 0;
        self.undecided_meta.clear();
        self.timer = None;
    }

    /// SEND STREAM once N segments are held.
    fn try_form_stream(&mut self, now: u64) {
        if self.state != State::Store || self.undecided < self.p.n {
            return;
        }
        let Some(plan) = self.plan.as_mut() else {
            return;
        };
        let Some(rates) = plan.streams.pop_front() else {
            return;
        };
        let index = plan.next_index;
        plan.next_index += 1;
        let measurement = plan.measurement;
        let uid = self.next_uid;
        self.next_uid += 1;
        let metas: Vec<(u64, u32, f64)> = self.undecided_meta.drain(..self.p.n).collect();
        self.undecided -= self.p.n;
        // Gaps: each segment's bits / the planned rate; a stream lasts at most max(srtt/2, 5 ms)
        // (all gaps shrunk alike), so that a range near 0 cannot hold segments towards an RTO.
        let gaps: Vec<f64> = metas
            .iter()
            .enumerate()
            .map(|(j, m)| match j {
                0 => 0.0,
                _ => m.2 / rates.get(j - 1).copied().unwrap_or(f64::INFINITY) * 1e9,
            })
            .collect();
        let cap = self
            .flow
            .map_or(0, |f| f.srtt_ns / 2)
            .max(MIN_STREAM_CAP_NS) as f64;
        let total: f64 = gaps.iter().sum();
        let shrink = if total > cap { cap / total } else { 1.0 };
        let mut t = now as f64;
        let mut dues = Vec::with_capacity(metas.len());
        for g in &gaps {
            t += g * shrink;
            dues.push(t.round() as u64);
        }
        let first_undecided = self.queue.len() - self.undecided - self.p.n;
        for (j, h) in self
            .queue
            .iter_mut()
            .skip(first_undecided)
            .take(self.p.n)
            .enumerate()
        {
            h.due = Some(dues[j]);
            h.stream = Some((uid, j));
        }
        self.pending.push_back(Pending {
            uid,
            measurement,
            index,
            rates,
            segs: metas
                .iter()
                .map(|m| StreamSeg {
                    id: m.0,
                    seq_end: m.1,
                    bits: m.2,
                    sent: None,
                    rx: None,
                    covered: false,
                })
                .collect(),
            spoilt: false,
            deadline: None,
        });
        self.timer = None;
        self.state = State::SendStream;
    }

    /// Timers, cwnd changes and the start of the next measurement.
    fn update(&mut self, now: u64) {
        if self.state == State::Store && self.undecided > 0 {
            if !self.cwnd_ok() {
                self.counters.cwnd_below_n += self.undecided as u64;
                self.flush(now);
            } else if self.timer.is_some_and(|t| t <= now) {
                if self.undecided < self.p.n {
                    self.counters.app_limited += 1;
                }
                self.flush(now);
            }
        }
        // Streams whose ACKs never all came back.
        while let Some(i) = self
            .pending
            .iter()
            .position(|p| p.deadline.is_some_and(|d| d <= now))
        {
            if i != 0 {
                // Keep the order: everything before it times out with it.
                for p in self.pending.iter_mut().take(i) {
                    p.deadline = Some(now);
                }
            }
            let p = self.pending.pop_front().expect("position found");
            self.counters.streams_timed_out += 1;
            self.feed(now, p, false);
        }
        self.maybe_plan(now);
    }

    /// PASS → STORE: a new measurement once the last one's ACKs are all back, one srtt after it
    /// began, and cwnd ≥ N.
    fn maybe_plan(&mut self, now: u64) {
        if self.state != State::Pass || self.plan.is_some() || !self.pending.is_empty() {
            return;
        }
        if !self.cwnd_ok() {
            return;
        }
        let srtt = self.flow.map_or(0, |f| f.srtt_ns);
        if self.last_measurement_start.is_some_and(|t| now < t + srtt) {
            return;
        }
        // Not while the flow recovers from loss: one srtt after the last sign of it.
        if self.last_loss_ns.is_some_and(|t| now < t + srtt) {
            return;
        }
        let plan = match self.sweep.as_ref() {
            None => Plan {
                measurement: None,
                streams: VecDeque::from([vec![f64::INFINITY; self.p.n - 1]]),
                next_index: 0,
            },
            Some(s) => match s.measurement_plan() {
                Some((m, streams)) => Plan {
                    measurement: Some(m),
                    streams: streams.into(),
                    next_index: 0,
                },
                None => return,
            },
        };
        self.plan = Some(plan);
        self.last_measurement_start = Some(now);
        self.state = State::Store;
    }

    fn feed_complete(&mut self, now: u64) {
        while self
            .pending
            .front()
            .is_some_and(|p| p.deadline.is_some() && p.segs.last().is_some_and(|s| s.covered))
        {
            let p = self.pending.pop_front().expect("front exists");
            self.feed(now, p, true);
        }
        self.maybe_plan(now);
    }

    /// Hand one stream's echoes to the sweep (or, for the initial stream, set the first range).
    fn feed(&mut self, now: u64, p: Pending, complete: bool) {
        // Points between echoed segments, each with the bits sent since the previous echo.
        let mut pkts = Vec::new();
        let mut acc = 0.0;
        for s in &p.segs {
            acc += s.bits;
            if let (Some(sent), Some(rx)) = (s.sent, s.rx) {
                let bits = if pkts.is_empty() { s.bits } else { acc };
                pkts.push(StreamPacket {
                    bits,
                    sent_ns: Some(sent),
                    rx_ns: Some(rx),
                });
                acc = 0.0;
            }
        }
        drop_late_echoes(&mut pkts);
        let compressed = p.measurement.is_some() && acks_compressed(&pkts);
        self.counters.streams_compressed += u64::from(compressed);
        let usable = complete && !p.spoilt && !compressed && pkts.len() >= 2;
        if complete && p.spoilt {
            self.counters.streams_lost += 1;
        }
        let points: Vec<(u64, u64, f64)> = pkts
            .iter()
            .filter_map(|q| Some((q.sent_ns?, q.rx_ns?, q.bits)))
            .collect();
        let echoed = |trend: i8| InlineEvent::StreamEchoed {
            measurement: p.measurement,
            index: p.index,
            points: points.clone(),
            trend,
            spoilt: p.spoilt,
        };
        match p.measurement {
            None => {
                self.push_event(echoed(0));
                if usable {
                    let bits: f64 = pkts[1..].iter().map(|q| q.bits).sum();
                    let span =
                        pkts.last().and_then(|q| q.rx_ns).unwrap_or(0) - pkts[0].rx_ns.unwrap_or(0);
                    if span > 0 {
                        // A redo (results stuck at the top) raises r by half at least: a
                        // back-to-back stream behind a queue standing with the flow's own
                        // segments can read its share again (bench: r = 20 for C = 100, the
                        // range capped there and the flow held to 13 Mbit/s).
                        let floor = self.initial_rate.map_or(0.0, |r| 1.5 * r);
                        let r = (bits * 1e9 / span as f64)
                            .max(floor)
                            .min(self.p.sweep.access_bps);
                        self.initial_rate = Some(r);
                        // The back-to-back stream's rate stands in for the path's capacity
                        // (the sweep's rise floor is one packet's service time at it).
                        let sp = SweepParams {
                            n: self.p.n,
                            measurements: None,
                            access_bps: r,
                            ..self.p.sweep
                        };
                        self.sweep = Some(Sweep::new(sp).with_range(r * sp.initial_low, r));
                        self.counters.streams_measured += 1;
                    }
                }
            }
            Some(m) => {
                let Some(sweep) = self.sweep.as_mut() else {
                    return;
                };
                if sweep.measurements_done() != m {
                    self.counters.streams_dropped += 1;
                    return;
                }
                if usable {
                    self.counters.streams_measured += 1;
                } else {
                    // One echo: the trend test cannot tell (T = 0), the index stays aligned.
                    pkts.truncate(1);
                    if pkts.is_empty() {
                        pkts.push(StreamPacket {
                            bits: self.seg_bits,
                            sent_ns: Some(0),
                            rx_ns: Some(0),
                        });
                    }
                }
                let void_before = sweep.void_measurements();
                let outcome = sweep.handle_stream(&pkts);
                let trend = match outcome.map(|o| o.trend) {
                    Some(crate::trend::Trend::Increasing) => 1,
                    Some(crate::trend::Trend::NotIncreasing) => -1,
                    _ => 0,
                };
                push_bounded(&mut self.events, echoed(trend));
                self.counters.measurements_void +=
                    u64::from(sweep.void_measurements() - void_before);
                if let Some(v) = outcome.and_then(|o| o.result) {
                    self.counters.measurements += 1;
                    let top = self.initial_rate.unwrap_or(f64::INFINITY);
                    self.at_top.push_back(v >= 0.9 * top);
                    if self.at_top.len() > 5 {
                        self.at_top.pop_front();
                    }
                    if let Some(mut e) = Estimator::estimate(&*sweep) {
                        e.quality = Quality {
                            method: "imtcp",
                            elapsed_s: now.saturating_sub(self.first_ns.unwrap_or(now)) as f64
                                / 1e9,
                            probe_bytes: 0,
                            trains: self.counters.streams_measured as u32,
                            confidence: e.quality.confidence,
                            timescale_ms: None,
                        };
                        e.final_ = false;
                        self.push_event(InlineEvent::Measured {
                            at_ns: now,
                            value_bps: e.value_bps,
                        });
                        self.last_estimate = Some((now, e));
                    }
                    if self.at_top.iter().filter(|t| **t).count() >= 3 {
                        // Start over from a new back-to-back stream.
                        self.sweep = None;
                        self.at_top.clear();
                        self.counters.restarts += 1;
                    }
                }
            }
        }
    }
}

fn push_bounded(events: &mut VecDeque<InlineEvent>, ev: InlineEvent) {
    if events.len() >= MAX_EVENTS {
        events.pop_front();
    }
    events.push_back(ev);
}

/// Did the echoes come back more than twice as fast as the stream left? Through a FIFO
/// bottleneck a stream sent at r leaves at most at r·C/(r + X) (X the cross traffic), under 2r
/// for every r above A − C/2; faster echoes were bunched after the bottleneck (ACK compression:
/// on the testbed, the reverse path's delay line or softirq batching on a busy host), and their
/// spacing says nothing about the path. Bench trace: stream ratios were ≤ 1.9 or ≥ 3.1, 12% of
/// streams above (docs/inline.md).
fn acks_compressed(pkts: &[StreamPacket]) -> bool {
    let (Some(first), Some(last)) = (pkts.first(), pkts.last()) else {
        return false;
    };
    let span = |f: fn(&StreamPacket) -> Option<u64>| -> Option<f64> {
        Some(f(last)?.checked_sub(f(first)?)? as f64)
    };
    match (span(|q| q.sent_ns), span(|q| q.rx_ns)) {
        (Some(sent), Some(rx)) if pkts.len() >= 2 && sent > 0.0 => rx * 2.0 < sent,
        _ => false,
    }
}

/// Drop echoes spaced by the receiver's delayed-ACK timer (or an app's next write) rather than
/// the path: an ACK gap more than 4× the stream's median ACK gap.
fn drop_late_echoes(pkts: &mut Vec<StreamPacket>) {
    let gaps: Vec<f64> = pkts
        .windows(2)
        .filter_map(|w| Some(w[1].rx_ns? as f64 - w[0].rx_ns? as f64))
        .collect();
    if gaps.len() < 2 {
        return;
    }
    let med = crate::stats::median(&gaps);
    // Keep everything up to the first late echo; what follows it is timed by it.
    if let Some(i) = gaps.iter().position(|g| *g > 4.0 * med.max(1.0)) {
        pkts.truncate(i + 1);
    }
}

#[cfg(test)]
mod tests;
