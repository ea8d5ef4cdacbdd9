//! A load flow: bulk TCP to a peer agent, which reads and discards it (`Control::Load`).
//! Tneck drives one while it traceroutes: the flow fills the path's bottleneck queue the way
//! a TCP application would (unlike a UDP ramp, it backs off before it pushes others away),
//! and its throughput is the path's TCP-available bandwidth.

use crate::Error;
use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What `TCP_INFO` says for ssthresh before the first congestion event.
const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;
/// One write of the flow.
const CHUNK: usize = 64 * 1024;

/// What the kernel says of the flow's socket at one moment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadSample {
    /// Seconds since the flow started.
    pub t_s: f64,
    /// Bytes the peer acknowledged so far (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub cwnd: u32,
    pub retrans: u32,
    /// The kernel's delivery-rate estimate, bits/s.
    pub delivery_rate_bps: f64,
    /// Still in slow start (no congestion event yet: ssthresh infinite).
    pub slow_start: bool,
}

/// When the flow ended: what it wrote and what was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadReport {
    pub seconds: f64,
    pub bytes_written: u64,
    pub bytes_acked: u64,
    pub retrans: u32,
    /// Why the writer stopped early, if it did (the peer closed, a send error).
    #[serde(skip)]
    pub failed: bool,
}

/// A running load flow; [`LoadFlow::stop`] (or dropping it) ends it.
pub struct LoadFlow {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    writer: Option<JoinHandle<bool>>,
    started: Instant,
}

impl LoadFlow {
    /// Start writing on `stream` (already announced as a load) for at most `max` and at most
    /// `budget` bytes. With `cc`, the socket uses that congestion control.
    pub(crate) fn start(
        stream: TcpStream,
        max: Duration,
        budget: u64,
        cc: Option<&str>,
    ) -> Result<LoadFlow, Error> {
        if let Some(cc) = cc {
            set_cc(&stream, cc)?;
        }
        let _ = stream.set_nodelay(false);
        let mut w = stream
            .try_clone()
            .map_err(|e| Error::io("clone the load socket", e))?;
        let _ = w.set_write_timeout(Some(Duration::from_millis(200)));
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let (stop2, written2) = (stop.clone(), written.clone());
        let started = Instant::now();
        let writer = std::thread::Builder::new()
            .name("mgrp-load".into())
            .spawn(move || {
                let buf = vec![0x6du8; CHUNK];
                let end = started + max;
                while !stop2.load(Ordering::Relaxed) && Instant::now() < end {
                    let left = budget.saturating_sub(written2.load(Ordering::Relaxed));
                    if left == 0 {
                        return true;
                    }
                    match w.write(&buf[..CHUNK.min(left as usize)]) {
                        Ok(n) => {
                            written2.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) if crate::transient(&e) => {}
                        Err(_) => return false,
                    }
                }
                true
            })
            .map_err(|e| Error::io("start the load writer", e))?;
        Ok(LoadFlow {
            stream,
            stop,
            written,
            writer: Some(writer),
            started,
        })
    }

    /// The socket's state now.
    pub fn sample(&self) -> Result<LoadSample, Error> {
        let i = tcp_info(&self.stream)?;
        Ok(LoadSample {
            t_s: self.started.elapsed().as_secs_f64(),
            bytes_acked: i.tcpi_bytes_acked,
            srtt_us: i.tcpi_rtt,
            rttvar_us: i.tcpi_rttvar,
            cwnd: i.tcpi_snd_cwnd,
            retrans: i.tcpi_total_retrans,
            delivery_rate_bps: i.tcpi_delivery_rate as f64 * 8.0,
            slow_start: i.tcpi_snd_ssthresh >= TCP_INFINITE_SSTHRESH,
        })
    }

    /// Bytes handed to the kernel so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The writer has stopped (its time or budget is spent, or the peer went away).
    pub fn finished(&self) -> bool {
        self.writer.as_ref().is_none_or(|w| w.is_finished())
    }

    /// End the flow and say what it did.
    pub fn stop(mut self) -> LoadReport {
        self.finish()
    }

    fn finish(&mut self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let ok = self.writer.take().map(|w| w.join().unwrap_or(false));
        let info = tcp_info(&self.stream).ok();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        LoadReport {
            seconds: self.started.elapsed().as_secs_f64(),
            bytes_written: self.written(),
            bytes_acked: info.map_or(0, |i| i.tcpi_bytes_acked),
            retrans: info.map_or(0, |i| i.tcpi_total_retrans),
            failed: ok == Some(false),
        }
    }
}

impl Drop for LoadFlow {
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.finish();
        }
    }
}

fn set_cc(s: &TcpStream, cc: &str) -> Result<(), Error> {
    mgrp_sockopt::set_congestion_control(s.as_raw_fd(), cc).map_err(|e| {
        Error::io(
            format!(
                "congestion control {cc:?} on the load flow (see tcp_available_congestion_control)"
            ),
            e,
        )
    })
}

fn tcp_info(s: &TcpStream) -> Result<libc::tcp_info, Error> {
    crate::sock::tcp_info(s).map_err(|e| Error::io("TCP_INFO of the load flow", e))
}
