//! Who may ask: loopback clients need nothing; any other needs the token, as
//! `Authorization: Bearer TOKEN` (the scheme in any case) or, where a header cannot be set
//! (EventSource, the dashboard's links), as `?access_token=` percent-encoded.

use super::query::{raw, ACCESS_TOKEN};
use super::{error, AppState};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;

/// Static files carry no data: anyone who can reach the agent may load the page and the spec.
fn is_public(path: &str) -> bool {
    path == "/" || path.starts_with("/dashboard/") || path == "/v1/openapi.yaml"
}

/// The token in `Authorization: Bearer TOKEN` (RFC 7235: the scheme is case-insensitive).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The token in the query, percent-decoded (`+` stays `+`: tokens are not form text).
pub fn query_token(query: &str) -> Option<Vec<u8>> {
    let v = raw(query, ACCESS_TOKEN)?;
    Some(percent_encoding::percent_decode_str(v).collect())
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn auth(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if peer.ip().is_loopback() || is_public(req.uri().path()) {
        return next.run(req).await;
    }
    let given: Option<Vec<u8>> = bearer(req.headers())
        .map(|t| t.as_bytes().to_vec())
        .or_else(|| req.uri().query().and_then(query_token));
    match (&st.token(), given.as_deref()) {
        (Some(t), Some(g)) if constant_time_eq(t.as_bytes(), g) => next.run(req).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", v.parse().unwrap());
        h
    }

    #[test]
    fn bearer_scheme_in_any_case() {
        for v in ["Bearer abc", "bearer abc", "BEARER  abc ", " BeArEr abc"] {
            assert_eq!(bearer(&headers(v)), Some("abc"), "{v:?}");
        }
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn query_token_is_percent_decoded() {
        let t = "a+b/c=d";
        // As the dashboard sends it (URLSearchParams), and as a hand-typed URL might.
        assert_eq!(
            query_token("x=1&access_token=a%2Bb%2Fc%3Dd").as_deref(),
            Some(t.as_bytes())
        );
        assert_eq!(
            query_token("access_token=a+b/c=d").as_deref(),
            Some(t.as_bytes())
        );
        assert_eq!(query_token("x=1"), None);
    }

    #[test]
    fn equal_only_when_equal() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
