//! Shared by the kernel tests: one test at a time per binary (congestion-control names are the
//! kernel's), socket options, and bulk TCP flows from snd to rcv on a namespace testbed.
#![allow(dead_code)]

use mgrp_testbed::{netns, Role, Testbed};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static KERNEL: Mutex<()> = Mutex::new(());

/// The guard that serialises the tests of one binary, or `None` (and why, on stderr) where the
/// kernel or privileges do not allow BPF.
pub fn serial() -> Option<MutexGuard<'static, ()>> {
    if let Some(why) = mgrp_control::unsupported_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    Some(KERNEL.lock().unwrap_or_else(|e| e.into_inner()))
}

pub fn cc_of(fd: i32) -> String {
    mgrp_control::sockopt::congestion_control(fd).expect("TCP_CONGESTION")
}

pub fn set_cc(fd: i32, cc: &str) -> std::io::Result<()> {
    mgrp_control::sockopt::set_congestion_control(fd, cc)
}

pub fn tcp_info(fd: i32) -> libc::tcp_info {
    mgrp_control::sockopt::tcp_info(fd).expect("TCP_INFO")
}

pub fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap()
}

/// A TCP sink in rcv on `port`: reads until the sender closes, adding what it read to `count`;
/// returns the total.
pub fn sink(tb: &Testbed, port: u16, count: Arc<AtomicU64>) -> JoinHandle<u64> {
    let h = netns::spawn_in(&tb.ns(Role::Rcv), "sink", move || {
        let l = TcpListener::bind((Role::Rcv.addr(), port)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
            count.fetch_add(k as u64, Ordering::Relaxed);
        }
        Ok(n)
    })
    .unwrap();
    std::thread::spawn(move || h.join().unwrap().unwrap())
}

/// A bulk sender in snd to rcv:`port` for `secs`: congestion control `cc` set by socket option
/// (`None`: whatever the route or the default gives); `sample` is called about every 100 ms with
/// the time since the start and the socket, and what it returns is collected.
pub fn bulk<T: Send + 'static>(
    tb: &Testbed,
    port: u16,
    cc: Option<&'static str>,
    secs: f64,
    mut sample: impl FnMut(f64, &TcpStream) -> Option<T> + Send + 'static,
) -> JoinHandle<(String, Vec<T>)> {
    let h = netns::spawn_in(&tb.ns(Role::Snd), "bulk", move || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        if let Some(cc) = cc {
            set_cc(s.as_raw_fd(), cc).unwrap();
        }
        let addr: std::net::SocketAddr = format!("{}:{port}", Role::Rcv.addr()).parse().unwrap();
        s.connect(&addr.into()).unwrap();
        let s: TcpStream = s.into();
        let used = cc_of(s.as_raw_fd());
        s.set_write_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let block = vec![0u8; 1 << 16];
        let start = Instant::now();
        let (mut samples, mut next) = (Vec::new(), Duration::from_millis(100));
        while start.elapsed() < Duration::from_secs_f64(secs) {
            let _ = (&s).write(&block);
            if start.elapsed() >= next {
                samples.extend(sample(start.elapsed().as_secs_f64(), &s));
                next += Duration::from_millis(100);
            }
        }
        Ok((used, samples))
    })
    .unwrap();
    std::thread::spawn(move || h.join().unwrap().unwrap())
}
