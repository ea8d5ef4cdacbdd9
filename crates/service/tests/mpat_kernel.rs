//! `/v1/mpat` over the real `mgrp_mpat` on the namespace testbed: an aggregate created through
//! the API, two flows joining it (their sockets on mgrp_mpat, as `mgrp mpat run` puts them),
//! weights 1:3 then changed to 3:1 through the API and followed by the rules' rates, the
//! aggregate deleted and MPAT unloaded. Root and a BPF-capable kernel are needed; without them
//! the test says why it is skipped.

use mgrp_service::http::Http;
use mgrp_service::mpat::{MpatConfig, MpatState};
use mgrp_service::Hub;
use mgrp_store::Store;
use mgrp_testbed::{netns, DelayMode, Role, Testbed, TestbedConfig};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn call(base: &str, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let url = format!("{base}{path}");
    let mut resp = match (method, body) {
        ("GET", _) => agent.get(&url).call(),
        ("DELETE", _) => agent.delete(&url).call(),
        ("POST", Some(b)) => agent.post(&url).content_type("application/json").send(b),
        ("PUT", Some(b)) => agent.put(&url).content_type("application/json").send(b),
        _ => panic!("{method}"),
    }
    .unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// Acked bytes of the aggregate's two members, read through the API.
fn acked(base: &str) -> [f64; 2] {
    let (_, v) = call(base, "GET", "/v1/mpat", None);
    let m = &v["aggregates"][0]["members"];
    [
        m[0]["acked_bytes"].as_f64().unwrap(),
        m[1]["acked_bytes"].as_f64().unwrap(),
    ]
}

fn ratio(a: [f64; 2], b: [f64; 2]) -> f64 {
    (b[1] - a[1]) / (b[0] - a[0])
}

#[test]
fn create_join_reweight_delete_through_the_api() {
    mgrp_testbed::stolen::unless_stolen("create_join_reweight_delete_through_the_api", |_| {
        if let Some(why) = mgrp_control::unsupported_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 20_000_000,
                delay: Some(Duration::from_millis(40)),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        let hub = Hub::new(
            Box::new(Store::in_memory(Duration::from_secs(3600)).unwrap()),
            None,
        );
        let st = MpatState::start(&MpatConfig::default(), &BTreeMap::new());
        hub.set_mpat(Some(Arc::new(st)));
        let http = Http::start("127.0.0.1:0".parse().unwrap(), hub.clone()).unwrap();
        let base = format!("http://{}", http.local_addr());
        let (s, v) = call(&base, "GET", "/v1/mpat", None);
        assert_eq!(
            (s, &v["available"]),
            (200, &serde_json::Value::Bool(true)),
            "{v}"
        );

        let rcv = Role::Rcv.addr();
        let body = format!(
            r#"{{"name": "t", "members": [{{"dst": "{rcv}", "port": 7811, "weight": 1}},
            {{"dst": "{rcv}", "port": 7812, "weight": 3}}]}}"#
        );
        let (s, v) = call(&base, "POST", "/v1/mpat", Some(&body));
        assert_eq!(s, 201, "{v}");

        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for port in [7811u16, 7812] {
            threads.push(
                netns::spawn_in(&tb.ns(Role::Rcv), "sink", move || {
                    let l = TcpListener::bind((rcv, port)).unwrap();
                    let (mut s, _) = l.accept().unwrap();
                    let mut buf = vec![0u8; 1 << 16];
                    while matches!(s.read(&mut buf), Ok(k) if k > 0) {}
                    Ok(())
                })
                .unwrap(),
            );
        }
        std::thread::sleep(Duration::from_millis(200));
        for port in [7811u16, 7812] {
            let stop = stop.clone();
            threads.push(
                netns::spawn_in(&tb.ns(Role::Snd), "bulk", move || {
                    let s = TcpStream::connect((rcv, port)).unwrap();
                    mgrp_control::sockopt::set_congestion_control(s.as_raw_fd(), "mgrp_mpat")
                        .unwrap();
                    s.set_write_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    let block = vec![0u8; 1 << 16];
                    while !stop.load(Ordering::Relaxed) {
                        let _ = (&s).write(&block);
                    }
                    Ok(())
                })
                .unwrap(),
            );
        }
        // Warm up, then count acked bytes over 4 s at 1:3 and, after the change, at 3:1.
        std::thread::sleep(Duration::from_secs(4));
        let (_, v) = call(&base, "GET", "/v1/mpat", None);
        let a = &v["aggregates"][0];
        assert_eq!(a["kernel"]["windows"], 2, "both flows joined: {v}");
        assert_eq!(
            (
                a["members"][0]["flows"].as_u64(),
                a["members"][1]["flows"].as_u64()
            ),
            (Some(1), Some(1)),
            "{v}"
        );
        let t0 = acked(&base);
        std::thread::sleep(Duration::from_secs(4));
        let t1 = acked(&base);
        let (s, v) = call(
            &base,
            "PUT",
            "/v1/mpat/t",
            Some(&format!(
                r#"{{"members": [{{"dst": "{rcv}", "port": 7811, "weight": 3}},
            {{"dst": "{rcv}", "port": 7812, "weight": 1}}]}}"#
            )),
        );
        assert_eq!(s, 200, "{v}");
        std::thread::sleep(Duration::from_secs(2));
        let t2 = acked(&base);
        std::thread::sleep(Duration::from_secs(4));
        let t3 = acked(&base);
        let (r1, r2) = (ratio(t0, t1), ratio(t2, t3));
        eprintln!("acked 2nd/1st: {r1:.3} at 1:3, {r2:.3} at 3:1");
        // Three runs here: 3.005/0.331, 3.033/0.330, 2.936/0.329 (within 2.2 %); the control
        // crate's kernel test held the split within 4 % over nine runs. Acked bytes over 4 s on a
        // host with CPU steal get 15 %.
        assert!((r1 / 3.0 - 1.0).abs() < 0.15, "1:3 gave {r1}");
        assert!((r2 * 3.0 - 1.0).abs() < 0.15, "3:1 gave {r2}");
        let text = mgrp_service::metrics::render(&hub, 0).unwrap();
        assert!(
            text.contains("mgrp_mpat_aggregate_windows{aggregate=\"t\"} 2"),
            "{text}"
        );

        let (s, v) = call(&base, "DELETE", "/v1/mpat/t", None);
        assert_eq!(s, 200, "{v}");
        let (_, v) = call(&base, "GET", "/v1/mpat", None);
        assert_eq!(v["aggregates"].as_array().unwrap().len(), 0, "{v}");
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap().unwrap();
        }
        drop(http);
        hub.set_mpat(None);
        let avail = mgrp_control::available_congestion_controls().unwrap();
        assert!(
            !avail.iter().any(|a| a == "mgrp_mpat"),
            "left registered: {avail:?}"
        );
    })
}
