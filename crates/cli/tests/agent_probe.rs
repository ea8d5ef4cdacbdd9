//! `mgrp agent` at both ends of a testbed and `mgrp probe` between them, as separate processes;
//! the Probe API used by a client in another process.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MGRP: &str = env!("CARGO_BIN_EXE_mgrp");
const KEY: &str = "6d6772702d746573742d6b65792d3132333435363738393031323334353637";

/// A testbed made with `mgrp testbed up` and the agents started in it; all undone on drop.
struct Lab {
    name: String,
    dir: std::path::PathBuf,
    agents: Vec<Child>,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let name = format!("{tag}{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("mgrp-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("key"), KEY).unwrap();
        // Agents refuse key files other users can read.
        std::fs::set_permissions(
            dir.join("key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let o = Command::new(MGRP)
            .args(["testbed", "up", "--name", &name, "--capacity", "100mbit"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Lab {
            name,
            dir,
            agents: Vec::new(),
        }
    }

    fn in_ns(&self, role: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("mgrp-{}-{role}", self.name), MGRP]);
        c
    }

    fn agent(&mut self, role: &str, api: bool) {
        let key = self.dir.join("key");
        let mut c = self.in_ns(role);
        c.args([
            "agent",
            "--key-file",
            key.to_str().unwrap(),
            "--stats-every",
            "0",
        ]);
        if api {
            c.args(["--api", self.sock(role).to_str().unwrap()]);
        } else {
            c.arg("--no-api");
        }
        self.agents.push(
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        if api {
            let t0 = Instant::now();
            while !self.sock(role).exists() {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "agent API socket never appeared"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn sock(&self, role: &str) -> std::path::PathBuf {
        self.dir.join(format!("{role}.sock"))
    }

    fn probe(&self, args: &[&str], env_key: bool) -> Output {
        let mut c = self.in_ns("snd");
        c.arg("probe").args(args);
        if env_key {
            c.env("MGRP_KEY", KEY);
        } else {
            c.env_remove("MGRP_KEY");
        }
        c.output().unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for a in &mut self.agents {
            // SIGTERM to the agents we started (by pid), then reap them.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(a.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = a.wait();
        }
        let _ = Command::new(MGRP)
            .args(["testbed", "down", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn trains(o: &Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn probe_direct_and_through_the_probe_api_of_another_process() {
    let mut lab = Lab::new("ap");
    lab.agent("rcv", false);
    lab.agent("snd", true);

    let direct = trains(&lab.probe(
        &[
            "198.18.3.2",
            "--trains",
            "2",
            "--count",
            "50",
            "--gap",
            "200us",
            "--json",
        ],
        true,
    ));
    let sock = lab.sock("snd");
    let via_api = trains(&lab.probe(
        &[
            "198.18.3.2",
            "--api",
            sock.to_str().unwrap(),
            "--trains",
            "2",
            "--count",
            "50",
            "--gap",
            "200us",
            "--json",
        ],
        false,
    ));
    assert_eq!(direct.len(), 2);
    assert_eq!(via_api.len(), 2);
    for t in direct.iter().chain(&via_api) {
        let s = &t["stats"];
        assert_eq!(t["probes"].as_array().unwrap().len(), 50);
        assert_eq!(
            s["received"].as_u64().unwrap() + s["lost"].as_u64().unwrap(),
            s["sent"].as_u64().unwrap()
        );
        assert_eq!(s["received"], 50, "idle path: {s}");
        assert_eq!(s["report_missing"], false);
    }
    // Same result structure either way.
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&direct[0]), keys(&via_api[0]));
    assert_eq!(keys(&direct[0]["stats"]), keys(&via_api[0]["stats"]));

    // The human table: a header and a row per train.
    let o = lab.probe(&["198.18.3.2", "--trains", "1"], true);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("dispersion") && out.lines().count() == 3,
        "{out}"
    );
}

#[test]
fn probe_errors_are_clear() {
    let lab = Lab::new("pe");
    // No agent at the far end.
    let o = lab.probe(&["198.18.3.2", "--trains", "1"], true);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is `mgrp agent` running"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // No key.
    let o = lab.probe(&["198.18.3.2", "--trains", "1"], false);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no key"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Absurd sizes and peers, refused before any packet.
    for (args, why) in [
        (&["198.18.3.2", "--size", "10"][..], "size 10"),
        (&["198.18.3.2", "--size", "9000"], "size 9000"),
        (&["198.18.3.2", "--count", "0"], "1..=10000"),
        (&["not-an-address"], "bad peer"),
    ] {
        let o = lab.probe(args, true);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(why),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
