//! A control connection's socket: bounded reads with a deadline, whole writes, and the
//! kernel's RTT. What the bytes mean is decided in [`crate::proto`].

use crate::proto::frames::FrameBuf;
use crate::proto::ProtoError;
use crate::Error;
use mgrp_wire::control::Control;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Why a read ended without bytes.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection (EOF or reset).
    Closed,
    Io(std::io::Error),
}

/// Ethernet (14) + IPv4 (20) + TCP with the timestamp option (32) bytes of a segment.
pub const TCP_FRAME_OVERHEAD: u64 = 66;

pub struct Conn {
    pub stream: TcpStream,
    pub peer: String,
    chunk: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            peer,
            chunk: vec![0; crate::proto::frames::READ_CHUNK],
        }
    }

    /// The kernel's smoothed round-trip time of this connection and its mean deviation
    /// (`TCP_INFO`): an RTT measurement that costs no packets of its own.
    /// Bytes this end of the connection put on the wire so far, as a link's counters see them:
    /// the payload the peer acknowledged plus Ethernet/IP/TCP headers (with timestamps) of every
    /// segment sent, pure ACKs included (`TCP_INFO`'s `bytes_acked` and `segs_out`).
    pub fn wire_bytes_sent(&self) -> Option<u64> {
        let info = crate::sock::tcp_info(&self.stream).ok()?;
        Some(info.tcpi_bytes_acked + u64::from(info.tcpi_segs_out) * TCP_FRAME_OVERHEAD)
    }

    pub fn tcp_rtt(&self) -> Option<(Duration, Duration)> {
        let info = crate::sock::tcp_info(&self.stream).ok()?;
        (info.tcpi_rtt > 0).then(|| {
            (
                Duration::from_micros(info.tcpi_rtt.into()),
                Duration::from_micros(info.tcpi_rttvar.into()),
            )
        })
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.stream
            .write_all(bytes)
            .map_err(|e| Error::io(format!("send to {}", self.peer), e))
    }

    /// Read at most `room` bytes, waiting until `deadline`: `Ok(None)` if nothing came.
    pub fn read(&mut self, room: usize, deadline: Instant) -> Result<Option<&[u8]>, ReadError> {
        let room = room.min(self.chunk.len());
        if room == 0 {
            // Nothing may be read now (a full pre-auth frame is being judged): just wait.
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            return Ok(None);
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.stream
            .set_read_timeout(Some(wait))
            .map_err(ReadError::Io)?;
        match self.stream.read(&mut self.chunk[..room]) {
            Ok(0) => Err(ReadError::Closed),
            Ok(n) => Ok(Some(&self.chunk[..n])),
            Err(e) if crate::transient(&e) => Ok(None),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Err(ReadError::Closed),
            Err(e) => Err(ReadError::Io(e)),
        }
    }
}

/// Why the client side could not read the next message.
#[derive(Debug)]
pub enum RecvError {
    Proto(ProtoError),
    Io(std::io::Error),
}

/// The client side: a connection to an authenticated agent, framed.
pub struct ClientConn {
    pub conn: Conn,
    frames: FrameBuf,
}

impl ClientConn {
    pub fn new(stream: TcpStream) -> ClientConn {
        ClientConn {
            conn: Conn::new(stream),
            frames: FrameBuf::open(),
        }
    }

    pub fn send(&mut self, msg: &Control) -> Result<(), Error> {
        self.conn.write(&crate::proto::encode(msg))
    }

    /// The next message, waiting at most until `deadline`: `Ok(None)` on timeout.
    pub fn recv(&mut self, deadline: Instant) -> Result<Option<Control>, RecvError> {
        loop {
            if let Some(m) = self.frames.poll_message().map_err(RecvError::Proto)? {
                return Ok(Some(m));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            match self.conn.read(self.frames.room(), deadline) {
                Ok(Some(b)) => self.frames.handle_bytes(b),
                Ok(None) => {}
                Err(ReadError::Closed) => return Err(RecvError::Proto(ProtoError::Closed)),
                Err(ReadError::Io(e)) => return Err(RecvError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// What a connection sent is counted as frames: the payload once the peer acknowledged it,
    /// and headers for every segment (the handshake's and pure ACKs too).
    #[test]
    fn wire_bytes_count_payload_and_headers() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = Conn::new(TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let (mut peer, _) = l.accept().unwrap();
        let before = c.wire_bytes_sent().unwrap();
        // The SYN and the handshake's ACK at least.
        assert!(before >= 2 * TCP_FRAME_OVERHEAD, "{before}");
        c.write(&[7u8; 1000]).unwrap();
        let mut got = [0u8; 1000];
        peer.read_exact(&mut got).unwrap();
        // The peer's ACK may lag the read: wait for it, bounded.
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut after = c.wire_bytes_sent().unwrap();
        while after < before + 1000 + TCP_FRAME_OVERHEAD && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            after = c.wire_bytes_sent().unwrap();
        }
        // One 1000-byte segment (loopback's MSS is far larger): its payload and one header.
        assert!(
            after >= before + 1000 + TCP_FRAME_OVERHEAD,
            "{before} -> {after}"
        );
        assert!(
            after <= before + 1000 + 3 * TCP_FRAME_OVERHEAD,
            "{before} -> {after}"
        );
    }
}
