//! The agent's HTTP API (axum) over the store: paths, the current estimate, history at a time
//! scale. Loopback clients need nothing; any other client needs `Authorization: Bearer TOKEN`.
//! Errors are JSON `{"error": "..."}` with a 4xx status that says whose fault it is.

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use mgrp_store::Store;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Clone)]
struct AppState {
    store: Arc<Mutex<Store>>,
    token: Option<Arc<str>>,
}

fn error(status: StatusCode, why: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": why.into() }))).into_response()
}

async fn auth(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if peer.ip().is_loopback() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match (&st.token, given) {
        (Some(t), Some(g)) if constant_time_eq(t.as_bytes(), g.as_bytes()) => next.run(req).await,
        (None, _) => error(
            StatusCode::UNAUTHORIZED,
            "this agent answers only localhost: configure a token to allow other clients",
        ),
        _ => error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token (Authorization: Bearer TOKEN)",
        ),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Deserialize)]
struct SeriesQuery {
    path: Option<String>,
    metric: Option<String>,
}

#[derive(Deserialize)]
struct HistoryQuery {
    path: Option<String>,
    metric: Option<String>,
    step: Option<String>,
    count: Option<String>,
    end_ns: Option<String>,
}

/// A refusal: its status and the reason, sent as `{"error": reason}`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

fn bad(why: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, why.into())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn required(v: Option<String>, name: &str) -> Result<String, ApiError> {
    v.filter(|s| !s.is_empty())
        .ok_or_else(|| bad(format!("missing parameter `{name}`")))
}

fn unknown(path: &str, metric: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("no {metric} estimates for path {path:?} (see /v1/paths)"),
    )
}

type ApiResult = Result<Response, ApiError>;

async fn paths(State(st): State<AppState>) -> ApiResult {
    let v = st
        .store
        .lock()
        .map_err(internal)?
        .series()
        .map_err(internal)?;
    Ok(Json(
        v.into_iter()
            .map(|(path, metric)| serde_json::json!({ "path": path, "metric": metric }))
            .collect::<Vec<_>>(),
    )
    .into_response())
}

async fn estimate(State(st): State<AppState>, Query(q): Query<SeriesQuery>) -> ApiResult {
    let path = required(q.path, "path")?;
    let metric = q.metric.unwrap_or_else(|| "avail_bw".into());
    let s = st.store.lock().map_err(internal)?;
    match s.latest(&path, &metric).map_err(internal)? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(unknown(&path, &metric)),
    }
}

async fn history(State(st): State<AppState>, Query(q): Query<HistoryQuery>) -> ApiResult {
    let path = required(q.path, "path")?;
    let metric = q.metric.unwrap_or_else(|| "avail_bw".into());
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
    let s = st.store.lock().map_err(internal)?;
    let known = s.series().map_err(internal)?;
    if !known.iter().any(|(p, m)| *p == path && *m == metric) {
        return Err(unknown(&path, &metric));
    }
    match s.scale(&path, &metric, step, count, end_ns) {
        Ok(a) => Ok(Json(a).into_response()),
        Err(mgrp_store::Error::BadInput(why)) => Err(bad(why)),
        Err(e) => Err(internal(e)),
    }
}

/// The HTTP server, on its own thread and runtime; stopped (gracefully) on drop.
pub struct Http {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Http {
    pub fn start(
        listen: SocketAddr,
        token: Option<String>,
        store: Arc<Mutex<Store>>,
    ) -> Result<Http, String> {
        let std_listener = std::net::TcpListener::bind(listen)
            .map_err(|e| format!("HTTP API: cannot listen on {listen}: {e}"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| format!("HTTP API: {e}"))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| format!("HTTP API: {e}"))?;
        let state = AppState {
            store,
            token: token.map(Into::into),
        };
        let app = Router::new()
            .route("/v1/paths", get(paths))
            .route("/v1/estimate", get(estimate))
            .route("/v1/history", get(history))
            .fallback(|| async {
                error(
                    StatusCode::NOT_FOUND,
                    "no such endpoint: see /v1/paths, /v1/estimate, /v1/history",
                )
            })
            .layer(middleware::from_fn_with_state(state.clone(), auth))
            .with_state(state);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
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
                    let _ = axum::serve(
                        listener,
                        app.into_make_service_with_connect_info::<SocketAddr>(),
                    )
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await;
                });
            })
            .map_err(|e| format!("HTTP API thread: {e}"))?;
        Ok(Http {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
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
