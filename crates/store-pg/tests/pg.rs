//! `PgStore` against a real PostgreSQL server that each test starts for itself (a cluster in a
//! temp dir, listening only on a Unix socket there): the store's shared suite
//! (`mgrp_store::conformance`, also run against SQLite), then what only a central archive
//! does — several connections, concurrent agents, an unreachable or restarted server.

use mgrp_store::conformance::{brute, close, rec, Rng};
use mgrp_store::{Error, EstimateStore, Record};
use mgrp_store_pg::PgStore;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng as _, SeedableRng};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A PostgreSQL cluster of our own, stopped and deleted on drop (also when a test panics).
struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    /// The unprivileged user the server runs as when the test runs as root.
    user: Option<(u32, u32)>,
    url: String,
}

impl PgServer {
    fn start() -> PgServer {
        let bin = server_bin().unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in \
                 /usr/lib/postgresql/*/bin (or $MGRP_PG_BIN): run scripts/install-deps.sh \
                 (as root) to install the `postgresql` package"
            )
        });
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // The socket is private to the dir, so the port only names it; still unique per server
        // so that two never share a lock file name.
        let port = 20_000 + (pid * 8 + seq) % 40_000;
        // /tmp, not $TMPDIR: the socket path must stay short (107 bytes) and the server's user
        // must be able to reach the dir.
        // The time part: a dir left by a killed run with the same pid is not ours to reuse.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = PathBuf::from(format!("/tmp/mgrp-pg-{pid}-{seq}-{nanos}"));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let user = unprivileged_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown temp dir");
        }
        // From here on, Drop cleans up whatever fails.
        let server = PgServer {
            bin,
            data: dir.join("data"),
            url: format!(
                "host={} port={port} user=mgrp dbname=postgres",
                dir.display()
            ),
            dir,
            user,
        };
        let data = server.data.to_str().unwrap().to_string();
        server.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "mgrp",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
        );
        let conf = format!(
            "listen_addresses = ''\nport = {port}\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            server.dir.display()
        );
        let conf_path = server.data.join("postgresql.conf");
        let mut all = fs::read_to_string(&conf_path).expect("postgresql.conf");
        all.push_str(&conf);
        fs::write(&conf_path, all).expect("postgresql.conf");
        let log = server.dir.join("log").to_str().unwrap().to_string();
        server.run(
            "pg_ctl",
            &["start", "-w", "-t", "30", "-s", "-D", &data, "-l", &log],
        );
        server
    }

    /// A server binary, as the unprivileged user if we are root (PostgreSQL refuses root).
    fn command(&self, name: &str) -> Command {
        let mut c = Command::new(self.bin.join(name));
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&self.dir); // root's cwd may be closed to that user
        if let Some((uid, gid)) = self.user {
            // std drops the supplementary groups when root sets a uid.
            c.uid(uid).gid(gid);
        }
        c
    }

    fn run(&self, name: &str, args: &[&str]) {
        let out = self
            .command(name)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        if !out.status.success() {
            let log = fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            panic!(
                "{name} failed ({}): {}{}\nserver log:\n{log}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let pidfile = self.data.join("postmaster.pid");
        if pidfile.exists() {
            let stopped = self
                .command("pg_ctl")
                .args(["stop", "-m", "immediate", "-w", "-t", "20", "-s", "-D"])
                .arg(&self.data)
                .status()
                .is_ok_and(|s| s.success());
            if !stopped {
                // Our postmaster and only ours: the pid it wrote in its own data dir.
                let pid = fs::read_to_string(&pidfile)
                    .ok()
                    .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()));
                if let Some(pid) = pid {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `$MGRP_PG_BIN` if set, else the newest `/usr/lib/postgresql/N/bin` with the three
/// binaries, else the dir `initdb` on PATH resolves to (e.g. /usr/local/bin/initdb, a link
/// into such a dir).
fn server_bin() -> Option<PathBuf> {
    let has_all = |d: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    if let Some(d) = std::env::var_os("MGRP_PG_BIN") {
        return Some(PathBuf::from(d)).filter(|d| has_all(d));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has_all(d))
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.pop() {
        return Some(d);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("initdb"))
        .find(|p| p.is_file())
        .and_then(|p| fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|d| has_all(d))
}

/// `postgres` (made by the Debian package) or `nobody`, when running as root.
fn unprivileged_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["postgres", "nobody"]
        .iter()
        .find_map(|n| nix::unistd::User::from_name(n).ok().flatten())
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        .or_else(|| {
            panic!("running as root and no `postgres` or `nobody` user to run PostgreSQL as")
        })
}

const T0: u64 = 1_795_000_000_123_456_789;
const H: u64 = 3_600_000_000_000;

fn random_record(rng: &mut StdRng, path: &str, metric: &str, t_ns: u64) -> Record {
    let value = rng.random_range(1e3..1e8);
    Record {
        path: path.into(),
        metric: metric.into(),
        t_ns,
        value,
        low: value * rng.random_range(0.5..1.0),
        high: value * rng.random_range(1.0..1.5),
        method: ["auto", "pathload", "spruce"][rng.random_range(0..3)].into(),
        source: ["active", "passive", "rider"][rng.random_range(0..3)].into(),
        // Past i64 and i32: the store must round-trip the whole u64 / u32.
        probe_bytes: rng.random(),
        trains: rng.random(),
        confidence: rng.random(),
        elapsed_s: rng.random_range(0.0..10.0),
        final_: rng.random(),
        timescale_ms: rng.random::<bool>().then(|| rng.random_range(50.0..5000.0)),
    }
}

const PATHS: [&str; 3] = ["10.0.0.1->10.0.0.2", "10.0.0.1->10.0.0.3", "a->b"];

/// One server per test; each store the suite asks for gets a database of its own, so every
/// case starts empty.
fn pg_maker() -> impl FnMut(std::time::Duration) -> Box<dyn EstimateStore> {
    let server = PgServer::start();
    let mut n = 0;
    move |retention| {
        n += 1;
        let db = format!("case{n}");
        let mut admin = postgres::Client::connect(&server.url, postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
        let url = format!("{} dbname={db}", server.url);
        Box::new(PgStore::connect(&url, retention).unwrap())
    }
}

mod conformance {
    use super::*;
    mgrp_store::conformance_tests!(pg_maker());
}

/// What one agent stored, another connection (another agent, or the same after a restart)
/// answers the same, the retention horizon included.
#[test]
fn other_connections_answer_the_same() {
    let server = PgServer::start();
    let keep = Duration::from_secs(2 * 3600);
    let mut pg = PgStore::connect(&server.url, keep).unwrap();
    let mut rng = Rng::new(5);
    let rows: Vec<Record> = (0..3000)
        .map(|_| {
            let p = PATHS[rng.below(3) as usize];
            rec(
                p,
                "avail_bw",
                T0 + rng.below(6 * H),
                rng.range_f64(1e3, 1e8),
            )
        })
        .collect();
    for batch in rows.chunks(97) {
        pg.insert(batch).unwrap();
    }
    let same = |a: &PgStore, b: &PgStore| {
        assert_eq!(a.count().unwrap(), b.count().unwrap());
        assert_eq!(a.series().unwrap(), b.series().unwrap());
        for p in PATHS {
            assert_eq!(
                a.latest(p, "avail_bw").unwrap(),
                b.latest(p, "avail_bw").unwrap()
            );
            assert_eq!(
                a.range(p, "avail_bw", 0, u64::MAX, usize::MAX).unwrap(),
                b.range(p, "avail_bw", 0, u64::MAX, usize::MAX).unwrap()
            );
            for step in [7u64, 60, 3600] {
                let step = Duration::from_secs(step);
                let (x, y) = (
                    a.scale(p, "avail_bw", step, 5000, T0 + 6 * H).unwrap(),
                    b.scale(p, "avail_bw", step, 5000, T0 + 6 * H).unwrap(),
                );
                assert_eq!((&x.source, x.complete), (&y.source, y.complete));
                assert!(close(&x.points, &y.points), "{p} {step:?}");
            }
        }
    };
    let other = PgStore::connect(&server.url, keep).unwrap();
    same(&pg, &other);
    assert!(pg.apply_retention(T0 + 5 * H).unwrap() > 0);
    // Connected after the retention ran: it knows raw answers before the horizon lack rows.
    let later = PgStore::connect(&server.url, keep).unwrap();
    same(&pg, &later);
    let raw = later
        .scale("a->b", "avail_bw", Duration::from_secs(7), 5000, T0 + 6 * H)
        .unwrap();
    assert_eq!((raw.source.as_str(), raw.complete), ("raw", false));
}

/// Agents inserting at once, each on its own connection, into the same buckets: no
/// update is lost, and the aggregates equal a brute-force aggregation of all the rows.
#[test]
fn concurrent_inserts_keep_aggregates_exact() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 3_000;
    let server = PgServer::start();
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let workers: Vec<_> = (0..THREADS)
        .map(|k| {
            let (url, barrier) = (server.url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(k);
                // Distinct times across threads (so `last` is defined), interleaved so every
                // bucket gets rows from every thread, sent out of order.
                let mut rows: Vec<Record> = (0..PER_THREAD)
                    .map(|i| {
                        let t = T0 + (i * THREADS + k) * 1_234_567_891;
                        random_record(&mut rng, PATHS[(i % 2) as usize], "avail_bw", t)
                    })
                    .collect();
                rows.shuffle(&mut rng);
                // All connect at once too: the schema is created by exactly one of them.
                barrier.wait();
                let mut pg = PgStore::connect(&url, Duration::from_secs(86_400 * 365)).unwrap();
                for batch in rows.chunks(50) {
                    pg.insert(batch).unwrap();
                }
                rows
            })
        })
        .collect();
    let all: Vec<Record> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let pg = PgStore::connect(&server.url, Duration::from_secs(86_400 * 365)).unwrap();
    assert_eq!(pg.count().unwrap(), THREADS * PER_THREAD);
    let end = all.iter().map(|r| r.t_ns).max().unwrap() + 1;
    for path in &PATHS[..2] {
        let rows: Vec<Record> = all.iter().filter(|r| r.path == *path).cloned().collect();
        for (step, source) in [(60u64, "agg_60s"), (3600, "agg_3600s"), (7, "raw")] {
            let step_ns = step * 1_000_000_000;
            let want = brute(&rows, step_ns, 0, u64::MAX);
            let count = ((end - T0) / step_ns + 2) as usize;
            let got = pg
                .scale(path, "avail_bw", Duration::from_secs(step), count, end)
                .unwrap();
            assert_eq!((got.source.as_str(), got.complete), (source, true));
            assert!(
                close(&got.points, &want),
                "{path} step {step}: {} vs {} points",
                got.points.len(),
                want.len()
            );
        }
    }
}

/// An unreachable server is an `Error::Backend` that says where it looked (without the
/// password); a dropped connection is re-made.
#[test]
fn unreachable_server_and_reconnect() {
    let server = PgServer::start();
    let mut pg = PgStore::connect(&server.url, Duration::from_secs(60)).unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    pg.insert(&[random_record(&mut rng, "a->b", "avail_bw", T0)])
        .unwrap();

    let nowhere = server.dir.join("nowhere");
    // Where it looked and why it failed, without the password.
    for (url, want) in [
        (
            format!("host={} port=5999 user=mgrp dbname=x", nowhere.display()),
            format!(
                "{}/.s.PGSQL.5999/x as mgrp: error connecting to server: No such file",
                nowhere.display()
            ),
        ),
        (
            "postgresql://mgrp:secret@127.0.0.1:1/archive".to_string(),
            "127.0.0.1:1/archive as mgrp: error connecting to server: Connection refused"
                .to_string(),
        ),
        (
            format!("{} dbname=no_such_db", server.url),
            "db error: FATAL: database \"no_such_db\" does not exist".to_string(),
        ),
    ] {
        match PgStore::connect(&url, Duration::from_secs(60)) {
            Err(Error::Backend(msg)) => {
                assert!(msg.starts_with("cannot connect to PostgreSQL at "), "{msg}");
                assert!(msg.contains(&want), "{msg}\nwant: {want}");
                assert!(!msg.contains("secret"), "password in the message: {msg}");
            }
            Err(e) => panic!("{url}: want Error::Backend, got {e:?}"),
            Ok(_) => panic!("{url}: connected to nothing"),
        }
    }
    match PgStore::connect("postgresql://[::1", Duration::from_secs(60)) {
        Err(Error::Backend(msg)) => assert!(msg.contains("invalid PostgreSQL URL"), "{msg}"),
        other => panic!("want Error::Backend, got {:?}", other.err()),
    }

    // The server drops our connection (as on a restart): one call fails with a Backend error
    // or succeeds, and the next works on a new connection.
    let mut admin = postgres::Client::connect(&server.url, postgres::NoTls).unwrap();
    let killed = admin
        .query_one(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'mgrp'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(killed, 1);
    match pg.count() {
        Ok(n) => assert_eq!(n, 1),
        Err(Error::Backend(msg)) => assert!(msg.contains("PostgreSQL at"), "{msg}"),
        Err(e) => panic!("want Error::Backend, got {e:?}"),
    }
    assert_eq!(pg.count().unwrap(), 1);
    pg.insert(&[random_record(&mut rng, "a->b", "avail_bw", T0 + 1)])
        .unwrap();
    assert_eq!(pg.latest("a->b", "avail_bw").unwrap().unwrap().t_ns, T0 + 1);
}
