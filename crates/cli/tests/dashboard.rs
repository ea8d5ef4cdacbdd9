//! The dashboard as a person sees it: an `mgrp agent --config` process keeps a 20 Mbit/s path
//! with STEP cross traffic fresh, and headless Chromium (Debian's, driven by playwright-core from
//! `crates/service/dashboard/test/shot.mjs`) opens the page the agent serves, waits until the
//! available-bandwidth plot shows live estimates pushed over the event stream, checks that no
//! error banner is up and nothing was asked of another host, and saves a full-page screenshot
//! to `target/dashboard.png`.
//!
//! Needs node, Chromium and the test's node modules; without them it fails and says how to
//! install them (it never passes without having looked at the page).

use mgrp_testbed::generator::{CrossTraffic, GenOptions, BASE_PORT};
use mgrp_testbed::{CrossPattern, DelayMode, Role, Testbed, TestbedConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod common;
use common::{AgentProc, HTTP_PORT};

/// Estimates the avail_bw plot must show (the schedule measures every second).
const MIN_POINTS: u32 = 12;

/// A child process killed (by pid) if still running on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// What the browser test needs, or a failure that names the install step.
fn prerequisites(test_dir: &Path) -> PathBuf {
    // playwright-core 1.65 needs Node.js 20 or later (Debian bookworm's own nodejs is 18).
    let node = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let major = node
        .as_deref()
        .and_then(|v| v.strip_prefix('v')?.split('.').next()?.parse::<u32>().ok());
    assert!(
        major.is_some_and(|m| m >= 20),
        "dashboard test: needs `node` 20 or later on PATH (found {node:?}); install Node.js >= 20 with npm"
    );
    let chromium =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        chromium.exists(),
        "dashboard test: no browser at {}; install Debian's: apt-get install -y chromium",
        chromium.display()
    );
    assert!(
        test_dir
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "dashboard test: playwright-core missing in {}; install it: npm ci --prefix crates/service/dashboard/test",
        test_dir.display()
    );
    chromium
}

#[test]
fn dashboard_shows_live_estimates_in_chromium() {
    mgrp_testbed::stolen::unless_stolen("dashboard_shows_live_estimates_in_chromium", |_| {
        let t_start = Instant::now();
        let root = workspace();
        let test_dir = root.join("crates/service/dashboard/test");
        let chromium = prerequisites(&test_dir);
        let out = root.join("target/dashboard.png");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&out);

        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 20_000_000,
                delay: Some(Duration::from_millis(10)),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("mgrp-dashboard-test-{}", std::process::id()));
        // A failed attempt's files must not meet the next one.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _rcv = AgentProc::start(&tb, Role::Rcv, None, None);
        // The seeds' STEP pattern (scaled x2), 4 s a step: A = 18, 14, 10, 8, 12, 16 Mbit/s.
        let step = CrossPattern::parse("step:2,6,10,12,8,4mbit,every=4s").unwrap();
        let cross = CrossTraffic::start(
            &tb,
            &step,
            BASE_PORT,
            &GenOptions {
                max_duration: Duration::from_secs(120),
                ..Default::default()
            },
        )
        .unwrap();
        let cfg = dir.join("agent.toml");
        std::fs::write(
        &cfg,
        format!(
            "http = \"127.0.0.1:{HTTP_PORT}\"\n\n[[path]]\npeer = \"{}\"\nmethod = \"auto\"\nevery = \"1s\"\nbudget = \"20mb\"\n",
            Role::Rcv.addr()
        ),
    )
    .unwrap();
        let _snd = AgentProc::start(&tb, Role::Snd, Some(&cfg), None);

        // Chromium inside the sender's namespace reaches the agent on that namespace's loopback.
        let url = format!("http://127.0.0.1:{HTTP_PORT}/");
        let t_browser = Instant::now();
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &tb.ns(Role::Snd), "node"])
            .arg(test_dir.join("shot.mjs"))
            .arg(&url)
            .arg(&out)
            .args(["--min-points", &MIN_POINTS.to_string()])
            .args(["--timeout", "40", "--expect-sse"])
            .env("CHROMIUM", &chromium)
            .stdout(log("shot.out"))
            .stderr(log("shot.err"))
            .spawn()
            .unwrap();
        let mut shot = Killed(child);
        // shot.mjs bounds itself (40 s, then 15 s more at most); this bounds it again.
        let status = loop {
            if let Some(s) = shot.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                t_browser.elapsed() < Duration::from_secs(70),
                "shot.mjs still running after 70 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        drop(cross);
        let stdout = std::fs::read_to_string(dir.join("shot.out")).unwrap_or_default();
        let stderr = std::fs::read_to_string(dir.join("shot.err")).unwrap_or_default();
        assert!(
            status.success(),
            "shot.mjs failed ({status}):\n{stderr}\n{stdout}\n(screenshot, if any: {})",
            out.display()
        );
        let summary: serde_json::Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("shot.mjs printed no JSON summary ({e}): {stdout}"));
        eprintln!("{summary}");
        assert_eq!(summary["ok"], true, "{summary}");
        assert_eq!(summary["state"], "live", "{summary}");
        assert_eq!(summary["sse"], "open", "{summary}");
        assert!(summary["banner"].is_null(), "{summary}");
        // No [transfer] in this agent's configuration: no transfer panel.
        assert_eq!(summary["transfer"], "off", "{summary}");
        assert!(summary["transfer_status"].is_null(), "{summary}");
        assert!(
            summary["points"].as_u64().unwrap_or(0) >= MIN_POINTS as u64,
            "{summary}"
        );
        assert_eq!(
            summary["path"],
            format!("{}->{}", Role::Snd.addr(), Role::Rcv.addr()),
            "{summary}"
        );
        // The card shows the current estimate in Mbit/s, with its range and method.
        let card = summary["avail_bw"].as_str().unwrap_or("");
        assert!(card.ends_with("Mbit/s"), "{summary}");
        assert!(
            summary["avail_bw_range"]
                .as_str()
                .is_some_and(|r| r.starts_with("range ")),
            "{summary}"
        );
        assert!(
            summary["avail_bw_quality"]
                .as_str()
                .is_some_and(|q| q.starts_with("auto:")),
            "{summary}"
        );
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        // A blank 1360-pixel-wide page compresses to a few kB; plots, text and cards do not.
        assert!(size > 40_000, "{}: {size} bytes", out.display());
        eprintln!(
            "dashboard screenshot: {} ({size} bytes); browser {:.1} s, test {:.1} s",
            out.display(),
            t_browser.elapsed().as_secs_f64(),
            t_start.elapsed().as_secs_f64()
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
}
