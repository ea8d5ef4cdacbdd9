//! The agent's side of sessions: which probes count (admission), and when and what to report.
//!
//! [`Receiver`] is the table of live sessions the probe socket feeds; [`ServerSession`] is one
//! authenticated control connection, which decides when a train's report is ready and cuts it
//! so the agent never sends a peer more bytes than that peer sent it.

use super::frames::FrameBuf;
use super::{
    encode, kind, later, ProtoError, LINGER, MAX_CAPTURE, MAX_CAPTURE_RECORDS, MAX_LOAD,
    MAX_TRAIN_TIMEOUT,
};
use crate::train::{WallNs, MAX_TRAIN_LEN};
use mgrp_train::linger::{wait_ns, OwdRange, RecentBase};
use mgrp_wire::control::{code, Control, RxRecord, FRAME_HEADER, REPORT_BASE_LEN, RX_RECORD_LEN};
use mgrp_wire::probe::Probe;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Why a datagram on the probe port was not timestamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Did not decode (truncated, oversized, garbage), or an impossible train.
    Malformed,
    /// Names no live session.
    UnknownSession,
    /// Names a session from an address that is not the session's peer.
    WrongSource,
    /// A probe of a train already reported (a straggler or a replay).
    Stale,
    /// Already seen in its train.
    Duplicate,
}

/// What to do with a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Timestamped into its train; hand its rider (if any) to the rider receiver.
    Accepted {
        peer: IpAddr,
        probe: Probe<'a>,
    },
    /// Train 0: a rider fragment sent on its own, not part of any measurement.
    RiderOnly {
        peer: IpAddr,
        probe: Probe<'a>,
    },
    Dropped(DropReason),
}

/// The agent already holds its maximum of authenticated sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the agent holds its maximum of {0} sessions")]
pub struct SessionsFull(pub usize);

#[derive(Debug)]
struct RxTrain {
    train: u32,
    seen: Vec<bool>,
    records: Vec<RxRecord>,
    last_rx: Instant,
    /// One-way delays of the probes that arrived: how deep a queue they met.
    owd: OwdRange,
}

#[derive(Debug)]
struct RxSession {
    peer_ip: IpAddr,
    train: Option<RxTrain>,
    last_reported: u32,
    udp_bytes_in: u64,
    /// The lowest one-way delay of the last few trains (reported or replaced).
    base: RecentBase,
}

/// Where a train's report stands: probes received, when the last came, and how long to wait
/// for stragglers past the later of that and TrainEnd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    received: usize,
    last_rx: Option<Instant>,
    linger: Duration,
}

/// Live sessions, as the probe socket sees them.
#[derive(Debug)]
pub struct Receiver {
    sessions: HashMap<u32, RxSession>,
    max_sessions: usize,
}

impl Receiver {
    pub fn new(max_sessions: usize) -> Receiver {
        Receiver {
            sessions: HashMap::new(),
            max_sessions,
        }
    }

    /// Open a session for an authenticated peer. `pick` draws random candidate ids (0 and
    /// ids in use are skipped).
    pub fn open(
        &mut self,
        peer_ip: IpAddr,
        mut pick: impl FnMut() -> u32,
    ) -> Result<u32, SessionsFull> {
        if self.sessions.len() >= self.max_sessions {
            return Err(SessionsFull(self.max_sessions));
        }
        let id = loop {
            let id = pick();
            if id != 0 && !self.sessions.contains_key(&id) {
                break id;
            }
        };
        self.sessions.insert(
            id,
            RxSession {
                peer_ip,
                train: None,
                last_reported: 0,
                udp_bytes_in: 0,
                base: RecentBase::default(),
            },
        );
        Ok(id)
    }

    pub fn close(&mut self, id: u32) {
        self.sessions.remove(&id);
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// A datagram from `from` arrived at `now`, the kernel stamped it `rx_ns`; `truncated`
    /// if it did not fit the read buffer.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        from: Option<IpAddr>,
        bytes: &'a [u8],
        truncated: bool,
        rx_ns: WallNs,
    ) -> Verdict<'a> {
        use DropReason::*;
        let probe = match mgrp_wire::probe::decode(bytes) {
            Ok(p) if !truncated && (p.header.train_len as usize) <= MAX_TRAIN_LEN => p,
            _ => return Verdict::Dropped(Malformed),
        };
        let h = probe.header;
        let Some(st) = self.sessions.get_mut(&h.session) else {
            return Verdict::Dropped(UnknownSession);
        };
        if from != Some(st.peer_ip) {
            return Verdict::Dropped(WrongSource);
        }
        st.udp_bytes_in += bytes.len() as u64;
        let peer = st.peer_ip;
        // Train 0 is no train: a rider fragment sent on its own.
        if h.train == 0 {
            return match probe.riders.is_empty() {
                false => Verdict::RiderOnly { peer, probe },
                true => Verdict::Dropped(Malformed),
            };
        }
        // An earlier train's probe (a straggler or a replay) is not news.
        let current = st.train.as_ref().is_some_and(|t| t.train == h.train);
        if h.train == st.last_reported || (!current && !later(h.train, st.last_reported)) {
            return Verdict::Dropped(Stale);
        }
        // A straggler of a train older than the one in progress must not replace it: only the
        // sender moving on (a later id) ends an unreported train.
        if !current && st.train.as_ref().is_some_and(|t| !later(h.train, t.train)) {
            return Verdict::Dropped(Stale);
        }
        if !current {
            // A new train replaces an unreported older one (its sender moved on).
            if let Some(old) = st.train.take() {
                st.base.remember(&old.owd);
            }
            st.train = Some(RxTrain {
                train: h.train,
                seen: vec![false; h.train_len as usize],
                records: Vec::new(),
                last_rx: now,
                owd: OwdRange::default(),
            });
        }
        let t = st.train.as_mut().expect("just set");
        match t.seen.get_mut(h.index as usize) {
            Some(seen) if !*seen => {
                *seen = true;
                t.records.push(RxRecord {
                    index: h.index,
                    size: bytes.len() as u16,
                    rx_ns: rx_ns.0,
                    sent_ns: h.sent_ns,
                });
                t.last_rx = now;
                t.owd.add(h.sent_ns, rx_ns.0);
                Verdict::Accepted { peer, probe }
            }
            Some(_) => Verdict::Dropped(Duplicate),
            // The train's length changed under the same id: not a probe of this train.
            None => Verdict::Dropped(Malformed),
        }
    }

    /// Probes of `train` received so far in session `id`, when the last came, and the wait
    /// for its stragglers ([`mgrp_train::linger`]): the queue's drain time the arrivals showed,
    /// measured from the session's recent lowest delay; the fixed `LINGER` when nothing
    /// arrived, or one probe with no earlier train to compare it with.
    fn progress(&self, id: u32, train: u32) -> Progress {
        let none = Progress {
            received: 0,
            last_rx: None,
            linger: LINGER,
        };
        let Some(st) = self.sessions.get(&id) else {
            return none;
        };
        match st.train.as_ref() {
            Some(t) if t.train == train => Progress {
                received: t.records.len(),
                last_rx: Some(t.last_rx),
                linger: Duration::from_nanos(wait_ns(
                    &t.owd,
                    st.base.base(),
                    LINGER.as_nanos() as u64,
                )),
            },
            _ => none,
        }
    }

    /// Mark `train` reported and hand over what arrived of it.
    fn take_report(&mut self, id: u32, train: u32) -> Vec<RxRecord> {
        let Some(st) = self.sessions.get_mut(&id) else {
            return Vec::new();
        };
        st.last_reported = train;
        match st.train.take() {
            Some(t) if t.train == train => {
                st.base.remember(&t.owd);
                t.records
            }
            other => {
                st.train = other;
                Vec::new()
            }
        }
    }

    fn udp_bytes_in(&self, id: u32) -> u64 {
        self.sessions.get(&id).map_or(0, |s| s.udp_bytes_in)
    }
}

/// A train the sender announced or ended, whose report is not sent yet.
#[derive(Debug, Clone, Copy)]
struct Pending {
    train: u32,
    deadline: Instant,
    /// The sender's TrainEnd: how many it sent, and when it said so.
    ended: Option<(u16, Instant)>,
}

/// The session continues, the peer closed it, or it turned into a load flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Closed,
    /// From now on the connection carries a load flow to read and discard until `until`
    /// (or until the peer closes it); nothing more is sent on it. Bytes of the flow that came
    /// with the Load frame were dropped (`discarded`).
    Load {
        until: Instant,
        discarded: usize,
    },
    /// From now on the connection carries a capture of `sender` → `receiver`'s data segments
    /// as they arrive here, until `until` or `max_records` (both already capped), or the peer
    /// closing.
    Capture {
        sender: std::net::SocketAddr,
        receiver: std::net::SocketAddr,
        until: Instant,
        max_records: u32,
    },
    /// From now on the connection carries relay calls: this agent's trains and load flow
    /// toward the agent at `dst`, for the peer, until `until` (already capped).
    Relay {
        dst: std::net::SocketAddr,
        until: Instant,
    },
}

/// Bytes to send, and whether they are a train report (for the counters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub bytes: Vec<u8>,
    pub report: Option<ReportSent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportSent {
    pub train: u32,
    pub records: usize,
    /// Cut to stay within the bytes received from the peer.
    pub truncated: bool,
}

/// One authenticated control connection, agent side.
#[derive(Debug)]
pub struct ServerSession {
    id: u32,
    frames: FrameBuf,
    bytes_out: u64,
    pending: Option<Pending>,
    queued: Vec<Control>,
    /// A train was started on this session (so it may not become a load flow).
    measured: bool,
    /// The address the session's peer connected from: the only sender whose flows it may
    /// ask this agent to capture.
    peer: Option<std::net::IpAddr>,
}

impl ServerSession {
    /// A session `id` on a connection whose hello was read into `frames`.
    pub fn new(id: u32, frames: FrameBuf) -> ServerSession {
        ServerSession {
            id,
            frames,
            bytes_out: 0,
            pending: None,
            queued: Vec::new(),
            measured: false,
            peer: None,
        }
    }

    /// The address the peer connected from (capture requests must name it as the sender).
    pub fn with_peer(mut self, ip: std::net::IpAddr) -> ServerSession {
        self.peer = Some(ip);
        self
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Send `msg` (the server hello) before anything else.
    pub fn queue(&mut self, msg: Control) {
        self.queued.push(msg);
    }

    pub fn room(&self) -> usize {
        self.frames.room()
    }

    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        self.frames.handle_bytes(bytes);
    }

    /// Act on the control messages buffered so far. An unexpected or malformed message ends
    /// the session; for an unexpected one an error goes back first (see `poll_transmit`).
    pub fn poll_control(&mut self, now: Instant) -> Result<Flow, ProtoError> {
        while let Some(msg) = self.frames.poll_message()? {
            match msg {
                Control::TrainStart {
                    train, timeout_ms, ..
                } => {
                    let wait = Duration::from_millis(timeout_ms as u64).min(MAX_TRAIN_TIMEOUT);
                    self.measured = true;
                    self.pending = Some(Pending {
                        train,
                        deadline: now + wait,
                        ended: None,
                    });
                }
                Control::TrainEnd { train, sent } => match &mut self.pending {
                    Some(p) if p.train == train => p.ended = Some((sent, now)),
                    // An end without its start (the start was lost to a restart): report
                    // what came after a short linger.
                    _ => {
                        self.pending = Some(Pending {
                            train,
                            deadline: now + LINGER,
                            ended: Some((sent, now)),
                        })
                    }
                },
                Control::Close => return Ok(Flow::Closed),
                // A load flow owns its connection from its first message: a session that has
                // measured trains cannot turn into one (a train's report would be lost).
                Control::Load { max_ms } if self.pending.is_none() && !self.measured => {
                    let wait = Duration::from_millis(max_ms as u64).min(MAX_LOAD);
                    return Ok(Flow::Load {
                        until: now + wait,
                        discarded: self.frames.discard(),
                    });
                }
                Control::CaptureStart {
                    sender,
                    receiver,
                    max_ms,
                    max_records,
                } if self.pending.is_none() && !self.measured => {
                    // Only the asking host's own flows: an agent does not report on others.
                    if self.peer != Some(sender.ip()) {
                        self.queued.push(Control::Error {
                            code: code::CAPTURE,
                            message: format!(
                                "capture refused: the flow's sender {sender} is not this session's peer"
                            ),
                        });
                        return Err(ProtoError::Unexpected("CaptureStart"));
                    }
                    let wait = Duration::from_millis(max_ms as u64).min(MAX_CAPTURE);
                    return Ok(Flow::Capture {
                        sender,
                        receiver,
                        until: now + wait,
                        max_records: max_records.min(MAX_CAPTURE_RECORDS),
                    });
                }
                // Like a load or a capture, a relay owns its connection from its first message.
                Control::RelayOpen { dst, max_ms } if self.pending.is_none() && !self.measured => {
                    let wait = Duration::from_millis(max_ms as u64).min(super::MAX_RELAY);
                    return Ok(Flow::Relay {
                        dst,
                        until: now + wait,
                    });
                }
                other => {
                    self.queued.push(Control::Error {
                        code: code::BAD_MESSAGE,
                        message: "unexpected message".into(),
                    });
                    return Err(ProtoError::Unexpected(kind(&other)));
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// Is the pending train's report due at `now`? Once the sender ended it: when every
    /// probe it sent is in, or the stragglers' wait has passed since the later of the end and
    /// the last arrival ([`Receiver::progress`]).
    fn ready(&self, now: Instant, rx: &Receiver) -> Option<u32> {
        let p = self.pending?;
        let got = rx.progress(self.id, p.train);
        let due = now >= p.deadline
            || p.ended.is_some_and(|(sent, at)| {
                got.received >= sent as usize
                    || now.saturating_duration_since(got.last_rx.map_or(at, |l| l.max(at)))
                        >= got.linger
            });
        due.then_some(p.train)
    }

    /// The next bytes to send: queued messages first, then a train report once it is ready,
    /// cut so the agent never sends this peer more than it received from it.
    pub fn poll_transmit(&mut self, now: Instant, rx: &mut Receiver) -> Option<Transmit> {
        if !self.queued.is_empty() {
            let msg = self.queued.remove(0);
            return Some(self.transmit(&msg, None));
        }
        let train = self.ready(now, rx)?;
        self.pending = None;
        let mut records = rx.take_report(self.id, train);
        let budget =
            (rx.udp_bytes_in(self.id) + self.frames.bytes_in).saturating_sub(self.bytes_out);
        let base = (FRAME_HEADER + REPORT_BASE_LEN) as u64;
        let fits =
            ((budget.saturating_sub(base) / RX_RECORD_LEN as u64) as usize).min(u16::MAX as usize);
        let truncated = records.len() > fits;
        records.truncate(fits);
        let sent = ReportSent {
            train,
            records: records.len(),
            truncated,
        };
        let msg = Control::TrainReport {
            train,
            truncated,
            received: records,
        };
        Some(self.transmit(&msg, Some(sent)))
    }

    fn transmit(&mut self, msg: &Control, report: Option<ReportSent>) -> Transmit {
        let bytes = encode(msg);
        self.bytes_out += bytes.len() as u64;
        Transmit { bytes, report }
    }

    /// When the pending report may become due without any new input (probes arriving can
    /// make it due earlier: all received).
    pub fn poll_timeout(&self, rx: &Receiver) -> Option<Instant> {
        let p = self.pending?;
        let linger = p.ended.map(|(_, at)| {
            let got = rx.progress(self.id, p.train);
            got.last_rx.map_or(at, |l| l.max(at)) + got.linger
        });
        Some(linger.map_or(p.deadline, |l| l.min(p.deadline)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_wire::probe::{ProbeHeader, Rider, RiderProto};

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const OTHER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn probe(session: u32, train: u32, index: u16, len: u16, size: usize) -> Vec<u8> {
        let h = ProbeHeader {
            session,
            train,
            index,
            train_len: len,
            ..Default::default()
        };
        let mut b = vec![0; size];
        mgrp_wire::probe::encode(&h, &[], size, &mut b).unwrap();
        b
    }

    fn rider_probe(session: u32, train: u32) -> Vec<u8> {
        let h = ProbeHeader {
            session,
            train,
            index: 0,
            train_len: 1,
            ..Default::default()
        };
        let r = Rider {
            frag_id: 1,
            offset: 0,
            proto: RiderProto::Udp,
            last: true,
            data: &[1, 2, 3],
            tag: [0; 16],
        };
        let mut b = vec![0; 200];
        mgrp_wire::probe::encode(&h, &[r], 200, &mut b).unwrap();
        b
    }

    fn open(rx: &mut Receiver) -> u32 {
        let mut n = 0;
        rx.open(PEER, || {
            n += 7;
            n
        })
        .unwrap()
    }

    /// Probe `index` of a `len`-probe train, stamped `sent_ms` by its sender, read at `now`
    /// with a kernel stamp of `rx_ms` (both clocks' ms: the difference is its one-way delay).
    #[allow(clippy::too_many_arguments)]
    fn feed_owd(
        rx: &mut Receiver,
        now: Instant,
        s: u32,
        train: u32,
        index: u16,
        len: u16,
        sent_ms: u64,
        rx_ms: u64,
    ) -> Result<(), DropReason> {
        let h = ProbeHeader {
            session: s,
            train,
            index,
            train_len: len,
            sent_ns: sent_ms * 1_000_000,
            ..Default::default()
        };
        let mut b = vec![0; 100];
        mgrp_wire::probe::encode(&h, &[], 100, &mut b).unwrap();
        match rx.handle_datagram(now, Some(PEER), &b, false, WallNs(rx_ms * 1_000_000)) {
            Verdict::Accepted { .. } => Ok(()),
            Verdict::RiderOnly { .. } => Err(DropReason::Malformed),
            Verdict::Dropped(d) => Err(d),
        }
    }

    fn feed(rx: &mut Receiver, now: Instant, from: IpAddr, b: &[u8]) -> Result<(), DropReason> {
        match rx.handle_datagram(now, Some(from), b, false, WallNs(5)) {
            Verdict::Accepted { .. } => Ok(()),
            Verdict::RiderOnly { .. } => Err(DropReason::Malformed),
            Verdict::Dropped(d) => Err(d),
        }
    }

    #[test]
    fn admission_rules() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let s = open(&mut rx);
        use DropReason::*;
        assert_eq!(feed(&mut rx, t0, PEER, &[0xab; 40]), Err(Malformed));
        // Truncated by the read buffer: malformed even if the header decodes.
        let p = probe(s, 1, 0, 3, 100);
        assert!(matches!(
            rx.handle_datagram(t0, Some(PEER), &p, true, WallNs(1)),
            Verdict::Dropped(Malformed)
        ));
        // A train longer than any sender may send.
        let long = probe(s, 1, 0, (MAX_TRAIN_LEN + 1) as u16, 100);
        assert_eq!(feed(&mut rx, t0, PEER, &long), Err(Malformed));
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s + 1, 1, 0, 3, 100)),
            Err(UnknownSession)
        );
        assert_eq!(feed(&mut rx, t0, OTHER, &p), Err(WrongSource));
        assert_eq!(
            rx.handle_datagram(t0, None, &p, false, WallNs(1)),
            Verdict::Dropped(WrongSource)
        );
        assert_eq!(feed(&mut rx, t0, PEER, &p), Ok(()));
        assert_eq!(feed(&mut rx, t0, PEER, &p), Err(Duplicate));
        // Train 0: a rider on its own, or nothing.
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s, 0, 0, 1, 100)),
            Err(Malformed)
        );
        assert!(matches!(
            rx.handle_datagram(t0, Some(PEER), &rider_probe(s, 0), false, WallNs(1)),
            Verdict::RiderOnly { peer: PEER, .. }
        ));
        // Same train id, another length: the index is checked against the first length.
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s, 1, 5, 9, 100)),
            Err(Malformed)
        );
        // Only the right source's bytes count toward the report budget.
        assert_eq!(rx.udp_bytes_in(s), 100 + 100 + 100 + 200 + 100);
    }

    #[test]
    fn a_new_train_replaces_an_unreported_older_one_and_reported_trains_are_stale() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let s = open(&mut rx);
        feed(&mut rx, t0, PEER, &probe(s, 5, 0, 3, 64)).unwrap();
        feed(&mut rx, t0, PEER, &probe(s, 6, 0, 3, 64)).unwrap();
        let p5 = rx.progress(s, 5);
        assert_eq!((p5.received, p5.last_rx), (0, None));
        assert_eq!(rx.progress(s, 6).received, 1);
        // A late probe of the replaced train is a straggler: train 6 keeps its probe.
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s, 5, 1, 3, 64)),
            Err(DropReason::Stale)
        );
        assert_eq!(rx.progress(s, 6).received, 1);
        let r = rx.take_report(s, 6);
        assert_eq!(r.len(), 1);
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s, 6, 1, 3, 64)),
            Err(DropReason::Stale)
        );
        assert_eq!(
            feed(&mut rx, t0, PEER, &probe(s, 4, 1, 3, 64)),
            Err(DropReason::Stale)
        );
        // Ids wrap: after u32::MAX comes 1.
        rx.take_report(s, u32::MAX);
        assert_eq!(feed(&mut rx, t0, PEER, &probe(s, 1, 0, 3, 64)), Ok(()));
    }

    #[test]
    fn sessions_are_bounded_and_ids_unique_and_nonzero() {
        let mut rx = Receiver::new(2);
        let mut ids = [0u32, 0, 9, 9, 11].into_iter();
        let a = rx.open(PEER, || ids.next().unwrap()).unwrap();
        let b = rx.open(PEER, || ids.next().unwrap()).unwrap();
        assert_eq!((a, b), (9, 11));
        assert_eq!(rx.open(PEER, || 5), Err(SessionsFull(2)));
        rx.close(a);
        assert_eq!(rx.len(), 1);
        assert_eq!(rx.open(PEER, || 5), Ok(5));
    }

    fn frame(m: &Control) -> Vec<u8> {
        encode(m)
    }

    fn session(rx: &mut Receiver, ctrl_in: usize) -> ServerSession {
        let s = open(rx);
        let mut ss = ServerSession::new(s, FrameBuf::open());
        // Pretend the hello's bytes were read (budget).
        ss.frames.bytes_in = ctrl_in as u64;
        ss
    }

    fn start(ss: &mut ServerSession, now: Instant, train: u32, timeout_ms: u32) {
        ss.handle_bytes(&frame(&Control::TrainStart {
            train,
            count: 3,
            bytes: 300,
            timeout_ms,
        }));
        assert_eq!(ss.poll_control(now), Ok(Flow::Continue));
    }

    fn end(ss: &mut ServerSession, now: Instant, train: u32, sent: u16) {
        ss.handle_bytes(&frame(&Control::TrainEnd { train, sent }));
        assert_eq!(ss.poll_control(now), Ok(Flow::Continue));
    }

    fn report(t: Option<Transmit>) -> Option<(u32, usize, bool)> {
        let t = t?;
        let Some((
            Control::TrainReport {
                train,
                truncated,
                received,
            },
            _,
        )) = Control::decode_frame(&t.bytes).unwrap()
        else {
            panic!("not a report")
        };
        let sent = t.report.unwrap();
        assert_eq!(
            (sent.train, sent.records, sent.truncated),
            (train, received.len(), truncated)
        );
        Some((train, received.len(), truncated))
    }

    #[test]
    fn report_is_ready_when_all_arrived() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 1000);
        let s = ss.id();
        start(&mut ss, t0, 1, 5000);
        for i in 0..3 {
            feed(&mut rx, t0, PEER, &probe(s, 1, i, 3, 100)).unwrap();
        }
        assert_eq!(
            report(ss.poll_transmit(t0, &mut rx)),
            None,
            "no TrainEnd yet"
        );
        end(&mut ss, t0, 1, 3);
        assert_eq!(report(ss.poll_transmit(t0, &mut rx)), Some((1, 3, false)));
        assert_eq!(ss.poll_transmit(t0, &mut rx), None, "once");
        assert_eq!(ss.poll_timeout(&rx), None);
    }

    #[test]
    fn report_waits_linger_past_the_last_arrival_or_the_start_deadline() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 1000);
        let s = ss.id();
        start(&mut ss, t0, 1, 5000);
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + ms(5000)));
        // Probe 0 met an empty queue (1 ms one way), probe 1 a queue of 199 ms: the wait for
        // stragglers is then the cap, LINGER.
        feed_owd(&mut rx, t0, s, 1, 0, 3, 0, 1).unwrap();
        end(&mut ss, t0 + ms(10), 1, 3);
        // A straggler at 200 ms pushes the linger out.
        feed_owd(&mut rx, t0 + ms(200), s, 1, 1, 3, 1, 201).unwrap();
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + ms(200) + LINGER));
        assert_eq!(ss.poll_transmit(t0 + ms(499), &mut rx), None);
        assert_eq!(
            report(ss.poll_transmit(t0 + ms(500), &mut rx)),
            Some((1, 2, false))
        );

        // Without a TrainEnd, the start's deadline (capped) ends the wait.
        start(&mut ss, t0, 2, u32::MAX);
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + MAX_TRAIN_TIMEOUT));
        assert_eq!(ss.poll_transmit(t0 + ms(119_999), &mut rx), None);
        assert_eq!(
            report(ss.poll_transmit(t0 + MAX_TRAIN_TIMEOUT, &mut rx)),
            Some((2, 0, false))
        );
        // A TrainEnd without a start: reported after LINGER.
        end(&mut ss, t0, 7, 3);
        assert_eq!(ss.poll_transmit(t0, &mut rx), None);
        assert_eq!(
            report(ss.poll_transmit(t0 + LINGER, &mut rx)),
            Some((7, 0, false))
        );
    }

    /// A lossy train whose arrivals met a shallow queue (1 and 3 ms one way: 2 ms deep) is
    /// reported the floor (20 ms) after its end, not 300 ms; one that met a 40 ms queue waits
    /// 2 × 40 + 5 = 85 ms; a queue past the cap waits LINGER.
    #[test]
    fn a_lossy_train_waits_for_stragglers_as_long_as_its_queue_drains() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 10_000);
        let s = ss.id();
        // Train `train` of 3: probes 0 and 1 arrive (one way 1 ms, then `owd1` ms), probe 2
        // was dropped, the end comes 2 ms after the last arrival. Returns the wait past it.
        let mut lossy = |train: u32, owd1: u64| -> Duration {
            let at = t0 + ms(1000 * train as u64);
            start(&mut ss, at, train, 5000);
            feed_owd(&mut rx, at, s, train, 0, 3, 0, 1).unwrap();
            feed_owd(&mut rx, at + ms(1), s, train, 1, 3, 1, 1 + owd1).unwrap();
            end(&mut ss, at + ms(3), train, 3);
            let due = ss.poll_timeout(&rx).unwrap();
            assert_eq!(ss.poll_transmit(due - ms(1), &mut rx), None);
            assert_eq!(
                report(ss.poll_transmit(due, &mut rx)),
                Some((train, 2, false))
            );
            due - (at + ms(3))
        };
        assert_eq!(lossy(1, 3), ms(20), "shallow queue: the floor");
        assert_eq!(lossy(2, 41), ms(85), "40 ms of queue");
        assert_eq!(lossy(3, 500), LINGER, "capped");
    }

    /// A train sent into a standing queue shows little spread of its own (50 and 51 ms one
    /// way); measured from the session's earlier train (1 ms one way, all arrived), its queue
    /// is 50 ms deep: 105 ms. A straggler that comes after the report is stale (counted).
    #[test]
    fn a_standing_queue_is_measured_from_the_sessions_recent_trains() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 10_000);
        let s = ss.id();
        start(&mut ss, t0, 1, 5000);
        feed_owd(&mut rx, t0, s, 1, 0, 2, 0, 1).unwrap();
        feed_owd(&mut rx, t0, s, 1, 1, 2, 0, 1).unwrap();
        end(&mut ss, t0, 1, 2);
        assert_eq!(report(ss.poll_transmit(t0, &mut rx)), Some((1, 2, false)));

        let at = t0 + ms(100);
        start(&mut ss, at, 2, 5000);
        feed_owd(&mut rx, at, s, 2, 0, 3, 100, 150).unwrap();
        feed_owd(&mut rx, at, s, 2, 1, 3, 100, 151).unwrap();
        end(&mut ss, at, 2, 3);
        assert_eq!(ss.poll_timeout(&rx), Some(at + ms(105)));
        assert_eq!(
            report(ss.poll_transmit(at + ms(105), &mut rx)),
            Some((2, 2, false))
        );
        assert_eq!(
            feed_owd(&mut rx, at + ms(106), s, 2, 2, 3, 100, 206),
            Err(DropReason::Stale)
        );
    }

    /// Without delays to judge by, the fixed wait: a train whose probes were all lost, and
    /// one of which a single probe came on a session with no earlier train.
    #[test]
    fn no_evidence_of_the_queue_keeps_the_fixed_linger() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 10_000);
        let s = ss.id();
        start(&mut ss, t0, 1, 5000);
        end(&mut ss, t0 + ms(3), 1, 3);
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + ms(3) + LINGER));
        assert_eq!(
            report(ss.poll_transmit(t0 + ms(3) + LINGER, &mut rx)),
            Some((1, 0, false))
        );
        start(&mut ss, t0, 2, 5000);
        feed_owd(&mut rx, t0 + ms(1), s, 2, 0, 3, 0, 1).unwrap();
        end(&mut ss, t0 + ms(3), 2, 3);
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + ms(3) + LINGER));
        // With an earlier train's delay to compare with, one probe is enough.
        assert_eq!(
            report(ss.poll_transmit(t0 + ms(3) + LINGER, &mut rx)),
            Some((2, 1, false))
        );
        start(&mut ss, t0, 3, 5000);
        feed_owd(&mut rx, t0 + ms(1), s, 3, 0, 3, 0, 1).unwrap();
        end(&mut ss, t0 + ms(3), 3, 3);
        assert_eq!(ss.poll_timeout(&rx), Some(t0 + ms(23)));
    }

    #[test]
    fn never_send_a_peer_more_than_it_sent_us() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 0);
        let s = ss.id();
        // The server hello goes out first and is paid for by what the peer sends.
        ss.queue(Control::ServerHello {
            session: s,
            nonce: [0; 16],
            mac: [0; 32],
        });
        assert!(ss.poll_transmit(t0, &mut rx).unwrap().report.is_none());
        start(&mut ss, t0, 1, 5000);
        end(&mut ss, t0, 1, 3);
        for i in 0..3 {
            feed(&mut rx, t0, PEER, &probe(s, 1, i, 3, 32)).unwrap();
        }
        let budget = 3 * 32 + ss.frames.bytes_in - ss.bytes_out;
        let fits = ((budget - 12) / 20) as usize;
        assert_eq!(fits, 2, "budget {budget}");
        assert_eq!(report(ss.poll_transmit(t0, &mut rx)), Some((1, fits, true)));
        let total_in = 3 * 32 + ss.frames.bytes_in;
        assert!(ss.bytes_out <= total_in, "{} > {total_in}", ss.bytes_out);

        // With room to spare the report is whole.
        start(&mut ss, t0, 2, 5000);
        end(&mut ss, t0, 2, 3);
        for i in 0..3 {
            feed(&mut rx, t0, PEER, &probe(s, 2, i, 3, 1000)).unwrap();
        }
        assert_eq!(report(ss.poll_transmit(t0, &mut rx)), Some((2, 3, false)));
    }

    #[test]
    fn load_turns_a_fresh_session_into_a_bounded_sink() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        // The first bytes of the flow come in the same read as the Load frame.
        let mut ss = session(&mut rx, 100);
        let mut bytes = frame(&Control::Load { max_ms: 5_000 });
        bytes.extend_from_slice(&[0xAB; 700]);
        ss.handle_bytes(&bytes);
        assert_eq!(
            ss.poll_control(t0),
            Ok(Flow::Load {
                until: t0 + Duration::from_secs(5),
                discarded: 700
            })
        );
        // An absurd duration is cut to MAX_LOAD.
        let mut ss = session(&mut rx, 101);
        ss.handle_bytes(&frame(&Control::Load { max_ms: u32::MAX }));
        assert!(
            matches!(ss.poll_control(t0), Ok(Flow::Load { until, .. }) if until == t0 + MAX_LOAD)
        );
        // A session that has measured a train may not turn into a load flow.
        let mut ss = session(&mut rx, 102);
        start(&mut ss, t0, 1, 5000);
        ss.handle_bytes(&frame(&Control::Load { max_ms: 1_000 }));
        assert_eq!(ss.poll_control(t0), Err(ProtoError::Unexpected("Load")));
    }

    #[test]
    fn capture_requests_are_the_peers_own_flows_and_capped() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let me: IpAddr = "10.0.0.1".parse().unwrap();
        let ask = |sender: &str, max_ms, max_records| Control::CaptureStart {
            sender: sender.parse().unwrap(),
            receiver: "10.0.2.2:5001".parse().unwrap(),
            max_ms,
            max_records,
        };
        // The asking host's own flow: admitted, duration and records capped.
        let mut ss = session(&mut rx, 100).with_peer(me);
        ss.handle_bytes(&frame(&ask("10.0.0.1:40000", u32::MAX, u32::MAX)));
        assert_eq!(
            ss.poll_control(t0),
            Ok(Flow::Capture {
                sender: "10.0.0.1:40000".parse().unwrap(),
                receiver: "10.0.2.2:5001".parse().unwrap(),
                until: t0 + MAX_CAPTURE,
                max_records: MAX_CAPTURE_RECORDS,
            })
        );
        // Another host's flow: refused with a reason, and the session ends.
        let mut ss = session(&mut rx, 100).with_peer(me);
        ss.handle_bytes(&frame(&ask("10.0.0.9:40000", 1000, 10)));
        assert_eq!(
            ss.poll_control(t0),
            Err(ProtoError::Unexpected("CaptureStart"))
        );
        let t = ss.poll_transmit(t0, &mut rx).unwrap();
        let (Ok(Some((Control::Error { code, message }, _))),) = (Control::decode_frame(&t.bytes),)
        else {
            panic!("an error goes back");
        };
        assert_eq!(code, code::CAPTURE);
        assert!(message.contains("not this session's peer"), "{message}");
        // A session whose peer is unknown asks for nothing; nor one that measured a train.
        let mut ss = session(&mut rx, 100);
        ss.handle_bytes(&frame(&ask("10.0.0.1:40000", 1000, 10)));
        assert!(ss.poll_control(t0).is_err());
        let mut ss = session(&mut rx, 100).with_peer(me);
        start(&mut ss, t0, 1, 5000);
        ss.handle_bytes(&frame(&ask("10.0.0.1:40000", 1000, 10)));
        assert_eq!(
            ss.poll_control(t0),
            Err(ProtoError::Unexpected("CaptureStart"))
        );
    }

    #[test]
    fn close_ends_and_unexpected_messages_get_an_error() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(4);
        let mut ss = session(&mut rx, 100);
        ss.handle_bytes(&frame(&Control::Close));
        assert_eq!(ss.poll_control(t0), Ok(Flow::Closed));
        let mut ss = session(&mut rx, 100);
        ss.handle_bytes(&frame(&Control::ServerHello {
            session: 1,
            nonce: [0; 16],
            mac: [0; 32],
        }));
        assert_eq!(
            ss.poll_control(t0),
            Err(ProtoError::Unexpected("ServerHello"))
        );
        let t = ss.poll_transmit(t0, &mut rx).unwrap();
        assert!(matches!(
            Control::decode_frame(&t.bytes).unwrap(),
            Some((
                Control::Error {
                    code: code::BAD_MESSAGE,
                    ..
                },
                _
            ))
        ));
        let mut ss = session(&mut rx, 100);
        ss.handle_bytes(&[200, 0, 0, 0, 0]);
        assert!(matches!(ss.poll_control(t0), Err(ProtoError::Malformed(_))));
    }
}
