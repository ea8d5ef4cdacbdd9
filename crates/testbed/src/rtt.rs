//! Round-trip time across the testbed (snd → rcv → snd), to report what the delay line achieved.

use crate::netns::spawn_in;
use crate::topology::{Role, Testbed};
use crate::Error;
use serde::Serialize;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ECHO_PORT: u16 = 7007;

#[derive(Debug, Clone, Serialize)]
pub struct RttStats {
    pub sent: u32,
    pub lost: u32,
    pub min_ms: f64,
    pub p10_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
}

/// Send `count` UDP pings from snd to an echo in rcv, one at a time, and summarise the RTTs.
pub fn measure_rtt(tb: &Testbed, count: u32) -> Result<RttStats, Error> {
    if count == 0 || count > 10_000 {
        return Err(Error::BadInput("ping count must be 1..=10000".into()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let stop2 = stop.clone();
    let echo = spawn_in(&tb.ns(Role::Rcv), "echo", move || {
        let sock = UdpSocket::bind((Role::Rcv.addr(), ECHO_PORT));
        let sock = match sock {
            Ok(s) => {
                let _ = tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return Err(Error::Setup(format!("echo bind: {e}")));
            }
        };
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(|e| Error::Setup(e.to_string()))?;
        let mut buf = [0u8; 64];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
        Ok(())
    })?;
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::Setup(format!("echo: {e}"))),
        Err(_) => return Err(Error::Setup("echo did not start".into())),
    }
    let timeout = Duration::from_secs(1) + tb.config().delay.unwrap_or_default() * 4;
    let pinger = spawn_in(&tb.ns(Role::Snd), "ping", move || {
        let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| Error::Setup(e.to_string()))?;
        sock.connect((Role::Rcv.addr(), ECHO_PORT))
            .map_err(|e| Error::Setup(e.to_string()))?;
        sock.set_read_timeout(Some(timeout))
            .map_err(|e| Error::Setup(e.to_string()))?;
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for seq in 0..count {
            let t0 = Instant::now();
            let _ = sock.send(&seq.to_be_bytes());
            // Skip late echoes of earlier pings.
            while let Ok(n) = sock.recv(&mut buf) {
                if n == 4 && buf[..4] == seq.to_be_bytes() {
                    rtts.push(t0.elapsed().as_secs_f64() * 1e3);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(rtts)
    })?;
    let rtts = pinger
        .join()
        .map_err(|_| Error::Setup("ping thread panicked".into()))?;
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    let mut rtts = rtts?;
    if rtts.is_empty() {
        return Err(Error::Setup(
            "no echo came back across the testbed: the path is broken".into(),
        ));
    }
    rtts.sort_by(f64::total_cmp);
    let q = |p: f64| rtts[((p * (rtts.len() - 1) as f64).round() as usize).min(rtts.len() - 1)];
    Ok(RttStats {
        sent: count,
        lost: count - rtts.len() as u32,
        min_ms: rtts[0],
        p10_ms: q(0.1),
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        max_ms: *rtts.last().expect("non-empty"),
    })
}
