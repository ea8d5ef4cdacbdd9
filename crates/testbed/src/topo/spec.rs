//! A topology file and what it means, checked before anything is built (no I/O here).
//!
//! ```toml
//! [[node]]
//! name = "a"
//! kind = "host"          # or "router"
//!
//! [[link]]
//! a = "r1"
//! b = "r2"
//! capacity = "20mbit"    # optional: without it the link is not shaped
//! buffer = "100p"        # 100p | 50ms | 64kb
//! shaper = "htb"         # htb | tbf
//! dir = "both"           # both | a->b | b->a: which ends' egress is shaped
//! delay = "10ms"         # on the egress of the link's router end (a's when both are routers)
//!
//! [[flow]]
//! from = "x1"
//! to = "y1"
//! pattern = "cbr:5mbit"
//!
//! [measure]              # the foreground pair; every other byte on a link is cross traffic
//! from = "a"
//! to = "b"
//!
//! [icmp]
//! ratelimit = "off"      # off | kernel
//! ```
//!
//! Routes are computed on a tree, so cycles are refused. Each link gets its own /24 from
//! 198.18.0.0/15 in file order (link i: 198.18.0.0 + i·256, `a` = .1, `b` = .2).

use crate::loss::LossModel;
use crate::pattern::CrossPattern;
use crate::topology::{Buffer, Shaper, TestbedConfig};
use crate::units::{parse_duration, parse_rate};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Node names become namespace and interface names: `mgrp-NAME-NODE` stays ≤ 40 characters
/// with instance names of up to 24.
pub const MAX_NODE_NAME: usize = 10;
/// More links than this is not a namespace testbed on one machine (and the /24s run out at 512).
pub const MAX_LINKS: usize = 200;
/// Link i's subnet is this + i·256.
const BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// Names a node cannot take: interfaces are named after the node at the other end.
const RESERVED: &[&str] = &["lo", "all", "default"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    node: Vec<NodeEntry>,
    #[serde(default)]
    link: Vec<LinkEntry>,
    #[serde(default)]
    flow: Vec<FlowEntry>,
    measure: Option<MeasureEntry>,
    icmp: Option<IcmpEntry>,
    /// Free text for people.
    #[allow(dead_code)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    kind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    a: String,
    b: String,
    capacity: Option<String>,
    buffer: Option<String>,
    shaper: Option<String>,
    burst: Option<String>,
    dir: Option<String>,
    delay: Option<String>,
    loss: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowEntry {
    from: String,
    to: String,
    pattern: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MeasureEntry {
    from: String,
    to: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IcmpEntry {
    ratelimit: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Host,
    Router,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

/// How a link is shaped (the same in each shaped direction).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shaping {
    pub capacity_bps: u64,
    pub buffer: Buffer,
    pub shaper: Shaper,
    /// Burst in bytes (the testbed's rule unless the file sets one).
    pub burst_bytes: u64,
    /// Shaped on a's egress (a → b) and/or b's egress (b → a).
    pub a_to_b: bool,
    pub b_to_a: bool,
}

impl Shaping {
    /// The single-bottleneck config with the same shaper, whose validation and scripts apply.
    pub fn as_config(&self) -> TestbedConfig {
        TestbedConfig {
            capacity_bps: self.capacity_bps,
            buffer: self.buffer,
            shaper: self.shaper,
            burst_bytes: Some(self.burst_bytes),
            measure_capacity: false,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Node indices of the two ends.
    pub a: usize,
    pub b: usize,
    pub shaping: Option<Shaping>,
    /// One-way delay on the egress of the router end (a's when both ends are routers).
    #[serde(with = "opt_secs")]
    pub delay: Option<Duration>,
    /// Packet loss on the same egress, before the delay (the same TUN line applies both).
    pub loss: Option<LossModel>,
}

mod opt_secs {
    pub fn serialize<S: serde::Serializer>(
        d: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flow {
    pub from: usize,
    pub to: usize,
    pub pattern: CrossPattern,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IcmpRateLimit {
    /// Routers answer every TTL expiry (icmp_ratelimit = 0, global limits raised).
    #[default]
    Off,
    /// The kernel's defaults (a per-destination token bucket, 1 s, burst 6).
    Kernel,
}

/// One shaped direction of a link: the egress of `from` toward `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinkDir {
    pub link: usize,
    pub from: usize,
    pub to: usize,
}

/// A route in one node: `dst` (a link subnet) via the neighbour `via` on device `dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: String,
    pub via: Ipv4Addr,
    pub dev: String,
}

/// A checked topology.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    pub flows: Vec<Flow>,
    /// The foreground pair (node indices), if named.
    pub measure: Option<(usize, usize)>,
    pub icmp: IcmpRateLimit,
}

fn bad(m: String) -> Error {
    Error::BadInput(m)
}

impl Topology {
    /// Parse and check a topology file's text.
    pub fn parse(text: &str) -> Result<Topology, Error> {
        let f: File = toml::from_str(text)
            .map_err(|e| bad(format!("topology file: {}", e.to_string().trim_end())))?;
        Topology::from_file(f)
    }

    fn from_file(f: File) -> Result<Topology, Error> {
        if f.node.is_empty() {
            return Err(bad("topology has no [[node]] entries".into()));
        }
        if f.link.len() > MAX_LINKS {
            return Err(bad(format!(
                "topology has {} links; at most {MAX_LINKS} are supported",
                f.link.len()
            )));
        }
        let mut nodes: Vec<Node> = Vec::new();
        for n in &f.node {
            let what = format!("node {:?}", n.name);
            check_node_name(&n.name).map_err(|m| bad(format!("{what}: {m}")))?;
            if nodes.iter().any(|x| x.name == n.name) {
                return Err(bad(format!("{what} is defined twice")));
            }
            let kind = match n.kind.as_str() {
                "host" => NodeKind::Host,
                "router" => NodeKind::Router,
                k => {
                    return Err(bad(format!(
                        "{what}: unknown kind {k:?} (use \"host\" or \"router\")"
                    )))
                }
            };
            nodes.push(Node {
                name: n.name.clone(),
                kind,
            });
        }
        let find = |what: &str, name: &str| -> Result<usize, Error> {
            if name.is_empty() {
                return Err(bad(format!("{what}: endpoint is missing (empty name)")));
            }
            nodes
                .iter()
                .position(|n| n.name == name)
                .ok_or_else(|| bad(format!("{what}: unknown node {name:?}")))
        };

        let mut links = Vec::new();
        // Union-find over nodes: a link joining two nodes already connected closes a loop.
        let mut parent: Vec<usize> = (0..nodes.len()).collect();
        fn root(p: &mut [usize], mut i: usize) -> usize {
            while p[i] != i {
                p[i] = p[p[i]];
                i = p[i];
            }
            i
        }
        for (i, l) in f.link.iter().enumerate() {
            let what = format!("link #{} ({} — {})", i + 1, l.a, l.b);
            let (a, b) = (find(&what, &l.a)?, find(&what, &l.b)?);
            if a == b {
                return Err(bad(format!("{what} connects {:?} to itself", l.a)));
            }
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            if ra == rb {
                let path = tree_path(&nodes, &links, a, b)
                    .map(|p| p.join(" — "))
                    .unwrap_or_default();
                return Err(bad(format!(
                    "{what} closes a loop: {} and {} are already connected ({path}); routes are \
                     computed on a tree, so a topology must not have cycles",
                    l.a, l.b
                )));
            }
            parent[ra] = rb;
            links.push(parse_link(&what, l, a, b, &nodes)?);
        }
        for (i, n) in nodes.iter().enumerate() {
            let degree = links.iter().filter(|l| l.a == i || l.b == i).count();
            if degree == 0 {
                return Err(bad(format!(
                    "node {:?} has no link (every node needs at least one [[link]])",
                    n.name
                )));
            }
            if n.kind == NodeKind::Host && degree > 1 {
                return Err(bad(format!(
                    "node {:?} is a host with {degree} links; a host has exactly one (make it a router)",
                    n.name
                )));
            }
        }
        // A tree has n − 1 links; fewer means islands that cannot reach each other.
        if links.len() + 1 != nodes.len() {
            let r0 = root(&mut parent, 0);
            let other = (0..nodes.len())
                .find(|&i| root(&mut parent, i) != r0)
                .unwrap_or(0);
            return Err(bad(format!(
                "topology is not connected: node {:?} cannot reach node {:?}",
                nodes[0].name, nodes[other].name
            )));
        }

        let host = |what: &str, name: &str| -> Result<usize, Error> {
            let i = find(what, name)?;
            if nodes[i].kind != NodeKind::Host {
                return Err(bad(format!(
                    "{what}: {name:?} is a router; traffic runs between hosts"
                )));
            }
            Ok(i)
        };
        let pair = |what: &str, from: &str, to: &str| -> Result<(usize, usize), Error> {
            let (a, b) = (host(what, from)?, host(what, to)?);
            if a == b {
                return Err(bad(format!("{what}: from and to are the same host")));
            }
            Ok((a, b))
        };
        let mut flows = Vec::new();
        for (i, fl) in f.flow.iter().enumerate() {
            let what = format!("flow #{} ({} → {})", i + 1, fl.from, fl.to);
            let (from, to) = pair(&what, &fl.from, &fl.to)?;
            let pattern =
                CrossPattern::parse(&fl.pattern).map_err(|e| bad(format!("{what}: {e}")))?;
            flows.push(Flow { from, to, pattern });
        }
        let measure = match &f.measure {
            Some(m) => Some(pair(
                &format!("[measure] ({} → {})", m.from, m.to),
                &m.from,
                &m.to,
            )?),
            None => None,
        };
        let icmp = match f.icmp.as_ref().map(|i| i.ratelimit.as_str()) {
            None | Some("off") => IcmpRateLimit::Off,
            Some("kernel") => IcmpRateLimit::Kernel,
            Some(o) => {
                return Err(bad(format!(
                    "[icmp] ratelimit {o:?}: use \"off\" or \"kernel\""
                )))
            }
        };
        Ok(Topology {
            nodes,
            links,
            flows,
            measure,
            icmp,
        })
    }

    /// The subnet of link `i` (a /24).
    pub fn subnet(&self, link: usize) -> String {
        format!("{}/24", Ipv4Addr::from(BASE + link as u32 * 256))
    }

    /// The address of `node` on `link` (.1 for end a, .2 for end b).
    pub fn addr(&self, link: usize, node: usize) -> Ipv4Addr {
        let l = &self.links[link];
        let host = if node == l.a { 1 } else { 2 };
        debug_assert!(node == l.a || node == l.b);
        Ipv4Addr::from(BASE + link as u32 * 256 + host)
    }

    /// The node at the other end of `link` from `node`.
    pub fn peer(&self, link: usize, node: usize) -> usize {
        let l = &self.links[link];
        if l.a == node {
            l.b
        } else {
            l.a
        }
    }

    /// Links touching `node`, in file order.
    pub fn links_of(&self, node: usize) -> Vec<usize> {
        (0..self.links.len())
            .filter(|&i| self.links[i].a == node || self.links[i].b == node)
            .collect()
    }

    /// A host's address (on its only link).
    pub fn host_addr(&self, node: usize) -> Ipv4Addr {
        self.addr(self.links_of(node)[0], node)
    }

    /// Name of `node`'s interface on `link`: the name of the node it reaches.
    pub fn dev(&self, link: usize, node: usize) -> &str {
        &self.nodes[self.peer(link, node)].name
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Routes of `node` to every link subnet it is not on: breadth-first over the tree from
    /// `node`, each subnet goes via the neighbour on the first hop toward it.
    pub fn routes(&self, node: usize) -> Vec<Route> {
        // first[n] = the link out of `node` that leads to n.
        let mut first: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut seen = vec![false; self.nodes.len()];
        seen[node] = true;
        let mut queue = VecDeque::from([node]);
        while let Some(n) = queue.pop_front() {
            for l in self.links_of(n) {
                let m = self.peer(l, n);
                if !seen[m] {
                    seen[m] = true;
                    first[m] = if n == node { Some(l) } else { first[n] };
                    queue.push_back(m);
                }
            }
        }
        let mut out = Vec::new();
        for (i, l) in self.links.iter().enumerate() {
            if l.a == node || l.b == node {
                continue;
            }
            // In a tree both ends of a remote link lie behind the same first hop.
            let Some(hop) = first[l.a] else { continue };
            out.push(Route {
                dst: self.subnet(i),
                via: self.addr(hop, self.peer(hop, node)),
                dev: self.dev(hop, node).to_string(),
            });
        }
        out
    }

    /// Every shaped direction, in file order (a → b before b → a).
    pub fn shaped_dirs(&self) -> Vec<LinkDir> {
        let mut out = Vec::new();
        for (i, l) in self.links.iter().enumerate() {
            if let Some(s) = &l.shaping {
                if s.a_to_b {
                    out.push(LinkDir {
                        link: i,
                        from: l.a,
                        to: l.b,
                    });
                }
                if s.b_to_a {
                    out.push(LinkDir {
                        link: i,
                        from: l.b,
                        to: l.a,
                    });
                }
            }
        }
        out
    }

    /// `r1→r2` for people.
    pub fn dir_label(&self, d: LinkDir) -> String {
        format!("{}→{}", self.nodes[d.from].name, self.nodes[d.to].name)
    }

    /// The router end that delays link `link` (a's when both ends are routers).
    pub fn delay_end(&self, link: usize) -> usize {
        let l = &self.links[link];
        if self.nodes[l.a].kind == NodeKind::Router {
            l.a
        } else {
            l.b
        }
    }

    /// The path between two nodes as node indices, if connected.
    pub fn path(&self, from: usize, to: usize) -> Option<Vec<usize>> {
        path_between(self.nodes.len(), &self.links, from, to)
    }
}

fn check_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NODE_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !ok {
        return Err(format!(
            "names are 1-{MAX_NODE_NAME} characters of a-z and 0-9 (they become namespace and \
             interface names)"
        ));
    }
    if RESERVED.contains(&name) {
        return Err(format!("{name:?} is reserved (an interface name)"));
    }
    Ok(())
}

fn parse_link(
    what: &str,
    l: &LinkEntry,
    a: usize,
    b: usize,
    nodes: &[Node],
) -> Result<Link, Error> {
    let err = |m: String| bad(format!("{what}: {m}"));
    let loss = match &l.loss {
        Some(m) => {
            let m = LossModel::parse(m).map_err(|e| err(e.to_string()))?;
            if nodes[a].kind == NodeKind::Host && nodes[b].kind == NodeKind::Host {
                return Err(err(
                    "loss needs a router end (the loss line runs in a router); both ends are hosts"
                        .into(),
                ));
            }
            Some(m)
        }
        None => None,
    };
    let delay = match &l.delay {
        Some(d) => {
            let d = parse_duration(d).map_err(|e| err(e.to_string()))?;
            if d > Duration::from_secs(10) {
                return Err(err("delay above 10 s is not supported".into()));
            }
            if nodes[a].kind == NodeKind::Host && nodes[b].kind == NodeKind::Host {
                return Err(err(
                    "delay needs a router end (the delay line runs in a router); both ends are hosts"
                        .into(),
                ));
            }
            (!d.is_zero()).then_some(d)
        }
        None => None,
    };
    let Some(cap) = &l.capacity else {
        for (k, v) in [
            ("buffer", &l.buffer),
            ("shaper", &l.shaper),
            ("burst", &l.burst),
            ("dir", &l.dir),
        ] {
            if v.is_some() {
                return Err(err(format!(
                    "{k} is set but capacity is not; an unshaped link has no {k}"
                )));
            }
        }
        return Ok(Link {
            a,
            b,
            shaping: None,
            delay,
            loss,
        });
    };
    let capacity_bps = parse_rate(cap).map_err(|e| err(e.to_string()))?;
    let buffer =
        Buffer::parse(l.buffer.as_deref().unwrap_or("100p")).map_err(|e| err(e.to_string()))?;
    let shaper = match l.shaper.as_deref().unwrap_or("htb") {
        "htb" => Shaper::Htb,
        "tbf" => Shaper::Tbf,
        s => {
            return Err(err(format!(
                "unknown shaper {s:?} (use \"htb\" or \"tbf\")"
            )))
        }
    };
    let burst = match &l.burst {
        Some(b) => Some(crate::units::parse_bytes(b).map_err(|e| err(e.to_string()))?),
        None => None,
    };
    let (a_to_b, b_to_a) = match l.dir.as_deref().unwrap_or("both") {
        "both" => (true, true),
        "a->b" => (true, false),
        "b->a" => (false, true),
        d => {
            return Err(err(format!(
                "dir {d:?}: use \"both\", \"a->b\" or \"b->a\""
            )))
        }
    };
    let mut cfg = TestbedConfig {
        capacity_bps,
        buffer,
        shaper,
        burst_bytes: burst,
        ..Default::default()
    };
    cfg.validate().map_err(|e| err(e.to_string()))?;
    cfg.burst_bytes = Some(cfg.burst());
    Ok(Link {
        a,
        b,
        shaping: Some(Shaping {
            capacity_bps,
            buffer,
            shaper,
            burst_bytes: cfg.burst(),
            a_to_b,
            b_to_a,
        }),
        delay,
        loss,
    })
}

fn path_between(n: usize, links: &[Link], from: usize, to: usize) -> Option<Vec<usize>> {
    let mut prev: Vec<Option<usize>> = vec![None; n];
    let mut seen = vec![false; n];
    seen[from] = true;
    let mut queue = VecDeque::from([from]);
    while let Some(x) = queue.pop_front() {
        if x == to {
            let mut path = vec![to];
            let mut c = to;
            while let Some(p) = prev[c] {
                path.push(p);
                c = p;
            }
            path.reverse();
            return Some(path);
        }
        for l in links {
            let y = match (l.a == x, l.b == x) {
                (true, _) => l.b,
                (_, true) => l.a,
                _ => continue,
            };
            if !seen[y] {
                seen[y] = true;
                prev[y] = Some(x);
                queue.push_back(y);
            }
        }
    }
    None
}

fn tree_path(nodes: &[Node], links: &[Link], a: usize, b: usize) -> Option<Vec<String>> {
    path_between(nodes.len(), links, a, b)
        .map(|p| p.into_iter().map(|i| nodes[i].name.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN3: &str = include_str!("../../topologies/chain3.toml");

    fn err(text: &str) -> String {
        Topology::parse(text).unwrap_err().to_string()
    }

    fn nodes(spec: &[(&str, &str)]) -> String {
        spec.iter()
            .map(|(n, k)| format!("[[node]]\nname = \"{n}\"\nkind = \"{k}\"\n"))
            .collect()
    }

    fn link(a: &str, b: &str, extra: &str) -> String {
        format!("[[link]]\na = \"{a}\"\nb = \"{b}\"\n{extra}\n")
    }

    /// a — r — b, with `extra` on the first link.
    fn small(extra: &str) -> String {
        nodes(&[("a", "host"), ("r", "router"), ("b", "host")])
            + &link("a", "r", extra)
            + &link("r", "b", "")
    }

    #[test]
    fn chain3_routes() {
        let t = Topology::parse(CHAIN3).unwrap();
        let r1 = t.index("r1").unwrap();
        let a = t.index("a").unwrap();
        let routes = t.routes(r1);
        // r1 sits on a's link, r1—r2 and x1s's link; everything else is behind r2.
        assert!(routes.iter().all(|r| r.dev == "r2"), "{routes:?}");
        let r1r2 = t
            .links_of(r1)
            .into_iter()
            .find(|&l| t.peer(l, r1) == t.index("r2").unwrap())
            .unwrap();
        let r2_addr = t.addr(r1r2, t.index("r2").unwrap());
        assert!(routes.iter().all(|r| r.via == r2_addr));
        assert_eq!(routes.len(), t.links.len() - t.links_of(r1).len());
        // The host a routes every other subnet via r1, on its only interface.
        let ra = t.routes(a);
        assert_eq!(ra.len(), t.links.len() - 1);
        assert!(ra.iter().all(|r| r.dev == "r1" && r.via == t.addr(0, r1)));
        // r2 splits: a's subnet via r1, b's via r3.
        let r2 = t.index("r2").unwrap();
        let b = t.index("b").unwrap();
        let b_link = t.links_of(b)[0];
        let rr2 = t.routes(r2);
        let to = |l: usize| {
            rr2.iter()
                .find(|r| r.dst == t.subnet(l))
                .unwrap()
                .dev
                .clone()
        };
        assert_eq!(to(0), "r1");
        assert_eq!(to(b_link), "r3");
    }

    #[test]
    fn exact_route_table_of_a_chain() {
        let t = Topology::parse(
            &(nodes(&[
                ("a", "host"),
                ("r1", "router"),
                ("r2", "router"),
                ("b", "host"),
            ]) + &link("a", "r1", "")
                + &link("r1", "r2", "capacity = \"20mbit\"")
                + &link("r2", "b", "")),
        )
        .unwrap();
        let show = |n: &str| -> Vec<String> {
            t.routes(t.index(n).unwrap())
                .iter()
                .map(|r| format!("{} via {} dev {}", r.dst, r.via, r.dev))
                .collect()
        };
        assert_eq!(
            show("a"),
            [
                "198.18.1.0/24 via 198.18.0.2 dev r1",
                "198.18.2.0/24 via 198.18.0.2 dev r1"
            ]
        );
        assert_eq!(show("r1"), ["198.18.2.0/24 via 198.18.1.2 dev r2"]);
        assert_eq!(show("r2"), ["198.18.0.0/24 via 198.18.1.1 dev r1"]);
        assert_eq!(
            show("b"),
            [
                "198.18.0.0/24 via 198.18.2.1 dev r2",
                "198.18.1.0/24 via 198.18.2.1 dev r2"
            ]
        );
        assert_eq!(
            t.host_addr(t.index("b").unwrap()),
            Ipv4Addr::new(198, 18, 2, 2)
        );
        let dirs: Vec<String> = t
            .shaped_dirs()
            .into_iter()
            .map(|d| t.dir_label(d))
            .collect();
        assert_eq!(dirs, ["r1→r2", "r2→r1"]);
    }

    #[test]
    fn shaping_defaults_and_one_way() {
        let t = Topology::parse(&small("capacity = \"20mbit\"\ndir = \"a->b\"")).unwrap();
        let s = t.links[0].shaping.as_ref().unwrap();
        assert_eq!(s.capacity_bps, 20_000_000);
        assert_eq!(s.buffer, Buffer::Packets(100));
        assert_eq!(s.shaper, Shaper::Htb);
        assert_eq!(s.burst_bytes, 150);
        assert!(s.a_to_b && !s.b_to_a);
        assert!(t.links[1].shaping.is_none());
        assert_eq!(t.icmp, IcmpRateLimit::Off);
    }

    #[test]
    fn refuses_with_the_entry_named() {
        let cases: Vec<(String, &str)> = vec![
            (
                small("").replace("b = \"r\"", "b = \"zz\""),
                "link #1 (a — zz): unknown node \"zz\"",
            ),
            (
                small("").replace("a = \"a\"", "a = \"\""),
                "endpoint is missing",
            ),
            (
                small("capacity = \"-5mbit\""),
                "link #1 (a — r): bad rate \"-5mbit\"",
            ),
            (small("capacity = \"0mbit\""), "link #1"),
            (small("capacity = \"100bit\""), "out of range"),
            (small("capacity = \"99gbit\""), "out of range"),
            (small("capacity = \"5mbps\""), "ambiguous"),
            (
                small("buffer = \"10p\""),
                "buffer is set but capacity is not",
            ),
            (
                small("capacity = \"1mbit\"\nbuffer = \"lots\""),
                "bad buffer",
            ),
            (
                small("capacity = \"1mbit\"\nshaper = \"cake\""),
                "unknown shaper \"cake\"",
            ),
            (small("capacity = \"1mbit\"\ndir = \"up\""), "dir \"up\""),
            (small("loss = \"150%\""), "link #1 (a — r): "),
            (small("loss = \"ge:p=2\""), "link #1 (a — r): "),
            (
                nodes(&[("a", "host"), ("b", "host")]) + &link("a", "b", "loss = \"1%\""),
                "loss needs a router end",
            ),
            (small("delay = \"20s\""), "above 10 s"),
            (
                nodes(&[("a", "host"), ("b", "host")]) + &link("a", "b", "delay = \"5ms\""),
                "both ends are hosts",
            ),
            (
                small("") + &nodes(&[("x", "host")]),
                "node \"x\" has no link",
            ),
            (
                small("") + &nodes(&[("a", "router")]),
                "node \"a\" is defined twice",
            ),
            (
                small("") + &nodes(&[("c", "host")]) + &link("a", "c", ""),
                "node \"a\" is a host with 2 links",
            ),
            (
                nodes(&[("r1", "router"), ("r2", "router"), ("r3", "router")])
                    + &link("r1", "r2", "")
                    + &link("r2", "r3", "")
                    + &link("r3", "r1", ""),
                "link #3 (r3 — r1) closes a loop: r3 and r1 are already connected (r3 — r2 — r1)",
            ),
            (
                nodes(&[("r1", "router"), ("r2", "router")])
                    + &link("r1", "r2", "")
                    + &link("r2", "r1", ""),
                "closes a loop",
            ),
            (small("") + &link("r", "r", ""), "connects \"r\" to itself"),
            (
                nodes(&[("a", "host"), ("b", "host"), ("c", "host"), ("d", "host")])
                    + &link("a", "b", "")
                    + &link("c", "d", ""),
                "not connected",
            ),
            (nodes(&[("Bad", "host")]), "node \"Bad\": names are"),
            (nodes(&[("waytoolongname", "host")]), "names are 1-10"),
            (nodes(&[("lo", "host")]), "reserved"),
            (nodes(&[("a", "switch")]), "unknown kind \"switch\""),
            (String::new(), "no [[node]]"),
            (
                small("") + "[[flow]]\nfrom = \"a\"\nto = \"r\"\npattern = \"cbr:1mbit\"\n",
                "flow #1 (a → r): \"r\" is a router",
            ),
            (
                small("") + "[[flow]]\nfrom = \"a\"\nto = \"q\"\npattern = \"cbr:1mbit\"\n",
                "flow #1 (a → q): unknown node \"q\"",
            ),
            (
                small("") + "[[flow]]\nfrom = \"a\"\nto = \"b\"\npattern = \"warp:9\"\n",
                "flow #1 (a → b): bad cross pattern",
            ),
            (
                small("") + "[measure]\nfrom = \"a\"\nto = \"a\"\n",
                "same host",
            ),
            (
                small("") + "[icmp]\nratelimit = \"some\"\n",
                "[icmp] ratelimit \"some\"",
            ),
            (small("colour = \"red\""), "unknown field `colour`"),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(
                e.contains(want),
                "wanted {want:?} in: {e}\n--- file:\n{text}"
            );
        }
    }

    #[test]
    fn delay_goes_on_the_router_end() {
        let t = Topology::parse(&small("delay = \"10ms\"")).unwrap();
        assert_eq!(t.links[0].delay, Some(Duration::from_millis(10)));
        assert_eq!(t.nodes[t.delay_end(0)].name, "r");
    }

    #[test]
    fn loss_goes_on_the_router_end_with_the_delay() {
        let t = Topology::parse(&small("loss = \"1%\"\ndelay = \"5ms\"")).unwrap();
        assert_eq!(t.links[0].loss, Some(LossModel::Random { p: 0.01 }));
        assert_eq!(t.nodes[t.delay_end(0)].name, "r");
        let ge = Topology::parse(&small("loss = \"ge:p=1%,r=25%\"")).unwrap();
        assert!(matches!(
            ge.links[0].loss,
            Some(LossModel::GilbertElliott { .. })
        ));
    }
}
