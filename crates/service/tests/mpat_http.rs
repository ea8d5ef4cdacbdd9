//! `/v1/mpat` in-process, over a kernel double that keeps the maps as `MpatControls` does:
//! create, list with rates, reweight, delete, metrics, and every refusal with its status.

use mgrp_control::{AggregateStats, MemberRule, MemberStats};
use mgrp_service::http::Http;
use mgrp_service::mpat::{Book, MpatKernel, MpatState};
use mgrp_service::Hub;
use mgrp_store::{EstimateStore, Record, Store};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A rule's (destination, port).
type Key = (Option<std::net::IpAddr>, Option<u16>);

#[derive(Default)]
struct Maps {
    aggs: BTreeMap<u32, ()>,
    /// Rule → (aggregate, weight, acked bytes).
    rules: BTreeMap<Key, (u32, u32, u64)>,
}

/// The kernel's bookkeeping, without the kernel: the test moves `acked_bytes` itself.
#[derive(Clone, Default)]
struct FakeKernel(Arc<Mutex<Maps>>);

fn bad(s: String) -> mgrp_control::Error {
    mgrp_control::Error::BadInput(s)
}

impl MpatKernel for FakeKernel {
    fn create_aggregate(&self) -> Result<u32, mgrp_control::Error> {
        let mut m = self.0.lock().unwrap();
        let id = (0..64)
            .find(|i| !m.aggs.contains_key(i))
            .ok_or(bad("full".into()))?;
        m.aggs.insert(id, ());
        Ok(id)
    }
    fn remove_aggregate(&self, id: u32) -> Result<(), mgrp_control::Error> {
        let mut m = self.0.lock().unwrap();
        m.aggs
            .remove(&id)
            .ok_or(bad(format!("no aggregate {id}")))?;
        m.rules.retain(|_, r| r.0 != id);
        Ok(())
    }
    fn add_member(&self, agg: u32, r: MemberRule, w: u32) -> Result<(), mgrp_control::Error> {
        let mut m = self.0.lock().unwrap();
        if m.rules.contains_key(&(r.dst, r.port)) {
            return Err(bad("already a member".into()));
        }
        m.rules.insert((r.dst, r.port), (agg, w, 0));
        Ok(())
    }
    fn set_weight(&self, r: MemberRule, w: u32) -> Result<(), mgrp_control::Error> {
        let mut m = self.0.lock().unwrap();
        let e = m
            .rules
            .get_mut(&(r.dst, r.port))
            .ok_or(bad("no rule".into()))?;
        e.1 = w;
        Ok(())
    }
    fn aggregate_stats(&self, id: u32) -> Result<AggregateStats, mgrp_control::Error> {
        Ok(AggregateStats {
            id,
            windows: 0,
            weight_sum: 0,
            cwnd_pkts: 0.0,
            window_cwnd_pkts: Vec::new(),
            acks: 0,
            losses: 0,
            halvings: 0,
            flows_opened: 0,
            flows_closed: 0,
            refused: 0,
        })
    }
    fn member_stats(&self) -> Result<Vec<MemberStats>, mgrp_control::Error> {
        let m = self.0.lock().unwrap();
        Ok(m.rules
            .iter()
            .map(|(&(dst, port), &(agg, w, acked))| MemberStats {
                rule: MemberRule { dst, port },
                aggregate: agg,
                weight: w,
                flows: 1,
                acked_bytes: acked,
            })
            .collect())
    }
}

fn rec(path: &str, metric: &str, value: f64) -> Record {
    Record {
        path: path.into(),
        metric: metric.into(),
        t_ns: 1_795_000_020_000_000_000,
        value,
        low: value,
        high: value,
        method: "test".into(),
        source: "active".into(),
        probe_bytes: 0,
        trains: 1,
        confidence: 1.0,
        elapsed_s: 1.0,
        final_: true,
        timescale_ms: None,
    }
}

/// A hub whose store knows two destinations with different paths (90 vs 20 Mbit/s).
fn agent(kernel: Option<FakeKernel>) -> (Http, Arc<Hub>) {
    let mut s = Store::in_memory(Duration::from_secs(86_400)).unwrap();
    s.insert(&[
        rec("10.0.0.1->10.0.1.2", "capacity", 90e6),
        rec("10.0.0.1->10.0.1.2", "rtt", 0.050),
        rec("10.0.0.1->10.0.2.2", "capacity", 20e6),
        rec("10.0.0.1->10.0.2.2", "rtt", 0.051),
    ])
    .unwrap();
    let hub = Hub::new(Box::new(s), None);
    if let Some(k) = kernel {
        hub.set_mpat(Some(Arc::new(MpatState::new(Book::new(Box::new(k))))));
    }
    (
        Http::start("127.0.0.1:0".parse().unwrap(), hub.clone()).unwrap(),
        hub,
    )
}

fn call(http: &Http, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let url = format!("http://{}{path}", http.local_addr());
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

const VIDEO: &str = r#"{"name": "video", "members": [
    {"dst": "10.0.1.2", "port": 5001, "weight": 1},
    {"dst": "10.0.1.2", "port": 5002, "weight": 3}]}"#;

#[test]
fn create_list_reweight_delete() {
    let k = FakeKernel::default();
    let (http, hub) = agent(Some(k.clone()));
    let (s, v) = call(&http, "POST", "/v1/mpat", Some(VIDEO));
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        v["warnings"].as_array().unwrap().len(),
        0,
        "one destination: {v}"
    );
    // Two samples ≥ 250 ms apart make a rate: 1 MB in between on the first rule.
    let (s, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!(s, 200, "{v}");
    assert!(
        v["aggregates"][0]["members"][0]["rate_bps"].is_null(),
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(300));
    for r in k.0.lock().unwrap().rules.values_mut() {
        r.2 += 1_000_000;
    }
    let (_, v) = call(&http, "GET", "/v1/mpat", None);
    let a = &v["aggregates"][0];
    assert_eq!(a["name"], "video");
    assert_eq!(a["members"][1]["share"], 0.75, "{v}");
    let r = a["members"][0]["rate_bps"].as_f64().unwrap();
    // 8 Mbit over at least 0.3 s of wall time (and at most the test's own few seconds).
    assert!(r > 0.5e6 && r < 8e6 / 0.3 * 1.001, "rate {r}");
    assert!(a["rate_bps"].as_f64().unwrap() > r, "{v}");

    let (s, v) = call(
        &http,
        "PUT",
        "/v1/mpat/video",
        Some(r#"{"members": [{"dst": "10.0.1.2", "port": 5001, "weight": 5}]}"#),
    );
    assert_eq!(s, 200, "{v}");
    let w = k.0.lock().unwrap().rules[&(Some("10.0.1.2".parse().unwrap()), Some(5001))].1;
    assert_eq!(w, 5, "the kernel's rule was rewritten");
    let (_, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!(v["aggregates"][0]["members"][0]["weight"], 5);

    let text = mgrp_service::metrics::render(&hub, 0).unwrap();
    assert!(
        text.contains(
            "mgrp_mpat_member_weight{aggregate=\"video\",dst=\"10.0.1.2\",port=\"5001\"} 5.0"
        ),
        "{text}"
    );
    assert!(text.contains("mgrp_mpat_available 1"), "{text}");

    let (s, v) = call(&http, "DELETE", "/v1/mpat/video", None);
    assert_eq!(s, 200, "{v}");
    assert!(k.0.lock().unwrap().rules.is_empty() && k.0.lock().unwrap().aggs.is_empty());
    let (_, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!(v["aggregates"].as_array().unwrap().len(), 0);
}

#[test]
fn refusals_say_why() {
    let k = FakeKernel::default();
    let (http, _hub) = agent(Some(k.clone()));
    assert_eq!(call(&http, "POST", "/v1/mpat", Some(VIDEO)).0, 201);
    let cases: &[(&str, &str, Option<&str>, u16, &str)] = &[
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"port": 1, "weight": 0}]}"#),
            400,
            "must be a whole number 1..=1000000, got 0",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"port": 1, "weight": -2}]}"#),
            400,
            "got -2",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"port": 1, "weight": 1.5}]}"#),
            400,
            "got 1.5",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"port": 1, "weight": 1e9}]}"#),
            400,
            "1..=1000000",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"weight": 1}]}"#),
            400,
            "needs a destination (dst) or a port",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": []}"#),
            400,
            "needs 1..=16 members",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a b", "members": [{"port": 1, "weight": 1}]}"#),
            400,
            "aggregate name",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(
                r#"{"name": "a", "members": [{"port": 1, "weight": 1}, {"port": 1, "weight": 2}]}"#,
            ),
            400,
            "port 1 is named twice",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"dst": "10.0.1.2", "port": 5002, "weight": 1}]}"#),
            409,
            "already in aggregate \"video\"",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(VIDEO),
            409,
            "aggregate \"video\" exists",
        ),
        (
            "POST",
            "/v1/mpat",
            Some(r#"{"name": "a", "members": [{"port": 1, "weight": 1, "colour": 2}]}"#),
            400,
            "unknown field `colour`",
        ),
        ("POST", "/v1/mpat", Some("not json"), 400, "body:"),
        (
            "PUT",
            "/v1/mpat/nope",
            Some(r#"{"members": [{"port": 1, "weight": 1}]}"#),
            404,
            "no aggregate \"nope\"",
        ),
        (
            "PUT",
            "/v1/mpat/video",
            Some(r#"{"members": [{"port": 9, "weight": 1}]}"#),
            400,
            "port 9 is not a member of \"video\"",
        ),
        (
            "PUT",
            "/v1/mpat/video",
            Some(r#"{"members": [{"dst": "10.0.1.2", "port": 5001, "weight": 0}]}"#),
            400,
            "got 0",
        ),
        (
            "DELETE",
            "/v1/mpat/nope",
            None,
            404,
            "no aggregate \"nope\"",
        ),
    ];
    for &(m, p, b, want, why) in cases {
        let (s, v) = call(&http, m, p, b);
        assert_eq!(s, want, "{m} {p} {b:?}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(why), "{m} {p} {b:?}: {e:?} lacks {why:?}");
    }
    // Nothing refused reached the kernel.
    assert_eq!(k.0.lock().unwrap().rules.len(), 2);
    assert_eq!(
        k.0.lock()
            .unwrap()
            .rules
            .values()
            .map(|r| r.1)
            .collect::<Vec<_>>(),
        [1, 3]
    );
}

#[test]
fn not_configured_and_unavailable() {
    let (http, hub) = agent(None);
    let (s, v) = call(&http, "POST", "/v1/mpat", Some(VIDEO));
    assert_eq!(s, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("add [mpat]"), "{v}");
    let (s, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!((s, v["configured"].as_bool()), (200, Some(false)), "{v}");
    hub.set_mpat(Some(Arc::new(MpatState::unavailable(
        "no BPF in this build".into(),
    ))));
    let (s, v) = call(&http, "POST", "/v1/mpat", Some(VIDEO));
    assert_eq!(s, 503, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("MPAT unavailable: no BPF"),
        "{v}"
    );
    let (_, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!(v["available"], false, "{v}");
    assert_eq!(v["unavailable_reason"], "no BPF in this build", "{v}");
}

#[test]
fn warns_when_destinations_have_different_paths() {
    let (http, _hub) = agent(Some(FakeKernel::default()));
    let (s, v) = call(
        &http,
        "POST",
        "/v1/mpat",
        Some(
            r#"{"name": "two", "members": [
        {"dst": "10.0.1.2", "weight": 1}, {"dst": "10.0.2.2", "weight": 2}, {"port": 7, "weight": 1}]}"#,
        ),
    );
    assert_eq!(s, 201, "{v}");
    let w: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w.iter().any(|w| w.contains("port 7 names no destination")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("paths differ (capacity 90.0 vs 20.0 Mbit/s)")),
        "{w:?}"
    );
    // Destinations mgrp knows nothing about: assumed, not checked.
    let (_, v) = call(
        &http,
        "POST",
        "/v1/mpat",
        Some(
            r#"{"name": "far", "members": [
        {"dst": "10.0.1.2", "port": 80, "weight": 1}, {"dst": "10.9.9.9", "weight": 1}]}"#,
        ),
    );
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .contains("no estimates of 10.9.9.9"),
        "{v}"
    );
    let (_, v) = call(&http, "GET", "/v1/mpat", None);
    assert_eq!(v["aggregates"].as_array().unwrap().len(), 2, "{v}");
}
