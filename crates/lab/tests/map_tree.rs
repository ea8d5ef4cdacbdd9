//! Netmapper on the testbed's tree (src → r → rx1 20, rx2 10, rx3 5 Mbit/s): real
//! traceroutes, TCP flows and Tneck over namespaces the test makes. Needs root; about 40 s.

use mgrp_lab::map_bench::{cases, judge, map_config, MapRig};
use mgrp_map::graph::NodeKind;

#[test]
fn the_tree_is_mapped_with_its_bottlenecks_and_sound_bounds() {
    let case = cases().into_iter().find(|c| c.name == "tree").unwrap();
    let rig = MapRig::up(&case, "t").expect("topology up (this test needs root)");
    let mut cfg = map_config(rig.pairs.clone());
    // An agent nobody runs (a host address on the tree, wrong port): a path with an error.
    let dead = std::net::SocketAddr::new(rig.pairs[0].1.ip(), 7999);
    cfg.pairs.push((0, dead));
    let m = mgrp_map::map(&rig.conn, &cfg, || false, |s| eprint!("{s}")).expect("map runs");
    let g = m.graph.clone();
    eprintln!("{}", m.table());
    // Topology: src, rx1..3 (+ the dead pair's address is rx1's: same node), one router.
    assert_eq!(
        g.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Router)
            .count(),
        1
    );
    assert_eq!(g.usable_paths().len(), 3);
    assert!(
        g.paths[3]
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("cannot trace"),
        "{:?}",
        g.paths[3]
    );
    // Sharing: src→r carries all three paths.
    assert!(g.edges.iter().any(|e| e.paths.len() == 3));
    let run = judge("tree", 1, &rig, m);
    // The three r→rxN links are each path's bottleneck: "=" within ±15% of the measured
    // capacity (the tolerance; the bottleneck bench measured bound/capacity 0.96 in
    // 30 of 30 single-bottleneck runs), and no ">" above a link's truth.
    assert_eq!(run.exact_edges, 3, "{:#?}", run.edges);
    assert_eq!(run.exact_within_15, 3, "{:#?}", run.edges);
    assert_eq!(run.above_over_truth, 0, "{:#?}", run.edges);
    // Seed Fig. 3.3's point: no more flows than the naive scheme (3 alone + 1 joint step of
    // 3 on src→r, whose max-flow 33 exceeds the largest single path's ~19).
    assert!(run.flows <= run.naive_flows, "{run:?}");
    drop(rig);
    let mine = format!("mgrp-t{}-", std::process::id());
    let left: Vec<String> = mgrp_testbed::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
