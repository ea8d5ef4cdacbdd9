//! Framed control messages over a TCP stream, with byte accounting.

use crate::Error;
use mgrp_wire::control::Control;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub struct FrameIo {
    pub stream: TcpStream,
    pub peer: String,
    buf: Vec<u8>,
    /// Bytes read from and written to the peer on this connection.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl FrameIo {
    pub fn new(stream: TcpStream) -> FrameIo {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let _ = stream.set_nodelay(true);
        FrameIo {
            stream,
            peer,
            buf: Vec::new(),
            bytes_in: 0,
            bytes_out: 0,
        }
    }

    /// The kernel's smoothed round-trip time of this connection and its mean deviation
    /// (`TCP_INFO`): an RTT measurement that costs no packets of its own.
    pub fn tcp_rtt(&self) -> Option<(Duration, Duration)> {
        use std::os::fd::AsRawFd;
        // SAFETY: tcp_info is plain old data; getsockopt writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        (rc == 0 && info.tcpi_rtt > 0).then(|| {
            (
                Duration::from_micros(info.tcpi_rtt.into()),
                Duration::from_micros(info.tcpi_rttvar.into()),
            )
        })
    }

    /// Encode and send one message.
    pub fn send(&mut self, msg: &Control) -> Result<usize, Error> {
        let mut out = Vec::new();
        msg.encode(&mut out)
            .map_err(|e| Error::BadInput(format!("cannot encode control message: {e}")))?;
        self.stream
            .write_all(&out)
            .map_err(|e| Error::io(format!("send to {}", self.peer), e))?;
        self.bytes_out += out.len() as u64;
        Ok(out.len())
    }

    /// Size a message would have on the wire.
    pub fn encoded_len(msg: &Control) -> usize {
        let mut out = Vec::new();
        let _ = msg.encode(&mut out);
        out.len()
    }

    /// The next message, waiting at most until `deadline`: `Ok(None)` on timeout. A closed
    /// connection or a malformed frame is an error.
    pub fn recv(&mut self, deadline: Instant) -> Result<Option<Control>, Error> {
        loop {
            match Control::decode_frame(&self.buf) {
                Ok(Some((msg, n))) => {
                    self.buf.drain(..n);
                    return Ok(Some(msg));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Error::Protocol {
                        peer: self.peer.clone(),
                        why: e.to_string(),
                    })
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait = (deadline - now).max(Duration::from_millis(1));
            self.stream
                .set_read_timeout(Some(wait))
                .map_err(|e| Error::io("set read timeout", e))?;
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(Error::Protocol {
                        peer: self.peer.clone(),
                        why: "connection closed".into(),
                    })
                }
                Ok(n) => {
                    self.bytes_in += n as u64;
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if crate::transient(&e) => {}
                Err(e) => return Err(Error::io(format!("read from {}", self.peer), e)),
            }
        }
    }
}
