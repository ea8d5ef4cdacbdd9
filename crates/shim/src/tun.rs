//! A TUN device (IFF_TUN | IFF_NO_PI): whole IP packets in and out, non-blocking.

use crate::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Largest packet read from or written to a TUN.
pub const MAX_PACKET: usize = 65_535;

pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Create (or attach to) TUN device `name` in the calling thread's network namespace. It
    /// disappears when the last descriptor closes.
    pub fn open(name: &str) -> Result<Tun, Error> {
        const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
        #[repr(C)]
        struct IfReq {
            name: [u8; libc::IFNAMSIZ],
            flags: libc::c_short,
            _pad: [u8; 22],
        }
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(Error::Setup(format!("bad TUN device name {name:?}")));
        }
        // SAFETY: plain open(2) of a fixed path; the fd is owned right away.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(Error::io(
                "open /dev/net/tun (is the tun module loaded, are we root?)",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: raw is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq, which IfReq lays out.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
            return Err(Error::io(
                format!("TUNSETIFF {name}"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Tun {
            fd,
            name: name.into(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// One packet into `buf`, or `None` if none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, Error> {
        // SAFETY: buf is writable for buf.len() bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
            _ => Err(Error::io(format!("read from {}", self.name), e)),
        }
    }

    /// Hand one packet to the kernel as if it arrived on this device.
    pub fn write(&self, pkt: &[u8]) -> Result<(), Error> {
        // SAFETY: pkt is readable for pkt.len() bytes.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            return Err(Error::io(
                format!("write to {}", self.name),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Wait until a packet can be read or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd; poll only writes revents.
        unsafe { libc::poll(&mut p, 1, ms) };
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}
