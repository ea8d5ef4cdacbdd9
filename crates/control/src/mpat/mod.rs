//! MPAT (seed 003 §2): an aggregate of N flows that keeps N Reno control loops ("windows") and
//! gives flow i the share x_i·C of their sum C = ΣC_j. This is the sans-IO reference, per packet:
//! the caller says what happened (`send`, `ack`, `loss`, `join`, `leave`, `reweight`,
//! `set_active`) at an explicit `now`, and the aggregate says whether and through which window a
//! packet may go. The kernel version (`mgrp_mpat`) is held to it through the pure rules in
//! `src/bpf/rules.h`; [`sim`] runs it against plain Reno on a packet-level bottleneck.
//!
//! It lives in `mgrp-control` (not a crate of its own) because the kernel rules are tested
//! against it here and it needs nothing but std.

pub mod sim;

use std::collections::BTreeMap;

/// A flow of the aggregate (the caller's id: a socket, a connection number).
pub type FlowId = u64;

/// Why an aggregate refused a change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MpatError {
    #[error("weight must be finite and > 0, got {0}")]
    BadWeight(f64),
    #[error("flow {0} is not in the aggregate")]
    UnknownFlow(FlowId),
    #[error("flow {0} is already in the aggregate")]
    DuplicateFlow(FlowId),
}

/// One Reno control loop of the aggregate, in packets.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub cwnd: f64,
    pub ssthresh: f64,
    /// Packets charged to this window and not yet acked or lost.
    pub outstanding: u32,
    /// When this window last halved (ns), so that a burst of losses cuts it once per RTT.
    pub last_halving_ns: Option<u64>,
    pub halvings: u64,
}

impl Window {
    fn new() -> Self {
        Window {
            cwnd: INITIAL_CWND,
            ssthresh: f64::INFINITY,
            outstanding: 0,
            last_halving_ns: None,
            halvings: 0,
        }
    }

    fn is_open(&self) -> bool {
        (self.outstanding as f64) < self.cwnd
    }

    /// Reno on one ack: +1 in slow start, +1/cwnd in congestion avoidance.
    fn on_ack(&mut self) {
        self.cwnd += if self.cwnd < self.ssthresh {
            1.0
        } else {
            1.0 / self.cwnd
        };
    }

    /// Reno on a loss: halve, unless this window already halved within the last RTT.
    fn on_loss(&mut self, now_ns: u64, rtt_ns: u64) {
        if !may_halve(now_ns, self.last_halving_ns, rtt_ns) {
            return;
        }
        self.ssthresh = (self.cwnd / 2.0).max(MIN_CWND);
        self.cwnd = self.ssthresh;
        self.last_halving_ns = Some(now_ns);
        self.halvings += 1;
    }
}

/// A new window's cwnd (packets), as a new TCP flow's.
pub const INITIAL_CWND: f64 = 2.0;
/// No window is halved below this.
pub const MIN_CWND: f64 = 2.0;

/// At most one halving per window per RTT: a loss within `rtt_ns` of the last halving belongs to
/// the same loss episode. The kernel's `mgrp_mpat_may_halve` is the same rule.
pub fn may_halve(now_ns: u64, last_ns: Option<u64>, rtt_ns: u64) -> bool {
    match last_ns {
        None => true,
        Some(last) => now_ns.saturating_sub(last) >= rtt_ns,
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Flow {
    weight: f64,
    /// Has data to send: only active flows share C (work conservation).
    active: bool,
    inflight: u32,
    allowance: f64,
}

/// What the aggregate knows about a flow, for stats and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowView {
    pub weight: f64,
    pub active: bool,
    pub inflight: u32,
    /// A_i: the packets the flow may have in flight now.
    pub allowance: f64,
}

/// A packet the aggregate let through: charge its ack or loss back with this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket {
    pub flow: FlowId,
    /// The window it was charged to (windows are named by the flow that brought them).
    pub window: FlowId,
}

/// SplitMix64: a small, seedable generator so that runs repeat exactly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize % n.max(1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// An MPAT aggregate: one window per member flow, shares by weight.
#[derive(Debug, Clone)]
pub struct Mpat {
    windows: BTreeMap<FlowId, Window>,
    flows: BTreeMap<FlowId, Flow>,
    rng: Rng,
}

impl Mpat {
    /// An empty aggregate whose window choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        Mpat {
            windows: BTreeMap::new(),
            flows: BTreeMap::new(),
            rng: Rng::new(seed),
        }
    }

    /// A flow joins with `weight` (any positive scale: shares are weight/Σweights) and brings
    /// one window, so the aggregate is as aggressive as its number of flows.
    pub fn join(&mut self, flow: FlowId, weight: f64) -> Result<(), MpatError> {
        check_weight(weight)?;
        if self.flows.contains_key(&flow) {
            return Err(MpatError::DuplicateFlow(flow));
        }
        self.flows.insert(
            flow,
            Flow {
                weight,
                active: true,
                inflight: 0,
                allowance: 0.0,
            },
        );
        self.windows.insert(flow, Window::new());
        self.recompute();
        Ok(())
    }

    /// A flow leaves with its window; later acks charged to that window only free the flow.
    pub fn leave(&mut self, flow: FlowId) -> Result<(), MpatError> {
        self.flows
            .remove(&flow)
            .ok_or(MpatError::UnknownFlow(flow))?;
        self.windows.remove(&flow);
        self.recompute();
        Ok(())
    }

    pub fn reweight(&mut self, flow: FlowId, weight: f64) -> Result<(), MpatError> {
        check_weight(weight)?;
        self.flows
            .get_mut(&flow)
            .ok_or(MpatError::UnknownFlow(flow))?
            .weight = weight;
        self.recompute();
        Ok(())
    }

    /// Whether the flow has data to send. An idle flow's share goes to the others (the
    /// work-conserving scheduler of seed 003 §2.6); its window keeps running on their packets.
    pub fn set_active(&mut self, flow: FlowId, active: bool) -> Result<(), MpatError> {
        self.flows
            .get_mut(&flow)
            .ok_or(MpatError::UnknownFlow(flow))?
            .active = active;
        self.recompute();
        Ok(())
    }

    /// May `flow` send a packet now? If so it is charged to an open window drawn uniformly at
    /// random (seed 003 §2.4, policy 3) and the ticket says which.
    pub fn send(&mut self, flow: FlowId) -> Option<Ticket> {
        let f = self.flows.get(&flow)?;
        if !f.active || f.inflight >= whole_packets(f.allowance) {
            return None;
        }
        let open: Vec<FlowId> = self
            .windows
            .iter()
            .filter(|(_, w)| w.is_open())
            .map(|(id, _)| *id)
            .collect();
        if open.is_empty() {
            return None;
        }
        let window = open[self.rng.below(open.len())];
        if let Some(w) = self.windows.get_mut(&window) {
            w.outstanding += 1;
        }
        if let Some(f) = self.flows.get_mut(&flow) {
            f.inflight += 1;
        }
        Some(Ticket { flow, window })
    }

    /// The packet of `t` was acked: Reno's increase on its window.
    pub fn ack(&mut self, t: Ticket) {
        self.release(t);
        if let Some(w) = self.windows.get_mut(&t.window) {
            w.on_ack();
        }
        self.recompute();
    }

    /// The packet of `t` was lost (seen at `now_ns`, the path's RTT `rtt_ns`): its window
    /// halves, at most once per RTT.
    pub fn loss(&mut self, t: Ticket, now_ns: u64, rtt_ns: u64) {
        self.release(t);
        if let Some(w) = self.windows.get_mut(&t.window) {
            w.on_loss(now_ns, rtt_ns);
        }
        self.recompute();
    }

    /// As `mgrp_mpat` in the kernel, which cannot map packets to windows: a flow may send
    /// while under max(2, A_i), whatever the windows hold.
    pub fn send_unmapped(&mut self, flow: FlowId) -> bool {
        let Some(f) = self.flows.get_mut(&flow) else {
            return false;
        };
        if !f.active || f.inflight >= whole_packets(f.allowance).max(2) {
            return false;
        }
        f.inflight += 1;
        true
    }

    /// As the kernel: an ack of `flow` is charged to a window drawn with probability cwnd_j/C.
    pub fn ack_unmapped(&mut self, flow: FlowId) {
        self.release_flow(flow);
        if let Some(j) = self.pick_by_cwnd() {
            if let Some(w) = self.windows.get_mut(&j) {
                w.on_ack();
            }
        }
        self.recompute();
    }

    /// As the kernel: a loss of `flow` frees its packet; a new loss episode of the flow (the
    /// kernel's `ssthresh` call) halves a window drawn as for acks, at most once per RTT.
    pub fn loss_unmapped(&mut self, flow: FlowId, episode: bool, now_ns: u64, rtt_ns: u64) {
        self.release_flow(flow);
        if episode {
            if let Some(j) = self.pick_by_cwnd() {
                if let Some(w) = self.windows.get_mut(&j) {
                    w.on_loss(now_ns, rtt_ns);
                }
            }
        }
        self.recompute();
    }

    fn release_flow(&mut self, flow: FlowId) {
        if let Some(f) = self.flows.get_mut(&flow) {
            f.inflight = f.inflight.saturating_sub(1);
        }
    }

    fn pick_by_cwnd(&mut self) -> Option<FlowId> {
        let c = self.aggregate_cwnd();
        let mut at = self.rng.unit() * c;
        for (id, w) in &self.windows {
            if at < w.cwnd {
                return Some(*id);
            }
            at -= w.cwnd;
        }
        self.windows.keys().next_back().copied()
    }

    fn release(&mut self, t: Ticket) {
        if let Some(w) = self.windows.get_mut(&t.window) {
            w.outstanding = w.outstanding.saturating_sub(1);
        }
        if let Some(f) = self.flows.get_mut(&t.flow) {
            f.inflight = f.inflight.saturating_sub(1);
        }
    }

    /// Eq. 2.1 on every change: A_i = x_i·C, with x_i = weight_i / Σ active weights.
    fn recompute(&mut self) {
        let c = self.aggregate_cwnd();
        let total: f64 = self
            .flows
            .values()
            .filter(|f| f.active)
            .map(|f| f.weight)
            .sum();
        for f in self.flows.values_mut() {
            f.allowance = if f.active && total > 0.0 {
                f.weight / total * c
            } else {
                0.0
            };
        }
    }

    /// C = ΣC_j (packets).
    pub fn aggregate_cwnd(&self) -> f64 {
        self.windows.values().map(|w| w.cwnd).sum()
    }

    pub fn window(&self, id: FlowId) -> Option<&Window> {
        self.windows.get(&id)
    }

    pub fn windows(&self) -> impl Iterator<Item = (FlowId, &Window)> {
        self.windows.iter().map(|(k, v)| (*k, v))
    }

    pub fn flow(&self, id: FlowId) -> Option<FlowView> {
        self.flows.get(&id).map(|f| FlowView {
            weight: f.weight,
            active: f.active,
            inflight: f.inflight,
            allowance: f.allowance,
        })
    }

    /// Test and kernel-mirror hook: set a window's state directly.
    pub fn set_window(&mut self, id: FlowId, cwnd: f64, ssthresh: f64) {
        if let Some(w) = self.windows.get_mut(&id) {
            w.cwnd = cwnd;
            w.ssthresh = ssthresh;
        }
        self.recompute();
    }
}

/// A_i in whole packets: rounded to the nearest (rounding up favours the small shares by up
/// to a packet each, which at 1:…:5 over a few dozen packets is several percent), and at least
/// one so that a flow with a tiny share still moves.
pub fn whole_packets(allowance: f64) -> u32 {
    if allowance <= 0.0 {
        return 0;
    }
    (allowance.round() as u32).max(1)
}

fn check_weight(w: f64) -> Result<(), MpatError> {
    if w.is_finite() && w > 0.0 {
        Ok(())
    } else {
        Err(MpatError::BadWeight(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(weights: &[f64]) -> Mpat {
        let mut m = Mpat::new(7);
        for (i, w) in weights.iter().enumerate() {
            m.join(i as u64, *w).unwrap();
        }
        m
    }

    #[test]
    fn shares_follow_weights_and_recompute_on_every_change() {
        let mut m = agg(&[1.0, 2.0, 3.0]);
        for id in 0..3 {
            m.set_window(id, 10.0, 5.0);
        }
        let a: Vec<f64> = (0..3).map(|i| m.flow(i).unwrap().allowance).collect();
        assert_eq!(a, vec![5.0, 10.0, 15.0]);
        m.reweight(0, 3.0).unwrap();
        assert_eq!(m.flow(0).unwrap().allowance, 30.0 * 3.0 / 8.0);
        // An idle flow's share goes to the others.
        m.set_active(2, false).unwrap();
        assert_eq!(m.flow(0).unwrap().allowance, 18.0);
        assert_eq!(m.flow(2).unwrap().allowance, 0.0);
        m.leave(1).unwrap();
        assert_eq!(m.aggregate_cwnd(), 20.0);
        assert_eq!(m.flow(0).unwrap().allowance, 20.0);
    }

    #[test]
    fn bad_input_is_refused() {
        let mut m = agg(&[1.0]);
        assert_eq!(m.join(0, 1.0), Err(MpatError::DuplicateFlow(0)));
        assert_eq!(m.join(1, 0.0), Err(MpatError::BadWeight(0.0)));
        assert!(matches!(m.join(1, f64::NAN), Err(MpatError::BadWeight(_))));
        assert_eq!(m.reweight(0, -1.0), Err(MpatError::BadWeight(-1.0)));
        assert_eq!(m.reweight(9, 1.0), Err(MpatError::UnknownFlow(9)));
        assert_eq!(m.leave(9), Err(MpatError::UnknownFlow(9)));
        assert!(m.send(9).is_none());
    }

    #[test]
    fn one_loss_cuts_the_aggregate_by_one_window_half_once_per_rtt() {
        let n = 5;
        let mut m = agg(&[1.0; 5]);
        for id in 0..n {
            m.set_window(id, 20.0, 10.0);
        }
        let c0 = m.aggregate_cwnd();
        let t = m.send(0).unwrap();
        m.loss(t, 1_000_000, 40_000_000);
        // N windows, one halves: C falls by 1/(2N), not by half as one big Reno would.
        assert_eq!(m.aggregate_cwnd(), c0 * (1.0 - 1.0 / (2.0 * n as f64)));
        // A second loss on the same window within the RTT is the same episode.
        let w = t.window;
        let c1 = m.aggregate_cwnd();
        m.loss(Ticket { flow: 0, window: w }, 30_000_000, 40_000_000);
        assert_eq!(m.aggregate_cwnd(), c1);
        m.loss(Ticket { flow: 0, window: w }, 41_000_000, 40_000_000);
        assert_eq!(m.window(w).unwrap().halvings, 2);
    }

    #[test]
    fn packets_go_through_open_windows_only_and_uniformly() {
        let mut m = agg(&[1.0, 1.0, 1.0, 1.0]);
        for id in 0..4 {
            m.set_window(id, 1000.0, 1.0);
        }
        let mut per = [0u32; 4];
        // Flow 0 may have 1000 in flight (a quarter of C).
        for _ in 0..1000 {
            let t = m.send(0).unwrap();
            per[t.window as usize] += 1;
        }
        assert!(m.send(0).is_none(), "over its allowance");
        for c in per {
            assert!((c as f64 - 250.0).abs() < 50.0, "{per:?}");
        }
        // Close every window: nothing goes.
        for id in 0..4 {
            m.set_window(id, 2.0, 1.0);
        }
        assert!(m.send(1).is_none());
    }

    #[test]
    fn same_seed_same_choices() {
        let run = |seed| {
            let mut m = Mpat::new(seed);
            for i in 0..3 {
                m.join(i, 1.0).unwrap();
                m.set_window(i, 100.0, 1.0);
            }
            (0..50)
                .map(|_| m.send(0).unwrap().window)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
