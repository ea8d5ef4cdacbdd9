//! Topologies from a file: each shipped one comes up, carries traffic end to end, reports
//! per-link truth and leaves nothing behind (also when the test panics); routers answer TTL
//! expiry like routers; bad files are refused with the entry named and nothing made.

use mgrp_testbed::generator::{CrossTraffic, GenOptions};
use mgrp_testbed::topo::{self, LinkDir, TopoOptions, TopoTestbed, TopoTruthSampler};
use mgrp_testbed::topology::{existing_namespaces, State};
use mgrp_testbed::CrossPattern;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Mutex;
use std::time::Duration;

/// Floods and CBR flows share two CPUs: one topology at a time keeps rates honest.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn name(tag: &str) -> String {
    format!("tt{}-{tag}", std::process::id() % 100_000)
}

fn up(topology: &str, tag: &str, measure: bool) -> TopoTestbed {
    let text = topo::source(topology).unwrap();
    up_text(&text, tag, measure)
}

fn up_text(text: &str, tag: &str, measure: bool) -> TopoTestbed {
    TopoTestbed::up(
        text,
        TopoOptions {
            name: Some(name(tag)),
            measure_capacity: measure,
            ..Default::default()
        },
    )
    .expect("topology up (these tests need root)")
}

fn assert_gone(name: &str) {
    assert!(
        existing_namespaces(name).is_empty(),
        "namespaces left: {:?}",
        existing_namespaces(name)
    );
    assert!(!State::path(name).exists(), "state file left for {name}");
}

/// UDP CBR from host `from` to host `to` for `secs`; (sent, received) packets.
fn udp_end_to_end(tb: &TopoTestbed, from: &str, to: &str, secs: f64) -> (u64, u64) {
    let t = tb.topology();
    let ends = tb.endpoints(t.index(from).unwrap(), t.index(to).unwrap(), 6100);
    let p = CrossPattern::parse("cbr:2mbit").unwrap();
    let opts = GenOptions {
        max_duration: Duration::from_secs_f64(secs + 2.0),
        ..Default::default()
    };
    let g = CrossTraffic::start_between(&ends, &p, &opts).unwrap();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let r = g.stop().unwrap();
    (r.sent_packets, r.received_packets)
}

#[test]
fn shipped_topologies_come_up_carry_traffic_and_go() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen("shipped_topologies_come_up_carry_traffic_and_go", |_| {
        for (topology, from, to) in [
            ("chain3", "a", "b"),
            ("tree", "src", "rx3"),
            ("access", "s4", "rcv"),
        ] {
            let n;
            {
                let tb = up(topology, topology, false);
                n = tb.name().to_string();
                let nodes = tb.topology().nodes.len();
                assert_eq!(existing_namespaces(&n).len(), nodes, "{topology}");
                assert!(State::path(&n).exists());
                let (sent, got) = udp_end_to_end(&tb, from, to, 1.0);
                // 2 Mbit/s of 1500 B packets for 1 s is ~165 packets; an unloaded path loses none.
                assert!(
                    sent > 150 && got == sent,
                    "{topology} {from}→{to}: sent {sent}, got {got}"
                );
            }
            assert_gone(&n);
        }
    })
}

#[test]
fn a_panic_while_up_leaves_nothing() {
    let _g = serial();
    let n = name("panic");
    let r = std::panic::catch_unwind(|| {
        let tb = up("chain3", "panic", false);
        assert_eq!(existing_namespaces(tb.name()).len(), 9);
        panic!("test panics while the topology is up");
    });
    assert!(r.is_err());
    assert_gone(&n);
}

#[test]
fn bad_files_are_refused_and_nothing_is_made() {
    let _g = serial();
    let chain3 = topo::source("chain3").unwrap();
    let cases = [
        (
            chain3.clone() + "\n[[link]]\na = \"r3\"\nb = \"r1\"\n",
            "link #9 (r3 — r1) closes a loop",
        ),
        (
            chain3.replace("a = \"r3\"\nb = \"b\"", "a = \"r3\"\nb = \"bb\""),
            "link #4 (r3 — bb): unknown node \"bb\"",
        ),
        (
            chain3.replace("\"20mbit\"", "\"-20mbit\""),
            "link #3 (r2 — r3): bad rate \"-20mbit\"",
        ),
        (
            chain3.clone() + "\n[[node]]\nname = \"lost\"\nkind = \"host\"\n",
            "node \"lost\" has no link",
        ),
        (
            chain3.replace("a = \"r3\"\nb = \"b\"", "a = \"r3\"\nb = \"\""),
            "link #4 (r3 — ): endpoint is missing",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let n = name(&format!("bad{i}"));
        let e = TopoTestbed::up(
            text,
            TopoOptions {
                name: Some(n.clone()),
                ..Default::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("case {i} was accepted"))
        .to_string();
        assert!(e.contains(want), "case {i}: wanted {want:?} in {e:?}");
        assert_gone(&n);
    }
}

/// What a TTL-limited probe got back: the ICMP type and the offender's address.
#[derive(Debug, Clone, Copy, PartialEq)]
struct IcmpReply {
    seq: u8,
    icmp_type: u8,
    offender: Ipv4Addr,
}

/// Send one UDP probe per entry of `ttls` (payload = its index) from namespace `ns` to `dst`,
/// then read the ICMP errors from the socket's error queue (IP_RECVERR; no raw socket).
fn ttl_probes(ns: &str, dst: SocketAddrV4, ttls: Vec<u32>) -> Vec<IcmpReply> {
    let h = mgrp_testbed::netns::spawn_in(ns, "ttl-probe", move || {
        use std::os::fd::AsRawFd;
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let fd = sock.as_raw_fd();
        let on: libc::c_int = 1;
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_RECVERR,
                &on as *const _ as *const libc::c_void,
                std::mem::size_of_val(&on) as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "IP_RECVERR: {}", std::io::Error::last_os_error());
        for (i, ttl) in ttls.iter().enumerate() {
            sock.set_ttl(*ttl).unwrap();
            // An ICMP error already queued makes the next send report it once: send again.
            for _ in 0..3 {
                if sock.send_to(&[i as u8], dst).is_ok() {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut out = Vec::new();
        loop {
            let mut data = [0u8; 64];
            let mut ctrl = [0u8; 512];
            let mut iov = libc::iovec {
                iov_base: data.as_mut_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            };
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = ctrl.len() as _;
            let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
            if n < 0 {
                break;
            }
            let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
            while !c.is_null() {
                let h = unsafe { &*c };
                if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR {
                    let ee = unsafe { &*(libc::CMSG_DATA(c) as *const libc::sock_extended_err) };
                    // SO_EE_OFFENDER: the sender of the ICMP, right after the struct.
                    let off = unsafe {
                        &*((ee as *const libc::sock_extended_err).add(1)
                            as *const libc::sockaddr_in)
                    };
                    if ee.ee_origin == libc::SO_EE_ORIGIN_ICMP {
                        out.push(IcmpReply {
                            seq: data[0],
                            icmp_type: ee.ee_type,
                            offender: Ipv4Addr::from(u32::from_be(off.sin_addr.s_addr)),
                        });
                    }
                }
                c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
            }
        }
        Ok(out)
    })
    .unwrap();
    h.join().unwrap().unwrap()
}

/// The address of router `r` on its link toward `toward` (the interface probes from a arrive on).
fn router_addr(tb: &TopoTestbed, r: &str, toward: &str) -> Ipv4Addr {
    let t = tb.topology();
    let (ri, ti) = (t.index(r).unwrap(), t.index(toward).unwrap());
    let l = t
        .links_of(ri)
        .into_iter()
        .find(|&l| t.peer(l, ri) == ti)
        .unwrap();
    t.addr(l, ri)
}

const ICMP_TIME_EXCEEDED: u8 = 11;

#[test]
fn routers_answer_ttl_expiry_from_their_incoming_address() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen(
        "routers_answer_ttl_expiry_from_their_incoming_address",
        |_| {
            let tb = up("chain3", "ttl", false);
            let t = tb.topology();
            let a = tb.ns_of("a").unwrap();
            let b = SocketAddrV4::new(t.host_addr(t.index("b").unwrap()), 33434);
            let got = ttl_probes(&a, b, vec![1, 2, 3]);
            let want: Vec<IcmpReply> = [("r1", "a"), ("r2", "r1"), ("r3", "r2")]
                .iter()
                .enumerate()
                .map(|(i, (r, toward))| IcmpReply {
                    seq: i as u8,
                    icmp_type: ICMP_TIME_EXCEEDED,
                    offender: router_addr(&tb, r, toward),
                })
                .collect();
            let mut got_sorted = got.clone();
            got_sorted.sort_by_key(|r| r.seq);
            assert_eq!(got_sorted, want, "TTL 1, 2, 3 should expire at r1, r2, r3");
            // Linux's default (the address of the route back to the sender) picks the same interface
            // on a tree: the testbed's explicit inbound-address setting changes nothing here.
            for r in ["r1", "r2", "r3"] {
                let ns = tb.ns_of(r).unwrap();
                mgrp_testbed::netns::sh_in(
                    &ns,
                    "sysctl -qw net.ipv4.icmp_errors_use_inbound_ifaddr=0",
                )
                .unwrap();
            }
            let mut default = ttl_probes(&a, b, vec![1, 2, 3]);
            default.sort_by_key(|r| r.seq);
            assert_eq!(default, want, "with the kernel's default source address");
            // TTL 4 reaches b, which has no listener on the port: port unreachable from b itself.
            let last = ttl_probes(&a, b, vec![4]);
            assert_eq!(last.len(), 1, "{last:?}");
            assert_eq!(last[0].icmp_type, 3);
            assert_eq!(last[0].offender, *b.ip());
        },
    )
}

#[test]
fn icmp_rate_limit_off_by_default_kernel_on_request() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen("icmp_rate_limit_off_by_default_kernel_on_request", |_| {
        let burst = vec![1u32; 30];
        let answered = |text: &str, tag: &str| {
            let tb = up_text(text, tag, false);
            let t = tb.topology();
            let b = SocketAddrV4::new(t.host_addr(t.index("b").unwrap()), 33434);
            let got = ttl_probes(&tb.ns_of("a").unwrap(), b, burst.clone());
            let r1 = router_addr(&tb, "r1", "a");
            assert!(got
                .iter()
                .all(|r| r.offender == r1 && r.icmp_type == ICMP_TIME_EXCEEDED));
            got.len()
        };
        let chain3 = topo::source("chain3").unwrap();
        let off = answered(&chain3, "rloff");
        let kernel = answered(
            &chain3.replace("ratelimit = \"off\"", "ratelimit = \"kernel\""),
            "rlkern",
        );
        assert_eq!(off, 30, "with the limit off every expiry is answered");
        // The kernel's per-destination bucket (1 s, burst 6) answers a handful of a 30-probe burst.
        assert!(kernel < 30, "kernel limit answered {kernel} of 30");
        eprintln!("30 TTL-1 probes answered: off {off}, kernel {kernel}");
    })
}

/// Whether the path of traffic from host `from` to host `to` crosses direction `d`.
fn crosses(t: &mgrp_testbed::topo::Topology, from: usize, to: usize, d: LinkDir) -> bool {
    let p = t.path(from, to).unwrap();
    p.windows(2).any(|w| w[0] == d.from && w[1] == d.to)
}

/// Run the file's flows plus a CBR foreground between the measured pair and compare each
/// shaped direction's truth with what the flows' paths say it should carry.
fn per_link_truth(topology: &str) {
    let tb = up(topology, &format!("{topology}t"), true);
    let t = tb.topology().clone();
    for c in tb.capacities() {
        let cap = c.capacity;
        eprintln!(
            "{topology} {:>8}: configured {:>6.2} Mbit/s, measured {:>6.2} Mbit/s ({:+.1}%)",
            c.label,
            cap.configured_bps / 1e6,
            cap.bps() / 1e6,
            cap.deviation() * 100.0
        );
        // The VM's shaper drains less than told, never more: −3.8% at 100 Mbit/s on a quiet
        // host, and during bursts of CPU steal (2026-11-23) −16% on chain3's 50 Mbit/s link
        // and −18.5% on a 20 Mbit/s one. Above the configured rate (2%: the flood's own
        // reading error) or more than 25% below it would mean a broken link, not a late timer.
        // The truth below is built on the measured rate either way.
        let dev = cap.deviation();
        assert!(
            (-0.25..0.02).contains(&dev),
            "{topology} {}: {cap:?}",
            c.label
        );
    }
    let (fa, fb) = t.measure.unwrap();
    let fg_rate = 3e6;
    let sampler = TopoTruthSampler::start(&tb, Duration::from_millis(100)).unwrap();
    let opts = GenOptions {
        max_duration: Duration::from_secs(8),
        ..Default::default()
    };
    let flows = tb.start_flows(&opts).unwrap();
    let fg = CrossTraffic::start_between(
        &tb.endpoints(fa, fb, 6000),
        &CrossPattern::parse("cbr:3mbit").unwrap(),
        &opts,
    )
    .unwrap();
    let start = fg.start_ns();
    std::thread::sleep(Duration::from_secs(3));
    let report = fg.stop().unwrap();
    for f in flows {
        f.stop().unwrap();
    }
    let truth = sampler.stop().unwrap();
    // Trim 0.3 s at each end so start-up and drain do not blur the rates.
    let w = truth
        .window(start + 300_000_000, start + 2_700_000_000)
        .unwrap();
    assert!(report.received_packets > 0, "{report:?}");
    for (d, got) in t.shaped_dirs().into_iter().zip(&w.links) {
        let want_cross: f64 = t
            .flows
            .iter()
            .filter(|f| crosses(&t, f.from, f.to, d))
            .map(|f| f.pattern.mean_rate_bps().unwrap())
            .fold(0.0, |a, b| a + b);
        let want_fg = if crosses(&t, fa, fb, d) { fg_rate } else { 0.0 };
        eprintln!(
            "{topology} {:>8}: cross {:>6.3} (want {:>5.2}) fg {:>6.3} (want {:>4.2}) A {:>6.2} Mbit/s",
            got.label,
            got.cross_bps / 1e6,
            want_cross / 1e6,
            got.fg_bps / 1e6,
            want_fg / 1e6,
            got.avail_bps / 1e6
        );
        // CBR through an unsaturated shaper measured within 1% here; 3% of the rate plus
        // 50 kbit/s (stray ARP, the other flows' sub-bin jitter) leaves room without hiding
        // a flow counted on the wrong link (the smallest flow is 3 Mbit/s).
        let tol = |want: f64| want * 0.03 + 50e3;
        assert!(
            (got.cross_bps - want_cross).abs() < tol(want_cross),
            "{topology} {}: cross {} want {want_cross}",
            got.label,
            got.cross_bps
        );
        assert!(
            (got.fg_bps - want_fg).abs() < tol(want_fg),
            "{topology} {}: fg {} want {want_fg}",
            got.label,
            got.fg_bps
        );
        assert_eq!(got.drops, 0.0, "{topology} {}", got.label);
    }
    let n = tb.name().to_string();
    drop(tb);
    assert_gone(&n);
}

#[test]
fn per_link_truth_chain3() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen("per_link_truth_chain3", |_| {
        per_link_truth("chain3");
    })
}

#[test]
fn per_link_truth_tree() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen("per_link_truth_tree", |_| {
        per_link_truth("tree");
    })
}

#[test]
fn per_link_truth_access() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen("per_link_truth_access", |_| {
        per_link_truth("access");
    })
}

/// A router with a delay and loss line on its link still costs one hop: TTL expiry happens at
/// its own hop (the line gives back the TTL the extra pass through the router took), and the
/// link loses what it was told to.
#[test]
fn a_lossy_delayed_link_keeps_hops_and_loses_its_share() {
    let _g = serial();
    mgrp_testbed::stolen::unless_stolen(
        "a_lossy_delayed_link_keeps_hops_and_loses_its_share",
        |_| {
            let text = topo::source("chain3").unwrap().replace(
                "a = \"r1\"\nb = \"r2\"\ncapacity = \"50mbit\"",
                "a = \"r1\"\nb = \"r2\"\ncapacity = \"50mbit\"\ndelay = \"2ms\"\nloss = \"10%\"",
            );
            assert!(text.contains("loss = \"10%\""), "chain3 changed shape");
            let tb = up_text(&text, "lossy", false);
            let t = tb.topology();
            let a = tb.ns_of("a").unwrap();
            let b = SocketAddrV4::new(t.host_addr(t.index("b").unwrap()), 33434);
            // Probes are lost too: send each TTL until it is answered (at most 20 tries).
            for (ttl, r, toward) in [(1, "r1", "a"), (2, "r2", "r1"), (3, "r3", "r2")] {
                let got = (0..20)
                    .map(|_| ttl_probes(&a, b, vec![ttl]))
                    .find(|g| !g.is_empty())
                    .expect("an answer in 20 tries");
                assert_eq!(got.len(), 1, "TTL {ttl}: {got:?}");
                assert_eq!(got[0].icmp_type, ICMP_TIME_EXCEEDED, "TTL {ttl}");
                assert_eq!(got[0].offender, router_addr(&tb, r, toward), "TTL {ttl}");
            }
            // 20 Mbit/s of 1500-B packets for 2 s: ~3,300 packets cross the lossy line.
            let link = (0..t.links.len())
                .find(|&l| t.links[l].loss.is_some())
                .unwrap();
            let before = tb.line_stats(link).unwrap();
            let ends = tb.endpoints(t.index("a").unwrap(), t.index("b").unwrap(), 6101);
            let p = CrossPattern::parse("cbr:20mbit").unwrap();
            let opts = GenOptions {
                max_duration: Duration::from_secs(4),
                ..Default::default()
            };
            let g = CrossTraffic::start_between(&ends, &p, &opts).unwrap();
            std::thread::sleep(Duration::from_secs(2));
            let r = g.stop().unwrap();
            let after = tb.line_stats(link).unwrap();
            let lost = 1.0 - r.received_packets as f64 / r.sent_packets as f64;
            // Binomial: σ = sqrt(0.1 · 0.9 / n) ≈ 0.52% at n = 3,300; 4.5 σ either side.
            let sigma = (0.1 * 0.9 / r.sent_packets as f64).sqrt();
            assert!(
                (lost - 0.1).abs() < 4.5 * sigma,
                "lost {lost} of {} sent (σ {sigma})",
                r.sent_packets
            );
            // The receiver's count and the line's agree (nothing else drops on this idle path).
            assert_eq!(
                after.lost - before.lost,
                r.sent_packets - r.received_packets,
                "{after:?}"
            );
        },
    )
}
