//! The HTTP API as a client sees it: answers, 4xx with reasons, and the token off localhost.

use mgrp_service::http::Http;
use mgrp_service::Hub;
use mgrp_store::{EstimateStore, Record, Store};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
use std::sync::Arc;
use std::time::Duration;

fn hub(token: Option<&str>) -> Arc<Hub> {
    let mut s = Store::in_memory(Duration::from_secs(86_400)).unwrap();
    let t0 = 1_795_000_020_000_000_000u64;
    let recs: Vec<Record> = (0..120)
        .map(|i| Record {
            path: "198.18.1.2->198.18.3.2".into(),
            metric: "avail_bw".into(),
            t_ns: t0 + i * 1_000_000_000,
            value: 10e6 + i as f64,
            low: 9e6,
            high: 11e6,
            method: "auto:slops".into(),
            source: "active".into(),
            probe_bytes: 1000,
            trains: 4,
            confidence: 1.0,
            elapsed_s: 0.5,
            final_: true,
            timescale_ms: None,
        })
        .collect();
    s.insert(&recs).unwrap();
    Hub::new(Box::new(s), token.map(Into::into))
}

fn get(base: &str, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut req = agent.get(&format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().unwrap();
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
    )
}

/// A GET with this `Authorization` header, verbatim.
fn get_with(base: &str, path: &str, authorization: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut resp = agent
        .get(&format!("{base}{path}"))
        .header("Authorization", authorization)
        .call()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
    )
}

#[test]
fn answers_and_refusals_on_localhost() {
    let http = Http::start("127.0.0.1:0".parse().unwrap(), hub(None)).unwrap();
    let base = format!("http://{}", http.local_addr());
    let p = "path=198.18.1.2-%3E198.18.3.2";
    let (s, v) = get(&base, "/v1/paths", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v[0]["path"], "198.18.1.2->198.18.3.2");
    let (s, v) = get(&base, &format!("/v1/estimate?{p}"), None);
    assert_eq!((s, v["value"].as_f64()), (200, Some(10e6 + 119.0)), "{v}");
    let end = 1_795_000_020_000_000_000u64 + 120_000_000_000;
    let (s, v) = get(
        &base,
        &format!("/v1/history?{p}&step=60s&count=2&end_ns={end}"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["source"], "agg_60s");
    assert_eq!(v["points"].as_array().unwrap().len(), 2);
    assert_eq!(v["points"][0]["n"], 60);
    let (s, v) = get(
        &base,
        &format!("/v1/records?{p}&from_ns=0&to_ns={end}&limit=5"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v.as_array().unwrap().len(), 5);
    assert_eq!(v[0]["final"], true);
    let (s, v) = get(&base, "/v1/schedules", None);
    assert_eq!((s, v), (200, serde_json::json!([])));
    // The metrics carry the newest estimate with its quality.
    let (s, v) = get(&base, "/metrics", None);
    let text = v.as_str().unwrap_or_default().to_string();
    assert_eq!(s, 200);
    assert!(
        text.contains(
            "mgrp_estimate{path=\"198.18.1.2->198.18.3.2\",metric=\"avail_bw\"} 10000119.0"
        ),
        "{text}"
    );
    assert!(text.contains("mgrp_estimate_method{"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let (s, v) = get(&base, "/v1/openapi.yaml", None);
    assert!(s == 200 && v.as_str().unwrap().contains("/v1/events"));
    for (url, status, why) in [
        ("/v1/estimate?path=nowhere", 404, "no avail_bw estimates"),
        ("/v1/history?path=nowhere", 404, "no avail_bw estimates"),
        ("/v1/estimate", 400, "missing parameter `path`"),
        (
            &format!("/v1/estimate?{p}&peer=1.2.3.4") as &str,
            400,
            "not both",
        ),
        ("/v1/estimate?peer=1.2.3.4", 404, "no schedule for peer"),
        (
            &format!("/v1/estimate?{p}&metric=colour"),
            400,
            "unknown metric",
        ),
        (&format!("/v1/estimate?{p}&max_age=soon"), 400, "max_age"),
        (&format!("/v1/estimate?{p}&max_age=1s&wait=1h"), 400, "wait"),
        // Stale and not scheduled here: nothing can measure it now.
        (
            &format!("/v1/estimate?{p}&max_age=1s"),
            409,
            "cannot measure it now",
        ),
        (&format!("/v1/records?{p}&limit=0"), 400, "limit"),
        (&format!("/v1/records?{p}&from_ns=5&to_ns=4"), 400, "after"),
        ("/v1/records?path=nowhere", 404, "no avail_bw estimates"),
        (&format!("/v1/events?{p}&below=lots"), 400, "below"),
        (&format!("/v1/events?{p}&fall_pct=150"), 400, "never"),
        (&format!("/v1/events?{p}&rise_pct=-5"), 400, "rise_pct"),
        ("/v1/events?path=nowhere", 404, "no avail_bw estimates"),
        (&format!("/v1/history?{p}&step=1.5s") as &str, 400, "step"),
        (&format!("/v1/history?{p}&count=lots"), 400, "count"),
        (&format!("/v1/history?{p}&count=0"), 400, "count"),
        (&format!("/v1/history?{p}&end_ns=-1"), 400, "end_ns"),
        ("/v2/everything", 404, "no such endpoint"),
        // Misspelt or repeated parameters are refused, not ignored.
        (
            &format!("/v1/estimate?{p}&maxage=0s"),
            400,
            "unknown parameter `maxage`",
        ),
        (
            &format!("/v1/estimate?{p}&metric=rtt&metric=loss"),
            400,
            "parameter `metric` given more than once",
        ),
        (
            &format!("/v1/history?{p}&stpe=60s"),
            400,
            "unknown parameter `stpe`",
        ),
        (
            &format!("/v1/records?{p}&limt=5"),
            400,
            "unknown parameter `limt`",
        ),
        (
            &format!("/v1/events?{p}&belw=5"),
            400,
            "unknown parameter `belw`",
        ),
        (
            &format!("/v1/paths?x={}", "a".repeat(9000)),
            414,
            "longer than 8192 bytes",
        ),
    ] {
        let (s, v) = get(&base, url, None);
        assert_eq!(s, status, "{url}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(why),
            "{url}: {v}"
        );
    }
    // The token travels unseen by the endpoint's own parameters.
    let (s, v) = get(&base, &format!("/v1/estimate?{p}&access_token=x"), None);
    assert_eq!(s, 200, "{v}");
    // Other methods: JSON too.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent.post(&format!("{base}/v1/paths")).send("x").unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let v: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    assert!(v["error"].as_str().unwrap().contains("GET only"), "{v}");
}

#[test]
fn off_localhost_needs_the_token() {
    let tb = Testbed::up(TestbedConfig::default(), DelayMode::Thread).unwrap();
    let listen: std::net::SocketAddr = format!("{}:0", Role::Rcv.addr()).parse().unwrap();
    let (with_token, without) = spawn_in(&tb.ns(Role::Rcv), "http", move || {
        Ok((
            Http::start(listen, hub(Some("s3cret+/=tok"))).unwrap(),
            Http::start(listen, hub(None)).unwrap(),
        ))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let (a, b) = (with_token.local_addr(), without.local_addr());
    let results = spawn_in(&tb.ns(Role::Snd), "client", move || {
        let base = format!("http://{a}");
        let token = "s3cret+/=tok";
        Ok([
            get(&base, "/v1/paths", None),
            get(&base, "/v1/paths", Some("guess")),
            get(&base, "/v1/paths", Some(token)),
            get(&format!("http://{b}"), "/v1/paths", Some(token)),
            // EventSource cannot send headers: the token as a query parameter, encoded as
            // the dashboard encodes it (URLSearchParams).
            get(&base, "/v1/paths?access_token=s3cret%2B%2F%3Dtok", None),
            get(&base, "/v1/paths?access_token=guess", None),
            // The page and the spec carry no data.
            get(&base, "/v1/openapi.yaml", None),
            get(&base, "/metrics", None),
            // The scheme is case-insensitive.
            get_with(&base, "/v1/paths", &format!("bearer {token}")),
            get_with(&base, "/v1/paths", &format!("BEARER {token}")),
            get_with(&base, "/v1/paths", "bearer guess"),
            // Typed by hand, unencoded: `+` is the token's, not a space.
            get(&base, "/v1/paths?access_token=s3cret+/=tok", None),
        ])
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(results[0].0, 401, "{:?}", results[0]);
    assert_eq!(results[1].0, 401, "{:?}", results[1]);
    assert_eq!(results[2].0, 200, "{:?}", results[2]);
    assert_eq!(results[3].0, 401);
    assert!(results[3].1["error"]
        .as_str()
        .unwrap()
        .contains("only localhost"));
    assert_eq!(results[4].0, 200, "{:?}", results[4]);
    assert_eq!(results[5].0, 401, "{:?}", results[5]);
    assert_eq!(results[6].0, 200, "{:?}", results[6]);
    assert_eq!(results[7].0, 401, "metrics are data: {:?}", results[7]);
    assert_eq!(results[8].0, 200, "{:?}", results[8]);
    assert_eq!(results[9].0, 200, "{:?}", results[9]);
    assert_eq!(results[10].0, 401, "{:?}", results[10]);
    assert_eq!(results[11].0, 200, "{:?}", results[11]);
    drop((with_token, without));
}

#[test]
fn transfer_modes_say_when_not_configured() {
    let http = Http::start("127.0.0.1:0".parse().unwrap(), hub(None)).unwrap();
    let base = format!("http://{}", http.local_addr());
    let (s, v) = get(&base, "/v1/transfer", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["configured"], &v["available"]),
        (&false.into(), &false.into())
    );
    assert!(v["reason"].as_str().unwrap().contains("[transfer]"), "{v}");
    assert_eq!(v["destinations"], serde_json::json!([]));
    let (s, v) = get(&base, "/v1/transfer?mode=bg", None);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("mode"), "{v}");
    let (_, m) = get(&base, "/metrics", None);
    assert!(!m.as_str().unwrap().contains("mgrp_transfer"), "{m}");
}
