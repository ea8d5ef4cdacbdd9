//! The agent's service as an application meets it: an `mgrp agent --config` process keeps a
//! path fresh; its HTTP API answers on demand, pushes an event when cross traffic steps, reports
//! RTT and metrics, and takes a new configuration on SIGHUP.

use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::AgentProc;

const HTTP: &str = "127.0.0.1:7241";

fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// GET inside the sender's namespace (the API listens on its loopback).
fn get(tb: &Testbed, url: &str) -> (u16, String) {
    let url = format!("http://{HTTP}{url}");
    spawn_in(&tb.ns(Role::Snd), "get", move || {
        let mut r = client().get(&url).call().unwrap();
        Ok((r.status().as_u16(), r.body_mut().read_to_string().unwrap()))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

fn json(tb: &Testbed, url: &str) -> serde_json::Value {
    let (s, body) = get(tb, url);
    assert_eq!(s, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Subscribe inside the sender's namespace; events arrive as (when, name, data).
fn subscribe(tb: &Testbed, url: &str) -> mpsc::Receiver<(Instant, String, serde_json::Value)> {
    let url = format!("http://{HTTP}{url}");
    let (tx, rx) = mpsc::channel();
    spawn_in(&tb.ns(Role::Snd), "sse", move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let r = agent.get(&url).call().unwrap();
        let mut name = String::new();
        for line in std::io::BufReader::new(r.into_body().into_reader()).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                let v = serde_json::from_str(d.trim()).unwrap_or_default();
                if tx.send((Instant::now(), name.clone(), v)).is_err() {
                    break;
                }
            }
        }
        Ok(())
    })
    .unwrap();
    rx
}

/// 20 Mbit/s, 10 ms of extra RTT.
fn testbed() -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps: 20_000_000,
            delay: Some(Duration::from_millis(10)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap()
}

fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("agent.toml");
    std::fs::write(&p, format!("http = \"{HTTP}\"\n{body}")).unwrap();
    p
}

#[test]
fn live_service_events_on_demand_rtt_metrics_and_reload() {
    mgrp_testbed::stolen::unless_stolen(
        "live_service_events_on_demand_rtt_metrics_and_reload",
        |_| {
            let tb = testbed();
            let dir = std::env::temp_dir().join(format!("mgrp-svc-test-{}", std::process::id()));
            // A failed attempt's files must not meet the next one.
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let peer = Role::Rcv.addr().to_string();
            let path_cfg = |method: &str, every: &str| {
                format!("[[path]]\npeer = \"{peer}\"\nmethod = \"{method}\"\nevery = \"{every}\"\nbudget = \"50mb\"\n")
            };
            let _rcv = AgentProc::start(&tb, Role::Rcv, None, Some(dir.join("rcv.out")));
            let cross = |mbit: u64| {
                let p = CrossPattern::parse(&format!("cbr:{mbit}mbit")).unwrap();
                CrossTraffic::start(&tb, &p, BASE_PORT, &GenOptions::default()).unwrap()
            };
            // A = 18 Mbit/s, then 6: the subscriber asked to hear when it falls below 10.
            let light = cross(2);
            let cfg = config(&dir, &path_cfg("auto", "1s"));
            let snd = AgentProc::start(&tb, Role::Snd, Some(&cfg), Some(dir.join("snd.out")));
            let events = subscribe(&tb, &format!("/v1/events?peer={peer}&below=10mbit"));
            let all = subscribe(&tb, &format!("/v1/events?peer={peer}"));
            std::thread::sleep(Duration::from_secs(6));
            let before: Vec<_> = events.try_iter().collect();
            let estimates: Vec<f64> = all
                .try_iter()
                .map(|(_, _, v)| v["value"].as_f64().unwrap())
                .collect();
            assert!(
                estimates.len() >= 3,
                "estimates before the step: {estimates:?}"
            );
            assert!(
                before.is_empty(),
                "below 10 Mbit/s at A = 18: {before:?}, {estimates:?}"
            );
            light.stop().unwrap();
            let heavy = cross(14);
            let step = Instant::now();
            let (when, name, ev) = events
                .recv_timeout(Duration::from_secs(15))
                .expect("no event within 15 s of the step");
            let latency = when - step;
            eprintln!(
                "`below` event {:.2} s after the step: {}",
                latency.as_secs_f64(),
                ev["value"]
            );
            assert_eq!(name, "below", "{ev}");
            assert!(
                ev["value"].as_f64().unwrap() < 10e6 && ev["threshold"] == 10e6,
                "{ev}"
            );
            assert!(latency < Duration::from_secs(8), "{latency:?}");

            // On demand: the newest estimate is 200 ms old, the bound 100 ms: measure now.
            std::thread::sleep(Duration::from_millis(200));
            let asked = mgrp_testbed::clock::realtime_ns();
            let r = json(&tb, &format!("/v1/estimate?peer={peer}&max_age=100ms"));
            assert!(
                r["t_ns"].as_u64().unwrap() + 100_000_000 >= asked,
                "asked at {asked}, event was {ev}: {r}"
            );
            assert_eq!(r["metric"], "avail_bw");
            assert!(
                r["low"].as_f64() <= r["value"].as_f64()
                    && r["value"].as_f64() <= r["high"].as_f64()
            );
            heavy.stop().unwrap();

            // RTT from the control connection: 10 ms of delay line plus little else.
            let rtt = json(&tb, &format!("/v1/estimate?peer={peer}&metric=rtt"));
            let v = rtt["value"].as_f64().unwrap();
            assert!((0.009..0.060).contains(&v), "{rtt}");
            let loss = json(&tb, &format!("/v1/estimate?peer={peer}&metric=loss"));
            assert!(
                (0.0..=1.0).contains(&loss["value"].as_f64().unwrap()),
                "{loss}"
            );
            let (s, m) = get(&tb, "/metrics");
            assert_eq!(s, 200);
            for want in [
                "metric=\"avail_bw\"",
                "metric=\"capacity\"",
                "metric=\"rtt\"",
                "mgrp_schedule_measurements_total{",
                "mgrp_agent_total{counter=\"sessions_opened\"}",
                "mgrp_event_subscribers 2",
            ] {
                assert!(m.contains(want), "{want} not in\n{m}");
            }
            let sched = json(&tb, "/v1/schedules");
            assert_eq!(sched[0]["method"], "auto", "{sched}");
            assert!(
                sched[0]["counters"]["measurements"].as_u64().unwrap() >= 5,
                "{sched}"
            );

            // Reload: a new method takes effect without a restart; a broken file changes nothing.
            config(&dir, &path_cfg("chirp", "2s"));
            snd.signal(nix::sys::signal::Signal::SIGHUP);
            let t0 = Instant::now();
            while json(&tb, "/v1/schedules")[0]["method"] != "chirp" {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "reload not applied: {}",
                    snd.stdout()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            std::fs::write(&cfg, "[[path]]\npeer = \"nowhere\"\n").unwrap();
            snd.signal(nix::sys::signal::Signal::SIGHUP);
            let t0 = Instant::now();
            while !snd.stdout().contains("failed, nothing changed") {
                assert!(t0.elapsed() < Duration::from_secs(10), "{}", snd.stdout());
                std::thread::sleep(Duration::from_millis(100));
            }
            let sched = json(&tb, "/v1/schedules");
            assert_eq!(sched[0]["method"], "chirp", "{sched}");
            assert!(
                snd.stdout().contains("1 schedules started, 1 stopped"),
                "{}",
                snd.stdout()
            );
            drop(snd);
            let _ = std::fs::remove_dir_all(&dir);
        },
    )
}

#[test]
fn passive_estimates_reach_the_store() {
    mgrp_testbed::stolen::unless_stolen("passive_estimates_reach_the_store", |_| {
        let tb = testbed();
        let dir = std::env::temp_dir().join(format!("mgrp-svc-passive-{}", std::process::id()));
        // A failed attempt's files must not meet the next one.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = config(&dir, "[[passive]]\niface = \"eth0\"\n");
        let snd = AgentProc::start(&tb, Role::Snd, Some(&cfg), Some(dir.join("snd.out")));
        let flow = mgrp_testbed::app::AppFlow::start(
            &tb,
            Role::Snd,
            Role::Rcv,
            5300,
            mgrp_testbed::app::AppPattern::parse("bulk").unwrap(),
            Some("cubic".into()),
            Duration::from_secs(30),
        )
        .unwrap();
        let path = format!("{}->{}", Role::Snd.addr(), Role::Rcv.addr());
        let url = format!("/v1/estimate?path={}", path.replace('>', "%3E"));
        let t0 = Instant::now();
        let r = loop {
            let (s, body) = get(&tb, &url);
            if s == 200 {
                break serde_json::from_str::<serde_json::Value>(&body).unwrap();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no passive estimate: {s} {body}; {:?}",
                get(&tb, "/v1/passive")
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        drop(flow);
        assert_eq!(
            (&r["source"], &r["method"]),
            (&"passive".into(), &"wren".into()),
            "{r}"
        );
        assert_eq!(r["probe_bytes"], 0);
        // A bulk flow alone on a 20 Mbit/s path: Wren's lower bound sits just under C.
        let v = r["value"].as_f64().unwrap();
        assert!((10e6..=21e6).contains(&v), "{r}");
        let p = json(&tb, "/v1/passive");
        assert_eq!(p[0]["iface"], "eth0");
        assert!(p[0]["segments"].as_u64().unwrap() > 1000, "{p}");
        assert_eq!(p[0]["capture_dropped"], 0, "{p}");
        drop(snd);
        let _ = std::fs::remove_dir_all(&dir);
    })
}
