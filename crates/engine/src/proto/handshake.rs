//! The hello exchange that opens a session, and the bound on connections that have not yet
//! authenticated.
//!
//! The client speaks first and proves it knows the key; a stranger gets nothing back but,
//! when the agent is full, a BUSY error (so a legitimate client can tell "full" from "wrong
//! key"). Strangers get their own small bound, total and per source address, and
//! [`super::HELLO_TIMEOUT`] to say hello: idle sockets cannot starve authenticated sessions.

use super::frames::FrameBuf;
use super::{kind, ProtoError};
use crate::auth::{HelloRefusal, Key, ReplayGuard};
use mgrp_wire::control::{code, Control, NONCE_LEN};
use mgrp_wire::VERSION;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Most connections that have not authenticated yet, in all.
pub const MAX_PRE_AUTH: usize = 32;
/// Most such connections from one source address.
pub const MAX_PRE_AUTH_PER_ADDR: usize = 4;

/// Why the server side of a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("hello refused: {0:?}")]
    Refused(HelloRefusal),
    #[error("no hello within the deadline")]
    TimedOut,
    #[error("{0}")]
    Proto(#[from] ProtoError),
}

/// The server side of one connection until it authenticates.
#[derive(Debug)]
pub struct ServerHandshake {
    frames: FrameBuf,
    deadline: Instant,
}

/// A client that proved it holds the key.
#[derive(Debug)]
pub struct Authenticated {
    pub client_nonce: [u8; NONCE_LEN],
    /// The connection's frames, now with the normal bound (and the hello's bytes counted).
    pub frames: FrameBuf,
}

impl ServerHandshake {
    pub fn new(now: Instant) -> ServerHandshake {
        ServerHandshake {
            frames: FrameBuf::pre_auth(),
            deadline: now + super::HELLO_TIMEOUT,
        }
    }

    /// How many bytes the driver may read now (never more than a hello).
    pub fn room(&self) -> usize {
        self.frames.room()
    }

    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        self.frames.handle_bytes(bytes);
    }

    pub fn poll_timeout(&self) -> Instant {
        self.deadline
    }

    /// Has the client authenticated? `Ok(None)`: not yet. `now_unix_ms` is the wall clock,
    /// to check the hello's timestamp; `guard` remembers nonces against replay.
    pub fn poll(
        mut self,
        now: Instant,
        now_unix_ms: u64,
        key: &Key,
        guard: &mut ReplayGuard,
    ) -> Result<Result<Authenticated, ServerHandshake>, HelloError> {
        let msg = match self.frames.poll_message()? {
            Some(m) => m,
            None if now >= self.deadline => return Err(HelloError::TimedOut),
            None => return Ok(Err(self)),
        };
        let Control::ClientHello {
            nonce,
            unix_ms,
            mac,
            ..
        } = msg
        else {
            return Err(ProtoError::Unexpected(kind(&msg)).into());
        };
        guard
            .check(key, &nonce, unix_ms, &mac, now_unix_ms)
            .map_err(HelloError::Refused)?;
        self.frames.authenticated();
        Ok(Ok(Authenticated {
            client_nonce: nonce,
            frames: self.frames,
        }))
    }
}

/// The server's answer to an authenticated hello.
pub fn server_hello(
    key: &Key,
    client_nonce: &[u8; NONCE_LEN],
    nonce: [u8; NONCE_LEN],
    session: u32,
) -> Control {
    Control::ServerHello {
        session,
        nonce,
        mac: key.server_mac(client_nonce, &nonce, session),
    }
}

/// What a full agent says before it closes.
pub fn busy(what: &str) -> Control {
    Control::Error {
        code: code::BUSY,
        message: format!("agent busy: {what}"),
    }
}

/// Admission of connections that have not authenticated yet. Each holds a driver's `handle`
/// (e.g. a socket clone) so an evicted one can be closed.
///
/// Per source address at most [`MAX_PRE_AUTH_PER_ADDR`] wait; a newcomer beyond that is
/// refused. When [`MAX_PRE_AUTH`] wait in all, a newcomer is still admitted and the oldest
/// connection of the address holding most slots is evicted: an attacker with many idle sockets
/// loses its own first, and a client that says hello at once is not starved.
#[derive(Debug)]
pub struct PreAuthGate<T> {
    entries: Vec<GateEntry<T>>,
    next_id: u64,
}

#[derive(Debug)]
struct GateEntry<T> {
    id: u64,
    addr: IpAddr,
    since: Instant,
    handle: T,
}

/// Why a new connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many connections waiting to authenticate from this address")]
pub struct GateFull;

/// An admitted connection's ticket, and the connection evicted to make room (if any).
#[derive(Debug)]
pub struct Admitted<T> {
    pub id: u64,
    pub evicted: Option<T>,
}

impl<T> Default for PreAuthGate<T> {
    fn default() -> Self {
        PreAuthGate {
            entries: Vec::new(),
            next_id: 0,
        }
    }
}

impl<T> PreAuthGate<T> {
    /// Admit a connection from `addr` at `now`, or say why not. Every admission is paired
    /// with [`PreAuthGate::leave`] once the connection authenticates or ends.
    pub fn enter(
        &mut self,
        now: Instant,
        addr: IpAddr,
        handle: T,
    ) -> Result<Admitted<T>, GateFull> {
        if self.count(addr) >= MAX_PRE_AUTH_PER_ADDR {
            return Err(GateFull);
        }
        let evicted = if self.entries.len() >= MAX_PRE_AUTH {
            let most = self
                .entries
                .iter()
                .map(|e| self.count(e.addr))
                .max()
                .unwrap_or(0);
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| self.count(e.addr) == most)
                .min_by_key(|(_, e)| e.since)
                .map(|(i, _)| i);
            victim.map(|i| self.entries.swap_remove(i).handle)
        } else {
            None
        };
        self.next_id += 1;
        self.entries.push(GateEntry {
            id: self.next_id,
            addr,
            since: now,
            handle,
        });
        Ok(Admitted {
            id: self.next_id,
            evicted,
        })
    }

    /// The connection `id` authenticated or ended (a no-op if it was evicted).
    pub fn leave(&mut self, id: u64) {
        self.entries.retain(|e| e.id != id);
    }

    pub fn waiting(&self) -> usize {
        self.entries.len()
    }

    fn count(&self, addr: IpAddr) -> usize {
        self.entries.iter().filter(|e| e.addr == addr).count()
    }
}

/// Why a client could not open a session. Each says what really happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the agent is full ({0}); try again later")]
    Busy(String),
    #[error("the agent refused the session: error {code}: {message}")]
    Refused { code: u16, message: String },
    #[error("the agent closed the connection without answering our hello (wrong key, or clocks more than 60 s apart?)")]
    ClosedAfterHello,
    #[error("no answer to our hello within {0:?} (agent overloaded or path lossy?)")]
    TimedOut(Duration),
    #[error("the agent could not prove it holds the key")]
    BadServerMac,
    #[error("unexpected answer to hello: {0}")]
    Unexpected(&'static str),
    #[error("malformed answer to hello: {0}")]
    Malformed(mgrp_wire::WireError),
}

/// The client side of the hello exchange.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    nonce: [u8; NONCE_LEN],
}

impl ClientHandshake {
    /// Start with a fresh random `nonce` and the wall clock; returns the hello to send.
    pub fn start(key: &Key, nonce: [u8; NONCE_LEN], unix_ms: u64) -> (ClientHandshake, Control) {
        let hello = Control::ClientHello {
            version: VERSION,
            nonce,
            unix_ms,
            mac: key.client_mac(&nonce, unix_ms),
        };
        (ClientHandshake { nonce }, hello)
    }

    /// The agent's answer: the session id, once the agent has proven it holds the key.
    pub fn handle(&self, key: &Key, msg: Control) -> Result<u32, AuthError> {
        match msg {
            Control::ServerHello {
                session,
                nonce,
                mac,
            } => {
                if key.verify_server(&self.nonce, &nonce, session, &mac) {
                    Ok(session)
                } else {
                    Err(AuthError::BadServerMac)
                }
            }
            Control::Error { code, message } if code == code::BUSY => Err(AuthError::Busy(message)),
            Control::Error { code, message } => Err(AuthError::Refused { code, message }),
            other => Err(AuthError::Unexpected(kind(&other))),
        }
    }

    /// What the end of the stream or a malformed frame before an answer means.
    pub fn handle_recv_error(&self, e: ProtoError) -> AuthError {
        match e {
            ProtoError::Malformed(w) => AuthError::Malformed(w),
            ProtoError::Closed => AuthError::ClosedAfterHello,
            ProtoError::Unexpected(k) => AuthError::Unexpected(k),
            ProtoError::PeerError { code, message } if code == code::BUSY => {
                AuthError::Busy(message)
            }
            ProtoError::PeerError { code, message } => AuthError::Refused { code, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_hex("00112233445566778899aabbccddeeff").unwrap()
    }

    fn frame(m: &Control) -> Vec<u8> {
        let mut f = Vec::new();
        m.encode(&mut f).unwrap();
        f
    }

    const NOW_MS: u64 = 1_700_000_000_000;

    #[test]
    fn a_good_hello_authenticates_and_the_client_verifies_the_server() {
        let (k, t0) = (key(), Instant::now());
        let (client, hello) = ClientHandshake::start(&k, [9; 16], NOW_MS);
        let mut hs = ServerHandshake::new(t0);
        let mut guard = ReplayGuard::default();
        let bytes = frame(&hello);
        // Split delivery: not yet, then done.
        hs.handle_bytes(&bytes[..20]);
        let mut hs = hs.poll(t0, NOW_MS, &k, &mut guard).unwrap().unwrap_err();
        hs.handle_bytes(&bytes[20..]);
        let auth = hs.poll(t0, NOW_MS, &k, &mut guard).unwrap().unwrap();
        assert_eq!(auth.client_nonce, [9; 16]);
        assert_eq!(auth.frames.bytes_in, bytes.len() as u64);
        assert_eq!(auth.frames.room(), super::super::frames::READ_CHUNK);
        let answer = server_hello(&k, &auth.client_nonce, [4; 16], 77);
        assert_eq!(client.handle(&k, answer.clone()), Ok(77));
        // An agent without the key cannot fake the answer.
        let other = Key::from_hex("ffffffffffffffffffffffffffffffff").unwrap();
        let fake = server_hello(&other, &auth.client_nonce, [4; 16], 77);
        assert_eq!(client.handle(&k, fake), Err(AuthError::BadServerMac));
        // Nor replay one made for another client nonce.
        let (client2, _) = ClientHandshake::start(&k, [8; 16], NOW_MS);
        assert_eq!(client2.handle(&k, answer), Err(AuthError::BadServerMac));
    }

    #[test]
    fn bad_mac_stale_and_replayed_hellos_are_refused() {
        let (k, t0) = (key(), Instant::now());
        let other = Key::from_hex("ffffffffffffffffffffffffffffffff").unwrap();
        let mut guard = ReplayGuard::default();
        let run = |hello: &Control, guard: &mut ReplayGuard| {
            let mut hs = ServerHandshake::new(t0);
            hs.handle_bytes(&frame(hello));
            hs.poll(t0, NOW_MS, &k, guard).map(|r| r.is_ok())
        };
        let (_, bad) = ClientHandshake::start(&other, [1; 16], NOW_MS);
        assert_eq!(
            run(&bad, &mut guard),
            Err(HelloError::Refused(HelloRefusal::BadMac))
        );
        let (_, stale) = ClientHandshake::start(&k, [2; 16], NOW_MS - 120_000);
        assert_eq!(
            run(&stale, &mut guard),
            Err(HelloError::Refused(HelloRefusal::Stale))
        );
        let (_, good) = ClientHandshake::start(&k, [3; 16], NOW_MS);
        assert_eq!(run(&good, &mut guard), Ok(true));
        assert_eq!(
            run(&good, &mut guard),
            Err(HelloError::Refused(HelloRefusal::Replayed))
        );
    }

    #[test]
    fn silence_times_out_and_other_first_messages_are_refused() {
        let (k, t0) = (key(), Instant::now());
        let mut guard = ReplayGuard::default();
        let hs = ServerHandshake::new(t0);
        assert_eq!(hs.poll_timeout(), t0 + super::super::HELLO_TIMEOUT);
        let hs = hs
            .poll(t0 + Duration::from_millis(999), NOW_MS, &k, &mut guard)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            hs.poll(t0 + Duration::from_secs(1), NOW_MS, &k, &mut guard)
                .unwrap_err(),
            HelloError::TimedOut
        );
        let mut hs = ServerHandshake::new(t0);
        hs.handle_bytes(&frame(&Control::TrainEnd { train: 1, sent: 1 }));
        assert_eq!(
            hs.poll(t0, NOW_MS, &k, &mut guard).unwrap_err(),
            HelloError::Proto(ProtoError::Unexpected("TrainEnd"))
        );
        // An oversized first frame: refused from its header, nothing more is read.
        let mut hs = ServerHandshake::new(t0);
        let mut big = vec![1u8];
        big.extend_from_slice(&(1u32 << 20).to_be_bytes());
        hs.handle_bytes(&big);
        assert!(matches!(
            hs.poll(t0, NOW_MS, &k, &mut guard),
            Err(HelloError::Proto(ProtoError::Malformed(_)))
        ));
    }

    #[test]
    fn client_errors_say_what_happened() {
        let k = key();
        let (c, _) = ClientHandshake::start(&k, [1; 16], NOW_MS);
        let w = Duration::from_secs(3);
        assert!(matches!(
            c.handle(&k, busy("64 sessions")),
            Err(AuthError::Busy(m)) if m.contains("64 sessions")
        ));
        assert_eq!(
            c.handle_recv_error(ProtoError::Closed),
            AuthError::ClosedAfterHello
        );
        assert!(AuthError::ClosedAfterHello
            .to_string()
            .contains("wrong key"));
        assert!(!AuthError::Busy("x".into()).to_string().contains("key"));
        assert!(!AuthError::TimedOut(w).to_string().contains("key"));
        assert_eq!(
            c.handle(&k, Control::Close),
            Err(AuthError::Unexpected("Close"))
        );
    }

    #[test]
    fn pre_auth_gate_bounds_per_address_and_evicts_the_greediest_oldest() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut g = PreAuthGate::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mut a_ids = Vec::new();
        for i in 0..MAX_PRE_AUTH_PER_ADDR as u64 {
            let t = g.enter(at(i), a, ("a", i)).unwrap();
            assert!(t.evicted.is_none());
            a_ids.push(t.id);
        }
        assert_eq!(g.enter(at(9), a, ("a", 9)).unwrap_err(), GateFull);
        // Fill the rest from single-socket addresses.
        for i in 0..(MAX_PRE_AUTH - MAX_PRE_AUTH_PER_ADDR) as u64 {
            let b = IpAddr::from([10, 0, 1, i as u8]);
            assert!(g.enter(at(100 + i), b, ("b", i)).unwrap().evicted.is_none());
        }
        assert_eq!(g.waiting(), MAX_PRE_AUTH);
        // A newcomer gets in; the greediest address loses its oldest connection.
        let c: IpAddr = "10.0.2.1".parse().unwrap();
        let t = g.enter(at(500), c, ("c", 0)).unwrap();
        assert_eq!(t.evicted, Some(("a", 0)));
        assert_eq!(g.waiting(), MAX_PRE_AUTH);
        // The evicted one leaving later changes nothing; others leave normally.
        g.leave(a_ids[0]);
        assert_eq!(g.waiting(), MAX_PRE_AUTH);
        g.leave(t.id);
        assert_eq!(g.waiting(), MAX_PRE_AUTH - 1);
        // `a` has room for one again.
        assert!(g.enter(at(600), a, ("a", 10)).is_ok());
    }

    #[test]
    fn with_one_socket_per_address_the_oldest_goes() {
        let t0 = Instant::now();
        let mut g = PreAuthGate::default();
        for i in 0..MAX_PRE_AUTH as u64 {
            let ip = IpAddr::from([10, 0, 3, i as u8]);
            g.enter(t0 + Duration::from_millis(i), ip, i).unwrap();
        }
        let t = g
            .enter(t0 + Duration::from_secs(1), "10.0.4.1".parse().unwrap(), 99)
            .unwrap();
        assert_eq!(t.evicted, Some(0));
    }
}
