//! `PgStore` against a real PostgreSQL server that each test starts for itself (a cluster in a
//! temp dir, listening only on a Unix socket there), checked answer for answer against the
//! SQLite `Store` fed the same estimates.

use mgrp_store::{Error, EstimateStore, Point, Record, ScaleAnswer, Store};
use mgrp_store_pg::PgStore;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
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
        // Past i64 and i32: both stores must round-trip the whole u64 / u32.
        probe_bytes: rng.random(),
        trains: rng.random(),
        confidence: rng.random(),
        elapsed_s: rng.random_range(0.0..10.0),
        final_: rng.random(),
    }
}

const PATHS: [&str; 3] = ["10.0.0.1->10.0.0.2", "10.0.0.1->10.0.0.3", "a->b"];
const METRICS: [&str; 2] = ["avail_bw", "rtt"];

/// `n` estimates over `hours` from T0, in random order, some sharing a time with another of
/// their series (ties must come out the same in both stores).
fn random_records(rng: &mut StdRng, n: usize, hours: u64) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::with_capacity(n);
    for _ in 0..n {
        let (p, m) = (
            PATHS[rng.random_range(0..PATHS.len())],
            METRICS[rng.random_range(0..METRICS.len())],
        );
        let t = match out
            .iter()
            .rev()
            .take(50)
            .find(|r| r.path == p && r.metric == m)
        {
            Some(r) if rng.random_bool(0.05) => r.t_ns,
            _ => T0 + rng.random_range(0..hours * H),
        };
        out.push(random_record(rng, p, m, t));
    }
    out
}

/// Insert the same batches (random sizes) into both stores.
fn insert_both(rng: &mut StdRng, sqlite: &mut Store, pg: &mut PgStore, rows: &[Record]) {
    let mut i = 0;
    while i < rows.len() {
        let j = (i + rng.random_range(1..400)).min(rows.len());
        sqlite.insert(&rows[i..j]).unwrap();
        pg.insert(&rows[i..j]).unwrap();
        i = j;
    }
}

fn close(a: &[Point], b: &[Point]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.start_ns == y.start_ns
                && x.n == y.n
                && (x.mean - y.mean).abs() <= 1e-9 * y.mean.abs().max(1.0)
                && x.min == y.min
                && x.max == y.max
                && x.last == y.last
        })
}

fn assert_same_scale(pg: &ScaleAnswer, sq: &ScaleAnswer, what: &str) {
    assert_eq!(pg.source, sq.source, "{what}");
    assert_eq!(pg.complete, sq.complete, "{what}");
    assert!(
        close(&pg.points, &sq.points),
        "{what}: {} vs {} points, first {:?} vs {:?}",
        pg.points.len(),
        sq.points.len(),
        pg.points.first(),
        sq.points.first()
    );
}

/// Every kind of question, to both stores; returns how many scale answers were non-empty.
fn assert_same_answers(rng: &mut StdRng, sq: &Store, pg: &PgStore, hours: u64) -> usize {
    assert_eq!(pg.count().unwrap(), sq.count().unwrap());
    assert_eq!(pg.series().unwrap(), sq.series().unwrap());
    let mut non_empty = 0;
    let series = PATHS
        .iter()
        .flat_map(|p| METRICS.iter().map(move |m| (*p, *m)))
        .chain([("nope", "avail_bw"), ("a->b", "loss")]);
    for (p, m) in series {
        assert_eq!(
            pg.latest(p, m).unwrap(),
            sq.latest(p, m).unwrap(),
            "latest {p} {m}"
        );
        for step in [1u64, 7, 60, 120, 3600, 7200] {
            let ends = [
                T0 + rng.random_range(0..hours * H),
                T0 + hours * H,
                (T0 / H + 3) * H, // on an hour boundary
                T0 - 1,           // before every estimate
                T0 + 100 * hours * H,
            ];
            for end in ends {
                for count in [1usize, 10, 333, 5000] {
                    let step = Duration::from_secs(step);
                    let a = pg.scale(p, m, step, count, end).unwrap();
                    let b = sq.scale(p, m, step, count, end).unwrap();
                    assert_same_scale(&a, &b, &format!("{p} {m} {step:?} x{count} to {end}"));
                    non_empty += !b.points.is_empty() as usize;
                }
            }
        }
        for _ in 0..20 {
            let from = T0 + rng.random_range(0..hours * H);
            let to = from + rng.random_range(0..H);
            let limit = [0usize, 1, 17, 100_000][rng.random_range(0..4)];
            assert_eq!(
                pg.range(p, m, from, to, limit).unwrap(),
                sq.range(p, m, from, to, limit).unwrap(),
                "range {p} {m} {from}..{to} limit {limit}"
            );
        }
        assert_eq!(
            pg.range(p, m, 0, u64::MAX, usize::MAX).unwrap(),
            sq.range(p, m, 0, u64::MAX, usize::MAX).unwrap(),
            "all of {p} {m}"
        );
    }
    non_empty
}

/// (1) The same random estimates in both stores give the same answers, from aggregates and
/// from raw rows, at every step, count and end.
#[test]
fn same_answers_as_sqlite() {
    let server = PgServer::start();
    let mut rng = StdRng::seed_from_u64(20_260_521);
    let year = Duration::from_secs(365 * 86_400);
    let mut pg = PgStore::connect(&server.url, year).unwrap();
    let mut sq = Store::in_memory(year).unwrap();
    let rows = random_records(&mut rng, 12_000, 5);
    insert_both(&mut rng, &mut sq, &mut pg, &rows);
    pg.insert(&[]).unwrap();
    assert_eq!(pg.count().unwrap(), 12_000);
    // Two estimates at a series' newest time: `latest` is the first stored (as in SQLite),
    // the step's `last` the second.
    let tie = [
        random_record(&mut rng, "a->b", "rtt", T0 + 5 * H),
        random_record(&mut rng, "a->b", "rtt", T0 + 5 * H),
    ];
    sq.insert(&tie).unwrap();
    pg.insert(&tie).unwrap();
    assert_eq!(pg.latest("a->b", "rtt").unwrap().as_ref(), Some(&tie[0]));
    let newest = pg
        .scale("a->b", "rtt", Duration::from_secs(60), 1, T0 + 5 * H + 1)
        .unwrap();
    assert_eq!(newest.points[0].last, tie[1].value);
    let non_empty = assert_same_answers(&mut rng, &sq, &pg, 5);
    assert!(
        non_empty > 500,
        "too few non-empty answers to mean much: {non_empty}"
    );
    // A second connection (another agent) sees the same archive.
    let other = PgStore::connect(&server.url, year).unwrap();
    assert_same_answers(&mut rng, &sq, &other, 5);
}

/// (2) Retention deletes the same rows; aggregates still answer; raw answers that need deleted
/// rows say so, also to a store connected after the retention ran.
#[test]
fn retention_same_as_sqlite() {
    let server = PgServer::start();
    let mut rng = StdRng::seed_from_u64(7);
    let keep = Duration::from_secs(2 * 3600);
    let mut pg = PgStore::connect(&server.url, keep).unwrap();
    let mut sq = Store::in_memory(keep).unwrap();
    let rows = random_records(&mut rng, 6_000, 6);
    insert_both(&mut rng, &mut sq, &mut pg, &rows);
    assert_same_answers(&mut rng, &sq, &pg, 6);
    for now in [
        T0 + H / 2,
        T0 + 4 * H + 12_345,
        T0 + 4 * H + 12_345,
        T0 + 9 * H,
    ] {
        let (a, b) = (
            pg.apply_retention(now).unwrap(),
            sq.apply_retention(now).unwrap(),
        );
        assert_eq!(a, b, "rows deleted at {now}");
        assert_same_answers(&mut rng, &sq, &pg, 6);
    }
    assert_eq!(sq.count().unwrap(), 0, "all deleted in the end");
    let incomplete = sq
        .scale("a->b", "rtt", Duration::from_secs(7), 100, T0 + 3 * H)
        .unwrap();
    assert!(!incomplete.complete);
    let later = PgStore::connect(&server.url, keep).unwrap();
    assert_same_answers(&mut rng, &sq, &later, 6);

    // A raw answer starting exactly at the horizon is complete; one step earlier is not.
    let step = Duration::from_secs(7);
    let cut = (T0 + 10 * H) / 7_000_000_000 * 7_000_000_000;
    let old = random_record(&mut rng, "a->b", "rtt", cut - 1);
    sq.insert(std::slice::from_ref(&old)).unwrap();
    pg.insert(std::slice::from_ref(&old)).unwrap();
    let now = cut + keep.as_nanos() as u64;
    assert_eq!(pg.apply_retention(now).unwrap(), 1);
    assert_eq!(sq.apply_retention(now).unwrap(), 1);
    for (count, complete) in [(10, true), (11, false)] {
        let end = cut + 10 * 7_000_000_000;
        let a = pg.scale("a->b", "rtt", step, count, end).unwrap();
        let b = sq.scale("a->b", "rtt", step, count, end).unwrap();
        assert_same_scale(&a, &b, &format!("{count} steps before {end}"));
        assert_eq!((a.source.as_str(), a.complete), ("raw", complete));
    }
}

/// (3) Agents inserting at once, each on its own connection, into the same buckets: no
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
        let mut rows: Vec<&Record> = all.iter().filter(|r| r.path == *path).collect();
        rows.sort_by_key(|r| r.t_ns);
        for (step, source) in [(60u64, "agg_60s"), (3600, "agg_3600s"), (7, "raw")] {
            let step_ns = step * 1_000_000_000;
            let mut want: Vec<Point> = Vec::new();
            for r in &rows {
                let start = r.t_ns / step_ns * step_ns;
                match want.last_mut() {
                    Some(p) if p.start_ns == start => {
                        p.n += 1;
                        p.mean += r.value; // the sum, divided below
                        p.min = p.min.min(r.value);
                        p.max = p.max.max(r.value);
                        p.last = r.value;
                    }
                    _ => want.push(Point {
                        start_ns: start,
                        n: 1,
                        mean: r.value,
                        min: r.value,
                        max: r.value,
                        last: r.value,
                    }),
                }
            }
            for p in &mut want {
                p.mean /= p.n as f64;
            }
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

/// (4) Bad input is refused before the database (nothing stored); an unreachable server is an
/// `Error::Backend` that says where it looked; a dropped connection is re-made.
#[test]
fn bad_input_unreachable_server_and_reconnect() {
    let server = PgServer::start();
    let mut pg = PgStore::connect(&server.url, Duration::from_secs(60)).unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let good = random_record(&mut rng, "a->b", "avail_bw", T0);
    let mut nan = good.clone();
    nan.value = f64::NAN;
    assert!(matches!(
        pg.insert(&[good.clone(), nan]),
        Err(Error::BadInput(_))
    ));
    assert_eq!(pg.count().unwrap(), 0, "all or none");
    let mut empty = good.clone();
    empty.path.clear();
    assert!(matches!(pg.insert(&[empty]), Err(Error::BadInput(_))));
    let step = Duration::from_millis(1500);
    assert!(matches!(
        pg.scale("a->b", "avail_bw", step, 10, T0),
        Err(Error::BadInput(_))
    ));
    let step = Duration::from_secs(1);
    assert!(matches!(
        pg.scale("a->b", "avail_bw", step, 0, T0),
        Err(Error::BadInput(_))
    ));
    assert!(pg.latest("nope", "x").unwrap().is_none());
    pg.insert(&[good]).unwrap();

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
