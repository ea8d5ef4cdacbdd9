//! Control-frame reassembly from a byte stream, with byte accounting. Before authentication
//! only a client hello's worth is buffered; a stranger cannot make the agent hold more.

use super::ProtoError;
use mgrp_wire::control::{Control, CLIENT_HELLO_FRAME, CLIENT_HELLO_LEN, MAX_PAYLOAD};

/// Most bytes a driver reads from the stream at once, after authentication.
pub const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug)]
pub struct FrameBuf {
    buf: Vec<u8>,
    /// Longest payload accepted now.
    max_payload: usize,
    /// Bytes read from the peer on this connection.
    pub bytes_in: u64,
}

impl FrameBuf {
    /// Before authentication: one hello frame at most.
    pub fn pre_auth() -> FrameBuf {
        FrameBuf {
            buf: Vec::with_capacity(CLIENT_HELLO_FRAME),
            max_payload: CLIENT_HELLO_LEN,
            bytes_in: 0,
        }
    }

    /// After authentication (or on the client side, talking to an authenticated agent).
    pub fn open() -> FrameBuf {
        FrameBuf {
            buf: Vec::new(),
            max_payload: MAX_PAYLOAD,
            bytes_in: 0,
        }
    }

    /// The peer has authenticated: the normal frame bound applies from now.
    pub fn authenticated(&mut self) {
        self.max_payload = MAX_PAYLOAD;
    }

    /// How many bytes the driver may read now. Before authentication, no more than what
    /// completes one hello frame: later bytes stay in the kernel, not here.
    pub fn room(&self) -> usize {
        if self.max_payload == CLIENT_HELLO_LEN {
            CLIENT_HELLO_FRAME.saturating_sub(self.buf.len())
        } else {
            READ_CHUNK
        }
    }

    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        self.bytes_in += bytes.len() as u64;
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Drop what is buffered and not decoded, saying how much (a load flow's first bytes,
    /// read together with the frame that announced it).
    pub fn discard(&mut self) -> usize {
        let n = self.buf.len();
        self.buf.clear();
        n
    }

    /// The next complete message, if any. A frame longer than allowed now is an error as soon
    /// as its header is in.
    pub fn poll_message(&mut self) -> Result<Option<Control>, ProtoError> {
        match Control::decode_frame_within(&self.buf, self.max_payload)? {
            Some((msg, n)) => {
                self.buf.drain(..n);
                Ok(Some(msg))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_wire::control::FRAME_HEADER;
    use mgrp_wire::WireError;

    fn hello() -> Vec<u8> {
        let mut f = Vec::new();
        Control::ClientHello {
            version: mgrp_wire::VERSION,
            nonce: [1; 16],
            unix_ms: 2,
            mac: [3; 32],
        }
        .encode(&mut f)
        .unwrap();
        f
    }

    #[test]
    fn pre_auth_reads_at_most_one_hello() {
        let mut f = FrameBuf::pre_auth();
        assert_eq!(f.room(), CLIENT_HELLO_FRAME);
        let h = hello();
        f.handle_bytes(&h[..10]);
        assert_eq!(f.room(), CLIENT_HELLO_FRAME - 10);
        assert_eq!(f.poll_message(), Ok(None));
        f.handle_bytes(&h[10..]);
        assert_eq!(f.room(), 0);
        assert!(matches!(
            f.poll_message(),
            Ok(Some(Control::ClientHello { .. }))
        ));
        assert_eq!(f.bytes_in, h.len() as u64);
        f.authenticated();
        assert_eq!(f.room(), READ_CHUNK);
    }

    #[test]
    fn oversized_pre_auth_frame_is_refused_from_its_header() {
        let mut f = FrameBuf::pre_auth();
        let mut big = vec![1u8]; // a hello's type
        big.extend_from_slice(&(1u32 << 20).to_be_bytes());
        f.handle_bytes(&big);
        assert_eq!(f.buffered(), FRAME_HEADER);
        assert_eq!(
            f.poll_message(),
            Err(ProtoError::Malformed(WireError::TooLarge {
                len: 1 << 20,
                max: CLIENT_HELLO_LEN
            }))
        );
        // The same frame is fine once authenticated (the normal bound).
        let mut f = FrameBuf::open();
        f.handle_bytes(&big);
        assert_eq!(f.poll_message(), Ok(None));
    }
}
