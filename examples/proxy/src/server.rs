//! The proxy's HTTP side: bounded connections, bounded request bodies, each request forwarded to
//! the replica the chooser names, the answer streamed back with headers saying where and why.

use crate::{mono_ns, Shared};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

pub type Body = BoxBody<Bytes, hyper::Error>;
pub type Upstream = Client<HttpConnector, Full<Bytes>>;

/// Which replica answered (index into the configured list).
pub const HDR_REPLICA: &str = "x-mgrp-replica";
/// Why it was chosen: best, divert, no_estimates, agent_down.
pub const HDR_CHOICE: &str = "x-mgrp-choice";

/// Headers that belong to one hop (RFC 9110 §7.6.1), never forwarded.
const HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub fn upstream(max_idle_per_replica: usize) -> Upstream {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    conn.set_connect_timeout(Some(Duration::from_secs(3)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_replica)
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(TokioTimer::new())
        .build(conn)
}

fn full(status: StatusCode, body: impl Into<Bytes>, json: bool) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    let ct = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

fn strip_hop(h: &mut hyper::HeaderMap) {
    // Names listed in Connection are hop-by-hop too.
    let listed: Vec<HeaderName> = h
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in listed {
        h.remove(n);
    }
    for n in HOP {
        h.remove(*n);
    }
}

pub(crate) async fn handle(sh: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    if req.uri().path() == "/proxy/status" {
        let st = sh.status();
        return match serde_json::to_vec_pretty(&st) {
            Ok(v) => full(StatusCode::OK, v, true),
            Err(e) => full(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), false),
        };
    }
    let (mut parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > sh.max_body as u64) {
        sh.counters.too_large.fetch_add(1, Relaxed);
        return full(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {} bytes", sh.max_body),
            false,
        );
    }
    let body = match Limited::new(body, sh.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let too_large = e.is::<http_body_util::LengthLimitError>();
            if too_large {
                sh.counters.too_large.fetch_add(1, Relaxed);
                return full(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body over {} bytes", sh.max_body),
                    false,
                );
            }
            sh.counters.bad_requests.fetch_add(1, Relaxed);
            return full(
                StatusCode::BAD_REQUEST,
                format!("reading the body: {e}"),
                false,
            );
        }
    };
    let choice = sh
        .chooser
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .choose(mono_ns());
    let replica = &sh.replicas[choice.replica];
    // What leaves toward the replica (the body and roughly the head): the proxy's own load on
    // that path, added back to active estimates.
    let head_bytes = 200
        + parts
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    sh.chooser
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .handle_sent(mono_ns(), choice.replica, (body.len() + head_bytes) as u64);
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let uri = match format!("http://{}{pq}", replica.addr).parse::<hyper::Uri>() {
        Ok(u) => u,
        Err(e) => {
            sh.counters.bad_requests.fetch_add(1, Relaxed);
            return full(StatusCode::BAD_REQUEST, format!("target: {e}"), false);
        }
    };
    strip_hop(&mut parts.headers);
    parts.headers.remove(hyper::header::HOST);
    let mut up = Request::from_parts(parts, Full::new(body));
    *up.uri_mut() = uri;
    *up.version_mut() = hyper::Version::HTTP_11;
    sh.counters.forwarded.fetch_add(1, Relaxed);
    let resp = match tokio::time::timeout(sh.upstream_timeout, sh.upstream.request(up)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            sh.counters.upstream_errors.fetch_add(1, Relaxed);
            return full(
                StatusCode::BAD_GATEWAY,
                format!("replica {} ({}): {e}", choice.replica, replica.addr),
                false,
            );
        }
        Err(_) => {
            sh.counters.upstream_errors.fetch_add(1, Relaxed);
            return full(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "replica {} ({}) did not answer in time",
                    choice.replica, replica.addr
                ),
                false,
            );
        }
    };
    let (mut rp, rb) = resp.into_parts();
    strip_hop(&mut rp.headers);
    rp.headers
        .insert(HDR_REPLICA, HeaderValue::from(choice.replica as u64));
    rp.headers
        .insert(HDR_CHOICE, HeaderValue::from_static(choice.reason.as_str()));
    Response::from_parts(rp, rb.boxed())
}

/// Accept connections for ever: at most `max_connections` served at once (more wait in the
/// kernel's accept queue), each closed if a request head does not arrive within 10 s.
pub(crate) async fn serve(
    sh: Arc<Shared>,
    listener: tokio::net::TcpListener,
    max_connections: usize,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => {
                sh.counters.accept_errors.fetch_add(1, Relaxed);
                // Out of descriptors and the like: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        sh.counters.connections.fetch_add(1, Relaxed);
        let sh = sh.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let sh = sh.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(sh, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            drop(permit);
        });
    }
}
