//! The sender: one kernel TCP connection per stream, each driven by its local scheduler, and
//! the global scheduler beside them, all in one thread that ticks every `tick`. Estimates come
//! in on a bounded channel ([`Sender::estimates`]), from the agent's event stream
//! ([`crate::agent`]) or, in a benchmark, from an oracle.
//!
//! The kernel's send buffer is kept shallow (`TCP_NOTSENT_LOWAT`) so that a path that cannot
//! carry the stream shows as a backlog in the local scheduler, which then drops frames by
//! importance, rather than as seconds of data hidden in the kernel.

use crate::global::{Global, GlobalConfig, GlobalCounts};
use crate::local::{Local, LocalConfig, LocalCounts};
use crate::wire::{Header, HEADER};
use crate::workload::Level;
use crate::{realtime_ns, Stop};
use serde::Serialize;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Estimates waiting for the scheduler; more are dropped (counted).
const ESTIMATE_QUEUE: usize = 64;
/// Seconds of timeline kept.
const TIMELINE_MAX: usize = 100_000;

#[derive(Debug, Clone)]
pub struct SenderConfig {
    pub to: IpAddr,
    /// Stream `i` goes to port `base_port + i`.
    pub base_port: u16,
    pub global: GlobalConfig,
    pub local: LocalConfig,
    pub tick: Duration,
    /// Unsent bytes the kernel may hold per connection.
    pub notsent_lowat: u32,
    pub connect_timeout: Duration,
}

impl SenderConfig {
    pub fn new(to: IpAddr, base_port: u16, global: GlobalConfig) -> SenderConfig {
        SenderConfig {
            to,
            base_port,
            global,
            local: LocalConfig::default(),
            tick: Duration::from_millis(2),
            notsent_lowat: 8 * 1024,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// An available-bandwidth figure for the global scheduler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub bps: f64,
    /// The figure counts the streams' own traffic as load (an active estimate).
    pub includes_own: bool,
}

/// One second of the run as the scheduler saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub t_ns: u64,
    pub levels: Vec<Level>,
    pub ceiling_bps: f64,
    pub floor_bps: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub levels: Vec<Level>,
    pub ceiling_bps: f64,
    pub floor_bps: f64,
    pub streams: Vec<LocalCounts>,
    pub global: GlobalCounts,
    pub estimates_dropped: u64,
    /// Estimates as they reached the scheduler: (time ns, bit/s).
    pub estimates: Vec<(u64, f64)>,
    pub timeline: Vec<Point>,
    /// Per stream: its connection's TCP state, read once a second and at the end.
    pub tcp: Vec<TcpSeen>,
    pub error: Option<String>,
}

/// What the kernel says of one stream's connection (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TcpSeen {
    /// Segments retransmitted over the connection's life.
    pub retrans: u32,
    /// Smoothed RTT, µs.
    pub srtt_us: u32,
}

fn tcp_seen(c: &TcpStream) -> TcpSeen {
    // SAFETY: tcp_info is plain data; the kernel fills at most `len` bytes of it.
    let mut i: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, a buffer and its length.
    let rc = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut i as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return TcpSeen::default();
    }
    TcpSeen {
        retrans: i.tcpi_total_retrans,
        srtt_us: i.tcpi_rtt,
    }
}

pub struct Sender {
    stop: Stop,
    tx: SyncSender<Estimate>,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<()>>,
}

impl Sender {
    /// Connect every stream (retrying until `connect_timeout`) and start sending.
    pub fn start(cfg: SenderConfig) -> std::io::Result<Sender> {
        let n = cfg.global.streams;
        let mut conns = Vec::with_capacity(n);
        for s in 0..n {
            let port = cfg
                .base_port
                .checked_add(s as u16)
                .ok_or_else(|| std::io::Error::other("stream ports past 65535"))?;
            conns.push(connect(SocketAddr::new(cfg.to, port), &cfg)?);
        }
        let (tx, rx) = sync_channel(ESTIMATE_QUEUE);
        let stop = Stop::default();
        let status = Arc::new(Mutex::new(Status::default()));
        let (st, sh) = (stop.clone(), status.clone());
        let thread = std::thread::Builder::new()
            .name("medianet-send".into())
            .spawn(move || {
                if let Err(e) = run(cfg, conns, rx, &st, &sh) {
                    sh.lock().unwrap_or_else(|e| e.into_inner()).error = Some(e.to_string());
                }
            })?;
        Ok(Sender {
            stop,
            tx,
            status,
            thread: Some(thread),
        })
    }

    /// Where estimates go in.
    pub fn estimates(&self) -> EstimateTx {
        EstimateTx {
            tx: self.tx.clone(),
            status: self.status.clone(),
        }
    }

    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stop sending; the final status.
    pub fn stop(mut self) -> Status {
        self.halt();
        self.status()
    }

    fn halt(&mut self) {
        self.stop.set();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A handle that feeds estimates to a running sender's global scheduler.
#[derive(Clone)]
pub struct EstimateTx {
    tx: SyncSender<Estimate>,
    status: Arc<Mutex<Status>>,
}

impl EstimateTx {
    /// False when the sender has stopped.
    pub fn send(&self, e: Estimate) -> bool {
        match self.tx.try_send(e) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.status
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .estimates_dropped += 1;
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

fn connect(to: SocketAddr, cfg: &SenderConfig) -> std::io::Result<TcpStream> {
    let t0 = Instant::now();
    let c = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
            Ok(c) => break c,
            Err(e) if t0.elapsed() >= cfg.connect_timeout => {
                return Err(std::io::Error::new(e.kind(), format!("connect {to}: {e}")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    c.set_nodelay(true)?;
    let v = cfg.notsent_lowat as libc::c_int;
    // SAFETY: a valid socket descriptor and a c_int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    c.set_nonblocking(true)?;
    Ok(c)
}

/// Write as much of the local scheduler's queue as the connection takes now.
fn pump(stream: usize, l: &mut Local, c: &mut TcpStream, zeros: &[u8]) -> std::io::Result<()> {
    while let Some(f) = l.head().copied() {
        let r = if f.written < HEADER {
            let h = Header {
                stream: stream as u8,
                index: f.index,
                gen_ns: f.gen_ns,
            }
            .encode();
            c.write(&h[f.written..])
        } else {
            c.write(&zeros[..f.size() - f.written])
        };
        match r {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => l.handle_written(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn run(
    cfg: SenderConfig,
    mut conns: Vec<TcpStream>,
    rx: Receiver<Estimate>,
    stop: &Stop,
    status: &Mutex<Status>,
) -> std::io::Result<()> {
    let start = realtime_ns();
    let mut global = Global::new(cfg.global.clone());
    let mut locals: Vec<Local> = (0..conns.len())
        .map(|s| Local::new(cfg.local.clone(), s, Level::Low, start))
        .collect();
    let zeros = vec![0u8; crate::workload::Kind::I.size()];
    let mut next_point = start;
    let mut estimates = Vec::new();
    while !stop.is_set() {
        let now = realtime_ns();
        while let Ok(e) = rx.try_recv() {
            global.handle_estimate(now, e.bps, e.includes_own);
            if estimates.len() < TIMELINE_MAX {
                estimates.push((now, e.bps));
            }
        }
        global.handle_tick(now);
        if let Some(levels) = global.poll_levels() {
            for (l, lv) in locals.iter_mut().zip(levels) {
                l.set_level(lv);
            }
        }
        for (s, (l, c)) in locals.iter_mut().zip(conns.iter_mut()).enumerate() {
            l.handle_tick(now);
            pump(s, l, c, &zeros)?;
            if let Some(r) = l.poll_report(now) {
                global.handle_report(now, r);
            }
        }
        if now >= next_point {
            next_point += 1_000_000_000;
            let mut st = status.lock().unwrap_or_else(|e| e.into_inner());
            st.levels = global.levels().to_vec();
            st.ceiling_bps = global.ceiling_bps();
            st.floor_bps = global.floor_bps();
            st.streams = locals.iter().map(|l| l.counts().clone()).collect();
            st.global = global.counts().clone();
            st.estimates.clone_from(&estimates);
            st.tcp = conns.iter().map(tcp_seen).collect();
            if st.timeline.len() < TIMELINE_MAX {
                let p = Point {
                    t_ns: now,
                    levels: st.levels.clone(),
                    ceiling_bps: st.ceiling_bps,
                    floor_bps: st.floor_bps,
                };
                st.timeline.push(p);
            }
        }
        std::thread::sleep(cfg.tick);
    }
    let mut st = status.lock().unwrap_or_else(|e| e.into_inner());
    st.levels = global.levels().to_vec();
    st.streams = locals.iter().map(|l| l.counts().clone()).collect();
    st.global = global.counts().clone();
    st.estimates = estimates;
    st.tcp = conns.iter().map(tcp_seen).collect();
    Ok(())
}
