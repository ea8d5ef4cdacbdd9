//! Two-sided Wren live on the testbed (`chain3`, both router links at 20 Mbit/s): a real TCP
//! flow from a to b, b's agent capturing the flow's arrivals for a, both ends also written to
//! pcaps; the live `wren2` estimates must equal the offline two-sided analysis of those pcaps.
//! And what a peer refuses or counts: flows of other hosts, addresses not its own, too many
//! captures, records over the limit, no capture privileges. Needs root (namespaces, capture).

use mgrp_engine::client::{CaptureEvent, Session};
use mgrp_lab::wren2_bench::Wren2Rig;
use mgrp_testbed::netns::spawn_in;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The two tests that judge Wren's output run one at a time: each drives a flow through its own
/// chain3, and Wren's trains need timestamps a busy 2-core host does not blur (a CI run with
/// both at once: the service's Wren formed no estimate from 23,534 segments in 12 s).
static FLOWS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_flow_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    FLOWS.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn live_two_sided_equals_offline_on_the_same_run() {
    let _one = one_flow_at_a_time();
    mgrp_testbed::stolen::unless_stolen("live_two_sided_equals_offline_on_the_same_run", |_| {
        let rig = Wren2Rig::start(20.0, 5.0, false, || Ok(())).expect("testbed");
        let dir = std::env::temp_dir().join(format!("mgrp-wren2-test-{}", std::process::id()));
        // A failed attempt's files must not meet the next one.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sc = rig.run(20.0, 75.0, 10.0, &dir).expect("scenario");
        let a = sc.agreement();
        eprintln!(
            "one-sided {} live {} offline {} {a:?} {:?}",
            sc.one_sided.len(),
            sc.live.len(),
            sc.offline.len(),
            sc.counters
        );
        for e in &sc.live {
            eprintln!(
                "live {} {:.2} truth {:?}",
                e.window_start_ns,
                e.value_bps / 1e6,
                sc.truth
                    .tightest(e.window_start_ns, e.window_end_ns)
                    .map(|t| t / 1e6)
            );
        }
        for e in &sc.offline {
            eprintln!("offline {} {:.2}", e.window_start_ns, e.value_bps / 1e6);
        }
        // The peer's records reached the merge, and matched what a sent.
        let c = &sc.counters;
        assert_eq!((c.requests, c.failures), (1, 0), "{c:?}");
        assert!(c.merge.matched > 1000, "{c:?}");
        // Ten seconds of flow: estimates in most windows (compared from the second whole window
        // after b's first record: b's capture is asked for when a's first segment is seen).
        assert!(a.compared >= 5, "{a:?}");
        // Equal window for window, up to one: over `mgrp bench wren2 --repeat 3` (12 runs, 143
        // windows compared) one window differed, by 0.08% (cause not pinned down; see
        // docs/passive.md). With ~8 windows here exact equality everywhere would fail ~5% of runs;
        // two differing windows would be ~0.2%, and any difference over 1% means something broke.
        assert!(a.equal + 1 >= a.compared, "{a:?}");
        assert!(a.max_rel_diff <= 0.01, "{a:?}");
        assert_eq!((a.only_live, a.only_offline), (0, 0), "{a:?}");
        sc.remove_pcaps();
        let _ = std::fs::remove_dir(&dir);
        let ag = rig.agent_counters().unwrap();
        assert_eq!((ag.captures, ag.captures_refused), (1, 0), "{ag:?}");
    })
}

/// Ask b's agent, from a, to capture `sender` → `receiver`; what came back within `wait`:
/// (records, the end's (records, dropped), or the error text).
fn ask(
    rig: &Wren2Rig,
    sender: SocketAddr,
    receiver: SocketAddr,
    max: Duration,
    max_records: u32,
    wait: Duration,
) -> (usize, Result<Option<(u64, u64)>, String>) {
    let (peer, key, pacer) = (rig.peer, rig.key.clone(), rig.pacer());
    spawn_in(&rig.a_ns, "ask", move || {
        let s = Session::connect(peer, &key, pacer, Duration::from_secs(3)).unwrap();
        let mut cap = s.into_capture(sender, receiver, max, max_records).unwrap();
        let (mut n, until) = (0, Instant::now() + wait);
        while Instant::now() < until {
            match cap.recv(until) {
                Ok(Some(CaptureEvent::Batch(b))) => n += b.len(),
                Ok(Some(CaptureEvent::End { records, dropped })) => {
                    return Ok((n, Ok(Some((records, dropped)))))
                }
                Ok(None) => {}
                Err(e) => return Ok((n, Err(e.to_string()))),
            }
        }
        Ok((n, Ok(None)))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

#[test]
fn peer_refuses_or_counts_what_it_should() {
    let rig = Wren2Rig::start(20.0, 1.0, false, || Ok(())).expect("testbed");
    let a = SocketAddr::new(rig.a_addr, 40000);
    let b = rig.app_dst();
    let second = Duration::from_secs(1);
    // Another host's flow: refused, with the reason.
    let other: SocketAddr = "10.99.0.1:40000".parse().unwrap();
    let (_, r) = ask(&rig, other, b, second, 100, second * 3);
    let e = r.unwrap_err();
    assert!(e.contains("is not this session's peer"), "{e}");
    // A receiver address that is not b's.
    let (_, r) = ask(
        &rig,
        a,
        "10.99.0.2:5300".parse().unwrap(),
        second,
        100,
        second * 3,
    );
    let e = r.unwrap_err();
    assert!(e.contains("not an address of this host"), "{e}");
    // An unknown flow (nothing sends on it): runs its time, ends with nothing.
    let (n, r) = ask(&rig, a, b, Duration::from_millis(500), 100, second * 3);
    assert_eq!((n, r), (0, Ok(Some((0, 0)))));
    // More than the agent runs at once: the fifth is refused while four hold their slots.
    // (The unknown flow's capture frees its slot once its ring is closed: give it a moment.)
    std::thread::sleep(Duration::from_secs(1));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holders: Vec<_> = (0..4)
        .map(|i| {
            let (peer, key, ns, pacer) = (rig.peer, rig.key.clone(), rig.a_ns.clone(), rig.pacer());
            let a = SocketAddr::new(rig.a_addr, 41000 + i);
            let release = release.clone();
            spawn_in(&ns, "hold", move || {
                let s = Session::connect(peer, &key, pacer, Duration::from_secs(10)).unwrap();
                let cap = s.into_capture(a, b, Duration::from_secs(60), 10).unwrap();
                let until = Instant::now() + Duration::from_secs(60);
                while !release.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                // Closing the connection ends the capture at the agent.
                drop(cap);
                Ok(())
            })
            .unwrap()
        })
        .collect();
    // Wait until all four run (the unknown flow's capture was the first). Under load a
    // capture can take seconds to open; 30 s bounds the wait.
    let until = Instant::now() + Duration::from_secs(30);
    while rig.agent_counters().unwrap().captures < 5 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        rig.agent_counters().unwrap().captures,
        5,
        "the four started: {:?}",
        rig.agent_counters()
    );
    let (_, r) = ask(&rig, a, b, second, 100, second * 3);
    let e = r.unwrap_err();
    assert!(e.contains("already runs 4 captures"), "{e}");
    release.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in holders {
        h.join().unwrap().unwrap();
    }
    // The agent frees the slots once it sees the connections closed (within its 100 ms poll).
    std::thread::sleep(Duration::from_millis(500));
    // Records over the request's limit: counted as dropped, not sent.
    let flow = mgrp_testbed::app::AppFlow::start_in(
        &rig.a_ns,
        &rig.b_ns,
        b,
        mgrp_testbed::app::AppPattern::Bulk,
        None,
        Duration::from_secs(10),
    )
    .unwrap();
    // The flow's source port is the kernel's: capture any port by asking for each... the
    // agent matches exact 4-tuples, so find the port from a's socket table.
    std::thread::sleep(Duration::from_millis(300));
    let port = flow_port(&rig, b);
    let (n, r) = ask(
        &rig,
        SocketAddr::new(rig.a_addr, port),
        b,
        second * 2,
        50,
        second * 4,
    );
    drop(flow);
    let (records, dropped) = r.unwrap().expect("an end");
    assert_eq!((n, records), (50, 50));
    assert!(dropped > 0, "the segments over the limit are counted");
    let ag = rig.agent_counters().unwrap();
    // Refused by the agent: the receiver not its own, the fifth at once. The other host's
    // flow was refused by the session's protocol (a control error).
    assert_eq!((ag.captures_refused, ag.control_errors), (2, 1), "{ag:?}");
    assert!(ag.capture_dropped >= dropped, "{ag:?}");
}

/// The local port of a's established connection to `dst` (this thread's namespace: /proc/thread-self).
fn flow_port(rig: &Wren2Rig, dst: SocketAddr) -> u16 {
    spawn_in(&rig.a_ns, "ports", move || {
        let t = std::fs::read_to_string("/proc/thread-self/net/tcp").unwrap();
        let want = format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(match dst.ip() {
                std::net::IpAddr::V4(v) => v.octets(),
                _ => unreachable!(),
            }),
            dst.port()
        );
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 3 && f[2] == want && f[3] == "01" {
                let port = f[1].split(':').nth(1).unwrap();
                return Ok(u16::from_str_radix(port, 16).unwrap());
            }
        }
        panic!("no established connection to {dst}: {t}");
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

/// Drop CAP_NET_RAW from this thread's effective and permitted sets (threads it starts inherit
/// that): an agent started so cannot capture, as one run without privileges.
fn drop_net_raw() -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const V3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut h = Header {
        version: V3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data words, as the kernel expects.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) != 0 {
            return Err("capget failed".into());
        }
        d[0].effective &= !(1 << CAP_NET_RAW);
        d[0].permitted &= !(1 << CAP_NET_RAW);
        if libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) != 0 {
            return Err("capset failed".into());
        }
    }
    Ok(())
}

#[test]
fn peer_without_capture_privileges_says_so() {
    let rig = Wren2Rig::start(20.0, 1.0, false, drop_net_raw).expect("testbed");
    let a = SocketAddr::new(rig.a_addr, 40000);
    let (_, r) = ask(
        &rig,
        a,
        rig.app_dst(),
        Duration::from_secs(1),
        100,
        Duration::from_secs(3),
    );
    let e = r.unwrap_err();
    assert!(
        e.contains("capture failed") && e.contains("CAP_NET_RAW"),
        "{e}"
    );
    let ag = rig.agent_counters().unwrap();
    assert_eq!((ag.captures, ag.captures_refused), (0, 1), "{ag:?}");
}

/// The service as `mgrp agent` runs it: a `[[passive]]` source with a `peer` stores `wren2`
/// estimates (source passive) beside `wren`, and counts its peer captures.
#[test]
fn service_stores_wren2_beside_wren() {
    let _one = one_flow_at_a_time();
    mgrp_testbed::stolen::unless_stolen("service_stores_wren2_beside_wren", |_| {
        use mgrp_service::config::{PassiveSource, ServiceConfig};
        use mgrp_service::service::Service;
        // The scenario of `live_two_sided_equals_offline_on_the_same_run` (5 ms tail, 20% cross on
        // both links), where one-sided Wren forms estimates in most windows. This test once ran the
        // flow alone on a 1 ms tail: there the sender's bursts left few trains Wren could judge
        // (7 to 65 trains from ~20,000 segments, ~97% rejected for ACK rate ≠ sending rate), so
        // reaching 3 one-sided estimates in 18 s was chance — on any checkout, fresh or not.
        let rig = Wren2Rig::start(20.0, 5.0, false, || Ok(())).expect("testbed");
        let _cross = rig.cross(20.0).expect("cross traffic");
        let cfg = ServiceConfig {
            passive: vec![PassiveSource {
                iface: rig.a_dev.clone(),
                flow: Some(format!("port {}", mgrp_lab::wren2_bench::APP_PORT)),
                window: Duration::from_secs(1),
                peer: Some(rig.peer),
            }],
            ..ServiceConfig::default()
        };
        let key = rig.key.clone();
        let svc = spawn_in(&rig.a_ns, "service", move || {
            Service::start(&cfg, key).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
        let mut sub = svc.hub().subscribe();
        let flow = mgrp_testbed::app::AppFlow::start_in(
            &rig.a_ns,
            &rig.b_ns,
            rig.app_dst(),
            mgrp_testbed::app::AppPattern::parse("msgs:93750,every=50ms").unwrap(),
            None,
            Duration::from_secs(20),
        )
        .unwrap();
        let (mut wren, mut wren2) = (0, 0);
        // Most of the flow's 20 s: it ends as soon as both kinds have 3.
        let until = Instant::now() + Duration::from_secs(18);
        while Instant::now() < until && (wren < 3 || wren2 < 3) {
            match sub.try_recv() {
                Ok(r) => {
                    assert_eq!(r.source, "passive", "{r:?}");
                    assert_eq!(r.path, format!("{}->{}", rig.a_addr, rig.app_dst().ip()));
                    match r.method.as_str() {
                        "wren" => wren += 1,
                        "wren2" => wren2 += 1,
                        m => panic!("method {m}"),
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        drop(flow);
        let view = svc.hub().passive();
        let _ = svc.stop();
        // The service asked the peer once, the peer answered, and the sender's segments were seen.
        let c = &view[0].counters;
        assert_eq!((c.wren2_requests, c.wren2_failures), (1, 0), "{view:?}");
        assert!(c.segments > 1000, "{view:?}");
        // Both analyses formed estimates from the flow and both were stored (over 5 runs of this
        // scenario each kind reached 3 within 6.5 s of the 18 s allowed).
        assert!(wren >= 3, "wren {wren} wren2 {wren2} {view:?}");
        assert!(wren2 >= 3, "wren {wren} wren2 {wren2} {view:?}");
        assert!(c.wren2_estimates >= 3, "{view:?}");
        // The one-sided counters say where its estimates came from: each stored window had a
        // lower-bound train, and judged trains include every rising and lower-bound one.
        assert!(c.trains_lower_bound >= wren as u64, "wren {wren} {view:?}");
        assert!(
            c.trains >= c.trains_lower_bound + c.trains_rising,
            "{view:?}"
        );
    })
}
