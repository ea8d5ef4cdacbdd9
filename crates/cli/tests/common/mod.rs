//! What the CLI's namespace tests share: `mgrp agent` processes in testbed namespaces.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use mgrp_testbed::{Role, Testbed};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const MGRP: &str = env!("CARGO_BIN_EXE_mgrp");
pub const KEY: &str = "6d6772702d746573742d6b65792d3132333435363738393031323334353637";
/// The HTTP API's port in the test configurations (inside a namespace: always free there).
pub const HTTP_PORT: u16 = 7241;

/// Run `mgrp` with `args` in this namespace and wait for it.
pub fn mgrp(args: &[&str]) -> Output {
    Command::new(MGRP).args(args).output().expect("run mgrp")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Namespaces `mgrp-NAME-NODE` of exactly this instance (node names have no '-', so
/// `mgrp-lab-2-a` belongs to `lab-2`, not to `lab`).
pub fn namespaces_of(name: &str) -> Vec<String> {
    let prefix = format!("mgrp-{name}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| {
                    n.strip_prefix(&prefix)
                        .is_some_and(|node| !node.contains('-'))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An `mgrp agent` process in a namespace, ended (by pid) on drop; its stdout goes to a file if
/// one is given.
pub struct AgentProc {
    child: Child,
    out: Option<PathBuf>,
}

impl AgentProc {
    /// Start it and wait until it accepts: the control port, and with a config the HTTP API.
    pub fn start(tb: &Testbed, role: Role, config: Option<&Path>, out: Option<PathBuf>) -> Self {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &tb.ns(role), MGRP, "agent", "--no-api"])
            .args(["--stats-every", "0"])
            .env("MGRP_KEY", KEY)
            .stderr(Stdio::inherit());
        match &out {
            Some(p) => c.stdout(std::fs::File::create(p).unwrap()),
            None => c.stdout(Stdio::null()),
        };
        if let Some(p) = config {
            c.arg("--config").arg(p);
        }
        let a = AgentProc {
            child: c.spawn().unwrap(),
            out,
        };
        let port = if config.is_some() { HTTP_PORT } else { 7240 };
        let t0 = Instant::now();
        while !listening(tb, role, port) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "agent never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        a
    }

    pub fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), s).unwrap();
    }

    pub fn stdout(&self) -> String {
        self.out
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Something listens on TCP `port` in `role`'s namespace.
pub fn listening(tb: &Testbed, role: Role, port: u16) -> bool {
    let o = Command::new("ip")
        .args(["netns", "exec", &tb.ns(role), "ss", "-Htln"])
        .arg(format!("sport = :{port}"))
        .output()
        .unwrap();
    !o.stdout.is_empty()
}
