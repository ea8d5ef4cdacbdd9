//! The flow under test: one bulk TCP connection with a congestion control named by string, its
//! sink, and what the sender's socket says at the end (`TCP_INFO`).

use crate::{Error, Result};
use mgrp_testbed::generator::Endpoints;
use mgrp_testbed::netns::spawn_in;
use serde::Serialize;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// How long the sink waits for its one connection, and the sender for its connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Socket reads and writes wake this often to see the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// The congestion controls the kernel offers, read inside namespace `ns` (where the flow's
/// sender runs).
pub fn available_in(ns: &str) -> Result<Vec<String>> {
    let h = spawn_in(ns, "cc-list", || {
        std::fs::read_to_string(AVAILABLE)
            .map_err(|e| mgrp_testbed::Error::Setup(format!("read {AVAILABLE}: {e}")))
    })?;
    let text = h
        .join()
        .map_err(|_| Error::Worker("cc-list thread panicked".into()))??;
    Ok(text.split_whitespace().map(str::to_string).collect())
}

/// `Ok` if `cc` is offered in `ns`; [`Error::Unavailable`] with the list otherwise.
pub fn check_available(ns: &str, cc: &str) -> Result<()> {
    let list = available_in(ns)?;
    if list.iter().any(|c| c == cc) {
        return Ok(());
    }
    Err(Error::Unavailable(format!(
        "{cc} is not in tcp_available_congestion_control in {ns} ({})",
        list.join(" ")
    )))
}

/// TCP settings of a host namespace the bench sends from or to (its own sysctls, gone with it):
/// no metrics cached per destination, so a run does not start from what the previous run's
/// flow (another CC) left; with `large_buffers`, buffer limits that fit the window of a large
/// BDP plus its queue.
pub fn tcp_sysctls(ns: &str, large_buffers: bool) -> Result<()> {
    let max = 64 << 20;
    let mut s = String::from("sysctl -qw net.ipv4.tcp_no_metrics_save=1\n");
    if large_buffers {
        s.push_str(&format!(
            "sysctl -qw net.ipv4.tcp_rmem='4096 131072 {max}' net.ipv4.tcp_wmem='4096 16384 {max}'\n"
        ));
    }
    mgrp_testbed::netns::sh_in(ns, &s)?;
    Ok(())
}

/// What the sender's socket reported just before it closed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TcpStats {
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life.
    pub retrans: u32,
    /// `tcpi_data_segs_out`: data segments sent, retransmissions included.
    pub data_segs_out: u32,
    /// `tcpi_min_rtt`, milliseconds: the path's RTT as the flow saw it.
    pub min_rtt_ms: f64,
    /// The congestion control the socket was on at the end (a BPF one may have been replaced).
    pub cc_at_end: String,
}

/// A running bulk flow. Dropping it stops it.
pub struct BulkFlow {
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    sender: Option<JoinHandle<Result<TcpStats, mgrp_testbed::Error>>>,
    sink: Option<JoinHandle<Result<(), mgrp_testbed::Error>>>,
    start_ns: u64,
}

/// What a finished flow did.
#[derive(Debug, Clone)]
pub struct FlowEnd {
    pub tcp: TcpStats,
    /// Payload bytes the sink read.
    pub received_bytes: u64,
    /// From the connection's start to the stop.
    pub secs: f64,
}

impl BulkFlow {
    /// Connect from `ends.src_ns` to a sink at `ends.dst` and send as fast as TCP takes it on
    /// congestion control `cc`, for at most `max`. Returns once the connection is up.
    pub fn start(ends: &Endpoints, cc: &str, max: Duration) -> Result<BulkFlow> {
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let (tx, rx) = channel();
        let (dst, s, r) = (ends.dst, stop.clone(), received.clone());
        let sink = spawn_in(&ends.dst_ns, "modes-sink", move || {
            sink(dst, &s, &r, max, tx)
        })?;
        let mut flow = BulkFlow {
            stop,
            received,
            sender: None,
            sink: Some(sink),
            start_ns: 0,
        };
        wait_ready::<()>(&rx, "sink")?;
        let (tx, rx) = channel();
        let (s, cc) = (flow.stop.clone(), cc.to_string());
        flow.sender = Some(spawn_in(&ends.src_ns, "modes-src", move || {
            source(dst, &cc, &s, max, tx)
        })?);
        flow.start_ns = wait_ready(&rx, "sender")?;
        Ok(flow)
    }

    /// CLOCK_MONOTONIC ns at which the connection was up and the first write went out.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    pub fn received_bytes(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stop sending, read the sender's `TCP_INFO`, close both ends.
    pub fn stop(mut self) -> Result<FlowEnd> {
        let secs = mgrp_testbed::clock::now_ns().saturating_sub(self.start_ns) as f64 / 1e9;
        let tcp = self.halt()?;
        Ok(FlowEnd {
            tcp,
            received_bytes: self.received_bytes(),
            secs,
        })
    }

    fn halt(&mut self) -> Result<TcpStats> {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.take().map(|h| {
            h.join()
                .map_err(|_| Error::Worker("flow sender panicked".into()))
        });
        if let Some(h) = self.sink.take() {
            let _ = h.join();
        }
        match sent {
            Some(r) => Ok(r??),
            None => Err(Error::Worker("flow sender never started".into())),
        }
    }
}

impl Drop for BulkFlow {
    fn drop(&mut self) {
        if self.sender.is_some() || self.sink.is_some() {
            let _ = self.halt();
        }
    }
}

/// Why a flow's thread could not start.
#[derive(Debug, Clone)]
enum StartErr {
    /// The kernel refused the congestion control.
    Cc(String),
    Other(String),
}

impl std::fmt::Display for StartErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartErr::Cc(m) | StartErr::Other(m) => f.write_str(m),
        }
    }
}

/// Wait for a thread's start-up message: `Ok(value)` or its error.
fn wait_ready<T>(rx: &std::sync::mpsc::Receiver<Result<T, StartErr>>, what: &str) -> Result<T> {
    match rx.recv_timeout(CONNECT_TIMEOUT + Duration::from_secs(2)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(StartErr::Cc(e))) => Err(Error::Unavailable(e)),
        Ok(Err(StartErr::Other(e))) => Err(Error::Worker(format!("flow {what}: {e}"))),
        Err(_) => Err(Error::Worker(format!("flow {what} did not start"))),
    }
}

fn gen_err(what: &str, e: std::io::Error) -> mgrp_testbed::Error {
    mgrp_testbed::Error::Generator(format!("{what}: {e}"))
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Accept one connection (within [`CONNECT_TIMEOUT`] of the sender starting) and read it until
/// `stop`, its end, or `max` after it was accepted.
fn sink(
    addr: SocketAddr,
    stop: &AtomicBool,
    received: &AtomicU64,
    max: Duration,
    ready: Sender<Result<(), StartErr>>,
) -> Result<(), mgrp_testbed::Error> {
    let listener = match TcpListener::bind(addr).and_then(|l| l.set_nonblocking(true).map(|_| l)) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(StartErr::Other(format!("bind {addr}: {e}"))));
            return Err(gen_err("bind flow sink", e));
        }
    };
    let _ = ready.send(Ok(()));
    // The sender is started after this returns ready; give it the connect timeout and more.
    let deadline = Instant::now() + CONNECT_TIMEOUT * 3;
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(gen_err("flow accept", e)),
        }
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    conn.set_nonblocking(false)
        .and_then(|_| conn.set_read_timeout(Some(POLL)))
        .map_err(|e| gen_err("flow sink", e))?;
    let mut buf = vec![0u8; 256 * 1024];
    let end = Instant::now() + max;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if transient(&e) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// Connect, choose `cc`, report the start, write until `stop` or `max`; then `TCP_INFO`.
fn source(
    dst: SocketAddr,
    cc: &str,
    stop: &AtomicBool,
    max: Duration,
    ready: Sender<Result<u64, StartErr>>,
) -> Result<TcpStats, mgrp_testbed::Error> {
    let other = |what: &str, e: std::io::Error| StartErr::Other(format!("{what}: {e}"));
    let started = (|| {
        let conn =
            TcpStream::connect_timeout(&dst, CONNECT_TIMEOUT).map_err(|e| other("connect", e))?;
        set_cc(conn.as_raw_fd(), cc).map_err(StartErr::Cc)?;
        abortive_close(conn.as_raw_fd()).map_err(|e| other("SO_LINGER", e))?;
        conn.set_write_timeout(Some(POLL))
            .map_err(|e| other("socket", e))?;
        Ok::<_, StartErr>(conn)
    })();
    let mut conn = match started {
        Ok(c) => c,
        Err(e) => {
            let msg = e.to_string();
            let _ = ready.send(Err(e));
            return Err(mgrp_testbed::Error::Generator(msg));
        }
    };
    let end = Instant::now() + max;
    let _ = ready.send(Ok(mgrp_testbed::clock::now_ns()));
    let chunk = vec![0x6du8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        match conn.write(&chunk) {
            Ok(_) => {}
            Err(e) if transient(&e) => {}
            Err(e) => return Err(gen_err("flow send", e)),
        }
    }
    let stats = tcp_stats(conn.as_raw_fd()).map_err(|e| gen_err("TCP_INFO", e))?;
    // Closed with SO_LINGER 0: a reset, so no queued data trickles into the next run.
    drop(conn);
    Ok(stats)
}

/// Put the socket on congestion control `cc`.
fn set_cc(fd: RawFd, cc: &str) -> Result<(), String> {
    mgrp_control::sockopt::set_congestion_control(fd, cc)
        .map_err(|e| format!("congestion control {cc:?} could not be set: {e}"))
}

/// SO_LINGER on with 0 s: close() resets the connection instead of sending what is queued.
fn abortive_close(fd: RawFd) -> std::io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a valid fd and a linger struct of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The socket's retransmissions, segments, minimum RTT and congestion control.
fn tcp_stats(fd: RawFd) -> std::io::Result<TcpStats> {
    let info = mgrp_control::sockopt::tcp_info(fd)?;
    let cc_at_end = mgrp_control::sockopt::congestion_control(fd).unwrap_or_default();
    Ok(TcpStats {
        retrans: info.tcpi_total_retrans,
        data_segs_out: info.tcpi_data_segs_out,
        min_rtt_ms: info.tcpi_min_rtt as f64 / 1e3,
        cc_at_end,
    })
}
