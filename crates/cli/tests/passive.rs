//! `mgrp passive` as a user runs it: live capture in a testbed namespace while an application
//! sends, the same capture analysed offline, and bad input.

use mgrp_testbed::app::{AppFlow, AppPattern};
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{stderr, MGRP};

fn passive(args: &[&str]) -> Output {
    Command::new(MGRP)
        .arg("passive")
        .args(args)
        .output()
        .unwrap()
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mgrp-passive-test-{}-{name}", std::process::id()))
}

/// JSON lines that are estimates (not the summary).
fn estimates(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("summary").is_none())
        .collect()
}

fn summary(o: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v.get("summary").is_some())
        .expect("a summary line")
}

/// Live on snd while an application sends messages through a 50 Mbit/s bottleneck; the
/// written pcap, analysed offline, gives exactly the same estimates; they are lower bounds
/// of A on an otherwise idle path (nothing else shares the bottleneck).
#[test]
fn live_and_offline_agree_on_a_recorded_capture() {
    mgrp_testbed::stolen::unless_stolen("live_and_offline_agree_on_a_recorded_capture", |_| {
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 50_000_000,
                delay: Some(Duration::from_millis(10)),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        let flow = AppFlow::start(
            &tb,
            Role::Snd,
            Role::Rcv,
            5300,
            AppPattern::parse("msgs:256kb,every=40ms").unwrap(),
            Some("bbr".into()),
            Duration::from_secs(30),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let pcap = tmp("live.pcap");
        let live = Command::new("ip")
            .args(["netns", "exec", &tb.ns(Role::Snd), MGRP, "passive"])
            .args(["--iface", "eth0", "--duration", "4s", "--json", "--write"])
            .arg(&pcap)
            .output()
            .unwrap();
        let sent = flow.stop().unwrap();
        assert!(live.status.success(), "{}", stderr(&live));
        assert!(sent.sent_bytes > 1_000_000, "{sent:?}");
        let s = summary(&live);
        assert_eq!(s["capture"]["dropped"], 0, "{s}");
        let live_est = estimates(&live);
        assert!(live_est.len() >= 2, "estimates: {live_est:?} summary {s}");
        for e in &live_est {
            let v = e["value_bps"].as_f64().unwrap();
            // A lower bound of A = C on an idle path (frame bits, so at most C).
            assert!(v > 1e6 && v <= 50e6 * 1.02, "{e}");
        }
        let off = passive(&[
            "--pcap",
            pcap.to_str().unwrap(),
            "--local",
            Role::Snd.addr(),
            "--json",
        ]);
        assert!(off.status.success(), "{}", stderr(&off));
        assert_eq!(estimates(&off), live_est);
        let so = summary(&off);
        assert_eq!(
            so["analysis"], s["analysis"],
            "the same trains, judged the same way"
        );
        // A flow filter that matches nothing: no estimates, not an error.
        let none = passive(&[
            "--pcap",
            pcap.to_str().unwrap(),
            "--flow",
            "port 9",
            "--json",
        ]);
        assert!(none.status.success(), "{}", stderr(&none));
        assert!(estimates(&none).is_empty());
        std::fs::remove_file(&pcap).unwrap();
    })
}

#[test]
fn bad_input_is_a_clear_error() {
    // Neither or both sources.
    assert!(!passive(&[]).status.success());
    assert!(!passive(&["--iface", "lo", "--pcap", "x"]).status.success());
    // Files that are not captures, missing, or cut short.
    let text = tmp("text.pcap");
    std::fs::write(&text, "definitely not a capture").unwrap();
    let o = passive(&["--pcap", text.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("not a pcap"),
        "{}",
        stderr(&o)
    );
    let o = passive(&["--pcap", "/nonexistent/file.pcap"]);
    assert!(
        !o.status.success() && stderr(&o).contains("/nonexistent"),
        "{}",
        stderr(&o)
    );
    // A pcap header with an unsupported link type (147, user-defined).
    let mut h = Vec::new();
    h.extend(0xa1b2c3d4u32.to_le_bytes());
    h.extend(2u16.to_le_bytes());
    h.extend(4u16.to_le_bytes());
    h.extend([0u8; 8]);
    h.extend(65535u32.to_le_bytes());
    h.extend(147u32.to_le_bytes());
    let link = tmp("link.pcap");
    std::fs::write(&link, &h).unwrap();
    let o = passive(&["--pcap", link.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("link type 147"),
        "{}",
        stderr(&o)
    );
    // Truncated inside a record: analysed up to the cut, with a warning, not an error.
    let mut cut = h.clone();
    cut[20..24].copy_from_slice(&1u32.to_le_bytes());
    cut.extend([0u8; 16]);
    cut.extend([0u8; 5]);
    let c = tmp("cut.pcap");
    std::fs::write(&c, &cut).unwrap();
    let o = passive(&["--pcap", c.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    // Absurd parameters and interfaces.
    for (args, why) in [
        (
            &["--pcap", "x", "--rate-tolerance", "2"][..],
            "rate-tolerance",
        ),
        (&["--pcap", "x", "--min-train", "1"], "min-train"),
        (&["--pcap", "x", "--window", "1ms"], "window"),
        (
            &["--iface", "no-such-if0", "--duration", "1s"],
            "no-such-if0",
        ),
        (
            &["--pcap", c.to_str().unwrap(), "--flow", "port and"],
            "filter",
        ),
    ] {
        let o = passive(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
    for p in [text, link, c] {
        let _ = std::fs::remove_file(p);
    }
}
