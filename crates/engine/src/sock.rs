//! Socket details: kernel receive and transmit timestamps, and the error queue (TX stamps,
//! ICMP errors for our probes).

use crate::proto::hops::{IcmpError, Origin, QUOTE_MAX};
use crate::Error;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Ask the kernel to timestamp every received datagram (SO_TIMESTAMPNS: CLOCK_REALTIME ns,
/// taken when the packet entered the stack, not when we got around to reading it).
pub fn enable_rx_timestamps(sock: &UdpSocket) -> Result<(), Error> {
    setsockopt(sock, sockopt::ReceiveTimestampns, &true)
        .map_err(|e| Error::io("enable SO_TIMESTAMPNS", std::io::Error::from(e)))
}

/// One datagram with its source and kernel receive timestamp.
pub struct Datagram {
    pub len: usize,
    pub from: Option<SocketAddr>,
    /// CLOCK_REALTIME ns from the kernel; `None` if the kernel gave none.
    pub rx_ns: Option<mgrp_train::WallNs>,
    /// The datagram was longer than the buffer and was cut.
    pub truncated: bool,
}

/// Receive one datagram into `buf`. Timeouts come back as `WouldBlock`/`TimedOut` errors.
pub fn recv_timestamped(sock: &UdpSocket, buf: &mut [u8]) -> std::io::Result<Datagram> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .map_err(std::io::Error::from)?;
    let mut rx_ns = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                rx_ns = Some(mgrp_train::WallNs(
                    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
                ));
            }
        }
    }
    let from = msg.address.and_then(|a: SockaddrStorage| {
        a.as_sockaddr_in()
            .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
    });
    Ok(Datagram {
        len: msg.bytes,
        from,
        rx_ns,
        truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
    })
}

/// Ask the kernel for a software timestamp of every sent datagram (SO_TIMESTAMPING,
/// CLOCK_REALTIME, taken as the packet goes to the device), delivered on the error queue with a
/// per-socket counter, and for a software RX timestamp of what arrives (the ICMP errors on the
/// same queue). Returns whether the kernel accepted it.
pub fn enable_tx_timestamps(sock: &UdpSocket) -> bool {
    use nix::sys::socket::TimestampingFlag as F;
    let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE
        | F::SOF_TIMESTAMPING_RX_SOFTWARE
        | F::SOF_TIMESTAMPING_SOFTWARE
        | F::SOF_TIMESTAMPING_OPT_ID
        | F::SOF_TIMESTAMPING_OPT_TSONLY;
    setsockopt(sock, sockopt::Timestamping, &flags).is_ok()
}

/// Queue ICMP errors for our probes (time exceeded, unreachable) on the socket's error queue
/// (`IP_RECVERR`, or `IPV6_RECVERR` on an IPv6 socket): no raw socket needed. A side effect
/// the pacer copes with: each error also fails the next send once (see `pacer`).
pub fn enable_recverr(sock: &UdpSocket, v6: bool) -> Result<(), Error> {
    let r = if v6 {
        setsockopt(sock, sockopt::Ipv6RecvErr, &true)
    } else {
        setsockopt(sock, sockopt::Ipv4RecvErr, &true)
    };
    r.map_err(|e| Error::io("enable IP_RECVERR", std::io::Error::from(e)))
}

/// One message of a probe socket's error queue.
#[derive(Debug)]
pub enum ErrMsg {
    /// A kernel TX timestamp: (counter, CLOCK_REALTIME ns).
    TxStamp(u32, mgrp_train::WallNs),
    /// An ICMP error (or a local one) with what it quotes of our probe.
    Icmp(IcmpError),
}

/// Read at most `max` messages from the error queue without waiting; returns how many.
pub fn drain_errqueue(sock: &UdpSocket, max: usize, out: &mut Vec<ErrMsg>) -> usize {
    let mut n = 0;
    while n < max {
        let Some(m) = read_errqueue(sock) else {
            break;
        };
        n += 1;
        if let Some(m) = m {
            out.push(m);
        }
    }
    n
}

/// One error-queue message: `None` when the queue is empty, `Some(None)` for one that is
/// neither a TX stamp nor an error (skipped).
fn read_errqueue(sock: &UdpSocket) -> Option<Option<ErrMsg>> {
    let mut buf = [0u8; QUOTE_MAX];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut cmsg = nix::cmsg_space!(
        nix::sys::socket::Timestamps,
        libc::sock_extended_err,
        libc::sockaddr_in6
    );
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
    )
    .ok()?;
    // Read both clocks now: a kernel RX stamp is placed on the monotonic clock from them.
    let (mono_now, real_now) = (mgrp_clock::now_ns(), mgrp_clock::realtime_ns());
    let len = msg.bytes.min(QUOTE_MAX);
    let (mut ts, mut ee, mut offender) = (None, None, None);
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampsns(t) => {
                    let ns = t.system.tv_sec() as u64 * 1_000_000_000 + t.system.tv_nsec() as u64;
                    ts = (ns > 0).then_some(mgrp_train::WallNs(ns));
                }
                ControlMessageOwned::Ipv4RecvErr(e, a) => {
                    ee = Some(e);
                    offender =
                        a.map(|a| IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))));
                }
                ControlMessageOwned::Ipv6RecvErr(e, a) => {
                    ee = Some(e);
                    offender = a.map(|a| IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
    }
    let Some(ee) = ee else {
        return Some(None);
    };
    if ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
        return Some(ts.map(|t| ErrMsg::TxStamp(ee.ee_data, t)));
    }
    let origin = match ee.ee_origin {
        libc::SO_EE_ORIGIN_ICMP => Origin::Icmp,
        libc::SO_EE_ORIGIN_ICMP6 => Origin::Icmp6,
        o => Origin::Other(o),
    };
    let rx_mono = match ts {
        Some(k) => mgrp_train::MonoNs(mono_now.saturating_sub(real_now.saturating_sub(k.0))),
        None => mgrp_train::MonoNs(mono_now),
    };
    Some(Some(ErrMsg::Icmp(IcmpError {
        origin,
        icmp_type: ee.ee_type,
        icmp_code: ee.ee_code,
        offender,
        quote: buf[..len].to_vec(),
        rx_mono,
        rx_kernel: ts,
    })))
}

/// The kernel's `TCP_INFO` for a TCP socket (RTT, cwnd, bytes acked, delivery rate…).
pub fn tcp_info(s: &impl std::os::fd::AsRawFd) -> std::io::Result<libc::tcp_info> {
    mgrp_sockopt::tcp_info(s.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::hops::{HopMatcher, Outcome, SentProbe};
    use std::time::Duration;

    /// No root needed: a probe to a closed loopback port draws an ICMP port unreachable, which
    /// the error queue hands back with the quote, the sender and a kernel RX stamp.
    #[test]
    fn a_port_unreachable_comes_back_through_the_error_queue() {
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = closed.local_addr().unwrap();
        drop(closed);
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(dst).unwrap();
        enable_recverr(&sock, false).unwrap();
        let stamps = enable_tx_timestamps(&sock);
        // The kernel turns RX timestamping on for the whole host from a work queue after the
        // first socket asks (net_enable_timestamp): an ICMP error that comes back at once may
        // beat it when no other socket had stamps on (a CI run: no RX stamp).
        std::thread::sleep(Duration::from_millis(100));
        let h = mgrp_wire::probe::ProbeHeader {
            session: 7,
            seq: 40,
            train: 2,
            index: 0,
            train_len: 1,
            ..Default::default()
        };
        let mut pkt = vec![0u8; 100];
        mgrp_wire::probe::encode(&h, &[], 100, &mut pkt).unwrap();
        let sent = crate::pacer::send_probe(&sock, &pkt).expect("first send");
        // The error makes the next plain send fail once though nothing is wrong with it; the
        // pacer's send goes out.
        std::thread::sleep(Duration::from_millis(20));
        let e = sock.send(&pkt).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
        let (mut msgs, mut tx, mut icmp) = (Vec::new(), None, None);
        for _ in 0..200 {
            drain_errqueue(&sock, 16, &mut msgs);
            for m in msgs.drain(..) {
                match m {
                    ErrMsg::TxStamp(_, t) => tx = tx.or(Some(t)),
                    ErrMsg::Icmp(e) => icmp = icmp.or(Some(e)),
                }
            }
            if icmp.is_some() && (tx.is_some() || !stamps) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let e = icmp.expect("an ICMP error on the queue");
        assert_eq!((e.origin, e.icmp_type, e.icmp_code), (Origin::Icmp, 3, 3));
        assert_eq!(e.offender, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(e.quote, pkt[..QUOTE_MAX]);
        let mut m = HopMatcher::new(
            7,
            2,
            40,
            vec![SentProbe {
                ttl: None,
                mono: Some(mgrp_train::MonoNs(sent)),
                kernel: tx,
            }],
        );
        assert_eq!(m.handle_error(&e), Outcome::Matched(0));
        let r = m.finish().0[0].unwrap();
        if stamps {
            assert!(
                e.rx_kernel.is_some(),
                "kernel RX stamp with SO_TIMESTAMPING"
            );
            assert_eq!(r.clock, mgrp_train::HopClock::Kernel);
        }
        assert!(r.rtt_ns < 1_000_000_000, "{r:?}");
        // Reading the queue cleared the pending error; make one pending again: the pacer's
        // send still goes out (it sends again past it).
        drain_errqueue(&sock, 64, &mut msgs);
        sock.send(&pkt).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(crate::pacer::send_probe(&sock, &pkt).is_some());
    }
}
