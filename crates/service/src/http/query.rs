//! Query strings, strictly: every parameter at most once, none the endpoint does not know
//! (a misspelt `maxage=0s` must not silently return a stored value), all errors ours (JSON).

use super::{bad, ApiError};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The parameter the auth layer reads; accepted by every endpoint.
pub const ACCESS_TOKEN: &str = "access_token";

/// At most this many parameters in one query (every endpoint knows fewer).
const MAX_PARAMS: usize = 32;

/// The query's parameters (form-decoded), each once.
pub fn pairs(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k.is_empty() && v.is_empty() {
            continue; // `a=1&&b=2`
        }
        if out.len() == MAX_PARAMS {
            return Err(bad(format!("more than {MAX_PARAMS} query parameters")));
        }
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(bad(format!("parameter `{k}` given more than once")));
        }
        out.push((k.into_owned(), v.into_owned()));
    }
    Ok(out)
}

/// The raw (still percent-encoded) value of `name`, if given once or more.
pub fn raw<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Parameters into `T` (a struct of `Option<String>` with `deny_unknown_fields`), refusing
/// duplicates and unknown names with a message that names them.
pub fn parse<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ApiError> {
    let map: serde_json::Map<String, serde_json::Value> = pairs(query.unwrap_or(""))?
        .into_iter()
        .filter(|(k, _)| k != ACCESS_TOKEN)
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|e| bad(e.to_string().replace("field", "parameter")))
}

/// An extractor like axum's `Query`, with [`parse`]'s rules and JSON errors.
pub struct Q<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parse(parts.uri.query()).map(Q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Two {
        path: Option<String>,
        max_age: Option<String>,
    }

    fn why(e: ApiError) -> String {
        e.1
    }

    #[test]
    fn decodes_and_ignores_the_token() {
        let q: Two = parse(Some("path=a-%3Eb&max_age=5s&access_token=x%2By")).unwrap();
        assert_eq!(
            q,
            Two {
                path: Some("a->b".into()),
                max_age: Some("5s".into())
            }
        );
        let q: Two = parse(None).unwrap();
        assert_eq!(q.path, None);
    }

    #[test]
    fn unknown_and_duplicate_parameters_are_named() {
        let e = why(parse::<Two>(Some("path=a&maxage=0s")).unwrap_err());
        assert!(e.contains("unknown parameter `maxage`"), "{e}");
        assert!(e.contains("max_age"), "names what it knows: {e}");
        let e = why(parse::<Two>(Some("path=a&path=b")).unwrap_err());
        assert_eq!(e, "parameter `path` given more than once");
        let many = (0..40)
            .map(|i| format!("p{i}=1"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(why(parse::<Two>(Some(&many)).unwrap_err()).contains("more than 32"));
    }

    #[test]
    fn raw_value_is_left_encoded() {
        assert_eq!(
            raw("a=1&access_token=x%2By%3D", "access_token"),
            Some("x%2By%3D")
        );
        assert_eq!(raw("xaccess_token=1", "access_token"), None);
        assert_eq!(raw("", "access_token"), None);
    }
}
