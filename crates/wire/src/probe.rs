//! The probe packet: the UDP payload of one probe, exactly as large as asked for.
//!
//! ```text
//!  0       1       2               4                               8
//!  +-------+-------+---------------+-------------------------------+
//!  |version| kind  |     flags     |          session id           |
//!  +-------+-------+---------------+-------------------------------+
//!  |           sequence            |           train id            |
//!  +---------------+---------------+-------------------------------+
//!  |  train index  |  header len   |   sender timestamp (ns, 64)   |
//!  +---------------+---------------+-------------------------------+
//!  |  (timestamp)                  |  train len    |   reserved    |
//!  +-------------------------------+---------------+---------------+ 32
//!  | rider descriptor (12) + rider bytes + tag (16)   -- if RIDER  |
//!  | ... more riders, each as above, while the last one says MORE   |
//!  +---------------------------------------------------------------+ header len
//!  | padding (zeros) up to the probe size                           |
//!  +---------------------------------------------------------------+
//! ```
//! All integers are big-endian. `header len` counts everything before the padding.

use crate::{Reader, WireError, VERSION};

/// `kind` of a probe packet.
pub const KIND_PROBE: u8 = 1;
/// Fixed header bytes: the smallest probe.
pub const HEADER_LEN: usize = 32;
/// Rider descriptor bytes (before the rider's own bytes).
pub const RIDER_DESC_LEN: usize = 12;
/// Authentication tag bytes after a rider.
pub const TAG_LEN: usize = 16;
/// What each rider costs beside its own bytes: its descriptor and tag.
pub const RIDER_OVERHEAD: usize = RIDER_DESC_LEN + TAG_LEN;
/// Rider flag: this fragment ends its packet.
pub const RIDER_LAST: u8 = 1 << 0;
/// Rider flag: another rider follows this one's tag (a probe's padding can carry the tail of
/// one packet and the head of the next: one rider per probe left up to half the padding of a
/// probe smaller than the host's packets empty).
pub const RIDER_MORE: u8 = 1 << 1;
/// Largest UDP payload over IPv4.
pub const MAX_PROBE: usize = 65_507;

/// Flag: the estimator allows this probe's padding to carry a rider.
pub const FLAG_MAY_CARRY: u16 = 1 << 0;
/// Flag: a rider descriptor, rider and tag follow the header.
pub const FLAG_RIDER: u16 = 1 << 1;
/// Flag: last probe of its train.
pub const FLAG_LAST: u16 = 1 << 2;
const KNOWN_FLAGS: u16 = FLAG_MAY_CARRY | FLAG_RIDER | FLAG_LAST;

/// Byte positions of the fixed header's fields (the diagram above).
pub mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const SESSION: Range<usize> = 4..8;
    pub const SEQ: Range<usize> = 8..12;
    pub const TRAIN: Range<usize> = 12..16;
    pub const INDEX: Range<usize> = 16..18;
    pub const HEADER_LEN: Range<usize> = 18..20;
    pub const SENT_NS: Range<usize> = 20..28;
    pub const TRAIN_LEN: Range<usize> = 28..30;
    pub const RESERVED: Range<usize> = 30..32;
}

/// Byte positions in the rider descriptor, from its start (right after the fixed header).
pub mod rider_field {
    use std::ops::Range;
    pub const FRAG_ID: Range<usize> = 0..4;
    pub const OFFSET: Range<usize> = 4..6;
    pub const LEN: Range<usize> = 6..8;
    pub const PROTO: usize = 8;
    pub const FLAGS: usize = 9;
    pub const RESERVED: Range<usize> = 10..12;
}

const _: () = assert!(field::RESERVED.end == HEADER_LEN);
const _: () = assert!(rider_field::RESERVED.end == RIDER_DESC_LEN);

/// The fixed part of every probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeHeader {
    pub flags: u16,
    pub session: u32,
    /// Per-session probe sequence number.
    pub seq: u32,
    pub train: u32,
    /// Position in the train, from 0.
    pub index: u16,
    /// Number of probes in the train.
    pub train_len: u16,
    /// Sender's clock just before the probe left, nanoseconds.
    pub sent_ns: u64,
}

/// Inner protocol of a rider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiderProto {
    Tcp,
    Udp,
    Other(u8),
}

impl RiderProto {
    pub fn code(self) -> u8 {
        match self {
            RiderProto::Tcp => 6,
            RiderProto::Udp => 17,
            RiderProto::Other(p) => p,
        }
    }
    pub fn from_code(c: u8) -> Self {
        match c {
            6 => RiderProto::Tcp,
            17 => RiderProto::Udp,
            p => RiderProto::Other(p),
        }
    }
}

/// A host packet (or a fragment of one) carried in a probe's padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rider<'a> {
    /// Identifies the carried packet across its fragments.
    pub frag_id: u32,
    /// Byte offset of `data` within the carried packet.
    pub offset: u16,
    pub proto: RiderProto,
    /// This fragment ends the carried packet (a whole packet has offset 0 and `last`).
    pub last: bool,
    pub data: &'a [u8],
    /// Authentication tag over the header and rider (computed by the engine).
    pub tag: [u8; TAG_LEN],
}

/// A decoded probe, borrowing from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe<'a> {
    pub header: ProbeHeader,
    /// The riders, in the order they were written (checked by [`decode`]).
    pub riders: Riders<'a>,
    /// Bytes of padding after the header part.
    pub padding: usize,
}

/// The riders of a decoded probe: the bytes between the fixed header and the padding, which
/// [`decode`] has checked parse as a chain of riders.
#[derive(Debug, Clone, Copy, Default)]
pub struct Riders<'a> {
    bytes: &'a [u8],
}

/// Equal when they carry the same riders (reserved bytes, which decoding ignores, do not
/// count: a decoded probe equals its re-encoding).
impl PartialEq for Riders<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Riders<'_> {}

impl<'a> Riders<'a> {
    pub fn iter(&self) -> impl Iterator<Item = Rider<'a>> + 'a {
        let mut r = Reader::new(self.bytes);
        std::iter::from_fn(move || {
            if r.remaining() == 0 {
                return None;
            }
            read_rider(&mut r).ok().map(|(rider, _more)| rider)
        })
    }

    pub fn first(&self) -> Option<Rider<'a>> {
        self.iter().next()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }
}

/// Bytes a probe needs before padding, given its rider's length.
pub fn header_len(rider_len: Option<usize>) -> usize {
    HEADER_LEN + rider_len.map(|n| RIDER_OVERHEAD + n).unwrap_or(0)
}

/// Bytes a probe needs before padding to carry `riders`.
pub fn header_len_riders(riders: &[Rider<'_>]) -> usize {
    HEADER_LEN
        + riders
            .iter()
            .map(|r| RIDER_OVERHEAD + r.data.len())
            .sum::<usize>()
}

/// One rider from `r`, and whether another follows it.
fn read_rider<'a>(r: &mut Reader<'a>) -> Result<(Rider<'a>, bool), WireError> {
    let frag_id = r.u32()?;
    let offset = r.u16()?;
    let len = r.u16()? as usize;
    let proto = RiderProto::from_code(r.u8()?);
    let rflags = r.u8()?;
    if rflags & !(RIDER_LAST | RIDER_MORE) != 0 {
        return Err(WireError::Bad("unknown rider flags"));
    }
    let _reserved = r.u16()?;
    let data = r.take(len)?;
    let tag = r.array::<TAG_LEN>()?;
    let rider = Rider {
        frag_id,
        offset,
        proto,
        last: rflags & RIDER_LAST != 0,
        data,
        tag,
    };
    Ok((rider, rflags & RIDER_MORE != 0))
}

/// Write a probe of exactly `size` bytes into `out[..size]`. Padding is zeroed. The rider flag
/// is set from `riders` (carried in their order); other flags come from `header`.
pub fn encode(
    header: &ProbeHeader,
    riders: &[Rider<'_>],
    size: usize,
    out: &mut [u8],
) -> Result<usize, WireError> {
    let hlen = header_len_riders(riders);
    if size > MAX_PROBE {
        return Err(WireError::TooLarge {
            len: size,
            max: MAX_PROBE,
        });
    }
    if size < hlen {
        return Err(WireError::Bad(
            "probe size smaller than its header and rider",
        ));
    }
    if out.len() < size {
        return Err(WireError::Truncated {
            need: size,
            have: out.len(),
        });
    }
    let mut flags = header.flags & !FLAG_RIDER;
    if !riders.is_empty() {
        flags |= FLAG_RIDER;
    }
    let b = &mut out[..size];
    b[field::VERSION] = VERSION;
    b[field::KIND] = KIND_PROBE;
    b[field::FLAGS].copy_from_slice(&flags.to_be_bytes());
    b[field::SESSION].copy_from_slice(&header.session.to_be_bytes());
    b[field::SEQ].copy_from_slice(&header.seq.to_be_bytes());
    b[field::TRAIN].copy_from_slice(&header.train.to_be_bytes());
    b[field::INDEX].copy_from_slice(&header.index.to_be_bytes());
    b[field::HEADER_LEN].copy_from_slice(&(hlen as u16).to_be_bytes());
    b[field::SENT_NS].copy_from_slice(&header.sent_ns.to_be_bytes());
    b[field::TRAIN_LEN].copy_from_slice(&header.train_len.to_be_bytes());
    b[field::RESERVED].fill(0);
    let mut pos = HEADER_LEN;
    for (i, r) in riders.iter().enumerate() {
        if r.data.len() > u16::MAX as usize {
            return Err(WireError::TooLarge {
                len: r.data.len(),
                max: u16::MAX as usize,
            });
        }
        let more = i + 1 < riders.len();
        let d = &mut b[pos..pos + RIDER_DESC_LEN];
        d[rider_field::FRAG_ID].copy_from_slice(&r.frag_id.to_be_bytes());
        d[rider_field::OFFSET].copy_from_slice(&r.offset.to_be_bytes());
        d[rider_field::LEN].copy_from_slice(&(r.data.len() as u16).to_be_bytes());
        d[rider_field::PROTO] = r.proto.code();
        d[rider_field::FLAGS] =
            if r.last { RIDER_LAST } else { 0 } | if more { RIDER_MORE } else { 0 };
        d[rider_field::RESERVED].fill(0);
        pos += RIDER_DESC_LEN;
        b[pos..pos + r.data.len()].copy_from_slice(r.data);
        pos += r.data.len();
        b[pos..pos + TAG_LEN].copy_from_slice(&r.tag);
        pos += TAG_LEN;
    }
    b[pos..].fill(0);
    Ok(size)
}

/// Overwrite the sender timestamp of an encoded probe in place (the pacer stamps at departure).
pub fn stamp(buf: &mut [u8], sent_ns: u64) -> Result<(), WireError> {
    if buf.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            need: HEADER_LEN,
            have: buf.len(),
        });
    }
    buf[field::SENT_NS].copy_from_slice(&sent_ns.to_be_bytes());
    Ok(())
}

/// Decode a probe. Total: any input gives a probe or an error.
pub fn decode(buf: &[u8]) -> Result<Probe<'_>, WireError> {
    if buf.len() > MAX_PROBE {
        return Err(WireError::TooLarge {
            len: buf.len(),
            max: MAX_PROBE,
        });
    }
    let mut r = Reader::new(buf);
    let version = r.u8()?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let kind = r.u8()?;
    if kind != KIND_PROBE {
        return Err(WireError::UnknownType(kind));
    }
    let flags = r.u16()?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::Bad("unknown probe flags"));
    }
    let session = r.u32()?;
    let seq = r.u32()?;
    let train = r.u32()?;
    let index = r.u16()?;
    let hlen = r.u16()? as usize;
    let sent_ns = r.u64()?;
    let train_len = r.u16()?;
    let _reserved = r.u16()?;
    if hlen < HEADER_LEN || hlen > buf.len() {
        return Err(WireError::Bad("header length outside the packet"));
    }
    if index >= train_len {
        return Err(WireError::Bad("train index beyond train length"));
    }
    let header = ProbeHeader {
        flags,
        session,
        seq,
        train,
        index,
        train_len,
        sent_ns,
    };
    let riders = if flags & FLAG_RIDER != 0 {
        // The chain must end exactly at the header length: a rider running past it, or bytes
        // left between the last rider and the padding, is malformed.
        let mut chain = Reader::new(&buf[HEADER_LEN..hlen]);
        loop {
            let (_, more) = read_rider(&mut chain).map_err(|e| match e {
                WireError::Truncated { .. } => {
                    WireError::Bad("rider length disagrees with header length")
                }
                e => e,
            })?;
            if !more {
                break;
            }
        }
        if chain.remaining() != 0 {
            return Err(WireError::Bad("rider length disagrees with header length"));
        }
        Riders {
            bytes: &buf[HEADER_LEN..hlen],
        }
    } else {
        if hlen != HEADER_LEN {
            return Err(WireError::Bad("header length without a rider"));
        }
        Riders::default()
    };
    Ok(Probe {
        header,
        riders,
        padding: buf.len() - hlen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> ProbeHeader {
        ProbeHeader {
            flags: FLAG_MAY_CARRY,
            session: 7,
            seq: 99,
            train: 3,
            index: 4,
            train_len: 10,
            sent_ns: 123_456_789,
        }
    }

    #[test]
    fn plain_probe_round_trip_and_exact_size() {
        let mut buf = [0xffu8; 1500];
        let n = encode(&header(), &[], 1000, &mut buf).unwrap();
        assert_eq!(n, 1000);
        let p = decode(&buf[..n]).unwrap();
        assert_eq!(p.header, header());
        assert!(p.riders.is_empty());
        assert_eq!(p.padding, 1000 - HEADER_LEN);
        assert!(buf[HEADER_LEN..1000].iter().all(|b| *b == 0));
        stamp(&mut buf[..n], 42).unwrap();
        assert_eq!(decode(&buf[..n]).unwrap().header.sent_ns, 42);
    }

    #[test]
    fn rider_round_trip() {
        let data = [1u8, 2, 3, 4, 5];
        let rider = Rider {
            frag_id: 11,
            offset: 40,
            proto: RiderProto::Tcp,
            last: true,
            data: &data,
            tag: [9; 16],
        };
        let mut buf = [0u8; 200];
        let n = encode(&header(), &[rider], 200, &mut buf).unwrap();
        let p = decode(&buf[..n]).unwrap();
        assert_eq!(p.riders.first(), Some(rider));
        assert_eq!(p.riders.len(), 1);
        assert_eq!(p.header.flags, FLAG_MAY_CARRY | FLAG_RIDER);
        assert_eq!(p.padding, 200 - header_len(Some(5)));
        // A rider that does not fit is refused, not truncated.
        assert!(encode(&header(), &[rider], 60, &mut buf).is_err());
    }

    #[test]
    fn several_riders_share_one_probe() {
        let (a, b) = ([1u8; 300], [2u8; 90]);
        let riders = [
            Rider {
                frag_id: 11,
                offset: 1200,
                proto: RiderProto::Tcp,
                last: true,
                data: &a,
                tag: [9; 16],
            },
            Rider {
                frag_id: 12,
                offset: 0,
                proto: RiderProto::Tcp,
                last: false,
                data: &b,
                tag: [8; 16],
            },
        ];
        let mut buf = [0u8; 600];
        let n = encode(&header(), &riders, 600, &mut buf).unwrap();
        let p = decode(&buf[..n]).unwrap();
        assert_eq!(p.riders.iter().collect::<Vec<_>>(), riders);
        assert_eq!(p.padding, 600 - HEADER_LEN - 2 * RIDER_OVERHEAD - 390);
        assert_eq!(header_len_riders(&riders), 600 - p.padding);
        // The first rider says another follows; the last does not.
        let flags = |at: usize| buf[at + rider_field::FLAGS];
        assert_eq!(flags(HEADER_LEN), RIDER_LAST | RIDER_MORE);
        assert_eq!(flags(HEADER_LEN + RIDER_OVERHEAD + 300), 0);
        // A chain that says MORE but ends at the header length is malformed, and so is one
        // that stops short of it.
        let mut v = buf;
        v[HEADER_LEN + RIDER_OVERHEAD + 300 + rider_field::FLAGS] = RIDER_MORE;
        assert!(decode(&v[..n]).is_err());
        let mut v = buf;
        v[HEADER_LEN + rider_field::FLAGS] = RIDER_LAST;
        assert!(decode(&v[..n]).is_err());
        // Riders that do not fit are refused, not truncated.
        assert!(encode(&header(), &riders, 400, &mut buf).is_err());
        // Reserved bytes are ignored: a probe equals its re-encoding (what the fuzz target
        // checks).
        let mut v = buf;
        v[HEADER_LEN + rider_field::RESERVED.start] = 0xff;
        let p = decode(&v[..n]).unwrap();
        let mut again = [0u8; 600];
        let got: Vec<Rider> = p.riders.iter().collect();
        encode(&p.header, &got, n, &mut again).unwrap();
        assert_eq!(decode(&again[..n]).unwrap(), p);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let mut buf = [0u8; 100];
        encode(&header(), &[], 100, &mut buf).unwrap();
        assert!(matches!(
            decode(&buf[..31]),
            Err(WireError::Truncated { .. })
        ));
        let mut v = buf;
        v[field::VERSION] = 9;
        assert_eq!(decode(&v), Err(WireError::Version(9)));
        let mut v = buf;
        v[field::HEADER_LEN].copy_from_slice(&500u16.to_be_bytes());
        assert!(decode(&v).is_err());
        let mut v = buf;
        v[field::INDEX].copy_from_slice(&10u16.to_be_bytes()); // index == train_len
        assert!(decode(&v).is_err());
        let mut v = buf;
        v[field::FLAGS].copy_from_slice(&0x8000u16.to_be_bytes());
        assert!(decode(&v).is_err());
        assert!(decode(&[]).is_err());
        assert!(encode(&header(), &[], MAX_PROBE + 1, &mut [0u8; 10]).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn round_trip(session: u32, seq: u32, train: u32, len in 1u16..2000, idx in 0u16..2000, sent: u64,
                      may: bool, last: bool, riders in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..4),
                      extra in 0usize..500) {
            let index = idx % len;
            let flags = if may { FLAG_MAY_CARRY } else { 0 } | if last { FLAG_LAST } else { 0 };
            let h = ProbeHeader { flags, session, seq, train, index, train_len: len, sent_ns: sent };
            let r: Vec<Rider> = riders.iter().enumerate().map(|(i, d)| Rider { frag_id: seq.wrapping_add(i as u32), offset: 0, proto: RiderProto::Udp, last: i % 2 == 0, data: d, tag: [7; 16] }).collect();
            let size = header_len_riders(&r) + extra;
            let mut buf = vec![0u8; size];
            prop_assert_eq!(encode(&h, &r, size, &mut buf).unwrap(), size);
            let p = decode(&buf).unwrap();
            let mut want = h;
            if !r.is_empty() { want.flags |= FLAG_RIDER; }
            prop_assert_eq!(p.header, want);
            prop_assert_eq!(p.riders.iter().collect::<Vec<_>>(), r);
            prop_assert_eq!(p.padding, extra);
        }
    }
}
