//! Control messages between agents, on a TCP connection.
//!
//! Every message is a frame: `type (u8) | length (u32, big-endian) | payload`. A frame longer
//! than [`MAX_PAYLOAD`] is refused before it is buffered.

use crate::{Reader, WireError, VERSION};

/// Largest payload of one control frame (a report of 65 535 probes fits).
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Frame header: type and length.
pub const FRAME_HEADER: usize = 5;
/// Byte positions in a frame header.
pub mod field {
    use std::ops::Range;
    pub const TYPE: usize = 0;
    pub const LEN: Range<usize> = 1..5;
}
const _: () = assert!(field::LEN.end == FRAME_HEADER);
/// Payload of a client hello: version, nonce, unix ms, MAC. The only frame a connection may
/// send before it has authenticated, so a server buffers no more than this from a stranger.
pub const CLIENT_HELLO_LEN: usize = 1 + NONCE_LEN + 8 + MAC_LEN;
/// A whole client hello frame.
pub const CLIENT_HELLO_FRAME: usize = FRAME_HEADER + CLIENT_HELLO_LEN;
/// Longest error text carried.
pub const MAX_ERROR_TEXT: usize = 1024;
pub const NONCE_LEN: usize = 16;
pub const MAC_LEN: usize = 32;

/// One probe as the receiver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxRecord {
    pub index: u16,
    /// Bytes of the UDP payload received.
    pub size: u16,
    /// Kernel receive timestamp (CLOCK_REALTIME, ns).
    pub rx_ns: u64,
    /// Sender timestamp the probe carried, echoed back.
    pub sent_ns: u64,
}

/// Bytes of one [`RxRecord`] in a report: index, size, rx_ns, sent_ns.
pub const RX_RECORD_LEN: usize = 2 + 2 + 8 + 8;
/// Bytes of a report before its records: train, truncated flag, count.
pub const REPORT_BASE_LEN: usize = 4 + 1 + 2;

/// One data segment of a captured flow as the peer saw it arrive (two-sided Wren): the flow's
/// 4-tuple is said once, in [`Control::CaptureStart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegRecord {
    pub seq: u32,
    /// TCP payload bytes.
    pub len: u32,
    /// Kernel capture timestamp (CLOCK_REALTIME, ns).
    pub rx_ns: u64,
}

/// Bytes of one [`SegRecord`] in a batch: seq, len, rx_ns.
pub const SEG_RECORD_LEN: usize = 4 + 4 + 8;
/// Most records in one [`Control::CaptureBatch`] (64 KiB of records).
pub const MAX_CAPTURE_BATCH: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Client → server, first: proves knowledge of the key before the server says anything.
    /// `mac` = HMAC-SHA256(key, "mgrp1 client" ‖ nonce ‖ unix_ms).
    ClientHello {
        version: u8,
        nonce: [u8; NONCE_LEN],
        unix_ms: u64,
        mac: [u8; MAC_LEN],
    },
    /// Server → client: the session, and proof the server knows the key too.
    /// `mac` = HMAC-SHA256(key, "mgrp1 server" ‖ client nonce ‖ nonce ‖ session).
    ServerHello {
        session: u32,
        nonce: [u8; NONCE_LEN],
        mac: [u8; MAC_LEN],
    },
    /// Sender → receiver: a train of `count` probes, `bytes` in all, is about to start.
    TrainStart {
        train: u32,
        count: u16,
        bytes: u32,
        timeout_ms: u32,
    },
    /// Sender → receiver: the train's last probe has left; `sent` probes were sent.
    TrainEnd {
        train: u32,
        sent: u16,
    },
    /// Receiver → sender: what arrived of a train. `truncated` if the reflection budget cut it.
    TrainReport {
        train: u32,
        truncated: bool,
        received: Vec<RxRecord>,
    },
    /// Either way: something went wrong; the text is for people.
    Error {
        code: u16,
        message: String,
    },
    Close,
    /// Client → server, on a connection of its own: everything after this frame is a load
    /// flow (bulk TCP bytes the server reads and discards) for at most `max_ms`. A bottleneck
    /// locator (Tneck) drives such a flow while it traceroutes; the server sends nothing back.
    Load {
        max_ms: u32,
    },
    /// Client → server, on a connection of its own: capture the data segments `sender` sends
    /// to `receiver` (a local address of the server) as they arrive, for at most `max_ms` and
    /// `max_records`, and stream them back in [`Control::CaptureBatch`]es, then a
    /// [`Control::CaptureEnd`]. `sender` must be the asking host.
    CaptureStart {
        sender: std::net::SocketAddr,
        receiver: std::net::SocketAddr,
        max_ms: u32,
        max_records: u32,
    },
    /// Server → client: arrivals, in capture order (at most [`MAX_CAPTURE_BATCH`]).
    CaptureBatch {
        records: Vec<SegRecord>,
    },
    /// Server → client: the capture is over; `records` were sent, `dropped` were not (over the
    /// record limit, or lost by the kernel's capture ring).
    CaptureEnd {
        records: u64,
        dropped: u64,
    },
    /// Client → server, on a connection of its own: be this client's hands toward the agent
    /// at `dst` for at most `max_ms`: open a session there and run the [`Control::RelayCall`]s
    /// that follow (trains, a load flow) from this host. A Netmapper coordinator maps paths
    /// between other agents this way.
    RelayOpen {
        dst: std::net::SocketAddr,
        max_ms: u32,
    },
    /// Client → server: one call on the relayed session (JSON, at most [`MAX_RELAY_BODY`]).
    RelayCall {
        body: Vec<u8>,
    },
    /// Server → client: the answer to the call before it (JSON, at most [`MAX_RELAY_BODY`]).
    RelayReply {
        body: Vec<u8>,
    },
}

/// Largest JSON body of a relay call or reply (a train's result with hop replies is well under).
pub const MAX_RELAY_BODY: usize = 512 << 10;

fn addr_len(a: &std::net::SocketAddr) -> usize {
    1 + if a.is_ipv4() { 4 } else { 16 } + 2
}

fn put_addr(out: &mut Vec<u8>, a: &std::net::SocketAddr) {
    match a.ip() {
        std::net::IpAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.octets());
        }
        std::net::IpAddr::V6(v6) => {
            out.push(6);
            out.extend_from_slice(&v6.octets());
        }
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

fn get_addr(r: &mut Reader<'_>) -> Result<std::net::SocketAddr, WireError> {
    let ip: std::net::IpAddr = match r.u8()? {
        4 => std::net::Ipv4Addr::from(r.array::<4>()?).into(),
        6 => std::net::Ipv6Addr::from(r.array::<16>()?).into(),
        _ => return Err(WireError::Bad("address family")),
    };
    Ok(std::net::SocketAddr::new(ip, r.u16()?))
}

/// The part of an error text that is sent: at most [`MAX_ERROR_TEXT`] bytes, cut on a
/// character boundary.
fn error_text(m: &str) -> &str {
    let mut cut = m.len().min(MAX_ERROR_TEXT);
    while !m.is_char_boundary(cut) {
        cut -= 1;
    }
    &m[..cut]
}

mod ty {
    pub const CLIENT_HELLO: u8 = 1;
    pub const SERVER_HELLO: u8 = 2;
    pub const TRAIN_START: u8 = 3;
    pub const TRAIN_END: u8 = 4;
    pub const TRAIN_REPORT: u8 = 5;
    pub const ERROR: u8 = 6;
    pub const CLOSE: u8 = 7;
    pub const LOAD: u8 = 8;
    pub const CAPTURE_START: u8 = 9;
    pub const CAPTURE_BATCH: u8 = 10;
    pub const CAPTURE_END: u8 = 11;
    pub const RELAY_OPEN: u8 = 12;
    pub const RELAY_CALL: u8 = 13;
    pub const RELAY_REPLY: u8 = 14;
}

/// Error codes in [`Control::Error`].
pub mod code {
    pub const BAD_MESSAGE: u16 = 1;
    pub const BUSY: u16 = 2;
    pub const BUDGET: u16 = 3;
    pub const INTERNAL: u16 = 4;
    /// A capture request refused: not allowed, not possible here, or too many at once.
    pub const CAPTURE: u16 = 5;
    /// A relay was refused or failed (too many at once, the third agent unreachable).
    pub const RELAY: u16 = 6;
}

impl Control {
    /// Bytes this message takes on the wire, frame header included.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER
            + match self {
                Control::ClientHello { .. } => CLIENT_HELLO_LEN,
                Control::ServerHello { .. } => 4 + NONCE_LEN + MAC_LEN,
                Control::TrainStart { .. } => 4 + 2 + 4 + 4,
                Control::TrainEnd { .. } => 4 + 2,
                Control::TrainReport { received, .. } => {
                    REPORT_BASE_LEN + received.len() * RX_RECORD_LEN
                }
                Control::Error { message, .. } => 2 + 2 + error_text(message).len(),
                Control::Close => 0,
                Control::Load { .. } => 4,
                Control::CaptureStart {
                    sender, receiver, ..
                } => addr_len(sender) + addr_len(receiver) + 4 + 4,
                Control::CaptureBatch { records } => 2 + records.len() * SEG_RECORD_LEN,
                Control::CaptureEnd { .. } => 8 + 8,
                Control::RelayOpen { dst, .. } => addr_len(dst) + 4,
                Control::RelayCall { body } | Control::RelayReply { body } => body.len(),
            }
    }

    /// Append this message as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let start = out.len();
        out.push(0);
        out.extend_from_slice(&[0; 4]);
        let t = match self {
            Control::ClientHello {
                version,
                nonce,
                unix_ms,
                mac,
            } => {
                out.push(*version);
                out.extend_from_slice(nonce);
                out.extend_from_slice(&unix_ms.to_be_bytes());
                out.extend_from_slice(mac);
                ty::CLIENT_HELLO
            }
            Control::ServerHello {
                session,
                nonce,
                mac,
            } => {
                out.extend_from_slice(&session.to_be_bytes());
                out.extend_from_slice(nonce);
                out.extend_from_slice(mac);
                ty::SERVER_HELLO
            }
            Control::TrainStart {
                train,
                count,
                bytes,
                timeout_ms,
            } => {
                out.extend_from_slice(&train.to_be_bytes());
                out.extend_from_slice(&count.to_be_bytes());
                out.extend_from_slice(&bytes.to_be_bytes());
                out.extend_from_slice(&timeout_ms.to_be_bytes());
                ty::TRAIN_START
            }
            Control::TrainEnd { train, sent } => {
                out.extend_from_slice(&train.to_be_bytes());
                out.extend_from_slice(&sent.to_be_bytes());
                ty::TRAIN_END
            }
            Control::TrainReport {
                train,
                truncated,
                received,
            } => {
                if received.len() > u16::MAX as usize {
                    out.truncate(start);
                    return Err(WireError::TooLarge {
                        len: received.len(),
                        max: u16::MAX as usize,
                    });
                }
                out.extend_from_slice(&train.to_be_bytes());
                out.push(*truncated as u8);
                out.extend_from_slice(&(received.len() as u16).to_be_bytes());
                for r in received {
                    out.extend_from_slice(&r.index.to_be_bytes());
                    out.extend_from_slice(&r.size.to_be_bytes());
                    out.extend_from_slice(&r.rx_ns.to_be_bytes());
                    out.extend_from_slice(&r.sent_ns.to_be_bytes());
                }
                ty::TRAIN_REPORT
            }
            Control::Error { code, message } => {
                let m = error_text(message);
                out.extend_from_slice(&code.to_be_bytes());
                out.extend_from_slice(&(m.len() as u16).to_be_bytes());
                out.extend_from_slice(m.as_bytes());
                ty::ERROR
            }
            Control::Close => ty::CLOSE,
            Control::Load { max_ms } => {
                out.extend_from_slice(&max_ms.to_be_bytes());
                ty::LOAD
            }
            Control::CaptureStart {
                sender,
                receiver,
                max_ms,
                max_records,
            } => {
                put_addr(out, sender);
                put_addr(out, receiver);
                out.extend_from_slice(&max_ms.to_be_bytes());
                out.extend_from_slice(&max_records.to_be_bytes());
                ty::CAPTURE_START
            }
            Control::CaptureBatch { records } => {
                if records.len() > MAX_CAPTURE_BATCH {
                    out.truncate(start);
                    return Err(WireError::TooLarge {
                        len: records.len(),
                        max: MAX_CAPTURE_BATCH,
                    });
                }
                out.extend_from_slice(&(records.len() as u16).to_be_bytes());
                for r in records {
                    out.extend_from_slice(&r.seq.to_be_bytes());
                    out.extend_from_slice(&r.len.to_be_bytes());
                    out.extend_from_slice(&r.rx_ns.to_be_bytes());
                }
                ty::CAPTURE_BATCH
            }
            Control::CaptureEnd { records, dropped } => {
                out.extend_from_slice(&records.to_be_bytes());
                out.extend_from_slice(&dropped.to_be_bytes());
                ty::CAPTURE_END
            }
            Control::RelayOpen { dst, max_ms } => {
                put_addr(out, dst);
                out.extend_from_slice(&max_ms.to_be_bytes());
                ty::RELAY_OPEN
            }
            Control::RelayCall { body } | Control::RelayReply { body } => {
                if body.len() > MAX_RELAY_BODY {
                    out.truncate(start);
                    return Err(WireError::TooLarge {
                        len: body.len(),
                        max: MAX_RELAY_BODY,
                    });
                }
                out.extend_from_slice(body);
                if matches!(self, Control::RelayCall { .. }) {
                    ty::RELAY_CALL
                } else {
                    ty::RELAY_REPLY
                }
            }
        };
        let len = out.len() - start - FRAME_HEADER;
        let frame = &mut out[start..];
        frame[field::TYPE] = t;
        frame[field::LEN].copy_from_slice(&(len as u32).to_be_bytes());
        Ok(())
    }

    /// Decode one frame from the front of `buf`: `Ok(None)` if more bytes are needed,
    /// `Ok(Some((msg, consumed)))` otherwise. An over-long length is an error at once, so a
    /// reader never buffers more than [`MAX_PAYLOAD`] + header for one frame.
    pub fn decode_frame(buf: &[u8]) -> Result<Option<(Control, usize)>, WireError> {
        Self::decode_frame_within(buf, MAX_PAYLOAD)
    }

    /// Like [`Control::decode_frame`], refusing any payload longer than `max` (before a peer
    /// has authenticated, `max` is [`CLIENT_HELLO_LEN`]).
    pub fn decode_frame_within(
        buf: &[u8],
        max: usize,
    ) -> Result<Option<(Control, usize)>, WireError> {
        if buf.len() < FRAME_HEADER {
            return Ok(None);
        }
        let t = buf[field::TYPE];
        let len = u32::from_be_bytes(buf[field::LEN].try_into().expect("4 bytes")) as usize;
        let max = max.min(MAX_PAYLOAD);
        if len > max {
            return Err(WireError::TooLarge { len, max });
        }
        if buf.len() < FRAME_HEADER + len {
            return Ok(None);
        }
        let msg = Self::decode_payload(t, &buf[FRAME_HEADER..FRAME_HEADER + len])?;
        Ok(Some((msg, FRAME_HEADER + len)))
    }

    fn decode_payload(t: u8, p: &[u8]) -> Result<Control, WireError> {
        let mut r = Reader::new(p);
        let msg = match t {
            ty::CLIENT_HELLO => {
                let version = r.u8()?;
                if version != VERSION {
                    return Err(WireError::Version(version));
                }
                Control::ClientHello {
                    version,
                    nonce: r.array()?,
                    unix_ms: r.u64()?,
                    mac: r.array()?,
                }
            }
            ty::SERVER_HELLO => Control::ServerHello {
                session: r.u32()?,
                nonce: r.array()?,
                mac: r.array()?,
            },
            ty::TRAIN_START => {
                let m = Control::TrainStart {
                    train: r.u32()?,
                    count: r.u16()?,
                    bytes: r.u32()?,
                    timeout_ms: r.u32()?,
                };
                if let Control::TrainStart { count: 0, .. } = m {
                    return Err(WireError::Bad("empty train"));
                }
                m
            }
            ty::TRAIN_END => Control::TrainEnd {
                train: r.u32()?,
                sent: r.u16()?,
            },
            ty::TRAIN_REPORT => {
                let train = r.u32()?;
                let truncated = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Bad("truncated flag")),
                };
                let n = r.u16()? as usize;
                if r.remaining() != n * RX_RECORD_LEN {
                    return Err(WireError::Bad("report length disagrees with its count"));
                }
                let mut received = Vec::with_capacity(n);
                for _ in 0..n {
                    received.push(RxRecord {
                        index: r.u16()?,
                        size: r.u16()?,
                        rx_ns: r.u64()?,
                        sent_ns: r.u64()?,
                    });
                }
                Control::TrainReport {
                    train,
                    truncated,
                    received,
                }
            }
            ty::ERROR => {
                let code = r.u16()?;
                let n = r.u16()? as usize;
                if n > MAX_ERROR_TEXT {
                    return Err(WireError::TooLarge {
                        len: n,
                        max: MAX_ERROR_TEXT,
                    });
                }
                let text = r.take(n)?;
                let message = String::from_utf8(text.to_vec())
                    .map_err(|_| WireError::Bad("error text is not UTF-8"))?;
                Control::Error { code, message }
            }
            ty::CLOSE => Control::Close,
            ty::LOAD => Control::Load { max_ms: r.u32()? },
            ty::CAPTURE_START => Control::CaptureStart {
                sender: get_addr(&mut r)?,
                receiver: get_addr(&mut r)?,
                max_ms: r.u32()?,
                max_records: r.u32()?,
            },
            ty::CAPTURE_BATCH => {
                let n = r.u16()? as usize;
                if n > MAX_CAPTURE_BATCH {
                    return Err(WireError::TooLarge {
                        len: n,
                        max: MAX_CAPTURE_BATCH,
                    });
                }
                if r.remaining() != n * SEG_RECORD_LEN {
                    return Err(WireError::Bad("batch length disagrees with its count"));
                }
                let mut records = Vec::with_capacity(n);
                for _ in 0..n {
                    records.push(SegRecord {
                        seq: r.u32()?,
                        len: r.u32()?,
                        rx_ns: r.u64()?,
                    });
                }
                Control::CaptureBatch { records }
            }
            ty::CAPTURE_END => Control::CaptureEnd {
                records: r.u64()?,
                dropped: r.u64()?,
            },
            ty::RELAY_OPEN => Control::RelayOpen {
                dst: get_addr(&mut r)?,
                max_ms: r.u32()?,
            },
            ty::RELAY_CALL | ty::RELAY_REPLY => {
                let n = r.remaining();
                if n > MAX_RELAY_BODY {
                    return Err(WireError::TooLarge {
                        len: n,
                        max: MAX_RELAY_BODY,
                    });
                }
                let body = r.take(n)?.to_vec();
                if t == ty::RELAY_CALL {
                    Control::RelayCall { body }
                } else {
                    Control::RelayReply { body }
                }
            }
            other => return Err(WireError::UnknownType(other)),
        };
        if r.remaining() != 0 {
            return Err(WireError::Bad("trailing bytes in control message"));
        }
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Control> {
        vec![
            Control::ClientHello {
                version: VERSION,
                nonce: [1; 16],
                unix_ms: 5,
                mac: [2; 32],
            },
            Control::ServerHello {
                session: 9,
                nonce: [3; 16],
                mac: [4; 32],
            },
            Control::TrainStart {
                train: 1,
                count: 100,
                bytes: 100_000,
                timeout_ms: 2000,
            },
            Control::TrainEnd {
                train: 1,
                sent: 100,
            },
            Control::TrainReport {
                train: 1,
                truncated: false,
                received: vec![
                    RxRecord {
                        index: 0,
                        size: 1000,
                        rx_ns: 77,
                        sent_ns: 66
                    };
                    3
                ],
            },
            Control::Error {
                code: code::BUSY,
                message: "busy — try later".into(),
            },
            Control::Close,
            Control::Load { max_ms: 30_000 },
            Control::CaptureStart {
                sender: "10.0.0.1:40000".parse().unwrap(),
                receiver: "[fd00::2]:5001".parse().unwrap(),
                max_ms: 60_000,
                max_records: 1_000_000,
            },
            Control::CaptureBatch {
                records: vec![
                    SegRecord {
                        seq: 7,
                        len: 1448,
                        rx_ns: 99
                    };
                    5
                ],
            },
            Control::CaptureEnd {
                records: 5,
                dropped: 1,
            },
            Control::RelayOpen {
                dst: "[2001:db8::2]:7240".parse().unwrap(),
                max_ms: 60_000,
            },
            Control::RelayCall {
                body: b"{\"Train\":{}}".to_vec(),
            },
            Control::RelayReply { body: Vec::new() },
        ]
    }

    #[test]
    fn oversized_relay_bodies_are_refused_both_ways() {
        let big = Control::RelayCall {
            body: vec![b' '; MAX_RELAY_BODY + 1],
        };
        assert!(matches!(
            big.encode(&mut Vec::new()),
            Err(WireError::TooLarge { .. })
        ));
        let mut frame = vec![ty::RELAY_REPLY];
        frame.extend_from_slice(&((MAX_RELAY_BODY + 1) as u32).to_be_bytes());
        frame.resize(FRAME_HEADER + MAX_RELAY_BODY + 1, b' ');
        assert!(Control::decode_frame(&frame).is_err());
    }

    #[test]
    fn oversized_capture_batches_are_refused_both_ways() {
        let big = Control::CaptureBatch {
            records: vec![
                SegRecord {
                    seq: 0,
                    len: 0,
                    rx_ns: 0
                };
                MAX_CAPTURE_BATCH + 1
            ],
        };
        assert!(big.encode(&mut Vec::new()).is_err());
        // A count over the limit on the wire, whatever follows.
        let mut f = vec![ty::CAPTURE_BATCH, 0, 0, 0, 2];
        f.extend(((MAX_CAPTURE_BATCH + 1) as u16).to_be_bytes());
        assert!(matches!(
            Control::decode_frame(&f),
            Err(WireError::TooLarge { .. })
        ));
        // A bad address family.
        let mut f = vec![ty::CAPTURE_START, 0, 0, 0, 1, 9];
        f[4] = 1;
        assert!(Control::decode_frame(&f).is_err());
    }

    #[test]
    fn encoded_len_matches_encoding() {
        for m in samples() {
            let mut f = Vec::new();
            m.encode(&mut f).unwrap();
            assert_eq!(m.encoded_len(), f.len(), "{m:?}");
        }
        assert_eq!(samples()[0].encoded_len(), CLIENT_HELLO_FRAME);
        let long = Control::Error {
            code: 1,
            message: "é".repeat(5000),
        };
        let mut f = Vec::new();
        long.encode(&mut f).unwrap();
        assert_eq!(long.encoded_len(), f.len());
    }

    #[test]
    fn round_trip_and_streaming() {
        let mut stream = Vec::new();
        for m in samples() {
            m.encode(&mut stream).unwrap();
        }
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((m, n)) = Control::decode_frame(&stream[pos..]).unwrap() {
            got.push(m);
            pos += n;
        }
        assert_eq!(got, samples());
        // Every strict prefix of a frame asks for more rather than failing.
        let mut one = Vec::new();
        samples()[4].encode(&mut one).unwrap();
        for cut in 0..one.len() {
            assert_eq!(Control::decode_frame(&one[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn refuses_oversized_and_malformed() {
        let mut f = vec![ty::TRAIN_END];
        f.extend_from_slice(&((MAX_PAYLOAD + 1) as u32).to_be_bytes());
        assert!(matches!(
            Control::decode_frame(&f),
            Err(WireError::TooLarge { .. })
        ));
        // Before authentication only a hello's worth is accepted, judged from the header alone.
        let mut f = vec![ty::CLIENT_HELLO];
        f.extend_from_slice(&((CLIENT_HELLO_LEN + 1) as u32).to_be_bytes());
        assert_eq!(
            Control::decode_frame_within(&f, CLIENT_HELLO_LEN),
            Err(WireError::TooLarge {
                len: CLIENT_HELLO_LEN + 1,
                max: CLIENT_HELLO_LEN
            })
        );
        let mut f = Vec::new();
        Control::TrainEnd { train: 1, sent: 2 }
            .encode(&mut f)
            .unwrap();
        f[0] = 200;
        assert_eq!(Control::decode_frame(&f), Err(WireError::UnknownType(200)));
        let mut f = Vec::new();
        Control::Close.encode(&mut f).unwrap();
        f[4] = 1;
        f.push(0);
        assert!(Control::decode_frame(&f).is_err(), "trailing bytes");
        let long = Control::Error {
            code: 1,
            message: "é".repeat(2000),
        };
        let mut f = Vec::new();
        long.encode(&mut f).unwrap();
        let (m, _) = Control::decode_frame(&f).unwrap().unwrap();
        let Control::Error { message, .. } = m else {
            panic!("error expected")
        };
        assert!(message.len() <= MAX_ERROR_TEXT);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = Control::decode_frame(&bytes);
            if !bytes.is_empty() {
                let _ = Control::decode_payload(bytes[0], &bytes[1..]);
            }
        }

        #[test]
        fn reports_round_trip(train: u32, truncated: bool,
                              recs in proptest::collection::vec((any::<u16>(), any::<u16>(), any::<u64>(), any::<u64>()), 0..200)) {
            let received: Vec<RxRecord> = recs.into_iter().map(|(index, size, rx_ns, sent_ns)| RxRecord { index, size, rx_ns, sent_ns }).collect();
            let m = Control::TrainReport { train, truncated, received };
            let mut f = Vec::new();
            m.encode(&mut f).unwrap();
            let (d, n) = Control::decode_frame(&f).unwrap().unwrap();
            prop_assert_eq!(n, f.len());
            prop_assert_eq!(d, m);
        }
    }
}
