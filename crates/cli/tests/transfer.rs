//! The transfer modes as an operator meets them: an `mgrp agent` with a schedule and
//! `[transfer]` registers the congestion controls and feeds its estimate into their map; a bulk
//! flow started by `mgrp run --mode background` shows up in the agent's per-mode counters; a
//! second agent is told why it cannot have them; a reload changes parameters in place, and one
//! without `[transfer]` moves a socket still on `mgrp_bg` to the default and unregisters the
//! modes, as stopping the agent does. Root and BPF are needed; without them
//! each test says why it is skipped.

use mgrp_testbed::netns::{self, spawn_in};
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{AgentProc, MGRP};

/// The congestion controls' names are global to the kernel: one test at a time loads them.
static KERNEL: Mutex<()> = Mutex::new(());

const HTTP: &str = "127.0.0.1:7241";

fn serial() -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Some(why) = mgrp_control::unsupported_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    let g = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    // Another process (a benchmark, another checkout's tests) may hold them for a while.
    let t0 = Instant::now();
    while !mgrp_control::registered_modes().unwrap().is_empty() {
        if t0.elapsed() > Duration::from_secs(90) {
            panic!("the transfer modes stay registered by another process");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Some(g)
}

fn get(tb: &Testbed, url: &str) -> (u16, String) {
    let url = format!("http://{HTTP}{url}");
    spawn_in(&tb.ns(Role::Snd), "get", move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut r = agent.get(&url).call().unwrap();
        Ok((r.status().as_u16(), r.body_mut().read_to_string().unwrap()))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

fn transfer(tb: &Testbed) -> serde_json::Value {
    let (s, body) = get(tb, "/v1/transfer");
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn background(v: &serde_json::Value) -> serde_json::Value {
    v["stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["mode"] == "background")
        .cloned()
        .unwrap_or_else(|| panic!("no background stats: {v}"))
}

/// Accept one connection on `port` in rcv and read it to its end: the bytes.
fn sink(tb: &Testbed, port: u16) -> std::thread::JoinHandle<Result<u64, mgrp_testbed::Error>> {
    spawn_in(&tb.ns(Role::Rcv), "sink", move || {
        let l = TcpListener::bind((Role::Rcv.addr(), port)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        Ok(n)
    })
    .unwrap()
}

/// `mgrp run --mode background -- ip netns exec SND bash -c SCRIPT` (the cgroup is made outside
/// the namespace: `ip netns exec` remounts /sys without it).
fn mgrp_run(tb: &Testbed, script: &str) -> Command {
    let mut c = Command::new(MGRP);
    c.args(["run", "--mode", "background", "--", "ip", "netns", "exec"])
        .arg(tb.ns(Role::Snd))
        .args(["bash", "-c", script]);
    c
}

/// The agent's configuration: a schedule to rcv, and `transfer` (a `[transfer]` section, or
/// nothing).
fn config(dir: &Path, transfer: &str) -> std::path::PathBuf {
    let p = dir.join("agent.toml");
    std::fs::write(
        &p,
        format!(
            "http = \"{HTTP}\"\n[[path]]\npeer = \"{}\"\nmethod = \"auto\"\nevery = \"30s\"\nbudget = \"50mb\"\n{transfer}",
            Role::Rcv.addr()
        ),
    )
    .unwrap();
    p
}

const TRANSFER: &str = "[transfer]\nmax_age = \"60s\"\n";

/// SIGHUP with a new configuration; wait until the agent says the transfer modes were `what`.
fn reload(snd: &AgentProc, dir: &Path, transfer: &str, what: &str) {
    config(dir, transfer);
    snd.signal(nix::sys::signal::Signal::SIGHUP);
    let want = format!("transfer modes {what}");
    let t0 = Instant::now();
    while !snd.stdout().contains(&want) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no \"{want}\": {}",
            snd.stdout()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_agent_feeds_the_modes_and_unloads_them() {
    let Some(_k) = serial() else { return };
    let t_start = Instant::now();
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: 20_000_000,
            delay: Some(Duration::from_millis(20)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("mgrp-transfer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _rcv = AgentProc::start(&tb, Role::Rcv, None, None);
    let snd = AgentProc::start(
        &tb,
        Role::Snd,
        Some(&config(&dir, TRANSFER)),
        Some(dir.join("snd.out")),
    );
    let registered = mgrp_control::registered_modes().unwrap();
    assert_eq!(registered.len(), 3, "{registered:?}");

    // The first estimate reaches the map: A written = A measured (no background flow yet).
    let peer = Role::Rcv.addr();
    let t0 = Instant::now();
    let v = loop {
        let v = transfer(&tb);
        assert!(v["available"] == true, "{v}");
        if v["destinations"][0]["a_written_bps"].is_u64() {
            break v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no estimate fed: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let d = &v["destinations"][0];
    assert_eq!(
        (&d["destination"], &d["origin"]),
        (&peer.into(), &"scheduled".into()),
        "{v}"
    );
    let measured = d["a_measured_bps"].as_f64().unwrap();
    assert_eq!(d["a_written_bps"].as_u64().unwrap(), measured as u64, "{v}");
    assert_eq!(d["own_rate_bps"], 0.0, "{v}");
    assert_eq!(d["stale"], false, "{v}");
    let (_, est) = get(&tb, &format!("/v1/estimate?peer={peer}"));
    let est: serde_json::Value = serde_json::from_str(&est).unwrap();
    assert_eq!(est["value"].as_f64().unwrap(), measured, "{est} vs {v}");
    assert!(
        (10e6..=21e6).contains(&measured),
        "A on an idle 20 Mbit/s path: {v}"
    );
    assert_eq!(v["modes"].as_array().unwrap().len(), 3, "{v}");

    // A second agent cannot have them, and says why.
    let second = spawn_in(&tb.ns(Role::Snd), "second", || {
        let cfg = mgrp_service::config::ServiceConfig::parse("http = \"off\"\n[transfer]").unwrap();
        let key = mgrp_engine::auth::Key::from_hex(common::KEY).unwrap();
        let svc = mgrp_service::Service::start(&cfg, key).unwrap();
        Ok(svc.hub().transfer())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    assert!(second.configured && !second.available, "{second:?}");
    assert!(
        second
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("already registered"),
        "{second:?}"
    );

    // A bulk flow through `mgrp run`: on mgrp_bg, counted by the agent, its rate seen.
    let bulk = sink(&tb, 5411);
    let idle = sink(&tb, 5412);
    std::thread::sleep(Duration::from_millis(200));
    let flow = mgrp_run(
        &tb,
        &format!("head -c 8000000 /dev/zero > /dev/tcp/{peer}/5411"),
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut own_rate = 0.0f64;
    let mut active = 0;
    let flow_t0 = Instant::now();
    let mut flow = flow;
    let out = loop {
        let v = transfer(&tb);
        own_rate = own_rate.max(
            v["destinations"][0]["own_rate_now_bps"]
                .as_f64()
                .unwrap_or(0.0),
        );
        active = active.max(background(&v)["flows_active"].as_u64().unwrap());
        if flow.try_wait().unwrap().is_some() {
            break flow.wait_with_output().unwrap();
        }
        assert!(
            flow_t0.elapsed() < Duration::from_secs(20),
            "the bulk flow never ended"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let flow_s = flow_t0.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 socket put on mgrp_bg"), "{err}");
    let got = bulk.join().unwrap().unwrap();
    assert_eq!(got, 8_000_000);
    let v = transfer(&tb);
    let bg = background(&v);
    eprintln!(
        "bulk flow: 8 MB in {flow_s:.1} s; own rate seen {:.1} Mbit/s (A measured {:.1}); {bg}",
        own_rate / 1e6,
        measured / 1e6
    );
    assert_eq!(active, 1, "{v}");
    assert!(bg["flows_opened"].as_u64().unwrap() >= 1, "{bg}");
    assert!(bg["acked_bytes"].as_u64().unwrap() >= 7_000_000, "{bg}");
    // The estimate was fresh all along, and the cap held the window (g·RTT·A/M < what Reno
    // would reach on this buffer).
    assert_eq!(bg["acks_no_estimate"], 0, "{bg}");
    assert!(bg["acks_limited"].as_u64().unwrap() > 0, "{bg}");
    assert!(own_rate > 1e6, "no background rate seen: {v}");
    let (_, m) = get(&tb, "/metrics");
    let want =
        "mgrp_transfer_flows_opened_total{mode=\"background\",congestion_control=\"mgrp_bg\"} ";
    assert!(m.contains(want), "{want} not in\n{m}");
    eprintln!(
        "GET /v1/transfer:\n{}",
        serde_json::to_string_pretty(&v).unwrap()
    );

    // A reload with other parameters applies them in place: still registered, the entry kept.
    let written = v["destinations"][0]["a_written_bps"].clone();
    reload(
        &snd,
        &dir,
        "[transfer]\nmax_age = \"60s\"\ng = 0.5\n",
        "updated",
    );
    let t0 = Instant::now();
    while transfer(&tb)["params"]["g"] != 0.5 {
        assert!(t0.elapsed() < Duration::from_secs(2), "{}", transfer(&tb));
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = transfer(&tb);
    assert_eq!(v["available"], true, "{v}");
    assert_eq!(v["destinations"][0]["a_written_bps"], written, "{v}");

    // A socket still on mgrp_bg when the modes go (a reload without [transfer], then the
    // agent's stop) is moved to the namespace's default.
    let ss = || {
        netns::run(
            "ip",
            &[
                "netns",
                "exec",
                &tb.ns(Role::Snd),
                "ss",
                "-tinH",
                "dport = :5412",
            ],
        )
        .unwrap()
    };
    let mut held = mgrp_run(&tb, &format!("exec 3<>/dev/tcp/{peer}/5412; exec sleep 60"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ss().contains("mgrp_bg") {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "held socket not on mgrp_bg: {}",
            ss()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let default = netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &tb.ns(Role::Snd),
            "cat",
            "/proc/sys/net/ipv4/tcp_congestion_control",
        ],
    )
    .unwrap();
    reload(&snd, &dir, "", "unloaded");
    assert!(
        mgrp_control::registered_modes().unwrap().is_empty(),
        "left registered after a reload without [transfer]"
    );
    let now = ss();
    assert!(
        !now.contains("mgrp_") && now.contains(default.trim()),
        "socket left on a vanished mode (default {default}): {now}"
    );
    assert_eq!(transfer(&tb)["configured"], false);
    // Back on a reload; gone again when the agent stops.
    reload(&snd, &dir, TRANSFER, "loaded");
    assert_eq!(mgrp_control::registered_modes().unwrap().len(), 3);
    assert_eq!(transfer(&tb)["available"], true);
    drop(snd);
    assert!(
        mgrp_control::registered_modes().unwrap().is_empty(),
        "left registered after the agent stopped"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(held.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = held.wait();
    let _ = idle.join();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("took {:.1} s", t_start.elapsed().as_secs_f64());
}

#[test]
fn run_says_what_to_do_when_the_modes_are_not_registered() {
    let Some(_k) = serial() else { return };
    let out = Command::new(MGRP)
        .args(["run", "--mode", "full-speed", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("mgrp_fs is not registered") && err.contains("[transfer]"),
        "{err}"
    );
    let out = Command::new(MGRP)
        .args(["control", "status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["kernel"]["modes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["registered"] == false),
        "{v}"
    );
    assert!(v["agent"].is_null());
}
