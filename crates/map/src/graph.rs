//! Netmapper's graph (seed 003 §3.1): pairwise traceroutes between agents → a directed graph
//! of agents and routers, each edge annotated ">B" (a path through it carried B) or "=B"
//! (Tneck found it to be a path's bottleneck; B is the TCP-available bandwidth). Sans-IO.
//!
//! **Aliases.** A router answers from the interface the probe came in on (the testbed sets
//! this; RFC 1812 routers commonly do), so one router shows a different address to paths
//! arriving on different links. Two addresses are merged into one router when they are the
//! *immediate predecessors of one address* on some paths: on a point-to-point link the far
//! interface is reached from exactly one router (the "common successor" rule of analytical
//! alias resolution). Multi-access links (a LAN with several routers) would merge routers
//! wrongly; agents are never merged. A silent hop (no reply) is a node of its own per path
//! and TTL: never guessed to be some other path's router.
//!
//! **Unusable paths.** A path that did not reach its agent (TTL bound, unreachable, agent
//! down), or where one address answers at two TTLs (a loop), is kept with its `problem` and
//! no edges: the planner never probes it.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// What a traceroute from `src` to the agent `dst` saw: the answering address per TTL
/// (1..), `None` for silence. When `reached`, the last entry is `dst` itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathObs {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub hops: Vec<Option<IpAddr>>,
    pub reached: bool,
    /// Why the trace could not be made at all (connect failed, ...), if so.
    pub error: Option<String>,
    /// Base delay per hop, ns (min over rounds), same indexing as `hops`.
    #[serde(default)]
    pub base_ns: Vec<Option<i64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Agent,
    Router,
    /// A hop that never answered (one per path and TTL).
    Silent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: usize,
    pub kind: NodeKind,
    /// The addresses the node answered from (merged aliases for a router).
    pub addrs: Vec<IpAddr>,
    pub label: String,
}

/// ">" (lower bound) or "=" (saturated: the path's bottleneck).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BoundKind {
    #[serde(rename = ">")]
    Above,
    #[serde(rename = "=")]
    Exact,
}

impl BoundKind {
    pub fn symbol(self) -> &'static str {
        match self {
            BoundKind::Above => ">",
            BoundKind::Exact => "=",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub id: usize,
    pub from: usize,
    pub to: usize,
    /// The address that answered at the edge's far end (first seen): names the physical link.
    pub to_addr: Option<IpAddr>,
    pub bound: BoundKind,
    /// bit/s; ">0" until a path through it is measured.
    pub value_bps: f64,
    /// When the bound was last set (ms since the Unix epoch), if ever.
    pub measured_at_ms: Option<u64>,
    /// What set it (the step, the paths run together, the locator's verdict).
    pub evidence: Option<String>,
    /// Base latency of the link (far hop minus near hop, min over rounds), ns, if known.
    pub latency_ns: Option<i64>,
    /// Indices of the usable paths through this edge: P(e).
    pub paths: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapPath {
    pub id: usize,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Edges in order; empty for an unusable path.
    pub edges: Vec<usize>,
    /// Why the path is not usable (not reached, loop, trace error), if so.
    pub problem: Option<String>,
    /// Standalone TCP bandwidth (one flow alone), bit/s, once measured.
    pub bw_bps: Option<f64>,
    /// The edge Tneck named for this path alone.
    pub bottleneck: Option<usize>,
}

impl MapPath {
    pub fn usable(&self) -> bool {
        self.problem.is_none() && !self.edges.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub paths: Vec<MapPath>,
}

/// Union-find over addresses (small: a few hundred at most).
struct Aliases {
    parent: BTreeMap<IpAddr, IpAddr>,
}

impl Aliases {
    fn find(&mut self, a: IpAddr) -> IpAddr {
        let p = *self.parent.entry(a).or_insert(a);
        if p == a {
            return a;
        }
        let r = self.find(p);
        self.parent.insert(a, r);
        r
    }
    fn union(&mut self, a: IpAddr, b: IpAddr) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            // The smaller address is the group's name: deterministic.
            let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.parent.insert(hi, lo);
        }
    }
}

/// Check one observation: the hop list cut to where it is meaningful, or why it is unusable.
fn checked(o: &PathObs) -> Result<&[Option<IpAddr>], String> {
    if let Some(e) = &o.error {
        return Err(e.clone());
    }
    if o.src == o.dst {
        return Err("source and destination are the same agent".into());
    }
    if !o.reached || o.hops.last() != Some(&Some(o.dst)) {
        return Err(format!(
            "the trace did not reach the agent within {} hops",
            o.hops.len()
        ));
    }
    let mut seen = BTreeSet::new();
    seen.insert(o.src);
    for (i, h) in o.hops.iter().enumerate() {
        if let Some(a) = h {
            if !seen.insert(*a) {
                return Err(format!("loop: {a} answers again at TTL {}", i + 1));
            }
        }
    }
    Ok(&o.hops)
}

impl Graph {
    /// Build the graph from traceroutes. Agents are every path's ends.
    pub fn build(obs: &[PathObs]) -> Graph {
        let agents: BTreeSet<IpAddr> = obs.iter().flat_map(|o| [o.src, o.dst]).collect();
        let cut: Vec<Result<&[Option<IpAddr>], String>> = obs.iter().map(checked).collect();
        // Alias rule: the known predecessors of each address are one router.
        let mut al = Aliases {
            parent: BTreeMap::new(),
        };
        let mut preds: BTreeMap<IpAddr, BTreeSet<IpAddr>> = BTreeMap::new();
        for (o, c) in obs.iter().zip(&cut) {
            let Ok(hops) = c else { continue };
            let mut prev = Some(o.src);
            for h in hops.iter() {
                if let (Some(p), Some(a)) = (prev, h) {
                    preds.entry(*a).or_default().insert(p);
                }
                prev = *h;
            }
        }
        for ps in preds.values() {
            let routers: Vec<IpAddr> = ps.iter().filter(|a| !agents.contains(a)).copied().collect();
            for w in routers.windows(2) {
                al.union(w[0], w[1]);
            }
        }
        let mut g = Graph {
            nodes: Vec::new(),
            edges: Vec::new(),
            paths: Vec::new(),
        };
        let mut by_addr: BTreeMap<IpAddr, usize> = BTreeMap::new();
        for a in &agents {
            by_addr.insert(*a, g.nodes.len());
            g.nodes.push(Node {
                id: g.nodes.len(),
                kind: NodeKind::Agent,
                addrs: vec![*a],
                label: a.to_string(),
            });
        }
        let mut edge_of: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (pi, (o, c)) in obs.iter().zip(&cut).enumerate() {
            let mut path = MapPath {
                id: pi,
                src: o.src,
                dst: o.dst,
                edges: Vec::new(),
                problem: None,
                bw_bps: None,
                bottleneck: None,
            };
            let hops = match c {
                Ok(h) => *h,
                Err(why) => {
                    path.problem = Some(why.clone());
                    g.paths.push(path);
                    continue;
                }
            };
            let mut prev = by_addr[&o.src];
            let mut prev_base: Option<i64> = Some(0);
            for (i, h) in hops.iter().enumerate() {
                let node = match h {
                    Some(a) if agents.contains(a) => by_addr[a],
                    Some(a) => {
                        let root = al.find(*a);
                        let id = match by_addr.get(&root) {
                            Some(&id) => id,
                            None => {
                                let id = g.nodes.len();
                                by_addr.insert(root, id);
                                g.nodes.push(Node {
                                    id,
                                    kind: NodeKind::Router,
                                    addrs: Vec::new(),
                                    label: root.to_string(),
                                });
                                id
                            }
                        };
                        if !g.nodes[id].addrs.contains(a) {
                            g.nodes[id].addrs.push(*a);
                        }
                        id
                    }
                    None => {
                        let id = g.nodes.len();
                        g.nodes.push(Node {
                            id,
                            kind: NodeKind::Silent,
                            addrs: Vec::new(),
                            label: format!("* ({}→{} TTL {})", o.src, o.dst, i + 1),
                        });
                        id
                    }
                };
                let base = o.base_ns.get(i).copied().flatten();
                let eid = *edge_of.entry((prev, node)).or_insert_with(|| {
                    let id = g.edges.len();
                    g.edges.push(Edge {
                        id,
                        from: prev,
                        to: node,
                        to_addr: *h,
                        bound: BoundKind::Above,
                        value_bps: 0.0,
                        measured_at_ms: None,
                        evidence: None,
                        latency_ns: None,
                        paths: Vec::new(),
                    });
                    id
                });
                // A router's delay is an RTT, the agent's one-way: only router-to-router
                // differences are a link latency (halved).
                let is_agent = h.is_some_and(|a| agents.contains(&a));
                if let (Some(b0), Some(b1), false) = (prev_base, base, is_agent) {
                    let l = ((b1 - b0) / 2).max(0);
                    let e = &mut g.edges[eid];
                    e.latency_ns = Some(e.latency_ns.map_or(l, |x| x.min(l)));
                }
                prev_base = base;
                if !path.edges.contains(&eid) {
                    g.edges[eid].paths.push(pi);
                    path.edges.push(eid);
                }
                prev = node;
            }
            g.paths.push(path);
        }
        g
    }

    /// Indices of the usable paths.
    pub fn usable_paths(&self) -> Vec<usize> {
        self.paths
            .iter()
            .filter(|p| p.usable())
            .map(|p| p.id)
            .collect()
    }

    /// The edge's ends as text, for people.
    pub fn edge_label(&self, e: usize) -> String {
        let e = &self.edges[e];
        format!("{}→{}", self.nodes[e.from].label, self.nodes[e.to].label)
    }

    /// Edges whose "=" value exceeds what flows into or out of them can carry (the seed's
    /// consistency check, §3.5.3), with `tol` slack: ids.
    pub fn inconsistent(&self, tol: f64) -> Vec<usize> {
        let mut out = Vec::new();
        for e in &self.edges {
            if e.bound != BoundKind::Exact {
                continue;
            }
            let cap = |x: &Edge| match x.bound {
                BoundKind::Exact => x.value_bps,
                BoundKind::Above => f64::INFINITY,
            };
            let feeds = self.nodes[e.from].kind == NodeKind::Agent;
            let influx: f64 = self.edges.iter().filter(|x| x.to == e.from).map(cap).sum();
            let outflux: f64 = self.edges.iter().filter(|x| x.from == e.to).map(cap).sum();
            let drains = self.nodes[e.to].kind == NodeKind::Agent;
            if (!feeds && e.value_bps > influx * (1.0 + tol))
                || (!drains && e.value_bps > outflux * (1.0 + tol))
            {
                out.push(e.id);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn obs(src: &str, dst: &str, hops: &[Option<&str>]) -> PathObs {
        PathObs {
            src: ip(src),
            dst: ip(dst),
            hops: hops.iter().map(|h| h.map(ip)).collect(),
            reached: true,
            error: None,
            base_ns: Vec::new(),
        }
    }

    /// Two sources into one router (answering from two interfaces), then a shared link to
    /// the next router: the two addresses are merged and the link is one edge.
    #[test]
    fn aliases_merge_on_a_common_successor_and_links_are_shared() {
        let g = Graph::build(&[
            obs(
                "10.0.1.1",
                "10.0.9.2",
                &[Some("10.0.1.2"), Some("10.0.3.2"), Some("10.0.9.2")],
            ),
            obs(
                "10.0.2.1",
                "10.0.9.2",
                &[Some("10.0.2.2"), Some("10.0.3.2"), Some("10.0.9.2")],
            ),
        ]);
        let routers: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Router)
            .collect();
        assert_eq!(routers.len(), 2, "{routers:?}");
        assert!(routers.iter().any(|n| n.addrs.len() == 2));
        // src1→R, src2→R, R→R', R'→dst: the shared R→R' carries both paths.
        assert_eq!(g.edges.len(), 4);
        assert_eq!(g.edges.iter().filter(|e| e.paths.len() == 2).count(), 2);
        assert!(g.paths.iter().all(MapPath::usable));
    }

    #[test]
    fn silent_hops_are_private_nodes_and_agents_never_merge() {
        let g = Graph::build(&[
            obs(
                "10.0.1.1",
                "10.0.9.2",
                &[Some("10.0.1.2"), None, Some("10.0.9.2")],
            ),
            obs(
                "10.0.2.1",
                "10.0.9.2",
                &[Some("10.0.2.2"), None, Some("10.0.9.2")],
            ),
        ]);
        let silent = g
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Silent)
            .count();
        assert_eq!(silent, 2, "one per path and TTL");
        assert_eq!(g.edges.len(), 6, "no edge is shared through a silent hop");
        assert_eq!(
            g.nodes.iter().filter(|n| n.kind == NodeKind::Agent).count(),
            3
        );
    }

    #[test]
    fn loops_unreached_and_failed_traces_are_unusable_with_a_reason() {
        let mut unreached = obs("10.0.1.1", "10.0.9.2", &[Some("10.0.1.2"), None, None]);
        unreached.reached = false;
        let mut failed = obs("10.0.1.1", "10.0.8.2", &[]);
        failed.error = Some("cannot connect to 10.0.8.2:7240: refused".into());
        let g = Graph::build(&[
            obs(
                "10.0.1.1",
                "10.0.9.2",
                &[
                    Some("10.0.1.2"),
                    Some("10.0.3.2"),
                    Some("10.0.1.2"),
                    Some("10.0.9.2"),
                ],
            ),
            unreached,
            failed,
            obs("10.0.1.1", "10.0.1.1", &[Some("10.0.1.1")]),
        ]);
        let why: Vec<String> = g.paths.iter().map(|p| p.problem.clone().unwrap()).collect();
        assert!(why[0].contains("loop"), "{why:?}");
        assert!(why[1].contains("did not reach"), "{why:?}");
        assert!(why[2].contains("refused"), "{why:?}");
        assert!(why[3].contains("same agent"), "{why:?}");
        assert!(g.edges.is_empty());
        assert!(g.usable_paths().is_empty());
    }

    #[test]
    fn link_latency_is_half_the_rtt_difference() {
        let mut o = obs(
            "10.0.1.1",
            "10.0.9.2",
            &[Some("10.0.1.2"), Some("10.0.3.2"), Some("10.0.9.2")],
        );
        o.base_ns = vec![Some(100_000), Some(8_100_000), Some(4_500_000)];
        let g = Graph::build(&[o]);
        assert_eq!(g.edges[0].latency_ns, Some(50_000));
        assert_eq!(g.edges[1].latency_ns, Some(4_000_000));
        assert_eq!(g.edges[2].latency_ns, None, "the agent's delay is one-way");
    }
}
