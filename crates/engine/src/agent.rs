//! The agent: receives probes of authenticated sessions, timestamps them in the kernel, and
//! reports receive times back to their senders; serves the local Probe API.

use crate::auth::{HelloRefusal, Key, ReplayGuard};
use crate::ctrl::FrameIo;
use crate::pacer::Pacer;
use crate::sock::{enable_rx_timestamps, recv_timestamped};
use crate::train::MAX_TRAIN_LEN;
use crate::Error;
use mgrp_wire::control::{code, Control, RxRecord};
use rand::Rng;
use serde::Serialize;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After a sender says a train is done, wait this long past the last arrival for stragglers.
pub const LINGER: Duration = Duration::from_millis(300);
/// A connection must authenticate within this time.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Address of both the UDP probe socket and the TCP control listener.
    pub listen: SocketAddr,
    pub key: Key,
    /// Where to serve the Probe API (a Unix socket), if anywhere.
    pub api_socket: Option<PathBuf>,
    /// Most concurrent control connections (sessions and handshakes).
    pub max_sessions: usize,
    /// Accept riders and write them into this TUN device (created by the agent).
    pub riders_dev: Option<String>,
}

impl AgentConfig {
    pub fn new(listen: SocketAddr, key: Key) -> Self {
        AgentConfig {
            listen,
            key,
            api_socket: None,
            max_sessions: 64,
            riders_dev: None,
        }
    }
}

macro_rules! counters {
    ($($name:ident: $doc:literal),* $(,)?) => {
        #[derive(Default)]
        pub(crate) struct Counters { $(pub $name: AtomicU64,)* }
        /// What the agent has seen: every rejected input is counted here.
        #[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
        pub struct CounterSnapshot { $(#[doc = $doc] pub $name: u64,)* }
        impl Counters {
            fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

counters! {
    probes_ok: "probes accepted and timestamped",
    probes_malformed: "datagrams that did not decode (truncated, oversized, garbage)",
    probes_unknown_session: "probes naming no live session",
    probes_wrong_source: "probes naming a session from an address that is not the session's peer",
    probes_duplicate: "probes already seen in their train",
    probes_stale: "probes of a train already reported",
    auth_failures: "hellos with a bad MAC or no hello in time",
    auth_replays: "hellos replayed or outside the clock window",
    sessions_opened: "sessions authenticated",
    connections_refused: "connections closed because the agent was full",
    reports_sent: "train reports sent",
    reports_truncated: "reports cut to stay within the bytes received from the peer",
    control_errors: "control connections ended by a malformed message",
    api_requests: "Probe API requests served",
    api_errors: "Probe API requests that failed",
    riders_refused: "riders arriving while this agent accepts none (dropped)",
}

struct RxTrain {
    train: u32,
    seen: Vec<bool>,
    records: Vec<RxRecord>,
    last_rx: Instant,
}

struct SessionState {
    peer_ip: IpAddr,
    train: Option<RxTrain>,
    last_reported: u32,
    udp_bytes_in: u64,
}

pub(crate) struct Shared {
    pub key: Key,
    sessions: Mutex<HashMap<u32, SessionState>>,
    replay: Mutex<ReplayGuard>,
    pub counters: Counters,
    pub stop: AtomicBool,
    connections: AtomicUsize,
    pub pacer: Arc<Pacer>,
    pub riders: Option<crate::riders::RiderReceiver>,
}

pub struct Agent {
    shared: Arc<Shared>,
    local: SocketAddr,
    threads: Vec<JoinHandle<()>>,
    api_socket: Option<PathBuf>,
}

impl Agent {
    pub fn start(cfg: AgentConfig) -> Result<Agent, Error> {
        if cfg.max_sessions == 0 || cfg.max_sessions > 4096 {
            return Err(Error::BadInput("max sessions must be 1..=4096".into()));
        }
        let udp = UdpSocket::bind(cfg.listen)
            .map_err(|e| Error::io(format!("bind UDP probe port {}", cfg.listen), e))?;
        let local = udp
            .local_addr()
            .map_err(|e| Error::io("probe socket address", e))?;
        let tcp = TcpListener::bind(local)
            .map_err(|e| Error::io(format!("bind TCP control port {local}"), e))?;
        enable_rx_timestamps(&udp)?;
        udp.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| Error::io("probe socket timeout", e))?;
        // A deep receive buffer so a burst of probes is not dropped while we are descheduled.
        let _ = nix::sys::socket::setsockopt(&udp, nix::sys::socket::sockopt::RcvBuf, &(4 << 20));
        tcp.set_nonblocking(true)
            .map_err(|e| Error::io("control listener", e))?;
        let riders = match &cfg.riders_dev {
            Some(dev) => Some(crate::riders::RiderReceiver::open(dev, local_ipv4()?)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            riders,
            key: cfg.key.clone(),
            sessions: Mutex::new(HashMap::new()),
            replay: Mutex::new(ReplayGuard::default()),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            pacer: Arc::new(Pacer::spawn()?),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(spawn("mgrp-rx", move || rx_loop(udp, s))?);
        let (s, max) = (shared.clone(), cfg.max_sessions);
        threads.push(spawn("mgrp-ctl", move || accept_loop(tcp, s, max))?);
        if let Some(path) = &cfg.api_socket {
            let listener = crate::api::bind(path)?;
            let s = shared.clone();
            threads.push(spawn("mgrp-api", move || crate::api::serve(listener, s))?);
        }
        Ok(Agent {
            shared,
            local,
            threads,
            api_socket: cfg.api_socket,
        })
    }

    /// The probe/control address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.shared.counters.snapshot()
    }

    /// A reader of the counters that outlives this borrow (for a metrics endpoint).
    /// What riders this agent received, if it accepts them.
    pub fn rider_counters(
        &self,
    ) -> Option<(
        crate::riders::RiderRecvCounters,
        Option<mgrp_riders::reassembly::ReassemblyCounters>,
    )> {
        let r = self.shared.riders.as_ref()?;
        Some((r.counters(), r.reassembly_counters()))
    }

    /// A reader of the rider counters that outlives this borrow.
    #[allow(clippy::type_complexity)]
    pub fn rider_reader(
        &self,
    ) -> impl Fn() -> Option<(
        crate::riders::RiderRecvCounters,
        Option<mgrp_riders::reassembly::ReassemblyCounters>,
    )> + Send
           + Sync
           + 'static {
        let shared = self.shared.clone();
        move || {
            let r = shared.riders.as_ref()?;
            Some((r.counters(), r.reassembly_counters()))
        }
    }

    pub fn counter_reader(&self) -> impl Fn() -> CounterSnapshot + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.counters.snapshot()
    }

    /// Number of live sessions.
    pub fn sessions(&self) -> usize {
        self.shared.sessions.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn stop(mut self) -> CounterSnapshot {
        self.halt();
        self.counters()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(p) = self.api_socket.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.halt();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, Error> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::io(format!("spawn {name}"), e))
}

/// This host's IPv4 addresses (what riders may be addressed to).
fn local_ipv4() -> Result<Vec<std::net::Ipv4Addr>, Error> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| Error::io("list interface addresses", e.into()))?;
    Ok(addrs
        .filter_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
        .collect())
}

/// Is train `a` later than train `b`? (Train ids count up and wrap.)
fn later(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn rx_loop(udp: UdpSocket, s: Arc<Shared>) {
    crate::pacer::avoid_pacer_cpu();
    let mut buf = vec![0u8; mgrp_wire::probe::MAX_PROBE + 1];
    let c = &s.counters;
    while !s.stop.load(Ordering::Relaxed) {
        // Timeouts (to look at `stop`) and transient errors alike: just read again.
        let Ok(dg) = recv_timestamped(&udp, &mut buf) else {
            continue;
        };
        let rx_ns = dg.rx_ns.unwrap_or_else(mgrp_clock::realtime_ns);
        let probe = match mgrp_wire::probe::decode(&buf[..dg.len]) {
            Ok(p) if !dg.truncated && (p.header.train_len as usize) <= MAX_TRAIN_LEN => p,
            _ => {
                bump(&c.probes_malformed);
                continue;
            }
        };
        let h = probe.header;
        let mut sessions = s.sessions.lock().expect("sessions lock");
        let Some(st) = sessions.get_mut(&h.session) else {
            bump(&c.probes_unknown_session);
            continue;
        };
        if dg.from.map(|a| a.ip()) != Some(st.peer_ip) {
            bump(&c.probes_wrong_source);
            continue;
        }
        st.udp_bytes_in += dg.len as u64;
        let peer = st.peer_ip;
        // Train 0 is no train: a rider fragment sent on its own.
        if h.train == 0 {
            drop(sessions);
            match (&s.riders, probe.rider) {
                (Some(rx), Some(r)) => rx.handle(&s.key, peer, &h, &r),
                (None, Some(_)) => bump(&c.riders_refused),
                (_, None) => bump(&c.probes_malformed),
            }
            continue;
        }
        // An earlier train's probe (a straggler or a replay) is not news.
        let current = st.train.as_ref().is_some_and(|t| t.train == h.train);
        if h.train == st.last_reported || (!current && !later(h.train, st.last_reported)) {
            bump(&c.probes_stale);
            continue;
        }
        if st.train.as_ref().is_none_or(|t| t.train != h.train) {
            // A new train replaces an unreported older one (its sender moved on).
            st.train = Some(RxTrain {
                train: h.train,
                seen: vec![false; h.train_len as usize],
                records: Vec::new(),
                last_rx: Instant::now(),
            });
        }
        let t = st.train.as_mut().expect("just set");
        match t.seen.get_mut(h.index as usize) {
            Some(seen) if !*seen => {
                *seen = true;
                t.records.push(RxRecord {
                    index: h.index,
                    size: dg.len as u16,
                    rx_ns,
                    sent_ns: h.sent_ns,
                });
                t.last_rx = Instant::now();
                bump(&c.probes_ok);
                if let Some(r) = probe.rider {
                    drop(sessions);
                    match &s.riders {
                        Some(rx) => rx.handle(&s.key, peer, &h, &r),
                        None => bump(&c.riders_refused),
                    }
                }
            }
            Some(_) => bump(&c.probes_duplicate),
            None => bump(&c.probes_malformed),
        }
    }
}

fn accept_loop(tcp: TcpListener, s: Arc<Shared>, max: usize) {
    // Connection threads inherit this.
    crate::pacer::avoid_pacer_cpu();
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        match tcp.accept() {
            Ok((stream, _)) => {
                if s.connections.load(Ordering::Relaxed) >= max {
                    bump(&s.counters.connections_refused);
                    drop(stream);
                    continue;
                }
                s.connections.fetch_add(1, Ordering::Relaxed);
                let s2 = s.clone();
                if let Ok(h) = spawn("mgrp-conn", move || {
                    serve_connection(stream, &s2);
                    s2.connections.fetch_sub(1, Ordering::Relaxed);
                }) {
                    conns.push(h);
                } else {
                    s.connections.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        conns.retain(|h| !h.is_finished());
    }
    for h in conns {
        let _ = h.join();
    }
}

struct Pending {
    train: u32,
    deadline: Instant,
    ended: Option<(u16, Instant)>,
}

fn serve_connection(stream: TcpStream, s: &Shared) {
    let Ok(peer) = stream.peer_addr() else { return };
    let _ = stream.set_nonblocking(false);
    let mut io = FrameIo::new(stream);
    let c = &s.counters;
    // Nothing goes back until the peer has proven it holds the key.
    let (cnonce, session) = match io.recv(Instant::now() + HELLO_TIMEOUT) {
        Ok(Some(Control::ClientHello {
            nonce,
            unix_ms,
            mac,
            ..
        })) => {
            let now_ms = mgrp_clock::realtime_ns() / 1_000_000;
            match s
                .replay
                .lock()
                .expect("replay lock")
                .check(&s.key, &nonce, unix_ms, &mac, now_ms)
            {
                Ok(()) => {}
                Err(HelloRefusal::BadMac) => return bump(&c.auth_failures),
                Err(_) => return bump(&c.auth_replays),
            }
            let mut sessions = s.sessions.lock().expect("sessions lock");
            let mut id: u32 = rand::rng().random();
            while id == 0 || sessions.contains_key(&id) {
                id = rand::rng().random();
            }
            sessions.insert(
                id,
                SessionState {
                    peer_ip: peer.ip(),
                    train: None,
                    last_reported: 0,
                    udp_bytes_in: 0,
                },
            );
            (nonce, id)
        }
        _ => return bump(&c.auth_failures),
    };
    bump(&c.sessions_opened);
    let mut snonce = [0u8; 16];
    rand::rng().fill(&mut snonce);
    let hello = Control::ServerHello {
        session,
        nonce: snonce,
        mac: s.key.server_mac(&cnonce, &snonce, session),
    };
    if io.send(&hello).is_ok() {
        session_loop(&mut io, s, session);
    }
    s.sessions.lock().expect("sessions lock").remove(&session);
}

fn session_loop(io: &mut FrameIo, s: &Shared, session: u32) {
    let c = &s.counters;
    let mut pending: Option<Pending> = None;
    while !s.stop.load(Ordering::Relaxed) {
        match io.recv(Instant::now() + Duration::from_millis(20)) {
            Ok(None) => {}
            Ok(Some(Control::TrainStart {
                train, timeout_ms, ..
            })) => {
                pending = Some(Pending {
                    train,
                    deadline: Instant::now()
                        + Duration::from_millis(timeout_ms.min(120_000) as u64),
                    ended: None,
                });
            }
            Ok(Some(Control::TrainEnd { train, sent })) => match &mut pending {
                Some(p) if p.train == train => p.ended = Some((sent, Instant::now())),
                _ => {
                    pending = Some(Pending {
                        train,
                        deadline: Instant::now() + LINGER,
                        ended: Some((sent, Instant::now())),
                    })
                }
            },
            Ok(Some(Control::Close)) => return,
            Ok(Some(_)) => {
                bump(&c.control_errors);
                let _ = io.send(&Control::Error {
                    code: code::BAD_MESSAGE,
                    message: "unexpected message".into(),
                });
                return;
            }
            Err(Error::Protocol { why, .. }) if why == "connection closed" => return,
            Err(_) => {
                bump(&c.control_errors);
                return;
            }
        }
        let Some(p) = &pending else { continue };
        let now = Instant::now();
        let (received, last_rx, udp_in) = {
            let sessions = s.sessions.lock().expect("sessions lock");
            let st = &sessions[&session];
            match &st.train {
                Some(t) if t.train == p.train => {
                    (t.records.len(), Some(t.last_rx), st.udp_bytes_in)
                }
                _ => (0, None, st.udp_bytes_in),
            }
        };
        let ready = now >= p.deadline
            || p.ended.is_some_and(|(sent, at)| {
                received >= sent as usize
                    || now.duration_since(last_rx.map_or(at, |l| l.max(at))) >= LINGER
            });
        if !ready {
            continue;
        }
        let train = p.train;
        pending = None;
        let mut records = {
            let mut sessions = s.sessions.lock().expect("sessions lock");
            let st = sessions.get_mut(&session).expect("own session");
            st.last_reported = train;
            match st.train.take() {
                Some(t) if t.train == train => t.records,
                other => {
                    st.train = other;
                    Vec::new()
                }
            }
        };
        // Never send a peer more than it sent us: cut the report to the budget.
        let budget = (udp_in + io.bytes_in).saturating_sub(io.bytes_out);
        let base = FrameIo::encoded_len(&Control::TrainReport {
            train,
            truncated: false,
            received: vec![],
        }) as u64;
        let fits = (budget.saturating_sub(base) / 20) as usize;
        let truncated = records.len() > fits;
        records.truncate(fits);
        if truncated {
            bump(&c.reports_truncated);
        }
        if io
            .send(&Control::TrainReport {
                train,
                truncated,
                received: records,
            })
            .is_err()
        {
            return;
        }
        bump(&c.reports_sent);
    }
}
