//! The peer's side of two-sided Wren: capture one flow's data segments as they arrive here
//! (libpcap, kernel timestamps) and stream compact records back on the connection that asked.
//! The request was admitted by [`crate::proto::receiver`] (authenticated session, the flow's
//! sender is the asking host, duration and record count capped); here the agent-wide limit,
//! the receiver address and the capture itself are checked, and every refusal goes back as an
//! error the asker can read.

use super::conn::{Conn, ReadError};
use crate::daemon::{bump, Shared};
use crate::proto::encode;
use mgrp_capture::live::LiveCapture;
use mgrp_wire::control::{code, Control, SegRecord, MAX_CAPTURE_BATCH};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Captures the agent runs at once, over all sessions (each session has at most one: a
/// capture owns its connection).
pub const MAX_CAPTURES: usize = 4;
/// A batch goes out at least this often while records wait.
const BATCH_EVERY: Duration = Duration::from_millis(100);

/// What a capture request asks for.
#[derive(Debug, Clone, Copy)]
pub struct CaptureAsk {
    pub sender: SocketAddr,
    pub receiver: SocketAddr,
    pub until: Instant,
    pub max_records: u32,
}

/// Holds one of the agent's capture slots while it lives.
struct Slot<'a>(&'a Shared);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.captures_active.fetch_sub(1, Ordering::Relaxed);
    }
}

fn take_slot(s: &Shared) -> Option<Slot<'_>> {
    let prev = s.captures_active.fetch_add(1, Ordering::Relaxed);
    if prev >= MAX_CAPTURES {
        s.captures_active.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    Some(Slot(s))
}

fn refuse(conn: &mut Conn, s: &Shared, why: String) {
    bump(&s.counters.captures_refused);
    let _ = conn.write(&encode(&Control::Error {
        code: code::CAPTURE,
        message: why,
    }));
}

/// The capture filter for exactly this flow's packets.
pub fn flow_filter(sender: SocketAddr, receiver: SocketAddr) -> String {
    format!(
        "src host {} and src port {} and dst host {} and dst port {}",
        sender.ip(),
        sender.port(),
        receiver.ip(),
        receiver.port()
    )
}

/// Serve one capture request on `conn` until its end, the peer closing, or the agent stopping.
pub(crate) fn serve(conn: &mut Conn, ask: CaptureAsk, s: &Shared) {
    let Some(_slot) = take_slot(s) else {
        return refuse(
            conn,
            s,
            format!("capture refused: this agent already runs {MAX_CAPTURES} captures"),
        );
    };
    let local = match nix::ifaddrs::getifaddrs() {
        Ok(addrs) => addrs
            .filter_map(|a| a.address)
            .filter_map(|a| {
                a.as_sockaddr_in()
                    .map(|v| std::net::IpAddr::V4(v.ip()))
                    .or_else(|| a.as_sockaddr_in6().map(|v| v.ip().into()))
            })
            .collect::<Vec<_>>(),
        Err(e) => return refuse(conn, s, format!("capture failed: listing addresses: {e}")),
    };
    if !local.contains(&ask.receiver.ip()) {
        return refuse(
            conn,
            s,
            format!(
                "capture refused: {} is not an address of this host",
                ask.receiver.ip()
            ),
        );
    }
    let filter = flow_filter(ask.sender, ask.receiver);
    let mut cap = match LiveCapture::open("any", Some(&filter), None) {
        Ok(c) => c,
        Err(e) => return refuse(conn, s, format!("capture failed: {e}")),
    };
    bump(&s.counters.captures);
    let dropped0 = cap.stats().dropped;
    let mut batch: Vec<SegRecord> = Vec::new();
    let mut sent = 0u64;
    let mut over = 0u64;
    let mut last = Instant::now();
    let c = &s.counters;
    while !s.stop.load(Ordering::Relaxed) && Instant::now() < ask.until {
        match cap.next_segment() {
            Ok(Some(seg)) => {
                // The filter narrows by addresses; only data counts (not SYN/FIN/RST, not ACKs).
                if seg.src == ask.sender
                    && seg.dst == ask.receiver
                    && seg.payload > 0
                    && !seg.control
                {
                    if sent + batch.len() as u64 >= ask.max_records as u64 {
                        over += 1;
                    } else {
                        batch.push(SegRecord {
                            seq: seg.seq,
                            len: seg.payload,
                            rx_ns: seg.ts_ns,
                        });
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                bump(&c.capture_errors);
                let _ = conn.write(&encode(&Control::Error {
                    code: code::CAPTURE,
                    message: format!("capture failed: {e}"),
                }));
                return;
            }
        }
        if batch.len() >= MAX_CAPTURE_BATCH || last.elapsed() >= BATCH_EVERY {
            last = Instant::now();
            if !batch.is_empty() {
                sent += batch.len() as u64;
                c.capture_records
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                let msg = Control::CaptureBatch {
                    records: std::mem::take(&mut batch),
                };
                if conn.write(&encode(&msg)).is_err() {
                    return;
                }
            }
            // The asker closing (or saying anything: Close) ends the capture.
            match conn.read(64, Instant::now()) {
                Ok(Some(_)) | Err(ReadError::Closed) | Err(ReadError::Io(_)) => return,
                Ok(None) => {}
            }
        }
    }
    sent += batch.len() as u64;
    c.capture_records
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    if !batch.is_empty() {
        let _ = conn.write(&encode(&Control::CaptureBatch { records: batch }));
    }
    let lost = cap.stats().dropped.saturating_sub(dropped0);
    c.capture_dropped.fetch_add(over + lost, Ordering::Relaxed);
    let _ = conn.write(&encode(&Control::CaptureEnd {
        records: sent,
        dropped: over + lost,
    }));
}
