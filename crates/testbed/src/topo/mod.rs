//! Topologies from a file: chains, trees and access networks of hosts and routers, each link
//! with its own shaper and delay, built from namespaces beside the fixed default testbed.
//!
//! [`spec`] reads and checks a topology file and computes the address plan and routes (pure);
//! [`build`] makes it real and tears it down; [`truth`] reads per-link ground truth.

pub mod build;
pub mod spec;
pub mod truth;

pub use build::{TopoOptions, TopoState, TopoTestbed};
pub use spec::{IcmpRateLimit, LinkDir, NodeKind, Topology};
pub use truth::{LinkBin, TopoBin, TopoTruth, TopoTruthSampler};

use crate::Error;

/// Topologies shipped in the binary, usable by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("chain3", include_str!("../../topologies/chain3.toml")),
    ("tree", include_str!("../../topologies/tree.toml")),
    ("access", include_str!("../../topologies/access.toml")),
    ("access_bg", include_str!("../../topologies/access_bg.toml")),
];

/// The text of a topology given by built-in name or by path: a name wins unless the argument
/// looks like a path (has a `/` or ends in `.toml`).
pub fn source(name_or_path: &str) -> Result<String, Error> {
    let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".toml");
    if !looks_like_path {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Ok(text.to_string());
        }
    }
    std::fs::read_to_string(name_or_path).map_err(|e| {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Error::BadInput(format!(
            "topology {name_or_path:?}: {e} (built-in topologies: {})",
            names.join(", ")
        ))
    })
}

/// The built-in `chain3` with r1═r2 at `c12` and r2═r3 at `c23` Mbit/s and `tail_ms` of delay
/// on r3—b (a bottleneck locator's testbed: the narrow link wherever it is asked to be).
pub fn chain3_with(c12: f64, c23: f64, tail_ms: f64) -> String {
    let text = source("chain3").expect("chain3 is built in");
    let out = text
        .replace(
            "a = \"r1\"\nb = \"r2\"\ncapacity = \"50mbit\"",
            &format!(
                "a = \"r1\"\nb = \"r2\"\ncapacity = \"{}kbit\"",
                (c12 * 1000.0).round()
            ),
        )
        .replace(
            "a = \"r2\"\nb = \"r3\"\ncapacity = \"20mbit\"",
            &format!(
                "a = \"r2\"\nb = \"r3\"\ncapacity = \"{}kbit\"",
                (c23 * 1000.0).round()
            ),
        )
        .replace(
            "a = \"r3\"\nb = \"b\"\n",
            &format!("a = \"r3\"\nb = \"b\"\ndelay = \"{tail_ms}ms\"\n"),
        );
    assert_eq!(
        out.matches("kbit\"").count() + out.matches("delay = ").count(),
        3,
        "chain3 changed shape"
    );
    out
}

/// Read and check a topology by built-in name or path.
pub fn load(name_or_path: &str) -> Result<Topology, Error> {
    Topology::parse(&source(name_or_path)?)
        .map_err(|e| Error::BadInput(format!("{name_or_path}: {e}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtins_parse() {
        for (name, _) in super::BUILTIN {
            let t = super::load(name).unwrap();
            assert!(!t.shaped_dirs().is_empty(), "{name}");
            assert!(t.measure.is_some(), "{name}");
        }
        assert!(super::load("nosuch")
            .unwrap_err()
            .to_string()
            .contains("chain3"));
    }

    #[test]
    fn chain3_with_moves_the_narrow_link() {
        let t = super::Topology::parse(&super::chain3_with(15.0, 50.5, 5.0)).unwrap();
        let caps: Vec<u64> = t
            .links
            .iter()
            .filter_map(|l| l.shaping.as_ref().map(|s| s.capacity_bps))
            .collect();
        assert_eq!(caps, [15_000_000, 50_500_000]);
    }
}
