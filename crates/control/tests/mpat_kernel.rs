//! `mgrp_mpat` in the kernel: loading, the aggregate API's refusals, and an aggregate of three
//! flows with weights 1:2:3 through a 20 Mbit/s, 40 ms bottleneck on the namespace testbed,
//! reweighted live. Root and a BPF-capable kernel are needed; without them each test says why it
//! is skipped.

use mgrp_control::{available_congestion_controls, MemberRule, MpatControls};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod common;
use common::{bulk, cc_of, serial, set_cc, sink};

#[test]
fn load_refuse_bad_input_and_unload() {
    let Some(_k) = serial() else { return };
    let m = MpatControls::load().unwrap();
    let avail = available_congestion_controls().unwrap();
    assert!(
        avail.iter().any(|a| a == "mgrp_mpat") && avail.iter().any(|a| a == "mgrp_multcp"),
        "{avail:?}"
    );
    let e = MpatControls::load().unwrap_err();
    assert!(e.to_string().contains("already registered"), "{e}");

    let agg = m.create_aggregate().unwrap();
    let rule = MemberRule {
        dst: Some("198.18.3.2".parse().unwrap()),
        port: Some(9000),
    };
    let bad = |r: Result<(), mgrp_control::Error>, what: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    bad(m.add_member(agg, rule, 0), "weight");
    bad(m.add_member(agg + 1, rule, 1), "no aggregate");
    bad(m.add_member(99, rule, 1), "no aggregate");
    let empty = MemberRule {
        dst: None,
        port: None,
    };
    bad(m.add_member(agg, empty, 1), "destination or a port");
    m.add_member(agg, rule, 2).unwrap();
    let other = m.create_aggregate().unwrap();
    bad(m.add_member(other, rule, 1), "already a member");
    bad(m.set_weight(rule, 0), "weight");
    m.set_weight(rule, 5).unwrap();
    let st = m.member_stats().unwrap();
    assert_eq!((st.len(), st[0].weight, st[0].aggregate), (1, 5, agg));
    bad(m.set_multcp_n(0), "N");
    m.set_multcp_n(4).unwrap();
    m.remove_aggregate(agg).unwrap();
    assert!(m.member_stats().unwrap().is_empty());
    bad(m.remove_member(rule), "no member rule");
    assert!(m.aggregate_stats(agg).is_err());
    drop(m);
    let avail = available_congestion_controls().unwrap();
    assert!(
        !avail.iter().any(|a| a == "mgrp_mpat" || a == "mgrp_multcp"),
        "left registered: {avail:?}"
    );
}

/// Bytes each sink has received, sampled every 100 ms: (seconds since start, [bytes per port]).
type Samples = Vec<(f64, Vec<u64>)>;

/// Bytes each flow delivered between `from` and `to` seconds.
fn goodput(samples: &Samples, from: f64, to: f64) -> Vec<f64> {
    let at = |t: f64| &samples.iter().rev().find(|s| s.0 <= t).unwrap().1;
    let (a, b) = (at(from), at(to));
    a.iter().zip(b).map(|(x, y)| (y - x) as f64).collect()
}

/// The members' goodput relative to the first member's.
fn ratios(got: &[f64]) -> Vec<f64> {
    got[..3].iter().map(|g| g / got[0]).collect()
}

/// Bulk flows from snd to rcv for `secs`, one per (port, congestion control); the receiver's byte
/// counts are sampled every 100 ms and `tick` is called with the time after each sample.
fn run_flows(
    tb: &mgrp_testbed::Testbed,
    flows: &[(u16, &'static str)],
    secs: f64,
    mut tick: impl FnMut(f64),
) -> Samples {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let counts: Vec<Arc<AtomicU64>> = flows.iter().map(|_| Default::default()).collect();
    let sinks: Vec<_> = flows
        .iter()
        .zip(&counts)
        .map(|(&(port, _), n)| sink(tb, port, n.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let senders: Vec<_> = flows
        .iter()
        .map(|&(port, cc)| bulk(tb, port, Some(cc), secs, |_, _| None::<()>))
        .collect();
    let start = Instant::now();
    let mut samples: Samples = Vec::new();
    while start.elapsed() < Duration::from_secs_f64(secs - 0.5) {
        std::thread::sleep(Duration::from_millis(100));
        let t = start.elapsed().as_secs_f64();
        samples.push((
            t,
            counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        ));
        tick(t);
    }
    for s in senders {
        s.join().unwrap();
    }
    for s in sinks {
        let _ = s.join();
    }
    samples
}

/// mulTCP with N = 3 against one Reno flow through the same bottleneck. Two flows on one
/// drop-tail queue lose packets in the same episodes, so the ratio goes as α/β (3·6 against
/// 1·2: 9) rather than as √(α/β): mulTCP takes far more than N shares, as the thesis found for
/// small N (Table 2.1: N = 4 against 1 gave 8.0). This is the baseline MPAT is meant to beat.
#[test]
fn multcp_takes_about_n_shares() {
    mgrp_testbed::stolen::unless_stolen("multcp_takes_about_n_shares", |_| {
        use mgrp_testbed::{DelayMode, Testbed, TestbedConfig};
        let Some(_k) = serial() else { return };
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 20_000_000,
                delay: Some(Duration::from_millis(40)),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        let m = MpatControls::load().unwrap();
        m.set_multcp_n(3).unwrap();
        let samples = run_flows(&tb, &[(7601, "mgrp_multcp"), (7602, "reno")], 14.0, |_| {});
        let g = goodput(&samples, 4.0, 13.0);
        let ratio = g[0] / g[1];
        eprintln!("mulTCP N = 3 / Reno: {ratio:.2} (bytes {g:?})");
        // Three runs here: 8.32, 7.68, 9.87. More than N shares, less than the whole link.
        assert!((3.0..15.0).contains(&ratio), "mulTCP / Reno = {ratio}");
        drop(m);
    })
}

/// Three flows of one aggregate, weights 1:2:3, and one Reno flow through 20 Mbit/s and 40 ms; at
/// 12 s the weights become 3:2:1. Goodput is counted at the receiver over the steady seconds of
/// each phase.
#[test]
fn weights_split_the_bottleneck_and_follow_a_live_reweight() {
    mgrp_testbed::stolen::unless_stolen(
        "weights_split_the_bottleneck_and_follow_a_live_reweight",
        |_| {
            use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
            let Some(_k) = serial() else { return };
            let tb = Testbed::up(
                TestbedConfig {
                    capacity_bps: 20_000_000,
                    delay: Some(Duration::from_millis(40)),
                    ..Default::default()
                },
                DelayMode::Thread,
            )
            .unwrap();
            let m = MpatControls::load().unwrap();
            let agg = m.create_aggregate().unwrap();
            let rcv: IpAddr = Role::Rcv.addr().parse().unwrap();
            // Three members, then a plain Reno flow to compare the aggregate with.
            const PORTS: [u16; 4] = [7501, 7502, 7503, 7504];
            const CCS: [&str; 4] = ["mgrp_mpat", "mgrp_mpat", "mgrp_mpat", "reno"];
            let rule = |p: u16| MemberRule {
                dst: Some(rcv),
                port: Some(p),
            };
            for (p, w) in PORTS.iter().zip([1, 2, 3]) {
                m.add_member(agg, rule(*p), w).unwrap();
            }
            const SECS: f64 = 24.0;

            let mut mid = None;
            let flows: Vec<(u16, &str)> = PORTS.into_iter().zip(CCS).collect();
            let samples = run_flows(&tb, &flows, SECS, |t| {
                if mid.is_none() && t >= 12.0 {
                    mid = Some(m.aggregate_stats(agg).unwrap());
                    for (p, w) in PORTS.iter().zip([3, 2, 1]) {
                        m.set_weight(rule(*p), w).unwrap();
                    }
                }
            });
            let mid = mid.unwrap();
            let (g1, g2) = (goodput(&samples, 4.0, 12.0), goodput(&samples, 15.0, 23.0));
            let (before, after) = (ratios(&g1), ratios(&g2));
            // The aggregate against three fair shares (the Reno flow's goodput × 3).
            let fair = |g: &[f64]| g[..3].iter().sum::<f64>() / (3.0 * g[3]);
            let (fair1, fair2) = (fair(&g1), fair(&g2));
            let after_stats = m.aggregate_stats(agg).unwrap();
            eprintln!("aggregate at 12 s: {mid:?}\nat the end: {after_stats:?}");
            eprintln!("goodput / flow 0: 1:2:3 → {before:.2?}; 3:2:1 → {after:.2?}");
            eprintln!("aggregate / 3 Reno shares: {fair1:.2}, {fair2:.2} (bytes {g1:?} {g2:?})");
            assert_eq!(mid.windows, 3, "{mid:?}");
            assert!(
                mid.acks > 0 && mid.losses > 0 && mid.halvings > 0,
                "{mid:?}"
            );
            // Six runs here (ratios to flow 0): 1:2:3 gave 1 : 2.01–2.03 : 3.00–3.06, 3:2:1 gave
            // 1 : 0.66–0.67 : 0.32–0.33, i.e. within 4 %; 10 % leaves room for a loaded machine.
            let close = |got: f64, want: f64| (got - want).abs() / want < 0.1;
            assert!(
                close(before[1], 2.0) && close(before[2], 3.0),
                "1:2:3 gave {before:?}"
            );
            assert!(
                close(after[1], 2.0 / 3.0) && close(after[2], 1.0 / 3.0),
                "3:2:1 gave {after:?}"
            );
            // The aggregate against one Reno flow, before / after the reweight, six runs here:
            // 1.12/1.37, 0.90/1.08, 0.81/0.89, 1.11/1.95, 1.54/1.30, 1.44/0.70 — 1.2 × three fair shares
            // on average,
            // as noisy as one Reno flow is. Only a sanity band: neither starved nor taking the link.
            for f in [fair1, fair2] {
                assert!((0.5..2.5).contains(&f), "aggregate / 3 fair shares = {f}");
            }
            drop(m);
        },
    )
}

/// A member socket joins its aggregate, and unloading moves it to the default congestion
/// control (its window leaves the aggregate) rather than stranding it.
#[test]
fn unloading_moves_member_sockets_to_the_default() {
    let Some(_k) = serial() else { return };
    let m = MpatControls::load().unwrap();
    let agg = m.create_aggregate().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let rule = MemberRule {
        dst: Some("127.0.0.1".parse().unwrap()),
        port: Some(port),
    };
    m.add_member(agg, rule, 2).unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    set_cc(s.as_raw_fd(), "mgrp_mpat").unwrap();
    s.connect(&l.local_addr().unwrap().into()).unwrap();
    let client: TcpStream = s.into();
    let (mut server, _) = l.accept().unwrap();
    (&client).write_all(b"member").unwrap();
    let mut buf = [0u8; 6];
    server.read_exact(&mut buf).unwrap();
    let st = m.aggregate_stats(agg).unwrap();
    assert_eq!(
        (st.windows, st.weight_sum, st.flows_opened),
        (1, 2, 1),
        "{st:?}"
    );
    assert_eq!(m.member_stats().unwrap()[0].flows, 1);
    // Removed and the slot reused: the old member (now on Reno) leaves the new aggregate alone.
    m.remove_aggregate(agg).unwrap();
    let again = m.create_aggregate().unwrap();
    assert_eq!(again, agg, "the slot is reused");
    (&client).write_all(b"reno!!").unwrap();
    server.read_exact(&mut buf).unwrap();
    // Moving the socket off mgrp_mpat releases it; the new aggregate must not see that.
    assert_eq!(m.reset_sockets().unwrap(), 1);
    let st = m.aggregate_stats(again).unwrap();
    assert_eq!((st.windows, st.flows_closed), (0, 0), "{st:?}");
    drop(m);
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(cc_of(client.as_raw_fd()), default.trim());
    (&client).write_all(b"still!").unwrap();
    server.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"still!");
    let avail = available_congestion_controls().unwrap();
    assert!(!avail.iter().any(|a| a == "mgrp_mpat"), "{avail:?}");
}
