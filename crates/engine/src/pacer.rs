//! The pacer: a dedicated thread that sleeps until just before a train and spins through it.
//!
//! Trains are serialized: one runs at a time, so probes of different trains never interleave.
//! Between probes, other traffic (the host's own) may pass; nothing else is sent by the pacer.

use crate::train::{MonoNs, SendRecord, WallNs};
use crate::Error;
use mgrp_clock::{now_ns, realtime_ns, sleep_until, tighten_timer_slack};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Wake this long before a train's first probe (or before a long gap ends) and spin the rest.
pub const SPIN_NS: u64 = 200_000;
/// Trains waiting for the pacer at most (every buffer has a bound).
pub const QUEUE: usize = 64;

/// One train for the pacer: encoded probes and when each must leave.
pub struct Job {
    pub sock: Arc<UdpSocket>,
    pub packets: Vec<Vec<u8>>,
    /// Departure of each probe, CLOCK_MONOTONIC ns.
    pub due_ns: Vec<u64>,
    pub ttls: Vec<Option<u8>>,
    /// Puts riders into probes just before they leave (MGRP piggybacking).
    pub riders: Option<crate::riders::TrainRiders>,
    pub done: SyncSender<Vec<SendRecord>>,
}

pub struct Pacer {
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Pacer {
    pub fn spawn() -> Result<Pacer, Error> {
        let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("mgrp-pacer".into())
            .spawn(move || run(rx))
            .map_err(|e| Error::io("spawn pacer thread", e))?;
        Ok(Pacer {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queue a train; the receiver yields the send records when it has gone.
    pub fn submit(&self, job: Job) -> Result<(), Error> {
        self.tx
            .as_ref()
            .expect("pacer running")
            .try_send(job)
            .map_err(|_| {
                Error::BadInput(format!(
                    "the pacer already has {QUEUE} trains waiting; slow down"
                ))
            })
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set_ttl(sock: &UdpSocket, v6: bool, ttl: u8) {
    let v: libc::c_int = ttl as libc::c_int;
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TTL)
    };
    // SAFETY: setsockopt on a valid fd with an int-sized option value.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Errors an ICMP error leaves pending on a socket with `IP_RECVERR`: the kernel fails the
/// next send with it once (and clears it), though nothing is wrong with that send.
fn icmp_pending(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ECONNREFUSED
                | libc::EHOSTDOWN
                | libc::ENOPROTOOPT
                | libc::EPROTO
                | libc::EACCES
                | libc::EOPNOTSUPP
                | libc::EMSGSIZE
        )
    )
}

/// Send one probe; a send that only reported an earlier probe's ICMP error is tried again
/// (twice at most: a real error fails again at once). Returns the clock just before the send
/// that went out.
pub(crate) fn send_probe(sock: &UdpSocket, pkt: &[u8]) -> Option<u64> {
    for _ in 0..3 {
        let t = now_ns();
        match sock.send(pkt) {
            Ok(_) => return Some(t),
            Err(e) if icmp_pending(&e) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Ask for real-time scheduling (needs CAP_SYS_NICE; without it the pacer still works, with
/// longer tails when other tasks preempt it).
pub(crate) fn try_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Keep the calling thread off the pacer's CPU (see [`mgrp_clock::cpu`]).
pub use mgrp_clock::cpu::avoid_pacer_cpu;
use mgrp_clock::cpu::pin_to_pacer_cpu;

/// The record of a probe that did not leave.
fn unsent() -> SendRecord {
    SendRecord {
        mono_ns: None,
        real_ns: WallNs(realtime_ns()),
        kernel_ns: None,
    }
}

fn run(rx: Receiver<Job>) {
    tighten_timer_slack();
    pin_to_pacer_cpu();
    try_realtime();
    while let Ok(mut job) = rx.recv() {
        let mut records = Vec::with_capacity(job.packets.len());
        let mut ttl_now: Option<u8> = None;
        let v6 = job.sock.local_addr().is_ok_and(|a| a.is_ipv6());
        for (i, pkt) in job.packets.iter_mut().enumerate() {
            // An elastic train that ended early: the rest stay home, without waiting for them.
            if let Some(r) = job.riders.as_mut().filter(|r| r.ended()) {
                r.fill(i, pkt);
                records.push(unsent());
                continue;
            }
            let due = job.due_ns[i];
            let want_ttl = job.ttls[i];
            if want_ttl != ttl_now {
                set_ttl(&job.sock, v6, want_ttl.unwrap_or(64));
                ttl_now = want_ttl;
            }
            // Sleep only where the wait is long (before the train, or a long gap); inside a
            // train nanosleep would wake 60-100 us late.
            if due > now_ns() + SPIN_NS {
                sleep_until(due - SPIN_NS);
            }
            // Fill before the spin: the rider's cost comes out of the wait, not the gap.
            if let Some(r) = job.riders.as_mut() {
                if !r.fill(i, pkt) {
                    records.push(unsent());
                    continue;
                }
            }
            while now_ns() < due {
                std::hint::spin_loop();
            }
            let real = realtime_ns();
            let _ = mgrp_wire::probe::stamp(pkt, real);
            let sent = send_probe(&job.sock, pkt);
            records.push(SendRecord {
                mono_ns: sent.map(MonoNs),
                real_ns: WallNs(real),
                kernel_ns: None,
            });
        }
        if ttl_now.is_some() {
            set_ttl(&job.sock, v6, 64);
        }
        let _ = job.done.send(records);
    }
}
