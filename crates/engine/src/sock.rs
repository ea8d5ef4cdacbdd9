//! Socket details: kernel receive timestamps.

use crate::Error;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
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
/// per-socket counter. Returns whether the kernel accepted it.
pub fn enable_tx_timestamps(sock: &UdpSocket) -> bool {
    use nix::sys::socket::TimestampingFlag as F;
    let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE
        | F::SOF_TIMESTAMPING_SOFTWARE
        | F::SOF_TIMESTAMPING_OPT_ID
        | F::SOF_TIMESTAMPING_OPT_TSONLY;
    setsockopt(sock, sockopt::Timestamping, &flags).is_ok()
}

/// Collect pending TX timestamps from the error queue: (counter, CLOCK_REALTIME ns).
pub fn drain_tx_timestamps(sock: &UdpSocket, out: &mut Vec<(u32, mgrp_train::WallNs)>) {
    loop {
        let mut buf = [0u8; 64];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut cmsg = nix::cmsg_space!(
            nix::sys::socket::Timestamps,
            libc::sock_extended_err,
            libc::sockaddr_in
        );
        let Ok(msg) = recvmsg::<SockaddrStorage>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        ) else {
            return;
        };
        let (mut id, mut ts) = (None, None);
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                match c {
                    ControlMessageOwned::ScmTimestampsns(t) => {
                        ts = Some(mgrp_train::WallNs(
                            t.system.tv_sec() as u64 * 1_000_000_000 + t.system.tv_nsec() as u64,
                        ))
                    }
                    ControlMessageOwned::Ipv4RecvErr(e, _)
                        if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING =>
                    {
                        id = Some(e.ee_data)
                    }
                    _ => {}
                }
            }
        }
        if let (Some(id), Some(ts)) = (id, ts) {
            if ts.0 > 0 {
                out.push((id, ts));
            }
        }
    }
}
