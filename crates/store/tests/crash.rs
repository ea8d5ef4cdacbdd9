//! The store keeps every committed estimate when its process is killed mid-write.

use mgrp_store::{Durability, EstimateStore, Record, Store};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BATCH: u64 = 10;

fn rec(i: u64) -> Record {
    Record {
        path: "198.18.1.2->198.18.3.2".into(),
        metric: "avail_bw".into(),
        t_ns: 1_795_000_000_000_000_000 + i * 1_000_000,
        value: i as f64,
        low: 0.0,
        high: 0.0,
        method: "auto".into(),
        source: "active".into(),
        probe_bytes: 1,
        trains: 1,
        confidence: 1.0,
        elapsed_s: 0.1,
        final_: true,
        timescale_ms: Some(i as f64),
    }
}

/// The child: write batches as fast as it can, saying after each commit how many are in.
fn writer(path: &str) {
    let mut s = Store::open(
        path.as_ref(),
        Durability::Process,
        Duration::from_secs(3600),
    )
    .unwrap();
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    let mut n = 0;
    // Bounded: the parent kills it long before either limit.
    while n < 1_000_000 && t0.elapsed() < Duration::from_secs(30) {
        let batch: Vec<Record> = (n..n + BATCH).map(rec).collect();
        s.insert(&batch).unwrap();
        n += BATCH;
        writeln!(out, "committed {n}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn committed_estimates_survive_kill_9() {
    if let Ok(path) = std::env::var("MGRP_STORE_WRITER") {
        writer(&path);
        return;
    }
    let dir = std::env::temp_dir().join(format!("mgrp-store-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("estimates.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "committed_estimates_survive_kill_9",
            "--nocapture",
        ])
        .env("MGRP_STORE_WRITER", &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut last = 0u64;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("committed ") {
            last = n.parse().unwrap();
            if last >= 2_000 {
                // SIGKILL, by pid, to the child we started: mid-stream, no chance to clean up.
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .unwrap();
                break;
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed");
    assert!(last >= 2_000, "the writer committed {last}");
    let s = Store::open(&db, Durability::Process, Duration::from_secs(3600)).unwrap();
    let n = s.count().unwrap();
    assert!(n >= last, "{n} stored < {last} committed");
    assert_eq!(n % BATCH, 0, "a transaction is all or nothing");
    // The aggregates agree with the rows that survived.
    let rows = s
        .range(
            "198.18.1.2->198.18.3.2",
            "avail_bw",
            0,
            u64::MAX,
            10_000_000,
        )
        .unwrap();
    assert_eq!(rows.len() as u64, n);
    let end = rows.last().unwrap().t_ns + 1;
    let hour = s
        .scale(
            "198.18.1.2->198.18.3.2",
            "avail_bw",
            Duration::from_secs(3600),
            2,
            end,
        )
        .unwrap();
    assert_eq!(hour.points.iter().map(|p| p.n).sum::<u64>(), n);
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
