//! The planner against a fluid network: TCP flows share each link max-min fairly (water
//! filling), so a step's throughputs and each flow's bottleneck are known exactly.

use super::*;
use crate::graph::{MapPath, PathObs};
use std::net::IpAddr;

fn ip(i: usize) -> IpAddr {
    IpAddr::from([10, (i / 250) as u8, (i % 250) as u8, 1])
}

/// Paths over named nodes (one address each: no aliasing here).
fn graph(paths: &[Vec<usize>]) -> Graph {
    let obs: Vec<PathObs> = paths
        .iter()
        .map(|p| PathObs {
            src: ip(p[0]),
            dst: ip(*p.last().unwrap()),
            hops: p[1..].iter().map(|&n| Some(ip(n))).collect(),
            reached: true,
            error: None,
            base_ns: Vec::new(),
        })
        .collect();
    Graph::build(&obs)
}

/// True capacity of each edge by its (from, to) node addresses.
fn caps_of(g: &Graph, truth: &BTreeMap<(usize, usize), f64>) -> Vec<f64> {
    g.edges
        .iter()
        .map(|e| {
            let a = g.nodes[e.from].addrs[0];
            let b = g.nodes[e.to].addrs[0];
            truth
                .iter()
                .find(|((x, y), _)| ip(*x) == a && ip(*y) == b)
                .map_or(f64::INFINITY, |(_, c)| *c)
        })
        .collect()
}

/// Max-min fair rates of `paths` run together, and each one's bottleneck edge. A path with
/// no finite link gets 1000 (the host's own limit) and no bottleneck.
fn water_fill(g: &Graph, caps: &[f64], paths: &[usize]) -> (Vec<f64>, Vec<Option<usize>>) {
    let mut rate = vec![0.0; paths.len()];
    let mut bn = vec![None; paths.len()];
    let mut frozen = vec![false; paths.len()];
    let mut used = vec![0.0; caps.len()];
    for _ in 0..paths.len() {
        let mut best: Option<(usize, f64)> = None;
        for (e, &c) in caps.iter().enumerate() {
            let n = (0..paths.len())
                .filter(|&i| !frozen[i] && g.paths[paths[i]].edges.contains(&e))
                .count();
            if n == 0 || c.is_infinite() {
                continue;
            }
            let share = (c - used[e]) / n as f64;
            if best.is_none_or(|(_, s)| share < s) {
                best = Some((e, share));
            }
        }
        let Some((e, share)) = best else { break };
        for i in 0..paths.len() {
            if !frozen[i] && g.paths[paths[i]].edges.contains(&e) {
                frozen[i] = true;
                rate[i] = share;
                bn[i] = Some(e);
                for &x in &g.paths[paths[i]].edges {
                    used[x] += share;
                }
            }
        }
    }
    for i in 0..paths.len() {
        if !frozen[i] {
            rate[i] = 1000.0;
        }
    }
    (rate, bn)
}

fn run_planner(g: Graph, caps: &[f64]) -> Planner {
    let mut pl = Planner::new(g, PlannerConfig::default()).unwrap();
    let mut guard = 0;
    while let Some(step) = pl.poll_step() {
        guard += 1;
        assert!(guard < 1000, "the planner does not end");
        let (rates, bns) = water_fill(pl.graph(), caps, &step.paths);
        let li = step.paths.iter().position(|&p| p == step.locate).unwrap();
        let r = StepResult {
            flows: step
                .paths
                .iter()
                .zip(&rates)
                .map(|(&path, &t)| FlowResult {
                    path,
                    throughput_bps: Some(t),
                })
                .collect(),
            bottleneck: bns[li],
            note: "fluid".into(),
        };
        pl.handle_step(&step, r, 1);
    }
    pl
}

/// Every "=" is the truth, no ">" above it.
fn check_bounds(g: &Graph, caps: &[f64]) {
    for e in &g.edges {
        match e.bound {
            BoundKind::Exact => assert!(
                (e.value_bps - caps[e.id]).abs() < 1e-6,
                "edge {} = {} but is {}",
                g.edge_label(e.id),
                e.value_bps,
                caps[e.id]
            ),
            BoundKind::Above => assert!(
                e.value_bps <= caps[e.id] + 1e-6,
                "edge {} > {} above its {}",
                g.edge_label(e.id),
                e.value_bps,
                caps[e.id]
            ),
        }
    }
}

/// Seed Fig. 3.1/3.3: S → R1 (e1 = 10) → {R2, R3}; R2 → D1, D2 (e5 = 5); R3 → D3 (e6 = 5), D4.
/// With bottleneck location: 4 steps of one flow each (the naive scheme: 7 steps, 12 flows).
#[test]
fn seed_tree_example_needs_four_single_flows() {
    let (s, r1, r2, r3, d1, d2, d3, d4) = (0, 1, 2, 3, 4, 5, 6, 7);
    let g = graph(&[
        vec![s, r1, r2, d1],
        vec![s, r1, r2, d2],
        vec![s, r1, r3, d3],
        vec![s, r1, r3, d4],
    ]);
    let truth: BTreeMap<(usize, usize), f64> = [
        ((s, r1), 10.0),
        ((r1, r2), 100.0),
        ((r1, r3), 100.0),
        ((r2, d1), 100.0),
        ((r2, d2), 5.0),
        ((r3, d3), 5.0),
        ((r3, d4), 100.0),
    ]
    .into();
    let caps = caps_of(&g, &truth);
    let pl = run_planner(g, &caps);
    let st = pl.stats();
    assert_eq!((st.steps, st.flows, st.max_parallel), (4, 4, 1), "{st:?}");
    assert_eq!(
        (st.naive_steps, st.naive_flows, st.naive_max_parallel),
        (7, 12, 4)
    );
    let g = pl.graph();
    check_bounds(g, &caps);
    let exact: Vec<String> = g
        .edges
        .iter()
        .filter(|e| e.bound == BoundKind::Exact)
        .map(|e| format!("{}={}", g.edge_label(e.id), e.value_bps))
        .collect();
    assert_eq!(exact.len(), 3, "{exact:?}");
}

/// Two sources whose access links (10 each) feed a shared 15: alone each path sees its
/// access link; only running both together saturates the shared link.
#[test]
fn a_shared_link_is_found_only_by_running_paths_together() {
    let (s1, s2, r, d) = (0, 1, 2, 3);
    let g = graph(&[vec![s1, r, d], vec![s2, r, d]]);
    let truth: BTreeMap<(usize, usize), f64> =
        [((s1, r), 10.0), ((s2, r), 10.0), ((r, d), 15.0)].into();
    let caps = caps_of(&g, &truth);
    let pl = run_planner(g, &caps);
    let g = pl.graph();
    check_bounds(g, &caps);
    let shared = g.edges.iter().find(|e| e.paths.len() == 2).unwrap();
    assert_eq!((shared.bound, shared.value_bps), (BoundKind::Exact, 15.0));
    assert_eq!(pl.stats().flows, 4, "2 alone + 2 together");
}

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// A random tree of routers with source and destination hosts on it; paths sources ×
/// destinations along the tree; random capacities per direction.
fn random_case(seed: &mut u64) -> (Graph, Vec<f64>) {
    let routers = 2 + (rng(seed) % 4) as usize;
    let mut parent = vec![0usize; routers];
    for (i, p) in parent.iter_mut().enumerate().skip(1) {
        *p = (rng(seed) % i as u64) as usize;
    }
    let ns = 1 + (rng(seed) % 3) as usize;
    let nd = 1 + (rng(seed) % 3) as usize;
    let host_at: Vec<usize> = (0..ns + nd)
        .map(|_| (rng(seed) % routers as u64) as usize)
        .collect();
    let host = |h: usize| 100 + h;
    let up = |mut r: usize| {
        let mut v = vec![r];
        while r != 0 {
            r = parent[r];
            v.push(r);
        }
        v
    };
    let mut paths = Vec::new();
    for s in 0..ns {
        for d in ns..ns + nd {
            let (a, b) = (up(host_at[s]), up(host_at[d]));
            let meet = *a.iter().find(|x| b.contains(x)).unwrap();
            let mut p = vec![host(s)];
            p.extend(a.iter().take_while(|&&x| x != meet));
            p.push(meet);
            let down: Vec<usize> = b.iter().take_while(|&&x| x != meet).copied().collect();
            p.extend(down.iter().rev());
            p.push(host(d));
            paths.push(p);
        }
    }
    let g = graph(&paths);
    let choices = [5.0, 8.0, 12.0, 20.0, 30.0, f64::INFINITY, f64::INFINITY];
    let caps = g
        .edges
        .iter()
        .map(|_| choices[(rng(seed) % choices.len() as u64) as usize])
        .collect();
    (g, caps)
}

/// On random trees: every "=" is the truth, no ">" above the truth, and never more flows than
/// the naive scheme.
#[test]
fn random_trees_bounds_are_sound_and_cost_at_most_the_naive_scheme() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let (mut used, mut naive, mut worse) = (0, 0, 0);
    for _ in 0..200 {
        let (g, caps) = random_case(&mut seed);
        let pl = run_planner(g, &caps);
        check_bounds(pl.graph(), &caps);
        let st = pl.stats();
        worse += (st.flows > st.naive_flows) as u32;
        used += st.flows;
        naive += st.naive_flows;
    }
    eprintln!("flows {used} vs naive {naive}; {worse} of 200 cases cost more than naive");
    // Measured 1116 of 1814 (0.62) on these 200 trees; the seed's overall figure is 0.50.
    // 0.70 leaves room for a generator change, and fails a planner that probes every edge.
    assert!((used as f64) < 0.70 * naive as f64, "{used} vs {naive}");
}

/// The greedy subset (§3.4.6) against a brute force over all subsets of P(e): it reaches
/// the edge's max-flow, and with as few paths as the smallest subset that does.
#[test]
fn greedy_subset_reaches_the_maxflow_with_the_fewest_paths_as_brute_force() {
    let mut seed = 0x1234_5678_9abc_def1u64;
    let (mut cases, mut minimal) = (0, 0);
    for _ in 0..300 {
        let (g, caps) = random_case(&mut seed);
        let mut g = g;
        // Standalone bandwidths from the fluid model, and "=" on each path's bottleneck.
        for p in g.usable_paths() {
            let (r, bn) = water_fill(&g, &caps, &[p]);
            g.paths[p].bw_bps = Some(r[0]);
            if let Some(b) = bn[0] {
                g.edges[b].bound = BoundKind::Exact;
                g.edges[b].value_bps = caps[b];
            }
        }
        let pl = Planner::new(g, PlannerConfig::default()).unwrap();
        for e in pl
            .graph()
            .edges
            .iter()
            .filter(|e| e.bound == BoundKind::Above)
        {
            let ps = e.paths.clone();
            if ps.len() < 2 || ps.len() > 10 {
                continue;
            }
            let m = pl.maxflow_through(e.id, &ps);
            if !m.is_finite() {
                continue;
            }
            let greedy = pl.greedy_subset(e.id, m);
            let got = pl.maxflow_through(e.id, &greedy);
            assert!(
                got >= m * 0.95 - 1e-9,
                "greedy {greedy:?} gets {got} of {m}"
            );
            let mut best = usize::MAX;
            for mask in 1u32..(1 << ps.len()) {
                let s: Vec<usize> = (0..ps.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| ps[i])
                    .collect();
                if s.len() < best && pl.maxflow_through(e.id, &s) >= m * 0.95 - 1e-9 {
                    best = s.len();
                }
            }
            assert!(greedy.len() >= best);
            cases += 1;
            minimal += (greedy.len() == best) as u32;
        }
    }
    assert!(cases > 50, "{cases} cases");
    // Greedy is a heuristic (no optimality proof in the seed): measured 100% minimal on
    // these trees; allow 5% so a change of generator does not break it, while a broken
    // greedy (e.g. adding every path) fails.
    assert!(
        minimal as f64 >= 0.95 * cases as f64,
        "{minimal} of {cases} minimal"
    );
}

#[test]
fn bad_config_and_empty_graph() {
    assert!(Planner::new(
        graph(&[]),
        PlannerConfig {
            tolerance: 0.9,
            ..Default::default()
        }
    )
    .is_err());
    assert!(Planner::new(
        graph(&[]),
        PlannerConfig {
            max_parallel: 0,
            ..Default::default()
        }
    )
    .is_err());
    let mut pl = Planner::new(graph(&[]), PlannerConfig::default()).unwrap();
    assert!(pl.poll_step().is_none());
    // A result naming a path or an edge that does not exist is ignored, not a panic.
    let g = graph(&[vec![0, 1, 2]]);
    let mut pl = Planner::new(g, PlannerConfig::default()).unwrap();
    let s = pl.poll_step().unwrap();
    pl.handle_step(
        &s,
        StepResult {
            flows: vec![
                FlowResult {
                    path: 99,
                    throughput_bps: Some(1.0),
                },
                FlowResult {
                    path: 0,
                    throughput_bps: Some(f64::NAN),
                },
            ],
            bottleneck: Some(1234),
            note: String::new(),
        },
        0,
    );
    let _: &MapPath = &pl.graph().paths[0];
    assert!(pl.graph().edges.iter().all(|e| e.bound == BoundKind::Above));
}
