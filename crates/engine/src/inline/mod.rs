//! The inline engine (ImTCP, issue 16): the host's own kernel TCP flows, opted in as riders are
//! (destination, port or socket mark), are routed into a TUN device the agent owns; a sans-IO
//! [`InlineMachine`] per flow decides which segments to hold and when each leaves; this thread
//! sends them out through a raw socket exactly as the kernel wrote them, spinning for the
//! stream's gaps. ACK arrival times come from a capture with kernel timestamps (`mgrp-capture`),
//! cwnd/srtt/rttvar from `sock_diag` ([`diag`]).
//!
//! When the engine stops, held segments are sent and the routing is undone. When the agent dies,
//! its TUN device disappears with its descriptor, the kernel drops the table's route through it,
//! and the opt-in rule falls through to the main table: traffic flows untouched (segments held at
//! that instant are lost once and retransmitted by TCP).

pub mod diag;
pub mod tcp;

use crate::Error;
use diag::{Diag, TcpDiag};
use mgrp_estimate::inline::{FlowInfo, InlineCounters, InlineMachine, InlineParams, Segment};
use mgrp_estimate::Estimate;
use mgrp_shim::raw::RawSender;
use mgrp_shim::route::{OptIn, Routing};
use mgrp_shim::tun::{Tun, MAX_PACKET};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tcp::TcpHeader;

/// The routing table of the inline engine (the riders use [`mgrp_shim::TABLE`]).
pub const TABLE: u32 = 7250;
/// Flows measured at once; more are passed through untouched.
pub const MAX_FLOWS: usize = 256;
/// A due time closer than this is waited for by spinning (nanosleep wakes 60–100 µs late here).
const SPIN_NS: u64 = 2_000_000;
/// How often the kernel is asked for a flow's cwnd/srtt/rttvar.
const DIAG_EVERY_NS: u64 = 20_000_000;
/// A flow with no segment for this long and nothing held is forgotten.
const IDLE_NS: u64 = 30_000_000_000;
/// ACK arrivals buffered between the capture thread and the engine.
const ACK_QUEUE: usize = 65_536;

#[derive(Debug, Clone, PartialEq)]
pub struct InlineConfig {
    /// TUN device the opted-in flows are routed into.
    pub dev: String,
    pub opt_in: Vec<OptIn>,
    pub params: InlineParams,
    /// Interface ACKs are captured on; `None`: the route to the first `to:` opt-in, else `any`.
    pub capture_dev: Option<String>,
    /// Write every stream and measurement here, one JSON object a line (a debugging aid for
    /// benches: the file is not bounded).
    pub trace: Option<std::path::PathBuf>,
}

impl InlineConfig {
    pub fn new(opt_in: Vec<OptIn>, access_bps: f64) -> Self {
        InlineConfig {
            dev: "mgrp2".into(),
            opt_in,
            params: InlineParams::new(access_bps),
            capture_dev: None,
            trace: None,
        }
    }
}

mgrp_counters::counters! {
    pub struct DriverCounters => InlineDriverCounters {
        /// Packets read from the TUN
        tun_packets,
        /// Packets from the TUN that are not TCP over IPv4 (sent on at once)
        not_tcp,
        /// Packets of flows beyond the flow bound (sent on at once)
        over_flow_bound,
        /// Sends through the raw socket that failed
        send_errors,
        /// ACKs captured
        acks,
        /// ACKs dropped because the engine fell behind
        acks_dropped,
        /// sock_diag queries that failed or found no socket
        diag_misses,
    }
}

/// A flow by its two ends, as the sender sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct FlowKey {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// What the engine knows about one flow (for the API, the store and `mgrp inline`).
#[derive(Debug, Clone, Serialize)]
pub struct FlowStatus {
    pub flow: FlowKey,
    /// The latest estimate of the path's available bandwidth and when (realtime ns).
    pub estimate: Option<Estimate>,
    pub estimate_at_ns: Option<u64>,
    /// Every estimate so far (bounded, newest last).
    pub history: Vec<(u64, f64)>,
    pub counters: InlineCounters,
    /// cwnd (segments), srtt and rttvar (µs), and the kernel's delivery rate (bit/s).
    pub cwnd: u32,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub delivery_rate_bps: f64,
    pub total_retrans: u32,
}

const HISTORY: usize = 4096;

struct Shared {
    stop: AtomicBool,
    counters: DriverCounters,
    flows: Mutex<HashMap<FlowKey, FlowStatus>>,
    /// Set when the engine thread ended on an error.
    failed: Mutex<Option<String>>,
    started_ns: AtomicU64,
}

/// The running inline engine: owns the TUN, the routing that feeds it, the capture and threads.
pub struct InlineEngine {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    // Dropped after the threads stop (fields drop in order).
    _routing: Routing,
}

/// Capture filter for the ACKs of the opted-in flows.
fn ack_filter(opt_in: &[OptIn]) -> Option<String> {
    let parts: Option<Vec<String>> = opt_in
        .iter()
        .map(|o| match o {
            OptIn::To(p) => Some(format!("src net {p}")),
            OptIn::TcpPort(p) => Some(format!("src port {p}")),
            // A socket mark is invisible on the wire: capture every TCP ACK.
            OptIn::Mark(_) | OptIn::UdpPort(_) => None,
        })
        .collect();
    parts.map(|p| format!("tcp[13] & 16 != 0 and ({})", p.join(" or ")))
}

/// The interface the main table routes `dst` through (the agent's own sockets' route).
fn route_dev(dst: &str) -> Option<String> {
    let addr = dst.split('/').next()?;
    let out = std::process::Command::new("ip")
        .args(["-o", "-4", "route", "get", addr, "mark"])
        .arg(mgrp_shim::BYPASS_MARK.to_string())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    while let Some(w) = it.next() {
        if w == "dev" {
            return it.next().map(str::to_string);
        }
    }
    None
}

impl InlineEngine {
    /// Check the opt-ins, open the TUN, route the flows into it, start the capture and the engine.
    pub fn start(cfg: &InlineConfig) -> Result<InlineEngine, Error> {
        if cfg.opt_in.is_empty() {
            return Err(Error::BadInput("inline: nothing opted in".into()));
        }
        for o in &cfg.opt_in {
            if matches!(o, OptIn::UdpPort(_)) {
                return Err(Error::BadInput(format!(
                    "inline: {o:?}: inline measurement works on TCP flows only"
                )));
            }
            let riders = mgrp_shim::route::opted_in(mgrp_shim::TABLE, o)
                .map_err(|e| Error::BadInput(e.to_string()))?;
            if riders {
                return Err(Error::BadInput(format!(
                    "inline: {o:?} is already opted into riders (routing table {}): a flow rides or is measured inline, not both",
                    mgrp_shim::TABLE
                )));
            }
            if mgrp_shim::route::opted_in(TABLE, o).map_err(|e| Error::BadInput(e.to_string()))? {
                return Err(Error::BadInput(format!(
                    "inline: {o:?} is already opted in (routing table {TABLE}): is another inline engine running?"
                )));
            }
        }
        let tun = Tun::open(&cfg.dev).map_err(|e| Error::BadInput(e.to_string()))?;
        let raw =
            RawSender::new(mgrp_shim::BYPASS_MARK).map_err(|e| Error::BadInput(e.to_string()))?;
        let diag = Diag::open().map_err(|e| Error::io("sock_diag socket", e))?;
        let dev = cfg.capture_dev.clone().unwrap_or_else(|| {
            cfg.opt_in
                .iter()
                .find_map(|o| match o {
                    OptIn::To(p) => route_dev(p),
                    _ => None,
                })
                .unwrap_or_else(|| "any".into())
        });
        let filter = ack_filter(&cfg.opt_in).unwrap_or_else(|| "tcp[13] & 16 != 0".into());
        let mut cap = mgrp_capture::live::LiveCapture::open(&dev, Some(&filter), None)
            .map_err(|e| Error::BadInput(format!("inline: ACK capture: {e}")))?;
        let routing = Routing::install_in(&cfg.dev, TABLE, &cfg.opt_in)
            .map_err(|e| Error::BadInput(e.to_string()))?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            counters: DriverCounters::default(),
            flows: Mutex::new(HashMap::new()),
            failed: Mutex::new(None),
            started_ns: AtomicU64::new(mgrp_clock::realtime_ns()),
        });
        let (tx, rx) = sync_channel(ACK_QUEUE);
        let s = shared.clone();
        let capture = std::thread::Builder::new()
            .name("mgrp-inline-acks".into())
            .spawn(move || {
                // Off the pacer's CPU, but at real-time priority: on a busy host a starved capture
                // thread handed ACKs over so late that streams timed out (load average 15).
                crate::pacer::avoid_pacer_cpu();
                crate::pacer::try_realtime();
                capture_loop(&mut cap, &tx, &s)
            })
            .map_err(|e| Error::io("spawn inline capture thread", e))?;
        let trace = match &cfg.trace {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p).map_err(|e| Error::io("inline trace file", e))?,
            )),
            None => None,
        };
        let s = shared.clone();
        let params = cfg.params;
        let engine = std::thread::Builder::new()
            .name("mgrp-inline".into())
            .spawn(move || {
                let mut e = Engine {
                    tun,
                    raw,
                    diag,
                    acks: rx,
                    params,
                    flows: HashMap::new(),
                    shared: s,
                    trace,
                };
                e.run();
            })
            .map_err(|e| Error::io("spawn inline thread", e))?;
        Ok(InlineEngine {
            shared,
            threads: vec![engine, capture],
            _routing: routing,
        })
    }

    /// Every flow the engine has seen, with its latest estimate and counters.
    pub fn flows(&self) -> Vec<FlowStatus> {
        let mut v: Vec<FlowStatus> = self
            .shared
            .flows
            .lock()
            .map(|f| f.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|f| (f.flow.remote.to_string(), f.flow.local.port()));
        v
    }

    pub fn counters(&self) -> InlineDriverCounters {
        self.shared.counters.snapshot()
    }

    /// Why the engine thread stopped, if it did.
    pub fn failure(&self) -> Option<String> {
        self.shared.failed.lock().ok().and_then(|f| f.clone())
    }

    /// When the engine started (realtime ns).
    pub fn started_ns(&self) -> u64 {
        self.shared.started_ns.load(Ordering::Relaxed)
    }
}

impl Drop for InlineEngine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn capture_loop(
    cap: &mut mgrp_capture::live::LiveCapture,
    tx: &SyncSender<(FlowKey, u32, u64)>,
    s: &Shared,
) {
    while !s.stop.load(Ordering::Relaxed) {
        match cap.next_segment() {
            Ok(Some(seg)) if seg.has_ack => {
                let (std::net::SocketAddr::V4(remote), std::net::SocketAddr::V4(local)) =
                    (seg.src, seg.dst)
                else {
                    continue;
                };
                s.counters.acks.fetch_add(1, Ordering::Relaxed);
                if tx
                    .try_send((FlowKey { local, remote }, seg.ack, seg.ts_ns))
                    .is_err()
                {
                    s.counters.acks_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(_) => {}
            Err(e) => {
                if let Ok(mut f) = s.failed.lock() {
                    *f = Some(format!("ACK capture: {e}"));
                }
                return;
            }
        }
    }
}

struct Flow {
    m: InlineMachine,
    /// The packets the machine knows by id, in order (the machine releases them in this order).
    packets: VecDeque<(u64, Vec<u8>)>,
    next_id: u64,
    last_seen: u64,
    next_diag: u64,
    diag: Option<TcpDiag>,
    history: VecDeque<(u64, f64)>,
}

struct Engine {
    tun: Tun,
    raw: RawSender,
    diag: Diag,
    acks: Receiver<(FlowKey, u32, u64)>,
    params: InlineParams,
    flows: HashMap<FlowKey, Flow>,
    shared: Arc<Shared>,
    trace: Option<std::io::BufWriter<std::fs::File>>,
}

impl Engine {
    fn run(&mut self) {
        mgrp_clock::tighten_timer_slack();
        // This thread paces streams to the microsecond, as the pacer does its trains: on the
        // pacer's CPU at real-time priority (without CAP_SYS_NICE it runs on, with later sends
        // when preempted). Measured: docs/inline.md.
        mgrp_clock::cpu::pin_to_pacer_cpu();
        crate::pacer::try_realtime();
        let mut buf = vec![0u8; MAX_PACKET];
        let mut next_publish = 0;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = mgrp_clock::realtime_ns();
            for _ in 0..256 {
                match self.tun.read(&mut buf) {
                    Ok(Some(n)) => self.packet(&buf[..n], now),
                    Ok(None) => break,
                    Err(e) => {
                        if let Ok(mut f) = self.shared.failed.lock() {
                            *f = Some(e.to_string());
                        }
                        self.flush_all();
                        return;
                    }
                }
            }
            while let Ok((key, ack, ts)) = self.acks.try_recv() {
                if let Some(f) = self.flows.get_mut(&key) {
                    f.m.handle_ack(ts, ack);
                }
            }
            self.poll_diag(now);
            self.transmit();
            if now >= next_publish {
                self.publish(now);
                next_publish = now + 100_000_000;
            }
            let now = mgrp_clock::realtime_ns();
            let next = self.flows.values().filter_map(|f| f.m.next_wakeup()).min();
            match next {
                Some(t) if t <= now + SPIN_NS => std::hint::spin_loop(),
                Some(t) => self
                    .tun
                    .wait(Duration::from_nanos((t - now - SPIN_NS / 2).min(1_000_000))),
                None => self.tun.wait(Duration::from_millis(1)),
            }
        }
        self.flush_all();
    }

    /// One packet from the TUN.
    fn packet(&mut self, pkt: &[u8], now: u64) {
        self.shared
            .counters
            .tun_packets
            .fetch_add(1, Ordering::Relaxed);
        let Some(h) = TcpHeader::parse(pkt) else {
            self.shared.counters.not_tcp.fetch_add(1, Ordering::Relaxed);
            self.send(pkt);
            return;
        };
        let key = FlowKey {
            local: h.src,
            remote: h.dst,
        };
        if !self.flows.contains_key(&key) {
            if self.flows.len() >= MAX_FLOWS {
                self.evict(now);
            }
            if self.flows.len() >= MAX_FLOWS {
                self.shared
                    .counters
                    .over_flow_bound
                    .fetch_add(1, Ordering::Relaxed);
                self.send(pkt);
                return;
            }
            self.flows.insert(
                key,
                Flow {
                    m: InlineMachine::new(self.params),
                    packets: VecDeque::new(),
                    next_id: 0,
                    last_seen: now,
                    next_diag: 0,
                    diag: None,
                    history: VecDeque::new(),
                },
            );
            self.poll_diag(now);
        }
        let Some(f) = self.flows.get_mut(&key) else {
            return;
        };
        f.last_seen = now;
        let id = f.next_id;
        f.next_id += 1;
        f.packets.push_back((id, pkt.to_vec()));
        // Control segments (SYN/FIN/RST) carry no payload worth holding: len 0 passes.
        let len = if h.syn_fin_rst { 0 } else { h.payload };
        f.m.handle_segment(
            now,
            id,
            Segment {
                seq: h.seq,
                len,
                // On the wire: the IP packet plus the Ethernet header (the shaper's unit).
                bits: (pkt.len() + 14) as f64 * 8.0,
            },
        );
    }

    fn send(&self, pkt: &[u8]) {
        if self.raw.send(pkt).is_err() {
            self.shared
                .counters
                .send_errors
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn transmit(&mut self) {
        let now = mgrp_clock::realtime_ns();
        let raw = &self.raw;
        let counters = &self.shared.counters;
        for f in self.flows.values_mut() {
            while let Some(id) = f.m.poll_transmit(now) {
                // The machine releases in arrival order: the front is this id.
                let Some((front, pkt)) = f.packets.pop_front() else {
                    break;
                };
                debug_assert_eq!(front, id);
                if raw.send(&pkt).is_err() {
                    counters.send_errors.fetch_add(1, Ordering::Relaxed);
                }
                f.m.handle_sent(id, mgrp_clock::realtime_ns());
            }
        }
    }

    fn poll_diag(&mut self, now: u64) {
        for (k, f) in self.flows.iter_mut() {
            if now < f.next_diag {
                continue;
            }
            f.next_diag = now + DIAG_EVERY_NS;
            match self.diag.lookup(k.local, k.remote) {
                Ok(Some(d)) => {
                    f.diag = Some(d);
                    f.m.handle_flow(
                        now,
                        FlowInfo {
                            cwnd: d.cwnd,
                            srtt_ns: d.srtt_us as u64 * 1000,
                            rttvar_ns: d.rttvar_us as u64 * 1000,
                        },
                    );
                }
                _ => {
                    self.shared
                        .counters
                        .diag_misses
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn evict(&mut self, now: u64) {
        self.flows
            .retain(|_, f| f.m.queued() > 0 || now < f.last_seen + IDLE_NS);
    }

    fn publish(&mut self, now: u64) {
        self.evict(now);
        let Ok(mut out) = self.shared.flows.lock() else {
            return;
        };
        for (k, f) in self.flows.iter_mut() {
            while let Some(ev) = f.m.poll_event() {
                if let Some(w) = self.trace.as_mut() {
                    use std::io::Write;
                    let line = serde_json::json!({ "flow": k, "event": &ev });
                    let _ = writeln!(w, "{line}");
                }
                if let mgrp_estimate::inline::InlineEvent::Measured { at_ns, value_bps } = ev {
                    if f.history.len() >= HISTORY {
                        f.history.pop_front();
                    }
                    f.history.push_back((at_ns, value_bps));
                }
            }
            let d = f.diag.unwrap_or_default();
            out.insert(
                *k,
                FlowStatus {
                    flow: *k,
                    estimate: f.m.estimate().map(|e| e.1.clone()),
                    estimate_at_ns: f.m.estimate().map(|e| e.0),
                    history: f.history.iter().copied().collect(),
                    counters: f.m.counters(),
                    cwnd: d.cwnd,
                    srtt_us: d.srtt_us,
                    rttvar_us: d.rttvar_us,
                    delivery_rate_bps: d.delivery_rate_bytes as f64 * 8.0,
                    total_retrans: d.total_retrans,
                },
            );
        }
        // Statuses of flows forgotten by the engine are kept for the API (bounded).
        if out.len() > MAX_FLOWS * 4 {
            let live: Vec<FlowKey> = self.flows.keys().copied().collect();
            out.retain(|k, _| live.contains(k));
        }
    }

    /// Stop: everything held leaves now, in order.
    fn flush_all(&mut self) {
        for f in self.flows.values_mut() {
            while let Some((_, pkt)) = f.packets.pop_front() {
                if self.raw.send(&pkt).is_err() {
                    self.shared
                        .counters
                        .send_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.publish(mgrp_clock::realtime_ns());
        if let Some(w) = self.trace.as_mut() {
            use std::io::Write;
            let _ = w.flush();
        }
    }
}
