//! Two agents in testbed namespaces: trains, authentication, bad input, vanishing peers.

mod common;
use common::key;
use common::testbed;
use common::SERIAL;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::pacer::Pacer;
use mgrp_engine::train::{ProbeSpec, TrainResult, TrainSpec};
use mgrp_engine::Error;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, Testbed};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn agent_in(tb: &Testbed, role: Role, key: Key) -> Agent {
    let listen: SocketAddr = format!("{}:7240", role.addr()).parse().unwrap();
    spawn_in(&tb.ns(role), "agent", move || {
        Ok(Agent::start(AgentConfig::new(listen, key)).expect("agent starts"))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

fn peer(role: Role) -> SocketAddr {
    format!("{}:7240", role.addr()).parse().unwrap()
}

/// Open a session from `from` to the agent at rcv and run `f` with it.
fn with_session<T: Send + 'static>(
    tb: &Testbed,
    from: Role,
    key: Key,
    f: impl FnOnce(Result<Session, Error>) -> T + Send + 'static,
) -> T {
    spawn_in(&tb.ns(from), "client", move || {
        let pacer = Arc::new(Pacer::spawn().unwrap());
        Ok(f(Session::connect(
            peer(Role::Rcv),
            &key,
            pacer,
            Duration::from_secs(3),
        )))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

fn send(tb: &Testbed, spec: TrainSpec) -> TrainResult {
    with_session(tb, Role::Snd, key(), move |s| {
        s.unwrap().send_train(&spec).unwrap()
    })
}

#[test]
fn every_probe_accounted_for_at_its_exact_size() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    mgrp_testbed::stolen::unless_stolen("every_probe_accounted_for_at_its_exact_size", |_| {
        let tb = testbed();
        let agent = agent_in(&tb, Role::Rcv, key());
        let r = send(&tb, TrainSpec::uniform(100, 1000, 100_000));
        assert_eq!(r.probes.len(), 100);
        assert_eq!(r.stats.sent + r.stats.send_errors, 100);
        assert_eq!(r.stats.received + r.stats.lost, r.stats.sent);
        assert_eq!(r.stats.lost, 0, "idle 1 Gbit/s path: {:?}", r.stats);
        assert!(r.probes.iter().all(|p| p.rx_size == Some(1000)));
        assert!(!r.stats.report_missing);
        let g = r.stats.gap_error.unwrap();
        assert_eq!(g.n, 99);
        // Receive gaps of a 100 us train on an idle path stay near 100 us.
        assert!(
            (r.dispersion_ns().unwrap() as f64 - 9.9e6).abs() < 1e6,
            "{:?}",
            r.dispersion_ns()
        );

        // Mixed sizes, each exactly as asked.
        let sizes = [32u16, 64, 500, 1000, 1472];
        let spec = TrainSpec {
            probes: (0..50)
                .map(|i| ProbeSpec {
                    size: sizes[i % 5],
                    gap_ns: 50_000,
                    ttl: None,
                    may_carry: i % 2 == 0,
                })
                .collect(),
            tolerance_ns: None,
            reach_ttl: None,
        };
        let r = send(&tb, spec);
        for p in &r.probes {
            assert_eq!(p.rx_size, Some(p.size), "probe {}", p.index);
        }
        let c = agent.stop();
        assert_eq!(c.probes_ok, 150);
        assert_eq!(c.reports_sent, 2);
        assert_eq!(
            c.probes_malformed + c.probes_unknown_session + c.probes_wrong_source,
            0
        );
    })
}

#[test]
fn wrong_key_gets_nothing_and_others_are_unaffected() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed();
    let agent = agent_in(&tb, Role::Rcv, key());
    let wrong = Key::from_hex("ffeeddccbbaa99887766554433221100").unwrap();
    let e = with_session(&tb, Role::Snd, wrong, |s| {
        s.err().expect("wrong key must fail").to_string()
    });
    assert!(e.contains("wrong key"), "{e}");
    assert_eq!(agent.counters().auth_failures, 1);
    let r = send(&tb, TrainSpec::uniform(20, 200, 20_000));
    assert_eq!(r.stats.received, 20);
}

#[test]
fn forged_truncated_oversized_and_replayed_input_is_counted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed();
    let agent = agent_in(&tb, Role::Rcv, key());
    // A live session from snd, kept open while others misbehave.
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let legit = std::thread::spawn({
        let ns = tb.ns(Role::Snd);
        move || {
            mgrp_testbed::netns::enter(&ns).unwrap();
            let pacer = Arc::new(Pacer::spawn().unwrap());
            let mut s =
                Session::connect(peer(Role::Rcv), &key(), pacer, Duration::from_secs(3)).unwrap();
            tx.send(s.session_id()).unwrap();
            go_rx.recv().unwrap();
            s.send_train(&TrainSpec::uniform(30, 300, 10_000)).unwrap()
        }
    });
    let session = rx.recv().unwrap();
    spawn_in(&tb.ns(Role::Xsnd), "attacker", move || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        let to = peer(Role::Rcv);
        let mut buf = vec![0u8; 400];
        let mut h = mgrp_wire::probe::ProbeHeader {
            session,
            train: 1,
            train_len: 5,
            ..Default::default()
        };
        // The live session's id, from the wrong address.
        mgrp_wire::probe::encode(&h, &[], 400, &mut buf).unwrap();
        sock.send_to(&buf, to).unwrap();
        // A session id nobody has.
        h.session = session.wrapping_add(1);
        mgrp_wire::probe::encode(&h, &[], 400, &mut buf).unwrap();
        sock.send_to(&buf, to).unwrap();
        // Truncated, garbage, oversized.
        sock.send_to(&buf[..10], to).unwrap();
        sock.send_to(&[0xab; 700], to).unwrap();
        sock.send_to(&vec![1u8; 9000], to).unwrap();
        Ok(())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    // A replayed hello: the same bytes twice from a raw TCP client.
    spawn_in(&tb.ns(Role::Xsnd), "replayer", move || {
        use std::io::Write;
        let k = key();
        let nonce = [7u8; 16];
        let ms = mgrp_clock::realtime_ns() / 1_000_000;
        let mut hello = Vec::new();
        mgrp_wire::control::Control::ClientHello {
            version: mgrp_wire::VERSION,
            nonce,
            unix_ms: ms,
            mac: k.client_mac(&nonce, ms),
        }
        .encode(&mut hello)
        .unwrap();
        for _ in 0..2 {
            let mut c = std::net::TcpStream::connect(peer(Role::Rcv)).unwrap();
            c.write_all(&hello).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    go_tx.send(()).unwrap();
    let r = legit.join().unwrap();
    assert_eq!(r.stats.received, 30, "the live session is unaffected");
    let c = agent.counters();
    assert_eq!(c.probes_wrong_source, 1, "{c:?}");
    assert_eq!(c.probes_unknown_session, 1, "{c:?}");
    assert_eq!(c.probes_malformed, 3, "{c:?}");
    assert_eq!(c.auth_replays, 1, "{c:?}");
    assert_eq!(
        c.sessions_opened, 2,
        "legit + the first copy of the hello: {c:?}"
    );
}

#[test]
fn a_vanishing_peer_ends_the_train_with_losses() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed();
    let agent = agent_in(&tb, Role::Rcv, key());
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        agent.stop()
    });
    let t0 = Instant::now();
    // 2 s train; the receiver vanishes 0.4 s in.
    let r = send(&tb, TrainSpec::uniform(2000, 200, 1_000_000));
    let took = t0.elapsed();
    stopper.join().unwrap();
    assert!(r.stats.report_missing, "{:?}", r.stats);
    assert_eq!(r.stats.received, 0);
    assert_eq!(r.stats.lost, r.stats.sent);
    assert!(took < Duration::from_secs(6), "bounded wait, took {took:?}");
}

/// A relay: the agent at rcv sends a train and runs a load flow toward an agent (here itself)
/// for a client at snd, answers with what its own session saw, and counts it; a relay toward
/// an address where no agent answers fails with the reason, and counts the refusal.
#[test]
fn a_relay_sends_trains_and_a_load_for_its_client_and_refuses_a_dead_target() {
    use mgrp_engine::relay::RelaySession;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed();
    let agent = agent_in(&tb, Role::Rcv, key());
    let (train, samples, report, dead) = spawn_in(&tb.ns(Role::Snd), "coordinator", move || {
        let pacer = Arc::new(Pacer::spawn().unwrap());
        let open = |dst| {
            RelaySession::open(
                peer(Role::Rcv),
                dst,
                &key(),
                pacer.clone(),
                Duration::from_secs(3),
                Duration::from_secs(30),
            )
        };
        let mut r = open(peer(Role::Rcv)).unwrap();
        assert_eq!(r.peer(), peer(Role::Rcv));
        assert_eq!(r.local().map(|a| a.ip()), Some(peer(Role::Rcv).ip()));
        let train = r.send_train(&TrainSpec::uniform(20, 800, 100_000)).unwrap();
        // Like a session, a relay that sent trains cannot become a load: another one can.
        let refused = r
            .into_load(Duration::from_secs(5), 200_000_000, None)
            .err()
            .map(|e| e.to_string());
        assert!(
            refused
                .as_deref()
                .unwrap_or("")
                .contains("open another relay"),
            "{refused:?}"
        );
        // To itself, inside one namespace: several Gbit/s, so a budget that lasts.
        let mut load = open(peer(Role::Rcv))
            .unwrap()
            .into_load(Duration::from_secs(3), 4 << 30, None)
            .unwrap();
        let mut samples = Vec::new();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(150));
            samples.push(load.sample().unwrap().bytes_acked);
        }
        let report = load.stop();
        let dead = open(SocketAddr::new(peer(Role::Rcv).ip(), 7999))
            .err()
            .map(|e| e.to_string());
        Ok((train, samples, report, dead))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(
        train.probes.iter().filter(|p| p.rx_ns.is_some()).count(),
        20
    );
    assert!(
        samples.windows(2).all(|w| w[1] > w[0]) && samples[0] > 0,
        "the relayed flow moves: {samples:?}"
    );
    assert!(
        !report.failed && report.bytes_acked >= samples[2],
        "{report:?}"
    );
    let dead = dead.expect("a relay to a dead agent fails");
    assert!(dead.contains("7999"), "{dead}");
    let c = agent.counters();
    assert_eq!((c.relays, c.relays_refused), (2, 1), "{c:?}");
    assert!(c.relay_calls >= 6, "{c:?}");
}
