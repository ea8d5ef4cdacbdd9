//! The store's file on disk: private to its owner when created, kept as the owner set it.

use mgrp_store::{conformance::rec, Durability, EstimateStore, Store};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mgrp-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    d
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_new_store_and_its_wal_are_private() {
    let dir = temp_dir("mode");
    let db = dir.join("estimates.db");
    let mut s = Store::open(&db, Durability::Process, Duration::from_secs(60)).unwrap();
    s.insert(&[rec("a->b", "rtt", 1, 1.0)]).unwrap();
    assert_eq!(mode(&db), 0o600);
    let wal = dir.join("estimates.db-wal");
    assert!(wal.exists());
    assert_eq!(mode(&wal), 0o600, "the WAL holds the same estimates");
    drop(s);
    // Reopened: the data is there, the mode unchanged.
    let s = Store::open(&db, Durability::Process, Duration::from_secs(60)).unwrap();
    assert_eq!(s.count().unwrap(), 1);
    assert_eq!(mode(&db), 0o600);
    // A mode the owner chose is kept.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
    drop(Store::open(&db, Durability::Process, Duration::from_secs(60)).unwrap());
    assert_eq!(mode(&db), 0o640);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_place_is_an_error() {
    let e = Store::open(
        std::path::Path::new("/nonexistent/dir/estimates.db"),
        Durability::Process,
        Duration::from_secs(60),
    )
    .err()
    .expect("opened a store in a directory that does not exist");
    assert!(e.to_string().contains("No such file"), "{e}");
}

/// A store written before estimates stated their time scale opens, keeps its rows (reading
/// back with no time scale) and takes new rows with one.
#[test]
fn a_store_from_before_time_scales_is_upgraded_in_place() {
    let dir = temp_dir("upgrade");
    let db = dir.join("estimates.db");
    {
        let old = rusqlite::Connection::open(&db).unwrap();
        old.execute_batch(
            "CREATE TABLE estimates (
                id INTEGER PRIMARY KEY,
                path TEXT NOT NULL, metric TEXT NOT NULL, t_ns INTEGER NOT NULL,
                value REAL NOT NULL, low REAL NOT NULL, high REAL NOT NULL,
                method TEXT NOT NULL, source TEXT NOT NULL,
                probe_bytes INTEGER NOT NULL, trains INTEGER NOT NULL,
                confidence REAL NOT NULL, elapsed_s REAL NOT NULL, final INTEGER NOT NULL
            );
            INSERT INTO estimates (path, metric, t_ns, value, low, high, method, source,
                probe_bytes, trains, confidence, elapsed_s, final)
            VALUES ('a->b', 'avail_bw', 1, 5.0, 4.0, 6.0, 'auto', 'active', 10, 1, 0.5, 0.2, 1);",
        )
        .unwrap();
    }
    let mut s = Store::open(&db, Durability::Process, Duration::from_secs(86_400)).unwrap();
    let old = s.latest("a->b", "avail_bw").unwrap().unwrap();
    assert_eq!((old.value, old.timescale_ms), (5.0, None));
    let mut new = rec("a->b", "avail_bw", 2, 6.0);
    new.timescale_ms = Some(600.0);
    s.insert(std::slice::from_ref(&new)).unwrap();
    assert_eq!(s.latest("a->b", "avail_bw").unwrap(), Some(new));
    drop(s);
    // Opening it again does not add the column twice.
    let s = Store::open(&db, Durability::Process, Duration::from_secs(86_400)).unwrap();
    assert_eq!(s.count().unwrap(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
