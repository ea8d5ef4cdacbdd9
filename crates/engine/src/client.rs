//! The sending side of a session with a peer agent.

use crate::auth::Key;
use crate::driver::conn::{ClientConn, RecvError};
use crate::pacer::{Job, Pacer};
use crate::proto::handshake::{AuthError, ClientHandshake};
use crate::proto::hops::{HopMatcher, IcmpError, Outcome, SentProbe};
use crate::proto::sender::{Report, SenderSession};
use crate::sock::ErrMsg;
use crate::train::{arrivals, HopStats, MonoNs, TrainResult, TrainSpec};
use crate::Error;
use mgrp_wire::control::Control;
use rand::Rng;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after the last probe the receiver's report may take, beyond the train itself.
pub const REPORT_GRACE: Duration = Duration::from_secs(2);
/// Lead time between announcing a train and its first probe.
const LEAD_NS: u64 = 300_000;

pub struct Session {
    peer: SocketAddr,
    ctrl: ClientConn,
    udp: Arc<UdpSocket>,
    proto: SenderSession,
    pacer: Arc<Pacer>,
    /// Kernel TX timestamps are on; the counter of the next successful send.
    tx_stamps: bool,
    tx_id: u32,
    /// Riders to this peer travel in our probes.
    riders: Option<Arc<crate::riders::RiderSender>>,
    /// The connection was handed on (a capture): dropping the session must not say Close.
    handed_on: bool,
}

impl Session {
    /// Connect to the agent at `peer` (its control and probe port) and authenticate.
    pub fn connect(
        peer: SocketAddr,
        key: &Key,
        pacer: Arc<Pacer>,
        timeout: Duration,
    ) -> Result<Session, Error> {
        Self::connect_marked(peer, key, pacer, timeout, None)
    }

    /// Like [`Session::connect`], with `SO_MARK` on the session's sockets (so policy routing
    /// keeps them out of the riders' TUN; needs CAP_NET_ADMIN).
    pub fn connect_marked(
        peer: SocketAddr,
        key: &Key,
        pacer: Arc<Pacer>,
        timeout: Duration,
        mark: Option<u32>,
    ) -> Result<Session, Error> {
        let refused = |e| {
            Error::io(
                format!("connect to agent at {peer} (is `mgrp agent` running there?)"),
                e,
            )
        };
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(peer),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )
        .map_err(|e| Error::io("control socket", e))?;
        if let Some(m) = mark {
            sock.set_mark(m)
                .map_err(|e| Error::io("SO_MARK on the control socket (needs CAP_NET_ADMIN)", e))?;
        }
        sock.connect_timeout(&peer.into(), timeout)
            .map_err(refused)?;
        let stream: TcpStream = sock.into();
        let mut ctrl = ClientConn::new(stream);
        let unix_ms = mgrp_clock::realtime_ns() / 1_000_000;
        let (hs, hello) = ClientHandshake::start(key, rand::rng().random(), unix_ms);
        ctrl.send(&hello)?;
        let auth_err = |cause| Error::Auth {
            peer: peer.to_string(),
            cause,
        };
        let session = match ctrl.recv(Instant::now() + timeout) {
            Ok(Some(m)) => hs.handle(key, m),
            Ok(None) => Err(AuthError::TimedOut(timeout)),
            Err(RecvError::Proto(e)) => Err(hs.handle_recv_error(e)),
            Err(RecvError::Io(e)) => {
                return Err(Error::io(
                    format!("read the answer to our hello from {peer}"),
                    e,
                ))
            }
        }
        .map_err(auth_err)?;
        let udp = UdpSocket::bind(if peer.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        })
        .map_err(|e| Error::io("bind probe socket", e))?;
        if let Some(m) = mark {
            socket2::SockRef::from(&udp)
                .set_mark(m)
                .map_err(|e| Error::io("SO_MARK on the probe socket (needs CAP_NET_ADMIN)", e))?;
        }
        udp.connect(peer)
            .map_err(|e| Error::io(format!("connect probe socket to {peer}"), e))?;
        // One connected socket per session: every probe of a path keeps one 5-tuple (Paris
        // traceroute's constant flow id, so ECMP keeps them on one path), and the ICMP
        // errors on its queue are this session's.
        crate::sock::enable_recverr(&udp, peer.is_ipv6())?;
        let tx_stamps = crate::sock::enable_tx_timestamps(&udp);
        Ok(Session {
            peer,
            ctrl,
            udp: Arc::new(udp),
            proto: SenderSession::new(session),
            pacer,
            tx_stamps,
            tx_id: 0,
            riders: None,
            handed_on: false,
        })
    }

    /// Carry riders to this peer in this session's probes (IPv4 peers). Connect with
    /// [`Session::connect_marked`] and [`mgrp_shim::BYPASS_MARK`] so the probes themselves do
    /// not take the riders' route.
    pub fn with_riders(mut self, r: Arc<crate::riders::RiderSender>) -> Session {
        if let std::net::IpAddr::V4(d) = self.peer.ip() {
            r.link(d, self.udp.clone(), self.proto.session());
            self.riders = Some(r);
        }
        self
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This end's address of the session (the probes' source).
    pub fn local(&self) -> Option<SocketAddr> {
        self.udp.local_addr().ok()
    }

    /// The control connection's smoothed RTT and its mean deviation, from the kernel.
    pub fn control_rtt(&self) -> Option<(Duration, Duration)> {
        self.ctrl.conn.tcp_rtt()
    }

    /// Frames' bytes the control connection sent so far (payload and headers, ACKs included):
    /// what a session adds at the bottleneck beside its probes.
    pub fn control_wire_bytes(&self) -> Option<u64> {
        self.ctrl.conn.wire_bytes_sent()
    }

    pub fn session_id(&self) -> u32 {
        self.proto.session()
    }

    /// Say when the next train will leave (CLOCK_MONOTONIC ns), so riders can wait for it: the
    /// host's packets to this peer are held from T before it. Without riders, nothing.
    pub fn expect_next_train(&self, at_ns: u64) {
        if let (Some(r), std::net::IpAddr::V4(d)) = (&self.riders, self.peer.ip()) {
            r.expect(d, at_ns);
        }
    }

    /// The measurement is over: what riders hold for this peer, with no train to it expected,
    /// goes now instead of waiting out T. Without riders, nothing.
    pub fn release_riders(&self) {
        if let (Some(r), std::net::IpAddr::V4(d)) = (&self.riders, self.peer.ip()) {
            r.release(d);
        }
    }

    /// Send one train and wait for the receiver's report. A lost report (peer gone) ends the
    /// train after a bounded wait with every probe counted lost; it is not an error.
    pub fn send_train(&mut self, spec: &TrainSpec) -> Result<TrainResult, Error> {
        let planned = Duration::from_nanos(spec.planned_ns());
        let waited = match (&self.riders, self.peer.ip()) {
            (Some(r), std::net::IpAddr::V4(d)) => {
                r.await_riders(d, &rider_padding(spec), spec.planned_ns())
            }
            _ => 0,
        };
        let out = self.proto.begin_train(spec, planned + REPORT_GRACE)?;
        let (train, first_seq) = (out.train, out.first_seq);
        self.ctrl.send(&out.start)?;
        // Read before the start is fixed: /proc/stat takes tens of µs, out of the lead.
        let steal = mgrp_clock::steal::StealSnapshot::take();
        let start = mgrp_clock::now_ns() + LEAD_NS;
        let due_ns = spec.offsets().iter().map(|o| start + o).collect();
        let (riders, riders_done) = match (&self.riders, self.peer.ip()) {
            (Some(r), std::net::IpAddr::V4(d)) => {
                let carry = spec.probes.iter().map(|p| p.may_carry).collect();
                let (t, done) = r.train(d, start, spec.planned_ns(), carry);
                (Some(t), Some(done))
            }
            _ => (None, None),
        };
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        self.pacer.submit(Job {
            sock: self.udp.clone(),
            packets: out.packets,
            due_ns,
            ttls: spec.probes.iter().map(|p| p.ttl).collect(),
            riders,
            done: done_tx,
        })?;
        let mut sends = done_rx
            .recv_timeout(planned + Duration::from_secs(30))
            .map_err(|_| Error::Timeout("the pacer did not finish the train".into()))?;
        let rider_stats = riders_done.map(|d| d.finish()).map(|mut s| {
            s.wait_ns = waited;
            s
        });
        let mut early = Vec::new();
        self.attach_tx_stamps(&mut sends, &mut early);
        let mut hops = HopMatcher::new(self.proto.session(), train, first_seq, sent(spec, &sends));
        for e in &early {
            hops.handle_error(e);
        }
        // Probes known to expire before the peer are not counted: it need not wait for them.
        let sent = spec
            .probes
            .iter()
            .zip(&sends)
            .filter(|(p, s)| s.mono_ns.is_some() && spec.may_arrive(p))
            .count() as u16;
        // The peer may already be gone: then the report is simply missing.
        let report = match self.ctrl.send(&self.proto.end_train(train, sent)) {
            Ok(()) => self.await_report(Instant::now() + REPORT_GRACE),
            Err(_) => None,
        };
        if report.is_none() {
            self.proto.abandon();
        }
        let arrived = report.as_ref().map(|r| (arrivals(&r.records), r.truncated));
        for a in arrived.iter().flat_map(|(a, _)| a) {
            hops.arrived(a.index);
        }
        let mut result = TrainResult::assemble(
            train,
            self.peer.to_string(),
            spec,
            MonoNs(start),
            &sends,
            arrived.as_ref().map(|(a, t)| (&a[..], *t)),
        );
        if let Some(s) = rider_stats.filter(|s| s.skipped_probes > 0) {
            result.shortened(s.skipped_probes as usize);
        }
        result.riders = rider_stats;
        if let Some(s) = steal.as_ref().and_then(|s| s.elapsed()) {
            result.stats.set_stolen_ms(s.max_cpu_s() * 1e3);
        }
        self.collect_hops(&mut hops);
        attach_hops(&mut result, spec, hops);
        Ok(result)
    }

    /// Read the ICMP errors of this train until every TTL-limited probe has its reply or
    /// [`HOP_WAIT`](crate::proto::hops::HOP_WAIT) has passed since the last of them left
    /// (the matcher also bounds how many are read). Trains without TTL-limited probes read
    /// what is already queued and do not wait.
    fn collect_hops(&mut self, hops: &mut HopMatcher) {
        loop {
            let mut msgs = Vec::new();
            crate::sock::drain_errqueue(&self.udp, 64, &mut msgs);
            for m in &msgs {
                if let ErrMsg::Icmp(e) = m {
                    if hops.handle_error(e) == Outcome::Bounded {
                        return;
                    }
                }
            }
            let Some(until) = hops.wait_until() else {
                return;
            };
            let now = mgrp_clock::now_ns();
            if msgs.is_empty() {
                if now >= until.0 {
                    return;
                }
                std::thread::sleep(Duration::from_nanos((until.0 - now).min(1_000_000)));
            }
        }
    }

    /// Match kernel TX timestamps to this train's successful sends, in order. ICMP errors read
    /// on the way go to `errors` (bounded like the matcher's reads).
    fn attach_tx_stamps(
        &mut self,
        sends: &mut [crate::train::SendRecord],
        errors: &mut Vec<IcmpError>,
    ) {
        let cap = 2 * sends.len() + crate::proto::hops::EXTRA_READS;
        let mut stamps = Vec::new();
        let mut read = |stamps: &mut Vec<_>| {
            let mut msgs = Vec::new();
            crate::sock::drain_errqueue(&self.udp, cap, &mut msgs);
            for m in msgs {
                match m {
                    ErrMsg::TxStamp(id, t) => stamps.push((id, t)),
                    ErrMsg::Icmp(e) if errors.len() < cap => errors.push(e),
                    ErrMsg::Icmp(_) => {}
                }
            }
        };
        if !self.tx_stamps {
            read(&mut stamps);
            return;
        }
        let ok = sends.iter().filter(|s| s.mono_ns.is_some()).count() as u32;
        let first = self.tx_id;
        self.tx_id = self.tx_id.wrapping_add(ok);
        // They are queued as the packets reach the device; give stragglers a few ms.
        for _ in 0..20 {
            read(&mut stamps);
            if stamps.len() >= ok as usize {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for (k, s) in sends.iter_mut().filter(|s| s.mono_ns.is_some()).enumerate() {
            let id = first.wrapping_add(k as u32);
            s.kernel_ns = stamps.iter().find(|(i, _)| *i == id).map(|(_, t)| *t);
        }
    }

    /// The awaited train's report, or `None` if it did not come by `deadline` (or the
    /// connection failed: the peer is gone, or said something else).
    fn await_report(&mut self, deadline: Instant) -> Option<Report> {
        loop {
            match self.ctrl.recv(deadline) {
                Ok(Some(m)) => match self.proto.handle_control(m) {
                    Ok(Some(r)) => return Some(r),
                    Ok(None) => continue, // a late report of an earlier train
                    Err(_) => return None,
                },
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Session {
    /// Turn this session's connection into a load flow to the peer agent (which reads and
    /// discards it): bulk TCP for at most `max` (the agent sinks at most
    /// [`MAX_LOAD`](crate::proto::MAX_LOAD)) and `budget` bytes, on congestion control `cc` if
    /// given. Only a session that has sent no train may become a load.
    pub fn into_load(
        mut self,
        max: Duration,
        budget: u64,
        cc: Option<&str>,
    ) -> Result<crate::load::LoadFlow, Error> {
        let stream = self
            .ctrl
            .conn
            .stream
            .try_clone()
            .map_err(|e| Error::io("clone the control socket", e))?;
        let max = max.min(crate::proto::MAX_LOAD);
        self.ctrl.send(&Control::Load {
            max_ms: max.as_millis() as u32,
        })?;
        // Dropping the session sends Close on the same connection: the agent, sinking it
        // now, reads and discards those bytes like the rest.
        drop(self);
        crate::load::LoadFlow::start(stream, max, budget, cc)
    }
}

impl Session {
    /// Ask the peer agent to capture the data segments `sender` (our end of a TCP flow) sends
    /// to `receiver` (the peer's end) as they arrive there, for at most `max` and
    /// `max_records`; this session's connection then carries the records back. Only a session
    /// that has sent no train may become a capture.
    pub fn into_capture(
        self,
        sender: SocketAddr,
        receiver: SocketAddr,
        max: Duration,
        max_records: u32,
    ) -> Result<PeerCapture, Error> {
        let peer = self.peer;
        let stream = self.hand_on(&Control::CaptureStart {
            sender,
            receiver,
            max_ms: max.min(crate::proto::MAX_CAPTURE).as_millis() as u32,
            max_records,
        })?;
        Ok(PeerCapture {
            ctrl: ClientConn::new(stream),
            peer,
            ended: false,
        })
    }
}

impl Session {
    /// Ask the peer agent to act as this host's hands toward the agent at `dst` for at most
    /// `max` (see [`crate::relay`]); this session's connection then carries the relay calls.
    /// Only a session that has sent no train may become a relay.
    pub(crate) fn into_relay(
        self,
        dst: SocketAddr,
        max: Duration,
    ) -> Result<crate::driver::conn::ClientConn, Error> {
        let stream = self.hand_on(&Control::RelayOpen {
            dst,
            max_ms: max.min(crate::proto::MAX_RELAY).as_millis() as u32,
        })?;
        Ok(ClientConn::new(stream))
    }

    /// Send `msg`, after which the connection belongs to what it asked for (a capture, a
    /// relay): its socket, and the session ended without a Close.
    fn hand_on(mut self, msg: &Control) -> Result<std::net::TcpStream, Error> {
        let stream = self
            .ctrl
            .conn
            .stream
            .try_clone()
            .map_err(|e| Error::io("clone the control socket", e))?;
        self.ctrl.send(msg)?;
        self.handed_on = true;
        Ok(stream)
    }
}

/// What a peer's capture sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureEvent {
    /// Arrivals, in the peer's capture order.
    Batch(Vec<mgrp_wire::control::SegRecord>),
    /// The capture is over: `records` were sent, `dropped` were not.
    End { records: u64, dropped: u64 },
}

/// A capture of one of our flows running at the peer agent (see [`Session::into_capture`]).
pub struct PeerCapture {
    ctrl: ClientConn,
    peer: SocketAddr,
    ended: bool,
}

impl PeerCapture {
    /// The next batch or the end, waiting at most until `deadline` (`Ok(None)`: nothing yet).
    /// A refusal or failure at the peer comes back as its error text.
    pub fn recv(&mut self, deadline: Instant) -> Result<Option<CaptureEvent>, Error> {
        if self.ended {
            return Ok(Some(CaptureEvent::End {
                records: 0,
                dropped: 0,
            }));
        }
        let proto = |cause| Error::Protocol {
            peer: self.peer.to_string(),
            cause,
        };
        match self.ctrl.recv(deadline) {
            Ok(None) => Ok(None),
            Ok(Some(Control::CaptureBatch { records })) => Ok(Some(CaptureEvent::Batch(records))),
            Ok(Some(Control::CaptureEnd { records, dropped })) => {
                self.ended = true;
                Ok(Some(CaptureEvent::End { records, dropped }))
            }
            Ok(Some(Control::Error { code, message })) => {
                self.ended = true;
                Err(proto(crate::proto::ProtoError::PeerError { code, message }))
            }
            Ok(Some(other)) => Err(proto(crate::proto::ProtoError::Unexpected(
                crate::proto::kind(&other),
            ))),
            Err(RecvError::Proto(e)) => Err(proto(e)),
            Err(RecvError::Io(e)) => Err(Error::io(format!("read from {}", self.peer), e)),
        }
    }
}

/// Rider bytes each probe of a train can hold: the padding once the rider descriptor and tag
/// are in (0 for a probe that may not carry).
fn rider_padding(spec: &TrainSpec) -> Vec<usize> {
    spec.probes
        .iter()
        .map(|p| match p.may_carry {
            true => (p.size as usize).saturating_sub(mgrp_wire::probe::header_len(Some(0))),
            false => 0,
        })
        .collect()
}

/// What the matcher needs of each probe as it left.
fn sent(spec: &TrainSpec, sends: &[crate::train::SendRecord]) -> Vec<SentProbe> {
    spec.probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = sends.get(i).copied().unwrap_or_default();
            SentProbe {
                ttl: p.ttl,
                mono: s.mono_ns,
                kernel: s.kernel_ns,
            }
        })
        .collect()
}

/// Put each probe's reply into the result; the train's hop accounting when it had
/// TTL-limited probes or anything came back.
fn attach_hops(result: &mut TrainResult, spec: &TrainSpec, hops: HopMatcher) {
    let (replies, stats) = hops.finish();
    for (p, r) in result.probes.iter_mut().zip(replies) {
        p.hop = r;
    }
    let ttl = spec.probes.iter().any(|p| p.ttl.is_some());
    if ttl || stats != HopStats::default() {
        result.hops = Some(stats);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let (Some(r), std::net::IpAddr::V4(d)) = (&self.riders, self.peer.ip()) {
            r.unlink(d, self.proto.session());
        }
        if !self.handed_on {
            let _ = self.ctrl.send(&Control::Close);
        }
    }
}
