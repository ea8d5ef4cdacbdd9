//! The agent daemon: one per host. Assembles the drivers (probe socket, control connections)
//! around the shared protocol state, serves the local Probe API, and keeps the counters.

pub mod api_server;

use crate::auth::{Key, ReplayGuard};
use crate::driver::{control, probe_rx};
use crate::pacer::Pacer;
use crate::proto::handshake::PreAuthGate;
use crate::proto::receiver::Receiver;
use crate::sock::enable_rx_timestamps;
use crate::Error;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub use crate::proto::{HELLO_TIMEOUT, LINGER};

/// Most authenticated sessions an agent may be configured for.
pub const MAX_SESSIONS_LIMIT: usize = 4096;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Address of both the UDP probe socket and the TCP control listener.
    pub listen: SocketAddr,
    pub key: Key,
    /// Where to serve the Probe API (a Unix socket), if anywhere.
    pub api_socket: Option<PathBuf>,
    /// Most concurrent authenticated sessions. Connections still saying hello have their own
    /// bound ([`crate::proto::handshake::MAX_PRE_AUTH`]) and do not count here.
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

mgrp_counters::counters! {
    /// What the agent has seen: every rejected input is counted here.
    pub struct Counters => CounterSnapshot {
        /// Probes accepted and timestamped
        probes_ok,
        /// Datagrams that did not decode (truncated, oversized, garbage)
        probes_malformed,
        /// Probes naming no live session
        probes_unknown_session,
        /// Probes naming a session from an address that is not the session's peer
        probes_wrong_source,
        /// Probes already seen in their train
        probes_duplicate,
        /// Probes of a train already reported
        probes_stale,
        /// Connections that sent no valid hello in time (bad MAC, malformed or oversized first frame, silence)
        auth_failures,
        /// Hellos replayed or outside the clock window
        auth_replays,
        /// Sessions authenticated
        sessions_opened,
        /// Authenticated connections refused because the agent held its maximum of sessions
        connections_refused,
        /// Connections refused because too many from their address were still saying hello
        pre_auth_refused,
        /// Connections still saying hello closed to make room for a newcomer
        pre_auth_evicted,
        /// Train reports sent
        reports_sent,
        /// Reports cut to stay within the bytes received from the peer
        reports_truncated,
        /// Control connections ended by a malformed message
        control_errors,
        /// Probe API requests served
        api_requests,
        /// Probe API requests that failed
        api_errors,
        /// Riders arriving while this agent accepts none (dropped)
        riders_refused,
        /// Load flows (Tneck's TCP flow) sunk
        loads,
        /// Bytes of load flows read and discarded
        load_bytes,
        /// Flow captures run for peers (two-sided Wren)
        captures,
        /// Capture requests refused (not this host's address, too many at once, no capture privileges)
        captures_refused,
        /// Captures that failed while running
        capture_errors,
        /// Arrival records sent to peers
        capture_records,
        /// Arrivals not sent: over the request's record limit, or lost by the capture ring
        capture_dropped,
        /// Relays run for a coordinator (this agent's trains and flows toward a third agent)
        relays,
        /// Relay requests refused (too many at once, the third agent unreachable or refusing)
        relays_refused,
        /// Relay calls answered
        relay_calls,
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// State the drivers share. Each lock is held for one protocol step, never across I/O.
pub(crate) struct Shared {
    pub key: Key,
    pub receiver: Mutex<Receiver>,
    pub replay: Mutex<ReplayGuard>,
    pub gate: Mutex<PreAuthGate<TcpStream>>,
    pub counters: Counters,
    pub stop: AtomicBool,
    pub pacer: Arc<Pacer>,
    pub riders: Option<crate::riders::RiderReceiver>,
    /// Flow captures running for peers (bounded by [`crate::driver::capture::MAX_CAPTURES`]).
    pub captures_active: std::sync::atomic::AtomicUsize,
    /// Relays running for coordinators (bounded by [`crate::driver::relay::MAX_RELAYS`]).
    pub relays_active: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// The session table; a driver thread that panicked holding it left it consistent (every
    /// step is a single method call), so a poisoned lock is used as is.
    pub fn receiver(&self) -> MutexGuard<'_, Receiver> {
        self.receiver.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn replay(&self) -> MutexGuard<'_, ReplayGuard> {
        self.replay.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn gate(&self) -> MutexGuard<'_, PreAuthGate<TcpStream>> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Agent {
    shared: Arc<Shared>,
    local: SocketAddr,
    threads: Vec<JoinHandle<()>>,
    api_socket: Option<PathBuf>,
}

impl Agent {
    pub fn start(cfg: AgentConfig) -> Result<Agent, Error> {
        if cfg.max_sessions == 0 || cfg.max_sessions > MAX_SESSIONS_LIMIT {
            return Err(Error::BadInput(format!(
                "max sessions must be 1..={MAX_SESSIONS_LIMIT}"
            )));
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
            receiver: Mutex::new(Receiver::new(cfg.max_sessions)),
            replay: Mutex::new(ReplayGuard::default()),
            gate: Mutex::new(PreAuthGate::default()),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            pacer: Arc::new(Pacer::spawn()?),
            captures_active: Default::default(),
            relays_active: Default::default(),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(spawn("mgrp-rx", move || probe_rx::run(udp, s))?);
        let s = shared.clone();
        threads.push(spawn("mgrp-ctl", move || control::accept_loop(tcp, s))?);
        if let Some(path) = &cfg.api_socket {
            let listener = api_server::bind(path)?;
            let s = shared.clone();
            threads.push(spawn("mgrp-api", move || api_server::serve(listener, s))?);
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

    /// A reader of the counters that outlives this borrow (for a metrics endpoint).
    pub fn counter_reader(&self) -> impl Fn() -> CounterSnapshot + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.counters.snapshot()
    }

    /// Number of live (authenticated) sessions.
    pub fn sessions(&self) -> usize {
        self.shared.receiver().len()
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

pub(crate) fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, Error> {
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
