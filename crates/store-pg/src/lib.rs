//! The estimate store on PostgreSQL: [`PgStore`] implements [`EstimateStore`] for a central
//! archive that many agents push to, and answers every question as the SQLite
//! [`mgrp_store::Store`] does: same `source`, same `complete`, same points (a mean from the
//! aggregates may differ in its last bits, its sum being added in another order).
//!
//! Connect with a libpq-style URL or key/value string, e.g.
//! `postgresql://mgrp:secret@archive.example:5432/mgrp` or
//! `host=/run/postgresql dbname=mgrp user=mgrp`. The connection is plain (no TLS): use a Unix
//! socket, a private network or a tunnel to reach the archive. Connecting times out after 10 s
//! unless the URL says otherwise (`connect_timeout`); to notice a vanished server sooner than
//! TCP keepalive's default 2 h, add e.g. `keepalives_idle=60` or `tcp_user_timeout=30` (seconds).
//!
//! Schema (created if missing, so a role that may only read and write the tables also works
//! once it exists): `mgrp_estimates` (raw rows), `mgrp_aggregates` (1 min / 1 h buckets,
//! upserted in the row's transaction), `mgrp_meta` (the retention horizon). The estimates table
//! has no key without its time column, so it can become a TimescaleDB hypertable partitioned on
//! the integer time `t_ns` (1-day chunks, in ns):
//!
//! ```sql
//! SELECT create_hypertable('mgrp_estimates', 't_ns',
//!     chunk_time_interval => 86400000000000, migrate_data => true);
//! ```
//!
//! TimescaleDB is not required, and [`EstimateStore::apply_retention`] works on either table;
//! its own retention or compression policies on an integer time column also need
//! `set_integer_now_func`. For a `timestamptz`, query `to_timestamp(t_ns / 1e9)`.

use mgrp_store::{
    check_map, check_record, Error, EstimateStore, Point, Record, ScaleAnswer, ScalePlan,
    StoredMap, MAPS_KEPT, SCALES,
};
use postgres::config::Host;
use postgres::{Client, Config, NoTls, Row, Statement};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Text keys are `COLLATE "C"`: byte order, as SQLite compares, whatever the database's
/// locale (and cheaper to index). `id` orders rows of equal time by arrival, as SQLite's rowid
/// does, so ties come out the same; it is no key, so a hypertable needs none without `t_ns`.
const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS mgrp_estimates (
    id BIGINT GENERATED ALWAYS AS IDENTITY,
    path TEXT COLLATE "C" NOT NULL, metric TEXT COLLATE "C" NOT NULL, t_ns BIGINT NOT NULL,
    value DOUBLE PRECISION NOT NULL, low DOUBLE PRECISION NOT NULL,
    high DOUBLE PRECISION NOT NULL, method TEXT NOT NULL, source TEXT NOT NULL,
    probe_bytes BIGINT NOT NULL, trains BIGINT NOT NULL, confidence DOUBLE PRECISION NOT NULL,
    elapsed_s DOUBLE PRECISION NOT NULL, final BOOLEAN NOT NULL,
    timescale_ms DOUBLE PRECISION
);
-- Tables made before estimates stated their time scale (old rows read back as None).
ALTER TABLE mgrp_estimates ADD COLUMN IF NOT EXISTS timescale_ms DOUBLE PRECISION;
CREATE INDEX IF NOT EXISTS mgrp_estimates_by_path ON mgrp_estimates (path, metric, t_ns);
CREATE TABLE IF NOT EXISTS mgrp_aggregates (
    scale_s BIGINT NOT NULL, path TEXT COLLATE "C" NOT NULL, metric TEXT COLLATE "C" NOT NULL,
    bucket BIGINT NOT NULL, n BIGINT NOT NULL, sum DOUBLE PRECISION NOT NULL,
    min DOUBLE PRECISION NOT NULL, max DOUBLE PRECISION NOT NULL,
    last_t BIGINT NOT NULL, last DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scale_s, path, metric, bucket)
);
CREATE TABLE IF NOT EXISTS mgrp_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS mgrp_maps (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    coordinator TEXT COLLATE "C" NOT NULL, t_ns BIGINT NOT NULL, json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS mgrp_maps_by_coordinator ON mgrp_maps (coordinator, t_ns);
CREATE TABLE IF NOT EXISTS mgrp_queries (
    seq BIGINT GENERATED ALWAYS AS IDENTITY, id TEXT COLLATE "C" PRIMARY KEY, spec TEXT NOT NULL
);
"#;

const COLUMNS: &str = "path, metric, t_ns, value, low, high, method, source, probe_bytes, \
                       trains, confidence, elapsed_s, final, timescale_ms";

/// Raw rows a question may read, as the SQLite store caps them.
const RAW_LIMIT: i64 = 1_000_000;

pub struct PgStore {
    config: Config,
    /// Where the server is, for messages (never the password).
    at: String,
    /// A mutex, not a `RefCell`: the trait reads through `&self` and the client needs `&mut`;
    /// this also makes the store `Sync`.
    conn: Mutex<Conn>,
    retention: Duration,
}

struct Conn {
    client: Client,
    st: Statements,
    /// A call failed: check the connection before the next.
    failed: bool,
}

/// Prepared once per connection: each question is then one round trip.
struct Statements {
    insert: Statement,
    upsert: Statement,
    range: Statement,
    latest: Statement,
    raw: Statement,
    agg: Statement,
    horizon: Statement,
}

impl PgStore {
    /// Connect to the archive at `url`, creating the tables if missing. Raw rows older than
    /// `retention` go on [`EstimateStore::apply_retention`].
    pub fn connect(url: &str, retention: Duration) -> Result<PgStore, Error> {
        let mut config: Config = url
            .parse()
            .map_err(|e| Error::Backend(format!("invalid PostgreSQL URL: {}", why(&e))))?;
        // An unreachable archive must fail the call, not hang the agent.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("mgrp");
        }
        let at = describe(&config);
        let conn = Conn::open(&config, &at)?;
        Ok(PgStore {
            config,
            at,
            conn: Mutex::new(conn),
            retention,
        })
    }

    /// Run `f` on the connection, re-made first if the server dropped it (restart, network):
    /// an agent pushing to a central archive then survives with one failed call, which it was
    /// told of. Never retried here: a commit whose answer was lost may have happened.
    fn with<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Client, &Statements) -> Result<T, postgres::Error>,
    ) -> Result<T, Error> {
        let mut c = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        // After a failure the client may not know yet that its socket is dead (it only reads
        // it during a call), so ask the server, once.
        let dead = c.client.is_closed()
            || (std::mem::take(&mut c.failed)
                && c.client.is_valid(Duration::from_secs(5)).is_err());
        if dead {
            *c = Conn::open(&self.config, &self.at)?;
        }
        let Conn { client, st, failed } = &mut *c;
        f(client, st).map_err(|e| {
            *failed = true;
            Error::Backend(format!("PostgreSQL at {}: {what}: {}", self.at, why(&e)))
        })
    }
}

impl Conn {
    fn open(config: &Config, at: &str) -> Result<Conn, Error> {
        let mut client = config.connect(NoTls).map_err(|e| {
            Error::Backend(format!("cannot connect to PostgreSQL at {at}: {}", why(&e)))
        })?;
        let fail = |what: &'static str| {
            move |e: postgres::Error| {
                Error::Backend(format!("PostgreSQL at {at}: {what}: {}", why(&e)))
            }
        };
        let exists = client
            .query_one(
                "SELECT to_regclass('mgrp_estimates') IS NOT NULL
                    AND to_regclass('mgrp_aggregates') IS NOT NULL
                    AND to_regclass('mgrp_meta') IS NOT NULL
                    AND to_regclass('mgrp_maps') IS NOT NULL
                    AND to_regclass('mgrp_queries') IS NOT NULL",
                &[],
            )
            .and_then(|r| r.try_get::<_, bool>(0))
            .map_err(fail("checking the schema"))?;
        if !exists {
            // Agents starting together would race on the catalog (CREATE ... IF NOT EXISTS is
            // not atomic: a duplicate-key error on pg_type); the lock makes them take turns.
            let mut tx = client.transaction().map_err(fail("creating the schema"))?;
            tx.batch_execute("SELECT pg_advisory_xact_lock(7241007241)")
                .and_then(|_| tx.batch_execute(SCHEMA))
                .and_then(|_| tx.commit())
                .map_err(fail("creating the schema"))?;
        }
        let st = Statements::prepare(&mut client).map_err(fail("preparing statements"))?;
        Ok(Conn {
            client,
            st,
            failed: false,
        })
    }
}

impl Statements {
    fn prepare(c: &mut Client) -> Result<Statements, postgres::Error> {
        Ok(Statements {
            // One statement per batch, the columns as arrays. Rows get their ids in array
            // order, which is the order SQLite gives its rowids.
            insert: c.prepare(&format!(
                "INSERT INTO mgrp_estimates ({COLUMNS})
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::float8[],
                   $5::float8[], $6::float8[], $7::text[], $8::text[], $9::int8[], $10::int8[],
                   $11::float8[], $12::float8[], $13::bool[], $14::float8[])"
            ))?,
            // ON CONFLICT is atomic against concurrent writers (no lost update); the keys come
            // sorted, so two writers lock shared buckets in the same order and cannot deadlock.
            upsert: c.prepare(
                "INSERT INTO mgrp_aggregates AS a
                   (scale_s, path, metric, bucket, n, sum, min, max, last_t, last)
                 SELECT * FROM UNNEST($1::int8[], $2::text[], $3::text[], $4::int8[],
                   $5::int8[], $6::float8[], $7::float8[], $8::float8[], $9::int8[],
                   $10::float8[])
                 ON CONFLICT (scale_s, path, metric, bucket) DO UPDATE SET
                   n = a.n + excluded.n, sum = a.sum + excluded.sum,
                   min = LEAST(a.min, excluded.min), max = GREATEST(a.max, excluded.max),
                   last = CASE WHEN excluded.last_t >= a.last_t THEN excluded.last
                               ELSE a.last END,
                   last_t = GREATEST(a.last_t, excluded.last_t)",
            )?,
            range: c.prepare(&format!(
                "SELECT {COLUMNS} FROM mgrp_estimates
                 WHERE path = $1 AND metric = $2 AND t_ns >= $3 AND t_ns < $4
                 ORDER BY t_ns, id LIMIT $5"
            ))?,
            // Of rows sharing the newest time, the first stored: what the SQLite store returns.
            latest: c.prepare(&format!(
                "SELECT {COLUMNS} FROM mgrp_estimates WHERE path = $1 AND metric = $2
                 ORDER BY t_ns DESC, id LIMIT 1"
            ))?,
            raw: c.prepare(
                "SELECT t_ns, value FROM mgrp_estimates
                 WHERE path = $1 AND metric = $2 AND t_ns >= $3 AND t_ns < $4
                 ORDER BY t_ns, id LIMIT $5",
            )?,
            agg: c.prepare(
                "SELECT bucket / $4 AS b, SUM(n)::int8, SUM(sum), MIN(min), MAX(max),
                        (array_agg(last ORDER BY last_t DESC))[1]
                 FROM mgrp_aggregates
                 WHERE scale_s = $1 AND path = $2 AND metric = $3 AND bucket >= $5 AND bucket < $6
                 GROUP BY b ORDER BY b",
            )?,
            horizon: c.prepare("SELECT value FROM mgrp_meta WHERE key = 'horizon_ns'")?,
        })
    }
}

/// One aggregate bucket's share of a batch.
struct Agg {
    n: i64,
    sum: f64,
    min: f64,
    max: f64,
    last_t: i64,
    last: f64,
}

impl EstimateStore for PgStore {
    fn insert(&mut self, records: &[Record]) -> Result<(), Error> {
        for r in records {
            check_record(r)?;
        }
        if records.is_empty() {
            return Ok(());
        }
        // Summed per bucket first: one upsert per bucket and batch, not per record.
        let mut aggs: BTreeMap<(i64, &str, &str, i64), Agg> = BTreeMap::new();
        for r in records {
            let t = r.t_ns as i64;
            for s in SCALES {
                let bucket = (r.t_ns / (s * 1_000_000_000)) as i64;
                let a = aggs
                    .entry((s as i64, &r.path, &r.metric, bucket))
                    .or_insert(Agg {
                        n: 0,
                        sum: 0.0,
                        min: r.value,
                        max: r.value,
                        last_t: t,
                        last: r.value,
                    });
                a.n += 1;
                a.sum += r.value;
                a.min = a.min.min(r.value);
                a.max = a.max.max(r.value);
                // `>=`: of equal times the later record wins, as in SQLite's row-by-row upsert.
                if t >= a.last_t {
                    (a.last_t, a.last) = (t, r.value);
                }
            }
        }
        // Column arrays for UNNEST.
        fn col<T, U>(it: impl Iterator<Item = T>, f: impl Fn(T) -> U) -> Vec<U> {
            it.map(f).collect()
        }
        let rs = || records.iter();
        let (ks, vs) = (|| aggs.keys(), || aggs.values());
        self.with("insert", |client, st| {
            let mut tx = client.transaction()?;
            tx.execute(
                &st.insert,
                &[
                    &col(rs(), |r| r.path.as_str()),
                    &col(rs(), |r| r.metric.as_str()),
                    &col(rs(), |r| r.t_ns as i64),
                    &col(rs(), |r| r.value),
                    &col(rs(), |r| r.low),
                    &col(rs(), |r| r.high),
                    &col(rs(), |r| r.method.as_str()),
                    &col(rs(), |r| r.source.as_str()),
                    &col(rs(), |r| r.probe_bytes as i64),
                    &col(rs(), |r| r.trains as i64),
                    &col(rs(), |r| r.confidence),
                    &col(rs(), |r| r.elapsed_s),
                    &col(rs(), |r| r.final_),
                    &col(rs(), |r| r.timescale_ms),
                ],
            )?;
            tx.execute(
                &st.upsert,
                &[
                    &col(ks(), |k| k.0),
                    &col(ks(), |k| k.1),
                    &col(ks(), |k| k.2),
                    &col(ks(), |k| k.3),
                    &col(vs(), |a| a.n),
                    &col(vs(), |a| a.sum),
                    &col(vs(), |a| a.min),
                    &col(vs(), |a| a.max),
                    &col(vs(), |a| a.last_t),
                    &col(vs(), |a| a.last),
                ],
            )?;
            tx.commit()
        })
    }

    fn range(
        &self,
        path: &str,
        metric: &str,
        from_ns: u64,
        to_ns: u64,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        let (from, to, limit) = (
            clamp_i64(from_ns),
            clamp_i64(to_ns),
            limit.min(1_000_000) as i64,
        );
        self.with("range", |client, st| {
            let rows = client.query(&st.range, &[&path, &metric, &from, &to, &limit])?;
            rows.iter().map(record).collect()
        })
    }

    fn latest(&self, path: &str, metric: &str) -> Result<Option<Record>, Error> {
        self.with("latest", |client, st| {
            let row = client.query_opt(&st.latest, &[&path, &metric])?;
            row.as_ref().map(record).transpose()
        })
    }

    fn series(&self) -> Result<Vec<(String, String)>, Error> {
        self.with("series", |client, _| {
            let rows = client.query(
                "SELECT DISTINCT path, metric FROM mgrp_aggregates WHERE scale_s = 3600
                 ORDER BY path, metric",
                &[],
            )?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

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
            let (k, lo, hi) = (k as i64, clamp_i64(lo), clamp_i64(hi));
            let points = self.with("scale", |client, st| {
                let rows =
                    client.query(&st.agg, &[&(scale as i64), &path, &metric, &k, &lo, &hi])?;
                rows.iter()
                    .map(|r| {
                        let n: i64 = r.try_get(1)?;
                        let sum: f64 = r.try_get(2)?;
                        Ok(Point {
                            start_ns: (r.try_get::<_, i64>(0)? as u64).saturating_mul(plan.step_ns),
                            n: n as u64,
                            mean: sum / n.max(1) as f64,
                            min: r.try_get(3)?,
                            max: r.try_get(4)?,
                            last: r.try_get(5)?,
                        })
                    })
                    .collect()
            })?;
            return Ok(ScaleAnswer {
                points,
                source: format!("agg_{scale}s"),
                complete: true,
            });
        }
        // Not materialised: from the raw rows, folded by the same code as the SQLite store's
        // (same order), so the points are bit for bit the same. The horizon is read each time:
        // another agent may have applied the retention.
        let (from, to) = (clamp_i64(plan.from_ns), clamp_i64(plan.to_ns));
        let (horizon_ns, rows) = self.with("scale", |client, st| {
            let horizon = match client.query_opt(&st.horizon, &[])? {
                Some(r) => r.try_get::<_, i64>(0)? as u64,
                None => 0,
            };
            let rows = client.query(&st.raw, &[&path, &metric, &from, &to, &RAW_LIMIT])?;
            let rows = rows
                .iter()
                .map(|r| Ok((r.try_get::<_, i64>(0)? as u64, r.try_get::<_, f64>(1)?)))
                .collect::<Result<Vec<_>, postgres::Error>>()?;
            Ok((horizon, rows))
        })?;
        Ok(ScaleAnswer {
            points: plan.fold(rows),
            source: "raw".into(),
            complete: plan.from_ns >= horizon_ns,
        })
    }

    fn apply_retention(&mut self, now_ns: u64) -> Result<usize, Error> {
        let keep = self.retention.as_nanos().min(u64::MAX as u128) as u64;
        let cut = clamp_i64(now_ns.saturating_sub(keep));
        self.with("retention", |client, _| {
            let mut tx = client.transaction()?;
            let n = tx.execute("DELETE FROM mgrp_estimates WHERE t_ns < $1", &[&cut])?;
            if n > 0 {
                tx.execute(
                    "INSERT INTO mgrp_meta AS m (key, value) VALUES ('horizon_ns', $1)
                     ON CONFLICT (key) DO UPDATE SET value = GREATEST(m.value, excluded.value)",
                    &[&cut],
                )?;
            }
            tx.commit()?;
            Ok(n as usize)
        })
    }

    fn count(&self) -> Result<u64, Error> {
        self.with("count", |client, _| {
            let row = client.query_one("SELECT COUNT(*) FROM mgrp_estimates", &[])?;
            Ok(row.try_get::<_, i64>(0)? as u64)
        })
    }

    fn put_map(&mut self, map: &StoredMap) -> Result<(), Error> {
        check_map(map)?;
        self.with("storing a map", |client, _| {
            let mut tx = client.transaction()?;
            tx.execute(
                "INSERT INTO mgrp_maps (coordinator, t_ns, json) VALUES ($1, $2, $3)",
                &[&map.coordinator, &(map.t_ns as i64), &map.json],
            )?;
            tx.execute(
                "DELETE FROM mgrp_maps WHERE coordinator = $1 AND id NOT IN (
                     SELECT id FROM mgrp_maps WHERE coordinator = $1
                     ORDER BY t_ns DESC, id DESC LIMIT $2)",
                &[&map.coordinator, &(MAPS_KEPT as i64)],
            )?;
            tx.commit()
        })
    }

    fn latest_maps(&self) -> Result<Vec<StoredMap>, Error> {
        self.with("reading maps", |client, _| {
            let rows = client.query(
                "SELECT DISTINCT ON (coordinator) coordinator, t_ns, json FROM mgrp_maps
                 ORDER BY coordinator, t_ns DESC, id DESC",
                &[],
            )?;
            let mut maps = rows
                .iter()
                .map(|r| {
                    Ok(StoredMap {
                        coordinator: r.try_get(0)?,
                        t_ns: r.try_get::<_, i64>(1)? as u64,
                        json: r.try_get(2)?,
                    })
                })
                .collect::<Result<Vec<_>, postgres::Error>>()?;
            // The order SQLite gives: newest first, then by coordinator.
            maps.sort_by(|a, b| b.t_ns.cmp(&a.t_ns).then(a.coordinator.cmp(&b.coordinator)));
            Ok(maps)
        })
    }

    fn queries(&self) -> Result<Vec<(String, String)>, Error> {
        self.with("queries", |client, _| {
            let rows = client.query("SELECT id, spec FROM mgrp_queries ORDER BY seq", &[])?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

    fn put_query(&mut self, id: &str, spec: &str) -> Result<(), Error> {
        mgrp_store::check_query(id, spec)?;
        self.with("put_query", |client, _| {
            client.execute(
                "INSERT INTO mgrp_queries (id, spec) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET spec = excluded.spec",
                &[&id, &spec],
            )?;
            Ok(())
        })
    }

    fn delete_query(&mut self, id: &str) -> Result<bool, Error> {
        self.with("delete_query", |client, _| {
            Ok(client.execute("DELETE FROM mgrp_queries WHERE id = $1", &[&id])? > 0)
        })
    }
}

/// A row of [`COLUMNS`]. (`try_get`, not `get`: a column altered by hand is an error, not a
/// panic.)
fn record(r: &Row) -> Result<Record, postgres::Error> {
    Ok(Record {
        path: r.try_get(0)?,
        metric: r.try_get(1)?,
        t_ns: r.try_get::<_, i64>(2)? as u64,
        value: r.try_get(3)?,
        low: r.try_get(4)?,
        high: r.try_get(5)?,
        method: r.try_get(6)?,
        source: r.try_get(7)?,
        probe_bytes: r.try_get::<_, i64>(8)? as u64,
        trains: r.try_get::<_, i64>(9)? as u32,
        confidence: r.try_get(10)?,
        elapsed_s: r.try_get(11)?,
        final_: r.try_get(12)?,
        timescale_ms: r.try_get(13)?,
    })
}

/// `host:port/dbname as user`, for messages: what an operator needs to find the server, and
/// not the password.
fn describe(c: &Config) -> String {
    let ports = c.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let tcp = |name: &str, i| match name.contains(':') {
        true => format!("[{name}]:{}", port(i)),
        false => format!("{name}:{}", port(i)),
    };
    let mut hosts: Vec<String> = (c.get_hosts().iter().enumerate())
        .map(|(i, h)| match h {
            Host::Tcp(name) => tcp(name, i),
            Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        hosts = (c.get_hostaddrs().iter().enumerate())
            .map(|(i, a)| tcp(&a.to_string(), i))
            .collect();
    }
    let hosts = if hosts.is_empty() {
        "(no host given)".to_string()
    } else {
        hosts.join(",")
    };
    let user = c.get_user().unwrap_or("(default user)");
    format!("{hosts}/{} as {user}", c.get_dbname().unwrap_or(user))
}

/// The error and its causes: postgres' own message is only the kind ("db error", "error
/// connecting to server"), the reason is in the chain.
fn why(e: &postgres::Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s = format!("{s}: {c}");
        cause = c.source();
    }
    s
}

fn clamp_i64(x: u64) -> i64 {
    x.min(i64::MAX as u64) as i64
}
