//! The estimate store: every estimate with its quality tuple, in one SQLite file (WAL), and
//! answers by path, metric, time range, and **time scale + count** ("the last hour in 1-minute
//! steps", seed 001 §4) from aggregates kept as estimates arrive.
//!
//! Aggregates are materialised at [`SCALES`] (1 min, 1 h) in the same transaction as the
//! row, so an answer never disagrees with the rows it summarises. A step that is a multiple of a
//! materialised scale is answered by combining that scale's buckets; any other step is computed
//! from the raw rows, and the answer says which ([`ScaleAnswer::source`]). Raw rows older than
//! the retention are deleted; their aggregates stay (a coarser history outlives the detail), and
//! an answer that would need deleted rows says it is incomplete.
//!
//! Crash safety: WAL with `synchronous = NORMAL` keeps every committed transaction across a
//! killed process (tested with SIGKILL mid-write); use [`Durability::Full`] to also survive power
//! loss at the cost of an fsync per commit.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// Materialised aggregate scales, seconds. (Finer steps come from the raw rows: estimates
/// arrive about once a second, so a 1 s aggregate would only copy them.)
pub const SCALES: [u64; 2] = [60, 3600];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("store: {0}")]
    Db(#[from] rusqlite::Error),
    /// A backend other than SQLite failed (PostgreSQL: connection, query).
    #[error("store: {0}")]
    Backend(String),
    #[error("store: {0}")]
    BadInput(String),
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
}

/// What the service needs of a store of estimates. [`Store`] (SQLite, one file per agent) is
/// the default; a PostgreSQL backend (crate `mgrp-store-pg`) implements the same trait for a
/// central archive. Every implementation answers the same questions with the same numbers.
pub trait EstimateStore: Send {
    /// Store estimates in one transaction (all or none), with their aggregates.
    fn insert(&mut self, records: &[Record]) -> Result<(), Error>;
    /// Estimates of `path`/`metric` with `from_ns <= t_ns < to_ns`, oldest first, at most `limit`.
    fn range(
        &self,
        path: &str,
        metric: &str,
        from_ns: u64,
        to_ns: u64,
        limit: usize,
    ) -> Result<Vec<Record>, Error>;
    /// The newest estimate of `path`/`metric` (of several at that time, the first stored).
    fn latest(&self, path: &str, metric: &str) -> Result<Option<Record>, Error>;
    /// Paths and metrics with estimates.
    fn series(&self) -> Result<Vec<(String, String)>, Error>;
    /// `count` steps of `step` ending at `end_ns` (the last step holds `end_ns - 1`).
    fn scale(
        &self,
        path: &str,
        metric: &str,
        step: Duration,
        count: usize,
        end_ns: u64,
    ) -> Result<ScaleAnswer, Error>;
    /// Delete raw rows older than the retention before `now_ns` (aggregates stay).
    fn apply_retention(&mut self, now_ns: u64) -> Result<usize, Error>;
    /// Estimates stored (raw rows).
    fn count(&self) -> Result<u64, Error>;
    /// Keep a Netmapper map (checked by [`check_map`]); only the newest [`MAPS_KEPT`] of each
    /// coordinator stay.
    fn put_map(&mut self, map: &StoredMap) -> Result<(), Error>;
    /// The newest map of each coordinator, newest first.
    fn latest_maps(&self) -> Result<Vec<StoredMap>, Error>;
    /// Client-created queries kept across restarts, as (id, spec in JSON), oldest first.
    fn queries(&self) -> Result<Vec<(String, String)>, Error>;
    /// Keep query `id` (replacing one of that id).
    fn put_query(&mut self, id: &str, spec: &str) -> Result<(), Error>;
    /// Forget query `id`; whether it was kept.
    fn delete_query(&mut self, id: &str) -> Result<bool, Error>;
}

/// Longest query id and spec a store keeps (the service's are far shorter).
pub const MAX_QUERY_ID: usize = 64;
pub const MAX_QUERY_SPEC: usize = 16 * 1024;

/// Check a query before it is kept (every backend refuses the same input).
pub fn check_query(id: &str, spec: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_QUERY_ID || spec.len() > MAX_QUERY_SPEC {
        return Err(Error::BadInput(format!(
            "query id must be 1..={MAX_QUERY_ID} bytes and its spec at most {MAX_QUERY_SPEC}"
        )));
    }
    Ok(())
}

/// A Netmapper map as a store keeps it: the JSON document (`mgrp_map::MapReport`; the store
/// does not read it), the agent that made it, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMap {
    /// The coordinating agent (its address as the map's peers know it).
    pub coordinator: String,
    pub t_ns: u64,
    pub json: String,
}

/// Maps kept per coordinator: a short history, not an archive of every run.
pub const MAPS_KEPT: usize = 16;
/// Largest map document a store takes (64 agents' map is well under 1 MB).
pub const MAX_MAP_BYTES: usize = 4 << 20;

/// Check a map before it is stored (every backend refuses the same input).
pub fn check_map(m: &StoredMap) -> Result<(), Error> {
    if m.coordinator.is_empty() || m.coordinator.len() > 256 {
        return Err(Error::BadInput(
            "map coordinator must be 1..=256 bytes".into(),
        ));
    }
    if m.json.len() > MAX_MAP_BYTES {
        return Err(Error::BadInput(format!(
            "map of {} bytes is over the {MAX_MAP_BYTES}-byte limit",
            m.json.len()
        )));
    }
    if m.t_ns > i64::MAX as u64 {
        return Err(Error::BadInput("map time out of range".into()));
    }
    Ok(())
}

/// Check a record before it is stored (every backend refuses the same input).
pub fn check_record(r: &Record) -> Result<(), Error> {
    let bad = |why: &str| Err(Error::BadInput(why.into()));
    if r.path.is_empty() || r.path.len() > 200 || r.metric.is_empty() || r.metric.len() > 64 {
        return bad("path and metric must be 1..=200 and 1..=64 bytes");
    }
    if !r.value.is_finite() {
        return bad("value must be finite");
    }
    if r.t_ns > i64::MAX as u64 {
        return bad("time out of range");
    }
    if r.timescale_ms.is_some_and(|t| !t.is_finite() || t < 0.0) {
        return bad("timescale_ms must be finite and not negative");
    }
    Ok(())
}

/// The steps a time-scale question covers, and how to answer it (every backend the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalePlan {
    pub step_s: u64,
    pub step_ns: u64,
    /// First and one-past-last ns of the steps asked for.
    pub from_ns: u64,
    pub to_ns: u64,
    /// The coarsest materialised scale dividing the step, its buckets [lo, hi), and how many
    /// buckets make one step; `None`: answer from raw rows.
    pub aggregate: Option<(u64, u64, u64, u64)>,
}

impl ScalePlan {
    /// `count` steps of `step` ending at `end_ns` (the last step holds `end_ns - 1`).
    pub fn new(step: Duration, count: usize, end_ns: u64) -> Result<ScalePlan, Error> {
        let step_s = check_scale(step, count)?;
        let step_ns = step_s.saturating_mul(1_000_000_000);
        let last_bucket = end_ns.saturating_sub(1) / step_ns;
        let first_bucket = (last_bucket + 1).saturating_sub(count as u64);
        let from_ns = first_bucket.saturating_mul(step_ns);
        let to_ns = (last_bucket + 1).saturating_mul(step_ns);
        let aggregate = SCALES
            .iter()
            .rev()
            .copied()
            .find(|s| step_s % s == 0)
            .map(|scale| {
                let b = scale * 1_000_000_000;
                (scale, from_ns / b, to_ns / b, step_s / scale)
            });
        Ok(ScalePlan {
            step_s,
            step_ns,
            from_ns,
            to_ns,
            aggregate,
        })
    }

    /// Fold raw estimates (time, value), oldest first, into the plan's steps.
    pub fn fold(&self, rows: impl IntoIterator<Item = (u64, f64)>) -> Vec<Point> {
        let mut points: Vec<Point> = Vec::new();
        for (t, value) in rows {
            let start = t / self.step_ns * self.step_ns;
            match points.last_mut() {
                Some(p) if p.start_ns == start => {
                    p.mean += (value - p.mean) / (p.n + 1) as f64;
                    p.n += 1;
                    p.min = p.min.min(value);
                    p.max = p.max.max(value);
                    p.last = value;
                }
                _ => points.push(Point {
                    start_ns: start,
                    n: 1,
                    mean: value,
                    min: value,
                    max: value,
                    last: value,
                }),
            }
        }
        points
    }
}

/// Check a time-scale question; returns the step in whole seconds.
pub fn check_scale(step: Duration, count: usize) -> Result<u64, Error> {
    let step_s = step.as_secs();
    // Ten years bounds the step so step × count stays far inside u64 nanoseconds.
    if step.subsec_nanos() != 0
        || !(1..=315_360_000).contains(&step_s)
        || !(1..=100_000).contains(&count)
    {
        return Err(Error::BadInput(
            "step must be a whole number of seconds 1s..=10 years and count 1..=100000".into(),
        ));
    }
    Ok(step_s)
}

/// One stored estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `SRC->DST` (addresses), the path the estimate is for.
    pub path: String,
    /// `avail_bw`, `capacity`, `rtt`, `loss`, ...
    pub metric: String,
    /// Unix time of the estimate's end, ns.
    pub t_ns: u64,
    pub value: f64,
    pub low: f64,
    pub high: f64,
    pub method: String,
    /// `active`, `passive`, `rider`, ...
    pub source: String,
    pub probe_bytes: u64,
    pub trains: u32,
    pub confidence: f64,
    pub elapsed_s: f64,
    /// False for a rough early estimate that a later one of the same measurement refines.
    #[serde(rename = "final")]
    pub final_: bool,
    /// The time scale the value holds over, ms (seed 001 §4): the span the measurement's
    /// streams covered. `None` for methods that do not state one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timescale_ms: Option<f64>,
}

/// One step of a time-scale answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Start of the step, Unix ns.
    pub start_ns: u64,
    pub n: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// The newest estimate in the step.
    pub last: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleAnswer {
    /// Steps with at least one estimate, oldest first (empty steps are left out).
    pub points: Vec<Point>,
    /// `agg_60s`, `agg_3600s` or `raw`.
    pub source: String,
    /// False if part of the range is older than the raw retention and the step is not
    /// materialised, so the answer lacks those estimates.
    pub complete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Committed data survives a crash of the process (WAL, synchronous = NORMAL).
    Process,
    /// ... and of the machine (synchronous = FULL: an fsync per commit).
    Full,
}

pub struct Store {
    db: Connection,
    /// Raw rows older than this are deleted by [`Store::apply_retention`].
    retention: Duration,
    /// Oldest raw row that may have been deleted (Unix ns); 0 = nothing deleted yet.
    horizon_ns: u64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS estimates (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL, metric TEXT NOT NULL, t_ns INTEGER NOT NULL,
    value REAL NOT NULL, low REAL NOT NULL, high REAL NOT NULL,
    method TEXT NOT NULL, source TEXT NOT NULL,
    probe_bytes INTEGER NOT NULL, trains INTEGER NOT NULL,
    confidence REAL NOT NULL, elapsed_s REAL NOT NULL, final INTEGER NOT NULL,
    timescale_ms REAL
);
CREATE INDEX IF NOT EXISTS estimates_by_path ON estimates (path, metric, t_ns);
CREATE TABLE IF NOT EXISTS aggregates (
    scale_s INTEGER NOT NULL, path TEXT NOT NULL, metric TEXT NOT NULL, bucket INTEGER NOT NULL,
    n INTEGER NOT NULL, sum REAL NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
    last_t INTEGER NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (scale_s, path, metric, bucket)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS maps (
    id INTEGER PRIMARY KEY,
    coordinator TEXT NOT NULL, t_ns INTEGER NOT NULL, json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS maps_by_coordinator ON maps (coordinator, t_ns);
CREATE TABLE IF NOT EXISTS queries (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL
);
";

impl Store {
    /// Open (or create, readable by its owner only) the store at `path`.
    pub fn open(path: &Path, durability: Durability, retention: Duration) -> Result<Store, Error> {
        create_private(path)?;
        let db = Connection::open(path)?;
        Self::init(db, durability, retention)
    }

    /// A store in memory (tests, or an agent told not to keep history).
    pub fn in_memory(retention: Duration) -> Result<Store, Error> {
        Self::init(
            Connection::open_in_memory()?,
            Durability::Process,
            retention,
        )
    }

    fn init(db: Connection, d: Durability, retention: Duration) -> Result<Store, Error> {
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(
            None,
            "synchronous",
            if d == Durability::Full {
                "FULL"
            } else {
                "NORMAL"
            },
        )?;
        db.busy_timeout(Duration::from_secs(5))?;
        db.execute_batch(SCHEMA)?;
        add_timescale_column(&db)?;
        let horizon_ns: u64 = db
            .query_row("SELECT value FROM meta WHERE key = 'horizon_ns'", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .unwrap_or(0) as u64;
        Ok(Store {
            db,
            retention,
            horizon_ns,
        })
    }
}

impl EstimateStore for Store {
    /// Store estimates in one transaction (all or none), with their aggregates.
    fn insert(&mut self, records: &[Record]) -> Result<(), Error> {
        for r in records {
            check_record(r)?;
        }
        let tx = self.db.transaction()?;
        {
            let mut row = tx.prepare_cached(
                "INSERT INTO estimates (path, metric, t_ns, value, low, high, method, source,
                 probe_bytes, trains, confidence, elapsed_s, final, timescale_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )?;
            let mut agg = tx.prepare_cached(
                "INSERT INTO aggregates (scale_s, path, metric, bucket, n, sum, min, max, last_t, last)
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5, ?5, ?6, ?5)
                 ON CONFLICT (scale_s, path, metric, bucket) DO UPDATE SET
                   n = n + 1, sum = sum + excluded.sum,
                   min = MIN(min, excluded.min), max = MAX(max, excluded.max),
                   last = CASE WHEN excluded.last_t >= last_t THEN excluded.last ELSE last END,
                   last_t = MAX(last_t, excluded.last_t)",
            )?;
            for r in records {
                row.execute(params![
                    r.path,
                    r.metric,
                    r.t_ns as i64,
                    r.value,
                    r.low,
                    r.high,
                    r.method,
                    r.source,
                    r.probe_bytes as i64,
                    r.trains,
                    r.confidence,
                    r.elapsed_s,
                    r.final_ as i64,
                    r.timescale_ms
                ])?;
                for s in SCALES {
                    let bucket = (r.t_ns / (s * 1_000_000_000)) as i64;
                    agg.execute(params![
                        s as i64,
                        r.path,
                        r.metric,
                        bucket,
                        r.value,
                        r.t_ns as i64
                    ])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Estimates of `path`/`metric` with `from_ns <= t_ns < to_ns`, oldest first, at most `limit`.
    fn range(
        &self,
        path: &str,
        metric: &str,
        from_ns: u64,
        to_ns: u64,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        let mut q = self.db.prepare_cached(
            "SELECT path, metric, t_ns, value, low, high, method, source, probe_bytes, trains,
                    confidence, elapsed_s, final, timescale_ms
             FROM estimates WHERE path = ?1 AND metric = ?2 AND t_ns >= ?3 AND t_ns < ?4
             ORDER BY t_ns LIMIT ?5",
        )?;
        let rows = q.query_map(
            params![
                path,
                metric,
                clamp_i64(from_ns),
                clamp_i64(to_ns),
                limit.min(1_000_000) as i64
            ],
            row,
        )?;
        rows.collect::<Result<_, _>>().map_err(Into::into)
    }

    /// The newest estimate of `path`/`metric` (of several at that time, the first stored).
    fn latest(&self, path: &str, metric: &str) -> Result<Option<Record>, Error> {
        let mut q = self.db.prepare_cached(
            "SELECT path, metric, t_ns, value, low, high, method, source, probe_bytes, trains,
                    confidence, elapsed_s, final, timescale_ms
             FROM estimates WHERE path = ?1 AND metric = ?2 AND t_ns =
               (SELECT MAX(t_ns) FROM estimates WHERE path = ?1 AND metric = ?2)
             ORDER BY id LIMIT 1",
        )?;
        Ok(q.query_row(params![path, metric], row).optional()?)
    }

    /// Paths and metrics with estimates.
    fn series(&self) -> Result<Vec<(String, String)>, Error> {
        let mut q = self
            .db
            .prepare_cached("SELECT DISTINCT path, metric FROM aggregates WHERE scale_s = 3600 ORDER BY path, metric")?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>().map_err(Into::into)
    }

    /// `count` steps of `step` ending at `end_ns` (the last step holds `end_ns - 1`).
    fn scale(
        &self,
        path: &str,
        metric: &str,
        step: Duration,
        count: usize,
        end_ns: u64,
    ) -> Result<ScaleAnswer, Error> {
        let plan = ScalePlan::new(step, count, end_ns)?;
        if let Some((scale, lo, hi, k)) = plan.aggregate {
            let mut q = self.db.prepare_cached(
                "SELECT bucket / ?4 AS b, SUM(n), SUM(sum), MIN(min), MAX(max), MAX(last_t),
                        (SELECT a2.last FROM aggregates a2
                          WHERE a2.scale_s = ?1 AND a2.path = ?2 AND a2.metric = ?3
                            AND a2.bucket / ?4 = aggregates.bucket / ?4
                          ORDER BY a2.last_t DESC LIMIT 1)
                 FROM aggregates
                 WHERE scale_s = ?1 AND path = ?2 AND metric = ?3 AND bucket >= ?5 AND bucket < ?6
                 GROUP BY b ORDER BY b",
            )?;
            let args = params![
                scale as i64,
                path,
                metric,
                k as i64,
                clamp_i64(lo),
                clamp_i64(hi)
            ];
            let rows = q.query_map(args, |r| {
                let n: i64 = r.get(1)?;
                let sum: f64 = r.get(2)?;
                Ok(Point {
                    start_ns: (r.get::<_, i64>(0)? as u64).saturating_mul(plan.step_ns),
                    n: n as u64,
                    mean: sum / n.max(1) as f64,
                    min: r.get(3)?,
                    max: r.get(4)?,
                    last: r.get(6)?,
                })
            })?;
            return Ok(ScaleAnswer {
                points: rows.collect::<Result<_, _>>()?,
                source: format!("agg_{scale}s"),
                complete: true,
            });
        }
        // Not materialised: from the raw rows.
        let rows = self.range(path, metric, plan.from_ns, plan.to_ns, 1_000_000)?;
        Ok(ScaleAnswer {
            points: plan.fold(rows.iter().map(|r| (r.t_ns, r.value))),
            source: "raw".into(),
            complete: plan.from_ns >= self.horizon_ns,
        })
    }

    /// Delete raw rows older than the retention before `now_ns` (aggregates stay). Returns how
    /// many were deleted.
    fn apply_retention(&mut self, now_ns: u64) -> Result<usize, Error> {
        let cut = now_ns.saturating_sub(self.retention.as_nanos() as u64);
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "DELETE FROM estimates WHERE t_ns < ?1",
            params![clamp_i64(cut)],
        )?;
        if n > 0 {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('horizon_ns', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)",
                params![clamp_i64(cut)],
            )?;
        }
        tx.commit()?;
        if n > 0 {
            self.horizon_ns = self.horizon_ns.max(cut);
        }
        Ok(n)
    }

    /// Estimates stored (raw rows).
    fn count(&self) -> Result<u64, Error> {
        Ok(self
            .db
            .query_row("SELECT COUNT(*) FROM estimates", [], |r| r.get::<_, i64>(0))?
            as u64)
    }

    fn put_map(&mut self, map: &StoredMap) -> Result<(), Error> {
        check_map(map)?;
        let tx = self.db.transaction()?;
        tx.execute(
            "INSERT INTO maps (coordinator, t_ns, json) VALUES (?1, ?2, ?3)",
            params![map.coordinator, map.t_ns as i64, map.json],
        )?;
        // Newest by time, then by arrival: the same rows go on every backend.
        tx.execute(
            "DELETE FROM maps WHERE coordinator = ?1 AND id NOT IN (
                 SELECT id FROM maps WHERE coordinator = ?1
                 ORDER BY t_ns DESC, id DESC LIMIT ?2)",
            params![map.coordinator, MAPS_KEPT as i64],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn latest_maps(&self) -> Result<Vec<StoredMap>, Error> {
        let mut st = self.db.prepare(
            "SELECT coordinator, t_ns, json FROM maps AS m WHERE id = (
                 SELECT id FROM maps WHERE coordinator = m.coordinator
                 ORDER BY t_ns DESC, id DESC LIMIT 1)
             ORDER BY t_ns DESC, coordinator",
        )?;
        let rows = st.query_map([], |r| {
            Ok(StoredMap {
                coordinator: r.get(0)?,
                t_ns: r.get::<_, i64>(1)? as u64,
                json: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn queries(&self) -> Result<Vec<(String, String)>, Error> {
        let mut st = self
            .db
            .prepare_cached("SELECT id, spec FROM queries ORDER BY seq")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_query(&mut self, id: &str, spec: &str) -> Result<(), Error> {
        check_query(id, spec)?;
        self.db.execute(
            "INSERT INTO queries (id, spec) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET spec = excluded.spec",
            params![id, spec],
        )?;
        Ok(())
    }

    fn delete_query(&mut self, id: &str) -> Result<bool, Error> {
        Ok(self.db.execute("DELETE FROM queries WHERE id = ?1", [id])? > 0)
    }
}

/// Create `path` empty with mode 0600 if it does not exist (SQLite would make it 0644 under
/// the usual umask; its WAL and shared-memory files take the database file's mode). An
/// existing file keeps the mode its owner gave it.
fn create_private(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Io(e)),
    }
}

/// A row of `SELECT path, metric, t_ns, value, low, high, method, source, probe_bytes, trains,
/// confidence, elapsed_s, final, timescale_ms`.
fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    Ok(Record {
        path: r.get(0)?,
        metric: r.get(1)?,
        t_ns: r.get::<_, i64>(2)? as u64,
        value: r.get(3)?,
        low: r.get(4)?,
        high: r.get(5)?,
        method: r.get(6)?,
        source: r.get(7)?,
        probe_bytes: r.get::<_, i64>(8)? as u64,
        trains: r.get(9)?,
        confidence: r.get(10)?,
        elapsed_s: r.get(11)?,
        final_: r.get::<_, i64>(12)? != 0,
        timescale_ms: r.get(13)?,
    })
}

/// Stores made before estimates stated their time scale lack the column: add it (rows already
/// there keep NULL, which reads back as `None`).
fn add_timescale_column(db: &Connection) -> Result<(), Error> {
    let has: bool = db
        .prepare("SELECT 1 FROM pragma_table_info('estimates') WHERE name = 'timescale_ms'")?
        .exists([])?;
    if !has {
        db.execute_batch("ALTER TABLE estimates ADD COLUMN timescale_ms REAL")?;
    }
    Ok(())
}

fn clamp_i64(x: u64) -> i64 {
    x.min(i64::MAX as u64) as i64
}

#[cfg(any(test, feature = "conformance"))]
#[doc(hidden)]
pub mod conformance;

/// The shared suite against SQLite in memory (PostgreSQL runs it in `mgrp-store-pg`).
#[cfg(test)]
mod tests {
    use super::*;

    crate::conformance_tests!(|retention| -> Box<dyn EstimateStore> {
        Box::new(Store::in_memory(retention).unwrap())
    });
}
