//! A monitored application: one TCP connection from one namespace to another that sends in
//! bulk or in messages (fixed or irregular), the traffic passive measurement watches.

use crate::clock::{now_ns, sleep_until};
use crate::generator::{tcp_sink, SinkCounters};
use crate::netns::spawn_in;
use crate::topology::{Role, Testbed};
use crate::units::{parse_bytes, parse_duration};
use crate::Error;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum AppPattern {
    /// Write as fast as TCP takes it.
    Bulk,
    /// A `size`-byte message every `every`; with `irregular`, gaps are exponential with that
    /// mean and sizes uniform in [size/4, 2·size] (seeded).
    Messages {
        size: u64,
        every: Duration,
        irregular: bool,
        seed: u64,
    },
}

impl AppPattern {
    /// `bulk`, `msgs:SIZE,every=DUR` or `irregular:SIZE,every=DUR[,seed=N]`.
    pub fn parse(s: &str) -> Result<AppPattern, Error> {
        let bad = |why: &str| Error::BadInput(format!("app pattern {s:?}: {why}"));
        if s == "bulk" {
            return Ok(AppPattern::Bulk);
        }
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| bad("use bulk, msgs:SIZE,every=DUR or irregular:SIZE,every=DUR"))?;
        let irregular = match kind {
            "msgs" => false,
            "irregular" => true,
            _ => return Err(bad("unknown kind")),
        };
        let mut parts = rest.split(',');
        let size =
            parse_bytes(parts.next().unwrap_or_default()).map_err(|e| bad(&e.to_string()))?;
        if !(1..=64 << 20).contains(&size) {
            return Err(bad("message size must be 1 B..=64 MiB"));
        }
        let (mut every, mut seed) = (None, 1);
        for kv in parts {
            match kv.split_once('=') {
                Some(("every", v)) => {
                    every = Some(parse_duration(v).map_err(|e| bad(&e.to_string()))?)
                }
                Some(("seed", v)) => seed = v.parse().map_err(|_| bad("bad seed"))?,
                _ => return Err(bad(&format!("unknown option {kv:?}"))),
            }
        }
        let every = every.ok_or_else(|| bad("every=DUR is required"))?;
        if every < Duration::from_micros(100) || every > Duration::from_secs(60) {
            return Err(bad("every must be 100us..=60s"));
        }
        Ok(AppPattern::Messages {
            size,
            every,
            irregular,
            seed,
        })
    }
}

/// What the application sent.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AppReport {
    pub sent_bytes: u64,
    pub messages: u64,
    pub received_bytes: u64,
    pub duration_s: f64,
    /// The sender's `TCP_INFO` as it closed: what crossed the path beyond the bytes the sink
    /// read (a held or reordered segment the kernel sent again is load too).
    pub tcp: AppTcp,
}

/// The application socket's own count of what it put on the wire (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct AppTcp {
    /// `tcpi_bytes_sent`: payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// `tcpi_bytes_retrans`: payload bytes sent again.
    pub bytes_retrans: u64,
    /// `tcpi_data_segs_out`: data segments sent, retransmissions included.
    pub data_segs_out: u32,
    /// `tcpi_total_retrans`: segments sent again.
    pub segs_retrans: u32,
}

pub struct AppFlow {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    messages: Arc<AtomicU64>,
    sink: Arc<SinkCounters>,
    sender: Option<JoinHandle<Result<AppTcp, Error>>>,
    sinks: Option<JoinHandle<Result<(), Error>>>,
    start_ns: u64,
}

impl AppFlow {
    /// Start `pattern` from `from` to a sink in `to` on `port`, with congestion control `cc`
    /// (the kernel default if `None`), for at most `max`.
    pub fn start(
        tb: &Testbed,
        from: Role,
        to: Role,
        port: u16,
        pattern: AppPattern,
        cc: Option<String>,
        max: Duration,
    ) -> Result<AppFlow, Error> {
        let dst: SocketAddr = format!("{}:{port}", to.addr())
            .parse()
            .expect("valid address");
        Self::start_in(&tb.ns(from), &tb.ns(to), dst, pattern, cc, max)
    }

    /// Like [`AppFlow::start`] between any two namespaces (a topology's hosts): the sink
    /// listens on `dst` in `to_ns`, the source runs in `from_ns`.
    pub fn start_in(
        from_ns: &str,
        to_ns: &str,
        dst: SocketAddr,
        pattern: AppPattern,
        cc: Option<String>,
        max: Duration,
    ) -> Result<AppFlow, Error> {
        let sink = Arc::new(SinkCounters::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = sink.clone();
        let sinks = spawn_in(to_ns, "app-sink", move || tcp_sink(dst, 1, s2, tx))?;
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::Generator(e)),
            Err(_) => return Err(Error::Generator("app sink did not start".into())),
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (sent, messages) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start_ns = now_ns();
        let end_ns = start_ns + max.as_nanos() as u64;
        let (st, se, me) = (stop.clone(), sent.clone(), messages.clone());
        let sender = spawn_in(from_ns, "app-src", move || {
            app_source(dst, cc.as_deref(), pattern, &st, &se, &me, end_ns)
        })?;
        Ok(AppFlow {
            stop,
            sent,
            messages,
            sink,
            sender: Some(sender),
            sinks: Some(sinks),
            start_ns,
        })
    }

    /// Bytes the sink has read so far (what crossed the path, after any loss and retransmission).
    pub fn received_bytes(&self) -> u64 {
        self.sink.received_bytes.load(Ordering::Relaxed)
    }

    pub fn sent_bytes(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) -> Result<AppReport, Error> {
        self.halt()
    }

    fn halt(&mut self) -> Result<AppReport, Error> {
        self.stop.store(true, Ordering::Relaxed);
        let (mut first_err, mut tcp) = (None, AppTcp::default());
        if let Some(h) = self.sender.take() {
            match h.join() {
                Ok(Ok(t)) => tcp = t,
                Ok(Err(e)) => first_err = Some(e),
                Err(_) => first_err = Some(Error::Generator("app sender panicked".into())),
            }
        }
        self.sink.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sinks.take() {
            let _ = h.join();
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(AppReport {
            sent_bytes: self.sent.load(Ordering::Relaxed),
            messages: self.messages.load(Ordering::Relaxed),
            received_bytes: self.sink.received_bytes.load(Ordering::Relaxed),
            duration_s: (now_ns() - self.start_ns) as f64 / 1e9,
            tcp,
        })
    }
}

impl Drop for AppFlow {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

fn app_source(
    dst: SocketAddr,
    cc: Option<&str>,
    pattern: AppPattern,
    stop: &AtomicBool,
    sent: &AtomicU64,
    messages: &AtomicU64,
    end_ns: u64,
) -> Result<AppTcp, Error> {
    let err = |what: &str, e: std::io::Error| Error::Generator(format!("app {what}: {e}"));
    let mut conn =
        TcpStream::connect_timeout(&dst, Duration::from_secs(3)).map_err(|e| err("connect", e))?;
    if let Some(cc) = cc {
        crate::generator::set_congestion_control(conn.as_raw_fd(), cc)?;
    }
    conn.set_write_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| err("socket", e))?;
    let running = || !stop.load(Ordering::Relaxed) && now_ns() < end_ns;
    // Write all of `n` bytes unless told to stop.
    let mut write_all = |n: u64, buf: &[u8]| -> Result<(), Error> {
        let mut left = n;
        while left > 0 && running() {
            let k = left.min(buf.len() as u64) as usize;
            match conn.write(&buf[..k]) {
                Ok(w) => {
                    left -= w as u64;
                    sent.fetch_add(w as u64, Ordering::Relaxed);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(err("send", e)),
            }
        }
        Ok(())
    };
    let buf = vec![0x6du8; 256 * 1024];
    match pattern {
        AppPattern::Bulk => {
            while running() {
                write_all(buf.len() as u64, &buf)?;
            }
        }
        AppPattern::Messages {
            size,
            every,
            irregular,
            seed,
        } => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut next = now_ns();
            while running() {
                let n = if irregular {
                    rng.random_range(size / 4..=size * 2).max(1)
                } else {
                    size
                };
                write_all(n, &buf)?;
                messages.fetch_add(1, Ordering::Relaxed);
                let gap = if irregular {
                    let u: f64 = rng.random::<f64>().max(1e-12);
                    -u.ln() * every.as_nanos() as f64
                } else {
                    every.as_nanos() as f64
                };
                next += gap as u64;
                // Behind schedule (the path is slower than the app): send the next at once.
                while running() && now_ns() < next {
                    sleep_until(next.min(now_ns() + 50_000_000));
                }
            }
        }
    }
    let tcp = tcp_counts(&conn);
    let _ = conn.shutdown(std::net::Shutdown::Both);
    Ok(tcp)
}

/// What the kernel says `conn` sent (zeroes if it will not say).
fn tcp_counts(conn: &TcpStream) -> AppTcp {
    let Ok(info) = mgrp_sockopt::tcp_info(conn.as_raw_fd()) else {
        return AppTcp::default();
    };
    AppTcp {
        bytes_sent: info.tcpi_bytes_sent,
        bytes_retrans: info.tcpi_bytes_retrans,
        data_segs_out: info.tcpi_data_segs_out,
        segs_retrans: info.tcpi_total_retrans,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The counts are the kernel's for this socket: a loopback connection that wrote 64 kB
    /// says it sent at least that, in at least one segment, and (nothing lost) none again.
    #[test]
    fn tcp_counts_read_what_the_socket_sent() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        let sink = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut n = 0;
            while n < 65536 {
                n += rx.read(&mut buf).unwrap();
            }
            n
        });
        tx.write_all(&vec![7u8; 65536]).unwrap();
        assert_eq!(sink.join().unwrap(), 65536);
        let c = tcp_counts(&tx);
        assert!(c.bytes_sent >= 65536, "{c:?}");
        assert!(c.data_segs_out >= 1, "{c:?}");
        assert_eq!(c.bytes_retrans, 0, "{c:?}");
    }
}
