//! Riders in the engine (MGRP piggybacking): the host's own packets, routed into a TUN device,
//! travel inside probe padding to the peer agent, which writes them into its own TUN so its
//! kernel sees the original packets.
//!
//! Sender ([`RiderSender`]): a thread reads the TUN; each packet goes to the payload buffer
//! (`mgrp-riders`), which holds it only while a train to its destination is pending (at most T),
//! otherwise it leaves at once through a raw socket. The pacer fills each probe that may carry a
//! rider just before it leaves ([`TrainRiders::fill`]); leftover fragments go standalone at the
//! end of the train or at their deadline. Receiver ([`RiderReceiver`]): authenticate, reassemble,
//! check the inner addresses against the session, write into the TUN.

use crate::auth::{Key, RiderTagInput};
use crate::Error;
use mgrp_riders::buffer::{BufferConfig, Expired, Packet, PayloadBuffer, RiderChunk};
pub use mgrp_riders::elastic::ElasticConfig;
use mgrp_riders::elastic::{self, ArrivalRate, ElasticTrain, Supply};
use mgrp_riders::reassembly::{Reassembler, ReassemblyConfig};
use mgrp_shim::ip::Ipv4Info;
use mgrp_shim::raw::RawSender;
use mgrp_shim::route::{OptIn, Routing};
use mgrp_shim::tun::Tun;
use mgrp_wire::probe::{self, ProbeHeader, Rider, RiderProto, FLAG_RIDER};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Ethernet header bytes a packet carries on the wire beyond its IP packet.
const ETH_HLEN: u64 = 14;

/// Largest standalone fragment: with its header it stays within one 1500-byte MTU datagram.
const STANDALONE_CHUNK: usize = 1400;
/// Riders one probe may carry: each costs an HMAC in the pacer before the probe's gap, and
/// 28 bytes of descriptor and tag.
const MAX_RIDERS_PER_PROBE: usize = 8;

/// The sender's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RiderConfig {
    /// TUN device the opted-in traffic is routed into.
    pub dev: String,
    pub opt_in: Vec<OptIn>,
    /// T: the longest a packet waits for a probe (0 = riders off).
    pub hold: Duration,
    /// Share of each train, from its start, whose probes may carry riders (the seed's ratio).
    pub ratio: f64,
    /// Elastic probing (seed 000 §8.3): trains wait (bounded) for riders and end early when
    /// none are left; `None`: trains leave as planned.
    pub elastic: Option<ElasticConfig>,
}

impl Default for RiderConfig {
    fn default() -> Self {
        RiderConfig {
            dev: "mgrp0".into(),
            opt_in: Vec::new(),
            hold: Duration::from_millis(10),
            ratio: 1.0,
            elastic: None,
        }
    }
}

mgrp_counters::counters! {
    pub struct SendCounters => RiderSendCounters {
        /// Packets read from the TUN
        tun_packets,
        /// Bytes read from the TUN
        tun_bytes,
        /// Packets from the TUN that were not IPv4 (dropped)
        not_ipv4,
        /// Packets sent normally at once (no train pending, or bounds)
        passed_through,
        /// Held packets sent normally at their deadline
        expired_whole,
        /// Held packets sent normally early: their measurement ended with no train expected
        released_whole,
        /// Riders (whole packets or fragments) carried in probes
        rider_chunks,
        /// Bytes carried in probe padding
        rider_bytes,
        /// Probes that could carry a rider and left empty
        empty_probes,
        /// Bytes of those empty probes
        empty_bytes,
        /// Padding left unused in probes that carried (too little for another rider's
        /// descriptor, tag and smallest fragment, or nothing more was held)
        spare_bytes,
        /// Fragments sent in their own packet (end of train or deadline)
        standalone_fragments,
        /// Bytes of standalone fragments
        standalone_bytes,
        /// Normal or standalone sends that failed
        send_errors,
        /// Standalone fragments with no session to their destination (dropped)
        no_session,
        /// Probes elastic trains left out (no rider was waiting for them)
        elastic_skipped,
        /// Bytes of those probes (never sent)
        elastic_skipped_bytes,
        /// Trains that waited for riders before they started
        elastic_waits,
        /// Time trains waited for riders, µs
        elastic_wait_us,
    }
}

mgrp_counters::counters! {
    pub struct RecvCounters => RiderRecvCounters {
        /// Riders received in probes or standalone
        riders,
        /// Riders whose tag did not verify (dropped)
        bad_tag,
        /// Reassembled packets whose addresses do not match the session (dropped)
        wrong_inner,
        /// Standalone riders already seen (dropped)
        replayed,
        /// Packets written into the TUN
        injected,
        /// Writes into the TUN that failed
        inject_errors,
    }
}

/// Where standalone fragments to a destination go: the session's socket and id.
struct Link {
    udp: Arc<UdpSocket>,
    session: u32,
    seq: AtomicU32,
}

struct SendShared {
    key: Key,
    buffer: Mutex<PayloadBuffer>,
    raw: RawSender,
    links: Mutex<HashMap<Ipv4Addr, Arc<Link>>>,
    counters: SendCounters,
    ratio: f64,
    elastic: Option<ElasticConfig>,
    /// Per destination: what the host sent to it and what of that went on the path.
    flows: Mutex<HashMap<IpAddr, DstFlow>>,
    stop: AtomicBool,
}

/// The host's traffic to one destination, in wire bytes (Ethernet header included).
#[derive(Default)]
struct DstFlow {
    /// Recent rate (kept when trains are elastic): IP bytes, for the wait.
    rate: ArrivalRate,
    /// The same in wire bytes, for the rider correction of elastic trains.
    wire_rate: ArrivalRate,
    /// Everything the host handed to the shim, cumulative.
    arrived: u64,
    /// What left on the path outside probes: normal sends and standalone fragments.
    out: u64,
}

impl SendShared {
    fn flow(&self, dst: IpAddr, f: impl FnOnce(&mut DstFlow)) {
        if let Ok(mut m) = self.flows.lock() {
            if m.len() >= MAX_RATE_DSTS && !m.contains_key(&dst) {
                m.clear();
            }
            f(m.entry(dst).or_default());
        }
    }

    /// The host's recent rate to `dst` in wire bytes/s (0 unless trains are elastic).
    fn wire_rate(&self, dst: IpAddr, now_ns: u64) -> f64 {
        self.flows
            .lock()
            .ok()
            .and_then(|mut m| m.get_mut(&dst).map(|f| f.wire_rate.bytes_per_s(now_ns)))
            .unwrap_or(0.0)
    }

    /// (arrived, out) for `dst` so far.
    fn flow_totals(&self, dst: IpAddr) -> (u64, u64) {
        self.flows
            .lock()
            .ok()
            .and_then(|m| m.get(&dst).map(|f| (f.arrived, f.out)))
            .unwrap_or((0, 0))
    }
}

/// Destinations whose rate is tracked at most; beyond it the table starts over.
const MAX_RATE_DSTS: usize = 4096;

/// The sender's side: owns the TUN, the routing that feeds it, the buffer and its thread.
pub struct RiderSender {
    shared: Arc<SendShared>,
    thread: Option<JoinHandle<()>>,
    _routing: Routing,
}

/// Rider accounting of one train, for the estimator (part of the train vocabulary).
pub use mgrp_train::TrainRiderStats;

impl RiderSender {
    /// Open the TUN, route the opted-in traffic into it, start the reader thread.
    pub fn start(cfg: &RiderConfig, key: Key) -> Result<RiderSender, Error> {
        if !(0.0..=1.0).contains(&cfg.ratio) {
            return Err(Error::BadInput("rider ratio must be 0..=1".into()));
        }
        if let Some(e) = &cfg.elastic {
            e.validate().map_err(Error::BadInput)?;
        }
        let tun = Tun::open(&cfg.dev).map_err(|e| Error::BadInput(e.to_string()))?;
        let routing =
            Routing::install(&cfg.dev, &cfg.opt_in).map_err(|e| Error::BadInput(e.to_string()))?;
        let raw =
            RawSender::new(mgrp_shim::BYPASS_MARK).map_err(|e| Error::BadInput(e.to_string()))?;
        let shared = Arc::new(SendShared {
            key,
            buffer: Mutex::new(PayloadBuffer::new(BufferConfig {
                hold_ns: cfg.hold.as_nanos() as u64,
                ..BufferConfig::default()
            })),
            raw,
            links: Mutex::new(HashMap::new()),
            counters: SendCounters::default(),
            ratio: cfg.ratio,
            elastic: cfg.elastic,
            flows: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mgrp-riders".into())
            .spawn(move || tun_loop(&tun, &s))
            .map_err(|e| Error::io("spawn riders thread", e))?;
        Ok(RiderSender {
            shared,
            thread: Some(thread),
            _routing: routing,
        })
    }

    /// A session to `dst` exists: standalone fragments to it go through its socket.
    pub(crate) fn link(&self, dst: Ipv4Addr, udp: Arc<UdpSocket>, session: u32) {
        if let Ok(mut l) = self.shared.links.lock() {
            l.insert(
                dst,
                Arc::new(Link {
                    udp,
                    session,
                    // Standalone riders count from the top of the sequence space, away from
                    // the session's probes.
                    seq: AtomicU32::new(0x8000_0000),
                }),
            );
        }
    }

    pub(crate) fn unlink(&self, dst: Ipv4Addr, session: u32) {
        if let Ok(mut l) = self.shared.links.lock() {
            if l.get(&dst).is_some_and(|k| k.session == session) {
                l.remove(&dst);
            }
        }
    }

    pub fn counters(&self) -> RiderSendCounters {
        self.shared.counters.snapshot()
    }

    /// Quantiles of the delay riders and held packets saw in the buffer, µs.
    pub fn buffer_counters(&self) -> Option<mgrp_riders::buffer::BufferCounters> {
        self.shared.buffer.lock().ok().map(|b| b.counters())
    }

    /// A train to `dst` is expected to start at `at_ns` (monotonic): from T before it, packets
    /// for `dst` wait for it rather than leave at once.
    pub(crate) fn expect(&self, dst: Ipv4Addr, at_ns: u64) {
        if let Ok(mut b) = self.shared.buffer.lock() {
            let hold = b.config().hold_ns;
            b.expect_train(
                IpAddr::V4(dst),
                at_ns.saturating_sub(hold),
                at_ns + 1_000_000,
            );
        }
    }

    /// The measurement to `dst` ended: if no train to it is expected, send what is held for it
    /// now rather than at its deadline. The sends happen under the buffer's lock, so a packet
    /// the TUN reader takes meanwhile (queued behind these, or passed once they are gone)
    /// cannot overtake them.
    pub(crate) fn release(&self, dst: Ipv4Addr) {
        let Ok(mut b) = self.shared.buffer.lock() else {
            return;
        };
        let out = b.release(mgrp_clock::now_ns(), IpAddr::V4(dst), STANDALONE_CHUNK);
        let s = &*self.shared;
        for e in out {
            match e {
                Expired::Whole(p) => send_normally(s, p.dst, &p.data, &s.counters.released_whole),
                Expired::Fragment(c) => send_standalone(s, dst, &c),
            }
        }
    }

    /// Elastic trains: before a train to `dst` whose probes hold `padding_bytes` of riders over
    /// `train_ns`, wait (bounded) until what is held and what the host will send during the
    /// train fill it. Returns how long it waited (0 when trains are not elastic).
    pub(crate) fn await_riders(&self, dst: Ipv4Addr, padding: &[usize], train_ns: u64) -> u64 {
        let Some(cfg) = self.shared.elastic else {
            return 0;
        };
        let padding_bytes = padding.iter().sum();
        let mandatory_padding_bytes = padding.iter().take(cfg.mandatory(padding.len())).sum();
        let since = mgrp_clock::now_ns();
        // Hold what arrives while we wait.
        self.expect(dst, since + cfg.max_wait_ns);
        let d = IpAddr::V4(dst);
        loop {
            let now = mgrp_clock::now_ns();
            let host_bytes_per_s = self
                .shared
                .flows
                .lock()
                .ok()
                .and_then(|mut r| r.get_mut(&d).map(|f| f.rate.bytes_per_s(now)))
                .unwrap_or(0.0);
            let Some((held_bytes, oldest_deadline_ns)) =
                self.shared.buffer.lock().ok().map(|b| b.held_for(d))
            else {
                return 0;
            };
            let supply = Supply {
                padding_bytes,
                mandatory_padding_bytes,
                train_ns,
                held_bytes,
                host_bytes_per_s,
                oldest_deadline_ns,
            };
            match elastic::start_after(&cfg, now, since, &supply) {
                Some(t) => mgrp_clock::sleep_until(t),
                None => break,
            }
        }
        let waited = mgrp_clock::now_ns() - since;
        if waited > 0 {
            let k = &self.shared.counters;
            k.elastic_waits.fetch_add(1, Ordering::Relaxed);
            k.elastic_wait_us
                .fetch_add(waited / 1000, Ordering::Relaxed);
        }
        waited
    }

    /// A train of `planned_ns` to `dst` starts at `start_ns` (monotonic): hold packets for it,
    /// and return the filler the pacer calls for each probe.
    pub(crate) fn train(
        &self,
        dst: Ipv4Addr,
        start_ns: u64,
        planned_ns: u64,
        carry: Vec<bool>,
    ) -> (TrainRiders, TrainRidersDone) {
        let now = mgrp_clock::now_ns();
        if let Ok(mut b) = self.shared.buffer.lock() {
            b.expect_train(IpAddr::V4(dst), now, start_ns + planned_ns + 1_000_000);
        }
        let n = carry.len();
        let at_first = Arc::new(Mutex::new(None));
        let allowed = (self.shared.ratio * n as f64).ceil() as usize;
        let stats = Arc::new(Mutex::new(TrainRiderStats::default()));
        (
            TrainRiders {
                shared: self.shared.clone(),
                dst,
                window: (now.min(start_ns), start_ns + planned_ns),
                carry: carry
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| c && i < allowed)
                    .collect(),
                at_first: at_first.clone(),
                elastic: match &self.shared.elastic {
                    Some(cfg) => ElasticTrain::new(cfg, n),
                    None => ElasticTrain::rigid(),
                },
                stats: stats.clone(),
            },
            TrainRidersDone {
                shared: self.shared.clone(),
                dst,
                stats,
                at_first,
            },
        )
    }
}

impl Drop for RiderSender {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One train's rider filler, moved into the pacer's job.
pub struct TrainRiders {
    shared: Arc<SendShared>,
    dst: Ipv4Addr,
    window: (u64, u64),
    carry: Vec<bool>,
    /// The host's (arrived, out) totals as the first probe left.
    at_first: Arc<Mutex<Option<(u64, u64)>>>,
    elastic: ElasticTrain,
    stats: Arc<Mutex<TrainRiderStats>>,
}

/// What the session keeps of a train's riders to finish it after the pacer is done.
pub(crate) struct TrainRidersDone {
    shared: Arc<SendShared>,
    dst: Ipv4Addr,
    stats: Arc<Mutex<TrainRiderStats>>,
    at_first: Arc<Mutex<Option<(u64, u64)>>>,
}

impl TrainRiders {
    /// The train was cut short (elastic): the rest of its probes stay home.
    pub fn ended(&self) -> bool {
        self.elastic.ended_at().is_some()
    }

    /// Put riders into probe `index` (encoded in `pkt`) while packets are waiting and its
    /// padding has room; the probe's size never changes. Whether the probe leaves: an elastic
    /// train ends at the first probe past its mandatory prefix that no rider is waiting for.
    pub fn fill(&mut self, index: usize, pkt: &mut [u8]) -> bool {
        if index == 0 {
            if let Ok(mut a) = self.at_first.lock() {
                *a = Some(self.shared.flow_totals(IpAddr::V4(self.dst)));
            }
        }
        if self.ended() {
            self.skipped(pkt.len());
            return false;
        }
        if !self.carry.get(index).copied().unwrap_or(false) {
            return true;
        }
        let Ok(p) = probe::decode(pkt) else {
            return true;
        };
        let header = p.header;
        // Riders fill the padding in turn: the tail of a packet a probe began, then the head of
        // the next (one rider a probe left up to half the padding of a probe smaller than the
        // host's packets empty: round 19). Each costs its descriptor and tag.
        let size = pkt.len();
        let now = mgrp_clock::now_ns();
        let (chunks, left) = match self.shared.buffer.lock() {
            Ok(mut b) => b.take_riders(
                now,
                IpAddr::V4(self.dst),
                size.saturating_sub(probe::HEADER_LEN),
                probe::RIDER_OVERHEAD,
                MAX_RIDERS_PER_PROBE,
            ),
            Err(_) => (Vec::new(), 0),
        };
        if !self.elastic.leaves(index, !chunks.is_empty()) {
            // A probe with riders always leaves: a train that ends here took none.
            self.skipped(pkt.len());
            return false;
        }
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let k = &self.shared.counters;
        if chunks.is_empty() {
            stats.empty_probes += 1;
            stats.empty_bytes += size as u64;
            k.empty_probes.fetch_add(1, Ordering::Relaxed);
            k.empty_bytes.fetch_add(size as u64, Ordering::Relaxed);
            return true;
        }
        let riders: Vec<Rider> = chunks
            .iter()
            .map(|c| tagged(&self.shared.key, &header, c))
            .collect();
        let h = ProbeHeader {
            flags: header.flags | FLAG_RIDER,
            ..header
        };
        if probe::encode(&h, &riders, size, pkt).is_err() {
            return true;
        }
        for c in &chunks {
            stats.chunks += 1;
            stats.bytes += c.data.len() as u64;
            if (self.window.0..=self.window.1).contains(&c.enqueued_ns) {
                stats.in_window_bytes += c.data.len() as u64;
            }
            k.rider_chunks.fetch_add(1, Ordering::Relaxed);
            k.rider_bytes
                .fetch_add(c.data.len() as u64, Ordering::Relaxed);
        }
        stats.spare_bytes += left as u64;
        k.spare_bytes.fetch_add(left as u64, Ordering::Relaxed);
        true
    }

    fn skipped(&self, bytes: usize) {
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.skipped_probes += 1;
        stats.skipped_bytes += bytes as u64;
        let k = &self.shared.counters;
        k.elastic_skipped.fetch_add(1, Ordering::Relaxed);
        k.elastic_skipped_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl TrainRidersDone {
    /// The train has gone: the rest of a partly carried packet leaves standalone now.
    pub(crate) fn finish(&self) -> TrainRiderStats {
        // Competing bytes: what the host sent while the train was out that did not cross the
        // path beside it — it rode, or is still held and crosses after the train. (Counting
        // only riders that arrived during the train misses those held past its end, behind
        // the backlog that rode first: they too are load the train did not meet.)
        let end = self.shared.flow_totals(IpAddr::V4(self.dst));
        let start = self.at_first.lock().ok().and_then(|a| *a);
        let (arrived, out) = start.map_or((0, 0), |(arrived, out)| {
            (end.0.saturating_sub(arrived), end.1.saturating_sub(out))
        });
        let competing = arrived.saturating_sub(out);
        // The host's rate over a window the train does not choose: elastic trains end when the
        // arrivals stop (bytes over their span over-count it), and a short rigid train meets
        // a whole number of the host's bursts (bytes over its span are noisy).
        let now = mgrp_clock::now_ns();
        let host_bytes_per_s = self.shared.wire_rate(IpAddr::V4(self.dst), now).round() as u64;
        let chunks = match self.shared.buffer.lock() {
            Ok(mut b) => b.end_train(now, IpAddr::V4(self.dst), STANDALONE_CHUNK),
            Err(_) => Vec::new(),
        };
        let n = chunks.len() as u32;
        for c in chunks {
            send_standalone(&self.shared, self.dst, &c);
        }
        let mut s = *self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.standalone_fragments += n;
        s.competing_bytes = competing;
        s.arrived_bytes = arrived;
        s.beside_bytes = out;
        s.host_bytes_per_s = host_bytes_per_s;
        s
    }
}

/// Chunk `c` as the rider of the probe with header `h`, with its tag.
fn tagged<'a>(key: &Key, h: &ProbeHeader, c: &'a RiderChunk) -> Rider<'a> {
    let tag = key.rider_tag(&RiderTagInput {
        session: h.session,
        seq: h.seq,
        train: h.train,
        index: h.index,
        frag_id: c.frag_id,
        offset: c.offset,
        proto: c.proto,
        last: c.last,
        data: &c.data,
    });
    Rider {
        frag_id: c.frag_id,
        offset: c.offset,
        proto: RiderProto::from_code(c.proto),
        last: c.last,
        data: &c.data,
        tag,
    }
}

/// A fragment in a packet of its own (train 0): exactly header + rider, no padding.
fn send_standalone(s: &SendShared, dst: Ipv4Addr, c: &RiderChunk) {
    let k = &s.counters;
    let Some(link) = s.links.lock().ok().and_then(|l| l.get(&dst).cloned()) else {
        k.no_session.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let seq = link.seq.fetch_add(1, Ordering::Relaxed);
    let h = ProbeHeader {
        flags: 0,
        session: link.session,
        seq,
        train: 0,
        index: 0,
        train_len: 1,
        sent_ns: mgrp_clock::realtime_ns(),
    };
    let rider = tagged(&s.key, &h, c);
    let size = probe::header_len(Some(c.data.len()));
    let mut buf = vec![0u8; size];
    // The probe socket queues ICMP errors: a send may only report an earlier one (retried).
    if probe::encode(&h, &[rider], size, &mut buf).is_err()
        || crate::pacer::send_probe(&link.udp, &buf).is_none()
    {
        k.send_errors.fetch_add(1, Ordering::Relaxed);
        return;
    }
    k.standalone_fragments.fetch_add(1, Ordering::Relaxed);
    k.standalone_bytes
        .fetch_add(c.data.len() as u64, Ordering::Relaxed);
    // On the wire: Ethernet, IP and UDP headers, the MGRP header, descriptor and tag.
    let wire = (size + 42) as u64;
    s.flow(IpAddr::V4(dst), |f| f.out += wire);
}

fn send_normally(s: &SendShared, dst: IpAddr, pkt: &[u8], counter: &AtomicU64) {
    if s.raw.send(pkt).is_ok() {
        s.flow(dst, |f| f.out += pkt.len() as u64 + ETH_HLEN);
        counter.fetch_add(1, Ordering::Relaxed);
    } else {
        s.counters.send_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Read the TUN, hold or pass each packet, send what expires — until stopped.
fn tun_loop(tun: &Tun, s: &SendShared) {
    mgrp_clock::tighten_timer_slack();
    let mut buf = vec![0u8; mgrp_shim::tun::MAX_PACKET];
    let k = &s.counters;
    while !s.stop.load(Ordering::Relaxed) {
        let now = mgrp_clock::now_ns();
        let next = s
            .buffer
            .lock()
            .ok()
            .and_then(|b| b.next_deadline())
            .unwrap_or(now + 20_000_000);
        tun.wait(Duration::from_nanos(
            next.saturating_sub(now).min(20_000_000),
        ));
        while let Ok(Some(n)) = tun.read(&mut buf) {
            k.tun_packets.fetch_add(1, Ordering::Relaxed);
            k.tun_bytes.fetch_add(n as u64, Ordering::Relaxed);
            let Some(info) = Ipv4Info::parse(&buf[..n]) else {
                k.not_ipv4.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let now = mgrp_clock::now_ns();
            let elastic = s.elastic.is_some();
            s.flow(IpAddr::V4(info.dst), |f| {
                f.arrived += info.len as u64 + ETH_HLEN;
                // Every train is charged the wire rate; the elastic wait reads the payload rate.
                f.wire_rate.push(now, info.len + ETH_HLEN as usize);
                if elastic {
                    f.rate.push(now, info.len);
                }
            });
            let pkt = Packet {
                dst: IpAddr::V4(info.dst),
                proto: info.proto,
                data: buf[..info.len].to_vec(),
                enqueued_ns: now,
            };
            let back = match s.buffer.lock() {
                Ok(mut b) => b.push(pkt.enqueued_ns, pkt),
                Err(_) => Some(pkt),
            };
            if let Some(p) = back {
                send_normally(s, p.dst, &p.data, &k.passed_through);
            }
        }
        let expired = match s.buffer.lock() {
            Ok(mut b) => b.poll_expired(mgrp_clock::now_ns(), STANDALONE_CHUNK),
            Err(_) => Vec::new(),
        };
        for e in expired {
            match e {
                Expired::Whole(p) => send_normally(s, p.dst, &p.data, &k.expired_whole),
                Expired::Fragment(c) => {
                    if let IpAddr::V4(d) = c.dst {
                        send_standalone(s, d, &c)
                    }
                }
            }
        }
    }
}

/// The receiver's side: a TUN to write reassembled packets into.
pub struct RiderReceiver {
    tun: Tun,
    reassembly: Mutex<Reassembler>,
    local: Vec<Ipv4Addr>,
    counters: RecvCounters,
    /// Per session: the highest standalone sequence seen and a 64-bit window below it.
    replay: Mutex<HashMap<u32, (u32, u64)>>,
}

impl RiderReceiver {
    /// Open TUN `dev` in this namespace for incoming riders; `local` are the addresses riders
    /// may be for.
    pub fn open(dev: &str, local: Vec<Ipv4Addr>) -> Result<RiderReceiver, Error> {
        let tun = Tun::open(dev).map_err(|e| Error::BadInput(e.to_string()))?;
        mgrp_shim::route::prepare_receiver(dev).map_err(|e| Error::BadInput(e.to_string()))?;
        Ok(RiderReceiver {
            tun,
            reassembly: Mutex::new(Reassembler::new(ReassemblyConfig::default())),
            local,
            counters: RecvCounters::default(),
            replay: Mutex::new(HashMap::new()),
        })
    }

    pub fn counters(&self) -> RiderRecvCounters {
        self.counters.snapshot()
    }

    pub fn reassembly_counters(&self) -> Option<mgrp_riders::reassembly::ReassemblyCounters> {
        self.reassembly.lock().ok().map(|r| r.counters())
    }

    /// Is standalone sequence `seq` of `session` new? (IPsec-style window of 64.)
    fn fresh(&self, session: u32, seq: u32) -> bool {
        let Ok(mut m) = self.replay.lock() else {
            return false;
        };
        if m.len() > 4096 && !m.contains_key(&session) {
            m.clear();
        }
        let (top, bits) = m.entry(session).or_insert((seq.wrapping_sub(1), 0));
        let ahead = seq.wrapping_sub(*top);
        if ahead != 0 && ahead < 1 << 31 {
            *bits = if ahead >= 64 { 0 } else { *bits << ahead };
            *bits |= 1;
            *top = seq;
            return true;
        }
        let behind = top.wrapping_sub(seq);
        if behind >= 64 || *bits & (1 << behind) != 0 {
            return false;
        }
        *bits |= 1 << behind;
        true
    }

    /// A rider from `peer` in an accepted probe (or a standalone one, train 0).
    pub(crate) fn handle(&self, key: &Key, peer: IpAddr, h: &ProbeHeader, r: &Rider<'_>) {
        let k = &self.counters;
        k.riders.fetch_add(1, Ordering::Relaxed);
        let input = RiderTagInput {
            session: h.session,
            seq: h.seq,
            train: h.train,
            index: h.index,
            frag_id: r.frag_id,
            offset: r.offset,
            proto: r.proto.code(),
            last: r.last,
            data: r.data,
        };
        if !key.verify_rider_tag(&input, &r.tag) {
            k.bad_tag.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if h.train == 0 && !self.fresh(h.session, h.seq) {
            k.replayed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now = mgrp_clock::now_ns();
        let whole = match self.reassembly.lock() {
            Ok(mut re) => {
                re.poll_timeouts(now);
                re.push(
                    now,
                    peer,
                    r.proto.code(),
                    r.frag_id,
                    r.offset,
                    r.last,
                    r.data,
                )
            }
            Err(_) => None,
        };
        let Some(pkt) = whole else { return };
        let ok = Ipv4Info::parse(&pkt).is_some_and(|i| {
            IpAddr::V4(i.src) == peer && self.local.contains(&i.dst) && i.proto == r.proto.code()
        });
        if !ok {
            k.wrong_inner.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.tun.write(&pkt) {
            Ok(()) => k.injected.fetch_add(1, Ordering::Relaxed),
            Err(_) => k.inject_errors.fetch_add(1, Ordering::Relaxed),
        };
    }
}
