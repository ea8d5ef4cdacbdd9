//! The agent's HTTP API (axum), documented in `openapi.yaml`: paths, schedules, the current
//! estimate (measured on demand when stale), history at a time scale, raw records, event
//! subscriptions (SSE), the transfer modes, Prometheus metrics, and the dashboard. Loopback clients need nothing;
//! any other client needs `Authorization: Bearer TOKEN` (or `?access_token=` where a header
//! cannot be set; `auth`). Errors are JSON `{"error": "..."}` with a status that says whose
//! fault it is — unknown routes, methods, parameters and over-long URIs included. Connections
//! are bounded in number and in how long they may idle before a request ([`conn`]).

mod auth;
pub mod conn;
mod mpat;
mod queries;
pub mod query;

pub use conn::Limits;

use crate::watch::{Conditions, Watch};
use crate::{Hub, PathState};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use mgrp_store::{EstimateStore, Record};
use query::Q;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

mod assets {
    include!(concat!(env!("OUT_DIR"), "/dashboard.rs"));
}

/// The API's description, served at /v1/openapi.yaml.
pub const OPENAPI: &str = include_str!("../../openapi.yaml");

type AppState = Arc<Hub>;

/// The longest request URI answered; longer ones get a JSON 414. (Past 64 KiB, or a request
/// head past hyper's buffer, hyper itself answers 414/431 without a body.)
pub const MAX_URI: usize = 8192;

fn error(status: StatusCode, why: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": why.into() }))).into_response()
}

// Every field is a string, parsed by hand, so a bad value gets a message of ours; unknown
// names are refused (query::parse).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EstimateQuery {
    path: Option<String>,
    peer: Option<String>,
    metric: Option<String>,
    max_age: Option<String>,
    wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    path: Option<String>,
    peer: Option<String>,
    metric: Option<String>,
    step: Option<String>,
    count: Option<String>,
    end_ns: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    path: Option<String>,
    peer: Option<String>,
    metric: Option<String>,
    from_ns: Option<String>,
    to_ns: Option<String>,
    limit: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    path: Option<String>,
    peer: Option<String>,
    metric: Option<String>,
    below: Option<String>,
    exceeds: Option<String>,
    rise_pct: Option<String>,
    fall_pct: Option<String>,
    change_pct: Option<String>,
    query: Option<String>,
}

/// A refusal: its status and the reason, sent as `{"error": reason}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl ApiError {
    /// Why it was refused.
    pub fn reason(&self) -> &str {
        &self.1
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

pub(crate) fn bad(why: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, why.into())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// What the store holds per path: estimates, and on a testbed the ground truth beside them.
pub(crate) const METRICS: [&str; 8] = [
    "avail_bw",
    "capacity",
    "rtt",
    "loss",
    "avail_bw_truth",
    "episode_frequency",
    "episode_duration",
    "jitter",
];

fn metric(m: Option<String>) -> Result<String, ApiError> {
    let m = m.unwrap_or_else(|| "avail_bw".into());
    if METRICS.contains(&m.as_str()) {
        Ok(m)
    } else {
        Err(bad(format!(
            "unknown metric {m:?}: use {}",
            METRICS.join(", ")
        )))
    }
}

fn unknown(path: &str, metric: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("no {metric} estimates for path {path:?} (see /v1/paths)"),
    )
}

fn lock(st: &Hub) -> Result<std::sync::MutexGuard<'_, Box<dyn EstimateStore>>, ApiError> {
    st.store
        .lock()
        .map_err(|_| internal("the store's lock is poisoned"))
}

/// The path a request names: by `path`, or by `peer` for a scheduled path, with its schedule
/// if this agent runs one. `path` is `None` when the schedule has not connected yet.
struct Target {
    path: Option<String>,
    sched: Option<Arc<PathState>>,
}

impl Target {
    fn resolve(st: &Hub, path: Option<String>, peer: Option<String>) -> Result<Target, ApiError> {
        let path = path.filter(|s| !s.is_empty());
        let peer = peer.filter(|s| !s.is_empty());
        match (path, peer) {
            (Some(_), Some(_)) => Err(bad("give `path` or `peer`, not both")),
            (None, None) => Err(bad("missing parameter `path` (SRC->DST) or `peer`")),
            (Some(p), None) => {
                if p.len() > 200 {
                    return Err(bad("path longer than 200 bytes"));
                }
                let sched = st.find_path(Some(&p), None);
                Ok(Target {
                    path: Some(p),
                    sched,
                })
            }
            (None, Some(peer)) => match st.find_path(None, Some(&peer)) {
                Some(s) => Ok(Target {
                    path: s.name(),
                    sched: Some(s),
                }),
                None => Err(ApiError(
                    StatusCode::NOT_FOUND,
                    format!("no schedule for peer {peer:?} (see /v1/schedules)"),
                )),
            },
        }
    }

    /// Is `r` an estimate of this path?
    fn matches(&self, r: &Record) -> bool {
        self.path.as_deref() == Some(r.path.as_str())
            || self
                .sched
                .as_ref()
                .is_some_and(|s| s.name().as_deref() == Some(r.path.as_str()))
    }

    fn known(&self, st: &Hub, metric: &str) -> Result<String, ApiError> {
        let label = self.path.clone().unwrap_or_else(|| {
            self.sched
                .as_ref()
                .map_or("?".into(), |s| s.sched.peer.to_string())
        });
        let Some(p) = &self.path else {
            return Err(unknown(&label, metric));
        };
        let known = lock(st)?.series().map_err(internal)?;
        if known.iter().any(|(kp, m)| kp == p && m == metric) {
            Ok(p.clone())
        } else {
            Err(unknown(p, metric))
        }
    }
}

type ApiResult = Result<Response, ApiError>;

async fn paths(State(st): State<AppState>) -> ApiResult {
    let v = lock(&st)?.series().map_err(internal)?;
    Ok(Json(
        v.into_iter()
            .map(|(path, metric)| serde_json::json!({ "path": path, "metric": metric }))
            .collect::<Vec<_>>(),
    )
    .into_response())
}

async fn schedules(State(st): State<AppState>) -> ApiResult {
    Ok(Json(st.paths().iter().map(|p| p.view()).collect::<Vec<_>>()).into_response())
}

async fn passive(State(st): State<AppState>) -> ApiResult {
    Ok(Json(st.passive()).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoQuery {}

/// The transfer modes: available or why not, per-mode counters, the map per destination.
async fn transfer(State(st): State<AppState>, Q(_): Q<NoQuery>) -> ApiResult {
    Ok(Json(st.transfer()).into_response())
}

fn duration(name: &str, v: &str, max: Duration) -> Result<Duration, ApiError> {
    let d = mgrp_traffic::units::parse_duration(v).map_err(|e| bad(format!("{name}: {e}")))?;
    if d > max {
        return Err(bad(format!("{name}: at most {}s", max.as_secs())));
    }
    Ok(d)
}

async fn estimate(State(st): State<AppState>, Q(q): Q<EstimateQuery>) -> ApiResult {
    let metric = metric(q.metric)?;
    let target = Target::resolve(&st, q.path, q.peer)?;
    let max_age = match q.max_age.as_deref() {
        Some(v) => Some(duration("max_age", v, Duration::from_secs(7 * 86_400))?),
        None => None,
    };
    let wait = duration(
        "wait",
        q.wait.as_deref().unwrap_or("20s"),
        Duration::from_secs(120),
    )?;
    let now = mgrp_clock::realtime_ns();
    let latest = match &target.path {
        Some(p) => lock(&st)?.latest(p, &metric).map_err(internal)?,
        None => None,
    };
    let fresh =
        |r: &Record| max_age.is_none_or(|a| now.saturating_sub(r.t_ns) <= a.as_nanos() as u64);
    if let Some(r) = latest.as_ref().filter(|r| fresh(r)) {
        return Ok(Json(r).into_response());
    }
    let label = target.path.clone().unwrap_or_default();
    if max_age.is_none() {
        return Err(unknown(&label, &metric));
    }
    let Some(sched) = target.sched.clone() else {
        let why = match &latest {
            Some(r) => format!(
                "the newest {metric} estimate of {label:?} is {:.1} s old and this agent does not schedule that path, so it cannot measure it now",
                now.saturating_sub(r.t_ns) as f64 / 1e9
            ),
            None => format!("no {metric} estimates for {label:?} and no schedule to measure it"),
        };
        return Err(ApiError(StatusCode::CONFLICT, why));
    };
    // Listen before ringing, so the answer cannot slip past.
    let mut rx = st.subscribe();
    let skipped0 = sched.counters().skipped_for_budget;
    sched.measure_now();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(r)) if r.t_ns >= now && target.matches(&r) => {
                if r.metric == metric {
                    return Ok(Json(&*r).into_response());
                }
                // A round that measured something else (the capacity a method needs first):
                // ask for the next one.
                sched.measure_now();
            }
            Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) => return Err(internal("the agent is stopping")),
            Err(_) => {
                let why = if sched.counters().skipped_for_budget > skipped0 {
                    "the path's probe byte budget for this minute is spent".to_string()
                } else {
                    sched
                        .view()
                        .last_error
                        .unwrap_or_else(|| "the measurement did not finish in time".into())
                };
                return Err(ApiError(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("no new {metric} estimate within {wait:?}: {why}"),
                ));
            }
        }
    }
}

async fn history(State(st): State<AppState>, Q(q): Q<HistoryQuery>) -> ApiResult {
    let metric = metric(q.metric)?;
    let step = mgrp_traffic::units::parse_duration(q.step.as_deref().unwrap_or("60s"))
        .map_err(|e| bad(format!("step: {e}")))?;
    let count: usize = q
        .count
        .as_deref()
        .unwrap_or("60")
        .parse()
        .map_err(|_| bad("count must be a whole number"))?;
    let end_ns: u64 = match q.end_ns.as_deref() {
        Some(e) => e
            .parse()
            .map_err(|_| bad("end_ns must be Unix nanoseconds"))?,
        None => mgrp_clock::realtime_ns(),
    };
    let target = Target::resolve(&st, q.path, q.peer)?;
    let path = target.known(&st, &metric)?;
    match lock(&st)?.scale(&path, &metric, step, count, end_ns) {
        Ok(a) => Ok(Json(a).into_response()),
        Err(mgrp_store::Error::BadInput(why)) => Err(bad(why)),
        Err(e) => Err(internal(e)),
    }
}

fn ns(name: &str, v: Option<&str>, default: u64) -> Result<u64, ApiError> {
    match v {
        Some(v) => v
            .parse()
            .map_err(|_| bad(format!("{name} must be Unix nanoseconds"))),
        None => Ok(default),
    }
}

async fn records(State(st): State<AppState>, Q(q): Q<RecordsQuery>) -> ApiResult {
    let metric = metric(q.metric)?;
    let to = ns("to_ns", q.to_ns.as_deref(), mgrp_clock::realtime_ns())?;
    let from = ns(
        "from_ns",
        q.from_ns.as_deref(),
        to.saturating_sub(3_600_000_000_000),
    )?;
    if from > to {
        return Err(bad("from_ns is after to_ns"));
    }
    let limit: usize = q
        .limit
        .as_deref()
        .unwrap_or("10000")
        .parse()
        .ok()
        .filter(|n| (1..=100_000).contains(n))
        .ok_or_else(|| bad("limit must be 1..=100000"))?;
    let target = Target::resolve(&st, q.path, q.peer)?;
    let path = target.known(&st, &metric)?;
    let v = lock(&st)?
        .range(&path, &metric, from, to, limit)
        .map_err(internal)?;
    Ok(Json(v).into_response())
}

fn pct(name: &str, v: Option<&str>) -> Result<Option<f64>, ApiError> {
    match v {
        None => Ok(None),
        Some(v) => match v.parse::<f64>() {
            Ok(x) if x > 0.0 && x.is_finite() => Ok(Some(x)),
            _ => Err(bad(format!("{name} must be a positive number of percent"))),
        },
    }
}

/// A subscription's open connection; counted while it lasts.
struct Subscription {
    hub: Arc<Hub>,
    rx: tokio::sync::broadcast::Receiver<Arc<Record>>,
    target: Target,
    metric: String,
    watch: Watch,
    pending: VecDeque<sse::Event>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
}

type EventStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<sse::Event, Infallible>> + Send>>;

async fn events(
    State(st): State<AppState>,
    Q(q): Q<EventsQuery>,
) -> Result<Sse<sse::KeepAliveStream<EventStream>>, ApiError> {
    if let Some(id) = q.query.clone() {
        let alone = q.path.is_none()
            && q.peer.is_none()
            && q.metric.is_none()
            && q.below.is_none()
            && q.exceeds.is_none()
            && q.rise_pct.is_none()
            && q.fall_pct.is_none()
            && q.change_pct.is_none();
        if !alone {
            return Err(bad(
                "`query` takes no other parameter: the query holds its conditions",
            ));
        }
        return query_events(st, id);
    }
    let metric = metric(q.metric)?;
    let below = match q.below.as_deref() {
        None => None,
        Some(v) => Some(threshold("below", &metric, v)?),
    };
    let exceeds = match q.exceeds.as_deref() {
        None => None,
        Some(v) => Some(threshold("exceeds", &metric, v)?),
    };
    let change = pct("change_pct", q.change_pct.as_deref())?;
    let fall = pct("fall_pct", q.fall_pct.as_deref())?.or(change);
    if fall.is_some_and(|f| f > 100.0) {
        return Err(bad("fall_pct above 100 can never happen"));
    }
    let cond = Conditions {
        below,
        rise_pct: pct("rise_pct", q.rise_pct.as_deref())?.or(change),
        fall_pct: fall,
        exceeds,
    };
    let target = Target::resolve(&st, q.path, q.peer)?;
    if target.sched.is_none() {
        target.known(&st, &metric)?;
    }
    st.subscribers.fetch_add(1, Ordering::Relaxed);
    let sub = Subscription {
        rx: st.subscribe(),
        hub: st.clone(),
        target,
        metric,
        watch: Watch::new(cond),
        pending: VecDeque::new(),
    };
    let stream = futures_util::stream::unfold(sub, |mut s| async move {
        loop {
            if let Some(e) = s.pending.pop_front() {
                return Some((Ok(e), s));
            }
            match s.rx.recv().await {
                Ok(r) if r.metric == s.metric && s.target.matches(&r) => {
                    for ev in s.watch.on_record(&r) {
                        let data = serde_json::to_string(&ev).unwrap_or_default();
                        s.pending
                            .push_back(sse::Event::default().event(ev.kind.name()).data(data));
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    s.hub.events_lagged.fetch_add(n, Ordering::Relaxed);
                    let data = serde_json::json!({ "missed": n }).to_string();
                    s.pending
                        .push_back(sse::Event::default().event("lagged").data(data));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Ok(Sse::new(Box::pin(stream) as EventStream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// An event query's notifications (`query` events), and `lagged` when the subscriber fell
/// behind.
fn query_events(
    st: AppState,
    id: String,
) -> Result<Sse<sse::KeepAliveStream<EventStream>>, ApiError> {
    if !st.queries.exists(&id) {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no query {id:?} (see /v1/queries)"),
        ));
    }
    st.subscribers.fetch_add(1, Ordering::Relaxed);
    let rx = st.queries.subscribe();
    let guard = SubscriberCount(st.clone());
    let stream = futures_util::stream::unfold((rx, guard, id), |(mut rx, g, id)| async move {
        loop {
            match rx.recv().await {
                Ok(e) if e.query == id => {
                    let data = serde_json::to_string(&*e).unwrap_or_default();
                    let ev = sse::Event::default().event("query").data(data);
                    return Some((Ok(ev), (rx, g, id)));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    g.0.events_lagged.fetch_add(n, Ordering::Relaxed);
                    let data = serde_json::json!({ "missed": n }).to_string();
                    let ev = sse::Event::default().event("lagged").data(data);
                    return Some((Ok(ev), (rx, g, id)));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Ok(Sse::new(Box::pin(stream) as EventStream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Counts an open query subscription while it lasts.
struct SubscriberCount(Arc<Hub>);

impl Drop for SubscriberCount {
    fn drop(&mut self) {
        self.0.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A threshold in the metric's unit (not negative); bandwidths also as `5mbit`, delays as `5ms`.
pub(crate) fn threshold(name: &str, metric: &str, v: &str) -> Result<f64, ApiError> {
    let rate = matches!(metric, "avail_bw" | "capacity" | "avail_bw_truth");
    let delay = matches!(metric, "rtt" | "jitter" | "episode_duration");
    if let Ok(x) = v.trim().parse::<f64>() {
        if x.is_finite() && x >= 0.0 {
            return Ok(x);
        }
        return Err(bad(format!(
            "threshold {v:?} must be a finite number, not negative"
        )));
    }
    if rate {
        if let Ok(x) = mgrp_traffic::units::parse_rate(v) {
            return Ok(x as f64);
        }
    }
    if delay {
        if let Ok(d) = mgrp_traffic::units::parse_duration(v) {
            return Ok(d.as_secs_f64());
        }
    }
    Err(bad(format!(
        "{name}: {v:?} is not a number{}",
        if rate {
            " or a rate like 5mbit"
        } else if delay {
            " or a duration like 5ms"
        } else {
            ""
        }
    )))
}

async fn metrics(State(st): State<AppState>) -> ApiResult {
    let text = crate::metrics::render(&st, mgrp_clock::realtime_ns()).map_err(internal)?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// Netmapper's latest map: nodes, edges with their bound ("=" or ">"), value, when measured
/// and evidence, the paths, and how the map was made.
async fn netmap(State(st): State<AppState>) -> ApiResult {
    let m = st
        .map
        .read()
        .map_err(|_| internal("map state poisoned"))?
        .clone();
    if m.schedule.is_none() && m.map.is_none() {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "no map: the agent's configuration has no [map] section".into(),
        ));
    }
    Ok(Json(m).into_response())
}

/// The newest map of every coordinator in this agent's store: its own, or, on a PostgreSQL
/// store shared by many agents, each one's.
async fn netmaps(State(st): State<AppState>) -> ApiResult {
    let maps = lock(&st)?.latest_maps().map_err(internal)?;
    let maps: Vec<serde_json::Value> = maps
        .into_iter()
        .map(|m| {
            // A document that no longer parses is shown as such, not dropped.
            let map = serde_json::from_str::<serde_json::Value>(&m.json)
                .unwrap_or_else(|e| serde_json::json!({ "error": format!("unreadable: {e}") }));
            serde_json::json!({ "coordinator": m.coordinator, "t_ns": m.t_ns, "map": map })
        })
        .collect();
    Ok(Json(serde_json::json!({ "maps": maps })).into_response())
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        _ => "text/plain; charset=utf-8",
    }
}

fn asset(name: &str) -> Response {
    match assets::FILES.iter().find(|(n, _)| *n == name) {
        Some((n, bytes)) => ([(header::CONTENT_TYPE, content_type(n))], *bytes).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no dashboard file {name:?}")),
    }
}

async fn dashboard_index() -> Response {
    asset("index.html")
}

async fn dashboard_file(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    asset(&name)
}

/// Refuse over-long URIs before anything parses them.
async fn uri_limit(req: Request, next: Next) -> Response {
    let len = req.uri().path().len() + req.uri().query().map_or(0, |q| q.len() + 1);
    if len > MAX_URI {
        return error(
            StatusCode::URI_TOO_LONG,
            format!("request URI longer than {MAX_URI} bytes"),
        );
    }
    next.run(req).await
}

/// The API's routes, behind the token check and the URI limit.
fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(dashboard_index))
        .route("/dashboard/{*file}", get(dashboard_file))
        .route("/v1/paths", get(paths))
        .route("/v1/schedules", get(schedules))
        .route("/v1/passive", get(passive))
        .route("/v1/transfer", get(transfer))
        .route("/v1/mpat", get(mpat::list).post(mpat::create))
        .route(
            "/v1/mpat/{name}",
            axum::routing::put(mpat::reweight).delete(mpat::delete),
        )
        .route("/v1/queries", get(queries::list).post(queries::create))
        .route(
            "/v1/queries/{id}",
            get(queries::get).delete(queries::delete),
        )
        .route("/v1/estimate", get(estimate))
        .route("/v1/history", get(history))
        .route("/v1/records", get(records))
        .route("/v1/events", get(events))
        .route("/v1/map", get(netmap))
        .route("/v1/maps", get(netmaps))
        .route("/v1/openapi.yaml", get(openapi))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such endpoint: see /v1/openapi.yaml",
            )
        })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: the API answers GET only (and POST, PUT, DELETE under /v1/mpat, POST and DELETE under /v1/queries)",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), auth::auth))
        .layer(middleware::from_fn(uri_limit))
        .with_state(state)
}

/// Why the HTTP server did not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("HTTP API: cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("HTTP API: {0}")]
    Io(#[from] std::io::Error),
}

/// The HTTP server, on its own thread and runtime; stopped (gracefully) on drop.
pub struct Http {
    addr: SocketAddr,
    counters: Arc<conn::ConnCounters>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Http {
    /// Serve the hub's API on `listen` within the default [`Limits`].
    pub fn start(listen: SocketAddr, hub: Arc<Hub>) -> Result<Http, HttpError> {
        Http::start_with(listen, hub, Limits::default())
    }

    pub fn start_with(
        listen: SocketAddr,
        hub: Arc<Hub>,
        limits: Limits,
    ) -> Result<Http, HttpError> {
        let std_listener =
            std::net::TcpListener::bind(listen).map_err(|e| HttpError::Listen(listen, e))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let counters = Arc::new(conn::ConnCounters::default());
        let c = counters.clone();
        hub.add_counters(
            "http_connections",
            Box::new(move || {
                c.snapshot()
                    .pairs()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            }),
        );
        let app = router(hub);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("http-api".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(_) => return,
                };
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    conn::serve(listener, app, limits, c, async {
                        let _ = rx.await;
                    })
                    .await;
                });
            })?;
        Ok(Http {
            addr,
            counters,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server did with connections so far.
    pub fn connections(&self) -> conn::ConnSnapshot {
        self.counters.snapshot()
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            // Graceful shutdown waits for open connections; do not hang on a stuck client.
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
