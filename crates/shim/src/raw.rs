//! Send whole IPv4 packets the normal way (a held packet whose time ran out, or one nobody is
//! probing for): a raw socket with IP_HDRINCL, marked so policy routing keeps it out of the TUN.

use crate::ip::Ipv4Info;
use crate::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct RawSender {
    fd: OwnedFd,
}

impl RawSender {
    pub fn new(mark: u32) -> Result<RawSender, Error> {
        // SAFETY: socket(2) with constant arguments; the fd is owned right away.
        let raw = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_RAW,
            )
        };
        if raw < 0 {
            return Err(Error::io(
                "raw socket (needs CAP_NET_RAW)",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: raw is a fresh, valid fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::Mark, &mark)
            .map_err(|e| Error::io("SO_MARK on the raw socket (needs CAP_NET_ADMIN)", e.into()))?;
        Ok(RawSender { fd })
    }

    /// Send `pkt` (a whole IPv4 packet, header included) to its destination.
    pub fn send(&self, pkt: &[u8]) -> Result<(), Error> {
        let info = Ipv4Info::parse(pkt).ok_or_else(|| Error::Setup("not an IPv4 packet".into()))?;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(info.dst.octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: pkt is readable for its length; addr is a valid sockaddr_in.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                pkt.as_ptr().cast(),
                info.len,
                0,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(Error::io(
                format!("send to {}", info.dst),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}
