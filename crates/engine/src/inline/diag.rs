//! The kernel's view of a TCP socket we do not own: `sock_diag` (NETLINK_SOCK_DIAG) asked for one
//! IPv4 socket by its 4-tuple, with `INET_DIAG_INFO` (the `tcp_info` that `TCP_INFO` gives the
//! owner). A small hand parser rather than `netlink-packet-sock-diag`: one request and three
//! fields of one reply, tested below on bytes and on a real loopback socket.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const INET_DIAG_INFO: u16 = 2;
const NLMSG_HDR: usize = 16;
const INET_DIAG_MSG: usize = 72;

/// What the kernel says about the flow (the fields the inline engine needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpDiag {
    /// Congestion window, segments.
    pub cwnd: u32,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub mss: u32,
    pub total_retrans: u32,
    /// `tcpi_delivery_rate`, bytes/s (what Linux itself tells an application).
    pub delivery_rate_bytes: u64,
}

/// A NETLINK_SOCK_DIAG socket.
pub struct Diag {
    fd: OwnedFd,
    seq: u32,
}

impl Diag {
    pub fn open() -> io::Result<Diag> {
        // SAFETY: socket(2) with constant arguments; the fd is owned right away.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh, valid fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: a valid timeval for SO_RCVTIMEO.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(Diag { fd, seq: 0 })
    }

    /// The TCP socket `local` → `remote` in this network namespace; `Ok(None)` if none exists.
    pub fn lookup(
        &mut self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
    ) -> io::Result<Option<TcpDiag>> {
        self.seq = self.seq.wrapping_add(1);
        let req = request(self.seq, local, remote);
        // SAFETY: req is readable for its length; the kernel is the destination (addr 0).
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: buf is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            match parse_reply(&buf[..n as usize], self.seq) {
                Reply::Stale => continue,
                Reply::Found(d) => return Ok(Some(d)),
                Reply::NotFound => return Ok(None),
                Reply::Error(e) => return Err(io::Error::from_raw_os_error(e)),
                Reply::Malformed => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed sock_diag reply",
                    ))
                }
            }
        }
    }
}

fn request(seq: u32, local: SocketAddrV4, remote: SocketAddrV4) -> Vec<u8> {
    let mut b = Vec::with_capacity(NLMSG_HDR + 56);
    b.extend_from_slice(&((NLMSG_HDR + 56) as u32).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, ext (1 << (INET_DIAG_INFO − 1)), pad, states (all).
    b.extend_from_slice(&[
        libc::AF_INET as u8,
        libc::IPPROTO_TCP as u8,
        1 << (INET_DIAG_INFO - 1),
        0,
    ]);
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: ports and addresses in network order, interface, cookie = NOCOOKIE.
    b.extend_from_slice(&local.port().to_be_bytes());
    b.extend_from_slice(&remote.port().to_be_bytes());
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&local.ip().octets());
    b.extend_from_slice(&addr);
    addr[..4].copy_from_slice(&remote.ip().octets());
    b.extend_from_slice(&addr);
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
    b
}

#[derive(Debug, PartialEq)]
enum Reply {
    Found(TcpDiag),
    NotFound,
    Error(i32),
    Stale,
    Malformed,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn parse_reply(b: &[u8], seq: u32) -> Reply {
    let (Some(len), Some(kind), Some(got_seq)) = (u32_at(b, 0), u16_at(b, 4), u32_at(b, 8)) else {
        return Reply::Malformed;
    };
    let len = len as usize;
    if len < NLMSG_HDR || len > b.len() {
        return Reply::Malformed;
    }
    if got_seq != seq {
        return Reply::Stale;
    }
    let body = &b[NLMSG_HDR..len];
    if kind == NLMSG_ERROR {
        let Some(err) = u32_at(body, 0) else {
            return Reply::Malformed;
        };
        let err = -(err as i32);
        return if err == libc::ENOENT {
            Reply::NotFound
        } else {
            Reply::Error(err)
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY || body.len() < INET_DIAG_MSG {
        return Reply::Malformed;
    }
    let mut at = INET_DIAG_MSG;
    while at + 4 <= body.len() {
        let (Some(alen), Some(atype)) = (u16_at(body, at), u16_at(body, at + 2)) else {
            return Reply::Malformed;
        };
        let alen = alen as usize;
        if alen < 4 || at + alen > body.len() {
            return Reply::Malformed;
        }
        if atype == INET_DIAG_INFO {
            return match tcp_info(&body[at + 4..at + alen]) {
                Some(d) => Reply::Found(d),
                None => Reply::Malformed,
            };
        }
        at += (alen + 3) & !3;
    }
    Reply::Malformed
}

/// The fields of `struct tcp_info` (linux/tcp.h) at their fixed offsets.
fn tcp_info(b: &[u8]) -> Option<TcpDiag> {
    Some(TcpDiag {
        mss: u32_at(b, 16)?,
        srtt_us: u32_at(b, 68)?,
        rttvar_us: u32_at(b, 72)?,
        cwnd: u32_at(b, 80)?,
        total_retrans: u32_at(b, 100)?,
        delivery_rate_bytes: b
            .get(160..168)
            .and_then(|x| x.try_into().ok())
            .map_or(0, u64::from_ne_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn bad_replies_are_errors_not_panics() {
        for n in 0..40 {
            let b = vec![0xffu8; n];
            assert_ne!(parse_reply(&b, 1), Reply::Found(TcpDiag::default()));
        }
        let mut b = request(
            9,
            "1.2.3.4:1".parse().unwrap(),
            "5.6.7.8:2".parse().unwrap(),
        );
        b[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(parse_reply(&b, 9), Reply::NotFound);
        assert_eq!(parse_reply(&b, 8), Reply::Stale);
    }

    #[test]
    fn reads_a_loopback_socket_it_does_not_own() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let (std::net::SocketAddr::V4(local), std::net::SocketAddr::V4(remote)) =
            (c.local_addr().unwrap(), c.peer_addr().unwrap())
        else {
            panic!("v4")
        };
        let mut d = Diag::open().unwrap();
        let got = d.lookup(local, remote).unwrap().expect("the socket exists");
        let own = crate::sock::tcp_info(&c).unwrap();
        assert_eq!(got.cwnd, own.tcpi_snd_cwnd);
        assert_eq!(got.mss, own.tcpi_snd_mss);
        assert!(got.srtt_us > 0);
        // A 4-tuple nobody uses.
        let nobody: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
        assert_eq!(d.lookup(nobody, remote).unwrap(), None);
    }
}
