//! The control port's driver: accept connections, admit strangers through the pre-auth gate,
//! run each connection's handshake and session machines on its own thread.

use super::conn::{Conn, ReadError};
use crate::auth::HelloRefusal;
use crate::daemon::{bump, spawn, Shared};
use crate::proto::encode;
use crate::proto::handshake::{busy, server_hello, HelloError, ServerHandshake};
use crate::proto::receiver::{Flow, ServerSession};
use rand::Rng;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a blocked driver looks at the stop flag.
const TICK: Duration = Duration::from_millis(20);

pub fn accept_loop(tcp: TcpListener, s: Arc<Shared>) {
    // Connection threads inherit this.
    crate::pacer::avoid_pacer_cpu();
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        match tcp.accept() {
            Ok((stream, from)) => {
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                let ticket = match s.gate().enter(Instant::now(), from.ip(), handle) {
                    Ok(t) => t,
                    Err(full) => {
                        bump(&s.counters.pre_auth_refused);
                        refuse(stream, &full.to_string());
                        continue;
                    }
                };
                if let Some(old) = ticket.evicted {
                    // Its thread sees the connection end and gives up.
                    bump(&s.counters.pre_auth_evicted);
                    let _ = old.shutdown(std::net::Shutdown::Both);
                }
                let (s2, id) = (s.clone(), ticket.id);
                match spawn("mgrp-conn", move || serve_connection(stream, from, id, &s2)) {
                    Ok(h) => conns.push(h),
                    Err(_) => s.gate().leave(id),
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

/// Say BUSY and close, without waiting on the peer: read what it already sent (so closing
/// does not reset the connection before the error is read), bounded.
fn refuse(mut stream: TcpStream, why: &str) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&encode(&busy(why)));
    let mut sink = [0u8; 512];
    for _ in 0..8 {
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn serve_connection(stream: TcpStream, from: SocketAddr, ticket: u64, s: &Shared) {
    let _ = stream.set_nonblocking(false);
    let mut conn = Conn::new(stream);
    let hello = handshake(&mut conn, s);
    // Authenticated or not, the connection no longer holds a pre-auth slot.
    s.gate().leave(ticket);
    let Some(auth) = hello else { return };
    let c = &s.counters;
    let opened = s.receiver().open(from.ip(), || rand::rng().random());
    let id = match opened {
        Ok(id) => id,
        Err(full) => {
            bump(&c.connections_refused);
            let _ = conn.write(&encode(&busy(&full.to_string())));
            return;
        }
    };
    bump(&c.sessions_opened);
    let mut session = ServerSession::new(id, auth.frames).with_peer(from.ip());
    session.queue(server_hello(
        &s.key,
        &auth.client_nonce,
        rand::rng().random(),
        id,
    ));
    session_loop(&mut conn, &mut session, s);
    s.receiver().close(id);
}

/// Run the hello exchange: `None` if the peer did not authenticate (counted).
fn handshake(conn: &mut Conn, s: &Shared) -> Option<crate::proto::handshake::Authenticated> {
    let c = &s.counters;
    let mut hs = ServerHandshake::new(Instant::now());
    // Nothing goes back until the peer has proven it holds the key.
    loop {
        if s.stop.load(Ordering::Relaxed) {
            return None;
        }
        let now_ms = mgrp_clock::realtime_ns() / 1_000_000;
        let polled = hs.poll(Instant::now(), now_ms, &s.key, &mut s.replay());
        hs = match polled {
            Ok(Ok(auth)) => return Some(auth),
            Ok(Err(pending)) => pending,
            Err(HelloError::Refused(HelloRefusal::Stale | HelloRefusal::Replayed))
            | Err(HelloError::Refused(HelloRefusal::Full)) => {
                bump(&c.auth_replays);
                return None;
            }
            Err(_) => {
                bump(&c.auth_failures);
                return None;
            }
        };
        let wake = hs.poll_timeout().min(Instant::now() + TICK);
        match conn.read(hs.room(), wake) {
            Ok(Some(b)) => hs.handle_bytes(b),
            Ok(None) => {}
            Err(_) => {
                bump(&c.auth_failures);
                return None;
            }
        }
    }
}

fn session_loop(conn: &mut Conn, session: &mut ServerSession, s: &Shared) {
    let c = &s.counters;
    while !s.stop.load(Ordering::Relaxed) {
        if !flush(conn, session, s) {
            return;
        }
        let now = Instant::now();
        let wake = session
            .poll_timeout(&s.receiver())
            .map_or(now + TICK, |t| t.min(now + TICK));
        match conn.read(session.room(), wake) {
            Ok(Some(b)) => session.handle_bytes(b),
            Ok(None) => {}
            Err(ReadError::Closed) => return,
            Err(ReadError::Io(_)) => {
                bump(&c.control_errors);
                return;
            }
        }
        match session.poll_control(Instant::now()) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Closed) => return,
            Ok(Flow::Load { until, discarded }) => {
                bump(&c.loads);
                c.load_bytes.fetch_add(discarded as u64, Ordering::Relaxed);
                return sink(conn, until, s);
            }
            Ok(Flow::Capture {
                sender,
                receiver,
                until,
                max_records,
            }) => {
                let ask = super::capture::CaptureAsk {
                    sender,
                    receiver,
                    until,
                    max_records,
                };
                return super::capture::serve(conn, ask, s);
            }
            Ok(Flow::Relay { dst, until }) => return super::relay::serve(conn, dst, until, s),
            Err(_) => {
                bump(&c.control_errors);
                // The machine may have queued an error for the peer.
                flush(conn, session, s);
                return;
            }
        }
    }
}

/// Send whatever the session has due. `false` if the connection failed.
fn flush(conn: &mut Conn, session: &mut ServerSession, s: &Shared) -> bool {
    loop {
        let next = session.poll_transmit(Instant::now(), &mut s.receiver());
        let Some(t) = next else { return true };
        if conn.write(&t.bytes).is_err() {
            return false;
        }
        if let Some(r) = t.report {
            bump(&s.counters.reports_sent);
            if r.truncated {
                bump(&s.counters.reports_truncated);
            }
        }
    }
}

/// Read a load flow and throw it away until `until`, the peer closing, or the agent stopping.
/// Nothing is sent back: the flow is a TCP sender's data, acked by the kernel.
fn sink(conn: &mut Conn, until: Instant, s: &Shared) {
    let c = &s.counters;
    while !s.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        match conn.read(usize::MAX, until.min(now + TICK)) {
            Ok(Some(b)) => {
                c.load_bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
}
