//! Cross-traffic generators: UDP senders that follow a [`Schedule`](crate::pattern::Schedule)
//! to the microsecond, greedy TCP flows, web-like short TCP flows, and the sinks that receive
//! them in `xrcv`.

use crate::clock::cpu::avoid_pacer_cpu;
use crate::clock::{now_ns, sleep_until, tighten_timer_slack, wait_until};
use crate::netns::spawn_in;
use crate::pattern::{CrossPattern, WebArrivals, ETH_HLEN, WEB_HEADER_BYTES};
use crate::topology::{Role, Testbed};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// First port the generators use on xrcv; pattern i uses this + i.
pub const BASE_PORT: u16 = 5200;
/// Most connections the web sink holds open at once; more wait in the listen backlog.
const MAX_SINK_CONNS: usize = 1024;
/// Longest a web flow may take before it is abandoned (and counted as failed).
const WEB_FLOW_DEADLINE: Duration = Duration::from_secs(60);
/// How often a bulk TCP cross flow's retransmissions are read.
pub const RETRANS_EVERY: Duration = Duration::from_millis(50);
/// Most completion times a web generator keeps (an hour at ~30 flows/s); later flows are only
/// counted, so a long run cannot grow the report without bound.
pub const MAX_WEB_FLOW_TIMES: usize = 100_000;

/// The [`GenOptions::max_late`] for runs that judge an estimator: what a source owes after 1 ms
/// is under one frame at 10 Mbit/s and four at 50, a queue of at most a quarter of a
/// millisecond on the 20 and 100 Mbit/s links the tests use.
pub const DEFAULT_MAX_LATE: Duration = Duration::from_millis(1);

#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Spin this long before each UDP departure instead of sleeping, to absorb timer lateness.
    pub spin: Duration,
    /// Hard bound on how long the generator runs, whatever else happens.
    pub max_duration: Duration,
    /// A UDP departure later than this against its schedule is skipped and counted, not sent:
    /// a generator held off the CPU (preempted, or a vCPU the host stole) would otherwise
    /// send everything it owes back to back when it runs again, a burst its pattern does not
    /// have (22 ms behind is 18 MTU frames at 10 Mbit/s: a queue of 11 ms on a 20 Mbit/s
    /// link). The truth is read at the bottleneck, so it counts what was really sent; the
    /// pattern's mean rate is then short by what was skipped (`GenReport::skipped_late`).
    /// `None` (the default) sends every departure, however late, and keeps the mean rate.
    /// Judging an estimator, skip ([`DEFAULT_MAX_LATE`]): on an idle 2-core VM the source lagged
    /// 1–14 ms about 200 times in 25 s (`testbed run --cross cbr:10mbit --estimate`), each
    /// catch-up a queue the estimator was blamed for reading.
    pub max_late: Option<Duration>,
    /// Run UDP sources under `SCHED_FIFO` (priority [`GEN_RT_PRIORITY`]) where the process may:
    /// under the normal scheduler a source that shares its CPU with the receiving agent, the
    /// truth sampler and the test's own threads is held off for whole time slices (lags of
    /// 12–20 ms on an idle host, measured with `testbed run --estimate`). Off by default: in
    /// alternating 100 Mbit/s grids (60 `auto` runs each, 2026-11-27) real-time sources made the
    /// estimates worse, median error 26.7% against 20.3% (p90 47.4% / 32.7%); a source that
    /// spins under `SCHED_FIFO` also keeps `ksoftirqd` (the shaper's deferred work) off its CPU.
    /// `mgrp bench accuracy --realtime-cross` measures it again.
    pub realtime: bool,
}

/// Below the agent's pacer and receiver (50) and the delay line (60): cross traffic must not
/// delay the measurement's own timing, only the rest of the host's work.
pub const GEN_RT_PRIORITY: i32 = 20;

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            spin: Duration::from_micros(50),
            max_duration: Duration::from_secs(3600),
            max_late: None,
            realtime: false,
        }
    }
}

/// What one generator did, from its own side (the ground truth is read at the bottleneck).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GenReport {
    pub pattern: String,
    pub configured_bps: Option<f64>,
    pub duration_s: f64,
    /// UDP: packets sent; TCP: write calls.
    pub sent_packets: u64,
    /// UDP: Ethernet frame bytes sent; TCP: payload bytes written (web: without each flow's
    /// 8-byte length).
    pub sent_bytes: u64,
    pub send_errors: u64,
    /// Largest lateness of a UDP departure against its schedule, microseconds.
    pub max_lag_us: f64,
    /// UDP departures skipped because they were later than [`GenOptions::max_late`].
    #[serde(default)]
    pub skipped_late: u64,
    pub received_packets: u64,
    /// Payload bytes the sink read (web: without the lengths).
    pub received_bytes: u64,
    /// Web: flows that arrived and got a connection slot.
    #[serde(default)]
    pub flows_started: u64,
    /// Web: flows whose every byte reached the sink (it closed first, as it does when done).
    #[serde(default)]
    pub flows_completed: u64,
    /// Web: arrivals dropped because `max_flows` were already running (never queued).
    #[serde(default)]
    pub flows_skipped: u64,
    /// Web: flows that could not connect or send, ran past their deadline, or were cut by stop.
    #[serde(default)]
    pub flows_failed: u64,
    /// Web: each completed flow's start and completion time, in completion order (the first
    /// [`MAX_WEB_FLOW_TIMES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow_times: Vec<WebFlowTime>,
    /// Web: completed flows whose time was not kept (beyond [`MAX_WEB_FLOW_TIMES`]).
    #[serde(default)]
    pub flow_times_dropped: u64,
    /// TCP and web: segments the cross flows retransmitted (`TCP_INFO`'s `tcpi_total_retrans`;
    /// bulk flows read every [`RETRANS_EVERY`], completed web flows as each ends). Where probes overflow
    /// a queue a TCP flow holds full, its losses show here.
    #[serde(default)]
    pub tcp_retransmits: u64,
}

/// One completed web flow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WebFlowTime {
    /// When its worker began it (connect), seconds after the generator's start.
    pub start_s: f64,
    /// Payload bytes (without the 8-byte length).
    pub bytes: u64,
    /// From the start until the sink closed it, having every byte.
    pub secs: f64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    sent_packets: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    max_lag_ns: AtomicU64,
    skipped_late: AtomicU64,
    sink: Arc<SinkCounters>,
    flows_started: AtomicU64,
    flows_completed: AtomicU64,
    flows_skipped: AtomicU64,
    flows_failed: AtomicU64,
    /// Web flows handed to workers and not yet finished.
    flows_active: AtomicU64,
    /// Completed web flows' times (at most [`MAX_WEB_FLOW_TIMES`]).
    flow_times: Mutex<Vec<WebFlowTime>>,
    flow_times_dropped: AtomicU64,
    /// Retransmitted segments of the TCP cross flows so far ([`GenReport::tcp_retransmits`]).
    tcp_retransmits: AtomicU64,
}

impl Shared {
    /// Add what a TCP socket retransmitted since `*seen` (its total when last read).
    fn count_retransmits(&self, conn: &TcpStream, seen: &mut u32) {
        if let Ok(i) = mgrp_sockopt::tcp_info(conn.as_raw_fd()) {
            let total = i.tcpi_total_retrans;
            self.tcp_retransmits
                .fetch_add(u64::from(total.saturating_sub(*seen)), Ordering::Relaxed);
            *seen = (*seen).max(total);
        }
    }

    /// Keep a completed web flow's time, or count it when the record is full.
    fn record_flow(&self, t: WebFlowTime) {
        let kept = match self.flow_times.lock() {
            Ok(mut v) if v.len() < MAX_WEB_FLOW_TIMES => {
                v.push(t);
                true
            }
            _ => false,
        };
        if !kept {
            self.flow_times_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a sink received, and its stop flag.
#[derive(Default)]
pub struct SinkCounters {
    pub stop: AtomicBool,
    pub received_packets: AtomicU64,
    pub received_bytes: AtomicU64,
}

/// Where a generator sends from and to.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Namespace the senders run in.
    pub src_ns: String,
    /// Namespace the sink runs in.
    pub dst_ns: String,
    /// Address and port the sink binds (an address of `dst_ns`).
    pub dst: SocketAddr,
}

/// A running generator. Dropping it stops it.
pub struct CrossTraffic {
    pattern: CrossPattern,
    shared: Arc<Shared>,
    start_ns: u64,
    senders: Vec<JoinHandle<Result<(), Error>>>,
    sinks: Vec<JoinHandle<Result<(), Error>>>,
}

impl CrossTraffic {
    /// Start `pattern` from xsnd to xrcv on `port`.
    pub fn start(
        tb: &Testbed,
        pattern: &CrossPattern,
        port: u16,
        opts: &GenOptions,
    ) -> Result<CrossTraffic, Error> {
        let ends = Endpoints {
            src_ns: tb.ns(Role::Xsnd),
            dst_ns: tb.ns(Role::Xrcv),
            dst: format!("{}:{port}", Role::Xrcv.addr())
                .parse()
                .expect("valid address"),
        };
        CrossTraffic::start_between(&ends, pattern, opts)
    }

    /// Start `pattern` between any two namespaces: the sink binds `ends.dst` in `ends.dst_ns`,
    /// the senders run in `ends.src_ns`.
    pub fn start_between(
        ends: &Endpoints,
        pattern: &CrossPattern,
        opts: &GenOptions,
    ) -> Result<CrossTraffic, Error> {
        let shared = Arc::new(Shared::default());
        let dst = ends.dst;
        let mut ct = CrossTraffic {
            pattern: pattern.clone(),
            shared: shared.clone(),
            start_ns: 0,
            senders: vec![],
            sinks: vec![],
        };
        let (xsnd, xrcv) = (&ends.src_ns, &ends.dst_ns);
        let max_ns = opts.max_duration.as_nanos() as u64;
        match pattern {
            CrossPattern::TcpBulk { flows, cc } => {
                let (tx, rx) = std::sync::mpsc::channel();
                let (s, n) = (shared.sink.clone(), *flows);
                ct.sinks
                    .push(spawn_in(xrcv, "tcp-sink", move || tcp_sink(dst, n, s, tx))?);
                ready(rx)?;
                ct.start_ns = now_ns();
                for i in 0..*flows {
                    let (s, cc, start) = (shared.clone(), cc.clone(), ct.start_ns);
                    ct.senders
                        .push(spawn_in(xsnd, &format!("tcp-src{i}"), move || {
                            tcp_source(dst, cc.as_deref(), s, start + max_ns)
                        })?);
                }
            }
            CrossPattern::Web { max_flows, .. } => {
                let arrivals = pattern.web_arrivals().expect("a web pattern has arrivals");
                let (tx, rx) = std::sync::mpsc::channel();
                let s = shared.sink.clone();
                ct.sinks
                    .push(spawn_in(xrcv, "web-sink", move || web_sink(dst, s, tx))?);
                ready(rx)?;
                ct.start_ns = now_ns();
                let end_ns = ct.start_ns + max_ns;
                // A fixed pool of max_flows workers; the dispatcher only hands a flow over when
                // one is free, so the queue never holds more than the pool can run.
                let (jobs_tx, jobs_rx) = std::sync::mpsc::sync_channel(*max_flows as usize);
                let jobs_rx = Arc::new(Mutex::new(jobs_rx));
                for i in 0..*max_flows {
                    let (s, jobs, start) = (shared.clone(), jobs_rx.clone(), ct.start_ns);
                    ct.senders
                        .push(spawn_in(xsnd, &format!("web-w{i}"), move || {
                            web_worker(dst, &jobs, &s, start, end_ns)
                        })?);
                }
                let (s, start, limit) = (shared.clone(), ct.start_ns, *max_flows as u64);
                ct.senders.push(spawn_in(xsnd, "web-src", move || {
                    web_dispatch(arrivals, jobs_tx, &s, start, max_ns, limit)
                })?);
            }
            udp => {
                let schedule = udp.schedule().expect("UDP patterns have schedules");
                let (tx, rx) = std::sync::mpsc::channel();
                let s = shared.sink.clone();
                ct.sinks
                    .push(spawn_in(xrcv, "udp-sink", move || udp_sink(dst, s, tx))?);
                ready(rx)?;
                ct.start_ns = now_ns();
                let (s, spin, start) = (shared.clone(), opts.spin.as_nanos() as u64, ct.start_ns);
                let late = opts.max_late.map(|d| d.as_nanos() as u64);
                let rt = opts.realtime;
                ct.senders.push(spawn_in(xsnd, "udp-src", move || {
                    if rt {
                        mgrp_clock::cpu::try_realtime(GEN_RT_PRIORITY);
                    }
                    udp_source(dst, schedule, s, start, max_ns, spin, late)
                })?);
            }
        }
        Ok(ct)
    }

    /// [`start`](Self::start) when there is a pattern (default options, [`BASE_PORT`]); `None`
    /// for an idle path.
    pub fn start_if(tb: &Testbed, pattern: Option<&CrossPattern>) -> Result<Option<Self>, Error> {
        pattern
            .map(|p| CrossTraffic::start(tb, p, BASE_PORT, &GenOptions::default()))
            .transpose()
    }

    /// CLOCK_MONOTONIC ns at which the pattern's time zero was.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    pub fn pattern(&self) -> &CrossPattern {
        &self.pattern
    }

    /// Stop the senders, give the sinks a moment to drain, and report.
    pub fn stop(mut self) -> Result<GenReport, Error> {
        self.halt()
    }

    fn halt(&mut self) -> Result<GenReport, Error> {
        let s = &self.shared;
        s.stop.store(true, Ordering::Relaxed);
        let mut first_err = None;
        for h in self.senders.drain(..) {
            match h.join() {
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => {
                    first_err =
                        first_err.or(Some(Error::Generator("sender thread panicked".into())))
                }
                Ok(Ok(())) => {}
            }
        }
        let end = now_ns();
        std::thread::sleep(Duration::from_millis(200));
        s.sink.stop.store(true, Ordering::Relaxed);
        for h in self.sinks.drain(..) {
            if let Ok(Err(e)) = h.join() {
                first_err = first_err.or(Some(e));
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(GenReport {
            pattern: self.pattern.to_string(),
            configured_bps: self.pattern.mean_rate_bps(),
            duration_s: end.saturating_sub(self.start_ns) as f64 / 1e9,
            sent_packets: s.sent_packets.load(Ordering::Relaxed),
            sent_bytes: s.sent_bytes.load(Ordering::Relaxed),
            send_errors: s.send_errors.load(Ordering::Relaxed),
            max_lag_us: s.max_lag_ns.load(Ordering::Relaxed) as f64 / 1e3,
            skipped_late: s.skipped_late.load(Ordering::Relaxed),
            received_packets: s.sink.received_packets.load(Ordering::Relaxed),
            received_bytes: s.sink.received_bytes.load(Ordering::Relaxed),
            flows_started: s.flows_started.load(Ordering::Relaxed),
            flows_completed: s.flows_completed.load(Ordering::Relaxed),
            flows_skipped: s.flows_skipped.load(Ordering::Relaxed),
            flows_failed: s.flows_failed.load(Ordering::Relaxed),
            flow_times: s.flow_times.lock().map(|v| v.clone()).unwrap_or_default(),
            flow_times_dropped: s.flow_times_dropped.load(Ordering::Relaxed),
            tcp_retransmits: s.tcp_retransmits.load(Ordering::Relaxed),
        })
    }

    /// Segments the TCP cross flows retransmitted so far (read while running: a study takes
    /// the difference over a measurement).
    pub fn tcp_retransmits(&self) -> u64 {
        self.shared.tcp_retransmits.load(Ordering::Relaxed)
    }
}

impl Drop for CrossTraffic {
    fn drop(&mut self) {
        if !self.senders.is_empty() || !self.sinks.is_empty() {
            let _ = self.halt();
        }
    }
}

fn ready(rx: std::sync::mpsc::Receiver<Result<(), String>>) -> Result<(), Error> {
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Generator(e)),
        Err(_) => Err(Error::Generator("sink did not start".into())),
    }
}

/// Errors that only mean "nothing yet": a read timeout or an interrupted call.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn gen_err(what: &str, e: std::io::Error) -> Error {
    Error::Generator(format!("{what}: {e}"))
}

fn udp_sink(
    addr: SocketAddr,
    s: Arc<SinkCounters>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<(), Error> {
    avoid_pacer_cpu();
    let sock = match UdpSocket::bind(addr) {
        Ok(sock) => sock,
        Err(e) => {
            let _ = ready.send(Err(format!("bind UDP sink {addr}: {e}")));
            return Err(gen_err("bind UDP sink", e));
        }
    };
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| gen_err("sink timeout", e))?;
    let _ = ready.send(Ok(()));
    let mut buf = vec![0u8; 2048];
    while !s.stop.load(Ordering::Relaxed) {
        match sock.recv(&mut buf) {
            Ok(n) => {
                s.received_packets.fetch_add(1, Ordering::Relaxed);
                s.received_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if transient(&e) => {}
            Err(e) => return Err(gen_err("UDP sink", e)),
        }
    }
    Ok(())
}

fn udp_source(
    dst: SocketAddr,
    schedule: crate::pattern::Schedule,
    s: Arc<Shared>,
    start_ns: u64,
    max_ns: u64,
    spin_ns: u64,
    max_late_ns: Option<u64>,
) -> Result<(), Error> {
    tighten_timer_slack();
    // Off the pacer's CPU: there a train's real-time spin would pause the cross traffic for
    // exactly the train's length.
    avoid_pacer_cpu();
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| gen_err("bind UDP source", e))?;
    sock.connect(dst)
        .map_err(|e| gen_err("connect UDP source", e))?;
    let size = schedule.size();
    let frame = size as u64 + ETH_HLEN;
    let mut payload = vec![0u8; size as usize - 28];
    for (seq, off) in schedule.enumerate() {
        if off > max_ns || s.stop.load(Ordering::Relaxed) {
            break;
        }
        let due = start_ns + off;
        // Long waits (off-periods, slow steps) go in slices so a stop is seen promptly.
        while due > now_ns() + spin_ns + 50_000_000 {
            sleep_until(now_ns() + 50_000_000);
            if s.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
        wait_until(due, spin_ns);
        let lag = now_ns().saturating_sub(due);
        s.max_lag_ns.fetch_max(lag, Ordering::Relaxed);
        if max_late_ns.is_some_and(|m| lag > m) {
            s.skipped_late.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        payload[..8].copy_from_slice(&(seq as u64).to_be_bytes());
        payload[8..16].copy_from_slice(&due.to_be_bytes());
        match sock.send(&payload) {
            Ok(_) => {
                s.sent_packets.fetch_add(1, Ordering::Relaxed);
                s.sent_bytes.fetch_add(frame, Ordering::Relaxed);
            }
            // ENOBUFS and stray ICMP errors are counted, not fatal: cross traffic goes on.
            Err(_) => {
                s.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Accept up to `flows` TCP connections on `addr` and read them until `s.stop`.
pub(crate) fn tcp_sink(
    addr: SocketAddr,
    flows: u32,
    s: Arc<SinkCounters>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<(), Error> {
    avoid_pacer_cpu();
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(format!("bind TCP sink {addr}: {e}")));
            return Err(gen_err("bind TCP sink", e));
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| gen_err("TCP sink", e))?;
    let _ = ready.send(Ok(()));
    let mut readers = Vec::new();
    let mut accepted = 0;
    while !s.stop.load(Ordering::Relaxed) {
        if accepted < flows {
            match listener.accept() {
                Ok((conn, _)) => {
                    accepted += 1;
                    let s = s.clone();
                    readers.push(std::thread::spawn(move || tcp_read(conn, s)));
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(gen_err("TCP accept", e)),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for r in readers {
        let _ = r.join();
    }
    Ok(())
}

fn tcp_read(mut conn: TcpStream, s: Arc<SinkCounters>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 256 * 1024];
    while !s.stop.load(Ordering::Relaxed) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                s.received_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if transient(&e) => {}
            Err(_) => break,
        }
    }
}

fn tcp_source(dst: SocketAddr, cc: Option<&str>, s: Arc<Shared>, end_ns: u64) -> Result<(), Error> {
    avoid_pacer_cpu();
    let mut conn = TcpStream::connect_timeout(&dst, Duration::from_secs(3))
        .map_err(|e| gen_err("TCP connect", e))?;
    if let Some(cc) = cc {
        set_congestion_control(conn.as_raw_fd(), cc)?;
    }
    conn.set_write_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| gen_err("TCP source", e))?;
    let chunk = vec![0x5au8; 64 * 1024];
    let (mut seen, mut read_at) = (0u32, now_ns());
    while !s.stop.load(Ordering::Relaxed) && now_ns() < end_ns {
        if now_ns() >= read_at + RETRANS_EVERY.as_nanos() as u64 {
            s.count_retransmits(&conn, &mut seen);
            read_at = now_ns();
        }
        match conn.write(&chunk) {
            Ok(n) => {
                s.sent_bytes.fetch_add(n as u64, Ordering::Relaxed);
                s.sent_packets.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if transient(&e) => {}
            Err(e) => return Err(gen_err("TCP send", e)),
        }
    }
    s.count_retransmits(&conn, &mut seen);
    let _ = conn.shutdown(std::net::Shutdown::Both);
    Ok(())
}

/// Follow the web arrivals: each flow goes to a free worker, or is counted as skipped when all
/// `max_flows` are busy.
fn web_dispatch(
    arrivals: WebArrivals,
    jobs: SyncSender<u64>,
    s: &Shared,
    start_ns: u64,
    max_ns: u64,
    max_flows: u64,
) -> Result<(), Error> {
    tighten_timer_slack();
    for (off, size) in arrivals {
        if off > max_ns || s.stop.load(Ordering::Relaxed) {
            break;
        }
        let due = start_ns + off;
        while due > now_ns() + 50_000_000 {
            sleep_until(now_ns() + 50_000_000);
            if s.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
        sleep_until(due);
        if s.flows_active.load(Ordering::Relaxed) >= max_flows {
            s.flows_skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        s.flows_active.fetch_add(1, Ordering::Relaxed);
        match jobs.try_send(size) {
            Ok(()) => {
                s.flows_started.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) => {
                s.flows_active.fetch_sub(1, Ordering::Relaxed);
                s.flows_skipped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => break,
        }
    }
    // Dropping `jobs` lets idle workers end.
    Ok(())
}

/// Run flows from the queue until it closes, `stop`, or `end_ns`; each completed flow's time
/// is kept relative to the generator's `start_ns`.
fn web_worker(
    dst: SocketAddr,
    jobs: &Mutex<Receiver<u64>>,
    s: &Shared,
    start_ns: u64,
    end_ns: u64,
) -> Result<(), Error> {
    let body = vec![0x5au8; 64 * 1024];
    let mut head = body.clone();
    while !s.stop.load(Ordering::Relaxed) && now_ns() < end_ns {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv_timeout(Duration::from_millis(50)),
            Err(_) => return Err(Error::Generator("web job queue poisoned".into())),
        };
        let size = match job {
            Ok(size) => size,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        head[..8].copy_from_slice(&size.to_be_bytes());
        let begun = now_ns();
        let deadline = (begun + WEB_FLOW_DEADLINE.as_nanos() as u64).min(end_ns);
        match web_flow(dst, size, &head, &body, s, deadline) {
            Ok(()) => {
                s.flows_completed.fetch_add(1, Ordering::Relaxed);
                s.record_flow(WebFlowTime {
                    start_s: begun.saturating_sub(start_ns) as f64 / 1e9,
                    bytes: size,
                    secs: now_ns().saturating_sub(begun) as f64 / 1e9,
                });
            }
            Err(_) => {
                s.flows_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        s.flows_active.fetch_sub(1, Ordering::Relaxed);
    }
    Ok(())
}

/// One web flow: connect, send the length and `size` bytes, then wait for the sink to close
/// (it does once it has them all), so completion means delivery.
fn web_flow(
    dst: SocketAddr,
    size: u64,
    head: &[u8],
    body: &[u8],
    s: &Shared,
    deadline_ns: u64,
) -> std::io::Result<()> {
    let gone = || s.stop.load(Ordering::Relaxed) || now_ns() >= deadline_ns;
    let abandoned = || std::io::Error::new(ErrorKind::TimedOut, "web flow stopped or timed out");
    let mut conn = TcpStream::connect_timeout(&dst, Duration::from_secs(3))?;
    conn.set_write_timeout(Some(Duration::from_millis(50)))?;
    conn.set_read_timeout(Some(Duration::from_millis(50)))?;
    let total = WEB_HEADER_BYTES + size;
    let mut pos = 0u64;
    while pos < total {
        if gone() {
            return Err(abandoned());
        }
        // The length rides in the first chunk with the payload, not in a segment of its own.
        let chunk = if pos < head.len() as u64 {
            &head[pos as usize..head.len().min(total as usize)]
        } else {
            &body[..body.len().min((total - pos) as usize)]
        };
        match conn.write(chunk) {
            Ok(n) => {
                let header_part = WEB_HEADER_BYTES.saturating_sub(pos).min(n as u64);
                s.sent_bytes
                    .fetch_add(n as u64 - header_part, Ordering::Relaxed);
                s.sent_packets.fetch_add(1, Ordering::Relaxed);
                pos += n as u64;
            }
            Err(e) if transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let mut buf = [0u8; 64];
    loop {
        if gone() {
            return Err(abandoned());
        }
        match conn.read(&mut buf) {
            Ok(0) => {
                s.count_retransmits(&conn, &mut 0);
                return Ok(());
            }
            Ok(_) => {}
            Err(e) if transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// One connection at the web sink: its 8-byte length as it arrives, then the payload.
struct WebConn {
    sock: TcpStream,
    hdr: [u8; 8],
    hdr_got: usize,
    got: u64,
}

impl WebConn {
    /// Take `data`; true once the flow is complete.
    fn take(&mut self, mut data: &[u8], s: &SinkCounters) -> bool {
        if self.hdr_got < 8 {
            let n = (8 - self.hdr_got).min(data.len());
            self.hdr[self.hdr_got..self.hdr_got + n].copy_from_slice(&data[..n]);
            self.hdr_got += n;
            data = &data[n..];
        }
        self.got += data.len() as u64;
        s.received_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.hdr_got == 8 && self.got >= u64::from_be_bytes(self.hdr)
    }
}

/// Accept any number of web flows over time (at most `MAX_SINK_CONNS` open at once) and read
/// them all from one thread with poll(2); close each as soon as it has its bytes.
fn web_sink(
    addr: SocketAddr,
    s: Arc<SinkCounters>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<(), Error> {
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(format!("bind web sink {addr}: {e}")));
            return Err(gen_err("bind web sink", e));
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| gen_err("web sink", e))?;
    let _ = ready.send(Ok(()));
    let mut conns: Vec<WebConn> = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        fds.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            // A full house stops accepting; the rest wait in the backlog.
            events: if conns.len() < MAX_SINK_CONNS {
                libc::POLLIN
            } else {
                0
            },
            revents: 0,
        });
        fds.extend(conns.iter().map(|c| libc::pollfd {
            fd: c.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: fds is a valid array of fds.len() pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        if n <= 0 {
            continue;
        }
        let mut done = vec![false; conns.len()];
        for (i, c) in conns.iter_mut().enumerate() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            // A bounded number of reads per wake-up, so one fast flow cannot starve the rest.
            for _ in 0..16 {
                match c.sock.read(&mut buf) {
                    Ok(0) => {
                        done[i] = true;
                        break;
                    }
                    Ok(n) => {
                        if c.take(&buf[..n], &s) {
                            done[i] = true;
                            break;
                        }
                    }
                    Err(e) if transient(&e) => break,
                    Err(_) => {
                        done[i] = true;
                        break;
                    }
                }
            }
        }
        // Closing a finished flow is what tells its sender it has been delivered.
        let mut i = 0;
        conns.retain(|_| {
            i += 1;
            !done[i - 1]
        });
        if fds[0].revents != 0 {
            for _ in 0..64 {
                if conns.len() >= MAX_SINK_CONNS {
                    break;
                }
                match listener.accept() {
                    Ok((sock, _)) => {
                        if sock.set_nonblocking(true).is_ok() {
                            conns.push(WebConn {
                                sock,
                                hdr: [0; 8],
                                hdr_got: 0,
                                got: 0,
                            });
                        }
                    }
                    // Nothing more to accept, or one connection that failed on the way
                    // (ECONNABORTED): neither stops the sink.
                    Err(_) => break,
                }
            }
        }
    }
    Ok(())
}

/// Choose the socket's TCP congestion control (`cubic`, `bbr`, ...).
pub(crate) fn set_congestion_control(fd: std::os::fd::RawFd, cc: &str) -> Result<(), Error> {
    mgrp_sockopt::set_congestion_control(fd, cc).map_err(|e| {
        Error::Generator(format!(
            "congestion control {cc:?} is not available here ({e}); see /proc/sys/net/ipv4/tcp_available_congestion_control"
        ))
    })
}
