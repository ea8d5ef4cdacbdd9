//! `mgrp trace` on the testbed's chain3 (a — r1 ═ r2 ═ r3 — b) with a delay on each forward
//! link: the routers and the far agent in order, delays that grow hop by hop near the
//! configured ones; a silent router shows `*` without hanging; a routing loop is reported.
//! Needs root (network namespaces).

use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::pacer::Pacer;
use mgrp_map::{TraceConfig, TraceReport};
use mgrp_testbed::netns::{sh_in, spawn_in};
use mgrp_testbed::topo::{self, TopoOptions, TopoTestbed};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Pacers pin to one CPU and the delay lines need the other: one topology at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// One-way delays on the forward links: r1→r2, r2→r3, r3→b (the testbed puts a link's delay
/// on its router end's egress; r1's end of a—r1 would delay the reverse path, left bare).
const D12_MS: f64 = 4.0;
const D23_MS: f64 = 6.0;
const D3B_MS: f64 = 5.0;

/// The policy-routing rule and table that silence r2 (clear of the delay lines' table 100,
/// and deleted by their full selector: a bare `ip rule del prio N` may take another rule).
const PRIO: u32 = 90;
const TABLE: u32 = 190;

fn key() -> Key {
    Key::from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f").unwrap()
}

fn chain3_delayed(tag: &str) -> TopoTestbed {
    let text = topo::source("chain3")
        .unwrap()
        .replace(
            "a = \"r1\"\nb = \"r2\"\ncapacity = \"50mbit\"",
            &format!("a = \"r1\"\nb = \"r2\"\ncapacity = \"50mbit\"\ndelay = \"{D12_MS}ms\""),
        )
        .replace(
            "a = \"r2\"\nb = \"r3\"\ncapacity = \"20mbit\"",
            &format!("a = \"r2\"\nb = \"r3\"\ncapacity = \"20mbit\"\ndelay = \"{D23_MS}ms\""),
        )
        .replace(
            "a = \"r3\"\nb = \"b\"\n",
            &format!("a = \"r3\"\nb = \"b\"\ndelay = \"{D3B_MS}ms\"\n"),
        );
    assert_eq!(text.matches("delay = ").count(), 3, "chain3 changed shape");
    TopoTestbed::up(
        &text,
        TopoOptions {
            name: Some(format!("mt{}-{tag}", std::process::id() % 100_000)),
            ..Default::default()
        },
    )
    .expect("topology up (these tests need root)")
}

/// The address of router `r` on its link toward `toward` (where probes from a come in).
fn router_addr(tb: &TopoTestbed, r: &str, toward: &str) -> IpAddr {
    let t = tb.topology();
    let (ri, ti) = (t.index(r).unwrap(), t.index(toward).unwrap());
    let l = t
        .links_of(ri)
        .into_iter()
        .find(|&l| t.peer(l, ri) == ti)
        .unwrap();
    IpAddr::V4(t.addr(l, ri))
}

fn b_addr(tb: &TopoTestbed) -> Ipv4Addr {
    let t = tb.topology();
    t.host_addr(t.index("b").unwrap())
}

fn agent_in_b(tb: &TopoTestbed) -> Agent {
    let listen = SocketAddr::from((b_addr(tb), 7240));
    spawn_in(&tb.ns_of("b").unwrap(), "agent", move || {
        Ok(Agent::start(AgentConfig::new(listen, key())).expect("agent starts"))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

/// Trace from a to the agent on b; the report and how long it took.
fn trace_from_a(tb: &TopoTestbed, cfg: TraceConfig) -> (TraceReport, Duration) {
    trace_from_a_then(tb, cfg, |_| {})
}

/// The same, running `before` once the session is up (to break the path under it).
fn trace_from_a_then(
    tb: &TopoTestbed,
    cfg: TraceConfig,
    before: impl FnOnce(&Session) + Send + 'static,
) -> (TraceReport, Duration) {
    let peer = SocketAddr::from((b_addr(tb), 7240));
    spawn_in(&tb.ns_of("a").unwrap(), "trace", move || {
        let pacer = Arc::new(Pacer::spawn().unwrap());
        let mut s = Session::connect(peer, &key(), pacer, Duration::from_secs(3)).unwrap();
        before(&s);
        let t0 = Instant::now();
        let rep = mgrp_map::trace(&mut s, &cfg, || false).unwrap();
        Ok((rep, t0.elapsed()))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

#[test]
fn trace_finds_r1_r2_r3_and_the_agent_with_growing_delays() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    mgrp_testbed::stolen::unless_stolen(
        "trace_finds_r1_r2_r3_and_the_agent_with_growing_delays",
        |_| {
            let tb = chain3_delayed("trace");
            let _agent = agent_in_b(&tb);
            let (rep, took) = trace_from_a(&tb, TraceConfig::default());
            eprintln!("{}", rep.table());
            let want = [
                router_addr(&tb, "r1", "a"),
                router_addr(&tb, "r2", "r1"),
                router_addr(&tb, "r3", "r2"),
                IpAddr::V4(b_addr(&tb)),
            ];
            let got: Vec<Vec<IpAddr>> = rep.hops.iter().map(|h| h.addrs.clone()).collect();
            assert_eq!(got, want.iter().map(|a| vec![*a]).collect::<Vec<_>>());
            assert!(rep.reached && rep.hops[3].agent && rep.loops.is_empty());
            assert!(
                rep.hops.iter().all(|h| h.replies == 3 && h.sent == 3),
                "{rep:?}"
            );
            // Routers' RTTs carry the forward delays behind them (the reverse path has none); the
            // agent's delay is one-way (one host clock here).
            let configured = [0.0, D12_MS, D12_MS + D23_MS, D12_MS + D23_MS + D3B_MS];
            let mins: Vec<f64> = rep
                .hops
                .iter()
                .map(|h| h.min_ns.unwrap() as f64 / 1e6)
                .collect();
            assert!(
                mins.windows(2).all(|w| w[1] > w[0]),
                "delays grow: {mins:?}"
            );
            for (hop, (m, c)) in mins.iter().zip(configured).enumerate() {
                // Tolerance from 20 idle runs here: minimum minus configured delay was 13-19 us at
                // r1, 35-82 us at r2, 85-246 us at r3 and 139-468 us at the agent (the delay line's
                // timer and each router's forwarding). 2 ms above allows a loaded CI machine 4x that;
                // the line never delivers early (0.1 ms below for clock granularity).
                assert!(
                    *m >= c - 0.1 && *m <= c + 2.0,
                    "hop {}: min {m:.3} ms, configured {c} ms",
                    hop + 1
                );
            }
            // Three rounds, each at most the agent's wait for the probes that expired (0.3 s).
            assert!(took < Duration::from_secs(5), "took {took:?}");
            // The control connection's RTT is the whole forward delay too.
            let rtt = rep.control_rtt_ns.unwrap() as f64 / 1e6;
            assert!(
                rtt > configured[3] - 0.1 && rtt < configured[3] + 5.0,
                "{rtt}"
            );
        },
    )
}

#[test]
fn a_silent_router_shows_a_star_and_a_loop_is_reported_without_hanging() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = chain3_delayed("silent");
    let _agent = agent_in_b(&tb);
    let r2 = router_addr(&tb, "r2", "r1");
    // r2's ICMP errors leave from its address toward r1: send them to a blackhole (policy
    // routing on the source; forwarded packets keep their way).
    let r2_ns = tb.ns_of("r2").unwrap();
    sh_in(
        &r2_ns,
        &format!(
            "ip rule add from {r2} lookup {TABLE} prio {PRIO}\nip route add blackhole default table {TABLE}\n"
        ),
    )
    .unwrap();
    let (rep, took) = trace_from_a(&tb, TraceConfig::default());
    eprintln!("{}", rep.table());
    assert!(rep.reached && rep.hops.len() == 4, "{rep:?}");
    assert_eq!((rep.hops[1].replies, rep.hops[1].sent), (0, 3));
    assert!(rep.hops[1].addrs.is_empty() && rep.hops[1].min_ns.is_none());
    assert!(rep.table().contains("  2  *"), "{}", rep.table());
    assert_eq!(rep.hops[2].addrs, vec![router_addr(&tb, "r3", "r2")]);
    // Each round waits 1 s for the silent hop, no more.
    assert!(took < Duration::from_secs(6), "took {took:?}");

    // A loop: once the session is up, r2 sends b's subnet back to r1 (which sends it to r2).
    // r2 answers again; r1 answers the probes coming back from r2 from its address on that
    // link, r2 from its address toward r1: each at every other TTL.
    sh_in(
        &r2_ns,
        &format!("ip rule del from {r2} lookup {TABLE} prio {PRIO}\nip route del blackhole default table {TABLE}\n"),
    )
    .unwrap();
    let t = tb.topology();
    let b_net = t.subnet(t.links_of(t.index("b").unwrap())[0]);
    let r1_toward_r2 = router_addr(&tb, "r1", "r2");
    let cfg = TraceConfig {
        max_hops: 8,
        runs: 1,
        ..Default::default()
    };
    let ns = r2_ns.clone();
    let (rep, took) = trace_from_a_then(&tb, cfg, move |_| {
        sh_in(
            &ns,
            &format!("ip route replace {b_net} via {r1_toward_r2}\n"),
        )
        .unwrap();
    });
    eprintln!("{}", rep.table());
    assert!(!rep.reached);
    assert_eq!(rep.hops.len(), 8);
    let want = [(r2, vec![2, 4, 6, 8]), (r1_toward_r2, vec![3, 5, 7])];
    assert!(
        want.iter()
            .all(|(a, ttls)| rep.loops.iter().any(|l| l.addr == *a && l.ttls == *ttls)),
        "{:?}",
        rep.loops
    );
    assert!(rep.table().contains("loop: "), "{}", rep.table());
    // The report never comes over the looping path: the engine's report grace (2 s) and the
    // hop wait bound the round.
    assert!(took < Duration::from_secs(6), "took {took:?}");
}
