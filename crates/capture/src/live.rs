//! Live capture of TCP headers on an interface: libpcap over AF_PACKET with a memory-mapped
//! TPACKET_V3 ring, a kernel BPF filter, kernel timestamps in nanoseconds, and the kernel's drop
//! counters. Only headers are kept (snap length), so capture costs the traffic nothing but the
//! copy of ~100 bytes per packet into the ring.

use crate::decode::{decode, Decoded, Link};
use crate::Error;
use mgrp_estimate::wren::Segment;
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Enough for Ethernet + IPv6 + TCP with a full option list.
pub const SNAPLEN: i32 = 128;
/// The kernel ring: at 100 Mbit/s of MTU frames, about 8 s of headers.
const RING_BYTES: i32 = 16 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LiveStats {
    /// Frames the filter passed, as the kernel counted them.
    pub received: u64,
    /// Frames the kernel dropped because the ring was full: capture loss.
    pub dropped: u64,
    pub tcp: u64,
    pub malformed: u64,
    pub not_tcp: u64,
}

pub struct LiveCapture {
    cap: pcap::Capture<pcap::Active>,
    link: Link,
    save: Option<pcap::Savefile>,
    stats: LiveStats,
}

impl LiveCapture {
    /// Capture TCP on `iface`, narrowed by a pcap `filter` expression (tcpdump syntax) if given;
    /// every captured frame is also written to `save` (a nanosecond pcap) if given.
    pub fn open(iface: &str, filter: Option<&str>, save: Option<&Path>) -> Result<Self, Error> {
        let fail = |what: &str, e: pcap::Error| {
            let hint = match &e {
                pcap::Error::PcapError(m)
                    if m.contains("ermission")
                        || m.contains("EPERM")
                        || m.contains("not permitted") =>
                {
                    " (live capture needs root or CAP_NET_RAW)"
                }
                _ => "",
            };
            Error::Live(format!("{what} on {iface}: {e}{hint}"))
        };
        let cap = pcap::Capture::from_device(iface)
            .map_err(|e| fail("no such device", e))?
            .immediate_mode(true)
            .snaplen(SNAPLEN)
            .buffer_size(RING_BYTES)
            .timeout(100)
            .precision(pcap::Precision::Nano)
            .open()
            .map_err(|e| fail("cannot capture", e))?
            // With TPACKET_V3 libpcap's own poll blocks until the kernel retires a block, which
            // an idle interface never does: wait on the descriptor ourselves, with a timeout.
            .setnonblock()
            .map_err(|e| fail("cannot capture", e))?;
        let mut cap = cap;
        let expr = match filter {
            Some(f) => format!("tcp and ({f})"),
            None => "tcp".to_string(),
        };
        cap.filter(&expr, true)
            .map_err(|e| Error::Live(format!("bad filter {expr:?}: {e}")))?;
        let link = Link::from_linktype(cap.get_datalink().0)?;
        let save = match save {
            Some(p) => Some(
                cap.savefile(p)
                    .map_err(|e| Error::Live(format!("cannot write {}: {e}", p.display())))?,
            ),
            None => None,
        };
        Ok(LiveCapture {
            cap,
            link,
            save,
            stats: LiveStats::default(),
        })
    }

    /// The next TCP segment, or `None` if none arrived within 100 ms.
    pub fn next_segment(&mut self) -> Result<Option<Segment>, Error> {
        let mut waited = false;
        loop {
            let packet = match self.cap.next_packet() {
                Ok(p) => p,
                Err(pcap::Error::TimeoutExpired) if !waited => {
                    waited = true;
                    wait_readable(self.cap.as_raw_fd(), 100);
                    continue;
                }
                Err(pcap::Error::TimeoutExpired) => return Ok(None),
                Err(e) => return Err(Error::Live(format!("capture failed: {e}"))),
            };
            // With nanosecond precision libpcap puts nanoseconds in tv_usec.
            let ts = packet.header.ts.tv_sec.max(0) as u64 * 1_000_000_000
                + packet.header.ts.tv_usec.max(0) as u64;
            if let Some(s) = self.save.as_mut() {
                s.write(&packet);
            }
            match decode(self.link, packet.data, ts) {
                Decoded::Tcp(seg) => {
                    self.stats.tcp += 1;
                    return Ok(Some(seg));
                }
                Decoded::Malformed => self.stats.malformed += 1,
                Decoded::NotTcp => self.stats.not_tcp += 1,
            }
        }
    }

    /// Counters so far, with the kernel's received and dropped counts.
    pub fn stats(&mut self) -> LiveStats {
        if let Ok(s) = self.cap.stats() {
            self.stats.received = s.received as u64;
            self.stats.dropped = s.dropped as u64 + s.if_dropped as u64;
        }
        self.stats
    }

    /// Flush the save file, if any.
    pub fn flush(&mut self) -> Result<(), Error> {
        if let Some(s) = self.save.as_mut() {
            s.flush()
                .map_err(|e| Error::Live(format!("flushing the save file: {e}")))?;
        }
        Ok(())
    }
}

/// Wait until `fd` is readable or `ms` pass.
fn wait_readable(fd: std::os::fd::RawFd, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; poll only writes revents.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// IP addresses of `iface` (getifaddrs): the local ends whose data a capture there analyses.
pub fn interface_addrs(iface: &str) -> Result<Vec<std::net::IpAddr>, Error> {
    use std::net::IpAddr;
    let mut out = Vec::new();
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::Live(format!("listing interface addresses: {e}")))?;
    for ifa in addrs {
        if ifa.interface_name != iface {
            continue;
        }
        let Some(addr) = ifa.address else { continue };
        if let Some(v4) = addr.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(out)
}
