//! `mgrp trace` as a user runs it, without root: bad numbers and an agent that is not there
//! are clear errors, and nothing hangs. (Traces on a real path: `crates/map/tests`.)

use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{stderr, KEY, MGRP};

fn trace(args: &[&str]) -> (std::process::Output, Duration) {
    let t0 = Instant::now();
    let o = Command::new(MGRP)
        .arg("trace")
        .args(args)
        .env("MGRP_KEY", KEY)
        .output()
        .expect("run mgrp");
    (o, t0.elapsed())
}

#[test]
fn bad_numbers_are_clear_errors_before_anything_is_sent() {
    for (args, why) in [
        (
            &["127.0.0.1", "--max-hops", "0"][..],
            "TTL 0 is out of range: hops are 1..=64",
        ),
        (&["127.0.0.1", "--max-hops", "65"], "TTL 65 is out of range"),
        (&["127.0.0.1", "--runs", "0"], "runs must be"),
        (&["127.0.0.1", "--size", "10"], "probe size 10"),
        (&["not-an-address"], "bad peer"),
    ] {
        let (o, _) = trace(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = stderr(&o);
        assert!(e.contains(why), "{args:?}: wanted {why:?} in {e:?}");
    }
}

#[test]
fn an_agent_that_is_not_there_is_named_not_waited_for() {
    // A port nobody listens on: refused at once.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let peer = format!("127.0.0.1:{port}");
    let (o, took) = trace(&[&peer]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(&format!("connect to agent at {peer}")), "{e}");
    assert!(e.contains("is `mgrp agent` running there?"), "{e}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn bottleneck_bad_input_is_a_clear_error_and_an_absent_agent_is_named() {
    let run = |args: &[&str]| {
        Command::new(MGRP)
            .arg("bottleneck")
            .args(args)
            .env("MGRP_KEY", KEY)
            .output()
            .expect("run mgrp")
    };
    for (args, why) in [
        (
            &["127.0.0.1", "--max-hops", "65"][..],
            "TTL 65 is out of range",
        ),
        (
            &["127.0.0.1", "--budget", "10"],
            "--budget must be at least",
        ),
        (
            &["127.0.0.1", "--max-time", "10m"],
            "--max-time must be between",
        ),
        (
            &["127.0.0.1", "--confirm", "0"],
            "confirmation needs 1..=100",
        ),
        (&["127.0.0.1", "--base-rounds", "0"], "base rounds must be"),
    ] {
        let o = run(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&o).contains(why),
            "{args:?}: wanted {why:?} in {}",
            stderr(&o)
        );
    }
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = format!("127.0.0.1:{}", free.local_addr().unwrap().port());
    drop(free);
    let t0 = Instant::now();
    let o = run(&[&peer]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(&format!("connect to agent at {peer}")),
        "{}",
        stderr(&o)
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}
