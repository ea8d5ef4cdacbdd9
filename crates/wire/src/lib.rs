//! The MGRP wire format, over UDP, as laid out in `docs/protocol.md`.
//!
//! Two kinds of message:
//! - [`probe`]: the UDP probe packet, exactly the size the estimator asked for, with a fixed
//!   header, an optional rider descriptor and tag, and padding;
//! - [`control`]: length-prefixed messages on the TCP control channel between agents
//!   (authentication, train announcements, per-probe receive reports).
//!
//! Decoders are total: every byte string decodes to a value or a [`WireError`], never a panic.
//! Nothing here touches a socket or a clock.

pub mod control;
pub mod probe;

/// Protocol version carried in every probe and in the control handshake.
pub const VERSION: u8 = 2;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("unsupported protocol version {0}")]
    Version(u8),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("bad field: {0}")]
    Bad(&'static str),
    #[error("too large: {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
}

/// A cursor over bytes whose reads fail instead of panicking.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(WireError::Truncated {
                need: self.pos.saturating_add(n),
                have: self.buf.len(),
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}
