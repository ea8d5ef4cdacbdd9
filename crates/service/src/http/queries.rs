//! `/v1/queries`: create a query (POST, a JSON body), list them (GET), one's status (GET
//! /v1/queries/ID), forget one (DELETE /v1/queries/ID). A peer without a route from this host
//! is refused at once (422); a peer with a route but no agent is accepted, and its status says
//! what failed (`last_error`), never silence.

use super::{bad, ApiError, ApiResult, AppState};
use crate::queries::{QueryError, QueryRequest, QuerySpec};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use std::net::{SocketAddr, UdpSocket};

/// Largest request body: a query is a few hundred bytes.
const MAX_BODY: usize = 16 * 1024;

fn refuse(e: QueryError) -> ApiError {
    let status = match e {
        QueryError::Limit(_) => StatusCode::TOO_MANY_REQUESTS,
        QueryError::Unknown(_) => StatusCode::NOT_FOUND,
        QueryError::NoRunner => StatusCode::SERVICE_UNAVAILABLE,
        QueryError::Store(_) | QueryError::Thread(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError(status, e.to_string())
}

/// Whether this host has a route to `peer` (the kernel answers a UDP connect without sending).
fn route_to(peer: SocketAddr) -> Result<(), String> {
    let local: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().map_err(|_| "address".to_string())?
    } else {
        "[::]:0".parse().map_err(|_| "address".to_string())?
    };
    let s = UdpSocket::bind(local).map_err(|e| format!("cannot check the route to {peer}: {e}"))?;
    s.connect(peer)
        .map_err(|e| format!("peer {peer} is unreachable from this agent: {e}"))
}

fn new_id() -> String {
    let mut b = [0u8; 8];
    rand::Rng::fill(&mut rand::rng(), &mut b[..]);
    format!(
        "q{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

pub(super) async fn create(
    State(st): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    b: Bytes,
) -> ApiResult {
    if b.len() > MAX_BODY {
        return Err(bad(format!("body longer than {MAX_BODY} bytes")));
    }
    let req: QueryRequest = serde_json::from_slice(&b).map_err(|e| bad(format!("body: {e}")))?;
    let spec = QuerySpec::from_request(
        req,
        new_id(),
        client.ip().to_string(),
        mgrp_clock::realtime_ns(),
    )
    .map_err(bad)?;
    route_to(spec.peer).map_err(|why| ApiError(StatusCode::UNPROCESSABLE_ENTITY, why))?;
    let v = st.queries.create(spec, &st).map_err(refuse)?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

pub(super) async fn list(State(st): State<AppState>) -> ApiResult {
    Ok(Json(st.queries.list(&st)).into_response())
}

pub(super) async fn get(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let v = st.queries.get(&id, &st).map_err(refuse)?;
    Ok(Json(v).into_response())
}

pub(super) async fn delete(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult {
    st.queries.delete(&id, &st).map_err(refuse)?;
    Ok(Json(serde_json::json!({ "deleted": id })).into_response())
}
