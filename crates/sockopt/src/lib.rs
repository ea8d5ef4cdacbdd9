//! The TCP socket options mgrp reads and sets: `TCP_CONGESTION` (the transfer modes put a
//! socket on their congestion control) and `TCP_INFO` (the engine's load and inline flows, the
//! testbed's application flow, the benches). One crate below all of them, so none writes the
//! getsockopt again (neither `nix` nor `socket2` has a typed `TCP_INFO`).

use std::io;
use std::os::fd::RawFd;

/// The congestion control a TCP socket uses.
pub fn congestion_control(fd: RawFd) -> io::Result<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt with a 16-byte buffer (TCP_CA_NAME_MAX) and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = &name[..(len as usize).min(name.len())];
    Ok(String::from_utf8_lossy(n.split(|b| *b == 0).next().unwrap_or(n)).into_owned())
}

/// Put a TCP socket on congestion control `cc` (what an application opting in does).
pub fn set_congestion_control(fd: RawFd, cc: &str) -> io::Result<()> {
    // SAFETY: the name's bytes outlive the call and its length is given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            cc.as_ptr().cast(),
            cc.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The kernel's `TCP_INFO` for a socket (cwnd, RTT, retransmits…).
pub fn tcp_info(fd: RawFd) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt with a buffer of `len` bytes and its length.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn read_and_set_on_a_loopback_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_congestion_control(s.as_raw_fd(), "reno").unwrap();
        assert_eq!(congestion_control(s.as_raw_fd()).unwrap(), "reno");
        assert!(set_congestion_control(s.as_raw_fd(), "no_such_cc").is_err());
        assert!(tcp_info(s.as_raw_fd()).unwrap().tcpi_snd_cwnd > 0);
        assert!(congestion_control(-1).is_err());
    }
}
