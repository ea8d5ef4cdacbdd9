//! One captured frame → one TCP segment, or a reason it is not one. Captures are usually
//! truncated (a snap length of ~128 bytes keeps only headers), so lengths come from the IP header,
//! never from what was captured.

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TcpOptionElement, TransportSlice};
use mgrp_estimate::wren::{Segment, ETH_HLEN};
use std::net::{IpAddr, SocketAddr};

/// The link layer a capture's frames start with (pcap LINKTYPE values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Ethernet,
    /// Linux cooked v1 (16-byte header): `tcpdump -i any`.
    LinuxSll,
    /// Linux cooked v2 (20-byte header).
    LinuxSll2,
    /// Raw IPv4 or IPv6.
    RawIp,
    /// BSD loopback: a 4-byte address family.
    Null,
}

impl Link {
    /// From a pcap LINKTYPE number.
    pub fn from_linktype(lt: i32) -> Result<Link, crate::Error> {
        Ok(match lt {
            1 => Link::Ethernet,
            113 => Link::LinuxSll,
            276 => Link::LinuxSll2,
            101 | 12 | 14 | 228 | 229 => Link::RawIp,
            0 => Link::Null,
            other => return Err(crate::Error::LinkType(other)),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    Tcp(Segment),
    /// A well-formed frame that is not TCP over IP (ARP, UDP, ICMP, IP fragments...).
    NotTcp,
    /// Too short or inconsistent to be what its headers claim.
    Malformed,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// Decode one frame captured at `ts_ns`.
pub fn decode(link: Link, frame: &[u8], ts_ns: u64) -> Decoded {
    let sliced = match link {
        Link::Ethernet => match LaxSlicedPacket::from_ethernet(frame) {
            Ok(p) => p,
            Err(_) => return Decoded::Malformed,
        },
        Link::LinuxSll | Link::LinuxSll2 => {
            let (proto_at, hlen) = if link == Link::LinuxSll {
                (14, 16)
            } else {
                (0, 20)
            };
            let (Some(proto), Some(rest)) = (u16_at(frame, proto_at), frame.get(hlen..)) else {
                return Decoded::Malformed;
            };
            LaxSlicedPacket::from_ether_type(EtherType(proto), rest)
        }
        Link::RawIp => match LaxSlicedPacket::from_ip(frame) {
            Ok(p) => p,
            Err(_) => return Decoded::Malformed,
        },
        Link::Null => {
            let Some(rest) = frame.get(4..) else {
                return Decoded::Malformed;
            };
            match LaxSlicedPacket::from_ip(rest) {
                Ok(p) => p,
                Err(_) => return Decoded::NotTcp,
            }
        }
    };
    let Some(net) = &sliced.net else {
        return Decoded::NotTcp;
    };
    // Declared IP packet length and where the IP header starts in `frame`.
    let (src, dst, ip_len, ip_start, fragmented) = match net {
        LaxNetSlice::Ipv4(v4) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                h.total_len() as usize,
                h.slice().as_ptr(),
                v4.payload().fragmented,
            )
        }
        LaxNetSlice::Ipv6(v6) => {
            let h = v6.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                h.payload_length() as usize + 40,
                h.slice().as_ptr(),
                v6.payload().fragmented,
            )
        }
        LaxNetSlice::Arp(_) => return Decoded::NotTcp,
    };
    if fragmented {
        return Decoded::NotTcp;
    }
    let tcp = match &sliced.transport {
        Some(TransportSlice::Tcp(t)) => t,
        Some(_) => return Decoded::NotTcp,
        None => {
            // IP, but its transport did not parse: TCP cut short is malformed, others are not TCP.
            let proto = match net {
                LaxNetSlice::Ipv4(v4) => v4.payload().ip_number.0,
                LaxNetSlice::Ipv6(v6) => v6.payload().ip_number.0,
                LaxNetSlice::Arp(_) => 0,
            };
            return if proto == 6 {
                Decoded::Malformed
            } else {
                Decoded::NotTcp
            };
        }
    };
    // Offset of the TCP payload from the IP header's start, in the captured buffer.
    let payload_off = tcp.slice().as_ptr() as usize + tcp.header_len() - ip_start as usize;
    // GSO super-packets can carry 0 as their IPv4 length: fall back to the frame's own length.
    let ip_len = if ip_len == 0 {
        frame
            .len()
            .saturating_sub(ip_start as usize - frame.as_ptr() as usize)
    } else {
        ip_len
    };
    let Some(payload) = ip_len.checked_sub(payload_off) else {
        return Decoded::Malformed;
    };
    let mut sack = [(0u32, 0u32); 4];
    let mut sack_len = 0u8;
    for opt in tcp.options_iterator() {
        match opt {
            Ok(TcpOptionElement::SelectiveAcknowledgement(first, rest)) => {
                for block in std::iter::once(Some(first)).chain(rest) {
                    if let (Some(b), true) = (block, (sack_len as usize) < sack.len()) {
                        sack[sack_len as usize] = b;
                        sack_len += 1;
                    }
                }
            }
            Ok(_) => {}
            // A bad option list ends the options, not the segment.
            Err(_) => break,
        }
    }
    Decoded::Tcp(Segment {
        ts_ns,
        src: SocketAddr::new(src, tcp.source_port()),
        dst: SocketAddr::new(dst, tcp.destination_port()),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        has_ack: tcp.ack(),
        control: tcp.syn() || tcp.fin() || tcp.rst(),
        payload: payload as u32,
        frame_bytes: ip_len as u32 + ETH_HLEN,
        sack,
        sack_len,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet/IPv4/TCP frame with `payload` declared bytes but only headers captured.
    pub(crate) fn frame(payload: u16, sack: Option<(u32, u32)>) -> Vec<u8> {
        let opt_len = if sack.is_some() { 12 } else { 0 };
        let tcp_len = 20 + opt_len;
        let mut f = vec![0u8; 14];
        f[12] = 0x08; // IPv4
        let total = 20 + tcp_len as u16 + payload;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend(ip);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&5000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&1000u32.to_be_bytes());
        tcp[8..12].copy_from_slice(&77u32.to_be_bytes());
        tcp[12] = ((tcp_len / 4) as u8) << 4;
        tcp[13] = 0x10; // ACK
        f.extend(tcp);
        if let Some((l, r)) = sack {
            f.extend([1, 1, 5, 10]);
            f.extend(l.to_be_bytes());
            f.extend(r.to_be_bytes());
        }
        f
    }

    #[test]
    fn truncated_data_segment_keeps_its_declared_length() {
        let f = frame(1448, None);
        let Decoded::Tcp(s) = decode(Link::Ethernet, &f, 42) else {
            panic!("not decoded");
        };
        // IPv4 20 + TCP 20 + Ethernet 14 around the payload.
        assert_eq!((s.payload, s.frame_bytes), (1448, 1502));
        assert_eq!(
            (s.seq, s.ack, s.has_ack, s.control),
            (1000, 77, true, false)
        );
        assert_eq!(s.src, "10.0.0.1:5000".parse().unwrap());
        assert_eq!(s.ts_ns, 42);
    }

    #[test]
    fn sack_blocks_are_read() {
        let f = frame(0, Some((5000, 9000)));
        let Decoded::Tcp(s) = decode(Link::Ethernet, &f, 0) else {
            panic!("not decoded");
        };
        assert_eq!((s.sack_len, s.sack[0]), (1, (5000, 9000)));
    }

    #[test]
    fn cooked_and_raw_links() {
        let f = frame(100, None);
        let ip = &f[14..];
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&0x0800u16.to_be_bytes());
        sll.extend(ip);
        let mut sll2 = vec![0u8; 20];
        sll2[0..2].copy_from_slice(&0x0800u16.to_be_bytes());
        sll2.extend(ip);
        for (link, bytes) in [
            (Link::LinuxSll, &sll[..]),
            (Link::LinuxSll2, &sll2[..]),
            (Link::RawIp, ip),
        ] {
            assert!(
                matches!(decode(link, bytes, 0), Decoded::Tcp(s) if s.payload == 100),
                "{link:?}"
            );
        }
    }

    #[test]
    fn junk_is_classified_not_panicked_on() {
        let f = frame(100, None);
        // Every truncation of a valid frame, and every single-byte corruption of its headers.
        for n in 0..f.len() {
            let _ = decode(Link::Ethernet, &f[..n], 0);
        }
        for i in 0..f.len() {
            for v in [0u8, 0xff, 0x45, 0x06] {
                let mut g = f.clone();
                g[i] = v;
                let _ = decode(Link::Ethernet, &g, 0);
            }
        }
        // TCP header cut in half: malformed. UDP: not TCP.
        assert_eq!(decode(Link::Ethernet, &f[..44], 0), Decoded::Malformed);
        let mut udp = f.clone();
        udp[23] = 17;
        assert_eq!(decode(Link::Ethernet, &udp, 0), Decoded::NotTcp);
        assert_eq!(decode(Link::Ethernet, &[1, 2, 3], 0), Decoded::Malformed);
        assert!(Link::from_linktype(147).is_err());
    }
}
