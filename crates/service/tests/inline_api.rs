//! End to end: an agent with `[inline]` on, a kernel TCP flow through it under CBR cross
//! traffic; its inline estimates reach the store and from there the API (`/v1/paths`,
//! `/v1/estimate`), the SSE stream (`/v1/events`) and `/metrics`.

mod common;

use mgrp_service::config::ServiceConfig;
use mgrp_service::http::Http;
use mgrp_service::Service;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::Role;
use mgrp_traffic::CrossPattern;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PORT: u16 = 6551;

fn get(base: &str, path: &str) -> (u16, String) {
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut r = a.get(&format!("{base}{path}")).call().unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

/// The first `estimate` event on `/v1/events?path=P` whose record came from `source`, within
/// `secs`.
fn first_event_from(base: &str, path: &str, source: &str, secs: u64) -> Option<Value> {
    let a: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(secs)))
        .build()
        .into();
    let resp = a
        .get(&format!("{base}/v1/events?path={path}"))
        .call()
        .ok()?;
    let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
    let mut kind = String::new();
    while let Some(Ok(line)) = lines.next() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = k.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data:") {
            let v: Value = serde_json::from_str(d.trim()).ok()?;
            if kind == "estimate" && v["record"]["source"] == source {
                return Some(v);
            }
        }
    }
    None
}

#[test]
fn inline_estimates_reach_the_api_sse_and_metrics() {
    mgrp_testbed::stolen::unless_stolen("inline_estimates_reach_the_api_sse_and_metrics", |_| {
        let tb = common::testbed_at(50_000_000);
        let cross = CrossPattern::parse("cbr:20mbit,size=1000").unwrap();
        let opts = GenOptions {
            max_duration: Duration::from_secs(60),
            ..GenOptions::default()
        };
        let _cross = CrossTraffic::start(&tb, &cross, BASE_PORT, &opts).unwrap();
        let sink = spawn_in(&tb.ns(Role::Rcv), "sink", || {
            let l = TcpListener::bind(("0.0.0.0", PORT)).unwrap();
            let (mut c, _) = l.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            Ok(())
        })
        .unwrap();
        let cfg = ServiceConfig::parse(&format!(
        "store = \":memory:\"\nhttp = \"off\"\n[inline]\nopt_in = [\"tcp:{PORT}\"]\naccess = \"60mbit\"\n"
    ))
    .unwrap();
        let key = mgrp_engine::auth::Key::random();
        let path = format!("{}->{}", Role::Snd.addr(), Role::Rcv.addr());
        let p = path.replace('>', "%3E");
        let (paths, estimate, event, metrics, engine) =
            spawn_in(&tb.ns(Role::Snd), "agent", move || {
                let svc = Service::start(&cfg, key).unwrap();
                let http = Http::start("127.0.0.1:0".parse().unwrap(), svc.hub()).unwrap();
                let base = format!("http://{}", http.local_addr());
                // The flow: app-limited at 10 Mbit/s for at most 40 s, in its own thread.
                let flow = std::thread::spawn(|| {
                    let mut c = TcpStream::connect((Role::Rcv.addr(), PORT)).unwrap();
                    let chunk = vec![0x5au8; 12_500];
                    let t0 = Instant::now();
                    for i in 0..3200u32 {
                        let due = Duration::from_micros(10_000 * u64::from(i));
                        if let Some(d) = due.checked_sub(t0.elapsed()) {
                            std::thread::sleep(d);
                        }
                        if c.write_all(&chunk).is_err() || t0.elapsed() > Duration::from_secs(40) {
                            break;
                        }
                    }
                });
                // Until the path has an inline estimate (at most 20 s).
                let t0 = Instant::now();
                let mut estimate = (0, String::new());
                while t0.elapsed() < Duration::from_secs(20) {
                    estimate = get(&base, &format!("/v1/estimate?path={p}"));
                    if estimate.0 == 200 && estimate.1.contains("\"inline\"") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                let paths = get(&base, "/v1/paths").1;
                // SSE: the next inline estimate of the path, pushed as it is stored.
                let event = first_event_from(&base, &p, "inline", 15);
                let metrics = get(&base, "/metrics").1;
                // What the engine saw, for a failure's message: once (a CI rehearsal) no flow reached
                // the store and the flow's data stalled; this says where.
                let engine = svc.inline().map(|e| {
                    let flows: Vec<String> = e
                        .flows()
                        .iter()
                        .map(|f| format!("{:?} estimate={}", f.flow, f.estimate.is_some()))
                        .collect();
                    format!(
                        "failure {:?}; {:?}; flows {flows:?}",
                        e.failure(),
                        e.counters()
                    )
                });
                let _ = flow.join();
                drop(http);
                svc.stop();
                Ok((paths, estimate, event, metrics, engine))
            })
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        let _ = sink.join();
        eprintln!("paths {paths}\nestimate {estimate:?}\nevent {event:?}\nengine {engine:?}");
        // /v1/paths lists the path and the connection (LOCAL:PORT->REMOTE:PORT).
        let paths: Value = serde_json::from_str(&paths).unwrap();
        let names: Vec<&str> = paths
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["path"].as_str())
            .collect();
        assert!(names.contains(&path.as_str()), "{names:?}");
        assert!(
            names
                .iter()
                .any(|n| n.ends_with(&format!("->{}:{PORT}", Role::Rcv.addr()))),
            "{names:?}"
        );
        // /v1/estimate: source inline, method imtcp, no probe bytes, a value on this 50 Mbit/s path.
        assert_eq!(estimate.0, 200, "{estimate:?}");
        let e: Value = serde_json::from_str(&estimate.1).unwrap();
        assert_eq!(
            (e["source"].as_str(), e["method"].as_str()),
            (Some("inline"), Some("imtcp")),
            "{e}"
        );
        assert_eq!(e["probe_bytes"], 0, "{e}");
        let v = e["value"].as_f64().unwrap();
        assert!(v > 0.0 && v <= 60e6, "{e}");
        // SSE pushed an inline estimate of the path.
        let ev = event.expect("an inline estimate on /v1/events within 15 s");
        assert_eq!(ev["record"]["method"], "imtcp", "{ev}");
        // /metrics: the engine's counters, measurements among them.
        let measured = metrics
            .lines()
            .find(|l| l.contains("inline_total{counter=\"measurements\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok());
        assert!(
            measured.is_some_and(|m| m >= 1.0),
            "no measurements counter in /metrics: {}",
            metrics
                .lines()
                .filter(|l| l.contains("inline"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    })
}
