//! Netmapper's planner (seed 003 §3.4, Figs. 3.11–3.12), sans-IO: which paths to run TCP
//! flows on together, and what each result says about the edges.
//!
//! 1. **Pre-processing:** one flow per usable path, Tneck locating its bottleneck: every edge
//!    of the path gets ">B", the bottleneck "=B".
//! 2. **Recursive stage:** passes over the edges still ">N", fewest paths first. An edge's
//!    max-flow M is what the paths through it could drive into it, given what is known
//!    (below); if M ≤ N (within the tolerance) the edge cannot be refined and costs no flow
//!    (the payoff of locating bottlenecks). Otherwise the fewest paths reaching M are chosen
//!    greedily (§3.4.6: start with the path of largest standalone bandwidth, add the one that
//!    raises the max-flow most) and run together; Tneck locates the bottleneck on the largest
//!    of them only (§3.4.7). Passes repeat while anything changed.
//!
//! **Choices the seed leaves open** (written down in `docs/map.md`):
//! - Max-flow through e = min(max-flow from a super-source to e's near end over the path
//!   prefixes, max-flow from e's far end to a super-sink over the suffixes). Capacities: "="
//!   edges their value, ">" edges unbounded, a path's entry (super-source → its source) its
//!   standalone bandwidth (a path never gets more together than alone). This is an upper
//!   bound on the path-constrained optimum: an overestimate costs a probe, never a wrong
//!   bound, because of the next rule.
//! - "=" is only ever set on an edge **Tneck named**, with the sum of the flows through it
//!   (the seed's 5b.vi sets "=T" on e whenever T < M; with an over-estimated M that would
//!   claim a saturation nobody saw). In a joint step the named edge must be the one being
//!   refined or one that every flow of the step crosses. Every other edge of the run gets
//!   ">" the sum of the flows through it.
//! - An edge is probed again only if its M grew by more than the tolerance since its last
//!   probe; passes and steps are bounded.

use crate::graph::{BoundKind, Graph};
use crate::maxflow::FlowNet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlannerConfig {
    /// Relative slack when comparing bandwidths (T ≈ M, M ≤ N): TCP throughput varies by a
    /// few percent run to run.
    pub tolerance: f64,
    /// Most flows run together in one step.
    pub max_parallel: usize,
    /// Most passes of the recursive stage.
    pub max_passes: u32,
    /// Most steps in all.
    pub max_steps: u32,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            tolerance: 0.10,
            max_parallel: 8,
            max_passes: 4,
            max_steps: 500,
        }
    }
}

impl PlannerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..0.5).contains(&self.tolerance) {
            return Err(format!("tolerance {} is outside 0..0.5", self.tolerance));
        }
        if !(1..=64).contains(&self.max_parallel) {
            return Err(format!(
                "max parallel {} is outside 1..=64",
                self.max_parallel
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// One flow per path.
    Single,
    /// Flows run together to refine one edge.
    Joint,
}

/// Run these paths' flows together; locate the bottleneck on `locate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub id: u32,
    pub phase: Phase,
    pub paths: Vec<usize>,
    pub locate: usize,
    /// The edge this joint step refines, with its max-flow M and bound N before.
    pub edge: Option<usize>,
    pub maxflow_bps: Option<f64>,
    pub before_bps: Option<f64>,
}

/// One flow's throughput in a step (`None`: it failed or measured nothing).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowResult {
    pub path: usize,
    pub throughput_bps: Option<f64>,
}

/// What a step measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub flows: Vec<FlowResult>,
    /// The edge Tneck named on the located path, if it named one.
    pub bottleneck: Option<usize>,
    /// How the locator got there, for the evidence (e.g. "4 samples, confidence 1.00").
    pub note: String,
}

/// A step, what it measured and what it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    pub step: Step,
    pub result: StepResult,
    /// Edges whose bound changed.
    pub changed: Vec<usize>,
}

/// Counts to compare with the naive scheme (seed Tables 3.3–3.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStats {
    pub steps: u32,
    pub flows: u32,
    pub max_parallel: u32,
    /// `parallel[k-1]` = steps that ran k flows together.
    pub parallel: Vec<u32>,
    /// The naive scheme (§3.4.2): for each distinct set P(e) of paths through an edge, one
    /// step running all of them: flows Σ|P(e)|, parallel max |P(e)|.
    pub naive_steps: u32,
    pub naive_flows: u32,
    pub naive_max_parallel: u32,
}

pub struct Planner {
    g: Graph,
    cfg: PlannerConfig,
    pre: VecDeque<usize>,
    pass: VecDeque<usize>,
    passes: u32,
    changed: bool,
    /// Max-flow at the edge's last probe.
    tried: BTreeMap<usize, f64>,
    next_id: u32,
    log: Vec<StepLog>,
}

impl Planner {
    pub fn new(g: Graph, cfg: PlannerConfig) -> Result<Planner, String> {
        cfg.validate()?;
        let pre = g.usable_paths().into();
        Ok(Planner {
            g,
            cfg,
            pre,
            pass: VecDeque::new(),
            passes: 0,
            changed: false,
            tried: BTreeMap::new(),
            next_id: 0,
            log: Vec::new(),
        })
    }

    pub fn graph(&self) -> &Graph {
        &self.g
    }
    pub fn into_graph(self) -> Graph {
        self.g
    }
    pub fn log(&self) -> &[StepLog] {
        &self.log
    }

    fn path_bw(&self, p: usize) -> f64 {
        self.g.paths[p].bw_bps.unwrap_or(f64::INFINITY)
    }

    fn cap(&self, e: usize) -> f64 {
        let e = &self.g.edges[e];
        match e.bound {
            BoundKind::Exact => e.value_bps,
            BoundKind::Above => f64::INFINITY,
        }
    }

    /// The most that the paths `set` (all through `e`) could drive through `e`, given the
    /// bounds known now, ignoring e's own.
    pub fn maxflow_through(&self, e: usize, set: &[usize]) -> f64 {
        let (up, down) = self.flows_through(e, set);
        up.min(down)
    }

    /// Max-flow into e's near end over the prefixes, and out of its far end over the suffixes.
    fn flows_through(&self, e: usize, set: &[usize]) -> (f64, f64) {
        let n = self.g.nodes.len();
        let (ss, dd) = (n, n + 1);
        let mut up = FlowNet::new(n + 2);
        let mut down = FlowNet::new(n + 2);
        let (mut up_edges, mut down_edges) = (BTreeSet::new(), BTreeSet::new());
        for &p in set {
            let path = &self.g.paths[p];
            let Some(i) = path.edges.iter().position(|&x| x == e) else {
                continue;
            };
            up_edges.extend(path.edges[..i].iter().copied());
            down_edges.extend(path.edges[i + 1..].iter().copied());
            let first = self.g.edges[path.edges[0]].from;
            let last = self.g.edges[*path.edges.last().expect("usable")].to;
            up.add(ss, first, self.path_bw(p));
            down.add(last, dd, self.path_bw(p));
        }
        for x in up_edges {
            let ed = &self.g.edges[x];
            up.add(ed.from, ed.to, self.cap(x));
        }
        for x in down_edges {
            let ed = &self.g.edges[x];
            down.add(ed.from, ed.to, self.cap(x));
        }
        let ed = &self.g.edges[e];
        (up.max_flow(ss, ed.from), down.max_flow(ed.to, dd))
    }

    /// §3.4.6: the path of largest standalone bandwidth, then the one that raises the
    /// max-flow through `e` most, until `target` (within the tolerance) or no gain.
    pub fn greedy_subset(&self, e: usize, target: f64) -> Vec<usize> {
        let cands: Vec<usize> = self.g.edges[e]
            .paths
            .iter()
            .copied()
            .filter(|&p| self.g.paths[p].bw_bps.is_some())
            .collect();
        let Some(&first) = cands.iter().max_by(|a, b| {
            self.path_bw(**a)
                .total_cmp(&self.path_bw(**b))
                .then(b.cmp(a))
        }) else {
            return Vec::new();
        };
        let mut set = vec![first];
        // Score: the max-flow, then (to cross plateaus where one side limits and a path adds
        // only to the other) the sum of the two sides.
        let score = |s: &[usize]| {
            let (u, d) = self.flows_through(e, s);
            (u.min(d), u.min(1e30) + d.min(1e30))
        };
        let mut have = score(&set);
        while have.0 < target * (1.0 - self.cfg.tolerance / 2.0)
            && set.len() < self.cfg.max_parallel
        {
            let mut best: Option<(usize, (f64, f64))> = None;
            for &p in cands.iter().filter(|p| !set.contains(p)) {
                let mut s = set.clone();
                s.push(p);
                let f = score(&s);
                if best.is_none_or(|(_, b)| {
                    f.0 > b.0 + 1e-9 || (f.0 >= b.0 - 1e-9 && f.1 > b.1 + 1e-9)
                }) {
                    best = Some((p, f));
                }
            }
            match best {
                Some((p, f)) if f.0 > have.0 * (1.0 + 1e-9) || f.1 > have.1 * (1.0 + 1e-9) => {
                    set.push(p);
                    have = f;
                }
                _ => break,
            }
        }
        set
    }

    /// The next step to run, or `None` when the map is done.
    pub fn poll_step(&mut self) -> Option<Step> {
        if self.next_id >= self.cfg.max_steps {
            return None;
        }
        if let Some(p) = self.pre.pop_front() {
            return Some(self.make(Phase::Single, vec![p], p, None, None, None));
        }
        loop {
            let Some(e) = self.pass.pop_front() else {
                if self.passes >= self.cfg.max_passes || (self.passes > 0 && !self.changed) {
                    return None;
                }
                self.passes += 1;
                self.changed = false;
                let mut es: Vec<usize> = self
                    .g
                    .edges
                    .iter()
                    .filter(|e| e.bound == BoundKind::Above && !e.paths.is_empty())
                    .map(|e| e.id)
                    .collect();
                es.sort_by_key(|&e| (self.g.edges[e].paths.len(), e));
                if es.is_empty() {
                    return None;
                }
                self.pass = es.into();
                continue;
            };
            let edge = &self.g.edges[e];
            if edge.bound == BoundKind::Exact {
                continue;
            }
            let usable: Vec<usize> = edge
                .paths
                .iter()
                .copied()
                .filter(|&p| self.g.paths[p].bw_bps.is_some())
                .collect();
            if usable.is_empty() {
                continue;
            }
            let n = edge.value_bps;
            let m = self.maxflow_through(e, &usable);
            if m <= n * (1.0 + self.cfg.tolerance) {
                continue; // 5b.ii: cannot be refined
            }
            if self
                .tried
                .get(&e)
                .is_some_and(|&last| m <= last * (1.0 + self.cfg.tolerance))
            {
                continue;
            }
            let set = self.greedy_subset(e, m);
            if set.is_empty() {
                continue;
            }
            self.tried.insert(e, m);
            let locate = set[0];
            return Some(self.make(Phase::Joint, set, locate, Some(e), Some(m), Some(n)));
        }
    }

    fn make(
        &mut self,
        phase: Phase,
        paths: Vec<usize>,
        locate: usize,
        edge: Option<usize>,
        maxflow_bps: Option<f64>,
        before_bps: Option<f64>,
    ) -> Step {
        self.next_id += 1;
        Step {
            id: self.next_id,
            phase,
            paths,
            locate,
            edge,
            maxflow_bps,
            before_bps,
        }
    }

    /// Fold a step's result into the bounds (`now_ms`: when it was measured).
    pub fn handle_step(&mut self, step: &Step, r: StepResult, now_ms: u64) {
        let tol = self.cfg.tolerance;
        let mut sums: BTreeMap<usize, f64> = BTreeMap::new();
        for f in &r.flows {
            let Some(t) = f.throughput_bps.filter(|t| t.is_finite() && *t > 0.0) else {
                continue;
            };
            let Some(path) = self.g.paths.get(f.path) else {
                continue;
            };
            for &e in &path.edges {
                *sums.entry(e).or_default() += t;
            }
        }
        let who = step
            .paths
            .iter()
            .map(|&p| format!("{}→{}", self.g.paths[p].src, self.g.paths[p].dst))
            .collect::<Vec<_>>()
            .join(" + ");
        if step.phase == Phase::Single {
            let t = r.flows.first().and_then(|f| f.throughput_bps);
            let p = &mut self.g.paths[step.locate];
            p.bw_bps = t.filter(|t| t.is_finite() && *t > 0.0);
            p.bottleneck = r.bottleneck.filter(|b| p.edges.contains(b));
        }
        let mut changed = Vec::new();
        for (&e, &s) in &sums {
            let edge = &mut self.g.edges[e];
            if edge.bound == BoundKind::Above && s > edge.value_bps {
                let grew = edge.value_bps == 0.0 || s > edge.value_bps * (1.0 + tol);
                edge.value_bps = s;
                edge.measured_at_ms = Some(now_ms);
                edge.evidence = Some(format!("step {}: {who} carried it together", step.id));
                if grew {
                    changed.push(e);
                }
            }
        }
        let located = &self.g.paths[step.locate];
        // In a joint step a verdict counts only for the edge being refined or one every flow
        // of the step crosses: an edge only some flows cross was measured while the others
        // took part of its flows' share elsewhere (the bench saw ra→rc named at 0.7 of its
        // capacity while two flows shared rc→re).
        let all_cross = |b: usize| {
            step.paths
                .iter()
                .all(|&p| self.g.paths[p].edges.contains(&b))
        };
        let credible = |b: &usize| {
            located.edges.contains(b)
                && (step.phase == Phase::Single || step.edge == Some(*b) || all_cross(*b))
        };
        if let Some(b) = r.bottleneck.filter(credible) {
            if let Some(&s) = sums.get(&b) {
                let edge = &mut self.g.edges[b];
                let was = (edge.bound, edge.value_bps);
                edge.bound = BoundKind::Exact;
                edge.value_bps = s;
                edge.measured_at_ms = Some(now_ms);
                edge.evidence = Some(format!(
                    "step {}: Tneck on {}→{} named it ({}) while {who} ran",
                    step.id, located.src, located.dst, r.note
                ));
                if was.0 != BoundKind::Exact || (s - was.1).abs() > was.1 * tol {
                    changed.push(b);
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        self.changed |= !changed.is_empty();
        self.log.push(StepLog {
            step: step.clone(),
            result: r,
            changed,
        });
    }

    pub fn stats(&self) -> PlanStats {
        let mut parallel = vec![0u32; self.cfg.max_parallel.max(1)];
        let mut flows = 0;
        for l in &self.log {
            let k = l.step.paths.len();
            flows += k as u32;
            if k >= 1 {
                if k > parallel.len() {
                    parallel.resize(k, 0);
                }
                parallel[k - 1] += 1;
            }
        }
        let sets: BTreeSet<Vec<usize>> = self
            .g
            .edges
            .iter()
            .filter(|e| !e.paths.is_empty())
            .map(|e| e.paths.clone())
            .collect();
        while parallel.last() == Some(&0) {
            parallel.pop();
        }
        PlanStats {
            steps: self.log.len() as u32,
            flows,
            max_parallel: self
                .log
                .iter()
                .map(|l| l.step.paths.len() as u32)
                .max()
                .unwrap_or(0),
            parallel,
            naive_steps: sets.len() as u32,
            naive_flows: sets.iter().map(|s| s.len() as u32).sum(),
            naive_max_parallel: sets.iter().map(|s| s.len() as u32).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests;
