//! The HTTP server under a connection flood (on loopback, attackers on 127.0.0.2..): idle
//! sockets are bounded in number per address and in total, and closed after the header-read
//! timeout, so a legitimate request still gets its answer.

use mgrp_service::http::{Http, Limits};
use mgrp_service::Hub;
use mgrp_store::Store;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const LIMITS: Limits = Limits {
    max_connections: 8,
    per_source: 4,
    header_timeout: Duration::from_secs(1),
};

fn server() -> Http {
    let hub = Hub::new(
        Box::new(Store::in_memory(Duration::from_secs(3600)).unwrap()),
        None,
    );
    Http::start_with("127.0.0.1:0".parse().unwrap(), hub, LIMITS).unwrap()
}

/// An idle connection from `from` (port chosen by the kernel).
fn idle(from: IpAddr, to: SocketAddr) -> TcpStream {
    let s = connect_from(from, to);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Connect from a given loopback address (std cannot bind before it connects).
fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let (IpAddr::V4(f), IpAddr::V4(t)) = (from, to.ip()) else {
        panic!("IPv4 only")
    };
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let sa = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sa(f, 0);
        assert_eq!(
            libc::bind(fd, &local as *const _ as *const libc::sockaddr, len),
            0
        );
        let remote = sa(t, to.port());
        assert_eq!(
            libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
        TcpStream::from_raw_fd(fd)
    }
}

/// A whole GET /v1/paths from 127.0.0.1; its status line.
fn legit(to: SocketAddr) -> String {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /v1/paths HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or("").to_string()
}

/// Does the server close `s` within `within`?
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0) | Err(_)) && {
        // Err could be our timeout: tell it from a reset or EOF.
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        !matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

#[test]
fn one_address_cannot_take_every_connection() {
    let http = server();
    let to = http.local_addr();
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    // Far more idle sockets than the per-address bound; held throughout.
    let _held: Vec<TcpStream> = (0..40).map(|_| idle(attacker, to)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(legit(to), "HTTP/1.1 200 OK");
    assert!(
        t0.elapsed() < Duration::from_millis(800),
        "answered only after {:?}: waited for the idle ones to time out",
        t0.elapsed()
    );
    let c = http.connections();
    assert!(c.refused_per_source >= 30, "{c:?}");
}

#[test]
fn idle_and_slow_sockets_are_closed_after_the_header_timeout() {
    let http = server();
    let to = http.local_addr();
    let mut silent = idle("127.0.0.3".parse().unwrap(), to);
    let mut slow = idle("127.0.0.3".parse().unwrap(), to);
    // Half a request head, then nothing (slowloris).
    slow.write_all(b"GET /v1/paths HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t0 = Instant::now();
    assert!(
        closed_within(&mut silent, Duration::from_secs(3)),
        "idle kept open"
    );
    assert!(
        closed_within(&mut slow, Duration::from_secs(3)),
        "slow kept open"
    );
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_millis(2500),
        "closed after {took:?}, want about {:?}",
        LIMITS.header_timeout
    );
}

#[test]
fn a_full_server_frees_room_within_the_header_timeout() {
    let http = server();
    let to = http.local_addr();
    // Attackers from four addresses, two each (within the per-address bound): every
    // connection is taken, and more wait in the accept queue behind them.
    let held: Vec<TcpStream> = (0..12u8)
        .map(|i| idle(IpAddr::from([127, 0, 0, 10 + i % 4]), to))
        .collect();
    assert!(held.len() > LIMITS.max_connections);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(legit(to), "HTTP/1.1 200 OK");
    let took = t0.elapsed();
    assert!(
        took < LIMITS.header_timeout + Duration::from_secs(1),
        "answered after {took:?}"
    );
    assert_eq!(http.connections().refused_per_source, 0);
    drop(held);
}
