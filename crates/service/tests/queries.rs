//! Client-created queries through the HTTP API, on a testbed path with a real agent at the far
//! end and a real store file: create, list, delete; bad bodies refused with reasons; a peer
//! without an agent reports its error in the query's status; an event query notifies over SSE;
//! its budget holds at the bottleneck's counters; queries survive a reload and a restart.

mod common;

use mgrp_service::config::ServiceConfig;
use mgrp_service::http::Http;
use mgrp_service::queries::spec::MAX_PER_CLIENT;
use mgrp_service::Service;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, TruthSampler};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

fn call(base: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let a = agent();
    let url = format!("{base}{path}");
    let mut resp = match (method, body) {
        ("POST", Some(b)) => a
            .post(&url)
            .header("Content-Type", "application/json")
            .send(b)
            .unwrap(),
        ("DELETE", _) => a.delete(&url).call().unwrap(),
        _ => a.get(&url).call().unwrap(),
    };
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Poll a query's status until `done` says so (at most `secs`); the last status.
fn wait_for(base: &str, id: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let (code, v) = call(base, "GET", &format!("/v1/queries/{id}"), None);
        assert_eq!(code, 200, "{v}");
        if done(&v) || t0.elapsed() > Duration::from_secs(secs) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The first `query` event on `/v1/events?query=ID` within `secs`.
fn first_event(base: &str, id: &str, secs: u64) -> Option<Value> {
    let a: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(secs)))
        .build()
        .into();
    let resp = a.get(&format!("{base}/v1/events?query={id}")).call().ok()?;
    let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
    let mut kind = String::new();
    while let Some(Ok(line)) = lines.next() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = k.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data:") {
            if kind == "query" {
                return serde_json::from_str(d.trim()).ok();
            }
        }
    }
    None
}

fn post(base: &str, body: &str) -> (u16, Value) {
    call(base, "POST", "/v1/queries", Some(body))
}

#[test]
fn queries_are_created_run_watched_bounded_kept_and_deleted() {
    mgrp_testbed::stolen::unless_stolen(
        "queries_are_created_run_watched_bounded_kept_and_deleted",
        |_| {
            let tb = common::testbed_at(20_000_000);
            let (_agent, key) = common::agent_at_rcv(&tb);
            let peer = Role::Rcv.addr().to_string();
            let dir = std::env::temp_dir().join(format!("mgrp-queries-{}", std::process::id()));
            // A failed attempt's files must not meet the next one.
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let db = dir.join("estimates.db");
            let cfg = ServiceConfig::parse(&format!("store = \"{}\"", db.display())).unwrap();
            let sampler = TruthSampler::start(&tb, Duration::from_millis(100)).unwrap();
            let budget = 300.0 * 1024.0;
            let (window, ev, event_view) = spawn_in(&tb.ns(Role::Snd), "service", move || {
        let svc = Service::start(&cfg, key.clone()).unwrap();
        let http = Http::start("127.0.0.1:0".parse().unwrap(), svc.hub()).unwrap();
        let base = format!("http://{}", http.local_addr());

        // Bad bodies: 4xx with a reason.
        for (body, code, why) in [
            ("{", 400, "body"),
            (r#"{"peer":"PEER","mode":"event","every":"1s","below":"-5mbit"}"#, 400, "below"),
            (r#"{"peer":"PEER","budget":-1}"#, 400, "positive"),
            (r#"{"peer":"PEER","metric":"goodput"}"#, 400, "unknown metric"),
            (r#"{"peer":"PEER","mode":"periodic","every":"1ms"}"#, 400, "out of range"),
            (r#"{"peer":"PEER","mode":"periodic","every":"48h"}"#, 400, "out of range"),
            (r#"{"peer":"0.0.0.0"}"#, 400, "cannot be reached"),
            // No route from snd at all (it has no IPv6 route): refused at once.
            (r#"{"peer":"[2001:db8::1]:7240"}"#, 422, "unreachable"),
        ] {
            let (c, v) = post(&base, &body.replace("PEER", &peer));
            assert_eq!(c, code, "{body}: {v}");
            let e = v["error"].as_str().unwrap_or_default();
            assert!(e.contains(why), "{body}: {e}");
        }

        // On demand: measured once, the status holds the result.
        let (c, v) = post(&base, &format!(r#"{{"peer":"{peer}","method":"chirp"}}"#));
        assert_eq!(c, 201, "{v}");
        let once = v["id"].as_str().unwrap().to_string();
        let v = wait_for(&base, &once, 30, |v| v["status"] == "done");
        assert_eq!(v["status"], "done", "{v}");
        let a = v["result"]["value"].as_f64().unwrap();
        assert!(a > 0.0 && a < 40e6, "an A estimate on a 20 Mbit/s path: {v}");
        // The queried peer answers /v1/estimate and its jitter is stored beside A.
        let (c, v) = call(&base, "GET", &format!("/v1/estimate?peer={peer}"), None);
        assert_eq!(c, 200, "{v}");
        let (c, v) = call(&base, "GET", &format!("/v1/records?peer={peer}&metric=jitter"), None);
        assert_eq!(c, 200, "{v}");
        let j = &v[0];
        assert!(j["value"].as_f64().unwrap() >= 0.0 && j["method"] == "ipdv", "{j}");

        // A peer behind the default route that the router cannot reach: accepted (this host
        // cannot know), and the status says what failed.
        let (c, v) = post(&base, r#"{"peer":"192.0.2.77","method":"chirp"}"#);
        assert_eq!(c, 201, "{v}");
        let lost = v["id"].as_str().unwrap().to_string();
        let v = wait_for(&base, &lost, 15, |v| v["status"] == "failing");
        assert_eq!(v["status"], "failing", "{v}");
        assert!(v["last_error"].as_str().unwrap_or_default().contains("unreachable"), "{v}");
        assert_eq!(call(&base, "DELETE", &format!("/v1/queries/{lost}"), None).0, 200);

        // A peer with a route but no agent: accepted, and its status says what failed.
        let (c, v) = post(
            &base,
            &format!(r#"{{"peer":"{peer}:1","mode":"periodic","every":"1s","budget":"10kb"}}"#),
        );
        assert_eq!(c, 201, "{v}");
        let dead = v["id"].as_str().unwrap().to_string();
        let v = wait_for(&base, &dead, 15, |v| v["status"] == "failing");
        assert_eq!(v["status"], "failing", "{v}");
        assert!(!v["last_error"].as_str().unwrap_or_default().is_empty(), "{v}");

        // Event-driven, threshold above the path's A: it fires.
        let t0 = mgrp_testbed::clock::now_ns();
        let (c, v) = post(
            &base,
            &format!(
                r#"{{"peer":"{peer}","mode":"event","method":"chirp","every":"1s","below":"1gbit","budget":"300kb"}}"#
            ),
        );
        assert_eq!(c, 201, "{v}");
        let watched = v["id"].as_str().unwrap().to_string();
        let ev = first_event(&base, &watched, 20);
        // Let the budget bind: 300 KiB a minute runs out within seconds at one chirp a second.
        std::thread::sleep(Duration::from_secs(6));
        let event_view = wait_for(&base, &watched, 0, |_| true);
        let (c, _) = call(&base, "DELETE", &format!("/v1/queries/{watched}"), None);
        assert_eq!(c, 200);
        let t1 = mgrp_testbed::clock::now_ns();
        // Put it back for the restart below (a fresh id).
        let (c, v) = post(
            &base,
            &format!(r#"{{"peer":"{peer}","mode":"event","method":"chirp","every":"60s","below":"1gbit","budget":"300kb"}}"#),
        );
        assert_eq!(c, 201, "{v}");
        let kept_event = v["id"].as_str().unwrap().to_string();

        // List and delete.
        let (_, v) = call(&base, "GET", "/v1/queries", None);
        let ids: Vec<&str> = v.as_array().unwrap().iter().map(|q| q["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [once.as_str(), dead.as_str(), kept_event.as_str()], "{v}");
        assert_eq!(call(&base, "DELETE", &format!("/v1/queries/{dead}"), None).0, 200);
        assert_eq!(call(&base, "GET", &format!("/v1/queries/{dead}"), None).0, 404);
        assert_eq!(call(&base, "DELETE", &format!("/v1/queries/{dead}"), None).0, 404);
        let (_, m) = call(&base, "GET", "/metrics", None);
        let m = m.as_str().unwrap_or_default().to_string();
        assert!(m.contains("mgrp_queries 2"), "{m}");
        assert!(m.contains(&format!("query=\"{kept_event}\"")), "{m}");
        assert!(m.contains("metric=\"jitter\""), "{m}");

        // One client cannot take every slot.
        let mut made = 2;
        let mut refused = None;
        for _ in 0..MAX_PER_CLIENT {
            let (c, v) = post(
                &base,
                &format!(r#"{{"peer":"{peer}:1","mode":"periodic","every":"24h","budget":"10kb"}}"#),
            );
            if c == 201 {
                made += 1;
            } else {
                refused = Some((c, v));
                break;
            }
        }
        assert_eq!(made, MAX_PER_CLIENT, "{refused:?}");
        let (c, v) = refused.unwrap();
        assert_eq!(c, 429, "{v}");
        assert!(v["error"].as_str().unwrap().contains("the most one client may"), "{v}");

        // A reload (SIGHUP) keeps them; a restart on the same store file brings them back.
        let mut svc = svc;
        svc.reload(&cfg).unwrap();
        assert_eq!(svc.hub().queries.len(), MAX_PER_CLIENT);
        drop(http);
        svc.stop();
        let svc = Service::start(&cfg, key).unwrap();
        let http = Http::start("127.0.0.1:0".parse().unwrap(), svc.hub()).unwrap();
        let base = format!("http://{}", http.local_addr());
        let (_, v) = call(&base, "GET", "/v1/queries", None);
        let after: Vec<String> = v.as_array().unwrap().iter().map(|q| q["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(after.len(), MAX_PER_CLIENT, "{v}");
        assert_eq!(after[0], once);
        assert_eq!(after[1], kept_event);
        let v = wait_for(&base, &kept_event, 0, |_| true);
        assert_eq!(v["below"], 1e9, "{v}");
        drop(http);
        svc.stop();
        Ok(((t0, t1), ev, event_view))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
            let _ = std::fs::remove_dir_all(&dir);

            // The notification: A (≤ 20 Mbit/s) is below 1 Gbit/s from the first estimate.
            let ev = ev.expect("no query event within 20 s");
            assert_eq!(
                (ev["kind"].as_str(), ev["condition"].as_str()),
                (Some("query"), Some("below")),
                "{ev}"
            );
            assert_eq!(ev["holds"], true);
            assert!(ev["value"].as_f64().unwrap() < 1e9, "{ev}");

            // The budget held at the bottleneck: what snd offered it over the event query's life is
            // within 300 KiB (plus Ethernet/IP/UDP headers, ≤ 5% on 1000+ byte probes, and control
            // frames), as for configured schedules (tests/schedule.rs).
            let truth = sampler.stop().unwrap();
            let w = truth.window(window.0, window.1).unwrap();
            let bytes = w.offered_fg_bps * (w.end_s - w.start_s) / 8.0;
            let c = &event_view["counters"];
            assert!(c["probe_bytes"].as_f64().unwrap() <= budget, "{event_view}");
            assert!(
                c["cut_by_budget"].as_u64().unwrap() + c["skipped_for_budget"].as_u64().unwrap()
                    >= 1,
                "the budget never bound: {event_view}"
            );
            assert!(
                bytes <= budget * 1.05 + 30_000.0,
                "{bytes} bytes at the bottleneck: {event_view}"
            );
            assert_eq!(event_view["status"], "budget_exhausted", "{event_view}");
        },
    )
}
