//! `/v1/mpat`: list MPAT aggregates with their rates (GET), create one (POST), change its
//! weights (PUT /v1/mpat/NAME), delete it (DELETE /v1/mpat/NAME). Bodies are JSON, parsed
//! here so that a bad one gets our message.

use super::{ApiResult, AppState};
use crate::mpat::{AggregateSpec, MemberSpec, MpatError, MpatState};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

/// Largest request body: 16 members are far below it.
const MAX_BODY: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reweight {
    members: Vec<MemberSpec>,
}

fn status(e: &MpatError) -> StatusCode {
    match e {
        MpatError::BadInput(_) => StatusCode::BAD_REQUEST,
        MpatError::Unknown(_) => StatusCode::NOT_FOUND,
        MpatError::Conflict(_) => StatusCode::CONFLICT,
        MpatError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        MpatError::Kernel(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn refuse(e: MpatError) -> super::ApiError {
    super::ApiError(status(&e), e.to_string())
}

fn state(st: &AppState) -> Result<Arc<MpatState>, super::ApiError> {
    st.mpat().ok_or_else(|| {
        super::ApiError(
            StatusCode::NOT_FOUND,
            "MPAT is not configured: add [mpat] to the agent's configuration".into(),
        )
    })
}

fn body<T: serde::de::DeserializeOwned>(b: &Bytes) -> Result<T, super::ApiError> {
    if b.len() > MAX_BODY {
        return Err(super::bad(format!("body longer than {MAX_BODY} bytes")));
    }
    serde_json::from_slice(b).map_err(|e| super::bad(format!("body: {e}")))
}

pub(super) async fn list(State(st): State<AppState>) -> ApiResult {
    let view = match st.mpat() {
        Some(m) => m.view(mgrp_clock::now_ns()),
        None => crate::mpat::MpatView::not_configured(),
    };
    Ok(Json(view).into_response())
}

pub(super) async fn create(State(st): State<AppState>, b: Bytes) -> ApiResult {
    let m = state(&st)?;
    let spec: AggregateSpec = body(&b)?;
    let paths = crate::mpat::path_infos(&st);
    let warnings = m.with(|book| book.create(&spec, &paths)).map_err(refuse)?;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "name": spec.name, "warnings": warnings })),
    )
        .into_response())
}

pub(super) async fn reweight(
    State(st): State<AppState>,
    Path(name): Path<String>,
    b: Bytes,
) -> ApiResult {
    let m = state(&st)?;
    let r: Reweight = body(&b)?;
    m.with(|book| book.reweight(&name, &r.members))
        .map_err(refuse)?;
    Ok(Json(serde_json::json!({ "name": name })).into_response())
}

pub(super) async fn delete(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let m = state(&st)?;
    m.with(|book| book.delete(&name)).map_err(refuse)?;
    Ok(Json(serde_json::json!({ "deleted": name })).into_response())
}
