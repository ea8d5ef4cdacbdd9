//! A delay line for kernels without `netem`: packets routed into a TUN device are held for a
//! fixed time and written back into the same namespace, which forwards them on (policy routing
//! sends what comes out of the TUN the normal way). It can also lose packets, following a
//! [`LossModel`]: a lost packet is counted and never written back. With zero delay the line
//! forwards each packet as soon as it is read.
//!
//! The line only holds, drops and counts; routing packets into its TUN device and forwarding
//! what comes out is the caller's job (see `topology.rs`, `Testbed::start_line`).

use crate::clock::{now_ns, tighten_timer_slack};
use crate::loss::{LossModel, LossProcess};
use crate::Error;
use mgrp_shim::tun::Tun;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes the line may hold at once; more is dropped and counted (every buffer has a bound).
pub const MAX_QUEUED_BYTES: usize = 64 << 20;
/// Largest packet read from the TUN (its MTU is 1500).
const MAX_PKT: usize = 2048;
/// Bounds and margin of how early the line wakes before a packet is due (then spins).
const EARLY_MIN_NS: u64 = 20_000;
const EARLY_MAX_NS: u64 = 1_000_000;
const EARLY_MARGIN_NS: u64 = 20_000;
/// Lateness histogram resolution: 1 us buckets up to this many us.
const HIST_US: usize = 20_000;
/// Packets the kernel queues for the line's TUN device (its txqueuelen) before dropping: 200 ms
/// of 50 kpps, so a line thread that is briefly descheduled loses nothing.
pub const TUN_QUEUE_LEN: u32 = 10_000;
/// How often the line reads its device's drop counter.
const DROP_CHECK_NS: u64 = 200_000_000;
/// Most packets read before the line looks at what is due again.
const READ_BATCH: usize = 256;
/// `SCHED_FIFO` priority of the line's thread: above the agent's 50 (bench inline, bulk: with
/// the line at 40 the inline engine's ACK capture thread at 50 on the same CPU preempted it,
/// release lateness p99 613 µs with the engine on against 221 µs with it off).
const LINE_RT_PRIORITY: i32 = 60;
/// Longest delay a line holds packets for.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// What the delay line did: how many packets, how many it lost on purpose, and how late each
/// left against its due time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DelayStats {
    pub target_delay_s: f64,
    /// Packets and bytes written back (forwarded).
    pub packets: u64,
    pub bytes: u64,
    /// Packets refused because the line already held `MAX_QUEUED_BYTES`.
    pub dropped: u64,
    /// Packets the kernel dropped before the line read them: its TUN queue (`TUN_QUEUE_LEN`)
    /// was full because the line fell behind. Should be 0; not part of `seen`.
    #[serde(default)]
    pub tun_dropped: u64,
    pub write_errors: u64,
    /// The loss model applied, if any.
    #[serde(default)]
    pub loss_model: Option<LossModel>,
    /// Packets read from the TUN device, and of those, lost by the loss model.
    #[serde(default)]
    pub seen: u64,
    #[serde(default)]
    pub lost: u64,
    /// `lost / seen` (0 before any packet).
    #[serde(default)]
    pub loss_rate: f64,
    /// Packets held longer on purpose so that later ones overtook them (`LineParams::reorder`).
    #[serde(default)]
    pub reordered: u64,
    /// Departure lateness (actual − due) in microseconds.
    pub late_us_p50: f64,
    pub late_us_p90: f64,
    pub late_us_p99: f64,
    pub late_us_max: f64,
}

struct Recorder {
    hist: Vec<u64>,
    max_ns: u64,
    stats: DelayStats,
}

impl Recorder {
    fn new(delay: Duration, loss: Option<LossModel>) -> Self {
        Recorder {
            hist: vec![0; HIST_US + 1],
            max_ns: 0,
            stats: DelayStats {
                target_delay_s: delay.as_secs_f64(),
                loss_model: loss,
                ..Default::default()
            },
        }
    }
    fn record(&mut self, late_ns: u64, bytes: usize) {
        self.hist[((late_ns / 1000) as usize).min(HIST_US)] += 1;
        self.max_ns = self.max_ns.max(late_ns);
        self.stats.packets += 1;
        self.stats.bytes += bytes as u64;
    }
    fn snapshot(&self) -> DelayStats {
        let n: u64 = self.hist.iter().sum();
        let q = |p: f64| -> f64 {
            if n == 0 {
                return 0.0;
            }
            let want = ((p * n as f64).ceil() as u64).max(1);
            let mut acc = 0;
            for (us, c) in self.hist.iter().enumerate() {
                acc += c;
                if acc >= want {
                    return us as f64;
                }
            }
            HIST_US as f64
        };
        DelayStats {
            loss_rate: rate(self.stats.lost, self.stats.seen),
            late_us_p50: q(0.5),
            late_us_p90: q(0.9),
            late_us_p99: q(0.99),
            late_us_max: self.max_ns as f64 / 1000.0,
            ..self.stats.clone()
        }
    }
}

fn rate(lost: u64, seen: u64) -> f64 {
    if seen == 0 {
        0.0
    } else {
        lost as f64 / seen as f64
    }
}

/// What a line does to each packet: hold it for `delay`, and first lose it with `loss`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineParams {
    /// How long each packet is held (zero: forwarded as soon as it is read).
    pub delay: Duration,
    /// Loss applied to each packet read, before it is held.
    pub loss: Option<LossModel>,
    /// Seed of the loss model's RNG; a line serving several namespaces uses `seed + i` in the
    /// i-th, so each has its own but reproducible sequence.
    pub seed: u64,
    /// Reorder: each packet kept (not lost) is, with this probability, held this much longer,
    /// so packets read after it overtake it.
    pub reorder: Option<Reorder>,
}

/// Packets held longer than the rest so that later ones overtake them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reorder {
    /// Probability per packet.
    pub p: f64,
    /// The extra hold.
    pub extra: Duration,
}

/// A running delay line: one thread per namespace it serves.
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), Error>>>,
    recorders: Vec<Arc<Mutex<Recorder>>>,
}

impl DelayLine {
    /// Create TUN device `dev` in each of `namespaces` and start holding what is routed into it
    /// for `delay`. Returns once every device exists (still down; the caller routes into it).
    pub fn start(namespaces: Vec<String>, dev: &str, delay: Duration) -> Result<DelayLine, Error> {
        DelayLine::start_with(
            namespaces,
            dev,
            LineParams {
                delay,
                ..Default::default()
            },
        )
    }

    /// Like [`start`](Self::start), with loss: each packet read from `dev` is first lost with
    /// `params.loss` (counted in [`DelayStats::lost`]), then held for `params.delay` and
    /// written back. The caller brings `dev` up and routes into it, e.g.
    /// `ip link set DEV up; ip rule add iif DEV lookup T; ip route add NET via HOP table T;
    /// ip route replace NET dev DEV`. Stopping (or dropping) the line removes the devices.
    pub fn start_with(
        namespaces: Vec<String>,
        dev: &str,
        params: LineParams,
    ) -> Result<DelayLine, Error> {
        if let Some(m) = &params.loss {
            m.validate()?;
        }
        if let Some(r) = params.reorder {
            if !(0.0..=1.0).contains(&r.p) || r.extra > MAX_DELAY {
                return Err(Error::BadInput(format!(
                    "delay line: reorder probability {} must be in [0, 1] and its extra hold {:?} at most {:?}",
                    r.p, r.extra, MAX_DELAY
                )));
            }
        }
        if params.delay > MAX_DELAY {
            return Err(Error::BadInput(format!(
                "delay line: delay {:?} is above the {:?} it supports",
                params.delay, MAX_DELAY
            )));
        }
        let delay = params.delay;
        let stop = Arc::new(AtomicBool::new(false));
        let mut line = DelayLine {
            stop: stop.clone(),
            threads: Vec::new(),
            recorders: Vec::new(),
        };
        for (i, ns) in namespaces.into_iter().enumerate() {
            let rec = Arc::new(Mutex::new(Recorder::new(delay, params.loss.clone())));
            let loss = params
                .loss
                .clone()
                .map(|m| LossProcess::new(m, params.seed.wrapping_add(i as u64)));
            let reorder = params.reorder.map(|r| {
                (
                    r,
                    rand::rngs::StdRng::seed_from_u64(params.seed.wrapping_add(1000 + i as u64)),
                )
            });
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop2, rec2, dev2) = (stop.clone(), rec.clone(), dev.to_string());
            let h = crate::netns::spawn_in(&ns, "delayline", move || {
                let tun = match open_tun(&dev2) {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        t
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return Err(e);
                    }
                };
                run(
                    tun,
                    &dev2,
                    delay.as_nanos() as u64,
                    (loss, reorder),
                    &stop2,
                    &rec2,
                )
            })?;
            line.threads.push(h);
            line.recorders.push(rec);
            match ready_rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(Error::Setup(format!("delay line in {ns}: {e}"))),
                Err(_) => return Err(Error::Setup(format!("delay line in {ns} did not start"))),
            }
        }
        Ok(line)
    }

    /// Statistics summed over the line's namespaces (percentiles: the worst of them).
    pub fn stats(&self) -> DelayStats {
        let mut total = DelayStats::default();
        for r in &self.recorders {
            let s = r.lock().map(|r| r.snapshot()).unwrap_or_default();
            total.target_delay_s = s.target_delay_s;
            total.loss_model = s.loss_model;
            total.seen += s.seen;
            total.lost += s.lost;
            total.reordered += s.reordered;
            total.packets += s.packets;
            total.bytes += s.bytes;
            total.dropped += s.dropped;
            total.tun_dropped += s.tun_dropped;
            total.write_errors += s.write_errors;
            total.late_us_p50 = total.late_us_p50.max(s.late_us_p50);
            total.late_us_p90 = total.late_us_p90.max(s.late_us_p90);
            total.late_us_p99 = total.late_us_p99.max(s.late_us_p99);
            total.late_us_max = total.late_us_max.max(s.late_us_max);
        }
        total.loss_rate = rate(total.lost, total.seen);
        total
    }

    /// Stop and join the threads; their TUN devices disappear with them.
    pub fn stop(mut self) -> DelayStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.threads.drain(..) {
            if let Ok(Err(e)) = h.join() {
                eprintln!("mgrp delay line: {e}");
            }
        }
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The router decremented the TTL when it forwarded the packet into the TUN, and will again when
/// it forwards what the line writes back: give one back, so a router with a delay (or loss)
/// line still costs one hop and TTL expiry still happens at its own hop (traceroute through it
/// would otherwise see the router twice). IPv4 only; the header checksum is updated
/// incrementally (RFC 1624: the TTL is the high byte of the 16-bit word at offset 8).
fn restore_ttl(pkt: &mut [u8]) {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 || pkt[8] == 255 {
        return;
    }
    let old = u16::from_be_bytes([pkt[8], pkt[9]]);
    pkt[8] += 1;
    let new = u16::from_be_bytes([pkt[8], pkt[9]]);
    let sum = u16::from_be_bytes([pkt[10], pkt[11]]);
    // HC' = ~(~HC + ~m + m')
    let mut acc = (!sum) as u32 + (!old) as u32 + new as u32;
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    pkt[10..12].copy_from_slice(&(!(acc as u16)).to_be_bytes());
}

fn open_tun(dev: &str) -> Result<Tun, Error> {
    Tun::open(dev).map_err(|e| Error::Setup(e.to_string()))
}

/// The TX drop count of `dev` in a `/proc/net/dev` listing.
fn tx_dropped_of(dev: &str, proc_net_dev: &str) -> Option<u64> {
    let line = proc_net_dev
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(dev)?.strip_prefix(':'))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes
    // packets errs drop ...
    line.split_whitespace().nth(11)?.parse().ok()
}

/// How many packets the kernel dropped at `dev`'s queue, read in the calling thread's
/// namespace.
fn tun_drops(dev: &str) -> Option<u64> {
    tx_dropped_of(
        dev,
        &std::fs::read_to_string("/proc/thread-self/net/dev").ok()?,
    )
}

fn run(
    tun: Tun,
    dev: &str,
    delay_ns: u64,
    (mut loss, mut reorder): (Option<LossProcess>, Option<(Reorder, rand::rngs::StdRng)>),
    stop: &AtomicBool,
    rec: &Mutex<Recorder>,
) -> Result<(), Error> {
    tighten_timer_slack();
    crate::clock::cpu::avoid_pacer_cpu();
    // Real-time, above the agent's real-time threads (the pacer's and the inline engine's 50; the
    // line never runs on the pacer's CPU): it stands in for the network, which the host under
    // test cannot preempt. Each packet's delay is its
    // read-to-write time here, so a line left to the normal scheduler on a busy core held
    // packets milliseconds too long (measured: lateness p99 2-4 ms, max 10-25 ms with one core
    // kept busy), which is jitter on whatever path it delays (the echoes of inline streams).
    // It spins at most `early_ns` before each due time, so it cannot starve the core.
    crate::clock::cpu::try_realtime(LINE_RT_PRIORITY);
    let fd = tun.as_raw_fd();
    let mut queue: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut early_ns = EARLY_MIN_NS;
    let mut drops_read_ns = 0;
    let read_drops = || {
        if let (Some(d), Ok(mut r)) = (tun_drops(dev), rec.lock()) {
            r.stats.tun_dropped = d;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        if now_ns() >= drops_read_ns + DROP_CHECK_NS {
            read_drops();
            drops_read_ns = now_ns();
        }
        // Take in what has arrived, in batches, so due packets are not held up by a flood.
        for _ in 0..READ_BATCH {
            let mut buf = spare.pop().unwrap_or_default();
            buf.resize(MAX_PKT, 0);
            // SAFETY: buf has MAX_PKT writable bytes.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), MAX_PKT) };
            if n <= 0 {
                spare.push(buf);
                break;
            }
            buf.truncate(n as usize);
            let lost = loss.as_mut().is_some_and(|l| l.lose());
            if let Ok(mut r) = rec.lock() {
                r.stats.seen += 1;
                r.stats.lost += lost as u64;
            }
            if lost {
                spare.push(buf);
                continue;
            }
            if queued + buf.len() > MAX_QUEUED_BYTES {
                if let Ok(mut r) = rec.lock() {
                    r.stats.dropped += 1;
                }
                spare.push(buf);
                continue;
            }
            queued += buf.len();
            restore_ttl(&mut buf);
            let hold_longer = reorder
                .as_mut()
                .is_some_and(|(r, rng)| rng.random_bool(r.p));
            let extra = match reorder.as_ref() {
                Some((r, _)) if hold_longer => r.extra.as_nanos() as u64,
                _ => 0,
            };
            if extra > 0 {
                if let Ok(mut r) = rec.lock() {
                    r.stats.reordered += 1;
                }
            }
            let due = now_ns() + delay_ns + extra;
            // In due order: a packet held longer goes behind those due before it.
            let at = queue.partition_point(|(d, _)| *d <= due);
            queue.insert(at, (due, buf));
        }
        // Release what is due (the queue is kept in due order).
        let now = now_ns();
        while queue.front().is_some_and(|(due, _)| *due <= now) {
            let (due, pkt) = queue.pop_front().expect("front exists");
            queued -= pkt.len();
            // SAFETY: pkt is a valid buffer of pkt.len() bytes.
            let w = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
            if let Ok(mut r) = rec.lock() {
                if w < 0 {
                    r.stats.write_errors += 1;
                } else {
                    r.record(now_ns().saturating_sub(due), pkt.len());
                }
            }
            if spare.len() < 1024 {
                spare.push(pkt);
            }
        }
        // Sleep until the next packet is due or one arrives (at most 50 ms, to see `stop`).
        // The sleep is aimed `early_ns` ahead of the due time and the rest is spun: a wake-up
        // from an idle vCPU comes 100-200 us late here, and `early_ns` learns how late.
        let now = now_ns();
        let next_due = queue.front().map(|(due, _)| *due);
        if next_due.is_some_and(|due| due <= now + early_ns) {
            std::hint::spin_loop();
            continue;
        }
        let aimed = next_due.map(|due| due - early_ns);
        let wake = aimed.unwrap_or(u64::MAX).min(now + 50_000_000);
        let wait_ns = wake - now;
        let ts = libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
        let ready = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if ready == 0 && aimed == Some(wake) {
            // Woken by the timer for a packet: learn the oversleep (EWMA, 1/8), plus a margin.
            let over = now_ns().saturating_sub(wake);
            early_ns =
                ((early_ns * 7 + over + EARLY_MARGIN_NS) / 8).clamp(EARLY_MIN_NS, EARLY_MAX_NS);
        }
    }
    read_drops();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 header checksum computed from scratch.
    fn checksum(h: &[u8]) -> u16 {
        let mut acc: u32 = h
            .chunks(2)
            .enumerate()
            .filter(|(i, _)| *i != 5)
            .map(|(_, w)| u16::from_be_bytes([w[0], w[1]]) as u32)
            .sum();
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn ttl_given_back_with_a_valid_checksum() {
        for ttl in [1u8, 2, 63, 64, 254] {
            let mut h = [
                0x45, 0, 0, 60, 0x12, 0x34, 0x40, 0, ttl, 17, 0, 0, 198, 18, 1, 2, 198, 18, 3, 2,
            ];
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            restore_ttl(&mut h);
            assert_eq!(h[8], ttl + 1);
            assert_eq!(
                u16::from_be_bytes([h[10], h[11]]),
                checksum(&h),
                "ttl {ttl}"
            );
        }
        // Not IPv4, too short, or already at the top: untouched.
        let mut v6 = [0x60u8; 40];
        restore_ttl(&mut v6);
        assert_eq!(v6, [0x60u8; 40]);
        let mut top = [0x45u8; 20];
        top[8] = 255;
        restore_ttl(&mut top);
        assert_eq!(top[8], 255);
    }

    #[test]
    fn tun_drop_counter() {
        let dev = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3293      31    0    0    0     0          0         0     3293      31    0    0    0     0       0          0
   dly:       0       0    0    0    0     0          0         0   700000    7000    0   42    0     0       0          0
";
        assert_eq!(tx_dropped_of("dly", dev), Some(42));
        assert_eq!(tx_dropped_of("lo", dev), Some(0));
        assert_eq!(tx_dropped_of("lss", dev), None);
        assert_eq!(tx_dropped_of("dl", dev), None);
    }

    #[test]
    fn lateness_percentiles() {
        let mut r = Recorder::new(Duration::from_millis(20), None);
        for us in 0..100u64 {
            r.record(us * 1000 + 500, 100);
        }
        let s = r.snapshot();
        assert_eq!(s.packets, 100);
        assert_eq!(s.bytes, 10_000);
        assert_eq!(s.late_us_p50, 49.0);
        assert_eq!(s.late_us_p99, 98.0);
        assert_eq!(s.late_us_max, 99.5);
        assert_eq!(s.target_delay_s, 0.02);
    }
}
