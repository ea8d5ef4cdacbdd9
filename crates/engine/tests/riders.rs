//! Riders between namespaces: the kernel's own TCP through the shim, carried in probe padding,
//! arrives intact under loss; forged, replayed and misaddressed riders are dropped and counted;
//! reassembly stays bounded under a flood of first fragments; without a train pending, traffic is not delayed.

mod common;
use common::key;
use common::SERIAL;
use mgrp_engine::auth::{Key, RiderTagInput};
use mgrp_engine::client::Session;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::pacer::Pacer;
use mgrp_engine::riders::{RiderConfig, RiderSender};
use mgrp_engine::train::TrainSpec;
use mgrp_shim::route::OptIn;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Buffer, DelayMode, Role, Testbed, TestbedConfig};
use mgrp_wire::probe::{self, ProbeHeader, Rider, RiderProto};
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn listen() -> SocketAddr {
    format!("{}:7240", Role::Rcv.addr()).parse().unwrap()
}

fn rcv_ip() -> Ipv4Addr {
    Role::Rcv.addr().parse().unwrap()
}

fn snd_ip() -> Ipv4Addr {
    Role::Snd.addr().parse().unwrap()
}

/// An agent in rcv that accepts riders into TUN `mgrp1`.
fn receiver(tb: &Testbed) -> Agent {
    spawn_in(&tb.ns(Role::Rcv), "agent", move || {
        let mut c = AgentConfig::new(listen(), key());
        c.riders_dev = Some("mgrp1".into());
        Ok(Agent::start(c).expect("agent starts"))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

fn sender(tb: &Testbed, opt_in: OptIn) -> Arc<RiderSender> {
    sender_with(
        tb,
        RiderConfig {
            opt_in: vec![opt_in],
            ..RiderConfig::default()
        },
    )
}

/// The host's rider sender in snd, configured by `cfg`.
fn sender_with(tb: &Testbed, cfg: RiderConfig) -> Arc<RiderSender> {
    spawn_in(&tb.ns(Role::Snd), "riders", move || {
        Ok(Arc::new(
            RiderSender::start(&cfg, key()).expect("riders start"),
        ))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

/// A session to rcv's agent whose trains carry the host's opted-in packets as riders (its
/// own control traffic marked to bypass the shim).
fn rider_session(r: Arc<mgrp_engine::riders::RiderSender>) -> Session {
    Session::connect_marked(
        listen(),
        &key(),
        Arc::new(Pacer::spawn().unwrap()),
        Duration::from_secs(3),
        Some(mgrp_shim::BYPASS_MARK),
    )
    .unwrap()
    .with_riders(r)
}

#[test]
fn a_tcp_transfer_rides_in_probes_intact_under_loss() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A short queue: trains and the transfer together overflow it, so probes, riders and plain
    // segments are lost.
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: 10_000_000,
            buffer: Buffer::Packets(12),
            delay: Some(Duration::from_millis(5)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let agent = receiver(&tb);
    let riders = sender(&tb, OptIn::TcpPort(6001));
    let server = spawn_in(&tb.ns(Role::Rcv), "server", || {
        let l = TcpListener::bind("0.0.0.0:6001").unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        Ok((got.len(), Sha256::digest(&got).to_vec()))
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (st, r) = (stop.clone(), riders.clone());
    let prober = spawn_in(&tb.ns(Role::Snd), "prober", move || {
        let mut s = rider_session(r);
        let mut trains = 0;
        // Large probes (whole small segments fit) and small ones (segments are fragmented).
        let specs = [
            TrainSpec::uniform(20, 1472, 1_000_000),
            TrainSpec::uniform(30, 300, 200_000),
        ];
        let mut specs: Vec<TrainSpec> = specs
            .into_iter()
            .map(|mut t| {
                t.probes.iter_mut().for_each(|p| p.may_carry = true);
                t
            })
            .collect();
        while !st.load(Ordering::Relaxed) {
            let t = &mut specs[trains % 2];
            s.expect_next_train(mgrp_clock::now_ns() + 2_000_000);
            s.send_train(t).unwrap();
            trains += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(trains)
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let sent = spawn_in(&tb.ns(Role::Snd), "client", || {
        let mut c = TcpStream::connect(format!("{}:6001", Role::Rcv.addr())).unwrap();
        c.set_nodelay(true).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut data = vec![0u8; 2_000_000];
        rng.fill(&mut data[..]);
        let mut i = 0;
        // Writes of random sizes: small segments ride whole, large ones in fragments.
        while i < data.len() {
            let n = rng.random_range(50..3000).min(data.len() - i);
            c.write_all(&data[i..i + n]).unwrap();
            i += n;
            // About 12 Mbit/s offered: the transfer lasts seconds, across many trains.
            std::thread::sleep(Duration::from_micros(1000));
        }
        c.shutdown(std::net::Shutdown::Write).unwrap();
        Ok((data.len(), Sha256::digest(&data).to_vec()))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let got = server.join().unwrap().unwrap();
    stop.store(true, Ordering::Relaxed);
    let trains = prober.join().unwrap().unwrap();
    assert_eq!(got, sent, "the file arrived changed");
    let c = riders.counters();
    let b = riders.buffer_counters().unwrap();
    let (rx, re) = agent.rider_counters().unwrap();
    let re = re.unwrap();
    let drops = mgrp_testbed::truth::CounterSet::open(&tb)
        .unwrap()
        .bottleneck()
        .unwrap()
        .drops;
    eprintln!(
        "{trains} trains; sent {c:?}; buffer whole {} fragments {}; received {rx:?}; reassembly {re:?}; bottleneck drops {drops}",
        b.riders_whole, b.riders_fragments
    );
    assert!(b.riders_whole > 0 && b.riders_fragments > 0, "{b:?}");
    assert!(re.reassembled > 0 && rx.injected > 0, "{re:?} {rx:?}");
    assert!(
        drops > 0,
        "the path lost nothing: the test did not test loss"
    );
    assert_eq!(rx.bad_tag + rx.wrong_inner + rx.replayed, 0, "{rx:?}");
}

/// An IPv4/UDP packet (no UDP checksum) from `src` to `dst:port` carrying `payload`.
fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, port: u16, payload: &[u8]) -> Vec<u8> {
    let len = 20 + 8 + payload.len();
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let mut sum: u32 = (0..10)
        .map(|i| u16::from_be_bytes([p[2 * i], p[2 * i + 1]]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

/// A standalone rider (train 0) of `session`, tagged with `k`.
fn standalone(k: &Key, session: u32, seq: u32, frag_id: u32, last: bool, data: &[u8]) -> Vec<u8> {
    let h = ProbeHeader {
        session,
        seq,
        train: 0,
        index: 0,
        train_len: 1,
        ..Default::default()
    };
    let tag = k.rider_tag(&RiderTagInput {
        session,
        seq,
        train: 0,
        index: 0,
        frag_id,
        offset: 0,
        proto: 17,
        last,
        data,
    });
    let r = Rider {
        frag_id,
        offset: 0,
        proto: RiderProto::Udp,
        last,
        data,
        tag,
    };
    let size = probe::header_len(Some(data.len()));
    let mut buf = vec![0u8; size];
    probe::encode(&h, &[r], size, &mut buf).unwrap();
    buf
}

#[test]
fn forged_replayed_misaddressed_and_flooding_riders_are_dropped() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A fast path: the flood must reach the agent, not be cut at the bottleneck.
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: 1_000_000_000,
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let agent = receiver(&tb);
    // A UDP socket in rcv: what the agent injects reaches it.
    let sink = spawn_in(&tb.ns(Role::Rcv), "sink", || {
        let s = UdpSocket::bind("0.0.0.0:6100").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Ok(s)
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let received = |sink: &UdpSocket| {
        let mut n = 0;
        let mut buf = [0u8; 2048];
        while sink.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    };
    let counts = spawn_in(&tb.ns(Role::Snd), "forger", move || {
        let pacer = Arc::new(Pacer::spawn().unwrap());
        let mut s = Session::connect(listen(), &key(), pacer, Duration::from_secs(3)).unwrap();
        let id = s.session_id();
        let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
        udp.connect(listen()).unwrap();
        let good = udp_packet(snd_ip(), rcv_ip(), 6100, b"hello");
        let other = Key::random();
        // A wrong key's tag.
        udp.send(&standalone(&other, id, 1, 1, true, &good))
            .unwrap();
        // A right tag on a packet that claims another source.
        let spoofed = udp_packet(Ipv4Addr::new(10, 9, 9, 9), rcv_ip(), 6100, b"spoof");
        udp.send(&standalone(&key(), id, 2, 2, true, &spoofed))
            .unwrap();
        // ... or that is for another host.
        let elsewhere = udp_packet(snd_ip(), Ipv4Addr::new(10, 9, 9, 9), 6100, b"away");
        udp.send(&standalone(&key(), id, 3, 3, true, &elsewhere))
            .unwrap();
        // A good one, then the same again (a replay).
        let ok = standalone(&key(), id, 4, 4, true, &good);
        udp.send(&ok).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        udp.send(&ok).unwrap();
        // A rider in a probe of a train already reported: stale, never injected.
        let mut t = TrainSpec::uniform(2, 200, 100_000);
        t.probes.iter_mut().for_each(|p| p.may_carry = true);
        let r = s.send_train(&t).unwrap();
        let h = ProbeHeader {
            session: id,
            seq: 0,
            train: r.train,
            index: 0,
            train_len: 2,
            ..Default::default()
        };
        let tag = key().rider_tag(&RiderTagInput {
            session: id,
            seq: 0,
            train: r.train,
            index: 0,
            frag_id: 9,
            offset: 0,
            proto: 17,
            last: true,
            data: &good,
        });
        let rider = Rider {
            frag_id: 9,
            offset: 0,
            proto: RiderProto::Udp,
            last: true,
            data: &good,
            tag,
        };
        let mut buf = vec![0u8; 200];
        probe::encode(&h, &[rider], 200, &mut buf).unwrap();
        udp.send(&buf).unwrap();
        // A flood of first fragments that never complete.
        for i in 0..3_000u32 {
            let frag = vec![0u8; 600];
            udp.send(&standalone(&key(), id, 1000 + i, 100_000 + i, false, &frag))
                .unwrap();
            // Paced, so the socket's receive buffer does not drop them first.
            if i % 20 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    })
    .unwrap()
    .join()
    .unwrap();
    counts.unwrap();
    let (rx, re) = agent.rider_counters().unwrap();
    let re = re.unwrap();
    let c = agent.counters();
    eprintln!("received {rx:?}\nreassembly {re:?}\nagent {c:?}");
    assert_eq!(rx.bad_tag, 1, "{rx:?}");
    assert_eq!(rx.wrong_inner, 2, "{rx:?}");
    assert_eq!(rx.replayed, 1, "{rx:?}");
    assert_eq!(rx.injected, 1, "only the good one: {rx:?}");
    assert_eq!(received(&sink), 1, "the kernel got exactly the good packet");
    assert!(c.probes_stale >= 1, "{c:?}");
    // Bounded: 3000 open packets; the table keeps at most 1024 (and 4 MiB), the oldest evicted.
    assert!(re.fragments >= 2_900, "the flood did not arrive: {re:?}");
    assert!(re.buckets <= 1024 && re.bytes_held <= 4 << 20, "{re:?}");
    assert!(re.evicted >= 1_900, "{re:?}");
}

#[test]
fn without_a_train_pending_opted_in_traffic_is_not_delayed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = Testbed::up(TestbedConfig::default(), DelayMode::Thread).unwrap();
    let _agent = receiver(&tb);
    spawn_in(&tb.ns(Role::Rcv), "echo", || {
        let l = TcpListener::bind("0.0.0.0:6002").unwrap();
        std::thread::spawn(move || {
            for c in l.incoming().take(2) {
                let Ok(mut c) = c else { continue };
                let _ = c.set_nodelay(true);
                let mut b = [0u8; 1];
                while c.read_exact(&mut b).is_ok() && c.write_all(&b).is_ok() {}
            }
        });
        Ok(())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let rtts = |tb: &Testbed| -> Vec<f64> {
        spawn_in(&tb.ns(Role::Snd), "pinger", || {
            let mut c = TcpStream::connect(format!("{}:6002", Role::Rcv.addr())).unwrap();
            c.set_nodelay(true).unwrap();
            let mut v = Vec::new();
            let mut b = [0u8; 1];
            for _ in 0..200 {
                let t = Instant::now();
                c.write_all(b"x").unwrap();
                c.read_exact(&mut b).unwrap();
                v.push(t.elapsed().as_secs_f64() * 1e3);
            }
            v.sort_by(f64::total_cmp);
            Ok(v)
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap()
    };
    let riders = sender(&tb, OptIn::TcpPort(6002));
    let on = rtts(&tb);
    let c = riders.counters();
    let b = riders.buffer_counters().unwrap();
    drop(riders);
    let off = rtts(&tb);
    let (m_on, m_off) = (on[on.len() / 2], off[off.len() / 2]);
    eprintln!(
        "median RTT through the shim {m_on:.3} ms, without it {m_off:.3} ms; {c:?}, held {}",
        b.held
    );
    assert!(
        c.passed_through >= 200,
        "the traffic did not go through the shim: {c:?}"
    );
    assert_eq!(b.held, 0, "nothing to wait for, yet packets were held");
    // Holding would add T = 10 ms; the shim's own path (TUN, raw socket) costs far less.
    assert!(m_on < m_off + 1.0, "{m_on} vs {m_off} ms");
}

/// What SLoPS-like streams (100 probes of 200 bytes at 3–9 Mbit/s, back to back) left beside a
/// 4 Mbit/s application flow to the peer (5000 bytes every 10 ms for 6 s, opted in on TCP
/// port 6003) on a 10 Mbit/s path with 40 ms RTT, with riders configured as `cfg`.
struct BesideAFlow {
    trains: usize,
    /// Probe bytes the trains asked for.
    asked: u64,
    /// The flow's bytes written and read at the peer.
    sent: usize,
    got: usize,
    c: mgrp_engine::riders::RiderSendCounters,
    /// Share of the asked probe bytes that did not leave as probe-only (empty) probes.
    shed: f64,
}

fn probe_beside_a_4_mbit_flow(cfg: RiderConfig) -> BesideAFlow {
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: 10_000_000,
            delay: Some(Duration::from_millis(20)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap();
    let _agent = receiver(&tb);
    let riders = sender_with(
        &tb,
        RiderConfig {
            opt_in: vec![OptIn::TcpPort(6003)],
            ..cfg
        },
    );
    let server = spawn_in(&tb.ns(Role::Rcv), "server", || {
        let l = TcpListener::bind("0.0.0.0:6003").unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        Ok(got.len())
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    // 5000 bytes every 10 ms: 4 Mbit/s that does not adapt, for 6 s.
    let flow = spawn_in(&tb.ns(Role::Snd), "flow", move || {
        let mut c = TcpStream::connect(format!("{}:6003", Role::Rcv.addr())).unwrap();
        let t0 = Instant::now();
        let mut sent = 0;
        for i in 0..600u32 {
            let due = Duration::from_millis(10 * i as u64);
            if let Some(w) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(w);
            }
            c.write_all(&[i as u8; 5000]).unwrap();
            sent += 5000;
        }
        st.store(true, Ordering::Relaxed);
        c.shutdown(std::net::Shutdown::Write).unwrap();
        Ok(sent)
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (st, r) = (stop.clone(), riders.clone());
    let prober = spawn_in(&tb.ns(Role::Snd), "prober", move || {
        let mut s = rider_session(r);
        let mut asked = 0u64;
        let mut i = 0usize;
        while !st.load(Ordering::Relaxed) && i < 2000 {
            let rate = [3e6, 6e6, 9e6][i % 3];
            let t = TrainSpec::constant_rate(100, 200, rate);
            s.expect_next_train(mgrp_clock::now_ns());
            s.send_train(&t).unwrap();
            asked += t.bytes();
            i += 1;
        }
        Ok((i, asked))
    })
    .unwrap();
    let sent = flow.join().unwrap().unwrap();
    let (trains, asked) = prober.join().unwrap().unwrap();
    let got = server.join().unwrap().unwrap();
    let c = riders.counters();
    let shed = 1.0 - c.empty_bytes as f64 / asked as f64;
    eprintln!(
        "{trains} trains, {asked} bytes asked; probe-only {} bytes, shed {:.1}%; {c:?}",
        c.empty_bytes,
        100.0 * shed
    );
    BesideAFlow {
        trains,
        asked,
        sent,
        got,
        c,
        shed,
    }
}

/// Elastic probing (seed 000 §8.3): with a 4 Mbit/s application flow to the peer, SLoPS-like
/// streams wait briefly for riders and end early once none are left, so almost no probe leaves
/// with padding only; the flow's bytes all arrive.
#[test]
fn elastic_trains_shed_probe_only_bytes_beside_a_4_mbit_flow() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    mgrp_testbed::stolen::unless_stolen(
        "elastic_trains_shed_probe_only_bytes_beside_a_4_mbit_flow",
        |_| {
            let r = probe_beside_a_4_mbit_flow(RiderConfig {
                elastic: Some(mgrp_engine::riders::ElasticConfig::default()),
                ..RiderConfig::default()
            });
            assert_eq!(r.got, r.sent, "the flow's bytes did not all arrive");
            assert!(r.c.elastic_skipped > 0, "no train was shortened: {:?}", r.c);
            assert!(
                r.c.rider_bytes > r.sent as u64 / 4,
                "little rode: {:?}",
                r.c
            );
            // Issue 13's target. Over 4 runs on this machine (load average ~15 from other builds)
            // the shed was 99.5–100%: 95% leaves room for a slower host without hiding a regression
            // (rigid trains shed 67–79% in `mgrp bench riders`).
            assert!(
                r.shed >= 0.95,
                "probe-only bytes shed {:.1}%",
                100.0 * r.shed
            );
        },
    )
}

/// Least share of probe-only bytes whole waiting trains must shed (issue 13's 95%). Measured
/// here (2026-11-29): 99.99–100% (4 runs, 82–85 trains of 6 s; 99.8–99.9% in 2 runs under a
/// wait rule tried and reverted); the same trains rigid with T = 10 ms shed 84.0% and 84.1%
/// (2 runs), so the bound tells them apart.
const SHED_WHOLE: f64 = 0.95;

/// Whole trains that wait (`elastic_share` = 1, a 60 ms wait, T = 80 ms): no probe is left out,
/// so every stream is as long as planned, yet the held flow fills nearly all of them; the
/// flow's bytes all arrive.
#[test]
fn whole_trains_that_wait_carry_the_flow_beside_them() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    mgrp_testbed::stolen::unless_stolen("whole_trains_that_wait_carry_the_flow_beside_them", |_| {
        let r = probe_beside_a_4_mbit_flow(RiderConfig {
            hold: Duration::from_millis(80),
            elastic: Some(mgrp_engine::riders::ElasticConfig {
                max_wait_ns: 60_000_000,
                min_share: 1.0,
            }),
            ..RiderConfig::default()
        });
        assert_eq!(r.got, r.sent, "the flow's bytes did not all arrive");
        assert_eq!(
            r.c.elastic_skipped, 0,
            "a whole train was shortened: {:?}",
            r.c
        );
        assert!(r.trains >= 20, "only {} trains in 6 s", r.trains);
        assert!(
            r.asked > 0 && r.c.elastic_waits > 0,
            "no train waited: {:?}",
            r.c
        );
        assert!(
            r.shed >= SHED_WHOLE,
            "probe-only bytes shed {:.1}%",
            100.0 * r.shed
        );
    })
}
