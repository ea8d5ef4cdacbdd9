//! A packet-level discrete-event model of one shared bottleneck: a FIFO drop-tail queue served
//! at `rate_pps`, every sender's propagation delay on the return path (plus a small per-sender
//! jitter so that deterministic Reno flows do not phase-lock), and bulk senders that are
//! window-limited AIMD loops: plain Reno, mulTCP (one flow acting as N: +N per RTT, cut by
//! 1/(2N)) and the members of one MPAT aggregate. A drop is seen by its sender one RTT later
//! (as three dup acks would be); timeouts are not modelled.
//!
//! Written next to the reference rather than in `mgrp-estimate`'s fluid model: the fluid model
//! has rates, not packets, and MPAT's point is which window each packet and loss is charged to.

use super::{Mpat, Rng, Ticket};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// The bottleneck.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Packets per second the queue is served at (C).
    pub rate_pps: f64,
    /// Queue length in packets; an arrival to a full queue is dropped.
    pub buffer_pkts: usize,
    /// Base round-trip propagation delay.
    pub rtt_ns: u64,
    /// Each sender's extra delay is drawn in [0, jitter_ns), and each packet's in [0, jitter_ns)
    /// on top: without it drop-tail phase effects lock some Reno flows out.
    pub jitter_ns: u64,
}

/// A sender's congestion control.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Reno,
    /// One flow acting as N: α = N (per RTT), β = 1/(2N).
    MulTcp {
        n: f64,
    },
    /// A member of the MPAT aggregate with this weight.
    Mpat {
        weight: f64,
    },
}

#[derive(Debug, Clone)]
struct Sender {
    kind: Kind,
    extra_ns: u64,
    cwnd: f64,
    ssthresh: f64,
    inflight: u32,
    last_halving_ns: Option<u64>,
    delivered: u64,
    halvings: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pkt {
    sender: usize,
    sent_ns: u64,
    ticket: Option<Ticket>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Depart,
    Ack(Pkt),
    Loss(Pkt),
    /// Scheduled changes: reweight an MPAT member.
    Reweight(usize, u64),
}

/// What a run measured: per sender, packets delivered per second in the measuring window.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub kinds: Vec<Kind>,
    pub pps: Vec<f64>,
    pub halvings: Vec<u64>,
    pub drops: u64,
}

impl Outcome {
    /// Throughput of the senders of a kind (`pred`), in sender order.
    pub fn of(&self, pred: impl Fn(&Kind) -> bool) -> Vec<f64> {
        self.kinds
            .iter()
            .zip(&self.pps)
            .filter(|(k, _)| pred(k))
            .map(|(_, p)| *p)
            .collect()
    }
}

/// One simulation run.
pub struct Sim {
    link: Link,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    queue: VecDeque<Pkt>,
    busy: bool,
    senders: Vec<Sender>,
    mpat: Mpat,
    measuring_from: u64,
    drops: u64,
    rng: Rng,
    /// Run the MPAT members as the kernel's `mgrp_mpat` does (see `Mpat::send_unmapped`).
    kernel_like: bool,
}

impl Sim {
    pub fn new(link: Link, kinds: &[Kind], seed: u64) -> Sim {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut mpat = Mpat::new(seed);
        let senders = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                if let Kind::Mpat { weight } = k {
                    // Weights are checked by the caller's test setup; a bad one just stays out.
                    let _ = mpat.join(i as u64, *weight);
                }
                Sender {
                    kind: *k,
                    extra_ns: (rng.unit() * link.jitter_ns as f64) as u64,
                    cwnd: 2.0,
                    ssthresh: f64::INFINITY,
                    inflight: 0,
                    last_halving_ns: None,
                    delivered: 0,
                    halvings: 0,
                }
            })
            .collect();
        Sim {
            link,
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            queue: VecDeque::new(),
            busy: false,
            senders,
            mpat,
            measuring_from: 0,
            drops: 0,
            rng,
            kernel_like: false,
        }
    }

    /// The MPAT members behave as `mgrp_mpat` in the kernel: acks charged to a window drawn
    /// ∝ cwnd, one loss charge per loss episode of the flow, at least 2 packets per member.
    pub fn kernel_like(mut self) -> Sim {
        self.kernel_like = true;
        self
    }

    /// At `at_ns`, set MPAT member `sender`'s weight to `weight_milli`/1000.
    pub fn reweight_at(&mut self, at_ns: u64, sender: usize, weight_milli: u64) {
        self.push(at_ns, Ev::Reweight(sender, weight_milli));
    }

    /// Run for `warmup_ns`, then measure for `measure_ns`.
    pub fn run(mut self, warmup_ns: u64, measure_ns: u64) -> Outcome {
        for i in 0..self.senders.len() {
            self.pump(i);
        }
        self.measuring_from = warmup_ns;
        let end = warmup_ns + measure_ns;
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            if t > end {
                break;
            }
            self.now = t;
            self.handle(ev);
        }
        let secs = measure_ns as f64 / 1e9;
        Outcome {
            kinds: self.senders.iter().map(|s| s.kind).collect(),
            pps: self
                .senders
                .iter()
                .map(|s| s.delivered as f64 / secs)
                .collect(),
            halvings: self
                .senders
                .iter()
                .enumerate()
                .map(|(i, s)| match s.kind {
                    Kind::Mpat { .. } => self.mpat.window(i as u64).map_or(0, |w| w.halvings),
                    _ => s.halvings,
                })
                .collect(),
            drops: self.drops,
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn service_ns(&self) -> u64 {
        (1e9 / self.link.rate_pps) as u64
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Depart => self.depart(),
            Ev::Ack(p) => self.ack(p),
            Ev::Loss(p) => self.loss(p),
            Ev::Reweight(i, w) => {
                let _ = self.mpat.reweight(i as u64, w as f64 / 1000.0);
                self.pump_mpat(i);
            }
        }
    }

    /// The way back to sender `i`: base RTT, its own extra delay and this packet's jitter.
    fn back_ns(&mut self, i: usize) -> u64 {
        let jitter = (self.rng.unit() * self.link.jitter_ns as f64) as u64;
        self.link.rtt_ns + self.senders[i].extra_ns + jitter
    }

    fn depart(&mut self) {
        if let Some(p) = self.queue.pop_front() {
            let back = self.back_ns(p.sender);
            self.push(self.now + back, Ev::Ack(p));
        }
        if self.queue.is_empty() {
            self.busy = false;
        } else {
            self.push(self.now + self.service_ns(), Ev::Depart);
        }
    }

    fn ack(&mut self, p: Pkt) {
        if self.now >= self.measuring_from {
            self.senders[p.sender].delivered += 1;
        }
        match p.ticket {
            Some(t) if self.kernel_like => {
                self.mpat.ack_unmapped(t.flow);
                self.pump_mpat(p.sender);
            }
            Some(t) => {
                self.mpat.ack(t);
                self.pump_mpat(p.sender);
            }
            None => {
                let s = &mut self.senders[p.sender];
                s.inflight -= 1;
                let alpha = alpha(s.kind);
                s.cwnd += if s.cwnd < s.ssthresh {
                    1.0
                } else {
                    alpha / s.cwnd
                };
                self.pump(p.sender);
            }
        }
    }

    fn loss(&mut self, p: Pkt) {
        let rtt = self.now - p.sent_ns;
        match p.ticket {
            Some(t) if self.kernel_like => {
                // The flow's own loss episode, as the kernel's recovery would see it.
                let now = self.now;
                let s = &mut self.senders[p.sender];
                let episode = super::may_halve(now, s.last_halving_ns, rtt);
                if episode {
                    s.last_halving_ns = Some(now);
                }
                self.mpat.loss_unmapped(t.flow, episode, now, rtt);
                self.pump_mpat(p.sender);
            }
            Some(t) => {
                self.mpat.loss(t, self.now, rtt);
                self.pump_mpat(p.sender);
            }
            None => {
                let now = self.now;
                let s = &mut self.senders[p.sender];
                s.inflight -= 1;
                if super::may_halve(now, s.last_halving_ns, rtt) {
                    s.ssthresh = (s.cwnd * (1.0 - beta(s.kind))).max(2.0);
                    s.cwnd = s.ssthresh;
                    s.last_halving_ns = Some(now);
                    s.halvings += 1;
                }
                self.pump(p.sender);
            }
        }
    }

    /// Every MPAT member may send after a change to C, starting with `first` (the others in a
    /// rotating order, so that no member always gets the first pick of open windows).
    fn pump_mpat(&mut self, first: usize) {
        let n = self.senders.len();
        for k in 0..n {
            let i = (first + k) % n;
            if matches!(self.senders[i].kind, Kind::Mpat { .. }) {
                self.pump(i);
            }
        }
    }

    /// Send while the sender's control lets it.
    fn pump(&mut self, i: usize) {
        loop {
            let ticket = match self.senders[i].kind {
                Kind::Mpat { .. } if self.kernel_like => {
                    if !self.mpat.send_unmapped(i as u64) {
                        return;
                    }
                    Some(Ticket {
                        flow: i as u64,
                        window: u64::MAX,
                    })
                }
                Kind::Mpat { .. } => match self.mpat.send(i as u64) {
                    Some(t) => Some(t),
                    None => return,
                },
                _ => {
                    let s = &mut self.senders[i];
                    if s.inflight as f64 >= s.cwnd {
                        return;
                    }
                    s.inflight += 1;
                    None
                }
            };
            self.enqueue(Pkt {
                sender: i,
                sent_ns: self.now,
                ticket,
            });
        }
    }

    fn enqueue(&mut self, p: Pkt) {
        if self.queue.len() >= self.link.buffer_pkts {
            self.drops += 1;
            let back = self.back_ns(p.sender);
            self.push(self.now + back, Ev::Loss(p));
            return;
        }
        self.queue.push_back(p);
        if !self.busy {
            self.busy = true;
            self.push(self.now + self.service_ns(), Ev::Depart);
        }
    }
}

fn alpha(k: Kind) -> f64 {
    match k {
        Kind::MulTcp { n } => n,
        _ => 1.0,
    }
}

fn beta(k: Kind) -> f64 {
    match k {
        Kind::MulTcp { n } => 1.0 / (2.0 * n),
        _ => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 Mbit/s of 1500-byte packets, 40 ms, a BDP of buffer.
    fn link() -> Link {
        Link {
            rate_pps: 20e6 / 8.0 / 1500.0,
            buffer_pkts: 67,
            rtt_ns: 40_000_000,
            jitter_ns: 2_000_000,
        }
    }

    const S: u64 = 1_000_000_000;

    fn run(weights: &[f64], k_reno: usize, seed: u64) -> Outcome {
        let mut kinds: Vec<Kind> = weights.iter().map(|&w| Kind::Mpat { weight: w }).collect();
        kinds.extend(std::iter::repeat_n(Kind::Reno, k_reno));
        Sim::new(link(), &kinds, seed).run(20 * S, 100 * S)
    }

    fn is_mpat(k: &Kind) -> bool {
        matches!(k, Kind::Mpat { .. })
    }

    /// Each member's share of the aggregate against its weight's: the worst relative error.
    fn worst_share_error(o: &Outcome, weights: &[f64]) -> f64 {
        let m = o.of(is_mpat);
        let (sum, wsum) = (m.iter().sum::<f64>(), weights.iter().sum::<f64>());
        m.iter()
            .zip(weights)
            .map(|(p, w)| ((p / sum) / (w / wsum) - 1.0).abs())
            .fold(0.0, f64::max)
    }

    /// Aggregate / (N × the mean Reno flow).
    fn fair_share_ratio(o: &Outcome) -> f64 {
        let m = o.of(is_mpat);
        let r = o.of(|k| *k == Kind::Reno);
        let mean_reno = r.iter().sum::<f64>() / r.len() as f64;
        m.iter().sum::<f64>() / (m.len() as f64 * mean_reno)
    }

    #[test]
    fn mpat_splits_by_weight_and_holds_n_fair_shares() {
        for weights in [&[1.0, 2.0, 3.0][..], &[1.0, 2.0, 3.0, 4.0, 5.0][..]] {
            for seed in 1..=3 {
                let o = run(weights, 3, seed);
                let err = worst_share_error(&o, weights);
                let fair = fair_share_ratio(&o);
                eprintln!("weights {weights:?} seed {seed}: pps {:?} share error {err:.3} aggregate/N fair {fair:.2}", o.pps);
                // Seeds 1–3 here: worst share error 0.1–0.7 % (1:2:3 and 1:…:5).
                assert!(err < 0.05, "weights {weights:?} seed {seed}: {err}");
                // Seeds 1–3: 0.80, 1.18, 0.95 (1:2:3) and 0.95–0.96 (1:…:5); the Reno flows
                // themselves spread by 2× under drop-tail, hence the band.
                assert!((0.75..1.33).contains(&fair), "seed {seed}: {fair}");
            }
        }
    }

    /// The kernel's variant (acks and loss episodes charged at random ∝ cwnd, not per packet).
    #[test]
    fn kernel_like_mpat_splits_and_is_about_as_fair() {
        let weights = [1.0, 2.0, 3.0];
        for seed in 1..=3 {
            let mut kinds: Vec<Kind> = weights.iter().map(|&w| Kind::Mpat { weight: w }).collect();
            kinds.extend([Kind::Reno; 3]);
            let o = Sim::new(link(), &kinds, seed)
                .kernel_like()
                .run(20 * S, 100 * S);
            let err = worst_share_error(&o, &weights);
            let fair = fair_share_ratio(&o);
            eprintln!(
                "kernel-like seed {seed}: pps {:?} share error {err:.3} aggregate/N fair {fair:.2}",
                o.pps
            );
            // Seeds 1–3: share error 0.1–0.4 %, aggregate / N fair 0.82, 1.18, 1.05 (the
            // per-packet reference: 0.80, 1.18, 0.95).
            assert!(err < 0.05, "seed {seed}: {err}");
            assert!((0.75..1.33).contains(&fair), "seed {seed}: {fair}");
        }
    }

    #[test]
    fn reweighting_moves_the_split() {
        let kinds = [
            Kind::Mpat { weight: 1.0 },
            Kind::Mpat { weight: 1.0 },
            Kind::Reno,
        ];
        let mut sim = Sim::new(link(), &kinds, 4);
        sim.reweight_at(10 * S, 1, 4000);
        let o = sim.run(15 * S, 60 * S);
        let ratio = o.pps[1] / o.pps[0];
        assert!((ratio - 4.0).abs() / 4.0 < 0.05, "{ratio}");
    }

    #[test]
    fn multcp_beside_reno_takes_roughly_n_shares() {
        for seed in 1..=2 {
            let kinds = [Kind::MulTcp { n: 3.0 }, Kind::Reno, Kind::Reno, Kind::Reno];
            let o = Sim::new(link(), &kinds, seed).run(20 * S, 100 * S);
            let reno = o.pps[1..].iter().sum::<f64>() / 3.0;
            let ratio = o.pps[0] / reno;
            eprintln!("mulTCP N=3 seed {seed}: {:?} ratio {ratio:.2}", o.pps);
            // α/β = 2N² against Reno's 2: by √(α/β·(1 − β/2)) about 1.1·N.
            assert!((2.0..4.5).contains(&ratio), "{ratio}");
        }
    }

    #[test]
    fn runs_repeat_with_a_seed() {
        let a = run(&[1.0, 2.0], 1, 9);
        let b = run(&[1.0, 2.0], 1, 9);
        assert_eq!(a.pps, b.pps);
        assert!(a.drops > 0 && a.halvings.iter().all(|h| *h > 0));
    }
}
