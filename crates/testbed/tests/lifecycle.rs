//! Up and down leave nothing behind — namespaces, links, qdiscs, threads, sockets, state —
//! including when the test panics midway; parallel testbeds do not collide.

mod common;
use common::*;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::topology::{existing_namespaces, State};
use mgrp_testbed::{CrossPattern, DelayDir, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use std::sync::Mutex;
use std::time::Duration;

/// Thread and fd counts are per process: these tests must not overlap each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Threads and open fds of this process, after giving exiting threads a moment.
fn footprint() -> (usize, usize) {
    std::thread::sleep(Duration::from_millis(100));
    (count("/proc/self/task"), count("/proc/self/fd"))
}

fn assert_gone(name: &str) {
    assert!(
        existing_namespaces(name).is_empty(),
        "namespaces left: {:?}",
        existing_namespaces(name)
    );
    assert!(!State::path(name).exists(), "state file left");
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links.contains("xsnd") && !links.contains("dly") && !links.contains("lss"),
        "testbed link in the root namespace: {links}"
    );
}

#[test]
fn up_and_down_leave_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = footprint();
    let name;
    {
        let tb = Testbed::up(
            TestbedConfig {
                delay: Some(Duration::from_millis(5)),
                delay_dir: DelayDir::Both,
                loss: Some(mgrp_testbed::LossModel::Random { p: 0.01 }),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        name = tb.name().to_string();
        assert_eq!(existing_namespaces(&name).len(), 6);
        assert!(State::path(&name).exists());
        let s = TruthSampler::start(&tb, Duration::from_millis(50)).unwrap();
        let g = CrossTraffic::start(
            &tb,
            &CrossPattern::parse("tcp:2").unwrap(),
            BASE_PORT,
            &GenOptions::default(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        g.stop().unwrap();
        s.stop().unwrap();
    }
    assert_gone(&name);
    assert_eq!(footprint(), before, "threads/fds not released");
}

#[test]
fn panic_midway_still_tears_down() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = footprint();
    let name = Mutex::new(String::new());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tb = Testbed::up(
            TestbedConfig {
                delay: Some(Duration::from_millis(2)),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        *name.lock().unwrap() = tb.name().to_string();
        let _s = TruthSampler::start(&tb, Duration::from_millis(50)).unwrap();
        let _g = CrossTraffic::start(
            &tb,
            &CrossPattern::parse("cbr:5mbit").unwrap(),
            BASE_PORT,
            &GenOptions::default(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        panic!("deliberate panic midway through a measurement");
    }));
    assert!(result.is_err());
    let name = name.into_inner().unwrap();
    assert!(!name.is_empty());
    assert_gone(&name);
    assert_eq!(footprint(), before, "threads/fds not released after panic");
}

#[test]
fn duplicate_name_is_refused_and_first_left_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Same explicit name twice: the second is refused, and the first is untouched.
    let name = format!("dup{}", std::process::id());
    let first = Testbed::up(
        TestbedConfig {
            name: Some(name.clone()),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let e = Testbed::up(
        TestbedConfig {
            name: Some(name.clone()),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .err()
    .expect("duplicate name must be refused")
    .to_string();
    assert!(e.contains("already exists"), "{e}");
    assert_eq!(existing_namespaces(&name).len(), 6);
    drop(first);
    assert_gone(&name);
}

#[test]
fn parallel_testbeds_are_independent() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let a = testbed(10.0);
    let b = testbed(30.0);
    assert_ne!(a.name(), b.name());
    // Same addresses in both, different queues: each sees only its own cross traffic.
    let (ta, tb_) = std::thread::scope(|s| {
        let ja = s.spawn(|| run_pattern(&a, "cbr:4mbit", 2.0, 0.3));
        let jb = s.spawn(|| run_pattern(&b, "cbr:12mbit", 2.0, 0.3));
        (ja.join().unwrap(), jb.join().unwrap())
    });
    assert!(
        rel_err(ta.avail_bps, a.capacity().bps() - 4e6) < 0.02,
        "{ta:?}"
    );
    assert!(
        rel_err(tb_.avail_bps, b.capacity().bps() - 12e6) < 0.02,
        "{tb_:?}"
    );
    assert_eq!(a.ns(Role::R1), format!("mgrp-{}-r1", a.name()));
}
