//! The IPv4 header fields the riders need: addresses (to match a probe's destination and check a
//! rider against its session), protocol, length.

use std::net::Ipv4Addr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Info {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    /// Total length from the header.
    pub len: usize,
}

impl Ipv4Info {
    /// Parse an IPv4 packet's header; `None` if it is not a complete, consistent IPv4 packet.
    pub fn parse(pkt: &[u8]) -> Option<Ipv4Info> {
        let h = etherparse::Ipv4HeaderSlice::from_slice(pkt).ok()?;
        let len = h.total_len() as usize;
        if len > pkt.len() || len < h.slice().len() {
            return None;
        }
        Some(Ipv4Info {
            src: h.source_addr(),
            dst: h.destination_addr(),
            proto: h.protocol().0,
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let i = Ipv4Info::parse(&p).unwrap();
        assert_eq!(
            (i.src, i.dst, i.proto, i.len),
            ([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 6, 40)
        );
        assert!(
            Ipv4Info::parse(&p[..30]).is_none(),
            "shorter than its total length"
        );
        for n in 0..20 {
            assert!(Ipv4Info::parse(&p[..n]).is_none());
        }
        p[0] = 0x65;
        assert!(Ipv4Info::parse(&p).is_none(), "not IPv4");
    }
}
