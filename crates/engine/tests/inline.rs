//! The inline engine between namespaces: a kernel TCP transfer through it arrives byte-identical
//! while its segments are held and released as measurement streams; its estimates track the
//! testbed's ground truth under CBR cross traffic; the agent killed mid-transfer leaves the
//! transfer to complete; a port already opted into riders is refused.

mod common;
use common::key;
use mgrp_engine::inline::{FlowStatus, InlineConfig, InlineEngine};
use mgrp_engine::riders::{RiderConfig, RiderSender};
use mgrp_shim::route::OptIn;
use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Buffer, CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn path(capacity_bps: u64, buffer: Buffer, delay_ms: u64) -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps,
            buffer,
            delay: Some(Duration::from_millis(delay_ms)),
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .expect("testbed (needs root)")
}

/// The inline engine in snd, for TCP to `port`.
fn engine(tb: &Testbed, port: u16, access_bps: f64) -> InlineEngine {
    spawn_in(&tb.ns(Role::Snd), "inline", move || {
        let cfg = InlineConfig::new(vec![OptIn::TcpPort(port)], access_bps);
        Ok(InlineEngine::start(&cfg).expect("inline engine starts"))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

/// Stop the engine inside snd, so its routing is undone in that namespace.
fn stop(tb: &Testbed, e: InlineEngine) -> Vec<FlowStatus> {
    spawn_in(&tb.ns(Role::Snd), "inline-stop", move || {
        let flows = e.flows();
        drop(e);
        Ok(flows)
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

/// A server in rcv on `port` that reads one connection to the end: (bytes, SHA-256).
fn server(
    tb: &Testbed,
    port: u16,
) -> std::thread::JoinHandle<Result<(usize, Vec<u8>), mgrp_testbed::Error>> {
    spawn_in(&tb.ns(Role::Rcv), "server", move || {
        let l = TcpListener::bind(("0.0.0.0", port)).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        Ok((got.len(), Sha256::digest(&got).to_vec()))
    })
    .unwrap()
}

/// A client in snd sending `bytes` of seeded random data to rcv:`port` as fast as TCP goes.
fn client(
    tb: &Testbed,
    port: u16,
    bytes: usize,
) -> std::thread::JoinHandle<Result<(usize, Vec<u8>), mgrp_testbed::Error>> {
    spawn_in(&tb.ns(Role::Snd), "client", move || {
        let mut c = TcpStream::connect((Role::Rcv.addr(), port)).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(16);
        let mut data = vec![0u8; bytes];
        rng.fill(&mut data[..]);
        c.write_all(&data).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        Ok((data.len(), Sha256::digest(&data).to_vec()))
    })
    .unwrap()
}

#[test]
fn a_20mb_transfer_through_the_inline_engine_arrives_intact() {
    let _g = common::serial();
    // 50 Mbit/s, 40 ms RTT, a 60-packet queue: CUBIC overflows it, so segments (held ones
    // too) are lost and retransmitted while streams are formed.
    let tb = path(50_000_000, Buffer::Packets(60), 20);
    let e = engine(&tb, 6301, 1e9);
    let srv = server(&tb, 6301);
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let sent = client(&tb, 6301, 20_000_000).join().unwrap().unwrap();
    let got = srv.join().unwrap().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let driver = e.counters();
    let flows = stop(&tb, e);
    assert_eq!(got, sent, "the data arrived changed");
    let f = flows
        .iter()
        .find(|f| f.flow.remote.port() == 6301)
        .expect("the flow was seen");
    eprintln!(
        "{secs:.1} s; driver {driver:?}; flow {:?}; retrans {}",
        f.counters, f.total_retrans
    );
    // The engine did hold segments and measure: the test exercised it.
    assert!(
        f.counters.held > 1000 && f.counters.streams_sent > 20,
        "{:?}",
        f.counters
    );
    assert!(f.counters.measurements > 5, "{:?}", f.counters);
    assert_eq!(driver.send_errors, 0);
}

/// Lose and reorder the ACKs (everything rcv sends back toward snd's subnet) in r2, ahead of
/// the testbed's reverse delay line: a second TUN line there (`LineParams::reorder` holds a
/// share of packets longer so later ones overtake them). Dropped, it removes its device.
fn impair_acks(tb: &Testbed, loss: &str, reorder_p: f64) -> mgrp_testbed::delayline::DelayLine {
    use mgrp_testbed::delayline::{DelayLine, LineParams, Reorder};
    let r2 = tb.ns(Role::R2);
    let line = DelayLine::start_with(
        vec![r2.clone()],
        "ackimp",
        LineParams {
            delay: Duration::ZERO,
            loss: Some(mgrp_testbed::LossModel::parse(loss).unwrap()),
            seed: 16,
            reorder: Some(Reorder {
                p: reorder_p,
                extra: Duration::from_millis(2),
            }),
        },
    )
    .expect("ACK impairment line");
    // What leaves the line goes on into the testbed's reverse delay line when there is one (a
    // TUN line), else straight to r1.
    let has_dly = std::process::Command::new("ip")
        .args(["-n", &r2, "link", "show", mgrp_testbed::topology::DELAY_DEV])
        .output()
        .is_ok_and(|o| o.status.success());
    let onward = if has_dly {
        format!("dev {}", mgrp_testbed::topology::DELAY_DEV)
    } else {
        "via 198.18.0.1".to_string()
    };
    let script = format!(
        "link set ackimp txqueuelen 10000 up\nrule add iif ackimp lookup 7301 pref 7301\n\
         route add 198.18.1.0/24 {onward} table 7301\nroute replace 198.18.1.0/24 dev ackimp\n"
    );
    let out = std::process::Command::new("ip")
        .args(["-n", &r2, "-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(script.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(out.success(), "routing into the ACK line");
    line
}

#[test]
fn a_20mb_transfer_arrives_intact_under_ack_loss_and_reordering() {
    let _g = common::serial();
    // 50 Mbit/s, 40 ms RTT; 2% of the ACKs lost and 5% held 2 ms longer (overtaken by the
    // next ones), on the way back only: the engine sees duplicate-looking, old and missing
    // ACKs while it holds and releases segments.
    let tb = path(50_000_000, Buffer::Packets(200), 20);
    let line = impair_acks(&tb, "2%", 0.05);
    let e = engine(&tb, 6304, 1e9);
    let srv = server(&tb, 6304);
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let sent = client(&tb, 6304, 20_000_000).join().unwrap().unwrap();
    let got = srv.join().unwrap().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let driver = e.counters();
    let flows = stop(&tb, e);
    let acks = line.stop();
    assert_eq!(got, sent, "the data arrived changed");
    let f = flows
        .iter()
        .find(|f| f.flow.remote.port() == 6304)
        .expect("the flow was seen");
    eprintln!(
        "{secs:.1} s; ACK line {acks:?}; driver {driver:?}; flow {:?}",
        f.counters
    );
    // The impairment happened: ACKs were lost and overtaken (each about its share of some
    // thousands of ACKs: a count this far below it means the line was bypassed).
    assert!(acks.seen > 2000, "{acks:?}");
    assert!(
        acks.lost > acks.seen / 200 && acks.reordered > acks.seen / 100,
        "{acks:?}"
    );
    // And the engine held and measured through it.
    assert!(
        f.counters.held > 1000 && f.counters.streams_sent > 20,
        "{:?}",
        f.counters
    );
    assert_eq!(driver.send_errors, 0);
}

#[test]
fn a_port_opted_into_riders_is_refused() {
    let _g = common::serial();
    let tb = path(100_000_000, Buffer::Packets(100), 1);
    let err = spawn_in(&tb.ns(Role::Snd), "both", || {
        let cfg = RiderConfig {
            opt_in: vec![OptIn::TcpPort(6302)],
            ..RiderConfig::default()
        };
        let riders = RiderSender::start(&cfg, key()).expect("riders start");
        let inline = InlineEngine::start(&InlineConfig::new(vec![OptIn::TcpPort(6302)], 1e9));
        let err = inline.err().map(|e| e.to_string());
        // Another port is fine.
        let other = InlineEngine::start(&InlineConfig::new(vec![OptIn::TcpPort(6303)], 1e9));
        let other_ok = other.is_ok();
        drop(other);
        drop(riders);
        let udp = InlineEngine::start(&InlineConfig::new(vec![OptIn::UdpPort(6304)], 1e9))
            .err()
            .map(|e| e.to_string());
        Ok((err, other_ok, udp))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    let (err, other_ok, udp) = err;
    let err = err.expect("refused");
    assert!(err.contains("already opted into riders"), "{err}");
    assert!(other_ok);
    assert!(udp.expect("refused").contains("TCP flows only"));
}

#[test]
fn inline_estimates_track_the_truth_under_cbr() {
    mgrp_testbed::stolen::unless_stolen("inline_estimates_track_the_truth_under_cbr", |_| {
        let _g = common::serial();
        // C = 50 Mbit/s, 20 Mbit/s CBR cross traffic (A = 30), 40 ms RTT.
        let tb = path(50_000_000, Buffer::Packets(100), 20);
        let e = engine(&tb, 6305, 1e9);
        let pattern = CrossPattern::parse("cbr:20mbit,size=1472").unwrap();
        let sampler = TruthSampler::start(&tb, Duration::from_millis(100)).unwrap();
        let gen = CrossTraffic::start(
            &tb,
            &pattern,
            BASE_PORT,
            &GenOptions {
                max_duration: Duration::from_secs(40),
                ..Default::default()
            },
        )
        .unwrap();
        let srv = server(&tb, 6305);
        std::thread::sleep(Duration::from_millis(500));
        let start_ns = mgrp_testbed::clock::realtime_ns();
        // Estimates are stamped on the realtime clock (the capture's), the truth on the monotonic.
        let offset = start_ns - mgrp_testbed::clock::now_ns();
        // An application-limited sender at 10 Mbit/s: the flow leaves A to measure.
        let cl = spawn_in(&tb.ns(Role::Snd), "client", move || {
            let mut c = TcpStream::connect((Role::Rcv.addr(), 6305)).unwrap();
            let chunk = vec![7u8; 12_500];
            let t0 = Instant::now();
            let mut i = 0u64;
            while t0.elapsed() < Duration::from_secs(15) {
                c.write_all(&chunk).unwrap();
                i += 1;
                // 12.5 kB every 10 ms = 10 Mbit/s, in bursts TCP sends back to back.
                let due = Duration::from_millis(10 * i);
                if let Some(d) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(d);
                }
            }
            c.shutdown(std::net::Shutdown::Write).unwrap();
            Ok(())
        })
        .unwrap();
        cl.join().unwrap().unwrap();
        let _ = srv.join();
        gen.stop().unwrap();
        let truth = sampler.stop().unwrap();
        let flows = stop(&tb, e);
        // How late the delay line (the ACK path's 20 ms) released packets: its jitter is the echoes'.
        let line = tb.delay_stats();
        eprintln!("delay line: {line:?}");
        let f = flows
            .iter()
            .find(|f| f.flow.remote.port() == 6305)
            .expect("flow seen");
        let settled: Vec<(u64, f64)> = f
            .history
            .iter()
            .copied()
            .filter(|(t, _)| *t > start_ns + 5_000_000_000)
            .collect();
        let errs: Vec<f64> = settled
            .iter()
            .filter_map(|(t, v)| {
                let w = truth.window(t - offset - 1_000_000_000, t - offset)?;
                Some((v - w.avail_bps).abs() / w.avail_bps)
            })
            .collect();
        let mut sorted = errs.clone();
        sorted.sort_by(f64::total_cmp);
        let med = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
        eprintln!(
        "{} estimates after settling, median error {med:.3}; kernel delivery rate {:.1} Mbit/s; counters {:?}; first values {:?}",
        settled.len(),
        f.delivery_rate_bps / 1e6,
        f.counters,
        settled
            .iter()
            .take(10)
            .map(|x| (x.1 / 1e6).round())
            .collect::<Vec<_>>()
    );
        assert!(settled.len() >= 10, "{:?}", f.counters);
        // The bound. Four runs of this test on the shared 2-core host read 5.9, 12.6, 5.8
        // and 5.8% (error against the truth of the second before each estimate). With one core kept
        // busy by another process (the whole binary at load average 8-17) it read 5.9, 11.3, 5.7
        // and 9.6% while the delay line (this path's 20 ms, the ACKs') ran under the normal
        // scheduler, its release lateness p99 2.3-3.8 ms; a reported failure read 23.5%. With the
        // line at real-time priority: lateness p99 59-115 µs, errors 3.5, 4.3, 4.1, 4.9, 5.1 (prio
        // 40) and 13.0, 4.9, 5.1, 4.7, 4.7% (prio 60) busy, 3.3, 3.7, 3.8, 3.9% idle
        // (docs/inline.md). The 13.0% run (load average 21) is the remaining risk.
        assert!(med < 0.15, "median error {med}");
    })
}

/// Run only as the child of `the_agent_killed_mid_transfer_leaves_the_transfer_to_complete`,
/// inside snd (by `ip netns exec`): an inline engine that runs until it is killed.
#[test]
#[ignore = "the child process of the kill test"]
fn inline_child() {
    let Ok(port) = std::env::var("MGRP_INLINE_CHILD_PORT") else {
        return;
    };
    let port: u16 = port.parse().unwrap();
    let e = InlineEngine::start(&InlineConfig::new(vec![OptIn::TcpPort(port)], 1e9)).unwrap();
    println!("INLINE-READY");
    std::io::stdout().flush().unwrap();
    // Bounded: the parent kills us long before.
    std::thread::sleep(Duration::from_secs(60));
    drop(e);
}

#[test]
fn the_agent_killed_mid_transfer_leaves_the_transfer_to_complete() {
    use std::io::BufRead;
    let _g = common::serial();
    let tb = path(50_000_000, Buffer::Packets(100), 20);
    let port = 6306;
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &tb.ns(Role::Snd)])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "inline_child", "--ignored", "--nocapture"])
        .env("MGRP_INLINE_CHILD_PORT", port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `ip netns exec` execs the test binary: this pid is the engine's process.
    let pid = child.id();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let t0 = Instant::now();
    loop {
        let l = lines
            .next()
            .expect("the child ended before it was ready")
            .unwrap();
        if l.contains("INLINE-READY") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    let rules = |tb: &Testbed| {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &tb.ns(Role::Snd), "ip", "rule", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("lookup 7250")
    };
    assert!(rules(&tb), "the engine routes the port through its TUN");
    let srv = server(&tb, port);
    std::thread::sleep(Duration::from_millis(100));
    let cl = client(&tb, port, 20_000_000);
    // About a third of the transfer through the engine, then SIGKILL (no clean-up runs).
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: kill(2) on the pid of the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed, not finished");
    let sent = cl.join().unwrap().unwrap();
    let got = srv.join().unwrap().unwrap();
    assert_eq!(
        got, sent,
        "the transfer completed intact after the agent died"
    );
    // The opt-in rule is left behind (nobody undid it) but its table went with the TUN.
    assert!(rules(&tb));
}
