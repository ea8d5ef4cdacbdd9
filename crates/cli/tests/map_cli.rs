//! `mgrp map` as a user runs it: bad input is a clear error, and an agent that does not
//! answer is a path with its reason in the map, never a hang.

mod common;
use common::{mgrp, stderr};
use std::time::{Duration, Instant};

#[test]
fn bad_input_is_a_clear_error() {
    for (args, why) in [
        (&["map", "--agents", "not-an-address"][..], "not-an-address"),
        (
            &["map", "--agents", "127.0.0.1", "--max-hops", "0"],
            "TTL 0 is out of range",
        ),
        (
            &["map", "--agents", "127.0.0.1", "--max-hops", "65"],
            "TTL 65 is out of range",
        ),
        (
            &["map", "--agents", "127.0.0.1,127.0.0.1:7240"],
            "listed twice",
        ),
        (
            &["map", "--agents", "127.0.0.1", "--budget", "10kB"],
            "budget",
        ),
        (
            &["map", "--agents", "127.0.0.1", "--max-parallel", "0"],
            "max parallel",
        ),
        (
            &["map", "--agents", "127.0.0.1", "--max-time", "1ms"],
            "--max-time",
        ),
    ] {
        let o = mgrp(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_agent_that_does_not_answer_is_a_path_with_its_reason() {
    let key = std::env::temp_dir().join(format!("mgrp-map-key-{}", std::process::id()));
    std::fs::write(&key, "00".repeat(32)).unwrap();
    let mut perms = std::fs::metadata(&key).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&key, perms).unwrap();
    let t = Instant::now();
    // Port 9 on loopback: nothing listens; the connect is refused at once.
    let o = mgrp(&[
        "map",
        "--agents",
        "127.0.0.1:9",
        "--key-file",
        key.to_str().unwrap(),
        "--json",
    ]);
    let _ = std::fs::remove_file(&key);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["graph"]["paths"][0];
    assert!(
        p["problem"]
            .as_str()
            .unwrap()
            .contains("cannot trace to 127.0.0.1:9"),
        "{v}"
    );
    assert_eq!(v["stats"]["flows"], 0);
}
