//! `mgrp testbed up|run|status|down --topology` as a user runs them.

mod common;
use common::{mgrp, namespaces_of, stderr};

fn running(pid: u64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z")
}

const DELAYED: &str = r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "r2"
kind = "router"
[[node]]
name = "b"
kind = "host"
[[link]]
a = "a"
b = "r1"
delay = "10ms"
[[link]]
a = "r1"
b = "r2"
capacity = "30mbit"
delay = "5ms"
[[link]]
a = "r2"
b = "b"
[measure]
from = "a"
to = "b"
"#;

#[test]
fn up_status_down_a_topology_with_delay_lines() {
    let dir = std::env::temp_dir().join(format!("mgrp-topo-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("delayed.toml");
    std::fs::write(&file, DELAYED).unwrap();
    let name = format!("tc{}", std::process::id() % 100_000);
    let o = mgrp(&[
        "testbed",
        "up",
        "--name",
        &name,
        "--topology",
        file.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["capacities"].as_array().unwrap().len(), 2, "{v}");
    let pids: Vec<u64> = v["delay_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "one delay line per delayed link: {v}");
    assert!(pids.iter().all(|p| running(*p)));
    assert_eq!(namespaces_of(&name).len(), 4);

    let o = mgrp(&["testbed", "status", &name, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["links"].as_array().unwrap().len(), 2, "{st}");
    let o = mgrp(&["testbed", "status"]);
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&name) && l.contains("persistent")),
        "{list}"
    );

    let o = mgrp(&["testbed", "down", &name]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(namespaces_of(&name).is_empty());
    assert!(pids.iter().all(|p| !running(*p)), "delay lines left");
    assert!(!mgrp(&["testbed", "down", &name]).status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_a_builtin_topology_as_json() {
    let o = mgrp(&[
        "testbed",
        "run",
        "--topology",
        "tree",
        "--duration",
        "2s",
        "--no-measure-capacity",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bins = v["bins"].as_array().unwrap();
    assert!(bins.len() >= 15, "100 ms bins over 2 s: {}", bins.len());
    let links = v["summary"]["links"].as_array().unwrap();
    let cross = |label: &str| {
        links.iter().find(|l| l["label"] == label).unwrap()["cross_bps"]
            .as_f64()
            .unwrap()
    };
    // tree.toml's flow: CBR 4 Mbit/s src → rx2, so only r→rx2 carries cross traffic.
    assert!(
        (cross("r→rx2") - 4e6).abs() < 0.03 * 4e6,
        "{}",
        cross("r→rx2")
    );
    assert!(cross("r→rx1") < 50e3 && cross("r→rx3") < 50e3);
}

#[test]
fn a_bad_topology_is_refused_naming_the_entry() {
    let dir = std::env::temp_dir().join(format!("mgrp-topo-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("loop.toml");
    std::fs::write(
        &file,
        DELAYED.replace("[measure]", "[[link]]\na = \"b\"\nb = \"a\"\n[measure]"),
    )
    .unwrap();
    let name = format!("tb{}", std::process::id() % 100_000);
    let o = mgrp(&[
        "testbed",
        "up",
        "--name",
        &name,
        "--topology",
        file.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("link #4 (b — a)"), "{e}");
    assert!(namespaces_of(&name).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
