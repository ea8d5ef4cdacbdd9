//! The TCP header fields the inline engine needs from an IPv4 packet read from the TUN.

use std::net::{Ipv4Addr, SocketAddrV4};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHeader {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: u32,
    /// Payload bytes.
    pub payload: u32,
    /// SYN, FIN or RST is set.
    pub syn_fin_rst: bool,
}

impl TcpHeader {
    /// `None` unless `pkt` is a whole, unfragmented IPv4 packet carrying a whole TCP header.
    pub fn parse(pkt: &[u8]) -> Option<TcpHeader> {
        let b0 = *pkt.first()?;
        if b0 >> 4 != 4 {
            return None;
        }
        let ihl = (b0 & 0x0f) as usize * 4;
        let total = u16::from_be_bytes([*pkt.get(2)?, *pkt.get(3)?]) as usize;
        let frag = u16::from_be_bytes([*pkt.get(6)?, *pkt.get(7)?]);
        // More fragments, or a non-zero offset: not a whole segment.
        if ihl < 20 || total > pkt.len() || total < ihl + 20 || frag & 0x3fff != 0 || pkt[9] != 6 {
            return None;
        }
        let ip = |at: usize| Ipv4Addr::new(pkt[at], pkt[at + 1], pkt[at + 2], pkt[at + 3]);
        let t = &pkt[ihl..total];
        let doff = (t[12] >> 4) as usize * 4;
        if doff < 20 || doff > t.len() {
            return None;
        }
        let port = |at: usize| u16::from_be_bytes([t[at], t[at + 1]]);
        Some(TcpHeader {
            src: SocketAddrV4::new(ip(12), port(0)),
            dst: SocketAddrV4::new(ip(16), port(2)),
            seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
            payload: (t.len() - doff) as u32,
            syn_fin_rst: t[13] & 0x07 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(payload: usize, flags: u8) -> Vec<u8> {
        let total = 20 + 32 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6] = 0x40; // don't fragment
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5001u16.to_be_bytes());
        p[24..28].copy_from_slice(&0xfffffff0u32.to_be_bytes());
        p[32] = 8 << 4;
        p[33] = flags;
        p
    }

    #[test]
    fn parses_segments_and_refuses_the_rest() {
        let h = TcpHeader::parse(&packet(1448, 0x18)).unwrap();
        assert_eq!(h.src, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(h.dst, "10.0.0.2:5001".parse().unwrap());
        assert_eq!((h.seq, h.payload, h.syn_fin_rst), (0xfffffff0, 1448, false));
        assert!(TcpHeader::parse(&packet(0, 0x02)).unwrap().syn_fin_rst);
        let p = packet(100, 0x10);
        for n in 0..p.len() {
            assert!(TcpHeader::parse(&p[..n]).is_none(), "truncated to {n}");
        }
        let mut udp = p.clone();
        udp[9] = 17;
        assert!(TcpHeader::parse(&udp).is_none());
        let mut frag = p.clone();
        frag[6] = 0x20; // more fragments
        assert!(TcpHeader::parse(&frag).is_none());
        let mut bad_doff = p;
        bad_doff[32] = 2 << 4;
        assert!(TcpHeader::parse(&bad_doff).is_none());
    }
}
