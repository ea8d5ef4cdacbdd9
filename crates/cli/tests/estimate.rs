//! `mgrp estimate` as a user runs it: an `mgrp agent` process in rcv, the estimate process in
//! snd, ground truth read at the bottleneck over the same time.

use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig, TruthSampler};
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{stderr, AgentProc, KEY, MGRP};

const OTHER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn estimate(tb: &Testbed, args: &[&str], key: Option<&str>) -> Output {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &tb.ns(Role::Snd), MGRP, "estimate"])
        .args(args);
    match key {
        Some(k) => c.env("MGRP_KEY", k),
        None => c.env_remove("MGRP_KEY"),
    };
    c.output().unwrap()
}

/// The tests of this file take turns: run together on two cores, each one's pacer, shaper and
/// cross traffic slow the other's (a CI run had both judged tests read their truth ~20% low at
/// once; a later one had `auto` read 20 Mbit/s 6–12% low on a quiet host while the error test
/// flooded its own 100 Mbit/s testbed and paced its capacity trains beside it).
static JUDGED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Cross traffic for a judged run: a source that fell behind skips what it owes instead of
/// sending it back to back (`GenOptions::max_late`).
fn judged_cross() -> GenOptions {
    GenOptions {
        max_late: Some(mgrp_testbed::generator::DEFAULT_MAX_LATE),
        ..Default::default()
    }
}

fn judged() -> std::sync::MutexGuard<'static, ()> {
    JUDGED.lock().unwrap_or_else(|e| e.into_inner())
}

fn testbed(mbit: u64) -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps: mbit * 1_000_000,
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .unwrap()
}

#[test]
fn estimate_errors_are_clear() {
    let _turn = judged();
    let tb = testbed(100);
    let peer = Role::Rcv.addr().to_string();
    // A peer with no agent: refused at once, and the message says what to check.
    let o = estimate(&tb, &[&peer], Some(KEY));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is `mgrp agent` running"),
        "{}",
        stderr(&o)
    );
    // A peer with no route from here.
    let o = estimate(&tb, &["192.0.2.1", "--duration", "5s"], Some(KEY));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("192.0.2.1"), "{}", stderr(&o));
    // Bad arguments are refused before any packet.
    for (args, why) in [
        (&[peer.as_str(), "--duration", "0s"][..], "--duration"),
        (&[peer.as_str(), "--duration", "2h"], "--duration"),
        (&[peer.as_str(), "--capacity", "10bit"], "capacity"),
        (&[peer.as_str(), "--method", "magic"], "magic"),
        (
            &[peer.as_str(), "--continuous", "--ceiling", "0%"],
            "--ceiling",
        ),
        (
            &[peer.as_str(), "--continuous", "--ceiling", "120%"],
            "at most 100%",
        ),
        (&["not-an-address"], "not-an-address"),
    ] {
        let o = estimate(&tb, args, Some(KEY));
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
    // No key at all.
    let o = estimate(&tb, &[&peer], None);
    assert!(stderr(&o).contains("no key"), "{}", stderr(&o));
    // The wrong key: the agent refuses the session and the client says so.
    let _agent = AgentProc::start(&tb, Role::Rcv, None, None);
    let o = estimate(&tb, &[&peer, "--duration", "5s"], Some(OTHER_KEY));
    assert!(!o.status.success());
    assert!(stderr(&o).to_lowercase().contains("key"), "{}", stderr(&o));
    // With the right key, a one-shot estimate's JSON says how many trains it sent and how
    // many of them the host stole CPU from (those were sent again).
    let o = estimate(
        &tb,
        &[&peer, "--method", "capacity", "--duration", "10s", "--json"],
        Some(KEY),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let trains = v["trains"].as_u64().unwrap();
    assert!(trains >= 1, "{v}");
    assert!(v["stolen_trains"].as_u64().unwrap() <= trains, "{v}");
    assert!(v["capacity"]["value_bps"].as_f64().unwrap() > 0.0, "{v}");
}

/// One CBR case per capacity, `auto` in continuous mode for a few seconds: the median of its
/// estimates within 10% of the truth measured over the same time (the accuracy target
/// is a median of 5% over a whole grid; one cell and a handful of estimates get twice that).
#[test]
fn auto_matches_ground_truth_under_cbr() {
    let _turn = judged();
    mgrp_testbed::stolen::unless_stolen("auto_matches_ground_truth_under_cbr", |_| {
        for mbit in [20, 100] {
            let tb = testbed(mbit);
            let c = mbit as f64 * 1e6;
            let _agent = AgentProc::start(&tb, Role::Rcv, None, None);
            let sampler = TruthSampler::start(&tb, Duration::from_millis(50)).unwrap();
            let cross = CrossPattern::parse(&format!("cbr:{}mbit", mbit / 2)).unwrap();
            let gen = CrossTraffic::start(&tb, &cross, BASE_PORT, &judged_cross()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let t0 = mgrp_testbed::clock::now_ns();
            let steal = mgrp_clock::steal::StealSnapshot::take();
            let peer = Role::Rcv.addr().to_string();
            let o = estimate(
                &tb,
                &[
                    &peer,
                    "--continuous",
                    "--method",
                    "auto",
                    "--duration",
                    "6s",
                    "--json",
                ],
                Some(KEY),
            );
            let t1 = mgrp_testbed::clock::now_ns();
            let sent = gen.stop().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            let truth = sampler.stop().unwrap().window(t0, t1).unwrap().avail_bps;
            let m = tb.capacity().bps();
            let mut values: Vec<f64> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    assert_eq!(v["estimate"]["final_"], true, "{l}");
                    v["estimate"]["value_bps"].as_f64().unwrap()
                })
                .collect();
            // Three estimates at least. In 4 s a quiet host gave 3–4 at 20 Mbit/s and 4–7 at 100,
            // and one clean-clone rehearsal (2026-11-29, no steal) gave 2 at 20 Mbit/s (10.16 and
            // 10.28 Mbit/s where the cross traffic left about 10): ~2 s a run. So 6 s.
            // Streams the host stole CPU from are sent again (up to 3 times each), so while it
            // steals `auto` gives fewer: one CI attempt gave 0, 1, 4 and 2 with one CPU losing
            // 26%, 22%, 7% and 3%; then one is asked for, and the accuracy below is judged as ever.
            let stolen = steal.and_then(|s| s.elapsed()).filter(|s| {
                s.disturbed(
                    mgrp_testbed::stolen::MIN_STOLEN_S,
                    mgrp_testbed::stolen::STOLEN_SHARE,
                )
            });
            let need = if stolen.is_some() { 1 } else { 3 };
            assert!(
                values.len() >= need,
                "{mbit} Mbit/s: {values:?} ({})",
                stolen.map_or("no steal".into(), |s| s.to_string())
            );
            values.sort_by(f64::total_cmp);
            let median = values[values.len() / 2];
            eprintln!(
                "{mbit} Mbit/s: median of {} estimates {median:.0}, truth {truth:.0}",
                values.len()
            );
            // Both capacities are held to 10%. At 20 Mbit/s: within 1% in five runs of an
            // earlier day; −1.6…+5.8% in six runs on 2026-11-25 (two with an unrelated process
            // spinning on a core); −11.7% in the one CI run where this file's error test ran
            // beside it (since then the tests take turns). At 100 Mbit/s it was 20% while
            // `auto` read 7–16% low there: the shaper's burst (250 B) served streams slower
            // than the flood-measured C. With 60 µs × C (2026-11-28) six runs read −1.2…−3.7%
            // (one with a core kept busy), and 20 Mbit/s −3.6…+1.5%.
            let bound = 0.10;
            // A capacity flood the host stole from reads the link low by up to the share it
            // stole (`LinkCapacity::steal_corrected_bps`), and the truth (C − X) with it; one
            // CI attempt read its truth at 8.06 for 10 Mbit/s. On a quiet host the band is the
            // truth's.
            let truth_hi = truth + (tb.capacity().steal_corrected_bps() - m);
            assert!(
                median >= truth * (1.0 - bound) && median <= truth_hi * (1.0 + bound),
                "{mbit} Mbit/s: median {median} vs truth {truth} (up to {truth_hi} for steal \
                 during the capacity flood: {:?}), all {values:?}",
                tb.capacity()
            );
            // The truth is C_measured − X, X the half of C the source sent (less what it skipped
            // for being late; 2%: the generator's error at the counters is < 0.5%).
            let skipped = sent.skipped_late as f64 / (sent.sent_packets + sent.skipped_late) as f64;
            let x = c / 2.0 * (1.0 - skipped);
            assert!(
                (truth / (m - x) - 1.0).abs() < 0.02,
                "truth {truth}, measured capacity {m}, cross {x} ({sent:?})"
            );
        }
    })
}

/// `--continuous` without a method tracks: one acquiring search, then estimates from short
/// checks (or a search where a check contradicts the value), the last within 10% of the truth
/// (as `auto` above at 20 Mbit/s), and the probe bytes after the first search within the 2%
/// ceiling of the time they were spread over.
#[test]
fn continuous_tracks_by_default() {
    let _turn = judged();
    mgrp_testbed::stolen::unless_stolen("continuous_tracks_by_default", |_| {
        let tb = testbed(20);
        let _agent = AgentProc::start(&tb, Role::Rcv, None, None);
        let sampler = TruthSampler::start(&tb, Duration::from_millis(50)).unwrap();
        let cross = CrossPattern::parse("cbr:10mbit").unwrap();
        let gen = CrossTraffic::start(&tb, &cross, BASE_PORT, &judged_cross()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t0 = mgrp_testbed::clock::now_ns();
        let peer = Role::Rcv.addr().to_string();
        let o = estimate(
            &tb,
            &[&peer, "--continuous", "--duration", "20s", "--json"],
            Some(KEY),
        );
        let t1 = mgrp_testbed::clock::now_ns();
        gen.stop().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let truth_window = sampler.stop().unwrap().window(t0, t1);
        let truth = truth_window.as_ref().unwrap().avail_bps;
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let method = |v: &serde_json::Value| {
            v["estimate"]["quality"]["method"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(method(&lines[0]), "track:acquire", "{lines:?}");
        assert!(lines.len() >= 3, "{lines:?}");
        assert!(lines[1..].iter().all(|v| method(v).starts_with("track:")));
        // The last, not the median: an acquiring search that read low (7.2 vs 10 Mbit/s in a CI run
        // under load) is held, contradicted and searched again (9.9 at 2.6 s), and that search's
        // ~600 kB is then paid back at 2% of C for ~12 s, so a 10 s run could end on the first
        // value's holds. 20 s leaves room for the rounds after such a search.
        let last = lines.last().unwrap()["estimate"]["value_bps"]
            .as_f64()
            .unwrap();
        assert!(
            (last - truth).abs() <= 0.10 * truth,
            "last {last} vs truth {truth}: {lines:?}"
        );
        // Each line's bytes are its round's, paid for at 2% of C before the next round starts:
        // the rounds between the first line and the last (that one's pay-back runs past the end)
        // fit in the time between them. C is the tracker's own estimate: 3% allowed for its
        // difference from the testbed's measured capacity.
        let bytes: f64 = lines[1..lines.len() - 1]
            .iter()
            .map(|v| v["estimate"]["quality"]["probe_bytes"].as_f64().unwrap())
            .sum();
        let span =
            lines.last().unwrap()["t_s"].as_f64().unwrap() - lines[0]["t_s"].as_f64().unwrap();
        let allowed = 0.02 * 1.03 * tb.capacity().bps() / 8.0 * span;
        assert!(
            bytes <= allowed,
            "{bytes} B in {span} s: more than {allowed} B"
        );
        // The service's bound, as each line states it: the frames of the minute before, at
        // most 2% of C × 1 minute (the run is shorter than a minute: everything it sent).
        for v in &lines {
            let load = v["minute_load_share"].as_f64().unwrap();
            assert!(load > 0.0 && load <= 0.02, "minute load {load}: {v}");
        }
        // And at the bottleneck's counters: every frame from snd in the run (probes, control).
        let w = truth_window.unwrap();
        let sent = w.offered_fg_bps / 8.0 * (t1 - t0) as f64 / 1e9;
        let minute = 0.02 * 1.03 * tb.capacity().bps() / 8.0 * 60.0;
        assert!(
            sent <= minute,
            "{sent} B from snd in the run: more than {minute} B"
        );
    })
}
